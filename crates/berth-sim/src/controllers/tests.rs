//! The controllers and the Eviction API through whole simulations.

use std::collections::BTreeMap;

use berth_core::{Config, Kind, Object, ObjectKey, Profile};

use super::eviction::{self, EvictionError};
use super::{phase, Controllers};
use crate::input::parse_str;
use crate::sim::{derive_uid, Simulation};

fn run(text: &str) -> Simulation {
    let input = parse_str("t.yaml", text).expect("valid input");
    Simulation::run(vec![Profile::default_profile()], Config::default(), &input)
}

const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: \"4\", memory: 8Gi, pods: \"110\"}}\n";

fn rs(name: &str, replicas: i32) -> String {
    format!("---\napiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {{name: {name}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]}}\n")
}

/// Pod names by phase.
fn pods(sim: &Simulation) -> BTreeMap<String, String> {
    sim.store()
        .of_kind(Kind::Pod)
        .filter_map(|o| match o {
            Object::Pod(p) => Some((p.metadata.name.clone()?, phase(p).to_string())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_failed_pod_is_left_and_replaced() {
    let uid = derive_uid("ReplicaSet", "default", "web");
    let failed = format!("---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: web-old\n  labels: {{app: web}}\n  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web, uid: {uid}, controller: true}}]\nspec: {{nodeName: n1, containers: [{{name: c}}]}}\nstatus: {{phase: Failed}}\n");
    let sim = run(&format!("{NODE}{}{failed}", rs("web", 2)));
    let pods = pods(&sim);
    assert_eq!(pods.get("web-old").map(String::as_str), Some("Failed"));
    let running = pods.values().filter(|p| *p == "Running").count();
    assert_eq!((pods.len(), running), (3, 2), "{pods:?}");
}

#[test]
fn a_settled_cluster_gives_the_controllers_nothing_to_do() {
    let sts = "---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}}\n    spec: {containers: [{name: c}]}\n";
    let deploy = "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c}]}\n";
    let sim = run(&format!("{NODE}{}{sts}{deploy}", rs("api", 2)));
    let mut ctl = Controllers::default();
    let actions = ctl.reconcile(sim.store());
    assert!(actions.is_empty(), "{actions:?}");
    assert_eq!(pods(&sim).len(), 7);
    assert!(pods(&sim).contains_key("db-1"));
}

#[test]
fn a_scale_down_deletes_unscheduled_pods_first() {
    // Room for two of five: the three pending ones go first.
    let small = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 200m, memory: 8Gi, pods: \"110\"}}\n";
    let mut sim = run(&format!("{small}{}", rs("web", 5)));
    assert_eq!(pods(&sim).values().filter(|p| *p == "Running").count(), 2);
    let input = parse_str("t.yaml", &rs("web", 2)).expect("valid");
    for (_, item) in &input.items {
        sim.apply_item(item, false);
    }
    sim.settle();
    let pods = pods(&sim);
    assert_eq!(pods.len(), 2, "{pods:?}");
    assert!(pods.values().all(|p| p == "Running"), "{pods:?}");
}

fn pdb(name: &str, min: &str) -> String {
    format!("---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: {name}}}\nspec:\n  minAvailable: {min}\n  selector: {{matchLabels: {{app: web}}}}\n")
}

fn first_pod(sim: &Simulation) -> ObjectKey {
    let name = pods(sim).keys().next().cloned().expect("a pod");
    ObjectKey::pod("default", &name)
}

#[test]
fn evictions_honour_the_budget() {
    let mut sim = run(&format!("{NODE}{}{}", rs("web", 2), pdb("b", "2")));
    let key = first_pod(&sim);
    let e = sim.evict(&key).expect_err("budget allows none");
    assert_eq!(e.code(), 429);
    assert!(matches!(
        e,
        EvictionError::TooManyRequests {
            desired: 2,
            healthy: 2,
            ..
        }
    ));
    assert!(sim.store().pod(&key).is_some());
    // 50% of two is one: one may go, and its controller replaces it.
    let mut sim = run(&format!("{NODE}{}{}", rs("web", 2), pdb("b", "\"50%\"")));
    let key = first_pod(&sim);
    sim.evict(&key).expect("allowed");
    sim.settle();
    assert!(sim.store().pod(&key).is_none());
    assert_eq!(pods(&sim).len(), 2);
    // Two budgets: the API server refuses.
    let sim = run(&format!(
        "{NODE}{}{}{}",
        rs("web", 2),
        pdb("a", "0"),
        pdb("b", "0")
    ));
    let e = eviction::check(sim.store(), &first_pod(&sim)).expect_err("two budgets");
    assert_eq!(e, EvictionError::MultipleBudgets);
    assert_eq!(
        eviction::check(sim.store(), &ObjectKey::pod("default", "nope")),
        Err(EvictionError::NotFound("nope".into()))
    );
}

#[test]
fn a_pending_pod_is_evicted_whatever_the_budget() {
    let small = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 100m, memory: 8Gi, pods: \"110\"}}\n";
    let sim = run(&format!("{small}{}{}", rs("web", 2), pdb("b", "2")));
    let pending: Vec<String> = pods(&sim)
        .into_iter()
        .filter(|(_, p)| p == "Pending")
        .map(|(n, _)| n)
        .collect();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        eviction::check(sim.store(), &ObjectKey::pod("default", &pending[0])),
        Ok(())
    );
}
