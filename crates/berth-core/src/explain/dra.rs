//! Devices, per node: which request of which claim found no device there and why.
//!
//! kube-scheduler's DynamicResources says only `cannot allocate all claims`. Here, for every
//! request (each `firstAvailable` subrequest on its own) of every claim the pod still needs
//! allocated: how many devices the node reaches, how many each selector (the DeviceClass's,
//! then the request's) excluded, which of the selected devices another claim has taken and
//! which another reservation holds, and how many are left against how many the request
//! wants; for each `matchAttribute` constraint, how many of the devices left share one value.
//! Read-only, like the rest of `explain`: selectors are evaluated here, not remembered.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cache::Cluster;
use crate::dra::allocator::{self, Alternative, ClaimPlan, Mode, NodeDevices};
use crate::dra::cel;
use crate::dra::reserved::Held;
use crate::framework::CycleState;
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::plugins::dynamicresources::DynamicResources;

/// A selector and how many of the node's devices it excluded (devices an earlier selector
/// had excluded are not counted again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Excluded {
    /// `class NAME: selector #i` or `claim NS/NAME: selector #i`, as upstream's errors name it.
    pub selector: String,
    /// Devices it excluded.
    pub devices: usize,
}

/// A selected device someone else has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unavailable {
    /// `driver/pool/device`.
    pub device: String,
    /// The claim that has it (`namespace/name`), or the reservation holding it.
    pub by: String,
}

/// One request (or `firstAvailable` subrequest) on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestDevices {
    /// `req` or `req/sub`.
    pub request: String,
    /// Its DeviceClass.
    pub class: String,
    /// How many devices it wants (`All`: every selected one).
    pub wants: String,
    /// Devices the node reaches.
    pub reached: usize,
    /// Per selector that excluded any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<Excluded>,
    /// A selector that could not be evaluated (the scheduling error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Selected devices other claims have taken.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub taken: Vec<Unavailable>,
    /// Selected devices other reservations hold (or, for an owner of a Restricted
    /// reservation, devices outside it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<Unavailable>,
    /// Selected devices left for it.
    pub free: usize,
    /// Enough are left (by count alone: constraints and the other requests may still
    /// stand in the way).
    pub enough: bool,
}

/// A `matchAttribute` constraint on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConstraintDevices {
    /// The attribute.
    pub attribute: String,
    /// The requests it binds (all when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<String>,
    /// Devices the bound requests want together (their first alternative's count).
    pub wants: usize,
    /// The most devices left to them that share one value of the attribute.
    pub largest_group: usize,
}

/// One claim on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimDevices {
    /// `namespace/name` (for a reservation: `reservation-entry`).
    pub claim: String,
    /// Per request alternative.
    pub requests: Vec<RequestDevices>,
    /// Per `matchAttribute` constraint.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<ConstraintDevices>,
}

/// The claims still to allocate, on one node DynamicResources rejected.
pub fn detail(
    cx: &Cluster,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Vec<ClaimDevices> {
    let Some(plans) = state
        .dynamic_resources
        .as_deref()
        .map(|s| s.plans())
        .filter(|p| !p.is_empty())
    else {
        return Vec::new();
    };
    let devices = allocator::node_devices(&cx.cache.dra, &node.name, &node.labels);
    let access = DynamicResources::access(cx, state, pod, node, false);
    let held = DynamicResources::held(cx, &devices, &access);
    plans
        .iter()
        .map(|plan| claim(cx, plan, &devices, &held))
        .collect()
}

fn claim(cx: &Cluster, plan: &ClaimPlan, devices: &NodeDevices<'_>, held: &[Held]) -> ClaimDevices {
    let mut requests = Vec::new();
    // Per alternative name: the devices left to it (node-local positions).
    let mut left: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for req in &plan.requests {
        for alt in &req.alternatives {
            let (detail, free) = request(cx, alt, devices, held);
            left.insert(alt.name.clone(), free);
            requests.push(detail);
        }
    }
    let constraints = plan
        .constraints
        .iter()
        .map(|k| {
            let bound = |name: &str| k.requests.is_empty() || k.requests.iter().any(|r| r == name);
            let mut wants = 0;
            let mut pool: Vec<usize> = Vec::new();
            for req in plan.requests.iter().filter(|r| bound(&r.name)) {
                let Some(alt) = req
                    .alternatives
                    .iter()
                    .find(|a| bound(&req.name) || bound(&a.name))
                else {
                    continue;
                };
                wants += match alt.mode {
                    Mode::ExactCount(n) => n,
                    Mode::All => left.get(&alt.name).map_or(0, Vec::len),
                };
                for &p in left.get(&alt.name).into_iter().flatten() {
                    if !pool.contains(&p) {
                        pool.push(p);
                    }
                }
            }
            let mut groups: BTreeMap<String, usize> = BTreeMap::new();
            for &p in &pool {
                let c = devices.get(p);
                if let Some(v) = allocator::attribute(&c.id.driver, c.device(), &k.attribute) {
                    *groups.entry(format!("{v:?}")).or_insert(0) += 1;
                }
            }
            ConstraintDevices {
                attribute: k.attribute.clone(),
                requests: k.requests.clone(),
                wants,
                largest_group: groups.values().copied().max().unwrap_or(0),
            }
        })
        .collect();
    ClaimDevices {
        claim: format!("{}/{}", plan.key.namespace, plan.key.name),
        requests,
        constraints,
    }
}

/// One alternative on the node: its detail, and the devices left to it.
fn request(
    cx: &Cluster,
    alt: &Alternative,
    devices: &NodeDevices<'_>,
    held: &[Held],
) -> (RequestDevices, Vec<usize>) {
    let mut excluded: Vec<Excluded> = alt
        .selectors
        .iter()
        .map(|(_, label)| Excluded {
            selector: label.clone(),
            devices: 0,
        })
        .collect();
    let mut error = None;
    let mut selected = Vec::new();
    'devices: for k in 0..devices.len() {
        let c = devices.get(k);
        let value = cel::device_value(&c.id.driver, c.device());
        for (i, (sel, label)) in alt.selectors.iter().enumerate() {
            let verdict = match sel {
                Ok(sel) => sel
                    .matches(&value)
                    .map_err(|e| format!("{label}: CEL runtime error: {e}")),
                Err(e) => Err(e.clone()),
            };
            match verdict {
                Ok(true) => {}
                Ok(false) => {
                    excluded[i].devices += 1;
                    continue 'devices;
                }
                Err(e) => {
                    error.get_or_insert(e);
                    continue 'devices;
                }
            }
        }
        selected.push(k);
    }
    excluded.retain(|e| e.devices > 0);
    let (mut taken, mut held_by, mut free) = (Vec::new(), Vec::new(), Vec::new());
    for &k in &selected {
        let c = devices.get(k);
        if alt.admin {
            free.push(k);
        } else if let Some(by) = cx.cache.dra.holder(&c.id) {
            taken.push(Unavailable {
                device: c.id.to_string(),
                by: format!("{}/{}", by.namespace, by.name),
            });
        } else if held.get(k) == Some(&Held::Foreign) {
            let by = cx.cache.dra.held_by(&c.id).first().map_or_else(
                || "its reservation (Restricted)".to_string(),
                |r| format!("reservation {r}"),
            );
            held_by.push(Unavailable {
                device: c.id.to_string(),
                by,
            });
        } else {
            free.push(k);
        }
    }
    let (wants, enough) = match alt.mode {
        Mode::ExactCount(n) => (n.to_string(), free.len() >= n),
        Mode::All => (
            "All".to_string(),
            !selected.is_empty() && free.len() == selected.len(),
        ),
    };
    let detail = RequestDevices {
        request: alt.name.clone(),
        class: alt.class.clone(),
        wants,
        reached: devices.len(),
        excluded,
        error,
        taken,
        held: held_by,
        free: free.len(),
        enough,
    };
    (detail, free)
}

/// The detail as lines of text, under a node of `berth explain`'s output.
pub fn lines(claims: &[ClaimDevices]) -> Vec<String> {
    let mut out = Vec::new();
    for c in claims {
        for r in &c.requests {
            let mut why = Vec::new();
            for e in &r.excluded {
                why.push(format!("{} excluded {}", e.selector, e.devices));
            }
            if let Some(e) = &r.error {
                why.push(e.clone());
            }
            if !r.taken.is_empty() {
                let list: Vec<String> = r
                    .taken
                    .iter()
                    .map(|t| format!("{} by {}", t.device, t.by))
                    .collect();
                why.push(format!("taken: {}", list.join(", ")));
            }
            if !r.held.is_empty() {
                let list: Vec<String> = r
                    .held
                    .iter()
                    .map(|t| format!("{} by {}", t.device, t.by))
                    .collect();
                why.push(format!("held: {}", list.join(", ")));
            }
            out.push(format!(
                "claim {} request {} (class {}): wants {}, {} left of {} reached{}{}",
                c.claim,
                r.request,
                r.class,
                r.wants,
                r.free,
                r.reached,
                if r.enough { "" } else { ", not enough" },
                if why.is_empty() {
                    String::new()
                } else {
                    format!("; {}", why.join("; "))
                }
            ));
        }
        for k in &c.constraints {
            out.push(format!(
                "claim {} matchAttribute {}{}: wants {} sharing a value, at most {} do",
                c.claim,
                k.attribute,
                if k.requests.is_empty() {
                    String::new()
                } else {
                    format!(" over {}", k.requests.join(", "))
                },
                k.wants,
                k.largest_group
            ));
        }
    }
    out
}
