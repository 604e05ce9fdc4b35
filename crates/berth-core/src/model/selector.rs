//! Label and node selectors, compiled once and matched many times.
//!
//! kube-scheduler converts `metav1.LabelSelector` and `v1.NodeSelector` into matcher objects
//! before the per-node loop; these types do the same, and reject what `labels.Parse` and
//! `nodeaffinity.NewNodeSelector` reject (an unknown operator, `In` without values, `Gt`
//! with a non-integer) with a message naming the problem.

use std::collections::BTreeMap;

use berth_api::k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A selector that the API server accepted but that cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

/// Labels of an object.
pub type Labels = BTreeMap<String, String>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
    number: i64,
}

impl Requirement {
    fn new(
        key: &str,
        op: &str,
        values: &[String],
        allow_numeric: bool,
    ) -> Result<Self, SelectorError> {
        let op = match op {
            "In" => Op::In,
            "NotIn" => Op::NotIn,
            "Exists" => Op::Exists,
            "DoesNotExist" => Op::DoesNotExist,
            "Gt" if allow_numeric => Op::Gt,
            "Lt" if allow_numeric => Op::Lt,
            other => {
                return Err(SelectorError(format!(
                    "{other:?} is not a valid label selector operator"
                )))
            }
        };
        let mut number = 0;
        match op {
            Op::In | Op::NotIn if values.is_empty() => {
                return Err(SelectorError(format!(
                    "key {key:?}: for 'in', 'notin' operators, values set can't be empty"
                )))
            }
            Op::Exists | Op::DoesNotExist if !values.is_empty() => {
                return Err(SelectorError(format!(
                    "key {key:?}: values set must be empty for exists and does not exist"
                )))
            }
            Op::Gt | Op::Lt => {
                let [v] = values else {
                    return Err(SelectorError(format!(
                        "key {key:?}: for 'Gt', 'Lt' operators, exactly one value is required"
                    )));
                };
                number = v.parse().map_err(|_| {
                    SelectorError(format!(
                        "key {key:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                    ))
                })?;
            }
            _ => {}
        }
        if key.is_empty() {
            return Err(SelectorError("selector key must not be empty".into()));
        }
        Ok(Self {
            key: key.to_string(),
            op,
            values: values.to_vec(),
            number,
        })
    }

    fn matches_value(&self, value: Option<&str>) -> bool {
        match self.op {
            Op::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Op::NotIn => !value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
            Op::Gt => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|n| n > self.number),
            Op::Lt => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|n| n < self.number),
        }
    }
}

/// A compiled `metav1.LabelSelector`. `None` in the API means "matches nothing" for most
/// callers, so that case is left to them; an empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    reqs: Vec<Requirement>,
}

impl Selector {
    /// Compiles a label selector.
    pub fn from_label_selector(sel: &LabelSelector) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            reqs.push(Requirement::new(k, "In", std::slice::from_ref(v), false)?);
        }
        for e in sel.match_expressions.iter().flatten() {
            reqs.push(Requirement::new(
                &e.key,
                &e.operator,
                e.values.as_deref().unwrap_or(&[]),
                false,
            )?);
        }
        Ok(Self { reqs })
    }

    /// A selector from a plain `key: value` map (`nodeSelector`, `reservationSelector`).
    pub fn from_map(map: &BTreeMap<String, String>) -> Self {
        let reqs = map
            .iter()
            .map(|(k, v)| Requirement {
                key: k.clone(),
                op: Op::In,
                values: vec![v.clone()],
                number: 0,
            })
            .collect();
        Self { reqs }
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.reqs
            .iter()
            .all(|r| r.matches_value(labels.get(&r.key).map(String::as_str)))
    }

    /// True when the selector has no requirement (matches everything).
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }
}

/// A compiled `NodeSelectorTerm`: label expressions ANDed with field expressions
/// (`metadata.name` only, as the API allows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSelectorTermMatcher {
    labels: Vec<Requirement>,
    fields: Vec<Requirement>,
}

impl NodeSelectorTermMatcher {
    /// Compiles one term.
    pub fn new(term: &NodeSelectorTerm) -> Result<Self, SelectorError> {
        let conv = |reqs: &Option<Vec<NodeSelectorRequirement>>,
                    fields: bool|
         -> Result<Vec<Requirement>, SelectorError> {
            reqs.iter()
                .flatten()
                .map(|r| {
                    if fields {
                        if r.key != "metadata.name" {
                            return Err(SelectorError(format!(
                                "{:?} is not a valid field selector key",
                                r.key
                            )));
                        }
                        if !(r.operator == "In" || r.operator == "NotIn") {
                            return Err(SelectorError(format!(
                                "{:?} is not a valid field selector operator",
                                r.operator
                            )));
                        }
                        if r.values.as_ref().map_or(0, Vec::len) != 1 {
                            return Err(SelectorError(
                                "field selector must have exactly one value".into(),
                            ));
                        }
                    }
                    Requirement::new(
                        &r.key,
                        &r.operator,
                        r.values.as_deref().unwrap_or(&[]),
                        !fields,
                    )
                })
                .collect()
        };
        Ok(Self {
            labels: conv(&term.match_expressions, false)?,
            fields: conv(&term.match_fields, true)?,
        })
    }

    /// Whether a node with `name` and `labels` matches. An empty term matches nothing,
    /// as in kube-scheduler.
    pub fn matches(&self, name: &str, labels: &Labels) -> bool {
        if self.labels.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.labels
            .iter()
            .all(|r| r.matches_value(labels.get(&r.key).map(String::as_str)))
            && self.fields.iter().all(|r| r.matches_value(Some(name)))
    }

    /// Node names this term pins the pod to (`metadata.name In [..]`), if it does.
    pub fn pinned_names(&self) -> Option<&[String]> {
        self.fields
            .iter()
            .find(|r| r.op == Op::In)
            .map(|r| r.values.as_slice())
    }
}

/// A compiled `NodeSelector`: terms ORed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSelectorMatcher {
    terms: Vec<NodeSelectorTermMatcher>,
}

impl NodeSelectorMatcher {
    /// Compiles a node selector.
    pub fn new(sel: &NodeSelector) -> Result<Self, SelectorError> {
        Ok(Self {
            terms: sel
                .node_selector_terms
                .iter()
                .map(NodeSelectorTermMatcher::new)
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether any term matches.
    pub fn matches(&self, name: &str, labels: &Labels) -> bool {
        self.terms.iter().any(|t| t.matches(name, labels))
    }

    /// The terms.
    pub fn terms(&self) -> &[NodeSelectorTermMatcher] {
        &self.terms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selector_ands_labels_and_expressions() {
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["db".into()]),
            }]),
        };
        let s = Selector::from_label_selector(&sel).unwrap();
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "api")])));
        assert!(Selector::default().matches(&labels(&[])));
    }

    #[test]
    fn invalid_operators_are_errors() {
        let sel = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Maybe".into(),
                values: None,
            }]),
            ..Default::default()
        };
        assert!(Selector::from_label_selector(&sel)
            .unwrap_err()
            .0
            .contains("Maybe"));
        let sel = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "In".into(),
                values: None,
            }]),
            ..Default::default()
        };
        assert!(Selector::from_label_selector(&sel).is_err());
    }

    #[test]
    fn node_selector_terms_are_ored_and_gt_lt_compare_integers() {
        let term = |key: &str, op: &str, vals: &[&str]| NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: Some(vals.iter().map(|s| s.to_string()).collect()),
            }]),
            match_fields: None,
        };
        let m = NodeSelectorMatcher::new(&NodeSelector {
            node_selector_terms: vec![term("cores", "Gt", &["4"]), term("zone", "In", &["a"])],
        })
        .unwrap();
        assert!(m.matches("n", &labels(&[("cores", "8")])));
        assert!(!m.matches("n", &labels(&[("cores", "4")])));
        assert!(m.matches("n", &labels(&[("zone", "a")])));
        assert!(!m.matches("n", &labels(&[("cores", "x")])));
        assert!(NodeSelectorMatcher::new(&NodeSelector {
            node_selector_terms: vec![term("c", "Gt", &["x"])]
        })
        .is_err());
    }

    #[test]
    fn match_fields_select_by_node_name_and_empty_terms_match_nothing() {
        let t = NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec!["n1".into()]),
            }]),
        };
        let m = NodeSelectorTermMatcher::new(&t).unwrap();
        assert!(m.matches("n1", &Labels::new()));
        assert!(!m.matches("n2", &Labels::new()));
        assert_eq!(m.pinned_names(), Some(&["n1".to_string()][..]));
        let empty = NodeSelectorTermMatcher::new(&NodeSelectorTerm::default()).unwrap();
        assert!(!empty.matches("n1", &Labels::new()));
    }
}
