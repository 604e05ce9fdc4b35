//! Reservation-backed preemption (issue 13, seed 002 story 1) end to end: `berth run` against
//! a real kube-apiserver and etcd.
//!
//! Two nodes are filled with low-priority pods (PriorityClasses through the API, every pod
//! scheduled by berth), then a high-priority pod that fits only by evicting arrives. berth
//! picks the node whose victims are the fewest and least important, holds the room with a
//! Reservation the preemptor owns (created *before* any victim is touched), marks the victim
//! `DisruptionTarget` and deletes it, and binds the preemptor into its Reservation once the
//! victim is gone, while two intruders that arrived meanwhile (one more important, one as
//! important, neither preempting) are kept off the freed room.
//!
//! There is no kubelet in the test cluster. A bound pod deleted with a grace period stays in
//! the API as "terminating" (`deletionTimestamp` set) until the kubelet confirms with a
//! deletion of grace 0; berth, like kube-scheduler, deletes victims with their own grace
//! period and must cope with that. The victims here have a 30 s grace period, so the test
//! first sees the hand-over's middle (victim terminating, Reservation `Waiting` on the node,
//! preemptor nominated), then plays the kubelet: it deletes the terminating victim with grace
//! 0 (`TestCluster::delete_pod_now`), as a kubelet does once the containers stopped.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use kube::Client;
use serde_json::{json, Value};
use support::*;

const NS: &str = "preempt";
const HOLD: &str = "preempt-preempt-high";

/// One replica, one profile named `berth` (the pods ask for it), DefaultPreemption with its
/// defaults (reservation-backed preemption on).
const BERTH_CONFIG: &str =
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
    clientConnection: {qps: 1000, burst: 1000}\nleaderElection: {leaderElect: false}\n\
    profiles: [{schedulerName: berth}]\n";

/// A pod for berth at `class`, asking for `cpu`, on `node` if given.
fn pod(name: &str, class: &str, cpu: &str, node: Option<&str>, grace: i64) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedulerName": "berth",
            "priorityClassName": class,
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]
        }
    });
    if let Some(n) = node {
        p["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": n});
    }
    p
}

async fn create_pod(api: &Api<Pod>, v: Value) -> Pod {
    let p: Pod = serde_json::from_value(v).expect("pod");
    api.create(&PostParams::default(), &p)
        .await
        .expect("create pod")
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn terminating(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

fn disruption_target(p: &Pod) -> Option<(String, String, String)> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionTarget")?;
    Some((
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

fn annotation(p: &Pod, key: &str) -> Option<Value> {
    serde_json::from_str(p.metadata.annotations.as_ref()?.get(key)?).ok()
}

/// What the test saw through watches, in the API server's order: `(resourceVersion, what)`.
/// resourceVersions are opaque to clients in general; with etcd they are its revision, one
/// counter for every object, which is what lets the test order a Reservation's creation
/// against a pod's change.
type Seen = Arc<Mutex<Vec<(u64, String)>>>;

fn rv(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Records the first sign of each victim's eviction (its DisruptionTarget condition or its
/// deletionTimestamp, whichever the API server shows first) and each Reservation's creation.
fn record(client: &Client, seen: &Seen) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let s = seen.clone();
    tokio::spawn(async move {
        let wp = WatchParams::default().timeout(280);
        let stream = pods.watch(&wp, "0").await.expect("watch pods");
        let mut stream = std::pin::pin!(stream);
        while let Ok(Some(e)) = stream.try_next().await {
            if let WatchEvent::Modified(p) | WatchEvent::Deleted(p) = e {
                if terminating(&p) || disruption_target(&p).is_some() {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    s.lock()
                        .expect("seen")
                        .push((rv(&p.metadata), format!("evicting pod {name}")));
                }
            }
        }
    });
    let reservations: Api<DynamicObject> = reservation_api(client);
    let s = seen.clone();
    tokio::spawn(async move {
        let wp = WatchParams::default().timeout(280);
        let stream = reservations
            .watch(&wp, "0")
            .await
            .expect("watch reservations");
        let mut stream = std::pin::pin!(stream);
        while let Ok(Some(e)) = stream.try_next().await {
            if let WatchEvent::Added(r) = e {
                let name = r.metadata.name.clone().unwrap_or_default();
                s.lock()
                    .expect("seen")
                    .push((rv(&r.metadata), format!("created reservation {name}")));
            }
        }
    });
}

fn reservation_api(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &berth_kube::kinds::Served::reservation_resource(),
    )
}

/// Polls `f` every 200 ms until it returns `Some`, or panics after `timeout` with the last
/// state it described and `why()`.
async fn eventually<T, F, Fut>(timeout: Duration, why: impl Fn() -> String, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(last) => assert!(
                Instant::now() < deadline,
                "not after {timeout:?}: {last}\n{}",
                why()
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn the_preemptor_evicts_the_fewest_lowest_victims_and_lands_on_its_reservation() {
    let Env { cluster, dir, rt } = Env::new("preemption");
    rt.block_on(async {
        let client = cluster.client();
        for n in ["n0", "n1"] {
            cluster
                .create_node(n, "4", "16Gi", 110, &[])
                .await
                .expect("node");
        }
        cluster.create_namespace(NS).await.expect("ns");
        let classes: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                "scheduling.k8s.io",
                "v1",
                "PriorityClass",
            )),
        );
        // `boss` and `peer` are the intruders' classes: they never preempt (admission takes
        // the pod's preemptionPolicy from its class).
        for (name, value, policy) in [
            ("lowest", 100, "PreemptLowerPriority"),
            ("low", 200, "PreemptLowerPriority"),
            ("mid", 300, "PreemptLowerPriority"),
            ("high", 1000, "PreemptLowerPriority"),
            ("peer", 1000, "Never"),
            ("boss", 5000, "Never"),
        ] {
            let pc: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value, "preemptionPolicy": policy
            }))
            .expect("class");
            classes
                .create(&PostParams::default(), &pc)
                .await
                .expect("priority class");
        }
        let seen: Seen = Arc::default();
        record(&client, &seen);
        let berth = Berth::start(&dir, "berth-1", cluster.kubeconfig_path(), BERTH_CONFIG);
        let logs = || berth.log_tail();
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let reservations = reservation_api(&client);

        // n0: two `low` pods of 1 CPU and one `lowest` pod of 2 CPUs; n1: two `mid` pods of
        // 2 CPUs. Both nodes full. The preemptor (2 CPUs) could evict one `mid` pod on n1 or,
        // on n0, either both `low` pods or the `lowest` one: upstream's choice, and berth's,
        // is n0 with low-c alone (fewest victims, least important).
        let fillers = [
            ("low-a", "low", "1", "n0"),
            ("low-b", "low", "1", "n0"),
            ("low-c", "lowest", "2", "n0"),
            ("mid-a", "mid", "2", "n1"),
            ("mid-b", "mid", "2", "n1"),
        ];
        for (name, class, cpu, node) in fillers {
            create_pod(&pods, pod(name, class, cpu, Some(node), 30)).await;
        }
        wait_bound(&client, NS, fillers.len(), Duration::from_secs(60), logs).await;
        for (name, _, _, node) in fillers {
            let p = pods.get(name).await.expect("filler");
            assert_eq!(node_of(&p).as_deref(), Some(node), "{name}");
        }

        let high = create_pod(&pods, pod("high", "high", "2", None, 0)).await;
        let high_uid = high.metadata.uid.clone().expect("uid");

        // The victim is evicted: marked, then deleted with its grace period (it stays
        // terminating, no kubelet confirms).
        let low_c = eventually(Duration::from_secs(60), logs, || async {
            let p = pods.get("low-c").await.map_err(|e| e.to_string())?;
            if terminating(&p) && disruption_target(&p).is_some() {
                Ok(p)
            } else {
                Err(format!("low-c: {:?}", p.metadata.deletion_timestamp))
            }
        })
        .await;
        assert_eq!(
            disruption_target(&low_c),
            Some((
                "True".into(),
                "PreemptionByScheduler".into(),
                "berth: preempting to accommodate a higher priority pod".into()
            )),
            "kube-scheduler's DisruptionTarget condition on the victim"
        );
        for (name, ..) in fillers.iter().filter(|f| f.0 != "low-c") {
            let p = pods.get(name).await.expect("filler");
            assert!(!terminating(&p), "{name} evicted too\n{}", logs());
        }

        // The hand-over's middle: the Reservation holds n0 for `high`, waiting for low-c;
        // `high` is nominated to n0 and not bound.
        let hold = eventually(Duration::from_secs(30), logs, || async {
            let r = reservations
                .get_opt(HOLD)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no reservation yet")?;
            let s = &r.data["status"];
            if s["phase"] == "Waiting" && s["nodeName"] == "n0" {
                Ok(r)
            } else {
                Err(format!("reservation status {s}"))
            }
        })
        .await;
        let spec = &hold.data["spec"];
        assert_eq!(spec["allocateOnce"], true);
        assert_eq!(spec["preAllocation"], true);
        assert_eq!(
            spec["owners"],
            json!([{"object": {"apiVersion": "v1", "kind": "Pod", "namespace": NS,
                "name": "high", "uid": high_uid}}]),
            "owned by the preemptor's UID"
        );
        assert_eq!(spec["template"]["spec"]["nodeName"], "n0");
        assert_eq!(
            spec["template"]["spec"]["containers"][0]["resources"]["requests"],
            json!({"cpu": "2", "memory": "1Gi"})
        );
        let ann = hold.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            ann.get("scheduling.berth.dev/preemptor")
                .map(String::as_str),
            Some("preempt/high")
        );
        assert_eq!(
            ann.get("scheduling.berth.dev/victims").map(String::as_str),
            Some("preempt/low-c")
        );
        // No ownerReference: a cluster-scoped Reservation cannot be owned by a namespaced
        // pod (the garbage collector only reports OwnerRefInvalidNamespace); berth deletes
        // the hold itself when its preemptor goes (berth-core's `hold` module).
        assert!(
            hold.metadata
                .owner_references
                .as_ref()
                .is_none_or(|o| o.is_empty()),
            "{:?}",
            hold.metadata
        );
        let p = eventually(Duration::from_secs(30), logs, || async {
            let p = pods.get("high").await.map_err(|e| e.to_string())?;
            let nominated = p
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.clone());
            if nominated.as_deref() == Some("n0") {
                Ok(p)
            } else {
                Err(format!("high nominated to {nominated:?}"))
            }
        })
        .await;
        assert_eq!(node_of(&p), None, "bound while its victim still runs");

        // Intruders, arriving between the eviction and the preemptor's retry: `boss` more
        // important than `high` (a nomination does not keep it out; only the Reservation
        // does) and `peer` as important. Neither preempts (preemptionPolicy Never), so the
        // only room either could take is the one low-c frees.
        for name in ["boss", "peer"] {
            create_pod(&pods, pod(name, name, "2", None, 0)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;

        // The kubelet's part: the victim's containers stopped, its deletion is confirmed.
        cluster
            .delete_pod_now(NS, "low-c")
            .await
            .expect("confirming low-c's deletion");

        let high = eventually(Duration::from_secs(60), logs, || async {
            let p = pods.get("high").await.map_err(|e| e.to_string())?;
            node_of(&p)
                .map(|_| p)
                .ok_or_else(|| "high not bound".into())
        })
        .await;
        assert_eq!(node_of(&high).as_deref(), Some("n0"), "{}", logs());
        assert_eq!(
            annotation(&high, "scheduling.koordinator.sh/reservation-allocated")
                .map(|a| a["name"].clone()),
            Some(json!(HOLD)),
            "bound into its reservation"
        );
        let hold = eventually(Duration::from_secs(30), logs, || async {
            let r = reservations.get(HOLD).await.map_err(|e| e.to_string())?;
            let s = &r.data["status"];
            if s["phase"] == "Succeeded" {
                Ok(r)
            } else {
                Err(format!("reservation status {s}"))
            }
        })
        .await;
        let owners = &hold.data["status"]["currentOwners"];
        assert_eq!(owners.as_array().map(Vec::len), Some(1), "{owners}");
        assert_eq!(owners[0]["name"], "high");
        assert_eq!(owners[0]["namespace"], NS);
        assert_eq!(owners[0]["uid"], json!(high_uid));
        assert_eq!(hold.data["status"]["nodeName"], "n0");

        // The intruders got nothing: n0 is full again, with `high`.
        tokio::time::sleep(Duration::from_secs(2)).await;
        for name in ["boss", "peer"] {
            let p = pods.get(name).await.expect("intruder");
            assert_eq!(node_of(&p), None, "{name} took the room\n{}", logs());
        }
        let all = pods.list(&ListParams::default()).await.expect("pods").items;
        let mut names: Vec<String> = all.iter().filter_map(|p| p.metadata.name.clone()).collect();
        names.sort();
        assert_eq!(
            names,
            ["boss", "high", "low-a", "low-b", "mid-a", "mid-b", "peer"],
            "one victim, and only it, deleted"
        );
        assert_no_overcommit(&client).await;

        // Events: `Preempted` on the victim naming the preemptor, and on the preemptor.
        let events: Api<Event> = Api::namespaced(client.clone(), NS);
        let events = events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items;
        let preempted = |name: &str| -> Vec<String> {
            events
                .iter()
                .filter(|e| e.reason.as_deref() == Some("Preempted"))
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
                .filter_map(|e| e.note.clone())
                .collect()
        };
        let on_victim = preempted("low-c");
        assert_eq!(on_victim.len(), 1, "{on_victim:?}");
        assert!(
            on_victim[0].starts_with(&format!(
                "Preempted by pod preempt/high ({high_uid}) on node n0"
            )),
            "{on_victim:?}"
        );
        assert!(
            preempted("high")
                .iter()
                .any(|n| n.contains("preempt/low-c") && n.contains(HOLD)),
            "{:?}",
            preempted("high")
        );

        // The Reservation existed before anything happened to the victim: no moment when
        // the room was free and not held. (With the hold's creation and the victim's
        // eviction run side by side, the victim was touched first in every run: a pod
        // status patch commits faster than a custom resource's creation.)
        let seen = seen.lock().expect("seen").clone();
        let created = seen
            .iter()
            .find(|(_, w)| *w == format!("created reservation {HOLD}"))
            .map(|(rv, _)| *rv);
        let evicting = seen
            .iter()
            .filter(|(_, w)| w == "evicting pod low-c")
            .map(|(rv, _)| *rv)
            .min();
        assert!(
            matches!((created, evicting), (Some(c), Some(e)) if c < e),
            "reservation created at {created:?}, victim touched at {evicting:?}: {seen:?}"
        );

        // Metrics: one attempt at least (the intruders never preempt), one victim, one
        // reservation-backed preemption completed.
        let metrics = eventually(Duration::from_secs(20), logs, || async {
            let completed =
                berth.metric("berth_preemption_reservations_total{result=\"completed\"}");
            if completed == 1.0 {
                Ok(berth.metrics())
            } else {
                Err(format!("completed {completed}"))
            }
        })
        .await;
        let value = |prefix: &str| {
            metrics
                .lines()
                .filter(|l| l.starts_with(prefix))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>()
        };
        assert!(
            value("scheduler_preemption_attempts_total") >= 1.0,
            "{metrics}"
        );
        assert_eq!(value("berth_preemption_victims_total"), 1.0, "{metrics}");
        // The victim's condition was written once, and not refused.
        assert_eq!(
            value("berth_api_requests_total{operation=\"disruption_target\",code=\"200\"}"),
            1.0,
            "{metrics}"
        );
        assert_eq!(
            value("berth_preemption_reservations_total{result=\"expired\"}"),
            0.0,
            "{metrics}"
        );
    });
}
