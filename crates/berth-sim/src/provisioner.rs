//! The simulated reservation provisioner of Dynamic Reservation Provisioning (seed 003), on
//! by default: for every unbound pod carrying both `reservation-template` and
//! `new-reservation-requirement`, it creates the Reservation the requirement asks for
//! ([`berth_core::drp::objects::provisioned_reservation`]), `delay` after it saw the
//! requirement, once per reservation id. A Scenario turns it off or slows it down
//! (`spec.provisioner`) to exercise the scheduler's time-outs.

use std::collections::BTreeMap;

use berth_api::annotations::NewReservationRequirement;
use berth_core::time::Time;
use berth_core::ObjectKey;

/// `spec.provisioner` of a Scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProvisionerConfig {
    /// Whether it runs (default true).
    pub enabled: bool,
    /// How long it takes to create a Reservation, ms (default 0).
    pub delay: Time,
}

impl Default for ProvisionerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            delay: 0,
        }
    }
}

/// Requirements the provisioner acts on, by due time, pod and reservation id.
#[derive(Debug, Clone, Default)]
pub struct Provisioner {
    config: ProvisionerConfig,
    due: BTreeMap<(Time, ObjectKey, String), NewReservationRequirement>,
}

impl Provisioner {
    /// A provisioner configured as `config`.
    pub fn new(config: ProvisionerConfig) -> Self {
        Self {
            config,
            due: BTreeMap::new(),
        }
    }

    /// A pod was written: if it asks for a reservation (an id not asked for before), the
    /// provisioner acts on that requirement `delay` from `now`.
    pub fn observe(&mut self, key: &ObjectKey, req: Option<NewReservationRequirement>, now: Time) {
        let Some(req) = req.filter(|_| self.config.enabled) else {
            return;
        };
        let Some(id) = berth_core::drp::objects::requirement_id(&req).map(str::to_string) else {
            return;
        };
        if self.due.keys().any(|(_, k, i)| k == key && *i == id) {
            return;
        }
        self.due.insert(
            (now.saturating_add(self.config.delay), key.clone(), id),
            req,
        );
    }

    /// When it acts next.
    pub fn next_timeout(&self) -> Option<Time> {
        self.due.keys().next().map(|(t, _, _)| *t)
    }

    /// The requirements due at `now` (with their pods), taken.
    pub fn take_due(&mut self, now: Time) -> Vec<(ObjectKey, NewReservationRequirement)> {
        let mut out = Vec::new();
        while let Some((first, _)) = self.due.first_key_value() {
            if first.0 > now {
                break;
            }
            if let Some(((_, key, _), req)) = self.due.pop_first() {
                out.push((key, req));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: &str) -> NewReservationRequirement {
        NewReservationRequirement {
            labels: [(
                berth_api::annotations::LABEL_RESERVATION_ID.to_string(),
                id.to_string(),
            )]
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn it_acts_after_its_delay_once_per_id() {
        let mut p = Provisioner::new(ProvisionerConfig {
            enabled: true,
            delay: 5_000,
        });
        let k = ObjectKey::pod("default", "p");
        p.observe(&k, Some(req("a")), 1_000);
        p.observe(&k, Some(req("a")), 2_000);
        p.observe(&k, None, 2_000);
        assert_eq!(p.next_timeout(), Some(6_000));
        assert!(p.take_due(5_999).is_empty());
        assert_eq!(p.take_due(6_000), vec![(k.clone(), req("a"))]);
        assert_eq!(p.next_timeout(), None);
        let mut off = Provisioner::new(ProvisionerConfig {
            enabled: false,
            delay: 0,
        });
        off.observe(&k, Some(req("a")), 0);
        assert_eq!(off.next_timeout(), None);
    }
}
