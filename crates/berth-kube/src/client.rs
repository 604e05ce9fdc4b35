//! The API clients: kubeconfig or in-cluster configuration, and `clientConnection`'s
//! qps/burst as token buckets (client-go's rate limiter), one per client.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
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
    /// Bindings: `main`'s connection and bucket, but the token taken by the caller
    /// ([`Bucket::acquire`]) so that it checks the node still exists after waiting for it.
    /// `None`: `main` is unthrottled, bind through it.
    pub bind: Option<(Client, Arc<Bucket>)>,
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
            bind: None,
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
    let (main, bind) = if settings.qps > 0.0 {
        let bucket = Bucket::new(settings.qps, settings.burst);
        // Binds on a connection of their own, their tokens from the writes' bucket.
        let unthrottled = crate::transport::builder(&config)?.build();
        let layered = crate::transport::builder(&config)?
            .with_layer(&ThrottleLayer::shared(bucket.clone()))
            .build();
        (layered, Some((unthrottled, bucket)))
    } else {
        (crate::transport::builder(&config)?.build(), None)
    };
    Ok(Clients {
        main,
        events: throttled(&config, settings)?,
        leader: crate::transport::builder(&config)?.build(),
        bind,
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

/// client-go's token bucket: `burst` requests at once, then `qps` per second. Shared by the
/// [`Throttle`] in front of a client and by callers that must take their token before a
/// last check (a bind checks its node still exists after its wait, not before).
#[derive(Debug)]
pub struct Bucket {
    qps: f64,
    burst: f64,
    state: std::sync::Mutex<(f64, Instant)>,
}

impl Bucket {
    /// A bucket of `burst` tokens (at least one) refilled at `qps` per second.
    pub fn new(qps: f64, burst: u32) -> Arc<Self> {
        let burst = f64::from(burst.max(1));
        Arc::new(Self {
            qps,
            burst,
            state: std::sync::Mutex::new((burst, Instant::now())),
        })
    }

    /// Takes a token if one is there; otherwise how long until one is.
    fn try_take(&self) -> Result<(), Duration> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let elapsed = now.duration_since(state.1).as_secs_f64();
        state.1 = now;
        state.0 = (state.0 + elapsed * self.qps).min(self.burst);
        if state.0 >= 1.0 {
            state.0 -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - state.0) / self.qps))
        }
    }

    /// Waits for a token and takes it.
    pub async fn acquire(&self) {
        while let Err(wait) = self.try_take() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// Puts a [`Bucket`] in front of a client.
#[derive(Debug, Clone)]
pub struct ThrottleLayer {
    bucket: Arc<Bucket>,
}

impl ThrottleLayer {
    /// A bucket of `burst` tokens (at least one) refilled at `qps` per second.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            bucket: Bucket::new(qps, burst),
        }
    }

    /// A layer taking its tokens from `bucket`.
    pub fn shared(bucket: Arc<Bucket>) -> Self {
        Self { bucket }
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Throttle {
            inner,
            bucket: self.bucket.clone(),
            sleep: None,
            reserved: false,
        }
    }
}

/// The service [`ThrottleLayer`] makes.
pub struct Throttle<S> {
    inner: S,
    bucket: Arc<Bucket>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// A token is taken for the next `call`.
    reserved: bool,
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
            match self.bucket.try_take() {
                Ok(()) => self.reserved = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
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
