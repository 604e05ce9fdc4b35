//! TaintToleration (to be implemented).

use crate::framework::config::ConfigError;
use crate::framework::{Plugin, Points};

/// Per-cycle state.
#[derive(Debug, Clone, Default)]
pub struct State {}

/// The TaintToleration plugin.
#[derive(Debug)]
pub struct TaintToleration;

impl TaintToleration {
    /// Builds the plugin from its args.
    pub fn new(_args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        Ok(Self)
    }
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        super::names::TAINT_TOLERATION
    }
    fn points(&self) -> Points {
        Points::default()
    }
}
