//! The Helm chart (charts/berth) with helm built from tools/helm: it lints, its rendering is
//! accepted by a real API server (`kubectl apply --dry-run=server`, Pod Security
//! "restricted" without a warning), it grants exactly the rights deploy/ grants (the same
//! rules, and verb by verb the same answers from the API server's authorizer), and its
//! KubeSchedulerConfiguration is one berth and kube-scheduler both accept.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use berth_testcluster::{Options, TestCluster};
use serde_json::Value;

mod support;

const NAMESPACE: &str = "berth-system";
const RELEASE: &str = "berth";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn chart_dir() -> PathBuf {
    repo().join("charts/berth")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn helm(args: &[&str]) -> Output {
    let bin = berth_testcluster::bin_dir()
        .unwrap_or_else(|e| panic!("{e}"))
        .join("helm");
    // No repositories, no plugins, no cache outside the test's reach.
    let home = std::env::temp_dir().join(format!("berth-helm-{}", std::process::id()));
    let out = Command::new(&bin)
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
    eprintln!(
        "helm {}\n{}{}",
        args.join(" "),
        if args.first() == Some(&"template") {
            String::new()
        } else {
            text(&out.stdout)
        },
        text(&out.stderr)
    );
    out
}

/// `helm template` of the chart as `helm install berth charts/berth -n berth-system` would
/// render it, with `sets` (`key=value`).
fn render(sets: &[&str]) -> String {
    let chart = chart_dir();
    let mut args = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        "--include-crds",
    ];
    for s in sets {
        args.push("--set");
        args.push(s);
    }
    let out = helm(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The YAML documents of a stream, as JSON values (empty documents left out).
fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|d| {
            let v: serde_yaml_ng::Value = serde::Deserialize::deserialize(d).expect("YAML");
            serde_json::to_value(v).expect("JSON")
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendering"))
}

fn deploy_documents(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join("deploy").join(file)).expect(file);
    documents(&text)
}

#[test]
fn the_chart_lints_with_defaults_and_with_every_option() {
    let chart = chart_dir();
    let out = helm(&["lint", "--strict", chart.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let out = helm(&[
        "lint",
        "--strict",
        chart.to_str().unwrap(),
        "--set",
        "provisioner.enabled=true,metrics.serviceMonitor.enabled=true,scheduler.antiAffinity=hard",
    ]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// What the chart renders: the scheduler's shape (2 replicas, RollingUpdate, leader
/// election in the release's namespace, anti-affinity, PDB, probes, restricted security,
/// priority class), the provisioner and `berth migrate` only when asked for, the
/// ServiceMonitor only when asked.
#[test]
fn the_rendering_has_the_shape_an_ha_scheduler_needs() {
    let docs = documents(&render(&[]));
    let d = find(&docs, "Deployment", "berth");
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert!(
        pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            .is_array(),
        "{pod}"
    );
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "localhost/berth:0.1.0");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(c["resources"]["requests"]["memory"].is_string(), "{c}");
    let pdb = find(&docs, "PodDisruptionBudget", "berth");
    assert_eq!(
        pdb["spec"]["selector"], d["spec"]["selector"],
        "the PDB covers the scheduler's pods"
    );
    let svc = find(&docs, "Service", "berth-metrics");
    assert_eq!(svc["spec"]["ports"][0]["port"], 10259);
    assert!(!docs.iter().any(|d| d["kind"] == "ServiceMonitor"));
    assert!(!docs
        .iter()
        .any(|d| d["metadata"]["name"] == "berth-provisioner"));
    assert!(!docs
        .iter()
        .any(|d| d["metadata"]["name"] == "berth-migrate"));
    assert!(docs.iter().any(|d| d["kind"] == "CustomResourceDefinition"
        && d["metadata"]["name"] == "reservations.scheduling.koordinator.sh"));

    let config = config_of(&docs);
    let le = &config["leaderElection"];
    assert_eq!(le["leaderElect"], true);
    assert_eq!(le["resourceNamespace"], NAMESPACE);
    assert_eq!(le["resourceName"], "berth");
    let role = find(&docs, "Role", "berth-leader-election");
    assert_eq!(role["rules"][1]["resourceNames"][0], "berth");

    let docs = documents(&render(&[
        "provisioner.enabled=true",
        "metrics.serviceMonitor.enabled=true",
        "scheduler.antiAffinity=hard",
        "config.leaderElection.resourceName=sched",
    ]));
    let p = find(&docs, "Deployment", "berth-provisioner");
    assert_eq!(p["spec"]["replicas"], 1);
    assert_eq!(
        p["spec"]["template"]["spec"]["containers"][0]["args"][0],
        "provisioner"
    );
    let docs_migrate = documents(&render(&[
        "migrate.enabled=true",
        "migrate.maxMigratingPerWorkload=1",
    ]));
    let m = find(&docs_migrate, "Deployment", "berth-migrate");
    assert_eq!(m["spec"]["replicas"], 1);
    let args = &m["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args[0], "migrate");
    assert!(
        args.as_array()
            .is_some_and(|a| a.iter().any(|x| x == "--max-migrating-per-workload=1")),
        "{args}"
    );
    find(&docs, "ServiceMonitor", "berth");
    let pod = &find(&docs, "Deployment", "berth")["spec"]["template"]["spec"];
    assert!(
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            .is_array(),
        "{pod}"
    );
    assert_eq!(config_of(&docs)["leaderElection"]["resourceName"], "sched");
    let role = find(&docs, "Role", "berth-leader-election");
    assert_eq!(role["rules"][1]["resourceNames"][0], "sched");
}

/// The KubeSchedulerConfiguration inside the rendered ConfigMap.
fn config_of(docs: &[Value]) -> Value {
    let cm = find(docs, "ConfigMap", "berth-config");
    let text = cm["data"]["config.yaml"].as_str().expect("config.yaml");
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).expect("YAML");
    serde_json::to_value(v).expect("JSON")
}

/// The chart grants the same rules as deploy/ (which berth-kube's rbac test runs berth
/// with, and deploy.rs checks verb by verb), to the scheduler, the provisioner and `berth
/// migrate`.
#[test]
fn the_rendered_rbac_is_deploys() {
    let docs = documents(&render(&[
        "provisioner.enabled=true",
        "migrate.enabled=true",
    ]));
    let rbac = deploy_documents("20-rbac.yaml");
    let provisioner = deploy_documents("provisioner/50-provisioner.yaml");
    let migrate = deploy_documents("migrate/60-migrate.yaml");
    for (kind, chart_name, deploy_docs, deploy_name) in [
        ("ClusterRole", "berth", &rbac, "berth"),
        (
            "Role",
            "berth-leader-election",
            &rbac,
            "berth-leader-election",
        ),
        (
            "ClusterRole",
            "berth-provisioner",
            &provisioner,
            "berth-provisioner",
        ),
        ("ClusterRole", "berth-migrate", &migrate, "berth-migrate"),
    ] {
        assert_eq!(
            find(&docs, kind, chart_name)["rules"],
            find(deploy_docs, kind, deploy_name)["rules"],
            "{kind} {chart_name}: the chart's rules differ from deploy/'s"
        );
    }
    for (kind, name, sa) in [
        ("ClusterRoleBinding", "berth", "berth"),
        ("RoleBinding", "berth-leader-election", "berth"),
        (
            "ClusterRoleBinding",
            "berth-provisioner",
            "berth-provisioner",
        ),
        ("ClusterRoleBinding", "berth-migrate", "berth-migrate"),
    ] {
        let b = find(&docs, kind, name);
        assert_eq!(b["roleRef"]["name"], name);
        assert_eq!(b["subjects"][0]["name"], sa);
        assert_eq!(b["subjects"][0]["namespace"], NAMESPACE);
    }
}

/// `kubectl apply --dry-run=server` of `helm template`'s output: every object passes
/// validation and admission, Pod Security "restricted" included (the namespace is created as
/// deploy/00-namespace.yaml creates it, enforcing it); then applied for real, the chart's
/// ServiceAccounts have exactly the rights berth and its provisioner need.
#[tokio::test]
async fn the_rendering_applies_and_grants_exactly_what_berth_needs() {
    let cluster = TestCluster::start_with(Options::new().crds(Vec::new())).unwrap();
    let kubectl = |args: &[&str]| {
        let out = cluster.kubectl_command().args(args).output().unwrap();
        eprintln!(
            "kubectl {}\n{}{}",
            args.join(" "),
            text(&out.stdout),
            text(&out.stderr)
        );
        out
    };
    let ns = repo().join("deploy/00-namespace.yaml");
    assert!(kubectl(&["apply", "-f", ns.to_str().unwrap()])
        .status
        .success());
    let rendered = render(&["provisioner.enabled=true", "migrate.enabled=true"]);
    let file = cluster.dir().join("chart.yaml");
    std::fs::write(&file, &rendered).unwrap();
    let out = kubectl(&["apply", "--dry-run=server", "-f", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("Warning"),
        "warnings:\n{}",
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    let applied = stdout
        .lines()
        .filter(|l| l.ends_with("(server dry run)"))
        .count();
    assert_eq!(
        applied,
        documents(&rendered).len(),
        "every object of the rendering:\n{stdout}"
    );

    let out = kubectl(&["apply", "-f", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    support::assert_grants(&cluster, NAMESPACE, "berth", support::EXPECTED).await;
    support::assert_grants(
        &cluster,
        NAMESPACE,
        "berth-provisioner",
        support::PROVISIONER_EXPECTED,
    )
    .await;
    support::assert_grants(
        &cluster,
        NAMESPACE,
        "berth-migrate",
        support::MIGRATE_EXPECTED,
    )
    .await;
}

/// The configuration the chart renders is one kube-scheduler itself accepts (validated and
/// defaulted by the real binary) and one berth reads, with the profile and lease the other
/// objects assume.
#[test]
fn the_rendered_configuration_is_valid_for_kube_scheduler_and_berth() {
    let docs = documents(&render(&[]));
    let mut config = config_of(&docs);
    // berth's own reader (strict: unknown fields are errors).
    let text_config = serde_yaml_ng::to_string(&config).unwrap();
    let settings = berth_kube::Settings::parse("config.yaml", &text_config)
        .unwrap_or_else(|e| panic!("berth rejects the chart's configuration: {e}"));
    assert_eq!(settings.profiles.len(), 1);
    assert_eq!(settings.profiles[0].scheduler_name, "berth");
    assert!(settings.leader_election.leader_elect);
    assert_eq!(settings.leader_election.resource_namespace, NAMESPACE);
    assert_eq!(settings.leader_election.resource_name, "berth");

    let cluster = TestCluster::shared().unwrap();
    config["clientConnection"]["kubeconfig"] =
        Value::String(cluster.kubeconfig_path().to_string_lossy().into_owned());
    let file = cluster.dir().join("chart-config.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(&config).unwrap()).unwrap();
    let written = cluster.dir().join("chart-config.out.yaml");
    let out = Command::new(cluster.bin_dir().join("kube-scheduler"))
        .arg("--config")
        .arg(&file)
        .arg("--write-config-to")
        .arg(&written)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let defaulted: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&written).unwrap()).unwrap();
    assert_eq!(
        defaulted["profiles"][0]["schedulerName"].as_str(),
        Some("berth")
    );
    assert_eq!(
        defaulted["leaderElection"]["resourceNamespace"].as_str(),
        Some(NAMESPACE)
    );
}
