use super::*;
use crate::testing::pod;

#[test]
fn a_pod_names_its_gang_by_any_api() {
    let sigs = pod("a").label(LABEL_SIGS_POD_GROUP, "job").build_info();
    let g = gang_of_pod(&sigs).unwrap();
    assert_eq!((g.api, &*g.name), (Api::Koordinator, "job"));
    let x = pod("b").label(LABEL_X_K8S_POD_GROUP, "job").build_info();
    assert_eq!(gang_of_pod(&x).unwrap().api, Api::SchedulerPlugins);
    let light = pod("c").annotation(ANNOTATION_GANG_NAME, "g").build_info();
    assert_eq!(&*gang_of_pod(&light).unwrap().name, "g");
    let w = pod("d").workload_ref("train", "workers", "0").build_info();
    let g = gang_of_pod(&w).unwrap();
    assert_eq!((g.api, &*g.name), (Api::Workload, "train/workers/0"));
    assert!(gang_of_pod(&pod("e").build_info()).is_none());
}

#[test]
fn policy_comes_from_the_object_or_the_annotations() {
    let mut gangs = Gangs::default();
    let p = pod("a")
        .annotation(ANNOTATION_GANG_NAME, "g")
        .annotation(ANNOTATION_GANG_MIN_NUM, "3")
        .annotation(ANNOTATION_GANG_WAIT_TIME, "30s")
        .build_info();
    let g = gangs.pod_applied(&p).unwrap();
    let policy = gangs.policy(&g, &p).unwrap().unwrap();
    assert_eq!(
        (policy.min, policy.timeout, policy.strict),
        (3, 30 * SECOND, true)
    );
    assert_eq!(gangs.member_count(&g), 1);

    let q = pod("b").label(LABEL_X_K8S_POD_GROUP, "job").build_info();
    let g = gangs.pod_applied(&q).unwrap();
    assert_eq!(
        gangs.policy(&g, &q).unwrap_err(),
        "podgroups.scheduling.x-k8s.io \"job\" not found"
    );
    let pg: PodGroup = serde_json::from_value(serde_json::json!({
        "apiVersion": berth_api::gang::X_K8S_API_VERSION, "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "default",
            "annotations": {ANNOTATION_GANG_MODE: GANG_MODE_NON_STRICT}},
        "spec": {"minMember": 4}}))
    .unwrap();
    gangs.apply_pod_group(
        ObjectKey::new(Kind::PodGroup, "default", "job"),
        Arc::new(pg),
    );
    let policy = gangs.policy(&g, &q).unwrap().unwrap();
    assert_eq!(
        (policy.min, policy.timeout, policy.strict),
        (4, X_K8S_DEFAULT_TIMEOUT, false)
    );
    gangs.pod_deleted(&q.key);
    assert_eq!(gangs.member_count(&g), 0);
}

#[test]
fn a_workload_pod_group_without_gang_policy_is_no_gang() {
    let mut gangs = Gangs::default();
    let p = pod("a").workload_ref("w", "web", "").build_info();
    let g = gangs.pod_applied(&p).unwrap();
    assert_eq!(
        gangs.policy(&g, &p).unwrap_err(),
        "waiting for pods's workload \"w\" to appear in scheduling queue"
    );
    let w: Workload = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"podGroups": [{"name": "web", "policy": {"basic": {}}},
                               {"name": "workers", "policy": {"gang": {"minCount": 2}}}]}}))
    .unwrap();
    gangs.apply_workload(ObjectKey::new(Kind::Workload, "default", "w"), Arc::new(w));
    assert_eq!(gangs.policy(&g, &p), Ok(None));
    let q = pod("b").workload_ref("w", "workers", "").build_info();
    let g = gangs.pod_applied(&q).unwrap();
    let policy = gangs.policy(&g, &q).unwrap().unwrap();
    assert_eq!((policy.min, policy.plugin), (2, GANG_SCHEDULING));
}
