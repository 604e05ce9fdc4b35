use serde_json::json;

use super::*;

fn deployment(replicas: Option<u32>) -> Value {
    let mut d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {"containers": [{"name": "c", "image": "i",
                    "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}
            }
        }
    });
    if let Some(n) = replicas {
        d["spec"]["replicas"] = json!(n);
    }
    d
}

#[test]
fn targets_are_read_as_kubectl_reads_them() {
    assert_eq!(parse_target("deploy/web").unwrap().0.kind, "Deployment");
    assert_eq!(parse_target("Deployment/web").unwrap().1, "web");
    assert_eq!(
        parse_target("statefulsets.apps/db").unwrap().0.kind,
        "StatefulSet"
    );
    assert_eq!(parse_target("cj/nightly").unwrap().0.kind, "CronJob");
    assert_eq!(parse_target("web"), Err(ReserveError::Target("web".into())));
    assert_eq!(
        parse_target("pod/web"),
        Err(ReserveError::Kind("pod".into()))
    );
    assert!(parse_target("deployment/").is_err());
    assert!(parse_target("deployment/a/b").is_err());
}

#[test]
fn one_reservation_per_replica_from_the_template_in_one_gang_owned_by_the_selector() {
    let (kind, _) = parse_target("deployment/web").unwrap();
    let plan = plan(
        kind,
        &deployment(Some(5)),
        Some(3),
        Some(GoDuration::new("2h")),
    )
    .unwrap();
    assert_eq!(plan.gang, "web-reserve");
    let names: Vec<_> = plan
        .reservations
        .iter()
        .map(|r| r.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["shop-web-0", "shop-web-1", "shop-web-2"]);
    for r in &plan.reservations {
        assert_eq!(r.spec.ttl, Some(GoDuration::new("2h")));
        assert_eq!(r.spec.allocate_once, Some(true));
        let pod = &r.spec.template.as_ref().unwrap().pod;
        let meta = pod.metadata.as_ref().unwrap();
        assert_eq!(meta.namespace.as_deref(), Some("shop"));
        let a = meta.annotations.as_ref().unwrap();
        assert_eq!(a[ANNOTATION_GANG_NAME], "web-reserve");
        assert_eq!(a[ANNOTATION_GANG_MIN_AVAILABLE], "3");
        let requests = pod.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap();
        assert_eq!(requests["cpu"].0, "2");
        let owner = &r.spec.owners[0];
        assert_eq!(
            owner
                .label_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["app"],
            "web"
        );
        assert_eq!(
            owner.object.as_ref().unwrap().namespace.as_deref(),
            Some("shop")
        );
        assert_eq!(
            r.metadata.labels.as_ref().unwrap()[LABEL_RESERVED_FOR],
            "Deployment.web"
        );
    }
}

#[test]
fn the_replica_count_comes_from_the_workload_unless_given() {
    let (kind, _) = parse_target("deployment/web").unwrap();
    assert_eq!(
        plan(kind, &deployment(Some(4)), None, None)
            .unwrap()
            .reservations
            .len(),
        4
    );
    // Deployment's default replicas is 1.
    assert_eq!(
        plan(kind, &deployment(None), None, None)
            .unwrap()
            .reservations
            .len(),
        1
    );
    let (ds, _) = parse_target("ds/agent").unwrap();
    let daemonset = json!({"metadata": {"name": "agent"}, "spec": {
        "selector": {"matchLabels": {"app": "a"}},
        "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": []}}}});
    assert_eq!(
        plan(ds, &daemonset, None, None),
        Err(ReserveError::NoReplicas {
            kind: "DaemonSet".into(),
            name: "agent".into()
        })
    );
    assert_eq!(
        plan(ds, &daemonset, Some(2), None)
            .unwrap()
            .reservations
            .len(),
        2
    );
}

#[test]
fn a_bad_workload_names_the_field() {
    let (kind, _) = parse_target("deployment/web").unwrap();
    let mut d = deployment(Some(2));
    d["spec"]["template"]["spec"]["containers"] = json!("not a list");
    let err = plan(kind, &d, None, None).unwrap_err().to_string();
    assert!(err.starts_with("Deployment/web: spec.template: "), "{err}");
    let mut d = deployment(Some(2));
    d["spec"].as_object_mut().unwrap().remove("template");
    assert_eq!(
        plan(kind, &d, None, None).unwrap_err().to_string(),
        "Deployment/web: spec.template: Required value"
    );
    let mut d = deployment(None);
    d["spec"]["replicas"] = json!(-1);
    assert!(plan(kind, &d, None, None)
        .unwrap_err()
        .to_string()
        .contains("spec.replicas"));
}

#[test]
fn a_cronjob_is_owned_by_its_template_labels_and_an_rc_by_its_plain_selector() {
    let (cj, _) = parse_target("cronjob/nightly").unwrap();
    let cronjob = json!({"metadata": {"name": "nightly"}, "spec": {"jobTemplate": {"spec": {
        "parallelism": 2,
        "template": {"metadata": {"labels": {"job": "nightly"}}, "spec": {"containers": []}}}}}});
    let p = plan(cj, &cronjob, None, None).unwrap();
    assert_eq!(p.reservations.len(), 2);
    let sel = p.reservations[0].spec.owners[0]
        .label_selector
        .clone()
        .unwrap();
    assert_eq!(sel.match_labels.unwrap()["job"], "nightly");
    let (rc, _) = parse_target("rc/old").unwrap();
    let old = json!({"metadata": {"name": "old"}, "spec": {"replicas": 1, "selector": {"app": "old"},
        "template": {"metadata": {"labels": {"app": "old"}}, "spec": {"containers": []}}}});
    let p = plan(rc, &old, None, None).unwrap();
    let sel = p.reservations[0].spec.owners[0]
        .label_selector
        .clone()
        .unwrap();
    assert_eq!(sel.match_labels.unwrap()["app"], "old");
    // Defaults the API server applies.
    assert_eq!(p.reservations[0].spec.ttl, Some(GoDuration::new("24h")));
}

#[test]
fn progress_names_the_first_member_that_is_not_available_and_why() {
    let r = |phase: &str, cond: Option<&str>| {
        let mut v = json!({"status": {"phase": phase, "nodeName": "n1"}});
        if let Some(m) = cond {
            v["status"]["conditions"] = json!([{"type": "Scheduled", "status": "False",
                "reason": "Unschedulable", "message": m}]);
        }
        v
    };
    let standings = vec![
        ("a".to_string(), standing(&r("Available", None))),
        (
            "b".to_string(),
            standing(&r(
                "Pending",
                Some("0/3 nodes are available: 3 Insufficient cpu."),
            )),
        ),
        ("c".to_string(), standing(&json!({}))),
    ];
    let p = Progress::of(&standings);
    assert_eq!(p.available, 1);
    assert!(!p.done() && !p.failed());
    assert_eq!(
        p.line(),
        "1/3 Available; b: 0/3 nodes are available: 3 Insufficient cpu."
    );
    let ended = vec![("a".to_string(), standing(&r("Failed", None)))];
    assert!(Progress::of(&ended).failed());
    let all = vec![("a".to_string(), standing(&r("Available", None)))];
    assert!(Progress::of(&all).done());
    assert_eq!(Progress::of(&all).line(), "1/1 Available");
}
