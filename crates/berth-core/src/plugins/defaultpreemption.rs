//! DefaultPreemption (to be implemented).

use crate::framework::config::ConfigError;
use crate::framework::{Plugin, Points};

/// Per-cycle state.
#[derive(Debug, Clone, Default)]
pub struct State {}

/// The DefaultPreemption plugin.
#[derive(Debug)]
pub struct DefaultPreemption;

impl DefaultPreemption {
    /// Builds the plugin from its args.
    pub fn new(_args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        Ok(Self)
    }
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        super::names::DEFAULT_PREEMPTION
    }
    fn points(&self) -> Points {
        Points::default()
    }
}
