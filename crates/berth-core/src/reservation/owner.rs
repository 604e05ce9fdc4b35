//! Who may allocate from a reservation (`spec.owners`) and the index that finds, for a pod,
//! the few reservations that might name it.
//!
//! Owners are ORed; the selectors inside one owner are ANDed. `object` matches by UID when
//! it has one, else by namespace and name (the fields it sets); `controller` matches a pod
//! whose controller owner reference (`controller: true`) is the named object, in
//! `namespace` when set; `labelSelector` matches the pod's labels.

use crate::collections::HashMap;

use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use berth_api::reservation::ReservationOwner;
use smallvec::SmallVec;

use crate::model::pod::PodInfo;
use crate::model::selector::{Selector, SelectorError};

/// `object`: the fields that are set, compared with the pod's.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ObjectMatch {
    uid: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
}

/// `controller`: the pod's controller reference must be this object.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ControllerMatch {
    namespace: Option<String>,
    uid: Option<String>,
    name: Option<String>,
    kind: Option<String>,
}

/// One compiled owner entry.
#[derive(Debug, Clone, PartialEq)]
struct CompiledOwner {
    object: Option<ObjectMatch>,
    controller: Option<ControllerMatch>,
    selector: Option<Selector>,
    /// The source selector, for the index.
    source: Option<LabelSelector>,
}

/// A reservation's compiled `spec.owners`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OwnerMatcher {
    owners: Vec<CompiledOwner>,
}

/// An owner selector that cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.owners[{index}].labelSelector: {source}")]
pub struct OwnerError {
    /// Index in `spec.owners`.
    pub index: usize,
    /// What is wrong.
    #[source]
    pub source: SelectorError,
}

fn non_empty(s: &Option<String>) -> Option<String> {
    s.as_deref().filter(|s| !s.is_empty()).map(str::to_string)
}

impl OwnerMatcher {
    /// Compiles `spec.owners`.
    pub fn new(owners: &[ReservationOwner]) -> Result<Self, OwnerError> {
        let mut out = Vec::with_capacity(owners.len());
        for (index, o) in owners.iter().enumerate() {
            let object = o.object.as_ref().map(|r| {
                let uid = non_empty(&r.uid);
                // With a UID the reference is exact; name and namespace add nothing.
                let (name, namespace) = if uid.is_some() {
                    (None, None)
                } else {
                    (non_empty(&r.name), non_empty(&r.namespace))
                };
                ObjectMatch {
                    uid,
                    name,
                    namespace,
                }
            });
            let controller = o.controller.as_ref().map(|c| ControllerMatch {
                namespace: non_empty(&c.namespace),
                uid: non_empty(&c.uid),
                name: non_empty(&c.name),
                kind: non_empty(&c.kind),
            });
            let selector = match &o.label_selector {
                Some(s) => Some(
                    Selector::from_label_selector(s)
                        .map_err(|source| OwnerError { index, source })?,
                ),
                None => None,
            };
            out.push(CompiledOwner {
                object,
                controller,
                selector,
                source: o.label_selector.clone(),
            });
        }
        Ok(Self { owners: out })
    }

    /// Whether `pod` is an owner. No owners match nothing.
    pub fn matches(&self, pod: &PodInfo) -> bool {
        self.owners.iter().any(|o| o.matches(pod))
    }

    /// Whether `pod` is matched by an owner that has a label selector (Koordinator's
    /// pre-allocation candidates are found through label selectors only).
    pub fn matches_by_selector(&self, pod: &PodInfo) -> bool {
        self.owners
            .iter()
            .any(|o| o.selector.is_some() && o.matches(pod))
    }

    /// Index keys: each owner entry under its most selective component, so a pod is found
    /// by looking up its own UID, name, namespace, controller and labels.
    pub(crate) fn index_keys(&self) -> Vec<IndexKey> {
        let mut keys = Vec::new();
        for o in &self.owners {
            keys.extend(o.index_keys());
        }
        keys.sort();
        keys.dedup();
        keys
    }
}

impl CompiledOwner {
    fn matches(&self, pod: &PodInfo) -> bool {
        let meta = &pod.pod.metadata;
        if let Some(obj) = &self.object {
            if let Some(uid) = &obj.uid {
                if meta.uid.as_deref() != Some(uid.as_str()) {
                    return false;
                }
            }
            if let Some(name) = &obj.name {
                if *pod.key.name != **name {
                    return false;
                }
            }
            if let Some(ns) = &obj.namespace {
                if *pod.key.namespace != **ns {
                    return false;
                }
            }
        }
        if let Some(c) = &self.controller {
            if let Some(ns) = &c.namespace {
                if *pod.key.namespace != **ns {
                    return false;
                }
            }
            let found = meta.owner_references.iter().flatten().any(|r| {
                r.controller == Some(true)
                    && match &c.uid {
                        Some(uid) => r.uid == *uid,
                        None => {
                            c.name.as_ref().is_none_or(|n| r.name == *n)
                                && c.kind.as_ref().is_none_or(|k| r.kind == *k)
                        }
                    }
            });
            if !found {
                return false;
            }
        }
        if let Some(sel) = &self.selector {
            if !sel.matches(&pod.labels) {
                return false;
            }
        }
        // An owner with nothing set would match every pod; the CRD forbids it.
        self.object.is_some() || self.controller.is_some() || self.selector.is_some()
    }

    fn index_keys(&self) -> Vec<IndexKey> {
        if let Some(obj) = &self.object {
            if let Some(uid) = &obj.uid {
                return vec![IndexKey::Uid(uid.clone())];
            }
            if let Some(name) = &obj.name {
                return vec![IndexKey::Name(name.clone())];
            }
            if let Some(ns) = &obj.namespace {
                return vec![IndexKey::Namespace(ns.clone())];
            }
        }
        if let Some(c) = &self.controller {
            if let Some(uid) = &c.uid {
                return vec![IndexKey::ControllerUid(uid.clone())];
            }
            if let Some(name) = &c.name {
                return vec![IndexKey::ControllerName(name.clone())];
            }
        }
        if let Some(sel) = &self.source {
            if let Some((k, v)) = sel.match_labels.iter().flatten().next() {
                return vec![IndexKey::Label(k.clone(), v.clone())];
            }
            for e in sel.match_expressions.iter().flatten() {
                match e.operator.as_str() {
                    "In" => {
                        return e
                            .values
                            .iter()
                            .flatten()
                            .map(|v| IndexKey::Label(e.key.clone(), v.clone()))
                            .collect()
                    }
                    "Exists" => return vec![IndexKey::LabelKey(e.key.clone())],
                    _ => {}
                }
            }
        }
        vec![IndexKey::Any]
    }
}

/// Where an owner entry is filed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum IndexKey {
    Uid(String),
    Name(String),
    Namespace(String),
    ControllerUid(String),
    ControllerName(String),
    Label(String, String),
    LabelKey(String),
    Any,
}

type Ids = SmallVec<[u32; 2]>;

/// Reservations by the owner fields that can name a pod. Looking a pod up costs one probe
/// per pod label and owner reference, plus the reservations actually filed there.
#[derive(Debug, Clone, Default)]
pub(crate) struct OwnerIndex {
    uid: HashMap<String, Ids>,
    name: HashMap<String, Ids>,
    namespace: HashMap<String, Ids>,
    controller_uid: HashMap<String, Ids>,
    controller_name: HashMap<String, Ids>,
    label: HashMap<String, HashMap<String, Ids>>,
    label_key: HashMap<String, Ids>,
    any: Ids,
}

impl OwnerIndex {
    fn list(&mut self, key: &IndexKey) -> &mut Ids {
        match key {
            IndexKey::Uid(k) => self.uid.entry(k.clone()).or_default(),
            IndexKey::Name(k) => self.name.entry(k.clone()).or_default(),
            IndexKey::Namespace(k) => self.namespace.entry(k.clone()).or_default(),
            IndexKey::ControllerUid(k) => self.controller_uid.entry(k.clone()).or_default(),
            IndexKey::ControllerName(k) => self.controller_name.entry(k.clone()).or_default(),
            IndexKey::Label(k, v) => self
                .label
                .entry(k.clone())
                .or_default()
                .entry(v.clone())
                .or_default(),
            IndexKey::LabelKey(k) => self.label_key.entry(k.clone()).or_default(),
            IndexKey::Any => &mut self.any,
        }
    }

    /// Files `id` under `keys`.
    pub(crate) fn insert(&mut self, id: u32, keys: &[IndexKey]) {
        for k in keys {
            let l = self.list(k);
            if !l.contains(&id) {
                l.push(id);
            }
        }
    }

    /// Removes `id` from `keys` (the keys it was filed under).
    pub(crate) fn remove(&mut self, id: u32, keys: &[IndexKey]) {
        for k in keys {
            let l = self.list(k);
            l.retain(|x| *x != id);
        }
        // Drop empty buckets so the maps do not grow with churn.
        for k in keys {
            match k {
                IndexKey::Uid(s) => drop_empty(&mut self.uid, s),
                IndexKey::Name(s) => drop_empty(&mut self.name, s),
                IndexKey::Namespace(s) => drop_empty(&mut self.namespace, s),
                IndexKey::ControllerUid(s) => drop_empty(&mut self.controller_uid, s),
                IndexKey::ControllerName(s) => drop_empty(&mut self.controller_name, s),
                IndexKey::Label(k, v) => {
                    if let Some(m) = self.label.get_mut(k) {
                        drop_empty(m, v);
                        if m.is_empty() {
                            self.label.remove(k);
                        }
                    }
                }
                IndexKey::LabelKey(s) => drop_empty(&mut self.label_key, s),
                IndexKey::Any => {}
            }
        }
    }

    /// Every reservation filed under something `pod` has (a superset of its owners'
    /// reservations), sorted and deduplicated.
    pub(crate) fn candidates(&self, pod: &PodInfo, out: &mut Vec<u32>) {
        out.clear();
        let meta = &pod.pod.metadata;
        let mut add = |ids: Option<&Ids>| {
            if let Some(ids) = ids {
                out.extend_from_slice(ids);
            }
        };
        if let Some(uid) = meta.uid.as_deref() {
            add(self.uid.get(uid));
        }
        add(self.name.get(&*pod.key.name));
        add(self.namespace.get(&*pod.key.namespace));
        for r in meta.owner_references.iter().flatten() {
            add(self.controller_uid.get(&r.uid));
            add(self.controller_name.get(&r.name));
        }
        for (k, v) in &pod.labels {
            if let Some(m) = self.label.get(k) {
                add(m.get(v));
            }
            add(self.label_key.get(k));
        }
        add(Some(&self.any));
        out.sort_unstable();
        out.dedup();
    }
}

fn drop_empty<K: std::hash::Hash + Eq + std::borrow::Borrow<str>>(
    m: &mut HashMap<K, Ids>,
    k: &str,
) {
    if m.get(k).is_some_and(|l| l.is_empty()) {
        m.remove(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;
    use serde_json::json;

    fn owners(v: serde_json::Value) -> OwnerMatcher {
        let owners: Vec<ReservationOwner> = serde_json::from_value(v).unwrap();
        OwnerMatcher::new(&owners).unwrap()
    }

    #[test]
    fn koordinators_owner_matching_table() {
        // TestMatchReservationOwners, plus the UID rule of the issue.
        let p0 = pod("test-pod-0").namespace("test").build_info();
        let p2 = pod("test-pod-2")
            .namespace("test")
            .label("aaa", "bbb")
            .build_info();
        let sts = pod("test-pod-1")
            .namespace("test")
            .meta(
                "ownerReferences",
                json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "test-sts-0", "uid": "sts-uid", "controller": true}]),
            )
            .build_info();
        let cases: Vec<(&str, serde_json::Value, &PodInfo, bool)> = vec![
            ("no owners match nothing", json!([]), &p0, false),
            (
                "object by namespace and name",
                json!([{"object": {"name": "test-pod-0", "namespace": "test"}}]),
                &p0,
                true,
            ),
            (
                "object in another namespace does not match",
                json!([{"object": {"name": "test-pod-0", "namespace": "other"}}]),
                &p0,
                false,
            ),
            (
                "object with a UID matches by UID only",
                json!([{"object": {"name": "renamed", "uid": "uid-test-pod-0"}}]),
                &p0,
                true,
            ),
            (
                "object with another UID does not match",
                json!([{"object": {"name": "test-pod-0", "uid": "other"}}]),
                &p0,
                false,
            ),
            (
                "controller by uid",
                json!([{"controller": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "test-sts-0", "uid": "sts-uid", "controller": true, "namespace": "test"}}]),
                &sts,
                true,
            ),
            (
                "controller in another namespace",
                json!([{"controller": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "test-sts-0", "uid": "sts-uid", "namespace": "x"}}]),
                &sts,
                false,
            ),
            (
                "label selector",
                json!([{"labelSelector": {"matchLabels": {"aaa": "bbb"}}}]),
                &p2,
                true,
            ),
            (
                "fields of one owner are ANDed",
                json!([{"object": {"name": "test-pod-2"}, "labelSelector": {"matchLabels": {"aaa": "bbb", "xxx": "yyy"}}}]),
                &p2,
                false,
            ),
            (
                "owners are ORed",
                json!([{"object": {"name": "test-pod-0"}}, {"labelSelector": {"matchLabels": {"aaa": "bbb"}}}]),
                &p2,
                true,
            ),
            (
                "match expressions",
                json!([{"labelSelector": {"matchExpressions": [{"key": "aaa", "operator": "In", "values": ["x", "bbb"]}]}}]),
                &p2,
                true,
            ),
        ];
        for (name, spec, pod, want) in cases {
            assert_eq!(owners(spec).matches(pod), want, "{name}");
        }
    }

    #[test]
    fn an_invalid_selector_names_the_owner() {
        let o: Vec<ReservationOwner> = serde_json::from_value(json!([
            {"object": {"name": "a"}},
            {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}
        ]))
        .unwrap();
        let err = OwnerMatcher::new(&o).unwrap_err();
        assert_eq!(err.index, 1);
        assert!(
            err.to_string()
                .starts_with("spec.owners[1].labelSelector: "),
            "{err}"
        );
    }

    #[test]
    fn the_index_finds_every_owner_and_few_others() {
        let specs = [
            json!([{"object": {"uid": "uid-p"}}]),
            json!([{"object": {"name": "p"}}]),
            json!([{"labelSelector": {"matchLabels": {"app": "web"}}}]),
            json!([{"labelSelector": {"matchLabels": {"app": "db"}}}]),
            json!([{"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}}]),
            json!([{"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}}]),
        ];
        let mut idx = OwnerIndex::default();
        let matchers: Vec<OwnerMatcher> = specs.iter().map(|s| owners(s.clone())).collect();
        for (i, m) in matchers.iter().enumerate() {
            idx.insert(i as u32, &m.index_keys());
        }
        let p = pod("p")
            .label("app", "web")
            .label("tier", "fe")
            .build_info();
        let mut out = Vec::new();
        idx.candidates(&p, &mut out);
        let owners_of_p: Vec<u32> = (0..matchers.len() as u32)
            .filter(|i| matchers[*i as usize].matches(&p))
            .collect();
        assert_eq!(owners_of_p, vec![0, 1, 2, 4, 5]);
        for o in &owners_of_p {
            assert!(out.contains(o), "owner {o} not found by the index");
        }
        assert!(!out.contains(&3), "app=db is not looked at for app=web");
        idx.remove(2, &matchers[2].index_keys());
        idx.candidates(&p, &mut out);
        assert!(!out.contains(&2));
    }
}
