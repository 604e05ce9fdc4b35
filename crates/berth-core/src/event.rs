//! What the driver tells the core.

use crate::object::{Object, ObjectKey};

/// An input to [`crate::Scheduler::handle`]. Time is not an event: it arrives as `now` on
/// every call.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// An object was created or replaced (a watch `ADDED`/`MODIFIED`). Applying the object the
    /// core already knows is a no-op; applying a pod with `spec.nodeName` that the core
    /// assumed confirms its binding.
    Applied(Object),
    /// An object was deleted.
    Deleted(ObjectKey),
    /// A bind the core asked for failed; the pod is forgotten and retried.
    BindFailed {
        /// The pod.
        pod: ObjectKey,
        /// Why, for the pod's condition.
        message: String,
    },
}
