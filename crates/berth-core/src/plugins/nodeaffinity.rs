//! NodeAffinity: `spec.nodeSelector`, required and preferred node affinity, and the
//! scheduler-enforced `addedAffinity` of `NodeAffinityArgs`.
//!
//! PreFilter compiles the pod's selector and required terms once into [`State`] and, when
//! every required term pins `metadata.name`, narrows the search to those nodes
//! (kube-scheduler's `PreFilterResult`). Filter then only evaluates compiled matchers.
//! PreScore compiles the preferred terms; Score sums the weights of the terms a node matches
//! and NormalizeScore scales the sums to `0..=100`.
//!
//! The API server rejects an invalid operator, so kube-scheduler never sees one; berth's
//! input may carry one. Such a pod is not dropped and does not panic the scheduler: PreFilter
//! rejects it as unresolvable with a message naming the bad term.

use std::collections::BTreeSet;

use berth_api::k8s_openapi::api::core::v1::{
    NodeAffinity as NodeAffinitySpec, NodeSelector, NodeSelectorTerm, PreferredSchedulingTerm,
};
use serde::Deserialize;

use crate::cache::Cluster;
use crate::framework::config::ConfigError;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::plugin::default_normalize;
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::model::selector::{NodeSelectorTermMatcher, Selector, SelectorError};
use crate::plugins::args::decode;

/// kube-scheduler's `ErrReasonPod`.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
/// kube-scheduler's `errReasonEnforced` (the `addedAffinity` of the plugin args).
pub const ERR_REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
/// kube-scheduler's `errReasonConflict`: required terms pin disjoint node names.
pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

const METADATA_NAME: &str = "metadata.name";
const REQUIRED_PATH: &str =
    "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
const PREFERRED_PATH: &str =
    "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution";

/// `NodeAffinityArgs`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeAffinityArgs {
    /// Affinity every pod of the profile gets on top of its own.
    #[serde(default)]
    pub added_affinity: Option<NodeAffinitySpec>,
}

/// A compiled `NodeSelector`: terms ORed, each term's requirements ANDed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompiledNodeSelector {
    terms: Vec<NodeSelectorTermMatcher>,
}

impl CompiledNodeSelector {
    /// Compiles `sel`; the error names the bad term as `<path>.nodeSelectorTerms[i]`.
    pub fn new(sel: &NodeSelector, path: &str) -> Result<Self, SelectorError> {
        let terms = sel
            .node_selector_terms
            .iter()
            .enumerate()
            .map(|(i, t)| {
                NodeSelectorTermMatcher::new(t)
                    .map_err(|e| SelectorError(format!("{path}.nodeSelectorTerms[{i}]: {}", e.0)))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { terms })
    }

    /// Whether any term matches the node (an empty term matches nothing).
    pub fn matches(&self, node: &NodeInfo) -> bool {
        self.terms
            .iter()
            .any(|t| t.matches(&node.name, &node.labels))
    }
}

/// Compiled preferred terms with their weights.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreferredTerms {
    terms: Vec<(NodeSelectorTermMatcher, i64)>,
}

impl PreferredTerms {
    /// Compiles `terms`, skipping zero weights and empty preferences as kube-scheduler does.
    pub fn new(terms: &[PreferredSchedulingTerm], path: &str) -> Result<Self, SelectorError> {
        let mut out = Vec::new();
        for (i, t) in terms.iter().enumerate() {
            if t.weight == 0 || is_empty_term(&t.preference) {
                continue;
            }
            let m = NodeSelectorTermMatcher::new(&t.preference)
                .map_err(|e| SelectorError(format!("{path}[{i}].preference: {}", e.0)))?;
            out.push((m, i64::from(t.weight)));
        }
        Ok(Self { terms: out })
    }

    /// Sum of the weights of the terms `node` matches.
    pub fn score(&self, node: &NodeInfo) -> i64 {
        self.terms
            .iter()
            .filter(|(t, _)| t.matches(&node.name, &node.labels))
            .map(|(_, w)| *w)
            .sum()
    }
}

fn is_empty_term(t: &NodeSelectorTerm) -> bool {
    t.match_expressions.as_ref().is_none_or(Vec::is_empty)
        && t.match_fields.as_ref().is_none_or(Vec::is_empty)
}

/// The pod's `nodeSelector` and required node affinity, compiled
/// (`nodeaffinity.RequiredNodeAffinity`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequiredNodeAffinity {
    node_selector: Option<Selector>,
    affinity: Option<CompiledNodeSelector>,
}

impl RequiredNodeAffinity {
    /// Compiles what `pod` requires of its node.
    pub fn of(pod: &PodInfo) -> Result<Self, SelectorError> {
        let spec = pod.spec();
        let node_selector = spec
            .node_selector
            .as_ref()
            .filter(|m| !m.is_empty())
            .map(Selector::from_map);
        let affinity = required_terms(pod)
            .map(|ns| CompiledNodeSelector::new(ns, REQUIRED_PATH))
            .transpose()?;
        Ok(Self {
            node_selector,
            affinity,
        })
    }

    /// Whether `node` satisfies both the selector and the required terms.
    pub fn matches(&self, node: &NodeInfo) -> bool {
        self.node_selector
            .as_ref()
            .is_none_or(|s| s.matches(&node.labels))
            && self.affinity.as_ref().is_none_or(|a| a.matches(node))
    }
}

fn required_terms(pod: &PodInfo) -> Option<&NodeSelector> {
    pod.spec()
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()
}

fn preferred_terms(pod: &PodInfo) -> Option<&[PreferredSchedulingTerm]> {
    pod.spec()
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .preferred_during_scheduling_ignored_during_execution
        .as_deref()
}

/// Node names every required term pins (kube-scheduler's PreFilterResult): `None` when some
/// term does not pin `metadata.name`, so any node may match; `Some(empty)` when the terms
/// pin disjoint names.
pub fn pinned_node_names(sel: &NodeSelector) -> Option<BTreeSet<&str>> {
    if sel.node_selector_terms.is_empty() {
        return None;
    }
    let mut union: BTreeSet<&str> = BTreeSet::new();
    for term in &sel.node_selector_terms {
        let mut names: Option<BTreeSet<&str>> = None;
        for r in term.match_fields.iter().flatten() {
            if r.key != METADATA_NAME || r.operator != "In" {
                continue;
            }
            let these: BTreeSet<&str> = r.values.iter().flatten().map(String::as_str).collect();
            names = Some(match names {
                None => these,
                Some(prev) => prev.intersection(&these).copied().collect(),
            });
        }
        // A term without a name requirement lets every node through: terms are ORed.
        union.extend(names?);
    }
    Some(union)
}

/// Per-cycle state.
#[derive(Debug, Clone, Default)]
pub struct State {
    /// Written by PreFilter.
    required: Option<RequiredNodeAffinity>,
    /// Written by PreScore.
    preferred: Option<PreferredTerms>,
}

/// The NodeAffinity plugin.
#[derive(Debug)]
pub struct NodeAffinity {
    added_required: Option<CompiledNodeSelector>,
    added_preferred: Option<PreferredTerms>,
}

impl NodeAffinity {
    /// Builds the plugin from `NodeAffinityArgs`; an `addedAffinity` that does not compile
    /// is a configuration error, as `ValidateNodeAffinityArgs` makes it.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        let args: NodeAffinityArgs = decode(args)?;
        let mut me = Self {
            added_required: None,
            added_preferred: None,
        };
        let Some(added) = args.added_affinity else {
            return Ok(me);
        };
        if let Some(ns) = &added.required_during_scheduling_ignored_during_execution {
            let path = "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution";
            me.added_required =
                Some(CompiledNodeSelector::new(ns, path).map_err(|e| ConfigError::new(path, e.0))?);
        }
        if let Some(terms) = added
            .preferred_during_scheduling_ignored_during_execution
            .as_deref()
            .filter(|t| !t.is_empty())
        {
            let path = "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution";
            me.added_preferred =
                Some(PreferredTerms::new(terms, path).map_err(|e| ConfigError::new(path, e.0))?);
        }
        Ok(me)
    }
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        super::names::NODE_AFFINITY
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER | Points::FILTER | Points::PRE_SCORE | Points::SCORE
    }

    fn events_to_register(&self) -> EventsToRegister {
        // Upstream: node add and label changes.
        EventsToRegister::node_local(&[(kind::NODE_ADD | kind::NODE_LABEL, None)])
    }

    fn pre_filter(&self, cx: &Cluster, state: &mut CycleState, pod: &PodInfo) -> Status {
        let required = required_terms(pod);
        if required.is_none() && self.added_required.is_none() && pod.spec().node_selector.is_none()
        {
            return Status::skip();
        }
        let compiled = match RequiredNodeAffinity::of(pod) {
            Ok(c) => c,
            Err(e) => return Status::unresolvable(format!("invalid node affinity: {}", e.0)),
        };
        state.node_affinity = Some(Box::new(State {
            required: Some(compiled),
            preferred: None,
        }));
        let Some(names) = required.and_then(pinned_node_names) else {
            return Status::success();
        };
        if names.is_empty() {
            return Status::unresolvable(ERR_REASON_CONFLICT);
        }
        let nodes = names.iter().filter_map(|n| cx.cache.node_idx(n)).collect();
        state.restrict_nodes(self.name(), nodes);
        Status::success()
    }

    fn filter(&self, _cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if let Some(added) = &self.added_required {
            if !added.matches(node) {
                return Status::unresolvable(ERR_REASON_ENFORCED);
            }
        }
        let matched = match state
            .node_affinity
            .as_ref()
            .and_then(|s| s.required.as_ref())
        {
            Some(req) => req.matches(node),
            // PreFilter disabled in the profile: compile here, as kube-scheduler falls back
            // to; a selector that does not compile matches nothing.
            None => RequiredNodeAffinity::of(pod).is_ok_and(|r| r.matches(node)),
        };
        if matched {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_POD)
        }
    }

    fn pre_score(
        &self,
        _cx: &Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[NodeIdx],
    ) -> Status {
        let Some(terms) = preferred_terms(pod) else {
            if self.added_preferred.is_none() {
                return Status::skip();
            }
            state
                .node_affinity
                .get_or_insert_with(Default::default)
                .preferred = Some(PreferredTerms::default());
            return Status::success();
        };
        match PreferredTerms::new(terms, PREFERRED_PATH) {
            Ok(p) => {
                state
                    .node_affinity
                    .get_or_insert_with(Default::default)
                    .preferred = Some(p);
                Status::success()
            }
            Err(e) => Status::error(format!("invalid node affinity: {}", e.0)),
        }
    }

    fn score(&self, _cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let mut count = self.added_preferred.as_ref().map_or(0, |p| p.score(node));
        match state
            .node_affinity
            .as_ref()
            .and_then(|s| s.preferred.as_ref())
        {
            Some(p) => count += p.score(node),
            // PreScore disabled in the profile: compile here, as kube-scheduler falls back to.
            None => {
                if let Some(p) =
                    preferred_terms(pod).and_then(|t| PreferredTerms::new(t, PREFERRED_PATH).ok())
                {
                    count += p.score(node);
                }
            }
        }
        count
    }

    fn normalize_scores(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) {
        default_normalize(scores, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{Code, MAX_NODE_SCORE};
    use crate::testing::{node, pod};
    use serde_json::{json, Value};

    fn required(terms: Value) -> Value {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}})
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> Value {
        if values.is_empty() {
            json!({"key": key, "operator": op})
        } else {
            json!({"key": key, "operator": op, "values": values})
        }
    }

    fn name_in(n: &str) -> Value {
        json!({"key": "metadata.name", "operator": "In", "values": [n]})
    }

    fn plugin(args: Value) -> NodeAffinity {
        NodeAffinity::new(Some(&args)).unwrap()
    }

    fn labeled(name: &str, labels: &[(&str, &str)]) -> NodeInfo {
        labels
            .iter()
            .fold(node(name), |b, (k, v)| b.label(k, v))
            .build_info()
    }

    struct Case {
        name: &'static str,
        pod: crate::testing::PodBuilder,
        labels: Vec<(&'static str, &'static str)>,
        node: &'static str,
        args: Value,
        want_pre_filter: Code,
        want_filter: Option<&'static str>,
    }

    fn case(
        name: &'static str,
        pod: crate::testing::PodBuilder,
        labels: &[(&'static str, &'static str)],
    ) -> Case {
        Case {
            name,
            pod,
            labels: labels.to_vec(),
            node: "node1",
            args: json!({}),
            want_pre_filter: Code::Success,
            want_filter: None,
        }
    }

    impl Case {
        fn rejected(mut self, reason: &'static str) -> Self {
            self.want_filter = Some(reason);
            self
        }
        fn on(mut self, node: &'static str) -> Self {
            self.node = node;
            self
        }
        fn args(mut self, args: Value) -> Self {
            self.args = args;
            self
        }
        fn pre_filter(mut self, code: Code) -> Self {
            self.want_pre_filter = code;
            self
        }
    }

    #[test]
    fn filter_matches_node_selector_and_required_affinity_like_kube() {
        let aff = |terms: Value| pod("p").spec("affinity", required(terms));
        let sel = |pairs: Value| pod("p").spec("nodeSelector", pairs);
        let cases = [
            case("missing labels", sel(json!({"foo": "bar"})), &[]).rejected(ERR_REASON_POD),
            case("same labels", sel(json!({"foo": "bar"})), &[("foo", "bar")]),
            case("node labels are superset", sel(json!({"foo": "bar"})), &[("foo", "bar"), ("baz", "blah")]),
            case("node labels are subset", sel(json!({"foo": "bar", "baz": "blah"})), &[("foo", "bar")])
                .rejected(ERR_REASON_POD),
            case(
                "In operator that matches",
                aff(json!([{"matchExpressions": [expr("foo", "In", &["bar", "value2"])]}])),
                &[("foo", "bar")],
            ),
            case(
                "Gt operator that matches",
                aff(json!([{"matchExpressions": [expr("kernel-version", "Gt", &["0204"])]}])),
                &[("kernel-version", "0206")],
            ),
            case(
                "NotIn operator that matches",
                aff(json!([{"matchExpressions": [expr("mem-type", "NotIn", &["DDR", "DDR2"])]}])),
                &[("mem-type", "DDR3")],
            ),
            case(
                "Exists operator that matches",
                aff(json!([{"matchExpressions": [expr("GPU", "Exists", &[])]}])),
                &[("GPU", "NVIDIA-GRID-K1")],
            ),
            case(
                "affinity that doesn't match the node's labels",
                aff(json!([{"matchExpressions": [expr("foo", "In", &["value1", "value2"])]}])),
                &[("foo", "bar")],
            )
            .rejected(ERR_REASON_POD),
            case("empty matchExpressions match nothing", aff(json!([{"matchExpressions": []}])), &[("foo", "bar")])
                .rejected(ERR_REASON_POD),
            case("no terms at all match nothing", aff(json!([])), &[("foo", "bar")]).rejected(ERR_REASON_POD),
            case("no affinity skips", pod("p"), &[("foo", "bar")]).pre_filter(Code::Skip),
            case(
                "affinity without required terms skips",
                pod("p").spec("affinity", json!({"nodeAffinity": {}})),
                &[("foo", "bar")],
            )
            .pre_filter(Code::Skip),
            case(
                "multiple expressions ANDed that match",
                aff(json!([{"matchExpressions": [expr("GPU", "Exists", &[]), expr("GPU", "NotIn", &["AMD", "INTER"])]}])),
                &[("GPU", "NVIDIA-GRID-K1")],
            ),
            case(
                "multiple expressions ANDed that don't match",
                aff(json!([{"matchExpressions": [expr("GPU", "Exists", &[]), expr("GPU", "In", &["AMD", "INTER"])]}])),
                &[("GPU", "NVIDIA-GRID-K1")],
            )
            .rejected(ERR_REASON_POD),
            case(
                "terms ORed, one matches",
                aff(json!([
                    {"matchExpressions": [expr("foo", "In", &["bar", "value2"])]},
                    {"matchExpressions": [expr("diffkey", "In", &["wrong", "value2"])]}
                ])),
                &[("foo", "bar")],
            ),
            case(
                "affinity and nodeSelector both satisfied",
                aff(json!([{"matchExpressions": [expr("foo", "Exists", &[])]}])).spec("nodeSelector", json!({"foo": "bar"})),
                &[("foo", "bar")],
            ),
            case(
                "affinity satisfied but nodeSelector not",
                aff(json!([{"matchExpressions": [expr("foo", "Exists", &[])]}])).spec("nodeSelector", json!({"foo": "bar"})),
                &[("foo", "barrrrrr")],
            )
            .rejected(ERR_REASON_POD),
            case("matchFields In that matches", aff(json!([{"matchFields": [name_in("node1")]}])), &[]),
            case("matchFields In that does not match", aff(json!([{"matchFields": [name_in("node1")]}])), &[])
                .on("node2")
                .rejected(ERR_REASON_POD),
            case(
                "two terms: fields don't match, expressions do",
                aff(json!([
                    {"matchFields": [name_in("node1"), name_in("node2")]},
                    {"matchExpressions": [expr("foo", "In", &["bar"])]}
                ])),
                &[("foo", "bar")],
            )
            .on("node2"),
            case(
                "one term: fields don't match, expressions do",
                aff(json!([{"matchFields": [name_in("node1")], "matchExpressions": [expr("foo", "In", &["bar"])]}])),
                &[("foo", "bar")],
            )
            .on("node2")
            .rejected(ERR_REASON_POD),
            case(
                "one term: both fields and expressions match",
                aff(json!([{"matchFields": [name_in("node1")], "matchExpressions": [expr("foo", "In", &["bar"])]}])),
                &[("foo", "bar")],
            ),
            case(
                "two terms: neither matches",
                aff(json!([
                    {"matchFields": [name_in("node1")]},
                    {"matchExpressions": [expr("foo", "In", &["not-match-to-bar"])]}
                ])),
                &[("foo", "bar")],
            )
            .on("node2")
            .rejected(ERR_REASON_POD),
            case(
                "two terms of node name affinity",
                aff(json!([{"matchFields": [name_in("node1")]}, {"matchFields": [name_in("node2")]}])),
                &[],
            )
            .on("node2"),
            case(
                "two conflicting match field requirements",
                aff(json!([{"matchFields": [name_in("node1"), name_in("node2")]}])),
                &[("foo", "bar")],
            )
            .on("node2")
            .pre_filter(Code::UnschedulableAndUnresolvable)
            .rejected(ERR_REASON_POD),
            case(
                "matches added affinity and the pod's affinity",
                aff(json!([{"matchExpressions": [expr("zone", "In", &["foo"])]}])),
                &[("zone", "foo")],
            )
            .on("node2")
            .args(json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [name_in("node2")]}]}}})),
            case(
                "matches added affinity but not the pod's affinity",
                aff(json!([{"matchExpressions": [expr("zone", "In", &["bar"])]}])),
                &[("zone", "foo")],
            )
            .on("node2")
            .args(json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [name_in("node2")]}]}}}))
            .rejected(ERR_REASON_POD),
            case("doesn't match added affinity", pod("p"), &[("zone", "foo")])
                .on("node2")
                .args(json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [expr("zone", "In", &["bar"])]}]}}}))
                .rejected(ERR_REASON_ENFORCED),
        ];
        let mut cx = Cluster::default();
        for n in ["node1", "node2"] {
            cx.apply_node(node(n).build()).unwrap();
        }
        for c in cases {
            let pl = plugin(c.args.clone());
            let p = c.pod.build_info();
            let n = labeled(c.node, &c.labels);
            let mut st = CycleState::default();
            let pre = pl.pre_filter(&cx, &mut st, &p);
            assert_eq!(pre.code(), c.want_pre_filter, "{}: {pre:?}", c.name);
            if c.want_pre_filter == Code::UnschedulableAndUnresolvable {
                assert_eq!(pre.reasons(), [ERR_REASON_CONFLICT], "{}", c.name);
            }
            let got = pl.filter(&cx, &st, &p, &n);
            match c.want_filter {
                None => assert!(got.is_success(), "{}: {got:?}", c.name),
                Some(r) => assert_eq!(got, Status::unresolvable(r), "{}", c.name),
            }
            // Without PreFilter, Filter compiles the pod itself and agrees.
            let fallback = pl.filter(&cx, &CycleState::default(), &p, &n);
            assert_eq!(
                fallback.is_success(),
                got.is_success(),
                "{} (no PreFilter)",
                c.name
            );
        }
    }

    #[test]
    fn pre_filter_narrows_to_pinned_node_names() {
        let mut cx = Cluster::default();
        let idx: Vec<NodeIdx> = ["node1", "node2", "node3"]
            .iter()
            .map(|n| cx.apply_node(node(n).build()).unwrap())
            .collect();
        let pl = plugin(json!({}));
        let cases: [(&str, Value, Option<Vec<NodeIdx>>); 4] = [
            (
                "one pinned name",
                json!([{"matchFields": [name_in("node1")]}]),
                Some(vec![idx[0]]),
            ),
            (
                "names of several terms are unioned, unknown names dropped",
                json!([{"matchFields": [name_in("node3")]}, {"matchFields": [name_in("node1")]}, {"matchFields": [name_in("gone")]}]),
                Some(vec![idx[0], idx[2]]),
            ),
            (
                "a term without a name requirement allows every node",
                json!([{"matchFields": [name_in("node1")]}, {"matchExpressions": [expr("foo", "Exists", &[])]}]),
                None,
            ),
            (
                "NotIn does not pin",
                json!([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node1"]}]}]),
                None,
            ),
        ];
        for (name, terms, want) in cases {
            let p = pod("p").spec("affinity", required(terms)).build_info();
            let mut st = CycleState::default();
            assert!(pl.pre_filter(&cx, &mut st, &p).is_success(), "{name}");
            assert_eq!(st.node_subset, want, "{name}");
            if want.is_some() {
                assert_eq!(st.subset_plugins, vec![NAME_FOR_TEST], "{name}");
            }
        }
    }

    const NAME_FOR_TEST: &str = crate::plugins::names::NODE_AFFINITY;

    #[test]
    fn an_unparsable_selector_is_rejected_at_pre_filter_with_a_message_naming_it() {
        let cx = Cluster::default();
        let pl = plugin(json!({}));
        let p = pod("p")
            .spec(
                "affinity",
                required(json!([
                    {"matchExpressions": [expr("a", "In", &["x"])]},
                    {"matchExpressions": [expr("zone", "Maybe", &["x"])]}
                ])),
            )
            .build_info();
        let mut st = CycleState::default();
        let s = pl.pre_filter(&cx, &mut st, &p);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        let msg = s.message();
        assert!(msg.contains("nodeSelectorTerms[1]"), "{msg}");
        assert!(msg.contains("\"Maybe\""), "{msg}");
        // Filter without PreFilter treats it as matching nothing instead of panicking.
        let n = labeled("n", &[("zone", "x"), ("a", "x")]);
        assert_eq!(
            pl.filter(&cx, &CycleState::default(), &p, &n),
            Status::unresolvable(ERR_REASON_POD)
        );
        // A bad preferred term fails PreScore with an error; Score stays 0.
        let q = pod("q")
            .spec(
                "affinity",
                json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [expr("a", "Gt", &["x"])]}}
                ]}}),
            )
            .build_info();
        let mut st = CycleState::default();
        assert_eq!(pl.pre_score(&cx, &mut st, &q, &[]).code(), Code::Error);
        assert_eq!(pl.score(&cx, &st, &q, &n), 0);
    }

    #[test]
    fn invalid_added_affinity_is_a_config_error() {
        let err = NodeAffinity::new(Some(
            &json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [expr("a", "Bogus", &[])]}]}}}),
        ))
        .unwrap_err();
        assert_eq!(
            err.field,
            "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        );
        assert!(err.message.contains("Bogus"), "{err}");
        assert!(NodeAffinity::new(Some(&json!({"unknown": 1}))).is_err());
    }

    #[test]
    fn score_sums_matching_preferred_weights_and_normalizes() {
        let pref = |terms: Value| json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}});
        let affinity1 = pref(
            json!([{"weight": 2, "preference": {"matchExpressions": [expr("foo", "In", &["bar"])]}}]),
        );
        let affinity2 = pref(json!([
            {"weight": 2, "preference": {"matchExpressions": [expr("foo", "In", &["bar"])]}},
            {"weight": 4, "preference": {"matchExpressions": [expr("key", "In", &["value"])]}},
            {"weight": 5, "preference": {"matchExpressions": [
                expr("foo", "In", &["bar"]), expr("key", "In", &["value"]), expr("az", "In", &["az1"])
            ]}}
        ]));
        let label1: &[(&str, &str)] = &[("foo", "bar")];
        let label2: &[(&str, &str)] = &[("key", "value")];
        let label3: &[(&str, &str)] = &[("az", "az1")];
        let label4: &[(&str, &str)] = &[("abc", "az11"), ("def", "az22")];
        let label5: &[(&str, &str)] = &[("foo", "bar"), ("key", "value"), ("az", "az1")];
        let added = |a: Value| json!({"addedAffinity": a["nodeAffinity"].clone()});
        let cases: Vec<(
            &str,
            Option<Value>,
            Vec<&[(&str, &str)]>,
            Value,
            Vec<i64>,
            bool,
        )> = vec![
            (
                "no affinity: all zero",
                None,
                vec![label1, label2, label3],
                json!({}),
                vec![0, 0, 0],
                true,
            ),
            (
                "no node matches the preferred terms",
                Some(affinity1.clone()),
                vec![label4, label2, label3],
                json!({}),
                vec![0, 0, 0],
                false,
            ),
            (
                "only node1 matches",
                Some(affinity1.clone()),
                vec![label1, label2, label3],
                json!({}),
                vec![MAX_NODE_SCORE, 0, 0],
                false,
            ),
            (
                "all match with different weights",
                Some(affinity2.clone()),
                vec![label1, label5, label2],
                json!({}),
                vec![18, MAX_NODE_SCORE, 36],
                false,
            ),
            (
                "added affinity only",
                None,
                vec![label1, label2],
                added(affinity1.clone()),
                vec![MAX_NODE_SCORE, 0],
                false,
            ),
            (
                "added affinity and the pod's own",
                Some(affinity1.clone()),
                vec![label1, label2, label5],
                added(pref(
                    json!([{"weight": 3, "preference": {"matchExpressions": [expr("key", "In", &["value"])]}}]),
                )),
                vec![40, 60, MAX_NODE_SCORE],
                false,
            ),
        ];
        let cx = Cluster::default();
        for (name, aff, labels, args, want, skip) in cases {
            let pl = plugin(args);
            let mut b = pod("p");
            if let Some(a) = aff {
                b = b.spec("affinity", a);
            }
            let p = b.build_info();
            let nodes: Vec<NodeInfo> = labels
                .iter()
                .enumerate()
                .map(|(i, l)| labeled(&format!("node{i}"), l))
                .collect();
            for with_pre_score in [true, false] {
                let mut st = CycleState::default();
                if with_pre_score {
                    let s = pl.pre_score(&cx, &mut st, &p, &[]);
                    assert_eq!(s.is_skip(), skip, "{name}: {s:?}");
                }
                let mut scores: Vec<i64> =
                    nodes.iter().map(|n| pl.score(&cx, &st, &p, n)).collect();
                pl.normalize_scores(&st, &p, &mut scores);
                assert_eq!(scores, want, "{name} (PreScore run: {with_pre_score})");
            }
        }
    }

    #[test]
    fn zero_weight_and_empty_preferred_terms_are_ignored() {
        let terms = vec![
            PreferredSchedulingTerm {
                weight: 0,
                preference: NodeSelectorTerm {
                    match_expressions: Some(vec![]),
                    match_fields: None,
                },
            },
            PreferredSchedulingTerm {
                weight: 7,
                preference: NodeSelectorTerm::default(),
            },
        ];
        let p = PreferredTerms::new(&terms, "x").unwrap();
        assert_eq!(p.score(&labeled("n", &[])), 0);
        assert!(p.terms.is_empty());
    }
}
