//! The Eviction API (`pods/eviction`) as kube-apiserver serves it: a pod is deleted unless a
//! PodDisruptionBudget that selects it allows no disruption, in which case the request is
//! refused with `429 TooManyRequests` and the caller is to retry later. What the future
//! PodMigrationJob controller (and a Scenario's `evict` step) call.
//!
//! As in `pkg/registry/core/pod/storage/eviction.go`:
//! - a pod that is Pending, Succeeded or Failed, or already being deleted, is evicted
//!   without looking at budgets (`canIgnorePDB`);
//! - more than one budget selecting the pod is an error (500);
//! - otherwise the one budget decides: none allowed is the 429.
//!
//! The budget's `disruptionsAllowed` is the disruption controller's answer computed from
//! the cluster now ([`allowed`]): the simulator plays that controller too, so a budget's
//! written `status` is not trusted to be current.

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_api::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use berth_api::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use berth_core::model::selector::Selector;
use berth_core::{Kind, Object, ObjectKey};

use super::{is_ready, phase};
use crate::store::Store;

/// Why an eviction was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvictionError {
    /// 404: no such pod.
    #[error("pods \"{0}\" not found")]
    NotFound(String),
    /// 429: the budget allows no disruption now; retry later.
    #[error("Cannot evict pod as it would violate the pod's disruption budget. (The disruption budget {budget} needs {desired} healthy pods and has {healthy} currently)")]
    TooManyRequests {
        /// The budget's name.
        budget: String,
        /// Its desired healthy count.
        desired: i32,
        /// Its current healthy count.
        healthy: i32,
    },
    /// 500: several budgets select the pod.
    #[error("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")]
    MultipleBudgets,
}

impl EvictionError {
    /// The HTTP status code the API server answers with.
    pub fn code(&self) -> u16 {
        match self {
            EvictionError::NotFound(_) => 404,
            EvictionError::TooManyRequests { .. } => 429,
            EvictionError::MultipleBudgets => 500,
        }
    }
}

/// Whether the eviction of `key` would be admitted now. `Ok` means the caller deletes it.
pub fn check(store: &Store, key: &ObjectKey) -> Result<(), EvictionError> {
    let Some(pod) = store.pod(key) else {
        return Err(EvictionError::NotFound(key.name.to_string()));
    };
    if matches!(phase(pod), "Pending" | "Succeeded" | "Failed")
        || pod.metadata.deletion_timestamp.is_some()
    {
        return Ok(());
    }
    let budgets = matching_budgets(store, pod);
    match budgets.as_slice() {
        [] => Ok(()),
        [pdb] => {
            let b = allowed(store, pdb);
            if b.allowed > 0 {
                Ok(())
            } else {
                Err(EvictionError::TooManyRequests {
                    budget: pdb.metadata.name.clone().unwrap_or_default(),
                    desired: b.desired,
                    healthy: b.healthy,
                })
            }
        }
        _ => Err(EvictionError::MultipleBudgets),
    }
}

/// The budgets of the pod's namespace whose selector selects it (a budget with no or an
/// empty selector selects nothing, an invalid one neither).
fn matching_budgets(store: &Store, pod: &Pod) -> Vec<Arc<PodDisruptionBudget>> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    store
        .of_kind(Kind::PodDisruptionBudget)
        .filter_map(|o| match o {
            Object::PodDisruptionBudget(b)
                if b.metadata.namespace.as_deref().unwrap_or("default") == namespace =>
            {
                let sel = b.spec.as_ref()?.selector.as_ref()?;
                let sel = Selector::from_label_selector(sel).ok()?;
                (!sel.is_empty() && sel.matches(&labels)).then(|| b.clone())
            }
            _ => None,
        })
        .collect()
}

/// A budget's counts, as the disruption controller computes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetCounts {
    /// `status.expectedPods`.
    pub expected: i32,
    /// `status.currentHealthy`.
    pub healthy: i32,
    /// `status.desiredHealthy`.
    pub desired: i32,
    /// `status.disruptionsAllowed`.
    pub allowed: i32,
}

/// The disruption controller's counts for `pdb`: matching non-terminal pods are expected
/// (standing in for the workloads' scale), ready ones healthy; `minAvailable` or
/// `maxUnavailable` (percentages rounded up) give the desired count. A malformed value
/// allows nothing (the controller fails safe).
pub fn allowed(store: &Store, pdb: &PodDisruptionBudget) -> BudgetCounts {
    let namespace = pdb.metadata.namespace.as_deref().unwrap_or("default");
    let selector = pdb
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| Selector::from_label_selector(s).ok());
    let (mut expected, mut healthy) = (0i64, 0i64);
    if let Some(selector) = selector.filter(|s| !s.is_empty()) {
        for o in store.of_kind(Kind::Pod) {
            let Object::Pod(p) = o else { continue };
            let labels = p.metadata.labels.clone().unwrap_or_default();
            if p.metadata.namespace.as_deref().unwrap_or("default") != namespace
                || matches!(phase(p), "Succeeded" | "Failed")
                || !selector.matches(&labels)
            {
                continue;
            }
            expected += 1;
            if is_ready(p) && p.metadata.deletion_timestamp.is_none() {
                healthy += 1;
            }
        }
    }
    let spec = pdb.spec.as_ref();
    let desired = if let Some(max) = spec.and_then(|s| s.max_unavailable.as_ref()) {
        scaled(max, expected).map(|m| (expected - m).max(0))
    } else if let Some(min) = spec.and_then(|s| s.min_available.as_ref()) {
        scaled(min, expected)
    } else {
        Some(0)
    };
    let clamp = |v: i64| i32::try_from(v.clamp(0, i64::from(i32::MAX))).unwrap_or(i32::MAX);
    let (desired, allowed) = match desired {
        Some(d) => (d, (healthy - d).max(0)),
        None => (expected, 0),
    };
    BudgetCounts {
        expected: clamp(expected),
        healthy: clamp(healthy),
        desired: clamp(desired),
        allowed: clamp(allowed),
    }
}

/// `intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true)`.
fn scaled(v: &IntOrString, total: i64) -> Option<i64> {
    match v {
        IntOrString::Int(i) => Some(i64::from(*i)),
        IntOrString::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((pct * total + 99).div_euclid(100))
        }
    }
}
