//! Criterion: one scheduling cycle on a generated cluster (kube-scheduler's
//! SchedulingBasic shape). `berth bench` reports the end-to-end figures; this bench tracks
//! the per-cycle cost so regressions show up in `cargo bench`.

use std::sync::Arc;

use berth_core::{fixtures, Config, Effect, Event, Object, Profile, Scheduler};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

fn cluster(nodes: usize, pods: usize) -> Scheduler {
    let mut s = Scheduler::new(
        vec![Profile::default_profile()],
        Config {
            seed: 1,
            ..Config::default()
        },
    );
    for n in fixtures::nodes(nodes) {
        s.handle(0, Event::Applied(Object::Node(n)));
    }
    for p in fixtures::pods("bench", pods) {
        s.handle(0, Event::Applied(Object::Pod(p)));
    }
    while s.poll_effect().is_some() {}
    s
}

fn confirm(s: &mut Scheduler) {
    while let Some(e) = s.poll_effect() {
        if let Effect::Bind { pod, node, .. } = e {
            if let Some(entry) = s.pod(&pod) {
                let mut p = (*entry.info.pod).clone();
                p.spec.get_or_insert_with(Default::default).node_name = Some(node);
                s.handle(0, Event::Applied(Object::Pod(Arc::new(p))));
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("scheduling_basic");
    g.sample_size(10);
    for nodes in [500usize, 5000] {
        g.bench_function(format!("{nodes}n_100p"), |b| {
            b.iter_batched(
                || cluster(nodes, 100),
                |mut s| {
                    while s.schedule_next(0) {
                        confirm(&mut s);
                    }
                    s
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
