//! NodeResourcesFit and NodeResourcesBalancedAllocation.

mod args;
mod balanced;
mod fit;
mod scoring;

pub use args::{
    FitArgs, ResourceSpec, ScoringStrategy, ScoringStrategyType, UtilizationShapePoint,
};
pub use balanced::BalancedAllocation;
pub use fit::{insufficient_reason, Fit};

#[cfg(test)]
mod fast_path_tests;
