//! A profile: the plugins enabled at each extension point, built from configuration.

use std::collections::BTreeMap;

use crate::framework::config::{
    ConfigError, KubeSchedulerConfiguration, PluginSet, PluginsConfig, ProfileConfig,
};
use crate::framework::plugin::{Plugin, Points};
use crate::plugins;

pub use crate::model::DEFAULT_SCHEDULER_NAME;

/// The plugins of one scheduler profile, by extension point.
#[derive(Debug)]
pub struct Profile {
    /// Pods with this `spec.schedulerName` use the profile.
    pub scheduler_name: String,
    /// Per-profile `percentageOfNodesToScore`.
    pub percentage_of_nodes_to_score: Option<u32>,
    /// Plugin instances; the lists below index into it.
    pub plugins: Vec<Box<dyn Plugin>>,
    /// PreEnqueue plugins in order: every instance that has the point, wherever the
    /// configuration enabled it (PreEnqueue has no plugin set of its own here).
    pub pre_enqueue: Vec<usize>,
    /// PreFilter plugins in order.
    pub pre_filter: Vec<usize>,
    /// Filter plugins in order.
    pub filter: Vec<usize>,
    /// Bit `i` set: plugin `i` has a Filter fast path ([`crate::framework::Points::FILTER_FAST`]).
    pub fast_filter: u64,
    /// PostFilter plugins in order.
    pub post_filter: Vec<usize>,
    /// PreScore plugins in order.
    pub pre_score: Vec<usize>,
    /// Score plugins with weights.
    pub score: Vec<(usize, i64)>,
    /// Reserve plugins in order.
    pub reserve: Vec<usize>,
    /// PreBind plugins in order.
    pub pre_bind: Vec<usize>,
}

impl Profile {
    /// The built-in profile: every plugin berth has, with kube-scheduler's default weights.
    pub fn default_profile() -> Self {
        // Default plugin args are always valid.
        match Self::from_config(&ProfileConfig::default()) {
            Ok(p) => p,
            Err(e) => panic!("built-in profile is invalid: {e}"),
        }
    }

    /// All profiles of a configuration (the default profile when it has none).
    pub fn from_configuration(cfg: &KubeSchedulerConfiguration) -> Result<Vec<Self>, ConfigError> {
        // v1beta3 (kube-scheduler 1.23 to 1.28, still what scheduler-plugins documents) has
        // the same profiles, plugin sets and pluginConfig as v1 for everything berth reads.
        const ACCEPTED: [&str; 2] = [
            "kubescheduler.config.k8s.io/v1",
            "kubescheduler.config.k8s.io/v1beta3",
        ];
        if !cfg.api_version.is_empty() && !ACCEPTED.contains(&cfg.api_version.as_str()) {
            return Err(ConfigError::new(
                "apiVersion",
                format!(
                    "unsupported {:?}; want kubescheduler.config.k8s.io/v1 (or v1beta3)",
                    cfg.api_version
                ),
            ));
        }
        if !cfg.kind.is_empty() && cfg.kind != "KubeSchedulerConfiguration" {
            return Err(ConfigError::new(
                "kind",
                format!(
                    "unsupported {:?}; want KubeSchedulerConfiguration",
                    cfg.kind
                ),
            ));
        }
        if let Some(p) = cfg.percentage_of_nodes_to_score {
            if p > 100 {
                return Err(ConfigError::new(
                    "percentageOfNodesToScore",
                    "must be in the range [0, 100]",
                ));
            }
        }
        if cfg.profiles.is_empty() {
            let mut p = Self::from_config(&ProfileConfig::default())?;
            p.percentage_of_nodes_to_score = cfg.percentage_of_nodes_to_score;
            return Ok(vec![p]);
        }
        let mut out: Vec<Self> = Vec::new();
        for (i, pc) in cfg.profiles.iter().enumerate() {
            let mut p = Self::from_config(pc).map_err(|e| e.within(&format!("profiles[{i}]")))?;
            if p.percentage_of_nodes_to_score.is_none() {
                p.percentage_of_nodes_to_score = cfg.percentage_of_nodes_to_score;
            }
            if out.iter().any(|o| o.scheduler_name == p.scheduler_name) {
                return Err(ConfigError::new(
                    format!("profiles[{i}].schedulerName"),
                    format!("duplicate profile {:?}", p.scheduler_name),
                ));
            }
            out.push(p);
        }
        Ok(out)
    }

    /// One profile from its configuration, on top of the default plugin set.
    pub fn from_config(pc: &ProfileConfig) -> Result<Self, ConfigError> {
        if let Some(p) = pc.percentage_of_nodes_to_score {
            if p > 100 {
                return Err(ConfigError::new(
                    "percentageOfNodesToScore",
                    "must be in the range [0, 100]",
                ));
            }
        }
        let args = plugin_args(pc)?;
        // kube-scheduler decodes and validates every pluginConfig entry, whether or not the
        // plugin is enabled: a typo in the args of a disabled plugin is still an error.
        for (name, (_, a)) in &args {
            plugins::build(name, Some(a)).map_err(|e| args_error(&args, name, e))?;
        }
        // multiPoint: defaults, minus disabled, plus enabled (with weights).
        let mut multi: Vec<(String, Option<i64>)> = plugins::DEFAULT_MULTI_POINT
            .iter()
            .map(|(n, w)| (n.to_string(), *w))
            .collect();
        let plugins_cfg = pc.plugins.clone().unwrap_or_default();
        apply_set(&mut multi, &plugins_cfg.multi_point, "plugins.multiPoint")?;
        let mut instances = Instances {
            args: &args,
            plugins: Vec::new(),
            index: BTreeMap::new(),
        };
        let mut multi_idx = Vec::new();
        for (name, w) in &multi {
            multi_idx.push((instances.get(name)?, *w));
        }
        let lists = point_lists(&mut instances, &multi, &multi_idx, &plugins_cfg)?;
        let instances = instances.plugins;
        let idx = |l: &Vec<(usize, i64)>| l.iter().map(|(i, _)| *i).collect::<Vec<_>>();
        Ok(Self {
            scheduler_name: pc
                .scheduler_name
                .clone()
                .unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.to_string()),
            percentage_of_nodes_to_score: pc.percentage_of_nodes_to_score,
            pre_filter: idx(&lists[0]),
            filter: idx(&lists[1]),
            fast_filter: lists[1]
                .iter()
                .filter(|(i, _)| instances[*i].points().contains(Points::FILTER_FAST))
                .fold(0, |m, (i, _)| m | (1u64 << i)),
            post_filter: idx(&lists[2]),
            pre_score: idx(&lists[3]),
            score: lists[4].clone(),
            reserve: idx(&lists[5]),
            pre_bind: idx(&lists[6]),
            pre_enqueue: (0..instances.len())
                .filter(|&i| instances[i].points().contains(Points::PRE_ENQUEUE))
                .collect(),
            plugins: instances,
        })
    }

    /// A plugin instance by name.
    pub fn plugin(&self, name: &str) -> Option<&dyn Plugin> {
        self.plugins
            .iter()
            .find(|p| p.name() == name)
            .map(|b| b.as_ref())
    }
}

/// Plugin args by plugin name, with the `pluginConfig` entry's index.
type Args<'a> = BTreeMap<&'a str, (usize, &'a serde_json::Value)>;

/// The profile's `pluginConfig` by plugin name: an unknown or repeated name is an error
/// at `pluginConfig[i].name`.
fn plugin_args(pc: &ProfileConfig) -> Result<Args<'_>, ConfigError> {
    let mut args: Args<'_> = BTreeMap::new();
    for (i, c) in pc.plugin_config.iter().enumerate() {
        if !plugins::is_known(&c.name) {
            return Err(ConfigError::new(
                format!("pluginConfig[{i}].name"),
                format!("unknown plugin {:?}", c.name),
            ));
        }
        if args.insert(&c.name, (i, &c.args)).is_some() {
            return Err(ConfigError::new(
                format!("pluginConfig[{i}].name"),
                format!("repeated config for plugin {:?}", c.name),
            ));
        }
    }
    Ok(args)
}

/// An error in `name`'s args, reported at `pluginConfig[i].args`, never where the plugin
/// happens to be enabled.
fn args_error(args: &Args<'_>, name: &str, e: ConfigError) -> ConfigError {
    match args.get(name) {
        Some((i, _)) => e.within(&format!("pluginConfig[{i}].args")),
        // Default args are valid; should that ever change, blame the plugin's name.
        None => e.within(&format!("pluginConfig[{name}]")),
    }
}

/// The profile's plugin instances, one per name, built on first use with their args.
struct Instances<'a> {
    args: &'a Args<'a>,
    plugins: Vec<Box<dyn Plugin>>,
    index: BTreeMap<String, usize>,
}

impl Instances<'_> {
    /// The instance of `name`, built if it is not yet.
    fn get(&mut self, name: &str) -> Result<usize, ConfigError> {
        if let Some(i) = self.index.get(name) {
            return Ok(*i);
        }
        let p = plugins::build(name, self.args.get(name).map(|(_, a)| *a))
            .map_err(|e| args_error(self.args, name, e))?;
        self.plugins.push(p);
        self.index.insert(name.to_string(), self.plugins.len() - 1);
        Ok(self.plugins.len() - 1)
    }
}

/// Each extension point's plugins with weights (PreFilter, Filter, PostFilter, PreScore,
/// Score, Reserve, PreBind, then the points berth only checks): the names the multiPoint
/// list enables at the point, then the point's own set applied.
fn point_lists(
    instances: &mut Instances<'_>,
    multi: &[(String, Option<i64>)],
    multi_idx: &[(usize, Option<i64>)],
    plugins_cfg: &PluginsConfig,
) -> Result<Vec<Vec<(usize, i64)>>, ConfigError> {
    let sets = [
        (Points::PRE_FILTER, &plugins_cfg.pre_filter, "preFilter"),
        (Points::FILTER, &plugins_cfg.filter, "filter"),
        (Points::POST_FILTER, &plugins_cfg.post_filter, "postFilter"),
        (Points::PRE_SCORE, &plugins_cfg.pre_score, "preScore"),
        (Points::SCORE, &plugins_cfg.score, "score"),
        (Points::RESERVE, &plugins_cfg.reserve, "reserve"),
        (Points::PRE_BIND, &plugins_cfg.pre_bind, "preBind"),
        (Points::QUEUE_SORT, &plugins_cfg.queue_sort, "queueSort"),
        (Points::BIND, &plugins_cfg.bind, "bind"),
        (Points::PERMIT, &plugins_cfg.permit, "permit"),
        (Points::POST_BIND, &plugins_cfg.post_bind, "postBind"),
    ];
    let mut lists: Vec<Vec<(usize, i64)>> = Vec::new();
    for (point, set, field) in sets {
        // Names the multiPoint list enables at this point, then the point's own set.
        let mut names: Vec<(String, Option<i64>)> = multi
            .iter()
            .zip(multi_idx)
            .filter(|(_, (i, _))| instances.plugins[*i].points().contains(point))
            .map(|((n, w), _)| (n.clone(), *w))
            .collect();
        apply_set(&mut names, set, &format!("plugins.{field}"))?;
        let mut list = Vec::new();
        for (name, w) in &names {
            let i = instances.get(name)?;
            list.push((i, w.unwrap_or(1)));
        }
        lists.push(list);
    }
    Ok(lists)
}

fn apply_set(
    list: &mut Vec<(String, Option<i64>)>,
    set: &PluginSet,
    field: &str,
) -> Result<(), ConfigError> {
    for (i, d) in set.disabled.iter().enumerate() {
        if d.name == "*" {
            list.clear();
        } else if !plugins::is_known(&d.name) {
            return Err(ConfigError::new(
                format!("{field}.disabled[{i}].name"),
                format!("unknown plugin {:?}", d.name),
            ));
        } else {
            list.retain(|(n, _)| n != &d.name);
        }
    }
    for (i, e) in set.enabled.iter().enumerate() {
        if !plugins::is_known(&e.name) {
            return Err(ConfigError::new(
                format!("{field}.enabled[{i}].name"),
                format!("unknown plugin {:?}", e.name),
            ));
        }
        if let Some(w) = e.weight {
            if w <= 0 || w > 100 {
                return Err(ConfigError::new(
                    format!("{field}.enabled[{i}].weight"),
                    "must be in the range [1, 100]",
                ));
            }
        }
        match list.iter_mut().find(|(n, _)| n == &e.name) {
            Some(slot) => {
                if e.weight.is_some() {
                    slot.1 = e.weight;
                }
            }
            None => list.push((e.name.clone(), e.weight)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: serde_json::Value) -> Result<Vec<Profile>, ConfigError> {
        let cfg: KubeSchedulerConfiguration =
            serde_json::from_value(text).map_err(|e| ConfigError::new("", e.to_string()))?;
        Profile::from_configuration(&cfg)
    }

    #[test]
    fn process_fields_of_kube_scheduler_are_accepted_and_a_typo_is_not() {
        let ok = parse(serde_json::json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": false},
            "clientConnection": {"kubeconfig": "/etc/kubernetes/scheduler.conf"},
            "podInitialBackoffSeconds": 1,
            "profiles": [{"schedulerName": "default-scheduler"}],
        }));
        assert_eq!(ok.map(|p| p.len()).ok(), Some(1));
        let typo = parse(serde_json::json!({"leaderElektion": {}}));
        assert!(typo.is_err());
    }

    #[test]
    fn a_typo_inside_plugin_args_names_the_plugin_config_path() {
        // Issue 8: the error pointed at plugins.multiPoint, where the plugin is enabled.
        let cases = [
            (
                "unknown field of an enabled plugin",
                serde_json::json!([
                    {"name": "NodeAffinity", "args": {}},
                    {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"typ": "MostAllocated"}}},
                ]),
                "profiles[0].pluginConfig[1].args.scoringStrategy.typ",
            ),
            (
                "wrong type deep inside",
                serde_json::json!([
                    {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"resources": [{"name": "cpu", "weight": "heavy"}]}}},
                ]),
                "profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight",
            ),
            (
                "a plugin's own validation",
                serde_json::json!([
                    {"name": "NodeResourceTopologyMatch", "args": {"scoringStrategy": {"type": "Fastest"}}},
                ]),
                "profiles[0].pluginConfig[0].args.scoringStrategy.type",
            ),
            (
                "top-level typo",
                serde_json::json!([{"name": "Reservation", "args": {"gcDurationSecond": 5}}]),
                "profiles[0].pluginConfig[0].args.gcDurationSecond",
            ),
        ];
        for (name, plugin_config, want) in cases {
            let err = parse(serde_json::json!({
                "profiles": [{"schedulerName": "s", "pluginConfig": plugin_config}],
            }))
            .err()
            .unwrap_or_else(|| panic!("{name}: accepted"));
            assert_eq!(err.field, want, "{name}: {err}");
        }
    }

    #[test]
    fn args_of_a_plugin_that_is_not_enabled_are_still_checked() {
        // kube-scheduler decodes every pluginConfig entry strictly, enabled or not.
        let err = parse(serde_json::json!({
            "profiles": [{
                "plugins": {"multiPoint": {"disabled": [{"name": "InterPodAffinity"}]}},
                "pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeigth": 1}}],
            }],
        }))
        .err()
        .map(|e| e.field);
        assert_eq!(
            err.as_deref(),
            Some("profiles[0].pluginConfig[0].args.hardPodAffinityWeigth")
        );
    }

    #[test]
    fn v1beta3_reads_like_v1_and_other_versions_are_refused() {
        for (version, ok) in [
            ("kubescheduler.config.k8s.io/v1", true),
            ("kubescheduler.config.k8s.io/v1beta3", true),
            ("kubescheduler.config.k8s.io/v1beta1", false),
        ] {
            let got = parse(serde_json::json!({
                "apiVersion": version,
                "kind": "KubeSchedulerConfiguration",
                "profiles": [{"schedulerName": "topo-aware-scheduler"}],
            }));
            assert_eq!(got.is_ok(), ok, "{version}: {got:?}");
        }
    }
}
