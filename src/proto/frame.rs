//! Frames of `--workload frames`: the wire format the generator and the sink's
//! broadcast mode share. Sans-I/O: encode into and decode from caller-owned bytes, no
//! allocation.
//!
//! A frame is a [`HEADER_BYTES`]-byte header and padding up to `--frame-size`. Over TCP
//! each frame follows a 4-byte big-endian length ([`LEN_PREFIX_BYTES`]) counting the
//! frame's bytes (so a foreign server sees `length-prefixed:u32be`); over UDP a frame is
//! one datagram.
//!
//! Header, little-endian:
//!
//! | bytes  | field        | meaning                                                     |
//! |--------|--------------|-------------------------------------------------------------|
//! | 0..4   | magic        | `BLFR`                                                      |
//! | 4..8   | room         | the sender's room                                           |
//! | 8..10  | member       | the sender's index in its room (aggregate: the receiver's)   |
//! | 10..12 | flags        | bit 0: aggregate downlink frame; bit 1: join (see below)    |
//! | 12..16 | entries      | aggregate: [`Entry`] records after the header; else 0       |
//! | 16..24 | seq          | the tick index (aggregate: the server tick)                 |
//! | 24..32 | intended_ns  | the planned send instant, on the sender's clock             |
//!
//! An aggregate downlink frame (`blaster sink --mode broadcast --aggregate`) carries one
//! [`ENTRY_BYTES`]-byte [`Entry`] per room frame it relays (member, seq, intended_ns of
//! the original), then padding to `--down-size`.

/// Bytes of the frame header.
pub const HEADER_BYTES: usize = 32;
/// Bytes of the TCP length prefix before each frame.
pub const LEN_PREFIX_BYTES: usize = 4;
/// Bytes of one relayed-frame record in an aggregate downlink frame.
pub const ENTRY_BYTES: usize = 24;
/// The magic that opens every frame.
pub const MAGIC: [u8; 4] = *b"BLFR";
/// `flags` bit: an aggregate downlink frame.
pub const FLAG_AGGREGATE: u16 = 1;
/// `flags` bit: a join frame. A connection that may never send (a listener under
/// `--senders-per-room`) opens with one: the sink puts it into the header's room,
/// relays nothing, and answers with the same frame, the acknowledgement.
pub const FLAG_JOIN: u16 = 2;
/// Largest frame accepted (header and padding), so a corrupt length cannot make a
/// reader wait for gigabytes.
pub const FRAME_BYTES_MAX: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrameHeader {
    pub room: u32,
    pub member: u16,
    pub flags: u16,
    pub entries: u32,
    pub seq: u64,
    pub intended_ns: u64,
}

/// One relayed frame inside an aggregate downlink frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Entry {
    pub member: u16,
    pub seq: u64,
    pub intended_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame shorter than its {HEADER_BYTES}-byte header")]
    Short,
    #[error("frame does not start with the magic BLFR")]
    Magic,
    #[error("aggregate frame announces more entries than it holds")]
    Entries,
    #[error("frame length {0} outside {HEADER_BYTES}..={FRAME_BYTES_MAX}")]
    Length(u32),
}

impl FrameHeader {
    /// Writes the header into the first [`HEADER_BYTES`] of `out` (which must hold them).
    pub fn encode(&self, out: &mut [u8]) {
        let out = &mut out[..HEADER_BYTES];
        out[0..4].copy_from_slice(&MAGIC);
        out[4..8].copy_from_slice(&self.room.to_le_bytes());
        out[8..10].copy_from_slice(&self.member.to_le_bytes());
        out[10..12].copy_from_slice(&self.flags.to_le_bytes());
        out[12..16].copy_from_slice(&self.entries.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..32].copy_from_slice(&self.intended_ns.to_le_bytes());
    }

    /// Reads the header at the start of `frame` (the whole frame, for the entry check).
    pub fn decode(frame: &[u8]) -> Result<FrameHeader, FrameError> {
        if frame.len() < HEADER_BYTES {
            return Err(FrameError::Short);
        }
        if frame[0..4] != MAGIC {
            return Err(FrameError::Magic);
        }
        let h = FrameHeader {
            room: u32::from_le_bytes(frame[4..8].try_into().expect("4 bytes")),
            member: u16::from_le_bytes(frame[8..10].try_into().expect("2 bytes")),
            flags: u16::from_le_bytes(frame[10..12].try_into().expect("2 bytes")),
            entries: u32::from_le_bytes(frame[12..16].try_into().expect("4 bytes")),
            seq: u64::from_le_bytes(frame[16..24].try_into().expect("8 bytes")),
            intended_ns: u64::from_le_bytes(frame[24..32].try_into().expect("8 bytes")),
        };
        if h.aggregate() && (h.entries as usize) > (frame.len() - HEADER_BYTES) / ENTRY_BYTES {
            return Err(FrameError::Entries);
        }
        Ok(h)
    }

    pub fn aggregate(&self) -> bool {
        self.flags & FLAG_AGGREGATE != 0
    }
}

impl Entry {
    /// Writes entry `i` of an aggregate frame (after the header) into `frame`.
    pub fn encode(&self, frame: &mut [u8], i: usize) {
        let at = HEADER_BYTES + i * ENTRY_BYTES;
        let out = &mut frame[at..at + ENTRY_BYTES];
        out[0..2].copy_from_slice(&self.member.to_le_bytes());
        out[2..8].fill(0);
        out[8..16].copy_from_slice(&self.seq.to_le_bytes());
        out[16..24].copy_from_slice(&self.intended_ns.to_le_bytes());
    }

    /// Reads entry `i` of an aggregate frame whose header was decoded (so it is there).
    pub fn decode(frame: &[u8], i: usize) -> Entry {
        let at = HEADER_BYTES + i * ENTRY_BYTES;
        let b = &frame[at..at + ENTRY_BYTES];
        Entry {
            member: u16::from_le_bytes(b[0..2].try_into().expect("2 bytes")),
            seq: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            intended_ns: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
        }
    }
}

/// Writes the TCP length prefix for a frame of `frame_bytes` into `out[..4]`.
pub fn encode_len(frame_bytes: usize, out: &mut [u8]) {
    out[..LEN_PREFIX_BYTES].copy_from_slice(&(frame_bytes as u32).to_be_bytes());
}

/// Where the next TCP frame in `buf` ends: `Ok(Some((start, end)))` when a whole frame
/// (after its prefix) is in `buf[start..end]`, `Ok(None)` when more bytes are needed,
/// an error when the prefix announces an impossible length.
pub fn next_tcp_frame(buf: &[u8]) -> Result<Option<(usize, usize)>, FrameError> {
    if buf.len() < LEN_PREFIX_BYTES {
        return Ok(None);
    }
    let len = u32::from_be_bytes(buf[..LEN_PREFIX_BYTES].try_into().expect("4 bytes"));
    if (len as usize) < HEADER_BYTES || len as usize > FRAME_BYTES_MAX {
        return Err(FrameError::Length(len));
    }
    let end = LEN_PREFIX_BYTES + len as usize;
    Ok((buf.len() >= end).then_some((LEN_PREFIX_BYTES, end)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> FrameHeader {
        FrameHeader {
            room: 7,
            member: 3,
            flags: 0,
            entries: 0,
            seq: 1_234_567,
            intended_ns: 33_000_000 * 41 + 5,
        }
    }

    #[test]
    fn header_round_trips_and_the_layout_is_the_documented_one() {
        let mut b = [0u8; 50];
        header().encode(&mut b);
        assert_eq!(&b[0..4], b"BLFR");
        assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), 7);
        assert_eq!(u16::from_le_bytes(b[8..10].try_into().unwrap()), 3);
        assert_eq!(u64::from_le_bytes(b[16..24].try_into().unwrap()), 1_234_567);
        assert_eq!(FrameHeader::decode(&b), Ok(header()));
    }

    #[test]
    fn short_and_foreign_frames_are_refused() {
        let mut b = [0u8; HEADER_BYTES];
        header().encode(&mut b);
        assert_eq!(
            FrameHeader::decode(&b[..HEADER_BYTES - 1]),
            Err(FrameError::Short)
        );
        b[0] = b'X';
        assert_eq!(FrameHeader::decode(&b), Err(FrameError::Magic));
    }

    #[test]
    fn aggregate_entries_round_trip_and_must_fit() {
        let mut b = vec![0u8; HEADER_BYTES + 2 * ENTRY_BYTES + 3];
        let h = FrameHeader {
            flags: FLAG_AGGREGATE,
            entries: 2,
            ..header()
        };
        h.encode(&mut b);
        let e = [
            Entry {
                member: 1,
                seq: 9,
                intended_ns: 99,
            },
            Entry {
                member: 4,
                seq: 9,
                intended_ns: 104,
            },
        ];
        e[0].encode(&mut b, 0);
        e[1].encode(&mut b, 1);
        let d = FrameHeader::decode(&b).unwrap();
        assert!(d.aggregate());
        assert_eq!([Entry::decode(&b, 0), Entry::decode(&b, 1)], e);
        let h3 = FrameHeader { entries: 3, ..h };
        h3.encode(&mut b);
        assert_eq!(FrameHeader::decode(&b), Err(FrameError::Entries));
    }

    #[test]
    fn tcp_frames_are_found_after_their_prefix() {
        let mut b = vec![0u8; 4 + 40 + 4 + 40];
        encode_len(40, &mut b);
        header().encode(&mut b[4..]);
        encode_len(40, &mut b[44..]);
        assert_eq!(next_tcp_frame(&b[..3]), Ok(None));
        assert_eq!(next_tcp_frame(&b[..43]), Ok(None));
        assert_eq!(next_tcp_frame(&b), Ok(Some((4, 44))));
        assert_eq!(next_tcp_frame(&b[44..]), Ok(Some((4, 44))));
        encode_len(HEADER_BYTES - 1, &mut b);
        assert_eq!(
            next_tcp_frame(&b),
            Err(FrameError::Length(HEADER_BYTES as u32 - 1))
        );
        encode_len(FRAME_BYTES_MAX + 1, &mut b);
        assert!(next_tcp_frame(&b).is_err());
    }
}
