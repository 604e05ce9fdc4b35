//! kube-controller-manager's command line for a test cluster.

/// The controllers [`crate::Options::controller_manager`] runs: the PersistentVolume
/// controller (binding claims and volumes) and the protection controllers that lift the
/// finalizers the API server's StorageObjectInUseProtection admission puts on every claim and
/// volume (without them a deleted claim never goes); the workload controllers that create
/// pods (ReplicaSet, Deployment, StatefulSet); the garbage collector (owners deleted,
/// dependants follow); DRA's ResourceClaim controller and the ephemeral-volume controller
/// (claims a pod's template asks for). No node lifecycle, namespace, ServiceAccount or attach/detach
/// controller: nothing in a test cluster would feed them (no kubelet), or they would
/// change what tests create behind their back.
pub const CONTROLLERS: &[&str] = &[
    "persistentvolume-binder-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
    "replicaset-controller",
    "deployment-controller",
    "statefulset-controller",
    "garbage-collector-controller",
    "resourceclaim-controller",
    "ephemeral-volume-controller",
];

/// The files the flags point at.
pub(crate) struct Files {
    /// The admin kubeconfig: the controllers act with its credentials.
    pub(crate) kubeconfig: String,
    /// The serving certificate and key (the API server's: valid for 127.0.0.1).
    pub(crate) cert: String,
    pub(crate) key: String,
    /// Where it may write what it generates.
    pub(crate) cert_dir: String,
}

/// How often the PersistentVolume controller goes over every claim and volume again. Its
/// default, 15 s, is how long a pending `Immediate` claim waits for a volume created after
/// it (a new volume does not requeue the claims that could use it): too long for a test.
pub(crate) const PV_SYNC_PERIOD: &str = "1s";

/// The standard flags: serving on `port` of 127.0.0.1 (for `/healthz`), no leader election
/// (one instance), every controller with the admin credentials (no per-controller
/// ServiceAccounts: no token controller runs), only `controllers`.
pub(crate) fn args(files: &Files, port: u16, controllers: &[String]) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", files.kubeconfig),
        format!("--authentication-kubeconfig={}", files.kubeconfig),
        format!("--authorization-kubeconfig={}", files.kubeconfig),
        // The API server has no request-header (front proxy) CA to publish: without this,
        // the controller manager logs its absence every few seconds.
        "--authentication-skip-lookup=true".to_string(),
        "--bind-address=127.0.0.1".to_string(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", files.cert),
        format!("--tls-private-key-file={}", files.key),
        format!("--cert-dir={}", files.cert_dir),
        "--leader-elect=false".to_string(),
        "--use-service-account-credentials=false".to_string(),
        format!("--controllers={}", controllers.join(",")),
        format!("--pvclaimbinder-sync-period={PV_SYNC_PERIOD}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_controllers_run_on_the_given_port() {
        let files = Files {
            kubeconfig: "/k".into(),
            cert: "/c".into(),
            key: "/key".into(),
            cert_dir: "/d".into(),
        };
        let a = args(
            &files,
            4321,
            &["a-controller".into(), "b-controller".into()],
        );
        assert!(a.contains(&"--controllers=a-controller,b-controller".to_string()));
        assert!(a.contains(&"--secure-port=4321".to_string()));
        assert!(a.contains(&"--kubeconfig=/k".to_string()));
        assert!(a.contains(&"--leader-elect=false".to_string()));
    }
}
