//! Queueing hints: which cluster events can make a pod that failed fit, so only those pods
//! leave the unschedulable pool (kube-scheduler's `EventsToRegister` plus `QueueingHintFn`,
//! `pkg/scheduler/backend/queue`'s `isPodWorthRequeuing`).
//!
//! Each plugin names the events that can turn its rejection into a pass, with their hints
//! ([`crate::framework::Plugin::events_to_register`]); [`QueueingHints`] gathers what the
//! profiles' plugins registered, and an event moves a pod when one of the plugins that
//! rejected it registered the event (and its hint agrees). A pod no plugin rejected (no
//! nodes at all) moves on every event, as upstream does; so does one a plugin no profile
//! has rejected (a gang's), on every event but NUMA ones.
//!
//! A node-scoped event (node `N` added or updated, a pod leaving `N`, `N`'s NUMA data
//! changing) can only change what node-local plugins say about `N` itself. When every
//! plugin the event concerns is node-local, the pod moves only if `N` could host it now: its
//! CPU, memory, ephemeral storage and pod slot (and, for NUMA events, the NUMA alignment)
//! fit (the rejecting plugins' [`crate::framework::events::EventsToRegister::node_check`]s).
//! A pod is skipped that way only if the plugin that would reject it on `N`
//! (NodeResourcesFit, NodeResourceTopologyMatch) is already among those that rejected it:
//! the invariant is that for every node, some plugin that blocks the pod there is in its
//! list, so the event that lifts that block reaches the pod. (A pod a cordoned node
//! rejected, skipped when a node too small for it is added, would otherwise miss that
//! node growing: only NodeResourcesFit registers allocatable changes.)
//!
//! The five-minute flush of the unschedulable pool
//! ([`super::UNSCHEDULABLE_MAX_WAIT`]) stays, as upstream's `UnschedulableTimeout`, as the
//! net for anything these hints miss.

use crate::cache::Cluster;
use crate::framework::events::EventsToRegister;
use crate::framework::Profile;
use crate::model::node::{NodeIdx, NodeInfo};
use crate::object::{Kind, ObjectKey};
use crate::resources::Resources;

pub use crate::framework::events::{kind, ClusterEvent};

/// What a node looked like before an update, to tell which [`kind`]s the update is.
#[derive(Debug, Clone)]
pub struct NodeBefore {
    allocatable: Resources,
    allowed_pods: i64,
    unschedulable: bool,
    node: std::sync::Arc<berth_api::k8s_openapi::api::core::v1::Node>,
}

impl NodeBefore {
    /// Remembers what of `n` the plugins read.
    pub fn of(n: &NodeInfo) -> Self {
        Self {
            allocatable: n.allocatable,
            allowed_pods: n.allowed_pods,
            unschedulable: n.unschedulable,
            node: n.node.clone(),
        }
    }
}

/// The [`kind`]s of an update from `before` to `after` (upstream's
/// `nodeSchedulingPropertiesChange`); 0 when nothing a plugin reads changed (status
/// conditions, an annotation that trims nothing).
pub fn node_change(before: &NodeBefore, after: &NodeInfo) -> u32 {
    let mut kinds = 0;
    if before.allocatable != after.allocatable || before.allowed_pods != after.allowed_pods {
        kinds |= kind::NODE_ALLOCATABLE;
    }
    if before.node.metadata.labels != after.node.metadata.labels {
        kinds |= kind::NODE_LABEL;
    }
    let taints = |n: &berth_api::k8s_openapi::api::core::v1::Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
    };
    if before.unschedulable != after.unschedulable || taints(&before.node) != taints(&after.node) {
        kinds |= kind::NODE_TAINT;
    }
    kinds
}

/// What one plugin registered, as the queue keeps it.
#[derive(Debug, Clone, Copy)]
struct Registered {
    name: &'static str,
    events: EventsToRegister,
    /// The [`kind`] bits of `events`.
    kinds: u32,
    /// Its node check applies: every profile filters with the plugin.
    checked: bool,
}

/// The events each plugin of the profiles registered (kube-scheduler's
/// `queueingHintMap`), by plugin name, and the decisions made from them. A plugin no
/// profile has (a gang's) is taken to register every event but NUMA ones.
#[derive(Debug, Clone, Default)]
pub struct QueueingHints {
    /// Sorted by name.
    plugins: Vec<Registered>,
}

impl QueueingHints {
    /// Asks every plugin of `profiles` what it registers. A node check applies only when
    /// every profile filters with its plugin (a profile without NodeResourcesFit places
    /// pods whatever their size).
    pub fn for_profiles(profiles: &[Profile]) -> Self {
        let mut plugins: Vec<Registered> = Vec::new();
        for p in profiles.iter().flat_map(|prof| prof.plugins.iter()) {
            let name = p.name();
            if plugins.iter().any(|r| r.name == name) {
                continue;
            }
            let events = p.events_to_register();
            let checked = events.node_check.is_some()
                && profiles
                    .iter()
                    .all(|prof| prof.filter.iter().any(|&i| prof.plugins[i].name() == name));
            plugins.push(Registered {
                name,
                events,
                kinds: events.kinds(),
                checked,
            });
        }
        plugins.sort_by(|a, b| a.name.cmp(b.name));
        Self { plugins }
    }

    /// Keeps the node checks of `plugins` only (tests of the checks' effect).
    #[cfg(test)]
    pub(crate) fn checking_only(mut self, plugins: &[&str]) -> Self {
        for r in &mut self.plugins {
            r.checked = r.events.node_check.is_some() && plugins.contains(&r.name);
        }
        self
    }

    fn get(&self, plugin: &str) -> Option<&Registered> {
        self.plugins
            .binary_search_by(|r| r.name.cmp(plugin))
            .ok()
            .map(|i| &self.plugins[i])
    }

    /// What `plugin` registered ([`EventsToRegister::EVERY_EVENT_BUT_NUMA`] for a plugin no
    /// profile has).
    pub fn registered(&self, plugin: &str) -> EventsToRegister {
        self.get(plugin)
            .map_or(EventsToRegister::EVERY_EVENT_BUT_NUMA, |r| r.events)
    }

    fn kinds(&self, plugin: &str) -> u32 {
        self.get(plugin)
            .map_or(const { kind::ALL & !kind::NODE_TOPOLOGY }, |r| r.kinds)
    }

    /// The [`kind`] bits of every event that can help an item `plugins` rejected: the
    /// union of what they registered, or every kind but NUMA ones when no plugin rejected
    /// it. An event outside this set never requeues the item
    /// ([`QueueingHints::worth_requeuing`] answers false), so the queue indexes its
    /// unschedulable pool by these bits.
    pub fn interest(&self, plugins: &[&'static str]) -> u32 {
        if plugins.is_empty() {
            return kind::ALL & !kind::NODE_TOPOLOGY;
        }
        plugins.iter().fold(0, |acc, p| acc | self.kinds(p))
    }

    /// kube-scheduler's `isPodWorthRequeuing`: whether `event` may make the item `key`,
    /// which `plugins` rejected, fit.
    pub fn worth_requeuing(
        &self,
        cx: &Cluster,
        event: &ClusterEvent,
        key: &ObjectKey,
        plugins: &[&'static str],
    ) -> bool {
        if plugins.is_empty() {
            return event.kinds & !kind::NODE_TOPOLOGY != 0;
        }
        let mut interested = false;
        let mut local = true;
        for p in plugins {
            let r = self.registered(p);
            if r.events.iter().any(|&(kinds, hint)| {
                kinds & event.kinds != 0 && hint.is_none_or(|h| hint_says(cx, h, event, key))
            }) {
                interested = true;
                local &= r.node_local;
            }
        }
        if !interested {
            return false;
        }
        match event.node {
            Some(idx) if local => self.may_fit(cx, event, key, plugins, idx),
            _ => true,
        }
    }

    /// Whether the pod `key` may fit node `idx` now, judged by the node checks of the
    /// plugins in `plugins` only (see the module doc). Anything it cannot judge (a
    /// reservation's stand-in, a node holding reservations, whose owners get capacity
    /// back) may fit.
    fn may_fit(
        &self,
        cx: &Cluster,
        event: &ClusterEvent,
        key: &ObjectKey,
        plugins: &[&'static str],
        idx: NodeIdx,
    ) -> bool {
        let checked = |p: &&'static str| {
            self.get(p)
                .filter(|r| r.checked)
                .and_then(|r| r.events.node_check)
        };
        if key.kind != Kind::Pod || !plugins.iter().any(|p| checked(p).is_some()) {
            return true;
        }
        let (Some(entry), Some(node)) = (cx.cache.pod(key), cx.cache.node(idx)) else {
            return true;
        };
        if !cx.reservations.on_node(idx).is_empty() {
            return true;
        }
        plugins
            .iter()
            .filter_map(checked)
            .all(|check| check(cx, event, &entry.info, node))
    }
}

/// A hint's answer for the item `key`: asked only about a pod the cache holds; anything
/// else may be helped.
fn hint_says(
    cx: &Cluster,
    hint: crate::framework::events::QueueingHintFn,
    event: &ClusterEvent,
    key: &ObjectKey,
) -> bool {
    if key.kind != Kind::Pod {
        return true;
    }
    match cx.cache.pod(key) {
        Some(entry) => hint(cx, event, &entry.info),
        None => true,
    }
}

#[cfg(test)]
mod tests;
