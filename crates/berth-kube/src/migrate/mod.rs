//! `berth migrate`: Koordinator's PodMigrationJob controller against a real API server, a
//! process of its own as koord-descheduler is Koordinator's (see docs/pod-migration.md for
//! why not inside `berth run`).
//!
//! It drives the pure controller of [`berth_core::migration`] unchanged: watches keep
//! PodMigrationJobs, Reservations and Pods ([`cache`]); on every change (and once a second,
//! for `ttl`s, Reservation time-outs and refused evictions to be retried) one pass computes
//! the actions from that view and the wall clock, and [`perform`] carries them out: a
//! Reservation created or deleted, a pod evicted through `pods/eviction` (so the API server
//! applies PodDisruptionBudgets; a 429 is recorded on the job and retried on a later pass),
//! a job's spec and status replaced. The scheduler (`berth run`) places the Reservation and
//! the replacement pod; kube-controller-manager's workload controllers create the
//! replacement.
//!
//! It also keeps the room of pods scaled away from an opted-in workload ([`keep`]): it
//! watches ReplicaSets, Deployments and StatefulSets for their `replicas` and opt-in, and
//! each pass first creates the Reservations for the pods seen going since the last one.
//!
//! The controller keeps nothing between passes but what its watches show, as the pure
//! controller keeps everything in the jobs: a restart carries on. A job it just wrote is read
//! as written until the watch shows the write (or a few seconds passed), so a pass never acts
//! twice on the same state of a job (a second eviction, a second Reservation), and the
//! arbiter counts it as it now is.

pub mod cache;
pub mod keep;
mod perform;
mod reserved;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_api::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use berth_api::k8s_openapi::api::core::v1::{Node, Pod};
use berth_api::migration::PodMigrationJob;
use berth_api::nrt::NodeResourceTopology;
use berth_api::reservation::Reservation;
use berth_core::migration::{self, MigrationArgs, MigrationView};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::Client;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::kinds::{Served, RESERVATION_GROUP};
use crate::leader::{Elector, Fence, Role};
use crate::settings::LeaderElection;
use std::sync::atomic::AtomicBool;
use tokio::sync::{oneshot, watch};

/// How `berth migrate` runs.
#[derive(Debug, Clone)]
pub struct MigrateOptions {
    /// Koordinator's arbitration limits.
    pub args: MigrationArgs,
    /// A pass at least this often, changes or not (time-outs, retried evictions).
    pub resync: Duration,
    /// Leader election on its own Lease ([`LEASE_NAME`]), so that of several replicas only
    /// one acts (two could both evict); `None`: this process acts from the start.
    pub leader_election: Option<LeaderElection>,
    /// This process's identity in the Lease.
    pub identity: String,
}

/// The Lease `berth migrate` elects its leader on (in the namespace it runs in), not
/// `berth run`'s: the two are different controllers, each with one leader.
pub const LEASE_NAME: &str = "berth-migrate";

impl Default for MigrateOptions {
    fn default() -> Self {
        Self {
            args: MigrationArgs::default(),
            resync: Duration::from_secs(1),
            leader_election: None,
            identity: crate::leader::identity(),
        }
    }
}

impl MigrateOptions {
    /// Leader election with client-go's timings on `namespace`/[`LEASE_NAME`].
    pub fn elect_leader_in(mut self, namespace: &str) -> Self {
        self.leader_election = Some(LeaderElection {
            leader_elect: true,
            resource_name: LEASE_NAME.into(),
            resource_namespace: namespace.into(),
            ..LeaderElection::default()
        });
        self
    }
}

/// What the controller did, for logs and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Passes run.
    pub passes: u64,
    /// Reservations created.
    pub reservations_created: u64,
    /// Reservations deleted.
    pub reservations_deleted: u64,
    /// Pods evicted.
    pub evicted: u64,
    /// Evictions refused (a PodDisruptionBudget's 429, or another error).
    pub evictions_refused: u64,
    /// Job writes.
    pub job_writes: u64,
    /// PodMigrationJobs created for pods on newly reserved CPUs.
    pub jobs_created: u64,
    /// Reservations created to keep a scaled-down workload's room (also counted in
    /// `reservations_created`).
    pub reservations_kept: u64,
    /// Writes that failed (other than refused evictions).
    pub failed: u64,
    /// It stopped because it lost the leader lease (or was refused it).
    pub lost_lease: bool,
}

/// The resource of PodMigrationJobs.
pub fn job_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(RESERVATION_GROUP, "v1alpha1", "PodMigrationJob"),
        "podmigrationjobs",
    )
}

/// The controller's view: the caches read once per pass.
struct View {
    pods: BTreeMap<String, Pod>,
    reservations: BTreeMap<String, Reservation>,
}

impl MigrationView for View {
    fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        self.pods.get(&format!("{namespace}/{name}"))
    }

    fn pods(&self) -> Box<dyn Iterator<Item = &Pod> + '_> {
        Box::new(self.pods.values())
    }

    fn reservation(&self, name: &str) -> Option<&Reservation> {
        self.reservations.get(name)
    }
}

/// Reads a watched object as berth's type; one that cannot be read is logged and left out.
fn decode<T: serde::de::DeserializeOwned>(what: &str, obj: &DynamicObject) -> Option<T> {
    let value = serde_json::to_value(obj).ok()?;
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(
                kind = what,
                name = obj.metadata.name.as_deref().unwrap_or(""),
                error = %format!("{}: {}", e.path(), e.inner()),
                "cannot be read; left out"
            );
            None
        }
    }
}

/// The caches of one run.
struct Caches {
    jobs: cache::Map<DynamicObject>,
    reservations: cache::Map<DynamicObject>,
    pods: cache::Map<Pod>,
    replicasets: cache::Map<ReplicaSet>,
    deployments: cache::Map<Deployment>,
    statefulsets: cache::Map<StatefulSet>,
    nodes: cache::Map<Node>,
    /// NodeResourceTopologies, if the API server serves them.
    nrts: Option<cache::Map<DynamicObject>>,
    /// Pods seen going, in the order they went ([`keep`]).
    gone: std::sync::Mutex<std::sync::mpsc::Receiver<keep::Gone>>,
}

impl Caches {
    /// How many kinds are watched (each lists once before the first pass).
    fn watched(&self) -> usize {
        7 + usize::from(self.nrts.is_some())
    }

    fn start(
        client: &Client,
        served: &Served,
        tasks: &mut JoinSet<()>,
        changed: &Arc<Notify>,
        synced: &Synced,
    ) -> Self {
        let (went, gone) = std::sync::mpsc::channel();
        let on_pod = move |pods: &BTreeMap<String, Pod>, pod: &Pod, change| {
            if let Some(g) = keep::on_pod(pods, pod, change) {
                let _ = went.send(g);
            }
        };
        Caches {
            jobs: cache::watch(
                tasks,
                Api::<DynamicObject>::all_with(client.clone(), &job_resource()),
                changed.clone(),
                synced.clone(),
            ),
            reservations: cache::watch(
                tasks,
                Api::<DynamicObject>::all_with(client.clone(), &Served::reservation_resource()),
                changed.clone(),
                synced.clone(),
            ),
            pods: cache::watch_with(
                tasks,
                Api::<Pod>::all(client.clone()),
                changed.clone(),
                synced.clone(),
                on_pod,
            ),
            replicasets: cache::watch(
                tasks,
                Api::all(client.clone()),
                changed.clone(),
                synced.clone(),
            ),
            deployments: cache::watch(
                tasks,
                Api::all(client.clone()),
                changed.clone(),
                synced.clone(),
            ),
            statefulsets: cache::watch(
                tasks,
                Api::all(client.clone()),
                changed.clone(),
                synced.clone(),
            ),
            nodes: cache::watch(
                tasks,
                Api::all(client.clone()),
                changed.clone(),
                synced.clone(),
            ),
            nrts: served.nrt.as_ref().map(|ar| {
                cache::watch(
                    tasks,
                    Api::<DynamicObject>::all_with(client.clone(), ar),
                    changed.clone(),
                    synced.clone(),
                )
            }),
            gone: std::sync::Mutex::new(gone),
        }
    }

    /// The PodMigrationJobs seed 004's descheduler asks for now ([`reserved`]).
    fn reserved_cpu_jobs(
        &self,
        jobs: &[Arc<PodMigrationJob>],
    ) -> migration::reserved_cpus::Planned {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let nrts: BTreeMap<String, NodeResourceTopology> = match &self.nrts {
            None => BTreeMap::new(),
            Some(m) => m
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .filter_map(|o| match crate::kinds::nrt(o.clone()) {
                    Ok(berth_core::Object::NodeResourceTopology(t)) => {
                        Some((t.metadata.name.clone().unwrap_or_default(), (*t).clone()))
                    }
                    _ => None,
                })
                .collect(),
        };
        let pods = self.pods.lock().unwrap_or_else(|p| p.into_inner()).clone();
        reserved::plan(&nodes, &nrts, &pods, jobs)
    }

    /// The Reservations keeping the room of the pods scaled away since the last call.
    fn kept(&self) -> Vec<Reservation> {
        let gone: Vec<keep::Gone> = self
            .gone
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_iter()
            .collect();
        if gone.is_empty() {
            return Vec::new();
        }
        let replicasets = self
            .replicasets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let deployments = self
            .deployments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let statefulsets = self
            .statefulsets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let workloads = keep::Workloads {
            replicasets: &replicasets,
            deployments: &deployments,
            statefulsets: &statefulsets,
        };
        gone.iter()
            .filter_map(|g| keep::kept(g, &workloads))
            .collect()
    }
}

type Synced = tokio::sync::mpsc::UnboundedSender<()>;

impl Caches {
    fn snapshot(&self) -> (Vec<Arc<PodMigrationJob>>, View) {
        let lock = |m: &cache::Map<DynamicObject>| {
            m.lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned()
                .collect::<Vec<_>>()
        };
        let jobs = lock(&self.jobs)
            .iter()
            .filter_map(|o| decode::<PodMigrationJob>("PodMigrationJob", o))
            .map(Arc::new)
            .collect();
        let reservations = lock(&self.reservations)
            .iter()
            .filter_map(|o| decode::<Reservation>("Reservation", o))
            .map(|r| (r.metadata.name.clone().unwrap_or_default(), r))
            .collect();
        let pods = self.pods.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (jobs, View { pods, reservations })
    }
}

/// Jobs written and not yet seen back: by name, the resourceVersions the writes replaced (any
/// of them in the cache is stale), the job as last written, and when.
type Pending = HashMap<String, (Vec<String>, PodMigrationJob, Instant)>;

/// How long a job written is read as written while the watch still shows the version before.
const WRITE_SEEN_WITHIN: Duration = Duration::from_secs(5);

/// Runs the controller until `shutdown` completes, or, with leader election, until this
/// process loses the lease (it then stops at once, as kube-scheduler and `berth run` do: the
/// process exits and restarts as a standby). A standby keeps its watches warm and writes
/// nothing; every write of a leader is fenced by the lease's renew deadline.
pub async fn run(
    client: Client,
    options: MigrateOptions,
    shutdown: impl Future<Output = ()>,
) -> Outcome {
    let changed = Arc::new(Notify::new());
    let (synced, mut lists) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = JoinSet::new();
    let served = Served::discover(&client).await;
    let caches = Caches::start(&client, &served, &mut tasks, &changed, &synced);
    let mut outcome = Outcome::default();
    let mut election = Election::start(&client, &options);
    tokio::pin!(shutdown);
    // The first pass waits for every kind's first list.
    for _ in 0..caches.watched() {
        tokio::select! {
            () = &mut shutdown => {
                election.stop().await;
                return outcome;
            }
            _ = lists.recv() => {}
        }
    }
    tracing::info!("PodMigrationJob controller running");
    let mut pending: Pending = HashMap::new();
    loop {
        while lists.try_recv().is_ok() {}
        match election.role() {
            Role::Leader if election.fence.allows() => {
                pass(
                    &client,
                    &caches,
                    &options,
                    &election.fence,
                    &mut pending,
                    &mut outcome,
                )
                .await;
            }
            Role::Lost | Role::Forbidden => {
                tracing::error!(role = ?election.role(), "leader lease lost or refused; stopping");
                outcome.lost_lease = true;
                break;
            }
            _ => {}
        }
        tokio::select! {
            () = &mut shutdown => break,
            () = changed.notified() => {
                // Let a burst of watch events land before the next pass.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ = election.changed() => {}
            () = tokio::time::sleep(options.resync) => {}
        }
    }
    election.stop().await;
    tasks.abort_all();
    outcome
}

/// The leader election of one run, or none.
struct Election {
    role: watch::Receiver<Role>,
    fence: Arc<Fence>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Keeps the role's sender alive without an elector (`changed` then never fires).
    _leader: Option<watch::Sender<Role>>,
}

impl Election {
    fn start(client: &Client, options: &MigrateOptions) -> Self {
        let Some(le) = options.leader_election.clone() else {
            let (tx, rx) = watch::channel(Role::Leader);
            return Self {
                role: rx,
                fence: Fence::open(),
                stop: None,
                task: None,
                _leader: Some(tx),
            };
        };
        let (tx, rx) = watch::channel(Role::Standby);
        let (stop, stopped) = oneshot::channel();
        let fence = Fence::closed();
        let elector = Elector::new(
            client.clone(),
            le,
            options.identity.clone(),
            fence.clone(),
            Arc::new(AtomicBool::new(true)),
        );
        Self {
            role: rx,
            fence,
            stop: Some(stop),
            task: Some(tokio::spawn(elector.run(tx, stopped))),
            _leader: None,
        }
    }

    fn role(&self) -> Role {
        *self.role.borrow()
    }

    async fn changed(&mut self) {
        if self.role.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Stops the elector, releasing the lease if held.
    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

/// The jobs as the cache shows them, but a job whose last write the watch has not shown yet
/// as written: its cached version is stale, and a pass on it would take a step twice (and the
/// arbiter would not count it as it now is). Entries seen back, timed out or of jobs gone
/// leave `pending`.
fn read_as_written(
    jobs: Vec<Arc<PodMigrationJob>>,
    pending: &mut Pending,
) -> Vec<Arc<PodMigrationJob>> {
    let jobs: Vec<Arc<PodMigrationJob>> = jobs
        .into_iter()
        .map(|j| {
            let name = j.metadata.name.clone().unwrap_or_default();
            match pending.remove(&name) {
                Some((before, written, at))
                    if at.elapsed() < WRITE_SEEN_WITHIN
                        && before
                            .iter()
                            .any(|b| j.metadata.resource_version.as_ref() == Some(b)) =>
                {
                    let job = Arc::new(written.clone());
                    pending.insert(name, (before, written, at));
                    job
                }
                _ => j,
            }
        })
        .collect();
    pending.retain(|name, _| jobs.iter().any(|j| j.metadata.name.as_ref() == Some(name)));
    jobs
}

/// One pass: the actions for the jobs as the caches show them, performed in order.
async fn pass(
    client: &Client,
    caches: &Caches,
    options: &MigrateOptions,
    fence: &Fence,
    pending: &mut Pending,
    outcome: &mut Outcome,
) {
    outcome.passes += 1;
    let kept = caches.kept();
    let (jobs, view) = caches.snapshot();
    let now = crate::effects::wall_clock_ms();
    let ctx = perform::Ctx {
        client,
        view: &view,
        now,
    };
    for r in kept {
        if !fence.allows() {
            tracing::warn!(
                "the leader lease's renew deadline passed mid-pass; kept room not written"
            );
            return;
        }
        if perform::create_reservation(&ctx, &r, outcome).await {
            outcome.reservations_kept += 1;
            tracing::info!(
                reservation = r.metadata.name.as_deref().unwrap_or(""),
                kept_for = r
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(migration::keep_capacity::LABEL_KEPT_FOR))
                    .map(String::as_str)
                    .unwrap_or(""),
                "room of a pod scaled away kept"
            );
        }
    }
    let planned = caches.reserved_cpu_jobs(&jobs);
    if !planned.jobs.is_empty() || !planned.refused.is_empty() {
        reserved::create(client, planned, fence, outcome).await;
    }
    let jobs = read_as_written(jobs, pending);
    if jobs.is_empty() {
        return;
    }
    let actions = migration::reconcile(&jobs, &view, now, &options.args);
    if !actions.is_empty() {
        tracing::debug!(?actions, "pass");
    }
    let mut current: HashMap<String, PodMigrationJob> = jobs
        .iter()
        .map(|j| (j.metadata.name.clone().unwrap_or_default(), (**j).clone()))
        .collect();
    for action in actions {
        if !fence.allows() {
            tracing::warn!(
                "the leader lease's renew deadline passed mid-pass; nothing more written"
            );
            return;
        }
        perform::action(&ctx, action, &mut current, pending, outcome).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, rv: &str, phase: &str) -> PodMigrationJob {
        let mut j = PodMigrationJob::default();
        j.metadata.name = Some(name.into());
        j.metadata.resource_version = Some(rv.into());
        j.status.get_or_insert_with(Default::default).phase = phase.into();
        j
    }

    #[test]
    fn a_job_is_read_as_written_until_the_watch_shows_the_write() {
        let mut pending: Pending = HashMap::new();
        pending.insert(
            "a".into(),
            (
                vec!["1".into(), "2".into()],
                job("a", "3", "Running"),
                Instant::now(),
            ),
        );
        // The cache still has version 1 (or the one between two writes): as written.
        for stale in ["1", "2"] {
            let read = read_as_written(vec![Arc::new(job("a", stale, "Pending"))], &mut pending);
            assert_eq!(read[0].status.as_ref().unwrap().phase, "Running");
            assert_eq!(read[0].metadata.resource_version.as_deref(), Some("3"));
            assert!(pending.contains_key("a"));
        }
        // The watch shows the write (or anything newer): the cache wins, the entry goes.
        let read = read_as_written(vec![Arc::new(job("a", "3", "Running"))], &mut pending);
        assert_eq!(read[0].metadata.resource_version.as_deref(), Some("3"));
        assert!(pending.is_empty());
    }

    #[test]
    fn a_write_not_seen_in_time_or_of_a_job_gone_is_forgotten() {
        let mut pending: Pending = HashMap::new();
        let long_ago = Instant::now()
            .checked_sub(WRITE_SEEN_WITHIN + Duration::from_secs(1))
            .unwrap_or_else(Instant::now);
        pending.insert(
            "a".into(),
            (vec!["1".into()], job("a", "2", "Running"), long_ago),
        );
        pending.insert(
            "gone".into(),
            (
                vec!["1".into()],
                job("gone", "2", "Running"),
                Instant::now(),
            ),
        );
        let read = read_as_written(vec![Arc::new(job("a", "1", "Pending"))], &mut pending);
        assert_eq!(read[0].status.as_ref().unwrap().phase, "Pending");
        assert!(pending.is_empty(), "{pending:?}");
    }
}
