//! Request templates: a payload with placeholders, parsed once at start and rendered
//! per request into a pre-sized buffer without allocating.
//!
//! | placeholder | renders as |
//! |---|---|
//! | `{seq}` | the request's global sequence number (decimal) |
//! | `{conn}` | the connection's global index (decimal) |
//! | `{worker}` | the worker's index (decimal) |
//! | `{rand:N}` | N random characters from `a-z0-9`, from the seeded generator (printable, so text protocols stay valid) |
//! | `{time_ns}` | the request's intended send instant, ns since the Unix epoch (decimal) |
//!
//! `{{` and `}}` stand for literal braces; any other `{...}` is an error, so a typo is
//! caught at start rather than sent a million times.

use std::ops::Range;

/// Longest `{rand:N}`.
pub const RAND_BYTES_MAX: usize = 4096;
/// Widest decimal rendering of a u64.
const U64_DIGITS: usize = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(Range<usize>),
    Seq,
    Conn,
    Worker,
    Rand(usize),
    TimeNs,
}

/// Values a request is rendered with.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ctx {
    pub seq: u64,
    pub conn: u64,
    pub worker: u64,
    pub time_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// Literal bytes, with `{{`/`}}` already unescaped; segments point into it.
    text: Vec<u8>,
    segments: Vec<Segment>,
}

impl Template {
    /// Parses placeholders in `src`.
    pub fn parse(src: &[u8]) -> Result<Template, String> {
        let mut text = Vec::with_capacity(src.len());
        let mut segments = Vec::new();
        let mut lit_start = 0;
        let mut i = 0;
        let flush = |text: &Vec<u8>, start: usize, segments: &mut Vec<Segment>| {
            if text.len() > start {
                segments.push(Segment::Literal(start..text.len()));
            }
        };
        while i < src.len() {
            match src[i] {
                b'{' if src.get(i + 1) == Some(&b'{') => {
                    text.push(b'{');
                    i += 2;
                }
                b'}' if src.get(i + 1) == Some(&b'}') => {
                    text.push(b'}');
                    i += 2;
                }
                b'{' => {
                    let close = src[i..]
                        .iter()
                        .position(|&b| b == b'}')
                        .ok_or_else(|| format!("unclosed placeholder at byte {i}"))?;
                    let name = std::str::from_utf8(&src[i + 1..i + close])
                        .map_err(|_| format!("placeholder at byte {i} is not text"))?;
                    let seg = match name {
                        "seq" => Segment::Seq,
                        "conn" => Segment::Conn,
                        "worker" => Segment::Worker,
                        "time_ns" => Segment::TimeNs,
                        _ => match name.strip_prefix("rand:").map(str::parse::<usize>) {
                            Some(Ok(n)) if (1..=RAND_BYTES_MAX).contains(&n) => Segment::Rand(n),
                            _ => {
                                // Escaped and cut short: the name may hold a newline
                                // (from `\n` in a payload), and the error is one line.
                                let name = crate::proto::escape_prefix(name.as_bytes(), 40);
                                return Err(format!(
                                    "unknown placeholder {{{name}}}: expected {{seq}}, {{conn}}, \
                                     {{worker}}, {{rand:N}} (N in 1..={RAND_BYTES_MAX}) or \
                                     {{time_ns}}; write {{{{ for a literal brace"
                                ));
                            }
                        },
                    };
                    flush(&text, lit_start, &mut segments);
                    lit_start = text.len();
                    segments.push(seg);
                    i += close + 1;
                }
                b => {
                    text.push(b);
                    i += 1;
                }
            }
        }
        flush(&text, lit_start, &mut segments);
        Ok(Template { text, segments })
    }

    /// A template without placeholders.
    pub fn literal(bytes: &[u8]) -> Template {
        Template {
            text: bytes.to_vec(),
            segments: if bytes.is_empty() {
                Vec::new()
            } else {
                vec![Segment::Literal(0..bytes.len())]
            },
        }
    }

    /// This template followed by `bytes` as they are (a binary body: no placeholders).
    pub fn then_literal(mut self, bytes: &[u8]) -> Template {
        if !bytes.is_empty() {
            let start = self.text.len();
            self.text.extend_from_slice(bytes);
            self.segments.push(Segment::Literal(start..self.text.len()));
        }
        self
    }

    /// Whether every rendering is the same bytes.
    pub fn is_static(&self) -> bool {
        self.segments
            .iter()
            .all(|s| matches!(s, Segment::Literal(_)))
    }

    /// Whether every rendering has the same length (no decimal placeholders).
    pub fn is_fixed_len(&self) -> bool {
        self.segments
            .iter()
            .all(|s| matches!(s, Segment::Literal(_) | Segment::Rand(_)))
    }

    /// The longest rendering, for sizing buffers.
    pub fn max_len(&self) -> usize {
        self.segments
            .iter()
            .map(|s| match s {
                Segment::Literal(r) => r.len(),
                Segment::Rand(n) => *n,
                _ => U64_DIGITS,
            })
            .sum()
    }

    /// What follows the first `sep` of every rendering, when that is the same bytes in
    /// all of them: `sep` lies in a literal part and only literal parts follow it (an
    /// HTTP/1.1 request's body after `\r\n\r\n`, whatever placeholders its headers
    /// carry). `None` when a placeholder follows, or no literal part holds `sep`.
    pub fn static_after(&self, sep: &[u8]) -> Option<&[u8]> {
        let i = self.segments.iter().position(|s| match s {
            Segment::Literal(r) => self.text[r.clone()].windows(sep.len()).any(|w| w == sep),
            _ => false,
        })?;
        if !self.segments[i + 1..]
            .iter()
            .all(|s| matches!(s, Segment::Literal(_)))
        {
            return None;
        }
        let Segment::Literal(r) = &self.segments[i] else {
            unreachable!("found above")
        };
        let at = self.text[r.clone()]
            .windows(sep.len())
            .position(|w| w == sep)
            .expect("found above");
        Some(&self.text[r.start + at + sep.len()..])
    }

    /// The rendering of a static template (its literal bytes).
    pub fn static_bytes(&self) -> &[u8] {
        &self.text
    }

    /// Renders into `out` (at least [`Template::max_len`] long); returns the length.
    #[inline]
    pub fn render(&self, ctx: &Ctx, rng: &mut fastrand::Rng, out: &mut [u8]) -> usize {
        const ALNUM: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let mut n = 0;
        for seg in &self.segments {
            match seg {
                Segment::Literal(r) => {
                    out[n..n + r.len()].copy_from_slice(&self.text[r.clone()]);
                    n += r.len();
                }
                Segment::Seq => n += write_u64(ctx.seq, &mut out[n..]),
                Segment::Conn => n += write_u64(ctx.conn, &mut out[n..]),
                Segment::Worker => n += write_u64(ctx.worker, &mut out[n..]),
                Segment::TimeNs => n += write_u64(ctx.time_ns, &mut out[n..]),
                Segment::Rand(len) => {
                    for b in &mut out[n..n + len] {
                        *b = ALNUM[rng.usize(..ALNUM.len())];
                    }
                    n += len;
                }
            }
        }
        n
    }
}

/// Writes `v` in decimal at the start of `out`; returns the number of digits.
#[inline]
fn write_u64(mut v: u64, out: &mut [u8]) -> usize {
    let mut tmp = [0u8; U64_DIGITS];
    let mut i = U64_DIGITS;
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let len = U64_DIGITS - i;
    out[..len].copy_from_slice(&tmp[i..]);
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(t: &Template, ctx: Ctx) -> String {
        let mut out = vec![0u8; t.max_len()];
        let mut rng = fastrand::Rng::with_seed(7);
        let n = t.render(&ctx, &mut rng, &mut out);
        String::from_utf8(out[..n].to_vec()).unwrap()
    }

    #[test]
    fn renders_every_placeholder() {
        let t = Template::parse(b"get key:{seq} c={conn} w={worker} t={time_ns}\r\n").unwrap();
        let ctx = Ctx {
            seq: 42,
            conn: 7,
            worker: 1,
            time_ns: 1_700_000_000_000_000_000,
        };
        assert_eq!(
            render(&t, ctx),
            "get key:42 c=7 w=1 t=1700000000000000000\r\n"
        );
        assert!(!t.is_static() && !t.is_fixed_len());
    }

    #[test]
    fn rand_is_seeded_printable_and_fixed_length() {
        let t = Template::parse(b"k{rand:8}").unwrap();
        assert!(t.is_fixed_len());
        let a = render(&t, Ctx::default());
        assert_eq!(a.len(), 9);
        assert!(a[1..].bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(a, render(&t, Ctx::default()), "same seed, same bytes");
    }

    #[test]
    fn braces_escape_and_errors_name_the_problem() {
        let t = Template::parse(b"{{\"a\":1}}").unwrap();
        assert!(t.is_static());
        assert_eq!(t.static_bytes(), b"{\"a\":1}");
        assert!(
            Template::parse(b"{nope}")
                .unwrap_err()
                .contains("unknown placeholder {nope}")
        );
        assert!(Template::parse(b"{seq").unwrap_err().contains("unclosed"));
        // Found by fuzz/fuzz_targets/mix.rs: a name holding a line break (a payload's
        // `\r\n` unescaped) broke the one-line error in two.
        let e = Template::parse(b"{seqg 1\r\n PING {seq}").unwrap_err();
        assert!(!e.contains(['\r', '\n']), "{e:?}");
        assert!(
            e.contains("unknown placeholder {seqg 1\\r\\n PING {seq}"),
            "{e:?}"
        );
        assert!(Template::parse(b"{rand:0}").is_err());
    }

    #[test]
    fn max_len_bounds_every_rendering() {
        let t = Template::parse(b"{seq}{conn}{worker}{time_ns}{rand:3}x").unwrap();
        let ctx = Ctx {
            seq: u64::MAX,
            conn: u64::MAX,
            worker: u64::MAX,
            time_ns: u64::MAX,
        };
        assert_eq!(render(&t, ctx).len(), t.max_len());
        assert_eq!(write_u64(0, &mut [0u8; 20]), 1);
    }

    #[test]
    fn static_after_is_the_body_when_only_literals_follow_the_blank_line() {
        let t = Template::parse(b"POST /{seq} HTTP/1.1\r\nx: {rand:4}\r\n\r\n").unwrap();
        assert_eq!(
            t.then_literal(b"body").static_after(b"\r\n\r\n"),
            Some(&b"body"[..])
        );
        let t = Template::parse(b"POST / HTTP/1.1\r\n\r\nid={seq}").unwrap();
        assert_eq!(t.static_after(b"\r\n\r\n"), None);
        let t = Template::parse(b"POST / HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(t.static_after(b"\r\n\r\n"), Some(&b""[..]));
        assert_eq!(
            Template::parse(b"{seq}").unwrap().static_after(b"\r\n\r\n"),
            None
        );
    }
}
