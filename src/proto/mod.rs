//! Response framers: sans-I/O parsers that find where one response ends in the byte
//! stream, so latency stops at the right byte. They never allocate and never read a
//! socket; the engine feeds them whatever a receive completion returned.
//!
//! A framer is fed bytes and answers with [`Parsed`]: a response completed after
//! `consumed` bytes, more bytes are needed (having consumed some), or the stream is
//! invalid. A framer may consume fewer bytes than it was given on `Incomplete`; the
//! engine then keeps the rest and feeds it again with the next bytes appended.
//!
//! Streaming: every framer consumes all it can on `Incomplete`, so a response larger
//! than the engine's receive buffer still parses (a 1 MiB HTTP body or RESP bulk string
//! goes through a 4 KiB buffer). The only bytes a framer leaves un-consumed are a piece
//! it must see whole — an HTTP status or header line, a chunk-size line, a RESP length
//! line — and those are capped at [`LINE_BYTES_MAX`]; a longer one is `Invalid`.
//!
//! Bounds: every framer is built with `max_response` (`--max-response`); a response
//! longer than that is `Invalid` ("response exceeds --max-response"), detected as soon
//! as a length field announces it or the bytes seen pass it.
//!
//! | `--framing`                       | framer                    | file                 |
//! |-----------------------------------|---------------------------|----------------------|
//! | `echo`                            | as many bytes as sent     | `echo.rs`            |
//! | `fixed:N`                         | N bytes                   | `fixed.rs`           |
//! | `delimiter:BYTES`                 | up to a byte sequence     | `delimiter.rs`       |
//! | `length-prefixed:u32be,offset=N`… | a length field            | `length_prefixed.rs` |
//! | `http1`                           | HTTP/1.x responses        | `http1.rs`           |
//! | `resp`                            | Redis RESP2 replies       | `resp.rs`            |
//! | `memcached`                       | memcached text replies    | `memcached.rs`       |
//!
//! Error replies: [`Framer::status`] tells an answer from a reply that reports
//! failure, for the framers whose protocol has such replies (HTTP status codes, RESP
//! `-ERR`, memcached `ERROR`/`CLIENT_ERROR`/`SERVER_ERROR`); the engine counts those
//! as request errors ([`ErrorStatus`] chooses the HTTP codes). `echo`, `fixed:N`,
//! `delimiter:` and `length-prefixed:` have no notion of error: every response is an
//! answer.
//!
//! HTTP/2 is not a framer: one connection carries many streams whose frames interleave,
//! and reading them needs per-connection state (settings, flow-control windows, the
//! HPACK table). Its sans-I/O client codec is [`h2`], built the same way (frames read
//! in place from a `&[u8]` and answered `Complete` / `Incomplete` / `Invalid`, writers
//! into a `&mut [u8]`, the framers' test matrix, a fuzz target), for the workload that
//! will drive it.
mod delimiter;
pub mod expect;
mod fixed;
pub mod frame;
pub mod frame_proto;
pub mod grpc;
pub mod h2;
mod http1;
mod length_prefixed;
mod memcached;
mod resp;
pub mod server_time;
mod status;
#[cfg(test)]
pub(crate) mod testkit;
pub mod udp_header;

pub use delimiter::{Delimited, DelimiterSpec};
pub use expect::{Expectations, Verdict};
pub use fixed::FixedLength;
pub use http1::Http1;
pub use length_prefixed::{LengthField, LengthPrefixSpec, LengthPrefixed};
pub use memcached::Memcached;
pub use resp::Resp;
pub use server_time::ServerTimeSource;
pub use status::ErrorStatus;

use std::fmt;
use std::str::FromStr;

/// Longest piece a framer needs contiguous (an HTTP header line, a chunk-size line, a
/// RESP length line). Real header lines are well under 1 KiB; nginx's default limit for
/// one is 8 KiB (`large_client_header_buffers`), and a peer sending more is broken or
/// hostile, so the line is `Invalid` rather than a reason to grow the receive buffer.
pub const LINE_BYTES_MAX: usize = 8 << 10;

// Framers' messages say "8 KiB" and "deeper than 8": keep them true.
const _: () = assert!(LINE_BYTES_MAX == 8 << 10 && RESP_DEPTH_MAX == 8);

/// Longest `delimiter:` sequence; the partial-match table is a fixed array of this size.
pub const DELIMITER_BYTES_MAX: usize = 64;

/// Deepest nesting of RESP arrays; the framer keeps a fixed stack of this many counts.
pub const RESP_DEPTH_MAX: usize = 8;

/// The reason every framer gives for a response longer than `max_response`.
pub const OVERSIZE: &str = "response exceeds --max-response";

/// Outcome of feeding bytes to a framer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// One response ended after `consumed` bytes of the input (`consumed >= 1`).
    Complete { consumed: usize },
    /// No response ended; `consumed` bytes were used and need not be fed again.
    Incomplete { consumed: usize },
    /// The bytes cannot be a response.
    Invalid { reason: &'static str },
}

/// One response framer per connection; state carries across receive completions.
pub trait Framer {
    fn feed(&mut self, input: &[u8]) -> Parsed;

    /// Forget any partial response (the connection was reopened).
    fn reset(&mut self);

    /// The status of the response that last completed (`None` before the first one,
    /// and always for framers without a notion of status). HTTP: the status code of
    /// the final response (1xx interim responses are skipped). RESP: `Some(0)` for a
    /// reply without an error, `Some(1)` when the reply is an error or an array that
    /// holds one at any depth.
    fn status(&self) -> Option<u16> {
        None
    }

    /// True when the response that last completed ends the connection: the server
    /// said `Connection: close`, or spoke HTTP/1.0 without `Connection: keep-alive`, or
    /// the body ran until the close. The engine closes and reopens the connection
    /// after recording it; requests pipelined behind it will not be answered.
    fn close_after(&self) -> bool {
        false
    }

    /// The peer closed the connection (a receive returned 0). True when that ended the
    /// response in progress: an HTTP response with neither Content-Length nor chunked
    /// encoding, whose body runs until the close. The engine then records one
    /// response as complete (`status()` and `close_after()` describe it) before
    /// reopening; otherwise the close is the usual error. Bytes the engine still keeps
    /// un-consumed are not part of such a body (the framer consumes all of it).
    fn eof(&mut self) -> bool {
        false
    }

    /// Where the body of the response that last completed starts, counted from the
    /// response's first byte (interim responses included): what `--expect` body
    /// assertions read. `None` for framers without a notion of body.
    fn body_start(&self) -> Option<usize> {
        None
    }

    /// The server's own time the response that last completed carried, in ns
    /// (`--server-time` read from its headers; see [`server_time`]). `None` when it
    /// carried none, and always for framers that read no headers.
    fn server_time_ns(&self) -> Option<u64> {
        None
    }
}

/// The `--framing` choice, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// The response has as many bytes as the request.
    Echo,
    /// The response has exactly N bytes.
    Fixed(usize),
    /// The response ends right after the first occurrence of a byte sequence.
    Delimiter(DelimiterSpec),
    /// The response carries its length in a binary field.
    LengthPrefixed(LengthPrefixSpec),
    /// HTTP/1.x responses.
    Http1,
    /// Redis RESP2 replies.
    Resp,
    /// memcached text-protocol replies.
    Memcached,
}

/// The forms `--framing` accepts, for error messages.
const FRAMING_FORMS: &str = "echo, fixed:N, delimiter:BYTES, \
     length-prefixed:u16be|u32be|u32le[,offset=N][,adjust=N], http1, resp or memcached";

impl Framing {
    /// The framer for one connection, given the request payload length and the
    /// `--max-response` bound.
    pub fn framer(&self, request_len: usize, max_response: usize) -> AnyFramer {
        match *self {
            // Echo: the response is the request byte for byte, so a fixed-length response
            // of the request's length (contents are not compared: a memcmp per byte for
            // a check the sink does not need).
            Framing::Echo => AnyFramer::Fixed(FixedLength::new(request_len, max_response)),
            Framing::Fixed(n) => AnyFramer::Fixed(FixedLength::new(n, max_response)),
            Framing::Delimiter(spec) => AnyFramer::Delimited(Delimited::new(&spec, max_response)),
            Framing::LengthPrefixed(spec) => {
                AnyFramer::LengthPrefixed(LengthPrefixed::new(spec, max_response))
            }
            Framing::Http1 => AnyFramer::Http1(Http1::new(max_response)),
            Framing::Resp => AnyFramer::Resp(Resp::new(max_response)),
            Framing::Memcached => AnyFramer::Memcached(Memcached::new(max_response)),
        }
    }
}

impl fmt::Display for Framing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Framing::Echo => write!(f, "echo"),
            Framing::Fixed(n) => write!(f, "fixed:{n}"),
            Framing::Delimiter(spec) => write!(f, "delimiter:{spec}"),
            Framing::LengthPrefixed(spec) => write!(f, "length-prefixed:{spec}"),
            Framing::Http1 => write!(f, "http1"),
            Framing::Resp => write!(f, "resp"),
            Framing::Memcached => write!(f, "memcached"),
        }
    }
}

impl FromStr for Framing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "echo" => return Ok(Framing::Echo),
            "http1" => return Ok(Framing::Http1),
            "resp" => return Ok(Framing::Resp),
            "memcached" => return Ok(Framing::Memcached),
            _ => {}
        }
        if let Some(n) = s.strip_prefix("fixed:") {
            let n: usize = n
                .parse()
                .map_err(|_| format!("expected fixed:N with N a byte count, got {s:?}"))?;
            let max = crate::limits::RESPONSE_BYTES_MAX;
            if n == 0 || n > max {
                return Err(format!(
                    "fixed:N must be between 1 and {max} bytes, got {n}"
                ));
            }
            return Ok(Framing::Fixed(n));
        }
        if let Some(rest) = s.strip_prefix("delimiter:") {
            return rest.parse().map(Framing::Delimiter);
        }
        if let Some(rest) = s.strip_prefix("length-prefixed:") {
            return rest.parse().map(Framing::LengthPrefixed);
        }
        Err(format!("expected {FRAMING_FORMS}, got {s:?}"))
    }
}

/// Static dispatch over the framers, so the hot path makes no virtual calls. One per
/// connection: the variants stay small (the delimiter's match table is shared).
#[derive(Debug, Clone)]
pub enum AnyFramer {
    Fixed(FixedLength),
    Delimited(Delimited),
    LengthPrefixed(LengthPrefixed),
    Http1(Http1),
    Resp(Resp),
    Memcached(Memcached),
}

macro_rules! dispatch {
    ($self:expr, $f:ident => $e:expr) => {
        match $self {
            AnyFramer::Fixed($f) => $e,
            AnyFramer::Delimited($f) => $e,
            AnyFramer::LengthPrefixed($f) => $e,
            AnyFramer::Http1($f) => $e,
            AnyFramer::Resp($f) => $e,
            AnyFramer::Memcached($f) => $e,
        }
    };
}

impl Framer for AnyFramer {
    #[inline]
    fn feed(&mut self, input: &[u8]) -> Parsed {
        dispatch!(self, f => f.feed(input))
    }
    fn reset(&mut self) {
        dispatch!(self, f => f.reset())
    }
    #[inline]
    fn status(&self) -> Option<u16> {
        dispatch!(self, f => f.status())
    }
    #[inline]
    fn close_after(&self) -> bool {
        dispatch!(self, f => f.close_after())
    }
    fn eof(&mut self) -> bool {
        dispatch!(self, f => f.eof())
    }
    #[inline]
    fn body_start(&self) -> Option<usize> {
        dispatch!(self, f => f.body_start())
    }
    #[inline]
    fn server_time_ns(&self) -> Option<u64> {
        dispatch!(self, f => f.server_time_ns())
    }
}

impl AnyFramer {
    /// Reads `--server-time` from the responses' headers, when the framer reads
    /// headers (HTTP/1.x) and the source is a header; otherwise nothing changes.
    pub fn read_server_time(&mut self, source: &std::sync::Arc<ServerTimeSource>) {
        if let AnyFramer::Http1(f) = self
            && source.is_http()
        {
            f.read_server_time(source.clone());
        }
    }
}

/// Decodes `\r`, `\n`, `\t`, `\0`, `\\` and `\xHH` (two hex digits) in bytes given
/// as text: payloads, delimiters, mix requests. The inverse of [`escape_prefix`].
pub fn unescape(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let (byte, used) = match b.get(i + 1) {
            Some(b'r') => (b'\r', 2),
            Some(b'n') => (b'\n', 2),
            Some(b't') => (b'\t', 2),
            Some(b'0') => (0, 2),
            Some(b'\\') => (b'\\', 2),
            Some(b'x') => {
                let hex = b
                    .get(i + 2..i + 4)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok())
                    .ok_or_else(|| format!("\\x needs two hex digits at byte {i} of {s:?}"))?;
                (hex, 4)
            }
            Some(_) => return Err(format!("unknown escape at byte {i} of {s:?}")),
            None => return Err(format!("lone \\ at the end of {s:?}")),
        };
        out.push(byte);
        i += used;
    }
    Ok(out)
}

/// The first `max` bytes of `bytes`, printable: `\r \n \t \\` and `\xHH` for every
/// other byte outside printable ASCII, then `...` when bytes were left out. For error
/// messages that show what a peer sent; also the `Display` form of a delimiter, which
/// `delimiter:` parses back.
pub fn escape_prefix(bytes: &[u8], max: usize) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(max.min(bytes.len()) + 3);
    for &b in bytes.iter().take(max) {
        match b {
            b'\r' => out.push_str("\\r"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    if bytes.len() > max {
        out.push_str("...");
    }
    out
}

/// The end of a line that must be seen whole, `input` starting at the line: the index
/// just past its `\n`, searching from `from` (bytes before it are known to hold no
/// `\n`); `Ok(None)` when the line is not complete yet but may still fit, `Err` when
/// it cannot fit in [`LINE_BYTES_MAX`] bytes, `\n` included.
#[inline]
pub(crate) fn find_line_end(input: &[u8], from: usize) -> Result<Option<usize>, ()> {
    // Only the first LINE_BYTES_MAX bytes can hold the end of a line short enough.
    let end = input.len().min(LINE_BYTES_MAX);
    let from = from.min(end);
    match input[from..end].iter().position(|&b| b == b'\n') {
        Some(i) => Ok(Some(from + i + 1)),
        None if input.len() >= LINE_BYTES_MAX => Err(()),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_parses_and_rejects() {
        assert_eq!("echo".parse::<Framing>(), Ok(Framing::Echo));
        assert_eq!("fixed:128".parse::<Framing>(), Ok(Framing::Fixed(128)));
        assert_eq!("http1".parse::<Framing>(), Ok(Framing::Http1));
        assert_eq!("resp".parse::<Framing>(), Ok(Framing::Resp));
        assert!("fixed:0".parse::<Framing>().is_err());
        assert!("fixed:x".parse::<Framing>().is_err());
        assert!("http".parse::<Framing>().is_err());
        assert_eq!(Framing::Fixed(7).to_string(), "fixed:7");
    }

    #[test]
    fn unknown_framing_names_every_form_on_one_line() {
        let e = "http2".parse::<Framing>().unwrap_err();
        assert!(!e.contains('\n'), "{e}");
        for form in [
            "echo",
            "fixed:N",
            "delimiter:BYTES",
            "length-prefixed:u16be|u32be|u32le",
            "http1",
            "resp",
        ] {
            assert!(e.contains(form), "{e} lacks {form}");
        }
        assert!(e.ends_with("got \"http2\""), "{e}");
    }

    #[test]
    fn every_framing_round_trips_through_display() {
        for s in [
            "echo",
            "fixed:9",
            "delimiter:\\r\\n",
            "delimiter:END\\r\\n",
            "delimiter:\\x00\\xff\\\\x",
            "length-prefixed:u16be",
            "length-prefixed:u32le,offset=4,adjust=-2",
            "http1",
            "resp",
        ] {
            let f: Framing = s.parse().unwrap();
            assert_eq!(f.to_string(), s);
        }
    }

    #[test]
    fn every_framing_builds_its_framer() {
        for s in [
            "echo",
            "fixed:3",
            "delimiter:\\n",
            "length-prefixed:u16be",
            "http1",
            "resp",
        ] {
            let mut f = s.parse::<Framing>().unwrap().framer(3, 1 << 20);
            assert!(
                matches!(f.feed(b""), Parsed::Incomplete { consumed: 0 }),
                "{s}"
            );
            assert_eq!(f.status(), None, "{s}");
            assert!(!f.close_after(), "{s}");
        }
    }

    #[test]
    fn one_framer_per_connection_stays_small() {
        // A million connections each hold one (beside a receive buffer of 4 KiB or
        // more): keep one variant from bloating them all, as an inline delimiter
        // table would (130 bytes).
        let size = std::mem::size_of::<AnyFramer>();
        assert!(size <= 80, "{size}");
    }

    #[test]
    fn escape_prefix_shows_control_bytes_and_truncates() {
        assert_eq!(escape_prefix(b"HTTP/1.1 200\r\n", 64), "HTTP/1.1 200\\r\\n");
        assert_eq!(
            escape_prefix(b"a\tb\\c\x00\x7f\xff", 64),
            "a\\tb\\\\c\\x00\\x7f\\xff"
        );
        assert_eq!(escape_prefix(b"abcdef", 3), "abc...");
        assert_eq!(escape_prefix(b"abc", 3), "abc");
        assert_eq!(escape_prefix(b"", 3), "");
    }

    #[test]
    fn line_end_is_capped() {
        assert_eq!(find_line_end(b"ab\r\ncd", 0), Ok(Some(4)));
        assert_eq!(find_line_end(b"ab\r\ncd", 4), Ok(None));
        let long = vec![b'a'; LINE_BYTES_MAX];
        assert_eq!(find_line_end(&long, 0), Err(()));
        let mut fits = vec![b'a'; LINE_BYTES_MAX - 1];
        assert_eq!(find_line_end(&fits, 0), Ok(None));
        fits[LINE_BYTES_MAX - 2] = b'\n';
        assert_eq!(find_line_end(&fits, 0), Ok(Some(LINE_BYTES_MAX - 1)));
    }
}
