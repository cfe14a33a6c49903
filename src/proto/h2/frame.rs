//! The frame layer (RFC 9113 §4, §6): [`parse_frame`] reads one frame from the front of
//! the received bytes and checks what can be checked from the frame alone (its length
//! against the local MAX_FRAME_SIZE, the stream id each type requires, fixed payload
//! sizes, padding); the writers put one frame (or the preface) into a caller's buffer.
//!
//! The parser never copies: a [`Frame`] names its payload as a range of the input,
//! padding and HEADERS' priority fields already stripped, so DATA's bytes and a header
//! block fragment are read in place. It is `Incomplete` until the whole frame is there
//! (consuming nothing), and `Invalid` as soon as the 9-byte header announces a frame
//! the local settings forbid, so an oversized frame is refused before its payload is
//! waited for.
use super::{ErrorCode, FRAME_SIZE_MAX, H2Error, WINDOW_MAX};

/// The client connection preface (RFC 9113 §3.4), sent before the first SETTINGS.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Length 24, type 8, flags 8, R + stream id 31.
pub const FRAME_HEADER_BYTES: usize = 9;

/// Flags (§6): END_STREAM and ACK share a bit, on different frame types.
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY: u8 = 0x20;

/// SETTINGS identifiers (§6.5.2).
pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// A frame type (§6); types the RFC does not define are kept so they can be ignored
/// (§4.1 says to discard them), not refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Data,
    Headers,
    Priority,
    RstStream,
    Settings,
    PushPromise,
    Ping,
    GoAway,
    WindowUpdate,
    Continuation,
    Unknown(u8),
}

impl Kind {
    pub fn from_byte(b: u8) -> Kind {
        match b {
            0x0 => Kind::Data,
            0x1 => Kind::Headers,
            0x2 => Kind::Priority,
            0x3 => Kind::RstStream,
            0x4 => Kind::Settings,
            0x5 => Kind::PushPromise,
            0x6 => Kind::Ping,
            0x7 => Kind::GoAway,
            0x8 => Kind::WindowUpdate,
            0x9 => Kind::Continuation,
            other => Kind::Unknown(other),
        }
    }

    pub fn byte(self) -> u8 {
        match self {
            Kind::Data => 0x0,
            Kind::Headers => 0x1,
            Kind::Priority => 0x2,
            Kind::RstStream => 0x3,
            Kind::Settings => 0x4,
            Kind::PushPromise => 0x5,
            Kind::Ping => 0x6,
            Kind::GoAway => 0x7,
            Kind::WindowUpdate => 0x8,
            Kind::Continuation => 0x9,
            Kind::Unknown(b) => b,
        }
    }
}

/// One parsed frame. `start..end` is its payload in the input given to
/// [`parse_frame`], without padding (DATA, HEADERS, PUSH_PROMISE) and without
/// HEADERS' priority fields; `length` is the frame's whole payload length, the amount
/// DATA counts against flow control (padding included, §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub kind: Kind,
    pub flags: u8,
    pub stream: u32,
    pub length: u32,
    pub start: usize,
    pub end: usize,
}

impl Frame {
    /// The payload, read in place from the input the frame was parsed from.
    pub fn payload<'a>(&self, input: &'a [u8]) -> &'a [u8] {
        &input[self.start..self.end]
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Outcome of [`parse_frame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameParsed {
    /// A whole frame, `consumed` bytes long (header included).
    Complete { frame: Frame, consumed: usize },
    /// Not all of the frame is there yet; nothing was consumed.
    Incomplete,
    /// A connection error (§5.4.1): the bytes cannot go on.
    Invalid(H2Error),
}

const fn invalid(code: ErrorCode, reason: &'static str) -> FrameParsed {
    FrameParsed::Invalid(H2Error::new(code, reason))
}

/// Reads one frame from the front of `input`. `max_frame_size` is the local
/// MAX_FRAME_SIZE (the one this side advertised), 16384..=16777215.
pub fn parse_frame(input: &[u8], max_frame_size: u32) -> FrameParsed {
    use ErrorCode as E;
    let Some(h) = input.first_chunk::<FRAME_HEADER_BYTES>() else {
        return FrameParsed::Incomplete;
    };
    let length = u32::from_be_bytes([0, h[0], h[1], h[2]]);
    let kind = Kind::from_byte(h[3]);
    let flags = h[4];
    // The reserved bit is ignored on receipt (§4.1).
    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & WINDOW_MAX;
    debug_assert!(max_frame_size <= FRAME_SIZE_MAX);
    if length > max_frame_size {
        return invalid(E::FRAME_SIZE_ERROR, "frame larger than MAX_FRAME_SIZE");
    }
    // Checks that need only the header: a peer that gets these wrong is broken, and
    // the caller learns it before waiting for the payload.
    let on_stream = stream != 0;
    match kind {
        Kind::Data | Kind::Headers | Kind::PushPromise | Kind::Continuation if !on_stream => {
            return invalid(
                E::PROTOCOL_ERROR,
                "DATA, HEADERS or CONTINUATION on stream 0",
            );
        }
        Kind::Priority | Kind::RstStream if !on_stream => {
            return invalid(E::PROTOCOL_ERROR, "PRIORITY or RST_STREAM on stream 0");
        }
        Kind::Settings | Kind::Ping | Kind::GoAway if on_stream => {
            return invalid(E::PROTOCOL_ERROR, "SETTINGS, PING or GOAWAY on a stream");
        }
        Kind::Priority if length != 5 => {
            return invalid(E::FRAME_SIZE_ERROR, "PRIORITY payload is not 5 bytes");
        }
        Kind::RstStream if length != 4 => {
            return invalid(E::FRAME_SIZE_ERROR, "RST_STREAM payload is not 4 bytes");
        }
        Kind::Settings if !length.is_multiple_of(6) => {
            return invalid(E::FRAME_SIZE_ERROR, "SETTINGS payload not a multiple of 6");
        }
        Kind::Settings if flags & ACK != 0 && length != 0 => {
            return invalid(E::FRAME_SIZE_ERROR, "SETTINGS ACK with a payload");
        }
        Kind::Ping if length != 8 => {
            return invalid(E::FRAME_SIZE_ERROR, "PING payload is not 8 bytes");
        }
        Kind::GoAway if length < 8 => {
            return invalid(E::FRAME_SIZE_ERROR, "GOAWAY payload under 8 bytes");
        }
        Kind::WindowUpdate if length != 4 => {
            return invalid(E::FRAME_SIZE_ERROR, "WINDOW_UPDATE payload is not 4 bytes");
        }
        _ => {}
    }
    let consumed = FRAME_HEADER_BYTES + length as usize;
    if input.len() < consumed {
        return FrameParsed::Incomplete;
    }
    let mut start = FRAME_HEADER_BYTES;
    let mut end = consumed;
    let paddable = matches!(kind, Kind::Data | Kind::Headers | Kind::PushPromise);
    if paddable && flags & PADDED != 0 {
        let Some(&pad) = input.get(start).filter(|_| length >= 1) else {
            return invalid(E::FRAME_SIZE_ERROR, "PADDED frame without a pad length");
        };
        start += 1;
        // The pad length byte and the padding must fit in the payload, leaving the
        // fields below; padding as long as the payload is a PROTOCOL_ERROR (§6.1).
        // Checked subtraction: a pad length above the whole frame must not wrap.
        match end.checked_sub(pad as usize).filter(|&e| e >= start) {
            Some(e) => end = e,
            None => return invalid(E::PROTOCOL_ERROR, "padding longer than the frame payload"),
        }
    }
    let fixed = match kind {
        Kind::Headers if flags & PRIORITY != 0 => 5,
        Kind::PushPromise => 4,
        _ => 0,
    };
    if end - start < fixed {
        return invalid(E::FRAME_SIZE_ERROR, "frame too short for its fields");
    }
    if kind == Kind::Headers {
        start += fixed;
    }
    FrameParsed::Complete {
        frame: Frame {
            kind,
            flags,
            stream,
            length,
            start,
            end,
        },
        consumed,
    }
}

/// A writer was handed a buffer shorter than the frame; nothing usable was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooSmall {
    /// Bytes the frame needs.
    pub needed: usize,
}

fn room(out: &[u8], needed: usize) -> Result<(), TooSmall> {
    if out.len() < needed {
        Err(TooSmall { needed })
    } else {
        Ok(())
    }
}

/// Writes a frame header; the caller has checked the room.
fn put_header(out: &mut [u8], length: usize, kind: Kind, flags: u8, stream: u32) {
    assert!(length <= FRAME_SIZE_MAX as usize, "frame length {length}");
    assert!(stream <= WINDOW_MAX, "stream id {stream}");
    let l = (length as u32).to_be_bytes();
    out[..3].copy_from_slice(&l[1..]);
    out[3] = kind.byte();
    out[4] = flags;
    out[5..9].copy_from_slice(&stream.to_be_bytes());
}

/// A SETTINGS frame carrying `settings` (identifier, value).
pub fn write_settings(out: &mut [u8], settings: &[(u16, u32)]) -> Result<usize, TooSmall> {
    let len = FRAME_HEADER_BYTES + 6 * settings.len();
    room(out, len)?;
    put_header(out, 6 * settings.len(), Kind::Settings, 0, 0);
    for (i, &(id, value)) in settings.iter().enumerate() {
        let at = FRAME_HEADER_BYTES + 6 * i;
        out[at..at + 2].copy_from_slice(&id.to_be_bytes());
        out[at + 2..at + 6].copy_from_slice(&value.to_be_bytes());
    }
    Ok(len)
}

/// The client preface followed by its first SETTINGS frame (§3.4).
pub fn write_preface(out: &mut [u8], settings: &[(u16, u32)]) -> Result<usize, TooSmall> {
    room(out, PREFACE.len() + FRAME_HEADER_BYTES + 6 * settings.len())?;
    out[..PREFACE.len()].copy_from_slice(PREFACE);
    Ok(PREFACE.len() + write_settings(&mut out[PREFACE.len()..], settings)?)
}

/// SETTINGS with the ACK flag: the answer every SETTINGS from the peer needs.
pub fn write_settings_ack(out: &mut [u8]) -> Result<usize, TooSmall> {
    room(out, FRAME_HEADER_BYTES)?;
    put_header(out, 0, Kind::Settings, ACK, 0);
    Ok(FRAME_HEADER_BYTES)
}

/// A PING with these 8 opaque bytes: `ack` answers the peer's PING (echoing its bytes),
/// otherwise it is a keepalive of our own.
pub fn write_ping(out: &mut [u8], opaque: [u8; 8], ack: bool) -> Result<usize, TooSmall> {
    room(out, FRAME_HEADER_BYTES + 8)?;
    put_header(out, 8, Kind::Ping, if ack { ACK } else { 0 }, 0);
    out[9..17].copy_from_slice(&opaque);
    Ok(FRAME_HEADER_BYTES + 8)
}

/// A WINDOW_UPDATE for `stream` (0: the connection). An increment of 0 or above
/// 2^31-1 is a bug of the caller, never something to send.
pub fn write_window_update(out: &mut [u8], stream: u32, increment: u32) -> Result<usize, TooSmall> {
    assert!(
        (1..=WINDOW_MAX).contains(&increment),
        "WINDOW_UPDATE increment {increment}"
    );
    room(out, FRAME_HEADER_BYTES + 4)?;
    put_header(out, 4, Kind::WindowUpdate, 0, stream);
    out[9..13].copy_from_slice(&increment.to_be_bytes());
    Ok(FRAME_HEADER_BYTES + 4)
}

/// An RST_STREAM ending `stream` with `code`.
pub fn write_rst_stream(out: &mut [u8], stream: u32, code: ErrorCode) -> Result<usize, TooSmall> {
    assert!(stream != 0, "RST_STREAM on stream 0");
    room(out, FRAME_HEADER_BYTES + 4)?;
    put_header(out, 4, Kind::RstStream, 0, stream);
    out[9..13].copy_from_slice(&code.0.to_be_bytes());
    Ok(FRAME_HEADER_BYTES + 4)
}

/// A GOAWAY: the last stream this side processed, the code, and debug bytes.
pub fn write_goaway(
    out: &mut [u8],
    last_stream: u32,
    code: ErrorCode,
    debug: &[u8],
) -> Result<usize, TooSmall> {
    let len = FRAME_HEADER_BYTES + 8 + debug.len();
    room(out, len)?;
    put_header(out, 8 + debug.len(), Kind::GoAway, 0, 0);
    out[9..13].copy_from_slice(&(last_stream & WINDOW_MAX).to_be_bytes());
    out[13..17].copy_from_slice(&code.0.to_be_bytes());
    out[17..len].copy_from_slice(debug);
    Ok(len)
}

/// Bytes [`write_headers`] needs for a block of `block_len` bytes.
pub fn headers_len(block_len: usize, max_frame_size: u32) -> usize {
    let frames = block_len.div_ceil(max_frame_size as usize).max(1);
    frames * FRAME_HEADER_BYTES + block_len
}

/// A request's header block on `stream`: one HEADERS frame, followed by CONTINUATION
/// frames when the block is longer than the peer's `max_frame_size` (§6.10); the last
/// frame carries END_HEADERS, the HEADERS frame END_STREAM when `end_stream` (a
/// request without a body).
pub fn write_headers(
    out: &mut [u8],
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame_size: u32,
) -> Result<usize, TooSmall> {
    assert!(stream != 0, "HEADERS on stream 0");
    let total = headers_len(block.len(), max_frame_size);
    room(out, total)?;
    let max = max_frame_size as usize;
    let mut at = 0;
    let mut rest = block;
    let mut kind = Kind::Headers;
    loop {
        let n = rest.len().min(max);
        let last = n == rest.len();
        let mut flags = if last { END_HEADERS } else { 0 };
        if kind == Kind::Headers && end_stream {
            flags |= END_STREAM;
        }
        put_header(&mut out[at..], n, kind, flags, stream);
        at += FRAME_HEADER_BYTES;
        out[at..at + n].copy_from_slice(&rest[..n]);
        at += n;
        rest = &rest[n..];
        kind = Kind::Continuation;
        if last {
            break;
        }
    }
    debug_assert_eq!(at, total);
    Ok(total)
}

/// A DATA frame on `stream`; the caller keeps `data` within the peer's MAX_FRAME_SIZE
/// and the send windows ([`Connection::send_capacity`]).
///
/// [`Connection::send_capacity`]: super::Connection::send_capacity
pub fn write_data(
    out: &mut [u8],
    stream: u32,
    data: &[u8],
    end_stream: bool,
) -> Result<usize, TooSmall> {
    assert!(stream != 0, "DATA on stream 0");
    let len = FRAME_HEADER_BYTES + data.len();
    room(out, len)?;
    put_header(
        out,
        data.len(),
        Kind::Data,
        if end_stream { END_STREAM } else { 0 },
        stream,
    );
    out[9..len].copy_from_slice(data);
    Ok(len)
}

/// The (identifier, value) pairs of a SETTINGS payload (a multiple of 6 bytes, which
/// [`parse_frame`] checked).
pub fn settings(payload: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    payload.chunks_exact(6).map(|c| {
        (
            u16::from_be_bytes([c[0], c[1]]),
            u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
        )
    })
}

/// A GOAWAY payload: streams above `last_stream_id` were not processed and may be
/// retried on a new connection (§6.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoAway<'a> {
    pub last_stream_id: u32,
    pub code: ErrorCode,
    pub debug: &'a [u8],
}

/// Reads a GOAWAY payload (at least 8 bytes, which [`parse_frame`] checked).
pub fn goaway(payload: &[u8]) -> GoAway<'_> {
    GoAway {
        last_stream_id: u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
            & WINDOW_MAX,
        code: ErrorCode(u32::from_be_bytes([
            payload[4], payload[5], payload[6], payload[7],
        ])),
        debug: &payload[8..],
    }
}

/// Reads a 4-byte payload as a big-endian u32 (RST_STREAM's code, WINDOW_UPDATE's
/// increment with its reserved bit still set).
pub fn u32_payload(payload: &[u8]) -> u32 {
    u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::{self, Outcome};
    use crate::proto::{Framer, Parsed};
    use proptest::prelude::*;

    const MAX: u32 = 16_384;

    /// The frame parser seen as a framer, so the shared matrix (testkit) runs on it:
    /// one frame is one response.
    struct Frames(u32);

    impl Framer for Frames {
        fn feed(&mut self, input: &[u8]) -> Parsed {
            match parse_frame(input, self.0) {
                FrameParsed::Complete { consumed, .. } => Parsed::Complete { consumed },
                FrameParsed::Incomplete => Parsed::Incomplete { consumed: 0 },
                FrameParsed::Invalid(e) => Parsed::Invalid { reason: e.reason },
            }
        }
        fn reset(&mut self) {}
    }

    fn one(input: &[u8]) -> (Frame, usize) {
        match parse_frame(input, MAX) {
            FrameParsed::Complete { frame, consumed } => (frame, consumed),
            other => panic!("{other:?}"),
        }
    }

    fn code(input: &[u8]) -> ErrorCode {
        match parse_frame(input, MAX) {
            FrameParsed::Invalid(e) => e.code,
            other => panic!("{other:?}"),
        }
    }

    fn raw(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        v.extend_from_slice(&[kind, flags]);
        v.extend_from_slice(&stream.to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    fn written(f: impl FnOnce(&mut [u8]) -> Result<usize, TooSmall>) -> Vec<u8> {
        let mut buf = [0u8; 1 << 16];
        let n = f(&mut buf).unwrap();
        buf[..n].to_vec()
    }

    #[test]
    fn the_matrix_complete_split_pipelined() {
        let frames = [
            written(|b| write_settings(b, &[(SETTINGS_MAX_FRAME_SIZE, 20_000)])),
            written(|b| write_ping(b, *b"12345678", false)),
            written(|b| write_data(b, 1, b"hello", true)),
            raw(0, PADDED, 3, b"\x02ab\0\0"),
            written(|b| write_goaway(b, 7, ErrorCode::NO_ERROR, b"bye")),
        ];
        for f in &frames {
            testkit::check_splits(|| Frames(MAX), f, &[f.len()]);
        }
        let (stream, ends) = testkit::concat(&frames);
        testkit::check_splits(|| Frames(MAX), &stream, &ends);
    }

    #[test]
    fn oversize_is_invalid_from_the_header_alone() {
        let big = raw(0, 0, 1, &vec![0; MAX as usize + 1]);
        // Nine bytes are enough to refuse it: the payload is never waited for.
        assert_eq!(code(&big[..9]), ErrorCode::FRAME_SIZE_ERROR);
        let fits = raw(0, 0, 1, &vec![0; MAX as usize]);
        assert_eq!(one(&fits).1, fits.len());
        // A larger local setting lets it through.
        assert!(matches!(
            parse_frame(&big, MAX + 1),
            FrameParsed::Complete { .. }
        ));
    }

    #[test]
    fn trailing_garbage_after_a_frame_is_invalid() {
        let mut s = written(write_settings_ack);
        s.extend_from_slice(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        let out = testkit::run(&mut Frames(MAX), &s, &[]);
        assert_eq!(out.ends, vec![9]);
        // "HTT" announces a 4.7 MB frame: refused as too large.
        assert_eq!(out.invalid, Some("frame larger than MAX_FRAME_SIZE"));
        assert_eq!(
            testkit::run(&mut Frames(MAX), b"\0\0\x06\x04\x01\0\0\0\0", &[]),
            Outcome::invalid(vec![], "SETTINGS ACK with a payload")
        );
    }

    #[test]
    fn per_type_checks() {
        use ErrorCode as E;
        assert_eq!(code(&raw(0, 0, 0, b"x")), E::PROTOCOL_ERROR);
        assert_eq!(code(&raw(1, 0, 0, b"x")), E::PROTOCOL_ERROR);
        assert_eq!(code(&raw(9, 0, 0, b"x")), E::PROTOCOL_ERROR);
        assert_eq!(code(&raw(3, 0, 0, &[0; 4])), E::PROTOCOL_ERROR);
        assert_eq!(code(&raw(4, 0, 1, &[])), E::PROTOCOL_ERROR);
        assert_eq!(code(&raw(6, 0, 1, &[0; 8])), E::PROTOCOL_ERROR);
        assert_eq!(code(&raw(7, 0, 1, &[0; 8])), E::PROTOCOL_ERROR);
        assert_eq!(code(&raw(2, 0, 1, &[0; 4])), E::FRAME_SIZE_ERROR);
        assert_eq!(code(&raw(3, 0, 1, &[0; 5])), E::FRAME_SIZE_ERROR);
        assert_eq!(code(&raw(4, 0, 0, &[0; 7])), E::FRAME_SIZE_ERROR);
        assert_eq!(code(&raw(6, 0, 0, &[0; 7])), E::FRAME_SIZE_ERROR);
        assert_eq!(code(&raw(7, 0, 0, &[0; 7])), E::FRAME_SIZE_ERROR);
        assert_eq!(code(&raw(8, 0, 0, &[0; 3])), E::FRAME_SIZE_ERROR);
        // Unknown types pass (to be ignored), on any stream.
        let (f, _) = one(&raw(0xfa, 0xff, 5, b"xyz"));
        assert_eq!(f.kind, Kind::Unknown(0xfa));
        // The reserved bit of the stream id is ignored.
        let (f, _) = one(&raw(0, 0, 0x8000_0001, b""));
        assert_eq!(f.stream, 1);
    }

    #[test]
    fn padding_is_stripped_and_checked() {
        // DATA: pad length 2, "ab", two bytes of padding; flow control counts all 5.
        let d = raw(0, PADDED | END_STREAM, 1, b"\x02ab\0\0");
        let (f, n) = one(&d);
        assert_eq!((f.payload(&d), f.length, n), (&b"ab"[..], 5, 14));
        // Padding filling the rest exactly leaves an empty payload.
        let (f, _) = one(&raw(0, PADDED, 1, b"\x02\0\0"));
        assert_eq!(f.start, f.end);
        // Padding longer than what follows the pad length byte.
        assert_eq!(
            code(&raw(0, PADDED, 1, b"\x03\0\0")),
            ErrorCode::PROTOCOL_ERROR
        );
        assert_eq!(code(&raw(1, PADDED, 1, b"\x01")), ErrorCode::PROTOCOL_ERROR);
        // A pad length above the whole frame (header included) must not wrap.
        assert_eq!(
            code(&raw(0, PADDED, 1, b"\xffab")),
            ErrorCode::PROTOCOL_ERROR
        );
        // PADDED with no payload at all.
        assert_eq!(code(&raw(0, PADDED, 1, b"")), ErrorCode::FRAME_SIZE_ERROR);
        // HEADERS with PADDED and PRIORITY: pad length, 5 priority bytes, block, pad.
        let h = raw(
            1,
            PADDED | PRIORITY | END_HEADERS,
            3,
            b"\x01\0\0\0\x01\x10\x82\0",
        );
        let (f, _) = one(&h);
        assert_eq!(f.payload(&h), b"\x82");
        // PRIORITY fields that the padding leaves no room for.
        assert_eq!(
            code(&raw(1, PADDED | PRIORITY, 3, b"\x01\0\0\0\0\0")),
            ErrorCode::FRAME_SIZE_ERROR
        );
        // PRIORITY flag without padding.
        let h = raw(1, PRIORITY, 3, b"\0\0\0\x01\x10\x82\x84");
        assert_eq!(one(&h).0.payload(&h), b"\x82\x84");
        // Padding is not stripped from frame types that have none.
        let p = raw(6, PADDED, 0, b"\x07abcdefg");
        assert_eq!(one(&p).0.payload(&p).len(), 8);
    }

    #[test]
    fn every_writer_round_trips() {
        let s = written(|b| {
            write_preface(
                b,
                &[
                    (SETTINGS_ENABLE_PUSH, 0),
                    (SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20),
                ],
            )
        });
        assert_eq!(&s[..24], PREFACE);
        let (f, n) = one(&s[24..]);
        assert_eq!(
            (f.kind, f.flags, f.stream, n),
            (Kind::Settings, 0, 0, 9 + 12)
        );
        assert_eq!(
            settings(f.payload(&s[24..])).collect::<Vec<_>>(),
            vec![
                (SETTINGS_ENABLE_PUSH, 0),
                (SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20)
            ]
        );

        let a = written(write_settings_ack);
        let (f, _) = one(&a);
        assert_eq!((f.kind, f.flags, f.length), (Kind::Settings, ACK, 0));

        let p = written(|b| write_ping(b, *b"pingpong", true));
        let (f, _) = one(&p);
        assert_eq!(
            (f.kind, f.flags, f.payload(&p)),
            (Kind::Ping, ACK, &b"pingpong"[..])
        );

        let w = written(|b| write_window_update(b, 5, WINDOW_MAX));
        let (f, _) = one(&w);
        assert_eq!(
            (f.kind, f.stream, u32_payload(f.payload(&w))),
            (Kind::WindowUpdate, 5, WINDOW_MAX)
        );

        let r = written(|b| write_rst_stream(b, 9, ErrorCode::CANCEL));
        let (f, _) = one(&r);
        assert_eq!(
            (f.kind, f.stream, ErrorCode(u32_payload(f.payload(&r)))),
            (Kind::RstStream, 9, ErrorCode::CANCEL)
        );

        let g = written(|b| write_goaway(b, 11, ErrorCode::ENHANCE_YOUR_CALM, b"too_many_pings"));
        let (f, _) = one(&g);
        assert_eq!(
            goaway(f.payload(&g)),
            GoAway {
                last_stream_id: 11,
                code: ErrorCode::ENHANCE_YOUR_CALM,
                debug: b"too_many_pings"
            }
        );

        let h = written(|b| write_headers(b, 1, b"\x82\x86\x84", true, MAX));
        let (f, n) = one(&h);
        assert_eq!(
            (f.kind, f.flags, f.payload(&h), n),
            (
                Kind::Headers,
                END_HEADERS | END_STREAM,
                &b"\x82\x86\x84"[..],
                h.len()
            )
        );

        let d = written(|b| write_data(b, 3, b"body", false));
        let (f, _) = one(&d);
        assert_eq!(
            (f.kind, f.flags, f.stream, f.payload(&d)),
            (Kind::Data, 0, 3, &b"body"[..])
        );
    }

    #[test]
    fn a_long_header_block_continues() {
        let block: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        let w = written(|b| write_headers(b, 1, &block, false, MAX));
        assert_eq!(w.len(), headers_len(block.len(), MAX));
        let mut at = 0;
        let mut got = Vec::new();
        let mut kinds = Vec::new();
        while at < w.len() {
            let (f, n) = one(&w[at..]);
            kinds.push((f.kind, f.flags));
            got.extend_from_slice(f.payload(&w[at..]));
            at += n;
        }
        assert_eq!(got, block);
        assert_eq!(
            kinds,
            vec![
                (Kind::Headers, 0),
                (Kind::Continuation, 0),
                (Kind::Continuation, END_HEADERS)
            ]
        );
    }

    #[test]
    fn writers_refuse_a_short_buffer() {
        let mut b = [0u8; 16];
        assert_eq!(
            write_ping(&mut b, [0; 8], false),
            Err(TooSmall { needed: 17 })
        );
        assert_eq!(write_preface(&mut b, &[]), Err(TooSmall { needed: 33 }));
        assert_eq!(
            write_data(&mut b, 1, b"12345678", false),
            Err(TooSmall { needed: 17 })
        );
        assert_eq!(
            write_headers(&mut b, 1, b"12345678", false, MAX),
            Err(TooSmall { needed: 17 })
        );
        assert_eq!(
            write_goaway(&mut b, 1, ErrorCode::NO_ERROR, b"x"),
            Err(TooSmall { needed: 18 })
        );
        assert_eq!(write_settings_ack(&mut b[..8]), Err(TooSmall { needed: 9 }));
    }

    proptest! {
        #[test]
        fn data_frames_survive_any_chunking(
            bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..8),
            cuts in testkit::cuts(),
        ) {
            let frames: Vec<Vec<u8>> = bodies.iter().enumerate()
                .map(|(i, b)| written(|o| write_data(o, 2 * i as u32 + 1, b, false)))
                .collect();
            let (stream, ends) = testkit::concat(&frames);
            prop_assert_eq!(testkit::run(&mut Frames(MAX), &stream, &cuts), Outcome::pending(ends, 0));
        }
    }
}
