//! The configuration `berth run` reads: the same `KubeSchedulerConfiguration` file as
//! `berth simulate`, whose process settings (`clientConnection`, `leaderElection`) the
//! simulator accepts and ignores and the adapter honours.

use std::time::Duration;

use berth_core::framework::config::KubeSchedulerConfiguration;
use berth_core::Profile;
use serde::Deserialize;
use serde_json::Value;

use crate::error::Error;

/// Everything `berth run` reads from `--config`.
#[derive(Debug)]
pub struct Settings {
    /// The scheduling profiles (the built-in `default-scheduler` profile without a file).
    pub profiles: Vec<Profile>,
    /// `clientConnection`.
    pub client: ClientConnection,
    /// `leaderElection`.
    pub leader_election: LeaderElection,
}

/// `clientConnection`, with kube-scheduler's defaults (it "has an opinion about QPS/Burst":
/// 50 and 100).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ClientConnection {
    /// A kubeconfig file; `--kubeconfig` wins over it, and without either the in-cluster
    /// configuration (or `$KUBECONFIG`, `~/.kube/config`) is used.
    pub kubeconfig: String,
    /// Sustained requests per second to the API server (0: unlimited).
    pub qps: f64,
    /// Requests allowed in a burst above `qps`.
    pub burst: u32,
    /// Accepted and ignored: berth always speaks JSON.
    pub accept_content_types: String,
    /// Accepted and ignored: berth always speaks JSON.
    pub content_type: String,
}

impl Default for ClientConnection {
    fn default() -> Self {
        Self {
            kubeconfig: String::new(),
            qps: 50.0,
            burst: 100,
            accept_content_types: String::new(),
            content_type: String::new(),
        }
    }
}

/// `leaderElection`, with kube-scheduler's defaults except the lease's name, which is `berth`
/// so that berth never contends for kube-scheduler's own lease.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaderElection {
    /// Whether to elect a leader before scheduling.
    pub leader_elect: bool,
    /// How long a lease is valid without renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leadership.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire or renew.
    pub retry_period: Duration,
    /// The lock kind; only `leases` is supported.
    pub resource_lock: String,
    /// The Lease's name.
    pub resource_name: String,
    /// The Lease's namespace.
    pub resource_namespace: String,
}

impl Default for LeaderElection {
    fn default() -> Self {
        Self {
            leader_elect: true,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            resource_lock: "leases".into(),
            resource_name: "berth".into(),
            resource_namespace: "kube-system".into(),
        }
    }
}

/// The wire form of `leaderElection` (durations as Go strings).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LeaderElectionWire {
    leader_elect: Option<bool>,
    lease_duration: Option<String>,
    renew_deadline: Option<String>,
    retry_period: Option<String>,
    resource_lock: Option<String>,
    resource_name: Option<String>,
    resource_namespace: Option<String>,
}

impl Settings {
    /// The built-in configuration: one `default-scheduler` profile, default client and
    /// leader election settings.
    pub fn builtin() -> Self {
        Self {
            profiles: vec![Profile::default_profile()],
            client: ClientConnection::default(),
            leader_election: LeaderElection::default(),
        }
    }

    /// Reads `path`. Unknown fields, unknown plugins and invalid values are errors naming the
    /// field, as for `berth simulate`.
    pub fn load(path: &str) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            file: path.to_string(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Reads the text of a configuration file named `file` (for messages).
    pub fn parse(file: &str, text: &str) -> Result<Self, Error> {
        let err = |field: &str, message: String| Error::Config {
            file: file.to_string(),
            field: field.to_string(),
            message,
        };
        let yaml: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|e| err("", format!("invalid YAML: {e}")))?;
        let value = serde_json::to_value(&yaml)
            .map_err(|e| err("", format!("cannot be read as JSON: {e}")))?;
        let value = if value.is_null() {
            Value::Object(Default::default())
        } else {
            value
        };
        let cfg: KubeSchedulerConfiguration =
            serde_path_to_error::deserialize(&value).map_err(|e| {
                let path = e.path().to_string();
                err(if path == "." { "" } else { &path }, e.inner().to_string())
            })?;
        let profiles = Profile::from_configuration(&cfg).map_err(|e| Error::Config {
            file: file.to_string(),
            field: e.field,
            message: e.message,
        })?;
        let client = match &cfg.client_connection {
            Some(v) => serde_path_to_error::deserialize::<_, ClientConnection>(v).map_err(|e| {
                err(
                    &format!("clientConnection.{}", e.path()),
                    e.inner().to_string(),
                )
            })?,
            None => ClientConnection::default(),
        };
        if !client.qps.is_finite() || client.qps < 0.0 {
            return Err(err(
                "clientConnection.qps",
                format!("must be a non-negative number, got {}", client.qps),
            ));
        }
        let leader_election = match &cfg.leader_election {
            Some(v) => leader_election(v)
                .map_err(|(field, message)| err(&format!("leaderElection.{field}"), message))?,
            None => LeaderElection::default(),
        };
        Ok(Self {
            profiles,
            client,
            leader_election,
        })
    }
}

fn leader_election(v: &Value) -> Result<LeaderElection, (String, String)> {
    let wire: LeaderElectionWire = serde_path_to_error::deserialize(v)
        .map_err(|e| (e.path().to_string(), e.inner().to_string()))?;
    let mut le = LeaderElection::default();
    let duration = |field: &str, text: &Option<String>, into: &mut Duration| {
        if let Some(text) = text {
            let millis = berth_api::duration::parse_duration_millis(text)
                .map_err(|e| (field.to_string(), e.to_string()))?;
            if millis <= 0 {
                return Err((field.to_string(), format!("must be positive, got {text:?}")));
            }
            *into = Duration::from_millis(millis.unsigned_abs());
        }
        Ok(())
    };
    duration(
        "leaseDuration",
        &wire.lease_duration,
        &mut le.lease_duration,
    )?;
    duration(
        "renewDeadline",
        &wire.renew_deadline,
        &mut le.renew_deadline,
    )?;
    duration("retryPeriod", &wire.retry_period, &mut le.retry_period)?;
    if let Some(b) = wire.leader_elect {
        le.leader_elect = b;
    }
    if let Some(lock) = wire.resource_lock {
        if lock != "leases" {
            return Err((
                "resourceLock".into(),
                format!("only \"leases\" is supported, got {lock:?}"),
            ));
        }
        le.resource_lock = lock;
    }
    if let Some(n) = wire.resource_name {
        le.resource_name = n;
    }
    if let Some(n) = wire.resource_namespace {
        le.resource_namespace = n;
    }
    if le.renew_deadline >= le.lease_duration {
        return Err((
            "renewDeadline".into(),
            "must be shorter than leaseDuration".into(),
        ));
    }
    Ok(le)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_process_settings_the_simulator_ignores() {
        let s = Settings::parse(
            "c.yaml",
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             clientConnection: {qps: 5000, burst: 5000}\n\
             leaderElection: {leaderElect: false, leaseDuration: 30s, resourceNamespace: berth-system}\n\
             profiles: [{schedulerName: berth}]\n",
        )
        .unwrap();
        assert_eq!(s.client.qps, 5000.0);
        assert_eq!(s.client.burst, 5000);
        assert!(!s.leader_election.leader_elect);
        assert_eq!(s.leader_election.lease_duration, Duration::from_secs(30));
        assert_eq!(s.leader_election.resource_namespace, "berth-system");
        assert_eq!(s.leader_election.resource_name, "berth");
        assert_eq!(s.profiles[0].scheduler_name, "berth");
    }

    #[test]
    fn defaults_are_kube_schedulers() {
        let s = Settings::parse("c.yaml", "").unwrap();
        assert_eq!(s.client.qps, 50.0);
        assert_eq!(s.client.burst, 100);
        assert!(s.leader_election.leader_elect);
        assert_eq!(s.profiles[0].scheduler_name, "default-scheduler");
    }

    #[test]
    fn bad_values_name_the_field() {
        let e = Settings::parse("c.yaml", "leaderElection: {leaseDuration: soon}\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("c.yaml: leaderElection.leaseDuration: "),
            "{e}"
        );
        let e = Settings::parse("c.yaml", "clientConnection: {qpz: 1}\n").unwrap_err();
        assert!(e.to_string().contains("clientConnection"), "{e}");
        let e = Settings::parse(
            "c.yaml",
            "profiles: [{schedulerName: a, plugins: {score: {enabled: [{name: Nope}]}}}]\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("Nope"), "{e}");
    }
}
