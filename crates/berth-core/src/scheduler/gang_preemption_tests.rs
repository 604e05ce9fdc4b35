//! Job-level gang preemption through the whole scheduler (the fake cluster of
//! [`crate::testing::driver`]): a gang evicts for all the members it needs or for none,
//! never its own members, never a pod of its own priority or higher.

use berth_api::gang::LABEL_SIGS_POD_GROUP;

use super::gang_tests::{nodes, pod_group};
use crate::object::Object;
use crate::testing::{pod, FakeDriver};

const LOW: i32 = 100;
const HIGH: i32 = 1000;

fn plain(name: &str, priority: i32) -> Object {
    Object::Pod(pod(name).req("cpu", "1").priority(priority).build())
}

fn member(name: &str, gang: &str, priority: i32) -> Object {
    Object::Pod(
        pod(name)
            .req("cpu", "1")
            .priority(priority)
            .label(LABEL_SIGS_POD_GROUP, gang)
            .build(),
    )
}

/// Two 2-CPU nodes full of `fillers` (name, priority), then a high-priority gang of 4.
fn full_cluster_then_gang(fillers: &[(&str, i32)]) -> FakeDriver {
    let mut d = FakeDriver::synchronous();
    nodes(&mut d, &[2, 2]);
    for (name, priority) in fillers {
        d.apply(plain(name, *priority));
    }
    d.settle();
    for (name, _) in fillers {
        assert!(d.bound(name).is_some(), "{name} fills the cluster");
    }
    d.apply(pod_group("job", 4, None, true));
    for i in 0..4 {
        d.apply(member(&format!("w{i}"), "job", HIGH));
    }
    d.settle();
    d
}

#[test]
fn a_gang_short_by_all_its_members_preempts_for_all_of_them() {
    let fillers = [("l0", LOW), ("l1", LOW), ("l2", LOW), ("l3", LOW)];
    let d = full_cluster_then_gang(&fillers);
    for i in 0..4 {
        assert!(d.bound(&format!("w{i}")).is_some(), "w{i} bound");
    }
    for (name, _) in fillers {
        assert!(d.pod("default", name).is_none(), "{name} evicted");
        let times = d
            .events()
            .iter()
            .filter(|e| e.reason == "Preempted" && &*e.involved.name == name)
            .count();
        assert_eq!(times, 1, "{name} is evicted once");
    }
    assert!(d.violations().is_empty(), "{:?}", d.violations());
}

#[test]
fn a_gang_victims_cannot_make_room_for_evicts_nothing() {
    // Only three CPUs can be freed: `peer` has the gang's own priority.
    let fillers = [("l0", LOW), ("l1", LOW), ("l2", LOW), ("peer", HIGH)];
    let d = full_cluster_then_gang(&fillers);
    for (name, _) in fillers {
        assert!(d.bound(name).is_some(), "{name} keeps running");
    }
    for i in 0..4 {
        assert_eq!(d.bound(&format!("w{i}")), None, "w{i}");
    }
    let (_, message) = d.condition("w0").expect("a condition");
    assert!(
        message.contains("would place only 3 of the 4 member(s) gang default/job still needs"),
        "{message}"
    );
    let preempted = d
        .events()
        .iter()
        .filter(|e| e.reason == "Preempted")
        .count();
    assert_eq!(
        preempted, 0,
        "nothing is evicted for a gang that cannot form"
    );
}

#[test]
fn a_gang_never_evicts_its_own_members() {
    let mut d = FakeDriver::synchronous();
    nodes(&mut d, &[3]);
    // A gang of 2 low-priority members, placed; a low pod beside them.
    d.apply(pod_group("job", 2, None, true));
    d.apply(member("x", "job", LOW));
    d.apply(member("y", "job", LOW));
    d.apply(plain("other", LOW));
    d.settle();
    for name in ["x", "y", "other"] {
        assert!(d.bound(name).is_some(), "{name}");
    }
    // A high-priority third member: DefaultPreemption alone would evict `y` (the last
    // in its order); the gang evicts `other` instead.
    d.apply(member("z", "job", HIGH));
    d.settle();
    assert!(d.bound("z").is_some(), "z bound");
    assert!(
        d.bound("x").is_some() && d.bound("y").is_some(),
        "x and y stay"
    );
    assert!(d.pod("default", "other").is_none(), "other evicted");
}

#[test]
fn a_gang_with_only_its_own_members_to_evict_evicts_nothing() {
    let mut d = FakeDriver::synchronous();
    nodes(&mut d, &[2]);
    d.apply(pod_group("job", 2, None, true));
    d.apply(member("x", "job", LOW));
    d.apply(member("y", "job", LOW));
    d.settle();
    d.apply(member("z", "job", HIGH));
    d.settle();
    assert!(
        d.bound("x").is_some() && d.bound("y").is_some(),
        "x and y stay"
    );
    assert_eq!(d.bound("z"), None);
    let (_, message) = d.condition("z").expect("a condition");
    assert!(
        message.contains("(pod default/z fits no node); a gang preempts only"),
        "{message}"
    );
}
