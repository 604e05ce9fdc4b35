//! CustomResourceDefinitions berth installs or checks, and their YAML rendering.
//!
//! The Reservation CRD is generated from the Rust type (so the schema can never drift from
//! what berth reads and writes) and tested against Koordinator's published CRD, so a cluster
//! may carry either one: whatever upstream accepts, berth's accepts, and vice versa for the
//! properties that matter (names, scope, subresources, printer columns, required fields,
//! defaults, enums, pruning).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;
use serde::Serialize;

use crate::reservation::Reservation;

/// A CRD could not be rendered.
#[derive(Debug, thiserror::Error)]
#[error("cannot render the CustomResourceDefinition as YAML: {0}")]
pub struct CrdError(#[from] serde_yaml_ng::Error);

/// `reservations.scheduling.koordinator.sh`, compatible with Koordinator's
/// `config/crd/bases/scheduling.koordinator.sh_reservations.yaml`.
pub fn reservation_crd() -> CustomResourceDefinition {
    let mut crd = Reservation::crd();
    // The derive leaves this to the API server's defaulting; upstream spells it out, and a
    // CRD read back from a cluster compares equal only if ours does too.
    crd.spec.names.list_kind = Some("ReservationList".to_string());
    for version in &mut crd.spec.versions {
        let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        // Upstream does not require `spec` (only its fields, once it is present); requiring it
        // would reject objects a Koordinator cluster stores.
        root.required = None;
        let properties = root.properties.get_or_insert_with(Default::default);
        let typed = |ty: &str| JSONSchemaProps {
            type_: Some(ty.to_string()),
            ..Default::default()
        };
        properties.insert("apiVersion".to_string(), typed("string"));
        properties.insert("kind".to_string(), typed("string"));
        properties.insert("metadata".to_string(), typed("object"));
        strip_nullable(root);
    }
    crd
}

/// Removes the `nullable: true` the derive puts on every `Option` field. Upstream has none:
/// there an explicit `null` is pruned and then defaulted (`ttl: null` becomes `"24h"`),
/// whereas `nullable` would keep the `null` and skip the default.
fn strip_nullable(schema: &mut JSONSchemaProps) {
    schema.nullable = None;
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        strip_nullable(child);
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(item)) => strip_nullable(item),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.iter_mut().for_each(strip_nullable),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(extra)) = schema.additional_properties.as_mut() {
        strip_nullable(extra);
    }
    for list in [&mut schema.all_of, &mut schema.any_of, &mut schema.one_of] {
        list.iter_mut().flatten().for_each(strip_nullable);
    }
}

/// Renders a CRD as one YAML document (no leading `---`), for `kubectl apply -f`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, CrdError> {
    to_yaml_value(crd)
}

fn to_yaml_value<T: Serialize>(value: &T) -> Result<String, CrdError> {
    Ok(serde_yaml_ng::to_string(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::{ReservationAllocatePolicy, ReservationPhase};
    use serde_json::Value;

    const SAMPLES: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/upstream/samples/"
    );

    /// Reads a reference sample; a missing file fails the test, it never skips it.
    fn sample(name: &str) -> Value {
        let path = format!("{SAMPLES}{name}");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reference sample {path} must exist for this test: {e}"));
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path} is not YAML: {e}"))
    }

    fn ours() -> Value {
        serde_json::to_value(reservation_crd()).expect("a CRD serializes")
    }

    fn at<'a>(v: &'a Value, pointer: &str) -> &'a Value {
        v.pointer(pointer)
            .unwrap_or_else(|| panic!("{pointer} missing in {v}"))
    }

    #[test]
    fn identity_matches_upstream() {
        let up = sample("koordinator-scheduling.koordinator.sh_reservations.yaml");
        let ours = ours();
        for pointer in [
            "/apiVersion",
            "/kind",
            "/metadata/name",
            "/spec/group",
            "/spec/names/kind",
            "/spec/names/listKind",
            "/spec/names/plural",
            "/spec/names/singular",
            "/spec/scope",
        ] {
            assert_eq!(at(&ours, pointer), at(&up, pointer), "{pointer}");
        }
        assert_eq!(at(&ours, "/spec/scope"), "Cluster");
        assert!(ours
            .pointer("/spec/names/shortNames")
            .is_none_or(|v| v == &Value::Array(vec![])));

        let (up_versions, our_versions) = (at(&up, "/spec/versions"), at(&ours, "/spec/versions"));
        assert_eq!(our_versions.as_array().map(Vec::len), Some(1));
        assert_eq!(up_versions.as_array().map(Vec::len), Some(1));
        for pointer in ["/0/name", "/0/served", "/0/storage", "/0/subresources"] {
            assert_eq!(
                at(our_versions, pointer),
                at(up_versions, pointer),
                "versions{pointer}"
            );
        }
        assert_eq!(
            at(our_versions, "/0/subresources"),
            &serde_json::json!({"status": {}})
        );
    }

    #[test]
    fn printer_columns_match_upstream() {
        let up = sample("koordinator-scheduling.koordinator.sh_reservations.yaml");
        let columns = |crd: &Value| at(crd, "/spec/versions/0/additionalPrinterColumns").clone();
        assert_eq!(columns(&ours()), columns(&up));
        let ours = columns(&ours());
        let names: Vec<&str> = ours
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(|c| c.get("name").and_then(Value::as_str))
            .collect();
        assert_eq!(names, ["Phase", "Age", "Node", "TTL", "Expires"]);
    }

    /// Walks the upstream schema and checks ours node by node: same property names (nothing
    /// upstream keeps is pruned by ours, nothing misspelt), same types, formats, enums,
    /// defaults, required lists, min counts and pruning switches.
    fn compare_schema(up: &Value, ours: &Value, path: &str, problems: &mut Vec<String>) {
        let same = |key: &str, problems: &mut Vec<String>| {
            let (u, o) = (up.get(key), ours.get(key));
            if u != o {
                problems.push(format!("{path}: {key}: upstream {u:?}, ours {o:?}"));
            }
        };
        for key in [
            "type",
            "nullable",
            "format",
            "default",
            "minItems",
            "minProperties",
            "x-kubernetes-preserve-unknown-fields",
            "x-kubernetes-int-or-string",
        ] {
            same(key, problems);
        }
        let set = |v: &Value, key: &str| -> Vec<String> {
            let mut items: Vec<String> = v
                .get(key)
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|x| x.to_string()).collect())
                .unwrap_or_default();
            items.sort();
            items
        };
        for key in ["required", "enum"] {
            let (u, o) = (set(up, key), set(ours, key));
            if u != o {
                problems.push(format!("{path}: {key}: upstream {u:?}, ours {o:?}"));
            }
        }
        let props = |v: &Value| {
            v.get("properties")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let (up_props, our_props) = (props(up), props(ours));
        for (name, up_child) in &up_props {
            match our_props.get(name) {
                Some(our_child) => {
                    compare_schema(up_child, our_child, &format!("{path}.{name}"), problems)
                }
                None => problems.push(format!("{path}.{name}: missing in ours (would be pruned)")),
            }
        }
        for name in our_props.keys().filter(|n| !up_props.contains_key(*n)) {
            problems.push(format!("{path}.{name}: not in upstream"));
        }
        for key in ["items", "additionalProperties"] {
            match (up.get(key), ours.get(key)) {
                (Some(u), Some(o)) => compare_schema(u, o, &format!("{path}[{key}]"), problems),
                (None, None) => {}
                (u, o) => problems.push(format!("{path}: {key}: upstream {u:?}, ours {o:?}")),
            }
        }
    }

    #[test]
    fn schema_accepts_what_upstream_accepts() {
        let up = sample("koordinator-scheduling.koordinator.sh_reservations.yaml");
        let schema = |crd: &Value| at(crd, "/spec/versions/0/schema/openAPIV3Schema").clone();
        let (up_schema, our_schema) = (schema(&up), schema(&ours()));
        let mut problems = Vec::new();
        compare_schema(&up_schema, &our_schema, "", &mut problems);
        assert!(
            problems.is_empty(),
            "schema differences:\n{}",
            problems.join("\n")
        );

        // The properties the brief singles out, spelled out so a failure reads plainly.
        let spec = at(&our_schema, "/properties/spec");
        assert_eq!(
            at(
                spec,
                "/properties/template/x-kubernetes-preserve-unknown-fields"
            ),
            true
        );
        assert_eq!(at(spec, "/properties/owners/minItems"), 1);
        assert_eq!(at(spec, "/properties/owners/items/minProperties"), 1);
        assert_eq!(at(spec, "/properties/ttl/default"), "24h");
        assert_eq!(at(spec, "/properties/allocateOnce/default"), true);
        assert_eq!(
            at(&our_schema, "/properties/status/properties/phase/default"),
            "Pending"
        );
    }

    #[test]
    fn yaml_rendering_reads_back_as_the_same_crd() {
        let crd = reservation_crd();
        let yaml = to_yaml(&crd).expect("renders");
        assert!(
            yaml.contains("name: reservations.scheduling.koordinator.sh"),
            "{yaml}"
        );
        let back: CustomResourceDefinition = serde_yaml_ng::from_str(&yaml).expect("parses back");
        assert_eq!(back, crd);
    }

    #[test]
    fn the_upstream_sample_round_trips_unchanged() {
        let original = sample("koordinator-scheduling_v1alpha1_reservation.yaml");
        let r: Reservation =
            serde_json::from_value(original.clone()).expect("the sample is a Reservation");
        let back = serde_json::to_value(&r).expect("serializes");
        assert_eq!(back, original, "every field survives a read and a write");

        // And it means what it says.
        assert_eq!(r.metadata.name.as_deref(), Some("reservation-sample"));
        let template = r.spec.template.as_ref().expect("template");
        let container = &template.spec.as_ref().expect("spec").containers[0];
        assert_eq!(container.name, "stress");
        let requests = container
            .resources
            .as_ref()
            .and_then(|res| res.requests.as_ref())
            .expect("requests");
        assert_eq!(requests.get("cpu").map(|q| q.0.as_str()), Some("200m"));
        assert_eq!(
            template.unknown_fields.get("namespace"),
            Some(&Value::from("default"))
        );
        assert_eq!(
            r.spec.owners[0]
                .object
                .as_ref()
                .and_then(|o| o.name.as_deref()),
            Some("reserve-demo-0")
        );
        assert_eq!(r.spec.allocate_policy, ReservationAllocatePolicy::Default);
        assert_eq!(r.phase(), ReservationPhase::Pending);
    }

    #[test]
    fn the_upstream_sample_is_valid_once_defaulted() {
        let mut r: Reservation =
            serde_json::from_value(sample("koordinator-scheduling_v1alpha1_reservation.yaml"))
                .expect("the sample is a Reservation");
        assert_eq!(r.validate(), Ok(()));
        assert_eq!(
            r.scheduler_problems(),
            vec![crate::reservation::SchedulerProblem::MissingExpiration],
            "before defaulting, koord-scheduler's check would fail"
        );
        r.apply_defaults();
        assert_eq!(r.spec.ttl.as_ref().map(|t| t.as_str()), Some("24h"));
        assert!(r.spec.allocate_once());
        assert_eq!(r.scheduler_problems(), vec![]);
    }
}
