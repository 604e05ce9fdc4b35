//! NodeResourceTopologyMatch (to be implemented).

use crate::framework::config::ConfigError;
use crate::framework::{Plugin, Points};

/// Per-cycle state.
#[derive(Debug, Clone, Default)]
pub struct State {}

/// The NodeResourceTopologyMatch plugin.
#[derive(Debug)]
pub struct NodeResourceTopologyMatch;

impl NodeResourceTopologyMatch {
    /// Builds the plugin from its args.
    pub fn new(_args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        Ok(Self)
    }
}

impl Plugin for NodeResourceTopologyMatch {
    fn name(&self) -> &'static str {
        crate::plugins::names::NODE_RESOURCE_TOPOLOGY_MATCH
    }
    fn points(&self) -> Points {
        Points::default()
    }
}
