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

use std::borrow::Cow;
use std::collections::BTreeMap;

use berth_api::dra::{
    AllocationResult, Device, DeviceAllocationResult, DeviceRequestAllocationResult, ResourceClaim,
};
use berth_api::k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
};

use super::cel::{self, Selector};
use super::index::{DeviceIndex, Verdicts};
use super::reserved::Held;
use super::{DeviceId, DraState};
use crate::model::selector::Labels;
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

pub use super::index::Candidate;

/// The devices one node reaches: positions in the [`DeviceIndex`]'s devices, in upstream's
/// order. Borrowed from the index in the common case (only node-local slices).
#[derive(Debug)]
pub struct NodeDevices<'a> {
    /// The index the positions point into.
    pub index: &'a DeviceIndex,
    /// The positions.
    pub reached: Cow<'a, [u32]>,
}

impl NodeDevices<'_> {
    /// How many devices the node reaches.
    pub fn len(&self) -> usize {
        self.reached.len()
    }

    /// Whether the node reaches none.
    pub fn is_empty(&self) -> bool {
        self.reached.is_empty()
    }

    /// The `k`-th device the node reaches.
    pub fn get(&self, k: usize) -> &Candidate {
        &self.index.devices()[self.reached[k] as usize]
    }

    /// The devices, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Candidate> + '_ {
        self.reached
            .iter()
            .map(|&p| &self.index.devices()[p as usize])
    }
}

/// The devices `node` reaches, in upstream's order. Only the newest generation of each
/// pool counts.
pub fn node_devices<'a>(state: &'a DraState, node: &str, labels: &Labels) -> NodeDevices<'a> {
    let index = state.index();
    NodeDevices {
        index,
        reached: index.reached(node, labels),
    }
}

/// [`node_devices`], as owned candidates.
pub fn candidates(state: &DraState, node: &str, labels: &Labels) -> Vec<Candidate> {
    node_devices(state, node, labels).iter().cloned().collect()
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

/// Buffers the search reuses from one node to the next (the per-node path allocates nothing
/// once they have grown to the cluster's shape).
#[derive(Default)]
struct Scratch {
    /// Per device the node reaches: its CEL value, built on the first verdict not known.
    values: Vec<Option<::cel::objects::Value>>,
    /// The verdicts of the alternative's selectors being matched.
    verdicts: Vec<Verdicts>,
    /// Matching devices (node-local positions) of every alternative, back to back.
    matches: Vec<u32>,
    /// Per alternative slot: its range in `matches`.
    ranges: Vec<(u32, u32)>,
    /// (claim, request, first alternative slot) in search order.
    units: Vec<(usize, usize, usize)>,
    /// Per device the node reaches: placed in this search.
    used: Vec<bool>,
    /// Devices placed, in order.
    placed: Vec<Placed>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// Appends to `out` the devices (node-local positions) one alternative's selectors select,
/// in order. Verdicts the index remembers are not evaluated again; a selector's compile
/// error or a runtime error is the first one met, device by device, selector by selector.
fn matching(
    alt: &Alternative,
    devices: &NodeDevices<'_>,
    values: &mut [Option<::cel::objects::Value>],
    verdicts: &mut Vec<Verdicts>,
    out: &mut Vec<u32>,
) -> Result<(), Failure> {
    verdicts.clear();
    // Only compiled selectors have verdicts: the search stops at the first that is not.
    for (sel, _) in &alt.selectors {
        if let Ok(sel) = sel {
            verdicts.push(devices.index.verdicts(sel.expression()));
        }
    }
    for (k, value) in values.iter_mut().enumerate().take(devices.len()) {
        let pos = devices.reached[k];
        let mut ok = true;
        for ((sel, label), known) in alt.selectors.iter().zip(verdicts.iter()) {
            let sel = sel.as_ref().map_err(|e| Failure::Error(e.clone()))?;
            let selected = match known.get(pos) {
                Some(v) => v,
                None => {
                    let c = devices.get(k);
                    let value =
                        value.get_or_insert_with(|| cel::device_value(&c.id.driver, c.device()));
                    match sel.matches(value) {
                        Ok(v) => {
                            known.set(pos, v);
                            v
                        }
                        Err(e) => {
                            return Err(Failure::Error(format!("{label}: CEL runtime error: {e}")))
                        }
                    }
                }
            };
            if !selected {
                ok = false;
                break;
            }
        }
        // A selector that did not compile, after those that selected the device: its error.
        if ok && verdicts.len() < alt.selectors.len() {
            if let Some((Err(e), _)) = alt.selectors.iter().find(|(s, _)| s.is_err()) {
                return Err(Failure::Error(e.clone()));
            }
        }
        if ok {
            out.push(k as u32);
        }
    }
    Ok(())
}

/// One device placed by the search.
#[derive(Debug, Clone, Copy)]
struct Placed {
    claim: usize,
    request: usize,
    /// The alternative (index in the request's).
    alt: usize,
    /// Node-local position.
    cand: usize,
    admin: bool,
}

struct Search<'a> {
    plans: &'a [ClaimPlan],
    devices: &'a NodeDevices<'a>,
    taken: &'a BTreeMap<DeviceId, ObjectKey>,
    /// Per device the node reaches, how reservations hold it (empty: none holds any).
    held: &'a [Held],
    scratch: &'a mut Scratch,
    steps: usize,
}

impl Search<'_> {
    fn free(&self, cand: usize, admin: bool) -> bool {
        let foreign = self.held.get(cand) == Some(&Held::Foreign);
        !self.scratch.used[cand]
            && (admin || (!foreign && !self.taken.contains_key(&self.devices.get(cand).id)))
    }

    fn alt_name(&self, claim: usize, request: usize, alt: usize) -> &str {
        &self.plans[claim].requests[request].alternatives[alt].name
    }

    fn constraints_ok(&self, claim: usize, request: usize, name: &str, cand: usize) -> bool {
        let plan = &self.plans[claim];
        let rname = &plan.requests[request].name;
        let c = self.devices.get(cand);
        plan.constraints
            .iter()
            .filter(|k| applies(k, rname, name))
            .all(|k| {
                let Some(mine) = attribute(&c.id.driver, c.device(), &k.attribute) else {
                    return false;
                };
                self.scratch
                    .placed
                    .iter()
                    .filter(|p| {
                        p.claim == claim
                            && applies(
                                k,
                                &plan.requests[p.request].name,
                                self.alt_name(p.claim, p.request, p.alt),
                            )
                    })
                    .all(|p| {
                        let o = self.devices.get(p.cand);
                        attribute(&o.id.driver, o.device(), &k.attribute) == Some(mine)
                    })
            })
    }

    fn place(&mut self, p: Placed) -> Result<(), Failure> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return Err(Failure::TimedOut);
        }
        self.scratch.used[p.cand] = true;
        self.scratch.placed.push(p);
        Ok(())
    }

    fn unplace(&mut self) {
        if let Some(p) = self.scratch.placed.pop() {
            self.scratch.used[p.cand] = false;
        }
    }

    /// Satisfies units `u..`: `Ok(true)` with every device placed.
    fn unit(&mut self, u: usize) -> Result<bool, Failure> {
        let Some(&(claim, request, _)) = self.scratch.units.get(u) else {
            return Ok(true);
        };
        let n_alts = self.plans[claim].requests[request].alternatives.len();
        for a in 0..n_alts {
            let alt = &self.plans[claim].requests[request].alternatives[a];
            let done = match alt.mode {
                Mode::ExactCount(n) => self.choose(u, a, n, 0)?,
                Mode::All => self.take_all(u, a)?,
            };
            if done {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The matching devices of unit `u`'s alternative `a`: its range in the buffer.
    fn range(&self, u: usize, a: usize) -> (usize, usize) {
        let (s, e) = self.scratch.ranges[self.scratch.units[u].2 + a];
        (s as usize, e as usize)
    }

    fn choose(&mut self, u: usize, a: usize, left: usize, from: usize) -> Result<bool, Failure> {
        if left == 0 {
            return self.unit(u + 1);
        }
        let (claim, request, _) = self.scratch.units[u];
        let admin = self.plans[claim].requests[request].alternatives[a].admin;
        let plans = self.plans;
        let name = plans[claim].requests[request].alternatives[a].name.as_str();
        let (start, end) = self.range(u, a);
        for k in start + from..end {
            let cand = self.scratch.matches[k] as usize;
            if !self.free(cand, admin) || !self.constraints_ok(claim, request, name, cand) {
                continue;
            }
            self.place(Placed {
                claim,
                request,
                alt: a,
                cand,
                admin,
            })?;
            if self.choose(u, a, left - 1, k + 1 - start)? {
                return Ok(true);
            }
            self.unplace();
        }
        Ok(false)
    }

    fn take_all(&mut self, u: usize, a: usize) -> Result<bool, Failure> {
        let (claim, request, _) = self.scratch.units[u];
        let admin = self.plans[claim].requests[request].alternatives[a].admin;
        let plans = self.plans;
        let name = plans[claim].requests[request].alternatives[a].name.as_str();
        let (start, end) = self.range(u, a);
        if start == end {
            return Ok(false);
        }
        let mut placed = 0;
        let mut ok = true;
        for k in start..end {
            let cand = self.scratch.matches[k] as usize;
            if !self.free(cand, admin) || !self.constraints_ok(claim, request, name, cand) {
                ok = false;
                break;
            }
            self.place(Placed {
                claim,
                request,
                alt: a,
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

/// Prepares the search's buffers for `plans` on `devices`: the matching devices of every
/// alternative (owners' reservation devices first), then searches.
fn search(
    plans: &[ClaimPlan],
    devices: &NodeDevices<'_>,
    taken: &BTreeMap<DeviceId, ObjectKey>,
    held: &[Held],
    scratch: &mut Scratch,
) -> Result<(), Failure> {
    let n = devices.len();
    scratch.values.clear();
    scratch.values.resize(n, None);
    scratch.matches.clear();
    scratch.ranges.clear();
    scratch.units.clear();
    scratch.used.clear();
    scratch.used.resize(n, false);
    scratch.placed.clear();
    let mine = held.contains(&Held::Mine);
    for (ci, plan) in plans.iter().enumerate() {
        for (ri, req) in plan.requests.iter().enumerate() {
            scratch.units.push((ci, ri, scratch.ranges.len()));
            for alt in &req.alternatives {
                let start = scratch.matches.len();
                matching(
                    alt,
                    devices,
                    &mut scratch.values,
                    &mut scratch.verdicts,
                    &mut scratch.matches,
                )?;
                if mine {
                    // Owners take their reservation's devices before free ones.
                    scratch.matches[start..]
                        .sort_by_key(|&c| held.get(c as usize) != Some(&Held::Mine));
                }
                scratch
                    .ranges
                    .push((start as u32, scratch.matches.len() as u32));
            }
        }
    }
    let mut search = Search {
        plans,
        devices,
        taken,
        held,
        scratch,
        steps: 0,
    };
    if search.unit(0)? {
        Ok(())
    } else {
        Err(Failure::NoFit)
    }
}

/// Whether every claim of `plans` can be allocated on the node of `devices`, avoiding
/// `taken` and the devices `held` (per device, or empty) says other reservations hold:
/// Filter's question, answered without building the allocation.
pub fn fits(
    plans: &[ClaimPlan],
    devices: &NodeDevices<'_>,
    taken: &BTreeMap<DeviceId, ObjectKey>,
    held: &[Held],
) -> Result<(), Failure> {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut scratch) => search(plans, devices, taken, held, &mut scratch),
        Err(_) => search(plans, devices, taken, held, &mut Scratch::default()),
    })
}

/// Allocates every claim of `plans` on `node` from `devices`, avoiding `taken` and the
/// devices `held` (per device, or empty) says other reservations hold; the devices of the
/// pod's own reservation are tried first.
pub fn allocate(
    plans: &[ClaimPlan],
    node: &str,
    devices: &NodeDevices<'_>,
    taken: &BTreeMap<DeviceId, ObjectKey>,
    held: &[Held],
) -> Result<Vec<AllocationResult>, Failure> {
    let mut scratch = Scratch::default();
    search(plans, devices, taken, held, &mut scratch)?;
    let mut out = Vec::with_capacity(plans.len());
    for (ci, plan) in plans.iter().enumerate() {
        let mine: Vec<&Placed> = scratch.placed.iter().filter(|p| p.claim == ci).collect();
        let cands: Vec<&Candidate> = mine.iter().map(|p| devices.get(p.cand)).collect();
        let results = mine
            .iter()
            .map(|p| {
                let c = devices.get(p.cand);
                DeviceRequestAllocationResult {
                    request: plan.requests[p.request].alternatives[p.alt].name.clone(),
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
            node_selector: node_selector(node, &cands),
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

/// One way of satisfying a request as the claim spells it (`exactly`, or one entry of
/// `firstAvailable`).
struct Spelled<'a> {
    name: String,
    class: &'a str,
    selectors: &'a [berth_api::dra::DeviceSelector],
    mode: Option<&'a str>,
    count: Option<i64>,
    admin: bool,
}

/// Compiles the selectors of `class`, then `selectors`, each with the label upstream's
/// messages name it by.
fn compiled(
    claim_name: &str,
    class: &str,
    class_selectors: &[berth_api::dra::DeviceSelector],
    selectors: &[berth_api::dra::DeviceSelector],
) -> Vec<(Result<Selector, String>, String)> {
    let labelled = class_selectors
        .iter()
        .enumerate()
        .map(|(i, s)| (s, format!("class {class}: selector #{i}")))
        .chain(
            selectors
                .iter()
                .enumerate()
                .map(|(i, s)| (s, format!("claim {claim_name}: selector #{i}"))),
        );
    labelled
        .map(|(s, label)| {
            let expr = s.cel.as_ref().map_or("", |c| c.expression.as_str());
            let compiled =
                cel::compile(expr).map_err(|e| format!("{label}: CEL compile error: {e}"));
            (compiled, label)
        })
        .collect()
}

/// A request's alternative: its class's and its own selectors compiled, its count checked.
fn alternative(
    claim_name: &str,
    spelled: Spelled<'_>,
    state: &DraState,
) -> Result<Alternative, String> {
    let Spelled {
        name,
        class,
        selectors,
        mode,
        count,
        admin,
    } = spelled;
    let Some(dc) = state.classes.get(class) else {
        return Err(format!(
            "request {name}: device class {class} does not exist"
        ));
    };
    let sels = compiled(claim_name, class, &dc.spec.selectors, selectors);
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
    Ok(Alternative {
        name,
        selectors: sels,
        mode,
        admin,
        class: class.to_string(),
    })
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
        if let Some(e) = &req.exactly {
            let spelled = Spelled {
                name: req.name.clone(),
                class: &e.device_class_name,
                selectors: &e.selectors,
                mode: e.allocation_mode.as_deref(),
                count: e.count,
                admin: e.admin_access == Some(true),
            };
            alternatives.push(alternative(&claim_name, spelled, state)?);
        } else if !req.first_available.is_empty() {
            for sub in &req.first_available {
                let spelled = Spelled {
                    name: format!("{}/{}", req.name, sub.name),
                    class: &sub.device_class_name,
                    selectors: &sub.selectors,
                    mode: sub.allocation_mode.as_deref(),
                    count: sub.count,
                    admin: false,
                };
                alternatives.push(alternative(&claim_name, spelled, state)?);
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
