//! `--frame-proto resp`: Redis pub/sub over RESP2.
//!
//! A connection that issued SUBSCRIBE is in subscribed state: Redis then refuses
//! every command but (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING, QUIT and RESET, so it
//! cannot PUBLISH. Each engine connection of `resp` is therefore a pair of sockets:
//!
//! - [`Role::Subscriber`]: joins with one `SUBSCRIBE room...` and is joined when a
//!   `subscribe` confirmation came for every room; decodes `message` arrays
//!   (`*3 $7 message $<channel> $<payload>`) into [`Down::Message`].
//! - [`Role::Publisher`]: joins with `PING` (answered `+PONG`, or refused with the
//!   server's reason, e.g. `-NOAUTH Authentication required.`); sends one
//!   `PUBLISH <channel> <payload>` per frame; each reply is the number of subscribers
//!   that received it ([`Control::Ack`] with `receivers`), which the engine may compare
//!   with the room's size.
//!
//! The engine opens both, joins both (the connection's join time is the later), sends
//! on the publisher and receives on the subscriber. Echo: Redis delivers a message to
//! every subscriber of the channel, so the sender's own subscriber socket, subscribed
//! to its room, gets its own frames back ([`super::Echo::Always`]).
//!
//! Replies are parsed whole (a message is yielded contiguous anyway): a `message`
//! array, subscribe/unsubscribe confirmations ([`Control::Ack`]), `pong` arrays and
//! `+PONG` ([`Control::Pong`]), integers (publish counts), other simple strings
//! (acknowledgements) and errors ([`Control::Error`]). Nested arrays, RESP3 types and
//! bulk strings longer than a frame are invalid here.

use super::{
    Control, Down, ENVELOPE_BYTES_MAX, FrameProtoKind, FrameSpec, Join, JoinError,
    PAYLOAD_BYTES_MAX, Role, decimal_len, parse_decimal, write_decimal, write_payload,
};
use crate::proto::frame::FrameHeader;
use std::ops::Range;

const KIND: FrameProtoKind = FrameProtoKind::Resp;
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

const NOT_RESP: &str = "expected a RESP2 reply (+ - : $ *)";
const NO_CRLF: &str = "RESP line or bulk string not ended by CRLF";
const BAD_NUMBER: &str = "malformed RESP length or integer";
const OVERSIZE: &str = "RESP bulk string larger than 64 KiB";
const TOO_LONG: &str = "RESP line longer than 8 KiB";
const UNEXPECTED: &str = "unexpected RESP reply on a pub/sub connection";

/// One element of a reply, its bytes as ranges of the input.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Elem {
    Simple(Range<usize>),
    Error(Range<usize>),
    Int(u64),
    Bulk(Option<Range<usize>>),
    /// An array header with its count (`None`: the null array).
    Array(Option<usize>),
}

/// Elements of a pub/sub array the decoder looks at (`pmessage` has four).
const ARRAY_MAX: usize = 4;

/// The element starting at `pos`: `Ok(Some((elem, end)))` (for an array, `end` is past
/// its header line only), `Ok(None)` while incomplete.
fn elem(input: &[u8], pos: usize) -> Result<Option<(Elem, usize)>, &'static str> {
    let rest = &input[pos..];
    let Some(&ty) = rest.first() else {
        return Ok(None);
    };
    if !matches!(ty, b'+' | b'-' | b':' | b'$' | b'*') {
        return Err(NOT_RESP);
    }
    let cap = rest.len().min(ENVELOPE_BYTES_MAX);
    let Some(lf) = rest[..cap].iter().position(|&b| b == b'\n') else {
        return if rest.len() >= ENVELOPE_BYTES_MAX {
            Err(TOO_LONG)
        } else {
            Ok(None)
        };
    };
    if lf == 0 || rest[lf - 1] != b'\r' {
        return Err(NO_CRLF);
    }
    let line = pos + 1..pos + lf - 1;
    let next = pos + lf + 1;
    let number = |r: Range<usize>| -> Result<Option<u64>, &'static str> {
        match &input[r.clone()] {
            b"-1" => Ok(None),
            s => parse_decimal(s).map(Some).ok_or(BAD_NUMBER),
        }
    };
    Ok(Some(match ty {
        b'+' => (Elem::Simple(line), next),
        b'-' => (Elem::Error(line), next),
        b':' => (Elem::Int(number(line)?.ok_or(BAD_NUMBER)?), next),
        b'*' => (Elem::Array(number(line)?.map(|n| n as usize)), next),
        _ => match number(line)? {
            None => (Elem::Bulk(None), next),
            Some(n) if n > PAYLOAD_BYTES_MAX as u64 => return Err(OVERSIZE),
            Some(n) => {
                let end = next + n as usize;
                if input.len() < end + 2 {
                    return Ok(None);
                }
                if &input[end..end + 2] != b"\r\n" {
                    return Err(NO_CRLF);
                }
                (Elem::Bulk(Some(next..end)), end + 2)
            }
        },
    }))
}

/// A whole reply at the start of `input`: its top element, up to [`ARRAY_MAX`]
/// elements of an array (no nesting), and its end.
type Reply = (Elem, [Option<Elem>; ARRAY_MAX], usize);

fn reply(input: &[u8]) -> Result<Option<Reply>, &'static str> {
    let Some((top, mut end)) = elem(input, 0)? else {
        return Ok(None);
    };
    let mut items: [Option<Elem>; ARRAY_MAX] = Default::default();
    if let Elem::Array(Some(n)) = top {
        if n > ARRAY_MAX {
            return Err(UNEXPECTED);
        }
        for item in items.iter_mut().take(n) {
            let Some((e, e_end)) = elem(input, end)? else {
                return Ok(None);
            };
            if matches!(e, Elem::Array(_)) {
                return Err(UNEXPECTED);
            }
            *item = Some(e);
            end = e_end;
        }
    }
    Ok(Some((top, items, end)))
}

#[derive(Debug, Clone)]
pub struct RespCodec<'s> {
    pub(crate) spec: &'s FrameSpec,
    role: Role,
    /// Subscribe confirmations still awaited in the join.
    awaited: u32,
}

fn bulk_is(input: &[u8], e: &Option<Elem>, word: &[u8]) -> bool {
    matches!(e, Some(Elem::Bulk(Some(r))) if &input[r.clone()] == word)
}

fn push_bulk(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(s.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(s);
    out.extend_from_slice(b"\r\n");
}

impl<'s> RespCodec<'s> {
    pub fn new(spec: &'s FrameSpec, role: Role) -> Self {
        RespCodec {
            spec,
            role,
            awaited: 0,
        }
    }

    fn subscribes(&self) -> bool {
        self.role != Role::Publisher
    }

    pub(crate) fn join_start(&mut self, rooms: &[u32], out: &mut Vec<u8>) {
        if !self.subscribes() || rooms.is_empty() {
            self.awaited = 0;
            out.extend_from_slice(PING);
            return;
        }
        self.awaited = rooms.len() as u32;
        out.push(b'*');
        out.extend_from_slice((rooms.len() + 1).to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        push_bulk(out, b"SUBSCRIBE");
        for &room in rooms {
            push_bulk(out, &self.spec.topic.to_vec(room));
        }
    }

    pub(crate) fn join_feed(&mut self, rooms: &[u32], input: &[u8], _out: &mut Vec<u8>) -> Join {
        let pinging = !self.subscribes() || rooms.is_empty();
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            let (top, items, end) = match reply(rest) {
                Ok(Some(r)) => r,
                Ok(None) => return Join::Pending { consumed: pos },
                Err(e) => return Join::Failed(JoinError::protocol(KIND, e, rest)),
            };
            match top {
                Elem::Error(r) => return Join::Failed(JoinError::refused(KIND, &rest[r])),
                Elem::Simple(r) if pinging && &rest[r.clone()] == b"PONG" => {
                    return Join::Joined {
                        consumed: pos + end,
                    };
                }
                Elem::Array(Some(3))
                    if !pinging && self.awaited > 0 && bulk_is(rest, &items[0], b"subscribe") =>
                {
                    self.awaited -= 1;
                    if self.awaited == 0 {
                        return Join::Joined {
                            consumed: pos + end,
                        };
                    }
                }
                _ => {
                    let what = if pinging {
                        "expected +PONG"
                    } else {
                        "expected a subscribe confirmation"
                    };
                    return Join::Failed(JoinError::protocol(KIND, what, rest));
                }
            }
            pos += end;
        }
    }

    pub(crate) fn message_bytes_max(&self) -> usize {
        let topic = self.spec.topic.len_max();
        let size = self.spec.frame_size;
        // *3 / $7 PUBLISH / $<topic> topic / $<size> payload
        4 + 13
            + (1 + decimal_len(topic as u64) + 2)
            + topic
            + 2
            + (1 + decimal_len(size as u64) + 2)
            + size
            + 2
    }

    #[inline]
    pub(crate) fn encode_uplink(&mut self, stamps: &[FrameHeader], out: &mut [u8]) -> usize {
        let size = self.spec.frame_size;
        let mut at = 0;
        for s in stamps {
            const HEAD: &[u8] = b"*3\r\n$7\r\nPUBLISH\r\n$";
            out[at..at + HEAD.len()].copy_from_slice(HEAD);
            at += HEAD.len();
            at += write_decimal(&mut out[at..], self.spec.topic.len(s.room) as u64);
            out[at..at + 2].copy_from_slice(b"\r\n");
            at += 2;
            at += self.spec.topic.render(s.room, &mut out[at..]);
            out[at..at + 3].copy_from_slice(b"\r\n$");
            at += 3;
            at += write_decimal(&mut out[at..], size as u64);
            out[at..at + 2].copy_from_slice(b"\r\n");
            at += 2;
            write_payload(s, size, &mut out[at..]);
            at += size;
            out[at..at + 2].copy_from_slice(b"\r\n");
            at += 2;
        }
        at
    }

    #[inline]
    pub(crate) fn decode(&mut self, input: &mut [u8]) -> Down {
        let (top, items, end) = match reply(input) {
            Ok(Some(r)) => r,
            Ok(None) => return Down::Incomplete { consumed: 0 },
            Err(reason) => return Down::Invalid { reason },
        };
        let control = |control| Down::Control {
            consumed: end,
            control,
        };
        match top {
            Elem::Array(Some(3)) if bulk_is(input, &items[0], b"message") => match &items[2] {
                Some(Elem::Bulk(Some(p))) => Down::Message {
                    consumed: end,
                    payload: p.clone(),
                },
                _ => Down::Invalid { reason: UNEXPECTED },
            },
            Elem::Array(Some(3))
                if bulk_is(input, &items[0], b"subscribe")
                    || bulk_is(input, &items[0], b"unsubscribe") =>
            {
                control(Control::Ack { receivers: None })
            }
            Elem::Array(Some(2)) if bulk_is(input, &items[0], b"pong") => control(Control::Pong),
            Elem::Simple(r) if &input[r.clone()] == b"PONG" => control(Control::Pong),
            Elem::Simple(_) => control(Control::Ack { receivers: None }),
            Elem::Int(n) => control(Control::Ack { receivers: Some(n) }),
            Elem::Error(text) => control(Control::Error { text }),
            _ => Down::Invalid { reason: UNEXPECTED },
        }
    }

    pub(crate) fn reset(&mut self) {
        self.awaited = 0;
    }

    pub(crate) fn encode_pong(&mut self, _ping: &[u8], _out: &mut [u8]) -> usize {
        0 // Redis never pings a client
    }

    pub(crate) fn encode_keepalive(&mut self, out: &mut [u8]) -> usize {
        out[..PING.len()].copy_from_slice(PING);
        PING.len()
    }

    pub(crate) fn encode_close(&mut self, _code: Option<u16>, _out: &mut [u8]) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{self, Event};
    use super::super::{FrameProto, JoinFailure};
    use super::*;

    fn spec() -> FrameSpec {
        FrameSpec::new(FrameProtoKind::Resp, "room.{room}", "/r/{room}", "h", 40).unwrap()
    }

    #[test]
    fn subscriber_joins_when_every_room_is_confirmed() {
        let spec = spec();
        let server = b"*3\r\n$9\r\nsubscribe\r\n$6\r\nroom.3\r\n:1\r\n\
*3\r\n$9\r\nsubscribe\r\n$7\r\nroom.12\r\n:2\r\n*3\r\n$7\r\nmessage\r\n";
        let got = testkit::join_splits_as(&spec, Role::Subscriber, &[3, 12], server);
        assert_eq!(
            got.outcome,
            Join::Joined {
                consumed: server.len() - 17
            }
        );
        assert_eq!(
            got.sent,
            b"*3\r\n$9\r\nSUBSCRIBE\r\n$6\r\nroom.3\r\n$7\r\nroom.12\r\n"
        );
    }

    #[test]
    fn publisher_joins_with_ping_and_errors_are_refusals() {
        let spec = spec();
        let got = testkit::join_splits_as(&spec, Role::Publisher, &[3], b"+PONG\r\n:1\r\n");
        assert_eq!(got.outcome, Join::Joined { consumed: 7 });
        assert_eq!(got.sent, PING);
        let got = testkit::join_splits_as(
            &spec,
            Role::Subscriber,
            &[3],
            b"-NOAUTH Authentication required.\r\n",
        );
        let Join::Failed(e) = got.outcome else {
            panic!()
        };
        assert_eq!(e.kind, JoinFailure::Refused);
        assert_eq!(
            e.to_string(),
            "resp join refused: NOAUTH Authentication required."
        );
        let got = testkit::join_splits_as(&spec, Role::Subscriber, &[3], b"+OK\r\n");
        assert!(matches!(&got.outcome, Join::Failed(e) if e.kind == JoinFailure::Protocol));
    }

    #[test]
    fn publishes_are_relayed_as_message_arrays() {
        let spec = spec();
        let stamps = testkit::stamps(&[3, 4_000_000_000]);
        let up = testkit::uplink(&spec, &stamps);
        assert!(up.starts_with(b"*3\r\n$7\r\nPUBLISH\r\n$6\r\nroom.3\r\n$40\r\n"));
        let p = testkit::payloads(&spec, &stamps);
        let mut stream = Vec::new();
        for (i, ch) in [&b"room.3"[..], b"room.4000000000"].iter().enumerate() {
            stream.extend_from_slice(b"*3\r\n$7\r\nmessage\r\n");
            stream.extend_from_slice(format!("${}\r\n", ch.len()).as_bytes());
            stream.extend_from_slice(ch);
            stream.extend_from_slice(b"\r\n$40\r\n");
            stream.extend_from_slice(&p[i]);
            stream.extend_from_slice(b"\r\n");
            if i == 0 {
                stream
                    .extend_from_slice(b":2\r\n*2\r\n$4\r\npong\r\n$0\r\n\r\n-ERR x\r\n+PONG\r\n");
                stream.extend_from_slice(b"*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:0\r\n");
            }
        }
        let want = [
            Event::Message(p[0].clone()),
            Event::Ack(Some(2)),
            Event::Pong,
            Event::Error(b"ERR x".to_vec()),
            Event::Pong,
            Event::Ack(None),
            Event::Message(p[1].clone()),
        ];
        testkit::check_decode_splits(&spec, Role::Subscriber, &stream, &want);
        // The advertised size holds the longest room's message.
        let c = FrameProto::new(&spec, Role::Publisher, 1, 1);
        let one = testkit::uplink(&spec, &stamps[1..]);
        assert!(
            one.len() <= c.message_bytes_max(),
            "{} > {}",
            one.len(),
            c.message_bytes_max()
        );
    }

    #[test]
    fn bad_replies_are_invalid() {
        let spec = spec();
        for (bytes, reason) in [
            (&b"%1\r\n"[..], NOT_RESP),
            (b"+OK\n", NO_CRLF),
            (b":x\r\n", BAD_NUMBER),
            (b"$65537\r\n", OVERSIZE),
            (b"$1\r\nab\r\n", NO_CRLF),
            (b"*5\r\n", UNEXPECTED),
            (b"*1\r\n*0\r\n", UNEXPECTED),
            (b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n:1\r\n", UNEXPECTED),
            (b"$3\r\nabc\r\n", UNEXPECTED),
        ] {
            let got = testkit::decode_all(&spec, Role::Subscriber, bytes);
            assert_eq!(
                got.invalid,
                Some(reason),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let long = [b"+".as_slice(), &vec![b'a'; ENVELOPE_BYTES_MAX]].concat();
        assert_eq!(
            testkit::decode_all(&spec, Role::Subscriber, &long).invalid,
            Some(TOO_LONG)
        );
    }
}
