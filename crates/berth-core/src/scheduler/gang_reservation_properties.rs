//! Property: gangs of Reservations and gangs of pods side by side, on random capacities,
//! with bind refusals, time-outs and restarts: once settled, a gang of Reservations is
//! Available whole (at least its minimum) or holds nothing (every member Pending), a gang
//! of pods is bound whole or not at all, and no node holds more than it has, counting the
//! room Available Reservations keep.

use berth_api::gang::{
    ANNOTATION_GANG_MIN_NUM, ANNOTATION_GANG_MODE, ANNOTATION_GANG_NAME, ANNOTATION_GANG_WAIT_TIME,
    GANG_MODE_NON_STRICT,
};
use proptest::prelude::*;

use crate::object::Object;
use crate::reservation::testkit::{reservation, Sim};
use crate::testing::{node, pod, DriverConfig, Profiles};
use crate::time::SECOND;

/// A gang: members, minimum, CPUs per member, strict, time-out (s), Reservations or pods.
type Gang = (u32, u32, u32, bool, u32, bool);

#[derive(Debug, Clone)]
struct Case {
    gangs: Vec<Gang>,
    nodes: Vec<u32>,
    refuse_pct: u32,
    restart: bool,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(
            (
                1u32..6,
                1u32..6,
                1u32..3,
                any::<bool>(),
                5u32..40,
                any::<bool>(),
            ),
            1..4,
        ),
        prop::collection::vec(1u32..8, 1..4),
        prop_oneof![Just(0u32), 1u32..25],
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(gangs, nodes, refuse_pct, restart, seed)| Case {
            gangs,
            nodes,
            refuse_pct,
            restart,
            seed,
        })
}

fn member_name(g: usize, i: u32) -> String {
    format!("g{g}-{i}")
}

fn apply_gang(s: &mut Sim, g: usize, gang: &Gang) {
    let &(size, min, cpu, strict, timeout, reservations) = gang;
    let name = format!("g{g}");
    for i in 0..size {
        let member = member_name(g, i);
        if reservations {
            let mut r = reservation(&member)
                .req("cpu", &cpu.to_string())
                .owner_label("app", &name)
                .annotation(ANNOTATION_GANG_NAME, &name)
                .annotation(ANNOTATION_GANG_MIN_NUM, &min.to_string());
            if !strict {
                r = r
                    .annotation(ANNOTATION_GANG_MODE, GANG_MODE_NON_STRICT)
                    .annotation(ANNOTATION_GANG_WAIT_TIME, &format!("{timeout}s"));
            }
            s.d.apply(Object::Reservation(std::sync::Arc::new(r.build())));
        } else {
            let mut p = pod(&member)
                .req("cpu", &cpu.to_string())
                .annotation(ANNOTATION_GANG_NAME, &name)
                .annotation(ANNOTATION_GANG_MIN_NUM, &min.to_string());
            if !strict {
                p = p
                    .annotation(ANNOTATION_GANG_MODE, GANG_MODE_NON_STRICT)
                    .annotation(ANNOTATION_GANG_WAIT_TIME, &format!("{timeout}s"));
            }
            s.d.apply(Object::Pod(p.build()));
        }
    }
}

/// Where a member sits once settled: a bound pod's node, an Available Reservation's node.
fn placed(s: &Sim, name: &str, reservations: bool) -> Option<String> {
    if !reservations {
        return s.bound(name);
    }
    let r = s.d.reservation(name)?;
    (r.phase().to_string() == "Available")
        .then(|| r.status.as_ref().and_then(|st| st.node_name.clone()))
        .flatten()
}

fn run_case(c: &Case) -> Result<(), TestCaseError> {
    let cfg = DriverConfig {
        seed: c.seed,
        refuse_pct: c.refuse_pct,
        lose_answer_pct: 0,
        shuffle: true,
    };
    let mut s = Sim::with_driver(Profiles::default_profile(), cfg);
    for (i, cap) in c.nodes.iter().enumerate() {
        s.node(
            node(&format!("n{i}"))
                .alloc("cpu", &cap.to_string())
                .alloc("memory", "64Gi")
                .build(),
        );
    }
    for (g, gang) in c.gangs.iter().enumerate() {
        apply_gang(&mut s, g, gang);
    }
    s.settle();
    if c.restart {
        s.d.restart();
        s.settle();
    }
    // Past every time-out (at most 40s) and back-off.
    s.advance(3 * 60 * SECOND);
    prop_assert!(s.d.violations().is_empty(), "{:?}", s.d.violations());
    let mut used = vec![0u32; c.nodes.len()];
    for (g, &(size, min, cpu, _, _, reservations)) in c.gangs.iter().enumerate() {
        let mut count = 0;
        for i in 0..size {
            if let Some(n) = placed(&s, &member_name(g, i), reservations) {
                count += 1;
                let idx: usize = n.trim_start_matches('n').parse().unwrap_or(usize::MAX);
                if let Some(u) = used.get_mut(idx) {
                    *u += cpu;
                }
            }
        }
        if reservations {
            // Reservations are written Available only together, and no write is refused
            // for them here: whole or nothing, whatever the refusals of pods' binds.
            prop_assert!(
                count == 0 || (count >= min.min(size) && min <= size),
                "reservation gang g{} (min {} of {}) has {} Available",
                g,
                min,
                size,
                count
            );
            if count == 0 {
                for i in 0..size {
                    let name = member_name(g, i);
                    prop_assert_eq!(s.phase(&name), "Pending", "{} holds room", name);
                }
            }
        } else {
            // A refused bind gives its room back while the rest is bound (the API has no
            // unbind): whole gangs are promised only where every bind is answered.
            prop_assert!(
                c.refuse_pct > 0 || count == 0 || (count >= min.min(size) && min <= size),
                "pod gang g{} (min {} of {}) has {} bound",
                g,
                min,
                size,
                count
            );
        }
    }
    for (i, (u, cap)) in used.iter().zip(&c.nodes).enumerate() {
        prop_assert!(u <= cap, "n{}: {} used of {}", i, u, cap);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn reservation_gangs_are_available_whole_or_hold_nothing(c in case()) {
        run_case(&c)?;
    }
}
