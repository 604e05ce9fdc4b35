//! `NodeResourcesFitArgs` and `NodeResourcesBalancedAllocationArgs`.

use serde::Deserialize;

use crate::framework::config::ConfigError;

/// A resource and its weight in scoring.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSpec {
    /// Resource name.
    pub name: String,
    /// Weight (1..=100; 0 or absent means 1).
    #[serde(default)]
    pub weight: i64,
}

/// Which scorer NodeResourcesFit uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum ScoringStrategyType {
    /// Prefer emptier nodes (default).
    #[default]
    LeastAllocated,
    /// Prefer fuller nodes (bin packing).
    MostAllocated,
    /// Score by a piecewise-linear function of utilisation.
    RequestedToCapacityRatio,
}

/// A point of the RequestedToCapacityRatio shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UtilizationShapePoint {
    /// Utilisation, 0..=100.
    pub utilization: i64,
    /// Score, 0..=10.
    pub score: i64,
}

/// `requestedToCapacityRatio` args.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestedToCapacityRatioParam {
    /// The shape.
    #[serde(default)]
    pub shape: Vec<UtilizationShapePoint>,
}

/// The scoring strategy.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScoringStrategy {
    /// The scorer.
    #[serde(rename = "type", default)]
    pub type_: ScoringStrategyType,
    /// Resources and weights (default cpu:1, memory:1).
    #[serde(default = "default_resources")]
    pub resources: Vec<ResourceSpec>,
    /// Shape for RequestedToCapacityRatio.
    #[serde(default)]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

impl Default for ScoringStrategy {
    fn default() -> Self {
        Self {
            type_: ScoringStrategyType::LeastAllocated,
            resources: default_resources(),
            requested_to_capacity_ratio: None,
        }
    }
}

pub(crate) fn default_resources() -> Vec<ResourceSpec> {
    vec![
        ResourceSpec {
            name: "cpu".into(),
            weight: 1,
        },
        ResourceSpec {
            name: "memory".into(),
            weight: 1,
        },
    ]
}

/// `NodeResourcesFitArgs`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FitArgs {
    /// Extended resources not checked by Filter.
    #[serde(default)]
    pub ignored_resources: Vec<String>,
    /// Resource groups (prefix before `/`) not checked by Filter.
    #[serde(default)]
    pub ignored_resource_groups: Vec<String>,
    /// The scoring strategy.
    #[serde(default)]
    pub scoring_strategy: Option<ScoringStrategy>,
}

impl FitArgs {
    /// Validates as kube-scheduler's `ValidateNodeResourcesFitArgs`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let Some(s) = &self.scoring_strategy else {
            return Ok(());
        };
        validate_resources(&s.resources, "scoringStrategy.resources")?;
        if s.type_ == ScoringStrategyType::RequestedToCapacityRatio {
            let shape = s
                .requested_to_capacity_ratio
                .as_ref()
                .map(|r| r.shape.as_slice())
                .unwrap_or(&[]);
            if shape.is_empty() {
                return Err(ConfigError::new(
                    "scoringStrategy.requestedToCapacityRatio.shape",
                    "at least one point must be specified",
                ));
            }
            for (i, p) in shape.iter().enumerate() {
                if !(0..=100).contains(&p.utilization) {
                    return Err(ConfigError::new(
                        format!("scoringStrategy.requestedToCapacityRatio.shape[{i}].utilization"),
                        "utilization values must be within the range [0, 100]",
                    ));
                }
                if !(0..=10).contains(&p.score) {
                    return Err(ConfigError::new(
                        format!("scoringStrategy.requestedToCapacityRatio.shape[{i}].score"),
                        "score values must be within the range [0, 10]",
                    ));
                }
                if i > 0 && p.utilization <= shape[i - 1].utilization {
                    return Err(ConfigError::new(
                        format!("scoringStrategy.requestedToCapacityRatio.shape[{i}].utilization"),
                        "utilization values must be sorted in increasing order",
                    ));
                }
            }
        }
        Ok(())
    }
}

pub(crate) fn validate_resources(res: &[ResourceSpec], field: &str) -> Result<(), ConfigError> {
    for (i, r) in res.iter().enumerate() {
        if !(0..=100).contains(&r.weight) {
            return Err(ConfigError::new(
                format!("{field}[{i}].weight"),
                "resource weight must be in the range [1, 100]",
            ));
        }
        if r.name.is_empty() {
            return Err(ConfigError::new(
                format!("{field}[{i}].name"),
                "must not be empty",
            ));
        }
    }
    Ok(())
}

/// `NodeResourcesBalancedAllocationArgs`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BalancedAllocationArgs {
    /// Resources considered (default cpu and memory).
    #[serde(default = "default_resources")]
    pub resources: Vec<ResourceSpec>,
}

impl Default for BalancedAllocationArgs {
    fn default() -> Self {
        Self {
            resources: default_resources(),
        }
    }
}
