//! `berth reserve` end to end against a real kube-apiserver, etcd and kube-controller-manager
//! (its Deployment and ReplicaSet controllers), with `berth run` scheduling: the command
//! reserves room for a Deployment's replicas before they exist, waits until every
//! Reservation is Available, and the Deployment's pods, once it is scaled up, land in them;
//! a workload that cannot get all of its room gets none of it (its Reservations are one
//! gang, placed all or nothing) and the command fails naming why; bad input exits 2.

mod support;

use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::time::Duration;

use berth_testcluster::{Options, TestCluster};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use support::*;

fn reserve(kubeconfig: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("reserve")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .expect("running berth reserve")
}

fn deployment(name: &str, cpu: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                    "name": "c", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
            }
        }
    }))
    .expect("deployment")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout:\n{}\n--- stderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_deployment_gets_its_room_reserved_and_its_pods_land_in_it() {
    let cluster = TestCluster::start_with(Options::new().controller_manager())
        .unwrap_or_else(|e| panic!("{e}"));
    let env = Env {
        cluster,
        dir: scratch("reserve"),
        rt: tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime"),
    };
    let Env { cluster, dir, rt } = env;
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();

    let bad = reserve(&kubeconfig, &["pod/web"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a workload kind"));

    rt.block_on(async {
        let client = cluster.client();
        for n in ["n1", "n2"] {
            let node = serde_json::from_value(json!({
                "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
                "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                           "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .expect("node");
            cluster.create_node_with(node).await.expect("node");
        }
        cluster.create_namespace("shop").await.expect("ns");
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "shop");
        for (name, cpu) in [("web", "2"), ("big", "1")] {
            deployments
                .create(&PostParams::default(), &deployment(name, cpu))
                .await
                .expect("deployment");
        }
        let berth = Berth::start(&dir, "berth-1", &kubeconfig, CONFIG);

        let out = reserve(
            &kubeconfig,
            &[
                "deployment/web",
                "-n",
                "shop",
                "--replicas",
                "3",
                "--ttl",
                "1h",
                "--timeout",
                "90s",
            ],
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}\n{}",
            text(&out),
            berth.log_tail()
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let placed: Vec<&str> = stdout.lines().collect();
        assert_eq!(placed.len(), 3, "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("3/3 Available"),
            "{}",
            text(&out)
        );

        // 2 CPUs are left, on one node: 2 of the other workload's 3 one-CPU Reservations
        // would fit, but they are one gang, so none is placed and none holds room.
        let full = reserve(
            &kubeconfig,
            &[
                "deploy/big",
                "-n",
                "shop",
                "--replicas",
                "3",
                "--timeout",
                "15s",
            ],
        );
        assert_eq!(full.status.code(), Some(1), "{}", text(&full));
        let err = String::from_utf8_lossy(&full.stderr);
        assert!(err.contains("Insufficient cpu"), "{}", text(&full));
        assert!(err.contains("0/3 Available"), "{}", text(&full));
        let reservations: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &berth_kube::kinds::Served::reservation_resource(),
        );
        for i in 0..3 {
            let r = reservations
                .get(&format!("shop-big-{i}"))
                .await
                .expect("reservation");
            let status = &r.data["status"];
            assert!(
                status["nodeName"].is_null() && status["phase"] != "Available",
                "shop-big-{i} placed alone: {status}\n{}",
                berth.log_tail()
            );
        }

        // Scaling the Deployment up: its pods land in the Reservations, one each.
        deployments
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 3}})),
            )
            .await
            .expect("scale");
        wait_bound(&client, "shop", 3, Duration::from_secs(120), || {
            berth.log_tail()
        })
        .await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
        let mut used = BTreeSet::new();
        for p in pods.list(&ListParams::default()).await.expect("pods").items {
            let allocated: Value = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("scheduling.koordinator.sh/reservation-allocated"))
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or_else(|| {
                    panic!(
                        "{:?} not in a reservation\n{}",
                        p.metadata.name,
                        berth.log_tail()
                    )
                });
            used.insert(allocated["name"].as_str().unwrap_or_default().to_string());
        }
        let expected: BTreeSet<String> = (0..3).map(|i| format!("shop-web-{i}")).collect();
        assert_eq!(used, expected);
        assert_no_overcommit(&client).await;
    });
}
