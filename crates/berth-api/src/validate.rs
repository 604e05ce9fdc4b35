//! The one rule for every input that carries capacity or topology: a negative, duplicate,
//! inconsistent or out-of-range value refuses the whole object (or annotation), never "the
//! last duplicate wins" and never a silent clamp.
//!
//! A refusal names the field path and the rule broken ([`Refusal`]); the scheduler then
//! treats the object as kube-scheduler treats its absence (a node's annotation ignored, a
//! NodeResourceTopology unusable) and reports it once, with a Warning event and a
//! `berth_unreadable_objects_total{kind,reason}` count whose `reason` is [`Rule::as_str`].
//!
//! What is checked where:
//! - resource lists of annotations (node reservation, resource-status, resize-allocatable,
//!   reservation templates): [`resource_list`], through the annotation codecs;
//! - NodeResourceTopology zones, resources, costs and attributes: [`nrt`];
//! - node allocatable, pod and container requests and overheads: in the scheduler's own
//!   readers, with the same [`Rule`]s.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::nrt::NodeResourceTopology;
use crate::quantity::{parse_resource, ParsedQuantity};

/// Which rule a refused value breaks (the `reason` label of the unreadable-objects metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// Not readable at all (wrong type, not a quantity, not a CPU list).
    Malformed,
    /// Below zero where only amounts or ids can be.
    Negative,
    /// The same name (zone, resource, CPU, attribute) listed twice.
    Duplicate,
    /// Values that contradict each other (available above allocatable, allocatable above
    /// capacity, a CPU absent from the node's topology).
    Inconsistent,
    /// Beyond what can be counted (an amount that overflows the integers berth counts in).
    OutOfRange,
}

impl Rule {
    /// Every rule, for tests and metrics.
    pub const ALL: [Rule; 5] = [
        Rule::Malformed,
        Rule::Negative,
        Rule::Duplicate,
        Rule::Inconsistent,
        Rule::OutOfRange,
    ];

    /// The rule's name in events and in the metric's `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Malformed => "malformed",
            Rule::Negative => "negative",
            Rule::Duplicate => "duplicate",
            Rule::Inconsistent => "inconsistent",
            Rule::OutOfRange => "out-of-range",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A value refused by the rule: where it is, what is wrong, which rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {detail} (rule: {rule})")]
pub struct Refusal {
    /// Field path inside the object (or annotation value), e.g. `zones[1].resources[0].available`.
    pub path: String,
    /// The rule broken.
    pub rule: Rule,
    /// What is wrong, with the value.
    pub detail: String,
}

impl Refusal {
    /// A refusal at `path`.
    pub fn new(path: impl Into<String>, rule: Rule, detail: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            rule,
            detail: detail.into(),
        }
    }

    /// The same refusal with `prefix.` in front of its path.
    pub fn within(mut self, prefix: &str) -> Self {
        if !prefix.is_empty() {
            self.path = format!("{prefix}.{}", self.path);
        }
        self
    }
}

/// Reads one amount of resource `name` at `path`: a quantity, not negative, within range.
pub fn amount(path: &str, name: &str, text: &str) -> Result<i64, Refusal> {
    let parsed = ParsedQuantity::parse(text)
        .map_err(|e| Refusal::new(path, Rule::Malformed, e.to_string()))?;
    if parsed.is_negative() {
        return Err(Refusal::new(
            path,
            Rule::Negative,
            format!("{text:?}: must be greater than or equal to 0"),
        ));
    }
    let v = parse_resource(name, text)
        .map_err(|e| Refusal::new(path, Rule::Malformed, e.to_string()))?;
    if v == i64::MAX {
        return Err(Refusal::new(
            path,
            Rule::OutOfRange,
            format!("{text:?} is larger than berth can count"),
        ));
    }
    Ok(v)
}

/// Checks a resource list (`path` is its field path): every amount by [`amount`].
pub fn resource_list(path: &str, list: &BTreeMap<String, Quantity>) -> Result<(), Refusal> {
    for (name, q) in list {
        amount(&format!("{path}.{name}"), name, &q.0)?;
    }
    Ok(())
}

/// Remembers names seen in a list and refuses the second occurrence of one.
struct Unique<'a> {
    seen: HashMap<&'a str, usize>,
}

impl<'a> Unique<'a> {
    fn new() -> Self {
        Self {
            seen: HashMap::new(),
        }
    }

    /// `list` names the list for the message (`zones`, `zones[0].resources`).
    fn check(&mut self, list: &str, i: usize, name: &'a str) -> Result<(), Refusal> {
        if let Some(first) = self.seen.insert(name, i) {
            self.seen.insert(name, first);
            return Err(Refusal::new(
                format!("{list}[{i}].name"),
                Rule::Duplicate,
                format!("{name:?} is listed twice (first at {list}[{first}])"),
            ));
        }
        Ok(())
    }
}

/// Checks a NodeResourceTopology: zone names, resource names, cost and attribute names each
/// listed once; every quantity readable, not negative and within range;
/// `available <= allocatable <= capacity`; no negative cost. The first problem found refuses
/// the object.
pub fn nrt(t: &NodeResourceTopology) -> Result<(), Refusal> {
    let mut attrs = Unique::new();
    for (i, a) in t.spec.attributes.iter().enumerate() {
        attrs.check("attributes", i, &a.name)?;
    }
    let mut zones = Unique::new();
    for (i, zone) in t.spec.zones.iter().enumerate() {
        zones.check("zones", i, &zone.name)?;
        let at = format!("zones[{i}]");
        let mut resources = Unique::new();
        for (j, r) in zone.resources.iter().enumerate() {
            resources.check(&format!("{at}.resources"), j, &r.name)?;
            let path = |part: &str| format!("{at}.resources[{j}].{part}");
            let capacity = amount(&path("capacity"), &r.name, &r.capacity.0)?;
            let allocatable = amount(&path("allocatable"), &r.name, &r.allocatable.0)?;
            let available = amount(&path("available"), &r.name, &r.available.0)?;
            if allocatable > capacity {
                return Err(Refusal::new(
                    path("allocatable"),
                    Rule::Inconsistent,
                    format!(
                        "allocatable {:?} is more than capacity {:?}",
                        r.allocatable.0, r.capacity.0
                    ),
                ));
            }
            if available > allocatable {
                return Err(Refusal::new(
                    path("available"),
                    Rule::Inconsistent,
                    format!(
                        "available {:?} is more than allocatable {:?}",
                        r.available.0, r.allocatable.0
                    ),
                ));
            }
        }
        let mut costs = Unique::new();
        for (j, c) in zone.costs.iter().enumerate() {
            costs.check(&format!("{at}.costs"), j, &c.name)?;
            if c.value < 0 {
                return Err(Refusal::new(
                    format!("{at}.costs[{j}].value"),
                    Rule::Negative,
                    format!("{} is negative", c.value),
                ));
            }
        }
        let mut attrs = Unique::new();
        for (j, a) in zone.attributes.iter().enumerate() {
            attrs.check(&format!("{at}.attributes"), j, &a.name)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nrt_of(zones: serde_json::Value) -> NodeResourceTopology {
        serde_json::from_value(json!({
            "apiVersion": "topology.node.k8s.io/v1alpha2",
            "kind": "NodeResourceTopology",
            "metadata": {"name": "n"},
            "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
            "zones": zones,
        }))
        .expect("decodes")
    }

    fn cpu(c: &str, a: &str, v: &str) -> serde_json::Value {
        json!({"name": "cpu", "capacity": c, "allocatable": a, "available": v})
    }

    #[test]
    fn a_consistent_nrt_passes() {
        let t = nrt_of(json!([
            {"name": "node-0", "type": "Node", "resources": [cpu("4", "4", "3")],
             "costs": [{"name": "node-0", "value": 10}, {"name": "node-1", "value": 21}]},
            {"name": "node-1", "type": "Node", "resources": [cpu("4", "3", "0")]},
        ]));
        assert_eq!(nrt(&t), Ok(()));
    }

    #[test]
    fn each_defect_names_its_path_and_rule() {
        let cases = [
            (
                json!([{"name": "node-0", "type": "Node", "resources": [cpu("4", "4", "4")]},
                       {"name": "node-0", "type": "Node"}]),
                "zones[1].name",
                Rule::Duplicate,
            ),
            (
                json!([{"name": "node-0", "type": "Node", "resources": [cpu("4", "4", "-5")]}]),
                "zones[0].resources[0].available",
                Rule::Negative,
            ),
            (
                json!([{"name": "node-1", "type": "Node",
                        "resources": [cpu("4", "4", "4"), cpu("4", "4", "100")]}]),
                "zones[0].resources[1].name",
                Rule::Duplicate,
            ),
            (
                json!([{"name": "node-0", "type": "Node", "resources": [cpu("4", "4", "100")]}]),
                "zones[0].resources[0].available",
                Rule::Inconsistent,
            ),
            (
                json!([{"name": "node-0", "type": "Node", "resources": [cpu("4", "8", "1")]}]),
                "zones[0].resources[0].allocatable",
                Rule::Inconsistent,
            ),
            (
                json!([{"name": "node-0", "type": "Node", "resources": [cpu("1e30", "1e30", "1")]}]),
                "zones[0].resources[0].capacity",
                Rule::OutOfRange,
            ),
            (
                json!([{"name": "node-0", "type": "Node",
                        "costs": [{"name": "node-0", "value": -1}]}]),
                "zones[0].costs[0].value",
                Rule::Negative,
            ),
            (
                json!([{"name": "node-0", "type": "Node",
                        "costs": [{"name": "node-1", "value": 1}, {"name": "node-1", "value": 2}]}]),
                "zones[0].costs[1].name",
                Rule::Duplicate,
            ),
            (
                json!([{"name": "node-0", "type": "Node",
                        "attributes": [{"name": "a", "value": "1"}, {"name": "a", "value": "2"}]}]),
                "zones[0].attributes[1].name",
                Rule::Duplicate,
            ),
        ];
        for (zones, path, rule) in cases {
            let err = nrt(&nrt_of(zones.clone())).expect_err(&zones.to_string());
            assert_eq!((err.path.as_str(), err.rule), (path, rule), "{err}");
            assert!(err.to_string().contains(path), "{err}");
            assert!(err.to_string().contains(rule.as_str()), "{err}");
        }
    }

    #[test]
    fn top_level_attributes_are_unique() {
        let mut t = nrt_of(json!([]));
        t.spec.attributes.push(t.spec.attributes[0].clone());
        let err = nrt(&t).expect_err("duplicate attribute");
        assert_eq!(err.path, "attributes[1].name");
    }

    #[test]
    fn amounts_refuse_negative_huge_and_malformed() {
        assert_eq!(amount("p", "cpu", "1500m"), Ok(1500));
        assert_eq!(
            amount("p", "cpu", "-1").map_err(|e| e.rule),
            Err(Rule::Negative)
        );
        assert_eq!(
            amount("p", "memory", "1e40").map_err(|e| e.rule),
            Err(Rule::OutOfRange)
        );
        assert_eq!(
            amount("p", "cpu", "x").map_err(|e| e.rule),
            Err(Rule::Malformed)
        );
        assert_eq!(amount("p", "cpu", "-0"), Ok(0), "minus zero is zero");
    }
}
