//! `user_data` layout: connection index (32 bits) | operation (8 bits) | generation
//! (24 bits). A completion whose generation differs from the slot's current one belongs
//! to a connection that has since been closed and reopened, and is ignored.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Connect = 1,
    Send = 2,
    Recv = 3,
    /// Closing a socket held only in the ring's file table.
    Close = 4,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub conn: u32,
    pub op: Op,
    pub generation: u32,
}

const GEN_MASK: u64 = (1 << 24) - 1;

impl Token {
    #[inline]
    pub fn encode(self) -> u64 {
        pack(self.conn, self.op as u8, self.generation)
    }

    /// `None` for user_data no operation of ours carries (e.g. 0 from a timeout).
    #[inline]
    pub fn decode(v: u64) -> Option<Token> {
        let (conn, op, generation) = unpack(v);
        let op = match op {
            1 => Op::Connect,
            2 => Op::Send,
            3 => Op::Recv,
            4 => Op::Close,
            _ => return None,
        };
        Some(Token {
            conn,
            op,
            generation,
        })
    }
}

/// The layout without the generator's operations, for a ring with operations of its
/// own (the sink's): `slot` in the high 32 bits, `op` in the next 8 (0 is never an
/// operation, so a zero `user_data` decodes to none), `generation` in the low 24
/// (wrapped).
#[inline]
pub fn pack(slot: u32, op: u8, generation: u32) -> u64 {
    ((slot as u64) << 32) | ((op as u64) << 24) | (generation as u64 & GEN_MASK)
}

/// The fields [`pack`] put in: (slot, op, generation).
#[inline]
pub fn unpack(v: u64) -> (u32, u8, u32) {
    ((v >> 32) as u32, (v >> 24) as u8, (v & GEN_MASK) as u32)
}

/// Generations wrap within 24 bits.
#[inline]
pub fn next_generation(g: u32) -> u32 {
    (g + 1) & GEN_MASK as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_field() {
        for op in [Op::Connect, Op::Send, Op::Recv, Op::Close] {
            let t = Token {
                conn: 0xdead_beef,
                op,
                generation: 0xab_cdef,
            };
            assert_eq!(Token::decode(t.encode()), Some(t));
        }
    }

    #[test]
    fn packed_fields_round_trip_and_the_generation_wraps() {
        assert_eq!(
            unpack(pack(u32::MAX, 0xff, 0xab_cdef)),
            (u32::MAX, 0xff, 0xab_cdef)
        );
        assert_eq!(unpack(pack(7, 2, GEN_MASK as u32 + 2)), (7, 2, 1));
    }

    #[test]
    fn zero_is_not_a_token_and_generations_wrap() {
        assert_eq!(Token::decode(0), None);
        assert_eq!(next_generation(GEN_MASK as u32), 0);
    }
}
