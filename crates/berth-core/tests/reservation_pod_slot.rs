//! A Reservation's reserve pod takes one of its node's pod slots, as in Koordinator (the
//! reserve pod goes through NodeResourcesFit like any pod). Found by the `core_events` fuzz
//! target (issue 15): NodeResourcesFit skipped the pod count for reserve pods, so a
//! reservation landed on a node with no slot left and the node then held more pods than its
//! `pods` allocatable.

use berth_core::reservation::testkit::{reservation, Sim};
use berth_core::testing::{node, pod, Profiles};

#[test]
fn a_reservation_is_not_placed_on_a_node_with_no_pod_slot_left() {
    let mut sim = Sim::new(Profiles::default_profile());
    sim.node(
        node("n1")
            .alloc("cpu", "8")
            .alloc("memory", "8Gi")
            .alloc("pods", "1")
            .build(),
    );
    sim.pod(pod("p1").req("cpu", "1").build());
    sim.settle();
    assert_eq!(sim.bound("p1").as_deref(), Some("n1"));
    sim.reservation(
        reservation("r1")
            .req("cpu", "1")
            .owner_label("app", "g")
            .build(),
    );
    sim.settle();
    assert_ne!(sim.phase("r1"), "Available", "placed on a full node");
    let on_n1 = sim.s().node("n1").map(|n| n.pods.len());
    assert_eq!(on_n1, Some(1), "the node holds p1 alone");
}
