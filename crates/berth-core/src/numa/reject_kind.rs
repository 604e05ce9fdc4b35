//! A Filter rejection without its names: what the per-node Filter path needs.
//!
//! [`NumaReject`] names the resource that did not fit, a reference-counted
//! [`ResourceName`] cloned and dropped for every rejected node (two atomic operations
//! per node on a full cluster) only for the Filter to read its fixed reason. The check
//! itself locates a rejection by positions (`Rejected`); the plugin's Filter turns that
//! into a [`RejectKind`] (the reason), and [`crate::numa::filter`] into the named
//! [`NumaReject`] a person reads.

use super::types::{PodNumaRequest, ResourceName, Resources};

/// Why the filter rejected a node. `Display` is the detailed explanation (which container,
/// which resource) for a person looking at one pod on one node; [`NumaReject::reason`] is
/// the fixed string the plugin returns as its Filter reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NumaReject {
    /// Init container `index` fits no single NUMA zone; `resource` is the first that failed.
    #[error("cannot align init container (index {index}, resource {resource})")]
    InitContainer {
        /// Position in `spec.initContainers`.
        index: usize,
        /// The resource that could not be aligned.
        resource: ResourceName,
    },
    /// App container `index` fits no single NUMA zone.
    #[error("cannot align container (index {index}, resource {resource})")]
    Container {
        /// Position in `spec.containers`.
        index: usize,
        /// The resource that could not be aligned.
        resource: ResourceName,
    },
    /// The pod (pod scope) fits no single NUMA zone.
    #[error("cannot align pod (resource {resource})")]
    Pod {
        /// The resource that could not be aligned.
        resource: ResourceName,
    },
    /// The node's topology data cannot be trusted right now (foreign pods, in-flight
    /// reservations with discardReservedNodes).
    #[error("invalid node topology data")]
    InvalidTopologyData,
    /// Internal: subtracting a container from the zone it was aligned to went negative.
    #[error("inconsistent resource accounting (resource {resource}, NUMA {numa_id})")]
    InconsistentAccounting {
        /// The resource.
        resource: ResourceName,
        /// The NUMA zone.
        numa_id: u8,
    },
}

/// scheduler-plugins' Filter reason when an init container fits no single NUMA zone.
pub const REASON_CANNOT_ALIGN_INIT_CONTAINER: &str = "cannot align init container";
/// scheduler-plugins' Filter reason when an app container fits no single NUMA zone.
pub const REASON_CANNOT_ALIGN_CONTAINER: &str = "cannot align container";
/// scheduler-plugins' Filter reason when the pod (pod scope) fits no single NUMA zone.
pub const REASON_CANNOT_ALIGN_POD: &str = "cannot align pod";
/// scheduler-plugins' Filter reason when the node's topology data cannot be trusted.
pub const REASON_INVALID_TOPOLOGY_DATA: &str = "invalid node topology data";
/// scheduler-plugins' Filter error when the container-scope accounting goes negative.
pub const REASON_INCONSISTENT_ACCOUNTING: &str = "inconsistent resource accounting";

impl NumaReject {
    /// The Filter reason, a fixed string exactly as scheduler-plugins returns it. It names
    /// neither the container nor the resource: kube-scheduler counts nodes per distinct
    /// reason (`0/2 nodes are available: 2 cannot align container.`), so a per-node detail
    /// in the reason would split one cause into many entries, and formatting it on every
    /// node is what kube-scheduler's fixed reasons avoid. The detail is the `Display` text.
    pub fn reason(&self) -> &'static str {
        RejectKind::from(self).reason()
    }

    /// The resource that made the node unfit, when there is one.
    pub fn resource(&self) -> Option<&ResourceName> {
        match self {
            Self::InitContainer { resource, .. }
            | Self::Container { resource, .. }
            | Self::Pod { resource }
            | Self::InconsistentAccounting { resource, .. } => Some(resource),
            Self::InvalidTopologyData => None,
        }
    }

    /// `Error` rather than `Unschedulable` in framework terms.
    pub fn is_internal_error(&self) -> bool {
        RejectKind::from(self).is_internal_error()
    }
}

/// Which of [`NumaReject`]'s cases, without the container and resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectKind {
    /// [`NumaReject::InitContainer`].
    InitContainer,
    /// [`NumaReject::Container`].
    Container,
    /// [`NumaReject::Pod`].
    Pod,
    /// [`NumaReject::InvalidTopologyData`].
    InvalidTopologyData,
    /// [`NumaReject::InconsistentAccounting`].
    InconsistentAccounting,
}

impl RejectKind {
    /// The fixed Filter reason ([`NumaReject::reason`]).
    pub fn reason(self) -> &'static str {
        match self {
            Self::InitContainer => REASON_CANNOT_ALIGN_INIT_CONTAINER,
            Self::Container => REASON_CANNOT_ALIGN_CONTAINER,
            Self::Pod => REASON_CANNOT_ALIGN_POD,
            Self::InvalidTopologyData => REASON_INVALID_TOPOLOGY_DATA,
            Self::InconsistentAccounting => REASON_INCONSISTENT_ACCOUNTING,
        }
    }

    /// `Error` rather than `Unschedulable` in framework terms.
    pub fn is_internal_error(self) -> bool {
        self == Self::InconsistentAccounting
    }
}

impl From<&NumaReject> for RejectKind {
    fn from(r: &NumaReject) -> Self {
        match r {
            NumaReject::InitContainer { .. } => Self::InitContainer,
            NumaReject::Container { .. } => Self::Container,
            NumaReject::Pod { .. } => Self::Pod,
            NumaReject::InvalidTopologyData => Self::InvalidTopologyData,
            NumaReject::InconsistentAccounting { .. } => Self::InconsistentAccounting,
        }
    }
}

/// A rejection by positions: the container's index and the resource's place in its
/// request (`at`, counting every entry of [`Resources::iter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejected {
    InitContainer {
        index: usize,
        at: usize,
    },
    Container {
        index: usize,
        at: usize,
    },
    Pod {
        at: usize,
    },
    Inconsistent {
        index: usize,
        at: usize,
        numa_id: u8,
    },
}

impl Rejected {
    /// The case.
    pub(crate) fn kind(self) -> RejectKind {
        match self {
            Self::InitContainer { .. } => RejectKind::InitContainer,
            Self::Container { .. } => RejectKind::Container,
            Self::Pod { .. } => RejectKind::Pod,
            Self::Inconsistent { .. } => RejectKind::InconsistentAccounting,
        }
    }

    /// The named rejection, the resource read back from `pod`'s request.
    pub(crate) fn detail(self, pod: &PodNumaRequest) -> NumaReject {
        let name = |r: Option<&Resources>, at: usize| -> ResourceName {
            r.and_then(|r| r.iter().nth(at))
                .map_or_else(|| ResourceName::new(""), |(n, _)| n.clone())
        };
        match self {
            Self::InitContainer { index, at } => NumaReject::InitContainer {
                index,
                resource: name(pod.init_containers().get(index).map(|ic| &ic.requests), at),
            },
            Self::Container { index, at } => NumaReject::Container {
                index,
                resource: name(pod.containers().get(index), at),
            },
            Self::Pod { at } => NumaReject::Pod {
                resource: name(Some(pod.effective()), at),
            },
            Self::Inconsistent { index, at, numa_id } => NumaReject::InconsistentAccounting {
                resource: name(pod.containers().get(index), at),
                numa_id,
            },
        }
    }
}
