//! The API server's validation of the selectors inside a Pod spec.
//!
//! A Pod whose node affinity, pod (anti-)affinity or topology spread constraint carries an
//! operator the API server does not know, or values that do not suit the operator, is
//! rejected on create (`ValidatePodSpec`), so for `berth simulate` it is bad input (exit 2)
//! naming the field. Selectors in places the API server does not validate (a Reservation's
//! schemaless template, its owners' label selectors, annotations) are not checked here: the
//! scheduler reports those on the object instead.

use serde_json::Value;

use crate::error::FieldError;

/// Checks every selector of a pod spec; paths are relative to the spec.
pub(crate) fn check_pod_selectors(spec: &Value) -> Result<(), FieldError> {
    let affinity = spec.get("affinity");
    if let Some(node) = affinity.and_then(|a| a.get("nodeAffinity")) {
        let base = "affinity.nodeAffinity";
        if let Some(req) = node.get("requiredDuringSchedulingIgnoredDuringExecution") {
            let terms = req.get("nodeSelectorTerms").and_then(Value::as_array);
            for (i, t) in terms.into_iter().flatten().enumerate() {
                node_term(t, &format!("{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"))?;
            }
        }
        for (i, p) in items(node, "preferredDuringSchedulingIgnoredDuringExecution") {
            if let Some(t) = p.get("preference") {
                node_term(
                    t,
                    &format!(
                        "{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"
                    ),
                )?;
            }
        }
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        let Some(a) = affinity.and_then(|a| a.get(kind)) else {
            continue;
        };
        let base = format!("affinity.{kind}");
        for (i, t) in items(a, "requiredDuringSchedulingIgnoredDuringExecution") {
            pod_term(
                t,
                &format!("{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"),
            )?;
        }
        for (i, w) in items(a, "preferredDuringSchedulingIgnoredDuringExecution") {
            if let Some(t) = w.get("podAffinityTerm") {
                pod_term(t, &format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm"))?;
            }
        }
    }
    for (i, c) in items(spec, "topologySpreadConstraints") {
        if let Some(sel) = c.get("labelSelector") {
            label_selector(
                sel,
                &format!("topologySpreadConstraints[{i}].labelSelector"),
            )?;
        }
    }
    Ok(())
}

fn items<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    v.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

fn values(r: &Value) -> Vec<&str> {
    r.get("values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn pod_term(t: &Value, path: &str) -> Result<(), FieldError> {
    for sel in ["labelSelector", "namespaceSelector"] {
        if let Some(s) = t.get(sel).filter(|s| !s.is_null()) {
            label_selector(s, &format!("{path}.{sel}"))?;
        }
    }
    Ok(())
}

/// `metav1.LabelSelector`: In/NotIn need values, Exists/DoesNotExist take none.
fn label_selector(sel: &Value, path: &str) -> Result<(), FieldError> {
    for (i, r) in items(sel, "matchExpressions") {
        let field = format!("{path}.matchExpressions[{i}]");
        let op = r.get("operator").and_then(Value::as_str).unwrap_or("");
        let vals = values(r);
        match op {
            "In" | "NotIn" if vals.is_empty() => {
                return Err(FieldError::new(
                    format!("{field}.values"),
                    "Required value: must be specified when `operator` is 'In' or 'NotIn'",
                ))
            }
            "Exists" | "DoesNotExist" if !vals.is_empty() => {
                return Err(FieldError::new(
                    format!("{field}.values"),
                    "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                ))
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                return Err(FieldError::new(
                    format!("{field}.operator"),
                    format!("Invalid value: {other:?}: not a valid selector operator"),
                ))
            }
        }
    }
    Ok(())
}

/// `v1.NodeSelectorTerm`: label expressions with Gt/Lt too, fields on `metadata.name` only.
fn node_term(t: &Value, path: &str) -> Result<(), FieldError> {
    for (i, r) in items(t, "matchExpressions") {
        let field = format!("{path}.matchExpressions[{i}]");
        let op = r.get("operator").and_then(Value::as_str).unwrap_or("");
        let vals = values(r);
        match op {
            "In" | "NotIn" if vals.is_empty() => {
                return Err(FieldError::new(format!("{field}.values"), "Required value: must be specified when `operator` is 'In' or 'NotIn'"))
            }
            "Exists" | "DoesNotExist" if !vals.is_empty() => {
                return Err(FieldError::new(format!("{field}.values"), "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
            }
            "Gt" | "Lt" if vals.len() != 1 || vals[0].parse::<i64>().is_err() => {
                return Err(FieldError::new(format!("{field}.values"), "Required value: must be specified single value when `operator` is 'Lt' or 'Gt'"))
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
            other => {
                return Err(FieldError::new(format!("{field}.operator"), format!("Invalid value: {other:?}: not a valid selector operator")))
            }
        }
    }
    for (i, r) in items(t, "matchFields") {
        let field = format!("{path}.matchFields[{i}]");
        if r.get("key").and_then(Value::as_str) != Some("metadata.name") {
            return Err(FieldError::new(
                format!("{field}.key"),
                "Invalid value: not a valid field selector key",
            ));
        }
        let op = r.get("operator").and_then(Value::as_str).unwrap_or("");
        if !(op == "In" || op == "NotIn") {
            return Err(FieldError::new(
                format!("{field}.operator"),
                format!("Invalid value: {op:?}: not a valid selector operator"),
            ));
        }
        if values(r).len() != 1 {
            return Err(FieldError::new(format!("{field}.values"), "Required value: must be only one value when `operator` is 'In' or 'NotIn' for node field selector"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn valid_selectors_pass() {
        let spec = json!({
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}],
                     "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"topologyKey": "zone",
                        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}}]}
            },
            "topologySpreadConstraints": [{"labelSelector": {"matchLabels": {"app": "web"}}}]
        });
        assert!(check_pod_selectors(&spec).is_ok());
    }

    #[test]
    fn an_unknown_pod_affinity_operator_names_the_field() {
        let spec = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname",
             "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Like", "values": ["web"]}]}}]}}});
        let e = check_pod_selectors(&spec).unwrap_err();
        assert_eq!(e.field, "affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].operator");
        assert!(e.message.contains("\"Like\""), "{}", e.message);
    }

    #[test]
    fn node_affinity_value_rules_are_enforced() {
        let term = |r: Value| json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [r]}]}}}});
        for bad in [
            json!({"key": "a", "operator": "In"}),
            json!({"key": "a", "operator": "Exists", "values": ["x"]}),
            json!({"key": "a", "operator": "Gt", "values": ["x"]}),
            json!({"key": "a", "operator": "Near", "values": ["x"]}),
        ] {
            assert!(check_pod_selectors(&term(bad.clone())).is_err(), "{bad}");
        }
    }

    #[test]
    fn spread_constraint_selectors_are_checked() {
        let spec = json!({"topologySpreadConstraints": [{"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}}]});
        let e = check_pod_selectors(&spec).unwrap_err();
        assert_eq!(
            e.field,
            "topologySpreadConstraints[0].labelSelector.matchExpressions[0].operator"
        );
    }
}
