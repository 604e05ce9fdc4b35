//! berth against the real kube-scheduler 1.35.4 (built by tools/build.sh): the same generated
//! clusters (tainted and untainted nodes; pods with pod-level resources, container requests,
//! tolerations) are scheduled by kube-scheduler in one test cluster and by `berth run`, with
//! only kube-scheduler's plugins in its profile, in another. The set of pods each leaves
//! unschedulable and every unschedulable message must be identical.
//!
//! The clusters are generated so that whether a pod fits never depends on where the others
//! went (the pods that fit ask for little, the others for more than any node they tolerate
//! has): placements may differ among equal-score nodes, outcomes may not.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_kube::{RunOptions, Settings};
use berth_testcluster::TestCluster;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{json, Value};

const NAMESPACE: &str = "diff";

/// A tiny deterministic generator (SplitMix64), so a failing seed can be rerun.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One generated cluster: nodes and pods as API objects.
struct Generated {
    nodes: Vec<Value>,
    pods: Vec<Value>,
}

const TAINTS: [&str; 2] = ["gpu", "infra"];

fn generate(seed: u64) -> Generated {
    let mut g = Gen(seed);
    let n_nodes = 3 + g.below(4) as usize;
    let mut nodes = Vec::new();
    for i in 0..n_nodes {
        let name = format!("node-{i}");
        // Every node has 4 CPUs and 8Gi; some carry a NoSchedule taint.
        let taint = (g.below(3) == 0).then(|| TAINTS[g.below(2) as usize]);
        let mut spec = json!({});
        if let Some(t) = taint {
            spec["taints"] = json!([{"key": "dedicated", "value": t, "effect": "NoSchedule"}]);
        }
        let res = json!({"cpu": "4", "memory": "8Gi", "pods": "110"});
        nodes.push(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": spec,
            "status": {"capacity": res, "allocatable": res,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "ready", "lastHeartbeatTime": "2024-01-01T00:00:00Z",
                    "lastTransitionTime": "2024-01-01T00:00:00Z"}]},
        }));
    }
    let mut pods = Vec::new();
    for i in 0..(8 + g.below(8) as usize) {
        let mut spec = json!({"containers": [{"name": "a", "image": "app"}]});
        // Pods that fit ask for at most 200m and 128Mi in all (at most 16 such pods: one
        // node's worth); the others ask for more than a node's allocatable.
        let big = g.below(3) == 0;
        match (big, g.below(4)) {
            (false, 0) => {
                spec["resources"] = json!({"requests": {"cpu": "200m", "memory": "128Mi"}});
            }
            (false, 1) => {
                spec["resources"] = json!({"requests": {"cpu": "200m"}, "limits": {"cpu": "200m"}});
                spec["containers"][0]["resources"] = json!({"requests": {"cpu": "100m"}});
            }
            (false, 2) => {
                spec["containers"][0]["resources"] =
                    json!({"requests": {"cpu": "100m", "memory": "64Mi"}});
            }
            (false, _) => {}
            (true, 0) => spec["resources"] = json!({"requests": {"cpu": "7"}}),
            (true, 1) => spec["resources"] = json!({"requests": {"memory": "10Gi"}}),
            (true, 2) => {
                spec["resources"] = json!({"requests": {"cpu": "5", "memory": "9Gi"}});
                spec["containers"][0]["resources"] = json!({"requests": {"cpu": "1"}});
            }
            (true, _) => {
                spec["containers"][0]["resources"] = json!({"requests": {"cpu": "6"}});
            }
        }
        match g.below(4) {
            0 => {
                let t = TAINTS[g.below(2) as usize];
                spec["tolerations"] = json!([{"key": "dedicated", "operator": "Equal",
                    "value": t, "effect": "NoSchedule"}]);
            }
            1 => spec["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]),
            _ => {}
        }
        pods.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("pod-{i:02}"), "namespace": NAMESPACE},
            "spec": spec,
        }));
    }
    Generated { nodes, pods }
}

/// Per pod: `Ok(())` when bound, `Err(message)` when its PodScheduled condition is False.
type Outcome = BTreeMap<String, Result<(), String>>;

async fn create_all(cluster: &TestCluster, gen: &Generated) {
    cluster
        .create_namespace(NAMESPACE)
        .await
        .expect("namespace");
    for n in &gen.nodes {
        let node: Node = serde_json::from_value(n.clone()).expect("node");
        cluster.create_node_with(node).await.expect("create node");
    }
    let api: Api<Pod> = Api::namespaced(cluster.client(), NAMESPACE);
    for p in &gen.pods {
        let pod: Pod = serde_json::from_value(p.clone()).expect("pod");
        api.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
}

/// Waits until every pod is bound or marked unschedulable, and the messages have stayed
/// the same for a while.
async fn outcome(cluster: &TestCluster, want: usize) -> Outcome {
    let api: Api<Pod> = Api::namespaced(cluster.client(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last: Option<Outcome> = None;
    let mut stable = 0;
    loop {
        let mut out = Outcome::new();
        for p in api.list(&ListParams::default()).await.expect("list").items {
            let name = p.metadata.name.clone().unwrap_or_default();
            let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            let failed = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                })
                .map(|c| c.message.clone().unwrap_or_default());
            if bound {
                out.insert(name, Ok(()));
            } else if let Some(m) = failed {
                out.insert(name, Err(m));
            }
        }
        if out.len() == want && last.as_ref() == Some(&out) {
            stable += 1;
            if stable >= 3 {
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

/// Kills the scheduler process when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn with_kube_scheduler(gen: &Generated) -> Outcome {
    let cluster = TestCluster::start().unwrap_or_else(|e| panic!("{e}"));
    let log = std::fs::File::create(cluster.dir().join("kube-scheduler.log")).expect("log");
    let config = cluster.dir().join("kube-scheduler-config.yaml");
    std::fs::write(
        &config,
        KUBE_SCHEDULER_CONFIG.replace(
            "KUBECONFIG",
            &cluster.kubeconfig_path().display().to_string(),
        ),
    )
    .expect("config");
    let _scheduler = Reaped(
        Command::new(cluster.bin_dir().join("kube-scheduler"))
            .arg(format!("--config={}", config.display()))
            .arg(format!(
                "--authentication-kubeconfig={}",
                cluster.kubeconfig_path().display()
            ))
            .arg(format!(
                "--authorization-kubeconfig={}",
                cluster.kubeconfig_path().display()
            ))
            .arg("--secure-port=0")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kube-scheduler"),
    );
    create_all(&cluster, gen).await;
    outcome(&cluster, gen.pods.len()).await
}

/// kube-scheduler's default profile without DynamicResources, which berth does not have yet
/// (its PostFilter adds `no new claims to deallocate, ` before preemption's text).
const KUBE_SCHEDULER_CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: KUBECONFIG}
leaderElection: {leaderElect: false}
profiles:
  - schedulerName: default-scheduler
    plugins:
      multiPoint:
        disabled:
          - name: DynamicResources
";

/// berth's profile with kube-scheduler's plugins only (and kube-scheduler's preemption).
const BERTH_CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1
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

async fn with_berth(gen: &Generated) -> Outcome {
    let cluster = TestCluster::start().unwrap_or_else(|e| panic!("{e}"));
    let file = cluster.dir().join("berth-config.yaml");
    std::fs::write(&file, BERTH_CONFIG).expect("config");
    let mut settings = Settings::load(&file.display().to_string()).expect("settings");
    settings.leader_election.leader_elect = false;
    let handle = berth_kube::driver::start(cluster.client(), RunOptions::new(settings))
        .await
        .expect("start");
    create_all(&cluster, gen).await;
    let out = outcome(&cluster, gen.pods.len()).await;
    handle.stop().await.expect("stop");
    out
}

fn unschedulable(o: &Outcome) -> BTreeMap<&str, &str> {
    o.iter()
        .filter_map(|(k, v)| v.as_ref().err().map(|m| (k.as_str(), m.as_str())))
        .collect()
}

#[test]
fn kube_scheduler_and_berth_leave_the_same_pods_unschedulable_with_the_same_messages() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let seeds: Vec<u64> = std::env::var("BERTH_DIFF_SEEDS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2, 3]);
    for seed in seeds {
        let gen = generate(seed);
        let (kube, berth) = runtime.block_on(async {
            let kube = with_kube_scheduler(&gen).await;
            let berth = with_berth(&gen).await;
            (kube, berth)
        });
        let (k, b) = (unschedulable(&kube), unschedulable(&berth));
        assert!(
            !k.is_empty() && k.len() < gen.pods.len(),
            "seed {seed}: the generated cluster should leave some pods, not all, unschedulable: {k:#?}"
        );
        assert_eq!(
            k, b,
            "seed {seed}: kube-scheduler (left) and berth (right) differ"
        );
    }
}
