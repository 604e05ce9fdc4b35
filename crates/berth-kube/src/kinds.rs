//! The kinds `berth run` watches, and how each watched object becomes a core [`Object`].
//!
//! Built-in kinds are decoded by k8s-openapi: the API server has validated them. The custom
//! kinds (Reservation, NodeResourceTopology) are watched as dynamic objects and decoded one by
//! one, so an object the CRD's schema lets through but berth cannot read is reported on its
//! own (a warning event naming the problem) instead of failing the whole LIST and starving
//! every other object of that kind.

use std::sync::Arc;

use berth_api::dra::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use berth_api::gang::{PodGroup, Workload};
use berth_api::nrt::NodeResourceTopology;
use berth_api::reservation::Reservation;
use berth_core::object::{Kind, Object, ObjectKey};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery;
use kube::Client;

/// The API group of Koordinator's Reservation.
pub const RESERVATION_GROUP: &str = "scheduling.koordinator.sh";
/// The API group of NodeResourceTopology.
pub const NRT_GROUP: &str = "topology.node.k8s.io";
/// The API group of Dynamic Resource Allocation's kinds.
pub const DRA_GROUP: &str = "resource.k8s.io";

/// The custom kinds the API server serves, found by discovery at start.
#[derive(Debug, Clone, Default)]
pub struct Served {
    /// `scheduling.koordinator.sh/v1alpha1` `reservations`, if served.
    pub reservations: Option<ApiResource>,
    /// `topology.node.k8s.io` `noderesourcetopologies` at `v1alpha2`, else `v1alpha1`.
    pub nrt: Option<ApiResource>,
    /// `resource.k8s.io/v1` is served (GA and on by default since Kubernetes 1.34): its
    /// ResourceSlices, DeviceClasses, ResourceClaims and ResourceClaimTemplates are watched.
    pub dra: bool,
    /// Coscheduling's `podgroups` of the groups served ([`POD_GROUP_GROUPS`], v1alpha1).
    pub pod_groups: Vec<ApiResource>,
    /// `scheduling.k8s.io/v1alpha1` `workloads` (Kubernetes 1.35, alpha), if served.
    pub workloads: Option<ApiResource>,
}

/// The API groups of Coscheduling's PodGroup: Koordinator's, then scheduler-plugins'.
pub const POD_GROUP_GROUPS: [&str; 2] = ["scheduling.sigs.k8s.io", "scheduling.x-k8s.io"];
/// The API group of Kubernetes 1.35's Workload.
pub const WORKLOAD_GROUP: &str = "scheduling.k8s.io";

/// `plural` at `version` of `group`, if the API server serves it; `None` (with `warning`
/// logged) when it does not.
async fn served(
    client: &Client,
    group: &str,
    version: &str,
    plural: &str,
    warning: &str,
) -> Option<ApiResource> {
    let found = match discovery::group(client, group).await {
        Ok(g) => g
            .versioned_resources(version)
            .into_iter()
            .find(|(r, _)| r.plural == plural)
            .map(|(r, _)| r),
        Err(_) => None,
    };
    if found.is_none() {
        tracing::warn!(group, version, plural, "{warning}");
    }
    found
}

impl Served {
    /// Asks the API server which versions of the custom kinds it serves. A group that is not
    /// installed is logged and left unwatched: berth schedules without it (no reservations,
    /// or no NUMA data, as when those objects are absent).
    pub async fn discover(client: &Client) -> Self {
        let reservations = match discovery::group(client, RESERVATION_GROUP).await {
            Ok(g) => g
                .versioned_resources("v1alpha1")
                .into_iter()
                .find(|(r, _)| r.plural == "reservations")
                .map(|(r, _)| r),
            Err(e) => {
                tracing::warn!(error = %e, group = RESERVATION_GROUP, "Reservation CRD not served; reservations are not watched (install it with `berth crd | kubectl apply -f -`)");
                None
            }
        };
        let nrt = match discovery::group(client, NRT_GROUP).await {
            Ok(g) => ["v1alpha2", "v1alpha1"].iter().find_map(|v| {
                g.versioned_resources(v)
                    .into_iter()
                    .find(|(r, _)| r.plural == "noderesourcetopologies")
                    .map(|(r, _)| r)
            }),
            Err(e) => {
                tracing::warn!(error = %e, group = NRT_GROUP, "NodeResourceTopology CRD not served; NUMA-aware plugins see no topology");
                None
            }
        };
        let dra = match discovery::group(client, DRA_GROUP).await {
            Ok(g) => g
                .versioned_resources("v1")
                .iter()
                .any(|(r, _)| r.plural == "resourceclaims"),
            Err(e) => {
                tracing::warn!(error = %e, group = DRA_GROUP, "resource.k8s.io/v1 not served; pods with resource claims cannot be scheduled");
                false
            }
        };
        let mut pod_groups = Vec::new();
        for group in POD_GROUP_GROUPS {
            let warning = "PodGroup CRD not served; pods naming such a PodGroup wait for it";
            pod_groups.extend(served(client, group, "v1alpha1", "podgroups", warning).await);
        }
        let warning =
            "Workload API not served (alpha in Kubernetes 1.35); Workload gangs wait for it";
        let workloads = served(client, WORKLOAD_GROUP, "v1alpha1", "workloads", warning).await;
        Self {
            reservations,
            nrt,
            dra,
            pod_groups,
            workloads,
        }
    }

    /// The resource of a DRA kind (`resourceslices`, `deviceclasses`, `resourceclaims`).
    pub fn dra_resource(kind: &str, plural: &str) -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(DRA_GROUP, "v1", kind), plural)
    }

    /// The resource of `kind` for dynamic API calls (writes to reservations).
    pub fn reservation_resource() -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(RESERVATION_GROUP, "v1alpha1", "Reservation"),
            "reservations",
        )
    }
}

/// Why a watched object could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {name}: {message}")]
pub struct Unreadable {
    /// Its kind.
    pub kind: Kind,
    /// Its name.
    pub name: String,
    /// Its namespace, empty for a cluster-scoped kind.
    pub namespace: String,
    /// Its UID, for the event.
    pub uid: String,
    /// What is wrong.
    pub message: String,
}

impl Unreadable {
    /// The object's key (its deletion, its event).
    pub fn key(&self) -> ObjectKey {
        if self.kind.namespaced() {
            ObjectKey::new(self.kind, &self.namespace, &self.name)
        } else {
            ObjectKey::cluster(self.kind, &self.name)
        }
    }
}

/// Decodes a watched Reservation.
pub fn reservation(obj: DynamicObject) -> Result<Object, Unreadable> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let value = serde_json::to_value(&obj).map_err(|e| Unreadable {
        kind: Kind::Reservation,
        name: name.clone(),
        namespace: String::new(),
        uid: uid.clone(),
        message: e.to_string(),
    })?;
    // A template that is no pod template still reads (the core reports it on the
    // Reservation, which then expires like any other); what cannot be read at all is named
    // by its field path.
    serde_path_to_error::deserialize::<_, Reservation>(value)
        .map(|r| Object::Reservation(Arc::new(r)))
        .map_err(|e| Unreadable {
            kind: Kind::Reservation,
            name,
            namespace: String::new(),
            uid,
            message: format!("cannot be read: {}: {}", e.path(), e.inner()),
        })
}

/// Decodes a watched object of one of berth-api's own kinds, naming the field path of what
/// cannot be read.
fn decode<T: serde::de::DeserializeOwned>(
    kind: Kind,
    obj: DynamicObject,
    wrap: fn(Arc<T>) -> Object,
) -> Result<Object, Unreadable> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let namespace = obj.metadata.namespace.clone().unwrap_or_default();
    let bad = |message: String| Unreadable {
        kind,
        name: name.clone(),
        namespace: namespace.clone(),
        uid: uid.clone(),
        message,
    };
    let value = serde_json::to_value(&obj).map_err(|e| bad(e.to_string()))?;
    serde_path_to_error::deserialize::<_, T>(value)
        .map(|o| wrap(Arc::new(o)))
        .map_err(|e| bad(format!("cannot be read: {}: {}", e.path(), e.inner())))
}

/// Decodes a watched ResourceSlice.
pub fn resource_slice(obj: DynamicObject) -> Result<Object, Unreadable> {
    decode::<ResourceSlice>(Kind::ResourceSlice, obj, Object::ResourceSlice)
}

/// Decodes a watched DeviceClass.
pub fn device_class(obj: DynamicObject) -> Result<Object, Unreadable> {
    decode::<DeviceClass>(Kind::DeviceClass, obj, Object::DeviceClass)
}

/// Decodes a watched ResourceClaim.
pub fn resource_claim(obj: DynamicObject) -> Result<Object, Unreadable> {
    decode::<ResourceClaim>(Kind::ResourceClaim, obj, Object::ResourceClaim)
}

/// Decodes a watched PodGroup (either API group).
pub fn pod_group(obj: DynamicObject) -> Result<Object, Unreadable> {
    decode::<PodGroup>(Kind::PodGroup, obj, Object::PodGroup)
}

/// Decodes a watched Workload.
pub fn workload(obj: DynamicObject) -> Result<Object, Unreadable> {
    decode::<Workload>(Kind::Workload, obj, Object::Workload)
}

/// Decodes a watched ResourceClaimTemplate (a Reservation's device claims are read from
/// the templates its template names).
pub fn resource_claim_template(obj: DynamicObject) -> Result<Object, Unreadable> {
    decode::<ResourceClaimTemplate>(
        Kind::ResourceClaimTemplate,
        obj,
        Object::ResourceClaimTemplate,
    )
}

/// Decodes a watched NodeResourceTopology of either served version.
pub fn nrt(obj: DynamicObject) -> Result<Object, Unreadable> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let mut value = serde_json::to_value(&obj).map_err(|e| Unreadable {
        kind: Kind::NodeResourceTopology,
        name: name.clone(),
        namespace: String::new(),
        uid: uid.clone(),
        message: e.to_string(),
    })?;
    if let (Some(types), Some(map)) = (obj.types.as_ref(), value.as_object_mut()) {
        map.insert("apiVersion".into(), types.api_version.clone().into());
    }
    NodeResourceTopology::from_any_version(value)
        .map(|n| Object::NodeResourceTopology(Arc::new(n)))
        .map_err(|e| Unreadable {
            kind: Kind::NodeResourceTopology,
            name,
            namespace: String::new(),
            uid,
            message: e.to_string(),
        })
}

/// `apiVersion` of the objects of `kind`, for event references.
pub fn api_version(kind: Kind) -> &'static str {
    match kind {
        Kind::Reservation | Kind::PodMigrationJob => "scheduling.koordinator.sh/v1alpha1",
        Kind::NodeResourceTopology => "topology.node.k8s.io/v1alpha2",
        Kind::CsiNode | Kind::StorageClass | Kind::CsiDriver | Kind::CsiStorageCapacity => {
            "storage.k8s.io/v1"
        }
        Kind::PriorityClass => "scheduling.k8s.io/v1",
        Kind::PodDisruptionBudget => "policy/v1",
        Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet => "apps/v1",
        Kind::ResourceSlice
        | Kind::DeviceClass
        | Kind::ResourceClaim
        | Kind::ResourceClaimTemplate => "resource.k8s.io/v1",
        Kind::PodGroup => berth_api::gang::SIGS_API_VERSION,
        Kind::Workload => berth_api::gang::WORKLOAD_API_VERSION,
        _ => "v1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dynamic(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn an_unreadable_reservation_names_itself_and_the_problem() {
        let bad = dynamic(serde_json::json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": "r1", "uid": "u1"},
            "spec": {"owners": "everyone", "template": {}}
        }));
        let e = reservation(bad).unwrap_err();
        assert_eq!(e.name, "r1");
        assert_eq!(e.uid, "u1");
        assert!(e.message.contains("spec.owners: "), "{e}");
        let schemaless = dynamic(serde_json::json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": "r3"},
            "spec": {"owners": [{"labelSelector": {"matchLabels": {"a": "b"}}}],
                     "template": {"spec": {"containers": "not a list"}}}
        }));
        match reservation(schemaless) {
            Ok(Object::Reservation(r)) => {
                let bad = r.spec.template.as_ref().and_then(|t| t.unreadable.as_ref());
                assert_eq!(
                    bad.map(|b| b.path.as_str()),
                    Some("spec.template.spec.containers")
                );
            }
            other => panic!("still a Reservation: {other:?}"),
        }
        let good = dynamic(serde_json::json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": "r2"},
            "spec": {"owners": [{"labelSelector": {"matchLabels": {"a": "b"}}}], "template": {}}
        }));
        assert!(matches!(reservation(good), Ok(Object::Reservation(_))));
    }

    #[test]
    fn nrt_of_either_version_is_read() {
        let v1 = dynamic(serde_json::json!({
            "apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
            "metadata": {"name": "n1"}, "topologyPolicies": ["SingleNUMANodeContainerLevel"],
            "zones": [{"name": "node-0", "type": "Node", "resources": [{"name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"}]}]
        }));
        match nrt(v1) {
            Ok(Object::NodeResourceTopology(n)) => {
                assert_eq!(n.node_name(), "n1");
                assert_eq!(n.spec.zones.len(), 1);
            }
            other => panic!("{other:?}"),
        }
    }
}
