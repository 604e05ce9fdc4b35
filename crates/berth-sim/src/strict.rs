//! Strict field validation, as `kubectl apply` asks the API server for by default
//! (`--validate=strict`): a field the object's schema does not have is bad input.
//!
//! The typed readers cannot see such fields: k8s-openapi and serde skip unknown keys, so a
//! misspelt `nodeSelecter` or `resources: {request: ..}` would silently read as absent and
//! the scenario would test something other than what its author wrote. Instead each object
//! is walked against its published OpenAPI schema: k8s-openapi's for built-in kinds, and
//! berth's CRDs (checked against upstream's in berth-api's tests) for Reservation and
//! NodeResourceTopology. A schema node without `properties` (a Reservation's
//! `spec.template`, marked `x-kubernetes-preserve-unknown-fields` upstream; a map such as
//! `labels`) accepts any key, as the API server does.

use std::sync::OnceLock;

use serde_json::{Map, Value};

use berth_api::k8s_openapi::api::core::v1::{Event, Node, PersistentVolumeClaim, Pod};
use berth_api::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use berth_api::k8s_openapi::api::scheduling::v1::PriorityClass;
use berth_api::k8s_openapi::api::storage::v1::CSINode;
use berth_api::k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use berth_api::k8s_openapi::schemars::generate::SchemaSettings;

use crate::error::FieldError;

/// The kinds checked, each with its schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Schema {
    Node,
    Pod,
    PersistentVolumeClaim,
    CsiNode,
    PriorityClass,
    PodDisruptionBudget,
    Event,
    Reservation,
    NrtV1alpha1,
    NrtV1alpha2,
}

/// Every root schema, plus the definitions their `$ref`s point into.
struct Schemas {
    roots: Vec<(Schema, Value)>,
    defs: Map<String, Value>,
}

/// Where `$ref`s point: `#/$defs/<name>`.
const DEFS_PREFIX: &str = "#/$defs/";

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(build)
}

fn build() -> Schemas {
    let mut generator = SchemaSettings::default().into_generator();
    let mut roots = Vec::new();
    macro_rules! builtin {
        ($kind:expr, $ty:ty) => {
            roots.push(($kind, generator.subschema_for::<$ty>().to_value()))
        };
    }
    builtin!(Schema::Node, Node);
    builtin!(Schema::Pod, Pod);
    builtin!(Schema::PersistentVolumeClaim, PersistentVolumeClaim);
    builtin!(Schema::CsiNode, CSINode);
    builtin!(Schema::PriorityClass, PriorityClass);
    builtin!(Schema::PodDisruptionBudget, PodDisruptionBudget);
    builtin!(Schema::Event, Event);
    let meta = generator.subschema_for::<ObjectMeta>().to_value();
    let crd_root = |crd: &CustomResourceDefinition, version: &str| {
        let schema = crd
            .spec
            .versions
            .iter()
            .find(|v| v.name == version)
            .and_then(|v| v.schema.as_ref())
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| serde_json::to_value(s).ok());
        let mut schema = schema.unwrap_or(Value::Null);
        // `apiVersion`, `kind` and `metadata` are the API server's own: it checks metadata
        // as an ObjectMeta whatever the CRD says.
        if let Some(props) = schema
            .as_object_mut()
            .map(|o| {
                o.entry("properties")
                    .or_insert_with(|| Value::Object(Map::new()))
            })
            .and_then(Value::as_object_mut)
        {
            props.insert("apiVersion".into(), serde_json::json!({"type": "string"}));
            props.insert("kind".into(), serde_json::json!({"type": "string"}));
            props.insert("metadata".into(), meta.clone());
        }
        schema
    };
    let reservation = berth_api::crd::reservation_crd();
    roots.push((Schema::Reservation, crd_root(&reservation, "v1alpha1")));
    let nrt = berth_api::nrt::nrt_crd();
    roots.push((Schema::NrtV1alpha1, crd_root(&nrt, "v1alpha1")));
    roots.push((Schema::NrtV1alpha2, crd_root(&nrt, "v1alpha2")));
    Schemas {
        roots,
        defs: generator.definitions().clone(),
    }
}

/// Checks `value` against `kind`'s schema: the first field it does not have (keys visited
/// in sorted order, so the same input always names the same field) is an error naming its
/// path.
pub(crate) fn check(kind: Schema, value: &Value) -> Result<(), FieldError> {
    let s = schemas();
    let Some((_, root)) = s.roots.iter().find(|(k, _)| *k == kind) else {
        return Ok(());
    };
    match walk(value, root, &s.defs, "") {
        None => Ok(()),
        Some(u) => Err(u.into_error()),
    }
}

/// An unknown field: its path and the names its parent does know.
struct Unknown {
    path: String,
    name: String,
    known: Vec<String>,
}

impl Unknown {
    fn into_error(self) -> FieldError {
        let hint = suggestion(&self.name, &self.known)
            .map(|s| format!(" (did you mean {s:?}?)"))
            .unwrap_or_default();
        FieldError::new(
            self.path,
            format!(
                "unknown field {:?}{hint}: the object's schema has no such field (kubectl apply's strict field validation rejects it)",
                self.name
            ),
        )
    }
}

/// Follows `$ref`s (bounded, in case of a cycle of bare references).
fn resolve<'a>(mut schema: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    for _ in 0..16 {
        let Some(name) = schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix(DEFS_PREFIX))
        else {
            break;
        };
        match defs.get(name) {
            Some(next) => schema = next,
            None => break,
        }
    }
    schema
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn walk(value: &Value, schema: &Value, defs: &Map<String, Value>, path: &str) -> Option<Unknown> {
    let schema = resolve(schema, defs);
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return None;
    }
    // `anyOf`/`oneOf`/`allOf`: the value is fine if one branch takes it.
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            let mut first = None;
            for b in branches {
                match walk(value, b, defs, path) {
                    None => return None,
                    Some(u) => {
                        first.get_or_insert(u);
                    }
                }
            }
            if first.is_some() {
                return first;
            }
        }
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|v| v.is_object());
            // `additionalProperties: true`: any key, of any shape.
            let open = schema.get("additionalProperties") == Some(&Value::Bool(true));
            for (name, v) in map {
                let child = join(path, name);
                let sub = props.and_then(|p| p.get(name)).or(extra);
                match sub {
                    Some(sub) => {
                        if let Some(u) = walk(v, sub, defs, &child) {
                            return Some(u);
                        }
                    }
                    // A schema that names its properties (and takes no others) does not
                    // have this one; a schema naming none is free-form.
                    None if props.is_some() && !open => {
                        return Some(Unknown {
                            path: child,
                            name: name.clone(),
                            known: props
                                .map(|p| p.keys().cloned().collect())
                                .unwrap_or_default(),
                        })
                    }
                    None => {}
                }
            }
            None
        }
        Value::Array(items) => {
            let sub = schema.get("items")?;
            items
                .iter()
                .enumerate()
                .find_map(|(i, v)| walk(v, sub, defs, &format!("{path}[{i}]")))
        }
        _ => None,
    }
}

/// The known name closest to a misspelt one, when it is close enough to be the intent:
/// equal ignoring case, or within two edits.
fn suggestion<'a>(name: &str, known: &'a [String]) -> Option<&'a str> {
    let lower = name.to_lowercase();
    if let Some(k) = known.iter().find(|k| k.to_lowercase() == lower) {
        return Some(k);
    }
    known
        .iter()
        .map(|k| (edit_distance(&lower, &k.to_lowercase()), k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, k)| (*d, k.as_str()))
        .map(|(_, k)| k.as_str())
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(kind: Schema, v: Value) -> Option<String> {
        check(kind, &v).err().map(|e| e.field)
    }

    #[test]
    fn typos_in_built_in_kinds_are_found_with_their_path() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"nodeSelecter": {"a": "b"}, "containers": [{"name": "c"}]}});
        assert_eq!(
            field(Schema::Pod, pod).as_deref(),
            Some("spec.nodeSelecter")
        );
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "resources": {"requests": {"cpu": 1}}},
            {"name": "d", "resources": {"request": {"cpu": 1}}}]}});
        assert_eq!(
            field(Schema::Pod, pod).as_deref(),
            Some("spec.containers[1].resources.request")
        );
        let node = json!({"metadata": {"name": "n"}, "status": {"alocatable": {"cpu": 1}}});
        assert_eq!(
            field(Schema::Node, node).as_deref(),
            Some("status.alocatable")
        );
        let node = json!({"metadata": {"name": "n", "lables": {}}});
        assert_eq!(
            field(Schema::Node, node).as_deref(),
            Some("metadata.lables")
        );
    }

    #[test]
    fn maps_and_well_formed_objects_pass() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"any/key": "v"}, "annotations": {"x": "y"}},
            "spec": {"nodeSelector": {"zone": "a"}, "priority": 5,
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}}},
                "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}],
                    "resources": {"requests": {"cpu": "1", "example.com/gpu": 1}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}});
        assert_eq!(field(Schema::Pod, pod), None);
    }

    #[test]
    fn a_reservation_template_is_free_form_but_its_spec_is_not() {
        let r = json!({"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": "r"},
            "spec": {"template": {"namespace": "default", "whatever": 1,
                "spec": {"containers": [{"name": "c", "resources": {"request": {}}}]}},
                "owners": [{"object": {"name": "p"}}], "ttl": "1h"}});
        assert_eq!(field(Schema::Reservation, r.clone()), None);
        let mut typo = r.clone();
        typo["spec"]["tll"] = json!("1h");
        assert_eq!(
            field(Schema::Reservation, typo).as_deref(),
            Some("spec.tll")
        );
        let mut typo = r;
        typo["spec"]["allocateonce"] = json!(false);
        let e = check(Schema::Reservation, &typo).expect_err("unknown");
        assert_eq!(e.field, "spec.allocateonce");
        assert!(
            e.message.contains("did you mean \"allocateOnce\"?"),
            "{}",
            e.message
        );
    }

    #[test]
    fn nrt_versions_have_their_own_fields() {
        let t = json!({"metadata": {"name": "n"}, "topologyPolicies": ["None"],
            "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
            "zones": [{"name": "node-0", "type": "Node", "costs": [{"name": "node-0", "value": 10}],
                "resources": [{"name": "cpu", "capacity": 4, "allocatable": "4", "available": 4}]}]});
        assert_eq!(field(Schema::NrtV1alpha2, t.clone()), None);
        assert_eq!(
            field(Schema::NrtV1alpha1, t).as_deref(),
            Some("attributes"),
            "v1alpha1 has no top-level attributes"
        );
        let t = json!({"metadata": {"name": "n"}, "zones": [{"name": "node-0", "type": "Node",
            "resources": [{"name": "cpu", "capacity": 4, "allocatable": 4, "avilable": 4}]}]});
        assert_eq!(
            field(Schema::NrtV1alpha2, t).as_deref(),
            Some("zones[0].resources[0].avilable")
        );
    }

    #[test]
    fn named_properties_close_a_schema_unless_it_says_otherwise() {
        let defs = Map::new();
        let value = json!({"a": 1, "b": {"c": 2}});
        let closed = json!({"properties": {"a": {}}});
        let unknown = walk(&value, &closed, &defs, "x").map(|u| u.path);
        assert_eq!(unknown.as_deref(), Some("x.b"));
        let open = json!({"properties": {"a": {}}, "additionalProperties": true});
        assert!(walk(&value, &open, &defs, "x").is_none());
        let preserved =
            json!({"properties": {"a": {}}, "x-kubernetes-preserve-unknown-fields": true});
        assert!(walk(&value, &preserved, &defs, "x").is_none());
        let map = json!({"additionalProperties": {"properties": {"c": {}}}});
        assert!(walk(&json!({"k": {"c": 1}}), &map, &defs, "").is_none());
        let unknown = walk(&json!({"k": {"d": 1}}), &map, &defs, "").map(|u| u.path);
        assert_eq!(unknown.as_deref(), Some("k.d"));
        let by_ref = json!({"$ref": "#/$defs/T"});
        let mut defs = Map::new();
        defs.insert("T".into(), closed);
        let unknown = walk(&value, &by_ref, &defs, "").map(|u| u.path);
        assert_eq!(unknown.as_deref(), Some("b"));
    }

    #[test]
    fn suggestions_are_close_names_only() {
        let known = ["nodeSelector".to_string(), "nodeName".to_string()];
        assert_eq!(suggestion("nodeSelecter", &known), Some("nodeSelector"));
        assert_eq!(suggestion("NODENAME", &known), Some("nodeName"));
        assert_eq!(suggestion("tolerations", &known), None);
    }
}
