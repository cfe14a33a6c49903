//! Per-worker recorder: the four histograms of DESIGN.md and the counters, for one
//! interval. It lives in the engine because the worker loops write it on the hot path;
//! `metrics` merges what the workers send and judges it. Histograms are created with explicit bounds so recording never resizes;
//! values beyond the bound are clamped (saturating), never dropped.

use crate::limits::{HISTOGRAM_NS_MAX, HISTOGRAM_SIGFIG};
use crate::transport::tls::TlsFailure;
use hdrhistogram::Histogram;

/// The four per-request durations, in nanoseconds.
#[derive(Clone, Debug)]
pub struct Histograms {
    /// done - intended: what a user of the target experiences. The headline.
    pub latency: Histogram<u64>,
    /// done - sent: what closed-loop tools report.
    pub service: Histogram<u64>,
    /// dispatched - intended: the generator's own health.
    pub dispatch_lag: Histogram<u64>,
    /// sent - dispatched: time a due request waited for a free connection slot.
    pub connection_wait: Histogram<u64>,
    /// connect submitted -> established: the target's accept path (and SYN queue).
    pub connect: Histogram<u64>,
    /// Delay chosen before each reconnect (backoff with jitter).
    pub reconnect_delay: Histogram<u64>,
    /// Time-rescaled gaps between actual dispatches, x 1e6 (Exp(1) for Poisson and 1
    /// for constant arrivals when the pacing is exact).
    pub pacing: Histogram<u64>,
    /// `--workload frames`: receive instant - intended send instant of each frame
    /// received (first arrival).
    pub frame_deviation: Histogram<u64>,
    /// Frames: |inter-arrival of consecutive frames from one source at one receiver -
    /// tick|.
    pub frame_jitter: Histogram<u64>,
    /// Frames: intended send instant -> the last receiver of the room got the frame.
    pub frame_fanout: Histogram<u64>,
    /// Frames: a connection's join, from its connect submitted to the server's last
    /// answer of the join exchange (`--frame-proto`; the connect alone for blaster).
    pub frame_join: Histogram<u64>,
    /// done - intended of replies that parsed but report failure (HTTP 5xx, RESP
    /// `-ERR`, memcached `SERVER_ERROR`, ...): kept apart from `latency`, so a target
    /// that fails fast cannot make the headline look better.
    pub error_latency: Histogram<u64>,
    /// `--tls`: TCP connected -> handshake complete.
    pub tls_handshake: Histogram<u64>,
    /// `--server-time`: the server's own time its reply carried (answers only).
    pub server_time: Histogram<u64>,
    /// `--server-time`: latency - server time of the same reply (saturating at 0):
    /// network and queueing, per request.
    pub network_queueing: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HISTOGRAM_NS_MAX, HISTOGRAM_SIGFIG)
        .expect("constant histogram bounds are valid")
}

/// A histogram the run never records into: a few bytes instead of the ~270 KB that
/// hdrhistogram writes (zero-fills) for the full range, per set, per worker. It adds
/// into a full one like any other (empty, and within its range).
fn unused() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 2, 1).expect("constant histogram bounds are valid")
}

/// Which of a set's histograms a worker records into: the frames' (`--workload
/// frames`) and the TLS handshake's (`--tls`); the others always. A worker's sets are
/// all of its shape, so its sets add into the collector's full ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistShape {
    /// The request/response histograms: `latency`, `service`, `connection_wait`,
    /// `connect`, `reconnect_delay`, `pacing` and `error_latency` (every workload but
    /// frames, which records none of them: issue 36, 1.6 MB a set).
    pub requests: bool,
    pub frames: bool,
    pub tls: bool,
    /// `--server-time`: `server_time` and `network_queueing`.
    pub server_time: bool,
}

impl HistShape {
    /// Every histogram full (the collector's sets, tests).
    pub const FULL: HistShape = HistShape {
        requests: true,
        frames: true,
        tls: true,
        server_time: true,
    };
}

impl Histograms {
    pub fn new() -> Self {
        Self::shaped(HistShape::FULL)
    }

    /// A set whose histograms the `shape` does not record into are tiny.
    pub fn shaped(shape: HistShape) -> Self {
        let frames = || if shape.frames { histogram() } else { unused() };
        let requests = || {
            if shape.requests {
                histogram()
            } else {
                unused()
            }
        };
        Histograms {
            latency: requests(),
            service: requests(),
            dispatch_lag: histogram(),
            connection_wait: requests(),
            connect: requests(),
            reconnect_delay: requests(),
            pacing: requests(),
            frame_deviation: frames(),
            frame_jitter: frames(),
            frame_fanout: frames(),
            frame_join: frames(),
            error_latency: requests(),
            tls_handshake: if shape.tls { histogram() } else { unused() },
            server_time: if shape.server_time {
                histogram()
            } else {
                unused()
            },
            network_queueing: if shape.server_time {
                histogram()
            } else {
                unused()
            },
        }
    }

    /// A set that stays empty (a second no worker reported): every histogram tiny.
    pub fn empty() -> Self {
        let mut h = Self::shaped(HistShape {
            requests: false,
            frames: false,
            tls: false,
            server_time: false,
        });
        h.dispatch_lag = unused();
        h
    }

    /// Adds another set (same bounds by construction, so `add` cannot fail).
    pub fn add(&mut self, other: &Histograms) {
        for (a, b) in self.parts_mut().into_iter().zip(other.parts()) {
            a.add(b).expect("histograms share bounds");
        }
    }

    pub fn reset(&mut self) {
        for h in self.parts_mut() {
            h.reset();
        }
    }

    /// The warm-up's reset: everything but the joins (`frame_join`), which are the
    /// control plane's figures, one per connection, mostly taken before the schedule.
    /// In place, no allocation.
    pub fn reset_warmup(&mut self) {
        let join: *const Histogram<u64> = &self.frame_join;
        for h in self.parts_mut() {
            if !std::ptr::eq(&*h, join) {
                h.reset();
            }
        }
    }

    fn parts(&self) -> [&Histogram<u64>; 15] {
        [
            &self.latency,
            &self.service,
            &self.dispatch_lag,
            &self.connection_wait,
            &self.connect,
            &self.reconnect_delay,
            &self.pacing,
            &self.frame_deviation,
            &self.frame_jitter,
            &self.frame_fanout,
            &self.frame_join,
            &self.error_latency,
            &self.tls_handshake,
            &self.server_time,
            &self.network_queueing,
        ]
    }

    fn parts_mut(&mut self) -> [&mut Histogram<u64>; 15] {
        [
            &mut self.latency,
            &mut self.service,
            &mut self.dispatch_lag,
            &mut self.connection_wait,
            &mut self.connect,
            &mut self.reconnect_delay,
            &mut self.pacing,
            &mut self.frame_deviation,
            &mut self.frame_jitter,
            &mut self.frame_fanout,
            &mut self.frame_join,
            &mut self.error_latency,
            &mut self.tls_handshake,
            &mut self.server_time,
            &mut self.network_queueing,
        ]
    }
}

impl Default for Histograms {
    fn default() -> Self {
        Self::new()
    }
}

/// The errnos a failed connection attempt is counted under (`failed_by_errno`); any
/// other errno is counted in the last slot.
pub const CONNECT_ERRNOS: [i32; 12] = [
    libc::ECONNREFUSED,
    libc::ETIMEDOUT,
    libc::EADDRNOTAVAIL,
    libc::EMFILE,
    libc::ENFILE,
    libc::ECONNRESET,
    libc::EPIPE,
    libc::ENETUNREACH,
    libc::EHOSTUNREACH,
    libc::ENOBUFS,
    libc::ENOMEM,
    libc::EADDRINUSE,
];
/// Slots of [`Counters::failed_errno`]: the errnos above, then "other".
pub const ERRNO_SLOTS: usize = CONNECT_ERRNOS.len() + 1;

/// The slot of `errno` in [`Counters::failed_errno`].
pub fn errno_slot(errno: i32) -> usize {
    CONNECT_ERRNOS
        .iter()
        .position(|&e| e == errno)
        .unwrap_or(CONNECT_ERRNOS.len())
}

/// Kinds of failure. A failed request is counted once, under one kind, in
/// [`Counters::errors`] (so the kinds add up to the request errors); a failure that
/// failed no request (a persistent connection refused, unsolicited bytes) is a
/// connection event, counted in [`Counters::events`] instead. A connect that fails
/// the request waiting for it (connection per request) is that request's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum ErrorKind {
    /// No response within `--timeout` (latency recorded at the timeout).
    Timeout,
    /// A due request found the backlog full (latency recorded at the timeout).
    BacklogOverflow,
    /// The target closed the connection with requests in flight.
    ClosedByPeer,
    /// ECONNRESET / EPIPE while requests were in flight.
    Reset,
    /// A connect attempt was refused (ECONNREFUSED).
    ConnectRefused,
    /// A connect attempt failed otherwise (timeout, unreachable, ...).
    ConnectFailed,
    /// A response that does not parse (or is larger than the receive buffer).
    Protocol,
    /// Response bytes arrived with no request in flight: a connection event only.
    Unsolicited,
    /// A UDP datagram with no response within the timeout (latency recorded there).
    Lost,
    /// Another send or receive error.
    Io,
    /// A reply that parsed but reports failure (`--error-status` HTTP codes, RESP
    /// error replies, memcached `ERROR`/`CLIENT_ERROR`/`SERVER_ERROR`); its latency is
    /// in `error_latency`.
    ErrorReply,
    /// A TLS handshake failed (counted by kind in [`TlsCounters`]).
    TlsHandshake,
    /// The server reset the request's HTTP/2 stream (RST_STREAM other than
    /// REFUSED_STREAM, which is retried).
    StreamReset,
    /// A reply that parsed but failed an `--expect` assertion (counted per assertion in
    /// [`ReplyTally::expect_failed`]); its latency is in `error_latency`.
    Assertion,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 14] = [
        ErrorKind::Timeout,
        ErrorKind::BacklogOverflow,
        ErrorKind::ClosedByPeer,
        ErrorKind::Reset,
        ErrorKind::ConnectRefused,
        ErrorKind::ConnectFailed,
        ErrorKind::Protocol,
        ErrorKind::Unsolicited,
        ErrorKind::Lost,
        ErrorKind::Io,
        ErrorKind::ErrorReply,
        ErrorKind::TlsHandshake,
        ErrorKind::StreamReset,
        ErrorKind::Assertion,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::BacklogOverflow => "backlog_overflow",
            ErrorKind::ClosedByPeer => "closed_by_peer",
            ErrorKind::Reset => "reset",
            ErrorKind::ConnectRefused => "connect_refused",
            ErrorKind::ConnectFailed => "connect_failed",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Unsolicited => "unsolicited",
            ErrorKind::Lost => "lost",
            ErrorKind::Io => "io",
            ErrorKind::ErrorReply => "error_reply",
            ErrorKind::TlsHandshake => "tls_handshake",
            ErrorKind::StreamReset => "stream_reset",
            ErrorKind::Assertion => "assertion",
        }
    }
}

/// Event counts for one interval of one worker (or merged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests whose due instant came (the schedule's count).
    pub dispatched: u64,
    /// The first request dispatched from the timetable: (intended, dispatched), ns
    /// since the start. With `--start-at` its lag is the start skew.
    pub first_dispatch: Option<(u64, u64)>,
    /// Requests put on the wire (send submitted).
    pub sent: u64,
    /// Responses fully received.
    pub completed: u64,
    /// Requests cut off by the end of the run or Ctrl-C: not errors.
    pub cut_off: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub connections_opened: u64,
    pub connections_failed: u64,
    /// Failed connection attempts by errno (see [`CONNECT_ERRNOS`]).
    pub failed_errno: [u64; ERRNO_SLOTS],
    /// Established connections the target closed (EOF) or reset.
    pub closed_by_target: u64,
    /// Connections opened again after the first time (after a close or a failure).
    pub reconnects: u64,
    /// `--conn-max-age`, `--conn-max-requests`: connections retired (drained, closed
    /// and replaced).
    pub connections_recycled: u64,
    /// Failed requests by kind: each failed request once, under one kind.
    pub errors: [u64; ErrorKind::ALL.len()],
    /// Connection events by kind: failures that failed no request.
    pub events: [u64; ErrorKind::ALL.len()],
    /// UDP: responses received twice.
    pub duplicates: u64,
    /// UDP: responses that arrived after one with a higher sequence number.
    pub reordered: u64,
    /// UDP: datagrams without blaster's header, or for a flow or sequence not sent.
    pub foreign: u64,
    /// UDP: responses that arrived after their request was already counted lost.
    pub late: u64,
    /// UDP: requests whose response came back joined to another response in one
    /// datagram (found after the first; those requests stay lost at their timeout).
    pub joined: u64,
    /// HTTP: responses by status class; index 1..=5 for 1xx..5xx, 0 for anything else.
    pub http_status: [u64; 6],
    /// `--workload frames`.
    pub frames: FrameCounters,
    /// `--tls`: handshakes.
    pub tls: TlsCounters,
    /// `--http2`: what the connections' HTTP/2 side counted.
    pub http2: H2Counters,
    /// `--grpc`: calls answered, by status code (index = code; 17: a code beyond the
    /// table).
    pub grpc: [u64; 18],
    /// `--server-time`: answers whose reply carried no server time (not in
    /// `server_time` nor `network_queueing`).
    pub server_time_missing: u64,
    /// `--replay`: times the worker found its next request not yet read.
    pub replay_dry: u64,
}

/// `--http2` events of one interval of one worker (or merged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct H2Counters {
    /// GOAWAY frames received.
    pub goaways: u64,
    /// Requests sent again on another connection: not processed before a GOAWAY, or
    /// refused (REFUSED_STREAM). Each is still one request, its latency from its
    /// intended instant.
    pub retried: u64,
    /// Streams the server reset (RST_STREAM), REFUSED_STREAM included.
    pub stream_resets: u64,
    /// Streams this side cancelled at their timeout (RST_STREAM CANCEL); each is a
    /// `timeout` error, its connection kept.
    pub streams_cancelled: u64,
    /// Streams answered while their request body was still going out, reset by this
    /// side (RST_STREAM CANCEL) with the rest of the body unsent.
    pub bodies_cut: u64,
    /// Times a connection's requests waited for a send window (flow control).
    pub flow_stalls: u64,
    /// Control frames (PING ACKs) that found no room before the next send.
    pub control_dropped: u64,
    /// `--h2-keepalive`: PINGs sent, and their acknowledgements.
    pub pings_sent: u64,
    pub pings_acked: u64,
    /// GOAWAYs by error code (index: the code; the last slot: codes beyond the named
    /// ones).
    pub goaway_codes: [u64; GOAWAY_CODES],
}

/// Slots of [`H2Counters::goaway_codes`]: RFC 9113's 14 codes and one for the rest.
pub const GOAWAY_CODES: usize = 15;

impl H2Counters {
    pub fn add(&mut self, o: &H2Counters) {
        self.goaways += o.goaways;
        self.retried += o.retried;
        self.stream_resets += o.stream_resets;
        self.streams_cancelled += o.streams_cancelled;
        self.bodies_cut += o.bodies_cut;
        self.flow_stalls += o.flow_stalls;
        self.control_dropped += o.control_dropped;
        self.pings_sent += o.pings_sent;
        self.pings_acked += o.pings_acked;
        for (a, b) in self.goaway_codes.iter_mut().zip(o.goaway_codes) {
            *a += b;
        }
    }
}

/// TLS handshakes of one interval of one worker (or merged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlsCounters {
    /// Handshakes completed without resuming a session.
    pub full: u64,
    /// Handshakes that resumed a session (ticket or session id).
    pub resumed: u64,
    /// Failed handshakes by kind (index: [`TlsFailure`] as usize).
    pub failed: [u64; TlsFailure::ALL.len()],
}

impl TlsCounters {
    pub fn add(&mut self, o: &TlsCounters) {
        self.full += o.full;
        self.resumed += o.resumed;
        for (a, b) in self.failed.iter_mut().zip(o.failed) {
            *a += b;
        }
    }

    pub fn failures(&self) -> u64 {
        self.failed.iter().sum()
    }
}

/// Frame counts for one interval of one worker (or merged); see `engine::frames`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameCounters {
    /// Frames put on the wire (their send submitted).
    pub sent: u64,
    /// Frames received for the first time (unique, planned).
    pub received: u64,
    pub duplicates: u64,
    /// Arrived after a frame with a higher sequence from the same source.
    pub reordered: u64,
    /// Received with an arrival deviation beyond `--frame-budget`.
    pub late: u64,
    /// Older than the receive window: too late to tell from a duplicate.
    pub stale: u64,
    /// Planned frames finalised as never received (gaps pushed out of the window in
    /// the interval; the rest at the end of the run).
    pub lost: u64,
    /// Frames that do not belong here (another room, past the plan, not a frame).
    pub foreign: u64,
    /// A room mate's planned frame sent before the receiver joined, which the server
    /// relayed to it all the same (not expected, not received, not foreign).
    pub before_join: u64,
    /// Frames every receiver of the room got (one fan-out sample each).
    pub fanout_complete: u64,
    /// Connections that went down during the run.
    pub disconnects: u64,
    /// Frames due while their connection was down: never sent (gRPC: also those a
    /// full flow-control backlog could not hold).
    pub not_sent: u64,
    /// gRPC: frames that waited for the server's HTTP/2 flow-control window before
    /// going out (counted when they start waiting; they show as arrival deviation).
    pub flow_stalled: u64,
    /// `--h2-keepalive` (gRPC frames): PINGs sent, and those acknowledged.
    pub pings_sent: u64,
    pub pings_acked: u64,
    /// Plain TCP frames' shared pools (issue 36): multishot receives that found no
    /// provided buffer (ENOBUFS; armed again), and sends that waited for a send slot.
    pub recv_no_buffer: u64,
    pub send_slot_waits: u64,
    /// A gauge, not a count: the connections up when the worker's interval snapshot
    /// was taken (summed over workers it is the interval's `connections_active`;
    /// meaningless summed over intervals).
    pub connections_active: u64,
}

impl FrameCounters {
    pub fn add(&mut self, o: &FrameCounters) {
        self.sent += o.sent;
        self.received += o.received;
        self.duplicates += o.duplicates;
        self.reordered += o.reordered;
        self.late += o.late;
        self.stale += o.stale;
        self.lost += o.lost;
        self.foreign += o.foreign;
        self.before_join += o.before_join;
        self.fanout_complete += o.fanout_complete;
        self.disconnects += o.disconnects;
        self.not_sent += o.not_sent;
        self.flow_stalled += o.flow_stalled;
        self.pings_sent += o.pings_sent;
        self.pings_acked += o.pings_acked;
        self.recv_no_buffer += o.recv_no_buffer;
        self.send_slot_waits += o.send_slot_waits;
        self.connections_active += o.connections_active;
    }
}

impl Counters {
    /// Counts a failed connection attempt with its errno.
    pub fn connect_failed(&mut self, errno: i32) {
        self.connections_failed += 1;
        self.failed_errno[errno_slot(errno)] += 1;
    }

    /// Counts one failed request of `kind`.
    #[inline]
    pub fn error(&mut self, kind: ErrorKind) {
        // Bytes nobody asked for fail no request.
        debug_assert!(kind != ErrorKind::Unsolicited, "not a request error");
        self.errors[kind as usize] += 1;
    }

    /// Counts a failure of `kind` that failed no request.
    #[inline]
    pub fn event(&mut self, kind: ErrorKind) {
        self.events[kind as usize] += 1;
    }

    pub fn errors_of(&self, kind: ErrorKind) -> u64 {
        self.errors[kind as usize]
    }

    pub fn events_of(&self, kind: ErrorKind) -> u64 {
        self.events[kind as usize]
    }

    /// Failed requests (timeouts, resets, refused connects of their own, ...): the
    /// sum of the kinds, as every failed request is counted under exactly one.
    pub fn request_errors(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// Remembers the request due `intended_ns`, dispatched at `dispatched_ns`, when it
    /// is the first (the earliest due) this worker dispatched: the start skew.
    #[inline]
    pub fn note_dispatch(&mut self, intended_ns: u64, dispatched_ns: u64) {
        if self.first_dispatch.is_none() {
            self.first_dispatch = Some((intended_ns, dispatched_ns));
        }
    }

    pub fn add(&mut self, o: &Counters) {
        // The earliest due of the two firsts is the run's first.
        if let Some(f) = o.first_dispatch
            && self.first_dispatch.is_none_or(|s| f.0 < s.0)
        {
            self.first_dispatch = Some(f);
        }
        self.dispatched += o.dispatched;
        self.sent += o.sent;
        self.completed += o.completed;
        self.cut_off += o.cut_off;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.connections_opened += o.connections_opened;
        self.connections_failed += o.connections_failed;
        for (a, b) in self.failed_errno.iter_mut().zip(o.failed_errno) {
            *a += b;
        }
        self.closed_by_target += o.closed_by_target;
        self.reconnects += o.reconnects;
        self.connections_recycled += o.connections_recycled;
        for (a, b) in self.errors.iter_mut().zip(o.errors) {
            *a += b;
        }
        for (a, b) in self.events.iter_mut().zip(o.events) {
            *a += b;
        }
        self.duplicates += o.duplicates;
        self.reordered += o.reordered;
        self.foreign += o.foreign;
        self.late += o.late;
        self.joined += o.joined;
        self.server_time_missing += o.server_time_missing;
        self.replay_dry += o.replay_dry;
        self.frames.add(&o.frames);
        self.tls.add(&o.tls);
        self.http2.add(&o.http2);
        for (a, b) in self.grpc.iter_mut().zip(o.grpc) {
            *a += b;
        }
        for (a, b) in self.http_status.iter_mut().zip(o.http_status) {
            *a += b;
        }
    }
}

/// Exact HTTP status codes (100..=599; anything else under 0) and the kinds of error
/// reply seen over the run: a worker's totals, reported once. Sized at start; recording
/// never allocates (names past the table's size count as "other").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplyTally {
    /// Responses by status code (index = code; 0 for codes outside 100..=599). Empty
    /// until [`ReplyTally::new`].
    pub http_codes: Vec<u64>,
    /// Error replies by their first word (`-WRONGTYPE`, `SERVER_ERROR`, ...), at most
    /// [`ReplyTally::NAMES`] distinct; the rest in `other_names`.
    pub names: Vec<(String, u64)>,
    pub other_names: u64,
    /// `--expect`: replies failed by each assertion (index = the assertion's place on
    /// the command line; a reply counts under the first that failed). Empty without
    /// `--expect`.
    pub expect_failed: Vec<u64>,
    /// `--expect`: replies whose body assertions could not be checked (the response
    /// outgrew what the engine keeps whole); not failed, not passed.
    pub expect_unchecked: u64,
}

impl ReplyTally {
    /// Distinct error-reply names kept.
    pub const NAMES: usize = 8;
    /// Longest name kept, bytes.
    pub const NAME_BYTES: usize = 24;

    pub fn new() -> Self {
        ReplyTally {
            http_codes: vec![0; 600],
            names: Vec::with_capacity(Self::NAMES),
            other_names: 0,
            expect_failed: Vec::new(),
            expect_unchecked: 0,
        }
    }

    #[inline]
    pub fn http(&mut self, code: u16) {
        let i = if (100..600).contains(&code) {
            code as usize
        } else {
            0
        };
        if let Some(n) = self.http_codes.get_mut(i) {
            *n += 1;
        }
    }

    /// Counts an error reply by the first word of `reply` (its first bytes; empty when
    /// they are not at hand). Allocates only the first time a name is seen, at most
    /// [`Self::NAMES`] times a run.
    pub fn error_name(&mut self, reply: &[u8]) {
        let word = reply
            .split(|&b| b == b' ' || b == b'\r' || b == b'\n')
            .next()
            .unwrap_or(&[]);
        let word = &word[..word.len().min(Self::NAME_BYTES)];
        let printable = !word.is_empty() && word.iter().all(|b| b.is_ascii_graphic());
        let name: &[u8] = if printable {
            word
        } else {
            b"(error inside a reply)"
        };
        if let Some(e) = self.names.iter_mut().find(|(n, _)| n.as_bytes() == name) {
            e.1 += 1;
        } else if self.names.len() < Self::NAMES {
            self.names
                .push((String::from_utf8_lossy(name).into_owned(), 1));
        } else {
            self.other_names += 1;
        }
    }

    pub fn add(&mut self, o: &ReplyTally) {
        if self.http_codes.len() < o.http_codes.len() {
            self.http_codes.resize(o.http_codes.len(), 0);
        }
        for (a, b) in self.http_codes.iter_mut().zip(&o.http_codes) {
            *a += b;
        }
        for (name, n) in &o.names {
            if let Some(e) = self.names.iter_mut().find(|(m, _)| m == name) {
                e.1 += n;
            } else {
                self.names.push((name.clone(), *n));
            }
        }
        self.other_names += o.other_names;
        if self.expect_failed.len() < o.expect_failed.len() {
            self.expect_failed.resize(o.expect_failed.len(), 0);
        }
        for (a, b) in self.expect_failed.iter_mut().zip(&o.expect_failed) {
            *a += b;
        }
        self.expect_unchecked += o.expect_unchecked;
    }

    /// Forgets everything counted (the warm-up ended).
    pub fn clear(&mut self) {
        self.http_codes.iter_mut().for_each(|n| *n = 0);
        self.names.clear();
        self.other_names = 0;
        self.expect_failed.iter_mut().for_each(|n| *n = 0);
        self.expect_unchecked = 0;
    }
}

/// What a worker sends the collector at every interval boundary and at the end.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub worker: usize,
    /// Interval number (0 = the first second of the schedule).
    pub interval: u64,
    pub histograms: Histograms,
    pub counters: Counters,
    /// How the worker spent the interval (its own measure of how busy it was).
    pub usage: super::pacing::Usage,
    /// Set on the worker's last snapshot; carries its totals of CPU use.
    pub last: Option<WorkerTotals>,
}

/// Per-worker figures reported once, at the end.
#[derive(Clone, Debug, Default)]
pub struct WorkerTotals {
    pub core: Option<usize>,
    /// CPU time of the worker thread (user + system), ns.
    pub cpu_ns: u64,
    /// Wall time spent spinning on the TSC waiting for a due instant, ns. Wall, not
    /// CPU: on a loaded host it includes time the thread was preempted, so it can
    /// exceed the CPU it cost ([`super::pacing::busy_cpu_ns`]).
    pub spin_ns: u64,
    /// Wall time asleep in the ring, ns.
    pub sleep_ns: u64,
    /// How many times the worker went to sleep in the ring (each ends in a wake-up).
    pub sleeps: u64,
    /// How late the ring's timeouts ended, as the worker measured it (a moving
    /// average), ns.
    pub timer_late_ns: u64,
    /// How late they ended at about the 99.5th percentile, ns: what a resolution
    /// window's wake-up was aimed by (at most half the resolution).
    pub timer_late_p995_ns: u64,
    /// Wall time from the schedule's start to the worker's end, ns.
    pub wall_ns: u64,
    /// When the schedule stopped (its end, or Ctrl-C), ns since start.
    pub stopped_ns: u64,
    /// When the last response completed, ns since start (0 if none).
    pub last_done_ns: u64,
    /// Busy share (CPU minus spinning, over wall time) while the schedule ran.
    pub busy_at_stop: f64,
    /// Responses completed over the whole run.
    pub completed: u64,
    /// Peak number of requests waiting in the backlog.
    pub backlog_peak: u64,
    /// Interval boundaries that allocated histograms on the worker thread (the
    /// collector was more than `driver::HISTOGRAM_SPARES` intervals behind). Set by
    /// the outbox on the last snapshot.
    pub histogram_allocations: u64,
    pub ring_features: Vec<&'static str>,
    /// The first response that did not parse, escaped and truncated.
    pub first_protocol_error: Option<String>,
    /// `--http2`: the first GOAWAY's code name and debug text.
    pub first_goaway: Option<String>,
    /// Per `--mix` entry (empty without a mix).
    pub entries: Vec<EntryTotals>,
    /// Per destination, in `--target` order (empty with fewer than two targets: the
    /// run's totals are then the one target's).
    pub targets: Vec<TargetTotals>,
    /// What stopped the worker before the end of its schedule (a broken ring).
    pub error: Option<super::driver::WorkerError>,
    /// `--workload frames`: the run's receive accounting and residency.
    pub frames: Option<FrameTotals>,
    /// HTTP status codes and error-reply kinds over the run.
    pub replies: ReplyTally,
}

/// A frames worker's figures over the whole run.
#[derive(Clone, Debug, Default)]
pub struct FrameTotals {
    /// Frames planned to be sent (every connection, every tick of the run).
    pub planned: u64,
    /// Frames the receivers were planned to get, and got (unique).
    pub expected: u64,
    pub received: u64,
    /// Expected frames still on their way when the drain reached its cap (not lost).
    pub in_flight_at_end: u64,
    /// Per receiving connection: (expected, received).
    pub per_receiver: Vec<(u64, u64)>,
    /// Frames with at least one receiver, and those every receiver got.
    pub fanout_expected: u64,
    pub fanout_complete: u64,
    /// Per connection: ns it was up during the schedule.
    pub uptime_ns: Vec<u64>,
    /// Per connection (as `uptime_ns`): ns it was meant to be up, from its first
    /// planned frame (its join under a `--connect-rate` ramp) to the schedule's end.
    pub span_ns: Vec<u64>,
    pub reconnects: u64,
    /// `--aggregate`: downlink frames received outside the expected server ticks.
    pub outside: u64,
    /// `--aggregate`: how far the expected arrival moved earlier after measuring
    /// started (ns).
    pub shift_ns: u64,
    /// `--frame-proto`: joins that failed, by kind.
    pub join_failures: JoinFailures,
    /// The first failed join's reason (the server's words where it gave some).
    pub first_join_error: Option<String>,
    /// `--slow-readers`: the slow readers' figures (all 0 without it).
    pub slow: SlowTotals,
}

/// `--slow-readers`: the slow readers' part of a frames run, kept apart from every
/// other figure of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SlowTotals {
    /// Slow connections, and their members (receivers).
    pub connections: u64,
    pub members: u64,
    /// Frames they were planned to get, and got (unique).
    pub expected: u64,
    pub received: u64,
    /// Gaps below a frame they received: frames the server dropped (TCP keeps order).
    pub dropped: u64,
    /// expected - received - dropped: never read by the end (still queued in the
    /// kernel or the server, or dropped after the last frame read).
    pub unread: u64,
    pub late: u64,
    pub duplicates: u64,
    /// Slow connections that went down (closed or reset by the server).
    pub disconnects: u64,
}

impl SlowTotals {
    pub fn add(&mut self, o: &SlowTotals) {
        self.connections += o.connections;
        self.members += o.members;
        self.expected += o.expected;
        self.received += o.received;
        self.dropped += o.dropped;
        self.unread += o.unread;
        self.late += o.late;
        self.duplicates += o.duplicates;
        self.disconnects += o.disconnects;
    }
}

/// Failed joins of `--frame-proto` adapters, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct JoinFailures {
    /// The server said no (an error reply, a refusing return code or status).
    pub refused: u64,
    /// The server's answer was not the protocol.
    pub protocol: u64,
    /// The server closed the connection before the join completed.
    pub closed: u64,
    /// No answer within the connect phase's timeout.
    pub timeout: u64,
}

impl JoinFailures {
    pub fn add(&mut self, o: &JoinFailures) {
        self.refused += o.refused;
        self.protocol += o.protocol;
        self.closed += o.closed;
        self.timeout += o.timeout;
    }

    pub fn total(&self) -> u64 {
        self.refused + self.protocol + self.closed + self.timeout
    }
}

/// One `--mix` entry's figures over the whole run.
#[derive(Clone, Debug)]
pub struct EntryTotals {
    pub latency: Histogram<u64>,
    pub completed: u64,
    pub errors: u64,
}

impl EntryTotals {
    pub fn new() -> Self {
        EntryTotals {
            latency: histogram(),
            completed: 0,
            errors: 0,
        }
    }

    pub fn add(&mut self, o: &EntryTotals) {
        self.latency
            .add(&o.latency)
            .expect("histograms share bounds");
        self.completed += o.completed;
        self.errors += o.errors;
    }
}

impl Default for EntryTotals {
    fn default() -> Self {
        Self::new()
    }
}

/// One destination's figures over the whole run (`--target`, repeated): what a
/// worker's connections to it sent, got back and failed. Mirrors the run's totals at the
/// same points, so the targets add up to them, except the requests that failed before
/// any connection took them (a full backlog, a timeout in the backlog): those went to
/// no destination.
#[derive(Clone, Debug)]
pub struct TargetTotals {
    /// done - intended, recorded where the run's `latency` is (timeouts at the timeout).
    pub latency: Histogram<u64>,
    pub sent: u64,
    pub completed: u64,
    /// Failed requests by kind, as [`Counters::errors`].
    pub errors: [u64; ErrorKind::ALL.len()],
}

impl TargetTotals {
    pub fn new() -> Self {
        TargetTotals {
            latency: histogram(),
            sent: 0,
            completed: 0,
            errors: [0; ErrorKind::ALL.len()],
        }
    }

    pub fn add(&mut self, o: &TargetTotals) {
        self.latency
            .add(&o.latency)
            .expect("histograms share bounds");
        self.sent += o.sent;
        self.completed += o.completed;
        for (a, b) in self.errors.iter_mut().zip(o.errors) {
            *a += b;
        }
    }

    /// Failed requests, every kind.
    pub fn request_errors(&self) -> u64 {
        self.errors.iter().sum()
    }
}

impl Default for TargetTotals {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request run without TLS holds full histograms only where it records: the
    /// frames' four and the handshake's are tiny, the rest full (a frames run: the
    /// request/response ones tiny); a shaped set adds into a full one.
    #[test]
    fn a_set_is_full_only_where_its_run_records() {
        let full = Histograms::new();
        let request = Histograms::shaped(HistShape {
            requests: true,
            frames: false,
            tls: false,
            server_time: false,
        });
        let len = |h: &Histogram<u64>| h.distinct_values();
        let big = len(&full.latency);
        assert!(big > 10_000, "{big}");
        for h in [
            &request.frame_deviation,
            &request.frame_jitter,
            &request.frame_fanout,
            &request.frame_join,
            &request.tls_handshake,
            &request.server_time,
            &request.network_queueing,
        ] {
            assert!(len(h) < 100, "{}", len(h));
        }
        assert_eq!(len(&request.latency), big);
        assert_eq!(len(&request.error_latency), big);
        let frames = Histograms::shaped(HistShape {
            requests: false,
            frames: true,
            tls: false,
            server_time: false,
        });
        assert_eq!(len(&frames.frame_deviation), big);
        assert_eq!(len(&frames.dispatch_lag), big);
        // A frames run records none of the request/response histograms (issue 36).
        for h in [
            &frames.latency,
            &frames.service,
            &frames.connection_wait,
            &frames.connect,
            &frames.reconnect_delay,
            &frames.pacing,
            &frames.error_latency,
        ] {
            assert!(len(h) < 100, "{}", len(h));
        }
        let mut total = Histograms::new();
        let mut recorded = request;
        recorded.latency.record(1_000).unwrap();
        total.add(&recorded);
        total.add(&frames);
        assert_eq!(total.latency.len(), 1);
    }

    #[test]
    fn merge_adds_histograms_not_percentiles() {
        // Worker A: 99 fast requests; worker B: 1 slow one. Averaging p99s would give
        // ~500 us; the merged histogram's p99 is the fast value and its max the slow one.
        let mut a = Histograms::new();
        for _ in 0..99 {
            a.latency.record(1_000).unwrap();
        }
        let mut b = Histograms::new();
        b.latency.record(1_000_000).unwrap();
        let mut total = Histograms::new();
        total.add(&a);
        total.add(&b);
        assert_eq!(total.latency.len(), 100);
        assert!(total.latency.value_at_quantile(0.99) < 1_100);
        assert!(total.latency.max() >= 999_000);
    }

    #[test]
    fn values_beyond_bound_saturate() {
        let mut h = Histograms::new();
        h.latency.saturating_record(u64::MAX);
        assert_eq!(h.latency.len(), 1);
        assert!(h.latency.max() >= HISTOGRAM_NS_MAX / 2);
    }

    #[test]
    fn counters_add_and_split_errors() {
        let mut a = Counters::default();
        a.error(ErrorKind::Timeout);
        a.event(ErrorKind::ConnectRefused);
        a.completed = 5;
        let mut t = Counters::default();
        t.add(&a);
        t.add(&a);
        assert_eq!(t.completed, 10);
        // A connection event is not a request error.
        assert_eq!(t.request_errors(), 2);
        assert_eq!(t.errors_of(ErrorKind::Timeout), 2);
        assert_eq!(t.events_of(ErrorKind::ConnectRefused), 2);
    }
}
