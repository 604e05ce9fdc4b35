//! Property test: the dry run through the PreFilter extensions ([`super::overlay`]) selects
//! exactly what the dry run on a copy of the cluster ([`super::cluster_copy`], the path
//! every node took before) selects: per node the same victims in the same order, the same
//! PDB violations, the same status when the node is no candidate; and over a whole attempt
//! the same candidates and statuses. Random clusters mix what the extensions must carry:
//! pod (anti-)affinity in zones and on hosts, topology spread (with and without the
//! remembered counts), ReadWriteOncePod claims, host ports, assumed and terminating pods,
//! budgets and nominated pods.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::object::{Object, ObjectKey};
use crate::testing::{node, pod, PodBuilder};

const APPS: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
struct NodeSpec {
    cpu: u32,
    zone: Option<u8>,
    max_pods: Option<u8>,
}

/// What a pod carries besides its requests.
#[derive(Debug, Clone)]
struct Extras {
    app: usize,
    /// Required anti-affinity to an app, on hostname (`false`) or zone (`true`).
    anti: Option<(usize, bool)>,
    /// Required affinity to an app in the zone.
    affinity: Option<usize>,
    /// A hard spread constraint over an app, on zone (`true`) or hostname.
    spread: Option<(usize, bool)>,
    host_port: bool,
    /// Uses claim `c{n}` (ReadWriteOncePod).
    claim: Option<u8>,
}

#[derive(Debug, Clone)]
struct Existing {
    node: usize,
    cpu_m: u32,
    priority: i32,
    extras: Extras,
    assumed: bool,
    terminating: bool,
}

#[derive(Debug, Clone)]
struct World {
    nodes: Vec<NodeSpec>,
    pods: Vec<Existing>,
    preemptor: (u32, Extras),
    /// Pin the preemptor to zone 0 (spread counts then honour its node selector).
    zone_selector: bool,
    budgets: Vec<(usize, i32)>,
    /// A nominated pod: node, cpu (milli), priority.
    nominated: Option<(usize, u32, i32)>,
    offset: usize,
}

fn extras() -> impl Strategy<Value = Extras> {
    (
        0..APPS.len(),
        prop::option::weighted(0.3, (0..APPS.len(), any::<bool>())),
        prop::option::weighted(0.15, 0..APPS.len()),
        prop::option::weighted(0.3, (0..APPS.len(), any::<bool>())),
        prop::bool::weighted(0.15),
        prop::option::weighted(0.15, 0u8..2),
    )
        .prop_map(|(app, anti, affinity, spread, host_port, claim)| Extras {
            app,
            anti,
            affinity,
            spread,
            host_port,
            claim,
        })
}

fn world() -> impl Strategy<Value = World> {
    let nodes = prop::collection::vec(
        (
            2u32..7,
            prop::option::weighted(0.85, 0u8..3),
            prop::option::weighted(0.15, 2u8..5),
        )
            .prop_map(|(cpu, zone, max_pods)| NodeSpec {
                cpu,
                zone,
                max_pods,
            }),
        1..6,
    );
    nodes.prop_flat_map(|nodes| {
        let n = nodes.len();
        let existing = (
            0..n,
            100u32..2500,
            prop::sample::select(vec![0, 100, 500, 2000]),
            extras(),
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.1),
        )
            .prop_map(
                |(node, cpu_m, priority, extras, assumed, terminating)| Existing {
                    node,
                    cpu_m,
                    priority,
                    extras,
                    assumed,
                    terminating,
                },
            );
        (
            Just(nodes),
            prop::collection::vec(existing, 0..14),
            (500u32..5000, extras()),
            prop::bool::weighted(0.15),
            prop::collection::vec((0..APPS.len(), 0i32..2), 0..3),
            prop::option::weighted(0.2, (0..n, 500u32..3000, 900i32..1500)),
            0..n,
        )
            .prop_map(
                |(nodes, pods, preemptor, zone_selector, budgets, nominated, offset)| World {
                    nodes,
                    pods,
                    preemptor,
                    zone_selector,
                    budgets,
                    nominated,
                    offset,
                },
            )
    })
}

fn term(app: usize, zone: bool) -> Value {
    json!({
        "labelSelector": {"matchLabels": {"app": APPS[app]}},
        "topologyKey": if zone { "zone" } else { "kubernetes.io/hostname" },
    })
}

fn dress(mut b: PodBuilder, e: &Extras) -> PodBuilder {
    b = b.label("app", APPS[e.app]);
    let mut affinity = serde_json::Map::new();
    if let Some((app, zone)) = e.anti {
        affinity.insert(
            "podAntiAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": [term(app, zone)]}),
        );
    }
    if let Some(app) = e.affinity {
        affinity.insert(
            "podAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": [term(app, true)]}),
        );
    }
    if !affinity.is_empty() {
        b = b.spec("affinity", Value::Object(affinity));
    }
    if let Some((app, zone)) = e.spread {
        b = b.spec(
            "topologySpreadConstraints",
            json!([{
                "maxSkew": 1,
                "topologyKey": if zone { "zone" } else { "kubernetes.io/hostname" },
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": APPS[app]}},
            }]),
        );
    }
    if e.host_port {
        b = b.host_port(8080, "TCP", "");
    }
    if let Some(c) = e.claim {
        b = b.spec(
            "volumes",
            json!([{"name": "v", "persistentVolumeClaim": {"claimName": format!("c{c}")}}]),
        );
    }
    b
}

struct Built {
    cx: Cluster,
    profile: Profile,
    nominator: Nominator,
    pod: PodInfo,
}

fn build(w: &World) -> Built {
    let mut cx = Cluster::default();
    let names: Vec<String> = (0..w.nodes.len()).map(|i| format!("n{i}")).collect();
    for (name, spec) in names.iter().zip(&w.nodes) {
        let mut b = node(name)
            .alloc("cpu", &spec.cpu.to_string())
            .alloc("memory", "16Gi")
            .alloc("pods", &spec.max_pods.map_or(110, u32::from).to_string())
            .label("kubernetes.io/hostname", name);
        if let Some(z) = spec.zone {
            b = b.label("zone", &format!("z{z}"));
        }
        cx.apply_node(b.build()).unwrap();
    }
    for c in 0..2 {
        // Bound (as the PV controller leaves a claim), so VolumeBinding lets them through.
        let pvc = serde_json::from_value(json!({
            "metadata": {"name": format!("c{c}"), "namespace": "default",
                         "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"accessModes": ["ReadWriteOncePod"], "volumeName": format!("pv{c}")},
            "status": {"phase": "Bound"},
        }))
        .unwrap();
        let pv = serde_json::from_value(json!({
            "metadata": {"name": format!("pv{c}")},
            "spec": {"accessModes": ["ReadWriteOncePod"], "capacity": {"storage": "1Gi"},
                     "claimRef": {"name": format!("c{c}"), "namespace": "default"}},
            "status": {"phase": "Bound"},
        }))
        .unwrap();
        cx.cache.pvs.insert(format!("pv{c}").into(), Arc::new(pv));
        cx.cache.pvcs.insert(
            ObjectKey::new(
                crate::object::Kind::PersistentVolumeClaim,
                "default",
                &format!("c{c}"),
            ),
            Arc::new(pvc),
        );
    }
    for (i, p) in w.pods.iter().enumerate() {
        let mut b = dress(
            pod(&format!("p{i}"))
                .req("cpu", &format!("{}m", p.cpu_m))
                .priority(p.priority)
                .status("startTime", json!(crate::time::rfc3339(i as i64 * 1000))),
            &p.extras,
        );
        if p.terminating {
            b = b.meta("deletionTimestamp", json!("2024-01-01T00:00:00Z"));
        }
        if !p.assumed {
            b = b.node_name(&names[p.node]);
        }
        let info = Arc::new(b.build_info_with(&mut cx.cache.names));
        let key = info.key.clone();
        cx.cache.apply_pod(info);
        if p.assumed {
            let idx = cx.cache.node_idx(&names[p.node]).unwrap();
            cx.cache.assume(&key, idx);
        }
    }
    for (i, &(app, allowed)) in w.budgets.iter().enumerate() {
        let pdb: Arc<berth_api::k8s_openapi::api::policy::v1::PodDisruptionBudget> = Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": format!("b{i}"), "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": APPS[app]}}},
                "status": {"currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0,
                           "disruptionsAllowed": allowed}
            }))
            .unwrap(),
        );
        let key = Object::PodDisruptionBudget(pdb.clone()).key();
        cx.cache.pdbs.insert(key, pdb);
    }
    let mut nominator = Nominator::default();
    if let Some((n, cpu_m, priority)) = w.nominated {
        let info = pod("nominated")
            .req("cpu", &format!("{cpu_m}m"))
            .priority(priority)
            .build_info_with(&mut cx.cache.names);
        nominator.add(Arc::new(info), names[n].as_str().into());
    }
    let (cpu_m, e) = &w.preemptor;
    let mut b = dress(
        pod("preemptor")
            .req("cpu", &format!("{cpu_m}m"))
            .priority(1000),
        e,
    );
    if w.zone_selector {
        b = b.spec("nodeSelector", json!({"zone": "z0"}));
    }
    let pod = b.build_info_with(&mut cx.cache.names);
    Built {
        cx,
        profile: Profile::default_profile(),
        nominator,
        pod,
    }
}

/// A node's dry-run outcome in comparable form.
type Outcome = Result<(NodeIdx, Vec<ObjectKey>, i64), Status>;

fn outcome(r: Result<Candidate, Status>) -> Outcome {
    r.map(|c| {
        (
            c.node,
            c.victims.iter().map(|p| p.key.clone()).collect(),
            c.pdb_violations,
        )
    })
}

fn plugin() -> DefaultPreemption {
    DefaultPreemption::new(None).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn the_overlay_selects_what_the_cluster_copy_selects(w in world()) {
        let b = build(&w);
        let fit = Fit { profile: &b.profile, nominator: &b.nominator, pod: &b.pod };
        let nodes: Vec<NodeIdx> = b.cx.cache.node_order().to_vec();
        let dry = |how| DryRun {
            cluster: &b.cx,
            fit,
            how,
            budgets: None,
            base: None,
            sim: None,
            reservation_preemption: false,
        };
        let (mut overlay, mut copy) = (dry(Simulation::Overlay), dry(Simulation::ClusterCopy));
        for &idx in &nodes {
            let want = outcome(copy.select_victims_on_node(idx));
            let got = outcome(overlay.select_victims_on_node(idx));
            prop_assert_eq!(got, want, "node {:?}", idx);
        }
        // A whole attempt: the same candidates in the same order, the same statuses.
        let pl = plugin();
        let run = |how| {
            let (c, s) = pl.dry_run_with(&b.cx, fit, &nodes, w.offset, how);
            (c.into_iter().map(|c| outcome(Ok(c))).collect::<Vec<_>>(), s)
        };
        prop_assert_eq!(run(Simulation::Overlay), run(Simulation::ClusterCopy));
    }
}

/// The generator reaches what the property is about: nodes with victims, candidates both
/// with and without PDB violations, and rejections by the plugins with extensions.
#[test]
fn the_generator_reaches_the_interesting_cases() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut candidates, mut violating, mut rejected) = (0, 0, std::collections::BTreeSet::new());
    for _ in 0..500 {
        let w = world().new_tree(&mut runner).unwrap().current();
        let b = build(&w);
        let fit = Fit {
            profile: &b.profile,
            nominator: &b.nominator,
            pod: &b.pod,
        };
        let mut dry = DryRun {
            cluster: &b.cx,
            fit,
            how: Simulation::Overlay,
            budgets: None,
            base: None,
            sim: None,
            reservation_preemption: false,
        };
        for &idx in b.cx.cache.node_order() {
            match dry.select_victims_on_node(idx) {
                Ok(c) => {
                    candidates += 1;
                    violating += usize::from(c.pdb_violations > 0);
                }
                Err(st) => {
                    rejected.insert(st.plugin());
                }
            }
        }
    }
    assert!(candidates > 100, "{candidates} candidates");
    assert!(violating > 5, "{violating} violating candidates");
    for p in [
        "InterPodAffinity",
        "PodTopologySpread",
        "VolumeRestrictions",
        "NodeResourcesFit",
    ] {
        assert!(
            rejected.contains(p),
            "no node rejected by {p}: {rejected:?}"
        );
    }
}

/// A cluster with reservations, built through the scheduler so that owners are allocated
/// from them: nodes (CPUs), reservations (node pin, CPUs, reusable), pods (owner, CPU
/// milli, priority), the preemptor (owner, CPU milli) and `enablePreemption`.
#[derive(Debug, Clone)]
struct ReservedWorld {
    nodes: Vec<u32>,
    reservations: Vec<(usize, u32, bool)>,
    pods: Vec<(bool, u32, i32)>,
    preemptor: (bool, u32),
    enable_preemption: bool,
}

fn reserved_world() -> impl Strategy<Value = ReservedWorld> {
    prop::collection::vec(2u32..7, 1..4).prop_flat_map(|nodes| {
        let n = nodes.len();
        (
            Just(nodes),
            prop::collection::vec((0..n, 1u32..4, any::<bool>()), 0..3),
            prop::collection::vec(
                (
                    prop::bool::weighted(0.6),
                    300u32..2500,
                    prop::sample::select(vec![0, 100, 500]),
                ),
                0..9,
            ),
            (any::<bool>(), 500u32..5000),
            any::<bool>(),
        )
            .prop_map(
                |(nodes, reservations, pods, preemptor, enable_preemption)| ReservedWorld {
                    nodes,
                    reservations,
                    pods,
                    preemptor,
                    enable_preemption,
                },
            )
    })
}

fn reservation_profile(enable: bool) -> Profile {
    let cfg = json!({"pluginConfig": [{"name": "Reservation",
        "args": {"enablePreemption": enable}}]});
    let pc: crate::framework::config::ProfileConfig = serde_json::from_value(cfg).unwrap();
    Profile::from_config(&pc).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// With reservations: nodes whose victims hold reservation shares go to the cluster
    /// copy, the others through the overlay (owners and non-owners preempting, with and
    /// without `enablePreemption`); the outcome is the cluster copy's everywhere.
    #[test]
    fn with_reservations_the_overlay_selects_what_the_cluster_copy_selects(
        w in reserved_world()
    ) {
        use crate::reservation::testkit::{reservation, Sim};
        let enable = w.enable_preemption;
        let mut s = Sim::new(crate::testing::Profiles::new(move || {
            vec![reservation_profile(enable)]
        }));
        for (i, cpu) in w.nodes.iter().enumerate() {
            s.node(node(&format!("n{i}")).alloc("cpu", &cpu.to_string()).alloc("memory", "16Gi").build());
        }
        for (i, &(n, cpu, reusable)) in w.reservations.iter().enumerate() {
            let mut r = reservation(&format!("r{i}"))
                .req("cpu", &cpu.to_string())
                .owner_label("app", "web")
                .template_spec("nodeName", json!(format!("n{n}")));
            if reusable {
                r = r.reusable();
            }
            s.reservation(r.build());
        }
        for (i, &(owner, cpu_m, priority)) in w.pods.iter().enumerate() {
            let mut b = pod(&format!("p{i}")).req("cpu", &format!("{cpu_m}m")).priority(priority);
            if owner {
                b = b.label("app", "web");
            }
            s.pod(b.build());
        }
        let cx = &s.s().cluster;
        let profile = reservation_profile(enable);
        let nominator = Nominator::default();
        let (owner, cpu_m) = w.preemptor;
        let mut b = pod("preemptor").req("cpu", &format!("{cpu_m}m")).priority(1000);
        if owner {
            b = b.label("app", "web");
        }
        let mut names = cx.cache.names.clone();
        let pod = b.build_info_with(&mut names);
        let fit = Fit { profile: &profile, nominator: &nominator, pod: &pod };
        let dry = |how| DryRun {
            cluster: cx,
            fit,
            how,
            budgets: None,
            base: None,
            sim: None,
            reservation_preemption: enable,
        };
        let (mut overlay, mut copy) = (dry(Simulation::Overlay), dry(Simulation::ClusterCopy));
        let nodes: Vec<NodeIdx> = cx.cache.node_order().to_vec();
        for &idx in &nodes {
            let want = outcome(copy.select_victims_on_node(idx));
            let got = outcome(overlay.select_victims_on_node(idx));
            prop_assert_eq!(got, want, "node {:?}", idx);
        }
        let pl = plugin();
        let run = |how| {
            let (c, s) = pl.dry_run_with(cx, fit, &nodes, 0, how);
            (c.into_iter().map(|c| outcome(Ok(c))).collect::<Vec<_>>(), s)
        };
        prop_assert_eq!(run(Simulation::Overlay), run(Simulation::ClusterCopy));
    }
}
