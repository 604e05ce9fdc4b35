//! `berth simulate --report FILE.html`: one self-contained page about a run, for people.
//!
//! The page carries its data as JSON and draws every chart itself, as SVG, with a few
//! hundred lines of inline script: no charting library, no font, nothing fetched when it is
//! opened (it works from a file, offline, and under a strict content policy). It shows:
//! pods and reservations by phase over time; the cluster's CPU and memory split into used
//! by pods, held by reservations (not allocated) and free, over time; every node at the end
//! as a sorted strip (a thousand nodes stay readable: one thin bar each), with a click (or
//! the node list) drilling down into one node over time; reservation fill over time, in total
//! and per reservation; unschedulable pods grouped by reason; gangs (members placed against
//! the minimum, waiting at Permit, not placed and why); for NUMA nodes each zone's
//! available CPU as the scheduler believed it against what the node published, with the
//! resyncs marked; and the per-step log.

use serde_json::{json, Value};

use berth_core::time::rfc3339;
use berth_core::{Kind, Object};

use crate::objects::pod_scheduled_message;
use crate::sim::Simulation;

/// Why the report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The run kept no timeline (the simulation was not run with `Hooks::timeline`).
    #[error("the simulation recorded no timeline")]
    NoTimeline,
    /// Serializing the data failed.
    #[error("cannot serialize the report data: {0}")]
    Json(#[from] serde_json::Error),
    /// Writing the file failed.
    #[error("writing {file}: {source}")]
    Write {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The data the page draws from.
pub fn data(sim: &Simulation) -> Result<Value, ReportError> {
    let tl = sim.timeline().ok_or(ReportError::NoTimeline)?;
    let mut unschedulable = Vec::new();
    for obj in sim.store().of_kind(Kind::Pod) {
        let Object::Pod(p) = obj else { continue };
        let bound = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        if bound {
            continue;
        }
        if let Some(m) = pod_scheduled_message(p) {
            unschedulable.push(json!({"pod": obj.key().to_string(), "message": m}));
        }
    }
    for r in sim.core().reservations() {
        if r.phase.as_str() != "Pending" {
            continue;
        }
        let m = r
            .conditions
            .iter()
            .find(|c| c.type_ == "Scheduled" && c.status == "False")
            .map(|c| c.message.clone())
            .filter(|m| !m.is_empty());
        if let Some(m) = m {
            unschedulable.push(json!({"pod": format!("reservation/{}", r.name), "message": m}));
        }
    }
    Ok(json!({
        "start": rfc3339(sim.start()),
        "end": rfc3339(sim.now()),
        "startMs": sim.start(),
        "nodes": tl.nodes,
        "reservations": tl.reservations,
        "numaNodes": tl.numa_nodes,
        "samples": tl.samples,
        "resyncs": tl.resyncs,
        "log": tl.log,
        "unschedulable": unschedulable,
        "gangs": gangs(sim),
    }))
}

/// Every gang with a member (pod or Reservation) at the end, as the core sees it: members
/// placed against the minimum, waiting at Permit, and not placed with why.
fn gangs(sim: &Simulation) -> Vec<Value> {
    let core = sim.core();
    let mut keys: Vec<berth_core::ObjectKey> =
        sim.store().of_kind(Kind::Pod).map(|o| o.key()).collect();
    keys.extend(
        core.reservations()
            .filter_map(|r| r.item.as_ref().map(|i| i.key.clone())),
    );
    let mut seen = std::collections::BTreeMap::new();
    for k in &keys {
        if let Some(g) = core.gang_report(k) {
            seen.entry(g.gang.clone()).or_insert(g);
        }
    }
    seen.into_values()
        .map(|g| {
            json!({
                "gang": g.gang, "plugin": g.plugin, "min": g.min, "members": g.members,
                "placed": g.placed.len(), "waiting": g.waiting.len(),
                "unplaced": g.unplaced.iter().map(|(n, why)| json!({"name": n, "why": why})).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// The page.
pub fn render(sim: &Simulation) -> Result<String, ReportError> {
    let data = serde_json::to_string(&data(sim)?)?;
    // Inside <script> only `</` could end the element early.
    let data = data.replace("</", "<\\/");
    Ok(TEMPLATE
        .replacen(
            "{{TITLE}}",
            &format!(
                "berth simulate: {} to {}",
                rfc3339(sim.start()),
                rfc3339(sim.now())
            ),
            2,
        )
        .replace("{{DATA}}", &data))
}

/// Writes the page to `file`.
pub fn write(sim: &Simulation, file: &str) -> Result<(), ReportError> {
    let page = render(sim)?;
    std::fs::write(file, page).map_err(|source| ReportError::Write {
        file: file.to_string(),
        source,
    })
}

const TEMPLATE: &str = r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{TITLE}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 auto; padding: 16px 24px; max-width: 1000px; color: #1d2433; background: #fff; }
h1 { font-size: 20px; margin: 8px 0 4px; }
h2 { font-size: 16px; margin: 24px 0 6px; border-bottom: 1px solid #d8dde6; padding-bottom: 3px; }
.sub { color: #5b6475; margin: 0 0 8px; }
.chart { width: 100%; }
.chart svg { display: block; width: 100%; height: auto; }
.legend { display: flex; flex-wrap: wrap; gap: 12px; font-size: 12px; margin: 2px 0 4px; }
.legend span::before { content: ""; display: inline-block; width: 10px; height: 10px; margin-right: 4px; background: var(--c); vertical-align: -1px; }
.row { display: flex; gap: 8px; align-items: center; font-size: 13px; margin: 4px 0; }
select { font: inherit; }
table { border-collapse: collapse; width: 100%; font-size: 12px; }
td, th { text-align: left; padding: 3px 6px; border-bottom: 1px solid #eef0f4; vertical-align: top; }
th { color: #5b6475; font-weight: 600; }
.log { font: 12px/1.45 ui-monospace, monospace; white-space: pre-wrap; max-height: 360px; overflow: auto; background: #f6f7f9; padding: 8px; }
.empty { color: #8a93a3; font-style: italic; }
</style>
</head>
<body>
<h1>{{TITLE}}</h1>
<p class="sub" id="summary"></p>

<h2>Pods and reservations by phase</h2>
<div class="legend" id="pods-legend"></div>
<div class="chart" data-chart="pods" id="pods"></div>
<div class="legend" id="res-legend"></div>
<div class="chart" data-chart="reservations" id="reservations"></div>

<h2>Cluster CPU and memory: used by pods, held by reservations (not allocated), free</h2>
<div class="legend" id="use-legend"></div>
<div class="chart" data-chart="cluster-cpu" id="cluster-cpu"></div>
<div class="chart" data-chart="cluster-memory" id="cluster-memory"></div>

<h2>Nodes at the end (CPU, sorted by use; click a node for its history)</h2>
<div class="row"><label for="node-select">Node</label><select id="node-select"></select><span id="node-info"></span></div>
<div class="chart" data-chart="nodes" id="nodes"></div>
<div class="chart" data-chart="node-detail" id="node-detail"></div>

<h2>Reservation fill (allocated by owners / allocatable)</h2>
<div class="row"><label for="res-select">Reservation</label><select id="res-select"></select></div>
<div class="legend" id="fill-legend"></div>
<div class="chart" data-chart="fill" id="fill"></div>

<h2>Unschedulable at the end</h2>
<div id="unschedulable"></div>

<h2>Gangs at the end (PodGroups, Workloads, Koordinator's gang annotations)</h2>
<div id="gangs"></div>

<h2>NUMA zones: available CPU as the scheduler believed it vs as published (resyncs marked)</h2>
<div class="row"><label for="numa-select">Node</label><select id="numa-select"></select></div>
<div class="legend" id="numa-legend"></div>
<div class="chart" data-chart="numa" id="numa"></div>

<h2>Per-step log</h2>
<div class="log" id="log"></div>

<script type="application/json" id="data">{{DATA}}</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const NS = "http://www.w3.org/2000/svg";
const W = 960, H = 200, L = 64, R = 12, T = 10, B = 26;
const COLORS = { used: "#2f6fde", reserved: "#f0a431", free: "#dfe5ee",
  pending: "#b9c2d0", unschedulable: "#d9534f", running: "#3aa55d", succeeded: "#6c8ebf", failed: "#7a3b8f",
  available: "#3aa55d", waiting: "#f0a431" };
const PALETTE = ["#2f6fde", "#d9534f", "#3aa55d", "#f0a431", "#7a3b8f", "#17a2b8", "#8c564b", "#e377c2"];

function el(name, attrs, parent) {
  const e = document.createElementNS(NS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function svg(id, h) {
  const box = document.getElementById(id);
  box.textContent = "";
  return el("svg", { viewBox: "0 0 " + W + " " + (h || H), role: "img" }, box);
}
function legend(id, items) {
  const box = document.getElementById(id);
  box.textContent = "";
  for (const [name, color] of items) {
    const s = document.createElement("span");
    s.style.setProperty("--c", color);
    s.textContent = name;
    box.appendChild(s);
  }
}
function fmtTime(ms) {
  const s = Math.round((ms - D.startMs) / 1000);
  if (s < 120) return "+" + s + "s";
  if (s < 7200) return "+" + Math.round(s / 60) + "m";
  return "+" + (s / 3600).toFixed(1) + "h";
}
function fmtNum(v, unit) {
  if (unit === "cpu") return (v / 1000).toFixed(v % 1000 ? 1 : 0);
  if (unit === "bytes") {
    const g = v / (1 << 30);
    return g >= 1 ? g.toFixed(g >= 10 ? 0 : 1) + "Gi" : (v / (1 << 20)).toFixed(0) + "Mi";
  }
  if (unit === "%") return Math.round(v) + "%";
  return String(Math.round(v));
}
function times() {
  const ts = D.samples.map(s => s.t);
  if (ts.length === 0) return [D.startMs, D.startMs + 1];
  return ts;
}
// Whether virtual time moved at all: without, a time axis would only repeat "+0s".
const TIME_MOVED = D.samples.length > 1 && D.samples[D.samples.length - 1].t > D.samples[0].t;
// Tick values for 0..max: a step of 1, 2 or 5 times a power of ten (at least `minStep`, so
// counts tick at whole numbers), the top raised to a whole number of steps; a label equal
// to the one below it is dropped, so no axis repeats itself.
function ticks(max, unit) {
  const minStep = unit === "n" ? 1 : unit === "cpu" ? 100 : unit === "bytes" ? (1 << 20) : 1;
  const raw = Math.max(minStep, max / 4);
  // Bytes step by powers of two (so labels read 256Mi, 512Mi, 1Gi), the rest by 1-2-5.
  const p = unit === "bytes" ? Math.pow(2, Math.floor(Math.log2(raw))) : Math.pow(10, Math.floor(Math.log10(raw)));
  const step = (unit === "bytes" ? [1, 2] : [1, 2, 5, 10]).map(m => m * p).find(s => s >= raw) || 2 * p;
  const top = Math.max(step, Math.ceil(max / step - 1e-9) * step);
  const out = [];
  let prev = null;
  for (let v = 0; v <= top + step / 2; v += step) {
    const label = fmtNum(v, unit);
    if (label !== prev) out.push([v, label]);
    prev = label;
  }
  return { top: top, values: out };
}
function xScale(t0, t1) {
  const span = Math.max(1, t1 - t0);
  return t => L + (W - L - R) * (t - t0) / span;
}
// Draws the axes; `max` must be a ticks(...).top. `time`: false for no time axis (the node
// strip), else the x axis is labelled with times, or says that no time passed.
function axes(g, t0, t1, max, unit, h, time) {
  h = h || H;
  const x = xScale(t0, t1);
  el("line", { x1: L, y1: h - B, x2: W - R, y2: h - B, stroke: "#9aa3b2" }, g);
  el("line", { x1: L, y1: T, x2: L, y2: h - B, stroke: "#9aa3b2" }, g);
  for (const [v, label] of ticks(max, unit).values) {
    const y = h - B - (h - B - T) * v / max;
    el("line", { x1: L, y1: y, x2: W - R, y2: y, stroke: "#eef0f4" }, g);
    const t = el("text", { x: L - 6, y: y + 4, "text-anchor": "end", "font-size": 11, fill: "#5b6475", class: "ytick" }, g);
    t.textContent = label;
  }
  if (time === false) return x;
  if (!TIME_MOVED) {
    const t = el("text", { x: (L + W - R) / 2, y: h - 8, "text-anchor": "middle", "font-size": 11, fill: "#5b6475", class: "xnote" }, g);
    t.textContent = "no time passed: everything at " + D.start;
    return x;
  }
  let prev = null;
  for (let i = 0; i <= 5; i++) {
    const tv = t0 + (t1 - t0) * i / 5, label = fmtTime(tv);
    if (label === prev) continue;
    prev = label;
    // The first label starts at the axis and the last ends at it, so neither is clipped.
    const anchor = i === 0 ? "start" : i === 5 ? "end" : "middle";
    const t = el("text", { x: x(tv), y: h - 8, "text-anchor": anchor, "font-size": 11, fill: "#5b6475", class: "xtick" }, g);
    t.textContent = label;
  }
  return x;
}
// Stacked step areas: series [{name, color, values}] over sample times (a value holds until
// the next sample).
function stacked(id, series, unit, h, nothing) {
  h = h || H;
  if (nothing && series.every(s => s.values.every(v => !v))) { empty(id, nothing); return; }
  const g = svg(id, h);
  let ts = times();
  let vals = series.map(s => s.values.slice());
  if (ts.length === 1) { ts = [ts[0], ts[0] + 1000]; vals = vals.map(v => [v[0] || 0, v[0] || 0]); }
  const t0 = ts[0], t1 = ts[ts.length - 1] + Math.max(1000, (ts[ts.length - 1] - ts[0]) / 50);
  let max = 0;
  for (let i = 0; i < ts.length; i++) {
    let sum = 0;
    for (const v of vals) sum += v[i] || 0;
    max = Math.max(max, sum);
  }
  max = ticks(Math.max(max, 1), unit).top;
  const x = axes(g, t0, t1, max, unit, h);
  const y = v => h - B - (h - B - T) * v / max;
  const base = ts.map(() => 0);
  vals.forEach((v, k) => {
    const top = base.map((b, i) => b + (v[i] || 0));
    let d = "";
    for (let i = 0; i < ts.length; i++) {
      const xa = x(ts[i]), xb = x(i + 1 < ts.length ? ts[i + 1] : t1);
      d += (i ? "L" : "M") + xa + "," + y(top[i]) + "L" + xb + "," + y(top[i]);
    }
    for (let i = ts.length - 1; i >= 0; i--) {
      const xa = x(ts[i]), xb = x(i + 1 < ts.length ? ts[i + 1] : t1);
      d += "L" + xb + "," + y(base[i]) + "L" + xa + "," + y(base[i]);
    }
    el("path", { d: d + "Z", fill: series[k].color, stroke: "none" }, g);
    for (let i = 0; i < ts.length; i++) base[i] = top[i];
  });
}
// Lines over sample times, each [{name, color, values (null: gap), dash}], with vertical
// markers at `marks` (times).
function lines(id, series, unit, marks, fixedMax, nothing) {
  if (series.every(s => s.values.every(v => v == null))) { empty(id, nothing || "nothing to show"); return; }
  const g = svg(id);
  let ts = times();
  if (ts.length === 1) ts = [ts[0], ts[0] + 1000];
  const t0 = ts[0], t1 = ts[ts.length - 1] + Math.max(1000, (ts[ts.length - 1] - ts[0]) / 50);
  let max = fixedMax || 0;
  if (!fixedMax) for (const s of series) for (const v of s.values) if (v != null) max = Math.max(max, v);
  max = ticks(Math.max(max, 1), unit).top;
  const x = axes(g, t0, t1, max, unit);
  const y = v => H - B - (H - B - T) * Math.min(v, max) / max;
  for (const m of marks || []) {
    el("line", { x1: x(m), y1: T, x2: x(m), y2: H - B, stroke: "#d9534f", "stroke-dasharray": "3,3", "stroke-width": 1.5 }, g);
  }
  for (const s of series) {
    let d = "", open = false;
    for (let i = 0; i < ts.length; i++) {
      const v = i < s.values.length ? s.values[i] : s.values[s.values.length - 1];
      if (v == null) { open = false; continue; }
      const xa = x(ts[i]), xb = x(i + 1 < ts.length ? ts[i + 1] : t1);
      d += (open ? "L" : "M") + xa + "," + y(v) + "L" + xb + "," + y(v);
      open = true;
    }
    if (d) el("path", { d: d, fill: "none", stroke: s.color, "stroke-width": 2.5, "stroke-dasharray": s.dash || "none" }, g);
  }
}
function empty(id, text) {
  const box = document.getElementById(id);
  box.textContent = "";
  const p = document.createElement("p");
  p.className = "empty";
  p.textContent = text;
  box.appendChild(p);
}

// Summary.
const last = D.samples.length ? D.samples[D.samples.length - 1] : null;
document.getElementById("summary").textContent = D.start + " to " + D.end + ": " + D.nodes.length + " nodes, " +
  (last ? (last.pods.running + last.pods.pending + last.pods.unschedulable + last.pods.succeeded + last.pods.failed) : 0) + " pods at the end (" +
  (last ? last.pods.unschedulable : 0) + " unschedulable), " + D.reservations.length + " reservations held at some point, " +
  D.samples.length + " observations.";

// Phases.
const podPhases = ["running", "pending", "unschedulable", "succeeded", "failed"];
legend("pods-legend", podPhases.map(p => ["pods " + p, COLORS[p]]));
stacked("pods", podPhases.map(p => ({ name: p, color: COLORS[p], values: D.samples.map(s => s.pods[p]) })), "n", H, "no pods in this run");
const resPhases = ["available", "pending", "waiting", "succeeded", "failed"];
legend("res-legend", resPhases.map(p => ["reservations " + p, COLORS[p]]));
stacked("reservations", resPhases.map(p => ({ name: p, color: COLORS[p], values: D.samples.map(s => s.reservations[p]) })), "n", 140, "no reservations in this run");

// Cluster use.
legend("use-legend", [["used by pods", COLORS.used], ["held by reservations", COLORS.reserved], ["free", COLORS.free]]);
function clusterSeries(off, unit) {
  const used = [], held = [], free = [];
  for (const s of D.samples) {
    let u = 0, r = 0, a = 0;
    for (const [, v] of s.nodes) { u += v[off]; r += v[off + 1]; a += v[off + 2]; }
    used.push(u); held.push(r); free.push(Math.max(0, a - u - r));
  }
  stacked(unit === "cpu" ? "cluster-cpu" : "cluster-memory", [
    { name: "used", color: COLORS.used, values: used },
    { name: "reserved", color: COLORS.reserved, values: held },
    { name: "free", color: COLORS.free, values: free }], unit, 170, "no nodes in this run");
}
clusterSeries(0, "cpu");
clusterSeries(3, "bytes");

// Nodes at the end: one stacked bar per node, sorted by use; a thousand nodes make a strip.
const nodeSelect = document.getElementById("node-select");
function nodeHistory(ix) {
  const used = [], held = [], free = [];
  for (const s of D.samples) {
    const e = s.nodes.find(n => n[0] === ix);
    const v = e ? e[1] : [0, 0, 0, 0, 0, 0];
    used.push(v[0]); held.push(v[1]); free.push(Math.max(0, v[2] - v[0] - v[1]));
  }
  stacked("node-detail", [
    { name: "used", color: COLORS.used, values: used },
    { name: "reserved", color: COLORS.reserved, values: held },
    { name: "free", color: COLORS.free, values: free }], "cpu", 160);
  const e = last ? last.nodes.find(n => n[0] === ix) : null;
  document.getElementById("node-info").textContent = e ?
    "CPU used " + fmtNum(e[1][0], "cpu") + ", held " + fmtNum(e[1][1], "cpu") + " of " + fmtNum(e[1][2], "cpu") +
    "; memory used " + fmtNum(e[1][3], "bytes") + ", held " + fmtNum(e[1][4], "bytes") + " of " + fmtNum(e[1][5], "bytes") : "";
}
if (last && last.nodes.length) {
  const rows = last.nodes.map(([ix, v]) => ({ ix, used: v[2] ? v[0] / v[2] : 0, held: v[2] ? v[1] / v[2] : 0 }));
  rows.sort((a, b) => (b.used + b.held) - (a.used + a.held) || b.used - a.used || a.ix - b.ix);
  const h = 150, g = svg("nodes", h);
  const bw = (W - L - R) / rows.length;
  const y = v => h - B - (h - B - T) * v;
  axes(g, 0, 0, 100, "%", h, false);
  // Node names under the strip: every node when they fit, else every k-th (about 70 px
  // apart), each cut to the room it has.
  const every = Math.max(1, Math.ceil(rows.length / Math.floor((W - L - R) / 70)));
  rows.forEach((r, i) => {
    if (i % every) return;
    const name = D.nodes[r.ix];
    const room = every === 1 ? bw : Math.min(bw * every, W - (L + i * bw));
    const chars = Math.max(2, Math.floor(room / 6.5));
    const t = el("text", { x: L + i * bw + (every === 1 ? bw / 2 : 0), y: h - 8, "text-anchor": every === 1 ? "middle" : "start", "font-size": 10, fill: "#5b6475", class: "nodename" }, g);
    t.textContent = name.length > chars ? name.slice(0, chars - 1) + "\u2026" : name;
  });
  rows.forEach((r, i) => {
    const x0 = L + i * bw, w = Math.max(bw - (bw > 3 ? 1 : 0), 0.6);
    const grp = el("g", { "data-node": D.nodes[r.ix] }, g);
    el("rect", { x: x0, y: y(1), width: w, height: y(0) - y(1), fill: COLORS.free }, grp);
    el("rect", { x: x0, y: y(r.used + r.held), width: w, height: y(r.used) - y(r.used + r.held), fill: COLORS.reserved }, grp);
    el("rect", { x: x0, y: y(r.used), width: w, height: y(0) - y(r.used), fill: COLORS.used }, grp);
    const title = el("title", {}, grp);
    title.textContent = D.nodes[r.ix] + ": " + Math.round(r.used * 100) + "% used, " + Math.round(r.held * 100) + "% held";
    grp.addEventListener("click", () => { nodeSelect.value = String(r.ix); nodeHistory(r.ix); });
    grp.style.cursor = "pointer";
  });
  const order = rows.map(r => r.ix);
  for (const ix of order) {
    const o = document.createElement("option");
    o.value = String(ix);
    o.textContent = D.nodes[ix];
    nodeSelect.appendChild(o);
  }
  nodeSelect.addEventListener("change", () => nodeHistory(Number(nodeSelect.value)));
  nodeHistory(order[0]);
} else {
  empty("nodes", "no nodes");
  empty("node-detail", "");
}

// Reservation fill.
const resSelect = document.getElementById("res-select");
function fillSeries(r) {
  return D.samples.map(s => {
    let a = 0, c = 0;
    for (const f of s.fill) if (r < 0 || f.r === r) { a += f.allocated; c += f.allocatable; }
    return c > 0 ? 100 * a / c : null;
  });
}
function drawFill() {
  const r = Number(resSelect.value);
  const series = [{ name: "all", color: "#9aa3b2", values: fillSeries(-1), dash: "6,4" }];
  const items = [["all reservations together (dashed)", "#9aa3b2"]];
  if (r >= 0) {
    series.push({ name: D.reservations[r], color: COLORS.reserved, values: fillSeries(r) });
    items.push([D.reservations[r] + " (solid)", COLORS.reserved]);
  }
  legend("fill-legend", items);
  lines("fill", series, "%", [], 100, "no reservation had anything to fill");
}
if (D.reservations.length) {
  const all = document.createElement("option");
  all.value = "-1"; all.textContent = "all reservations (total)";
  resSelect.appendChild(all);
  D.reservations.forEach((name, i) => {
    const o = document.createElement("option");
    o.value = String(i); o.textContent = name;
    resSelect.appendChild(o);
  });
  resSelect.value = D.reservations.length ? "0" : "-1";
  resSelect.addEventListener("change", drawFill);
  drawFill();
} else {
  empty("fill", "no reservation was placed");
}

// Unschedulable, grouped by message.
(function () {
  const box = document.getElementById("unschedulable");
  if (!D.unschedulable.length) { empty("unschedulable", "every pod and reservation was placed"); return; }
  const groups = new Map();
  for (const u of D.unschedulable) {
    if (!groups.has(u.message)) groups.set(u.message, []);
    groups.get(u.message).push(u.pod);
  }
  const table = document.createElement("table");
  const head = table.insertRow();
  for (const h of ["count", "pods", "why"]) { const th = document.createElement("th"); th.textContent = h; head.appendChild(th); }
  for (const [msg, pods] of [...groups.entries()].sort((a, b) => b[1].length - a[1].length)) {
    const row = table.insertRow();
    row.insertCell().textContent = String(pods.length);
    row.insertCell().textContent = pods.slice(0, 5).join(", ") + (pods.length > 5 ? " and " + (pods.length - 5) + " more" : "");
    row.insertCell().textContent = msg;
  }
  box.appendChild(table);
})();

// Gangs: members placed against the minimum, waiting at Permit, not placed and why.
(function () {
  const box = document.getElementById("gangs");
  if (!D.gangs.length) { empty("gangs", "no gang"); return; }
  const table = document.createElement("table");
  const head = table.insertRow();
  for (const h of ["gang", "plugin", "placed / minimum", "waiting at Permit", "not placed", "why (first)"]) { const th = document.createElement("th"); th.textContent = h; head.appendChild(th); }
  for (const g of D.gangs) {
    const row = table.insertRow();
    row.insertCell().textContent = g.gang;
    row.insertCell().textContent = g.plugin;
    row.insertCell().textContent = g.placed + " / " + (g.min === null ? "?" : g.min) + " (" + g.members + " members)";
    row.insertCell().textContent = String(g.waiting);
    const names = g.unplaced.map(u => u.name);
    row.insertCell().textContent = names.slice(0, 5).join(", ") + (names.length > 5 ? " and " + (names.length - 5) + " more" : "");
    row.insertCell().textContent = g.unplaced.length ? (g.unplaced.find(u => u.why) || g.unplaced[0]).why : "";
  }
  box.appendChild(table);
})();

// NUMA.
const numaSelect = document.getElementById("numa-select");
function drawNuma() {
  const n = Number(numaSelect.value);
  const zones = new Set();
  for (const s of D.samples) for (const z of s.zones) if (z.n === n) zones.add(z.zone);
  const series = [], items = [];
  [...zones].sort((a, b) => a - b).forEach((zone, k) => {
    const color = PALETTE[k % PALETTE.length];
    const pick = f => D.samples.map(s => { const z = s.zones.find(z => z.n === n && z.zone === zone); return z ? f(z) : null; });
    series.push({ name: "zone " + zone + " believed", color: color, values: pick(z => z.believed) });
    series.push({ name: "zone " + zone + " published", color: color, values: pick(z => z.published), dash: "6,4" });
    items.push(["node-" + zone + " believed (solid) / published (dashed)", color]);
  });
  items.push(["resync", "#d9534f"]);
  legend("numa-legend", items);
  lines("numa", series, "cpu", D.resyncs.map(r => r.t), 0, "nothing published for this node");
}
if (D.numaNodes.length) {
  D.numaNodes.forEach((name, i) => {
    const o = document.createElement("option");
    o.value = String(i); o.textContent = name;
    numaSelect.appendChild(o);
  });
  numaSelect.addEventListener("change", drawNuma);
  drawNuma();
} else {
  empty("numa", "no node publishes a NodeResourceTopology");
}

// Log.
(function () {
  const box = document.getElementById("log");
  const lines = D.log.map(l => "[" + new Date(l.t).toISOString().replace(".000Z", "Z") + "] " + l.text);
  box.textContent = lines.length ? lines.join("\n") : "(nothing happened)";
})();
document.body.setAttribute("data-ready", "true");
</script>
</body>
</html>
"##;
