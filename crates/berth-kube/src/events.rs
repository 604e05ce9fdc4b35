//! Events, best-effort, as client-go's event broadcaster sends kube-scheduler's: nothing the
//! scheduler does ever waits for one.
//!
//! - A bounded queue (client-go's `maxQueuedEvents`, 1,000) between the driver and the
//!   writer: when it is full the event is dropped and counted
//!   (`berth_events_dropped_total{reason="queue_full"}`), never waited for.
//! - The writer has a client of its own (its own connection and token bucket), so a flood
//!   of events never takes a bind's, a status write's or the lease's turn.
//! - client-go's per-object spam filter (tools/record: a token bucket of 25, refilled one
//!   per 5 minutes, per source, object, type and reason): an object that keeps producing
//!   distinct events is cut off, counted as `reason="spam_filter"`.
//! - The events.k8s.io/v1 correlator (tools/events): an event isomorphic to one sent in the
//!   last 6 minutes (same type, action, reason, reporter and object; the note may differ)
//!   is not sent again; the second becomes a series (one PATCH, count 2), later ones only
//!   count up, and a series idle for 6 minutes gets its final count written.

use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::collections::HashMap;
use berth_core::object::Kind;
use berth_core::Record;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::kinds::api_version;
use crate::metrics::Metrics;
use crate::retry::{self, classify, retry, Backoff, Class};

/// client-go's `maxQueuedEvents`.
pub const QUEUE: usize = 1000;
/// The API's limit on an event's note.
const NOTE_LIMIT: usize = 1024;
/// client-go's `finishTime`: a series (or a single event) unobserved this long is over.
const FINISH: Duration = Duration::from_secs(6 * 60);
/// Events being written at once (each its own request on the writer's client).
const CONCURRENCY: usize = 16;
/// The spam filter: burst and refill period (client-go's defaultSpamBurst 25,
/// defaultSpamQPS 1/300).
const SPAM_BURST: f64 = 25.0;
const SPAM_REFILL: Duration = Duration::from_secs(300);
/// Objects the spam filter and the correlator remember (client-go's LRU size, 4096).
const REMEMBERED: usize = 4096;

/// Who reports the events.
#[derive(Debug, Clone)]
pub struct Reporter {
    /// `reportingController`.
    pub controller: String,
    /// `reportingInstance`.
    pub instance: String,
}

/// The driver's end: hands events to the writer without ever waiting.
#[derive(Debug, Clone)]
pub struct Events {
    tx: mpsc::Sender<Record>,
    metrics: Arc<Metrics>,
}

impl Events {
    /// Starts the writer on `client`; it runs until every [`Events`] is dropped.
    pub fn spawn(client: Client, reporter: Reporter, metrics: Arc<Metrics>) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write(client, reporter, metrics.clone(), rx));
        Self { tx, metrics }
    }

    /// Queues `record`; drops (and counts) it when the queue is full.
    pub fn record(&self, record: Record) {
        if self.tx.try_send(record).is_err() {
            self.metrics.event_dropped("queue_full");
        }
    }
}

/// The correlator's key: what makes two events isomorphic (client-go's `getKey`, the note
/// left out).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    type_: &'static str,
    reason: String,
    kind: Kind,
    namespace: String,
    name: String,
    uid: String,
}

impl Key {
    fn of(r: &Record) -> Self {
        Self {
            type_: r.type_,
            reason: r.reason.clone(),
            kind: r.involved.kind,
            namespace: r.involved.namespace.to_string(),
            name: r.involved.name.to_string(),
            uid: r.uid.clone(),
        }
    }
}

/// What the correlator says to do with an event.
#[derive(Debug, PartialEq)]
enum Send {
    /// A new event: create it.
    Create(Event),
    /// The second of its kind: patch the first into a series.
    Series(Event),
    /// Counted into a series already sent.
    Nothing,
}

/// The spam filter and the correlator: pure bookkeeping, tested without an API server.
#[derive(Debug, Default)]
struct Correlator {
    /// Per object and reason: tokens and when they were last counted.
    spam: HashMap<Key, (f64, Instant)>,
    /// Events sent in the last [`FINISH`], by key: the event as sent and when it was last
    /// observed.
    cache: HashMap<Key, (Event, Instant)>,
}

impl Correlator {
    /// Whether the spam filter lets an event of `key` through at `now`.
    fn allow(&mut self, key: &Key, now: Instant) -> bool {
        if self.spam.len() >= REMEMBERED && !self.spam.contains_key(key) {
            // A full bucket is as good as none: forget those first.
            self.spam
                .retain(|_, (tokens, at)| refilled(*tokens, *at, now) < SPAM_BURST);
            if self.spam.len() >= REMEMBERED {
                self.spam.clear();
            }
        }
        let (tokens, at) = self.spam.entry(key.clone()).or_insert((SPAM_BURST, now));
        let have = refilled(*tokens, *at, now);
        *at = now;
        if have >= 1.0 {
            *tokens = have - 1.0;
            true
        } else {
            *tokens = have;
            false
        }
    }

    /// What to send for `event` (of `key`) at `now`.
    fn correlate(&mut self, key: Key, event: Event, now: Instant) -> Send {
        if self.cache.len() >= REMEMBERED && !self.cache.contains_key(&key) {
            self.cache
                .retain(|_, (_, at)| now.duration_since(*at) < FINISH);
            if self.cache.len() >= REMEMBERED {
                self.cache.clear();
            }
        }
        match self.cache.entry(key) {
            Entry::Occupied(mut o) => {
                let (sent, at) = o.get_mut();
                *at = now;
                let observed = MicroTime(Timestamp::now());
                match &mut sent.series {
                    Some(series) => {
                        series.count += 1;
                        series.last_observed_time = observed;
                        Send::Nothing
                    }
                    None => {
                        sent.series = Some(EventSeries {
                            count: 2,
                            last_observed_time: observed,
                        });
                        Send::Series(sent.clone())
                    }
                }
            }
            Entry::Vacant(v) => {
                v.insert((event.clone(), now));
                Send::Create(event)
            }
        }
    }

    /// Series over (unobserved for [`FINISH`]) with counts to write; forgets those and the
    /// single events that are over.
    fn finish(&mut self, now: Instant) -> Vec<Event> {
        let mut out = Vec::new();
        self.cache.retain(|_, (event, at)| {
            if now.duration_since(*at) < FINISH {
                return true;
            }
            if event.series.is_some() {
                out.push(event.clone());
            }
            false
        });
        out
    }
}

fn refilled(tokens: f64, at: Instant, now: Instant) -> f64 {
    let per_second = 1.0 / SPAM_REFILL.as_secs_f64();
    (tokens + now.duration_since(at).as_secs_f64() * per_second).min(SPAM_BURST)
}

/// The writer: takes events off the queue, filters and correlates them, and writes them,
/// a few at a time.
async fn write(
    client: Client,
    reporter: Reporter,
    metrics: Arc<Metrics>,
    mut rx: mpsc::Receiver<Record>,
) {
    let mut correlator = Correlator::default();
    let mut writing = JoinSet::new();
    let mut finish = tokio::time::interval(FINISH);
    finish.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let record = tokio::select! {
            r = rx.recv(), if writing.len() < CONCURRENCY => match r {
                Some(r) => r,
                None => break,
            },
            Some(_) = writing.join_next(), if !writing.is_empty() => continue,
            _ = finish.tick() => {
                for event in correlator.finish(Instant::now()) {
                    writing.spawn(send(client.clone(), metrics.clone(), Send::Series(event)));
                }
                continue;
            }
        };
        let now = Instant::now();
        let key = Key::of(&record);
        if !correlator.cache.contains_key(&key) && !correlator.allow(&key, now) {
            metrics.event_dropped("spam_filter");
            continue;
        }
        let event = event_of(&record, &reporter);
        match correlator.correlate(key, event, now) {
            Send::Nothing => {}
            what => {
                writing.spawn(send(client.clone(), metrics.clone(), what));
            }
        }
    }
    // Stopping: let what is being written finish (bounded by the retries).
    while writing.join_next().await.is_some() {}
}

async fn send(client: Client, metrics: Arc<Metrics>, what: Send) {
    let (event, series) = match what {
        Send::Create(e) => (e, false),
        Send::Series(e) => (e, true),
        Send::Nothing => return,
    };
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client, &namespace);
    let backoff = Backoff {
        attempts: 3,
        ..Backoff::default()
    };
    let pp = PostParams::default();
    let r = if series {
        let name = event.metadata.name.clone().unwrap_or_default();
        let patch = Patch::Merge(serde_json::json!({"series": event.series}));
        let patch_params = PatchParams::default();
        match retry(backoff, || api.patch(&name, &patch_params, &patch)).await {
            // Gone (expired by the API server): create it again, as client-go does.
            Err(e) if classify(&e) == Class::NotFound => {
                let mut fresh = event.clone();
                fresh.metadata.resource_version = None;
                retry(backoff, || api.create(&pp, &fresh)).await
            }
            other => other,
        }
    } else {
        retry(backoff, || api.create(&pp, &event)).await
    };
    metrics.request(
        if series { "event_series" } else { "event" },
        r.as_ref().map_or_else(retry::code, |_| 201),
    );
    if let Err(e) = r {
        metrics.event_dropped("failed");
        tracing::debug!(error = %e, reason = event.reason, "event not recorded");
    }
}

/// The events.k8s.io/v1 Event for `r`, as client-go's recorder makes it (name
/// `<object>.<nanoseconds in hex>`, cluster-scoped objects' events in `default`).
fn event_of(r: &Record, reporter: &Reporter) -> Event {
    let now = Timestamp::now();
    let namespace = if r.involved.namespace.is_empty() {
        "default".to_string()
    } else {
        r.involved.namespace.to_string()
    };
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", r.involved.name, now.as_nanosecond())),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some(r.type_.to_string()),
        reason: Some(r.reason.clone()),
        action: Some(action(&r.reason, r.involved.kind).into()),
        note: Some(truncate(&r.message, NOTE_LIMIT)),
        regarding: Some(ObjectReference {
            api_version: Some(api_version(r.involved.kind).into()),
            kind: Some(r.involved.kind.as_str().into()),
            name: Some(r.involved.name.to_string()),
            namespace: (!r.involved.namespace.is_empty()).then(|| r.involved.namespace.to_string()),
            uid: (!r.uid.is_empty()).then(|| r.uid.clone()),
            ..ObjectReference::default()
        }),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone()),
        ..Event::default()
    }
}

/// kube-scheduler's actions: `Binding` for Scheduled, `Scheduling` for FailedScheduling,
/// `Preempting` for Preempted.
fn action(reason: &str, kind: Kind) -> &'static str {
    match (reason, kind) {
        ("Scheduled", _) => "Binding",
        ("Preempted", _) => "Preempting",
        (_, Kind::Reservation) => "Reserving",
        _ => "Scheduling",
    }
}

fn truncate(s: &str, limit: usize) -> String {
    if s.len() <= limit {
        return s.to_string();
    }
    let mut end = limit;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::object::ObjectKey;

    fn record(pod: &str, reason: &str, message: &str) -> Record {
        Record {
            involved: ObjectKey::pod("default", pod),
            uid: format!("uid-{pod}"),
            type_: "Warning",
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn reporter() -> Reporter {
        Reporter {
            controller: "berth".into(),
            instance: "h_1".into(),
        }
    }

    #[test]
    fn notes_are_cut_on_a_character_boundary() {
        let s = "é".repeat(600);
        let t = truncate(&s, NOTE_LIMIT);
        assert!(t.len() <= NOTE_LIMIT);
        assert_eq!(t.chars().count(), 512);
    }

    /// The first event is created, the second patches it into a series of 2, later ones
    /// are only counted (whatever their note), and the series' final count is written
    /// once it has been quiet for six minutes.
    #[test]
    fn repeats_become_a_series_sent_twice_at_most() {
        let mut c = Correlator::default();
        let t0 = Instant::now();
        let mut calls = 0;
        for i in 0..100 {
            let r = record("a", "FailedScheduling", &format!("0/{i} nodes"));
            match c.correlate(Key::of(&r), event_of(&r, &reporter()), t0) {
                Send::Create(e) => {
                    assert_eq!(i, 0);
                    assert!(e.series.is_none());
                    calls += 1;
                }
                Send::Series(e) => {
                    assert_eq!(i, 1);
                    assert_eq!(e.series.as_ref().map(|s| s.count), Some(2));
                    calls += 1;
                }
                Send::Nothing => assert!(i >= 2),
            }
        }
        assert_eq!(calls, 2);
        // Another object, or another reason, is another event.
        let r = record("b", "FailedScheduling", "x");
        assert!(matches!(
            c.correlate(Key::of(&r), event_of(&r, &reporter()), t0),
            Send::Create(_)
        ));
        let r = record("a", "Preempted", "x");
        assert!(matches!(
            c.correlate(Key::of(&r), event_of(&r, &reporter()), t0),
            Send::Create(_)
        ));
        assert!(c.finish(t0 + Duration::from_secs(60)).is_empty());
        let done = c.finish(t0 + FINISH);
        assert_eq!(done.len(), 1, "only the series has a count to write");
        assert_eq!(done[0].series.as_ref().map(|s| s.count), Some(100));
        assert!(c.cache.is_empty());
    }

    #[test]
    fn the_spam_filter_lets_25_through_then_one_per_five_minutes() {
        let mut c = Correlator::default();
        let key = Key::of(&record("a", "FailedScheduling", ""));
        let t0 = Instant::now();
        let passed = (0..100).filter(|_| c.allow(&key, t0)).count();
        assert_eq!(passed, 25);
        assert!(!c.allow(&key, t0 + Duration::from_secs(299)));
        assert!(c.allow(&key, t0 + Duration::from_secs(301)));
        assert!(!c.allow(&key, t0 + Duration::from_secs(302)));
        // Other objects have buckets of their own.
        assert!(c.allow(&Key::of(&record("b", "FailedScheduling", "")), t0));
    }

    #[test]
    fn what_is_remembered_is_bounded() {
        let mut c = Correlator::default();
        let t0 = Instant::now();
        for i in 0..3 * REMEMBERED {
            let r = record(&format!("p{i}"), "FailedScheduling", "");
            c.allow(&Key::of(&r), t0);
            c.correlate(Key::of(&r), event_of(&r, &reporter()), t0);
        }
        assert!(c.spam.len() <= REMEMBERED);
        assert!(c.cache.len() <= REMEMBERED);
    }

    /// The queue never blocks: past its bound, events are dropped and counted.
    #[tokio::test]
    async fn a_full_queue_drops_and_counts() {
        let metrics = Arc::new(Metrics::new());
        let (tx, _rx) = mpsc::channel(QUEUE);
        let events = Events {
            tx,
            metrics: metrics.clone(),
        };
        for i in 0..QUEUE + 7 {
            events.record(record(&format!("p{i}"), "FailedScheduling", ""));
        }
        let text = metrics.encode();
        assert!(
            text.contains("berth_events_dropped_total{reason=\"queue_full\"} 7"),
            "{text}"
        );
    }
}
