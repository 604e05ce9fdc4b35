//! [`FaultProxy`]: a loopback HTTP proxy in front of a [`TestCluster`]'s API server that
//! fails, delays and cuts requests, for fault-tolerance tests.
//!
//! A real control plane fails in ways a well-behaved test cluster never does: a watch
//! stream ends mid-event, a request times out, a write succeeds on the server while the
//! client sees a 500 and retries. The proxy makes these happen on purpose, at a chosen
//! rate, reproducibly (every decision is a function of a seed and the request's arrival
//! number), while the client under test talks to what looks like an ordinary API server.
//!
//! Clients reach it over HTTPS on `127.0.0.1`, with the API server's own serving
//! certificate (valid for `127.0.0.1`, signed by the cluster's CA), so a client sees what
//! it would see of a real API server: the same CA, TLS, bearer tokens (client-go does not
//! even send a token to a plain-HTTP server). The proxy forwards over HTTPS to the API
//! server, verifying it with the cluster's CA and passing the client's `Authorization`
//! header through, so authentication and RBAC are the API server's own. Bodies are
//! streamed both ways, never buffered: a watch response is a chunked stream that lives for
//! minutes. Clients get HTTP/2 or HTTP/1.1, whichever they offer (ALPN), as from the API
//! server itself; the proxy speaks HTTP/1.1 to the API server, one request per connection
//! in flight, which keeps a fault on one request from touching another's.
//!
//! Not forwarded: protocol upgrades (`exec`, `attach`, `port-forward`), which berth never
//! uses.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body::{Body, Frame};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use kube::client::ConfigExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

use crate::{io_err, kube_err, write_kubeconfig, Error, TestCluster, PORTS_IN_USE};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;
type Upstream =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, Incoming>;

/// What [`FaultProxy`] does to the traffic. [`Faults::default`] (= [`Faults::none`])
/// forwards everything untouched; set the fields wanted:
///
/// ```
/// # use std::time::Duration;
/// let faults = berth_testcluster::Faults {
///     error_rate: 0.05,
///     cut_watches_every: Some(Duration::from_secs(3)),
///     ..Default::default()
/// };
/// # let _ = faults;
/// ```
///
/// Rates apply to non-watch requests only (a watch is a request with `watch=true` or
/// `watch=1` in its query, or a legacy `/watch/` path); watches fail by being cut. Rates
/// are clamped to `[0, 1]`, and `timeout_rate` to what `error_rate` leaves.
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// The fraction of requests answered by the proxy with a 500 `Status`
    /// (`reason: InternalError`, message "injected by FaultProxy"). Half are answered
    /// without forwarding; the other half only after the API server answered, which it
    /// never sees: a write is done while the client sees it fail (the case that tests
    /// whether retries are idempotent, e.g. a binding retried after it succeeded).
    pub error_rate: f64,
    /// The fraction of requests held for [`Self::timeout`] and then dropped with no answer
    /// (the connection closed), half before forwarding and half after.
    pub timeout_rate: f64,
    /// How long a timed-out request is held before its connection is dropped. A client
    /// whose own timeout is shorter gives up first, which is the point. Default 5 s.
    pub timeout: Duration,
    /// Cut every watch stream (close its connection mid-stream, no clean end) this long
    /// after it started, jittered ±50% so that watches do not all restart together.
    pub cut_watches_every: Option<Duration>,
    /// Added before forwarding every request, watches included.
    pub latency: Duration,
    /// Seeds every decision: with the same seed, the n-th request (in arrival order) gets
    /// the same fate and the n-th watch the same lifetime.
    pub seed: u64,
    /// Requests (watches included) whose path contains one of these are held without an
    /// answer, and never forwarded, for as long as the faults in force name them; when
    /// [`FaultProxy::set_faults`] stops naming them they are dropped unanswered (the client
    /// sees a connection that hung, then broke). `"/"` holds everything: an API server
    /// unreachable from this client only. E.g. `"/leases/"` starves a leader's lease while
    /// its binds go through.
    pub hold_paths: Vec<String>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            error_rate: 0.0,
            timeout_rate: 0.0,
            timeout: Duration::from_secs(5),
            cut_watches_every: None,
            latency: Duration::ZERO,
            seed: 0,
            hold_paths: Vec::new(),
        }
    }
}

impl Faults {
    /// No faults: the proxy is transparent.
    pub fn none() -> Self {
        Self::default()
    }
}

/// What [`FaultProxy`] has done so far (see [`FaultProxy::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FaultStats {
    /// Requests received from clients, watches included.
    pub requests: u64,
    /// Requests the API server answered (whatever the proxy then did with the answer).
    pub forwarded: u64,
    /// 500s injected, both kinds.
    pub errors_injected: u64,
    /// Of those, the ones injected after the API server had handled the request.
    pub errors_after_forwarding: u64,
    /// Requests held and dropped, both kinds.
    pub timeouts_injected: u64,
    /// Of those, the ones dropped after the API server had handled the request.
    pub timeouts_after_forwarding: u64,
    /// Watch streams started (answered 200 by the API server).
    pub watches: u64,
    /// Watch streams cut by the proxy.
    pub watches_cut: u64,
    /// Requests that could not reach the API server (e.g. while it is stopped); their
    /// connections are closed without an answer, as a dead server's would be.
    pub upstream_failures: u64,
    /// Requests that arrived over HTTP/2 (the rest came over HTTP/1.1).
    pub http2_requests: u64,
    /// Requests held by [`Faults::hold_paths`].
    pub held: u64,
    /// Bindings (`POST .../pods/<name>/binding`) the API server accepted (2xx) through
    /// this proxy: what a client bound. Counted even when the client went away before
    /// the answer came, as the binding stands all the same.
    pub bindings: u64,
    /// Requests sent to the API server and not answered yet (a gauge, not a count).
    pub in_flight: u64,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    forwarded: AtomicU64,
    errors_injected: AtomicU64,
    errors_after_forwarding: AtomicU64,
    timeouts_injected: AtomicU64,
    timeouts_after_forwarding: AtomicU64,
    watches: AtomicU64,
    watches_cut: AtomicU64,
    upstream_failures: AtomicU64,
    http2_requests: AtomicU64,
    held: AtomicU64,
    bindings: AtomicU64,
    in_flight: AtomicU64,
    /// Arrival numbers, the inputs of the seeded decisions.
    next_request: AtomicU64,
    next_watch: AtomicU64,
}

fn bump(counter: &AtomicU64) -> u64 {
    counter.fetch_add(1, Ordering::Relaxed)
}

/// What the running proxy reads: the faults, and a generation number that
/// [`FaultProxy::cut_watches_now`] bumps.
#[derive(Clone, Debug)]
struct Control {
    faults: Faults,
    cut_generation: u64,
}

/// State shared by every connection.
struct Shared {
    upstream: Upstream,
    /// `127.0.0.1:<API server port>`.
    authority: http::uri::Authority,
    control: watch::Receiver<Control>,
    counters: Counters,
}

/// A loopback proxy in front of a [`TestCluster`]'s API server that injects faults (see
/// the [`Faults`] fields and the module documentation). It runs on the Tokio runtime
/// [`FaultProxy::start`] was called in, and stops when dropped: its listener closes and
/// every connection through it, watches included, is dropped.
pub struct FaultProxy {
    shared: Arc<Shared>,
    control: watch::Sender<Control>,
    url: String,
    port: u16,
    _port_record: PortRecord,
    dir: PathBuf,
    /// The cluster's admin configuration, pointed at the proxy.
    config: kube::Config,
    kubeconfig: PathBuf,
    accept_loop: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("url", &self.url)
            .field("faults", &self.faults())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // The accept loop owns the connection tasks (a JoinSet): aborting it aborts them.
        // Watch streams' relay tasks end when `control` is dropped.
        self.accept_loop.abort();
    }
}

/// The proxy's port, recorded in `PORTS_IN_USE` (see [`bind_loopback`]) while this lives.
struct PortRecord(u16);

impl Drop for PortRecord {
    fn drop(&mut self) {
        let mut ports = PORTS_IN_USE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = ports.as_mut() {
            set.remove(&self.0);
        }
    }
}

impl FaultProxy {
    /// Starts a proxy to `cluster`'s API server on `127.0.0.1:<free port>`. Call inside a
    /// Tokio runtime (its tasks are spawned there).
    pub async fn start(cluster: &TestCluster, faults: Faults) -> Result<FaultProxy, Error> {
        let acceptor = tls_acceptor(cluster.dir())?;
        let connector = cluster
            .kube_config()
            .rustls_https_connector()
            .map_err(kube_err("building the proxy's TLS connector"))?;
        let upstream = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .build(connector);
        let authority = cluster
            .server_url()
            .trim_start_matches("https://")
            .parse::<http::uri::Authority>()
            .map_err(|e| io_err("parsing the API server's address")(std::io::Error::other(e)))?;
        let (listener, port_record) = bind_loopback().await?;
        let port = port_record.0;
        let (control, control_rx) = watch::channel(Control {
            faults: sanitize(faults),
            cut_generation: 0,
        });
        let shared = Arc::new(Shared {
            upstream,
            authority,
            control: control_rx,
            counters: Counters::default(),
        });
        let accept_loop = tokio::spawn(accept_loop(listener, acceptor, shared.clone()));
        let url = format!("https://127.0.0.1:{port}");
        let mut config = cluster.kube_config();
        config.cluster_url = Uri::from_maybe_shared(url.clone())
            .map_err(|e| io_err("parsing the proxy URL")(std::io::Error::other(e)))?;
        let dir = cluster.dir().to_path_buf();
        let kubeconfig = dir.join(format!("kubeconfig-proxy-{port}"));
        let proxy = FaultProxy {
            shared,
            control,
            url,
            port,
            _port_record: port_record,
            dir,
            config,
            kubeconfig,
            accept_loop,
        };
        proxy.write_kubeconfig(&proxy.kubeconfig, crate::ADMIN_USER, cluster.admin_token())?;
        Ok(proxy)
    }

    /// Replaces the faults, for requests from now on and for the watches already open
    /// (their cut times are recomputed from when each started).
    pub fn set_faults(&self, faults: Faults) {
        self.control
            .send_modify(|control| control.faults = sanitize(faults));
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        self.control.borrow().faults.clone()
    }

    /// Cuts every watch stream open now (new ones are not affected).
    pub fn cut_watches_now(&self) {
        self.control
            .send_modify(|control| control.cut_generation += 1);
    }

    /// The counters so far.
    pub fn stats(&self) -> FaultStats {
        let c = &self.shared.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        FaultStats {
            requests: get(&c.requests),
            forwarded: get(&c.forwarded),
            errors_injected: get(&c.errors_injected),
            errors_after_forwarding: get(&c.errors_after_forwarding),
            timeouts_injected: get(&c.timeouts_injected),
            timeouts_after_forwarding: get(&c.timeouts_after_forwarding),
            watches: get(&c.watches),
            watches_cut: get(&c.watches_cut),
            upstream_failures: get(&c.upstream_failures),
            http2_requests: get(&c.http2_requests),
            held: get(&c.held),
            bindings: get(&c.bindings),
            in_flight: get(&c.in_flight),
        }
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// An admin kubeconfig whose server is the proxy (with the cluster's CA), for a berth
    /// process or kubectl under test.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Writes a kubeconfig for the proxy that authenticates with `token` (e.g. a
    /// ServiceAccount's, from [`TestCluster::service_account_token`]) and returns its path.
    pub fn kubeconfig_for_token(&self, token: &str) -> Result<PathBuf, Error> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = bump(&NEXT);
        let path = self.dir.join(format!("kubeconfig-proxy-{}-{n}", self.port));
        self.write_kubeconfig(&path, "token-user", token)?;
        Ok(path)
    }

    fn write_kubeconfig(&self, path: &Path, user: &str, token: &str) -> Result<(), Error> {
        write_kubeconfig(path, &self.url, Some(&self.dir.join("ca.crt")), user, token)
    }

    /// The admin client configuration ([`TestCluster::kube_config`]), pointed at the proxy.
    pub fn kube_config(&self) -> kube::Config {
        self.config.clone()
    }

    /// An admin client through the proxy. Call inside a Tokio runtime.
    pub fn client(&self) -> Result<kube::Client, Error> {
        kube::Client::try_from(self.kube_config())
            .map_err(kube_err("building a client for the proxy"))
    }
}

/// A listener on a free loopback port that is none of this process's clusters' ports: a
/// cluster whose API server is stopped does not hold its port, and the proxy must not
/// take it. The proxy's port is recorded too, so no cluster picks it meanwhile.
async fn bind_loopback() -> Result<(tokio::net::TcpListener, PortRecord), Error> {
    let mut rejected = Vec::new();
    loop {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(io_err("binding the proxy's port"))?;
        let port = listener
            .local_addr()
            .map_err(io_err("reading the proxy's address"))?
            .port();
        let mut ports = PORTS_IN_USE.lock().unwrap_or_else(|p| p.into_inner());
        if ports.get_or_insert_with(Default::default).insert(port) {
            return Ok((listener, PortRecord(port)));
        }
        // Held until a good one is found, so the kernel does not hand it out again.
        rejected.push(listener);
    }
}

/// TLS with the API server's serving certificate and key from the cluster's directory
/// (valid for `127.0.0.1` on any port).
fn tls_acceptor(dir: &Path) -> Result<TlsAcceptor, Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let tls_err = |context: &str| {
        let context = context.to_string();
        move |e: BoxError| Error::Tls { context, source: e }
    };
    let cert_file = dir.join("apiserver.crt");
    let key_file = dir.join("apiserver.key");
    let chain = CertificateDer::pem_file_iter(&cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| tls_err(&format!("reading {}", cert_file.display()))(e.into()))?;
    let key = PrivateKeyDer::from_pem_file(&key_file)
        .map_err(|e| tls_err(&format!("reading {}", key_file.display()))(e.into()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_no_client_auth().with_single_cert(chain, key))
        .map_err(|e| tls_err("configuring the proxy's TLS")(e.into()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn held_by(faults: &Faults, path: &str) -> bool {
    faults.hold_paths.iter().any(|p| path.contains(p.as_str()))
}

fn sanitize(mut faults: Faults) -> Faults {
    let unit = |x: f64| if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) };
    faults.error_rate = unit(faults.error_rate);
    faults.timeout_rate = unit(faults.timeout_rate).min(1.0 - faults.error_rate);
    faults
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let shared = shared.clone();
                    let acceptor = acceptor.clone();
                    connections.spawn(async move {
                        // A failed handshake is the client's problem; it sees it.
                        if let Ok(stream) = acceptor.accept(stream).await {
                            serve_connection(stream, shared).await;
                        }
                    });
                }
                // Out of file descriptors or the like: give it a moment.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            },
            Some(_) = connections.join_next() => {}
        }
    }
}

async fn serve_connection(
    stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    shared: Arc<Shared>,
) {
    let service = hyper::service::service_fn(move |req| handle(shared.clone(), req));
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // No limit on a keep-alive connection's idle time: closing one as the client reuses
    // it would be a fault nobody asked for.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None);
    // The API server's own stream limit (Go's default), so a client that multiplexes
    // meets the same back-pressure here as there.
    builder.http2().max_concurrent_streams(250);
    let _ = builder
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// Returned by the service to make hyper drop the request without an answer: the
/// connection closed (HTTP/1.1) or the stream reset (HTTP/2).
#[derive(Debug, thiserror::Error)]
enum Abort {
    #[error("FaultProxy: request dropped (injected time-out)")]
    Timeout,
    #[error("FaultProxy: the API server is unreachable: {0}")]
    Unreachable(String),
}

/// Yielded by a watch body to make hyper end it mid-stream (connection closed or stream
/// reset).
#[derive(Debug, thiserror::Error)]
#[error("FaultProxy: watch cut")]
struct Cut;

/// The fate of one non-watch request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Pass,
    Error { after: bool },
    Timeout { after: bool },
}

/// SplitMix64: a well-mixed 64-bit hash of `x`, enough to turn (seed, arrival number)
/// into independent-looking draws.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A uniform draw in `[0, 1)` from the top 53 bits of `h`.
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

fn fate(faults: &Faults, n: u64) -> Fate {
    let h = mix(faults.seed ^ mix(n));
    let u = unit(h);
    let after = mix(h) & 1 == 1;
    if u < faults.error_rate {
        Fate::Error { after }
    } else if u < faults.error_rate + faults.timeout_rate {
        Fate::Timeout { after }
    } else {
        Fate::Pass
    }
}

/// The lifetime of the n-th watch: `every` jittered to `[0.5, 1.5) * every`.
fn watch_lifetime(every: Duration, seed: u64, n: u64) -> Duration {
    // "WATCH" in ASCII: draws apart from the requests' ones for the same (seed, n).
    let u = unit(mix(mix(seed) ^ mix(n ^ 0x0057_4154_4348)));
    every.mul_f64(0.5 + u)
}

/// `watch=true|1|t|T|TRUE|True` in the query (Go's `strconv.ParseBool`, as the API server
/// reads it), or a legacy `/api/v1/watch/...`, `/apis/g/v/watch/...` path.
fn is_watch(uri: &Uri) -> bool {
    let in_query = uri.query().is_some_and(|q| {
        q.split('&').any(|kv| {
            matches!(
                kv.split_once('='),
                Some(("watch", "true" | "1" | "t" | "T" | "TRUE" | "True"))
            )
        })
    });
    let mut segments = uri.path().split('/').filter(|s| !s.is_empty());
    let legacy = match segments.next() {
        Some("api") => segments.nth(1) == Some("watch"),
        Some("apis") => segments.nth(2) == Some("watch"),
        _ => false,
    };
    in_query || legacy
}

/// Hop-by-hop headers (RFC 9110 7.6.1), which belong to one connection and must not be
/// forwarded; hyper sets its own framing for the next hop.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
}

/// A `Status` answer, as the API server would write it.
fn status_response(code: StatusCode, reason: &str, message: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    })
    .to_string();
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never: Infallible| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn injected_error() -> Response<ProxyBody> {
    status_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        "injected by FaultProxy",
    )
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<ProxyBody>, Abort> {
    let counters = &shared.counters;
    bump(&counters.requests);
    if req.version() == http::Version::HTTP_2 {
        bump(&counters.http2_requests);
    }
    let faults = shared.control.borrow().faults.clone();
    if held_by(&faults, req.uri().path()) {
        bump(&counters.held);
        return Err(hold(&shared, req.uri().path()).await);
    }
    if !faults.latency.is_zero() {
        tokio::time::sleep(faults.latency).await;
    }
    let watch = is_watch(req.uri());
    let fate = if watch {
        Fate::Pass
    } else {
        fate(&faults, bump(&counters.next_request))
    };
    match fate {
        Fate::Error { after: false } => {
            bump(&counters.errors_injected);
            return Ok(injected_error());
        }
        Fate::Timeout { after: false } => {
            bump(&counters.timeouts_injected);
            tokio::time::sleep(faults.timeout).await;
            return Err(Abort::Timeout);
        }
        _ => {}
    }

    let binding = req.method() == http::Method::POST && req.uri().path().ends_with("/binding");
    let (mut parts, body) = req.into_parts();
    parts.uri = match upstream_uri(&shared, &parts.uri) {
        Ok(uri) => uri,
        Err(message) => {
            return Ok(status_response(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &message,
            ))
        }
    };
    parts.version = http::Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    // hyper writes the upstream's own Host from the URI.
    parts.headers.remove(header::HOST);
    let response = match forward(&shared, Request::from_parts(parts, body), binding).await {
        Ok(response) => response,
        Err(abort) => return Err(abort),
    };

    match fate {
        Fate::Error { after: true } => {
            bump(&counters.errors_injected);
            bump(&counters.errors_after_forwarding);
            return Ok(injected_error());
        }
        Fate::Timeout { after: true } => {
            bump(&counters.timeouts_injected);
            bump(&counters.timeouts_after_forwarding);
            drop(response);
            tokio::time::sleep(faults.timeout).await;
            return Err(Abort::Timeout);
        }
        _ => {}
    }

    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let body = if watch && parts.status == StatusCode::OK {
        bump(&counters.watches);
        relay_watch(&shared, body)
    } else {
        body.map_err(BoxError::from).boxed_unsync()
    };
    Ok(Response::from_parts(parts, body))
}

/// Sends a request to the API server on a task of its own, so that it completes, and is
/// counted, even when its client hangs up first: a real network does not take a request
/// back from the server once it is sent, and a binding sent by a client that then exits
/// still binds.
async fn forward(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    binding: bool,
) -> Result<Response<Incoming>, Abort> {
    let task_shared = Arc::clone(shared);
    let counters = &shared.counters;
    bump(&counters.in_flight);
    let sent = tokio::spawn(async move {
        let counters = &task_shared.counters;
        let answer = task_shared.upstream.request(req).await;
        match &answer {
            Ok(response) => {
                bump(&counters.forwarded);
                if binding && response.status().is_success() {
                    bump(&counters.bindings);
                }
            }
            Err(_) => {
                bump(&counters.upstream_failures);
            }
        }
        counters.in_flight.fetch_sub(1, Ordering::Relaxed);
        answer
    });
    match sent.await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => Err(Abort::Unreachable(e.to_string())),
        Err(e) => Err(Abort::Unreachable(e.to_string())),
    }
}

/// A request held by the faults: it waits until they no longer hold its path (or the
/// proxy stops), and then times out, as a request to a stalled server does.
async fn hold(shared: &Shared, path: &str) -> Abort {
    let mut control = shared.control.clone();
    loop {
        if control.changed().await.is_err() {
            return Abort::Timeout;
        }
        if !held_by(&control.borrow_and_update().faults, path) {
            return Abort::Timeout;
        }
    }
}

/// The request's URI on the upstream API server; why not when it cannot be built.
fn upstream_uri(shared: &Shared, uri: &Uri) -> Result<Uri, String> {
    let path = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    Uri::builder()
        .scheme("https")
        .authority(shared.authority.clone())
        .path_and_query(path)
        .build()
        .map_err(|e| format!("FaultProxy: cannot forward this request: {e}"))
}

/// The body of a watch response, relayed by a task that cuts it when its time comes
/// (see [`Faults::cut_watches_every`], [`FaultProxy::cut_watches_now`]). The task reads the
/// faults as they change, so a watch opened before `set_faults` is cut too.
fn relay_watch(shared: &Arc<Shared>, mut upstream: Incoming) -> ProxyBody {
    let started = Instant::now();
    let n = bump(&shared.counters.next_watch);
    let mut control = shared.control.clone();
    let generation = control.borrow_and_update().cut_generation;
    let shared = shared.clone();
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
    tokio::spawn(async move {
        loop {
            let (deadline, cut_now) = {
                let c = control.borrow_and_update();
                let deadline = c
                    .faults
                    .cut_watches_every
                    .map(|every| started + watch_lifetime(every, c.faults.seed, n));
                (deadline, c.cut_generation != generation)
            };
            let expired = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            if cut_now {
                bump(&shared.counters.watches_cut);
                let _ = tx.send(Err(Box::new(Cut))).await;
                return;
            }
            tokio::select! {
                frame = upstream.frame() => match frame {
                    Some(Ok(frame)) => {
                        if tx.send(Ok(frame)).await.is_err() {
                            return; // the client went away
                        }
                    }
                    Some(Err(e)) => {
                        // The API server went away: cut the client's stream the same way.
                        let _ = tx.send(Err(Box::new(e))).await;
                        return;
                    }
                    None => return, // a clean end: dropping `tx` ends the body cleanly
                },
                () = expired => {
                    bump(&shared.counters.watches_cut);
                    let _ = tx.send(Err(Box::new(Cut))).await;
                    return;
                }
                changed = control.changed() => {
                    if changed.is_err() {
                        return; // the proxy was dropped
                    }
                }
                () = tx.closed() => return,
            }
        }
    });
    ChannelBody(rx).boxed_unsync()
}

/// A body fed by a channel; an `Err` item makes hyper abort the connection.
struct ChannelBody(mpsc::Receiver<Result<Frame<Bytes>, BoxError>>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_requests_are_recognised() {
        let watch = |s: &str| is_watch(&s.parse::<Uri>().unwrap());
        assert!(watch("/api/v1/pods?watch=true&resourceVersion=5"));
        assert!(watch("/api/v1/namespaces/a/pods?labelSelector=x&watch=1"));
        assert!(watch("/api/v1/watch/pods"));
        assert!(watch(
            "/apis/scheduling.koordinator.sh/v1alpha1/watch/reservations"
        ));
        assert!(!watch("/api/v1/pods?watch=false"));
        assert!(!watch("/api/v1/pods?allowWatchBookmarks=true"));
        assert!(!watch("/api/v1/namespaces/watch/pods"));
        assert!(!watch("/apis/apps/v1/namespaces/watch"));
    }

    #[test]
    fn fates_follow_the_rates_and_the_seed() {
        let faults = Faults {
            error_rate: 0.1,
            timeout_rate: 0.05,
            seed: 7,
            ..Faults::default()
        };
        let fates: Vec<Fate> = (0..20_000).map(|n| fate(&faults, n)).collect();
        let count = |f: fn(&Fate) -> bool| fates.iter().filter(|x| f(x)).count();
        let errors = count(|f| matches!(f, Fate::Error { .. }));
        let errors_after = count(|f| matches!(f, Fate::Error { after: true }));
        let timeouts = count(|f| matches!(f, Fate::Timeout { .. }));
        assert!((1800..2200).contains(&errors), "{errors}");
        assert!((800..1200).contains(&errors_after), "{errors_after}");
        assert!((850..1150).contains(&timeouts), "{timeouts}");
        let again: Vec<Fate> = (0..20_000).map(|n| fate(&faults, n)).collect();
        assert_eq!(fates, again);
        let other = Faults { seed: 8, ..faults };
        let differ = (0..20_000).filter(|&n| fate(&other, n) != fates[n as usize]);
        assert!(differ.count() > 1000);
    }

    #[test]
    fn watch_lifetimes_are_jittered_by_half() {
        let every = Duration::from_secs(2);
        let lifetimes: Vec<Duration> = (0..1000).map(|n| watch_lifetime(every, 3, n)).collect();
        assert!(lifetimes
            .iter()
            .all(|d| *d >= Duration::from_secs(1) && *d < Duration::from_secs(3)));
        assert!(lifetimes.iter().any(|d| *d < Duration::from_millis(1100)));
        assert!(lifetimes.iter().any(|d| *d > Duration::from_millis(2900)));
    }

    #[test]
    fn rates_are_clamped() {
        let f = sanitize(Faults {
            error_rate: 0.7,
            timeout_rate: 0.6,
            ..Faults::default()
        });
        assert_eq!(f.error_rate, 0.7);
        assert!((f.timeout_rate - 0.3).abs() < 1e-9, "{}", f.timeout_rate);
        let f = sanitize(Faults {
            error_rate: f64::NAN,
            timeout_rate: -1.0,
            ..Faults::default()
        });
        assert_eq!((f.error_rate, f.timeout_rate), (0.0, 0.0));
    }
}
