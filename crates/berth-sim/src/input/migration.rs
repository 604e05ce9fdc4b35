//! `scheduling.koordinator.sh/v1alpha1` PodMigrationJob as the API server checks it on
//! create: the CRD's schema, then what the controller needs to read.

use std::sync::Arc;

use serde_json::Value;

use berth_api::migration::PodMigrationJob;
use berth_core::Object;

use super::typed;
use crate::error::FieldError;
use crate::strict::{self, Schema};

/// Reads a `PodMigrationJob` document (`metadata` already normalized) as the API server
/// checks it: the CRD's schema, `spec.podRef` required, and a `spec.ttl` the controller can
/// read.
pub(super) fn decode(value: &Value) -> Result<Object, FieldError> {
    strict::check(Schema::PodMigrationJob, value)?;
    let job: PodMigrationJob = typed(value)?;
    if job.spec.pod_ref.is_none() {
        return Err(FieldError::new("spec.podRef", "Required value"));
    }
    if let Some(ttl) = &job.spec.ttl {
        ttl.millis().map_err(|e| {
            FieldError::new(
                "spec.ttl",
                format!("Invalid value: {:?}: {e}", ttl.as_str()),
            )
        })?;
    }
    Ok(Object::PodMigrationJob(Arc::new(job)))
}
