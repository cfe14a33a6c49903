//! Fixed-length responses: every response is exactly N bytes. The framer only counts,
//! so it consumes everything it is fed and never needs bytes kept for later. Every byte
//! is valid; bytes after a response are the start of the next one, so trailing garbage
//! only ever leaves a response incomplete. With N above `--max-response` every response
//! is oversize, and the first byte fed is `Invalid`.

use super::{Framer, OVERSIZE, Parsed};

#[derive(Debug, Clone)]
pub struct FixedLength {
    len: usize,
    remaining: usize,
    oversize: bool,
}

impl FixedLength {
    pub fn new(len: usize, max_response: usize) -> Self {
        assert!(len > 0);
        FixedLength {
            len,
            remaining: len,
            oversize: len > max_response,
        }
    }
}

impl Framer for FixedLength {
    #[inline]
    fn feed(&mut self, input: &[u8]) -> Parsed {
        if self.oversize && !input.is_empty() {
            return Parsed::Invalid { reason: OVERSIZE };
        }
        if input.len() >= self.remaining {
            let consumed = self.remaining;
            self.remaining = self.len;
            Parsed::Complete { consumed }
        } else {
            self.remaining -= input.len();
            Parsed::Incomplete {
                consumed: input.len(),
            }
        }
    }

    fn reset(&mut self) {
        self.remaining = self.len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::{self, Outcome};
    use proptest::prelude::*;

    const MAX: usize = 1 << 20;

    #[test]
    fn complete_in_one_read() {
        let mut f = FixedLength::new(4, MAX);
        assert_eq!(f.feed(b"abcd"), Parsed::Complete { consumed: 4 });
    }

    #[test]
    fn split_at_every_byte_boundary() {
        testkit::check_splits(|| FixedLength::new(4, MAX), &[7u8; 12], &[4, 8, 12]);
    }

    #[test]
    fn pipelined_back_to_back_and_trailing_partial() {
        let mut f = FixedLength::new(3, MAX);
        // 2 full responses and 2 bytes of a third: the third stays pending.
        assert_eq!(
            testkit::run(&mut f, b"abcdefgh", &[]),
            Outcome::pending(vec![3, 6], 0)
        );
        assert_eq!(f.feed(b"i"), Parsed::Complete { consumed: 1 });
    }

    #[test]
    fn trailing_garbage_is_the_next_response() {
        // Any byte is valid: extra bytes stay incomplete until N arrive.
        let mut f = FixedLength::new(3, MAX);
        assert_eq!(f.feed(b"abc\xff"), Parsed::Complete { consumed: 3 });
        assert_eq!(f.feed(b"\xff"), Parsed::Incomplete { consumed: 1 });
    }

    #[test]
    fn oversize_is_invalid() {
        let mut f = FixedLength::new(5, 4);
        assert_eq!(f.feed(b"a"), Parsed::Invalid { reason: OVERSIZE });
        let mut f = FixedLength::new(4, 4);
        assert_eq!(f.feed(b"abcd"), Parsed::Complete { consumed: 4 });
    }

    #[test]
    fn streams_through_a_small_buffer() {
        let stream = vec![1u8; 3 << 20];
        let ends = testkit::run_buffered(&mut FixedLength::new(1 << 20, 1 << 20), &stream, 4096);
        assert_eq!(ends, Outcome::pending(vec![1 << 20, 2 << 20, 3 << 20], 0));
    }

    #[test]
    fn reset_forgets_partial_response() {
        let mut f = FixedLength::new(4, MAX);
        assert_eq!(f.feed(b"ab"), Parsed::Incomplete { consumed: 2 });
        f.reset();
        assert_eq!(f.feed(b"abc"), Parsed::Incomplete { consumed: 3 });
    }

    proptest! {
        #[test]
        fn chunking_never_moves_frame_ends(
            n in 1usize..40,
            count in 0usize..20,
            cuts in testkit::cuts(),
        ) {
            let stream = vec![0x5a; n * count];
            let whole = testkit::run(&mut FixedLength::new(n, MAX), &stream, &[]);
            let expected: Vec<usize> = (1..=count).map(|i| i * n).collect();
            prop_assert_eq!(&whole, &Outcome::pending(expected, 0));
            prop_assert_eq!(testkit::run(&mut FixedLength::new(n, MAX), &stream, &cuts), whole);
        }
    }
}
