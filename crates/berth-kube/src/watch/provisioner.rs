//! `berth provisioner`: the Reservation provisioner of Dynamic Reservation Provisioning
//! (seed 003), a process of its own (off unless started: clusters may bring their own). A
//! controller over one pod watcher, hence its place under [`crate::watch`].
//!
//! It watches unbound pods; for one carrying both `reservation-template` and
//! `new-reservation-requirement` it creates the Reservation the requirement asks for
//! ([`berth_core::drp::objects::provisioned_reservation`]: the id label, the template's
//! owners, `allocateOnce: false`, the CRD's default TTL) unless a Reservation carrying that
//! id exists already, under the first free name (`NAMESPACE-POD`, then `-2`...). The
//! scheduler does the rest (adoption). Restarting it is harmless: it looks for the id, not
//! for what it remembers.

use std::collections::BTreeSet;
use std::future::Future;

use berth_api::annotations::LABEL_RESERVATION_ID;
use berth_core::drp::objects::{nth_name, provisioned_reservation, reservation_id};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::Client;

use crate::kinds::Served;
use crate::retry::{classify, retry, Backoff, Class};

/// Names tried for one Reservation before giving up (another id's Reservations hold them).
const NAME_ATTEMPTS: u32 = 20;

/// What the provisioner did, for logs and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Reservations created.
    pub created: u64,
    /// Requirements whose Reservation existed already.
    pub existing: u64,
    /// Requirements it could not act on (an unreadable annotation, an API error).
    pub failed: u64,
}

/// Runs the provisioner until `shutdown` completes.
pub async fn run(client: Client, shutdown: impl Future<Output = ()>) -> Outcome {
    let pods: Api<Pod> = Api::all(client.clone());
    let reservations: Api<DynamicObject> =
        Api::all_with(client.clone(), &Served::reservation_resource());
    // Only unbound pods can ask: the field selector keeps the rest off the wire.
    let config = watcher::Config::default()
        .any_semantic()
        .fields("spec.nodeName=");
    let mut stream = watcher(pods, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut outcome = Outcome::default();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return outcome,
            item = stream.next() => match item {
                None => return outcome,
                Some(Err(e)) => tracing::warn!(error = %e, "pod watch failed; re-listing after back-off"),
                Some(Ok(pod)) => provision(&reservations, &pod, &mut done, &mut outcome).await,
            },
        }
    }
}

async fn provision(
    api: &Api<DynamicObject>,
    pod: &Pod,
    done: &mut BTreeSet<String>,
    outcome: &mut Outcome,
) {
    let pod_name = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    );
    let r = match provisioned_reservation(pod) {
        None => return,
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            outcome.failed += 1;
            tracing::warn!(pod = pod_name, error = %e, "cannot provision a reservation");
            return;
        }
    };
    let Some(id) = reservation_id(&r).map(str::to_string) else {
        return;
    };
    if done.contains(&id) {
        return;
    }
    let lp = ListParams::default().labels(&format!("{LABEL_RESERVATION_ID}={id}"));
    match retry(Backoff::default(), || api.list(&lp)).await {
        Ok(list) if !list.items.is_empty() => {
            outcome.existing += 1;
            done.insert(id);
            return;
        }
        Ok(_) => {}
        Err(e) => {
            outcome.failed += 1;
            tracing::warn!(pod = pod_name, id, error = %e, "listing reservations failed");
            return;
        }
    }
    let base = r.metadata.name.clone().unwrap_or_default();
    for n in 1..=NAME_ATTEMPTS {
        let mut r = r.clone();
        let name = nth_name(&base, n);
        r.metadata.name = Some(name.clone());
        let obj: DynamicObject = match serde_json::to_value(&r).and_then(serde_json::from_value) {
            Ok(o) => o,
            Err(e) => {
                outcome.failed += 1;
                tracing::error!(reservation = name, error = %e, "reservation cannot be encoded");
                return;
            }
        };
        let pp = PostParams::default();
        match retry(Backoff::default(), || api.create(&pp, &obj)).await {
            Ok(_) => {
                outcome.created += 1;
                tracing::info!(
                    pod = pod_name,
                    reservation = name,
                    id,
                    "reservation created"
                );
                done.insert(id);
                return;
            }
            Err(e) if classify(&e) == Class::Conflict => continue,
            Err(e) => {
                outcome.failed += 1;
                tracing::warn!(pod = pod_name, reservation = name, error = %e, "creating the reservation failed");
                return;
            }
        }
    }
    outcome.failed += 1;
    tracing::warn!(pod = pod_name, id, "no free name for the reservation");
}
