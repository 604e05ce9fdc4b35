//! [`PodInfo`]: what the scheduler needs of a pod, computed once when the pod is seen.

use std::sync::{Arc, OnceLock};

use berth_api::k8s_openapi::api::core::v1::{Container, Pod};
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
        let mut requests = Resources::ZERO;
        let mut non_zero = Resources::ZERO;
        let mut sidecars = Resources::ZERO;
        let mut sidecars_nz = Resources::ZERO;
        let mut init_peak = Resources::ZERO;
        let mut init_peak_nz = Resources::ZERO;
        let mut host_ports = SmallVec::new();
        let mut qos = QosState::default();
        if let Some(spec) = spec {
            for (i, c) in spec.containers.iter().enumerate() {
                let (r, nz) =
                    container_requests(c, &format!("spec.containers[{i}]"), names, &mut qos)?;
                requests.add(&r);
                non_zero.add(&nz);
                collect_ports(c, &mut host_ports);
            }
            for (i, c) in spec.init_containers.iter().flatten().enumerate() {
                let (r, nz) =
                    container_requests(c, &format!("spec.initContainers[{i}]"), names, &mut qos)?;
                if c.restart_policy.as_deref() == Some("Always") {
                    sidecars.add(&r);
                    sidecars_nz.add(&nz);
                    init_peak = init_peak.max(&sidecars);
                    init_peak_nz = init_peak_nz.max(&sidecars_nz);
                    collect_ports(c, &mut host_ports);
                } else {
                    let mut step = r;
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
            for (name, q) in spec.overhead.iter().flatten() {
                let v = parse_amount(name, &q.0, &format!("spec.overhead[{name}]"))?;
                let id = names.intern(name)?;
                requests[id] += v;
                non_zero[id] += v;
            }
        }
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
                .unwrap_or(crate::framework::profile::DEFAULT_SCHEDULER_NAME)
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
}

impl QosState {
    fn class(&self) -> QosClass {
        if !self.any {
            QosClass::BestEffort
        } else if self.seen && self.all_guaranteed {
            QosClass::Guaranteed
        } else {
            QosClass::Burstable
        }
    }
}

fn container_requests(
    c: &Container,
    field: &str,
    names: &mut ResourceNames,
    qos: &mut QosState,
) -> Result<(Resources, Resources), PodError> {
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
    // Defaults apply to a request that is absent, not to an explicit zero
    // (kube-scheduler's `GetNonzeroRequestForResource`).
    let present = |name: &str| {
        requests.is_some_and(|m| m.contains_key(name))
            || limits.is_some_and(|m| m.contains_key(name))
    };
    let mut nz = r;
    if !present("cpu") {
        nz[ResourceId::CPU] = DEFAULT_MILLI_CPU_REQUEST;
    }
    if !present("memory") {
        nz[ResourceId::MEMORY] = DEFAULT_MEMORY_REQUEST;
    }
    Ok((r, nz))
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
