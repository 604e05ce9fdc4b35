//! PodDisruptionBudgets as preemption reads them: which victims would violate a budget.
//!
//! kube-scheduler reads `status.disruptionsAllowed`, which the disruption controller keeps
//! up to date. A budget given without a status (a simulator input nobody reconciled) gets
//! the controller's answer computed here, with the matching pods standing in for the
//! workload's scale.

use std::collections::BTreeSet;
use std::sync::Arc;

use berth_api::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use berth_api::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::cache::{Cluster, PodState};
use crate::model::pod::PodInfo;
use crate::model::selector::Selector;

/// One budget, compiled.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    namespace: String,
    selector: Selector,
    /// `status.disruptionsAllowed` (or the disruption controller's answer).
    allowed: i32,
    /// `status.disruptedPods`: evictions the API server already processed.
    disrupted: BTreeSet<String>,
}

/// The cluster's budgets in name order. A budget with no, an empty or an invalid selector
/// matches nothing (kube-scheduler's rule) and is left out.
pub(crate) fn budgets(cx: &Cluster) -> Vec<Budget> {
    let mut keys: Vec<_> = cx.cache.pdbs.keys().collect();
    keys.sort();
    let mut out = Vec::new();
    for key in keys {
        let pdb = &cx.cache.pdbs[key];
        let Some(sel) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
            continue;
        };
        let Ok(selector) = Selector::from_label_selector(sel) else {
            continue;
        };
        if selector.is_empty() {
            continue;
        }
        let namespace = pdb.metadata.namespace.as_deref().unwrap_or("default");
        let allowed = match &pdb.status {
            Some(s) => s.disruptions_allowed,
            None => controller_allowed(pdb, namespace, &selector, cx),
        };
        let disrupted = pdb
            .status
            .as_ref()
            .and_then(|s| s.disrupted_pods.as_ref())
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        out.push(Budget {
            namespace: namespace.to_string(),
            selector,
            allowed,
            disrupted,
        });
    }
    out
}

/// The disruption controller's `disruptionsAllowed` for a budget without status: healthy
/// matching pods (running, not being deleted) minus the desired healthy count, where the
/// expected count is the number of matching non-terminal pods.
fn controller_allowed(
    pdb: &PodDisruptionBudget,
    namespace: &str,
    selector: &Selector,
    cx: &Cluster,
) -> i32 {
    let (mut expected, mut healthy) = (0i64, 0i64);
    for e in cx.cache.pods() {
        let p = &e.info;
        if p.is_reserve_pod()
            || p.terminal
            || &*p.key.namespace != namespace
            || !selector.matches(&p.labels)
        {
            continue;
        }
        expected += 1;
        if e.state == PodState::Bound && e.node.is_some() && !p.terminating {
            healthy += 1;
        }
    }
    let spec = pdb.spec.as_ref();
    let desired = if let Some(max) = spec.and_then(|s| s.max_unavailable.as_ref()) {
        match scaled(max, expected) {
            Some(m) => (expected - m).max(0),
            None => return 0,
        }
    } else if let Some(min) = spec.and_then(|s| s.min_available.as_ref()) {
        match scaled(min, expected) {
            Some(m) => m,
            None => return 0,
        }
    } else {
        0
    };
    (healthy - desired).clamp(0, i64::from(i32::MAX)) as i32
}

/// `intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true)`; `None` when malformed
/// (the controller then fails safe to no disruption).
fn scaled(v: &IntOrString, total: i64) -> Option<i64> {
    match v {
        IntOrString::Int(i) => Some(i64::from(*i)),
        IntOrString::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((pct * total + 99).div_euclid(100))
        }
    }
}

/// kube-scheduler's `filterPodsWithPDBViolation`: splits `pods` (order kept) into those
/// whose eviction would take some matching budget below zero and the rest. Each matching
/// pod uses up one allowed disruption, unless the API server already counted it
/// (`disruptedPods`).
pub(crate) fn split_by_violation(
    pods: &[Arc<PodInfo>],
    budgets: &[Budget],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = budgets.iter().map(|b| b.allowed).collect();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for p in pods {
        let mut violated = false;
        // A pod with no labels matches no budget.
        if !p.labels.is_empty() {
            for (i, b) in budgets.iter().enumerate() {
                if *b.namespace != *p.key.namespace || !b.selector.matches(&p.labels) {
                    continue;
                }
                if b.disrupted.contains(&*p.key.name) {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push(p.clone());
        } else {
            fine.push(p.clone());
        }
    }
    (violating, fine)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Object;
    use crate::testing::{node, pod};
    use serde_json::json;

    fn pdb(
        name: &str,
        spec: serde_json::Value,
        status: Option<serde_json::Value>,
    ) -> Arc<PodDisruptionBudget> {
        let mut v = json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec});
        if let Some(s) = status {
            v["status"] = s;
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn cluster_with(
        pdbs: &[Arc<PodDisruptionBudget>],
        pods: &[crate::testing::PodBuilder],
    ) -> Cluster {
        let mut cx = Cluster::default();
        cx.apply_node(node("n1").alloc("cpu", "10").build())
            .unwrap();
        for p in pdbs {
            let key = Object::PodDisruptionBudget(p.clone()).key();
            cx.cache.pdbs.insert(key, p.clone());
        }
        for b in pods {
            let info = b.build_info_with(&mut cx.cache.names);
            cx.cache.apply_pod(Arc::new(info));
        }
        cx
    }

    fn status(allowed: i32, disrupted: &[&str]) -> serde_json::Value {
        let d: serde_json::Map<String, serde_json::Value> = disrupted
            .iter()
            .map(|n| (n.to_string(), json!("2024-01-01T00:00:00Z")))
            .collect();
        json!({"currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0,
               "disruptionsAllowed": allowed, "disruptedPods": d})
    }

    fn names(v: &[Arc<PodInfo>]) -> Vec<&str> {
        v.iter().map(|p| &*p.key.name).collect()
    }

    #[test]
    fn each_matching_victim_uses_one_allowed_disruption() {
        let sel = json!({"selector": {"matchLabels": {"app": "foo"}}});
        let pods = [
            pod("p1").label("app", "foo").node_name("n1"),
            pod("p2").label("app", "foo").node_name("n1"),
            pod("p3").label("app", "bar").node_name("n1"),
            pod("p4").node_name("n1"),
        ];
        let cx = cluster_with(&[pdb("b", sel.clone(), Some(status(1, &[])))], &pods);
        let infos: Vec<_> = pods.iter().map(|b| Arc::new(b.build_info())).collect();
        let (bad, ok) = split_by_violation(&infos, &budgets(&cx));
        assert_eq!(names(&bad), ["p2"]);
        assert_eq!(names(&ok), ["p1", "p3", "p4"]);
        // A pod the API server already counted as disrupted uses nothing.
        let cx = cluster_with(&[pdb("b", sel, Some(status(1, &["p1"])))], &pods);
        let (bad, _) = split_by_violation(&infos, &budgets(&cx));
        assert!(bad.is_empty());
    }

    #[test]
    fn nil_empty_and_other_namespace_budgets_match_nothing() {
        let pods = [pod("p1").label("app", "foo").node_name("n1")];
        let infos: Vec<_> = pods.iter().map(|b| Arc::new(b.build_info())).collect();
        let cx = cluster_with(
            &[
                pdb("nil", json!({}), Some(status(0, &[]))),
                pdb("empty", json!({"selector": {}}), Some(status(0, &[]))),
            ],
            &pods,
        );
        assert!(budgets(&cx).is_empty());
        let mut other = (*pdb(
            "o",
            json!({"selector": {"matchLabels": {"app": "foo"}}}),
            Some(status(0, &[])),
        ))
        .clone();
        other.metadata.namespace = Some("other".into());
        let cx = cluster_with(&[Arc::new(other)], &pods);
        let (bad, _) = split_by_violation(&infos, &budgets(&cx));
        assert!(bad.is_empty());
    }

    #[test]
    fn a_budget_without_status_gets_the_disruption_controllers_answer() {
        let pods = [
            pod("p1").label("app", "foo").node_name("n1"),
            pod("p2").label("app", "foo").node_name("n1"),
            pod("p3").label("app", "foo").node_name("n1"),
            pod("pending").label("app", "foo"),
        ];
        let cases = [
            (json!({"minAvailable": 2}), 1),
            (json!({"minAvailable": 5}), 0),
            (json!({"minAvailable": "50%"}), 1), // ceil(50% of 4) = 2 desired, 3 healthy
            (json!({"maxUnavailable": 1}), 0),   // 4 expected - 1 = 3 desired
            (json!({"maxUnavailable": "50%"}), 1),
            (json!({"minAvailable": "lots"}), 0),
            (json!({}), 3),
        ];
        for (spec, want) in cases {
            let mut spec = spec;
            spec["selector"] = json!({"matchLabels": {"app": "foo"}});
            let cx = cluster_with(&[pdb("b", spec.clone(), None)], &pods);
            assert_eq!(budgets(&cx)[0].allowed, want, "{spec}");
        }
    }
}
