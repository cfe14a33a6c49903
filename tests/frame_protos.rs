//! The frame adapters (src/proto/frame_proto/) against the real servers, before the
//! engine drives them: nats-server, mosquitto, redis-server and a Python `websockets`
//! broadcast server (tests/fixtures/ws/broadcast.py), each started on a free loopback
//! port with its configuration in a temporary directory and killed on drop. Plain std
//! sockets drive the codecs: two connections join room 7, one publishes stamped
//! frames of three members per write, the other must decode exactly those payloads,
//! in order; the sender then sees what the protocol's echo rule says; a join the
//! server refuses fails with the server's own reason. A server binary that is missing
//! fails the test and names the package (scripts/test.sh installs them).
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use blaster::proto::frame::FrameHeader;
use blaster::proto::frame_proto::{
    Control, Down, Echo, FrameProto, FrameProtoKind, FrameSpec, Join, JoinError, JoinFailure, Role,
    TOPIC_DEFAULT, WS_PATH_DEFAULT,
};
use common::servers::{mosquitto, nats, redis, ws_server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// What the engine stand-in saw on a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Message(Vec<u8>),
    Pong,
    Ack(Option<u64>),
    Error(String),
    Close(Option<u16>),
}

/// One socket driven by its adapter over a blocking `TcpStream` (reads time out after
/// 5 s, so a server that goes silent fails the test rather than hanging it).
struct Conn<'s> {
    stream: TcpStream,
    codec: FrameProto<'s>,
    kind: FrameProtoKind,
    /// Bytes received and not yet consumed.
    buf: Vec<u8>,
}

impl<'s> Conn<'s> {
    fn open(spec: &'s FrameSpec, role: Role, id: u64, port: u16) -> Conn<'s> {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Conn {
            stream,
            codec: FrameProto::new(spec, role, id, 1000 + id),
            kind: spec.kind,
            buf: Vec::new(),
        }
    }

    /// Reads more bytes; false when the server closed.
    fn read_more(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => false,
            Err(e) => panic!("{} read: {e}", self.kind),
        }
    }

    fn join(&mut self, rooms: &[u32]) -> Result<(), JoinError> {
        let mut out = Vec::new();
        self.codec.join_start(rooms, &mut out);
        self.stream.write_all(&out).unwrap();
        loop {
            out.clear();
            let step = self.codec.join_feed(rooms, &self.buf, &mut out);
            if !out.is_empty() {
                self.stream.write_all(&out).unwrap();
            }
            match step {
                Join::Pending { consumed } => {
                    self.buf.drain(..consumed);
                    if !self.read_more() {
                        return Err(JoinError::closed(self.kind));
                    }
                }
                Join::Joined { consumed } => {
                    self.buf.drain(..consumed);
                    return Ok(());
                }
                Join::Failed(e) => return Err(e),
            }
        }
    }

    /// One write carrying every stamp's message.
    fn publish(&mut self, stamps: &[FrameHeader]) {
        let mut out = vec![0u8; self.codec.uplink_bytes_max(stamps.len())];
        let n = self.codec.encode_uplink(stamps, &mut out);
        self.stream.write_all(&out[..n]).unwrap();
    }

    /// The next message or control; pings are answered here, as the engine will.
    fn next(&mut self) -> Ev {
        loop {
            match self.codec.decode(&mut self.buf) {
                Down::Message { consumed, payload } => {
                    let p = self.buf[payload].to_vec();
                    self.buf.drain(..consumed);
                    return Ev::Message(p);
                }
                Down::Held { consumed } => {
                    let p = self.codec.held().to_vec();
                    self.buf.drain(..consumed);
                    return Ev::Message(p);
                }
                Down::Control { consumed, control } => {
                    let ev = match control {
                        Control::Ping { payload } => {
                            let mut pong = [0u8; 256];
                            let n = self.codec.encode_pong(&self.buf[payload], &mut pong);
                            self.stream.write_all(&pong[..n]).unwrap();
                            None
                        }
                        Control::Pong => Some(Ev::Pong),
                        Control::Ack { receivers } => Some(Ev::Ack(receivers)),
                        Control::Error { text } => {
                            Some(Ev::Error(String::from_utf8_lossy(&self.buf[text]).into()))
                        }
                        Control::Close { code } => Some(Ev::Close(code)),
                        Control::Reply => {
                            let mut out = Vec::new();
                            self.codec.take_reply(&mut out);
                            self.stream.write_all(&out).unwrap();
                            None
                        }
                        Control::Ended { what } => {
                            panic!("{}: {}", self.kind, self.codec.ended(what))
                        }
                    };
                    self.buf.drain(..consumed);
                    if let Some(ev) = ev {
                        return ev;
                    }
                }
                Down::Incomplete { consumed } => {
                    self.buf.drain(..consumed);
                    assert!(self.read_more(), "{}: the server closed", self.kind);
                }
                Down::Invalid { reason } => panic!("{}: {reason}", self.kind),
            }
        }
    }

    /// Sends a keep-alive and reads up to its answer: the server handles a
    /// connection's input in order, so whatever it relayed to this connection before
    /// has arrived by then. Returns what came before the answer.
    fn barrier(&mut self) -> Vec<Ev> {
        let mut ka = [0u8; 256];
        let n = self.codec.encode_keepalive(&mut ka);
        self.stream.write_all(&ka[..n]).unwrap();
        let mut seen = Vec::new();
        loop {
            match self.next() {
                Ev::Pong => return seen,
                ev => seen.push(ev),
            }
        }
    }
}

const ROOM: u32 = 7;
const MEMBERS: u16 = 3;
const TICKS: u64 = 4;

fn stamp(member: u16, k: u64) -> FrameHeader {
    FrameHeader {
        room: ROOM,
        member,
        flags: 0,
        entries: 0,
        seq: k,
        intended_ns: 50_000_000 * k + u64::from(member) * 1_000,
    }
}

fn payload(spec: &FrameSpec, s: &FrameHeader) -> Vec<u8> {
    let mut p = vec![0u8; spec.frame_size];
    s.encode(&mut p);
    p
}

fn spec(kind: FrameProtoKind, topic: &str, ws_path: &str, port: u16) -> FrameSpec {
    FrameSpec::new(kind, topic, ws_path, &format!("127.0.0.1:{port}"), 100).unwrap()
}

/// Two connections join room 7; B publishes TICKS writes of MEMBERS frames each; A
/// must decode exactly those payloads in order; B sees its own frames back as the
/// protocol's echo rule says (Redis: B publishes on a publisher socket, whose replies
/// count the one subscriber, A).
fn relay_check(kind: FrameProtoKind, port: u16) {
    let spec = spec(kind, TOPIC_DEFAULT, WS_PATH_DEFAULT, port);
    let (sub, publ) = if kind == FrameProtoKind::Resp {
        (Role::Subscriber, Role::Publisher)
    } else {
        (Role::Both, Role::Both)
    };
    let mut a = Conn::open(&spec, sub, 1, port);
    a.join(&[ROOM]).unwrap_or_else(|e| panic!("{e}"));
    let mut b = Conn::open(&spec, publ, 2, port);
    b.join(&[ROOM]).unwrap_or_else(|e| panic!("{e}"));
    let mut want = Vec::new();
    for k in 0..TICKS {
        let stamps: Vec<_> = (0..MEMBERS).map(|m| stamp(m, k)).collect();
        b.publish(&stamps);
        want.extend(stamps.iter().map(|s| payload(&spec, s)));
    }
    for (i, w) in want.iter().enumerate() {
        let got = a.next();
        assert_eq!(got, Ev::Message(w.clone()), "{kind} message {i}");
        let Ev::Message(p) = got else { unreachable!() };
        let h = FrameHeader::decode(&p).unwrap();
        assert_eq!(h, stamp(i as u16 % MEMBERS, i as u64 / u64::from(MEMBERS)));
    }
    assert_eq!(a.barrier(), [], "{kind}: A got more than was published");
    let back = b.barrier();
    let n = want.len();
    match (kind, kind.echo()) {
        (FrameProtoKind::Resp, _) => assert_eq!(back, vec![Ev::Ack(Some(1)); n], "{kind}"),
        (_, Echo::Always) => {
            assert_eq!(
                back,
                want.into_iter().map(Ev::Message).collect::<Vec<_>>(),
                "{kind}"
            )
        }
        // NATS: echo off in CONNECT; the test's WebSocket server relays to the others.
        (_, Echo::Never | Echo::ServerDefined) => assert_eq!(back, [], "{kind}"),
    }
}

fn refused(kind: FrameProtoKind, topic: &str, ws_path: &str, role: Role, port: u16) -> JoinError {
    let spec = spec(kind, topic, ws_path, port);
    let mut c = Conn::open(&spec, role, 3, port);
    let e = c.join(&[ROOM]).expect_err("the join must fail");
    assert!(!e.to_string().contains('\n'), "{e}");
    e
}

#[test]
fn nats_relays_stamped_frames_without_echo() {
    let (_s, port) = nats(&[]);
    relay_check(FrameProtoKind::Nats, port);
}

#[test]
fn nats_bad_subject_is_refused_with_the_servers_reason() {
    let (_s, port) = nats(&[]);
    let e = refused(
        FrameProtoKind::Nats,
        "bad..{room}",
        WS_PATH_DEFAULT,
        Role::Both,
        port,
    );
    assert_eq!(e.kind, JoinFailure::Refused, "{e}");
    assert_eq!(e.reason, "Invalid Subject", "{e}");
}

#[test]
fn mqtt_relays_stamped_frames_and_echoes_to_the_sender() {
    let (_s, port) = mosquitto("allow_anonymous true");
    relay_check(FrameProtoKind::Mqtt, port);
}

#[test]
fn mqtt_broker_refusing_anonymous_clients_is_a_refused_connack() {
    let (_s, port) = mosquitto("allow_anonymous false");
    let e = refused(
        FrameProtoKind::Mqtt,
        TOPIC_DEFAULT,
        WS_PATH_DEFAULT,
        Role::Both,
        port,
    );
    assert_eq!(e.kind, JoinFailure::Refused, "{e}");
    assert_eq!(e.reason, "CONNACK return code 5 (not authorized)", "{e}");
}

#[test]
fn redis_relays_stamped_frames_through_a_subscriber_and_a_publisher() {
    let (_s, port) = redis(&[]);
    relay_check(FrameProtoKind::Resp, port);
}

#[test]
fn redis_requiring_a_password_refuses_both_sockets_with_its_reason() {
    let (_s, port) = redis(&["--requirepass", "secret"]);
    for role in [Role::Subscriber, Role::Publisher] {
        let e = refused(
            FrameProtoKind::Resp,
            TOPIC_DEFAULT,
            WS_PATH_DEFAULT,
            role,
            port,
        );
        assert_eq!(e.kind, JoinFailure::Refused, "{e}");
        assert_eq!(e.reason, "NOAUTH Authentication required.", "{e}");
    }
}

#[test]
fn websocket_broadcast_relays_stamped_frames_to_the_others() {
    let (_s, port) = ws_server();
    relay_check(FrameProtoKind::Ws, port);
}

#[test]
fn websocket_path_the_server_does_not_serve_is_refused_with_its_status() {
    let (_s, port) = ws_server();
    let e = refused(
        FrameProtoKind::Ws,
        TOPIC_DEFAULT,
        "/nowhere/{room}",
        Role::Both,
        port,
    );
    assert_eq!(e.kind, JoinFailure::Refused, "{e}");
    assert_eq!(e.reason, "HTTP/1.1 404 Not Found", "{e}");
}

#[test]
fn websocket_close_from_the_server_is_reported_with_its_code() {
    // The server closes a connection whose client sends a text frame that is not
    // UTF-8 (RFC 6455 section 8.1: close code 1007).
    let (_s, port) = ws_server();
    let spec = spec(FrameProtoKind::Ws, TOPIC_DEFAULT, WS_PATH_DEFAULT, port);
    let mut c = Conn::open(&spec, Role::Both, 4, port);
    c.join(&[ROOM]).unwrap();
    // FIN | text, masked, 1 byte: 0xff (invalid UTF-8), mask 0.
    c.stream.write_all(&[0x81, 0x81, 0, 0, 0, 0, 0xff]).unwrap();
    assert_eq!(c.next(), Ev::Close(Some(1007)));
    let mut out = [0u8; 256];
    let n = c.codec.encode_close(Some(1007), &mut out);
    c.stream.write_all(&out[..n]).unwrap();
    assert!(
        !c.read_more(),
        "the server closes after the close handshake"
    );
}
