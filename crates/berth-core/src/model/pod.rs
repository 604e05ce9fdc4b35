//! [`PodInfo`]: what the scheduler needs of a pod, computed once when the pod is seen.

use std::sync::{Arc, OnceLock};

use berth_api::k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec};
use berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use berth_api::quantity::{ParsedQuantity, QuantityError};
use smallvec::SmallVec;

use crate::model::selector::Labels;
use crate::numa::PodNumaRequest;
use crate::object::ObjectKey;
use crate::resources::{ResourceId, ResourceNames, Resources, TooManyResources};
use crate::time::Time;

/// kube-scheduler's default CPU request for scoring a container that requests none (100m).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// kube-scheduler's default memory request for scoring a container that requests none (200Mi).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// A pod that cannot be scheduled as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    /// A quantity does not parse.
    #[error("{field}: {source}")]
    Quantity {
        /// The field path.
        field: String,
        /// The parse error.
        #[source]
        source: berth_api::QuantityError,
    },
    /// A request below zero.
    #[error("{field}: must be greater than or equal to 0")]
    Negative {
        /// The field path.
        field: String,
    },
    /// A request beyond what berth counts (the capacity rule: refused, never saturated).
    #[error("{field}: {text:?} is larger than berth can count (rule: out-of-range)")]
    OutOfRange {
        /// The field path.
        field: String,
        /// The quantity as written.
        text: String,
    },
    /// Too many extended resources.
    #[error(transparent)]
    TooManyResources(#[from] TooManyResources),
}

impl PodError {
    /// The capacity rule the pod breaks (the `reason` of `berth_unreadable_objects_total`).
    pub fn rule(&self) -> berth_api::validate::Rule {
        use berth_api::validate::Rule;
        match self {
            Self::Quantity { .. } => Rule::Malformed,
            Self::Negative { .. } => Rule::Negative,
            Self::OutOfRange { .. } | Self::TooManyResources(_) => Rule::OutOfRange,
        }
    }
}

/// A host port a container asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// `0.0.0.0` when unset.
    pub ip: Arc<str>,
    /// `TCP` when unset.
    pub protocol: Arc<str>,
    /// The port.
    pub port: i32,
}

impl HostPort {
    /// Whether two host ports collide: same protocol and port, and the same IP or either
    /// one the wildcard (kube-scheduler's `HostPortInfo` rule).
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || &*self.ip == "0.0.0.0" || &*other.ip == "0.0.0.0")
    }
}

/// Kubernetes QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    /// Every container has equal CPU and memory requests and limits.
    Guaranteed,
    /// Some request or limit.
    Burstable,
    /// No request or limit at all.
    BestEffort,
}

/// Whether a queued item is a real pod or the stand-in for a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodKind {
    /// A user pod.
    Pod,
    /// The "reserve pod" of a Reservation (Koordinator's `NewReservePod`).
    ReservePod {
        /// The reservation's name.
        reservation: Arc<str>,
    },
}

/// A pod, with its derived scheduling facts.
#[derive(Debug, Clone)]
pub struct PodInfo {
    /// Namespace and name (kind Pod).
    pub key: ObjectKey,
    /// `metadata.uid`.
    pub uid: Arc<str>,
    /// The API object.
    pub pod: Arc<Pod>,
    /// What it is.
    pub kind: PodKind,
    /// `metadata.labels`.
    pub labels: Labels,
    /// Resolved priority (`spec.priority`, 0 when unset).
    pub priority: i32,
    /// `metadata.creationTimestamp`, virtual ms.
    pub created: Time,
    /// Effective request: max(sum of containers (+ sidecars), largest init step) + overhead.
    pub requests: Resources,
    /// Requests for scoring, with kube-scheduler's defaults (100m CPU, 200Mi memory) for
    /// containers that request none.
    pub non_zero: Resources,
    /// Host ports asked for.
    pub host_ports: SmallVec<[HostPort; 2]>,
    /// QoS class.
    pub qos: QosClass,
    /// `spec.nodeName`, if set.
    pub node_name: Option<Arc<str>>,
    /// Whether the pod is terminal (Succeeded/Failed) and so holds nothing on its node.
    pub terminal: bool,
    /// Whether the pod is being deleted.
    pub terminating: bool,
    /// `spec.schedulerName` (`default-scheduler` when unset).
    pub scheduler_name: Arc<str>,
    /// The NUMA request read from the spec, on first use by the queueing hints: after
    /// every NRT update they ask, for every waiting pod, whether it may fit now, and
    /// parsing the containers' quantities each time was a tenth of a NUMA simulation.
    /// Derived from `pod` and `qos` only, which a `PodInfo` never changes.
    pub(crate) numa_request: OnceLock<Result<PodNumaRequest, QuantityError>>,
}

impl PodInfo {
    /// Derives the scheduling facts of `pod`, interning any new resource names.
    pub fn new(pod: Arc<Pod>, names: &mut ResourceNames) -> Result<Self, PodError> {
        let meta = &pod.metadata;
        let key = ObjectKey::pod(
            meta.namespace.as_deref().unwrap_or("default"),
            meta.name.as_deref().unwrap_or(""),
        );
        let spec = pod.spec.as_ref();
        let mut host_ports = SmallVec::new();
        let mut qos = QosState::default();
        let (requests, non_zero) = match spec {
            Some(spec) => {
                for c in &spec.containers {
                    collect_ports(c, &mut host_ports);
                }
                for c in spec.init_containers.iter().flatten() {
                    if c.restart_policy.as_deref() == Some("Always") {
                        collect_ports(c, &mut host_ports);
                    }
                }
                pod_requests(&pod, spec, names, &mut qos)?
            }
            None => (Resources::ZERO, Resources::ZERO),
        };
        let status_phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let priority = spec.and_then(|s| s.priority).unwrap_or(0);
        Ok(Self {
            uid: meta.uid.as_deref().unwrap_or("").into(),
            labels: meta.labels.clone().unwrap_or_default(),
            priority,
            created: meta
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| time_of(&t.0)),
            requests,
            non_zero,
            host_ports,
            qos: qos.class(),
            node_name: spec
                .and_then(|s| s.node_name.as_deref())
                .filter(|n| !n.is_empty())
                .map(Arc::from),
            terminal: matches!(status_phase, Some("Succeeded") | Some("Failed")),
            terminating: meta.deletion_timestamp.is_some(),
            numa_request: OnceLock::new(),
            // The API server defaults an empty `schedulerName` to the default scheduler.
            scheduler_name: spec
                .and_then(|s| s.scheduler_name.as_deref())
                .filter(|n| !n.is_empty())
                .unwrap_or(super::DEFAULT_SCHEDULER_NAME)
                .into(),
            kind: PodKind::Pod,
            key,
            pod,
        })
    }

    /// The pod's `spec`, or an empty one.
    pub fn spec(&self) -> &berth_api::k8s_openapi::api::core::v1::PodSpec {
        static EMPTY: std::sync::OnceLock<berth_api::k8s_openapi::api::core::v1::PodSpec> =
            std::sync::OnceLock::new();
        self.pod
            .spec
            .as_ref()
            .unwrap_or_else(|| EMPTY.get_or_init(Default::default))
    }

    /// An annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.pod
            .metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    /// Whether this is a reservation's stand-in.
    pub fn is_reserve_pod(&self) -> bool {
        matches!(self.kind, PodKind::ReservePod { .. })
    }
}

/// Converts a Kubernetes timestamp to virtual ms.
pub fn time_of(t: &berth_api::k8s_openapi::jiff::Timestamp) -> Time {
    t.as_millisecond()
}

/// Reads one request, limit or overhead of a pod (the capacity rule for pods: readable, not
/// negative, within range; the messages are the API server's where it has one).
fn parse_amount(name: &str, text: &str, field: &str) -> Result<i64, PodError> {
    let q = ParsedQuantity::parse(text).map_err(|source| PodError::Quantity {
        field: field.to_string(),
        source,
    })?;
    if q.is_negative() {
        return Err(PodError::Negative {
            field: field.to_string(),
        });
    }
    let v = if name == "cpu" {
        q.milli_value()
    } else {
        q.value()
    };
    if v == i64::MAX {
        return Err(PodError::OutOfRange {
            field: field.to_string(),
            text: text.to_string(),
        });
    }
    Ok(v)
}

#[derive(Default)]
struct QosState {
    any: bool,
    all_guaranteed: bool,
    seen: bool,
    /// With `spec.resources`, only the pod level decides.
    pod_level: Option<QosClass>,
}

impl QosState {
    fn class(&self) -> QosClass {
        if let Some(class) = self.pod_level {
            class
        } else if !self.any {
            QosClass::BestEffort
        } else if self.seen && self.all_guaranteed {
            QosClass::Guaranteed
        } else {
            QosClass::Burstable
        }
    }
}

/// Amounts with the names a resource list carries: kube's lists are maps, and a named zero
/// is not an absent name (scoring defaults apply only to absent ones, and a pod-level
/// request replaces the containers' sum only for the names it carries).
#[derive(Debug, Clone, Copy, Default)]
struct Named {
    amounts: Resources,
    /// Bit `i`: slot `i` is named.
    names: u32,
}

impl Named {
    fn set(&mut self, id: ResourceId, v: i64) {
        self.amounts[id] = v;
        self.names |= 1 << id.0;
    }

    fn has(&self, id: ResourceId) -> bool {
        self.names & (1 << id.0) != 0
    }

    /// kube's `maxResourceList`: every name of `other`, at the larger amount.
    fn max_with(&mut self, other: &Named) {
        for id in ResourceId::in_mask(other.names) {
            if !self.has(id) || other.amounts[id] > self.amounts[id] {
                self.set(id, other.amounts[id]);
            }
        }
    }

    /// With kube-scheduler's scoring defaults (100m CPU, 200Mi memory) for cpu and memory
    /// where this list does not name them (`NonMissingContainerRequests`).
    fn non_zero(&self) -> Resources {
        let mut nz = self.amounts;
        if !self.has(ResourceId::CPU) {
            nz[ResourceId::CPU] = DEFAULT_MILLI_CPU_REQUEST;
        }
        if !self.has(ResourceId::MEMORY) {
            nz[ResourceId::MEMORY] = DEFAULT_MEMORY_REQUEST;
        }
        nz
    }
}

/// Parses a resource list (a status one) into named amounts.
fn parse_list(
    list: &std::collections::BTreeMap<String, Quantity>,
    field: &str,
    names: &mut ResourceNames,
) -> Result<Named, PodError> {
    let mut out = Named::default();
    for (name, q) in list {
        let v = parse_amount(name, &q.0, &format!("{field}[{name}]"))?;
        out.set(names.intern(name)?, v);
    }
    Ok(out)
}

/// The pod's request as kube-scheduler 1.35 reads it (component-helpers' `PodRequests`
/// with pod-level resources and in-place resize on, as `PodInfo.CalculateResource` calls
/// it): the containers' sum (sidecars added, the largest init step as a floor), each
/// container at the larger of its spec and what its status says is allocated while a
/// resize is in progress; then pod-level requests (`spec.resources`) in place of that sum
/// for the resources they name; then the overhead. The second vector is the same with the
/// scoring defaults for containers that request no cpu or memory (only where neither the
/// pod level nor any container names it, when pod-level requests are set).
fn pod_requests(
    pod: &Pod,
    spec: &PodSpec,
    names: &mut ResourceNames,
    qos: &mut QosState,
) -> Result<(Resources, Resources), PodError> {
    let infeasible = resize_infeasible(pod);
    let mut requests = Resources::ZERO;
    let mut non_zero = Resources::ZERO;
    let mut named = 0u32;
    for (i, c) in spec.containers.iter().enumerate() {
        let r = container_requests(c, &format!("spec.containers[{i}]"), names, qos)?;
        let r = resized(pod, c, r, infeasible, names)?;
        named |= r.names;
        requests.add(&r.amounts);
        non_zero.add(&r.non_zero());
    }
    let mut sidecars = Resources::ZERO;
    let mut sidecars_nz = Resources::ZERO;
    let mut init_peak = Resources::ZERO;
    let mut init_peak_nz = Resources::ZERO;
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let r = container_requests(c, &format!("spec.initContainers[{i}]"), names, qos)?;
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        let r = if sidecar {
            resized(pod, c, r, infeasible, names)?
        } else {
            r
        };
        named |= r.names;
        let nz = r.non_zero();
        if sidecar {
            sidecars.add(&r.amounts);
            sidecars_nz.add(&nz);
            init_peak = init_peak.max(&sidecars);
            init_peak_nz = init_peak_nz.max(&sidecars_nz);
        } else {
            let mut step = r.amounts;
            step.add(&sidecars);
            init_peak = init_peak.max(&step);
            let mut step = nz;
            step.add(&sidecars_nz);
            init_peak_nz = init_peak_nz.max(&step);
        }
    }
    requests.add(&sidecars);
    non_zero.add(&sidecars_nz);
    requests = requests.max(&init_peak);
    non_zero = non_zero.max(&init_peak_nz);
    let mut overhead = Named::default();
    for (name, q) in spec.overhead.iter().flatten() {
        let v = parse_amount(name, &q.0, &format!("spec.overhead[{name}]"))?;
        overhead.set(names.intern(name)?, v);
    }
    let pod_level = pod_level_requests(spec, &requests, named, names)?;
    qos.pod_level = pod_level_qos(spec, &pod_level, names)?;
    if pod_level.names != 0 {
        // Defaults only for what neither the pod level, a container nor the overhead
        // names (`getNonMissingContainerRequests`).
        let all_named = named | pod_level.names | overhead.names;
        let defaulted = non_zero;
        for id in ResourceId::in_mask(pod_level.names) {
            requests[id] = pod_level.amounts[id];
        }
        non_zero = requests;
        for id in [ResourceId::CPU, ResourceId::MEMORY] {
            if all_named & (1 << id.0) == 0 {
                non_zero[id] = defaulted[id];
            }
        }
    }
    requests.add(&overhead.amounts);
    non_zero.add(&overhead.amounts);
    Ok((requests, non_zero))
}

/// Whether kube's pod-level resources cover `name` (`IsSupportedPodLevelResource`).
fn is_pod_level_resource(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

/// The pod-level requests, as the API server defaults them (`defaultPodRequests`: with
/// pod-level limits, a resource the containers request defaults to their sum (cpu and
/// memory, which may be overcommitted), any other limited one to its limit). Only the
/// resources pod-level resources support count, as in `PodRequests`.
fn pod_level_requests(
    spec: &PodSpec,
    containers: &Resources,
    containers_named: u32,
    names: &mut ResourceNames,
) -> Result<Named, PodError> {
    let mut out = Named::default();
    let Some(res) = spec.resources.as_ref() else {
        return Ok(out);
    };
    for (name, q) in res.requests.iter().flatten() {
        if is_pod_level_resource(name) {
            let v = parse_amount(name, &q.0, &format!("spec.resources.requests[{name}]"))?;
            out.set(names.intern(name)?, v);
        }
    }
    let limits = res.limits.as_ref().filter(|l| !l.is_empty());
    if limits.is_some() {
        for id in [ResourceId::CPU, ResourceId::MEMORY] {
            if containers_named & (1 << id.0) != 0 && !out.has(id) {
                out.set(id, containers[id]);
            }
        }
    }
    for (name, q) in limits.into_iter().flatten() {
        if is_pod_level_resource(name) {
            let v = parse_amount(name, &q.0, &format!("spec.resources.limits[{name}]"))?;
            let id = names.intern(name)?;
            if !out.has(id) {
                out.set(id, v);
            }
        }
    }
    Ok(out)
}

/// The QoS class of a pod with `spec.resources` (`ComputePodQOS`: then only the pod-level
/// cpu and memory count); `None` when it has none.
fn pod_level_qos(
    spec: &PodSpec,
    requests: &Named,
    names: &mut ResourceNames,
) -> Result<Option<QosClass>, PodError> {
    let Some(res) = spec.resources.as_ref() else {
        return Ok(None);
    };
    let cpu_mem = [ResourceId::CPU, ResourceId::MEMORY];
    let mut limits = Named::default();
    for (name, q) in res.limits.iter().flatten() {
        if name == "cpu" || name == "memory" {
            let v = parse_amount(name, &q.0, &format!("spec.resources.limits[{name}]"))?;
            if v > 0 {
                limits.set(names.intern(name)?, v);
            }
        }
    }
    let positive = |n: &Named, id: ResourceId| n.has(id) && n.amounts[id] > 0;
    let any = cpu_mem
        .iter()
        .any(|id| positive(requests, *id) || positive(&limits, *id));
    if !any {
        return Ok(Some(QosClass::BestEffort));
    }
    // Guaranteed: cpu and memory limits, and requests equal to them.
    let guaranteed = cpu_mem.iter().all(|id| {
        positive(&limits, *id)
            && positive(requests, *id)
            && requests.amounts[*id] == limits.amounts[*id]
    });
    Ok(Some(if guaranteed {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }))
}

/// Whether the pod as the API server last showed it already carries
/// `PodScheduled=False` with this reason and message: then writing the condition again
/// changes nothing, and kube-scheduler skips the write too (`updatePod` patches only when
/// `UpdatePodCondition` changed something). After a restart, thousands of pods that stayed
/// unschedulable would otherwise each cost a status write before the first bind.
pub fn scheduled_condition_says(pod: &Pod, reason: &str, message: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .is_some_and(|c| {
            c.status == "False"
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref() == Some(message)
        })
}

/// Whether the pod's `PodResizePending` condition says `Infeasible`: then the spec's
/// (refused) requests do not count (`IsPodResizeInfeasible`).
fn resize_infeasible(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodResizePending"))
        .is_some_and(|c| c.reason.as_deref() == Some("Infeasible"))
}

/// The status of the container named `name` in `list`, with its field path.
fn status_of<'a>(
    list: Option<&'a [ContainerStatus]>,
    field: &str,
    name: &str,
) -> Option<(String, &'a ContainerStatus)> {
    list?
        .iter()
        .enumerate()
        .find(|(_, s)| s.name == name)
        .map(|(i, s)| (format!("status.{field}[{i}]"), s))
}

/// A container's request while it may be being resized in place (`determineEffectiveRequests`):
/// once its status reports resources, the larger of the spec, the actuated
/// (`status.containerStatuses[].resources.requests`) and the allocated
/// (`allocatedResources`) amounts, per resource.
fn resized(
    pod: &Pod,
    c: &Container,
    spec: Named,
    infeasible: bool,
    names: &mut ResourceNames,
) -> Result<Named, PodError> {
    let Some(status) = pod.status.as_ref() else {
        return Ok(spec);
    };
    // kube indexes app then init container statuses by name, init ones last (winning).
    let Some((field, cs)) = status_of(
        status.init_container_statuses.as_deref(),
        "initContainerStatuses",
        &c.name,
    )
    .or_else(|| {
        status_of(
            status.container_statuses.as_deref(),
            "containerStatuses",
            &c.name,
        )
    }) else {
        return Ok(spec);
    };
    let Some(actuated) = cs.resources.as_ref() else {
        return Ok(spec);
    };
    let mut out = if infeasible { Named::default() } else { spec };
    if let Some(r) = actuated.requests.as_ref() {
        out.max_with(&parse_list(
            r,
            &format!("{field}.resources.requests"),
            names,
        )?);
    }
    if let Some(a) = cs.allocated_resources.as_ref() {
        out.max_with(&parse_list(
            a,
            &format!("{field}.allocatedResources"),
            names,
        )?);
    }
    Ok(out)
}

fn container_requests(
    c: &Container,
    field: &str,
    names: &mut ResourceNames,
    qos: &mut QosState,
) -> Result<Named, PodError> {
    let mut r = Resources::ZERO;
    let res = c.resources.as_ref();
    let requests = res.and_then(|r| r.requests.as_ref());
    let limits = res.and_then(|r| r.limits.as_ref());
    for (name, q) in requests.into_iter().flatten() {
        let v = parse_amount(name, &q.0, &format!("{field}.resources.requests[{name}]"))?;
        r[names.intern(name)?] += v;
    }
    // A limit without a request defaults the request to the limit (API server defaulting).
    let mut lim = Resources::ZERO;
    for (name, q) in limits.into_iter().flatten() {
        let v = parse_amount(name, &q.0, &format!("{field}.resources.limits[{name}]"))?;
        let id = names.intern(name)?;
        lim[id] = v;
        if requests.is_none_or(|m| !m.contains_key(name)) {
            r[id] += v;
        }
    }
    // QoS: Guaranteed needs cpu and memory limits equal to requests in every container.
    let cpu_mem = [ResourceId::CPU, ResourceId::MEMORY];
    let has_any = requests.is_some_and(|m| !m.is_empty()) || limits.is_some_and(|m| !m.is_empty());
    qos.any |= has_any;
    let guaranteed = cpu_mem.iter().all(|id| lim[*id] > 0 && lim[*id] == r[*id]);
    if !qos.seen {
        qos.seen = true;
        qos.all_guaranteed = guaranteed;
    } else {
        qos.all_guaranteed &= guaranteed;
    }
    // Every name the container lists counts as requested (the API server copies a limit
    // into a missing request), even at zero: scoring defaults apply only to absent ones
    // (kube-scheduler's `NonMissingContainerRequests`).
    let mut named = Named {
        amounts: r,
        names: 0,
    };
    for (name, _) in requests
        .into_iter()
        .flatten()
        .chain(limits.into_iter().flatten())
    {
        named.names |= 1 << names.intern(name)?.0;
    }
    Ok(named)
}

fn collect_ports(c: &Container, out: &mut SmallVec<[HostPort; 2]>) {
    for p in c.ports.iter().flatten() {
        let Some(port) = p.host_port.filter(|p| *p > 0) else {
            continue;
        };
        out.push(HostPort {
            ip: p
                .host_ip
                .as_deref()
                .filter(|s| !s.is_empty())
                .unwrap_or("0.0.0.0")
                .into(),
            protocol: p
                .protocol
                .as_deref()
                .filter(|s| !s.is_empty())
                .unwrap_or("TCP")
                .into(),
            port,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Arc<Pod> {
        Arc::new(serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap())
    }

    fn container(cpu: &str, mem: &str) -> serde_json::Value {
        json!({"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}})
    }

    #[test]
    fn init_containers_count_as_max_not_sum() {
        let mut names = ResourceNames::default();
        let p = pod(json!({
            "containers": [container("1", "1Gi"), container("500m", "1Gi")],
            "initContainers": [container("3", "1Gi")],
        }));
        let info = PodInfo::new(p, &mut names).unwrap();
        assert_eq!(info.requests[ResourceId::CPU], 3000);
        assert_eq!(info.requests[ResourceId::MEMORY], 2 << 30);
    }

    #[test]
    fn sidecars_add_to_the_running_sum_and_overhead_is_added() {
        let mut names = ResourceNames::default();
        let mut sidecar = container("1", "0");
        sidecar["restartPolicy"] = json!("Always");
        let p = pod(json!({
            "containers": [container("1", "0")],
            "initContainers": [sidecar, container("1500m", "0")],
            "overhead": {"cpu": "250m"},
        }));
        let info = PodInfo::new(p, &mut names).unwrap();
        // running: 1 + 1 sidecar = 2; init step: 1 sidecar + 1.5 = 2.5; + 250m overhead.
        assert_eq!(info.requests[ResourceId::CPU], 2750);
    }

    #[test]
    fn zero_requests_score_with_defaults() {
        let mut names = ResourceNames::default();
        let info = PodInfo::new(pod(json!({"containers": [{"name": "c"}]})), &mut names).unwrap();
        assert_eq!(info.requests[ResourceId::CPU], 0);
        assert_eq!(info.non_zero[ResourceId::CPU], DEFAULT_MILLI_CPU_REQUEST);
        assert_eq!(info.non_zero[ResourceId::MEMORY], DEFAULT_MEMORY_REQUEST);
        assert_eq!(info.qos, QosClass::BestEffort);
    }

    #[test]
    fn an_explicit_zero_request_is_not_defaulted_for_scoring() {
        let mut names = ResourceNames::default();
        let info = PodInfo::new(
            pod(json!({"containers": [container("0", "0")]})),
            &mut names,
        )
        .unwrap();
        assert_eq!(info.non_zero[ResourceId::CPU], 0);
        assert_eq!(info.non_zero[ResourceId::MEMORY], 0);
    }

    #[test]
    fn limits_default_requests_and_decide_guaranteed() {
        let mut names = ResourceNames::default();
        let p = pod(
            json!({"containers": [{"name": "c", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]}),
        );
        let info = PodInfo::new(p, &mut names).unwrap();
        assert_eq!(info.requests[ResourceId::CPU], 2000);
        assert_eq!(info.qos, QosClass::Guaranteed);
        let info = PodInfo::new(
            pod(json!({"containers": [container("1", "1Gi")]})),
            &mut names,
        )
        .unwrap();
        assert_eq!(info.qos, QosClass::Burstable);
    }

    #[test]
    fn negative_and_malformed_requests_name_the_field() {
        let mut names = ResourceNames::default();
        let err = PodInfo::new(
            pod(json!({"containers": [container("-1", "1Gi")]})),
            &mut names,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.containers[0].resources.requests[cpu]: must be greater than or equal to 0"
        );
        let err = PodInfo::new(
            pod(json!({"containers": [container("1", "lots")]})),
            &mut names,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("spec.containers[0].resources.requests[memory]:"),
            "{err}"
        );
    }

    fn pod_with(spec: serde_json::Value, status: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": "p"}, "spec": spec, "status": status}),
            )
            .unwrap(),
        )
    }

    #[test]
    fn pod_level_requests_replace_the_containers_sum_for_what_they_name() {
        let mut names = ResourceNames::default();
        // Containers without requests: the pod level alone counts, overhead on top.
        let info = PodInfo::new(
            pod(json!({
                "containers": [{"name": "a"}, {"name": "b"}],
                "resources": {"requests": {"cpu": "7"}},
                "overhead": {"cpu": "100m"},
            })),
            &mut names,
        )
        .unwrap();
        assert_eq!(info.requests[ResourceId::CPU], 7100);
        assert_eq!(info.non_zero[ResourceId::CPU], 7100);
        // Memory is named nowhere: no request, and each container's scoring default.
        assert_eq!(info.requests[ResourceId::MEMORY], 0);
        assert_eq!(
            info.non_zero[ResourceId::MEMORY],
            2 * DEFAULT_MEMORY_REQUEST
        );
        assert_eq!(info.qos, QosClass::Burstable);
        // A resource the pod level does not name keeps the containers' sum, without
        // scoring defaults once some container names it.
        let info = PodInfo::new(
            pod(json!({
                "containers": [container("1", "1Gi"), {"name": "b"}],
                "resources": {"requests": {"cpu": "3"}},
            })),
            &mut names,
        )
        .unwrap();
        assert_eq!(info.requests[ResourceId::CPU], 3000);
        assert_eq!(info.requests[ResourceId::MEMORY], 1 << 30);
        assert_eq!(info.non_zero[ResourceId::MEMORY], 1 << 30);
        // Unsupported names at the pod level are ignored, as PodRequests ignores them.
        let info = PodInfo::new(
            pod(json!({
                "containers": [container("1", "1Gi")],
                "resources": {"requests": {"ephemeral-storage": "1Gi"}},
            })),
            &mut names,
        )
        .unwrap();
        assert_eq!(info.requests[ResourceId::CPU], 1000);
        assert_eq!(info.requests[ResourceId::EPHEMERAL_STORAGE], 0);
    }

    #[test]
    fn pod_level_limits_default_the_pod_level_requests_and_decide_qos() {
        let mut names = ResourceNames::default();
        let info = PodInfo::new(
            pod(json!({
                "containers": [{"name": "a"}],
                "resources": {"limits": {"cpu": "2", "memory": "1Gi"}},
            })),
            &mut names,
        )
        .unwrap();
        assert_eq!(info.requests[ResourceId::CPU], 2000);
        assert_eq!(info.requests[ResourceId::MEMORY], 1 << 30);
        assert_eq!(info.qos, QosClass::Guaranteed);
        // Containers' requests default the pod level before its limits do.
        let info = PodInfo::new(
            pod(json!({
                "containers": [container("500m", "256Mi")],
                "resources": {"limits": {"cpu": "2", "memory": "1Gi"}},
            })),
            &mut names,
        )
        .unwrap();
        assert_eq!(info.requests[ResourceId::CPU], 500);
        assert_eq!(info.qos, QosClass::Burstable);
        let err = PodInfo::new(
            pod(json!({"containers": [{"name": "a"}], "resources": {"requests": {"cpu": "-1"}}})),
            &mut names,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.resources.requests[cpu]: must be greater than or equal to 0"
        );
    }

    #[test]
    fn a_resize_in_progress_counts_the_larger_of_spec_and_status() {
        let mut names = ResourceNames::default();
        let status = |actuated: &str, allocated: &str| {
            json!({"containerStatuses": [{
                "name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                "resources": {"requests": {"cpu": actuated}},
                "allocatedResources": {"cpu": allocated},
            }]})
        };
        let cpu = |spec: &str, st: serde_json::Value, names: &mut ResourceNames| {
            PodInfo::new(
                pod_with(json!({"containers": [container(spec, "1Gi")]}), st),
                names,
            )
            .unwrap()
            .requests[ResourceId::CPU]
        };
        // Scaling up, not yet allocated; scaling down, not yet actuated.
        assert_eq!(cpu("4", status("2", "2"), &mut names), 4000);
        assert_eq!(cpu("1", status("2", "2"), &mut names), 2000);
        assert_eq!(cpu("1", status("1", "3"), &mut names), 3000);
        // No resources in the status: the spec alone.
        let plain = json!({"containerStatuses": [{"name": "c", "image": "i", "imageID": "",
            "ready": true, "restartCount": 0, "allocatedResources": {"cpu": "8"}}]});
        assert_eq!(cpu("1", plain, &mut names), 1000);
        // An infeasible resize: the spec's request does not count.
        let mut st = status("2", "2");
        st["conditions"] =
            json!([{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]);
        assert_eq!(cpu("8", st, &mut names), 2000);
        let err = PodInfo::new(
            pod_with(
                json!({"containers": [container("1", "1Gi")]}),
                status("2", "-2"),
            ),
            &mut names,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "status.containerStatuses[0].allocatedResources[cpu]: must be greater than or equal to 0"
        );
    }

    #[test]
    fn host_ports_default_ip_and_protocol() {
        let mut names = ResourceNames::default();
        let p = pod(
            json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}]}]}),
        );
        let info = PodInfo::new(p, &mut names).unwrap();
        assert_eq!(info.host_ports.len(), 1);
        assert_eq!(&*info.host_ports[0].ip, "0.0.0.0");
        assert_eq!(&*info.host_ports[0].protocol, "TCP");
        let a = HostPort {
            ip: "10.0.0.1".into(),
            protocol: "TCP".into(),
            port: 8080,
        };
        assert!(a.conflicts(&info.host_ports[0]));
        let b = HostPort {
            ip: "10.0.0.2".into(),
            protocol: "TCP".into(),
            port: 8080,
        };
        assert!(!a.conflicts(&b));
    }
}
