//! deploy/ against a real API server: the manifests apply (server-side dry run, then for
//! real), the RBAC grants exactly the verbs berth uses, the CRDs are what `berth crd` prints,
//! and the configuration is one kube-scheduler itself accepts.

use std::path::{Path, PathBuf};
use std::process::Output;

use berth_testcluster::{Options, TestCluster};

mod support;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn kubectl(cluster: &TestCluster, args: &[&str]) -> Output {
    let out = cluster.kubectl_command().args(args).output().unwrap();
    eprintln!(
        "kubectl {}\n{}{}",
        args.join(" "),
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// A cluster without CRDs: deploy/ brings its own.
fn bare_cluster() -> TestCluster {
    TestCluster::start_with(Options::new().crds(Vec::new())).unwrap()
}

/// The objects in deploy/, deploy/provisioner/ and deploy/migrate/, as `kubectl apply` names them.
const OBJECTS: [&str; 22] = [
    "namespace/berth-system",
    "customresourcedefinition.apiextensions.k8s.io/reservations.scheduling.koordinator.sh",
    "customresourcedefinition.apiextensions.k8s.io/noderesourcetopologies.topology.node.k8s.io",
    "customresourcedefinition.apiextensions.k8s.io/podmigrationjobs.scheduling.koordinator.sh",
    "serviceaccount/berth",
    "clusterrole.rbac.authorization.k8s.io/berth",
    "clusterrolebinding.rbac.authorization.k8s.io/berth",
    "role.rbac.authorization.k8s.io/berth-leader-election",
    "rolebinding.rbac.authorization.k8s.io/berth-leader-election",
    "configmap/berth-config",
    "deployment.apps/berth",
    "poddisruptionbudget.policy/berth",
    "serviceaccount/berth-provisioner",
    "clusterrole.rbac.authorization.k8s.io/berth-provisioner",
    "clusterrolebinding.rbac.authorization.k8s.io/berth-provisioner",
    "deployment.apps/berth-provisioner",
    "serviceaccount/berth-migrate",
    "clusterrole.rbac.authorization.k8s.io/berth-migrate",
    "clusterrolebinding.rbac.authorization.k8s.io/berth-migrate",
    "role.rbac.authorization.k8s.io/berth-migrate-leader-election",
    "rolebinding.rbac.authorization.k8s.io/berth-migrate-leader-election",
    "deployment.apps/berth-migrate",
];

/// `kubectl apply --dry-run=server -f deploy/` succeeds: every object passes the API
/// server's validation and admission (Pod Security "restricted" included, as a warning on
/// the Deployment, which must not appear). A server-side dry run creates nothing, so the
/// namespace has to exist first for the namespaced objects to be admitted: it is applied
/// for real, as an installation would.
#[test]
fn deploy_applies_with_server_side_dry_run() {
    let cluster = bare_cluster();
    let dir = deploy_dir();
    let ns = dir.join("00-namespace.yaml");
    let out = kubectl(&cluster, &["apply", "-f", ns.to_str().unwrap()]);
    assert!(out.status.success());

    let provisioner = dir.join("provisioner");
    let migrate = dir.join("migrate");
    let out = kubectl(
        &cluster,
        &[
            "apply",
            "--dry-run=server",
            "-f",
            dir.to_str().unwrap(),
            "-f",
            provisioner.to_str().unwrap(),
            "-f",
            migrate.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for object in OBJECTS {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("{object} ")) && l.ends_with("(server dry run)")),
            "{object} missing from:\n{stdout}"
        );
    }
    assert!(
        !text(&out.stderr).contains("Warning"),
        "warnings:\n{}",
        text(&out.stderr)
    );
}

/// The file names order a plain `kubectl apply -f deploy/` on an empty cluster: the
/// namespace before what lives in it.
#[test]
fn deploy_applies_for_real_in_one_go() {
    let cluster = bare_cluster();
    let out = kubectl(&cluster, &["apply", "-f", deploy_dir().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = kubectl(
        &cluster,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ],
    );
    assert!(out.status.success());
}

/// Applied for real, berth's ServiceAccount can do exactly what [`support::EXPECTED`]
/// lists, the provisioner's what [`support::PROVISIONER_EXPECTED`] lists and `berth
/// migrate`'s what [`support::MIGRATE_EXPECTED`] lists, checked verb by
/// verb with SubjectAccessReviews; and a token of berth's account really works (and is
/// really limited).
#[tokio::test]
async fn rbac_grants_exactly_the_verbs_berth_uses() {
    let cluster = bare_cluster();
    let provisioner = deploy_dir().join("provisioner");
    let migrate = deploy_dir().join("migrate");
    let out = kubectl(
        &cluster,
        &[
            "apply",
            "-f",
            deploy_dir().to_str().unwrap(),
            "-f",
            provisioner.to_str().unwrap(),
            "-f",
            migrate.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    support::assert_grants(&cluster, "berth-system", "berth", support::EXPECTED).await;
    support::assert_grants(
        &cluster,
        "berth-system",
        "berth-provisioner",
        support::PROVISIONER_EXPECTED,
    )
    .await;
    support::assert_grants(
        &cluster,
        "berth-system",
        "berth-migrate",
        support::MIGRATE_EXPECTED,
    )
    .await;

    // The real thing: berth's own token.
    let token = cluster
        .service_account_token("berth-system", "berth")
        .await
        .unwrap();
    let kubeconfig = Kubeconfig::read_from(cluster.kubeconfig_for_token(&token).unwrap()).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();
    Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let denied = Api::<Secret>::namespaced(client, "berth-system")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&denied, kube::Error::Api(s) if s.code == 403),
        "{denied:?}"
    );
}

/// deploy/10-crds.yaml and the chart's crds/berth-crds.yaml are byte for byte what `berth crd` prints (crates/berth/src/main.rs:
/// the Reservation CRD, `---`, the NodeResourceTopology CRD, `---`, the PodMigrationJob CRD). Run with
/// `BERTH_UPDATE_DEPLOY=1` to rewrite the file after the CRDs change.
#[test]
fn crds_yaml_is_what_berth_crd_prints() {
    let reservation = berth_api::crd::to_yaml(&berth_api::crd::reservation_crd()).unwrap();
    let nrt = berth_api::crd::to_yaml(&berth_api::nrt::nrt_crd()).unwrap();
    let migration = berth_api::crd::to_yaml(&berth_api::crd::pod_migration_job_crd()).unwrap();
    let want = format!("{reservation}---\n{nrt}---\n{migration}");
    let path = deploy_dir().join("10-crds.yaml");
    if std::env::var_os("BERTH_UPDATE_DEPLOY").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let chart = deploy_dir().join("../charts/berth/crds/berth-crds.yaml");
    if std::env::var_os("BERTH_UPDATE_DEPLOY").is_some() {
        std::fs::write(&chart, &want).unwrap();
    }
    assert!(
        std::fs::read_to_string(&chart).unwrap() == want,
        "charts/berth/crds/berth-crds.yaml differs from `berth crd`; regenerate it with \
         BERTH_UPDATE_DEPLOY=1 cargo test -p berth-testcluster --test deploy"
    );
    let got = std::fs::read_to_string(&path).unwrap();
    assert!(
        got == want,
        "{} differs from `berth crd`; regenerate it with `cargo run -p berth -- crd > {}` \
         (or BERTH_UPDATE_DEPLOY=1 cargo test -p berth-testcluster --test deploy)",
        path.display(),
        "deploy/10-crds.yaml"
    );
}

/// The KubeSchedulerConfiguration in deploy/30-config.yaml is one kube-scheduler itself
/// accepts (validated and defaulted by the real binary, which writes it back and exits),
/// with the profile and lease the other manifests assume.
#[test]
fn config_is_a_valid_kube_scheduler_configuration() {
    let cluster = TestCluster::shared().unwrap();
    let manifest = std::fs::read_to_string(deploy_dir().join("30-config.yaml")).unwrap();
    let cm: serde_yaml_ng::Value = serde_yaml_ng::from_str(&manifest).unwrap();
    let mut config: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(cm["data"]["config.yaml"].as_str().unwrap()).unwrap();
    // With --config, kube-scheduler takes its kubeconfig only from the file (it needs one
    // before it gets to writing the configuration out).
    let kubeconfig = cluster.kubeconfig_path().to_str().unwrap();
    config["clientConnection"] =
        serde_yaml_ng::from_str(&format!("kubeconfig: {kubeconfig}")).unwrap();
    let file = cluster.dir().join("berth-config.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(&config).unwrap()).unwrap();
    let written = cluster.dir().join("berth-config.out.yaml");
    let out = std::process::Command::new(cluster.bin_dir().join("kube-scheduler"))
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
    assert_eq!(defaulted["profiles"].as_sequence().unwrap().len(), 1);
    let le = &defaulted["leaderElection"];
    assert_eq!(le["leaderElect"].as_bool(), Some(true));
    assert_eq!(le["resourceNamespace"].as_str(), Some("berth-system"));
    assert_eq!(le["resourceName"].as_str(), Some("berth"));
    assert_eq!(le["resourceLock"].as_str(), Some("leases"));
}
