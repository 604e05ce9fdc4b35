//! `berth migrate` (the PodMigrationJob controller) and `berth run` against a real
//! kube-apiserver with the PodMigrationJob CRD from `berth crd`, and a real
//! kube-controller-manager whose ReplicaSet, Deployment, garbage-collector and disruption
//! controllers create the replacement pods and keep the PodDisruptionBudgets' status. The
//! test plays the kubelet: a bound pod is marked Running and Ready, a pod being deleted is
//! removed.
//!
//! The controller runs with the ServiceAccount deploy/migrate/ makes, so its rights are
//! proven enough.
//!
//! The cases of tests/scenarios/migration/ that matter most, in one cluster (a namespace
//! each): a Deployment's pod migrated ReservationFirst, its replacement in the Reservation and
//! the job Succeeded; a budget allowing no disruption makes the job wait (the Eviction API's
//! 429), until a replica more lets it go on; a Reservation that cannot be placed fails the
//! job with the scheduler's reason and evicts nothing; two jobs of one workload under
//! `maxUnavailablePerWorkload: 1` run one after the other.

use std::time::Duration;

use berth_kube::migrate::{self, MigrateOptions};
use berth_kube::{RunOptions, Settings};
use berth_testcluster::{Options, TestCluster};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::Client;
use serde_json::{json, Value};

const CONTROLLERS: &[&str] = &[
    "replicaset-controller",
    "deployment-controller",
    "garbage-collector-controller",
    "disruption-controller",
];

const ANN_ALLOCATED: &str = "scheduling.koordinator.sh/reservation-allocated";

async fn create(client: &Client, obj: Value) {
    let kind = obj["kind"].as_str().unwrap_or("").to_string();
    let api_version = obj["apiVersion"].as_str().unwrap_or("v1").to_string();
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &kind));
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let o: DynamicObject = serde_json::from_value(obj).expect("object");
    api.create(&PostParams::default(), &o)
        .await
        .unwrap_or_else(|e| panic!("creating {kind}: {e}"));
}

/// The kubelet's part: a bound pod runs and is Ready; a pod being deleted goes.
async fn kubelet(client: Client) {
    use kube::runtime::watcher;
    let all: Api<Pod> = Api::all(client.clone());
    let mut stream = watcher::watcher(all, watcher::Config::default()).boxed();
    while let Some(ev) = stream.next().await {
        let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev else {
            continue;
        };
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        if p.metadata.deletion_timestamp.is_some() {
            let _ = api
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await;
            continue;
        }
        let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
        let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if bound && !running {
            let now = chrono_now();
            let status = json!({"status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
            ]}});
            let _ = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await;
        }
    }
}

fn chrono_now() -> String {
    berth_core::time::rfc3339(berth_kube::effects::wall_clock_ms())
}

async fn reservations(client: &Client) -> Vec<Value> {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &berth_kube::kinds::Served::reservation_resource(),
    );
    api.list(&ListParams::default())
        .await
        .expect("reservations")
        .items
        .into_iter()
        .map(|r| json!({"name": r.metadata.name, "labels": r.metadata.labels, "status": r.data["status"]}))
        .collect()
}

fn job_api(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &migrate::job_resource())
}

async fn job(client: &Client, name: &str) -> Value {
    let j = job_api(client).get(name).await.expect("job");
    serde_json::to_value(j).expect("json")
}

async fn pods_of(client: &Client, ns: &str, selector: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await
        .expect("pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn ready(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Polls `check` every 200 ms for `secs` seconds; panics with its last word.
async fn eventually<F, Fut>(secs: u64, mut check: F) -> String
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<String, String>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) => {
                assert!(tokio::time::Instant::now() < deadline, "never: {last}");
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn deployment(ns: &str, name: &str, replicas: i32, extra_spec: Value) -> Value {
    let mut spec = json!({"schedulerName": "berth", "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]});
    for (k, v) in extra_spec.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
}

fn pmj(name: &str, ns: &str, pod: &str) -> Value {
    json!({"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "PodMigrationJob",
        "metadata": {"name": name},
        "spec": {"podRef": {"namespace": ns, "name": pod}}})
}

/// The Deployment's one running pod, once there is exactly one.
async fn the_pod(client: &Client, ns: &str, app: &str) -> Pod {
    let sel = format!("app={app}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let pods = pods_of(client, ns, &sel).await;
        if let [p] = pods.as_slice() {
            if ready(p) {
                return p.clone();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{app}'s pods never settled: {:?}",
            pods.iter()
                .map(|p| (p.metadata.name.clone(), node_of(p)))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn reservation_first(client: &Client) {
    let ns = "first";
    create(client, deployment(ns, "web", 1, json!({}))).await;
    let pod = the_pod(client, ns, "web").await;
    let from = node_of(&pod).expect("bound");
    let name = pod.metadata.name.clone().unwrap_or_default();
    create(client, pmj("move-web", ns, &name)).await;
    let status = eventually(90, || async {
        let j = job(client, "move-web").await;
        match j["status"]["phase"].as_str() {
            Some("Succeeded") => Ok(j.to_string()),
            Some("Failed") => panic!("the job failed: {j}"),
            _ => Err(format!(
                "{j}\nreservations: {:?}\npods: {:?}",
                reservations(client).await,
                pods_of(client, ns, "app=web")
                    .await
                    .iter()
                    .map(|p| (
                        p.metadata.name.clone(),
                        node_of(p),
                        p.metadata.annotations.clone()
                    ))
                    .collect::<Vec<_>>()
            )),
        }
    })
    .await;
    let j: Value = serde_json::from_str(&status).expect("json");
    let reservation = j["spec"]["reservationOptions"]["reservationRef"]["name"]
        .as_str()
        .expect("the job names its Reservation")
        .to_string();
    let pods = pods_of(client, ns, "app=web").await;
    assert_eq!(pods.len(), 1, "one replica: {pods:?}");
    let new = &pods[0];
    assert_ne!(
        new.metadata.name.as_deref(),
        Some(name.as_str()),
        "replaced"
    );
    let to = node_of(new).expect("the replacement is bound");
    assert_ne!(to, from, "the replacement left the pod's node");
    assert_eq!(j["status"]["nodeName"], json!(to));
    let allocated: Value = new
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_ALLOCATED))
        .and_then(|a| serde_json::from_str(a).ok())
        .expect("the replacement is in a Reservation");
    assert_eq!(
        allocated["name"],
        json!(reservation),
        "in the job's Reservation"
    );
    assert_eq!(j["status"]["podRef"]["name"], json!(new.metadata.name));
}

async fn pdb_waits(client: &Client) {
    let ns = "budget";
    create(client, deployment(ns, "web", 2, json!({}))).await;
    create(
        client,
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
    )
    .await;
    let sel = "app=web";
    eventually(60, || async {
        let pods = pods_of(client, ns, sel).await;
        let ok = pods.len() == 2 && pods.iter().all(ready);
        ok.then(String::new)
            .ok_or_else(|| format!("{} pods", pods.len()))
    })
    .await;
    let pod = pods_of(client, ns, sel).await.remove(0);
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone();
    create(client, pmj("move-budget", ns, &name)).await;
    // Refused: the job says why and waits; the pod stays.
    eventually(60, || async {
        let j = job(client, "move-budget").await;
        let waiting = j["status"]["phase"] == "Running" && j["status"]["reason"] == "FailedEvict";
        waiting
            .then(String::new)
            .ok_or_else(|| j["status"].to_string())
    })
    .await;
    let j = job(client, "move-budget").await;
    let message = j["status"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("disruption budget web needs 2 healthy pods"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = Api::<Pod>::namespaced(client.clone(), ns)
        .get(&name)
        .await
        .expect("the pod is still there");
    assert_eq!(still.metadata.uid, uid);
    assert!(still.metadata.deletion_timestamp.is_none());
    assert_eq!(
        job(client, "move-budget").await["status"]["phase"],
        "Running"
    );
    // A third replica the budget counts (another ReplicaSet: one of the Deployment would
    // take the Reservation): the eviction goes through, the replacement lands.
    create(
        client,
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-extra", "namespace": ns},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web", "track": "extra"}},
                "template": {"metadata": {"labels": {"app": "web", "track": "extra"}},
                    "spec": {"schedulerName": "berth", "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}}}),
    )
    .await;
    eventually(90, || async {
        let j = job(client, "move-budget").await;
        match j["status"]["phase"].as_str() {
            Some("Succeeded") => Ok(String::new()),
            Some("Failed") => panic!("the job failed: {j}"),
            _ => Err(j["status"].to_string()),
        }
    })
    .await;
    let gone = Api::<Pod>::namespaced(client.clone(), ns)
        .get_opt(&name)
        .await
        .expect("get");
    assert!(
        gone.is_none_or(|p| p.metadata.uid != uid),
        "the migrated pod was evicted"
    );
}

async fn unplaceable_fails(client: &Client) {
    let ns = "stuck";
    // Pinned to n1 by its template: the Reservation, kept off the pod's node, fits nowhere.
    create(
        client,
        deployment(
            ns,
            "web",
            1,
            json!({"nodeSelector": {"kubernetes.io/hostname": "n1"}}),
        ),
    )
    .await;
    let pod = the_pod(client, ns, "web").await;
    let name = pod.metadata.name.clone().unwrap_or_default();
    create(client, pmj("move-stuck", ns, &name)).await;
    let status = eventually(60, || async {
        let j = job(client, "move-stuck").await;
        match j["status"]["phase"].as_str() {
            Some("Failed") => Ok(j["status"].to_string()),
            Some("Succeeded") => panic!("the job succeeded: {j}"),
            _ => Err(j["status"].to_string()),
        }
    })
    .await;
    let status: Value = serde_json::from_str(&status).expect("json");
    assert_eq!(status["reason"], "Unschedulable", "{status}");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("0/2 nodes are available")),
        "{status}"
    );
    let still = Api::<Pod>::namespaced(client.clone(), ns)
        .get(&name)
        .await
        .expect("the pod stays");
    assert_eq!(still.metadata.uid, pod.metadata.uid);
    assert!(still.metadata.deletion_timestamp.is_none());
    // The job's Reservation is cleaned up.
    let j = job(client, "move-stuck").await;
    if let Some(r) = j["spec"]["reservationOptions"]["reservationRef"]["name"].as_str() {
        let reservations: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &berth_kube::kinds::Served::reservation_resource(),
        );
        eventually(30, || async {
            match reservations.get_opt(r).await.expect("get") {
                None => Ok(String::new()),
                Some(o) => Err(format!(
                    "Reservation {r} left behind: {:?}",
                    o.data["status"]
                )),
            }
        })
        .await;
    }
}

/// Two jobs for the two pods of one workload, with `maxUnavailablePerWorkload: 1`: the second
/// waits, `Pending` with the limit in its message, while the first migrates its pod; both
/// succeed.
async fn one_at_a_time(client: &Client) {
    let ns = "pair";
    create(client, deployment(ns, "web", 2, json!({}))).await;
    let sel = "app=web";
    eventually(60, || async {
        let pods = pods_of(client, ns, sel).await;
        let ok = pods.len() == 2 && pods.iter().all(ready);
        ok.then(String::new)
            .ok_or_else(|| format!("{} pods", pods.len()))
    })
    .await;
    let pods = pods_of(client, ns, sel).await;
    let names: Vec<String> = pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    create(client, pmj("move-a", ns, &names[0])).await;
    create(client, pmj("move-b", ns, &names[1])).await;
    let mut held = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let a = job(client, "move-a").await;
        let b = job(client, "move-b").await;
        let phase = |j: &Value| j["status"]["phase"].as_str().unwrap_or("").to_string();
        if phase(&b) == "Pending"
            && b["status"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("maxUnavailablePerWorkload"))
        {
            held = true;
        }
        // The arbiter counts the Running jobs whose pods are still there (Koordinator's
        // count): once the first pod is evicted, and before the ReplicaSet's replacement
        // exists to count as unavailable, the second job may start. Never before.
        let evicted = a["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Eviction" && c["status"] == "True");
        assert!(
            !(phase(&a) == "Running" && !evicted && phase(&b) == "Running"),
            "both jobs of one workload ran before the first eviction:\n{a}\n{b}"
        );
        for j in [&a, &b] {
            assert_ne!(phase(j), "Failed", "{j}");
        }
        if phase(&a) == "Succeeded" && phase(&b) == "Succeeded" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never both Succeeded:\n{a}\n{b}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(held, "the second job was never held back by the limit");
}

/// The Reservations kept for `kept_for` (`Deployment.web`) of namespace `ns`: name, phase and
/// metadata (with the status under `status`).
async fn kept(client: &Client, ns: &str, kept_for: &str) -> Vec<(String, String, Value)> {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &berth_kube::kinds::Served::reservation_resource(),
    );
    let selector = format!("reservation.berth.dev/kept-for={kept_for}");
    let mut out: Vec<(String, String, Value)> = api
        .list(&ListParams::default().labels(&selector))
        .await
        .expect("reservations")
        .items
        .into_iter()
        .filter(|r| {
            let annotation = r
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("reservation.berth.dev/kept-for"))
                .and_then(|a| serde_json::from_str::<Value>(a).ok());
            annotation.is_some_and(|a| a["namespace"] == ns)
        })
        .map(|r| {
            let phase = r.data["status"]["phase"].as_str().unwrap_or("").to_string();
            let mut meta = serde_json::to_value(&r.metadata).unwrap_or_default();
            meta["status"] = r.data["status"].clone();
            (r.metadata.name.clone().unwrap_or_default(), phase, meta)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

async fn scale(client: &Client, ns: &str, name: &str, replicas: i32) {
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scale");
}

async fn running(client: &Client, ns: &str, sel: &str, n: usize) {
    eventually(90, || async {
        let pods = pods_of(client, ns, sel).await;
        let ok = pods.len() == n && pods.iter().all(ready);
        ok.then(String::new).ok_or_else(|| {
            format!(
                "{} pods, {} running, want {n}",
                pods.len(),
                pods.iter().filter(|p| ready(p)).count()
            )
        })
    })
    .await;
}

fn opted_in(ns: &str, replicas: i32, ttl: &str) -> Value {
    let mut d = deployment(ns, "web", replicas, json!({}));
    d["metadata"]["annotations"] = json!({"reservation.berth.dev/keep-after-scale-down": ttl});
    d
}

/// A Deployment opted in with a 10-minute TTL scaled from 5 to 2 keeps 3 Reservations
/// (no owner reference: the garbage collector refuses a namespaced owner of a
/// cluster-scoped object; the workload is named by label and annotation, the ReplicaSet is
/// the owner in `spec.owners`); the scale-up back to 5 lands its 3 new pods in them.
async fn keep_after_scale_down(client: &Client) {
    let ns = "keep";
    create(client, opted_in(ns, 5, "10m")).await;
    running(client, ns, "app=web", 5).await;
    let before: Vec<String> = pods_of(client, ns, "app=web")
        .await
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    scale(client, ns, "web", 2).await;
    running(client, ns, "app=web", 2).await;
    let reservations = eventually(60, || async {
        let k = kept(client, ns, "Deployment.web").await;
        let ok = k.len() == 3 && k.iter().all(|(_, phase, _)| phase == "Available");
        ok.then(|| serde_json::to_string(&k).unwrap_or_default())
            .ok_or_else(|| format!("{k:?}"))
    })
    .await;
    let reservations: Vec<(String, String, Value)> =
        serde_json::from_str(&reservations).expect("json");
    let names: Vec<String> = reservations.iter().map(|r| r.0.clone()).collect();
    for (name, _, meta) in &reservations {
        assert!(meta.get("ownerReferences").is_none(), "{name}: {meta}");
        let pod = name
            .strip_suffix("-kept")
            .and_then(|n| n.strip_prefix(&format!("{ns}.")))
            .expect("named after the pod");
        assert!(
            before.iter().any(|b| b == pod),
            "{name} is a scaled-away pod's"
        );
        let kept_for: Value = serde_json::from_str(
            meta["annotations"]["reservation.berth.dev/kept-for"]
                .as_str()
                .expect("annotated"),
        )
        .expect("json");
        assert_eq!(kept_for["kind"], "Deployment");
        assert_eq!(kept_for["namespace"], ns);
        assert_eq!(kept_for["name"], "web");
    }
    scale(client, ns, "web", 5).await;
    running(client, ns, "app=web", 5).await;
    let pods = pods_of(client, ns, "app=web").await;
    let mut landed: Vec<String> = pods
        .iter()
        .filter(|p| !before.contains(p.metadata.name.as_ref().unwrap_or(&String::new())))
        .filter_map(|p| p.metadata.annotations.as_ref()?.get(ANN_ALLOCATED))
        .filter_map(|a| serde_json::from_str::<Value>(a).ok())
        .filter_map(|a| a["name"].as_str().map(str::to_string))
        .collect();
    landed.sort();
    assert_eq!(landed, names, "each new pod in a kept Reservation");
    eventually(30, || async {
        let k = kept(client, ns, "Deployment.web").await;
        let ok = k.iter().all(|(_, phase, _)| phase == "Succeeded");
        ok.then(String::new).ok_or_else(|| format!("{k:?}"))
    })
    .await;
}

/// Kept Reservations nobody uses expire by their TTL (`Failed`, `Ready=False/Expired`); an
/// eviction (the Deployment not shrinking) keeps nothing.
async fn kept_expire(client: &Client) {
    let ns = "expire";
    create(client, opted_in(ns, 3, "4s")).await;
    running(client, ns, "app=web", 3).await;
    let victim = pods_of(client, ns, "app=web").await.remove(0);
    Api::<Pod>::namespaced(client.clone(), ns)
        .evict(
            victim.metadata.name.as_deref().unwrap_or(""),
            &Default::default(),
        )
        .await
        .expect("evict");
    running(client, ns, "app=web", 3).await;
    scale(client, ns, "web", 1).await;
    running(client, ns, "app=web", 1).await;
    eventually(60, || async {
        let k = kept(client, ns, "Deployment.web").await;
        let expired = |m: &Value| {
            m["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["reason"] == "Expired")
        };
        let ok = k.len() == 2
            && k.iter()
                .all(|(_, phase, m)| phase == "Failed" && expired(m));
        ok.then(String::new).ok_or_else(|| format!("{k:?}"))
    })
    .await;
}

/// A rollout is not a scale-down: an opted-in Deployment whose template changes replaces its
/// old ReplicaSet's pods with the new one's, and keeps no room for the old ReplicaSet.
async fn rollout_keeps_nothing(client: &Client) {
    let ns = "rollout";
    // One old pod goes before each new one comes (the cluster is nearly full by now).
    let mut d = opted_in(ns, 3, "10m");
    d["spec"]["strategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}});
    create(client, d).await;
    running(client, ns, "app=web", 3).await;
    let new_image = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "c", "image": "pause:2", "resources": {"requests": {"cpu": "1"}}}]}}}});
    Api::<Deployment>::namespaced(client.clone(), ns)
        .patch("web", &PatchParams::default(), &Patch::Merge(new_image))
        .await
        .expect("roll out");
    eventually(90, || async {
        let pods = pods_of(client, ns, "app=web").await;
        let image = |p: &Pod| {
            p.spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
        };
        let ok = pods.len() == 3
            && pods
                .iter()
                .all(|p| ready(p) && image(p).as_deref() == Some("pause:2"));
        let said = |p: &Pod| {
            let conds = p.status.as_ref().and_then(|s| s.conditions.clone());
            let message = conds
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "PodScheduled")
                .and_then(|c| c.message);
            (image(p), node_of(p), message)
        };
        ok.then(String::new)
            .ok_or_else(|| format!("{:?}", pods.iter().map(said).collect::<Vec<_>>()))
    })
    .await;
    // berth migrate has seen every old pod go by now (its watch is ahead of this poll's list
    // or close behind): give it a moment, then nothing may be kept.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let k = kept(client, ns, "Deployment.web").await;
    assert!(k.is_empty(), "a rollout kept room: {k:?}");
}

/// Seed 004 in a cluster: a node opted in with `node.berth.dev/reserved-cpus-migration:
/// ReservationFirst` starts reserving CPUs 0-3; the pod holding CPUs 0-1 (its
/// `resource-status` cpuset, written here as the scheduler's bind would) gets one
/// PodMigrationJob and moves off the node; a pod of the node on other CPUs gets none.
async fn reserved_cores(client: &Client, cluster: &TestCluster) {
    let ns = "cores";
    // Room for the moved pod's Reservation whatever the earlier cases left.
    cluster
        .create_node("n3", "8", "16Gi", 110, &[])
        .await
        .expect("node");
    create(client, deployment(ns, "cpu", 2, json!({}))).await;
    running(client, ns, "app=cpu", 2).await;
    let pods = pods_of(client, ns, "app=cpu").await;
    let node = node_of(&pods[0]).expect("bound");
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let mut holders = Vec::new();
    for (i, p) in pods.iter().enumerate() {
        if node_of(p).as_deref() != Some(node.as_str()) {
            continue;
        }
        let cpuset = if i == 0 { "0-1" } else { "4-5" };
        let name = p.metadata.name.clone().unwrap_or_default();
        let status = json!({"cpuset": cpuset}).to_string();
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "scheduling.koordinator.sh/resource-status": status}}})),
        )
        .await
        .expect("cpuset");
        holders.push((name, cpuset));
    }
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "node.koordinator.sh/reservation": "{\"reservedCPUs\":\"0-3\"}",
                "node.berth.dev/reserved-cpus-migration": "ReservationFirst"}}})),
        )
        .await
        .expect("reserve");
    let moved = &holders[0].0;
    let job_name = format!("reserved-cpus-{ns}-{moved}");
    let j = eventually(90, || async {
        match job_api(client).get_opt(&job_name).await.expect("get") {
            None => Err(format!("no job {job_name}")),
            Some(j) => {
                let j = serde_json::to_value(j).expect("json");
                match j["status"]["phase"].as_str() {
                    Some("Succeeded") => Ok(j.to_string()),
                    Some("Failed") => panic!("the job failed: {j}"),
                    _ => Err(j["status"].to_string()),
                }
            }
        }
    })
    .await;
    let j: Value = serde_json::from_str(&j).expect("json");
    assert_eq!(
        j["metadata"]["labels"]["app.kubernetes.io/created-by"],
        "berth-reserved-cpus"
    );
    assert_ne!(j["status"]["nodeName"], json!(node), "moved off the node");
    assert!(
        api.get_opt(moved)
            .await
            .expect("get")
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "the pod on reserved CPUs was evicted"
    );
    for (other, _) in &holders[1..] {
        let name = format!("reserved-cpus-{ns}-{other}");
        assert!(
            job_api(client).get_opt(&name).await.expect("get").is_none(),
            "{other} holds no reserved CPU: no job"
        );
    }
    running(client, ns, "app=cpu", 2).await;
}

/// The job's `deleteOptions` reach the Eviction API: a precondition naming another UID makes
/// the API server refuse the eviction (the job waits, `FailedEvict` with its message) and the
/// pod stays.
async fn delete_options_passed_on(client: &Client) {
    let ns = "opts";
    create(client, deployment(ns, "web", 1, json!({}))).await;
    let pod = the_pod(client, ns, "web").await;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let mut j = pmj("move-opts", ns, &name);
    j["spec"]["mode"] = json!("EvictDirectly");
    j["spec"]["deleteOptions"] = json!({"preconditions": {"uid": "not-the-pod"}});
    create(client, j).await;
    let status = eventually(60, || async {
        let j = job(client, "move-opts").await;
        let waiting = j["status"]["reason"] == "FailedEvict";
        waiting
            .then(|| j["status"].to_string())
            .ok_or_else(|| j["status"].to_string())
    })
    .await;
    assert!(
        status.contains("the UID in the precondition (not-the-pod) does not match"),
        "{status}"
    );
    let still = Api::<Pod>::namespaced(client.clone(), ns)
        .get(&name)
        .await
        .expect("the pod stays");
    assert_eq!(still.metadata.uid, pod.metadata.uid);
    assert!(still.metadata.deletion_timestamp.is_none());
    // Ended here, so the controller evicts nothing more for it.
    job_api(client)
        .delete("move-opts", &DeleteParams::default())
        .await
        .expect("delete the job");
}

#[test]
fn pod_migration_jobs_in_a_cluster() {
    // `RUST_LOG=berth_kube=debug` shows what the controller does.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let mut crds = berth_testcluster::berth_crds();
    crds.push(berth_api::crd::pod_migration_job_crd());
    let cluster = TestCluster::start_with(
        Options::new()
            .crds(crds)
            .controller_manager_with(CONTROLLERS),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = cluster.client();
        for n in ["n1", "n2"] {
            cluster
                .create_node(n, "8", "16Gi", 110, &[])
                .await
                .expect("node");
        }
        for ns in [
            "first", "budget", "stuck", "pair", "keep", "expire", "rollout", "cores", "opts",
        ] {
            cluster.create_namespace(ns).await.expect("namespace");
        }
        let kubelet = tokio::spawn(kubelet(client.clone()));
        let mut settings = Settings::builtin();
        settings.leader_election.leader_elect = false;
        let mut handle = berth_kube::driver::start(client.clone(), RunOptions::new(settings))
            .await
            .expect("berth run");
        handle
            .wait_for(Duration::from_secs(60), |s| s.synced)
            .await
            .expect("synced");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // The controller runs with exactly the rights deploy/migrate/ grants it, through
        // berth's own client as `berth migrate` connects (no retry layer, so the Eviction
        // API's 429 comes back at once; kube's default client retries 429s for minutes).
        let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
        for file in ["00-namespace.yaml", "migrate"] {
            let out = cluster
                .kubectl_command()
                .args(["apply", "-f"])
                .arg(deploy.join(file))
                .output()
                .expect("kubectl");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let token = cluster
            .service_account_token("berth-system", "berth-migrate")
            .await
            .expect("token");
        let kubeconfig = cluster.kubeconfig_for_token(&token).expect("kubeconfig");
        let migrate_client = berth_kube::client::connect(
            Some(&kubeconfig.display().to_string()),
            &berth_kube::settings::ClientConnection::default(),
        )
        .await
        .expect("client");
        // Two replicas electing a leader on the Lease berth-system/berth-migrate: the first
        // leads (the Lease names it before the second starts), the second stays a standby
        // and never acts, so two replicas never both evict.
        let options = |identity: &str| {
            MigrateOptions {
                // One pod of a workload unavailable or migrating at a time (one_at_a_time);
                // the other cases have one job per workload, which the limit never holds
                // back.
                args: berth_core::migration::MigrationArgs {
                    max_unavailable_per_workload: Some(1),
                    ..Default::default()
                },
                identity: identity.into(),
                ..Default::default()
            }
            .elect_leader_in("berth-system")
        };
        let controller = tokio::spawn(migrate::run(
            migrate_client.clone(),
            options("first"),
            async move {
                let _ = stopped.await;
            },
        ));
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client.clone(), "berth-system");
        eventually(30, || async {
            let holder = leases
                .get_opt(migrate::LEASE_NAME)
                .await
                .expect("lease")
                .and_then(|l| l.spec?.holder_identity);
            (holder.as_deref() == Some("first"))
                .then(String::new)
                .ok_or_else(|| format!("lease held by {holder:?}"))
        })
        .await;
        let (stop_standby, standby_stopped) = tokio::sync::oneshot::channel::<()>();
        let standby = tokio::spawn(migrate::run(
            migrate_client,
            options("second"),
            async move {
                let _ = standby_stopped.await;
            },
        ));

        reservation_first(&client).await;
        pdb_waits(&client).await;
        unplaceable_fails(&client).await;
        one_at_a_time(&client).await;
        keep_after_scale_down(&client).await;
        kept_expire(&client).await;
        reserved_cores(&client, &cluster).await;
        delete_options_passed_on(&client).await;
        // Last: its pods stay, taking room the others need.
        rollout_keeps_nothing(&client).await;

        let _ = stop_standby.send(());
        let idle = standby.await.expect("the standby stopped");
        assert_eq!(
            idle,
            migrate::Outcome::default(),
            "the standby acted while another held the lease"
        );
        let _ = stop.send(());
        let outcome = controller.await.expect("the controller stopped");
        assert!(!outcome.lost_lease, "{outcome:?}");
        assert_eq!(outcome.evicted, 5, "{outcome:?}");
        assert_eq!(outcome.jobs_created, 1, "{outcome:?}");
        assert_eq!(outcome.reservations_kept, 5, "{outcome:?}");
        assert!(outcome.evictions_refused >= 1, "{outcome:?}");
        assert_eq!(outcome.failed, 0, "{outcome:?}");
        handle.stop().await.expect("stop");
        kubelet.abort();
    });
}
