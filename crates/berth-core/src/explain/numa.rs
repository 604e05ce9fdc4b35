//! NUMA detail for one node: the Topology Manager policy, whether the scheduler's view of the
//! node is usable, and per zone what the request being aligned wanted, what the scheduler
//! believed was available (the published NRT minus the pods it placed since), what the node
//! published, and what the zone lacked.

use serde::Serialize;

use crate::cache::Cluster;
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::numa::types::{is_host_level, is_numa_affine};
use crate::numa::{
    filter_node, NodeNumaView, NumaReject, NumaZones, QosClass, Resources, TmPolicy, TmScope,
    UnusableReason,
};
use crate::plugins::numatopology::{explain as plugin_explain, pod_numa_request};

use super::Shortfall;

/// One resource in one zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ZoneResource {
    /// The resource.
    pub resource: String,
    /// What the request being aligned asks for.
    pub requested: i64,
    /// Available as the scheduler believes it (published minus pods placed since; in
    /// container scope also minus the pod's earlier containers); `None`: the zone does not
    /// list it.
    pub believed: Option<i64>,
    /// Available as the node's NRT published it.
    pub published: Option<i64>,
    /// How much the zone lacks for the request (0 when it has enough, or when the resource
    /// is not pinned for this pod).
    pub lacks: i64,
}

/// One NUMA zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ZoneDetail {
    /// NUMA id (`node-<id>`).
    pub id: u8,
    /// The request fits the zone.
    pub fits: bool,
    /// Per requested resource.
    pub resources: Vec<ZoneResource>,
}

/// NUMA detail for one node with topology data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NumaDetail {
    /// `single-numa-node`, `restricted`, `best-effort` or `none`.
    pub policy: &'static str,
    /// `container` or `pod`.
    pub scope: &'static str,
    /// Whether the scheduler can use the node's data now, and if not why.
    pub view: String,
    /// The data may be stale (pods reserved since its NRT, a newer NRT held back), and why
    /// the last resync did not refresh it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
    /// The plugin's own per-node explanation of its rejection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejection: Option<String>,
    /// What the zones are compared with: `pod` (pod scope), or a container.
    pub aligning: String,
    /// The zones, in NRT order.
    pub zones: Vec<ZoneDetail>,
}

impl NumaDetail {
    /// The zone that lacks least (by the sum of its lacks as fractions of what it
    /// published), as shortfalls; `None` when no zone could be made to fit by resources.
    pub(super) fn smallest_lack(&self) -> Option<Vec<Shortfall>> {
        let mut best: Option<(f64, Vec<Shortfall>)> = None;
        for z in &self.zones {
            if z.resources
                .iter()
                .any(|r| r.lacks > 0 && r.believed.is_none())
            {
                continue;
            }
            let lacking: Vec<Shortfall> = z
                .resources
                .iter()
                .filter(|r| r.lacks > 0)
                .map(|r| Shortfall {
                    resource: r.resource.clone(),
                    scope: format!("numa zone {}", z.id),
                    requested: r.requested,
                    free: r.believed.unwrap_or(0),
                    short: r.lacks,
                    capacity: r.published.unwrap_or(0),
                })
                .collect();
            if lacking.is_empty() {
                continue;
            }
            let w: f64 = lacking
                .iter()
                .map(|s| {
                    if s.capacity > 0 {
                        s.short as f64 / s.capacity as f64
                    } else {
                        1.0 + s.short as f64
                    }
                })
                .sum();
            if best.as_ref().is_none_or(|(bw, _)| w < *bw) {
                best = Some((w, lacking));
            }
        }
        best.map(|(_, v)| v)
    }
}

fn policy_name(p: TmPolicy) -> &'static str {
    match p {
        TmPolicy::None => "none",
        TmPolicy::BestEffort => "best-effort",
        TmPolicy::Restricted => "restricted",
        TmPolicy::SingleNumaNode => "single-numa-node",
    }
}

/// The NUMA detail of `node` for `pod`, when the node has topology data.
pub(super) fn detail(cx: &Cluster, pod: &PodInfo, node: &NodeInfo) -> Option<NumaDetail> {
    let cache = cx.numa.cache();
    let topology = cache.topology(&node.name)?;
    let request = pod_numa_request(pod).ok()?;
    let view = cx.numa.view(&node.name);
    let alloc = |r: &str| {
        cx.cache
            .names
            .get(r)
            .is_some_and(|id| node.allocatable[id] > 0)
    };
    let verdict = filter_node(view, &request, &alloc);
    let (view_text, believed) = view_text(&view);
    let stale = stale_reason(cx, &node.name);
    let spec = pod.pod.spec.as_ref();
    let cname = |list: Option<&[berth_api::k8s_openapi::api::core::v1::Container]>, i: usize| {
        list.and_then(|l| l.get(i))
            .map(|c| c.name.clone())
            .unwrap_or_default()
    };
    // What the zones are compared with: the failing container (after the pod's earlier
    // containers took their zones), or the whole pod.
    let qos = request.qos();
    let mut taken: Vec<(u8, Resources)> = Vec::new();
    let (aligning, want): (String, Resources) = match &verdict {
        Err(NumaReject::InitContainer { index, .. }) => (
            format!(
                "init container {:?} (index {index})",
                cname(spec.and_then(|s| s.init_containers.as_deref()), *index)
            ),
            request
                .init_containers()
                .get(*index)
                .map(|c| c.requests.clone())
                .unwrap_or_default(),
        ),
        Err(NumaReject::Container { index, .. }) => {
            if let Some(zones) = believed {
                for c in request.containers().iter().take(*index) {
                    if let Some(id) = first_fit(zones, &taken, c, qos) {
                        taken.push((id, c.clone()));
                    }
                }
            }
            (
                format!(
                    "container {:?} (index {index})",
                    cname(spec.map(|s| s.containers.as_slice()), *index)
                ),
                request
                    .containers()
                    .get(*index)
                    .cloned()
                    .unwrap_or_default(),
            )
        }
        _ => ("pod".to_string(), request.effective().clone()),
    };
    let zones = zone_details(&topology.zones, &want, believed, &taken, qos);
    Some(NumaDetail {
        policy: policy_name(topology.tm.policy),
        scope: match topology.tm.scope {
            TmScope::Container => "container",
            TmScope::Pod => "pod",
        },
        view: view_text,
        stale,
        rejection: plugin_explain(cx, pod, node),
        aligning,
        zones,
    })
}

/// The scheduler's view of the node for a person, and the zones it believes in when usable.
fn view_text<'a>(view: &NodeNumaView<'a>) -> (String, Option<&'a NumaZones>) {
    match view {
        NodeNumaView::NoTopology => ("no topology data".to_string(), None),
        NodeNumaView::Unusable(UnusableReason::ForeignPods) => (
            "unusable until resynced: pods bound by another scheduler".to_string(),
            None,
        ),
        NodeNumaView::Unusable(UnusableReason::ReservationInFlight) => (
            "unusable until resynced: a NUMA reservation is in flight".to_string(),
            None,
        ),
        NodeNumaView::Ready { zones, .. } => ("usable".to_string(), Some(*zones)),
    }
}

/// Why the node's topology waits for a resync, when it does.
fn stale_reason(cx: &Cluster, node: &str) -> Option<String> {
    let cache = cx.numa.cache();
    cache.is_stale(node).then(|| {
        match cache.resync_check(node) {
            Some(crate::numa::ResyncCheck::Mismatch) => {
                crate::plugins::numatopology::REASON_FINGERPRINT_MISMATCH
            }
            Some(crate::numa::ResyncCheck::NoFingerprint) => {
                crate::plugins::numatopology::REASON_NO_FINGERPRINT
            }
            None => crate::plugins::numatopology::REASON_RESYNC_PENDING,
        }
        .to_string()
    })
}

/// Per published zone, what `want` asks of each resource against what the scheduler
/// believes is left (minus what the pod's earlier containers `taken`) and what was
/// published.
fn zone_details(
    published: &NumaZones,
    want: &Resources,
    believed: Option<&NumaZones>,
    taken: &[(u8, Resources)],
    qos: QosClass,
) -> Vec<ZoneDetail> {
    let mut zones = Vec::new();
    for z in published.zones() {
        let mut resources = Vec::new();
        for (name, amount) in want.iter() {
            if amount <= 0 {
                continue;
            }
            let n = name.as_str();
            let pub_avail = published.available(z.id, n);
            let believed_avail = believed.and_then(|b| b.available(z.id, n)).map(|v| {
                v - taken
                    .iter()
                    .filter(|(id, _)| *id == z.id)
                    .map(|(_, r)| r.get(n).unwrap_or(0))
                    .sum::<i64>()
            });
            let pinned = qos == QosClass::Guaranteed || !is_numa_affine(n);
            let listed_anywhere = published.has_resource(n);
            let lacks = match believed_avail {
                _ if !pinned && listed_anywhere => 0,
                _ if !listed_anywhere && is_host_level(n) => 0,
                Some(v) => (amount - v).max(0),
                None => amount,
            };
            resources.push(ZoneResource {
                resource: n.to_string(),
                requested: amount,
                believed: believed_avail,
                published: pub_avail,
                lacks,
            });
        }
        zones.push(ZoneDetail {
            id: z.id,
            fits: resources.iter().all(|r| r.lacks == 0),
            resources,
        });
    }
    zones
}

/// The lowest NUMA id where every pinned resource of `req` fits, after `taken`.
fn first_fit(
    zones: &NumaZones,
    taken: &[(u8, Resources)],
    req: &Resources,
    qos: QosClass,
) -> Option<u8> {
    let mut ids: Vec<u8> = zones.zones().iter().map(|z| z.id).collect();
    ids.sort_unstable();
    ids.into_iter().find(|&id| {
        req.iter().all(|(name, amount)| {
            let n = name.as_str();
            if amount <= 0 || (qos != QosClass::Guaranteed && is_numa_affine(n)) {
                return true;
            }
            match zones.available(id, n) {
                None => !zones.has_resource(n),
                Some(v) => {
                    let used: i64 = taken
                        .iter()
                        .filter(|(t, _)| *t == id)
                        .map(|(_, r)| r.get(n).unwrap_or(0))
                        .sum();
                    v - used >= amount
                }
            }
        })
    })
}
