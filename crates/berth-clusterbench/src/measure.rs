//! Per-second throughput, as scheduler_perf's `SchedulingThroughput` reports it: the pods
//! bound in each second of the measured phase, and the average and percentiles of those
//! samples.

use std::time::Duration;

/// Throughput samples (pods bound per second) and their statistics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Throughput {
    /// One sample per second, from the first binding on.
    pub samples: Vec<f64>,
    /// Mean of the samples.
    pub avg: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// A last window shorter than this is left out of the samples (too short to say much; its
/// bindings still count in the overall rate).
const MIN_LAST_WINDOW: f64 = 0.5;

/// Samples from the binding times (offsets from the start of the phase, sorted): windows of
/// one second from the first binding; the last, partial window is scaled to its length, or
/// left out when shorter than half a second.
pub fn per_second(offsets: &[Duration]) -> Throughput {
    let (Some(first), Some(last)) = (offsets.first(), offsets.last()) else {
        return Throughput::default();
    };
    let first = first.as_secs_f64();
    let span = last.as_secs_f64() - first;
    // Window k covers [first + k, first + k + 1); the last binding closes the last window.
    let windows = span.floor() as usize + 1;
    let mut counts = vec![0usize; windows];
    for t in offsets {
        let k = ((t.as_secs_f64() - first).floor() as usize).min(windows - 1);
        counts[k] += 1;
    }
    let last_len = span - (windows - 1) as f64;
    let mut samples: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
    if windows > 1 || last_len >= MIN_LAST_WINDOW {
        if last_len >= MIN_LAST_WINDOW {
            if let Some(s) = samples.last_mut() {
                *s /= last_len;
            }
        } else {
            samples.pop();
        }
    } else {
        // Everything within half a second: one sample over that span.
        samples = vec![offsets.len() as f64 / span.max(1e-3)];
    }
    stats(samples)
}

fn stats(samples: Vec<f64>) -> Throughput {
    if samples.is_empty() {
        return Throughput::default();
    }
    let avg = samples.iter().sum::<f64>() / samples.len() as f64;
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    // Nearest rank.
    let pct = |q: f64| {
        let rank = (q * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    };
    Throughput {
        avg,
        p50: pct(0.50),
        p90: pct(0.90),
        p99: pct(0.99),
        samples,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn counts_per_second_from_the_first_binding() {
        // First at 1.0 s: windows [1,2) [2,3) [3,3.6] (0.6 s long).
        let t = per_second(&ms(&[1000, 1100, 1500, 2000, 2999, 3000, 3300, 3600]));
        assert_eq!(t.samples.len(), 3);
        assert_eq!(t.samples[0], 3.0);
        assert_eq!(t.samples[1], 2.0);
        assert!((t.samples[2] - 3.0 / 0.6).abs() < 1e-9, "{:?}", t.samples);
        assert_eq!(t.p50, 3.0);
        assert!((t.p99 - 5.0).abs() < 1e-9);
    }

    #[test]
    fn a_short_last_window_is_left_out() {
        let t = per_second(&ms(&[0, 500, 999, 1000, 1100]));
        assert_eq!(t.samples, vec![3.0]);
    }

    #[test]
    fn everything_within_half_a_second_is_one_sample() {
        let t = per_second(&ms(&[100, 200, 300]));
        assert_eq!(t.samples.len(), 1);
        assert!((t.avg - 15.0).abs() < 1e-9);
        assert_eq!(per_second(&[]), Throughput::default());
    }
}
