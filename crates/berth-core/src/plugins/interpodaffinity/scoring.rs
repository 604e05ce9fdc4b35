//! InterPodAffinity PreScore, Score and NormalizeScore (kube-scheduler's
//! `interpodaffinity/scoring.go`).
//!
//! PreScore sums weights per topology pair over existing pods: the incoming pod's preferred
//! affinity (+weight) and anti-affinity (-weight) terms that an existing pod matches, and the
//! existing pods' required affinity (+hardPodAffinityWeight), preferred affinity (+weight) and
//! preferred anti-affinity (-weight) terms that the incoming pod matches. A node scores the
//! sum over its own pairs; scores are then min-max normalised to 0..=100.

use std::sync::Arc;

use crate::cache::Cluster;
use crate::framework::{Status, MAX_NODE_SCORE};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;

use super::args::InterPodAffinityArgs;
use super::counting;
use super::terms::{
    has_pod_affinity, preferred_affinity, preferred_anti_affinity, required_affinity, term_matches,
    validate,
};
use super::topology::TopologyCounts;

/// What PreScore computed (`preScoreState`): summed weights per topology pair, in parts
/// (the pod's own preferred terms; existing pods' terms) that add up to kube-scheduler's
/// single `scoreMap`. Parts are shared with the cluster's remembered answers
/// ([`super::counting`]), so a cycle adds nothing up.
#[derive(Debug, Clone, Default)]
pub struct ScoreState {
    /// Summed weights per topology pair, by part; a pair is in a part when some term added
    /// to it there (even if its weights cancel out).
    parts: Vec<Arc<TopologyCounts>>,
}

impl ScoreState {
    /// The raw score of a node: the sum of its pairs' weights (negative for anti-affinity).
    pub(super) fn score(&self, node: &NodeInfo) -> i64 {
        self.parts.iter().map(|p| p.sum_on(&node.labels)).sum()
    }

    /// Whether no pair was recorded in any part (the whole score map is empty).
    fn is_empty(&self) -> bool {
        self.parts.iter().all(|p| p.is_empty())
    }

    /// The parts added up into one map, kube-scheduler's `scoreMap` (for tests).
    #[cfg(test)]
    pub(super) fn merged(&self) -> TopologyCounts {
        let mut all = TopologyCounts::default();
        for p in &self.parts {
            for (key, value, v) in p.pairs() {
                all.add_pair(key, value, v);
            }
        }
        all
    }

    /// Min-max normalisation, truncating as kube-scheduler's float conversion does.
    pub(super) fn normalize(&self, scores: &mut [i64]) {
        if self.is_empty() {
            return;
        }
        let (Some(min), Some(max)) = (scores.iter().min().copied(), scores.iter().max().copied())
        else {
            return;
        };
        let diff = max - min;
        for s in scores.iter_mut() {
            let f = if diff > 0 {
                MAX_NODE_SCORE as f64 * ((*s - min) as f64 / diff as f64)
            } else {
                0.0
            };
            *s = f as i64;
        }
    }
}

/// PreScore: `Err(skip)` when nothing would contribute to any node's score. Reservation
/// stand-ins hidden from the pod are skipped: the weights come from the cluster's
/// remembered answers when nothing is hidden, from a recount otherwise.
pub(super) fn pre_score(
    args: &InterPodAffinityArgs,
    cx: &Cluster,
    state: &crate::framework::CycleState,
    pod: &PodInfo,
    nodes: &[NodeIdx],
) -> Result<ScoreState, Status> {
    if nodes.is_empty() {
        return Err(Status::skip());
    }
    let pref = preferred_affinity(pod);
    let pref_anti = preferred_anti_affinity(pod);
    let has_constraints = !pref.is_empty() || !pref_anti.is_empty();
    if args.ignore_preferred_terms_of_existing_pods && !has_constraints {
        return Err(Status::skip());
    }
    let own_terms = pref.iter().chain(pref_anti).map(|w| &w.pod_affinity_term);
    if let Err(e) = validate(own_terms) {
        return Err(Status::error(format!("failed to parse pod: {e}")));
    }
    if !has_constraints && cx.cache.affinity_totals.with_affinity <= 0 {
        // No preferred terms of its own and no pod with affinity anywhere: nothing scores.
        return Err(Status::skip());
    }
    let hard_weight = args.hard_pod_affinity_weight();
    let s = if super::counts_apply(state) {
        remembered(cx, pod, hard_weight)
    } else {
        recount(cx, state, pod, hard_weight)
    };
    if s.is_empty() {
        return Err(Status::skip());
    }
    Ok(s)
}

/// The weights from the cluster's remembered answers (no stand-in hidden from the pod). A
/// part no pod can add to (no preferred terms of the pod's own; no pod with affinity
/// anywhere) is not asked.
pub(super) fn remembered(cx: &Cluster, pod: &PodInfo, hard_weight: i64) -> ScoreState {
    let mut parts = Vec::with_capacity(2);
    if !preferred_affinity(pod).is_empty() || !preferred_anti_affinity(pod).is_empty() {
        parts.push(counting::preferred(cx.affinity_counts(), &cx.cache, pod));
    }
    if cx.cache.affinity_totals.with_affinity > 0 {
        parts.push(counting::existing_score(
            cx.affinity_counts(),
            &cx.cache,
            pod,
            hard_weight,
        ));
    }
    ScoreState { parts }
}

/// The weights from every pod of every node, skipping stand-ins hidden from the pod (the
/// oracle [`remembered`] is tested against).
pub(super) fn recount(
    cx: &Cluster,
    state: &crate::framework::CycleState,
    pod: &PodInfo,
    hard_weight: i64,
) -> ScoreState {
    let pref = preferred_affinity(pod);
    let pref_anti = preferred_anti_affinity(pod);
    let has_constraints = !pref.is_empty() || !pref_anti.is_empty();
    let mut topo = TopologyCounts::default();
    for node in cx.cache.nodes() {
        // Unless the incoming pod has preferred terms, only pods with affinity contribute.
        if (!has_constraints && node.pods_with_affinity == 0) || node.labels.is_empty() {
            continue;
        }
        let labels = &node.labels;
        for existing in &node.pods {
            if crate::plugins::reservation::hidden(state, existing, node.idx) {
                continue;
            }
            if !has_constraints && !has_pod_affinity(existing) {
                continue;
            }
            for w in pref {
                let t = &w.pod_affinity_term;
                if term_matches(t, pod, existing, &cx.cache.namespaces) {
                    topo.add(labels, &t.topology_key, i64::from(w.weight));
                }
            }
            for w in pref_anti {
                let t = &w.pod_affinity_term;
                if term_matches(t, pod, existing, &cx.cache.namespaces) {
                    topo.add(labels, &t.topology_key, -i64::from(w.weight));
                }
            }
            if !has_pod_affinity(existing) {
                continue;
            }
            if hard_weight > 0 {
                for t in required_affinity(existing) {
                    if term_matches(t, existing, pod, &cx.cache.namespaces) {
                        topo.add(labels, &t.topology_key, hard_weight);
                    }
                }
            }
            for w in preferred_affinity(existing) {
                let t = &w.pod_affinity_term;
                if term_matches(t, existing, pod, &cx.cache.namespaces) {
                    topo.add(labels, &t.topology_key, i64::from(w.weight));
                }
            }
            for w in preferred_anti_affinity(existing) {
                let t = &w.pod_affinity_term;
                if term_matches(t, existing, pod, &cx.cache.namespaces) {
                    topo.add(labels, &t.topology_key, -i64::from(w.weight));
                }
            }
        }
    }
    ScoreState {
        parts: vec![Arc::new(topo)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{CycleState, Plugin};
    use crate::plugins::interpodaffinity::test_util::{cluster, indices};
    use crate::plugins::interpodaffinity::InterPodAffinity;
    use crate::testing::{node, pod, NodeBuilder, PodBuilder};
    use serde_json::{json, Value};

    fn weighted(weight: i32, key: &str, op: &str, values: &[&str], topology: &str) -> Value {
        let mut e = json!({"key": key, "operator": op});
        if !values.is_empty() {
            e["values"] = json!(values);
        }
        json!({"weight": weight, "podAffinityTerm": {
            "labelSelector": {"matchExpressions": [e]}, "topologyKey": topology}})
    }

    /// Preferred affinity `security In [value]` over region, weight 5 (upstream
    /// `stayWithS1InRegion`) or 6 for S2.
    fn stay_with(value: &str) -> Value {
        let w = if value == "S1" { 5 } else { 6 };
        json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution":
            [weighted(w, "security", "In", &[value], "region")]}})
    }

    /// Preferred anti-affinity `security In [value]` over az, weight 5.
    fn away_from(value: &str) -> Value {
        json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution":
            [weighted(5, "security", "In", &[value], "az")]}})
    }

    /// Stay with S1 in region (8), away from S2 in az (5).
    fn stay_s1_away_s2() -> Value {
        json!({
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution":
                [weighted(8, "security", "In", &["S1"], "region")]},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution":
                [weighted(5, "security", "In", &["S2"], "az")]},
        })
    }

    fn hard_affinity() -> Value {
        json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchExpressions": [
                {"key": "security", "operator": "In", "values": ["S1", "value2"]}]},
             "topologyKey": "region"},
            {"labelSelector": {"matchExpressions": [
                {"key": "security", "operator": "Exists"},
                {"key": "wrongkey", "operator": "DoesNotExist"}]},
             "topologyKey": "region"},
        ]}})
    }

    fn n(name: &str, labels: &[(&str, &str)]) -> NodeBuilder {
        labels.iter().fold(node(name), |b, (k, v)| b.label(k, v))
    }

    const CHINA: &[(&str, &str)] = &[("region", "China")];
    const INDIA: &[(&str, &str)] = &[("region", "India")];
    const AZ1: &[(&str, &str)] = &[("az", "az1")];
    const AZ2: &[(&str, &str)] = &[("az", "az2")];
    const CHINA_AZ1: &[(&str, &str)] = &[("region", "China"), ("az", "az1")];

    fn s(name: &str, security: &str, node: &str) -> PodBuilder {
        pod(name).label("security", security).node_name(node)
    }

    struct Case {
        name: &'static str,
        args: Value,
        pod: PodBuilder,
        pods: Vec<PodBuilder>,
        nodes: Vec<NodeBuilder>,
        /// `None`: PreScore skips.
        want: Option<Vec<i64>>,
    }

    fn run(c: &Case) {
        let cx = cluster(&c.nodes, &c.pods);
        let pl = InterPodAffinity::new(Some(&c.args)).unwrap();
        let p = c.pod.build_info();
        let names: Vec<String> = cx.cache.nodes().map(|n| n.name.to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let feasible = indices(&cx, &names);
        let mut state = CycleState::default();
        let st = pl.pre_score(&cx, &mut state, &p, &feasible);
        let got = if st.is_skip() {
            None
        } else {
            assert!(st.is_success(), "{}: {st:?}", c.name);
            let mut scores: Vec<i64> = feasible
                .iter()
                .map(|i| pl.score(&cx, &state, &p, cx.cache.node(*i).unwrap()))
                .collect();
            pl.normalize_scores(&state, &p, &mut scores);
            Some(scores)
        };
        assert_eq!(got, c.want, "{}", c.name);
    }

    #[test]
    fn scores_follow_kube_scheduler_cases() {
        let cases = vec![
            Case {
                name: "no affinity anywhere skips scoring",
                args: json!({}),
                pod: pod("p").label("security", "S1"),
                pods: vec![],
                nodes: vec![n("node1", CHINA), n("node2", INDIA), n("node3", AZ1)],
                want: None,
            },
            Case {
                name: "affinity: matching pod and topology key score highest",
                args: json!({}),
                pod: pod("p").label("security", "S1").spec("affinity", stay_with("S1")),
                pods: vec![s("a", "S1", "node1"), s("b", "S2", "node2"), s("c", "S1", "node3")],
                nodes: vec![n("node1", CHINA), n("node2", INDIA), n("node3", AZ1)],
                want: Some(vec![100, 0, 0]),
            },
            Case {
                name: "affinity: every node sharing the matching pod's topology value scores the same",
                args: json!({}),
                pod: pod("p").spec("affinity", stay_with("S1")),
                pods: vec![s("a", "S1", "node1")],
                nodes: vec![n("node1", CHINA), n("node2", CHINA_AZ1), n("node3", INDIA)],
                want: Some(vec![100, 100, 0]),
            },
            Case {
                name: "affinity: the region with more matching pods wins",
                args: json!({}),
                pod: pod("p").label("security", "S1").spec("affinity", stay_with("S2")),
                pods: vec![
                    s("a", "S2", "node1"),
                    s("b", "S2", "node1"),
                    s("c", "S2", "node2"),
                    s("d", "S2", "node3"),
                    s("e", "S2", "node4"),
                    s("f", "S2", "node5"),
                ],
                nodes: vec![
                    n("node1", CHINA),
                    n("node2", INDIA),
                    n("node3", CHINA),
                    n("node4", CHINA),
                    n("node5", INDIA),
                ],
                want: Some(vec![100, 0, 100, 100, 0]),
            },
            Case {
                name: "affinity: different operators and weights add up per region",
                args: json!({}),
                pod: pod("p").label("security", "S1").spec(
                    "affinity",
                    json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 8, "podAffinityTerm": {"labelSelector": {"matchExpressions": [
                            {"key": "security", "operator": "NotIn", "values": ["S1"]},
                            {"key": "security", "operator": "In", "values": ["S2"]}]},
                            "topologyKey": "region"}},
                        {"weight": 2, "podAffinityTerm": {"labelSelector": {"matchExpressions": [
                            {"key": "security", "operator": "Exists"},
                            {"key": "wrongkey", "operator": "DoesNotExist"}]},
                            "topologyKey": "region"}},
                    ]}}),
                ),
                pods: vec![s("a", "S1", "node1"), s("b", "S2", "node2"), s("c", "S1", "node3")],
                nodes: vec![n("node1", CHINA), n("node2", INDIA), n("node3", AZ1)],
                want: Some(vec![20, 100, 0]),
            },
            Case {
                name: "affinity symmetry: existing pods' preferred terms the pod matches count",
                args: json!({}),
                pod: pod("p").label("security", "S2"),
                pods: vec![
                    s("a", "S1", "node1").spec("affinity", stay_with("S1")),
                    s("b", "S2", "node2").spec("affinity", stay_with("S2")),
                ],
                nodes: vec![n("node1", CHINA), n("node2", INDIA), n("node3", AZ1)],
                want: Some(vec![0, 100, 0]),
            },
            Case {
                name: "affinity symmetry: existing pods' required terms count with hardPodAffinityWeight",
                args: json!({}),
                pod: pod("p").label("security", "S1"),
                pods: vec![
                    s("a", "S1", "node1").spec("affinity", hard_affinity()),
                    s("b", "S2", "node2").spec("affinity", hard_affinity()),
                ],
                nodes: vec![n("node1", CHINA), n("node2", INDIA), n("node3", AZ1)],
                want: Some(vec![100, 100, 0]),
            },
            Case {
                name: "hardPodAffinityWeight 0 ignores existing pods' required terms",
                args: json!({"hardPodAffinityWeight": 0}),
                pod: pod("p").label("security", "S1"),
                pods: vec![s("a", "S1", "node1").spec("affinity", hard_affinity())],
                nodes: vec![n("node1", CHINA), n("node2", INDIA), n("node3", AZ1)],
                want: None,
            },
            Case {
                name: "anti-affinity: the node with the matching pod scores lowest",
                args: json!({}),
                pod: pod("p").label("security", "S1").spec("affinity", away_from("S1")),
                pods: vec![s("a", "S1", "node1"), s("b", "S2", "node2")],
                nodes: vec![n("node1", AZ1), n("node2", CHINA)],
                want: Some(vec![0, 100]),
            },
            Case {
                name: "anti-affinity: a node without the topology key is not penalised",
                args: json!({}),
                pod: pod("p").label("security", "S1").spec("affinity", away_from("S1")),
                pods: vec![s("a", "S1", "node1"), s("b", "S1", "node2")],
                nodes: vec![n("node1", AZ1), n("node2", CHINA)],
                want: Some(vec![0, 100]),
            },
            Case {
                name: "anti-affinity symmetry: existing pods' preferred anti-affinity counts",
                args: json!({}),
                pod: pod("p").label("security", "S2"),
                pods: vec![
                    s("a", "S1", "node1").spec("affinity", away_from("S2")),
                    s("b", "S2", "node2").spec("affinity", away_from("S1")),
                ],
                nodes: vec![n("node1", AZ1), n("node2", AZ2)],
                want: Some(vec![0, 100]),
            },
            Case {
                name: "affinity and anti-affinity: same-labelled pods gather by region",
                args: json!({}),
                pod: pod("p").label("security", "S1").spec("affinity", stay_s1_away_s2()),
                pods: vec![
                    s("a", "S1", "node1"),
                    s("b", "S1", "node1"),
                    s("c", "S1", "node2"),
                    s("d", "S1", "node3"),
                    s("e", "S1", "node3"),
                    s("f", "S1", "node4"),
                    s("g", "S1", "node5"),
                ],
                nodes: vec![
                    n("node1", CHINA_AZ1),
                    n("node2", INDIA),
                    n("node3", CHINA),
                    n("node4", CHINA),
                    n("node5", INDIA),
                ],
                want: Some(vec![100, 0, 100, 100, 0]),
            },
            Case {
                name: "affinity, anti-affinity and both symmetries together",
                args: json!({}),
                pod: pod("p").label("security", "S1").spec("affinity", stay_s1_away_s2()),
                pods: vec![
                    s("a", "S1", "node1"),
                    s("b", "S2", "node2"),
                    pod("c").node_name("node3").spec("affinity", stay_s1_away_s2()),
                    pod("d").node_name("node4").spec("affinity", away_from("S1")),
                ],
                nodes: vec![n("node1", CHINA), n("node2", AZ1), n("node3", INDIA), n("node4", AZ2)],
                want: Some(vec![100, 0, 100, 0]),
            },
            Case {
                name: "equal scores across nodes normalise to zero",
                args: json!({}),
                pod: pod("p").label("security", "S1"),
                pods: vec![
                    s("a", "S1", "node1"),
                    pod("b").node_name("node2").spec("affinity", stay_s1_away_s2()),
                ],
                nodes: vec![n("node1", CHINA), n("node2", CHINA)],
                want: Some(vec![0, 0]),
            },
            Case {
                name: "ignorePreferredTermsOfExistingPods skips a pod without preferred terms",
                args: json!({"ignorePreferredTermsOfExistingPods": true}),
                pod: pod("p").label("security", "S2"),
                pods: vec![
                    s("a", "S1", "node1").spec("affinity", stay_with("S1")),
                    s("b", "S2", "node2").spec("affinity", stay_with("S2")),
                ],
                nodes: vec![n("node1", CHINA), n("node2", INDIA), n("node3", AZ1)],
                want: None,
            },
            Case {
                name: "ignorePreferredTermsOfExistingPods still scores the pod's own terms",
                args: json!({"ignorePreferredTermsOfExistingPods": true}),
                pod: pod("p").label("security", "S1").spec("affinity", stay_with("S1")),
                pods: vec![s("a", "S1", "node1"), s("b", "S2", "node2")],
                nodes: vec![n("node1", CHINA), n("node2", INDIA), n("node3", AZ1)],
                want: Some(vec![100, 0, 0]),
            },
            Case {
                name: "symmetry with a namespaceSelector selecting the pod's namespace by name",
                args: json!({}),
                pod: pod("p").namespace("subteam1").label("security", "S1"),
                pods: vec![
                    s("a", "S1", "node1").spec(
                        "affinity",
                        json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 5, "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"security": "S1"}},
                                "namespaces": ["subteam2"],
                                "namespaceSelector": {"matchLabels":
                                    {"kubernetes.io/metadata.name": "subteam1"}},
                                "topologyKey": "region"}}]}}),
                    ),
                    s("b", "S2", "node2").spec("affinity", stay_with("S2")),
                ],
                nodes: vec![n("node1", CHINA), n("node2", INDIA), n("node3", AZ1)],
                want: Some(vec![100, 0, 0]),
            },
        ];
        for c in &cases {
            run(c);
        }
    }

    #[test]
    fn invalid_preferred_terms_fail_pre_score() {
        let cx = cluster(&[n("node1", CHINA), n("node2", CHINA)], &[]);
        let pl = InterPodAffinity::new(None).unwrap();
        let p = pod("p")
            .spec(
                "affinity",
                json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution":
                    [weighted(8, "security", "Like", &["x"], "region")]}}),
            )
            .build_info();
        let mut state = CycleState::default();
        let st = pl.pre_score(&cx, &mut state, &p, &indices(&cx, &["node1", "node2"]));
        assert_eq!(st.code(), crate::framework::Code::Error);
        assert!(state.inter_pod_affinity_score.is_none());
    }

    #[test]
    fn normalisation_maps_min_to_zero_and_max_to_hundred() {
        let mut topo = TopologyCounts::default();
        topo.add(&[("z".to_string(), "a".to_string())].into(), "z", 1);
        let s = ScoreState {
            parts: vec![Arc::new(topo)],
        };
        let mut scores = vec![-5, 0, 5, 2];
        s.normalize(&mut scores);
        assert_eq!(scores, vec![0, 50, 100, 70]);
    }
}
