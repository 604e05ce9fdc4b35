//! NodeVolumeLimits (to be implemented).

use crate::framework::config::ConfigError;
use crate::framework::{Plugin, Points};

/// Per-cycle state.
#[derive(Debug, Clone, Default)]
pub struct State {}

/// The NodeVolumeLimits plugin.
#[derive(Debug)]
pub struct NodeVolumeLimits;

impl NodeVolumeLimits {
    /// Builds the plugin from its args.
    pub fn new(_args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        Ok(Self)
    }
}

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        super::names::NODE_VOLUME_LIMITS
    }
    fn points(&self) -> Points {
        Points::default()
    }
}
