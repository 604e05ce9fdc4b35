//! A node's whole Filter answer for a pod, as one small value: passed, unusable data, or
//! rejected with the case and why the node's data may be stale.
//!
//! The plugin's Filter builds its status from these few facts alone, so the answer can be
//! remembered per node ([`super::verdict_memo`]) and the status rebuilt from it without
//! reading the node's cache entry again. [`FilterVerdict::code`] packs it into a byte for
//! that memo; [`FilterVerdict::from_code`] unpacks it.

use super::reject_kind::RejectKind;

/// Why a node's data cannot be used now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnusableReason {
    /// Foreign pods landed on it since the last matching resync.
    ForeignPods,
    /// DiscardReserved mode: a reservation is in flight.
    ReservationInFlight,
}

/// The result of the last resync check of a dirty node that did not flush it (cleared when
/// the node is flushed), so rejections can say why the node's data is still stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResyncCheck {
    /// The NRT's pod fingerprint does not match the pods the scheduler believes run there
    /// (or is malformed, or of an incompatible version).
    Mismatch,
    /// The NRT carries no pod fingerprint, so the node can never be resynced.
    NoFingerprint,
}

/// Why a rejecting node's data may be stale: the rejection may go away at a resync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StaleReason {
    /// Pods are assumed on the node or a newer NRT is held back; no resync said otherwise.
    ResyncPending,
    /// The last resync found the NRT's pod fingerprint different ([`ResyncCheck::Mismatch`]).
    FingerprintMismatch,
    /// The NRT carries no pod fingerprint ([`ResyncCheck::NoFingerprint`]).
    NoFingerprint,
}

impl StaleReason {
    /// The reason for a stale node whose last resync check was `check`.
    pub fn from_check(check: Option<ResyncCheck>) -> Self {
        match check {
            Some(ResyncCheck::Mismatch) => Self::FingerprintMismatch,
            Some(ResyncCheck::NoFingerprint) => Self::NoFingerprint,
            None => Self::ResyncPending,
        }
    }
}

/// The NUMA Filter's answer on one node for one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterVerdict {
    /// The pod fits (or the node has no NRT, or the pod needs no alignment).
    Pass,
    /// The node's data cannot be used now.
    Unusable(UnusableReason),
    /// No alignment: `kind` is the case; `stale` is set when the data may be stale.
    Reject {
        /// The case (its fixed reason).
        kind: RejectKind,
        /// Why the data may be stale, if it may be.
        stale: Option<StaleReason>,
    },
}

const KINDS: [RejectKind; 5] = [
    RejectKind::InitContainer,
    RejectKind::Container,
    RejectKind::Pod,
    RejectKind::InvalidTopologyData,
    RejectKind::InconsistentAccounting,
];

const STALE: [Option<StaleReason>; 4] = [
    None,
    Some(StaleReason::ResyncPending),
    Some(StaleReason::FingerprintMismatch),
    Some(StaleReason::NoFingerprint),
];

/// First code of the `Reject` cases (`Pass` is 1, the two `Unusable` cases 2 and 3).
const REJECT_BASE: u8 = 4;

impl FilterVerdict {
    /// The verdict as a non-zero byte (zero is left for "no verdict" in the memo).
    pub fn code(self) -> u8 {
        match self {
            Self::Pass => 1,
            Self::Unusable(UnusableReason::ForeignPods) => 2,
            Self::Unusable(UnusableReason::ReservationInFlight) => 3,
            Self::Reject { kind, stale } => {
                let k = KINDS.iter().position(|&x| x == kind).unwrap_or(0) as u8;
                let s = STALE.iter().position(|&x| x == stale).unwrap_or(0) as u8;
                REJECT_BASE + k * STALE.len() as u8 + s
            }
        }
    }

    /// The verdict of a [`FilterVerdict::code`]; `None` for a byte no verdict has.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::Pass,
            2 => Self::Unusable(UnusableReason::ForeignPods),
            3 => Self::Unusable(UnusableReason::ReservationInFlight),
            c => {
                let i = usize::from(c.checked_sub(REJECT_BASE)?);
                Self::Reject {
                    kind: *KINDS.get(i / STALE.len())?,
                    stale: *STALE.get(i % STALE.len())?,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<FilterVerdict> {
        let mut v = vec![
            FilterVerdict::Pass,
            FilterVerdict::Unusable(UnusableReason::ForeignPods),
            FilterVerdict::Unusable(UnusableReason::ReservationInFlight),
        ];
        for kind in KINDS {
            for stale in STALE {
                v.push(FilterVerdict::Reject { kind, stale });
            }
        }
        v
    }

    #[test]
    fn every_verdict_has_its_own_non_zero_code_and_comes_back_from_it() {
        let verdicts = all();
        let mut codes: Vec<u8> = verdicts.iter().map(|v| v.code()).collect();
        for (v, &c) in verdicts.iter().zip(&codes) {
            assert_ne!(c, 0, "{v:?}");
            assert_eq!(FilterVerdict::from_code(c), Some(*v));
        }
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), verdicts.len());
    }

    #[test]
    fn bytes_no_verdict_has_decode_to_none() {
        let codes: Vec<u8> = all().iter().map(|v| v.code()).collect();
        for b in 0..=u8::MAX {
            if !codes.contains(&b) {
                assert_eq!(FilterVerdict::from_code(b), None, "byte {b}");
            }
        }
    }

    #[test]
    fn stale_reason_follows_the_resync_check() {
        assert_eq!(StaleReason::from_check(None), StaleReason::ResyncPending);
        assert_eq!(
            StaleReason::from_check(Some(ResyncCheck::Mismatch)),
            StaleReason::FingerprintMismatch
        );
        assert_eq!(
            StaleReason::from_check(Some(ResyncCheck::NoFingerprint)),
            StaleReason::NoFingerprint
        );
    }
}
