//! `--frame-proto blaster`: blaster's own frames for the built-in sink
//! (`blaster sink --mode broadcast`), as [`crate::proto::frame`] defines them: a 4-byte
//! big-endian length, then the frame (stamp and padding). No join exchange: the sink
//! learns a connection's room from its first frame.

use super::{Down, FrameSpec, Join, write_payload};
use crate::proto::frame::{self, FrameError, FrameHeader, LEN_PREFIX_BYTES};

#[derive(Debug, Clone)]
pub struct BlasterCodec<'s> {
    pub(crate) spec: &'s FrameSpec,
}

impl<'s> BlasterCodec<'s> {
    pub fn new(spec: &'s FrameSpec) -> Self {
        BlasterCodec { spec }
    }

    pub(crate) fn join_start(&mut self, _rooms: &[u32], _out: &mut Vec<u8>) {}

    pub(crate) fn join_feed(&mut self, _rooms: &[u32], _input: &[u8], _out: &mut Vec<u8>) -> Join {
        Join::Joined { consumed: 0 }
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

    pub(crate) fn reset(&mut self) {}

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
