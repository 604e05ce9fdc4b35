//! What can stop `berth run` from starting or keep it from running.

/// Refusals (403) of the lease in a row after which `berth run` gives up: long enough to
/// ride out RBAC objects applied in the same `kubectl apply` as the Deployment, short enough
/// that a wrong namespace is an exit and a restart count, not a silent standby for ever.
pub const FORBIDDEN_TRIES: u32 = 5;

/// An error of the adapter. Everything an object or an API answer can cause at run time is
/// handled in place (an event, a condition, a retry, a failed bind); these are the errors
/// that end `berth run`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration file could not be read.
    #[error("reading {file}: {source}")]
    Read {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// The configuration file is not a usable `KubeSchedulerConfiguration`.
    #[error("{file}: {field}: {message}")]
    Config {
        /// The file.
        file: String,
        /// The field, as a path (`profiles[0].pluginConfig[1].args.scoringStrategy`); empty
        /// for the whole document.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// No client configuration (kubeconfig or in-cluster) could be loaded.
    #[error("loading the client configuration: {0}")]
    Kubeconfig(String),
    /// The API server could not be reached or refused what berth must do to start.
    #[error("talking to the API server: {0}")]
    Kube(#[from] kube::Error),
    /// This replica led and could not renew its lease in time (or saw another holder): it
    /// stopped scheduling at once; the process exits so that a restart rebuilds from LISTs.
    #[error("leadership lost: the lease could not be renewed within the renew deadline")]
    LeadershipLost,
    /// The API server refused the lease (403) [`FORBIDDEN_TRIES`] times in a
    /// row: the RBAC for it is missing (each refusal was logged naming it).
    #[error("leader election: the lease {lease} was refused (403) {tries} times in a row; berth needs get, create and update on leases.coordination.k8s.io in its namespace", tries = FORBIDDEN_TRIES)]
    LeaseForbidden {
        /// The lease, `namespace/name`.
        lease: String,
    },
    /// The metrics and health endpoint could not be served.
    #[error("serving {addr}: {source}")]
    Serve {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}
