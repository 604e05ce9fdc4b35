//! A [`PodInfo`] as the NUMA domain code reads it: per-container requests, QoS, overhead.
//!
//! `PodInfo` keeps only the pod's summed request; the NUMA filter needs every container on
//! its own (container scope aligns them one by one), so the request is rebuilt from the spec
//! once per cycle (PreFilter) and, off the hot path, when the resync or the foreign-pod
//! detector asks whether a pod holds exclusive resources.

use berth_api::k8s_openapi::api::core::v1::Container;
use berth_api::quantity::{parse_resource, QuantityError};

use crate::model::pod::{PodInfo, QosClass as PodQos};
use crate::numa::{InitContainerRequest, PodNumaRequest, QosClass, ResourceName, Resources};

/// Builds the NUMA request of `pod`. Quantities were validated when the pod was seen, so an
/// error here means the pod changed under us; callers treat it as an internal error.
pub fn pod_numa_request(pod: &PodInfo) -> Result<PodNumaRequest, QuantityError> {
    let spec = pod.spec();
    let qos = match pod.qos {
        PodQos::Guaranteed => QosClass::Guaranteed,
        PodQos::Burstable => QosClass::Burstable,
        PodQos::BestEffort => QosClass::BestEffort,
    };
    let mut init = Vec::with_capacity(spec.init_containers.as_ref().map_or(0, Vec::len));
    for c in spec.init_containers.iter().flatten() {
        init.push(InitContainerRequest {
            requests: container_requests(c)?,
            sidecar: c.restart_policy.as_deref() == Some("Always"),
        });
    }
    let mut containers = Vec::with_capacity(spec.containers.len());
    for c in &spec.containers {
        containers.push(container_requests(c)?);
    }
    let mut overhead = Resources::new();
    for (name, q) in spec.overhead.iter().flatten() {
        overhead.set(ResourceName::new(name), parse_resource(name, &q.0)?);
    }
    Ok(PodNumaRequest::new(qos, init, containers, overhead))
}

/// [`pod_numa_request`], read once per pod and kept with it ([`PodInfo`]): for the
/// queueing hints, which ask about every waiting pod after every NRT update.
pub fn pod_numa_request_kept(pod: &PodInfo) -> Result<&PodNumaRequest, QuantityError> {
    pod.numa_request
        .get_or_init(|| pod_numa_request(pod))
        .as_ref()
        .map_err(Clone::clone)
}

/// A container's requests, a limit standing in for a missing request (API server
/// defaulting, as `PodInfo` does). Zero amounts are kept out: they never need aligning.
fn container_requests(c: &Container) -> Result<Resources, QuantityError> {
    let mut out = Resources::new();
    let res = c.resources.as_ref();
    let requests = res.and_then(|r| r.requests.as_ref());
    let limits = res.and_then(|r| r.limits.as_ref());
    for (name, q) in requests.into_iter().flatten() {
        let v = parse_resource(name, &q.0)?;
        if v != 0 {
            out.set(ResourceName::new(name), v);
        }
    }
    for (name, q) in limits.into_iter().flatten() {
        if requests.is_some_and(|m| m.contains_key(name)) {
            continue;
        }
        let v = parse_resource(name, &q.0)?;
        if v != 0 {
            out.set(ResourceName::new(name), v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;
    use serde_json::json;

    #[test]
    fn per_container_requests_qos_and_overhead_are_kept_apart() {
        let p = pod("p")
            .req("cpu", "2")
            .req("memory", "1Gi")
            .limit("cpu", "2")
            .limit("memory", "1Gi")
            .init_container(json!({"cpu": "4"}))
            .spec("overhead", json!({"cpu": "100m"}))
            .build_info();
        let r = pod_numa_request(&p).expect("valid pod");
        assert_eq!(r.containers().len(), 1);
        assert_eq!(r.containers()[0].get("cpu"), Some(2000));
        assert_eq!(r.containers()[0].get("memory"), Some(1 << 30));
        assert_eq!(r.init_containers()[0].requests.get("cpu"), Some(4000));
        assert!(!r.init_containers()[0].sidecar);
        // max(2, 4) + 100m overhead.
        assert_eq!(r.effective().get("cpu"), Some(4100));
    }

    #[test]
    fn a_limit_without_a_request_is_the_request_and_sets_the_qos() {
        let g = pod("g")
            .limit("cpu", "1")
            .limit("memory", "1Gi")
            .build_info();
        let r = pod_numa_request(&g).expect("valid pod");
        assert_eq!(r.qos(), QosClass::Guaranteed);
        assert_eq!(r.containers()[0].get("cpu"), Some(1000));
        let b = pod("b").req("cpu", "1").build_info();
        assert_eq!(
            pod_numa_request(&b).expect("valid pod").qos(),
            QosClass::Burstable
        );
        let e = pod("e").build_info();
        let r = pod_numa_request(&e).expect("valid pod");
        assert_eq!(r.qos(), QosClass::BestEffort);
        assert!(r.containers()[0].is_empty());
    }
}
