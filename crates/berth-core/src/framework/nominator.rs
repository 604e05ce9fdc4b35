//! Nominated pods: pods that preempted others and wait for their victims to leave.
//!
//! kube-scheduler keeps them in the queue's `PodNominator` and runs Filter "with nominated
//! pods" (`RunFilterPluginsWithNominatedPods`): while a pod is nominated to a node, pods of
//! lower or equal priority must not take the room its preemption freed. berth mirrors that:
//! the nominated pods of a node that are at least as important as the pod being filtered are
//! added to a copy of the node, and the pod must fit both with and without them.
//!
//! The common case (nobody nominated) costs one `is_empty` check per node and allocates
//! nothing.

use crate::collections::HashMap;
use std::sync::Arc;

use crate::cache::Cluster;
use crate::framework::cycle_state::CycleState;
use crate::framework::profile::Profile;
use crate::framework::status::Status;
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
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

    /// Nominates `pod` to `node`, replacing any earlier nomination (kube's `ModeOverride`).
    pub fn add(&mut self, pod: Arc<PodInfo>, node: Arc<str>) {
        self.delete(&pod.key);
        self.by_pod.insert(pod.key.clone(), node.clone());
        self.by_node.entry(node).or_default().push(pod);
    }

    /// Forgets a pod's nomination; returns the node it was nominated to.
    pub fn delete(&mut self, pod: &ObjectKey) -> Option<Arc<str>> {
        let node = self.by_pod.remove(pod)?;
        if let Some(list) = self.by_node.get_mut(&node) {
            list.retain(|p| &p.key != pod);
            if list.is_empty() {
                self.by_node.remove(&node);
            }
        }
        Some(node)
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
        self.delete(&new.key);
        if let Some(node) = keep.or_else(|| new_name.map(Arc::from)) {
            self.add(new.clone(), node);
        }
    }

    /// A copy of `node` with the pods nominated to it that `pod` must yield to (priority at
    /// least `pod`'s, other than `pod` itself) added, or `None` when there are none.
    pub fn with_nominated(&self, pod: &PodInfo, node: &NodeInfo) -> Option<NodeInfo> {
        if self.by_node.is_empty() {
            return None;
        }
        let list = self.by_node.get(&*node.name)?;
        let yields_to = |p: &&Arc<PodInfo>| p.priority >= pod.priority && p.key != pod.key;
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
pub fn run_filter_plugins(
    profile: &Profile,
    cx: &Cluster,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Status {
    for &i in &profile.filter {
        if state.skip_filter & (1 << i) != 0 {
            continue;
        }
        let p = &profile.plugins[i];
        let st = p.filter(cx, state, pod, node);
        if !st.is_success() {
            return st.with_plugin(p.name());
        }
    }
    Status::success()
}

/// kube's `RunFilterPluginsWithNominatedPods`: when pods the pod must yield to are nominated
/// to `node`, the pod must fit with them counted as running (resources, ports) and also
/// without them (filters such as pod affinity may need them absent); otherwise one pass.
pub fn run_filter_plugins_with_nominated_pods(
    profile: &Profile,
    cx: &Cluster,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    nominator: &Nominator,
) -> Status {
    if let Some(with) = nominator.with_nominated(pod, node) {
        let st = run_filter_plugins(profile, cx, state, pod, &with);
        if !st.is_success() {
            return st;
        }
    }
    run_filter_plugins(profile, cx, state, pod, node)
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
        let mut nom = Nominator::default();
        let n = node("n1").alloc("cpu", "2").build_info();
        let hi = info(pod("hi").req("cpu", "1").priority(10));
        nom.add(hi.clone(), "n1".into());
        let low = pod("low").req("cpu", "1").priority(5).build_info();
        let with = nom.with_nominated(&low, &n).expect("hi is nominated to n1");
        assert_eq!(with.pods.len(), 1);
        assert_eq!(with.requested[crate::resources::ResourceId::CPU], 1000);
        let higher = pod("higher").priority(20).build_info();
        assert!(nom.with_nominated(&higher, &n).is_none());
        // The nominated pod itself is not in its own way.
        assert!(nom.with_nominated(&hi, &n).is_none());
        let other = node("n2").build_info();
        assert!(nom.with_nominated(&low, &other).is_none());
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
}
