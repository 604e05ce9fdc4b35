//! The connection to the API server: HTTP/2 when the server offers it, as client-go does.
//!
//! kube-rs's default client speaks HTTP/1.1 only, so every request in flight holds a TCP
//! and TLS connection of its own: with a few hundred binds and events in flight that is a
//! few hundred TLS handshakes, paid on both sides at the worst moment (a burst), and as
//! many connections kept open afterwards. client-go (and so kube-scheduler) multiplexes
//! every request and watch over one HTTP/2 connection. This module builds the same stack
//! kube-rs builds (base URI, authentication, extra headers) on a hyper client whose TLS
//! offers `h2` first; a server that only speaks HTTP/1.1 still gets HTTP/1.1.
//!
//! What differs from kube-rs's stack: no socket read/write time-outs (kube-rs's 295 s guard
//! a watch on a connection of its own; on one multiplexed connection a socket time-out
//! would cut every request at once), replaced by HTTP/2 pings, as client-go's health check.
//! The test proxy (`berth-testcluster`'s FaultProxy) offers HTTP/2 too, so the fault tests
//! run on this transport.

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ConfigExt};
use kube::Config;
use tower::{BoxError, ServiceBuilder, ServiceExt};

use crate::error::Error;

/// A kube client builder on an HTTP/2-capable connection to `config`'s server.
pub fn builder(config: &Config) -> Result<kube::client::ClientBuilder<Service>, Error> {
    let tls = config.rustls_client_config()?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let https = match &config.tls_server_name {
        Some(name) => {
            let name = rustls_pki_types::ServerName::try_from(name.clone())
                .map_err(|e| Error::Kubeconfig(format!("tls-server-name {name:?}: {e}")))?;
            https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => https,
    };
    let https = https.enable_all_versions().wrap_connector(http);
    let client: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            // One connection carries every watch and write, so a connection that died
            // without a FIN (a vanished peer, a dropped NAT entry) must be noticed: ping it
            // when idle for 30 s and give up after 15 s without an answer, client-go's
            // HTTP/2 health check (ReadIdleTimeout, PingTimeout).
            .http2_keep_alive_interval(Some(Duration::from_secs(30)))
            .http2_keep_alive_timeout(Duration::from_secs(15))
            .http2_keep_alive_while_idle(true)
            // Large watch LISTs arrive on the same connection as binds: let the windows
            // grow with the bandwidth instead of stalling on fixed 64 KiB ones.
            .http2_adaptive_window(true)
            .build(https);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client)
        .map_response(|response: ::http::Response<hyper::body::Incoming>| {
            response.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(body, BoxError::from))
                    as Box<kube::client::DynBody>
            })
        })
        .boxed();
    Ok(kube::client::ClientBuilder::new(
        service,
        config.default_namespace.clone(),
    ))
}

/// The service [`builder`] makes.
pub type Service = tower::util::BoxService<
    ::http::Request<Body>,
    ::http::Response<Box<kube::client::DynBody>>,
    BoxError,
>;
