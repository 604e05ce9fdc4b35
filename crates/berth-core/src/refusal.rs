//! Objects refused by the capacity rule ([`berth_api::validate`]): what the scheduler
//! reported, so each refused object gets one Warning event (not one per update of a Node
//! that heartbeats every few seconds), and the counts behind
//! `berth_unreadable_objects_total{kind,reason}`.
//!
//! A refused object is treated as kube-scheduler treats its absence; the scheduler decides
//! what that means per kind. This module only remembers and counts.

use std::collections::BTreeMap;

use berth_api::validate::Rule;

use crate::collections::HashMap;
use crate::object::{Kind, ObjectKey};

/// What was refused, per object and event reason.
#[derive(Debug, Clone, Default)]
pub struct Refusals {
    /// The message last reported, per object and reason.
    reported: HashMap<(ObjectKey, &'static str), String>,
    /// Refusals reported so far, by kind and rule.
    totals: BTreeMap<(Kind, Rule), u64>,
    /// Refusals not yet taken by the driver ([`Refusals::take_new`]).
    fresh: Vec<(Kind, Rule)>,
}

impl Refusals {
    /// Notes that `key` is refused for `reason` with `message`. True when this is news (the
    /// object was not refused, or for another message): the caller reports it then.
    pub fn refuse(
        &mut self,
        key: &ObjectKey,
        reason: &'static str,
        rule: Rule,
        message: &str,
    ) -> bool {
        let slot = (key.clone(), reason);
        if self.reported.get(&slot).is_some_and(|m| m == message) {
            return false;
        }
        self.reported.insert(slot, message.to_string());
        *self.totals.entry((key.kind, rule)).or_default() += 1;
        self.fresh.push((key.kind, rule));
        true
    }

    /// `key` is readable again for `reason`: a later refusal is news.
    pub fn accept(&mut self, key: &ObjectKey, reason: &'static str) {
        self.reported.remove(&(key.clone(), reason));
    }

    /// `key` was deleted.
    pub fn forget(&mut self, key: &ObjectKey) {
        self.reported.retain(|(k, _), _| k != key);
    }

    /// Whether `key` is refused for `reason` now, and with what message.
    pub fn message(&self, key: &ObjectKey, reason: &'static str) -> Option<&str> {
        self.reported
            .get(&(key.clone(), reason))
            .map(String::as_str)
    }

    /// Refusals reported so far, by kind and rule.
    pub fn totals(&self) -> &BTreeMap<(Kind, Rule), u64> {
        &self.totals
    }

    /// The refusals reported since the last call, for a metric.
    pub fn take_new(&mut self) -> Vec<(Kind, Rule)> {
        std::mem::take(&mut self.fresh)
    }
}

/// The rule a message built from a [`berth_api::validate::Refusal`] names (its
/// `(rule: NAME)`), [`Rule::Malformed`] for any other problem: for reports that carry only
/// a message (a reservation's problem).
pub fn rule_of(message: &str) -> Rule {
    Rule::ALL
        .into_iter()
        .find(|r| message.contains(&format!("(rule: {})", r.as_str())))
        .unwrap_or(Rule::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_news_once_per_message() {
        let mut r = Refusals::default();
        let key = ObjectKey::cluster(Kind::Node, "n");
        assert!(r.refuse(&key, "InvalidNodeReservation", Rule::Negative, "a"));
        assert!(!r.refuse(&key, "InvalidNodeReservation", Rule::Negative, "a"));
        assert!(r.refuse(&key, "InvalidNodeReservation", Rule::Negative, "b"));
        assert_eq!(r.totals().get(&(Kind::Node, Rule::Negative)), Some(&2));
        assert_eq!(r.take_new().len(), 2);
        assert!(r.take_new().is_empty());
        r.accept(&key, "InvalidNodeReservation");
        assert_eq!(r.message(&key, "InvalidNodeReservation"), None);
        assert!(r.refuse(&key, "InvalidNodeReservation", Rule::Negative, "b"));
        r.forget(&key);
        assert!(r.refuse(&key, "InvalidNodeReservation", Rule::Negative, "b"));
    }

    #[test]
    fn the_rule_is_read_back_from_a_message() {
        assert_eq!(
            rule_of("x: \"-1\" is negative (rule: negative)"),
            Rule::Negative
        );
        assert_eq!(rule_of("a: b (rule: out-of-range)"), Rule::OutOfRange);
        assert_eq!(rule_of("no owners"), Rule::Malformed);
    }
}
