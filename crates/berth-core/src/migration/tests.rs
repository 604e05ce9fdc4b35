//! The migration controller against a small model cluster: unit tests of each path, and a
//! property test with random failures, controller restarts and pods deleted mid-migration.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{ObjectReference, Pod, PodSpec, PodStatus};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use berth_api::migration::{vocabulary as v, PodMigrationJob, PodMigrationJobSpec};
use berth_api::reservation::{
    condition, Reservation, ReservationCondition, ReservationPhase, ReservationStatus,
};
use proptest::prelude::*;

use super::*;
use crate::reservation::status::meta_time;

const START: Time = 1_704_067_200_000;

#[derive(Default, Clone)]
struct World {
    pods: BTreeMap<(String, String), Pod>,
    reservations: BTreeMap<String, Reservation>,
    jobs: BTreeMap<String, Arc<PodMigrationJob>>,
    /// How many pods each workload has had (for names).
    made: u32,
}

impl MigrationView for World {
    fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        self.pods.get(&(namespace.to_string(), name.to_string()))
    }
    fn pods(&self) -> Box<dyn Iterator<Item = &Pod> + '_> {
        Box::new(self.pods.values())
    }
    fn reservation(&self, name: &str) -> Option<&Reservation> {
        self.reservations.get(name)
    }
}

fn pod(name: &str, node: &str, workload: &str, now: Time) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            creation_timestamp: meta_time(now),
            labels: Some([("app".to_string(), workload.to_string())].into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: workload.into(),
                uid: format!("uid-{workload}"),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        }),
    }
}

fn job(name: &str, pod: &str, mode: &str, ttl: Option<&str>, now: Time) -> PodMigrationJob {
    PodMigrationJob {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("job-{name}")),
            creation_timestamp: meta_time(now),
            ..ObjectMeta::default()
        },
        spec: PodMigrationJobSpec {
            mode: mode.into(),
            ttl: ttl.map(berth_api::GoDuration::new),
            pod_ref: Some(ObjectReference {
                namespace: Some("default".into()),
                name: Some(pod.into()),
                ..ObjectReference::default()
            }),
            ..PodMigrationJobSpec::default()
        },
        status: None,
    }
}

impl World {
    fn add_pod(&mut self, name: &str, node: &str, workload: &str) {
        let p = pod(name, node, workload, START);
        self.pods.insert(("default".into(), name.into()), p);
    }

    /// Performs `actions` as the API server would; the Eviction API refuses when `refuse`.
    /// Returns the pods evicted.
    fn perform(&mut self, actions: Vec<Action>, refuse: bool, now: Time) -> Vec<String> {
        let mut evicted = Vec::new();
        for a in actions {
            match a {
                Action::CreateReservation(r) => {
                    let name = r.metadata.name.clone().unwrap_or_default();
                    self.reservations.entry(name).or_insert(*r);
                }
                Action::DeleteReservation(name) => {
                    self.reservations.remove(&name);
                }
                Action::UpdateJob(j) => {
                    let name = j.metadata.name.clone().unwrap_or_default();
                    self.jobs.insert(name, Arc::new(*j));
                }
                Action::Evict {
                    job,
                    namespace,
                    name,
                } => {
                    let key = (namespace, name.clone());
                    let Some(j) = self.jobs.get(&job).cloned() else {
                        continue;
                    };
                    let node = self
                        .pods
                        .get(&key)
                        .and_then(|p| p.spec.as_ref()?.node_name.clone())
                        .unwrap_or_default();
                    let outcome = if refuse {
                        Err("429".to_string())
                    } else {
                        self.pods.remove(&key);
                        evicted.push(name);
                        Ok(())
                    };
                    let next = after_eviction(&j, &node, outcome, now);
                    self.jobs.insert(job, Arc::new(next));
                }
            }
        }
        evicted
    }

    fn pass(&mut self, args: &MigrationArgs, now: Time) -> Vec<Action> {
        let jobs: Vec<_> = self.jobs.values().cloned().collect();
        reconcile(&jobs, self, now, args)
    }

    /// The scheduler places a pending reservation: on `node`, or not at all.
    fn place(&mut self, name: &str, node: Option<&str>) {
        let Some(r) = self.reservations.get_mut(name) else {
            return;
        };
        if r.phase() != ReservationPhase::Pending {
            return;
        }
        let status = r.status.get_or_insert_with(ReservationStatus::default);
        match node {
            Some(n) => {
                status.phase = Some(ReservationPhase::Available);
                status.node_name = Some(n.into());
            }
            None => {
                status.conditions = vec![ReservationCondition {
                    type_: condition::SCHEDULED.into(),
                    status: "False".into(),
                    reason: "Unschedulable".into(),
                    message: "0/3 nodes are available: 3 Insufficient cpu.".into(),
                    ..ReservationCondition::default()
                }]
            }
        }
    }

    /// The workload replaces a missing pod: into the available reservation owned by it
    /// when `into_reservation`, else onto `n9`.
    fn replace(&mut self, workload: &str, into_reservation: bool, now: Time) {
        self.made += 1;
        let name = format!("{workload}-r{}", self.made);
        let mut p = pod(&name, "n9", workload, now);
        if into_reservation {
            let free = self.reservations.iter_mut().find(|(_, r)| {
                r.phase() == ReservationPhase::Available
                    && r.spec.owners.iter().any(|o| {
                        o.controller.as_ref().and_then(|c| c.uid.as_deref())
                            == Some(&format!("uid-{workload}"))
                    })
            });
            if let Some((rname, r)) = free {
                let status = r.status.get_or_insert_with(ReservationStatus::default);
                p.spec.as_mut().unwrap().node_name = status.node_name.clone();
                status.phase = Some(ReservationPhase::Succeeded);
                status.current_owners = vec![ObjectReference {
                    namespace: Some("default".into()),
                    name: Some(name.clone()),
                    uid: p.metadata.uid.clone(),
                    ..ObjectReference::default()
                }];
                p.metadata.annotations = Some(
                    [(
                        berth_api::annotations::ANNOTATION_RESERVATION_ALLOCATED.to_string(),
                        format!("{{\"name\":\"{rname}\",\"uid\":\"\"}}"),
                    )]
                    .into(),
                );
            }
        }
        self.pods.insert(("default".into(), name), p);
    }

    fn job(&self, name: &str) -> &PodMigrationJob {
        &self.jobs[name]
    }
}

fn settle(w: &mut World, args: &MigrationArgs, now: Time) {
    for _ in 0..20 {
        let actions = w.pass(args, now);
        if actions.is_empty() {
            return;
        }
        w.perform(actions, false, now);
    }
    panic!("did not settle");
}

#[test]
fn reservation_first_reserves_evicts_and_succeeds_in_the_reservation() {
    let mut w = World::default();
    w.add_pod("web-1", "n1", "web");
    w.jobs
        .insert("j1".into(), Arc::new(job("j1", "web-1", "", None, START)));
    let args = MigrationArgs::default();
    settle(&mut w, &args, START);
    assert_eq!(w.job("j1").phase(), v::RUNNING);
    let r = &w.reservations["job-j1"];
    assert_eq!(r.spec.allocate_once, Some(true));
    let owner = r.spec.owners[0]
        .controller
        .as_ref()
        .expect("controller owner");
    assert_eq!(owner.uid.as_deref(), Some("uid-web"));
    let labels = r.metadata.labels.as_ref().expect("labels");
    assert_eq!(labels["app.kubernetes.io/created-by"], "koord-descheduler");
    assert_eq!(
        labels["scheduling.koordinator.sh/reservation-order"],
        START.to_string()
    );
    let affinity = r
        .spec
        .template
        .as_ref()
        .and_then(|t| t.pod.spec.as_ref()?.affinity.clone());
    let terms = affinity
        .and_then(|a| {
            a.node_affinity?
                .required_during_scheduling_ignored_during_execution
        })
        .expect("required node affinity")
        .node_selector_terms;
    let field = &terms[0].match_fields.as_ref().expect("match fields")[0];
    assert_eq!(
        (field.key.as_str(), field.operator.as_str()),
        ("metadata.name", "NotIn")
    );
    assert_eq!(field.values.as_deref(), Some(&["n1".to_string()][..]));
    // Nothing is evicted while the reservation is pending.
    assert!(w.pods.contains_key(&("default".into(), "web-1".into())));

    w.place("job-j1", Some("n2"));
    settle(&mut w, &args, START);
    assert!(
        !w.pods.contains_key(&("default".into(), "web-1".into())),
        "evicted"
    );
    assert!(evicted(w.job("j1")));
    w.replace("web", true, START);
    settle(&mut w, &args, START);
    let j = w.job("j1");
    assert_eq!(j.phase(), v::SUCCEEDED);
    let status = j.status.as_ref().expect("status");
    assert_eq!(status.node_name, "n2");
    assert_eq!(
        status.message,
        "Bind Pod \"default/web-r1\" in Reservation \"job-j1\""
    );
    assert_eq!(
        status.pod_ref.as_ref().and_then(|p| p.name.as_deref()),
        Some("web-r1")
    );
}

#[test]
fn an_unplaceable_reservation_fails_the_job_evicts_nothing_and_is_deleted() {
    let mut w = World::default();
    w.add_pod("web-1", "n1", "web");
    w.jobs
        .insert("j1".into(), Arc::new(job("j1", "web-1", "", None, START)));
    let args = MigrationArgs::default();
    settle(&mut w, &args, START);
    w.place("job-j1", None);
    settle(&mut w, &args, START);
    let j = w.job("j1");
    assert_eq!(j.phase(), v::FAILED);
    let status = j.status.as_ref().expect("status");
    assert_eq!(status.reason, v::UNSCHEDULABLE);
    assert_eq!(
        status.message,
        "0/3 nodes are available: 3 Insufficient cpu."
    );
    assert!(w.pods.contains_key(&("default".into(), "web-1".into())));
    assert!(w.reservations.is_empty());
}

#[test]
fn a_refused_eviction_waits_and_is_retried() {
    let mut w = World::default();
    w.add_pod("web-1", "n1", "web");
    w.jobs
        .insert("j1".into(), Arc::new(job("j1", "web-1", "", None, START)));
    let args = MigrationArgs::default();
    settle(&mut w, &args, START);
    w.place("job-j1", Some("n2"));
    for _ in 0..3 {
        let a = w.pass(&args, START);
        w.perform(a, true, START);
    }
    let c = w
        .job("j1")
        .condition(v::EVICTION)
        .expect("condition")
        .clone();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", v::FAILED_EVICT)
    );
    assert!(w.pods.contains_key(&("default".into(), "web-1".into())));
    let why = waiting_for(w.job("j1"), &w).expect("waiting");
    assert!(why.contains("eviction to be allowed"), "{why}");
    settle(&mut w, &args, START);
    assert!(evicted(w.job("j1")));
}

#[test]
fn jobs_of_one_workload_run_one_after_the_other_with_max_unavailable_1() {
    let mut w = World::default();
    w.add_pod("web-1", "n1", "web");
    w.add_pod("web-2", "n1", "web");
    w.jobs
        .insert("j1".into(), Arc::new(job("j1", "web-1", "", None, START)));
    w.jobs.insert(
        "j2".into(),
        Arc::new(job("j2", "web-2", "", None, START + 1000)),
    );
    let args = MigrationArgs {
        max_unavailable_per_workload: Some(1),
        ..MigrationArgs::default()
    };
    settle(&mut w, &args, START);
    assert_eq!(w.job("j1").phase(), v::RUNNING);
    assert_eq!(w.job("j2").phase(), v::PENDING);
    assert!(waiting_for(w.job("j2"), &w)
        .expect("waits")
        .contains("maxUnavailablePerWorkload"));
    assert!(!w.reservations.contains_key("job-j2"));
    w.place("job-j1", Some("n2"));
    settle(&mut w, &args, START);
    w.replace("web", true, START);
    settle(&mut w, &args, START);
    assert_eq!(w.job("j1").phase(), v::SUCCEEDED);
    assert_eq!(w.job("j2").phase(), v::RUNNING);
    assert!(w.reservations.contains_key("job-j2"));
}

#[test]
fn evict_directly_succeeds_once_the_pod_is_evicted() {
    let mut w = World::default();
    w.add_pod("web-1", "n1", "web");
    w.jobs.insert(
        "j1".into(),
        Arc::new(job("j1", "web-1", "EvictDirectly", None, START)),
    );
    settle(&mut w, &MigrationArgs::default(), START);
    assert_eq!(w.job("j1").phase(), v::SUCCEEDED);
    assert!(w.reservations.is_empty());
    assert!(w.pods.is_empty());
}

#[test]
fn a_timed_out_job_fails_and_deletes_its_reservation() {
    let mut w = World::default();
    w.add_pod("web-1", "n1", "web");
    w.jobs.insert(
        "j1".into(),
        Arc::new(job("j1", "web-1", "", Some("1m"), START)),
    );
    let args = MigrationArgs::default();
    settle(&mut w, &args, START);
    assert!(w.reservations.contains_key("job-j1"));
    settle(&mut w, &args, START + 60_000);
    let s = w.job("j1").status.clone().expect("status");
    assert_eq!(
        (s.phase.as_str(), s.reason.as_str()),
        (v::FAILED, v::TIMEOUT)
    );
    assert_eq!(s.message, "Abort job caused by timeout");
    assert!(w.reservations.is_empty());
}

#[test]
fn a_reservation_on_the_pods_own_node_or_a_missing_pod_fails_the_job() {
    let mut w = World::default();
    w.add_pod("web-1", "n1", "web");
    w.jobs
        .insert("j1".into(), Arc::new(job("j1", "web-1", "", None, START)));
    w.jobs
        .insert("j2".into(), Arc::new(job("j2", "nope", "", None, START)));
    let args = MigrationArgs::default();
    settle(&mut w, &args, START);
    w.place("job-j1", Some("n1"));
    settle(&mut w, &args, START);
    let s = w.job("j1").status.clone().expect("status");
    assert_eq!(s.reason, v::FORBIDDEN_MIGRATE_POD);
    assert!(w.reservations.is_empty());
    let s = w.job("j2").status.clone().expect("status");
    assert_eq!(s.reason, v::MISSING_POD);
    assert_eq!(
        s.message,
        "Abort job caused by missing Pod \"default/nope\""
    );
}

#[test]
fn a_replacement_bound_outside_the_reservation_fails_the_job_and_frees_it() {
    let mut w = World::default();
    w.add_pod("web-1", "n1", "web");
    w.add_pod("web-2", "n1", "web");
    w.jobs
        .insert("j1".into(), Arc::new(job("j1", "web-1", "", None, START)));
    let args = MigrationArgs::default();
    settle(&mut w, &args, START);
    w.place("job-j1", Some("n2"));
    settle(&mut w, &args, START);
    assert!(evicted(w.job("j1")));
    // The sibling that was there before is not a replacement; the job waits.
    assert_eq!(w.job("j1").phase(), v::RUNNING);
    w.replace("web", false, START);
    settle(&mut w, &args, START);
    let s = w.job("j1").status.clone().expect("status");
    assert_eq!(
        (s.phase.as_str(), s.reason.as_str()),
        (v::FAILED, v::REPLACEMENT_ELSEWHERE)
    );
    assert!(s.message.contains("\"default/web-r1\""), "{}", s.message);
    assert!(w.reservations.is_empty());
}

/// One thing that happens between two passes of the controller.
#[derive(Debug, Clone)]
enum Event {
    /// A controller pass, whose actions stop after `keep` (a restart mid-way), the Eviction
    /// API refusing when `refuse`.
    Pass { keep: usize, refuse: bool },
    /// The scheduler places the reservation of job `j` on node `n` (0: unschedulable;
    /// 1: the pod's own node).
    Place { j: usize, n: usize },
    /// A workload replaces a pod, in its reservation or not.
    Replace {
        workload: usize,
        into_reservation: bool,
    },
    /// Someone deletes pod `p` of workload `workload`.
    DeletePod { workload: usize, p: usize },
    /// Time passes.
    Advance { secs: i64 },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0usize..8, any::<bool>()).prop_map(|(keep, refuse)| Event::Pass { keep, refuse }),
        2 => (0usize..4, 0usize..4).prop_map(|(j, n)| Event::Place { j, n }),
        2 => (0usize..2, any::<bool>())
            .prop_map(|(workload, into_reservation)| Event::Replace { workload, into_reservation }),
        1 => (0usize..2, 0usize..3).prop_map(|(workload, p)| Event::DeletePod { workload, p }),
        1 => (1i64..120).prop_map(|secs| Event::Advance { secs }),
    ]
}

/// The invariants after every event.
fn check(w: &World, args: &MigrationArgs) -> Result<(), TestCaseError> {
    let mut per_workload: BTreeMap<String, usize> = BTreeMap::new();
    for j in w.jobs.values() {
        let target = j.spec.pod_ref.as_ref().and_then(|r| {
            let p = w.pod("default", r.name.as_deref()?)?;
            (r.uid.is_none() || p.metadata.uid == r.uid).then_some(p)
        });
        // A job counts as migrating while its pod is there to evict (Koordinator's count).
        if j.phase() == v::RUNNING && target.is_some() {
            let workload = j
                .spec
                .pod_ref
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_default();
            let workload = workload.split('-').next().unwrap_or("").to_string();
            *per_workload.entry(workload).or_default() += 1;
        }
        if j.is_finished() {
            let own = template::reservation_name_for(j);
            if let Some(r) = w.reservations.get(&own) {
                prop_assert!(
                    r.phase() == ReservationPhase::Succeeded,
                    "job {:?} ended {} leaving reservation {own} {}",
                    j.metadata.name,
                    j.phase(),
                    r.phase()
                );
            }
        }
    }
    let max = args.max_migrating_per_workload.unwrap_or(u32::MAX) as usize;
    for (workload, n) in per_workload {
        prop_assert!(n <= max, "{n} jobs of {workload} running (limit {max})");
    }
    Ok(())
}

/// Checks, for every Evict of a ReservationFirst job, that its reservation is Available.
fn check_evictions(w: &World, actions: &[Action]) -> Result<(), TestCaseError> {
    for a in actions {
        if let Action::Evict { job, .. } = a {
            let j = w.job(job);
            if j.spec.evicts_directly() {
                continue;
            }
            let r = reservation_name(j).and_then(|n| w.reservations.get(n));
            prop_assert!(
                r.is_some_and(|r| r.phase() == ReservationPhase::Available
                    && r.status
                        .as_ref()
                        .and_then(|s| s.node_name.as_ref())
                        .is_some()),
                "job {job} evicts before its reservation is Available"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn migrations_never_evict_early_never_exceed_limits_never_leak_reservations(
        events in prop::collection::vec(event(), 1..60),
        modes in prop::collection::vec(any::<bool>(), 4),
        ttl in prop::option::of(30i64..600),
    ) {
        let args = MigrationArgs {
            max_migrating_per_workload: Some(1),
            ..MigrationArgs::default()
        };
        let workloads = ["web", "db"];
        let mut w = World::default();
        for (i, name) in workloads.iter().enumerate() {
            for p in 0..3 {
                w.add_pod(&format!("{name}-{p}"), &format!("n{}", 1 + (p + i) % 3), name);
            }
        }
        for (i, direct) in modes.iter().enumerate() {
            let mode = if *direct && i == 3 { "EvictDirectly" } else { "" };
            let ttl = ttl.map(|s| format!("{s}s"));
            let target = format!("{}-{}", workloads[i % 2], i / 2);
            let j = job(&format!("j{i}"), &target, mode, ttl.as_deref(), START);
            w.jobs.insert(format!("j{i}"), Arc::new(j));
        }
        let mut now = START;
        for e in events {
            match e {
                Event::Pass { keep, refuse } => {
                    let mut actions = w.pass(&args, now);
                    check_evictions(&w, &actions)?;
                    actions.truncate(keep);
                    w.perform(actions, refuse, now);
                }
                Event::Place { j, n } => {
                    let name = format!("job-j{j}");
                    let node = match n {
                        0 => None,
                        1 => {
                            let target = w.job(&format!("j{j}")).spec.pod_ref.clone();
                            let p = target.and_then(|r| w.pod("default", r.name.as_deref()?).cloned());
                            p.and_then(|p| p.spec?.node_name)
                        }
                        _ => Some(format!("n{}", 5 + n)),
                    };
                    w.place(&name, node.as_deref());
                }
                Event::Replace { workload, into_reservation } => {
                    w.replace(workloads[workload], into_reservation, now);
                }
                Event::DeletePod { workload, p } => {
                    w.pods.remove(&("default".to_string(), format!("{}-{p}", workloads[workload])));
                }
                Event::Advance { secs } => now += secs * 1000,
            }
            check(&w, &args)?;
        }
    }
}
