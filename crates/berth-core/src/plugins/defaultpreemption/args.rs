//! `DefaultPreemptionArgs`: how many candidate nodes the dry run looks for.

use serde::Deserialize;

use crate::framework::config::ConfigError;

/// kube-scheduler's `DefaultPreemptionArgs` (`kubescheduler.config.k8s.io/v1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultPreemptionArgs {
    /// Candidates to find, as a percentage of the nodes where preemption may help
    /// (0..=100, default 10). The dry run stops once it has
    /// `max(percentage of nodes, minCandidateNodesAbsolute)` candidates.
    #[serde(default = "default_percentage")]
    pub min_candidate_nodes_percentage: i32,
    /// Candidates to find at least (default 100), capped by the number of nodes.
    #[serde(default = "default_absolute")]
    pub min_candidate_nodes_absolute: i32,
}

fn default_percentage() -> i32 {
    10
}

fn default_absolute() -> i32 {
    100
}

impl Default for DefaultPreemptionArgs {
    fn default() -> Self {
        Self {
            min_candidate_nodes_percentage: default_percentage(),
            min_candidate_nodes_absolute: default_absolute(),
        }
    }
}

impl DefaultPreemptionArgs {
    /// kube-scheduler's `ValidateDefaultPreemptionArgs`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let pct = self.min_candidate_nodes_percentage;
        let abs = self.min_candidate_nodes_absolute;
        if !(0..=100).contains(&pct) {
            return Err(ConfigError::new(
                "minCandidateNodesPercentage",
                format!("Invalid value: {pct}: not in valid range [0, 100]"),
            ));
        }
        if abs < 0 {
            return Err(ConfigError::new(
                "minCandidateNodesAbsolute",
                format!("Invalid value: {abs}: not in valid range [0, inf)"),
            ));
        }
        if pct == 0 && abs == 0 {
            return Err(ConfigError::new(
                "minCandidateNodesPercentage",
                "Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute",
            ));
        }
        Ok(())
    }

    /// kube-scheduler's `calculateNumCandidates`: how many candidates the dry run wants out
    /// of `num_nodes` potential nodes (never more than `num_nodes`).
    pub fn num_candidates(&self, num_nodes: usize) -> usize {
        let n = num_nodes as i64 * i64::from(self.min_candidate_nodes_percentage) / 100;
        let n = n.max(i64::from(self.min_candidate_nodes_absolute));
        n.min(num_nodes as i64).max(0) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::args::decode;
    use serde_json::json;

    #[test]
    fn absent_fields_take_kube_schedulers_defaults() {
        let a: DefaultPreemptionArgs = decode(Some(&json!({}))).unwrap();
        assert_eq!(a, DefaultPreemptionArgs::default());
        assert_eq!(a.min_candidate_nodes_percentage, 10);
        assert_eq!(a.min_candidate_nodes_absolute, 100);
        let a: DefaultPreemptionArgs = decode(Some(&json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "DefaultPreemptionArgs",
            "minCandidateNodesAbsolute": 0
        })))
        .unwrap();
        assert_eq!(a.min_candidate_nodes_absolute, 0);
        assert_eq!(a.min_candidate_nodes_percentage, 10);
        assert!(a.validate().is_ok());
    }

    #[test]
    fn invalid_args_name_the_field() {
        let cases = [
            (101, 100, "minCandidateNodesPercentage"),
            (-1, 100, "minCandidateNodesPercentage"),
            (10, -1, "minCandidateNodesAbsolute"),
            (0, 0, "minCandidateNodesPercentage"),
        ];
        for (pct, abs, field) in cases {
            let a = DefaultPreemptionArgs {
                min_candidate_nodes_percentage: pct,
                min_candidate_nodes_absolute: abs,
            };
            let err = a.validate().unwrap_err();
            assert_eq!(err.field, field, "{pct}/{abs}");
        }
        assert!(decode::<DefaultPreemptionArgs>(Some(&json!({"minCandidates": 1}))).is_err());
    }

    #[test]
    fn candidates_are_the_larger_of_percentage_and_absolute_capped_by_nodes() {
        let a = DefaultPreemptionArgs::default();
        assert_eq!(a.num_candidates(5), 5);
        assert_eq!(a.num_candidates(500), 100);
        assert_eq!(a.num_candidates(5000), 500);
        let a = DefaultPreemptionArgs {
            min_candidate_nodes_percentage: 40,
            min_candidate_nodes_absolute: 1,
        };
        assert_eq!(a.num_candidates(5), 2);
        assert_eq!(a.num_candidates(1), 1);
    }
}
