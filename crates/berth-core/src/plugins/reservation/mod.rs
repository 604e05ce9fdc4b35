//! Reservation: Koordinator's reservation plugin (to be implemented).

use std::collections::HashMap;

use crate::framework::config::ConfigError;
use crate::framework::{Plugin, Points};
use crate::model::node::NodeIdx;
use crate::model::pod::PodInfo;
use crate::resources::Resources;

/// Default score weight: high enough that an owner lands on its reservation's node when it
/// fits there, whatever the other scores say.
pub const DEFAULT_WEIGHT: i64 = 20;

/// Per-cycle state: the reservations the pod may use, by node.
#[derive(Debug, Clone, Default)]
pub struct State {
    restore: HashMap<NodeIdx, Resources>,
}

impl State {
    /// What the pod's matched reservations hold on `node` and give back to it.
    pub fn restored(&self, _pod: &PodInfo, node: NodeIdx) -> Option<&Resources> {
        self.restore.get(&node)
    }
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
