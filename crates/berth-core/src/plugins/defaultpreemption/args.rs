//! `DefaultPreemptionArgs`: how many candidate nodes the dry run looks for.

use berth_api::GoDuration;
use serde::Deserialize;

use crate::framework::config::ConfigError;
use crate::time::Time;

/// kube-scheduler's `DefaultPreemptionArgs` (`kubescheduler.config.k8s.io/v1`), with
/// berth's reservation-backed preemption settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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
    /// berth: hold what preemption frees with a Reservation the preemptor owns, so that no
    /// other pod takes it before the preemptor's next attempt (seed 002, story 1). Default
    /// true; `false` is kube-scheduler's behaviour (the nomination alone).
    #[serde(default = "default_true")]
    pub reservation_backed: bool,
    /// berth: how long that reservation lives when the preemptor does not take it (a Go
    /// duration, default `5m`).
    #[serde(default = "default_ttl", rename = "reservationTTL")]
    pub reservation_ttl: GoDuration,
}

fn default_true() -> bool {
    true
}

fn default_ttl() -> GoDuration {
    GoDuration::new("5m")
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
            reservation_backed: true,
            reservation_ttl: default_ttl(),
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
        match self.reservation_ttl.nanos() {
            Ok(n) if n > 0 => {}
            Ok(_) => {
                return Err(ConfigError::new(
                    "reservationTTL",
                    format!(
                        "Invalid value: {:?}: must be greater than 0",
                        self.reservation_ttl.as_str()
                    ),
                ))
            }
            Err(e) => return Err(ConfigError::new("reservationTTL", e.to_string())),
        }
        Ok(())
    }

    /// The reservation's TTL in milliseconds (at least 1; validated positive).
    pub fn ttl_millis(&self) -> Time {
        (self.reservation_ttl.nanos().unwrap_or(0) / 1_000_000).max(1)
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
                ..Default::default()
            };
            let err = a.validate().unwrap_err();
            assert_eq!(err.field, field, "{pct}/{abs}");
        }
        assert!(decode::<DefaultPreemptionArgs>(Some(&json!({"minCandidates": 1}))).is_err());
        for (ttl, ok) in [
            ("0s", false),
            ("-1m", false),
            ("soon", false),
            ("90s", true),
        ] {
            let a: DefaultPreemptionArgs = decode(Some(&json!({"reservationTTL": ttl}))).unwrap();
            let res = a.validate();
            assert_eq!(res.is_ok(), ok, "{ttl}");
            if let Err(e) = res {
                assert_eq!(e.field, "reservationTTL");
            }
        }
    }

    #[test]
    fn reservation_backed_preemption_is_on_by_default_for_five_minutes() {
        let a = DefaultPreemptionArgs::default();
        assert!(a.reservation_backed);
        assert_eq!(a.ttl_millis(), 5 * 60 * 1000);
        let a: DefaultPreemptionArgs = decode(Some(
            &json!({"reservationBacked": false, "reservationTTL": "90s"}),
        ))
        .unwrap();
        assert!(!a.reservation_backed);
        assert_eq!(a.ttl_millis(), 90_000);
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
            ..Default::default()
        };
        assert_eq!(a.num_candidates(5), 2);
        assert_eq!(a.num_candidates(1), 1);
    }
}
