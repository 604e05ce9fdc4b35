//! ImageLocality (kube-scheduler 1.35's): favours nodes that already hold the pod's
//! container images (`status.images`), by size, scaled by how far each image has spread so
//! that pods are not all drawn to the first node that pulled an image ("node heating").
//!
//! Per container (init ones included, a repeated image counted each time), an image the node
//! lists scores `size × nodes holding it / all nodes`; the sum, clamped between 23 MiB and
//! 1000 MiB per container, maps linearly onto 0..=100. There is no normalisation step.

use crate::cache::Cluster;
use crate::framework::cycle_state::CycleState;
use crate::framework::plugin::{Plugin, Points, MAX_NODE_SCORE};
use crate::framework::status::Status;
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;

const MB: i64 = 1024 * 1024;
/// Below this sum a node scores 0 (`minThreshold`).
pub const MIN_THRESHOLD: i64 = 23 * MB;
/// Per container, above this sum a node scores 100 (`maxContainerThreshold`).
pub const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

use crate::cache::images::node_image_names;
pub use crate::cache::images::ImageCounts;

/// The name a container runtime reports for `image` (`normalizedImageName`): `:latest`
/// added when it names no tag.
pub fn normalized_image_name(image: &str) -> String {
    let colon = image.rfind(':');
    let slash = image.rfind('/');
    if colon.map(|c| c as isize).unwrap_or(-1) <= slash.map(|s| s as isize).unwrap_or(-1) {
        format!("{image}:latest")
    } else {
        image.to_string()
    }
}

/// What PreScore worked out: per container of the pod, its image's name and how many
/// nodes hold it (only those some node holds), and the count of containers.
#[derive(Debug, Clone, Default)]
pub struct State {
    images: Vec<(String, u32)>,
    containers: usize,
    total_nodes: usize,
}

/// The ImageLocality plugin.
#[derive(Debug)]
pub struct ImageLocality;

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        super::names::IMAGE_LOCALITY
    }

    fn points(&self) -> Points {
        Points::PRE_SCORE | Points::SCORE
    }

    /// Resolves the pod's images once; a pod none of whose images any node holds scores 0
    /// everywhere, so Score is skipped (kube-scheduler scores it 0 on every node).
    fn pre_score(
        &self,
        cx: &Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[NodeIdx],
    ) -> Status {
        let spec = pod.spec();
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers);
        let mut st = State {
            images: Vec::new(),
            containers: spec.containers.len() + spec.init_containers.as_ref().map_or(0, Vec::len),
            total_nodes: cx.cache.node_count(),
        };
        for c in containers {
            let name = normalized_image_name(c.image.as_deref().unwrap_or(""));
            let n = cx.cache.images.nodes_with(&name);
            if n > 0 {
                st.images.push((name, n));
            }
        }
        if st.images.is_empty() {
            state.image_locality = None;
            return Status::skip();
        }
        state.image_locality = Some(Box::new(st));
        Status::success()
    }

    fn score(&self, _cx: &Cluster, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(st) = state.image_locality.as_deref() else {
            return 0;
        };
        let mut sum: i64 = 0;
        for (name, holders) in &st.images {
            if let Some((_, size)) = node_image_names(&node.node).find(|(n, _)| n == name) {
                sum = sum.saturating_add(scaled_image_score(size, *holders, st.total_nodes));
            }
        }
        priority(sum, st.containers)
    }
}

/// An image's size scaled by its spread (`scaledImageScore`), in kube's float64 arithmetic.
fn scaled_image_score(size: i64, holders: u32, total_nodes: usize) -> i64 {
    let spread = f64::from(holders) / total_nodes.max(1) as f64;
    (size as f64 * spread) as i64
}

/// The node's score from the summed image scores (`calculatePriority`).
fn priority(sum: i64, containers: usize) -> i64 {
    let max = MAX_CONTAINER_THRESHOLD.saturating_mul(containers as i64);
    if max <= MIN_THRESHOLD {
        return 0;
    }
    let sum = sum.clamp(MIN_THRESHOLD, max);
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max - MIN_THRESHOLD)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};
    use berth_api::k8s_openapi::api::core::v1::Node;
    use serde_json::json;
    use std::sync::Arc;

    fn with_images(name: &str, images: serde_json::Value) -> Arc<Node> {
        let mut n = (*node(name).build()).clone();
        n.status.get_or_insert_with(Default::default).images =
            Some(serde_json::from_value(images).unwrap());
        Arc::new(n)
    }

    #[test]
    fn names_without_a_tag_get_latest() {
        assert_eq!(normalized_image_name("nginx"), "nginx:latest");
        assert_eq!(normalized_image_name("nginx:1.25"), "nginx:1.25");
        assert_eq!(
            normalized_image_name("registry:5000/team/app"),
            "registry:5000/team/app:latest"
        );
        assert_eq!(
            normalized_image_name("registry:5000/team/app:v2"),
            "registry:5000/team/app:v2"
        );
        assert_eq!(normalized_image_name(""), ":latest");
    }

    /// Scores of a pod with `images` (init containers first) on `nodes`.
    fn scores(nodes: &[(&str, serde_json::Value)], init: &[&str], images: &[&str]) -> Vec<i64> {
        let mut cx = Cluster::default();
        for (name, imgs) in nodes {
            cx.apply_node(with_images(name, imgs.clone())).unwrap();
        }
        let c = |i: &&str| json!({"name": "c", "image": i});
        let p = pod("p")
            .spec(
                "containers",
                json!(images.iter().map(c).collect::<Vec<_>>()),
            )
            .spec(
                "initContainers",
                json!(init.iter().map(c).collect::<Vec<_>>()),
            )
            .build_info();
        let mut st = CycleState::default();
        let order: Vec<NodeIdx> = cx.cache.node_order().to_vec();
        if ImageLocality.pre_score(&cx, &mut st, &p, &order).is_skip() {
            return vec![0; order.len()];
        }
        order
            .iter()
            .map(|i| ImageLocality.score(&cx, &st, &p, cx.cache.node(*i).unwrap()))
            .collect()
    }

    /// kube-scheduler's own cases (`TestImageLocalityPriority`), with its arithmetic.
    #[test]
    fn scores_as_upstream() {
        let n403002000 = json!([
            {"names": ["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], "sizeBytes": 40 * MB},
            {"names": ["gcr.io/300:latest", "gcr.io/300:v1"], "sizeBytes": 300 * MB},
            {"names": ["gcr.io/2000:latest"], "sizeBytes": 2000 * MB},
        ]);
        let n25010 = json!([
            {"names": ["gcr.io/250:latest"], "sizeBytes": 250 * MB},
            {"names": ["gcr.io/10:latest", "gcr.io/10:v1"], "sizeBytes": 10 * MB},
        ]);
        let two = [("node1", n403002000.clone()), ("node2", n25010.clone())];
        // 0 (40M/2 < 23M); 100 * (250M/2 - 23M) / (1000M * 2 - 23M) = 5.
        assert_eq!(scores(&two, &[], &["gcr.io/40", "gcr.io/250"]), vec![0, 5]);
        // 100 * ((40M + 300M)/2 - 23M) / (1000M * 2 - 23M) = 7.
        assert_eq!(scores(&two, &[], &["gcr.io/40", "gcr.io/300"]), vec![7, 0]);
        // Init containers count too: 100 * (300M/2 - 23M) / (1000M * 2 - 23M) = 6.
        assert_eq!(scores(&two, &["gcr.io/300"], &["gcr.io/30"]), vec![6, 0]);
        let n60040900 = json!([
            {"names": ["gcr.io/600:latest"], "sizeBytes": 600 * MB},
            {"names": ["gcr.io/40:latest"], "sizeBytes": 40 * MB},
            {"names": ["gcr.io/900:latest"], "sizeBytes": 900 * MB},
        ]);
        let n300600900 = json!([
            {"names": ["gcr.io/300:latest"], "sizeBytes": 300 * MB},
            {"names": ["gcr.io/600:latest"], "sizeBytes": 600 * MB},
            {"names": ["gcr.io/900:latest"], "sizeBytes": 900 * MB},
        ]);
        let three = [
            ("node1", n60040900),
            ("node2", n300600900),
            ("node3", json!([])),
        ];
        // 100 * (600M * 2/3 + 900M * 2/3 - 23M) / (1000M * 3 - 23M) = 32, and
        // 100 * (300M * 1/3 + 600M * 2/3 + 900M * 2/3 - 23M) / (1000M * 3 - 23M) = 36.
        assert_eq!(
            scores(&three, &[], &["gcr.io/300", "gcr.io/600", "gcr.io/900"]),
            vec![32, 36, 0]
        );
        // The sum is capped per container: 2000M/2 of a 1000M maximum for one container.
        assert_eq!(scores(&two, &[], &["gcr.io/2000"]), vec![100, 0]);
        // No node holds it: skipped, every node 0.
        assert_eq!(scores(&two, &[], &["gcr.io/none"]), vec![0, 0]);
    }

    #[test]
    fn counts_follow_nodes_coming_and_going() {
        let mut cx = Cluster::default();
        let imgs =
            json!([{"names": ["a:1", "a:1"], "sizeBytes": 1}, {"names": ["a:1"], "sizeBytes": 1}]);
        cx.apply_node(with_images("n1", imgs.clone())).unwrap();
        cx.apply_node(with_images("n2", imgs)).unwrap();
        assert_eq!(cx.cache.images.nodes_with("a:1"), 2);
        // An update replaces the node's images.
        cx.apply_node(with_images(
            "n2",
            json!([{"names": ["b:1"], "sizeBytes": 1}]),
        ))
        .unwrap();
        assert_eq!(cx.cache.images.nodes_with("a:1"), 1);
        assert_eq!(cx.cache.images.nodes_with("b:1"), 1);
        cx.cache.delete_node("n1");
        assert_eq!(cx.cache.images.nodes_with("a:1"), 0);
    }
}
