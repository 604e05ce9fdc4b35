//! The plugin wired into the scheduler: NRT events, Filter/Score through the cache, the
//! resync timer, foreign pods and the messages.

use std::sync::Arc;

use berth_api::nrt::NodeResourceTopology;
use serde_json::{json, Value};

use super::*;
use crate::framework::config::ProfileConfig;
use crate::framework::Profile;
use crate::numa::fingerprint;
use crate::numa::CacheMode;
use crate::testing::{node, pod, DriverConfig, FakeDriver, PodBuilder, Profiles};
use crate::{Config, Effect, Event, Object, ObjectKey};

const T0: Time = 1_704_067_200_000;
const SEC: Time = 1000;

/// An NRT for `name` with `policy` and zones of `(cpu, memory Gi)` available.
fn nrt(name: &str, policy: &str, zones: &[(i64, i64)], pods: Option<&[(&str, &str)]>) -> Value {
    let zones: Vec<Value> = zones
        .iter()
        .enumerate()
        .map(|(i, (cpu, mem))| {
            json!({"name": format!("node-{i}"), "type": "Node", "resources": [
                {"name": "cpu", "capacity": "8", "allocatable": "8", "available": cpu.to_string()},
                {"name": "memory", "capacity": "16Gi", "allocatable": "16Gi", "available": format!("{mem}Gi")},
            ]})
        })
        .collect();
    let mut attrs = vec![
        json!({"name": "topologyManagerPolicy", "value": policy}),
        json!({"name": "topologyManagerScope", "value": "container"}),
    ];
    if let Some(pods) = pods {
        attrs.push(json!({"name": "nodeTopologyPodsFingerprint", "value": fingerprint::sign(pods.iter().copied())}));
    }
    json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": name}, "zones": zones, "attributes": attrs,
    })
}

fn nrt_event(v: Value) -> Event {
    let o: NodeResourceTopology = NodeResourceTopology::from_any_version(v).expect("valid NRT");
    Event::Applied(Object::NodeResourceTopology(Arc::new(o)))
}

/// A Guaranteed pod of `cpu` CPUs and 1Gi.
fn gpod(name: &str, cpu: &str) -> PodBuilder {
    pod(name)
        .req("cpu", cpu)
        .limit("cpu", cpu)
        .req("memory", "1Gi")
        .limit("memory", "1Gi")
}

/// The scheduler in a synchronous [`FakeDriver`], driven event by event as the tests read:
/// an input is delivered at once; [`run`] lets the cluster settle (binds land, every write
/// is echoed back).
struct Harness {
    d: FakeDriver,
}

impl Harness {
    fn handle(&mut self, now: Time, e: Event) {
        self.d.set_now(now);
        match e {
            Event::Applied(o) => self.d.apply(o),
            Event::Deleted(k) => {
                self.d.delete(&k);
            }
            other => self.d.scheduler_mut().handle(now, other),
        }
        self.d.deliver_watch();
    }

    fn handle_timeout(&mut self, now: Time) {
        self.d.set_now(now);
        self.d.scheduler_mut().handle_timeout(now);
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.d.scheduler().poll_timeout()
    }

    fn cluster(&self) -> &crate::cache::Cluster {
        &self.d.scheduler().cluster
    }

    fn numa_metrics(&self) -> NumaMetrics {
        self.d.scheduler().numa_metrics()
    }
}

fn scheduler(args: Option<Value>) -> Harness {
    let profiles = Profiles::new(move || {
        vec![match &args {
            None => Profile::default_profile(),
            Some(a) => {
                let pc: ProfileConfig = serde_json::from_value(json!({
                    "pluginConfig": [{"name": "NodeResourceTopologyMatch", "args": a}]
                }))
                .expect("profile config");
                Profile::from_config(&pc).expect("valid profile")
            }
        }]
    });
    Harness {
        d: FakeDriver::new(profiles, Config::default(), DriverConfig::default(), T0),
    }
}

fn add_node(s: &mut Harness, name: &str, cpu: &str) {
    s.handle(
        T0,
        Event::Applied(Object::Node(
            node(name).alloc("cpu", cpu).alloc("memory", "64Gi").build(),
        )),
    );
}

/// Adds a cordoned node with room for any pod: the node-add event retries the pods waiting
/// (queueing hints skip pods a new node cannot hold), and none lands there.
fn add_cordoned(s: &mut Harness, name: &str) {
    let n = node(name)
        .alloc("cpu", "64")
        .alloc("memory", "256Gi")
        .unschedulable();
    s.handle(T0, Event::Applied(Object::Node(n.build())));
}

/// Lets the cluster settle at `now` (binds land and come back); returns the effects.
fn run(s: &mut Harness, now: Time) -> Vec<Effect> {
    s.d.set_now(now);
    s.d.settle();
    s.d.take_effects()
}

fn bound(s: &Harness, name: &str) -> Option<String> {
    s.d.bound(name)
}

fn message(effects: &[Effect], name: &str) -> Option<String> {
    effects.iter().rev().find_map(|e| match e {
        Effect::PodCondition { pod, message, .. } if &*pod.name == name => Some(message.clone()),
        _ => None,
    })
}

#[test]
fn a_pod_wider_than_any_zone_is_filtered_on_single_numa_node_but_fits_a_none_node() {
    // (policy of n1, expected node, expected message substring)
    let cases = [
        (
            "single-numa-node",
            None,
            Some("0/1 nodes are available: 1 cannot align container."),
        ),
        ("none", Some("n1"), None),
        ("best-effort", Some("n1"), None),
    ];
    for (policy, want, msg) in cases {
        let mut s = scheduler(None);
        add_node(&mut s, "n1", "8");
        s.handle(T0, nrt_event(nrt("n1", policy, &[(4, 8), (4, 8)], None)));
        s.handle(T0, Event::Applied(Object::Pod(gpod("wide", "6").build())));
        let effects = run(&mut s, T0);
        assert_eq!(bound(&s, "wide").as_deref(), want, "policy {policy}");
        if let Some(m) = msg {
            let got = message(&effects, "wide").unwrap_or_default();
            assert!(got.contains(m), "policy {policy}: {got}");
        }
    }
}

/// `nrt` with the Topology Manager scope attribute set to `scope`.
fn nrt_scoped(name: &str, zones: &[(i64, i64)], scope: &str) -> Value {
    let mut v = nrt(name, "single-numa-node", zones, None);
    v["attributes"][1]["value"] = json!(scope);
    v
}

#[test]
fn filter_reasons_are_scheduler_plugins_fixed_strings_counted_per_node() {
    // Issue 8: kube-scheduler counts nodes per reason, so the reason is the same string on
    // every node; the container and resource are explain detail.
    // (scope, pod, expected message, expected explain detail for n1)
    let guaranteed = |name: &str, cpu: &str| {
        let r = json!({"cpu": cpu, "memory": "1Gi"});
        json!({"name": name, "resources": {"requests": r, "limits": r}})
    };
    let init = pod("init")
        .spec("initContainers", json!([guaranteed("setup", "6")]))
        .spec("containers", json!([guaranteed("app", "1")]));
    let two = pod("two").spec(
        "containers",
        json!([guaranteed("small", "1"), guaranteed("big", "6")]),
    );
    let cases = [
        (
            "container",
            gpod("wide", "6"),
            "0/2 nodes are available: 2 cannot align container.",
            "cannot align container \"c\" (index 0): cpu fits no single NUMA zone",
        ),
        (
            "container",
            two,
            "0/2 nodes are available: 2 cannot align container.",
            "cannot align container \"big\" (index 1): cpu fits no single NUMA zone",
        ),
        (
            "container",
            init,
            "0/2 nodes are available: 2 cannot align init container.",
            "cannot align init container \"setup\" (index 0): cpu fits no single NUMA zone",
        ),
        (
            "pod",
            gpod("wide", "6"),
            "0/2 nodes are available: 2 cannot align pod.",
            "cannot align pod (resource cpu)",
        ),
    ];
    for (scope, builder, want, detail) in cases {
        let mut s = scheduler(None);
        for (n, cpus) in [("n1", (4, 8)), ("n2", (5, 8))] {
            add_node(&mut s, n, "10");
            let zones = [cpus, (cpus.0 - 1, cpus.1)];
            s.handle(T0, nrt_event(nrt_scoped(n, &zones, scope)));
        }
        let p = builder.build();
        let name = p.metadata.name.clone().unwrap_or_default();
        s.handle(T0, Event::Applied(Object::Pod(p.clone())));
        let effects = run(&mut s, T0);
        assert_eq!(bound(&s, &name), None, "{scope} {name}");
        let got = message(&effects, &name).unwrap_or_default();
        // The filter histogram, then DynamicResources' and preemption's PostFilter words.
        assert!(
            got.starts_with(&format!("{want} no new claims to deallocate, preemption:")),
            "{scope} {name}: {got}"
        );
        let cx = s.cluster();
        let mut names = cx.cache.names.clone();
        let info = PodInfo::new(p, &mut names).expect("valid pod");
        let n1 = cx.cache.node_by_name("n1").expect("n1");
        assert_eq!(
            explain(cx, &info, n1).as_deref(),
            Some(detail),
            "{scope} {name}"
        );
    }
}

#[test]
fn nodes_without_topology_data_pass_and_burstable_pods_are_not_aligned() {
    let mut s = scheduler(None);
    add_node(&mut s, "n1", "8");
    add_node(&mut s, "bare", "8");
    s.handle(
        T0,
        nrt_event(nrt("n1", "single-numa-node", &[(2, 8), (2, 8)], None)),
    );
    s.handle(T0, Event::Applied(Object::Pod(gpod("g", "4").build())));
    s.handle(
        T0,
        Event::Applied(Object::Pod(pod("b").req("cpu", "4").build())),
    );
    run(&mut s, T0);
    assert_eq!(bound(&s, "g").as_deref(), Some("bare"));
    assert!(bound(&s, "b").is_some());
}

#[test]
fn the_reserve_cache_blocks_a_burst_until_the_node_republishes() {
    let mut s = scheduler(None);
    add_node(&mut s, "n1", "8");
    s.handle(
        T0,
        nrt_event(nrt("n1", "single-numa-node", &[(4, 8), (4, 8)], Some(&[]))),
    );
    s.handle(T0, Event::Applied(Object::Pod(gpod("a", "3").build())));
    s.handle(T0, Event::Applied(Object::Pod(gpod("b", "3").build())));
    let effects = run(&mut s, T0);
    assert_eq!(bound(&s, "a").as_deref(), Some("n1"));
    assert_eq!(bound(&s, "b"), None, "a was subtracted from both zones");
    let m = message(&effects, "b").unwrap_or_default();
    assert!(m.contains(REASON_RESYNC_PENDING), "{m}");
    assert!(s.cluster().numa.cache().is_dirty("n1"));
    // The resync tick is the next multiple of 5s.
    assert_eq!(s.cluster().numa.next_resync(), Some(T0 + 5 * SEC));
    // The agent has not seen a yet: mismatch, b stays out, and its message says why.
    s.handle(
        T0 + 2 * SEC,
        nrt_event(nrt("n1", "single-numa-node", &[(4, 8), (4, 8)], Some(&[]))),
    );
    s.handle_timeout(T0 + 5 * SEC);
    // The held-back NRT and the failed check retry nobody; b's next retry says why.
    assert!(run(&mut s, T0 + 5 * SEC).is_empty());
    add_cordoned(&mut s, "cordoned");
    let effects = run(&mut s, T0 + 5 * SEC);
    assert_eq!(bound(&s, "b"), None);
    let m = message(&effects, "b").unwrap_or_default();
    assert!(m.contains(REASON_FINGERPRINT_MISMATCH), "{m}");
    // The agent republishes with a on zone 0: match, flush, b takes zone 1.
    s.handle(
        T0 + 7 * SEC,
        nrt_event(nrt(
            "n1",
            "single-numa-node",
            &[(1, 7), (4, 8)],
            Some(&[("default", "a")]),
        )),
    );
    s.handle_timeout(T0 + 10 * SEC);
    run(&mut s, T0 + 10 * SEC);
    assert_eq!(bound(&s, "b").as_deref(), Some("n1"));
    let m = s.numa_metrics();
    assert_eq!(m.mode, CacheMode::OverReserve);
    assert_eq!(
        (m.cache.fingerprint_mismatches, m.cache.fingerprint_matches),
        (1, 1)
    );
    assert_eq!(m.cache.flushes, 1);
    assert_eq!(m.cache.dirty_filtered_out, 1);
    assert_eq!(m.api_reads(), m.cache.resync_attempts);
}

#[test]
fn without_the_cache_the_burst_lands_on_stale_data() {
    let mut s = scheduler(Some(json!({"cacheResyncPeriodSeconds": 0})));
    add_node(&mut s, "n1", "8");
    s.handle(
        T0,
        nrt_event(nrt("n1", "single-numa-node", &[(4, 8), (4, 8)], Some(&[]))),
    );
    for p in ["a", "b"] {
        s.handle(T0, Event::Applied(Object::Pod(gpod(p, "3").build())));
    }
    run(&mut s, T0);
    assert_eq!(bound(&s, "a").as_deref(), Some("n1"));
    assert_eq!(bound(&s, "b").as_deref(), Some("n1"));
    assert_eq!(s.poll_timeout(), None, "no resync timer in passthrough");
    let m = s.numa_metrics();
    assert_eq!(m.mode, CacheMode::Passthrough);
    assert!(m.api_reads() >= 2, "one live read per Filter lookup");
}

#[test]
fn an_nrt_without_fingerprint_never_resyncs_and_the_message_says_so() {
    let mut s = scheduler(None);
    add_node(&mut s, "n1", "8");
    s.handle(
        T0,
        nrt_event(nrt("n1", "single-numa-node", &[(4, 8), (4, 8)], None)),
    );
    s.handle(T0, Event::Applied(Object::Pod(gpod("a", "3").build())));
    s.handle(T0, Event::Applied(Object::Pod(gpod("b", "3").build())));
    run(&mut s, T0);
    s.handle_timeout(T0 + 5 * SEC);
    add_cordoned(&mut s, "cordoned");
    let effects = run(&mut s, T0 + 5 * SEC);
    assert_eq!(bound(&s, "b"), None);
    let m = message(&effects, "b").unwrap_or_default();
    assert!(m.contains(REASON_NO_FINGERPRINT), "{m}");
    assert!(
        s.poll_timeout().is_some(),
        "the node stays dirty, the timer runs"
    );
}

#[test]
fn a_pod_bound_by_another_scheduler_makes_the_node_unusable_until_it_resyncs() {
    let mut s = scheduler(None);
    add_node(&mut s, "n1", "8");
    s.handle(
        T0,
        nrt_event(nrt("n1", "single-numa-node", &[(4, 8), (4, 8)], Some(&[]))),
    );
    let foreign = gpod("f", "1")
        .spec("schedulerName", json!("other-scheduler"))
        .node_name("n1")
        .build();
    s.handle(T0, Event::Applied(Object::Pod(foreign)));
    s.handle(T0, Event::Applied(Object::Pod(gpod("p", "1").build())));
    let effects = run(&mut s, T0);
    assert_eq!(bound(&s, "p"), None);
    let m = message(&effects, "p").unwrap_or_default();
    assert!(m.contains(REASON_FOREIGN_PODS), "{m}");
    // The agent publishes the foreign pod: the resync matches and the node is usable.
    s.handle(
        T0 + SEC,
        nrt_event(nrt(
            "n1",
            "single-numa-node",
            &[(3, 7), (4, 8)],
            Some(&[("default", "f")]),
        )),
    );
    s.handle_timeout(T0 + 5 * SEC);
    run(&mut s, T0 + 5 * SEC);
    assert_eq!(bound(&s, "p").as_deref(), Some("n1"));
    assert_eq!(s.numa_metrics().cache.dirty_foreign_pods, 1);
}

#[test]
fn a_deleted_or_rejected_pod_gives_back_what_it_reserved() {
    for terminal in [false, true] {
        let mut s = scheduler(None);
        add_node(&mut s, "n1", "8");
        s.handle(
            T0,
            nrt_event(nrt("n1", "single-numa-node", &[(4, 8), (4, 8)], Some(&[]))),
        );
        s.handle(T0, Event::Applied(Object::Pod(gpod("a", "3").build())));
        run(&mut s, T0);
        assert_eq!(s.cluster().numa.cache().assumed_count("n1"), 1);
        assert!(s.cluster().numa.cache().is_assumed_bound("n1", "uid-a") == Some(true));
        if terminal {
            let p = gpod("a", "3").node_name("n1").phase("Failed").build();
            s.handle(T0, Event::Applied(Object::Pod(p)));
        } else {
            s.handle(T0, Event::Deleted(ObjectKey::pod("default", "a")));
        }
        assert_eq!(
            s.cluster().numa.cache().assumed_count("n1"),
            0,
            "terminal {terminal}"
        );
        s.handle(T0, Event::Applied(Object::Pod(gpod("b", "4").build())));
        run(&mut s, T0);
        assert_eq!(bound(&s, "b").as_deref(), Some("n1"), "terminal {terminal}");
    }
}

#[test]
fn nrt_objects_created_later_and_deleted_are_picked_up() {
    let mut s = scheduler(None);
    add_node(&mut s, "n1", "8");
    s.handle(T0, Event::Applied(Object::Pod(gpod("a", "6").build())));
    s.handle(
        T0,
        nrt_event(nrt("n1", "single-numa-node", &[(4, 8), (4, 8)], None)),
    );
    run(&mut s, T0);
    assert_eq!(
        bound(&s, "a"),
        None,
        "the NRT created after start-up counts"
    );
    s.handle(
        T0 + SEC,
        Event::Deleted(ObjectKey::cluster(crate::Kind::NodeResourceTopology, "n1")),
    );
    run(&mut s, T0 + SEC);
    assert_eq!(
        bound(&s, "a").as_deref(),
        Some("n1"),
        "no NRT: the node passes"
    );
}

#[test]
fn score_prefers_the_node_the_strategy_ranks_first() {
    // LeastAllocated (default) prefers the emptier zones; MostAllocated the fuller ones.
    for (strategy, want) in [("LeastAllocated", "roomy"), ("MostAllocated", "tight")] {
        let mut s = scheduler(Some(json!({"scoringStrategy": {"type": strategy}})));
        add_node(&mut s, "roomy", "16");
        add_node(&mut s, "tight", "16");
        s.handle(
            T0,
            nrt_event(nrt("roomy", "single-numa-node", &[(8, 8), (8, 8)], None)),
        );
        s.handle(
            T0,
            nrt_event(nrt("tight", "single-numa-node", &[(3, 8), (3, 8)], None)),
        );
        s.handle(T0, Event::Applied(Object::Pod(gpod("p", "2").build())));
        run(&mut s, T0);
        assert_eq!(bound(&s, "p").as_deref(), Some(want), "{strategy}");
    }
}

#[test]
fn invalid_args_name_the_field() {
    let cases = [
        (
            json!({"scoringStrategy": {"type": "Bogus"}}),
            "scoringStrategy.type",
        ),
        (
            json!({"cache": {"resyncMethod": "Sometimes"}}),
            "cache.resyncMethod",
        ),
    ];
    for (args, field) in cases {
        let err = NodeResourceTopologyMatch::new(Some(&args)).expect_err("invalid args");
        assert_eq!(err.field, field);
        assert!(err.message.contains(field), "{}", err.message);
    }
    let ok = NodeResourceTopologyMatch::new(None).expect("defaults are valid");
    assert_eq!(ok.config().cache.mode, CacheMode::OverReserve);
    assert_eq!(ok.config().cache.resync_period_ms, 5_000);
}

#[test]
fn rejections_in_a_row_make_a_node_dirty_only_at_the_threshold() {
    let mut s = scheduler(Some(json!({"cache": {"filteredOutThreshold": 2}})));
    add_node(&mut s, "n1", "8");
    s.handle(
        T0,
        nrt_event(nrt("n1", "single-numa-node", &[(4, 8), (4, 8)], Some(&[]))),
    );
    s.handle(T0, Event::Applied(Object::Pod(gpod("a", "3").build())));
    s.handle(T0, Event::Applied(Object::Pod(gpod("b", "3").build())));
    run(&mut s, T0);
    assert!(!s.cluster().numa.cache().is_dirty("n1"), "one rejection");
    assert_eq!(s.cluster().numa.next_resync(), None);
    // A node added requeues b: its retry is a second rejection in a row on n1.
    add_cordoned(&mut s, "cordoned");
    run(&mut s, T0 + 2 * SEC);
    assert!(s.cluster().numa.cache().is_dirty("n1"));
}
