//! The workload, phase by phase, through one unthrottled client: namespaces and nodes, then
//! (once a scheduler runs) reservations, init pods, and the measured pods, whose bindings a
//! watch times.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::Client;
use serde_json::json;
use tokio::sync::oneshot;

use crate::case::Case;
use crate::error::{kube_err, Error};
use crate::measure::{per_second, Throughput};
use crate::objects::{self, PodView, ReservationView, RESERVATION_GROUP};
use crate::procstat::{self, Sample};

/// The namespace of the init pods.
pub const INIT_NAMESPACE: &str = "init";
/// The namespace of the measured pods.
pub const MEASURED_NAMESPACE: &str = "measured";
/// The namespace of the unschedulable pods.
pub const FLOOD_NAMESPACE: &str = "flood";

/// Something to call while waiting, to fail fast (e.g. when the scheduler process died).
pub type Alive<'a> = &'a mut (dyn FnMut() -> Result<(), Error> + Send);

/// The name of pod `i` of a phase.
pub fn pod_name(i: usize) -> String {
    format!("pod-{i:06}")
}

/// The name of node `i`.
pub fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

/// CPU and memory of everything that runs during the measured phase.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// The scheduler under test.
    pub scheduler: Sample,
    /// kube-apiserver (when found among this process's children).
    pub apiserver: Option<Sample>,
    /// etcd.
    pub etcd: Option<Sample>,
    /// This process (the harness's client and watch).
    pub harness: Sample,
}

impl Usage {
    /// Reads every counter now.
    pub fn take(scheduler_pid: u32) -> Result<Self, Error> {
        Ok(Self {
            scheduler: procstat::sample(scheduler_pid)?,
            apiserver: procstat::child_named("kube-apiserver")
                .and_then(|p| procstat::sample(p).ok()),
            etcd: procstat::child_named("etcd").and_then(|p| procstat::sample(p).ok()),
            harness: procstat::sample(std::process::id())?,
        })
    }
}

/// What the measured phase gave.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Pods measured (all bound, each once: checked).
    pub pods: usize,
    /// From the first create to the last create answered.
    pub created_in: Duration,
    /// From the start of the clock (the first create; on a backlog, the scheduler's start)
    /// to the last binding seen by the watch.
    pub elapsed: Duration,
    /// From the start of the clock to the first binding seen.
    pub first_bind: Duration,
    /// Per-second throughput samples and their statistics.
    pub throughput: Throughput,
    /// Counters before the first create.
    pub before: Usage,
    /// Counters after the last binding.
    pub after: Usage,
    /// Distinct nodes the measured pods went to.
    pub nodes_used: usize,
    /// Measured pods allocated from a reservation.
    pub from_reservations: usize,
    /// Watch events of already-bound pods (updates after the binding).
    pub updates_after_bind: u64,
}

impl Measured {
    /// Pods bound per second, start of the clock to the last binding.
    pub fn pods_per_sec(&self) -> f64 {
        self.pods as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The scheduler's CPU time during the measured phase.
    pub fn scheduler_cpu(&self) -> Duration {
        self.after
            .scheduler
            .cpu
            .saturating_sub(self.before.scheduler.cpu)
    }

    /// The scheduler's CPU milliseconds per measured pod.
    pub fn cpu_ms_per_pod(&self) -> f64 {
        self.scheduler_cpu().as_secs_f64() * 1000.0 / self.pods.max(1) as f64
    }

    /// kube-apiserver's CPU time during the measured phase.
    pub fn apiserver_cpu(&self) -> Option<Duration> {
        Some(
            self.after
                .apiserver?
                .cpu
                .saturating_sub(self.before.apiserver?.cpu),
        )
    }

    /// etcd's CPU time during the measured phase.
    pub fn etcd_cpu(&self) -> Option<Duration> {
        Some(self.after.etcd?.cpu.saturating_sub(self.before.etcd?.cpu))
    }

    /// The harness's CPU time during the measured phase.
    pub fn harness_cpu(&self) -> Duration {
        self.after
            .harness
            .cpu
            .saturating_sub(self.before.harness.cpu)
    }
}

/// The workload of one case against one API server.
#[derive(Clone)]
pub struct Workload {
    client: Client,
    case: Case,
    concurrency: usize,
}

impl std::fmt::Debug for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workload")
            .field("case", &self.case)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

impl Workload {
    /// A workload creating through `client` with at most `concurrency` creates in flight.
    pub fn new(client: Client, case: Case, concurrency: usize) -> Self {
        Self {
            client,
            case,
            concurrency: concurrency.max(1),
        }
    }

    /// The case.
    pub fn case(&self) -> &Case {
        &self.case
    }

    /// Creates the two pod namespaces and the nodes; returns how long the nodes took.
    pub async fn create_nodes(&self) -> Result<Duration, Error> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        for ns in [INIT_NAMESPACE, MEASURED_NAMESPACE, FLOOD_NAMESPACE] {
            let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))
                .map_err(|source| Error::Json {
                    context: "building a namespace".into(),
                    source,
                })?;
            api.create(&PostParams::default(), &obj)
                .await
                .map_err(kube_err(format!("creating namespace {ns}")))?;
        }
        let started = Instant::now();
        let bodies = (0..self.case.nodes)
            .map(|i| to_body(&objects::node(&node_name(i))))
            .collect::<Result<Vec<_>, _>>()?;
        self.create_all("nodes", "/api/v1/nodes", bodies).await?;
        // The API server keeps a node's status on create (kubelets register that way);
        // make sure, since every scheduling decision rests on it.
        if self.case.nodes > 0 {
            let first = node_name(0);
            let node = Api::<Node>::all(self.client.clone())
                .get(&first)
                .await
                .map_err(kube_err(format!("reading node {first}")))?;
            let has_cpu = node
                .status
                .and_then(|s| s.allocatable)
                .is_some_and(|a| a.contains_key("cpu"));
            if !has_cpu {
                return Err(Error::Check(format!(
                    "node {first} lost its status on create: the API server dropped it"
                )));
            }
        }
        Ok(started.elapsed())
    }

    /// Creates the case's reservations and waits until every one is `Available` (placed by
    /// the scheduler, which must run); returns how long that took.
    pub async fn create_reservations(&self, alive: Alive<'_>) -> Result<Duration, Error> {
        let n = self.case.reservations;
        let started = Instant::now();
        if n == 0 {
            return Ok(Duration::ZERO);
        }
        let bodies = (0..n)
            .map(|i| to_body(&objects::reservation(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let path = format!("/apis/{RESERVATION_GROUP}/v1alpha1/reservations");
        self.create_all("reservations", &path, bodies).await?;
        let api: Api<ReservationView> = Api::all(self.client.clone());
        let deadline = started + phase_timeout(n);
        loop {
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(kube_err("listing reservations"))?;
            let available = list
                .items
                .iter()
                .filter(|r| r.phase() == "Available")
                .count();
            if available >= n {
                return Ok(started.elapsed());
            }
            alive()?;
            if Instant::now() >= deadline {
                let mut phases: HashMap<&str, usize> = HashMap::new();
                for r in &list.items {
                    *phases.entry(r.phase()).or_default() += 1;
                }
                return Err(Error::Timeout {
                    what: format!("{n} reservations Available"),
                    waited: started.elapsed(),
                    got: format!("phases {phases:?}"),
                });
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Creates the init pods and waits until all are bound; returns how long that took.
    pub async fn run_init(&self, alive: Alive<'_>) -> Result<Duration, Error> {
        let n = self.case.init_pods;
        let started = Instant::now();
        if n == 0 {
            return Ok(Duration::ZERO);
        }
        let bodies = (0..n)
            .map(|i| to_body(&objects::pod(INIT_NAMESPACE, &pod_name(i), &[])))
            .collect::<Result<Vec<_>, _>>()?;
        let api: Api<PodView> = Api::namespaced(self.client.clone(), INIT_NAMESPACE);
        let watch = BindWatch::start(api, n, "init pods").await?;
        let path = format!("/api/v1/namespaces/{INIT_NAMESPACE}/pods");
        self.create_all("init pods", &path, bodies).await?;
        let log = watch.wait(started + phase_timeout(n), alive).await?;
        log.check()?;
        Ok(started.elapsed())
    }

    /// Creates the case's unschedulable pods and waits until the running scheduler has
    /// written `PodScheduled=False` on every one; returns how long that took. A scheduler
    /// started afterwards finds them as a cluster that had them pending for a while.
    pub async fn create_unschedulable(&self, alive: Alive<'_>) -> Result<Duration, Error> {
        let n = self.case.unschedulable;
        let started = Instant::now();
        if n == 0 {
            return Ok(Duration::ZERO);
        }
        let bodies = (0..n)
            .map(|i| to_body(&objects::unschedulable_pod(FLOOD_NAMESPACE, &pod_name(i))))
            .collect::<Result<Vec<_>, _>>()?;
        let path = format!("/api/v1/namespaces/{FLOOD_NAMESPACE}/pods");
        self.create_all("unschedulable pods", &path, bodies).await?;
        let api: Api<PodView> = Api::namespaced(self.client.clone(), FLOOD_NAMESPACE);
        // A status write per pod, at the scheduler's own rate (50/s on its defaults).
        let deadline = started + phase_timeout(n) + Duration::from_millis(25) * n as u32;
        loop {
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(kube_err("listing the unschedulable pods"))?;
            let found = list
                .items
                .iter()
                .filter(|p| p.found_unschedulable())
                .count();
            if let Some(p) = list.items.iter().find(|p| p.node().is_some()) {
                return Err(Error::Check(format!(
                    "unschedulable pod {:?} was bound to {:?}",
                    p.metadata.name,
                    p.node()
                )));
            }
            if found >= n {
                return Ok(started.elapsed());
            }
            alive()?;
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!("{n} pods found unschedulable"),
                    waited: started.elapsed(),
                    got: format!("{found}"),
                });
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// The measurement with the scheduler running: creates the measured pods as fast as the
    /// client can and times their bindings from a watch; `scheduler_pid`'s CPU and memory
    /// are read before the first create and after the last binding. Creation and binding
    /// share the API server, so on a small machine the creation rate can bound what is
    /// measured. Fails if a pod is left unbound or seen on two nodes.
    pub async fn run_measured(
        &self,
        scheduler_pid: u32,
        alive: Alive<'_>,
    ) -> Result<Measured, Error> {
        let (api, watch, bodies) = self.measured_pods().await?;
        let path = format!("/api/v1/namespaces/{MEASURED_NAMESPACE}/pods");
        let before = Usage::take(scheduler_pid)?;
        let t0 = Instant::now();
        self.create_all("measured pods", &path, bodies).await?;
        let created_in = t0.elapsed();
        let log = watch
            .wait(t0 + phase_timeout(self.case.pods), alive)
            .await?;
        let after = Usage::take(scheduler_pid)?;
        self.finish(&api, log, t0, created_in, before, after).await
    }

    /// The measurement on a backlog: every measured pod is created while no scheduler runs,
    /// then `start` starts the scheduler and the clock: its start-up (LISTs included) and
    /// the bindings of the whole backlog are timed, with the API server doing nothing else.
    /// This measures the scheduler rather than the harness's create rate.
    pub async fn run_backlog(
        &self,
        start: &mut (dyn FnMut() -> Result<u32, Error> + Send),
        alive: Alive<'_>,
    ) -> Result<Measured, Error> {
        let (api, watch, bodies) = self.measured_pods().await?;
        let path = format!("/api/v1/namespaces/{MEASURED_NAMESPACE}/pods");
        let created = Instant::now();
        self.create_all("measured pods", &path, bodies).await?;
        let created_in = created.elapsed();
        let early = watch.count.load(Ordering::Relaxed);
        if early > 0 {
            return Err(Error::Check(format!(
                "{early} measured pods bound before the scheduler started: another scheduler runs"
            )));
        }
        let t0 = Instant::now();
        let pid = start()?;
        let before = Usage::take(pid)?;
        let log = watch
            .wait(t0 + phase_timeout(self.case.pods), alive)
            .await?;
        let after = Usage::take(pid)?;
        self.finish(&api, log, t0, created_in, before, after).await
    }

    /// The measured pods' bodies, and a watch on their bindings that has done its LIST.
    async fn measured_pods(&self) -> Result<(Api<PodView>, BindWatch, Vec<Vec<u8>>), Error> {
        let n = self.case.pods;
        let bodies = (0..n)
            .map(|i| {
                let owner = self.case.owner_of(i);
                let labels: Vec<(&str, &str)> = owner.iter().map(|o| ("app", o.as_str())).collect();
                to_body(&objects::pod(MEASURED_NAMESPACE, &pod_name(i), &labels))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let api: Api<PodView> = Api::namespaced(self.client.clone(), MEASURED_NAMESPACE);
        let watch = BindWatch::start(api.clone(), n, "measured pods").await?;
        Ok((api, watch, bodies))
    }

    /// Checks the API's view against the watch's and sums the phase up.
    async fn finish(
        &self,
        api: &Api<PodView>,
        log: BindLog,
        t0: Instant,
        created_in: Duration,
        before: Usage,
        after: Usage,
    ) -> Result<Measured, Error> {
        let n = self.case.pods;
        log.check()?;
        // The API's view must agree with the watch's: every pod bound, on the node seen.
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(kube_err("listing the measured pods"))?;
        let mut problems = Vec::new();
        let mut from_reservations = 0;
        for pod in &list.items {
            let name = pod.metadata.name.as_deref().unwrap_or("");
            let seen = log.bound.get(name).map(|(node, _)| node.as_str());
            if pod.node() != seen {
                problems.push(format!(
                    "{name}: on {:?} in the API, {seen:?} in the watch",
                    pod.node()
                ));
            }
            if pod.reservation_allocated() {
                from_reservations += 1;
            }
        }
        if list.items.len() != n {
            problems.push(format!(
                "{} measured pods listed, {n} created",
                list.items.len()
            ));
        }
        if !problems.is_empty() {
            problems.truncate(10);
            return Err(Error::Check(problems.join("; ")));
        }
        let mut offsets: Vec<Duration> = log
            .bound
            .values()
            .map(|(_, t)| t.saturating_duration_since(t0))
            .collect();
        offsets.sort_unstable();
        let elapsed = offsets.last().copied().unwrap_or_default();
        let first_bind = offsets.first().copied().unwrap_or_default();
        let nodes_used = log
            .bound
            .values()
            .map(|(node, _)| node.as_str())
            .collect::<std::collections::HashSet<_>>()
            .len();
        Ok(Measured {
            pods: n,
            created_in,
            elapsed,
            first_bind,
            throughput: per_second(&offsets),
            before,
            after,
            nodes_used,
            from_reservations,
            updates_after_bind: log.updates_after_bind,
        })
    }

    /// POSTs every body to `path`, at most `concurrency` at once. Transient failures are
    /// retried; an `AlreadyExists` answer to a retry is success (the first attempt went
    /// through).
    async fn create_all(&self, what: &str, path: &str, bodies: Vec<Vec<u8>>) -> Result<(), Error> {
        let client = &self.client;
        futures::stream::iter(bodies)
            .map(|body| create_one(client, what, path, body))
            .buffer_unordered(self.concurrency)
            .try_for_each(|()| async { Ok(()) })
            .await
    }
}

/// How long a phase of `n` objects may take: generous, since 2 shared cores are slow.
fn phase_timeout(n: usize) -> Duration {
    Duration::from_secs(120)
        + Duration::from_millis(100).saturating_mul(u32::try_from(n).unwrap_or(u32::MAX))
}

fn to_body(v: &serde_json::Value) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(v).map_err(|source| Error::Json {
        context: "rendering an object".into(),
        source,
    })
}

async fn create_one(client: &Client, what: &str, path: &str, body: Vec<u8>) -> Result<(), Error> {
    let mut attempt = 0u32;
    loop {
        let request = http::Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .map_err(|e| Error::Check(format!("building a request to {path}: {e}")))?;
        match client.request_text(request).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if attempt > 0 && s.is_already_exists() => return Ok(()),
            Err(e) if attempt < 5 && transient(&e) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100) * attempt).await;
            }
            Err(e) => return Err(kube_err(format!("creating {what} ({path})"))(e)),
        }
    }
}

fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 429 | 500 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// What a bind watch saw.
#[derive(Debug, Default)]
struct BindLog {
    /// Per pod: the node and when the watch first saw it bound.
    bound: HashMap<String, (String, Instant)>,
    /// Pods seen on two nodes.
    violations: Vec<String>,
    /// Events of pods already seen bound, to the same node.
    updates_after_bind: u64,
}

impl BindLog {
    fn record(&mut self, pod: &PodView, at: Instant) {
        let (Some(name), Some(node)) = (pod.metadata.name.as_deref(), pod.node()) else {
            return;
        };
        match self.bound.get(name) {
            Some((first, _)) if first == node => self.updates_after_bind += 1,
            Some((first, _)) => self
                .violations
                .push(format!("{name} bound to {first}, then {node}")),
            None => {
                self.bound.insert(name.to_string(), (node.to_string(), at));
            }
        }
    }

    fn check(&self) -> Result<(), Error> {
        if self.violations.is_empty() {
            Ok(())
        } else {
            Err(Error::Check(self.violations.join("; ")))
        }
    }
}

/// A watch on the bound pods of a namespace (`spec.nodeName!=`), counting distinct pods
/// until `expected` are bound.
struct BindWatch {
    what: &'static str,
    expected: usize,
    count: Arc<AtomicUsize>,
    started: Instant,
    task: tokio::task::JoinHandle<Result<BindLog, Error>>,
}

impl BindWatch {
    /// Starts the watch and returns once its initial LIST is in, so that nothing created
    /// afterwards can be missed.
    async fn start(api: Api<PodView>, expected: usize, what: &'static str) -> Result<Self, Error> {
        let (ready_tx, ready_rx) = oneshot::channel();
        let count = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(watch_binds(api, expected, what, ready_tx, count.clone()));
        let started = Instant::now();
        match tokio::time::timeout(Duration::from_secs(60), ready_rx).await {
            Ok(Ok(())) => Ok(Self {
                what,
                expected,
                count,
                started,
                task,
            }),
            Ok(Err(_)) => match task.await {
                Ok(Err(e)) => Err(e),
                _ => Err(Error::Watch {
                    what: what.into(),
                    message: "ended before its first LIST".into(),
                }),
            },
            Err(_) => {
                task.abort();
                Err(Error::Timeout {
                    what: format!("the first LIST of the watch on {what}"),
                    waited: started.elapsed(),
                    got: "no answer".into(),
                })
            }
        }
    }

    /// Waits until every expected pod is bound, calling `alive` now and then.
    async fn wait(mut self, deadline: Instant, alive: Alive<'_>) -> Result<BindLog, Error> {
        loop {
            tokio::select! {
                r = &mut self.task => {
                    return r.map_err(|e| Error::Watch { what: self.what.into(), message: e.to_string() })?;
                }
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
            let fail = alive().err();
            if fail.is_some() || Instant::now() >= deadline {
                self.task.abort();
            }
            if let Some(e) = fail {
                return Err(e);
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!("{} {} bound", self.expected, self.what),
                    waited: self.started.elapsed(),
                    got: format!("{} bound", self.count.load(Ordering::Relaxed)),
                });
            }
        }
    }
}

async fn watch_binds(
    api: Api<PodView>,
    expected: usize,
    what: &'static str,
    ready: oneshot::Sender<()>,
    count: Arc<AtomicUsize>,
) -> Result<BindLog, Error> {
    let config = watcher::Config::default().fields("spec.nodeName!=");
    let mut stream = watcher(api, config).default_backoff().boxed();
    let mut ready = Some(ready);
    let mut log = BindLog::default();
    let mut errors = 0;
    while let Some(event) = stream.next().await {
        let now = Instant::now();
        match event {
            Ok(watcher::Event::InitDone) => {
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
            }
            Ok(watcher::Event::InitApply(pod) | watcher::Event::Apply(pod)) => {
                log.record(&pod, now)
            }
            Ok(_) => {}
            Err(e) => {
                errors += 1;
                if errors > 20 {
                    return Err(Error::Watch {
                        what: what.into(),
                        message: format!("{errors} errors, the last: {e}"),
                    });
                }
            }
        }
        count.store(log.bound.len(), Ordering::Relaxed);
        if ready.is_none() && log.bound.len() >= expected {
            return Ok(log);
        }
    }
    Err(Error::Watch {
        what: what.into(),
        message: "the stream ended".into(),
    })
}
