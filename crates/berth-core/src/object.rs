//! The objects the core is told about, and how they are named.

use std::fmt;
use std::sync::Arc;

use berth_api::dra::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use berth_api::gang::{PodGroup, Workload};
use berth_api::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use berth_api::k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod,
};
use berth_api::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use berth_api::k8s_openapi::api::scheduling::v1::PriorityClass;
use berth_api::k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, CSIStorageCapacity, StorageClass,
};
use berth_api::migration::PodMigrationJob;
use berth_api::nrt::NodeResourceTopology;
use berth_api::reservation::Reservation;

/// The kinds of object the scheduler watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `storage.k8s.io/v1` `CSIDriver` (whether a driver publishes storage capacity).
    CsiDriver,
    /// `v1` `CSINode` (storage.k8s.io).
    CsiNode,
    /// `storage.k8s.io/v1` `CSIStorageCapacity` (namespaced).
    CsiStorageCapacity,
    /// `apps/v1` `Deployment` (the scheduler ignores it; the simulator plays its controller).
    Deployment,
    /// `resource.k8s.io/v1` `DeviceClass`.
    DeviceClass,
    /// `v1` `Namespace` (its labels are what `namespaceSelector` selects on).
    Namespace,
    /// `v1` `Node`.
    Node,
    /// `topology.node.k8s.io` `NodeResourceTopology`.
    NodeResourceTopology,
    /// `v1` `PersistentVolume`.
    PersistentVolume,
    /// `v1` `PersistentVolumeClaim`.
    PersistentVolumeClaim,
    /// `v1` `Pod`.
    Pod,
    /// `policy/v1` `PodDisruptionBudget`.
    PodDisruptionBudget,
    /// `scheduling.koordinator.sh/v1alpha1` `PodMigrationJob` (the scheduler ignores it;
    /// the migration controller, [`crate::migration`], plays it).
    PodMigrationJob,
    /// `scheduling.k8s.io/v1` `PriorityClass`.
    PriorityClass,
    /// `apps/v1` `ReplicaSet` (the scheduler ignores it; the simulator plays its controller).
    ReplicaSet,
    /// `scheduling.koordinator.sh/v1alpha1` `Reservation`.
    Reservation,
    /// `resource.k8s.io/v1` `ResourceClaim` (namespaced).
    ResourceClaim,
    /// `resource.k8s.io/v1` `ResourceClaimTemplate` (namespaced).
    ResourceClaimTemplate,
    /// `resource.k8s.io/v1` `ResourceSlice`.
    ResourceSlice,
    /// `apps/v1` `StatefulSet` (the scheduler ignores it; the simulator plays its controller).
    StatefulSet,
    /// `storage.k8s.io/v1` `StorageClass`.
    StorageClass,
    /// A coscheduling `PodGroup` (`scheduling.sigs.k8s.io` or `scheduling.x-k8s.io`
    /// `v1alpha1`, namespaced): a gang.
    PodGroup,
    /// `scheduling.k8s.io/v1alpha1` `Workload` (namespaced): its gang pod groups.
    Workload,
}

impl Kind {
    /// The `kind` field's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::CsiDriver => "CSIDriver",
            Kind::CsiNode => "CSINode",
            Kind::CsiStorageCapacity => "CSIStorageCapacity",
            Kind::Deployment => "Deployment",
            Kind::DeviceClass => "DeviceClass",
            Kind::Namespace => "Namespace",
            Kind::Node => "Node",
            Kind::NodeResourceTopology => "NodeResourceTopology",
            Kind::PersistentVolume => "PersistentVolume",
            Kind::PersistentVolumeClaim => "PersistentVolumeClaim",
            Kind::Pod => "Pod",
            Kind::PodDisruptionBudget => "PodDisruptionBudget",
            Kind::PodMigrationJob => "PodMigrationJob",
            Kind::PriorityClass => "PriorityClass",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::Reservation => "Reservation",
            Kind::ResourceClaim => "ResourceClaim",
            Kind::ResourceClaimTemplate => "ResourceClaimTemplate",
            Kind::ResourceSlice => "ResourceSlice",
            Kind::StatefulSet => "StatefulSet",
            Kind::StorageClass => "StorageClass",
            Kind::PodGroup => "PodGroup",
            Kind::Workload => "Workload",
        }
    }

    /// Whether objects of this kind live in a namespace.
    pub fn namespaced(self) -> bool {
        matches!(
            self,
            Kind::Pod
                | Kind::PersistentVolumeClaim
                | Kind::PodDisruptionBudget
                | Kind::CsiStorageCapacity
                | Kind::Deployment
                | Kind::ReplicaSet
                | Kind::StatefulSet
                | Kind::ResourceClaim
                | Kind::ResourceClaimTemplate
                | Kind::PodGroup
                | Kind::Workload
        )
    }
}

impl Kind {
    /// Every kind, in order.
    pub const ALL: [Kind; 23] = [
        Kind::CsiDriver,
        Kind::CsiNode,
        Kind::CsiStorageCapacity,
        Kind::Deployment,
        Kind::DeviceClass,
        Kind::Namespace,
        Kind::Node,
        Kind::NodeResourceTopology,
        Kind::PersistentVolume,
        Kind::PersistentVolumeClaim,
        Kind::Pod,
        Kind::PodDisruptionBudget,
        Kind::PodMigrationJob,
        Kind::PriorityClass,
        Kind::ReplicaSet,
        Kind::Reservation,
        Kind::ResourceClaim,
        Kind::ResourceClaimTemplate,
        Kind::ResourceSlice,
        Kind::StatefulSet,
        Kind::StorageClass,
        Kind::PodGroup,
        Kind::Workload,
    ];
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Kind, namespace (empty for cluster-scoped objects) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The object's kind.
    pub kind: Kind,
    /// Its namespace, empty when cluster-scoped.
    pub namespace: Arc<str>,
    /// Its name.
    pub name: Arc<str>,
}

impl ObjectKey {
    /// A namespaced key.
    pub fn new(kind: Kind, namespace: &str, name: &str) -> Self {
        Self {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A pod's key.
    pub fn pod(namespace: &str, name: &str) -> Self {
        Self::new(Kind::Pod, namespace, name)
    }

    /// A cluster-scoped key.
    pub fn cluster(kind: Kind, name: &str) -> Self {
        Self::new(kind, "", name)
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}", self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// An object as the API server holds it.
#[derive(Debug, Clone)]
pub enum Object {
    /// A pod.
    Pod(Arc<Pod>),
    /// A node.
    Node(Arc<Node>),
    /// A Koordinator reservation.
    Reservation(Arc<Reservation>),
    /// A node's NUMA topology.
    NodeResourceTopology(Arc<NodeResourceTopology>),
    /// A volume claim.
    PersistentVolumeClaim(Arc<PersistentVolumeClaim>),
    /// A node's CSI driver limits.
    CsiNode(Arc<CSINode>),
    /// A priority class.
    PriorityClass(Arc<PriorityClass>),
    /// A disruption budget.
    PodDisruptionBudget(Arc<PodDisruptionBudget>),
    /// A namespace.
    Namespace(Arc<Namespace>),
    /// A persistent volume.
    PersistentVolume(Arc<PersistentVolume>),
    /// A storage class.
    StorageClass(Arc<StorageClass>),
    /// A CSI driver's settings.
    CsiDriver(Arc<CSIDriver>),
    /// Storage a CSI driver can still provision, per topology segment and class.
    CsiStorageCapacity(Arc<CSIStorageCapacity>),
    /// A Deployment (only the simulator's controllers read it).
    Deployment(Arc<Deployment>),
    /// A ReplicaSet (only the simulator's controllers read it).
    ReplicaSet(Arc<ReplicaSet>),
    /// A StatefulSet (only the simulator's controllers read it).
    StatefulSet(Arc<StatefulSet>),
    /// A Koordinator PodMigrationJob (only the migration controller reads it).
    PodMigrationJob(Arc<PodMigrationJob>),
    /// Devices a driver publishes (DRA).
    ResourceSlice(Arc<ResourceSlice>),
    /// A class of devices (DRA).
    DeviceClass(Arc<DeviceClass>),
    /// A claim for devices (DRA).
    ResourceClaim(Arc<ResourceClaim>),
    /// What a pod's claims are made from (DRA; only the simulator's controller reads it).
    ResourceClaimTemplate(Arc<ResourceClaimTemplate>),
    /// A coscheduling PodGroup (either API group).
    PodGroup(Arc<PodGroup>),
    /// A Workload (Kubernetes 1.35, alpha).
    Workload(Arc<Workload>),
}

impl Object {
    /// The object's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Object::Pod(_) => Kind::Pod,
            Object::Node(_) => Kind::Node,
            Object::Reservation(_) => Kind::Reservation,
            Object::NodeResourceTopology(_) => Kind::NodeResourceTopology,
            Object::PersistentVolumeClaim(_) => Kind::PersistentVolumeClaim,
            Object::CsiNode(_) => Kind::CsiNode,
            Object::PriorityClass(_) => Kind::PriorityClass,
            Object::PodDisruptionBudget(_) => Kind::PodDisruptionBudget,
            Object::Namespace(_) => Kind::Namespace,
            Object::PersistentVolume(_) => Kind::PersistentVolume,
            Object::StorageClass(_) => Kind::StorageClass,
            Object::CsiDriver(_) => Kind::CsiDriver,
            Object::CsiStorageCapacity(_) => Kind::CsiStorageCapacity,
            Object::Deployment(_) => Kind::Deployment,
            Object::ReplicaSet(_) => Kind::ReplicaSet,
            Object::StatefulSet(_) => Kind::StatefulSet,
            Object::PodMigrationJob(_) => Kind::PodMigrationJob,
            Object::ResourceSlice(_) => Kind::ResourceSlice,
            Object::DeviceClass(_) => Kind::DeviceClass,
            Object::ResourceClaim(_) => Kind::ResourceClaim,
            Object::ResourceClaimTemplate(_) => Kind::ResourceClaimTemplate,
            Object::PodGroup(_) => Kind::PodGroup,
            Object::Workload(_) => Kind::Workload,
        }
    }

    /// The object's metadata.
    pub fn meta(&self) -> &berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match self {
            Object::Pod(o) => &o.metadata,
            Object::Node(o) => &o.metadata,
            Object::Reservation(o) => &o.metadata,
            Object::NodeResourceTopology(o) => &o.metadata,
            Object::PersistentVolumeClaim(o) => &o.metadata,
            Object::CsiNode(o) => &o.metadata,
            Object::PriorityClass(o) => &o.metadata,
            Object::PodDisruptionBudget(o) => &o.metadata,
            Object::Namespace(o) => &o.metadata,
            Object::PersistentVolume(o) => &o.metadata,
            Object::StorageClass(o) => &o.metadata,
            Object::CsiDriver(o) => &o.metadata,
            Object::CsiStorageCapacity(o) => &o.metadata,
            Object::Deployment(o) => &o.metadata,
            Object::ReplicaSet(o) => &o.metadata,
            Object::StatefulSet(o) => &o.metadata,
            Object::PodMigrationJob(o) => &o.metadata,
            Object::ResourceSlice(o) => &o.metadata,
            Object::DeviceClass(o) => &o.metadata,
            Object::ResourceClaim(o) => &o.metadata,
            Object::ResourceClaimTemplate(o) => &o.metadata,
            Object::PodGroup(o) => &o.metadata,
            Object::Workload(o) => &o.metadata,
        }
    }

    /// The object's metadata, mutably (the object is copied first if shared): for drivers
    /// that fill what the API server fills (UID, resourceVersion, creation time).
    pub fn meta_mut(
        &mut self,
    ) -> &mut berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match self {
            Object::Pod(o) => &mut Arc::make_mut(o).metadata,
            Object::Node(o) => &mut Arc::make_mut(o).metadata,
            Object::Reservation(o) => &mut Arc::make_mut(o).metadata,
            Object::NodeResourceTopology(o) => &mut Arc::make_mut(o).metadata,
            Object::PersistentVolumeClaim(o) => &mut Arc::make_mut(o).metadata,
            Object::CsiNode(o) => &mut Arc::make_mut(o).metadata,
            Object::PriorityClass(o) => &mut Arc::make_mut(o).metadata,
            Object::PodDisruptionBudget(o) => &mut Arc::make_mut(o).metadata,
            Object::Namespace(o) => &mut Arc::make_mut(o).metadata,
            Object::PersistentVolume(o) => &mut Arc::make_mut(o).metadata,
            Object::StorageClass(o) => &mut Arc::make_mut(o).metadata,
            Object::CsiDriver(o) => &mut Arc::make_mut(o).metadata,
            Object::CsiStorageCapacity(o) => &mut Arc::make_mut(o).metadata,
            Object::Deployment(o) => &mut Arc::make_mut(o).metadata,
            Object::ReplicaSet(o) => &mut Arc::make_mut(o).metadata,
            Object::StatefulSet(o) => &mut Arc::make_mut(o).metadata,
            Object::PodMigrationJob(o) => &mut Arc::make_mut(o).metadata,
            Object::ResourceSlice(o) => &mut Arc::make_mut(o).metadata,
            Object::DeviceClass(o) => &mut Arc::make_mut(o).metadata,
            Object::ResourceClaim(o) => &mut Arc::make_mut(o).metadata,
            Object::ResourceClaimTemplate(o) => &mut Arc::make_mut(o).metadata,
            Object::PodGroup(o) => &mut Arc::make_mut(o).metadata,
            Object::Workload(o) => &mut Arc::make_mut(o).metadata,
        }
    }

    /// The object's key.
    pub fn key(&self) -> ObjectKey {
        let kind = self.kind();
        let meta = self.meta();
        let ns = if kind.namespaced() {
            meta.namespace.as_deref().unwrap_or("default")
        } else {
            ""
        };
        ObjectKey::new(kind, ns, meta.name.as_deref().unwrap_or(""))
    }
}
