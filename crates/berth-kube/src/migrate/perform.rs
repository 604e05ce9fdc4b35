//! The controller's actions as API calls.

use std::time::Instant;

use berth_api::migration::PodMigrationJob;
use berth_api::reservation::Reservation;
use berth_core::migration::{after_eviction, Action, MigrationView};
use berth_core::time::Time;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::Client;

use super::{job_resource, Outcome, Pending, View};
use crate::kinds::Served;
use crate::retry::{classify, retry, Backoff, Class};

/// What every action needs.
pub(super) struct Ctx<'a> {
    pub client: &'a Client,
    pub view: &'a View,
    pub now: Time,
}

/// Performs `action`; `current` holds each job as last written in this pass.
pub(super) async fn action(
    ctx: &Ctx<'_>,
    action: Action,
    current: &mut std::collections::HashMap<String, PodMigrationJob>,
    pending: &mut Pending,
    outcome: &mut Outcome,
) {
    let reservations: Api<DynamicObject> =
        Api::all_with(ctx.client.clone(), &Served::reservation_resource());
    match action {
        Action::CreateReservation(r) => {
            if create_reservation(ctx, &r, outcome).await {
                tracing::info!(
                    reservation = r.metadata.name.as_deref().unwrap_or(""),
                    "reservation created for a migration"
                );
            }
        }
        Action::DeleteReservation(name) => {
            if ctx.view.reservation(&name).is_none() {
                return;
            }
            let dp = DeleteParams::default();
            match retry(Backoff::default(), || reservations.delete(&name, &dp)).await {
                Ok(_) => {
                    outcome.reservations_deleted += 1;
                    tracing::info!(reservation = name, "reservation of a migration deleted");
                }
                Err(e) if classify(&e) == Class::NotFound => {}
                Err(e) => {
                    outcome.failed += 1;
                    tracing::warn!(reservation = name, error = %e, "deleting the reservation failed");
                }
            }
        }
        Action::UpdateJob(job) => write_job(ctx, *job, current, pending, outcome).await,
        Action::Evict {
            job,
            namespace,
            name,
        } => {
            let Some(j) = current.get(&job).cloned() else {
                return;
            };
            let node = ctx
                .view
                .pod(&namespace, &name)
                .and_then(|p| p.spec.as_ref()?.node_name.clone())
                .unwrap_or_default();
            let result = evict(
                ctx.client,
                &namespace,
                &name,
                j.spec.delete_options.as_ref(),
            )
            .await;
            match &result {
                Ok(()) => {
                    outcome.evicted += 1;
                    tracing::info!(job, pod = %format!("{namespace}/{name}"), node, "pod evicted");
                }
                Err(e) => {
                    outcome.evictions_refused += 1;
                    tracing::info!(job, pod = %format!("{namespace}/{name}"), reason = %e, "eviction refused; retried later");
                }
            }
            let next = after_eviction(&j, &node, result, ctx.now);
            if next != j {
                write_job(ctx, next, current, pending, outcome).await;
            }
        }
    }
}

/// Creates `r` unless the view has it already; whether it was created (one of its name
/// created meanwhile is the same one, and not counted).
pub(super) async fn create_reservation(
    ctx: &Ctx<'_>,
    r: &Reservation,
    outcome: &mut Outcome,
) -> bool {
    let name = r.metadata.name.clone().unwrap_or_default();
    if ctx.view.reservation(&name).is_some() {
        return false;
    }
    let obj: DynamicObject = match serde_json::to_value(r).and_then(serde_json::from_value) {
        Ok(o) => o,
        Err(e) => {
            outcome.failed += 1;
            tracing::error!(reservation = name, error = %e, "reservation cannot be encoded");
            return false;
        }
    };
    let reservations: Api<DynamicObject> =
        Api::all_with(ctx.client.clone(), &Served::reservation_resource());
    let pp = PostParams::default();
    match retry(Backoff::default(), || reservations.create(&pp, &obj)).await {
        Ok(_) => {
            outcome.reservations_created += 1;
            true
        }
        Err(e) if classify(&e) == Class::Conflict => false,
        Err(e) => {
            outcome.failed += 1;
            tracing::warn!(reservation = name, error = %e, "creating the reservation failed");
            false
        }
    }
}

/// Evicts through `pods/eviction`: `Err` with the API server's message when it refuses (a
/// PodDisruptionBudget's 429 among them). A pod gone already counts as evicted. The client
/// must not retry a 429 itself (berth's clients do not; kube's default client retries for
/// minutes): the refusal is the answer, recorded on the job and retried on a later pass.
async fn evict(
    client: &Client,
    namespace: &str,
    name: &str,
    delete_options: Option<&DeleteOptions>,
) -> Result<(), String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let body = eviction(namespace, name, delete_options);
    let pp = PostParams::default();
    match api
        .create_subresource::<_, serde_json::Value>("eviction", name, &pp, &body)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(kube::Error::Api(s)) => Err(refusal(&s)),
        Err(e) => Err(e.to_string()),
    }
}

/// The Eviction of `namespace/name`, with the job's `spec.deleteOptions` as they are
/// (Koordinator passes them on; the API server validates and applies them: grace period,
/// preconditions, propagation, dry run). Built here rather than with kube's `evict`, whose
/// body spells the field `delete_options`, which the API server ignores.
fn eviction(
    namespace: &str,
    name: &str,
    delete_options: Option<&DeleteOptions>,
) -> k8s_openapi::api::policy::v1::Eviction {
    k8s_openapi::api::policy::v1::Eviction {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        delete_options: delete_options.cloned(),
    }
}

/// The API server's refusal with its causes, as simulate words it: "Cannot evict pod as it
/// would violate the pod's disruption budget. (The disruption budget web needs 2 healthy
/// pods and has 2 currently)".
fn refusal(s: &kube::core::Status) -> String {
    let causes: Vec<&str> = s
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| c.message.as_str())
        .filter(|m| !m.is_empty())
        .collect();
    if causes.is_empty() {
        s.message.clone()
    } else {
        format!("{} ({})", s.message, causes.join("; "))
    }
}

/// Replaces the job: its spec (and labels and annotations: the workload's pods at eviction
/// time are recorded in one) if they changed, then its status (a
/// subresource), each with the resourceVersion last seen, so a concurrent change wins and the
/// next pass starts from it.
async fn write_job(
    ctx: &Ctx<'_>,
    job: PodMigrationJob,
    current: &mut std::collections::HashMap<String, PodMigrationJob>,
    pending: &mut Pending,
    outcome: &mut Outcome,
) {
    let name = job.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &job_resource());
    let before = current.get(&name).cloned();
    let read_rv = before
        .as_ref()
        .and_then(|b| b.metadata.resource_version.clone())
        .unwrap_or_default();
    let encode = |j: &PodMigrationJob| -> Option<DynamicObject> {
        serde_json::to_value(j)
            .and_then(serde_json::from_value)
            .map_err(|e| tracing::error!(job = name, error = %e, "job cannot be encoded"))
            .ok()
    };
    let mut next = job.clone();
    let pp = PostParams::default();
    let status_changed = before.as_ref().is_none_or(|b| b.status != job.status);
    let mut wrote_spec: Option<String> = None;
    let spec_changed = before.as_ref().is_none_or(|b| {
        b.spec != job.spec
            || b.metadata.labels != job.metadata.labels
            || b.metadata.annotations != job.metadata.annotations
    });
    if spec_changed {
        let Some(obj) = encode(&next) else { return };
        match api.replace(&name, &pp, &obj).await {
            Ok(o) => {
                next.metadata.resource_version = o.metadata.resource_version;
                if status_changed {
                    // The version between the two writes is stale too.
                    wrote_spec = next.metadata.resource_version.clone();
                }
            }
            Err(e) => {
                job_write_failed(&name, &e, outcome);
                return;
            }
        }
        outcome.job_writes += 1;
    }
    if status_changed {
        let Some(obj) = encode(&next) else { return };
        match api.replace_status(&name, &pp, &obj).await {
            Ok(o) => next.metadata.resource_version = o.metadata.resource_version,
            Err(e) => {
                // The spec may be written already: the watch brings it.
                job_write_failed(&name, &e, outcome);
                return;
            }
        }
        outcome.job_writes += 1;
    }
    if spec_changed || status_changed {
        let entry = pending
            .entry(name.clone())
            .or_insert_with(|| (Vec::new(), next.clone(), Instant::now()));
        entry.0.push(read_rv);
        if let Some(rv) = &wrote_spec {
            entry.0.push(rv.clone());
        }
        entry.1 = next.clone();
        entry.2 = Instant::now();
    }
    current.insert(name, next);
}

fn job_write_failed(name: &str, e: &kube::Error, outcome: &mut Outcome) {
    if classify(e) == Class::Conflict {
        tracing::debug!(
            job = name,
            "job changed meanwhile; the next pass starts from it"
        );
    } else {
        outcome.failed += 1;
        tracing::warn!(job = name, error = %e, "writing the job failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Preconditions;

    #[test]
    fn the_jobs_delete_options_are_the_evictions() {
        let o = DeleteOptions {
            grace_period_seconds: Some(5),
            preconditions: Some(Preconditions {
                uid: Some("u1".into()),
                resource_version: None,
            }),
            ..DeleteOptions::default()
        };
        let body = serde_json::to_value(eviction("ns", "p", Some(&o))).expect("json");
        assert_eq!(
            body,
            serde_json::json!({"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": "p", "namespace": "ns"},
                "deleteOptions": {"gracePeriodSeconds": 5, "preconditions": {"uid": "u1"}}})
        );
        let body = serde_json::to_value(eviction("ns", "p", None)).expect("json");
        assert!(body.get("deleteOptions").is_none(), "{body}");
    }
}
