//! The node agents and the provisioner of the [`Simulation`]: the kubelet admitting bound
//! pods, the Dynamic Reservation Provisioning provisioner creating Reservations.

use super::*;

impl Simulation {
    /// Shows the provisioner a pod just written.
    pub(super) fn provisioner_observe(&mut self, key: &ObjectKey) {
        if key.kind != Kind::Pod {
            return;
        }
        use berth_api::annotations::{AnnotationCodec, NewReservationRequirement};
        // Unbound and carrying both annotations (an unreadable template included: the
        // provisioner reports it).
        let req = self
            .store
            .pod(key)
            .filter(|p| berth_core::drp::objects::provisioned_reservation(p).is_some())
            .and_then(|p| {
                NewReservationRequirement::from_annotations(p.metadata.annotations.as_ref())
                    .ok()
                    .flatten()
            });
        self.provisioner.observe(key, req, self.now);
    }

    /// The provisioner acts on the requirement it saw on `key`: unless the pod is gone or
    /// bound, or a Reservation carrying its id exists, it creates the Reservation (even if
    /// the pod asks for another id by now: a slow provisioner finishes what it started)
    /// under the first free name. An unreadable template is a `ReservationCreationFailed`
    /// warning on the pod.
    pub(super) fn provision(
        &mut self,
        key: &ObjectKey,
        req: &berth_api::annotations::NewReservationRequirement,
    ) {
        use berth_core::drp::objects::{
            nth_name, provisioned_reservation_for, requirement_id, reservation_id,
        };
        let Some(pod) = self.store.pod(key).cloned() else {
            return;
        };
        let Some(id) = requirement_id(req) else {
            return;
        };
        let exists = self.store.of_kind(Kind::Reservation).any(|o| match o {
            Object::Reservation(r) => reservation_id(r) == Some(id),
            _ => false,
        });
        if exists {
            return;
        }
        match provisioned_reservation_for(&pod, req) {
            None => {}
            Some(Err(message)) => self.record(Record {
                involved: key.clone(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                type_: "Warning",
                reason: berth_core::drp::REASON_FAILED.to_string(),
                message: format!("provisioner: {message}"),
            }),
            Some(Ok(mut r)) => {
                let base = r.metadata.name.clone().unwrap_or_default();
                let name = (1..)
                    .map(|n| nth_name(&base, n))
                    .find(|n| self.store.reservation(n).is_none())
                    .unwrap_or(base);
                r.metadata.name = Some(name);
                self.create_reservation(r);
            }
        }
    }

    /// The kubelet of the pod's node admits it (`Running`) or rejects it (`Failed`); the
    /// update goes back to the scheduler. Waits if the node does not exist.
    pub(super) fn kubelet_admit(&mut self, key: &ObjectKey) {
        let Some(p) = self.store.pod(key) else {
            return;
        };
        let Some(node) = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty())
        else {
            return;
        };
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Running" | "Succeeded" | "Failed")) {
            return;
        }
        if self.store.node(&node).is_none() {
            self.warn(format!(
                "pod {key} is bound to node {node:?}, which does not exist: no kubelet admits it, so it stays Pending (until a node of that name is created)"
            ));
            self.awaiting_node
                .entry(node)
                .or_default()
                .insert(key.clone());
            return;
        }
        // The kubelet does not start a pod whose volumes cannot be mounted yet.
        if !crate::volume_controllers::pod_claims_bound(&self.store, p)
            || !crate::claim_controller::pod_claims_ready(&self.store, p)
        {
            self.awaiting_volumes.insert(key.clone());
            return;
        }
        self.awaiting_volumes.remove(key);
        let verdict = self.agent.admit(&self.store, p, &node);
        let mut p = (**p).clone();
        let status = p.status.get_or_insert_with(PodStatus::default);
        match verdict {
            Admission::Admit { annotations } => {
                status.phase = Some("Running".into());
                status.start_time.get_or_insert_with(|| meta_time(self.now));
                if !annotations.is_empty() {
                    p.metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .extend(annotations);
                }
            }
            Admission::Reject { reason, message } => {
                status.phase = Some("Failed".into());
                status.reason = Some(reason);
                status.message = Some(message);
            }
        }
        let obj = Object::Pod(Arc::new(p));
        self.store.insert(obj.clone());
        self.core.handle(self.now, Event::Applied(obj));
    }
}
