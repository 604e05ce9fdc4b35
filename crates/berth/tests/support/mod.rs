//! What the end-to-end tests of `berth run` share: berth as a real process (so it can be
//! killed with SIGKILL), bursts of pods, and the invariants every run must keep.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_testcluster::TestCluster;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

/// A single replica's configuration: no leader election, client limits raised.
pub const CONFIG: &str =
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
    clientConnection: {qps: 1000, burst: 1000}\nleaderElection: {leaderElect: false}\n\
    profiles: [{schedulerName: default-scheduler}]\n";

/// What every end-to-end test starts from: its own cluster (nodes are cluster-scoped, so
/// tests cannot share one), a scratch directory and a runtime.
pub struct Env {
    pub cluster: TestCluster,
    pub dir: PathBuf,
    pub rt: tokio::runtime::Runtime,
}

impl Env {
    pub fn new(test: &str) -> Env {
        let cluster = TestCluster::start().unwrap_or_else(|e| panic!("{e}"));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        Env {
            cluster,
            dir: scratch(test),
            rt,
        }
    }
}

/// A `berth run` process.
pub struct Berth {
    pub name: String,
    pub child: Child,
    pub metrics_port: u16,
    pub log: PathBuf,
}

impl Berth {
    /// Starts `berth run` with `config` (YAML text) against `kubeconfig`; `name` names its
    /// files. Its identity in the lease is the host name plus a random suffix (see
    /// [`Berth::identity`]), whatever the environment says: `POD_NAME` and `HOSTNAME` are
    /// left out of it, as in a shell that does not export them.
    pub fn start(dir: &Path, name: &str, kubeconfig: &Path, config: &str) -> Berth {
        let config_path = dir.join(format!("{name}-config.yaml"));
        std::fs::write(&config_path, config).expect("config");
        let metrics_port = free_port();
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--config")
            .arg(&config_path)
            .arg("--metrics-bind-address")
            .arg(format!("127.0.0.1:{metrics_port}"))
            .env_remove("POD_NAME")
            .env_remove("HOSTNAME")
            .env("RUST_LOG", "info,kube=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("starting berth");
        Berth {
            name: name.into(),
            child,
            metrics_port,
            log,
        }
    }

    /// `/metrics`, or empty when not answering.
    pub fn metrics(&self) -> String {
        http_get(self.metrics_port, "/metrics").1
    }

    /// The value of a metric line starting with `prefix` (summed over matches).
    pub fn metric(&self, prefix: &str) -> f64 {
        self.metrics()
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Its identity in the lease, from its first log lines (waits up to 30 s for them).
    pub fn identity(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            if let Some(id) = text
                .split("identity=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
            {
                return id.trim_matches('"').to_string();
            }
            assert!(
                Instant::now() < deadline,
                "{} logged no identity",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits up to `within` for the process to exit; its status.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// The tail of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// SIGTERM (what the kubelet sends), then waits for the exit status.
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// SIGKILL.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Berth {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A plain HTTP GET on loopback: (status, body); (0, "") when nothing answers.
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::Read;
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .is_err()
    {
        return (0, String::new());
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    let code = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// A scratch directory for configs and logs, kept under target/ so a failure can be read.
pub fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// scheduler_perf's pod: 100m / 500Mi, requests = limits.
pub fn perf_pod(ns: &str, name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "500Mi"},
                              "limits": {"cpu": "100m", "memory": "500Mi"}}}]
        }
    })
}

/// Creates `pods` with up to 64 requests in flight.
pub async fn create_all(client: &Client, pods: Vec<Value>) {
    let stream = futures::stream::iter(pods.into_iter().map(|p| {
        let client = client.clone();
        async move {
            let ns = p["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string();
            let api: Api<Pod> = Api::namespaced(client, &ns);
            let pod: Pod = serde_json::from_value(p).expect("pod");
            for attempt in 0..20 {
                match api.create(&PostParams::default(), &pod).await {
                    Ok(_) => return,
                    Err(kube::Error::Api(s)) if s.code == 409 => return,
                    Err(e) if attempt < 19 => {
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    Err(e) => panic!("creating a pod: {e}"),
                }
            }
        }
    }))
    .buffer_unordered(64);
    stream.collect::<Vec<()>>().await;
}

/// How many pods of `ns` are bound.
pub async fn bound(client: &Client, ns: &str) -> usize {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    match api.list(&ListParams::default()).await {
        Ok(l) => l
            .items
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count(),
        Err(_) => 0,
    }
}

/// Waits until `n` pods of `ns` are bound, or panics after `timeout` with `why()`.
pub async fn wait_bound(
    client: &Client,
    ns: &str,
    n: usize,
    timeout: Duration,
    why: impl Fn() -> String,
) {
    let start = Instant::now();
    loop {
        let b = bound(client, ns).await;
        if b >= n {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "{b}/{n} pods bound after {timeout:?}\n{}",
            why()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn millis(
    q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    memory: bool,
) -> i64 {
    let Some(q) = q else { return 0 };
    let s = q.0.as_str();
    let (num, mult): (&str, f64) = if let Some(n) = s.strip_suffix('m') {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix("Mi") {
        (n, 1024.0 * 1024.0)
    } else if let Some(n) = s.strip_suffix("Gi") {
        (n, 1024.0 * 1024.0 * 1024.0)
    } else {
        (s, 1.0)
    };
    let v = num.parse::<f64>().unwrap_or(0.0) * mult;
    if memory {
        v as i64
    } else {
        (v * 1000.0).round() as i64
    }
}

/// No node holds more pods, CPU or memory than it allocates (pods as the API server has them).
pub async fn assert_no_overcommit(client: &Client) {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items;
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items;
    let mut used: BTreeMap<String, (i64, i64, i64)> = BTreeMap::new();
    for p in &pods {
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let e = used.entry(node).or_default();
        e.2 += 1;
        for c in &p.spec.as_ref().expect("spec").containers {
            let req = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            e.0 += millis(req.and_then(|r| r.get("cpu")), false);
            e.1 += millis(req.and_then(|r| r.get("memory")), true);
        }
    }
    for n in &nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        let alloc = n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .expect("allocatable");
        let (cpu, mem, count) = used.get(&name).copied().unwrap_or_default();
        assert!(
            cpu <= millis(alloc.get("cpu"), false),
            "node {name} overcommitted: {cpu}m CPU"
        );
        assert!(
            mem <= millis(alloc.get("memory"), true),
            "node {name} overcommitted: {mem} bytes"
        );
        assert!(
            count <= millis(alloc.get("pods"), false) / 1000,
            "node {name} holds {count} pods"
        );
    }
}

/// Creates `n` scheduler_perf nodes (4 CPU, 32Gi, 110 pods) named `{prefix}{i}`.
pub async fn perf_nodes(cluster: &TestCluster, prefix: &str, n: usize) {
    for i in 0..n {
        cluster
            .create_node(&format!("{prefix}{i}"), "4", "32Gi", 110, &[])
            .await
            .expect("node");
    }
}
