//! Reservations end to end through the scheduler and a fake API server: the seed's
//! NodeResources and NodePorts cases, lifecycle, bad input and restart.

use serde_json::json;

use super::testkit::{accounting, reservation, Sim};
use crate::resources::ResourceId;
use crate::testing::{node, pod};
use crate::Profile;

fn big_node(name: &str) -> std::sync::Arc<berth_api::k8s_openapi::api::core::v1::Node> {
    node(name)
        .alloc("cpu", "16")
        .alloc("memory", "32Gi")
        .alloc("ephemeral-storage", "100Gi")
        .build()
}

fn sim_with_nodes(names: &[&str]) -> Sim {
    let mut s = Sim::default();
    for n in names {
        s.node(big_node(n));
    }
    s
}

fn allocated(s: &Sim, r: &str, res: &str) -> Option<String> {
    s.res(r)
        .status
        .as_ref()?
        .allocated
        .get(res)
        .map(|q| q.0.clone())
}

fn assert_rebuild_equals_live(s: &Sim) {
    let live = accounting(s.s());
    let rebuilt = accounting(&s.rebuilt());
    assert_eq!(live, rebuilt, "a restarted scheduler sees the same state");
}

#[test]
fn a_placed_reservation_is_available_and_holds_its_capacity_against_non_owners() {
    let mut s = sim_with_nodes(&["n1"]);
    s.reservation(
        reservation("r")
            .req("cpu", "4")
            .req("memory", "4Gi")
            .owner_label("app", "web")
            .build(),
    );
    let r = s.res("r");
    let st = r.status.as_ref().unwrap();
    assert_eq!(s.phase("r"), "Available");
    assert_eq!(st.node_name.as_deref(), Some("n1"));
    assert_eq!(st.allocatable.get("cpu").map(|q| q.0.as_str()), Some("4"));
    assert_eq!(st.conditions[0].type_, "Scheduled");
    assert_eq!(st.conditions[0].status, "True");
    assert!(s
        .events()
        .iter()
        .any(|e| e.reason == "Scheduled" && e.message == "Successfully assigned r to n1"));
    // Reservation reserved 4000m CPU, non-owner Pod requests 4000m CPU... of the 12 left.
    s.pod(pod("big").req("cpu", "13").build());
    assert_eq!(s.bound("big"), None);
    assert!(
        s.message("big").unwrap().contains("Insufficient cpu"),
        "{:?}",
        s.message("big")
    );
    s.pod(pod("fits").req("cpu", "12").build());
    assert_eq!(s.bound("fits").as_deref(), Some("n1"));
    assert_eq!(
        s.allocated_from("fits"),
        None,
        "a non-owner never allocates"
    );
    assert_rebuild_equals_live(&s);
}

#[test]
fn an_owner_with_the_same_requests_takes_the_reservation_and_it_succeeds() {
    let mut s = sim_with_nodes(&["n1", "n2", "n3"]);
    s.reservation(
        reservation("r")
            .req("cpu", "4")
            .req("memory", "4Gi")
            .owner_label("app", "web")
            .build(),
    );
    let rnode = s.res("r").status.as_ref().unwrap().node_name.clone();
    s.pod(
        pod("p")
            .label("app", "web")
            .req("cpu", "4")
            .req("memory", "4Gi")
            .build(),
    );
    assert_eq!(
        s.bound("p"),
        rnode,
        "the owner lands on its reservation's node"
    );
    assert_eq!(s.allocated_from("p").as_deref(), Some("r"));
    let p = &s.pods()[&("default".to_string(), "p".to_string())];
    assert_eq!(
        p.metadata.annotations.as_ref().unwrap()[super::testkit::ALLOCATED],
        r#"{"name":"r","uid":"uid-r"}"#
    );
    assert_eq!(s.phase("r"), "Succeeded");
    assert_eq!(s.owners("r"), vec!["default/p"]);
    assert_eq!(allocated(&s, "r", "cpu").as_deref(), Some("4"));
    assert_eq!(allocated(&s, "r", "memory").as_deref(), Some("4Gi"));
    let n = s
        .s()
        .cluster
        .cache
        .node_by_name(rnode.as_deref().unwrap())
        .unwrap();
    assert!(n.reserved.is_zero(), "the remainder is released");
    assert_eq!(n.requested[ResourceId::CPU], 4000);
    // Allocate-once stays Succeeded when its owner goes away (E2E #14).
    s.delete_pod("p");
    assert_eq!(s.phase("r"), "Succeeded");
    assert_rebuild_equals_live(&s);
}

#[test]
fn seed_node_resources_cases() {
    // (reservation requests, allocateOnce, owner requests..., want bound, want allocated cpu)
    struct Case {
        name: &'static str,
        reserve: &'static [(&'static str, &'static str)],
        reusable: bool,
        owners: &'static [&'static [(&'static str, &'static str)]],
        allocated_cpu: &'static str,
        reserved_cpu_left: i64,
    }
    let cases = [
        Case {
            name: "4C4Gi, owner same",
            reserve: &[("cpu", "4"), ("memory", "4Gi")],
            reusable: false,
            owners: &[&[("cpu", "4"), ("memory", "4Gi")]],
            allocated_cpu: "4",
            reserved_cpu_left: 0,
        },
        Case {
            name: "4C4Gi, owner 4C",
            reserve: &[("cpu", "4"), ("memory", "4Gi")],
            reusable: false,
            owners: &[&[("cpu", "4")]],
            allocated_cpu: "4",
            reserved_cpu_left: 0,
        },
        Case {
            name: "4C4Gi, owner 4C1Gi",
            reserve: &[("cpu", "4"), ("memory", "4Gi")],
            reusable: false,
            owners: &[&[("cpu", "4"), ("memory", "1Gi")]],
            allocated_cpu: "4",
            reserved_cpu_left: 0,
        },
        Case {
            name: "4C, owner 4C1Gi (1Gi from the node)",
            reserve: &[("cpu", "4")],
            reusable: false,
            owners: &[&[("cpu", "4"), ("memory", "1Gi")]],
            allocated_cpu: "4",
            reserved_cpu_left: 0,
        },
        Case {
            name: "4C, owner 6C (2C from the node)",
            reserve: &[("cpu", "4")],
            reusable: false,
            owners: &[&[("cpu", "6")]],
            // Koordinator's syncStatus: the owners' requests, not capped at allocatable.
            allocated_cpu: "6",
            reserved_cpu_left: 0,
        },
        Case {
            name: "8C reusable, two owners 4C",
            reserve: &[("cpu", "8")],
            reusable: true,
            owners: &[&[("cpu", "4")], &[("cpu", "4")]],
            allocated_cpu: "8",
            reserved_cpu_left: 0,
        },
        Case {
            name: "6C reusable, two owners 4C",
            reserve: &[("cpu", "6")],
            reusable: true,
            owners: &[&[("cpu", "4")], &[("cpu", "4")]],
            allocated_cpu: "8",
            reserved_cpu_left: 0,
        },
        Case {
            name: "4C reusable, one owner 2C",
            reserve: &[("cpu", "4")],
            reusable: true,
            owners: &[&[("cpu", "2")]],
            allocated_cpu: "2",
            reserved_cpu_left: 2000,
        },
    ];
    for c in cases {
        let mut s = sim_with_nodes(&["n1"]);
        let mut b = reservation("r").owner_label("app", "web");
        for (k, v) in c.reserve {
            b = b.req(k, v);
        }
        if c.reusable {
            b = b.reusable();
        }
        s.reservation(b.build());
        for (i, reqs) in c.owners.iter().enumerate() {
            let mut p = pod(&format!("p{i}")).label("app", "web");
            for (k, v) in *reqs {
                p = p.req(k, v);
            }
            s.pod(p.build());
            assert_eq!(
                s.bound(&format!("p{i}")).as_deref(),
                Some("n1"),
                "{}",
                c.name
            );
            assert_eq!(
                s.allocated_from(&format!("p{i}")).as_deref(),
                Some("r"),
                "{}",
                c.name
            );
        }
        assert_eq!(
            allocated(&s, "r", "cpu").as_deref(),
            Some(c.allocated_cpu),
            "{}",
            c.name
        );
        let n = s.s().cluster.cache.node_by_name("n1").unwrap();
        assert_eq!(
            n.reserved[ResourceId::CPU],
            c.reserved_cpu_left,
            "{}",
            c.name
        );
        assert_eq!(
            s.phase("r"),
            if c.reusable { "Available" } else { "Succeeded" },
            "{}",
            c.name
        );
        assert_rebuild_equals_live(&s);
    }
}

#[test]
fn allocated_is_the_uncapped_sum_of_owner_requests_while_the_node_counts_what_was_taken() {
    // Issue 8, Koordinator's syncStatus: allocated = Σ owners' requests masked to the names
    // of allocatable, not capped. The node holds only what is left of the reservation and
    // counts each owner's full request once.
    let mut s = Sim::default();
    s.node(node("n1").alloc("cpu", "8").alloc("memory", "8Gi").build());
    s.reservation(
        reservation("r")
            .req("cpu", "4")
            .owner_label("app", "web")
            .build(),
    );
    s.pod(
        pod("p")
            .label("app", "web")
            .req("cpu", "6")
            .req("memory", "1Gi")
            .build(),
    );
    assert_eq!(s.allocated_from("p").as_deref(), Some("r"));
    assert_eq!(allocated(&s, "r", "cpu").as_deref(), Some("6"));
    assert_eq!(
        allocated(&s, "r", "memory"),
        None,
        "memory is not among the names of allocatable"
    );
    let n = s.s().cluster.cache.node_by_name("n1").unwrap();
    assert_eq!(n.requested[ResourceId::CPU], 6000);
    assert!(
        n.reserved.is_zero(),
        "4 from the reservation, 2 from the node"
    );
    s.pod(pod("fits").req("cpu", "2").build());
    assert_eq!(s.bound("fits").as_deref(), Some("n1"));
    s.pod(pod("too-big").req("cpu", "1").build());
    assert_eq!(s.bound("too-big"), None, "the node is full: 6 + 2 of 8");

    let mut s = Sim::default();
    s.node(node("n1").alloc("cpu", "10").alloc("memory", "8Gi").build());
    s.reservation(
        reservation("r")
            .req("cpu", "6")
            .owner_label("app", "web")
            .reusable()
            .build(),
    );
    for name in ["a", "b"] {
        s.pod(pod(name).label("app", "web").req("cpu", "4").build());
        assert_eq!(s.allocated_from(name).as_deref(), Some("r"));
    }
    assert_eq!(allocated(&s, "r", "cpu").as_deref(), Some("8"));
    assert_eq!(s.phase("r"), "Available");
    let n = s.s().cluster.cache.node_by_name("n1").unwrap();
    assert_eq!(n.requested[ResourceId::CPU], 8000);
    assert!(n.reserved.is_zero());
    s.pod(pod("fits").req("cpu", "2").build());
    assert_eq!(s.bound("fits").as_deref(), Some("n1"), "8 + 2 of 10");
    assert_rebuild_equals_live(&s);
}

#[test]
fn of_several_reusable_reservations_on_a_node_the_earliest_created_is_used() {
    // Seed 002, "Allocate Reserved Resources": of several reusable reservations a pod can
    // use on one node, only the one created first is used; the reservation-order label
    // comes before that. Different owners (both matching the pod) so both are placed.
    let mut s = sim_with_nodes(&["n1"]);
    let on_n1 = |name: &str, cpu: &str, owner: (&str, &str)| {
        reservation(name)
            .req("cpu", cpu)
            .owner_label(owner.0, owner.1)
            .reusable()
            .template_spec("nodeName", json!("n1"))
    };
    // "b-early" is created first and is the worse fit by score (a 2-CPU pod fills 25% of
    // it, 100% of "a-late"); names sort the other way.
    s.reservation(on_n1("b-early", "8", ("app", "web")).build());
    s.advance(1_000);
    s.reservation(on_n1("a-late", "2", ("tier", "front")).build());
    assert_eq!(s.phase("b-early"), "Available");
    assert_eq!(s.phase("a-late"), "Available");
    let web = |name: &str| {
        pod(name)
            .label("app", "web")
            .label("tier", "front")
            .label("zone", "a")
            .req("cpu", "2")
            .build()
    };
    s.pod(web("p1"));
    assert_eq!(s.allocated_from("p1").as_deref(), Some("b-early"));
    s.pod(web("p2"));
    assert_eq!(s.allocated_from("p2").as_deref(), Some("b-early"));
    // The order label wins over creation.
    s.advance(1_000);
    s.reservation(
        on_n1("c-ordered", "4", ("zone", "a"))
            .label(berth_api::annotations::LABEL_RESERVATION_ORDER, "7")
            .build(),
    );
    s.pod(web("p3"));
    assert_eq!(s.phase("c-ordered"), "Available");
    assert_eq!(s.allocated_from("p3").as_deref(), Some("c-ordered"));
    // Once the earliest cannot hold the pod, the next one is used.
    s.pod(web("p4"));
    assert_eq!(s.allocated_from("p4").as_deref(), Some("c-ordered"));
    s.pod(web("p5"));
    s.pod(web("p6"));
    assert_eq!(s.allocated_from("p5").as_deref(), Some("b-early"));
    assert_eq!(s.allocated_from("p6").as_deref(), Some("b-early"));
    s.pod(web("p7"));
    assert_eq!(
        s.allocated_from("p7").as_deref(),
        Some("a-late"),
        "the earliest is full"
    );
    assert_rebuild_equals_live(&s);
}

#[test]
fn only_one_reusable_reservation_for_the_same_owners_is_placed_on_a_node() {
    // Seed 002, "Schedule Reservations": a second reusable reservation for the same owners
    // does not go to a node that already holds one.
    let mut s = sim_with_nodes(&["n1"]);
    let reusable = |name: &str| {
        reservation(name)
            .req("cpu", "2")
            .owner_label("app", "web")
            .reusable()
    };
    s.reservation(reusable("first").build());
    s.reservation(reusable("second").build());
    assert_eq!(s.phase("first"), "Available");
    assert_eq!(s.phase("second"), "Pending");
    let cond = s.res("second").status.clone().unwrap().conditions[0].clone();
    assert_eq!(
        (cond.type_.as_str(), cond.status.as_str()),
        ("Scheduled", "False")
    );
    assert!(
        cond.message
            .contains("1 node(s) already have a reusable reservation for the same owners"),
        "{}",
        cond.message
    );
    // Other owners, or allocate-once, may share the node.
    s.reservation(
        reservation("others")
            .req("cpu", "2")
            .owner_label("app", "db")
            .reusable()
            .build(),
    );
    s.reservation(
        reservation("once")
            .req("cpu", "2")
            .owner_label("app", "web")
            .build(),
    );
    assert_eq!(s.phase("others"), "Available");
    assert_eq!(s.phase("once"), "Available");
    // A second node takes the second one.
    s.node(big_node("n2"));
    assert_eq!(s.phase("second"), "Available");
    assert_eq!(
        s.res("second").status.clone().unwrap().node_name.as_deref(),
        Some("n2")
    );
}

#[test]
fn owner_and_non_owner_share_a_node_without_touching_the_remainder() {
    // Reservation reserved 4000m CPU, owner Pod requests 2000m CPU, and non-owner Pod
    // requests 2000m CPU, on a node with exactly 6 CPUs.
    let mut s = Sim::default();
    s.node(node("n1").alloc("cpu", "6").alloc("memory", "8Gi").build());
    s.reservation(
        reservation("r")
            .req("cpu", "4")
            .owner_label("app", "web")
            .reusable()
            .build(),
    );
    s.pod(pod("owner").label("app", "web").req("cpu", "2").build());
    s.pod(pod("other").req("cpu", "2").build());
    assert_eq!(s.allocated_from("owner").as_deref(), Some("r"));
    assert_eq!(s.bound("other").as_deref(), Some("n1"));
    assert_eq!(s.allocated_from("other"), None);
    // The 2 CPUs left in the reservation are not for others.
    s.pod(pod("greedy").req("cpu", "1").build());
    assert_eq!(s.bound("greedy"), None);
    // But the owner's peers may use them.
    s.pod(pod("owner2").label("app", "web").req("cpu", "2").build());
    assert_eq!(s.allocated_from("owner2").as_deref(), Some("r"));
    assert_rebuild_equals_live(&s);
}

#[test]
fn restricted_and_aligned_policies_match_koordinator_e2e() {
    // E2E #6 / #7: reservation 4C8Gi reusable; two owners 2C2Gi, one 3Gi, one 2Gi.
    for (policy, fourth_fits, memory) in [("Restricted", false, "7Gi"), ("Aligned", true, "9Gi")] {
        let mut s = sim_with_nodes(&["n1"]);
        s.reservation(
            reservation("r")
                .req("cpu", "4")
                .req("memory", "8Gi")
                .owner_label("test-reserve-policy", "true")
                .reusable()
                .policy(policy)
                .build(),
        );
        for name in ["a", "b"] {
            s.pod(
                pod(name)
                    .label("test-reserve-policy", "true")
                    .req("cpu", "2")
                    .req("memory", "2Gi")
                    .build(),
            );
            assert_eq!(s.allocated_from(name).as_deref(), Some("r"), "{policy}");
        }
        s.pod(
            pod("c")
                .label("test-reserve-policy", "true")
                .req("memory", "3Gi")
                .build(),
        );
        assert_eq!(s.allocated_from("c").as_deref(), Some("r"), "{policy}");
        s.pod(
            pod("d")
                .label("test-reserve-policy", "true")
                .req("memory", "2Gi")
                .build(),
        );
        assert_eq!(s.bound("d").is_some(), fourth_fits, "{policy}");
        if !fourth_fits {
            let msg = s.message("d").unwrap();
            assert!(msg.contains("Reservation(s) Insufficient memory"), "{msg}");
        } else {
            assert_eq!(s.allocated_from("d").as_deref(), Some("r"));
        }
        assert_eq!(allocated(&s, "r", "cpu").as_deref(), Some("4"), "{policy}");
        // Koordinator's E2E: the Aligned fourth owner takes 1Gi from the reservation and 1Gi
        // from the node, and allocated is the uncapped sum (9Gi of 8Gi).
        assert_eq!(
            allocated(&s, "r", "memory").as_deref(),
            Some(memory),
            "{policy}"
        );
        assert_eq!(s.owners("r").len(), if fourth_fits { 4 } else { 3 });
        assert_rebuild_equals_live(&s);
    }
}

#[test]
fn aligned_reservations_filling_a_node_reject_a_larger_owner() {
    // E2E #8: five Aligned reservations of 200 fake each fill the node (1000); an owner
    // asking 300 fits none of them. Seed 002 allows one reusable reservation per node for
    // the same owners, so here each names its own owner label (the pod carries them all).
    let mut s = Sim::default();
    s.node(
        node("n1")
            .alloc("cpu", "16")
            .alloc("koordinator.sh/fake-resource", "1000")
            .build(),
    );
    for i in 0..5 {
        s.reservation(
            reservation(&format!("r{i}"))
                .req("koordinator.sh/fake-resource", "200")
                .owner_label(&format!("test-reserve-policy-{i}"), "true")
                .reusable()
                .policy("Aligned")
                .build(),
        );
        assert_eq!(s.phase(&format!("r{i}")), "Available");
    }
    let owner = |name: &str, amount: &str| {
        let mut p = pod(name).req("koordinator.sh/fake-resource", amount);
        for i in 0..5 {
            p = p.label(&format!("test-reserve-policy-{i}"), "true");
        }
        p.build()
    };
    s.pod(owner("p", "300"));
    assert_eq!(s.bound("p"), None);
    s.pod(owner("q", "200"));
    assert_eq!(s.bound("q").as_deref(), Some("n1"));
}

#[test]
fn seed_node_ports_cases() {
    // Reservation reserved 7777/8888/9999; owners A (7777) and B (8888) both succeed.
    let mut s = sim_with_nodes(&["n1"]);
    s.reservation(
        reservation("r")
            .req("cpu", "1")
            .host_port(7777)
            .host_port(8888)
            .host_port(9999)
            .owner_label("app", "web")
            .reusable()
            .build(),
    );
    s.pod(
        pod("other")
            .req("cpu", "100m")
            .host_port(7777, "TCP", "")
            .build(),
    );
    assert_eq!(
        s.bound("other"),
        None,
        "a non-owner cannot take a reserved port"
    );
    assert!(
        s.message("other").unwrap().contains("free ports"),
        "{:?}",
        s.message("other")
    );
    s.pod(
        pod("a")
            .label("app", "web")
            .req("cpu", "100m")
            .host_port(7777, "TCP", "")
            .build(),
    );
    s.pod(
        pod("b")
            .label("app", "web")
            .req("cpu", "100m")
            .host_port(8888, "TCP", "")
            .build(),
    );
    assert_eq!(s.allocated_from("a").as_deref(), Some("r"));
    assert_eq!(s.allocated_from("b").as_deref(), Some("r"));
    let n = s.s().cluster.cache.node_by_name("n1").unwrap();
    let held: Vec<i32> = n.reserved_ports.iter().map(|p| p.port).collect();
    assert_eq!(held, vec![9999]);
    // Another owner wanting 7777 on that node finds it taken by A (E2E #48).
    s.pod(
        pod("c")
            .label("app", "web")
            .req("cpu", "100m")
            .host_port(7777, "TCP", "")
            .build(),
    );
    assert_eq!(s.bound("c"), None);
    assert_rebuild_equals_live(&s);
    // Deleting the reservation releases 9999 but not the owners' ports (Koordinator #1247).
    s.delete_reservation("r");
    let n = s.s().cluster.cache.node_by_name("n1").unwrap();
    assert!(n.reserved_ports.is_empty());
    assert_eq!(n.used_ports.len(), 2);

    // Two reservations with one port each; owners A and B each get theirs.
    let mut s = sim_with_nodes(&["n1"]);
    s.reservation(
        reservation("ra")
            .req("cpu", "1")
            .host_port(7777)
            .owner_label("app", "web")
            .build(),
    );
    s.reservation(
        reservation("rb")
            .req("cpu", "1")
            .host_port(8888)
            .owner_label("app", "web")
            .build(),
    );
    s.pod(
        pod("a")
            .label("app", "web")
            .req("cpu", "1")
            .host_port(7777, "TCP", "")
            .build(),
    );
    s.pod(
        pod("b")
            .label("app", "web")
            .req("cpu", "1")
            .host_port(8888, "TCP", "")
            .build(),
    );
    assert_eq!(s.bound("a").as_deref(), Some("n1"));
    assert_eq!(s.bound("b").as_deref(), Some("n1"));
    assert_rebuild_equals_live(&s);
}

#[test]
fn reservation_affinity_restricts_and_requires_reservations() {
    let mut s = sim_with_nodes(&["n1", "n2"]);
    s.reservation(
        reservation("r")
            .req("cpu", "2")
            .label("e2e-select-reservation", "true")
            .owner_label("app", "web")
            .build(),
    );
    let aff = |v: &str| {
        format!(
            r#"{{"requiredDuringSchedulingIgnoredDuringExecution":{{"reservationSelectorTerms":[{{"matchExpressions":[{{"key":"e2e-select-reservation","operator":"In","values":["{v}"]}}]}}]}}}}"#
        )
    };
    s.pod(
        pod("no")
            .label("app", "web")
            .req("cpu", "1")
            .annotation(
                berth_api::annotations::ANNOTATION_RESERVATION_AFFINITY,
                &aff("false"),
            )
            .build(),
    );
    assert_eq!(s.bound("no"), None);
    let msg = s.message("no").unwrap();
    assert!(
        msg.contains("node(s) no reservations match reservation affinity"),
        "{msg}"
    );
    assert!(
        msg.contains("1 Reservation(s) didn't match affinity rules"),
        "{msg}"
    );
    s.pod(
        pod("yes")
            .label("app", "web")
            .req("cpu", "1")
            .annotation(
                berth_api::annotations::ANNOTATION_RESERVATION_AFFINITY,
                &aff("true"),
            )
            .build(),
    );
    assert_eq!(s.allocated_from("yes").as_deref(), Some("r"));
    // A malformed annotation is named in the pod's message and stops nothing else.
    s.pod(
        pod("bad")
            .label("app", "web")
            .annotation(
                berth_api::annotations::ANNOTATION_RESERVATION_AFFINITY,
                "{oops",
            )
            .build(),
    );
    let msg = s.message("bad").unwrap();
    assert!(
        msg.contains("scheduling.koordinator.sh/reservation-affinity"),
        "{msg}"
    );
    s.pod(pod("fine").req("cpu", "1").build());
    assert!(s.bound("fine").is_some());
}

#[test]
fn unschedulable_terminating_and_tainted_reservations() {
    let mut s = sim_with_nodes(&["n1"]);
    s.reservation(
        reservation("u")
            .req("cpu", "16")
            .owner_label("app", "web")
            .spec("unschedulable", json!(true))
            .build(),
    );
    // Held but unusable: the owner cannot use it and the node is full for everyone else.
    s.pod(pod("p").label("app", "web").req("cpu", "1").build());
    assert_eq!(s.bound("p"), None);
    // Tolerating node.kubernetes.io/unschedulable through the affinity allows it.
    s.pod(pod("q").label("app", "web").req("cpu", "1").annotation(
        berth_api::annotations::ANNOTATION_RESERVATION_AFFINITY,
        r#"{"tolerations":[{"key":"node.kubernetes.io/unschedulable","operator":"Exists","effect":"NoSchedule"}]}"#,
    ).build());
    assert_eq!(s.allocated_from("q").as_deref(), Some("u"));

    // Taints bind only pods asking for reservations (E2E #13).
    let mut s = sim_with_nodes(&["n1"]);
    s.reservation(
        reservation("t")
            .req("cpu", "2")
            .owner_label("app", "web")
            .spec(
                "taints",
                json!([{"key": "k", "value": "v", "effect": "NoSchedule"}]),
            )
            .build(),
    );
    s.pod(pod("plain").label("app", "web").req("cpu", "1").build());
    assert_eq!(s.allocated_from("plain").as_deref(), Some("t"));
    let mut s = sim_with_nodes(&["n1"]);
    s.reservation(
        reservation("t")
            .req("cpu", "2")
            .owner_label("app", "web")
            .spec(
                "taints",
                json!([{"key": "k", "value": "v", "effect": "NoSchedule"}]),
            )
            .build(),
    );
    s.pod(
        pod("strict")
            .label("app", "web")
            .req("cpu", "1")
            .annotation(
                berth_api::annotations::ANNOTATION_RESERVATION_AFFINITY,
                "{}",
            )
            .build(),
    );
    assert_eq!(s.bound("strict"), None);
    assert!(
        s.message("strict")
            .unwrap()
            .contains("had untolerated taint {k: v}"),
        "{:?}",
        s.message("strict")
    );

    // A terminating reservation is never used and never scheduled (Koordinator #3154).
    let mut s = sim_with_nodes(&["n1"]);
    let mut r = reservation("gone")
        .req("cpu", "2")
        .owner_label("app", "web")
        .build();
    r.metadata.deletion_timestamp = super::status::meta_time(0);
    s.reservation(r);
    assert_eq!(s.phase("gone"), "Pending");
    assert!(s
        .res("gone")
        .status
        .as_ref()
        .is_none_or(|st| st.node_name.is_none()));
}

#[test]
fn pinned_reservations_and_policy_conflicts() {
    let mut s = sim_with_nodes(&["n1", "n2"]);
    s.reservation(
        reservation("pin")
            .req("cpu", "1")
            .owner_label("app", "web")
            .template_spec("nodeName", json!("n2"))
            .build(),
    );
    assert_eq!(
        s.res("pin").status.as_ref().unwrap().node_name.as_deref(),
        Some("n2")
    );
    s.reservation(
        reservation("nowhere")
            .req("cpu", "1")
            .owner_label("app", "web")
            .template_spec("nodeName", json!("n9"))
            .build(),
    );
    let st = s.res("nowhere").status.clone().unwrap();
    assert_eq!(s.phase("nowhere"), "Pending");
    let c = &st.conditions[0];
    assert_eq!(
        (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
        ("Scheduled", "False", "Unschedulable")
    );
    assert!(
        c.message
            .contains("didn't match the nodeName specified by reservation"),
        "{}",
        c.message
    );
    // Default cannot share a node with Aligned.
    let mut s = sim_with_nodes(&["n1"]);
    s.reservation(
        reservation("al")
            .req("cpu", "1")
            .owner_label("app", "web")
            .policy("Aligned")
            .build(),
    );
    s.reservation(
        reservation("def")
            .req("cpu", "1")
            .owner_label("app", "web")
            .build(),
    );
    assert_eq!(s.phase("def"), "Pending");
    let msg = &s.res("def").status.clone().unwrap().conditions[0].message;
    assert!(
        msg.contains("node(s) reservation allocate policy conflict"),
        "{msg}"
    );
    s.reservation(
        reservation("re")
            .req("cpu", "1")
            .owner_label("app", "web")
            .policy("Restricted")
            .build(),
    );
    assert_eq!(s.phase("re"), "Available");
}

#[test]
fn reservations_expire_pending_ones_too_and_are_garbage_collected() {
    let mut s = sim_with_nodes(&["n1"]);
    s.reservation(
        reservation("short")
            .req("cpu", "2")
            .owner_label("app", "x")
            .ttl("10s")
            .build(),
    );
    s.reservation(
        reservation("toobig")
            .req("cpu", "64")
            .owner_label("app", "x")
            .ttl("30s")
            .build(),
    );
    s.reservation(
        reservation("forever")
            .req("cpu", "2")
            .owner_label("app", "x")
            .ttl("0")
            .build(),
    );
    assert_eq!(s.phase("short"), "Available");
    assert_eq!(s.phase("toobig"), "Pending");
    s.advance(10_000);
    assert_eq!(s.phase("short"), "Failed");
    let ready = s
        .res("short")
        .status
        .clone()
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "Expired")
    );
    assert_eq!(
        s.s().cluster.cache.node_by_name("n1").unwrap().reserved[ResourceId::CPU],
        2000,
        "only 'forever' holds"
    );
    s.advance(20_000);
    assert_eq!(
        s.phase("toobig"),
        "Failed",
        "a pending reservation expires too"
    );
    s.advance(24 * 3600 * 1000);
    assert_eq!(s.phase("short"), "<deleted>");
    assert_eq!(s.phase("toobig"), "<deleted>");
    assert_eq!(s.phase("forever"), "Available");
}

#[test]
fn expires_is_checked_before_ttl() {
    let mut s = sim_with_nodes(&["n1"]);
    let at = super::status::meta_time(s.now() + 5_000).unwrap();
    s.reservation(
        reservation("e")
            .req("cpu", "1")
            .owner_label("app", "x")
            .spec("expires", serde_json::to_value(&at).unwrap())
            .build(),
    );
    s.advance(4_000);
    assert_eq!(s.phase("e"), "Available");
    s.advance(2_000);
    assert_eq!(s.phase("e"), "Failed");
}

#[test]
fn ttl_and_expires_together_are_valid_and_the_earlier_one_expires_it() {
    // Issue 8: the CRD defaults ttl to 24h even when expires is set, so both together are
    // what an API server hands back; Koordinator expires on whichever comes first, and
    // ttl 0 disables expiry.
    let mut s = sim_with_nodes(&["n1"]);
    let in_10s = serde_json::to_value(super::status::meta_time(s.now() + 10_000).unwrap()).unwrap();
    let in_1h =
        serde_json::to_value(super::status::meta_time(s.now() + 3_600_000).unwrap()).unwrap();
    s.reservation(
        reservation("expires-first")
            .req("cpu", "1")
            .owner_label("app", "x")
            .ttl("1h")
            .spec("expires", in_10s.clone())
            .build(),
    );
    s.reservation(
        reservation("ttl-first")
            .req("cpu", "1")
            .owner_label("app", "x")
            .ttl("30s")
            .spec("expires", in_1h)
            .build(),
    );
    s.reservation(
        reservation("defaulted-ttl")
            .req("cpu", "1")
            .owner_label("app", "x")
            .ttl("24h")
            .spec("expires", in_10s.clone())
            .build(),
    );
    s.reservation(
        reservation("never")
            .req("cpu", "1")
            .owner_label("app", "x")
            .ttl("0s")
            .spec("expires", in_10s)
            .build(),
    );
    for name in ["expires-first", "ttl-first", "defaulted-ttl", "never"] {
        assert_eq!(s.phase(name), "Available", "{name} is valid and placed");
        let scheduled = s
            .res(name)
            .status
            .clone()
            .unwrap()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Scheduled")
            .unwrap();
        assert_eq!(scheduled.status, "True", "{name}");
    }
    s.advance(10_000);
    assert_eq!(s.phase("expires-first"), "Failed");
    assert_eq!(s.phase("defaulted-ttl"), "Failed");
    assert_eq!(s.phase("ttl-first"), "Available");
    s.advance(20_000);
    assert_eq!(s.phase("ttl-first"), "Failed");
    s.advance(2 * 3_600_000);
    assert_eq!(s.phase("never"), "Available", "ttl 0 disables expiry");
}

#[test]
fn a_deleted_node_fails_its_reservations_and_pending_pods_get_the_capacity() {
    let mut s = Sim::default();
    s.node(node("n1").alloc("cpu", "4").build());
    s.node(node("n2").alloc("cpu", "4").build());
    s.reservation(
        reservation("r1")
            .req("cpu", "4")
            .owner_label("app", "x")
            .template_spec("nodeName", json!("n1"))
            .build(),
    );
    s.reservation(
        reservation("r2")
            .req("cpu", "4")
            .owner_label("app", "x")
            .template_spec("nodeName", json!("n2"))
            .build(),
    );
    s.pod(pod("p").req("cpu", "4").build());
    assert_eq!(s.bound("p"), None);
    s.delete_node("n1");
    assert_eq!(s.phase("r1"), "Failed");
    s.delete_reservation("r2");
    assert_eq!(
        s.bound("p").as_deref(),
        Some("n2"),
        "released capacity requeues pending pods"
    );
}

#[test]
fn terminal_reservations_of_a_deleted_node_are_collected_on_the_next_gc_run() {
    let mut s = Sim::default();
    s.node(node("n1").alloc("cpu", "8").build());
    s.node(node("n2").alloc("cpu", "8").build());
    let pinned = |name: &str, node: &str| {
        reservation(name)
            .req("cpu", "2")
            .owner(json!({"object": {"namespace": "default", "name": format!("{name}-owner")}}))
            .template_spec("nodeName", json!(node))
            .build()
    };
    s.reservation(pinned("avail", "n1"));
    s.reservation(pinned("used", "n1"));
    s.reservation(pinned("elsewhere", "n2"));
    s.pod(pod("used-owner").req("cpu", "2").build());
    assert_eq!(s.phase("used"), "Succeeded");
    s.delete_node("n1");
    assert_eq!(s.phase("avail"), "Failed");
    assert_eq!(
        s.phase("used"),
        "Succeeded",
        "the controller skips terminal ones"
    );
    s.advance(59_000);
    assert_eq!(s.phase("avail"), "Failed", "not before the collector runs");
    s.advance(1_000);
    // Koordinator's gcReservations: expired or succeeded, and the node is missing.
    assert_eq!(s.phase("avail"), "<deleted>");
    assert_eq!(s.phase("used"), "<deleted>");
    assert_eq!(s.phase("elsewhere"), "Available");
}

#[test]
fn deleting_an_owner_of_a_reusable_reservation_returns_its_share() {
    let mut s = sim_with_nodes(&["n1"]);
    s.reservation(
        reservation("r")
            .req("cpu", "4")
            .owner_label("app", "web")
            .reusable()
            .build(),
    );
    s.pod(pod("a").label("app", "web").req("cpu", "3").build());
    assert_eq!(
        s.s().cluster.cache.node_by_name("n1").unwrap().reserved[ResourceId::CPU],
        1000
    );
    assert_eq!(allocated(&s, "r", "cpu").as_deref(), Some("3"));
    s.delete_pod("a");
    assert_eq!(
        s.s().cluster.cache.node_by_name("n1").unwrap().reserved[ResourceId::CPU],
        4000
    );
    assert!(s.owners("r").is_empty());
    s.pod(pod("b").label("app", "web").req("cpu", "2").build());
    s.finish_pod("b");
    assert!(
        s.owners("r").is_empty(),
        "a terminal pod gives its share back"
    );
    assert_rebuild_equals_live(&s);
}

#[test]
fn bad_reservations_say_why_and_stop_nothing_else() {
    let mut s = sim_with_nodes(&["n1"]);
    let cond_msg = |s: &Sim, n: &str| {
        s.res(n).status.clone().unwrap().conditions[0]
            .message
            .clone()
    };
    s.reservation(reservation("no-owners").req("cpu", "1").build());
    assert_eq!(s.phase("no-owners"), "Pending");
    assert_eq!(
        cond_msg(&s, "no-owners"),
        "the reservation misses the owner spec"
    );
    s.reservation(
        reservation("empty")
            .owner_label("a", "b")
            .template_spec("containers", json!([]))
            .build(),
    );
    assert!(cond_msg(&s, "empty").contains("no containers"));
    s.reservation(
        reservation("badsel")
            .req("cpu", "1")
            .owner(
                json!({"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}),
            )
            .build(),
    );
    assert!(
        cond_msg(&s, "badsel").starts_with("spec.owners[0].labelSelector"),
        "{}",
        cond_msg(&s, "badsel")
    );
    s.reservation(
        reservation("ok")
            .req("cpu", "1")
            .owner_label("a", "b")
            .build(),
    );
    assert_eq!(s.phase("ok"), "Available");
    // Fixing the object schedules it.
    s.reservation(
        reservation("no-owners")
            .req("cpu", "1")
            .owner_label("a", "b")
            .build(),
    );
    assert_eq!(s.phase("no-owners"), "Available");
}

#[test]
fn an_unusable_template_is_a_condition_and_a_warning_event_and_reserves_nothing() {
    // Issue 8: spec.template is schemaless in the CRD, so the API server accepts a negative
    // request there. It is not bad input: Scheduled=False and a Warning event name the
    // field, the reservation holds nothing, and the rest is scheduled.
    let mut s = Sim::default();
    s.node(node("n1").alloc("cpu", "4").alloc("memory", "8Gi").build());
    s.reservation(
        reservation("negative")
            .req("cpu", "-1")
            .owner_label("app", "web")
            .build(),
    );
    s.reservation(
        reservation("unreadable")
            .req("memory", "lots")
            .owner_label("app", "web")
            .build(),
    );
    s.pod(pod("p").label("app", "web").req("cpu", "4").build());
    for (name, field) in [
        (
            "negative",
            "spec.template.spec.containers[0].resources.requests[cpu]",
        ),
        (
            "unreadable",
            "spec.template.spec.containers[0].resources.requests[memory]",
        ),
    ] {
        assert_eq!(s.phase(name), "Pending", "{name}");
        let st = s.res(name).status.clone().unwrap();
        assert_eq!(st.node_name, None, "{name}");
        let cond = &st.conditions[0];
        assert_eq!(
            (
                cond.type_.as_str(),
                cond.status.as_str(),
                cond.reason.as_str()
            ),
            ("Scheduled", "False", "Unschedulable"),
            "{name}"
        );
        assert!(cond.message.starts_with(field), "{name}: {}", cond.message);
        let warnings: Vec<_> = s
            .events()
            .iter()
            .filter(|e| &*e.involved.name == name && e.type_ == "Warning")
            .collect();
        assert_eq!(warnings.len(), 1, "{name}: {warnings:?}");
        assert_eq!(warnings[0].reason, "FailedScheduling");
        assert!(
            warnings[0].message.starts_with(field),
            "{name}: {}",
            warnings[0].message
        );
    }
    assert!(s
        .s()
        .cluster
        .cache
        .node_by_name("n1")
        .unwrap()
        .reserved
        .is_zero());
    assert_eq!(s.bound("p").as_deref(), Some("n1"), "the run goes on");
    assert_eq!(s.allocated_from("p"), None);
    // An echo of the status write reports nothing new; fixing the template schedules it.
    s.settle();
    let count = |s: &Sim| s.events().iter().filter(|e| e.type_ == "Warning").count();
    assert_eq!(count(&s), 2);
    s.delete_pod("p");
    s.reservation(
        reservation("negative")
            .req("cpu", "1")
            .owner_label("app", "web")
            .build(),
    );
    assert_eq!(s.phase("negative"), "Available");
    assert_eq!(count(&s), 2);
}

#[test]
fn pre_allocation_waits_for_room_then_becomes_available() {
    let mut s = Sim::default();
    s.node(node("n1").alloc("cpu", "8").alloc("memory", "16Gi").build());
    s.pod(pod("filler").req("cpu", "6").build());
    s.reservation(
        reservation("pre")
            .req("cpu", "4")
            .owner_label("app", "web")
            .policy("Restricted")
            .reusable()
            .spec("preAllocation", json!(true))
            .template_spec("nodeName", json!("n1"))
            .build(),
    );
    assert_eq!(s.phase("pre"), "Waiting");
    assert_eq!(
        s.res("pre").status.clone().unwrap().node_name.as_deref(),
        Some("n1")
    );
    assert!(
        s.s()
            .cluster
            .cache
            .node_by_name("n1")
            .unwrap()
            .reserved
            .is_zero(),
        "waiting holds nothing"
    );
    s.delete_pod("filler");
    assert_eq!(s.phase("pre"), "Available");
    assert_eq!(
        s.s().cluster.cache.node_by_name("n1").unwrap().reserved[ResourceId::CPU],
        4000
    );
    assert_rebuild_equals_live(&s);
    // Without Restricted, pre-allocation is refused as Koordinator does.
    s.reservation(
        reservation("pre2")
            .req("cpu", "1")
            .owner_label("app", "web")
            .spec("preAllocation", json!(true))
            .build(),
    );
    assert_eq!(s.phase("pre2"), "Pending");
}

#[test]
fn pre_allocation_takes_over_running_owner_pods() {
    let mut s = Sim::default();
    s.node(node("n1").alloc("cpu", "8").build());
    s.pod(pod("running").label("app", "web").req("cpu", "3").build());
    s.pod(pod("other").req("cpu", "4").build());
    s.reservation(
        reservation("pre")
            .req("cpu", "4")
            .owner_label("app", "web")
            .policy("Restricted")
            .reusable()
            .spec("preAllocation", json!(true))
            .build(),
    );
    assert_eq!(
        s.allocated_from("running").as_deref(),
        Some("pre"),
        "patched with the annotation"
    );
    assert_eq!(s.owners("pre"), vec!["default/running"]);
    // 1 CPU left of the reservation, and the node has 1 free: Available.
    assert_eq!(s.phase("pre"), "Available");
    assert_eq!(
        s.s().cluster.cache.node_by_name("n1").unwrap().reserved[ResourceId::CPU],
        1000
    );
    assert_rebuild_equals_live(&s);
}

#[test]
fn smallest_order_then_most_allocated_then_earliest_wins_on_a_node() {
    // Allocate-once reservations compete by Koordinator's nomination: the order label, then
    // MostAllocated, then age. (Several reusable ones follow the seed's earliest-created
    // rule instead: of_several_reusable_reservations_on_a_node_the_earliest_created_is_used.)
    let mut s = sim_with_nodes(&["n1"]);
    s.reservation(
        reservation("big")
            .req("cpu", "8")
            .owner_label("app", "web")
            .build(),
    );
    s.advance(1000);
    s.reservation(
        reservation("small")
            .req("cpu", "2")
            .owner_label("app", "web")
            .build(),
    );
    s.advance(1000);
    s.reservation(
        reservation("small2")
            .req("cpu", "2")
            .owner_label("app", "web")
            .build(),
    );
    // MostAllocated: a 2C pod fills 'small' (100) rather than 'big' (25); 'small' is older
    // than 'small2'.
    s.pod(pod("p").label("app", "web").req("cpu", "2").build());
    assert_eq!(s.allocated_from("p").as_deref(), Some("small"));
    s.reservation(
        reservation("ordered")
            .req("cpu", "2")
            .owner_label("app", "web")
            .label("scheduling.koordinator.sh/reservation-order", "5")
            .build(),
    );
    s.pod(pod("q").label("app", "web").req("cpu", "2").build());
    assert_eq!(s.allocated_from("q").as_deref(), Some("ordered"));
    s.pod(pod("r").label("app", "web").req("cpu", "2").build());
    assert_eq!(s.allocated_from("r").as_deref(), Some("small2"));
}

#[test]
fn owners_prefer_their_reservations_node() {
    let mut s = sim_with_nodes(&["n1", "n2", "n3", "n4"]);
    s.reservation(
        reservation("r")
            .req("cpu", "2")
            .owner_label("app", "web")
            .template_spec("nodeName", json!("n3"))
            .reusable()
            .build(),
    );
    // Make the reservation's node the least attractive to every other scorer.
    s.pod(pod("filler").req("cpu", "8").node_name("n3").build());
    for i in 0..2 {
        let n = format!("p{i}");
        s.pod(pod(&n).label("app", "web").req("cpu", "1").build());
        assert_eq!(s.bound(&n).as_deref(), Some("n3"));
    }
}

#[test]
fn ignored_pods_may_use_reserved_capacity_and_never_own() {
    let mut s = Sim::default();
    s.node(node("n1").alloc("cpu", "4").build());
    s.reservation(
        reservation("r")
            .req("cpu", "4")
            .owner_label("app", "web")
            .build(),
    );
    s.pod(
        pod("ign")
            .label("app", "web")
            .label("scheduling.koordinator.sh/reservation-ignored", "true")
            .req("cpu", "2")
            .build(),
    );
    assert_eq!(s.bound("ign").as_deref(), Some("n1"));
    assert_eq!(s.allocated_from("ign"), None);
    assert_eq!(s.phase("r"), "Available");
    // The owner gets only what is physically left.
    s.pod(pod("own").label("app", "web").req("cpu", "3").build());
    assert_eq!(s.bound("own"), None);
    s.pod(pod("own2").label("app", "web").req("cpu", "2").build());
    assert_eq!(s.allocated_from("own2").as_deref(), Some("r"));
}

#[test]
fn restart_rebuilds_the_same_state_from_objects() {
    let mut s = sim_with_nodes(&["n1", "n2"]);
    s.reservation(
        reservation("a")
            .req("cpu", "4")
            .req("memory", "2Gi")
            .owner_label("app", "web")
            .reusable()
            .host_port(9000)
            .build(),
    );
    s.reservation(
        reservation("b")
            .req("cpu", "2")
            .owner_label("app", "db")
            .build(),
    );
    s.reservation(
        reservation("c")
            .req("cpu", "64")
            .owner_label("app", "db")
            .build(),
    );
    s.pod(
        pod("w1")
            .label("app", "web")
            .req("cpu", "1")
            .host_port(9000, "TCP", "")
            .build(),
    );
    s.pod(pod("w2").label("app", "web").req("cpu", "5").build());
    s.pod(pod("d1").label("app", "db").req("cpu", "1").build());
    s.pod(pod("x").req("cpu", "1").build());
    assert_rebuild_equals_live(&s);
    // And the rebuilt scheduler behaves the same from there.
    let mut rebuilt = s.rebuilt();
    rebuilt.run_until_idle(s.now());
    let _ = std::iter::from_fn(|| rebuilt.poll_effect()).count();
    assert_eq!(accounting(&rebuilt), accounting(s.s()));
}

#[test]
fn a_status_found_stale_is_recomputed_from_the_pods_that_name_the_reservation() {
    // Koordinator's controller recomputes currentOwners and allocated from the pods'
    // reservation-allocated annotations (issue #468): a status written before an owner went
    // away, or before another came, is corrected once the scheduler has seen the objects.
    let mut s = sim_with_nodes(&["n1"]);
    s.pod(
        pod("kept")
            .label("app", "web")
            .req("cpu", "3")
            .node_name("n1")
            .annotation(super::testkit::ALLOCATED, r#"{"name":"r","uid":"uid-r"}"#)
            .build(),
    );
    let mut r = reservation("r")
        .req("cpu", "4")
        .owner_label("app", "web")
        .reusable()
        .build();
    r.status = serde_json::from_value(json!({
        "phase": "Available",
        "nodeName": "n1",
        "allocatable": {"cpu": "4"},
        "allocated": {"cpu": "2"},
        "currentOwners": [{"namespace": "default", "name": "gone", "uid": "uid-gone"}],
        "conditions": [
            {"type": "Scheduled", "status": "True", "reason": "Scheduled"},
            {"type": "Ready", "status": "True", "reason": "Available"}
        ]
    }))
    .unwrap();
    let mut abandoned = r.clone();
    abandoned.metadata.name = Some("abandoned".into());
    abandoned.metadata.uid = Some("uid-abandoned".into());
    s.reservation(r);
    s.reservation(abandoned);
    assert_eq!(s.owners("r"), vec!["default/kept"]);
    assert_eq!(allocated(&s, "r", "cpu").as_deref(), Some("3"));
    assert_eq!(s.phase("r"), "Available");
    // No pod names this one any more: its owner went away while nobody watched.
    assert!(s.owners("abandoned").is_empty());
    assert_eq!(allocated(&s, "abandoned", "cpu"), None);
    assert_eq!(s.phase("abandoned"), "Available");
    assert_rebuild_equals_live(&s);
}

#[test]
fn a_reservation_found_placed_on_a_missing_node_fails_once_the_batch_is_known() {
    // Koordinator's controller (reference §4.2 case 43): an Available reservation whose node
    // no longer exists is expired. A node that comes in the same batch, after the
    // reservation, is not missing.
    let placed = |name: &str, node: &str| {
        let mut r = reservation(name)
            .req("cpu", "2")
            .owner_label("app", "x")
            .ttl("0")
            .build();
        r.status = Some(berth_api::reservation::ReservationStatus {
            phase: Some(berth_api::reservation::ReservationPhase::Available),
            node_name: Some(node.into()),
            ..Default::default()
        });
        std::sync::Arc::new(r)
    };
    let mut s = crate::Scheduler::new(vec![Profile::default_profile()], crate::Config::default());
    let now = 1_000_000;
    for r in [placed("later-node", "n1"), placed("gone", "n9")] {
        s.handle(now, crate::Event::Applied(crate::Object::Reservation(r)));
    }
    s.handle(
        now,
        crate::Event::Applied(crate::Object::Node(node("n1").alloc("cpu", "4").build())),
    );
    s.run_until_idle(now);
    let phase = |name: &str| {
        s.cluster
            .reservations
            .by_name(name)
            .map(|r| r.phase.as_str().to_string())
    };
    assert_eq!(phase("later-node").as_deref(), Some("Available"));
    assert_eq!(phase("gone").as_deref(), Some("Failed"));
    assert_eq!(
        s.cluster.cache.node_by_name("n1").unwrap().reserved[ResourceId::CPU],
        2000,
        "the one on n1 holds its capacity"
    );
}

#[test]
fn no_status_is_written_before_the_initial_sync() {
    // A reservation listed before the pods that own it would otherwise be written back
    // without them: statuses wait until every watched kind is listed.
    let kinds = vec![
        crate::Kind::Node,
        crate::Kind::Pod,
        crate::Kind::Reservation,
    ];
    let config = crate::Config {
        wait_for_sync: kinds.clone(),
        ..crate::Config::default()
    };
    let mut s = crate::Scheduler::new(vec![Profile::default_profile()], config);
    let now = 1_000_000;
    let mut r = reservation("r")
        .req("cpu", "2")
        .owner_label("app", "web")
        .reusable()
        .build();
    r.status = serde_json::from_value(json!({
        "phase": "Available",
        "nodeName": "n1",
        "allocatable": {"cpu": "2"},
        "allocated": {"cpu": "1"},
        "currentOwners": [{"namespace": "default", "name": "w", "uid": "uid-w"}],
        "conditions": [
            {"type": "Scheduled", "status": "True", "reason": "Scheduled"},
            {"type": "Ready", "status": "True", "reason": "Available"}
        ]
    }))
    .unwrap();
    let statuses = |s: &mut crate::Scheduler| {
        std::iter::from_fn(|| s.poll_effect())
            .filter_map(|e| match e {
                crate::Effect::ReservationStatus { status, .. } => Some(status),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    s.handle(
        now,
        crate::Event::Applied(crate::Object::Reservation(std::sync::Arc::new(r))),
    );
    s.handle(now, crate::Event::Listed(crate::Kind::Reservation));
    s.handle(
        now,
        crate::Event::Applied(crate::Object::Node(node("n1").alloc("cpu", "4").build())),
    );
    s.handle(now, crate::Event::Listed(crate::Kind::Node));
    assert!(statuses(&mut s).is_empty(), "the pods are not listed yet");
    let owner = pod("w")
        .label("app", "web")
        .req("cpu", "1")
        .node_name("n1")
        .annotation(super::testkit::ALLOCATED, r#"{"name":"r","uid":"uid-r"}"#)
        .build();
    s.handle(now, crate::Event::Applied(crate::Object::Pod(owner)));
    s.handle(now, crate::Event::Listed(crate::Kind::Pod));
    assert!(s.synced());
    s.run_until_idle(now);
    assert!(
        statuses(&mut s).is_empty(),
        "the status was right all along: nothing to write"
    );
}

#[test]
fn an_allocated_annotation_without_uid_names_its_reservation_by_name() {
    const KEY: &str = "scheduling.koordinator.sh/reservation-allocated";
    let owner = |name: &str, value: &str| {
        pod(name)
            .label("app", "web")
            .req("cpu", "1")
            .node_name("n1")
            .annotation(KEY, value)
            .build()
    };
    let mut s = Sim::default();
    s.node(node("n1").alloc("cpu", "8").build());
    // Known before the reservation exists: waits under the name.
    s.pod(owner("early", r#"{"name":"r"}"#));
    s.reservation(
        reservation("r")
            .req("cpu", "4")
            .owner_label("app", "web")
            .reusable()
            .template_spec("nodeName", json!("n1"))
            .build(),
    );
    s.pod(owner("late", r#"{"name":"r"}"#));
    // A name that matches nothing is no owner of anything.
    s.pod(owner("stray", r#"{"name":"nope"}"#));
    let mut owners = s.owners("r");
    owners.sort();
    assert_eq!(owners, ["default/early", "default/late"]);
    assert_eq!(
        s.s().cluster.cache.node_by_name("n1").unwrap().reserved[ResourceId::CPU],
        2000,
        "4 reserved, 2 taken by the owners"
    );
}
