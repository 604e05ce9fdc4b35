//! `NodeResourceTopologyMatchArgs`: the plugin arguments, named as scheduler-plugins names them
//! (`apis/config/v1`), plus berth's validation and defaults.
//!
//! ```yaml
//! args:
//!   scoringStrategy:
//!     type: LeastAllocated          # MostAllocated | LeastAllocated | BalancedAllocation | LeastNUMANodes
//!     resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]
//!   cacheResyncPeriodSeconds: 5     # berth default 5; <= 0 disables the cache (passthrough)
//!   discardReservedNodes: false     # true: DiscardReserved cache (takes precedence)
//!   cache:
//!     foreignPodsDetect: All        # None | All | OnlyExclusiveResources
//!     resyncMethod: Autodetect      # Autodetect | All | OnlyExclusiveResources
//!     informerMode: Dedicated       # Shared | Dedicated
//!     resyncScope: All              # All | OnlyResources
//!     filteredOutThreshold: 1       # berth: consecutive rejections that dirty a node
//!   preemptionMode: Disabled        # Disabled | Enabled (accepted; berth does not implement it)
//! ```
//!
//! Unlike upstream, berth enables the cache when `cacheResyncPeriodSeconds` is absent (5 s).
//! Unknown enum values are rejected with the field path (upstream silently falls back for the
//! `cache` enums).

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use super::reserve_cache::{
    CacheConfig, CacheMode, ForeignPodsDetect, ResyncMethod, ResyncScope, DEFAULT_RESYNC_PERIOD_MS,
};
use super::score::{ScoringStrategy, ScoringStrategyType};
use super::types::ResourceName;

/// berth's default `cacheResyncPeriodSeconds`.
pub const DEFAULT_CACHE_RESYNC_PERIOD_SECONDS: i64 = DEFAULT_RESYNC_PERIOD_MS / 1000;

/// The plugin arguments as written in the scheduler configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeResourceTopologyMatchArgs {
    /// Scoring model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scoring_strategy: Option<ScoringStrategyArgs>,
    /// Resync period; `<= 0` disables the cache. berth default: 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_resync_period_seconds: Option<i64>,
    /// Reject nodes with in-flight reservations instead of caching (precedence over the
    /// period).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub discard_reserved_nodes: bool,
    /// Cache fine tuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheArgs>,
    /// NUMA-aware preemption (`Disabled` | `Enabled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_mode: Option<String>,
}

/// `scoringStrategy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScoringStrategyArgs {
    /// `MostAllocated` | `LeastAllocated` | `BalancedAllocation` | `LeastNUMANodes`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Resource weights.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceSpec>,
}

/// `scoringStrategy.resources[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceSpec {
    /// Resource name.
    pub name: String,
    /// Weight (0 means the default, 1).
    #[serde(default)]
    pub weight: i64,
}

/// `cache`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheArgs {
    /// `None` | `All` | `OnlyExclusiveResources` (default `All`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_pods_detect: Option<String>,
    /// `Autodetect` | `All` | `OnlyExclusiveResources` (default `Autodetect`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_method: Option<String>,
    /// `Shared` | `Dedicated` (default `Dedicated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub informer_mode: Option<String>,
    /// `All` | `OnlyResources` (default `All`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_scope: Option<String>,
    /// berth extension: consecutive filter rejections that make a node dirty (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filtered_out_threshold: Option<i64>,
}

/// `cache.informerMode`: which pods the resync and foreign-pod detection see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InformerMode {
    /// Only Running pods (the scheduler's shared informer).
    Shared,
    /// Every bound pod not Pending (Running, Succeeded, Failed, Unknown), like the agents.
    #[default]
    Dedicated,
}

/// `preemptionMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PreemptionMode {
    /// Default.
    #[default]
    Disabled,
    /// NUMA-aware preemption dry-run (not implemented by berth).
    Enabled,
}

/// Validated, defaulted plugin configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaPluginConfig {
    /// Scoring strategy and weights.
    pub scoring: ScoringStrategy,
    /// Reserve cache configuration.
    pub cache: CacheConfig,
    /// Pod source mode.
    pub informer_mode: InformerMode,
    /// Preemption mode.
    pub preemption: PreemptionMode,
}

impl Default for NumaPluginConfig {
    fn default() -> Self {
        match NodeResourceTopologyMatchArgs::default().validate() {
            Ok(c) => c,
            // The empty args are always valid; keep a literal fallback anyway.
            Err(_) => Self {
                scoring: ScoringStrategy::default(),
                cache: CacheConfig::default(),
                informer_mode: InformerMode::default(),
                preemption: PreemptionMode::default(),
            },
        }
    }
}

/// One invalid field, formatted like Kubernetes field errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: Invalid value: {value:?}: {reason}")]
pub struct FieldError {
    /// Field path, e.g. `scoringStrategy.type`.
    pub field: String,
    /// The offending value.
    pub value: String,
    /// Why.
    pub reason: String,
}

/// All invalid fields of a `NodeResourceTopologyMatchArgs`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid NodeResourceTopologyMatchArgs: {}", join(.errors))]
pub struct ArgsError {
    /// The invalid fields, in field order.
    pub errors: Vec<FieldError>,
}

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn parse_enum<T: Copy>(
    errors: &mut Vec<FieldError>,
    field: &str,
    value: Option<&str>,
    default: T,
    table: &[(&str, T)],
) -> T {
    let Some(v) = value else {
        return default;
    };
    match table.iter().find(|(name, _)| *name == v) {
        Some((_, t)) => *t,
        None => {
            let allowed: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
            errors.push(FieldError {
                field: field.to_string(),
                value: v.to_string(),
                reason: format!("must be one of {}", allowed.join(", ")),
            });
            default
        }
    }
}

impl NodeResourceTopologyMatchArgs {
    /// Reads the args from a JSON value (as found under `pluginConfig[].args`).
    pub fn from_json(value: serde_json::Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(value)
    }

    /// Validates and applies defaults. Every invalid field is reported.
    pub fn validate(&self) -> Result<NumaPluginConfig, ArgsError> {
        let mut errors = Vec::new();
        let scoring = self.scoring(&mut errors);
        let (cache, informer_mode) = self.cache_config(&mut errors);
        let preemption = parse_enum(
            &mut errors,
            "preemptionMode",
            self.preemption_mode.as_deref(),
            PreemptionMode::Disabled,
            &[
                ("Disabled", PreemptionMode::Disabled),
                ("Enabled", PreemptionMode::Enabled),
            ],
        );

        if !errors.is_empty() {
            return Err(ArgsError { errors });
        }
        Ok(NumaPluginConfig {
            scoring,
            cache,
            informer_mode,
            preemption,
        })
    }

    /// `scoringStrategy`: its type and resource weights.
    fn scoring(&self, errors: &mut Vec<FieldError>) -> ScoringStrategy {
        let kind = match self.scoring_strategy.as_ref().and_then(|s| s.type_.as_deref()) {
            None => ScoringStrategyType::LeastAllocated,
            Some(t) => ScoringStrategyType::parse(t).unwrap_or_else(|| {
                errors.push(FieldError {
                    field: "scoringStrategy.type".into(),
                    value: t.to_string(),
                    reason: "invalid ScoringStrategyType (must be one of MostAllocated, LeastAllocated, BalancedAllocation, LeastNUMANodes)".into(),
                });
                ScoringStrategyType::LeastAllocated
            }),
        };
        let mut scoring = ScoringStrategy::new(kind);
        let specs = self
            .scoring_strategy
            .as_ref()
            .map(|s| s.resources.as_slice())
            .unwrap_or(&[]);
        if !specs.is_empty() {
            let mut weights: SmallVec<[(ResourceName, i64); 4]> = SmallVec::new();
            for (i, spec) in specs.iter().enumerate() {
                if spec.name.is_empty() {
                    errors.push(FieldError {
                        field: format!("scoringStrategy.resources[{i}].name"),
                        value: String::new(),
                        reason: "resource name must not be empty".into(),
                    });
                    continue;
                }
                if spec.weight < 0 {
                    errors.push(FieldError {
                        field: format!("scoringStrategy.resources[{i}].weight"),
                        value: spec.weight.to_string(),
                        reason: "weight must not be negative".into(),
                    });
                    continue;
                }
                let w = if spec.weight == 0 { 1 } else { spec.weight };
                match weights.iter_mut().find(|(n, _)| n.as_str() == spec.name) {
                    Some(slot) => slot.1 = w,
                    None => weights.push((ResourceName::new(&spec.name), w)),
                }
            }
            scoring.weights = weights;
        }

        scoring
    }

    /// The reserve cache's settings (`cacheResyncPeriodSeconds`, `discardReservedNodes`,
    /// `cache.*`), and the informer mode.
    fn cache_config(&self, errors: &mut Vec<FieldError>) -> (CacheConfig, InformerMode) {
        let period_s = self
            .cache_resync_period_seconds
            .unwrap_or(DEFAULT_CACHE_RESYNC_PERIOD_SECONDS);
        let mode = if self.discard_reserved_nodes {
            CacheMode::DiscardReserved
        } else if period_s <= 0 {
            CacheMode::Passthrough
        } else {
            CacheMode::OverReserve
        };
        let cache_args = self.cache.clone().unwrap_or_default();
        let foreign_pods_detect = parse_enum(
            errors,
            "cache.foreignPodsDetect",
            cache_args.foreign_pods_detect.as_deref(),
            ForeignPodsDetect::All,
            &[
                ("None", ForeignPodsDetect::None),
                ("All", ForeignPodsDetect::All),
                (
                    "OnlyExclusiveResources",
                    ForeignPodsDetect::OnlyExclusiveResources,
                ),
            ],
        );
        let resync_method = parse_enum(
            errors,
            "cache.resyncMethod",
            cache_args.resync_method.as_deref(),
            ResyncMethod::Autodetect,
            &[
                ("Autodetect", ResyncMethod::Autodetect),
                ("All", ResyncMethod::All),
                (
                    "OnlyExclusiveResources",
                    ResyncMethod::OnlyExclusiveResources,
                ),
            ],
        );
        let informer_mode = parse_enum(
            errors,
            "cache.informerMode",
            cache_args.informer_mode.as_deref(),
            InformerMode::Dedicated,
            &[
                ("Shared", InformerMode::Shared),
                ("Dedicated", InformerMode::Dedicated),
            ],
        );
        let resync_scope = parse_enum(
            errors,
            "cache.resyncScope",
            cache_args.resync_scope.as_deref(),
            ResyncScope::All,
            &[
                ("All", ResyncScope::All),
                ("OnlyResources", ResyncScope::OnlyResources),
            ],
        );
        let filtered_out_threshold = match cache_args.filtered_out_threshold {
            None => 1,
            Some(n) if (1..=i64::from(u32::MAX)).contains(&n) => n as u32,
            Some(n) => {
                errors.push(FieldError {
                    field: "cache.filteredOutThreshold".into(),
                    value: n.to_string(),
                    reason: "must be at least 1".into(),
                });
                1
            }
        };
        let cache = CacheConfig {
            mode,
            resync_period_ms: period_s.max(0).saturating_mul(1000),
            resync_method,
            resync_scope,
            foreign_pods_detect,
            filtered_out_threshold,
        };
        (cache, informer_mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_yaml(text: &str) -> NodeResourceTopologyMatchArgs {
        serde_yaml_ng::from_str(text).expect("valid yaml")
    }

    #[test]
    fn defaults() {
        let c = NodeResourceTopologyMatchArgs::default()
            .validate()
            .expect("valid");
        assert_eq!(c.scoring.kind, ScoringStrategyType::LeastAllocated);
        assert_eq!(c.scoring.weight("cpu"), 1);
        assert_eq!(c.scoring.weight("memory"), 1);
        assert_eq!(c.cache.mode, CacheMode::OverReserve);
        assert_eq!(c.cache.resync_period_ms, 5_000);
        assert_eq!(c.cache.resync_method, ResyncMethod::Autodetect);
        assert_eq!(c.cache.resync_scope, ResyncScope::All);
        assert_eq!(c.cache.foreign_pods_detect, ForeignPodsDetect::All);
        assert_eq!(c.cache.filtered_out_threshold, 1);
        assert_eq!(c.informer_mode, InformerMode::Dedicated);
        assert_eq!(c.preemption, PreemptionMode::Disabled);
        assert_eq!(c, NumaPluginConfig::default());
    }

    #[test]
    fn the_reference_sample_config() {
        // From scheduler-plugins-scheduler-config.yaml.
        let args = from_yaml("scoringStrategy:\n  type: \"LeastAllocated\"\n");
        let c = args.validate().expect("valid");
        assert_eq!(c.scoring.kind, ScoringStrategyType::LeastAllocated);
    }

    #[test]
    fn every_field() {
        let args = from_yaml(
            r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: NodeResourceTopologyMatchArgs
scoringStrategy:
  type: LeastNUMANodes
  resources: [{name: cpu, weight: 3}, {name: example.com/dev, weight: 0}]
cacheResyncPeriodSeconds: 10
cache:
  foreignPodsDetect: OnlyExclusiveResources
  resyncMethod: OnlyExclusiveResources
  informerMode: Shared
  resyncScope: OnlyResources
  filteredOutThreshold: 3
preemptionMode: Enabled
"#,
        );
        let c = args.validate().expect("valid");
        assert_eq!(c.scoring.kind, ScoringStrategyType::LeastNUMANodes);
        assert_eq!(c.scoring.weight("cpu"), 3);
        assert_eq!(c.scoring.weight("example.com/dev"), 1);
        assert_eq!(c.scoring.weight("memory"), 1, "unlisted resources weigh 1");
        assert_eq!(c.cache.mode, CacheMode::OverReserve);
        assert_eq!(c.cache.resync_period_ms, 10_000);
        assert_eq!(
            c.cache.foreign_pods_detect,
            ForeignPodsDetect::OnlyExclusiveResources
        );
        assert_eq!(c.cache.resync_method, ResyncMethod::OnlyExclusiveResources);
        assert_eq!(c.cache.resync_scope, ResyncScope::OnlyResources);
        assert_eq!(c.cache.filtered_out_threshold, 3);
        assert_eq!(c.informer_mode, InformerMode::Shared);
        assert_eq!(c.preemption, PreemptionMode::Enabled);
        let json = serde_json::to_value(&args).expect("serializes");
        assert_eq!(json["cacheResyncPeriodSeconds"], 10);
        assert_eq!(json["cache"]["resyncScope"], "OnlyResources");
        assert_eq!(
            NodeResourceTopologyMatchArgs::from_json(json).expect("round trip"),
            args
        );
    }

    #[test]
    fn cache_modes() {
        let c = from_yaml("cacheResyncPeriodSeconds: 0")
            .validate()
            .expect("valid");
        assert_eq!(c.cache.mode, CacheMode::Passthrough);
        let c = from_yaml("cacheResyncPeriodSeconds: -3")
            .validate()
            .expect("valid");
        assert_eq!(c.cache.mode, CacheMode::Passthrough);
        assert_eq!(c.cache.resync_period_ms, 0);
        let c = from_yaml("cacheResyncPeriodSeconds: 0\ndiscardReservedNodes: true")
            .validate()
            .expect("valid");
        assert_eq!(c.cache.mode, CacheMode::DiscardReserved);
        let c = from_yaml("discardReservedNodes: true")
            .validate()
            .expect("valid");
        assert_eq!(c.cache.mode, CacheMode::DiscardReserved);
    }

    #[test]
    fn errors_name_the_field() {
        let err = from_yaml("scoringStrategy: {type: MostRequested}")
            .validate()
            .unwrap_err();
        assert_eq!(err.errors.len(), 1);
        assert_eq!(err.errors[0].field, "scoringStrategy.type");
        assert!(
            err.to_string()
                .contains("scoringStrategy.type: Invalid value: \"MostRequested\""),
            "{err}"
        );

        let err = from_yaml(
            r#"
scoringStrategy: {resources: [{name: cpu, weight: -1}, {name: "", weight: 1}]}
cache: {foreignPodsDetect: Sometimes, resyncMethod: Never, informerMode: Both, resyncScope: Some, filteredOutThreshold: 0}
preemptionMode: Maybe
"#,
        )
        .validate()
        .unwrap_err();
        let fields: Vec<&str> = err.errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "scoringStrategy.resources[0].weight",
                "scoringStrategy.resources[1].name",
                "cache.foreignPodsDetect",
                "cache.resyncMethod",
                "cache.informerMode",
                "cache.resyncScope",
                "cache.filteredOutThreshold",
                "preemptionMode",
            ]
        );
    }

    #[test]
    fn malformed_types_are_serde_errors() {
        assert!(serde_yaml_ng::from_str::<NodeResourceTopologyMatchArgs>(
            "cacheResyncPeriodSeconds: soon"
        )
        .is_err());
    }
}
