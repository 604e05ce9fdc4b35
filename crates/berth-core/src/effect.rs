//! What the core asks the driver to do.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

use berth_api::reservation::{Reservation, ReservationStatus};

use crate::object::ObjectKey;

/// An output of the core, drained with [`crate::Scheduler::poll_effect`]. The driver performs
/// them in order; results come back as [`crate::Event`]s.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Effect {
    /// Write `annotations` onto the pod, then bind it to `node` (PreBind, then Bind).
    Bind {
        /// The pod.
        pod: ObjectKey,
        /// The pod's UID: the `Binding`'s `metadata.uid` precondition, so a pod deleted and
        /// recreated under the same name is never bound by a decision made for the old one.
        uid: String,
        /// The chosen node.
        node: String,
        /// Annotations to merge into the pod before binding (for example
        /// `scheduling.koordinator.sh/reservation-allocated`).
        annotations: BTreeMap<String, String>,
    },
    /// Set the pod's `PodScheduled` condition (`status.nominatedNodeName` comes as
    /// [`Effect::NominatePod`]).
    PodCondition {
        /// The pod.
        pod: ObjectKey,
        /// `"True"` or `"False"`.
        status: &'static str,
        /// `Unschedulable`, `SchedulerError`...
        reason: String,
        /// kube-scheduler's message.
        message: String,
    },
    /// Replace the reservation's status (`/status` subresource).
    ReservationStatus {
        /// The reservation's name.
        name: String,
        /// Its UID as the core knows it: a precondition, so the status of a deleted
        /// reservation is never written onto a new one of the same name.
        uid: String,
        /// Its new status. The driver retries a conflict by re-reading the object and
        /// writing this status again (the core's view is the source of truth for status).
        status: ReservationStatus,
    },
    /// Create a reservation (dynamic provisioning).
    CreateReservation(Box<Reservation>),
    /// Delete an object (a preemption victim, a garbage-collected reservation), with the
    /// UID precondition so that only the incarnation the core decided about is deleted.
    Delete {
        /// The object.
        key: ObjectKey,
        /// Its UID (`DeleteOptions.preconditions.uid`); empty when unknown.
        uid: String,
        /// Its resourceVersion when the decision depends on the exact version (a
        /// reservation expired on what it held); `None` deletes any version.
        resource_version: Option<String>,
        /// Set when the object is a preemption victim: what the driver needs to evict it
        /// as kube-scheduler does.
        preemption: Option<Preemption>,
    },
    /// Set (or, with `None`, clear) the pod's `status.nominatedNodeName`: preemption chose
    /// `node` for it and evicts its victims there (or preemption cannot help it any more).
    /// Comes after the cycle's `PodCondition`, if one is sent: kube-scheduler writes both in
    /// one status patch.
    NominatePod {
        /// The pod.
        pod: ObjectKey,
        /// The nominated node; `None` clears the field.
        node: Option<String>,
    },
    /// Merge annotations into a running pod (pre-allocation).
    AnnotatePod {
        /// The pod.
        pod: ObjectKey,
        /// Annotations to merge.
        annotations: BTreeMap<String, String>,
    },
    /// Merge annotations into a Reservation (PreBind of its stand-in: the CPUs
    /// NodeNUMAResource reserved, `scheduling.koordinator.sh/resource-status`).
    AnnotateReservation {
        /// The reservation's name.
        name: String,
        /// Its UID: a precondition, as for [`Effect::ReservationStatus`].
        uid: String,
        /// Annotations to merge.
        annotations: BTreeMap<String, String>,
    },
    /// Record a `v1` Event.
    Record(Record),
    /// VolumeBinding's PreBind: bind a static volume to a claim, an update of the whole
    /// PersistentVolume as the scheduler read it (`resourceVersion` included, so a volume
    /// changed meanwhile is a conflict) with `spec.claimRef` set and, unless the user
    /// pre-bound it, `pv.kubernetes.io/bound-by-controller`. The PV controller completes
    /// the binding. A failure is reported as [`crate::Event::BindFailed`] for `pod`.
    BindVolume {
        /// The pod the binding is for.
        pod: ObjectKey,
        /// Its UID.
        uid: String,
        /// The node it is being bound to.
        node: String,
        /// The volume to write.
        volume: Arc<PersistentVolume>,
    },
    /// DynamicResources' PreBind: write a ResourceClaim's status, the allocation Reserve
    /// made (if the claim had none) and the pod added to `reservedFor`, before the pod's
    /// bind. A failure is reported as [`crate::Event::BindFailed`] for `pod`.
    UpdateClaimStatus {
        /// The pod the claim is for.
        pod: ObjectKey,
        /// Its UID.
        uid: String,
        /// The node the pod is being bound to (a failure names it, as a failed bind does).
        node: String,
        /// The claim, with its new status.
        claim: Arc<berth_api::dra::ResourceClaim>,
    },
    /// DynamicResources' PostFilter: a ResourceClaim allocated for nodes the unschedulable
    /// pod cannot use, with no other consumer, written back without its allocation
    /// (`allocation`, `reservedFor` and `devices` cleared), so that the pod's next attempt
    /// allocates it anew (kube-scheduler's `deallocation of ResourceClaim completed`). The
    /// write is conditional on the claim's UID and resourceVersion, as upstream's update
    /// of the claim it read; a failure only leaves the claim as it was.
    DeallocateClaim {
        /// The claim, as the scheduler last saw it (UID and resourceVersion preconditions).
        claim: Arc<berth_api::dra::ResourceClaim>,
    },
    /// VolumeBinding's PreBind: ask for a claim to be provisioned on the pod's node, an
    /// update of the whole PersistentVolumeClaim with `volume.kubernetes.io/selected-node`
    /// set. A failure is reported as [`crate::Event::BindFailed`] for `pod`.
    ProvisionClaim {
        /// The pod the claim is provisioned for.
        pod: ObjectKey,
        /// Its UID.
        uid: String,
        /// The node it is being bound to.
        node: String,
        /// The claim to write.
        claim: Arc<PersistentVolumeClaim>,
    },
}

/// A preemption victim's eviction (kube-scheduler's `prepareCandidate`): the victim gets the
/// `DisruptionTarget` condition, then is deleted; with reservation-backed preemption, only
/// once the Reservation holding the room exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preemption {
    /// The preemptor.
    pub preemptor: ObjectKey,
    /// The preemptor's scheduler name, which the condition's message starts with.
    pub scheduler: String,
    /// The Reservation holding the freed room for the preemptor, when preemption is
    /// reservation-backed. Its [`Effect::CreateReservation`], if one is emitted, comes
    /// before the victims' deletions; the driver must not delete a victim before that
    /// creation was answered, or another pod could take the room in between.
    pub hold: Option<String>,
}

impl Preemption {
    /// The `DisruptionTarget` condition's message, as kube-scheduler writes it.
    pub fn message(&self) -> String {
        format!(
            "{}: preempting to accommodate a higher priority pod",
            self.scheduler
        )
    }
}

/// A `v1` Event the scheduler reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The object the event is about.
    pub involved: ObjectKey,
    /// The object's UID, when known.
    pub uid: String,
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// A CamelCase reason (`Scheduled`, `FailedScheduling`...).
    pub reason: String,
    /// The human message.
    pub message: String,
}
