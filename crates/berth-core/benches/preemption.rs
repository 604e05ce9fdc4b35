//! Criterion: the cost of one preemption attempt (issue 13). Every node is full of
//! priority-0 pods; a priority-1000 pod fails Filter everywhere, and PostFilter
//! (DefaultPreemption) dry-runs victims on the candidate nodes (`minCandidateNodesPercentage`
//! 10 %, `minCandidateNodesAbsolute` 100), picks one, asks for its hold and evicts. Beside
//! it, a cycle that places a pod on the same cluster (one node left with room), so that the
//! report reads as "a preemption attempt costs this many cycles".

use berth_core::testing::{node, pod};
use berth_core::{Config, Event, Object, Profile, Scheduler};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

/// `nodes` nodes of 4 CPUs, each running two priority-0 pods of 2 CPUs, except the last
/// one when `room` (left empty).
fn cluster(nodes: usize, room: bool) -> Scheduler {
    let mut s = Scheduler::new(
        vec![Profile::default_profile()],
        Config {
            seed: 1,
            ..Config::default()
        },
    );
    for i in 0..nodes {
        let name = format!("n{i}");
        let n = node(&name)
            .alloc("cpu", "4")
            .alloc("memory", "16Gi")
            .alloc("pods", "110")
            .build();
        s.handle(0, Event::Applied(Object::Node(n)));
        if room && i + 1 == nodes {
            continue;
        }
        for j in 0..2 {
            let p = pod(&format!("low-{i}-{j}"))
                .req("cpu", "2")
                .req("memory", "1Gi")
                .priority(0)
                .node_name(&name)
                .build();
            s.handle(0, Event::Applied(Object::Pod(p)));
        }
    }
    while s.poll_effect().is_some() {}
    s
}

fn incoming(s: &mut Scheduler) {
    let p = pod("high")
        .req("cpu", "4")
        .req("memory", "1Gi")
        .priority(1000)
        .build();
    s.handle(0, Event::Applied(Object::Pod(p)));
    while s.poll_effect().is_some() {}
}

/// The attempt measured is a preemption (two victims evicted), the other a placement.
fn sanity() {
    let mut s = cluster(50, false);
    incoming(&mut s);
    assert!(s.schedule_next(0));
    assert_eq!(
        s.stats().preemption_victims,
        2,
        "one node's two pods evicted"
    );
    let mut s = cluster(50, true);
    incoming(&mut s);
    assert!(s.schedule_next(0));
    assert_eq!(s.stats().scheduled, 1);
}

fn bench(c: &mut Criterion) {
    sanity();
    let mut g = c.benchmark_group("preemption");
    g.sample_size(10);
    for nodes in [500usize, 5000] {
        for (what, room) in [("attempt", false), ("placing_cycle", true)] {
            g.bench_function(format!("{nodes}n_{what}"), |b| {
                b.iter_batched(
                    || {
                        let mut s = cluster(nodes, room);
                        incoming(&mut s);
                        s
                    },
                    |mut s| {
                        assert!(s.schedule_next(0));
                        s
                    },
                    BatchSize::LargeInput,
                )
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
