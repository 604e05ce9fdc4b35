//! `berth run` through a faulty network and a restarted API server: with 5% of requests
//! failing (500s, some after the server did the write, and time-outs) and every watch cut
//! every few seconds, a 1,000-pod burst ends with every pod bound once and nothing
//! overcommitted; with the API server restarted mid-burst, scheduling resumes by itself.

mod support;

use std::time::{Duration, Instant};

use berth_testcluster::{FaultProxy, Faults};
use support::*;

#[test]
fn a_burst_through_failing_requests_and_cut_watches_binds_every_pod_once() {
    let Env { cluster, dir, rt } = Env::new("faults");
    rt.block_on(async {
        let client = cluster.client();
        perf_nodes(&cluster, "node-", 30).await;
        cluster.create_namespace("burst").await.expect("ns");
        let faults = Faults {
            error_rate: 0.03,
            timeout_rate: 0.02,
            timeout: Duration::from_secs(2),
            cut_watches_every: Some(Duration::from_secs(3)),
            seed: 7,
            ..Faults::default()
        };
        let proxy = FaultProxy::start(&cluster, faults).await.expect("proxy");
        let berth = Berth::start(&dir, "berth", proxy.kubeconfig_path(), CONFIG);
        let pods: Vec<_> = (0..1000)
            .map(|i| perf_pod("burst", &format!("p{i:04}"), serde_json::json!({})))
            .collect();
        create_all(&client, pods).await;
        wait_bound(&client, "burst", 1000, Duration::from_secs(300), || {
            format!("{:?}\n{}", proxy.stats(), berth.log_tail())
        })
        .await;
        assert_no_overcommit(&client).await;
        let stats = proxy.stats();
        eprintln!("{stats:?}");
        assert!(
            stats.errors_injected > 0 && stats.errors_after_forwarding > 0,
            "{stats:?}"
        );
        assert!(stats.timeouts_injected > 0, "{stats:?}");
        assert!(stats.watches_cut > 0, "{stats:?}");
        // berth multiplexes over HTTP/2 as client-go does (the proxy offers both, as the
        // API server does); only berth talks to the proxy here.
        assert_eq!(stats.http2_requests, stats.requests, "{stats:?}");
        // Every pod bound once: a binding the server did while the client saw a 500 comes
        // back as a 409 on retry, which berth recognises as its own.
        assert_eq!(
            berth.metric("berth_bind_failures_total{class=\"conflict\""),
            0.0,
            "{}",
            berth.metrics()
        );
    });
}

#[test]
fn scheduling_resumes_by_itself_after_the_api_server_restarts() {
    let Env { cluster, dir, rt } = Env::new("apiserver-restart");
    rt.block_on(async {
        let client = cluster.client();
        perf_nodes(&cluster, "node-", 20).await;
        cluster.create_namespace("burst").await.expect("ns");
        let berth = Berth::start(&dir, "berth", cluster.kubeconfig_path(), CONFIG);
        let pods: Vec<_> = (0..600)
            .map(|i| perf_pod("burst", &format!("p{i:04}"), serde_json::json!({})))
            .collect();
        let (first, second) = pods.split_at(300);
        create_all(&client, first.to_vec()).await;
        wait_bound(&client, "burst", 100, Duration::from_secs(120), || {
            berth.log_tail()
        })
        .await;
        let started = Instant::now();
        tokio::task::block_in_place(|| {
            cluster.stop_apiserver();
            std::thread::sleep(Duration::from_secs(3));
            cluster.start_apiserver().expect("apiserver back");
        });
        eprintln!("API server down and back in {:?}", started.elapsed());
        create_all(&client, second.to_vec()).await;
        wait_bound(&client, "burst", 600, Duration::from_secs(180), || {
            berth.log_tail()
        })
        .await;
        assert_no_overcommit(&client).await;
        assert!(
            berth.metric("scheduler_schedule_attempts_total{result=\"scheduled\"") >= 500.0,
            "{}",
            berth.metrics()
        );
    });
}
