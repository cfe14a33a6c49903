//! `--replay FILE`: a timetable from a recording. A recording is a sequence of
//! requests, each with its offset from the start: a text file of `OFFSET TEMPLATE`
//! lines ([`text`]), a pcap/pcapng capture of a TCP or UDP conversation ([`pcap`]), or
//! a GoReplay `.gor` file ([`gor`]). Each is read as a stream through [`Recording::next`], which appends one request's
//! bytes to a caller's buffer and returns its offset, so reading a recording costs a
//! bounded buffer whatever its length.
//!
//! The file is read twice: once before any traffic ([`summarize`]: every request
//! checked, counted, the longest and the span found), and once while the run sends
//! (the engine's reader thread). A request's sequence number is its place in the
//! recording (plus the recording's length per completed loop), so `--shard` and the
//! workers split a replay exactly as they split any timetable.

pub mod gor;
pub mod pcap;
pub mod text;

use crate::clock::Nanos;

/// A recording's requests in order, read as a stream.
pub trait Recording: Send {
    /// Appends the next request's bytes to `out` and returns its offset (ns from the
    /// recording's start, non-decreasing); `None` at the end.
    fn next(&mut self, out: &mut Vec<u8>) -> Result<Option<Nanos>, ReplayError>;

    /// Where the request last returned came from, as an error names it: (`"line"`,
    /// its number), (`"packet"`, ...) or (`"record"`, ...).
    fn position(&self) -> (&'static str, u64);
}

/// What carries the requests: a TCP conversation (requests on connections) or UDP
/// datagrams (one request each). `--proto` says which; a capture is read for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    Tcp,
    Udp,
}

/// What is wrong with a recording, and where (`line`: a text line or a capture's
/// packet number, from 1; 0 when it is the file as a whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayError {
    pub line: u64,
    pub what: &'static str,
    pub message: String,
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{} {}: {}", self.what, self.line, self.message)
        }
    }
}

/// The kinds of recording, told apart by the file's first bytes (or named by
/// `--replay-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Pcap,
    /// GoReplay's `.gor` file ([`gor`]).
    Gor,
}

/// Bytes of a file's start that [`Format::detect`] looks at.
pub const HEAD_BYTES: usize = 64;

impl Format {
    /// A pcap (either byte order, µs or ns) or pcapng magic number is a capture; a
    /// first line that is a GoReplay record header (`1 HEXID TIMESTAMP`) is a `.gor`
    /// file; anything else is read as text (whose lines start with a duration).
    pub fn detect(head: &[u8]) -> Format {
        if gor::is_header_start(head) {
            return Format::Gor;
        }
        const MAGICS: [[u8; 4]; 5] = [
            [0xd4, 0xc3, 0xb2, 0xa1],
            [0xa1, 0xb2, 0xc3, 0xd4],
            [0x4d, 0x3c, 0xb2, 0xa1],
            [0xa1, 0xb2, 0x3c, 0x4d],
            [0x0a, 0x0d, 0x0d, 0x0a],
        ];
        match head.get(..4) {
            Some(m) if MAGICS.iter().any(|x| x == m) => Format::Pcap,
            _ => Format::Text,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Pcap => "pcap",
            Format::Gor => "gor",
        }
    }

    /// `--replay-format`'s value.
    pub fn parse(s: &str) -> Result<Format, String> {
        match s {
            "text" => Ok(Format::Text),
            "pcap" | "pcapng" => Ok(Format::Pcap),
            "gor" => Ok(Format::Gor),
            other => Err(format!("expected text, pcap or gor, got {other:?}")),
        }
    }
}

/// How a text line's TEMPLATE becomes the bytes sent (`--replay-as`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineKind {
    /// `METHOD /path`, as `--http` takes it: the request line, then the run's headers
    /// (`-H`, Host) and body, the same for every line.
    Http {
        /// What follows the request line: headers, blank line, body.
        rest: Vec<u8>,
    },
    /// The payload as `--payload` takes it (`\r\n`, `\xHH` escapes decoded).
    Payload,
}

impl LineKind {
    /// HTTP lines with the run's `-H` headers, body and Host.
    pub fn http(headers: &[String], body: Option<&[u8]>, host: &str) -> Result<LineKind, String> {
        let t = super::http::request("GET /", headers, body, host)?;
        if !t.is_static() {
            return Err(
                "placeholders in -H or --body are not expanded in a replay: a recording \
                 is sent as it is"
                    .into(),
            );
        }
        let bytes = t.static_bytes();
        let at = memchr::memmem::find(bytes, b"\r\n").expect("a request line ends") + 2;
        Ok(LineKind::Http {
            rest: bytes[at..].to_vec(),
        })
    }

    /// Appends the request of `template` to `out`.
    pub fn build(&self, template: &str, out: &mut Vec<u8>) -> Result<(), String> {
        match self {
            LineKind::Http { rest } => {
                let (method, path) = super::http::request_line(template)?;
                out.extend_from_slice(method.as_bytes());
                out.push(b' ');
                out.extend_from_slice(path.as_bytes());
                out.extend_from_slice(b" HTTP/1.1\r\n");
                out.extend_from_slice(rest);
            }
            LineKind::Payload if template.is_empty() => {
                return Err("the payload is empty".into());
            }
            // Without escapes the line is the payload: no byte-by-byte decoding.
            LineKind::Payload if !template.contains('\\') => {
                out.extend_from_slice(template.as_bytes());
            }
            LineKind::Payload => {
                out.extend_from_slice(&crate::proto::unescape(template)?);
            }
        }
        Ok(())
    }
}

/// Whether `bytes` start as an HTTP/1.x request does: `METHOD target HTTP/1.`.
pub fn looks_like_http1_request(bytes: &[u8]) -> bool {
    let line = bytes.split(|&b| b == b'\r').next().unwrap_or(&[]);
    let mut parts = line.split(|&b| b == b' ');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(m), Some(t), Some(v))
            if !m.is_empty() && m.iter().all(u8::is_ascii_uppercase) && !t.is_empty()
                && v.starts_with(b"HTTP/1.")
    )
}

/// What the first reading found: how many requests, the longest, the last offset and
/// the busiest second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    pub requests: u64,
    pub longest: usize,
    pub last_offset_ns: Nanos,
    /// Most requests whose offsets fall in one whole second of the recording.
    pub peak_per_s: u64,
    /// The first request starts as HTTP/1.1 does ([`looks_like_http1_request`]).
    pub first_is_http1: bool,
}

/// Reads `rec` to its end, checking every request and each one's length against
/// `longest_max`. An empty recording is an error.
pub fn summarize(rec: &mut dyn Recording, longest_max: usize) -> Result<Summary, ReplayError> {
    let mut s = Summary::default();
    let mut buf = Vec::new();
    let (mut second, mut in_second) = (0u64, 0u64);
    while let Some(offset) = rec.next(&mut buf)? {
        s.requests += 1;
        if s.requests == 1 {
            s.first_is_http1 = looks_like_http1_request(&buf);
        }
        if buf.len() > longest_max {
            let (what, line) = rec.position();
            return Err(ReplayError {
                line,
                what,
                message: format!(
                    "request {} is {} bytes, more than the {longest_max} a replayed request may have",
                    s.requests,
                    buf.len()
                ),
            });
        }
        s.longest = s.longest.max(buf.len());
        s.last_offset_ns = offset;
        let sec = offset / 1_000_000_000;
        if sec != second {
            (second, in_second) = (sec, 0);
        }
        in_second += 1;
        s.peak_per_s = s.peak_per_s.max(in_second);
        buf.clear();
    }
    if s.requests == 0 {
        return Err(ReplayError {
            line: 0,
            what: "request",
            message: "the recording holds no request".into(),
        });
    }
    Ok(s)
}

/// A replay's timetable arithmetic: offsets scaled by `--replay-speed`, and with
/// `--replay-loop` each pass after the first shifted by the recording's period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub speed: f64,
    /// The recording's length as a loop repeats it (ns, before scaling): its last
    /// offset plus its mean gap between requests (1 s for a one-request recording).
    pub period_ns: Nanos,
}

impl Timing {
    pub fn of(summary: &Summary, speed: f64) -> Timing {
        let gap = match summary.requests {
            0 | 1 => 1_000_000_000,
            n => (summary.last_offset_ns / (n - 1)).max(1),
        };
        Timing {
            speed,
            period_ns: summary.last_offset_ns.saturating_add(gap),
        }
    }

    /// The instant (ns since the run's start) of a request at `offset_ns` in loop
    /// pass `pass`.
    #[inline]
    pub fn due_ns(&self, pass: u64, offset_ns: Nanos) -> Nanos {
        let at = pass as f64 * self.period_ns as f64 + offset_ns as f64;
        (at / self.speed).round() as Nanos
    }
}

/// A replay as the run holds it: where the recording is and how to read it, what
/// the first reading found, and its timing.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayPlan {
    pub path: std::path::PathBuf,
    pub format: Format,
    pub kind: LineKind,
    /// `--proto`: what a capture is read for (a TCP or a UDP conversation).
    pub carrier: Carrier,
    /// `--replay-port`: the server's port in a capture.
    pub port: Option<u16>,
    pub summary: Summary,
    pub timing: Timing,
    /// `--replay-loop`: start over at the end until the run's end.
    pub looped: bool,
}

impl ReplayPlan {
    /// The recording, opened for one reading from its start.
    pub fn open(&self) -> Result<Box<dyn Recording>, ReplayError> {
        open(&self.path, self.format, &self.kind, self.carrier, self.port)
    }
}

/// Opens the recording at `path` as `format` (text lines read as `kind`, a capture
/// for `carrier`'s conversation).
pub fn open(
    path: &std::path::Path,
    format: Format,
    kind: &LineKind,
    carrier: Carrier,
    port: Option<u16>,
) -> Result<Box<dyn Recording>, ReplayError> {
    let file = std::fs::File::open(path).map_err(|e| ReplayError {
        line: 0,
        what: "file",
        message: format!("cannot read it: {e}"),
    })?;
    Ok(match format {
        Format::Text => Box::new(text::TextRecording::new(
            std::io::BufReader::with_capacity(1 << 16, file),
            kind.clone(),
        )),
        Format::Pcap => Box::new(pcap::PcapRecording::new(file, carrier, port)?),
        Format::Gor => Box::new(gor::GorRecording::new(std::io::BufReader::with_capacity(
            1 << 16,
            file,
        ))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_request_is_told_from_other_bytes() {
        assert!(looks_like_http1_request(
            b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n"
        ));
        assert!(!looks_like_http1_request(b"*1\r\n$4\r\nPING\r\n"));
        assert!(!looks_like_http1_request(b"get /x HTTP/1.1\r\n"));
    }

    #[test]
    fn captures_are_told_from_text_by_their_magic() {
        assert_eq!(Format::detect(&[0xd4, 0xc3, 0xb2, 0xa1, 2]), Format::Pcap);
        assert_eq!(Format::detect(&[0x0a, 0x0d, 0x0d, 0x0a]), Format::Pcap);
        assert_eq!(Format::detect(b"0s GET /"), Format::Text);
        assert_eq!(Format::detect(b""), Format::Text);
        assert_eq!(
            Format::detect(b"1 8e1a2c3b0000000001 1589282282830000000 0\nGET"),
            Format::Gor
        );
        assert_eq!(Format::detect(b"1s GET /"), Format::Text);
    }

    #[test]
    fn http_lines_share_the_runs_headers_and_payload_lines_are_unescaped() {
        let k = LineKind::http(&["X-Test: 1".into()], None, "h:80").unwrap();
        let mut out = Vec::new();
        k.build("GET /users/7", &mut out).unwrap();
        assert_eq!(
            out,
            b"GET /users/7 HTTP/1.1\r\nX-Test: 1\r\nHost: h:80\r\n\r\n"
        );
        assert!(k.build("get /x", &mut out).is_err());
        assert!(k.build("GET users", &mut out).is_err());
        let mut out = Vec::new();
        LineKind::Payload.build("ping\\r\\n", &mut out).unwrap();
        assert_eq!(out, b"ping\r\n");
        assert!(LineKind::http(&["X: {seq}".into()], None, "h").is_err());
    }

    #[test]
    fn loops_repeat_the_recording_after_its_period_and_speed_scales() {
        let s = Summary {
            requests: 3,
            longest: 1,
            last_offset_ns: 2_000,
            peak_per_s: 3,
            first_is_http1: false,
        };
        let t = Timing::of(&s, 1.0);
        assert_eq!(t.period_ns, 3_000);
        assert_eq!(t.due_ns(0, 2_000), 2_000);
        assert_eq!(t.due_ns(1, 0), 3_000);
        assert_eq!(Timing::of(&s, 2.0).due_ns(1, 1_000), 2_000);
    }
}
