//! Frame protocol adapters (`--frame-proto blaster|nats|mqtt|ws|resp`): blaster's frame
//! stamp ([`crate::proto::frame::FrameHeader`]: room, member, sequence, intended send
//! instant) carried as the payload of a message of a real relay or pub/sub server's
//! own protocol. Sans-I/O like the framers: pure state machines fed bytes, writing
//! into caller-owned buffers; they never read a socket or a clock.
//!
//! An adapter has three parts, one per phase of a connection:
//!
//! 1. **Join** (the control plane): [`FrameProto::join_start`] writes what can be sent
//!    at once, then [`FrameProto::join_feed`] is fed the server's bytes and may write
//!    more, until [`Join::Joined`] (the bytes after `consumed` are already downlink
//!    bytes) or [`Join::Failed`] with the server's own reason (NATS `-ERR '...'`, an
//!    MQTT CONNACK return code or SUBACK failure, a WebSocket status other than 101, a
//!    Redis error reply). Joins happen once per connection, so they may write into a
//!    `Vec`; the engine times them into their own histogram.
//! 2. **Uplink**: [`FrameProto::encode_uplink`] writes one message per stamp (the M
//!    members of a connection: M messages in one write) into a caller buffer sized by
//!    [`FrameProto::uplink_bytes_max`]; each payload is the 32-byte stamp then zero
//!    padding to the frame size. No allocation.
//! 3. **Downlink**: [`FrameProto::decode`] finds the protocol's messages in the byte
//!    stream, like a framer's `feed`: it answers [`Down::Message`] with the payload's
//!    range in the input (the stamp decoder reads it), [`Down::Control`] for what the
//!    engine must answer or note (a ping, a close, an acknowledgement, an error), or
//!    [`Down::Incomplete`] having consumed what it could; the caller keeps the rest
//!    and feeds it again with the next bytes appended (the contract of
//!    [`crate::proto::Parsed`]). A message is only yielded whole and contiguous, so the
//!    receive region must hold one message ([`FrameProto::message_bytes_max`]).
//!
//! | `--frame-proto` | join                                          | message           | file         |
//! |-----------------|-----------------------------------------------|-------------------|--------------|
//! | `blaster`       | none (the built-in sink learns rooms from frames) | u32be length + frame | `blaster.rs` |
//! | `nats`          | INFO, CONNECT, SUB per room, PING/PONG         | PUB / MSG, HMSG   | `nats.rs`    |
//! | `mqtt`          | CONNECT/CONNACK, SUBSCRIBE/SUBACK (QoS 0)      | PUBLISH QoS 0     | `mqtt.rs`    |
//! | `ws`            | HTTP/1.1 upgrade to `--ws-path`, 101 + accept  | binary frame      | `ws.rs`      |
//! | `resp`          | SUBSCRIBE (subscriber), PING (publisher)       | PUBLISH / message | `resp.rs`    |
//! | `grpc`          | h2c preface, one bidi call per member (room in metadata) | gRPC message in DATA | `grpc.rs` |
//!
//! Redis pairs two connections: a connection in subscribed state may only
//! (un)subscribe and ping, so each engine connection of `resp` is a pair, a
//! [`Role::Subscriber`] socket that joins the rooms and decodes the relayed messages
//! and a [`Role::Publisher`] socket that sends the members' frames (its replies are the
//! receiver counts, [`Control::Ack`]). Every other adapter uses [`Role::Both`] on one
//! socket. See [`FrameProtoKind::sockets_per_connection`].
//!
//! Echo: whether a subscribed sender gets its own messages back is each protocol's
//! rule ([`FrameProtoKind::echo`]): the engine must count those frames as the sender's
//! own, not as foreign ones.

mod blaster;
pub mod grpc;
mod mqtt;
mod nats;
mod resp;
mod template;
#[cfg(test)]
pub(crate) mod testkit;
mod ws;

pub use blaster::BlasterCodec;
pub use grpc::{GrpcCodec, GrpcSpec};
pub use mqtt::MqttCodec;
pub use nats::NatsCodec;
pub use resp::RespCodec;
pub use template::{RoomTemplate, TemplateError};
pub use ws::WsCodec;

use crate::proto::LINE_BYTES_MAX;
use crate::proto::frame::{FRAME_BYTES_MAX, FrameHeader, HEADER_BYTES};
use std::fmt;
use std::ops::Range;
use std::str::FromStr;

/// Largest message payload a decoder accepts: a frame (stamp and padding) is at most
/// [`FRAME_BYTES_MAX`], so anything announcing more is not one of ours and is refused
/// before the receive region fills up waiting for it.
pub const PAYLOAD_BYTES_MAX: usize = FRAME_BYTES_MAX;
/// Largest protocol envelope around a payload (a NATS `MSG` line with its subject and
/// reply subject, a Redis array header with its channel): one line of a framer.
pub const ENVELOPE_BYTES_MAX: usize = LINE_BYTES_MAX;
/// Largest answer to a control message: a WebSocket pong echoes at most 125 bytes of
/// ping payload behind a masked client header of 6 bytes (RFC 6455 section 5.5).
pub const CONTROL_BYTES_MAX: usize = 6 + 125;
/// Most bytes a decoder leaves un-consumed: a whole message (a payload, an envelope
/// line, a NATS header block, the CRLF) or a fragmented WebSocket message. A receive
/// region this large never fills with kept bytes; a smaller one (sized from the frame
/// size) fills only when the peer sends messages larger than the run's frames.
pub const KEPT_BYTES_MAX: usize = PAYLOAD_BYTES_MAX + 2 * ENVELOPE_BYTES_MAX + 16;
/// Longest decimal room number: `u32::MAX` has ten digits.
const ROOM_DIGITS_MAX: usize = 10;

/// The `--frame-proto` choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameProtoKind {
    /// blaster's own length-prefixed frames, for the built-in sink.
    Blaster,
    /// NATS core protocol (nats-server).
    Nats,
    /// MQTT 3.1.1 at QoS 0 (mosquitto).
    Mqtt,
    /// WebSocket (RFC 6455) binary messages to a broadcast server.
    Ws,
    /// Redis pub/sub over RESP2.
    Resp,
    /// gRPC bidirectional streams over HTTP/2 (h2c), one per member.
    Grpc,
}

/// Whether a sender subscribed to its own room receives its own messages back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Echo {
    /// Never delivered back (blaster's sink without `--echo-to-sender`; NATS with
    /// `"echo":false` in CONNECT, which the adapter sends).
    Never,
    /// Always delivered back to a subscribed sender (MQTT 3.1.1 has no no-local
    /// option; Redis delivers to every subscriber of the channel, the sender's own
    /// subscriber socket included).
    Always,
    /// The server decides (a WebSocket broadcast server: `websockets.broadcast` to
    /// every other client, or to all); the engine learns it from what arrives.
    ServerDefined,
}

/// The `--frame-proto` names, for error messages.
const KIND_NAMES: &str = "blaster, nats, mqtt, ws, resp or grpc";

/// A bad `--frame-proto`, template or spec: one line for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("--frame-proto: expected {KIND_NAMES}, got {0:?}")]
    UnknownProto(String),
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error("--frame-size: must be between {HEADER_BYTES} and {FRAME_BYTES_MAX} bytes, got {0}")]
    FrameSize(usize),
}

impl FrameProtoKind {
    /// Sockets the engine opens per connection: two for `resp` (a subscriber and a
    /// publisher), one otherwise.
    pub fn sockets_per_connection(self) -> usize {
        match self {
            FrameProtoKind::Resp => 2,
            _ => 1,
        }
    }

    /// The protocol's echo rule, as this adapter speaks it.
    pub fn echo(self) -> Echo {
        match self {
            FrameProtoKind::Blaster => Echo::Never,
            FrameProtoKind::Nats => Echo::Never,
            FrameProtoKind::Mqtt | FrameProtoKind::Resp => Echo::Always,
            FrameProtoKind::Ws | FrameProtoKind::Grpc => Echo::ServerDefined,
        }
    }
}

impl fmt::Display for FrameProtoKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FrameProtoKind::Blaster => "blaster",
            FrameProtoKind::Nats => "nats",
            FrameProtoKind::Mqtt => "mqtt",
            FrameProtoKind::Ws => "ws",
            FrameProtoKind::Resp => "resp",
            FrameProtoKind::Grpc => "grpc",
        })
    }
}

impl FromStr for FrameProtoKind {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        Ok(match s {
            "blaster" => FrameProtoKind::Blaster,
            "nats" => FrameProtoKind::Nats,
            "mqtt" => FrameProtoKind::Mqtt,
            "ws" => FrameProtoKind::Ws,
            "resp" => FrameProtoKind::Resp,
            "grpc" => FrameProtoKind::Grpc,
            _ => return Err(SpecError::UnknownProto(s.to_string())),
        })
    }
}

/// What one run's adapters share (one per run; each connection's codec borrows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameSpec {
    pub kind: FrameProtoKind,
    /// Subject (NATS), topic (MQTT) or channel (Redis) of a room.
    pub topic: RoomTemplate,
    /// The WebSocket request path of a room (`--ws-path`).
    pub ws_path: RoomTemplate,
    /// The WebSocket `Host` header (the target's `host:port`).
    pub host: String,
    /// MQTT keep-alive in seconds (0: none). The engine sends
    /// [`FrameProto::encode_keepalive`] on a connection that sent nothing for this long.
    pub keepalive_s: u16,
    /// Bytes of each frame payload: the stamp and zero padding.
    pub frame_size: usize,
    /// `blaster` only: each connection joins with a join frame the sink acknowledges
    /// ([`crate::proto::frame::FLAG_JOIN`]), for rooms with listeners, which never
    /// send the first frame the sink would learn them from. The other protocols
    /// always join.
    pub join_frames: bool,
    /// `grpc` only: the method and the metadata of each member's call.
    pub grpc: Option<GrpcSpec>,
}

/// Default subject/topic/channel template (dots separate NATS tokens; fine in MQTT
/// topics and Redis channels too).
pub const TOPIC_DEFAULT: &str = "room.{room}";
/// Default `--ws-path`.
pub const WS_PATH_DEFAULT: &str = "/room/{room}";
/// Default MQTT keep-alive: a minute, as most clients.
pub const KEEPALIVE_S_DEFAULT: u16 = 60;

impl FrameSpec {
    /// Whether connections join before they are up (see [`FrameSpec::join_frames`]).
    pub fn joins(&self) -> bool {
        self.kind != FrameProtoKind::Blaster || self.join_frames
    }

    /// A validated spec: the templates must name `{room}`, the frame size hold a stamp.
    pub fn new(
        kind: FrameProtoKind,
        topic: &str,
        ws_path: &str,
        host: &str,
        frame_size: usize,
    ) -> Result<FrameSpec, SpecError> {
        if !(HEADER_BYTES..=FRAME_BYTES_MAX).contains(&frame_size) {
            return Err(SpecError::FrameSize(frame_size));
        }
        Ok(FrameSpec {
            kind,
            topic: RoomTemplate::parse("--frame-topic", topic)?,
            ws_path: RoomTemplate::parse_path("--ws-path", ws_path)?,
            host: host.to_string(),
            keepalive_s: KEEPALIVE_S_DEFAULT,
            frame_size,
            join_frames: false,
            grpc: None,
        })
    }
}

/// What a socket of a connection does (`resp` uses two sockets, see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Joins the rooms, sends and receives.
    Both,
    /// Joins the rooms and receives (Redis: SUBSCRIBE).
    Subscriber,
    /// Only sends (Redis: PUBLISH; its replies are receiver counts).
    Publisher,
}

/// Progress of a join exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Join {
    /// Not joined yet: `consumed` bytes were used; feed the rest again with more.
    Pending { consumed: usize },
    /// Joined after `consumed` bytes; any bytes after them are downlink bytes.
    Joined { consumed: usize },
    /// The join failed (the connection is of no further use).
    Failed(JoinError),
}

/// Why a join failed, by kind (counted per kind) with the server's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{proto} join {kind}: {reason}")]
pub struct JoinError {
    pub proto: FrameProtoKind,
    pub kind: JoinFailure,
    /// The server's words where it gave some (escaped, one line, truncated).
    pub reason: String,
}

/// Kinds of join failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinFailure {
    /// The server said no: an error reply, a refusing return code or status.
    Refused,
    /// The server's bytes are not the protocol (or not a valid answer to the join).
    Protocol,
    /// The server closed the connection before the join completed.
    Closed,
}

impl fmt::Display for JoinFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JoinFailure::Refused => "refused",
            JoinFailure::Protocol => "protocol error",
            JoinFailure::Closed => "closed",
        })
    }
}

impl JoinError {
    pub(crate) fn refused(proto: FrameProtoKind, said: &[u8]) -> JoinError {
        JoinError {
            proto,
            kind: JoinFailure::Refused,
            reason: crate::proto::escape_prefix(said, 200),
        }
    }

    pub(crate) fn protocol(proto: FrameProtoKind, what: &str, bytes: &[u8]) -> JoinError {
        JoinError {
            proto,
            kind: JoinFailure::Protocol,
            reason: format!("{what}: \"{}\"", crate::proto::escape_prefix(bytes, 64)),
        }
    }

    /// The server closed the connection during the join (a receive returned 0).
    pub fn closed(proto: FrameProtoKind) -> JoinError {
        JoinError {
            proto,
            kind: JoinFailure::Closed,
            reason: "the server closed the connection before the join completed".into(),
        }
    }
}

/// Outcome of feeding downlink bytes to a decoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Down {
    /// A message ended after `consumed` bytes (at least 1); its payload (stamp and
    /// padding) is `input[payload]`.
    Message {
        consumed: usize,
        payload: Range<usize>,
    },
    /// A control message: answer or note it, then drop `consumed` bytes and feed again.
    /// `consumed` may be 0 for a WebSocket control frame between the fragments of a
    /// message, which stay un-consumed until the message is whole.
    Control { consumed: usize, control: Control },
    /// A message ended after `consumed` bytes, gathered from several pieces into the
    /// adapter's own buffer: its payload is [`FrameProto::held`] (until the next call).
    Held { consumed: usize },
    /// No message ended; `consumed` bytes were used and need not be fed again.
    Incomplete { consumed: usize },
    /// The bytes are not the protocol (the connection is out of step: reopen it).
    Invalid { reason: &'static str },
}

/// Control messages a decoder reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// The server pings (NATS `PING`, WebSocket ping with `input[payload]`): answer
    /// with [`FrameProto::encode_pong`] given that payload.
    Ping { payload: Range<usize> },
    /// The server's answer to our keep-alive (NATS `PONG`, MQTT PINGRESP, WebSocket
    /// pong, Redis `pong`): nothing to send.
    Pong,
    /// An acknowledgement needing nothing: NATS `+OK` or `INFO`, an MQTT SUBACK, a
    /// Redis subscribe confirmation, or a Redis PUBLISH reply with its receiver count.
    Ack { receivers: Option<u64> },
    /// The server reports an error on a joined connection (NATS `-ERR`, a Redis error
    /// reply): its text is `input[text]`.
    Error { text: Range<usize> },
    /// The server closes (WebSocket close frame, with its status code if any): answer
    /// with [`FrameProto::encode_close`], then close the socket.
    Close { code: Option<u16> },
    /// The adapter has bytes to send now (HTTP/2: SETTINGS and PING ACKs,
    /// WINDOW_UPDATEs, frames a window held back): append them with
    /// [`FrameProto::take_reply`].
    Reply,
    /// A member's call ended or the connection is going away (gRPC): close the
    /// connection and join again; [`FrameProto::ended`] words it.
    Ended { what: Ended },
}

/// How a gRPC member's call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Trailers (or END_STREAM) on `stream`, with the grpc-status the adapter kept.
    Call { stream: u32 },
    /// RST_STREAM on `stream` with an HTTP/2 error code.
    Reset { stream: u32, code: u32 },
    /// GOAWAY with an HTTP/2 error code (ENHANCE_YOUR_CALM for too many pings).
    GoAway { code: u32 },
}

/// One socket's adapter, static dispatch as the framers' `AnyFramer`.
#[derive(Debug, Clone)]
pub enum FrameProto<'s> {
    Blaster(BlasterCodec<'s>),
    Nats(NatsCodec<'s>),
    Mqtt(MqttCodec<'s>),
    Ws(WsCodec<'s>),
    Resp(RespCodec<'s>),
    Grpc(GrpcCodec<'s>),
}

macro_rules! dispatch {
    ($self:expr, $c:ident => $e:expr) => {
        match $self {
            FrameProto::Grpc($c) => $e,
            FrameProto::Blaster($c) => $e,
            FrameProto::Nats($c) => $e,
            FrameProto::Mqtt($c) => $e,
            FrameProto::Ws($c) => $e,
            FrameProto::Resp($c) => $e,
        }
    };
}

impl<'s> FrameProto<'s> {
    /// The adapter of one socket. `id` names the connection where the protocol wants a
    /// name (MQTT client identifier: unique per run and socket, or the broker drops the
    /// older session); `seed` drives the WebSocket key and masks (deterministic runs).
    pub fn new(spec: &'s FrameSpec, role: Role, id: u64, seed: u64) -> FrameProto<'s> {
        match spec.kind {
            FrameProtoKind::Blaster => FrameProto::Blaster(BlasterCodec::new(spec)),
            FrameProtoKind::Nats => FrameProto::Nats(NatsCodec::new(spec)),
            FrameProtoKind::Mqtt => FrameProto::Mqtt(MqttCodec::new(spec, id)),
            FrameProtoKind::Ws => FrameProto::Ws(WsCodec::new(spec, seed)),
            FrameProtoKind::Resp => FrameProto::Resp(RespCodec::new(spec, role)),
            FrameProtoKind::Grpc => FrameProto::Grpc(GrpcCodec::new(spec)),
        }
    }

    /// Starts the join of `rooms` (distinct): appends what can be sent now to `out`
    /// (possibly nothing: NATS waits for the server's INFO).
    pub fn join_start(&mut self, rooms: &[u32], out: &mut Vec<u8>) {
        dispatch!(self, c => c.join_start(rooms, out))
    }

    /// Feeds the server's bytes to the join; appends anything to send to `out`. Call
    /// with the same `rooms` as [`FrameProto::join_start`]. A join that is already
    /// pending with nothing new to read is simply `Pending { consumed: 0 }`.
    pub fn join_feed(&mut self, rooms: &[u32], input: &[u8], out: &mut Vec<u8>) -> Join {
        dispatch!(self, c => c.join_feed(rooms, input, out))
    }

    /// Bytes one uplink message of the spec's frame size can take (the longest room
    /// number assumed): size the send buffer as `members x` this.
    pub fn message_bytes_max(&self) -> usize {
        dispatch!(self, c => c.message_bytes_max())
    }

    /// Send buffer for `members` frames in one write.
    pub fn uplink_bytes_max(&self, members: usize) -> usize {
        members * self.message_bytes_max()
    }

    /// Writes one message per stamp into `out` (at least
    /// [`FrameProto::uplink_bytes_max`] of `stamps.len()`): payload = the stamp, then
    /// zero padding to the frame size. Returns the bytes written. No allocation.
    #[inline]
    pub fn encode_uplink(&mut self, stamps: &[FrameHeader], out: &mut [u8]) -> usize {
        assert!(
            out.len() >= self.uplink_bytes_max(stamps.len()),
            "uplink buffer of {} bytes for {} frames",
            out.len(),
            stamps.len()
        );
        dispatch!(self, c => c.encode_uplink(stamps, out))
    }

    /// Finds the next downlink message in `input` (see [`Down`]). `input` is mutable
    /// because a fragmented WebSocket message is made contiguous in place, within the
    /// bytes it consumes.
    #[inline]
    pub fn decode(&mut self, input: &mut [u8]) -> Down {
        dispatch!(self, c => c.decode(input))
    }

    /// Forgets any partial downlink message (the connection was reopened; a new join
    /// follows).
    pub fn reset(&mut self) {
        dispatch!(self, c => c.reset())
    }

    /// Writes the answer to a [`Control::Ping`] whose payload is `ping` into `out`
    /// (at least [`CONTROL_BYTES_MAX`]); returns its length.
    pub fn encode_pong(&mut self, ping: &[u8], out: &mut [u8]) -> usize {
        dispatch!(self, c => c.encode_pong(ping, out))
    }

    /// Writes a keep-alive (MQTT PINGREQ, NATS `PING`, a WebSocket ping, Redis `PING`;
    /// nothing for blaster) into `out` (at least [`CONTROL_BYTES_MAX`]).
    pub fn encode_keepalive(&mut self, out: &mut [u8]) -> usize {
        dispatch!(self, c => c.encode_keepalive(out))
    }

    /// Writes the answer to a [`Control::Close`] (a WebSocket close echoing `code`;
    /// nothing for the others) into `out` (at least [`CONTROL_BYTES_MAX`]).
    pub fn encode_close(&mut self, code: Option<u16>, out: &mut [u8]) -> usize {
        dispatch!(self, c => c.encode_close(code, out))
    }

    /// Appends the bytes a [`Control::Reply`] announced to `out` (nothing for the
    /// adapters that never announce one).
    pub fn take_reply(&mut self, out: &mut Vec<u8>) {
        if let FrameProto::Grpc(c) = self {
            c.take_reply(out)
        }
    }

    /// The payload a [`Down::Held`] announced.
    pub fn held(&self) -> &[u8] {
        match self {
            FrameProto::Grpc(c) => c.held(),
            _ => &[],
        }
    }

    /// The words for a [`Control::Ended`].
    pub fn ended(&self, what: Ended) -> String {
        match self {
            FrameProto::Grpc(c) => c.ended(what),
            _ => grpc::ended_text(what, None, ""),
        }
    }

    /// gRPC: frames that waited for a flow-control window, frames not sent because
    /// too many waited, and waiting frames since written; zeros for the others.
    pub fn stalls(&self) -> grpc::Stalls {
        match self {
            FrameProto::Grpc(c) => c.stalls(),
            _ => grpc::Stalls::default(),
        }
    }

    /// gRPC: the connection went down; the frames waiting for a window are dropped
    /// and their count returned (0 for the others: nothing waits in them).
    pub fn drop_backlog(&mut self) -> u64 {
        match self {
            FrameProto::Grpc(c) => c.drop_backlog(),
            _ => 0,
        }
    }

    /// How long a connection may receive nothing before it sends a keep-alive
    /// ([`FrameProto::encode_keepalive`]; its answer is a [`Control::Pong`]): gRPC's
    /// `--h2-keepalive` PINGs. None for the others: their frames every tick keep the
    /// connection alive (MQTT's keep-alive counts the client's packets).
    pub fn keepalive_ns(&self) -> Option<u64> {
        match self {
            FrameProto::Grpc(c) => c.grpc().keepalive_ns,
            _ => None,
        }
    }
}

/// Writes `v` in decimal at the start of `out`; returns the digits written.
#[inline]
pub(crate) fn write_decimal(out: &mut [u8], v: u64) -> usize {
    let mut tmp = [0u8; 20];
    let mut n = 0;
    let mut v = v;
    loop {
        tmp[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in 0..n {
        out[i] = tmp[n - 1 - i];
    }
    n
}

/// Decimal digits of `v`.
#[inline]
pub(crate) fn decimal_len(v: u64) -> usize {
    let mut n = 1;
    let mut v = v / 10;
    while v > 0 {
        n += 1;
        v /= 10;
    }
    n
}

/// Parses an unsigned decimal field (no sign, no spaces, at most 19 digits).
pub(crate) fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |a, &d| a * 10 + u64::from(d - b'0')))
}

/// Writes the stamp and zero padding (one payload of `frame_size`) at `out[..]`.
#[inline]
pub(crate) fn write_payload(stamp: &FrameHeader, frame_size: usize, out: &mut [u8]) {
    stamp.encode(&mut out[..HEADER_BYTES]);
    out[HEADER_BYTES..frame_size].fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_round_trip_and_unknown_is_one_line() {
        for s in ["blaster", "nats", "mqtt", "ws", "resp", "grpc"] {
            let k: FrameProtoKind = s.parse().unwrap();
            assert_eq!(k.to_string(), s);
        }
        let e = "amqp".parse::<FrameProtoKind>().unwrap_err().to_string();
        assert_eq!(
            e,
            "--frame-proto: expected blaster, nats, mqtt, ws, resp or grpc, got \"amqp\""
        );
        assert!("NATS".parse::<FrameProtoKind>().is_err());
        assert!("".parse::<FrameProtoKind>().is_err());
    }

    #[test]
    fn only_resp_pairs_sockets_and_echo_rules_are_the_documented_ones() {
        use FrameProtoKind::*;
        let pairs: Vec<_> = [Blaster, Nats, Mqtt, Ws, Resp, Grpc]
            .iter()
            .map(|k| (k.sockets_per_connection(), k.echo()))
            .collect();
        assert_eq!(
            pairs,
            [
                (1, Echo::Never),
                (1, Echo::Never),
                (1, Echo::Always),
                (1, Echo::ServerDefined),
                (2, Echo::Always),
                (1, Echo::ServerDefined)
            ]
        );
    }

    #[test]
    fn spec_refuses_a_template_without_room_and_a_frame_too_small() {
        let ok = FrameSpec::new(FrameProtoKind::Nats, "a.{room}", "/r/{room}", "h:1", 64);
        assert!(ok.is_ok());
        let e = FrameSpec::new(FrameProtoKind::Nats, "a.b", "/r/{room}", "h:1", 64)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "--frame-topic: must contain {room}, got \"a.b\"");
        let e = FrameSpec::new(FrameProtoKind::Ws, "a.{room}", "/r", "h:1", 64)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "--ws-path: must contain {room}, got \"/r\"");
        let e = FrameSpec::new(FrameProtoKind::Ws, "a.{room}", "/r/{room}", "h:1", 31)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--frame-size: must be between 32 and 65536 bytes, got 31"
        );
    }

    #[test]
    fn one_adapter_per_socket_stays_small() {
        // A million connections each hold one beside their receive region: the
        // spec is borrowed, not copied; the WebSocket variant (expected accept,
        // generator, fragment cursor) is the largest.
        let size = std::mem::size_of::<FrameProto<'static>>();
        assert!(size <= 96, "{size}");
    }

    #[test]
    fn decimals_write_and_parse() {
        let mut b = [0u8; 20];
        for v in [0u64, 7, 10, 99, 4_294_967_295, u64::MAX] {
            let n = write_decimal(&mut b, v);
            assert_eq!(&b[..n], v.to_string().as_bytes());
            assert_eq!(decimal_len(v), n);
        }
        assert_eq!(parse_decimal(b"0042"), Some(42));
        assert_eq!(parse_decimal(b""), None);
        assert_eq!(parse_decimal(b"-1"), None);
        assert_eq!(parse_decimal(b"12345678901234567890"), None);
        assert_eq!(decimal_len(u64::from(u32::MAX)), ROOM_DIGITS_MAX);
    }

    /// Every adapter's spec, frames of `size`.
    fn specs(size: usize) -> Vec<FrameSpec> {
        use FrameProtoKind::*;
        [Blaster, Nats, Mqtt, Ws, Resp, Grpc]
            .into_iter()
            .map(|k| {
                let mut s = FrameSpec::new(k, TOPIC_DEFAULT, WS_PATH_DEFAULT, "h:1", size).unwrap();
                if k == Grpc {
                    s.grpc = Some(GrpcSpec {
                        path: "/blaster.Room/Join".into(),
                        metadata: grpc::metadata_default(),
                        scheme: "http",
                        keepalive_ns: None,
                    });
                }
                s
            })
            .collect()
    }

    #[test]
    fn every_decoder_reads_what_its_server_relays_split_at_every_byte() {
        for spec in specs(40) {
            let stamps = testkit::stamps(&[3, 3, 3]);
            let p = testkit::payloads(&spec, &stamps);
            let stream = testkit::relay(&spec, 3, &p, 3);
            let want = testkit::relayed_events(&spec, &p, 3);
            assert_eq!(
                want.len(),
                if matches!(spec.kind, FrameProtoKind::Ws | FrameProtoKind::Grpc) {
                    6
                } else {
                    3
                }
            );
            testkit::check_decode_splits(&spec, Role::Subscriber, &stream, &want);
        }
    }

    #[test]
    fn every_uplink_fits_its_advertised_size_and_writes_its_padding() {
        for size in [HEADER_BYTES, 125, 126, 1000, FRAME_BYTES_MAX] {
            for spec in specs(size) {
                let stamps = testkit::stamps(&[u32::MAX, 0, 7]);
                let c = FrameProto::new(&spec, Role::Both, 1, 1);
                let up = testkit::uplink(&spec, &stamps);
                assert!(up.len() <= c.uplink_bytes_max(3), "{} {size}", spec.kind);
                // Room u32::MAX has the longest topic: the bound is tight for it.
                let one = testkit::uplink(&spec, &stamps[..1]);
                // Exact for the text protocols; MQTT and WebSocket length fields
                // are counted at their widest.
                let max = c.message_bytes_max();
                match spec.kind {
                    FrameProtoKind::Mqtt | FrameProtoKind::Ws => {
                        assert!(
                            one.len() <= max && max - one.len() <= 8,
                            "{} {size}",
                            spec.kind
                        )
                    }
                    _ => assert_eq!(one.len(), max, "{} {size}", spec.kind),
                }
                // The buffer was 0xee: no 0xee byte survives in an unmasked payload.
                if spec.kind != FrameProtoKind::Ws {
                    assert!(!up.contains(&0xee), "{} {size}", spec.kind);
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn chunking_never_changes_what_any_decoder_yields(
            sizes in proptest::collection::vec(HEADER_BYTES..400usize, 0..6),
            room in proptest::prelude::any::<u32>(),
            fragments in 1usize..5,
            cuts in testkit::cuts(),
        ) {
            for spec in specs(HEADER_BYTES) {
                let p: Vec<Vec<u8>> = sizes
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8).collect())
                    .collect();
                let stream = testkit::relay(&spec, room, &p, fragments);
                let whole = testkit::decode_all(&spec, Role::Subscriber, &stream);
                proptest::prop_assert_eq!(&whole.events, &testkit::relayed_events(&spec, &p, fragments));
                proptest::prop_assert_eq!(whole.invalid, None);
                proptest::prop_assert_eq!(
                    testkit::decode_cuts(&spec, Role::Subscriber, &stream, &cuts),
                    whole
                );
            }
        }
    }
}
