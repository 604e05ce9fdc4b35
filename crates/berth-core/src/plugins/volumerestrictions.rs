//! VolumeRestrictions (to be implemented).

use crate::framework::config::ConfigError;
use crate::framework::{Plugin, Points};

/// Per-cycle state.
#[derive(Debug, Clone, Default)]
pub struct State {}

/// The VolumeRestrictions plugin.
#[derive(Debug)]
pub struct VolumeRestrictions;

impl VolumeRestrictions {
    /// Builds the plugin from its args.
    pub fn new(_args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        Ok(Self)
    }
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        super::names::VOLUME_RESTRICTIONS
    }
    fn points(&self) -> Points {
        Points::default()
    }
}
