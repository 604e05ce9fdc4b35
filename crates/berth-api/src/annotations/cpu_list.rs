//! Linux CPU lists (`"0-3,8,10-11"`), the format of `reservedCPUs` and `cpuset` values.
//!
//! Parsed like Kubernetes' `cpuset.Parse`, which Koordinator uses: comma-separated ids or
//! inclusive `a-b` ranges with `a <= b`, no spaces, and `""` is the empty set.

use std::collections::BTreeSet;

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
                cpus.insert(id(part)?);
            }
            Some((lo, hi)) => {
                let (lo, hi) = (id(lo)?, id(hi)?);
                if lo > hi {
                    return Err(err(format!("range {part:?} is decreasing")));
                }
                cpus.extend(lo..=hi);
            }
        }
    }
    Ok(cpus)
}

/// Formats CPU ids as the shortest CPU list (`cpuset.String()`): `[0,1,2,3,8]` → `"0-3,8"`.
pub fn format_cpu_list(cpus: &BTreeSet<u32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = cpus.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == end.checked_add(1).as_ref() {
            end += 1;
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
}
