//! Nominated pods: pods that preempted others and wait for their victims to leave.
//!
//! kube-scheduler keeps them in the queue's `PodNominator` and runs Filter "with nominated
//! pods" (`RunFilterPluginsWithNominatedPods`): while a pod is nominated to a node, pods of
//! lower or equal priority must not take the room its preemption freed. berth mirrors that:
//! the nominated pods of a node that are at least as important as the pod being filtered are
//! added to a copy of the node, and the pod must fit both with and without them.
//!
//! The common case (nobody nominated) costs one `is_empty` check per cycle and allocates
//! nothing; otherwise only the nodes with nominated pods are copied and filtered one at a
//! time, and the rest are filtered in batches as usual.

use crate::collections::{HashMap, HashSet};
use std::sync::Arc;

use berth_api::reservation::ReservationPhase;

use crate::cache::Cluster;
use crate::framework::cycle_state::CycleState;
use crate::framework::filter_plan::FilterPlan;
use crate::framework::profile::Profile;
use crate::framework::status::Status;
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::model::NodeSet;
use crate::object::ObjectKey;

/// `status.nominatedNodeName` of a pod object, when set.
pub fn nominated_node_name(pod: &PodInfo) -> Option<&str> {
    pod.pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Pending pods nominated to nodes, by node name (kube-scheduler's `nominator`).
///
/// Nominations are by node name, not index: a nominated node that is deleted and comes back
/// keeps its nominated pods, as in kube-scheduler.
#[derive(Debug, Clone, Default)]
pub struct Nominator {
    /// Node name -> nominated pods, in nomination order.
    by_node: HashMap<Arc<str>, Vec<Arc<PodInfo>>>,
    /// Pod -> the node it is nominated to.
    by_pod: HashMap<ObjectKey, Arc<str>>,
    /// Nominated preemptors whose hold (reservation-backed preemption) was asked for: until
    /// the hold is Available in the cache, every pod yields to them, whatever its priority.
    /// Without this, a victim's deletion seen before the hold's creation (pods and
    /// reservations come through different watches), or the first of several victims gone
    /// while the hold waits for all, left the freed room to any pod of higher priority.
    awaiting_hold: HashSet<ObjectKey>,
}

impl Nominator {
    /// Whether no pod is nominated anywhere.
    pub fn is_empty(&self) -> bool {
        self.by_pod.is_empty()
    }

    /// The node a pod is nominated to.
    pub fn node_of(&self, pod: &ObjectKey) -> Option<&Arc<str>> {
        self.by_pod.get(pod)
    }

    /// The pods nominated to a node, in nomination order.
    pub fn pods_on(&self, node: &str) -> &[Arc<PodInfo>] {
        self.by_node.get(node).map_or(&[], Vec::as_slice)
    }

    /// The nodes of `cx` with pods nominated to them, as a set of indices: the Filter loop
    /// copies only these nodes with their nominated pods on them ([`Nominator::with_nominated`]
    /// leaves every other node as it is) and filters the rest in batches.
    pub fn nodes_in(&self, cx: &Cluster) -> NodeSet {
        let mut set = NodeSet::default();
        for name in self.by_node.keys() {
            if let Some(idx) = cx.cache.node_idx(name) {
                set.insert(idx);
            }
        }
        set
    }

    /// Nominates `pod` to `node`, replacing any earlier nomination (kube's `ModeOverride`).
    pub fn add(&mut self, pod: Arc<PodInfo>, node: Arc<str>) {
        self.delete(&pod.key);
        self.by_pod.insert(pod.key.clone(), node.clone());
        self.by_node.entry(node).or_default().push(pod);
    }

    /// Forgets a pod's nomination; returns the node it was nominated to.
    pub fn delete(&mut self, pod: &ObjectKey) -> Option<Arc<str>> {
        self.awaiting_hold.remove(pod);
        let node = self.by_pod.remove(pod)?;
        if let Some(list) = self.by_node.get_mut(&node) {
            list.retain(|p| &p.key != pod);
            if list.is_empty() {
                self.by_node.remove(&node);
            }
        }
        Some(node)
    }

    /// The nominated `pod` asked for a hold on its node: it is yielded to by every pod until
    /// the hold is Available (see [`Nominator::with_nominated`]). Forgotten with the
    /// nomination.
    pub fn await_hold(&mut self, pod: &ObjectKey) {
        if self.by_pod.contains_key(pod) {
            self.awaiting_hold.insert(pod.clone());
        }
    }

    /// A new version of a pending pod arrived (kube's `updateNominatedPodUnlocked`): its
    /// `status.nominatedNodeName` wins, except that an update where neither version carries
    /// one keeps the in-memory nomination (the API may not have caught up with a
    /// nomination made in this process yet).
    pub fn update(&mut self, old: Option<&PodInfo>, new: &Arc<PodInfo>) {
        let old_name = old.and_then(nominated_node_name);
        let new_name = nominated_node_name(new);
        let keep = if old_name.is_none() && new_name.is_none() {
            self.by_pod.get(&new.key).cloned()
        } else {
            None
        };
        let awaiting = self.awaiting_hold.contains(&new.key);
        self.delete(&new.key);
        if let Some(node) = keep.or_else(|| new_name.map(Arc::from)) {
            self.add(new.clone(), node);
            if awaiting {
                self.awaiting_hold.insert(new.key.clone());
            }
        }
    }

    /// A copy of `node` with the pods nominated to it that `pod` must yield to (priority at
    /// least `pod`'s, or a hold asked for and not yet Available in `cx`; never one whose
    /// hold is Available, nor `pod` itself) added, or `None` when there are none.
    pub fn with_nominated(&self, cx: &Cluster, pod: &PodInfo, node: &NodeInfo) -> Option<NodeInfo> {
        if self.by_node.is_empty() {
            return None;
        }
        let list = self.by_node.get(&*node.name)?;
        // A nominated pod's hold (reservation-backed preemption), as the cache has it.
        let hold_phase = |p: &PodInfo| {
            crate::reservation::hold::of(&cx.reservations, &p.key, &p.uid)
                .and_then(|i| cx.reservations.get(i))
                .map(|r| &r.phase)
        };
        let yields_to = |p: &&Arc<PodInfo>| {
            if p.key == pod.key {
                return false;
            }
            let awaiting = self.awaiting_hold.contains(&p.key);
            if !awaiting && p.priority < pod.priority {
                // Yielded to in no case: no need to look its hold up.
                return false;
            }
            match hold_phase(p) {
                // Holding: its room is taken on the node by the hold already, and adding
                // the pod as well would count it twice (members of a gang that preempted
                // together are nominated side by side, each with its hold).
                Some(ReservationPhase::Available) => false,
                // Not holding yet: on its way, Pending, or Waiting (a Waiting reservation
                // holds nothing, so the room each victim frees as it leaves would be
                // anyone's).
                None | Some(ReservationPhase::Pending | ReservationPhase::Waiting) => {
                    awaiting || p.priority >= pod.priority
                }
                Some(_) => p.priority >= pod.priority,
            }
        };
        if !list.iter().any(|p| yields_to(&p)) {
            return None;
        }
        let mut out = node.clone();
        for p in list.iter().filter(yields_to) {
            out.add_pod(p.clone());
        }
        Some(out)
    }
}

/// Runs the profile's Filter plugins on `node` (kube's `RunFilterPlugins`): the first
/// rejection wins and names its plugin. Plugins whose PreFilter returned Skip are skipped.
/// A loop over many nodes builds its [`FilterPlan`] once instead.
pub fn run_filter_plugins(
    profile: &Profile,
    cx: &Cluster,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Status {
    FilterPlan::new(profile, state).run(cx, state, pod, node)
}

/// kube's `RunFilterPluginsWithNominatedPods`: when pods the pod must yield to are nominated
/// to `node`, the pod must fit with them counted as running (resources, ports) and also
/// without them (filters such as pod affinity may need them absent); otherwise one pass.
/// Inlined into the filter loop: with nothing nominated (the usual case) it is one check.
#[inline]
pub fn run_filter_plugins_with_nominated_pods(
    plan: &FilterPlan<'_>,
    cx: &Cluster,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    nominator: &Nominator,
) -> Status {
    if nominator.is_empty() {
        return plan.run(cx, state, pod, node);
    }
    if let Some(with) = nominator.with_nominated(cx, pod, node) {
        let st = plan.run(cx, state, pod, &with);
        if !st.is_success() {
            return st;
        }
    }
    plan.run(cx, state, pod, node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};
    use serde_json::json;

    fn info(b: crate::testing::PodBuilder) -> Arc<PodInfo> {
        Arc::new(b.build_info())
    }

    /// The pod with `status.nominatedNodeName` set.
    fn nominated(b: crate::testing::PodBuilder, node: &str) -> Arc<PodInfo> {
        let mut v = b.json().clone();
        v["status"]["nominatedNodeName"] = json!(node);
        let pod = Arc::new(serde_json::from_value(v).unwrap());
        Arc::new(PodInfo::new(pod, &mut Default::default()).unwrap())
    }

    #[test]
    fn a_pod_yields_only_to_nominated_pods_of_higher_or_equal_priority() {
        let cx = Cluster::default();
        let mut nom = Nominator::default();
        let n = node("n1").alloc("cpu", "2").build_info();
        let hi = info(pod("hi").req("cpu", "1").priority(10));
        nom.add(hi.clone(), "n1".into());
        let low = pod("low").req("cpu", "1").priority(5).build_info();
        let with = nom
            .with_nominated(&cx, &low, &n)
            .expect("hi is nominated to n1");
        assert_eq!(with.pods.len(), 1);
        assert_eq!(with.requested[crate::resources::ResourceId::CPU], 1000);
        let higher = pod("higher").priority(20).build_info();
        assert!(nom.with_nominated(&cx, &higher, &n).is_none());
        // The nominated pod itself is not in its own way.
        assert!(nom.with_nominated(&cx, &hi, &n).is_none());
        let other = node("n2").build_info();
        assert!(nom.with_nominated(&cx, &low, &other).is_none());
    }

    #[test]
    fn an_update_without_nominated_node_keeps_the_in_memory_nomination() {
        let mut nom = Nominator::default();
        let p = info(pod("p").priority(10));
        nom.add(p.clone(), "n1".into());
        nom.update(Some(&p), &info(pod("p").priority(10)));
        assert_eq!(nom.node_of(&p.key).map(|n| &**n), Some("n1"));
        // The API object names another node: it wins.
        let moved = nominated(pod("p").priority(10), "n2");
        nom.update(Some(&p), &moved);
        assert_eq!(nom.node_of(&p.key).map(|n| &**n), Some("n2"));
        assert!(nom.pods_on("n1").is_empty());
        // The API object drops it: the nomination goes.
        nom.update(Some(&moved), &p);
        assert!(nom.node_of(&p.key).is_none());
        assert!(nom.is_empty());
    }

    #[test]
    fn a_preemptor_whose_hold_is_on_its_way_is_yielded_to_by_everyone() {
        // Until its hold is Available, nothing keeps the room its victims free but this: a
        // pod of higher priority must not take it meanwhile.
        let cx = Cluster::default();
        let mut nom = Nominator::default();
        let n = node("n1").alloc("cpu", "2").build_info();
        let preemptor = info(pod("preemptor").req("cpu", "2").priority(10));
        nom.add(preemptor.clone(), "n1".into());
        let higher = pod("higher").req("cpu", "1").priority(20).build_info();
        assert!(nom.with_nominated(&cx, &higher, &n).is_none());
        nom.await_hold(&preemptor.key);
        let with = nom
            .with_nominated(&cx, &higher, &n)
            .expect("the hold is pending");
        assert_eq!(with.requested[crate::resources::ResourceId::CPU], 2000);
        assert!(nom.with_nominated(&cx, &preemptor, &n).is_none());
        // Forgotten with the nomination.
        nom.delete(&preemptor.key);
        nom.add(preemptor.clone(), "n1".into());
        assert!(nom.with_nominated(&cx, &higher, &n).is_none());
    }
}
