//! Reservation test helpers: builders, and [`Sim`], the synchronous [`FakeDriver`] seen
//! through the API objects reservation tests look at (binds, status writes, annotations,
//! deletions all performed and echoed back; virtual time through the scheduler's timers;
//! a scheduler rebuilt from the objects, as a restart would).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_api::annotations::{
    AnnotationCodec, ReservationAllocated, ANNOTATION_RESERVATION_ALLOCATED,
};
use berth_api::k8s_openapi::api::core::v1::{Node, Pod};
use berth_api::reservation::Reservation;
use serde_json::{json, Value};

use crate::effect::Record;
use crate::object::{Kind, Object, ObjectKey};
use crate::scheduler::{Config, Scheduler};
use crate::testing::{DriverConfig, FakeDriver, Profiles};
use crate::time::Time;

/// A reservation builder: `reservation("r").req("cpu", "4").owner_label("app", "web")`.
#[derive(Debug, Clone)]
pub struct ReservationBuilder(Value);

/// Starts a reservation with one container and no owners.
pub fn reservation(name: &str) -> ReservationBuilder {
    ReservationBuilder(json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "spec": {
            "template": {"metadata": {}, "spec": {"containers": [{"name": "c", "resources": {"requests": {}}}]}},
            "owners": []
        }
    }))
}

impl ReservationBuilder {
    /// Adds a request to the template's container.
    pub fn req(mut self, name: &str, qty: &str) -> Self {
        self.0["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"][name] =
            json!(qty);
        self
    }
    /// Adds a host port to the template's container.
    pub fn host_port(mut self, port: i32) -> Self {
        let c = &mut self.0["spec"]["template"]["spec"]["containers"][0];
        if c.get("ports").is_none() {
            c["ports"] = json!([]);
        }
        if let Some(a) = c["ports"].as_array_mut() {
            a.push(json!({"containerPort": port, "hostPort": port}));
        }
        self
    }
    /// Owners: pods with this label.
    pub fn owner_label(self, k: &str, v: &str) -> Self {
        self.owner(json!({"labelSelector": {"matchLabels": {k: v}}}))
    }
    /// Adds an owner entry.
    pub fn owner(mut self, o: Value) -> Self {
        if let Some(a) = self.0["spec"]["owners"].as_array_mut() {
            a.push(o);
        }
        self
    }
    /// Sets any `spec` field.
    pub fn spec(mut self, field: &str, v: Value) -> Self {
        self.0["spec"][field] = v;
        self
    }
    /// Sets any template `spec` field (`nodeName`, `affinity`...).
    pub fn template_spec(mut self, field: &str, v: Value) -> Self {
        self.0["spec"]["template"]["spec"][field] = v;
        self
    }
    /// Adds a template label.
    pub fn template_label(mut self, k: &str, v: &str) -> Self {
        self.0["spec"]["template"]["metadata"]["labels"][k] = json!(v);
        self
    }
    /// Adds a label on the reservation.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["labels"][k] = json!(v);
        self
    }
    /// Adds an annotation on the reservation.
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["annotations"][k] = json!(v);
        self
    }
    /// `allocateOnce: false`.
    pub fn reusable(self) -> Self {
        self.spec("allocateOnce", json!(false))
    }
    /// `allocatePolicy`.
    pub fn policy(self, p: &str) -> Self {
        self.spec("allocatePolicy", json!(p))
    }
    /// `ttl`.
    pub fn ttl(self, t: &str) -> Self {
        self.spec("ttl", json!(t))
    }
    /// The JSON.
    pub fn json(&self) -> &Value {
        &self.0
    }
    /// The API object, with the API server's defaults applied.
    pub fn build(&self) -> Reservation {
        let mut r: Reservation = serde_json::from_value(self.0.clone())
            .unwrap_or_else(|e| panic!("test reservation does not deserialize: {e}"));
        r.apply_defaults();
        r
    }
}

/// The API server and the scheduler watching it: a synchronous [`FakeDriver`] (every bind
/// lands at once, every write is echoed back) with accessors in the terms reservation tests
/// use.
#[derive(Debug)]
pub struct Sim {
    /// The fake cluster.
    pub d: FakeDriver,
}

impl Default for Sim {
    fn default() -> Self {
        Self::new(Profiles::default_profile())
    }
}

fn key_of(ns: &str, name: &str) -> (String, String) {
    (ns.to_string(), name.to_string())
}

impl Sim {
    /// An empty cluster at time 1,000,000 s, scheduled by `profiles` (seed 1).
    pub fn new(profiles: Profiles) -> Self {
        Self::with_driver(profiles, DriverConfig::default())
    }

    /// Like [`Sim::new`], with a cluster that misbehaves as `cfg` says (every operation
    /// still settles before it returns).
    pub fn with_driver(profiles: Profiles, cfg: DriverConfig) -> Self {
        Self {
            d: FakeDriver::new(
                profiles,
                Config {
                    seed: 1,
                    ..Config::default()
                },
                cfg,
                1_000_000_000,
            ),
        }
    }

    /// The scheduler.
    pub fn s(&self) -> &Scheduler {
        self.d.scheduler()
    }

    /// Virtual now.
    pub fn now(&self) -> Time {
        self.d.now()
    }

    /// Nodes by name, as the API server holds them.
    pub fn nodes(&self) -> BTreeMap<String, Arc<Node>> {
        self.d
            .of_kind(Kind::Node)
            .filter_map(|o| match o {
                Object::Node(n) => Some((n.metadata.name.clone().unwrap_or_default(), n.clone())),
                _ => None,
            })
            .collect()
    }

    /// Pods by namespace/name, as the API server holds them.
    pub fn pods(&self) -> BTreeMap<(String, String), Arc<Pod>> {
        self.d
            .of_kind(Kind::Pod)
            .filter_map(|o| match o {
                Object::Pod(p) => {
                    let ns = p.metadata.namespace.as_deref().unwrap_or("default");
                    let name = p.metadata.name.as_deref().unwrap_or("");
                    Some((key_of(ns, name), p.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// Reservations by name, as the API server holds them.
    pub fn reservations(&self) -> BTreeMap<String, Arc<Reservation>> {
        self.d
            .of_kind(Kind::Reservation)
            .filter_map(|o| match o {
                Object::Reservation(r) => {
                    Some((r.metadata.name.clone().unwrap_or_default(), r.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// Events recorded.
    pub fn events(&self) -> &[Record] {
        self.d.events()
    }

    /// Creates or replaces a node, then schedules.
    pub fn node(&mut self, n: Arc<Node>) {
        self.d.apply(Object::Node(n));
        self.d.settle();
    }

    /// Creates or replaces a pod (creation time: now when unset), then schedules.
    pub fn pod(&mut self, p: Arc<Pod>) {
        self.d.apply(Object::Pod(p));
        self.d.settle();
    }

    /// Creates or replaces a reservation (creation time: now when unset), then schedules.
    pub fn reservation(&mut self, r: Reservation) {
        self.d.apply(Object::Reservation(Arc::new(r)));
        self.d.settle();
    }

    /// Deletes a pod.
    pub fn delete_pod(&mut self, name: &str) {
        self.d.delete(&ObjectKey::pod("default", name));
        self.d.settle();
    }

    /// Marks a pod Succeeded.
    pub fn finish_pod(&mut self, name: &str) {
        self.d
            .set_phase(&ObjectKey::pod("default", name), "Succeeded");
        self.d.settle();
    }

    /// Deletes a node.
    pub fn delete_node(&mut self, name: &str) {
        self.d.delete(&ObjectKey::cluster(Kind::Node, name));
        self.d.settle();
    }

    /// Deletes a reservation.
    pub fn delete_reservation(&mut self, name: &str) {
        self.d.delete(&ObjectKey::cluster(Kind::Reservation, name));
        self.d.settle();
    }

    /// Moves time forward by `ms`, firing the timers due on the way in order.
    pub fn advance(&mut self, ms: Time) {
        self.d.advance(ms);
    }

    /// Runs the scheduler and performs its effects until nothing is left.
    pub fn settle(&mut self) {
        self.d.settle();
    }

    /// The node a pod is bound to.
    pub fn bound(&self, name: &str) -> Option<String> {
        self.d.bound(name)
    }

    /// The reservation a pod allocated from (its annotation).
    pub fn allocated_from(&self, name: &str) -> Option<String> {
        let p = self.d.pod("default", name)?;
        ReservationAllocated::from_annotations(p.metadata.annotations.as_ref())
            .ok()
            .flatten()
            .map(|a| a.name)
    }

    /// A reservation as the API server holds it.
    pub fn res(&self, name: &str) -> Arc<Reservation> {
        self.d
            .reservation(name)
            .cloned()
            .unwrap_or_else(|| panic!("no reservation {name}"))
    }

    /// A reservation's phase in the API server.
    pub fn phase(&self, name: &str) -> String {
        self.d
            .reservation(name)
            .map(|r| r.phase().to_string())
            .unwrap_or_else(|| "<deleted>".into())
    }

    /// Owners in the reservation's status, `ns/name`.
    pub fn owners(&self, name: &str) -> Vec<String> {
        self.res(name)
            .status
            .iter()
            .flat_map(|s| s.current_owners.iter())
            .map(|o| {
                format!(
                    "{}/{}",
                    o.namespace.as_deref().unwrap_or(""),
                    o.name.as_deref().unwrap_or("")
                )
            })
            .collect()
    }

    /// The last PodScheduled message of a pod.
    pub fn message(&self, name: &str) -> Option<String> {
        self.d.condition(name).map(|(_, m)| m)
    }

    /// A scheduler that starts from the API server's objects, as after a restart (a LIST
    /// of every kind, shuffled and interleaved), before any scheduling cycle.
    pub fn rebuilt(&self) -> Scheduler {
        self.d.rebuilt()
    }
}

/// What must be equal between a running scheduler and one rebuilt from the objects: per node
/// the requests, what reservations hold, held ports and the number of pods; per reservation
/// its phase, node, owners and what they took.
pub fn accounting(s: &Scheduler) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for n in s.cluster.cache.nodes() {
        let mut ports: Vec<String> = n
            .reserved_ports
            .iter()
            .map(|p| p.port.to_string())
            .collect();
        ports.sort();
        let mut pods: BTreeSet<String> = BTreeSet::new();
        for p in &n.pods {
            pods.insert(format!("{}:{}", p.key.kind, p.key));
        }
        out.insert(
            format!("node/{}", n.name),
            format!(
                "requested={:?} reserved={:?} ports={ports:?} pods={pods:?}",
                n.requested, n.reserved
            ),
        );
    }
    for r in s.cluster.reservations.iter() {
        let owners: Vec<String> = r
            .owner_pods
            .iter()
            .map(|(k, o)| format!("{k}:{}", o.bound))
            .collect();
        out.insert(
            format!("reservation/{}", r.name),
            format!(
                "phase={} node={:?} owners={owners:?} requested={:?} hold={:?}",
                r.phase,
                r.node_name,
                r.requested,
                r.hold()
            ),
        );
    }
    out
}

/// The annotation key, re-exported for tests.
pub const ALLOCATED: &str = ANNOTATION_RESERVATION_ALLOCATED;

/// `n` reservations already Available (as a restarted scheduler finds them), 100m CPU and
/// 100Mi each, reusable, spread round-robin over `nodes`, owned by pods labelled
/// `app=g<i % groups>`: the reservation benchmark's cluster.
pub fn available_reservations(nodes: &[String], n: usize, groups: usize) -> Vec<Arc<Reservation>> {
    let groups = groups.max(1);
    (0..n)
        .filter_map(|i| {
            let node = nodes.get(i % nodes.len().max(1))?;
            let mut r = reservation(&format!("r{i:05}"))
                .req("cpu", "100m")
                .req("memory", "100Mi")
                .reusable()
                .owner_label("app", &format!("g{}", i % groups))
                .build();
            r.status = serde_json::from_value(json!({
                "phase": "Available",
                "nodeName": node,
                "allocatable": {"cpu": "100m", "memory": "100Mi"},
                "conditions": [
                    {"type": "Scheduled", "status": "True", "reason": "Scheduled"},
                    {"type": "Ready", "status": "True", "reason": "Available"}
                ]
            }))
            .ok();
            Some(Arc::new(r))
        })
        .collect()
}
