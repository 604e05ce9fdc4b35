//! NodePorts (to be implemented).

use crate::framework::config::ConfigError;
use crate::framework::{Plugin, Points};

/// Per-cycle state.
#[derive(Debug, Clone, Default)]
pub struct State {}

/// The NodePorts plugin.
#[derive(Debug)]
pub struct NodePorts;

impl NodePorts {
    /// Builds the plugin from its args.
    pub fn new(_args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        Ok(Self)
    }
}

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        super::names::NODE_PORTS
    }
    fn points(&self) -> Points {
        Points::default()
    }
}
