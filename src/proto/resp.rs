//! Redis replies in RESP2 (`resp`): one reply is one element, and an element is
//!
//! | type | element                                | examples                          |
//! |------|----------------------------------------|-----------------------------------|
//! | `+`  | simple string to CRLF                  | `+PONG\r\n`                       |
//! | `-`  | error to CRLF                          | `-ERR unknown command\r\n`        |
//! | `:`  | integer line                           | `:42\r\n`                         |
//! | `$`  | bulk string: length line, bytes, CRLF  | `$5\r\nhello\r\n`, `$-1\r\n`      |
//! | `*`  | array: count line, then its elements   | `*2\r\n$3\r\nfoo\r\n:42\r\n`, `*-1\r\n` |
//!
//! The framer is a byte-level state machine with a fixed stack of element counts for
//! arrays, nested up to [`RESP_DEPTH_MAX`] deep (8; a deeper reply is `Invalid`). When
//! an element ends, the count on top of the stack goes down by one; an array whose
//! count reaches zero is itself an element that ended, one level up; an element that
//! ends with the stack empty ends the reply.
//!
//! Streaming: simple strings and errors are scanned as they pass (no CR or LF inside,
//! then CRLF), bulk strings are counted down however long (a 1 MiB value goes through
//! a 4 KiB buffer), the CRLF after them is checked a byte at a time. Only the short
//! `:`, `$` and `*` lines (type byte included) are needed whole; such a line not yet
//! ended stays un-consumed, and must end within [`LINE_BYTES_MAX`] bytes.
//!
//! Checks: a type byte must be one of `+ - : $ *` (RESP3 types and inline replies are
//! `Invalid`: talk RESP2 to the server, which is its default), lines end with CRLF, an
//! integer is `-?digits` within i64, a length or count is `-1` or digits (other
//! negatives are `Invalid`). Bytes after a reply must start the next one, so trailing
//! garbage is `Invalid` on its first byte. A reply passing `--max-response` is
//! `Invalid`, found at the length line when a bulk length announces it, or when an
//! array's count could not fit (every element takes at least 3 bytes).
//!
//! [`Framer::status`] is `Some(0)` for a reply without an error and `Some(1)` for an
//! error reply or an array holding an error at any depth (e.g. an EXEC whose command
//! failed), so the engine can count error replies.

use super::{Framer, LINE_BYTES_MAX, OVERSIZE, Parsed, RESP_DEPTH_MAX, find_line_end};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The next byte is a type byte.
    Type,
    /// Inside a simple string or error; the next CR ends it.
    Simple,
    /// `remaining` bulk bytes to go, then CR LF.
    Bulk,
    /// Expecting the CR that ends a bulk string.
    Cr,
    /// Expecting the LF that ends an element.
    Lf,
}

#[derive(Debug, Clone)]
pub struct Resp {
    max_response: usize,
    /// Bytes of the current reply consumed so far.
    seen: usize,
    /// Bulk bytes still to come.
    remaining: u64,
    /// Elements still to come in each open array, outermost first.
    stack: [u32; RESP_DEPTH_MAX],
    depth: u8,
    state: State,
    /// Bytes of the pending (un-consumed) line already searched for `\n`.
    scanned: u16,
    /// The current reply holds an error.
    error: bool,
    last_status: Option<u16>,
}

const NOT_A_TYPE: &str = "expected a RESP2 type byte (+ - : $ *)";
const NO_CRLF: &str = "RESP line not ended by CRLF";

impl Resp {
    pub fn new(max_response: usize) -> Self {
        Resp {
            max_response,
            seen: 0,
            remaining: 0,
            stack: [0; RESP_DEPTH_MAX],
            depth: 0,
            state: State::Type,
            scanned: 0,
            error: false,
            last_status: None,
        }
    }

    /// An element ended; true when that ended the reply.
    fn element_done(&mut self) -> bool {
        self.state = State::Type;
        while self.depth > 0 {
            let top = &mut self.stack[self.depth as usize - 1];
            *top -= 1;
            if *top > 0 {
                return false;
            }
            self.depth -= 1; // the array ended: an element of its parent
        }
        self.last_status = Some(self.error as u16);
        self.seen = 0;
        self.error = false;
        true
    }

    /// Bytes the reply may still take.
    fn room(&self) -> usize {
        self.max_response - self.seen
    }

    /// A complete `:`, `$` or `*` line (type byte included, CRLF stripped); true when
    /// it ended the reply.
    fn number_line(&mut self, line: &[u8]) -> Result<bool, &'static str> {
        let digits = &line[1..];
        match line[0] {
            b':' => {
                integer(digits).ok_or("malformed RESP integer")?;
                Ok(self.element_done())
            }
            b'$' => match length(digits).ok_or("malformed RESP bulk length")? {
                None => Ok(self.element_done()),
                Some(n) => {
                    if n.saturating_add(2) > self.room() as u64 {
                        return Err(OVERSIZE);
                    }
                    self.remaining = n;
                    self.state = State::Bulk;
                    Ok(false)
                }
            },
            _ => match length(digits).ok_or("malformed RESP array count")? {
                None | Some(0) => Ok(self.element_done()),
                Some(n) => {
                    if n.saturating_mul(3) > self.room() as u64 || n > u32::MAX as u64 {
                        return Err(OVERSIZE);
                    }
                    if self.depth as usize == RESP_DEPTH_MAX {
                        return Err("RESP arrays nested deeper than 8");
                    }
                    self.stack[self.depth as usize] = n as u32;
                    self.depth += 1;
                    Ok(false)
                }
            },
        }
    }
}

impl Framer for Resp {
    fn feed(&mut self, input: &[u8]) -> Parsed {
        let mut pos = 0;
        while pos < input.len() {
            match self.state {
                State::Type => match input[pos] {
                    b'+' | b'-' => {
                        if self.room() == 0 {
                            return Parsed::Invalid { reason: OVERSIZE };
                        }
                        self.error |= input[pos] == b'-';
                        self.seen += 1;
                        pos += 1;
                        self.state = State::Simple;
                    }
                    b':' | b'$' | b'*' => {
                        let rest = &input[pos..];
                        let end = match find_line_end(rest, self.scanned as usize) {
                            Ok(Some(end)) => end,
                            Ok(None) => {
                                if rest.len() > self.room() {
                                    return Parsed::Invalid { reason: OVERSIZE };
                                }
                                // Fits in u16: find_line_end fails past LINE_BYTES_MAX.
                                self.scanned = rest.len() as u16;
                                return Parsed::Incomplete { consumed: pos };
                            }
                            Err(()) => {
                                return Parsed::Invalid {
                                    reason: "RESP line longer than 8 KiB",
                                };
                            }
                        };
                        if end > self.room() {
                            return Parsed::Invalid { reason: OVERSIZE };
                        }
                        let Some(line) = rest[..end - 1].strip_suffix(b"\r") else {
                            return Parsed::Invalid { reason: NO_CRLF };
                        };
                        self.scanned = 0;
                        self.seen += end;
                        pos += end;
                        match self.number_line(line) {
                            Ok(true) => return Parsed::Complete { consumed: pos },
                            Ok(false) => {}
                            Err(reason) => return Parsed::Invalid { reason },
                        }
                    }
                    _ => return Parsed::Invalid { reason: NOT_A_TYPE },
                },
                State::Simple => {
                    let rest = &input[pos..];
                    let scan = rest.len().min(self.room());
                    match rest[..scan].iter().position(|&b| b == b'\r' || b == b'\n') {
                        Some(i) if rest[i] == b'\r' => {
                            self.seen += i + 1;
                            pos += i + 1;
                            self.state = State::Lf;
                        }
                        Some(_) => return Parsed::Invalid { reason: NO_CRLF },
                        None if scan < rest.len() => return Parsed::Invalid { reason: OVERSIZE },
                        None => {
                            self.seen += scan;
                            pos += scan;
                        }
                    }
                }
                State::Bulk => {
                    let available = (input.len() - pos) as u64;
                    let take = available.min(self.remaining);
                    self.remaining -= take;
                    self.seen += take as usize;
                    pos += take as usize;
                    if self.remaining == 0 {
                        self.state = State::Cr;
                    }
                }
                State::Cr => {
                    if input[pos] != b'\r' {
                        return Parsed::Invalid {
                            reason: "RESP bulk string longer than its length",
                        };
                    }
                    self.seen += 1;
                    pos += 1;
                    self.state = State::Lf;
                }
                State::Lf => {
                    if input[pos] != b'\n' {
                        return Parsed::Invalid { reason: NO_CRLF };
                    }
                    if self.room() == 0 {
                        return Parsed::Invalid { reason: OVERSIZE };
                    }
                    self.seen += 1;
                    pos += 1;
                    if self.element_done() {
                        return Parsed::Complete { consumed: pos };
                    }
                }
            }
        }
        Parsed::Incomplete { consumed: pos }
    }

    fn reset(&mut self) {
        *self = Resp::new(self.max_response);
    }

    fn status(&self) -> Option<u16> {
        self.last_status
    }
}

/// `-?digits` within i64.
fn integer(s: &[u8]) -> Option<i64> {
    let (negative, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let magnitude = digits.iter().try_fold(0i64, |n, &d| {
        n.checked_mul(10)?.checked_sub((d - b'0') as i64)
    })?;
    if negative {
        Some(magnitude)
    } else {
        magnitude.checked_neg()
    }
}

/// A bulk length or array count: `None` for `-1` (null), `Some(n)` for digits.
fn length(s: &[u8]) -> Option<Option<u64>> {
    match integer(s)? {
        -1 => Some(None),
        n if n >= 0 && s[0] != b'-' => Some(Some(n as u64)),
        _ => None,
    }
}

const _: () = assert!(LINE_BYTES_MAX <= u16::MAX as usize);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::{self, Outcome, concat};
    use proptest::prelude::*;

    const MAX: usize = 1 << 20;

    fn resp() -> Resp {
        Resp::new(MAX)
    }

    fn one(reply: &[u8]) -> (Parsed, Option<u16>) {
        let mut f = resp();
        (f.feed(reply), f.status())
    }

    #[test]
    fn complete_in_one_read() {
        for reply in [
            &b"+PONG\r\n"[..],
            b"+\r\n",
            b"-ERR unknown command 'FOO'\r\n",
            b":42\r\n",
            b":-9223372036854775808\r\n",
            b"$5\r\nhello\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*0\r\n",
            b"*-1\r\n",
            b"*2\r\n$3\r\nfoo\r\n:42\r\n",
            b"*3\r\n*2\r\n+a\r\n*1\r\n$-1\r\n*0\r\n:1\r\n",
        ] {
            let (parsed, status) = one(reply);
            assert_eq!(
                parsed,
                Parsed::Complete {
                    consumed: reply.len()
                },
                "{:?}",
                String::from_utf8_lossy(reply)
            );
            assert!(status.is_some());
        }
    }

    #[test]
    fn status_counts_errors_at_any_depth() {
        assert_eq!(one(b"+OK\r\n").1, Some(0));
        assert_eq!(one(b"-WRONGTYPE Operation against a key\r\n").1, Some(1));
        // EXEC with one failed command.
        assert_eq!(
            one(b"*2\r\n+OK\r\n-ERR value is not an integer\r\n").1,
            Some(1)
        );
        let mut f = resp();
        assert_eq!(
            testkit::run(&mut f, b"-ERR\r\n:1\r\n", &[]),
            Outcome::pending(vec![6, 10], 0)
        );
        assert_eq!(f.status(), Some(0), "the error does not carry over");
    }

    #[test]
    fn fixtures_at_every_split() {
        let (stream, ends) = concat(&[
            b"+PONG\r\n".to_vec(),
            b"$5\r\nhello\r\n".to_vec(),
            b"$-1\r\n".to_vec(),
            b"*2\r\n$3\r\nfoo\r\n:42\r\n".to_vec(),
            b"-ERR wrong number of arguments for 'get' command\r\n".to_vec(),
            b"*2\r\n*3\r\n:1\r\n:2\r\n:3\r\n*2\r\n+Foo\r\n-Bar\r\n".to_vec(),
            b"*-1\r\n".to_vec(),
            b"$0\r\n\r\n".to_vec(),
            b"$4\r\n\r\n\r\n\r\n".to_vec(),
        ]);
        testkit::check_splits(resp, &stream, &ends);
    }

    #[test]
    fn arrays_nest_eight_deep_and_no_deeper() {
        let deep = |levels: usize| {
            let mut r = b"*1\r\n".repeat(levels);
            r.extend_from_slice(b":7\r\n");
            r
        };
        let eight = deep(8);
        testkit::check_splits(resp, &eight, &[eight.len()]);
        assert_eq!(
            testkit::run(&mut resp(), &deep(9), &[]),
            Outcome::invalid(vec![], "RESP arrays nested deeper than 8")
        );
        // Depth is about nesting, not about how many arrays a reply holds.
        let wide = b"*3\r\n*1\r\n*1\r\n:1\r\n*1\r\n*1\r\n:2\r\n*1\r\n*1\r\n:3\r\n";
        testkit::check_splits(resp, wide, &[wide.len()]);
    }

    #[test]
    fn trailing_garbage_is_invalid_on_its_first_byte() {
        let mut f = resp();
        assert_eq!(
            testkit::run(&mut f, b"+OK\r\nHTTP/1.1 200 OK\r\n", &[]),
            Outcome::invalid(vec![5], NOT_A_TYPE)
        );
        assert_eq!(resp().feed(b"\r\n"), Parsed::Invalid { reason: NOT_A_TYPE });
    }

    #[test]
    fn invalid_bytes_are_invalid() {
        for bad in [
            &b"+OK\n"[..],
            b"+O\rK\r\n",
            b":\r\n",
            b":12a\r\n",
            b":+1\r\n",
            b":99999999999999999999\r\n",
            b":1\n",
            b"$-2\r\n",
            b"$-0\r\n",
            b"$x\r\n",
            b"$3\r\nabcd\r\n",
            b"$3\r\nabc\rx",
            b"*-2\r\n",
            b"*1\r\n!oops\r\n",
            b"_\r\n",
            b"%1\r\n+a\r\n+b\r\n",
            b"PING\r\n",
        ] {
            let out = testkit::run(&mut resp(), bad, &[]);
            assert!(
                out.invalid.is_some(),
                "{:?}: {out:?}",
                String::from_utf8_lossy(bad)
            );
            let out = testkit::run(&mut resp(), bad, &[1]);
            assert!(
                out.invalid.is_some(),
                "{:?} by bytes: {out:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn oversize_is_invalid() {
        // $5\r\nhello\r\n is 11 bytes: fits in 11, not in 10, found at the length line.
        assert_eq!(
            Resp::new(11).feed(b"$5\r\nhello\r\n"),
            Parsed::Complete { consumed: 11 }
        );
        assert_eq!(
            Resp::new(10).feed(b"$5\r\n"),
            Parsed::Invalid { reason: OVERSIZE }
        );
        // An array whose count cannot fit, before its elements arrive.
        assert_eq!(
            Resp::new(100).feed(b"*34\r\n"),
            Parsed::Invalid { reason: OVERSIZE }
        );
        assert_eq!(
            Resp::new(1 << 30).feed(b"*9999999999999\r\n"),
            Parsed::Invalid { reason: OVERSIZE }
        );
        // Simple strings and the total of many elements are counted as they come.
        for cuts in [&[][..], &[1], &[4]] {
            let long = [b"+".as_slice(), &[b'x'; 20], b"\r\n"].concat();
            assert_eq!(
                testkit::run(&mut Resp::new(22), &long, cuts),
                Outcome::invalid(vec![], OVERSIZE)
            );
            assert_eq!(
                testkit::run(&mut Resp::new(23), &long, cuts),
                Outcome::pending(vec![23], 0)
            );
            let many = [b"*5\r\n".as_slice(), &b":1\r\n".repeat(5)].concat();
            assert_eq!(
                testkit::run(&mut Resp::new(23), &many, cuts),
                Outcome::invalid(vec![], OVERSIZE)
            );
            assert_eq!(
                testkit::run(&mut Resp::new(24), &many, cuts),
                Outcome::pending(vec![24], 0)
            );
        }
    }

    #[test]
    fn a_line_past_8_kib_is_invalid() {
        let mut r = b":".to_vec();
        r.resize(LINE_BYTES_MAX + 10, b'1');
        assert_eq!(
            testkit::run(&mut resp(), &r, &[100]),
            Outcome::invalid(vec![], "RESP line longer than 8 KiB")
        );
    }

    #[test]
    fn a_large_bulk_string_streams_through_a_small_buffer() {
        let value = vec![b'v'; MAX - 20];
        let bulk = [format!("${}\r\n", value.len()).as_bytes(), &value, b"\r\n"].concat();
        let mut array = b"*1000\r\n".to_vec();
        for i in 0..1000 {
            array.extend_from_slice(format!("${}\r\n{}\r\n", i.to_string().len(), i).as_bytes());
        }
        let (stream, ends) = concat(&[bulk, array, b"+OK\r\n".to_vec()]);
        for capacity in [64, 4096] {
            assert_eq!(
                testkit::run_buffered(&mut resp(), &stream, capacity),
                Outcome::pending(ends.clone(), 0)
            );
        }
    }

    #[test]
    fn reset_clears_partial_state() {
        // Mid-array, mid-bulk, mid-line, mid-CRLF: all forgotten.
        for partial in [
            &b"*3\r\n:1\r\n"[..],
            b"$10\r\nabc",
            b":12",
            b"$1\r\nx\r",
            b"-ERR x",
        ] {
            testkit::check_reset(resp, partial, b"+OK\r\n", &[5]);
        }
        let mut f = resp();
        f.feed(b"-ERR\r\n");
        f.reset();
        assert_eq!(f.status(), None);
    }

    /// One generated element, nested up to `depth` more levels.
    fn element(depth: u32) -> impl Strategy<Value = Vec<u8>> {
        let leaf = prop_oneof![
            "[a-zA-Z0-9 ]{0,20}".prop_map(|s| format!("+{s}\r\n").into_bytes()),
            "[a-zA-Z0-9 ]{0,20}".prop_map(|s| format!("-ERR {s}\r\n").into_bytes()),
            any::<i64>().prop_map(|n| format!(":{n}\r\n").into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..60).prop_map(|v| [
                format!("${}\r\n", v.len()).as_bytes(),
                &v,
                b"\r\n"
            ]
            .concat()),
            Just(b"$-1\r\n".to_vec()),
            Just(b"*-1\r\n".to_vec()),
            Just(b"*0\r\n".to_vec()),
        ];
        leaf.prop_recursive(depth, 64, 5, |inner| {
            proptest::collection::vec(inner, 1..5).prop_map(|items| {
                let mut r = format!("*{}\r\n", items.len()).into_bytes();
                items.iter().for_each(|i| r.extend_from_slice(i));
                r
            })
        })
    }

    proptest! {
        #[test]
        fn chunking_never_moves_frame_ends(
            replies in proptest::collection::vec(element(7), 0..6),
            cuts in testkit::cuts(),
        ) {
            let (stream, ends) = concat(&replies);
            let whole = testkit::run(&mut resp(), &stream, &[]);
            prop_assert_eq!(&whole, &Outcome::pending(ends, 0));
            prop_assert_eq!(testkit::run(&mut resp(), &stream, &cuts), whole);
        }

        #[test]
        fn arbitrary_bytes_give_the_same_verdict_however_cut(
            bytes in proptest::collection::vec(
                prop_oneof![Just(b'*'), Just(b'$'), Just(b'\r'), Just(b'\n'), b'0'..=b'3', any::<u8>()],
                0..120,
            ),
            cuts in testkit::cuts(),
        ) {
            let whole = testkit::run(&mut resp(), &bytes, &[]);
            let cut = testkit::run(&mut resp(), &bytes, &cuts);
            prop_assert_eq!(whole.ends, cut.ends);
            prop_assert_eq!(whole.invalid, cut.invalid);
        }
    }
}
