//! What a bind may and may not do, against a real API server:
//!
//! - `Scheduled` is recorded once the bind succeeded: a pod whose binding was refused (409,
//!   another binder was first) gets no `Scheduled` event, a pod bound normally does;
//! - a bind waiting for the client's rate limiter when its node is deleted is not sent: the
//!   pod goes back to the queue and lands on a node that exists.

mod support;

use std::time::{Duration, Instant};

use berth_testcluster::{FaultProxy, Faults};
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::*;

async fn node_of(client: &kube::Client, ns: &str, name: &str) -> Option<String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.get(name).await.ok()?.spec?.node_name
}

async fn reasons(client: &kube::Client, ns: &str, pod: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
        .filter_map(|e| e.reason)
        .collect()
}

#[test]
fn no_scheduled_event_for_a_refused_bind() {
    let Env { cluster, dir, rt } = Env::new("binding-409");
    rt.block_on(async {
        let client = cluster.client();
        cluster
            .create_node("n1", "4", "32Gi", 110, &[])
            .await
            .expect("node");
        // berth never picks n2 (tainted); the race's other binder does.
        let taint = json!([{"key": "elsewhere", "effect": "NoSchedule"}]);
        let mut n2: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"},
            "spec": {"taints": taint},
            "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
                       "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
        }))
        .expect("node");
        n2 = cluster.create_node_with(n2).await.expect("node n2");
        let _ = n2;
        cluster.create_namespace("race").await.expect("ns");
        let proxy = FaultProxy::start(&cluster, Faults::none())
            .await
            .expect("proxy");
        let berth = Berth::start(&dir, "berth", proxy.kubeconfig_path(), CONFIG);
        // A control pod: bound by berth, with its Scheduled event.
        create_all(&client, vec![perf_pod("race", "control", json!({}))]).await;
        wait_bound(&client, "race", 1, Duration::from_secs(60), || {
            berth.log_tail()
        })
        .await;

        proxy.set_faults(Faults {
            hold_paths: vec!["/binding".into()],
            ..Faults::default()
        });
        create_all(&client, vec![perf_pod("race", "raced", json!({}))]).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while proxy.stats().held == 0 {
            assert!(
                Instant::now() < deadline,
                "berth sent no binding\n{}",
                berth.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Another binder is first.
        let pods: Api<Pod> = Api::namespaced(client.clone(), "race");
        let binding = Binding {
            metadata: kube::api::ObjectMeta {
                name: Some("raced".into()),
                ..Default::default()
            },
            target: ObjectReference {
                kind: Some("Node".into()),
                name: Some("n2".into()),
                ..Default::default()
            },
        };
        pods.create_subresource::<_, serde_json::Value>(
            "binding",
            "raced",
            &PostParams::default(),
            &binding,
        )
        .await
        .expect("the other binder");
        // berth's binding goes on now and is refused.
        proxy.set_faults(Faults::none());
        let deadline = Instant::now() + Duration::from_secs(30);
        while berth.metric("berth_bind_failures_total{class=\"conflict\"}") < 1.0 {
            assert!(
                Instant::now() < deadline,
                "no refused bind\n{}\n{}",
                berth.metrics(),
                berth.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            node_of(&client, "race", "raced").await.as_deref(),
            Some("n2")
        );
        let control = reasons(&client, "race", "control").await;
        assert!(control.iter().any(|r| r == "Scheduled"), "{control:?}");
        let raced = reasons(&client, "race", "raced").await;
        assert!(
            !raced.iter().any(|r| r == "Scheduled"),
            "Scheduled for a refused bind: {raced:?}"
        );
    });
}

#[test]
fn a_bind_waiting_for_the_rate_limiter_is_not_sent_to_a_deleted_node() {
    let Env { cluster, dir, rt } = Env::new("binding-deleted-node");
    rt.block_on(async {
        let client = cluster.client();
        for name in ["keep-0", "keep-1", "doomed"] {
            cluster.create_node(name, "4", "32Gi", 110, &[]).await.expect("node");
        }
        cluster.create_namespace("burst").await.expect("ns");
        // Five binds a second: the burst's binds wait for their tokens.
        let config = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
            clientConnection: {qps: 5, burst: 5}\nleaderElection: {leaderElect: false}\n\
            profiles: [{schedulerName: default-scheduler}]\n";
        let berth = Berth::start(&dir, "berth", cluster.kubeconfig_path(), config);
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(berth.metrics_port, "/readyz").0 != 200 {
            assert!(Instant::now() < deadline, "never ready\n{}", berth.log_tail());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Every watch takes a token to start, after its LIST: at five a second, the watches
        // of eleven kinds are all open a few seconds after the last LIST.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let pods: Vec<_> = (0..60)
            .map(|i| perf_pod("burst", &format!("p{i:02}"), json!({})))
            .collect();
        create_all(&client, pods).await;
        wait_bound(&client, "burst", 5, Duration::from_secs(60), || berth.log_tail()).await;
        let nodes: Api<Node> = Api::all(client.clone());
        nodes.delete("doomed", &DeleteParams::default()).await.expect("delete");
        let deleted_at = k8s_openapi::jiff::Timestamp::now();
        let on_doomed = |pods: &[Pod]| {
            pods.iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("doomed"))
                .count()
        };
        let api: Api<Pod> = Api::namespaced(client.clone(), "burst");
        let at_deletion = on_doomed(&api.list(&ListParams::default()).await.expect("pods").items);
        wait_bound(&client, "burst", 60, Duration::from_secs(120), || berth.log_tail()).await;
        let end = api.list(&ListParams::default()).await.expect("pods").items;
        let at_end = on_doomed(&end);
        let when: Vec<String> = end
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("doomed"))
            .map(|p| {
                let t = p.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|c| {
                    c.iter().find(|c| c.type_ == "PodScheduled").and_then(|c| c.last_transition_time.clone())
                });
                format!("{} {:?}", p.metadata.name.as_deref().unwrap_or(""), t.map(|t| t.0))
            })
            .collect();
        // One bind may have been on the wire as the node went.
        assert!(
            at_end <= at_deletion + 1,
            "{at_deletion} pods on the node when it was deleted at {deleted_at}, {at_end} at the end: {when:?}\n{}",
            berth.log_tail()
        );
        let dropped = berth.metric("berth_bind_failures_total{class=\"node_deleted\"}")
            + berth.metric("berth_bind_failures_total{class=\"transient\"}");
        eprintln!("on the deleted node: {at_deletion} then {at_end}; binds dropped or refused: {dropped}");
    });
}
