//! Fuzz harnesses for the parsers in berth-core: label and field (node) selectors, and the
//! NodeResourceTopology decode with its pod fingerprint (attribute and legacy annotation).
//!
//! Included with `#[path]` by the targets in `fuzz/fuzz_targets/` and by
//! `crates/berth-core/tests/fuzz_corpus.rs` (corpus replay under `cargo test`).

#![allow(dead_code)]

use std::collections::BTreeMap;

use berth_api::k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement,
};
use berth_api::nrt::NodeResourceTopology;
use berth_core::model::selector::{Labels, NodeSelectorMatcher, Selector};
use berth_core::numa::fingerprint::{self, Fingerprint, FingerprintError};
use berth_core::numa::{FingerprintMethod, NodeTopology};

/// What an NRT the capacity rule accepted must be, checked without its code.
fn assert_accepted_nrt_is_consistent(nrt: &NodeResourceTopology, text: &str) {
    use std::collections::BTreeSet;
    let unique = |names: Vec<&str>, what: &str| {
        let mut seen = BTreeSet::new();
        for n in names {
            assert!(seen.insert(n), "{what} {n:?} accepted twice: {text:?}");
        }
    };
    unique(
        nrt.spec
            .attributes
            .iter()
            .map(|a| a.name.as_str())
            .collect(),
        "attribute",
    );
    unique(
        nrt.spec.zones.iter().map(|z| z.name.as_str()).collect(),
        "zone",
    );
    for z in &nrt.spec.zones {
        unique(
            z.resources.iter().map(|r| r.name.as_str()).collect(),
            "resource",
        );
        unique(z.costs.iter().map(|c| c.name.as_str()).collect(), "cost");
        unique(
            z.attributes.iter().map(|a| a.name.as_str()).collect(),
            "zone attribute",
        );
        for c in &z.costs {
            assert!(c.value >= 0, "negative cost accepted: {text:?}");
        }
        for r in &z.resources {
            let read = |q: &str| {
                berth_api::parse_resource(&r.name, q).expect("the CRD's grammar, checked")
            };
            let (c, a, v) = (
                read(&r.capacity.0),
                read(&r.allocatable.0),
                read(&r.available.0),
            );
            assert!(
                0 <= v && v <= a && a <= c && c < i64::MAX,
                "{}: capacity {c}, allocatable {a}, available {v} accepted: {text:?}",
                r.name
            );
        }
    }
}

/// Reads small choices from the input, then zeros once it runs out (so every input is a
/// complete case, and short inputs are simple ones).
pub struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self(data)
    }

    pub fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }

    /// One of `items` (not empty), by value.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    pub fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A short string: usually from `common`, sometimes raw bytes of the input.
    pub fn string(&mut self, common: &[&str]) -> String {
        let b = self.byte();
        if usize::from(b) < 200 || common.is_empty() {
            return common
                .get(usize::from(b) % common.len().max(1))
                .map_or_else(String::new, |s| s.to_string());
        }
        let len = self.below(6);
        let raw: Vec<u8> = (0..len).map(|_| self.byte()).collect();
        String::from_utf8_lossy(&raw).into_owned()
    }
}

const KEYS: [&str; 5] = ["a", "b", "zone", "", "metadata.name"];
const VALUES: [&str; 8] = ["1", "2", "x", "-3", "", "n1", "9223372036854775807", "+4"];
const OPS: [&str; 8] = [
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "Gt",
    "Lt",
    "in",
    "Eq",
];

fn values(b: &mut Bytes) -> Option<Vec<String>> {
    match b.below(4) {
        0 => None,
        n => Some((0..n - 1).map(|_| b.string(&VALUES)).collect()),
    }
}

fn labels(b: &mut Bytes) -> Labels {
    (0..b.below(4))
        .map(|_| (b.string(&KEYS), b.string(&VALUES)))
        .collect()
}

/// What a requirement means, written out independently of the selector module (the
/// oracle): `None` when it is invalid.
fn requirement_matches(
    key: &str,
    op: &str,
    vals: &[String],
    numeric: bool,
    value: Option<&str>,
) -> Option<bool> {
    if key.is_empty() {
        return None;
    }
    let has = |v: &str| vals.iter().any(|x| x == v);
    let int = |s: &str| s.parse::<i64>().ok();
    Some(match op {
        "In" if !vals.is_empty() => value.is_some_and(has),
        "NotIn" if !vals.is_empty() => !value.is_some_and(has),
        "Exists" if vals.is_empty() => value.is_some(),
        "DoesNotExist" if vals.is_empty() => value.is_none(),
        "Gt" | "Lt" if numeric && vals.len() == 1 => {
            let bound = int(&vals[0])?;
            match value.and_then(int) {
                Some(v) if op == "Gt" => v > bound,
                Some(v) => v < bound,
                None => false,
            }
        }
        _ => return None,
    })
}

/// Label selectors (`matchLabels`, `matchExpressions`) and node selectors (`matchExpressions`
/// with `Gt`/`Lt`, `matchFields` on `metadata.name`), built from the input and checked
/// against the oracle above on random labels.
pub fn selectors(data: &[u8]) -> bool {
    let mut b = Bytes::new(data);
    if b.bool() {
        // A label selector.
        let match_labels: Option<BTreeMap<String, String>> = b.bool().then(|| {
            (0..b.below(3))
                .map(|_| (b.string(&KEYS), b.string(&VALUES)))
                .collect()
        });
        let exprs: Vec<(String, String, Option<Vec<String>>)> = (0..b.below(4))
            .map(|_| (b.string(&KEYS), b.string(&OPS), values(&mut b)))
            .collect();
        let sel = LabelSelector {
            match_labels: match_labels.clone(),
            match_expressions: b.bool().then(|| {
                exprs
                    .iter()
                    .map(|(key, operator, values)| LabelSelectorRequirement {
                        key: key.clone(),
                        operator: operator.clone(),
                        values: values.clone(),
                    })
                    .collect()
            }),
        };
        let compiled = Selector::from_label_selector(&sel);
        let used_exprs: &[(String, String, Option<Vec<String>>)] =
            if sel.match_expressions.is_some() {
                &exprs
            } else {
                &[]
            };
        for _ in 0..3 {
            let l = labels(&mut b);
            let want: Option<bool> = match_labels
                .iter()
                .flatten()
                .map(|(k, v)| {
                    requirement_matches(
                        k,
                        "In",
                        std::slice::from_ref(v),
                        false,
                        l.get(k).map(String::as_str),
                    )
                })
                .chain(used_exprs.iter().map(|(k, op, vals)| {
                    requirement_matches(
                        k,
                        op,
                        vals.as_deref().unwrap_or(&[]),
                        false,
                        l.get(k).map(String::as_str),
                    )
                }))
                .collect::<Option<Vec<bool>>>()
                .map(|all| all.into_iter().all(|m| m));
            match (&compiled, want) {
                (Ok(s), Some(w)) => assert_eq!(s.matches(&l), w, "{sel:?} on {l:?}"),
                (Err(_), None) => {}
                (got, want) => panic!("{sel:?}: compiled {got:?}, oracle {want:?}"),
            }
        }
        return compiled.is_ok();
    }
    // A node selector: terms ORed, each with label and field requirements ANDed.
    let terms: Vec<NodeSelectorTerm> = (0..b.below(3))
        .map(|_| {
            let reqs = |b: &mut Bytes| -> Option<Vec<NodeSelectorRequirement>> {
                b.bool().then(|| {
                    (0..b.below(3))
                        .map(|_| NodeSelectorRequirement {
                            key: b.string(&KEYS),
                            operator: b.string(&OPS),
                            values: values(b),
                        })
                        .collect()
                })
            };
            NodeSelectorTerm {
                match_expressions: reqs(&mut b),
                match_fields: reqs(&mut b),
            }
        })
        .collect();
    let sel = NodeSelector {
        node_selector_terms: terms,
    };
    let compiled = NodeSelectorMatcher::new(&sel);
    for _ in 0..3 {
        let name = b.string(&["n1", "n2", ""]);
        let l = labels(&mut b);
        let want: Option<bool> = sel
            .node_selector_terms
            .iter()
            .map(|t| {
                let exprs = t.match_expressions.iter().flatten().map(|r| {
                    requirement_matches(
                        &r.key,
                        &r.operator,
                        r.values.as_deref().unwrap_or(&[]),
                        true,
                        l.get(&r.key).map(String::as_str),
                    )
                });
                let fields = t.match_fields.iter().flatten().map(|r| {
                    let vals = r.values.as_deref().unwrap_or(&[]);
                    if r.key != "metadata.name"
                        || !(r.operator == "In" || r.operator == "NotIn")
                        || vals.len() != 1
                    {
                        return None;
                    }
                    requirement_matches(&r.key, &r.operator, vals, false, Some(&name))
                });
                let all: Option<Vec<bool>> = exprs.chain(fields).collect();
                // An empty term matches nothing.
                all.map(|all| !all.is_empty() && all.into_iter().all(|m| m))
            })
            .collect::<Option<Vec<bool>>>()
            .map(|terms| terms.into_iter().any(|m| m));
        match (&compiled, want) {
            (Ok(m), Some(w)) => assert_eq!(m.matches(&name, &l), w, "{sel:?} on {name:?} {l:?}"),
            (Err(_), None) => {}
            (got, want) => panic!("{sel:?}: compiled {got:?}, oracle {want:?}"),
        }
    }
    compiled.is_ok()
}

/// A NodeResourceTopology as JSON (either version), converted as the core converts it, and
/// its fingerprint checked against pod sets: never a panic, and the signature of a pod set
/// always checks out against that pod set.
pub fn nrt(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    // The pods the scheduler believes are on the node: a few, from the text itself.
    let pods: Vec<(&str, &str)> = text
        .split(['\n', ','])
        .take(8)
        .map(|p| p.split_once('/').unwrap_or(("default", p)))
        .collect();
    let mut fp = Fingerprint::new();
    for (ns, name) in &pods {
        fp.add(ns, name);
    }
    let own = fp.sign();
    assert_eq!(own.len(), fingerprint::SIGNATURE_LEN);
    assert_eq!(fp.check(&own), Ok(()));
    // The whole text as a signature (what an attribute or annotation may hold).
    match fp.check(text) {
        Ok(()) => assert_eq!(text, own),
        Err(FingerprintError::SignatureMismatch { expected, .. }) => {
            assert_eq!(expected, own[8..], "{text:?}")
        }
        Err(_) => {}
    }
    let _ = FingerprintMethod::from_attribute(text);
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return false;
    };
    let Ok(nrt) = NodeResourceTopology::from_any_version(value) else {
        return false;
    };
    // The capacity rule (issue 25): an NRT the scheduler accepts lists each zone, resource,
    // cost and attribute once, and every resource has 0 <= available <= allocatable <=
    // capacity, all countable; anything else is refused whole (never "the last wins").
    if berth_api::validate::nrt(&nrt).is_err() {
        return false;
    }
    assert_accepted_nrt_is_consistent(&nrt, text);
    let Ok(topology) = NodeTopology::from_nrt(&nrt) else {
        panic!("an NRT the capacity rule accepts converts: {text:?}");
    };
    if let Some(f) = &topology.fingerprint {
        assert!(!f.signature.is_empty());
        let _ = fp.check(&f.signature);
        if f.from_annotation {
            assert!(f.method.is_none());
        }
    }
    true
}
