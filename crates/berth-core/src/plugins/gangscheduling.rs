//! Gang scheduling's PreEnqueue (kube-scheduler 1.35's GangScheduling, Koordinator's and
//! scheduler-plugins' Coscheduling): before a member's cycle, its gang object must exist
//! and the gang must have at least `min` pods; otherwise the pod waits: for a PodGroup's gang
//! unschedulable with the upstream message, for a Workload's without a condition, as
//! kube-scheduler 1.35's PreEnqueue leaves it. The rest of gang scheduling (Permit with waiting) is the scheduler's
//! (`scheduler/permit.rs`), over the gang bookkeeping in [`crate::gang`].
//!
//! berth's gangs are not configured per profile: the scheduler asks this plugin for every
//! pod, ahead of the profile's own PreEnqueue plugins.

use crate::framework::plugin::{PreEnqueueContext, PreEnqueueRejection};
use crate::framework::{Plugin, Points};
use crate::gang::{Api, COSCHEDULING, GANG_SCHEDULING};
use crate::model::pod::PodInfo;

/// The gang PreEnqueue plugin. Its rejections name `GangScheduling` for a Workload's gang
/// and `Coscheduling` for a PodGroup's.
#[derive(Debug, Clone, Copy, Default)]
pub struct GangScheduling;

impl Plugin for GangScheduling {
    fn name(&self) -> &'static str {
        GANG_SCHEDULING
    }

    fn points(&self) -> Points {
        Points::PRE_ENQUEUE
    }

    fn pre_enqueue(
        &self,
        cx: &PreEnqueueContext<'_>,
        pod: &PodInfo,
    ) -> Result<(), PreEnqueueRejection> {
        let Some(gang) = cx.gangs.gang(&pod.key).cloned() else {
            return Ok(());
        };
        let Some(message) = cx.gangs.held_back(&gang, pod) else {
            return Ok(());
        };
        let plugin = match gang.api {
            Api::Workload => GANG_SCHEDULING,
            _ => COSCHEDULING,
        };
        // kube-scheduler 1.35 runs GangScheduling's checks at PreEnqueue, whose rejections
        // write no condition: the pod just waits. The Coscheduling plugins run theirs at
        // PreFilter, whose rejections are the pod's unschedulable condition.
        let message = (gang.api != Api::Workload).then_some(message);
        Err(PreEnqueueRejection { plugin, message })
    }
}
