//! berth run with exactly the rights `deploy/` grants it: a ServiceAccount token (TokenRequest)
//! bound only to deploy/'s roles, against a real kube-apiserver with RBAC. Everything berth does
//! (watch every kind, bind, write conditions and reservation status, record events, delete a
//! preemption victim) must be allowed, and rights it does not need must not be granted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use berth_kube::settings::ClientConnection;
use berth_kube::{RunOptions, Settings};
use berth_testcluster::TestCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

const NS: &str = "berth-system";
const SA: &str = "berth";

/// The KubeSchedulerConfiguration inside deploy/'s ConfigMap.
fn deployed_settings() -> Settings {
    let text = std::fs::read_to_string(deploy_dir().join("30-config.yaml"))
        .expect("deploy/30-config.yaml");
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: serde_yaml_ng::Value = serde::Deserialize::deserialize(doc).expect("yaml");
        let v: Value = serde_json::to_value(v).expect("json");
        if v["kind"] == "ConfigMap" {
            let data = v["data"].as_object().expect("data");
            let (file, config) = data
                .iter()
                .next()
                .expect("a configuration in the ConfigMap");
            return Settings::parse(file, config.as_str().expect("text"))
                .expect("valid configuration");
        }
    }
    panic!("no ConfigMap in deploy/30-config.yaml");
}

/// `kubectl auth can-i VERB RESOURCE` for every namespace, `resource/sub` as a subresource.
fn can_i(cluster: &TestCluster, kubeconfig: &Path, verb: &str, resource: &str) -> (bool, String) {
    let mut args = vec!["auth", "can-i", verb];
    let sub;
    match resource.split_once('/') {
        Some((r, s)) => {
            sub = format!("--subresource={s}");
            args.push(r);
            args.push(&sub);
        }
        None => args.push(resource),
    }
    args.push("--all-namespaces");
    kubectl(cluster, kubeconfig, &args)
}

fn kubectl(cluster: &TestCluster, kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(cluster.kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("running kubectl");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

async fn create(client: &Client, obj: Value) {
    let kind = obj["kind"].as_str().unwrap_or("").to_string();
    let api_version = obj["apiVersion"].as_str().unwrap_or("v1").to_string();
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let ar =
        kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(group, version, &kind));
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let o: DynamicObject = serde_json::from_value(obj).expect("object");
    api.create(&PostParams::default(), &o)
        .await
        .unwrap_or_else(|e| panic!("creating {kind}: {e}"));
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.expect("read");
    let code = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

fn pod(name: &str, cpu: &str, extra: Value) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "apps"},
        "spec": {"schedulerName": "berth", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]}
    });
    if let (Some(p), Some(extra)) = (p.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            if k == "spec" {
                for (sk, sv) in v.as_object().into_iter().flatten() {
                    p["spec"][sk] = sv.clone();
                }
            } else if k == "labels" {
                p["metadata"]["labels"] = v.clone();
            }
        }
    }
    p
}

#[test]
fn berth_runs_with_only_the_rights_deploy_grants() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_test_writer()
        .try_init();
    // The gang kinds served, so that berth watches them with these rights too.
    let cluster = TestCluster::start_with(berth_testcluster::Options::new().gangs())
        .unwrap_or_else(|e| panic!("{e}"));
    let admin = cluster.kubeconfig_path().to_path_buf();
    let (ok, out) = kubectl(
        &cluster,
        &admin,
        &["apply", "-f", &deploy_dir().display().to_string()],
    );
    assert!(ok, "kubectl apply -f deploy/: {out}");
    // The CRDs deploy/ created or changed serve before berth starts watching them (a watch
    // opened while the API server still swaps a CRD's storage fails once, and this test
    // holds berth to no watch error at all).
    let (ok, out) = kubectl(
        &cluster,
        &admin,
        &[
            "wait",
            "--for=condition=established",
            "crd",
            "--all",
            "--timeout=60s",
        ],
    );
    assert!(ok, "kubectl wait for the CRDs: {out}");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let admin_client = cluster.client();
        let token = cluster.service_account_token(NS, SA).await.expect("token");
        let sa_kubeconfig = cluster.kubeconfig_for_token(&token).expect("kubeconfig");

        // Rights berth must not have.
        for (verb, resource) in [
            ("create", "pods"), ("update", "nodes"), ("patch", "nodes"), ("delete", "nodes"),
            ("get", "secrets"), ("list", "secrets"), ("create", "deployments.apps"),
            ("update", "pods"), ("delete", "namespaces"), ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
            ("delete", "noderesourcetopologies.topology.node.k8s.io"), ("update", "reservations.scheduling.koordinator.sh"),
            ("create", "persistentvolumes"), ("patch", "persistentvolumes"), ("delete", "persistentvolumeclaims"),
            ("create", "resourceclaims.resource.k8s.io"), ("delete", "resourceclaims.resource.k8s.io"),
            ("update", "resourceslices.resource.k8s.io"), ("create", "resourceclaimtemplates.resource.k8s.io"),
            ("update", "resourceclaimtemplates.resource.k8s.io"), ("delete", "resourceclaimtemplates.resource.k8s.io"),
            ("patch", "resourceclaimtemplates.resource.k8s.io"),
            ("update", "podgroups.scheduling.sigs.k8s.io"), ("update", "podgroups.scheduling.x-k8s.io/status"),
            ("create", "workloads.scheduling.k8s.io"),
        ] {
            let (allowed, out) = can_i(&cluster, &sa_kubeconfig, verb, resource);
            assert!(!allowed, "berth's ServiceAccount may {verb} {resource}, which it never needs: {out}");
        }
        // Rights berth must have.
        for (verb, resource) in [
            ("watch", "pods"), ("patch", "pods"), ("delete", "pods"), ("create", "pods/binding"), ("patch", "pods/status"),
            ("watch", "nodes"), ("watch", "namespaces"), ("watch", "persistentvolumeclaims"), ("watch", "persistentvolumes"),
            ("watch", "storageclasses.storage.k8s.io"), ("watch", "csinodes.storage.k8s.io"),
            ("update", "persistentvolumes"), ("update", "persistentvolumeclaims"),
            ("watch", "csidrivers.storage.k8s.io"), ("watch", "csistoragecapacities.storage.k8s.io"),
            ("watch", "priorityclasses.scheduling.k8s.io"), ("watch", "poddisruptionbudgets.policy"),
            ("watch", "reservations.scheduling.koordinator.sh"), ("create", "reservations.scheduling.koordinator.sh"),
            ("delete", "reservations.scheduling.koordinator.sh"), ("update", "reservations.scheduling.koordinator.sh/status"),
            ("watch", "resourceslices.resource.k8s.io"), ("watch", "deviceclasses.resource.k8s.io"),
            ("watch", "resourceclaims.resource.k8s.io"), ("update", "resourceclaims.resource.k8s.io"),
            ("update", "resourceclaims.resource.k8s.io/status"),
            ("get", "resourceclaimtemplates.resource.k8s.io"), ("list", "resourceclaimtemplates.resource.k8s.io"),
            ("watch", "resourceclaimtemplates.resource.k8s.io"),
            ("watch", "noderesourcetopologies.topology.node.k8s.io"), ("create", "events.events.k8s.io"),
            ("patch", "events.events.k8s.io"),
            ("watch", "podgroups.scheduling.sigs.k8s.io"), ("watch", "podgroups.scheduling.x-k8s.io"),
            ("watch", "workloads.scheduling.k8s.io"),
        ] {
            let (allowed, out) = can_i(&cluster, &sa_kubeconfig, verb, resource);
            assert!(allowed, "berth's ServiceAccount may not {verb} {resource}: {out}");
        }

        // A small cluster: two nodes, a reservation for `web`, a low-priority pod filling n2.
        cluster.create_node("n1", "4", "8Gi", 110, &[]).await.expect("node");
        cluster.create_node("n2", "2", "8Gi", 110, &[]).await.expect("node");
        cluster.create_namespace("apps").await.expect("namespace");
        create(&admin_client, json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "high"}, "value": 1000})).await;
        create(&admin_client, json!({"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": "web-r"},
            "spec": {"template": {"spec": {"schedulerName": "berth", "nodeName": "n1",
                        "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}},
                     "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}]}})).await;
        create(&admin_client, pod("low", "2", json!({"spec": {"nodeName": "n2"}}))).await;

        let client = berth_kube::client::connect(
            Some(&sa_kubeconfig.display().to_string()),
            &ClientConnection::default(),
        )
        .await
        .expect("client with the ServiceAccount's token");
        let mut options = RunOptions::new(deployed_settings());
        options.metrics_addr = Some("127.0.0.1:0".parse().expect("addr"));
        let mut handle = berth_kube::driver::start(client, options).await.expect("start");
        let synced = handle.wait_for(Duration::from_secs(60), |s| s.synced).await.expect("synced");
        let addr = synced.metrics_addr.expect("metrics served");
        assert_eq!(http_get(addr, "/readyz").await.0, 200);

        create(&admin_client, pod("web", "2", json!({"labels": {"app": "web"}}))).await;
        create(&admin_client, pod("huge", "64", json!({}))).await;
        create(&admin_client, pod("urgent", "2", json!({"spec": {"priorityClassName": "high", "nodeSelector": {"kubernetes.io/hostname": "n2"}}}))).await;
        create(&admin_client, pod("foreign", "1", json!({"spec": {"schedulerName": "someone-else"}}))).await;

        let pods: Api<Pod> = Api::namespaced(admin_client.clone(), "apps");
        let mut last;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let web = pods.get("web").await.expect("web");
            let huge = pods.get("huge").await.expect("huge");
            let low_gone = pods.get_opt("low").await.expect("low").is_none();
            let urgent = pods.get("urgent").await.expect("urgent");
            let reservation: DynamicObject = Api::all_with(admin_client.clone(), &berth_kube::kinds::Served::reservation_resource())
                .get("web-r").await.expect("reservation");
            let web_node = web.spec.as_ref().and_then(|s| s.node_name.clone());
            let huge_message = huge.status.as_ref().and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
                .and_then(|c| c.message.clone());
            let urgent_state = (urgent.spec.as_ref().and_then(|s| s.node_name.clone()),
                urgent.status.as_ref().and_then(|s| s.nominated_node_name.clone()));
            let phase = reservation.data["status"]["phase"].clone();
            let done = web_node.as_deref() == Some("n1")
                && huge_message.as_deref().is_some_and(|m| m.contains("Insufficient cpu"))
                && low_gone
                && phase == "Succeeded";
            last = format!("web on {web_node:?}, huge says {huge_message:?}, low gone {low_gone}, urgent {urgent_state:?}, reservation {phase}");
            if done {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "berth did not get there: {last}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let foreign = pods.get("foreign").await.expect("foreign");
        assert!(foreign.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none(), "another scheduler's pod was bound");
        assert!(foreign.status.as_ref().and_then(|s| s.conditions.as_ref()).is_none_or(|c| c.is_empty()), "berth wrote a condition on another scheduler's pod");

        // Events went through.
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin_client.clone(), "apps");
        let reasons: Vec<String> = events.list(&ListParams::default()).await.expect("events").items
            .into_iter().filter_map(|e| e.reason).collect();
        for want in ["Scheduled", "FailedScheduling", "Preempted"] {
            assert!(reasons.iter().any(|r| r == want), "no {want} event in {reasons:?} ({last})");
        }

        // Nothing was refused.
        let (code, metrics) = http_get(addr, "/metrics").await;
        assert_eq!(code, 200);
        assert!(!metrics.contains("code=\"403\""), "berth was refused something:\n{metrics}");
        // The victim's DisruptionTarget condition (pods/status) was written.
        assert!(metrics.contains("operation=\"disruption_target\",code=\"200\""), "{metrics}");
        // No list or watch was refused. A watch that failed for another reason (a CRD's
        // storage swapped under it, a watch cache behind under load) re-lists: that is not
        // a right deploy/ lacks, and berth's synced state above shows it recovered.
        let watch_errors: Vec<&str> = metrics.lines().filter(|l| l.starts_with("berth_watch_errors_total{")).collect();
        assert!(
            !watch_errors.iter().any(|l| l.contains("code=\"403\"") || l.contains("code=\"401\"")),
            "a list or watch was refused: {watch_errors:?}\n{metrics}"
        );
        assert!(metrics.contains("scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"berth\"}"), "{metrics}");
        handle.stop().await.expect("stop");

        // A lease where deploy/'s Role grants nothing (kube-system, as a configuration
        // without `leaderElection` used to get outside a pod): refused, `/readyz` fails
        // with the reason, and the process ends after a bounded number of tries instead of
        // standing by for ever.
        let mut settings = deployed_settings();
        settings.leader_election.resource_namespace = "kube-system".into();
        settings.leader_election.lease_duration = Duration::from_secs(4);
        settings.leader_election.renew_deadline = Duration::from_secs(3);
        settings.leader_election.retry_period = Duration::from_millis(500);
        let client = berth_kube::client::connect(
            Some(&sa_kubeconfig.display().to_string()),
            &ClientConnection::default(),
        )
        .await
        .expect("client");
        let mut options = RunOptions::new(settings);
        options.metrics_addr = Some("127.0.0.1:0".parse().expect("addr"));
        let mut handle = berth_kube::driver::start(client, options).await.expect("start");
        let addr = handle
            .wait_for(Duration::from_secs(60), |s| s.metrics_addr.is_some())
            .await
            .expect("serving")
            .metrics_addr
            .expect("addr");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (code, body) = http_get(addr, "/readyz").await;
            if code == 503 && body.contains("refuses the lease") {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "/readyz: {code} {body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let started = tokio::time::Instant::now();
        let ended = tokio::time::timeout(
            Duration::from_secs(30),
            handle.run_until(std::future::pending::<()>()),
        )
        .await
        .expect("a refused lease ends berth run");
        match ended {
            Err(e @ berth_kube::Error::LeaseForbidden { .. }) => {
                assert!(e.to_string().contains("kube-system/berth"), "{e}");
            }
            other => panic!("expected LeaseForbidden, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    });
}
