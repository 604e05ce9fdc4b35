//! The [`Simulation`]'s event recorder: `v1` Events folded as client-go's correlator does.

use super::*;

impl Simulation {
    /// Stores a `v1` Event for a record of the core, as client-go's event correlator writes
    /// it: an event identical to one recorded before (same source, involved object with its
    /// UID, type, reason and message) is not a new object but the earlier one with `count`
    /// raised and `lastTimestamp` moved, however many other events came in between.
    pub(super) fn record(&mut self, r: Record) {
        let namespace = if r.involved.namespace.is_empty() {
            "default".to_string()
        } else {
            r.involved.namespace.to_string()
        };
        let uid = if r.uid.is_empty() {
            self.store
                .get(&r.involved)
                .and_then(|o| o.meta().uid.clone())
        } else {
            Some(r.uid.clone())
        };
        let key = EventKey {
            involved: r.involved.clone(),
            uid: uid.clone().unwrap_or_default(),
            type_: r.type_,
            reason: r.reason.clone(),
            message: r.message.clone(),
        };
        if let Some(name) = self.recorder.seen(&key) {
            if self.store.repeat_event(&namespace, &name, self.now) {
                return;
            }
        }
        self.recorder.counter += 1;
        let name = format!("{}.{:016x}", r.involved.name, self.recorder.counter);
        let event = RecordedEvent {
            involved: r.involved,
            uid,
            type_: r.type_,
            reason: r.reason,
            message: r.message,
            first: self.now,
            last: self.now,
            count: 1,
        };
        self.recorder.remember(key, name.clone());
        self.store.record_event(namespace, name, event);
    }
}

/// What makes two events the same for client-go's correlator (`getEventKey`: source,
/// involved object with UID, type, reason, message). The source is always berth's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct EventKey {
    pub(super) involved: ObjectKey,
    pub(super) uid: String,
    pub(super) type_: &'static str,
    pub(super) reason: String,
    pub(super) message: String,
}

/// How many distinct events the correlator remembers (client-go's `maxLruCacheEntries`);
/// past that the least recently seen is forgotten and its next repeat starts a new event.
pub(super) const EVENT_CACHE_SIZE: usize = 4096;

/// Event numbering and folding state: a least-recently-used cache of the events recorded,
/// as client-go's `eventLogger` keeps.
#[derive(Debug, Default)]
pub(super) struct Recorder {
    pub(super) counter: u64,
    /// Event name and last use, by key.
    pub(super) names: HashMap<EventKey, (String, u64)>,
    /// Keys by last use, oldest first, for eviction.
    pub(super) by_use: BTreeMap<u64, EventKey>,
    pub(super) uses: u64,
}

impl Recorder {
    /// The name of the event recorded earlier under `key`, if remembered; marks it used.
    pub(super) fn seen(&mut self, key: &EventKey) -> Option<String> {
        let (name, used) = self.names.get_mut(key)?;
        self.by_use.remove(used);
        self.uses += 1;
        *used = self.uses;
        self.by_use.insert(self.uses, key.clone());
        Some(name.clone())
    }

    /// Remembers a new event, forgetting the least recently used one beyond the cache size.
    pub(super) fn remember(&mut self, key: EventKey, name: String) {
        self.uses += 1;
        self.by_use.insert(self.uses, key.clone());
        if let Some((_, old)) = self.names.insert(key, (name, self.uses)) {
            self.by_use.remove(&old);
        }
        while self.names.len() > EVENT_CACHE_SIZE {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            self.names.remove(&oldest);
        }
    }
}
