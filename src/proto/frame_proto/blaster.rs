//! `--frame-proto blaster`: blaster's own frames for the built-in sink
//! (`blaster sink --mode broadcast`), as [`crate::proto::frame`] defines them: a 4-byte
//! big-endian length, then the frame (stamp and padding). No join exchange by default:
//! the sink learns a connection's room from its first frame. With listeners
//! ([`FrameSpec::join_frames`]) each connection first sends one join frame per room
//! ([`frame::FLAG_JOIN`], a bare header) and is joined when the sink has sent each back.

use super::{Down, FrameProtoKind, FrameSpec, Join, JoinError, write_payload};
use crate::proto::frame::{
    self, FLAG_JOIN, FrameError, FrameHeader, HEADER_BYTES, LEN_PREFIX_BYTES,
};

/// The member index a join frame carries: the sink does not read it.
const JOIN_MEMBER: u16 = u16::MAX;

#[derive(Debug, Clone)]
pub struct BlasterCodec<'s> {
    pub(crate) spec: &'s FrameSpec,
    /// Join frames the sink has acknowledged so far.
    acked: usize,
}

impl<'s> BlasterCodec<'s> {
    pub fn new(spec: &'s FrameSpec) -> Self {
        BlasterCodec { spec, acked: 0 }
    }

    pub(crate) fn join_start(&mut self, rooms: &[u32], out: &mut Vec<u8>) {
        self.acked = 0;
        if !self.spec.join_frames {
            return;
        }
        for &room in rooms {
            let at = out.len();
            out.resize(at + LEN_PREFIX_BYTES + HEADER_BYTES, 0);
            frame::encode_len(HEADER_BYTES, &mut out[at..]);
            join_header(room).encode(&mut out[at + LEN_PREFIX_BYTES..]);
        }
    }

    pub(crate) fn join_feed(&mut self, rooms: &[u32], input: &[u8], _out: &mut Vec<u8>) -> Join {
        if !self.spec.join_frames {
            return Join::Joined { consumed: 0 };
        }
        let mut pos = 0;
        while self.acked < rooms.len() {
            let rest = &input[pos..];
            let (start, end) = match frame::next_tcp_frame(rest) {
                Ok(Some(span)) => span,
                Ok(None) => return Join::Pending { consumed: pos },
                Err(_) => return Join::Failed(JoinError::protocol(KIND, NOT_AN_ACK, rest)),
            };
            match FrameHeader::decode(&rest[start..end]) {
                Ok(h) if h == join_header(rooms[self.acked]) => self.acked += 1,
                _ => return Join::Failed(JoinError::protocol(KIND, NOT_AN_ACK, rest)),
            }
            pos += end;
        }
        Join::Joined { consumed: pos }
    }

    pub(crate) fn message_bytes_max(&self) -> usize {
        LEN_PREFIX_BYTES + self.spec.frame_size
    }

    #[inline]
    pub(crate) fn encode_uplink(&mut self, stamps: &[FrameHeader], out: &mut [u8]) -> usize {
        let size = self.spec.frame_size;
        let mut at = 0;
        for s in stamps {
            frame::encode_len(size, &mut out[at..]);
            write_payload(s, size, &mut out[at + LEN_PREFIX_BYTES..]);
            at += LEN_PREFIX_BYTES + size;
        }
        at
    }

    #[inline]
    pub(crate) fn decode(&mut self, input: &mut [u8]) -> Down {
        match frame::next_tcp_frame(input) {
            Ok(Some((start, end))) => Down::Message {
                consumed: end,
                payload: start..end,
            },
            Ok(None) => Down::Incomplete { consumed: 0 },
            Err(FrameError::Length(_)) => Down::Invalid {
                reason: "frame length outside 32..=65536",
            },
            Err(_) => Down::Invalid {
                reason: "not a blaster frame",
            },
        }
    }

    pub(crate) fn reset(&mut self) {
        self.acked = 0;
    }

    pub(crate) fn encode_pong(&mut self, _ping: &[u8], _out: &mut [u8]) -> usize {
        0
    }

    pub(crate) fn encode_keepalive(&mut self, _out: &mut [u8]) -> usize {
        0
    }

    pub(crate) fn encode_close(&mut self, _code: Option<u16>, _out: &mut [u8]) -> usize {
        0
    }
}

const KIND: FrameProtoKind = FrameProtoKind::Blaster;
const NOT_AN_ACK: &str = "expected the sink's join frame back";

/// The join frame for `room`, as sent and as acknowledged.
fn join_header(room: u32) -> FrameHeader {
    FrameHeader {
        room,
        member: JOIN_MEMBER,
        flags: FLAG_JOIN,
        ..FrameHeader::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(join_frames: bool) -> FrameSpec {
        let mut s =
            FrameSpec::new(KIND, "room.{room}", "/r/{room}", "h", 64).expect("a valid spec");
        s.join_frames = join_frames;
        s
    }

    #[test]
    fn without_listeners_there_is_no_join_exchange() {
        let spec = spec(false);
        let mut c = BlasterCodec::new(&spec);
        let mut out = Vec::new();
        c.join_start(&[3], &mut out);
        assert!(out.is_empty());
        assert_eq!(
            c.join_feed(&[3], b"", &mut out),
            Join::Joined { consumed: 0 }
        );
    }

    #[test]
    fn join_frames_are_sent_per_room_and_joined_when_each_comes_back() {
        let spec = spec(true);
        let mut c = BlasterCodec::new(&spec);
        let mut out = Vec::new();
        c.join_start(&[3, 9], &mut out);
        assert_eq!(out.len(), 2 * (LEN_PREFIX_BYTES + HEADER_BYTES));
        let (start, end) = frame::next_tcp_frame(&out).unwrap().unwrap();
        let h = FrameHeader::decode(&out[start..end]).unwrap();
        assert_eq!((h.room, h.flags), (3, FLAG_JOIN));
        // The sink echoes them; they arrive split anywhere, a frame after them stays.
        let mut input = out.clone();
        input.extend_from_slice(b"\0\0\0\x20rest");
        let mut none = Vec::new();
        assert_eq!(
            c.join_feed(&[3, 9], &input[..5], &mut none),
            Join::Pending { consumed: 0 }
        );
        let one = LEN_PREFIX_BYTES + HEADER_BYTES;
        assert_eq!(
            c.join_feed(&[3, 9], &input[..one + 3], &mut none),
            Join::Pending { consumed: one }
        );
        assert_eq!(
            c.join_feed(&[3, 9], &input[one..], &mut none),
            Join::Joined { consumed: one }
        );
        assert!(none.is_empty());
        // A restart joins again from the first room.
        c.reset();
        assert_eq!(
            c.join_feed(&[3, 9], &input[..one], &mut none),
            Join::Pending { consumed: one }
        );
    }

    #[test]
    fn anything_but_the_acknowledgement_fails_the_join() {
        let spec = spec(true);
        let mut c = BlasterCodec::new(&spec);
        let mut out = Vec::new();
        c.join_start(&[3], &mut out);
        // Another room's join frame, a data frame, bytes that are no frame.
        let mut other = Vec::new();
        BlasterCodec::new(&spec).join_start(&[4], &mut other);
        let mut data = vec![0u8; LEN_PREFIX_BYTES + 64];
        BlasterCodec::new(&spec).encode_uplink(
            &[FrameHeader {
                room: 3,
                ..Default::default()
            }],
            &mut data,
        );
        for bad in [&other[..], &data[..], b"HTTP/1.1 400 Bad Request\r\n"] {
            let mut c2 = BlasterCodec::new(&spec);
            c2.join_start(&[3], &mut Vec::new());
            match c2.join_feed(&[3], bad, &mut Vec::new()) {
                Join::Failed(e) => assert!(e.to_string().contains(NOT_AN_ACK), "{e}"),
                j => panic!("{j:?} for {bad:?}"),
            }
        }
        assert_eq!(
            c.join_feed(&[3], &out, &mut Vec::new()),
            Join::Joined {
                consumed: out.len()
            }
        );
    }
}
