//! Why a benchmark run could not finish.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// An error of the harness. Every variant names what was being done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The test cluster could not be started.
    #[error("starting the test cluster: {0:?}")]
    Cluster(#[from] berth_testcluster::Error),
    /// An API request failed.
    #[error("{context}: {source}")]
    Kube {
        /// What was being done.
        context: String,
        /// The failure.
        #[source]
        source: kube::Error,
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
    /// A document could not be built or read.
    #[error("{context}: {source}")]
    Json {
        /// What was being done.
        context: String,
        /// The failure.
        #[source]
        source: serde_json::Error,
    },
    /// The berth binary to run is not there.
    #[error(
        "{} does not exist: build berth first with `cargo build --release -p berth` (from the \
         workspace root), or pass --berth PATH",
        .0.display()
    )]
    BerthMissing(PathBuf),
    /// A scheduler process ended while the workload still needed it.
    #[error("{name} exited ({status}); the last lines of {}:\n{tail}", log.display())]
    SchedulerExited {
        /// `berth` or `kube-scheduler`.
        name: &'static str,
        /// Its exit status.
        status: ExitStatus,
        /// Its log file.
        log: PathBuf,
        /// The log's last lines.
        tail: String,
    },
    /// Something did not happen in time.
    #[error("timed out after {waited:?} waiting for {what} ({got})")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        waited: Duration,
        /// How far it got.
        got: String,
    },
    /// A watch stream ended or kept failing.
    #[error("the watch on {what} ended: {message}")]
    Watch {
        /// What was watched.
        what: String,
        /// Why.
        message: String,
    },
    /// The outcome broke an invariant of the benchmark (a pod bound twice, or not at all).
    #[error("check failed: {0}")]
    Check(String),
}

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

pub(crate) fn kube_err(context: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let context = context.into();
    move |source| Error::Kube { context, source }
}
