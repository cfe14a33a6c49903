//! One HTTP/2 server connection (RFC 9113), sans-I/O: the sink's `--http2` answers
//! plain requests and gRPC unary calls with it.
//!
//! [`ServerConn::receive`] takes the bytes a client sent, consumes the preface and
//! every whole frame, and appends what the server says to its output
//! ([`ServerConn::output`], drained by [`ServerConn::written`]): its SETTINGS first,
//! the SETTINGS ACKs, PING ACKs, WINDOW_UPDATEs, RST_STREAMs and replies. A connection
//! error (RFC 9113 §5.4.1) appends a GOAWAY with its code and is returned; the caller
//! sends what is queued and closes. [`ServerConn::shutdown`] is the graceful GOAWAY.
//!
//! A request is whole at END_STREAM. Its reply:
//! - gRPC (`content-type: application/grpc...`): HEADERS (`:status 200`,
//!   `content-type: application/grpc`), DATA echoing the request's length-prefixed
//!   messages as they came, then trailers with `grpc-status: 0` and END_STREAM. A body
//!   that is not whole messages gets `grpc-status: 13` (INTERNAL), one larger than
//!   [`ServerSettings::body_bytes_max`] `grpc-status: 8` (RESOURCE_EXHAUSTED), both as
//!   trailers-only responses.
//! - anything else: `:status 200`, `content-length`, and the body [`Answer`] says
//!   (the request's own body, or N bytes); a body over the bound gets `:status 413`.
//!
//! Flow control both ways: the client's windows (connection and stream, moved by its
//! INITIAL_WINDOW_SIZE and WINDOW_UPDATEs) bound the DATA sent, in frames of at most
//! its MAX_FRAME_SIZE; a reply held by a window waits for a WINDOW_UPDATE (sent from
//! [`ServerConn::receive`], which runs the replies after every batch of frames). The
//! bytes received count as consumed at once (a body is kept only up to its bound), and
//! a WINDOW_UPDATE restores a window once half of it is used, as the client does.
//!
//! Streams beyond MAX_CONCURRENT_STREAMS are refused with RST_STREAM(REFUSED_STREAM)
//! after their header block is decoded, so the HPACK table stays in step. Memory per
//! connection: a stream vector sized once, and each open stream's request body (at
//! most `body_bytes_max`) until its reply is sent.
use super::decoder::Decoder;
use super::frame::{
    self, ACK, END_HEADERS, END_STREAM, FRAME_HEADER_BYTES, Frame, FrameParsed, Kind, PREFACE,
    SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_CONCURRENT_STREAMS,
    SETTINGS_MAX_FRAME_SIZE, TooSmall,
};
use super::hpack;
use super::{
    ErrorCode, FRAME_SIZE_MAX, FRAME_SIZE_MIN, H2Error, HEADER_TABLE_DEFAULT, PeerSettings,
    WINDOW_DEFAULT, WINDOW_MAX,
};

/// gRPC's message prefix: a compressed flag and a 4-byte big-endian length.
pub const GRPC_PREFIX_BYTES: usize = 5;

/// What the server advertises and enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerSettings {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams open at once beyond this are refused.
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: each stream's receive window (65,535 or more).
    pub initial_window_size: u32,
    /// The connection's receive window, raised by a WINDOW_UPDATE after SETTINGS.
    pub connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE: the largest frame accepted.
    pub max_frame_size: u32,
    /// Longest header block gathered across CONTINUATION frames.
    pub header_block_bytes_max: usize,
    /// Largest request body kept for an echo; a longer one is answered 413
    /// (gRPC: RESOURCE_EXHAUSTED) and its bytes dropped as they come.
    pub body_bytes_max: usize,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            max_concurrent_streams: 256,
            initial_window_size: 1 << 20,
            connection_window: 1 << 24,
            max_frame_size: FRAME_SIZE_MIN,
            header_block_bytes_max: 64 << 10,
            body_bytes_max: 4 << 20,
        }
    }
}

/// The body of a plain (not gRPC) request's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The request's own body.
    Echo,
    /// This many bytes.
    Fixed(usize),
}

/// What happened since the last [`ServerConn::take_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Requests answered (the reply's last frame queued), gRPC calls included.
    pub requests: u64,
    /// gRPC calls among them.
    pub grpc_calls: u64,
    /// Replies that were not 200 / grpc-status 0 (a body too large, a gRPC body that
    /// is not whole messages).
    pub refused_requests: u64,
    /// Streams opened by the client (HEADERS on a new stream id).
    pub streams: u64,
    /// Streams refused for MAX_CONCURRENT_STREAMS.
    pub streams_refused: u64,
    /// Streams the client reset.
    pub streams_reset_by_peer: u64,
    /// Streams this side reset for a stream error (malformed request, DATA after END_STREAM...).
    pub stream_errors: u64,
    /// Request body bytes received (DATA payloads).
    pub body_bytes_received: u64,
    /// Reply body bytes queued (DATA payloads).
    pub body_bytes_sent: u64,
}

impl ServerStats {
    pub fn add(&mut self, o: &ServerStats) {
        self.requests += o.requests;
        self.grpc_calls += o.grpc_calls;
        self.refused_requests += o.refused_requests;
        self.streams += o.streams;
        self.streams_refused += o.streams_refused;
        self.streams_reset_by_peer += o.streams_reset_by_peer;
        self.stream_errors += o.stream_errors;
        self.body_bytes_received += o.body_bytes_received;
        self.body_bytes_sent += o.body_bytes_sent;
    }
}

/// A reply being sent: its headers are out; `body` (or `fixed` bytes of the server's
/// fixed body) goes as the windows allow, then `trailers` (gRPC) or END_STREAM.
#[derive(Debug)]
struct Reply {
    /// `None`: the body is `fixed` bytes of [`ServerConn::fixed`].
    body: Option<Vec<u8>>,
    len: usize,
    sent: usize,
    /// gRPC: the trailers' header block.
    trailers: bool,
}

#[derive(Debug)]
struct Stream {
    id: u32,
    /// May go negative after the client lowers INITIAL_WINDOW_SIZE (§6.9.2).
    send_window: i64,
    recv_window: i64,
    /// The client sent END_STREAM.
    remote_closed: bool,
    grpc: bool,
    body: Vec<u8>,
    too_large: bool,
    reply: Option<Reply>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the 24-byte client preface.
    Preface,
    /// The preface is in; the next frame must be SETTINGS (§3.4).
    FirstSettings,
    Open,
}

/// What the decoded request headers said.
#[derive(Debug, Default)]
struct Request {
    method: bool,
    path: bool,
    scheme: bool,
    connect: bool,
    grpc: bool,
    /// A pseudo-header after a regular field, an unknown or repeated one.
    malformed: bool,
    regular_seen: bool,
}

impl Request {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        if let Some(pseudo) = name.strip_prefix(b":") {
            let seen = match pseudo {
                b"method" => {
                    self.connect = value == b"CONNECT";
                    &mut self.method
                }
                b"path" => &mut self.path,
                b"scheme" => &mut self.scheme,
                b"authority" => return self.malformed |= self.regular_seen,
                _ => return self.malformed = true,
            };
            self.malformed |= *seen || self.regular_seen;
            *seen = true;
            return;
        }
        self.regular_seen = true;
        if name == b"content-type" && value.starts_with(b"application/grpc") {
            self.grpc = true;
        }
    }

    /// §8.3.1: :method, :scheme and :path, except CONNECT (:method and :authority).
    fn well_formed(&self) -> bool {
        !self.malformed && self.method && (self.connect || (self.path && self.scheme))
    }
}

const fn err(code: ErrorCode, reason: &'static str) -> H2Error {
    H2Error::new(code, reason)
}

/// Appends a frame written by `f` (at most `needed` bytes) to `out`.
fn append(out: &mut Vec<u8>, needed: usize, f: impl FnOnce(&mut [u8]) -> Result<usize, TooSmall>) {
    let at = out.len();
    out.resize(at + needed, 0);
    let n = f(&mut out[at..]).expect("the frame was sized");
    out.truncate(at + n);
}

/// One server connection's HTTP/2 state.
pub struct ServerConn {
    local: ServerSettings,
    answer: Answer,
    peer: PeerSettings,
    phase: Phase,
    send_window: i64,
    recv_window: i64,
    streams: Vec<Stream>,
    /// The highest stream id the client opened.
    last_stream: u32,
    decoder: Decoder,
    block: Vec<u8>,
    continuing: Option<(u32, bool)>,
    out: Vec<u8>,
    /// The fixed reply body (`Answer::Fixed`), made once.
    fixed: Vec<u8>,
    goaway_sent: bool,
    peer_goaway: bool,
    stats: ServerStats,
    scratch: Vec<u8>,
    /// Its own time per reply (`server-timing: sink;dur=MS` on each reply's headers):
    /// a clock in ns, and when the input being handled was read ([`Self::read_now`]).
    clock: Option<fn() -> u64>,
    read_ns: u64,
}

impl ServerConn {
    /// Each reply's headers say how long the sink took with its request, from when
    /// the input that completed it was read ([`Self::read_at`]) to the reply's headers,
    /// by `clock` (ns): `server-timing: sink;dur=MS`.
    pub fn timed(mut self, clock: fn() -> u64) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The input about to be handled was read now (by the clock of [`Self::timed`];
    /// nothing when not timed).
    pub fn read_now(&mut self) {
        if let Some(clock) = self.clock {
            self.read_ns = clock();
        }
    }

    /// `server-timing` of a reply whose headers go out now, when timed.
    fn own_time(&self) -> Option<String> {
        let now = (self.clock?)();
        let ns = now.saturating_sub(self.read_ns);
        Some(format!("sink;dur={}.{:06}", ns / 1_000_000, ns % 1_000_000))
    }

    /// A connection that has queued its SETTINGS (and the connection window's raise).
    pub fn new(local: ServerSettings, answer: Answer) -> Self {
        assert!(
            (WINDOW_DEFAULT..=WINDOW_MAX).contains(&local.initial_window_size)
                && (WINDOW_DEFAULT..=WINDOW_MAX).contains(&local.connection_window),
            "local windows {local:?}"
        );
        assert!((FRAME_SIZE_MIN..=FRAME_SIZE_MAX).contains(&local.max_frame_size));
        assert!(local.max_concurrent_streams >= 1);
        let decoder = Decoder::new(HEADER_TABLE_DEFAULT as usize);
        let fixed = match answer {
            Answer::Fixed(n) => vec![b'x'; n],
            Answer::Echo => Vec::new(),
        };
        let mut c = ServerConn {
            local,
            answer,
            peer: PeerSettings::default(),
            phase: Phase::Preface,
            send_window: WINDOW_DEFAULT as i64,
            recv_window: local.connection_window as i64,
            streams: Vec::with_capacity(local.max_concurrent_streams.min(1024) as usize),
            last_stream: 0,
            decoder,
            block: Vec::new(),
            continuing: None,
            out: Vec::with_capacity(64 << 10),
            fixed,
            goaway_sent: false,
            peer_goaway: false,
            stats: ServerStats::default(),
            scratch: Vec::with_capacity(256),
            clock: None,
            read_ns: 0,
        };
        let settings = [
            (
                SETTINGS_MAX_CONCURRENT_STREAMS,
                local.max_concurrent_streams,
            ),
            (SETTINGS_INITIAL_WINDOW_SIZE, local.initial_window_size),
            (SETTINGS_MAX_FRAME_SIZE, local.max_frame_size),
        ];
        append(&mut c.out, FRAME_HEADER_BYTES + 6 * settings.len(), |b| {
            frame::write_settings(b, &settings)
        });
        let raise = local.connection_window - WINDOW_DEFAULT;
        if raise > 0 {
            append(&mut c.out, 13, |b| frame::write_window_update(b, 0, raise));
        }
        c
    }

    /// Bytes to send, in order.
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// The first `n` bytes of [`Self::output`] were sent.
    pub fn written(&mut self, n: usize) {
        self.out.drain(..n);
    }

    /// The counts since the last call.
    pub fn take_stats(&mut self) -> ServerStats {
        std::mem::take(&mut self.stats)
    }

    pub fn peer(&self) -> &PeerSettings {
        &self.peer
    }

    /// Streams open (a request being read or a reply being sent).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Whether the connection has nothing left to do after a GOAWAY (either side's):
    /// no stream open and nothing to send.
    pub fn finished(&self) -> bool {
        (self.goaway_sent || self.peer_goaway) && self.streams.is_empty() && self.out.is_empty()
    }

    /// The graceful GOAWAY (NO_ERROR, the last stream opened): streams open finish,
    /// no new one is served.
    pub fn shutdown(&mut self) {
        if !self.goaway_sent {
            self.goaway(ErrorCode::NO_ERROR, b"");
        }
    }

    fn goaway(&mut self, code: ErrorCode, debug: &[u8]) {
        self.goaway_sent = true;
        let last = self.last_stream;
        append(&mut self.out, 17 + debug.len(), |b| {
            frame::write_goaway(b, last, code, debug)
        });
    }

    /// Consumes the preface and every whole frame at the front of `input`, answers
    /// them and moves the replies on; returns the bytes consumed (the rest is an
    /// incomplete frame). A connection error has queued its GOAWAY.
    pub fn receive(&mut self, input: &[u8]) -> Result<usize, H2Error> {
        let r = self.frames(input);
        self.pump();
        if let Err(e) = r {
            self.streams.clear();
            self.goaway(e.code, e.reason.as_bytes());
        }
        r
    }

    fn frames(&mut self, input: &[u8]) -> Result<usize, H2Error> {
        let mut at = 0;
        if self.phase == Phase::Preface {
            let n = input.len().min(PREFACE.len());
            if input[..n] != PREFACE[..n] {
                return Err(err(
                    ErrorCode::PROTOCOL_ERROR,
                    "no HTTP/2 client preface (an HTTP/1.1 client?)",
                ));
            }
            if n < PREFACE.len() {
                return Ok(0);
            }
            at = PREFACE.len();
            self.phase = Phase::FirstSettings;
        }
        loop {
            let rest = &input[at..];
            match frame::parse_frame(rest, self.local.max_frame_size) {
                FrameParsed::Incomplete => return Ok(at),
                FrameParsed::Invalid(e) => return Err(e),
                FrameParsed::Complete { frame, consumed } => {
                    self.frame(&frame, rest)?;
                    at += consumed;
                }
            }
        }
    }

    fn frame(&mut self, f: &Frame, input: &[u8]) -> Result<(), H2Error> {
        use ErrorCode as E;
        let payload = f.payload(input);
        if self.phase == Phase::FirstSettings {
            if f.kind != Kind::Settings || f.has(ACK) {
                return Err(err(
                    E::PROTOCOL_ERROR,
                    "the preface is not followed by SETTINGS",
                ));
            }
            self.phase = Phase::Open;
        }
        if let Some((stream, _)) = self.continuing
            && (f.kind != Kind::Continuation || f.stream != stream)
        {
            return Err(err(E::PROTOCOL_ERROR, "a frame inside a header block"));
        }
        match f.kind {
            Kind::Data => self.data(f, payload),
            Kind::Headers => {
                if f.stream.is_multiple_of(2) {
                    return Err(err(E::PROTOCOL_ERROR, "HEADERS on an even stream id"));
                }
                let end_stream = f.has(END_STREAM);
                if f.has(END_HEADERS) {
                    return self.headers(f.stream, payload, end_stream);
                }
                self.block.clear();
                self.append_block(payload)?;
                self.continuing = Some((f.stream, end_stream));
                Ok(())
            }
            Kind::Continuation => {
                let Some((stream, end_stream)) = self.continuing else {
                    return Err(err(E::PROTOCOL_ERROR, "CONTINUATION without HEADERS"));
                };
                self.append_block(payload)?;
                if f.has(END_HEADERS) {
                    self.continuing = None;
                    let block = std::mem::take(&mut self.block);
                    let r = self.headers(stream, &block, end_stream);
                    self.block = block;
                    return r;
                }
                Ok(())
            }
            Kind::Priority | Kind::Unknown(_) => Ok(()),
            Kind::RstStream => {
                if f.stream > self.last_stream {
                    return Err(err(E::PROTOCOL_ERROR, "RST_STREAM on an idle stream"));
                }
                if let Some(i) = self.find(f.stream) {
                    self.streams.swap_remove(i);
                    self.stats.streams_reset_by_peer += 1;
                }
                Ok(())
            }
            Kind::Settings if f.has(ACK) => Ok(()),
            Kind::Settings => {
                self.apply_settings(payload)?;
                append(&mut self.out, FRAME_HEADER_BYTES, frame::write_settings_ack);
                Ok(())
            }
            Kind::PushPromise => Err(err(E::PROTOCOL_ERROR, "PUSH_PROMISE from a client")),
            Kind::Ping => {
                if !f.has(ACK) {
                    let opaque: [u8; 8] = payload.try_into().expect("parse_frame checked 8 bytes");
                    append(&mut self.out, 17, |b| frame::write_ping(b, opaque, true));
                }
                Ok(())
            }
            Kind::GoAway => {
                self.peer_goaway = true;
                Ok(())
            }
            Kind::WindowUpdate => {
                self.window_update(f.stream, frame::u32_payload(payload) & WINDOW_MAX)
            }
        }
    }

    fn append_block(&mut self, fragment: &[u8]) -> Result<(), H2Error> {
        if self.block.len() + fragment.len() > self.local.header_block_bytes_max {
            return Err(err(
                ErrorCode::ENHANCE_YOUR_CALM,
                "header block longer than the server's limit",
            ));
        }
        self.block.extend_from_slice(fragment);
        Ok(())
    }

    fn find(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    fn reset(&mut self, stream: u32, code: ErrorCode) {
        append(&mut self.out, 13, |b| {
            frame::write_rst_stream(b, stream, code)
        });
    }

    /// A whole header block on `stream`: a new request, or a request's trailers.
    fn headers(&mut self, stream: u32, block: &[u8], end_stream: bool) -> Result<(), H2Error> {
        let mut req = Request::default();
        hpack::decode(&mut self.decoder, block, |n, v| req.field(n, v))?;
        if stream <= self.last_stream {
            // Trailers on an open stream; on one closed here (reset, refused, answered)
            // the block was decoded for the table's sake and is dropped.
            let Some(i) = self.find(stream) else {
                return Ok(());
            };
            if self.streams[i].remote_closed || !end_stream {
                // HEADERS after END_STREAM, or a second block that does not end it.
                self.streams.swap_remove(i);
                self.stats.stream_errors += 1;
                self.reset(stream, ErrorCode::PROTOCOL_ERROR);
                return Ok(());
            }
            self.streams[i].remote_closed = true;
            self.request_done(i);
            return Ok(());
        }
        self.last_stream = stream;
        self.stats.streams += 1;
        if self.goaway_sent {
            return Ok(()); // above the GOAWAY's last stream: not processed.
        }
        if self.streams.len() >= self.local.max_concurrent_streams as usize {
            self.stats.streams_refused += 1;
            self.reset(stream, ErrorCode::REFUSED_STREAM);
            return Ok(());
        }
        if !req.well_formed() {
            self.stats.stream_errors += 1;
            self.reset(stream, ErrorCode::PROTOCOL_ERROR);
            return Ok(());
        }
        self.streams.push(Stream {
            id: stream,
            send_window: self.peer.initial_window_size as i64,
            recv_window: self.local.initial_window_size as i64,
            remote_closed: end_stream,
            grpc: req.grpc,
            body: Vec::new(),
            too_large: false,
            reply: None,
        });
        if end_stream {
            self.request_done(self.streams.len() - 1);
        }
        Ok(())
    }

    fn data(&mut self, f: &Frame, payload: &[u8]) -> Result<(), H2Error> {
        use ErrorCode as E;
        if f.stream > self.last_stream {
            return Err(err(E::PROTOCOL_ERROR, "DATA on an idle stream"));
        }
        let len = f.length as i64;
        if len > self.recv_window {
            return Err(err(
                E::FLOW_CONTROL_ERROR,
                "DATA beyond the connection window",
            ));
        }
        // Taken from the connection's window whatever the stream's state (§6.9).
        self.recv_window -= len;
        let full = self.local.connection_window as i64;
        if self.recv_window <= full / 2 {
            let inc = (full - self.recv_window) as u32;
            self.recv_window = full;
            append(&mut self.out, 13, |b| frame::write_window_update(b, 0, inc));
        }
        self.stats.body_bytes_received += payload.len() as u64;
        let Some(i) = self.find(f.stream) else {
            return Ok(()); // a stream closed here: dropped.
        };
        let max = self.local.body_bytes_max;
        let s = &mut self.streams[i];
        if s.remote_closed {
            self.streams.swap_remove(i);
            self.stats.stream_errors += 1;
            self.reset(f.stream, E::STREAM_CLOSED);
            return Ok(());
        }
        if len > s.recv_window {
            return Err(err(E::FLOW_CONTROL_ERROR, "DATA beyond the stream window"));
        }
        s.recv_window -= len;
        let keep = s.grpc || self.answer == Answer::Echo;
        if s.body.len() + payload.len() > max {
            s.too_large = true;
            s.body = Vec::new();
        } else if keep && !s.too_large {
            s.body.extend_from_slice(payload);
        }
        let end_stream = f.has(END_STREAM);
        let full = self.local.initial_window_size as i64;
        if !end_stream && s.recv_window <= full / 2 {
            let inc = (full - s.recv_window) as u32;
            s.recv_window = full;
            append(&mut self.out, 13, |b| {
                frame::write_window_update(b, f.stream, inc)
            });
        }
        if end_stream {
            s.remote_closed = true;
            self.request_done(i);
        }
        Ok(())
    }

    fn window_update(&mut self, stream: u32, increment: u32) -> Result<(), H2Error> {
        use ErrorCode as E;
        if stream == 0 {
            if increment == 0 {
                return Err(err(
                    E::PROTOCOL_ERROR,
                    "WINDOW_UPDATE of 0 on the connection",
                ));
            }
            self.send_window += increment as i64;
            if self.send_window > WINDOW_MAX as i64 {
                return Err(err(E::FLOW_CONTROL_ERROR, "connection window above 2^31-1"));
            }
            return Ok(());
        }
        if stream > self.last_stream {
            return Err(err(E::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream"));
        }
        let Some(i) = self.find(stream) else {
            return Ok(());
        };
        let s = &mut self.streams[i];
        s.send_window += increment as i64;
        if increment == 0 || s.send_window > WINDOW_MAX as i64 {
            self.streams.swap_remove(i);
            self.stats.stream_errors += 1;
            let code = if increment == 0 {
                E::PROTOCOL_ERROR
            } else {
                E::FLOW_CONTROL_ERROR
            };
            self.reset(stream, code);
        }
        Ok(())
    }

    /// The client's SETTINGS, in order (§6.5.3); unknown identifiers are ignored.
    fn apply_settings(&mut self, payload: &[u8]) -> Result<(), H2Error> {
        use ErrorCode as E;
        for (id, value) in frame::settings(payload) {
            match id {
                SETTINGS_ENABLE_PUSH if value > 1 => {
                    return Err(err(E::PROTOCOL_ERROR, "ENABLE_PUSH neither 0 nor 1"));
                }
                SETTINGS_MAX_CONCURRENT_STREAMS => self.peer.max_concurrent_streams = value,
                SETTINGS_INITIAL_WINDOW_SIZE => {
                    if value > WINDOW_MAX {
                        return Err(err(
                            E::FLOW_CONTROL_ERROR,
                            "INITIAL_WINDOW_SIZE above 2^31-1",
                        ));
                    }
                    let delta = value as i64 - self.peer.initial_window_size as i64;
                    for s in &mut self.streams {
                        s.send_window += delta;
                        if s.send_window > WINDOW_MAX as i64 {
                            return Err(err(
                                E::FLOW_CONTROL_ERROR,
                                "INITIAL_WINDOW_SIZE change took a stream window above 2^31-1",
                            ));
                        }
                    }
                    self.peer.initial_window_size = value;
                }
                SETTINGS_MAX_FRAME_SIZE => {
                    if !(FRAME_SIZE_MIN..=FRAME_SIZE_MAX).contains(&value) {
                        return Err(err(
                            E::PROTOCOL_ERROR,
                            "MAX_FRAME_SIZE outside 16384..16777215",
                        ));
                    }
                    self.peer.max_frame_size = value;
                }
                super::frame::SETTINGS_HEADER_TABLE_SIZE => self.peer.header_table_size = value,
                super::frame::SETTINGS_MAX_HEADER_LIST_SIZE => {
                    self.peer.max_header_list_size = value
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Queues a header block on `stream` from `fields` (and the sink's own time, when
    /// timed).
    fn send_headers(&mut self, stream: u32, fields: &[(&str, &str)], end_stream: bool) {
        self.scratch.clear();
        hpack::encode_fields(&mut self.scratch, fields);
        if let Some(took) = self.own_time() {
            hpack::encode_fields(&mut self.scratch, &[("server-timing", &took)]);
        }
        let max = self.peer.max_frame_size;
        let needed = frame::headers_len(self.scratch.len(), max);
        let block = &self.scratch;
        append(&mut self.out, needed, |b| {
            frame::write_headers(b, stream, block, end_stream, max)
        });
    }

    /// The request on `self.streams[i]` is whole: its reply's headers go out now, its
    /// body as the windows allow ([`Self::pump`]).
    fn request_done(&mut self, i: usize) {
        let s = &mut self.streams[i];
        let (id, grpc, too_large) = (s.id, s.grpc, s.too_large);
        let body = std::mem::take(&mut s.body);
        if grpc {
            self.stats.grpc_calls += 1;
            let failure = if too_large {
                Some(("8", "request message larger than the sink keeps"))
            } else if !whole_grpc_messages(&body) {
                Some(("13", "request body is not whole length-prefixed messages"))
            } else {
                None
            };
            if let Some((code, message)) = failure {
                self.stats.refused_requests += 1;
                self.stats.requests += 1;
                self.streams.swap_remove(i);
                let fields = [
                    (":status", "200"),
                    ("content-type", "application/grpc"),
                    ("grpc-status", code),
                    ("grpc-message", message),
                ];
                self.send_headers(id, &fields, true);
                return;
            }
            let fields = [(":status", "200"), ("content-type", "application/grpc")];
            self.send_headers(id, &fields, false);
            self.streams[i].reply = Some(Reply {
                len: body.len(),
                body: Some(body),
                sent: 0,
                trailers: true,
            });
            return;
        }
        if too_large {
            self.stats.refused_requests += 1;
            self.stats.requests += 1;
            self.streams.swap_remove(i);
            self.send_headers(id, &[(":status", "413"), ("content-length", "0")], true);
            return;
        }
        let (body, len) = match self.answer {
            Answer::Echo => {
                let n = body.len();
                (Some(body), n)
            }
            Answer::Fixed(n) => (None, n),
        };
        let length = len.to_string();
        let fields = [(":status", "200"), ("content-length", length.as_str())];
        if len == 0 {
            self.stats.requests += 1;
            self.streams.swap_remove(i);
            self.send_headers(id, &fields, true);
            return;
        }
        self.send_headers(id, &fields, false);
        self.streams[i].reply = Some(Reply {
            body,
            len,
            sent: 0,
            trailers: false,
        });
    }

    /// Sends what the windows allow of every reply under way; a reply whose body is
    /// all out ends (trailers or an empty END_STREAM DATA) and its stream closes.
    fn pump(&mut self) {
        let mut i = 0;
        while i < self.streams.len() {
            if self.pump_one(i) {
                self.streams.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Moves `self.streams[i]`'s reply on; true when it is done.
    fn pump_one(&mut self, i: usize) -> bool {
        let max_frame = self.peer.max_frame_size as i64;
        let s = &mut self.streams[i];
        let Some(r) = s.reply.as_mut() else {
            return false;
        };
        let id = s.id;
        while r.sent < r.len {
            let room = s.send_window.min(self.send_window).min(max_frame);
            if room <= 0 {
                return false;
            }
            let n = (r.len - r.sent).min(room as usize);
            let bytes = match &r.body {
                Some(b) => &b[r.sent..r.sent + n],
                None => &self.fixed[r.sent..r.sent + n],
            };
            // END_STREAM on the last DATA unless trailers follow.
            let last = r.sent + n == r.len && !r.trailers;
            append(&mut self.out, FRAME_HEADER_BYTES + n, |b| {
                frame::write_data(b, id, bytes, last)
            });
            r.sent += n;
            s.send_window -= n as i64;
            self.send_window -= n as i64;
            self.stats.body_bytes_sent += n as u64;
        }
        // A reply starts at the request's END_STREAM: the stream is closed both ways.
        if r.trailers {
            // Trailers: the sink's time went out with the headers (counted once).
            let clock = self.clock.take();
            self.send_headers(id, &[("grpc-status", "0")], true);
            self.clock = clock;
        }
        self.stats.requests += 1;
        true
    }
}

/// Whether `body` is a sequence of whole gRPC messages (5-byte prefix, then that many
/// bytes), none cut short.
pub fn whole_grpc_messages(mut body: &[u8]) -> bool {
    while !body.is_empty() {
        let Some(p) = body.first_chunk::<GRPC_PREFIX_BYTES>() else {
            return false;
        };
        let len = u32::from_be_bytes([p[1], p[2], p[3], p[4]]) as usize;
        match body.get(GRPC_PREFIX_BYTES + len..) {
            Some(rest) => body = rest,
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::h2::encode_request_headers;
    use crate::proto::h2::frame::{SETTINGS_HEADER_TABLE_SIZE, parse_frame};

    /// What the server sent, frame by frame, header blocks decoded.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Out {
        Settings(Vec<(u16, u32)>),
        SettingsAck,
        PingAck([u8; 8]),
        WindowUpdate(u32, u32),
        Rst(u32, ErrorCode),
        GoAway(u32, ErrorCode),
        Headers(u32, Vec<(String, String)>, bool),
        Data(u32, Vec<u8>, bool),
    }

    /// A test client: writes frames, feeds them to the server, reads its answers.
    struct Client {
        server: ServerConn,
        decoder: Decoder,
        /// Bytes not yet consumed by the server.
        pending: Vec<u8>,
    }

    fn raw(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        v.extend_from_slice(&[kind, flags]);
        v.extend_from_slice(&stream.to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    fn settings(pairs: &[(u16, u32)]) -> Vec<u8> {
        let mut b = vec![0; 9 + 6 * pairs.len()];
        frame::write_settings(&mut b, pairs).unwrap();
        b
    }

    fn get(path: &str) -> Vec<u8> {
        encode_request_headers("GET", "http", "h", path, &[]).unwrap()
    }

    fn grpc_block() -> Vec<u8> {
        encode_request_headers(
            "POST",
            "http",
            "h",
            "/pkg.Svc/Echo",
            &[("content-type", "application/grpc"), ("te", "trailers")],
        )
        .unwrap()
    }

    fn msg(m: &[u8]) -> Vec<u8> {
        let mut v = vec![0];
        v.extend_from_slice(&(m.len() as u32).to_be_bytes());
        v.extend_from_slice(m);
        v
    }

    impl Client {
        fn new(local: ServerSettings, answer: Answer) -> Client {
            Client {
                server: ServerConn::new(local, answer),
                decoder: Decoder::new(HEADER_TABLE_DEFAULT as usize),
                pending: Vec::new(),
            }
        }

        /// A server past the preface and SETTINGS exchange, its opening output read.
        fn open(local: ServerSettings, answer: Answer, client: &[(u16, u32)]) -> Client {
            let mut c = Client::new(local, answer);
            let mut hello = PREFACE.to_vec();
            hello.extend(settings(client));
            let out = c.send(&hello).unwrap();
            assert!(out.contains(&Out::SettingsAck), "{out:?}");
            c
        }

        fn send(&mut self, bytes: &[u8]) -> Result<Vec<Out>, H2Error> {
            self.pending.extend_from_slice(bytes);
            // On an error the output (its GOAWAY) is left for the test to read.
            let n = self.server.receive(&self.pending)?;
            self.pending.drain(..n);
            Ok(self.read())
        }

        fn headers(&mut self, stream: u32, block: &[u8], end: bool) -> Vec<Out> {
            let flags = END_HEADERS | if end { END_STREAM } else { 0 };
            self.send(&raw(1, flags, stream, block)).unwrap()
        }

        fn data(&mut self, stream: u32, body: &[u8], end: bool) -> Vec<Out> {
            self.send(&raw(0, if end { END_STREAM } else { 0 }, stream, body))
                .unwrap()
        }

        fn read(&mut self) -> Vec<Out> {
            let bytes = self.server.output().to_vec();
            self.server.written(bytes.len());
            let mut at = 0;
            let mut outs = Vec::new();
            while at < bytes.len() {
                let FrameParsed::Complete { frame: f, consumed } =
                    parse_frame(&bytes[at..], FRAME_SIZE_MAX)
                else {
                    panic!("the server wrote a broken frame at {at}");
                };
                let p = f.payload(&bytes[at..]);
                outs.push(match f.kind {
                    Kind::Settings if f.has(ACK) => Out::SettingsAck,
                    Kind::Settings => Out::Settings(frame::settings(p).collect()),
                    Kind::Ping => {
                        assert!(f.has(ACK));
                        Out::PingAck(p.try_into().unwrap())
                    }
                    Kind::WindowUpdate => Out::WindowUpdate(f.stream, frame::u32_payload(p)),
                    Kind::RstStream => Out::Rst(f.stream, ErrorCode(frame::u32_payload(p))),
                    Kind::GoAway => {
                        let g = frame::goaway(p);
                        Out::GoAway(g.last_stream_id, g.code)
                    }
                    Kind::Headers => {
                        assert!(f.has(END_HEADERS), "the blocks here fit one frame");
                        let mut fields = Vec::new();
                        hpack::decode(&mut self.decoder, p, |n, v| {
                            fields.push((
                                String::from_utf8(n.to_vec()).unwrap(),
                                String::from_utf8(v.to_vec()).unwrap(),
                            ))
                        })
                        .unwrap();
                        Out::Headers(f.stream, fields, f.has(END_STREAM))
                    }
                    Kind::Data => Out::Data(f.stream, p.to_vec(), f.has(END_STREAM)),
                    other => panic!("the server sent {other:?}"),
                });
                at += consumed;
            }
            outs
        }
    }

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|&(n, v)| (n.into(), v.into())).collect()
    }

    fn ok(len: usize) -> Vec<(String, String)> {
        fields(&[(":status", "200"), ("content-length", &len.to_string())])
    }

    fn small() -> ServerSettings {
        ServerSettings {
            initial_window_size: WINDOW_DEFAULT,
            connection_window: WINDOW_DEFAULT,
            ..ServerSettings::default()
        }
    }

    #[test]
    fn the_opening_exchange() {
        let mut c = Client::new(ServerSettings::default(), Answer::Echo);
        // The server speaks first: its SETTINGS and the connection window's raise.
        assert_eq!(
            c.read(),
            vec![
                Out::Settings(vec![
                    (SETTINGS_MAX_CONCURRENT_STREAMS, 256),
                    (SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20),
                    (SETTINGS_MAX_FRAME_SIZE, FRAME_SIZE_MIN),
                ]),
                Out::WindowUpdate(0, (1 << 24) - WINDOW_DEFAULT),
            ]
        );
        // The preface split anywhere is waited for, not refused.
        assert_eq!(c.send(&PREFACE[..10]), Ok(vec![]));
        let mut rest = PREFACE[10..].to_vec();
        rest.extend(settings(&[(SETTINGS_HEADER_TABLE_SIZE, 0)]));
        rest.extend(raw(6, 0, 0, b"12345678"));
        rest.extend(raw(6, ACK, 0, b"ignored!"));
        rest.extend(raw(4, ACK, 0, b""));
        assert_eq!(
            c.send(&rest),
            Ok(vec![Out::SettingsAck, Out::PingAck(*b"12345678")])
        );
        assert!(c.pending.is_empty());
    }

    #[test]
    fn a_client_that_is_not_http2_is_refused() {
        let mut c = Client::new(small(), Answer::Echo);
        c.read();
        let e = c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap_err();
        assert_eq!(e.code, ErrorCode::PROTOCOL_ERROR);
        assert!(e.reason.contains("preface"), "{e}");
        assert_eq!(c.read(), vec![Out::GoAway(0, ErrorCode::PROTOCOL_ERROR)]);
        // The preface, then anything but SETTINGS.
        let mut c = Client::new(small(), Answer::Echo);
        c.read();
        let mut b = PREFACE.to_vec();
        b.extend(raw(6, 0, 0, b"12345678"));
        assert_eq!(c.send(&b).unwrap_err().code, ErrorCode::PROTOCOL_ERROR);
    }

    #[test]
    fn a_get_is_answered_with_the_fixed_body() {
        let mut c = Client::open(small(), Answer::Fixed(5), &[]);
        assert_eq!(
            c.headers(1, &get("/"), true),
            vec![
                Out::Headers(1, ok(5), false),
                Out::Data(1, b"xxxxx".to_vec(), true)
            ]
        );
        // A body is read and dropped in fixed mode; the reply is the same.
        assert_eq!(c.headers(3, &get("/"), false), vec![]);
        assert_eq!(
            c.data(3, b"ignored", true),
            vec![
                Out::Headers(3, ok(5), false),
                Out::Data(3, b"xxxxx".to_vec(), true)
            ]
        );
        let s = c.server.take_stats();
        assert_eq!((s.requests, s.streams, s.grpc_calls), (2, 2, 0));
        assert_eq!((s.body_bytes_received, s.body_bytes_sent), (7, 10));
        assert_eq!(c.server.take_stats(), ServerStats::default());
        assert_eq!(c.server.open_streams(), 0);
    }

    #[test]
    fn echo_answers_the_request_body_and_an_empty_one_with_headers_only() {
        let mut c = Client::open(small(), Answer::Echo, &[]);
        assert_eq!(
            c.headers(1, &get("/"), true),
            vec![Out::Headers(1, ok(0), true)]
        );
        c.headers(3, &get("/"), false);
        assert_eq!(c.data(3, b"hel", false), vec![]);
        assert_eq!(
            c.data(3, b"lo", true),
            vec![
                Out::Headers(3, ok(5), false),
                Out::Data(3, b"hello".to_vec(), true)
            ]
        );
    }

    #[test]
    fn grpc_unary_is_echoed_with_trailers() {
        let mut c = Client::open(small(), Answer::Fixed(3), &[]);
        c.headers(1, &grpc_block(), false);
        let mut body = msg(b"ping");
        body.extend(msg(b""));
        let out = c.data(1, &body, true);
        assert_eq!(
            out,
            vec![
                Out::Headers(
                    1,
                    fields(&[(":status", "200"), ("content-type", "application/grpc")]),
                    false
                ),
                Out::Data(1, body.clone(), false),
                Out::Headers(1, fields(&[("grpc-status", "0")]), true),
            ]
        );
        let s = c.server.take_stats();
        assert_eq!((s.requests, s.grpc_calls, s.refused_requests), (1, 1, 0));
        // A body that is not whole messages: trailers-only, INTERNAL.
        c.headers(3, &grpc_block(), false);
        let out = c.data(3, &msg(b"ping")[..6], true);
        let Out::Headers(3, f, true) = &out[0] else {
            panic!("{out:?}")
        };
        assert!(f.contains(&("grpc-status".into(), "13".into())), "{f:?}");
        assert_eq!(out.len(), 1);
        assert_eq!(c.server.take_stats().refused_requests, 1);
    }

    #[test]
    fn grpc_message_framing() {
        assert!(whole_grpc_messages(b""));
        assert!(whole_grpc_messages(&msg(b"abc")));
        assert!(whole_grpc_messages(&[msg(b"a"), msg(b"")].concat()));
        assert!(!whole_grpc_messages(&msg(b"abc")[..7]));
        assert!(!whole_grpc_messages(&[0, 0, 0]));
        assert!(!whole_grpc_messages(&[0, 0xff, 0xff, 0xff, 0xff, 1]));
    }

    #[test]
    fn a_body_over_the_bound_is_refused_and_dropped() {
        let local = ServerSettings {
            body_bytes_max: 4,
            ..small()
        };
        let mut c = Client::open(local, Answer::Echo, &[]);
        c.headers(1, &get("/"), false);
        c.data(1, b"abc", false);
        c.data(1, b"de", false);
        assert_eq!(
            c.data(1, b"f", true),
            vec![Out::Headers(
                1,
                fields(&[(":status", "413"), ("content-length", "0")]),
                true
            )]
        );
        c.headers(3, &grpc_block(), false);
        let out = c.data(3, &msg(b"too long"), true);
        let Out::Headers(3, f, true) = &out[0] else {
            panic!("{out:?}")
        };
        assert!(f.contains(&("grpc-status".into(), "8".into())), "{f:?}");
        assert_eq!(c.server.take_stats().refused_requests, 2);
    }

    #[test]
    fn replies_wait_for_the_clients_windows_and_frame_size() {
        // The stream window: 10 bytes at a time.
        let mut c = Client::open(
            small(),
            Answer::Fixed(25),
            &[(SETTINGS_INITIAL_WINDOW_SIZE, 10)],
        );
        let out = c.headers(1, &get("/"), true);
        assert_eq!(out[1], Out::Data(1, vec![b'x'; 10], false));
        assert_eq!(out.len(), 2);
        let inc = |stream: u32, n: u32| raw(8, 0, stream, &n.to_be_bytes());
        assert_eq!(
            c.send(&inc(1, 10)).unwrap(),
            vec![Out::Data(1, vec![b'x'; 10], false)]
        );
        // A smaller INITIAL_WINDOW_SIZE takes the window below zero (§6.9.2): 0 - 5,
        // then + 5 = 0 sends nothing.
        assert_eq!(
            c.send(&settings(&[(SETTINGS_INITIAL_WINDOW_SIZE, 5)]))
                .unwrap(),
            vec![Out::SettingsAck]
        );
        assert_eq!(c.send(&inc(1, 5)).unwrap(), vec![]);
        assert_eq!(
            c.send(&inc(1, 5)).unwrap(),
            vec![Out::Data(1, vec![b'x'; 5], true)]
        );
        assert_eq!(c.server.take_stats().requests, 1);

        // The connection window (65,535) and MAX_FRAME_SIZE (16,384).
        let mut c = Client::open(
            small(),
            Answer::Fixed(70_000),
            &[(SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20)],
        );
        let out = c.headers(1, &get("/"), true);
        let sizes: Vec<usize> = out
            .iter()
            .filter_map(|o| match o {
                Out::Data(_, d, _) => Some(d.len()),
                _ => None,
            })
            .collect();
        assert_eq!(sizes, vec![16_384, 16_384, 16_384, 16_383]);
        // The stream's window is wide open; the connection's is at 0.
        assert_eq!(c.send(&inc(1, 1)).unwrap(), vec![]);
        let out = c.send(&inc(0, 100_000)).unwrap();
        assert_eq!(out, vec![Out::Data(1, vec![b'x'; 70_000 - 65_535], true)]);
        // A larger MAX_FRAME_SIZE from the client is used.
        let mut c = Client::open(
            ServerSettings::default(),
            Answer::Fixed(40_000),
            &[
                (SETTINGS_MAX_FRAME_SIZE, 32_768),
                (SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20),
            ],
        );
        c.send(&inc(0, 1 << 20)).unwrap();
        let out = c.headers(1, &get("/"), true);
        assert_eq!(out.len(), 3, "{:?}", out.len());
    }

    #[test]
    fn received_data_restores_the_windows_at_half() {
        let mut c = Client::open(small(), Answer::Echo, &[]);
        c.headers(1, &get("/"), false);
        let chunk = vec![7u8; 16_384];
        assert_eq!(c.data(1, &chunk, false), vec![]);
        // 32,768 used of 65,535: both windows are at or below half.
        assert_eq!(
            c.data(1, &chunk, false),
            vec![Out::WindowUpdate(0, 32_768), Out::WindowUpdate(1, 32_768)]
        );
        // More than a window at once is a connection error.
        let local = ServerSettings {
            max_frame_size: 100_000,
            ..small()
        };
        let mut c = Client::open(local, Answer::Echo, &[]);
        c.headers(1, &get("/"), false);
        let e = c.send(&raw(0, 0, 1, &[0; 65_536])).unwrap_err();
        assert_eq!(e.code, ErrorCode::FLOW_CONTROL_ERROR);
        assert_eq!(
            c.read(),
            vec![Out::GoAway(1, ErrorCode::FLOW_CONTROL_ERROR)]
        );
    }

    #[test]
    fn streams_beyond_the_limit_are_refused() {
        let local = ServerSettings {
            max_concurrent_streams: 1,
            ..small()
        };
        let mut c = Client::open(local, Answer::Echo, &[]);
        assert_eq!(c.headers(1, &get("/"), false), vec![]);
        assert_eq!(
            c.headers(3, &get("/"), true),
            vec![Out::Rst(3, ErrorCode::REFUSED_STREAM)]
        );
        c.data(1, b"", true);
        // The first one done, the next is served.
        assert_eq!(
            c.headers(5, &get("/"), true),
            vec![Out::Headers(5, ok(0), true)]
        );
        let s = c.server.take_stats();
        assert_eq!((s.streams, s.streams_refused, s.requests), (3, 1, 2));
    }

    /// RFC 7541 C.3: the client's blocks index its dynamic table; a block refused
    /// (stream limit) is still decoded, or the next one would not decode.
    #[test]
    fn the_hpack_table_stays_in_step() {
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let local = ServerSettings {
            max_concurrent_streams: 1,
            ..small()
        };
        let mut c = Client::open(local, Answer::Echo, &[]);
        c.headers(1, &hex("828684410f7777772e6578616d706c652e636f6d"), false);
        assert_eq!(
            c.headers(3, &hex("828684be58086e6f2d6361636865"), true),
            vec![Out::Rst(3, ErrorCode::REFUSED_STREAM)]
        );
        c.data(1, b"", true);
        let block3 = hex("828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565");
        assert_eq!(
            c.headers(5, &block3, true),
            vec![Out::Headers(5, ok(0), true)]
        );
    }

    #[test]
    fn a_header_block_continues_and_nothing_may_interleave() {
        let mut c = Client::open(small(), Answer::Echo, &[]);
        let block = get("/a-longer-path");
        let (a, b) = block.split_at(3);
        assert_eq!(c.send(&raw(1, END_STREAM, 1, a)).unwrap(), vec![]);
        assert_eq!(
            c.send(&raw(9, END_HEADERS, 1, b)).unwrap(),
            vec![Out::Headers(1, ok(0), true)]
        );
        c.send(&raw(1, END_STREAM, 3, a)).unwrap();
        let e = c.send(&raw(6, 0, 0, b"12345678")).unwrap_err();
        assert_eq!(e.code, ErrorCode::PROTOCOL_ERROR);
        // The GOAWAY names the last stream opened: 1 (3's block never finished).
        assert_eq!(c.read(), vec![Out::GoAway(1, ErrorCode::PROTOCOL_ERROR)]);
    }

    #[test]
    fn malformed_requests_and_stream_states() {
        let mut c = Client::open(small(), Answer::Echo, &[]);
        // No :path: a stream error.
        let mut block = Vec::new();
        hpack::encode_fields(&mut block, &[(":method", "GET"), (":scheme", "http")]);
        assert_eq!(
            c.headers(1, &block, true),
            vec![Out::Rst(1, ErrorCode::PROTOCOL_ERROR)]
        );
        // A pseudo-header after a regular field.
        block.clear();
        hpack::encode_fields(
            &mut block,
            &[
                (":method", "GET"),
                ("x", "y"),
                (":path", "/"),
                (":scheme", "http"),
            ],
        );
        assert_eq!(
            c.headers(3, &block, true),
            vec![Out::Rst(3, ErrorCode::PROTOCOL_ERROR)]
        );
        // DATA after END_STREAM while the reply waits for a window.
        let mut c = Client::open(
            small(),
            Answer::Fixed(10),
            &[(SETTINGS_INITIAL_WINDOW_SIZE, 0)],
        );
        assert_eq!(c.headers(1, &get("/"), true).len(), 1);
        assert_eq!(
            c.data(1, b"late", false),
            vec![Out::Rst(1, ErrorCode::STREAM_CLOSED)]
        );
        // Frames on streams never opened are connection errors.
        for f in [
            raw(0, 0, 9, b"x"),
            raw(3, 0, 9, &[0; 4]),
            raw(8, 0, 9, &[0, 0, 0, 1]),
        ] {
            let mut c = Client::open(small(), Answer::Echo, &[]);
            assert_eq!(c.send(&f).unwrap_err().code, ErrorCode::PROTOCOL_ERROR);
        }
        let mut c = Client::open(small(), Answer::Echo, &[]);
        assert_eq!(
            c.send(&raw(1, END_HEADERS, 2, &get("/"))).unwrap_err().code,
            ErrorCode::PROTOCOL_ERROR
        );
    }

    #[test]
    fn a_reset_from_the_client_drops_the_reply() {
        let mut c = Client::open(
            small(),
            Answer::Fixed(10),
            &[(SETTINGS_INITIAL_WINDOW_SIZE, 0)],
        );
        c.headers(1, &get("/"), true);
        assert_eq!(c.server.open_streams(), 1);
        c.send(&raw(3, 0, 1, &ErrorCode::CANCEL.0.to_be_bytes()))
            .unwrap();
        assert_eq!(c.server.open_streams(), 0);
        // A window opening later sends nothing for it.
        assert_eq!(c.send(&raw(8, 0, 1, &[0, 0, 0, 9])).unwrap(), vec![]);
        let s = c.server.take_stats();
        assert_eq!((s.streams_reset_by_peer, s.requests), (1, 0));
    }

    #[test]
    fn graceful_shutdown() {
        let mut c = Client::open(
            small(),
            Answer::Fixed(1),
            &[(SETTINGS_INITIAL_WINDOW_SIZE, 0)],
        );
        c.headers(1, &get("/"), true);
        c.headers(3, &get("/"), true);
        c.server.shutdown();
        assert!(!c.server.finished());
        assert_eq!(c.read(), vec![Out::GoAway(3, ErrorCode::NO_ERROR)]);
        // A stream above the last one is not served; those below finish.
        assert_eq!(c.headers(5, &get("/"), true), vec![]);
        let out = c
            .send(&settings(&[(SETTINGS_INITIAL_WINDOW_SIZE, 1)]))
            .unwrap();
        assert_eq!(
            out,
            vec![
                Out::SettingsAck,
                Out::Data(1, b"x".to_vec(), true),
                Out::Data(3, b"x".to_vec(), true)
            ]
            .into_iter()
            .filter(|o| out.contains(o))
            .collect::<Vec<_>>()
        );
        assert_eq!(out.len(), 3);
        assert!(c.server.finished());
    }
}
