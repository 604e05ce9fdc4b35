//! `berth explain --kubeconfig` against a real kube-apiserver and etcd gives the same answer
//! as `berth explain` on the equivalent scenario file: the objects of the file are created in
//! the cluster (nodes with their status, pods bound to nodes, a reservation with its status,
//! a pending pod nobody schedules), then both commands explain the pending pod as JSON and
//! the two explanations must be equal. The live run only LISTs: afterwards the cluster holds
//! exactly what the test created, unchanged.

use std::process::Command;

use berth_testcluster::TestCluster;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

/// n1 is tainted, n2 holds reservation r1 (2 CPUs for app=web) and a 1-CPU pod, n3 a 2-CPU
/// pod; web-big (app=web, 4 CPUs) fits nowhere: a taint on n1, 1 CPU short on n2 even with
/// r1, 2 short on n3.
const SCENARIO: &str = r#"apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
spec: {taints: [{key: dedicated, value: gpu, effect: NoSchedule}]}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}, capacity: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {kubernetes.io/hostname: n2}}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}, capacity: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: n3, labels: {kubernetes.io/hostname: n3}}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}, capacity: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata: {name: r1}
spec:
  allocateOnce: false
  template: {spec: {nodeName: n2, containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "2"}}}]}}
  owners: [{labelSelector: {matchLabels: {app: web}}}]
status:
  phase: Available
  nodeName: n2
  allocatable: {cpu: "2"}
---
apiVersion: v1
kind: Pod
metadata: {name: busy-n2, namespace: default}
spec:
  nodeName: n2
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "1"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: busy-n3, namespace: default}
spec:
  nodeName: n3
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "2"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-big, namespace: default, labels: {app: web}}
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "4"}}}]
"#;

fn resource(obj: &Value) -> (ApiResource, bool) {
    let api_version = obj["apiVersion"].as_str().unwrap_or("v1");
    let kind = obj["kind"].as_str().unwrap_or("");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    (
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind)),
        kind == "Pod",
    )
}

/// Creates `obj` as `kubectl apply` would, then writes its status (a reservation's) as the
/// scheduler that placed it would have.
async fn create(client: &Client, obj: &Value) {
    let (ar, namespaced) = resource(obj);
    let api: Api<DynamicObject> = if namespaced {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default");
        Api::namespaced_with(client.clone(), ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let dynamic: DynamicObject = serde_json::from_value(obj.clone()).expect("object");
    let created = api
        .create(&PostParams::default(), &dynamic)
        .await
        .unwrap_or_else(|e| panic!("creating {}: {e}", obj["metadata"]["name"]));
    if let Some(status) = obj.get("status") {
        if obj["kind"] != "Node" && created.data.get("status") != Some(status) {
            let mut next = created.clone();
            next.data["status"] = status.clone();
            let name = created.metadata.name.clone().unwrap_or_default();
            api.replace_status(&name, &PostParams::default(), &next)
                .await
                .unwrap_or_else(|e| panic!("writing the status of {name}: {e}"));
        }
    }
}

/// Every object the test created, as (kind/name, resourceVersion), to prove nothing changed.
async fn versions(client: &Client) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (api_version, kind) in [
        ("v1", "Node"),
        ("v1", "Pod"),
        ("scheduling.koordinator.sh/v1alpha1", "Reservation"),
    ] {
        let (ar, _) = resource(&json!({"apiVersion": api_version, "kind": kind}));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        for o in api.list(&ListParams::default()).await.expect("list").items {
            out.push((
                format!("{kind}/{}", o.metadata.name.unwrap_or_default()),
                o.metadata.resource_version.unwrap_or_default(),
            ));
        }
    }
    out.sort();
    out
}

fn berth(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .output()
        .expect("running berth");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn explain_on_a_live_cluster_matches_explain_on_the_scenario_file() {
    let cluster = TestCluster::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(format!("berth-explain-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let file = dir.join("scenario.yaml");
    std::fs::write(&file, SCENARIO).expect("scenario written");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let before = rt.block_on(async {
        let client = cluster.client();
        for doc in SCENARIO.split("\n---\n") {
            let obj: Value = serde_yaml_ng::from_str(doc).expect("YAML document");
            create(&client, &obj).await;
        }
        versions(&client).await
    });

    let file_arg = file.to_string_lossy().into_owned();
    let (code, from_file, err) = berth(&["explain", "web-big", &file_arg, "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let kubeconfig = cluster.kubeconfig_path().to_string_lossy().into_owned();
    let (code, live, err) = berth(&[
        "explain",
        "web-big",
        "--kubeconfig",
        &kubeconfig,
        "-o",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let a: Value = serde_json::from_str(&from_file).expect("JSON from the file");
    let b: Value = serde_json::from_str(&live).expect("JSON from the cluster");
    assert_eq!(
        a, b,
        "the scenario file and the live cluster explain web-big differently:\n--- file\n{from_file}\n--- cluster\n{live}"
    );
    // And the answer is the expected one, not merely the same.
    assert_eq!(a["change"]["kind"], "resources", "{from_file}");
    assert_eq!(a["change"]["node"], "n2", "{from_file}");
    assert_eq!(a["reservations"][0]["name"], "r1", "{from_file}");
    assert_eq!(a["reservations"][0]["verdict"], "capacity", "{from_file}");

    // Text too.
    let (_, text_file, _) = berth(&["explain", "web-big", &file_arg]);
    let (_, text_live, _) = berth(&["explain", "web-big", "--kubeconfig", &kubeconfig]);
    assert_eq!(text_file, text_live);
    assert!(
        text_live.contains("n1: rejected")
            && text_live.contains("untolerated taint {dedicated: gpu}"),
        "{text_live}"
    );

    // Read-only: every object is as the test left it.
    let after = rt.block_on(async { versions(&cluster.client()).await });
    assert_eq!(before, after, "berth explain must not write to the cluster");
    let _ = std::fs::remove_dir_all(&dir);
}
