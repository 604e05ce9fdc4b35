//! Gangs through `berth run` against a real kube-apiserver and etcd (PodGroup CRDs served),
//! for what the parity files cannot show because it takes real time or a refusing API
//! server:
//!
//! - a non-strict gang of 8 on room for 6 holds its 6 members' room while they wait at
//!   Permit, so another pod needing it waits too; at the PodGroup's
//!   `scheduleTimeoutSeconds` they are rejected (`rejected due to timeout ...`) and the room
//!   goes to the other pod; no member was ever bound;
//! - a member whose bind the API server refuses (a ValidatingAdmissionPolicy on
//!   `pods/binding`, a real admission refusal) is not bound while the rest of its gang,
//!   already allowed at Permit, is; once the policy is gone it binds, rejoining its gang.

mod support;

use std::time::{Duration, Instant};

use berth_testcluster::{Options, TestCluster};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::Client;
use serde_json::{json, Value};
use support::*;

fn env(test: &str) -> Env {
    Env {
        cluster: TestCluster::start_with(Options::new().gangs()).unwrap_or_else(|e| panic!("{e}")),
        dir: scratch(test),
        rt: tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime"),
    }
}

async fn nodes(cluster: &TestCluster, cpu: &str) {
    for n in ["n1", "n2"] {
        let node = serde_json::from_value(json!({
            "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
            "status": {"capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                       "allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("node");
        cluster.create_node_with(node).await.expect("node");
    }
}

fn dynamic(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

async fn create(client: &Client, ar: &ApiResource, ns: Option<&str>, obj: Value) {
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let obj: DynamicObject = serde_json::from_value(obj).expect("object");
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("creating {:?}: {e}", obj.metadata.name));
}

async fn pod_group(client: &Client, ns: &str, min: i32, timeout_s: i32, strict: bool) {
    let mut annotations = json!({});
    if !strict {
        annotations["gang.scheduling.koordinator.sh/mode"] = json!("NonStrict");
    }
    create(
        client,
        &dynamic("scheduling.sigs.k8s.io", "v1alpha1", "PodGroup"),
        Some(ns),
        json!({
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "job", "namespace": ns, "annotations": annotations},
            "spec": {"minMember": min, "scheduleTimeoutSeconds": timeout_s}
        }),
    )
    .await;
}

fn pod(ns: &str, name: &str, cpu: &str, gang: bool) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"requests": {"cpu": cpu}}}]}
    });
    if gang {
        p["metadata"]["labels"] = json!({"pod-group.scheduling.sigs.k8s.io": "job"});
    }
    p
}

async fn pods(client: &Client, ns: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

fn name_of(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or("")
}

/// The message of `p`'s PodScheduled condition, if it has one.
fn scheduled_message(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .and_then(|c| c.message.clone())
        .unwrap_or_default()
}

/// Polls `check` every 250 ms until it gives `Some`, or panics after `within` with `why`.
async fn eventually<T, F, Fut>(within: Duration, why: impl Fn() -> String, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) => assert!(
                start.elapsed() < within,
                "not within {within:?}: {last}\n{}",
                why()
            ),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[test]
fn a_gang_time_out_gives_its_held_room_back() {
    let Env { cluster, dir, rt } = env("gang-timeout");
    rt.block_on(async {
        let client = cluster.client();
        nodes(&cluster, "3").await;
        let ns = "timeout";
        cluster.create_namespace(ns).await.expect("ns");
        let berth = Berth::start(&dir, "berth", cluster.kubeconfig_path(), CONFIG);
        pod_group(&client, ns, 8, 6, false).await;
        let members = (1..=8)
            .map(|i| pod(ns, &format!("w{i}"), "1", true))
            .collect();
        // No member can wait at Permit before it exists: the time-out is due 6s after this
        // at the earliest.
        let created = Instant::now();
        create_all(&client, members).await;
        // Six members fit and wait at Permit holding 6 CPUs; the two that do not are said
        // unschedulable. Then a pod needing a whole node cannot be placed while they wait.
        eventually(
            Duration::from_secs(60),
            || berth.log_tail(),
            || async {
                let all = pods(&client, ns).await;
                let said = all
                    .iter()
                    .filter(|p| !scheduled_message(p).is_empty())
                    .count();
                (said >= 2)
                    .then_some(())
                    .ok_or_else(|| format!("{said} members said unschedulable"))
            },
        )
        .await;
        create_all(&client, vec![pod(ns, "big", "3", false)]).await;
        let waited = eventually(
            Duration::from_secs(60),
            || berth.log_tail(),
            || async {
                let all = pods(&client, ns).await;
                if let Some(p) = all
                    .iter()
                    .find(|p| node_of(p).is_some() && name_of(p) != "big")
                {
                    panic!("gang member {} bound: {:?}", name_of(p), node_of(p));
                }
                let big = all.iter().find(|p| name_of(p) == "big");
                match big.and_then(node_of) {
                    Some(_) => Ok(created.elapsed()),
                    None => Err("big not bound yet".to_string()),
                }
            },
        )
        .await;
        // It was the time-out that freed the room, not anything sooner.
        assert!(
            waited >= Duration::from_secs(6),
            "big bound {waited:?} after the members were created"
        );
        let all = pods(&client, ns).await;
        assert!(
            all.iter()
                .all(|p| name_of(p) == "big" || node_of(p).is_none()),
            "{:?}",
            all.iter()
                .map(|p| (name_of(p), node_of(p)))
                .collect::<Vec<_>>()
        );
        let said = all
            .iter()
            .filter(|p| name_of(p) != "big")
            .map(scheduled_message)
            .filter(|m| {
                m.contains("rejected due to timeout after waiting 6s at plugin Coscheduling")
            })
            .count();
        assert!(
            said > 0,
            "{:?}",
            all.iter().map(scheduled_message).collect::<Vec<_>>()
        );
    });
}

/// A ValidatingAdmissionPolicy refusing the binding of pods named `name`, and its binding.
async fn refuse_binding_of(client: &Client, name: &str) {
    let group = "admissionregistration.k8s.io";
    create(
        client,
        &dynamic(group, "v1", "ValidatingAdmissionPolicy"),
        None,
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "refuse-binding"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods/binding"]}]},
                "validations": [{"expression": format!("object.metadata.name != '{name}'"),
                                 "message": "binding refused by the test's policy"}]
            }
        }),
    )
    .await;
    create(
        client,
        &dynamic(group, "v1", "ValidatingAdmissionPolicyBinding"),
        None,
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "refuse-binding"},
            "spec": {"policyName": "refuse-binding", "validationActions": ["Deny"]}
        }),
    )
    .await;
}

/// Whether the API server refuses a (dry-run) binding of `ns/name` to `n1` yet.
async fn binding_refused(client: &Client, ns: &str, name: &str) -> bool {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let body = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    });
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let r: Result<Value, _> = api.create_subresource("binding", name, &pp, &body).await;
    matches!(r, Err(kube::Error::Api(s)) if s.message.contains("refused by the test's policy"))
}

#[test]
fn a_member_whose_bind_is_refused_rejoins_its_bound_gang_later() {
    let Env { cluster, dir, rt } = env("gang-refused-bind");
    rt.block_on(async {
        let client = cluster.client();
        nodes(&cluster, "3").await;
        let ns = "refused";
        cluster.create_namespace(ns).await.expect("ns");
        // A pod no scheduler takes, to probe when the policy is in force.
        let mut probe = pod("probe", "w3", "1", false);
        probe["spec"]["schedulerName"] = json!("nobody");
        cluster.create_namespace("probe").await.expect("ns");
        create_all(&client, vec![probe]).await;
        refuse_binding_of(&client, "w3").await;
        eventually(Duration::from_secs(30), String::new, || async {
            binding_refused(&client, "probe", "w3")
                .await
                .then_some(())
                .ok_or_else(|| "policy not in force yet".to_string())
        })
        .await;
        let berth = Berth::start(&dir, "berth", cluster.kubeconfig_path(), CONFIG);
        pod_group(&client, ns, 4, 30, true).await;
        let members = (1..=4)
            .map(|i| pod(ns, &format!("w{i}"), "1", true))
            .collect();
        create_all(&client, members).await;
        // The gang is allowed at Permit together; three binds go through, w3's is refused
        // (again and again, backed off), and nothing else is bound in its place.
        eventually(
            Duration::from_secs(60),
            || berth.log_tail(),
            || async {
                let all = pods(&client, ns).await;
                let bound: Vec<&str> = all
                    .iter()
                    .filter(|p| node_of(p).is_some())
                    .map(name_of)
                    .collect();
                (bound == ["w1", "w2", "w4"])
                    .then_some(())
                    .ok_or_else(|| format!("bound: {bound:?}"))
            },
        )
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let w3 = Api::<Pod>::namespaced(client.clone(), ns)
            .get("w3")
            .await
            .expect("w3");
        assert_eq!(node_of(&w3), None);
        // The policy goes: w3 binds, and the gang is whole, with nothing overcommitted.
        let dp = DeleteParams::default();
        let group = "admissionregistration.k8s.io";
        for kind in [
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
        ] {
            Api::<DynamicObject>::all_with(client.clone(), &dynamic(group, "v1", kind))
                .delete("refuse-binding", &dp)
                .await
                .expect("delete policy");
        }
        wait_bound(&client, ns, 4, Duration::from_secs(120), || {
            berth.log_tail()
        })
        .await;
        assert_no_overcommit(&client).await;
    });
}
