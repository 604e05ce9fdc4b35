//! InterPodAffinity (to be implemented).

use crate::framework::config::ConfigError;
use crate::framework::{Plugin, Points};

/// Per-cycle state.
#[derive(Debug, Clone, Default)]
pub struct State {}

/// The InterPodAffinity plugin.
#[derive(Debug)]
pub struct InterPodAffinity;

impl InterPodAffinity {
    /// Builds the plugin from its args.
    pub fn new(_args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        Ok(Self)
    }
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        crate::plugins::names::INTER_POD_AFFINITY
    }
    fn points(&self) -> Points {
        Points::default()
    }
}
