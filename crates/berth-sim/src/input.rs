//! Reading `berth simulate`'s input: multi-document YAML files, dispatched on
//! `apiVersion`/`kind`, checked as the API server would check them.
//!
//! Anything the API server would reject is an [`InputError`] naming the file, the 0-based
//! document index and the field, and the run does not start. What the API server would
//! accept but the scheduler cannot use (a malformed annotation, a label selector with an
//! unknown operator) passes: the scheduler reports it on the object, as in a cluster.
//!
//! Decoding goes YAML → `serde_json::Value` → typed object. Quantities are checked on the
//! `Value` first (so their error names the exact field), then the typed read reports wrong
//! types and missing required fields with the path `serde_path_to_error` tracked.

use std::collections::BTreeSet;

use berth_core::collections::FastMap;
use std::io::Read;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use berth_api::k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod};
use berth_api::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use berth_api::k8s_openapi::api::scheduling::v1::PriorityClass;
use berth_api::k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, CSIStorageCapacity, StorageClass,
};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use berth_api::limits;
use berth_api::nrt::{self, NodeResourceTopology};
use berth_api::quantity::ParsedQuantity;
use berth_api::reservation::Reservation;
use berth_core::framework::config::KubeSchedulerConfiguration;
use berth_core::{Kind, Object, ObjectKey, Profile};

use crate::error::{Error, FieldError, InputError};
use crate::scenario::{self, DurationText, NodeAgentConfig, Scenario, ScenarioDoc, Step};
use crate::strict::{self, Schema};

mod dra;
mod gangs;
mod migration;
mod subset;
mod workloads;

/// Priority classes every cluster has without anyone creating them (name, value).
pub const SYSTEM_PRIORITY_CLASSES: [(&str, i32); 2] = [
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];

pub(crate) use crate::objects::type_name;
pub use crate::objects::Item;

/// Where a document came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The file as named on the command line (`<stdin>` for `-`).
    pub file: Arc<str>,
    /// The 0-based document index in that file.
    pub doc: usize,
}

/// Everything a run reads.
#[derive(Debug, Clone, Default)]
pub struct Input {
    /// Objects outside the Scenario, in document order across files.
    pub items: Vec<(Source, Item)>,
    /// The Scenario, if any (at most one per run).
    pub scenario: Option<(Source, Scenario)>,
}

/// The name standard input is reported under.
pub const STDIN_NAME: &str = "<stdin>";

/// Reads `files` in order (`-` is `stdin`) and decodes them.
pub fn read_files(files: &[String], stdin: &mut dyn Read) -> Result<Input, Error> {
    let mut texts = Vec::with_capacity(files.len());
    for file in files {
        if file == "-" {
            let text = read_limited(STDIN_NAME, stdin)?;
            texts.push((STDIN_NAME.to_string(), text));
        } else {
            let mut f = std::fs::File::open(file).map_err(|source| Error::Read {
                file: file.clone(),
                source,
            })?;
            // The file's size, to read it into a string of that capacity at once.
            let size = f.metadata().map_or(0, |m| m.len());
            let mut text = String::new();
            let capacity = usize::try_from(size.min(limit_u64())).unwrap_or(0);
            if text.try_reserve_exact(capacity.saturating_add(1)).is_err() {
                text = String::new();
            }
            let text = read_limited_into(file, &mut f, text)?;
            texts.push((file.clone(), text));
        }
    }
    Ok(parse(&texts)?)
}

/// Reads at most one byte more than [`limits::MAX_YAML_BYTES`], so that a huge file (or an
/// endless pipe) is refused without being held in memory first.
pub fn read_limited(file: &str, source: &mut dyn Read) -> Result<String, Error> {
    read_limited_into(file, source, String::new())
}

fn limit_u64() -> u64 {
    u64::try_from(limits::MAX_YAML_BYTES).unwrap_or(u64::MAX)
}

/// [`read_limited`], into `text` (empty, of the capacity wanted).
fn read_limited_into(file: &str, source: &mut dyn Read, mut text: String) -> Result<String, Error> {
    let limit = limit_u64();
    source
        .take(limit.saturating_add(1))
        .read_to_string(&mut text)
        .map_err(|source| Error::Read {
            file: file.to_string(),
            source,
        })?;
    if text.len() > limits::MAX_YAML_BYTES {
        return Err(Error::Input(limit_error(
            file,
            &limits::LimitError::TooLarge {
                bytes: text.len(),
                limit: limits::MAX_YAML_BYTES,
            },
        )));
    }
    Ok(text)
}

/// A limit crossed, as bad input naming the file and document.
fn limit_error(file: &str, e: &limits::LimitError) -> InputError {
    let message = match e {
        // Only the first byte past the limit was read: say "more than".
        limits::LimitError::TooLarge { limit, .. } => {
            format!(
                "the file is larger than {limit} bytes; berth reads files of at most {limit} bytes"
            )
        }
        other => other.to_string(),
    };
    InputError {
        file: file.to_string(),
        doc: e.document(),
        field: String::new(),
        message,
    }
}

/// Reads the scheduler profiles of a `KubeSchedulerConfiguration` text (`file` names it in
/// messages). Unknown plugins, invalid args and unknown fields are errors naming the field;
/// the text is held to the same [`limits`] as input files first.
pub fn parse_config(file: &str, text: &str) -> Result<Vec<Profile>, Error> {
    let config_error = |field: String, message: String| Error::Config {
        file: file.to_string(),
        field,
        message,
    };
    limits::check_yaml(text).map_err(|e| config_error(String::new(), e.to_string()))?;
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(text)
        .map_err(|e| config_error(String::new(), format!("invalid YAML: {e}")))?;
    let value = serde_json::to_value(&yaml)
        .map_err(|e| config_error(String::new(), format!("cannot be read as JSON: {e}")))?;
    let value = if value.is_null() {
        Value::Object(Default::default())
    } else {
        value
    };
    let cfg: KubeSchedulerConfiguration =
        serde_path_to_error::deserialize(&value).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." { String::new() } else { path };
            config_error(field, e.inner().to_string())
        })?;
    Profile::from_configuration(&cfg).map_err(|e| config_error(e.field, e.message))
}

/// Decodes `(file name, text)` pairs, in order.
///
/// Each document is decoded as soon as the YAML stream yields it, so a file's documents are
/// never all held as trees at once (at a million pods, they would be gigabytes). The errors
/// are those of reading every document of a file first: invalid YAML anywhere in a file is
/// reported before a bad object in it, so once an object is refused the rest of the file is
/// still read, only for its YAML.
pub fn parse(files: &[(String, String)]) -> Result<Input, InputError> {
    let mut redone = parse_with(files, Trees::Subset);
    if matches!(redone, Err(Parsed::Redo)) {
        redone = parse_with(files, Trees::Direct);
    }
    if matches!(redone, Err(Parsed::Redo)) {
        redone = parse_with(files, Trees::ViaYaml);
    }
    redone.map_err(|e| match e {
        Parsed::Bad(e) => e,
        // The two-step read reads every document.
        Parsed::Redo => InputError {
            file: String::new(),
            doc: 0,
            field: String::new(),
            message: "internal error: a document could not be read".into(),
        },
    })
}

/// How a YAML document becomes the JSON tree the objects are decoded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trees {
    /// Read by [`subset`], for texts in the plain subset of YAML it reads (most inputs),
    /// where it gives the trees of [`Trees::Direct`]; any other text has the whole input
    /// read again with [`Trees::Direct`].
    Subset,
    /// Straight from the YAML decoder ([`Direct`]), for documents where that gives the
    /// same tree as [`Trees::ViaYaml`]; a document it does not read (or invalid YAML, whose
    /// message is [`Trees::ViaYaml`]'s) has the whole input read again that way.
    Direct,
    /// A `serde_yaml_ng::Value` first (merge keys applied), then `serde_json::to_value`:
    /// the reference for every result and message.
    ViaYaml,
}

/// Why [`parse_with`] stopped.
enum Parsed {
    /// Bad input, as reported to the user.
    Bad(InputError),
    /// [`Trees::Subset`] or [`Trees::Direct`] met a document it does not read: read
    /// everything again with the next way.
    Redo,
}

fn parse_with(files: &[(String, String)], trees: Trees) -> Result<Input, Parsed> {
    let mut cx = Decoder::default();
    let mut input = Input::default();
    let mut seen = Created::default();
    for (file, text) in files {
        let file: Arc<str> = file.as_str().into();
        let mut refused: Option<InputError> = None;
        for_each_document(&file, text, trees, |doc, value| {
            if refused.is_some() {
                return;
            }
            let source = Source {
                file: file.clone(),
                doc,
            };
            if let Err(e) = decode_document(&mut cx, &mut input, &mut seen, source, value) {
                refused = Some(e);
            }
        })?;
        // The trees read so far are those of [`Trees::ViaYaml`], and so is this error.
        if let Some(e) = refused {
            return Err(Parsed::Bad(e));
        }
    }
    cx.check_priority_classes().map_err(Parsed::Bad)?;
    Ok(input)
}

/// Decodes one document into `input`.
fn decode_document(
    cx: &mut Decoder,
    input: &mut Input,
    seen: &mut Created,
    source: Source,
    value: Value,
) -> Result<(), InputError> {
    cx.source = Some(source.clone());
    let decoded = cx
        .top_level(value)
        .map_err(|e| e.at(&source.file, source.doc))?;
    for d in decoded {
        match d {
            Decoded::Item(path, item) => {
                seen.insert(&source, &path, &item)?;
                input.items.push((source.clone(), item));
            }
            Decoded::Scenario(s) => {
                if input.scenario.is_some() {
                    return Err(FieldError::new(
                        "kind",
                        "a run takes at most one Scenario; this is the second",
                    )
                    .at(&source.file, source.doc));
                }
                input.scenario = Some((source.clone(), *s));
            }
        }
    }
    Ok(())
}

/// The objects created at time 0, by kind, namespace and name, with where each was written.
///
/// A second document creating the same object is bad input, as the API server answers a
/// second create with `AlreadyExists`; replacing an object is what a Scenario `apply` step
/// is for.
///
/// Keyed with a fast hasher: it takes every object read (SipHash and its rehashing were a
/// fortieth of reading a large cluster).
#[derive(Default)]
struct Created(FastMap<(&'static str, String, String), (Source, String)>);

impl Created {
    fn insert(&mut self, source: &Source, path: &str, item: &Item) -> Result<(), InputError> {
        let meta = item_meta(item);
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let key = (item.kind_name(), namespace, name);
        if let Some((first, first_path)) = self.0.get(&key) {
            let (kind, namespace, name) = &key;
            let shown = if namespace.is_empty() {
                name.clone()
            } else {
                format!("{namespace}/{name}")
            };
            let at = if first_path.is_empty() {
                String::new()
            } else {
                format!(" at {first_path}")
            };
            let field = if path.is_empty() {
                "metadata.name".to_string()
            } else {
                format!("{path}.metadata.name")
            };
            return Err(FieldError::new(
                field,
                format!(
                    "{kind} {shown:?} already exists (created by {}: document {}{at}); the API server answers AlreadyExists. To replace an object, apply it in a Scenario step",
                    first.file, first.doc
                ),
            )
            .at(&source.file, source.doc));
        }
        self.0.insert(key, (source.clone(), path.to_string()));
        Ok(())
    }
}

/// Decodes one file's text.
pub fn parse_str(file: &str, text: &str) -> Result<Input, InputError> {
    parse(&[(file.to_string(), text.to_string())])
}

/// Splits a YAML stream into documents, converted to JSON values, and hands each to `each`
/// in order. Empty documents are skipped but keep their index, so indexes match what the
/// user counts between `---`.
///
/// The text is first held to [`limits`] (size, nesting, alias expansion), which the YAML
/// decoder is slow on (the subset reader only reads texts within them).
fn for_each_document(
    file: &str,
    text: &str,
    trees: Trees,
    mut each: impl FnMut(usize, Value),
) -> Result<(), Parsed> {
    if trees == Trees::Subset {
        // What the subset reader reads is within the limits: no alias, nesting at most
        // half the limit's. A text it does not read is read again, after the check.
        if text.len() > limits::MAX_YAML_BYTES {
            return Err(Parsed::Redo);
        }
        return subset::documents(text, |doc, value| {
            if !value.is_null() {
                each(doc, value);
            }
        })
        .map_err(|subset::Refused| Parsed::Redo);
    }
    if !within_limits_by_shape(text) {
        limits::check_yaml(text).map_err(|e| Parsed::Bad(limit_error(file, &e)))?;
    }
    for (doc, de) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value = match trees {
            Trees::Direct => match Direct::deserialize(de) {
                Ok(Direct(value)) => value,
                Err(_) => return Err(Parsed::Redo),
            },
            Trees::ViaYaml => via_yaml(file, doc, de).map_err(Parsed::Bad)?,
            Trees::Subset => return Err(Parsed::Redo),
        };
        if value.is_null() {
            continue;
        }
        each(doc, value);
    }
    Ok(())
}

/// Whether `text` is sure to pass [`limits::check_yaml`], judged from its characters alone,
/// so that the check's own pass of the YAML parser over the text (a fifth of reading a
/// large input) can be skipped. `false` only means "run the check".
///
/// Sure when the text is within the size limit, has no alias (no `*` anywhere: the alias
/// limits count nothing) and, in each stretch between `---` lines (each document lies
/// within one), cannot nest deeper than [`limits::MAX_DEPTH`]:
/// - block collections: each open one but an indentless sequence sits at a column greater
///   than its parent's, the column of the token that opened it, which is at most where a
///   line's leading run of indentation, indicators (`- `, `? `, `: `, `--- `), anchors and
///   tags ends; so at most twice (for indentless sequences) one more than the largest such
///   column;
/// - flow collections: at most two per `[` or `{` (a flow sequence may hold one implicit
///   single-pair mapping).
///
/// Columns are counted in bytes, at least libyaml's count in characters; a text with line
/// breaks other than `\n` (whose columns would restart unseen) is left to the check.
fn within_limits_by_shape(text: &str) -> bool {
    if text.len() > limits::MAX_YAML_BYTES
        || text.bytes().any(|b| matches!(b, b'*' | b'\r'))
        || (!text.is_ascii() && text.contains(['\u{85}', '\u{2028}', '\u{2029}']))
    {
        return false;
    }
    let (mut column, mut flows) = (0usize, 0usize);
    for line in text.split('\n') {
        let b = line.as_bytes();
        let blank_at = |j: usize| b.get(j).is_none_or(|c| matches!(c, b' ' | b'\t'));
        if b.starts_with(b"---") && blank_at(3) {
            (column, flows) = (0, 0);
        }
        let mut i = 0;
        loop {
            while i < b.len() && matches!(b[i], b' ' | b'\t') {
                i += 1;
            }
            match b.get(i) {
                Some(b'-' | b'?' | b':') if blank_at(i + 1) => i += 1,
                Some(b'&' | b'!') => {
                    while i < b.len() && !matches!(b[i], b' ' | b'\t') {
                        i += 1;
                    }
                }
                Some(b'-' | b'.')
                    if i == 0
                        && (b.starts_with(b"---") || b.starts_with(b"..."))
                        && blank_at(3) =>
                {
                    i = 3
                }
                _ => break,
            }
        }
        column = column.max(i);
        flows += b.iter().filter(|c| matches!(c, b'[' | b'{')).count();
        if 2 * (column + 1) + 2 * flows > limits::MAX_DEPTH {
            return false;
        }
    }
    true
}

/// One document as a `serde_yaml_ng::Value`, merge keys applied, converted to JSON.
fn via_yaml(
    file: &str,
    doc: usize,
    de: serde_yaml_ng::Deserializer<'_>,
) -> Result<Value, InputError> {
    let yaml_error = |e: serde_yaml_ng::Error| InputError {
        file: file.to_string(),
        doc,
        field: String::new(),
        message: format!("invalid YAML: {e}"),
    };
    let mut yaml = serde_yaml_ng::Value::deserialize(de).map_err(yaml_error)?;
    yaml.apply_merge().map_err(yaml_error)?;
    if yaml.is_null() {
        return Ok(Value::Null);
    }
    serde_json::to_value(&yaml).map_err(|e| InputError {
        file: file.to_string(),
        doc,
        field: String::new(),
        message: format!("cannot be read as JSON: {e}"),
    })
}

/// One YAML document read straight into the `serde_json::Value` that reading it as a
/// `serde_yaml_ng::Value` and converting that with `serde_json::to_value` gives, without the
/// YAML tree in between. It refuses (an error, after which the caller takes the two-step
/// path, whose result and messages are the reference) whatever the two could read
/// differently: a merge key (`<<`, which the YAML tree resolves), a tag, a key that is not
/// a string, a key given twice.
struct Direct(Value);

impl<'de> Deserialize<'de> for Direct {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DirectVisitor).map(Direct)
    }
}

struct DirectVisitor;

impl<'de> serde::de::Visitor<'de> for DirectVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a YAML value without tags or merge keys")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Direct::deserialize(d).map(|d| d.0)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(Direct(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        use serde::de::Error as _;
        let mut out = serde_json::Map::new();
        while let Some(DirectKey(key)) = map.next_key()? {
            if key == "<<" {
                return Err(A::Error::custom("merge key"));
            }
            let Direct(value) = map.next_value()?;
            if out.insert(key, value).is_some() {
                return Err(A::Error::custom("duplicate key"));
            }
        }
        Ok(Value::Object(out))
    }
}

/// A mapping key that is a string (a plain `1` or `true` is not: the YAML tree keeps its type).
struct DirectKey(String);

impl<'de> Deserialize<'de> for DirectKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl serde::de::Visitor<'_> for KeyVisitor {
            type Value = String;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string key")
            }
            fn visit_str<E>(self, v: &str) -> Result<String, E> {
                Ok(v.to_string())
            }
            fn visit_string<E>(self, v: String) -> Result<String, E> {
                Ok(v)
            }
        }
        deserializer.deserialize_any(KeyVisitor).map(DirectKey)
    }
}

enum Decoded {
    /// An object, with its path in the document (empty, or `items[i]` inside a List).
    Item(String, Item),
    Scenario(Box<Scenario>),
}

/// The kinds berth simulate reads, as `(apiVersion, kind)`.
const KNOWN: [(&str, &str); 27] = [
    ("v1", "Node"),
    ("v1", "Pod"),
    ("scheduling.koordinator.sh/v1alpha1", "Reservation"),
    ("topology.node.k8s.io/v1alpha2", "NodeResourceTopology"),
    ("topology.node.k8s.io/v1alpha1", "NodeResourceTopology"),
    ("v1", "PersistentVolumeClaim"),
    ("storage.k8s.io/v1", "CSINode"),
    ("v1", "PersistentVolume"),
    ("storage.k8s.io/v1", "StorageClass"),
    ("storage.k8s.io/v1", "CSIDriver"),
    ("storage.k8s.io/v1", "CSIStorageCapacity"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("policy/v1", "PodDisruptionBudget"),
    ("v1", "Event"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "StatefulSet"),
    ("scheduling.koordinator.sh/v1alpha1", "PodMigrationJob"),
    ("resource.k8s.io/v1", "ResourceSlice"),
    ("resource.k8s.io/v1", "DeviceClass"),
    ("resource.k8s.io/v1", "ResourceClaim"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"),
    ("v1", "List"),
    (scenario::API_VERSION, scenario::KIND),
    (berth_api::gang::SIGS_API_VERSION, "PodGroup"),
    (berth_api::gang::X_K8S_API_VERSION, "PodGroup"),
    (berth_api::gang::WORKLOAD_API_VERSION, "Workload"),
];

/// A pod's `priorityClassName`, checked once every document is read.
struct ClassRef {
    source: Source,
    field: String,
    class: String,
}

/// Decoding state across documents.
#[derive(Default)]
struct Decoder {
    source: Option<Source>,
    classes: BTreeSet<String>,
    class_refs: Vec<ClassRef>,
    /// Counts `generateName` uses so generated names differ.
    generated: u64,
}

impl Decoder {
    fn top_level(&mut self, value: Value) -> Result<Vec<Decoded>, FieldError> {
        let (api_version, kind) = type_meta(&value)?;
        match (api_version.as_str(), kind.as_str()) {
            (scenario::API_VERSION, scenario::KIND) => {
                Ok(vec![Decoded::Scenario(Box::new(self.scenario(value)?))])
            }
            _ => Ok(self
                .object(value, "")?
                .into_iter()
                .map(|(path, item)| Decoded::Item(path, item))
                .collect()),
        }
    }

    /// Decodes an object (or a `v1` `List` of them); `prefix` is its path in the document.
    /// Returns each object with its path relative to `value` (empty, or `items[i]` inside
    /// a List).
    fn object(&mut self, value: Value, prefix: &str) -> Result<Vec<(String, Item)>, FieldError> {
        self.object_inner(value, prefix)
            .map_err(|e| e.within(prefix))
    }

    fn object_inner(
        &mut self,
        mut value: Value,
        prefix: &str,
    ) -> Result<Vec<(String, Item)>, FieldError> {
        let (api_version, kind) = type_meta(&value)?;
        let item = match (api_version.as_str(), kind.as_str()) {
            ("v1", "List") => return self.list(value, prefix),
            ("v1", "Node") => {
                normalize_meta(&mut value, false, &mut self.generated)?;
                strict::check(Schema::Node, &value)?;
                check_node(&value)?;
                Item::Object(Object::Node(Arc::new(typed::<Node>(&value)?)))
            }
            ("v1", "Pod") => self.pod(value, prefix)?,
            ("scheduling.koordinator.sh/v1alpha1", "Reservation") => {
                normalize_meta(&mut value, false, &mut self.generated)?;
                strict::check(Schema::Reservation, &value)?;
                check_reservation(&value)?;
                let mut r = typed::<Reservation>(&value)?;
                r.apply_defaults();
                r.validate()
                    .map_err(|e| FieldError::new(e.field, e.message))?;
                Item::Object(Object::Reservation(Arc::new(r)))
            }
            ("topology.node.k8s.io/v1alpha2" | "topology.node.k8s.io/v1alpha1", nrt::KIND) => {
                self.nrt(&api_version, value)?
            }
            ("v1", "PersistentVolumeClaim" | "PersistentVolume")
            | (
                "storage.k8s.io/v1",
                "CSINode" | "StorageClass" | "CSIDriver" | "CSIStorageCapacity",
            ) => self.storage(&kind, value)?,
            (
                "resource.k8s.io/v1",
                kind
                @ ("ResourceSlice" | "DeviceClass" | "ResourceClaim" | "ResourceClaimTemplate"),
            ) => {
                normalize_meta(
                    &mut value,
                    matches!(kind, "ResourceClaim" | "ResourceClaimTemplate"),
                    &mut self.generated,
                )?;
                Item::Object(dra::decode(kind, &value)?)
            }
            ("scheduling.k8s.io/v1", "PriorityClass") => {
                normalize_meta(&mut value, false, &mut self.generated)?;
                strict::check(Schema::PriorityClass, &value)?;
                require(&value, "value", || "value".into())?;
                let pc = typed::<PriorityClass>(&value)?;
                if let Some(name) = &pc.metadata.name {
                    self.classes.insert(name.clone());
                }
                Item::Object(Object::PriorityClass(Arc::new(pc)))
            }
            ("policy/v1", "PodDisruptionBudget") => {
                normalize_meta(&mut value, true, &mut self.generated)?;
                strict::check(Schema::PodDisruptionBudget, &value)?;
                Item::Object(Object::PodDisruptionBudget(Arc::new(typed::<
                    PodDisruptionBudget,
                >(
                    &value
                )?)))
            }
            ("v1", "Event") => {
                normalize_meta(&mut value, true, &mut self.generated)?;
                strict::check(Schema::Event, &value)?;
                Item::Event(Box::new(typed::<CoreEvent>(&value)?))
            }
            ("apps/v1", "Deployment" | "ReplicaSet" | "StatefulSet") => {
                normalize_meta(&mut value, true, &mut self.generated)?;
                Item::Object(workloads::decode(&kind, &value)?)
            }
            ("scheduling.koordinator.sh/v1alpha1", "PodMigrationJob") => {
                normalize_meta(&mut value, false, &mut self.generated)?;
                Item::Object(migration::decode(&value)?)
            }
            (scenario::API_VERSION, scenario::KIND) => {
                return Err(FieldError::new(
                    "kind",
                    "a Scenario must be a document of its own, not inside a List or a step",
                ))
            }
            (
                berth_api::gang::SIGS_API_VERSION | berth_api::gang::X_K8S_API_VERSION,
                "PodGroup",
            )
            | (berth_api::gang::WORKLOAD_API_VERSION, "Workload") => {
                normalize_meta(&mut value, true, &mut self.generated)?;
                Item::Object(gangs::decode(&kind, &value)?)
            }
            (v, k) => return Err(unknown_kind(v, k)),
        };
        Ok(vec![(String::new(), item)])
    }

    /// A NodeResourceTopology of either version, read as v1alpha2.
    fn nrt(&mut self, api_version: &str, mut value: Value) -> Result<Item, FieldError> {
        normalize_meta(&mut value, false, &mut self.generated)?;
        let v1alpha1 = api_version.ends_with("v1alpha1");
        let schema = if v1alpha1 {
            Schema::NrtV1alpha1
        } else {
            Schema::NrtV1alpha2
        };
        strict::check(schema, &value)?;
        check_nrt(&value)?;
        let t = if v1alpha1 {
            typed::<nrt::v1alpha1::NodeResourceTopology>(&value)?.into()
        } else {
            typed::<NodeResourceTopology>(&value)?
        };
        Ok(Item::Object(Object::NodeResourceTopology(Arc::new(t))))
    }

    /// The storage kinds: claims, volumes, classes, CSI drivers, nodes and capacities.
    fn storage(&mut self, kind: &str, mut value: Value) -> Result<Item, FieldError> {
        let namespaced = matches!(kind, "PersistentVolumeClaim" | "CSIStorageCapacity");
        normalize_meta(&mut value, namespaced, &mut self.generated)?;
        Ok(match kind {
            "PersistentVolumeClaim" => {
                strict::check(Schema::PersistentVolumeClaim, &value)?;
                check_pvc(&value)?;
                Item::Object(Object::PersistentVolumeClaim(Arc::new(typed(&value)?)))
            }
            "CSINode" => {
                strict::check(Schema::CsiNode, &value)?;
                Item::Object(Object::CsiNode(Arc::new(typed::<CSINode>(&value)?)))
            }
            "PersistentVolume" => {
                strict::check(Schema::PersistentVolume, &value)?;
                check_resource_list(
                    value.get("spec").and_then(|s| s.get("capacity")),
                    || "spec.capacity".into(),
                    true,
                )?;
                Item::Object(Object::PersistentVolume(Arc::new(typed(&value)?)))
            }
            "StorageClass" => {
                strict::check(Schema::StorageClass, &value)?;
                require(&value, "provisioner", || "provisioner".into())?;
                let mut sc = typed::<StorageClass>(&value)?;
                // The API server's defaults.
                sc.volume_binding_mode
                    .get_or_insert_with(|| "Immediate".into());
                sc.reclaim_policy.get_or_insert_with(|| "Delete".into());
                Item::Object(Object::StorageClass(Arc::new(sc)))
            }
            "CSIDriver" => {
                strict::check(Schema::CsiDriver, &value)?;
                require(&value, "spec", || "spec".into())?;
                Item::Object(Object::CsiDriver(Arc::new(typed::<CSIDriver>(&value)?)))
            }
            "CSIStorageCapacity" => {
                strict::check(Schema::CsiStorageCapacity, &value)?;
                require(&value, "storageClassName", || "storageClassName".into())?;
                for part in ["capacity", "maximumVolumeSize"] {
                    if let Some(q) = value.get(part) {
                        check_quantity(q, || part.into(), true)?;
                    }
                }
                Item::Object(Object::CsiStorageCapacity(Arc::new(typed::<
                    CSIStorageCapacity,
                >(
                    &value
                )?)))
            }
            other => return Err(unknown_kind("storage.k8s.io/v1", other)),
        })
    }

    /// A `v1` `List`: its items decoded in turn, each error re-rooted under `items[i]`.
    fn list(&mut self, mut value: Value, prefix: &str) -> Result<Vec<(String, Item)>, FieldError> {
        if let Some(map) = value.as_object() {
            if let Some(name) = map
                .keys()
                .find(|k| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "items"))
            {
                return Err(FieldError::new(
                    name.clone(),
                    format!("unknown field {name:?}: a v1 List has apiVersion, kind, metadata and items"),
                ));
            }
        }
        let items = match value.get_mut("items").map(Value::take) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items,
            Some(other) => {
                return Err(FieldError::new(
                    "items",
                    format!("invalid type: {}, expected a list", type_name(&other)),
                ))
            }
        };
        let mut out = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let path = format!("{}items[{i}]", dot(prefix));
            let decoded = self.object_inner(item, &path).map_err(|e| {
                // Re-root the error under `items[i]` relative to this List.
                e.within(&format!("items[{i}]"))
            })?;
            out.extend(decoded.into_iter().map(|(p, item)| {
                let at = if p.is_empty() {
                    format!("items[{i}]")
                } else {
                    format!("items[{i}].{p}")
                };
                (at, item)
            }));
        }
        Ok(out)
    }

    /// A `v1` `Pod`, checked; its priority class is remembered to be resolved at the end.
    fn pod(&mut self, mut value: Value, prefix: &str) -> Result<Item, FieldError> {
        normalize_meta(&mut value, true, &mut self.generated)?;
        gangs::check_workload_ref(&value)?;
        strict::check(Schema::Pod, &value)?;
        if let Some(spec) = value.get("spec") {
            check_pod_spec(spec, Quantities::Validated).map_err(|e| e.within("spec"))?;
            crate::selectors::check_pod_selectors(spec).map_err(|e| e.within("spec"))?;
        }
        let pod = typed::<Pod>(&value)?;
        if let Some(class) = pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref())
            .filter(|c| !c.is_empty())
        {
            self.class_refs.push(ClassRef {
                source: self.source.clone().unwrap_or(Source {
                    file: "".into(),
                    doc: 0,
                }),
                field: format!("{}spec.priorityClassName", dot(prefix)),
                class: class.to_string(),
            });
        }
        Ok(Item::Object(Object::Pod(Arc::new(pod))))
    }

    /// One step of a Scenario at `path`: exactly its actions, each checked.
    fn step(&mut self, step_doc: crate::scenario::StepDoc, path: &str) -> Result<Step, FieldError> {
        let mut step = Step::default();
        let mut actions = 0;
        if let Some(apply) = step_doc.apply {
            actions += 1;
            step.kinds.push("apply");
            for (j, obj) in apply.into_iter().enumerate() {
                let items = self.object(obj, &format!("{path}.apply[{j}]"))?;
                step.apply.extend(items.into_iter().map(|(_, item)| item));
            }
        }
        if let Some(delete) = step_doc.delete {
            actions += 1;
            step.kinds.push("delete");
            for (j, d) in delete.into_iter().enumerate() {
                let field = format!("{path}.delete[{j}]");
                let kind = kind_from_name(&d.kind).ok_or_else(|| {
                    FieldError::new(
                        format!("{field}.kind"),
                        format!("unknown kind {:?}; expected one of {}", d.kind, kind_list()),
                    )
                })?;
                let ns = if kind.namespaced() {
                    d.namespace.as_deref().unwrap_or("default")
                } else {
                    ""
                };
                step.delete.push(ObjectKey::new(kind, ns, &d.name));
            }
        }
        if let Some(evict) = step_doc.evict {
            actions += 1;
            step.kinds.push("evict");
            for p in evict {
                let ns = p.namespace.as_deref().unwrap_or("default");
                step.evict.push(ObjectKey::pod(ns, &p.name));
            }
        }
        if let Some(advance) = &step_doc.advance {
            actions += 1;
            step.kinds.push("advance");
            let ms = duration(advance, &format!("{path}.advance"))?;
            if ms < 0 {
                return Err(FieldError::new(
                    format!("{path}.advance"),
                    format!(
                        "Invalid value: {:?}: virtual time cannot go backwards",
                        advance.0
                    ),
                ));
            }
            step.advance = Some(ms);
        }
        if let Some(expect) = step_doc.expect {
            actions += 1;
            step.kinds.push("expect");
            step.expect = Some(expect);
        }
        if actions == 0 {
            return Err(FieldError::new(
                path,
                "Required value: a step needs one of apply, delete, evict, advance, expect",
            ));
        }
        Ok(step)
    }

    fn scenario(&mut self, value: Value) -> Result<Scenario, FieldError> {
        let doc: ScenarioDoc = typed(&value)?;
        let mut out = Scenario {
            name: doc.metadata.and_then(|m| m.name).unwrap_or_default(),
            ..Scenario::default()
        };
        if let Some(text) = &doc.spec.start_time {
            let t = berth_core::time::parse_rfc3339(text).ok_or_else(|| {
                FieldError::new(
                    "spec.startTime",
                    format!("invalid RFC 3339 time {text:?} (want e.g. \"2024-01-01T00:00:00Z\")"),
                )
            })?;
            out.start_time = Some(t);
        }
        if let Some(agent) = &doc.spec.node_agent {
            if let Some(period) = &agent.nrt_update_period {
                let ms = duration(period, "spec.nodeAgent.nrtUpdatePeriod")?;
                out.node_agent = NodeAgentConfig {
                    nrt_update_period: (ms > 0).then_some(ms),
                };
            }
        }
        if let Some(m) = &doc.spec.migration {
            out.migration = m.clone();
        }
        if let Some(p) = &doc.spec.provisioner {
            let mut config = crate::provisioner::ProvisionerConfig::default();
            if let Some(enabled) = p.enabled {
                config.enabled = enabled;
            }
            if let Some(delay) = &p.delay {
                config.delay = duration(delay, "spec.provisioner.delay")?;
            }
            out.provisioner = config;
        }
        for (i, step_doc) in doc.spec.steps.into_iter().enumerate() {
            let step = self.step(step_doc, &format!("spec.steps[{i}]"))?;
            out.steps.push(step);
        }
        Ok(out)
    }

    /// A pod naming a PriorityClass that exists nowhere in the input is rejected, as the
    /// Priority admission plugin does (`no PriorityClass with name X was found`).
    fn check_priority_classes(&self) -> Result<(), InputError> {
        for r in &self.class_refs {
            let system = SYSTEM_PRIORITY_CLASSES.iter().any(|(n, _)| *n == r.class);
            if !system && !self.classes.contains(&r.class) {
                return Err(FieldError::new(
                    r.field.clone(),
                    format!("no PriorityClass with name {} was found", r.class),
                )
                .at(&r.source.file, r.source.doc));
            }
        }
        Ok(())
    }
}

fn dot(prefix: &str) -> String {
    if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}.")
    }
}

fn duration(text: &DurationText, field: &str) -> Result<i64, FieldError> {
    berth_api::duration::parse_duration_millis(&text.0)
        .map_err(|e| FieldError::new(field, format!("Invalid value: {:?}: {e}", text.0)))
}

/// Maps a `kind` to the core's [`Kind`].
pub fn kind_from_name(kind: &str) -> Option<Kind> {
    Some(match kind {
        "Node" => Kind::Node,
        "Pod" => Kind::Pod,
        "Reservation" => Kind::Reservation,
        "NodeResourceTopology" => Kind::NodeResourceTopology,
        "PersistentVolumeClaim" => Kind::PersistentVolumeClaim,
        "CSINode" => Kind::CsiNode,
        "PersistentVolume" => Kind::PersistentVolume,
        "StorageClass" => Kind::StorageClass,
        "CSIDriver" => Kind::CsiDriver,
        "CSIStorageCapacity" => Kind::CsiStorageCapacity,
        "PriorityClass" => Kind::PriorityClass,
        "PodDisruptionBudget" => Kind::PodDisruptionBudget,
        "Deployment" => Kind::Deployment,
        "ReplicaSet" => Kind::ReplicaSet,
        "StatefulSet" => Kind::StatefulSet,
        "PodMigrationJob" => Kind::PodMigrationJob,
        "ResourceSlice" => Kind::ResourceSlice,
        "DeviceClass" => Kind::DeviceClass,
        "ResourceClaim" => Kind::ResourceClaim,
        "ResourceClaimTemplate" => Kind::ResourceClaimTemplate,
        "PodGroup" => Kind::PodGroup,
        "Workload" => Kind::Workload,
        _ => return None,
    })
}

fn kind_list() -> String {
    let mut kinds: Vec<&str> = KNOWN.iter().map(|(_, k)| *k).collect();
    kinds.dedup();
    kinds.join(", ")
}

fn unknown_kind(api_version: &str, kind: &str) -> FieldError {
    if KNOWN.iter().any(|(_, k)| *k == kind) {
        let versions: Vec<&str> = KNOWN
            .iter()
            .filter(|(_, k)| *k == kind)
            .map(|(v, _)| *v)
            .collect();
        return FieldError::new(
            "apiVersion",
            format!(
                "no matches for kind {kind:?} in version {api_version:?} (berth reads it as {})",
                versions.join(" or ")
            ),
        );
    }
    FieldError::new(
        "kind",
        format!(
            "unknown kind {kind:?} (apiVersion {api_version:?}); berth simulate reads {}",
            kind_list()
        ),
    )
}

fn type_meta(value: &Value) -> Result<(String, String), FieldError> {
    let Some(map) = value.as_object() else {
        return Err(FieldError::new(
            "",
            format!(
                "invalid type: {}, expected a Kubernetes object (a mapping with apiVersion and kind)",
                type_name(value)
            ),
        ));
    };
    let field = |name: &str| -> Result<String, FieldError> {
        match map.get(name) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            None | Some(Value::Null) => Err(FieldError::new(name, "Required value")),
            Some(Value::String(_)) => Err(FieldError::new(name, "Required value")),
            Some(other) => Err(FieldError::new(
                name,
                format!("invalid type: {}, expected a string", type_name(other)),
            )),
        }
    };
    let kind = field("kind")?;
    let api_version = field("apiVersion")?;
    Ok((api_version, kind))
}

/// Reads a typed object, reporting the path of a wrong type or missing field.
///
/// The read that tracks the path costs a string per key, so it is done only to report an
/// error the plain read found (the two read the same tree the same way).
pub(crate) fn typed<T: DeserializeOwned>(value: &Value) -> Result<T, FieldError> {
    if let Ok(t) = T::deserialize(value) {
        return Ok(t);
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { String::new() } else { path };
        FieldError::new(field, e.inner().to_string())
    })
}

/// Checks `metadata.name` (or fills it from `generateName`, deterministically) and sets the
/// namespace: `default` for namespaced kinds when absent, none for cluster-scoped ones (the
/// API server ignores it there).
fn normalize_meta(
    value: &mut Value,
    namespaced: bool,
    generated: &mut u64,
) -> Result<(), FieldError> {
    let Some(map) = value.as_object_mut() else {
        return Ok(());
    };
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(meta) = meta.as_object_mut() else {
        return Err(FieldError::new(
            "metadata",
            format!("invalid type: {}, expected a map", type_name(meta)),
        ));
    };
    let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
    if name.is_empty() {
        match meta.get("generateName").and_then(Value::as_str) {
            Some(prefix) if !prefix.is_empty() => {
                *generated += 1;
                let name = generate_name(prefix, *generated);
                meta.insert("name".into(), Value::String(name));
            }
            _ => {
                if let Some(v) = meta.get("name").filter(|v| !v.is_string() && !v.is_null()) {
                    return Err(FieldError::new(
                        "metadata.name",
                        format!("invalid type: {}, expected a string", type_name(v)),
                    ));
                }
                return Err(FieldError::new(
                    "metadata.name",
                    "Required value: name or generateName is required",
                ));
            }
        }
    }
    if namespaced {
        let ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
        if ns.is_empty() {
            meta.insert("namespace".into(), Value::String("default".into()));
        }
    } else {
        meta.remove("namespace");
    }
    Ok(())
}

/// apimachinery's `SimpleNameGenerator`: the prefix plus five characters from an alphabet
/// without vowels; here derived from a hash so runs are deterministic.
fn generate_name(prefix: &str, n: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h = xxhash_rust::xxh64::xxh64(prefix.as_bytes(), n);
    let mut out = prefix.to_string();
    for _ in 0..5 {
        out.push(ALPHABET[(h % ALPHABET.len() as u64) as usize] as char);
        h /= ALPHABET.len() as u64;
    }
    out
}

/// Checks one quantity: a string or a number (YAML reads `cpu: 2` as a number) in the API
/// server's grammar, not negative where `non_negative`. `field` names it in the error (made
/// only then: most inputs have none).
fn check_quantity(
    q: &Value,
    field: impl FnOnce() -> String,
    non_negative: bool,
) -> Result<(), FieldError> {
    let number;
    let text = match q {
        Value::String(s) => s.as_str(),
        Value::Number(n) => {
            number = n.to_string();
            number.as_str()
        }
        // Go's Quantity reads JSON null as zero.
        Value::Null => return Ok(()),
        other => {
            return Err(FieldError::new(
                field(),
                format!(
                    "invalid type: {}, expected a quantity (string or number)",
                    type_name(other)
                ),
            ))
        }
    };
    let parsed = match ParsedQuantity::parse(text) {
        Ok(parsed) => parsed,
        Err(e) => return Err(FieldError::new(field(), e.to_string())),
    };
    if non_negative && parsed.is_negative() {
        return Err(FieldError::new(
            field(),
            format!("Invalid value: {text:?}: must be greater than or equal to 0"),
        ));
    }
    Ok(())
}

/// Checks a `ResourceList` (`{cpu: 500m, memory: 1Gi}`) at `path`. A value of the wrong type
/// is left for the typed read to report.
fn check_resource_list(
    v: Option<&Value>,
    path: impl Fn() -> String,
    non_negative: bool,
) -> Result<(), FieldError> {
    let Some(map) = v.and_then(Value::as_object) else {
        return Ok(());
    };
    for (name, q) in map {
        check_quantity(q, || format!("{}.{name}", path()), non_negative)?;
    }
    Ok(())
}

fn array<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    v.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// How the quantities of a pod spec are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quantities {
    /// A Pod's `spec`: the API server validates it, so a quantity outside its grammar, or a
    /// negative request or limit, is bad input.
    Validated,
    /// A Reservation's `spec.template.spec`: its CRD keeps the template schemaless, so the API
    /// server stores any value there. The core reports a quantity it cannot use on the
    /// reservation itself (`Scheduled=False` and a Warning event naming the field), which
    /// then holds nothing while the rest is scheduled; the simulator reads it the same way.
    Schemaless,
}

/// Quantities of a pod spec (a Pod's `spec`, a Reservation's `spec.template.spec`): container
/// requests and limits (never negative, as the API server requires), overhead, pod-level
/// resources and `emptyDir.sizeLimit`; none of them for a [`Quantities::Schemaless`] spec.
/// Paths are relative to the spec.
fn check_pod_spec(spec: &Value, quantities: Quantities) -> Result<(), FieldError> {
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for (i, c) in array(spec, list) {
            require(c, "name", || format!("{list}[{i}].name"))?;
        }
    }
    if quantities == Quantities::Schemaless {
        return Ok(());
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for (i, c) in array(spec, list) {
            let resources = c.get("resources");
            for part in ["requests", "limits"] {
                check_resource_list(
                    resources.and_then(|r| r.get(part)),
                    || format!("{list}[{i}].resources.{part}"),
                    true,
                )?;
            }
        }
    }
    check_resource_list(spec.get("overhead"), || "overhead".into(), true)?;
    for part in ["requests", "limits"] {
        check_resource_list(
            spec.get("resources").and_then(|r| r.get(part)),
            || format!("resources.{part}"),
            true,
        )?;
    }
    for (i, vol) in array(spec, "volumes") {
        if let Some(limit) = vol.get("emptyDir").and_then(|e| e.get("sizeLimit")) {
            check_quantity(limit, || format!("volumes[{i}].emptyDir.sizeLimit"), true)?;
        }
    }
    Ok(())
}

/// A required field that k8s-openapi would read as its default when absent (it is lenient
/// where the API server is not): absent, `null` or empty is `Required value`.
fn require(obj: &Value, key: &str, field: impl FnOnce() -> String) -> Result<(), FieldError> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(FieldError::new(field(), "Required value")),
        Some(Value::String(s)) if s.is_empty() => Err(FieldError::new(field(), "Required value")),
        _ => Ok(()),
    }
}

fn check_node(node: &Value) -> Result<(), FieldError> {
    for (i, taint) in node
        .get("spec")
        .map(|s| array(s, "taints"))
        .into_iter()
        .flatten()
    {
        require(taint, "key", || format!("spec.taints[{i}].key"))?;
        require(taint, "effect", || format!("spec.taints[{i}].effect"))?;
    }
    let status = node.get("status");
    for part in ["capacity", "allocatable"] {
        check_resource_list(
            status.and_then(|s| s.get(part)),
            || format!("status.{part}"),
            true,
        )?;
    }
    Ok(())
}

fn check_reservation(r: &Value) -> Result<(), FieldError> {
    if let Some(spec) = r
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("spec"))
    {
        check_pod_spec(spec, Quantities::Schemaless).map_err(|e| e.within("spec.template.spec"))?;
    }
    let status = r.get("status");
    for part in ["allocatable", "allocated"] {
        check_resource_list(
            status.and_then(|s| s.get(part)),
            || format!("status.{part}"),
            false,
        )?;
    }
    Ok(())
}

fn check_pvc(pvc: &Value) -> Result<(), FieldError> {
    let resources = pvc.get("spec").and_then(|s| s.get("resources"));
    for part in ["requests", "limits"] {
        check_resource_list(
            resources.and_then(|r| r.get(part)),
            || format!("spec.resources.{part}"),
            true,
        )?;
    }
    check_resource_list(
        pvc.get("status").and_then(|s| s.get("capacity")),
        || "status.capacity".into(),
        true,
    )
}

/// NRT quantities may be written as strings or integers; `available` can legitimately be
/// reported below zero by a topology updater, so signs are not checked.
fn check_nrt(t: &Value) -> Result<(), FieldError> {
    for (i, zone) in array(t, "zones") {
        for (j, res) in array(zone, "resources") {
            for part in ["capacity", "allocatable", "available"] {
                if let Some(q) = res.get(part) {
                    check_quantity(q, || format!("zones[{i}].resources[{j}].{part}"), false)?;
                }
            }
        }
    }
    Ok(())
}

/// The metadata of an item, for callers that handle every kind alike.
pub fn item_meta(item: &Item) -> &ObjectMeta {
    match item {
        Item::Object(o) => o.meta(),
        Item::Event(e) => &e.metadata,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> InputError {
        parse_str("in.yaml", text).expect_err("should be rejected")
    }

    fn ok(text: &str) -> Input {
        match parse_str("in.yaml", text) {
            Ok(i) => i,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 4, memory: 8Gi}}\n";

    #[test]
    fn documents_are_read_in_order_and_empty_ones_skipped() {
        let text = format!("{NODE}---\n---\n# only a comment\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {{containers: [{{name: c}}]}}\n");
        let input = ok(&text);
        let kinds: Vec<_> = input.items.iter().map(|(_, i)| i.kind_name()).collect();
        assert_eq!(kinds, ["Node", "Pod"]);
        assert_eq!(input.items[1].0.doc, 3, "empty documents keep their index");
    }

    #[test]
    fn a_bad_quantity_names_file_document_and_field() {
        let text = format!("{NODE}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: c\n    resources: {{requests: {{cpu: 2x}}}}\n");
        let e = err(&text);
        assert_eq!(e.doc, 1);
        assert_eq!(e.field, "spec.containers[0].resources.requests.cpu");
        assert!(e.to_string().starts_with(
            "in.yaml: document 1: spec.containers[0].resources.requests.cpu: quantities must match"
        ));
    }

    #[test]
    fn negative_requests_are_rejected() {
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {memory: -1Gi}}\n");
        assert_eq!(e.field, "spec.containers[0].resources.requests.memory");
        assert!(e.message.contains("must be greater than or equal to 0"));
    }

    #[test]
    fn unknown_kinds_and_versions_are_rejected() {
        let e = err("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: d}\n");
        assert_eq!(e.field, "kind");
        assert!(e.message.contains("unknown kind \"DaemonSet\""));
        let e = err("apiVersion: v2\nkind: Pod\nmetadata: {name: d}\n");
        assert_eq!(e.field, "apiVersion");
    }

    #[test]
    fn unparsable_yaml_is_rejected_with_its_document() {
        let e = err(&format!("{NODE}---\nkind: [unclosed\n"));
        assert_eq!(e.doc, 1);
        assert!(e.message.starts_with("invalid YAML"), "{e}");
    }

    #[test]
    fn wrong_types_name_their_path() {
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {app: true}}\n");
        assert_eq!(e.field, "metadata.labels.app");
        let e = err(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{image: x}]}\n",
        );
        assert_eq!(e.field, "spec.containers[0].name");
        assert_eq!(e.message, "Required value");
        let e =
            err("apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: {taints: [{key: k}]}\n");
        assert_eq!(e.field, "spec.taints[0].effect");
        let e = err("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: x}\n");
        assert_eq!(e.field, "value");
        let e =
            err("apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: {unschedulable: maybe}\n");
        assert_eq!(e.field, "spec.unschedulable");
    }

    #[test]
    fn a_missing_name_is_rejected_and_generate_name_is_filled() {
        let e = err("apiVersion: v1\nkind: Node\nmetadata: {}\n");
        assert_eq!(e.field, "metadata.name");
        let input = ok("apiVersion: v1\nkind: Node\nmetadata: {generateName: n-}\n");
        let name = item_meta(&input.items[0].1).name.clone().unwrap();
        assert!(name.starts_with("n-") && name.len() == 7, "{name}");
    }

    #[test]
    fn namespaces_default_for_namespaced_kinds_only() {
        let input = ok("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n, namespace: x}\n");
        assert_eq!(
            item_meta(&input.items[0].1).namespace.as_deref(),
            Some("default")
        );
        assert_eq!(item_meta(&input.items[1].1).namespace, None);
    }

    #[test]
    fn a_reservation_without_owners_is_rejected_and_defaults_are_applied() {
        let e = err("apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation\nmetadata: {name: r}\nspec:\n  template: {spec: {containers: [{name: c}]}}\n");
        assert_eq!(e.field, "spec.owners");
        let input = ok("apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation\nmetadata: {name: r}\nspec:\n  template: {spec: {containers: [{name: c}]}}\n  owners: [{object: {name: p}}]\n");
        let Item::Object(Object::Reservation(r)) = &input.items[0].1 else {
            panic!("not a reservation")
        };
        assert_eq!(r.spec.ttl.as_ref().map(|t| t.as_str()), Some("24h"));
        assert_eq!(r.spec.allocate_once, Some(true));
    }

    #[test]
    fn a_bad_reservation_ttl_is_rejected() {
        let e = err("apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation\nmetadata: {name: r}\nspec:\n  ttl: 1d\n  template: {spec: {containers: [{name: c}]}}\n  owners: [{object: {name: p}}]\n");
        assert_eq!(e.field, "spec.ttl");
    }

    #[test]
    fn priority_class_names_must_exist_somewhere_in_the_input() {
        let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {priorityClassName: high, containers: [{name: c}]}\n";
        let e = err(pod);
        assert_eq!(e.field, "spec.priorityClassName");
        assert_eq!(e.message, "no PriorityClass with name high was found");
        ok(&format!("{pod}---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: high}}\nvalue: 1000\n"));
        ok("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {priorityClassName: system-node-critical, containers: [{name: c}]}\n");
    }

    #[test]
    fn nrt_of_both_versions_is_read_with_integer_quantities() {
        for v in ["v1alpha1", "v1alpha2"] {
            let input = ok(&format!("apiVersion: topology.node.k8s.io/{v}\nkind: NodeResourceTopology\nmetadata: {{name: n1}}\ntopologyPolicies: [SingleNUMANodeContainerLevel]\nzones:\n- name: node-0\n  type: Node\n  resources: [{{name: cpu, capacity: 4, allocatable: 4, available: 4}}]\n"));
            let Item::Object(Object::NodeResourceTopology(t)) = &input.items[0].1 else {
                panic!("not an NRT")
            };
            assert_eq!(t.spec.zones[0].resources[0].capacity.0, "4");
        }
        let e = err("apiVersion: topology.node.k8s.io/v1alpha2\nkind: NodeResourceTopology\nmetadata: {name: n1}\nzones:\n- name: node-0\n  type: Node\n  resources: [{name: cpu, capacity: lots, allocatable: 4, available: 4}]\n");
        assert_eq!(e.field, "zones[0].resources[0].capacity");
    }

    #[test]
    fn lists_are_expanded_and_errors_point_into_them() {
        let input = ok("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: a}}\n- {apiVersion: v1, kind: Node, metadata: {name: b}}\n");
        assert_eq!(input.items.len(), 2);
        let e = err("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: a}, status: {capacity: {cpu: x}}}\n");
        assert_eq!(e.field, "items[0].status.capacity.cpu");
    }

    const SCENARIO: &str =
        "apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {name: s}\nspec:\n";

    #[test]
    fn a_scenario_is_decoded_with_its_steps() {
        let input = ok(&format!("{SCENARIO}  startTime: \"2024-02-01T00:00:00Z\"\n  nodeAgent: {{nrtUpdatePeriod: 30s}}\n  steps:\n  - apply: [{{apiVersion: v1, kind: Node, metadata: {{name: n}}}}]\n  - delete: [{{kind: Pod, name: p}}, {{kind: Node, name: n}}]\n  - advance: 1m30s\n  - expect: {{pods: [{{name: p, node: null}}]}}\n"));
        let (_, s) = input.scenario.unwrap();
        assert_eq!(s.name, "s");
        assert_eq!(s.node_agent.nrt_update_period, Some(30_000));
        assert_eq!(s.steps.len(), 4);
        assert_eq!(s.steps[1].delete[0], ObjectKey::pod("default", "p"));
        assert_eq!(s.steps[1].delete[1], ObjectKey::cluster(Kind::Node, "n"));
        assert_eq!(s.steps[2].advance, Some(90_000));
        assert_eq!(s.steps[3].expect.as_ref().unwrap().pods[0].node, Some(None));
    }

    #[test]
    fn scenario_errors_name_the_step() {
        let e = err(&format!("{SCENARIO}  steps:\n  - advance: 1d\n"));
        assert_eq!(e.field, "spec.steps[0].advance");
        assert!(e.message.contains("unknown unit"), "{e}");
        let e = err(&format!("{SCENARIO}  steps:\n  - advance: 10s\n  - apply:\n    - {{apiVersion: v1, kind: Pod, metadata: {{name: p}}, spec: {{containers: [{{name: c, resources: {{requests: {{cpu: -1}}}}}}]}}}}\n"));
        assert_eq!(
            e.field,
            "spec.steps[1].apply[0].spec.containers[0].resources.requests.cpu"
        );
        let e = err(&format!("{SCENARIO}  steps:\n  - wait: 10s\n"));
        assert_eq!(e.field, "spec.steps[0].wait");
        assert!(e.message.contains("unknown field `wait`"), "{e}");
        let e = err(&format!("{SCENARIO}  steps:\n  - {{}}\n"));
        assert_eq!(e.field, "spec.steps[0]");
        let e = err(&format!(
            "{SCENARIO}  steps:\n  - delete: [{{kind: DaemonSet, name: d}}]\n"
        ));
        assert_eq!(e.field, "spec.steps[0].delete[0].kind");
    }

    #[test]
    fn unknown_fields_are_rejected_with_their_path() {
        let e = err(&format!("{NODE}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  nodeSelecter: {{zone: a}}\n  containers: [{{name: c}}]\n"));
        assert_eq!((e.doc, e.field.as_str()), (1, "spec.nodeSelecter"));
        assert!(
            e.message
                .starts_with("unknown field \"nodeSelecter\" (did you mean \"nodeSelector\"?)"),
            "{e}"
        );
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources: {request: {cpu: 1}}\n");
        assert_eq!(e.field, "spec.containers[0].resources.request");
        let e = err(
            "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {alocatable: {cpu: 1}}\n",
        );
        assert_eq!(e.field, "status.alocatable");
        let r = "apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation\nmetadata: {name: r}\nspec:\n  template: {spec: {containers: [{name: c}]}}\n  owners: [{object: {name: p}}]\n";
        let e = err(&format!("{r}  tll: 1h\n"));
        assert_eq!(e.field, "spec.tll");
        let e = err(&format!("{r}  allocateonce: false\n"));
        assert_eq!(e.field, "spec.allocateonce");
        let e = err(&format!("{SCENARIO}  steps:\n  - apply:\n    - {{apiVersion: v1, kind: Node, metadata: {{name: n}}, spec: {{unschedulabel: true}}}}\n"));
        assert_eq!(e.field, "spec.steps[0].apply[0].spec.unschedulabel");
        let e = err("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: a, labelz: {}}}\n");
        assert_eq!(e.field, "items[0].metadata.labelz");
        let e = err("apiVersion: v1\nkind: List\nitem: []\n");
        assert_eq!(e.field, "item");
    }

    #[test]
    fn schemaless_parts_stay_lenient() {
        // A Reservation's template is `x-kubernetes-preserve-unknown-fields` upstream.
        ok("apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation\nmetadata: {name: r}\nspec:\n  template:\n    namespace: default\n    spec: {containers: [{name: c, resources: {request: {cpu: 1}}}]}\n  owners: [{object: {name: p}}]\n");
        // Attribute names are data, not fields.
        ok("apiVersion: topology.node.k8s.io/v1alpha2\nkind: NodeResourceTopology\nmetadata: {name: n1}\nattributes: [{name: anything-at-all, value: x}]\nzones: []\n");
    }

    #[test]
    fn a_second_document_creating_the_same_object_is_rejected() {
        let e = err(&format!("{NODE}---\n{NODE}"));
        assert_eq!((e.doc, e.field.as_str()), (1, "metadata.name"));
        assert!(
            e.message
                .starts_with("Node \"n1\" already exists (created by in.yaml: document 0)"),
            "{e}"
        );
        let e = parse(&[
            ("a.yaml".into(), "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n".into()),
            (
                "b.yaml".into(),
                "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: q}}\n- {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: default}}\n".into(),
            ),
        ])
        .expect_err("duplicate");
        assert_eq!((e.file.as_str(), e.doc), ("b.yaml", 0));
        assert_eq!(e.field, "items[1].metadata.name");
        assert!(
            e.message
                .contains("Pod \"default/p\" already exists (created by a.yaml: document 0)"),
            "{e}"
        );
        // Same name, different kind or namespace: different objects.
        ok("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: x, namespace: other}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: x}\n");
        // Apply steps replace.
        ok(&format!("{NODE}---\n{SCENARIO}  steps:\n  - apply: [{{apiVersion: v1, kind: Node, metadata: {{name: n1}}}}]\n  - apply: [{{apiVersion: v1, kind: Node, metadata: {{name: n1}}}}]\n"));
    }

    /// The shapes the YAML decoder is slow on are refused by the limits, with a message
    /// naming the document, line and column, before the decoder sees them. (How long the
    /// deepest and widest inputs the limits allow take is `tests/input_time.rs`.)
    #[test]
    fn deep_nesting_and_alias_bombs_are_refused_by_the_limits() {
        // 100,000 nested brackets took 20 s to be refused by the decoder's recursion limit.
        let e = err(&format!("{NODE}---\n{}", "[".repeat(100_000)));
        assert_eq!(
            e.to_string(),
            "in.yaml: document 1: nested deeper than 64 levels at line 6 column 65; berth reads at most 64"
        );
        // Block style counts the same way.
        let block: String = (0..70).map(|d| format!("{}k:\n", " ".repeat(d))).collect();
        let e = err(&block);
        assert!(
            e.message
                .starts_with("nested deeper than 64 levels at line 65 column 65"),
            "{e}"
        );
        // 50 KB that expanded past 8 GB.
        let bomb = format!(
            "apiVersion: v1\nkind: List\nx: &x [{}]\nitems: [{}]\n",
            vec!["1"; 10_000].join(","),
            vec!["*x"; 10_000].join(",")
        );
        let e = err(&bomb);
        assert_eq!(e.doc, 0);
        assert!(
            e.message
                .starts_with("aliases expand to more than 1000000 nodes at line 4 column"),
            "{e}"
        );
        let e = err("apiVersion: v1\nkind: List\nitems: &x [*x]\n");
        assert_eq!(
            e.message,
            "alias *x at line 3 column 12 refers to a node that contains it"
        );
    }

    /// Skipping the limits' check on the text's shape never lets through a text the check
    /// refuses: over random texts built of the tokens that open collections.
    #[test]
    fn texts_judged_by_shape_pass_the_limits() {
        use proptest::prelude::*;
        const TOKENS: [&str; 20] = [
            "- ", "? ", ": ", "k", "k: ", "[", "]", "{", "}", ", ", "\n", " ", "    ", "&a ",
            "!t ", "---\n", "--- ", "...\n", "\t", "\"q\": ",
        ];
        let text = proptest::collection::vec(0..TOKENS.len(), 0..400)
            .prop_map(|ix| ix.into_iter().map(|i| TOKENS[i]).collect::<String>());
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(&text, |text| {
                if within_limits_by_shape(&text) {
                    prop_assert!(limits::check_yaml(&text).is_ok(), "{text:?}");
                }
                Ok(())
            })
            .unwrap();
        // Shapes close to the limit, each way.
        let block = |levels: usize| -> String {
            (0..levels)
                .map(|d| format!("{}k:\n", " ".repeat(d)))
                .collect()
        };
        assert!(within_limits_by_shape(&block(31)));
        assert!(!within_limits_by_shape(&block(70)));
        assert!(limits::check_yaml(&block(70)).is_err());
        let compact = format!("{}k: v\n", "- ".repeat(70));
        assert!(!within_limits_by_shape(&compact));
        assert!(limits::check_yaml(&compact).is_err());
        assert!(!within_limits_by_shape(&format!("a: {}", "[".repeat(40))));
        assert!(!within_limits_by_shape("a: &x [1]\nb: *x\n"));
        assert!(within_limits_by_shape(NODE));
    }

    #[test]
    fn only_one_scenario_is_allowed() {
        let e = err(&format!(
            "{SCENARIO}  steps: []\n---\n{SCENARIO}  steps: []\n"
        ));
        assert_eq!(e.doc, 1);
    }
}
