//! One leader at a time, whatever the network does to the leader: two `berth run`
//! replicas on one host (no `POD_NAME` or `HOSTNAME` in their environment) on deploy/'s
//! defaults (qps 50 / burst 100, leader election on), each through a fault proxy of its own,
//! on a tight cluster (room for exactly `CAPACITY` pods, more pods than that). While it
//! leads, the leader's Lease is never older than renewDeadline. Then:
//!
//! 1. the leader's Lease requests are held unanswered while its other requests go through:
//!    it stops binding and exits 1 within renewDeadline, the standby takes over after
//!    leaseDuration, and the old leader's proxy counts no binding after its exit;
//! 2. the new leader finds the API server unreachable for 20 s (every request held, every
//!    watch cut): the same, with a third replica taking over.
//!
//! At the end every node's requests fit its allocatable, exactly `CAPACITY` pods are bound,
//! and the proxies together counted exactly one accepted binding per bound pod.

mod support;

use std::time::{Duration, Instant};

use berth_testcluster::{FaultProxy, Faults};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use support::*;

const RENEW_DEADLINE: Duration = Duration::from_secs(3);
const LEASE_DURATION: Duration = Duration::from_secs(4);
/// Nodes of 1 CPU, pods of 100m: room for 300, filled only near the end of the pod stream
/// (one pod every 100 ms), so that every replica binds while it leads.
const NODES: usize = 30;
const CAPACITY: usize = NODES * 10;

fn config() -> String {
    // No clientConnection: kube-scheduler's qps 50 / burst 100.
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
     leaderElection: {leaderElect: true, leaseDuration: 4s, renewDeadline: 3s, retryPeriod: 1s, resourceNamespace: kube-system, resourceName: berth}\n\
     profiles: [{schedulerName: default-scheduler}]\n"
        .to_string()
}

async fn lease(client: &kube::Client) -> Option<Lease> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    api.get_opt("berth").await.ok().flatten()
}

async fn holder(client: &kube::Client) -> Option<String> {
    lease(client)
        .await
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

async fn wait_holder(client: &kube::Client, id: &str, within: Duration, why: &dyn Fn() -> String) {
    let deadline = Instant::now() + within;
    while holder(client).await.as_deref() != Some(id) {
        assert!(
            Instant::now() < deadline,
            "{id} never held the lease\n{}",
            why()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates pods `from..to` in `ns`, one every 100 ms, as a stream the leader keeps binding.
fn trickle(
    client: &kube::Client,
    ns: &'static str,
    from: usize,
    to: usize,
) -> tokio::task::JoinHandle<()> {
    let client = client.clone();
    tokio::spawn(async move {
        for i in from..to {
            create_all(
                &client,
                vec![perf_pod(ns, &format!("p{i:04}"), serde_json::json!({}))],
            )
            .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Starves `leader` (through `proxy`) as `hold` says; checks it stops binding and exits 1
/// within the renew deadline, and that `standby` takes over within the lease duration.
async fn starve(
    client: &kube::Client,
    leader: &mut Berth,
    proxy: &FaultProxy,
    standby: &Berth,
    standby_id: &str,
    hold: &str,
) {
    let starved = Instant::now();
    proxy.set_faults(Faults {
        hold_paths: vec![hold.to_string()],
        ..Faults::default()
    });
    if hold == "/" {
        proxy.cut_watches_now();
    }
    let status = leader.wait_exit(RENEW_DEADLINE + Duration::from_secs(3));
    let exited = starved.elapsed();
    // A binding it sent before it exited may still be on its way: it counts as the old
    // leader's, once answered.
    let settle = Instant::now() + Duration::from_secs(5);
    while proxy.stats().in_flight > 0 && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bindings_at_exit = proxy.stats().bindings;
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "{hold}: the starved leader did not exit 1 ({status:?} after {exited:?})\n{}",
        leader.log_tail()
    );
    // Its last renewal began before the starving: its deadline is at most renewDeadline
    // after it (and the exit follows at once).
    assert!(
        exited <= RENEW_DEADLINE + Duration::from_millis(500),
        "{hold}: exited {exited:?} after the starving"
    );
    assert!(
        leader.log_tail().contains("leaderelection lost"),
        "{}",
        leader.log_tail()
    );
    wait_holder(client, standby_id, LEASE_DURATION * 3, &|| {
        standby.log_tail()
    })
    .await;
    let took = starved.elapsed();
    eprintln!("{hold}: leader exited after {exited:?}, standby took over after {took:?}");
    // Expiry is judged from the standby's last sight of a renewal (at most a retry period,
    // with jitter, before the starving); the takeover follows within a retry period.
    assert!(
        took >= LEASE_DURATION - Duration::from_millis(1300),
        "takeover after {took:?}"
    );
    assert!(
        took <= LEASE_DURATION + Duration::from_secs(3),
        "takeover after {took:?}"
    );
    // Let the new leader bind for a while: the old one's proxy must count nothing more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        proxy.stats().bindings,
        bindings_at_exit,
        "{hold}: the old leader bound pods after it exited"
    );
}

#[test]
fn a_starved_leader_stops_before_its_successor_starts_and_nothing_is_bound_twice() {
    let Env { cluster, dir, rt } = Env::new("fencing");
    rt.block_on(async {
        let client = cluster.client();
        for i in 0..NODES {
            cluster
                .create_node(&format!("node-{i}"), "1", "32Gi", 110, &[])
                .await
                .expect("node");
        }
        cluster.create_namespace("burst").await.expect("ns");
        let proxies = [
            FaultProxy::start(&cluster, Faults::none())
                .await
                .expect("proxy"),
            FaultProxy::start(&cluster, Faults::none())
                .await
                .expect("proxy"),
            FaultProxy::start(&cluster, Faults::none())
                .await
                .expect("proxy"),
        ];
        let mut a = Berth::start(&dir, "berth-a", proxies[0].kubeconfig_path(), &config());
        let a_id = a.identity();
        wait_holder(&client, &a_id, Duration::from_secs(60), &|| a.log_tail()).await;
        let mut b = Berth::start(&dir, "berth-b", proxies[1].kubeconfig_path(), &config());
        let b_id = b.identity();
        assert_ne!(a_id, b_id, "two processes on one host share an identity");
        let host = a_id.rsplit_once('_').map(|(h, _)| h.to_string());
        assert_eq!(host, b_id.rsplit_once('_').map(|(h, _)| h.to_string()));
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(b.metrics_port, "/readyz").0 != 200 {
            assert!(
                Instant::now() < deadline,
                "standby never ready\n{}",
                b.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // Phase 1: the leader binds a stream of pods; its lease stays fresh meanwhile.
        let creator = trickle(&client, "burst", 0, CAPACITY + 60);
        wait_bound(&client, "burst", 15, Duration::from_secs(60), || {
            a.log_tail()
        })
        .await;
        let sampling = Instant::now();
        while sampling.elapsed() < Duration::from_secs(4) {
            let renewed = lease(&client)
                .await
                .and_then(|l| l.spec?.renew_time)
                .expect("renewTime");
            let age = k8s_openapi::jiff::Timestamp::now().duration_since(renewed.0);
            assert!(
                age.as_secs_f64() < RENEW_DEADLINE.as_secs_f64(),
                "the leader's lease is {age:?} old"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert_eq!(
            b.metric("berth_api_requests_total{operation=\"bind\""),
            0.0,
            "the standby bound pods"
        );
        starve(&client, &mut a, &proxies[0], &b, &b_id, "/leases/").await;

        // Phase 2: a third replica stands by; the new leader loses the API server.
        let c = Berth::start(&dir, "berth-c", proxies[2].kubeconfig_path(), &config());
        let c_id = c.identity();
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(c.metrics_port, "/readyz").0 != 200 {
            assert!(Instant::now() < deadline, "c never ready\n{}", c.log_tail());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let unreachable = Instant::now();
        starve(&client, &mut b, &proxies[1], &c, &c_id, "/").await;
        tokio::time::sleep(Duration::from_secs(20).saturating_sub(unreachable.elapsed())).await;
        let before = proxies[1].stats().bindings;
        proxies[1].set_faults(Faults::none());
        creator.await.expect("creator");
        wait_bound(&client, "burst", CAPACITY, Duration::from_secs(120), || {
            c.log_tail()
        })
        .await;
        // The cluster is full: nothing more can be bound, and nothing was bound twice.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_no_overcommit(&client).await;
        assert_eq!(bound(&client, "burst").await, CAPACITY);
        assert_eq!(proxies[1].stats().bindings, before);
        for (p, name) in proxies.iter().zip(["a", "b", "c"]) {
            eprintln!("{name}: {:?}", p.stats());
            assert!(p.stats().bindings > 0, "{name} never bound while it led");
        }
        let bindings: u64 = proxies.iter().map(|p| p.stats().bindings).sum();
        assert_eq!(bindings, CAPACITY as u64, "accepted bindings vs bound pods");
        let conflicts = c.metric("berth_api_requests_total{operation=\"bind\",code=\"409\"}");
        assert_eq!(conflicts, 0.0, "409s on binding:\n{}", c.metrics());
        drop(c);
    });
}
