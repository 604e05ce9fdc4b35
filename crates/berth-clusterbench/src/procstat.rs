//! CPU time and peak memory of a process, from `/proc`.

use std::time::Duration;

use crate::error::{io_err, Error};

/// One reading of a process's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// User plus system CPU time since the process started (`utime + stime`).
    pub cpu: Duration,
    /// Peak resident set size so far (`VmHWM`), in KiB.
    pub peak_rss_kib: u64,
}

/// Reads `/proc/<pid>/stat` and `/proc/<pid>/status`.
pub fn sample(pid: u32) -> Result<Sample, Error> {
    let stat_path = format!("/proc/{pid}/stat");
    let stat =
        std::fs::read_to_string(&stat_path).map_err(io_err(format!("reading {stat_path}")))?;
    let fields = stat_fields(&stat).ok_or_else(|| malformed(&stat_path))?;
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .ok_or_else(|| malformed(&stat_path))
    };
    // After the command: state is field 3 of proc(5), so utime (14) and stime (15) are at
    // 11 and 12.
    let cpu_ticks = ticks(11)? + ticks(12)?;
    let status_path = format!("/proc/{pid}/status");
    let status =
        std::fs::read_to_string(&status_path).map_err(io_err(format!("reading {status_path}")))?;
    let peak_rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Ok(Sample {
        cpu: ticks_to_duration(cpu_ticks),
        peak_rss_kib,
    })
}

/// The fields of a `stat` line after `pid (comm)`, which may itself hold spaces and
/// parentheses.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let close = stat.rfind(')')?;
    Some(stat.get(close + 1..)?.split_whitespace().collect())
}

fn malformed(path: &str) -> Error {
    io_err(format!("reading {path}"))(std::io::Error::other("unexpected format"))
}

fn ticks_to_duration(ticks: u64) -> Duration {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100);
    Duration::from_nanos(ticks.saturating_mul(1_000_000_000) / hz)
}

/// The child of this process whose command is `comm` (e.g. `kube-apiserver`, started by
/// the test cluster), if there is exactly one.
pub fn child_named(comm: &str) -> Option<u32> {
    let me = std::process::id();
    let mut found = None;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let name = stat
            .find('(')
            .zip(stat.rfind(')'))
            .and_then(|(a, b)| stat.get(a + 1..b));
        let ppid = stat_fields(&stat).and_then(|f| f.get(1).and_then(|p| p.parse::<u32>().ok()));
        if name == Some(comm) && ppid == Some(me) {
            if found.is_some() {
                return None;
            }
            found = Some(pid);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let s = sample(std::process::id()).unwrap();
        assert!(s.peak_rss_kib > 0);
    }

    #[test]
    fn stat_fields_skip_a_command_with_spaces_and_parentheses() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0";
        let f = stat_fields(line).unwrap();
        assert_eq!(f[0], "S");
        assert_eq!(f[1], "1");
        assert_eq!((f[11], f[12]), ("7", "3"));
    }
}
