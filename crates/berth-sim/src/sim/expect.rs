//! The Scenario's expectations, checked against the [`Simulation`]'s store.

use super::*;

impl Simulation {
    /// Checks `expect` against the store; returns one line per failed check.
    pub fn check(&self, expect: &Expect) -> Vec<String> {
        let mut failures = Vec::new();
        for e in &expect.pods {
            self.check_pod(e, &mut failures);
        }
        for e in &expect.reservations {
            check_reservation(&self.store, e, &mut failures);
        }
        crate::migration::check(&self.store, &expect.pod_migration_jobs, &mut failures);
        failures
    }

    /// One pod's expectations.
    fn check_pod(&self, e: &crate::scenario::PodExpectation, failures: &mut Vec<String>) {
        let key = ObjectKey::pod(&e.namespace, &e.name);
        let Some(p) = self.store.pod(&key) else {
            // A pod that no longer exists (deleted, preempted) is not bound; anything
            // else asked of it fails.
            let only_unbound = e.node == Some(None)
                && e.reservation.is_none()
                && e.message.is_none()
                && e.phase.is_none()
                && e.reason.is_none();
            if !only_unbound {
                failures.push(format!("pod {key}: expected to exist, found no such pod"));
            }
            return;
        };
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        if let Some(want) = &e.node {
            if *want != node {
                failures.push(format!(
                    "pod {key}: node: expected {}, found {}",
                    show(want.as_deref()),
                    show(node.as_deref())
                ));
            }
        }
        if let Some(want) = &e.reservation {
            let got = allocated_reservation(p);
            if *want != got {
                failures.push(format!(
                    "pod {key}: reservation: expected {}, found {}",
                    show(want.as_deref()),
                    show(got.as_deref())
                ));
            }
        }
        if let Some(want) = &e.message {
            let got = pod_scheduled_message(p);
            if !got.as_deref().is_some_and(|m| m.contains(want.as_str())) {
                failures.push(format!(
                    "pod {key}: PodScheduled message: expected one containing {want:?}, found {}",
                    show(got.as_deref())
                ));
            }
        }
        let status = p.status.as_ref();
        if let Some(want) = &e.phase {
            let got = status.and_then(|s| s.phase.as_deref());
            if got != Some(want.as_str()) {
                failures.push(format!(
                    "pod {key}: phase: expected {want:?}, found {}",
                    show(got)
                ));
            }
        }
        if let Some(want) = &e.reason {
            let got = status.and_then(|s| s.reason.as_deref());
            if got != Some(want.as_str()) {
                failures.push(format!(
                    "pod {key}: reason: expected {want:?}, found {}",
                    show(got)
                ));
            }
        }
    }
}

pub(super) fn show(v: Option<&str>) -> String {
    match v {
        Some(s) => format!("{s:?}"),
        None => "null".to_string(),
    }
}

/// One reservation's expectations.
fn check_reservation(
    store: &Store,
    e: &crate::scenario::ReservationExpectation,
    failures: &mut Vec<String>,
) {
    let Some(r) = store.reservation(&e.name) else {
        failures.push(format!(
            "reservation {}: expected to exist, found no such reservation",
            e.name
        ));
        return;
    };
    let status = r.status.as_ref();
    if let Some(want) = &e.phase {
        let got = r.phase();
        if got.as_str() != want {
            failures.push(format!(
                "reservation {}: phase: expected {want:?}, found {:?}",
                e.name,
                got.as_str()
            ));
        }
    }
    if let Some(want) = &e.node {
        let got = status
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        if *want != got {
            failures.push(format!(
                "reservation {}: node: expected {}, found {}",
                e.name,
                show(want.as_deref()),
                show(got.as_deref())
            ));
        }
    }
    if let Some(want) = &e.owners {
        let got: BTreeSet<String> = status
            .map(|s| s.current_owners.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o.namespace.as_deref().unwrap_or("default"),
                    o.name.as_deref().unwrap_or("")
                )
            })
            .collect();
        let want: BTreeSet<String> = want
            .iter()
            .map(|o| {
                if o.contains('/') {
                    o.clone()
                } else {
                    format!("default/{o}")
                }
            })
            .collect();
        if got != want {
            failures.push(format!(
                "reservation {}: owners: expected {:?}, found {:?}",
                e.name, want, got
            ));
        }
    }
    for (resource, want) in e.allocatable.iter().flatten() {
        let got = status.and_then(|s| s.allocatable.get(resource));
        let amount = |text: &str| berth_api::parse_resource(resource, text).ok();
        if got.and_then(|q| amount(&q.0)).is_none()
            || got.and_then(|q| amount(&q.0)) != amount(want)
        {
            failures.push(format!(
                "reservation {}: allocatable[{resource}]: expected {want:?}, found {}",
                e.name,
                show(got.map(|q| q.0.as_str()))
            ));
        }
    }
}
