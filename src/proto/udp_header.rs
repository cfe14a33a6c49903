//! The header blaster puts at the front of every UDP datagram, before the payload:
//!
//! ```text
//! offset  size  field
//!      0     4  magic     b"BLST"
//!      4     4  flow      u32 big-endian: the sending socket (connection index)
//!      8     8  seq       u64 big-endian: per-flow sequence number, from 0
//!     16     8  intended  u64 big-endian: intended send instant, ns since run start
//! ```
//!
//! An echo server returns the datagram unchanged, so the response carries the flow and
//! sequence that match it to its request. A counting sink computes loss and reordering
//! per flow from the sequence numbers. An echo whose path is a byte stream (socat's
//! `PIPE`, a relay over TCP) may return two or more requests joined in one datagram;
//! [`joined`] finds the requests after the first. Pure: no I/O, no allocation.

pub const MAGIC: [u8; 4] = *b"BLST";
pub const HEADER_LEN: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    pub flow: u32,
    pub seq: u64,
    pub intended_ns: u64,
}

impl UdpHeader {
    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf`.
    pub fn write(&self, buf: &mut [u8]) {
        buf[0..4].copy_from_slice(&MAGIC);
        buf[4..8].copy_from_slice(&self.flow.to_be_bytes());
        buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        buf[16..24].copy_from_slice(&self.intended_ns.to_be_bytes());
    }

    /// Reads a header; `None` for a datagram that is too short or not ours (foreign).
    pub fn read(buf: &[u8]) -> Option<UdpHeader> {
        if buf.len() < HEADER_LEN || buf[0..4] != MAGIC {
            return None;
        }
        let u32_at = |i: usize| u32::from_be_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_be_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
        Some(UdpHeader {
            flow: u32_at(4),
            seq: u64_at(8),
            intended_ns: u64_at(16),
        })
    }
}

/// How many more of blaster's datagrams follow the first in `buf`, a response whose
/// requests were each `dgram_len` bytes: whole datagrams laid end to end, each
/// starting with [`MAGIC`], counted until the first that is not one. 0 for a response
/// of one datagram (or of any other shape).
pub fn joined(buf: &[u8], dgram_len: usize) -> u64 {
    if dgram_len < HEADER_LEN {
        return 0;
    }
    let mut n = 0;
    let mut at = dgram_len;
    while at + dgram_len <= buf.len() && buf[at..at + 4] == MAGIC {
        n += 1;
        at += dgram_len;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let h = UdpHeader {
            flow: 7,
            seq: u64::MAX - 1,
            intended_ns: 123_456_789,
        };
        let mut buf = [0u8; 64];
        h.write(&mut buf);
        assert_eq!(UdpHeader::read(&buf), Some(h));
        assert_eq!(UdpHeader::read(&buf[..HEADER_LEN]), Some(h));
    }

    #[test]
    fn foreign_and_short_datagrams_are_rejected() {
        assert_eq!(UdpHeader::read(b"BLST"), None);
        assert_eq!(UdpHeader::read(&[0u8; 32]), None);
    }

    #[test]
    fn joined_datagrams_are_counted_after_the_first() {
        let len = HEADER_LEN + 8;
        let mut buf = [0u8; 4 * 32];
        for seq in 0..4u64 {
            let h = UdpHeader {
                flow: 1,
                seq,
                intended_ns: 0,
            };
            h.write(&mut buf[seq as usize * len..]);
        }
        assert_eq!(joined(&buf[..len], len), 0, "one datagram");
        assert_eq!(joined(&buf[..2 * len], len), 1);
        assert_eq!(joined(&buf, len), 3);
        // A trailing partial datagram (truncated by the receive buffer) is not counted.
        assert_eq!(joined(&buf[..3 * len - 1], len), 1);
        // Bytes after the first datagram that are not ours: a longer response, not a join.
        let mut other = buf;
        other[len..len + 4].copy_from_slice(b"XXXX");
        assert_eq!(joined(&other, len), 0);
        assert_eq!(joined(&buf, 3), 0, "a length shorter than the header");
    }
}
