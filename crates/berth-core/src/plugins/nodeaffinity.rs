//! NodeAffinity (to be implemented).

use crate::framework::config::ConfigError;
use crate::framework::{Plugin, Points};

/// Per-cycle state.
#[derive(Debug, Clone, Default)]
pub struct State {}

/// The NodeAffinity plugin.
#[derive(Debug)]
pub struct NodeAffinity;

impl NodeAffinity {
    /// Builds the plugin from its args.
    pub fn new(_args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        Ok(Self)
    }
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        super::names::NODE_AFFINITY
    }
    fn points(&self) -> Points {
        Points::default()
    }
}
