//! The sink's `user_data` token: which connection slot, which operation, which
//! incarnation of the slot.
//!
//! Layout (64 bits): bits 0..32 slot index, bits 32..40 operation kind, bits 40..64
//! slot generation. A slot's generation is bumped every time its connection is
//! closed, so a completion that arrives for an earlier occupant of the slot is
//! recognised as stale and ignored instead of being applied to the new connection.

/// Generations wrap at 24 bits; a stale completion would have to survive 16 million
/// reuses of its slot to be mistaken for a live one.
pub(crate) const GENERATION_MASK: u32 = (1 << 24) - 1;

/// The operation a completion belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// The listener's (multishot or single-shot) accept.
    Accept = 1,
    /// A receive into the connection's buffer.
    Recv = 2,
    /// A send of (part of) a reply.
    Send = 3,
    /// The service-delay timer hard-linked in front of a send.
    Timeout = 4,
    /// The cancel-everything request issued at shutdown.
    Cancel = 5,
}

impl Op {
    fn from_bits(bits: u8) -> Option<Op> {
        match bits {
            1 => Some(Op::Accept),
            2 => Some(Op::Recv),
            3 => Some(Op::Send),
            4 => Some(Op::Timeout),
            5 => Some(Op::Cancel),
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
}

impl Token {
    pub(crate) fn new(index: u32, op: Op, generation: u32) -> Token {
        Token {
            index,
            op,
            generation: generation & GENERATION_MASK,
        }
    }

    pub(crate) fn encode(self) -> u64 {
        u64::from(self.index)
            | (self.op as u64) << 32
            | u64::from(self.generation & GENERATION_MASK) << 40
    }

    /// `None` for a value the sink never produced (unknown operation bits).
    pub(crate) fn decode(user_data: u64) -> Option<Token> {
        let op = Op::from_bits((user_data >> 32) as u8)?;
        Some(Token {
            index: user_data as u32,
            op,
            generation: (user_data >> 40) as u32 & GENERATION_MASK,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_op_and_extreme_fields() {
        for op in [Op::Accept, Op::Recv, Op::Send, Op::Timeout, Op::Cancel] {
            for index in [0, 1, u32::MAX] {
                for generation in [0, 1, GENERATION_MASK] {
                    let t = Token::new(index, op, generation);
                    assert_eq!(Token::decode(t.encode()), Some(t));
                }
            }
        }
    }

    #[test]
    fn generation_wraps_at_24_bits() {
        let t = Token::new(7, Op::Recv, GENERATION_MASK + 1);
        assert_eq!(t.generation, 0);
        assert_eq!(Token::decode(t.encode()).map(|t| t.index), Some(7));
    }

    #[test]
    fn unknown_op_bits_decode_to_none() {
        assert_eq!(Token::decode(0), None);
        assert_eq!(Token::decode(0xff << 32), None);
    }
}
