//! berth against the real kube-scheduler 1.35.4 on generated Dynamic Resource Allocation
//! clusters (no reservations): nodes publishing GPUs in ResourceSlices (model and PCIe root
//! attributes), two DeviceClasses, and pods whose claims come from ResourceClaimTemplates
//! (kube-controller-manager's resource-claim controller makes them) or are named: one GPU,
//! a pair on one root (`matchAttribute`), an `h100` by class, a `firstAvailable` list, more
//! GPUs than any node has, a class that does not exist, a claim nobody created. kube-scheduler
//! schedules them in one test cluster, `berth run` (kube-scheduler's plugins only) in another.
//!
//! Checked: the same pods end unschedulable with the same messages, and every allocation
//! either scheduler wrote satisfies its claim (count, class, `matchAttribute`, the devices on
//! the pod's node, no device twice), worked out here from the generated devices alone.
//!
//! The clusters are generated so that whether a pod fits never depends on where the others
//! went: `node-0` has 8 `h100` GPUs, 4 on each root, and at most 3 pods can fit (6 devices
//! at most), so every pod that fits anywhere fits there whatever the others took.
//!
//! A pod whose named claim does not exist is kept out of scheduling by kube-scheduler's
//! DynamicResources PreEnqueue with no PodScheduled condition, and by berth's.
//!
//! Messages are compared whole, DynamicResources' PostFilter words (`no new claims to
//! deallocate, ` or `still not schedulable, ` before preemption's text) included.
//!
//! A second test sets up the case DynamicResources' PostFilter deallocates (a claim allocated
//! on a node its pod cannot use): both schedulers deallocate it with the same event and
//! place the pod on the other node.
//!
//! The berth half needs `berth run` to watch the DRA kinds (ResourceSlice, DeviceClass,
//! ResourceClaim) and write claims' status; set `BERTH_DIFF_DRA_KUBE_ONLY=1` to run the
//! kube-scheduler half alone (allocations still checked).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use berth_testcluster::{Options, TestCluster};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{json, Value};
use support::{settle, Gen, Outcome, Settle};

const NAMESPACE: &str = "diff-dra";
const DRIVER: &str = "gpu.example.com";

/// A generated device: (node, name, model, root).
#[derive(Debug, Clone)]
struct Dev {
    node: String,
    name: String,
    model: &'static str,
    root: i64,
}

/// What a pod's claim asks for, as the checker reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    One,
    PairOnOneRoot,
    H100,
    /// Two `h100`, else one of any model.
    FirstAvailable,
    TooMany,
    NoSuchClass,
    Missing,
}

struct Generated {
    nodes: Vec<Value>,
    devices: Vec<Dev>,
    slices: Vec<Value>,
    classes: Vec<Value>,
    templates: Vec<Value>,
    claims: Vec<Value>,
    pods: Vec<Value>,
    wants: BTreeMap<String, Want>,
}

fn request(name: &str, class: &str, count: i64) -> Value {
    json!({"name": name, "exactly": {"deviceClassName": class, "allocationMode": "ExactCount", "count": count}})
}

fn claim_spec(want: Want) -> Value {
    match want {
        Want::One => json!({"devices": {"requests": [request("gpu", "gpu", 1)]}}),
        Want::PairOnOneRoot => json!({"devices": {
            "requests": [request("gpu", "gpu", 2)],
            "constraints": [{"matchAttribute": format!("{DRIVER}/root")}]}}),
        Want::H100 => json!({"devices": {"requests": [request("gpu", "h100", 1)]}}),
        Want::FirstAvailable => json!({"devices": {"requests": [{"name": "gpu", "firstAvailable": [
            {"name": "two-h100", "deviceClassName": "h100", "allocationMode": "ExactCount", "count": 2},
            {"name": "one", "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}]}]}}),
        Want::TooMany => json!({"devices": {"requests": [request("gpu", "gpu", 9)]}}),
        Want::NoSuchClass | Want::Missing => {
            json!({"devices": {"requests": [request("tpu", "tpu", 1)]}})
        }
    }
}

fn generate(seed: u64) -> Generated {
    let mut g = Gen(seed);
    let n_nodes = 3 + g.below(3) as usize;
    let (mut nodes, mut devices, mut slices) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n_nodes {
        let name = format!("node-{i}");
        let res = json!({"cpu": "4", "memory": "8Gi", "pods": "110"});
        nodes.push(support::ready_node(&name, res, &[]));
        // node-0: 8 h100 on two roots; the others 0 to 3 GPUs of either model.
        let count = if i == 0 { 8 } else { g.below(4) as usize };
        if count == 0 {
            continue;
        }
        let mut devs = Vec::new();
        for d in 0..count {
            let model = if i == 0 || g.below(2) == 0 {
                "h100"
            } else {
                "a100"
            };
            let root = if i == 0 {
                (d % 2) as i64
            } else {
                g.below(2) as i64
            };
            devs.push(json!({"name": format!("gpu-{d}"), "attributes": {
                "model": {"string": model}, "root": {"int": root}}}));
            devices.push(Dev {
                node: name.clone(),
                name: format!("gpu-{d}"),
                model,
                root,
            });
        }
        slices.push(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": format!("{name}-gpus")},
            "spec": {"driver": DRIVER, "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": devs}}));
    }
    let class = |name: &str, expr: &str| {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": expr}}]}})
    };
    let classes = vec![
        class("gpu", &format!("device.driver == \"{DRIVER}\"")),
        class(
            "h100",
            &format!("device.driver == \"{DRIVER}\" && device.attributes[\"{DRIVER}\"].model == \"h100\""),
        ),
    ];
    let (mut templates, mut claims, mut pods, mut wants) =
        (Vec::new(), Vec::new(), Vec::new(), BTreeMap::new());
    let mut fitting = 0;
    for i in 0..(5 + g.below(6) as usize) {
        let pod = format!("pod-{i:02}");
        let mut want = match g.below(7) {
            0 => Want::One,
            1 => Want::PairOnOneRoot,
            2 => Want::H100,
            3 => Want::FirstAvailable,
            4 => Want::TooMany,
            5 => Want::NoSuchClass,
            _ => Want::Missing,
        };
        let fits = matches!(
            want,
            Want::One | Want::PairOnOneRoot | Want::H100 | Want::FirstAvailable
        );
        if fits {
            fitting += 1;
            if fitting > 3 {
                want = Want::TooMany;
            }
        }
        let entry = match (want, g.below(2)) {
            (Want::Missing, _) => {
                json!({"name": "gpu", "resourceClaimName": format!("{pod}-nobody")})
            }
            (_, 0) => {
                let t = format!("{pod}-template");
                templates.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": t, "namespace": NAMESPACE}, "spec": {"spec": claim_spec(want)}}));
                json!({"name": "gpu", "resourceClaimTemplateName": t})
            }
            _ => {
                let c = format!("{pod}-claim");
                claims.push(
                    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": c, "namespace": NAMESPACE}, "spec": claim_spec(want)}),
                );
                json!({"name": "gpu", "resourceClaimName": c})
            }
        };
        pods.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": NAMESPACE},
            "spec": {"resourceClaims": [entry], "containers": [{"name": "a", "image": "app",
                "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]}}]},
        }));
        wants.insert(pod, want);
    }
    Generated {
        nodes,
        devices,
        slices,
        classes,
        templates,
        claims,
        pods,
        wants,
    }
}

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("resource.k8s.io", "v1", kind))
}

async fn create_dynamic(cluster: &TestCluster, kind: &str, objects: &[Value], namespaced: bool) {
    let ar = resource(kind);
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(cluster.client(), NAMESPACE, &ar)
    } else {
        Api::all_with(cluster.client(), &ar)
    };
    for o in objects {
        let obj: DynamicObject = serde_json::from_value(o.clone()).expect(kind);
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create {kind}: {e}"));
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
    create_dynamic(cluster, "DeviceClass", &gen.classes, false).await;
    create_dynamic(cluster, "ResourceSlice", &gen.slices, false).await;
    create_dynamic(cluster, "ResourceClaimTemplate", &gen.templates, true).await;
    create_dynamic(cluster, "ResourceClaim", &gen.claims, true).await;
    let api: Api<Pod> = Api::namespaced(cluster.client(), NAMESPACE);
    for p in &gen.pods {
        let pod: Pod = serde_json::from_value(p.clone()).expect("pod");
        api.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
}

/// What a pod that is neither bound nor marked unschedulable shows (kube-scheduler's
/// DynamicResources PreEnqueue keeps a pod whose claim does not exist out of scheduling,
/// without a word, and so does berth's).
const KEPT_OUT: &str = "(not scheduled, no PodScheduled condition)";

/// Waits until every pod is bound, marked unschedulable or kept out, and that has stayed so
/// a while.
async fn outcome(cluster: &TestCluster, pods: usize) -> Outcome {
    let how = Settle {
        pods,
        within: Duration::from_secs(120),
        stable: 6,
        kept_out: Some(KEPT_OUT),
    };
    settle(cluster, NAMESPACE, &how).await
}

/// Every claim's allocation, by the pod it is reserved for: (pod, claim JSON).
async fn allocations(cluster: &TestCluster) -> Vec<(String, Value)> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), NAMESPACE, &resource("ResourceClaim"));
    let mut out = Vec::new();
    for c in api
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items
    {
        let v = serde_json::to_value(&c).expect("claim JSON");
        if v["status"]["allocation"].is_null() {
            continue;
        }
        for r in v["status"]["reservedFor"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            out.push((r["name"].as_str().unwrap_or("").to_string(), v.clone()));
        }
    }
    out
}

/// Checks every allocation against the generated devices and what the pod asked for,
/// without the schedulers' code: `Err` says what is wrong.
fn check_allocations(
    gen: &Generated,
    outcome: &Outcome,
    claims: &[(String, Value)],
) -> Result<(), String> {
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    let mut allocated_pods = BTreeSet::new();
    for (pod, claim) in claims {
        let node = match outcome.get(pod) {
            Some(Ok(n)) => n,
            other => return Err(format!("claim reserved for {pod}, which is {other:?}")),
        };
        let want = gen.wants.get(pod).ok_or(format!("unknown pod {pod}"))?;
        let results = claim["status"]["allocation"]["devices"]["results"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut picked = Vec::new();
        for r in &results {
            let (pool, device) = (
                r["pool"].as_str().unwrap_or(""),
                r["device"].as_str().unwrap_or(""),
            );
            if r["driver"] != DRIVER || pool != node {
                return Err(format!("{pod} on {node} got {r}"));
            }
            let dev = gen
                .devices
                .iter()
                .find(|d| d.node == pool && d.name == device)
                .ok_or(format!("{pod} got a device that does not exist: {r}"))?;
            if !seen.insert((pool.to_string(), device.to_string())) {
                return Err(format!("{pool}/{device} allocated twice"));
            }
            picked.push((dev, r["request"].as_str().unwrap_or("").to_string()));
        }
        let h100 = |p: &[(&Dev, String)]| p.iter().all(|(d, _)| d.model == "h100");
        let ok = match want {
            Want::One => picked.len() == 1,
            Want::PairOnOneRoot => picked.len() == 2 && picked[0].0.root == picked[1].0.root,
            Want::H100 => picked.len() == 1 && h100(&picked),
            Want::FirstAvailable => {
                let two = picked.len() == 2
                    && h100(&picked)
                    && picked.iter().all(|(_, r)| r == "gpu/two-h100");
                let one = picked.len() == 1 && picked[0].1 == "gpu/one";
                // The fallback only when two h100 were not free on the node.
                two || one
            }
            Want::TooMany | Want::NoSuchClass | Want::Missing => false,
        };
        if !ok {
            return Err(format!("{pod} ({want:?}) got {results:?}"));
        }
        allocated_pods.insert(pod.clone());
    }
    for (pod, o) in outcome {
        if o.is_ok() && !allocated_pods.contains(pod) {
            return Err(format!("{pod} is bound without an allocated claim"));
        }
    }
    Ok(())
}

/// The unschedulable (or kept out) pods and their messages.
fn unschedulable(o: &Outcome) -> BTreeMap<String, String> {
    o.iter()
        .filter_map(|(k, v)| v.as_ref().err().map(|m| (k.clone(), m.clone())))
        .collect()
}

fn start_cluster() -> TestCluster {
    TestCluster::start_with(Options::new().controller_manager_with(&[
        "resourceclaim-controller",
        "persistentvolumeclaim-protection-controller",
        "persistentvolume-protection-controller",
    ]))
    .unwrap_or_else(|e| panic!("{e}"))
}

async fn with_kube_scheduler(gen: &Generated) -> (Outcome, Vec<(String, Value)>) {
    let cluster = start_cluster();
    let _scheduler = support::kube_scheduler(&cluster, support::KUBE_SCHEDULER_CONFIG);
    create_all(&cluster, gen).await;
    let out = outcome(&cluster, gen.pods.len()).await;
    let claims = allocations(&cluster).await;
    (out, claims)
}

async fn with_berth(gen: &Generated) -> (Outcome, Vec<(String, Value)>) {
    let cluster = start_cluster();
    let handle = support::berth(&cluster).await;
    create_all(&cluster, gen).await;
    let out = outcome(&cluster, gen.pods.len()).await;
    let claims = allocations(&cluster).await;
    handle.stop().await.expect("stop");
    (out, claims)
}

#[test]
fn kube_scheduler_and_berth_agree_on_generated_dra_clusters() {
    let runtime = support::runtime();
    let (seeds, defaults) = support::seeds();
    let kube_only = std::env::var("BERTH_DIFF_DRA_KUBE_ONLY").is_ok();
    let mut messages = Vec::new();
    for seed in &seeds {
        let seed = *seed;
        let gen = generate(seed);
        let (kube, kube_claims) = runtime.block_on(with_kube_scheduler(&gen));
        if let Err(e) = check_allocations(&gen, &kube, &kube_claims) {
            panic!("seed {seed}: kube-scheduler's allocation: {e}");
        }
        let k = unschedulable(&kube);
        assert!(
            !k.is_empty() && k.len() < gen.pods.len(),
            "seed {seed}: some pods, not all, should be unschedulable: {k:#?}"
        );
        eprintln!("seed {seed}: kube-scheduler leaves unschedulable {k:#?}");
        messages.extend(k.values().cloned());
        if kube_only {
            continue;
        }
        let (berth, berth_claims) = runtime.block_on(with_berth(&gen));
        if let Err(e) = check_allocations(&gen, &berth, &berth_claims) {
            panic!("seed {seed}: berth's allocation: {e}");
        }
        assert_eq!(
            k,
            unschedulable(&berth),
            "seed {seed}: kube-scheduler (left) and berth (right) differ"
        );
    }
    // The default seeds reach every DRA reason the generator can produce.
    if defaults {
        for reason in [
            "cannot allocate all claims",
            "device class tpu does not exist",
            KEPT_OUT,
        ] {
            assert!(
                messages.iter().any(|m| m.contains(reason)),
                "no unschedulable message of seeds {seeds:?} says {reason:?}: {messages:#?}"
            );
        }
    }
}

/// A claim allocated where its pod cannot go: `gpu` holds `n1`'s GPU (status written as a
/// user or an earlier scheduler left it, nobody in `reservedFor`), but `n1` has no room for
/// the pod's CPU. kube-scheduler's DynamicResources PostFilter deallocates the claim
/// (`deallocation of ResourceClaim completed`) and the next attempt places the pod on `n2`.
async fn deallocation_case(cluster: &TestCluster) {
    cluster
        .create_namespace(NAMESPACE)
        .await
        .expect("namespace");
    for (name, cpu) in [("n1", "1"), ("n2", "4")] {
        let res = json!({"cpu": cpu, "memory": "8Gi", "pods": "110"});
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": res, "allocatable": res,
                "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("node");
        cluster.create_node_with(node).await.expect("create node");
    }
    let class = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}}]}});
    create_dynamic(cluster, "DeviceClass", &[class], false).await;
    let slices: Vec<Value> = ["n1", "n2"]
        .iter()
        .map(|n| {
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": format!("{n}-gpus")},
                "spec": {"driver": DRIVER, "nodeName": n,
                    "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0"}]}})
        })
        .collect();
    create_dynamic(cluster, "ResourceSlice", &slices, false).await;
    let claim = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [request("gpu", "gpu", 1)]}}});
    create_dynamic(cluster, "ResourceClaim", &[claim], true).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), NAMESPACE, &resource("ResourceClaim"));
    let mut c = api.get("gpu").await.expect("claim");
    c.data["status"] = json!({"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}});
    api.replace_status("gpu", &PostParams::default(), &c)
        .await
        .expect("allocate the claim");
    // Watches of different kinds are not ordered: let the scheduler see the allocation
    // before the pod, or it would allocate the claim afresh and never need to deallocate.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "trainer", "namespace": NAMESPACE},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu"}],
            "containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": "2"}, "claims": [{"name": "gpu"}]}}]}
    }))
    .expect("pod");
    Api::<Pod>::namespaced(cluster.client(), NAMESPACE)
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

/// Where the pod landed and what its FailedScheduling event said, once it is bound.
async fn deallocation_outcome(cluster: &TestCluster) -> (String, Vec<String>) {
    use k8s_openapi::api::core::v1::Event;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), NAMESPACE);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let node = loop {
        let p = pods.get("trainer").await.expect("pod");
        if let Some(n) = p.spec.and_then(|s| s.node_name) {
            break n;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "trainer never bound: {:?}\n{}",
            p.status,
            cluster.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let events: Api<Event> = Api::namespaced(cluster.client(), NAMESPACE);
    let mut said: Vec<String> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .filter_map(|e| e.message)
        .collect();
    said.sort();
    (node, said)
}

#[test]
fn both_deallocate_a_claim_allocated_where_its_pod_cannot_go() {
    let runtime = support::runtime();
    let kube = runtime.block_on(async {
        let cluster = start_cluster();
        let _scheduler = support::kube_scheduler(&cluster, support::KUBE_SCHEDULER_CONFIG);
        deallocation_case(&cluster).await;
        deallocation_outcome(&cluster).await
    });
    assert_eq!(kube.0, "n2", "kube-scheduler: {kube:?}");
    assert!(
        kube.1
            .iter()
            .any(|m| m.contains("deallocation of ResourceClaim completed")),
        "kube-scheduler: {kube:?}"
    );
    let berth = runtime.block_on(async {
        let cluster = start_cluster();
        let handle = support::berth(&cluster).await;
        deallocation_case(&cluster).await;
        let out = deallocation_outcome(&cluster).await;
        handle.stop().await.expect("stop");
        out
    });
    assert_eq!(kube, berth, "kube-scheduler (left) and berth (right)");
}
