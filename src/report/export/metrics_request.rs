//! What the `--metrics-listen` server reads from a connection: HTTP/1.x request heads,
//! one at a time, from the bytes received so far. Pure and sans-I/O (the server in
//! `metrics_server.rs` does the reading and writing), so every hostile input can be
//! tried in a unit test or a fuzz target (`fuzz/fuzz_targets/metrics_request.rs`).
//!
//! Lenient where RFC 9112 allows it: a line may end in a bare LF as well as CRLF (so
//! `printf 'GET /metrics HTTP/1.1\n\n' | nc` is answered), empty lines before a request
//! line are skipped, and at end of stream an unterminated head is taken as it is.
//! Strict where an answer would be a guess: a request line that is not
//! `METHOD TARGET HTTP/1.x` is a 400, and a head longer than the bound is a 431.
//! Requests with a body (`Content-Length` above 0, `Transfer-Encoding`) are answered
//! and the connection closed, since their body would otherwise be read as the next
//! request. Several requests sent back to back (pipelined) are parsed one after
//! another: each call looks at the front of the buffer only.

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `GET /metrics` (any query string): 200 with the exposition.
    Metrics,
    /// `HEAD /metrics`: 200, headers only.
    MetricsHead,
    /// Any other path: 404.
    NotFound,
    /// `/metrics` with another method: 405.
    MethodNotAllowed,
    /// Not an HTTP/1.x request line: 400 (the connection is closed after it).
    BadRequest,
}

/// The front of a connection's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A whole request head of `len` bytes (blank lines before it included): answer
    /// it, drop `len` bytes, and close the connection after the answer when `close`.
    Complete {
        answer: Answer,
        len: usize,
        close: bool,
    },
    /// No whole head yet (or only blank lines): read more.
    Incomplete,
    /// No head end within `max` bytes: 431, then close.
    TooLarge,
}

/// Parses the request head at the front of `buf`. `max` bounds a head's length
/// (blank lines before it included); `eof` says the peer will send nothing more, so
/// an unterminated head is taken as complete (and the connection closed after it).
pub fn parse(buf: &[u8], max: usize, eof: bool) -> Parsed {
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let end = head_end(&buf[start..]).map(|n| start + n);
    let len = match end {
        Some(len) if len <= max => len,
        Some(_) => return Parsed::TooLarge,
        None if buf.len() >= max => return Parsed::TooLarge,
        None if eof && start < buf.len() => buf.len(),
        None => return Parsed::Incomplete,
    };
    let (answer, close) = judge(&buf[start..len]);
    Parsed::Complete {
        answer,
        len,
        close: close || (eof && end.is_none()),
    }
}

/// The length of the head at the front of `buf` through its empty line, if it has
/// one: lines end in LF, optionally preceded by CR.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut line_start = 0;
    for (i, &b) in buf.iter().enumerate() {
        if b != b'\n' {
            continue;
        }
        let line = &buf[line_start..i];
        if line.is_empty() || line == b"\r" {
            return Some(i + 1);
        }
        line_start = i + 1;
    }
    None
}

/// The answer to a head (its lines, without the blank lines before it) and whether
/// the connection must close after it.
fn judge(head: &[u8]) -> (Answer, bool) {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = lines.next().unwrap_or_default();
    let mut words = request_line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return (Answer::BadRequest, true);
    };
    let http10 = match version {
        b"HTTP/1.1" => false,
        b"HTTP/1.0" => true,
        _ => return (Answer::BadRequest, true),
    };
    // HTTP/1.1 keeps the connection unless asked to close; HTTP/1.0 closes unless asked
    // to keep it. A body is never read, so a request with one closes too.
    let (mut close_asked, mut keep_alive, mut has_body) = (false, false, false);
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (line[..colon].trim_ascii(), line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                close_asked |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding")
            || (name.eq_ignore_ascii_case(b"content-length") && value.iter().any(|&b| b != b'0'))
        {
            has_body = true;
        }
    }
    let close = close_asked || has_body || (http10 && !keep_alive);
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    let answer = match (path, method) {
        (b"/metrics", b"GET") => Answer::Metrics,
        (b"/metrics", b"HEAD") => Answer::MetricsHead,
        (b"/metrics", _) => Answer::MethodNotAllowed,
        _ => Answer::NotFound,
    };
    (answer, close)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 8192;

    fn complete(answer: Answer, len: usize, close: bool) -> Parsed {
        Parsed::Complete { answer, len, close }
    }

    #[test]
    fn a_scrape_with_crlf_or_bare_lf_is_complete() {
        let crlf = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(
            parse(crlf, MAX, false),
            complete(Answer::Metrics, crlf.len(), false)
        );
        // Issue 25: a head ending in bare LFs got no answer.
        let lf = b"GET /metrics HTTP/1.1\nHost: x\n\n";
        assert_eq!(
            parse(lf, MAX, false),
            complete(Answer::Metrics, lf.len(), false)
        );
        let mixed = b"GET /metrics?x=1 HTTP/1.1\r\nHost: x\n\r\n";
        assert_eq!(
            parse(mixed, MAX, false),
            complete(Answer::Metrics, mixed.len(), false)
        );
    }

    #[test]
    fn every_split_of_a_request_is_incomplete_until_its_end() {
        let req = b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
        for cut in 0..req.len() {
            assert_eq!(parse(&req[..cut], MAX, false), Parsed::Incomplete, "{cut}");
        }
        assert_eq!(
            parse(req, MAX, false),
            complete(Answer::MetricsHead, req.len(), false)
        );
    }

    #[test]
    fn pipelined_requests_are_parsed_one_after_another() {
        let one = b"GET /metrics HTTP/1.1\r\n\r\n";
        let two = b"GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n";
        let both = [&one[..], &two[..], b"GET /met"].concat();
        assert_eq!(
            parse(&both, MAX, false),
            complete(Answer::Metrics, one.len(), false)
        );
        let rest = &both[one.len()..];
        assert_eq!(
            parse(rest, MAX, false),
            complete(Answer::NotFound, two.len(), true)
        );
        assert_eq!(parse(&rest[two.len()..], MAX, false), Parsed::Incomplete);
    }

    #[test]
    fn blank_lines_before_a_request_are_skipped() {
        let req = b"\r\n\nGET /metrics HTTP/1.1\r\n\r\n";
        assert_eq!(
            parse(req, MAX, false),
            complete(Answer::Metrics, req.len(), false)
        );
        assert_eq!(parse(b"\r\n\r\n", MAX, false), Parsed::Incomplete);
        assert_eq!(parse(b"", MAX, true), Parsed::Incomplete);
    }

    #[test]
    fn paths_methods_and_garbage() {
        let p = |s: &[u8]| match parse(s, MAX, false) {
            Parsed::Complete { answer, close, .. } => (answer, close),
            other => panic!("{other:?}"),
        };
        assert_eq!(p(b"GET / HTTP/1.1\r\n\r\n"), (Answer::NotFound, false));
        assert_eq!(
            p(b"GET /metricsx HTTP/1.1\r\n\r\n"),
            (Answer::NotFound, false)
        );
        assert_eq!(
            p(b"DELETE /metrics HTTP/1.1\r\n\r\n"),
            (Answer::MethodNotAllowed, false)
        );
        assert_eq!(p(b"GET /metrics\r\n\r\n"), (Answer::BadRequest, true));
        assert_eq!(
            p(b"GET /metrics HTTP/2.0\r\n\r\n"),
            (Answer::BadRequest, true)
        );
        assert_eq!(p(b"\x00\xff\xfe\r\n\r\n"), (Answer::BadRequest, true));
        assert_eq!(
            p(b"GET /metrics HTTP/1.1 extra\r\n\r\n"),
            (Answer::BadRequest, true)
        );
    }

    #[test]
    fn close_follows_the_version_the_connection_header_and_bodies() {
        let close = |s: &[u8]| match parse(s, MAX, false) {
            Parsed::Complete { close, .. } => close,
            other => panic!("{other:?}"),
        };
        assert!(!close(b"GET /metrics HTTP/1.1\r\n\r\n"));
        assert!(close(b"GET /metrics HTTP/1.1\r\nConnection: Close\r\n\r\n"));
        assert!(close(
            b"GET /metrics HTTP/1.1\r\nconnection: te, close\r\n\r\n"
        ));
        assert!(close(b"GET /metrics HTTP/1.0\r\n\r\n"));
        assert!(!close(
            b"GET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
        ));
        assert!(!close(
            b"GET /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(close(
            b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
        ));
        assert!(close(
            b"POST /metrics HTTP/1.0\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\n"
        ));
        assert!(close(
            b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        ));
    }

    #[test]
    fn a_head_beyond_the_bound_is_too_large() {
        let mut long = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        long.resize(100, b'a');
        assert_eq!(parse(&long, 100, false), Parsed::TooLarge);
        assert_eq!(parse(&long[..99], 100, false), Parsed::Incomplete);
        long.extend_from_slice(b"\r\n\r\n");
        assert_eq!(parse(&long, 100, false), Parsed::TooLarge);
        assert_eq!(
            parse(&long, 104, false),
            complete(Answer::Metrics, 104, false)
        );
    }

    #[test]
    fn at_end_of_stream_an_unterminated_head_is_taken_and_closes() {
        let req = b"GET /metrics HTTP/1.1\n";
        assert_eq!(parse(req, MAX, false), Parsed::Incomplete);
        assert_eq!(
            parse(req, MAX, true),
            complete(Answer::Metrics, req.len(), true)
        );
        assert_eq!(
            parse(b"GET /metrics", MAX, true),
            complete(Answer::BadRequest, 12, true)
        );
    }
}
