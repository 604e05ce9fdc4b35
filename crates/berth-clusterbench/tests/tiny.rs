//! The harness end to end on a tiny case, with berth in-process (no binary needed): every
//! pod is bound exactly once and the rate is positive.

use std::time::{Duration, Instant};

use berth_clusterbench::{run::cluster_options, Case, Workload};
use berth_testcluster::TestCluster;

#[test]
fn tiny_case_binds_every_pod_exactly_once() {
    let started = Instant::now();
    let case = Case::new("tiny", 20, 10, 50, 0);
    let cluster = TestCluster::start_with(cluster_options()).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let workload = Workload::new(cluster.client(), case.clone(), 50);
        workload.create_nodes().await.unwrap();
        let mut settings = berth_kube::Settings::builtin();
        settings.client.qps = 0.0;
        let handle =
            berth_kube::driver::start(cluster.client(), berth_kube::RunOptions::new(settings))
                .await
                .unwrap();
        let mut alive = || Ok(());
        workload.run_init(&mut alive).await.unwrap();
        // berth runs in this process: its CPU is ours.
        let m = workload
            .run_measured(std::process::id(), &mut alive)
            .await
            .unwrap();
        // `run_measured` fails unless each pod was seen bound on one node and the API agrees.
        assert_eq!(m.pods, 50);
        assert!(m.pods_per_sec() > 0.0, "{m:?}");
        assert!(m.throughput.avg > 0.0, "{m:?}");
        assert!(m.nodes_used >= 1 && m.nodes_used <= 20, "{m:?}");
        assert!(m.after.scheduler.peak_rss_kib > 0);
        handle.stop().await.unwrap();
    });
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "took {:?}",
        started.elapsed()
    );
}
