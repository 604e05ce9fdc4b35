//! Dynamic Reservation Provisioning (seed 003; Koordinator has only the proposal).
//!
//! A pod annotated `scheduling.koordinator.sh/reservation-template` that no existing
//! reservation serves gets, at the moment it is scheduled, capacity reserved for it and for
//! the template's owners that follow:
//!
//! 1. **Sizing** ([`template`]): the cycle looks for a node with room for
//!    `max(requests, recommendedSize)` rounded up to `roundup`, else for the pod's own
//!    requests.
//! 2. **Virtual reservation** ([`crate::reservation::provisioned`]): the chosen node holds, in
//!    the scheduler only, a reservation of that size with the template's owners, the pod
//!    allocated from it. Other pods see it as a real reservation.
//! 3. **PreBind handshake**: instead of binding, the scheduler writes
//!    `scheduling.koordinator.sh/new-reservation-requirement` (with a unique
//!    `scheduling.koordinator.sh/reservation-id` label) on the pod and waits, as binding waits
//!    for dynamic volume provisioning; other pods keep being scheduled.
//! 4. **Provisioner** ([`objects::provisioned_reservation`]): creates the Reservation the
//!    requirement asks for (the simulator runs one; `berth provisioner` in a cluster).
//! 5. **Adoption**: the Reservation carrying the pending id is placed on the virtual
//!    reservation's node, takes over its owners, and the waiting pods are bound into it.
//! 6. **Time-out** ([`Settings::timeout`], default 10 minutes): the handshake is rolled back
//!    and the pod re-queued ([`TimeoutPolicy::Requeue`]), or the pod is bound without a
//!    reservation ([`TimeoutPolicy::BindWithoutReservation`]).
//!
//! The scheduler side lives in `scheduler/drp.rs`; this module holds what is pure.

pub mod objects;
pub mod template;

use crate::time::Time;

/// The default time a pod waits for its Reservation to be created (the seed: "similar to
/// the mechanism in Dynamic Volume Provisioning ... 10 minutes").
pub const DEFAULT_TIMEOUT: Time = 10 * 60 * 1000;

/// Event reason: the requirement was written on the pod, a Reservation is asked for.
pub const REASON_ATTEMPT: &str = "ReservationCreationAttempt";
/// Event reason: the Reservation appeared and was adopted; the pod is being bound into it.
pub const REASON_CREATED: &str = "ReservationCreated";
/// Event reason: a Reservation carrying the pending id appeared but could not be adopted
/// (unusable, or larger than its node can hold), or the virtual reservation's node left.
pub const REASON_FAILED: &str = "ReservationCreationFailed";
/// Event reason: no Reservation appeared in time.
pub const REASON_TIMEOUT: &str = "ReservationCreationTimeout";

/// What happens to a pod whose Reservation did not appear in time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TimeoutPolicy {
    /// The seed's first option: roll the virtual reservation back (its capacity is
    /// released) and re-queue the pod for another attempt.
    #[default]
    Requeue,
    /// The seed's third option: bind the pod without a reservation and drop the virtual
    /// one ("in terms of the resource delivery success rate").
    BindWithoutReservation,
}

impl TimeoutPolicy {
    /// The name used in the plugin args.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeoutPolicy::Requeue => "Requeue",
            TimeoutPolicy::BindWithoutReservation => "BindWithoutReservation",
        }
    }

    /// Reads the plugin-args spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Requeue" => Some(TimeoutPolicy::Requeue),
            "BindWithoutReservation" => Some(TimeoutPolicy::BindWithoutReservation),
            _ => None,
        }
    }
}

/// DRP settings, from the Reservation plugin's args (`dynamicProvisioning`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How long a pod waits for its Reservation.
    pub timeout: Time,
    /// What happens then.
    pub timeout_policy: TimeoutPolicy,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            timeout_policy: TimeoutPolicy::default(),
        }
    }
}

/// Upper bounds (seconds) of the latency histograms' buckets.
pub const LATENCY_BUCKETS: [f64; 10] = [0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0];

/// A Prometheus-style histogram of durations (cumulative buckets of [`LATENCY_BUCKETS`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations at or below each bound of [`LATENCY_BUCKETS`].
    pub buckets: [u64; LATENCY_BUCKETS.len()],
    /// Sum of the observations, seconds.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl Histogram {
    /// Records a duration in milliseconds.
    pub fn observe(&mut self, millis: Time) {
        let secs = millis.max(0) as f64 / 1000.0;
        for (b, bound) in self.buckets.iter_mut().zip(LATENCY_BUCKETS) {
            if secs <= bound {
                *b += 1;
            }
        }
        self.sum += secs;
        self.count += 1;
    }
}

/// The seed's metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    /// Pods that asked for a new Reservation (requirements written).
    pub requests: u64,
    /// Reservations created and adopted.
    pub created: u64,
    /// Reservations that appeared for a pending id and could not be adopted, and
    /// handshakes lost with their node.
    pub failures: u64,
    /// Handshakes that timed out.
    pub timeouts: u64,
    /// From the requirement to the adoption.
    pub creation_latency: Histogram,
    /// How long each handshake waited, whatever its end (adoption, time-out, failure).
    pub pending_duration: Histogram,
}

/// A reservation id: unique per attempt (the pod's UID, the id it asked for before if any,
/// the time and a sequence number, hashed), short enough for a label value, and the same on
/// every run of a simulation. The previous id makes a restarted scheduler (whose sequence
/// starts again) mint another id than its predecessor did at the same instant; the caller
/// still checks the id is not in use.
pub fn mint_id(pod_uid: &str, previous: &str, now: Time, seq: u64) -> String {
    // FNV-1a, 64 bits: deterministic across runs and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in pod_uid
        .as_bytes()
        .iter()
        .chain(&[0])
        .chain(previous.as_bytes())
        .chain(&now.to_le_bytes())
        .chain(&seq.to_le_bytes())
    {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("drp-{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ_per_attempt_and_are_label_values() {
        let a = mint_id("uid-1", "", 0, 0);
        assert_eq!(a, mint_id("uid-1", "", 0, 0), "deterministic");
        assert_ne!(a, mint_id("uid-1", "", 0, 1));
        assert_ne!(a, mint_id("uid-1", "", 1, 0));
        assert_ne!(a, mint_id("uid-2", "", 0, 0));
        assert_ne!(a, mint_id("uid-1", "drp-0", 0, 0));
        assert!(a.len() <= 63 && a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut h = Histogram::default();
        h.observe(200);
        h.observe(45_000);
        assert_eq!(h.count, 2);
        assert_eq!(h.buckets[0], 0);
        assert_eq!(h.buckets[1], 1, "0.2s is under 0.5s");
        assert_eq!(h.buckets[6], 2, "45s is under 60s");
        assert!((h.sum - 45.2).abs() < 1e-9);
    }

    #[test]
    fn policies_read_their_names() {
        for p in [
            TimeoutPolicy::Requeue,
            TimeoutPolicy::BindWithoutReservation,
        ] {
            assert_eq!(TimeoutPolicy::parse(p.as_str()), Some(p));
        }
        assert_eq!(TimeoutPolicy::parse("requeue"), None);
    }
}
