//! `berth explain`: why a pod (or reservation) is pending, on the cluster `simulate` builds
//! from the input files (or on objects listed from a live cluster), as text for people or
//! JSON for tools. The analysis is [`berth_core::explain`]; this module builds the state and
//! renders the answer.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::str::FromStr;

use berth_core::explain::{
    explain, Change, Explanation, NodeExplanation, ReservationVerdict, Target,
};
use berth_core::time::Time;
use berth_core::{Config, Event, Object, Profile, Scheduler};

use crate::run::{simulate, Options, RunOutput};

/// Nodes listed one by one in the text; past this, rejected nodes are grouped by reasons.
pub const DETAIL_NODES: usize = 20;
/// Feasible nodes listed with their scores in a grouped (large cluster) text.
const TOP_FEASIBLE: usize = 10;

/// `berth explain -o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExplainFormat {
    /// Plain text.
    #[default]
    Text,
    /// The [`Explanation`] as pretty JSON.
    Json,
}

impl FromStr for ExplainFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" | "table" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!(
                "unknown output format {other:?}; want text or json"
            )),
        }
    }
}

/// Renders an explanation.
pub fn render(e: &Explanation, format: ExplainFormat) -> Result<String, serde_json::Error> {
    match format {
        ExplainFormat::Text => Ok(text(e)),
        ExplainFormat::Json => {
            let mut s = serde_json::to_string_pretty(e)?;
            s.push('\n');
            Ok(s)
        }
    }
}

/// `berth explain TARGET FILE...`: simulates the files to their end (as `simulate` does,
/// expectations included but not reported) and explains the target there. Exit status 0
/// when it explained, 2 for bad input or an unknown target.
pub fn run(
    target: &str,
    options: &Options,
    format: ExplainFormat,
    stdin: &mut dyn Read,
) -> RunOutput {
    let fail = |message: String| RunOutput {
        stdout: String::new(),
        stderr: format!("error: {message}\n"),
        code: 2,
    };
    // A PodMigrationJob (`pmj/NAME`) is explained by its controller's state, not the core.
    let job_target = crate::migration::explain(&crate::store::Store::default(), target).is_some();
    let target_parsed = match Target::parse(target) {
        _ if job_target => None,
        Ok(t) => Some(t),
        Err(e) => return fail(e.to_string()),
    };
    let sim = match simulate(options, stdin) {
        Ok(sim) => sim,
        Err(e) => {
            return RunOutput {
                stdout: String::new(),
                stderr: format!("error: {e}\n"),
                code: e.exit_code(),
            }
        }
    };
    let mut stderr = String::new();
    for line in sim.log() {
        stderr.push_str(line);
        stderr.push('\n');
    }
    let Some(target_parsed) = target_parsed else {
        return match crate::migration::explain(sim.store(), target) {
            Some(Ok(stdout)) => RunOutput {
                stdout,
                stderr,
                code: 0,
            },
            Some(Err(e)) => RunOutput {
                stdout: String::new(),
                stderr: format!("{stderr}error: {e}\n"),
                code: 2,
            },
            None => fail(format!("bad target {target:?}")),
        };
    };
    match explain(sim.core(), &target_parsed, sim.now()) {
        Ok(e) => match render(&e, format) {
            Ok(stdout) => RunOutput {
                stdout,
                stderr,
                code: 0,
            },
            Err(err) => fail(err.to_string()),
        },
        Err(e) => RunOutput {
            stdout: String::new(),
            stderr: format!("{stderr}error: {e}\n"),
            code: 2,
        },
    }
}

/// Builds the scheduler's state from objects as a LIST returns them (a live cluster), without
/// scheduling anything: the core sees every object as the watch would at start, and nothing
/// runs, so a pending pod stays as the cluster has it.
pub fn state_from_objects(profiles: Vec<Profile>, objects: Vec<Object>, now: Time) -> Scheduler {
    let mut core = Scheduler::new(profiles, Config::default());
    // The order a restarted scheduler's watches settle in does not matter to the core, but
    // classes and namespaces first keep pods' admission-derived fields consistent.
    let rank = |o: &Object| match o {
        Object::PriorityClass(_) | Object::Namespace(_) => 0,
        Object::Node(_) => 1,
        Object::NodeResourceTopology(_) => 2,
        Object::Pod(_) => 4,
        Object::Reservation(_) => 5,
        _ => 3,
    };
    let mut objects = objects;
    objects.sort_by_key(rank);
    for obj in objects {
        core.handle(now, Event::Applied(obj));
    }
    // Status writes and events the core would send are dropped: explain writes nothing.
    while core.poll_effect().is_some() {}
    core
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

fn rejection_lines(out: &mut String, indent: &str, n: &NodeExplanation) {
    for r in &n.rejections {
        let _ = writeln!(
            out,
            "{indent}{} ({}, {}{}): {}",
            r.plugin,
            r.point,
            r.code,
            if r.with_nominated_pods {
                ", counting pods nominated here"
            } else {
                ""
            },
            r.reasons.join("; ")
        );
        if let Some(d) = &r.detail {
            out.truncate(out.len() - 1);
            let _ = writeln!(out, " ({d})");
        }
    }
}

fn score_line(n: &NodeExplanation) -> String {
    let parts: Vec<String> = n
        .scores
        .iter()
        .map(|s| {
            if s.weight == 1 {
                format!("{} {}", s.plugin, s.normalized)
            } else {
                format!("{} {}×{}", s.plugin, s.normalized, s.weight)
            }
        })
        .collect();
    format!(
        "score {}{}",
        n.total_score.unwrap_or(0),
        if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join(", "))
        }
    )
}

fn numa_lines(out: &mut String, indent: &str, n: &NodeExplanation) {
    if let Some(why) = &n.topology_refused {
        let _ = writeln!(out, "{indent}NUMA: no usable topology data: {why}");
    }
    let Some(d) = &n.numa else { return };
    let _ = writeln!(
        out,
        "{indent}NUMA: {} policy, {} scope, data {}{}",
        d.policy,
        d.scope,
        d.view,
        d.stale
            .as_deref()
            .map(|s| format!(" ({s})"))
            .unwrap_or_default()
    );
    if let Some(r) = &d.rejection {
        let _ = writeln!(out, "{indent}  {r}");
    }
    for z in &d.zones {
        let parts: Vec<String> = z
            .resources
            .iter()
            .map(|r| {
                let f = |v: i64| berth_api::quantity::format_resource(&r.resource, v);
                let believed = r.believed.map_or_else(|| "not listed".to_string(), f);
                let published = r.published.map_or_else(|| "not listed".to_string(), f);
                let lack = if r.lacks > 0 {
                    format!(", lacks {}", f(r.lacks))
                } else {
                    String::new()
                };
                format!(
                    "{} wants {}, available {believed} (published {published}){lack}",
                    r.resource,
                    f(r.requested)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "{indent}  zone node-{} for the {}: {}{}",
            z.id,
            d.aligning,
            if z.fits { "fits; " } else { "" },
            if parts.is_empty() {
                "requests nothing it pins".to_string()
            } else {
                parts.join("; ")
            }
        );
    }
}

fn node_block(out: &mut String, n: &NodeExplanation) {
    if n.feasible {
        let _ = writeln!(out, "  {}: fits, {}", n.node, score_line(n));
    } else {
        let _ = writeln!(out, "  {}: rejected", n.node);
        rejection_lines(out, "    ", n);
        if !n.shortfall.is_empty() {
            let s: Vec<String> = n
                .shortfall
                .iter()
                .map(|s| {
                    if s.scope == "node" {
                        s.describe()
                    } else {
                        format!("{} in {}", s.describe(), s.scope)
                    }
                })
                .collect();
            let _ = writeln!(out, "    short of: {}", s.join("; "));
        }
    }
    numa_lines(out, "    ", n);
    for line in berth_core::explain::dra::lines(&n.devices) {
        let _ = writeln!(out, "    devices: {line}");
    }
}

/// The explanation as text for a person.
pub fn text(e: &Explanation) -> String {
    let mut out = String::new();
    let who = if e.kind == "Pod" {
        format!("pod {}/{}", e.namespace, e.name)
    } else {
        format!("reservation {}", e.name)
    };
    let _ = writeln!(out, "{who} (profile {})", e.profile);
    for note in &e.notes {
        let _ = writeln!(out, "note: {note}");
    }
    if let Some(g) = &e.gang {
        gang_text(&mut out, g);
    }
    if let Some(p) = &e.placed {
        let _ = writeln!(
            out,
            "{}{}",
            e.summary,
            p.reservation
                .as_deref()
                .map(|r| format!(", allocated from reservation {r}"))
                .unwrap_or_default()
        );
        return out;
    }
    let _ = writeln!(out, "{}", e.summary);
    if e.nodes_feasible == 0 && e.nodes_total > 0 {
        let _ = writeln!(
            out,
            "(every plugin's reasons are counted, not only the first rejection per node)"
        );
    }
    if !e.pre_filter.is_empty() {
        out.push_str("\nPREFILTER (applies to every node)\n");
        for r in &e.pre_filter {
            let _ = writeln!(out, "  {} ({}): {}", r.plugin, r.code, r.reasons.join("; "));
        }
    }
    if !e.nodes.is_empty() {
        let _ = writeln!(
            out,
            "\nNODES ({} of {} fit)",
            e.nodes_feasible, e.nodes_total
        );
        if e.nodes.len() <= DETAIL_NODES {
            for n in &e.nodes {
                node_block(&mut out, n);
            }
        } else {
            grouped_nodes(&mut out, e);
        }
    }
    if !e.best.is_empty() {
        let _ = writeln!(
            out,
            "\nBEST: {} (highest total score{})",
            e.best.join(", "),
            if e.best.len() > 1 {
                "; a tie is broken at random"
            } else {
                ""
            }
        );
    }
    reservations_block(&mut out, e);
    change_block(&mut out, &e.change);
    out
}

/// The reservations whose owners match the pod, and what became of each.
fn reservations_block(out: &mut String, e: &Explanation) {
    if !e.reservations.is_empty() {
        out.push_str("\nRESERVATIONS MATCHING THE POD AS OWNER\n");
        for r in &e.reservations {
            let _ = writeln!(
                out,
                "  {} ({}{}): {}{}",
                r.name,
                r.phase,
                r.node
                    .as_deref()
                    .map(|n| format!(" on {n}"))
                    .unwrap_or_default(),
                verdict_word(r.verdict),
                if r.why.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.why)
                }
            );
        }
    }
}

/// The smallest change that would let it fit.
fn change_block(out: &mut String, change: &Change) {
    out.push_str("\nSMALLEST CHANGE\n");
    match change {
        Change::NotNeeded { node } => {
            let _ = writeln!(out, "  none needed: it fits on {node}");
        }
        Change::Resources { node, shortfall } => {
            let parts: Vec<String> = shortfall
                .iter()
                .map(|s| {
                    if s.scope == "node" {
                        s.describe()
                    } else {
                        format!("{} in {}", s.describe(), s.scope)
                    }
                })
                .collect();
            let _ = writeln!(out, "  on {node}: {}", parts.join("; "));
        }
        Change::None { why } => {
            let _ = writeln!(out, "  {why}");
        }
    }
}

fn verdict_word(v: ReservationVerdict) -> &'static str {
    match v {
        ReservationVerdict::WouldUse => "would use",
        ReservationVerdict::Usable => "usable",
        ReservationVerdict::NotAvailable => "not available",
        ReservationVerdict::Expired => "expired",
        ReservationVerdict::Failed => "failed",
        ReservationVerdict::Succeeded => "succeeded",
        ReservationVerdict::AllocateOnceConsumed => "allocateOnce consumed",
        ReservationVerdict::Affinity => "affinity",
        ReservationVerdict::Unschedulable => "unschedulable",
        ReservationVerdict::Taint => "taint",
        ReservationVerdict::NotExactMatch => "not an exact match",
        ReservationVerdict::Policy => "allocate policy",
        ReservationVerdict::Capacity => "capacity",
        ReservationVerdict::NotConsidered => "not considered",
        ReservationVerdict::NodeRejected => "node rejected",
        ReservationVerdict::Invalid => "invalid",
    }
}

/// A large cluster: the feasible nodes with the best scores, then rejected nodes grouped by
/// identical plugins and reasons (a few names each), then the detail of the node the
/// smallest change names.
fn grouped_nodes(out: &mut String, e: &Explanation) {
    let mut feasible: Vec<&NodeExplanation> = e.nodes.iter().filter(|n| n.feasible).collect();
    feasible.sort_by(|a, b| b.total_score.cmp(&a.total_score).then(a.node.cmp(&b.node)));
    for n in feasible.iter().take(TOP_FEASIBLE) {
        let _ = writeln!(out, "  {}: fits, {}", n.node, score_line(n));
    }
    if feasible.len() > TOP_FEASIBLE {
        let _ = writeln!(
            out,
            "  ... and {} more that fit",
            feasible.len() - TOP_FEASIBLE
        );
    }
    let mut groups: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for n in e.nodes.iter().filter(|n| !n.feasible) {
        let mut key = String::new();
        rejection_lines(&mut key, "    ", n);
        groups.entry(key).or_default().push(&n.node);
    }
    let mut groups: Vec<(String, Vec<&str>)> = groups.into_iter().collect();
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    for (reasons, names) in groups {
        let shown: Vec<&str> = names.iter().take(5).copied().collect();
        let more = names.len().saturating_sub(shown.len());
        let _ = writeln!(
            out,
            "  {} rejected: {}{}",
            plural(names.len(), "node", "nodes"),
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
        out.push_str(&reasons);
    }
    if let Change::Resources { node, .. } = &e.change {
        if let Some(n) = e.nodes.iter().find(|n| &n.node == node) {
            out.push_str("  closest to fitting:\n");
            node_block(out, n);
        }
    }
}

/// A gang member's gang: the standing line, then the members not placed, those with the
/// same reason on one line.
fn gang_text(out: &mut String, g: &berth_core::gang::Report) {
    let _ = writeln!(out, "{}", g.line());
    let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
    for (name, why) in &g.unplaced {
        let why = if why.is_empty() { "not tried yet" } else { why };
        match reasons.iter_mut().find(|(w, _)| *w == why) {
            Some((_, names)) => names.push(name),
            None => reasons.push((why, vec![name])),
        }
    }
    for (why, names) in reasons {
        let _ = writeln!(out, "  not placed: {}: {why}", names.join(", "));
    }
    let _ = writeln!(
        out,
        "  (a member binds only with its gang: what follows is this member alone)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse() {
        assert_eq!("json".parse::<ExplainFormat>(), Ok(ExplainFormat::Json));
        assert_eq!("text".parse::<ExplainFormat>(), Ok(ExplainFormat::Text));
        assert!("yaml".parse::<ExplainFormat>().is_err());
    }
}
