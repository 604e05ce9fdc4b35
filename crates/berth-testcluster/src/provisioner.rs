//! An external provisioner played by the test (no CSI driver runs in a test cluster): it
//! creates the volume a claim waits for, as external-provisioner does once the
//! PersistentVolume controller has handed the claim to it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// The claim annotation a scheduler writes with the node it chose (WaitForFirstConsumer).
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The claim annotation the PersistentVolume controller writes to hand a claim to its
/// class's provisioner.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The provisioner name of classes that have none (static local volumes).
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// Plays the external provisioner of every StorageClass (except
/// `kubernetes.io/no-provisioner`): a claim not yet bound that the PersistentVolume
/// controller has handed to its class's provisioner (`volume.kubernetes.io/storage-provisioner`)
/// gets a volume `pvc-<claim uid>` of its requested size and access modes, bound to it by
/// claimRef (name, namespace, UID), with a CSI source of that driver, and, when the claim
/// carries `volume.kubernetes.io/selected-node`, pinned to that node's
/// `kubernetes.io/hostname`. A claim of a `WaitForFirstConsumer` class is provisioned only
/// once it names its node (external-provisioner waits for the scheduler's choice too).
///
/// Needs kube-controller-manager's `persistentvolume-binder-controller`
/// ([`crate::Options::controller_manager`]): it hands the claims over, and binds them to
/// the volumes created here. Stops when dropped.
pub struct Provisioner {
    task: tokio::task::JoinHandle<()>,
    created: Arc<Mutex<Vec<String>>>,
}

impl std::fmt::Debug for Provisioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provisioner")
            .field("created", &self.created())
            .finish()
    }
}

/// How often it looks at the claims.
const POLL: Duration = Duration::from_millis(100);

impl Provisioner {
    /// Starts it on the current Tokio runtime, acting with `client`'s credentials.
    pub fn start(client: Client) -> Provisioner {
        let created = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(run(client, created.clone()));
        Provisioner { task, created }
    }

    /// The volumes it has created, in order.
    pub fn created(&self) -> Vec<String> {
        self.created
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for Provisioner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(client: Client, created: Arc<Mutex<Vec<String>>>) {
    loop {
        // A failed list or create is tried again on the next round, as a controller's
        // requeue would.
        let _ = round(&client, &created).await;
        tokio::time::sleep(POLL).await;
    }
}

async fn round(client: &Client, created: &Mutex<Vec<String>>) -> Result<(), kube::Error> {
    let lp = ListParams::default();
    let classes: BTreeMap<String, StorageClass> = Api::<StorageClass>::all(client.clone())
        .list(&lp)
        .await?
        .items
        .into_iter()
        .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
        .collect();
    let claims = Api::<PersistentVolumeClaim>::all(client.clone())
        .list(&lp)
        .await?;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for claim in claims.items {
        let Some(class) = wanted(&claim, &classes) else {
            continue;
        };
        let hostname = match annotation(&claim, ANN_SELECTED_NODE) {
            Some(node) => Some(hostname_of(client, node).await?),
            None => None,
        };
        let pv = volume_for(&claim, class, hostname);
        let name = pv.metadata.name.clone().unwrap_or_default();
        match volumes.create(&PostParams::default(), &pv).await {
            Ok(_) => created.lock().unwrap_or_else(|p| p.into_inner()).push(name),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn annotation<'a>(claim: &'a PersistentVolumeClaim, key: &str) -> Option<&'a str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The class whose provisioner should provision `claim` now, if any.
fn wanted<'a>(
    claim: &PersistentVolumeClaim,
    classes: &'a BTreeMap<String, StorageClass>,
) -> Option<&'a StorageClass> {
    let spec = claim.spec.as_ref()?;
    if claim.metadata.deletion_timestamp.is_some()
        || spec.volume_name.as_deref().is_some_and(|v| !v.is_empty())
    {
        return None;
    }
    let class = classes.get(spec.storage_class_name.as_deref()?)?;
    if class.provisioner == NO_PROVISIONER
        || annotation(claim, ANN_STORAGE_PROVISIONER) != Some(class.provisioner.as_str())
    {
        return None;
    }
    let delayed = class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
    if delayed && annotation(claim, ANN_SELECTED_NODE).is_none() {
        return None;
    }
    Some(class)
}

/// The node's `kubernetes.io/hostname` label (its name without one).
async fn hostname_of(client: &Client, node: &str) -> Result<String, kube::Error> {
    let got: Option<Node> = Api::<Node>::all(client.clone()).get_opt(node).await?;
    Ok(got
        .and_then(|n| n.metadata.labels)
        .and_then(|l| l.get("kubernetes.io/hostname").cloned())
        .unwrap_or_else(|| node.to_string()))
}

fn volume_for(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    hostname: Option<String>,
) -> PersistentVolume {
    let spec = claim.spec.clone().unwrap_or_default();
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let name = format!("pvc-{uid}");
    let size = spec
        .resources
        .and_then(|r| r.requests)
        .and_then(|r| r.get("storage").cloned());
    let mut pv = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": name,
            "annotations": {"pv.kubernetes.io/provisioned-by": class.provisioner},
        },
        "spec": {
            "capacity": {"storage": size.map_or_else(|| "1Gi".to_string(), |q| q.0)},
            "accessModes": spec.access_modes.unwrap_or_default(),
            "storageClassName": class.metadata.name,
            "persistentVolumeReclaimPolicy": class.reclaim_policy.as_deref().unwrap_or("Delete"),
            "volumeMode": spec.volume_mode.as_deref().unwrap_or("Filesystem"),
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": claim.metadata.namespace,
                "name": claim.metadata.name,
                "uid": uid,
            },
            "csi": {"driver": class.provisioner, "volumeHandle": name},
        },
    });
    if let Some(h) = hostname {
        pv["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [h]}]}
        ]}});
    }
    // Every field above is one PersistentVolume has; the conversion cannot fail.
    serde_json::from_value(pv).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(mode: &str, provisioner: &str) -> StorageClass {
        serde_json::from_value(json!({
            "metadata": {"name": "sc"}, "provisioner": provisioner, "volumeBindingMode": mode,
        }))
        .unwrap()
    }

    fn claim(annotations: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "u1", "annotations": annotations},
            "spec": {"storageClassName": "sc", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "5Gi"}}},
        }))
        .unwrap()
    }

    #[test]
    fn a_delayed_claim_is_provisioned_once_handed_over_and_placed() {
        let classes = BTreeMap::from([(
            "sc".to_string(),
            class("WaitForFirstConsumer", "csi.example.com"),
        )]);
        let handed = json!({ANN_STORAGE_PROVISIONER: "csi.example.com"});
        assert!(wanted(&claim(handed.clone()), &classes).is_none());
        let placed = json!({ANN_STORAGE_PROVISIONER: "csi.example.com", ANN_SELECTED_NODE: "n1"});
        assert!(wanted(&claim(json!({ANN_SELECTED_NODE: "n1"})), &classes).is_none());
        let c = claim(placed);
        let sc = wanted(&c, &classes).expect("provisioned");
        let pv = volume_for(&c, sc, Some("n1".into()));
        assert_eq!(pv.metadata.name.as_deref(), Some("pvc-u1"));
        let spec = pv.spec.unwrap();
        assert_eq!(spec.capacity.unwrap()["storage"].0, "5Gi");
        let r = spec.claim_ref.unwrap();
        assert_eq!(
            (r.namespace.as_deref(), r.name.as_deref(), r.uid.as_deref()),
            (Some("ns"), Some("data"), Some("u1"))
        );
        let terms = spec
            .node_affinity
            .unwrap()
            .required
            .unwrap()
            .node_selector_terms;
        assert_eq!(
            terms[0].match_expressions.as_ref().unwrap()[0].values,
            Some(vec!["n1".to_string()])
        );
        assert_eq!(spec.csi.unwrap().driver, "csi.example.com");
    }

    #[test]
    fn static_classes_and_bound_claims_are_left_alone() {
        let classes = BTreeMap::from([("sc".to_string(), class("Immediate", NO_PROVISIONER))]);
        let c = claim(json!({ANN_STORAGE_PROVISIONER: NO_PROVISIONER}));
        assert!(wanted(&c, &classes).is_none());
        let classes = BTreeMap::from([("sc".to_string(), class("Immediate", "csi.example.com"))]);
        let mut c = claim(json!({ANN_STORAGE_PROVISIONER: "csi.example.com"}));
        assert!(wanted(&c, &classes).is_some());
        c.spec.as_mut().unwrap().volume_name = Some("pv".into());
        assert!(wanted(&c, &classes).is_none());
    }
}
