//! Linux CPU lists (`"0-3,8,10-11"`), the format of `reservedCPUs` and `cpuset` values.
//!
//! Parsed like Kubernetes' `cpuset.Parse`, which Koordinator uses: comma-separated ids or
//! inclusive `a-b` ranges with `a <= b`, no spaces, and `""` is the empty set.
//!
//! Unlike `cpuset.Parse`, a list may name at most [`MAX_CPU_LIST_CPUS`] CPUs, counted with
//! repeats: the text comes from annotations anyone with write access to a pod or node can
//! set, and `"0-4294967295"` would otherwise build a set of four billion ids.

use std::collections::BTreeSet;

/// Most CPU ids one list may name, counting every id of every range (so `"0-3,0-3"` names
/// 8). Linux builds for at most 8,192 CPUs (`CONFIG_NR_CPUS` on x86-64 `MAXSMP`), so real
/// lists are far below this, and building the set stays in the milliseconds.
pub const MAX_CPU_LIST_CPUS: u64 = 65_536;

/// A malformed CPU list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CPU list {text:?}: {reason}")]
pub struct CpuListError {
    /// The rejected text.
    pub text: String,
    /// What is wrong.
    pub reason: String,
}

/// Parses a CPU list into the set of CPU ids.
pub fn parse_cpu_list(text: &str) -> Result<BTreeSet<u32>, CpuListError> {
    let err = |reason: String| CpuListError {
        text: text.to_string(),
        reason,
    };
    let mut cpus = BTreeSet::new();
    if text.is_empty() {
        return Ok(cpus);
    }
    let mut named: u64 = 0;
    let mut count = |n: u64| {
        named = named.saturating_add(n);
        if named > MAX_CPU_LIST_CPUS {
            return Err(err(format!(
                "names more than {MAX_CPU_LIST_CPUS} CPUs; berth reads at most {MAX_CPU_LIST_CPUS}"
            )));
        }
        Ok(())
    };
    for part in text.split(',') {
        let id = |s: &str| {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err(format!("{s:?} is not a CPU id")));
            }
            s.parse::<u32>()
                .map_err(|_| err(format!("{s:?} is out of range")))
        };
        match part.split_once('-') {
            None => {
                let cpu = id(part)?;
                count(1)?;
                cpus.insert(cpu);
            }
            Some((lo, hi)) => {
                let (lo, hi) = (id(lo)?, id(hi)?);
                if lo > hi {
                    return Err(err(format!("range {part:?} is decreasing")));
                }
                count(u64::from(hi - lo) + 1)?;
                cpus.extend(lo..=hi);
            }
        }
    }
    Ok(cpus)
}

/// Formats CPU ids as the shortest CPU list (`cpuset.String()`): `[0,1,2,3,8]` → `"0-3,8"`.
pub fn format_cpu_list(cpus: &BTreeSet<u32>) -> String {
    format_cpu_ids(cpus.iter().copied())
}

/// [`format_cpu_list`] of ids given ascending and without repeats (as any set type of
/// CPU ids iterates them), so that a set need not be copied into a `BTreeSet` first.
pub fn format_cpu_ids(cpus: impl IntoIterator<Item = u32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = cpus.into_iter().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        // `end + 1` does not exist past u32::MAX: comparing `checked_add`'s `None` with the
        // exhausted iterator's `None` would extend the range past it.
        while let Some(next) = end.checked_add(1).filter(|n| iter.peek() == Some(n)) {
            end = next;
            iter.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_cpu_lists() {
        let cpus = parse_cpu_list("0-3,8,10-11").expect("valid");
        assert_eq!(
            cpus.iter().copied().collect::<Vec<_>>(),
            [0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(format_cpu_list(&cpus), "0-3,8,10-11");
        assert_eq!(parse_cpu_list("").expect("empty is valid"), BTreeSet::new());
        assert_eq!(format_cpu_list(&BTreeSet::new()), "");
        assert_eq!(
            format_cpu_list(&parse_cpu_list("0,6").expect("valid")),
            "0,6"
        );
        assert_eq!(
            format_cpu_list(&parse_cpu_list("3,1,2").expect("valid")),
            "1-3"
        );
    }

    #[test]
    fn rejects_malformed_lists() {
        for bad in [
            "a",
            "1-",
            "-1",
            "3-1",
            "1,,2",
            "1 ,2",
            "1-2-3",
            "99999999999",
        ] {
            let err = parse_cpu_list(bad).expect_err(bad);
            assert_eq!(err.text, bad);
        }
    }

    #[test]
    fn lists_naming_too_many_cpus_are_refused_before_the_set_is_built() {
        // Twelve bytes would otherwise ask for four billion ids.
        let err = parse_cpu_list("0-4294967295").expect_err("too many");
        assert_eq!(
            err.reason,
            "names more than 65536 CPUs; berth reads at most 65536"
        );
        assert_eq!(
            parse_cpu_list("0-65535").map(|c| c.len()),
            Ok(65_536),
            "the limit itself is fine"
        );
        // Repeats count, so a long list of the same range cannot add up.
        assert!(parse_cpu_list("0-65535,0").is_err());
        assert!(parse_cpu_list(&vec!["0-1023"; 65].join(",")).is_err());
    }
}
