//! Reservations as gang members (Koordinator's lightweight gang annotations, which its
//! Coscheduling reads from the reserve pod): placed all or nothing through Permit, written
//! Available only together, and then used by the workload's pods as owners.

use berth_api::gang::{
    ANNOTATION_GANG_MIN_NUM, ANNOTATION_GANG_MODE, ANNOTATION_GANG_NAME, ANNOTATION_GANG_WAIT_TIME,
    GANG_MODE_NON_STRICT,
};

use crate::reservation::testkit::{reservation, Sim};
use crate::testing::{node, pod};
use crate::time::SECOND;

/// A cluster of two nodes of `cpu` CPUs each.
fn cluster(cpu: &str) -> Sim {
    let mut s = Sim::default();
    for n in ["n1", "n2"] {
        s.node(node(n).alloc("cpu", cpu).alloc("memory", "64Gi").build());
    }
    s
}

/// Creates 8 one-CPU Reservations owned by `app=job`, in one gang of 8.
fn reserve_gang(s: &mut Sim, strict: bool) {
    for i in 1..=8 {
        let mut r = reservation(&format!("r{i}"))
            .req("cpu", "1")
            .owner_label("app", "job")
            .annotation(ANNOTATION_GANG_NAME, "job-reserve")
            .annotation(ANNOTATION_GANG_MIN_NUM, "8");
        if !strict {
            r = r
                .annotation(ANNOTATION_GANG_MODE, GANG_MODE_NON_STRICT)
                .annotation(ANNOTATION_GANG_WAIT_TIME, "30s");
        }
        s.d.apply(crate::object::Object::Reservation(std::sync::Arc::new(
            r.build(),
        )));
    }
    s.settle();
}

fn waiting(s: &Sim) -> usize {
    (1..=8)
        .filter(|i| {
            s.s().waits_at_permit(&crate::reservation::reserve_pod::key(
                "default",
                &format!("r{i}"),
            ))
        })
        .count()
}

#[test]
fn a_gang_of_8_reservations_on_room_for_6_places_none_and_holds_nothing() {
    let mut s = cluster("3");
    reserve_gang(&mut s, true);
    for i in 1..=8 {
        let r = s.res(&format!("r{i}"));
        assert_eq!(s.phase(&format!("r{i}")), "Pending", "r{i}");
        assert!(
            r.status
                .as_ref()
                .and_then(|st| st.node_name.as_ref())
                .is_none(),
            "r{i} written with a node"
        );
    }
    assert_eq!(waiting(&s), 0);
    s.pod(pod("big").req("cpu", "3").build());
    assert!(
        s.bound("big").is_some(),
        "the gang that could not form holds room"
    );
}

#[test]
fn reservations_waiting_at_permit_hold_their_room_unwritten_until_the_time_out() {
    let mut s = cluster("3");
    reserve_gang(&mut s, false);
    assert_eq!(waiting(&s), 6, "six fit and wait at Permit");
    for i in 1..=8 {
        assert_eq!(s.phase(&format!("r{i}")), "Pending", "r{i} written early");
    }
    s.pod(pod("big").req("cpu", "3").build());
    assert_eq!(
        s.bound("big"),
        None,
        "the waiting reservations hold their room"
    );
    s.advance(30 * SECOND);
    // The members retried may wait again on the room `big` left: still none is written.
    assert!(s.bound("big").is_some(), "the time-out gave the room back");
    for i in 1..=8 {
        assert_eq!(s.phase(&format!("r{i}")), "Pending", "r{i}");
    }
    let said = s.d.events().iter().any(|e| {
        e.reason == "FailedScheduling"
            && e.message == "rejected due to timeout after waiting 30s at plugin Coscheduling"
    });
    assert!(said, "the time-out is said on the reservations");
}

#[test]
fn a_gang_of_8_reservations_on_room_for_8_is_available_and_its_pods_land_in_it() {
    let mut s = cluster("4");
    reserve_gang(&mut s, true);
    for i in 1..=8 {
        assert_eq!(s.phase(&format!("r{i}")), "Available", "r{i}");
    }
    for i in 1..=8 {
        s.pod(
            pod(&format!("w{i}"))
                .req("cpu", "1")
                .label("app", "job")
                .build(),
        );
    }
    let mut used: Vec<String> = (1..=8)
        .map(|i| s.allocated_from(&format!("w{i}")).unwrap_or_default())
        .collect();
    used.sort();
    let want: Vec<String> = (1..=8).map(|i| format!("r{i}")).collect();
    assert_eq!(used, want, "each pod in its own reservation");
}
