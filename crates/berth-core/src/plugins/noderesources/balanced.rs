//! NodeResourcesBalancedAllocation: prefer nodes where the pod leaves resource usage
//! fractions close to each other.

use crate::cache::Cluster;
use crate::framework::config::ConfigError;
use crate::framework::{CycleState, Plugin, Points, MAX_NODE_SCORE};
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::plugins::args::decode;
use crate::resources::ResourceId;

use super::args::{validate_resources, BalancedAllocationArgs};

/// The NodeResourcesBalancedAllocation plugin.
#[derive(Debug)]
pub struct BalancedAllocation {
    resources: Vec<String>,
}

impl BalancedAllocation {
    /// Builds the plugin from `NodeResourcesBalancedAllocationArgs`.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        let args: BalancedAllocationArgs = decode(args)?;
        validate_resources(&args.resources, "resources")?;
        Ok(Self {
            resources: args.resources.into_iter().map(|r| r.name).collect(),
        })
    }
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        super::super::names::NODE_RESOURCES_BALANCED_ALLOCATION
    }

    fn points(&self) -> Points {
        Points::PRE_SCORE | Points::SCORE
    }

    fn pre_score(
        &self,
        _cx: &Cluster,
        _s: &mut CycleState,
        pod: &PodInfo,
        _n: &[crate::model::node::NodeIdx],
    ) -> crate::framework::Status {
        // A pod requesting nothing leaves the balance as it is: kube-scheduler skips it.
        if pod.requests.is_zero() {
            crate::framework::Status::skip()
        } else {
            crate::framework::Status::success()
        }
    }

    fn score(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        // std-dev of requested/allocatable fractions; score = (1 - std) * 100.
        let mut fractions = [0f64; 8];
        let mut n = 0usize;
        let restored = state
            .reservation
            .as_ref()
            .and_then(|r| r.restored(pod, node.idx));
        for name in &self.resources {
            let Some(id) = cx.names.get(name) else {
                continue;
            };
            let alloc = node.allocatable[id];
            if alloc == 0 || n == fractions.len() {
                continue;
            }
            let (used, want) = if id == ResourceId::CPU || id == ResourceId::MEMORY {
                (node.non_zero_requested[id], pod.non_zero[id])
            } else {
                (node.requested[id], pod.requests[id])
            };
            let mut used = used + node.reserved[id] + want;
            if let Some(back) = restored {
                used = (used - back[id]).max(0);
            }
            fractions[n] = (used as f64 / alloc as f64).min(1.0);
            n += 1;
        }
        if n == 0 {
            return 0;
        }
        let f = &fractions[..n];
        let std = if n == 2 {
            ((f[0] - f[1]) / 2.0).abs()
        } else {
            let mean = f.iter().sum::<f64>() / n as f64;
            (f.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64).sqrt()
        };
        ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
    }
}
