//! The test matrix every frame adapter runs, and an engine stand-in that drives one:
//! bytes arrive in chunks; after `Message` or `Control` the consumed bytes are dropped
//! and the rest fed again at once, on `Incomplete` the un-consumed bytes are kept and
//! fed again with the next chunk appended, on `Invalid` the run stops. The contract is
//! asserted on every call: `consumed` never exceeds the input, a message consumes at
//! least one byte and its payload lies in the input, a control consuming nothing does
//! not repeat forever. Joins run the same way over the server's bytes.

use super::{Control, Down, FrameProto, FrameSpec, Join, Role};
use crate::proto::frame::FrameHeader;
use proptest::prelude::*;

/// What a decoder reported, with the bytes it pointed at copied out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    Message(Vec<u8>),
    Ping(Vec<u8>),
    Pong,
    Ack(Option<u64>),
    Error(Vec<u8>),
    Close(Option<u16>),
    /// What [`FrameProto::take_reply`] gave for a [`Control::Reply`].
    Reply(Vec<u8>),
    Ended(super::Ended),
}

/// What a run of a stream through a decoder gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub events: Vec<Event>,
    /// Bytes left un-consumed at the end of the stream (0 after `Invalid`).
    pub pending: usize,
    pub invalid: Option<&'static str>,
}

/// Controls in a row that consume nothing before the stand-in calls it a loop.
const ZERO_CONTROLS_MAX: usize = 100_000;

/// A decoder of `spec`/`role` ready for downlink bytes: a `grpc` one joined with one
/// member (stream 1) through [`grpc_server_join`], its send windows opened wide.
pub(crate) fn fresh(spec: &FrameSpec, role: Role) -> FrameProto<'_> {
    let mut c = FrameProto::new(spec, role, 7, 7);
    if spec.kind == super::FrameProtoKind::Grpc {
        let mut sent = Vec::new();
        c.join_start(&[3], &mut sent);
        let server = grpc_server_join(1, 1 << 30);
        let done = c.join_feed(&[3], &server, &mut sent);
        assert_eq!(
            done,
            Join::Joined {
                consumed: server.len()
            }
        );
    }
    c
}

pub(crate) use super::grpc::server_join_bytes as grpc_server_join;

/// A DATA frame on `stream` carrying `data`.
pub(crate) fn h2_data(s: &mut Vec<u8>, stream: u32, data: &[u8]) {
    let mut f = vec![0u8; 9 + data.len()];
    crate::proto::h2::frame::write_data(&mut f, stream, data, false).unwrap();
    s.extend_from_slice(&f);
}

/// The PING the gRPC relay puts between a message's pieces, and its ACK.
pub(crate) const GRPC_PING: [u8; 8] = *b"pingpong";
pub(crate) fn h2_ping(ack: bool) -> Vec<u8> {
    let mut p = vec![0u8; 17];
    crate::proto::h2::frame::write_ping(&mut p, GRPC_PING, ack).unwrap();
    p
}

/// Feeds `stream` to a fresh decoder of `spec`/`role`, chunk sizes from `next`.
pub(crate) fn decode_run(
    spec: &FrameSpec,
    role: Role,
    stream: &[u8],
    mut next: impl FnMut() -> usize,
) -> Decoded {
    let mut c = fresh(spec, role);
    let mut events = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        let take = next().max(1).min(stream.len() - pos);
        pending.extend_from_slice(&stream[pos..pos + take]);
        pos += take;
        let mut zero = 0;
        loop {
            let len = pending.len();
            let used = match c.decode(&mut pending) {
                Down::Message { consumed, payload } => {
                    assert!(
                        consumed >= 1 && consumed <= len,
                        "Message consumed {consumed} of {len}"
                    );
                    assert!(payload.start <= payload.end && payload.end <= consumed);
                    events.push(Event::Message(pending[payload].to_vec()));
                    consumed
                }
                Down::Held { consumed } => {
                    assert!(
                        consumed >= 1 && consumed <= len,
                        "Held consumed {consumed} of {len}"
                    );
                    events.push(Event::Message(c.held().to_vec()));
                    consumed
                }
                Down::Control { consumed, control } => {
                    assert!(consumed <= len, "Control consumed {consumed} of {len}");
                    events.push(match control {
                        Control::Ping { payload } => Event::Ping(pending[payload].to_vec()),
                        Control::Pong => Event::Pong,
                        Control::Ack { receivers } => Event::Ack(receivers),
                        Control::Error { text } => Event::Error(pending[text].to_vec()),
                        Control::Close { code } => Event::Close(code),
                        Control::Reply => {
                            let mut out = Vec::new();
                            c.take_reply(&mut out);
                            Event::Reply(out)
                        }
                        Control::Ended { what } => Event::Ended(what),
                    });
                    zero = if consumed == 0 { zero + 1 } else { 0 };
                    assert!(zero < ZERO_CONTROLS_MAX, "controls consuming nothing loop");
                    consumed
                }
                Down::Incomplete { consumed } => {
                    assert!(consumed <= len, "Incomplete consumed {consumed} of {len}");
                    pending.drain(..consumed);
                    assert!(
                        pending.len() <= super::KEPT_BYTES_MAX,
                        "{} kept",
                        pending.len()
                    );
                    break;
                }
                Down::Invalid { reason } => {
                    return Decoded {
                        events,
                        pending: 0,
                        invalid: Some(reason),
                    };
                }
            };
            pending.drain(..used);
            if pending.is_empty() {
                break;
            }
        }
    }
    Decoded {
        events,
        pending: pending.len(),
        invalid: None,
    }
}

/// The whole stream in one read.
pub(crate) fn decode_all(spec: &FrameSpec, role: Role, stream: &[u8]) -> Decoded {
    decode_run(spec, role, stream, || usize::MAX)
}

/// Chunks of the sizes in `cuts`, cycling.
pub(crate) fn decode_cuts(spec: &FrameSpec, role: Role, stream: &[u8], cuts: &[usize]) -> Decoded {
    let mut i = 0;
    decode_run(spec, role, stream, || {
        i += 1;
        cuts[(i - 1) % cuts.len()]
    })
}

/// The split matrix: `stream` must give exactly `want` (nothing pending, valid) read
/// whole, split in two at every byte, and in uniform chunks of every size up to 64.
pub(crate) fn check_decode_splits(spec: &FrameSpec, role: Role, stream: &[u8], want: &[Event]) {
    let ok = Decoded {
        events: want.to_vec(),
        pending: 0,
        invalid: None,
    };
    assert_eq!(decode_all(spec, role, stream), ok, "read whole");
    for at in 0..=stream.len() {
        let mut first = true;
        let got = decode_run(spec, role, stream, || {
            if std::mem::take(&mut first) {
                at
            } else {
                usize::MAX
            }
        });
        assert_eq!(got, ok, "split at {at}");
    }
    for chunk in 1..=stream.len().min(64) {
        assert_eq!(
            decode_cuts(spec, role, stream, &[chunk]),
            ok,
            "chunks of {chunk}"
        );
    }
}

/// A join driven over the server's bytes: what it ended with (`consumed` as an offset
/// in the whole server stream) and every byte it asked to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JoinRun {
    pub outcome: Join,
    pub sent: Vec<u8>,
}

fn join_run(
    spec: &FrameSpec,
    role: Role,
    rooms: &[u32],
    server: &[u8],
    mut next: impl FnMut() -> usize,
) -> JoinRun {
    let mut c = FrameProto::new(spec, role, 7, 7);
    let mut sent = Vec::new();
    c.join_start(rooms, &mut sent);
    let mut pending: Vec<u8> = Vec::new();
    let mut base = 0;
    let mut pos = 0;
    loop {
        match c.join_feed(rooms, &pending, &mut sent) {
            Join::Pending { consumed } => {
                assert!(consumed <= pending.len());
                pending.drain(..consumed);
                base += consumed;
            }
            Join::Joined { consumed } => {
                assert!(consumed <= pending.len());
                return JoinRun {
                    outcome: Join::Joined {
                        consumed: base + consumed,
                    },
                    sent,
                };
            }
            failed @ Join::Failed(_) => {
                return JoinRun {
                    outcome: failed,
                    sent,
                };
            }
        }
        if pos == server.len() {
            return JoinRun {
                outcome: Join::Pending { consumed: base },
                sent,
            };
        }
        let take = next().max(1).min(server.len() - pos);
        pending.extend_from_slice(&server[pos..pos + take]);
        pos += take;
    }
}

/// Runs the join of `rooms` (role `Both`, or the role `spec` needs) over `server`
/// whole, split at every byte and in chunks up to 16; all must agree. Returns the run.
pub(crate) fn join_splits(spec: &FrameSpec, rooms: &[u32], server: &[u8]) -> JoinRun {
    join_splits_as(spec, Role::Both, rooms, server)
}

pub(crate) fn join_splits_as(
    spec: &FrameSpec,
    role: Role,
    rooms: &[u32],
    server: &[u8],
) -> JoinRun {
    let whole = join_run(spec, role, rooms, server, || usize::MAX);
    for at in 0..=server.len() {
        let mut first = true;
        let got = join_run(spec, role, rooms, server, || {
            if std::mem::take(&mut first) {
                at.max(1)
            } else {
                usize::MAX
            }
        });
        assert_eq!(got, whole, "split at {at}");
    }
    for chunk in 1..=server.len().min(16) {
        assert_eq!(
            join_run(spec, role, rooms, server, || chunk),
            whole,
            "chunks of {chunk}"
        );
    }
    whole
}

/// Stamps of members 0.. in the given rooms.
pub(crate) fn stamps(rooms: &[u32]) -> Vec<FrameHeader> {
    rooms
        .iter()
        .enumerate()
        .map(|(i, &room)| FrameHeader {
            room,
            member: i as u16,
            flags: 0,
            entries: 0,
            seq: 1000 + i as u64,
            intended_ns: 33_000_000 * (i as u64 + 1) + 5,
        })
        .collect()
}

/// The payload each stamp must arrive as: the stamp, then zeros to the frame size.
pub(crate) fn payloads(spec: &FrameSpec, stamps: &[FrameHeader]) -> Vec<Vec<u8>> {
    stamps
        .iter()
        .map(|s| {
            let mut p = vec![0u8; spec.frame_size];
            s.encode(&mut p);
            p
        })
        .collect()
}

/// The uplink bytes of `stamps`, written into a buffer of exactly the advertised size
/// (filled with 0xee first, so padding must be written, not inherited).
pub(crate) fn uplink(spec: &FrameSpec, stamps: &[FrameHeader]) -> Vec<u8> {
    let mut c = fresh(spec, Role::Both);
    let mut out = vec![0xeeu8; c.uplink_bytes_max(stamps.len())];
    let n = c.encode_uplink(stamps, &mut out);
    out.truncate(n);
    out
}

/// Chunk sizes for property tests: mostly small, so splits land inside every field.
pub(crate) fn cuts() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(prop_oneof![4 => 1usize..8, 1 => 8usize..300], 1..24)
}

/// What a server relays to a subscriber for `payloads` published to `room`, in the
/// protocol of `spec` (WebSocket messages split into `fragments` frames each, with a
/// ping between the first two).
pub(crate) fn relay(
    spec: &FrameSpec,
    room: u32,
    payloads: &[Vec<u8>],
    fragments: usize,
) -> Vec<u8> {
    use super::FrameProtoKind::*;
    let topic = spec.topic.to_vec(room);
    let mut s = Vec::new();
    for p in payloads {
        match spec.kind {
            Blaster => {
                s.extend_from_slice(&(p.len() as u32).to_be_bytes());
                s.extend_from_slice(p);
            }
            Nats => {
                s.extend_from_slice(b"MSG ");
                s.extend_from_slice(&topic);
                s.extend_from_slice(format!(" 1 {}\r\n", p.len()).as_bytes());
                s.extend_from_slice(p);
                s.extend_from_slice(b"\r\n");
            }
            Mqtt => {
                let mut len = 2 + topic.len() + p.len();
                s.push(0x30);
                loop {
                    let b = (len % 128) as u8;
                    len /= 128;
                    s.push(if len > 0 { b | 0x80 } else { b });
                    if len == 0 {
                        break;
                    }
                }
                s.extend_from_slice(&(topic.len() as u16).to_be_bytes());
                s.extend_from_slice(&topic);
                s.extend_from_slice(p);
            }
            Ws => {
                let n = fragments.clamp(1, p.len().max(1));
                let step = p.len().div_ceil(n).max(1);
                let pieces: Vec<&[u8]> = if p.is_empty() {
                    vec![&p[..]]
                } else {
                    p.chunks(step).collect()
                };
                for (i, piece) in pieces.iter().enumerate() {
                    let op = if i == 0 { 2 } else { 0 };
                    let fin = if i + 1 == pieces.len() { 0x80 } else { 0 };
                    ws_frame(&mut s, fin | op, piece);
                    if i == 0 && pieces.len() > 1 {
                        ws_frame(&mut s, 0x89, b"ping");
                    }
                }
            }
            Grpc => {
                // The message in `fragments` DATA frames, a PING after the first.
                let mut m = vec![0u8];
                m.extend_from_slice(&(p.len() as u32).to_be_bytes());
                m.extend_from_slice(p);
                let n = fragments.clamp(1, m.len());
                let pieces: Vec<&[u8]> = m.chunks(m.len().div_ceil(n)).collect();
                for (i, piece) in pieces.iter().enumerate() {
                    h2_data(&mut s, 1, piece);
                    if i == 0 && pieces.len() > 1 {
                        s.extend_from_slice(&h2_ping(false));
                    }
                }
            }
            Resp => {
                s.extend_from_slice(b"*3\r\n$7\r\nmessage\r\n");
                s.extend_from_slice(format!("${}\r\n", topic.len()).as_bytes());
                s.extend_from_slice(&topic);
                s.extend_from_slice(format!("\r\n${}\r\n", p.len()).as_bytes());
                s.extend_from_slice(p);
                s.extend_from_slice(b"\r\n");
            }
        }
    }
    s
}

/// An unmasked server frame.
pub(crate) fn ws_frame(s: &mut Vec<u8>, first: u8, payload: &[u8]) {
    s.push(first);
    match payload.len() {
        n if n < 126 => s.push(n as u8),
        n if n <= 65535 => {
            s.push(126);
            s.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            s.push(127);
            s.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    s.extend_from_slice(payload);
}

/// The events [`relay`] must decode to.
pub(crate) fn relayed_events(
    spec: &FrameSpec,
    payloads: &[Vec<u8>],
    fragments: usize,
) -> Vec<Event> {
    let mut want = Vec::new();
    for p in payloads {
        if spec.kind == super::FrameProtoKind::Ws && fragments.clamp(1, p.len().max(1)) > 1 {
            want.push(Event::Ping(b"ping".to_vec()));
        }
        if spec.kind == super::FrameProtoKind::Grpc && fragments.clamp(1, p.len() + 5) > 1 {
            want.push(Event::Reply(h2_ping(true)));
        }
        want.push(Event::Message(p.clone()));
    }
    want
}
