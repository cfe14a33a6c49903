//! `--frame-proto mqtt`: MQTT 3.1.1 (OASIS standard, mosquitto) at QoS 0.
//!
//! A packet is a fixed header byte (type in the high nibble, flags in the low one), a
//! remaining length in 1 to 4 bytes of 7 bits (least significant first, high bit =
//! more), then that many bytes.
//!
//! Join: CONNECT (protocol `MQTT` level 4, clean session, keep-alive
//! [`FrameSpec::keepalive_s`], client identifier `blaster-<id>`) and, pipelined behind
//! it as section 3.1.4 allows, one SUBSCRIBE (packet identifier 1) with every room's
//! topic at QoS 0. Joined when the CONNACK's return code is 0 and the SUBACK grants
//! every topic; a CONNACK code 1-5 (the standard's names: bad protocol version,
//! identifier rejected, server unavailable, bad user name or password, not authorized)
//! or a SUBACK failure 0x80 (an ACL refusing the topic) is a refused join.
//!
//! Uplink: PUBLISH at QoS 0 (no packet identifier) to the room's topic, the payload
//! the stamp and padding. Downlink: PUBLISH (QoS 0, as subscribed; a higher QoS would
//! need an acknowledgement this adapter does not send, so it is invalid), PINGRESP
//! ([`Control::Pong`]), SUBACK/UNSUBACK ([`Control::Ack`]).
//!
//! Keep-alive: the broker drops a client silent for 1.5 x keep-alive; any packet
//! counts, so a connection that publishes every tick never needs PINGREQ. The engine
//! sends [`super::FrameProto::encode_keepalive`] (PINGREQ) on a connection idle for
//! [`super::FrameProto::keepalive_ns`].
//!
//! Echo: MQTT 3.1.1 has no no-local option; a client subscribed to the topic it
//! publishes to gets its own messages back.

use super::{
    Control, Down, ENVELOPE_BYTES_MAX, FrameProtoKind, FrameSpec, Join, JoinError,
    PAYLOAD_BYTES_MAX, write_payload,
};
use crate::proto::frame::FrameHeader;

const KIND: FrameProtoKind = FrameProtoKind::Mqtt;
const CONNECT: u8 = 0x10;
const CONNACK: u8 = 0x20;
const PUBLISH: u8 = 0x30;
const SUBSCRIBE: u8 = 0x82; // type 8, reserved flags 0010
const SUBACK: u8 = 0x90;
const UNSUBACK: u8 = 0xb0;
const PINGREQ: u8 = 0xc0;
const PINGRESP: u8 = 0xd0;
/// Largest packet accepted: a payload and its topic.
const PACKET_BYTES_MAX: usize = PAYLOAD_BYTES_MAX + ENVELOPE_BYTES_MAX;

const BAD_LENGTH: &str = "MQTT remaining length longer than 4 bytes";
const OVERSIZE: &str = "MQTT packet larger than 64 KiB plus its topic";
const UNEXPECTED: &str = "unexpected MQTT packet from the server";
const BAD_PUBLISH: &str = "malformed MQTT PUBLISH";
const QOS: &str = "MQTT PUBLISH at QoS 1 or 2 (the subscription asked for QoS 0)";

#[derive(Debug, Clone)]
pub struct MqttCodec<'s> {
    pub(crate) spec: &'s FrameSpec,
    id: u64,
    connacked: bool,
    subacked: bool,
}

/// A whole packet at the start of the input: its first byte, where its body starts
/// and where it ends. `Ok(None)` while incomplete.
fn packet(input: &[u8]) -> Result<Option<(u8, usize, usize)>, &'static str> {
    let Some(&first) = input.first() else {
        return Ok(None);
    };
    let mut len = 0usize;
    for i in 0..4 {
        let Some(&b) = input.get(1 + i) else {
            return Ok(None);
        };
        len |= usize::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if len > PACKET_BYTES_MAX {
                return Err(OVERSIZE);
            }
            let body = 2 + i;
            return Ok((input.len() >= body + len).then_some((first, body, body + len)));
        }
    }
    Err(BAD_LENGTH)
}

/// Writes a remaining length; returns its bytes.
#[inline]
fn write_len(out: &mut [u8], mut len: usize) -> usize {
    let mut i = 0;
    loop {
        let mut b = (len % 128) as u8;
        len /= 128;
        if len > 0 {
            b |= 0x80;
        }
        out[i] = b;
        i += 1;
        if len == 0 {
            return i;
        }
    }
}

fn push_packet(out: &mut Vec<u8>, first: u8, body: &[u8]) {
    let mut len = [0u8; 4];
    let n = write_len(&mut len, body.len());
    out.push(first);
    out.extend_from_slice(&len[..n]);
    out.extend_from_slice(body);
}

fn push_str(body: &mut Vec<u8>, s: &[u8]) {
    body.extend_from_slice(&(s.len() as u16).to_be_bytes());
    body.extend_from_slice(s);
}

/// The standard's meaning of a CONNACK return code (3.1.1 table 3.1).
fn connack_reason(rc: u8) -> String {
    let what = match rc {
        1 => "unacceptable protocol version",
        2 => "identifier rejected",
        3 => "server unavailable",
        4 => "bad user name or password",
        5 => "not authorized",
        _ => "unknown return code",
    };
    format!("CONNACK return code {rc} ({what})")
}

impl<'s> MqttCodec<'s> {
    pub fn new(spec: &'s FrameSpec, id: u64) -> Self {
        MqttCodec {
            spec,
            id,
            connacked: false,
            subacked: false,
        }
    }

    pub(crate) fn join_start(&mut self, rooms: &[u32], out: &mut Vec<u8>) {
        self.connacked = false;
        self.subacked = rooms.is_empty();
        let mut body = Vec::new();
        push_str(&mut body, b"MQTT");
        body.push(4); // protocol level: 3.1.1
        body.push(0x02); // clean session
        body.extend_from_slice(&self.spec.keepalive_s.to_be_bytes());
        push_str(&mut body, format!("blaster-{}", self.id).as_bytes());
        push_packet(out, CONNECT, &body);
        if rooms.is_empty() {
            return;
        }
        body.clear();
        body.extend_from_slice(&1u16.to_be_bytes()); // packet identifier
        for &room in rooms {
            push_str(&mut body, &self.spec.topic.to_vec(room));
            body.push(0); // QoS 0
        }
        push_packet(out, SUBSCRIBE, &body);
    }

    pub(crate) fn join_feed(&mut self, rooms: &[u32], input: &[u8], _out: &mut Vec<u8>) -> Join {
        let mut pos = 0;
        while !(self.connacked && self.subacked) {
            let rest = &input[pos..];
            let (first, body, end) = match packet(rest) {
                Ok(Some(p)) => p,
                Ok(None) => return Join::Pending { consumed: pos },
                Err(e) => return Join::Failed(JoinError::protocol(KIND, e, rest)),
            };
            let b = &rest[body..end];
            match first {
                CONNACK if !self.connacked && b.len() == 2 => {
                    if b[1] != 0 {
                        let reason = connack_reason(b[1]);
                        return Join::Failed(JoinError::refused(KIND, reason.as_bytes()));
                    }
                    self.connacked = true;
                }
                SUBACK if self.connacked && !self.subacked && b.len() == 2 + rooms.len() => {
                    if let Some(i) = b[2..].iter().position(|&c| c & 0x80 != 0) {
                        let topic = self.spec.topic.to_vec(rooms[i]);
                        let reason = format!(
                            "SUBACK return code 0x{:02x} (failure) for topic {}",
                            b[2 + i],
                            String::from_utf8_lossy(&topic)
                        );
                        return Join::Failed(JoinError::refused(KIND, reason.as_bytes()));
                    }
                    self.subacked = true;
                }
                _ => {
                    return Join::Failed(JoinError::protocol(
                        KIND,
                        "expected CONNACK then SUBACK",
                        rest,
                    ));
                }
            }
            pos += end;
        }
        Join::Joined { consumed: pos }
    }

    pub(crate) fn message_bytes_max(&self) -> usize {
        1 + 4 + 2 + self.spec.topic.len_max() + self.spec.frame_size
    }

    #[inline]
    pub(crate) fn encode_uplink(&mut self, stamps: &[FrameHeader], out: &mut [u8]) -> usize {
        let size = self.spec.frame_size;
        let mut at = 0;
        for s in stamps {
            let topic = self.spec.topic.len(s.room);
            out[at] = PUBLISH;
            at += 1;
            at += write_len(&mut out[at..], 2 + topic + size);
            out[at..at + 2].copy_from_slice(&(topic as u16).to_be_bytes());
            at += 2;
            at += self.spec.topic.render(s.room, &mut out[at..]);
            write_payload(s, size, &mut out[at..]);
            at += size;
        }
        at
    }

    #[inline]
    pub(crate) fn decode(&mut self, input: &mut [u8]) -> Down {
        let (first, body, end) = match packet(input) {
            Ok(Some(p)) => p,
            Ok(None) => return Down::Incomplete { consumed: 0 },
            Err(reason) => return Down::Invalid { reason },
        };
        let control = |control| Down::Control {
            consumed: end,
            control,
        };
        match first & 0xf0 {
            PUBLISH => {
                if first & 0x06 != 0 {
                    return Down::Invalid { reason: QOS };
                }
                let b = &input[body..end];
                if b.len() < 2 {
                    return Down::Invalid {
                        reason: BAD_PUBLISH,
                    };
                }
                let topic = usize::from(u16::from_be_bytes([b[0], b[1]]));
                if 2 + topic > b.len() {
                    return Down::Invalid {
                        reason: BAD_PUBLISH,
                    };
                }
                Down::Message {
                    consumed: end,
                    payload: body + 2 + topic..end,
                }
            }
            PINGRESP if first == PINGRESP => control(Control::Pong),
            SUBACK | UNSUBACK if first == SUBACK || first == UNSUBACK => {
                control(Control::Ack { receivers: None })
            }
            _ => Down::Invalid { reason: UNEXPECTED },
        }
    }

    pub(crate) fn reset(&mut self) {
        self.connacked = false;
        self.subacked = false;
    }

    pub(crate) fn encode_pong(&mut self, _ping: &[u8], _out: &mut [u8]) -> usize {
        0 // a broker never pings a client
    }

    pub(crate) fn encode_keepalive(&mut self, out: &mut [u8]) -> usize {
        out[..2].copy_from_slice(&[PINGREQ, 0]);
        2
    }

    pub(crate) fn encode_close(&mut self, _code: Option<u16>, _out: &mut [u8]) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{self, Event};
    use super::super::{FrameProto, JoinFailure, Role};
    use super::*;

    fn spec() -> FrameSpec {
        FrameSpec::new(FrameProtoKind::Mqtt, "room/{room}", "/r/{room}", "h", 40).unwrap()
    }

    #[test]
    fn join_pipelines_connect_and_one_subscribe_and_needs_both_acks() {
        let spec = spec();
        let server = [0x20, 2, 0, 0, 0x90, 4, 0, 1, 0, 0, 0xd0, 0];
        let got = testkit::join_splits(&spec, &[5, 600], &server);
        assert_eq!(got.outcome, Join::Joined { consumed: 10 });
        let mut connect = vec![0x10, 21, 0, 4, b'M', b'Q', b'T', b'T', 4, 2, 0, 60, 0, 9];
        connect.extend_from_slice(b"blaster-7");
        let mut sub = vec![0x82, 2 + 9 + 11, 0, 1, 0, 6];
        sub.extend_from_slice(b"room/5\0\0\x08room/600\0");
        assert_eq!(got.sent, [connect, sub].concat());
    }

    #[test]
    fn refused_connack_and_suback_failure_name_the_reason() {
        let spec = spec();
        let got = testkit::join_splits(&spec, &[5], &[0x20, 2, 0, 5]);
        let Join::Failed(e) = got.outcome else {
            panic!()
        };
        assert_eq!(e.kind, JoinFailure::Refused);
        assert_eq!(e.reason, "CONNACK return code 5 (not authorized)");
        let got = testkit::join_splits(&spec, &[5, 6], &[0x20, 2, 0, 0, 0x90, 4, 0, 1, 0, 0x80]);
        let Join::Failed(e) = got.outcome else {
            panic!()
        };
        assert_eq!(
            e.reason,
            "SUBACK return code 0x80 (failure) for topic room/6"
        );
        let got = testkit::join_splits(&spec, &[5], &[0x90, 3, 0, 1, 0]);
        assert!(matches!(&got.outcome, Join::Failed(e) if e.kind == JoinFailure::Protocol));
    }

    #[test]
    fn publishes_round_trip_through_the_decoder_with_controls_between() {
        let spec = spec();
        let stamps = testkit::stamps(&[1, 22, 4_000_000_000]);
        let up = testkit::uplink(&spec, &stamps);
        assert_eq!(
            &up[..10],
            &[0x30, 2 + 6 + 40, 0, 6, b'r', b'o', b'o', b'm', b'/', b'1']
        );
        // A broker relays the same PUBLISH packets; a PINGRESP and a SUBACK between.
        let mut stream = up[..50].to_vec();
        stream.extend_from_slice(&[0xd0, 0, 0x90, 3, 0, 2, 0]);
        stream.extend_from_slice(&up[50..]);
        let p = testkit::payloads(&spec, &stamps);
        let want = [
            Event::Message(p[0].clone()),
            Event::Pong,
            Event::Ack(None),
            Event::Message(p[1].clone()),
            Event::Message(p[2].clone()),
        ];
        testkit::check_decode_splits(&spec, Role::Both, &stream, &want);
    }

    #[test]
    fn long_remaining_lengths_and_bad_packets() {
        let spec = FrameSpec::new(FrameProtoKind::Mqtt, "t/{room}", "/{room}", "h", 300).unwrap();
        let stamps = testkit::stamps(&[9]);
        let up = testkit::uplink(&spec, &stamps);
        // 2 + 3 + 300 = 305 = 0xb1 0x02 in two length bytes.
        assert_eq!(&up[..3], &[0x30, 0xb1, 0x02]);
        let p = testkit::payloads(&spec, &stamps);
        testkit::check_decode_splits(&spec, Role::Both, &up, &[Event::Message(p[0].clone())]);
        for (bytes, reason) in [
            (&[0x30, 0xff, 0xff, 0xff, 0xff, 0][..], BAD_LENGTH),
            (&[0x30, 0xff, 0xff, 0x7f], OVERSIZE),
            (&[0x20, 2, 0, 0], UNEXPECTED),
            (&[0x32, 5, 0, 1, b'a', 0, 1], QOS),
            (&[0x30, 1, 0], BAD_PUBLISH),
            (&[0x30, 3, 0, 9, b'a'], BAD_PUBLISH),
        ] {
            assert_eq!(
                testkit::decode_all(&spec, Role::Both, bytes).invalid,
                Some(reason)
            );
        }
        let mut c = FrameProto::new(&spec, Role::Both, 1, 1);
        let mut out = [0u8; super::super::CONTROL_BYTES_MAX];
        assert_eq!(c.encode_keepalive(&mut out), 2);
        assert_eq!(&out[..2], &[0xc0, 0]);
        // The engine pings only gRPC connections: an MQTT member publishes every tick,
        // which the broker's keep-alive counts.
        assert_eq!(c.keepalive_ns(), None);
    }
}
