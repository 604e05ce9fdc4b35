//! How many nodes list each container image: ImageLocality's spread, kept by the node
//! cache as nodes come and go.

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::Node;

use crate::collections::HashMap;

/// How many nodes list each image name (kube-scheduler's cache `imageStates`), kept as
/// nodes come and go so that a cycle looks a name up instead of visiting every node.
#[derive(Debug, Clone, Default)]
pub struct ImageCounts(HashMap<Arc<str>, u32>);

impl ImageCounts {
    /// Counts `node`'s images in (`add`) or out: each name once per node, however many of
    /// its images list it.
    pub fn count(&mut self, node: &Node, add: bool) {
        let mut seen: Vec<&str> = node_image_names(node).map(|(n, _)| n).collect();
        seen.sort_unstable();
        seen.dedup();
        for name in seen {
            if add {
                *self.0.entry(Arc::from(name)).or_insert(0) += 1;
            } else if let Some(n) = self.0.get_mut(name) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.0.remove(name);
                }
            }
        }
    }

    /// How many nodes list `name`.
    pub fn nodes_with(&self, name: &str) -> u32 {
        self.0.get(name).copied().unwrap_or(0)
    }
}

/// Every (name, size) a node's `status.images` lists, in order.
pub(crate) fn node_image_names(node: &Node) -> impl Iterator<Item = (&str, i64)> {
    node.status
        .as_ref()
        .and_then(|s| s.images.as_deref())
        .unwrap_or(&[])
        .iter()
        .flat_map(|img| {
            let size = img.size_bytes.unwrap_or(0);
            img.names.iter().flatten().map(move |n| (n.as_str(), size))
        })
}
