//! What reaches the driver's loop: changes from the watchers and the answers of the effect
//! tasks, in one channel. It sits below both so neither reaches into the other.

use berth_core::object::ObjectKey;
use berth_core::{BindFailure, Event};

use crate::kinds::Unreadable;

/// What reaches the driver.
#[derive(Debug)]
pub enum Input {
    /// A change for the core.
    Event(Event),
    /// A watched object berth cannot read: reported, not applied.
    Unreadable(Unreadable),
    /// An operation on the API finished.
    Done(Completion),
}

/// What an effect's task reports back to the driver.
#[derive(Debug)]
pub struct Completion {
    /// The object the effect was about (its queue moves on); `None` for unkeyed effects.
    pub key: Option<ObjectKey>,
    /// Whether it was a bind (its slot frees).
    pub bind: bool,
    /// Whether the write succeeded (a `Scheduled` event behind it is published only then).
    pub ok: bool,
    /// What the core must hear of it.
    pub outcome: Outcome,
}

/// The result the core cares about.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to report: done, or failed in a way the watch will show.
    Done,
    /// A bind failed: the core runs Unreserve and backs the pod off.
    BindFailed {
        /// The pod.
        pod: ObjectKey,
        /// The UID it was bound for.
        uid: String,
        /// The node.
        node: String,
        /// Why, in the core's classes.
        class: BindFailure,
        /// The API server's message.
        message: String,
    },
}
