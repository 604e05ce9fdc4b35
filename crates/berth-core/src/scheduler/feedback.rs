//! Helpers of the Filter feedback loop ([`super::Scheduler`]'s `filter_feedback`), which
//! reads the cycle's per-node log of rejecting plugins once per feedback plugin.
//!
//! The log names plugins by their `&'static str` names, so a plugin's name is the same
//! address at every node: comparing addresses first, and remembering what each rejecting
//! plugin means for the plugin being fed, keeps the per-node work to a pointer comparison
//! or two where a string comparison and a walk of the Filter list took place.

/// `a == b`, answered from the addresses when both are the same string.
#[inline]
pub(super) fn same_name(a: &str, b: &str) -> bool {
    a.len() == b.len() && (std::ptr::eq(a.as_ptr(), b.as_ptr()) || a == b)
}

/// How many rejecting plugins [`SeenPlugins`] remembers; past that it answers `None` for
/// the others and the caller works them out again (correct, only slower).
const SEEN: usize = 8;

/// Rejecting plugin name → whether it runs after the plugin being fed, for the few plugins
/// that rejected nodes in one cycle. Fixed size: the feedback loop allocates nothing.
#[derive(Debug, Default)]
pub(super) struct SeenPlugins {
    seen: [(&'static str, bool); SEEN],
    len: usize,
}

impl SeenPlugins {
    /// What was remembered for `name`.
    #[inline]
    pub(super) fn get(&self, name: &str) -> Option<bool> {
        self.seen
            .get(..self.len)?
            .iter()
            .find(|(n, _)| same_name(n, name))
            .map(|&(_, later)| later)
    }

    /// Remembers `later` for `name` (forgotten when full).
    pub(super) fn put(&mut self, name: &'static str, later: bool) {
        if let Some(slot) = self.seen.get_mut(self.len) {
            *slot = (name, later);
            self.len += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_by_text_and_forgets_past_its_size() {
        let mut s = SeenPlugins::default();
        assert_eq!(s.get("A"), None);
        s.put("A", true);
        s.put("B", false);
        assert_eq!(s.get("A"), Some(true));
        assert_eq!(s.get(&String::from("B")), Some(false));
        for i in 0..SEEN {
            s.put(if i % 2 == 0 { "x" } else { "y" }, true);
        }
        assert_eq!(s.len, SEEN);
        assert_eq!(s.get("A"), Some(true));
        assert_eq!(s.get("z"), None);
    }

    #[test]
    fn same_name_compares_text() {
        let owned = String::from("NodeResourcesFit");
        assert!(same_name("NodeResourcesFit", &owned));
        assert!(!same_name("NodeResourcesFit", "NodeResourcesFix"));
        assert!(!same_name("a", "ab"));
    }
}
