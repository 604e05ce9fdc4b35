//! The core driven as the cluster adapter drives it: binds in flight while scheduling goes
//! on, bind failures of every class, confirmations before and after the bind's answer, the
//! echo of every write, other schedulers' pods, the initial LIST and re-lists. One test per
//! defect the simulator used to hide (issue 7, section 1); each failed on the core before.

use std::sync::Arc;

use berth_api::nrt::NodeResourceTopology;
use berth_api::reservation::ReservationPhase;
use berth_core::cache::PodState;
use berth_core::reservation::testkit::reservation;
use berth_core::resources::ResourceId;
use berth_core::testing::{node, pod, FakeDriver};
use berth_core::{BindFailure, Config, Effect, Event, Kind, Object, ObjectKey, Profile, Scheduler};
use serde_json::json;

const T0: i64 = 1_704_067_200_000;

fn scheduler() -> Scheduler {
    Scheduler::new(vec![Profile::default_profile()], Config::default())
}

fn apply(s: &mut Scheduler, now: i64, obj: Object) {
    s.handle(now, Event::Applied(obj));
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::pod("default", name)
}

fn drain(s: &mut Scheduler) -> Vec<Effect> {
    std::iter::from_fn(|| s.poll_effect()).collect()
}

/// The binds among `effects`: pod name, uid, node.
fn binds(effects: &[Effect]) -> Vec<(String, String, String)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Bind { pod, uid, node, .. } => {
                Some((pod.name.to_string(), uid.clone(), node.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The pod as the watch shows it once bound to `node`.
fn bound_version(s: &Scheduler, name: &str, node: &str) -> Object {
    let info = s.pod(&key(name)).expect("pod known").info.clone();
    let mut p = (*info.pod).clone();
    p.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
    Object::Pod(Arc::new(p))
}

fn failed(name: &str, node: &str, class: BindFailure) -> Event {
    Event::BindFailed {
        pod: key(name),
        uid: format!("uid-{name}"),
        node: node.to_string(),
        class,
        message: "etcdserver: request timed out".into(),
    }
}

fn state(s: &Scheduler, name: &str) -> Option<PodState> {
    s.pod(&key(name)).map(|e| e.state)
}

fn cpu_requested(s: &Scheduler, node: &str) -> i64 {
    s.node(node).map_or(-1, |n| n.requested[ResourceId::CPU])
}

#[test]
fn a_failed_bind_backs_off_its_own_pod_and_not_the_one_heading_the_queue() {
    let mut s = scheduler();
    apply(
        &mut s,
        T0,
        Object::Node(node("n1").alloc("cpu", "1").build()),
    );
    apply(&mut s, T0, Object::Pod(pod("a").req("cpu", "1").build()));
    s.run_until_idle(T0);
    assert_eq!(binds(&drain(&mut s))[0].0, "a");
    // A higher-priority pod arrives while a's bind is in flight; then a's bind fails.
    apply(
        &mut s,
        T0,
        Object::Pod(pod("high").req("cpu", "1").priority(100).build()),
    );
    s.handle(T0, failed("a", "n1", BindFailure::Transient));
    let effects = drain(&mut s);
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::PodCondition { pod, reason, .. }
            if &*pod.name == "a" && reason == "SchedulerError")),
        "{effects:?}"
    );
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::PodCondition { pod, .. } if &*pod.name == "high")),
        "the pod heading the queue is not touched: {effects:?}"
    );
    // The room a held is free, and the next cycle is high's, not a's.
    assert_eq!(cpu_requested(&s, "n1"), 0);
    s.run_until_idle(T0);
    let placed = binds(&drain(&mut s));
    assert_eq!(placed.first().map(|b| b.0.as_str()), Some("high"));
    assert!(placed.iter().all(|b| b.0 != "a"), "a backs off: {placed:?}");
}

/// The `core_events` fuzz timeouts (`fuzz/corpus/core_events/failed-bind-409-*`): the pod
/// was already bound, the watch had not shown it yet, and each bind was refused with 409.
/// With nothing else to schedule, the failed pod was popped from back-off at once and bound
/// again at the same instant, forever, the watch event that would end it never delivered.
#[test]
fn a_pod_whose_bind_conflicts_waits_out_its_back_off_even_with_nothing_else_to_do() {
    let mut s = scheduler();
    apply(
        &mut s,
        T0,
        Object::Node(node("n1").alloc("cpu", "1").build()),
    );
    apply(&mut s, T0, Object::Pod(pod("a").req("cpu", "1").build()));
    s.run_until_idle(T0);
    assert_eq!(binds(&drain(&mut s)).len(), 1);
    s.handle(T0, failed("a", "n1", BindFailure::Conflict));
    drain(&mut s);
    s.run_until_idle(T0);
    let effects = drain(&mut s);
    assert!(
        binds(&effects).is_empty(),
        "not bound again at the same instant: {effects:?}"
    );
    let due = s.poll_timeout().expect("its back-off ends at some time");
    assert!(due > T0, "the back-off ends later: {due}");
    // The watch catches up meanwhile: the pod is bound, and nothing is tried again.
    let a = bound_version(&s, "a", "n1");
    apply(&mut s, T0, a);
    assert_eq!(state(&s, "a"), Some(PodState::Bound));
    s.handle_timeout(due);
    s.run_until_idle(due);
    assert!(binds(&drain(&mut s)).is_empty());
}

#[test]
fn a_failed_bind_releases_the_numa_hold_and_a_deleted_pod_leaves_none() {
    let mut s = scheduler();
    apply(
        &mut s,
        T0,
        Object::Node(node("n1").alloc("cpu", "8").alloc("memory", "64Gi").build()),
    );
    let nrt: NodeResourceTopology = NodeResourceTopology::from_any_version(json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": "n1"},
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"},
                       {"name": "topologyManagerScope", "value": "container"}],
        "zones": [{"name": "node-0", "type": "Node", "resources": [
            {"name": "cpu", "capacity": "8", "allocatable": "8", "available": "8"},
            {"name": "memory", "capacity": "64Gi", "allocatable": "64Gi", "available": "64Gi"}]}],
    }))
    .expect("valid NRT");
    apply(&mut s, T0, Object::NodeResourceTopology(Arc::new(nrt)));
    let guaranteed = |name: &str| {
        pod(name)
            .req("cpu", "2")
            .limit("cpu", "2")
            .req("memory", "1Gi")
            .limit("memory", "1Gi")
            .build()
    };
    apply(&mut s, T0, Object::Pod(guaranteed("g")));
    s.run_until_idle(T0);
    assert_eq!(binds(&drain(&mut s)).len(), 1);
    assert_eq!(s.numa().cache().assumed_count("n1"), 1);
    s.handle(T0, failed("g", "n1", BindFailure::Transient));
    assert_eq!(
        s.numa().cache().assumed_count("n1"),
        0,
        "Unreserve gave the hold back"
    );
    s.handle(T0, Event::Deleted(key("g")));
    assert_eq!(s.numa().cache().assumed_count("n1"), 0);
}

#[test]
fn a_bind_is_confirmed_by_the_watch_before_or_after_its_answer() {
    let mut s = scheduler();
    apply(
        &mut s,
        T0,
        Object::Node(node("n1").alloc("cpu", "4").build()),
    );
    for name in ["a", "b", "c"] {
        apply(&mut s, T0, Object::Pod(pod(name).req("cpu", "1").build()));
    }
    s.run_until_idle(T0);
    // Three binds in flight at once, each pod holding its room meanwhile.
    assert_eq!(binds(&drain(&mut s)).len(), 3);
    assert_eq!(s.binds_in_flight().count(), 3);
    assert_eq!(cpu_requested(&s, "n1"), 3000);
    // a: the watch first, then a late (lost-answer) failure, which is stale.
    let a = bound_version(&s, "a", "n1");
    apply(&mut s, T0, a);
    s.handle(T0, failed("a", "n1", BindFailure::Transient));
    assert_eq!(state(&s, "a"), Some(PodState::Bound));
    // b: the failure first (a time-out after the write), then the watch shows it bound.
    s.handle(T0, failed("b", "n1", BindFailure::Transient));
    assert_eq!(state(&s, "b"), Some(PodState::Pending));
    let b = bound_version(&s, "b", "n1");
    apply(&mut s, T0, b);
    assert_eq!(state(&s, "b"), Some(PodState::Bound));
    // c: still in flight, and a status update meanwhile keeps it assumed.
    let c = s.pod(&key("c")).map(|e| e.info.pod.clone());
    let mut c = (*c.expect("c known")).clone();
    c.metadata.resource_version = Some("99".into());
    apply(&mut s, T0, Object::Pod(Arc::new(c)));
    assert_eq!(state(&s, "c"), Some(PodState::Assumed));
    assert_eq!(cpu_requested(&s, "n1"), 3000, "each pod counted once");
    s.run_until_idle(T0);
    let effects = drain(&mut s);
    assert!(
        binds(&effects).is_empty(),
        "nobody bound twice: {effects:?}"
    );
    assert_eq!(
        s.binds_in_flight()
            .map(|(k, _)| k.name.to_string())
            .collect::<Vec<_>>(),
        ["c"]
    );
}

#[test]
fn a_stale_bind_failure_of_an_earlier_incarnation_is_ignored() {
    let mut s = scheduler();
    apply(
        &mut s,
        T0,
        Object::Node(node("n1").alloc("cpu", "2").build()),
    );
    apply(&mut s, T0, Object::Pod(pod("p").req("cpu", "1").build()));
    s.run_until_idle(T0);
    let first = binds(&drain(&mut s));
    assert_eq!(first[0].1, "uid-p", "the Binding carries the pod's UID");
    // Deleted and created again under the same name while the bind was in flight.
    s.handle(T0, Event::Deleted(key("p")));
    apply(
        &mut s,
        T0,
        Object::Pod(
            pod("p")
                .req("cpu", "1")
                .meta("uid", json!("uid-p2"))
                .build(),
        ),
    );
    s.run_until_idle(T0);
    let second = binds(&drain(&mut s));
    assert_eq!(second[0].1, "uid-p2");
    // The old bind's conflict comes back: nothing happens to the new incarnation.
    s.handle(T0, failed("p", "n1", BindFailure::Conflict));
    let effects = drain(&mut s);
    assert!(effects.is_empty(), "{effects:?}");
    assert_eq!(state(&s, "p"), Some(PodState::Assumed));
    assert_eq!(cpu_requested(&s, "n1"), 1000);
}

#[test]
fn a_pod_of_another_scheduler_is_never_scheduled_but_counts_once_bound() {
    let mut s = scheduler();
    apply(
        &mut s,
        T0,
        Object::Node(node("n1").alloc("cpu", "2").build()),
    );
    let theirs = pod("theirs")
        .req("cpu", "2")
        .spec("schedulerName", json!("other-scheduler"));
    apply(&mut s, T0, Object::Pod(theirs.build()));
    s.run_until_idle(T0);
    let effects = drain(&mut s);
    assert!(effects.is_empty(), "left alone, no condition: {effects:?}");
    assert_eq!(s.stats().attempts, 0);
    // Its scheduler binds it: it takes the room.
    apply(&mut s, T0, Object::Pod(theirs.node_name("n1").build()));
    assert_eq!(cpu_requested(&s, "n1"), 2000);
    apply(&mut s, T0, Object::Pod(pod("ours").req("cpu", "1").build()));
    s.run_until_idle(T0);
    assert!(binds(&drain(&mut s)).is_empty());
}

#[test]
fn the_echo_of_a_condition_patch_leaves_the_pod_in_the_unschedulable_pool() {
    let mut d = FakeDriver::synchronous();
    d.apply(Object::Node(node("n1").alloc("cpu", "1").build()));
    d.apply(Object::Pod(pod("big").req("cpu", "2").build()));
    d.settle();
    assert_eq!(
        d.condition("big").map(|c| c.0).as_deref(),
        Some("Unschedulable")
    );
    // The driver echoed the condition patch, and the scheduler ran after it: one cycle.
    assert_eq!(d.scheduler().stats().attempts, 1);
    // A status-only or resourceVersion-only change does not retry it either.
    d.set_phase(&key("big"), "Pending");
    d.modify(&key("big"), |o| {
        o.meta_mut().resource_version = Some("12345".into());
    });
    d.settle();
    assert_eq!(d.scheduler().stats().attempts, 1);
    assert_eq!(d.scheduler().stats().replayed, 0);
    // A change the scheduler reads does (and fails the same way).
    d.modify(&key("big"), |o| {
        o.meta_mut()
            .labels
            .get_or_insert_with(Default::default)
            .insert("tier".into(), "web".into());
    });
    d.settle();
    assert_eq!(
        d.scheduler().stats().attempts + d.scheduler().stats().replayed,
        2
    );
    assert!(d.violations().is_empty(), "{:?}", d.violations());
}

#[test]
fn nothing_is_scheduled_or_failed_before_every_kind_is_listed() {
    let config = Config {
        seed: 1,
        wait_for_sync: vec![Kind::Node, Kind::Pod, Kind::Reservation],
    };
    let mut s = Scheduler::new(vec![Profile::default_profile()], config);
    assert!(!s.synced());
    for k in [Kind::Reservation, Kind::Pod, Kind::Node] {
        s.handle(T0, Event::ListStarted(k));
    }
    // A restarted scheduler lists an Available reservation before the node it is on.
    let mut r = reservation("r")
        .req("cpu", "1")
        .owner_label("app", "web")
        .build();
    r.status = serde_json::from_value(json!({
        "phase": "Available", "nodeName": "n1", "allocatable": {"cpu": "1"},
    }))
    .expect("status");
    apply(&mut s, T0, Object::Reservation(Arc::new(r)));
    s.handle(T0, Event::Listed(Kind::Reservation));
    apply(&mut s, T0, Object::Pod(pod("p").req("cpu", "1").build()));
    s.handle(T0, Event::Listed(Kind::Pod));
    assert_eq!(s.run_until_idle(T0), 0);
    assert_eq!(s.poll_timeout(), None);
    s.handle_timeout(T0 + 365 * 24 * 3600 * 1000);
    let effects = drain(&mut s);
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Bind { .. })
            || matches!(e, Effect::ReservationStatus { status, .. }
                if status.phase == Some(ReservationPhase::Failed))),
        "{effects:?}"
    );
    apply(
        &mut s,
        T0,
        Object::Node(node("n1").alloc("cpu", "4").build()),
    );
    assert!(!s.synced());
    s.handle(T0, Event::Listed(Kind::Node));
    assert!(s.synced());
    s.run_until_idle(T0);
    drain(&mut s);
    let r = s.reservation("r").expect("kept");
    assert_eq!(r.phase, ReservationPhase::Available);
    let n1 = s.node("n1").expect("n1");
    assert_eq!(
        n1.reserved[ResourceId::CPU],
        1000,
        "the reservation holds on n1"
    );
    assert_eq!(state(&s, "p"), Some(PodState::Assumed));
}

#[test]
fn a_relist_deletes_what_it_no_longer_returns() {
    let mut s = scheduler();
    apply(
        &mut s,
        T0,
        Object::Node(node("n1").alloc("cpu", "2").build()),
    );
    for name in ["a", "b"] {
        apply(
            &mut s,
            T0,
            Object::Pod(pod(name).req("cpu", "1").node_name("n1").build()),
        );
    }
    apply(
        &mut s,
        T0,
        Object::Pod(pod("waiting").req("cpu", "1").build()),
    );
    s.run_until_idle(T0);
    drain(&mut s);
    assert_eq!(state(&s, "waiting"), Some(PodState::Pending));
    // The pod watch broke; b was deleted meanwhile. The re-list returns a and waiting.
    s.handle(T0, Event::ListStarted(Kind::Pod));
    apply(
        &mut s,
        T0,
        Object::Pod(pod("a").req("cpu", "1").node_name("n1").build()),
    );
    apply(
        &mut s,
        T0,
        Object::Pod(pod("waiting").req("cpu", "1").build()),
    );
    assert!(s.pod(&key("b")).is_some(), "not before the LIST ends");
    s.handle(T0, Event::Listed(Kind::Pod));
    assert!(s.pod(&key("b")).is_none());
    s.run_until_idle(T0 + 1);
    let placed = binds(&drain(&mut s));
    assert_eq!(placed.first().map(|b| b.0.as_str()), Some("waiting"));
    // Other kinds too: a node the re-list of nodes misses is gone.
    s.handle(T0, Event::ListStarted(Kind::Node));
    s.handle(T0, Event::Listed(Kind::Node));
    assert_eq!(s.node_count(), 0);
}

#[test]
fn an_assumed_pod_of_a_deleted_node_does_not_come_back_with_the_name() {
    let mut s = scheduler();
    apply(
        &mut s,
        T0,
        Object::Node(node("n1").alloc("cpu", "2").build()),
    );
    apply(&mut s, T0, Object::Pod(pod("a").req("cpu", "1").build()));
    s.run_until_idle(T0);
    assert_eq!(binds(&drain(&mut s)).len(), 1);
    s.handle(T0, Event::Deleted(ObjectKey::cluster(Kind::Node, "n1")));
    s.handle(T0, failed("a", "n1", BindFailure::NotFound));
    apply(
        &mut s,
        T0,
        Object::Node(node("n1").alloc("cpu", "2").build()),
    );
    assert_eq!(cpu_requested(&s, "n1"), 0, "a is not on the new n1");
}

#[test]
fn reservation_writes_carry_their_preconditions_and_pass_them() {
    let mut d = FakeDriver::synchronous();
    d.apply(Object::Node(node("n1").alloc("cpu", "4").build()));
    d.apply(Object::Reservation(Arc::new(
        reservation("r")
            .req("cpu", "1")
            .owner_label("app", "web")
            .ttl("1m")
            .build(),
    )));
    d.settle();
    let r = d.reservation("r").expect("r").clone();
    assert_eq!(
        r.status.as_ref().and_then(|s| s.phase.clone()),
        Some(ReservationPhase::Available)
    );
    // Expired after a minute, collected a day later: the delete's uid and resourceVersion
    // preconditions are those of the object as last written, so the API server accepts it.
    d.advance(61_000);
    assert_eq!(
        d.reservation("r")
            .and_then(|r| r.status.as_ref()?.phase.clone()),
        Some(ReservationPhase::Failed)
    );
    d.advance(24 * 3600 * 1000 + 60_000);
    assert!(d.reservation("r").is_none(), "collected");
    // A reservation created again under the name is not touched by writes for the old one.
    assert!(d.violations().is_empty(), "{:?}", d.violations());
}

#[test]
fn a_namespace_selector_selects_on_the_labels_of_the_namespaces_fed() {
    // `solo` refuses nodes running pods labelled app=db in namespaces of team t1. n1 has
    // more room, so it is the node solo takes unless a db pod of t1 runs there.
    let ns = |name: &str, team: &str| {
        let n: berth_api::k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"team": team}}}))
                .expect("namespace");
        Object::Namespace(Arc::new(n))
    };
    let placed_with = |namespaces: bool| {
        let mut s = scheduler();
        if namespaces {
            apply(&mut s, T0, ns("red", "t1"));
            apply(&mut s, T0, ns("blue", "t2"));
        }
        for (n, cpu) in [("n1", "8"), ("n2", "4")] {
            apply(&mut s, T0, Object::Node(node(n).alloc("cpu", cpu).build()));
        }
        for (namespace, n) in [("red", "n1"), ("blue", "n2")] {
            let db = pod("db")
                .namespace(namespace)
                .label("app", "db")
                .node_name(n);
            apply(&mut s, T0, Object::Pod(db.build()));
        }
        let solo = pod("solo").req("cpu", "1").spec(
            "affinity",
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"app": "db"}},
                "namespaceSelector": {"matchLabels": {"team": "t1"}}}]}}),
        );
        apply(&mut s, T0, Object::Pod(solo.build()));
        s.run_until_idle(T0);
        binds(&drain(&mut s)).first().map(|b| b.2.clone())
    };
    assert_eq!(placed_with(true).as_deref(), Some("n2"), "red is t1's");
    // Namespaces the core was never told about carry only their name label.
    assert_eq!(placed_with(false).as_deref(), Some("n1"));
}
