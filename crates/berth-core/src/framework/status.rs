//! The outcome of one plugin at one extension point.

use std::borrow::Cow;

use smallvec::SmallVec;

/// What a status means for the pod, as in kube-scheduler's `framework.Code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Code {
    /// The plugin is satisfied.
    Success,
    /// Something went wrong inside the scheduler; the pod is retried with back-off.
    Error,
    /// The pod does not fit; preemption may help.
    Unschedulable,
    /// The pod does not fit and preemption cannot help on this node.
    UnschedulableAndUnresolvable,
    /// Permit: wait.
    Wait,
    /// The plugin has nothing to do for this pod (PreFilter/PreScore): its Filter/Score are
    /// skipped.
    Skip,
}

/// A plugin's verdict with its reasons. `Status::success()` allocates nothing, nor does a
/// rejection with up to two reasons (NodeResourceTopologyMatch adds a second one on every
/// node whose data may be stale: a heap allocation per node when only one was inline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    code: Code,
    reasons: SmallVec<[Cow<'static, str>; 2]>,
    plugin: &'static str,
}

impl Default for Status {
    fn default() -> Self {
        Self::success()
    }
}

impl Status {
    /// Success.
    pub fn success() -> Self {
        Self {
            code: Code::Success,
            reasons: SmallVec::new(),
            plugin: "",
        }
    }

    /// A status with one reason.
    pub fn new(code: Code, reason: impl Into<Cow<'static, str>>) -> Self {
        let mut reasons = SmallVec::new();
        reasons.push(reason.into());
        Self {
            code,
            reasons,
            plugin: "",
        }
    }

    /// Unschedulable with one reason.
    pub fn unschedulable(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Code::Unschedulable, reason)
    }

    /// UnschedulableAndUnresolvable with one reason.
    pub fn unresolvable(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Code::UnschedulableAndUnresolvable, reason)
    }

    /// An internal error.
    pub fn error(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Code::Error, reason)
    }

    /// Skip.
    pub fn skip() -> Self {
        Self {
            code: Code::Skip,
            reasons: SmallVec::new(),
            plugin: "",
        }
    }

    /// Adds a reason.
    pub fn with_reason(mut self, reason: impl Into<Cow<'static, str>>) -> Self {
        self.reasons.push(reason.into());
        self
    }

    /// Changes the code, keeping the reasons.
    pub fn set_code(&mut self, code: Code) {
        self.code = code;
    }

    /// Records which plugin said so.
    pub fn with_plugin(mut self, plugin: &'static str) -> Self {
        self.plugin = plugin;
        self
    }

    /// The code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The reasons, in order.
    pub fn reasons(&self) -> &[Cow<'static, str>] {
        &self.reasons
    }

    /// The plugin that produced it, if recorded.
    pub fn plugin(&self) -> &'static str {
        self.plugin
    }

    /// True for success.
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// True for skip.
    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }

    /// True for either unschedulable code.
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }

    /// The reasons joined as kube-scheduler's `Status.Message()` does.
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_is_the_default_and_has_no_reasons() {
        let s = Status::default();
        assert!(s.is_success());
        assert!(s.reasons().is_empty());
    }

    #[test]
    fn message_joins_reasons() {
        let s = Status::unschedulable("Insufficient cpu")
            .with_reason("Insufficient memory")
            .with_plugin("NodeResourcesFit");
        assert_eq!(s.message(), "Insufficient cpu, Insufficient memory");
        assert_eq!(s.plugin(), "NodeResourcesFit");
        assert!(s.is_rejected());
    }
}
