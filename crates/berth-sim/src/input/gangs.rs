//! Reading gang objects: `PodGroup` (both API groups) and `Workload` documents, and
//! checking a pod's `spec.workloadRef`.

use std::sync::Arc;

use berth_api::gang::{PodGroup, Workload, WorkloadReference};
use berth_core::object::Object;
use serde_json::Value;

use super::typed;
use crate::error::FieldError;

/// Reads a `PodGroup` or `Workload` document (`metadata` already normalized), refusing
/// unknown fields and what the API server's validation refuses.
pub(crate) fn decode(kind: &str, value: &Value) -> Result<Object, FieldError> {
    if kind == "Workload" {
        let w: Workload = typed(value)?;
        w.validate()
            .map_err(|e| FieldError::new(e.field, e.message))?;
        return Ok(Object::Workload(Arc::new(w)));
    }
    let pg: PodGroup = typed(value)?;
    pg.validate()
        .map_err(|e| FieldError::new(e.field, e.message))?;
    Ok(Object::PodGroup(Arc::new(pg)))
}

/// Checks a pod document's `spec.workloadRef` as the API server does (`name` and
/// `podGroup` required); the typed Pod carries the field itself.
pub(crate) fn check_workload_ref(pod: &Value) -> Result<(), FieldError> {
    let Some(r) = pod.get("spec").and_then(|s| s.get("workloadRef")) else {
        return Ok(());
    };
    let parsed: WorkloadReference = typed(r).map_err(|e| e.within("workloadRef").within("spec"))?;
    for (field, v) in [("name", &parsed.name), ("podGroup", &parsed.pod_group)] {
        if v.is_empty() {
            return Err(FieldError::new(
                format!("spec.workloadRef.{field}"),
                "Required value",
            ));
        }
    }
    Ok(())
}
