//! `--frame-proto grpc`: frames as gRPC messages on long-lived bidirectional streams
//! over HTTP/2 with prior knowledge (h2c), seed 000's data plane: the M members of a
//! connection are M streams of one HTTP/2 connection, each a call to `--grpc
//! SERVICE/METHOD` carrying its room in request metadata (`--grpc-metadata 'room:
//! {room}'`, the default).
//!
//! Join: the connection preface and our SETTINGS, then one HEADERS per member (POST,
//! `content-type: application/grpc`, `te: trailers`, the metadata with the member's
//! room) sent at once. Joined once the server's SETTINGS arrived and every stream has
//! its response headers (a server sends them when it accepts the call: grpcio's
//! `context.send_initial_metadata`, grpc-js's `call.sendMetadata`, Go's
//! `stream.SendHeader`; blaster's sink at once), or at the first relayed message. A
//! call ended before that (trailers, RST_STREAM) is a refused join with the server's
//! `grpc-status` and `grpc-message`; an answer that is not HTTP/2 a protocol failure.
//!
//! Uplink: one DATA frame per frame (the 5-byte gRPC prefix, then the stamp and its
//! padding; split into DATA frames of 16 KiB when larger), on the member's stream,
//! within the server's flow-control windows. A frame that does not fit waits in the
//! connection's backlog (in order, behind any already waiting) until a WINDOW_UPDATE
//! or SETTINGS makes room ([`Control::Reply`]): a stall shows as arrival deviation,
//! never as loss, and is counted ([`GrpcCodec::stalls`]). The backlog holds
//! [`BACKLOG_TICKS`] ticks of the connection's members; beyond, a frame is not sent
//! and counted so.
//!
//! Downlink: DATA frames are read as a stream, not whole: each gRPC message wholly in
//! the input is yielded in place ([`Down::Message`]); one cut by the end of the input
//! or of its DATA frame is gathered in its stream's buffer and yielded from there
//! ([`Down::Held`]), so the receive region never has to hold a whole DATA frame.
//! Other frames are read whole and applied by the HTTP/2 [`Connection`] (HPACK,
//! windows, SETTINGS); what must be answered (SETTINGS and PING ACKs, the
//! WINDOW_UPDATEs the DATA made due) is queued and signalled by [`Control::Reply`]. A
//! call the server ends (trailers, RST_STREAM) or a GOAWAY is [`Control::Ended`]: the
//! member is gone, so the engine closes the connection and joins again.

use super::{Control, Down, Ended, FrameProtoKind, FrameSpec, Join, JoinError};
use crate::proto::frame::{FrameHeader, HEADER_BYTES};
use crate::proto::h2::frame::{self, END_STREAM, PADDED};
use crate::proto::h2::{
    Connection, Event, FRAME_HEADER_BYTES, FRAME_SIZE_MIN, FrameParsed, Kind, LocalSettings,
};
use std::collections::VecDeque;

const KIND: FrameProtoKind = FrameProtoKind::Grpc;
/// The gRPC message prefix: a compressed flag and a 4-byte big-endian length.
pub const PREFIX_BYTES: usize = 5;
/// DATA frames are cut at the smallest MAX_FRAME_SIZE, which every peer accepts.
const DATA_CHUNK: usize = FRAME_SIZE_MIN as usize;
/// Each stream's receive window: a megabyte, so a room's relays never wait for us.
const STREAM_WINDOW: u32 = 1 << 20;
/// The connection's receive window.
const CONNECTION_WINDOW: u32 = 1 << 26;
/// Longest response header block kept across CONTINUATIONs.
const HEADER_BLOCK_MAX: usize = 16 << 10;
/// Ticks of frames the uplink backlog holds per member before frames go unsent.
pub const BACKLOG_TICKS: usize = 64;

/// One `--grpc-metadata` entry: a lowercase name and a value in which `{room}` is the
/// member's room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub name: String,
    pub value: String,
}

impl Metadata {
    /// `name: value` as the flag takes it; gRPC metadata names are lowercase letters,
    /// digits, `-`, `_` and `.` (PROTOCOL-HTTP2.md), not reserved by HTTP/2 or gRPC.
    pub fn parse(s: &str) -> Result<Metadata, String> {
        let Some((name, value)) = s.split_once(':') else {
            return Err(format!(
                "expected NAME: VALUE such as 'room: {{room}}', got {s:?}"
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        let good = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b);
        if name.is_empty() || !name.bytes().all(good) {
            return Err(format!(
                "a metadata name is lowercase letters, digits, - _ and ., got {name:?}"
            ));
        }
        if name.starts_with("grpc-") || ["content-type", "te", "user-agent"].contains(&name) {
            return Err(format!("{name:?} is set by blaster (reserved by gRPC)"));
        }
        if value.bytes().any(|b| !(b' '..=b'~').contains(&b)) {
            return Err(format!(
                "a metadata value is printable ASCII, got {value:?} for {name:?}"
            ));
        }
        Ok(Metadata {
            name: name.to_string(),
            value: value.to_string(),
        })
    }

    /// The value for `room`.
    fn render(&self, room: u32) -> String {
        self.value.replace("{room}", &room.to_string())
    }
}

/// The default metadata: the room as `room: {room}`.
pub fn metadata_default() -> Vec<Metadata> {
    vec![Metadata {
        name: "room".into(),
        value: "{room}".into(),
    }]
}

/// What `--frame-proto grpc` needs beyond the common spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GrpcSpec {
    /// `/SERVICE/METHOD`.
    pub path: String,
    pub metadata: Vec<Metadata>,
    /// `:scheme`: `https` over TLS (ALPN `h2`), `http` for h2c.
    pub scheme: &'static str,
    /// `--h2-keepalive`: a PING on each connection that received nothing for this long.
    pub keepalive_ns: Option<u64>,
}

/// A member's DATA frame being read.
#[derive(Debug, Clone, Copy)]
struct InData {
    slot: usize,
    /// Data bytes of the frame not read yet (padding excluded).
    left: usize,
    /// Padding after them.
    pad: usize,
    end_stream: bool,
}

/// A joined connection's state (allocated at the join, dropped at a reset).
struct State {
    conn: Connection,
    /// Stream id per member slot (1, 3, 5, ...: slot = (id - 1) / 2).
    streams: Vec<u32>,
    /// Slots whose response headers arrived.
    answered: Vec<bool>,
    answered_count: usize,
    settings_seen: bool,
    /// Bytes to send: SETTINGS and PING ACKs, WINDOW_UPDATEs.
    reply: Vec<u8>,
    reply_signalled: bool,
    /// Frames waiting for window, in order: (slot, stamp).
    backlog: VecDeque<(u32, FrameHeader)>,
    backlog_max: usize,
    /// Per slot: a message gathered across DATA frames or receives (prefix included).
    partial: Vec<Vec<u8>>,
    /// The slot whose gathered message was just yielded (cleared at the next call).
    held: Option<usize>,
    data: Option<InData>,
    /// The last call's ending, for the engine's message.
    grpc_status: Option<u32>,
    grpc_message: String,
}

impl State {
    fn new(members: usize) -> State {
        let local = LocalSettings {
            initial_window_size: STREAM_WINDOW,
            connection_window: CONNECTION_WINDOW,
            max_frame_size: FRAME_SIZE_MIN,
            header_table_size: crate::proto::h2::HEADER_TABLE_DEFAULT,
            header_block_bytes_max: HEADER_BLOCK_MAX,
        };
        State {
            conn: Connection::new(local, members.max(1)),
            streams: Vec::with_capacity(members),
            answered: vec![false; members],
            answered_count: 0,
            settings_seen: false,
            reply: Vec::with_capacity(64),
            reply_signalled: false,
            backlog: VecDeque::new(),
            backlog_max: members * BACKLOG_TICKS,
            partial: vec![Vec::new(); members],
            held: None,
            data: None,
            grpc_status: None,
            grpc_message: String::new(),
        }
    }

    fn slot_of(&self, stream: u32) -> Option<usize> {
        let s = (stream as usize).checked_sub(1)? / 2;
        (stream % 2 == 1 && s < self.streams.len()).then_some(s)
    }

    /// Whether frame bytes of `need` fit the windows of `stream` and the connection.
    fn fits(&self, stream: u32, need: usize) -> bool {
        let need = need as i64;
        self.conn.stream_send_window(stream) >= need && self.conn.connection_send_window() >= need
    }

    fn queue<T>(&mut self, w: impl FnOnce(&mut [u8]) -> Result<usize, T>) {
        let at = self.reply.len();
        self.reply.resize(at + 32, 0);
        let n = w(&mut self.reply[at..]).ok().expect("32 bytes hold an ACK");
        self.reply.truncate(at + n);
    }

    /// Reads on in the DATA frame under way, from `rest` (which starts at `base` of the
    /// caller's input): `Ok(n)` having used `n` bytes to go on with (the frame ended,
    /// or a gathered message is not whole yet), or `Err` with what to answer.
    fn in_data(&mut self, rest: &[u8], base: usize) -> Result<usize, Down> {
        let mut d = self.data.expect("inside a DATA frame");
        if d.left == 0 {
            let n = d.pad.min(rest.len());
            d.pad -= n;
            if d.pad > 0 {
                self.data = Some(d);
                return Err(Down::Incomplete { consumed: base + n });
            }
            self.data = None;
            if d.end_stream {
                self.grpc_status = None;
                let stream = self.streams[d.slot];
                return Err(Down::Control {
                    consumed: base + n,
                    control: Control::Ended {
                        what: Ended::Call { stream },
                    },
                });
            }
            return Ok(n);
        }
        if rest.is_empty() {
            return Err(Down::Incomplete { consumed: base });
        }
        let partial = &mut self.partial[d.slot];
        if partial.is_empty() && rest.len() >= PREFIX_BYTES && d.left >= PREFIX_BYTES {
            // A message starts here: in place when it is wholly in the frame and the
            // input.
            let total = PREFIX_BYTES + prefix_len(rest)?;
            if total <= d.left && total <= rest.len() {
                d.left -= total;
                self.data = Some(d);
                return Err(Down::Message {
                    consumed: base + total,
                    payload: base + PREFIX_BYTES..base + total,
                });
            }
        }
        // Gathered: what the frame and the input hold of the message.
        let want = if partial.len() < PREFIX_BYTES {
            PREFIX_BYTES - partial.len()
        } else {
            PREFIX_BYTES + prefix_len(partial)? - partial.len()
        };
        let n = want.min(d.left).min(rest.len());
        partial.extend_from_slice(&rest[..n]);
        d.left -= n;
        self.data = Some(d);
        if partial.len() >= PREFIX_BYTES && partial.len() == PREFIX_BYTES + prefix_len(partial)? {
            self.held = Some(d.slot);
            return Err(Down::Held { consumed: base + n });
        }
        Ok(n)
    }
}

/// The length a gRPC message prefix announces, or the [`Down::Invalid`] it deserves
/// (blaster asks for no compression; a frame is at most [`super::PAYLOAD_BYTES_MAX`]).
fn prefix_len(p: &[u8]) -> Result<usize, Down> {
    if p[0] != 0 {
        return Err(Down::Invalid {
            reason: "a compressed gRPC message (blaster asks for none)",
        });
    }
    let len = u32::from_be_bytes([p[1], p[2], p[3], p[4]]) as usize;
    if len > super::PAYLOAD_BYTES_MAX {
        return Err(Down::Invalid {
            reason: "a gRPC message larger than a frame",
        });
    }
    Ok(len)
}

/// How many bytes one frame takes on the wire: DATA headers, the prefix, the payload.
fn message_wire_bytes(frame_size: usize) -> usize {
    let body = PREFIX_BYTES + frame_size;
    body.div_ceil(DATA_CHUNK) * FRAME_HEADER_BYTES + body
}

/// Writes `stamp`'s message on `stream` into `out` as DATA frames of at most
/// [`DATA_CHUNK`] (the caller checked the windows and the room); records the bytes
/// sent. Returns the bytes written. The stamp lies in the first frame (a chunk holds
/// far more than the prefix and the stamp); the rest is padding.
fn write_message(
    conn: &mut Connection,
    stream: u32,
    stamp: &FrameHeader,
    frame_size: usize,
    out: &mut [u8],
) -> usize {
    let body = PREFIX_BYTES + frame_size;
    let (mut at, mut written) = (0, 0);
    while written < body {
        let n = (body - written).min(DATA_CHUNK);
        out[at..at + FRAME_HEADER_BYTES].copy_from_slice(&data_header(n, stream));
        at += FRAME_HEADER_BYTES;
        let chunk = &mut out[at..at + n];
        if written == 0 {
            chunk[0] = 0;
            chunk[1..PREFIX_BYTES].copy_from_slice(&(frame_size as u32).to_be_bytes());
            stamp.encode(&mut chunk[PREFIX_BYTES..PREFIX_BYTES + HEADER_BYTES]);
            chunk[PREFIX_BYTES + HEADER_BYTES..].fill(0);
        } else {
            chunk.fill(0);
        }
        conn.consume_send(stream, n);
        at += n;
        written += n;
    }
    at
}

fn data_header(len: usize, stream: u32) -> [u8; FRAME_HEADER_BYTES] {
    let l = (len as u32).to_be_bytes();
    let s = stream.to_be_bytes();
    [
        l[1],
        l[2],
        l[3],
        Kind::Data.byte(),
        0,
        s[0],
        s[1],
        s[2],
        s[3],
    ]
}

/// What one step of reading the server's bytes gave.
enum Step {
    /// A frame applied; `consumed` bytes; maybe something to say.
    Applied {
        consumed: usize,
        control: Control,
    },
    /// A DATA frame starts here (its header not consumed).
    Data,
    Incomplete,
    Failed(&'static str),
}

/// The uplink's flow-control counts ([`GrpcCodec::stalls`]), the run's totals so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stalls {
    /// Frames that found no window and waited in the backlog.
    pub waited: u64,
    /// Frames not sent: the backlog was full.
    pub unsent: u64,
    /// Frames that waited and were since written (after a WINDOW_UPDATE or SETTINGS).
    pub released: u64,
}

pub struct GrpcCodec<'s> {
    pub(crate) spec: &'s FrameSpec,
    st: Option<Box<State>>,
    /// Frames that waited for a flow-control window, frames not sent because the
    /// backlog was full, and waiting frames since written (kept across reconnects:
    /// the run's totals).
    stalled: u64,
    unsent: u64,
    released: u64,
    /// PINGs sent (`--h2-keepalive`), the opaque data of the next.
    pings: u64,
}

/// A clone is a fresh adapter: not joined, its counts zero (a joined HTTP/2
/// connection's state belongs to its socket).
impl Clone for GrpcCodec<'_> {
    fn clone(&self) -> Self {
        GrpcCodec::new(self.spec)
    }
}

impl std::fmt::Debug for GrpcCodec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcCodec")
            .field("joined", &self.st.is_some())
            .field("stalled", &self.stalled)
            .field("unsent", &self.unsent)
            .finish()
    }
}

impl<'s> GrpcCodec<'s> {
    pub fn new(spec: &'s FrameSpec) -> GrpcCodec<'s> {
        GrpcCodec {
            spec,
            st: None,
            stalled: 0,
            unsent: 0,
            released: 0,
            pings: 0,
        }
    }

    pub(crate) fn grpc(&self) -> &GrpcSpec {
        self.spec
            .grpc
            .as_ref()
            .expect("--frame-proto grpc has a method")
    }

    pub(crate) fn join_start(&mut self, rooms: &[u32], out: &mut Vec<u8>) {
        let mut st = Box::new(State::new(rooms.len()));
        let at = out.len();
        out.resize(at + 128, 0);
        let n = st
            .conn
            .write_preface(&mut out[at..])
            .expect("128 bytes hold the preface");
        out.truncate(at + n);
        let g = self.grpc();
        let mut block = Vec::with_capacity(256);
        for &room in rooms {
            let id = st
                .conn
                .open_stream()
                .expect("a fresh connection opens its members' streams");
            st.streams.push(id);
            block.clear();
            crate::proto::h2::hpack::encode_fields(
                &mut block,
                &[
                    (":method", "POST"),
                    (":scheme", g.scheme),
                    (":path", &g.path),
                    (":authority", &self.spec.host),
                    ("content-type", "application/grpc"),
                    ("te", "trailers"),
                ],
            );
            for m in &g.metadata {
                crate::proto::h2::hpack::encode_fields(&mut block, &[(&m.name, &m.render(room))]);
            }
            let at = out.len();
            out.resize(at + frame::headers_len(block.len(), FRAME_SIZE_MIN), 0);
            frame::write_headers(&mut out[at..], id, &block, false, FRAME_SIZE_MIN)
                .expect("sized by headers_len");
        }
        self.st = Some(st);
    }

    pub(crate) fn join_feed(&mut self, _rooms: &[u32], input: &[u8], out: &mut Vec<u8>) -> Join {
        let mut pos = 0;
        loop {
            let st = self.st.as_mut().expect("join_start came first");
            if st.settings_seen && st.answered_count == st.streams.len() {
                self.take_reply(out);
                return Join::Joined { consumed: pos };
            }
            match self.step(&input[pos..]) {
                Step::Applied { consumed, control } => {
                    pos += consumed;
                    match control {
                        Control::Ended { what } => {
                            let st = self.st.as_ref().expect("joined");
                            let said = ended_text(what, st.grpc_status, &st.grpc_message);
                            return Join::Failed(JoinError::refused(KIND, said.as_bytes()));
                        }
                        Control::Reply => self.take_reply(out),
                        _ => {}
                    }
                }
                Step::Data => {
                    // A relayed message: the server took the members.
                    self.take_reply(out);
                    return Join::Joined { consumed: pos };
                }
                Step::Incomplete => return Join::Pending { consumed: pos },
                Step::Failed(why) => {
                    return Join::Failed(JoinError::protocol(
                        KIND,
                        &format!("not an HTTP/2 gRPC answer ({why})"),
                        &input[pos..],
                    ));
                }
            }
        }
    }

    /// Reads one non-DATA frame at the front of `input` and applies it.
    fn step(&mut self, input: &[u8]) -> Step {
        let st = self.st.as_mut().expect("joined");
        // A DATA header is enough: its payload is read as a stream by the decoder,
        // however much of it has arrived (so the join ends at the same byte whatever
        // the chunking).
        if input.len() >= FRAME_HEADER_BYTES && Kind::from_byte(input[3]) == Kind::Data {
            return Step::Data;
        }
        let f = match frame::parse_frame(input, FRAME_SIZE_MIN) {
            FrameParsed::Complete { frame, consumed } => (frame, consumed),
            FrameParsed::Incomplete => return Step::Incomplete,
            FrameParsed::Invalid(e) => return Step::Failed(e.reason),
        };
        let (frame, consumed) = f;
        let State {
            conn,
            grpc_status,
            grpc_message,
            ..
        } = &mut **st;
        let event = conn.receive(&frame, input, |_, name, value| {
            if name == b"grpc-message" {
                grpc_message.clear();
                grpc_message.push_str(&crate::proto::escape_prefix(value, 200));
            }
            if name == b"grpc-status" {
                *grpc_status = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok());
            }
        });
        let control = match event {
            Err(e) => return Step::Failed(e.reason),
            Ok(Event::Settings) => {
                st.settings_seen = true;
                st.queue(frame::write_settings_ack);
                Control::Reply
            }
            Ok(Event::Ping(opaque)) => {
                st.queue(|o| frame::write_ping(o, opaque, true));
                Control::Reply
            }
            Ok(Event::PingAck(_)) => Control::Pong,
            Ok(Event::WindowUpdate { .. }) if !st.backlog.is_empty() => Control::Reply,
            Ok(Event::Headers {
                stream,
                summary,
                end_stream,
                ..
            }) => {
                let slot = st.slot_of(stream);
                if end_stream {
                    st.grpc_status = summary
                        .grpc_status
                        .or(summary.status.map(crate::proto::grpc::code_of_http));
                    Control::Ended {
                        what: Ended::Call { stream },
                    }
                } else if summary.status.is_some_and(|s| s != 200) {
                    st.grpc_status = summary.status.map(crate::proto::grpc::code_of_http);
                    st.grpc_message = format!("HTTP status {}", summary.status.unwrap_or(0));
                    Control::Ended {
                        what: Ended::Call { stream },
                    }
                } else {
                    if let Some(s) = slot
                        && !st.answered[s]
                    {
                        st.answered[s] = true;
                        st.answered_count += 1;
                    }
                    Control::Ack { receivers: None }
                }
            }
            Ok(Event::Reset { stream, code }) => Control::Ended {
                what: Ended::Reset {
                    stream,
                    code: code.0,
                },
            },
            Ok(Event::StreamError { stream, code, .. }) => {
                st.queue(|o| frame::write_rst_stream(o, stream, code));
                Control::Ended {
                    what: Ended::Reset {
                        stream,
                        code: code.0,
                    },
                }
            }
            Ok(Event::GoAway { code, debug, .. }) => {
                st.grpc_message = crate::proto::escape_prefix(debug, 200);
                Control::Ended {
                    what: Ended::GoAway { code: code.0 },
                }
            }
            Ok(_) => Control::Ack { receivers: None },
        };
        Step::Applied { consumed, control }
    }

    pub(crate) fn message_bytes_max(&self) -> usize {
        message_wire_bytes(self.spec.frame_size)
    }

    pub(crate) fn encode_uplink(&mut self, stamps: &[FrameHeader], out: &mut [u8]) -> usize {
        let fs = self.spec.frame_size;
        let Some(st) = self.st.as_mut() else {
            return 0;
        };
        let m = st.streams.len();
        let need = PREFIX_BYTES + fs;
        let mut at = 0;
        for (i, stamp) in stamps.iter().enumerate() {
            let slot = i % m;
            let stream = st.streams[slot];
            if st.backlog.is_empty() && st.fits(stream, need) {
                at += write_message(&mut st.conn, stream, stamp, fs, &mut out[at..]);
            } else if st.backlog.len() < st.backlog_max {
                if st.backlog.capacity() == 0 {
                    st.backlog.reserve_exact(st.backlog_max);
                }
                st.backlog.push_back((slot as u32, *stamp));
                self.stalled += 1;
            } else {
                self.unsent += 1;
            }
        }
        at
    }

    /// Appends what must be sent now to `out`: the queued ACKs and WINDOW_UPDATEs,
    /// then the waiting frames the windows now take.
    pub(crate) fn take_reply(&mut self, out: &mut Vec<u8>) {
        let fs = self.spec.frame_size;
        let Some(st) = self.st.as_mut() else { return };
        out.extend_from_slice(&st.reply);
        st.reply.clear();
        st.reply_signalled = false;
        let need = PREFIX_BYTES + fs;
        while let Some(&(slot, stamp)) = st.backlog.front() {
            let stream = st.streams[slot as usize];
            if !st.fits(stream, need) {
                break;
            }
            st.backlog.pop_front();
            let at = out.len();
            out.resize(at + message_wire_bytes(fs), 0);
            let n = write_message(&mut st.conn, stream, &stamp, fs, &mut out[at..]);
            out.truncate(at + n);
            self.released += 1;
        }
    }

    /// The connection went down: the frames still waiting for a window never go
    /// (its next connection starts from the frames due then). Returns how many.
    pub(crate) fn drop_backlog(&mut self) -> u64 {
        let Some(st) = self.st.as_mut() else { return 0 };
        let n = st.backlog.len() as u64;
        st.backlog.clear();
        n
    }

    /// The message [`Down::Held`] announced.
    pub(crate) fn held(&self) -> &[u8] {
        let st = self.st.as_ref().expect("joined");
        let s = st.held.expect("a held message was announced");
        &st.partial[s][PREFIX_BYTES..]
    }

    pub(crate) fn decode(&mut self, input: &mut [u8]) -> Down {
        let Some(st) = self.st.as_mut() else {
            return Down::Invalid {
                reason: "gRPC bytes before the join",
            };
        };
        if let Some(s) = st.held.take() {
            st.partial[s].clear();
        }
        if !st.reply.is_empty() && !st.reply_signalled {
            st.reply_signalled = true;
            return Down::Control {
                consumed: 0,
                control: Control::Reply,
            };
        }
        let mut pos = 0;
        loop {
            let st = self.st.as_mut().expect("joined");
            let rest = &input[pos..];
            if st.data.is_none() {
                if rest.is_empty() {
                    return Down::Incomplete { consumed: pos };
                }
                match self.step(rest) {
                    Step::Applied { consumed, control } => {
                        return Down::Control {
                            consumed: pos + consumed,
                            control,
                        };
                    }
                    Step::Data => match self.data_header(rest) {
                        Ok(Some(n)) => {
                            pos += n;
                            let st = self.st.as_mut().expect("joined");
                            if !st.reply.is_empty() {
                                st.reply_signalled = true;
                                return Down::Control {
                                    consumed: pos,
                                    control: Control::Reply,
                                };
                            }
                            continue;
                        }
                        Ok(None) => return Down::Incomplete { consumed: pos },
                        Err(reason) => return Down::Invalid { reason },
                    },
                    Step::Incomplete => return Down::Incomplete { consumed: pos },
                    Step::Failed(reason) => return Down::Invalid { reason },
                }
            }
            match st.in_data(rest, pos) {
                Ok(used) => pos += used,
                Err(down) => return down,
            }
        }
    }

    /// Reads a DATA frame's header at the front of `input` (the pad length too when
    /// padded) and applies its flow control: `Ok(None)` until those bytes are there.
    fn data_header(&mut self, input: &[u8]) -> Result<Option<usize>, &'static str> {
        let st = self.st.as_mut().expect("joined");
        let h = &input[..FRAME_HEADER_BYTES];
        let length = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        let flags = h[4];
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & crate::proto::h2::WINDOW_MAX;
        if length > FRAME_SIZE_MIN as usize {
            return Err("frame larger than MAX_FRAME_SIZE");
        }
        if stream == 0 {
            return Err("DATA, HEADERS or CONTINUATION on stream 0");
        }
        let mut head = FRAME_HEADER_BYTES;
        let mut pad = 0;
        if flags & PADDED != 0 {
            let Some(&p) = input.get(FRAME_HEADER_BYTES) else {
                return Ok(None);
            };
            if length == 0 || p as usize > length - 1 {
                return Err("padding longer than the frame payload");
            }
            pad = p as usize;
            head += 1;
        }
        // The connection applies its windows (and may make WINDOW_UPDATEs due); the
        // payload is read here, so the frame it sees has none.
        let f = frame::Frame {
            kind: Kind::Data,
            flags,
            stream,
            length: length as u32,
            start: 0,
            end: 0,
        };
        match st.conn.receive(&f, &[], |_, _, _| {}) {
            Ok(Event::Data {
                connection_update,
                stream_update,
                open,
                ..
            }) => {
                if connection_update > 0 {
                    st.queue(|o| frame::write_window_update(o, 0, connection_update));
                }
                if stream_update > 0 {
                    st.queue(|o| frame::write_window_update(o, stream, stream_update));
                }
                let slot = st.slot_of(stream).filter(|_| open);
                let Some(slot) = slot else {
                    return Err("DATA on a stream that is not a member's");
                };
                st.data = Some(InData {
                    slot,
                    left: length - (head - FRAME_HEADER_BYTES) - pad,
                    pad,
                    end_stream: flags & END_STREAM != 0,
                });
                Ok(Some(head))
            }
            Ok(_) => Err("DATA after the server ended the stream"),
            Err(e) => Err(e.reason),
        }
    }

    pub(crate) fn reset(&mut self) {
        self.st = None;
    }

    /// PINGs are answered through [`Control::Reply`]: no pong of this kind.
    pub(crate) fn encode_pong(&mut self, _ping: &[u8], _out: &mut [u8]) -> usize {
        0
    }

    /// A PING (`--h2-keepalive`), its opaque data the count of PINGs sent before it;
    /// its ACK comes back as [`Control::Pong`].
    pub(crate) fn encode_keepalive(&mut self, out: &mut [u8]) -> usize {
        self.pings += 1;
        frame::write_ping(out, self.pings.to_be_bytes(), false).expect("17 bytes fit")
    }

    /// A GOAWAY needs no answer: the engine closes the socket.
    pub(crate) fn encode_close(&mut self, _code: Option<u16>, _out: &mut [u8]) -> usize {
        0
    }

    /// Frames that waited for a window, frames the full backlog left unsent, and
    /// waiting frames written since.
    pub fn stalls(&self) -> Stalls {
        Stalls {
            waited: self.stalled,
            unsent: self.unsent,
            released: self.released,
        }
    }
}

/// The engine's words for a [`Control::Ended`].
pub fn ended_text(what: Ended, grpc_status: Option<u32>, message: &str) -> String {
    match what {
        Ended::Call { stream } => match grpc_status {
            Some(code) => format!(
                "the server ended the call on stream {stream}: grpc-status {code} ({}){}{}",
                crate::proto::grpc::code_name(code),
                if message.is_empty() { "" } else { ": " },
                message
            ),
            None => format!("the server ended the call on stream {stream} without grpc-status"),
        },
        Ended::Reset { stream, code } => format!(
            "the server reset stream {stream} ({})",
            crate::proto::h2::ErrorCode(code)
        ),
        Ended::GoAway { code } => format!(
            "the server sent GOAWAY ({}){}{}",
            crate::proto::h2::ErrorCode(code),
            if message.is_empty() { "" } else { ": " },
            message
        ),
    }
}

impl GrpcCodec<'_> {
    /// [`ended_text`] with this connection's last grpc-status and message.
    pub fn ended(&self, what: Ended) -> String {
        match self.st.as_ref() {
            Some(st) => ended_text(what, st.grpc_status, &st.grpc_message),
            None => ended_text(what, None, ""),
        }
    }
}

/// For tests and fuzzing: a gRPC server's answer to a join of `members` streams: SETTINGS (INITIAL_WINDOW_SIZE
/// `window` for each stream), a WINDOW_UPDATE opening the connection's by 2^30, and
/// response headers (`:status 200`, `content-type: application/grpc`) on each stream.
#[doc(hidden)]
pub fn server_join_bytes(members: u32, window: u32) -> Vec<u8> {
    use crate::proto::h2::frame;
    let mut s = vec![0u8; 64];
    let n = frame::write_settings(&mut s, &[(0x4, window)]).expect("64 bytes hold one setting");
    s.truncate(n);
    let mut w = [0u8; 13];
    frame::write_window_update(&mut w, 0, 1 << 30).expect("13 bytes hold a WINDOW_UPDATE");
    s.extend_from_slice(&w);
    let mut block = Vec::new();
    crate::proto::h2::hpack::encode_fields(
        &mut block,
        &[(":status", "200"), ("content-type", "application/grpc")],
    );
    for m in 0..members {
        let mut h = vec![0u8; block.len() + 9];
        frame::write_headers(&mut h, 1 + 2 * m, &block, false, 16_384)
            .expect("the block and a header fit");
        s.extend_from_slice(&h);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::frame_proto::testkit::{self, Event, grpc_server_join, h2_data};
    use crate::proto::frame_proto::{FrameProto, Role};
    use crate::proto::h2::decoder::Decoder;
    use crate::proto::h2::{ErrorCode, PREFACE, frame as h2f};

    fn spec(size: usize, metadata: &[&str]) -> FrameSpec {
        let mut s = FrameSpec::new(KIND, "room.{room}", "/room/{room}", "h:1", size).unwrap();
        s.grpc = Some(GrpcSpec {
            path: "/blaster.Room/Join".into(),
            metadata: if metadata.is_empty() {
                metadata_default()
            } else {
                metadata
                    .iter()
                    .map(|m| Metadata::parse(m).unwrap())
                    .collect()
            },
            scheme: "http",
            keepalive_ns: None,
        });
        s
    }

    /// Every frame of `bytes` (after the preface): (kind, flags, stream, payload).
    fn frames(mut bytes: &[u8]) -> Vec<(Kind, u8, u32, Vec<u8>)> {
        if bytes.starts_with(PREFACE) {
            bytes = &bytes[PREFACE.len()..];
        }
        let mut v = Vec::new();
        while !bytes.is_empty() {
            match h2f::parse_frame(bytes, 1 << 20) {
                FrameParsed::Complete { frame, consumed } => {
                    let whole = &bytes[FRAME_HEADER_BYTES..consumed];
                    v.push((frame.kind, frame.flags, frame.stream, whole.to_vec()));
                    bytes = &bytes[consumed..];
                }
                other => panic!("{other:?}"),
            }
        }
        v
    }

    fn fields(block: &[u8]) -> Vec<(String, String)> {
        let mut d = Decoder::new(4096);
        let mut v = Vec::new();
        d.decode(block, |n, val| {
            v.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(val).into_owned(),
            ))
        })
        .unwrap();
        v
    }

    fn trailers(stream: u32, status: &str, message: &str) -> Vec<u8> {
        let mut block = Vec::new();
        crate::proto::h2::hpack::encode_fields(
            &mut block,
            &[
                (":status", "200"),
                ("content-type", "application/grpc"),
                ("grpc-status", status),
                ("grpc-message", message),
            ],
        );
        let mut h = vec![0u8; block.len() + 9];
        h2f::write_headers(&mut h, stream, &block, true, 16_384).unwrap();
        h
    }

    #[test]
    fn join_opens_one_call_per_member_with_its_room_and_waits_for_every_answer() {
        let spec = spec(64, &["room: r-{room}", "authorization: Bearer t"]);
        let rooms = [7, 4_000_000_000];
        let server = grpc_server_join(2, 1 << 20);
        let run = testkit::join_splits(&spec, &rooms, &server);
        assert_eq!(
            run.outcome,
            Join::Joined {
                consumed: server.len()
            }
        );
        let sent = frames(&run.sent);
        // SETTINGS, the connection's WINDOW_UPDATE, a HEADERS per member, then the
        // ACK of the server's SETTINGS.
        let kinds: Vec<_> = sent.iter().map(|f| (f.0, f.2)).collect();
        assert_eq!(
            kinds,
            [
                (Kind::Settings, 0),
                (Kind::WindowUpdate, 0),
                (Kind::Headers, 1),
                (Kind::Headers, 3),
                (Kind::Settings, 0)
            ]
        );
        assert_eq!(sent[4].1, h2f::ACK);
        for (f, room) in sent[2..4].iter().zip(rooms) {
            assert_eq!(f.1 & END_STREAM, 0, "a call stays open");
            let got = fields(&f.3);
            let want: Vec<(String, String)> = [
                (":method", "POST".to_string()),
                (":scheme", "http".into()),
                (":path", "/blaster.Room/Join".into()),
                (":authority", "h:1".into()),
                ("content-type", "application/grpc".into()),
                ("te", "trailers".into()),
                ("room", format!("r-{room}")),
                ("authorization", "Bearer t".into()),
            ]
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect();
            assert_eq!(got, want);
        }
        // SETTINGS and one member's headers are not a join.
        let headers = (server.len() - (9 + 6) - 13) / 2;
        let short = &server[..server.len() - headers];
        let run = testkit::join_splits(&spec, &rooms, short);
        assert!(matches!(run.outcome, Join::Pending { .. }), "{run:?}");
    }

    #[test]
    fn a_data_frame_ends_the_join_at_its_header_however_much_of_it_arrived() {
        // Found by the frame_grpc fuzz target: a relayed DATA frame whose padding is
        // longer than its payload failed the join when it arrived whole and joined
        // (the decoder then refusing the frame) when it arrived in pieces.
        let spec = spec(64, &[]);
        // Two members, one answered: the DATA is what ends the join.
        let mut server = grpc_server_join(1, 1 << 20);
        let joined = server.len();
        // DATA on stream 1, PADDED, pad length 200 in a 4-byte payload.
        server.extend_from_slice(&[0, 0, 4, 0, h2f::PADDED, 0, 0, 0, 1, 200, 0, 0, 0]);
        let run = testkit::join_splits(&spec, &[3, 4], &server);
        assert_eq!(run.outcome, Join::Joined { consumed: joined });
    }

    #[test]
    fn a_call_ended_at_the_join_is_refused_with_its_status_and_a_non_h2_answer_is_named() {
        let spec = spec(64, &[]);
        let mut server = grpc_server_join(0, 1 << 20);
        server.extend_from_slice(&trailers(1, "12", "Method not found!"));
        let run = testkit::join_splits(&spec, &[1], &server);
        let Join::Failed(e) = run.outcome else {
            panic!("{run:?}")
        };
        assert_eq!(
            e.to_string(),
            "grpc join refused: the server ended the call on stream 1: grpc-status 12 \
             (UNIMPLEMENTED): Method not found!"
        );
        // Not HTTP/2: refused at the first 9 bytes, quoting what arrived.
        let http1 = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        let mut c = FrameProto::new(&spec, Role::Both, 1, 1);
        let mut out = Vec::new();
        c.join_start(&[1], &mut out);
        let Join::Failed(e) = c.join_feed(&[1], http1, &mut out) else {
            panic!()
        };
        assert!(
            e.to_string()
                .starts_with("grpc join protocol error: not an HTTP/2 gRPC answer (frame larger"),
            "{e}"
        );
        assert!(e.to_string().contains("HTTP/1.1 400"), "{e}");
    }

    /// A codec joined with `members` streams against a server whose stream windows
    /// are `window` bytes.
    fn joined(spec: &FrameSpec, members: u32, window: u32) -> FrameProto<'_> {
        let mut c = FrameProto::new(spec, Role::Both, 1, 1);
        let rooms: Vec<u32> = (0..members).collect();
        let mut out = Vec::new();
        c.join_start(&rooms, &mut out);
        let server = grpc_server_join(members, window);
        let j = c.join_feed(&rooms, &server, &mut out);
        assert_eq!(
            j,
            Join::Joined {
                consumed: server.len()
            }
        );
        c
    }

    fn decode_all(c: &mut FrameProto<'_>, mut input: Vec<u8>) -> Vec<Event> {
        let mut ev = Vec::new();
        loop {
            let d = c.decode(&mut input);
            let used = match d {
                Down::Message { consumed, payload } => {
                    ev.push(Event::Message(input[payload].to_vec()));
                    consumed
                }
                Down::Held { consumed } => {
                    ev.push(Event::Message(c.held().to_vec()));
                    consumed
                }
                Down::Control { consumed, control } => {
                    ev.push(match control {
                        Control::Reply => {
                            let mut o = Vec::new();
                            c.take_reply(&mut o);
                            Event::Reply(o)
                        }
                        Control::Ended { what } => Event::Ended(what),
                        Control::Ack { receivers } => Event::Ack(receivers),
                        Control::Pong => Event::Pong,
                        other => panic!("{other:?}"),
                    });
                    consumed
                }
                Down::Incomplete { consumed } => {
                    assert_eq!(consumed, input.len(), "everything read");
                    return ev;
                }
                Down::Invalid { reason } => panic!("{reason}"),
            };
            input.drain(..used);
        }
    }

    #[test]
    fn frames_past_the_window_wait_in_order_and_go_when_it_opens() {
        let spec = spec(64, &[]);
        // Each message is 5 + 64 bytes of window: the 100-byte window takes one.
        let mut c = joined(&spec, 2, 100);
        let stamps = testkit::stamps(&[0, 1, 0, 1]);
        let mut out = vec![0u8; c.uplink_bytes_max(4)];
        let n = c.encode_uplink(&stamps, &mut out);
        let sent = frames(&out[..n]);
        assert_eq!(sent.len(), 2, "one per stream fits");
        assert_eq!((sent[0].2, sent[1].2), (1, 3));
        assert_eq!((c.stalls().waited, c.stalls().unsent), (2, 0));
        // Stream 1's window opens: its frame goes, stream 3's stays behind (order).
        let mut w = vec![0u8; 13];
        h2f::write_window_update(&mut w, 1, 100).unwrap();
        let ev = decode_all(&mut c, w);
        let Event::Reply(r) = &ev[0] else {
            panic!("{ev:?}")
        };
        let r = frames(r);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].2, 1);
        assert_eq!(c.stalls().released, 1, "the waiting frame written");
        assert_eq!(&r[0].3[5..37], &{
            let mut b = [0u8; 32];
            stamps[2].encode(&mut b);
            b
        });
        // New frames queue behind the waiting one, whatever the windows say.
        let n = c.encode_uplink(&stamps[..2], &mut out);
        assert_eq!(n, 0);
        assert_eq!((c.stalls().waited, c.stalls().unsent), (4, 0));
        let mut w = vec![0u8; 13];
        h2f::write_window_update(&mut w, 3, 1000).unwrap();
        let Event::Reply(r) = &decode_all(&mut c, w)[0] else {
            panic!()
        };
        let order: Vec<u32> = frames(r).iter().map(|f| f.2).collect();
        assert_eq!(
            order,
            [3],
            "stream 1's new frame waits for its window (62 of 69)"
        );
        let mut w = vec![0u8; 13];
        h2f::write_window_update(&mut w, 1, 1000).unwrap();
        let Event::Reply(r) = &decode_all(&mut c, w)[0] else {
            panic!()
        };
        let order: Vec<u32> = frames(r).iter().map(|f| f.2).collect();
        assert_eq!(order, [1, 3], "then both, in their order");
        // A full backlog leaves frames unsent, counted.
        let many = testkit::stamps(&vec![0; 2 * BACKLOG_TICKS + 200]);
        let mut out = vec![0u8; c.uplink_bytes_max(many.len())];
        let n = c.encode_uplink(&many, &mut out);
        let direct = frames(&out[..n]).len() as u64;
        let Stalls {
            waited: stalled,
            unsent,
            released,
        } = c.stalls();
        assert_eq!(released, 4, "each waiting frame counted once as it went");
        assert_eq!(stalled, 4 + 2 * BACKLOG_TICKS as u64, "the backlog filled");
        assert_eq!(
            unsent,
            many.len() as u64 - direct - 2 * BACKLOG_TICKS as u64
        );
        assert!(unsent > 0);
        // The connection goes down: what still waits is dropped, counted by the caller.
        assert_eq!(c.drop_backlog(), 2 * BACKLOG_TICKS as u64);
        assert_eq!(c.drop_backlog(), 0, "once");
    }

    #[test]
    fn padded_and_split_data_is_read_and_window_updates_come_when_half_is_used() {
        let spec = spec(64, &[]);
        let mut c = joined(&spec, 1, 1 << 20);
        let stamps = testkit::stamps(&vec![0; 9000]);
        let payloads = testkit::payloads(&spec, &stamps);
        let mut s = Vec::new();
        for p in &payloads {
            let mut m = vec![0u8];
            m.extend_from_slice(&64u32.to_be_bytes());
            m.extend_from_slice(p);
            // Padded: pad length 3, three zero bytes.
            let mut f = vec![0u8; 9];
            let len = 1 + m.len() + 3;
            f[..3].copy_from_slice(&(len as u32).to_be_bytes()[1..]);
            f[3] = 0;
            f[4] = PADDED;
            f[8] = 1;
            f.push(3);
            f.extend_from_slice(&m);
            f.extend_from_slice(&[0, 0, 0]);
            s.extend_from_slice(&f);
        }
        let ev = decode_all(&mut c, s);
        let msgs: Vec<_> = ev
            .iter()
            .filter(|e| matches!(e, Event::Message(_)))
            .collect();
        assert_eq!(msgs.len(), 9000);
        assert_eq!(msgs[8999], &Event::Message(payloads[8999].clone()));
        // 9000 x 73 bytes = 657,000: past half of the stream's 1 MiB window once.
        let updates: Vec<_> = ev
            .iter()
            .filter_map(|e| match e {
                Event::Reply(r) => Some(frames(r)),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(updates.len(), 1, "{updates:?}");
        assert_eq!((updates[0].0, updates[0].2), (Kind::WindowUpdate, 1));
        // Split into DATA frames of 3 bytes: every message comes out whole.
        let mut s = Vec::new();
        for p in &payloads[..20] {
            let mut m = vec![0u8];
            m.extend_from_slice(&64u32.to_be_bytes());
            m.extend_from_slice(p);
            for piece in m.chunks(3) {
                h2_data(&mut s, 1, piece);
            }
        }
        let ev = decode_all(&mut c, s);
        let want: Vec<Event> = payloads[..20].iter().cloned().map(Event::Message).collect();
        assert_eq!(ev, want);
    }

    #[test]
    fn resets_goaways_trailers_and_compressed_messages_end_or_fail() {
        let spec = spec(64, &[]);
        let mut c = joined(&spec, 2, 1 << 20);
        let mut r = vec![0u8; 13];
        h2f::write_rst_stream(&mut r, 3, ErrorCode::CANCEL).unwrap();
        let ev = decode_all(&mut c, r);
        assert_eq!(ev, [Event::Ended(Ended::Reset { stream: 3, code: 8 })]);
        assert_eq!(
            c.ended(Ended::Reset { stream: 3, code: 8 }),
            "the server reset stream 3 (CANCEL)"
        );
        let mut g = vec![0u8; 40];
        let n =
            h2f::write_goaway(&mut g, 3, ErrorCode::ENHANCE_YOUR_CALM, b"too_many_pings").unwrap();
        g.truncate(n);
        let ev = decode_all(&mut c, g);
        let what = Ended::GoAway { code: 0xb };
        assert_eq!(ev, [Event::Ended(what)]);
        assert_eq!(
            c.ended(what),
            "the server sent GOAWAY (ENHANCE_YOUR_CALM): too_many_pings"
        );
        let mut c = joined(&spec, 1, 1 << 20);
        let ev = decode_all(&mut c, trailers(1, "14", "draining"));
        let what = Ended::Call { stream: 1 };
        assert_eq!(ev, [Event::Ended(what)]);
        assert_eq!(
            c.ended(what),
            "the server ended the call on stream 1: grpc-status 14 (UNAVAILABLE): draining"
        );
        let mut c = joined(&spec, 1, 1 << 20);
        let mut s = Vec::new();
        h2_data(&mut s, 1, &[1, 0, 0, 0, 1, 9]);
        assert_eq!(
            c.decode(&mut s),
            Down::Invalid {
                reason: "a compressed gRPC message (blaster asks for none)"
            }
        );
        let mut c = joined(&spec, 1, 1 << 20);
        let mut s = Vec::new();
        h2_data(&mut s, 5, &[0, 0, 0, 0, 1, 9]);
        assert!(matches!(c.decode(&mut s), Down::Invalid { .. }));
    }

    #[test]
    fn metadata_is_checked_in_one_line() {
        assert_eq!(
            Metadata::parse(" room :  {room} ").unwrap(),
            Metadata {
                name: "room".into(),
                value: "{room}".into()
            }
        );
        for (bad, why) in [
            ("room", "expected NAME: VALUE"),
            ("Room: 1", "lowercase letters"),
            ("grpc-timeout: 1S", "reserved by gRPC"),
            ("te: x", "reserved by gRPC"),
            ("a: b\u{7}", "printable ASCII"),
        ] {
            let e = Metadata::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn large_frames_are_cut_into_data_frames_the_server_takes() {
        let spec = spec(40_000, &[]);
        let mut c = joined(&spec, 1, 1 << 20);
        let stamps = testkit::stamps(&[0]);
        let mut out = vec![0xeeu8; c.uplink_bytes_max(1)];
        let n = c.encode_uplink(&stamps, &mut out);
        assert_eq!(n, out.len(), "exact");
        let f = frames(&out[..n]);
        let sizes: Vec<usize> = f.iter().map(|f| f.3.len()).collect();
        assert_eq!(sizes, [16_384, 16_384, 40_005 - 32_768]);
        let body: Vec<u8> = f.iter().flat_map(|f| f.3.clone()).collect();
        assert_eq!(&body[5..], &testkit::payloads(&spec, &stamps)[0][..]);
        // And read back when relayed that way.
        let mut s = Vec::new();
        for f in &f {
            h2_data(&mut s, 1, &f.3);
        }
        let ev = decode_all(&mut c, s);
        assert_eq!(ev, [Event::Message(body[5..].to_vec())]);
    }
}
