//! What `berth migrate` knows of the cluster: one watcher per kind, each keeping the objects
//! it listed and watched in a map, and waking the controller when something changed. A
//! re-list replaces the map whole, so an object deleted while the watch was down is gone.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinSet;

/// Objects of one kind by `namespace/name` (`name` for a cluster-scoped kind).
pub type Map<K> = Arc<Mutex<BTreeMap<String, K>>>;

/// The key of `obj` in its map.
pub fn key_of<K: Resource>(obj: &K) -> String {
    match obj.meta().namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", obj.name_any()),
        _ => obj.name_any(),
    }
}

/// Watches `api` into a new map; `synced` hears of each complete list, `changed` of every
/// change.
pub fn watch<K>(
    tasks: &mut JoinSet<()>,
    api: Api<K>,
    changed: Arc<Notify>,
    synced: tokio::sync::mpsc::UnboundedSender<()>,
) -> Map<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    watch_with(tasks, api, changed, synced, |_, _, _| {})
}

/// What a watch event does to an object already in the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Added or changed.
    Apply,
    /// Deleted.
    Delete,
}

/// [`watch`], and `hook` hears of each watch event (not of a re-list) in the stream's order,
/// with the map as it was just before it (the object's previous state, the others').
pub fn watch_with<K, H>(
    tasks: &mut JoinSet<()>,
    api: Api<K>,
    changed: Arc<Notify>,
    synced: tokio::sync::mpsc::UnboundedSender<()>,
    mut hook: H,
) -> Map<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    H: FnMut(&BTreeMap<String, K>, &K, Change) + Send + 'static,
{
    let map: Map<K> = Arc::default();
    let out = map.clone();
    tasks.spawn(async move {
        let config = watcher::Config::default().any_semantic();
        let mut stream = watcher(api, config).default_backoff().boxed();
        let mut listing: BTreeMap<String, K> = BTreeMap::new();
        while let Some(item) = stream.next().await {
            let lock = || map.lock().unwrap_or_else(|p| p.into_inner());
            match item {
                Ok(watcher::Event::Init) => listing.clear(),
                Ok(watcher::Event::InitApply(o)) => {
                    listing.insert(key_of(&o), o);
                }
                Ok(watcher::Event::InitDone) => {
                    *lock() = std::mem::take(&mut listing);
                    let _ = synced.send(());
                }
                Ok(watcher::Event::Apply(o)) => {
                    let mut map = lock();
                    hook(&map, &o, Change::Apply);
                    map.insert(key_of(&o), o);
                }
                Ok(watcher::Event::Delete(o)) => {
                    let mut map = lock();
                    hook(&map, &o, Change::Delete);
                    map.remove(&key_of(&o));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "watch failed; re-listing after back-off");
                    continue;
                }
            }
            changed.notify_one();
        }
    });
    out
}
