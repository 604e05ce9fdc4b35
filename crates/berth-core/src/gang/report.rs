//! Where a gang stands, for `explain` and reports: how many members are placed against its
//! minimum, which wait at Permit, and which are not placed with the scheduler's last word
//! on each.

use serde::Serialize;

/// One gang's standing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `namespace/name` (`workload/podGroup[/replicaKey]` for a Workload's).
    pub gang: String,
    /// The plugin that handles it (`Coscheduling`, `GangScheduling`).
    pub plugin: &'static str,
    /// The fewest members placed before any binds; `None` when its object is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<u32>,
    /// Members known (pods and Reservations).
    pub members: usize,
    /// Members assumed or bound (those waiting at Permit included), by name.
    pub placed: Vec<String>,
    /// Of those, the ones waiting at Permit for the rest.
    pub waiting: Vec<String>,
    /// Members not placed, with why (their last unschedulable message; empty when not
    /// tried yet).
    pub unplaced: Vec<(String, String)>,
}

impl Report {
    /// One line: `gang default/job (Coscheduling): 6 of minimum 8 placed (6 waiting at
    /// Permit), 2 not placed`.
    pub fn line(&self) -> String {
        let min = self.min.map_or_else(
            || "no minimum known".to_string(),
            |m| format!("minimum {m}"),
        );
        let mut out = format!(
            "gang {} ({}): {} of {min} placed",
            self.gang,
            self.plugin,
            self.placed.len()
        );
        if !self.waiting.is_empty() {
            out.push_str(&format!(" ({} waiting at Permit)", self.waiting.len()));
        }
        out.push_str(&format!(
            ", {} not placed, {} members",
            self.unplaced.len(),
            self.members
        ));
        out
    }
}
