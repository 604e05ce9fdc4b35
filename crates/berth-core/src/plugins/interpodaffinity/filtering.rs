//! InterPodAffinity PreFilter and Filter (kube-scheduler's `interpodaffinity/filtering.go`).
//!
//! PreFilter counts, per topology pair, (1) existing pods whose required anti-affinity the
//! incoming pod matches, (2) existing pods matching all of the incoming pod's required
//! affinity terms and (3) existing pods matching each of its required anti-affinity terms.
//! Filter then only looks up the node's own pairs.

use std::sync::Arc;

use crate::cache::Cluster;
use crate::framework::{CycleState, Status};
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;

use super::counting;
use super::terms::{
    matches_all, required_affinity, required_anti_affinity, term_matches, validate,
};
use super::topology::TopologyCounts;

/// kube-scheduler's `ErrReasonAffinityRulesNotMatch`.
pub const ERR_REASON_AFFINITY_RULES_NOT_MATCH: &str = "node(s) didn't match pod affinity rules";
/// kube-scheduler's `ErrReasonAntiAffinityRulesNotMatch`.
pub const ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't match pod anti-affinity rules";
/// kube-scheduler's `ErrReasonExistingAntiAffinityRulesNotMatch`.
pub const ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// What PreFilter computed for the pod being scheduled (`preFilterState`). The counts are
/// shared with the cluster's remembered answers ([`super::counting`]) and copied on write
/// by the PreFilter extensions.
#[derive(Debug, Clone, Default)]
pub struct State {
    /// Existing pods whose required anti-affinity terms the incoming pod matches.
    existing_anti: Arc<TopologyCounts>,
    /// Existing pods matching all of the incoming pod's required affinity terms.
    affinity: Arc<TopologyCounts>,
    /// Existing pods matching the incoming pod's required anti-affinity terms.
    anti: Arc<TopologyCounts>,
    /// The incoming pod matches all its own required affinity terms.
    self_match: bool,
}

impl State {
    /// The three counts: existing pods' anti-affinity, affinity, anti-affinity (for tests).
    #[cfg(test)]
    pub(super) fn counts(&self) -> [&TopologyCounts; 3] {
        [&self.existing_anti, &self.affinity, &self.anti]
    }
}

/// PreFilter: `Ok(None)` when there is nothing to check (Skip).
/// Reservation stand-ins the pod must not see (its own reservations; every reservation when
/// the pod is itself one) are skipped ([`crate::plugins::reservation::hidden`]): the counts
/// come from the cluster's remembered answers when nothing is hidden, from a recount
/// otherwise.
pub(super) fn pre_filter(
    cx: &Cluster,
    state: &CycleState,
    pod: &PodInfo,
) -> Result<Option<State>, Status> {
    let affinity = required_affinity(pod);
    let anti = required_anti_affinity(pod);
    if let Err(e) = validate(affinity.iter().chain(anti)) {
        return Err(Status::unresolvable(format!("parsing pod: {e}")));
    }
    if affinity.is_empty()
        && anti.is_empty()
        && cx.cache.affinity_totals.with_required_anti_affinity <= 0
    {
        // Nothing to check and no existing pod's anti-affinity anywhere: skip the scan.
        return Ok(None);
    }
    let mut s = if super::counts_apply(state) {
        remembered(cx, pod)
    } else {
        recount(cx, state, pod)
    };
    if s.existing_anti.is_empty() && affinity.is_empty() && anti.is_empty() {
        return Ok(None);
    }
    s.self_match = matches_all(affinity, pod, pod, &cx.cache.namespaces);
    Ok(Some(s))
}

/// The counts from the cluster's remembered answers (no stand-in hidden from the pod). A
/// count no pod can add to (no pod with required anti-affinity anywhere; no terms of the
/// pod's own) is not asked.
pub(super) fn remembered(cx: &Cluster, pod: &PodInfo) -> State {
    let existing_anti = if cx.cache.affinity_totals.with_required_anti_affinity > 0 {
        counting::existing_anti_affinity(cx.affinity_counts(), &cx.cache, pod)
    } else {
        Arc::default()
    };
    let affinity = if required_affinity(pod).is_empty() {
        Arc::default()
    } else {
        counting::affinity(cx.affinity_counts(), &cx.cache, pod)
    };
    let anti = if required_anti_affinity(pod).is_empty() {
        Arc::default()
    } else {
        counting::anti_affinity(cx.affinity_counts(), &cx.cache, pod)
    };
    State {
        existing_anti,
        affinity,
        anti,
        self_match: false,
    }
}

/// The counts from every pod of every node, skipping stand-ins hidden from the pod (the
/// oracle [`remembered`] is tested against).
pub(super) fn recount(cx: &Cluster, state: &CycleState, pod: &PodInfo) -> State {
    let affinity = required_affinity(pod);
    let anti = required_anti_affinity(pod);
    let mut existing_anti = TopologyCounts::default();
    let mut affinity_counts = TopologyCounts::default();
    let mut anti_counts = TopologyCounts::default();
    for node in cx.cache.nodes() {
        if node.pods_with_required_anti_affinity == 0 {
            continue;
        }
        for existing in &node.pods {
            if crate::plugins::reservation::hidden(state, existing, node.idx) {
                continue;
            }
            for t in required_anti_affinity(existing) {
                if term_matches(t, existing, pod, &cx.cache.namespaces) {
                    existing_anti.add(&node.labels, &t.topology_key, 1);
                }
            }
        }
    }
    if !affinity.is_empty() || !anti.is_empty() {
        for node in cx.cache.nodes() {
            for existing in &node.pods {
                if crate::plugins::reservation::hidden(state, existing, node.idx) {
                    continue;
                }
                if matches_all(affinity, pod, existing, &cx.cache.namespaces) {
                    for t in affinity {
                        affinity_counts.add(&node.labels, &t.topology_key, 1);
                    }
                }
                for t in anti {
                    if term_matches(t, pod, existing, &cx.cache.namespaces) {
                        anti_counts.add(&node.labels, &t.topology_key, 1);
                    }
                }
            }
        }
    }
    State {
        existing_anti: Arc::new(existing_anti),
        affinity: Arc::new(affinity_counts),
        anti: Arc::new(anti_counts),
        self_match: false,
    }
}

/// PreFilter extensions (`AddPod`/`RemovePod`, kube-scheduler's `updateWithPod`): counts
/// `existing`, added to (`delta` 1) or removed from (-1) `node`, into the pod's state as
/// PreFilter counts every pod, so preemption's dry run need not re-run PreFilter over the
/// whole cluster. Nothing to do when PreFilter skipped (no state) or `existing` is a
/// reservation stand-in the pod does not see.
pub(super) fn update_with_pod(
    cx: &Cluster,
    state: &mut CycleState,
    pod: &PodInfo,
    existing: &PodInfo,
    node: &NodeInfo,
    delta: i64,
) {
    if crate::plugins::reservation::hidden(state, existing, node.idx) {
        return;
    }
    let Some(s) = state.inter_pod_affinity.as_deref_mut() else {
        return;
    };
    let affinity = required_affinity(pod);
    let anti = required_anti_affinity(pod);
    for t in required_anti_affinity(existing) {
        if term_matches(t, existing, pod, &cx.cache.namespaces) {
            Arc::make_mut(&mut s.existing_anti).update(&node.labels, &t.topology_key, delta);
        }
    }
    if affinity.is_empty() && anti.is_empty() {
        return;
    }
    if matches_all(affinity, pod, existing, &cx.cache.namespaces) {
        for t in affinity {
            Arc::make_mut(&mut s.affinity).update(&node.labels, &t.topology_key, delta);
        }
    }
    for t in anti {
        if term_matches(t, pod, existing, &cx.cache.namespaces) {
            Arc::make_mut(&mut s.anti).update(&node.labels, &t.topology_key, delta);
        }
    }
}

/// Filter: affinity first (unresolvable: preemption cannot add pods), then the pod's own
/// anti-affinity, then existing pods' anti-affinity (both may be resolved by preemption).
pub(super) fn filter(s: &State, pod: &PodInfo, node: &NodeInfo) -> Status {
    if !satisfies_affinity(s, pod, node) {
        return Status::unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH);
    }
    if !satisfies_anti_affinity(s, pod, node) {
        return Status::unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH);
    }
    if s.existing_anti.any_positive_on(&node.labels) {
        return Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH);
    }
    Status::success()
}

/// Every term's topology key must be on the node and some matching pod in the node's domain
/// for each; or, when no pod anywhere matches, the pod may be the first of a group that
/// matches its own terms (otherwise such groups could never start).
fn satisfies_affinity(s: &State, pod: &PodInfo, node: &NodeInfo) -> bool {
    let mut pods_exist = true;
    for t in required_affinity(pod) {
        let Some(value) = node.labels.get(&t.topology_key) else {
            return false;
        };
        if s.affinity.get(&t.topology_key, value) <= 0 {
            pods_exist = false;
        }
    }
    pods_exist || (s.affinity.is_empty() && s.self_match)
}

/// No pod matching one of the terms in the node's domain of that term.
fn satisfies_anti_affinity(s: &State, pod: &PodInfo, node: &NodeInfo) -> bool {
    s.anti.is_empty()
        || required_anti_affinity(pod)
            .iter()
            .all(|t| s.anti.on_node(&node.labels, &t.topology_key) <= 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{Code, CycleState, Plugin};
    use crate::plugins::interpodaffinity::test_util::{cluster, node_with};
    use crate::plugins::interpodaffinity::InterPodAffinity;
    use crate::testing::{node, pod, PodBuilder};
    use serde_json::{json, Value};

    /// A required term `key <op> values` over `topology`.
    fn term(key: &str, op: &str, values: &[&str], topology: &str) -> Value {
        let mut e = json!({"key": key, "operator": op});
        if !values.is_empty() {
            e["values"] = json!(values);
        }
        json!({"labelSelector": {"matchExpressions": [e]}, "topologyKey": topology})
    }

    fn affinity(terms: Vec<Value>) -> Value {
        json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}})
    }

    fn anti(terms: Vec<Value>) -> Value {
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}})
    }

    fn both(aff: Vec<Value>, anti_terms: Vec<Value>) -> Value {
        json!({
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": aff},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti_terms},
        })
    }

    type Want = Option<(Code, &'static str)>;
    const OK: Want = None;
    const AFF: Want = Some((
        Code::UnschedulableAndUnresolvable,
        ERR_REASON_AFFINITY_RULES_NOT_MATCH,
    ));
    const ANTI: Want = Some((
        Code::Unschedulable,
        ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ));
    const EXISTING: Want = Some((
        Code::Unschedulable,
        ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
    ));

    struct Case {
        name: &'static str,
        pod: PodBuilder,
        pods: Vec<PodBuilder>,
        /// Per node of [`nodes`], in order.
        want: Vec<Want>,
    }

    /// node1: region r1 / zone z11; node2: region r1 / zone z12; node3: region r2 / zone z21.
    fn nodes() -> Vec<crate::testing::NodeBuilder> {
        vec![
            node("node1").label("region", "r1").label("zone", "z11"),
            node("node2").label("region", "r1").label("zone", "z12"),
            node("node3").label("region", "r2").label("zone", "z21"),
        ]
    }

    fn run(c: &Case) {
        let cx = cluster(&nodes(), &c.pods);
        let p = c.pod.build_info();
        let pl = InterPodAffinity::new(None).unwrap();
        let mut state = CycleState::default();
        let pre = pl.pre_filter(&cx, &mut state, &p);
        let got: Vec<Want> = cx
            .cache
            .nodes()
            .map(|n| {
                if pre.is_skip() {
                    return None;
                }
                assert!(pre.is_success(), "{}: prefilter {pre:?}", c.name);
                let st = pl.filter(&cx, &state, &p, n);
                (!st.is_success()).then(|| {
                    assert_eq!(st.reasons().len(), 1, "{}", c.name);
                    let reason: &'static str = match &*st.reasons()[0] {
                        ERR_REASON_AFFINITY_RULES_NOT_MATCH => ERR_REASON_AFFINITY_RULES_NOT_MATCH,
                        ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH => {
                            ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH
                        }
                        ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH => {
                            ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH
                        }
                        other => panic!("{}: unexpected reason {other}", c.name),
                    };
                    (st.code(), reason)
                })
            })
            .collect();
        assert_eq!(got, c.want, "{}", c.name);
    }

    fn securityscan(name: &str, node: &str) -> PodBuilder {
        pod(name).label("service", "securityscan").node_name(node)
    }

    #[test]
    fn filter_follows_kube_scheduler_cases() {
        let cases = vec![
            Case {
                name: "a pod without pod affinity fits every node",
                pod: pod("p"),
                pods: vec![securityscan("e", "node1")],
                want: vec![OK, OK, OK],
            },
            Case {
                name: "affinity In matching an existing pod admits its whole region",
                pod: pod("p").label("security", "S1").spec(
                    "affinity",
                    affinity(vec![term("service", "In", &["securityscan", "value2"], "region")]),
                ),
                pods: vec![securityscan("e", "node1")],
                want: vec![OK, OK, AFF],
            },
            Case {
                name: "affinity NotIn matching an existing pod is satisfied",
                pod: pod("p").label("security", "S1").spec(
                    "affinity",
                    affinity(vec![term("service", "NotIn", &["securityscan3", "value3"], "region")]),
                ),
                pods: vec![securityscan("e", "node1")],
                want: vec![OK, OK, AFF],
            },
            Case {
                name: "an existing pod in another namespace does not satisfy affinity",
                pod: pod("p").label("security", "S1").spec(
                    "affinity",
                    affinity(vec![json!({
                        "labelSelector": {"matchLabels": {"service": "securityscan"}},
                        "namespaces": ["DiffNameSpace"], "topologyKey": "region"})]),
                ),
                pods: vec![securityscan("e", "node1").namespace("ns")],
                want: vec![AFF, AFF, AFF],
            },
            Case {
                name: "affinity whose selector matches no pod, nor the pod itself, is unresolvable",
                pod: pod("p").label("service", "securityscan").spec(
                    "affinity",
                    affinity(vec![term("service", "In", &["antivirusscan", "value2"], "region")]),
                ),
                pods: vec![securityscan("e", "node1")],
                want: vec![AFF, AFF, AFF],
            },
            Case {
                name: "all required affinity terms must match the same pod",
                pod: pod("p").label("security", "S1").spec(
                    "affinity",
                    affinity(vec![
                        term("service", "Exists", &[], "region"),
                        term("service", "In", &["securityscan2"], "region"),
                    ]),
                ),
                pods: vec![securityscan("e", "node1")],
                want: vec![AFF, AFF, AFF],
            },
            Case {
                name: "several affinity terms matched by one pod are satisfied",
                pod: pod("p").label("security", "S1").spec(
                    "affinity",
                    affinity(vec![
                        term("service", "Exists", &[], "region"),
                        term("service", "In", &["securityscan"], "region"),
                    ]),
                ),
                pods: vec![securityscan("e", "node1")],
                want: vec![OK, OK, AFF],
            },
            Case {
                name: "affinity satisfied and anti-affinity not matching any pod",
                pod: pod("p").label("security", "S1").spec(
                    "affinity",
                    both(
                        vec![term("service", "In", &["securityscan"], "region")],
                        vec![term("service", "In", &["antivirusscan"], "zone")],
                    ),
                ),
                pods: vec![securityscan("e", "node1")],
                want: vec![OK, OK, AFF],
            },
            Case {
                name: "anti-affinity matching an existing pod rejects its zone only",
                pod: pod("p").label("security", "S1").spec(
                    "affinity",
                    both(
                        vec![term("service", "In", &["securityscan"], "region")],
                        vec![term("service", "In", &["securityscan"], "zone")],
                    ),
                ),
                pods: vec![securityscan("e", "node1")],
                want: vec![ANTI, OK, AFF],
            },
            Case {
                name: "an existing pod's anti-affinity rejects the incoming pod (symmetry)",
                pod: pod("p").label("service", "securityscan"),
                pods: vec![securityscan("e", "node1")
                    .spec("affinity", anti(vec![term("service", "In", &["securityscan"], "zone")]))],
                want: vec![EXISTING, OK, OK],
            },
            Case {
                name: "an existing pod's anti-affinity that does not match is ignored",
                pod: pod("p").label("service", "securityscan"),
                pods: vec![securityscan("e", "node1").spec(
                    "affinity",
                    anti(vec![term("service", "NotIn", &["securityscan"], "zone")]),
                )],
                want: vec![OK, OK, OK],
            },
            Case {
                name: "symmetry a1: the incoming pod's anti-affinity is checked before the existing pod's",
                pod: pod("p").label("service", "securityscan").spec(
                    "affinity",
                    anti(vec![
                        term("service", "Exists", &[], "zone"),
                        term("security", "Exists", &[], "zone"),
                    ]),
                ),
                pods: vec![pod("e").label("security", "S1").node_name("node1").spec(
                    "affinity",
                    anti(vec![term("security", "Exists", &[], "zone")]),
                )],
                want: vec![ANTI, OK, OK],
            },
            Case {
                name: "symmetry a2: only the existing pod's anti-affinity matches",
                pod: pod("p").label("security", "S1").spec(
                    "affinity",
                    anti(vec![term("security", "Exists", &[], "zone")]),
                ),
                pods: vec![pod("e").label("service", "securityscan").node_name("node1").spec(
                    "affinity",
                    anti(vec![
                        term("service", "Exists", &[], "zone"),
                        term("security", "Exists", &[], "zone"),
                    ]),
                )],
                want: vec![EXISTING, OK, OK],
            },
            Case {
                name: "anti-affinity over region rejects every node of the region",
                pod: pod("p").spec(
                    "affinity",
                    anti(vec![term("service", "Exists", &[], "region")]),
                ),
                pods: vec![securityscan("e", "node2")],
                want: vec![ANTI, ANTI, OK],
            },
            Case {
                name: "the first pod of a self-affine group fits where the topology key exists",
                pod: pod("p").label("app", "db").spec(
                    "affinity",
                    affinity(vec![term("app", "In", &["db"], "region")]),
                ),
                pods: vec![],
                want: vec![OK, OK, OK],
            },
            Case {
                name: "self-affinity does not apply once a matching pod exists elsewhere",
                pod: pod("p").label("app", "db").spec(
                    "affinity",
                    affinity(vec![term("app", "In", &["db"], "region")]),
                ),
                pods: vec![pod("e").label("app", "db").node_name("node3")],
                want: vec![AFF, AFF, OK],
            },
            Case {
                name: "self-affinity still needs the topology key on the node",
                pod: pod("p").label("app", "db").spec(
                    "affinity",
                    affinity(vec![term("app", "In", &["db"], "rack")]),
                ),
                pods: vec![],
                want: vec![AFF, AFF, AFF],
            },
            Case {
                name: "namespaceSelector {} selects pods of every namespace",
                pod: pod("p").spec(
                    "affinity",
                    affinity(vec![json!({
                        "labelSelector": {"matchLabels": {"service": "securityscan"}},
                        "namespaceSelector": {}, "topologyKey": "zone"})]),
                ),
                pods: vec![securityscan("e", "node2").namespace("other")],
                want: vec![AFF, OK, AFF],
            },
            Case {
                name: "namespaceSelector on kubernetes.io/metadata.name selects by name",
                pod: pod("p").spec(
                    "affinity",
                    affinity(vec![json!({
                        "labelSelector": {"matchLabels": {"service": "securityscan"}},
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "other"}},
                        "topologyKey": "zone"})]),
                ),
                pods: vec![
                    securityscan("e", "node2").namespace("other"),
                    securityscan("f", "node3").namespace("third"),
                ],
                want: vec![AFF, OK, AFF],
            },
            Case {
                name: "matchLabelKeys restricts anti-affinity to pods of the same version",
                pod: pod("p").label("app", "web").label("version", "v2").spec(
                    "affinity",
                    anti(vec![json!({
                        "labelSelector": {"matchLabels": {"app": "web"}},
                        "matchLabelKeys": ["version"], "topologyKey": "kubernetes.io/hostname"})]),
                ),
                pods: vec![
                    pod("a").label("app", "web").label("version", "v1").node_name("node1"),
                    pod("b").label("app", "web").label("version", "v2").node_name("node2"),
                ],
                want: vec![OK, ANTI, OK],
            },
            Case {
                name: "mismatchLabelKeys keeps affinity to other tenants' pods",
                pod: pod("p").label("tenant", "a").spec(
                    "affinity",
                    affinity(vec![json!({
                        "labelSelector": {},
                        "mismatchLabelKeys": ["tenant"], "topologyKey": "kubernetes.io/hostname"})]),
                ),
                pods: vec![
                    pod("a").label("tenant", "a").node_name("node1"),
                    pod("b").label("tenant", "b").node_name("node2"),
                ],
                want: vec![AFF, OK, AFF],
            },
        ];
        for c in &cases {
            run(c);
        }
    }

    #[test]
    fn pre_filter_skips_pods_with_nothing_to_check() {
        let cx = cluster(&nodes(), &[securityscan("e", "node1")]);
        let pl = InterPodAffinity::new(None).unwrap();
        let mut state = CycleState::default();
        assert!(pl
            .pre_filter(&cx, &mut state, &pod("p").build_info())
            .is_skip());
        assert!(state.inter_pod_affinity.is_none());
    }

    #[test]
    fn invalid_selectors_fail_pre_filter_as_unresolvable() {
        let cx = cluster(&nodes(), &[]);
        let pl = InterPodAffinity::new(None).unwrap();
        let mut state = CycleState::default();
        let p = pod("p")
            .spec(
                "affinity",
                affinity(vec![term("service", "Matches", &["x"], "region")]),
            )
            .build_info();
        let st = pl.pre_filter(&cx, &mut state, &p);
        assert_eq!(st.code(), Code::UnschedulableAndUnresolvable);
        assert!(st.message().starts_with("parsing pod: "), "{st:?}");
    }

    #[test]
    fn filter_without_pre_filter_state_is_an_error() {
        let cx = cluster(&nodes(), &[]);
        let pl = InterPodAffinity::new(None).unwrap();
        let n = node_with(&cx, "node1");
        let st = pl.filter(&cx, &CycleState::default(), &pod("p").build_info(), n);
        assert_eq!(st.code(), Code::Error);
    }
}
