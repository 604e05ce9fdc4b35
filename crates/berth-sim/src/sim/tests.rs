use super::events::{EventKey, Recorder, EVENT_CACHE_SIZE};
use super::*;
use crate::input::parse_str;

fn run(text: &str) -> Simulation {
    let input = match parse_str("t.yaml", text) {
        Ok(i) => i,
        Err(e) => panic!("{e}"),
    };
    Simulation::run(vec![], Config::default(), &input)
}

fn node_of(sim: &Simulation, name: &str) -> Option<String> {
    sim.store()
        .pod(&ObjectKey::pod("default", name))
        .and_then(|p| p.spec.as_ref()?.node_name.clone())
}

const NODES: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 2, memory: 4Gi, pods: 10}}\n---\n";

fn pod(name: &str, cpu: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec: {{containers: [{{name: c, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]}}\n---\n")
}

#[test]
fn nodes_get_the_kubelet_hostname_label_unless_they_set_one() {
    let sim = run("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n2, labels: {kubernetes.io/hostname: host-2, zone: a}}\n");
    let label = |name: &str| {
        sim.store()
            .node(name)
            .and_then(|n| n.metadata.labels.as_ref()?.get(LABEL_HOSTNAME).cloned())
    };
    assert_eq!(label("n1").as_deref(), Some("n1"));
    assert_eq!(label("n2").as_deref(), Some("host-2"));
}

#[test]
fn spreading_over_hostname_works_on_nodes_written_without_labels() {
    let spread = "apiVersion: v1\nkind: Pod\nmetadata: {name: NAME, labels: {app: web}}\nspec:\n  topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}]\n  containers: [{name: c}]\n---\n";
    let nodes = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 2, pods: 10}}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n2}\nstatus: {allocatable: {cpu: 2, pods: 10}}\n---\n";
    let sim = run(&format!(
        "{nodes}{}{}",
        spread.replace("NAME", "a"),
        spread.replace("NAME", "b")
    ));
    let (a, b) = (node_of(&sim, "a"), node_of(&sim, "b"));
    assert!(a.is_some() && b.is_some() && a != b, "{a:?} {b:?}");
}

#[test]
fn a_preemptor_once_bound_keeps_no_nominated_node() {
    let text = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 2, pods: 10}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: low}\nspec: {nodeName: n1, containers: [{name: c, resources: {requests: {cpu: 2}}}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: vip}\nspec: {priorityClassName: high, containers: [{name: c, resources: {requests: {cpu: 2}}}]}\n";
    let sim = run(text);
    assert_eq!(node_of(&sim, "vip").as_deref(), Some("n1"));
    let vip = sim.store().pod(&ObjectKey::pod("default", "vip")).unwrap();
    let nominated = vip
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.clone());
    assert_eq!(nominated, None);
}

#[test]
fn derived_uids_are_stable_uuid_shaped_and_distinct() {
    let a = derive_uid("Pod", "default", "p");
    assert_eq!(a, derive_uid("Pod", "default", "p"));
    assert_ne!(a, derive_uid("Pod", "default", "q"));
    assert_ne!(a, derive_uid("Node", "default", "p"));
    assert_eq!(a.len(), 36);
    assert_eq!(&a[14..15], "8", "version 8: {a}");
}

#[test]
fn a_scheduled_pod_is_bound_running_and_has_an_event() {
    let sim = run(&format!("{NODES}{}", pod("p", "1")));
    let p = sim.store().pod(&ObjectKey::pod("default", "p")).unwrap();
    assert_eq!(node_of(&sim, "p").as_deref(), Some("n1"));
    let status = p.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let cond = &status.conditions.as_ref().unwrap()[0];
    assert_eq!(
        (cond.type_.as_str(), cond.status.as_str()),
        ("PodScheduled", "True")
    );
    assert!(p.metadata.uid.is_some() && p.metadata.creation_timestamp.is_some());
    let events: Vec<_> = sim.store().events().collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason.as_deref(), Some("Scheduled"));
    assert_eq!(
        events[0].metadata.name.as_deref(),
        Some("p.0000000000000001")
    );
    assert_eq!(
        events[0].message.as_deref(),
        Some("Successfully assigned default/p to n1")
    );
    assert_eq!(events[0].involved_object.uid, p.metadata.uid);
}

#[test]
fn an_unschedulable_pod_gets_a_condition_and_stays_pending() {
    let sim = run(&format!("{NODES}{}", pod("big", "3")));
    let p = sim.store().pod(&ObjectKey::pod("default", "big")).unwrap();
    assert_eq!(node_of(&sim, "big"), None);
    let message = pod_scheduled_message(p).unwrap_or_default();
    assert!(
        message.starts_with("0/1 nodes are available: 1 Insufficient cpu."),
        "{message}"
    );
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
}

#[test]
fn a_pod_given_on_a_node_is_running_there_without_the_scheduler() {
    let sim = run(&format!("{NODES}apiVersion: v1\nkind: Pod\nmetadata: {{name: old}}\nspec: {{nodeName: n1, containers: [{{name: c, resources: {{requests: {{cpu: 2}}}}}}]}}\n---\n{}", pod("new", "1")));
    let old = sim.store().pod(&ObjectKey::pod("default", "old")).unwrap();
    assert_eq!(
        old.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    assert_eq!(node_of(&sim, "new"), None, "n1 is full");
}

#[test]
fn a_pod_bound_to_a_missing_node_is_not_running_and_is_warned_about() {
    let bound = |name: &str, node: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec: {{nodeName: {node}, containers: [{{name: c}}]}}\n---\n")
    };
    let phase = |sim: &Simulation, name: &str| {
        sim.store()
            .pod(&ObjectKey::pod("default", name))
            .and_then(|p| p.status.as_ref()?.phase.clone())
    };
    // Written before its node: the node is part of the cluster as found, so it runs.
    let sim = run(&format!("{}{NODES}", bound("early", "n1")));
    assert_eq!(phase(&sim, "early").as_deref(), Some("Running"));
    assert!(sim.log().is_empty(), "{:?}", sim.log());

    let text = format!("{NODES}{}apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: s}}\nspec:\n  steps:\n  - expect: {{pods: [{{name: ghost, node: n9, phase: Pending}}]}}\n  - apply: [{{apiVersion: v1, kind: Node, metadata: {{name: n9}}, status: {{allocatable: {{cpu: 2}}}}}}]\n  - expect: {{pods: [{{name: ghost, node: n9, phase: Running}}]}}\n", bound("ghost", "n9"));
    let sim = run(&text);
    assert_eq!(sim.failed_expectations(), 0, "{:?}", sim.log());
    assert_eq!(phase(&sim, "ghost").as_deref(), Some("Running"));
    assert_eq!(
        sim.log(),
        ["warning: pod default/ghost is bound to node \"n9\", which does not exist: no kubelet admits it, so it stays Pending (until a node of that name is created)"]
    );
}

#[test]
fn priority_comes_from_the_class_or_the_global_default() {
    let classes = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\npreemptionPolicy: Never\n---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: low}\nvalue: 10\nglobalDefault: true\n---\n";
    let sim = run(&format!("{classes}apiVersion: v1\nkind: Pod\nmetadata: {{name: a}}\nspec: {{priorityClassName: high, containers: [{{name: c}}]}}\n---\n{}", pod("b", "1")));
    let a = sim.store().pod(&ObjectKey::pod("default", "a")).unwrap();
    let spec = a.spec.as_ref().unwrap();
    assert_eq!(spec.priority, Some(1000));
    assert_eq!(spec.preemption_policy.as_deref(), Some("Never"));
    let b = sim.store().pod(&ObjectKey::pod("default", "b")).unwrap();
    let spec = b.spec.as_ref().unwrap();
    assert_eq!(spec.priority, Some(10));
    assert_eq!(spec.priority_class_name.as_deref(), Some("low"));
    assert_eq!(
        spec.preemption_policy.as_deref(),
        Some("PreemptLowerPriority")
    );
}

#[test]
fn higher_priority_pods_are_placed_first() {
    let text = format!(
        "{NODES}{}apiVersion: v1\nkind: Pod\nmetadata: {{name: vip}}\nspec: {{priority: 100, containers: [{{name: c, resources: {{requests: {{cpu: 2}}}}}}]}}\n",
        pod("first", "2")
    );
    let sim = run(&text);
    assert_eq!(node_of(&sim, "vip").as_deref(), Some("n1"));
    assert_eq!(node_of(&sim, "first"), None);
}

#[test]
fn a_pod_of_another_scheduler_is_left_alone() {
    let text = format!(
        "{NODES}apiVersion: v1\nkind: Pod\nmetadata: {{name: theirs}}\nspec: {{schedulerName: other, containers: [{{name: c}}]}}\n"
    );
    let sim = run(&text);
    assert_eq!(node_of(&sim, "theirs"), None);
    let p = sim
        .store()
        .pod(&ObjectKey::pod("default", "theirs"))
        .expect("stored");
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    assert!(
        conditions.is_none_or(|c| c.is_empty()),
        "berth writes no condition: {conditions:?}"
    );
    assert!(
        sim.store().events().next().is_none(),
        "and records no event"
    );
}

#[test]
fn a_bind_to_an_already_bound_pod_fails() {
    let mut sim = run(NODES);
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {nodeName: n1, containers: [{name: c}]}\n";
    let input = parse_str("t.yaml", text).unwrap();
    sim.apply_item(&input.items[0].1, true);
    let uid = derive_uid("Pod", "default", "p");
    sim.perform(Effect::Bind {
        pod: ObjectKey::pod("default", "p"),
        uid,
        node: "n2".into(),
        annotations: BTreeMap::new(),
    });
    assert_eq!(node_of(&sim, "p").as_deref(), Some("n1"));
}

#[test]
fn identical_repeated_events_fold_into_a_count() {
    let mut sim = run(NODES);
    let rec = Record {
        involved: ObjectKey::pod("default", "x"),
        uid: String::new(),
        type_: "Warning",
        reason: "FailedScheduling".into(),
        message: "m".into(),
    };
    sim.record(rec.clone());
    sim.record(rec.clone());
    sim.record(Record {
        message: "other".into(),
        ..rec
    });
    let events: Vec<_> = sim.store().events().collect();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].count, Some(2));
}

#[test]
fn a_repeat_after_other_events_folds_into_the_first_as_client_go_correlates() {
    let mut sim = run(NODES);
    let rec = |message: &str, uid: &str| Record {
        involved: ObjectKey::pod("default", "x"),
        uid: uid.into(),
        type_: "Warning",
        reason: "FailedScheduling".into(),
        message: message.into(),
    };
    sim.record(rec("A", "u1"));
    sim.advance(10_000);
    sim.record(rec("B", "u1"));
    sim.advance(10_000);
    sim.record(rec("A", "u1"));
    // The same name and message for a pod re-created with a new UID is another event.
    sim.record(rec("A", "u2"));
    let events: Vec<_> = sim.store().events().collect();
    let summary: Vec<(&str, &str, Option<i32>, String, String)> = events
        .iter()
        .map(|e| {
            let t =
                |t: &Option<berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
                    t.as_ref()
                        .map(|t| rfc3339(t.0.as_millisecond()))
                        .unwrap_or_default()
                };
            (
                e.message.as_deref().unwrap_or(""),
                e.involved_object.uid.as_deref().unwrap_or(""),
                e.count,
                t(&e.first_timestamp),
                t(&e.last_timestamp),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "A",
                "u1",
                Some(2),
                "2024-01-01T00:00:00Z".into(),
                "2024-01-01T00:00:20Z".into()
            ),
            (
                "B",
                "u1",
                Some(1),
                "2024-01-01T00:00:10Z".into(),
                "2024-01-01T00:00:10Z".into()
            ),
            (
                "A",
                "u2",
                Some(1),
                "2024-01-01T00:00:20Z".into(),
                "2024-01-01T00:00:20Z".into()
            ),
        ]
    );
}

#[test]
fn the_event_cache_forgets_the_least_recently_seen() {
    let mut r = Recorder::default();
    let key = |i: usize| EventKey {
        involved: ObjectKey::pod("default", &format!("p{i}")),
        uid: String::new(),
        type_: "Warning",
        reason: "FailedScheduling".into(),
        message: "m".into(),
    };
    for i in 0..EVENT_CACHE_SIZE {
        r.remember(key(i), format!("e{i}"));
    }
    assert_eq!(
        r.seen(&key(0)).as_deref(),
        Some("e0"),
        "0 is now the most recent"
    );
    r.remember(key(EVENT_CACHE_SIZE), "new".into());
    assert_eq!(r.seen(&key(1)), None, "1 was the least recently seen");
    assert_eq!(r.seen(&key(0)).as_deref(), Some("e0"));
    assert_eq!(r.names.len(), EVENT_CACHE_SIZE);
    assert_eq!(r.by_use.len(), EVENT_CACHE_SIZE);
}

#[test]
fn advance_retries_a_pod_once_a_node_is_added() {
    let text = format!("{}apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: s}}\nspec:\n  steps:\n  - advance: 10s\n  - apply: [{{apiVersion: v1, kind: Node, metadata: {{name: n2}}, status: {{allocatable: {{cpu: 4}}}}}}]\n  - advance: 30s\n  - expect: {{pods: [{{name: p, node: n2}}]}}\n", pod("p", "3"));
    let sim = run(&format!("{NODES}{text}"));
    assert_eq!(node_of(&sim, "p").as_deref(), Some("n2"));
    assert_eq!(sim.failed_expectations(), 0, "{:?}", sim.log());
    assert_eq!(rfc3339(sim.now()), "2024-01-01T00:00:40Z");
}

#[test]
fn a_failed_expectation_names_its_step_as_the_file_numbers_it() {
    let text = format!("{NODES}{}apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: s}}\nspec:\n  steps:\n  - advance: 10s\n  - delete: [{{kind: Pod, name: nobody}}]\n  - expect: {{pods: [{{name: p, phase: Failed}}], reservations: [{{name: r, phase: Available}}]}}\n  - {{advance: 5s, expect: {{pods: [{{name: p, message: nope}}]}}}}\n", pod("p", "1"));
    let sim = run(&text);
    assert_eq!(
        sim.log(),
        [
            "warning: spec.steps[1] (delete) of t.yaml: delete Pod default/nobody: not found",
            "expectation failed at spec.steps[2] (expect) of t.yaml (2024-01-01T00:00:10Z): pod default/p: phase: expected \"Failed\", found \"Running\"",
            "expectation failed at spec.steps[2] (expect) of t.yaml (2024-01-01T00:00:10Z): reservation r: expected to exist, found no such reservation",
            "expectation failed at spec.steps[3] (advance, expect) of t.yaml (2024-01-01T00:00:15Z): pod default/p: PodScheduled message: expected one containing \"nope\", found null",
        ]
    );
}

#[test]
fn failed_expectations_are_counted_and_logged() {
    let text = format!("{}apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: s}}\nspec:\n  steps:\n  - expect: {{pods: [{{name: p, node: n9}}, {{name: ghost, node: null}}, {{name: ghost2, node: n1}}]}}\n", pod("p", "1"));
    let sim = run(&format!("{NODES}{text}"));
    assert_eq!(sim.failed_expectations(), 2, "{:?}", sim.log());
    assert_eq!(
        sim.log(),
        [
            "expectation failed at spec.steps[0] (expect) of t.yaml (2024-01-01T00:00:00Z): pod default/p: node: expected \"n9\", found \"n1\"",
            "expectation failed at spec.steps[0] (expect) of t.yaml (2024-01-01T00:00:00Z): pod default/ghost2: expected to exist, found no such pod",
        ]
    );
}
