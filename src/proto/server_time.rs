//! The server's own time, read from its reply (`--server-time`): sans-I/O parsers for
//! the places a protocol carries it, none of which allocates.
//!
//! | `--server-time`          | where                                                  |
//! |--------------------------|--------------------------------------------------------|
//! | `server-timing`          | HTTP `Server-Timing`: the sum of every metric's `dur=`  |
//! | `server-timing:NAME`     | HTTP `Server-Timing`: metric NAME's `dur=`              |
//! | `header:NAME`            | HTTP header NAME: `12.5ms`, `300us`, `2s`, `900ns`, or a bare number of ms |
//! | `offset:OFF:LEN:UNIT`    | raw TCP: a big-endian unsigned integer of LEN (1, 2, 4, 8) bytes at byte OFF of the reply, in UNIT (ns, us, ms) |
//!
//! `Server-Timing` (W3C Server Timing): a comma-separated list of metrics, each a name
//! then `;param=value` pairs; `dur` is in milliseconds, decimals allowed, its value a
//! token or a quoted string; a parameter given twice counts once (the first). Several
//! `Server-Timing` headers (and trailer fields) make one list. A `dur` that does not
//! parse, or a metric without one, contributes nothing; a reply whose list has no
//! usable `dur` (or not NAME's) carries no server time, and is counted as missing, never
//! recorded as zero.
//!
//! The engine records each reply's server time into `server_time` and
//! `latency - server time` (saturating at 0) into `network_queueing`: a per-request
//! difference, which is what "network + queueing" means; subtracting the two
//! histograms' percentiles would pair different requests.

use std::fmt;
use std::str::FromStr;

/// Where a reply carries the server's own time (`--server-time`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerTimeSource {
    /// HTTP `Server-Timing`: the sum of all metrics' `dur`, or the named metric's.
    ServerTiming { metric: Option<Box<str>> },
    /// An HTTP header whose value is a duration (bare number: milliseconds).
    Header { name: Box<str> },
    /// A big-endian unsigned integer of `len` bytes at byte `offset` of the reply,
    /// counting `unit_ns` nanoseconds.
    Offset { offset: u32, len: u8, unit_ns: u64 },
}

/// The forms `--server-time` accepts, for error messages.
const FORMS: &str = "server-timing, server-timing:NAME, header:NAME or offset:OFF:LEN:UNIT (LEN 1, 2, 4 or 8; \
     UNIT ns, us or ms)";

/// Largest `offset:` byte offset (a reply is at most `--max-response` bytes anyway).
pub const OFFSET_MAX: u32 = crate::limits::RESPONSE_BYTES_MAX as u32;

impl ServerTimeSource {
    /// Whether the source reads HTTP headers (else raw reply bytes).
    pub fn is_http(&self) -> bool {
        !matches!(self, ServerTimeSource::Offset { .. })
    }

    /// The server time an HTTP header line (`name`, trimmed `value`) carries for this
    /// source, in ns; `None` when it is not the header, or carries none.
    #[inline]
    pub fn from_header(&self, name: &[u8], value: &[u8]) -> Option<u64> {
        match self {
            ServerTimeSource::ServerTiming { metric }
                if name.eq_ignore_ascii_case(b"server-timing") =>
            {
                server_timing_ns(value, metric.as_deref().map(str::as_bytes))
            }
            ServerTimeSource::Header { name: want }
                if name.eq_ignore_ascii_case(want.as_bytes()) =>
            {
                duration_ns(value)
            }
            _ => None,
        }
    }

    /// Whether several values add up (`server-timing`: every metric of every header)
    /// rather than the first one counting.
    #[inline]
    pub fn sums(&self) -> bool {
        matches!(self, ServerTimeSource::ServerTiming { metric: None })
    }
}

/// One more value `ns` for a reply that already said `before`: the sum when `source`
/// sums every metric (`server-timing`), else the first value found.
#[inline]
pub fn combine(source: Option<&ServerTimeSource>, before: Option<u64>, ns: u64) -> u64 {
    match before {
        Some(b) if source.is_some_and(ServerTimeSource::sums) => b.saturating_add(ns),
        Some(b) => b,
        None => ns,
    }
}

impl FromStr for ServerTimeSource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "server-timing" {
            return Ok(ServerTimeSource::ServerTiming { metric: None });
        }
        if let Some(name) = s.strip_prefix("server-timing:") {
            if name.is_empty() || !name.bytes().all(is_tchar) {
                return Err(format!(
                    "server-timing:NAME needs a metric name (a token), got {s:?}"
                ));
            }
            return Ok(ServerTimeSource::ServerTiming {
                metric: Some(name.into()),
            });
        }
        if let Some(name) = s.strip_prefix("header:") {
            if name.is_empty() || !name.bytes().all(is_tchar) {
                return Err(format!(
                    "header:NAME needs a header name (a token), got {s:?}"
                ));
            }
            return Ok(ServerTimeSource::Header { name: name.into() });
        }
        if let Some(rest) = s.strip_prefix("offset:") {
            return offset(rest).map_err(|m| format!("{m}, got {s:?}"));
        }
        Err(format!("expected {FORMS}, got {s:?}"))
    }
}

/// `OFF:LEN:UNIT` of `offset:`.
fn offset(rest: &str) -> Result<ServerTimeSource, String> {
    let parts: Vec<&str> = rest.split(':').collect();
    let [off, len, unit] = parts[..] else {
        return Err("expected offset:OFF:LEN:UNIT".into());
    };
    let offset: u32 = off
        .parse()
        .ok()
        .filter(|&o| o <= OFFSET_MAX)
        .ok_or_else(|| format!("offset:OFF must be a byte offset of at most {OFFSET_MAX}"))?;
    let len: u8 = match len {
        "1" => 1,
        "2" => 2,
        "4" => 4,
        "8" => 8,
        _ => return Err("offset:OFF:LEN: LEN must be 1, 2, 4 or 8 bytes".into()),
    };
    let unit_ns = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        _ => return Err("offset:OFF:LEN:UNIT: UNIT must be ns, us or ms".into()),
    };
    Ok(ServerTimeSource::Offset {
        offset,
        len,
        unit_ns,
    })
}

impl fmt::Display for ServerTimeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerTimeSource::ServerTiming { metric: None } => f.write_str("server-timing"),
            ServerTimeSource::ServerTiming { metric: Some(m) } => write!(f, "server-timing:{m}"),
            ServerTimeSource::Header { name } => write!(f, "header:{name}"),
            ServerTimeSource::Offset {
                offset,
                len,
                unit_ns,
            } => {
                let unit = match unit_ns {
                    1 => "ns",
                    1_000 => "us",
                    _ => "ms",
                };
                write!(f, "offset:{offset}:{len}:{unit}")
            }
        }
    }
}

/// The server time of a `Server-Timing` value, in ns: the sum of every metric's `dur`
/// (`metric` `None`), or the first `dur` of the metric named `metric`. `None` when no
/// metric (or not that one) has a `dur` that parses.
pub fn server_timing_ns(value: &[u8], metric: Option<&[u8]>) -> Option<u64> {
    let mut sum: Option<u64> = None;
    for entry in split_outside_quotes(value, b',') {
        let mut params = split_outside_quotes(entry, b';');
        let name = trim(params.next().unwrap_or(b""));
        if metric.is_some_and(|m| !name.eq_ignore_ascii_case(m)) {
            continue;
        }
        // The first `dur` of a metric counts.
        let dur = params.find_map(|p| {
            let p = trim(p);
            let eq = p.iter().position(|&b| b == b'=')?;
            trim(&p[..eq])
                .eq_ignore_ascii_case(b"dur")
                .then(|| unquote(trim(&p[eq + 1..])))
        });
        let Some(ns) = dur.and_then(|d| decimal_ns(d, 1_000_000)) else {
            continue;
        };
        if metric.is_some() {
            return Some(ns);
        }
        sum = Some(sum.unwrap_or(0).saturating_add(ns));
    }
    sum
}

/// A header value that is a duration, in ns: a decimal number then `ns`, `us`, `ms` or
/// `s`, or a bare number of milliseconds (as `Server-Timing` counts).
pub fn duration_ns(value: &[u8]) -> Option<u64> {
    let value = unquote(trim(value));
    let digits = value
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b'.')
        .count();
    let unit_ns = match trim(&value[digits..]) {
        b"" | b"ms" => 1_000_000,
        b"ns" => 1,
        b"us" => 1_000,
        b"s" => 1_000_000_000,
        _ => return None,
    };
    decimal_ns(&value[..digits], unit_ns)
}

/// The big-endian unsigned integer of `len` bytes at `offset` of `reply`, times
/// `unit_ns`; `None` when the reply is shorter.
#[inline]
pub fn field_ns(reply: &[u8], offset: u32, len: u8, unit_ns: u64) -> Option<u64> {
    let start = offset as usize;
    let bytes = reply.get(start..start + len as usize)?;
    let v = bytes.iter().fold(0u64, |v, &b| (v << 8) | u64::from(b));
    Some(v.saturating_mul(unit_ns))
}

/// A non-negative decimal number (`12`, `12.5`, `.5`) in units of `unit_ns`, as ns
/// (fractions of a ns truncated; saturating). `None` when it is not one.
fn decimal_ns(s: &[u8], unit_ns: u64) -> Option<u64> {
    let (int, frac) = match s.iter().position(|&b| b == b'.') {
        Some(dot) => (&s[..dot], &s[dot + 1..]),
        None => (s, &b""[..]),
    };
    if (int.is_empty() && frac.is_empty())
        || !int.iter().chain(frac).all(u8::is_ascii_digit)
        || int.len() > 19
    {
        return None;
    }
    let whole = int
        .iter()
        .fold(0u128, |n, &d| n * 10 + u128::from(d - b'0'));
    // Digits past the 18th are below a ns of any unit here.
    let frac = &frac[..frac.len().min(18)];
    let num = frac
        .iter()
        .fold(0u128, |n, &d| n * 10 + u128::from(d - b'0'));
    let den = 10u128.pow(frac.len() as u32);
    let ns = whole * u128::from(unit_ns) + num * u128::from(unit_ns) / den;
    Some(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// Pieces of `s` between `sep` bytes that are not inside a quoted string.
fn split_outside_quotes(s: &[u8], sep: u8) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let s = rest?;
        let mut quoted = false;
        let mut escaped = false;
        for (i, &b) in s.iter().enumerate() {
            match b {
                _ if escaped => escaped = false,
                b'\\' if quoted => escaped = true,
                b'"' => quoted = !quoted,
                _ if b == sep && !quoted => {
                    rest = Some(&s[i + 1..]);
                    return Some(&s[..i]);
                }
                _ => {}
            }
        }
        rest = None;
        Some(s)
    })
}

/// A quoted string's contents (escapes are not undone: a number has none).
fn unquote(s: &[u8]) -> &[u8] {
    match s {
        [b'"', inner @ .., b'"'] => inner,
        _ => s,
    }
}

/// Strips spaces and tabs from both ends.
fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// RFC 9110 `tchar`: a header or metric name is made of these.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn server_timing_sums_every_dur_in_ms() {
        assert_eq!(server_timing_ns(b"app;dur=7", None), Some(7 * MS));
        assert_eq!(server_timing_ns(b"app;dur=7.25", None), Some(7_250_000));
        assert_eq!(
            server_timing_ns(b"db;dur=53, app;dur=47.2;desc=\"a, b;dur=9\"", None),
            Some(100_200_000)
        );
        assert_eq!(
            server_timing_ns(b"cache;desc=\"Cache Read\";dur=23.2", None),
            Some(23_200_000)
        );
        assert_eq!(server_timing_ns(b"total;dur=\"12\"", None), Some(12 * MS));
        assert_eq!(server_timing_ns(b"a;dur=.5", None), Some(500_000));
        assert_eq!(server_timing_ns(b"a ; DUR = 3 ", None), Some(3 * MS));
        // The first dur of a metric counts.
        assert_eq!(server_timing_ns(b"a;dur=1;dur=5", None), Some(MS));
    }

    #[test]
    fn server_timing_without_a_usable_dur_is_none() {
        assert_eq!(server_timing_ns(b"miss", None), None);
        assert_eq!(server_timing_ns(b"miss, db;desc=x", None), None);
        assert_eq!(server_timing_ns(b"a;dur=-3", None), None);
        assert_eq!(server_timing_ns(b"a;dur=abc", None), None);
        assert_eq!(server_timing_ns(b"a;dur=", None), None);
        assert_eq!(server_timing_ns(b"", None), None);
        // A dur that parses still counts beside one that does not.
        assert_eq!(server_timing_ns(b"a;dur=x, b;dur=2", None), Some(2 * MS));
    }

    #[test]
    fn server_timing_named_metric() {
        let v = b"db;dur=53, app;dur=47.2";
        assert_eq!(server_timing_ns(v, Some(b"app")), Some(47_200_000));
        assert_eq!(server_timing_ns(v, Some(b"DB")), Some(53 * MS));
        assert_eq!(server_timing_ns(v, Some(b"cache")), None);
    }

    #[test]
    fn header_durations_take_a_unit_or_mean_ms() {
        assert_eq!(duration_ns(b"12.5ms"), Some(12_500_000));
        assert_eq!(duration_ns(b"12.5"), Some(12_500_000));
        assert_eq!(duration_ns(b"300us"), Some(300_000));
        assert_eq!(duration_ns(b"2s"), Some(2_000_000_000));
        assert_eq!(duration_ns(b"900ns"), Some(900));
        assert_eq!(duration_ns(b"0.000001s"), Some(1_000));
        assert_eq!(duration_ns(b"\"4 ms\""), Some(4 * MS));
        assert_eq!(duration_ns(b"4min"), None);
        assert_eq!(duration_ns(b"ms"), None);
        assert_eq!(duration_ns(b"-1ms"), None);
        assert_eq!(duration_ns(b"1.2.3"), None);
        assert_eq!(duration_ns(b"99999999999999999999999s"), None);
        assert_eq!(duration_ns(b"9999999999999999999s"), Some(u64::MAX));
    }

    #[test]
    fn binary_fields_are_big_endian() {
        let reply = [0xff, 0x00, 0x00, 0x01, 0x2c, 0xaa];
        assert_eq!(field_ns(&reply, 1, 4, 1_000), Some(300_000));
        assert_eq!(field_ns(&reply, 3, 2, 1), Some(300));
        assert_eq!(field_ns(&reply, 0, 1, MS), Some(255 * MS));
        assert_eq!(field_ns(&reply, 3, 4, 1), None);
        assert_eq!(field_ns(&[0xff; 8], 0, 8, MS), Some(u64::MAX));
    }

    #[test]
    fn sources_parse_and_print_back() {
        for s in [
            "server-timing",
            "server-timing:app",
            "header:X-Response-Time",
            "offset:4:4:us",
            "offset:0:8:ns",
            "offset:2:1:ms",
        ] {
            let src: ServerTimeSource = s.parse().unwrap();
            assert_eq!(src.to_string(), s);
        }
        let src: ServerTimeSource = "header:x-took".parse().unwrap();
        assert_eq!(src.from_header(b"X-Took", b"3ms"), Some(3 * MS));
        assert_eq!(src.from_header(b"Server-Timing", b"a;dur=3"), None);
        assert!(!src.sums());
        assert!("server-timing".parse::<ServerTimeSource>().unwrap().sums());
    }

    #[test]
    fn bad_sources_name_the_forms() {
        for (s, want) in [
            ("servertiming", "expected server-timing"),
            ("server-timing:", "needs a metric name"),
            ("header:", "needs a header name"),
            ("header:a b", "needs a header name"),
            ("offset:4:3:us", "LEN must be 1, 2, 4 or 8"),
            ("offset:4:4:s", "UNIT must be ns, us or ms"),
            ("offset:x:4:us", "byte offset"),
            ("offset:4:4", "expected offset:OFF:LEN:UNIT"),
        ] {
            let e = s.parse::<ServerTimeSource>().unwrap_err();
            assert!(e.contains(want), "{s}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
