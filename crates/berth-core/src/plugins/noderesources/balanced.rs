//! NodeResourcesBalancedAllocation: prefer nodes where the pod leaves resource usage
//! fractions close to each other.
//!
//! As kube-scheduler (`useRequested: true`), it uses the real requests of the pod and of the
//! node's pods (no 100m/200Mi defaults), caps each fraction at 1 and scores
//! `(1 - std) * 100`, where the standard deviation of two fractions is `|f1 - f2| / 2`.
//! Pods that request none of the configured resources are skipped at PreScore, so a flood of
//! best-effort pods does not pile onto one node (kubernetes#129138).
//! Capacity held by reservations counts as used, and an owner gets back what its matched
//! reservations hold, as in NodeResourcesFit.

use crate::cache::Cluster;
use crate::framework::config::ConfigError;
use crate::framework::plugin::score_each;
use crate::framework::{CycleState, Plugin, Points, Status, MAX_NODE_SCORE};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::plugins::args::decode;
use smallvec::SmallVec;

use crate::resources::{ResourceId, ResourceName, ResourceNames, Resources, MAX_RESOURCES};

use super::args::BalancedAllocationArgs;
use super::scoring::is_scalar;

/// The NodeResourcesBalancedAllocation plugin.
#[derive(Debug)]
pub struct BalancedAllocation {
    resources: Vec<ResourceName>,
}

impl BalancedAllocation {
    /// Builds the plugin from `NodeResourcesBalancedAllocationArgs`.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        let args = decode::<BalancedAllocationArgs>(args)?.defaulted();
        args.validate()?;
        Ok(Self {
            resources: args
                .resources
                .into_iter()
                .map(|r| ResourceName::new(r.name))
                .collect(),
        })
    }

    fn ids<'a>(
        &'a self,
        names: &'a ResourceNames,
    ) -> impl Iterator<Item = ResourceId> + Clone + 'a {
        self.resources.iter().filter_map(|n| n.id(names))
    }

    /// The configured resources that count for `pod`, with its requests, worked out once
    /// per cycle: scalar resources the pod does not request are left out.
    fn terms(&self, names: &ResourceNames, pod: &PodInfo) -> SmallVec<[(ResourceId, i64); 4]> {
        self.ids(names)
            .map(|id| (id, pod.requests[id]))
            .filter(|&(id, want)| !(want == 0 && is_scalar(id)))
            .collect()
    }

    /// The usage fraction of one term on `node`, capped at 1; `None` when the node does
    /// not have the resource.
    #[inline(always)]
    fn fraction(
        id: ResourceId,
        want: i64,
        node: &NodeInfo,
        restored: Option<&Resources>,
    ) -> Option<f64> {
        let alloc = node.allocatable[id];
        if alloc == 0 {
            return None;
        }
        let mut used = node.used()[id].saturating_add(want);
        if let Some(back) = restored {
            used = used.saturating_sub(back[id]).max(0);
        }
        Some((used as f64 / alloc as f64).min(1.0))
    }

    /// The usage fraction of each of `terms` the node has, capped at 1, written into `out`
    /// in configuration order (a stack array: nothing is allocated per node); returns how
    /// many.
    #[inline]
    fn fractions(
        terms: &[(ResourceId, i64)],
        node: &NodeInfo,
        restored: Option<&Resources>,
        out: &mut [f64],
    ) -> usize {
        let mut n = 0;
        for &(id, want) in terms {
            let Some(f) = Self::fraction(id, want, node, restored) else {
                continue;
            };
            // More configured names than slots can only repeat a slot: the extra ones
            // are dropped rather than indexed out of bounds.
            if let Some(slot) = out.get_mut(n) {
                *slot = f;
                n += 1;
            }
        }
        n
    }

    /// The score from the fractions (same operations in the same order as
    /// kube-scheduler, so the same floats).
    #[inline(always)]
    fn score_terms(
        terms: &[(ResourceId, i64)],
        node: &NodeInfo,
        restored: Option<&Resources>,
    ) -> i64 {
        // The default two resources without a buffer: the standard deviation of two
        // fractions is half their distance (one fraction or none: 0).
        if let &[a, b] = terms {
            return Self::score_two(a, b, node, restored);
        }
        // A buffer as small as the usual pod needs: zeroing all MAX_RESOURCES slots per
        // node was a tenth of this function.
        if terms.len() <= 4 {
            Self::score_in::<4>(terms, node, restored)
        } else {
            Self::score_in::<MAX_RESOURCES>(terms, node, restored)
        }
    }

    /// [`Self::score_terms`] of two terms.
    #[inline(always)]
    fn score_two(
        (a, wa): (ResourceId, i64),
        (b, wb): (ResourceId, i64),
        node: &NodeInfo,
        restored: Option<&Resources>,
    ) -> i64 {
        Self::of_two(
            Self::fraction(a, wa, node, restored),
            Self::fraction(b, wb, node, restored),
        )
    }

    /// [`Self::score_two`] with nothing given back and requests of at least 0 (any valid
    /// pod's): the sum can then only saturate upwards, a cheaper check than saturating
    /// either way.
    #[inline(always)]
    fn score_two_plain(a: (ResourceId, i64), b: (ResourceId, i64), node: &NodeInfo) -> i64 {
        let fraction = |(id, want): (ResourceId, i64)| {
            let alloc = node.allocatable[id];
            let used = node.used()[id].checked_add(want).unwrap_or(i64::MAX);
            (alloc != 0).then(|| (used as f64 / alloc as f64).min(1.0))
        };
        Self::of_two(fraction(a), fraction(b))
    }

    /// The score from two fractions: the standard deviation of two is half their distance
    /// (of one or none, 0).
    #[inline(always)]
    fn of_two(fa: Option<f64>, fb: Option<f64>) -> i64 {
        let std = match (fa, fb) {
            (Some(fa), Some(fb)) => ((fa - fb) / 2.0).abs(),
            _ => 0.0,
        };
        ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
    }

    #[inline(always)]
    fn score_in<const N: usize>(
        terms: &[(ResourceId, i64)],
        node: &NodeInfo,
        restored: Option<&Resources>,
    ) -> i64 {
        let mut buf = [0.0f64; N];
        let n = Self::fractions(terms, node, restored, &mut buf);
        let fractions = &buf[..n];
        let std = match fractions {
            [] | [_] => 0.0,
            [a, b] => ((a - b) / 2.0).abs(),
            _ => {
                let sum = fractions.iter().fold(0.0f64, |s, f| s + f);
                let mean = sum / n as f64;
                (fractions
                    .iter()
                    .map(|f| (f - mean) * (f - mean))
                    .sum::<f64>()
                    / n as f64)
                    .sqrt()
            }
        };
        ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
    }
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        super::super::names::NODE_RESOURCES_BALANCED_ALLOCATION
    }

    fn points(&self) -> Points {
        Points::PRE_SCORE | Points::SCORE
    }

    fn pre_score(
        &self,
        cx: &Cluster,
        _state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[NodeIdx],
    ) -> Status {
        if self.ids(&cx.cache.names).all(|id| pod.requests[id] == 0) {
            Status::skip()
        } else {
            Status::success()
        }
    }

    fn score(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let restored = state
            .reservation
            .as_ref()
            .and_then(|r| r.restored(pod, node.idx));
        Self::score_terms(&self.terms(&cx.cache.names, pod), node, restored)
    }

    /// [`Plugin::score`] over every feasible node, with the pod's terms worked out once.
    fn score_nodes(
        &self,
        cx: &Cluster,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[NodeIdx],
        out: &mut Vec<i64>,
    ) {
        let terms = self.terms(&cx.cache.names, pod);
        // Nodes where nothing is given back: the default two resources are copied into the
        // loop, which then keeps them in registers rather than reading them (and the list's
        // length) per node.
        let plain = |nodes: &[NodeIdx], out: &mut Vec<i64>| match terms.as_slice() {
            &[a, b] if a.1 >= 0 && b.1 >= 0 => score_each(cx, nodes, out, move |node| {
                Self::score_two_plain(a, b, node)
            }),
            _ => score_each(cx, nodes, out, |node| Self::score_terms(&terms, node, None)),
        };
        // As in NodeResourcesFit: the common loop asks nothing about reservations per node.
        match super::gives_back(state) {
            None => plain(nodes, out),
            Some(r) => {
                // Only the leading nodes can give anything back.
                let (asked, rest) = nodes.split_at(r.restoring_prefix(nodes));
                score_each(cx, asked, out, |node| {
                    Self::score_terms(&terms, node, r.restored(pod, node.idx))
                });
                plain(rest, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testing::{node, pod, NodeBuilder, PodBuilder};
    use serde_json::{json, Value};

    fn sized(name: &str, cpu: &str, mem: &str) -> NodeBuilder {
        node(name).alloc("cpu", cpu).alloc("memory", mem)
    }

    fn cpu_mem(cpu: &str, mem: &str) -> PodBuilder {
        pod("p").req("cpu", cpu).req("memory", mem)
    }

    fn scores(
        args: Value,
        p: PodBuilder,
        nodes: &[(NodeBuilder, Vec<PodBuilder>)],
    ) -> (bool, Vec<i64>) {
        let mut cx = Cluster::default();
        let infos: Vec<NodeInfo> = nodes
            .iter()
            .map(|(b, existing)| {
                let mut n = b.build_info_with(&mut cx.cache.names);
                for (i, e) in existing.iter().enumerate() {
                    let e = e
                        .clone()
                        .meta("name", json!(format!("e{i}")))
                        .node_name("n");
                    n.add_pod(Arc::new(e.build_info_with(&mut cx.cache.names)));
                }
                n
            })
            .collect();
        let p = p.build_info_with(&mut cx.cache.names);
        let pl = BalancedAllocation::new(Some(&args)).unwrap();
        let mut st = CycleState::default();
        let skip = pl.pre_score(&cx, &mut st, &p, &[]).is_skip();
        (
            skip,
            infos.iter().map(|n| pl.score(&cx, &st, &p, n)).collect(),
        )
    }

    #[test]
    fn score_is_one_minus_the_std_of_usage_fractions() {
        let gpu = json!({"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": "example.com/gpu"}]});
        let cases: Vec<(
            &str,
            Value,
            PodBuilder,
            Vec<(NodeBuilder, Vec<PodBuilder>)>,
            Vec<i64>,
        )> = vec![
            (
                "differently sized nodes: |0.75 - 0.5| / 2 and 0",
                json!({}),
                cpu_mem("3", "5000Mi"),
                vec![
                    (sized("a", "4", "10000Mi"), vec![]),
                    (sized("b", "6", "10000Mi"), vec![]),
                ],
                vec![87, 100],
            ),
            (
                "existing pods' real requests count: 0.7 and 0.35",
                json!({}),
                cpu_mem("1", "2000Mi"),
                vec![(
                    sized("a", "10", "20000Mi"),
                    vec![pod("x").req("cpu", "3"), cpu_mem("3", "5000Mi")],
                )],
                vec![82],
            ),
            (
                "pods without requests add nothing (no 100m/200Mi defaults)",
                json!({}),
                cpu_mem("1", "2500Mi"),
                vec![(sized("a", "4", "10000Mi"), vec![pod("x"), pod("y")])],
                vec![100],
            ),
            (
                "fractions are capped at 1",
                json!({}),
                cpu_mem("8", "5000Mi"),
                vec![(sized("a", "4", "10000Mi"), vec![])],
                vec![75],
            ),
            (
                "three resources use the full standard deviation",
                gpu.clone(),
                cpu_mem("3", "5000Mi").req("example.com/gpu", "1"),
                vec![(
                    sized("a", "4", "10000Mi").alloc("example.com/gpu", "4"),
                    vec![],
                )],
                vec![79],
            ),
            (
                "an extended resource the pod does not request is left out",
                gpu,
                cpu_mem("3", "5000Mi"),
                vec![(
                    sized("a", "4", "10000Mi").alloc("example.com/gpu", "4"),
                    vec![],
                )],
                vec![87],
            ),
            (
                "one resource with capacity: std 0",
                json!({}),
                cpu_mem("3", "5000Mi"),
                vec![(node("a").alloc("cpu", "4"), vec![])],
                vec![100],
            ),
            (
                "no resource with capacity: std 0",
                json!({}),
                cpu_mem("3", "5000Mi"),
                vec![(node("a"), vec![])],
                vec![100],
            ),
        ];
        for (name, args, p, nodes, want) in cases {
            let (skip, got) = scores(args, p, &nodes);
            assert!(!skip, "{name}");
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn best_effort_pods_skip_scoring() {
        let nodes = vec![(sized("a", "4", "10000Mi"), vec![])];
        assert!(scores(json!({}), pod("p"), &nodes).0);
        // Requests outside the configured resources do not count either.
        assert!(scores(json!({}), pod("p").req("example.com/gpu", "1"), &nodes).0);
        assert!(!scores(json!({}), pod("p").req("memory", "1Gi"), &nodes).0);
    }

    #[test]
    fn reserved_capacity_counts_as_used() {
        let mut cx = Cluster::default();
        let mut n = sized("a", "4", "10000Mi").build_info_with(&mut cx.cache.names);
        n.reserved[ResourceId::CPU] = 1000;
        n.touch();
        let p = cpu_mem("1", "5000Mi").build_info_with(&mut cx.cache.names);
        let pl = BalancedAllocation::new(None).unwrap();
        // cpu (1000 + 1000) / 4000 = 0.5, memory 0.5.
        assert_eq!(pl.score(&cx, &CycleState::default(), &p, &n), 100);
    }

    #[test]
    fn args_need_distinct_resources_of_weight_one() {
        let e =
            BalancedAllocation::new(Some(&json!({"resources": [{"name": "cpu", "weight": 2}]})))
                .unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.message.as_str()),
            ("resources[0].weight", "Invalid value: 2: must be 1")
        );
        let e = BalancedAllocation::new(Some(
            &json!({"resources": [{"name": "cpu"}, {"name": "cpu"}]}),
        ))
        .unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.message.as_str()),
            ("resources[1].name", "Duplicate value: \"cpu\"")
        );
        let pl = BalancedAllocation::new(Some(&json!({"resources": []}))).unwrap();
        let names: Vec<&str> = pl.resources.iter().map(ResourceName::as_str).collect();
        assert_eq!(names, ["cpu", "memory"]);
    }
}
