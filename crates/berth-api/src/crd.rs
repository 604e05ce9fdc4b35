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

use crate::migration::PodMigrationJob;
use crate::reservation::Reservation;

/// A CRD could not be rendered.
#[derive(Debug, thiserror::Error)]
#[error("cannot render the CustomResourceDefinition as YAML: {0}")]
pub struct CrdError(#[from] serde_yaml_ng::Error);

/// `reservations.scheduling.koordinator.sh`, compatible with Koordinator's
/// `config/crd/bases/scheduling.koordinator.sh_reservations.yaml`.
pub fn reservation_crd() -> CustomResourceDefinition {
    let mut crd = Reservation::crd();
    koordinator_shape(&mut crd, "ReservationList", |_| {});
    crd
}

/// `podmigrationjobs.scheduling.koordinator.sh`, compatible with Koordinator's
/// `config/crd/bases/scheduling.koordinator.sh_podmigrationjobs.yaml` (v1.8).
pub fn pod_migration_job_crd() -> CustomResourceDefinition {
    let mut crd = PodMigrationJob::crd();
    koordinator_shape(&mut crd, "PodMigrationJobList", |root| {
        // Upstream's conditions carry `+nullable` times (a Go `metav1.Time`, not a pointer).
        let times = root
            .properties
            .as_mut()
            .and_then(|p| p.get_mut("status"))
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("conditions"))
            .and_then(|c| match c.items.as_mut() {
                Some(JSONSchemaPropsOrArray::Schema(item)) => item.properties.as_mut(),
                _ => None,
            });
        for time in times.into_iter().flat_map(|p| p.values_mut()) {
            if time.format.as_deref() == Some("date-time") {
                time.nullable = Some(true);
            }
        }
    });
    crd
}

/// Brings a derived CRD to the shape Koordinator's controller-gen CRDs have, so that one
/// read back from a cluster compares equal: the list kind spelled out (the derive leaves it to
/// the API server's defaulting), `spec` not required (upstream requires only its fields, once
/// present; requiring it would reject objects a Koordinator cluster stores), the three
/// top-level fields typed, no `nullable`; then `extra` for what one kind adds.
fn koordinator_shape(
    crd: &mut CustomResourceDefinition,
    list_kind: &str,
    extra: impl Fn(&mut JSONSchemaProps),
) {
    crd.spec.names.list_kind = Some(list_kind.to_string());
    for version in &mut crd.spec.versions {
        let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
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
        extra(root);
    }
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

/// Facts about a CRD's schema in a form of the project's own: every node of an OpenAPI v3
/// schema by its path, with the properties that decide what the API server accepts. The
/// facts of the upstream CRDs berth must stay compatible with live in `testdata/` as such
/// flat YAML maps, so that a difference reads as one line per node.
#[cfg(test)]
pub(crate) mod facts {
    use std::collections::BTreeMap;

    use serde_json::{Map, Value};

    /// What to record of each node.
    pub(crate) struct Rules {
        /// Keys copied as they are (`type`, `format`, `default`...).
        pub(crate) keys: &'static [&'static str],
        /// List-valued keys compared as sets (`required`, `enum`): recorded sorted, and left
        /// out when empty.
        pub(crate) sets: &'static [&'static str],
        /// An `x-kubernetes-int-or-string` node is a leaf: recorded with its `pattern` and
        /// the types of its `anyOf` branches.
        pub(crate) int_or_string_leaf: bool,
        /// Root properties not recorded (the API server's own `apiVersion`, `kind`,
        /// `metadata`, which a derived schema may leave out).
        pub(crate) skip_root: &'static [&'static str],
    }

    /// `path → facts`. The root is `.`; a property `.spec.ttl`; an array's items
    /// `.spec.owners[]`; a map's values `.status.allocatable{}`.
    pub(crate) fn flatten(schema: &Value, rules: &Rules) -> BTreeMap<String, Value> {
        let mut out = BTreeMap::new();
        walk(schema, ".", rules, &mut out);
        out
    }

    fn walk(schema: &Value, path: &str, rules: &Rules, out: &mut BTreeMap<String, Value>) {
        let mut facts = Map::new();
        for key in rules.keys {
            if let Some(v) = schema.get(*key) {
                facts.insert((*key).to_string(), v.clone());
            }
        }
        for key in rules.sets {
            let mut items: Vec<Value> = schema
                .get(*key)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            items.sort_by_key(|v| v.to_string());
            if !items.is_empty() {
                facts.insert((*key).to_string(), Value::Array(items));
            }
        }
        let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        if rules.int_or_string_leaf && int_or_string {
            facts.insert("x-kubernetes-int-or-string".into(), Value::Bool(true));
            if let Some(p) = schema.get("pattern") {
                facts.insert("pattern".into(), p.clone());
            }
            let types: Vec<Value> = schema
                .get("anyOf")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|b| b.get("type").cloned().unwrap_or(Value::Null))
                .collect();
            facts.insert("anyOf".into(), Value::Array(types));
            out.insert(path.to_string(), Value::Object(facts));
            return;
        }
        out.insert(path.to_string(), Value::Object(facts));
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (name, child) in props {
                if path == "." && rules.skip_root.contains(&name.as_str()) {
                    continue;
                }
                let child_path = if path == "." {
                    format!(".{name}")
                } else {
                    format!("{path}.{name}")
                };
                walk(child, &child_path, rules, out);
            }
        }
        if let Some(items) = schema.get("items").filter(|v| v.is_object()) {
            walk(items, &format!("{path}[]"), rules, out);
        }
        if let Some(extra) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            walk(extra, &format!("{path}{{}}"), rules, out);
        }
    }

    /// One line per node that differs, is missing in ours, or is ours only.
    pub(crate) fn diff(
        want: &BTreeMap<String, Value>,
        ours: &BTreeMap<String, Value>,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        for (path, w) in want {
            match ours.get(path) {
                None => problems.push(format!("{path}: missing in ours (upstream has it: {w})")),
                Some(o) if o != w => problems.push(format!("{path}: upstream {w}, ours {o}")),
                Some(_) => {}
            }
        }
        for path in ours.keys().filter(|p| !want.contains_key(*p)) {
            problems.push(format!("{path}: not in upstream"));
        }
        problems
    }

    /// The `schema` map of a facts file as `path → facts`.
    pub(crate) fn schema_facts(facts: &Value, pointer: &str) -> BTreeMap<String, Value> {
        facts
            .pointer(pointer)
            .and_then(Value::as_object)
            .unwrap_or_else(|| panic!("{pointer} missing in the facts file"))
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Reads a facts file's text (compiled in with `include_str!`, so the test needs
    /// nothing beside the repository).
    pub(crate) fn parse(text: &str) -> Value {
        serde_yaml_ng::from_str(text).expect("a facts file is YAML")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::{ReservationAllocatePolicy, ReservationPhase};
    use serde_json::{json, Value};

    /// Koordinator's Reservation CRD (`config/crd/bases/scheduling.koordinator.sh_reservations.yaml`,
    /// controller-gen v0.20.1) as facts: identity, printer columns and every schema node.
    const UPSTREAM: &str = include_str!("../../../testdata/koordinator-reservation-crd.facts.yaml");

    fn upstream() -> Value {
        facts::parse(UPSTREAM)
    }

    fn ours() -> Value {
        serde_json::to_value(reservation_crd()).expect("a CRD serializes")
    }

    fn at<'a>(v: &'a Value, pointer: &str) -> &'a Value {
        v.pointer(pointer)
            .unwrap_or_else(|| panic!("{pointer} missing in {v}"))
    }

    /// The schema keys Koordinator's CRD and ours must agree on, node by node: same types,
    /// formats, enums, defaults, required lists, min counts and pruning switches.
    const RULES: facts::Rules = facts::Rules {
        keys: &[
            "type",
            "nullable",
            "format",
            "default",
            "minItems",
            "minProperties",
            "x-kubernetes-preserve-unknown-fields",
            "x-kubernetes-int-or-string",
        ],
        sets: &["required", "enum"],
        int_or_string_leaf: false,
        skip_root: &[],
    };

    #[test]
    fn identity_matches_upstream() {
        let (up, ours) = (upstream(), ours());
        assert_eq!(at(&ours, "/apiVersion"), "apiextensions.k8s.io/v1");
        assert_eq!(at(&ours, "/kind"), "CustomResourceDefinition");
        assert_eq!(at(&ours, "/metadata/name"), at(&up, "/name"));
        assert_eq!(at(&ours, "/spec/group"), at(&up, "/group"));
        assert_eq!(at(&ours, "/spec/scope"), at(&up, "/scope"));
        assert_eq!(at(&ours, "/spec/scope"), "Cluster");
        for name in ["kind", "listKind", "plural", "singular"] {
            assert_eq!(
                at(&ours, &format!("/spec/names/{name}")),
                at(&up, &format!("/names/{name}")),
                "names.{name}"
            );
        }
        assert_eq!(at(&up, "/names/shortNames"), &json!([]));
        assert!(ours
            .pointer("/spec/names/shortNames")
            .is_none_or(|v| v == &Value::Array(vec![])));

        let (up_versions, our_versions) = (at(&up, "/versions"), at(&ours, "/spec/versions"));
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
        let ours = at(&ours(), "/spec/versions/0/additionalPrinterColumns").clone();
        assert_eq!(
            &ours,
            at(&upstream(), "/versions/0/additionalPrinterColumns")
        );
        let names: Vec<&str> = ours
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(|c| c.get("name").and_then(Value::as_str))
            .collect();
        assert_eq!(names, ["Phase", "Age", "Node", "TTL", "Expires"]);
    }

    #[test]
    fn schema_accepts_what_upstream_accepts() {
        let want = facts::schema_facts(&upstream(), "/versions/0/schema");
        let our_schema = at(&ours(), "/spec/versions/0/schema/openAPIV3Schema").clone();
        let problems = facts::diff(&want, &facts::flatten(&our_schema, &RULES));
        assert!(
            problems.is_empty(),
            "schema differences:\n{}",
            problems.join("\n")
        );
        // The facts file is the whole upstream schema, not a sample of it.
        assert!(want.len() > 50, "{} nodes", want.len());

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
    fn a_schema_difference_is_reported_by_path() {
        let mut schema = at(&ours(), "/spec/versions/0/schema/openAPIV3Schema").clone();
        let want = facts::flatten(&schema, &RULES);
        schema["properties"]["spec"]["properties"]["ttl"]["default"] = json!("1h");
        if let Some(props) = schema["properties"]["spec"]["properties"].as_object_mut() {
            props.remove("expires");
            props.insert("extra".into(), json!({"type": "string"}));
        }
        let problems = facts::diff(&want, &facts::flatten(&schema, &RULES));
        assert_eq!(
            problems,
            [
                r#".spec.expires: missing in ours (upstream has it: {"format":"date-time","type":"string"})"#,
                r#".spec.ttl: upstream {"default":"24h","type":"string"}, ours {"default":"1h","type":"string"}"#,
                ".spec.extra: not in upstream",
            ]
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

    /// A Reservation shaped as Koordinator's `config/samples` one: a template with a
    /// namespace (a field PodTemplateSpec does not have, kept by the schemaless template),
    /// a container with args, image, limits and requests, and an owner by object, no ttl.
    fn sample() -> Value {
        json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": "reservation-sample"},
            "spec": {
                "template": {
                    "namespace": "default",
                    "spec": {
                        "containers": [{
                            "args": ["-c", "1"],
                            "command": ["stress"],
                            "image": "polinux/stress",
                            "imagePullPolicy": "Always",
                            "name": "stress",
                            "resources": {
                                "limits": {"cpu": "1", "memory": "1Gi"},
                                "requests": {"cpu": "200m", "memory": "400Mi"},
                            },
                        }],
                        "restartPolicy": "Always",
                        "schedulerName": "koord-scheduler",
                    },
                },
                "owners": [{"object": {"name": "reserve-demo-0", "namespace": "default"}}],
            },
        })
    }

    #[test]
    fn the_upstream_sample_round_trips_unchanged() {
        let original = sample();
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
            serde_json::from_value(sample()).expect("the sample is a Reservation");
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

    /// Koordinator's PodMigrationJob CRD as facts (same form as the Reservation's).
    const UPSTREAM_PMJ: &str =
        include_str!("../../../testdata/koordinator-podmigrationjob-crd.facts.yaml");

    #[test]
    fn the_pod_migration_job_crd_matches_upstream() {
        let up = facts::parse(UPSTREAM_PMJ);
        let ours = serde_json::to_value(pod_migration_job_crd()).expect("a CRD serializes");
        assert_eq!(at(&ours, "/metadata/name"), at(&up, "/name"));
        assert_eq!(at(&ours, "/spec/scope"), "Cluster");
        assert_eq!(at(&ours, "/spec/scope"), at(&up, "/scope"));
        for name in ["kind", "listKind", "plural", "singular", "shortNames"] {
            assert_eq!(
                at(&ours, &format!("/spec/names/{name}")),
                at(&up, &format!("/names/{name}")),
                "{name}"
            );
        }
        assert_eq!(
            at(&ours, "/spec/versions/0/additionalPrinterColumns"),
            at(&up, "/versions/0/additionalPrinterColumns")
        );
        assert_eq!(
            at(&ours, "/spec/versions/0/subresources"),
            at(&up, "/versions/0/subresources")
        );
        let want = facts::schema_facts(&up, "/versions/0/schema");
        let schema = at(&ours, "/spec/versions/0/schema/openAPIV3Schema").clone();
        let problems = facts::diff(&want, &facts::flatten(&schema, &RULES));
        assert!(
            problems.is_empty(),
            "schema differences:\n{}",
            problems.join("\n")
        );
        assert!(want.len() > 50, "{} nodes", want.len());
        let yaml = to_yaml(&pod_migration_job_crd()).expect("renders");
        assert!(yaml.contains("name: podmigrationjobs.scheduling.koordinator.sh"));
    }
}
