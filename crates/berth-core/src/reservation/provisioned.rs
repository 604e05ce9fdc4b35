//! The reservation side of Dynamic Reservation Provisioning ([`crate::drp`]): a virtual
//! reservation placed for a pod, and the Reservation a provisioner created taking its place.
//!
//! A virtual reservation is an ordinary [`ReservationInfo`] (so owners allocate from it and
//! everyone else is held off exactly as with a real one) marked
//! [`ReservationInfo::virtual_id`]: its status is never written and a re-LIST does not
//! delete it.

use std::sync::Arc;

use berth_api::reservation::Reservation;

use crate::cache::node_cache::NodeCache;
use crate::model::node::NodeIdx;
use crate::model::pod::PodInfo;
use crate::resources::Resources;
use crate::time::Time;

use super::allocate;
use super::lifecycle::mask_requests;
use super::RIdx;
use super::ReservationStore;
use berth_api::reservation::ReservationPhase;

impl ReservationStore {
    /// Places the virtual reservation `obj` (built by [`crate::drp::objects::reservation`]) for
    /// reservation id `id` on `node`, with `pod` (assumed there in this cycle) as its first
    /// owner. The caller checked that the node has room for it.
    pub fn place_virtual(
        &mut self,
        nodes: &mut NodeCache,
        obj: Arc<Reservation>,
        id: &str,
        node: NodeIdx,
        pod: &PodInfo,
        now: Time,
    ) -> Result<RIdx, String> {
        let mut info = self.compile(nodes, obj, now);
        if let Some(p) = info.problem.take() {
            return Err(p);
        }
        if self.idx(&info.name).is_some() {
            return Err(format!("reservation {} exists already", info.name));
        }
        info.virtual_id = Some(id.into());
        info.expires_at = None;
        let name = info.name.clone();
        let idx = self.insert(info);
        if let Err(e) = self.place(nodes, &name, node, now) {
            self.remove(idx);
            return Err(e);
        }
        self.assume_owner(nodes, idx, pod);
        Ok(idx)
    }

    /// Drops a virtual reservation: what it holds is released at once and its owners' shares
    /// go back to their nodes (pods waiting for room are retried).
    pub fn drop_virtual(&mut self, nodes: &mut NodeCache, name: &str) {
        if self.by_name(name).is_some_and(|r| r.is_virtual()) {
            self.delete(nodes, name);
        }
    }

    /// Puts the Reservation `obj`, created for the virtual reservation `virtual_name`, in its
    /// place: on the same node, Available, with its owners (still waiting for their binds)
    /// allocated from it. A Reservation of that name already known and still Pending (listed
    /// after a restart, before its pod was scheduled again) is replaced.
    ///
    /// Refused, changing nothing, when the scheduler could not use the Reservation (a problem
    /// in its spec, being deleted, already placed) or when it holds more than the node has
    /// room for once the virtual reservation is gone: then it is to be handled as any other.
    pub fn adopt(
        &mut self,
        nodes: &mut NodeCache,
        virtual_name: &str,
        obj: Arc<Reservation>,
        now: Time,
    ) -> Result<RIdx, String> {
        let Some(v) = self.by_name(virtual_name).filter(|r| r.is_virtual()) else {
            return Err(format!("no virtual reservation {virtual_name}"));
        };
        let Some(node) = v.node else {
            return Err("the virtual reservation has no node".into());
        };
        let owners: Vec<Arc<PodInfo>> = v
            .owner_pods
            .keys()
            .filter_map(|k| nodes.pod(k).map(|e| e.info.clone()))
            .collect();
        let virtual_hold = v.contrib;
        let fresh = self.compile(nodes, obj, now);
        if let Some(p) = &fresh.problem {
            return Err(p.clone());
        }
        if fresh.terminating {
            return Err("the reservation is being deleted".into());
        }
        let existing = self.by_name(&fresh.name);
        if existing.is_some_and(|r| r.phase != ReservationPhase::Pending || r.node_name.is_some()) {
            return Err(format!("reservation {} is placed already", fresh.name));
        }
        let replace = existing.is_some();
        // Room: what the Reservation will hold once its owners are counted must fit in what
        // the node has free after the virtual reservation leaves.
        let mut requested = Resources::ZERO;
        for p in &owners {
            requested.add(&mask_requests(&p.requests, fresh.names));
        }
        let mut hold = fresh.allocatable;
        hold.sub(&requested.min(&fresh.cap()));
        hold.clamp_non_negative();
        let Some(n) = nodes.node(node) else {
            return Err("the node of the virtual reservation is gone".into());
        };
        let mut free = allocate::node_free(n);
        free.add(&virtual_hold);
        if let Some((id, _)) = hold.non_zero().find(|(id, v)| *v > free[*id]) {
            return Err(format!(
                "it reserves more {} than node {} has room for",
                nodes.names.name(id),
                n.name
            ));
        }
        let name = fresh.name.clone();
        self.delete(nodes, virtual_name);
        if replace {
            self.delete(nodes, &name);
        }
        let idx = self.insert(fresh);
        self.place(nodes, &name, node, now)?;
        for p in &owners {
            self.add_owner(nodes, idx, p, false, false);
        }
        self.schedule_timer(nodes, idx, now);
        Ok(idx)
    }
}
