//! `/metrics`: kube-scheduler's metric names where berth does the same thing, `berth_*` for
//! what only berth has (reservations, the NUMA reserve cache, the adapter's own traffic).
//!
//! The driver owns the core, so it updates these after each round; the HTTP server only
//! encodes them.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use berth_core::object::Kind;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    result: &'static str,
    profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchErrorLabels {
    kind: &'static str,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UnreadableLabels {
    kind: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    operation: &'static str,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NumaLabels {
    counter: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DrpLabels {
    event: &'static str,
}

/// Dynamic Reservation Provisioning's metrics (seed 003), fed from the core's figures.
struct Drp {
    events: Family<DrpLabels, Counter>,
    latency: Histogram,
    pending: Histogram,
    waiting: Gauge,
    /// The core's figures at the last update: the exported counters move by the difference.
    last: Mutex<berth_core::drp::Metrics>,
}

fn drp_histogram() -> Histogram {
    Histogram::new(berth_core::drp::LATENCY_BUCKETS.iter().copied())
}

/// Moves `h` by what `now` has more than `before` (core histograms count cumulatively per
/// bucket of [`berth_core::drp::LATENCY_BUCKETS`]): each new observation is recorded at its
/// bucket's upper bound, so the buckets and the count are exact and the sum is an upper
/// bound (past the last bucket, twice its bound).
fn observe_delta(
    h: &Histogram,
    before: &berth_core::drp::Histogram,
    now: &berth_core::drp::Histogram,
) {
    let bounds = berth_core::drp::LATENCY_BUCKETS;
    let mut below_now = 0;
    let mut below_before = 0;
    for (i, bound) in bounds.iter().enumerate() {
        let n = now.buckets[i].saturating_sub(below_now);
        let b = before.buckets[i].saturating_sub(below_before);
        for _ in 0..n.saturating_sub(b).min(10_000) {
            h.observe(*bound);
        }
        below_now = now.buckets[i];
        below_before = before.buckets[i];
    }
    let over = now.count.saturating_sub(below_now);
    let over_before = before.count.saturating_sub(below_before);
    let last = bounds.last().copied().unwrap_or(600.0);
    for _ in 0..over.saturating_sub(over_before).min(10_000) {
        h.observe(last * 2.0);
    }
}

/// Every metric `berth run` exports.
pub struct Metrics {
    registry: Mutex<Registry>,
    attempts: Family<AttemptLabels, Counter>,
    attempt_duration: Family<AttemptLabels, Histogram>,
    pending: Family<QueueLabels, Gauge>,
    sli: Histogram,
    reservations: Family<PhaseLabels, Gauge>,
    numa: Family<NumaLabels, Gauge<u64, AtomicU64>>,
    binds_in_flight: Family<StateLabels, Gauge>,
    bind_failures: Family<ClassLabels, Counter>,
    events_dropped: Family<ReasonLabels, Counter>,
    fenced: Counter,
    requests: Family<RequestLabels, Counter>,
    watch_events: Family<KindLabels, Counter>,
    watch_errors: Family<WatchErrorLabels, Counter>,
    unreadable: Family<UnreadableLabels, Counter>,
    drp: Drp,
    preemption_attempts: Counter,
    preemption_victims: Counter,
    preemption_reservations: Family<ResultLabels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric registered and at zero.
    pub fn new() -> Self {
        let metrics = Self {
            registry: Mutex::new(Registry::default()),
            attempts: Family::default(),
            attempt_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 15))
            }),
            pending: Family::default(),
            sli: Histogram::new(exponential_buckets(0.01, 2.0, 20)),
            reservations: Family::default(),
            numa: Family::default(),
            binds_in_flight: Family::default(),
            bind_failures: Family::default(),
            events_dropped: Family::default(),
            fenced: Counter::default(),
            requests: Family::default(),
            watch_events: Family::default(),
            watch_errors: Family::default(),
            unreadable: Family::default(),
            drp: Drp {
                events: Family::<DrpLabels, Counter>::default(),
                latency: drp_histogram(),
                pending: drp_histogram(),
                waiting: Gauge::default(),
                last: Mutex::new(berth_core::drp::Metrics::default()),
            },
            preemption_attempts: Counter::default(),
            preemption_victims: Counter::default(),
            preemption_reservations: Family::default(),
        };
        // Registered in this order (the exposition's order), in three parts.
        let mut r = Registry::default();
        metrics.register_scheduling(&mut r);
        metrics.register_operations(&mut r);
        metrics.register_drp_and_preemption(&mut r);
        *metrics.registry.lock().unwrap_or_else(|p| p.into_inner()) = r;
        metrics
    }

    /// kube-scheduler's scheduling metrics, berth's reservations, NUMA cache, binds, events
    /// and fenced writes.
    fn register_scheduling(&self, r: &mut Registry) {
        r.register(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result.",
            self.attempts.clone(),
        );
        r.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding decision).",
            self.attempt_duration.clone(),
        );
        r.register(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type.",
            self.pending.clone(),
        );
        r.register(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue until its binding is confirmed.",
            self.sli.clone(),
        );
        r.register(
            "berth_reservations",
            "Reservations known to the scheduler, by phase.",
            self.reservations.clone(),
        );
        r.register(
            "berth_numa_cache",
            "NUMA reserve cache figures (dirty nodes by reason, resyncs, fingerprint matches, flushes, generation) and NodeResourceTopology lookups.",
            self.numa.clone(),
        );
        r.register(
            "berth_binds_in_flight",
            "Bindings by state: running (sent to the API server, or waiting for its rate limiter, and not yet answered) and waiting (for a slot under --max-binds-in-flight, or behind another write to the same pod).",
            self.binds_in_flight.clone(),
        );
        r.register(
            "berth_events_dropped",
            "Events not sent: queue_full (the bounded queue to the event writer was full; events are best-effort and never delay scheduling), spam_filter (client-go's per-object spam filter), failed (the API server refused it or could not be reached after retries).",
            self.events_dropped.clone(),
        );
    }

    /// Bind failures, API requests, watches, unreadable objects.
    fn register_operations(&self, r: &mut Registry) {
        r.register(
            "berth_writes_fenced",
            "Writes (binds, conditions, status writes, deletes) not started because this replica's leadership had run out (not renewed within renewDeadline).",
            self.fenced.clone(),
        );
        r.register(
            "berth_bind_failures",
            "Failed bindings, by class (conflict, not_found, transient).",
            self.bind_failures.clone(),
        );
        r.register(
            "berth_api_requests",
            "Writes to the API server, by operation and final HTTP code (0: no answer).",
            self.requests.clone(),
        );
        r.register(
            "berth_watch_events",
            "Watch and list events received, by kind.",
            self.watch_events.clone(),
        );
        r.register(
            "berth_watch_errors",
            "Watch failures (each followed by a re-list after back-off), by kind and HTTP code (0: no answer).",
            self.watch_errors.clone(),
        );
        r.register(
            "berth_unreadable_objects",
            "Watched objects berth could not read or refused (reported with a warning event), by kind and the rule broken (malformed, negative, duplicate, inconsistent, out-of-range).",
            self.unreadable.clone(),
        );
    }

    /// Dynamic Reservation Provisioning and preemption.
    fn register_drp_and_preemption(&self, r: &mut Registry) {
        r.register(
            "berth_drp_reservations",
            "Dynamic Reservation Provisioning: pods that asked for a new Reservation (requested), Reservations created and adopted (created), Reservations that could not be used or handshakes lost with their node or pod (failed), handshakes that timed out (timed_out).",
            self.drp.events.clone(),
        );
        r.register(
            "berth_drp_creation_latency_seconds",
            "From a pod's new-reservation-requirement to the adoption of its Reservation (recorded at the bucket's upper bound).",
            self.drp.latency.clone(),
        );
        r.register(
            "berth_drp_pending_duration_seconds",
            "How long each handshake waited for its Reservation, whatever its end (recorded at the bucket's upper bound).",
            self.drp.pending.clone(),
        );
        r.register(
            "berth_drp_waiting_pods",
            "Pods whose bind waits for their Reservation to be created.",
            self.drp.waiting.clone(),
        );
        r.register(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now.",
            self.preemption_attempts.clone(),
        );
        r.register(
            "berth_preemption_victims",
            "Pods evicted by preemption.",
            self.preemption_victims.clone(),
        );
        r.register(
            "berth_preemption_reservations",
            "Reservations of reservation-backed preemption that ended, by result (completed: the preemptor landed on it; expired: TTL, preemptor deleted or placed elsewhere first).",
            self.preemption_reservations.clone(),
        );
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }

    /// `n` scheduling attempts of `profile` ended with `result` (`scheduled`,
    /// `unschedulable`, `error`), each taking `each`.
    pub fn attempts(&self, profile: &str, result: &'static str, n: u64, each: Duration) {
        if n == 0 {
            return;
        }
        let labels = AttemptLabels {
            result,
            profile: profile.to_string(),
        };
        self.attempts.get_or_create(&labels).inc_by(n);
        let h = self.attempt_duration.get_or_create(&labels);
        for _ in 0..n.min(1000) {
            h.observe(each.as_secs_f64());
        }
    }

    /// Queue lengths.
    pub fn pending(&self, queue: &'static str, n: usize) {
        self.pending
            .get_or_create(&QueueLabels { queue })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A pod's binding was confirmed `d` after it was first seen unscheduled.
    pub fn scheduled_after(&self, d: Duration) {
        self.sli.observe(d.as_secs_f64());
    }

    /// Reservations in `phase`.
    pub fn reservations(&self, phase: &'static str, n: usize) {
        self.reservations
            .get_or_create(&PhaseLabels { phase })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A NUMA figure.
    pub fn numa(&self, counter: &'static str, value: u64) {
        self.numa.get_or_create(&NumaLabels { counter }).set(value);
    }

    /// Binds running and waiting.
    pub fn binds_in_flight(&self, running: usize, waiting: usize) {
        for (state, n) in [("running", running), ("waiting", waiting)] {
            self.binds_in_flight
                .get_or_create(&StateLabels { state })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// An event was not sent, for `reason`.
    pub fn event_dropped(&self, reason: &'static str) {
        self.events_dropped
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// A write was not started: leadership ran out.
    pub fn fenced(&self) {
        self.fenced.inc();
    }

    /// A bind failed.
    pub fn bind_failed(&self, class: &'static str) {
        self.bind_failures
            .get_or_create(&ClassLabels { class })
            .inc();
    }

    /// A write finished with `code` (0: no answer).
    pub fn request(&self, operation: &'static str, code: u16) {
        self.requests
            .get_or_create(&RequestLabels {
                operation,
                code: code.to_string(),
            })
            .inc();
    }

    /// A watch event of `kind` arrived.
    pub fn watch_event(&self, kind: Kind) {
        self.watch_events
            .get_or_create(&KindLabels {
                kind: kind.as_str(),
            })
            .inc();
    }

    /// A watch of `kind` failed with the API server's HTTP `code` (0: no answer, as
    /// when the connection broke). The code tells a refusal (403: the ServiceAccount
    /// lacks list or watch) from a CRD not served (404) or a watch that fell behind
    /// (410, 504), which need different fixes.
    pub fn watch_error(&self, kind: Kind, code: u16) {
        self.watch_errors
            .get_or_create(&WatchErrorLabels {
                kind: kind.as_str(),
                code,
            })
            .inc();
    }

    /// Dynamic Reservation Provisioning: the core's figures now, and the pods waiting.
    pub fn drp(&self, now: &berth_core::drp::Metrics, waiting: usize) {
        let mut last = self.drp.last.lock().unwrap_or_else(|p| p.into_inner());
        for (event, n, before) in [
            ("requested", now.requests, last.requests),
            ("created", now.created, last.created),
            ("failed", now.failures, last.failures),
            ("timed_out", now.timeouts, last.timeouts),
        ] {
            let c = self.drp.events.get_or_create(&DrpLabels { event });
            if n > before {
                c.inc_by(n - before);
            }
        }
        observe_delta(
            &self.drp.latency,
            &last.creation_latency,
            &now.creation_latency,
        );
        observe_delta(
            &self.drp.pending,
            &last.pending_duration,
            &now.pending_duration,
        );
        *last = now.clone();
        self.drp
            .waiting
            .set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }

    /// Preemption since the last call: attempts, victims, and reservations of
    /// reservation-backed preemption completed and expired.
    pub fn preemption(&self, attempts: u64, victims: u64, completed: u64, expired: u64) {
        self.preemption_attempts.inc_by(attempts);
        self.preemption_victims.inc_by(victims);
        for (result, n) in [("completed", completed), ("expired", expired)] {
            if n > 0 {
                self.preemption_reservations
                    .get_or_create(&ResultLabels { result })
                    .inc_by(n);
            }
        }
    }

    /// An object of `kind` could not be read, or was refused for `rule`.
    pub fn unreadable(&self, kind: Kind, rule: berth_api::validate::Rule) {
        self.unreadable
            .get_or_create(&UnreadableLabels {
                kind: kind.as_str(),
                reason: rule.as_str(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_kube_schedulers_names() {
        let m = Metrics::new();
        m.attempts(
            "default-scheduler",
            "scheduled",
            2,
            Duration::from_millis(3),
        );
        m.pending("active", 4);
        m.scheduled_after(Duration::from_millis(20));
        let text = m.encode();
        assert!(text.contains(
            "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"default-scheduler\"} 2"
        ), "{text}");
        assert!(
            text.contains("scheduler_pending_pods{queue=\"active\"} 4"),
            "{text}"
        );
        assert!(text.contains("scheduler_scheduling_attempt_duration_seconds_count{result=\"scheduled\",profile=\"default-scheduler\"} 2"), "{text}");
        assert!(
            text.contains("scheduler_pod_scheduling_sli_duration_seconds_count 1"),
            "{text}"
        );
    }

    #[test]
    fn drp_figures_move_by_what_the_core_added() {
        let m = Metrics::new();
        let mut core = berth_core::drp::Metrics {
            requests: 2,
            created: 1,
            ..Default::default()
        };
        core.creation_latency.observe(700);
        m.drp(&core, 1);
        core.requests = 3;
        core.creation_latency.observe(20_000);
        core.creation_latency.observe(900_000);
        m.drp(&core, 0);
        let text = m.encode();
        for want in [
            "berth_drp_reservations_total{event=\"requested\"} 3",
            "berth_drp_reservations_total{event=\"created\"} 1",
            "berth_drp_reservations_total{event=\"timed_out\"} 0",
            "berth_drp_creation_latency_seconds_count 3",
            "berth_drp_creation_latency_seconds_bucket{le=\"1.0\"} 1",
            "berth_drp_creation_latency_seconds_bucket{le=\"30.0\"} 2",
            "berth_drp_waiting_pods 0",
        ] {
            assert!(text.contains(want), "{want}\n{text}");
        }
    }

    #[test]
    fn preemption_counts_attempts_victims_and_reservations_by_result() {
        let m = Metrics::new();
        m.preemption(3, 2, 1, 0);
        m.preemption(1, 0, 0, 2);
        let text = m.encode();
        for line in [
            "scheduler_preemption_attempts_total 4",
            "berth_preemption_victims_total 2",
            "berth_preemption_reservations_total{result=\"completed\"} 1",
            "berth_preemption_reservations_total{result=\"expired\"} 2",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }
}
