//! Reconnect backoff after a connection is closed or reset by the target, or a connect
//! fails: exponential with jitter, after gRPC's connection-backoff spec
//! (`doc/connection-backoff.md` in grpc/grpc).
//!
//! The delay before reconnect attempt `n` (0 = the first reconnect) is
//!
//! ```text
//! delay(n) = min(base x multiplier^n, cap) x (1 + jitter x u),   u uniform in [-1, 1)
//! ```
//!
//! Two choices, both deliberate:
//! - Jitter is applied *after* the cap, as in gRPC, so a capped delay may exceed `cap` by
//!   up to `jitter x cap` (120 s +-20% = 96..144 s with the defaults). Capping after the
//!   jitter would pile every long-failing connection onto exactly `cap`, which is the
//!   synchronised storm the jitter exists to prevent.
//! - Unlike gRPC, whose first retry waits exactly `base`, attempt 0 is jittered too: when
//!   the target drops every connection at once, the first wave of reconnects is the one
//!   that must be spread out.
//!
//! [`Backoff::delay_ns`] takes its random number as an argument (the worker owns a seeded
//! generator), so it is pure, allocation-free and deterministic in tests.

use std::fmt;
use std::str::FromStr;

use crate::limits::DURATION_NS_MAX;
use crate::units::fmt_duration;

/// Backoff parameters; see the module documentation for the formula.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay before the first reconnect, before jitter.
    pub base_ns: u64,
    /// Growth per attempt; values below 1 (or NaN) are treated as 1.
    pub multiplier: f64,
    /// Relative jitter: the delay is scaled by a uniform factor in `[1 - j, 1 + j)`;
    /// clamped to `[0, 1]`.
    pub jitter: f64,
    /// Largest delay before jitter.
    pub cap_ns: u64,
}

impl Default for Backoff {
    /// gRPC's defaults: base 1 s, multiplier 1.6, jitter +-20%, cap 120 s.
    fn default() -> Backoff {
        Backoff {
            base_ns: 1_000_000_000,
            multiplier: 1.6,
            jitter: 0.2,
            cap_ns: 120_000_000_000,
        }
    }
}

/// Attempts past this all sit at the cap: 1.0001^20000 > 7, and any multiplier worth
/// using reaches the cap long before; bounding it keeps `powi` exact-ish and cheap.
const ATTEMPT_MAX: u32 = 20_000;

impl Backoff {
    /// The delay before attempt `attempt` without jitter: `min(base x mult^attempt, cap)`.
    pub fn unjittered_ns(&self, attempt: u32) -> u64 {
        if self.base_ns == 0 || self.cap_ns == 0 {
            return 0;
        }
        let mult = self.multiplier.max(1.0); // NaN -> 1.0
        let grown = self.base_ns as f64 * mult.powi(attempt.min(ATTEMPT_MAX) as i32);
        let cap = self.cap_ns as f64;
        // `grown` is positive or +inf here, never NaN.
        if grown >= cap {
            self.cap_ns
        } else {
            grown as u64
        }
    }

    /// The jittered delay before reconnect attempt `attempt` (0 = the first reconnect).
    /// `unit_random` is uniform in `[0, 1)`; values outside are clamped, NaN counts as
    /// 0.5 (no jitter). The result lies in `[(1 - j) x d, (1 + j) x d]` for the un-jittered
    /// delay `d`, so at most `(1 + j) x cap`.
    pub fn delay_ns(&self, attempt: u32, unit_random: f64) -> u64 {
        let d = self.unjittered_ns(attempt) as f64;
        let jitter = if self.jitter.is_nan() {
            0.0
        } else {
            self.jitter.clamp(0.0, 1.0)
        };
        let u = if unit_random.is_nan() {
            0.5
        } else {
            unit_random.clamp(0.0, 1.0)
        };
        let factor = 1.0 + jitter * (2.0 * u - 1.0);
        // Float-to-int `as` saturates (and maps NaN to 0), so even a cap near u64::MAX
        // with jitter cannot wrap.
        (d * factor).round() as u64
    }
}

/// A `--backoff` value that cannot be used; one line naming the key and the bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackoffParseError {
    #[error("expected key=value, got {0:?} (keys: base, mult, jitter, max)")]
    NotKeyValue(String),
    #[error("unknown key {0:?} (keys: base, mult, jitter, max)")]
    UnknownKey(String),
    #[error("{0} is given twice")]
    Repeated(&'static str),
    #[error("{key}: {message}")]
    Value { key: &'static str, message: String },
    #[error("max ({max}) is below base ({base})")]
    CapBelowBase { base: String, max: String },
}

fn value_err(key: &'static str, message: impl Into<String>) -> BackoffParseError {
    BackoffParseError::Value {
        key,
        message: message.into(),
    }
}

fn parse_ns(key: &'static str, v: &str) -> Result<u64, BackoffParseError> {
    let d = crate::units::parse_duration(v).map_err(|m| value_err(key, m))?;
    let ns = d.as_nanos();
    if ns > DURATION_NS_MAX as u128 {
        return Err(value_err(
            key,
            format!(
                "must be at most {}, got {v:?}",
                fmt_duration(DURATION_NS_MAX)
            ),
        ));
    }
    Ok(ns as u64)
}

fn parse_f64(key: &'static str, v: &str, lo: f64, hi: f64) -> Result<f64, BackoffParseError> {
    match v.parse::<f64>() {
        Ok(x) if x >= lo && x <= hi => Ok(x),
        _ => Err(value_err(
            key,
            format!("expected a number from {lo} to {hi}, got {v:?}"),
        )),
    }
}

/// Largest multiplier accepted: beyond this the second delay is already the cap.
const MULTIPLIER_MAX: f64 = 100.0;

/// Parses `base=1s,mult=1.6,jitter=0.2,max=120s`: any subset of the keys in any order,
/// the rest from [`Backoff::default`]; an empty string is the default. Durations are
/// humantime's (`100ms`, `1s`, `2m`, up to a day); `mult` from 1 to 100; `jitter` from
/// 0 to 1; `max` must not be below `base`. `multiplier` and `cap` are accepted as
/// spellings of `mult` and `max`.
impl FromStr for Backoff {
    type Err = BackoffParseError;

    fn from_str(s: &str) -> Result<Backoff, BackoffParseError> {
        let mut b = Backoff::default();
        let mut seen = [false; 4];
        for item in s.split(',') {
            let item = item.trim();
            if item.is_empty() && s.trim().is_empty() {
                break;
            }
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| BackoffParseError::NotKeyValue(item.to_string()))?;
            let (k, v) = (k.trim(), v.trim());
            let (slot, key) = match k {
                "base" => (0, "base"),
                "mult" | "multiplier" => (1, "mult"),
                "jitter" => (2, "jitter"),
                "max" | "cap" => (3, "max"),
                _ => return Err(BackoffParseError::UnknownKey(k.to_string())),
            };
            if std::mem::replace(&mut seen[slot], true) {
                return Err(BackoffParseError::Repeated(key));
            }
            match slot {
                0 => b.base_ns = parse_ns(key, v)?,
                1 => b.multiplier = parse_f64(key, v, 1.0, MULTIPLIER_MAX)?,
                2 => b.jitter = parse_f64(key, v, 0.0, 1.0)?,
                _ => b.cap_ns = parse_ns(key, v)?,
            }
        }
        if b.cap_ns < b.base_ns {
            return Err(BackoffParseError::CapBelowBase {
                base: fmt_duration(b.base_ns),
                max: fmt_duration(b.cap_ns),
            });
        }
        Ok(b)
    }
}

/// `base=1s,mult=1.6,jitter=0.2,max=2m`: the form [`FromStr`] reads back.
impl fmt::Display for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "base={},mult={},jitter={},max={}",
            fmt_duration(self.base_ns),
            self.multiplier,
            self.jitter,
            fmt_duration(self.cap_ns)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn unjittered_sequence_grows_by_the_multiplier_up_to_the_cap() {
        let b = Backoff::default();
        let seq: Vec<u64> = (0..13).map(|n| b.unjittered_ns(n)).collect();
        // 1.6^n s: 1, 1.6, 2.56, 4.096, 6.5536, 10.48576, ... 1.6^10 = 109.95 s, then cap.
        assert_eq!(&seq[..4], &[S, 1_600_000_000, 2_560_000_000, 4_096_000_000]);
        assert!(
            (seq[10] as f64 - 109.951_162_777_6e9).abs() < 1e3,
            "{}",
            seq[10]
        );
        assert_eq!(&seq[11..], &[120 * S, 120 * S]);
        assert_eq!(b.unjittered_ns(u32::MAX), 120 * S);
        assert!(seq.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn jitter_spans_plus_minus_twenty_percent_and_may_exceed_the_cap() {
        let b = Backoff::default();
        assert_eq!(b.delay_ns(0, 0.0), 800_000_000);
        assert_eq!(b.delay_ns(0, 0.5), S);
        assert!(b.delay_ns(0, 0.999_999) <= 1_200_000_000);
        assert!(b.delay_ns(0, 0.999_999) > 1_199_999_000);
        // Capped: jitter applies after the cap (gRPC), so up to 144 s.
        assert_eq!(b.delay_ns(50, 0.0), 96 * S);
        assert_eq!(b.delay_ns(50, 1.0), 144 * S);
        // Out-of-range randoms are clamped; NaN means no jitter.
        assert_eq!(b.delay_ns(0, -3.0), 800_000_000);
        assert_eq!(b.delay_ns(0, 7.0), 1_200_000_000);
        assert_eq!(b.delay_ns(0, f64::NAN), S);
    }

    #[test]
    fn odd_parameters_do_not_panic() {
        let weird = Backoff {
            base_ns: u64::MAX,
            multiplier: f64::NAN,
            jitter: f64::INFINITY,
            cap_ns: u64::MAX,
        };
        assert_eq!(weird.delay_ns(3, 0.5), u64::MAX);
        assert_eq!(weird.delay_ns(3, 0.99), u64::MAX, "saturates");
        let zero = Backoff {
            base_ns: 0,
            ..Backoff::default()
        };
        assert_eq!(zero.delay_ns(u32::MAX, 0.9), 0);
        let shrinking = Backoff {
            multiplier: 0.5,
            jitter: 0.0,
            ..Backoff::default()
        };
        assert_eq!(
            shrinking.delay_ns(5, 0.3),
            S,
            "multiplier below 1 counts as 1"
        );
    }

    #[test]
    fn parses_any_subset_in_any_order() {
        assert_eq!("".parse::<Backoff>().unwrap(), Backoff::default());
        assert_eq!(
            "base=1s,mult=1.6,jitter=0.2,max=120s"
                .parse::<Backoff>()
                .unwrap(),
            Backoff::default()
        );
        let b: Backoff = " max=2m , base=100ms,jitter=0".parse().unwrap();
        assert_eq!(
            b,
            Backoff {
                base_ns: 100_000_000,
                multiplier: 1.6,
                jitter: 0.0,
                cap_ns: 120 * S
            }
        );
        let c: Backoff = "multiplier=2,cap=10s".parse().unwrap();
        assert_eq!((c.multiplier, c.cap_ns), (2.0, 10 * S));
        // Display reads back.
        for b in [Backoff::default(), b, c] {
            assert_eq!(b.to_string().parse::<Backoff>().unwrap(), b, "{b}");
        }
        assert_eq!(
            Backoff::default().to_string(),
            "base=1s,mult=1.6,jitter=0.2,max=2m"
        );
    }

    #[test]
    fn parse_errors_are_one_line_and_name_the_key() {
        let cases = [
            ("base", "expected key=value, got \"base\""),
            ("base=1s,", "expected key=value, got \"\""),
            ("speed=2", "unknown key \"speed\""),
            ("base=1s,base=2s", "base is given twice"),
            ("mult=2,multiplier=3", "mult is given twice"),
            (
                "base=fast",
                "base: expected a duration such as 10s or 500ms, got \"fast\"",
            ),
            ("base=1", "base: expected a duration"),
            ("max=1000d", "max: must be at most 1day"),
            (
                "mult=0.5",
                "mult: expected a number from 1 to 100, got \"0.5\"",
            ),
            ("mult=NaN", "mult: expected a number from 1 to 100"),
            ("jitter=1.5", "jitter: expected a number from 0 to 1"),
            ("jitter=-0.1", "jitter: expected a number from 0 to 1"),
            ("base=10s,max=5s", "max (5s) is below base (10s)"),
            ("base=3m", "max (2m) is below base (3m)"),
        ];
        for (spec, needle) in cases {
            let e = spec.parse::<Backoff>().unwrap_err().to_string();
            assert!(e.contains(needle), "{spec:?}: {e}");
            assert!(!e.contains('\n'));
        }
    }

    proptest! {
        #[test]
        fn delays_stay_within_the_jitter_band_and_under_cap_plus_jitter(
            attempt in 0u32..200, u in 0.0f64..1.0,
            base_ms in 0u64..10_000, cap_s in 10u64..1000, mult in 1.0f64..4.0,
        ) {
            let b = Backoff {
                base_ns: base_ms * 1_000_000,
                multiplier: mult,
                jitter: 0.2,
                cap_ns: cap_s * S,
            };
            let d = b.unjittered_ns(attempt) as f64;
            let j = b.delay_ns(attempt, u) as f64;
            prop_assert!(j >= 0.8 * d - 1.0 && j <= 1.2 * d + 1.0, "{} vs {}", j, d);
            prop_assert!(j <= 1.2 * b.cap_ns as f64 + 1.0);
            prop_assert!(b.unjittered_ns(attempt) <= b.unjittered_ns(attempt + 1));
        }

        #[test]
        fn parse_never_panics(s in "[a-z0-9=,.ms -]{0,40}") {
            let _ = s.parse::<Backoff>();
        }
    }
}
