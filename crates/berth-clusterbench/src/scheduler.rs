//! The schedulers under test, as processes: `berth run` and kube-scheduler, logging to a
//! file, both tuned (`clientConnection` qps/burst 5000, leader election off, as
//! scheduler_perf runs kube-scheduler) or both on their defaults (no `clientConnection`: qps
//! 50 / burst 100; leader election on), as a new user runs them.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_testcluster::TestCluster;
use serde_json::json;

use crate::error::{io_err, Error};

/// The client limits both schedulers get (scheduler_perf runs kube-scheduler with 5000 too).
pub const QPS: u32 = 5000;

/// Which scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Which {
    /// kube-scheduler, built with the test cluster (same version as its API server).
    KubeScheduler,
    /// `berth run`.
    Berth,
}

impl Which {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Which::KubeScheduler => "kube-scheduler",
            Which::Berth => "berth",
        }
    }
}

/// How both schedulers are configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tuning {
    /// `clientConnection` qps/burst [`QPS`], leader election off.
    #[default]
    Tuned,
    /// Their defaults: no `clientConnection` (qps 50 / burst 100), leader election on
    /// (lease in kube-system). berth's only setting is the profile, `default-scheduler`
    /// (named, as berth takes no pod of kube-scheduler's unless told).
    Defaults,
}

impl Tuning {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Tuning::Tuned => "tuned (qps/burst 5000, no leader election)",
            Tuning::Defaults => "defaults (qps 50 / burst 100, leader election on)",
        }
    }
}

/// How to start berth (and, for [`Tuning`], kube-scheduler too).
#[derive(Debug, Clone)]
pub struct BerthOptions {
    /// The `berth` binary.
    pub binary: PathBuf,
    /// `--max-binds-in-flight`.
    pub max_binds_in_flight: usize,
    /// Both schedulers' settings.
    pub tuning: Tuning,
}

/// A running scheduler process, killed when dropped.
#[derive(Debug)]
pub struct SchedulerProcess {
    which: Which,
    child: Child,
    log: PathBuf,
}

impl SchedulerProcess {
    /// Starts `which` against `cluster`, its files (configuration, log) in `dir`.
    pub fn start(
        which: Which,
        cluster: &TestCluster,
        dir: &Path,
        berth: &BerthOptions,
    ) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let kubeconfig = cluster.kubeconfig_path();
        let config_path = dir.join(format!("{}-config.yaml", which.name()));
        let log = dir.join(format!("{}.log", which.name()));
        let mut client = match berth.tuning {
            Tuning::Tuned => json!({"qps": QPS, "burst": QPS}),
            Tuning::Defaults => json!({}),
        };
        let mut cmd = match which {
            Which::KubeScheduler => {
                client["kubeconfig"] = json!(kubeconfig.to_string_lossy());
                let mut cmd = Command::new(cluster.bin_dir().join("kube-scheduler"));
                cmd.arg(format!("--config={}", config_path.display()))
                    // No serving: nothing scrapes it, and it would need the cluster's
                    // authentication configuration.
                    .arg("--secure-port=0")
                    .arg("--authentication-skip-lookup=true");
                cmd
            }
            Which::Berth => {
                if !berth.binary.is_file() {
                    return Err(Error::BerthMissing(berth.binary.clone()));
                }
                let mut cmd = Command::new(&berth.binary);
                cmd.arg("run")
                    .arg("--kubeconfig")
                    .arg(kubeconfig)
                    .arg("--config")
                    .arg(&config_path)
                    .arg("--metrics-bind-address")
                    .arg("127.0.0.1:0")
                    .arg("--log-format")
                    .arg("json")
                    .arg("--max-binds-in-flight")
                    .arg(berth.max_binds_in_flight.to_string());
                cmd
            }
        };
        let mut config = json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": "default-scheduler"}],
        });
        match berth.tuning {
            Tuning::Tuned => {
                config["clientConnection"] = client;
                config["leaderElection"] = json!({"leaderElect": false});
            }
            Tuning::Defaults => {
                // kube-scheduler reads its kubeconfig from here only; berth has the flag.
                if client.as_object().is_some_and(|o| !o.is_empty()) {
                    config["clientConnection"] = client;
                }
                config["leaderElection"] =
                    json!({"leaderElect": true, "resourceNamespace": "kube-system"});
            }
        }
        let text = serde_json::to_string_pretty(&config).map_err(|source| Error::Json {
            context: "rendering the scheduler configuration".into(),
            source,
        })?;
        std::fs::write(&config_path, text)
            .map_err(io_err(format!("writing {}", config_path.display())))?;
        let out = File::create(&log).map_err(io_err(format!("creating {}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(io_err(format!("opening {}", log.display())))?;
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .env_remove("HTTP_PROXY")
            .env_remove("HTTPS_PROXY")
            .env_remove("http_proxy")
            .env_remove("https_proxy");
        // SAFETY: only prctl runs between fork and exec (async-signal-safe). The scheduler
        // dies with this process even if it is killed before it can stop the child.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(io_err(format!("starting {}", which.name())))?;
        Ok(Self { which, child, log })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// `Err(SchedulerExited)` once the process has ended.
    pub fn check_alive(&mut self) -> Result<(), Error> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(Error::SchedulerExited {
                name: self.which.name(),
                status,
                log: self.log.clone(),
                tail: tail(&self.log, 30),
            }),
            Err(e) => Err(io_err(format!("checking on {}", self.which.name()))(e)),
        }
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub fn stop(mut self, grace: Duration) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: signalling our own child, which has not been reaped yet.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SchedulerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The last `lines` lines of `path`.
pub fn tail(path: &Path, lines: usize) -> String {
    let Ok(f) = File::open(path) else {
        return format!("(cannot read {})", path.display());
    };
    let mut last = std::collections::VecDeque::with_capacity(lines);
    for line in BufReader::new(f).lines().map_while(Result::ok) {
        if last.len() == lines {
            last.pop_front();
        }
        last.push_back(line);
    }
    last.into_iter().collect::<Vec<_>>().join("\n")
}
