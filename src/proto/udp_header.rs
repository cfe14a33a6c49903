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
//! per flow from the sequence numbers. Pure: no I/O, no allocation.

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
}
