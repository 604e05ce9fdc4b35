//! Which reservations matched the pod as an owner, and why each was not used: its phase
//! (pending, expired, succeeded), allocateOnce already consumed, the pod's reservation
//! affinity, the reservation's taints and `unschedulable`, exact match, the resources it
//! holds, its allocate policy, and its node being rejected for other reasons.

use std::collections::BTreeMap;

use serde::Serialize;

use berth_api::annotations::{is_true, LABEL_RESERVATION_IGNORED};
use berth_api::quantity::format_resource;
use berth_api::reservation::{condition, ReservationPhase};

use crate::cache::Cluster;
use crate::model::node::NodeIdx;
use crate::model::pod::PodInfo;
use crate::reservation::affinity::{self, Mismatch, PodReservationPrefs};
use crate::reservation::{allocate, ReservationInfo};
use crate::time::rfc3339;

use super::NodeExplanation;

/// What became of one owner-matched reservation, as a kind a tool can switch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ReservationVerdict {
    /// The pod would allocate from it.
    WouldUse,
    /// Usable, but another reservation on its node is taken first.
    Usable,
    /// Not placed yet (Pending) or waiting for room (pre-allocation).
    NotAvailable,
    /// Expired (Failed with `Ready=False/Expired`).
    Expired,
    /// Failed for another reason (its node was deleted...).
    Failed,
    /// Succeeded: its owners are done with it.
    Succeeded,
    /// `allocateOnce` and already allocated to another owner.
    AllocateOnceConsumed,
    /// The pod's reservation affinity (name, selector, terms) does not match it.
    Affinity,
    /// `spec.unschedulable`, or being deleted.
    Unschedulable,
    /// A taint the pod's reservation affinity does not tolerate.
    Taint,
    /// `exact-match-reservation` differs.
    NotExactMatch,
    /// Its allocate policy: `Restricted` resources must come from it entirely.
    Policy,
    /// It (with its node's free capacity) holds too little for the pod.
    Capacity,
    /// The pod requests none of its resources, or nothing of them is left.
    NotConsidered,
    /// Its node is rejected by other plugins.
    NodeRejected,
    /// The scheduler cannot read it.
    Invalid,
}

/// One reservation whose owners match the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationMatch {
    /// The reservation.
    pub name: String,
    /// Its phase.
    pub phase: String,
    /// Its node, once placed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What became of it.
    pub verdict: ReservationVerdict,
    /// Why, for a person.
    pub why: String,
}

/// The reservations whose owners match `pod`, in name order. `nodes`/`by_idx` are the
/// node verdicts already computed; `best` the nodes the pod would be placed on.
pub(super) fn matches(
    cx: &Cluster,
    pod: &PodInfo,
    nodes: &[NodeExplanation],
    by_idx: &BTreeMap<NodeIdx, usize>,
    best: &[String],
) -> Vec<ReservationMatch> {
    let store = &cx.reservations;
    let prefs = PodReservationPrefs::from_pod(pod);
    let ignored = is_true(Some(&pod.labels), LABEL_RESERVATION_IGNORED);
    let has_affinity = prefs.as_ref().is_ok_and(|p| p.affinity.is_some());
    let pod_mask = allocate::mask(&pod.requests);
    let mut out: Vec<(ReservationMatch, Option<(NodeIdx, &ReservationInfo)>)> = Vec::new();
    for r in store.iter() {
        if !r.owners.matches(pod) {
            continue;
        }
        let node_name = r.node_name.as_ref().map(|n| n.to_string());
        let mut m = ReservationMatch {
            name: r.name.to_string(),
            phase: r.phase.as_str().to_string(),
            node: node_name.clone(),
            verdict: ReservationVerdict::Usable,
            why: String::new(),
        };
        let mut set = |v: ReservationVerdict, why: String| {
            m.verdict = v;
            m.why = why;
        };
        let node = r.node.and_then(|i| cx.cache.node(i));
        if let Some(p) = &r.problem {
            set(ReservationVerdict::Invalid, p.clone());
        } else if ignored {
            set(
                ReservationVerdict::NotConsidered,
                format!(
                    "the pod is labelled {LABEL_RESERVATION_IGNORED}=true: it ignores reservations"
                ),
            );
        } else if let Err(e) = &prefs {
            set(ReservationVerdict::Affinity, e.clone());
        } else if let Some(v) = phase_verdict(r) {
            set(v.0, v.1);
        } else if r.allocate_once && !r.owner_pods.is_empty() {
            let owners: Vec<String> = r.owner_pods.keys().map(|k| k.to_string()).collect();
            set(
                ReservationVerdict::AllocateOnceConsumed,
                format!("allocateOnce: already allocated to {}", owners.join(", ")),
            );
        } else if let (Some(n), Ok(p)) = (node, &prefs) {
            match affinity::check(p, pod, r, &n.labels, &cx.cache.names) {
                Err(mismatch) => {
                    let (v, why) = mismatch_text(&mismatch, r);
                    set(v, why);
                }
                Ok(()) => {
                    if !allocate::considered(pod_mask, r, has_affinity) {
                        let why = if pod_mask & r.names == 0 {
                            "the pod requests none of the resources it holds".to_string()
                        } else {
                            "nothing is left of the resources the pod requests".to_string()
                        };
                        set(ReservationVerdict::NotConsidered, why);
                    } else {
                        let free = allocate::node_free(n);
                        let fit = allocate::fit(&pod.requests, &free, r);
                        let others = by_idx
                            .get(&n.idx)
                            .map(|&j| &nodes[j])
                            .map(|ne| {
                                ne.rejections
                                    .iter()
                                    .filter(|x| {
                                        x.plugin != crate::plugins::names::RESERVATION
                                            && x.plugin != crate::plugins::names::NODE_RESOURCES_FIT
                                    })
                                    .map(|x| format!("{}: {}", x.plugin, x.reasons.join(", ")))
                                    .collect::<Vec<_>>()
                            })
                            .unwrap_or_default();
                        if fit.reservation_short != 0 {
                            let parts: Vec<String> = allocate::bits(fit.reservation_short)
                                .map(|id| {
                                    let name = cx.cache.names.name(id);
                                    format!(
                                        "{name} requested {}, {} left in it",
                                        format_resource(name, pod.requests[id]),
                                        format_resource(name, r.usable()[id].max(0))
                                    )
                                })
                                .collect();
                            set(
                                ReservationVerdict::Policy,
                                format!(
                                    "allocatePolicy Restricted: the pod must take these from the reservation alone: {}",
                                    parts.join("; ")
                                ),
                            );
                        } else if fit.node_short != 0 {
                            let usable = r.usable();
                            let parts: Vec<String> = allocate::bits(fit.node_short)
                                .map(|id| {
                                    let name = cx.cache.names.name(id);
                                    let have = usable[id].max(0).saturating_add(free[id].max(0));
                                    format!(
                                        "{name} requested {}, {} left in it + {} free on the node = {} (short by {})",
                                        format_resource(name, pod.requests[id]),
                                        format_resource(name, usable[id].max(0)),
                                        format_resource(name, free[id].max(0)),
                                        format_resource(name, have),
                                        format_resource(name, pod.requests[id] - have)
                                    )
                                })
                                .collect();
                            set(ReservationVerdict::Capacity, parts.join("; "));
                        } else if !others.is_empty() {
                            set(
                                ReservationVerdict::NodeRejected,
                                format!("its node {} is rejected: {}", n.name, others.join("; ")),
                            );
                        } else {
                            set(ReservationVerdict::Usable, String::new());
                        }
                    }
                }
            }
        } else {
            set(
                ReservationVerdict::NotAvailable,
                "its node is not known to the scheduler".into(),
            );
        }
        let usable = (m.verdict == ReservationVerdict::Usable)
            .then(|| r.node.map(|i| (i, r)))
            .flatten();
        out.push((m, usable));
    }
    // On each node, the one the pod would take: the nomination order of the Reservation
    // plugin (order label, then most allocated after the pod, then earliest created); of
    // several reusable ones without an order, only the earliest created takes part.
    let mut chosen: BTreeMap<NodeIdx, (allocate::NominationKey, String)> = BTreeMap::new();
    let mut earliest_reusable: BTreeMap<NodeIdx, (i64, String)> = BTreeMap::new();
    for (_, u) in &out {
        if let Some((idx, r)) = u {
            if !r.allocate_once && r.order.is_none() {
                let k = (r.created, r.name.to_string());
                let e = earliest_reusable.entry(*idx).or_insert_with(|| k.clone());
                if k < *e {
                    *e = k;
                }
            }
        }
    }
    for (_, u) in &out {
        if let Some((idx, r)) = u {
            if !r.allocate_once
                && r.order.is_none()
                && earliest_reusable.get(idx).map(|e| &*e.1) != Some(&*r.name)
            {
                continue;
            }
            let key = allocate::nomination_key(r, allocate::score(&pod.requests, r));
            if chosen.get(idx).is_none_or(|(k, _)| key < *k) {
                chosen.insert(*idx, (key, r.name.to_string()));
            }
        }
    }
    let mut result = Vec::new();
    for (mut m, u) in out {
        if let Some((idx, r)) = u {
            let node = m.node.clone().unwrap_or_default();
            match chosen.get(&idx) {
                Some((_, name)) if **name == *r.name => {
                    if best.is_empty() || best.contains(&node) {
                        m.verdict = ReservationVerdict::WouldUse;
                        m.why = format!("the pod would allocate from it on {node}");
                    } else {
                        m.why = format!(
                            "usable on {node}, but {} scores higher for the pod",
                            best.join(", ")
                        );
                    }
                }
                Some((_, name)) => {
                    m.why = format!("usable, but {name} on the same node is taken first");
                }
                None => m.why = "usable".into(),
            }
        }
        result.push(m);
    }
    result.sort_by(|a, b| a.name.cmp(&b.name));
    result
}

/// A verdict from the phase alone, for reservations that are not Available.
fn phase_verdict(r: &ReservationInfo) -> Option<(ReservationVerdict, String)> {
    let ready_false = r
        .conditions
        .iter()
        .find(|c| c.type_ == condition::READY && c.status == condition::FALSE);
    match &r.phase {
        ReservationPhase::Available => {
            if r.terminating {
                return Some((
                    ReservationVerdict::Unschedulable,
                    "it is being deleted".into(),
                ));
            }
            None
        }
        ReservationPhase::Pending => Some((
            ReservationVerdict::NotAvailable,
            "Pending: not placed on a node yet".into(),
        )),
        ReservationPhase::Waiting => Some((
            ReservationVerdict::NotAvailable,
            "Waiting: placed, waiting for room (pre-allocation)".into(),
        )),
        ReservationPhase::Succeeded if r.allocate_once => {
            let mut owners: Vec<String> = r
                .obj
                .status
                .as_ref()
                .map(|s| s.current_owners.as_slice())
                .unwrap_or_default()
                .iter()
                .map(|o| {
                    format!(
                        "{}/{}",
                        o.namespace.as_deref().unwrap_or(""),
                        o.name.as_deref().unwrap_or("")
                    )
                })
                .collect();
            owners.extend(r.owner_pods.keys().map(|k| k.to_string()));
            owners.sort();
            owners.dedup();
            Some((
                ReservationVerdict::AllocateOnceConsumed,
                if owners.is_empty() {
                    "allocateOnce: already used by an owner (Succeeded)".to_string()
                } else {
                    format!(
                        "allocateOnce: already used by {} (Succeeded)",
                        owners.join(", ")
                    )
                },
            ))
        }
        ReservationPhase::Succeeded => Some((ReservationVerdict::Succeeded, "Succeeded".into())),
        ReservationPhase::Failed => match ready_false {
            Some(c) if c.reason == condition::REASON_EXPIRED => Some((
                ReservationVerdict::Expired,
                match r.expires_at {
                    Some(t) => format!("expired at {}", rfc3339(t)),
                    None => format!("expired: {}", c.message),
                },
            )),
            Some(c) => Some((
                ReservationVerdict::Failed,
                format!("Failed: {} {}", c.reason, c.message)
                    .trim()
                    .to_string(),
            )),
            None => Some((ReservationVerdict::Failed, "Failed".into())),
        },
        ReservationPhase::Other(p) => Some((
            ReservationVerdict::NotAvailable,
            format!("phase {p:?} is not one berth uses"),
        )),
    }
}

fn mismatch_text(m: &Mismatch, r: &ReservationInfo) -> (ReservationVerdict, String) {
    match m {
        Mismatch::Name => (
            ReservationVerdict::Affinity,
            "the pod's reservation affinity names another reservation".into(),
        ),
        Mismatch::Unschedulable if r.terminating => (
            ReservationVerdict::Unschedulable,
            "it is being deleted".into(),
        ),
        Mismatch::Unschedulable => (
            ReservationVerdict::Unschedulable,
            "spec.unschedulable is true (and the pod does not tolerate it)".into(),
        ),
        Mismatch::Taint(t) => (
            ReservationVerdict::Taint,
            format!("it has the taint {t}, which the pod's reservation affinity does not tolerate"),
        ),
        Mismatch::Affinity => (
            ReservationVerdict::Affinity,
            "the pod's reservation affinity (reservationSelector or required terms) does not match its labels".into(),
        ),
        Mismatch::NotExact => (
            ReservationVerdict::NotExactMatch,
            "exact-match-reservation: the pod's requests are not exactly what it holds".into(),
        ),
    }
}
