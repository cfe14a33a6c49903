//! The text recording: one request per line, `OFFSET TEMPLATE`. OFFSET is a duration
//! from the recording's start in the one duration grammar (`0s`, `12.5ms`, `1m 2s` is
//! not one token: write `62s`), TEMPLATE the rest of the line after the blanks that
//! follow OFFSET (as `--http` or `--payload` takes it, see [`super::LineKind`]).
//! Blank lines and lines starting with `#` are skipped; offsets never go back.

use super::{LineKind, Recording, ReplayError};
use crate::clock::Nanos;
use std::io::BufRead;

/// Longest line read (a longer one is an error naming it, not a growing buffer).
pub const LINE_BYTES_MAX: usize = 1 << 20;

pub struct TextRecording<R> {
    input: R,
    kind: LineKind,
    line: Vec<u8>,
    /// Lines read so far (the current one's number).
    lineno: u64,
    last_ns: Nanos,
}

impl<R: BufRead + Send> TextRecording<R> {
    pub fn new(input: R, kind: LineKind) -> Self {
        TextRecording {
            input,
            kind,
            line: Vec::with_capacity(256),
            lineno: 0,
            last_ns: 0,
        }
    }

    fn error(&self, message: String) -> ReplayError {
        ReplayError {
            line: self.lineno,
            what: "line",
            message,
        }
    }

    /// The next line into `self.line` (ending stripped); `false` at the end.
    fn read_line(&mut self) -> Result<bool, ReplayError> {
        self.line.clear();
        let limit = (LINE_BYTES_MAX + 2) as u64;
        let n = std::io::Read::take(&mut self.input, limit)
            .read_until(b'\n', &mut self.line)
            .map_err(|e| self.error(format!("cannot read: {e}")))?;
        if n == 0 {
            return Ok(false);
        }
        self.lineno += 1;
        if self.line.last() == Some(&b'\n') {
            self.line.pop();
        } else if n as u64 == limit {
            return Err(self.error(format!("longer than {LINE_BYTES_MAX} bytes")));
        }
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        Ok(true)
    }
}

/// A line's OFFSET and TEMPLATE, or why it is not one.
pub fn split_line(line: &str) -> Result<(Nanos, &str), String> {
    let line = line.trim_start();
    let (offset, template) = line
        .split_once([' ', '\t'])
        .ok_or_else(|| format!("expected 'OFFSET TEMPLATE' (e.g. '12.5ms GET /'), got {line:?}"))?;
    let ns = match plain_offset_ns(offset) {
        Some(ns) => ns,
        None => {
            let d = crate::units::parse_duration(offset).map_err(|_| {
                format!(
                    "expected 'OFFSET TEMPLATE' with OFFSET a duration such as 12.5ms, got {offset:?}"
                )
            })?;
            u64::try_from(d.as_nanos()).map_err(|_| format!("offset {offset:?} is too far"))?
        }
    };
    let template = template.trim_start_matches([' ', '\t']);
    if template.is_empty() {
        return Err("expected 'OFFSET TEMPLATE': the TEMPLATE after the offset is empty".into());
    }
    Ok((ns, template))
}

/// The common offsets without the general grammar's cost: digits, an optional
/// fraction, and `ns`, `us`, `ms` or `s`, exactly (a fraction finer than a
/// nanosecond, an overflow or any other form: `None`, and the general grammar
/// decides).
fn plain_offset_ns(s: &str) -> Option<u64> {
    let digits = s
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'.')
        .count();
    let (number, unit) = s.split_at(digits);
    let unit_ns: u64 = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return None,
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() || frac.contains('.') {
        return None;
    }
    let whole = int.parse::<u64>().ok()?.checked_mul(unit_ns)?;
    if frac.is_empty() {
        return Some(whole);
    }
    // The fraction in ns: exact or not at all.
    let scale = 10u64.checked_pow(frac.len() as u32)?;
    let part = frac.parse::<u64>().ok()?.checked_mul(unit_ns)?;
    (part % scale == 0).then(|| whole.checked_add(part / scale))?
}

impl<R: BufRead + Send> Recording for TextRecording<R> {
    fn position(&self) -> (&'static str, u64) {
        ("line", self.lineno)
    }

    fn next(&mut self, out: &mut Vec<u8>) -> Result<Option<Nanos>, ReplayError> {
        loop {
            if !self.read_line()? {
                return Ok(None);
            }
            let text = match std::str::from_utf8(&self.line) {
                Ok(t) => t,
                Err(_) => return Err(self.error("not UTF-8 text (write bytes as \\xHH)".into())),
            };
            let trimmed = text.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let (ns, template) = split_line(text).map_err(|m| self.error(m))?;
            if ns < self.last_ns {
                return Err(self.error(format!(
                    "offset {} is before the previous line's {}: a recording is sorted by offset",
                    crate::units::fmt_ns(ns),
                    crate::units::fmt_ns(self.last_ns)
                )));
            }
            let start = out.len();
            if let Err(m) = self.kind.build(template, out) {
                out.truncate(start);
                return Err(self.error(m));
            }
            self.last_ns = ns;
            return Ok(Some(ns));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::summarize;
    use super::*;

    fn rec(text: &str) -> TextRecording<&[u8]> {
        TextRecording::new(text.as_bytes(), LineKind::Payload)
    }

    #[test]
    fn lines_give_their_offsets_and_bytes_skipping_comments_and_blanks() {
        let mut r = rec("# a recording\n0s ping\n\n12.5ms two words\\n\r\n1s last");
        let mut out = Vec::new();
        assert_eq!(r.next(&mut out).unwrap(), Some(0));
        assert_eq!(r.next(&mut out).unwrap(), Some(12_500_000));
        assert_eq!(r.next(&mut out).unwrap(), Some(1_000_000_000));
        assert_eq!(r.next(&mut out).unwrap(), None);
        assert_eq!(out, b"pingtwo words\nlast");
    }

    /// The fast path reads what the general grammar reads, and leaves it the rest.
    #[test]
    fn plain_offsets_read_as_the_duration_grammar_does() {
        for s in [
            "0s",
            "12.5ms",
            "250us",
            "800ns",
            "3s",
            "1.000000001s",
            "0.5us",
            "62s",
        ] {
            let general = crate::units::parse_duration(s).unwrap().as_nanos() as u64;
            assert_eq!(plain_offset_ns(s), Some(general), "{s}");
        }
        for s in [
            "1m",
            "1.5ns",
            "1.0.0s",
            ".5s",
            "5",
            "99999999999999999999s",
            "2h",
        ] {
            assert_eq!(plain_offset_ns(s), None, "{s}");
        }
    }

    #[test]
    fn a_bad_line_is_named_by_its_number() {
        let cases = [
            ("0s a\n1s b\n500ms c\n", 3, "sorted"),
            ("0s a\nGET /\n", 2, "OFFSET TEMPLATE"),
            ("1x a\n", 1, "a duration such as 12.5ms"),
            ("1s   \n", 1, "OFFSET TEMPLATE"),
        ];
        for (text, line, words) in cases {
            let e = summarize(&mut rec(text), 1 << 20).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(words), "{text:?}: {e}");
            assert!(e.to_string().starts_with(&format!("line {line}: ")), "{e}");
        }
        let e = summarize(&mut rec("# nothing\n"), 1 << 20).unwrap_err();
        assert!(e.to_string().contains("no request"), "{e}");
    }

    #[test]
    fn the_summary_counts_finds_the_longest_and_the_busiest_second() {
        let s = summarize(&mut rec("0s a\n100ms bbb\n1s c\n1.5s d\n1.9s e\n"), 1 << 20).unwrap();
        assert_eq!(
            (s.requests, s.longest, s.last_offset_ns, s.peak_per_s),
            (5, 3, 1_900_000_000, 3)
        );
        let e = summarize(&mut rec("0s abcd\n"), 3).unwrap_err();
        assert!(e.to_string().contains("4 bytes"), "{e}");
    }

    #[test]
    fn an_overlong_line_is_an_error_not_a_growing_buffer() {
        let text = format!("0s {}\n", "x".repeat(LINE_BYTES_MAX + 10));
        let e = summarize(&mut rec(&text), usize::MAX).unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
    }
}
