//! Kubernetes resource quantities as integers.
//!
//! The scheduler never does arithmetic on quantity strings: every quantity is parsed once,
//! on input, into an integer in the unit kube-scheduler uses for it (milli-units for CPU,
//! whole units, rounded up, for everything else). Parsing follows the API server's grammar
//! (`<sign><digits>[.<digits>][<suffix>]`, binary `Ki..Ei`, decimal `n u m k M G T P E`, and
//! `e<exp>`/`E<exp>`), so anything `kubectl` accepts is accepted here and anything it rejects
//! is rejected with the offending text.

use std::fmt;

/// A quantity that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text:?}")]
pub struct QuantityError {
    /// The rejected text.
    pub text: String,
}

/// A parsed quantity: an exact decimal `mantissa * 10^exp10 * 2^exp2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedQuantity {
    negative: bool,
    /// Digits without the decimal point.
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

impl ParsedQuantity {
    /// Parses a quantity string.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let err = || QuantityError {
            text: text.to_string(),
        };
        let s = text.trim();
        if s.is_empty() {
            return Err(err());
        }
        let (negative, rest) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, suffix) = rest.split_at(num_end);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(err());
        }
        let mut mantissa: u128 = 0;
        let mut exp10: i32 = 0;
        let mut seen_dot = false;
        for c in num.bytes() {
            if c == b'.' {
                seen_dot = true;
                continue;
            }
            // Digits beyond what fits are dropped with a compensating exponent (precision
            // far below one milli-unit of any real quantity).
            if mantissa > u128::MAX / 100 {
                if !seen_dot {
                    exp10 += 1;
                }
                continue;
            }
            mantissa = mantissa * 10 + u128::from(c - b'0');
            if seen_dot {
                exp10 -= 1;
            }
        }
        let (e10, exp2) = match suffix {
            "" => (0, 0),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            other => {
                let body = other
                    .strip_prefix('e')
                    .or_else(|| other.strip_prefix('E'))
                    .ok_or_else(err)?;
                let digits = body.strip_prefix(['+', '-']).unwrap_or(body);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err());
                }
                let e: i32 = body.parse().map_err(|_| err())?;
                if !(-60..=60).contains(&e) {
                    return Err(err());
                }
                (e, 0)
            }
        };
        Ok(Self {
            negative: negative && mantissa != 0,
            mantissa,
            exp10: exp10 + e10,
            exp2,
        })
    }

    /// True for a quantity below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// The value scaled by `10^scale`, rounded up (away from zero for positives, toward zero
    /// for negatives: kube's `ScaledValue` rounding), saturating at the `i64` range.
    pub fn scaled(&self, scale: i32) -> i64 {
        let mut num: u128 = self.mantissa;
        let mut den: u128 = 1;
        let e = self.exp10 + scale;
        let pow = |n: u32| 10u128.checked_pow(n);
        if e >= 0 {
            match pow(e as u32).and_then(|p| num.checked_mul(p)) {
                Some(v) => num = v,
                None => return self.saturate(),
            }
        } else {
            match pow((-e) as u32) {
                Some(p) => den = p,
                None => den = u128::MAX,
            }
        }
        match num.checked_mul(1u128 << self.exp2.min(120)) {
            Some(v) if self.exp2 <= 120 => num = v,
            _ => return self.saturate(),
        }
        let q = num / den;
        let r = num % den;
        let magnitude = if self.negative {
            q
        } else {
            q + u128::from(r != 0)
        };
        if magnitude > i64::MAX as u128 {
            return self.saturate();
        }
        let v = magnitude as i64;
        if self.negative {
            -v
        } else {
            v
        }
    }

    fn saturate(&self) -> i64 {
        if self.negative {
            i64::MIN
        } else {
            i64::MAX
        }
    }

    /// Whole units, rounded up (`Quantity.Value()`).
    pub fn value(&self) -> i64 {
        self.scaled(0)
    }

    /// Milli-units, rounded up (`Quantity.MilliValue()`).
    pub fn milli_value(&self) -> i64 {
        self.scaled(3)
    }
}

impl fmt::Display for ParsedQuantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}m", self.milli_value())
    }
}

/// Parses `text` and returns the integer kube-scheduler would use for resource `name`:
/// milli-CPU for `cpu`, whole units (bytes, counts) otherwise.
pub fn parse_resource(name: &str, text: &str) -> Result<i64, QuantityError> {
    let q = ParsedQuantity::parse(text)?;
    Ok(if name == "cpu" {
        q.milli_value()
    } else {
        q.value()
    })
}

/// Formats an integer resource amount the way the API server would print it canonically
/// (`500m`, `2`, `1Gi`, `1536Mi`, `1000`).
pub fn format_resource(name: &str, amount: i64) -> String {
    if name == "cpu" {
        if amount % 1000 == 0 {
            return (amount / 1000).to_string();
        }
        return format!("{amount}m");
    }
    if amount != 0 && is_binary_resource(name) {
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let unit = 1i64 << shift;
            if amount % unit == 0 {
                return format!("{}{suffix}", amount / unit);
            }
        }
    }
    amount.to_string()
}

fn is_binary_resource(name: &str) -> bool {
    name == "memory" || name == "ephemeral-storage" || name.starts_with("hugepages-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_api_servers_forms() {
        let cases = [
            ("cpu", "500m", 500),
            ("cpu", "1", 1000),
            ("cpu", "1.5", 1500),
            ("cpu", "0.1", 100),
            ("cpu", "100u", 1),
            ("cpu", "2e3", 2_000_000),
            ("memory", "1Gi", 1 << 30),
            ("memory", "400Mi", 400 << 20),
            ("memory", "1G", 1_000_000_000),
            ("memory", "1.5Ki", 1536),
            ("memory", "1m", 1),
            ("pods", "110", 110),
            ("nvidia.com/gpu", "+2", 2),
            ("memory", "12E-1", 2),
        ];
        for (name, text, want) in cases {
            assert_eq!(parse_resource(name, text), Ok(want), "{name}={text}");
        }
    }

    #[test]
    fn rejects_malformed_text() {
        for text in [
            "", "abc", "1.2.3", "1Qi", "--1", "1e", "1e+", ".", "1 Gi", "Gi",
        ] {
            assert!(
                ParsedQuantity::parse(text).is_err(),
                "{text:?} should be rejected"
            );
        }
    }

    #[test]
    fn negative_values_are_reported() {
        let q = ParsedQuantity::parse("-100m").unwrap();
        assert!(q.is_negative());
        assert_eq!(q.milli_value(), -100);
        assert!(!ParsedQuantity::parse("-0").unwrap().is_negative());
    }

    #[test]
    fn huge_values_saturate_instead_of_overflowing() {
        assert_eq!(parse_resource("memory", "100000000000Ei"), Ok(i64::MAX));
    }

    #[test]
    fn formats_canonically() {
        assert_eq!(format_resource("cpu", 1500), "1500m");
        assert_eq!(format_resource("cpu", 2000), "2");
        assert_eq!(format_resource("memory", 1 << 30), "1Gi");
        assert_eq!(format_resource("memory", 1536 << 20), "1536Mi");
        assert_eq!(format_resource("memory", 1000), "1000");
        assert_eq!(format_resource("pods", 110), "110");
    }
}
