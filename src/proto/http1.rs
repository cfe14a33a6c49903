//! HTTP/1.x responses (`http1`), per RFC 9112.
//!
//! A response is a status line (`HTTP/1.x NNN reason`), header lines, an empty line,
//! then a body whose length the headers decide (RFC 9112 section 6.3), in this order:
//!
//! 1. 1xx (interim, e.g. `100 Continue`): no body, and not the answer: the framer
//!    reads the next response as part of the same exchange, so `Complete` comes with
//!    the final response and `consumed` covers both. `101 Switching Protocols` leaves
//!    HTTP and is `Invalid`.
//! 2. 204 and 304: no body, whatever Content-Length says (a 304 carries the length of
//!    the representation it did not send).
//! 3. `Transfer-Encoding` whose last coding is `chunked`: chunks of `hex-size
//!    [;extensions]` line, data, CRLF; a zero size ends them, then trailer lines and an
//!    empty line. Extensions are skipped, trailers checked for syntax and ignored.
//!    With any other last coding the body runs until the close (below).
//! 4. `Content-Length: N`: N bytes (several identical Content-Length headers are
//!    accepted, differing ones are `Invalid`).
//! 5. Neither: the body runs until the server closes the connection. The framer
//!    consumes it, and the response completes only when the engine reports the close
//!    through [`Framer::eof`].
//!
//! Responses to HEAD (headers announcing a body that is not sent) are out of scope: the
//! framer would wait for the body. So is CONNECT.
//!
//! Streaming: lines are the only pieces needed whole. A line not yet ended stays
//! un-consumed (`Incomplete` consumes up to its start) and must end within
//! [`LINE_BYTES_MAX`] bytes; `scanned` remembers how much of it was already searched for
//! `\n`, so a line arriving a byte at a time costs linear, not quadratic, time. Bodies
//! and chunk data are counted down as they pass, however large. Lines end with CRLF or
//! a bare LF (RFC 9112 section 2.2 lets a recipient accept it).
//!
//! Checks: the status line must start with `HTTP/1.`, which is checked on the first
//! bytes (trailing garbage after a response is `Invalid` as soon as it differs from
//! `HTTP/1.`), then a digit, a space, three digits (100 to 999) and a space or the end;
//! header names are tokens, values hold no control bytes but tab; obsolete line folding
//! is `Invalid`; Content-Length is digits only; a chunk size is hex. A response whose
//! bytes (interim responses included) pass `--max-response` is `Invalid`, found at the
//! headers when Content-Length or a chunk size announces it.
//!
//! After each response [`Framer::status`] gives its status code and
//! [`Framer::close_after`] whether the connection ends with it: `Connection: close`,
//! HTTP/1.0 without `Connection: keep-alive`, a body read until the close, or both
//! Transfer-Encoding and Content-Length (RFC 9112 section 6.3 asks the client to close
//! then, the framing being suspect).

use super::{Framer, LINE_BYTES_MAX, OVERSIZE, Parsed, ServerTimeSource, find_line_end};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    StatusLine,
    Header,
    /// Content-Length body; `remaining` bytes to go.
    Body,
    ChunkSize,
    /// `remaining` bytes of chunk data to go.
    ChunkData,
    /// The CRLF after chunk data.
    ChunkEnd,
    Trailer,
    /// Body delimited by the connection's close.
    UntilClose,
}

#[derive(Debug, Clone)]
pub struct Http1 {
    max_response: usize,
    /// Bytes of the current response consumed so far (interim responses included).
    seen: usize,
    /// Content-Length once seen, then body or chunk bytes still to come.
    remaining: u64,
    state: State,
    /// Bytes of the pending (un-consumed) line already searched for `\n`.
    scanned: u16,
    // What the headers of the current response said.
    status: u16,
    /// Bits of what the headers said ([`HTTP10`] .. [`KEEP_ALIVE`]) and [`LAST_CLOSE`]:
    /// one byte for seven flags keeps the framer, one per connection, within its bound.
    said: u8,
    /// Bytes of the current response before its body (`seen` at the end of the
    /// final response's header block). u32, saturating: only `--expect` reads it, of
    /// responses kept whole (at most half the receive buffer); the narrow field keeps
    /// the framer, one per connection, within its bound.
    body_at: u32,
    // The response that completed last.
    last_status: u16,
    last_body_at: u32,
    /// `--server-time` read from a header (`None`: not read).
    server_time: Option<Arc<ServerTimeSource>>,
    /// The server time the current response carried so far, then (after `Complete`,
    /// until the next status line) the completed one's; [`NO_SERVER_TIME`]: none.
    server_ns: u64,
}

// Bits of `Http1::said`. The current response: HTTP/1.0; a Content-Length; chunked or
// another last transfer coding; `Connection: close` or `keep-alive`.
const HTTP10: u8 = 1;
const HAS_LENGTH: u8 = 1 << 1;
const CHUNKED: u8 = 1 << 2;
const OTHER_CODING: u8 = 1 << 3;
const CONN_CLOSE: u8 = 1 << 4;
const KEEP_ALIVE: u8 = 1 << 5;
/// The response that completed last ends the connection.
const LAST_CLOSE: u8 = 1 << 6;

/// `server_ns` when the response carried no server time.
const NO_SERVER_TIME: u64 = u64::MAX;

/// What a complete line did to the response.
enum Step {
    Continue,
    Complete,
}

const STATUS_PREFIX: &[u8] = b"HTTP/1.";

impl Http1 {
    pub fn new(max_response: usize) -> Self {
        Http1 {
            max_response,
            seen: 0,
            remaining: 0,
            state: State::StatusLine,
            scanned: 0,
            status: 0,
            said: 0,
            body_at: 0,
            last_status: 0,
            last_body_at: 0,
            server_time: None,
            server_ns: NO_SERVER_TIME,
        }
    }

    /// Reads the server's own time from each response's headers (trailers too).
    pub fn read_server_time(&mut self, source: Arc<ServerTimeSource>) {
        self.server_time = Some(source);
    }

    /// A header (or trailer) field of the current response, for `--server-time`:
    /// several `Server-Timing` fields add up, otherwise the first value counts.
    #[inline]
    fn server_time_field(&mut self, name: &[u8], value: &[u8]) {
        let Some(src) = &self.server_time else {
            return;
        };
        let Some(ns) = src.from_header(name, value) else {
            return;
        };
        if self.server_ns == NO_SERVER_TIME {
            self.server_ns = ns.min(NO_SERVER_TIME - 1);
        } else if src.sums() {
            self.server_ns = self.server_ns.saturating_add(ns).min(NO_SERVER_TIME - 1);
        }
    }

    /// Clears what the headers said, for the next (possibly interim) response.
    fn clear_headers(&mut self) {
        self.remaining = 0;
        self.status = 0;
        self.said &= LAST_CLOSE;
    }

    #[inline]
    fn is(&self, bit: u8) -> bool {
        self.said & bit != 0
    }

    #[inline]
    fn mark(&mut self, bit: u8, on: bool) {
        if on {
            self.said |= bit;
        } else {
            self.said &= !bit;
        }
    }

    /// The response ended: remember what the engine may ask, start the next one.
    fn finish(&mut self) {
        self.last_status = self.status;
        self.last_body_at = self.body_at;
        let close = self.is(CONN_CLOSE)
            || (self.is(HTTP10) && !self.is(KEEP_ALIVE))
            || self.state == State::UntilClose
            || (self.is(HAS_LENGTH) && self.is(CHUNKED | OTHER_CODING));
        self.mark(LAST_CLOSE, close);
        self.state = State::StatusLine;
        self.seen = 0;
        self.scanned = 0;
        self.clear_headers();
    }

    fn line(&mut self, line: &[u8]) -> Result<Step, &'static str> {
        match self.state {
            State::StatusLine => {
                self.clear_headers();
                // Kept past `Complete` for the engine; an interim response's is
                // dropped with it.
                self.server_ns = NO_SERVER_TIME;
                self.status_line(line)?;
                self.state = State::Header;
                Ok(Step::Continue)
            }
            State::Header if line.is_empty() => self.end_of_headers(),
            State::Header => {
                let (name, value) = header(line)?;
                self.header(name, value)?;
                self.server_time_field(name, value);
                Ok(Step::Continue)
            }
            State::ChunkSize => {
                let size = chunk_size(line)?;
                if size == 0 {
                    self.state = State::Trailer;
                } else {
                    self.body_fits(size)?;
                    self.remaining = size;
                    self.state = State::ChunkData;
                }
                Ok(Step::Continue)
            }
            State::ChunkEnd if line.is_empty() => {
                self.state = State::ChunkSize;
                Ok(Step::Continue)
            }
            State::ChunkEnd => Err("chunk data longer than its size"),
            State::Trailer if line.is_empty() => Ok(Step::Complete),
            State::Trailer => {
                // Trailer fields must not change the framing: checked, then ignored
                // but for the server's time (a `Server-Timing` trailer).
                let (name, value) = header(line)?;
                self.server_time_field(name, value);
                Ok(Step::Continue)
            }
            State::Body | State::ChunkData | State::UntilClose => {
                unreachable!("no lines in a body")
            }
        }
    }

    fn status_line(&mut self, line: &[u8]) -> Result<(), &'static str> {
        const BAD: &str = "malformed HTTP status line";
        // "HTTP/1.x NNN" then " reason" or nothing.
        if line.len() < 12 || !line.starts_with(STATUS_PREFIX) {
            return Err(BAD);
        }
        let minor = line[7];
        let code = &line[9..12];
        if !minor.is_ascii_digit() || line[8] != b' ' || !code.iter().all(u8::is_ascii_digit) {
            return Err(BAD);
        }
        if line.len() > 12 && line[12] != b' ' {
            return Err(BAD);
        }
        if line[12..].iter().any(|&b| is_ctl(b)) {
            return Err("control character in the HTTP reason phrase");
        }
        let status = code.iter().fold(0u16, |n, &d| n * 10 + (d - b'0') as u16);
        if status < 100 {
            return Err("HTTP status code below 100");
        }
        self.status = status;
        self.mark(HTTP10, minor == b'0');
        Ok(())
    }

    fn header(&mut self, name: &[u8], value: &[u8]) -> Result<(), &'static str> {
        if name.eq_ignore_ascii_case(b"content-length") {
            if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
                return Err("malformed Content-Length");
            }
            let n = value.iter().fold(0u64, |n, &d| n * 10 + (d - b'0') as u64);
            if self.is(HAS_LENGTH) && n != self.remaining {
                return Err("conflicting Content-Length headers");
            }
            self.mark(HAS_LENGTH, true);
            self.remaining = n;
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // The last coding of the last Transfer-Encoding header decides.
            for coding in value.split(|&b| b == b',') {
                let token = trim(coding.split(|&b| b == b';').next().unwrap_or(b""));
                if token.is_empty() {
                    continue;
                }
                let chunked = token.eq_ignore_ascii_case(b"chunked");
                self.mark(CHUNKED, chunked);
                self.mark(OTHER_CODING, !chunked);
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for option in value.split(|&b| b == b',') {
                let option = trim(option);
                if option.eq_ignore_ascii_case(b"close") {
                    self.mark(CONN_CLOSE, true);
                } else if option.eq_ignore_ascii_case(b"keep-alive") {
                    self.mark(KEEP_ALIVE, true);
                }
            }
        }
        Ok(())
    }

    fn end_of_headers(&mut self) -> Result<Step, &'static str> {
        self.body_at = u32::try_from(self.seen).unwrap_or(u32::MAX);
        match self.status {
            101 => return Err("101 Switching Protocols: the connection left HTTP/1"),
            100..=199 => {
                // Interim: the final response follows on the same exchange.
                self.state = State::StatusLine;
                return Ok(Step::Continue);
            }
            204 | 304 => return Ok(Step::Complete),
            _ => {}
        }
        if self.is(CHUNKED) {
            self.state = State::ChunkSize;
        } else if self.is(OTHER_CODING) {
            self.state = State::UntilClose;
        } else if self.is(HAS_LENGTH) {
            self.body_fits(self.remaining)?;
            if self.remaining == 0 {
                return Ok(Step::Complete);
            }
            self.state = State::Body;
        } else {
            self.state = State::UntilClose;
        }
        Ok(Step::Continue)
    }

    /// Rejects a line from its first bytes when they cannot start it, so garbage is
    /// `Invalid` at once rather than after a whole line of it.
    #[inline]
    fn early_check(&self, rest: &[u8]) -> Result<(), &'static str> {
        match self.state {
            State::StatusLine => {
                let n = rest.len().min(STATUS_PREFIX.len());
                if rest[..n] != STATUS_PREFIX[..n] {
                    return Err("expected an HTTP/1.x status line");
                }
            }
            State::ChunkEnd => {
                let ok = matches!(rest, [] | [b'\n', ..] | [b'\r'] | [b'\r', b'\n', ..]);
                if !ok {
                    return Err("chunk data longer than its size");
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Fails when `len` more bytes would pass `--max-response`.
    fn body_fits(&self, len: u64) -> Result<(), &'static str> {
        if len > (self.max_response - self.seen) as u64 {
            Err(OVERSIZE)
        } else {
            Ok(())
        }
    }
}

impl Framer for Http1 {
    fn feed(&mut self, input: &[u8]) -> Parsed {
        let mut pos = 0;
        loop {
            match self.state {
                State::Body | State::ChunkData => {
                    let available = (input.len() - pos) as u64;
                    if available < self.remaining {
                        self.remaining -= available;
                        self.seen += available as usize;
                        return Parsed::Incomplete {
                            consumed: input.len(),
                        };
                    }
                    pos += self.remaining as usize;
                    self.seen += self.remaining as usize;
                    self.remaining = 0;
                    if self.state == State::Body {
                        self.finish();
                        return Parsed::Complete { consumed: pos };
                    }
                    self.state = State::ChunkEnd;
                }
                State::UntilClose => {
                    let available = input.len() - pos;
                    if available > self.max_response - self.seen {
                        return Parsed::Invalid { reason: OVERSIZE };
                    }
                    self.seen += available;
                    return Parsed::Incomplete {
                        consumed: input.len(),
                    };
                }
                _ => {
                    let rest = &input[pos..];
                    if let Err(reason) = self.early_check(rest) {
                        return Parsed::Invalid { reason };
                    }
                    let end = match find_line_end(rest, self.scanned as usize) {
                        Ok(Some(end)) => end,
                        Ok(None) => {
                            if rest.len() > self.max_response - self.seen {
                                return Parsed::Invalid { reason: OVERSIZE };
                            }
                            // Fits in u16: find_line_end fails past LINE_BYTES_MAX.
                            self.scanned = rest.len() as u16;
                            return Parsed::Incomplete { consumed: pos };
                        }
                        Err(()) => {
                            return Parsed::Invalid {
                                reason: "HTTP line longer than 8 KiB",
                            };
                        }
                    };
                    if end > self.max_response - self.seen {
                        return Parsed::Invalid { reason: OVERSIZE };
                    }
                    self.scanned = 0;
                    self.seen += end;
                    pos += end;
                    let line = strip_eol(&rest[..end]);
                    match self.line(line) {
                        Ok(Step::Continue) => {}
                        Ok(Step::Complete) => {
                            self.finish();
                            return Parsed::Complete { consumed: pos };
                        }
                        Err(reason) => return Parsed::Invalid { reason },
                    }
                }
            }
        }
    }

    fn reset(&mut self) {
        self.finish();
        self.last_status = 0;
        self.said = 0;
        self.last_body_at = 0;
        self.server_ns = NO_SERVER_TIME;
    }

    fn status(&self) -> Option<u16> {
        (self.last_status != 0).then_some(self.last_status)
    }

    fn close_after(&self) -> bool {
        self.is(LAST_CLOSE)
    }

    fn body_start(&self) -> Option<usize> {
        Some(self.last_body_at as usize)
    }

    #[inline]
    fn server_time_ns(&self) -> Option<u64> {
        (self.server_ns != NO_SERVER_TIME).then_some(self.server_ns)
    }

    fn eof(&mut self) -> bool {
        if self.state == State::UntilClose {
            self.finish();
            true
        } else {
            false
        }
    }
}

/// The line without its `\n` or `\r\n`.
fn strip_eol(line: &[u8]) -> &[u8] {
    let line = &line[..line.len() - 1];
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn is_ctl(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

/// RFC 9110 `tchar`: what a header name (and a token) is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Strips spaces and tabs (`OWS`) from both ends.
fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Splits a header line into name and trimmed value, checking both.
fn header(line: &[u8]) -> Result<(&[u8], &[u8]), &'static str> {
    if matches!(line.first(), Some(b' ' | b'\t')) {
        return Err("obsolete HTTP header line folding");
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or("HTTP header line without a colon")?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err("malformed HTTP header name");
    }
    if value.iter().any(|&b| is_ctl(b)) {
        return Err("control character in an HTTP header value");
    }
    Ok((name, trim(value)))
}

/// The size of a chunk-size line: hex digits, then optional whitespace and
/// `;extensions` (skipped, but free of control bytes).
fn chunk_size(line: &[u8]) -> Result<u64, &'static str> {
    const BAD: &str = "malformed chunk size";
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(BAD);
    }
    if digits > 15 {
        // Above 2^60 bytes: no bound passes it, whatever the leading zeros say.
        return Err(OVERSIZE);
    }
    let after = trim(&line[digits..]);
    if !(after.is_empty() || after[0] == b';') || after.iter().any(|&b| is_ctl(b)) {
        return Err(BAD);
    }
    Ok(line[..digits].iter().fold(0u64, |n, &d| {
        n * 16 + (d as char).to_digit(16).unwrap_or(0) as u64
    }))
}

const _: () = assert!(LINE_BYTES_MAX <= u16::MAX as usize);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::{self, Outcome, concat};
    use proptest::prelude::*;

    const MAX: usize = 1 << 20;
    const NGINX_200: &[u8] = include_bytes!("fixtures/nginx_200.http");
    const CHUNKED: &[u8] = include_bytes!("fixtures/chunked_trailers.http");
    const NO_CONTENT: &[u8] = b"HTTP/1.1 204 No Content\r\nServer: nginx/1.24.0\r\n\
        Date: Mon, 06 May 2024 09:12:31 GMT\r\nConnection: keep-alive\r\n\r\n";
    const NOT_MODIFIED: &[u8] = b"HTTP/1.1 304 Not Modified\r\nServer: nginx/1.24.0\r\n\
        ETag: \"66389eda-267\"\r\nContent-Length: 615\r\n\r\n";
    const CONTINUE_THEN_OK: &[u8] =
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";

    fn http() -> Http1 {
        Http1::new(MAX)
    }

    #[test]
    fn complete_in_one_read() {
        let mut f = http();
        assert_eq!(f.status(), None);
        assert_eq!(f.feed(NGINX_200), Parsed::Complete { consumed: 862 });
        assert_eq!(f.status(), Some(200));
        assert!(!f.close_after());
        assert_eq!(
            f.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
            Parsed::Complete { consumed: 38 }
        );
    }

    #[test]
    fn body_start_is_after_the_final_header_block() {
        // What `--expect` body assertions read: the bytes after the final response's
        // empty line, interim responses counted in.
        let mut f = http();
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody";
        assert_eq!(f.feed(r), Parsed::Complete { consumed: r.len() });
        assert_eq!(&r[f.body_start().unwrap()..], b"body");
        assert_eq!(
            f.feed(CONTINUE_THEN_OK),
            Parsed::Complete {
                consumed: CONTINUE_THEN_OK.len()
            }
        );
        assert_eq!(&CONTINUE_THEN_OK[f.body_start().unwrap()..], b"ok");
        assert_eq!(
            f.feed(NO_CONTENT),
            Parsed::Complete {
                consumed: NO_CONTENT.len()
            }
        );
        assert_eq!(f.body_start(), Some(NO_CONTENT.len()));
    }

    #[test]
    fn nginx_response_at_every_split() {
        testkit::check_splits(http, NGINX_200, &[862]);
    }

    #[test]
    fn chunked_with_extensions_and_trailers_at_every_split() {
        let mut f = http();
        assert_eq!(
            f.feed(CHUNKED),
            Parsed::Complete {
                consumed: CHUNKED.len()
            }
        );
        assert_eq!(f.status(), Some(200));
        testkit::check_splits(http, CHUNKED, &[CHUNKED.len()]);
    }

    #[test]
    fn no_body_for_204_and_304() {
        // The 304's Content-Length describes the representation, not this response.
        let (stream, ends) = concat(&[
            NO_CONTENT.to_vec(),
            NOT_MODIFIED.to_vec(),
            NGINX_200.to_vec(),
        ]);
        testkit::check_splits(http, &stream, &ends);
        let mut f = http();
        assert_eq!(
            f.feed(NOT_MODIFIED),
            Parsed::Complete {
                consumed: NOT_MODIFIED.len()
            }
        );
        assert_eq!(f.status(), Some(304));
    }

    #[test]
    fn continue_then_final_response_is_one_response() {
        let mut f = http();
        assert_eq!(
            f.feed(CONTINUE_THEN_OK),
            Parsed::Complete {
                consumed: CONTINUE_THEN_OK.len()
            }
        );
        assert_eq!(f.status(), Some(201));
        // The interim response alone completes nothing, and is consumed.
        let mut f = http();
        assert_eq!(
            f.feed(&CONTINUE_THEN_OK[..25]),
            Parsed::Incomplete { consumed: 25 }
        );
        testkit::check_splits(http, CONTINUE_THEN_OK, &[CONTINUE_THEN_OK.len()]);
    }

    #[test]
    fn pipelined_responses_in_one_read() {
        let (stream, ends) = concat(&[
            NGINX_200.to_vec(),
            CHUNKED.to_vec(),
            NO_CONTENT.to_vec(),
            CONTINUE_THEN_OK.to_vec(),
            NOT_MODIFIED.to_vec(),
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nnot found".to_vec(),
        ]);
        let mut f = http();
        assert_eq!(
            testkit::run(&mut f, &stream, &[]),
            Outcome::pending(ends.clone(), 0)
        );
        assert_eq!(f.status(), Some(404));
        testkit::check_splits(http, &stream, &ends);
    }

    #[test]
    fn trailing_garbage_is_invalid_on_its_first_bad_byte() {
        let mut stream = NGINX_200.to_vec();
        stream.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxGARBAGE");
        for cuts in [&[][..], &[1], &[5]] {
            let out = testkit::run(&mut http(), &stream, cuts);
            assert_eq!(
                out,
                Outcome::invalid(
                    vec![862, stream.len() - 7],
                    "expected an HTTP/1.x status line"
                )
            );
        }
        // A prefix of a status line is fine until it stops being one.
        let mut f = http();
        assert_eq!(f.feed(b"HTTP/1"), Parsed::Incomplete { consumed: 0 });
        assert!(matches!(f.feed(b"HTTP/2"), Parsed::Invalid { .. }));
    }

    #[test]
    fn invalid_bytes_are_invalid() {
        for bad in [
            &b"HTTP/2 200 OK\r\n"[..],
            b"HTTP/1.1 20 OK\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTP/1.1 099 Low\r\n\r\n",
            b"HTTP/1.1  200 OK\r\n\r\n",
            b"HTTP/1.1 200 O\x00K\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX: a\x01b\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2 x\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n",
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
            b"\r\nHTTP/1.1 200 OK\r\n\r\n",
        ] {
            let out = testkit::run(&mut http(), bad, &[]);
            assert!(
                out.invalid.is_some(),
                "{:?}: {out:?}",
                String::from_utf8_lossy(bad)
            );
            let out = testkit::run(&mut http(), bad, &[1]);
            assert!(
                out.invalid.is_some(),
                "{:?} by bytes: {out:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn header_names_are_case_insensitive_and_values_trimmed() {
        let r = b"HTTP/1.1 200 OK\r\ncOnTeNt-LeNgTh:\t 3 \t\r\nCONNECTION: Close\r\n\r\nabc";
        let mut f = http();
        assert_eq!(f.feed(r), Parsed::Complete { consumed: r.len() });
        assert!(f.close_after());
        let r = b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, CHUNKED\r\n\r\n1\r\nx\r\n0\r\n\r\n";
        assert_eq!(f.feed(r), Parsed::Complete { consumed: r.len() });
        assert!(!f.close_after());
    }

    #[test]
    fn bare_lf_line_ends_are_accepted() {
        let r = b"HTTP/1.1 200 OK\nContent-Length: 2\n\nhi";
        testkit::check_splits(http, r, &[r.len()]);
        let r = b"HTTP/1.1 200 OK\ntransfer-encoding: chunked\n\n2\nhi\n0\n\n";
        testkit::check_splits(http, r, &[r.len()]);
    }

    #[test]
    fn close_after_follows_connection_and_version() {
        let cases: [(&[u8], bool); 6] = [
            (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false),
            (b"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n", true),
            (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", true),
            (b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", false),
            (b"HTTP/1.1 200 OK\r\nConnection: closed\r\nContent-Length: 0\r\n\r\n", false),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                true,
            ),
        ];
        let mut f = http();
        for (r, close) in cases {
            assert_eq!(f.feed(r), Parsed::Complete { consumed: r.len() }, "{r:?}");
            assert_eq!(f.close_after(), close, "{}", String::from_utf8_lossy(r));
        }
        // The interim response's Connection header does not carry over.
        let r = b"HTTP/1.1 100 Continue\r\nConnection: close\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(f.feed(r), Parsed::Complete { consumed: r.len() });
        assert!(!f.close_after());
    }

    #[test]
    fn body_until_close_completes_at_eof() {
        let r = b"HTTP/1.0 200 OK\r\nServer: SimpleHTTP/0.6\r\n\r\nbody until the close";
        let mut f = http();
        assert!(!f.eof(), "a close between responses ends nothing");
        assert_eq!(testkit::run(&mut f, r, &[3]), Outcome::pending(vec![], 0));
        assert!(f.eof());
        assert_eq!(f.status(), Some(200));
        assert!(f.close_after());
        // A coding other than chunked also runs until the close.
        let mut f = http();
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\nabcdefgh";
        assert_eq!(testkit::run(&mut f, r, &[]), Outcome::pending(vec![], 0));
        assert!(f.eof());
        // A close mid-headers or mid-body ends nothing.
        let mut f = http();
        assert_eq!(
            f.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"),
            Parsed::Incomplete { consumed: 40 }
        );
        assert!(!f.eof());
    }

    #[test]
    fn oversize_is_invalid() {
        // NGINX_200 is 862 bytes: it fits in 862, not in 861, found at the headers.
        assert_eq!(
            testkit::run(&mut Http1::new(862), NGINX_200, &[]),
            Outcome::pending(vec![862], 0)
        );
        for cuts in [&[][..], &[1], &[100]] {
            let out = testkit::run(&mut Http1::new(861), &NGINX_200[..247], cuts);
            assert_eq!(out, Outcome::invalid(vec![], OVERSIZE));
        }
        // A chunk size, a body until the close, a long header run: each found as it comes.
        let chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n100\r\n";
        assert_eq!(
            Http1::new(200).feed(chunk),
            Parsed::Invalid { reason: OVERSIZE }
        );
        assert_eq!(
            Http1::new(200).feed(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFF\r\n"
            ),
            Parsed::Invalid { reason: OVERSIZE }
        );
        let mut until_close = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        until_close.resize(201, b'x');
        assert_eq!(
            Http1::new(200).feed(&until_close),
            Parsed::Invalid { reason: OVERSIZE }
        );
        let mut headers = b"HTTP/1.1 200 OK\r\n".to_vec();
        headers.extend(b"X-Pad: 0123456789\r\n".repeat(20));
        assert_eq!(
            testkit::run(&mut Http1::new(200), &headers, &[7]),
            Outcome::invalid(vec![], OVERSIZE)
        );
    }

    #[test]
    fn a_header_line_past_8_kib_is_invalid() {
        let mut r = b"HTTP/1.1 200 OK\r\nX-Long: ".to_vec();
        r.resize(17 + LINE_BYTES_MAX - 2, b'a');
        r.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
        // Exactly 8 KiB with its CRLF: fine, even through an 8 KiB + 1 buffer.
        assert_eq!(
            testkit::run_buffered(&mut http(), &r, LINE_BYTES_MAX + 1),
            Outcome::pending(vec![r.len()], 0)
        );
        r.insert(30, b'a');
        for cuts in [&[][..], &[1000]] {
            assert_eq!(
                testkit::run(&mut http(), &r, cuts),
                Outcome::invalid(vec![], "HTTP line longer than 8 KiB")
            );
        }
    }

    #[test]
    fn large_bodies_stream_through_a_small_buffer() {
        let body = vec![b'z'; MAX - 1000];
        let mut cl =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        cl.extend_from_slice(&body);
        let mut chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for piece in body.chunks(300_000) {
            chunked.extend_from_slice(format!("{:x};ext=1\r\n", piece.len()).as_bytes());
            chunked.extend_from_slice(piece);
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        let (stream, ends) = concat(&[cl, chunked, NGINX_200.to_vec()]);
        for capacity in [4096, 65536] {
            assert_eq!(
                testkit::run_buffered(&mut http(), &stream, capacity),
                Outcome::pending(ends.clone(), 0)
            );
        }
    }

    #[test]
    fn a_line_arriving_byte_by_byte_is_searched_once() {
        // A partial first line is kept whole (nothing consumed); `scanned` lets the
        // next feed resume the \n search, which must not change where lines end.
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx";
        for end in 1..17 {
            assert_eq!(
                http().feed(&r[..end]),
                Parsed::Incomplete { consumed: 0 },
                "{end}"
            );
        }
        assert_eq!(
            testkit::run(&mut http(), r, &[1]),
            Outcome::pending(vec![r.len()], 0)
        );
        assert_eq!(
            testkit::run(&mut http(), r, &[2, 1, 3]),
            Outcome::pending(vec![r.len()], 0)
        );
    }

    fn timed(spec: &str) -> Http1 {
        let mut f = http();
        f.read_server_time(Arc::new(spec.parse().unwrap()));
        f
    }

    #[test]
    fn server_timing_is_read_from_the_headers_split_anywhere() {
        let r: &[u8] = b"HTTP/1.1 200 OK\r\nServer-Timing: app;dur=7\r\n\
            server-timing: db;dur=2.5;desc=\"x\"\r\nContent-Length: 2\r\n\r\nok";
        for cut in 1..r.len() {
            let mut f = timed("server-timing");
            assert_eq!(f.feed(&r[..cut]), Parsed::Incomplete { consumed: f.seen });
            let rest = &r[f.seen..];
            assert_eq!(
                f.feed(rest),
                Parsed::Complete {
                    consumed: rest.len()
                },
                "{cut}"
            );
            assert_eq!(f.server_time_ns(), Some(9_500_000), "{cut}");
        }
        let mut f = timed("server-timing:db");
        f.feed(r);
        assert_eq!(f.server_time_ns(), Some(2_500_000));
        // Without --server-time nothing is read.
        let mut f = http();
        f.feed(r);
        assert_eq!(f.server_time_ns(), None);
    }

    #[test]
    fn server_time_is_per_response() {
        let mut f = timed("header:x-took");
        let timed_reply = b"HTTP/1.1 200 OK\r\nX-Took: 12.5ms\r\nContent-Length: 0\r\n\r\n";
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        let stream = [&timed_reply[..], plain, CONTINUE_THEN_OK].concat();
        let Parsed::Complete { consumed } = f.feed(&stream) else {
            panic!()
        };
        assert_eq!(f.server_time_ns(), Some(12_500_000));
        let Parsed::Complete { consumed: c2 } = f.feed(&stream[consumed..]) else {
            panic!()
        };
        assert_eq!(f.server_time_ns(), None, "a reply without one carries none");
        f.feed(&stream[consumed + c2..]);
        assert_eq!(f.server_time_ns(), None);
        f.reset();
        assert_eq!(f.server_time_ns(), None);
    }

    #[test]
    fn server_timing_trailer_counts() {
        let mut f = timed("server-timing");
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
            2\r\nok\r\n0\r\nServer-Timing: total;dur=3\r\n\r\n";
        assert_eq!(f.feed(r), Parsed::Complete { consumed: r.len() });
        assert_eq!(f.server_time_ns(), Some(3_000_000));
    }

    #[test]
    fn reset_clears_partial_state() {
        testkit::check_reset(http, &CHUNKED[..200], NGINX_200, &[862]);
        testkit::check_reset(http, &NGINX_200[..300], CHUNKED, &[CHUNKED.len()]);
        testkit::check_reset(
            http,
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2",
            NO_CONTENT,
            &[NO_CONTENT.len()],
        );
        let mut f = http();
        f.feed(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
        f.reset();
        assert_eq!((f.status(), f.close_after()), (None, false));
    }

    /// One generated response: its bytes.
    fn response_strategy() -> impl Strategy<Value = Vec<u8>> {
        let status = prop_oneof![
            Just(200u16),
            Just(201),
            Just(204),
            Just(304),
            Just(404),
            Just(503)
        ];
        let body = proptest::collection::vec(any::<u8>(), 0..120);
        let chunks = proptest::collection::vec(1usize..40, 0..5);
        (
            status,
            any::<bool>(),
            any::<bool>(),
            body,
            chunks,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(status, interim, chunked, body, chunks, ext, trailer)| {
                let mut r = Vec::new();
                if interim {
                    r.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                }
                r.extend_from_slice(
                    format!("HTTP/1.1 {status} Whatever\r\nServer: t\r\n").as_bytes(),
                );
                if status == 204 || status == 304 {
                    r.extend_from_slice(b"\r\n");
                } else if chunked {
                    r.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                    let mut at = 0;
                    for len in chunks {
                        let len = len.min(body.len() - at);
                        if len == 0 {
                            break;
                        }
                        let ext = if ext { ";e=\"1;2\"" } else { "" };
                        r.extend_from_slice(format!("{len:X}{ext}\r\n").as_bytes());
                        r.extend_from_slice(&body[at..at + len]);
                        r.extend_from_slice(b"\r\n");
                        at += len;
                    }
                    r.extend_from_slice(b"0\r\n");
                    if trailer {
                        r.extend_from_slice(b"X-Trailer: yes\r\n");
                    }
                    r.extend_from_slice(b"\r\n");
                } else {
                    r.extend_from_slice(
                        format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes(),
                    );
                    r.extend_from_slice(&body);
                }
                r
            })
    }

    proptest! {
        #[test]
        fn chunking_never_moves_frame_ends(
            responses in proptest::collection::vec(response_strategy(), 0..6),
            cuts in testkit::cuts(),
        ) {
            let (stream, ends) = concat(&responses);
            let whole = testkit::run(&mut http(), &stream, &[]);
            prop_assert_eq!(&whole, &Outcome::pending(ends, 0));
            prop_assert_eq!(testkit::run(&mut http(), &stream, &cuts), whole);
        }

        #[test]
        fn arbitrary_bytes_give_the_same_verdict_however_cut(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            cuts in testkit::cuts(),
        ) {
            let mut stream = b"HTTP/1.1 200 OK\r\n".to_vec();
            stream.extend_from_slice(&bytes);
            let whole = testkit::run(&mut http(), &stream, &[]);
            let cut = testkit::run(&mut http(), &stream, &cuts);
            prop_assert_eq!(whole.ends, cut.ends);
            prop_assert_eq!(whole.invalid, cut.invalid);
        }
    }
}
