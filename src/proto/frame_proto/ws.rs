//! `--frame-proto ws`: WebSocket (RFC 6455) binary messages to a broadcast server.
//!
//! Join: an HTTP/1.1 upgrade request `GET <--ws-path for the room>` with `Host`,
//! `Upgrade: websocket`, `Connection: Upgrade`, `Sec-WebSocket-Version: 13` and a
//! `Sec-WebSocket-Key` of 16 bytes from the connection's seed (base64). Joined on
//! `101` whose `Sec-WebSocket-Accept` is base64(SHA-1(key + the RFC's GUID)) (section
//! 4.2.2); any other status is a refused join with the server's status line, a wrong
//! accept a protocol error. The path names one room, so a `ws` connection joins
//! exactly one room (its members all sit in it); the engine gives it one.
//!
//! Uplink: one binary frame per stamp (FIN, opcode 2), masked as every client frame
//! must be (section 5.3) with a key from the connection's generator (xorshift64*,
//! seeded per connection: deterministic, no allocation, no syscall), the payload the
//! stamp and padding.
//!
//! Downlink: server frames are unmasked (a masked one is invalid, section 5.1), RSV
//! bits zero (no extension was negotiated). Binary and text messages are
//! [`Down::Message`]; a fragmented message (a first frame without FIN, continuations
//! with opcode 0) stays un-consumed until its last fragment has arrived, then its
//! fragments' payloads are moved together in place (inside the bytes the message
//! consumes) and yielded as one payload. Control frames (at most 125 bytes, never
//! fragmented) may come between fragments: ping ([`Control::Ping`], answer with a pong
//! echoing its payload), pong, close ([`Control::Close`] with the status code; answer
//! with a close, then close the socket). Between fragments they are reported with
//! `consumed: 0`, the message's bytes still being kept.

use super::{
    Control, Down, ENVELOPE_BYTES_MAX, FrameProtoKind, FrameSpec, Join, JoinError,
    PAYLOAD_BYTES_MAX, write_payload,
};
use crate::proto::frame::FrameHeader;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha1::{Digest, Sha1};

const KIND: FrameProtoKind = FrameProtoKind::Ws;
/// RFC 6455 section 1.3: appended to the key before hashing.
const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const FIN: u8 = 0x80;
const OP_CONT: u8 = 0;
const OP_TEXT: u8 = 1;
const OP_BINARY: u8 = 2;
const OP_CLOSE: u8 = 8;
const OP_PING: u8 = 9;
const OP_PONG: u8 = 10;
const MASKED: u8 = 0x80;

const MASKED_FRAME: &str = "WebSocket server frame is masked";
const RSV: &str = "WebSocket RSV bits set without an extension";
const BAD_CONTROL: &str = "WebSocket control frame fragmented or over 125 bytes";
const BAD_OPCODE: &str = "unknown WebSocket opcode";
const OVERSIZE: &str = "WebSocket message larger than 64 KiB";
const STRAY_CONT: &str = "WebSocket continuation frame outside a fragmented message";
const NESTED: &str = "WebSocket data frame inside a fragmented message";
const BAD_CLOSE: &str = "WebSocket close frame with a 1-byte payload";
const FRAGMENTS: &str = "fragmented WebSocket message over 72 KiB on the wire";
/// Wire bytes a fragmented message may span (payloads, fragment headers, control
/// frames between them): a frame's payload and a framer line of overhead, so a server
/// sending endless empty fragments is refused rather than filling the receive region.
const FRAGMENTED_BYTES_MAX: usize = PAYLOAD_BYTES_MAX + ENVELOPE_BYTES_MAX;

/// A fragmented message in progress: its payload so far sits at
/// `input[start..start + len]`; the next frame header is at `input[scan]`.
#[derive(Debug, Clone, Copy)]
struct Frag {
    start: usize,
    len: usize,
    scan: usize,
}

#[derive(Debug, Clone)]
pub struct WsCodec<'s> {
    pub(crate) spec: &'s FrameSpec,
    rng: u64,
    /// The `Sec-WebSocket-Accept` the server must send.
    accept: [u8; 28],
    /// Rooms given to the join (a ws connection joins one).
    rooms: usize,
    frag: Option<Frag>,
}

/// A frame header at the start of `b`: (first byte, header bytes, payload bytes);
/// `Ok(None)` while incomplete.
fn header(b: &[u8]) -> Result<Option<(u8, usize, usize)>, &'static str> {
    if b.len() < 2 {
        return Ok(None);
    }
    if b[0] & 0x70 != 0 {
        return Err(RSV);
    }
    if b[1] & MASKED != 0 {
        return Err(MASKED_FRAME);
    }
    let (h, n) = match b[1] & 0x7f {
        126 if b.len() < 4 => return Ok(None),
        126 => (4, u64::from(u16::from_be_bytes([b[2], b[3]]))),
        127 if b.len() < 10 => return Ok(None),
        127 => (
            10,
            u64::from_be_bytes(b[2..10].try_into().expect("8 bytes")),
        ),
        n => (2, u64::from(n)),
    };
    let op = b[0] & 0x0f;
    if op & 8 != 0 && (n > 125 || b[0] & FIN == 0) {
        return Err(BAD_CONTROL);
    }
    if n > PAYLOAD_BYTES_MAX as u64 {
        return Err(OVERSIZE);
    }
    Ok(Some((b[0], h, n as usize)))
}

/// Head of an HTTP response: the status code and the value of a header (by name,
/// case-insensitive).
fn header_value<'a>(head: &'a [u8], name: &str) -> Option<&'a [u8]> {
    head.split(|&b| b == b'\n').skip(1).find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(name.as_bytes())
            .then(|| line[colon + 1..].trim_ascii())
    })
}

impl<'s> WsCodec<'s> {
    pub fn new(spec: &'s FrameSpec, seed: u64) -> Self {
        WsCodec {
            spec,
            // Never zero (xorshift would stick), different per seed.
            rng: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            accept: [0; 28],
            rooms: 0,
            frag: None,
        }
    }

    /// xorshift64*: fast, deterministic, good enough for masks and keys (masking is
    /// there against proxy cache poisoning, not secrecy).
    #[inline]
    fn next(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn join_start(&mut self, rooms: &[u32], out: &mut Vec<u8>) {
        self.rooms = rooms.len();
        self.frag = None;
        let mut raw = [0u8; 16];
        raw[..8].copy_from_slice(&self.next().to_le_bytes());
        raw[8..].copy_from_slice(&self.next().to_le_bytes());
        let key = STANDARD.encode(raw);
        let mut sha = Sha1::new();
        sha.update(key.as_bytes());
        sha.update(GUID);
        let n = STANDARD
            .encode_slice(sha.finalize(), &mut self.accept)
            .expect("20 bytes are 28 in base64");
        debug_assert_eq!(n, 28);
        out.extend_from_slice(b"GET ");
        out.extend_from_slice(
            &self
                .spec
                .ws_path
                .to_vec(rooms.first().copied().unwrap_or(0)),
        );
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(self.spec.host.as_bytes());
        out.extend_from_slice(
            b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
Sec-WebSocket-Key: ",
        );
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
    }

    pub(crate) fn join_feed(&mut self, _rooms: &[u32], input: &[u8], _out: &mut Vec<u8>) -> Join {
        if self.rooms != 1 {
            return Join::Failed(JoinError {
                proto: KIND,
                kind: super::JoinFailure::Protocol,
                reason: format!(
                    "a WebSocket connection joins one room (its path names it), given {}",
                    self.rooms
                ),
            });
        }
        let cap = input.len().min(ENVELOPE_BYTES_MAX);
        let Some(end) = input[..cap].windows(4).position(|w| w == b"\r\n\r\n") else {
            if input.len() >= ENVELOPE_BYTES_MAX {
                return Join::Failed(JoinError::protocol(
                    KIND,
                    "HTTP response head longer than 8 KiB",
                    input,
                ));
            }
            return Join::Pending { consumed: 0 };
        };
        let head = &input[..end + 2];
        let status_line = &head[..head.iter().position(|&b| b == b'\r').unwrap_or(0)];
        let mut parts = status_line.splitn(3, |&b| b == b' ');
        let version = parts.next().unwrap_or_default();
        let status = parts.next().unwrap_or_default();
        if !version.starts_with(b"HTTP/1.") || status.len() != 3 {
            return Join::Failed(JoinError::protocol(KIND, "not an HTTP response", input));
        }
        if status != b"101" {
            return Join::Failed(JoinError::refused(KIND, status_line));
        }
        let upgrade =
            header_value(head, "upgrade").is_some_and(|v| v.eq_ignore_ascii_case(b"websocket"));
        let connection = header_value(head, "connection").is_some_and(|v| {
            v.split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"upgrade"))
        });
        if !upgrade || !connection {
            return Join::Failed(JoinError::protocol(
                KIND,
                "101 without Upgrade: websocket and Connection: Upgrade",
                head,
            ));
        }
        if header_value(head, "sec-websocket-accept") != Some(&self.accept[..]) {
            return Join::Failed(JoinError::protocol(
                KIND,
                "Sec-WebSocket-Accept does not match the key",
                head,
            ));
        }
        Join::Joined { consumed: end + 4 }
    }

    pub(crate) fn message_bytes_max(&self) -> usize {
        2 + 8 + 4 + self.spec.frame_size
    }

    /// Writes a masked client frame header for `len` payload bytes, then returns the
    /// header's length and the mask key.
    #[inline]
    fn client_header(&mut self, first: u8, len: usize, out: &mut [u8]) -> (usize, [u8; 4]) {
        out[0] = first;
        let mut h = 2;
        if len < 126 {
            out[1] = MASKED | len as u8;
        } else if len <= usize::from(u16::MAX) {
            out[1] = MASKED | 126;
            out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            h = 4;
        } else {
            out[1] = MASKED | 127;
            out[2..10].copy_from_slice(&(len as u64).to_be_bytes());
            h = 10;
        }
        let mask = (self.next() as u32).to_ne_bytes();
        out[h..h + 4].copy_from_slice(&mask);
        (h + 4, mask)
    }

    #[inline]
    pub(crate) fn encode_uplink(&mut self, stamps: &[FrameHeader], out: &mut [u8]) -> usize {
        let size = self.spec.frame_size;
        let mut at = 0;
        for s in stamps {
            let (h, mask) = self.client_header(FIN | OP_BINARY, size, &mut out[at..]);
            at += h;
            let payload = &mut out[at..at + size];
            write_payload(s, size, payload);
            apply_mask(payload, mask);
            at += size;
        }
        at
    }

    #[inline]
    pub(crate) fn decode(&mut self, input: &mut [u8]) -> Down {
        loop {
            let pos = self.frag.map_or(0, |f| f.scan);
            let (first, h, n) = match header(&input[pos..]) {
                Ok(Some(f)) => f,
                Ok(None) => return Down::Incomplete { consumed: 0 },
                Err(reason) => return Down::Invalid { reason },
            };
            let end = pos + h + n;
            if self.frag.is_some() && end > FRAGMENTED_BYTES_MAX {
                return Down::Invalid { reason: FRAGMENTS };
            }
            if input.len() < end {
                return Down::Incomplete { consumed: 0 };
            }
            let body = pos + h..end;
            let op = first & 0x0f;
            // Control frames: consumed at once, unless fragments before them are kept.
            let consumed = if self.frag.is_some() { 0 } else { end };
            if let Some(f) = self.frag.as_mut()
                && op & 8 != 0
            {
                f.scan = end;
            }
            let control = |control| Down::Control { consumed, control };
            match op {
                OP_PING => return control(Control::Ping { payload: body }),
                OP_PONG => return control(Control::Pong),
                OP_CLOSE => {
                    let code = match n {
                        0 => None,
                        1 => return Down::Invalid { reason: BAD_CLOSE },
                        _ => Some(u16::from_be_bytes([
                            input[body.start],
                            input[body.start + 1],
                        ])),
                    };
                    return control(Control::Close { code });
                }
                OP_TEXT | OP_BINARY if self.frag.is_some() => {
                    return Down::Invalid { reason: NESTED };
                }
                OP_TEXT | OP_BINARY if first & FIN != 0 => {
                    return Down::Message {
                        consumed: end,
                        payload: body,
                    };
                }
                OP_TEXT | OP_BINARY => {
                    self.frag = Some(Frag {
                        start: body.start,
                        len: n,
                        scan: end,
                    });
                }
                OP_CONT => {
                    let Some(f) = self.frag.as_mut() else {
                        return Down::Invalid { reason: STRAY_CONT };
                    };
                    if f.len + n > PAYLOAD_BYTES_MAX {
                        return Down::Invalid { reason: OVERSIZE };
                    }
                    // Move this fragment's payload up against the payload so far.
                    input.copy_within(body, f.start + f.len);
                    f.len += n;
                    f.scan = end;
                    if first & FIN != 0 {
                        let payload = f.start..f.start + f.len;
                        self.frag = None;
                        return Down::Message {
                            consumed: end,
                            payload,
                        };
                    }
                }
                _ => return Down::Invalid { reason: BAD_OPCODE },
            }
        }
    }

    pub(crate) fn reset(&mut self) {
        self.frag = None;
    }

    pub(crate) fn encode_pong(&mut self, ping: &[u8], out: &mut [u8]) -> usize {
        let ping = &ping[..ping.len().min(125)];
        let (h, mask) = self.client_header(FIN | OP_PONG, ping.len(), out);
        out[h..h + ping.len()].copy_from_slice(ping);
        apply_mask(&mut out[h..h + ping.len()], mask);
        h + ping.len()
    }

    pub(crate) fn encode_keepalive(&mut self, out: &mut [u8]) -> usize {
        self.client_header(FIN | OP_PING, 0, out).0
    }

    pub(crate) fn encode_close(&mut self, code: Option<u16>, out: &mut [u8]) -> usize {
        let body = code.map(u16::to_be_bytes);
        let len = if body.is_some() { 2 } else { 0 };
        let (h, mask) = self.client_header(FIN | OP_CLOSE, len, out);
        if let Some(b) = body {
            out[h..h + 2].copy_from_slice(&b);
            apply_mask(&mut out[h..h + 2], mask);
        }
        h + len
    }
}

/// XORs `payload` with the 4-byte mask, eight bytes at a time.
#[inline]
fn apply_mask(payload: &mut [u8], mask: [u8; 4]) {
    let wide = u64::from_ne_bytes([
        mask[0], mask[1], mask[2], mask[3], mask[0], mask[1], mask[2], mask[3],
    ]);
    let mut chunks = payload.chunks_exact_mut(8);
    for c in &mut chunks {
        let v = u64::from_ne_bytes((&*c).try_into().expect("8 bytes")) ^ wide;
        c.copy_from_slice(&v.to_ne_bytes());
    }
    // The tail starts at a multiple of 8, so of 4: the mask restarts at its byte 0.
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= mask[i & 3];
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{self, Event};
    use super::super::{FrameProto, JoinFailure, Role};
    use super::*;

    fn spec(size: usize) -> FrameSpec {
        FrameSpec::new(
            FrameProtoKind::Ws,
            "x.{room}",
            "/room/{room}",
            "127.0.0.1:9",
            size,
        )
        .unwrap()
    }

    /// The accept the server must send for the request in `sent`.
    fn accept_for(sent: &[u8]) -> String {
        let text = String::from_utf8_lossy(sent);
        let key = text
            .lines()
            .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
            .unwrap();
        let mut sha = Sha1::new();
        sha.update(key.as_bytes());
        sha.update(GUID);
        STANDARD.encode(sha.finalize())
    }

    #[test]
    fn the_rfc_example_key_gives_the_rfc_accept() {
        // RFC 6455 section 1.3.
        let mut sha = Sha1::new();
        sha.update(b"dGhlIHNhbXBsZSBub25jZQ==");
        sha.update(GUID);
        assert_eq!(
            STANDARD.encode(sha.finalize()),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn upgrade_request_and_101_with_the_right_accept_joins() {
        let spec = spec(40);
        let mut c = FrameProto::new(&spec, Role::Both, 1, 7);
        let mut sent = Vec::new();
        c.join_start(&[42], &mut sent);
        let text = String::from_utf8(sent.clone()).unwrap();
        assert!(
            text.starts_with("GET /room/42 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nSec-WebSocket-Version: 13\r\n"), "{text}");
        assert!(text.ends_with("==\r\n\r\n"), "{text}");
        let server = format!(
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\n\
             Sec-WebSocket-Accept: {}\r\n\r\n\x02\x00",
            accept_for(&sent)
        );
        let got = testkit::join_splits(&spec, &[42], server.as_bytes());
        assert_eq!(
            got.outcome,
            Join::Joined {
                consumed: server.len() - 2
            }
        );
        assert_eq!(got.sent, sent, "the same seed gives the same key");
        let wrong = server.replace("Sec-WebSocket-Accept: ", "Sec-WebSocket-Accept: x");
        let got = testkit::join_splits(&spec, &[42], wrong.as_bytes());
        assert!(
            matches!(&got.outcome, Join::Failed(e) if e.kind == JoinFailure::Protocol
                && e.reason.starts_with("Sec-WebSocket-Accept does not match")),
            "{:?}",
            got.outcome
        );
    }

    #[test]
    fn a_non_101_status_is_refused_with_the_status_line() {
        let spec = spec(40);
        let got = testkit::join_splits(
            &spec,
            &[1],
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
        );
        let Join::Failed(e) = got.outcome else {
            panic!()
        };
        assert_eq!(e.to_string(), "ws join refused: HTTP/1.1 403 Forbidden");
        let got = testkit::join_splits(&spec, &[1, 2], b"HTTP/1.1 101 x\r\n\r\n");
        assert!(matches!(&got.outcome, Join::Failed(e) if e.reason.contains("one room")));
        let got = testkit::join_splits(&spec, &[1], b"SSH-2.0-OpenSSH\r\n\r\n");
        assert!(matches!(&got.outcome, Join::Failed(e) if e.kind == JoinFailure::Protocol));
    }

    /// Unmasks client frames as a server would: (opcode, payload) per frame.
    fn unmask_all(mut b: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        while !b.is_empty() {
            assert_eq!(b[1] & MASKED, MASKED, "client frames are masked");
            let (h, n) = match b[1] & 0x7f {
                126 => (4, u16::from_be_bytes([b[2], b[3]]) as usize),
                127 => (
                    10,
                    u64::from_be_bytes(b[2..10].try_into().unwrap()) as usize,
                ),
                n => (2, n as usize),
            };
            let mask = &b[h..h + 4];
            let p: Vec<u8> = b[h + 4..h + 4 + n]
                .iter()
                .enumerate()
                .map(|(i, x)| x ^ mask[i % 4])
                .collect();
            out.push((b[0], p));
            b = &b[h + 4 + n..];
        }
        out
    }

    #[test]
    fn uplink_frames_are_masked_binary_and_unmask_to_the_payloads() {
        for size in [40, 125, 126, 300, 65535, 65536] {
            let spec = spec(size);
            let stamps = testkit::stamps(&[1, 2, 3]);
            let up = testkit::uplink(&spec, &stamps);
            let frames = unmask_all(&up);
            let p = testkit::payloads(&spec, &stamps);
            assert_eq!(frames.len(), 3);
            for (i, (first, payload)) in frames.into_iter().enumerate() {
                assert_eq!(first, 0x82);
                assert_eq!(payload, p[i], "size {size} frame {i}");
            }
            // Different masks per frame (not a fixed key).
            let h = match size {
                ..126 => 2,
                126..=65535 => 4,
                _ => 10,
            };
            let second = up.len() / 3;
            assert_ne!(up[h..h + 4], up[second + h..second + h + 4]);
        }
    }

    fn server_frame(first: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![first];
        match payload.len() {
            n if n < 126 => f.push(n as u8),
            n if n <= 65535 => {
                f.push(126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn fragmented_messages_with_controls_between_come_out_whole() {
        let spec = spec(200);
        let p = testkit::payloads(&spec, &testkit::stamps(&[5, 6]));
        let mut s = server_frame(0x82, &p[0]);
        // p[1] in three fragments, a ping and a pong between them.
        s.extend(server_frame(0x02, &p[1][..10]));
        s.extend(server_frame(0x89, b"hi"));
        s.extend(server_frame(0x00, &p[1][10..150]));
        s.extend(server_frame(0x8a, b""));
        s.extend(server_frame(0x80, &p[1][150..]));
        s.extend(server_frame(0x81, b"text"));
        s.extend(server_frame(0x88, &1001u16.to_be_bytes()));
        s.extend(server_frame(0x88, b""));
        let want = [
            Event::Message(p[0].clone()),
            Event::Ping(b"hi".to_vec()),
            Event::Pong,
            Event::Message(p[1].clone()),
            Event::Message(b"text".to_vec()),
            Event::Close(Some(1001)),
            Event::Close(None),
        ];
        testkit::check_decode_splits(&spec, Role::Both, &s, &want);
        // Long lengths: 126-form and 127-form headers.
        let big = spec_payload(70_000.min(PAYLOAD_BYTES_MAX));
        let s = [server_frame(0x82, &big[..300]), server_frame(0x82, &big)].concat();
        let got = testkit::decode_cuts(&spec, Role::Both, &s, &[7, 1000]);
        assert_eq!(
            got.events,
            [
                Event::Message(big[..300].to_vec()),
                Event::Message(big.clone())
            ]
        );
    }

    fn spec_payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7) as u8).collect()
    }

    #[test]
    fn bad_server_frames_are_invalid() {
        let spec = spec(40);
        for (bytes, reason) in [
            (vec![0x82, 0x81, 1, 2, 3, 4, 0], MASKED_FRAME),
            (vec![0xc2, 0], RSV),
            (vec![0x09, 0], BAD_CONTROL),
            (server_frame(0x89, &[0; 126]), BAD_CONTROL),
            (vec![0x83, 0], BAD_OPCODE),
            (vec![0x8b, 0], BAD_OPCODE),
            (vec![0x82, 127, 0, 0, 0, 0, 0, 1, 0, 1], OVERSIZE),
            (vec![0x80, 0], STRAY_CONT),
            (vec![0x02, 1, 0, 0x82, 0], NESTED),
            (vec![0x88, 1, 0], BAD_CLOSE),
            (
                [&[0x02, 0][..], &[0x00, 0].repeat(40_000)].concat(),
                FRAGMENTS,
            ),
        ] {
            assert_eq!(
                testkit::decode_all(&spec, Role::Both, &bytes).invalid,
                Some(reason),
                "{bytes:x?}"
            );
        }
    }

    #[test]
    fn pong_close_and_ping_answers_are_masked_control_frames() {
        let spec = spec(40);
        let mut c = FrameProto::new(&spec, Role::Both, 1, 3);
        let mut out = [0u8; super::super::CONTROL_BYTES_MAX];
        let n = c.encode_pong(&[7; 125], &mut out);
        assert_eq!(n, super::super::CONTROL_BYTES_MAX);
        assert_eq!(unmask_all(&out[..n]), [(0x8a, vec![7; 125])]);
        let n = c.encode_close(Some(1000), &mut out);
        assert_eq!(
            unmask_all(&out[..n]),
            [(0x88, 1000u16.to_be_bytes().to_vec())]
        );
        let n = c.encode_keepalive(&mut out);
        assert_eq!(unmask_all(&out[..n]), [(0x89, vec![])]);
    }
}
