//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection` does
//! it for kube-scheduler: optimistic concurrency on the Lease's resourceVersion, expiry
//! judged by the local clock since the last *observed* change of the record (so clock skew
//! between replicas does not matter), a renew deadline after which a leader gives up, and the
//! lease released on a clean stop so a standby takes over at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::{oneshot, watch};

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

/// Competes for the lease until stopped.
pub struct Elector {
    api: Api<Lease>,
    config: LeaderElection,
    identity: String,
    observed: Option<(Record, Instant)>,
    /// When the lease was last acquired or renewed by us.
    renewed: Option<Instant>,
}

impl Elector {
    /// An elector for `config`'s lease, as `identity`.
    pub fn new(client: Client, config: LeaderElection, identity: String) -> Self {
        let api = Api::namespaced(client, &config.resource_namespace);
        Self {
            api,
            config,
            identity,
            observed: None,
            renewed: None,
        }
    }

    /// Runs until `stop` fires (releasing the lease if held) or leadership is lost.
    /// Publishes the role on `role`; `healthy` turns false while a leader is overdue on
    /// renewing (for `/healthz`).
    pub async fn run(mut self, role: watch::Sender<Role>, mut stop: oneshot::Receiver<()>) {
        let mut leader = false;
        loop {
            let held = match self.try_acquire_or_renew().await {
                Ok(held) => held,
                Err(e) => {
                    tracing::warn!(error = %e, lease = %self.config.resource_name, "lease not acquired or renewed");
                    false
                }
            };
            if held {
                self.renewed = Some(Instant::now());
                if !leader {
                    leader = true;
                    tracing::info!(identity = %self.identity, "became the leader");
                    role.send_replace(Role::Leader);
                }
            } else if leader {
                let overdue = self
                    .renewed
                    .is_none_or(|t| t.elapsed() >= self.config.renew_deadline);
                let taken = self
                    .observed
                    .as_ref()
                    .is_some_and(|(r, _)| !r.holder.is_empty() && r.holder != self.identity);
                if overdue || taken {
                    tracing::error!(identity = %self.identity, "leadership lost");
                    role.send_replace(Role::Lost);
                    return;
                }
            }
            tokio::select! {
                _ = &mut stop => {
                    if leader {
                        self.release().await;
                    }
                    return;
                }
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
    }

    fn now() -> MicroTime {
        MicroTime(Timestamp::now())
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// One round of client-go's `tryAcquireOrRenew`. Returns whether we hold the lease.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let name = self.config.resource_name.clone();
        let current = match self.api.get(&name).await {
            Ok(l) => l,
            Err(e) if classify(&e) == Class::NotFound => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
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
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(l) => {
                        self.observed = Some((Record::of(&l), Instant::now()));
                        Ok(true)
                    }
                    Err(e) if classify(&e) == Class::Conflict => Ok(false),
                    Err(e) => Err(e),
                };
            }
            Err(e) => return Err(e),
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
            return Ok(false);
        }
        let mut next = current;
        let spec = next.spec.get_or_insert_with(LeaseSpec::default);
        if !ours {
            spec.acquire_time = Some(Self::now());
            spec.lease_transitions =
                Some(record.transitions + i32::from(!record.holder.is_empty()));
            tracing::info!(from = %record.holder, "taking over an expired lease");
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds());
        spec.renew_time = Some(Self::now());
        // The resourceVersion from the GET makes this a compare-and-swap.
        match self.api.replace(&name, &PostParams::default(), &next).await {
            Ok(l) => {
                self.observed = Some((Record::of(&l), Instant::now()));
                Ok(true)
            }
            Err(e) if classify(&e) == Class::Conflict => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up (client-go's ReleaseOnCancel): empty holder, one-second duration.
    async fn release(&mut self) {
        let name = self.config.resource_name.clone();
        let Ok(mut lease) = self.api.get(&name).await else {
            return;
        };
        if Record::of(&lease).holder != self.identity {
            return;
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(Self::now());
        match self
            .api
            .replace(&name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!("lease released"),
            Err(e) => tracing::warn!(error = %e, "releasing the lease failed"),
        }
    }
}
