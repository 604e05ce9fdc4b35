//! Gangs through the whole scheduler (the fake cluster of [`crate::testing::driver`]): all
//! of `min` or none, nothing held by a gang that cannot form, time-outs, failed binds,
//! restarts; and the property that once settled a gang is placed or holds nothing.

use std::sync::Arc;

use berth_api::gang::{
    PodGroup, ANNOTATION_GANG_MIN_NUM, ANNOTATION_GANG_MODE, ANNOTATION_GANG_NAME,
    ANNOTATION_GANG_WAIT_TIME, GANG_MODE_NON_STRICT, LABEL_SIGS_POD_GROUP,
};
use proptest::prelude::*;

use super::Config;
use crate::cache::PodState;
use crate::event::{BindFailure, Event};
use crate::object::{Kind, Object, ObjectKey};
use crate::testing::{node, pod, DriverConfig, FakeDriver, Profiles};
use crate::time::SECOND;

/// Nodes `n0`, `n1`... with these CPUs (and 64Gi each).
pub(super) fn nodes(d: &mut FakeDriver, cpus: &[u32]) {
    for (i, c) in cpus.iter().enumerate() {
        let n = node(&format!("n{i}"))
            .alloc("cpu", &c.to_string())
            .alloc("memory", "64Gi");
        d.apply(Object::Node(n.build()));
    }
}

/// A `scheduling.sigs.k8s.io` PodGroup in `default`.
pub(super) fn pod_group(name: &str, min: i32, timeout: Option<i32>, strict: bool) -> Object {
    let mut v = serde_json::json!({"apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "PodGroup", "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": min}});
    if let Some(t) = timeout {
        v["spec"]["scheduleTimeoutSeconds"] = t.into();
    }
    if !strict {
        v["metadata"]["annotations"] =
            serde_json::json!({ANNOTATION_GANG_MODE: GANG_MODE_NON_STRICT});
    }
    let pg: PodGroup = serde_json::from_value(v).unwrap();
    Object::PodGroup(Arc::new(pg))
}

fn member(name: &str, gang: &str, cpu: u32) -> Object {
    Object::Pod(
        pod(name)
            .req("cpu", &cpu.to_string())
            .label(LABEL_SIGS_POD_GROUP, gang)
            .build(),
    )
}

fn state(d: &FakeDriver, name: &str) -> Option<PodState> {
    d.scheduler()
        .cluster
        .cache
        .pod(&ObjectKey::pod("default", name))
        .map(|e| e.state)
}

#[test]
fn a_gang_of_8_on_room_for_6_places_none_and_holds_nothing() {
    let mut d = FakeDriver::synchronous();
    nodes(&mut d, &[3, 3]);
    d.apply(pod_group("job", 8, None, true));
    for i in 0..8 {
        d.apply(member(&format!("w{i}"), "job", 1));
    }
    d.settle();
    for i in 0..8 {
        let name = format!("w{i}");
        assert_eq!(d.bound(&name), None, "{name}");
        assert_eq!(
            state(&d, &name),
            Some(PodState::Pending),
            "{name} holds room"
        );
    }
    let (_, message) = d.condition("w0").unwrap();
    assert!(
        message.starts_with("GangGroup \"default/job\" gets rejected due to member Pod"),
        "{message}"
    );
    d.apply(Object::Pod(pod("big").req("cpu", "3").build()));
    d.settle();
    assert!(d.bound("big").is_some());
}

#[test]
fn a_gang_of_8_on_room_for_8_places_all() {
    let mut d = FakeDriver::synchronous();
    nodes(&mut d, &[4, 4]);
    d.apply(pod_group("job", 8, None, true));
    for i in 0..8 {
        d.apply(member(&format!("w{i}"), "job", 1));
    }
    d.settle();
    for i in 0..8 {
        assert!(d.bound(&format!("w{i}")).is_some(), "w{i}");
    }
}

#[test]
fn a_time_out_releases_what_the_gang_assumed() {
    let mut d = FakeDriver::synchronous();
    nodes(&mut d, &[3, 3]);
    d.apply(pod_group("job", 8, Some(30), false));
    for i in 0..8 {
        d.apply(member(&format!("w{i}"), "job", 1));
    }
    d.settle();
    let waiting = (0..8)
        .filter(|i| {
            d.scheduler()
                .waits_at_permit(&ObjectKey::pod("default", &format!("w{i}")))
        })
        .count();
    assert_eq!(waiting, 6, "six members fit and wait, holding their room");
    d.apply(Object::Pod(pod("big").req("cpu", "3").build()));
    d.settle();
    assert_eq!(d.bound("big"), None);
    d.advance(30 * SECOND);
    assert!(d.bound("big").is_some(), "the time-out gave the room back");
    assert!((0..8).all(|i| d.bound(&format!("w{i}")).is_none()));
    let timed_out = (0..8).any(|i| {
        d.condition(&format!("w{i}")).is_some_and(|(_, m)| {
            m == "rejected due to timeout after waiting 30s at plugin Coscheduling"
        })
    });
    assert!(timed_out);
}

#[test]
fn a_lightweight_gang_with_too_few_pods_waits_for_the_rest() {
    let mut d = FakeDriver::synchronous();
    nodes(&mut d, &[8]);
    let light = |name: &str| {
        Object::Pod(
            pod(name)
                .req("cpu", "1")
                .annotation(ANNOTATION_GANG_NAME, "g")
                .annotation(ANNOTATION_GANG_MIN_NUM, "2")
                .annotation(ANNOTATION_GANG_WAIT_TIME, "10s")
                .build(),
        )
    };
    d.apply(light("a"));
    d.settle();
    assert_eq!(d.bound("a"), None);
    assert!(d
        .condition("a")
        .unwrap()
        .1
        .contains("child pod not collect enough"));
    d.apply(light("b"));
    d.settle();
    assert!(d.bound("a").is_some() && d.bound("b").is_some());
}

/// kube-scheduler 1.35's GangScheduling keeps a Workload's member out at PreEnqueue, which
/// writes no condition; the gang report still says why it waits.
#[test]
fn a_workload_gang_with_too_few_pods_waits_without_a_condition() {
    let mut d = FakeDriver::synchronous();
    nodes(&mut d, &[8]);
    let w: berth_api::gang::Workload = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 2}}}]}}))
    .unwrap();
    d.apply(Object::Workload(Arc::new(w)));
    let worker = |name: &str| {
        Object::Pod(
            pod(name)
                .req("cpu", "1")
                .workload_ref("train", "workers", "")
                .build(),
        )
    };
    d.apply(worker("a"));
    d.settle();
    assert_eq!(d.bound("a"), None);
    assert_eq!(d.condition("a"), None, "no PodScheduled condition");
    let report = d
        .scheduler()
        .gang_report(&ObjectKey::pod("default", "a"))
        .unwrap();
    assert_eq!(
        report.unplaced,
        vec![(
            "default/a".to_string(),
            "waiting for minCount pods from a gang to appear in scheduling queue".to_string()
        )]
    );
    d.apply(worker("b"));
    d.settle();
    assert!(d.bound("a").is_some() && d.bound("b").is_some());
}

/// The core alone, at `now`, with a node of `cpu` CPUs and a strict PodGroup `job` of `min`.
fn bare(cpu: &str, min: i32) -> super::Scheduler {
    let mut s = super::Scheduler::new(Vec::new(), Config::default());
    let now = 1_000_000;
    s.handle(
        now,
        Event::Applied(Object::Node(node("n0").alloc("cpu", cpu).build())),
    );
    s.handle(now, Event::Applied(pod_group("job", min, None, true)));
    s
}

fn binds(s: &mut super::Scheduler) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while let Some(e) = s.poll_effect() {
        if let crate::effect::Effect::Bind { pod, node, .. } = e {
            out.push((pod.name.to_string(), node));
        }
    }
    out
}

/// In a cluster the time-out's timer fires a little after the deadline; the message names
/// the time-out, as kube-scheduler's does, not the wait measured to the late firing.
#[test]
fn a_late_time_out_names_the_time_out() {
    let mut s = super::Scheduler::new(Vec::new(), Config::default());
    let now = 1_000_000;
    s.handle(
        now,
        Event::Applied(Object::Node(node("n0").alloc("cpu", "2").build())),
    );
    s.handle(now, Event::Applied(pod_group("job", 3, Some(6), false)));
    for i in 0..3 {
        s.handle(now, Event::Applied(member(&format!("w{i}"), "job", 1)));
    }
    s.run_until_idle(now);
    let deadline = s.poll_timeout().expect("the gang's time-out");
    assert_eq!(deadline, now + 6 * SECOND);
    s.handle_timeout(deadline + 3);
    s.run_until_idle(deadline + 3);
    let mut said = Vec::new();
    while let Some(e) = s.poll_effect() {
        if let crate::effect::Effect::PodCondition { message, .. } = e {
            said.push(message);
        }
    }
    assert!(
        said.iter()
            .any(|m| m == "rejected due to timeout after waiting 6s at plugin Coscheduling"),
        "{said:?}"
    );
}

#[test]
fn a_members_failed_bind_backs_it_off_and_it_rejoins_its_bound_gang() {
    let mut s = bare("4", 3);
    let now = 1_000_000;
    for i in 0..3 {
        s.handle(now, Event::Applied(member(&format!("w{i}"), "job", 1)));
    }
    s.run_until_idle(now);
    let asked = binds(&mut s);
    assert_eq!(asked.len(), 3, "all three bind together: {asked:?}");
    s.handle(
        now,
        Event::BindFailed {
            pod: ObjectKey::pod("default", "w0"),
            uid: "uid-w0".into(),
            node: "n0".into(),
            class: BindFailure::Transient,
            message: "etcd timed out".into(),
        },
    );
    let w0 = ObjectKey::pod("default", "w0");
    assert_eq!(
        s.cluster.cache.pod(&w0).map(|e| e.state),
        Some(PodState::Pending)
    );
    for i in 1..3 {
        let p = pod(&format!("w{i}"))
            .req("cpu", "1")
            .label(LABEL_SIGS_POD_GROUP, "job")
            .node_name("n0")
            .build();
        s.handle(now, Event::Applied(Object::Pod(p)));
    }
    let later = s.poll_timeout().expect("w0 backs off");
    s.handle_timeout(later);
    s.run_until_idle(later);
    assert_eq!(binds(&mut s), vec![("w0".to_string(), "n0".to_string())]);
}

#[test]
fn deleting_a_waiting_member_rejects_the_rest_of_a_strict_gang() {
    let mut s = bare("4", 3);
    let now = 1_000_000;
    for i in 0..2 {
        s.handle(now, Event::Applied(member(&format!("w{i}"), "job", 1)));
    }
    // The third member is another scheduler's: it counts, but this one never places it.
    let other = pod("w2")
        .req("cpu", "1")
        .label(LABEL_SIGS_POD_GROUP, "job")
        .build();
    let mut other = (*other).clone();
    other.spec.as_mut().unwrap().scheduler_name = Some("other".into());
    s.handle(now, Event::Applied(Object::Pod(Arc::new(other))));
    s.run_until_idle(now);
    assert!(binds(&mut s).is_empty());
    let (w0, w1) = (
        ObjectKey::pod("default", "w0"),
        ObjectKey::pod("default", "w1"),
    );
    assert!(s.waits_at_permit(&w0) && s.waits_at_permit(&w1));
    assert_eq!(
        s.cluster.cache.pod(&w1).map(|e| e.state),
        Some(PodState::Assumed)
    );
    s.handle(now, Event::Deleted(w0));
    assert!(!s.waits_at_permit(&w1));
    assert_eq!(
        s.cluster.cache.pod(&w1).map(|e| e.state),
        Some(PodState::Pending)
    );
    let said = std::iter::from_fn(|| s.poll_effect()).any(|e| {
        matches!(e, crate::effect::Effect::PodCondition { pod, message, .. }
            if pod == w1 && message == "Gang \"default/job\" gets rejected due to Pod \"w0\" in Unreserve")
    });
    assert!(said);
}

/// A random gang workload: gangs (size, min, cpu per member, strict, time-out), node
/// capacities, bind refusals, shuffled delivery, a restart, time advanced.
#[derive(Debug, Clone)]
struct Case {
    gangs: Vec<(u32, u32, u32, bool, i32)>,
    nodes: Vec<u32>,
    refuse_pct: u32,
    shuffle: bool,
    restart: bool,
    advance_s: i64,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((1u32..6, 1u32..7, 1u32..3, any::<bool>(), 5i32..60), 1..4),
        prop::collection::vec(1u32..8, 1..4),
        prop_oneof![Just(0u32), 1u32..30],
        any::<bool>(),
        any::<bool>(),
        0i64..90,
        any::<u64>(),
    )
        .prop_map(
            |(gangs, nodes, refuse_pct, shuffle, restart, advance_s, seed)| Case {
                gangs,
                nodes,
                refuse_pct,
                shuffle,
                restart,
                advance_s,
                seed,
            },
        )
}

fn run_case(c: &Case) -> Result<(), TestCaseError> {
    let cfg = DriverConfig {
        seed: c.seed,
        refuse_pct: c.refuse_pct,
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
    for (g, &(size, min, cpu, strict, timeout)) in c.gangs.iter().enumerate() {
        let name = format!("g{g}");
        d.apply(pod_group(&name, min as i32, Some(timeout), strict));
        for i in 0..size {
            d.apply(member(&format!("{name}-{i}"), &name, cpu));
        }
    }
    d.settle();
    if c.restart {
        d.restart();
        d.settle();
    }
    d.advance(c.advance_s * SECOND);
    // Past every time-out (at most 60s here) and back-off: what is bound must be whole
    // gangs, and a strict gang that placed none holds nothing.
    d.advance(3 * 60 * SECOND);
    prop_assert!(d.violations().is_empty(), "{:?}", d.violations());
    // No overcommit: what is bound on a node fits its CPU.
    for (i, cap) in c.nodes.iter().enumerate() {
        let node = format!("n{i}");
        let used: u32 = c
            .gangs
            .iter()
            .enumerate()
            .flat_map(|(g, &(size, _, cpu, _, _))| (0..size).map(move |i| (g, i, cpu)))
            .filter(|(g, i, _)| d.bound(&format!("g{g}-{i}")).as_deref() == Some(&node))
            .map(|(.., cpu)| cpu)
            .sum();
        prop_assert!(used <= *cap, "{node}: {used} bound on {cap}");
    }
    for (g, &(size, min, _, strict, _)) in c.gangs.iter().enumerate() {
        let names: Vec<String> = (0..size).map(|i| format!("g{g}-{i}")).collect();
        let bound = names.iter().filter(|n| d.bound(n).is_some()).count() as u32;
        // A refused bind gives its room back while the rest of its gang is bound already
        // (the API has no unbind): another pod may take it, leaving the gang short. Whole
        // gangs are promised only where every bind is answered.
        prop_assert!(
            c.refuse_pct > 0 || bound == 0 || bound >= min.min(size).max(1) && min <= size,
            "gang g{g} (min {min} of {size}) has {bound} bound"
        );
        if bound == 0 && strict {
            for n in &names {
                prop_assert_eq!(
                    state(&d, n),
                    Some(PodState::Pending),
                    "strict gang g{} that placed none holds room with {}",
                    g,
                    n
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn a_settled_gang_is_placed_whole_or_holds_nothing(c in case()) {
        run_case(&c)?;
    }
}
