//! Fixed-length responses: every response is exactly N bytes. The framer only counts,
//! so it consumes everything it is fed and never needs bytes kept for later.

use super::{Framer, Parsed};

#[derive(Debug, Clone)]
pub struct FixedLength {
    len: usize,
    remaining: usize,
}

impl FixedLength {
    pub fn new(len: usize) -> Self {
        assert!(len > 0);
        FixedLength {
            len,
            remaining: len,
        }
    }
}

impl Framer for FixedLength {
    #[inline]
    fn feed(&mut self, input: &[u8]) -> Parsed {
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
pub(crate) mod tests {
    use super::*;

    /// Feeds a stream in chunks of `split`, returns the byte offsets where responses ended.
    pub(crate) fn frame_ends(f: &mut dyn Framer, stream: &[u8], chunk: usize) -> Vec<usize> {
        let mut ends = Vec::new();
        let mut pos = 0;
        let mut pending: Vec<u8> = Vec::new();
        let mut base = 0; // stream offset of pending[0]
        while pos < stream.len() || !pending.is_empty() {
            let take = chunk.min(stream.len() - pos);
            pending.extend_from_slice(&stream[pos..pos + take]);
            pos += take;
            loop {
                match f.feed(&pending) {
                    Parsed::Complete { consumed } => {
                        ends.push(base + consumed);
                        pending.drain(..consumed);
                        base += consumed;
                        if pending.is_empty() {
                            break;
                        }
                    }
                    Parsed::Incomplete { consumed } => {
                        pending.drain(..consumed);
                        base += consumed;
                        break;
                    }
                    Parsed::Invalid { .. } => return ends,
                }
            }
            if take == 0 {
                break;
            }
        }
        ends
    }

    #[test]
    fn complete_in_one_read() {
        let mut f = FixedLength::new(4);
        assert_eq!(f.feed(b"abcd"), Parsed::Complete { consumed: 4 });
    }

    #[test]
    fn split_at_every_byte_boundary() {
        let stream = [7u8; 12];
        for chunk in 1..=12 {
            let mut f = FixedLength::new(4);
            assert_eq!(
                frame_ends(&mut f, &stream, chunk),
                vec![4, 8, 12],
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn pipelined_back_to_back_and_trailing_partial() {
        let mut f = FixedLength::new(3);
        // 2 full responses and 2 bytes of a third: the third stays pending.
        assert_eq!(frame_ends(&mut f, b"abcdefgh", 8), vec![3, 6]);
        assert_eq!(f.feed(b"i"), Parsed::Complete { consumed: 1 });
    }

    #[test]
    fn reset_forgets_partial_response() {
        let mut f = FixedLength::new(4);
        assert_eq!(f.feed(b"ab"), Parsed::Incomplete { consumed: 2 });
        f.reset();
        assert_eq!(f.feed(b"abc"), Parsed::Incomplete { consumed: 3 });
    }
}
