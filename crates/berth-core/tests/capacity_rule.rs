//! Property tests of the capacity rule (issue 25): nothing a user writes makes berth hand
//! out more than a node has. Per input kind, random objects with negative, huge, duplicate
//! and inconsistent values go through the core, then random pods are scheduled, and:
//! - no node's bound pods (and Available reservations) request more than it has;
//! - on a node whose NodeResourceTopology was accepted, the Guaranteed pods placed there
//!   can be aligned by the kubelet's Topology Manager (`single-numa-node`) on the node's
//!   real zones;
//! - no CPU is handed out twice, and none the node's CPU topology lacks;
//! - every refused object has exactly one Warning event naming a field path (however often
//!   it is applied again), and no accepted object has one.
//!
//! Each generator knows which values it spoiled, so the oracle of "refused" is independent
//! of the code under test: dropping any one check of `berth_api::validate` (or of the codecs
//! and readers that use it) makes at least one of these fail.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_api::annotations::{parse_cpu_list, ResourceStatus};
use berth_api::nrt::NodeResourceTopology;
use berth_api::reservation::ReservationPhase;
use berth_core::effect::Record;
use berth_core::reservation::testkit::{reservation, Sim};
use berth_core::testing::{node, pod};
use berth_core::{Kind, Object};
use proptest::prelude::*;
use serde_json::{json, Value};

const CASES: u32 = 1000;

/// An amount as a user may write it.
#[derive(Debug, Clone)]
enum Amount {
    /// A valid quantity, in milli-units.
    Ok(u32),
    /// Below zero.
    Negative(u32),
    /// Larger than berth can count.
    Huge,
    /// Not a quantity.
    Garbage,
}

impl Amount {
    fn text(&self) -> String {
        match self {
            Amount::Ok(m) => format!("{m}m"),
            Amount::Negative(n) => format!("-{}", n + 1),
            Amount::Huge => "1e30".into(),
            Amount::Garbage => "banana".into(),
        }
    }

    fn bad(&self) -> bool {
        !matches!(self, Amount::Ok(_))
    }

    fn milli(&self) -> i64 {
        match self {
            Amount::Ok(m) => i64::from(*m),
            _ => 0,
        }
    }
}

fn amount(max_milli: u32) -> impl Strategy<Value = Amount> {
    prop_oneof![
        6 => (0..max_milli).prop_map(Amount::Ok),
        2 => (0u32..10).prop_map(Amount::Negative),
        1 => Just(Amount::Huge),
        1 => Just(Amount::Garbage),
    ]
}

/// Warning events about `kind`/`name` with `reason`, but for the scheduler's own "0/N nodes
/// are available" (a reservation that does not fit is not refused).
fn warnings<'a>(events: &'a [Record], kind: Kind, name: &str, reason: &str) -> Vec<&'a Record> {
    events
        .iter()
        .filter(|e| {
            e.type_ == "Warning"
                && e.involved.kind == kind
                && &*e.involved.name == name
                && e.reason == reason
                && !e.message.starts_with("0/")
        })
        .collect()
}

/// Checks `refused` against the Warning events: exactly one naming a path among `paths`
/// when refused, none otherwise.
fn one_warning_iff(
    events: &[Record],
    kind: Kind,
    name: &str,
    reason: &str,
    refused: bool,
    paths: &[&str],
) -> Result<(), TestCaseError> {
    let w = warnings(events, kind, name, reason);
    prop_assert_eq!(
        w.len(),
        usize::from(refused),
        "{:?} {}: {} warnings, refused: {}: {:?}",
        kind,
        name,
        w.len(),
        refused,
        w
    );
    if let Some(e) = w.first() {
        prop_assert!(
            paths.iter().any(|p| e.message.contains(p)),
            "{:?} {}: the warning names no field path: {}",
            kind,
            name,
            e.message
        );
    }
    Ok(())
}

/// Milli-CPU requested by the pods bound to each node.
fn cpu_by_node(sim: &Sim) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for p in sim.pods().values() {
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let mut milli = 0;
        for c in &p
            .spec
            .as_ref()
            .map(|s| s.containers.clone())
            .unwrap_or_default()
        {
            let q = c
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("cpu"));
            if let Some(q) = q {
                milli += berth_api::parse_resource("cpu", &q.0).unwrap_or(0);
            }
        }
        *out.entry(node).or_insert(0) += milli;
    }
    out
}

fn cpu_pod(name: &str, cpus: u32) -> Arc<berth_api::k8s_openapi::api::core::v1::Pod> {
    pod(name).req("cpu", &cpus.to_string()).build()
}

/// A Guaranteed pod of whole CPUs (pinned by the kubelet's static CPU manager).
fn guaranteed_pod(name: &str, cpus: u32) -> Arc<berth_api::k8s_openapi::api::core::v1::Pod> {
    let c = cpus.to_string();
    pod(name)
        .req("cpu", &c)
        .limit("cpu", &c)
        .req("memory", "1Gi")
        .limit("memory", "1Gi")
        .build()
}

// ---------------------------------------------------------------------------------------
// node.koordinator.sh/reservation

#[derive(Debug, Clone)]
struct NodeCase {
    cpus: u32,
    cpu: Option<Amount>,
    memory: Option<Amount>,
    reserved_cpus: Option<Vec<u32>>,
    topology: bool,
    pods: Vec<u32>,
    /// A second `cpu` key written before the first (JSON keeps the last of two; the rule
    /// refuses the annotation).
    dup_cpu: Option<Amount>,
}

fn node_case() -> impl Strategy<Value = NodeCase> {
    (
        2u32..9,
        prop::option::of(amount(4000)),
        prop::option::of(amount(1 << 20)),
        prop::option::weighted(0.3, prop::collection::vec(0u32..10, 1..4)),
        any::<bool>(),
        prop::collection::vec(1u32..4, 1..9),
        prop::option::weighted(0.2, amount(4000)),
    )
        .prop_map(
            |(cpus, cpu, memory, reserved_cpus, topology, pods, dup_cpu)| NodeCase {
                cpus,
                cpu,
                memory,
                reserved_cpus,
                topology,
                pods,
                dup_cpu,
            },
        )
}

/// A CPU topology of `cpus` CPUs, one core each, one socket and NUMA node.
fn cpu_topology(cpus: u32) -> String {
    let detail: Vec<Value> = (0..cpus)
        .map(|i| json!({"id": i, "core": i, "socket": 0, "node": 0}))
        .collect();
    json!({ "detail": detail }).to_string()
}

fn nrt(name: &str, annotations: Value, zones: Value, attributes: Value) -> Object {
    Object::NodeResourceTopology(Arc::new(
        NodeResourceTopology::from_any_version(json!({
            "apiVersion": "topology.node.k8s.io/v1alpha2",
            "kind": "NodeResourceTopology",
            "metadata": {"name": name, "annotations": annotations},
            "attributes": attributes,
            "zones": zones,
        }))
        .expect("an NRT of the CRD's shape"),
    ))
}

fn run_node_case(c: &NodeCase) -> Result<(), TestCaseError> {
    let mut sim = Sim::default();
    let mut resources = serde_json::Map::new();
    if let Some(a) = &c.cpu {
        resources.insert("cpu".into(), json!(a.text()));
    }
    if let Some(a) = &c.memory {
        resources.insert("memory".into(), json!(a.text()));
    }
    let mut value = json!({ "resources": resources });
    if let Some(list) = &c.reserved_cpus {
        let text: Vec<String> = list.iter().map(u32::to_string).collect();
        value["reservedCPUs"] = json!(text.join(","));
    }
    let mut text = value.to_string();
    let duplicate = c.cpu.is_some() && c.dup_cpu.is_some();
    if let (true, Some(d)) = (duplicate, &c.dup_cpu) {
        text = text.replacen(
            r#""resources":{"#,
            &format!(r#""resources":{{"cpu":{},"#, json!(d.text())),
            1,
        );
    }
    let ids: BTreeSet<u32> = c.reserved_cpus.iter().flatten().copied().collect();
    let absent = c.topology && ids.iter().any(|&i| i >= c.cpus);
    let refused = c.cpu.as_ref().is_some_and(Amount::bad)
        || c.memory.as_ref().is_some_and(Amount::bad)
        || absent
        || duplicate;
    let build = |label: &str| {
        node("n")
            .alloc("cpu", &c.cpus.to_string())
            .alloc("memory", "64Gi")
            .label("beat", label)
            .annotation("node.koordinator.sh/reservation", &text)
            .build()
    };
    if c.topology {
        sim.d.apply(nrt(
            "n",
            json!({"node.koordinator.sh/cpu-topology": cpu_topology(c.cpus)}),
            json!([]),
            json!([]),
        ));
    }
    sim.node(build("1"));
    for (i, cpus) in c.pods.iter().enumerate() {
        sim.pod(cpu_pod(&format!("p{i}"), *cpus));
        if i == 1 {
            // The kubelet's heartbeat: the same annotation again is not news.
            sim.node(build("2"));
        }
    }
    let have = i64::from(c.cpus) * 1000;
    let trim = if refused {
        0
    } else if !ids.is_empty() {
        ids.len() as i64 * 1000
    } else {
        c.cpu.as_ref().map_or(0, Amount::milli)
    };
    let used = cpu_by_node(&sim).get("n").copied().unwrap_or(0);
    prop_assert!(used <= have, "{used}m requested on a node of {have}m");
    prop_assert!(
        used <= (have - trim).max(0),
        "{used}m requested, {have}m minus the {trim}m reserved"
    );
    one_warning_iff(
        sim.events(),
        Kind::Node,
        "n",
        "InvalidNodeReservation",
        refused,
        &["resources.", "reservedCPUs"],
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn node_reservations_never_add_capacity(c in node_case()) {
        run_node_case(&c)?;
    }
}

// ---------------------------------------------------------------------------------------
// NodeResourceTopology

/// How a published NRT departs from the truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Defect {
    /// Zone node-0 listed twice (`true`: the copy claims 100 CPUs, else it has none).
    DuplicateZone(bool),
    /// A negative `available`.
    NegativeAvailable,
    /// `cpu` listed twice in a zone, the second claiming 100.
    DuplicateResource,
    /// `available` above `allocatable`.
    AvailableOverAllocatable,
    /// `allocatable` (and `available`) above `capacity`.
    AllocatableOverCapacity,
    /// Amounts beyond what berth counts.
    Huge,
    /// A negative distance.
    NegativeCost,
    /// The same distance target twice.
    DuplicateCost,
    /// A top-level attribute twice.
    DuplicateAttribute,
    /// A zone attribute twice.
    DuplicateZoneAttribute,
}

fn defect() -> impl Strategy<Value = Defect> {
    prop_oneof![
        any::<bool>().prop_map(Defect::DuplicateZone),
        Just(Defect::NegativeAvailable),
        Just(Defect::DuplicateResource),
        Just(Defect::AvailableOverAllocatable),
        Just(Defect::AllocatableOverCapacity),
        Just(Defect::Huge),
        Just(Defect::NegativeCost),
        Just(Defect::DuplicateCost),
        Just(Defect::DuplicateAttribute),
        Just(Defect::DuplicateZoneAttribute),
    ]
}

#[derive(Debug, Clone)]
struct NrtCase {
    /// CPUs of each NUMA zone (the truth the kubelet sees).
    zones: Vec<u32>,
    defect: Option<Defect>,
    pods: Vec<u32>,
}

fn nrt_case() -> impl Strategy<Value = NrtCase> {
    (
        prop::collection::vec(2u32..5, 1..3),
        prop::option::weighted(0.7, defect()),
        prop::collection::vec(1u32..4, 1..7),
    )
        .prop_map(|(zones, defect, pods)| NrtCase {
            zones,
            defect,
            pods,
        })
}

fn resource(name: &str, c: &str, a: &str, v: &str) -> Value {
    json!({"name": name, "capacity": c, "allocatable": a, "available": v})
}

/// The published zones and attributes: the truth, spoiled by `defect`.
fn published(c: &NrtCase) -> (Value, Value) {
    let mut zones: Vec<Value> = c
        .zones
        .iter()
        .enumerate()
        .map(|(i, &cpus)| {
            let n = cpus.to_string();
            let costs: Vec<Value> = (0..c.zones.len())
                .map(|j| json!({"name": format!("node-{j}"), "value": if i == j { 10 } else { 21 }}))
                .collect();
            json!({"name": format!("node-{i}"), "type": "Node", "costs": costs,
                   "attributes": [{"name": "cpulist", "value": "x"}],
                   "resources": [resource("cpu", &n, &n, &n), resource("memory", "8Gi", "8Gi", "8Gi")]})
        })
        .collect();
    let mut attributes = json!([
        {"name": "topologyManagerPolicy", "value": "single-numa-node"},
        {"name": "topologyManagerScope", "value": "container"},
    ]);
    let n = c.zones[0].to_string();
    let cpu0 = &mut zones[0]["resources"][0];
    match c.defect {
        None => {}
        Some(Defect::DuplicateZone(claims)) => {
            let mut copy = json!({"name": "node-0", "type": "Node"});
            if claims {
                copy["resources"] = json!([resource("cpu", "100", "100", "100")]);
            }
            zones.push(copy);
        }
        Some(Defect::NegativeAvailable) => *cpu0 = resource("cpu", &n, &n, "-5"),
        Some(Defect::DuplicateResource) => {
            if let Some(list) = zones[0]["resources"].as_array_mut() {
                list.push(resource("cpu", "100", "100", "100"));
            }
        }
        Some(Defect::AvailableOverAllocatable) => *cpu0 = resource("cpu", &n, &n, "100"),
        Some(Defect::AllocatableOverCapacity) => *cpu0 = resource("cpu", &n, "100", "100"),
        Some(Defect::Huge) => *cpu0 = resource("cpu", "1e30", "1e30", "1e30"),
        Some(Defect::NegativeCost) => zones[0]["costs"][0]["value"] = json!(-1),
        Some(Defect::DuplicateCost) => {
            if let Some(list) = zones[0]["costs"].as_array_mut() {
                list.push(json!({"name": "node-0", "value": 1}));
            }
        }
        Some(Defect::DuplicateAttribute) => {
            if let Some(list) = attributes.as_array_mut() {
                list.push(json!({"name": "topologyManagerPolicy", "value": "none"}));
            }
        }
        Some(Defect::DuplicateZoneAttribute) => {
            if let Some(list) = zones[0]["attributes"].as_array_mut() {
                list.push(json!({"name": "cpulist", "value": "y"}));
            }
        }
    }
    (Value::Array(zones), attributes)
}

/// Whether the kubelet's Topology Manager (`single-numa-node`, container scope) can give
/// every pod of `pods` its CPUs from one zone of `zones`.
fn alignable(zones: &[u32], pods: &[i64]) -> bool {
    fn place(free: &mut [i64], pods: &[i64]) -> bool {
        let Some((first, rest)) = pods.split_first() else {
            return true;
        };
        for i in 0..free.len() {
            if free[i] >= *first {
                free[i] -= first;
                if place(free, rest) {
                    return true;
                }
                free[i] += first;
            }
        }
        false
    }
    let mut free: Vec<i64> = zones.iter().map(|&z| i64::from(z) * 1000).collect();
    place(&mut free, pods)
}

fn run_nrt_case(c: &NrtCase) -> Result<(), TestCaseError> {
    let mut sim = Sim::default();
    let total: u32 = c.zones.iter().sum();
    sim.node(
        node("n")
            .alloc("cpu", &total.to_string())
            .alloc("memory", "64Gi")
            .build(),
    );
    let (zones, attributes) = published(c);
    let object = nrt("n", json!({}), zones, attributes);
    sim.d.apply(object.clone());
    sim.settle();
    for (i, cpus) in c.pods.iter().enumerate() {
        sim.pod(guaranteed_pod(&format!("p{i}"), *cpus));
        if i == 1 {
            // The agent publishes the same object again.
            sim.d.apply(object.clone());
            sim.settle();
        }
    }
    let mut placed: Vec<i64> = Vec::new();
    for p in sim.pods().values() {
        if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("n") {
            let q = &p.spec.as_ref().unwrap().containers[0]
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("cpu").cloned())
                .unwrap_or_default();
            placed.push(berth_api::parse_resource("cpu", &q.0).unwrap_or(0));
        }
    }
    let used: i64 = placed.iter().sum();
    prop_assert!(used <= i64::from(total) * 1000, "{used}m on {total} CPUs");
    let refused = c.defect.is_some();
    if !refused {
        prop_assert!(
            alignable(&c.zones, &placed),
            "pods {:?} cannot be aligned on zones {:?}",
            placed,
            c.zones
        );
    }
    prop_assert_eq!(
        sim.s().numa().refused_nrt("n").is_some(),
        refused,
        "explain's reason"
    );
    one_warning_iff(
        sim.events(),
        Kind::NodeResourceTopology,
        "n",
        "InvalidNodeResourceTopology",
        refused,
        &["zones[", "attributes["],
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn topology_never_claims_more_than_the_zones_have(c in nrt_case()) {
        run_nrt_case(&c)?;
    }
}

// ---------------------------------------------------------------------------------------
// Reservation templates and reservation-resize-allocatable

#[derive(Debug, Clone)]
enum Template {
    Cpu(Amount),
    NotAList,
}

#[derive(Debug, Clone)]
struct ReservationCase {
    cpus: u32,
    reservations: Vec<(Template, Option<Amount>)>,
    pods: Vec<u32>,
}

fn reservation_case() -> impl Strategy<Value = ReservationCase> {
    let template = prop_oneof![
        8 => amount(3000).prop_map(Template::Cpu),
        1 => Just(Template::NotAList),
    ];
    (
        2u32..9,
        prop::collection::vec((template, prop::option::weighted(0.3, amount(3000))), 1..4),
        prop::collection::vec(1u32..4, 0..6),
    )
        .prop_map(|(cpus, reservations, pods)| ReservationCase {
            cpus,
            reservations,
            pods,
        })
}

fn run_reservation_case(c: &ReservationCase) -> Result<(), TestCaseError> {
    let mut sim = Sim::default();
    sim.node(
        node("n")
            .alloc("cpu", &c.cpus.to_string())
            .alloc("memory", "64Gi")
            .build(),
    );
    let mut refused = Vec::new();
    for (i, (template, resize)) in c.reservations.iter().enumerate() {
        let name = format!("r{i}");
        let mut b = reservation(&name).owner_label("app", "nobody").ttl("10m");
        b = match template {
            Template::Cpu(a) => b.req("cpu", &a.text()),
            Template::NotAList => b.template_spec("containers", json!("not a list")),
        };
        if let Some(a) = resize {
            let v = json!({"resources": {"cpu": a.text()}}).to_string();
            b = b.annotation(
                "scheduling.koordinator.sh/reservation-resize-allocatable",
                &v,
            );
        }
        let bad = match template {
            Template::Cpu(a) => a.bad(),
            Template::NotAList => true,
        } || resize.as_ref().is_some_and(Amount::bad);
        refused.push((name, bad));
        let r = b.build();
        sim.reservation(r.clone());
        // Applied again (an unrelated label): still one event.
        let mut again = r;
        again
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("touched".into(), "yes".into());
        sim.reservation(again);
    }
    for (i, cpus) in c.pods.iter().enumerate() {
        sim.pod(cpu_pod(&format!("p{i}"), *cpus));
    }
    let mut held = 0;
    for r in sim.reservations().values() {
        let Some(st) = &r.status else { continue };
        if st.phase == Some(ReservationPhase::Available) {
            if let Some(q) = st.allocatable.get("cpu") {
                held += berth_api::parse_resource("cpu", &q.0).unwrap_or(0);
            }
        }
    }
    let used = cpu_by_node(&sim).get("n").copied().unwrap_or(0);
    let have = i64::from(c.cpus) * 1000;
    prop_assert!(
        used + held <= have,
        "{used}m requested and {held}m reserved on {have}m"
    );
    for (name, bad) in &refused {
        if *bad {
            prop_assert_eq!(sim.phase(name), "Pending", "refused reservation {}", name);
        }
        one_warning_iff(
            sim.events(),
            Kind::Reservation,
            name,
            "FailedScheduling",
            *bad,
            &["spec.template", "resources.cpu"],
        )?;
    }
    // Refused or not, every reservation expires on its TTL.
    sim.advance(10 * 60 * 1000 + 1);
    for (name, _) in &refused {
        prop_assert_eq!(
            sim.phase(name),
            "Failed",
            "reservation {} after its TTL",
            name
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn reservations_never_hold_more_than_the_node_has(c in reservation_case()) {
        run_reservation_case(&c)?;
    }
}

// ---------------------------------------------------------------------------------------
// cpu-topology, node reservedCPUs and exclusive CPUs

#[derive(Debug, Clone)]
struct CpuCase {
    cpus: u32,
    /// A CPU listed twice in the topology.
    duplicate: bool,
    /// A core placed in two NUMA nodes.
    split_core: bool,
    reserved: Option<Vec<u32>>,
    pods: Vec<u32>,
}

fn cpu_case() -> impl Strategy<Value = CpuCase> {
    (
        2u32..9,
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
        prop::option::weighted(0.4, prop::collection::vec(0u32..10, 1..3)),
        prop::collection::vec(1u32..4, 1..6),
    )
        .prop_map(|(cpus, duplicate, split_core, reserved, pods)| CpuCase {
            cpus,
            duplicate,
            split_core,
            reserved,
            pods,
        })
}

fn run_cpu_case(c: &CpuCase) -> Result<(), TestCaseError> {
    let mut sim = Sim::default();
    let mut detail: Vec<Value> = (0..c.cpus)
        .map(|i| json!({"id": i, "core": i, "socket": 0, "node": 0}))
        .collect();
    if c.duplicate {
        detail.push(json!({"id": 0, "core": 0, "socket": 0, "node": 0}));
    }
    if c.split_core {
        detail.push(json!({"id": 100, "core": 0, "socket": 1, "node": 1}));
    }
    let topology_refused = c.duplicate || c.split_core;
    let ids: BTreeSet<u32> = c.reserved.iter().flatten().copied().collect();
    let absent = !topology_refused && ids.iter().any(|&i| i >= c.cpus);
    let mut b = node("n")
        .alloc("cpu", &c.cpus.to_string())
        .alloc("memory", "64Gi");
    if !ids.is_empty() {
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        let v = json!({"reservedCPUs": list.join(","), "applyPolicy": "ReservedCPUsOnly"});
        b = b.annotation("node.koordinator.sh/reservation", &v.to_string());
    }
    sim.node(b.build());
    let n = c.cpus.to_string();
    sim.d.apply(nrt(
        "n",
        json!({"node.koordinator.sh/cpu-topology": json!({"detail": detail}).to_string()}),
        json!([{"name": "node-0", "type": "Node",
                "resources": [resource("cpu", &n, &n, &n)]}]),
        json!([]),
    ));
    sim.settle();
    for (i, cpus) in c.pods.iter().enumerate() {
        sim.pod(
            pod(&format!("p{i}"))
                .req("cpu", &cpus.to_string())
                .label("koordinator.sh/qosClass", "LSR")
                .build(),
        );
    }
    let mut seen: BTreeMap<u32, String> = BTreeMap::new();
    for ((_, name), p) in sim.pods() {
        let Some(text) = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("scheduling.koordinator.sh/resource-status"))
        else {
            continue;
        };
        let status = ResourceStatus::parse(text).expect("berth writes what it reads");
        for cpu in parse_cpu_list(&status.cpuset).expect("a CPU list") {
            prop_assert!(cpu < c.cpus, "pod {} got CPU {} the node lacks", name, cpu);
            if !absent {
                prop_assert!(
                    !ids.contains(&cpu),
                    "pod {} got CPU {} the node reserves",
                    name,
                    cpu
                );
            }
            if let Some(other) = seen.insert(cpu, name.clone()) {
                prop_assert!(false, "CPU {} handed to {} and {}", cpu, other, name);
            }
        }
    }
    one_warning_iff(
        sim.events(),
        Kind::Node,
        "n",
        "InvalidCPUTopology",
        topology_refused,
        &["detail["],
    )?;
    one_warning_iff(
        sim.events(),
        Kind::Node,
        "n",
        "InvalidNodeReservation",
        absent,
        &["reservedCPUs"],
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn exclusive_cpus_are_never_handed_out_twice(c in cpu_case()) {
        run_cpu_case(&c)?;
    }
}

#[test]
fn the_issues_three_inputs() {
    // Negative node reservation on a 4-CPU node: never 5 of 4.
    run_node_case(&NodeCase {
        cpus: 4,
        cpu: Some(Amount::Negative(2)),
        memory: None,
        reserved_cpus: None,
        topology: false,
        pods: vec![2, 2, 2],
        dup_cpu: None,
    })
    .expect("negative node reservation");
    // `cpu` named twice, the last a small reservation: refused, never the last one.
    run_node_case(&NodeCase {
        cpus: 4,
        cpu: Some(Amount::Ok(1000)),
        memory: None,
        reserved_cpus: None,
        topology: false,
        pods: vec![2, 2],
        dup_cpu: Some(Amount::Ok(3000)),
    })
    .expect("duplicate cpu key");
    // The NRT defects.
    for defect in [
        Defect::DuplicateZone(false),
        Defect::NegativeAvailable,
        Defect::DuplicateResource,
    ] {
        run_nrt_case(&NrtCase {
            zones: vec![4, 4],
            defect: Some(defect),
            pods: vec![3, 3],
        })
        .unwrap_or_else(|e| panic!("{defect:?}: {e}"));
    }
    // The unreadable reservation template.
    run_reservation_case(&ReservationCase {
        cpus: 4,
        reservations: vec![(Template::NotAList, None)],
        pods: vec![4],
    })
    .expect("unreadable template");
}

/// A pod the rule refuses is counted (`berth_unreadable_objects_total{kind="Pod"}`) once
/// per object and problem, however often it is applied again; a bound one gets one
/// `InvalidPod` warning, an unbound one its condition and `FailedScheduling`.
#[test]
fn refused_pods_are_counted_once_each() {
    use berth_api::validate::Rule;
    use berth_core::testing::FakeDriver;
    let mut d = FakeDriver::synchronous();
    d.apply(Object::Node(
        node("n1").alloc("cpu", "4").alloc("memory", "8Gi").build(),
    ));
    for round in 0..3 {
        d.apply(Object::Pod(
            pod("pending")
                .req("cpu", "-1")
                .label("round", &round.to_string())
                .build(),
        ));
        d.apply(Object::Pod(
            pod("running")
                .req("cpu", "-2")
                .node_name("n1")
                .label("round", &round.to_string())
                .build(),
        ));
        d.settle();
    }
    let counted = d.scheduler_mut().take_refusals();
    assert_eq!(
        counted,
        vec![(Kind::Pod, Rule::Negative), (Kind::Pod, Rule::Negative)]
    );
    let invalid: Vec<_> = d
        .events()
        .iter()
        .filter(|r| r.reason == "InvalidPod")
        .collect();
    assert_eq!(invalid.len(), 1, "{invalid:?}");
    assert!(invalid[0].message.contains("cpu"), "{}", invalid[0].message);
    let (_, message) = d.condition("pending").expect("a condition");
    assert!(
        message.contains("must be greater than or equal to 0"),
        "{message}"
    );
    // Fixed, it schedules like any other.
    d.apply(Object::Pod(pod("pending").req("cpu", "1").build()));
    d.settle();
    assert_eq!(d.bound("pending").as_deref(), Some("n1"));
}
