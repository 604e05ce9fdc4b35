//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection` does
//! it for kube-scheduler: optimistic concurrency on the Lease's resourceVersion, expiry
//! judged by the local clock since the last *observed* change of the record (so clock skew
//! between replicas does not matter), a renew deadline after which a leader gives up, and the
//! lease released on a clean stop so a standby takes over at once.
//!
//! Safety rests on the [`Fence`]: a leader may write only until `renewDeadline` after the
//! start of its last successful renewal, by its own clock, whether or not a renewal call is
//! still pending. A standby takes the lease only after seeing it unchanged for
//! `leaseDuration` (> `renewDeadline`), counted from after that renewal reached the server,
//! so the old leader has stopped writing before the new one starts. Every call is bounded
//! by [`LeaderElection::call_timeout`] (a hung connection cannot stall the elector), and the
//! deadline is watched beside the call, not after it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::retry::{classify, Class};
use crate::settings::LeaderElection;

/// What the elector tells the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Not (yet) the leader: keep caches warm, schedule nothing, write nothing.
    #[default]
    Standby,
    /// The leader: schedule.
    Leader,
    /// Was the leader and could not renew within the renew deadline (or saw another holder):
    /// stop scheduling at once. kube-scheduler exits here; so does `berth run`.
    Lost,
    /// The API server kept refusing (403) this identity the lease: RBAC is missing. The
    /// process exits after [`FORBIDDEN_TRIES`] refusals in a row.
    Forbidden,
}

pub use crate::error::FORBIDDEN_TRIES;

/// Until when this replica may write as the leader, by the local monotonic clock. Checked by
/// every effect before it starts (binds, conditions, status writes, deletes), and by the
/// elector, which ends leadership when it passes.
#[derive(Debug)]
pub struct Fence {
    origin: std::time::Instant,
    /// Milliseconds after `origin` before which writes are allowed: 0 never, `u64::MAX`
    /// always (no leader election).
    until: AtomicU64,
}

impl Fence {
    /// A fence that always allows writes (no leader election: this replica always leads).
    pub fn open() -> Arc<Self> {
        Arc::new(Self {
            origin: std::time::Instant::now(),
            until: AtomicU64::new(u64::MAX),
        })
    }

    /// A fence that allows nothing until the elector extends it.
    pub fn closed() -> Arc<Self> {
        Arc::new(Self {
            origin: std::time::Instant::now(),
            until: AtomicU64::new(0),
        })
    }

    fn ms(&self, t: std::time::Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX - 1)
    }

    /// Whether a leader's write may start now.
    pub fn allows(&self) -> bool {
        self.ms(std::time::Instant::now()) < self.until.load(Ordering::Acquire)
    }

    /// Writes are allowed until `deadline` (never shortened: a late answer to an older
    /// renewal cannot pull it back, nor push it past a newer one's).
    fn extend_to(&self, deadline: std::time::Instant) {
        self.until.fetch_max(self.ms(deadline), Ordering::AcqRel);
    }

    /// No write is allowed any more.
    pub fn close(&self) {
        self.until.store(0, Ordering::Release);
    }

    /// When writes stop being allowed (`None`: never, or already).
    fn deadline(&self) -> Option<std::time::Instant> {
        match self.until.load(Ordering::Acquire) {
            0 | u64::MAX => None,
            ms => Some(self.origin + Duration::from_millis(ms)),
        }
    }
}

/// The fields of a Lease record whose change counts as a sign of life.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: String,
    renew: Option<Timestamp>,
    transitions: i32,
    duration: i32,
}

impl Record {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        Self {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .unwrap_or_default(),
            renew: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
            transitions: spec.and_then(|s| s.lease_transitions).unwrap_or(0),
            duration: spec.and_then(|s| s.lease_duration_seconds).unwrap_or(0),
        }
    }
}

/// Why a round did not get the lease.
#[derive(Debug)]
enum Failure {
    /// Another holder's lease is valid, or an update lost the race.
    Held,
    /// 403: RBAC is missing; the verb refused.
    Forbidden(&'static str, String),
    /// Any other error (time-out, 5xx, transport).
    Error(String),
}

/// Competes for the lease until stopped.
pub struct Elector {
    api: Api<Lease>,
    config: LeaderElection,
    identity: String,
    observed: Option<(Record, Instant)>,
    /// Our lease as last written, for the leader's fast path (a renewal without a GET).
    ours: Option<Lease>,
    fence: Arc<Fence>,
    /// Cleared while the lease is refused (403): `/readyz` fails.
    lease_ok: Arc<AtomicBool>,
}

impl Elector {
    /// An elector for `config`'s lease, as `identity`, through `client` (the unthrottled
    /// leader-election client); it extends `fence` on every renewal and clears `lease_ok`
    /// while the lease is refused.
    pub fn new(
        client: Client,
        config: LeaderElection,
        identity: String,
        fence: Arc<Fence>,
        lease_ok: Arc<AtomicBool>,
    ) -> Self {
        let api = Api::namespaced(client, &config.resource_namespace);
        Self {
            api,
            config,
            identity,
            observed: None,
            ours: None,
            fence,
            lease_ok,
        }
    }

    /// Runs until `stop` fires (releasing the lease if held), leadership is lost, or the
    /// lease was refused [`FORBIDDEN_TRIES`] times in a row. Publishes the role on `role`.
    pub async fn run(mut self, role: watch::Sender<Role>, mut stop: oneshot::Receiver<()>) {
        let lease = self.config.lease();
        tracing::info!(lock = %lease, identity = %self.identity, "attempting to acquire leader lease");
        let mut leader = false;
        let mut refused = 0u32;
        loop {
            let started = std::time::Instant::now();
            let deadline = if leader { self.fence.deadline() } else { None };
            let round = tokio::select! {
                r = self.try_acquire_or_renew() => r,
                // The deadline passes while a call is pending: lost, whatever it answers.
                () = sleep_until_std(deadline), if deadline.is_some() => {
                    Err(Failure::Error("the renew deadline passed while a renewal was pending".into()))
                }
                _ = &mut stop => {
                    if leader {
                        self.release().await;
                    }
                    self.fence.close();
                    return;
                }
            };
            match round {
                Ok(()) => {
                    refused = 0;
                    self.lease_ok.store(true, Ordering::Release);
                    self.fence.extend_to(started + self.config.renew_deadline);
                    if !leader {
                        leader = true;
                        tracing::info!(lock = %lease, identity = %self.identity, "successfully acquired lease");
                        role.send_replace(Role::Leader);
                    }
                }
                Err(Failure::Forbidden(verb, message)) => {
                    refused += 1;
                    self.lease_ok.store(false, Ordering::Release);
                    tracing::error!(
                        lock = %lease,
                        attempt = refused,
                        of = FORBIDDEN_TRIES,
                        "{}",
                        forbidden_message(&self.config, verb, &message)
                    );
                    if refused >= FORBIDDEN_TRIES {
                        self.fence.close();
                        role.send_replace(Role::Forbidden);
                        return;
                    }
                }
                Err(failure) => {
                    refused = 0;
                    self.lease_ok.store(true, Ordering::Release);
                    if leader {
                        let taken = matches!(failure, Failure::Held)
                            && self.observed.as_ref().is_some_and(|(r, _)| {
                                !r.holder.is_empty() && r.holder != self.identity
                            });
                        if taken || !self.fence.allows() {
                            self.fence.close();
                            tracing::error!(lock = %lease, identity = %self.identity, reason = ?failure, "failed to renew lease; leaderelection lost");
                            role.send_replace(Role::Lost);
                            return;
                        }
                        tracing::warn!(lock = %lease, reason = ?failure, "lease not renewed; retrying");
                    } else if let Failure::Error(e) = failure {
                        tracing::warn!(lock = %lease, error = %e, "lease not acquired");
                    }
                }
            }
            // A leader retries every retryPeriod; a standby with client-go's jitter (up to
            // 1.2 x), so that standbys do not knock together.
            let wait = if leader {
                self.config.retry_period
            } else {
                self.config.retry_period.mul_f64(1.0 + 0.2 * jitter())
            };
            let deadline = if leader { self.fence.deadline() } else { None };
            tokio::select! {
                _ = &mut stop => {
                    if leader {
                        self.release().await;
                    }
                    self.fence.close();
                    return;
                }
                () = tokio::time::sleep(wait) => {}
                // Nothing may outlive the deadline, not even the wait between rounds.
                () = sleep_until_std(deadline), if deadline.is_some() => {}
            }
        }
    }

    fn now() -> MicroTime {
        MicroTime(Timestamp::now())
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// A call bounded by the per-call time-out.
    async fn call<T>(
        &self,
        verb: &'static str,
        f: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, Failure> {
        match tokio::time::timeout(self.config.call_timeout(), f).await {
            Ok(Err(kube::Error::Api(s))) if s.code == 403 => {
                Err(Failure::Forbidden(verb, s.message.clone()))
            }
            Ok(r) => Ok(r),
            Err(_) => Err(Failure::Error(format!(
                "{verb} timed out after {:?}",
                self.config.call_timeout()
            ))),
        }
    }

    /// One round of client-go's `tryAcquireOrRenew`.
    async fn try_acquire_or_renew(&mut self) -> Result<(), Failure> {
        if let Some(lease) = self.ours.take() {
            // The leader's fast path: update the lease as last written (its resourceVersion
            // makes it a compare-and-swap); on any failure, the slow path below.
            if self.update(lease).await.is_ok() {
                return Ok(());
            }
        }
        let name = self.config.resource_name.clone();
        let current = match self.call("get", self.api.get(&name)).await? {
            Ok(l) => l,
            Err(e) if classify(&e) == Class::NotFound => return self.create().await,
            Err(e) => return Err(Failure::Error(e.to_string())),
        };
        let record = Record::of(&current);
        let now = Instant::now();
        let observed_at = match &self.observed {
            Some((r, t)) if *r == record => *t,
            _ => now,
        };
        self.observed = Some((record.clone(), observed_at));
        let ours = record.holder == self.identity;
        let duration = Duration::from_secs(u64::try_from(record.duration.max(1)).unwrap_or(1));
        let expired = record.holder.is_empty() || observed_at + duration <= now;
        if !ours && !expired {
            return Err(Failure::Held);
        }
        let mut next = current;
        let spec = next.spec.get_or_insert_with(LeaseSpec::default);
        if !ours {
            spec.acquire_time = Some(Self::now());
            spec.lease_transitions =
                Some(record.transitions + i32::from(!record.holder.is_empty()));
            tracing::info!(from = %record.holder, "taking over an expired lease");
        }
        self.update(next).await
    }

    /// Writes `lease` as ours, renewed now.
    async fn update(&mut self, mut lease: Lease) -> Result<(), Failure> {
        let name = self.config.resource_name.clone();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds());
        spec.renew_time = Some(Self::now());
        let pp = PostParams::default();
        match self
            .call("update", self.api.replace(&name, &pp, &lease))
            .await?
        {
            Ok(l) => {
                self.observed = Some((Record::of(&l), Instant::now()));
                self.ours = Some(l);
                Ok(())
            }
            Err(e) if classify(&e) == Class::Conflict => Err(Failure::Held),
            Err(e) => Err(Failure::Error(e.to_string())),
        }
    }

    async fn create(&mut self) -> Result<(), Failure> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.resource_name.clone()),
                namespace: Some(self.config.resource_namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.duration_seconds()),
                acquire_time: Some(Self::now()),
                renew_time: Some(Self::now()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        let pp = PostParams::default();
        match self.call("create", self.api.create(&pp, &lease)).await? {
            Ok(l) => {
                self.observed = Some((Record::of(&l), Instant::now()));
                self.ours = Some(l);
                Ok(())
            }
            Err(e) if classify(&e) == Class::Conflict => Err(Failure::Held),
            Err(e) => Err(Failure::Error(e.to_string())),
        }
    }

    /// Gives the lease up (client-go's ReleaseOnCancel): empty holder, one-second duration.
    async fn release(&mut self) {
        let name = self.config.resource_name.clone();
        let Ok(Ok(mut lease)) = self.call("get", self.api.get(&name)).await else {
            return;
        };
        if Record::of(&lease).holder != self.identity {
            return;
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(Self::now());
        let pp = PostParams::default();
        match self
            .call("update", self.api.replace(&name, &pp, &lease))
            .await
        {
            Ok(Ok(_)) => tracing::info!("lease released"),
            Ok(Err(e)) => tracing::warn!(error = %e, "releasing the lease failed"),
            Err(e) => tracing::warn!(error = ?e, "releasing the lease failed"),
        }
    }
}

/// What a refusal of the lease means, naming the RBAC that is missing.
pub fn forbidden_message(config: &LeaderElection, verb: &str, server: &str) -> String {
    format!(
        "leader election: the API server refused to {verb} the lease {lease} ({server}). berth \
         needs get, create and update on leases.coordination.k8s.io in namespace {ns} (name \
         {name}): grant them with a Role and RoleBinding there (deploy/20-rbac.yaml's \
         berth-leader-election grants them in berth-system), or set \
         leaderElection.resourceNamespace to the namespace that Role is in",
        lease = config.lease(),
        ns = config.resource_namespace,
        name = config.resource_name,
    )
}

async fn sleep_until_std(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

/// A number in [0, 1) that differs between calls and processes (std's per-process hash
/// seed and a counter; no randomness crate needed for jitter).
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(N.fetch_add(1, Ordering::Relaxed));
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// This process's identity in the lease and in events: the system's host name plus a random
/// suffix, as kube-scheduler (`hostname + "_" + uuid`), so that two processes on one host
/// (or two containers sharing a host name) never both believe they hold the lease.
pub fn identity() -> String {
    let host = hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "berth".into());
    format!("{host}_{}", random_uuid())
}

/// A random (version 4) UUID from std's randomly seeded hasher.
fn random_uuid() -> String {
    use std::hash::{BuildHasher, Hasher};
    let word = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(salt);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    };
    let hi = word(1);
    let lo = word(2);
    let hi = (hi & !0xf000) | 0x4000; // version 4
    let lo = (lo & !(0xc << 60)) | (0x8 << 60); // variant 10
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_differ_per_call_and_carry_the_host_name() {
        let a = identity();
        let b = identity();
        assert_ne!(a, b);
        let host = hostname::get().unwrap().into_string().unwrap();
        assert!(a.starts_with(&format!("{host}_")), "{a}");
        let uuid = &a[host.len() + 1..];
        assert_eq!(uuid.len(), 36, "{uuid}");
        assert_eq!(&uuid[14..15], "4", "{uuid}");
    }

    #[test]
    fn the_fence_closes_at_its_deadline_and_never_moves_back() {
        let f = Fence::closed();
        assert!(!f.allows());
        let now = std::time::Instant::now();
        f.extend_to(now + Duration::from_secs(60));
        assert!(f.allows());
        f.extend_to(now + Duration::from_secs(1));
        assert_eq!(
            f.deadline(),
            Some(f.origin + Duration::from_millis(f.ms(now + Duration::from_secs(60))))
        );
        f.extend_to(now);
        f.close();
        assert!(!f.allows());
        let f = Fence::closed();
        f.extend_to(std::time::Instant::now());
        assert!(!f.allows(), "a deadline already past allows nothing");
        assert!(Fence::open().allows());
        assert_eq!(Fence::open().deadline(), None);
    }

    #[test]
    fn jitter_is_in_the_unit_interval() {
        for _ in 0..1000 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }
}
