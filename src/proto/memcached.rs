//! `memcached`: replies of memcached's text protocol (and its meta commands), so a
//! mix of storage and retrieval commands runs through one framer and error replies are
//! told from answers.
//!
//! | reply                                         | ends                                 |
//! |-----------------------------------------------|--------------------------------------|
//! | `STORED`, `NOT_FOUND`, `DELETED`, `OK`, a number, `HD`, `NF`, `EN`, ... | its line |
//! | `VALUE key flags bytes [cas]` + data, repeated | the `END` line                      |
//! | `STAT name value`, repeated                   | the `END` line                       |
//! | `VA bytes flags*` (meta get)                  | the data block after the line        |
//! | `ERROR`, `CLIENT_ERROR msg`, `SERVER_ERROR msg` | its line (an error reply)          |
//!
//! Lines end with CRLF (a bare LF is accepted, as memcached itself accepts it in
//! requests). A data block is exactly `bytes` bytes followed by CRLF.
//!
//! [`Framer::status`] is `Some(1)` after `ERROR`, `CLIENT_ERROR` or `SERVER_ERROR`
//! (anywhere in the reply: a `SERVER_ERROR` can cut a multi-get short) and `Some(0)`
//! otherwise. `NOT_FOUND`, `NOT_STORED`, `EXISTS` and a miss (`END` alone, `EN`) are
//! answers, not errors.

use super::{Framer, LINE_BYTES_MAX, OVERSIZE, Parsed};

const LINE_TOO_LONG: &str = "memcached reply line longer than 8 KiB";
const BAD_LENGTH: &str = "memcached VALUE/VA line without a valid byte count";
const NO_CRLF: &str = "memcached data block not followed by CRLF";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a line; `multi` when inside a VALUE/STAT sequence that ends with END.
    Line { multi: bool },
    /// Inside a data block: `left` bytes of data, then CRLF; `multi` as above.
    Data { left: u64, multi: bool },
    /// After a data block: `seen` bytes of its CRLF.
    Crlf { seen: u8, multi: bool },
}

/// The memcached text-protocol reply framer.
#[derive(Debug, Clone)]
pub struct Memcached {
    max_response: usize,
    state: State,
    /// Bytes of the current reply consumed so far.
    taken: usize,
    /// The current reply holds an error line.
    error: bool,
    last_status: Option<u16>,
}

impl Memcached {
    pub fn new(max_response: usize) -> Self {
        Memcached {
            max_response,
            state: State::Line { multi: false },
            taken: 0,
            error: false,
            last_status: None,
        }
    }

    fn finish(&mut self) {
        self.last_status = Some(self.error as u16);
        self.error = false;
        self.taken = 0;
        self.state = State::Line { multi: false };
    }
}

/// Whether a line is one of the three error replies.
fn is_error_line(line: &[u8]) -> bool {
    line == b"ERROR"
        || line.starts_with(b"ERROR ")
        || line.starts_with(b"CLIENT_ERROR")
        || line.starts_with(b"SERVER_ERROR")
}

/// The byte count in field `index` (0-based, space separated) of `line`.
fn byte_count(line: &[u8], index: usize) -> Option<u64> {
    let field = line
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(index)?;
    if field.is_empty() || field.len() > 19 || !field.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(field).ok()?.parse().ok()
}

impl Framer for Memcached {
    fn feed(&mut self, input: &[u8]) -> Parsed {
        let mut pos = 0;
        loop {
            match self.state {
                State::Line { multi } => {
                    let rest = &input[pos..];
                    let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                        if rest.len() > LINE_BYTES_MAX {
                            return Parsed::Invalid {
                                reason: LINE_TOO_LONG,
                            };
                        }
                        if self.taken + rest.len() > self.max_response {
                            return Parsed::Invalid { reason: OVERSIZE };
                        }
                        // Keep the partial line: it must be seen whole.
                        return Parsed::Incomplete { consumed: pos };
                    };
                    if nl > LINE_BYTES_MAX {
                        return Parsed::Invalid {
                            reason: LINE_TOO_LONG,
                        };
                    }
                    let raw = &rest[..nl];
                    let line = raw.strip_suffix(b"\r").unwrap_or(raw);
                    pos += nl + 1;
                    self.taken += nl + 1;
                    if self.taken > self.max_response {
                        return Parsed::Invalid { reason: OVERSIZE };
                    }
                    if is_error_line(line) {
                        self.error = true;
                        self.finish();
                        return Parsed::Complete { consumed: pos };
                    }
                    if line.starts_with(b"VALUE ") {
                        let Some(left) = byte_count(line, 3) else {
                            return Parsed::Invalid { reason: BAD_LENGTH };
                        };
                        self.state = State::Data { left, multi: true };
                    } else if line.starts_with(b"VA ") {
                        let Some(left) = byte_count(line, 1) else {
                            return Parsed::Invalid { reason: BAD_LENGTH };
                        };
                        self.state = State::Data { left, multi: false };
                    } else if line == b"END" || !multi && !line.starts_with(b"STAT ") {
                        self.finish();
                        return Parsed::Complete { consumed: pos };
                    } else {
                        // STAT lines (and whatever else a multi-line reply lists) run
                        // until END.
                        self.state = State::Line { multi: true };
                    }
                }
                State::Data { left, multi } => {
                    let avail = (input.len() - pos) as u64;
                    let take = left.min(avail);
                    pos += take as usize;
                    self.taken += take as usize;
                    if take < left {
                        self.state = State::Data {
                            left: left - take,
                            multi,
                        };
                        return Parsed::Incomplete { consumed: pos };
                    }
                    self.state = State::Crlf { seen: 0, multi };
                }
                State::Crlf { seen, multi } => {
                    let Some(&b) = input.get(pos) else {
                        self.state = State::Crlf { seen, multi };
                        return Parsed::Incomplete { consumed: pos };
                    };
                    let want = if seen == 0 { b'\r' } else { b'\n' };
                    if b != want {
                        return Parsed::Invalid { reason: NO_CRLF };
                    }
                    pos += 1;
                    self.taken += 1;
                    if seen == 0 {
                        self.state = State::Crlf { seen: 1, multi };
                    } else if multi {
                        self.state = State::Line { multi: true };
                    } else {
                        // A meta get's VA block is the whole reply.
                        self.finish();
                        return Parsed::Complete { consumed: pos };
                    }
                }
            }
            // An announced data block is checked at once, not as its bytes pass.
            if let State::Data { left, .. } = self.state
                && self.taken as u64 + left + 2 > self.max_response as u64
            {
                return Parsed::Invalid { reason: OVERSIZE };
            }
            if pos == input.len() {
                return Parsed::Incomplete { consumed: pos };
            }
        }
    }

    fn reset(&mut self) {
        *self = Memcached::new(self.max_response);
    }

    fn status(&self) -> Option<u16> {
        self.last_status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::{self, Outcome, concat};
    use proptest::prelude::*;

    const MAX: usize = 1 << 20;

    fn mc() -> Memcached {
        Memcached::new(MAX)
    }

    fn one(reply: &[u8]) -> (Parsed, Option<u16>) {
        let mut f = mc();
        (f.feed(reply), f.status())
    }

    #[test]
    fn replies_complete_with_their_status() {
        for (reply, status) in [
            (&b"STORED\r\n"[..], 0),
            (b"NOT_STORED\r\n", 0),
            (b"NOT_FOUND\r\n", 0),
            (b"END\r\n", 0),
            (b"42\r\n", 0),
            (b"HD\r\n", 0),
            (b"EN\r\n", 0),
            (b"VERSION 1.6.21\r\n", 0),
            (b"VALUE k 0 5\r\nhello\r\nEND\r\n", 0),
            (b"VALUE a 0 1 7\r\nx\r\nVALUE b 3 0\r\n\r\nEND\r\n", 0),
            (b"STAT pid 1\r\nSTAT uptime 2\r\nEND\r\n", 0),
            (b"VA 2 f3\r\nhi\r\n", 0),
            (b"ERROR\r\n", 1),
            (b"CLIENT_ERROR bad data chunk\r\n", 1),
            (b"SERVER_ERROR object too large for cache\r\n", 1),
            (b"VALUE k 0 1\r\nx\r\nSERVER_ERROR out of memory\r\n", 1),
            (b"STORED\n", 0),
        ] {
            let (parsed, st) = one(reply);
            assert_eq!(
                parsed,
                Parsed::Complete {
                    consumed: reply.len()
                },
                "{:?}",
                String::from_utf8_lossy(reply)
            );
            assert_eq!(st, Some(status), "{:?}", String::from_utf8_lossy(reply));
        }
    }

    #[test]
    fn an_error_does_not_carry_over() {
        let mut f = mc();
        assert_eq!(
            testkit::run(&mut f, b"SERVER_ERROR x\r\nSTORED\r\n", &[]),
            Outcome::pending(vec![16, 24], 0)
        );
        assert_eq!(f.status(), Some(0));
    }

    #[test]
    fn fixtures_at_every_split() {
        let (stream, ends) = concat(&[
            b"STORED\r\n".to_vec(),
            b"VALUE key1 0 5\r\nhe\r\nl\r\nEND\r\n".to_vec(),
            b"END\r\n".to_vec(),
            b"SERVER_ERROR object too large for cache\r\n".to_vec(),
            b"STAT a b\r\nEND\r\n".to_vec(),
            b"VA 3 t\r\nEND\r\n".to_vec(),
            b"VALUE k 1 0 99\r\n\r\nEND\r\n".to_vec(),
            b"HD\r\n".to_vec(),
        ]);
        testkit::check_splits(mc, &stream, &ends);
        testkit::check_reset(mc, b"VALUE k 0 10\r\nabc", b"STORED\r\n", &[8]);
    }

    #[test]
    fn data_blocks_stream_through_a_small_buffer() {
        let mut reply = b"VALUE big 0 100000\r\n".to_vec();
        reply.extend(std::iter::repeat_n(b'z', 100_000));
        reply.extend_from_slice(b"\r\nEND\r\n");
        assert_eq!(
            testkit::run_buffered(&mut mc(), &reply, 4096),
            Outcome::pending(vec![reply.len()], 0)
        );
    }

    #[test]
    fn bad_replies_are_invalid() {
        for (bad, why) in [
            (&b"VALUE k 0 x\r\n"[..], BAD_LENGTH),
            (b"VALUE k 0\r\n", BAD_LENGTH),
            (b"VA -1\r\n", BAD_LENGTH),
            (b"VALUE k 0 2\r\nabcEND\r\n", NO_CRLF),
            (b"VALUE k 0 2000000\r\n", OVERSIZE),
        ] {
            assert_eq!(
                testkit::run(&mut mc(), bad, &[]),
                Outcome::invalid(vec![], why),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = vec![b'a'; LINE_BYTES_MAX + 2];
        assert_eq!(
            testkit::run(&mut mc(), &long, &[]),
            Outcome::invalid(vec![], LINE_TOO_LONG)
        );
    }

    proptest! {
        #[test]
        fn any_chunking_gives_the_same_ends(cuts in testkit::cuts()) {
            let (stream, ends) = concat(&[
                b"VALUE a 0 3\r\nabc\r\nVALUE b 0 2\r\n\r\n\r\nEND\r\n".to_vec(),
                b"CLIENT_ERROR line too long\r\n".to_vec(),
                b"DELETED\r\n".to_vec(),
            ]);
            prop_assert_eq!(
                testkit::run(&mut mc(), &stream, &cuts),
                Outcome::pending(ends, 0)
            );
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400), cuts in testkit::cuts()) {
            let _ = testkit::run(&mut Memcached::new(256), &bytes, &cuts);
        }
    }
}
