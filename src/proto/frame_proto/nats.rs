//! `--frame-proto nats`: the NATS core client protocol (nats-server 2.x), text lines
//! ending in CRLF with binary payloads counted by length.
//!
//! Join: the server speaks first with `INFO {...}`; the client answers `CONNECT` with
//! `"verbose":false` (no `+OK` per command), `"pedantic":false`, `"echo":false` (a
//! publisher subscribed to its own room does not get its own messages back, as with
//! blaster's sink), then `SUB <subject> <sid>` per room (sid = the room's index + 1)
//! and a `PING`. The server handles a connection's commands in order, so its `PONG`
//! says every `SUB` before it was accepted: joined. An `-ERR '...'` before it
//! (`'Authorization Violation'`, `'Invalid Subject'`) is a refused join with that
//! text. A `MSG` before the `PONG` also proves the subscriptions took effect; the join
//! ends there and the `PONG` arrives as downlink [`Control::Pong`].
//!
//! Uplink: `PUB <subject> <len>\r\n<payload>\r\n` per frame.
//!
//! Downlink: `MSG <subject> <sid> [reply-to] <len>\r\n<payload>\r\n` and
//! `HMSG <subject> <sid> [reply-to] <header len> <total len>\r\n<headers><payload>\r\n`
//! (the payload is what follows the headers); `PING` (answer `PONG`), `PONG`, `+OK`,
//! `INFO` (asynchronous cluster updates) and `-ERR`. Operation names are matched
//! without regard to case, as the protocol says. A message stays un-consumed until
//! whole, then is yielded as one contiguous payload.

use super::{
    Control, Down, ENVELOPE_BYTES_MAX, FrameProtoKind, FrameSpec, Join, JoinError,
    PAYLOAD_BYTES_MAX, decimal_len, parse_decimal, write_decimal, write_payload,
};
use crate::proto::frame::FrameHeader;
use std::ops::Range;

const KIND: FrameProtoKind = FrameProtoKind::Nats;
/// What the adapter tells the server about itself. `headers` lets publishers that use
/// headers reach it (as `HMSG`); `no_responders` needs headers and is not used.
const CONNECT: &[u8] = b"CONNECT {\"verbose\":false,\"pedantic\":false,\"tls_required\":false,\
\"name\":\"blaster\",\"lang\":\"rust\",\"version\":\"0.1.0\",\"protocol\":1,\"echo\":false,\
\"headers\":true}\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JoinState {
    Info,
    Pong,
}

#[derive(Debug, Clone)]
pub struct NatsCodec<'s> {
    pub(crate) spec: &'s FrameSpec,
    join: JoinState,
}

/// One server line: `line` without its CRLF, `next` the offset just past it.
struct Line {
    end: usize,
    next: usize,
}

/// The next line of `input`: `Ok(None)` while incomplete, `Err` when too long.
fn next_line(input: &[u8]) -> Result<Option<Line>, ()> {
    let cap = input.len().min(ENVELOPE_BYTES_MAX);
    match input[..cap].iter().position(|&b| b == b'\n') {
        Some(i) => {
            let end = if i > 0 && input[i - 1] == b'\r' {
                i - 1
            } else {
                i
            };
            Ok(Some(Line { end, next: i + 1 }))
        }
        None if input.len() >= ENVELOPE_BYTES_MAX => Err(()),
        None => Ok(None),
    }
}

/// The operation word of a line and where its arguments start.
fn op(line: &[u8]) -> (&[u8], usize) {
    let n = line
        .iter()
        .position(|&b| b == b' ' || b == b'\t')
        .unwrap_or(line.len());
    (&line[..n], (n + 1).min(line.len()))
}

fn is(op: &[u8], name: &str) -> bool {
    op.eq_ignore_ascii_case(name.as_bytes())
}

/// The text of an `-ERR 'text'` line (within quotes when quoted), as a range of `line`.
fn err_text(line: &[u8], args: usize) -> Range<usize> {
    let t = &line[args..];
    if t.len() >= 2 && t[0] == b'\'' && t[t.len() - 1] == b'\'' {
        args + 1..line.len() - 1
    } else {
        args..line.len()
    }
}

const TOO_LONG: &str = "NATS line longer than 8 KiB";
const NOT_NATS: &str = "not a NATS server message";
const BAD_MSG: &str = "malformed NATS MSG/HMSG line";
const OVERSIZE: &str = "NATS message payload larger than 64 KiB";
const NO_CRLF: &str = "NATS payload not followed by CRLF";

impl<'s> NatsCodec<'s> {
    pub fn new(spec: &'s FrameSpec) -> Self {
        NatsCodec {
            spec,
            join: JoinState::Info,
        }
    }

    pub(crate) fn join_start(&mut self, _rooms: &[u32], _out: &mut Vec<u8>) {
        self.join = JoinState::Info;
    }

    pub(crate) fn join_feed(&mut self, rooms: &[u32], input: &[u8], out: &mut Vec<u8>) -> Join {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            let line = match next_line(rest) {
                Ok(Some(l)) => l,
                Ok(None) => return Join::Pending { consumed: pos },
                Err(()) => return Join::Failed(JoinError::protocol(KIND, TOO_LONG, rest)),
            };
            let text = &rest[..line.end];
            let (op, args) = op(text);
            if is(op, "-ERR") {
                return Join::Failed(JoinError::refused(KIND, &text[err_text(text, args)]));
            }
            match self.join {
                JoinState::Info if is(op, "INFO") => {
                    out.extend_from_slice(CONNECT);
                    for (i, &room) in rooms.iter().enumerate() {
                        out.extend_from_slice(b"SUB ");
                        out.extend_from_slice(&self.spec.topic.to_vec(room));
                        out.push(b' ');
                        out.extend_from_slice((i + 1).to_string().as_bytes());
                        out.extend_from_slice(b"\r\n");
                    }
                    out.extend_from_slice(b"PING\r\n");
                    self.join = JoinState::Pong;
                }
                JoinState::Info => {
                    return Join::Failed(JoinError::protocol(KIND, "expected INFO", text));
                }
                JoinState::Pong if is(op, "PONG") => {
                    return Join::Joined {
                        consumed: pos + line.next,
                    };
                }
                // The subscriptions are in place once a message arrives through them.
                JoinState::Pong if is(op, "MSG") || is(op, "HMSG") => {
                    return Join::Joined { consumed: pos };
                }
                JoinState::Pong if is(op, "PING") => out.extend_from_slice(b"PONG\r\n"),
                JoinState::Pong if is(op, "+OK") || is(op, "INFO") => {}
                JoinState::Pong => {
                    return Join::Failed(JoinError::protocol(KIND, NOT_NATS, text));
                }
            }
            pos += line.next;
        }
    }

    pub(crate) fn message_bytes_max(&self) -> usize {
        // PUB subject len\r\n payload \r\n
        4 + self.spec.topic.len_max()
            + 1
            + decimal_len(self.spec.frame_size as u64)
            + 2
            + self.spec.frame_size
            + 2
    }

    #[inline]
    pub(crate) fn encode_uplink(&mut self, stamps: &[FrameHeader], out: &mut [u8]) -> usize {
        let size = self.spec.frame_size;
        let mut at = 0;
        for s in stamps {
            out[at..at + 4].copy_from_slice(b"PUB ");
            at += 4;
            at += self.spec.topic.render(s.room, &mut out[at..]);
            out[at] = b' ';
            at += 1;
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
        let line = match next_line(input) {
            Ok(Some(l)) => l,
            Ok(None) => return Down::Incomplete { consumed: 0 },
            Err(()) => return Down::Invalid { reason: TOO_LONG },
        };
        let text = &input[..line.end];
        let (op, args) = op(text);
        let control = |control| Down::Control {
            consumed: line.next,
            control,
        };
        let headers = is(op, "HMSG");
        if !headers && !is(op, "MSG") {
            return if is(op, "PING") {
                control(Control::Ping { payload: 0..0 })
            } else if is(op, "PONG") {
                control(Control::Pong)
            } else if is(op, "+OK") || is(op, "INFO") {
                control(Control::Ack { receivers: None })
            } else if is(op, "-ERR") {
                control(Control::Error {
                    text: err_text(text, args),
                })
            } else {
                Down::Invalid { reason: NOT_NATS }
            };
        }
        // MSG: subject sid [reply] len; HMSG: subject sid [reply] hdr total.
        let mut fields = [&[][..]; 5];
        let mut n = 0;
        for f in text[args..]
            .split(|&b| b == b' ' || b == b'\t')
            .filter(|f| !f.is_empty())
        {
            if n == fields.len() {
                return Down::Invalid { reason: BAD_MSG };
            }
            fields[n] = f;
            n += 1;
        }
        let (hdr, total) = match (headers, n) {
            (false, 3 | 4) => (Some(0), parse_decimal(fields[n - 1])),
            (true, 4 | 5) => (parse_decimal(fields[n - 2]), parse_decimal(fields[n - 1])),
            _ => return Down::Invalid { reason: BAD_MSG },
        };
        let (Some(hdr), Some(total)) = (hdr, total) else {
            return Down::Invalid { reason: BAD_MSG };
        };
        if hdr > total {
            return Down::Invalid { reason: BAD_MSG };
        }
        if total - hdr > PAYLOAD_BYTES_MAX as u64 || hdr > ENVELOPE_BYTES_MAX as u64 {
            return Down::Invalid { reason: OVERSIZE };
        }
        let start = line.next + hdr as usize;
        let end = line.next + total as usize;
        if input.len() < end + 2 {
            return Down::Incomplete { consumed: 0 };
        }
        if &input[end..end + 2] != b"\r\n" {
            return Down::Invalid { reason: NO_CRLF };
        }
        Down::Message {
            consumed: end + 2,
            payload: start..end,
        }
    }

    pub(crate) fn reset(&mut self) {
        self.join = JoinState::Info;
    }

    pub(crate) fn encode_pong(&mut self, _ping: &[u8], out: &mut [u8]) -> usize {
        out[..6].copy_from_slice(b"PONG\r\n");
        6
    }

    pub(crate) fn encode_keepalive(&mut self, out: &mut [u8]) -> usize {
        out[..6].copy_from_slice(b"PING\r\n");
        6
    }

    pub(crate) fn encode_close(&mut self, _code: Option<u16>, _out: &mut [u8]) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{self, Event};
    use super::super::{FrameProto, Role};
    use super::*;

    fn spec() -> FrameSpec {
        FrameSpec::new(FrameProtoKind::Nats, "room.{room}", "/r/{room}", "h", 40).unwrap()
    }

    const INFO: &[u8] =
        b"INFO {\"server_id\":\"X\",\"version\":\"2.9.10\",\"max_payload\":1048576}\r\n";

    #[test]
    fn join_sends_connect_subs_and_ping_after_info_and_ends_at_pong() {
        let spec = spec();
        let mut c = FrameProto::new(&spec, Role::Both, 1, 1);
        let mut out = Vec::new();
        c.join_start(&[3, 12], &mut out);
        assert!(out.is_empty(), "NATS waits for INFO");
        let server = [INFO, b"PING\r\n+OK\r\nPONG\r\nMSG x 1 4\r\n"].concat();
        let got = testkit::join_splits(&spec, &[3, 12], &server);
        assert_eq!(
            got.outcome,
            Join::Joined {
                consumed: server.len() - 11
            }
        );
        let sent = String::from_utf8(got.sent).unwrap();
        assert!(
            sent.starts_with("CONNECT {\"verbose\":false,\"pedantic\":false"),
            "{sent}"
        );
        assert!(sent.contains("\"echo\":false"), "{sent}");
        assert!(
            sent.ends_with("\r\nSUB room.3 1\r\nSUB room.12 2\r\nPING\r\nPONG\r\n"),
            "{sent}"
        );
    }

    #[test]
    fn join_failure_carries_the_servers_text() {
        let spec = spec();
        let server = [INFO, b"-ERR 'Invalid Subject'\r\nPONG\r\n"].concat();
        let got = testkit::join_splits(&spec, &[1], &server);
        let Join::Failed(e) = got.outcome else {
            panic!("{:?}", got.outcome)
        };
        assert_eq!(e.kind, super::super::JoinFailure::Refused);
        assert_eq!(e.to_string(), "nats join refused: Invalid Subject");
        let got = testkit::join_splits(&spec, &[1], b"HTTP/1.1 400 Bad\r\n");
        assert!(
            matches!(&got.outcome, Join::Failed(e) if e.kind == super::super::JoinFailure::Protocol),
            "{:?}",
            got.outcome
        );
    }

    #[test]
    fn uplink_publishes_each_stamp_padded_and_the_decoder_reads_msg_and_hmsg() {
        let spec = spec();
        let stamps = testkit::stamps(&[3, 12, 4_000_000_000]);
        let up = testkit::uplink(&spec, &stamps);
        let head = b"PUB room.3 40\r\n";
        assert_eq!(&up[..head.len()], head);
        assert_eq!(&up[head.len() + 40..head.len() + 42], b"\r\n");
        // What a server relays: MSG / HMSG with the same payloads, controls between.
        let p = testkit::payloads(&spec, &stamps);
        let mut stream = Vec::new();
        stream.extend_from_slice(b"MSG room.3 1 40\r\n");
        stream.extend_from_slice(&p[0]);
        stream.extend_from_slice(
            b"\r\nPING\r\n+OK\r\nhmsg room.12 2 reply.x 12 52\r\nNATS/1.0\r\n\r\n",
        );
        stream.extend_from_slice(&p[1]);
        stream.extend_from_slice(b"\r\n-ERR 'Slow Consumer'\r\nMSG room.4000000000 9 40\r\n");
        stream.extend_from_slice(&p[2]);
        stream.extend_from_slice(b"\r\nPONG\r\nINFO {}\r\n");
        let want = vec![
            Event::Message(p[0].clone()),
            Event::Ping(vec![]),
            Event::Ack(None),
            Event::Message(p[1].clone()),
            Event::Error(b"Slow Consumer".to_vec()),
            Event::Message(p[2].clone()),
            Event::Pong,
            Event::Ack(None),
        ];
        testkit::check_decode_splits(&spec, Role::Both, &stream, &want);
    }

    #[test]
    fn bad_downlink_is_invalid() {
        let spec = spec();
        for (bytes, reason) in [
            (&b"HELLO\r\n"[..], NOT_NATS),
            (b"MSG a 1\r\n", BAD_MSG),
            (b"MSG a 1 x\r\n", BAD_MSG),
            (b"HMSG a 1 9 4\r\n", BAD_MSG),
            (b"MSG a 1 65537\r\n", OVERSIZE),
            (b"MSG a 1 2\r\nabXY", NO_CRLF),
        ] {
            let got = testkit::decode_all(&spec, Role::Both, bytes);
            assert_eq!(
                got.invalid,
                Some(reason),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let long = vec![b'a'; ENVELOPE_BYTES_MAX];
        assert_eq!(
            testkit::decode_all(&spec, Role::Both, &long).invalid,
            Some(TOO_LONG)
        );
    }
}
