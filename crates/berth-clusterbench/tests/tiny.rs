//! The harness end to end on a tiny case, with berth in-process (no binary needed): every
//! pod is bound exactly once and the rate is positive.

use std::time::{Duration, Instant};

use berth_clusterbench::objects::PodView;
use berth_clusterbench::workload::FLOOD_NAMESPACE;
use berth_clusterbench::{
    run::cluster_options, run_one, BerthOptions, Case, Mode, RunConfig, Tuning, Which, Workload,
};
use berth_testcluster::TestCluster;
use kube::api::{Api, ListParams};

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
        settings.profiles[0].scheduler_name = "default-scheduler".into();
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
            settings.profiles[0].scheduler_name = "default-scheduler".into();
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

/// The defaults mode (issue 24), tiny: kube-scheduler as the benchmark starts it on its
/// defaults (no clientConnection, leader election on) drains a backlog, and so does berth
/// on its defaults (qps 50 / burst 100, leader election on; in-process, as above), which
/// takes its tokens for binds from the same bucket as its other writes and sends its events
/// through a client of their own.
#[test]
fn tiny_backlog_on_both_schedulers_defaults() {
    let case = Case::new("tiny-defaults", 20, 10, 50, 0).with_unschedulable(60);
    let work_dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tiny-defaults-{}", std::process::id()));
    let config = RunConfig {
        mode: Mode::Backlog,
        berth: BerthOptions {
            binary: "berth-not-needed".into(),
            max_binds_in_flight: 256,
            tuning: Tuning::Defaults,
        },
        concurrency: 50,
        work_dir: work_dir.clone(),
    };
    let outcome = run_one(&case, Which::KubeScheduler, &config).unwrap();
    assert_eq!(outcome.measured.pods, 50);
    assert!(
        outcome.measured.throughput.avg > 0.0,
        "{:?}",
        outcome.measured
    );
    let written = std::fs::read_to_string(
        work_dir.join("tiny-defaults-kube-scheduler/kube-scheduler-config.yaml"),
    )
    .unwrap();
    assert!(!written.contains("qps"), "{written}");
    assert!(written.contains("\"leaderElect\": true"), "{written}");

    let cluster = TestCluster::start_with(cluster_options()).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let workload = Workload::new(cluster.client(), case.clone(), 50);
        workload.create_nodes().await.unwrap();
        let options = || {
            // Nothing but the profile's name: qps 50 / burst 100, leader election on.
            let mut settings = berth_kube::Settings::builtin();
            settings.profiles[0].scheduler_name = "default-scheduler".into();
            assert!(settings.leader_election.leader_elect);
            assert_eq!(settings.client.qps, 50.0);
            berth_kube::RunOptions::new(settings)
        };
        let first = berth_kube::driver::start(cluster.client(), options())
            .await
            .unwrap();
        let mut alive = || Ok(());
        workload.run_init(&mut alive).await.unwrap();
        workload.create_unschedulable(&mut alive).await.unwrap();
        let flood: Api<PodView> = Api::namespaced(cluster.client(), FLOOD_NAMESPACE);
        let versions = || async {
            flood
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|p| (p.metadata.name, p.metadata.resource_version))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let before = versions().await;
        assert_eq!(before.len(), 60);
        first.stop().await.unwrap();
        let second = std::sync::Mutex::new(None);
        let rt = tokio::runtime::Handle::current();
        let mut start = || {
            let handle = tokio::task::block_in_place(|| {
                rt.block_on(async {
                    let clients = berth_kube::client::connect_all(
                        Some(&cluster.kubeconfig_path().display().to_string()),
                        &berth_kube::settings::ClientConnection::default(),
                    )
                    .await?;
                    berth_kube::driver::start(clients, options()).await
                })
            })
            .map_err(|e| berth_clusterbench::Error::Check(e.to_string()))?;
            *second.lock().unwrap() = Some(handle);
            Ok(std::process::id())
        };
        let m = workload.run_backlog(&mut start, &mut alive).await.unwrap();
        assert_eq!(m.pods, 50);
        assert!(m.throughput.avg > 0.0, "{m:?}");
        // The restarted scheduler retried the older unschedulable pods before the backlog
        // and left their conditions, which already said what it found, unwritten.
        assert_eq!(
            versions().await,
            before,
            "unchanged conditions were rewritten"
        );
        let handle = second.lock().unwrap().take().expect("started");
        handle.stop().await.unwrap();
    });
}
