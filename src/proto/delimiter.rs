//! Delimited responses (`delimiter:BYTES`): a response ends right after the first
//! occurrence of a byte sequence — `\r\n` for line protocols, `END\r\n` for memcached
//! `get` replies.
//!
//! The search is Knuth-Morris-Pratt. At start-up the failure table is computed: for
//! each prefix of the delimiter, the length of its longest proper prefix that is also a
//! suffix. While scanning, the framer keeps `matched`, how many delimiter bytes end the
//! bytes seen so far; on a mismatch it falls back through the table instead of
//! re-reading input, so every input byte is looked at once (amortised) and a delimiter
//! cut across two receives — `EN` at the end of one, `D\r\n` at the start of the next —
//! still matches, with nothing kept un-consumed: the framer consumes all it is fed on
//! `Incomplete`. When nothing is matched it jumps to the next occurrence of the first
//! delimiter byte, which is the common case inside a long response.
//!
//! Every byte sequence is valid; the only `Invalid` is a response that reaches
//! `--max-response` bytes without its delimiter. Bytes after a response are the start
//! of the next one, so trailing garbage stays incomplete. A delimiter that may occur
//! inside a response (a memcached value containing `END\r\n`) ends it early: use a
//! length-aware framer for such protocols.
//!
//! The pattern and its table (130 bytes) are shared by every connection of a worker
//! through an `Arc`, so a framer per connection costs 32 bytes.

use super::{DELIMITER_BYTES_MAX, Framer, OVERSIZE, Parsed, escape_prefix};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// A validated delimiter: 1 to [`DELIMITER_BYTES_MAX`] bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DelimiterSpec {
    bytes: [u8; DELIMITER_BYTES_MAX],
    len: u8,
}

impl DelimiterSpec {
    pub fn new(bytes: &[u8]) -> Result<Self, String> {
        if bytes.is_empty() || bytes.len() > DELIMITER_BYTES_MAX {
            return Err(format!(
                "delimiter:BYTES must be 1 to {DELIMITER_BYTES_MAX} bytes after escapes, got {}",
                bytes.len()
            ));
        }
        let mut spec = DelimiterSpec {
            bytes: [0; DELIMITER_BYTES_MAX],
            len: bytes.len() as u8,
        };
        spec.bytes[..bytes.len()].copy_from_slice(bytes);
        Ok(spec)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl fmt::Debug for DelimiterSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DelimiterSpec({:?})", self.to_string())
    }
}

/// The escaped form `delimiter:` parses back.
impl fmt::Display for DelimiterSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape_prefix(self.as_bytes(), DELIMITER_BYTES_MAX))
    }
}

/// Parses the text after `delimiter:`: bytes as written, with the escapes `\r \n \t
/// \0 \\ \xHH`.
impl FromStr for DelimiterSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bytes = super::unescape(s).map_err(|m| format!("delimiter:BYTES: {m}"))?;
        if bytes.len() > DELIMITER_BYTES_MAX {
            return Err(format!(
                "delimiter:BYTES must be 1 to {DELIMITER_BYTES_MAX} bytes after escapes, got {}",
                bytes.len()
            ));
        }
        DelimiterSpec::new(&bytes)
    }
}

/// The delimiter and its KMP failure table, shared by a worker's connections.
#[derive(Debug)]
struct Table {
    pattern: [u8; DELIMITER_BYTES_MAX],
    /// `fail[i]`: length of the longest proper prefix of `pattern[..=i]` that is also
    /// a suffix of it — where matching resumes after a mismatch past `i + 1` bytes.
    fail: [u8; DELIMITER_BYTES_MAX],
    len: usize,
}

impl Table {
    fn new(pattern: &[u8]) -> Self {
        let mut t = Table {
            pattern: [0; DELIMITER_BYTES_MAX],
            fail: [0; DELIMITER_BYTES_MAX],
            len: pattern.len(),
        };
        t.pattern[..pattern.len()].copy_from_slice(pattern);
        let mut k = 0;
        for i in 1..pattern.len() {
            while k > 0 && pattern[i] != pattern[k] {
                k = t.fail[k - 1] as usize;
            }
            if pattern[i] == pattern[k] {
                k += 1;
            }
            t.fail[i] = k as u8;
        }
        t
    }
}

#[derive(Debug, Clone)]
pub struct Delimited {
    table: Arc<Table>,
    /// Delimiter bytes matched at the end of what was consumed so far.
    matched: usize,
    /// Bytes of the current response consumed so far.
    seen: usize,
    max_response: usize,
}

impl Delimited {
    pub fn new(spec: &DelimiterSpec, max_response: usize) -> Self {
        Delimited {
            table: Arc::new(Table::new(spec.as_bytes())),
            matched: 0,
            seen: 0,
            max_response,
        }
    }
}

impl Framer for Delimited {
    #[inline]
    fn feed(&mut self, input: &[u8]) -> Parsed {
        let t = &*self.table;
        let pattern = &t.pattern[..t.len];
        // Only this many more bytes fit in a response; `seen <= max_response` holds.
        let room = self.max_response - self.seen;
        let scan = input.len().min(room);
        let mut m = self.matched;
        let mut i = 0;
        while i < scan {
            if m == 0 {
                match input[i..scan].iter().position(|&b| b == pattern[0]) {
                    Some(skip) => i += skip,
                    None => break,
                }
            }
            let b = input[i];
            while m > 0 && b != pattern[m] {
                m = t.fail[m - 1] as usize;
            }
            if b == pattern[m] {
                m += 1;
            }
            i += 1;
            if m == t.len {
                self.matched = 0;
                self.seen = 0;
                return Parsed::Complete { consumed: i };
            }
        }
        if input.len() > room {
            return Parsed::Invalid { reason: OVERSIZE };
        }
        self.matched = m;
        self.seen += input.len();
        Parsed::Incomplete {
            consumed: input.len(),
        }
    }

    fn reset(&mut self) {
        self.matched = 0;
        self.seen = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Framing;
    use crate::proto::testkit::{self, Outcome, concat};
    use proptest::prelude::*;

    const MAX: usize = 1 << 20;

    fn delim(s: &str, max: usize) -> Delimited {
        Delimited::new(&s.parse().unwrap(), max)
    }

    #[test]
    fn complete_in_one_read() {
        let mut f = delim("\\r\\n", MAX);
        assert_eq!(f.feed(b"+OK\r\n"), Parsed::Complete { consumed: 5 });
        assert_eq!(f.feed(b"\r\n"), Parsed::Complete { consumed: 2 });
    }

    #[test]
    fn memcached_get_reply_at_every_split() {
        let (stream, ends) = concat(&[
            b"VALUE k 0 5\r\nhello\r\nEND\r\n".to_vec(),
            b"END\r\n".to_vec(),
            b"VALUE a 0 1\r\nx\r\nVALUE b 0 2\r\nyz\r\nEND\r\n".to_vec(),
        ]);
        assert_eq!(ends, [25, 30, 68]);
        testkit::check_splits(|| delim("END\\r\\n", MAX), &stream, &ends);
    }

    #[test]
    fn pipelined_lines_in_one_read() {
        let mut f = delim("\\n", MAX);
        assert_eq!(
            testkit::run(&mut f, b"a\nbb\n\nccc\nd", &[]),
            Outcome::pending(vec![2, 5, 6, 10], 0)
        );
        // The `d` was consumed: the framer keeps nothing back.
        assert_eq!(f.feed(b"\n"), Parsed::Complete { consumed: 1 });
    }

    #[test]
    fn partial_matches_fall_back_through_the_table() {
        // "aab" inside "aaab": a naive restart after the mismatch would miss it.
        testkit::check_splits(|| delim("aab", MAX), b"aaabaabaaaab", &[4, 7, 12]);
        testkit::check_splits(|| delim("abab", MAX), b"abaababab", &[7]);
        testkit::check_splits(|| delim("END\\r\\n", MAX), b"ENEND\r\rEND\r\n", &[12]);
    }

    #[test]
    fn trailing_garbage_stays_incomplete() {
        // No byte is invalid: what follows a response starts the next one.
        let mut f = delim("\\r\\n", MAX);
        assert_eq!(
            testkit::run(&mut f, b"+OK\r\n\x00\xff garbage", &[]),
            Outcome::pending(vec![5], 0)
        );
        assert_eq!(f.feed(b"\r\n"), Parsed::Complete { consumed: 2 });
    }

    #[test]
    fn no_bytes_are_invalid_below_the_bound() {
        let noise: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let mut f = delim("\\xff\\xfe", MAX);
        assert_eq!(
            testkit::run(&mut f, &noise, &[7]),
            Outcome::pending(vec![], 0)
        );
    }

    #[test]
    fn oversize_is_invalid() {
        // max_response counts the delimiter: 8 bytes fit, 9 do not.
        let ok = b"123456\r\n";
        assert_eq!(
            delim("\\r\\n", 8).feed(ok),
            Parsed::Complete { consumed: 8 }
        );
        for cuts in [&[][..], &[1], &[3]] {
            assert_eq!(
                testkit::run(&mut delim("\\r\\n", 8), b"1234567\r\n", cuts),
                Outcome::invalid(vec![], OVERSIZE)
            );
            // The bound is found without the delimiter ever arriving.
            assert_eq!(
                testkit::run(&mut delim("\\r\\n", 8), b"123456789", cuts),
                Outcome::invalid(vec![], OVERSIZE)
            );
        }
    }

    #[test]
    fn a_long_response_streams_through_a_small_buffer() {
        let mut stream = vec![b'x'; MAX - 5];
        stream.extend_from_slice(b"END\r\n");
        stream.extend_from_slice(b"END\r\n");
        let mut f = delim("END\\r\\n", MAX);
        assert_eq!(
            testkit::run_buffered(&mut f, &stream, 4096),
            Outcome::pending(vec![MAX, MAX + 5], 0)
        );
    }

    #[test]
    fn reset_forgets_a_partial_match() {
        // After "EN" a reset must not let "D\r\n" complete the delimiter.
        let mut f = delim("END\\r\\n", MAX);
        assert_eq!(f.feed(b"xEN"), Parsed::Incomplete { consumed: 3 });
        f.reset();
        assert_eq!(f.feed(b"D\r\n"), Parsed::Incomplete { consumed: 3 });
        testkit::check_reset(|| delim("\\r\\n", 4), b"abc\r", b"ab\r\n", &[4]);
    }

    #[test]
    fn spec_parses_escapes_and_rejects_bad_ones() {
        let bytes = |s: &str| s.parse::<DelimiterSpec>().map(|d| d.as_bytes().to_vec());
        assert_eq!(bytes("\\r\\n"), Ok(b"\r\n".to_vec()));
        assert_eq!(bytes("END\\r\\n"), Ok(b"END\r\n".to_vec()));
        assert_eq!(
            bytes("\\t\\0\\\\\\x7F\\xfe"),
            Ok(b"\t\0\\\x7f\xfe".to_vec())
        );
        assert_eq!(bytes("é"), Ok("é".as_bytes().to_vec()));
        assert_eq!(bytes(&"a".repeat(64)).map(|b| b.len()), Ok(64));
        for bad in ["", "\\q", "\\", "\\x4", "\\xg0", "\\x+1", &"a".repeat(65)] {
            let e = bad.parse::<DelimiterSpec>().unwrap_err();
            assert!(e.starts_with("delimiter:BYTES"), "{bad:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert!(
            "delimiter:"
                .parse::<Framing>()
                .unwrap_err()
                .contains("1 to 64 bytes"),
        );
    }

    /// Where a naive search says responses end.
    fn naive_ends(stream: &[u8], pattern: &[u8]) -> Vec<usize> {
        let mut ends = Vec::new();
        let mut start = 0;
        while let Some(k) = stream[start..]
            .windows(pattern.len())
            .position(|w| w == pattern)
        {
            start += k + pattern.len();
            ends.push(start);
        }
        ends
    }

    proptest! {
        #[test]
        fn chunking_never_moves_frame_ends(
            // A two-letter alphabet makes overlapping partial matches common.
            pattern in proptest::collection::vec(b'a'..=b'b', 1..6),
            stream in proptest::collection::vec(b'a'..=b'b', 0..400),
            cuts in testkit::cuts(),
        ) {
            let spec = DelimiterSpec::new(&pattern).unwrap();
            let whole = testkit::run(&mut Delimited::new(&spec, MAX), &stream, &[]);
            prop_assert_eq!(&whole.ends, &naive_ends(&stream, &pattern));
            prop_assert_eq!(testkit::run(&mut Delimited::new(&spec, MAX), &stream, &cuts), whole);
        }

        #[test]
        fn display_parses_back(pattern in proptest::collection::vec(any::<u8>(), 1..=64)) {
            let spec = DelimiterSpec::new(&pattern).unwrap();
            prop_assert_eq!(spec.to_string().parse::<DelimiterSpec>(), Ok(spec));
        }
    }
}
