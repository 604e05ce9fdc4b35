//! The structure-aware fuzz harness of exclusive CPUs: a CPU topology as koordlet would
//! publish it (`node.koordinator.sh/cpu-topology`), but irregular as only outside input is
//! (cores of different thread counts, sockets of different sizes, sparse ids), written as
//! the annotation text and read back the way the scheduler reads it, then:
//!
//! - the CPU allocator (`take_cpus`) on a free set and a request from the input, under every
//!   bind policy: it answers exactly when the request fits the free CPUs the node has, with
//!   exactly that many of them, and the same answer twice;
//! - a node reservation (`node.koordinator.sh/reservation`, by list or by amount) made
//!   concrete: only CPUs of the node, and by amount as many as asked (or all that are free),
//!   none of the kubelet's;
//! - the NRT carrying these annotations is accepted by the scheduler's CPU state.
//!
//! Included with `#[path]` by `fuzz/fuzz_targets/cpuset.rs` and by
//! `crates/berth-core/tests/fuzz_corpus.rs`. Expects `Bytes` from the sibling `core.rs`
//! harness in scope as `super::core_harness::Bytes`.

#![allow(dead_code)]

use std::collections::BTreeMap;

use berth_api::annotations::{
    AnnotationCodec, CpuBindPolicy, CpuInfo, CpuTopology, KubeletCpuManagerPolicy, NodeReservation,
    ANNOTATION_NODE_CPU_TOPOLOGY,
};
use berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use berth_api::nrt::NodeResourceTopology;
use berth_core::cpuset::state::concrete_reserved;
use berth_core::cpuset::{take_cpus, CpuLayout, CpuSet, CpusetCluster};

use super::core_harness::Bytes;

/// Most logical CPUs a generated topology lists (small enough for many cases a second).
pub const MAX_CPUS: usize = 96;

/// A topology from the input: up to 16 cores, each with a home (socket, NUMA node), and up
/// to [`MAX_CPUS`] CPUs spread over them; ids are mostly dense, sometimes sparse or
/// repeated, and now and then a CPU claims another home for its core (which the annotation
/// refuses).
fn topology(b: &mut Bytes) -> CpuTopology {
    let cores = 1 + b.below(16);
    let homes: Vec<(u32, u32)> = (0..cores)
        .map(|_| {
            let socket = b.below(3) as u32;
            (socket, socket * 2 + b.below(2) as u32)
        })
        .collect();
    let count = b.below(MAX_CPUS + 1);
    let detail = (0..count)
        .map(|i| {
            let core = b.below(cores);
            let (mut socket, mut node) = homes[core];
            if b.below(32) == 0 {
                (socket, node) = (b.below(3) as u32, b.below(6) as u32);
            }
            let id = match b.below(16) {
                0 => b.byte().into(),
                1 => u32::MAX - b.below(4) as u32,
                _ => i as u32,
            };
            CpuInfo {
                id,
                core: core as u32,
                socket,
                node,
            }
        })
        .collect();
    CpuTopology { detail }
}

const POLICIES: [CpuBindPolicy; 4] = [
    CpuBindPolicy::Default,
    CpuBindPolicy::FullPcpus,
    CpuBindPolicy::SpreadByPcpus,
    CpuBindPolicy::ConstrainedBurst,
];

/// Plays one case; returns whether the topology was accepted.
pub fn cpuset(data: &[u8]) -> bool {
    let mut b = Bytes::new(data);
    let generated = topology(&mut b);
    // Through the text, as the scheduler gets it.
    let text = generated.to_value();
    let Ok(parsed) = CpuTopology::parse(&text) else {
        return false;
    };
    assert_eq!(parsed, generated, "{text}");
    let Some(layout) = CpuLayout::new(&parsed) else {
        assert!(parsed.detail.is_empty());
        return true;
    };
    assert_eq!(layout.len(), parsed.detail.len());

    // The allocator, on a free set that may name CPUs the node does not have.
    let mut available: CpuSet = layout
        .all()
        .into_iter()
        .filter(|_| b.below(4) != 0)
        .collect();
    for _ in 0..b.below(3) {
        available.insert(b.byte().into());
    }
    let usable: CpuSet = available.iter().filter(|c| layout.contains(*c)).collect();
    let n = b.below(usable.len() + 3);
    let policy = b.pick(&POLICIES);
    let got = take_cpus(&layout, &available, n, policy);
    match &got {
        None => assert!(
            n > usable.len(),
            "{n} of {usable:?} refused ({policy:?}) on {text}"
        ),
        Some(cpus) => {
            assert!(n <= usable.len(), "{n} of {usable:?} given ({policy:?})");
            assert_eq!(
                cpus.len(),
                n,
                "{policy:?} on {text}: {usable:?} gave {cpus:?}"
            );
            assert!(
                cpus.is_subset(&usable),
                "{policy:?} on {text}: {cpus:?} not within {usable:?}"
            );
        }
    }
    assert_eq!(
        take_cpus(&layout, &available, n, policy),
        got,
        "not deterministic"
    );

    // The node's reserved CPUs, by list or by amount.
    let kubelet: CpuSet = layout
        .all()
        .into_iter()
        .filter(|_| b.below(8) == 0)
        .collect();
    let by_list = b.bool();
    let reservation = if by_list {
        let ids: CpuSet = (0..b.below(6)).map(|_| u32::from(b.byte() % 128)).collect();
        NodeReservation {
            reserved_cpus: ids.to_string(),
            ..Default::default()
        }
    } else {
        let milli = 500 * b.below(2 * MAX_CPUS + 4);
        NodeReservation {
            resources: [("cpu".to_string(), Quantity(format!("{milli}m")))].into(),
            ..Default::default()
        }
    };
    let reserved = concrete_reserved(&layout, &kubelet, &reservation);
    assert!(reserved.iter().all(|c| layout.contains(c)), "{reserved:?}");
    if reservation.reserved_cpus.is_empty() {
        let count = reservation.reserved_cpu_count().unwrap_or(0) as usize;
        let free = layout.len() - kubelet.len();
        assert_eq!(reserved.len(), count.min(free), "{reservation:?} on {text}");
        assert!(reserved.is_disjoint(&kubelet), "{reserved:?} / {kubelet:?}");
    }

    // The NRT that carries them.
    let mut annotations = BTreeMap::new();
    annotations.insert(ANNOTATION_NODE_CPU_TOPOLOGY.to_string(), text.clone());
    reservation.insert_into(&mut annotations);
    KubeletCpuManagerPolicy {
        policy: "static".into(),
        reserved_cpus: kubelet.to_string(),
        ..Default::default()
    }
    .insert_into(&mut annotations);
    let mut nrt = NodeResourceTopology::default();
    nrt.metadata.name = Some("n1".into());
    nrt.metadata.annotations = Some(annotations);
    let mut cluster = CpusetCluster::default();
    // The capacity rule: a node reservation naming CPUs the topology lacks is refused
    // whole (inconsistent), never applied in part.
    let absent = reservation
        .reserved_cpu_ids()
        .is_ok_and(|ids| ids.iter().any(|c| !layout.contains(*c)));
    match cluster.apply_nrt(&nrt) {
        Ok(()) => assert!(!absent, "{reservation:?} on {text}: absent CPUs accepted"),
        Err((rule, message)) => {
            assert!(absent, "{text}: {message}");
            assert_eq!(rule, berth_api::validate::Rule::Inconsistent, "{message}");
            assert!(message.contains("reservedCPUs"), "{message}");
        }
    }
    true
}
