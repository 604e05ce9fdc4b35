//! `InterPodAffinityArgs`.

use serde::Deserialize;

use crate::framework::config::ConfigError;

/// kube-scheduler's default `hardPodAffinityWeight`.
pub const DEFAULT_HARD_POD_AFFINITY_WEIGHT: i32 = 1;

/// `InterPodAffinityArgs` (`kubescheduler.config.k8s.io/v1`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InterPodAffinityArgs {
    /// Score weight of an existing pod's *required* affinity term the incoming pod matches
    /// (0..=100; absent means 1, an explicit 0 turns the symmetry off).
    #[serde(default)]
    pub hard_pod_affinity_weight: Option<i32>,
    /// Skip the existing pods' preferred terms when the incoming pod has no preferred
    /// (anti-)affinity of its own (Score is then skipped for it).
    #[serde(default)]
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl InterPodAffinityArgs {
    /// The effective `hardPodAffinityWeight`.
    pub fn hard_pod_affinity_weight(&self) -> i64 {
        i64::from(
            self.hard_pod_affinity_weight
                .unwrap_or(DEFAULT_HARD_POD_AFFINITY_WEIGHT),
        )
    }

    /// Validates as kube-scheduler's `ValidateInterPodAffinityArgs`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let w = self.hard_pod_affinity_weight();
        if !(0..=100).contains(&w) {
            return Err(ConfigError::new(
                "hardPodAffinityWeight",
                format!("Invalid value: {w}: not in valid range [0, 100]"),
            ));
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
    fn hard_pod_affinity_weight_defaults_to_one_and_is_bounded() {
        let cases: &[(serde_json::Value, Result<i64, &str>)] = &[
            (json!({}), Ok(1)),
            (json!({"hardPodAffinityWeight": 0}), Ok(0)),
            (json!({"hardPodAffinityWeight": 100}), Ok(100)),
            (
                json!({"hardPodAffinityWeight": 101}),
                Err("hardPodAffinityWeight: Invalid value: 101: not in valid range [0, 100]"),
            ),
            (
                json!({"hardPodAffinityWeight": -1}),
                Err("hardPodAffinityWeight: Invalid value: -1: not in valid range [0, 100]"),
            ),
        ];
        for (input, want) in cases {
            let args: InterPodAffinityArgs = decode(Some(input)).unwrap();
            let got = args
                .validate()
                .map(|()| args.hard_pod_affinity_weight())
                .map_err(|e| e.to_string());
            assert_eq!(got, want.map_err(str::to_string), "{input}");
        }
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = decode::<InterPodAffinityArgs>(Some(&json!({"hardWeight": 1}))).unwrap_err();
        assert!(err.message.contains("hardWeight"), "{err}");
    }
}
