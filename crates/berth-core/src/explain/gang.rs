//! The gang part of an explanation: for a gang member, where its gang stands (how many
//! members are placed against the minimum, which wait at Permit, which are not placed and
//! why), from the scheduler's own bookkeeping ([`crate::gang::Report`]).

use crate::object::{Kind, ObjectKey};
use crate::scheduler::Scheduler;

use super::{Explanation, Target};

/// Fills [`Explanation::gang`] when the target is a gang member.
pub(super) fn fill(s: &Scheduler, target: &Target, out: &mut Explanation) {
    let key = match target {
        Target::Pod(key) => key.clone(),
        Target::Reservation(name) => match s.cluster.reservations.by_name(name) {
            Some(r) => match &r.item {
                Some(item) => item.key.clone(),
                None => ObjectKey::cluster(Kind::Reservation, name),
            },
            None => return,
        },
    };
    out.gang = s.gang_report(&key);
}
