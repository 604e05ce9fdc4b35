//! A fake API server around a [`Scheduler`] for reservation tests: it performs every effect
//! (binds, status writes, annotations, deletions) and feeds the result back as the watch
//! would, advances virtual time through the scheduler's timers, and rebuilds a scheduler
//! from its objects, as a restart would.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_api::annotations::{
    AnnotationCodec, ReservationAllocated, ANNOTATION_RESERVATION_ALLOCATED,
};
use berth_api::k8s_openapi::api::core::v1::{Node, Pod};
use berth_api::reservation::Reservation;
use serde_json::{json, Value};

use crate::effect::{Effect, Record};
use crate::event::Event;
use crate::object::{Kind, Object, ObjectKey};
use crate::scheduler::{Config, Scheduler};
use crate::time::Time;
use crate::Profile;

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

/// The API server and the scheduler watching it.
#[derive(Debug)]
pub struct Sim {
    /// The scheduler.
    pub s: Scheduler,
    /// Virtual time.
    pub now: Time,
    /// Nodes by name.
    pub nodes: BTreeMap<String, Arc<Node>>,
    /// Pods by namespace/name.
    pub pods: BTreeMap<(String, String), Arc<Pod>>,
    /// Reservations by name.
    pub reservations: BTreeMap<String, Arc<Reservation>>,
    /// Events recorded.
    pub events: Vec<Record>,
    /// Last PodScheduled message per pod.
    pub messages: BTreeMap<(String, String), String>,
}

impl Default for Sim {
    fn default() -> Self {
        Self::new(Profile::default_profile())
    }
}

fn key_of(ns: &str, name: &str) -> (String, String) {
    (ns.to_string(), name.to_string())
}

impl Sim {
    /// An empty cluster at time 1,000,000 s.
    pub fn new(profile: Profile) -> Self {
        Self {
            s: Scheduler::new(
                vec![profile],
                Config {
                    seed: 1,
                    ..Config::default()
                },
            ),
            now: 1_000_000_000,
            nodes: BTreeMap::new(),
            pods: BTreeMap::new(),
            reservations: BTreeMap::new(),
            events: Vec::new(),
            messages: BTreeMap::new(),
        }
    }

    /// Creates or replaces a node, then schedules.
    pub fn node(&mut self, n: Arc<Node>) {
        let name = n.metadata.name.clone().unwrap_or_default();
        self.nodes.insert(name, n.clone());
        self.s.handle(self.now, Event::Applied(Object::Node(n)));
        self.settle();
    }

    /// Creates or replaces a pod (creation time: now when unset), then schedules.
    pub fn pod(&mut self, p: Arc<Pod>) {
        let mut p = (*p).clone();
        if p.metadata.creation_timestamp.is_none() {
            p.metadata.creation_timestamp = super::status::meta_time(self.now);
        }
        let p = Arc::new(p);
        let ns = p
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = p.metadata.name.clone().unwrap_or_default();
        self.pods.insert(key_of(&ns, &name), p.clone());
        self.s.handle(self.now, Event::Applied(Object::Pod(p)));
        self.settle();
    }

    /// Creates or replaces a reservation (creation time: now when unset), then schedules.
    pub fn reservation(&mut self, r: Reservation) {
        let mut r = r;
        if r.metadata.creation_timestamp.is_none() {
            r.metadata.creation_timestamp = super::status::meta_time(self.now);
        }
        let name = r.metadata.name.clone().unwrap_or_default();
        let r = Arc::new(r);
        self.reservations.insert(name, r.clone());
        self.s
            .handle(self.now, Event::Applied(Object::Reservation(r)));
        self.settle();
    }

    /// Deletes a pod.
    pub fn delete_pod(&mut self, name: &str) {
        self.pods.remove(&key_of("default", name));
        self.s
            .handle(self.now, Event::Deleted(ObjectKey::pod("default", name)));
        self.settle();
    }

    /// Marks a pod Succeeded.
    pub fn finish_pod(&mut self, name: &str) {
        let Some(p) = self.pods.get(&key_of("default", name)) else {
            return;
        };
        let mut p = (**p).clone();
        p.status.get_or_insert_with(Default::default).phase = Some("Succeeded".into());
        self.pods
            .insert(key_of("default", name), Arc::new(p.clone()));
        self.s
            .handle(self.now, Event::Applied(Object::Pod(Arc::new(p))));
        self.settle();
    }

    /// Deletes a node.
    pub fn delete_node(&mut self, name: &str) {
        self.nodes.remove(name);
        self.s.handle(
            self.now,
            Event::Deleted(ObjectKey::cluster(Kind::Node, name)),
        );
        self.settle();
    }

    /// Deletes a reservation.
    pub fn delete_reservation(&mut self, name: &str) {
        self.reservations.remove(name);
        self.s.handle(
            self.now,
            Event::Deleted(ObjectKey::cluster(Kind::Reservation, name)),
        );
        self.settle();
    }

    /// Moves time forward by `ms`, firing the timers due on the way in order.
    pub fn advance(&mut self, ms: Time) {
        let until = self.now + ms;
        for _ in 0..10_000 {
            match self.s.poll_timeout() {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    self.s.handle_timeout(self.now);
                    self.settle();
                }
                _ => break,
            }
        }
        self.now = until;
        self.s.handle_timeout(self.now);
        self.settle();
    }

    /// Runs the scheduler and performs its effects until nothing is left.
    pub fn settle(&mut self) {
        for _ in 0..10_000 {
            self.s.run_until_idle(self.now);
            let effects: Vec<Effect> = std::iter::from_fn(|| self.s.poll_effect()).collect();
            if effects.is_empty() {
                return;
            }
            for e in effects {
                self.perform(e);
            }
        }
        panic!("the scheduler did not settle");
    }

    fn perform(&mut self, e: Effect) {
        let now = self.now;
        match e {
            Effect::Bind {
                pod,
                node,
                annotations,
                ..
            } => {
                let k = key_of(&pod.namespace, &pod.name);
                let Some(p) = self.pods.get(&k) else {
                    return;
                };
                let mut p = (**p).clone();
                p.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(annotations);
                p.spec.get_or_insert_with(Default::default).node_name = Some(node);
                let p = Arc::new(p);
                self.pods.insert(k, p.clone());
                self.s.handle(now, Event::Applied(Object::Pod(p)));
            }
            Effect::AnnotatePod { pod, annotations } => {
                let k = key_of(&pod.namespace, &pod.name);
                let Some(p) = self.pods.get(&k) else {
                    return;
                };
                let mut p = (**p).clone();
                p.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(annotations);
                let p = Arc::new(p);
                self.pods.insert(k, p.clone());
                self.s.handle(now, Event::Applied(Object::Pod(p)));
            }
            Effect::ReservationStatus { name, status, .. } => {
                let Some(r) = self.reservations.get(&name) else {
                    return;
                };
                let mut r = (**r).clone();
                r.status = Some(status);
                let r = Arc::new(r);
                self.reservations.insert(name, r.clone());
                self.s.handle(now, Event::Applied(Object::Reservation(r)));
            }
            Effect::Delete { key, .. } => match key.kind {
                Kind::Pod => {
                    self.pods.remove(&key_of(&key.namespace, &key.name));
                    self.s.handle(now, Event::Deleted(key));
                }
                Kind::Reservation => {
                    self.reservations.remove(&*key.name);
                    self.s.handle(now, Event::Deleted(key));
                }
                _ => {}
            },
            Effect::PodCondition { pod, message, .. } => {
                self.messages
                    .insert(key_of(&pod.namespace, &pod.name), message);
            }
            Effect::Record(r) => self.events.push(r),
            _ => {}
        }
    }

    /// The node a pod is bound to.
    pub fn bound(&self, name: &str) -> Option<String> {
        self.pods
            .get(&key_of("default", name))?
            .spec
            .as_ref()?
            .node_name
            .clone()
    }

    /// The reservation a pod allocated from (its annotation).
    pub fn allocated_from(&self, name: &str) -> Option<String> {
        let p = self.pods.get(&key_of("default", name))?;
        ReservationAllocated::from_annotations(p.metadata.annotations.as_ref())
            .ok()
            .flatten()
            .map(|a| a.name)
    }

    /// A reservation as the API server holds it.
    pub fn res(&self, name: &str) -> Arc<Reservation> {
        self.reservations
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("no reservation {name}"))
    }

    /// A reservation's phase in the API server.
    pub fn phase(&self, name: &str) -> String {
        self.reservations
            .get(name)
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
    pub fn message(&self, name: &str) -> Option<&str> {
        self.messages
            .get(&key_of("default", name))
            .map(String::as_str)
    }

    /// A scheduler that starts from the API server's objects, as after a restart.
    pub fn rebuilt(&self, profile: Profile) -> Scheduler {
        let mut s = Scheduler::new(
            vec![profile],
            Config {
                seed: 1,
                ..Config::default()
            },
        );
        for n in self.nodes.values() {
            s.handle(self.now, Event::Applied(Object::Node(n.clone())));
        }
        for r in self.reservations.values() {
            s.handle(self.now, Event::Applied(Object::Reservation(r.clone())));
        }
        for p in self.pods.values() {
            s.handle(self.now, Event::Applied(Object::Pod(p.clone())));
        }
        s
    }
}

/// What must be equal between a running scheduler and one rebuilt from the objects: per node
/// the requests, what reservations hold, held ports and the number of pods; per reservation
/// its phase, node, owners and what they took.
pub fn accounting(s: &Scheduler) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for n in s.cluster.nodes() {
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
