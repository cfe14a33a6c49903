//! One HTTP/2 client connection's state, fed the frames [`parse_frame`] finds.
//!
//! [`Connection::receive`] applies a frame and answers with an [`Event`] saying what
//! the caller must do (ACK a SETTINGS or a PING, send the WINDOW_UPDATEs a DATA frame
//! made due, count a reset or a GOAWAY, complete a stream), or with a connection error.
//! The caller writes the answers with the writers in [`frame`](super::frame).
//!
//! Flow control (RFC 9113 §6.9), both directions, connection and streams:
//! - send: each window starts at the peer's INITIAL_WINDOW_SIZE (streams) or 65,535
//!   (the connection), shrinks by what [`Connection::consume_send`] records, grows by
//!   the peer's WINDOW_UPDATEs; a change of INITIAL_WINDOW_SIZE moves every open
//!   stream's window by the difference (§6.9.2), which may leave it negative. Above
//!   2^31-1 is a FLOW_CONTROL_ERROR.
//! - receive: DATA (padding included) is taken from the local windows; a load
//!   generator drops the body as it reads it, so the bytes count as consumed at once,
//!   and once half of a window is used a WINDOW_UPDATE restoring it is due (returned
//!   in [`Event::Data`]). DATA beyond a window is a FLOW_CONTROL_ERROR.
//!
//! Streams live in a vector sized once (`streams_max`, capped by the peer's
//! MAX_CONCURRENT_STREAMS); lookups scan it, which for the hundred-odd streams a
//! connection carries is a few cache lines and needs no hashing or allocation.
//!
//! [`parse_frame`]: super::parse_frame
use super::decoder::Decoder;
use super::frame::{
    self, ACK, END_HEADERS, END_STREAM, Frame, Kind, SETTINGS_ENABLE_PUSH,
    SETTINGS_HEADER_TABLE_SIZE, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_CONCURRENT_STREAMS,
    SETTINGS_MAX_FRAME_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE, TooSmall,
};
use super::hpack::{self, Summary};
use super::{
    ErrorCode, FRAME_SIZE_MAX, FRAME_SIZE_MIN, H2Error, HEADER_TABLE_DEFAULT, WINDOW_DEFAULT,
    WINDOW_MAX,
};

/// What this side advertises and enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalSettings {
    /// Every stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE), 65,535 or more:
    /// the peer may send up to 65,535 before it has read our SETTINGS.
    pub initial_window_size: u32,
    /// The connection's receive window; above 65,535 it is raised by a WINDOW_UPDATE
    /// right after the preface.
    pub connection_window: u32,
    /// Largest frame accepted (SETTINGS_MAX_FRAME_SIZE); the receive buffer must hold
    /// this plus the 9-byte header.
    pub max_frame_size: u32,
    /// The HPACK decoder's dynamic table (SETTINGS_HEADER_TABLE_SIZE).
    pub header_table_size: u32,
    /// Longest header block kept across CONTINUATION frames; the buffer is allocated
    /// once at this size, and a longer block is a connection error.
    pub header_block_bytes_max: usize,
}

impl Default for LocalSettings {
    fn default() -> Self {
        LocalSettings {
            initial_window_size: WINDOW_DEFAULT,
            connection_window: WINDOW_DEFAULT,
            max_frame_size: FRAME_SIZE_MIN,
            header_table_size: HEADER_TABLE_DEFAULT,
            header_block_bytes_max: 64 << 10,
        }
    }
}

/// The peer's SETTINGS as applied so far (RFC defaults until its first SETTINGS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerSettings {
    /// The table our encoder may use; ours uses none (literals without indexing).
    pub header_table_size: u32,
    /// `u32::MAX` while the peer has not set one (unlimited).
    pub max_concurrent_streams: u32,
    pub initial_window_size: u32,
    /// Largest frame we may send.
    pub max_frame_size: u32,
    /// `u32::MAX` while the peer has not set one (unlimited).
    pub max_header_list_size: u32,
}

impl Default for PeerSettings {
    fn default() -> Self {
        PeerSettings {
            header_table_size: HEADER_TABLE_DEFAULT,
            max_concurrent_streams: u32::MAX,
            initial_window_size: WINDOW_DEFAULT,
            max_frame_size: FRAME_SIZE_MIN,
            max_header_list_size: u32::MAX,
        }
    }
}

/// What a received frame asks of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// The peer's SETTINGS were applied: send a SETTINGS ACK.
    Settings,
    /// The peer acknowledged our SETTINGS.
    SettingsAck,
    /// The peer's PING: answer with a PING ACK echoing these bytes.
    Ping([u8; 8]),
    /// The answer to our PING (a keepalive's round trip).
    PingAck([u8; 8]),
    /// A whole header block (HEADERS and any CONTINUATIONs) on `stream`: a response's
    /// headers, an interim 1xx, or trailers. `open` is false for a stream this side
    /// already closed (the block was decoded only to keep the HPACK table in step).
    Headers {
        stream: u32,
        summary: Summary,
        end_stream: bool,
        open: bool,
    },
    /// A header block continues in CONTINUATION frames; nothing to do yet.
    HeadersPending,
    /// DATA on `stream`, its bytes at `start..end` of the input. Send a WINDOW_UPDATE
    /// on the connection when `connection_update` > 0 and on the stream when
    /// `stream_update` > 0 (each the increment). `open` as for `Headers`.
    Data {
        stream: u32,
        start: usize,
        end: usize,
        end_stream: bool,
        open: bool,
        connection_update: u32,
        stream_update: u32,
    },
    /// A send window grew (`stream` 0: the connection's): blocked DATA may go on.
    WindowUpdate { stream: u32 },
    /// The peer reset `stream` with `code`; the stream is closed.
    Reset { stream: u32, code: ErrorCode },
    /// The peer is closing the connection: streams above `last_stream_id` were not
    /// processed and may be retried elsewhere ([`Connection::retry_after_goaway`]);
    /// no new stream opens here.
    GoAway {
        last_stream_id: u32,
        code: ErrorCode,
        debug: &'a [u8],
    },
    /// A stream error (§5.4.2): send RST_STREAM with `code` and fail the stream, which
    /// is already closed here.
    StreamError {
        stream: u32,
        code: ErrorCode,
        reason: &'static str,
    },
    /// Nothing to do (PRIORITY, a frame of an unknown type, a WINDOW_UPDATE for a
    /// stream already closed).
    Ignored,
}

/// Why [`Connection::open_stream`] opened nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenRefused {
    /// As many streams are open as the peer's MAX_CONCURRENT_STREAMS or the local
    /// `streams_max` allow.
    Full,
    /// The peer sent GOAWAY.
    GoingAway,
    /// Stream ids ran out (2^31 - 1): the connection must be replaced.
    IdsExhausted,
}

#[derive(Debug, Clone, Copy)]
struct Stream {
    id: u32,
    /// May go negative after INITIAL_WINDOW_SIZE shrinks (§6.9.2).
    send_window: i64,
    recv_window: i64,
    local_closed: bool,
    remote_closed: bool,
}

/// One client connection's HTTP/2 state.
pub struct Connection {
    local: LocalSettings,
    peer: PeerSettings,
    send_window: i64,
    recv_window: i64,
    streams: Vec<Stream>,
    streams_max: usize,
    next_stream_id: u32,
    decoder: Decoder,
    /// A header block being gathered across CONTINUATION frames.
    block: Vec<u8>,
    /// The stream and END_STREAM flag of that block.
    continuing: Option<(u32, bool)>,
    /// The lowest last-stream-id of the GOAWAYs received.
    goaway: Option<u32>,
}

const fn err(code: ErrorCode, reason: &'static str) -> H2Error {
    H2Error::new(code, reason)
}

impl Connection {
    /// A connection that will have at most `streams_max` streams open.
    pub fn new(local: LocalSettings, streams_max: usize) -> Self {
        assert!(
            (WINDOW_DEFAULT..=WINDOW_MAX).contains(&local.initial_window_size)
                && (WINDOW_DEFAULT..=WINDOW_MAX).contains(&local.connection_window),
            "local windows {local:?}"
        );
        assert!((FRAME_SIZE_MIN..=FRAME_SIZE_MAX).contains(&local.max_frame_size));
        assert!(streams_max >= 1);
        // The peer's encoder starts at the default table size and may use all of it
        // until it has read our SETTINGS; a smaller HEADER_TABLE_SIZE binds it only
        // from the SETTINGS ACK on, when it must shrink the table with a size update
        // (RFC 7541 §4.2). So the bound is the larger of the two until that ACK.
        let decoder = Decoder::new(local.header_table_size.max(HEADER_TABLE_DEFAULT) as usize);
        Connection {
            local,
            peer: PeerSettings::default(),
            send_window: WINDOW_DEFAULT as i64,
            recv_window: local.connection_window as i64,
            streams: Vec::with_capacity(streams_max),
            streams_max,
            next_stream_id: 1,
            decoder,
            block: Vec::with_capacity(local.header_block_bytes_max),
            continuing: None,
            goaway: None,
        }
    }

    pub fn local(&self) -> &LocalSettings {
        &self.local
    }

    pub fn peer(&self) -> &PeerSettings {
        &self.peer
    }

    /// The SETTINGS this side sends: push off, and the local values.
    pub fn local_settings(&self) -> [(u16, u32); 4] {
        [
            (SETTINGS_ENABLE_PUSH, 0),
            (SETTINGS_INITIAL_WINDOW_SIZE, self.local.initial_window_size),
            (SETTINGS_MAX_FRAME_SIZE, self.local.max_frame_size),
            (SETTINGS_HEADER_TABLE_SIZE, self.local.header_table_size),
        ]
    }

    /// What opens the connection: the preface, our SETTINGS, and a WINDOW_UPDATE
    /// raising the connection's receive window when it is above the default.
    pub fn write_preface(&self, out: &mut [u8]) -> Result<usize, TooSmall> {
        let mut n = frame::write_preface(out, &self.local_settings())?;
        let raise = self.local.connection_window - WINDOW_DEFAULT;
        if raise > 0 {
            n += frame::write_window_update(&mut out[n..], 0, raise).map_err(|t| TooSmall {
                needed: n + t.needed,
            })?;
        }
        Ok(n)
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Opens the next stream (odd ids, increasing), its windows at the current
    /// settings.
    pub fn open_stream(&mut self) -> Result<u32, OpenRefused> {
        if self.goaway.is_some() {
            return Err(OpenRefused::GoingAway);
        }
        let limit = self
            .streams_max
            .min(self.peer.max_concurrent_streams as usize);
        if self.streams.len() >= limit {
            return Err(OpenRefused::Full);
        }
        if self.next_stream_id > WINDOW_MAX {
            return Err(OpenRefused::IdsExhausted);
        }
        let id = self.next_stream_id;
        self.next_stream_id += 2;
        self.streams.push(Stream {
            id,
            send_window: self.peer.initial_window_size as i64,
            recv_window: self.local.initial_window_size as i64,
            local_closed: false,
            remote_closed: false,
        });
        Ok(id)
    }

    fn find(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    /// A stream id this client never opened: even (server-initiated, and push is off)
    /// or not handed out yet.
    fn idle(&self, id: u32) -> bool {
        id.is_multiple_of(2) || id >= self.next_stream_id
    }

    fn close_if_done(&mut self, i: usize) {
        if self.streams[i].local_closed && self.streams[i].remote_closed {
            self.streams.swap_remove(i);
        }
    }

    /// This side sent END_STREAM on `stream` (the request is whole).
    pub fn end_local(&mut self, stream: u32) {
        if let Some(i) = self.find(stream) {
            self.streams[i].local_closed = true;
            self.close_if_done(i);
        }
    }

    /// Forgets `stream` (this side reset it, or gave up on it).
    pub fn close_stream(&mut self, stream: u32) {
        if let Some(i) = self.find(stream) {
            self.streams.swap_remove(i);
        }
    }

    /// Whether `stream` is open.
    pub fn is_open(&self, stream: u32) -> bool {
        self.find(stream).is_some()
    }

    /// DATA bytes `stream` may send now: the smaller of its window, the connection's
    /// and the peer's MAX_FRAME_SIZE (0 when a window is exhausted or negative).
    pub fn send_capacity(&self, stream: u32) -> usize {
        let Some(i) = self.find(stream) else { return 0 };
        self.streams[i]
            .send_window
            .min(self.send_window)
            .min(self.peer.max_frame_size as i64)
            .max(0) as usize
    }

    /// Records `n` DATA bytes sent on `stream`, at most [`Self::send_capacity`].
    pub fn consume_send(&mut self, stream: u32, n: usize) {
        assert!(
            n <= self.send_capacity(stream),
            "DATA beyond the send window"
        );
        let i = self
            .find(stream)
            .expect("capacity > 0 means the stream is open");
        self.streams[i].send_window -= n as i64;
        self.send_window -= n as i64;
    }

    /// `stream`'s own send window (0 for a stream not open).
    pub fn stream_send_window(&self, stream: u32) -> i64 {
        self.find(stream).map_or(0, |i| self.streams[i].send_window)
    }

    /// The connection's send window (for tests and stall accounting).
    pub fn connection_send_window(&self) -> i64 {
        self.send_window
    }

    /// Open streams the peer's GOAWAY says it did not process (ids above its
    /// last-stream-id): to be retried on a new connection, not counted as failed.
    /// Empty before a GOAWAY.
    pub fn retry_after_goaway(&self) -> impl Iterator<Item = u32> + '_ {
        let last = self.goaway.unwrap_or(u32::MAX);
        self.streams
            .iter()
            .map(|s| s.id)
            .filter(move |&id| id > last)
    }

    /// Applies one frame from `input` (the slice given to [`parse_frame`], which the
    /// frame's ranges index). `each` sees every decoded header field with its stream.
    ///
    /// [`parse_frame`]: super::parse_frame
    pub fn receive<'a>(
        &mut self,
        f: &Frame,
        input: &'a [u8],
        mut each: impl FnMut(u32, &[u8], &[u8]),
    ) -> Result<Event<'a>, H2Error> {
        use ErrorCode as E;
        let payload = f.payload(input);
        if let Some((stream, _)) = self.continuing
            && (f.kind != Kind::Continuation || f.stream != stream)
        {
            return Err(err(E::PROTOCOL_ERROR, "a frame inside a header block"));
        }
        match f.kind {
            Kind::Data => self.data(f),
            Kind::Headers => {
                if self.idle(f.stream) {
                    return Err(err(E::PROTOCOL_ERROR, "HEADERS on a stream never opened"));
                }
                let end_stream = f.has(END_STREAM);
                if f.has(END_HEADERS) {
                    let summary =
                        hpack::decode(&mut self.decoder, payload, |n, v| each(f.stream, n, v))?;
                    return Ok(self.headers_done(f.stream, summary, end_stream));
                }
                self.block.clear();
                self.append_block(payload)?;
                self.continuing = Some((f.stream, end_stream));
                Ok(Event::HeadersPending)
            }
            Kind::Continuation => {
                let Some((stream, end_stream)) = self.continuing else {
                    return Err(err(E::PROTOCOL_ERROR, "CONTINUATION without HEADERS"));
                };
                self.append_block(payload)?;
                if !f.has(END_HEADERS) {
                    return Ok(Event::HeadersPending);
                }
                self.continuing = None;
                let summary =
                    hpack::decode(&mut self.decoder, &self.block, |n, v| each(stream, n, v))?;
                Ok(self.headers_done(stream, summary, end_stream))
            }
            Kind::Priority | Kind::Unknown(_) => Ok(Event::Ignored),
            Kind::RstStream => {
                if self.idle(f.stream) {
                    return Err(err(
                        E::PROTOCOL_ERROR,
                        "RST_STREAM on a stream never opened",
                    ));
                }
                self.close_stream(f.stream);
                Ok(Event::Reset {
                    stream: f.stream,
                    code: ErrorCode(frame::u32_payload(payload)),
                })
            }
            Kind::Settings if f.has(ACK) => {
                self.decoder
                    .set_max_allowed_table_size(self.local.header_table_size as usize);
                Ok(Event::SettingsAck)
            }
            Kind::Settings => {
                self.apply_settings(payload)?;
                Ok(Event::Settings)
            }
            Kind::PushPromise => Err(err(E::PROTOCOL_ERROR, "PUSH_PROMISE with push disabled")),
            Kind::Ping => {
                let opaque: [u8; 8] = payload.try_into().expect("parse_frame checked 8 bytes");
                Ok(if f.has(ACK) {
                    Event::PingAck(opaque)
                } else {
                    Event::Ping(opaque)
                })
            }
            Kind::GoAway => {
                let g = frame::goaway(payload);
                // A second GOAWAY may lower the id, never raise it (§6.8).
                let last = self
                    .goaway
                    .map_or(g.last_stream_id, |l| l.min(g.last_stream_id));
                self.goaway = Some(last);
                Ok(Event::GoAway {
                    last_stream_id: g.last_stream_id,
                    code: g.code,
                    debug: g.debug,
                })
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
                "header block longer than the local limit",
            ));
        }
        self.block.extend_from_slice(fragment);
        Ok(())
    }

    fn headers_done(&mut self, stream: u32, summary: Summary, end_stream: bool) -> Event<'static> {
        let Some(i) = self.find(stream) else {
            return Event::Headers {
                stream,
                summary,
                end_stream,
                open: false,
            };
        };
        if self.streams[i].remote_closed {
            self.streams.swap_remove(i);
            return Event::StreamError {
                stream,
                code: ErrorCode::STREAM_CLOSED,
                reason: "HEADERS after the peer ended the stream",
            };
        }
        if end_stream {
            self.streams[i].remote_closed = true;
            self.close_if_done(i);
        }
        Event::Headers {
            stream,
            summary,
            end_stream,
            open: true,
        }
    }

    fn data<'a>(&mut self, f: &Frame) -> Result<Event<'a>, H2Error> {
        use ErrorCode as E;
        if self.idle(f.stream) {
            return Err(err(E::PROTOCOL_ERROR, "DATA on a stream never opened"));
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
        let mut connection_update = 0;
        if self.recv_window <= full / 2 {
            connection_update = (full - self.recv_window) as u32;
            self.recv_window = full;
        }
        let end_stream = f.has(END_STREAM);
        let mut event = Event::Data {
            stream: f.stream,
            start: f.start,
            end: f.end,
            end_stream,
            open: false,
            connection_update,
            stream_update: 0,
        };
        let Some(i) = self.find(f.stream) else {
            return Ok(event);
        };
        let s = &mut self.streams[i];
        if s.remote_closed {
            self.streams.swap_remove(i);
            return Ok(Event::StreamError {
                stream: f.stream,
                code: E::STREAM_CLOSED,
                reason: "DATA after the peer ended the stream",
            });
        }
        if len > s.recv_window {
            return Err(err(E::FLOW_CONTROL_ERROR, "DATA beyond the stream window"));
        }
        s.recv_window -= len;
        let full = self.local.initial_window_size as i64;
        let mut stream_update = 0;
        // No update for a stream the peer just ended: nothing more will come on it.
        if !end_stream && s.recv_window <= full / 2 {
            stream_update = (full - s.recv_window) as u32;
            s.recv_window = full;
        }
        if end_stream {
            s.remote_closed = true;
            self.close_if_done(i);
        }
        if let Event::Data {
            open,
            stream_update: u,
            ..
        } = &mut event
        {
            *open = true;
            *u = stream_update;
        }
        Ok(event)
    }

    fn window_update<'a>(&mut self, stream: u32, increment: u32) -> Result<Event<'a>, H2Error> {
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
            return Ok(Event::WindowUpdate { stream });
        }
        if self.idle(stream) {
            return Err(err(
                E::PROTOCOL_ERROR,
                "WINDOW_UPDATE on a stream never opened",
            ));
        }
        let Some(i) = self.find(stream) else {
            return Ok(Event::Ignored);
        };
        let (code, reason) = if increment == 0 {
            (E::PROTOCOL_ERROR, "WINDOW_UPDATE of 0 on a stream")
        } else {
            self.streams[i].send_window += increment as i64;
            if self.streams[i].send_window <= WINDOW_MAX as i64 {
                return Ok(Event::WindowUpdate { stream });
            }
            (E::FLOW_CONTROL_ERROR, "stream window above 2^31-1")
        };
        self.streams.swap_remove(i);
        Ok(Event::StreamError {
            stream,
            code,
            reason,
        })
    }

    /// Applies a SETTINGS payload in order (§6.5.3); unknown identifiers are ignored.
    pub fn apply_settings(&mut self, payload: &[u8]) -> Result<(), H2Error> {
        use ErrorCode as E;
        for (id, value) in frame::settings(payload) {
            match id {
                SETTINGS_HEADER_TABLE_SIZE => self.peer.header_table_size = value,
                // §6.5.2: a server may only send 0, and 1 from it is an error too.
                SETTINGS_ENABLE_PUSH if value > 1 => {
                    return Err(err(E::PROTOCOL_ERROR, "ENABLE_PUSH neither 0 nor 1"));
                }
                SETTINGS_ENABLE_PUSH if value == 1 => {
                    return Err(err(E::PROTOCOL_ERROR, "a server sent ENABLE_PUSH 1"));
                }
                SETTINGS_ENABLE_PUSH => {}
                SETTINGS_MAX_CONCURRENT_STREAMS => self.peer.max_concurrent_streams = value,
                SETTINGS_INITIAL_WINDOW_SIZE => {
                    if value > WINDOW_MAX {
                        return Err(err(
                            E::FLOW_CONTROL_ERROR,
                            "INITIAL_WINDOW_SIZE above 2^31-1",
                        ));
                    }
                    // §6.9.2: every open stream's window moves by the difference.
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
                SETTINGS_MAX_HEADER_LIST_SIZE => self.peer.max_header_list_size = value,
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::h2::frame::{self as fr, FrameParsed, PADDED, parse_frame};

    fn conn() -> Connection {
        Connection::new(LocalSettings::default(), 8)
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
        fr::write_settings(&mut b, pairs).unwrap();
        b
    }

    /// Parses and applies every frame in `bytes`; the last event, or the error.
    fn feed(c: &mut Connection, bytes: &[u8]) -> Result<Event<'static>, H2Error> {
        let bytes: &'static [u8] = Box::leak(bytes.to_vec().into_boxed_slice());
        let mut at = 0;
        let mut last = Event::Ignored;
        while at < bytes.len() {
            let FrameParsed::Complete { frame, consumed } =
                parse_frame(&bytes[at..], c.local.max_frame_size)
            else {
                panic!("not a whole frame at {at}");
            };
            last = c.receive(&frame, &bytes[at..], |_, _, _| {})?;
            at += consumed;
        }
        Ok(last)
    }

    fn code(r: Result<Event<'static>, H2Error>) -> ErrorCode {
        r.expect_err("a connection error").code
    }

    #[test]
    fn initial_window_change_moves_every_open_stream() {
        let mut c = conn();
        let a = c.open_stream().unwrap();
        let b = c.open_stream().unwrap();
        c.consume_send(a, 1500);
        assert_eq!(c.send_capacity(a), 16_384); // capped by MAX_FRAME_SIZE
        assert_eq!(
            feed(&mut c, &settings(&[(SETTINGS_INITIAL_WINDOW_SIZE, 1000)])),
            Ok(Event::Settings)
        );
        // a: 65,535 - 1,500 sent + (1,000 - 65,535) = -500: blocked until updates.
        assert_eq!(c.streams[c.find(a).unwrap()].send_window, -500);
        assert_eq!(c.send_capacity(a), 0);
        assert_eq!(c.send_capacity(b), 1000);
        // A stream opened now starts at the new value.
        let d = c.open_stream().unwrap();
        assert_eq!(c.send_capacity(d), 1000);
        // Growing it again moves them all up.
        feed(&mut c, &settings(&[(SETTINGS_INITIAL_WINDOW_SIZE, 3000)])).unwrap();
        assert_eq!(c.send_capacity(a), 1500);
        assert_eq!(c.send_capacity(b), 3000);
        // The connection window is untouched by SETTINGS (§6.9.2).
        assert_eq!(c.connection_send_window(), 65_535 - 1500);
    }

    #[test]
    fn initial_window_overflow_is_a_flow_control_error() {
        let mut c = conn();
        let a = c.open_stream().unwrap();
        // Grow the stream to 2^31-1 - 10, then raise the initial size by 11.
        let w = raw(8, 0, a, &(WINDOW_MAX - 10 - 65_535).to_be_bytes());
        assert_eq!(feed(&mut c, &w), Ok(Event::WindowUpdate { stream: a }));
        assert_eq!(
            code(feed(
                &mut c,
                &settings(&[(SETTINGS_INITIAL_WINDOW_SIZE, 65_535 + 11)])
            )),
            ErrorCode::FLOW_CONTROL_ERROR
        );
        let mut c = conn();
        assert_eq!(
            code(feed(
                &mut c,
                &settings(&[(SETTINGS_INITIAL_WINDOW_SIZE, WINDOW_MAX + 1)])
            )),
            ErrorCode::FLOW_CONTROL_ERROR
        );
        // 2^31-1 itself is allowed.
        assert!(
            feed(
                &mut c,
                &settings(&[(SETTINGS_INITIAL_WINDOW_SIZE, WINDOW_MAX)])
            )
            .is_ok()
        );
    }

    #[test]
    fn settings_bounds() {
        let mut c = conn();
        for (id, v) in [
            (SETTINGS_MAX_FRAME_SIZE, 16_383),
            (SETTINGS_MAX_FRAME_SIZE, 16_777_216),
            (SETTINGS_ENABLE_PUSH, 2),
            (SETTINGS_ENABLE_PUSH, 1),
        ] {
            assert_eq!(
                code(feed(&mut conn(), &settings(&[(id, v)]))),
                ErrorCode::PROTOCOL_ERROR,
                "{id} {v}"
            );
        }
        feed(
            &mut c,
            &settings(&[
                (SETTINGS_MAX_FRAME_SIZE, 16_777_215),
                (SETTINGS_ENABLE_PUSH, 0),
                (SETTINGS_HEADER_TABLE_SIZE, 0),
                (SETTINGS_MAX_CONCURRENT_STREAMS, 2),
                (SETTINGS_MAX_HEADER_LIST_SIZE, 8192),
                (0xff, 7), // unknown: ignored
            ]),
        )
        .unwrap();
        assert_eq!(
            *c.peer(),
            PeerSettings {
                header_table_size: 0,
                max_concurrent_streams: 2,
                initial_window_size: 65_535,
                max_frame_size: 16_777_215,
                max_header_list_size: 8192,
            }
        );
        // MAX_CONCURRENT_STREAMS is honoured, and a closed stream frees a place.
        let a = c.open_stream().unwrap();
        c.open_stream().unwrap();
        assert_eq!(c.open_stream(), Err(OpenRefused::Full));
        c.close_stream(a);
        assert_eq!(c.open_stream(), Ok(5));
        assert_eq!(feed(&mut c, &raw(4, ACK, 0, b"")), Ok(Event::SettingsAck));
    }

    #[test]
    fn window_update_of_zero_is_a_protocol_error() {
        let mut c = conn();
        let a = c.open_stream().unwrap();
        assert_eq!(
            code(feed(&mut c, &raw(8, 0, 0, &[0; 4]))),
            ErrorCode::PROTOCOL_ERROR
        );
        // On a stream, a stream error: the stream is reset, the connection lives.
        assert_eq!(
            feed(&mut c, &raw(8, 0, a, &[0; 4])),
            Ok(Event::StreamError {
                stream: a,
                code: ErrorCode::PROTOCOL_ERROR,
                reason: "WINDOW_UPDATE of 0 on a stream"
            })
        );
        assert!(!c.is_open(a));
        // The reserved bit is not part of the increment.
        let mut c = conn();
        assert_eq!(
            code(feed(&mut c, &raw(8, 0, 0, &[0x80, 0, 0, 0]))),
            ErrorCode::PROTOCOL_ERROR
        );
    }

    #[test]
    fn window_updates_grow_send_windows_up_to_the_limit() {
        let mut c = conn();
        let a = c.open_stream().unwrap();
        c.consume_send(a, 16_384);
        c.consume_send(a, 16_384);
        c.consume_send(a, 16_384);
        c.consume_send(a, 16_383);
        assert_eq!(c.send_capacity(a), 0);
        feed(&mut c, &raw(8, 0, 0, &100u32.to_be_bytes())).unwrap();
        assert_eq!(c.send_capacity(a), 0); // the stream's window is still empty
        feed(&mut c, &raw(8, 0, a, &40u32.to_be_bytes())).unwrap();
        assert_eq!(c.send_capacity(a), 40);
        feed(&mut c, &raw(8, 0, a, &400u32.to_be_bytes())).unwrap();
        assert_eq!(c.send_capacity(a), 100); // now the connection's is the smaller
        // Connection window past 2^31-1.
        assert_eq!(
            code(feed(&mut c, &raw(8, 0, 0, &WINDOW_MAX.to_be_bytes()))),
            ErrorCode::FLOW_CONTROL_ERROR
        );
        // Stream window past 2^31-1: a stream error.
        let mut c = conn();
        let a = c.open_stream().unwrap();
        assert!(matches!(
            feed(&mut c, &raw(8, 0, a, &(WINDOW_MAX - 65_534).to_be_bytes())),
            Ok(Event::StreamError {
                code: ErrorCode::FLOW_CONTROL_ERROR,
                ..
            })
        ));
        // An update for a closed stream is ignored; for one never opened, an error.
        assert_eq!(
            feed(&mut c, &raw(8, 0, a, &[0, 0, 0, 1])),
            Ok(Event::Ignored)
        );
        assert_eq!(
            code(feed(&mut c, &raw(8, 0, 3, &[0, 0, 0, 1]))),
            ErrorCode::PROTOCOL_ERROR
        );
    }

    #[test]
    fn receive_windows_are_restored_at_half() {
        let mut c = conn();
        let a = c.open_stream().unwrap();
        let b = c.open_stream().unwrap();
        let data = |s, n: usize, flags| raw(0, flags, s, &vec![7; n]);
        // 30,000 on a: under half of either window, nothing due.
        let e = feed(&mut c, &data(a, 16_000, 0)).unwrap();
        assert!(
            matches!(
                e,
                Event::Data {
                    connection_update: 0,
                    stream_update: 0,
                    open: true,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = feed(&mut c, &data(a, 14_000, 0)).unwrap();
        assert!(
            matches!(
                e,
                Event::Data {
                    connection_update: 0,
                    stream_update: 0,
                    ..
                }
            ),
            "{e:?}"
        );
        // 4,000 more (padding counts): a is at 34,000 used, past half of 65,535.
        let mut padded = vec![0u8; 4000];
        padded[0] = 99;
        let e = feed(&mut c, &raw(0, PADDED, a, &padded)).unwrap();
        assert!(
            matches!(
                e,
                Event::Data {
                    connection_update: 34_000,
                    stream_update: 34_000,
                    ..
                }
            ),
            "{e:?}"
        );
        // b ends its stream: the connection is updated, the ended stream is not.
        let e = feed(&mut c, &data(b, 16_384, END_STREAM)).unwrap();
        assert!(
            matches!(
                e,
                Event::Data {
                    connection_update: 0,
                    stream_update: 0,
                    end_stream: true,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = feed(&mut c, &data(b, 16_384, 0)).unwrap();
        assert!(
            matches!(
                e,
                Event::StreamError {
                    code: ErrorCode::STREAM_CLOSED,
                    ..
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn data_beyond_a_receive_window_is_a_flow_control_error() {
        // A larger stream window, the connection's still the default: 65,535 fits,
        // one byte more does not.
        let local = LocalSettings {
            max_frame_size: 1 << 17,
            initial_window_size: 1 << 20,
            ..LocalSettings::default()
        };
        let mut c = Connection::new(local, 4);
        let a = c.open_stream().unwrap();
        assert!(feed(&mut c, &raw(0, 0, a, &vec![0; 65_535])).is_ok());
        let mut c = Connection::new(local, 4);
        let a = c.open_stream().unwrap();
        let e = feed(&mut c, &raw(0, 0, a, &vec![0; 65_536])).unwrap_err();
        assert_eq!(e.code, ErrorCode::FLOW_CONTROL_ERROR);
        assert_eq!(e.reason, "DATA beyond the connection window");
        // A larger connection window, the stream's still the default.
        let local = LocalSettings {
            max_frame_size: 1 << 17,
            connection_window: 1 << 20,
            ..LocalSettings::default()
        };
        let mut c = Connection::new(local, 4);
        let a = c.open_stream().unwrap();
        let e = feed(&mut c, &raw(0, 0, a, &vec![0; 65_536])).unwrap_err();
        assert_eq!(e.reason, "DATA beyond the stream window");
        // DATA on a stream never opened.
        assert_eq!(
            code(feed(&mut conn(), &raw(0, 0, 1, b"x"))),
            ErrorCode::PROTOCOL_ERROR
        );
    }

    #[test]
    fn preface_raises_the_connection_window() {
        let local = LocalSettings {
            connection_window: 1 << 20,
            ..LocalSettings::default()
        };
        let c = Connection::new(local, 4);
        let mut out = [0u8; 128];
        let n = c.write_preface(&mut out).unwrap();
        assert_eq!(n, 24 + 9 + 24 + 13);
        let FrameParsed::Complete { frame, .. } = parse_frame(&out[57..n], 16_384) else {
            panic!()
        };
        assert_eq!(frame.kind, Kind::WindowUpdate);
        assert_eq!(
            fr::u32_payload(frame.payload(&out[57..n])),
            (1 << 20) - 65_535
        );
        let n = conn().write_preface(&mut out).unwrap();
        assert_eq!(n, 24 + 9 + 24);
        assert_eq!(
            c.write_preface(&mut out[..60]),
            Err(TooSmall { needed: 70 })
        );
    }

    #[test]
    fn goaway_splits_streams_to_retry() {
        let mut c = conn();
        let ids: Vec<u32> = (0..5).map(|_| c.open_stream().unwrap()).collect();
        assert_eq!(ids, [1, 3, 5, 7, 9]);
        assert_eq!(c.retry_after_goaway().count(), 0);
        let mut g = vec![0u8; 64];
        let n = fr::write_goaway(&mut g, 5, ErrorCode::NO_ERROR, b"max_age").unwrap();
        assert_eq!(
            feed(&mut c, &g[..n]),
            Ok(Event::GoAway {
                last_stream_id: 5,
                code: ErrorCode::NO_ERROR,
                debug: b"max_age"
            })
        );
        let mut retry: Vec<u32> = c.retry_after_goaway().collect();
        retry.sort();
        assert_eq!(retry, [7, 9]);
        assert_eq!(c.open_stream(), Err(OpenRefused::GoingAway));
        // A later GOAWAY with a higher id does not un-retry a stream.
        let n = fr::write_goaway(&mut g, 9, ErrorCode::NO_ERROR, b"").unwrap();
        feed(&mut c, &g[..n]).unwrap();
        assert_eq!(c.retry_after_goaway().count(), 2);
        let n =
            fr::write_goaway(&mut g, 1, ErrorCode::ENHANCE_YOUR_CALM, b"too_many_pings").unwrap();
        feed(&mut c, &g[..n]).unwrap();
        assert_eq!(c.retry_after_goaway().count(), 4);
    }

    #[test]
    fn rst_stream_closes_with_its_code() {
        let mut c = conn();
        let a = c.open_stream().unwrap();
        let e = feed(&mut c, &raw(3, 0, a, &7u32.to_be_bytes())).unwrap();
        assert_eq!(
            e,
            Event::Reset {
                stream: a,
                code: ErrorCode::REFUSED_STREAM
            }
        );
        let Event::Reset { code: rst, .. } = e else {
            unreachable!()
        };
        assert_eq!(rst.name(), "REFUSED_STREAM");
        assert!(!c.is_open(a));
        assert_eq!(
            code(feed(&mut c, &raw(3, 0, 5, &[0; 4]))),
            ErrorCode::PROTOCOL_ERROR
        );
    }

    #[test]
    fn headers_with_continuation_decode_once_whole() {
        let mut c = conn();
        let a = c.open_stream().unwrap();
        c.end_local(a);
        // :status 200 (indexed 8), then "server: x" split across the frames.
        let block = b"\x88\x0f\x27\x01x";
        let mut out = vec![];
        out.extend(raw(1, 0, a, &block[..2]));
        out.extend(raw(9, 0, a, &block[2..4]));
        let last = raw(9, END_HEADERS, a, &block[4..]);
        assert_eq!(feed(&mut c, &out), Ok(Event::HeadersPending));
        let mut seen = Vec::new();
        let FrameParsed::Complete { frame, .. } = parse_frame(&last, 16_384) else {
            panic!()
        };
        let e = c
            .receive(&frame, &last, |s, n, v| {
                seen.push((s, n.to_vec(), v.to_vec()))
            })
            .unwrap();
        assert!(
            matches!(
                e,
                Event::Headers {
                    stream: 1,
                    summary: Summary {
                        status: Some(200),
                        ..
                    },
                    end_stream: false,
                    open: true
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            seen,
            [
                (1, b":status".to_vec(), b"200".to_vec()),
                (1, b"server".to_vec(), b"x".to_vec())
            ]
        );
        // Trailers with END_STREAM close the stream (its local side ended already).
        let e = feed(&mut c, &raw(1, END_HEADERS | END_STREAM, a, b"\x88")).unwrap();
        assert!(matches!(
            e,
            Event::Headers {
                end_stream: true,
                open: true,
                ..
            }
        ));
        assert!(!c.is_open(a));
    }

    #[test]
    fn a_header_block_admits_no_other_frame() {
        let mut c = conn();
        let a = c.open_stream().unwrap();
        let b = c.open_stream().unwrap();
        feed(&mut c, &raw(1, 0, a, b"\x88")).unwrap();
        assert_eq!(
            code(feed(&mut c, &raw(6, 0, 0, &[0; 8]))),
            ErrorCode::PROTOCOL_ERROR
        );
        let mut c = conn();
        c.open_stream().unwrap();
        c.open_stream().unwrap();
        feed(&mut c, &raw(1, 0, a, b"\x88")).unwrap();
        assert_eq!(
            code(feed(&mut c, &raw(9, END_HEADERS, b, b""))),
            ErrorCode::PROTOCOL_ERROR
        );
        assert_eq!(
            code(feed(&mut conn(), &raw(9, END_HEADERS, 1, b""))),
            ErrorCode::PROTOCOL_ERROR
        );
        // A block beyond the local limit.
        let local = LocalSettings {
            header_block_bytes_max: 10,
            ..LocalSettings::default()
        };
        let mut c = Connection::new(local, 2);
        c.open_stream().unwrap();
        feed(&mut c, &raw(1, 0, 1, &[0x88; 6])).unwrap();
        assert_eq!(
            code(feed(&mut c, &raw(9, 0, 1, &[0x88; 5]))),
            ErrorCode::ENHANCE_YOUR_CALM
        );
    }

    #[test]
    fn frames_a_client_never_accepts() {
        assert_eq!(
            code(feed(&mut conn(), &raw(5, END_HEADERS, 1, &[0, 0, 0, 2]))),
            ErrorCode::PROTOCOL_ERROR
        );
        assert_eq!(
            code(feed(&mut conn(), &raw(1, END_HEADERS, 2, b"\x88"))),
            ErrorCode::PROTOCOL_ERROR
        );
        // A malformed block: COMPRESSION_ERROR.
        let mut c = conn();
        c.open_stream().unwrap();
        assert_eq!(
            code(feed(&mut c, &raw(1, END_HEADERS, 1, b"\xff"))),
            ErrorCode::COMPRESSION_ERROR
        );
        // PING and PING ACK.
        assert_eq!(
            feed(&mut conn(), &raw(6, 0, 0, b"abcdefgh")),
            Ok(Event::Ping(*b"abcdefgh"))
        );
        assert_eq!(
            feed(&mut conn(), &raw(6, ACK, 0, b"abcdefgh")),
            Ok(Event::PingAck(*b"abcdefgh"))
        );
        assert_eq!(
            feed(&mut conn(), &raw(2, 0, 1, &[0; 5])),
            Ok(Event::Ignored)
        );
    }

    #[test]
    fn the_dynamic_table_lasts_across_responses() {
        // RFC 7541 C.5.1 then C.5.2 on two streams: the second response's fields come
        // from the table the first one filled.
        let local = LocalSettings {
            header_table_size: 256,
            ..LocalSettings::default()
        };
        let mut c = Connection::new(local, 4);
        let a = c.open_stream().unwrap();
        let b = c.open_stream().unwrap();
        let first = b"\x48\x03302\x58\x07private\x61\x1dMon, 21 Oct 2013 20:13:21 GMT\x6e\x17https://www.example.com";
        feed(&mut c, &raw(1, END_HEADERS, a, first)).unwrap();
        let e = feed(&mut c, &raw(1, END_HEADERS, b, b"\x48\x03307\xc1\xc0\xbf")).unwrap();
        assert!(
            matches!(
                e,
                Event::Headers {
                    summary: Summary {
                        status: Some(307),
                        ..
                    },
                    ..
                }
            ),
            "{e:?}"
        );
        // Before our SETTINGS are acknowledged the peer may still use 4,096 bytes.
        assert!(feed(&mut c, &raw(1, END_HEADERS, b, b"\x3f\xe1\x1f\x88")).is_ok());
        // After the ACK, a table size update above our HEADER_TABLE_SIZE is a
        // COMPRESSION_ERROR (here 257 > 256)...
        let mut c2 = Connection::new(local, 4);
        let d = c2.open_stream().unwrap();
        feed(&mut c2, &raw(4, ACK, 0, b"")).unwrap();
        assert_eq!(
            code(feed(&mut c2, &raw(1, END_HEADERS, d, b"\x3f\xe2\x01\x88"))),
            ErrorCode::COMPRESSION_ERROR
        );
        // ...and so is one above 4,096 before it.
        assert_eq!(
            code(feed(&mut c, &raw(1, END_HEADERS, b, b"\x3f\xe2\x1f\x88"))),
            ErrorCode::COMPRESSION_ERROR
        );
    }

    proptest::proptest! {
        /// The fuzz target's loop in small (cargo test runs it, libFuzzer does not
        /// run here): random frames of every type, mostly well-formed so they get
        /// past the parser into the state, never panic the codec or HPACK.
        #[test]
        fn random_frames_never_panic(
            frames in proptest::collection::vec(
                (0u8..11, proptest::prelude::any::<u8>(), 0u32..12,
                 proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)),
                1..40,
            ),
            table in 0usize..3,
        ) {
            let local = LocalSettings {
                header_table_size: [0, 64, 4096][table],
                header_block_bytes_max: 64,
                ..LocalSettings::default()
            };
            let mut c = Connection::new(local, 4);
            let mut out = [0u8; 256];
            for (kind, flags, stream, payload) in frames {
                let _ = c.open_stream();
                let bytes = raw(kind, flags, stream, &payload);
                let FrameParsed::Complete { frame, consumed } = parse_frame(&bytes, 16_384) else {
                    continue;
                };
                proptest::prop_assert_eq!(consumed, bytes.len());
                match c.receive(&frame, &bytes, |_, _, _| {}) {
                    Err(_) => break,
                    Ok(Event::Data { stream, connection_update, stream_update, .. }) => {
                        if connection_update > 0 {
                            fr::write_window_update(&mut out, 0, connection_update).unwrap();
                        }
                        if stream_update > 0 {
                            fr::write_window_update(&mut out, stream, stream_update).unwrap();
                        }
                    }
                    Ok(Event::WindowUpdate { stream }) if stream != 0 => {
                        let n = c.send_capacity(stream);
                        c.consume_send(stream, n);
                    }
                    Ok(_) => {}
                }
                proptest::prop_assert!(c.open_streams() <= 4);
            }
        }
    }
}
