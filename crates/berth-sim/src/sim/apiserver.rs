//! The API server's part of the [`Simulation`]: creates and replaces objects with its
//! defaulting and admission (UIDs, creation times, priorities, kept status), answers the
//! scheduler's writes of volumes and claims, deletes and evicts.

use super::*;

impl Simulation {
    /// Creates or replaces `obj` as the API server would (defaulting, admission), then
    /// tells the scheduler, the kubelet, the provisioner and the controllers that follow it.
    pub(super) fn apply_object(&mut self, mut obj: Object, initial: bool) {
        let key = obj.key();
        let existing = self.store.get(&key).cloned();
        let old_meta = existing.as_ref().map(|o| o.meta().clone());
        {
            let meta = obj.meta_mut();
            let (ns, name) = (key.namespace.to_string(), key.name.to_string());
            self.fill_meta(meta, key.kind.as_str(), &ns, &name, old_meta.as_ref());
        }
        let Some(admit) = self.admit_object(&mut obj, existing.as_ref(), &key, initial) else {
            return;
        };
        if let Object::Node(n) = &mut obj {
            kubelet_node_labels(Arc::make_mut(n));
        }
        self.publish_cpus(&mut obj);
        let is_node = matches!(obj, Object::Node(_));
        let declared = self.declared_layout(&obj, &key);
        self.store.insert(obj.clone());
        self.core.handle(self.now, Event::Applied(obj));
        self.provisioner_observe(&key);
        if admit {
            self.kubelet_admit(&key);
        }
        if matches!(
            key.kind,
            Kind::Pod | Kind::ResourceClaim | Kind::ResourceClaimTemplate
        ) {
            self.sync_claims();
        }
        if let Some((n, layout)) = declared {
            let nrt =
                crate::cpu_agent::publish(&n, layout, self.store.nrt(&key.name).map(|t| &**t));
            self.apply_object(Object::NodeResourceTopology(Arc::new(nrt)), initial);
        }
        if is_node {
            for pod in self.awaiting_node.remove(&*key.name).unwrap_or_default() {
                self.kubelet_admit(&pod);
            }
        }
        if matches!(
            key.kind,
            Kind::PersistentVolume | Kind::PersistentVolumeClaim | Kind::StorageClass
        ) {
            self.sync_volumes();
        }
    }

    /// The API server's defaulting and admission of an object being written over
    /// `existing`: a pod's priority, phase and what it keeps of the stored pod, the status
    /// kept on replace, a claim's `Pending`. Returns whether the kubelet must admit the
    /// pod; `None` when the pod is refused (warned about).
    fn admit_object(
        &mut self,
        obj: &mut Object,
        existing: Option<&Object>,
        key: &ObjectKey,
        initial: bool,
    ) -> Option<bool> {
        let mut admit = false;
        match (obj, existing) {
            (Object::Pod(p), old) => {
                let pod = Arc::make_mut(p);
                if let Some(Object::Pod(old)) = old {
                    carry_over_pod(pod, old);
                }
                if let Err(message) = self.resolve_priority(pod) {
                    self.warn(format!("pod {key} not created: {message}"));
                    return None;
                }
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .filter(|n| !n.is_empty());
                let node_exists = node.as_ref().is_some_and(|n| {
                    self.store.node(n).is_some() || self.initial_nodes.contains(n)
                });
                let status = pod.status.get_or_insert_with(PodStatus::default);
                if status.phase.is_none() {
                    if node.is_none() {
                        status.phase = Some("Pending".into());
                    } else if initial && node_exists {
                        status.phase = Some("Running".into());
                    } else {
                        admit = true;
                        status.phase = Some("Pending".into());
                    }
                }
            }
            (Object::Reservation(r), Some(Object::Reservation(old))) if r.status.is_none() => {
                Arc::make_mut(r).status = old.status.clone();
            }
            (Object::Node(n), Some(Object::Node(old))) if n.status.is_none() => {
                Arc::make_mut(n).status = old.status.clone();
            }
            // The API server's defaulting: a claim is `Pending` until the PV controller
            // binds it.
            (Object::PersistentVolumeClaim(c), _)
                if c.status.as_ref().and_then(|s| s.phase.as_ref()).is_none() =>
            {
                Arc::make_mut(c)
                    .status
                    .get_or_insert_with(Default::default)
                    .phase = Some("Pending".into());
            }
            _ => {}
        }
        Some(admit)
    }

    /// koordlet's CPU annotations on an NRT the scenario gives for a node that declares its
    /// CPU layout.
    fn publish_cpus(&mut self, obj: &mut Object) {
        if let Object::NodeResourceTopology(t) = obj {
            let admitted = self.cpu_budget.admitted(t.node_name());
            let layout = self
                .store
                .node(t.node_name())
                .filter(|_| admitted)
                .and_then(|n| {
                    crate::cpu_agent::declared(n)
                        .ok()
                        .flatten()
                        .map(|l| (n.clone(), l))
                });
            if let Some((n, l)) = layout {
                *t = Arc::new(crate::cpu_agent::publish(&n, l, Some(t)));
            }
        }
    }

    /// The CPU layout a node declares, once admitted to the CPU budget (warned about when
    /// refused); the budget of a node that declares none is released.
    fn declared_layout(
        &mut self,
        obj: &Object,
        key: &ObjectKey,
    ) -> Option<(
        Arc<berth_api::k8s_openapi::api::core::v1::Node>,
        (u32, u32, u32),
    )> {
        match obj {
            Object::Node(n) => {
                let declared = crate::cpu_agent::declared(n).and_then(|l| match l {
                    Some(l) => self.cpu_budget.admit(&key.name, l).map(|()| Some(l)),
                    None => Ok(None),
                });
                if !matches!(declared, Ok(Some(_))) {
                    self.cpu_budget.release(&key.name);
                }
                match declared {
                    Ok(l) => l.map(|l| (n.clone(), l)),
                    Err(message) => {
                        self.warn(format!("node {}: {message}", key.name));
                        None
                    }
                }
            }
            _ => None,
        }
    }

    /// DynamicResources' PreBind write of a claim's status, as the API server answers a
    /// status update: not found when the claim is gone.
    pub(super) fn write_claim_status(
        &mut self,
        pod: ObjectKey,
        uid: String,
        node: String,
        claim: Arc<berth_api::dra::ResourceClaim>,
    ) {
        let key = Object::ResourceClaim(claim.clone()).key();
        let Some(Object::ResourceClaim(old)) = self.store.get(&key) else {
            let message = format!("resourceclaims.resource.k8s.io \"{}\" not found", key.name);
            self.core.handle(
                self.now,
                Event::BindFailed {
                    pod,
                    uid,
                    node,
                    class: BindFailure::NotFound,
                    message,
                },
            );
            return;
        };
        let mut c = (**old).clone();
        c.status = claim.status.clone();
        self.apply_object(Object::ResourceClaim(Arc::new(c)), false);
    }

    /// VolumeBinding's PreBind write of a volume (`BindVolume`) or a claim
    /// (`ProvisionClaim`), as the API server answers an update: a conflict when someone
    /// else bound the object meanwhile, not found when it is gone.
    pub(super) fn write_volume(&mut self, pod: ObjectKey, uid: String, node: String, obj: Object) {
        let key = obj.key();
        let resource = if key.kind == Kind::PersistentVolume {
            "persistentvolumes"
        } else {
            "persistentvolumeclaims"
        };
        let failed = |class, message| Event::BindFailed {
            pod: pod.clone(),
            uid: uid.clone(),
            node: node.clone(),
            class,
            message,
        };
        let written = match (self.store.get(&key), obj) {
            (None, _) => {
                let message = format!("{resource} \"{}\" not found", key.name);
                self.core
                    .handle(self.now, failed(BindFailure::NotFound, message));
                return;
            }
            (Some(Object::PersistentVolume(old)), Object::PersistentVolume(new)) => {
                let theirs = old.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
                let mine = new.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
                let same = theirs.is_none_or(|t| {
                    mine.is_some_and(|m| m.name == t.name && m.namespace == t.namespace)
                });
                same.then(|| {
                    let mut pv = (**old).clone();
                    pv.spec.get_or_insert_with(Default::default).claim_ref = mine.cloned();
                    if let Some(a) = &new.metadata.annotations {
                        pv.metadata
                            .annotations
                            .get_or_insert_with(Default::default)
                            .extend(a.clone());
                    }
                    Object::PersistentVolume(Arc::new(pv))
                })
            }
            (Some(Object::PersistentVolumeClaim(old)), Object::PersistentVolumeClaim(new)) => {
                let free = old
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .is_none_or(str::is_empty);
                free.then(|| {
                    let mut c = (**old).clone();
                    if let Some(a) = &new.metadata.annotations {
                        c.metadata
                            .annotations
                            .get_or_insert_with(Default::default)
                            .extend(a.clone());
                    }
                    Object::PersistentVolumeClaim(Arc::new(c))
                })
            }
            _ => None,
        };
        match written {
            Some(obj) => self.apply_object(obj, false),
            None => {
                let message = format!("Operation cannot be fulfilled on {resource} \"{}\": the object has been modified; please apply your changes to the latest version and try again", key.name);
                self.core
                    .handle(self.now, failed(BindFailure::Conflict, message));
            }
        }
    }

    /// Fills what the API server fills on create: `uid` (kept from the stored object on
    /// replace, else derived from kind/namespace/name) and `creationTimestamp` (kept, else
    /// now).
    pub(super) fn fill_meta(
        &self,
        meta: &mut ObjectMeta,
        kind: &str,
        namespace: &str,
        name: &str,
        old: Option<&ObjectMeta>,
    ) {
        if meta.uid.as_deref().is_none_or(str::is_empty) {
            meta.uid = Some(
                old.and_then(|m| m.uid.clone())
                    .unwrap_or_else(|| derive_uid(kind, namespace, name)),
            );
        }
        if meta.creation_timestamp.is_none() {
            meta.creation_timestamp = Some(
                old.and_then(|m| m.creation_timestamp.clone())
                    .unwrap_or_else(|| meta_time(self.now)),
            );
        }
    }

    /// The Priority admission plugin: `spec.priority` and `spec.preemptionPolicy` from the
    /// pod's PriorityClass, or from the global default class when it names none. A pod that
    /// sets `spec.priority` without a class keeps it (the API server would reject it; the
    /// simulator lets scenario files write priorities directly).
    pub(super) fn resolve_priority(&self, pod: &mut Pod) -> Result<(), String> {
        let spec = pod.spec.get_or_insert_with(Default::default);
        let class = spec.priority_class_name.clone().filter(|c| !c.is_empty());
        let (value, policy) = match class {
            Some(name) => {
                if let Some((_, v)) = SYSTEM_PRIORITY_CLASSES.iter().find(|(n, _)| *n == name) {
                    (*v, None)
                } else {
                    match self
                        .store
                        .get(&ObjectKey::cluster(Kind::PriorityClass, &name))
                    {
                        Some(Object::PriorityClass(pc)) => (pc.value, pc.preemption_policy.clone()),
                        _ => return Err(format!("no PriorityClass with name {name} was found")),
                    }
                }
            }
            None if spec.priority.is_some() => {
                spec.preemption_policy
                    .get_or_insert_with(|| DEFAULT_PREEMPTION_POLICY.to_string());
                return Ok(());
            }
            None => {
                let default = self
                    .store
                    .of_kind(Kind::PriorityClass)
                    .filter_map(|o| match o {
                        Object::PriorityClass(pc) if pc.global_default == Some(true) => Some(pc),
                        _ => None,
                    })
                    .fold(None, |best: Option<&Arc<PriorityClass>>, pc| match best {
                        Some(b) if b.value >= pc.value => Some(b),
                        _ => Some(pc),
                    });
                match default {
                    Some(pc) => {
                        spec.priority_class_name = pc.metadata.name.clone();
                        (pc.value, pc.preemption_policy.clone())
                    }
                    None => (0, None),
                }
            }
        };
        spec.priority = Some(value);
        spec.preemption_policy =
            Some(policy.unwrap_or_else(|| DEFAULT_PREEMPTION_POLICY.to_string()));
        Ok(())
    }

    /// Deletes an object and tells the scheduler.
    pub fn delete(&mut self, key: ObjectKey) {
        if key.kind == Kind::Node {
            self.cpu_budget.release(&key.name);
        }
        if let Some(Object::Pod(p)) = self.store.remove(&key) {
            if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                if let Some(set) = self.awaiting_node.get_mut(node) {
                    set.remove(&key);
                }
            }
        }
        let claims = matches!(key.kind, Kind::Pod | Kind::ResourceClaim);
        self.core.handle(self.now, Event::Deleted(key));
        if claims {
            self.sync_claims();
        }
    }

    /// The Eviction API (`pods/eviction`): deletes the pod unless a PodDisruptionBudget
    /// forbids it now (see [`crate::controllers::eviction`]). Its controller, if any,
    /// replaces it when the cluster next settles.
    pub fn evict(
        &mut self,
        key: &ObjectKey,
    ) -> Result<(), crate::controllers::eviction::EvictionError> {
        crate::controllers::eviction::check(&self.store, key)?;
        self.delete(key.clone());
        Ok(())
    }

    /// Creates a Reservation as the API server would (defaults, UID, creation time) and
    /// tells the scheduler.
    pub(super) fn create_reservation(&mut self, mut r: berth_api::reservation::Reservation) {
        r.metadata.namespace = None;
        r.apply_defaults();
        let name = r.metadata.name.clone().unwrap_or_default();
        self.fill_meta(&mut r.metadata, "Reservation", "", &name, None);
        let obj = Object::Reservation(Arc::new(r));
        self.store.insert(obj.clone());
        self.core.handle(self.now, Event::Applied(obj));
    }
}

/// The label every kubelet puts on its Node when it registers: `kubernetes.io/hostname`,
/// the node's name unless the object already says otherwise. Scenario authors write
/// `nodeSelector`, spread and anti-affinity on `kubernetes.io/hostname` as they would on a
/// real cluster, where no node lacks it (without it, spreading over hostname would reject
/// every node as "missing required label").
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";

pub(super) fn kubelet_node_labels(node: &mut berth_api::k8s_openapi::api::core::v1::Node) {
    let Some(name) = node.metadata.name.clone() else {
        return;
    };
    node.metadata
        .labels
        .get_or_insert_with(Default::default)
        .entry(LABEL_HOSTNAME.to_string())
        .or_insert(name);
}

/// On replace, what the API server keeps of a pod: its status (a subresource) when the new
/// object gives none, and its node (immutable once set) and the scheduler's annotations.
pub(super) fn carry_over_pod(pod: &mut Pod, old: &Pod) {
    if pod.status.is_none() {
        pod.status = old.status.clone();
    }
    let old_node = old
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty());
    let spec = pod.spec.get_or_insert_with(Default::default);
    if spec.node_name.as_deref().is_none_or(str::is_empty) {
        if let Some(node) = old_node {
            spec.node_name = Some(node);
            if let Some(old_ann) = &old.metadata.annotations {
                let ann = pod
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default);
                for (k, v) in old_ann {
                    ann.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
    }
}
