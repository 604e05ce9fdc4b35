//! One kube-runtime watcher per kind, each turned into core events on one channel.
//!
//! A watcher LISTs, then WATCHes from the list's resourceVersion with bookmarks; on a 410
//! (or any watch error) it re-LISTs after a back-off. Each LIST is framed as
//! [`Event::ListStarted`] ... [`Event::Listed`], so the core deletes what a re-list no longer
//! returns and knows when its first view of every kind is complete.

mod gangs;
pub mod provisioner;

use std::fmt::Debug;
use std::sync::Arc;

use berth_core::object::{Kind, Object};
use berth_core::Event;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::kinds::{self, Served, Unreadable};
use crate::metrics::Metrics;

pub use crate::inbox::Input;

type Convert<K> = fn(K) -> Result<Object, Unreadable>;

/// Starts a watcher for every kind the core reads; returns the kinds watched (what the core
/// waits for before it schedules).
pub fn spawn_all(
    client: &Client,
    served: &Served,
    tx: &mpsc::Sender<Input>,
    metrics: &Arc<Metrics>,
    tasks: &mut JoinSet<()>,
) -> Vec<Kind> {
    let mut kinds = Vec::new();
    spawn_core(client, tx, metrics, tasks, &mut kinds);
    spawn_storage(client, tx, metrics, tasks, &mut kinds);
    spawn_custom(client, served, tx, metrics, tasks, &mut kinds);
    kinds.extend(gangs::spawn_gangs(client, served, tx, metrics, tasks));
    kinds
}

/// Pods (finished ones left out), nodes, namespaces, PriorityClasses and PDBs.
fn spawn_core(
    client: &Client,
    tx: &mpsc::Sender<Input>,
    metrics: &Arc<Metrics>,
    tasks: &mut JoinSet<()>,
    kinds: &mut Vec<Kind>,
) {
    let mut typed = |kind: Kind| {
        kinds.push(kind);
        (kind, tx.clone(), metrics.clone())
    };
    // kube-scheduler's pod informer leaves out finished pods; a pod that finishes leaves the
    // selector and arrives as a deletion.
    let pods = watcher::Config::default()
        .any_semantic()
        .fields("status.phase!=Succeeded,status.phase!=Failed");
    let all = || watcher::Config::default().any_semantic();
    spawn(
        tasks,
        Api::<Pod>::all(client.clone()),
        pods,
        typed(Kind::Pod),
        |o| Ok(Object::Pod(Arc::new(o))),
    );
    spawn(
        tasks,
        Api::<Node>::all(client.clone()),
        all(),
        typed(Kind::Node),
        |o| Ok(Object::Node(Arc::new(o))),
    );
    spawn(
        tasks,
        Api::<Namespace>::all(client.clone()),
        all(),
        typed(Kind::Namespace),
        |o| Ok(Object::Namespace(Arc::new(o))),
    );
    spawn(
        tasks,
        Api::<PriorityClass>::all(client.clone()),
        all(),
        typed(Kind::PriorityClass),
        |o| Ok(Object::PriorityClass(Arc::new(o))),
    );
    spawn(
        tasks,
        Api::<PodDisruptionBudget>::all(client.clone()),
        all(),
        typed(Kind::PodDisruptionBudget),
        |o| Ok(Object::PodDisruptionBudget(Arc::new(o))),
    );
}

/// The storage kinds VolumeBinding, VolumeZone and NodeVolumeLimits read.
fn spawn_storage(
    client: &Client,
    tx: &mpsc::Sender<Input>,
    metrics: &Arc<Metrics>,
    tasks: &mut JoinSet<()>,
    kinds: &mut Vec<Kind>,
) {
    let mut typed = |kind: Kind| {
        kinds.push(kind);
        (kind, tx.clone(), metrics.clone())
    };
    let all = || watcher::Config::default().any_semantic();
    spawn(
        tasks,
        Api::<PersistentVolumeClaim>::all(client.clone()),
        all(),
        typed(Kind::PersistentVolumeClaim),
        |o| Ok(Object::PersistentVolumeClaim(Arc::new(o))),
    );
    spawn(
        tasks,
        Api::<PersistentVolume>::all(client.clone()),
        all(),
        typed(Kind::PersistentVolume),
        |o| Ok(Object::PersistentVolume(Arc::new(o))),
    );
    spawn(
        tasks,
        Api::<StorageClass>::all(client.clone()),
        all(),
        typed(Kind::StorageClass),
        |o| Ok(Object::StorageClass(Arc::new(o))),
    );
    spawn(
        tasks,
        Api::<CSIDriver>::all(client.clone()),
        all(),
        typed(Kind::CsiDriver),
        |o| Ok(Object::CsiDriver(Arc::new(o))),
    );
    spawn(
        tasks,
        Api::<CSIStorageCapacity>::all(client.clone()),
        all(),
        typed(Kind::CsiStorageCapacity),
        |o| Ok(Object::CsiStorageCapacity(Arc::new(o))),
    );
    spawn(
        tasks,
        Api::<CSINode>::all(client.clone()),
        all(),
        typed(Kind::CsiNode),
        |o| Ok(Object::CsiNode(Arc::new(o))),
    );
}

/// The kinds served only where their API is: Reservations, DRA, NodeResourceTopology.
fn spawn_custom(
    client: &Client,
    served: &Served,
    tx: &mpsc::Sender<Input>,
    metrics: &Arc<Metrics>,
    tasks: &mut JoinSet<()>,
    kinds: &mut Vec<Kind>,
) {
    let mut typed = |kind: Kind| {
        kinds.push(kind);
        (kind, tx.clone(), metrics.clone())
    };
    let all = || watcher::Config::default().any_semantic();
    if let Some(ar) = &served.reservations {
        let api = Api::<DynamicObject>::all_with(client.clone(), ar);
        spawn(
            tasks,
            api,
            all(),
            typed(Kind::Reservation),
            kinds::reservation,
        );
    }
    if served.dra {
        // kube-scheduler's DynamicResources reads slices, classes and claims. Pods' claim
        // templates are kube-controller-manager's to turn into claims (the pod waits for
        // them); berth also reads the templates because a Reservation's device claims name
        // them (there is no claim controller for reservations): a template's devices are
        // allocated for the reservation itself.
        let dra: [(Kind, &str, &str, Convert<DynamicObject>); 4] = [
            (
                Kind::ResourceSlice,
                "ResourceSlice",
                "resourceslices",
                kinds::resource_slice,
            ),
            (
                Kind::DeviceClass,
                "DeviceClass",
                "deviceclasses",
                kinds::device_class,
            ),
            (
                Kind::ResourceClaim,
                "ResourceClaim",
                "resourceclaims",
                kinds::resource_claim,
            ),
            (
                Kind::ResourceClaimTemplate,
                "ResourceClaimTemplate",
                "resourceclaimtemplates",
                kinds::resource_claim_template,
            ),
        ];
        for (kind, name, plural, convert) in dra {
            let api =
                Api::<DynamicObject>::all_with(client.clone(), &Served::dra_resource(name, plural));
            spawn(tasks, api, all(), typed(kind), convert);
        }
    }
    if let Some(ar) = &served.nrt {
        let api = Api::<DynamicObject>::all_with(client.clone(), ar);
        spawn(
            tasks,
            api,
            all(),
            typed(Kind::NodeResourceTopology),
            kinds::nrt,
        );
    }
}

fn spawn<K>(
    tasks: &mut JoinSet<()>,
    api: Api<K>,
    config: watcher::Config,
    (kind, tx, metrics): (Kind, mpsc::Sender<Input>, Arc<Metrics>),
    convert: Convert<K>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    tasks.spawn(async move {
        let mut stream = watcher(api, config).default_backoff().boxed();
        while let Some(item) = stream.next().await {
            let input = match item {
                Ok(watcher::Event::Init) => Input::Event(Event::ListStarted(kind)),
                Ok(watcher::Event::InitDone) => Input::Event(Event::Listed(kind)),
                Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o)) => match convert(o) {
                    Ok(obj) => Input::Event(Event::Applied(obj)),
                    Err(bad) => Input::Unreadable(bad),
                },
                Ok(watcher::Event::Delete(o)) => match convert(o) {
                    Ok(obj) => Input::Event(Event::Deleted(obj.key())),
                    // An object berth could not read may still have been read in an earlier
                    // version: delete by name.
                    Err(bad) => Input::Event(Event::Deleted(bad.key())),
                },
                Err(e) => {
                    failed(&metrics, kind, &e);
                    continue;
                }
            };
            metrics.watch_event(kind);
            if tx.send(input).await.is_err() {
                return; // the driver has stopped
            }
        }
    });
}

/// Counts and logs a failed watch of `kind`; the watcher re-lists after its back-off.
fn failed(metrics: &Metrics, kind: Kind, e: &watcher::Error) {
    let code = http_code(e);
    metrics.watch_error(kind, code);
    tracing::warn!(%kind, code, error = %e, "watch failed; re-listing after back-off");
}

/// The API server's HTTP status in a watch failure, or 0 when it gave none (a broken
/// connection, an unreadable stream).
fn http_code(e: &watcher::Error) -> u16 {
    match e {
        watcher::Error::WatchError(status) => status.code,
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => match e {
            kube::Error::Api(status) => status.code,
            _ => 0,
        },
        watcher::Error::NoResourceVersion => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn status(code: u16) -> Box<Status> {
        Status::failure("refused", "Forbidden")
            .with_code(code)
            .boxed()
    }

    #[test]
    fn a_watch_failure_carries_the_api_servers_code_or_zero() {
        let refused = watcher::Error::InitialListFailed(kube::Error::Api(status(403)));
        assert_eq!(http_code(&refused), 403);
        assert_eq!(http_code(&watcher::Error::WatchError(status(410))), 410);
        let started = watcher::Error::WatchStartFailed(kube::Error::Api(status(404)));
        assert_eq!(http_code(&started), 404);
        let broken = watcher::Error::WatchFailed(kube::Error::LinesCodecMaxLineLengthExceeded);
        assert_eq!(http_code(&broken), 0);
        assert_eq!(http_code(&watcher::Error::NoResourceVersion), 0);
    }
}
