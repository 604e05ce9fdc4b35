//! Dynamic Reservation Provisioning end to end against a real kube-apiserver and etcd:
//! `berth run` schedules a pod carrying a reservation template into a virtual reservation
//! and writes its requirement; `berth provisioner`, a separate process, creates the
//! Reservation; `berth run` adopts it on the pod's node and binds the pod into it; the
//! tenant's next pod takes the remainder, and nothing is provisioned twice.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{json, Value};
use support::*;

/// A `berth provisioner` process, killed when dropped.
struct Provisioner(Child, std::path::PathBuf);

impl Provisioner {
    fn start(dir: &std::path::Path, kubeconfig: &std::path::Path) -> Self {
        let log = dir.join("provisioner.log");
        let child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .arg("provisioner")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .env("RUST_LOG", "info,kube=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("starting berth provisioner");
        Self(child, log)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.1).unwrap_or_default()
    }
}

impl Drop for Provisioner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const TEMPLATE: &str = r#"{"owners": [{"labelSelector": {"matchLabels": {"tenant": "t1"}}}],
  "recommendedSize": {"cpu": "3", "memory": "7Gi"}, "roundup": {"cpu": "2", "memory": "2Gi"}}"#;

fn pod(name: &str, cpu: &str, template: bool) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "drp", "labels": {"tenant": "t1"}},
        "spec": {"terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
    });
    if template {
        p["metadata"]["annotations"] =
            json!({"scheduling.koordinator.sh/reservation-template": TEMPLATE});
    }
    p
}

async fn get_pod(api: &Api<Pod>, name: &str) -> Pod {
    api.get(name).await.expect("pod")
}

fn annotation(p: &Pod, key: &str) -> Option<Value> {
    let text = p.metadata.annotations.as_ref()?.get(key)?;
    serde_json::from_str(text).ok()
}

#[test]
fn a_template_pod_gets_its_reservation_from_the_provisioner_process_and_is_bound_into_it() {
    let Env { cluster, dir, rt } = Env::new("drp");
    rt.block_on(async {
        let client = cluster.client();
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "status": {"capacity": {"cpu": "16", "memory": "32Gi", "pods": "110"},
                       "allocatable": {"cpu": "16", "memory": "32Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("node");
        cluster.create_node_with(node).await.expect("node");
        cluster.create_namespace("drp").await.expect("ns");
        let berth = Berth::start(&dir, "berth-1", cluster.kubeconfig_path(), CONFIG);
        let provisioner = Provisioner::start(&dir, cluster.kubeconfig_path());
        let logs = || {
            format!(
                "{}\n--- provisioner:\n{}",
                berth.log_tail(),
                provisioner.log()
            )
        };

        let pods: Api<Pod> = Api::namespaced(client.clone(), "drp");
        let create = |v: Value| {
            let pods = pods.clone();
            async move {
                let p: Pod = serde_json::from_value(v).expect("pod");
                pods.create(&PostParams::default(), &p)
                    .await
                    .expect("create pod");
            }
        };
        create(pod("p1", "1", true)).await;
        wait_bound(&client, "drp", 1, Duration::from_secs(90), logs).await;
        let p1 = get_pod(&pods, "p1").await;
        let req = annotation(&p1, "scheduling.koordinator.sh/new-reservation-requirement")
            .unwrap_or_else(|| panic!("no requirement on p1\n{}", logs()));
        assert_eq!(
            req["resources"],
            json!({"cpu": "4", "memory": "8Gi"}),
            "rounded size"
        );
        let id = req["labels"]["scheduling.koordinator.sh/reservation-id"]
            .as_str()
            .expect("id")
            .to_string();
        let allocated = annotation(&p1, "scheduling.koordinator.sh/reservation-allocated")
            .unwrap_or_else(|| panic!("p1 not bound into a reservation\n{}", logs()));
        assert_eq!(allocated["name"], "drp-p1");
        let node_name = p1.spec.as_ref().and_then(|s| s.node_name.clone());
        assert_eq!(node_name.as_deref(), Some("n1"));

        let reservations: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &berth_kube::kinds::Served::reservation_resource(),
        );
        // The Reservation: the id label, adopted on p1's node with p1 as its owner.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = reservations
                .get("drp-p1")
                .await
                .expect("reservation drp-p1");
            let labels = r.metadata.labels.clone().unwrap_or_default();
            assert_eq!(
                labels.get("scheduling.koordinator.sh/reservation-id"),
                Some(&id)
            );
            let s = &r.data["status"];
            let owners: Vec<String> = s["currentOwners"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|o| o["name"].as_str().map(str::to_string))
                .collect();
            if s["phase"] == "Available" && owners == ["p1"] {
                assert_eq!(s["nodeName"], "n1");
                assert_eq!(s["allocatable"]["cpu"], "4");
                assert_eq!(s["allocatable"]["memory"], "8Gi");
                assert_eq!(r.data["spec"]["allocateOnce"], false);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "reservation status {s}\n{}",
                logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // The tenant's next pod allocates the remainder; nothing new is provisioned.
        create(pod("p2", "2", true)).await;
        wait_bound(&client, "drp", 2, Duration::from_secs(60), logs).await;
        let p2 = get_pod(&pods, "p2").await;
        assert_eq!(
            annotation(&p2, "scheduling.koordinator.sh/reservation-allocated")
                .map(|a| a["name"].clone()),
            Some(json!("drp-p1")),
            "{}",
            logs()
        );
        assert!(annotation(&p2, "scheduling.koordinator.sh/new-reservation-requirement").is_none());
        tokio::time::sleep(Duration::from_secs(2)).await;
        let all = reservations
            .list(&ListParams::default())
            .await
            .expect("list")
            .items;
        assert_eq!(all.len(), 1, "provisioned twice\n{}", logs());
        assert_no_overcommit(&client).await;
        // The scheduler's DRP metrics saw one request and one adoption, nothing waits.
        let metric = |event: &str| {
            berth.metric(&format!(
                "berth_drp_reservations_total{{event=\"{event}\"}}"
            ))
        };
        assert_eq!(metric("requested"), 1.0, "{}", berth.metrics());
        assert_eq!(metric("created"), 1.0);
        assert_eq!(metric("timed_out"), 0.0);
        assert_eq!(berth.metric("berth_drp_waiting_pods"), 0.0);
        assert_eq!(
            berth.metric("berth_drp_creation_latency_seconds_count"),
            1.0
        );
    });
}
