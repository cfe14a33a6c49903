//! `--error-status`: which HTTP status codes are request errors. A reply that parses
//! but reports failure is an error, never a success: by default every 5xx.

use std::fmt;
use std::str::FromStr;

/// Status codes are 100..=599; anything else is "other" and never an error.
const CODES: usize = 600;

/// A set of HTTP status codes, one bit each.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ErrorStatus {
    bits: [u64; CODES.div_ceil(64)],
    /// The spec as given, for the report (`5xx`, `5xx,429`, `none`).
    spec: &'static str,
}

impl ErrorStatus {
    /// No code is an error (`--error-status none`).
    pub const NONE: ErrorStatus = ErrorStatus {
        bits: [0; CODES.div_ceil(64)],
        spec: "none",
    };

    /// The default: 500..=599.
    pub fn default_5xx() -> ErrorStatus {
        let mut s = ErrorStatus::NONE;
        s.spec = "5xx";
        for code in 500..600 {
            s.insert(code);
        }
        s
    }

    fn insert(&mut self, code: u16) {
        let c = code as usize;
        self.bits[c / 64] |= 1 << (c % 64);
    }

    /// Whether a response with `code` is a request error.
    #[inline]
    pub fn contains(&self, code: u16) -> bool {
        let c = code as usize;
        c < CODES && self.bits[c / 64] & (1 << (c % 64)) != 0
    }

    pub fn spec(&self) -> &'static str {
        self.spec
    }
}

impl Default for ErrorStatus {
    fn default() -> Self {
        ErrorStatus::default_5xx()
    }
}

impl fmt::Debug for ErrorStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ErrorStatus({})", self.spec)
    }
}

impl FromStr for ErrorStatus {
    type Err = String;

    /// `none`, or a comma list of classes (`4xx`, `5xx`) and codes (`429`), e.g.
    /// `5xx,429,404`. The error is one line without the flag name.
    fn from_str(s: &str) -> Result<Self, String> {
        let compact: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        if compact == "none" {
            return Ok(ErrorStatus::NONE);
        }
        if compact.is_empty() {
            return Err("expected classes and codes such as 5xx,429 or none, got nothing".into());
        }
        let mut set = ErrorStatus::NONE;
        for item in compact.split(',') {
            let lower = item.to_ascii_lowercase();
            if let Some(class) = lower.strip_suffix("xx") {
                match class.parse::<u16>() {
                    Ok(c @ 1..=5) => {
                        for code in c * 100..c * 100 + 100 {
                            set.insert(code);
                        }
                    }
                    _ => {
                        return Err(format!(
                            "unknown class {item:?}: expected 1xx, 2xx, 3xx, 4xx or 5xx"
                        ));
                    }
                }
            } else {
                match item.parse::<u16>() {
                    Ok(code @ 100..=599) => set.insert(code),
                    _ => {
                        return Err(format!(
                            "unknown status {item:?}: expected a code from 100 to 599, a class such as 5xx, or none"
                        ));
                    }
                }
            }
        }
        // Leaked once per process (the plan is built once): the report names the spec.
        set.spec = Box::leak(compact.into_boxed_str());
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_every_5xx() {
        let s = ErrorStatus::default();
        assert!(s.contains(500) && s.contains(503) && s.contains(599));
        assert!(!s.contains(499) && !s.contains(200) && !s.contains(600));
        assert!(!s.contains(0) && !s.contains(u16::MAX));
        assert_eq!(s.spec(), "5xx");
    }

    #[test]
    fn classes_and_codes_combine() {
        let s: ErrorStatus = "5xx, 429,404".parse().unwrap();
        assert!(s.contains(429) && s.contains(404) && s.contains(502));
        assert!(!s.contains(403) && !s.contains(430) && !s.contains(200));
        assert_eq!(s.spec(), "5xx,429,404");
        let none: ErrorStatus = "none".parse().unwrap();
        assert!((0..=u16::MAX).all(|c| !none.contains(c)));
        let four: ErrorStatus = "4XX".parse().unwrap();
        assert!(four.contains(400) && four.contains(499) && !four.contains(500));
    }

    #[test]
    fn unknown_classes_and_codes_are_refused() {
        for (bad, why) in [
            ("6xx", "unknown class"),
            ("0xx", "unknown class"),
            ("xx", "unknown class"),
            ("600", "unknown status"),
            ("99", "unknown status"),
            ("5xx,", "unknown status"),
            ("teapot", "unknown status"),
            ("", "got nothing"),
            ("none,5xx", "unknown status"),
        ] {
            let e = bad.parse::<ErrorStatus>().unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }
}
