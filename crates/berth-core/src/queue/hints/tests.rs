use std::sync::Arc;

use super::*;
use crate::effect::Effect;
use crate::event::Event;
use crate::object::Object;
use crate::plugins::names;
use crate::rng::SplitMix64;
use crate::testing::{node, pod, DriverConfig, FakeDriver, Profiles};
use crate::time::Time;
use crate::{Config, Profile, Scheduler};

const NRT: &str = names::NODE_RESOURCE_TOPOLOGY_MATCH;
const FIT: &str = names::NODE_RESOURCES_FIT;

/// A cluster with a 4-CPU node `big`, a 1-CPU node `small` and a pending 2-CPU pod `p`.
fn cluster() -> (Cluster, NodeIdx, NodeIdx, ObjectKey) {
    let mut cx = Cluster::default();
    let big = cx
        .apply_node(node("big").alloc("cpu", "4").alloc("memory", "8Gi").build())
        .unwrap();
    let small = cx
        .apply_node(
            node("small")
                .alloc("cpu", "1")
                .alloc("memory", "8Gi")
                .build(),
        )
        .unwrap();
    let info = pod("p")
        .req("cpu", "2")
        .build_info_with(&mut cx.cache.names);
    let key = info.key.clone();
    cx.cache.apply_pod(Arc::new(info));
    (cx, big, small, key)
}

/// NodeResourcesFit's node check applies (it is in every profile); NUMA's does not.
const BOTH: &[&str] = &[FIT];

/// What the default profile's plugins registered, with the node checks of `checked` only.
fn hints(checked: &[&str]) -> QueueingHints {
    QueueingHints::for_profiles(&[Profile::default_profile()]).checking_only(checked)
}

/// `hints(checked)`'s verdict.
fn worth_requeuing(
    cx: &Cluster,
    checked: &[&str],
    event: &ClusterEvent,
    key: &ObjectKey,
    plugins: &[&'static str],
) -> bool {
    hints(checked).worth_requeuing(cx, event, key, plugins)
}

#[test]
fn each_event_moves_only_pods_a_plugin_it_concerns_rejected() {
    let (cx, big, _, key) = cluster();
    let cases: &[(&str, ClusterEvent, &[&'static str], bool)] = &[
        (
            "numa flush, numa rejection",
            ClusterEvent::topology(big),
            &[NRT],
            true,
        ),
        (
            "numa flush, resources",
            ClusterEvent::topology(big),
            &[FIT],
            false,
        ),
        (
            "numa flush, taint",
            ClusterEvent::topology(big),
            &[names::TAINT_TOLERATION],
            false,
        ),
        (
            "numa flush, reservation",
            ClusterEvent::topology(big),
            &[names::RESERVATION],
            false,
        ),
        (
            "numa flush, no plugin",
            ClusterEvent::topology(big),
            &[],
            false,
        ),
        (
            "pod added, resources",
            ClusterEvent::assigned_pod_added(Some(big)),
            &[FIT],
            false,
        ),
        (
            "pod added, affinity",
            ClusterEvent::assigned_pod_added(Some(big)),
            &[names::INTER_POD_AFFINITY],
            true,
        ),
        (
            "pod added, spread",
            ClusterEvent::assigned_pod_added(Some(big)),
            &[names::POD_TOPOLOGY_SPREAD],
            true,
        ),
        (
            "pod deleted, resources",
            ClusterEvent::assigned_pod_deleted(Some(big)),
            &[FIT],
            true,
        ),
        (
            "pod deleted, ports",
            ClusterEvent::assigned_pod_deleted(Some(big)),
            &[names::NODE_PORTS],
            true,
        ),
        (
            "pod deleted, node affinity",
            ClusterEvent::assigned_pod_deleted(Some(big)),
            &[names::NODE_AFFINITY],
            false,
        ),
        (
            "labels, node affinity",
            ClusterEvent::node_updated(big, kind::NODE_LABEL),
            &[names::NODE_AFFINITY],
            true,
        ),
        (
            "labels, taints",
            ClusterEvent::node_updated(big, kind::NODE_LABEL),
            &[names::TAINT_TOLERATION],
            false,
        ),
        (
            "taints, unschedulable",
            ClusterEvent::node_updated(big, kind::NODE_TAINT),
            &[names::NODE_UNSCHEDULABLE],
            true,
        ),
        (
            "allocatable, resources",
            ClusterEvent::node_updated(big, kind::NODE_ALLOCATABLE),
            &[FIT],
            true,
        ),
        (
            "allocatable, node affinity",
            ClusterEvent::node_updated(big, kind::NODE_ALLOCATABLE),
            &[names::NODE_AFFINITY],
            false,
        ),
        (
            "nothing read changed",
            ClusterEvent::node_updated(big, 0),
            &[FIT],
            false,
        ),
        (
            "node added, anything",
            ClusterEvent::node_added(big),
            &[names::NODE_NAME, FIT],
            true,
        ),
        (
            "node deleted, spread",
            ClusterEvent::node_deleted(),
            &[names::POD_TOPOLOGY_SPREAD],
            true,
        ),
        (
            "node deleted, resources",
            ClusterEvent::node_deleted(),
            &[FIT],
            false,
        ),
        (
            "reservation, resources",
            ClusterEvent::reservation(),
            &[FIT],
            true,
        ),
        (
            "reservation, taints",
            ClusterEvent::reservation(),
            &[names::TAINT_TOLERATION],
            false,
        ),
        (
            "claim, volumes",
            ClusterEvent::pvc(),
            &[names::VOLUME_RESTRICTIONS],
            true,
        ),
        ("claim, resources", ClusterEvent::pvc(), &[FIT], false),
        (
            "csinode, limits",
            ClusterEvent::csi_node(),
            &[names::NODE_VOLUME_LIMITS],
            true,
        ),
        (
            "unknown plugin, any event",
            ClusterEvent::pvc(),
            &["SomeoneElses"],
            true,
        ),
        ("no plugin, any event", ClusterEvent::pvc(), &[], true),
        (
            "one of several plugins",
            ClusterEvent::node_updated(big, kind::NODE_LABEL),
            &[FIT, names::NODE_AFFINITY],
            true,
        ),
    ];
    for (name, event, plugins, want) in cases {
        let got = worth_requeuing(&cx, &[], event, &key, plugins);
        assert_eq!(got, *want, "{name}");
    }
}

#[test]
fn a_node_scoped_event_skips_pods_that_node_cannot_hold() {
    let (cx, big, small, key) = cluster();
    let cases: &[(&str, ClusterEvent, &[&'static str], bool)] = &[
        (
            "room on the node",
            ClusterEvent::assigned_pod_deleted(Some(big)),
            &[FIT],
            true,
        ),
        (
            "no room on the node",
            ClusterEvent::assigned_pod_deleted(Some(small)),
            &[FIT],
            false,
        ),
        (
            "no room, rejected elsewhere by taints too",
            ClusterEvent::node_updated(small, kind::NODE_TAINT),
            &[FIT, names::TAINT_TOLERATION],
            false,
        ),
        (
            "no room, node unknown",
            ClusterEvent::assigned_pod_deleted(None),
            &[FIT],
            true,
        ),
        (
            "no room, but spread reads other nodes",
            ClusterEvent::assigned_pod_deleted(Some(small)),
            &[FIT, names::POD_TOPOLOGY_SPREAD],
            true,
        ),
        (
            "no room, numa flush, resources rejected too",
            ClusterEvent::topology(small),
            &[NRT, FIT],
            false,
        ),
        // Nothing yet says resources block the pod: skipping now would leave it out when
        // the node grows, which only NodeResourcesFit hears about.
        (
            "no room, numa flush, resources not rejected",
            ClusterEvent::topology(small),
            &[NRT],
            true,
        ),
        (
            "no room, node added, only a cordon rejected",
            ClusterEvent::node_added(small),
            &[names::NODE_UNSCHEDULABLE],
            true,
        ),
        (
            "no room, node added, resources rejected too",
            ClusterEvent::node_added(small),
            &[names::NODE_UNSCHEDULABLE, FIT],
            false,
        ),
    ];
    for (name, event, plugins, want) in cases {
        assert_eq!(
            worth_requeuing(&cx, BOTH, event, &key, plugins),
            *want,
            "{name}"
        );
    }
    // Without NodeResourcesFit in every profile size says nothing.
    let ev = ClusterEvent::assigned_pod_deleted(Some(small));
    assert!(worth_requeuing(&cx, &[], &ev, &key, &[FIT]));
}

#[test]
fn a_full_pod_slot_is_no_room() {
    let mut cx = Cluster::default();
    let n = cx
        .apply_node(node("n").alloc("cpu", "4").alloc("pods", "1").build())
        .unwrap();
    let running = pod("running")
        .node_name("n")
        .build_info_with(&mut cx.cache.names);
    cx.cache.apply_pod(Arc::new(running));
    let info = pod("p")
        .req("cpu", "1")
        .build_info_with(&mut cx.cache.names);
    let key = info.key.clone();
    cx.cache.apply_pod(Arc::new(info));
    let ev = ClusterEvent::node_updated(n, kind::NODE_LABEL);
    assert!(!worth_requeuing(
        &cx,
        BOTH,
        &ev,
        &key,
        &[names::NODE_AFFINITY, FIT]
    ));
}

#[test]
fn node_change_names_what_plugins_read() {
    let base = || node("n").alloc("cpu", "2").label("zone", "a");
    let cases: Vec<(&str, crate::testing::NodeBuilder, u32)> = vec![
        ("same object", base(), 0),
        ("annotation only", base().annotation("x", "y"), 0),
        ("more cpu", base().alloc("cpu", "4"), kind::NODE_ALLOCATABLE),
        ("less cpu", base().alloc("cpu", "1"), kind::NODE_ALLOCATABLE),
        (
            "pod capacity",
            base().alloc("pods", "5"),
            kind::NODE_ALLOCATABLE,
        ),
        ("label", base().label("zone", "b"), kind::NODE_LABEL),
        (
            "taint",
            base().taint("k", "v", "NoSchedule"),
            kind::NODE_TAINT,
        ),
        ("cordon", base().unschedulable(), kind::NODE_TAINT),
        (
            "label and cpu",
            base().label("disk", "ssd").alloc("cpu", "8"),
            kind::NODE_LABEL | kind::NODE_ALLOCATABLE,
        ),
    ];
    let before = NodeBefore::of(&base().build_info());
    for (name, after, want) in cases {
        assert_eq!(node_change(&before, &after.build_info()), want, "{name}");
    }
}

#[test]
fn the_random_generator_replays_draws_by_position() {
    let mut a = SplitMix64::new(42);
    let mut b = SplitMix64::new(42);
    let at = a.position();
    a.below(7);
    a.below(1000);
    b.advance(a.position().wrapping_sub(at));
    assert_eq!(a.next_u64(), b.next_u64());
}

fn drain(s: &mut Scheduler) -> Vec<Effect> {
    std::iter::from_fn(|| s.poll_effect()).collect()
}

fn scheduler() -> Scheduler {
    Scheduler::new(vec![Profile::default_profile()], Config::default())
}

/// A synchronous fake cluster at time 0.
fn driver() -> FakeDriver {
    FakeDriver::new(
        Profiles::default_profile(),
        Config::default(),
        DriverConfig::default(),
        0,
    )
}

/// Settles at `now`.
fn run(d: &mut FakeDriver, now: Time) {
    d.set_now(now);
    d.settle();
}

#[test]
fn a_label_that_makes_a_pod_fit_schedules_it_at_once() {
    let mut d = driver();
    let n = || node("n").alloc("cpu", "2");
    d.apply(Object::Node(n().build()));
    let p = pod("p").spec("nodeSelector", serde_json::json!({"disk": "ssd"}));
    d.apply(Object::Pod(p.build()));
    run(&mut d, 0);
    assert_eq!(d.bound("p"), None);
    // A change no plugin reads runs no cycle; the label does, at once.
    let attempts = d.scheduler().counters.attempts;
    d.apply(Object::Node(n().annotation("a", "b").build()));
    run(&mut d, 1);
    assert_eq!(d.scheduler().counters.attempts, attempts);
    d.apply(Object::Node(n().label("disk", "ssd").build()));
    run(&mut d, 2);
    assert_eq!(d.bound("p").as_deref(), Some("n"));
}

#[test]
fn a_pod_leaving_a_node_too_small_for_the_waiting_pod_runs_no_cycle() {
    let mut d = driver();
    d.apply(Object::Node(node("big").alloc("cpu", "4").build()));
    d.apply(Object::Node(node("small").alloc("cpu", "1").build()));
    for (name, n) in [("a", "big"), ("b", "small")] {
        d.apply(Object::Pod(pod(name).req("cpu", "1").node_name(n).build()));
    }
    d.apply(Object::Pod(pod("p").req("cpu", "4").build()));
    run(&mut d, 0);
    assert_eq!(d.bound("p"), None);
    let attempts = d.scheduler().counters.attempts;
    d.delete(&ObjectKey::pod("default", "b"));
    run(&mut d, 1);
    assert_eq!(
        d.scheduler().counters.attempts,
        attempts,
        "small cannot hold 4 CPUs"
    );
    d.delete(&ObjectKey::pod("default", "a"));
    run(&mut d, 2);
    assert_eq!(d.bound("p").as_deref(), Some("big"));
}

#[test]
fn a_failed_bind_frees_the_room_for_a_waiting_pod() {
    // The scheduler driven by hand: the bind is left in flight to fail.
    let mut s = scheduler();
    s.handle(
        0,
        Event::Applied(Object::Node(node("n").alloc("cpu", "1").build())),
    );
    s.handle(
        0,
        Event::Applied(Object::Pod(pod("a").req("cpu", "1").build())),
    );
    s.handle(
        0,
        Event::Applied(Object::Pod(pod("b").req("cpu", "1").build())),
    );
    s.run_until_idle(0);
    let effects = drain(&mut s);
    let first = effects
        .iter()
        .find_map(|e| match e {
            Effect::Bind { pod, .. } => Some(pod.clone()),
            _ => None,
        })
        .unwrap();
    let other = if &*first.name == "a" { "b" } else { "a" };
    // The bind fails (the pod was deleted meanwhile); the other pod takes the room.
    s.handle(1, Event::Deleted(first.clone()));
    s.handle(
        1,
        Event::BindFailed {
            uid: format!("uid-{}", first.name),
            pod: first,
            node: "n".into(),
            class: crate::BindFailure::NotFound,
            message: "gone".into(),
        },
    );
    s.run_until_idle(1);
    let placed: Vec<String> = drain(&mut s)
        .iter()
        .filter_map(|e| match e {
            Effect::Bind { pod, node, .. } => Some(format!("{}@{node}", pod.name)),
            _ => None,
        })
        .collect();
    assert_eq!(placed, [format!("{other}@n")]);
}

#[test]
fn a_bind_failure_alone_requeues_pods_waiting_for_its_room() {
    let mut s = scheduler();
    s.handle(
        0,
        Event::Applied(Object::Node(node("n").alloc("cpu", "1").build())),
    );
    s.handle(
        0,
        Event::Applied(Object::Pod(pod("a").req("cpu", "1").build())),
    );
    s.run_until_idle(0);
    drain(&mut s);
    s.handle(
        0,
        Event::Applied(Object::Pod(pod("b").req("cpu", "1").build())),
    );
    s.run_until_idle(0);
    drain(&mut s);
    let attempts = s.counters.attempts;
    s.handle(
        1,
        Event::BindFailed {
            pod: ObjectKey::pod("default", "a"),
            uid: "uid-a".into(),
            node: "n".into(),
            class: crate::BindFailure::Transient,
            message: "timeout".into(),
        },
    );
    s.run_until_idle(1);
    // a is retried after its error, and b, out of the pool, tries the room too.
    assert_eq!(s.counters.attempts, attempts + 2);
}

#[test]
fn a_retry_with_nothing_changed_runs_no_cycle_and_says_nothing_new() {
    let mut d = driver();
    d.apply(Object::Node(node("n").alloc("cpu", "2").build()));
    for (name, priority) in [("low", 0), ("high", 100)] {
        let p = pod(name).req("cpu", "1").node_name("n").priority(priority);
        d.apply(Object::Pod(p.build()));
    }
    // Preemption runs a dry run (a lower-priority pod exists) and finds it is no help.
    d.apply(Object::Pod(pod("p").req("cpu", "2").priority(10).build()));
    run(&mut d, 0);
    let attempts = d.scheduler().counters.attempts;
    let events = d.events().len();
    let condition = d.condition("p");
    let mut now = 0;
    for _ in 0..3 {
        now = d.scheduler().poll_timeout().unwrap();
        d.set_now(now);
        d.scheduler_mut().handle_timeout(now);
        run(&mut d, now);
        assert_eq!(d.events().len(), events, "nothing new is said");
        assert_eq!(d.condition("p"), condition);
    }
    assert_eq!(d.scheduler().counters.attempts, attempts);
    assert_eq!(d.scheduler().counters.replayed, 3);
    // Any input makes the next retry a real cycle.
    d.apply(Object::Pod(pod("other").node_name("n").build()));
    run(&mut d, now);
    let t = d.scheduler().poll_timeout().unwrap();
    d.set_now(t);
    d.scheduler_mut().handle_timeout(t);
    run(&mut d, t);
    assert_eq!(d.scheduler().counters.attempts, attempts + 1);
}

#[test]
fn a_pod_skipped_for_a_small_new_node_is_retried_when_that_node_grows() {
    // p is rejected only by the cordon on `cordoned`; `small` arrives too small for it
    // (skipping p then is right only because the later growth still reaches it).
    let mut d = driver();
    let cordoned = node("cordoned").alloc("cpu", "4").unschedulable();
    d.apply(Object::Node(cordoned.build()));
    d.apply(Object::Pod(pod("p").req("cpu", "2").build()));
    run(&mut d, 0);
    d.apply(Object::Node(node("small").alloc("cpu", "1").build()));
    run(&mut d, 1);
    assert_eq!(d.bound("p"), None);
    d.apply(Object::Node(node("small").alloc("cpu", "2").build()));
    run(&mut d, 2);
    assert_eq!(d.bound("p").as_deref(), Some("small"));
}

#[test]
fn storage_events_move_pods_the_volume_plugins_rejected_as_their_hints_say() {
    let mut cx = Cluster::default();
    let info = pod("db")
        .spec(
            "volumes",
            serde_json::json!([
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "inline", "csi": {"driver": "inline.csi.example.com"}},
            ]),
        )
        .build_info_with(&mut cx.cache.names);
    let key = info.key.clone();
    cx.cache.apply_pod(Arc::new(info));
    let vb: &[&'static str] = &[names::VOLUME_BINDING];
    let vz: &[&'static str] = &[names::VOLUME_ZONE];
    let claim = |ns: &str, name: &str| {
        ClusterEvent::claim(ObjectKey::new(Kind::PersistentVolumeClaim, ns, name))
    };
    let cases: Vec<(&str, ClusterEvent, &[&'static str], bool)> = vec![
        ("its claim, binding", claim("default", "data"), vb, true),
        ("its claim, zone", claim("default", "data"), vz, true),
        (
            "its ephemeral claim, binding",
            claim("default", "db-scratch"),
            vb,
            true,
        ),
        (
            "its ephemeral claim, zone (not read)",
            claim("default", "db-scratch"),
            vz,
            false,
        ),
        ("another claim", claim("default", "other"), vb, false),
        (
            "same name, other namespace",
            claim("apps", "data"),
            vb,
            false,
        ),
        (
            "any volume, binding",
            ClusterEvent::storage(kind::PV),
            vb,
            true,
        ),
        (
            "a volume's labels unchanged, zone",
            ClusterEvent::storage(kind::PV),
            vz,
            false,
        ),
        (
            "a volume's zone, zone",
            ClusterEvent::storage(kind::PV | kind::PV_TOPOLOGY),
            vz,
            true,
        ),
        (
            "class allowedTopologies, binding",
            ClusterEvent::storage(kind::STORAGE_CLASS),
            vb,
            true,
        ),
        (
            "class allowedTopologies, zone",
            ClusterEvent::storage(kind::STORAGE_CLASS),
            vz,
            false,
        ),
        (
            "new WFFC class, zone",
            ClusterEvent::storage(kind::STORAGE_CLASS | kind::STORAGE_CLASS_WFFC),
            vz,
            true,
        ),
        (
            "capacity grew, binding",
            ClusterEvent::storage(kind::CSI_STORAGE_CAPACITY),
            vb,
            true,
        ),
        (
            "capacity grew, restrictions",
            ClusterEvent::storage(kind::CSI_STORAGE_CAPACITY),
            &[names::VOLUME_RESTRICTIONS],
            false,
        ),
        (
            "csinode without migration change, binding",
            ClusterEvent::csi_node(),
            vb,
            false,
        ),
        (
            "csinode migration change, binding",
            ClusterEvent::storage(kind::CSI_NODE | kind::CSI_NODE_MIGRATION),
            vb,
            true,
        ),
        (
            "its inline driver",
            ClusterEvent::csi_driver("inline.csi.example.com"),
            vb,
            true,
        ),
        (
            "another driver",
            ClusterEvent::csi_driver("other.csi.example.com"),
            vb,
            false,
        ),
        (
            "node taint, binding (queueing hints on)",
            ClusterEvent::node_updated(NodeIdx(0), kind::NODE_TAINT),
            vb,
            false,
        ),
    ];
    for (name, event, plugins, want) in cases {
        let got = worth_requeuing(&cx, &[], &event, &key, plugins);
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn each_plugin_registers_the_events_kube_scheduler_registers() {
    // What was one table keyed by plugin names is now each plugin's own declaration; this
    // pins every plugin's (so a plugin that stops registering an event is caught here).
    use kind::*;
    let h = QueueingHints::for_profiles(&[Profile::default_profile()]);
    let cases: &[(&str, u32, bool)] = &[
        (names::NODE_UNSCHEDULABLE, NODE_ADD | NODE_TAINT, true),
        (names::TAINT_TOLERATION, NODE_ADD | NODE_TAINT, true),
        (names::NODE_NAME, NODE_ADD, true),
        (names::NODE_AFFINITY, NODE_ADD | NODE_LABEL, true),
        (
            names::NODE_PORTS,
            NODE_ADD | ASSIGNED_POD_DELETE | RESERVATION,
            true,
        ),
        (
            FIT,
            NODE_ADD | NODE_ALLOCATABLE | ASSIGNED_POD_DELETE | RESERVATION,
            true,
        ),
        (
            names::NODE_VOLUME_LIMITS,
            NODE_ADD | NODE_ALLOCATABLE | ASSIGNED_POD_DELETE | RESERVATION | PVC | CSI_NODE,
            true,
        ),
        (
            names::VOLUME_RESTRICTIONS,
            NODE_ADD | ASSIGNED_POD_DELETE | RESERVATION | PVC,
            false,
        ),
        (
            names::VOLUME_BINDING,
            NODE_ADD
                | NODE_LABEL
                | PVC
                | PV
                | STORAGE_CLASS
                | CSI_NODE_MIGRATION
                | CSI_DRIVER
                | CSI_STORAGE_CAPACITY,
            false,
        ),
        (
            names::VOLUME_ZONE,
            NODE_ADD | NODE_LABEL | PVC | PV_TOPOLOGY | STORAGE_CLASS_WFFC,
            false,
        ),
        (
            names::INTER_POD_AFFINITY,
            NODE_ADD | NODE_LABEL | ASSIGNED_POD_ADD | ASSIGNED_POD_DELETE | RESERVATION,
            false,
        ),
        (
            names::POD_TOPOLOGY_SPREAD,
            NODE_ADD
                | NODE_LABEL
                | NODE_TAINT
                | NODE_DELETE
                | ASSIGNED_POD_ADD
                | ASSIGNED_POD_DELETE
                | RESERVATION,
            false,
        ),
        (
            NRT,
            NODE_ADD | NODE_ALLOCATABLE | ASSIGNED_POD_DELETE | NODE_TOPOLOGY,
            true,
        ),
        (
            names::NODE_NUMA_RESOURCE,
            NODE_ADD
                | NODE_ALLOCATABLE
                | NODE_LABEL
                | ASSIGNED_POD_DELETE
                | RESERVATION
                | NODE_TOPOLOGY,
            false,
        ),
        (names::DYNAMIC_RESOURCES, NODE_ADD | NODE_LABEL | DRA, false),
        // Plugins that say nothing, and names no profile has (a gang's).
        (names::RESERVATION, ALL & !NODE_TOPOLOGY, false),
        (names::DEFAULT_PREEMPTION, ALL & !NODE_TOPOLOGY, false),
        ("GangScheduling", ALL & !NODE_TOPOLOGY, false),
    ];
    for &(name, kinds, local) in cases {
        let r = h.registered(name);
        assert_eq!((r.kinds(), r.node_local), (kinds, local), "{name}");
        assert_eq!(h.interest(&[name]), kinds, "{name}");
    }
    assert_eq!(h.interest(&[]), ALL & !NODE_TOPOLOGY);
    // Only the plugins whose Filter has a necessary condition worth checking on one node
    // have a node check.
    for name in names::ALL {
        let checked = h.registered(name).node_check.is_some();
        assert_eq!(checked, *name == FIT || *name == NRT, "{name}");
    }
}
