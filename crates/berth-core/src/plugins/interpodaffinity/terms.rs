//! Matching pods against `PodAffinityTerm`s.
//!
//! kube-scheduler compiles every term once, when a pod enters its cache. berth's pods carry
//! only the raw API object, and compiling the terms of every existing pod on every cycle
//! would allocate on the hot path, so terms are evaluated straight from the API types here.
//! The incoming pod's terms are validated once per cycle with the compiled
//! [`Selector`](crate::model::selector::Selector), which rejects what `labels.Parse` rejects;
//! an existing pod's invalid term matches nothing (the API server would not have admitted it).
//!
//! Namespaces: a `namespaceSelector` selects on the labels of the `Namespace` objects the
//! driver feeds ([`crate::cache::Cluster::namespaces`]), as kube-scheduler resolves it through
//! its namespace lister. A namespace the core was never told about (the simulator feeds
//! none) is modelled as carrying only the label the API server puts on every namespace,
//! `kubernetes.io/metadata.name=<name>`: `namespaceSelector: {}` still selects it, a selector
//! on `kubernetes.io/metadata.name` selects it by name, and a selector on any other label
//! does not select it (unless it only asks for the label to be absent).
//!
//! `matchLabelKeys` / `mismatchLabelKeys` are applied here, from the declaring pod's labels,
//! as the API server does when it admits the pod; applying them to a selector the API
//! server already merged them into changes nothing.

use berth_api::k8s_openapi::api::core::v1::{PodAffinityTerm, WeightedPodAffinityTerm};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::cache::node_cache::Namespaces;
use crate::model::pod::PodInfo;
use crate::model::selector::{Labels, Selector, SelectorError};

/// The label the API server sets on every namespace, the only one berth can know of.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Whether labels read through `get` satisfy `sel`. An invalid requirement (unknown
/// operator, `In` without values) matches nothing.
pub(crate) fn selector_matches<'l>(
    sel: &LabelSelector,
    get: impl Fn(&str) -> Option<&'l str>,
) -> bool {
    for (k, v) in sel.match_labels.iter().flatten() {
        if get(k) != Some(v.as_str()) {
            return false;
        }
    }
    for e in sel.match_expressions.iter().flatten() {
        let value = get(&e.key);
        let values = e.values.as_deref().unwrap_or(&[]);
        let listed = || value.is_some_and(|v| values.iter().any(|x| x == v));
        let ok = match e.operator.as_str() {
            "In" => !values.is_empty() && listed(),
            "NotIn" => !values.is_empty() && !listed(),
            "Exists" => values.is_empty() && value.is_some(),
            "DoesNotExist" => values.is_empty() && value.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// The value of label `key` on namespace `ns`: from its object when the core knows it,
/// and `kubernetes.io/metadata.name`, which the API server sets on every namespace, always.
fn namespace_label<'l>(namespaces: &'l Namespaces, ns: &'l str, key: &str) -> Option<&'l str> {
    if key == NAMESPACE_NAME_LABEL {
        return Some(ns);
    }
    namespaces
        .get(ns)?
        .metadata
        .labels
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Whether a pod in `target_ns` is in the namespaces `term` (declared by a pod in
/// `owner_ns`) applies to: the listed namespaces, those its `namespaceSelector` selects, or
/// the owner's own namespace when neither is given.
fn namespace_matches(
    term: &PodAffinityTerm,
    owner_ns: &str,
    target_ns: &str,
    namespaces: &Namespaces,
) -> bool {
    let listed = term.namespaces.as_deref().unwrap_or(&[]);
    match &term.namespace_selector {
        None if listed.is_empty() => owner_ns == target_ns,
        None => listed.iter().any(|n| n == target_ns),
        Some(sel) => {
            listed.iter().any(|n| n == target_ns)
                || selector_matches(sel, |k| namespace_label(namespaces, target_ns, k))
        }
    }
}

/// Whether `target`'s labels satisfy `term`'s label selector, with the owner's
/// `matchLabelKeys` (same value) and `mismatchLabelKeys` (different value) applied. A term
/// without a label selector matches no pod.
fn labels_match(term: &PodAffinityTerm, owner: &Labels, target: &Labels) -> bool {
    let Some(sel) = &term.label_selector else {
        return false;
    };
    let get = |k: &str| target.get(k).map(String::as_str);
    if !selector_matches(sel, get) {
        return false;
    }
    let same = term
        .match_label_keys
        .iter()
        .flatten()
        .all(|k| owner.get(k).is_none_or(|v| target.get(k) == Some(v)));
    let different = term
        .mismatch_label_keys
        .iter()
        .flatten()
        .all(|k| owner.get(k).is_none_or(|v| target.get(k) != Some(v)));
    same && different
}

/// Whether `target` matches `term`, a term of `owner`'s spec (kube-scheduler's
/// `AffinityTerm.Matches`), with `namespaces` the namespace objects the core knows.
pub(crate) fn term_matches(
    term: &PodAffinityTerm,
    owner: &PodInfo,
    target: &PodInfo,
    namespaces: &Namespaces,
) -> bool {
    namespace_matches(
        term,
        &owner.key.namespace,
        &target.key.namespace,
        namespaces,
    ) && labels_match(term, &owner.labels, &target.labels)
}

/// Whether `target` matches every term; false for no terms (`podMatchesAllAffinityTerms`).
pub(crate) fn matches_all(
    terms: &[PodAffinityTerm],
    owner: &PodInfo,
    target: &PodInfo,
    namespaces: &Namespaces,
) -> bool {
    !terms.is_empty()
        && terms
            .iter()
            .all(|t| term_matches(t, owner, target, namespaces))
}

/// `spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
pub(crate) fn required_affinity(pod: &PodInfo) -> &[PodAffinityTerm] {
    pod.spec()
        .affinity
        .as_ref()
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or(&[])
}

/// `spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
pub(crate) fn required_anti_affinity(pod: &PodInfo) -> &[PodAffinityTerm] {
    pod.spec()
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or(&[])
}

/// `spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
pub(crate) fn preferred_affinity(pod: &PodInfo) -> &[WeightedPodAffinityTerm] {
    pod.spec()
        .affinity
        .as_ref()
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or(&[])
}

/// `spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
pub(crate) fn preferred_anti_affinity(pod: &PodInfo) -> &[WeightedPodAffinityTerm] {
    pod.spec()
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or(&[])
}

/// Whether the pod has any pod (anti-)affinity, as `NodeInfo.PodsWithAffinity` counts.
pub(crate) fn has_pod_affinity(pod: &PodInfo) -> bool {
    pod.spec()
        .affinity
        .as_ref()
        .is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some())
}

/// Checks that the selectors of `terms` parse, as kube-scheduler does when it builds the
/// incoming pod's `PodInfo`.
pub(crate) fn validate<'t>(
    terms: impl IntoIterator<Item = &'t PodAffinityTerm>,
) -> Result<(), SelectorError> {
    for t in terms {
        if let Some(sel) = &t.label_selector {
            Selector::from_label_selector(sel)?;
        }
        if let Some(sel) = &t.namespace_selector {
            Selector::from_label_selector(sel)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;
    use serde_json::json;

    fn term(v: serde_json::Value) -> PodAffinityTerm {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn raw_selectors_follow_label_selector_semantics() {
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["db"]},
                {"key": "env", "operator": "Exists"},
            ]
        }))
        .unwrap();
        let labels = |pairs: &[(&str, &str)]| -> Labels {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let check = |l: &Labels| selector_matches(&sel, |k| l.get(k).map(String::as_str));
        assert!(check(&labels(&[("app", "web"), ("env", "p")])));
        assert!(!check(&labels(&[
            ("app", "web"),
            ("env", "p"),
            ("tier", "db")
        ])));
        assert!(!check(&labels(&[("app", "web")])));
        let bad: LabelSelector = serde_json::from_value(
            json!({"matchExpressions": [{"key": "a", "operator": "Maybe"}]}),
        )
        .unwrap();
        assert!(!selector_matches(&bad, |_| Some("x")));
    }

    #[test]
    fn namespace_rules_default_to_the_owner_namespace() {
        let owner = pod("o").namespace("a").build_info();
        let same = pod("s").namespace("a").label("app", "web").build_info();
        let other = pod("x").namespace("b").label("app", "web").build_info();
        let sel = json!({"matchLabels": {"app": "web"}});
        let own = term(json!({"labelSelector": sel, "topologyKey": "k"}));
        assert!(term_matches(&own, &owner, &same, &Namespaces::default()));
        assert!(!term_matches(&own, &owner, &other, &Namespaces::default()));
        let all = term(json!({"labelSelector": sel, "topologyKey": "k", "namespaceSelector": {}}));
        assert!(term_matches(&all, &owner, &other, &Namespaces::default()));
        let by_name = term(json!({"labelSelector": sel, "topologyKey": "k",
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "b"}}}));
        assert!(term_matches(
            &by_name,
            &owner,
            &other,
            &Namespaces::default()
        ));
        assert!(!term_matches(
            &by_name,
            &owner,
            &same,
            &Namespaces::default()
        ));
        let by_team = term(json!({"labelSelector": sel, "topologyKey": "k",
            "namespaceSelector": {"matchLabels": {"team": "t1"}}}));
        assert!(!term_matches(
            &by_team,
            &owner,
            &other,
            &Namespaces::default()
        ));
        let listed = term(json!({"labelSelector": sel, "topologyKey": "k", "namespaces": ["b"]}));
        assert!(term_matches(
            &listed,
            &owner,
            &other,
            &Namespaces::default()
        ));
        assert!(!term_matches(
            &listed,
            &owner,
            &same,
            &Namespaces::default()
        ));
        let no_selector = term(json!({"topologyKey": "k"}));
        assert!(!term_matches(
            &no_selector,
            &owner,
            &same,
            &Namespaces::default()
        ));
    }

    #[test]
    fn a_namespace_selector_reads_the_labels_of_known_namespaces() {
        use berth_api::k8s_openapi::api::core::v1::Namespace;
        let owner = pod("o").namespace("a").build_info();
        let in_b = pod("x").namespace("b").label("app", "web").build_info();
        let in_c = pod("y").namespace("c").label("app", "web").build_info();
        let by_team = term(json!({"labelSelector": {"matchLabels": {"app": "web"}},
            "topologyKey": "k", "namespaceSelector": {"matchLabels": {"team": "t1"}}}));
        let not_t1 = term(json!({"labelSelector": {"matchLabels": {"app": "web"}},
            "topologyKey": "k", "namespaceSelector": {"matchExpressions": [
                {"key": "team", "operator": "NotIn", "values": ["t1"]}]}}));
        let mut namespaces = Namespaces::default();
        let ns = |name: &str, team: &str| -> std::sync::Arc<Namespace> {
            std::sync::Arc::new(
                serde_json::from_value(
                    json!({"metadata": {"name": name, "labels": {"team": team}}}),
                )
                .unwrap(),
            )
        };
        // Unknown namespaces carry only their name label.
        assert!(!term_matches(&by_team, &owner, &in_b, &namespaces));
        assert!(term_matches(&not_t1, &owner, &in_b, &namespaces));
        namespaces.insert("b".into(), ns("b", "t1"));
        namespaces.insert("c".into(), ns("c", "t2"));
        assert!(term_matches(&by_team, &owner, &in_b, &namespaces));
        assert!(!term_matches(&by_team, &owner, &in_c, &namespaces));
        assert!(!term_matches(&not_t1, &owner, &in_b, &namespaces));
        assert!(term_matches(&not_t1, &owner, &in_c, &namespaces));
        // The name label is the API server's, whatever the object says.
        let by_name = term(json!({"labelSelector": {"matchLabels": {"app": "web"}},
            "topologyKey": "k", "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "c"}}}));
        assert!(term_matches(&by_name, &owner, &in_c, &namespaces));
    }

    #[test]
    fn match_and_mismatch_label_keys_use_the_owner_labels() {
        let owner = pod("o").label("app", "web").label("v", "1").build_info();
        let v1 = pod("a").label("app", "web").label("v", "1").build_info();
        let v2 = pod("b").label("app", "web").label("v", "2").build_info();
        let sel = json!({"matchLabels": {"app": "web"}});
        let same = term(json!({"labelSelector": sel, "topologyKey": "k", "matchLabelKeys": ["v"]}));
        assert!(term_matches(&same, &owner, &v1, &Namespaces::default()));
        assert!(!term_matches(&same, &owner, &v2, &Namespaces::default()));
        let diff =
            term(json!({"labelSelector": sel, "topologyKey": "k", "mismatchLabelKeys": ["v"]}));
        assert!(!term_matches(&diff, &owner, &v1, &Namespaces::default()));
        assert!(term_matches(&diff, &owner, &v2, &Namespaces::default()));
    }
}
