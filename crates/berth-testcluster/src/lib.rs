//! A real Kubernetes control plane for berth's tests: etcd and kube-apiserver, and on request
//! kube-controller-manager, built from their Go modules by `tools/build.sh`, started on free
//! loopback ports.
//!
//! Dev-only (`publish = false`): berth-kube's and berth's integration tests use it to run
//! the adapter against the API server it will meet in production, with real validation,
//! admission, RBAC, watch semantics and resource versions.
//!
//! ```no_run
//! # async fn demo() -> Result<(), berth_testcluster::Error> {
//! let cluster = berth_testcluster::TestCluster::start()?; // blocking, see below
//! let ns = cluster.unique_namespace("demo").await?;
//! cluster.create_node("node-a", "4", "8Gi", 110, &[("zone", "a")]).await?;
//! let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
//!     kube::Api::namespaced(cluster.client(), &ns);
//! # let _ = pods;
//! # Ok(())
//! # }
//! ```
//!
//! # What runs, and what does not
//!
//! etcd and kube-apiserver; kube-controller-manager only when a test asks for it
//! ([`Options::controller_manager`], with the controllers it names); no kubelet, no
//! scheduler (the differential tests start kube-scheduler or koord-scheduler themselves from
//! the same directory of binaries, with [`koordinator_crds`] for the latter). So:
//! - nodes are created with their status (capacity, allocatable, `Ready=True`) by
//!   [`TestCluster::create_node`], and nothing ever changes it behind the test's back;
//! - a bound pod deleted with a grace period would stay `Terminating` forever (no kubelet
//!   confirms), so delete with grace 0: [`TestCluster::delete_pod_now`];
//! - there is no namespace controller (a deleted namespace never goes away), and no garbage
//!   collector unless the test runs kube-controller-manager with it: give every test a fresh
//!   namespace ([`TestCluster::unique_namespace`]);
//! - no ServiceAccount controller: ServiceAccounts exist only when created
//!   ([`TestCluster::service_account_token`] creates the one it needs), and the
//!   `ServiceAccount` admission plugin is off so pods need none; `TaintNodesByCondition`
//!   is off too (no node lifecycle controller would ever lift its taint). `Priority` and
//!   the rest of the default admission chain stay on.
//!
//! # Blocking start, async helpers
//!
//! [`TestCluster::start`] blocks (it is usable from a plain `#[test]` and from inside
//! `#[tokio::test]`; it runs its own waits on a private runtime on a helper thread). The
//! helpers that talk to the API server are `async` and, like [`TestCluster::client`], must be
//! called inside the caller's Tokio runtime: a `kube::Client` spawns its connection task on
//! the runtime it is created in.
//!
//! # kube-controller-manager
//!
//! [`Options::controller_manager`] starts the real kube-controller-manager (same release as
//! the API server) with [`CONTROLLERS`]: the PersistentVolume controller binds claims and
//! volumes as in a real cluster (no provisioner runs: a test that needs dynamic provisioning
//! creates the volume itself once the claim names its node), and the workload controllers
//! (ReplicaSet, Deployment, StatefulSet), the garbage collector, and the ResourceClaim and
//! ephemeral-volume controllers create and remove what they own.
//! [`Options::controller_manager_with`] names other controllers. It runs with the admin
//! credentials and without leader election; `start` waits for its `/healthz`.
//! [`Provisioner`] plays the external provisioner of every StorageClass.
//!
//! ```no_run
//! # fn demo() -> Result<(), berth_testcluster::Error> {
//! use berth_testcluster::{Options, TestCluster};
//! let cluster = TestCluster::start_with(Options::new().controller_manager())?;
//! # let _ = cluster;
//! # Ok(())
//! # }
//! ```
//!
//! # Faults
//!
//! For fault-tolerance tests: [`FaultProxy`] sits between a client and the API server and
//! fails a chosen fraction of requests (500s and time-outs, before or after the API server
//! handled them), cuts watch streams and adds latency, reproducibly from a seed;
//! [`TestCluster::restart_apiserver`] (or [`stop_apiserver`](TestCluster::stop_apiserver),
//! then [`start_apiserver`](TestCluster::start_apiserver)) restarts kube-apiserver on the
//! same port and etcd, as after a crash.
//!
//! ```no_run
//! # async fn demo(cluster: &berth_testcluster::TestCluster) -> Result<(), berth_testcluster::Error> {
//! use berth_testcluster::{FaultProxy, Faults};
//! use std::time::Duration;
//! let proxy = FaultProxy::start(cluster, Faults {
//!     error_rate: 0.05,
//!     timeout_rate: 0.01,
//!     cut_watches_every: Some(Duration::from_secs(3)),
//!     ..Faults::default()
//! }).await?;
//! // Run the code under test with proxy.client() or proxy.kubeconfig_path(), then:
//! cluster.restart_apiserver_async().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Prerequisites
//!
//! Go (the version `tools/build.sh` names; `GOTOOLCHAIN=local`) on `PATH` the first time,
//! to build the binaries into `target/test-cluster/bin`; that happens automatically, once,
//! under a file lock. Without Go, starting a cluster fails with a message saying what to
//! install; it never skips. `BERTH_TEST_BIN_DIR` points at prebuilt binaries instead.
//!
//! # Cleanup
//!
//! Dropping the cluster kills its processes and removes its directory (kept, with the log
//! tails printed, when the test is panicking). The processes die with the test process in
//! any case (`PR_SET_PDEATHSIG`); directories left by killed test processes are removed by
//! the next start.

mod bins;
mod certs;
mod controllers;
mod faults;
mod process;
mod provisioner;

pub use controllers::CONTROLLERS;
pub use faults::{FaultProxy, FaultStats, Faults};
pub use provisioner::{Provisioner, ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER};

use std::collections::HashSet;
use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use process::Proc;

/// Why a cluster could not be started or a helper failed.
///
/// `Debug` prints the message (and its causes) as `Display` does, because tests
/// `.unwrap()` these: the panic should read "install Go from ..." with the log tail laid
/// out in lines, not a struct dump with escaped newlines.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `go` is not on `PATH` and the binaries are not built yet.
    #[error(
        "the test cluster needs etcd, kube-apiserver, kube-controller-manager, kubectl and \
         kube-scheduler, built from the Go modules in tools/ by tools/build.sh, and Go was not \
         found on PATH.\n\
         Install Go (the version is named below; GOTOOLCHAIN=local, so the installed Go \
         must be at least that) from https://go.dev/dl/ and put `go` on PATH, or set \
         BERTH_TEST_BIN_DIR to a directory holding those binaries (and helm).\n{output}"
    )]
    GoMissing {
        /// What `tools/build.sh` printed.
        output: String,
    },
    /// `tools/build.sh` failed.
    #[error("{} failed ({status}); its last lines:\n{output}", script.display())]
    Build {
        /// The script that ran.
        script: PathBuf,
        /// Its exit status.
        status: ExitStatus,
        /// Its last lines of output.
        output: String,
    },
    /// A binary is still missing after the build.
    #[error("{} is missing after tools/build.sh ran", path.display())]
    BinaryMissing {
        /// The missing file.
        path: PathBuf,
    },
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The certificates could not be generated.
    #[error("generating the cluster's certificates: {0}")]
    Certificates(#[from] rcgen::Error),
    /// etcd, kube-apiserver or kube-controller-manager exited while the cluster was
    /// starting.
    #[error("{name} exited ({status}) while the test cluster was starting\n{logs}")]
    Exited {
        /// `etcd`, `kube-apiserver` or `kube-controller-manager`.
        name: &'static str,
        /// Its exit status.
        status: ExitStatus,
        /// The tails of both logs.
        logs: String,
    },
    /// The cluster did not become ready (or a CRD not established) in time.
    #[error("timed out after {waited:?} waiting for {what}; last error: {last_error}\n{logs}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        waited: Duration,
        /// The last failed check.
        last_error: String,
        /// The tails of both logs.
        logs: String,
    },
    /// An API request failed.
    #[error("{context}: {source}")]
    Kube {
        /// What was being done.
        context: String,
        /// The failure.
        #[source]
        source: kube::Error,
    },
    /// A JSON document could not be built or read.
    #[error("{context}: {source}")]
    Json {
        /// What was being done.
        context: String,
        /// The failure.
        #[source]
        source: serde_json::Error,
    },
    /// [`FaultProxy`]'s TLS set-up failed.
    #[error("{context}: {source}")]
    Tls {
        /// What was being done.
        context: String,
        /// The failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A path that must go into a kubeconfig or a flag is not UTF-8.
    #[error("{} is not valid UTF-8", .0.display())]
    NonUtf8Path(PathBuf),
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")?;
        // Every variant's message already includes its immediate source.
        let mut source = std::error::Error::source(self).and_then(|s| s.source());
        while let Some(cause) = source {
            write!(f, "\ncaused by: {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

fn kube_err(context: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let context = context.into();
    move |source| Error::Kube { context, source }
}

/// The directory of the Go-built binaries (etcd, kube-apiserver, kube-controller-manager,
/// kubectl, kube-scheduler, helm), building them first with `tools/build.sh` when needed; for tests that run a tool
/// without a cluster (`helm lint`).
pub fn bin_dir() -> Result<PathBuf, Error> {
    bins::bin_dir()
}

/// berth's CRDs (Reservation, NodeResourceTopology), as `berth crd` prints them.
pub fn berth_crds() -> Vec<CustomResourceDefinition> {
    vec![berth_api::crd::reservation_crd(), berth_api::nrt::nrt_crd()]
}

/// Coscheduling's PodGroup CRDs, `scheduling.sigs.k8s.io` (Koordinator's, vendored) and
/// `scheduling.x-k8s.io` (scheduler-plugins', the same schema), from tests/fixtures/crds.
pub fn pod_group_crds() -> Vec<CustomResourceDefinition> {
    [
        include_str!("../../../tests/fixtures/crds/scheduling.sigs.k8s.io_podgroups.yaml"),
        include_str!("../../../tests/fixtures/crds/scheduling.x-k8s.io_podgroups.yaml"),
    ]
    .iter()
    .map(|text| serde_yaml_ng::from_str(text).expect("a vendored PodGroup CRD"))
    .collect()
}

/// Koordinator's CRDs of the release koord-scheduler is built from (tools/build.sh copies
/// them from its module into `koordinator-crds/` beside the binaries): Reservation, Device,
/// PodMigrationJob, PodGroup, ElasticQuota, NodeResourceTopology and the rest whose
/// informers koord-scheduler waits for.
pub fn koordinator_crds() -> Result<Vec<CustomResourceDefinition>, Error> {
    let dir = bin_dir()?.join("koordinator-crds");
    let io = |context: String| move |source| Error::Io { context, source };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(io(format!("reading {}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| {
            let text =
                std::fs::read_to_string(path).map_err(io(format!("reading {}", path.display())))?;
            serde_yaml_ng::from_str(&text).map_err(|e| Error::Io {
                context: format!("parsing {}", path.display()),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            })
        })
        .collect()
}

/// How to start a cluster. [`Options::default`] installs [`berth_crds`].
#[derive(Clone, Debug)]
pub struct Options {
    crds: Vec<CustomResourceDefinition>,
    apiserver_args: Vec<String>,
    /// kube-controller-manager's controllers; `None`: it does not run.
    controllers: Option<Vec<String>>,
    controller_manager_args: Vec<String>,
    start_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            crds: berth_crds(),
            apiserver_args: Vec::new(),
            controllers: None,
            controller_manager_args: Vec::new(),
            // A cold API server takes a few seconds; a 2-core CI machine also compiling
            // other crates, with several clusters starting at once, many times that.
            start_timeout: Duration::from_secs(180),
        }
    }
}

impl Options {
    /// The defaults: berth's CRDs, the standard flags.
    pub fn new() -> Self {
        Self::default()
    }

    /// The CRDs to install (and wait for `Established`) before `start` returns; empty
    /// for none.
    pub fn crds(mut self, crds: Vec<CustomResourceDefinition>) -> Self {
        self.crds = crds;
        self
    }

    /// One more kube-apiserver flag, e.g. `--feature-gates=...`. Flags come after the
    /// standard ones, so a repeated flag overrides (Go's flag parsing keeps the last).
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// What gang scheduling needs: the PodGroup CRDs of both groups ([`pod_group_crds`])
    /// added, and Kubernetes 1.35's Workload API (alpha) enabled.
    pub fn gangs(mut self) -> Self {
        self.crds.extend(pod_group_crds());
        self.apiserver_arg("--runtime-config=scheduling.k8s.io/v1alpha1=true")
            .apiserver_arg("--feature-gates=GenericWorkload=true")
    }

    /// Runs kube-controller-manager with [`CONTROLLERS`] (see the crate documentation).
    pub fn controller_manager(self) -> Self {
        self.controller_manager_with(CONTROLLERS)
    }

    /// Runs kube-controller-manager with these controllers (its `--controllers` names, e.g.
    /// `persistentvolume-binder-controller`), and only these.
    pub fn controller_manager_with(mut self, controllers: &[&str]) -> Self {
        self.controllers = Some(controllers.iter().map(|c| c.to_string()).collect());
        self
    }

    /// One more kube-controller-manager flag (after the standard ones, so a repeated flag
    /// overrides). Only used when it runs.
    pub fn controller_manager_arg(mut self, arg: impl Into<String>) -> Self {
        self.controller_manager_args.push(arg.into());
        self
    }

    /// How long `start` may take from launching the processes to the CRDs being
    /// established and kube-controller-manager healthy (default 180 s).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }
}

/// A running etcd + kube-apiserver (+ kube-controller-manager). Everything is torn down on
/// drop.
pub struct TestCluster {
    dir: PathBuf,
    bin_dir: PathBuf,
    /// etcd client, etcd peer, kube-apiserver, kube-controller-manager (reserved whether or
    /// not it runs).
    ports: [u16; 4],
    server_url: String,
    admin_token: String,
    ca_pem: String,
    kubeconfig: PathBuf,
    config: kube::Config,
    procs: Mutex<Vec<Proc>>,
    /// kube-apiserver's flags, kept for [`TestCluster::start_apiserver`].
    apiserver_args: Vec<String>,
    /// The API server's port while [`TestCluster::stop_apiserver`] keeps it down: bound
    /// but not listening, so connections are refused (as by a dead server) and no other
    /// socket, e.g. an outgoing connection's ephemeral port, takes it before the restart.
    held_port: Mutex<Option<tokio::net::TcpSocket>>,
    start_timeout: Duration,
    started_in: Duration,
    /// Keep the directory (logs) when dropped: set when `start` fails.
    keep_dir: bool,
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCluster")
            .field("server_url", &self.server_url)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// Ports held by clusters of this process, so that two clusters starting at once never
/// pick the same one (the kernel may hand a just-released port out again).
static PORTS_IN_USE: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// The cluster [`TestCluster::shared`] hands out.
static SHARED: Mutex<Option<&'static TestCluster>> = Mutex::new(None);

const ADMIN_USER: &str = "berth-test-admin";
const ETCD: &str = "etcd";
const APISERVER: &str = "kube-apiserver";
const CONTROLLER_MANAGER: &str = "kube-controller-manager";
/// Log lines shown in errors.
const TAIL_LINES: usize = 30;

impl TestCluster {
    /// Starts a cluster with [`Options::default`] (berth's CRDs installed). Blocks until
    /// the API server is ready and the CRDs are established.
    pub fn start() -> Result<TestCluster, Error> {
        Self::start_with(Options::default())
    }

    /// Starts a cluster with the given options. Builds the binaries first if needed (see
    /// the crate documentation). A port taken between choosing it and the process binding
    /// it is retried with fresh ports.
    pub fn start_with(options: Options) -> Result<TestCluster, Error> {
        let bin_dir = bins::bin_dir()?;
        remove_stale_dirs();
        let dir = make_run_dir()?;
        let admin_token = random_token()?;
        let pki = certs::generate()?;
        let files = [
            ("ca.crt", pki.ca_pem.as_str()),
            ("apiserver.crt", pki.serving_cert_pem.as_str()),
            ("apiserver.key", pki.serving_key_pem.as_str()),
            ("sa.key", pki.sa_key_pem.as_str()),
            ("sa.pub", pki.sa_pub_pem.as_str()),
        ];
        for (name, text) in files {
            write_private(&dir.join(name), text)?;
        }
        write_private(
            &dir.join("tokens.csv"),
            &format!("{admin_token},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n"),
        )?;
        let server_url = String::new();
        let mut cluster = TestCluster {
            kubeconfig: dir.join("kubeconfig"),
            config: kube::Config::new(http::Uri::from_static("https://127.0.0.1")),
            dir,
            bin_dir,
            ports: [0; 4],
            server_url,
            admin_token,
            ca_pem: pki.ca_pem,
            procs: Mutex::new(Vec::new()),
            apiserver_args: Vec::new(),
            held_port: Mutex::new(None),
            start_timeout: options.start_timeout,
            started_in: Duration::ZERO,
            keep_dir: false,
        };
        let token_file = cluster.dir.join("admin.token");
        write_private(&token_file, &cluster.admin_token)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            cluster.ports = reserve_ports()?;
            cluster.server_url = format!("https://127.0.0.1:{}", cluster.ports[2]);
            let uri = cluster
                .server_url
                .parse::<http::Uri>()
                .map_err(|e| io_err("parsing the server URL")(std::io::Error::other(e)))?;
            cluster.config = kube::Config::new(uri);
            cluster.config.root_cert = Some(vec![pki.ca_der.clone()]);
            cluster.config.auth_info.token_file = Some(path_str(&token_file)?);
            write_kubeconfig(
                &cluster.kubeconfig,
                &cluster.server_url,
                Some(&cluster.dir.join("ca.crt")),
                ADMIN_USER,
                &cluster.admin_token,
            )?;
            let started = Instant::now();
            match cluster.launch(&options) {
                Ok(()) => {
                    cluster.started_in = started.elapsed();
                    return Ok(cluster);
                }
                // Another process took a port between our choosing and binding it.
                Err(e) if attempt < 3 && port_clash(&e) => cluster.halt(),
                Err(e) => {
                    // Dropped below: processes killed, logs kept for the error to point at.
                    cluster.keep_dir = true;
                    return Err(e);
                }
            }
        }
    }

    /// One cluster for the whole test process, started on first use (default options)
    /// and stopped when the process exits. Cheaper than a cluster per test when tests
    /// keep to their own namespaces; a test that needs a pristine cluster (cluster-scoped
    /// objects, e.g. nodes a scheduler would see) should [`start`](Self::start) its own.
    pub fn shared() -> Result<&'static TestCluster, Error> {
        let mut slot = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cluster) = *slot {
            return Ok(cluster);
        }
        let cluster: &'static TestCluster = Box::leak(Box::new(TestCluster::start()?));
        // Statics are never dropped: stop it at exit instead. (Its processes would die
        // with the process anyway; this also removes its directory.)
        // SAFETY: registering a plain `extern "C" fn` without captures.
        unsafe {
            libc::atexit(stop_shared);
        }
        *slot = Some(cluster);
        Ok(cluster)
    }

    /// Starts etcd and kube-apiserver and waits for readiness and the CRDs, then
    /// kube-controller-manager if asked for, and waits for its health.
    fn launch(&mut self, options: &Options) -> Result<(), Error> {
        let [etcd_client, etcd_peer, secure, _] = self.ports;
        let data = self.dir.join("etcd-data");
        let _ = std::fs::remove_dir_all(&data);
        let etcd_args = vec![
            "--name=berth-test".to_string(),
            format!("--data-dir={}", path_str(&data)?),
            format!("--listen-client-urls=http://127.0.0.1:{etcd_client}"),
            format!("--advertise-client-urls=http://127.0.0.1:{etcd_client}"),
            format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
            format!("--initial-cluster=berth-test=http://127.0.0.1:{etcd_peer}"),
            // Test data is disposable; fsync would only make every write slow.
            "--unsafe-no-fsync".to_string(),
            "--log-level=warn".to_string(),
        ];
        let d = |name: &str| path_str(&self.dir.join(name));
        let mut api_args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_client}"),
            "--bind-address=127.0.0.1".to_string(),
            "--advertise-address=127.0.0.1".to_string(),
            format!("--secure-port={secure}"),
            format!("--tls-cert-file={}", d("apiserver.crt")?),
            format!("--tls-private-key-file={}", d("apiserver.key")?),
            format!("--client-ca-file={}", d("ca.crt")?),
            format!("--token-auth-file={}", d("tokens.csv")?),
            format!("--service-account-issuer=https://127.0.0.1:{secure}"),
            format!("--service-account-key-file={}", d("sa.pub")?),
            format!("--service-account-signing-key-file={}", d("sa.key")?),
            "--service-cluster-ip-range=10.0.0.0/24".to_string(),
            "--authorization-mode=RBAC".to_string(),
            // No controllers run: nothing would create ServiceAccounts for pods or lift
            // the not-ready taint TaintNodesByCondition puts on new nodes.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition".to_string(),
            // No kubelet or kube-proxy answers on the advertised address.
            "--endpoint-reconciler-type=none".to_string(),
            "--allow-privileged=true".to_string(),
            format!("--cert-dir={}", d("certdir")?),
        ];
        api_args.extend(options.apiserver_args.iter().cloned());
        self.apiserver_args = api_args.clone();

        let deadline = Instant::now() + options.start_timeout;
        let etcd = Proc::start(
            ETCD,
            &self.bin_dir.join("etcd"),
            &etcd_args,
            &self.dir.join("etcd.log"),
        )
        .map_err(io_err("starting etcd"))?;
        self.procs_mut().push(etcd);
        let apiserver = Proc::start(
            APISERVER,
            &self.bin_dir.join("kube-apiserver"),
            &api_args,
            &self.dir.join("kube-apiserver.log"),
        )
        .map_err(io_err("starting kube-apiserver"))?;
        self.procs_mut().push(apiserver);

        let this = &*self;
        block_on(async move {
            let client = Client::try_from(this.config.clone())
                .map_err(kube_err("building the admin client"))?;
            this.wait_ready(&client, deadline).await?;
            for crd in &options.crds {
                this.install_crd(&client, crd, deadline).await?;
            }
            if let Some(controllers) = &options.controllers {
                this.start_controller_manager(controllers, options, deadline)
                    .await?;
            }
            Ok(())
        })?
    }

    /// Launches kube-controller-manager and waits until its `/healthz` answers.
    async fn start_controller_manager(
        &self,
        controllers: &[String],
        options: &Options,
        deadline: Instant,
    ) -> Result<(), Error> {
        let d = |name: &str| path_str(&self.dir.join(name));
        let mut args = controllers::args(
            &controllers::Files {
                kubeconfig: path_str(&self.kubeconfig)?,
                cert: d("apiserver.crt")?,
                key: d("apiserver.key")?,
                cert_dir: d("kcm-certdir")?,
            },
            self.ports[3],
            controllers,
        );
        args.extend(options.controller_manager_args.iter().cloned());
        let kcm = Proc::start(
            CONTROLLER_MANAGER,
            &self.bin_dir.join(CONTROLLER_MANAGER),
            &args,
            &self.dir.join("kube-controller-manager.log"),
        )
        .map_err(io_err("starting kube-controller-manager"))?;
        self.procs_mut().push(kcm);
        // Served with the API server's certificate (valid for 127.0.0.1, signed by the
        // cluster CA); the admin token passes its delegated authentication.
        let mut config = self.config.clone();
        config.cluster_url = format!("https://127.0.0.1:{}", self.ports[3])
            .parse::<http::Uri>()
            .map_err(|e| {
                io_err("parsing the controller manager's URL")(std::io::Error::other(e))
            })?;
        let client = Client::try_from(config)
            .map_err(kube_err("building the controller manager's client"))?;
        let started = Instant::now();
        loop {
            self.check_alive()?;
            let last_error = match http::Request::get("/healthz").body(Vec::new()) {
                Ok(req) => match client.request_text(req).await {
                    Ok(_) => return Ok(()),
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(self.timeout("kube-controller-manager /healthz", started, last_error));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn procs_mut(&self) -> std::sync::MutexGuard<'_, Vec<Proc>> {
        self.procs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Err(Exited)` if a process has died.
    fn check_alive(&self) -> Result<(), Error> {
        let mut procs = self.procs_mut();
        for p in procs.iter_mut() {
            if let Some(status) = p.exited() {
                let name = p.name;
                drop(procs);
                return Err(Error::Exited {
                    name,
                    status,
                    logs: self.log_tails(TAIL_LINES),
                });
            }
        }
        Ok(())
    }

    /// Polls `GET /readyz` (as admin) until it answers 200.
    async fn wait_ready(&self, client: &Client, deadline: Instant) -> Result<(), Error> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            self.check_alive()?;
            let last_error = match http::Request::get("/readyz").body(Vec::new()) {
                Ok(req) => match client.request_text(req).await {
                    Ok(_) => return Ok(()),
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(self.timeout("/readyz", started, last_error));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
    }

    /// Creates `crd` and waits until it is `Established` (its resources served).
    async fn install_crd(
        &self,
        client: &Client,
        crd: &CustomResourceDefinition,
        deadline: Instant,
    ) -> Result<(), Error> {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        api.create(&PostParams::default(), crd)
            .await
            .map_err(kube_err(format!("creating CRD {name}")))?;
        let started = Instant::now();
        loop {
            let got = api
                .get(&name)
                .await
                .map_err(kube_err(format!("reading CRD {name}")))?;
            let conditions = got.status.and_then(|s| s.conditions).unwrap_or_default();
            if conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let last = format!("conditions {conditions:?}");
                return Err(self.timeout(&format!("CRD {name} Established"), started, last));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn timeout(&self, what: &str, started: Instant, last_error: String) -> Error {
        Error::Timeout {
            what: what.to_string(),
            waited: started.elapsed(),
            last_error,
            logs: self.log_tails(TAIL_LINES),
        }
    }

    /// The last `lines` lines of the etcd and kube-apiserver logs (and
    /// kube-controller-manager's, when it ran).
    pub fn log_tails(&self, lines: usize) -> String {
        // What runs always, then what a test may have started beside it (a scheduler
        // logging into the cluster's directory, as the differential tests' do).
        let optional = [
            (CONTROLLER_MANAGER, "kube-controller-manager.log"),
            ("kube-scheduler", "kube-scheduler.log"),
            ("koord-scheduler", "koord-scheduler.log"),
        ];
        [(ETCD, "etcd.log"), (APISERVER, "kube-apiserver.log")]
            .iter()
            .map(|(name, file)| process::tail(name, &self.dir.join(file), lines))
            .chain(optional.iter().filter_map(|(name, file)| {
                let path = self.dir.join(file);
                path.exists().then(|| process::tail(name, &path, lines))
            }))
            .collect()
    }

    /// `true` while this cluster's kube-controller-manager runs.
    pub fn controller_manager_running(&self) -> bool {
        self.procs_mut()
            .iter_mut()
            .any(|p| p.name == CONTROLLER_MANAGER && p.exited().is_none())
    }

    /// An admin client (`system:masters`). Call inside a Tokio runtime.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (kube's client spawns its connection task on the current
    /// runtime), or if kube rejects the configuration `start` already used successfully.
    pub fn client(&self) -> Client {
        if tokio::runtime::Handle::try_current().is_err() {
            panic!(
                "berth-testcluster: TestCluster::client() needs a Tokio runtime (use \
                 #[tokio::test], or call it inside Runtime::block_on)"
            );
        }
        match Client::try_from(self.config.clone()) {
            Ok(client) => client,
            Err(e) => panic!("berth-testcluster: building a client for {self:?}: {e}"),
        }
    }

    /// The admin client's configuration, to build clients with other settings.
    pub fn kube_config(&self) -> kube::Config {
        self.config.clone()
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The admin kubeconfig (CA file and token; server [`Self::server_url`]), for kubectl
    /// or a berth process under test.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Writes a kubeconfig that authenticates with `token` (e.g. from
    /// [`Self::service_account_token`]) and returns its path, in the cluster's directory.
    pub fn kubeconfig_for_token(&self, token: &str) -> Result<PathBuf, Error> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("kubeconfig-{n}"));
        write_kubeconfig(
            &path,
            &self.server_url,
            Some(&self.dir.join("ca.crt")),
            "token-user",
            token,
        )?;
        Ok(path)
    }

    /// The admin bearer token.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The cluster CA (PEM), which signed the serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// `http://127.0.0.1:<port>` of etcd.
    pub fn etcd_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports[0])
    }

    /// Where etcd, kube-apiserver, kube-controller-manager, kubectl and kube-scheduler are.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The kubectl built with the cluster (same version).
    pub fn kubectl(&self) -> PathBuf {
        self.bin_dir.join("kubectl")
    }

    /// `kubectl --kubeconfig <admin kubeconfig>`, ready for more arguments.
    pub fn kubectl_command(&self) -> Command {
        let mut cmd = Command::new(self.kubectl());
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        cmd
    }

    /// The cluster's directory: certificates, kubeconfigs, logs, etcd data.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// From launching the processes to the CRDs being established.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Creates a namespace. Namespaces are never removed (no namespace controller runs).
    pub async fn create_namespace(&self, name: &str) -> Result<Namespace, Error> {
        let ns: Namespace = from_json(json!({"metadata": {"name": name}}), "a namespace")?;
        Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &ns)
            .await
            .map_err(kube_err(format!("creating namespace {name}")))
    }

    /// Creates a namespace named `<prefix>-<random suffix>` (the API server's
    /// `generateName`) and returns its name: one per test keeps tests apart on a shared
    /// cluster.
    pub async fn unique_namespace(&self, prefix: &str) -> Result<String, Error> {
        let ns: Namespace = from_json(
            json!({"metadata": {"generateName": format!("{prefix}-")}}),
            "a namespace",
        )?;
        let created = Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &ns)
            .await
            .map_err(kube_err(format!("creating a namespace {prefix}-*")))?;
        Ok(created.metadata.name.unwrap_or_default())
    }

    /// Creates a Ready node with `cpu`, `memory` and `pods` as both capacity and
    /// allocatable, the labels a kubelet sets (`kubernetes.io/hostname`, `kubernetes.io/os`,
    /// `kubernetes.io/arch`) plus `labels`. No kubelet runs: the status stays as created.
    pub async fn create_node(
        &self,
        name: &str,
        cpu: &str,
        memory: &str,
        pods: u32,
        labels: &[(&str, &str)],
    ) -> Result<Node, Error> {
        let mut all = serde_json::Map::new();
        all.insert("kubernetes.io/hostname".into(), name.into());
        all.insert("kubernetes.io/os".into(), "linux".into());
        all.insert("kubernetes.io/arch".into(), "amd64".into());
        for (k, v) in labels {
            all.insert((*k).into(), (*v).into());
        }
        let resources = json!({"cpu": cpu, "memory": memory, "pods": pods.to_string()});
        let node: Node = from_json(
            json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": all},
                "status": {
                    "capacity": resources,
                    "allocatable": resources,
                    "conditions": [ready_condition(true)],
                    "phase": "Running",
                },
            }),
            "a node",
        )?;
        self.create_node_with(node).await
    }

    /// Creates `node` as given, status included (for taints, extended resources, NUMA
    /// labels...). If the API server dropped the status on create, it is written through
    /// the status subresource.
    pub async fn create_node_with(&self, node: Node) -> Result<Node, Error> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let api: Api<Node> = Api::all(self.client());
        let created = api
            .create(&PostParams::default(), &node)
            .await
            .map_err(kube_err(format!("creating node {name}")))?;
        if node.status.is_none() || created.status == node.status {
            return Ok(created);
        }
        let patch = json!({"status": node.status});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err(format!("writing the status of node {name}")))
    }

    /// Sets the node's `Ready` condition (what a kubelet's heartbeat, or its absence,
    /// would do).
    pub async fn set_node_ready(&self, name: &str, ready: bool) -> Result<Node, Error> {
        let patch = json!({"status": {"conditions": [ready_condition(ready)]}});
        Api::<Node>::all(self.client())
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err(format!("setting node {name} Ready={ready}")))
    }

    /// Deletes a pod with grace period 0, so it is gone at once even when bound (no
    /// kubelet would ever confirm a graceful deletion). A pod already gone is fine.
    pub async fn delete_pod_now(&self, namespace: &str, name: &str) -> Result<(), Error> {
        let api: Api<Pod> = Api::namespaced(self.client(), namespace);
        match api
            .delete(name, &DeleteParams::default().grace_period(0))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
            Err(e) => Err(kube_err(format!("deleting pod {namespace}/{name}"))(e)),
        }
    }

    /// A token for ServiceAccount `namespace/name` (TokenRequest, one hour), creating the
    /// ServiceAccount if it does not exist (no controller creates them here). Use it with
    /// [`Self::kubeconfig_for_token`] to act with that account's RBAC.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, Error> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client(), namespace);
        let sa: ServiceAccount =
            from_json(json!({"metadata": {"name": name}}), "a ServiceAccount")?;
        match api.create(&PostParams::default(), &sa).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(e) => {
                return Err(kube_err(format!(
                    "creating ServiceAccount {namespace}/{name}"
                ))(e))
            }
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .map_err(kube_err(format!(
                "requesting a token for {namespace}/{name}"
            )))?;
        Ok(answer.status.map(|s| s.token).unwrap_or_default())
    }

    /// Kills kube-apiserver (SIGKILL: a crash, not a graceful shutdown; open watches and
    /// requests in flight are cut). etcd keeps running with every object. The port stays
    /// reserved for [`Self::start_apiserver`]: meanwhile connections to it are refused.
    /// Nothing happens if the API server is already down.
    pub fn stop_apiserver(&self) {
        let mut procs = self.procs_mut();
        let mut kept = Vec::with_capacity(procs.len());
        for mut p in procs.drain(..) {
            if p.name == APISERVER {
                p.kill();
            } else {
                kept.push(p);
            }
        }
        *procs = kept;
        // Under the processes' lock, so a concurrent start cannot launch in between.
        let mut held = self.held_port_mut();
        if held.is_none() {
            *held = hold_port(self.ports[2]);
        }
    }

    /// `true` while a kube-apiserver process of this cluster runs (ready or not).
    pub fn apiserver_running(&self) -> bool {
        self.procs_mut()
            .iter_mut()
            .any(|p| p.name == APISERVER && p.exited().is_none())
    }

    /// Starts kube-apiserver again after [`Self::stop_apiserver`], on the same port with
    /// the same flags, certificates and etcd, and blocks until `/readyz` answers (up to the
    /// start timeout of [`Options`]). A no-op wait if it is running. Clients made before
    /// keep working: they reconnect on their next request.
    ///
    /// Blocking: inside a runtime whose other tasks must go on meanwhile (a scheduler under
    /// test), use [`Self::start_apiserver_async`].
    pub fn start_apiserver(&self) -> Result<(), Error> {
        block_on(self.start_apiserver_async())?
    }

    /// [`Self::start_apiserver`] without blocking the caller's runtime.
    pub async fn start_apiserver_async(&self) -> Result<(), Error> {
        let deadline = Instant::now() + self.start_timeout;
        let client =
            Client::try_from(self.config.clone()).map_err(kube_err("building the admin client"))?;
        loop {
            let log_from = self.spawn_apiserver()?;
            match self.wait_ready(&client, deadline).await {
                Ok(()) => return Ok(()),
                // Something took the port in the instant between releasing it and the new
                // process binding it (an outgoing connection's ephemeral port): try again.
                Err(Error::Exited { name, .. })
                    if name == APISERVER
                        && Instant::now() < deadline
                        && log_from.is_some_and(|from| {
                            self.apiserver_log_since(from)
                                .contains("address already in use")
                        }) =>
                {
                    self.stop_apiserver();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// [`Self::stop_apiserver`] then [`Self::start_apiserver`]: the API server restarted
    /// on the same etcd, as after a crash or an upgrade.
    pub fn restart_apiserver(&self) -> Result<(), Error> {
        self.stop_apiserver();
        self.start_apiserver()
    }

    /// [`Self::restart_apiserver`] without blocking the caller's runtime.
    pub async fn restart_apiserver_async(&self) -> Result<(), Error> {
        self.stop_apiserver();
        self.start_apiserver_async().await
    }

    /// Launches kube-apiserver unless one runs; returns the length of its log before the
    /// launch (to read only the new process's lines), `None` if it was running.
    fn spawn_apiserver(&self) -> Result<Option<u64>, Error> {
        let mut procs = self.procs_mut();
        // A process that died (e.g. on a port clash) is reaped and replaced.
        procs.retain_mut(|p| p.name != APISERVER || p.exited().is_none());
        if procs.iter().any(|p| p.name == APISERVER) {
            return Ok(None);
        }
        let log = self.dir.join("kube-apiserver.log");
        let log_from = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        // Released only now, as late as possible before the new process binds the port.
        drop(self.held_port_mut().take());
        let apiserver = Proc::start(
            APISERVER,
            &self.bin_dir.join("kube-apiserver"),
            &self.apiserver_args,
            &log,
        )
        .map_err(io_err("restarting kube-apiserver"))?;
        procs.push(apiserver);
        Ok(Some(log_from))
    }

    /// What kube-apiserver logged after byte `from`.
    fn apiserver_log_since(&self, from: u64) -> String {
        use std::io::{Read, Seek, SeekFrom};
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.join("kube-apiserver.log")) {
            if f.seek(SeekFrom::Start(from)).is_ok() {
                let mut bytes = Vec::new();
                let _ = f.read_to_end(&mut bytes);
                text = String::from_utf8_lossy(&bytes).into_owned();
            }
        }
        text
    }

    fn held_port_mut(&self) -> std::sync::MutexGuard<'_, Option<tokio::net::TcpSocket>> {
        self.held_port.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Kills the processes, releases the ports and removes the directory, or, with
    /// `keep_logs`, only the etcd data (the logs stay for a failure to be read).
    fn stop(&self, keep_logs: bool) {
        self.halt();
        if keep_logs {
            let _ = std::fs::remove_dir_all(self.dir.join("etcd-data"));
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// Kills the processes and releases the ports.
    fn halt(&self) {
        let mut procs = std::mem::take(&mut *self.procs_mut());
        // In reverse start order (the controller manager, then the API server), so none
        // logs a storm of errors about the one behind it.
        for p in procs.iter_mut().rev() {
            p.kill();
        }
        drop(self.held_port_mut().take());
        let mut ports = PORTS_IN_USE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = ports.as_mut() {
            for port in self.ports {
                set.remove(&port);
            }
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        self.stop(panicking || self.keep_dir);
        if panicking {
            // Shown with the failing test's output.
            eprintln!(
                "berth-testcluster: the test panicked; logs kept in {}\n{}",
                self.dir.display(),
                self.log_tails(20)
            );
        }
    }
}

extern "C" fn stop_shared() {
    // `try_lock`: never block process exit on a test thread still holding the slot.
    if let Ok(slot) = SHARED.try_lock() {
        if let Some(cluster) = *slot {
            cluster.stop(false);
        }
    }
}

fn ready_condition(ready: bool) -> serde_json::Value {
    if ready {
        json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
               "message": "berth-testcluster: no kubelet runs; the node was created Ready"})
    } else {
        json!({"type": "Ready", "status": "False", "reason": "KubeletNotReady",
               "message": "berth-testcluster: set NotReady by the test"})
    }
}

fn from_json<T: k8s_openapi::serde::de::DeserializeOwned>(
    value: serde_json::Value,
    what: &str,
) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|source| Error::Json {
        context: format!("building {what}"),
        source,
    })
}

/// `e` is a process exiting because a chosen port was taken in the meantime.
fn port_clash(e: &Error) -> bool {
    matches!(e, Error::Exited { logs, .. } if logs.contains("address already in use"))
}

/// Four free loopback ports (etcd client, etcd peer, API server, controller manager),
/// distinct from those of this process's other clusters.
fn reserve_ports() -> Result<[u16; 4], Error> {
    let mut in_use = PORTS_IN_USE.lock().unwrap_or_else(|p| p.into_inner());
    let set = in_use.get_or_insert_with(HashSet::new);
    // Listeners held together, so the three differ; dropped before the processes bind.
    let mut listeners = Vec::new();
    let mut ports = Vec::new();
    while ports.len() < 4 {
        let l = TcpListener::bind("127.0.0.1:0").map_err(io_err("finding a free port"))?;
        let port = l
            .local_addr()
            .map_err(io_err("finding a free port"))?
            .port();
        if set.insert(port) {
            ports.push(port);
        }
        listeners.push(l);
    }
    Ok([ports[0], ports[1], ports[2], ports[3]])
}

/// A socket bound to `127.0.0.1:port` without listening (see `TestCluster::held_port`);
/// `None` if the port cannot be bound, in which case it is simply not held.
/// `SO_REUSEADDR`: the dead server's connections linger in `TIME_WAIT` on that port.
fn hold_port(port: u16) -> Option<tokio::net::TcpSocket> {
    let socket = tokio::net::TcpSocket::new_v4().ok()?;
    socket.set_reuseaddr(true).ok()?;
    socket
        .bind(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
        .ok()?;
    Some(socket)
}

/// Where cluster directories go: `/dev/shm` when there is one (etcd on tmpfs is faster
/// and never touches the disk), else the system temp directory.
fn run_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(meta) = std::fs::metadata(shm) {
            if !meta.permissions().readonly() {
                return shm.to_path_buf();
            }
        }
    }
    std::env::temp_dir()
}

const DIR_PREFIX: &str = "berth-testcluster-";

/// A fresh `berth-testcluster-<pid>-<n>` directory, mode 0700 (it holds keys).
fn make_run_dir() -> Result<PathBuf, Error> {
    use std::os::unix::fs::DirBuilderExt;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = run_base();
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("{DIR_PREFIX}{}-{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(format!("creating {}", dir.display()))(e)),
        }
    }
}

/// Removes the directories of test processes that no longer run (killed before their
/// clusters were dropped), once per process.
fn remove_stale_dirs() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if !Path::new("/proc/self").exists() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(run_base()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix(DIR_PREFIX))
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
            else {
                continue;
            };
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
}

fn write_private(path: &Path, text: &str) -> Result<(), Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(format!("writing {}", path.display())))?;
    f.write_all(text.as_bytes())
        .map_err(io_err(format!("writing {}", path.display())))
}

/// A kubeconfig (JSON, which every kubeconfig reader accepts) with a server, the CA file
/// (none for a plain-HTTP server such as [`FaultProxy`]) and a token.
fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca_file: Option<&Path>,
    user: &str,
    token: &str,
) -> Result<(), Error> {
    let mut cluster = json!({ "server": server });
    if let Some(ca) = ca_file {
        cluster["certificate-authority"] = path_str(ca)?.into();
    }
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "berth-test", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "berth-test", "context": {
            "cluster": "berth-test", "user": user, "namespace": "default",
        }}],
        "current-context": "berth-test",
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|source| Error::Json {
        context: "rendering a kubeconfig".into(),
        source,
    })?;
    write_private(path, &text)
}

fn path_str(path: &Path) -> Result<String, Error> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| Error::NonUtf8Path(path.to_path_buf()))
}

/// 32 hex digits from the kernel's random source.
fn random_token() -> Result<String, Error> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(io_err("reading /dev/urandom"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Runs `fut` to completion on a private current-thread runtime on a scoped helper thread:
/// works whether or not the caller is itself inside a runtime (`block_on` in a runtime
/// panics), and the future may borrow from the caller.
fn block_on<F>(fut: F) -> Result<F::Output, Error>
where
    F: Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        let helper = s.spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(io_err("building a Tokio runtime"))?;
            Ok(rt.block_on(fut))
        });
        match helper.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}
