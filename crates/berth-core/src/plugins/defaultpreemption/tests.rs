//! Cases ported from kube-scheduler's `default_preemption_test.go` (TestPostFilter,
//! TestDryRunPreemption, TestPodEligibleToPreemptOthers), plus scheduler-level runs.

use super::*;
use crate::effect::Effect;
use crate::event::Event;
use crate::framework::config::ProfileConfig;
use crate::framework::nominator::run_filter_plugins;
use crate::object::{Object, ObjectKey};
use crate::rng::SplitMix64;
use crate::scheduler::{Config, Scheduler};
use crate::testing::{node, pod, NodeBuilder, PodBuilder};
use crate::time::Time;
use serde_json::{json, Value};

const NEG: i32 = -100;
const LOW: i32 = 0;
const MID: i32 = 100;
const HIGH: i32 = 1000;
const VERY_HIGH: i32 = 10000;

/// A profile with NodeResourcesFit, `extra` plugins and DefaultPreemption (with `args`).
fn profile(extra: &[&str], args: Option<Value>) -> Profile {
    let mut enabled = vec![json!({"name": "NodeResourcesFit"})];
    enabled.extend(extra.iter().map(|n| json!({"name": n})));
    enabled.push(json!({"name": "DefaultPreemption"}));
    let mut cfg =
        json!({"plugins": {"multiPoint": {"disabled": [{"name": "*"}], "enabled": enabled}}});
    if let Some(a) = args {
        cfg["pluginConfig"] = json!([{"name": "DefaultPreemption", "args": a}]);
    }
    let pc: ProfileConfig = serde_json::from_value(cfg).unwrap();
    Profile::from_config(&pc).unwrap()
}

/// Upstream's resource sizes: cpu in milli, memory in bytes.
fn res(b: PodBuilder, size: u32) -> PodBuilder {
    b.req("cpu", &format!("{size}m"))
        .req("memory", &size.to_string())
}

/// Upstream's `veryLargeRes` node (500m, 500).
fn big_node(name: &str) -> NodeBuilder {
    node(name).alloc("cpu", "500m").alloc("memory", "500")
}

/// `status.startTime` at `secs`.
fn started(b: PodBuilder, secs: i64) -> PodBuilder {
    b.status("startTime", json!(crate::time::rfc3339(secs * 1000)))
}

struct Fixture {
    cx: Cluster,
    profile: Profile,
    nominator: Nominator,
}

impl Fixture {
    fn new(profile: Profile, nodes: &[NodeBuilder], pods: &[PodBuilder]) -> Self {
        let mut cx = Cluster::default();
        for n in nodes {
            cx.apply_node(n.build()).unwrap();
        }
        for p in pods {
            let info = p.build_info_with(&mut cx.cache.names);
            cx.cache.apply_pod(Arc::new(info));
        }
        Self {
            cx,
            profile,
            nominator: Nominator::default(),
        }
    }

    /// Adds a budget with the given status.
    fn pdb(mut self, name: &str, labels: Value, allowed: i32, disrupted: &[&str]) -> Self {
        let d: serde_json::Map<String, Value> = disrupted
            .iter()
            .map(|n| (n.to_string(), json!("2024-01-01T00:00:00Z")))
            .collect();
        let pdb: Arc<berth_api::k8s_openapi::api::policy::v1::PodDisruptionBudget> = Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"selector": {"matchLabels": labels}},
                "status": {"currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0,
                           "disruptionsAllowed": allowed, "disruptedPods": d}
            }))
            .unwrap(),
        );
        let key = Object::PodDisruptionBudget(pdb.clone()).key();
        self.cx.cache.pdbs.insert(key, pdb);
        self
    }

    fn info(&mut self, b: &PodBuilder) -> PodInfo {
        b.build_info_with(&mut self.cx.cache.names)
    }

    fn idx(&self, name: &str) -> NodeIdx {
        self.cx.cache.node_idx(name).unwrap()
    }

    /// PreFilter and Filter over every node as the scheduler runs them, then PostFilter.
    /// `resolvable` overrides which nodes count as `Unschedulable` (upstream's
    /// `filteredNodesStatuses`).
    fn post_filter(&self, pod: &PodInfo, resolvable: Option<&[&str]>) -> PostFilterResult {
        let mut state = CycleState::default();
        for &i in &self.profile.pre_filter {
            let st = self.profile.plugins[i].pre_filter(&self.cx, &mut state, pod);
            if st.is_skip() {
                state.skip_filter |= 1 << i;
            }
        }
        let resolvable: Vec<NodeIdx> = match resolvable {
            Some(names) => names.iter().map(|n| self.idx(n)).collect(),
            None => self
                .cx
                .cache
                .nodes()
                .filter(|n| {
                    let st = run_filter_plugins(&self.profile, &self.cx, &state, pod, n);
                    st.code() == Code::Unschedulable
                })
                .map(|n| n.idx)
                .collect(),
        };
        let diagnosis = Diagnosis::default();
        let mut rng = SplitMix64::new(0);
        let mut ctx = PostFilterContext {
            cluster: &self.cx,
            profile: &self.profile,
            state: &state,
            diagnosis: &diagnosis,
            resolvable: &resolvable,
            nominator: &self.nominator,
            rng: &mut rng,
        };
        let plugin = self
            .profile
            .plugin(crate::plugins::names::DEFAULT_PREEMPTION)
            .unwrap();
        plugin
            .post_filter(&mut ctx, pod)
            .expect("DefaultPreemption always answers pods")
    }

    /// The dry run over the given nodes from `offset`, with `args`.
    fn dry_run(&self, pod: &PodInfo, args: Value, nodes: &[&str], offset: usize) -> Vec<Candidate> {
        let plugin = DefaultPreemption::new(Some(&args)).unwrap();
        let fit = Fit {
            profile: &self.profile,
            nominator: &self.nominator,
            pod,
        };
        let potential: Vec<NodeIdx> = nodes.iter().map(|n| self.idx(n)).collect();
        plugin.dry_run(&self.cx, fit, &potential, offset).0
    }

    fn node_of(&self, r: &PostFilterResult) -> Option<String> {
        match r.nomination {
            Nomination::Node(i) => Some(self.cx.cache.node(i).unwrap().name.to_string()),
            _ => None,
        }
    }
}

fn victims(c: &Candidate) -> Vec<&str> {
    let mut v: Vec<&str> = c.victims.iter().map(|p| &*p.key.name).collect();
    v.sort_unstable();
    v
}

fn upstream_message(r: &PostFilterResult) -> String {
    r.message.clone().unwrap_or_default()
}

#[test]
fn post_filter_follows_upstream_cases() {
    struct Case {
        name: &'static str,
        nodes: Vec<NodeBuilder>,
        pods: Vec<PodBuilder>,
        pdbs: Vec<(&'static str, Value, i32)>,
        preemptor: PodBuilder,
        resolvable: Option<Vec<&'static str>>,
        want_node: Option<&'static str>,
        want_nomination: Nomination,
        want_message: Option<&'static str>,
    }
    let one_pod = |n: &str| node(n).alloc("pods", "1");
    let small_node = |n: &str| {
        node(n)
            .alloc("cpu", "200m")
            .alloc("memory", "400")
            .alloc("pods", "32")
    };
    let cases = vec![
        Case {
            name: "pod with higher priority can be made schedulable",
            nodes: vec![one_pod("node1")],
            pods: vec![pod("p1").node_name("node1")],
            pdbs: vec![],
            preemptor: pod("p").priority(HIGH),
            resolvable: None,
            want_node: Some("node1"),
            want_nomination: Nomination::Keep,
            want_message: None,
        },
        Case {
            name: "pod with tied priority is still unschedulable",
            nodes: vec![one_pod("node1")],
            pods: vec![pod("p1").node_name("node1")],
            pdbs: vec![],
            preemptor: pod("p"),
            resolvable: None,
            want_node: None,
            want_nomination: Nomination::Clear,
            want_message: Some("preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."),
        },
        Case {
            name: "preemption should respect filteredNodesStatuses",
            nodes: vec![one_pod("node1")],
            pods: vec![pod("p1").node_name("node1")],
            pdbs: vec![],
            preemptor: pod("p").priority(HIGH),
            resolvable: Some(vec![]),
            want_node: None,
            want_nomination: Nomination::Clear,
            want_message: Some("preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."),
        },
        Case {
            name: "pod can be made schedulable on one node",
            nodes: vec![one_pod("node1"), one_pod("node2")],
            pods: vec![
                pod("p1").priority(HIGH).node_name("node1"),
                pod("p2").priority(LOW).node_name("node2"),
            ],
            pdbs: vec![],
            preemptor: pod("p").priority(MID),
            resolvable: None,
            want_node: Some("node2"),
            want_nomination: Nomination::Keep,
            want_message: None,
        },
        Case {
            name: "pod can be made schedulable on minHighestPriority node",
            nodes: vec![one_pod("node1"), one_pod("node2")],
            pods: vec![
                pod("p1").label("pdb", "non-violating").priority(HIGH).node_name("node1"),
                pod("p2").label("pdb", "violating").priority(LOW).node_name("node1"),
                pod("p3").label("pdb", "violating").priority(MID).node_name("node2"),
            ],
            pdbs: vec![
                ("violating-pdb", json!({"pdb": "violating"}), 0),
                ("non-violating-pdb", json!({"pdb": "non-violating"}), i32::MAX),
            ],
            preemptor: pod("p").priority(VERY_HIGH),
            resolvable: None,
            want_node: Some("node2"),
            want_nomination: Nomination::Keep,
            want_message: None,
        },
        Case {
            name: "no candidate nodes found, no enough resource after removing low priority pods",
            nodes: vec![small_node("node1"), small_node("node2")],
            pods: vec![pod("p1").node_name("node1"), pod("p2").node_name("node2")],
            pdbs: vec![],
            preemptor: res(pod("p").priority(HIGH), 300),
            resolvable: Some(vec!["node1", "node2"]),
            want_node: None,
            want_nomination: Nomination::Clear,
            want_message: Some("preemption: 0/2 nodes are available: 2 Insufficient cpu."),
        },
        Case {
            name: "no candidate nodes found with mixed reasons, no lower priority pod and no enough CPU resource",
            nodes: vec![one_pod("node1"), small_node("node2"), one_pod("node3")],
            pods: vec![
                pod("p1").priority(HIGH).node_name("node1"),
                pod("p2").node_name("node2"),
                pod("p3").priority(HIGH).node_name("node3"),
            ],
            pdbs: vec![],
            preemptor: res(pod("p").priority(HIGH), 300),
            resolvable: Some(vec!["node1", "node2", "node3"]),
            want_node: None,
            want_nomination: Nomination::Clear,
            want_message: Some("preemption: 0/3 nodes are available: 1 Insufficient cpu, 2 No preemption victims found for incoming pod."),
        },
        Case {
            name: "no candidate nodes found with mixed reason, 2 UnschedulableAndUnresolvable nodes and 2 nodes don't have enough CPU resource",
            nodes: vec![small_node("node1"), small_node("node2"), small_node("node3"), small_node("node4")],
            pods: vec![pod("p1").node_name("node1"), pod("p2").node_name("node2")],
            pdbs: vec![],
            preemptor: res(pod("p").priority(HIGH), 300),
            resolvable: Some(vec!["node1", "node2"]),
            want_node: None,
            want_nomination: Nomination::Clear,
            want_message: Some("preemption: 0/4 nodes are available: 2 Insufficient cpu, 2 Preemption is not helpful for scheduling."),
        },
    ];
    for c in cases {
        let mut f = Fixture::new(profile(&[], None), &c.nodes, &c.pods);
        for (name, labels, allowed) in c.pdbs {
            f = f.pdb(name, labels, allowed, &[]);
        }
        let p = f.info(&c.preemptor);
        let r = f.post_filter(&p, c.resolvable.as_deref());
        assert_eq!(f.node_of(&r).as_deref(), c.want_node, "{}", c.name);
        if c.want_node.is_none() {
            assert_eq!(r.nomination, c.want_nomination, "{}", c.name);
            assert!(r.victims.is_empty(), "{}", c.name);
        } else {
            assert!(!r.victims.is_empty(), "{}", c.name);
        }
        match c.want_message {
            Some(m) => assert_eq!(upstream_message(&r), m, "{}", c.name),
            None => assert_eq!(r.message, None, "{}", c.name),
        }
    }
}

#[test]
fn dry_run_selects_the_fewest_victims_upstream_cases() {
    struct Case {
        name: &'static str,
        nodes: Vec<&'static str>,
        pods: Vec<PodBuilder>,
        pdbs: Vec<(Value, i32, Vec<&'static str>)>,
        preemptor: PodBuilder,
        /// (node, victims sorted by name, PDB violations)
        want: Vec<(&'static str, Vec<&'static str>, i64)>,
    }
    let cases = vec![
        Case {
            name: "a pod that fits on both nodes when lower priority pods are preempted",
            nodes: vec!["node1", "node2"],
            pods: vec![
                res(pod("p1").node_name("node1").priority(MID), 300),
                res(pod("p2").node_name("node2").priority(MID), 300),
            ],
            pdbs: vec![],
            preemptor: res(pod("p").priority(HIGH), 300),
            want: vec![("node1", vec!["p1"], 0), ("node2", vec!["p2"], 0)],
        },
        Case {
            name: "a pod that would fit on the nodes, but other pods running are higher priority, no preemption would happen",
            nodes: vec!["node1", "node2"],
            pods: vec![
                res(pod("p1").node_name("node1").priority(MID), 300),
                res(pod("p2").node_name("node2").priority(MID), 300),
            ],
            pdbs: vec![],
            preemptor: res(pod("p").priority(LOW), 300),
            want: vec![],
        },
        Case {
            name: "medium priority pod is preempted, but lower priority one stays as it is small",
            nodes: vec!["node1", "node2"],
            pods: vec![
                res(pod("p1.1").node_name("node1").priority(LOW), 100),
                res(pod("p1.2").node_name("node1").priority(MID), 300),
                res(pod("p2").node_name("node2").priority(MID), 300),
            ],
            pdbs: vec![],
            preemptor: res(pod("p").priority(HIGH), 300),
            want: vec![("node1", vec!["p1.2"], 0), ("node2", vec!["p2"], 0)],
        },
        Case {
            name: "mixed priority pods are preempted",
            nodes: vec!["node1", "node2"],
            pods: vec![
                res(pod("p1.1").node_name("node1").priority(MID), 100),
                res(pod("p1.2").node_name("node1").priority(LOW), 100),
                res(pod("p1.3").node_name("node1").priority(MID), 200),
                res(pod("p1.4").node_name("node1").priority(HIGH), 100),
                res(pod("p2").node_name("node2").priority(HIGH), 300),
            ],
            pdbs: vec![],
            preemptor: res(pod("p").priority(HIGH), 300),
            want: vec![("node1", vec!["p1.2", "p1.3"], 0)],
        },
        Case {
            name: "mixed priority pods are preempted, pick later StartTime one when priorities are equal",
            nodes: vec!["node1", "node2"],
            pods: vec![
                started(res(pod("p1.1").node_name("node1").priority(LOW), 100), 5),
                started(res(pod("p1.2").node_name("node1").priority(LOW), 100), 4),
                started(res(pod("p1.3").node_name("node1").priority(MID), 200), 3),
                started(res(pod("p1.4").node_name("node1").priority(HIGH), 100), 2),
                started(res(pod("p2").node_name("node2").priority(HIGH), 300), 1),
            ],
            pdbs: vec![],
            preemptor: res(pod("p").priority(HIGH), 300),
            want: vec![("node1", vec!["p1.1", "p1.3"], 0)],
        },
        Case {
            name: "preemption with violation of same pdb",
            nodes: vec!["node1"],
            pods: vec![
                res(pod("p1.1").node_name("node1").label("app", "foo").priority(MID), 200),
                res(pod("p1.2").node_name("node1").label("app", "foo").priority(MID), 200),
            ],
            pdbs: vec![(json!({"app": "foo"}), 1, vec![])],
            preemptor: res(pod("p").priority(HIGH), 500),
            want: vec![("node1", vec!["p1.1", "p1.2"], 1)],
        },
        Case {
            name: "preemption with violation of the pdb with pod whose eviction was processed, the victim doesn't belong to DisruptedPods",
            nodes: vec!["node1"],
            pods: vec![
                res(pod("p1.1").node_name("node1").label("app", "foo").priority(MID), 200),
                res(pod("p1.2").node_name("node1").label("app", "foo").priority(MID), 200),
            ],
            pdbs: vec![(json!({"app": "foo"}), 1, vec!["p2"])],
            preemptor: res(pod("p").priority(HIGH), 500),
            want: vec![("node1", vec!["p1.1", "p1.2"], 1)],
        },
        Case {
            name: "preemption with violation of the pdb with pod whose eviction was processed, the victim belongs to DisruptedPods",
            nodes: vec!["node1"],
            pods: vec![
                res(pod("p1.1").node_name("node1").label("app", "foo").priority(MID), 200),
                res(pod("p1.2").node_name("node1").label("app", "foo").priority(MID), 200),
            ],
            pdbs: vec![(json!({"app": "foo"}), 1, vec!["p1.2"])],
            preemptor: res(pod("p").priority(HIGH), 500),
            want: vec![("node1", vec!["p1.1", "p1.2"], 0)],
        },
        Case {
            name: "preemption with violation of the pdb with pod whose eviction was processed, the victim which belongs to DisruptedPods is treated as 'nonViolating'",
            nodes: vec!["node1"],
            pods: vec![
                res(pod("p1.1").node_name("node1").label("app", "foo").priority(MID), 100),
                res(pod("p1.2").node_name("node1").label("app", "foo").priority(MID), 100),
                res(pod("p1.3").node_name("node1").label("app", "foo").priority(MID), 100),
            ],
            pdbs: vec![(json!({"app": "foo"}), 1, vec!["p1.3"])],
            preemptor: res(pod("p").priority(HIGH), 500),
            want: vec![("node1", vec!["p1.1", "p1.2", "p1.3"], 1)],
        },
    ];
    for c in cases {
        let nodes: Vec<NodeBuilder> = c.nodes.iter().map(|n| big_node(n)).collect();
        let mut f = Fixture::new(profile(&[], None), &nodes, &c.pods);
        for (i, (labels, allowed, disrupted)) in c.pdbs.into_iter().enumerate() {
            f = f.pdb(&format!("pdb{i}"), labels, allowed, &disrupted);
        }
        let p = f.info(&c.preemptor);
        let got = f.dry_run(&p, json!({}), &c.nodes, 0);
        let got: Vec<(String, Vec<&str>, i64)> = got
            .iter()
            .map(|cand| {
                (
                    f.cx.cache.node(cand.node).unwrap().name.to_string(),
                    victims(cand),
                    cand.pdb_violations,
                )
            })
            .collect();
        let want: Vec<(String, Vec<&str>, i64)> = c
            .want
            .into_iter()
            .map(|(n, v, k)| (n.to_string(), v, k))
            .collect();
        assert_eq!(got, want, "{}", c.name);
    }
}

#[test]
fn dry_run_stops_at_the_configured_number_of_candidates() {
    let names = ["node1", "node2", "node3", "node4", "node5"];
    let nodes: Vec<NodeBuilder> = names.iter().map(|n| big_node(n)).collect();
    let pods: Vec<PodBuilder> = names
        .iter()
        .enumerate()
        .map(|(i, n)| res(pod(&format!("p{}", i + 1)).node_name(n).priority(MID), 300))
        .collect();
    let mut f = Fixture::new(profile(&[], None), &nodes, &pods);
    let p = f.info(&res(pod("p").priority(HIGH), 300));
    let args = json!({"minCandidateNodesPercentage": 40, "minCandidateNodesAbsolute": 1});
    // Offset 4: node5, then node1, and two are enough.
    let got: Vec<String> = f
        .dry_run(&p, args, &names, 4)
        .iter()
        .map(|c| f.cx.cache.node(c.node).unwrap().name.to_string())
        .collect();
    assert_eq!(got, ["node5", "node1"]);
    let all = f.dry_run(&p, json!({}), &names, 0);
    assert_eq!(all.len(), 5);
}

#[test]
fn a_violating_candidate_does_not_end_the_search_for_a_non_violating_one() {
    let nodes = [big_node("node1"), big_node("node2")];
    let pods = [
        res(
            pod("a")
                .node_name("node1")
                .label("app", "foo")
                .priority(MID),
            300,
        ),
        res(pod("b").node_name("node2").priority(MID), 300),
    ];
    let mut f =
        Fixture::new(profile(&[], None), &nodes, &pods).pdb("p", json!({"app": "foo"}), 0, &[]);
    let p = f.info(&res(pod("p").priority(HIGH), 300));
    let args = json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 1});
    let got = f.dry_run(&p, args, &["node1", "node2"], 0);
    let got: Vec<(String, i64)> = got
        .iter()
        .map(|c| {
            (
                f.cx.cache.node(c.node).unwrap().name.to_string(),
                c.pdb_violations,
            )
        })
        .collect();
    // The non-violating candidate comes first though it was found second.
    assert_eq!(got, [("node2".to_string(), 0), ("node1".to_string(), 1)]);
    let r = f.post_filter(&p, None);
    assert_eq!(f.node_of(&r).as_deref(), Some("node2"));
}

#[test]
fn reprieve_keeps_the_most_important_pods_that_still_leave_room() {
    // 500m node, full: low 200m (older), low 200m (younger), neg 100m. The pod needs
    // 200m: one 200m pod must go; the younger one, as the older is more important.
    let pods = [
        started(res(pod("old").node_name("node1").priority(LOW), 200), 1),
        started(res(pod("young").node_name("node1").priority(LOW), 200), 9),
        res(pod("neg").node_name("node1").priority(NEG), 100),
    ];
    let mut f = Fixture::new(profile(&[], None), &[big_node("node1")], &pods);
    let p = f.info(&res(pod("p").priority(HIGH), 200));
    let got = f.dry_run(&p, json!({}), &["node1"], 0);
    assert_eq!(got.len(), 1);
    // Reprieve order old, young, neg: old fits back (200 used), young does not (400), neg
    // does (300).
    assert_eq!(victims(&got[0]), ["young"]);
    // The copy was restored: the real cluster never changed, and a second run agrees.
    assert_eq!(f.cx.cache.node_by_name("node1").unwrap().pods.len(), 3);
    let again = f.dry_run(&p, json!({}), &["node1"], 0);
    assert_eq!(victims(&again[0]), ["young"]);
}

#[test]
fn victims_that_violate_budgets_are_reprieved_first() {
    // Two 200m pods of equal priority; only one must go. The one a budget protects is put
    // back first and stays; the other is the victim.
    let pods = [
        res(pod("a").node_name("node1").priority(LOW), 200),
        res(
            pod("b").node_name("node1").label("app", "db").priority(LOW),
            200,
        ),
    ];
    let mut f = Fixture::new(profile(&[], None), &[big_node("node1")], &pods).pdb(
        "db",
        json!({"app": "db"}),
        0,
        &[],
    );
    let p = f.info(&res(pod("p").priority(HIGH), 300));
    let got = f.dry_run(&p, json!({}), &["node1"], 0);
    assert_eq!(victims(&got[0]), ["a"]);
    assert_eq!(got[0].pdb_violations, 0);
}

#[test]
fn preemption_sees_topology_spread_change_when_pods_are_removed() {
    // Upstream: "preemption to resolve pod topology spread filter failure".
    let zone = |n: &str, z: &str| big_node(n).label("zone", z).label("hostname", n);
    let nodes = [
        zone("node-a", "zone1"),
        zone("node-b", "zone1"),
        zone("node-x", "zone2"),
    ];
    let pods = [
        pod("pod-a1")
            .node_name("node-a")
            .label("foo", "")
            .priority(MID),
        pod("pod-a2")
            .node_name("node-a")
            .label("foo", "")
            .priority(LOW),
        pod("pod-b1")
            .node_name("node-b")
            .label("foo", "")
            .priority(LOW),
        pod("pod-x1")
            .node_name("node-x")
            .label("foo", "")
            .priority(HIGH),
        pod("pod-x2")
            .node_name("node-x")
            .label("foo", "")
            .priority(HIGH),
    ];
    let constraint = |key: &str| {
        json!({"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}})
    };
    let preemptor = pod("p").label("foo", "").priority(HIGH).spec(
        "topologySpreadConstraints",
        json!([constraint("zone"), constraint("hostname")]),
    );
    let mut f = Fixture::new(profile(&["PodTopologySpread"], None), &nodes, &pods);
    let p = f.info(&preemptor);
    let got = f.dry_run(&p, json!({}), &["node-a", "node-b", "node-x"], 0);
    let got: Vec<(String, Vec<&str>)> = got
        .iter()
        .map(|c| {
            (
                f.cx.cache.node(c.node).unwrap().name.to_string(),
                victims(c),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("node-a".to_string(), vec!["pod-a2"]),
            ("node-b".to_string(), vec!["pod-b1"])
        ]
    );
}

#[test]
fn preemption_removes_a_victim_whose_anti_affinity_rejects_the_pod() {
    // Upstream: "pod with anti-affinity is preempted".
    let anti = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]},
         "topologyKey": "hostname"}]}});
    let nodes = [
        big_node("node1").label("hostname", "node1"),
        big_node("node2").label("hostname", "node2"),
    ];
    let pods = [
        res(
            pod("p1.1")
                .node_name("node1")
                .label("foo", "")
                .priority(LOW),
            100,
        )
        .spec("affinity", anti),
        res(pod("p1.2").node_name("node1").priority(MID), 100),
        res(pod("p1.3").node_name("node1").priority(HIGH), 100),
        res(pod("p2").node_name("node2").priority(HIGH), 100),
    ];
    let mut f = Fixture::new(profile(&["InterPodAffinity"], None), &nodes, &pods);
    let p = f.info(&res(pod("p").label("foo", "").priority(HIGH), 100));
    let got = f.dry_run(&p, json!({}), &["node1", "node2"], 0);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(f.cx.cache.node(got[0].node).unwrap().name.as_ref(), "node1");
    assert_eq!(victims(&got[0]), ["p1.1"]);
}

/// `pod` being deleted; `by_preemption` adds the DisruptionTarget condition preemption sets.
fn terminating(b: PodBuilder, by_preemption: bool) -> PodBuilder {
    let b = b.meta("deletionTimestamp", json!("2024-01-01T00:00:00Z"));
    if !by_preemption {
        return b;
    }
    b.status(
        "conditions",
        json!([{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]),
    )
}

#[test]
fn eligibility_follows_upstream_cases() {
    struct Case {
        name: &'static str,
        pods: Vec<PodBuilder>,
        preemptor: PodBuilder,
        nominated: bool,
        /// Whether node1's Filter status was Unschedulable (else Unresolvable).
        node1_resolvable: bool,
        want: Result<(), &'static str>,
    }
    let cases = vec![
        Case {
            name: "Pod with nominated node",
            pods: vec![terminating(
                pod("p_with_nominated_node")
                    .node_name("node1")
                    .priority(LOW),
                true,
            )],
            preemptor: pod("p").priority(HIGH),
            nominated: true,
            node1_resolvable: true,
            want: Err(NOT_ELIGIBLE_TERMINATING),
        },
        Case {
            name: "Pod without nominated node",
            pods: vec![terminating(
                pod("p_without_nominated_node")
                    .node_name("node1")
                    .priority(LOW),
                true,
            )],
            preemptor: pod("p").priority(HIGH),
            nominated: false,
            node1_resolvable: true,
            want: Ok(()),
        },
        Case {
            name: "Pod with 'PreemptNever' preemption policy",
            pods: vec![],
            preemptor: pod("p")
                .priority(HIGH)
                .spec("preemptionPolicy", json!("Never")),
            nominated: false,
            node1_resolvable: true,
            want: Err(NOT_ELIGIBLE_POLICY),
        },
        Case {
            name: "victim Pods terminating but not due to preemption",
            pods: vec![terminating(
                pod("p_terminating").node_name("node1").priority(LOW),
                false,
            )],
            preemptor: pod("p").priority(HIGH),
            nominated: true,
            node1_resolvable: true,
            want: Ok(()),
        },
        Case {
            name: "non-victim Pods terminating",
            pods: vec![terminating(
                pod("p_higher").node_name("node1").priority(VERY_HIGH),
                true,
            )],
            preemptor: pod("p").priority(HIGH),
            nominated: true,
            node1_resolvable: true,
            want: Ok(()),
        },
        Case {
            name: "nominated node status is UnschedulableAndUnresolvable",
            pods: vec![terminating(
                pod("p_with_nominated_node")
                    .node_name("node1")
                    .priority(LOW),
                true,
            )],
            preemptor: pod("p").priority(HIGH),
            nominated: true,
            node1_resolvable: false,
            want: Ok(()),
        },
    ];
    for c in cases {
        let mut f = Fixture::new(profile(&[], None), &[big_node("node1")], &c.pods);
        let p = Arc::new(f.info(&c.preemptor));
        if c.nominated {
            f.nominator.add(p.clone(), "node1".into());
        }
        let resolvable = if c.node1_resolvable {
            vec![f.idx("node1")]
        } else {
            vec![]
        };
        let (state, diagnosis) = (CycleState::default(), Diagnosis::default());
        let mut rng = SplitMix64::new(0);
        let ctx = PostFilterContext {
            cluster: &f.cx,
            profile: &f.profile,
            state: &state,
            diagnosis: &diagnosis,
            resolvable: &resolvable,
            nominator: &f.nominator,
            rng: &mut rng,
        };
        assert_eq!(eligible(&ctx, &p), c.want, "{}", c.name);
    }
}

#[test]
fn a_priority_class_with_preemption_policy_never_stops_preemption() {
    let mut f = Fixture::new(
        profile(&[], None),
        &[node("node1").alloc("pods", "1")],
        &[pod("p1").node_name("node1")],
    );
    let pc: berth_api::k8s_openapi::api::scheduling::v1::PriorityClass = serde_json::from_value(
        json!({"metadata": {"name": "polite"}, "value": 1000, "preemptionPolicy": "Never"}),
    )
    .unwrap();
    f.cx.cache
        .priority_classes
        .insert("polite".into(), Arc::new(pc));
    let p = f.info(
        &pod("p")
            .priority(1000)
            .spec("priorityClassName", json!("polite")),
    );
    let r = f.post_filter(&p, None);
    assert_eq!(r.nomination, Nomination::Keep);
    assert!(r.victims.is_empty());
    assert_eq!(
        upstream_message(&r),
        "preemption: not eligible due to preemptionPolicy=Never."
    );
}

#[test]
fn args_are_validated_when_the_plugin_is_built() {
    let err =
        DefaultPreemption::new(Some(&json!({"minCandidateNodesPercentage": 200}))).unwrap_err();
    assert_eq!(err.field, "minCandidateNodesPercentage");
    let p = DefaultPreemption::new(None).unwrap();
    assert_eq!(p.args(), DefaultPreemptionArgs::default());
}

// Scheduler-level runs.

fn apply(s: &mut Scheduler, now: Time, b: &PodBuilder) {
    s.handle(now, Event::Applied(Object::Pod(b.build())));
}

/// Plays the API server until nothing more happens: binds (with their PreBind
/// annotations), nominations, and the reservations the core creates (they come back with a
/// UID; deleting one is immediate). Pod deletions are left to the test (graceful
/// termination takes time). Returns every effect.
fn run(s: &mut Scheduler, now: Time) -> Vec<Effect> {
    let mut all = Vec::new();
    for _ in 0..20 {
        s.run_until_idle(now);
        let effects: Vec<Effect> = std::iter::from_fn(|| s.poll_effect()).collect();
        if effects.is_empty() {
            break;
        }
        for e in &effects {
            let pod_update = |s: &Scheduler, key: &ObjectKey, set: &dyn Fn(&mut Value)| {
                let info = s.cluster.cache.pod(key).map(|e| e.info.clone())?;
                let mut v = serde_json::to_value(&*info.pod).unwrap();
                set(&mut v);
                Some(Object::Pod(Arc::new(serde_json::from_value(v).unwrap())))
            };
            let applied = match e {
                Effect::Bind {
                    pod,
                    node,
                    annotations,
                    ..
                } => pod_update(s, pod, &|v| {
                    v["spec"]["nodeName"] = json!(node);
                    for (k, a) in annotations {
                        v["metadata"]["annotations"][k] = json!(a);
                    }
                }),
                Effect::NominatePod { pod, node } => {
                    pod_update(s, pod, &|v| v["status"]["nominatedNodeName"] = json!(node))
                }
                Effect::CreateReservation(r) => {
                    let mut v = serde_json::to_value(&**r).unwrap();
                    let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
                    v["metadata"]["uid"] = json!(format!("uid-{name}"));
                    v["metadata"]["creationTimestamp"] = json!(crate::time::rfc3339(now));
                    Some(Object::Reservation(Arc::new(
                        serde_json::from_value(v).unwrap(),
                    )))
                }
                Effect::Delete { key, .. } if key.kind == crate::object::Kind::Reservation => {
                    s.handle(now, Event::Deleted(key.clone()));
                    None
                }
                _ => None,
            };
            if let Some(obj) = applied {
                s.handle(now, Event::Applied(obj));
            }
        }
        all.extend(effects);
    }
    all
}

fn bound(s: &Scheduler, name: &str) -> Option<String> {
    let e = s.cluster.cache.pod(&ObjectKey::pod("default", name))?;
    (e.state == crate::cache::PodState::Bound)
        .then(|| e.info.node_name.as_deref().unwrap_or("").to_string())
}

fn deleted(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Delete { key, .. } => Some(key.name.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_high_priority_pod_preempts_a_low_one_and_binds_once_it_is_gone() {
    let mut s = Scheduler::new(vec![Profile::default_profile()], Config::default());
    s.handle(
        0,
        Event::Applied(Object::Node(node("n1").alloc("cpu", "2").build())),
    );
    apply(
        &mut s,
        0,
        &pod("low").req("cpu", "2").priority(LOW).node_name("n1"),
    );
    apply(&mut s, 0, &pod("high").req("cpu", "2").priority(HIGH));
    let effects = run(&mut s, 0);
    assert_eq!(deleted(&effects), ["low"]);
    let preempted = effects.iter().find_map(|e| match e {
        Effect::Record(r) if r.reason == "Preempted" => Some((
            r.involved.name.to_string(),
            r.uid.clone(),
            r.message.clone(),
        )),
        _ => None,
    });
    assert_eq!(
        preempted,
        Some((
            "low".into(),
            "uid-low".into(),
            "Preempted by pod default/high (uid-high) on node n1".into()
        ))
    );
    // The FitError carries no preemption message when preemption succeeded.
    let condition = effects.iter().find_map(|e| match e {
        Effect::PodCondition { pod, message, .. } if &*pod.name == "high" => Some(message.clone()),
        _ => None,
    });
    assert_eq!(
        condition.as_deref(),
        Some("0/1 nodes are available: 1 Insufficient cpu.")
    );
    let nominate = effects
        .iter()
        .position(|e| matches!(e, Effect::NominatePod { node: Some(n), .. } if n == "n1"));
    let cond = effects
        .iter()
        .position(|e| matches!(e, Effect::PodCondition { .. }));
    assert!(
        nominate > cond,
        "nominatedNodeName follows the condition: {effects:?}"
    );
    assert_eq!(
        s.nominator()
            .node_of(&ObjectKey::pod("default", "high"))
            .map(|n| &**n),
        Some("n1")
    );
    assert_eq!(bound(&s, "high"), None);
    // The victim goes; the preemptor is retried and binds.
    s.handle(0, Event::Deleted(ObjectKey::pod("default", "low")));
    run(&mut s, 0);
    assert_eq!(bound(&s, "high").as_deref(), Some("n1"));
    assert!(s.nominator().is_empty());
}

#[test]
fn a_lower_priority_pod_cannot_take_the_room_freed_for_a_nominated_pod() {
    let mut s = Scheduler::new(vec![Profile::default_profile()], Config::default());
    s.handle(
        0,
        Event::Applied(Object::Node(node("n1").alloc("cpu", "2").build())),
    );
    apply(
        &mut s,
        0,
        &pod("low").req("cpu", "2").priority(LOW).node_name("n1"),
    );
    apply(&mut s, 0, &pod("high").req("cpu", "2").priority(HIGH));
    run(&mut s, 0);
    // A mid-priority pod arrives and the victim leaves at once: the mid pod is tried first
    // (the preemptor is still backing off) but the room is the preemptor's.
    apply(&mut s, 0, &pod("mid").req("cpu", "1").priority(MID));
    s.handle(0, Event::Deleted(ObjectKey::pod("default", "low")));
    let effects = run(&mut s, 0);
    assert_eq!(bound(&s, "mid"), None, "{effects:?}");
    assert_eq!(bound(&s, "high").as_deref(), Some("n1"));
}

#[test]
fn in_a_batch_only_the_nominated_node_keeps_its_room_for_the_preemptor() {
    // Three nodes are filtered in one batch: the nominated one must turn the mid pod away
    // (its batch verdict, without the nominated pod, would let it in, and it would score
    // best: it is the largest), the full one rejects it and the one with room takes it.
    // Without a hold (kube-scheduler's preemption) the nomination alone keeps the room.
    let mut s = Scheduler::new(
        vec![profile(&[], Some(json!({"reservationBacked": false})))],
        Config::default(),
    );
    for (n, cpu) in [("n1", "8"), ("n2", "2"), ("n3", "2")] {
        s.handle(
            0,
            Event::Applied(Object::Node(node(n).alloc("cpu", cpu).build())),
        );
    }
    apply(
        &mut s,
        0,
        &pod("low").req("cpu", "8").priority(LOW).node_name("n1"),
    );
    apply(
        &mut s,
        0,
        &pod("keeper").req("cpu", "2").priority(HIGH).node_name("n2"),
    );
    apply(
        &mut s,
        0,
        &pod("filler").req("cpu", "2").priority(HIGH).node_name("n3"),
    );
    apply(&mut s, 0, &pod("high").req("cpu", "8").priority(HIGH));
    run(&mut s, 0);
    assert_eq!(
        s.nominator()
            .node_of(&ObjectKey::pod("default", "high"))
            .map(|n| &**n),
        Some("n1")
    );
    // The victim leaves and n3 frees up before the preemptor's retry.
    s.handle(0, Event::Deleted(ObjectKey::pod("default", "filler")));
    apply(&mut s, 0, &pod("mid").req("cpu", "1").priority(MID));
    s.handle(0, Event::Deleted(ObjectKey::pod("default", "low")));
    let effects = run(&mut s, 0);
    assert_eq!(bound(&s, "mid").as_deref(), Some("n3"), "{effects:?}");
    assert_eq!(bound(&s, "high").as_deref(), Some("n1"));
}

#[test]
fn a_pod_that_cannot_preempt_says_why_and_evicts_nothing() {
    let mut s = Scheduler::new(vec![Profile::default_profile()], Config::default());
    s.handle(
        0,
        Event::Applied(Object::Node(node("n1").alloc("cpu", "2").build())),
    );
    apply(
        &mut s,
        0,
        &pod("low").req("cpu", "2").priority(LOW).node_name("n1"),
    );
    apply(
        &mut s,
        0,
        &pod("polite")
            .req("cpu", "2")
            .priority(HIGH)
            .spec("preemptionPolicy", json!("Never")),
    );
    apply(&mut s, 0, &pod("peer").req("cpu", "2").priority(LOW));
    let effects = run(&mut s, 0);
    assert!(deleted(&effects).is_empty());
    let message = |name: &str| {
        effects.iter().find_map(|e| match e {
            Effect::PodCondition { pod, message, .. } if &*pod.name == name => {
                Some(message.clone())
            }
            _ => None,
        })
    };
    assert_eq!(
        message("polite").as_deref(),
        Some("0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, preemption: not eligible due to preemptionPolicy=Never.")
    );
    assert_eq!(
        message("peer").as_deref(),
        Some("0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")
    );
    assert!(!effects
        .iter()
        .any(|e| matches!(e, Effect::NominatePod { .. })));
}

#[test]
fn a_preemptor_waits_for_its_terminating_victims_instead_of_preempting_again() {
    let mut s = Scheduler::new(vec![Profile::default_profile()], Config::default());
    for n in ["n1", "n2"] {
        s.handle(
            0,
            Event::Applied(Object::Node(node(n).alloc("cpu", "2").build())),
        );
    }
    apply(
        &mut s,
        0,
        &pod("a").req("cpu", "2").priority(LOW).node_name("n1"),
    );
    apply(
        &mut s,
        0,
        &pod("b").req("cpu", "2").priority(LOW).node_name("n2"),
    );
    apply(&mut s, 0, &pod("high").req("cpu", "2").priority(HIGH));
    let effects = run(&mut s, 0);
    let first = deleted(&effects);
    assert_eq!(first.len(), 1);
    let victim = first[0].clone();
    let node = s
        .nominator()
        .node_of(&ObjectKey::pod("default", "high"))
        .unwrap()
        .to_string();
    // The victim starts terminating (graceful deletion) instead of vanishing.
    let info = s
        .cluster
        .cache
        .pod(&ObjectKey::pod("default", &victim))
        .unwrap()
        .info
        .clone();
    let mut v = serde_json::to_value(&*info.pod).unwrap();
    v["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    v["status"]["conditions"] =
        json!([{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]);
    s.handle(
        1,
        Event::Applied(Object::Pod(Arc::new(serde_json::from_value(v).unwrap()))),
    );
    let effects = run(&mut s, 20_000);
    assert!(
        deleted(&effects).is_empty(),
        "no second preemption: {effects:?}"
    );
    assert_eq!(
        s.nominator()
            .node_of(&ObjectKey::pod("default", "high"))
            .map(|n| n.to_string()),
        Some(node)
    );
}

#[test]
fn preemption_prefers_the_node_where_no_budget_is_violated_and_holds_it_for_the_preemptor() {
    // tests/scenarios/preemption/basic.yaml, without the simulator.
    let mut s = Scheduler::new(vec![Profile::default_profile()], Config::default());
    for n in ["n1", "n2"] {
        s.handle(
            0,
            Event::Applied(Object::Node(node(n).alloc("cpu", "2").build())),
        );
    }
    let pdb: berth_api::k8s_openapi::api::policy::v1::PodDisruptionBudget =
        serde_json::from_value(json!({
            "metadata": {"name": "batch", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "batch"}}}
        }))
        .unwrap();
    s.handle(
        0,
        Event::Applied(Object::PodDisruptionBudget(Arc::new(pdb))),
    );
    apply(
        &mut s,
        0,
        &pod("web-1")
            .label("app", "web")
            .req("cpu", "2")
            .priority(MID)
            .node_name("n1"),
    );
    for b in ["batch-1", "batch-2"] {
        apply(
            &mut s,
            0,
            &pod(b)
                .label("app", "batch")
                .req("cpu", "1")
                .priority(MID)
                .node_name("n2"),
        );
    }
    apply(&mut s, 0, &pod("critical").req("cpu", "2").priority(HIGH));
    apply(
        &mut s,
        0,
        &pod("polite")
            .req("cpu", "1")
            .priority(HIGH)
            .spec("preemptionPolicy", json!("Never")),
    );
    let effects = run(&mut s, 0);
    assert_eq!(deleted(&effects), ["web-1"]);
    s.handle(0, Event::Deleted(ObjectKey::pod("default", "web-1")));
    let effects = run(&mut s, 0);
    assert_eq!(bound(&s, "critical").as_deref(), Some("n1"), "{effects:?}");
    assert_eq!(bound(&s, "polite"), None);
    assert_eq!(bound(&s, "batch-1").as_deref(), Some("n2"));
}

#[test]
fn deleting_a_nominated_pod_wakes_the_pods_its_nomination_turned_away() {
    let mut s = Scheduler::new(vec![Profile::default_profile()], Config::default());
    s.handle(
        0,
        Event::Applied(Object::Node(node("n1").alloc("cpu", "4").build())),
    );
    apply(
        &mut s,
        0,
        &pod("low").req("cpu", "2").priority(LOW).node_name("n1"),
    );
    apply(&mut s, 0, &pod("high").req("cpu", "4").priority(HIGH));
    let effects = run(&mut s, 0);
    assert_eq!(deleted(&effects), ["low"]);
    // The victim terminates slowly; a mid-priority pod that would fit beside it is turned
    // away by the nomination.
    let info = s
        .cluster
        .cache
        .pod(&ObjectKey::pod("default", "low"))
        .unwrap()
        .info
        .clone();
    let mut v = serde_json::to_value(&*info.pod).unwrap();
    v["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    s.handle(
        0,
        Event::Applied(Object::Pod(Arc::new(serde_json::from_value(v).unwrap()))),
    );
    apply(&mut s, 0, &pod("mid").req("cpu", "2").priority(MID));
    run(&mut s, 0);
    assert_eq!(bound(&s, "mid"), None);
    // The preemptor is deleted: its nomination goes, and with it the reason mid waited.
    s.handle(10, Event::Deleted(ObjectKey::pod("default", "high")));
    let effects = run(&mut s, 10);
    assert!(s.nominator().is_empty());
    assert_eq!(bound(&s, "mid").as_deref(), Some("n1"), "{effects:?}");
}

mod reservations {
    //! Preemption and reservations: stand-ins are never victims, a non-owner never gains
    //! reserved capacity, owners preempt owners only with `enablePreemption`.

    use super::*;
    use crate::reservation::testkit::{reservation, Sim};
    use crate::testing::Profiles;

    /// The default profile with the Reservation plugin's `enablePreemption` set.
    fn sim(enable_preemption: bool) -> Sim {
        Sim::new(Profiles::new(move || {
            let cfg = json!({"pluginConfig": [{"name": "Reservation",
                "args": {"enablePreemption": enable_preemption}}]});
            let pc: ProfileConfig = serde_json::from_value(cfg).unwrap();
            vec![Profile::from_config(&pc).unwrap()]
        }))
    }

    /// A 4-CPU node with a reusable 4-CPU reservation for `app=web`, and a low-priority
    /// owner using half of it.
    fn reserved_node(enable_preemption: bool) -> Sim {
        let mut s = sim(enable_preemption);
        s.node(node("n1").alloc("cpu", "4").build());
        s.reservation(
            reservation("r")
                .req("cpu", "4")
                .owner_label("app", "web")
                .reusable()
                .build(),
        );
        s.pod(
            pod("low-owner")
                .label("app", "web")
                .req("cpu", "2")
                .priority(LOW)
                .build(),
        );
        assert_eq!(s.allocated_from("low-owner").as_deref(), Some("r"));
        s
    }

    fn preempted(s: &Sim) -> Vec<String> {
        s.events()
            .iter()
            .filter(|r| r.reason == "Preempted" && r.message.starts_with("Preempted by"))
            .map(|r| r.involved.name.to_string())
            .collect()
    }

    #[test]
    fn a_non_owner_cannot_preempt_its_way_into_reserved_capacity() {
        for enable in [false, true] {
            let mut s = reserved_node(enable);
            // Evicting the owner would only give its 2 CPUs back to the reservation.
            s.pod(pod("vip").req("cpu", "2").priority(VERY_HIGH).build());
            assert_eq!(s.bound("vip"), None, "enablePreemption={enable}");
            assert_eq!(s.bound("low-owner").as_deref(), Some("n1"));
            assert!(preempted(&s).is_empty(), "enablePreemption={enable}");
            assert_eq!(s.phase("r"), "Available");
        }
    }

    #[test]
    fn an_owner_preempts_a_lower_priority_owner_inside_the_reservation_only_when_enabled() {
        // Without enablePreemption: the pod inside the reservation is no victim.
        let mut s = reserved_node(false);
        s.pod(
            pod("high-owner")
                .label("app", "web")
                .req("cpu", "4")
                .priority(HIGH)
                .build(),
        );
        assert_eq!(s.bound("high-owner"), None);
        assert!(preempted(&s).is_empty());
        assert!(
            s.message("high-owner")
                .is_some_and(|m| m.contains("No preemption victims found")),
            "{:?}",
            s.message("high-owner")
        );
        // With it: the lower-priority owner goes and the higher one takes its share.
        let mut s = reserved_node(true);
        s.pod(
            pod("high-owner")
                .label("app", "web")
                .req("cpu", "4")
                .priority(HIGH)
                .build(),
        );
        assert_eq!(preempted(&s), ["low-owner"]);
        assert_eq!(s.bound("low-owner"), None);
        assert_eq!(s.bound("high-owner").as_deref(), Some("n1"));
        assert_eq!(s.allocated_from("high-owner").as_deref(), Some("r"));
    }

    #[test]
    fn a_reservation_stand_in_is_never_a_victim() {
        let mut s = sim(true);
        s.node(node("n1").alloc("cpu", "4").build());
        s.reservation(
            reservation("r")
                .req("cpu", "4")
                .owner_label("app", "web")
                .template_spec("priority", json!(0))
                .build(),
        );
        assert_eq!(s.phase("r"), "Available");
        s.pod(pod("vip").req("cpu", "4").priority(VERY_HIGH).build());
        assert_eq!(s.bound("vip"), None);
        assert_eq!(s.phase("r"), "Available");
        assert!(s.reservations().contains_key("r"));
        assert!(preempted(&s).is_empty());
    }
}

mod holds {
    //! Reservation-backed preemption through the scheduler, with the API server played by
    //! the test: reservations the core creates come back with a UID; victims are deleted
    //! when the test says so (graceful termination takes time).

    use super::*;
    use berth_api::reservation::ReservationPhase;

    fn hold_phase(s: &Scheduler) -> Option<ReservationPhase> {
        s.cluster
            .reservations
            .by_name("preempt-default-high")
            .map(|r| r.phase.clone())
    }

    /// n1 (2 CPUs) runs `low`; `high` preempts it; `boss`, of higher priority but not
    /// allowed to preempt, waits for room too. Returns the scheduler with `low` still
    /// terminating.
    fn preempted(args: Option<Value>) -> Scheduler {
        let mut prof = Profile::default_profile();
        if let Some(a) = args {
            let cfg = json!({"pluginConfig": [{"name": "DefaultPreemption", "args": a}]});
            let pc: ProfileConfig = serde_json::from_value(cfg).unwrap();
            prof = Profile::from_config(&pc).unwrap();
        }
        let mut s = Scheduler::new(vec![prof], Config::default());
        s.handle(
            0,
            Event::Applied(Object::Node(node("n1").alloc("cpu", "2").build())),
        );
        apply(
            &mut s,
            0,
            &pod("low").req("cpu", "2").priority(LOW).node_name("n1"),
        );
        apply(
            &mut s,
            0,
            &pod("boss")
                .req("cpu", "2")
                .priority(VERY_HIGH)
                .spec("preemptionPolicy", json!("Never")),
        );
        apply(&mut s, 0, &pod("high").req("cpu", "2").priority(HIGH));
        let effects = run(&mut s, 0);
        assert_eq!(deleted(&effects), ["low"]);
        s
    }

    #[test]
    fn the_freed_room_is_held_for_the_preemptor_against_any_priority() {
        let mut s = preempted(None);
        // Placed while the victim still runs: waiting for it.
        assert_eq!(hold_phase(&s), Some(ReservationPhase::Waiting));
        let r = s
            .cluster
            .reservations
            .by_name("preempt-default-high")
            .unwrap();
        assert_eq!(r.node_name.as_deref(), Some("n1"));
        assert_eq!(s.counters.preemption_victims, 1);
        s.handle(1, Event::Deleted(ObjectKey::pod("default", "low")));
        assert_eq!(hold_phase(&s), Some(ReservationPhase::Available));
        let effects = run(&mut s, 1);
        assert_eq!(bound(&s, "boss"), None, "{effects:?}");
        assert_eq!(bound(&s, "high").as_deref(), Some("n1"));
        let allocated = effects.iter().find_map(|e| match e {
            Effect::Bind {
                pod, annotations, ..
            } if &*pod.name == "high" => annotations
                .get(berth_api::annotations::ANNOTATION_RESERVATION_ALLOCATED)
                .cloned(),
            _ => None,
        });
        assert!(
            allocated.is_some_and(|a| a.contains("preempt-default-high")),
            "{effects:?}"
        );
        assert_eq!(hold_phase(&s), Some(ReservationPhase::Succeeded));
        assert_eq!(s.counters.preemption_holds_completed, 1);
        assert_eq!(s.counters.preemption_holds_expired, 0);
    }

    /// The hold's creation comes before the victim's deletion, which names the hold (the
    /// driver orders the two) and what the victim's DisruptionTarget condition says.
    #[test]
    fn the_victims_deletion_follows_and_names_the_hold() {
        let mut s = Scheduler::new(vec![Profile::default_profile()], Config::default());
        s.handle(
            0,
            Event::Applied(Object::Node(node("n1").alloc("cpu", "2").build())),
        );
        apply(
            &mut s,
            0,
            &pod("low").req("cpu", "2").priority(LOW).node_name("n1"),
        );
        apply(&mut s, 0, &pod("high").req("cpu", "2").priority(HIGH));
        let effects = run(&mut s, 0);
        let create = effects
            .iter()
            .position(|e| matches!(e, Effect::CreateReservation(_)))
            .expect("the hold is created");
        let (delete, preemption) = effects
            .iter()
            .enumerate()
            .find_map(|(i, e)| match e {
                Effect::Delete {
                    key, preemption, ..
                } if &*key.name == "low" => Some((i, preemption.clone())),
                _ => None,
            })
            .expect("the victim is deleted");
        assert!(create < delete, "{effects:?}");
        let p = preemption.expect("a preemption victim's deletion says so");
        assert_eq!(p.preemptor, ObjectKey::pod("default", "high"));
        assert_eq!(p.hold.as_deref(), Some("preempt-default-high"));
        assert_eq!(
            p.message(),
            "default-scheduler: preempting to accommodate a higher priority pod"
        );
    }

    #[test]
    fn without_the_hold_a_higher_priority_pod_takes_the_freed_room() {
        let mut s = preempted(Some(json!({"reservationBacked": false})));
        assert_eq!(hold_phase(&s), None);
        s.handle(1, Event::Deleted(ObjectKey::pod("default", "low")));
        run(&mut s, 1);
        assert_eq!(bound(&s, "boss").as_deref(), Some("n1"));
        assert_eq!(bound(&s, "high"), None);
    }

    #[test]
    fn the_hold_expires_when_the_preemptor_is_deleted_first() {
        let mut s = preempted(None);
        let deletes = |effects: &[Effect]| {
            effects
                .iter()
                .filter(|e| matches!(e, Effect::Delete { key, .. } if &*key.name == "preempt-default-high"))
                .count()
        };
        let mut s2 = preempted(None);
        s2.handle(1, Event::Deleted(ObjectKey::pod("default", "high")));
        let effects: Vec<Effect> = std::iter::from_fn(|| s2.poll_effect()).collect();
        assert_eq!(deletes(&effects), 1, "{effects:?}");
        s.handle(1, Event::Deleted(ObjectKey::pod("default", "high")));
        assert_eq!(hold_phase(&s), None, "gone with its preemptor");
        let effects = run(&mut s, 1);
        assert!(
            !effects
                .iter()
                .any(|e| matches!(e, Effect::ReservationStatus { .. })),
            "no status for a reservation being deleted: {effects:?}"
        );
        assert_eq!(s.counters.preemption_holds_expired, 1);
        s.handle(2, Event::Deleted(ObjectKey::pod("default", "low")));
        run(&mut s, 2);
        assert_eq!(bound(&s, "boss").as_deref(), Some("n1"));
    }

    #[test]
    fn the_hold_expires_after_its_ttl_when_the_preemptor_never_comes() {
        let mut s = preempted(Some(json!({"reservationTTL": "1m"})));
        s.handle(1, Event::Deleted(ObjectKey::pod("default", "low")));
        // The preemptor is gone from the queue's view: it now names a node selector no node
        // has (an update), so it cannot take its reservation.
        apply(
            &mut s,
            1,
            &pod("high")
                .req("cpu", "2")
                .priority(HIGH)
                .spec("nodeSelector", json!({"zone": "nowhere"})),
        );
        run(&mut s, 1);
        assert_eq!(bound(&s, "high"), None);
        assert_eq!(bound(&s, "boss"), None, "held until the TTL");
        assert_eq!(hold_phase(&s), Some(ReservationPhase::Available));
        let due = s.poll_timeout().expect("the expiry is due");
        assert!(due <= 60_000, "{due}");
        s.handle_timeout(60_000);
        run(&mut s, 60_000);
        assert_eq!(hold_phase(&s), Some(ReservationPhase::Failed));
        assert_eq!(s.counters.preemption_holds_expired, 1);
        assert_eq!(bound(&s, "boss").as_deref(), Some("n1"));
    }
}
