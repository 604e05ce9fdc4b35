//! `apps/v1` `Deployment`, `ReplicaSet` and `StatefulSet` as the API server checks them on
//! create: the strict schema, the pod template as a pod's spec, and the validation rules
//! the simulator's controllers rely on (a selector that is valid, not empty, and matches the
//! template's labels; replicas not negative; known strategies and policies). Messages are
//! the API server's (`apps/validation`).

use std::sync::Arc;

use serde_json::Value;

use berth_api::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use berth_core::model::selector::Selector;
use berth_core::Object;

use super::{check_pod_spec, typed, Quantities};
use crate::error::FieldError;
use crate::strict::{self, Schema};

/// Decodes a workload of `kind` (`metadata` already normalized).
pub(super) fn decode(kind: &str, value: &Value) -> Result<Object, FieldError> {
    let schema = match kind {
        "Deployment" => Schema::Deployment,
        "ReplicaSet" => Schema::ReplicaSet,
        _ => Schema::StatefulSet,
    };
    strict::check(schema, value)?;
    let spec = value
        .get("spec")
        .filter(|s| !s.is_null())
        .ok_or_else(|| FieldError::new("spec", "Required value"))?;
    if let Some(t) = spec.get("template").and_then(|t| t.get("spec")) {
        check_pod_spec(t, Quantities::Validated).map_err(|e| e.within("spec.template.spec"))?;
        crate::selectors::check_pod_selectors(t).map_err(|e| e.within("spec.template.spec"))?;
    }
    let obj = match schema {
        Schema::Deployment => {
            let d: Deployment = typed(value)?;
            let spec = d.spec.as_ref();
            check_common(
                spec.and_then(|s| s.replicas),
                spec.map(|s| &s.selector),
                spec.and_then(|s| s.template.metadata.as_ref())
                    .and_then(|m| m.labels.as_ref()),
            )?;
            let strategy = spec
                .and_then(|s| s.strategy.as_ref())
                .and_then(|s| s.type_.as_deref());
            if let Some(t) = strategy.filter(|t| !matches!(*t, "RollingUpdate" | "Recreate")) {
                return Err(unsupported(
                    "spec.strategy.type",
                    t,
                    &["Recreate", "RollingUpdate"],
                ));
            }
            Object::Deployment(Arc::new(d))
        }
        Schema::ReplicaSet => {
            let r: ReplicaSet = typed(value)?;
            let spec = r.spec.as_ref();
            check_common(
                spec.and_then(|s| s.replicas),
                spec.map(|s| &s.selector),
                spec.and_then(|s| s.template.as_ref())
                    .and_then(|t| t.metadata.as_ref())
                    .and_then(|m| m.labels.as_ref()),
            )?;
            Object::ReplicaSet(Arc::new(r))
        }
        _ => {
            let s: StatefulSet = typed(value)?;
            let spec = s.spec.as_ref();
            check_common(
                spec.and_then(|s| s.replicas),
                spec.map(|s| &s.selector),
                spec.and_then(|s| s.template.metadata.as_ref())
                    .and_then(|m| m.labels.as_ref()),
            )?;
            let policy = spec.and_then(|s| s.pod_management_policy.as_deref());
            if let Some(p) = policy.filter(|p| !matches!(*p, "OrderedReady" | "Parallel")) {
                return Err(unsupported(
                    "spec.podManagementPolicy",
                    p,
                    &["OrderedReady", "Parallel"],
                ));
            }
            Object::StatefulSet(Arc::new(s))
        }
    };
    Ok(obj)
}

fn unsupported(field: &str, value: &str, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    FieldError::new(
        field,
        format!(
            "Unsupported value: {value:?}: supported values: {}",
            list.join(", ")
        ),
    )
}

/// What every workload kind validates alike.
fn check_common(
    replicas: Option<i32>,
    selector: Option<&LabelSelector>,
    template_labels: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<(), FieldError> {
    if let Some(r) = replicas.filter(|r| *r < 0) {
        return Err(FieldError::new(
            "spec.replicas",
            format!("Invalid value: {r}: must be greater than or equal to 0"),
        ));
    }
    let Some(selector) = selector else {
        return Err(FieldError::new("spec.selector", "Required value"));
    };
    let compiled = Selector::from_label_selector(selector)
        .map_err(|e| FieldError::new("spec.selector", format!("Invalid value: {e}")))?;
    if compiled.is_empty() {
        return Err(FieldError::new(
            "spec.selector",
            "Invalid value: empty selector is invalid for deployment",
        ));
    }
    let labels = template_labels.cloned().unwrap_or_default();
    if !compiled.matches(&labels) {
        return Err(FieldError::new(
            "spec.template.metadata.labels",
            format!(
                "Invalid value: {:?}: `selector` does not match template `labels`",
                labels
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::input::parse_str;

    fn err(text: &str) -> crate::error::InputError {
        parse_str("in.yaml", text).expect_err("bad input")
    }

    const DEPLOY: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, resources: {requests: {cpu: 500m}}}]}\n";

    #[test]
    fn workloads_are_read_and_checked_as_the_api_server_does() {
        parse_str("in.yaml", DEPLOY).expect("valid");
        let e = err(&DEPLOY.replace("replicas: 3", "replicaz: 3"));
        assert_eq!(e.field, "spec.replicaz");
        let e = err(&DEPLOY.replace("replicas: 3", "replicas: -1"));
        assert_eq!(e.field, "spec.replicas");
        let e = err(&DEPLOY.replace("labels: {app: web}", "labels: {app: db}"));
        assert_eq!(e.field, "spec.template.metadata.labels");
        assert!(e.message.contains("does not match"), "{e}");
        let e = err(&DEPLOY.replace("cpu: 500m", "cpu: lots"));
        assert_eq!(
            e.field,
            "spec.template.spec.containers[0].resources.requests.cpu"
        );
        let e = err(&DEPLOY.replace("  selector: {matchLabels: {app: web}}\n", ""));
        assert_eq!(e.field, "spec.selector");
        let sts = DEPLOY
            .replace("kind: Deployment", "kind: StatefulSet")
            .replace(
                "replicas: 3",
                "replicas: 3\n  podManagementPolicy: Sometimes",
            );
        let e = err(&sts);
        assert_eq!(e.field, "spec.podManagementPolicy");
        let rs = DEPLOY.replace("kind: Deployment", "kind: ReplicaSet");
        parse_str("in.yaml", &rs).expect("valid");
        let e = err(&DEPLOY.replace("apps/v1", "apps/v1beta1"));
        assert_eq!(e.field, "apiVersion");
    }
}
