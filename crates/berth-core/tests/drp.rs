//! Dynamic Reservation Provisioning (seed 003) through the scheduler, with a fake API server
//! and the provisioner run by hand: sizing, the virtual reservation, the handshake,
//! adoption, time-outs under both policies, restarts.

use berth_api::annotations::{
    AnnotationCodec, NewReservationRequirement, ANNOTATION_NEW_RESERVATION_REQUIREMENT,
    ANNOTATION_RESERVATION_TEMPLATE,
};
use berth_core::drp::objects::{nth_name, provisioned_reservation, reservation_id};
use berth_core::reservation::testkit::{reservation, Sim};
use berth_core::resources::ResourceId;
use berth_core::testing::{node, pod, Profiles};
use serde_json::json;

const GI: i64 = 1 << 30;

const TEMPLATE: &str = r#"{"owners":[{"labelSelector":{"matchLabels":{"tenant":"t1"}}}],
  "recommendedSize":{"cpu":"4","memory":"8Gi"},"roundup":{"cpu":"2","memory":"2Gi"}}"#;

/// What a provisioner does: a Reservation for every unbound pod carrying both annotations
/// whose id has none yet, under a free name. Returns how many it created.
fn provision(s: &mut Sim) -> usize {
    let wanted = asking(s);
    let n = wanted.len();
    for r in wanted {
        create(s, r);
    }
    n
}

/// The Reservations pods ask for and do not have.
fn asking(s: &Sim) -> Vec<berth_api::reservation::Reservation> {
    let existing = s.reservations();
    let ids: std::collections::BTreeSet<String> = existing
        .values()
        .filter_map(|r| reservation_id(r).map(str::to_string))
        .collect();
    s.pods()
        .values()
        .filter_map(|p| provisioned_reservation(p))
        .filter_map(Result::ok)
        .filter(|r| !ids.contains(reservation_id(r).unwrap_or("")))
        .collect()
}

/// Creates `r` under the first free name; returns the name.
fn create(s: &mut Sim, mut r: berth_api::reservation::Reservation) -> String {
    let base = r.metadata.name.clone().unwrap_or_default();
    let existing = s.reservations();
    let name = (1..)
        .map(|n| nth_name(&base, n))
        .find(|n| !existing.contains_key(n))
        .unwrap_or(base);
    r.metadata.name = Some(name.clone());
    s.reservation(r);
    name
}

/// The Reservation carrying `id`.
fn by_id(s: &Sim, id: &str) -> String {
    s.reservations()
        .values()
        .find(|r| reservation_id(r) == Some(id))
        .and_then(|r| r.metadata.name.clone())
        .unwrap_or_else(|| panic!("no reservation for {id}"))
}

fn tenant_pod(
    name: &str,
    cpu: &str,
    mem: &str,
) -> std::sync::Arc<berth_api::k8s_openapi::api::core::v1::Pod> {
    pod(name)
        .label("tenant", "t1")
        .req("cpu", cpu)
        .req("memory", mem)
        .annotation(ANNOTATION_RESERVATION_TEMPLATE, TEMPLATE)
        .build()
}

fn requirement(s: &Sim, name: &str) -> Option<NewReservationRequirement> {
    let p = s.d.pod("default", name)?;
    NewReservationRequirement::from_annotations(p.metadata.annotations.as_ref())
        .ok()
        .flatten()
}

fn node_figures(s: &Sim, n: &str) -> (i64, i64, i64) {
    let info = s.s().node(n).expect("node");
    (
        info.requested[ResourceId::CPU],
        info.reserved[ResourceId::CPU],
        info.reserved[ResourceId::MEMORY],
    )
}

fn reasons(s: &Sim, pod: &str) -> Vec<String> {
    s.events()
        .iter()
        .filter(|e| e.involved.name.as_ref() == pod)
        .map(|e| e.reason.clone())
        .collect()
}

fn with_args(args: serde_json::Value) -> Sim {
    let profiles = Profiles::new(move || {
        let cfg = json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{
                "schedulerName": "default-scheduler",
                "pluginConfig": [{"name": "Reservation", "args": {"dynamicProvisioning": args.clone()}}]
            }]
        });
        let cfg: berth_core::framework::config::KubeSchedulerConfiguration =
            serde_json::from_value(cfg).expect("config");
        berth_core::Profile::from_configuration(&cfg).expect("profiles")
    });
    Sim::new(profiles)
}

#[test]
fn a_template_pod_waits_for_its_reservation_then_binds_into_it_and_the_tenant_follows() {
    let mut s = Sim::default();
    s.node(
        node("n1")
            .alloc("cpu", "16")
            .alloc("memory", "32Gi")
            .build(),
    );
    s.pod(tenant_pod("p1", "1", "1Gi"));
    // Scheduled into a virtual reservation of the rounded size; the bind waits.
    assert_eq!(s.bound("p1"), None);
    let req = requirement(&s, "p1").expect("the requirement is written at PreBind");
    let id = req
        .labels
        .get("scheduling.koordinator.sh/reservation-id")
        .cloned()
        .expect("id");
    assert_eq!(req.resources.get("cpu").map(|q| q.0.as_str()), Some("4"));
    assert_eq!(
        req.resources.get("memory").map(|q| q.0.as_str()),
        Some("8Gi")
    );
    assert_eq!(
        node_figures(&s, "n1"),
        (1000, 3000, 7 * GI),
        "the virtual reservation holds the rest"
    );
    assert!(reasons(&s, "p1").contains(&"ReservationCreationAttempt".to_string()));
    assert!(
        s.reservations().is_empty(),
        "nothing is created by the scheduler"
    );
    assert_eq!(s.s().drp_metrics().requests, 1);

    assert_eq!(provision(&mut s), 1);
    let name = by_id(&s, &id);
    assert_eq!(name, "default-p1");
    assert_eq!(s.bound("p1").as_deref(), Some("n1"));
    assert_eq!(s.allocated_from("p1").as_deref(), Some(name.as_str()));
    assert_eq!(s.phase(&name), "Available");
    assert_eq!(
        s.res(&name)
            .status
            .as_ref()
            .and_then(|st| st.node_name.clone())
            .as_deref(),
        Some("n1")
    );
    assert_eq!(s.owners(&name), vec!["default/p1".to_string()]);
    assert_eq!(
        node_figures(&s, "n1"),
        (1000, 3000, 7 * GI),
        "adoption changes nothing on the node"
    );
    assert!(reasons(&s, "p1").contains(&"ReservationCreated".to_string()));
    assert_eq!(s.s().drp_metrics().created, 1);
    assert_eq!(provision(&mut s), 0, "never twice");

    // The tenant's next pod takes the remainder; nothing new is provisioned.
    s.pod(tenant_pod("p2", "2", "2Gi"));
    assert_eq!(s.bound("p2").as_deref(), Some("n1"));
    assert_eq!(s.allocated_from("p2").as_deref(), Some(name.as_str()));
    assert!(requirement(&s, "p2").is_none());
    // A non-owner is held off the 1 CPU still reserved.
    s.pod(pod("stranger").req("cpu", "13").build());
    assert_eq!(s.bound("stranger"), None);
    s.pod(pod("small-stranger").req("cpu", "12").build());
    assert_eq!(s.bound("small-stranger").as_deref(), Some("n1"));
}

#[test]
fn an_existing_reservation_of_the_tenant_is_used_instead_of_provisioning() {
    let mut s = Sim::default();
    s.node(
        node("n1")
            .alloc("cpu", "16")
            .alloc("memory", "32Gi")
            .build(),
    );
    s.reservation(
        reservation("r1")
            .req("cpu", "4")
            .req("memory", "4Gi")
            .owner_label("tenant", "t1")
            .reusable()
            .build(),
    );
    s.pod(tenant_pod("p1", "1", "1Gi"));
    assert_eq!(s.bound("p1").as_deref(), Some("n1"));
    assert_eq!(s.allocated_from("p1").as_deref(), Some("r1"));
    assert!(requirement(&s, "p1").is_none());
    assert_eq!(s.s().drp_metrics().requests, 0);
}

#[test]
fn a_full_cluster_gets_the_pods_own_size() {
    let mut s = Sim::default();
    s.node(node("n1").alloc("cpu", "3").alloc("memory", "32Gi").build());
    s.pod(tenant_pod("p1", "1", "1Gi"));
    let req = requirement(&s, "p1").expect("requirement");
    assert_eq!(req.resources.get("cpu").map(|q| q.0.as_str()), Some("1"));
    assert_eq!(
        req.resources.get("memory").map(|q| q.0.as_str()),
        Some("1Gi")
    );
    assert_eq!(node_figures(&s, "n1"), (1000, 0, 0));
    provision(&mut s);
    assert_eq!(s.bound("p1").as_deref(), Some("n1"));
}

#[test]
fn a_time_out_rolls_back_and_requeues_and_a_late_reservation_is_not_adopted() {
    let mut s = Sim::default();
    s.node(
        node("n1")
            .alloc("cpu", "16")
            .alloc("memory", "32Gi")
            .build(),
    );
    s.pod(tenant_pod("p1", "1", "1Gi"));
    let first = requirement(&s, "p1").expect("requirement");
    s.advance(10 * 60 * 1000);
    // Rolled back at the time-out and tried again at once: a new id.
    let second = requirement(&s, "p1").expect("requirement");
    assert_ne!(first, second, "a rolled-back id is not asked for again");
    assert!(reasons(&s, "p1").contains(&"ReservationCreationTimeout".to_string()));
    assert_eq!(s.s().drp_metrics().timeouts, 1);
    assert_eq!(
        node_figures(&s, "n1"),
        (1000, 3000, 7 * GI),
        "one virtual reservation, not two"
    );
    // The first id's Reservation, late: scheduled like any other.
    let mut pod1 = (**s.d.pod("default", "p1").unwrap()).clone();
    first.insert_into(
        pod1.metadata
            .annotations
            .get_or_insert_with(Default::default),
    );
    let late = provisioned_reservation(&pod1).unwrap().unwrap();
    // Like any reservation it cannot share a node with one for the same owners (seed 002),
    // the virtual one included.
    let late_name = create(&mut s, late);
    assert_eq!(s.phase(&late_name), "Pending");
    s.node(
        node("n2")
            .alloc("cpu", "16")
            .alloc("memory", "32Gi")
            .build(),
    );
    assert_eq!(s.phase(&late_name), "Available");
    assert_eq!(
        s.res(&late_name)
            .status
            .as_ref()
            .and_then(|st| st.node_name.clone())
            .as_deref(),
        Some("n2")
    );
    assert!(s.owners(&late_name).is_empty());
    assert_eq!(s.bound("p1"), None, "p1 waits for its second id");
    provision(&mut s);
    assert_eq!(s.bound("p1").as_deref(), Some("n1"));
    assert_ne!(s.allocated_from("p1").as_deref(), Some(late_name.as_str()));
}

#[test]
fn with_bind_without_reservation_the_pod_is_bound_on_time_out_and_nothing_is_held() {
    let mut s = with_args(json!({"timeoutSeconds": 60, "timeoutPolicy": "BindWithoutReservation"}));
    s.node(
        node("n1")
            .alloc("cpu", "16")
            .alloc("memory", "32Gi")
            .build(),
    );
    s.pod(tenant_pod("p1", "1", "1Gi"));
    assert_eq!(s.bound("p1"), None);
    s.advance(59_000);
    assert_eq!(s.bound("p1"), None);
    s.advance(1_000);
    assert_eq!(s.bound("p1").as_deref(), Some("n1"));
    assert_eq!(s.allocated_from("p1"), None);
    assert_eq!(node_figures(&s, "n1"), (1000, 0, 0));
    // The Reservation appearing now is scheduled like any other.
    assert_eq!(
        provision(&mut s),
        0,
        "the pod is bound: the provisioner does nothing"
    );
}

#[test]
fn a_malformed_template_is_reported_and_the_rest_goes_on() {
    let mut s = Sim::default();
    s.node(node("n1").alloc("cpu", "16").build());
    s.pod(
        pod("bad")
            .req("cpu", "1")
            .annotation(
                ANNOTATION_RESERVATION_TEMPLATE,
                r#"{"owners":[],"recommendedSize":{"cpu":"lots"}}"#,
            )
            .build(),
    );
    s.pod(pod("good").req("cpu", "1").build());
    assert_eq!(s.bound("good").as_deref(), Some("n1"));
    assert_eq!(s.bound("bad"), None);
    let msg = s.message("bad").expect("condition");
    assert!(msg.contains(ANNOTATION_RESERVATION_TEMPLATE), "{msg}");
    assert!(s
        .events()
        .iter()
        .any(|e| e.involved.name.as_ref() == "bad" && e.type_ == "Warning"));
    assert!(s
        .d
        .pod("default", "bad")
        .unwrap()
        .metadata
        .annotations
        .as_ref()
        .unwrap()
        .get(ANNOTATION_NEW_RESERVATION_REQUIREMENT)
        .is_none());
}

#[test]
fn after_a_restart_the_handshake_is_rebuilt_and_nothing_is_provisioned_twice() {
    let mut s = Sim::default();
    s.node(
        node("n1")
            .alloc("cpu", "16")
            .alloc("memory", "32Gi")
            .build(),
    );
    s.pod(tenant_pod("p1", "1", "1Gi"));
    let req = requirement(&s, "p1").expect("requirement");
    // The scheduler restarts; the provisioner creates meanwhile.
    s.d.restart();
    s.settle();
    assert_eq!(
        requirement(&s, "p1"),
        Some(req.clone()),
        "the same id is asked for again"
    );
    assert_eq!(provision(&mut s), 1);
    assert_eq!(s.bound("p1").as_deref(), Some("n1"));
    assert_eq!(s.reservations().len(), 1);
    // Restart with the Reservation already created before the pod's next cycle.
    let mut s = Sim::default();
    s.node(
        node("n1")
            .alloc("cpu", "16")
            .alloc("memory", "32Gi")
            .build(),
    );
    s.pod(tenant_pod("p1", "1", "1Gi"));
    let id = requirement(&s, "p1")
        .unwrap()
        .labels
        .values()
        .next()
        .cloned()
        .unwrap();
    s.d.restart();
    s.settle();
    assert_eq!(provision(&mut s), 1);
    s.d.restart();
    s.settle();
    assert_eq!(s.bound("p1").as_deref(), Some("n1"));
    assert_eq!(s.allocated_from("p1"), Some(by_id(&s, &id)));
    assert_eq!(s.reservations().len(), 1);
}
