//! kube-scheduler plugins that berth accepts in configuration but that have nothing to do
//! here (`PrioritySort` and `DefaultBinder` are built into the core).

use crate::framework::plugin::{Plugin, Points};

/// A plugin that implements no extension point.
#[derive(Debug)]
pub struct NoOp {
    name: &'static str,
}

impl NoOp {
    /// A no-op plugin with a known name.
    pub fn new(name: &str) -> Self {
        let name = super::names::ALL
            .iter()
            .copied()
            .find(|n| *n == name)
            .unwrap_or("NoOp");
        Self { name }
    }
}

impl Plugin for NoOp {
    fn name(&self) -> &'static str {
        self.name
    }
    fn points(&self) -> Points {
        Points::default()
    }
}
