//! A `scheduling.koordinator.sh/resource-status` berth cannot read (written by hand, or by an
//! agent of another version) names CPUs berth cannot know: it is reported once, as a
//! Warning on the object, and the rest of the cluster goes on being scheduled.

use berth_api::annotations::ANNOTATION_RESOURCE_STATUS;
use berth_core::testing::{node, pod, FakeDriver};
use berth_core::{Object, Record};

fn invalid(events: &[Record]) -> Vec<&Record> {
    events
        .iter()
        .filter(|r| r.reason == "InvalidAnnotation")
        .collect()
}

#[test]
fn a_malformed_resource_status_is_reported_once_and_scheduling_goes_on() {
    let mut d = FakeDriver::synchronous();
    d.apply(Object::Node(
        node("n1").alloc("cpu", "4").alloc("memory", "8Gi").build(),
    ));
    for (name, status) in [("not-json", "{"), ("bad-cpuset", r#"{"cpuset":"3-1"}"#)] {
        d.apply(Object::Pod(
            pod(name)
                .req("cpu", "1")
                .node_name("n1")
                .annotation(ANNOTATION_RESOURCE_STATUS, status)
                .build(),
        ));
    }
    d.settle();
    let reported = invalid(d.events());
    assert_eq!(reported.len(), 2, "{reported:?}");
    for r in &reported {
        assert_eq!(r.type_, "Warning");
        assert!(
            r.message.contains(ANNOTATION_RESOURCE_STATUS),
            "{}",
            r.message
        );
    }
    assert!(reported
        .iter()
        .any(|r| r.involved.name.as_ref() == "bad-cpuset" && r.message.contains("3-1")));

    // Another update of the pod, same annotation: not reported again.
    d.apply(Object::Pod(
        pod("not-json")
            .req("cpu", "1")
            .node_name("n1")
            .label("touched", "yes")
            .annotation(ANNOTATION_RESOURCE_STATUS, "{")
            .build(),
    ));
    // And a well-formed one raises nothing.
    d.apply(Object::Pod(
        pod("fine")
            .req("cpu", "1")
            .node_name("n1")
            .annotation(ANNOTATION_RESOURCE_STATUS, r#"{"cpuset":"2"}"#)
            .build(),
    ));
    d.apply(Object::Pod(pod("pending").req("cpu", "500m").build()));
    d.settle();
    assert_eq!(invalid(d.events()).len(), 2);
    assert_eq!(d.bound("pending").as_deref(), Some("n1"));
}
