//! PodTopologySpread (to be implemented).

use crate::framework::config::ConfigError;
use crate::framework::{Plugin, Points};

/// Per-cycle state.
#[derive(Debug, Clone, Default)]
pub struct State {}

/// PreScore state.
#[derive(Debug, Clone, Default)]
pub struct ScoreState {}

/// The PodTopologySpread plugin.
#[derive(Debug)]
pub struct PodTopologySpread;

impl PodTopologySpread {
    /// Builds the plugin from its args.
    pub fn new(_args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        Ok(Self)
    }
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        crate::plugins::names::POD_TOPOLOGY_SPREAD
    }
    fn points(&self) -> Points {
        Points::default()
    }
}
