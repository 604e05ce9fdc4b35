//! The property of job-level gang preemption, over random clusters of lower- and
//! equal-priority pods and a high-priority gang, with shuffled delivery and restarts: a
//! gang never evicts its own members or a pod of its own priority, nothing is
//! overcommitted, and a gang that evicted anything ends up placed whole (it never preempts
//! in vain).

use berth_api::gang::LABEL_SIGS_POD_GROUP;
use proptest::prelude::*;

use super::gang_tests::{nodes, pod_group};
use super::Config;
use crate::object::{Kind, Object};
use crate::testing::{pod, DriverConfig, FakeDriver, Profiles};
use crate::time::SECOND;

const LOW: i32 = 100;
const HIGH: i32 = 1000;

/// Nodes (CPUs), pods already running (CPUs, of the gang's priority or lower), the gang
/// (size, min, CPUs per member, strict), delivery and restart.
#[derive(Debug, Clone)]
struct Case {
    nodes: Vec<u32>,
    fillers: Vec<(u32, bool)>,
    gang: (u32, u32, u32, bool),
    shuffle: bool,
    restart: bool,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(1u32..6, 1..4),
        prop::collection::vec((1u32..3, any::<bool>()), 0..10),
        (1u32..6, 1u32..6, 1u32..3, any::<bool>()),
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(nodes, fillers, (size, min, cpu, strict), shuffle, restart, seed)| Case {
                nodes,
                fillers,
                gang: (size, min.min(size), cpu, strict),
                shuffle,
                restart,
                seed,
            },
        )
}

fn run_case(c: &Case) -> Result<(), TestCaseError> {
    let cfg = DriverConfig {
        seed: c.seed,
        refuse_pct: 0,
        lose_answer_pct: 0,
        shuffle: c.shuffle,
    };
    let config = Config {
        seed: c.seed,
        wait_for_sync: Kind::ALL.to_vec(),
    };
    let mut d = FakeDriver::new(Profiles::default_profile(), config, cfg, 1_000_000);
    d.restart();
    nodes(&mut d, &c.nodes);
    for (i, &(cpu, low)) in c.fillers.iter().enumerate() {
        let p = pod(&format!("f{i}"))
            .req("cpu", &cpu.to_string())
            .priority(if low { LOW } else { HIGH });
        d.apply(Object::Pod(p.build()));
    }
    d.settle();
    let running: Vec<(String, u32, bool)> = c
        .fillers
        .iter()
        .enumerate()
        .map(|(i, &(cpu, low))| (format!("f{i}"), cpu, low))
        .filter(|(name, ..)| d.bound(name).is_some())
        .collect();
    let (size, min, cpu, strict) = c.gang;
    // The members come before their PodGroup, so that the gang's first cycle sees all of
    // them: a strict gang's member that arrives after the gang preempted can still reject
    // it (as in Koordinator, whose plan also covers only the members it knows of).
    let members: Vec<String> = (0..size).map(|i| format!("w{i}")).collect();
    for name in &members {
        let p = pod(name)
            .req("cpu", &cpu.to_string())
            .priority(HIGH)
            .label(LABEL_SIGS_POD_GROUP, "job");
        d.apply(Object::Pod(p.build()));
    }
    d.settle();
    d.apply(pod_group("job", min as i32, Some(60), strict));
    d.settle();
    if c.restart {
        d.restart();
        d.settle();
    }
    // Past the time-out and every back-off.
    d.advance(3 * 60 * SECOND);
    prop_assert!(d.violations().is_empty(), "{:?}", d.violations());
    for name in &members {
        prop_assert!(
            d.pod("default", name).is_some(),
            "member {} was evicted",
            name
        );
    }
    let mut evicted = 0;
    for (name, _, low) in &running {
        if d.pod("default", name).is_none() {
            prop_assert!(*low, "{} has the gang's priority and was evicted", name);
            evicted += 1;
        }
    }
    for (i, cap) in c.nodes.iter().enumerate() {
        let node = format!("n{i}");
        let on = |name: &str| d.bound(name).as_deref() == Some(node.as_str());
        let fillers: u32 = c
            .fillers
            .iter()
            .enumerate()
            .filter(|(i, _)| on(&format!("f{i}")))
            .map(|(_, &(cpu, _))| cpu)
            .sum();
        let gang = members.iter().filter(|m| on(m)).count() as u32 * cpu;
        prop_assert!(
            fillers + gang <= *cap,
            "{}: {} + {} on {}",
            node,
            fillers,
            gang,
            cap
        );
    }
    let bound = members.iter().filter(|m| d.bound(m).is_some()).count() as u32;
    prop_assert!(bound == 0 || bound >= min, "{} of min {} bound", bound, min);
    prop_assert!(
        evicted == 0 || bound >= min,
        "{} pod(s) evicted for a gang that placed {} of min {}",
        evicted,
        bound,
        min
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn a_gang_preempts_for_all_it_needs_or_evicts_nothing(c in case()) {
        run_case(&c)?;
    }
}
