//! A single `berth run` replica killed with SIGKILL in the middle of a burst with reservations
//! (allocate-once and reusable) and NUMA nodes, then started again: the new process rebuilds
//! from LISTs (bound pods, `reservation-allocated` annotations, reservation status) and
//! finishes the burst. No node is overcommitted, every reservation keeps its owners and its
//! `allocated`, and none is failed or expired.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{json, Value};
use support::*;

fn reservation_api(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &berth_kube::kinds::Served::reservation_resource(),
    )
}

async fn create_dynamic(api: &Api<DynamicObject>, v: Value) {
    let o: DynamicObject = serde_json::from_value(v).expect("object");
    api.create(&PostParams::default(), &o)
        .await
        .expect("create");
}

fn reservation(name: &str, cpu: &str, owner_app: &str, allocate_once: bool) -> Value {
    json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": name},
        "spec": {
            "allocateOnce": allocate_once,
            "template": {"spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}},
            "owners": [{"labelSelector": {"matchLabels": {"app": owner_app}}}]
        }
    })
}

fn owner(name: &str, app: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "burst", "labels": {"app": app}},
        "spec": {"terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
    })
}

fn numa_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "burst"},
        "spec": {"terminationGracePeriodSeconds": 0,
            "nodeSelector": {"numa": "true"},
            "tolerations": [{"key": "numa", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]}
    })
}

fn nrt(node: &str) -> Value {
    let zone = |n: u32| {
        json!({"name": format!("node-{n}"), "type": "Node", "resources": [
        {"name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"},
        {"name": "memory", "capacity": "16Gi", "allocatable": "16Gi", "available": "16Gi"}]})
    };
    json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"},
                       {"name": "topologyManagerScope", "value": "container"}],
        "zones": [zone(0), zone(1)]
    })
}

fn cpu_millis(p: &Pod) -> i64 {
    p.spec.as_ref().map_or(0, |s| {
        s.containers
            .iter()
            .filter_map(|c| {
                c.resources
                    .as_ref()?
                    .requests
                    .as_ref()?
                    .get("cpu")
                    .map(|q| q.0.clone())
            })
            .map(|q| {
                q.strip_suffix('m').map_or_else(
                    || q.parse::<i64>().unwrap_or(0) * 1000,
                    |m| m.parse().unwrap_or(0),
                )
            })
            .sum()
    })
}

#[test]
fn a_restart_mid_burst_keeps_every_reservation_and_overcommits_nothing() {
    let Env { cluster, dir, rt } = Env::new("restart");
    rt.block_on(async {
        let client = cluster.client();
        perf_nodes(&cluster, "node-", 16).await;
        let nrts: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("topology.node.k8s.io", "v1alpha2", "NodeResourceTopology")),
        );
        for i in 0..4 {
            let name = format!("numa-{i}");
            let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "numa": "true"}},
                "spec": {"taints": [{"key": "numa", "value": "true", "effect": "NoSchedule"}]},
                "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                           "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True"}]}
            })).expect("node");
            cluster.create_node_with(node).await.expect("numa node");
            create_dynamic(&nrts, nrt(&name)).await;
        }
        cluster.create_namespace("burst").await.expect("ns");
        let reservations = reservation_api(&client);
        for i in 0..20 {
            create_dynamic(&reservations, reservation(&format!("once-{i:02}"), "500m", &format!("once-{i:02}"), true)).await;
        }
        for i in 0..10 {
            create_dynamic(&reservations, reservation(&format!("reuse-{i:02}"), "1", &format!("reuse-{i:02}"), false)).await;
        }

        let first = Berth::start(&dir, "berth-1", cluster.kubeconfig_path(), CONFIG);
        // Every reservation placed before the burst.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let list = reservations.list(&ListParams::default()).await.expect("list").items;
            if list.iter().filter(|r| r.data["status"]["phase"] == "Available").count() == 30 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "reservations not Available\n{}", first.log_tail());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        let mut pods = Vec::new();
        for i in 0..400 {
            pods.push(perf_pod("burst", &format!("p{i:03}"), json!({})));
            if i % 20 == 0 {
                let k = i / 20;
                pods.push(owner(&format!("once-owner-{k:02}"), &format!("once-{k:02}"), "500m"));
                pods.push(owner(&format!("reuse-owner-{k:02}"), &format!("reuse-{:02}", k % 10), "400m"));
                pods.push(numa_pod(&format!("numa-{k:02}-a")));
            }
            if i % 100 == 0 {
                for j in 0..1 {
                    pods.push(numa_pod(&format!("numa-x{i:03}-{j}")));
                }
            }
        }
        let total = pods.len();
        let creator = tokio::spawn({
            let client = client.clone();
            async move { create_all(&client, pods).await }
        });
        let mut first = first;
        wait_bound(&client, "burst", 150, Duration::from_secs(120), || first.log_tail()).await;
        first.kill9();
        let second = Berth::start(&dir, "berth-2", cluster.kubeconfig_path(), CONFIG);
        creator.await.expect("creator");
        wait_bound(&client, "burst", total, Duration::from_secs(180), || second.log_tail()).await;
        assert_no_overcommit(&client).await;
        // Let the last status writes land.
        tokio::time::sleep(Duration::from_secs(2)).await;

        // Owners per reservation, from the pods' annotations.
        let all: Vec<Pod> = Api::<Pod>::namespaced(client.clone(), "burst").list(&ListParams::default()).await.expect("pods").items;
        let mut owners: BTreeMap<String, (BTreeSet<String>, i64)> = BTreeMap::new();
        for p in &all {
            let ann = p.metadata.annotations.as_ref().and_then(|a| a.get("scheduling.koordinator.sh/reservation-allocated"));
            if let Some(a) = ann {
                let v: Value = serde_json::from_str(a).expect("annotation JSON");
                let name = v["name"].as_str().expect("name").to_string();
                let app = p.metadata.labels.as_ref().and_then(|l| l.get("app")).cloned().unwrap_or_default();
                assert_eq!(app, name, "{} allocated from {name}, which it does not own", p.metadata.name.clone().unwrap_or_default());
                let e = owners.entry(name).or_default();
                e.0.insert(format!("burst/{}", p.metadata.name.clone().unwrap_or_default()));
                e.1 += cpu_millis(p);
            }
        }
        for r in reservations.list(&ListParams::default()).await.expect("list").items {
            let name = r.metadata.name.clone().unwrap_or_default();
            let s = &r.data["status"];
            let phase = s["phase"].as_str().unwrap_or("");
            let listed: BTreeSet<String> = s["currentOwners"].as_array().into_iter().flatten()
                .map(|o| format!("{}/{}", o["namespace"].as_str().unwrap_or(""), o["name"].as_str().unwrap_or("")))
                .collect();
            let (want, cpu) = owners.get(&name).cloned().unwrap_or_default();
            assert!(!want.is_empty(), "reservation {name} has no owner bound to it");
            assert_eq!(listed, want, "reservation {name}: currentOwners");
            let allocated = s["allocated"]["cpu"].as_str().unwrap_or("0");
            let allocated = allocated.strip_suffix('m').map_or_else(|| allocated.parse::<i64>().unwrap_or(0) * 1000, |m| m.parse().unwrap_or(0));
            assert_eq!(allocated, cpu, "reservation {name}: allocated cpu ({s})");
            let want_phase = if name.starts_with("once-") { "Succeeded" } else { "Available" };
            assert_eq!(phase, want_phase, "reservation {name}: {s}");
        }
        // SIGTERM: no new cycles, binds in flight finished, a clean exit.
        let mut second = second;
        let status = tokio::task::block_in_place(|| second.terminate(Duration::from_secs(40)));
        assert!(status.is_some_and(|s| s.success()), "exit after SIGTERM: {status:?}\n{}", second.log_tail());
        assert!(second.log_tail().contains("stopping: no new cycles"), "{}", second.log_tail());
    });
}
