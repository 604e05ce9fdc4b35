//! NodePorts: a pod asking for host ports fits only nodes where none of them is taken.
//!
//! A port is taken when a pod on the node uses it, or when an Available reservation on the
//! node holds it for its owners; an owner gets back the ports its matched reservations hold
//! (the Reservation plugin's cycle state says which).
//!
//! The pod's host ports are computed once when the pod is seen (`PodInfo::host_ports`), so
//! PreFilter only decides whether Filter runs at all.

use crate::cache::Cluster;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::NodeInfo;
use crate::model::pod::{HostPort, PodInfo};

/// kube-scheduler's `ErrReason`.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// Per-cycle state. Empty: the ports live on `PodInfo`.
#[derive(Debug, Clone, Default)]
pub struct State {}

/// The NodePorts plugin.
#[derive(Debug)]
pub struct NodePorts;

/// Whether `want` can be bound on `node`, given the reservation ports handed back to the pod.
pub fn fits_ports(want: &[HostPort], node: &NodeInfo, restored: &[HostPort]) -> bool {
    want.iter().all(|w| {
        !node.used_ports.iter().any(|u| u.conflicts(w))
            && !node
                .reserved_ports
                .iter()
                .any(|r| r.conflicts(w) && !restored.contains(r))
    })
}

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        super::names::NODE_PORTS
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER | Points::FILTER
    }

    fn events_to_register(&self) -> EventsToRegister {
        // Upstream: pod deletion and node add; reservations hold ports the way pods do.
        EventsToRegister::node_local(&[(
            kind::NODE_ADD | kind::ASSIGNED_POD_DELETE | kind::RESERVATION,
            None,
        )])
    }

    fn pre_filter(&self, _cx: &Cluster, _state: &mut CycleState, pod: &PodInfo) -> Status {
        if pod.host_ports.is_empty() {
            Status::skip()
        } else {
            Status::success()
        }
    }

    fn filter(&self, _cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let restored: &[HostPort] = state
            .reservation
            .as_ref()
            .map_or(&[], |r| r.restored_ports(pod, node.idx));
        if fits_ports(&pod.host_ports, node, restored) {
            Status::success()
        } else {
            Status::unschedulable(ERR_REASON)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testing::{node, pod, PodBuilder};

    /// A pod with host ports written `PROTOCOL/IP/PORT`, as kube's tests write them.
    fn with_ports(name: &str, ports: &[&str]) -> PodBuilder {
        ports.iter().fold(pod(name), |b, spec| {
            let parts: Vec<&str> = spec.split('/').collect();
            b.host_port(parts[2].parse().unwrap(), parts[0], parts[1])
        })
    }

    fn node_with(existing: &[&str]) -> NodeInfo {
        let mut n = node("n").build_info();
        n.add_pod(Arc::new(
            with_ports("existing", existing).node_name("n").build_info(),
        ));
        n
    }

    #[test]
    fn filter_rejects_conflicting_host_ports() {
        let cases: [(&str, &[&str], &[&str], bool); 12] = [
            (
                "other port",
                &["UDP/127.0.0.1/8080"],
                &["UDP/127.0.0.1/9090"],
                true,
            ),
            (
                "same udp port",
                &["UDP/127.0.0.1/8080"],
                &["UDP/127.0.0.1/8080"],
                false,
            ),
            (
                "same tcp port",
                &["TCP/127.0.0.1/8080"],
                &["TCP/127.0.0.1/8080"],
                false,
            ),
            (
                "different host ip",
                &["TCP/127.0.0.1/8080"],
                &["TCP/127.0.0.2/8080"],
                true,
            ),
            (
                "different protocol",
                &["UDP/127.0.0.1/8080"],
                &["TCP/127.0.0.1/8080"],
                true,
            ),
            (
                "second udp port conflict",
                &["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"],
                &["UDP/127.0.0.1/8080"],
                false,
            ),
            (
                "first tcp port conflict",
                &["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
                &["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"],
                false,
            ),
            (
                "first tcp port conflict due to 0.0.0.0 hostIP",
                &["TCP/0.0.0.0/8001"],
                &["TCP/127.0.0.1/8001"],
                false,
            ),
            (
                "TCP hostPort conflict due to 0.0.0.0 hostIP",
                &["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"],
                &["TCP/127.0.0.1/8001"],
                false,
            ),
            (
                "second tcp port conflict to 0.0.0.0 hostIP",
                &["TCP/127.0.0.1/8001"],
                &["TCP/0.0.0.0/8001"],
                false,
            ),
            (
                "second different protocol",
                &["UDP/127.0.0.1/8001"],
                &["TCP/0.0.0.0/8001"],
                true,
            ),
            (
                "UDP hostPort conflict due to 0.0.0.0 hostIP",
                &["UDP/127.0.0.1/8001"],
                &["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"],
                false,
            ),
        ];
        let cx = Cluster::default();
        for (name, want, existing, fits) in cases {
            let p = with_ports("p", want).build_info();
            let mut st = CycleState::default();
            assert!(
                NodePorts.pre_filter(&cx, &mut st, &p).is_success(),
                "{name}"
            );
            let got = NodePorts.filter(&cx, &st, &p, &node_with(existing));
            if fits {
                assert!(got.is_success(), "{name}: {got:?}");
            } else {
                assert_eq!(got, Status::unschedulable(ERR_REASON), "{name}");
            }
        }
    }

    #[test]
    fn pre_filter_skips_pods_without_host_ports() {
        let cx = Cluster::default();
        let mut st = CycleState::default();
        assert!(NodePorts
            .pre_filter(&cx, &mut st, &pod("p").build_info())
            .is_skip());
    }

    #[test]
    fn ports_held_by_reservations_are_taken_unless_given_back() {
        let p = with_ports("p", &["TCP//8080"]).build_info();
        let mut n = node("n").build_info();
        n.reserved_ports.push(HostPort {
            ip: "0.0.0.0".into(),
            protocol: "TCP".into(),
            port: 8080,
        });
        let held = n.reserved_ports[0].clone();
        assert!(!fits_ports(&p.host_ports, &n, &[]));
        assert!(fits_ports(&p.host_ports, &n, std::slice::from_ref(&held)));
        let other = with_ports("q", &["TCP//9090"]).build_info();
        assert!(fits_ports(&other.host_ports, &n, &[]));
        // Without a matched reservation the Filter sees the port as taken.
        assert_eq!(
            NodePorts.filter(&Cluster::default(), &CycleState::default(), &p, &n),
            Status::unschedulable(ERR_REASON)
        );
    }
}
