//! What the tests of deploy/ and of the Helm chart share: the rights `berth run` and `berth
//! provisioner` need (proven by crates/berth-kube/tests/rbac.rs and
//! crates/berth/tests/drp.rs, which run them with exactly these), and the check that a
//! ServiceAccount has exactly those, verb by verb, through SubjectAccessReviews.

#![allow(dead_code)] // Each test file uses part of it.

use berth_testcluster::TestCluster;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::Api;

/// A grant table: (group, resource, subresource, namespace, name) and the verbs that must be
/// allowed there; every other verb of [`VERBS`] must be denied.
pub type Grants = &'static [(
    (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    ),
    &'static [&'static str],
)];

pub const SA_USER: &str = "system:serviceaccount:berth-system:berth";
pub const VERBS: [&str; 8] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// (group, resource, subresource, namespace, name) and the verbs berth must have there; any
/// other verb must be denied. Empty namespace: all namespaces. Keep in step with
/// deploy/20-rbac.yaml.
pub const EXPECTED: Grants = &[
    (
        ("", "pods", "", "", ""),
        &["get", "list", "watch", "patch", "delete"],
    ),
    (("", "pods", "binding", "", ""), &["create"]),
    (("", "pods", "status", "", ""), &["patch"]),
    (("", "nodes", "", "", ""), &["list", "watch"]),
    (("", "namespaces", "", "", ""), &["list", "watch"]),
    (
        ("", "persistentvolumeclaims", "", "", ""),
        &["list", "watch", "update"],
    ),
    (
        ("", "persistentvolumes", "", "", ""),
        &["list", "watch", "update"],
    ),
    (
        ("storage.k8s.io", "storageclasses", "", "", ""),
        &["list", "watch"],
    ),
    (
        ("storage.k8s.io", "csinodes", "", "", ""),
        &["list", "watch"],
    ),
    (
        ("storage.k8s.io", "csidrivers", "", "", ""),
        &["list", "watch"],
    ),
    (
        ("storage.k8s.io", "csistoragecapacities", "", "", ""),
        &["list", "watch"],
    ),
    (
        ("scheduling.k8s.io", "priorityclasses", "", "", ""),
        &["list", "watch"],
    ),
    (
        ("policy", "poddisruptionbudgets", "", "", ""),
        &["list", "watch"],
    ),
    (
        ("scheduling.koordinator.sh", "reservations", "", "", ""),
        &["get", "list", "watch", "create", "delete"],
    ),
    (
        (
            "scheduling.koordinator.sh",
            "reservations",
            "status",
            "",
            "",
        ),
        &["update"],
    ),
    (
        ("resource.k8s.io", "resourceslices", "", "", ""),
        &["list", "watch"],
    ),
    (
        ("resource.k8s.io", "deviceclasses", "", "", ""),
        &["list", "watch"],
    ),
    (
        ("resource.k8s.io", "resourceclaims", "", "", ""),
        &["get", "list", "watch", "update"],
    ),
    (
        ("resource.k8s.io", "resourceclaims", "status", "", ""),
        &["update"],
    ),
    // Read for Reservations' device claims (pods' templates are kube-controller-manager's).
    (
        ("resource.k8s.io", "resourceclaimtemplates", "", "", ""),
        &["get", "list", "watch"],
    ),
    (
        ("topology.node.k8s.io", "noderesourcetopologies", "", "", ""),
        &["list", "watch"],
    ),
    (
        ("events.k8s.io", "events", "", "", ""),
        &["create", "patch"],
    ),
    // Events are written through events.k8s.io only.
    (("", "events", "", "", ""), &[]),
    (
        ("coordination.k8s.io", "leases", "", "berth-system", "berth"),
        &["get", "update", "create"],
    ),
    // Creating is not limited by name; reading or renewing another lease is denied.
    (
        ("coordination.k8s.io", "leases", "", "berth-system", "other"),
        &["create"],
    ),
    // Nothing berth does not use.
    (
        (
            "coordination.k8s.io",
            "leases",
            "",
            "kube-system",
            "kube-scheduler",
        ),
        &[],
    ),
    (("", "pods", "eviction", "", ""), &[]),
    (("", "nodes", "status", "", ""), &[]),
    (("", "secrets", "", "", ""), &[]),
    (("", "configmaps", "", "", ""), &[]),
    (("", "serviceaccounts", "token", "", ""), &[]),
    (("apps", "deployments", "", "", ""), &[]),
    (
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "",
            "",
            "",
        ),
        &[],
    ),
    (
        ("rbac.authorization.k8s.io", "clusterroles", "", "", ""),
        &[],
    ),
    (
        ("scheduling.sigs.k8s.io", "podgroups", "", "", ""),
        &["list", "watch"],
    ),
    (
        ("scheduling.x-k8s.io", "podgroups", "", "", ""),
        &["list", "watch"],
    ),
    (
        ("scheduling.k8s.io", "workloads", "", "", ""),
        &["list", "watch"],
    ),
];

/// The provisioner's rights: watch unbound pods, look for and create Reservations. Keep in
/// step with deploy/provisioner/50-provisioner.yaml and the chart's rbac-provisioner.yaml.
pub const PROVISIONER_EXPECTED: Grants = &[
    (("", "pods", "", "", ""), &["list", "watch"]),
    (
        ("scheduling.koordinator.sh", "reservations", "", "", ""),
        &["list", "create"],
    ),
    (("", "pods", "binding", "", ""), &[]),
    (("", "pods", "status", "", ""), &[]),
    (
        (
            "scheduling.koordinator.sh",
            "reservations",
            "status",
            "",
            "",
        ),
        &[],
    ),
    (("", "nodes", "", "", ""), &[]),
    (("events.k8s.io", "events", "", "", ""), &[]),
    (
        ("coordination.k8s.io", "leases", "", "berth-system", "berth"),
        &[],
    ),
    (("", "secrets", "", "", ""), &[]),
];

/// `berth migrate`'s rights: read and evict pods, make and remove Reservations, write jobs,
/// read workloads (keep-capacity), nodes and their NRTs, create jobs (reserved CPUs).
/// Keep in step with deploy/migrate/60-migrate.yaml and the chart's rbac-migrate.yaml.
pub const MIGRATE_EXPECTED: Grants = &[
    (("", "pods", "", "", ""), &["list", "watch"]),
    (("", "pods", "eviction", "", ""), &["create"]),
    (
        ("scheduling.koordinator.sh", "reservations", "", "", ""),
        &["list", "watch", "create", "delete"],
    ),
    (
        ("scheduling.koordinator.sh", "podmigrationjobs", "", "", ""),
        &["list", "watch", "create", "update"],
    ),
    (
        (
            "scheduling.koordinator.sh",
            "podmigrationjobs",
            "status",
            "",
            "",
        ),
        &["update"],
    ),
    (("", "pods", "binding", "", ""), &[]),
    (("", "pods", "status", "", ""), &[]),
    (
        (
            "scheduling.koordinator.sh",
            "reservations",
            "status",
            "",
            "",
        ),
        &[],
    ),
    (("", "nodes", "", "", ""), &["list", "watch"]),
    (
        ("topology.node.k8s.io", "noderesourcetopologies", "", "", ""),
        &["list", "watch"],
    ),
    (("apps", "deployments", "", "", ""), &["list", "watch"]),
    (("apps", "replicasets", "", "", ""), &["list", "watch"]),
    (("apps", "statefulsets", "", "", ""), &["list", "watch"]),
    (("", "secrets", "", "", ""), &[]),
    (
        (
            "coordination.k8s.io",
            "leases",
            "",
            "berth-system",
            "berth-migrate",
        ),
        &["create", "get", "update"],
    ),
    (
        ("coordination.k8s.io", "leases", "", "berth-system", "berth"),
        &["create"],
    ),
];

/// `namespace/name`'s ServiceAccount may do exactly what `table` lists.
pub async fn assert_grants(cluster: &TestCluster, namespace: &str, name: &str, table: Grants) {
    let user = format!("system:serviceaccount:{namespace}:{name}");
    let reviews: Api<SubjectAccessReview> = Api::all(cluster.client());
    let mut wrong = Vec::new();
    for ((group, resource, subresource, ns, object), allowed) in table {
        for verb in VERBS {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.clone()),
                    groups: Some(vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{namespace}"),
                        "system:authenticated".into(),
                    ]),
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(group.to_string()),
                        resource: Some(resource.to_string()),
                        subresource: Some(subresource.to_string()),
                        namespace: Some(ns.to_string()),
                        name: Some(object.to_string()),
                        verb: Some(verb.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = reviews
                .create(&PostParams::default(), &review)
                .await
                .unwrap();
            let got = answer.status.unwrap().allowed;
            let want = allowed.contains(&verb);
            if got != want {
                wrong.push(format!(
                    "{verb} {group}/{resource}/{subresource} ns={ns:?} name={object:?}: \
                     allowed={got}, want {want}"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "RBAC of {user} differs:\n{}",
        wrong.join("\n")
    );
}
