//! Criterion: the measured cycles of every `berth bench` workload on a 500-node cluster
//! (set-up untimed), so a regression in any scheduler_perf shape shows up in `cargo bench`.
//! `berth bench --suite all --instructions` gives the exact instruction counts at full size.

use berth_sim::bench::{prepare, reservation_cases, run_prepared, workload_case};
use berth_sim::bench_workloads::WORKLOADS;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

const NODES: usize = 500;
const PODS: usize = 100;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("workloads");
    g.sample_size(10);
    let mut cases: Vec<_> = WORKLOADS
        .into_iter()
        .map(|w| (w.name().to_string(), workload_case(w, NODES, PODS)))
        .collect();
    if let Some(r) = reservation_cases(NODES, PODS).pop() {
        cases.push(("Reservations".to_string(), r));
    }
    for (name, case) in cases {
        g.bench_function(name, |b| {
            b.iter_batched(
                || prepare(&case),
                |mut s| {
                    let r = run_prepared(&case, &mut s);
                    assert_eq!(r.scheduled, PODS as u64, "{}", case.name);
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
