//! The configuration `berth run` reads: the same `KubeSchedulerConfiguration` file as
//! `berth simulate`, whose process settings (`clientConnection`, `leaderElection`) the
//! simulator accepts and ignores and the adapter honours.

use std::time::Duration;

use berth_core::framework::config::KubeSchedulerConfiguration;
use berth_core::Profile;
use serde::Deserialize;
use serde_json::Value;

use crate::error::Error;

/// The scheduler name `berth run` takes when no configuration names one: never
/// `default-scheduler`, so that berth, started without a configuration (or with one that has
/// no `profiles`, or a profile without `schedulerName`), takes only the pods that ask for it
/// and never races kube-scheduler for ordinary pods. A configuration that wants
/// kube-scheduler's pods must say `schedulerName: default-scheduler`.
pub const DEFAULT_SCHEDULER_NAME: &str = "berth";

/// Where a pod's service account namespace is mounted (in-cluster).
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Everything `berth run` reads from `--config`.
#[derive(Debug)]
pub struct Settings {
    /// The scheduling profiles (one `berth` profile without a file).
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
/// so that berth never contends for kube-scheduler's own lease, and its namespace, which is
/// the one berth runs in (in a pod: its service account's namespace), else `kube-system`:
/// the namespace deploy/'s Role grants the lease in, whatever the configuration file says.
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
            resource_namespace: default_lease_namespace(),
        }
    }
}

/// The namespace berth runs in (the mounted service account's), else `kube-system`.
pub fn default_lease_namespace() -> String {
    namespace_from(std::path::Path::new(SERVICE_ACCOUNT_NAMESPACE))
}

fn namespace_from(path: &std::path::Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "kube-system".into())
}

impl LeaderElection {
    /// How long one call of the elector may take: client-go's resource lock gives its
    /// client `renewDeadline / 2`, at least one second, so that a hung call cannot eat the
    /// whole renew deadline.
    pub fn call_timeout(&self) -> Duration {
        (self.renew_deadline / 2).max(Duration::from_secs(1))
    }

    /// The lease as `namespace/name`, for messages.
    pub fn lease(&self) -> String {
        format!("{}/{}", self.resource_namespace, self.resource_name)
    }
}

/// client-go's leader elector refuses a renew deadline within `retryPeriod * JitterFactor`.
const JITTER_FACTOR: f64 = 1.2;

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
    /// The built-in configuration: one `berth` profile (every plugin with kube-scheduler's
    /// default weights), default client and leader election settings.
    pub fn builtin() -> Self {
        let mut profile = Profile::default_profile();
        profile.scheduler_name = DEFAULT_SCHEDULER_NAME.into();
        Self {
            profiles: vec![profile],
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
        Self::parse_as(file, text, DEFAULT_SCHEDULER_NAME)
    }

    /// [`Settings::parse`], unnamed profiles taking `default_name` (`berth simulate`'s and
    /// kube-scheduler's `default-scheduler`, for tests comparing `berth run` with them).
    pub fn parse_as(file: &str, text: &str, default_name: &str) -> Result<Self, Error> {
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
        let mut cfg: KubeSchedulerConfiguration = serde_path_to_error::deserialize(&value)
            .map_err(|e| {
                let path = e.path().to_string();
                err(if path == "." { "" } else { &path }, e.inner().to_string())
            })?;
        // Unnamed profiles are berth's, not kube-scheduler's (see DEFAULT_SCHEDULER_NAME).
        if cfg.profiles.is_empty() {
            cfg.profiles.push(Default::default());
        }
        for p in &mut cfg.profiles {
            if p.scheduler_name.as_deref().is_none_or(str::is_empty) {
                p.scheduler_name = Some(default_name.into());
            }
        }
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
                return Err((
                    field.to_string(),
                    format!("Invalid value: {text:?}: must be greater than zero"),
                ));
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
    if le.resource_name.is_empty() {
        return Err(("resourceName".into(), "Required value".into()));
    }
    if le.resource_namespace.is_empty() {
        return Err(("resourceNamespace".into(), "Required value".into()));
    }
    // As kube-scheduler: checked only when electing (component-base's validation, then
    // client-go's NewLeaderElector), with their messages.
    if le.leader_elect {
        if le.lease_duration <= le.renew_deadline {
            return Err((
                "leaseDuration".into(),
                format!(
                    "Invalid value: {:?}: must be greater than `RenewDeadline`",
                    le.renew_deadline
                ),
            ));
        }
        if le.renew_deadline.as_secs_f64() <= JITTER_FACTOR * le.retry_period.as_secs_f64() {
            return Err((
                "renewDeadline".into(),
                format!(
                    "Invalid value: {:?}: must be greater than retryPeriod*JitterFactor ({:?} * {JITTER_FACTOR})",
                    le.renew_deadline, le.retry_period
                ),
            ));
        }
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
        // Never kube-scheduler's pods unless asked for by name.
        assert_eq!(s.profiles[0].scheduler_name, "berth");
        assert_eq!(Settings::builtin().profiles[0].scheduler_name, "berth");
        let s = Settings::parse("c.yaml", "profiles: [{percentageOfNodesToScore: 50}]\n").unwrap();
        assert_eq!(s.profiles[0].scheduler_name, "berth");
        let s =
            Settings::parse("c.yaml", "profiles: [{schedulerName: default-scheduler}]\n").unwrap();
        assert_eq!(s.profiles[0].scheduler_name, "default-scheduler");
    }

    #[test]
    fn lease_timings_are_validated_as_kube_schedulers() {
        let bad = [
            ("leaseDuration: 10s", "leaderElection.leaseDuration"),
            (
                "leaseDuration: 5s, renewDeadline: 8s",
                "leaderElection.leaseDuration",
            ),
            ("renewDeadline: 2s", "leaderElection.renewDeadline"),
            (
                "renewDeadline: 4s, retryPeriod: 4s",
                "leaderElection.renewDeadline",
            ),
            ("retryPeriod: 0s", "leaderElection.retryPeriod"),
            ("resourceName: ''", "leaderElection.resourceName"),
        ];
        for (le, field) in bad {
            let text = format!("leaderElection: {{{le}}}\n");
            let e = Settings::parse("c.yaml", &text).unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("c.yaml: {field}: ")),
                "{le}: {e}"
            );
        }
        // Not electing: the timings are not looked at, as upstream.
        Settings::parse(
            "c.yaml",
            "leaderElection: {leaderElect: false, leaseDuration: 1s}\n",
        )
        .unwrap();
        let s = Settings::parse(
            "c.yaml",
            "leaderElection: {leaseDuration: 4s, renewDeadline: 3s, retryPeriod: 2s}\n",
        )
        .unwrap();
        assert_eq!(
            s.leader_election.call_timeout(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            LeaderElection::default().call_timeout(),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn the_lease_namespace_is_the_service_accounts() {
        let dir = std::env::temp_dir().join(format!("berth-ns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("namespace");
        assert_eq!(namespace_from(&file), "kube-system");
        std::fs::write(&file, "berth-system\n").unwrap();
        assert_eq!(namespace_from(&file), "berth-system");
        std::fs::remove_dir_all(&dir).unwrap();
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
