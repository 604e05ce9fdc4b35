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
    /// Applies kube-scheduler's defaulting (`SetDefaults_NodeResourcesFitArgs`): no strategy
    /// means LeastAllocated over cpu and memory, no resources means cpu and memory, and a
    /// weight of 0 means 1.
    pub fn defaulted(mut self) -> Self {
        let s = self
            .scoring_strategy
            .get_or_insert_with(ScoringStrategy::default);
        default_resource_list(&mut s.resources);
        self
    }

    /// Validates as kube-scheduler's `ValidateNodeResourcesFitArgs` (after defaulting); the
    /// first problem found is reported.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (i, r) in self.ignored_resources.iter().enumerate() {
            if r.is_empty() {
                return Err(ConfigError::new(
                    format!("ignoredResources[{i}]"),
                    "name part must be non-empty",
                ));
            }
        }
        for (i, g) in self.ignored_resource_groups.iter().enumerate() {
            if g.contains('/') {
                return Err(ConfigError::new(
                    format!("ignoredResourceGroups[{i}]"),
                    format!("Invalid value: {g:?}: resource group name can't contain '/'"),
                ));
            }
            if g.is_empty() {
                return Err(ConfigError::new(
                    format!("ignoredResourceGroups[{i}]"),
                    "name part must be non-empty",
                ));
            }
        }
        let Some(s) = &self.scoring_strategy else {
            return Ok(());
        };
        validate_resources(&s.resources, "scoringStrategy.resources")?;
        match (s.type_, &s.requested_to_capacity_ratio) {
            (ScoringStrategyType::RequestedToCapacityRatio, None) => Err(ConfigError::new(
                "scoringStrategy.requestedToCapacityRatio",
                "Required value: must be specified when type is RequestedToCapacityRatio",
            )),
            (ScoringStrategyType::RequestedToCapacityRatio, Some(r)) => {
                validate_shape(&r.shape, "scoringStrategy.requestedToCapacityRatio.shape")
            }
            (_, Some(_)) => Err(ConfigError::new(
                "scoringStrategy.requestedToCapacityRatio",
                "Forbidden: must be nil when type is not RequestedToCapacityRatio",
            )),
            (_, None) => Ok(()),
        }
    }
}

/// `validateFunctionShape`: sorted first, then ranges.
pub(crate) fn validate_shape(
    shape: &[UtilizationShapePoint],
    field: &str,
) -> Result<(), ConfigError> {
    if shape.is_empty() {
        return Err(ConfigError::new(
            field,
            "Required value: at least one point must be specified",
        ));
    }
    for i in 1..shape.len() {
        if shape[i - 1].utilization >= shape[i].utilization {
            return Err(ConfigError::new(
                format!("{field}[{i}].utilization"),
                format!(
                    "Invalid value: {}: values must be sorted in increasing order",
                    shape[i].utilization
                ),
            ));
        }
    }
    for (i, p) in shape.iter().enumerate() {
        if !(0..=100).contains(&p.utilization) {
            return Err(ConfigError::new(
                format!("{field}[{i}].utilization"),
                format!(
                    "Invalid value: {}: not in valid range [0, 100]",
                    p.utilization
                ),
            ));
        }
        if !(0..=10).contains(&p.score) {
            return Err(ConfigError::new(
                format!("{field}[{i}].score"),
                format!("Invalid value: {}: not in valid range [0, 10]", p.score),
            ));
        }
    }
    Ok(())
}

/// Empty list: cpu and memory; weight 0: 1.
fn default_resource_list(res: &mut Vec<ResourceSpec>) {
    if res.is_empty() {
        *res = default_resources();
    }
    for r in res.iter_mut() {
        if r.weight == 0 {
            r.weight = 1;
        }
    }
}

/// `validateResources`: weights in `(0, 100]` (after defaulting).
pub(crate) fn validate_resources(res: &[ResourceSpec], field: &str) -> Result<(), ConfigError> {
    for (i, r) in res.iter().enumerate() {
        if r.name.is_empty() {
            return Err(ConfigError::new(
                format!("{field}[{i}].name"),
                "must not be empty",
            ));
        }
        if r.weight <= 0 || r.weight > 100 {
            return Err(ConfigError::new(
                format!("{field}[{i}].weight"),
                format!(
                    "Invalid value: {}: resource weight of {} not in valid range (0, 100]",
                    r.weight, r.name
                ),
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

impl BalancedAllocationArgs {
    /// Applies kube-scheduler's defaulting: no resources means cpu and memory, weight 0
    /// means 1.
    pub fn defaulted(mut self) -> Self {
        default_resource_list(&mut self.resources);
        self
    }

    /// Validates as `ValidateNodeResourcesBalancedAllocationArgs`: no duplicate resource,
    /// every weight 1 (the score is a standard deviation, weights have no meaning).
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (i, r) in self.resources.iter().enumerate() {
            if r.name.is_empty() {
                return Err(ConfigError::new(
                    format!("resources[{i}].name"),
                    "must not be empty",
                ));
            }
            if self.resources[..i].iter().any(|o| o.name == r.name) {
                return Err(ConfigError::new(
                    format!("resources[{i}].name"),
                    format!("Duplicate value: {:?}", r.name),
                ));
            }
            if r.weight != 1 {
                return Err(ConfigError::new(
                    format!("resources[{i}].weight"),
                    format!("Invalid value: {}: must be 1", r.weight),
                ));
            }
        }
        Ok(())
    }
}
