//! Fault injection against a real API server: FaultProxy's errors, time-outs and watch
//! cuts, and the API server restarted on the same etcd.

use std::time::{Duration, Instant};

use berth_testcluster::{FaultProxy, Faults, TestCluster};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use kube::api::{ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use serde_json::json;

/// Runs a watcher on the nodes labelled `test=<label>` through `client` and returns a
/// channel of the names it sees (applied, or listed at a (re)start).
fn watch_node_names(
    client: kube::Client,
    label: &str,
) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let config = watcher::Config::default().labels(&format!("test={label}"));
    let stream = watcher::watcher(Api::<Node>::all(client), config).default_backoff();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let node = match event {
                Ok(Event::Apply(node) | Event::InitApply(node)) => node,
                _ => continue,
            };
            if tx.send(node.metadata.name.unwrap_or_default()).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits (up to `within`) for `name` to come out of `names`.
async fn expect_name(
    names: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    name: &str,
    within: Duration,
) {
    let found = tokio::time::timeout(within, async {
        while let Some(seen) = names.recv().await {
            if seen == name {
                return;
            }
        }
        panic!("the watcher ended");
    })
    .await;
    assert!(
        found.is_ok(),
        "the watcher did not see {name} within {within:?}"
    );
}

#[tokio::test]
async fn injected_errors_and_timeouts_reach_the_client_and_the_rest_passes() {
    let cluster = TestCluster::shared().unwrap();
    let faults = Faults {
        error_rate: 0.5,
        seed: 42,
        ..Faults::default()
    };
    let proxy = FaultProxy::start(cluster, faults).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(proxy.client().unwrap());

    let (mut ok, mut injected) = (0, 0);
    for _ in 0..60 {
        match namespaces.get("default").await {
            Ok(ns) => {
                assert_eq!(ns.metadata.name.as_deref(), Some("default"));
                ok += 1;
            }
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 500, "{status:?}");
                assert_eq!(status.reason, "InternalError");
                assert_eq!(status.message, "injected by FaultProxy");
                injected += 1;
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    let stats = proxy.stats();
    eprintln!("{ok} ok, {injected} injected; {stats:?}");
    assert!(ok >= 15 && injected >= 15, "{ok} ok, {injected} injected");
    assert_eq!(stats.errors_injected, injected);
    assert!(stats.errors_after_forwarding > 0 && stats.errors_after_forwarding < injected);
    assert_eq!(stats.forwarded, ok + stats.errors_after_forwarding);
    assert_eq!(stats.timeouts_injected, 0);

    // Writes: a 500 injected after forwarding hides a write that happened.
    let ns = cluster.unique_namespace("proxy-writes").await.unwrap();
    let through_proxy: Api<ConfigMap> = Api::namespaced(proxy.client().unwrap(), &ns);
    let before = proxy.stats();
    let mut created = 0;
    for i in 0..30 {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("cm-{i}")}, "data": {"i": i.to_string()},
        }))
        .unwrap();
        match through_proxy.create(&PostParams::default(), &cm).await {
            Ok(got) => {
                assert_eq!(got.data.unwrap()["i"], i.to_string());
                created += 1;
            }
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 500, "{status:?}"),
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    let hidden = proxy.stats().errors_after_forwarding - before.errors_after_forwarding;
    let stored = Api::<ConfigMap>::namespaced(cluster.client(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len() as u64;
    eprintln!("{created} created, {hidden} hidden writes, {stored} stored");
    assert!(hidden > 0);
    assert_eq!(stored, created + hidden);

    // Changed at run time: time-outs instead, held briefly then the connection dropped.
    let before = proxy.stats();
    proxy.set_faults(Faults {
        timeout_rate: 0.5,
        timeout: Duration::from_millis(100),
        seed: 42,
        ..Faults::default()
    });
    let (mut ok, mut dropped) = (0, 0);
    for _ in 0..30 {
        let started = Instant::now();
        match namespaces.get("default").await {
            Ok(_) => ok += 1,
            Err(kube::Error::Api(status)) => panic!("an API error, not a time-out: {status:?}"),
            Err(_) => {
                assert!(started.elapsed() >= Duration::from_millis(100));
                dropped += 1;
            }
        }
    }
    let after = proxy.stats();
    eprintln!("{ok} ok, {dropped} dropped; {after:?}");
    assert!(ok >= 5 && dropped >= 5, "{ok} ok, {dropped} dropped");
    assert_eq!(after.timeouts_injected, dropped);
    assert_eq!(after.errors_injected, before.errors_injected);

    // Latency only.
    proxy.set_faults(Faults {
        latency: Duration::from_millis(150),
        ..Faults::default()
    });
    let started = Instant::now();
    namespaces.get("default").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(150));

    // And none: transparent.
    proxy.set_faults(Faults::none());
    for _ in 0..10 {
        namespaces.get("default").await.unwrap();
    }

    // The client's credentials are the ones the API server checks: a ServiceAccount with
    // no RBAC is refused nodes through the proxy too.
    let ns = cluster.unique_namespace("proxy-auth").await.unwrap();
    let token = cluster.service_account_token(&ns, "nobody").await.unwrap();
    let kubeconfig =
        kube::config::Kubeconfig::read_from(proxy.kubeconfig_for_token(&token).unwrap()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let nobody = kube::Client::try_from(config).unwrap();
    match Api::<Node>::all(nobody).list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403, got {other:?}"),
    }

    // kubectl (client-go) takes the proxy's kubeconfig. Off the
    // runtime's only thread, which the proxy needs to answer.
    let mut kubectl = std::process::Command::new(cluster.kubectl());
    kubectl
        .arg("--kubeconfig")
        .arg(proxy.kubeconfig_path())
        .args(["get", "namespace", "default", "-o", "name"]);
    let out = tokio::task::spawn_blocking(move || kubectl.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "namespace/default");
}

#[tokio::test]
async fn a_cut_watch_is_resumed_by_the_watcher() {
    let cluster = TestCluster::shared().unwrap();
    let faults = Faults {
        cut_watches_every: Some(Duration::from_secs(1)),
        seed: 3,
        ..Faults::default()
    };
    let proxy = FaultProxy::start(cluster, faults).await.unwrap();
    let mut names = watch_node_names(proxy.client().unwrap(), "watch-cut");
    cluster
        .create_node("watch-cut-a", "4", "8Gi", 110, &[("test", "watch-cut")])
        .await
        .unwrap();
    expect_name(&mut names, "watch-cut-a", Duration::from_secs(10)).await;

    // Lifetimes are 0.5 to 1.5 s: wait for a cut, then create another node.
    let started = Instant::now();
    while proxy.stats().watches_cut == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no watch was cut"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster
        .create_node("watch-cut-b", "4", "8Gi", 110, &[("test", "watch-cut")])
        .await
        .unwrap();
    expect_name(&mut names, "watch-cut-b", Duration::from_secs(10)).await;
    let stats = proxy.stats();
    eprintln!("{stats:?}");
    assert!(stats.watches >= 2, "{stats:?}");

    // Cut on demand, with periodic cuts off: still resumed.
    proxy.set_faults(Faults::none());
    let cut = proxy.stats().watches_cut;
    proxy.cut_watches_now();
    cluster
        .create_node("watch-cut-c", "4", "8Gi", 110, &[("test", "watch-cut")])
        .await
        .unwrap();
    expect_name(&mut names, "watch-cut-c", Duration::from_secs(10)).await;
    assert!(proxy.stats().watches_cut > cut);
}

// Multi-threaded: the blocking `restart_apiserver` runs in `block_in_place` while the
// watcher and the proxy go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_restarts_on_the_same_etcd_and_old_clients_reconnect() {
    // Its own cluster: restarting the shared one would fail other tests' requests.
    let cluster = TestCluster::start().unwrap();
    let client = cluster.client();
    let proxy = FaultProxy::start(&cluster, Faults::none()).await.unwrap();
    let mut names = watch_node_names(proxy.client().unwrap(), "restart");
    cluster
        .create_node("before", "4", "8Gi", 110, &[("test", "restart")])
        .await
        .unwrap();
    let ns = cluster.unique_namespace("restart").await.unwrap();
    let config_map: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "kept"}, "data": {"a": "1"}})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();
    expect_name(&mut names, "before", Duration::from_secs(10)).await;

    let started = Instant::now();
    tokio::task::block_in_place(|| cluster.restart_apiserver()).unwrap();
    eprintln!("restarted in {:?}", started.elapsed());

    // The client made before lists nodes at once, and what was written survived.
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(nodes
        .items
        .iter()
        .any(|n| n.metadata.name.as_deref() == Some("before")));
    let kept = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("kept")
        .await
        .unwrap();
    assert_eq!(kept.data.unwrap()["a"], "1");

    // The watch through the proxy was cut by the restart and resumes by itself.
    cluster
        .create_node("after", "4", "8Gi", 110, &[("test", "restart")])
        .await
        .unwrap();
    expect_name(&mut names, "after", Duration::from_secs(15)).await;

    // Down for a while: requests fail (refused directly, dropped through the proxy), then
    // work again after the start.
    cluster.stop_apiserver();
    assert!(!cluster.apiserver_running());
    let nodes = Api::<Node>::all(client.clone());
    assert!(nodes.list(&ListParams::default()).await.is_err());
    let through_proxy = Api::<Node>::all(proxy.client().unwrap());
    assert!(through_proxy.list(&ListParams::default()).await.is_err());
    assert!(proxy.stats().upstream_failures > 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.start_apiserver_async().await.unwrap();
    assert!(cluster.apiserver_running());
    assert!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len()
            >= 2
    );
    assert!(
        through_proxy
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len()
            >= 2
    );
}

#[tokio::test]
async fn a_concurrent_burst_through_the_proxy_is_streamed_to_a_watch() {
    let cluster = TestCluster::shared().unwrap();
    let proxy = FaultProxy::start(cluster, Faults::none()).await.unwrap();
    let ns = cluster.unique_namespace("proxy-burst").await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(proxy.client().unwrap(), &ns);
    let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let stream = watcher::watcher(api.clone(), watcher::Config::default());
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Ok(Event::Apply(cm) | Event::InitApply(cm)) = event {
                if tx.send(cm.metadata.name.unwrap_or_default()).is_err() {
                    return;
                }
            }
        }
    });

    let started = Instant::now();
    let creates = (0..200).map(|i| {
        let api = api.clone();
        async move {
            let cm: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": format!("cm-{i}")}})).unwrap();
            api.create(&PostParams::default(), &cm).await
        }
    });
    for result in futures::future::join_all(creates).await {
        result.unwrap();
    }
    let mut names = std::collections::HashSet::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while names.len() < 200 {
            names.insert(seen.recv().await.unwrap());
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the watch saw {} of 200", names.len()));
    eprintln!(
        "200 creates seen in {:?}; {:?}",
        started.elapsed(),
        proxy.stats()
    );
}

/// `hold_paths`: matching requests hang unanswered (never forwarded) while the faults name
/// them, the rest goes through; released, they fail (dropped); bindings are counted.
#[tokio::test]
async fn held_paths_hang_until_released_and_bindings_are_counted() {
    let cluster = TestCluster::shared().unwrap();
    let proxy = FaultProxy::start(
        cluster,
        Faults {
            hold_paths: vec!["/configmaps".into()],
            ..Faults::default()
        },
    )
    .await
    .unwrap();
    let client = proxy.client().unwrap();
    let held: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let namespaces: Api<Namespace> = Api::all(client);
    let pending = tokio::spawn(async move { held.get_opt("anything").await });
    // The rest passes while one request hangs.
    namespaces.get("default").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.stats().held == 0 {
        assert!(Instant::now() < deadline, "{:?}", proxy.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!pending.is_finished(), "a held request was answered");
    let forwarded = proxy.stats().forwarded;
    proxy.set_faults(Faults::none());
    let answer = tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .expect("released")
        .expect("task");
    assert!(
        answer.is_err(),
        "a held request is dropped, not forwarded: {answer:?}"
    );
    assert_eq!(proxy.stats().forwarded, forwarded);
    assert_eq!(proxy.stats().bindings, 0);
}
