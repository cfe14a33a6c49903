//! `--http2`: requests as HTTP/2 streams over the worker's connections, the codec of
//! `proto::h2` driven from the worker's receive and send paths.
//!
//! A connection opens (TCP, and TLS with ALPN `h2`), sends the preface and its
//! SETTINGS, and is ready once the server's SETTINGS arrive: that exchange is part of
//! its connect, like a TLS handshake. Each request takes a slot of the connection's
//! FIFO as with HTTP/1.1 and a stream when it is sent; its response completes it by
//! stream id, in any order. A slot answered out of order is freed once every older
//! request of its connection is answered too (`ANSWERED`), so a slow stream holds the
//! slots behind it, not their latencies. At most `pipeline` requests are in flight per
//! connection, fewer when the server's MAX_CONCURRENT_STREAMS is lower (`caps`).
//!
//! Control frames the codec asks for (SETTINGS ACK, PING ACK, WINDOW_UPDATE,
//! RST_STREAM) wait in the connection's `ctl` bytes and go out at the front of its next
//! send. A request body goes in DATA frames of at most 16 KiB as the send windows
//! allow: the HEADERS and the first frame with the request, the rest (a body without
//! placeholders, kept once per entry) at the front of later sends as WINDOW_UPDATEs
//! open the windows. A request whose first DATA frame the windows cannot take (or a
//! body with placeholders, which goes whole) waits, unsent, for a WINDOW_UPDATE (a
//! flow-control stall, counted). A GOAWAY stops new streams on the
//! connection; the requests the server says it did not process go back to the backlog
//! (retried on another connection, counted), the others finish, then it closes and
//! reopens.

use super::Worker;
use super::recv::Reply;
use crate::clock::{Nanos, Ticks};
use crate::engine::conn_table::{ANSWERED, ConnState, Req};
use crate::engine::recorder::{ErrorKind, H2Counters};
use crate::engine::worker_plan::WorkerPlan;
use crate::limits::EXPECT_H2_BODY_BYTES;
use crate::proto::Verdict;
use crate::proto::h2::conn::OpenRefused;
use crate::proto::h2::request::{block_from_http1, request_len, write_request};
use crate::proto::h2::{
    Connection, ErrorCode, Event, FRAME_HEADER_BYTES, FRAME_SIZE_MIN, FrameParsed, H2Error,
    LocalSettings, WINDOW_MAX, frame, parse_frame,
};
use crate::proto::server_time;
use crate::request::{Ctx, RENDER_STREAM, request_rng};
use std::collections::VecDeque;

/// [`Req::status`] of a gRPC call whose `grpc-status` arrived: this plus the code (HTTP
/// statuses stay below it).
const GRPC_STATUS_BASE: u16 = 1000;
/// The last slot of `H2Counters::goaway_codes`: codes beyond the named ones.
const fn h2_codes_other() -> usize {
    crate::engine::recorder::GOAWAY_CODES - 1
}
/// The last slot of `Counters::grpc`: codes beyond the named ones.
const GRPC_CODE_OTHER: u32 = 17;

/// Control bytes a connection can hold between sends: the preface with its SETTINGS
/// and window raise, acknowledgements, window updates and resets; and room for one
/// RST_STREAM per stream in flight ([`ctl_bytes`]).
const CTL_BYTES: usize = 512;

/// A connection's control bytes with `pipeline` streams: a reset for each of them
/// always fits (at most that many open streams can be reset between two sends).
fn ctl_bytes(pipeline: usize) -> usize {
    CTL_BYTES + pipeline * (FRAME_HEADER_BYTES + 4)
}
/// Largest header block kept across CONTINUATION frames (responses' headers).
const HEADER_BLOCK_MAX: usize = 16 << 10;
/// Largest DATA frame sent (the smallest MAX_FRAME_SIZE a peer may set).
const DATA_CHUNK: usize = FRAME_SIZE_MIN as usize;

/// A request body part way out: `stream`'s body (entry `entry`'s) from byte `off`;
/// a rendered one (placeholders in it) from request slot `slot`'s tail while that
/// slot still holds request `seq`.
#[derive(Debug, Clone, Copy)]
struct BodyLeft {
    stream: u32,
    entry: u16,
    off: u32,
    slot: u32,
    seq: u64,
}

/// Bodies with placeholders longer than one DATA frame: each is rendered once, with
/// its request, and what the first frame did not carry is kept in its request slot
/// (connections x streams, sized at start, bounded by the plan) until the send
/// windows let it go.
struct Tails {
    stride: usize,
    bytes: Box<[u8]>,
    /// Per slot: the rendered body's length and the request whose body it is.
    lens: Box<[u32]>,
    seqs: Box<[u64]>,
}

impl Tails {
    fn new(slots: usize, stride: usize) -> Tails {
        Tails {
            stride,
            bytes: vec![0; slots * stride].into_boxed_slice(),
            lens: vec![0; slots].into_boxed_slice(),
            seqs: vec![u64::MAX; slots].into_boxed_slice(),
        }
    }

    /// Keeps `body` (request `seq`'s, whole) in slot `i`.
    fn keep(&mut self, i: usize, seq: u64, body: &[u8]) {
        let base = i * self.stride;
        self.bytes[base..base + body.len()].copy_from_slice(body);
        self.lens[i] = body.len() as u32;
        self.seqs[i] = seq;
    }

    /// Slot `i`'s body while it is still request `seq`'s.
    fn body(&self, i: usize, seq: u64) -> Option<&[u8]> {
        let base = i * self.stride;
        (self.seqs[i] == seq).then(|| &self.bytes[base..base + self.lens[i] as usize])
    }
}

/// The worker's HTTP/2 side: each connection's codec state, and what converts a
/// request once.
pub(super) struct H2Side {
    conns: Vec<H2Conn>,
    /// Per request-set entry whose bytes never change: its header block and body,
    /// converted at start. `None` for templated entries (converted per request into
    /// `scratch` and `block`).
    fixed: Vec<Option<(Vec<u8>, Vec<u8>)>>,
    /// Per entry, its body when no placeholder is in it (every entry's but one with
    /// `--body '...{rand:N}...'`): what a body longer than one DATA frame is sent from.
    bodies: Vec<Option<Vec<u8>>>,
    scratch: Vec<u8>,
    block: Vec<u8>,
    scheme: &'static str,
    local: LocalSettings,
    /// Bytes of `staging` each request may take at most.
    pub(super) request_bytes: usize,
    /// `--h2-keepalive`: when the connections are next looked at.
    next_ping_scan: Nanos,
    /// The first GOAWAY's code and debug text, for the report.
    pub(super) first_goaway: Option<String>,
    /// `--expect` body assertions: each request slot's response body as it arrives.
    kept: Option<KeptBodies>,
    /// Bodies with placeholders longer than one DATA frame, per request slot.
    tails: Option<Tails>,
}

/// Response bodies kept for `--expect`: [`EXPECT_H2_BODY_BYTES`] per request slot
/// (connections x streams, sized at start), and how much of each arrived.
struct KeptBodies {
    bytes: Box<[u8]>,
    /// Per slot: the bytes kept, or [`KeptBodies::OVER`] once the body outgrew them.
    lens: Box<[u32]>,
}

impl KeptBodies {
    const OVER: u32 = u32::MAX;

    fn new(slots: usize) -> KeptBodies {
        KeptBodies {
            bytes: vec![0; slots * EXPECT_H2_BODY_BYTES].into_boxed_slice(),
            lens: vec![0; slots].into_boxed_slice(),
        }
    }

    /// Appends `data` to slot `i`'s body (or marks it outgrown).
    fn push(&mut self, i: usize, data: &[u8]) {
        let len = self.lens[i];
        if len == Self::OVER {
            return;
        }
        let (at, end) = (len as usize, len as usize + data.len());
        if end > EXPECT_H2_BODY_BYTES {
            self.lens[i] = Self::OVER;
            return;
        }
        let base = i * EXPECT_H2_BODY_BYTES;
        self.bytes[base + at..base + end].copy_from_slice(data);
        self.lens[i] = end as u32;
    }

    /// Slot `i`'s whole body, or `None` when it outgrew what is kept.
    fn body(&self, i: usize) -> Option<&[u8]> {
        let len = self.lens[i];
        let base = i * EXPECT_H2_BODY_BYTES;
        (len != Self::OVER).then(|| &self.bytes[base..base + len as usize])
    }
}

struct H2Conn {
    conn: Option<Box<Connection>>,
    /// The connection generation this state belongs to: a reopened connection starts
    /// afresh.
    generation: u32,
    /// The server's first SETTINGS arrived: the connection is ready.
    settled: bool,
    /// Requests wait for a window: counted once per stall.
    stalled: bool,
    ctl: Box<[u8]>,
    ctl_len: usize,
    /// When its last bytes arrived (`--h2-keepalive`: a PING after a quiet spell).
    last_rx_ns: Nanos,
    /// A keepalive PING awaits its acknowledgement.
    ping_out: bool,
    /// Bodies part way out, oldest first (at most one per stream in flight).
    bodies_left: VecDeque<BodyLeft>,
}

/// The opaque bytes of blaster's keepalive PINGs.
const KEEPALIVE_PING: [u8; 8] = *b"blasterK";

impl H2Side {
    /// `None` without `--http2`. Fails when an entry cannot be sent as HTTP/2 (the
    /// plan checked it; this is the engine's own guard).
    pub(super) fn new(plan: &WorkerPlan) -> Result<Option<Box<H2Side>>, String> {
        let Some(h2) = plan.http2 else {
            return Ok(None);
        };
        let local = LocalSettings {
            // Responses never wait for this side's window: updates are rare.
            initial_window_size: WINDOW_MAX,
            connection_window: WINDOW_MAX,
            header_block_bytes_max: HEADER_BLOCK_MAX,
            ..LocalSettings::default()
        };
        let max_len = plan.requests.max_len();
        let mut block = Vec::with_capacity(2 * max_len + 64);
        let mut fixed = Vec::new();
        let bodies = (plan.requests.entries.iter())
            .map(|e| e.template.static_after(b"\r\n\r\n").map(<[u8]>::to_vec))
            .collect();
        for e in &plan.requests.entries {
            if e.template.is_static() {
                let bytes = e.template.static_bytes();
                let body = block_from_http1(bytes, h2.scheme, &mut block)?;
                fixed.push(Some((block.clone(), bytes[body].to_vec())));
            } else {
                fixed.push(None);
            }
        }
        Ok(Some(Box::new(H2Side {
            conns: (0..plan.connections)
                .map(|_| H2Conn {
                    conn: None,
                    generation: u32::MAX,
                    settled: false,
                    stalled: false,
                    ctl: vec![0; ctl_bytes(plan.pipeline)].into_boxed_slice(),
                    ctl_len: 0,
                    last_rx_ns: 0,
                    ping_out: false,
                    bodies_left: VecDeque::with_capacity(plan.pipeline),
                })
                .collect(),
            fixed,
            bodies,
            scratch: vec![0; max_len],
            block,
            scheme: h2.scheme,
            local,
            request_bytes: request_len(
                2 * max_len + 64,
                max_len.min(DATA_CHUNK),
                local.max_frame_size,
            ),
            next_ping_scan: 0,
            first_goaway: None,
            kept: (plan.expect.needs_body())
                .then(|| KeptBodies::new(plan.connections * plan.pipeline)),
            tails: (plan.requests.entries.iter())
                .any(|e| {
                    e.template.static_after(b"\r\n\r\n").is_none()
                        && e.template.max_len() > DATA_CHUNK
                })
                .then(|| Tails::new(plan.connections * plan.pipeline, max_len)),
        })))
    }

    /// Staging bytes per connection: the control bytes and `pipeline` requests.
    pub(super) fn staging_len(&self, pipeline: usize) -> usize {
        ctl_bytes(pipeline) + pipeline * self.request_bytes
    }

    /// Queues a control frame for `c`; one that does not fit is dropped and counted
    /// (only a flood of PINGs between two sends fills the room).
    fn ctl(
        &mut self,
        c: u32,
        counts: &mut H2Counters,
        write: impl FnOnce(&mut [u8]) -> Result<usize, frame::TooSmall>,
    ) {
        let hc = &mut self.conns[c as usize];
        match write(&mut hc.ctl[hc.ctl_len..]) {
            Ok(n) => hc.ctl_len += n,
            Err(_) => counts.control_dropped += 1,
        }
    }
}

impl Worker<'_> {
    /// Whether `c`, just connected (TCP, and TLS), still waits for the server's
    /// SETTINGS; the first call for a connection sends the preface.
    pub(super) fn h2_handshaking(&mut self, c: u32) -> bool {
        let generation = self.table.conns[c as usize].generation;
        let streams = self.plan.pipeline;
        let Some(h2) = self.h2.as_deref_mut() else {
            return false;
        };
        let hc = &mut h2.conns[c as usize];
        if hc.generation == generation {
            return !hc.settled;
        }
        let conn = Connection::new(h2.local, streams);
        hc.ctl_len = conn
            .write_preface(&mut hc.ctl)
            .expect("the preface fits the control bytes");
        hc.conn = Some(Box::new(conn));
        hc.generation = generation;
        hc.settled = false;
        hc.stalled = false;
        hc.bodies_left.clear();
        self.table.caps[c as usize] = self.table.pipeline;
        if !self.table.conns[c as usize].recv_armed {
            self.arm_recv(c);
        }
        self.mark_flush(c);
        true
    }

    fn h2_conn(&mut self, c: u32) -> &mut Connection {
        let h2 = self.h2.as_deref_mut().expect("HTTP/2 side");
        h2.conns[c as usize]
            .conn
            .as_deref_mut()
            .expect("an open HTTP/2 connection")
    }

    /// Frames `input` as HTTP/2 frames of `c`: whole frames are applied, a partial one
    /// is left (its bytes not counted as taken). Returns the bytes taken, or `None`
    /// when the connection was closed.
    pub(super) fn parse_h2(&mut self, c: u32, input: &[u8], now_t: Ticks) -> Option<usize> {
        let max_frame = self
            .h2
            .as_deref()
            .expect("HTTP/2 side")
            .local
            .max_frame_size;
        // An event may close the connection (a GOAWAY's last stream answered, a
        // protocol error): then the rest of the input is not its any more.
        let generation = self.table.conns[c as usize].generation;
        if self.plan.http2.is_some_and(|h| h.keepalive_ns.is_some()) {
            let now = self.clock.ns(now_t);
            self.h2.as_deref_mut().expect("HTTP/2 side").conns[c as usize].last_rx_ns = now;
        }
        let mut pos = 0;
        loop {
            match parse_frame(&input[pos..], max_frame) {
                FrameParsed::Incomplete => break,
                FrameParsed::Invalid(e) => {
                    self.h2_failed(c, e, &input[pos..]);
                    return None;
                }
                FrameParsed::Complete { frame, consumed } => {
                    let bytes = &input[pos..];
                    // `--server-time`: what this header block says (one block, one
                    // stream), added to its slot once the block is whole.
                    let source = self.plan.server_time.as_deref();
                    let mut said = None;
                    let event = self.h2_conn(c).receive(&frame, bytes, |_, name, value| {
                        if let Some(ns) = source.and_then(|s| s.from_header(name, value)) {
                            said = Some(server_time::combine(source, said, ns));
                        }
                    });
                    if let (Ok(Event::Headers { stream, .. }), Some(ns)) = (&event, said) {
                        self.h2_server_time(c, *stream, ns);
                    }
                    match event {
                        Err(e) => {
                            self.h2_failed(c, e, bytes);
                            return None;
                        }
                        Ok(ev) => {
                            if let Event::Data {
                                stream,
                                start,
                                end,
                                open: true,
                                ..
                            } = ev
                            {
                                self.h2_keep(c, stream, &bytes[start..end]);
                            }
                            self.h2_event(c, ev, now_t);
                            if self.table.conns[c as usize].generation != generation {
                                return None;
                            }
                        }
                    }
                    pos += consumed;
                }
            }
        }
        if self.h2_ctl_pending(c) {
            self.mark_flush(c);
        }
        Some(pos)
    }

    /// Request bodies wait to go on out `c`.
    pub(super) fn h2_bodies_left(&self, c: u32) -> bool {
        self.h2
            .as_deref()
            .is_some_and(|h2| !h2.conns[c as usize].bodies_left.is_empty())
    }

    /// Control bytes wait to go out on `c`.
    pub(super) fn h2_ctl_pending(&self, c: u32) -> bool {
        self.h2
            .as_deref()
            .is_some_and(|h2| h2.conns[c as usize].ctl_len > 0)
    }

    fn h2_ctl(&mut self, c: u32, write: impl FnOnce(&mut [u8]) -> Result<usize, frame::TooSmall>) {
        let h2 = self.h2.as_deref_mut().expect("HTTP/2 side");
        h2.ctl(c, &mut self.out.counters.http2, write);
    }

    /// Acts on one event of `c`'s codec (which may close the connection).
    fn h2_event(&mut self, c: u32, ev: Event<'_>, now_t: Ticks) {
        match ev {
            Event::Settings => {
                self.h2_ctl(c, frame::write_settings_ack);
                let peer_max = self.h2_conn(c).peer().max_concurrent_streams;
                let cap = self.table.pipeline.min(peer_max);
                if self.table.caps[c as usize] != 0 {
                    self.table.caps[c as usize] = cap;
                }
                let h2 = self.h2.as_deref_mut().expect("HTTP/2 side");
                let hc = &mut h2.conns[c as usize];
                if !hc.settled {
                    hc.settled = true;
                    self.established(c, now_t);
                }
            }
            Event::Ping(opaque) => self.h2_ctl(c, |out| frame::write_ping(out, opaque, true)),
            Event::Headers {
                stream,
                summary,
                end_stream,
                open,
            } => {
                if let Some(i) = self.h2_slot(c, stream).filter(|_| open) {
                    if let Some(status) = summary.status.filter(|&s| s >= 200) {
                        self.table.slots[i].status = status;
                    }
                    if let Some(code) = summary.grpc_status {
                        // Trailers (or a trailers-only response): the call's outcome.
                        self.table.slots[i].status =
                            GRPC_STATUS_BASE + code.min(GRPC_CODE_OTHER) as u16;
                    }
                    if end_stream {
                        self.h2_answered(c, i, now_t);
                    }
                }
            }
            Event::Data {
                stream,
                end_stream,
                open,
                connection_update,
                stream_update,
                ..
            } => {
                if connection_update > 0 {
                    self.h2_ctl(c, |out| {
                        frame::write_window_update(out, 0, connection_update)
                    });
                }
                if stream_update > 0 && open && !end_stream {
                    self.h2_ctl(c, |out| {
                        frame::write_window_update(out, stream, stream_update)
                    });
                }
                if end_stream
                    && open
                    && let Some(i) = self.h2_slot(c, stream)
                {
                    self.h2_answered(c, i, now_t);
                }
            }
            Event::WindowUpdate { .. } => {
                let h2 = self.h2.as_deref_mut().expect("HTTP/2 side");
                h2.conns[c as usize].stalled = false;
                if self.table.conns[c as usize].unsent > 0 || self.h2_bodies_left(c) {
                    self.mark_flush(c);
                }
            }
            Event::Reset { stream, code } => {
                if let Some(i) = self.h2_slot(c, stream) {
                    self.h2_reset(c, i, code);
                }
            }
            Event::StreamError { stream, code, .. } => {
                self.h2_ctl(c, |out| frame::write_rst_stream(out, stream, code));
                if let Some(i) = self.h2_slot(c, stream) {
                    let req = self.table.slots[i];
                    self.h2_failed_stream(c, i, &req, ErrorKind::Protocol);
                }
            }
            Event::GoAway {
                last_stream_id,
                code,
                debug,
            } => {
                let h2 = self.h2.as_deref_mut().expect("HTTP/2 side");
                let slot = (code.0 as usize).min(h2_codes_other());
                self.out.counters.http2.goaway_codes[slot] += 1;
                h2.first_goaway.get_or_insert_with(|| {
                    let said = crate::proto::escape_prefix(debug, 100);
                    if said.is_empty() {
                        code.name().to_string()
                    } else {
                        format!("{}: {said}", code.name())
                    }
                });
                self.h2_goaway(c, last_stream_id)
            }
            Event::PingAck(opaque) => {
                let h2 = self.h2.as_deref_mut().expect("HTTP/2 side");
                if opaque == KEEPALIVE_PING && h2.conns[c as usize].ping_out {
                    h2.conns[c as usize].ping_out = false;
                    self.out.counters.http2.pings_acked += 1;
                }
            }
            Event::SettingsAck | Event::HeadersPending | Event::Ignored => {}
        }
    }

    /// `--h2-keepalive`: a PING on each ready connection that received nothing for
    /// `keepalive_ns` and has none unanswered; the connections are looked at four
    /// times per interval (from [`Worker::scan`]).
    pub(super) fn h2_keepalive(&mut self, now_ns: Nanos, keepalive_ns: u64) {
        let h2 = self.h2.as_deref_mut().expect("HTTP/2 side");
        if now_ns < h2.next_ping_scan {
            return;
        }
        h2.next_ping_scan = now_ns + keepalive_ns / 4;
        for c in 0..h2.conns.len() as u32 {
            let h2 = self.h2.as_deref_mut().expect("HTTP/2 side");
            let hc = &mut h2.conns[c as usize];
            let ready = hc.settled
                && hc.conn.is_some()
                && self.table.conns[c as usize].state == ConnState::Ready
                && self.table.caps[c as usize] != 0;
            if !ready || hc.ping_out || now_ns.saturating_sub(hc.last_rx_ns) < keepalive_ns {
                continue;
            }
            hc.ping_out = true;
            self.out.counters.http2.pings_sent += 1;
            self.h2_ctl(c, |out| frame::write_ping(out, KEEPALIVE_PING, false));
            self.mark_flush(c);
        }
    }

    /// The slot of `c`'s request on `stream`, among those sent.
    pub(super) fn h2_slot(&self, c: u32, stream: u32) -> Option<usize> {
        let conn = &self.table.conns[c as usize];
        (0..conn.inflight - conn.unsent)
            .map(|nth| self.table.slot_index(c, nth))
            .find(|&i| self.table.slots[i].stream == stream)
    }

    /// `--server-time`: `ns` said by a header block of `stream` on `c`, with what its
    /// earlier blocks said (trailers add to the headers' list).
    fn h2_server_time(&mut self, c: u32, stream: u32, ns: u64) {
        if let Some(i) = self.h2_slot(c, stream) {
            let source = self.plan.server_time.as_deref();
            let before = self.server_fields[i];
            self.server_fields[i] =
                server_time::combine(source, (before != u64::MAX).then_some(before), ns);
        }
    }

    /// `--expect` body assertions: keeps `data` of `stream` on `c` for its request.
    fn h2_keep(&mut self, c: u32, stream: u32, data: &[u8]) {
        if self.h2.as_deref().is_some_and(|h2| h2.kept.is_some())
            && let Some(i) = self.h2_slot(c, stream)
            && let Some(kept) = self.h2.as_deref_mut().and_then(|h2| h2.kept.as_mut())
        {
            kept.push(i, data);
        }
    }

    /// What the response in slot `i` was by `--error-status` and `--expect`.
    fn h2_reply(&self, i: usize) -> Reply {
        let req = &self.table.slots[i];
        if req.status != 0 && self.plan.error_status.contains(req.status) {
            return Reply::Error;
        }
        if self.plan.expect.is_empty() {
            return Reply::Answer;
        }
        let kept = self.h2.as_deref().and_then(|h2| h2.kept.as_ref());
        match (self.plan.expect).check(req.entry, req.status, kept.and_then(|k| k.body(i))) {
            Verdict::Pass => Reply::Answer,
            Verdict::Unchecked => Reply::Unchecked,
            Verdict::Fail(a) => Reply::Assertion(a),
        }
    }

    /// The response in slot `i` of `c` is whole at `now_t`: the request is answered
    /// (a failure when its status is in `--error-status` or it fails an `--expect`).
    fn h2_answered(&mut self, c: u32, i: usize, now_t: Ticks) {
        let req = self.table.slots[i];
        if self.plan.http2.is_some_and(|h| h.grpc) {
            // A call: its grpc-status, or one its HTTP status maps to.
            let code = match req.status {
                s if s >= GRPC_STATUS_BASE => u32::from(s - GRPC_STATUS_BASE),
                s => crate::proto::grpc::code_of_http(s),
            };
            self.answered(c, req, now_t, Reply::error_if(code != 0));
            if self.recorded(req.intended_ns) {
                self.out.counters.grpc[code.min(GRPC_CODE_OTHER) as usize] += 1;
                if code != 0 {
                    self.replies
                        .error_name(crate::proto::grpc::code_name(code).as_bytes());
                }
            }
            return self.h2_retire(c, i);
        }
        let reply = self.h2_reply(i);
        self.answered(c, req, now_t, reply);
        if req.status != 0 && self.recorded(req.intended_ns) {
            let class = (req.status / 100) as usize;
            self.out.counters.http_status[if (1..=5).contains(&class) { class } else { 0 }] += 1;
            self.replies.http(req.status);
        }
        self.h2_retire(c, i);
    }

    /// Times out the streams of `c` past their deadline, oldest first: each is
    /// cancelled (RST_STREAM CANCEL, its slot freed, a timeout recorded at its
    /// deadline) while the connection and its other streams go on, unlike HTTP/1.1,
    /// where a request cannot be taken back without closing its connection. A reply
    /// arriving later for a cancelled stream is ignored (its DATA still counted in the
    /// connection's window). Stops where the control bytes are full: the rest are
    /// cancelled at the next scan, once those went out.
    pub(super) fn h2_expire(&mut self, c: u32, now_ns: Nanos) {
        let timeout = self.plan.timeout_ns;
        let generation = self.table.conns[c as usize].generation;
        loop {
            let conn = &self.table.conns[c as usize];
            if conn.generation != generation || conn.state != ConnState::Ready {
                return;
            }
            let sent = conn.inflight - conn.unsent;
            let Some(i) = (0..sent)
                .map(|nth| self.table.slot_index(c, nth))
                .find(|&i| self.table.slots[i].stream != ANSWERED)
            else {
                return;
            };
            let req = self.table.slots[i];
            if req.intended_ns + timeout > now_ns {
                return;
            }
            let h2 = self.h2.as_deref_mut().expect("HTTP/2 side");
            let hc = &mut h2.conns[c as usize];
            let Ok(n) =
                frame::write_rst_stream(&mut hc.ctl[hc.ctl_len..], req.stream, ErrorCode::CANCEL)
            else {
                self.mark_flush(c);
                return;
            };
            hc.ctl_len += n;
            if let Some(conn) = hc.conn.as_deref_mut() {
                conn.close_stream(req.stream);
            }
            self.out.counters.http2.streams_cancelled += 1;
            self.mark_flush(c);
            self.inflight -= 1;
            self.request_error(&req, Some(c), ErrorKind::Timeout, Some(timeout));
            self.h2_retire(c, i);
        }
    }

    /// Slot `i` of `c` is done: freed at once at the front, else when the older ones
    /// are; a connection the server is closing closes once nothing is left on it.
    fn h2_retire(&mut self, c: u32, i: usize) {
        self.h2_cancel_body(c, self.table.slots[i].stream);
        // Its stream is closed: requests waiting for a stream may go.
        if self.table.conns[c as usize].unsent > 0 {
            self.mark_flush(c);
        }
        self.table.slots[i].stream = ANSWERED;
        self.table.pop_answered(c);
        let idle = self.table.conns[c as usize].inflight == 0;
        if idle && self.workload.per_request() {
            // `--connect-per-request`: its one stream is done; the next request
            // opens a connection of its own.
            self.close_conn(c, None, super::Reopen::Now);
        } else if self.table.caps[c as usize] == 0 && idle {
            self.h2_goaway_close(c);
        } else {
            self.retire_drained(c);
        }
    }

    /// A stream answered (or failed) while its request body was still going out stays
    /// open on this side: it is reset (RST_STREAM CANCEL) so it neither holds one of
    /// the server's concurrent streams nor sends the rest of a body nobody reads.
    fn h2_cancel_body(&mut self, c: u32, stream: u32) {
        let Some(h2) = self.h2.as_deref_mut() else {
            return;
        };
        let hc = &mut h2.conns[c as usize];
        if hc.bodies_left.is_empty() || stream == ANSWERED || stream == 0 {
            return;
        }
        let Some(conn) = hc.conn.as_deref_mut().filter(|conn| conn.is_open(stream)) else {
            return;
        };
        let Ok(n) = frame::write_rst_stream(&mut hc.ctl[hc.ctl_len..], stream, ErrorCode::CANCEL)
        else {
            // Room for a reset per stream is kept (`ctl_bytes`): only a flood of
            // PINGs fills it; the body then goes on (or its stream stays open).
            self.out.counters.http2.control_dropped += 1;
            return;
        };
        hc.ctl_len += n;
        conn.close_stream(stream);
        hc.bodies_left.retain(|b| b.stream != stream);
        self.out.counters.http2.bodies_cut += 1;
        self.mark_flush(c);
    }

    /// Closes `c`, drained after a GOAWAY, and opens it again once the close is done.
    fn h2_goaway_close(&mut self, c: u32) {
        self.close_and_reopen(c, None);
    }

    /// The server reset the stream in slot `i`: REFUSED_STREAM means it did nothing
    /// with it (RFC 9113 §8.7), so the request is retried; any other code fails it.
    fn h2_reset(&mut self, c: u32, i: usize, code: ErrorCode) {
        let req = self.table.slots[i];
        self.out.counters.http2.stream_resets += 1;
        if code == ErrorCode::REFUSED_STREAM {
            self.h2_requeue(i);
            self.h2_retire(c, i);
        } else {
            self.h2_failed_stream(c, i, &req, ErrorKind::StreamReset);
        }
    }

    fn h2_failed_stream(&mut self, c: u32, i: usize, req: &Req, kind: ErrorKind) {
        self.inflight -= 1;
        self.request_error(req, Some(c), kind, None);
        self.h2_retire(c, i);
    }

    /// Slot `i`'s request goes back to the backlog with its intended instant (its
    /// latency keeps counting from there), to be sent on another connection; the slot
    /// is marked answered, and freed by the caller.
    fn h2_requeue(&mut self, i: usize) {
        let mut req = self.table.slots[i];
        self.table.slots[i].stream = ANSWERED;
        self.inflight -= 1;
        req.stream = 0;
        req.status = 0;
        if self.backlog.push(req) {
            self.out.counters.http2.retried += 1;
            self.backlog_peak = self.backlog_peak.max(self.backlog.len() as u64);
        } else {
            self.request_error(&req, None, ErrorKind::BacklogOverflow, None);
        }
    }

    /// GOAWAY: no new stream here; what the server did not process (streams above
    /// `last`, and requests not yet sent) is retried elsewhere; the rest finishes,
    /// then the connection closes and reopens.
    fn h2_goaway(&mut self, c: u32, last: u32) {
        self.out.counters.http2.goaways += 1;
        self.table.caps[c as usize] = 0;
        let conn = &self.table.conns[c as usize];
        let (inflight, unsent) = (conn.inflight, conn.unsent);
        for nth in 0..inflight {
            let i = self.table.slot_index(c, nth);
            let stream = self.table.slots[i].stream;
            // Not yet sent (stream 0), or above what the server processed.
            if stream != ANSWERED && (nth >= inflight - unsent || stream > last) {
                self.h2_requeue(i);
            }
        }
        // The unsent ones are the newest: they leave from the back.
        let conn = &mut self.table.conns[c as usize];
        conn.inflight -= unsent;
        conn.unsent = 0;
        self.table.pop_answered(c);
        if self.table.conns[c as usize].inflight == 0 {
            self.h2_goaway_close(c);
        }
    }

    /// A connection error (RFC 9113 §5.4.1): GOAWAY is owed but the connection ends
    /// anyway; its requests fail as protocol errors and it reopens.
    fn h2_failed(&mut self, c: u32, e: H2Error, bytes: &[u8]) {
        if self.table.conns[c as usize].state == ConnState::Connecting {
            // Not HTTP/2 at all (an HTTP/1.1 server answering the preface, say).
            let why = format!(
                "the server did not answer the HTTP/2 preface with SETTINGS ({e}): \"{}\"",
                crate::proto::escape_prefix(bytes, 64)
            );
            self.h2_refused(c, why);
            return;
        }
        self.protocol_error(c, &e.to_string(), bytes);
    }

    /// The server did not take `c` as an HTTP/2 connection (`why`): a failed open,
    /// retried after the backoff; the first reason is the run's one line when no
    /// connection opens.
    #[cold]
    pub(super) fn h2_refused(&mut self, c: u32, why: String) {
        if self.first_bad.is_none() {
            self.first_bad = Some(why.clone());
        }
        self.h2_refusal.get_or_insert(why);
        self.open_failed(c, ErrorKind::Protocol);
    }

    /// During the drain after the last due send, a connection the server closed with
    /// GOAWAY still reopens while requests it sent back wait in the backlog: they
    /// were due in the run, and go out on a new connection (not after Ctrl-C).
    pub(super) fn reopens_in_drain(&self) -> bool {
        self.h2.is_some() && !self.backlog.is_empty() && !self.core.interrupted
    }

    /// `c`'s HTTP/2 preface went out on its current connection (the TCP connect, and
    /// TLS, completed): what it waits for now is the server's SETTINGS.
    pub(super) fn h2_started(&self, c: u32) -> bool {
        self.h2.as_deref().is_some_and(|h2| {
            h2.conns[c as usize].generation == self.table.conns[c as usize].generation
        })
    }

    /// Writes what `c` owes and the requests it may send now into its staging region
    /// and sends them: control frames first, then each unsent request as a new stream
    /// while streams and send windows allow.
    pub(super) fn flush_h2(&mut self, c: u32, t: Ticks, t_ns: Nanos) {
        let conn = &self.table.conns[c as usize];
        let ready = match conn.state {
            _ if conn.send_armed => return, // on_send flushes again
            ConnState::Ready => true,
            ConnState::Connecting => false,
            _ => return,
        };
        let base = c as usize * self.staging_len;
        let end = base + self.staging_len;
        // Lent out while the requests are written, so the worker can stamp them.
        let mut h2 = self.h2.take().expect("HTTP/2 side");
        let hc = &mut h2.conns[c as usize];
        let mut len = hc.ctl_len;
        self.staging
            .region_mut(base..base + len)
            .copy_from_slice(&hc.ctl[..len]);
        hc.ctl_len = 0;
        let mut k = 0;
        if ready {
            let out = self.staging.region_mut(base + len..end);
            len += h2.write_bodies(c, out, &mut self.out.counters.http2);
            let conn = &self.table.conns[c as usize];
            let first = conn.inflight - conn.unsent;
            for nth in first..conn.inflight {
                let i = self.table.slot_index(c, nth);
                let req = self.table.slots[i];
                let ctx = Ctx {
                    seq: req.seq,
                    conn: (self.plan.conn_offset + c as usize) as u64,
                    worker: self.plan.index as u64,
                    time_ns: self.unix_at_start_ns + req.intended_ns,
                };
                let out = self.staging.region_mut(base + len..end);
                match h2.write(
                    c,
                    i,
                    &req,
                    &ctx,
                    self.plan,
                    out,
                    &mut self.out.counters.http2,
                ) {
                    Some((stream, n)) => {
                        self.table.slots[i].stream = stream;
                        if let Some(kept) = &mut h2.kept {
                            kept.lens[i] = 0;
                        }
                        if let Some(f) = self.server_fields.get_mut(i) {
                            *f = u64::MAX;
                        }
                        len += n;
                        k += 1;
                        self.stamp_sent(c, i, t, t_ns);
                    }
                    None => break,
                }
            }
        }
        self.h2 = Some(h2);
        if len == 0 {
            return;
        }
        let conn = &mut self.table.conns[c as usize];
        conn.sending = k;
        conn.unsent -= k;
        conn.send_done = 0;
        if self.plan.tls.is_some() {
            self.tls_write(c, len);
            return;
        }
        conn.send_len = len as u32;
        self.push_send(c);
    }
}

impl H2Side {
    /// Writes `req` (in request slot `i`) as a new stream of `c` into `out`: its
    /// stream id and the bytes written, or `None` when it must wait (no stream free,
    /// a window too small, the server going away).
    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        c: u32,
        i: usize,
        req: &Req,
        ctx: &Ctx,
        plan: &WorkerPlan,
        out: &mut [u8],
        counts: &mut H2Counters,
    ) -> Option<(u32, usize)> {
        let (block, body): (&[u8], &[u8]) = match &self.fixed[req.entry as usize] {
            Some((block, body)) => (block, body),
            None => {
                let template = &plan.requests.entries[req.entry as usize].template;
                // Drawn from the request's global sequence number, as HTTP/1.1's.
                let mut rng = request_rng(plan.seed ^ RENDER_STREAM, req.seq);
                let n = template.render(ctx, &mut rng, &mut self.scratch);
                let body = block_from_http1(&self.scratch[..n], self.scheme, &mut self.block)
                    .expect("the plan checked every entry converts");
                (&self.block, &self.scratch[body])
            }
        };
        let hc = &mut self.conns[c as usize];
        let conn = hc.conn.as_deref_mut().expect("an open HTTP/2 connection");
        let peer = *conn.peer();
        // The first DATA frame goes with the HEADERS; the rest of the body continues
        // in later sends (a rendered one from its slot's tail), or, where nothing
        // keeps it, the body goes whole or waits.
        let first = (body.len())
            .min(DATA_CHUNK)
            .min(conn.connection_send_window().max(0) as usize)
            .min(peer.initial_window_size as usize);
        let goes_on = self.bodies[req.entry as usize].is_some() || self.tails.is_some();
        if !body.is_empty() && (first == 0 || (first < body.len() && !goes_on)) {
            if !hc.stalled {
                hc.stalled = true;
                counts.flow_stalls += 1;
            }
            return None;
        }
        let stream = match conn.open_stream() {
            Ok(s) => s,
            Err(OpenRefused::Full | OpenRefused::GoingAway | OpenRefused::IdsExhausted) => {
                return None;
            }
        };
        debug_assert!(request_len(block.len(), first, peer.max_frame_size) <= out.len());
        let done = first == body.len();
        if first > 0 {
            conn.consume_send(stream, first);
        }
        let n = write_request(
            out,
            stream,
            block,
            &body[..first],
            done,
            peer.max_frame_size,
        );
        if done {
            conn.end_local(stream);
        } else {
            let slot = if self.bodies[req.entry as usize].is_some() {
                u32::MAX
            } else {
                let tails = self.tails.as_mut().expect("goes_on checked");
                tails.keep(i, req.seq, body);
                i as u32
            };
            hc.bodies_left.push_back(BodyLeft {
                stream,
                entry: req.entry,
                off: first as u32,
                slot,
                seq: req.seq,
            });
        }
        Some((stream, n))
    }

    /// Writes into `out` what the send windows let the bodies part way out on `c`
    /// send now, oldest first, in DATA frames of at most [`DATA_CHUNK`]; a body whose
    /// stream closed meanwhile (reset, or answered and closed) is dropped. Returns the
    /// bytes written.
    fn write_bodies(&mut self, c: u32, out: &mut [u8], counts: &mut H2Counters) -> usize {
        let hc = &mut self.conns[c as usize];
        let Some(conn) = hc.conn.as_deref_mut() else {
            return 0;
        };
        let mut n = 0;
        let mut stalled = false;
        hc.bodies_left.retain_mut(|b| {
            if !conn.is_open(b.stream) {
                return false;
            }
            let body = match (&self.bodies[b.entry as usize], &self.tails) {
                (Some(body), _) => body.as_slice(),
                (None, Some(tails)) => match tails.body(b.slot as usize, b.seq) {
                    Some(body) => body,
                    // Its slot went to a newer request (the reply came before the
                    // whole body went): nothing of it is left to send.
                    None => return false,
                },
                (None, None) => unreachable!("only bodies something keeps continue"),
            };
            loop {
                let left = body.len() - b.off as usize;
                let cap = conn.send_capacity(b.stream).min(DATA_CHUNK).min(left);
                if cap == 0 {
                    stalled = true;
                    return true;
                }
                if out.len() - n < FRAME_HEADER_BYTES + cap {
                    return true; // the next send takes it
                }
                let from = b.off as usize;
                let end = cap == left;
                n += frame::write_data(&mut out[n..], b.stream, &body[from..from + cap], end)
                    .expect("room checked");
                conn.consume_send(b.stream, cap);
                b.off += cap as u32;
                if end {
                    conn.end_local(b.stream);
                    return false;
                }
            }
        });
        if stalled && !hc.stalled {
            hc.stalled = true;
            counts.flow_stalls += 1;
        }
        n
    }
}
