//! NodeResourcesFit and NodeResourcesBalancedAllocation.

pub(crate) mod args;
mod balanced;
mod fit;
pub(crate) mod scoring;

pub use args::{
    FitArgs, ResourceSpec, ScoringStrategy, ScoringStrategyType, UtilizationShapePoint,
};
pub use balanced::BalancedAllocation;
pub use fit::{insufficient_reason, Fit};

#[cfg(test)]
mod fast_path_tests;

/// The Reservation plugin's cycle state when the pod may get resources back on some node
/// ([`crate::plugins::reservation::State::restored`]), `None` when it gets nothing back
/// anywhere: the score loops pick their per-node work by it once per cycle.
fn gives_back(state: &crate::framework::CycleState) -> Option<&crate::plugins::reservation::State> {
    state
        .reservation
        .as_deref()
        .filter(|r| !r.restores_nothing())
}
