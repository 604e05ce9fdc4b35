//! `berth explain`: every scenario of the standard, reservation and NUMA sets agrees with the
//! scheduler's own message (every reason it counted is among explain's, on at least as many
//! nodes), and hand-made cases check each rejection kind with its reason, the reservations'
//! verdicts and the smallest change.

use std::path::{Path, PathBuf};

use berth_core::explain::{explain, Change, Explanation, ReservationVerdict, Target};
use berth_core::{Config, Kind, Object, ObjectKey};
use berth_sim::explain::{render, ExplainFormat};
use berth_sim::input::parse_str;
use berth_sim::sim::pod_scheduled_message;
use berth_sim::{load_config, Simulation};

fn scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios")
}

fn simulate(text: &str) -> Simulation {
    let input = parse_str("t.yaml", text).expect("valid input");
    Simulation::run(vec![], Config::default(), &input)
}

fn explain_pod(sim: &Simulation, name: &str) -> Explanation {
    explain(
        sim.core(),
        &Target::Pod(ObjectKey::pod("default", name)),
        sim.now(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// `(count, reason)` pairs of a `0/N nodes are available: 2 Insufficient cpu, ...` message,
/// without the PostFilter part (after the first `. `); a PreFilter message (no counts) gives
/// count 0.
fn message_reasons(message: &str) -> Vec<(u32, String)> {
    let Some((_, rest)) = message.split_once("nodes are available: ") else {
        return Vec::new();
    };
    let rest = rest.split(". ").next().unwrap_or("");
    let rest = rest.trim_end().trim_end_matches('.');
    let mut out = Vec::new();
    for part in split_reasons(rest) {
        let part = part.trim();
        match part.split_once(' ') {
            Some((n, reason)) if n.parse::<u32>().is_ok() => {
                out.push((n.parse().unwrap_or(0), reason.to_string()))
            }
            _ => out.push((0, part.to_string())),
        }
    }
    out
}

/// Splits on ", " outside braces (taints print as `{k: v}`, and reasons may hold commas
/// inside brackets).
fn split_reasons(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => depth -= 1,
            _ => {}
        }
        if depth == 0 && c == ',' && chars.get(i + 1) == Some(&' ') {
            out.push(std::mem::take(&mut cur));
            i += 2;
            continue;
        }
        cur.push(c);
        i += 1;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// How many nodes explain rejected with `reason` (by any plugin).
fn nodes_with_reason(e: &Explanation, reason: &str) -> u32 {
    e.nodes
        .iter()
        .filter(|n| {
            n.rejections
                .iter()
                .any(|r| r.reasons.iter().any(|x| x == reason))
        })
        .count() as u32
}

#[test]
fn explain_agrees_with_the_scheduler_on_every_scenario() {
    let mut checked = 0;
    for set in [
        "basic",
        "reservation",
        "volumes",
        "numa",
        "acceptance",
        "preemption",
        "priority",
        "node-reservation",
        "dra",
    ] {
        let dir = scenarios().join(set);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path).expect("readable");
            if text.lines().any(|l| l.starts_with("# expect-exit:")) {
                continue;
            }
            let profiles = match text.lines().find_map(|l| l.strip_prefix("# config: ")) {
                Some(c) => {
                    let cfg = scenarios().join("configs").join(c.trim());
                    load_config(&cfg.to_string_lossy()).expect("config")
                }
                None => vec![],
            };
            let name = path.display().to_string();
            let input = berth_sim::input::parse_str(&name, &text).expect("valid");
            let sim = Simulation::run(profiles, Config::default(), &input);
            for obj in sim.store().of_kind(Kind::Pod) {
                let Object::Pod(p) = obj else { continue };
                let bound = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some_and(|n| !n.is_empty());
                let Some(message) = pod_scheduled_message(p) else {
                    continue;
                };
                if bound || !message.starts_with("0/") {
                    continue;
                }
                let key = obj.key();
                let Ok(e) = explain(sim.core(), &Target::Pod(key.clone()), sim.now()) else {
                    continue;
                };
                // Rendering never fails, in either format.
                render(&e, ExplainFormat::Text).expect("text");
                render(&e, ExplainFormat::Json).expect("json");
                if e.placed.is_some() {
                    continue;
                }
                for (count, reason) in message_reasons(&message) {
                    // Whether a node's NUMA data is stale depends on when the pod was last
                    // tried; explain looks at the end of the input.
                    if reason.contains("topology data is") {
                        continue;
                    }
                    let found = nodes_with_reason(&e, &reason);
                    assert!(
                        found >= count.max(1) || e.pre_filter.iter().any(|r| r.reasons.contains(&reason)),
                        "{name}: {key}: the scheduler said {count} × {reason:?} ({message}); explain found it on {found} node(s):\n{}",
                        berth_sim::explain::text(&e)
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} unschedulable pods checked");
}

const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: NAME, labels: {zone: LABEL}}\nspec: {SPEC}\nstatus: {allocatable: {cpu: \"CPU\", memory: 8Gi, pods: \"110\"}}\n---\n";

fn node(name: &str, cpu: &str, label: &str, spec: &str) -> String {
    NODE.replace("NAME", name)
        .replace("CPU", cpu)
        .replace("LABEL", label)
        .replace("SPEC", spec)
}

fn bound(name: &str, node: &str, cpu: &str, extra: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec: {{nodeName: {node}, containers: [{{name: c, {extra}resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]}}\n---\n")
}

#[test]
fn every_plugin_that_rejects_a_node_is_named_with_its_reason() {
    // n1 is wrong in five ways at once; kube-scheduler would name only the first.
    let text = format!(
        "{}{}{}apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  nodeSelector: {{zone: a}}\n  containers: [{{name: c, ports: [{{containerPort: 80, hostPort: 8080}}], resources: {{requests: {{cpu: \"3\"}}}}}}]\n",
        node("n1", "4", "b", "unschedulable: true, taints: [{key: k, value: v, effect: NoSchedule}]"),
        node("n2", "4", "a", ""),
        bound("web", "n1", "2", "ports: [{containerPort: 80, hostPort: 8080}], ") + &bound("busy", "n2", "2", ""),
    );
    let sim = simulate(&text);
    let e = explain_pod(&sim, "p");
    let n1 = e.nodes.iter().find(|n| n.node == "n1").expect("n1");
    let plugins: Vec<(&str, Vec<&str>)> = n1
        .rejections
        .iter()
        .map(|r| {
            (
                r.plugin.as_str(),
                r.reasons.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    let has = |plugin: &str, reason: &str| {
        n1.rejections
            .iter()
            .any(|r| r.plugin == plugin && r.reasons.iter().any(|x| x.contains(reason)))
    };
    assert!(
        has("NodeUnschedulable", "node(s) were unschedulable"),
        "{plugins:?}"
    );
    assert!(
        has("TaintToleration", "node(s) had untolerated taint(s)"),
        "{plugins:?}"
    );
    // kube-scheduler 1.35's reason names no taint; explain's detail does.
    assert!(
        n1.rejections.iter().any(|r| r.plugin == "TaintToleration"
            && r.detail.as_deref() == Some("untolerated taint {k: v}")),
        "{plugins:?}"
    );
    assert!(
        has("NodeAffinity", "didn't match Pod's node affinity/selector"),
        "{plugins:?}"
    );
    assert!(has("NodePorts", "didn't have free ports"), "{plugins:?}");
    assert!(has("NodeResourcesFit", "Insufficient cpu"), "{plugins:?}");
    // n2 only lacks CPU: the smallest change is there, by exactly what it lacks.
    let n2 = e.nodes.iter().find(|n| n.node == "n2").expect("n2");
    assert_eq!(n2.rejections.len(), 1, "{:?}", n2.rejections);
    match &e.change {
        Change::Resources { node, shortfall } => {
            assert_eq!(node, "n2");
            assert_eq!(shortfall.len(), 1);
            assert_eq!(
                (
                    shortfall[0].resource.as_str(),
                    shortfall[0].requested,
                    shortfall[0].free,
                    shortfall[0].short
                ),
                ("cpu", 3000, 2000, 1000)
            );
        }
        other => panic!("{other:?}"),
    }
    let text = berth_sim::explain::text(&e);
    assert!(
        text.contains("on n2: cpu short by 1 (requested 3, free 2)"),
        "{text}"
    );
}

#[test]
fn the_smallest_change_weighs_shortfalls_against_what_the_node_has() {
    // n-small lacks 1 CPU of 4 (25%); n-big lacks 1.5 CPUs of 16 (9%): n-big is the
    // smaller change even though it lacks more CPU.
    let text = format!(
        "{}{}{}{}apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {{containers: [{{name: c, resources: {{requests: {{cpu: \"2\"}}}}}}]}}\n",
        node("n-small", "4", "a", ""),
        node("n-big", "16", "a", ""),
        bound("f1", "n-small", "3", ""),
        bound("f2", "n-big", "15500m", ""),
    );
    let sim = simulate(&text);
    let e = explain_pod(&sim, "p");
    match &e.change {
        Change::Resources { node, shortfall } => {
            assert_eq!(node, "n-big");
            assert_eq!(shortfall[0].short, 1500);
        }
        other => panic!("{other:?}"),
    }
    assert!(berth_sim::explain::text(&e)
        .contains("on n-big: cpu short by 1500m (requested 2, free 500m)"));
    // Memory and CPU short at once: both are named.
    let text = format!(
        "{}{}apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {{containers: [{{name: c, resources: {{requests: {{cpu: \"2\", memory: 10Gi}}}}}}]}}\n",
        node("n1", "4", "a", ""),
        bound("f1", "n1", "3", ""),
    );
    let e = explain_pod(&simulate(&text), "p");
    match &e.change {
        Change::Resources { shortfall, .. } => {
            let got: Vec<(&str, i64)> = shortfall
                .iter()
                .map(|s| (s.resource.as_str(), s.short))
                .collect();
            assert_eq!(got, [("cpu", 1000), ("memory", 2 << 30)]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn no_change_of_resources_helps_when_other_plugins_reject_everywhere() {
    let text = format!(
        "{}{}apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {{containers: [{{name: c, resources: {{requests: {{cpu: \"8\"}}}}}}]}}\n",
        node("n1", "4", "a", "taints: [{key: k, value: v, effect: NoSchedule}]"),
        node("n2", "4", "a", "taints: [{key: k, value: v, effect: NoSchedule}]"),
    );
    let e = explain_pod(&simulate(&text), "p");
    match &e.change {
        Change::None { why } => {
            assert!(why.starts_with("no change of resources helps"), "{why}");
            assert!(why.contains("TaintToleration"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // Both reasons of each node are counted.
    assert_eq!(
        e.summary,
        "0/2 nodes are available: 2 Insufficient cpu, 2 node(s) had untolerated taint(s)."
    );
}

#[test]
fn a_pod_that_fits_gets_scores_and_no_change() {
    let text = format!(
        "{}{}{}apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: s}}\nspec:\n  steps:\n  - apply: [{{apiVersion: v1, kind: Pod, metadata: {{name: p}}, spec: {{schedulerName: someone-else, containers: [{{name: c, resources: {{requests: {{cpu: \"1\"}}}}}}]}}}}]\n",
        node("n1", "4", "a", ""),
        node("n2", "4", "a", ""),
        bound("f1", "n1", "3", ""),
    );
    let e = explain_pod(&simulate(&text), "p");
    assert!(
        e.notes.iter().any(|n| n.contains("someone-else")),
        "{:?}",
        e.notes
    );
    assert_eq!(e.nodes_feasible, 2);
    assert_eq!(e.best, ["n2"], "the emptier node scores higher");
    let n2 = e.nodes.iter().find(|n| n.node == "n2").expect("n2");
    assert!(
        n2.scores.iter().any(|s| s.plugin == "NodeResourcesFit"),
        "{:?}",
        n2.scores
    );
    assert!(matches!(&e.change, Change::NotNeeded { node } if node == "n1"));
    // A bound pod is only located.
    let e = explain_pod(&simulate(&text), "f1");
    assert_eq!(e.placed.as_ref().map(|p| p.node.as_str()), Some("n1"));
}

fn reservation(name: &str, node: &str, cpu: &str, spec: &str, labels: &str) -> String {
    format!("apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation\nmetadata: {{name: {name}, labels: {{{labels}}}}}\nspec:\n  {spec}\n  template: {{spec: {{nodeName: {node}, containers: [{{name: c, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]}}}}\n  owners: [{{labelSelector: {{matchLabels: {{app: web}}}}}}]\n---\n")
}

#[test]
fn each_owner_matched_reservation_says_why_it_was_not_used() {
    let mut text = String::new();
    for (n, filler) in [
        ("n1", "2"),
        ("n2", "2"),
        ("n3", "2"),
        ("n4", "1"),
        ("n5", "2"),
    ] {
        text += &node(n, "4", "a", "");
        text += &bound(&format!("fill-{n}"), n, filler, "");
    }
    text += &reservation("r-once", "n1", "1", "allocateOnce: true", "");
    text += &reservation("r-expired", "n2", "1", "ttl: 1m", "");
    text += &reservation("r-small", "n3", "1", "allocateOnce: false", "");
    text += &reservation(
        "r-restricted",
        "n4",
        "2",
        "allocateOnce: false\n  allocatePolicy: Restricted",
        "",
    );
    text += &reservation("r-unsched", "n5", "1", "unschedulable: true", "");
    let web = |name: &str, cpu: &str, annotations: &str| {
        format!("{{apiVersion: v1, kind: Pod, metadata: {{name: {name}, labels: {{app: web}}, annotations: {{{annotations}}}}}, spec: {{containers: [{{name: c, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]}}}}")
    };
    text += &format!(
        "apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: s}}\nspec:\n  steps:\n  - apply: [{}]\n  - advance: 2m\n  - apply: [{}]\n",
        web(
            "first",
            "1",
            r#"scheduling.koordinator.sh/reservation-affinity: '{"name":"r-once"}'"#
        ),
        web("big", "3", "")
    );
    let sim = simulate(&text);
    assert_eq!(sim.failed_expectations(), 0, "{:?}", sim.log());
    let e = explain_pod(&sim, "big");
    assert!(e.placed.is_none(), "big must be pending: {:?}", e.placed);
    let verdict = |name: &str| {
        e.reservations
            .iter()
            .find(|r| r.name == name)
            .map(|r| (r.verdict, r.why.clone()))
            .unwrap_or_else(|| panic!("{name} not listed: {:?}", e.reservations))
    };
    let (v, why) = verdict("r-once");
    assert_eq!(v, ReservationVerdict::AllocateOnceConsumed, "{why}");
    assert!(why.contains("default/first"), "{why}");
    let (v, why) = verdict("r-expired");
    assert_eq!(v, ReservationVerdict::Expired, "{why}");
    assert!(why.starts_with("expired at 2024-01-01T00:01:00Z"), "{why}");
    let (v, why) = verdict("r-small");
    assert_eq!(v, ReservationVerdict::Capacity, "{why}");
    assert!(
        why.contains("cpu requested 3, 1 left in it + 1 free on the node = 2 (short by 1)"),
        "{why}"
    );
    let (v, why) = verdict("r-restricted");
    assert_eq!(v, ReservationVerdict::Policy, "{why}");
    assert!(
        why.contains("Restricted") && why.contains("cpu requested 3, 2 left in it"),
        "{why}"
    );
    let (v, why) = verdict("r-unsched");
    assert_eq!(v, ReservationVerdict::Unschedulable, "{why}");
    // The Reservation plugin's own rejections are among the node's: to a pod without
    // reservation affinity, as koord-scheduler v1.8.0 words it, what the node's own free
    // room lacks (its Restricted reservation is too small, and so is the rest of the node).
    let n4 = e.nodes.iter().find(|n| n.node == "n4").expect("n4");
    assert!(
        n4.rejections.iter().any(|r| r.plugin == "Reservation"
            && r.reasons.iter().any(|x| x == "Insufficient cpu by node")),
        "{:?}",
        n4.rejections
    );
    // n2 (free since r-expired let go) and n3 both lack 1 CPU of 4: the first by name.
    match &e.change {
        Change::Resources { node, shortfall } => {
            assert_eq!(node, "n2");
            assert_eq!(shortfall[0].short, 1000);
        }
        other => panic!("{other:?}"),
    }
    let text = berth_sim::explain::text(&e);
    assert!(
        text.contains("RESERVATIONS MATCHING THE POD AS OWNER"),
        "{text}"
    );
    assert!(
        text.contains("r-expired (Failed on n2): expired: expired at"),
        "{text}"
    );
}

#[test]
fn reservation_affinity_and_taints_are_reasons_too() {
    let text = format!(
        "{}{}{}{}apiVersion: v1\nkind: Pod\nmetadata:\n  name: picky\n  labels: {{app: web}}\n  annotations:\n    scheduling.koordinator.sh/reservation-affinity: '{{\"reservationSelector\":{{\"pool\":\"gold\"}}}}'\nspec: {{containers: [{{name: c, resources: {{requests: {{cpu: \"1\"}}}}}}]}}\n",
        node("m1", "4", "a", ""),
        node("m2", "4", "a", ""),
        reservation("r-gold", "m1", "1", "allocateOnce: false\n  taints: [{key: k, value: v, effect: NoSchedule}]", "pool: gold"),
        reservation("r-plain", "m2", "1", "allocateOnce: false", ""),
    );
    let e = explain_pod(&simulate(&text), "picky");
    let get = |name: &str| e.reservations.iter().find(|r| r.name == name).expect(name);
    assert_eq!(get("r-gold").verdict, ReservationVerdict::Taint);
    assert!(
        get("r-gold").why.contains("{k: v}"),
        "{}",
        get("r-gold").why
    );
    assert_eq!(get("r-plain").verdict, ReservationVerdict::Affinity);
    assert!(
        e.pre_filter.iter().any(|r| r.plugin == "Reservation"
            && r.reasons == ["node(s) no reservations match reservation affinity"]),
        "{:?}",
        e.pre_filter
    );
    assert!(
        matches!(&e.change, Change::None { why } if why.contains("Reservation")),
        "{:?}",
        e.change
    );
}

const NRT: &str = "apiVersion: topology.node.k8s.io/v1alpha2\nkind: NodeResourceTopology\nmetadata: {name: NAME}\nattributes:\n  - {name: topologyManagerPolicy, value: single-numa-node}\n  - {name: topologyManagerScope, value: container}\nzones:\n  - name: node-0\n    type: Node\n    resources:\n      - {name: cpu, capacity: \"8\", allocatable: \"8\", available: \"Z0\"}\n      - {name: memory, capacity: 8Gi, allocatable: 8Gi, available: 8Gi}\n  - name: node-1\n    type: Node\n    resources:\n      - {name: cpu, capacity: \"8\", allocatable: \"8\", available: \"Z1\"}\n      - {name: memory, capacity: 8Gi, allocatable: 8Gi, available: 8Gi}\n---\n";

#[test]
fn numa_zones_say_what_each_lacked_and_the_smallest_change_names_the_zone() {
    let nrt = |name: &str, z0: &str, z1: &str| {
        NRT.replace("NAME", name)
            .replace("Z0", z0)
            .replace("Z1", z1)
    };
    let text = format!(
        "{}{}{}{}apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {{containers: [{{name: c, resources: {{requests: {{cpu: \"6\", memory: 1Gi}}, limits: {{cpu: \"6\", memory: 1Gi}}}}}}]}}\n",
        node("a", "16", "x", ""),
        node("b", "16", "x", ""),
        nrt("a", "4", "4"),
        nrt("b", "3", "5"),
    );
    let e = explain_pod(&simulate(&text), "p");
    let a = e.nodes.iter().find(|n| n.node == "a").expect("a");
    assert_eq!(a.rejections.len(), 1, "{:?}", a.rejections);
    assert_eq!(a.rejections[0].plugin, "NodeResourceTopologyMatch");
    assert_eq!(a.rejections[0].reasons, ["cannot align container"]);
    let numa = a.numa.as_ref().expect("NUMA detail");
    assert_eq!((numa.policy, numa.scope), ("single-numa-node", "container"));
    assert_eq!(numa.aligning, "container \"c\" (index 0)");
    let lacks: Vec<(u8, i64)> = numa
        .zones
        .iter()
        .map(|z| {
            (
                z.id,
                z.resources
                    .iter()
                    .find(|r| r.resource == "cpu")
                    .map_or(0, |r| r.lacks),
            )
        })
        .collect();
    assert_eq!(lacks, [(0, 2000), (1, 2000)]);
    assert!(
        numa.rejection
            .as_deref()
            .is_some_and(|r| r.contains("cannot align container \"c\" (index 0): cpu")),
        "{:?}",
        numa.rejection
    );
    // b's zone 1 lacks only 1 CPU (of 5): the smallest change.
    match &e.change {
        Change::Resources { node, shortfall } => {
            assert_eq!(node, "b");
            assert_eq!(shortfall.len(), 1);
            assert_eq!(
                (shortfall[0].scope.as_str(), shortfall[0].short),
                ("numa zone 1", 1000)
            );
        }
        other => panic!("{other:?}"),
    }
    let text = berth_sim::explain::text(&e);
    assert!(text.contains("zone node-0 for the container \"c\" (index 0): cpu wants 6, available 4 (published 4), lacks 2"), "{text}");
    assert!(
        text.contains("on b: cpu short by 1 (requested 6, free 5) in numa zone 1"),
        "{text}"
    );
}

#[test]
fn a_pending_reservation_is_explained_through_its_reserve_pod() {
    let text = format!(
        "{}{}",
        node("n1", "2", "a", ""),
        reservation("r-big", "n1", "4", "allocateOnce: false", "")
    );
    let sim = simulate(&text);
    let e = explain(
        sim.core(),
        &Target::parse("reservation/r-big").expect("target"),
        sim.now(),
    )
    .expect("explained");
    assert_eq!(e.kind, "Reservation");
    assert!(e.placed.is_none());
    let n1 = &e.nodes[0];
    assert!(
        n1.rejections.iter().any(|r| r.plugin == "NodeResourcesFit"),
        "{:?}",
        n1.rejections
    );
    assert!(matches!(&e.change, Change::Resources { node, .. } if node == "n1"));
}

#[test]
fn targets_parse_like_kubectl_names() {
    assert_eq!(
        Target::parse("p"),
        Ok(Target::Pod(ObjectKey::pod("default", "p")))
    );
    assert_eq!(
        Target::parse("ns/p"),
        Ok(Target::Pod(ObjectKey::pod("ns", "p")))
    );
    assert_eq!(
        Target::parse("pod/ns/p"),
        Ok(Target::Pod(ObjectKey::pod("ns", "p")))
    );
    assert_eq!(
        Target::parse("reservation/r"),
        Ok(Target::Reservation("r".into()))
    );
    assert!(Target::parse("reservation/").is_err());
    assert!(Target::parse("a/b/c").is_err());
}

#[test]
fn the_command_explains_files_and_exits_2_for_an_unknown_target() {
    let path = scenarios().join("basic/unschedulable-message.yaml");
    let options = berth_sim::Options {
        files: vec![path.to_string_lossy().into_owned()],
        ..Default::default()
    };
    let out = berth_sim::explain::run("huge", &options, ExplainFormat::Json, &mut std::io::empty());
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(v["name"], "huge");
    assert_eq!(v["change"]["kind"], "resources");
    let out = berth_sim::explain::run(
        "nobody",
        &options,
        ExplainFormat::Text,
        &mut std::io::empty(),
    );
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("pod default/nobody not found"),
        "{}",
        out.stderr
    );
}

#[test]
fn the_readme_shows_what_explain_prints() {
    let readme = std::fs::read_to_string(scenarios().join("../../README.md")).expect("README.md");
    let start = readme
        .find("```text\npod default/p (profile default-scheduler)")
        .expect("the explain example in README.md")
        + "```text\n".len();
    let len = readme[start..].find("```").expect("end of the example");
    let want = &readme[start..start + len];
    let options = berth_sim::Options {
        files: vec![scenarios()
            .join("basic/readme-example-message.yaml")
            .to_string_lossy()
            .into_owned()],
        ..Default::default()
    };
    let out = berth_sim::explain::run("p", &options, ExplainFormat::Text, &mut std::io::empty());
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, want);
}

#[test]
fn explain_names_the_volume_plugins_reasons() {
    let text = std::fs::read_to_string(scenarios().join("volumes/local-pv-other-node.yaml"))
        .expect("scenario");
    let sim = simulate(&text);
    let e = explain_pod(&sim, "b");
    let volume: Vec<(&str, &str)> = e
        .nodes
        .iter()
        .flat_map(|n| {
            n.rejections
                .iter()
                .filter(|r| r.plugin == "VolumeBinding")
                .map(move |r| (n.node.as_str(), r.reasons[0].as_str()))
        })
        .collect();
    assert_eq!(
        volume,
        [
            (
                "n1",
                "node(s) didn't match PersistentVolume's node affinity"
            ),
            (
                "n2",
                "node(s) didn't match PersistentVolume's node affinity"
            ),
        ]
    );
}

/// A strict gang of 8 on room for 6: explain on a member says where the gang stands (none
/// placed of minimum 8), which member did not fit and why, and why the rest were rejected.
#[test]
fn explain_says_where_a_members_gang_stands() {
    let text = std::fs::read_to_string(scenarios().join("gangs/podgroup-8-on-room-for-6.yaml"))
        .expect("scenario");
    let sim = simulate(&text);
    let e = explain_pod(&sim, "w1");
    let g = e.gang.as_ref().expect("a gang report");
    assert_eq!(
        (g.gang.as_str(), g.min, g.members),
        ("default/job", Some(8), 8)
    );
    assert!(g.placed.is_empty() && g.waiting.is_empty(), "{g:?}");
    assert_eq!(g.unplaced.len(), 8);
    let unfit: Vec<&(String, String)> = g
        .unplaced
        .iter()
        .filter(|(_, why)| why.starts_with("0/2 nodes are available: 2 Insufficient cpu"))
        .collect();
    assert_eq!(unfit.len(), 1, "the member that did not fit: {g:?}");
    let text = render(&e, ExplainFormat::Text).expect("text");
    assert!(
        text.contains("gang default/job (Coscheduling): 0 of minimum 8 placed, 8 not placed"),
        "{text}"
    );
    assert!(
        text.contains(&format!("not placed: {}: 0/2 nodes", unfit[0].0)),
        "{text}"
    );
}

/// A NonStrict gang of 8 on room for 6: six members wait at Permit, and explain on one of
/// them counts them and names the two not placed.
#[test]
fn explain_counts_the_members_waiting_at_permit() {
    let mut text = String::from(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: \"3\", memory: 8Gi, pods: \"110\"}}\n---\n\
         apiVersion: v1\nkind: Node\nmetadata: {name: n2}\nstatus: {allocatable: {cpu: \"3\", memory: 8Gi, pods: \"110\"}}\n---\n\
         apiVersion: scheduling.sigs.k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: job, annotations: {gang.scheduling.koordinator.sh/mode: NonStrict}}\nspec: {minMember: 8}\n",
    );
    for i in 1..=8 {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: w{i}, labels: {{pod-group.scheduling.sigs.k8s.io: job}}}}\n\
             spec: {{containers: [{{name: c, image: busybox, resources: {{requests: {{cpu: \"1\"}}}}}}]}}\n"
        ));
    }
    let sim = simulate(&text);
    let waiting: Vec<String> = (1..=8)
        .map(|i| format!("w{i}"))
        .filter(|n| sim.core().waits_at_permit(&ObjectKey::pod("default", n)))
        .collect();
    assert_eq!(waiting.len(), 6);
    let e = explain_pod(&sim, &waiting[0]);
    let g = e.gang.as_ref().expect("a gang report");
    assert_eq!(
        (g.placed.len(), g.waiting.len(), g.unplaced.len()),
        (6, 6, 2),
        "{g:?}"
    );
    let text = render(&e, ExplainFormat::Text).expect("text");
    assert!(
        text.contains("6 of minimum 8 placed (6 waiting at Permit), 2 not placed"),
        "{text}"
    );
}

#[test]
fn explain_says_per_request_why_no_device_was_found() {
    let path = scenarios().join("dra/explain-devices.yaml");
    let text = std::fs::read_to_string(&path).expect("readable");
    let input = parse_str(&path.display().to_string(), &text).expect("valid");
    let sim = Simulation::run(vec![], Config::default(), &input);
    let e = explain_pod(&sim, "big");
    let text = berth_sim::explain::text(&e);
    let node = |name: &str| e.nodes.iter().find(|n| n.node == name).expect("node");
    // gpu-a: the class passes all four, the request's selector excludes the T4, gpu-0 is
    // taken by first's claim and gpu-2 held by reservation r: 1 left of the 2 wanted.
    let gpu = node("gpu-a");
    assert_eq!(gpu.devices.len(), 1, "{text}");
    let claim = &gpu.devices[0];
    assert!(claim.claim.starts_with("default/big-gpus-"), "{text}");
    let r = &claim.requests[0];
    assert_eq!(
        (r.request.as_str(), r.class.as_str(), r.wants.as_str()),
        ("gpus", "gpu.example.com", "2")
    );
    assert_eq!((r.reached, r.free, r.enough), (4, 1, false), "{text}");
    assert_eq!(r.excluded.len(), 1, "{text}");
    assert!(
        r.excluded[0].selector.ends_with(": selector #0")
            && r.excluded[0]
                .selector
                .starts_with("claim default/big-gpus-"),
        "{text}"
    );
    assert_eq!(r.excluded[0].devices, 1, "{text}");
    assert_eq!(r.taken.len(), 1, "{text}");
    assert_eq!(r.taken[0].device, "gpu.example.com/gpu-a/gpu-0", "{text}");
    assert!(r.taken[0].by.starts_with("default/first-gpu-"), "{text}");
    assert_eq!(r.held.len(), 1, "{text}");
    assert_eq!(r.held[0].device, "gpu.example.com/gpu-a/gpu-2", "{text}");
    assert_eq!(r.held[0].by, "reservation r", "{text}");
    // The constraint: the one A100 left (gpu-1, root-0) is the largest group of 2 wanted.
    assert_eq!(claim.constraints.len(), 1, "{text}");
    let k = &claim.constraints[0];
    assert_eq!(
        (k.attribute.as_str(), k.wants, k.largest_group),
        ("gpu.example.com/pcieRoot", 2, 1)
    );
    // cpu-1 reaches no device.
    let cpu = &node("cpu-1").devices[0].requests[0];
    assert_eq!((cpu.reached, cpu.free, cpu.enough), (0, 0, false), "{text}");
    // The text says it per node, under DynamicResources' rejection.
    assert!(text.contains("devices: claim default/big-gpus-"), "{text}");
    assert!(
        text.contains(
            "request gpus (class gpu.example.com): wants 2, 1 left of 4 reached, not enough"
        ),
        "{text}"
    );
    assert!(
        text.contains("taken: gpu.example.com/gpu-a/gpu-0 by default/first-gpu-"),
        "{text}"
    );
    assert!(
        text.contains("held: gpu.example.com/gpu-a/gpu-2 by reservation r"),
        "{text}"
    );
    assert!(
        text.contains(
            "matchAttribute gpu.example.com/pcieRoot: wants 2 sharing a value, at most 1 do"
        ),
        "{text}"
    );
    // A node DynamicResources passed, or a pod without claims: no device detail.
    assert!(
        e.nodes.iter().all(|n| n.feasible || !n.devices.is_empty()),
        "{text}"
    );
}
