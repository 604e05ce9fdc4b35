//! The API client: kubeconfig or in-cluster configuration, and `clientConnection`'s
//! qps/burst as a token bucket in front of every request (client-go's rate limiter).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

use crate::error::Error;
use crate::settings::ClientConnection;

/// The three clients kube-scheduler makes (cmd/kube-scheduler/app/options' `createClients`,
/// and client-go's resource lock for the lease), each on a connection and a rate limiter of
/// its own, so that no kind of request waits behind another: a flood of events never delays
/// a bind, and neither ever delays the lease's renewal.
#[derive(Clone)]
pub struct Clients {
    /// Watches and writes (binds, conditions, statuses, deletes): `clientConnection`'s
    /// qps/burst.
    pub main: Client,
    /// Events: a token bucket of their own, with the same qps/burst.
    pub events: Client,
    /// The lease: unthrottled (one call every `retryPeriod`); the elector bounds each call
    /// by [`crate::settings::LeaderElection::call_timeout`].
    pub leader: Client,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients").finish_non_exhaustive()
    }
}

/// One client for everything (tests that build their own client).
impl From<Client> for Clients {
    fn from(client: Client) -> Self {
        Self {
            main: client.clone(),
            events: client.clone(),
            leader: client,
        }
    }
}

/// Builds the client: `kubeconfig` (the `--kubeconfig` flag, else `clientConnection.kubeconfig`)
/// if given, else the in-cluster configuration, else `$KUBECONFIG` / `~/.kube/config`.
pub async fn connect(
    kubeconfig: Option<&str>,
    settings: &ClientConnection,
) -> Result<Client, Error> {
    let config = load(kubeconfig, settings).await?;
    throttled(&config, settings)
}

/// The three [`Clients`] for `kubeconfig` (as [`connect`]).
pub async fn connect_all(
    kubeconfig: Option<&str>,
    settings: &ClientConnection,
) -> Result<Clients, Error> {
    let config = load(kubeconfig, settings).await?;
    Ok(Clients {
        main: throttled(&config, settings)?,
        events: throttled(&config, settings)?,
        leader: crate::transport::builder(&config)?.build(),
    })
}

async fn load(kubeconfig: Option<&str>, settings: &ClientConnection) -> Result<Config, Error> {
    let path = kubeconfig
        .filter(|p| !p.is_empty())
        .or(Some(settings.kubeconfig.as_str()).filter(|p| !p.is_empty()));
    match path {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| Error::Kubeconfig(format!("{path}: {e}")))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| Error::Kubeconfig(format!("{path}: {e}")))
        }
        None => Config::infer()
            .await
            .map_err(|e| Error::Kubeconfig(e.to_string())),
    }
}

/// A client on a connection of its own behind a token bucket of its own.
fn throttled(config: &Config, settings: &ClientConnection) -> Result<Client, Error> {
    let builder = crate::transport::builder(config)?;
    Ok(if settings.qps > 0.0 {
        builder
            .with_layer(&ThrottleLayer::new(settings.qps, settings.burst))
            .build()
    } else {
        builder.build()
    })
}

/// client-go's token bucket: `burst` requests at once, then `qps` per second.
#[derive(Debug, Clone, Copy)]
pub struct ThrottleLayer {
    qps: f64,
    burst: f64,
}

impl ThrottleLayer {
    /// A bucket of `burst` tokens (at least one) refilled at `qps` per second.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst: f64::from(burst.max(1)),
        }
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Throttle {
            inner,
            qps: self.qps,
            burst: self.burst,
            tokens: self.burst,
            last: Instant::now(),
            sleep: None,
            reserved: false,
        }
    }
}

/// The service [`ThrottleLayer`] makes. kube's client puts its stack behind a buffer, so one
/// instance sees every request and the bucket needs no lock.
pub struct Throttle<S> {
    inner: S,
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
    /// A token is taken for the next `call`.
    reserved: bool,
}

impl<S> Throttle<S> {
    fn refill(&mut self) {
        let now = Instant::now();
        let elapsed = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
    }
}

impl<S, R> Service<R> for Throttle<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.reserved {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            self.refill();
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                self.reserved = true;
            } else {
                let wait = (1.0 - self.tokens) / self.qps;
                self.sleep = Some(Box::pin(tokio::time::sleep(Duration::from_secs_f64(wait))));
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.reserved = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

    #[tokio::test(start_paused = true)]
    async fn lets_a_burst_through_then_paces_at_qps() {
        let svc = tower::service_fn(|_: ()| async { Ok::<_, Infallible>(Instant::now()) });
        let mut svc = ThrottleLayer::new(10.0, 3).layer(svc);
        let start = Instant::now();
        let mut times = Vec::new();
        for _ in 0..5 {
            let t = svc.ready().await.unwrap().call(()).await.unwrap();
            times.push(t.duration_since(start));
        }
        // Three at once, then one every 100ms.
        assert_eq!(times[2], Duration::ZERO);
        assert!(
            times[3] >= Duration::from_millis(99) && times[3] <= Duration::from_millis(101),
            "{times:?}"
        );
        assert!(
            times[4] >= Duration::from_millis(199) && times[4] <= Duration::from_millis(201),
            "{times:?}"
        );
    }
}
