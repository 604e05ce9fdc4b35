//! The same outcome through both drivers: every scenario file of the standard, reservation,
//! NUMA and volume sets that only creates and deletes objects (no virtual time, no simulated
//! kubelet publishing topology) is run through `berth simulate` and through `berth run` against
//! a real kube-apiserver, etcd and kube-controller-manager (its PersistentVolume controller,
//! plus the test playing each StorageClass's external provisioner, where simulate plays
//! both), and the placements, reservation statuses and unschedulable messages must be the
//! same.
//!
//! The simulator hands the core every object of a step before it schedules, in document
//! order. The cluster run does the same: scheduling is held while a step's objects are
//! created one by one (each waited for until the core has it), then released, and the next
//! step waits until berth is idle (nothing in flight, every bind confirmed by the watch) and,
//! in a file with volumes, until the PersistentVolume controller has nothing left to do.
//!
//! A file whose `advance` steps only let the simulated controllers act and back-offs expire
//! says so with a `# parity: advance waits for controllers` line; in the cluster such a step
//! waits as every step does (real time passes). Any other `advance` is virtual time the
//! cluster cannot reproduce: the file is skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_core::object::{Kind, ObjectKey};
use berth_kube::{RunOptions, Settings};
use berth_testcluster::{Options, Provisioner, TestCluster};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::Client;
use serde_json::{json, Value};

const SETS: &[&str] = &[
    "basic",
    "reservation",
    "numa",
    "acceptance",
    "priority",
    "preemption",
    "node-reservation",
    "cpuset",
    "volumes",
    "dra",
    "gangs",
];

/// The controllers the cluster runs: the PersistentVolume controller (binding, and handing
/// claims to their provisioners), the protection controllers that lift the finalizers the
/// API server's StorageObjectInUseProtection admission puts on every claim and volume, and
/// the ResourceClaim controller.
const CONTROLLERS: &[&str] = &[
    "persistentvolume-binder-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
    // Dynamic Resource Allocation: claims from pods' templates, `reservedFor` entries of
    // pods that are gone removed, claims no one uses deallocated (simulate's claim
    // controller plays it).
    "resourceclaim-controller",
];

/// The marker of a file whose `advance` steps only wait (see the module documentation).
const ADVANCE_WAITS: &str = "# parity: advance waits for controllers";

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios")
}

/// A scenario file read for the cluster run.
struct Case {
    path: PathBuf,
    config: Option<PathBuf>,
    /// Objects created before the first step, in document order.
    initial: Vec<Value>,
    /// Steps: objects to apply, then keys to delete.
    steps: Vec<(Vec<Value>, Vec<Value>)>,
    /// It has volumes or resource claims: steps also wait for the PersistentVolume and
    /// ResourceClaim controllers.
    volumes: bool,
}

/// Why a file is not run through both drivers.
fn read_case(path: &Path) -> Result<Case, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    // A node declaring its CPU layout gets its NRT from the simulated agent (koordlet).
    if text.contains("sim.berth.dev/cpu-layout") {
        return Err("simulated node agent".into());
    }
    if text.lines().any(|l| l.starts_with("# expect-exit:")) {
        return Err("bad input".into());
    }
    let advance_waits = text.lines().any(|l| l.trim() == ADVANCE_WAITS);
    // The API server's priority admission refuses a pod spec's own `priority` (it comes
    // from a PriorityClass there); the simulator takes it as written.
    if text.contains("{priority: ") || text.contains(", priority: ") {
        return Err("pod spec priority without a PriorityClass".into());
    }
    let config = text
        .lines()
        .find_map(|l| l.strip_prefix("# config: "))
        .map(|c| scenarios_dir().join("configs").join(c.trim()));
    let mut initial = Vec::new();
    let mut steps = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let mut yaml: serde_yaml_ng::Value =
            serde::Deserialize::deserialize(doc).map_err(|e| e.to_string())?;
        yaml.apply_merge().map_err(|e| e.to_string())?;
        let v: Value = serde_json::to_value(yaml).map_err(|e| e.to_string())?;
        if v.is_null() {
            continue;
        }
        if v["kind"] == "Scenario" {
            if v["spec"].get("nodeAgent").is_some() {
                return Err("simulated node agent".into());
            }
            for step in v["spec"]["steps"].as_array().cloned().unwrap_or_default() {
                if step.get("advance").is_some() && !advance_waits {
                    return Err("virtual time".into());
                }
                let apply = step["apply"].as_array().cloned().unwrap_or_default();
                let delete = step["delete"].as_array().cloned().unwrap_or_default();
                if !apply.is_empty() || !delete.is_empty() {
                    steps.push((apply, delete));
                }
            }
        } else {
            initial.push(v);
        }
    }
    for obj in initial.iter().chain(steps.iter().flat_map(|(a, _)| a)) {
        let meta = &obj["metadata"];
        // The API server assigns these: a file that relies on its own (owners by UID,
        // creation order by timestamp) cannot be reproduced in a cluster.
        if meta.get("uid").is_some() || meta.get("creationTimestamp").is_some() {
            return Err("sets uid or creationTimestamp".into());
        }
        if obj["kind"] == "Event" {
            return Err("carries events".into());
        }
        // A claim's status naming its consumer by UID: the API server assigns the pod
        // another, and kube-controller-manager's claim controller removes a consumer that
        // does not exist (and deallocates the claim), where simulate keeps it.
        let reserved_for = obj["status"]["reservedFor"].as_array();
        if reserved_for.is_some_and(|r| r.iter().any(|c| c.get("uid").is_some())) {
            return Err("a claim's reservedFor names a pod by UID".into());
        }
    }
    // The simulator resolves priorityClassName against every PriorityClass of the input, as
    // admission resolves it against those already created: create them first.
    initial.sort_by_key(|o| o["kind"] != "PriorityClass");
    let volumes = initial
        .iter()
        .chain(steps.iter().flat_map(|(a, _)| a))
        .any(|o| {
            matches!(
                o["kind"].as_str(),
                Some("PersistentVolumeClaim" | "PersistentVolume" | "ResourceClaim" | "Pod")
            ) && (o["kind"] != "Pod"
                || o["spec"]["resourceClaims"]
                    .as_array()
                    .is_some_and(|c| !c.is_empty()))
        });
    Ok(Case {
        path: path.to_path_buf(),
        config,
        initial,
        steps,
        volumes,
    })
}

fn resource(obj: &Value) -> (ApiResource, bool) {
    let api_version = obj["apiVersion"].as_str().unwrap_or("v1");
    let kind = obj["kind"].as_str().unwrap_or("");
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let namespaced = matches!(
        kind,
        "Pod"
            | "PersistentVolumeClaim"
            | "PodDisruptionBudget"
            | "Event"
            | "CSIStorageCapacity"
            | "ResourceClaim"
            | "ResourceClaimTemplate"
            | "PodGroup"
            | "Workload"
    );
    (
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind)),
        namespaced,
    )
}

fn core_key(obj: &Value) -> ObjectKey {
    let kind =
        berth_sim::input::kind_from_name(obj["kind"].as_str().unwrap_or("")).expect("known kind");
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    if kind.namespaced() {
        ObjectKey::new(
            kind,
            obj["metadata"]["namespace"].as_str().unwrap_or("default"),
            name,
        )
    } else {
        ObjectKey::cluster(kind, name)
    }
}

async fn ensure_namespace(client: &Client, ns: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns_obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    let _ = api.create(&PostParams::default(), &ns_obj).await;
}

/// Creates (or replaces) `obj` as a user would with `kubectl apply`, status included, and
/// returns its UID.
async fn apply(client: &Client, obj: &Value) -> String {
    let (ar, namespaced) = resource(obj);
    let mut obj = obj.clone();
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let api: Api<DynamicObject> = if namespaced {
        ensure_namespace(client, &ns).await;
        obj["metadata"]["namespace"] = json!(ns);
        Api::namespaced_with(client.clone(), &ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    complete(&mut obj);
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    let status = obj.get("status").cloned();
    let dynamic: DynamicObject = serde_json::from_value(obj.clone()).expect("object");
    let created = match api.create(&PostParams::default(), &dynamic).await {
        Ok(c) => c,
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let current = api.get(&name).await.expect("get for replace");
            let mut next = dynamic.clone();
            next.metadata.resource_version = current.metadata.resource_version.clone();
            api.replace(&name, &PostParams::default(), &next)
                .await
                .unwrap_or_else(|e| panic!("replacing {name}: {e}"))
        }
        Err(e) => panic!("creating {} {name}: {e}", obj["kind"]),
    };
    let mut uid = created.metadata.uid.clone().unwrap_or_default();
    if let Some(status) = status {
        if obj["kind"] != "Node" && created.data.get("status") != Some(&status) {
            let mut next = created.clone();
            next.data["status"] = status;
            let written = api
                .replace_status(&name, &PostParams::default(), &next)
                .await
                .unwrap_or_else(|e| panic!("writing the status of {name}: {e}"));
            uid = written.metadata.uid.unwrap_or(uid);
        }
    }
    uid
}

/// Plays the kubelet's part in a graceful deletion: a pod marked for deletion (a preemption
/// victim) is removed, as the simulator removes it.
async fn finish_deletions(client: Client) {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let api: Api<Pod> = Api::all(client);
    let mut stream = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    while let Some(ev) = stream.next().await {
        if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev {
            if p.metadata.deletion_timestamp.is_some() {
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                let api: Api<Pod> = Api::namespaced(api.clone().into_client(), &ns);
                let _ = api
                    .delete(
                        &p.metadata.name.unwrap_or_default(),
                        &DeleteParams::default().grace_period(0),
                    )
                    .await;
            }
        }
    }
}

/// Fills in what the API server requires and scenario files may leave out (the simulator
/// schedules without them): container images and names.
fn complete(obj: &mut Value) {
    if obj["kind"] == "Node" {
        // The label every kubelet sets when it registers its node (the simulator sets it too).
        let name = obj["metadata"]["name"].clone();
        let labels = &mut obj["metadata"]["labels"];
        if labels.get("kubernetes.io/hostname").is_none() {
            labels["kubernetes.io/hostname"] = name;
        }
        return;
    }
    let spec = match obj["kind"].as_str() {
        Some("Pod") => obj.get_mut("spec"),
        Some("Reservation") => obj
            .get_mut("spec")
            .and_then(|s| s.get_mut("template"))
            .and_then(|t| t.get_mut("spec")),
        _ => None,
    };
    let Some(spec) = spec else { return };
    for list in ["containers", "initContainers"] {
        for (i, c) in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if c.get("image").is_none() {
                c["image"] = json!("registry.k8s.io/pause:3.10");
            }
            if c.get("name").is_none() {
                c["name"] = json!(format!("c{i}"));
            }
        }
    }
}

async fn delete(client: &Client, d: &Value) {
    let kind = d["kind"].as_str().unwrap_or("");
    let obj = json!({"apiVersion": api_version_of(kind), "kind": kind});
    let (ar, namespaced) = resource(&obj);
    let ns = d["namespace"].as_str().unwrap_or("default");
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(client.clone(), ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let _ = api
        .delete(
            d["name"].as_str().unwrap_or(""),
            &DeleteParams::default().grace_period(0),
        )
        .await;
}

fn api_version_of(kind: &str) -> &'static str {
    match kind {
        "Reservation" => "scheduling.koordinator.sh/v1alpha1",
        "NodeResourceTopology" => "topology.node.k8s.io/v1alpha2",
        "CSINode" | "StorageClass" | "CSIDriver" | "CSIStorageCapacity" => "storage.k8s.io/v1",
        "PriorityClass" => "scheduling.k8s.io/v1",
        "PodDisruptionBudget" => "policy/v1",
        "Event" => "events.k8s.io/v1",
        "ResourceSlice" | "DeviceClass" | "ResourceClaim" | "ResourceClaimTemplate" => {
            "resource.k8s.io/v1"
        }
        _ => "v1",
    }
}

/// Event reasons of objects refused by the capacity rule (issue 25): both drivers must
/// report the same refusals, once each, with the same message.
const REFUSALS: [&str; 4] = [
    "InvalidNode",
    "InvalidNodeReservation",
    "InvalidNodeResourceTopology",
    "InvalidCPUTopology",
];

/// Every object of `kind` (in every namespace, for a namespaced kind).
async fn list_all(client: &Client, kind: &str) -> Vec<DynamicObject> {
    let (ar, _) = resource(&json!({"apiVersion": api_version_of(kind), "kind": kind}));
    Api::<DynamicObject>::all_with(client.clone(), &ar)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// The API for `o`, an object of `kind` as listed.
fn api_for(client: &Client, kind: &str, o: &DynamicObject) -> Api<DynamicObject> {
    let (ar, namespaced) = resource(&json!({"apiVersion": api_version_of(kind), "kind": kind}));
    match (namespaced, o.metadata.namespace.as_deref()) {
        (true, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    }
}

/// Removes everything a scenario may have created.
async fn clean(client: &Client) {
    let dp = DeleteParams::default().grace_period(0);
    for kind in [
        "Reservation",
        "NodeResourceTopology",
        "Node",
        "CSINode",
        "PriorityClass",
        "StorageClass",
        "CSIDriver",
        "Pod",
        "PodDisruptionBudget",
        "Event",
        "CSIStorageCapacity",
        "PersistentVolumeClaim",
        "PersistentVolume",
        "ResourceClaim",
        "ResourceClaimTemplate",
        "ResourceSlice",
        "DeviceClass",
    ] {
        let mut listed = list_all(client, kind).await;
        if kind == "Pod" {
            // Gangs of both PodGroup groups and Workloads, before their pods.
            for (group, kind) in [
                ("scheduling.sigs.k8s.io", "PodGroup"),
                ("scheduling.x-k8s.io", "PodGroup"),
                ("scheduling.k8s.io", "Workload"),
            ] {
                let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1alpha1", kind));
                let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
                for o in api
                    .list(&ListParams::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                {
                    let (name, ns) = (
                        o.metadata.name.clone().unwrap_or_default(),
                        o.metadata.namespace.clone().unwrap_or_default(),
                    );
                    let _ = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar)
                        .delete(&name, &dp)
                        .await;
                }
            }
        }
        for o in listed.drain(..) {
            let name = o.metadata.name.clone().unwrap_or_default();
            let ns = o.metadata.namespace.clone().unwrap_or_default();
            if kind == "PriorityClass" && name.starts_with("system-") {
                continue;
            }
            // The system's own objects; scenarios put CSIStorageCapacity in kube-system.
            if ns.starts_with("kube-") && kind != "CSIStorageCapacity" {
                continue;
            }
            let _ = api_for(client, kind, &o).delete(&name, &dp).await;
        }
    }
    // Deletions are immediate (grace 0), but for the protection finalizers the API server
    // puts on claims and volumes: their controllers lift them once nothing uses them. Wait
    // until the lists say everything is gone; lift what is left after a while ourselves
    // (a volume the PV controller keeps `Released`).
    for round in 0..200 {
        let mut left = 0;
        for kind in [
            "Pod",
            "Node",
            "PersistentVolumeClaim",
            "PersistentVolume",
            "ResourceClaim",
        ] {
            let items: Vec<DynamicObject> = list_all(client, kind)
                .await
                .into_iter()
                .filter(|o| {
                    !o.metadata
                        .namespace
                        .as_deref()
                        .is_some_and(|n| n.starts_with("kube-"))
                })
                .collect();
            left += items.len();
            if round >= 40 {
                for o in &items {
                    let name = o.metadata.name.clone().unwrap_or_default();
                    let patch = json!({"metadata": {"finalizers": null}});
                    let _ = api_for(client, kind, o)
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                }
            }
        }
        if left == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What both drivers must agree on, per object.
fn summary(items: &[Value]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for o in items {
        let kind = o["kind"].as_str().unwrap_or("");
        let meta = &o["metadata"];
        let name = meta["name"].as_str().unwrap_or("");
        match kind {
            "Pod" => {
                let ns = meta["namespace"].as_str().unwrap_or("default");
                if ns.starts_with("kube-") {
                    continue;
                }
                let reservation = meta["annotations"]
                    ["scheduling.koordinator.sh/reservation-allocated"]
                    .as_str()
                    .and_then(|a| serde_json::from_str::<Value>(a).ok())
                    .map(|a| a["name"].clone());
                let unschedulable = o["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
                    .map(|c| json!({"reason": c["reason"], "message": c["message"]}));
                out.insert(
                    format!("Pod {ns}/{name}"),
                    json!({
                        "node": o["spec"]["nodeName"],
                        "reservation": reservation,
                        "unschedulable": if o["spec"]["nodeName"].is_null() { unschedulable } else { None },
                        "nominated": o["status"]["nominatedNodeName"],
                    }),
                );
            }
            "Reservation" => {
                let s = &o["status"];
                let mut owners: Vec<String> = s["currentOwners"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|w| {
                        format!(
                            "{}/{}",
                            w["namespace"].as_str().unwrap_or(""),
                            w["name"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                owners.sort();
                let conditions: Vec<Value> = s["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| json!({"type": c["type"], "status": c["status"], "reason": c["reason"], "message": c["message"]}))
                    .collect();
                out.insert(
                    format!("Reservation {name}"),
                    json!({
                        "phase": s["phase"], "node": s["nodeName"], "owners": owners,
                        "allocatable": s["allocatable"], "allocated": s["allocated"],
                        "conditions": conditions,
                    }),
                );
            }
            // What VolumeBinding's PreBind and the controllers leave behind: the claim's
            // volume and chosen node, the volume's claim. A provisioned volume is named for
            // its claim's UID, which differs between the drivers: named for the claim here.
            "PersistentVolumeClaim" => {
                let ns = meta["namespace"].as_str().unwrap_or("default");
                let volume = o["spec"]["volumeName"].as_str().map(|v| {
                    if v.starts_with("pvc-") {
                        format!("provisioned for {ns}/{name}")
                    } else {
                        v.to_string()
                    }
                });
                out.insert(
                    format!("PersistentVolumeClaim {ns}/{name}"),
                    json!({
                        "phase": o["status"]["phase"],
                        "volume": volume,
                        "selectedNode": meta["annotations"]["volume.kubernetes.io/selected-node"],
                    }),
                );
            }
            "PersistentVolume" => {
                let claim = &o["spec"]["claimRef"];
                let claim = claim["name"]
                    .as_str()
                    .map(|c| format!("{}/{c}", claim["namespace"].as_str().unwrap_or("default")));
                let key = match (&claim, name.starts_with("pvc-")) {
                    (Some(c), true) => format!("PersistentVolume provisioned for {c}"),
                    _ => format!("PersistentVolume {name}"),
                };
                let hosts = o["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"].clone();
                out.insert(
                    key,
                    json!({"phase": o["status"]["phase"], "claim": claim, "nodeAffinity": hosts}),
                );
            }
            // What DynamicResources' PreBind and the claim controller leave behind. A claim
            // made from a pod's template is named at random in the cluster (for the pod's
            // UID in simulate): named for its pod and the pod's claim here.
            "ResourceClaim" => {
                let ns = meta["namespace"].as_str().unwrap_or("default");
                let owner = meta["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|o| o["kind"] == "Pod" && o["controller"] == true)
                    .and_then(|o| o["name"].as_str());
                let for_pod = meta["annotations"]["resource.kubernetes.io/pod-claim-name"].as_str();
                let key = match (owner, for_pod) {
                    (Some(pod), Some(claim)) => {
                        format!("ResourceClaim {ns}/{pod}'s {claim}")
                    }
                    _ => format!("ResourceClaim {ns}/{name}"),
                };
                let devices: Vec<Value> = o["status"]["allocation"]["devices"]["results"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| json!([r["request"], r["driver"], r["pool"], r["device"]]))
                    .collect();
                let mut consumers: Vec<String> = o["status"]["reservedFor"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        format!(
                            "{}/{}",
                            c["resource"].as_str().unwrap_or(""),
                            c["name"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                consumers.sort();
                out.insert(
                    key,
                    json!({
                        "allocated": o["status"]["allocation"].is_object(),
                        "devices": devices,
                        "nodeSelector": o["status"]["allocation"]["nodeSelector"],
                        "reservedFor": consumers,
                    }),
                );
            }
            // `v1` Events from simulate, `events.k8s.io/v1` from the cluster.
            "Event" => {
                let reason = o["reason"].as_str().unwrap_or("");
                if o["type"] != "Warning" || !REFUSALS.contains(&reason) {
                    continue;
                }
                let about = if o["regarding"].is_object() {
                    &o["regarding"]
                } else {
                    &o["involvedObject"]
                };
                let message = if o["note"].is_string() {
                    &o["note"]
                } else {
                    &o["message"]
                };
                let key = format!(
                    "Warning {reason} {}/{}",
                    about["kind"].as_str().unwrap_or(""),
                    about["name"].as_str().unwrap_or("")
                );
                let entry = out.entry(key).or_insert_with(|| json!([]));
                if let Some(list) = entry.as_array_mut() {
                    list.push(message.clone());
                }
            }
            _ => {}
        }
    }
    out
}

async fn cluster_items(client: &Client) -> Vec<Value> {
    let lp = ListParams::default();
    let mut items = Vec::new();
    for kind in [
        "Pod",
        "Reservation",
        "Event",
        "PersistentVolumeClaim",
        "PersistentVolume",
        "ResourceClaim",
    ] {
        let (ar, _) = resource(&json!({"apiVersion": api_version_of(kind), "kind": kind}));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        for mut o in api.list(&lp).await.expect("list").items {
            o.types = Some(kube::api::TypeMeta {
                api_version: api_version_of(kind).into(),
                kind: kind.into(),
            });
            items.push(serde_json::to_value(o).expect("json"));
        }
    }
    items
}

fn simulate(case: &Case) -> Vec<Value> {
    let options = berth_sim::Options {
        files: vec![case.path.display().to_string()],
        config: case.config.as_ref().map(|c| c.display().to_string()),
        output: berth_sim::Format::Json,
        seed: 0,
    };
    let out = berth_sim::run(&options, &mut std::io::empty());
    let list: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: simulate output: {e}\n{}",
            case.path.display(),
            out.stderr
        )
    });
    list["items"].as_array().cloned().unwrap_or_default()
}

async fn wait_seen(handle: &berth_kube::Handle, key: &ObjectKey, want: Option<&str>) {
    for _ in 0..2000 {
        match (handle.seen(key), want) {
            (Some(Some(uid)), Some(w)) if uid == w => return,
            (Some(None), None) | (None, None) => return,
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("berth never saw {key} ({want:?})");
}

/// While scheduling is held: waits until kube-controller-manager has made the claim of every
/// pod's claim template among `objects` and berth has it, as simulate's claim controller has
/// made them all before the scheduler's first cycle. Released earlier, pods would be
/// scheduled in the order their claims happen to appear, and which pods of a burst get the
/// scarce devices would depend on the controller's pace.
async fn wait_generated_claims(client: &Client, handle: &berth_kube::Handle, objects: &[Value]) {
    let wanted: Vec<(String, String, String)> = objects
        .iter()
        .filter(|o| o["kind"] == "Pod")
        .flat_map(|p| {
            let ns = p["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string();
            let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
            p["spec"]["resourceClaims"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c.get("resourceClaimTemplateName").is_some())
                .map(move |c| {
                    (
                        ns.clone(),
                        name.clone(),
                        c["name"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    if wanted.is_empty() {
        return;
    }
    for _ in 0..600 {
        let claims = list_all(client, "ResourceClaim").await;
        let found: Vec<&DynamicObject> = wanted
            .iter()
            .filter_map(|(ns, pod, claim)| {
                claims.iter().find(|c| {
                    let m = &c.metadata;
                    m.namespace.as_deref() == Some(ns.as_str())
                        && m.owner_references
                            .iter()
                            .flatten()
                            .any(|o| o.kind == "Pod" && o.name == *pod)
                        && m.annotations
                            .as_ref()
                            .and_then(|a| a.get("resource.kubernetes.io/pod-claim-name"))
                            == Some(claim)
                })
            })
            .collect();
        if found.len() == wanted.len() {
            for c in found {
                let key = ObjectKey::new(
                    Kind::ResourceClaim,
                    c.metadata.namespace.as_deref().unwrap_or("default"),
                    c.metadata.name.as_deref().unwrap_or(""),
                );
                wait_seen(handle, &key, c.metadata.uid.as_deref()).await;
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("kube-controller-manager never made the claims of {wanted:?}");
}

/// Waits until berth has been idle for a while (watch echoes of its own writes included).
async fn settle(handle: &mut berth_kube::Handle) {
    loop {
        handle
            .wait_for(Duration::from_secs(60), |s| s.idle)
            .await
            .unwrap_or_else(|s| panic!("berth never became idle: {s:?}"));
        let events = handle.snapshot().events;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let s = handle.snapshot();
        if s.idle && s.events == events {
            return;
        }
    }
}

/// The resource versions of every claim, volume and resource claim: what the
/// PersistentVolume and ResourceClaim controllers, the provisioner and berth's PreBind change.
async fn volume_versions(client: &Client) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for kind in ["PersistentVolumeClaim", "PersistentVolume", "ResourceClaim"] {
        for o in list_all(client, kind).await {
            out.push((
                format!(
                    "{kind} {}/{}",
                    o.metadata.namespace.unwrap_or_default(),
                    o.metadata.name.unwrap_or_default()
                ),
                o.metadata.resource_version.unwrap_or_default(),
            ));
        }
    }
    out.sort();
    out
}

/// [`settle`], and with volumes, until no claim or volume has changed for longer than the
/// PersistentVolume controller's resync (1 s): a claim it binds on its next round brings a
/// pod back to berth.
async fn settle_step(client: &Client, handle: &mut berth_kube::Handle, volumes: bool) {
    settle(handle).await;
    if !volumes {
        return;
    }
    for _ in 0..60 {
        let before = volume_versions(client).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        settle(handle).await;
        if volume_versions(client).await == before {
            return;
        }
    }
    panic!("the claims and volumes never stopped changing");
}

async fn run_in_cluster(cluster: &TestCluster, case: &Case) -> Vec<Value> {
    let client = cluster.client();
    clean(&client).await;
    // Unnamed profiles are `default-scheduler`'s, as in `berth simulate` (berth run's own
    // default is `berth`).
    let settings = match &case.config {
        Some(c) => {
            let file = c.display().to_string();
            let text = std::fs::read_to_string(c).expect("config");
            Settings::parse_as(&file, &text, "default-scheduler").expect("config")
        }
        None => {
            let mut s = Settings::builtin();
            s.profiles[0].scheduler_name = "default-scheduler".into();
            s
        }
    };
    let kubelet = tokio::spawn(finish_deletions(client.clone()));
    // Each StorageClass's external provisioner, as simulate plays it.
    let provisioner = Provisioner::start(client.clone());
    // A file whose objects carry a status describes what a restarted scheduler finds: the
    // objects exist before berth starts. Otherwise berth watches while they are created, one
    // by one in document order, as the simulator hands them to the core.
    let restart = case
        .initial
        .iter()
        .any(|o| o.get("status").is_some() && o["kind"] != "Node");
    if restart {
        for obj in &case.initial {
            apply(&client, obj).await;
        }
    }
    let mut settings = settings;
    settings.leader_election.leader_elect = false;
    let mut options = RunOptions::new(settings);
    options.track_objects = true;
    options.max_binds_in_flight = 64;
    let mut handle = berth_kube::driver::start(client.clone(), options)
        .await
        .expect("start");
    handle.hold(true);
    handle
        .wait_for(Duration::from_secs(60), |s| s.synced)
        .await
        .expect("synced");
    if !restart {
        for obj in &case.initial {
            let uid = apply(&client, obj).await;
            wait_seen(&handle, &core_key(obj), Some(&uid)).await;
        }
        wait_generated_claims(&client, &handle, &case.initial).await;
    }
    handle.hold(false);
    settle_step(&client, &mut handle, case.volumes).await;
    for (objects, deletes) in &case.steps {
        handle.hold(true);
        for obj in objects {
            let uid = apply(&client, obj).await;
            wait_seen(&handle, &core_key(obj), Some(&uid)).await;
        }
        for d in deletes {
            delete(&client, d).await;
            let kind =
                berth_sim::input::kind_from_name(d["kind"].as_str().unwrap_or("")).expect("kind");
            let name = d["name"].as_str().unwrap_or("");
            let key = if kind.namespaced() {
                ObjectKey::new(kind, d["namespace"].as_str().unwrap_or("default"), name)
            } else {
                ObjectKey::cluster(kind, name)
            };
            wait_seen(&handle, &key, None).await;
        }
        wait_generated_claims(&client, &handle, objects).await;
        handle.hold(false);
        settle_step(&client, &mut handle, case.volumes).await;
    }
    let items = cluster_items(&client).await;
    handle.stop().await.expect("stop");
    kubelet.abort();
    drop(provisioner);
    items
}

#[test]
fn scenarios_give_the_same_outcome_through_both_drivers() {
    let cluster =
        TestCluster::start_with(Options::new().gangs().controller_manager_with(CONTROLLERS))
            .unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // To rerun some files while working on them: the files whose paths contain this.
    let filter = std::env::var("BERTH_PARITY_FILTER")
        .ok()
        .filter(|f| !f.is_empty());
    let mut files: Vec<PathBuf> = SETS
        .iter()
        .flat_map(|set| {
            std::fs::read_dir(scenarios_dir().join(set))
                .into_iter()
                .flatten()
        })
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter(|p| {
            filter
                .as_deref()
                .is_none_or(|f| p.display().to_string().contains(f))
        })
        .collect();
    files.sort();
    let mut ran = Vec::new();
    let mut skipped = Vec::new();
    let mut mismatches = Vec::new();
    for path in &files {
        let case = match read_case(path) {
            Ok(c) => c,
            Err(why) => {
                skipped.push(format!("{} ({why})", path.display()));
                continue;
            }
        };
        let sim_items = simulate(&case);
        // A pod the simulated kubelet rejected (TopologyAffinityError) left its node in the
        // simulation; with no kubelet in the test cluster it stays. Not comparable.
        if sim_items
            .iter()
            .any(|o| o["kind"] == "Pod" && o["status"]["phase"] == "Failed")
        {
            skipped.push(format!(
                "{} (simulated kubelet rejects a pod)",
                path.display()
            ));
            continue;
        }
        let want = summary(&sim_items);
        let got = summary(&runtime.block_on(run_in_cluster(&cluster, &case)));
        ran.push(path.display().to_string());
        if want != got {
            let mut diff = String::new();
            for k in want
                .keys()
                .chain(got.keys().filter(|k| !want.contains_key(*k)))
            {
                if want.get(k) != got.get(k) {
                    diff += &format!(
                        "  {k}:\n    simulate: {}\n    run:      {}\n",
                        want.get(k).map_or("-".into(), Value::to_string),
                        got.get(k).map_or("-".into(), Value::to_string)
                    );
                }
            }
            mismatches.push(format!("{}:\n{diff}", path.display()));
        }
    }
    eprintln!(
        "parity: ran {} files, skipped {}:",
        ran.len(),
        skipped.len()
    );
    for s in &skipped {
        eprintln!("  skipped {s}");
    }
    assert!(
        filter.is_some() || ran.len() >= 20,
        "too few scenario files ran through both drivers: {ran:?}"
    );
    assert!(
        mismatches.is_empty(),
        "{} of {} files differ between berth simulate and berth run:\n{}",
        mismatches.len(),
        ran.len(),
        mismatches.join("\n")
    );
}
