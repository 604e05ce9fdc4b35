//! Fuzz harnesses for berth-api's parsers: one function per target, each taking the raw
//! input and panicking only on a real finding (a panic inside the parser, or a property
//! below that does not hold). Each returns whether the parser accepted the input, so the
//! corpus replay can check that its files reach past the parser's error paths.
//!
//! Included with `#[path]` by the targets in `fuzz/fuzz_targets/` and by
//! `crates/berth-api/tests/fuzz_corpus.rs`, which replays the checked-in corpus under
//! `cargo test`, so it may use only what berth-api's own tests can.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use berth_api::annotations::{
    format_cpu_list, koordinator_priority, parse_cpu_list, parse_int_label,
    pre_allocatable_priority, reservation_order, AnnotationCodec, CpuSharedPools, CpuTopology,
    ExactMatchReservationSpec, KubeletCpuManagerPolicy, NewReservationRequirement, NodeReservation,
    ReservationAffinity, ReservationAllocated, ReservationCurrentOwner, ReservationOwners,
    ReservationResizeAllocatable, ReservationRestrictedOptions, ReservationTemplate, ResourceSpec,
    ResourceStatus, MAX_CPU_LIST_CPUS,
};
use berth_api::duration::{format_duration_nanos, parse_duration_millis, parse_duration_nanos};
use berth_api::quantity::{format_resource, parse_resource, ParsedQuantity};

/// The capacity rule (issue 25): no accepted amount can raise capacity. Every amount a
/// codec accepted is counted as written: not negative, not saturated.
fn assert_countable(t: &str, amounts: &BTreeMap<String, i64>) {
    for (name, v) in amounts {
        assert!(*v >= 0, "{t:?}: {name} = {v} accepted though negative");
        assert!(*v < i64::MAX, "{t:?}: {name} accepted though beyond range");
    }
}

/// The input as text; parsers of outside input only ever see strings.
fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// Kubernetes quantities: parsing never panics, and every integer berth prints back reads
/// as the same integer.
pub fn quantity(data: &[u8]) -> bool {
    let Some(t) = text(data) else { return false };
    let Ok(q) = ParsedQuantity::parse(t) else {
        return false;
    };
    let _ = (q.value(), q.milli_value(), q.is_negative(), q.to_string());
    for name in ["cpu", "memory", "pods", "hugepages-2Mi"] {
        let Ok(amount) = parse_resource(name, t) else {
            panic!("{t:?} parsed as a quantity but not as {name}");
        };
        let printed = format_resource(name, amount);
        assert_eq!(
            parse_resource(name, &printed),
            Ok(amount),
            "{name}: {t:?} read as {amount}, printed as {printed:?}"
        );
    }
    true
}

/// Go durations: parsing never panics, Go's `Duration.String()` form reads back as the
/// same value, and milliseconds are the nanoseconds truncated.
pub fn duration(data: &[u8]) -> bool {
    let Some(t) = text(data) else { return false };
    let Ok(nanos) = parse_duration_nanos(t) else {
        assert!(parse_duration_millis(t).is_err(), "{t:?}");
        return false;
    };
    assert_eq!(parse_duration_millis(t), Ok(nanos / 1_000_000), "{t:?}");
    let printed = format_duration_nanos(nanos);
    assert_eq!(
        parse_duration_nanos(&printed),
        Ok(nanos),
        "{t:?} read as {nanos} ns, printed as {printed:?}"
    );
    true
}

/// Linux CPU lists: never more than the limit, and the shortest form reads back the same.
pub fn cpu_list(data: &[u8]) -> bool {
    let Some(t) = text(data) else { return false };
    let Ok(cpus) = parse_cpu_list(t) else {
        return false;
    };
    assert!(cpus.len() as u64 <= MAX_CPU_LIST_CPUS, "{t:?}");
    let printed = format_cpu_list(&cpus);
    assert_eq!(parse_cpu_list(&printed).as_ref(), Ok(&cpus), "{t:?}");
    true
}

/// The properties every JSON annotation codec has: parsing never panics, what berth writes
/// reads back as the same value, and `from_annotations` agrees with `parse`.
fn codec<T: AnnotationCodec + PartialEq + std::fmt::Debug>(t: &str) -> Option<T> {
    let parsed = T::parse(t);
    let annotations: BTreeMap<String, String> = [(T::KEY.to_string(), t.to_string())].into();
    match (&parsed, T::from_annotations(Some(&annotations))) {
        (_, Ok(None)) => assert!(T::EMPTY_IS_ABSENT && t.is_empty(), "{t:?}"),
        (Ok(a), Ok(Some(b))) => assert_eq!(a, &b, "{t:?}"),
        (Err(_), Err(_)) => {}
        (a, b) => panic!("parse and from_annotations disagree on {t:?}: {a:?} / {b:?}"),
    }
    let value = parsed.ok()?;
    // The capacity rule: a key named twice is refused, never "the last one wins".
    assert!(
        berth_api::json_keys::first_duplicate(t).is_none(),
        "{t:?}: accepted with a key named twice"
    );
    let written = value.to_value();
    match T::parse(&written) {
        Ok(back) => assert_eq!(back, value, "{t:?} written as {written:?}"),
        Err(e) => panic!("{t:?} written as {written:?}, which does not read back: {e}"),
    }
    Some(value)
}

/// `scheduling.koordinator.sh/reservation-affinity`.
pub fn reservation_affinity(data: &[u8]) -> bool {
    let Some(t) = text(data) else { return false };
    codec::<ReservationAffinity>(t).is_some()
}

/// `scheduling.koordinator.sh/reservation-allocated`.
pub fn reservation_allocated(data: &[u8]) -> bool {
    let Some(t) = text(data) else { return false };
    codec::<ReservationAllocated>(t).is_some()
}

/// `scheduling.koordinator.sh/resource-status`, with its CPU list.
pub fn resource_status(data: &[u8]) -> bool {
    let Some(t) = text(data) else { return false };
    let Some(v) = codec::<ResourceStatus>(t) else {
        return false;
    };
    // `parse` checked the cpuset, so reading it again cannot fail.
    assert!(v.cpu_ids().is_ok(), "{t:?}");
    // The capacity rule: each NUMA node once, none negative, every amount countable.
    let mut nodes = BTreeSet::new();
    for n in &v.numa_node_resources {
        assert!(n.node >= 0, "{t:?}: NUMA node {} accepted", n.node);
        assert!(
            nodes.insert(n.node),
            "{t:?}: NUMA node {} accepted twice",
            n.node
        );
        let amounts = berth_api::annotations::resource_amounts("fuzz", "resources", &n.resources);
        assert_countable(t, &amounts.expect("parse checked the amounts"));
    }
    true
}

/// `node.koordinator.sh/reservation`, with its CPU list and amounts.
pub fn node_reservation(data: &[u8]) -> bool {
    let Some(t) = text(data) else { return false };
    let Some(v) = codec::<NodeReservation>(t) else {
        return false;
    };
    assert!(v.reserved_cpu_ids().is_ok(), "{t:?}");
    let amounts = v.reserved_amounts();
    assert!(amounts.is_ok(), "{t:?}: {amounts:?}");
    // The capacity rule: a reservation subtracted from allocatable never adds to it.
    if let Ok(a) = &amounts {
        assert_countable(t, a);
    }
    let _ = v.trims_allocatable();
    true
}

/// `scheduling.koordinator.sh/reservation-template`.
pub fn reservation_template(data: &[u8]) -> bool {
    let Some(t) = text(data) else { return false };
    let Some(v) = codec::<ReservationTemplate>(t) else {
        return false;
    };
    assert!(v.recommended_amounts().is_ok(), "{t:?}");
    assert!(v.round_up_amounts().is_ok(), "{t:?}");
    for a in [v.recommended_amounts(), v.round_up_amounts()]
        .into_iter()
        .flatten()
    {
        assert_countable(t, &a);
    }
    true
}

/// `scheduling.koordinator.sh/new-reservation-requirement`.
pub fn new_reservation_requirement(data: &[u8]) -> bool {
    let Some(t) = text(data) else { return false };
    let Some(v) = codec::<NewReservationRequirement>(t) else {
        return false;
    };
    assert!(v.amounts().is_ok(), "{t:?}");
    if let Ok(a) = v.amounts() {
        assert_countable(t, &a);
    }
    true
}

/// The remaining codecs (operating pods, restricted options, exact match, resize) and the
/// integer labels, one per input, chosen by the first byte.
pub fn other_annotations(data: &[u8]) -> bool {
    let Some((&which, rest)) = data.split_first() else {
        return false;
    };
    let Some(t) = text(rest) else { return false };
    match which % 6 {
        0 => codec::<ReservationOwners>(t).is_some(),
        1 => codec::<ReservationCurrentOwner>(t).is_some(),
        2 => codec::<ReservationRestrictedOptions>(t).is_some(),
        3 => codec::<ExactMatchReservationSpec>(t).is_some(),
        4 => {
            let Some(v) = codec::<ReservationResizeAllocatable>(t) else {
                return false;
            };
            assert!(v.amounts().is_ok(), "{t:?}");
            if let Ok(a) = v.amounts() {
                assert_countable(t, &a);
            }
            true
        }
        _ => {
            let map: BTreeMap<String, String> = [
                (
                    berth_api::annotations::LABEL_RESERVATION_ORDER.to_string(),
                    t.to_string(),
                ),
                (
                    berth_api::annotations::LABEL_KOORDINATOR_PRIORITY.to_string(),
                    t.to_string(),
                ),
                (
                    berth_api::annotations::ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY.to_string(),
                    t.to_string(),
                ),
            ]
            .into();
            let int = parse_int_label(berth_api::annotations::LABEL_RESERVATION_ORDER, t);
            assert_eq!(
                reservation_order(Some(&map)),
                int.as_ref().ok().copied().filter(|v| *v != 0),
                "{t:?}"
            );
            assert_eq!(
                pre_allocatable_priority(Some(&map)),
                int.as_ref().ok().copied().unwrap_or(0)
            );
            if let Ok(Some(p)) = koordinator_priority(Some(&map)) {
                assert_eq!(int.as_ref().ok(), Some(&i64::from(p)), "{t:?}");
            }
            int.is_ok()
        }
    }
}

/// Koordlet's CPU annotations on a NodeResourceTopology, one per input, chosen by the first
/// byte: `node.koordinator.sh/cpu-topology` (an accepted one lists each CPU once, at most
/// `MAX_CPU_LIST_CPUS`, and puts each physical core in one socket and NUMA node, as the
/// CPU allocator assumes), `kubelet.koordinator.sh/cpu-manager-policy` (its reserved CPUs
/// read) and `node.koordinator.sh/cpu-shared-pools` (every pool's cpuset reads).
pub fn cpu_topology(data: &[u8]) -> bool {
    let Some((&which, rest)) = data.split_first() else {
        return false;
    };
    let Some(t) = text(rest) else { return false };
    match which % 3 {
        0 => {
            let Some(v) = codec::<CpuTopology>(t) else {
                return false;
            };
            assert!(v.detail.len() as u64 <= MAX_CPU_LIST_CPUS, "{t:?}");
            let mut ids = BTreeSet::new();
            let mut home = BTreeMap::new();
            for c in &v.detail {
                assert!(ids.insert(c.id), "CPU {} listed twice in {t:?}", c.id);
                let h = *home.entry(c.core).or_insert((c.socket, c.node));
                assert_eq!(h, (c.socket, c.node), "core {} split in {t:?}", c.core);
            }
            true
        }
        1 => {
            let Some(v) = codec::<KubeletCpuManagerPolicy>(t) else {
                return false;
            };
            let ids = v.reserved_cpu_ids();
            assert!(
                ids.is_ok_and(|ids| ids.len() as u64 <= MAX_CPU_LIST_CPUS),
                "{t:?}"
            );
            true
        }
        _ => {
            let Some(v) = codec::<CpuSharedPools>(t) else {
                return false;
            };
            for pool in &v.0 {
                assert!(parse_cpu_list(&pool.cpuset).is_ok(), "{t:?}");
            }
            true
        }
    }
}

/// `scheduling.koordinator.sh/resource-spec` on a pod: what berth writes reads back, and
/// each policy it read reads again alone under the name berth gives it (`as_str`, used in
/// messages and in what berth writes).
pub fn resource_spec(data: &[u8]) -> bool {
    let Some(t) = text(data) else { return false };
    let Some(v) = codec::<ResourceSpec>(t) else {
        return false;
    };
    for p in [v.required_cpu_bind_policy, v.preferred_cpu_bind_policy]
        .into_iter()
        .flatten()
    {
        let alone = format!(r#"{{"preferredCPUBindPolicy":"{}"}}"#, p.as_str());
        assert_eq!(
            ResourceSpec::parse(&alone)
                .ok()
                .and_then(|s| s.preferred_cpu_bind_policy),
            Some(p),
            "{} does not read back",
            p.as_str()
        );
    }
    true
}
