//! How API answers are classified and when a request is tried again.
//!
//! client-go's rule of thumb, which kube-scheduler's writes follow: 5xx, 429 and transport
//! failures are transient and retried with exponential back-off; 4xx answers are final and the
//! caller decides what they mean (a 409 on a binding is a failed bind, a 404 on a delete is
//! success).

use std::future::Future;
use std::time::Duration;

/// What an API answer means for the operation that got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// 404.
    NotFound,
    /// 409 (a conflict, an already-exists, a failed precondition).
    Conflict,
    /// 422 or another 4xx: the request itself is wrong; retrying cannot help.
    Rejected,
    /// 5xx, 429, a time-out or a broken connection: worth another try.
    Transient,
}

/// Classifies an error of the kube client.
pub fn classify(e: &kube::Error) -> Class {
    match e {
        kube::Error::Api(status) => match status.code {
            404 => Class::NotFound,
            409 => Class::Conflict,
            429 => Class::Transient,
            c if c >= 500 => Class::Transient,
            _ => Class::Rejected,
        },
        // Transport, TLS, service (time-out) errors: the request may not have arrived.
        _ => Class::Transient,
    }
}

/// The HTTP status code of an API error, or 0 for transport failures (for metrics labels).
pub fn code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(status) => status.code,
        _ => 0,
    }
}

/// Back-off between attempts: 100ms doubling up to 5s, at most `attempts` tries in all.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// Tries in all, the first included.
    pub attempts: u32,
    /// The first wait.
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            attempts: 6,
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
        }
    }
}

/// Runs `op` until it succeeds, fails with a non-transient error, or the attempts are spent;
/// returns the last result.
pub async fn retry<T, F, Fut>(backoff: Backoff, mut op: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut wait = backoff.initial;
    let mut attempt = 1;
    loop {
        match op().await {
            Err(e) if classify(&e) == Class::Transient && attempt < backoff.attempts => {
                tracing::debug!(error = %e, attempt, "transient API error; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(backoff.max);
                attempt += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status {
                code,
                ..Default::default()
            }
            .boxed(),
        )
    }

    #[test]
    fn classes_follow_the_status_code() {
        assert_eq!(classify(&api(404)), Class::NotFound);
        assert_eq!(classify(&api(409)), Class::Conflict);
        assert_eq!(classify(&api(422)), Class::Rejected);
        assert_eq!(classify(&api(429)), Class::Transient);
        assert_eq!(classify(&api(503)), Class::Transient);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_transient_errors_only() {
        let n = AtomicU32::new(0);
        let r: Result<(), _> = retry(Backoff::default(), || async {
            n.fetch_add(1, Ordering::SeqCst);
            Err(api(503))
        })
        .await;
        assert!(r.is_err());
        assert_eq!(n.load(Ordering::SeqCst), 6);
        n.store(0, Ordering::SeqCst);
        let r: Result<(), _> = retry(Backoff::default(), || async {
            n.fetch_add(1, Ordering::SeqCst);
            Err(api(409))
        })
        .await;
        assert!(r.is_err());
        assert_eq!(n.load(Ordering::SeqCst), 1);
        n.store(0, Ordering::SeqCst);
        let r = retry(Backoff::default(), || async {
            if n.fetch_add(1, Ordering::SeqCst) < 2 {
                Err(api(500))
            } else {
                Ok(7)
            }
        })
        .await;
        assert_eq!(r.unwrap(), 7);
    }
}
