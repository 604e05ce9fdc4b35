//! NUMA-aware scheduling: the NodeResourceTopologyMatch plugin's domain logic, compatible
//! with scheduler-plugins and the node agents (NFD topology-updater, RTE).
//!
//! Pure domain code with its own compact inputs, independent of the scheduling framework:
//!
//! - [`types`]: resource names and integer amounts ([`Resources`]), per-zone availability
//!   ([`NumaZones`]), a pod's per-container requests ([`PodNumaRequest`]), the node's Topology
//!   Manager config ([`TopologyManagerConfig`]) and the conversion of a
//!   `berth_api::nrt::NodeResourceTopology` into a [`NodeTopology`].
//! - [`policy`]: the Filter ([`filter`]).
//! - [`mod@score`]: the Score strategies ([`score()`]).
//! - [`reserve_cache`]: the reserve ("overreserve") cache ([`ReserveCache`]), and
//!   [`filter_node`] / [`score_node`] that run filter/score through its per-node view.
//! - [`fingerprint`]: the pod-set fingerprint, byte-exact with the agents.
//! - [`args`]: `NodeResourceTopologyMatchArgs`, validation and defaults.
//! - [`verdict`]: a node's whole Filter answer as a small value ([`FilterVerdict`]).
//! - [`verdict_memo`]: the cache's per-node memory of verdicts and scores per pod shape.
//!
//! Typical flow: convert each NRT with [`NodeTopology::from_nrt`] and feed it to
//! [`ReserveCache::update_nrt`]; per pod and node, call [`filter_node`] on
//! [`ReserveCache::view`] (then [`ReserveCache::filtered_out`] / [`ReserveCache::filter_passed`],
//! or [`ReserveCache::filter_and_track`] for both), [`score_node`] likewise; on Reserve,
//! Unreserve and PostBind call the cache's methods; report pods bound by other schedulers with
//! [`ReserveCache::foreign_pod`]; call [`ReserveCache::resync`] on a timer.

pub mod args;
mod cluster_state;
pub mod fingerprint;
pub mod policy;
pub mod reject_kind;
mod request;
pub mod reserve_cache;
pub mod score;
pub mod types;
pub mod verdict;
pub mod verdict_memo;

#[cfg(test)]
mod memo_tests;

pub use args::{ArgsError, FieldError, NodeResourceTopologyMatchArgs, NumaPluginConfig};
pub use cluster_state::{NumaCluster, NumaMetrics};
pub use fingerprint::{Fingerprint, FingerprintError, FingerprintMethod};
pub use policy::{filter, filter_kind, AnyResource, NodeAllocatable, NumaReject};
pub use reject_kind::RejectKind;
pub use request::{pod_numa_request, pod_numa_request_kept};
pub use reserve_cache::{
    filter_node, filter_node_kind, score_node, CacheConfig, CacheMode, ForeignPodsDetect,
    NodeNumaView, NodeSlot, NumaCacheMetrics, PodIdent, PodKey, ReserveCache, ResyncCheck,
    ResyncMethod, ResyncOutcome, ResyncScope, UnusableReason,
};
pub use score::{score, ScoringStrategy, ScoringStrategyType};
pub use types::{
    InitContainerRequest, NodeTopology, NumaConvertError, NumaZone, NumaZones, PodNumaRequest,
    QosClass, ResourceName, Resources, TmPolicy, TmScope, TopologyManagerConfig,
};
pub use verdict::{FilterVerdict, StaleReason};
pub use verdict_memo::ShapeId;
