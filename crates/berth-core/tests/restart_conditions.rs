//! A restarted scheduler does not rewrite a `PodScheduled` condition that already says what
//! it would write: after a restart over thousands of pods that stayed unschedulable, those
//! status writes would otherwise queue ahead of the first bind. It still reports the failure
//! (a `FailedScheduling` event per process, as kube-scheduler records one per attempt), and it
//! writes the condition when its words change.

use berth_core::testing::{node, pod, FakeDriver};
use berth_core::{Effect, Object};

fn condition_writes(effects: &[Effect], name: &str) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::PodCondition { pod, message, .. } if &*pod.name == name => {
                Some(message.clone())
            }
            _ => None,
        })
        .collect()
}

fn failed_events(d: &FakeDriver, name: &str) -> usize {
    d.events()
        .iter()
        .filter(|r| r.reason == "FailedScheduling" && &*r.involved.name == name)
        .count()
}

#[test]
fn a_restart_leaves_an_unchanged_condition_alone_and_writes_a_changed_one() {
    let mut d = FakeDriver::synchronous();
    d.apply(Object::Node(
        node("n1").alloc("cpu", "1").alloc("memory", "8Gi").build(),
    ));
    d.apply(Object::Pod(pod("big").req("cpu", "2").build()));
    d.apply(Object::Pod(pod("small").req("cpu", "500m").build()));
    d.settle();
    let first = condition_writes(&d.take_effects(), "big");
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(first[0].contains("Insufficient cpu"), "{}", first[0]);
    assert_eq!(failed_events(&d, "big"), 1);
    assert_eq!(d.bound("small").as_deref(), Some("n1"));

    d.restart();
    d.take_effects();
    d.settle();
    let again = condition_writes(&d.take_effects(), "big");
    assert!(
        again.is_empty(),
        "rewrote an unchanged condition: {again:?}"
    );
    assert_eq!(
        failed_events(&d, "big"),
        2,
        "the new process reports the failure once"
    );
    assert_eq!(d.condition("big").map(|(_, m)| m), Some(first[0].clone()));

    // A second node, big enough but tainted, changes the words: written.
    d.apply(Object::Node(
        node("n2")
            .alloc("cpu", "4")
            .alloc("memory", "8Gi")
            .taint("dedicated", "other", "NoSchedule")
            .build(),
    ));
    d.settle();
    let changed = condition_writes(&d.take_effects(), "big");
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert!(changed[0].starts_with("0/2 nodes"), "{}", changed[0]);
    assert!(changed[0].contains("untolerated taint"), "{}", changed[0]);
}
