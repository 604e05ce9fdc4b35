//! Reservation: Koordinator's reservation plugin (being implemented; the public API of
//! [`State`] and [`hidden`] is stable and meant for the other plugins).

use std::collections::HashMap;

use smallvec::SmallVec;

use crate::framework::config::ConfigError;
use crate::framework::{CycleState, Plugin, Points};
use crate::model::node::NodeIdx;
use crate::model::pod::{HostPort, PodInfo};
use crate::object::ObjectKey;
use crate::resources::Resources;

/// Default score weight: high enough that an owner lands on its reservation's node when it
/// fits there, whatever the other scores say.
pub const DEFAULT_WEIGHT: i64 = 20;

/// What the pod being scheduled may take back on one node.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    restore: Resources,
    ports: SmallVec<[HostPort; 2]>,
    hidden: SmallVec<[std::sync::Arc<str>; 2]>,
}

/// Per-cycle state: the reservations the pod may use, by node.
#[derive(Debug, Clone, Default)]
pub struct State {
    reserve_pod: bool,
    ignored: bool,
    nodes: HashMap<NodeIdx, NodeState>,
    claims: HashMap<ObjectKey, u32>,
}

impl State {
    /// What the pod's matched reservations hold on `node` and give back to it (added to the
    /// node's free capacity by NodeResourcesFit).
    pub fn restored(&self, _pod: &PodInfo, node: NodeIdx) -> Option<&Resources> {
        self.nodes.get(&node).map(|n| &n.restore)
    }

    /// Host ports held on `node` by reservations the pod may use: NodePorts must not count
    /// them against the pod (they are in `NodeInfo::reserved_ports`).
    pub fn restored_ports(&self, _pod: &PodInfo, node: NodeIdx) -> &[HostPort] {
        self.nodes.get(&node).map_or(&[], |n| &n.ports)
    }

    /// Whether `existing`, a pod on `node`, is a reservation's stand-in that the pod being
    /// scheduled must not see: its own matched reservations (Koordinator removes them from
    /// the cycle's NodeInfo), every reservation for a reservation-ignored pod, and every
    /// reservation when the pod is itself a reservation (a reservation's affinity and spread
    /// are not checked against existing reservations). InterPodAffinity, PodTopologySpread
    /// and VolumeRestrictions skip such pods.
    pub fn hides(&self, existing: &PodInfo, node: NodeIdx) -> bool {
        let crate::model::pod::PodKind::ReservePod { reservation } = &existing.kind else {
            return false;
        };
        if self.reserve_pod || self.ignored {
            return true;
        }
        self.nodes
            .get(&node)
            .is_some_and(|n| n.hidden.iter().any(|h| h == reservation))
    }

    /// How many of `claim`'s users ([`crate::cache::Cluster::pvc_users`]) are reservations
    /// the pod may use: VolumeRestrictions subtracts them (a ReadWriteOncePod claim held by
    /// the pod's own reservation does not conflict).
    pub fn restored_claim_users(&self, claim: &ObjectKey) -> u32 {
        self.claims.get(claim).copied().unwrap_or(0)
    }
}

/// [`State::hides`] for a cycle (false when the Reservation plugin did not run).
pub fn hidden(state: &CycleState, existing: &PodInfo, node: NodeIdx) -> bool {
    state
        .reservation
        .as_ref()
        .is_some_and(|s| s.hides(existing, node))
}

/// The Reservation plugin.
#[derive(Debug)]
pub struct Reservation;

impl Reservation {
    /// Builds the plugin from its args.
    pub fn new(_args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        Ok(Self)
    }
}

impl Plugin for Reservation {
    fn name(&self) -> &'static str {
        crate::plugins::names::RESERVATION
    }
    fn points(&self) -> Points {
        Points::default()
    }
}
