//! The PodGroup controller's part in the simulator: each PodGroup's status (scheduler-plugins'
//! `podgroup_controller`: phase and counts). Reading gang objects is `input/gangs.rs`.

use std::sync::Arc;

use berth_api::gang::{phase, PodGroup, PodGroupStatus};
use berth_core::object::{Kind, Object};

use crate::store::Store;

/// The status the PodGroup controller would write for `pg` given the pods in the store.
pub(crate) fn pod_group_status(store: &Store, pg: &PodGroup) -> PodGroupStatus {
    let ns = pg.metadata.namespace.as_deref().unwrap_or("default");
    let name = pg.metadata.name.as_deref().unwrap_or("");
    let label = if pg.api_version == berth_api::gang::X_K8S_API_VERSION {
        berth_api::gang::LABEL_X_K8S_POD_GROUP
    } else {
        berth_api::gang::LABEL_SIGS_POD_GROUP
    };
    let mut status = PodGroupStatus {
        schedule_start_time: pg
            .status
            .as_ref()
            .and_then(|s| s.schedule_start_time.clone()),
        ..Default::default()
    };
    let mut total = 0;
    for obj in store.of_kind(Kind::Pod) {
        let Object::Pod(p) = obj else { continue };
        let member = p.metadata.namespace.as_deref() == Some(ns)
            && p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(label))
                .map(String::as_str)
                == Some(name);
        if !member {
            continue;
        }
        total += 1;
        if status.occupied_by.is_none() {
            status.occupied_by = p
                .metadata
                .owner_references
                .as_ref()
                .and_then(|o| o.iter().find(|r| r.controller == Some(true)))
                .map(|r| format!("{ns}/{}", r.name));
        }
        let bound = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        if bound {
            status.scheduled += 1;
        }
        match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Running") => status.running += 1,
            Some("Succeeded") => status.succeeded += 1,
            Some("Failed") => status.failed += 1,
            _ => {}
        }
    }
    let min = pg.spec.min_member;
    status.phase = Some(
        if total < min {
            phase::PENDING
        } else if status.running + status.succeeded >= min && min > 0 {
            phase::RUNNING
        } else if status.scheduled >= min && min > 0 {
            phase::SCHEDULED
        } else {
            phase::PRE_SCHEDULING
        }
        .to_string(),
    );
    status
}

/// The PodGroup controller's pass: every PodGroup whose status would change gets the new
/// one. Returns whether any changed.
pub(crate) fn sync_pod_groups(store: &mut Store) -> bool {
    let updates: Vec<PodGroup> = store
        .of_kind(Kind::PodGroup)
        .filter_map(|o| match o {
            Object::PodGroup(pg) => {
                let status = pod_group_status(store, pg);
                (pg.status.as_ref() != Some(&status)).then(|| {
                    let mut next = (**pg).clone();
                    next.status = Some(status);
                    next
                })
            }
            _ => None,
        })
        .collect();
    let changed = !updates.is_empty();
    for pg in updates {
        store.insert(Object::PodGroup(Arc::new(pg)));
    }
    changed
}
