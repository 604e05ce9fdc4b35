//! The allocator's invariants over random clusters: no device is ever allocated twice
//! (across pods, bursts, failed binds that forget an assumption, and restarts that rebuild
//! the state from claims' status alone), and every allocation satisfies its selectors,
//! counts and `matchAttribute` constraints, checked here without the allocator's code.

use std::collections::BTreeSet;
use std::sync::Arc;

use berth_api::dra::{
    AllocationResult, CelDeviceSelector, Device, DeviceAttribute, DeviceClaim, DeviceClass,
    DeviceClassSpec, DeviceConstraint, DeviceRequest, DeviceSelector, ExactDeviceRequest,
    ResourceClaim, ResourceClaimSpec, ResourceClaimStatus, ResourcePool, ResourceSlice,
    ResourceSliceSpec,
};
use proptest::prelude::*;

use super::allocator::{allocate, node_devices, plan};
use super::{devices_of, DraState};
use crate::model::selector::Labels;
use crate::object::{Kind, ObjectKey};

/// A random device: (root, kind a?).
pub(super) type Dev = (i64, bool);

/// A random claim: count (0 = All), class "a" only?, same root?
pub(super) type Req = (usize, bool, bool);

pub(super) fn state(nodes: &[Vec<Dev>]) -> DraState {
    let mut s = DraState::default();
    for (n, devs) in nodes.iter().enumerate() {
        let mut slice = ResourceSlice::default();
        slice.metadata.name = Some(format!("n{n}"));
        slice.spec = ResourceSliceSpec {
            driver: "d".into(),
            pool: ResourcePool {
                name: format!("n{n}"),
                generation: 1,
                resource_slice_count: 1,
            },
            node_name: Some(format!("n{n}")),
            devices: devs
                .iter()
                .enumerate()
                .map(|(i, (root, a))| {
                    let mut d = Device {
                        name: format!("g{i}"),
                        ..Default::default()
                    };
                    d.attributes.insert(
                        "d/root".into(),
                        DeviceAttribute {
                            int: Some(*root),
                            ..Default::default()
                        },
                    );
                    d.attributes.insert(
                        "kind".into(),
                        DeviceAttribute {
                            string: Some(if *a { "a" } else { "b" }.into()),
                            ..Default::default()
                        },
                    );
                    d
                })
                .collect(),
            ..Default::default()
        };
        s.slice_applied(Arc::new(slice));
    }
    for (name, expr) in [
        ("any", "device.driver == \"d\""),
        ("a", "device.attributes[\"d\"].kind == \"a\""),
    ] {
        let mut c = DeviceClass::default();
        c.metadata.name = Some(name.into());
        c.spec = DeviceClassSpec {
            selectors: vec![DeviceSelector {
                cel: Some(CelDeviceSelector {
                    expression: expr.into(),
                }),
            }],
            ..Default::default()
        };
        s.classes.insert(name.into(), Arc::new(c));
    }
    s
}

pub(super) fn claim(i: usize, (count, only_a, same_root): Req) -> ResourceClaim {
    let mut c = ResourceClaim::default();
    c.metadata.name = Some(format!("c{i}"));
    c.metadata.namespace = Some("default".into());
    c.spec = ResourceClaimSpec {
        devices: DeviceClaim {
            requests: vec![DeviceRequest {
                name: "r".into(),
                exactly: Some(ExactDeviceRequest {
                    device_class_name: if only_a { "a" } else { "any" }.into(),
                    allocation_mode: Some(if count == 0 { "All" } else { "ExactCount" }.into()),
                    count: (count > 0).then_some(count as i64),
                    ..Default::default()
                }),
                first_available: Vec::new(),
            }],
            constraints: if same_root {
                vec![DeviceConstraint {
                    requests: Vec::new(),
                    match_attribute: Some("d/root".into()),
                    distinct_attribute: None,
                }]
            } else {
                Vec::new()
            },
            config: Vec::new(),
        },
    };
    c
}

/// Checks one allocation against the claim and the node's devices, independently.
pub(super) fn satisfies(nodes: &[Vec<Dev>], node: usize, req: Req, a: &AllocationResult) -> bool {
    let devs = &nodes[node];
    let picked: Vec<Dev> = a
        .devices
        .results
        .iter()
        .map(|r| {
            assert_eq!(r.pool, format!("n{node}"));
            let i: usize = r.device[1..].parse().unwrap();
            devs[i]
        })
        .collect();
    let (count, only_a, same_root) = req;
    let count_ok = if count == 0 {
        let matching = devs.iter().filter(|d| !only_a || d.1).count();
        picked.len() == matching && matching > 0
    } else {
        picked.len() == count
    };
    let class_ok = picked.iter().all(|d| !only_a || d.1);
    let root_ok = !same_root || picked.windows(2).all(|w| w[0].0 == w[1].0);
    count_ok && class_ok && root_ok
}

pub(super) fn key(i: usize) -> ObjectKey {
    ObjectKey::new(Kind::ResourceClaim, "default", &format!("c{i}"))
}

pub(super) fn taken_once(s: &DraState) -> bool {
    let mut seen = BTreeSet::new();
    let shown = s.claims.values().filter_map(|c| c.allocation());
    let assumed = s.assumed.values().map(|a| &a.allocation);
    shown
        .chain(assumed)
        .flat_map(devices_of)
        .all(|d| seen.insert(d))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn no_device_twice_and_every_allocation_satisfies_its_claim(
        nodes in prop::collection::vec(prop::collection::vec((0i64..3, any::<bool>()), 0..6), 1..4),
        reqs in prop::collection::vec((0usize..4, any::<bool>(), any::<bool>()), 1..12),
        ops in prop::collection::vec(0u8..4, 12),
    ) {
        let mut s = state(&nodes);
        let labels = Labels::new();
        for (i, &req) in reqs.iter().enumerate() {
            let c = claim(i, req);
            s.claim_changed(key(i), Arc::new(c.clone()));
            let p = plan(&key(i), &c, &s).unwrap();
            for n in 0..nodes.len() {
                let node = format!("n{n}");
                let devices = node_devices(&s, &node, &labels);
                let Ok(mut out) = allocate(std::slice::from_ref(&p), &node, &devices, s.taken(), &[]) else {
                    continue;
                };
                let a = out.pop().unwrap();
                prop_assert!(satisfies(&nodes, n, req, &a), "claim {i} {req:?} got {a:?}");
                match ops[i] {
                    // A failed bind: the assumption is forgotten.
                    0 => {
                        s.assume(key(i), "pod".into(), a);
                        s.forget(&key(i), "pod");
                    }
                    // The write lands: the claim shows the allocation.
                    1 => {
                        let mut shown = c.clone();
                        shown.status = Some(ResourceClaimStatus {
                            allocation: Some(a),
                            ..Default::default()
                        });
                        s.claim_changed(key(i), Arc::new(shown));
                    }
                    // Still in flight.
                    _ => s.assume(key(i), format!("pod{i}").into(), a),
                }
                break;
            }
            prop_assert!(taken_once(&s));
        }
        // A restart: only what claims show survives, and the set rebuilt from it is the same.
        let mut restarted = state(&nodes);
        for (k, c) in &s.claims {
            restarted.claim_changed(k.clone(), c.clone());
        }
        prop_assert!(taken_once(&restarted));
        let shown: BTreeSet<_> = s
            .claims
            .values()
            .filter_map(|c| c.allocation())
            .flat_map(devices_of)
            .collect();
        let rebuilt: BTreeSet<_> = restarted.taken().keys().cloned().collect();
        prop_assert_eq!(shown, rebuilt);
    }
}
