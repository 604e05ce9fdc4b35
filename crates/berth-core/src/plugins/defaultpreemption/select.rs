//! Which pods matter more, and which candidate node preemption picks.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::model::node::NodeIdx;
use crate::model::pod::{time_of, PodInfo};
use crate::time::Time;

/// A node where evicting `victims` lets the pod fit.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    /// The node.
    pub node: NodeIdx,
    /// Pods to evict, most important first.
    pub victims: Vec<Arc<PodInfo>>,
    /// How many victims violate a PodDisruptionBudget.
    pub pdb_violations: i64,
}

/// When the pod started: `status.startTime`, else its creation (kube-scheduler's
/// `GetPodStartTime` falls back to "now"; a pod the kubelet has not started yet is as young
/// as it gets, and its creation is the closest stable stand-in).
pub(crate) fn start_time(p: &PodInfo) -> Time {
    p.pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or(p.created, |t| time_of(&t.0))
}

/// kube-scheduler's `MoreImportantPod` as an ordering (more important first): higher
/// priority, then the one that started earlier. Ties fall back to the key so the order is
/// the same whatever order the node lists its pods in.
pub(crate) fn more_important_first(a: &PodInfo, b: &PodInfo) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| start_time(a).cmp(&start_time(b)))
        .then_with(|| a.key.cmp(&b.key))
}

/// kube-scheduler's `pickOneNodeForPreemption`, applying its criteria in turn until one
/// node is left:
/// 1. fewest PodDisruptionBudget violations;
/// 2. lowest highest-priority victim;
/// 3. smallest sum of victim priorities (each shifted by 2^31 so negatives count);
/// 4. fewest victims;
/// 5. latest start of the highest-priority victims (evicting younger pods loses less work);
/// 6. the first candidate.
pub(crate) fn pick_one(candidates: &[Candidate]) -> Option<usize> {
    let mut left: Vec<usize> = (0..candidates.len()).collect();
    let scores: [fn(&Candidate) -> i64; 5] = [
        |c| -c.pdb_violations,
        |c| -c.victims.first().map_or(0, |p| i64::from(p.priority)),
        |c| {
            -c.victims
                .iter()
                .map(|p| i64::from(p.priority) + (1i64 << 31))
                .sum::<i64>()
        },
        |c| -(c.victims.len() as i64),
        |c| earliest_top_priority_start(&c.victims).unwrap_or(i64::MIN),
    ];
    for score in scores {
        if left.len() <= 1 {
            break;
        }
        let best = left.iter().map(|&i| score(&candidates[i])).max()?;
        left.retain(|&i| score(&candidates[i]) == best);
    }
    left.first().copied()
}

/// kube-scheduler's `GetEarliestPodStartTime`: the earliest start among the victims of the
/// highest priority.
fn earliest_top_priority_start(victims: &[Arc<PodInfo>]) -> Option<Time> {
    let top = victims.iter().map(|p| p.priority).max()?;
    victims
        .iter()
        .filter(|p| p.priority == top)
        .map(|p| start_time(p))
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;
    use serde_json::json;

    fn victim(name: &str, priority: i32, start_secs: i64) -> Arc<PodInfo> {
        let mut v = pod(name).priority(priority).json().clone();
        v["status"]["startTime"] = json!(crate::time::rfc3339(start_secs * 1000));
        let p = Arc::new(serde_json::from_value(v).unwrap());
        Arc::new(PodInfo::new(p, &mut Default::default()).unwrap())
    }

    fn cand(node: u32, pdb: i64, victims: &[(i32, i64)]) -> Candidate {
        let mut victims: Vec<_> = victims
            .iter()
            .enumerate()
            .map(|(i, &(p, t))| victim(&format!("v{node}-{i}"), p, t))
            .collect();
        victims.sort_by(|a, b| more_important_first(a, b));
        Candidate {
            node: NodeIdx(node),
            victims,
            pdb_violations: pdb,
        }
    }

    #[test]
    fn selection_criteria_apply_in_kube_schedulers_order() {
        struct Case {
            name: &'static str,
            candidates: Vec<Candidate>,
            want: u32,
        }
        let cases = [
            Case {
                name: "fewest PDB violations beats lower priorities",
                candidates: vec![cand(0, 1, &[(0, 0)]), cand(1, 0, &[(100, 0)])],
                want: 1,
            },
            Case {
                name: "lowest highest priority",
                candidates: vec![
                    cand(0, 0, &[(100, 0), (0, 0)]),
                    cand(1, 0, &[(50, 0), (50, 0), (50, 0)]),
                ],
                want: 1,
            },
            Case {
                name: "smallest sum of priorities",
                candidates: vec![
                    cand(0, 0, &[(100, 0), (50, 0)]),
                    cand(1, 0, &[(100, 0), (10, 0)]),
                ],
                want: 1,
            },
            Case {
                name: "negative priorities do not make more victims look cheaper",
                candidates: vec![
                    cand(0, 0, &[(-100, 0), (-100, 0)]),
                    cand(1, 0, &[(-100, 0)]),
                ],
                want: 1,
            },
            Case {
                name: "fewest victims",
                candidates: vec![
                    cand(0, 0, &[(10, 0), (0, 0), (0, 0)]),
                    cand(1, 0, &[(10, 0), (0, 0)]),
                ],
                want: 1,
            },
            Case {
                name: "latest start of the highest priority victims",
                candidates: vec![
                    cand(0, 0, &[(10, 5), (0, 9)]),
                    cand(1, 0, &[(10, 7), (0, 1)]),
                    cand(2, 0, &[(10, 6), (0, 1)]),
                ],
                want: 1,
            },
            Case {
                name: "then the first candidate",
                candidates: vec![cand(3, 0, &[(10, 5)]), cand(2, 0, &[(10, 5)])],
                want: 3,
            },
        ];
        for c in cases {
            let got = pick_one(&c.candidates).map(|i| c.candidates[i].node.0);
            assert_eq!(got, Some(c.want), "{}", c.name);
        }
        assert_eq!(pick_one(&[]), None);
    }

    #[test]
    fn more_important_means_higher_priority_then_earlier_start() {
        let a = victim("a", 10, 5);
        let b = victim("b", 10, 1);
        let c = victim("c", 20, 9);
        let mut v = [a, b, c];
        v.sort_by(|x, y| more_important_first(x, y));
        let names: Vec<&str> = v.iter().map(|p| &*p.key.name).collect();
        assert_eq!(names, ["c", "b", "a"]);
    }
}
