//! Go `time.Duration` text, as found in `Reservation.spec.ttl` (a `metav1.Duration`).
//!
//! Koordinator decodes `ttl` with Go's `time.ParseDuration`, so berth must accept exactly the
//! same language (`"24h"`, `"1h30m"`, `"1.5h"`, `"500ms"`, `"-1s"`, `"0"`) and reject exactly
//! what Go rejects, or a reservation would expire at a different moment under berth than under
//! koord-scheduler. When berth writes a duration back it uses `Duration.String()`'s form
//! (`"24h0m0s"`), which is what a Go client would print.
//!
//! Values are nanoseconds internally (Go's unit, with Go's overflow rules) and milliseconds at
//! the API, because berth's virtual clock ticks in milliseconds.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Text that is not a Go duration. The message is Go's, so it reads the same as
/// koord-scheduler's log line for the same object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not of the form `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`, or outside Go's ±292-year range.
    #[error("time: invalid duration {text:?}")]
    Invalid {
        /// The rejected text.
        text: String,
    },
    /// A number without a unit, such as `"30"` (only `"0"` may omit it).
    #[error("time: missing unit in duration {text:?}")]
    MissingUnit {
        /// The rejected text.
        text: String,
    },
    /// A unit other than `ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h` (e.g. `"1d"`).
    #[error("time: unknown unit {unit:?} in duration {text:?}")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The rejected text.
        text: String,
    },
}

const NANOS_PER_MILLI: i64 = 1_000_000;
/// `1 << 63`: Go accumulates the magnitude in a `uint64` and allows up to this value so that
/// `-9223372036854775808ns` parses.
const LIMIT: u64 = 1 << 63;

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60 * 1_000_000_000,
        "h" => 3_600 * 1_000_000_000,
        _ => return None,
    })
}

/// Parses Go duration text into nanoseconds, with `time.ParseDuration`'s exact grammar,
/// rounding (fractions go through `f64`, as in Go) and range.
pub fn parse_duration_nanos(text: &str) -> Result<i64, DurationError> {
    let invalid = || DurationError::Invalid {
        text: text.to_string(),
    };
    let mut s = text;
    let mut negative = false;
    if let Some(rest) = s.strip_prefix('-') {
        negative = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    // Go's special case: a bare "0" (optionally signed) needs no unit.
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        let first = s.as_bytes()[0];
        if !(first == b'.' || first.is_ascii_digit()) {
            return Err(invalid());
        }
        let (value, has_int, rest) = leading_int(s).ok_or_else(invalid)?;
        let (frac, scale, has_frac, rest) = leading_fraction(rest);
        s = rest;
        let mut value = value;
        if !has_int && !has_frac {
            return Err(invalid());
        }
        // Unit: everything up to the next digit or dot. Digits and dots are ASCII, so the split
        // is always on a char boundary even for "µs".
        let unit_len = s
            .bytes()
            .take_while(|b| !(*b == b'.' || b.is_ascii_digit()))
            .count();
        if unit_len == 0 {
            return Err(DurationError::MissingUnit {
                text: text.to_string(),
            });
        }
        let unit_text = &s[..unit_len];
        s = &s[unit_len..];
        let unit = unit_nanos(unit_text).ok_or_else(|| DurationError::UnknownUnit {
            unit: unit_text.to_string(),
            text: text.to_string(),
        })?;
        if value > LIMIT / unit {
            return Err(invalid());
        }
        value *= unit;
        if frac > 0 {
            // Go: float64 keeps this nanosecond-accurate up to hours, the largest unit.
            // Truncation toward zero is Go's uint64(float64) conversion.
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss,
                reason = "mirrors Go's float64 fraction arithmetic; the result is at most 3.6e12"
            )]
            let extra = (frac as f64 * (unit as f64 / scale)) as u64;
            value = value.checked_add(extra).ok_or_else(invalid)?;
            if value > LIMIT {
                return Err(invalid());
            }
        }
        total = total.checked_add(value).ok_or_else(invalid)?;
        if total > LIMIT {
            return Err(invalid());
        }
    }
    if negative {
        // total <= 2^63, so the negation fits (2^63 becomes i64::MIN).
        return Ok(0i64.wrapping_sub_unsigned(total));
    }
    i64::try_from(total).map_err(|_| invalid())
}

/// The integer part at the start of `s` (Go's `leadingInt`): its value, whether there were
/// digits, and the rest. `None` when it exceeds the limit.
fn leading_int(s: &str) -> Option<(u64, bool, &str)> {
    let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
    let mut value: u64 = 0;
    for b in s[..int_len].bytes() {
        if value > LIMIT / 10 {
            return None;
        }
        value = value * 10 + u64::from(b - b'0');
        if value > LIMIT {
            return None;
        }
    }
    Some((value, int_len > 0, &s[int_len..]))
}

/// The fraction at the start of `s` if it starts with `.` (Go's `leadingFraction`): its
/// digits as an integer, the power of ten to divide it by, whether there were digits, and
/// the rest. Digits beyond what fits are read but ignored, as in Go.
fn leading_fraction(s: &str) -> (u64, f64, bool, &str) {
    let Some(rest) = s.strip_prefix('.') else {
        return (0, 1.0, false, s);
    };
    let frac_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    let mut frac: u64 = 0;
    let mut scale: f64 = 1.0;
    let mut overflow = false;
    for b in rest[..frac_len].bytes() {
        if overflow {
            continue;
        }
        if frac > (LIMIT - 1) / 10 {
            overflow = true;
            continue;
        }
        let next = frac * 10 + u64::from(b - b'0');
        if next > LIMIT {
            overflow = true;
            continue;
        }
        frac = next;
        scale *= 10.0;
    }
    (frac, scale, frac_len > 0, &rest[frac_len..])
}

/// Parses Go duration text into whole milliseconds, truncating toward zero like Go's
/// `Duration.Milliseconds()` (`"1500us"` is 1 ms, `"-1500us"` is -1 ms).
pub fn parse_duration_millis(text: &str) -> Result<i64, DurationError> {
    parse_duration_nanos(text).map(|ns| ns / NANOS_PER_MILLI)
}

/// Formats nanoseconds exactly like Go's `Duration.String()`: `"24h0m0s"`, `"1m30s"`,
/// `"1.5s"`, `"500ms"`, `"1.5µs"`, `"0s"`, `"-1s"`.
pub fn format_duration_nanos(nanos: i64) -> String {
    let negative = nanos < 0;
    let mut u = nanos.unsigned_abs();
    let mut out = String::new();
    if u < 1_000_000_000 {
        // Below one second Go picks the largest unit that keeps an integer part.
        let (unit, precision) = match u {
            0 => return "0s".to_string(),
            1..=999 => ("ns", 0),
            1_000..=999_999 => ("\u{b5}s", 3),
            _ => ("ms", 6),
        };
        let frac = take_fraction(&mut u, precision);
        out.push_str(&u.to_string());
        out.push_str(&frac);
        out.push_str(unit);
    } else {
        let frac = take_fraction(&mut u, 9);
        // u is whole seconds now.
        let secs = u % 60;
        let mins = u / 60;
        if mins > 0 {
            let hours = mins / 60;
            if hours > 0 {
                out.push_str(&format!("{hours}h"));
            }
            out.push_str(&format!("{}m", mins % 60));
        }
        out.push_str(&format!("{secs}{frac}s"));
    }
    if negative {
        out.insert(0, '-');
    }
    out
}

/// Formats milliseconds like Go's `Duration.String()` (`86_400_000` is `"24h0m0s"`).
/// Values beyond Go's range (about ±292 years) are printed with the same layout rather than
/// clamped, since they can only come from berth's own arithmetic.
pub fn format_duration_millis(millis: i64) -> String {
    match millis.checked_mul(NANOS_PER_MILLI) {
        Some(nanos) => format_duration_nanos(nanos),
        None => {
            // Out of i64 nanoseconds: print whole seconds with the millisecond fraction.
            let negative = millis < 0;
            let ms = millis.unsigned_abs();
            let (secs, rem) = (ms / 1000, ms % 1000);
            let mut frac = String::new();
            if rem != 0 {
                frac = format!(".{rem:03}").trim_end_matches('0').to_string();
            }
            let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
            format!("{}{h}h{m}m{s}{frac}s", if negative { "-" } else { "" })
        }
    }
}

/// Splits off the lowest `precision` decimal digits of `*v` as Go's `fmtFrac` does: returns
/// `".ddd"` without trailing zeros (or `""` when they are all zero) and leaves the integer
/// part in `*v`.
fn take_fraction(v: &mut u64, precision: u32) -> String {
    let divisor = 10u64.pow(precision);
    let frac = *v % divisor;
    *v /= divisor;
    if frac == 0 {
        return String::new();
    }
    let digits = format!("{frac:0width$}", width = precision as usize);
    format!(".{}", digits.trim_end_matches('0'))
}

/// A Go duration as written in an object (`spec.ttl`), kept as text.
///
/// The text is kept rather than the number so that an object read and written back by berth
/// is unchanged (`"24h"` stays `"24h"`, not `"24h0m0s"`), and so that a malformed value still
/// deserializes: the API server stores any string here, and berth reports it through
/// [`Reservation::validate`](crate::reservation::Reservation::validate) instead of failing to
/// read the whole object.
///
/// A bare integer reads as its text: YAML turns `ttl: 0` (the documented way to disable
/// expiry) into a number, and `0` is the Go duration meant; any other bare number is then
/// refused by `validate` like any string without a unit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct GoDuration(String);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = GoDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"24h\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<GoDuration, E> {
                Ok(GoDuration::new(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<GoDuration, E> {
                Ok(GoDuration::new(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<GoDuration, E> {
                Ok(GoDuration::new(v.to_string()))
            }
        }
        d.deserialize_any(Text)
    }
}

impl GoDuration {
    /// Wraps text without checking it; use [`GoDuration::millis`] to interpret it.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The duration Go's `Duration.String()` would print for `millis` milliseconds.
    pub fn from_millis(millis: i64) -> Self {
        Self(format_duration_millis(millis))
    }

    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value in nanoseconds, as koord-scheduler would decode it.
    pub fn nanos(&self) -> Result<i64, DurationError> {
        parse_duration_nanos(&self.0)
    }

    /// The value in whole milliseconds (truncated toward zero).
    pub fn millis(&self) -> Result<i64, DurationError> {
        parse_duration_millis(&self.0)
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for GoDuration {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl JsonSchema for GoDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GoDuration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // `metav1.Duration` is a plain string in CRD schemas; the API server does not parse it.
        schemars::json_schema!({ "type": "string" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000_000;

    #[test]
    fn a_bare_integer_reads_as_its_text_and_only_zero_is_a_duration() {
        let zero: GoDuration = serde_json::from_str("0").unwrap();
        assert_eq!((zero.as_str(), zero.millis().ok()), ("0", Some(0)));
        let five: GoDuration = serde_json::from_str("5").unwrap();
        assert!(
            five.millis().is_err(),
            "a number without a unit is not a duration"
        );
        assert!(serde_json::from_str::<GoDuration>("true").is_err());
        assert!(serde_json::from_str::<GoDuration>("1.5").is_err());
    }

    #[test]
    fn parses_the_forms_koordinator_users_write() {
        let cases = [
            ("0", 0),
            ("-0", 0),
            ("+0", 0),
            ("0s", 0),
            ("500ms", 500_000_000),
            ("30s", 30 * SECOND),
            ("5m", 300 * SECOND),
            ("24h", 86_400 * SECOND),
            ("1h30m", 5_400 * SECOND),
            ("1.5h", 5_400 * SECOND),
            ("-1s", -SECOND),
            ("+5s", 5 * SECOND),
            ("1.s", SECOND),
            (".5s", SECOND / 2),
            ("1h0m0s", 3_600 * SECOND),
            ("2m3.5s", 123_500_000_000),
            ("100us", 100_000),
            ("100\u{b5}s", 100_000),
            ("100\u{3bc}s", 100_000),
            ("3ns", 3),
            ("1.000000001s", SECOND + 1),
            ("0.3333333333333333333h", 1_200 * SECOND),
            ("9223372036854775807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration_nanos(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn milliseconds_truncate_toward_zero() {
        assert_eq!(parse_duration_millis("24h"), Ok(86_400_000));
        assert_eq!(parse_duration_millis("1500us"), Ok(1));
        assert_eq!(parse_duration_millis("-1500us"), Ok(-1));
        assert_eq!(parse_duration_millis("-1s"), Ok(-1000));
    }

    #[test]
    fn rejects_what_go_rejects_with_gos_message() {
        let invalid = |t: &str| DurationError::Invalid {
            text: t.to_string(),
        };
        assert_eq!(parse_duration_nanos(""), Err(invalid("")));
        assert_eq!(parse_duration_nanos("-"), Err(invalid("-")));
        assert_eq!(parse_duration_nanos("s"), Err(invalid("s")));
        assert_eq!(parse_duration_nanos("."), Err(invalid(".")));
        assert_eq!(parse_duration_nanos(".s"), Err(invalid(".s")));
        assert_eq!(
            parse_duration_nanos("1h+5m"),
            Err(DurationError::UnknownUnit {
                unit: "h+".into(),
                text: "1h+5m".into()
            })
        );
        assert_eq!(
            parse_duration_nanos("1h5m-"),
            Err(DurationError::UnknownUnit {
                unit: "m-".into(),
                text: "1h5m-".into()
            })
        );
        assert_eq!(parse_duration_nanos("--1s"), Err(invalid("--1s")));
        assert_eq!(parse_duration_nanos(" 1h"), Err(invalid(" 1h")));
        assert_eq!(
            parse_duration_nanos("9223372036854775808ns"),
            Err(invalid("9223372036854775808ns"))
        );
        assert_eq!(parse_duration_nanos("3000000h"), Err(invalid("3000000h")));
        assert_eq!(
            parse_duration_nanos("30"),
            Err(DurationError::MissingUnit { text: "30".into() })
        );
        assert_eq!(
            parse_duration_nanos("1d"),
            Err(DurationError::UnknownUnit {
                unit: "d".into(),
                text: "1d".into()
            })
        );
        assert_eq!(
            parse_duration_nanos("1h 30m"),
            Err(DurationError::UnknownUnit {
                unit: "h ".into(),
                text: "1h 30m".into()
            })
        );
        assert_eq!(
            DurationError::UnknownUnit {
                unit: "d".into(),
                text: "1d".into()
            }
            .to_string(),
            r#"time: unknown unit "d" in duration "1d""#
        );
        assert_eq!(invalid("x").to_string(), r#"time: invalid duration "x""#);
    }

    #[test]
    fn formats_like_go_duration_string() {
        let cases = [
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1\u{b5}s"),
            (2_200_000, "2.2ms"),
            (500_000_000, "500ms"),
            (SECOND, "1s"),
            (SECOND + SECOND / 2, "1.5s"),
            (90 * SECOND, "1m30s"),
            (3_600 * SECOND, "1h0m0s"),
            (86_400 * SECOND, "24h0m0s"),
            (5_400 * SECOND + 1, "1h30m0.000000001s"),
            (-SECOND, "-1s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
            (i64::MAX, "2562047h47m16.854775807s"),
        ];
        for (nanos, want) in cases {
            assert_eq!(format_duration_nanos(nanos), want, "{nanos}");
        }
    }

    #[test]
    fn formats_milliseconds() {
        assert_eq!(format_duration_millis(86_400_000), "24h0m0s");
        assert_eq!(format_duration_millis(90_000), "1m30s");
        assert_eq!(format_duration_millis(500), "500ms");
        assert_eq!(format_duration_millis(0), "0s");
        assert_eq!(format_duration_millis(61_001), "1m1.001s");
        assert_eq!(format_duration_millis(-1_000), "-1s");
        // Beyond Go's range: same layout, no overflow.
        assert_eq!(format_duration_millis(i64::MAX), "2562047788015h12m55.807s");
    }

    #[test]
    fn formatted_text_parses_back_to_the_same_value() {
        for nanos in [
            0,
            1,
            999,
            1_500,
            2_000_000,
            SECOND,
            61 * SECOND + 7,
            86_400 * SECOND,
            -SECOND,
        ] {
            assert_eq!(
                parse_duration_nanos(&format_duration_nanos(nanos)),
                Ok(nanos)
            );
        }
    }

    #[test]
    fn go_duration_keeps_its_text() {
        let d: GoDuration = serde_json::from_str(r#""24h""#).expect("a JSON string");
        assert_eq!(d.as_str(), "24h");
        assert_eq!(d.millis(), Ok(86_400_000));
        assert_eq!(serde_json::to_string(&d).expect("serializes"), r#""24h""#);
        assert_eq!(GoDuration::from_millis(86_400_000).as_str(), "24h0m0s");
        let bad: GoDuration = serde_json::from_str(r#""1d""#).expect("any string deserializes");
        assert!(bad.millis().is_err());
    }
}
