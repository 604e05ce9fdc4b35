//! berth against the real kube-scheduler 1.35.4 (built by tools/build.sh): the same generated
//! clusters (tainted and untainted nodes in two zones; pods with pod-level resources, container
//! requests, tolerations, and claims: bound to a local volume pinned to one node, of a
//! WaitForFirstConsumer class that provisions only in one zone, of an Immediate class with no
//! volume, or missing) are scheduled by kube-scheduler in one test cluster and by `berth run`,
//! with only kube-scheduler's plugins in its profile, in another. Both clusters run
//! kube-controller-manager's PersistentVolume controller and a played external provisioner.
//! The set of pods each leaves unschedulable and every unschedulable message must be
//! identical.
//!
//! The clusters are generated so that whether a pod fits never depends on where the others
//! went (the pods that fit ask for little, the others for more than any node they tolerate
//! has; every claim is the pod's own): placements may differ among equal-score nodes,
//! outcomes may not.

mod support;

use std::time::{Duration, Instant};

use berth_testcluster::{Options, Provisioner, TestCluster};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{json, Value};
use support::{settle, unschedulable, Gen, Outcome, Settle};

const NAMESPACE: &str = "diff";

/// One generated cluster: nodes, storage (classes, volumes, claims) and pods as API objects.
struct Generated {
    nodes: Vec<Value>,
    classes: Vec<Value>,
    volumes: Vec<Value>,
    claims: Vec<Value>,
    pods: Vec<Value>,
}

/// The classes every generated cluster has: static local volumes; a provisioner that
/// provisions only in zone-a once the pod's node is chosen; a static class that binds at once.
fn classes() -> Vec<Value> {
    let class = |name: &str, provisioner: &str, mode: &str| {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode})
    };
    let mut zonal = class("zonal", "zonal.csi.example.com", "WaitForFirstConsumer");
    zonal["allowedTopologies"] = json!([{"matchLabelExpressions": [
        {"key": "topology.kubernetes.io/zone", "values": ["zone-a"]}]}]);
    vec![
        class(
            "local",
            "kubernetes.io/no-provisioner",
            "WaitForFirstConsumer",
        ),
        zonal,
        class("manual", "kubernetes.io/no-provisioner", "Immediate"),
    ]
}

fn claim(name: &str, class: &str, volume: Option<&str>) -> Value {
    let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}});
    if let Some(v) = volume {
        c["spec"]["volumeName"] = json!(v);
    }
    c
}

/// A local volume on `node`, pre-bound to claim `claim`.
fn local_volume(name: &str, node: &str, claim: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {"storageClassName": "local", "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"], "local": {"path": format!("/mnt/{name}")},
            "claimRef": {"namespace": NAMESPACE, "name": claim},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}})
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
        let zone = if g.below(2) == 0 { "zone-a" } else { "zone-b" };
        let mut node = support::ready_node(&name, res, &[("topology.kubernetes.io/zone", zone)]);
        node["spec"] = spec;
        nodes.push(node);
    }
    let (mut pods, mut volumes, mut claims) = (Vec::new(), Vec::new(), Vec::new());
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
        let pod = format!("pod-{i:02}");
        let claim_name = format!("data-{pod}");
        let uses = match g.below(7) {
            0 => {
                let volume = format!("local-{pod}");
                let node = format!("node-{}", g.below(n_nodes as u64));
                volumes.push(local_volume(&volume, &node, &claim_name));
                claims.push(claim(&claim_name, "local", Some(&volume)));
                true
            }
            1 => {
                claims.push(claim(&claim_name, "zonal", None));
                true
            }
            2 => {
                claims.push(claim(&claim_name, "manual", None));
                true
            }
            // A claim nobody created.
            3 => true,
            _ => false,
        };
        if uses {
            spec["volumes"] =
                json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]);
        }
        pods.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": NAMESPACE},
            "spec": spec,
        }));
    }
    Generated {
        nodes,
        classes: classes(),
        volumes,
        claims,
        pods,
    }
}

async fn create_all(cluster: &TestCluster, gen: &Generated) {
    cluster
        .create_namespace(NAMESPACE)
        .await
        .expect("namespace");
    for n in &gen.nodes {
        let node: Node = serde_json::from_value(n.clone()).expect("node");
        cluster.create_node_with(node).await.expect("create node");
    }
    let classes: Api<StorageClass> = Api::all(cluster.client());
    for c in &gen.classes {
        let c: StorageClass = serde_json::from_value(c.clone()).expect("class");
        classes
            .create(&PostParams::default(), &c)
            .await
            .expect("class");
    }
    let volumes: Api<PersistentVolume> = Api::all(cluster.client());
    for v in &gen.volumes {
        let v: PersistentVolume = serde_json::from_value(v.clone()).expect("volume");
        volumes
            .create(&PostParams::default(), &v)
            .await
            .expect("volume");
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cluster.client(), NAMESPACE);
    for c in &gen.claims {
        let c: PersistentVolumeClaim = serde_json::from_value(c.clone()).expect("claim");
        claims
            .create(&PostParams::default(), &c)
            .await
            .expect("claim");
    }
    // The pre-bound claims bound by the PV controller before any pod exists, so that no
    // scheduler sees them half-bound (the message would depend on the moment).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = claims.list(&ListParams::default()).await.expect("claims");
        let pending = list.items.iter().any(|c| {
            c.spec
                .as_ref()
                .and_then(|s| s.volume_name.as_ref())
                .is_some()
                && c.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound")
        });
        if !pending {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pre-bound claims were never bound\n{}",
            cluster.log_tails(40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let api: Api<Pod> = Api::namespaced(cluster.client(), NAMESPACE);
    for p in &gen.pods {
        let pod: Pod = serde_json::from_value(p.clone()).expect("pod");
        api.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
}

/// A cluster with the PersistentVolume controller (and the protection controllers, which
/// lift the finalizers admission puts on claims and volumes).
fn start_cluster() -> TestCluster {
    TestCluster::start_with(Options::new().controller_manager_with(&[
        "persistentvolume-binder-controller",
        "persistentvolumeclaim-protection-controller",
        "persistentvolume-protection-controller",
    ]))
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until every pod is bound or marked unschedulable, and the messages have stayed
/// the same for a while.
async fn outcome(cluster: &TestCluster, pods: usize) -> Outcome {
    let how = Settle {
        pods,
        within: Duration::from_secs(90),
        stable: 3,
        kept_out: None,
    };
    settle(cluster, NAMESPACE, &how).await
}

async fn with_kube_scheduler(gen: &Generated) -> Outcome {
    let cluster = start_cluster();
    let _provisioner = Provisioner::start(cluster.client());
    let _scheduler = support::kube_scheduler(&cluster, support::KUBE_SCHEDULER_CONFIG);
    create_all(&cluster, gen).await;
    outcome(&cluster, gen.pods.len()).await
}

async fn with_berth(gen: &Generated) -> Outcome {
    let cluster = start_cluster();
    let _provisioner = Provisioner::start(cluster.client());
    let handle = support::berth(&cluster).await;
    create_all(&cluster, gen).await;
    let out = outcome(&cluster, gen.pods.len()).await;
    handle.stop().await.expect("stop");
    out
}

#[test]
fn kube_scheduler_and_berth_leave_the_same_pods_unschedulable_with_the_same_messages() {
    let runtime = support::runtime();
    let (seeds, defaults) = support::seeds();
    let mut messages = Vec::new();
    for seed in &seeds {
        let seed = *seed;
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
        eprintln!("seed {seed}: unschedulable {k:#?}");
        messages.extend(k.values().map(|m| m.to_string()));
    }
    // The default seeds reach every volume reason the generator can produce (a change to
    // the generator that loses one shows here rather than silently testing less).
    if defaults {
        for reason in [
            "node(s) didn't match PersistentVolume's node affinity",
            "node(s) didn't find available persistent volumes to bind",
            "pod has unbound immediate PersistentVolumeClaims",
            "persistentvolumeclaim \"data-pod-",
        ] {
            assert!(
                messages.iter().any(|m| m.contains(reason)),
                "no unschedulable message of seeds {seeds:?} says {reason:?}: {messages:#?}"
            );
        }
    }
}
