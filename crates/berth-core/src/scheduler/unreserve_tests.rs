//! Every failure path after Reserve runs every Reserve plugin's Unreserve, in reverse
//! order (kube-scheduler's `RunReservePluginsUnreserve`), and forgets the assumed pod.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::{Config, Scheduler};
use crate::cache::Cluster;
use crate::event::Event;
use crate::framework::plugin::{Plugin, Points};
use crate::framework::{CycleState, Profile, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::object::Object;
use crate::resources::ResourceId;
use crate::testing::{node, pod};

const NAMES: [&str; 3] = ["R0", "R1", "R2"];

/// A Reserve (and PreBind) plugin that records its calls and fails where told.
#[derive(Debug)]
struct Recorder {
    name: &'static str,
    fail_reserve: bool,
    fail_pre_bind: bool,
    log: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn note(&self, what: &str) {
        if let Ok(mut log) = self.log.lock() {
            log.push(format!("{what} {}", self.name));
        }
    }
}

impl Plugin for Recorder {
    fn name(&self) -> &'static str {
        self.name
    }

    fn points(&self) -> Points {
        Points(Points::RESERVE.0 | Points::PRE_BIND.0)
    }

    fn reserve(
        &self,
        _cx: &mut Cluster,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _node: NodeIdx,
    ) -> Status {
        self.note("Reserve");
        if self.fail_reserve {
            Status::error("refused")
        } else {
            Status::success()
        }
    }

    fn unreserve(&self, _cx: &mut Cluster, _state: &mut CycleState, _pod: &PodInfo, _n: NodeIdx) {
        self.note("Unreserve");
    }

    fn pre_bind(
        &self,
        _cx: &Cluster,
        _state: &CycleState,
        _pod: &PodInfo,
        _node: &NodeInfo,
        _annotations: &mut BTreeMap<String, String>,
    ) -> Status {
        self.note("PreBind");
        if self.fail_pre_bind {
            Status::error("refused")
        } else {
            Status::success()
        }
    }
}

/// A profile of the three recorders (Reserve and PreBind in that order), `fails(i)`
/// saying which of them fail (Reserve, PreBind).
fn profile(log: &Arc<Mutex<Vec<String>>>, fails: impl Fn(usize) -> (bool, bool)) -> Profile {
    let plugins: Vec<Box<dyn Plugin>> = NAMES
        .iter()
        .enumerate()
        .map(|(i, &name)| {
            let (fail_reserve, fail_pre_bind) = fails(i);
            Box::new(Recorder {
                name,
                fail_reserve,
                fail_pre_bind,
                log: log.clone(),
            }) as Box<dyn Plugin>
        })
        .collect();
    Profile {
        scheduler_name: crate::framework::profile::DEFAULT_SCHEDULER_NAME.into(),
        percentage_of_nodes_to_score: None,
        plugins,
        pre_enqueue: vec![],
        pre_filter: vec![],
        filter: vec![],
        fast_filter: 0,
        post_filter: vec![],
        pre_score: vec![],
        score: vec![],
        reserve: vec![0, 1, 2],
        pre_bind: vec![0, 1, 2],
    }
}

/// Runs one cycle of one pod on one node; returns the calls recorded, the pod's
/// condition message, and the CPU the node's cache still counts as requested.
fn one_cycle(fails: impl Fn(usize) -> (bool, bool)) -> (Vec<String>, Option<String>, i64) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut s = Scheduler::new(vec![profile(&log, fails)], Config::default());
    s.handle(
        0,
        Event::Applied(Object::Node(node("n1").alloc("cpu", "2").build())),
    );
    s.handle(
        0,
        Event::Applied(Object::Pod(pod("p").req("cpu", "1").build())),
    );
    assert_eq!(s.run_at_most(0, 1), 1);
    let mut condition = None;
    while let Some(e) = s.poll_effect() {
        if let crate::effect::Effect::PodCondition { message, .. } = e {
            condition = Some(message);
        }
    }
    let requested = s
        .cluster
        .cache
        .node_by_name("n1")
        .map_or(-1, |n| n.requested[ResourceId::CPU]);
    let calls = log.lock().map(|l| l.clone()).unwrap_or_default();
    (calls, condition, requested)
}

fn calls(list: &[(&str, &str)]) -> Vec<String> {
    list.iter().map(|(a, b)| format!("{a} {b}")).collect()
}

#[test]
fn a_failed_reserve_runs_every_unreserve_in_reverse_order_and_forgets_the_pod() {
    for failing in 0..NAMES.len() {
        let (got, condition, requested) = one_cycle(|i| (i == failing, false));
        let mut want: Vec<(&str, &str)> =
            NAMES[..=failing].iter().map(|&n| ("Reserve", n)).collect();
        // Every plugin's Unreserve, the earlier ones included, last first.
        want.extend(NAMES.iter().rev().map(|&n| ("Unreserve", n)));
        assert_eq!(got, calls(&want), "Reserve of {} failing", NAMES[failing]);
        assert_eq!(condition.as_deref(), Some("refused"), "{}", NAMES[failing]);
        assert_eq!(
            requested, 0,
            "the pod is forgotten when {} fails",
            NAMES[failing]
        );
    }
}

#[test]
fn a_failed_pre_bind_runs_every_unreserve_in_reverse_order_and_forgets_the_pod() {
    for failing in 0..NAMES.len() {
        let (got, condition, requested) = one_cycle(|i| (false, i == failing));
        let mut want: Vec<(&str, &str)> = NAMES.iter().map(|&n| ("Reserve", n)).collect();
        want.extend(NAMES[..=failing].iter().map(|&n| ("PreBind", n)));
        want.extend(NAMES.iter().rev().map(|&n| ("Unreserve", n)));
        assert_eq!(got, calls(&want), "PreBind of {} failing", NAMES[failing]);
        assert_eq!(condition.as_deref(), Some("refused"), "{}", NAMES[failing]);
        assert_eq!(
            requested, 0,
            "the pod is forgotten when {} fails",
            NAMES[failing]
        );
    }
}

#[test]
fn a_cycle_where_nothing_fails_unreserves_nothing_and_keeps_the_pod() {
    let (got, condition, requested) = one_cycle(|_| (false, false));
    let mut want: Vec<(&str, &str)> = NAMES.iter().map(|&n| ("Reserve", n)).collect();
    want.extend(NAMES.iter().map(|&n| ("PreBind", n)));
    assert_eq!(got, calls(&want));
    assert_eq!(condition, None);
    assert_eq!(requested, 1000);
}
