//! `berth simulate --report` in a real headless browser: Chromium (Debian's package) loads
//! the page from a file through the Chrome DevTools protocol; the page must load with no
//! console error, no uncaught exception and no network request (everything it needs is
//! inline), and a screenshot must show every chart drawn: each chart's region must hold at
//! least the checked-in number of non-blank pixels ([`THRESHOLDS`]), not a pixel-exact image.
//!
//! A thousand-node run is loaded too (no error, every chart drawn), so the page stays usable
//! at that size.
//!
//! Chromium is found on `PATH` (`chromium`, `chromium-browser`, `google-chrome`) or in
//! `$BERTH_CHROMIUM`; when missing and the test runs as root it is installed with
//! `apt-get install -y chromium`; otherwise the test fails saying what to install (it is
//! never skipped). `BERTH_UPDATE_SCREENSHOT=1` also writes the screenshot to
//! `docs/report.png` for the README.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use berth_core::Config;
use berth_sim::input::parse_str;
use berth_sim::sim::{Hooks, Simulation};

/// Minimum non-blank pixels per chart region (`data-chart`), at a 1100-pixel-wide viewport.
/// Set at about half of what the charts drew when this was written: a chart that fails to
/// draw leaves its region blank (0), one drawn badly (a collapsed axis) far under these.
const THRESHOLDS: &[(&str, u64)] = &[
    ("pods", 60_000),
    ("reservations", 30_000),
    ("cluster-cpu", 50_000),
    ("cluster-memory", 50_000),
    ("nodes", 40_000),
    ("node-detail", 40_000),
    ("fill", 4_000),
    ("numa", 4_000),
];

/// A cluster story that uses every chart: batch work filling nodes, reservations held and
/// filled by their owners (two expire), Guaranteed pods on NUMA nodes whose agent republishes
/// every 30s (resyncs), pods too big for any node, and work finishing.
fn demo(nodes: usize) -> String {
    let mut s = String::new();
    let numa_nodes = 4.min(nodes);
    for i in 0..nodes {
        let numa = i < numa_nodes;
        s += &format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: node-{i:04}, labels: {{numa: \"{numa}\"}}}}\nstatus: {{allocatable: {{cpu: \"16\", memory: 64Gi, pods: \"110\"}}}}\n---\n"
        );
        if numa {
            s += &format!("apiVersion: topology.node.k8s.io/v1alpha2\nkind: NodeResourceTopology\nmetadata: {{name: node-{i:04}}}\nattributes:\n  - {{name: topologyManagerPolicy, value: single-numa-node}}\n  - {{name: topologyManagerScope, value: container}}\nzones:\n  - name: node-0\n    type: Node\n    resources:\n      - {{name: cpu, capacity: \"8\", allocatable: \"8\", available: \"8\"}}\n      - {{name: memory, capacity: 32Gi, allocatable: 32Gi, available: 32Gi}}\n  - name: node-1\n    type: Node\n    resources:\n      - {{name: cpu, capacity: \"8\", allocatable: \"8\", available: \"8\"}}\n      - {{name: memory, capacity: 32Gi, allocatable: 32Gi, available: 32Gi}}\n---\n");
        }
    }
    for r in 0..6 {
        let ttl = if r < 2 { "5m" } else { "1h" };
        let node = numa_nodes + r % nodes.saturating_sub(numa_nodes).max(1);
        s += &format!("apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation\nmetadata: {{name: web-{r}}}\nspec:\n  ttl: {ttl}\n  allocateOnce: false\n  template: {{spec: {{nodeName: node-{node:04}, containers: [{{name: c, resources: {{requests: {{cpu: \"4\", memory: 8Gi}}}}}}]}}}}\n  owners: [{{labelSelector: {{matchLabels: {{app: web}}}}}}]\n---\n");
    }
    let pod = |name: String, labels: &str, cpu: &str, mem: &str, extra: &str| {
        format!("{{apiVersion: v1, kind: Pod, metadata: {{name: {name}, labels: {{{labels}}}}}, spec: {{{extra}containers: [{{name: c, resources: {{requests: {{cpu: \"{cpu}\", memory: {mem}}}, limits: {{cpu: \"{cpu}\", memory: {mem}}}}}}}]}}}}")
    };
    let batch: Vec<String> = (0..nodes * 3)
        .map(|i| {
            pod(
                format!("batch-{i:05}"),
                "app: batch",
                "3",
                "6Gi",
                "nodeSelector: {numa: \"false\"}, ",
            )
        })
        .collect();
    let web: Vec<String> = (0..14)
        .map(|i| pod(format!("web-{i:03}"), "app: web", "1", "2Gi", ""))
        .collect();
    let numa: Vec<String> = (0..numa_nodes * 3)
        .map(|i| {
            pod(
                format!("dpdk-{i:03}"),
                "app: dpdk",
                "5",
                "4Gi",
                "nodeSelector: {numa: \"true\"}, ",
            )
        })
        .collect();
    let big: Vec<String> = (0..3)
        .map(|i| pod(format!("huge-{i}"), "app: huge", "40", "8Gi", ""))
        .collect();
    let deletes: Vec<String> = (0..nodes)
        .map(|i| format!("{{kind: Pod, name: batch-{i:05}}}"))
        .collect();
    s += &format!(
        "apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: demo}}\nspec:\n  nodeAgent: {{nrtUpdatePeriod: 30s}}\n  steps:\n  - apply: [{}]\n  - advance: 30s\n  - apply: [{}]\n  - advance: 1m\n  - apply: [{}]\n  - advance: 3m\n  - apply: [{}]\n  - advance: 3m\n  - delete: [{}]\n  - advance: 1m\n",
        batch.join(", "),
        web.join(", "),
        numa.join(", "),
        big.join(", "),
        deletes.join(", ")
    );
    s
}

fn write_report(nodes: usize, dir: &Path) -> PathBuf {
    let input = parse_str("demo.yaml", &demo(nodes)).unwrap_or_else(|e| panic!("{e}"));
    let hooks = Hooks {
        timeline: true,
        progress: false,
    };
    let sim = Simulation::run_with(vec![], Config::default(), &input, hooks);
    let file = dir.join(format!("report-{nodes}.html"));
    berth_sim::report::write(&sim, &file.to_string_lossy()).unwrap_or_else(|e| panic!("{e}"));
    file
}

fn find_chromium() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("BERTH_CHROMIUM") {
        if !p.is_empty() {
            return Some(PathBuf::from(p));
        }
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in [
            "chromium",
            "chromium-browser",
            "google-chrome",
            "google-chrome-stable",
        ] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Chromium, installed from Debian's packages when missing and the test runs as root.
fn chromium() -> PathBuf {
    if let Some(p) = find_chromium() {
        return p;
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if root {
        let _ = Command::new("apt-get").arg("update").status();
        let _ = Command::new("apt-get")
            .args(["install", "-y", "chromium"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status();
        if let Some(p) = find_chromium() {
            return p;
        }
    }
    panic!(
        "Chromium is needed for the report's browser test and was not found: install Debian's \
         package (`apt-get install -y chromium`, which .ci/run does), or point $BERTH_CHROMIUM \
         at a Chromium or Chrome binary"
    );
}

/// A headless Chromium with its DevTools endpoint; killed on drop.
struct Browser {
    child: Child,
    ws: tungstenite::WebSocket<TcpStream>,
    next_id: u64,
    events: Vec<Value>,
    _profile: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    fn start(dir: &Path) -> Self {
        let bin = chromium();
        let profile = dir.join("chromium-profile");
        std::fs::create_dir_all(&profile).expect("profile dir");
        let mut child = Command::new(&bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let stderr = child.stderr.take().expect("stderr piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.split("DevTools listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{} did not open its DevTools endpoint", bin.display()));
        let hostport = url
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .unwrap_or("")
            .to_string();
        let stream = TcpStream::connect(&hostport).expect("DevTools socket");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let (ws, _) = tungstenite::client(url.as_str(), stream).expect("WebSocket handshake");
        Self {
            child,
            ws,
            next_id: 0,
            events: Vec::new(),
            _profile: profile,
        }
    }

    fn read(&mut self) -> Value {
        loop {
            match self.ws.read() {
                Ok(tungstenite::Message::Text(t)) => {
                    return serde_json::from_str(t.as_str()).expect("CDP JSON")
                }
                Ok(_) => continue,
                Err(e) => panic!("reading from Chromium: {e}"),
            }
        }
    }

    /// Sends a command (on `session`, if given) and returns its result; events that arrive
    /// meanwhile are kept.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(tungstenite::Message::text(msg.to_string()))
            .expect("send to Chromium");
        loop {
            let v = self.read();
            if v["id"].as_u64() == Some(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method}: {e}");
                }
                return v["result"].clone();
            }
            self.events.push(v);
        }
    }

    fn wait_event(&mut self, method: &str, timeout: Duration) {
        let until = Instant::now() + timeout;
        if self.events.iter().any(|e| e["method"] == method) {
            return;
        }
        while Instant::now() < until {
            let v = self.read();
            let hit = v["method"] == method;
            self.events.push(v);
            if hit {
                return;
            }
        }
        panic!("no {method} within {timeout:?}");
    }
}

/// What loading a page gave: problems seen, chart regions, the screenshot.
struct Loaded {
    console_errors: Vec<String>,
    requests: Vec<String>,
    charts: Vec<(String, [f64; 4])>,
    png: Vec<u8>,
    /// Per chart region: its axis labels, what it says instead of a chart, node names.
    axes: Value,
}

/// Per `[data-chart]` region: the y tick labels, the x (time) tick labels, the note that
/// replaces a time axis, the text shown instead of an empty chart, the node names, and the
/// labels that stick out of the drawing (clipped); plus the legends' texts.
const AXES_JS: &str = r#"JSON.stringify({
  charts: [...document.querySelectorAll('[data-chart]')].map(e => {
    const svg = e.querySelector('svg');
    const width = svg ? svg.viewBox.baseVal.width : 0;
    const texts = cls => [...e.querySelectorAll('text.' + cls)].map(t => t.textContent);
    const clipped = [...e.querySelectorAll('text')].filter(t => {
      const b = t.getBBox();
      return b.x < 0 || b.x + b.width > width + 0.5;
    }).map(t => t.textContent);
    const empty = e.querySelector('p.empty');
    return { chart: e.dataset.chart, y: texts('ytick'), x: texts('xtick'), xnote: texts('xnote'),
             nodes: texts('nodename'), empty: empty ? empty.textContent : null, clipped: clipped,
             drawn: !!svg };
  }),
  legends: Object.fromEntries([...document.querySelectorAll('.legend')].map(l => [l.id, l.textContent]))
})"#;

fn load(browser: &mut Browser, file: &Path) -> Loaded {
    let target = browser.call(None, "Target.createTarget", json!({"url": "about:blank"}));
    let target_id = target["targetId"].as_str().expect("targetId").to_string();
    let attached = browser.call(
        None,
        "Target.attachToTarget",
        json!({"targetId": target_id, "flatten": true}),
    );
    let session = attached["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_string();
    let s = Some(session.as_str());
    browser.events.clear();
    for domain in [
        "Runtime.enable",
        "Log.enable",
        "Network.enable",
        "Page.enable",
    ] {
        browser.call(s, domain, json!({}));
    }
    browser.call(
        s,
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 1100, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
    );
    let url = format!("file://{}", file.display());
    browser.call(s, "Page.navigate", json!({"url": url}));
    browser.wait_event("Page.loadEventFired", Duration::from_secs(120));
    let ready = browser.call(
        s,
        "Runtime.evaluate",
        json!({"expression": "document.body.getAttribute('data-ready')", "returnByValue": true}),
    );
    assert_eq!(
        ready["result"]["value"], "true",
        "the page's script ran to its end"
    );
    let rects = browser.call(
        s,
        "Runtime.evaluate",
        json!({"expression": "JSON.stringify({h: document.documentElement.scrollHeight, charts: [...document.querySelectorAll('[data-chart]')].map(e => { const r = e.getBoundingClientRect(); return [e.dataset.chart, r.left + scrollX, r.top + scrollY, r.width, r.height]; })})", "returnByValue": true}),
    );
    let v: Value =
        serde_json::from_str(rects["result"]["value"].as_str().unwrap_or("{}")).expect("rects");
    let height = v["h"].as_f64().unwrap_or(900.0).ceil();
    let charts = v["charts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c[0].as_str().unwrap_or("").to_string(),
                        [
                            c[1].as_f64().unwrap_or(0.0),
                            c[2].as_f64().unwrap_or(0.0),
                            c[3].as_f64().unwrap_or(0.0),
                            c[4].as_f64().unwrap_or(0.0),
                        ],
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let axes = browser.call(
        s,
        "Runtime.evaluate",
        json!({"expression": AXES_JS, "returnByValue": true}),
    );
    let axes: Value =
        serde_json::from_str(axes["result"]["value"].as_str().unwrap_or("{}")).expect("axes");
    browser.call(
        s,
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 1100, "height": height as i64, "deviceScaleFactor": 1, "mobile": false}),
    );
    let shot = browser.call(
        s,
        "Page.captureScreenshot",
        json!({"format": "png", "captureBeyondViewport": true}),
    );
    let png = base64_decode(shot["data"].as_str().expect("screenshot data"));
    let mut console_errors = Vec::new();
    let mut requests = Vec::new();
    for e in &browser.events {
        if e["sessionId"].as_str() != Some(session.as_str()) {
            continue;
        }
        let p = &e["params"];
        match e["method"].as_str().unwrap_or("") {
            "Runtime.consoleAPICalled" if p["type"] == "error" || p["type"] == "assert" => {
                console_errors.push(p["args"].to_string())
            }
            "Runtime.exceptionThrown" => console_errors.push(p["exceptionDetails"].to_string()),
            "Log.entryAdded" if p["entry"]["level"] == "error" => {
                console_errors.push(p["entry"]["text"].to_string())
            }
            "Network.requestWillBeSent" => {
                requests.push(p["request"]["url"].as_str().unwrap_or("").to_string())
            }
            _ => {}
        }
    }
    browser.call(None, "Target.closeTarget", json!({"targetId": target_id}));
    Loaded {
        console_errors,
        requests,
        charts,
        png,
        axes,
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes() {
        let Some(v) = val(c) else { continue };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// Non-blank pixels (any channel under 240: not the white page) per chart region.
fn non_blank(png_bytes: &[u8], charts: &[(String, [f64; 4])]) -> Vec<(String, u64)> {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().expect("PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("PNG size")];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    let channels = match info.color_type {
        png::ColorType::Rgba => 4,
        png::ColorType::Rgb => 3,
        other => panic!("unexpected PNG colour type {other:?}"),
    };
    let (w, h) = (info.width as usize, info.height as usize);
    charts
        .iter()
        .map(|(name, [x, y, cw, ch])| {
            let (x0, y0) = (x.max(0.0) as usize, y.max(0.0) as usize);
            let (x1, y1) = (((x + cw) as usize).min(w), ((y + ch) as usize).min(h));
            let mut n = 0;
            for py in y0..y1 {
                for px in x0..x1 {
                    let i = (py * w + px) * channels;
                    if buf[i..i + 3].iter().any(|&c| c < 240) {
                        n += 1;
                    }
                }
            }
            (name.clone(), n)
        })
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The axes of every drawn chart: no tick label repeated on either axis, none sticking out
/// of the drawing; on the node strip, node names.
fn check_axes(loaded: &Loaded, what: &str) {
    let charts = loaded.axes["charts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        !charts.is_empty(),
        "{what}: no chart regions: {}",
        loaded.axes
    );
    for c in &charts {
        let name = c["chart"].as_str().unwrap_or("?");
        for axis in ["y", "x"] {
            let labels = strings(&c[axis]);
            let mut seen = std::collections::BTreeSet::new();
            for l in &labels {
                assert!(
                    seen.insert(l),
                    "{what}: chart {name}: {axis} tick {l:?} repeated in {labels:?}"
                );
            }
        }
        if c["drawn"] == true {
            assert!(
                strings(&c["y"]).len() >= 2,
                "{what}: chart {name} has a y axis: {c}"
            );
        }
        assert!(
            strings(&c["clipped"]).is_empty(),
            "{what}: chart {name}: labels outside the drawing: {c}"
        );
    }
    let strip = charts
        .iter()
        .find(|c| c["chart"] == "nodes")
        .unwrap_or_else(|| panic!("{what}: no node strip"));
    let names = strings(&strip["nodes"]);
    assert!(
        names.iter().any(|n| n.starts_with("node-")),
        "{what}: the node strip names its nodes: {strip}"
    );
}

fn check(loaded: &Loaded, what: &str) -> Vec<(String, u64)> {
    assert!(
        loaded.console_errors.is_empty(),
        "{what}: console errors: {:?}",
        loaded.console_errors
    );
    let outside: Vec<&String> = loaded
        .requests
        .iter()
        .filter(|u| !u.starts_with("file://") && !u.starts_with("data:"))
        .collect();
    assert!(outside.is_empty(), "{what}: network requests: {outside:?}");
    assert!(
        !loaded.requests.is_empty(),
        "{what}: the page itself was requested (the network domain saw it)"
    );
    let counts = non_blank(&loaded.png, &loaded.charts);
    for (name, min) in THRESHOLDS {
        let got = counts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| *c)
            .unwrap_or_else(|| panic!("{what}: no chart {name} on the page"));
        assert!(
            got >= *min,
            "{what}: chart {name} has {got} non-blank pixels, want at least {min} (all: {counts:?})"
        );
    }
    counts
}

#[test]
fn the_report_loads_offline_without_errors_and_draws_every_chart() {
    let dir = std::env::temp_dir().join(format!("berth-report-browser-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let small = write_report(40, &dir);
    let large = write_report(1000, &dir);
    let mut browser = Browser::start(&dir);

    let loaded = load(&mut browser, &small);
    let counts = check(&loaded, "40 nodes");
    check_axes(&loaded, "40 nodes");
    for c in loaded.axes["charts"].as_array().into_iter().flatten() {
        if c["chart"] != "nodes" && c["drawn"] == true {
            assert!(
                strings(&c["x"]).len() >= 3 && strings(&c["xnote"]).is_empty(),
                "time passed, so chart {} has a time axis: {c}",
                c["chart"]
            );
        }
    }
    let fill_legend = loaded.axes["legends"]["fill-legend"].as_str().unwrap_or("");
    assert!(
        fill_legend.contains("(dashed)") && fill_legend.contains("(solid)"),
        "the fill chart's legend explains its lines: {fill_legend:?}"
    );
    eprintln!("non-blank pixels per chart (40 nodes): {counts:?}");
    let shot = dir.join("report-40.png");
    std::fs::write(&shot, &loaded.png).expect("screenshot written");
    if std::env::var("BERTH_UPDATE_SCREENSHOT").is_ok_and(|v| v == "1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/report.png");
        std::fs::write(docs, &loaded.png).expect("docs/report.png written");
    }

    let loaded = load(&mut browser, &large);
    let counts = check(&loaded, "1000 nodes");
    check_axes(&loaded, "1000 nodes");
    eprintln!("non-blank pixels per chart (1000 nodes): {counts:?}");

    // A run where no time passes, with no reservation and no NUMA node: no time axis, and
    // the charts with nothing to show say so instead of drawing empty axes.
    let still = dir.join("report-still.html");
    let text = "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\nstatus: {allocatable: {cpu: \"4\", memory: 8Gi}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {cpu: \"1\"}}}]}\n";
    let input = parse_str("still.yaml", text).unwrap_or_else(|e| panic!("{e}"));
    let hooks = Hooks {
        timeline: true,
        progress: false,
    };
    let sim = Simulation::run_with(vec![], Config::default(), &input, hooks);
    berth_sim::report::write(&sim, &still.to_string_lossy()).unwrap_or_else(|e| panic!("{e}"));
    let loaded = load(&mut browser, &still);
    assert!(
        loaded.console_errors.is_empty(),
        "{:?}",
        loaded.console_errors
    );
    check_axes(&loaded, "no time");
    let charts = loaded.axes["charts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for c in &charts {
        assert!(
            strings(&c["x"]).is_empty(),
            "no time passed, yet chart {} has a time axis: {c}",
            c["chart"]
        );
    }
    let by_name = |name: &str| {
        charts
            .iter()
            .find(|c| c["chart"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no chart {name}"))
    };
    for (name, says) in [
        ("reservations", "no reservations in this run"),
        ("fill", "no reservation was placed"),
        ("numa", "no node publishes a NodeResourceTopology"),
    ] {
        let c = by_name(name);
        assert_eq!(c["empty"], says, "chart {name}: {c}");
        assert_eq!(c["drawn"], false, "chart {name} draws nothing: {c}");
    }
    let pods = by_name("pods");
    assert_eq!(pods["drawn"], true, "{pods}");
    assert!(
        strings(&pods["xnote"])
            .iter()
            .any(|n| n.starts_with("no time passed")),
        "{pods}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn base64_decodes_as_rfc_4648() {
    assert_eq!(base64_decode("aGVsbG8="), b"hello");
    assert_eq!(base64_decode("YQ=="), b"a");
}
