//! What Filter and Score share (kube-scheduler's `podtopologyspread/common.go`): the
//! parsed constraint, which nodes a constraint counts, and which pods it counts.

use berth_api::k8s_openapi::api::core::v1::{Taint, Toleration, TopologySpreadConstraint};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement,
};

use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::model::selector::{Labels, NodeSelectorTermMatcher, Selector, SelectorError};

/// `kubernetes.io/hostname`: constraints on it count per node in Score.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// `topology.kubernetes.io/zone`.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// Labels that differ between the pods of one StatefulSet (or one revision of it), left out
/// of the selector berth derives for default constraints.
const PER_POD_LABELS: &[&str] = &[
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "controller-revision-hash",
];

/// Controller kinds whose pods get default constraints (`apiVersion`, `kind`).
const WORKLOAD_OWNERS: &[(&str, &str)] = &[
    ("v1", "ReplicationController"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "StatefulSet"),
];

/// `whenUnsatisfiable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Filter.
    DoNotSchedule,
    /// Score.
    ScheduleAnyway,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::DoNotSchedule => "DoNotSchedule",
            Action::ScheduleAnyway => "ScheduleAnyway",
        }
    }
}

/// A `TopologySpreadConstraint` with its selector compiled (`topologySpreadConstraint`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Constraint {
    pub(crate) max_skew: i64,
    pub(crate) topology_key: String,
    /// `None`: no `labelSelector`, which matches no pod.
    pub(crate) selector: Option<Selector>,
    /// `minDomains` (1 when unset).
    pub(crate) min_domains: i64,
    /// `nodeAffinityPolicy: Honor` (the default): count only nodes the pod's required node
    /// affinity / node selector admits.
    pub(crate) honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (default Ignore): count only nodes whose NoSchedule /
    /// NoExecute taints the pod tolerates.
    pub(crate) honor_node_taints: bool,
}

impl Constraint {
    /// Whether a pod with `labels` is one this constraint counts.
    pub(crate) fn selects(&self, labels: &Labels) -> bool {
        self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }

    /// Whether `node`'s pods count for this constraint (`matchNodeInclusionPolicies`).
    pub(crate) fn includes_node(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        required: &RequiredNodeAffinity,
    ) -> bool {
        (!self.honor_node_affinity || required.matches(node))
            && (!self.honor_node_taints || !has_untolerated_taint(&node.taints, pod))
    }
}

/// Whether the node has every constraint's topology key.
pub(crate) fn has_all_keys(labels: &Labels, constraints: &[Constraint]) -> bool {
    constraints
        .iter()
        .all(|c| labels.contains_key(&c.topology_key))
}

/// [`count_matching`] over a node's pods, without the reservation stand-ins the incoming pod
/// must not see ([`crate::plugins::reservation::hidden`]: its own reservations, or every
/// reservation when it is itself one).
pub(crate) fn count_visible(
    state: &crate::framework::CycleState,
    node: &crate::model::node::NodeInfo,
    selector: Option<&Selector>,
    ns: &str,
) -> i64 {
    let n = count_matching(&node.pods, selector, ns);
    if state.reservation.is_none() || n == 0 {
        return n;
    }
    let Some(sel) = selector.filter(|s| !s.is_empty()) else {
        return n;
    };
    let hidden = node
        .pods
        .iter()
        .filter(|p| p.is_reserve_pod() && !p.terminating && *p.key.namespace == *ns)
        .filter(|p| sel.matches(&p.labels))
        .filter(|p| crate::plugins::reservation::hidden(state, p, node.idx))
        .count() as i64;
    n - hidden
}

pub(crate) use crate::cache::domain_counts::count_matching;

/// The pod's `nodeSelector` and required node affinity (`nodeaffinity.RequiredNodeAffinity`).
/// Terms that do not parse are ignored, as kube-scheduler does here for compatibility.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequiredNodeAffinity {
    node_selector: Option<Selector>,
    terms: Option<Vec<NodeSelectorTermMatcher>>,
}

impl RequiredNodeAffinity {
    /// Reads the pod's requirements.
    pub(crate) fn of(pod: &PodInfo) -> Self {
        let spec = pod.spec();
        let node_selector = spec
            .node_selector
            .as_ref()
            .filter(|m| !m.is_empty())
            .map(Selector::from_map);
        let terms = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|sel| {
                sel.node_selector_terms
                    .iter()
                    .filter_map(|t| NodeSelectorTermMatcher::new(t).ok())
                    .collect()
            });
        Self {
            node_selector,
            terms,
        }
    }

    /// Whether the pod has neither (every node satisfies it).
    pub(crate) fn is_empty(&self) -> bool {
        self.node_selector.is_none() && self.terms.is_none()
    }

    /// Whether the node satisfies both.
    pub(crate) fn matches(&self, node: &NodeInfo) -> bool {
        self.node_selector
            .as_ref()
            .is_none_or(|s| s.matches(&node.labels))
            && self
                .terms
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|t| t.matches(&node.name, &node.labels)))
    }
}

/// Whether a NoSchedule / NoExecute taint is not tolerated (`FindMatchingUntoleratedTaint`
/// with `DoNotScheduleTaintsFilterFunc`).
fn has_untolerated_taint(taints: &[Taint], pod: &PodInfo) -> bool {
    let tolerations = pod.spec().tolerations.as_deref().unwrap_or(&[]);
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .any(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

/// `Toleration.ToleratesTaint`.
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect = t.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

/// Compiles a constraint's selector, ANDing `key In (pod's value)` for each `matchLabelKeys`
/// key the pod has. A missing selector stays one that matches nothing.
fn compile_selector(
    sel: Option<&LabelSelector>,
    match_label_keys: &[String],
    pod_labels: &Labels,
) -> Result<Option<Selector>, SelectorError> {
    let Some(sel) = sel else {
        return Ok(None);
    };
    let extra: Vec<LabelSelectorRequirement> = match_label_keys
        .iter()
        .filter_map(|k| {
            pod_labels.get(k).map(|v| LabelSelectorRequirement {
                key: k.clone(),
                operator: "In".to_string(),
                values: Some(vec![v.clone()]),
            })
        })
        .collect();
    if extra.is_empty() {
        return Selector::from_label_selector(sel).map(Some);
    }
    let mut merged = sel.clone();
    merged
        .match_expressions
        .get_or_insert_with(Vec::new)
        .extend(extra);
    Selector::from_label_selector(&merged).map(Some)
}

/// The constraints of `action` among `list` (`filterTopologySpreadConstraints`).
fn filter_constraints(
    list: &[TopologySpreadConstraint],
    pod_labels: &Labels,
    action: Action,
) -> Result<Vec<Constraint>, SelectorError> {
    list.iter()
        .filter(|c| c.when_unsatisfiable == action.as_str())
        .map(|c| {
            Ok(Constraint {
                max_skew: i64::from(c.max_skew),
                topology_key: c.topology_key.clone(),
                selector: compile_selector(
                    c.label_selector.as_ref(),
                    c.match_label_keys.as_deref().unwrap_or(&[]),
                    pod_labels,
                )?,
                min_domains: i64::from(c.min_domains.unwrap_or(1)),
                honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            })
        })
        .collect()
}

/// The selector default constraints use for `pod`: its labels, when a workload controller
/// owns it (see [`super::PodTopologySpreadArgs`]).
fn default_selector(pod: &PodInfo) -> Option<Selector> {
    let owner = pod
        .pod
        .metadata
        .owner_references
        .as_deref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    if !WORKLOAD_OWNERS.contains(&(owner.api_version.as_str(), owner.kind.as_str())) {
        return None;
    }
    let labels: Labels = pod
        .labels
        .iter()
        .filter(|(k, _)| !PER_POD_LABELS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (!labels.is_empty()).then(|| Selector::from_map(&labels))
}

/// The pod's constraints of `action`: its own, or else `defaults` with the derived selector.
pub(crate) fn constraints_for(
    pod: &PodInfo,
    defaults: &[TopologySpreadConstraint],
    action: Action,
) -> Result<Vec<Constraint>, String> {
    let own = pod
        .spec()
        .topology_spread_constraints
        .as_deref()
        .unwrap_or(&[]);
    let kind = match action {
        Action::DoNotSchedule => "hard",
        Action::ScheduleAnyway => "soft",
    };
    if !own.is_empty() {
        return filter_constraints(own, &pod.labels, action)
            .map_err(|e| format!("obtaining pod's {kind} topology spread constraints: {e}"));
    }
    // The selector first: most pods get none, and then nothing needs compiling.
    if !defaults
        .iter()
        .any(|c| c.when_unsatisfiable == action.as_str())
    {
        return Ok(Vec::new());
    }
    let Some(sel) = default_selector(pod) else {
        return Ok(Vec::new());
    };
    let mut cs = filter_constraints(defaults, &pod.labels, action)
        .map_err(|e| format!("setting default {kind} topology spread constraints: {e}"))?;
    for c in &mut cs {
        c.selector = Some(sel.clone());
    }
    Ok(cs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn tolerations_follow_tolerates_taint() {
        let taint = |key: &str, value: &str, effect: &str| Taint {
            key: key.into(),
            value: (!value.is_empty()).then(|| value.into()),
            effect: effect.into(),
            ..Default::default()
        };
        let tol = |v: serde_json::Value| -> Toleration { serde_json::from_value(v).unwrap() };
        let t = taint("k", "v", "NoSchedule");
        assert!(tolerates(&tol(json!({"key": "k", "value": "v"})), &t));
        assert!(tolerates(
            &tol(json!({"key": "k", "operator": "Exists"})),
            &t
        ));
        assert!(tolerates(&tol(json!({"operator": "Exists"})), &t));
        assert!(!tolerates(&tol(json!({"key": "k", "value": "w"})), &t));
        assert!(!tolerates(
            &tol(json!({"key": "k", "operator": "Exists", "effect": "NoExecute"})),
            &t
        ));
        let tainted = node("n").taint("k", "v", "NoSchedule").build_info();
        let soft = node("m").taint("k", "v", "PreferNoSchedule").build_info();
        assert!(has_untolerated_taint(
            &tainted.taints,
            &pod("p").build_info()
        ));
        assert!(!has_untolerated_taint(&soft.taints, &pod("p").build_info()));
    }

    #[test]
    fn required_node_affinity_ands_node_selector_and_ors_terms() {
        let p = pod("p")
            .spec("nodeSelector", json!({"disk": "ssd"}))
            .spec(
                "affinity",
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "Bad"}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]}}}),
            )
            .build_info();
        let r = RequiredNodeAffinity::of(&p);
        assert!(r.matches(
            &node("n")
                .label("disk", "ssd")
                .label("zone", "b")
                .build_info()
        ));
        assert!(!r.matches(&node("n").label("zone", "b").build_info()));
        assert!(!r.matches(
            &node("n")
                .label("disk", "ssd")
                .label("zone", "c")
                .build_info()
        ));
    }

    #[test]
    fn defaults_apply_only_to_pods_owned_by_a_workload_controller() {
        let defaults = super::super::args::system_default_constraints();
        let owned = |kind: &str, api: &str| {
            pod("p")
                .label("app", "web")
                .label("statefulset.kubernetes.io/pod-name", "web-0")
                .meta(
                    "ownerReferences",
                    json!([{"apiVersion": api, "kind": kind, "name": "w", "uid": "u",
                            "controller": true}]),
                )
                .build_info()
        };
        let cs = constraints_for(
            &owned("StatefulSet", "apps/v1"),
            &defaults,
            Action::ScheduleAnyway,
        )
        .unwrap();
        assert_eq!(cs.len(), 2);
        let sel = cs[0].selector.as_ref().unwrap();
        let mut sibling = Labels::new();
        sibling.insert("app".into(), "web".into());
        sibling.insert("statefulset.kubernetes.io/pod-name".into(), "web-1".into());
        assert!(
            sel.matches(&sibling),
            "per-pod labels are not part of the selector"
        );
        for (kind, api) in [("Job", "batch/v1"), ("ReplicaSet", "extensions/v1beta1")] {
            assert!(
                constraints_for(&owned(kind, api), &defaults, Action::ScheduleAnyway)
                    .unwrap()
                    .is_empty()
            );
        }
        let bare = pod("q").label("app", "web").build_info();
        assert!(constraints_for(&bare, &defaults, Action::ScheduleAnyway)
            .unwrap()
            .is_empty());
        assert!(constraints_for(
            &owned("ReplicaSet", "apps/v1"),
            &defaults,
            Action::DoNotSchedule
        )
        .unwrap()
        .is_empty());
    }

    #[test]
    fn match_label_keys_narrow_the_selector_and_empty_selectors_count_nothing() {
        let p = pod("p")
            .label("app", "web")
            .label("rev", "2")
            .spec(
                "topologySpreadConstraints",
                json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["rev"]},
                       {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {}},
                       {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]),
            )
            .build_info();
        let cs = constraints_for(&p, &[], Action::DoNotSchedule).unwrap();
        let rev = |r: &str| -> Arc<PodInfo> {
            Arc::new(pod(r).label("app", "web").label("rev", r).build_info())
        };
        let pods = vec![rev("1"), rev("2"), rev("2")];
        assert_eq!(count_matching(&pods, cs[0].selector.as_ref(), "default"), 2);
        assert_eq!(count_matching(&pods, cs[0].selector.as_ref(), "other"), 0);
        assert_eq!(count_matching(&pods, cs[1].selector.as_ref(), "default"), 0);
        assert!(
            cs[1].selects(&p.labels),
            "an empty selector still matches the pod itself"
        );
        assert!(!cs[2].selects(&p.labels), "no selector matches nothing");
    }
}
