//! Reading gang objects: `PodGroup` (both API groups) and `Workload` documents, and a pod's
//! `spec.workloadRef` (which the pinned Kubernetes API types do not have yet), carried in
//! [`berth_api::gang::ANNOTATION_WORKLOAD_REF`].

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

/// Moves a pod document's `spec.workloadRef` into the annotation berth reads it from,
/// after checking it as the API server does (`name` and `podGroup` required, no other
/// fields than `podGroupReplicaKey`).
pub(crate) fn carry_workload_ref(pod: &mut Value) -> Result<(), FieldError> {
    let Some(r) = pod
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .and_then(|s| s.remove("workloadRef"))
    else {
        return Ok(());
    };
    let parsed: WorkloadReference =
        typed(&r).map_err(|e| e.within("workloadRef").within("spec"))?;
    for (field, v) in [("name", &parsed.name), ("podGroup", &parsed.pod_group)] {
        if v.is_empty() {
            return Err(FieldError::new(
                format!("spec.workloadRef.{field}"),
                "Required value",
            ));
        }
    }
    let text = serde_json::to_string(&parsed).unwrap_or_default();
    let meta = pod
        .as_object_mut()
        .and_then(|m| m.get_mut("metadata"))
        .and_then(Value::as_object_mut);
    if let Some(meta) = meta {
        let ann = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(ann) = ann.as_object_mut() {
            ann.insert(
                berth_api::gang::ANNOTATION_WORKLOAD_REF.into(),
                Value::String(text),
            );
        }
    }
    Ok(())
}
