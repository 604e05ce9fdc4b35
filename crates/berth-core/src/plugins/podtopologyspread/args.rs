//! `PodTopologySpreadArgs`.

use berth_api::k8s_openapi::api::core::v1::TopologySpreadConstraint;
use serde::Deserialize;

use crate::framework::config::ConfigError;

use super::common::{LABEL_HOSTNAME, LABEL_ZONE};

/// Where constraints come from for pods that declare none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum DefaultingType {
    /// kube-scheduler's built-in defaults: spread by hostname (maxSkew 3) and zone
    /// (maxSkew 5), both `ScheduleAnyway` (the v1 default).
    #[default]
    System,
    /// `defaultConstraints` as given.
    List,
}

/// `PodTopologySpreadArgs` (`kubescheduler.config.k8s.io/v1`).
///
/// Default constraints apply only to pods that declare no `topologySpreadConstraints` and
/// belong to a workload: kube-scheduler takes the selector from the Services,
/// ReplicationControllers, ReplicaSets and StatefulSets selecting the pod. berth sees none
/// of those objects, so it uses the pod's own labels as the selector when the pod's
/// controller owner reference is a ReplicationController, ReplicaSet or StatefulSet (minus
/// the labels unique to one StatefulSet pod), and gives other pods no default constraints.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTopologySpreadArgs {
    /// Constraints for pods without their own (`List` defaulting only).
    #[serde(default)]
    pub default_constraints: Vec<TopologySpreadConstraint>,
    /// `System` (default) or `List`.
    #[serde(default)]
    pub defaulting_type: DefaultingType,
}

/// kube-scheduler's `systemDefaultConstraints`.
pub(crate) fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    [(LABEL_HOSTNAME, 3), (LABEL_ZONE, 5)]
        .into_iter()
        .map(|(key, skew)| TopologySpreadConstraint {
            topology_key: key.to_string(),
            when_unsatisfiable: "ScheduleAnyway".to_string(),
            max_skew: skew,
            ..Default::default()
        })
        .collect()
}

impl PodTopologySpreadArgs {
    /// The constraints used for pods without their own.
    pub fn effective_defaults(&self) -> Vec<TopologySpreadConstraint> {
        match self.defaulting_type {
            DefaultingType::System => system_default_constraints(),
            DefaultingType::List => self.default_constraints.clone(),
        }
    }

    /// Validates as kube-scheduler's `ValidatePodTopologySpreadArgs` (first error only).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.defaulting_type == DefaultingType::System && !self.default_constraints.is_empty() {
            return Err(ConfigError::new(
                "defaultingType",
                "Invalid value: \"System\": when .defaultConstraints are not empty",
            ));
        }
        for (i, c) in self.default_constraints.iter().enumerate() {
            let field = |f: &str| format!("defaultConstraints[{i}].{f}");
            if c.max_skew <= 0 {
                return Err(ConfigError::new(
                    field("maxSkew"),
                    format!("Invalid value: {}: not in valid range (0, inf)", c.max_skew),
                ));
            }
            if c.topology_key.is_empty() {
                return Err(ConfigError::new(
                    field("topologyKey"),
                    "Required value: can not be empty",
                ));
            }
            match c.when_unsatisfiable.as_str() {
                "DoNotSchedule" | "ScheduleAnyway" => {}
                "" => {
                    return Err(ConfigError::new(
                        field("whenUnsatisfiable"),
                        "Required value: can not be empty",
                    ))
                }
                other => {
                    return Err(ConfigError::new(
                        field("whenUnsatisfiable"),
                        format!(
                            "Unsupported value: {other:?}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\""
                        ),
                    ))
                }
            }
            if c.label_selector.is_some() {
                return Err(ConfigError::new(
                    field("labelSelector"),
                    "Forbidden: constraint must not define a selector, as they deduced for each pod",
                ));
            }
            let repeated = self.default_constraints[..i].iter().any(|o| {
                o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable
            });
            if repeated {
                return Err(ConfigError::new(
                    format!("defaultConstraints[{i}]"),
                    format!(
                        "Duplicate value: \"{{{}, {}}}\"",
                        c.topology_key, c.when_unsatisfiable
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::args::decode;
    use serde_json::json;

    #[test]
    fn args_validate_as_kube_scheduler() {
        let c = |key: &str, skew: i32, when: &str| json!({"topologyKey": key, "maxSkew": skew, "whenUnsatisfiable": when});
        let cases: Vec<(serde_json::Value, Result<(), &str>)> = vec![
            (json!({}), Ok(())),
            (
                json!({"defaultingType": "List", "defaultConstraints": [c("zone", 1, "DoNotSchedule")]}),
                Ok(()),
            ),
            (
                json!({"defaultConstraints": [c("zone", 1, "DoNotSchedule")]}),
                Err("defaultingType: Invalid value: \"System\": when .defaultConstraints are not empty"),
            ),
            (
                json!({"defaultingType": "List", "defaultConstraints": [c("zone", 0, "DoNotSchedule")]}),
                Err("defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range (0, inf)"),
            ),
            (
                json!({"defaultingType": "List", "defaultConstraints": [c("", 1, "DoNotSchedule")]}),
                Err("defaultConstraints[0].topologyKey: Required value: can not be empty"),
            ),
            (
                json!({"defaultingType": "List", "defaultConstraints": [c("zone", 1, "Sometimes")]}),
                Err("defaultConstraints[0].whenUnsatisfiable: Unsupported value: \"Sometimes\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\""),
            ),
            (
                json!({"defaultingType": "List", "defaultConstraints": [
                    {"topologyKey": "zone", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule",
                     "labelSelector": {}}]}),
                Err("defaultConstraints[0].labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod"),
            ),
            (
                json!({"defaultingType": "List", "defaultConstraints": [
                    c("zone", 1, "DoNotSchedule"), c("zone", 2, "DoNotSchedule")]}),
                Err("defaultConstraints[1]: Duplicate value: \"{zone, DoNotSchedule}\""),
            ),
        ];
        for (input, want) in cases {
            let args: PodTopologySpreadArgs = decode(Some(&input)).unwrap();
            let got = args.validate().map_err(|e| e.to_string());
            assert_eq!(got, want.map_err(str::to_string), "{input}");
        }
    }

    #[test]
    fn system_defaulting_spreads_by_hostname_and_zone() {
        let args = PodTopologySpreadArgs::default();
        let d = args.effective_defaults();
        assert_eq!(d.len(), 2);
        assert_eq!(
            (d[0].topology_key.as_str(), d[0].max_skew),
            (LABEL_HOSTNAME, 3)
        );
        assert_eq!((d[1].topology_key.as_str(), d[1].max_skew), (LABEL_ZONE, 5));
        assert!(d.iter().all(|c| c.when_unsatisfiable == "ScheduleAnyway"));
    }
}
