//! Reservations of devices over random clusters: reservations placed (or failing their bind),
//! ended, claims of owners and non-owners allocated, binds failing, writes landing, and
//! restarts that rebuild everything from claims' status and reservations' annotations. After
//! every step: no device is allocated twice, no two active reservations hold one device, a
//! device an active reservation holds is allocated only to that reservation's owners, a
//! Restricted reservation's owner gets its devices only, and every allocation (of a claim
//! or a reservation) satisfies its claim, checked without the allocator's code.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_api::dra::{AllocationResult, ResourceClaimStatus};
use proptest::prelude::*;

use super::allocator::{allocate, node_devices, plan, plan_spec};
use super::reserved::{classify, Access, DeviceAllocated, HeldClaim};
use super::tests::{claim, key, satisfies, state, taken_once, Dev, Req};
use super::{devices_of, DeviceId, DraState};
use crate::model::selector::Labels;
use crate::object::{Kind, ObjectKey};

/// A reservation in the test's world.
#[derive(Debug, Clone)]
struct Res {
    name: String,
    uid: String,
    node: usize,
    restricted: bool,
    active: bool,
    /// The annotation shows its devices (PreBind's write landed).
    shown: bool,
}

fn allocate_on(
    s: &DraState,
    nodes: &[Vec<Dev>],
    p: &super::allocator::ClaimPlan,
    node: usize,
    access: &Access<'_>,
    res: &BTreeMap<String, Res>,
) -> Option<(AllocationResult, Vec<super::reserved::Held>)> {
    let labels = Labels::new();
    let name = format!("n{node}");
    let devices = node_devices(s, &name, &labels);
    let active = |n: &str, uid: &str| res.get(n).is_some_and(|r| r.active && r.uid == uid);
    let held = classify(s, devices.iter().map(|c| c.id.clone()), access, &active);
    let _ = nodes;
    let mut out = allocate(std::slice::from_ref(p), &name, &devices, s.taken(), &held).ok()?;
    let a = out.pop()?;
    let per_result = a
        .devices
        .results
        .iter()
        .map(|r| {
            devices
                .iter()
                .position(|c| *c.id.device == r.device && *c.id.pool == r.pool)
                .and_then(|i| held.get(i).copied())
                .unwrap_or(super::reserved::Held::Free)
        })
        .collect();
    Some((a, per_result))
}

/// Every invariant that holds between steps.
fn check(
    s: &DraState,
    res: &BTreeMap<String, Res>,
    owner_of: &BTreeMap<ObjectKey, Option<String>>,
) -> Result<(), TestCaseError> {
    prop_assert!(taken_once(s), "a device allocated twice");
    let mut held: BTreeMap<DeviceId, &str> = BTreeMap::new();
    for (name, hold) in s.holds() {
        let Some(r) = res.get(&**name).filter(|r| r.active && *r.uid == *hold.uid) else {
            continue;
        };
        for c in &hold.claims {
            for d in devices_of(&c.allocation) {
                prop_assert!(
                    held.insert(d.clone(), &r.name).is_none(),
                    "{d} held by two reservations"
                );
            }
        }
    }
    for (device, claim) in s.taken() {
        if let Some(r) = held.get(device) {
            let owner = owner_of.get(claim).cloned().flatten();
            prop_assert_eq!(
                owner.as_deref(),
                Some(*r),
                "{} held by {} given to {:?}",
                device,
                r,
                claim
            );
        }
    }
    Ok(())
}

fn reservation_claim(req: Req) -> berth_api::dra::ResourceClaimSpec {
    claim(0, req).spec
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn reserved_devices_go_to_owners_only_and_never_twice(
        nodes in prop::collection::vec(prop::collection::vec((0i64..3, any::<bool>()), 0..6), 1..4),
        reqs in prop::collection::vec((0usize..4, any::<bool>(), any::<bool>()), 12),
        // Steps: (kind, request, hint, flag, outcome).
        steps in prop::collection::vec((0u8..5, 0usize..12, 0usize..4, any::<bool>(), 0u8..3), 1..16),
    ) {
        let mut s = state(&nodes);
        let mut res: BTreeMap<String, Res> = BTreeMap::new();
        let mut owner_of: BTreeMap<ObjectKey, Option<String>> = BTreeMap::new();
        let mut next_claim = 0usize;
        for (kind, i, hint, flag, outcome) in steps {
            let req = reqs[i];
            match kind {
                // A reservation is placed: its template claim allocated on some node,
                // avoiding taken and held devices.
                0 => {
                    let name = format!("r{}", res.len());
                    let uid = format!("uid-{name}");
                    let k = ObjectKey::new(Kind::ResourceClaim, "default", &format!("{name}-gpu"));
                    let p = plan_spec(&k, &reservation_claim(req), &s).unwrap();
                    let order = (0..nodes.len()).map(|n| (n + hint) % nodes.len());
                    let mut placed = None;
                    for n in order {
                        if let Some((a, held)) = allocate_on(&s, &nodes, &p, n, &Access::default(), &res) {
                            prop_assert!(satisfies(&nodes, n, req, &a), "{name} {req:?} got {a:?}");
                            prop_assert!(held.iter().all(|h| *h == super::reserved::Held::Free));
                            placed = Some((n, a));
                            break;
                        }
                    }
                    let Some((n, a)) = placed else { continue };
                    let claims = vec![HeldClaim { name: "gpu".into(), allocation: a, classes: BTreeMap::new() }];
                    s.hold(name.as_str().into(), uid.as_str().into(), claims.clone());
                    let mut r = Res { name: name.clone(), uid: uid.clone(), node: n, restricted: flag, active: true, shown: false };
                    match outcome {
                        // Its bind fails: Unreserve.
                        0 => {
                            s.release(&name);
                            r.active = false;
                        }
                        // PreBind's annotation lands.
                        1 => {
                            let mut ann = BTreeMap::new();
                            ann.insert(
                                super::reserved::ANNOTATION_DEVICE_ALLOCATED.to_string(),
                                DeviceAllocated { claims }.encode(),
                            );
                            s.reservation_seen(&name, &uid, Some(&ann)).unwrap();
                            r.shown = true;
                        }
                        _ => {}
                    }
                    res.insert(name, r);
                }
                // A claim, of an owner of reservation `hint` (when `flag`) or a non-owner.
                1 | 2 => {
                    let c = claim(next_claim, req);
                    let k = key(next_claim);
                    next_claim += 1;
                    let owner = res
                        .values()
                        .nth(hint % res.len().max(1))
                        .filter(|_| flag)
                        .cloned();
                    owner_of.insert(k.clone(), owner.as_ref().map(|r| r.name.clone()));
                    s.claim_changed(k.clone(), Arc::new(c.clone()));
                    let p = plan(&k, &c, &s).unwrap();
                    for n in 0..nodes.len() {
                        let mine = owner.as_ref().filter(|r| r.node == n && r.active);
                        let access = Access {
                            mine: mine.map(|r| r.name.as_str()),
                            restricted: mine.is_some_and(|r| r.restricted),
                        };
                        let Some((a, held)) = allocate_on(&s, &nodes, &p, n, &access, &res) else {
                            continue;
                        };
                        prop_assert!(satisfies(&nodes, n, req, &a), "claim {k:?} {req:?} got {a:?}");
                        prop_assert!(!held.contains(&super::reserved::Held::Foreign));
                        let holds_any = s
                            .holds()
                            .get(access.mine.unwrap_or(""))
                            .is_some_and(|h| h.claims.iter().any(|c| devices_of(&c.allocation).next().is_some()));
                        if access.restricted && holds_any {
                            prop_assert!(
                                held.iter().all(|h| *h == super::reserved::Held::Mine),
                                "a Restricted reservation's owner got a free device: {a:?}"
                            );
                        }
                        match outcome {
                            0 => {
                                s.assume(k.clone(), "pod".into(), a);
                                s.forget(&k, "pod");
                            }
                            1 => {
                                let mut shown = c.clone();
                                shown.status = Some(ResourceClaimStatus { allocation: Some(a), ..Default::default() });
                                s.claim_changed(k.clone(), Arc::new(shown));
                            }
                            _ => s.assume(k.clone(), format!("pod-{}", k.name).into(), a),
                        }
                        break;
                    }
                }
                // A reservation ends (Succeeded, expired, deleted).
                3 => {
                    let name = res.keys().nth(hint % res.len().max(1)).cloned();
                    if let Some(r) = name.and_then(|n| res.get_mut(&n)) {
                        r.active = false;
                        if flag {
                            s.release(&r.name);
                        }
                    }
                }
                // A restart: claims' status and active reservations' annotations alone.
                _ => {
                    let mut fresh = state(&nodes);
                    for (k, c) in &s.claims {
                        if c.allocation().is_some() {
                            fresh.claim_changed(k.clone(), c.clone());
                        }
                    }
                    for r in res.values_mut() {
                        let shown = r.shown && r.active;
                        if let (true, Some(h)) = (shown, s.holds().get(r.name.as_str())) {
                            let mut ann = BTreeMap::new();
                            ann.insert(
                                super::reserved::ANNOTATION_DEVICE_ALLOCATED.to_string(),
                                DeviceAllocated { claims: h.claims.clone() }.encode(),
                            );
                            fresh.reservation_seen(&r.name, &r.uid, Some(&ann)).unwrap();
                        } else if r.active && !r.shown {
                            // Its write never landed: a restarted scheduler does not know
                            // it was placed, so it is pending again.
                            r.active = false;
                        }
                    }
                    s = fresh;
                }
            }
            check(&s, &res, &owner_of)?;
        }
        let devices: BTreeSet<_> = s.taken().keys().cloned().collect();
        prop_assert_eq!(devices.len(), s.taken().len());
    }
}

#[test]
fn a_malformed_annotation_holds_nothing_and_says_so() {
    let mut s = DraState::default();
    let mut ann = BTreeMap::new();
    ann.insert(
        super::reserved::ANNOTATION_DEVICE_ALLOCATED.to_string(),
        r#"{"claims":[],"claims":[]}"#.to_string(),
    );
    let err = s.reservation_seen("r", "u", Some(&ann)).unwrap_err();
    assert!(
        err.contains("reservation.berth.dev/device-allocated"),
        "{err}"
    );
    assert!(err.contains("duplicate"), "{err}");
    assert!(s.holds().is_empty());
    ann.insert(
        super::reserved::ANNOTATION_DEVICE_ALLOCATED.to_string(),
        r#"{"claims":[{"name":"gpu","allocation":{"devices":{"results":[{"request":"gpu","driver":"d","pool":"n0","device":"g0"}]}}}]}"#.to_string(),
    );
    s.reservation_seen("r", "u", Some(&ann)).unwrap();
    assert_eq!(s.holds().len(), 1);
    // A new incarnation without the annotation drops the old one's hold.
    s.reservation_seen("r", "u2", None).unwrap();
    assert!(s.holds().is_empty());
    assert!(!s.holds_any());
}
