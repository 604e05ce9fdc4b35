//! Property test of reservation-backed preemption (issue 13) under random priorities,
//! requests, arrivals, deletions and time steps, binds and watch events delivered in
//! shuffled order. After every operation, once settled:
//! - no pod was evicted for a preemptor that then could not be placed on the freed node:
//!   every preemptor that still exists is bound to the node its victims left, unless a
//!   preemptor of higher priority took that node over since (which expires the first one's
//!   hold), or the hold's TTL ran out first;
//! - no reservation of preemption outlives its preemptor by more than its TTL, nor is still
//!   in use (Pending, Waiting, Available) later than its TTL after its creation.

use std::collections::BTreeMap;

use berth_api::reservation::ReservationPhase;
use berth_core::testing::{node, pod, DriverConfig, FakeDriver, Profiles};
use berth_core::{Config, Kind, Object, ObjectKey};
use proptest::prelude::*;

/// The default `reservationTTL` of DefaultPreemption.
const TTL: i64 = 5 * 60 * 1000;
const PODS: usize = 8;
const START: i64 = 1_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    AddPod {
        slot: usize,
        cpu_m: u32,
        priority: i32,
        never: bool,
    },
    DeletePod(usize),
    Advance(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..PODS, 500u32..2001, 0i32..4, prop::bool::weighted(0.15))
            .prop_map(|(slot, cpu_m, priority, never)| Op::AddPod {
                slot, cpu_m, priority: priority * 100, never,
            }),
        2 => (0..PODS).prop_map(Op::DeletePod),
        1 => (1u32..400).prop_map(Op::Advance),
    ]
}

/// A preemption seen in the preemptor's `Preempted` event.
#[derive(Debug, Clone)]
struct Preemption {
    uid: String,
    name: String,
    node: String,
    priority: i32,
    at: i64,
}

struct World {
    d: FakeDriver,
    events_seen: usize,
    preemptions: Vec<Preemption>,
    /// Pod UID → the last time the pod was seen to exist.
    last_alive: BTreeMap<String, i64>,
    priorities: BTreeMap<String, i32>,
}

impl World {
    fn new(seed: u64) -> Self {
        let cfg = DriverConfig {
            seed,
            refuse_pct: 0,
            lose_answer_pct: 0,
            shuffle: true,
        };
        let config = Config {
            seed,
            ..Config::default()
        };
        let mut d = FakeDriver::new(Profiles::default_profile(), config, cfg, START);
        for (name, cpu) in [("n0", "2"), ("n1", "3")] {
            d.apply(Object::Node(
                node(name).alloc("cpu", cpu).alloc("memory", "8Gi").build(),
            ));
        }
        d.settle();
        Self {
            d,
            events_seen: 0,
            preemptions: Vec::new(),
            last_alive: BTreeMap::new(),
            priorities: BTreeMap::new(),
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::AddPod {
                slot,
                cpu_m,
                priority,
                never,
            } => {
                let key = ObjectKey::pod("default", &format!("p{slot}"));
                if self.d.get(&key).is_some() {
                    return;
                }
                let mut p = pod(&format!("p{slot}"))
                    .req("cpu", &format!("{cpu_m}m"))
                    .req("memory", "100Mi")
                    .priority(priority);
                if never {
                    p = p.spec("preemptionPolicy", serde_json::json!("Never"));
                }
                self.d.apply(Object::Pod(p.build()));
            }
            Op::DeletePod(slot) => {
                self.d
                    .delete(&ObjectKey::pod("default", &format!("p{slot}")));
            }
            Op::Advance(s) => self.d.advance(i64::from(s) * 1000),
        }
        self.d.settle();
        self.observe();
    }

    /// Reads the preemptors' new `Preempted` events and which pods exist now.
    fn observe(&mut self) {
        let now = self.d.now();
        for p in self.d.of_kind(Kind::Pod) {
            let Object::Pod(p) = p else { continue };
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let priority = p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
            self.last_alive.insert(uid.clone(), now);
            self.priorities.insert(uid, priority);
        }
        for e in &self.d.events()[self.events_seen..] {
            // The preemptor's own event: "Preempted N pod(s) on node X for ns/name: ...".
            // (A victim's says "Preempted by pod ...".)
            if e.reason != "Preempted" || e.message.starts_with("Preempted by ") {
                continue;
            }
            let Some(node) = e
                .message
                .split(" on node ")
                .nth(1)
                .and_then(|r| r.split(' ').next())
            else {
                continue;
            };
            self.preemptions.push(Preemption {
                uid: e.uid.clone(),
                name: e.involved.name.to_string(),
                node: node.to_string(),
                priority: self.priorities.get(&e.uid).copied().unwrap_or(0),
                at: now,
            });
        }
        self.events_seen = self.d.events().len();
    }
}

fn check(w: &World) -> Result<(), TestCaseError> {
    let now = w.d.now();
    let mut live: BTreeMap<String, Option<String>> = BTreeMap::new();
    for o in w.d.of_kind(Kind::Pod) {
        let Object::Pod(p) = o else { continue };
        live.insert(
            p.metadata.uid.clone().unwrap_or_default(),
            p.spec.as_ref().and_then(|s| s.node_name.clone()),
        );
    }
    for (i, p) in w.preemptions.iter().enumerate() {
        let Some(bound) = live.get(&p.uid) else {
            continue;
        };
        // Taken over by a preemptor of higher priority on the same node since.
        let superseded = w.preemptions[i + 1..]
            .iter()
            .any(|q| q.node == p.node && q.priority > p.priority && q.uid != p.uid);
        // Preempted again (its hold expired, or it chose another node later).
        let again = w.preemptions[i + 1..].iter().any(|q| q.uid == p.uid);
        if superseded || again || now > p.at + TTL {
            continue;
        }
        prop_assert_eq!(
            bound.as_deref(),
            Some(p.node.as_str()),
            "preemptor {} ({}) evicted pods on {} at {} and is not bound there",
            &p.name,
            &p.uid,
            &p.node,
            p.at
        );
    }
    for o in w.d.of_kind(Kind::Reservation) {
        let Object::Reservation(r) = o else { continue };
        let name = r.metadata.name.clone().unwrap_or_default();
        if !name.starts_with("preempt-") {
            continue;
        }
        let phase = r
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let in_use = matches!(
            phase,
            ReservationPhase::Pending | ReservationPhase::Waiting | ReservationPhase::Available
        );
        let created = r
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now, |t| t.0.as_millisecond());
        // meta_time truncates to the second.
        prop_assert!(
            !in_use || now <= created + TTL + 1000,
            "reservation {} still {:?} at {}, created at {}",
            &name,
            phase,
            now,
            created
        );
        let owner = r
            .spec
            .owners
            .iter()
            .find_map(|o| o.object.as_ref().and_then(|o| o.uid.clone()))
            .unwrap_or_default();
        if !live.contains_key(&owner) {
            let gone_since = w.last_alive.get(&owner).copied().unwrap_or(START);
            prop_assert!(
                now <= gone_since + TTL,
                "reservation {} outlives its preemptor {} (last seen at {}) at {}",
                &name,
                &owner,
                gone_since,
                now
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000),
        ..ProptestConfig::default()
    })]

    #[test]
    fn preemptors_get_what_they_freed_and_their_holds_do_not_linger(
        seed in any::<u64>(),
        ops in prop::collection::vec(op(), 1..30),
    ) {
        let mut w = World::new(seed);
        for op in &ops {
            w.apply(op);
            check(&w)?;
        }
    }
}

#[test]
fn the_oracle_sees_a_preemptor_left_pending() {
    // A preemption whose preemptor is not on the freed node must trip the check, so that
    // the property above cannot pass vacuously.
    let mut w = World::new(0);
    for (slot, priority) in [(0, 0), (1, 0)] {
        w.apply(&Op::AddPod {
            slot,
            cpu_m: 2000,
            priority,
            never: false,
        });
    }
    w.apply(&Op::AddPod {
        slot: 2,
        cpu_m: 2000,
        priority: 300,
        never: false,
    });
    assert!(!w.preemptions.is_empty(), "p2 preempts: {:?}", w.d.events());
    assert!(check(&w).is_ok());
    let p = &mut w.preemptions[0];
    p.node = if p.node == "n0" { "n1" } else { "n0" }.to_string();
    assert!(check(&w).is_err());
}

#[test]
fn a_higher_priority_pod_does_not_take_the_room_of_the_first_victim_gone() {
    // Minimized from the property above. p6 evicts p3 and p5 on n0; its hold waits
    // (Waiting holds nothing) until both are gone. p0 (priority 300, preemptionPolicy
    // Never) fits once p3 alone is gone, and took that room; the hold then never had room.
    let mut w = World::new(0);
    for (slot, cpu_m, priority, never) in [
        (2, 500, 0, false),
        (3, 553, 0, false),
        (4, 1553, 200, false),
        (5, 553, 0, false),
        (0, 948, 300, true),
        (6, 1448, 100, false),
    ] {
        w.apply(&Op::AddPod {
            slot,
            cpu_m,
            priority,
            never,
        });
    }
    assert_eq!(w.preemptions.len(), 1, "{:?}", w.d.events());
    assert_eq!(w.d.bound("p6").as_deref(), Some("n0"));
    assert_eq!(w.d.bound("p0"), None);
    check(&w).expect("invariants hold");
}
