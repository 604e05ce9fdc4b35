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

/// The backlog mode: the measured pods are all created before berth starts; the clock runs
/// from its start to the last binding.
#[test]
fn tiny_backlog_is_drained_by_a_scheduler_started_after_it() {
    let case = Case::new("tiny-backlog", 20, 10, 50, 0);
    let cluster = TestCluster::start_with(cluster_options()).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let workload = Workload::new(cluster.client(), case.clone(), 50);
        workload.create_nodes().await.unwrap();
        let options = || {
            let mut settings = berth_kube::Settings::builtin();
            settings.client.qps = 0.0;
            berth_kube::RunOptions::new(settings)
        };
        let first = berth_kube::driver::start(cluster.client(), options())
            .await
            .unwrap();
        let mut alive = || Ok(());
        workload.run_init(&mut alive).await.unwrap();
        first.stop().await.unwrap();

        let second = std::sync::Mutex::new(None);
        let rt = tokio::runtime::Handle::current();
        let mut start = || {
            let handle = tokio::task::block_in_place(|| {
                rt.block_on(berth_kube::driver::start(cluster.client(), options()))
            })
            .map_err(|e| berth_clusterbench::Error::Check(e.to_string()))?;
            *second.lock().unwrap() = Some(handle);
            Ok(std::process::id())
        };
        let m = workload.run_backlog(&mut start, &mut alive).await.unwrap();
        // `run_backlog` fails if a pod was bound before the scheduler started.
        assert_eq!(m.pods, 50);
        assert!(m.throughput.avg > 0.0, "{m:?}");
        assert!(m.created_in > Duration::ZERO);
        let handle = second
            .lock()
            .unwrap()
            .take()
            .expect("the scheduler was started");
        handle.stop().await.unwrap();
    });
}
