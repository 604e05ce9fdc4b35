use berth_core::reservation::testkit::reservation;
use berth_core::{fixtures, Config, Effect, Event, Object, Profile, Scheduler};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

fn run(nres: usize, pods: usize) {
    let mut s = Scheduler::new(vec![Profile::default_profile()], Config { seed: 1 });
    let nodes = fixtures::nodes(5000);
    for n in &nodes {
        s.handle(0, Event::Applied(Object::Node(n.clone())));
    }
    let groups = (nres / 2).max(1);
    for i in 0..nres {
        let node = nodes[i % nodes.len()].metadata.name.clone().unwrap();
        let mut r = reservation(&format!("r{i}"))
            .req("cpu", "100m")
            .req("memory", "100Mi")
            .reusable()
            .owner_label("app", &format!("g{}", i % groups))
            .build();
        r.status = Some(serde_json::from_value(json!({"phase": "Available", "nodeName": node, "allocatable": {"cpu": "100m", "memory": "100Mi"},
            "conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled"}, {"type": "Ready", "status": "True", "reason": "Available"}]})).unwrap());
        s.handle(0, Event::Applied(Object::Reservation(Arc::new(r))));
    }
    for i in 0..pods {
        let labels = if i % 2 == 0 {
            json!({"app": format!("g{}", (i / 2) % groups.min(500))})
        } else {
            json!({"app": "other"})
        };
        let p = fixtures::pod("bench", i, labels);
        s.handle(0, Event::Applied(Object::Pod(p)));
    }
    while s.poll_effect().is_some() {}
    let mut cycle = std::time::Duration::ZERO;
    loop {
        let t = Instant::now();
        if !s.schedule_next(0) {
            break;
        }
        cycle += t.elapsed();
        while let Some(e) = s.poll_effect() {
            if let Effect::Bind {
                pod,
                node,
                annotations,
            } = e
            {
                let Some(entry) = s.cluster.pod(&pod) else {
                    continue;
                };
                let mut p = (*entry.info.pod).clone();
                p.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(annotations);
                p.spec.get_or_insert_with(Default::default).node_name = Some(node);
                s.handle(0, Event::Applied(Object::Pod(Arc::new(p))));
            }
        }
    }
    let owners = s
        .cluster
        .pods()
        .filter(|e| {
            e.info
                .annotation("scheduling.koordinator.sh/reservation-allocated")
                .is_some()
        })
        .count();
    eprintln!(
        "reservations={nres} pods={pods} scheduled={} owners_allocated={owners} {:.0} pods/s",
        s.counters.scheduled,
        s.counters.scheduled as f64 / cycle.as_secs_f64()
    );
}

#[test]
#[ignore]
fn bench_reservations() {
    for n in [0, 1000, 10000] {
        run(n, 10000);
    }
}
