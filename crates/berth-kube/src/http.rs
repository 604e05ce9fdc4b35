//! `/metrics`, `/healthz`, `/livez` and `/readyz` on one port, as kube-scheduler serves them
//! on its secure port (here plain HTTP; put it behind the pod network's policies).
//!
//! `/readyz` answers 200 only once the first LIST of every watched kind is in and the core
//! has been told so: before that berth schedules nothing, and a rollout should wait. It
//! fails, too, while the API server refuses the leader election lease (missing RBAC): such a
//! replica can never schedule.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use crate::error::Error;
use crate::metrics::Metrics;

/// What the endpoints read.
#[derive(Debug, Clone)]
pub struct Health {
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// Set once the core has its first view of every watched kind.
    pub ready: Arc<AtomicBool>,
    /// Cleared when this replica led and could not renew its lease.
    pub healthy: Arc<AtomicBool>,
    /// Cleared while the API server refuses the lease (403).
    pub lease_ok: Arc<AtomicBool>,
}

/// The router, for tests and for [`serve`].
pub fn router(health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/livez", get(ok))
        .route("/readyz", get(readyz))
        .with_state(health)
}

/// Binds `addr` and serves until `shutdown` resolves. Returns the bound address (port 0 picks
/// a free one) once listening.
pub async fn serve(
    addr: SocketAddr,
    health: Health,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), Error> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Serve { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| Error::Serve { addr, source })?;
    let app = router(health);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "metrics and health server stopped");
        }
    });
    Ok((bound, task))
}

async fn ok() -> &'static str {
    "ok"
}

async fn healthz(State(h): State<Health>) -> impl IntoResponse {
    if h.healthy.load(Ordering::Acquire) {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "leader election: the lease could not be renewed",
        )
    }
}

async fn readyz(State(h): State<Health>) -> impl IntoResponse {
    if !h.lease_ok.load(Ordering::Acquire) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "leader election: the API server refuses the lease (403); see the log for the RBAC berth needs",
        );
    }
    if h.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the first list of every watched kind",
        )
    }
}

async fn metrics(State(h): State<Health>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.metrics.encode(),
    )
}
