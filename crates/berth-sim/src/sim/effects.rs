//! The [`Simulation`] performs the scheduler's effects as the API server would
//! ([`berth_core::apply`], shared with the core's fake cluster), feeding the results back.

use super::*;
use berth_core::apply::Write;

impl Simulation {
    /// Performs one effect of the core, as the API server (and, for binds, the kubelet)
    /// would, feeding the result back.
    pub(super) fn perform(&mut self, effect: Effect) {
        // Status-only patches of its own pods: kube-scheduler ignores such updates, so the
        // result is not fed back.
        let status_only = matches!(
            effect,
            Effect::PodCondition { .. } | Effect::NominatePod { .. }
        );
        let bind = matches!(effect, Effect::Bind { .. });
        let now = meta_time(self.now);
        match berth_core::apply::write(effect, |k| self.store.get(k), &now) {
            Write::Object(obj) => {
                let key = obj.key();
                self.store.insert(obj.clone());
                if status_only {
                    return;
                }
                self.core.handle(self.now, Event::Applied(obj));
                if bind {
                    // The bound pod goes to the kubelet.
                    self.kubelet_admit(&key);
                } else {
                    self.provisioner_observe(&key);
                }
            }
            Write::Refused(answer) => self.core.handle(self.now, answer),
            Write::Delete(key) => self.delete(key),
            Write::Missing(Effect::ReservationStatus { name, .. }) => self.warn(format!(
                "status for reservation {name}, which does not exist"
            )),
            Write::Missing(_) | Write::Stale => {}
            Write::Other(effect) => self.perform_other(effect),
        }
    }

    /// The effects that are not a write to one stored object: creates, events, and the
    /// volume and claim writes the simulated controllers answer.
    fn perform_other(&mut self, effect: Effect) {
        match effect {
            Effect::CreateReservation(r) => {
                let name = r.metadata.name.clone().unwrap_or_default();
                if self.store.reservation(&name).is_some() {
                    self.warn(format!("reservation {name} already exists; not created"));
                    return;
                }
                self.create_reservation(*r);
            }
            Effect::Record(r) => self.record(r),
            Effect::BindVolume {
                pod,
                uid,
                node,
                volume,
            } => self.write_volume(pod, uid, node, Object::PersistentVolume(volume)),
            Effect::ProvisionClaim {
                pod,
                uid,
                node,
                claim,
            } => self.write_volume(pod, uid, node, Object::PersistentVolumeClaim(claim)),
            Effect::UpdateClaimStatus {
                pod,
                uid,
                node,
                claim,
            } => self.write_claim_status(pod, uid, node, claim),
            other => self.warn(format!("effect not simulated: {other:?}")),
        }
    }
}
