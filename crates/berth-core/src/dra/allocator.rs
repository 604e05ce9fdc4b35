//! The structured-parameters allocator (`k8s.io/dynamic-resource-allocation/structured`,
//! the stable variant): for one node, find devices for every request of every claim the
//! pod still needs allocated, or say there are none.
//!
//! Devices are the node's candidates (slices of the newest generation of each pool whose
//! `nodeName` is the node, whose `nodeSelector` selects it, or `allNodes`), taken in
//! (driver, pool, slice, device) order as upstream walks them. The search is upstream's:
//! claims in order, requests in order, for `firstAvailable` the first subrequest that can be
//! satisfied, devices tried in order with backtracking when a later request or a
//! `matchAttribute` constraint cannot be met. A device taken by any claim (shown or assumed)
//! is never offered, except to an admin-access request, which takes nothing. The search
//! gives up after [`MAX_STEPS`] device placements, as upstream's filter time-out does.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::dra::{
    AllocationResult, Device, DeviceAllocationResult, DeviceRequestAllocationResult, ResourceClaim,
    ResourceSlice,
};
use berth_api::k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
};

use super::cel::{self, Selector};
use super::reserved::Held;
use super::{DeviceId, DraState};
use crate::model::selector::{Labels, NodeSelectorMatcher};
use crate::object::ObjectKey;

/// How many device placements one Filter call may try (DRASchedulerFilterTimeout's
/// stand-in: deterministic where a wall-clock time-out is not).
pub const MAX_STEPS: usize = 200_000;

/// `resourceapi.AllocationResultsMaxSize`.
pub const MAX_RESULTS: i64 = 32;

/// How many devices an alternative asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Exactly this many.
    ExactCount(usize),
    /// Every matching device on the node (at least one).
    All,
}

/// One way of satisfying a request: the request itself, or one of its subrequests.
#[derive(Debug, Clone)]
pub struct Alternative {
    /// The name results carry (`req` or `req/sub`).
    pub name: String,
    /// The class's selectors, then the request's, each compiled or its compile error
    /// already worded as upstream words it.
    pub selectors: Vec<(Result<Selector, String>, String)>,
    /// How many devices.
    pub mode: Mode,
    /// Admin access: devices in use may be given, and are not taken.
    pub admin: bool,
    /// The DeviceClass.
    pub class: String,
}

/// A request: its alternatives in order.
#[derive(Debug, Clone)]
pub struct Request {
    /// The request's name.
    pub name: String,
    /// One for `exactly`, the subrequests for `firstAvailable`.
    pub alternatives: Vec<Alternative>,
}

/// `matchAttribute`: every device for `requests` (all when empty) has the same value.
#[derive(Debug, Clone)]
pub struct Constraint {
    /// Request names (`req` or `req/sub`).
    pub requests: Vec<String>,
    /// The fully qualified attribute.
    pub attribute: String,
}

/// A claim to allocate, as PreFilter prepared it.
#[derive(Debug, Clone)]
pub struct ClaimPlan {
    /// The claim.
    pub key: ObjectKey,
    /// Its requests.
    pub requests: Vec<Request>,
    /// Its constraints.
    pub constraints: Vec<Constraint>,
}

/// Why no allocation was found or the search stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No devices satisfy the claims on this node (`cannot allocate all claims`).
    NoFit,
    /// The search took too long (`timed out trying to allocate devices`).
    TimedOut,
    /// A selector failed: the claim or class is broken (a scheduling error).
    Error(String),
}

/// A device the node reaches.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Its identity.
    pub id: DeviceId,
    /// The slice it comes from.
    pub slice: Arc<ResourceSlice>,
    /// Its index in the slice.
    pub index: usize,
}

impl Candidate {
    /// The device.
    pub fn device(&self) -> &Device {
        &self.slice.spec.devices[self.index]
    }
}

fn slice_reaches(slice: &ResourceSlice, node: &str, labels: &Labels) -> bool {
    let s = &slice.spec;
    if s.node_name.as_deref() == Some(node) || s.all_nodes == Some(true) {
        return true;
    }
    s.node_selector
        .as_ref()
        .and_then(|sel| NodeSelectorMatcher::new(sel).ok())
        .is_some_and(|m| m.matches(node, labels))
}

fn device_reaches(device: &Device, node: &str, labels: &Labels) -> bool {
    if device.node_name.as_deref() == Some(node) || device.all_nodes == Some(true) {
        return true;
    }
    device
        .node_selector
        .as_ref()
        .and_then(|sel| NodeSelectorMatcher::new(sel).ok())
        .is_some_and(|m| m.matches(node, labels))
}

/// The devices `node` reaches, in upstream's order. Only the newest generation of each
/// pool counts; a pool is complete or not at all considered stale parts.
pub fn candidates(state: &DraState, node: &str, labels: &Labels) -> Vec<Candidate> {
    let mut newest: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for s in state.slices.values() {
        let g = newest
            .entry((&s.spec.driver, &s.spec.pool.name))
            .or_insert(s.spec.pool.generation);
        *g = (*g).max(s.spec.pool.generation);
    }
    let mut slices: Vec<&Arc<ResourceSlice>> = state
        .slices
        .values()
        .filter(|s| {
            newest.get(&(&*s.spec.driver, &*s.spec.pool.name)) == Some(&s.spec.pool.generation)
        })
        .collect();
    slices.sort_by(|a, b| {
        (&a.spec.driver, &a.spec.pool.name, &a.metadata.name).cmp(&(
            &b.spec.driver,
            &b.spec.pool.name,
            &b.metadata.name,
        ))
    });
    let mut out = Vec::new();
    for slice in slices {
        let per_device = slice.spec.per_device_node_selection == Some(true);
        if !per_device && !slice_reaches(slice, node, labels) {
            continue;
        }
        for (index, device) in slice.spec.devices.iter().enumerate() {
            if per_device && !device_reaches(device, node, labels) {
                continue;
            }
            out.push(Candidate {
                id: DeviceId {
                    driver: slice.spec.driver.as_str().into(),
                    pool: slice.spec.pool.name.as_str().into(),
                    device: device.name.as_str().into(),
                },
                slice: slice.clone(),
                index,
            });
        }
    }
    out
}

/// The value of a fully qualified attribute on a device of `driver`.
pub fn attribute<'a>(
    driver: &str,
    device: &'a Device,
    qualified: &str,
) -> Option<&'a berth_api::dra::DeviceAttribute> {
    if let Some(a) = device.attributes.get(qualified) {
        return Some(a);
    }
    match qualified.split_once('/') {
        Some((domain, id)) if domain == driver => device.attributes.get(id),
        _ => None,
    }
}

fn applies(constraint: &Constraint, request: &str, alternative: &str) -> bool {
    constraint.requests.is_empty()
        || constraint
            .requests
            .iter()
            .any(|r| r == request || r == alternative)
}

/// The matching candidates of one alternative.
fn matching(
    alt: &Alternative,
    cands: &[Candidate],
    values: &mut [Option<::cel::objects::Value>],
) -> Result<Vec<usize>, Failure> {
    let mut out = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        let mut ok = true;
        for (sel, label) in &alt.selectors {
            let sel = sel.as_ref().map_err(|e| Failure::Error(e.clone()))?;
            let value =
                values[i].get_or_insert_with(|| cel::device_value(&c.id.driver, c.device()));
            match sel.matches(value) {
                Ok(true) => {}
                Ok(false) => {
                    ok = false;
                    break;
                }
                Err(e) => return Err(Failure::Error(format!("{label}: CEL runtime error: {e}"))),
            }
        }
        if ok {
            out.push(i);
        }
    }
    Ok(out)
}

/// One device placed by the search.
#[derive(Debug, Clone)]
struct Placed {
    claim: usize,
    request: usize,
    name: String,
    cand: usize,
    admin: bool,
}

struct Search<'a> {
    plans: &'a [ClaimPlan],
    cands: &'a [Candidate],
    taken: &'a BTreeMap<DeviceId, ObjectKey>,
    /// Per candidate, how reservations hold it (empty: none holds any).
    held: &'a [Held],
    /// Per claim, request, alternative: matching candidates.
    matches: Vec<Vec<Vec<Vec<usize>>>>,
    units: Vec<(usize, usize)>,
    used: Vec<bool>,
    placed: Vec<Placed>,
    steps: usize,
}

impl Search<'_> {
    fn free(&self, cand: usize, admin: bool) -> bool {
        let foreign = self.held.get(cand) == Some(&Held::Foreign);
        !self.used[cand] && (admin || (!foreign && !self.taken.contains_key(&self.cands[cand].id)))
    }

    fn constraints_ok(&self, claim: usize, request: usize, name: &str, cand: usize) -> bool {
        let plan = &self.plans[claim];
        let rname = &plan.requests[request].name;
        let c = &self.cands[cand];
        plan.constraints
            .iter()
            .filter(|k| applies(k, rname, name))
            .all(|k| {
                let Some(mine) = attribute(&c.id.driver, c.device(), &k.attribute) else {
                    return false;
                };
                self.placed
                    .iter()
                    .filter(|p| {
                        p.claim == claim && applies(k, &plan.requests[p.request].name, &p.name)
                    })
                    .all(|p| {
                        let o = &self.cands[p.cand];
                        attribute(&o.id.driver, o.device(), &k.attribute) == Some(mine)
                    })
            })
    }

    fn place(&mut self, p: Placed) -> Result<(), Failure> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return Err(Failure::TimedOut);
        }
        self.used[p.cand] = true;
        self.placed.push(p);
        Ok(())
    }

    fn unplace(&mut self) {
        if let Some(p) = self.placed.pop() {
            self.used[p.cand] = false;
        }
    }

    /// Satisfies units `u..`: `Ok(true)` with every device placed.
    fn unit(&mut self, u: usize) -> Result<bool, Failure> {
        let Some(&(claim, request)) = self.units.get(u) else {
            return Ok(true);
        };
        let n_alts = self.plans[claim].requests[request].alternatives.len();
        for a in 0..n_alts {
            let alt = &self.plans[claim].requests[request].alternatives[a];
            let (mode, admin, name) = (alt.mode, alt.admin, alt.name.clone());
            let done = match mode {
                Mode::ExactCount(n) => self.choose(u, a, &name, admin, n, 0)?,
                Mode::All => self.take_all(u, a, &name, admin)?,
            };
            if done {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn choose(
        &mut self,
        u: usize,
        a: usize,
        name: &str,
        admin: bool,
        left: usize,
        from: usize,
    ) -> Result<bool, Failure> {
        if left == 0 {
            return self.unit(u + 1);
        }
        let (claim, request) = self.units[u];
        let n = self.matches[claim][request][a].len();
        for k in from..n {
            let cand = self.matches[claim][request][a][k];
            if !self.free(cand, admin) || !self.constraints_ok(claim, request, name, cand) {
                continue;
            }
            let p = Placed {
                claim,
                request,
                name: name.to_string(),
                cand,
                admin,
            };
            self.place(p)?;
            if self.choose(u, a, name, admin, left - 1, k + 1)? {
                return Ok(true);
            }
            self.unplace();
        }
        Ok(false)
    }

    fn take_all(&mut self, u: usize, a: usize, name: &str, admin: bool) -> Result<bool, Failure> {
        let (claim, request) = self.units[u];
        let all = self.matches[claim][request][a].clone();
        if all.is_empty() {
            return Ok(false);
        }
        let mut placed = 0;
        let mut ok = true;
        for cand in all {
            if !self.free(cand, admin) || !self.constraints_ok(claim, request, name, cand) {
                ok = false;
                break;
            }
            self.place(Placed {
                claim,
                request,
                name: name.to_string(),
                cand,
                admin,
            })?;
            placed += 1;
        }
        if ok && self.unit(u + 1)? {
            return Ok(true);
        }
        for _ in 0..placed {
            self.unplace();
        }
        Ok(false)
    }
}

/// The node selector an allocation on `node` carries: the node itself when any device is
/// local to it, else the first slice's selector, else none (every node).
fn node_selector(node: &str, devices: &[&Candidate]) -> Option<NodeSelector> {
    let local = devices.iter().any(|c| {
        c.slice.spec.node_name.is_some()
            || (c.slice.spec.per_device_node_selection == Some(true)
                && c.device().node_name.is_some())
    });
    if local {
        return Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_fields: Some(vec![NodeSelectorRequirement {
                    key: "metadata.name".into(),
                    operator: "In".into(),
                    values: Some(vec![node.to_string()]),
                }]),
                ..Default::default()
            }],
        });
    }
    devices
        .iter()
        .find_map(|c| c.slice.spec.node_selector.clone())
}

/// Allocates every claim of `plans` on `node` from `cands`, avoiding `taken` and the
/// devices `held` (per candidate, or empty) says other reservations hold; the devices of the
/// pod's own reservation are tried first.
pub fn allocate(
    plans: &[ClaimPlan],
    node: &str,
    cands: &[Candidate],
    taken: &BTreeMap<DeviceId, ObjectKey>,
    held: &[Held],
) -> Result<Vec<AllocationResult>, Failure> {
    let mut values = vec![None; cands.len()];
    let mut matches = Vec::with_capacity(plans.len());
    let mut units = Vec::new();
    for (ci, plan) in plans.iter().enumerate() {
        let mut per_request = Vec::with_capacity(plan.requests.len());
        for (ri, req) in plan.requests.iter().enumerate() {
            let mut per_alt = Vec::with_capacity(req.alternatives.len());
            for alt in &req.alternatives {
                let mut m = matching(alt, cands, &mut values)?;
                if held.contains(&Held::Mine) {
                    // Owners take their reservation's devices before free ones.
                    m.sort_by_key(|&c| held.get(c) != Some(&Held::Mine));
                }
                per_alt.push(m);
            }
            per_request.push(per_alt);
            units.push((ci, ri));
        }
        matches.push(per_request);
    }
    let mut search = Search {
        plans,
        cands,
        taken,
        held,
        matches,
        units,
        used: vec![false; cands.len()],
        placed: Vec::new(),
        steps: 0,
    };
    if !search.unit(0)? {
        return Err(Failure::NoFit);
    }
    let mut out = Vec::with_capacity(plans.len());
    for ci in 0..plans.len() {
        let mine: Vec<&Placed> = search.placed.iter().filter(|p| p.claim == ci).collect();
        let devices: Vec<&Candidate> = mine.iter().map(|p| &cands[p.cand]).collect();
        let results = mine
            .iter()
            .map(|p| {
                let c = &cands[p.cand];
                DeviceRequestAllocationResult {
                    request: p.name.clone(),
                    driver: c.id.driver.to_string(),
                    pool: c.id.pool.to_string(),
                    device: c.id.device.to_string(),
                    admin_access: p.admin.then_some(true),
                    ..Default::default()
                }
            })
            .collect();
        out.push(AllocationResult {
            devices: DeviceAllocationResult {
                results,
                config: Vec::new(),
            },
            node_selector: node_selector(node, &devices),
            allocation_timestamp: None,
        });
    }
    Ok(out)
}

/// Builds a claim's plan: its requests' alternatives with compiled selectors (the class's
/// first). `Err`: the message PreFilter rejects the pod with (a missing class, a count
/// out of range).
pub fn plan(key: &ObjectKey, claim: &ResourceClaim, state: &DraState) -> Result<ClaimPlan, String> {
    plan_spec(key, &claim.spec, state)
}

/// [`plan`] for a claim's spec alone (a reservation's template claim, which has no object).
pub fn plan_spec(
    key: &ObjectKey,
    spec: &berth_api::dra::ResourceClaimSpec,
    state: &DraState,
) -> Result<ClaimPlan, String> {
    let claim_name = format!("{}/{}", key.namespace, key.name);
    let mut requests = Vec::new();
    for req in &spec.devices.requests {
        let mut alternatives = Vec::new();
        let mut add = |name: String,
                       class: &str,
                       selectors: &[berth_api::dra::DeviceSelector],
                       mode: Option<&str>,
                       count: Option<i64>,
                       admin: bool|
         -> Result<(), String> {
            let Some(dc) = state.classes.get(class) else {
                return Err(format!(
                    "request {name}: device class {class} does not exist"
                ));
            };
            let mut sels = Vec::new();
            for (i, s) in dc.spec.selectors.iter().enumerate() {
                let expr = s.cel.as_ref().map_or("", |c| c.expression.as_str());
                let label = format!("class {class}: selector #{i}");
                let compiled =
                    cel::compile(expr).map_err(|e| format!("{label}: CEL compile error: {e}"));
                sels.push((compiled, label));
            }
            for (i, s) in selectors.iter().enumerate() {
                let expr = s.cel.as_ref().map_or("", |c| c.expression.as_str());
                let label = format!("claim {claim_name}: selector #{i}");
                let compiled =
                    cel::compile(expr).map_err(|e| format!("{label}: CEL compile error: {e}"));
                sels.push((compiled, label));
            }
            let mode = match mode.unwrap_or("ExactCount") {
                "All" => Mode::All,
                "ExactCount" => {
                    let n = count.unwrap_or(1);
                    if !(1..=MAX_RESULTS).contains(&n) {
                        return Err(format!(
                            "claim {claim_name}, request {name}: exact count {n} is too large"
                        ));
                    }
                    Mode::ExactCount(n as usize)
                }
                other => {
                    return Err(format!(
                        "claim {claim_name}, request {name}: unsupported count mode {other}"
                    ))
                }
            };
            alternatives.push(Alternative {
                name,
                selectors: sels,
                mode,
                admin,
                class: class.to_string(),
            });
            Ok(())
        };
        if let Some(e) = &req.exactly {
            add(
                req.name.clone(),
                &e.device_class_name,
                &e.selectors,
                e.allocation_mode.as_deref(),
                e.count,
                e.admin_access == Some(true),
            )?;
        } else if !req.first_available.is_empty() {
            for sub in &req.first_available {
                add(
                    format!("{}/{}", req.name, sub.name),
                    &sub.device_class_name,
                    &sub.selectors,
                    sub.allocation_mode.as_deref(),
                    sub.count,
                    false,
                )?;
            }
        } else {
            return Err(format!(
                "resource claim {claim_name}, request {}: unknown request type",
                req.name
            ));
        }
        requests.push(Request {
            name: req.name.clone(),
            alternatives,
        });
    }
    let constraints = spec
        .devices
        .constraints
        .iter()
        .filter_map(|c| {
            c.match_attribute.as_ref().map(|a| Constraint {
                requests: c.requests.clone(),
                attribute: a.clone(),
            })
        })
        .collect();
    Ok(ClaimPlan {
        key: key.clone(),
        requests,
        constraints,
    })
}
