//! berth's own counters, scraped from its `/metrics` at the end of the measured phase: how
//! many API requests of each kind it made, and how many binds failed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

/// The address berth logged it serves `/metrics` on (`"bound":"127.0.0.1:PORT"` in its JSON
/// log), if it did.
pub fn metrics_addr(log: &Path) -> Option<SocketAddr> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().find_map(|l| {
        let rest = l.split("\"bound\":\"").nth(1)?;
        rest.split('"').next()?.parse().ok()
    })
}

/// `GET /metrics` over plain HTTP/1.0.
pub fn scrape(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (_, body) = out.split_once("\r\n\r\n")?;
    Some(body.to_string())
}

/// The samples of the counter families whose names start with one of `prefixes`, as
/// `name{labels} value`, comments left out.
pub fn counters(text: &str, prefixes: &[&str]) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| prefixes.iter().any(|p| l.starts_with(p)))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The difference of two scrapes, per sample (only samples that grew).
pub fn delta(before: &[(String, f64)], after: &[(String, f64)]) -> Vec<(String, f64)> {
    after
        .iter()
        .filter_map(|(name, v)| {
            let b = before
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0.0, |(_, b)| *b);
            (v - b > 0.0).then(|| (name.clone(), v - b))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_counters_and_their_growth() {
        let a = "# HELP x\nberth_api_requests_total{operation=\"bind\",code=\"201\"} 10\nother 3\n";
        let b = "berth_api_requests_total{operation=\"bind\",code=\"201\"} 25\nberth_bind_failures_total{class=\"conflict\"} 1\n";
        let p = ["berth_api_requests_total", "berth_bind_failures_total"];
        let d = delta(&counters(a, &p), &counters(b, &p));
        assert_eq!(
            d,
            vec![
                (
                    "berth_api_requests_total{operation=\"bind\",code=\"201\"}".to_string(),
                    15.0
                ),
                (
                    "berth_bind_failures_total{class=\"conflict\"}".to_string(),
                    1.0
                ),
            ]
        );
    }
}
