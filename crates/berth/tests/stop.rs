//! A clean stop owes the cluster what its binds changed: SIGTERM in the middle of a burst of
//! reservation owners, and no replica after it. Once the process has exited, every
//! reservation lists as `currentOwners` exactly the pods bound into it (by their
//! `reservation-allocated` annotation): the statuses the binds' confirmations made due were
//! written before the lease was released, not left for the next leader.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{json, Value};
use support::*;

const RESERVATIONS: usize = 14;

fn reservation(name: &str) -> Value {
    json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": name},
        "spec": {
            "allocateOnce": false,
            "template": {"spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}},
            "owners": [{"labelSelector": {"matchLabels": {"app": name}}}]
        }
    })
}

fn owner(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "burst", "labels": {"app": app}},
        "spec": {"terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]}
    })
}

#[test]
fn a_clean_stop_writes_the_reservation_statuses_it_owes() {
    let Env { cluster, dir, rt } = Env::new("stop");
    rt.block_on(async {
        let client = cluster.client();
        perf_nodes(&cluster, "node-", 16).await;
        cluster.create_namespace("burst").await.expect("ns");
        let reservations: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &berth_kube::kinds::Served::reservation_resource(),
        );
        for i in 0..RESERVATIONS {
            let o: DynamicObject =
                serde_json::from_value(reservation(&format!("r{i:02}"))).expect("object");
            reservations
                .create(&PostParams::default(), &o)
                .await
                .expect("create");
        }
        let mut berth = Berth::start(&dir, "berth", cluster.kubeconfig_path(), CONFIG);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let list = reservations
                .list(&ListParams::default())
                .await
                .expect("list")
                .items;
            let available = list
                .iter()
                .filter(|r| r.data["status"]["phase"] == "Available")
                .count();
            if available == RESERVATIONS {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "reservations not Available\n{}",
                berth.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Owners of every reservation among a burst of ordinary pods.
        let mut pods = Vec::new();
        for i in 0..600 {
            pods.push(perf_pod("burst", &format!("p{i:03}"), json!({})));
            if i % 4 == 0 {
                let r = (i / 4) % RESERVATIONS;
                pods.push(owner(&format!("o{i:03}"), &format!("r{r:02}")));
            }
        }
        let creator = tokio::spawn({
            let client = client.clone();
            async move { create_all(&client, pods).await }
        });
        wait_bound(&client, "burst", 100, Duration::from_secs(120), || {
            berth.log_tail()
        })
        .await;
        let status = tokio::task::block_in_place(|| berth.terminate(Duration::from_secs(40)));
        assert!(
            status.is_some_and(|s| s.success()),
            "exit after SIGTERM: {status:?}\n{}",
            berth.log_tail()
        );
        creator.abort();

        let all: Vec<Pod> = Api::<Pod>::namespaced(client.clone(), "burst")
            .list(&ListParams::default())
            .await
            .expect("pods")
            .items;
        let mut owners: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for p in &all {
            let ann = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("scheduling.koordinator.sh/reservation-allocated"));
            let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            if let (Some(a), true) = (ann, bound) {
                let v: Value = serde_json::from_str(a).expect("annotation JSON");
                let name = v["name"].as_str().expect("name").to_string();
                owners.entry(name).or_default().insert(format!(
                    "burst/{}",
                    p.metadata.name.clone().unwrap_or_default()
                ));
            }
        }
        assert!(!owners.is_empty(), "no owner was bound before the stop");
        for r in reservations
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
        {
            let name = r.metadata.name.clone().unwrap_or_default();
            let listed: BTreeSet<String> = r.data["status"]["currentOwners"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| {
                    format!(
                        "{}/{}",
                        o["namespace"].as_str().unwrap_or(""),
                        o["name"].as_str().unwrap_or("")
                    )
                })
                .collect();
            let want = owners.get(&name).cloned().unwrap_or_default();
            assert_eq!(
                listed, want,
                "reservation {name}: currentOwners after the stop"
            );
        }
        eprintln!(
            "owners bound at the stop: {}",
            owners.values().map(BTreeSet::len).sum::<usize>()
        );
    });
}
