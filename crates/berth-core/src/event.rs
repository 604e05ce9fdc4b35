//! What the driver tells the core.

use crate::object::{Kind, Object, ObjectKey};

/// An input to [`crate::Scheduler::handle`]. Time is not an event: it arrives as `now` on
/// every call.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// An object was created or replaced (a watch `ADDED`/`MODIFIED`, or one object of a
    /// LIST between [`Event::ListStarted`] and [`Event::Listed`]). Applying the object the
    /// core already knows is a no-op; applying a pod with `spec.nodeName` that the core
    /// assumed confirms its binding.
    Applied(Object),
    /// An object was deleted.
    Deleted(ObjectKey),
    /// A (re-)LIST of `kind` begins (kube-runtime's `watcher::Event::Init`): the objects it
    /// returns follow as [`Event::Applied`], then [`Event::Listed`].
    ListStarted(Kind),
    /// The LIST of `kind` is complete (`watcher::Event::InitDone`). Objects of that kind the
    /// core knew and the LIST did not return are deleted. Until every kind the
    /// [`crate::Config::wait_for_sync`] names has been listed once, nothing is scheduled,
    /// expired or failed.
    Listed(Kind),
    /// A bind the core asked for ([`crate::Effect::Bind`]) failed. Every Reserve plugin's
    /// Unreserve runs for it and that pod, and only it, goes to back-off.
    BindFailed {
        /// The pod.
        pod: ObjectKey,
        /// The pod's UID the bind was for (a bind of an older incarnation of the same name
        /// is ignored).
        uid: String,
        /// The node it was being bound to.
        node: String,
        /// What kind of failure.
        class: BindFailure,
        /// Why, for the pod's condition.
        message: String,
    },
}

/// Why a bind failed, as the API server answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BindFailure {
    /// 409: the pod is already bound, or its UID precondition failed (another incarnation).
    Conflict,
    /// 404: the pod (or its namespace) is gone.
    NotFound,
    /// Anything else: time-outs, 5xx, a PreBind patch that could not be written.
    Transient,
}

impl BindFailure {
    /// The class's name, for metrics labels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            BindFailure::Conflict => "conflict",
            BindFailure::NotFound => "not_found",
            BindFailure::Transient => "transient",
        }
    }
}
