//! `KubeSchedulerConfiguration` (`kubescheduler.config.k8s.io/v1`), the parts berth reads.

use serde::Deserialize;

/// A configuration berth cannot use: unknown plugins, invalid args.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// The field path (`profiles[0].plugins.filter.enabled[1].name`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// A new error.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Prefixes the field path.
    pub fn within(mut self, prefix: &str) -> Self {
        self.field = if self.field.is_empty() {
            prefix.to_string()
        } else {
            format!("{prefix}.{}", self.field)
        };
        self
    }
}

/// The configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeSchedulerConfiguration {
    /// `kubescheduler.config.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `KubeSchedulerConfiguration`.
    #[serde(default)]
    pub kind: String,
    /// Global `percentageOfNodesToScore` (0: adaptive).
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<u32>,
    /// Scheduling profiles.
    #[serde(default)]
    pub profiles: Vec<ProfileConfig>,
    // The fields below have no meaning in berth (process, client and queue settings). They
    // are accepted and ignored, as kube-scheduler's strict decoding accepts them, so that a
    // file written for kube-scheduler (scheduler-plugins' sample sets `leaderElection` and
    // `clientConnection`) loads unchanged; a misspelt top-level field is still an error.
    /// Accepted and ignored.
    #[serde(default)]
    pub parallelism: Option<serde_json::Value>,
    /// Accepted and ignored.
    #[serde(default)]
    pub leader_election: Option<serde_json::Value>,
    /// Accepted and ignored.
    #[serde(default)]
    pub client_connection: Option<serde_json::Value>,
    /// Accepted and ignored.
    #[serde(default)]
    pub healthz_bind_address: Option<serde_json::Value>,
    /// Accepted and ignored.
    #[serde(default)]
    pub metrics_bind_address: Option<serde_json::Value>,
    /// Accepted and ignored.
    #[serde(default)]
    pub enable_profiling: Option<serde_json::Value>,
    /// Accepted and ignored.
    #[serde(default)]
    pub enable_contention_profiling: Option<serde_json::Value>,
    /// Accepted and ignored.
    #[serde(default)]
    pub pod_initial_backoff_seconds: Option<serde_json::Value>,
    /// Accepted and ignored.
    #[serde(default)]
    pub pod_max_backoff_seconds: Option<serde_json::Value>,
    /// Accepted and ignored.
    #[serde(default)]
    pub extenders: Option<serde_json::Value>,
    /// Accepted and ignored.
    #[serde(default)]
    pub delay_cache_until_active: Option<serde_json::Value>,
}

/// One profile.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProfileConfig {
    /// Pods with this `spec.schedulerName` use the profile.
    #[serde(default)]
    pub scheduler_name: Option<String>,
    /// Per-profile `percentageOfNodesToScore`.
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<u32>,
    /// Plugin sets per extension point.
    #[serde(default)]
    pub plugins: Option<PluginsConfig>,
    /// Plugin args.
    #[serde(default)]
    pub plugin_config: Vec<PluginConfig>,
}

/// Plugins per extension point.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct PluginsConfig {
    #[serde(default)]
    pub pre_enqueue: PluginSet,
    #[serde(default)]
    pub queue_sort: PluginSet,
    #[serde(default)]
    pub pre_filter: PluginSet,
    #[serde(default)]
    pub filter: PluginSet,
    #[serde(default)]
    pub post_filter: PluginSet,
    #[serde(default)]
    pub pre_score: PluginSet,
    #[serde(default)]
    pub score: PluginSet,
    #[serde(default)]
    pub reserve: PluginSet,
    #[serde(default)]
    pub permit: PluginSet,
    #[serde(default)]
    pub pre_bind: PluginSet,
    #[serde(default)]
    pub bind: PluginSet,
    #[serde(default)]
    pub post_bind: PluginSet,
    #[serde(default)]
    pub multi_point: PluginSet,
}

/// Enabled and disabled plugins of one point.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSet {
    /// Plugins to enable, in order.
    #[serde(default)]
    pub enabled: Vec<PluginRef>,
    /// Plugins to disable (`*`: all defaults).
    #[serde(default)]
    pub disabled: Vec<PluginRef>,
}

/// A plugin named in a set.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginRef {
    /// The plugin's name.
    pub name: String,
    /// Score weight (Score and multiPoint only).
    #[serde(default)]
    pub weight: Option<i64>,
}

/// Args for one plugin.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginConfig {
    /// The plugin's name.
    pub name: String,
    /// Its args, as the plugin defines them.
    #[serde(default)]
    pub args: serde_json::Value,
}
