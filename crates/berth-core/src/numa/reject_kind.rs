//! A Filter rejection without its names: what the per-node Filter path needs.
//!
//! [`NumaReject`] names the resource that did not fit, a reference-counted
//! [`ResourceName`] cloned and dropped for every rejected node (two atomic operations
//! per node on a full cluster) only for the Filter to read its fixed reason. The check
//! itself locates a rejection by positions (`Rejected`); the plugin's Filter turns that
//! into a [`RejectKind`] (the reason), and [`crate::numa::filter`] into the named
//! [`NumaReject`] a person reads.

use super::policy::{
    NumaReject, REASON_CANNOT_ALIGN_CONTAINER, REASON_CANNOT_ALIGN_INIT_CONTAINER,
    REASON_CANNOT_ALIGN_POD, REASON_INCONSISTENT_ACCOUNTING, REASON_INVALID_TOPOLOGY_DATA,
};
use super::types::{PodNumaRequest, ResourceName, Resources};

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
