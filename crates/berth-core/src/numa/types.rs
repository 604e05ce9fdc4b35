//! Compact input types of the NUMA domain code: resource names and integer amounts, per-zone
//! availability, a pod's per-container requests, and the node's Topology Manager config.
//!
//! Amounts are integers in the unit of [`berth_api::quantity::parse_resource`]: milli-CPU for
//! `cpu`, whole units (bytes, counts) for everything else.

use std::borrow::Borrow;
use std::fmt;
use std::sync::{Arc, LazyLock};

use berth_api::nrt::{
    NodeResourceTopology, ANNOTATION_POD_FINGERPRINT, ATTRIBUTE_POD_FINGERPRINT,
    ATTRIBUTE_POD_FINGERPRINT_METHOD, ATTRIBUTE_TM_MAX_NUMA_NODES, ATTRIBUTE_TM_POLICY,
    ATTRIBUTE_TM_SCOPE, NUMA_ZONE_NAME_PREFIX, ZONE_TYPE_NUMA_NODE,
};
use berth_api::quantity::{parse_resource, QuantityError};
use smallvec::SmallVec;

use super::fingerprint::FingerprintMethod;

/// Highest NUMA id + 1 the domain code handles (NUMA ids index a `u64` bitmask).
pub const MAX_NUMA_ZONES: u8 = 64;

/// A resource name (`cpu`, `memory`, `hugepages-1Gi`, `vendor.com/dev`...), cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceName(Arc<str>);

/// The names every pod and zone carry share one allocation each, so a name comparison on
/// the per-node path finds them equal by address ([`same_name`]) without reading the
/// bytes: the zones' own copies were a cache miss per node, a sixth of a NUMA cycle.
fn well_known(name: &str) -> Option<&'static Arc<str>> {
    static CPU: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from("cpu"));
    static MEMORY: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from("memory"));
    static PODS: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from("pods"));
    static EPHEMERAL: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from("ephemeral-storage"));
    static HUGE_2M: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from("hugepages-2Mi"));
    static HUGE_1G: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from("hugepages-1Gi"));
    Some(match name {
        "cpu" => &CPU,
        "memory" => &MEMORY,
        "pods" => &PODS,
        "ephemeral-storage" => &EPHEMERAL,
        "hugepages-2Mi" => &HUGE_2M,
        "hugepages-1Gi" => &HUGE_1G,
        _ => return None,
    })
}

/// `a == b`, answered from the addresses when both are the same (shared) name.
#[inline]
pub(crate) fn same_name(a: &str, b: &str) -> bool {
    a.len() == b.len() && (std::ptr::eq(a.as_ptr(), b.as_ptr()) || a == b)
}

impl ResourceName {
    /// A resource name.
    pub fn new(name: &str) -> Self {
        match well_known(name) {
            Some(shared) => Self(shared.clone()),
            None => Self(Arc::from(name)),
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `cpu`?
    pub fn is_cpu(&self) -> bool {
        is_cpu(self.as_str())
    }
}

impl fmt::Debug for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Borrow<str> for ResourceName {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for ResourceName {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for ResourceName {
    fn from(s: String) -> Self {
        match well_known(&s) {
            Some(shared) => Self(shared.clone()),
            None => Self(Arc::from(s)),
        }
    }
}

impl PartialEq<str> for ResourceName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ResourceName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// `cpu`.
pub fn is_cpu(name: &str) -> bool {
    name == "cpu"
}

/// `hugepages-*`.
pub fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// A Kubernetes-native resource: unprefixed, or prefixed within `kubernetes.io/`.
pub fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Resources the kubelet must bind to NUMA nodes: `cpu`, `memory`, `hugepages-*`.
pub fn is_numa_affine(name: &str) -> bool {
    name == "cpu" || name == "memory" || is_hugepages(name)
}

/// Resources that *may* have no NUMA affinity: `ephemeral-storage`, `storage`, and every
/// non-native (device / extended) resource.
pub fn is_host_level(name: &str) -> bool {
    name == "ephemeral-storage" || name == "storage" || !is_native_resource(name)
}

/// Resources every node reports in allocatable (kube-scheduler's `NodeInfo.Allocatable`
/// always carries them, even at zero).
pub fn is_always_allocatable(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "pods" | "ephemeral-storage")
}

/// Amount in whole units as `Quantity.Value()` gives it: CPU millis rounded **up** to cores,
/// everything else unchanged.
pub fn whole_value(name: &str, amount: i64) -> i64 {
    whole_amount(is_cpu(name), amount)
}

/// [`whole_value`] with the name already resolved (`cpu`: whether it is `cpu`).
#[inline]
pub fn whole_amount(cpu: bool, amount: i64) -> i64 {
    if cpu {
        amount.div_euclid(1000) + i64::from(amount.rem_euclid(1000) != 0)
    } else {
        amount
    }
}

/// A small list of `(resource, amount)` with unique names, in insertion order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources(SmallVec<[(ResourceName, i64); 4]>);

impl Resources {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses `(name, quantity text)` pairs with [`parse_resource`].
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, QuantityError> {
        let mut out = Self::new();
        for (name, text) in pairs {
            out.set(ResourceName::new(name), parse_resource(name, text)?);
        }
        Ok(out)
    }

    /// The amount of `name`, if listed.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.0
            .iter()
            .find(|(n, _)| same_name(n.as_str(), name))
            .map(|(_, v)| *v)
    }

    /// Whether `name` is listed (even at zero).
    pub fn contains(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| same_name(n.as_str(), name))
    }

    /// Sets `name` to `amount`.
    pub fn set(&mut self, name: ResourceName, amount: i64) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = amount,
            None => self.0.push((name, amount)),
        }
    }

    /// Adds `amount` to `name` (saturating), listing it if absent.
    pub fn add(&mut self, name: &ResourceName, amount: i64) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = slot.1.saturating_add(amount),
            None => self.0.push((name.clone(), amount)),
        }
    }

    /// Raises `name` to at least `amount`, listing it if absent.
    pub fn max_with(&mut self, name: &ResourceName, amount: i64) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = slot.1.max(amount),
            None => self.0.push((name.clone(), amount)),
        }
    }

    /// `(name, amount)` pairs.
    pub fn iter(&self) -> impl Iterator<Item = (&ResourceName, i64)> {
        self.0.iter().map(|(n, v)| (n, *v))
    }

    /// Number of listed resources.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Nothing listed?
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(ResourceName, i64)> for Resources {
    fn from_iter<T: IntoIterator<Item = (ResourceName, i64)>>(iter: T) -> Self {
        let mut out = Self::new();
        for (n, v) in iter {
            out.set(n, v);
        }
        out
    }
}

impl<'a> FromIterator<(&'a str, i64)> for Resources {
    fn from_iter<T: IntoIterator<Item = (&'a str, i64)>>(iter: T) -> Self {
        iter.into_iter()
            .map(|(n, v)| (ResourceName::new(n), v))
            .collect()
    }
}

/// A pod's QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QosClass {
    /// Requests == limits for cpu and memory in every container.
    Guaranteed,
    /// Anything in between.
    Burstable,
    /// No requests or limits at all.
    BestEffort,
}

/// One init container's requests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct InitContainerRequest {
    /// Its requests.
    pub requests: Resources,
    /// `restartPolicy: Always` (a sidecar).
    pub sidecar: bool,
}

/// What the NUMA code needs to know about a pod: QoS, per-container requests, overhead.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodNumaRequest {
    qos: QosClass,
    init_containers: SmallVec<[InitContainerRequest; 1]>,
    containers: SmallVec<[Resources; 2]>,
    overhead: Resources,
    effective: Resources,
    non_native: bool,
}

impl PodNumaRequest {
    /// Builds the request; the pod's effective request is computed once here.
    pub fn new(
        qos: QosClass,
        init_containers: impl IntoIterator<Item = InitContainerRequest>,
        containers: impl IntoIterator<Item = Resources>,
        overhead: Resources,
    ) -> Self {
        let init_containers: SmallVec<[InitContainerRequest; 1]> =
            init_containers.into_iter().collect();
        let containers: SmallVec<[Resources; 2]> = containers.into_iter().collect();
        // Effective request as the plugin computes it: per resource, the higher of the sum over
        // app containers and the maximum over init containers (sidecars included in the
        // maximum, not added to the sum), then the pod overhead on top.
        let mut effective = Resources::new();
        for c in &containers {
            for (n, v) in c.iter() {
                effective.add(n, v);
            }
        }
        for ic in &init_containers {
            for (n, v) in ic.requests.iter() {
                effective.max_with(n, v);
            }
        }
        for (n, v) in overhead.iter() {
            effective.add(n, v);
        }
        let non_native = init_containers
            .iter()
            .map(|ic| &ic.requests)
            .chain(containers.iter())
            .any(|r| r.iter().any(|(n, _)| !is_native_resource(n.as_str())));
        Self {
            qos,
            init_containers,
            containers,
            overhead,
            effective,
            non_native,
        }
    }

    /// A single-container pod (handy in tests and simulations).
    pub fn single(qos: QosClass, requests: Resources) -> Self {
        Self::new(qos, [], [requests], Resources::new())
    }

    /// QoS class.
    pub fn qos(&self) -> QosClass {
        self.qos
    }

    /// Init containers (regular and sidecars) in spec order.
    pub fn init_containers(&self) -> &[InitContainerRequest] {
        &self.init_containers
    }

    /// App containers in spec order.
    pub fn containers(&self) -> &[Resources] {
        &self.containers
    }

    /// Pod overhead.
    pub fn overhead(&self) -> &Resources {
        &self.overhead
    }

    /// The pod's effective request (what pod scope aligns and what the reserve cache
    /// subtracts).
    pub fn effective(&self) -> &Resources {
        &self.effective
    }

    /// Whether any (init) container requests a non-native resource.
    pub fn includes_non_native(&self) -> bool {
        self.non_native
    }

    /// Whether the pod holds exclusive resources, the way the scheduler-side fingerprint and
    /// the foreign-pod detector decide it: an app or sidecar container (regular init
    /// containers do not count, their resources are released) requests a non-native resource
    /// the node's NRT lists (`nrt_has`), or the pod is Guaranteed and requests an integral
    /// CPU amount, memory or hugepages.
    pub fn has_exclusive_resources(&self, nrt_has: impl Fn(&str) -> bool) -> bool {
        let guaranteed = self.qos == QosClass::Guaranteed;
        let exclusive = |name: &str, amount: i64| {
            if !is_native_resource(name) {
                return nrt_has(name);
            }
            if !guaranteed {
                return false;
            }
            if is_cpu(name) {
                return amount > 0 && amount % 1000 == 0;
            }
            (name == "memory" || is_hugepages(name)) && amount > 0
        };
        self.containers
            .iter()
            .chain(
                self.init_containers
                    .iter()
                    .filter(|ic| ic.sidecar)
                    .map(|ic| &ic.requests),
            )
            .any(|r| r.iter().any(|(n, v)| exclusive(n.as_str(), v)))
    }
}

/// One NUMA zone: its id and its distances. Its available amounts are in [`NumaZones`]
/// ([`NumaZones::available_at`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaZone {
    /// NUMA id (`node-<id>`), below [`MAX_NUMA_ZONES`].
    pub id: u8,
    costs: SmallVec<[(u8, i64); 8]>,
}

impl NumaZone {
    /// Distance to NUMA zone `to` (`None` if the NRT does not say).
    pub fn cost_to(&self, to: u8) -> Option<i64> {
        self.costs.iter().find(|(id, _)| *id == to).map(|(_, c)| *c)
    }
}

/// The NUMA zones of one node, in NRT order (the order matters only for LeastNUMANodes
/// tie-breaking, as upstream).
///
/// What Filter and Score read on every node, the names, the ids and the available amounts,
/// is kept apart from the distances, in one flat array: a few cache lines per node where a
/// list of zones, each with its own inline amounts and distances, took two lines a zone
/// (the per-node NUMA path is bound by those misses more than by its instructions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaZones {
    names: SmallVec<[ResourceName; 4]>,
    /// The zones' NUMA ids, by position.
    ids: SmallVec<[u8; 8]>,
    /// `avail[position * names.len() + resource index]`: `None` when the zone does not
    /// list the resource.
    avail: SmallVec<[Option<i64>; 16]>,
    zones: SmallVec<[NumaZone; 4]>,
}

impl NumaZones {
    /// No zones.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a zone with its available resources and its distances (`(numa id, cost)`).
    /// Zones with an id at or above [`MAX_NUMA_ZONES`] are ignored.
    pub fn push_zone(
        &mut self,
        id: u8,
        available: impl IntoIterator<Item = (ResourceName, i64)>,
        costs: impl IntoIterator<Item = (u8, i64)>,
    ) {
        if id >= MAX_NUMA_ZONES {
            return;
        }
        let mut slots: SmallVec<[Option<i64>; 8]> = SmallVec::from_elem(None, self.names.len());
        for (name, amount) in available {
            let idx = match self.resource_index(name.as_str()) {
                Some(i) => i,
                None => {
                    self.add_name(name);
                    slots.push(None);
                    self.names.len() - 1
                }
            };
            if let Some(slot) = slots.get_mut(idx) {
                *slot = Some(amount);
            }
        }
        self.ids.push(id);
        self.avail.extend(slots);
        self.zones.push(NumaZone {
            id,
            costs: costs.into_iter().collect(),
        });
    }

    /// A resource no zone listed so far: every zone's row grows by one slot (`None`).
    fn add_name(&mut self, name: ResourceName) {
        let n = self.names.len();
        let rows = self.ids.len();
        let mut avail: SmallVec<[Option<i64>; 16]> = SmallVec::with_capacity(rows * (n + 1));
        for pos in 0..rows {
            match self.avail.get(pos * n..(pos + 1) * n) {
                Some(row) => avail.extend(row.iter().copied()),
                None => avail.extend(std::iter::repeat_n(None, n)),
            }
            avail.push(None);
        }
        self.avail = avail;
        self.names.push(name);
    }

    /// Builder-style [`NumaZones::push_zone`] taking `&str` names.
    pub fn with_zone(mut self, id: u8, available: &[(&str, i64)], costs: &[(u8, i64)]) -> Self {
        self.push_zone(
            id,
            available.iter().map(|(n, v)| (ResourceName::new(n), *v)),
            costs.iter().copied(),
        );
        self
    }

    /// The zones.
    pub fn zones(&self) -> &[NumaZone] {
        &self.zones
    }

    /// Number of zones.
    pub fn len(&self) -> usize {
        self.zones.len()
    }

    /// No zones?
    pub fn is_empty(&self) -> bool {
        self.zones.is_empty()
    }

    /// Every resource any zone lists.
    pub fn resource_names(&self) -> &[ResourceName] {
        &self.names
    }

    /// Index of `name` in [`NumaZones::resource_names`].
    pub fn resource_index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| same_name(n.as_str(), name))
    }

    /// Whether any zone lists `name`.
    pub fn has_resource(&self, name: &str) -> bool {
        self.resource_index(name).is_some()
    }

    /// Available amount of `name` in the zone with NUMA id `id`.
    pub fn available(&self, id: u8, name: &str) -> Option<i64> {
        let idx = self.resource_index(name)?;
        let pos = self.ids.iter().position(|&z| z == id)?;
        self.available_at(pos, idx)
    }

    /// Available amount of the resource at index `idx` (of
    /// [`NumaZones::resource_names`]) in the zone at position `pos`, if the zone lists it.
    #[inline]
    pub fn available_at(&self, pos: usize, idx: usize) -> Option<i64> {
        let n = self.names.len();
        if idx >= n {
            return None;
        }
        self.avail.get(pos * n + idx).copied().flatten()
    }

    /// The NUMA ids of the zones, by position.
    #[inline]
    pub fn ids(&self) -> &[u8] {
        &self.ids
    }

    /// Whether no two zones have the same NUMA id (an NRT may list one twice).
    pub fn ids_distinct(&self) -> bool {
        let mut seen = 0u64;
        for &id in &self.ids {
            let bit = 1u64 << (id % MAX_NUMA_ZONES);
            if seen & bit != 0 {
                return false;
            }
            seen |= bit;
        }
        true
    }

    /// The available amounts of the resource at index `idx` (of
    /// [`NumaZones::resource_names`]), zone by zone in position order (`None` where the
    /// zone does not list it); nothing when `idx` is out of range. One strided walk of the
    /// flat array, where [`NumaZones::available_at`] per zone bounds-checks each time.
    #[inline]
    pub fn column(&self, idx: usize) -> impl Iterator<Item = Option<i64>> + '_ {
        let n = self.names.len();
        let from = if idx < n { idx } else { self.avail.len() };
        self.avail
            .get(from..)
            .unwrap_or(&[])
            .iter()
            .step_by(n.max(1))
            .copied()
    }

    /// Pessimistic overallocation: subtracts `request` from **every** zone listing the
    /// resource, clamping at 0.
    pub fn subtract_from_every_zone(&mut self, request: &Resources) {
        for (name, amount) in request.iter() {
            if amount <= 0 {
                continue;
            }
            let Some(idx) = self.resource_index(name.as_str()) else {
                continue;
            };
            let n = self.names.len();
            for pos in 0..self.ids.len() {
                if let Some(Some(av)) = self.avail.get_mut(pos * n + idx) {
                    *av = av.saturating_sub(amount).max(0);
                }
            }
        }
    }

    pub(crate) fn flat_len(&self) -> usize {
        self.zones.len() * self.names.len()
    }
}

/// Topology Manager policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TmPolicy {
    /// `none`.
    #[default]
    None,
    /// `best-effort`.
    BestEffort,
    /// `restricted`.
    Restricted,
    /// `single-numa-node`.
    SingleNumaNode,
}

impl TmPolicy {
    /// Parses the kubelet value (`none`, `best-effort`, `restricted`, `single-numa-node`).
    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "none" => Self::None,
            "best-effort" => Self::BestEffort,
            "restricted" => Self::Restricted,
            "single-numa-node" => Self::SingleNumaNode,
            _ => return None,
        })
    }
}

/// Topology Manager scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TmScope {
    /// `container`.
    #[default]
    Container,
    /// `pod`.
    Pod,
}

impl TmScope {
    /// Parses the kubelet value (`container`, `pod`).
    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "container" => Self::Container,
            "pod" => Self::Pod,
            _ => return None,
        })
    }
}

/// Default `topologyManagerMaxNUMANodes`.
pub const DEFAULT_MAX_NUMA_NODES: u32 = 8;
/// Upper clamp for `topologyManagerMaxNUMANodes`.
pub const LIMIT_MAX_NUMA_NODES: u32 = 1024;

/// The node's kubelet Topology Manager configuration as the NRT publishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TopologyManagerConfig {
    /// Policy.
    pub policy: TmPolicy,
    /// Scope.
    pub scope: TmScope,
    /// Max NUMA nodes (LeastNUMANodes scoring step).
    pub max_numa_nodes: u32,
}

impl Default for TopologyManagerConfig {
    fn default() -> Self {
        Self {
            policy: TmPolicy::None,
            scope: TmScope::Container,
            max_numa_nodes: DEFAULT_MAX_NUMA_NODES,
        }
    }
}

impl TopologyManagerConfig {
    /// A config with the given policy and scope (default max NUMA nodes).
    pub fn new(policy: TmPolicy, scope: TmScope) -> Self {
        Self {
            policy,
            scope,
            ..Self::default()
        }
    }

    /// Derives the config: defaults, then the deprecated `topologyPolicies[0]`, then the
    /// top-level attributes (preferred; invalid values are ignored).
    pub fn from_nrt_parts<'a>(
        topology_policies: &[String],
        attributes: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        let mut conf = Self::default();
        if let Some(first) = topology_policies.first() {
            use berth_api::nrt::topology_policy as tp;
            let (policy, scope) = match first.as_str() {
                tp::SINGLE_NUMA_NODE_POD_LEVEL => (TmPolicy::SingleNumaNode, TmScope::Pod),
                tp::SINGLE_NUMA_NODE_CONTAINER_LEVEL => {
                    (TmPolicy::SingleNumaNode, TmScope::Container)
                }
                tp::BEST_EFFORT_POD_LEVEL => (TmPolicy::BestEffort, TmScope::Pod),
                tp::BEST_EFFORT_CONTAINER_LEVEL => (TmPolicy::BestEffort, TmScope::Container),
                tp::RESTRICTED_POD_LEVEL => (TmPolicy::Restricted, TmScope::Pod),
                tp::RESTRICTED_CONTAINER_LEVEL => (TmPolicy::Restricted, TmScope::Container),
                _ => (conf.policy, conf.scope),
            };
            conf.policy = policy;
            conf.scope = scope;
        }
        for (name, value) in attributes {
            match name {
                ATTRIBUTE_TM_SCOPE => {
                    if let Some(s) = TmScope::parse(value) {
                        conf.scope = s;
                    }
                }
                ATTRIBUTE_TM_POLICY => {
                    if let Some(p) = TmPolicy::parse(value) {
                        conf.policy = p;
                    }
                }
                ATTRIBUTE_TM_MAX_NUMA_NODES => {
                    if let Ok(v) = value.parse::<i64>() {
                        if v > 1 {
                            conf.max_numa_nodes = v.min(i64::from(LIMIT_MAX_NUMA_NODES)) as u32;
                        }
                    }
                }
                _ => {}
            }
        }
        conf
    }
}

/// Where an NRT's pod fingerprint came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NrtFingerprint {
    /// The signature (`pfp0v001...`).
    pub signature: String,
    /// The method attribute, when the signature came from the attribute and the agent said.
    pub method: Option<FingerprintMethod>,
    /// True when read from the legacy annotation (method is then always "all").
    pub from_annotation: bool,
}

/// One node's NRT, converted: NUMA zones with their **available** amounts, TM config,
/// fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTopology {
    /// NUMA zones (type `Node`, named `node-<id>`, id below 64), available amounts.
    pub zones: NumaZones,
    /// Topology Manager config.
    pub tm: TopologyManagerConfig,
    /// Pod-set fingerprint the agent published (attribute first, annotation fallback).
    pub fingerprint: Option<NrtFingerprint>,
}

impl NodeTopology {
    /// Whether any NUMA zone lists `name` (the "non-native resource is exclusive iff the NRT
    /// lists it" rule).
    pub fn has_resource(&self, name: &str) -> bool {
        self.zones.has_resource(name)
    }

    /// Converts an NRT object. Only the `available` quantities are kept.
    pub fn from_nrt(nrt: &NodeResourceTopology) -> Result<Self, NumaConvertError> {
        let mut zones = NumaZones::new();
        for zone in &nrt.spec.zones {
            if zone.type_ != ZONE_TYPE_NUMA_NODE {
                continue;
            }
            let Some(id) = numa_id(&zone.name) else {
                continue;
            };
            let mut available: SmallVec<[(ResourceName, i64); 8]> = SmallVec::new();
            for r in &zone.resources {
                let amount = parse_resource(&r.name, &r.available.0).map_err(|source| {
                    NumaConvertError::Quantity {
                        zone: zone.name.clone(),
                        resource: r.name.clone(),
                        source,
                    }
                })?;
                available.push((ResourceName::new(&r.name), amount));
            }
            let costs = zone
                .costs
                .iter()
                .filter_map(|c| numa_id(&c.name).map(|to| (to, c.value)));
            zones.push_zone(id, available, costs);
        }
        let tm = TopologyManagerConfig::from_nrt_parts(
            &nrt.spec.topology_policies,
            nrt.spec
                .attributes
                .iter()
                .map(|a| (a.name.as_str(), a.value.as_str())),
        );
        let fingerprint = match nrt.attribute(ATTRIBUTE_POD_FINGERPRINT) {
            Some(sig) if !sig.is_empty() => Some(NrtFingerprint {
                signature: sig.to_string(),
                method: nrt
                    .attribute(ATTRIBUTE_POD_FINGERPRINT_METHOD)
                    .map(FingerprintMethod::from_attribute),
                from_annotation: false,
            }),
            _ => nrt
                .annotation(ANNOTATION_POD_FINGERPRINT)
                .filter(|s| !s.is_empty())
                .map(|sig| NrtFingerprint {
                    signature: sig.to_string(),
                    method: None,
                    from_annotation: true,
                }),
        };
        Ok(Self {
            zones,
            tm,
            fingerprint,
        })
    }
}

/// Parses a canonical NUMA zone name `node-<id>`; ids at or above [`MAX_NUMA_ZONES`] are
/// rejected.
pub fn numa_id(zone_name: &str) -> Option<u8> {
    let digits = zone_name.strip_prefix(NUMA_ZONE_NAME_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id: u32 = digits.parse().ok()?;
    (id < u32::from(MAX_NUMA_ZONES)).then_some(id as u8)
}

/// An NRT that cannot be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NumaConvertError {
    /// A zone's `available` quantity does not parse.
    #[error("NRT zone {zone:?} resource {resource:?}: {source}")]
    Quantity {
        /// Zone name.
        zone: String,
        /// Resource name.
        resource: String,
        /// Parse error.
        source: QuantityError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    fn res(pairs: &[(&str, &str)]) -> Resources {
        Resources::parse(pairs.iter().copied()).expect("valid quantities")
    }

    #[test]
    fn resource_classes() {
        assert!(
            is_numa_affine("cpu") && is_numa_affine("memory") && is_numa_affine("hugepages-2Mi")
        );
        assert!(!is_numa_affine("example.com/dev") && !is_numa_affine("ephemeral-storage"));
        assert!(is_native_resource("cpu") && is_native_resource("kubernetes.io/foo"));
        assert!(!is_native_resource("example.com/dev"));
        assert!(is_host_level("ephemeral-storage") && is_host_level("storage"));
        assert!(is_host_level("vendor/nic1") && !is_host_level("memory"));
        assert_eq!(whole_value("cpu", 1500), 2);
        assert_eq!(whole_value("cpu", 2000), 2);
        assert_eq!(whole_value("cpu", 0), 0);
        assert_eq!(whole_value("memory", 1500), 1500);
    }

    #[test]
    fn effective_request_takes_max_of_init_and_sum_of_app_plus_overhead() {
        let pod = PodNumaRequest::new(
            QosClass::Guaranteed,
            [
                InitContainerRequest {
                    requests: res(&[("cpu", "3"), ("memory", "1Gi")]),
                    sidecar: false,
                },
                InitContainerRequest {
                    requests: res(&[("cpu", "1")]),
                    sidecar: true,
                },
            ],
            [
                res(&[("cpu", "1"), ("memory", "2Gi")]),
                res(&[("cpu", "1"), ("example.com/dev", "1")]),
            ],
            res(&[("cpu", "100m")]),
        );
        let eff = pod.effective();
        assert_eq!(eff.get("cpu"), Some(3100));
        assert_eq!(eff.get("memory"), Some(2 << 30));
        assert_eq!(eff.get("example.com/dev"), Some(1));
        assert!(pod.includes_non_native());
    }

    #[test]
    fn exclusivity_mirrors_the_scheduler_side_rules() {
        let g = |r: Resources| PodNumaRequest::single(QosClass::Guaranteed, r);
        let nothing = |_: &str| false;
        assert!(g(res(&[("cpu", "2"), ("memory", "1Gi")])).has_exclusive_resources(nothing));
        // Fractional CPU alone is shared; memory > 0 makes a Guaranteed pod exclusive anyway.
        assert!(!g(res(&[("cpu", "1500m")])).has_exclusive_resources(nothing));
        assert!(g(res(&[("cpu", "1500m"), ("memory", "1")])).has_exclusive_resources(nothing));
        // Burstable: only devices listed in the NRT count.
        let b = PodNumaRequest::single(
            QosClass::Burstable,
            res(&[("cpu", "2"), ("vendor/nic", "1")]),
        );
        assert!(!b.has_exclusive_resources(nothing));
        assert!(b.has_exclusive_resources(|n| n == "vendor/nic"));
        // Regular init containers never count; sidecars do.
        let init_only = PodNumaRequest::new(
            QosClass::Burstable,
            [InitContainerRequest {
                requests: res(&[("vendor/nic", "1")]),
                sidecar: false,
            }],
            [res(&[("cpu", "100m")])],
            Resources::new(),
        );
        assert!(!init_only.has_exclusive_resources(|_| true));
        let sidecar = PodNumaRequest::new(
            QosClass::Burstable,
            [InitContainerRequest {
                requests: res(&[("vendor/nic", "1")]),
                sidecar: true,
            }],
            [res(&[("cpu", "100m")])],
            Resources::new(),
        );
        assert!(sidecar.has_exclusive_resources(|_| true));
    }

    #[test]
    fn tm_config_policies_then_attributes() {
        let tm = TopologyManagerConfig::from_nrt_parts(&[], []);
        assert_eq!(tm, TopologyManagerConfig::default());
        assert_eq!(
            (tm.policy, tm.scope, tm.max_numa_nodes),
            (TmPolicy::None, TmScope::Container, 8)
        );
        let tm = TopologyManagerConfig::from_nrt_parts(
            &["SingleNUMANodePodLevel".into(), "None".into()],
            [],
        );
        assert_eq!(
            (tm.policy, tm.scope),
            (TmPolicy::SingleNumaNode, TmScope::Pod)
        );
        // Level-less constants and unknown strings leave the defaults.
        let tm = TopologyManagerConfig::from_nrt_parts(&["Restricted".into()], []);
        assert_eq!(tm.policy, TmPolicy::None);
        let tm = TopologyManagerConfig::from_nrt_parts(
            &["SingleNUMANodePodLevel".into()],
            [
                ("topologyManagerPolicy", "best-effort"),
                ("topologyManagerScope", "bogus"),
                ("topologyManagerMaxNUMANodes", "4096"),
            ],
        );
        assert_eq!(
            (tm.policy, tm.scope, tm.max_numa_nodes),
            (TmPolicy::BestEffort, TmScope::Pod, 1024)
        );
        let tm = TopologyManagerConfig::from_nrt_parts(&[], [("topologyManagerMaxNUMANodes", "1")]);
        assert_eq!(tm.max_numa_nodes, 8);
        let tm = TopologyManagerConfig::from_nrt_parts(&[], [("topologyManagerMaxNUMANodes", "4")]);
        assert_eq!(tm.max_numa_nodes, 4);
    }

    #[test]
    fn numa_ids() {
        assert_eq!(numa_id("node-0"), Some(0));
        assert_eq!(numa_id("node-63"), Some(63));
        assert_eq!(numa_id("node-64"), None);
        assert_eq!(numa_id("node--1"), None);
        assert_eq!(numa_id("node-"), None);
        assert_eq!(numa_id("socket-0"), None);
    }

    #[test]
    fn converts_an_nrt() {
        let yaml = r#"
apiVersion: topology.node.k8s.io/v1alpha2
kind: NodeResourceTopology
metadata:
  name: worker-0
  annotations: {topology.node.k8s.io/fingerprint: pfp0v001e3a20cafb6299c30}
attributes:
- {name: nodeTopologyPodsFingerprint, value: pfp0v001a005acd77c3e38c6}
- {name: nodeTopologyPodsFingerprintMethod, value: with-exclusive-resources}
- {name: topologyManagerScope, value: pod}
- {name: topologyManagerPolicy, value: single-numa-node}
zones:
- name: node-1
  type: Node
  costs: [{name: node-0, value: 21}, {name: node-1, value: 10}]
  resources:
  - {name: cpu, capacity: "16", allocatable: "16", available: "16"}
  - {name: memory, capacity: 33822867456, allocatable: 33822867456, available: 1Gi}
- name: node-0
  type: Node
  costs: [{name: node-0, value: 10}, {name: node-1, value: 21}]
  resources:
  - {name: example.com/sriov-nic, capacity: "4", allocatable: "4", available: "3"}
  - {name: cpu, capacity: "16", allocatable: "14", available: 1500m}
- name: socket-0
  type: Socket
  resources: [{name: cpu, capacity: 1, allocatable: 1, available: 1}]
"#;
        let nrt: NodeResourceTopology = serde_yaml_ng::from_str(yaml).expect("yaml");
        let topo = NodeTopology::from_nrt(&nrt).expect("converts");
        assert_eq!(topo.zones.len(), 2);
        assert_eq!(topo.zones.zones()[0].id, 1);
        assert_eq!(topo.zones.available(1, "cpu"), Some(16000));
        assert_eq!(topo.zones.available(1, "memory"), Some(1 << 30));
        assert_eq!(topo.zones.available(1, "example.com/sriov-nic"), None);
        assert_eq!(topo.zones.available(0, "cpu"), Some(1500));
        assert_eq!(topo.zones.available(0, "example.com/sriov-nic"), Some(3));
        assert_eq!(topo.zones.zones()[0].cost_to(0), Some(21));
        assert_eq!(
            topo.tm,
            TopologyManagerConfig::new(TmPolicy::SingleNumaNode, TmScope::Pod)
        );
        let fp = topo.fingerprint.clone().expect("fingerprint");
        assert_eq!(fp.signature, "pfp0v001a005acd77c3e38c6");
        assert_eq!(fp.method, Some(FingerprintMethod::WithExclusiveResources));
        assert!(!fp.from_annotation);
        assert!(topo.has_resource("example.com/sriov-nic"));
    }

    #[test]
    fn fingerprint_annotation_fallback_and_bad_quantities() {
        let yaml = r#"
metadata:
  name: w
  annotations: {topology.node.k8s.io/fingerprint: pfp0v001e3a20cafb6299c30}
topologyPolicies: [SingleNUMANodeContainerLevel]
zones:
- {name: node-0, type: Node, resources: [{name: cpu, capacity: 4, allocatable: 4, available: 4}]}
"#;
        let nrt: NodeResourceTopology = serde_yaml_ng::from_str(yaml).expect("yaml");
        let topo = NodeTopology::from_nrt(&nrt).expect("converts");
        let fp = topo.fingerprint.clone().expect("fingerprint");
        assert!(fp.from_annotation);
        assert_eq!(fp.method, None);
        assert_eq!(
            topo.tm,
            TopologyManagerConfig::new(TmPolicy::SingleNumaNode, TmScope::Container)
        );

        let mut bad = nrt.clone();
        bad.spec.zones[0].resources[0].available =
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("four".into());
        assert!(matches!(
            NodeTopology::from_nrt(&bad),
            Err(NumaConvertError::Quantity { resource, .. }) if resource == "cpu"
        ));
    }

    #[test]
    fn worker_samples_convert() {
        // Two workers shaped like scheduler-plugins' NodeResourceTopologyMatch samples,
        // written in testdata as our own fixture.
        let text = include_str!("testdata/nrt-two-workers.yaml");
        let mut seen = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let nrt = NodeResourceTopology::deserialize(doc).expect("yaml");
            let topo = NodeTopology::from_nrt(&nrt).expect("converts");
            assert_eq!(topo.zones.len(), 2);
            assert_eq!(topo.tm.policy, TmPolicy::SingleNumaNode);
            assert_eq!(topo.tm.scope, TmScope::Container);
            assert_eq!(topo.zones.available(0, "cpu"), Some(3000));
            assert_eq!(topo.zones.available(1, "cpu"), Some(3000));
            seen.push((
                nrt.metadata.name.clone().unwrap_or_default(),
                topo.zones.available(0, "example.com/deviceA"),
                topo.zones.available(1, "example.com/deviceB"),
                topo.zones.available(1, "example.com/deviceA"),
            ));
        }
        assert_eq!(
            seen,
            vec![
                ("worker-a".to_string(), Some(1), Some(1), Some(2)),
                ("worker-b".to_string(), Some(3), Some(3), None),
            ]
        );
    }

    mod flat_zones {
        use super::super::*;
        use proptest::prelude::*;

        const NAMES: [&str; 5] = ["cpu", "memory", "hugepages-2Mi", "vendor/nic", "x/y"];

        /// Zones as listed: `(id, [(resource, amount)])`, each zone listing any subset.
        fn zones_spec() -> impl Strategy<Value = Vec<(u8, Vec<(usize, i64)>)>> {
            proptest::collection::vec(
                (
                    0u8..70,
                    proptest::collection::vec((0usize..NAMES.len(), -5i64..100), 0..5),
                ),
                0..9,
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]

            /// The flat layout answers every amount as the zones listed it, whatever order
            /// the resources first appear in, and subtracting from every zone acts on each
            /// listed amount alone.
            #[test]
            fn amounts_read_back_as_listed(spec in zones_spec(), take in 0i64..50) {
                let mut z = NumaZones::new();
                let mut want: Vec<(u8, Vec<Option<i64>>)> = Vec::new();
                for (id, res) in &spec {
                    z.push_zone(
                        *id,
                        res.iter().map(|&(n, v)| (ResourceName::new(NAMES[n]), v)),
                        [],
                    );
                    if *id < MAX_NUMA_ZONES {
                        let mut row = vec![None; NAMES.len()];
                        for &(n, v) in res {
                            row[n] = Some(v);
                        }
                        want.push((*id, row));
                    }
                }
                prop_assert_eq!(z.len(), want.len());
                prop_assert_eq!(z.ids().len(), want.len());
                let check = |z: &NumaZones, want: &[(u8, Vec<Option<i64>>)]| -> Result<(), TestCaseError> {
                    for (pos, (id, row)) in want.iter().enumerate() {
                        prop_assert_eq!(z.zones()[pos].id, *id);
                        for (n, name) in NAMES.iter().enumerate() {
                            let got = z.resource_index(name).and_then(|i| z.available_at(pos, i));
                            prop_assert_eq!(got, row[n], "zone {} {}", pos, name);
                        }
                        prop_assert_eq!(z.available_at(pos, z.resource_names().len()), None);
                    }
                    prop_assert_eq!(z.available_at(want.len(), 0), None);
                    Ok(())
                };
                check(&z, &want)?;
                let amounts = [("cpu", take), ("vendor/nic", 2), ("absent", 1)];
                let mut req = Resources::new();
                for (n, v) in amounts {
                    req.set(ResourceName::new(n), v);
                }
                z.subtract_from_every_zone(&req);
                for (_, row) in &mut want {
                    for (name, v) in amounts {
                        let Some(n) = NAMES.iter().position(|x| *x == name) else {
                            continue;
                        };
                        if v > 0 {
                            if let Some(a) = row[n].as_mut() {
                                *a = a.saturating_sub(v).max(0);
                            }
                        }
                    }
                }
                check(&z, &want)?;
            }
        }
    }
}
