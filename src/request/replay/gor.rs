//! GoReplay's `.gor` file as a recording: what `gor --output-file` writes. Each record
//! is a header line `TYPE ID TIMESTAMP [LATENCY]` (TYPE `1` a request, `2` the
//! original response, `3` a replayed response; TIMESTAMP in ns since the epoch), then
//! the raw message, then the separator `\n🐵🙈🙉\n`. The requests (type 1) are the
//! recording, their bytes sent as they were recorded, each at its TIMESTAMP less the
//! first request's; responses are skipped. A request stamped before the previous one
//! (GoReplay writes in arrival order, which may step back a little) goes at the
//! previous one's instant, as a capture's do.

use super::text::LINE_BYTES_MAX;
use super::{Recording, ReplayError};
use crate::clock::Nanos;
use std::io::BufRead;

/// A skipped response is read in pieces of at most this many bytes.
const SKIP_BYTES: usize = 64 << 10;

/// What ends every record's message.
pub const SEPARATOR: &[u8] = "\n🐵🙈🙉\n".as_bytes();

/// Whether `head` (a file's first bytes) starts as a record header does: `1`, `2` or
/// `3`, a blank, hex digits, a blank, a digit.
pub fn is_header_start(head: &[u8]) -> bool {
    let mut parts = head.splitn(3, |&b| b == b' ');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some([b'1' | b'2' | b'3']), Some(id), Some([d, ..]))
            if !id.is_empty() && id.iter().all(u8::is_ascii_hexdigit) && d.is_ascii_digit()
    )
}

/// A record header's type and timestamp, or why the line is not one.
fn header(line: &[u8]) -> Result<(u8, u64), String> {
    let text = std::str::from_utf8(line).unwrap_or("");
    let mut parts = text.split(' ');
    let (kind, id, ts) = (parts.next(), parts.next(), parts.next());
    let kind = match kind {
        Some("1") => 1,
        Some("2") => 2,
        Some("3") => 3,
        _ => {
            return Err(format!(
                "expected a GoReplay record header 'TYPE ID TIMESTAMP' with TYPE 1, 2 or 3, got {:?}",
                String::from_utf8_lossy(&line[..line.len().min(80)])
            ));
        }
    };
    if !id.is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit())) {
        return Err("the record's ID is not hex digits".into());
    }
    let ts = ts
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| format!("the record's TIMESTAMP is not ns since the epoch: {ts:?}"))?;
    Ok((kind, ts))
}

pub struct GorRecording<R> {
    input: R,
    buf: Vec<u8>,
    /// Records read so far (the current one's number, from 1).
    record: u64,
    first_ts: Option<u64>,
    last_ns: Nanos,
}

impl<R: BufRead + Send> GorRecording<R> {
    pub fn new(input: R) -> Self {
        GorRecording {
            input,
            buf: Vec::with_capacity(4096),
            record: 0,
            first_ts: None,
            last_ns: 0,
        }
    }

    fn truncated(&self) -> ReplayError {
        self.error("the file ends inside the record (no 🐵🙈🙉 separator): it is truncated".into())
    }

    fn error(&self, message: String) -> ReplayError {
        ReplayError {
            line: self.record,
            what: "record",
            message,
        }
    }

    /// Reads up to and including the next `\n` into `self.buf` (appending); `false`
    /// at the end of the file.
    fn read_line(&mut self) -> Result<bool, ReplayError> {
        let room = (LINE_BYTES_MAX + SEPARATOR.len() + 1).saturating_sub(self.buf.len());
        let n = std::io::Read::take(&mut self.input, room as u64)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| self.error(format!("cannot read: {e}")))?;
        if n == room && self.buf.last() != Some(&b'\n') {
            return Err(self.error(format!("a message longer than {LINE_BYTES_MAX} bytes")));
        }
        Ok(n > 0)
    }

    /// Reads past the current record's message (and its separator), holding at most
    /// [`SKIP_BYTES`] of it at once.
    fn skip_message(&mut self) -> Result<(), ReplayError> {
        loop {
            let n = std::io::Read::take(&mut self.input, SKIP_BYTES as u64)
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| self.error(format!("cannot read: {e}")))?;
            if n == 0 {
                return Err(self.truncated());
            }
            if self.buf.ends_with(SEPARATOR) {
                self.buf.clear();
                return Ok(());
            }
            // Only the bytes that could begin the separator are kept.
            let from = self.buf.len().saturating_sub(SEPARATOR.len());
            self.buf.drain(..from);
        }
    }

    /// The next record's type and timestamp, its message in `self.buf`; `None` at
    /// the end of the file.
    fn record(&mut self) -> Result<Option<(u8, u64)>, ReplayError> {
        self.buf.clear();
        // Blank lines between records are tolerated.
        while self.buf.iter().all(|b| b.is_ascii_whitespace()) {
            self.buf.clear();
            if !self.read_line()? {
                return Ok(None);
            }
        }
        self.record += 1;
        let line = self.buf.trim_ascii_end();
        let (kind, ts) = header(line).map_err(|m| self.error(m))?;
        self.buf.clear();
        if kind != 1 {
            // A response is not kept: of any length, only its end is looked for.
            self.skip_message()?;
            return Ok(Some((kind, ts)));
        }
        while !self.buf.ends_with(SEPARATOR) {
            if !self.read_line()? {
                return Err(self.truncated());
            }
        }
        let keep = self.buf.len().saturating_sub(SEPARATOR.len());
        self.buf.truncate(keep);
        Ok(Some((kind, ts)))
    }
}

impl<R: BufRead + Send> Recording for GorRecording<R> {
    fn next(&mut self, out: &mut Vec<u8>) -> Result<Option<Nanos>, ReplayError> {
        while let Some((kind, ts)) = self.record()? {
            if kind != 1 {
                continue;
            }
            if self.buf.is_empty() {
                return Err(self.error("the request is empty".into()));
            }
            let first = *self.first_ts.get_or_insert(ts);
            let at = ts.saturating_sub(first).max(self.last_ns);
            self.last_ns = at;
            out.extend_from_slice(&self.buf);
            return Ok(Some(at));
        }
        Ok(None)
    }

    fn position(&self) -> (&'static str, u64) {
        ("record", self.record)
    }
}

#[cfg(test)]
mod tests {
    use super::super::summarize;
    use super::*;

    fn rec(bytes: &[u8]) -> GorRecording<&[u8]> {
        GorRecording::new(bytes)
    }

    fn record(kind: u8, ts: u64, msg: &str) -> String {
        format!("{kind} 8e1a2c3b{ts:x} {ts} 0\n{msg}\n🐵🙈🙉\n")
    }

    #[test]
    fn requests_are_read_at_their_offsets_and_responses_skipped() {
        let get = "GET /a HTTP/1.1\r\nHost: h\r\n\r\n";
        let post = "POST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nx\ny";
        let file = [
            record(1, 5_000_000_000, get),
            record(2, 5_001_000_000, "HTTP/1.1 200 OK\r\n\r\n"),
            "\n".into(),
            record(1, 5_012_500_000, post),
            // Stamped before the previous request: at its instant.
            record(1, 5_010_000_000, get),
        ]
        .concat();
        let mut r = rec(file.as_bytes());
        let mut out = Vec::new();
        assert_eq!(r.next(&mut out).unwrap(), Some(0));
        assert_eq!(out, get.as_bytes());
        out.clear();
        assert_eq!(r.next(&mut out).unwrap(), Some(12_500_000));
        assert_eq!(out, post.as_bytes(), "a body's newline is the message's");
        out.clear();
        assert_eq!(r.next(&mut out).unwrap(), Some(12_500_000));
        assert_eq!(r.position(), ("record", 4));
        assert_eq!(r.next(&mut out).unwrap(), None);
        assert!(is_header_start(file.as_bytes()));
    }

    /// A response longer than a request may be (a 3 MiB download, without one
    /// newline, its separator split across read pieces) is skipped, not refused.
    #[test]
    fn a_response_of_any_length_is_skipped() {
        let get = "GET /a HTTP/1.1\r\n\r\n";
        let big = format!("HTTP/1.1 200 OK\r\n\r\n{}", "z".repeat((3 << 20) + 7));
        let file = [
            record(1, 1_000, get),
            record(2, 2_000, &big),
            record(3, 3_000, &big),
            record(1, 4_000, get),
        ]
        .concat();
        let s = summarize(&mut rec(file.as_bytes()), 1 << 20).unwrap();
        assert_eq!((s.requests, s.last_offset_ns), (2, 3_000));
        // A response that ends without its separator is still a truncated file.
        let cut = [record(1, 1_000, get), format!("2 ab 2\n{big}")].concat();
        let e = summarize(&mut rec(cut.as_bytes()), 1 << 20).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
    }

    #[test]
    fn a_bad_record_is_named_by_its_number() {
        let ok = record(1, 1, "GET / HTTP/1.1\r\n\r\n");
        let cases = [
            (format!("{ok}1 abc\nGET /\n🐵🙈🙉\n"), 2, "TIMESTAMP"),
            (format!("{ok}4 ab 1\nx\n🐵🙈🙉\n"), 2, "TYPE 1, 2 or 3"),
            (format!("{ok}1 xyz 1\nx\n🐵🙈🙉\n"), 2, "ID"),
            (format!("{ok}1 ab 2\nGET / HTTP/1.1\r\n"), 2, "truncated"),
            ("1 ab 2 0\n\n🐵🙈🙉\n".to_string(), 1, "empty"),
        ];
        for (text, n, words) in cases {
            let e = summarize(&mut rec(text.as_bytes()), 1 << 20).unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("record {n}: ")),
                "{text:?}: {e}"
            );
            assert!(e.to_string().contains(words), "{text:?}: {e}");
        }
        let e = summarize(
            &mut rec(record(2, 1, "HTTP/1.1 200 OK").as_bytes()),
            1 << 20,
        )
        .unwrap_err();
        assert!(e.to_string().contains("no request"), "{e}");
    }
}
