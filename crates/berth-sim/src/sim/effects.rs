//! The [`Simulation`] performs the scheduler's effects as the API server would, feeding
//! the results back.

use super::*;

impl Simulation {
    /// Performs one effect of the core, as the API server (and, for binds, the kubelet)
    /// would, feeding the result back.
    pub(super) fn perform(&mut self, effect: Effect) {
        match effect {
            Effect::Bind {
                pod,
                uid,
                node,
                annotations,
            } => self.bind(pod, uid, node, annotations),
            Effect::PodCondition {
                pod,
                status,
                reason,
                message,
            } => {
                let Some(p) = self.store.pod(&pod) else {
                    return;
                };
                let mut p = (**p).clone();
                let now = self.now;
                set_pod_scheduled(&mut p, status, Some(reason), Some(message), now);
                self.store.insert(Object::Pod(Arc::new(p)));
            }
            Effect::ReservationStatus { name, uid, status } => {
                let Some(r) = self.store.reservation(&name) else {
                    self.warn(format!(
                        "status for reservation {name}, which does not exist"
                    ));
                    return;
                };
                if !uid.is_empty() && r.metadata.uid.as_deref() != Some(uid.as_str()) {
                    // The UID precondition: the status was meant for an earlier
                    // reservation of that name.
                    return;
                }
                let mut r = (**r).clone();
                r.status = Some(status);
                let obj = Object::Reservation(Arc::new(r));
                self.store.insert(obj.clone());
                self.core.handle(self.now, Event::Applied(obj));
            }
            Effect::AnnotateReservation {
                name,
                uid,
                annotations,
            } => {
                let Some(r) = self.store.reservation(&name) else {
                    return;
                };
                if !uid.is_empty() && r.metadata.uid.as_deref() != Some(uid.as_str()) {
                    return;
                }
                let mut r = (**r).clone();
                r.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(annotations);
                let obj = Object::Reservation(Arc::new(r));
                self.store.insert(obj.clone());
                self.core.handle(self.now, Event::Applied(obj));
            }
            Effect::CreateReservation(r) => {
                let name = r.metadata.name.clone().unwrap_or_default();
                if self.store.reservation(&name).is_some() {
                    self.warn(format!("reservation {name} already exists; not created"));
                    return;
                }
                self.create_reservation(*r);
            }
            Effect::Delete { key, uid, .. } => {
                // The UID precondition, as the API server checks it (the simulator keeps no
                // resourceVersions, so that precondition always holds).
                let stale = !uid.is_empty()
                    && self
                        .store
                        .get(&key)
                        .is_some_and(|o| o.meta().uid.as_deref() != Some(uid.as_str()));
                if !stale {
                    self.delete(key);
                }
            }
            Effect::NominatePod { pod, node } => {
                // A status-only patch: kube-scheduler ignores such updates of its own
                // pods, so the result is not fed back.
                let Some(p) = self.store.pod(&pod) else {
                    return;
                };
                let mut p = (**p).clone();
                p.status
                    .get_or_insert_with(PodStatus::default)
                    .nominated_node_name = node;
                self.store.insert(Object::Pod(Arc::new(p)));
            }
            Effect::AnnotatePod { pod, annotations } => {
                let Some(p) = self.store.pod(&pod) else {
                    return;
                };
                let mut p = (**p).clone();
                p.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(annotations);
                let obj = Object::Pod(Arc::new(p));
                self.store.insert(obj.clone());
                self.core.handle(self.now, Event::Applied(obj));
                self.provisioner_observe(&pod);
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

    /// PreBind annotations, then the Binding: `spec.nodeName` and `PodScheduled=True`; the
    /// bound pod goes back to the scheduler, then to the kubelet.
    pub(super) fn bind(
        &mut self,
        key: ObjectKey,
        uid: String,
        node: String,
        annotations: BTreeMap<String, String>,
    ) {
        let Some(p) = self.store.pod(&key) else {
            let message = format!("pods \"{}\" not found", key.name);
            let failed = Event::BindFailed {
                pod: key,
                uid,
                node,
                class: BindFailure::NotFound,
                message,
            };
            self.core.handle(self.now, failed);
            return;
        };
        if p.metadata.uid.as_deref() != Some(uid.as_str()) {
            let message = format!(
                "Operation cannot be fulfilled on pods/binding \"{}\": the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                key.name,
                p.metadata.uid.as_deref().unwrap_or("")
            );
            let failed = Event::BindFailed {
                pod: key,
                uid,
                node,
                class: BindFailure::Conflict,
                message,
            };
            self.core.handle(self.now, failed);
            return;
        }
        if let Some(current) = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
        {
            let message = format!(
                "Operation cannot be fulfilled on pods/binding \"{}\": pod {} is already assigned to node \"{current}\"",
                key.name, key.name
            );
            let failed = Event::BindFailed {
                pod: key,
                uid,
                node,
                class: BindFailure::Conflict,
                message,
            };
            self.core.handle(self.now, failed);
            return;
        }
        let mut p = (**p).clone();
        if !annotations.is_empty() {
            p.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .extend(annotations);
        }
        p.spec.get_or_insert_with(Default::default).node_name = Some(node);
        // The binding subresource clears the nomination (kube-apiserver since KEP-5278;
        // the scheduler itself did before): a bound pod has no nominated node.
        if let Some(status) = p.status.as_mut() {
            status.nominated_node_name = None;
        }
        set_pod_scheduled(&mut p, "True", None, None, self.now);
        let obj = Object::Pod(Arc::new(p));
        self.store.insert(obj.clone());
        self.core.handle(self.now, Event::Applied(obj));
        self.kubelet_admit(&key);
    }
}

/// Sets the pod's `PodScheduled` condition as `podutil.UpdatePodCondition` does: the
/// transition time moves only when the status changes.
pub(super) fn set_pod_scheduled(
    pod: &mut Pod,
    status: &str,
    reason: Option<String>,
    message: Option<String>,
    now: Time,
) {
    let conditions = pod
        .status
        .get_or_insert_with(PodStatus::default)
        .conditions
        .get_or_insert_with(Vec::new);
    let old = conditions.iter().position(|c| c.type_ == "PodScheduled");
    let transition = match old.map(|i| &conditions[i]) {
        Some(c) if c.status == status => c
            .last_transition_time
            .clone()
            .unwrap_or_else(|| meta_time(now)),
        _ => meta_time(now),
    };
    let cond = PodCondition {
        type_: "PodScheduled".to_string(),
        status: status.to_string(),
        reason,
        message,
        last_transition_time: Some(transition),
        ..Default::default()
    };
    match old {
        Some(i) => conditions[i] = cond,
        None => conditions.push(cond),
    }
}
