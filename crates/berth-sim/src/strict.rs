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

use berth_core::collections::FastMap;

use serde_json::{Map, Value};

use berth_api::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use berth_api::k8s_openapi::api::core::v1::{
    Event, Node, PersistentVolume, PersistentVolumeClaim, Pod,
};
use berth_api::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use berth_api::k8s_openapi::api::scheduling::v1::PriorityClass;
use berth_api::k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, CSIStorageCapacity, StorageClass,
};
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
    PersistentVolume,
    StorageClass,
    CsiDriver,
    CsiStorageCapacity,
    PriorityClass,
    PodDisruptionBudget,
    Event,
    Deployment,
    ReplicaSet,
    StatefulSet,
    Reservation,
    PodMigrationJob,
    NrtV1alpha1,
    NrtV1alpha2,
    ResourceSlice,
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
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
    builtin!(Schema::PersistentVolume, PersistentVolume);
    builtin!(Schema::StorageClass, StorageClass);
    builtin!(Schema::CsiDriver, CSIDriver);
    builtin!(Schema::CsiStorageCapacity, CSIStorageCapacity);
    builtin!(Schema::PriorityClass, PriorityClass);
    builtin!(Schema::PodDisruptionBudget, PodDisruptionBudget);
    builtin!(Schema::Event, Event);
    builtin!(Schema::Deployment, Deployment);
    builtin!(Schema::ReplicaSet, ReplicaSet);
    builtin!(Schema::StatefulSet, StatefulSet);
    builtin!(Schema::ResourceSlice, berth_api::dra::ResourceSlice);
    builtin!(Schema::DeviceClass, berth_api::dra::DeviceClass);
    builtin!(Schema::ResourceClaim, berth_api::dra::ResourceClaim);
    builtin!(
        Schema::ResourceClaimTemplate,
        berth_api::dra::ResourceClaimTemplate
    );
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
    let migration = berth_api::crd::pod_migration_job_crd();
    roots.push((Schema::PodMigrationJob, crd_root(&migration, "v1alpha1")));
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
    let c = compiled();
    let Some((_, root)) = c.roots.iter().find(|(k, _)| *k == kind) else {
        return Ok(());
    };
    let mut path = Vec::new();
    match c.graph.walk(value, *root, &mut path) {
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

/// The schemas with every `$ref` resolved and every keyword the walk asks for looked up once,
/// so checking an object costs a lookup per field rather than several per schema node.
struct Compiled {
    roots: Vec<(Schema, usize)>,
    graph: Graph,
}

fn compiled() -> &'static Compiled {
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let s = schemas();
        let mut graph = Graph::default();
        let mut seen = Seen::new();
        let roots = s
            .roots
            .iter()
            .map(|(k, root)| (*k, graph.compile(root, &s.defs, &mut seen)))
            .collect();
        Compiled { roots, graph }
    })
}

/// One schema node, as the walk reads it.
#[derive(Default)]
struct SchemaNode {
    /// `x-kubernetes-preserve-unknown-fields: true`.
    preserve: bool,
    /// The branches of `anyOf`, `oneOf` and `allOf`, in that order (each present list).
    branches: Vec<Vec<usize>>,
    /// `properties`: each named field's node, and the names in sorted order. Looked up for
    /// every key of every object read, with a fast hasher (SipHash was a twentieth of
    /// reading a large cluster).
    props: Option<(FastMap<String, usize>, Vec<String>)>,
    /// `additionalProperties` as a schema.
    extra: Option<usize>,
    /// `additionalProperties: true`.
    open: bool,
    /// `items`.
    items: Option<usize>,
}

#[derive(Default)]
struct Graph {
    nodes: Vec<SchemaNode>,
}

/// Compiled nodes by the address of their (resolved) schema, which also ends cycles.
type Seen = std::collections::HashMap<*const Value, usize>;

/// One step of the path to the value being walked; turned into text only for an error.
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

fn render(path: &[Seg<'_>]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            Seg::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }
    out
}

impl Graph {
    fn compile(&mut self, schema: &Value, defs: &Map<String, Value>, seen: &mut Seen) -> usize {
        let schema = resolve(schema, defs);
        let key: *const Value = schema;
        if let Some(id) = seen.get(&key) {
            return *id;
        }
        let id = self.nodes.len();
        self.nodes.push(SchemaNode::default());
        seen.insert(key, id);
        let mut node = SchemaNode {
            preserve: schema.get("x-kubernetes-preserve-unknown-fields")
                == Some(&Value::Bool(true)),
            open: schema.get("additionalProperties") == Some(&Value::Bool(true)),
            ..SchemaNode::default()
        };
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(branches) = schema.get(key).and_then(Value::as_array) {
                let ids = branches
                    .iter()
                    .map(|b| self.compile(b, defs, seen))
                    .collect();
                node.branches.push(ids);
            }
        }
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            let mut by_name = FastMap::with_capacity_and_hasher(props.len(), Default::default());
            for (name, sub) in props {
                by_name.insert(name.clone(), self.compile(sub, defs, seen));
            }
            node.props = Some((by_name, props.keys().cloned().collect()));
        }
        if let Some(extra) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            node.extra = Some(self.compile(extra, defs, seen));
        }
        if let Some(items) = schema.get("items") {
            node.items = Some(self.compile(items, defs, seen));
        }
        self.nodes[id] = node;
        id
    }

    fn walk<'v>(&self, value: &'v Value, id: usize, path: &mut Vec<Seg<'v>>) -> Option<Unknown> {
        let node = &self.nodes[id];
        if node.preserve {
            return None;
        }
        // `anyOf`/`oneOf`/`allOf`: the value is fine if one branch takes it.
        for branches in &node.branches {
            let mut first = None;
            for b in branches {
                match self.walk(value, *b, path) {
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
        match value {
            Value::Object(map) => {
                for (name, v) in map {
                    let sub = node
                        .props
                        .as_ref()
                        .and_then(|(p, _)| p.get(name.as_str()).copied())
                        .or(node.extra);
                    match sub {
                        Some(sub) => {
                            path.push(Seg::Key(name));
                            let found = self.walk(v, sub, path);
                            path.pop();
                            if found.is_some() {
                                return found;
                            }
                        }
                        // A schema that names its properties (and takes no others) does not
                        // have this one; a schema naming none is free-form.
                        None if node.props.is_some() && !node.open => {
                            path.push(Seg::Key(name));
                            let child = render(path);
                            path.pop();
                            return Some(Unknown {
                                path: child,
                                name: name.clone(),
                                known: node
                                    .props
                                    .as_ref()
                                    .map(|(_, names)| names.clone())
                                    .unwrap_or_default(),
                            });
                        }
                        None => {}
                    }
                }
                None
            }
            Value::Array(items) => {
                let sub = node.items?;
                for (i, v) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    let found = self.walk(v, sub, path);
                    path.pop();
                    if found.is_some() {
                        return found;
                    }
                }
                None
            }
            _ => None,
        }
    }
}

/// [`Graph::walk`] over a schema of its own, whose `$ref`s point into `defs`, with the
/// path starting at `path`.
#[cfg(test)]
fn walk(value: &Value, schema: &Value, defs: &Map<String, Value>, path: &str) -> Option<Unknown> {
    let mut graph = Graph::default();
    let root = graph.compile(schema, defs, &mut Seen::new());
    let mut segs = Vec::new();
    if !path.is_empty() {
        segs.push(Seg::Key(path));
    }
    graph.walk(value, root, &mut segs)
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
