//! The gang kinds' watchers: Coscheduling's PodGroups of every served API group as one kind,
//! and Kubernetes 1.35's Workloads.
//!
//! The core knows one kind `PodGroup` whichever group a PodGroup comes from (a member names
//! its group by its label), and a LIST frames a kind ([`Event::ListStarted`] ...
//! [`Event::Listed`]): what the frame does not show is deleted. Two watchers framing the same
//! kind would delete each other's objects on a re-list, so the groups' watchers are merged
//! into one stream here: a LIST of either is framed once, the other group's current objects
//! shown again inside the frame, and the frame ends when no group is listing. A PodGroup of
//! the same namespace and name in both groups is one gang to the core (the later wins).

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_core::object::{Kind, Object, ObjectKey};
use berth_core::Event;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::Client;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::inbox::Input;
use crate::kinds::{self, Served};
use crate::metrics::Metrics;

/// Starts the gang kinds' watchers that `served` allows; returns the kinds watched.
pub(super) fn spawn_gangs(
    client: &Client,
    served: &Served,
    tx: &mpsc::Sender<Input>,
    metrics: &Arc<Metrics>,
    tasks: &mut JoinSet<()>,
) -> Vec<Kind> {
    let mut kinds = Vec::new();
    if !served.pod_groups.is_empty() {
        kinds.push(Kind::PodGroup);
        let (c, ars, tx, m) = (
            client.clone(),
            served.pod_groups.clone(),
            tx.clone(),
            metrics.clone(),
        );
        tasks.spawn(pod_groups(c, ars, tx, m));
    }
    if let Some(ar) = &served.workloads {
        kinds.push(Kind::Workload);
        let api = Api::<DynamicObject>::all_with(client.clone(), ar);
        super::spawn(
            tasks,
            api,
            watcher::Config::default().any_semantic(),
            (Kind::Workload, tx.clone(), metrics.clone()),
            kinds::workload,
        );
    }
    kinds
}

/// What the merged PodGroup stream knows of each group's watcher.
#[derive(Default)]
struct Group {
    /// Its objects as last shown to the core.
    objects: BTreeMap<ObjectKey, Object>,
    /// Its LIST is under way.
    listing: bool,
}

/// One watcher per PodGroup API group, merged into one framed stream of `Kind::PodGroup`.
async fn pod_groups(
    client: Client,
    resources: Vec<ApiResource>,
    tx: mpsc::Sender<Input>,
    metrics: Arc<Metrics>,
) {
    let streams = resources.iter().enumerate().map(|(i, ar)| {
        let api = Api::<DynamicObject>::all_with(client.clone(), ar);
        watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .map(move |e| (i, e))
            .boxed()
    });
    let mut merged = futures::stream::select_all(streams);
    let mut groups: Vec<Group> = resources.iter().map(|_| Group::default()).collect();
    let mut framed = false;
    let kind = Kind::PodGroup;
    while let Some((i, item)) = merged.next().await {
        let mut out = Vec::new();
        match item {
            Ok(watcher::Event::Init) => {
                if !framed {
                    framed = true;
                    out.push(Input::Event(Event::ListStarted(kind)));
                    // The groups not listing are shown again, so the frame keeps them.
                    for (j, g) in groups.iter().enumerate() {
                        if j != i && !g.listing {
                            let again = g.objects.values().cloned();
                            out.extend(again.map(|o| Input::Event(Event::Applied(o))));
                        }
                    }
                }
                groups[i].listing = true;
                groups[i].objects.clear();
            }
            Ok(watcher::Event::InitDone) => {
                groups[i].listing = false;
                if framed && groups.iter().all(|g| !g.listing) {
                    framed = false;
                    out.push(Input::Event(Event::Listed(kind)));
                }
            }
            Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o)) => {
                out.push(match kinds::pod_group(o) {
                    Ok(obj) => {
                        groups[i].objects.insert(obj.key(), obj.clone());
                        Input::Event(Event::Applied(obj))
                    }
                    Err(bad) => Input::Unreadable(bad),
                });
            }
            Ok(watcher::Event::Delete(o)) => {
                let key = match kinds::pod_group(o) {
                    Ok(obj) => obj.key(),
                    Err(bad) => bad.key(),
                };
                groups[i].objects.remove(&key);
                out.push(Input::Event(Event::Deleted(key)));
            }
            Err(e) => {
                super::failed(&metrics, kind, &e);
                continue;
            }
        }
        for input in out {
            metrics.watch_event(kind);
            if tx.send(input).await.is_err() {
                return; // the driver has stopped
            }
        }
    }
}
