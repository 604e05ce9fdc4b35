//! The PodMigrationJob controller (`berth_core::migration`) as the simulator runs it: the
//! store is its view of the cluster, and its actions are performed as the API server
//! would (a Reservation created with the API server's defaults and queued for scheduling, a
//! pod evicted through the Eviction API, which honours PodDisruptionBudgets, a job
//! replaced). It runs in the same settle loop as the workload controllers, so a job moves on
//! as soon as the scheduler, the kubelet or a workload controller gave it something new. A
//! refused eviction changes nothing, so it is retried when something else changes (the next
//! step, or an `advance`), as Koordinator's controller retries on its requeue period.

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_api::migration::PodMigrationJob;
use berth_api::reservation::Reservation;
use berth_core::migration::{self, Action, MigrationArgs, MigrationView};
use berth_core::time::Time;
use berth_core::{Kind, Object, ObjectKey};

use crate::store::Store;

/// The store as the controller's view.
pub(crate) struct View<'a>(pub(crate) &'a Store);

impl MigrationView for View<'_> {
    fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        self.0.pod(&ObjectKey::pod(namespace, name)).map(|p| &**p)
    }

    fn pods(&self) -> Box<dyn Iterator<Item = &Pod> + '_> {
        Box::new(self.0.of_kind(Kind::Pod).filter_map(|o| match o {
            Object::Pod(p) => Some(&**p),
            _ => None,
        }))
    }

    fn reservation(&self, name: &str) -> Option<&Reservation> {
        self.0.reservation(name).map(|r| &**r)
    }
}

/// The jobs in the store.
pub(crate) fn jobs(store: &Store) -> Vec<Arc<PodMigrationJob>> {
    store
        .of_kind(Kind::PodMigrationJob)
        .filter_map(|o| match o {
            Object::PodMigrationJob(j) => Some(j.clone()),
            _ => None,
        })
        .collect()
}

/// One pass of the controller over the store's jobs (nothing when there are none).
pub(crate) fn reconcile(store: &Store, now: Time, args: &MigrationArgs) -> Vec<Action> {
    let jobs = jobs(store);
    if jobs.is_empty() {
        return Vec::new();
    }
    migration::reconcile(&jobs, &View(store), now, args)
}

/// The job named `name`.
pub(crate) fn job(store: &Store, name: &str) -> Option<Arc<PodMigrationJob>> {
    match store.get(&ObjectKey::cluster(Kind::PodMigrationJob, name)) {
        Some(Object::PodMigrationJob(j)) => Some(j.clone()),
        _ => None,
    }
}
