//! Two `berth run` replicas with leader election against a real API server: exactly one binds;
//! the leader is killed with SIGKILL in the middle of a 2,000-pod burst; the standby takes
//! over within the lease duration and every pod ends up bound once, with no node overcommitted
//! and no 409 on binding from the new leader.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use support::*;

const PODS: usize = 2000;
const LEASE: Duration = Duration::from_secs(4);

fn config() -> String {
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
     clientConnection: {qps: 1000, burst: 1000}\n\
     leaderElection: {leaderElect: true, leaseDuration: 4s, renewDeadline: 3s, retryPeriod: 500ms, resourceNamespace: kube-system, resourceName: berth}\n\
     profiles: [{schedulerName: default-scheduler}]\n"
        .to_string()
}

async fn holder(client: &kube::Client) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    api.get_opt("berth")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
}

#[test]
fn the_standby_takes_over_a_killed_leader_and_every_pod_is_bound_once() {
    let Env { cluster, dir, rt } = Env::new("ha");
    rt.block_on(async {
        let client = cluster.client();
        perf_nodes(&cluster, "node-", 60).await;
        cluster.create_namespace("burst").await.expect("ns");
        let a = Berth::start(&dir, "berth-a", cluster.kubeconfig_path(), &config());
        let b = Berth::start(&dir, "berth-b", cluster.kubeconfig_path(), &config());
        let deadline = Instant::now() + Duration::from_secs(60);
        let leader = loop {
            if let Some(h) = holder(&client).await.filter(|h| !h.is_empty()) {
                break h;
            }
            assert!(
                Instant::now() < deadline,
                "no leader\n{}\n{}",
                a.log_tail(),
                b.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let (a_id, b_id) = (a.identity(), b.identity());
        assert_ne!(a_id, b_id, "two processes on one host share an identity");
        let (mut lead, standby, standby_id) = if leader == a_id {
            (a, b, b_id)
        } else {
            assert_eq!(leader, b_id, "the lease is held by neither");
            (b, a, a_id)
        };
        // Both ready: the standby's caches are warm too.
        for r in [&lead, &standby] {
            let deadline = Instant::now() + Duration::from_secs(60);
            while http_get(r.metrics_port, "/readyz").0 != 200 {
                assert!(
                    Instant::now() < deadline,
                    "{} never ready\n{}",
                    r.name,
                    r.log_tail()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }

        let pods: Vec<_> = (0..PODS)
            .map(|i| perf_pod("burst", &format!("p{i:04}"), serde_json::json!({})))
            .collect();
        let creator = tokio::spawn({
            let client = client.clone();
            async move { create_all(&client, pods).await }
        });
        wait_bound(&client, "burst", 500, Duration::from_secs(120), || {
            lead.log_tail()
        })
        .await;
        // Until now the standby bound nothing.
        assert_eq!(
            standby.metric("berth_api_requests_total{operation=\"bind\""),
            0.0,
            "the standby bound pods:\n{}",
            standby.metrics()
        );
        let killed_at = Instant::now();
        lead.kill9();
        let deadline = Instant::now() + LEASE * 3;
        loop {
            if holder(&client).await.as_deref() == Some(standby_id.as_str()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no takeover\n{}",
                standby.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let took = killed_at.elapsed();
        eprintln!("takeover after {took:?} (lease {LEASE:?})");
        // Expiry is judged from the last observed renewal, up to one retry period before the
        // kill; the takeover follows within a retry period of expiry.
        assert!(
            took <= LEASE + Duration::from_secs(2),
            "takeover took {took:?}"
        );
        creator.await.expect("creator");
        wait_bound(&client, "burst", PODS, Duration::from_secs(180), || {
            standby.log_tail()
        })
        .await;
        assert_no_overcommit(&client).await;
        let conflicts = standby.metric("berth_api_requests_total{operation=\"bind\",code=\"409\"}");
        assert_eq!(conflicts, 0.0, "409s on binding:\n{}", standby.metrics());
        let failures = standby.metric("berth_bind_failures_total");
        assert_eq!(failures, 0.0, "failed binds:\n{}", standby.metrics());
        drop(standby);
    });
}
