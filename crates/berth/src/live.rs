//! `berth explain --kubeconfig`: the scheduler's state built from a live cluster's LISTs,
//! read-only (no watch, no write), then the same explanation as on a scenario file.

use std::sync::Arc;

use berth_core::object::Object;
use berth_kube::retry::{retry, Backoff};
use berth_sim::explain::{render, state_from_objects, ExplainFormat};
use berth_sim::RunOutput;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::api::{Api, DynamicObject, ListParams};
use kube::Client;

/// Lists every kind the scheduler reads and returns them as core objects. Custom kinds
/// whose CRD is not served are skipped (as `berth run` does); an object berth cannot read
/// is reported on standard error and left out. Transient answers (5xx, 429 such as "storage
/// is (re)initializing" from an API server that just started serving a CRD, broken
/// connections) are retried with back-off, as client-go retries them.
pub async fn list_objects(
    client: &Client,
    warnings: &mut Vec<String>,
) -> anyhow::Result<Vec<Object>> {
    let lp = ListParams::default();
    let backoff = Backoff {
        attempts: 10,
        ..Backoff::default()
    };
    let mut out = Vec::new();
    macro_rules! list {
        ($ty:ty, $variant:ident) => {
            let api: Api<$ty> = Api::all(client.clone());
            for o in retry(backoff, || api.list(&lp)).await?.items {
                out.push(Object::$variant(Arc::new(o)));
            }
        };
    }
    list!(PriorityClass, PriorityClass);
    list!(Namespace, Namespace);
    list!(Node, Node);
    list!(CSINode, CsiNode);
    list!(StorageClass, StorageClass);
    list!(PersistentVolume, PersistentVolume);
    list!(PersistentVolumeClaim, PersistentVolumeClaim);
    list!(PodDisruptionBudget, PodDisruptionBudget);
    list!(Pod, Pod);
    let served = berth_kube::kinds::Served::discover(client).await;
    if let Some(ar) = &served.nrt {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
        for o in retry(backoff, || api.list(&lp)).await?.items {
            match berth_kube::kinds::nrt(o) {
                Ok(obj) => out.push(obj),
                Err(e) => warnings.push(format!("warning: {e}")),
            }
        }
    }
    if let Some(ar) = &served.reservations {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
        for o in retry(backoff, || api.list(&lp)).await?.items {
            match berth_kube::kinds::reservation(o) {
                Ok(obj) => out.push(obj),
                Err(e) => warnings.push(format!("warning: {e}")),
            }
        }
    }
    Ok(out)
}

/// Explains `target` on the cluster `kubeconfig` points at.
pub fn explain(
    kubeconfig: &str,
    config: Option<&str>,
    target: &str,
    format: ExplainFormat,
) -> RunOutput {
    let fail = |code: i32, message: String| RunOutput {
        stdout: String::new(),
        stderr: format!("error: {message}\n"),
        code,
    };
    let target = match berth_core::explain::Target::parse(target) {
        Ok(t) => t,
        Err(e) => return fail(2, e.to_string()),
    };
    let profiles = match config {
        Some(path) => match berth_sim::load_config(path) {
            Ok(p) => p,
            Err(e) => return fail(2, e.to_string()),
        },
        None => Vec::new(),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(1, format!("starting the async runtime: {e}")),
    };
    let mut warnings = Vec::new();
    let listed = runtime.block_on(async {
        let settings = berth_kube::settings::ClientConnection::default();
        let client = berth_kube::client::connect(Some(kubeconfig), &settings).await?;
        list_objects(&client, &mut warnings).await
    });
    let objects = match listed {
        Ok(o) => o,
        Err(e) => return fail(1, format!("listing the cluster: {e:#}")),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let core = state_from_objects(profiles, objects, now);
    let mut stderr: String = warnings.iter().map(|w| format!("{w}\n")).collect();
    match berth_core::explain::explain(&core, &target, now) {
        Ok(e) => match render(&e, format) {
            Ok(stdout) => RunOutput {
                stdout,
                stderr,
                code: 0,
            },
            Err(err) => fail(1, err.to_string()),
        },
        Err(e) => {
            stderr.push_str(&format!("error: {e}\n"));
            RunOutput {
                stdout: String::new(),
                stderr,
                code: 2,
            }
        }
    }
}
