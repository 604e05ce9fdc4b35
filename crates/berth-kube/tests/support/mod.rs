//! What the differential tests share: a deterministic generator, kube-scheduler 1.35.4 and
//! `berth run` started on a test cluster, and waiting for the pods of a namespace to settle.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_kube::{Handle, RunOptions, Settings};
use berth_testcluster::TestCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{json, Value};

/// A tiny deterministic generator (SplitMix64), so a failing seed can be rerun.
pub struct Gen(pub u64);

impl Gen {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The seeds to run: `BERTH_DIFF_SEEDS` (comma-separated) or 1, 2 and 3. The second value
/// says whether they are the defaults, whose coverage a test may assert.
pub fn seeds() -> (Vec<u64>, bool) {
    seeds_or(&[1, 2, 3])
}

/// [`seeds`] with a test's own defaults.
pub fn seeds_or(defaults: &[u64]) -> (Vec<u64>, bool) {
    match std::env::var("BERTH_DIFF_SEEDS") {
        Ok(s) => (
            s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
            false,
        ),
        Err(_) => (defaults.to_vec(), true),
    }
}

/// The runtime both halves run on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Kills the scheduler process when the test ends, however it ends.
pub struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the real kube-scheduler on `cluster` with `config` (a KubeSchedulerConfiguration
/// whose `KUBECONFIG` is replaced by the cluster's), logging to the cluster's directory.
pub fn kube_scheduler(cluster: &TestCluster, config: &str) -> Reaped {
    kube_scheduler_with(cluster, config, &[])
}

/// [`kube_scheduler`] with `extra` command-line arguments (e.g. `--feature-gates=..` for
/// alpha plugins, which the configuration file cannot turn on).
pub fn kube_scheduler_with(cluster: &TestCluster, config: &str, extra: &[&str]) -> Reaped {
    scheduler_process(cluster, "kube-scheduler", config, extra)
}

/// Starts the real koord-scheduler (Koordinator v1.8.0, built by tools/build.sh) on
/// `cluster` with `config` (a KubeSchedulerConfiguration whose `KUBECONFIG` is replaced by
/// the cluster's), logging to the cluster's directory. The cluster needs Koordinator's CRDs
/// (`berth_testcluster::koordinator_crds`): koord-scheduler waits for its informers of them.
pub fn koord_scheduler(cluster: &TestCluster, config: &str) -> Reaped {
    scheduler_process(cluster, "koord-scheduler", config, &[])
}

/// Runs `binary` (kube-scheduler or koord-scheduler, which takes kube-scheduler's flags).
fn scheduler_process(cluster: &TestCluster, binary: &str, config: &str, extra: &[&str]) -> Reaped {
    let kubeconfig = cluster.kubeconfig_path().display().to_string();
    let log = std::fs::File::create(cluster.dir().join(format!("{binary}.log"))).expect("log");
    let file = cluster.dir().join(format!("{binary}-config.yaml"));
    std::fs::write(&file, config.replace("KUBECONFIG", &kubeconfig)).expect("config");
    Reaped(
        Command::new(cluster.bin_dir().join(binary))
            .arg(format!("--config={}", file.display()))
            .arg(format!("--authentication-kubeconfig={kubeconfig}"))
            .arg(format!("--authorization-kubeconfig={kubeconfig}"))
            .arg("--secure-port=0")
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{binary}: {e}")),
    )
}

/// kube-scheduler's default profile, as a file [`kube_scheduler`] completes.
pub const KUBE_SCHEDULER_CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: KUBECONFIG}
leaderElection: {leaderElect: false}
";

/// berth's profile with kube-scheduler's plugins only (and kube-scheduler's preemption).
pub const BERTH_CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: default-scheduler
    plugins:
      multiPoint:
        disabled:
          - name: Reservation
          - name: NodeResourceTopologyMatch
          - name: NodeNUMAResource
    pluginConfig:
      - name: DefaultPreemption
        args: {reservationBacked: false}
";

/// Starts `berth run` in this process on `cluster` with [`BERTH_CONFIG`], a single replica.
pub async fn berth(cluster: &TestCluster) -> Handle {
    let file = cluster.dir().join("berth-config.yaml");
    std::fs::write(&file, BERTH_CONFIG).expect("config");
    let mut settings = Settings::load(&file.display().to_string()).expect("settings");
    settings.leader_election.leader_elect = false;
    berth_kube::driver::start(cluster.client(), RunOptions::new(settings))
        .await
        .expect("start")
}

/// Per pod: `Ok(node)` when bound, `Err(message)` when its PodScheduled condition is False.
pub type Outcome = BTreeMap<String, Result<String, String>>;

/// How [`settle`] waits.
pub struct Settle {
    /// The pods expected in the namespace.
    pub pods: usize,
    /// How long at most.
    pub within: Duration,
    /// How many polls in a row (700 ms apart) must see the same outcome.
    pub stable: u32,
    /// What a pod neither bound nor marked unschedulable counts as; `None`: not settled yet.
    pub kept_out: Option<&'static str>,
}

/// Waits until every pod of `namespace` is bound or marked unschedulable (or counts as kept
/// out), and that has stayed so for `stable` polls.
pub async fn settle(cluster: &TestCluster, namespace: &str, how: &Settle) -> Outcome {
    let api: Api<Pod> = Api::namespaced(cluster.client(), namespace);
    let deadline = Instant::now() + how.within;
    let mut last: Option<Outcome> = None;
    let mut stable = 0;
    loop {
        let mut out = Outcome::new();
        for p in api.list(&ListParams::default()).await.expect("list").items {
            if let Some(o) = pod_outcome(&p, how.kept_out) {
                out.insert(p.metadata.name.clone().unwrap_or_default(), o);
            }
        }
        if out.len() == how.pods && last.as_ref() == Some(&out) {
            stable += 1;
            if stable >= how.stable {
                return out;
            }
        } else {
            stable = 0;
        }
        assert!(
            Instant::now() < deadline,
            "pods never settled: {out:#?}\n{}",
            cluster.log_tails(40)
        );
        last = Some(out);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
}

fn pod_outcome(p: &Pod, kept_out: Option<&str>) -> Option<Result<String, String>> {
    if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
        return Some(Ok(n));
    }
    failed_message(p).or(kept_out.map(str::to_string)).map(Err)
}

/// The message of the pod's PodScheduled condition when it is False.
pub fn failed_message(p: &Pod) -> Option<String> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        })
        .map(|c| c.message.clone().unwrap_or_default())
}

/// The unschedulable pods and their messages.
pub fn unschedulable(o: &Outcome) -> BTreeMap<&str, &str> {
    o.iter()
        .filter_map(|(k, v)| v.as_ref().err().map(|m| (k.as_str(), m.as_str())))
        .collect()
}

/// A Ready node as a kubelet would have registered it: `resources` as capacity and
/// allocatable, the `kubernetes.io/hostname` label and `labels`.
pub fn ready_node(name: &str, resources: Value, labels: &[(&str, &str)]) -> Value {
    let mut all = json!({"kubernetes.io/hostname": name});
    for (k, v) in labels {
        all[*k] = json!(v);
    }
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": all},
        "status": {"capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "ready", "lastHeartbeatTime": "2024-01-01T00:00:00Z",
                "lastTransitionTime": "2024-01-01T00:00:00Z"}]},
    })
}
