//! The sink's `user_data` token: which connection slot, which operation, which
//! incarnation of the slot, and (for echo sends) which provided buffer.
//!
//! Layout: the engine's ([`token::pack`]: slot 32 bits | operation 8 | generation 24),
//! with the sink's own operations and its slot field split in two: bits 0..20 the
//! connection index, bits 20..32 the buffer id. A slot's generation is bumped every
//! time its connection is torn down, so a completion that arrives for an earlier
//! occupant of the slot is recognised as stale and ignored instead of being applied
//! to the new connection. The buffer id travels in the token because a stale echo
//! send must still give its buffer back to the pool: the slot no longer says which.

use crate::engine::token;

/// Slots per ring: 20 bits, the kernel's own ceiling on a fixed-file table
/// (`IORING_MAX_FIXED_FILES`).
pub(crate) const INDEX_LIMIT: u32 = 1 << INDEX_BITS;
const INDEX_BITS: u32 = 20;
/// Bits of the buffer id: the rest of the engine's 32-bit slot field.
const BUF_BITS: u32 = 32 - INDEX_BITS;
/// "No buffer" in the buffer field; pools are smaller (`RECV_BUFFERS` is 256).
pub(crate) const NO_BUF: u16 = (1 << BUF_BITS) - 1;

/// The operation a completion belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// The listener's multishot accept.
    Accept = 1,
    /// A (multishot) receive into a provided buffer.
    Recv = 2,
    /// A send of (part of) a reply.
    Send = 3,
    /// The service-delay timer linked in front of a send.
    Timeout = 4,
    /// The cancel-everything request issued at shutdown.
    Cancel = 5,
    /// SO_LINGER {on, 0} before a reset.
    Linger = 6,
    /// The cancel of one connection's operations before its close, or of its
    /// receive when its echo holds its share of the pool.
    CancelConn = 7,
    /// The close of a connection (fixed slot or ordinary descriptor).
    Close = 8,
}

impl Op {
    fn from_bits(bits: u8) -> Option<Op> {
        match bits {
            1 => Some(Op::Accept),
            2 => Some(Op::Recv),
            3 => Some(Op::Send),
            4 => Some(Op::Timeout),
            5 => Some(Op::Cancel),
            6 => Some(Op::Linger),
            7 => Some(Op::CancelConn),
            8 => Some(Op::Close),
            _ => None,
        }
    }
}

/// A decoded `user_data` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    pub index: u32,
    pub op: Op,
    pub generation: u32,
    /// The provided buffer an echo send reads from, else [`NO_BUF`].
    pub buf: u16,
}

impl Token {
    pub(crate) fn new(index: u32, op: Op, generation: u32) -> Token {
        Token::with_buf(index, op, generation, NO_BUF)
    }

    pub(crate) fn with_buf(index: u32, op: Op, generation: u32, buf: u16) -> Token {
        assert!(
            index < INDEX_LIMIT,
            "slot index {index} beyond the token's 20 bits"
        );
        assert!(
            buf <= NO_BUF,
            "buffer id {buf} beyond the token's {BUF_BITS} bits"
        );
        Token {
            index,
            op,
            generation,
            buf,
        }
    }

    pub(crate) fn encode(self) -> u64 {
        let slot = self.index | u32::from(self.buf) << INDEX_BITS;
        token::pack(slot, self.op as u8, self.generation)
    }

    /// `None` for a value the sink never produced (unknown operation bits).
    pub(crate) fn decode(user_data: u64) -> Option<Token> {
        let (slot, op, generation) = token::unpack(user_data);
        Some(Token {
            index: slot & (INDEX_LIMIT - 1),
            op: Op::from_bits(op)?,
            generation,
            buf: (slot >> INDEX_BITS) as u16,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest generation: the one `next_generation` wraps to 0.
    const GENERATION_MAX: u32 = (1 << 24) - 1;

    const OPS: [Op; 8] = [
        Op::Accept,
        Op::Recv,
        Op::Send,
        Op::Timeout,
        Op::Cancel,
        Op::Linger,
        Op::CancelConn,
        Op::Close,
    ];

    #[test]
    fn round_trips_every_op_and_extreme_fields() {
        for op in OPS {
            for index in [0, 1, INDEX_LIMIT - 1] {
                for generation in [0, 1, GENERATION_MAX] {
                    for buf in [0, 1, 255, NO_BUF - 1, NO_BUF] {
                        let t = Token::with_buf(index, op, generation, buf);
                        assert_eq!(Token::decode(t.encode()), Some(t));
                    }
                }
            }
        }
    }

    #[test]
    fn generation_wraps_at_24_bits() {
        let t = Token::new(7, Op::Recv, GENERATION_MAX + 1);
        let d = Token::decode(t.encode()).expect("decodes");
        assert_eq!(
            (d.index, d.op, d.generation, d.buf),
            (7, Op::Recv, 0, NO_BUF)
        );
    }

    #[test]
    #[should_panic(expected = "20 bits")]
    fn an_index_beyond_20_bits_is_a_bug() {
        let _ = Token::new(INDEX_LIMIT, Op::Recv, 0);
    }

    #[test]
    #[should_panic(expected = "12 bits")]
    fn a_buffer_beyond_12_bits_is_a_bug() {
        let _ = Token::with_buf(0, Op::Send, 0, NO_BUF + 1);
    }

    #[test]
    fn unknown_op_bits_decode_to_none() {
        assert_eq!(Token::decode(0), None);
        assert_eq!(Token::decode(0xff << 24), None);
        assert_eq!(crate::engine::token::next_generation(GENERATION_MAX), 0);
    }
}
