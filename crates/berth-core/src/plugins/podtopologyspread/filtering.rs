//! PodTopologySpread PreFilter and Filter for `whenUnsatisfiable: DoNotSchedule`
//! (kube-scheduler's `podtopologyspread/filtering.go`).
//!
//! PreFilter counts matching pods per topology domain over the nodes that have every
//! constraint's key and pass the constraint's node inclusion policies; Filter admits a node
//! when `count(domain) + (pod matches itself) - global minimum <= maxSkew`, where the
//! global minimum is 0 while fewer than `minDomains` domains exist.

use std::sync::Arc;

use crate::cache::domain_counts::DomainCounts;

use berth_api::k8s_openapi::api::core::v1::TopologySpreadConstraint;

use crate::cache::Cluster;
use crate::framework::Status;
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;

use super::common::{
    constraints_for, count_visible, has_all_keys, Action, Constraint, RequiredNodeAffinity,
};

/// kube-scheduler's `ErrReasonConstraintsNotMatch`.
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
/// kube-scheduler's `ErrReasonNodeLabelNotMatch`.
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// What PreFilter computed (`preFilterState`), per hard constraint.
#[derive(Debug, Clone, Default)]
pub struct State {
    constraints: Vec<Constraint>,
    /// Whether the incoming pod matches each constraint's selector.
    self_match: Vec<bool>,
    /// Topology value -> matching pods, per constraint (eligible domains only). Shared
    /// with the cluster's remembered counts; copied on write.
    counts: Vec<Arc<DomainCounts>>,
    /// The smallest count over the eligible domains, per constraint.
    min_match: Vec<i64>,
    /// The pod's required node affinity, for the inclusion policies of the PreFilter
    /// extensions ([`update_with_pod`]).
    required: RequiredNodeAffinity,
}

impl State {
    /// The global minimum for skew, 0 while there are fewer domains than `minDomains`.
    fn min_match(&self, i: usize) -> i64 {
        if (self.counts[i].len() as i64) < self.constraints[i].min_domains {
            0
        } else {
            self.min_match[i]
        }
    }
}

/// PreFilter: `Ok(None)` when the pod has no hard constraint (Skip).
pub(super) fn pre_filter(
    defaults: &[TopologySpreadConstraint],
    cx: &Cluster,
    state: &crate::framework::CycleState,
    pod: &PodInfo,
) -> Result<Option<State>, Status> {
    let constraints = constraints_for(pod, defaults, Action::DoNotSchedule)
        .map_err(|e| Status::error(format!("get constraints from pod: {e}")))?;
    if constraints.is_empty() {
        return Ok(None);
    }
    let required = RequiredNodeAffinity::of(pod);
    let counts = if super::counting::applies(state, &constraints, &required) {
        let keys = super::counting::all_keys(&constraints);
        super::counting::remembered(cx, pod, &constraints, &keys)
    } else {
        recount(cx, state, pod, &constraints, &required)
    };
    let min_match = counts
        .iter()
        .map(|m| m.values().copied().min().unwrap_or(i64::from(i32::MAX)))
        .collect();
    Ok(Some(State {
        self_match: constraints.iter().map(|c| c.selects(&pod.labels)).collect(),
        constraints,
        counts,
        min_match,
        required,
    }))
}

/// PreFilter extensions (`AddPod`/`RemovePod`, kube-scheduler's `updateWithPod`): counts
/// `existing`, added to (`delta` 1) or removed from (-1) `node`, into the pod's per-domain
/// counts as PreFilter counts every pod ([`count_visible`]), and keeps each constraint's
/// minimum, so preemption's dry run need not recount the whole cluster. A domain count
/// shared with the cluster's remembered counts is copied on its first change.
pub(super) fn update_with_pod(
    state: &mut crate::framework::CycleState,
    pod: &PodInfo,
    existing: &PodInfo,
    node: &NodeInfo,
    delta: i64,
) {
    // Taken out for the while, so that visibility can read the rest of the state.
    let Some(mut s) = state.pod_topology_spread.take() else {
        return;
    };
    if has_all_keys(&node.labels, &s.constraints) {
        let ns = &*pod.key.namespace;
        for i in 0..s.constraints.len() {
            let c = &s.constraints[i];
            if !c.includes_node(pod, node, &s.required) {
                continue;
            }
            let Some(value) = node.labels.get(&c.topology_key) else {
                continue;
            };
            if !counts_visible(state, node, existing, c.selector.as_ref(), ns) {
                continue;
            }
            let counts = Arc::make_mut(&mut s.counts[i]);
            let (before, after) = match counts.get_mut(value.as_str()) {
                Some(n) => {
                    *n += delta;
                    (*n - delta, *n)
                }
                None => {
                    counts.insert(value.clone(), delta);
                    (0, delta)
                }
            };
            let min = &mut s.min_match[i];
            if after < *min {
                *min = after;
            } else if before == *min && after > before {
                *min = counts
                    .values()
                    .copied()
                    .min()
                    .unwrap_or(i64::from(i32::MAX));
            }
        }
    }
    state.pod_topology_spread = Some(s);
}

/// Whether [`count_visible`] counts `existing` on `node`: one pod's share of it.
fn counts_visible(
    state: &crate::framework::CycleState,
    node: &NodeInfo,
    existing: &PodInfo,
    selector: Option<&crate::model::selector::Selector>,
    ns: &str,
) -> bool {
    let Some(sel) = selector.filter(|s| !s.is_empty()) else {
        return false;
    };
    if existing.terminating || *existing.key.namespace != *ns || !sel.matches(&existing.labels) {
        return false;
    }
    !(existing.is_reserve_pod() && crate::plugins::reservation::hidden(state, existing, node.idx))
}

/// The counts by a walk over every pod of every node (`calPreFilterState`), for pods the
/// remembered counts do not answer ([`super::counting::applies`]).
pub(super) fn recount(
    cx: &Cluster,
    state: &crate::framework::CycleState,
    pod: &PodInfo,
    constraints: &[Constraint],
    required: &RequiredNodeAffinity,
) -> Vec<Arc<DomainCounts>> {
    let ns = &*pod.key.namespace;
    let mut counts: Vec<DomainCounts> = vec![DomainCounts::default(); constraints.len()];
    for node in cx.cache.nodes() {
        if !has_all_keys(&node.labels, constraints) {
            continue;
        }
        for (i, c) in constraints.iter().enumerate() {
            if !c.includes_node(pod, node, required) {
                continue;
            }
            let Some(value) = node.labels.get(&c.topology_key) else {
                continue;
            };
            let n = count_visible(state, node, c.selector.as_ref(), ns);
            match counts[i].get_mut(value.as_str()) {
                Some(sum) => *sum += n,
                None => {
                    counts[i].insert(value.clone(), n);
                }
            }
        }
    }
    counts.into_iter().map(Arc::new).collect()
}

/// Filter: a node without a constraint's key is unresolvable; a skew above `maxSkew` is
/// unschedulable (preemption may lower the count).
pub(super) fn filter(s: &State, node: &NodeInfo) -> Status {
    for (i, c) in s.constraints.iter().enumerate() {
        let Some(value) = node.labels.get(&c.topology_key) else {
            return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
        };
        let matched = s.counts[i].get(value.as_str()).copied().unwrap_or(0);
        let skew = matched + i64::from(s.self_match[i]) - s.min_match(i);
        if skew > c.max_skew {
            return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
        }
    }
    Status::success()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{Code, CycleState, Plugin};
    use crate::plugins::interpodaffinity::test_util::{cluster, node_with};
    use crate::plugins::podtopologyspread::PodTopologySpread;
    use crate::testing::{node, pod, NodeBuilder, PodBuilder};
    use serde_json::{json, Value};

    /// A hard constraint on `key` selecting pods with label `foo` (upstream `fooSelector`).
    fn hard(skew: i32, key: &str) -> Value {
        hard_with(skew, key, json!({}))
    }

    /// A hard constraint with extra fields (`minDomains`, policies...).
    fn hard_with(skew: i32, key: &str, extra: Value) -> Value {
        let mut c = json!({"maxSkew": skew, "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}});
        if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(extra.clone());
        }
        c
    }

    fn spread(p: PodBuilder, constraints: Vec<Value>) -> PodBuilder {
        p.spec("topologySpreadConstraints", json!(constraints))
    }

    /// node-a, node-b in zone1; node-x, node-y in zone2; label `node` = name.
    fn four_nodes() -> Vec<NodeBuilder> {
        [
            ("node-a", "zone1"),
            ("node-b", "zone1"),
            ("node-x", "zone2"),
            ("node-y", "zone2"),
        ]
        .iter()
        .map(|(n, z)| node(n).label("zone", z).label("node", n))
        .collect()
    }

    fn foo(name: &str, node: &str) -> PodBuilder {
        pod(name).label("foo", "").node_name(node)
    }

    /// Matching pods spread 2/1/0/3 over node-a/b/x/y.
    fn spread_2_1_0_3() -> Vec<PodBuilder> {
        vec![
            foo("p-a1", "node-a"),
            foo("p-a2", "node-a"),
            foo("p-b1", "node-b"),
            foo("p-y1", "node-y"),
            foo("p-y2", "node-y"),
            foo("p-y3", "node-y"),
        ]
    }

    const OK: Option<Code> = None;
    const NO: Option<Code> = Some(Code::Unschedulable);
    const MISSING: Option<Code> = Some(Code::UnschedulableAndUnresolvable);

    struct Case {
        name: &'static str,
        pod: PodBuilder,
        nodes: Vec<NodeBuilder>,
        pods: Vec<PodBuilder>,
        want: Vec<Option<Code>>,
    }

    fn run(c: &Case) {
        let cx = cluster(&c.nodes, &c.pods);
        let p = c.pod.build_info();
        let pl = PodTopologySpread::new(None).unwrap();
        let mut state = CycleState::default();
        let pre = pl.pre_filter(&cx, &mut state, &p);
        assert!(pre.is_success(), "{}: {pre:?}", c.name);
        let got: Vec<Option<Code>> = cx
            .cache
            .nodes()
            .map(|n| {
                let st = pl.filter(&cx, &state, &p, n);
                if st.is_success() {
                    return None;
                }
                let want_reason = match st.code() {
                    Code::Unschedulable => ERR_REASON_CONSTRAINTS_NOT_MATCH,
                    _ => ERR_REASON_NODE_LABEL_NOT_MATCH,
                };
                assert_eq!(st.message(), want_reason, "{}: {}", c.name, n.name);
                Some(st.code())
            })
            .collect();
        assert_eq!(got, c.want, "{}", c.name);
    }

    #[test]
    fn filter_follows_kube_scheduler_cases() {
        let foo_pod = || pod("p").label("foo", "");
        let cases = vec![
            Case {
                name: "no existing pods",
                pod: spread(foo_pod(), vec![hard(1, "zone")]),
                nodes: four_nodes(),
                pods: vec![],
                want: vec![OK, OK, OK, OK],
            },
            Case {
                name: "no existing pods, incoming pod doesn't match itself",
                pod: spread(
                    foo_pod(),
                    vec![json!({"maxSkew": 1, "topologyKey": "zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchExpressions": [{"key": "bar", "operator": "Exists"}]}})],
                ),
                nodes: four_nodes(),
                pods: vec![],
                want: vec![OK, OK, OK, OK],
            },
            Case {
                name: "existing pods in a different namespace do not count",
                pod: spread(foo_pod(), vec![hard(1, "zone")]),
                nodes: four_nodes(),
                pods: vec![
                    foo("p-a1", "node-a").namespace("ns1"),
                    foo("p-b1", "node-a").namespace("ns2"),
                    foo("p-x1", "node-x"),
                    foo("p-y1", "node-y"),
                ],
                want: vec![OK, OK, NO, NO],
            },
            Case {
                name: "pods spread across zones as 3/3, all nodes fit",
                pod: spread(foo_pod(), vec![hard(1, "zone")]),
                nodes: four_nodes(),
                pods: spread_2_1_0_3(),
                want: vec![OK, OK, OK, OK],
            },
            Case {
                name: "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
                pod: spread(foo_pod(), vec![hard(1, "zone")]),
                nodes: vec![
                    node("node-a").label("zone", "zone1").label("node", "node-a"),
                    node("node-b").label("zon", "zone1").label("node", "node-b"),
                    node("node-x").label("zone", "zone2").label("node", "node-x"),
                    node("node-y").label("zone", "zone2").label("node", "node-y"),
                ],
                pods: vec![
                    foo("p-a1", "node-a"),
                    foo("p-b1", "node-b"),
                    foo("p-x1", "node-x"),
                    foo("p-y1", "node-y"),
                ],
                want: vec![OK, MISSING, NO, NO],
            },
            Case {
                name: "pod cannot be scheduled as all nodes don't have label 'rack'",
                pod: spread(foo_pod(), vec![hard(1, "rack")]),
                nodes: four_nodes(),
                pods: vec![],
                want: vec![MISSING, MISSING, MISSING, MISSING],
            },
            Case {
                name: "pods spread across nodes as 2/1/0/3, only node-x fits",
                pod: spread(foo_pod(), vec![hard(1, "node")]),
                nodes: four_nodes(),
                pods: spread_2_1_0_3(),
                want: vec![NO, NO, OK, NO],
            },
            Case {
                name: "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
                pod: spread(foo_pod(), vec![hard(2, "node")]),
                nodes: four_nodes(),
                pods: spread_2_1_0_3(),
                want: vec![NO, OK, OK, NO],
            },
            Case {
                name: "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
                pod: spread(pod("p").label("bar", ""), vec![hard(1, "node")]),
                nodes: four_nodes(),
                pods: spread_2_1_0_3(),
                want: vec![NO, OK, OK, NO],
            },
            Case {
                name: "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
                pod: spread(foo_pod(), vec![hard(1, "node")]).spec(
                    "affinity",
                    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "node", "operator": "In", "values": ["node-a", "node-y"]}]}]}}}),
                ),
                nodes: four_nodes(),
                pods: spread_2_1_0_3(),
                // node-b and node-x are not counted; NodeAffinity's own Filter rejects them.
                want: vec![OK, OK, OK, NO],
            },
            Case {
                name: "nodeAffinityPolicy Ignore counts every node",
                pod: spread(
                    foo_pod(),
                    vec![hard_with(1, "node", json!({"nodeAffinityPolicy": "Ignore"}))],
                )
                .spec("nodeSelector", json!({"node": "node-a"})),
                nodes: four_nodes(),
                pods: spread_2_1_0_3(),
                want: vec![NO, NO, OK, NO],
            },
            Case {
                name: "nodeTaintsPolicy Honor leaves out tainted nodes",
                pod: spread(
                    foo_pod(),
                    vec![hard_with(1, "node", json!({"nodeTaintsPolicy": "Honor"}))],
                ),
                nodes: vec![
                    node("node-a").label("node", "node-a"),
                    node("node-b").label("node", "node-b"),
                    node("node-c")
                        .label("node", "node-c")
                        .taint("node.kubernetes.io/unschedulable", "", "NoSchedule"),
                ],
                pods: vec![foo("p-a1", "node-a"), foo("p-b1", "node-b")],
                // Without node-c (0 pods) the minimum is 1, so node-a and node-b fit.
                want: vec![OK, OK, OK],
            },
            Case {
                name: "nodeTaintsPolicy Ignore (default) counts tainted nodes",
                pod: spread(foo_pod(), vec![hard(1, "node")]),
                nodes: vec![
                    node("node-a").label("node", "node-a"),
                    node("node-b").label("node", "node-b"),
                    node("node-c")
                        .label("node", "node-c")
                        .taint("node.kubernetes.io/unschedulable", "", "NoSchedule"),
                ],
                pods: vec![foo("p-a1", "node-a"), foo("p-b1", "node-b")],
                want: vec![NO, NO, OK],
            },
            Case {
                name: "terminating Pods should be excluded",
                pod: spread(foo_pod(), vec![hard(1, "node")]),
                nodes: vec![
                    node("node-a").label("node", "node-a"),
                    node("node-b").label("node", "node-b"),
                ],
                pods: vec![
                    foo("p-a", "node-a").meta("deletionTimestamp", json!("2024-01-01T00:00:00Z")),
                    foo("p-b", "node-b"),
                ],
                want: vec![OK, NO],
            },
            Case {
                name: "two constraints on zone and node, spreads = [3/3, 2/1/0/3]",
                pod: spread(foo_pod(), vec![hard(1, "zone"), hard(1, "node")]),
                nodes: four_nodes(),
                pods: spread_2_1_0_3(),
                want: vec![NO, NO, OK, NO],
            },
            Case {
                name: "two constraints on zone and node, spreads = [3/4, 2/1/0/4]",
                pod: spread(foo_pod(), vec![hard(1, "zone"), hard(1, "node")]),
                nodes: four_nodes(),
                pods: {
                    let mut p = spread_2_1_0_3();
                    p.push(foo("p-y4", "node-y"));
                    p
                },
                // zone1 (3) fits the zone constraint only; node-x (0) only the node one.
                want: vec![NO, NO, NO, NO],
            },
            Case {
                name: "two constraints with different selectors, node-b fits",
                pod: spread(
                    pod("p").label("foo", "").label("bar", ""),
                    vec![
                        hard(1, "zone"),
                        json!({"maxSkew": 1, "topologyKey": "node",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchExpressions": [{"key": "bar", "operator": "Exists"}]}}),
                    ],
                ),
                nodes: vec![
                    node("node-a").label("zone", "zone1").label("node", "node-a"),
                    node("node-b").label("zone", "zone1").label("node", "node-b"),
                    node("node-y").label("zone", "zone2").label("node", "node-y"),
                ],
                pods: vec![
                    foo("p-a1", "node-a"),
                    pod("p-b1").label("bar", "").node_name("node-b"),
                    foo("p-y1", "node-y"),
                    pod("p-y2").label("foo", "").label("bar", "").node_name("node-y"),
                ],
                // zone: 1/2 -> zone1 fits; node (bar): 0/1/1 -> node-a fits.
                want: vec![OK, NO, NO],
            },
            Case {
                name: "fewer domains than minDomains makes the global minimum 0",
                pod: spread(foo_pod(), vec![hard_with(1, "node", json!({"minDomains": 3}))]),
                nodes: vec![
                    node("node-a").label("node", "node-a"),
                    node("node-b").label("node", "node-b"),
                ],
                pods: vec![foo("p-a1", "node-a"), foo("p-a2", "node-a"), foo("p-b1", "node-b")],
                want: vec![NO, NO],
            },
            Case {
                name: "enough domains for minDomains keeps the real minimum",
                pod: spread(foo_pod(), vec![hard_with(1, "node", json!({"minDomains": 2}))]),
                nodes: vec![
                    node("node-a").label("node", "node-a"),
                    node("node-b").label("node", "node-b"),
                ],
                pods: vec![foo("p-a1", "node-a"), foo("p-a2", "node-a"), foo("p-b1", "node-b")],
                want: vec![NO, OK],
            },
            Case {
                name: "matchLabelKeys counts only pods of the same revision",
                pod: spread(
                    foo_pod().label("rev", "2"),
                    vec![hard_with(1, "node", json!({"matchLabelKeys": ["rev"]}))],
                ),
                nodes: vec![
                    node("node-a").label("node", "node-a"),
                    node("node-b").label("node", "node-b"),
                ],
                pods: vec![
                    foo("p-a1", "node-a").label("rev", "1"),
                    foo("p-a2", "node-a").label("rev", "1"),
                    foo("p-b1", "node-b").label("rev", "2"),
                ],
                want: vec![OK, NO],
            },
        ];
        for c in &cases {
            run(c);
        }
    }

    #[test]
    fn pre_filter_skips_pods_without_hard_constraints() {
        let cx = cluster(&four_nodes(), &[]);
        let pl = PodTopologySpread::new(None).unwrap();
        let mut state = CycleState::default();
        let soft = spread(
            pod("p").label("foo", ""),
            vec![
                json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {}}),
            ],
        );
        assert!(pl.pre_filter(&cx, &mut state, &soft.build_info()).is_skip());
        assert!(pl
            .pre_filter(&cx, &mut state, &pod("q").build_info())
            .is_skip());
    }

    #[test]
    fn list_default_constraints_apply_to_controller_owned_pods() {
        let args = json!({"defaultingType": "List", "defaultConstraints": [
            {"maxSkew": 1, "topologyKey": "node", "whenUnsatisfiable": "DoNotSchedule"}]});
        let pl = PodTopologySpread::new(Some(&args)).unwrap();
        let owner = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
            "uid": "u", "controller": true}]);
        let web = |name: &str, node: &str| {
            pod(name)
                .label("app", "web")
                .meta("ownerReferences", owner.clone())
                .node_name(node)
        };
        let cx = cluster(
            &four_nodes(),
            &[
                web("w1", "node-a"),
                web("w2", "node-b"),
                web("w3", "node-x"),
            ],
        );
        let p = pod("p")
            .label("app", "web")
            .meta("ownerReferences", owner.clone())
            .build_info();
        let mut state = CycleState::default();
        assert!(pl.pre_filter(&cx, &mut state, &p).is_success());
        let fits: Vec<bool> = cx
            .cache
            .nodes()
            .map(|n| pl.filter(&cx, &state, &p, n).is_success())
            .collect();
        assert_eq!(fits, vec![false, false, false, true]);
        let unowned = pod("q").label("app", "web").build_info();
        assert!(pl.pre_filter(&cx, &mut state, &unowned).is_skip());
    }

    #[test]
    fn invalid_selectors_fail_pre_filter_with_an_error() {
        let cx = cluster(&four_nodes(), &[]);
        let pl = PodTopologySpread::new(None).unwrap();
        let p = spread(
            pod("p"),
            vec![
                json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Maybe"}]}}),
            ],
        );
        let st = pl.pre_filter(&cx, &mut CycleState::default(), &p.build_info());
        assert_eq!(st.code(), Code::Error);
        assert!(
            st.message().starts_with(
                "get constraints from pod: obtaining pod's hard topology spread constraints: "
            ),
            "{st:?}"
        );
    }

    #[test]
    fn filter_without_pre_filter_state_is_an_error() {
        let cx = cluster(&four_nodes(), &[]);
        let pl = PodTopologySpread::new(None).unwrap();
        let st = pl.filter(
            &cx,
            &CycleState::default(),
            &pod("p").build_info(),
            node_with(&cx, "node-a"),
        );
        assert_eq!(st.code(), Code::Error);
    }
}
