//! A `berth run` with nothing to do sleeps. Without leader election nobody keeps the role
//! channel's sender, and a closed channel is ready at once for ever: a loop that kept
//! selecting on it spun a core at 100% and walked every pod on each turn, which cost the
//! throughput benchmark (leader election off, as scheduler_perf runs kube-scheduler) most of
//! berth's CPU. Here the loop must run about one round per second (the gauge refresh) once
//! everything is scheduled, with one pod left unschedulable so a core timer stays armed.

use std::time::Duration;

use berth_kube::{RunOptions, Settings};
use berth_testcluster::TestCluster;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

async fn create<K>(api: &Api<K>, v: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let o: K = serde_json::from_value(v).expect("object");
    api.create(&PostParams::default(), &o)
        .await
        .expect("create");
}

fn pod(name: &str, cpu: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu}}}]}
    })
}

async fn idle_rounds(cluster: &TestCluster, leader_elect: bool) -> u64 {
    let client = cluster.client();
    let mut settings = Settings::builtin();
    // The test's pods name no scheduler: this replica takes kube-scheduler's (there is none).
    settings.profiles[0].scheduler_name = "default-scheduler".into();
    settings.leader_election.leader_elect = leader_elect;
    settings.leader_election.resource_namespace = "kube-system".into();
    settings.leader_election.resource_name = format!("berth-idle-{leader_elect}");
    let mut handle = berth_kube::driver::start(client.clone(), RunOptions::new(settings))
        .await
        .expect("start");
    handle
        .wait_for(Duration::from_secs(60), |s| s.synced && s.leader)
        .await
        .expect("synced and leading");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let fits = format!("fits-{leader_elect}");
    create(&pods, pod(&fits, "100m")).await;
    // Never fits: stays in the queue with its back-off and flush timers.
    create(&pods, pod(&format!("too-big-{leader_elect}"), "64")).await;
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let p = pods.get(&fits).await.expect("get");
            if p.spec.and_then(|s| s.node_name).is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the pod that fits is bound");
    // Let the unschedulable pod's attempt and its event settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = handle.rounds();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rounds = handle.rounds() - before;
    handle.stop().await.expect("stop");
    rounds
}

#[test]
fn an_idle_loop_sleeps_with_and_without_leader_election() {
    let cluster = TestCluster::start().unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let nodes: Api<Node> = Api::all(cluster.client());
        create(
            &nodes,
            json!({
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
                           "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
            }),
        )
        .await;
        for leader_elect in [false, true] {
            let rounds = idle_rounds(&cluster, leader_elect).await;
            // One gauge refresh a second, plus the odd lease renewal, watch bookmark or
            // back-off expiry: a spinning loop runs tens of thousands.
            assert!(
                rounds <= 20,
                "leader election {leader_elect}: {rounds} rounds in 3 idle seconds"
            );
        }
    });
}
