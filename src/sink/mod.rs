//! The built-in target server ("sink"): an io_uring TCP server that blaster measures
//! itself against.
//!
//! Design: several rings per configured core (`layout.rs` decides how many), each a
//! pinned thread with its own io_uring and its own listening socket; all listeners
//! share one port through SO_REUSEPORT, so the kernel spreads connections across
//! rings and no state is shared on the hot path (only the open-connection count, an
//! atomic touched once per accept and close). Accepted sockets are io_uring direct
//! descriptors — they go straight into the ring's fixed-file table and use no
//! ordinary fd — so one sink holds far more connections than RLIMIT_NOFILE; each
//! ring's table is capped at RLIMIT_NOFILE, hence several rings. Where the kernel
//! refuses direct descriptors the sink falls back to ordinary fds (one ring per
//! core). Receives are multishot into a per-ring pool of provided buffers, so an
//! idle connection costs only its table entry. Every operation carries a token
//! (slot | buffer | op | generation) in `user_data`, and closing a slot bumps its
//! generation so late completions for the previous connection are ignored. See
//! `server.rs` for one ring's loop.
//!
//! Modes: echo (send back exactly what was read), discard (never reply), fixed:N (N
//! bytes of b'x' per `request_size` bytes received, or per read; the replies owed by
//! a connection leave as one send, or as 64 KiB pieces if larger). A service delay is
//! an `IORING_OP_TIMEOUT` linked in front of a reply's first send, so the thread
//! keeps serving other connections meanwhile. A stall freezes every thread for S
//! once every P, starting P/2 after the first request byte (see `stall.rs`); a frozen
//! thread sleeps and answers nothing (a delayed reply whose timer was already
//! running in the kernel is the exception).
//!
//! Faults: `close_every` closes every connection held at each multiple of T since
//! start (FIN; new connections are accepted as usual); `reset_ratio` p marks each
//! accepted connection, with probability p drawn from the seeded PRNG (ring i uses
//! stream i of `seed`), to be answered with RST instead of a reply when its first
//! request arrives (SO_LINGER {on, 0}, then close).
//!
//! Stopping: [`SinkHandle::stop`] (or dropping the handle) sets a shared flag; every
//! thread waits for completions at most 10 ms at a time, then cancels its in-flight
//! operations, closes its sockets and returns its counters, which are summed.
//! [`SinkHandle::snapshot`] reads the counters each thread publishes after every
//! pass of its loop, without stopping anything.
//!
//! UDP (`SinkConfig::udp`; see `udp.rs` and `flows.rs`): one pinned thread per core,
//! each with its own UDP socket on the shared port (SO_REUSEPORT: the kernel hashes
//! each source address to one socket, so a flow is always seen by one thread and
//! per-thread flow tables need no sharing), an 8 MiB receive buffer if the kernel
//! grants it, and `recvmmsg`/`sendmmsg` batches of 64 datagrams into 64 buffers of
//! 64 KiB (no datagram can be truncated; nothing allocated per datagram). Modes:
//! - `echo`: every datagram goes back unchanged to its source;
//! - `fixed:N` (24 ≤ N ≤ 65507): a reply of N bytes per datagram whose first 24
//!   bytes are the request's first 24 (its blaster header, so replies can be
//!   matched to requests), then b'x';
//! - `count` and `discard`: never reply (they behave the same: every UDP mode
//!   counts).
//!
//! Every mode counts datagrams carrying blaster's header per flow (source address,
//! flow id): received, lost, reordered, duplicates, plus foreign datagrams (no
//! header); see `flows.rs` for the definitions. `drop_ratio` drops that fraction of
//! datagrams (a seeded splitmix64 draw per datagram, before anything else): they are
//! counted in `dropped`, neither received nor answered, so they show up in `lost`
//! exactly as they do in the client's loss. A per-second series starts at the first
//! datagram. Delay, stalls and the connection faults are TCP-only; `request_size`
//! and `max_connections_per_core` are ignored for UDP.

mod buf_pool;
mod flows;
mod layout;
mod memory;
mod prng;
mod server;
mod socket;
mod stall;
mod token;
mod udp;

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use server::{RingSpec, Shared};
use stall::Stall;
use udp::{Published, UdpShared};

/// Largest reply of `fixed:N`, in bytes.
pub const FIXED_REPLY_BYTES_MAX: usize = 1_048_576;
/// Most connections per core (the whole sink holds at most this times the cores).
pub const CONNECTIONS_PER_CORE_MAX: usize = 1_048_576;
/// Longest `close_every` period (a day; longer is no fault at all).
pub const CLOSE_EVERY_MAX: Duration = Duration::from_secs(86_400);
/// Shortest `close_every` period: closing every connection more often than this
/// leaves none to hold.
pub const CLOSE_EVERY_MIN: Duration = Duration::from_millis(10);
pub use memory::MemoryFigures;
/// Largest `fixed:N` reply of the UDP sink (the IPv4 UDP payload limit).
pub const UDP_FIXED_REPLY_BYTES_MAX: usize = udp::UDP_REPLY_BYTES_MAX;
/// Smallest `fixed:N` reply of the UDP sink: the request's header is copied into it.
pub const UDP_FIXED_REPLY_BYTES_MIN: usize = crate::proto::udp_header::HEADER_LEN;
/// [`SinkConfig::default`]'s connection table size per core.
pub const DEFAULT_CONNECTIONS_PER_CORE: usize = 1024;
/// Fixed mode keeps one reply buffer of about this size (a whole number of replies,
/// at least one), so a read that completes many requests is answered in one send.
const REPLY_BUFFER_BYTES: usize = 64 * 1024;

/// What the sink sends back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkMode {
    /// Send back exactly the bytes received.
    Echo,
    /// Read forever, never reply.
    Discard,
    /// Reply this many bytes per request.
    Fixed(usize),
    /// UDP only: never reply, count (sequence, loss, reordering); TCP refuses it.
    Count,
}

impl FromStr for SinkMode {
    type Err = String;

    fn from_str(s: &str) -> Result<SinkMode, String> {
        match s {
            "echo" => Ok(SinkMode::Echo),
            "discard" => Ok(SinkMode::Discard),
            "count" => Ok(SinkMode::Count),
            _ => match s.strip_prefix("fixed:") {
                Some(n) => match n.parse::<usize>() {
                    Ok(n) if (1..=FIXED_REPLY_BYTES_MAX).contains(&n) => Ok(SinkMode::Fixed(n)),
                    _ => Err(format!(
                        "sink mode fixed:N: N must be a byte count between 1 and \
                         {FIXED_REPLY_BYTES_MAX}, got {n:?}"
                    )),
                },
                None => Err(format!(
                    "unknown sink mode {s:?}: expected echo, discard or fixed:N (or count, UDP only)"
                )),
            },
        }
    }
}

impl fmt::Display for SinkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SinkMode::Echo => f.write_str("echo"),
            SinkMode::Discard => f.write_str("discard"),
            SinkMode::Fixed(n) => write!(f, "fixed:{n}"),
            SinkMode::Count => f.write_str("count"),
        }
    }
}

/// How to run a sink.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// Address to listen on; with port 0 the kernel picks one and all cores share it.
    pub listen: SocketAddr,
    /// One server thread per entry, pinned to that core (unpinned if pinning fails).
    pub cores: Vec<usize>,
    /// What to send back.
    pub mode: SinkMode,
    /// Fixed mode: one reply per this many bytes received; 0 = one reply per read.
    pub request_size: usize,
    /// Fixed service delay before each reply.
    pub delay: Option<Duration>,
    /// (S, P): freeze all serving for S once every P, first at P/2 after the first
    /// request byte.
    pub stall: Option<(Duration, Duration)>,
    /// Connections per core: the sink holds at most this times `cores.len()` in
    /// total (an exact limit over all rings, however the kernel spreads them);
    /// accepts beyond it are closed and counted. It also sizes the rings: with
    /// direct descriptors each core runs as many rings as this needs at 85% of
    /// RLIMIT_NOFILE per ring.
    pub max_connections_per_core: usize,
    /// Serve UDP instead of TCP (see the module documentation). Default false.
    pub udp: bool,
    /// UDP only: the fraction (0.0 to 1.0) of datagrams dropped unanswered, chosen by
    /// a PRNG seeded with `seed`; counted in `dropped`, not `received`. Default 0.
    pub drop_ratio: f64,
    /// Seed of the drop draw (UDP) and the reset draw (TCP); thread i of the sink
    /// (UDP: i-th entry of `cores`; TCP: ring i) uses stream i of it, so one thread
    /// fed the same datagrams or connections drops or resets the same ones.
    /// Default 0.
    pub seed: u64,
    /// TCP: close every connection held at each multiple of this since the start.
    /// Default none.
    pub close_every: Option<Duration>,
    /// TCP: the probability (0.0 to 1.0) that an accepted connection is answered
    /// with RST at its first request. Default 0.
    pub reset_ratio: f64,
    /// TCP: accept into io_uring direct descriptors when the kernel allows (false
    /// forces ordinary descriptors, one ring per core). Default true.
    pub direct_descriptors: bool,
}

impl SinkConfig {
    /// A configuration listening on `listen` with one thread per entry of `cores`,
    /// serving `mode`; every other field as in [`SinkConfig::default`] (TCP).
    pub fn new(listen: SocketAddr, cores: Vec<usize>, mode: SinkMode) -> SinkConfig {
        SinkConfig {
            listen,
            cores,
            mode,
            ..SinkConfig::default()
        }
    }
}

impl Default for SinkConfig {
    /// TCP echo on 127.0.0.1 (kernel-chosen port), core 0, one reply per read, no
    /// delay or stall, [`DEFAULT_CONNECTIONS_PER_CORE`] connections per core; not
    /// UDP, no drops, seed 0, no faults, direct descriptors where supported.
    fn default() -> SinkConfig {
        SinkConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            cores: vec![0],
            mode: SinkMode::Echo,
            request_size: 0,
            delay: None,
            stall: None,
            max_connections_per_core: DEFAULT_CONNECTIONS_PER_CORE,
            udp: false,
            drop_ratio: 0.0,
            seed: 0,
            close_every: None,
            reset_ratio: 0.0,
            direct_descriptors: true,
        }
    }
}

/// One second of the UDP sink's series: what arrived in `[second, second + 1)`
/// seconds after the first datagram (summed over threads).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SecondStats {
    /// Seconds since the first datagram reached the sink.
    pub second: u64,
    /// Datagrams with blaster's header (not dropped on purpose).
    pub received: u64,
    /// `received` per second of this interval (= `received`: intervals are 1 s).
    pub received_pps: f64,
    /// Bits per second of those datagrams (UDP payload incl. the header, no IP/UDP
    /// headers).
    pub received_bps: f64,
    /// Bytes of those datagrams.
    pub bytes: u64,
    /// Change in the lost count during this second: holes opened minus holes filled
    /// by late (reordered) arrivals, so it can be negative; the entries sum to the
    /// total `lost`.
    pub lost: i64,
    /// Reordered arrivals.
    pub reordered: u64,
    /// Duplicate arrivals.
    pub duplicates: u64,
    /// Datagrams dropped on purpose (`drop_ratio`).
    pub dropped: u64,
    /// Datagrams without blaster's header.
    pub foreign: u64,
    /// The last interval: traffic (or the snapshot) ended inside it, so its rates are
    /// those of a whole second and understate the rate if it is only partly filled.
    pub partial: bool,
}

impl SecondStats {
    fn add(&mut self, other: &SecondStats) {
        self.received += other.received;
        self.bytes += other.bytes;
        self.lost += other.lost;
        self.reordered += other.reordered;
        self.duplicates += other.duplicates;
        self.dropped += other.dropped;
        self.foreign += other.foreign;
    }
}

/// Counters summed over all sink threads. The UDP fields are zero for a TCP sink.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct SinkStats {
    /// Connections given a slot in a connection table.
    pub connections_accepted: u64,
    /// Connections closed at once: the sink held its maximum, or a ring's table was
    /// full.
    pub connections_rejected: u64,
    /// Connections held at the time of the snapshot (for [`SinkHandle::stop`]: just
    /// before stopping).
    pub connections_open: u64,
    /// The most connections held at once.
    pub connections_peak: u64,
    /// Connections the sink closed because of `close_every`.
    pub connections_closed: u64,
    /// Connections the sink reset (RST) because of `reset_ratio`.
    pub connections_reset: u64,
    /// Connections that ended from the peer's side: end of stream, reset, or a
    /// failed send.
    pub connections_closed_by_peer: u64,
    /// Request bytes read. UDP: bytes of the `received` datagrams (UDP payload, i.e.
    /// blaster header + payload; no IP/UDP headers).
    pub bytes_received: u64,
    /// Reply bytes written.
    pub bytes_sent: u64,
    /// Replies fully sent (echo: one per read echoed; UDP: datagrams sent).
    pub replies: u64,
    /// UDP: datagrams with blaster's header (excluding those dropped on purpose).
    pub received: u64,
    /// UDP: datagrams without blaster's header (or shorter than it).
    pub foreign: u64,
    /// UDP: arrivals of a sequence number already seen in its flow.
    pub duplicates: u64,
    /// UDP: arrivals below the highest sequence number seen in their flow, not seen
    /// before (includes `late`).
    pub reordered: u64,
    /// UDP: arrivals more than 1023 below the highest of their flow, where
    /// duplicates cannot be told apart: taken as reordered originals.
    pub late: u64,
    /// UDP: per flow, highest sequence + 1 minus the distinct numbers received,
    /// summed (includes the datagrams dropped on purpose).
    pub lost: u64,
    /// UDP: datagrams dropped on purpose (`drop_ratio`): neither received nor
    /// answered.
    pub dropped: u64,
    /// UDP: received datagrams of flows that found the flow table full (65536 flows
    /// per thread); not in the loss, reordering or duplicate counts.
    pub untracked: u64,
    /// UDP: flows tracked.
    pub flows: u64,
    /// UDP: replies the kernel refused or that waited out the 10 ms send timeout.
    pub send_failed: u64,
    /// UDP: datagrams the kernel dropped before the sink read them (receive buffer
    /// full), from SO_RXQ_OVFL; 0 if none or unsupported.
    pub kernel_drops: u64,
    /// UDP: the receive buffer the kernel granted per socket (SO_RCVBUF as read back).
    pub rcvbuf_bytes: u64,
    /// UDP: when the first datagram arrived, ns since the sink started.
    pub first_datagram_ns: Option<u64>,
    /// UDP: when the last datagram arrived, ns since the sink started.
    pub last_datagram_ns: Option<u64>,
    /// UDP: seconds from the first datagram to the last.
    pub elapsed_s: f64,
    /// UDP: one entry per second from the first datagram to the last (or to the
    /// snapshot), gaps filled with zeros.
    pub series: Vec<SecondStats>,
}

impl SinkStats {
    fn add(&mut self, other: &SinkStats) {
        self.connections_accepted += other.connections_accepted;
        self.connections_rejected += other.connections_rejected;
        self.connections_open += other.connections_open;
        self.connections_peak = self.connections_peak.max(other.connections_peak);
        self.connections_closed += other.connections_closed;
        self.connections_reset += other.connections_reset;
        self.connections_closed_by_peer += other.connections_closed_by_peer;
        self.bytes_received += other.bytes_received;
        self.bytes_sent += other.bytes_sent;
        self.replies += other.replies;
        self.received += other.received;
        self.foreign += other.foreign;
        self.duplicates += other.duplicates;
        self.reordered += other.reordered;
        self.late += other.late;
        self.lost += other.lost;
        self.dropped += other.dropped;
        self.untracked += other.untracked;
        self.flows += other.flows;
        self.send_failed += other.send_failed;
        self.kernel_drops += other.kernel_drops;
        self.rcvbuf_bytes = self.rcvbuf_bytes.max(other.rcvbuf_bytes);
        self.first_datagram_ns = match (self.first_datagram_ns, other.first_datagram_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_datagram_ns = self.last_datagram_ns.max(other.last_datagram_ns);
        if !other.series.is_empty() {
            self.series.extend_from_slice(&other.series);
            self.series.sort_by_key(|s| s.second);
            let mut merged: Vec<SecondStats> = Vec::with_capacity(self.series.len());
            for s in self.series.drain(..) {
                match merged.last_mut() {
                    Some(last) if last.second == s.second => last.add(&s),
                    _ => merged.push(s),
                }
            }
            self.series = merged;
        }
    }

    /// After the threads' parts are added up: the elapsed time, a gap-free series
    /// with its rates, the last interval marked partial.
    fn finish_udp(&mut self) {
        self.elapsed_s = match (self.first_datagram_ns, self.last_datagram_ns) {
            (Some(first), Some(last)) => last.saturating_sub(first) as f64 / 1e9,
            _ => 0.0,
        };
        if let (Some(first), Some(last)) = (self.series.first(), self.series.last()) {
            let (first, last) = (first.second, last.second);
            if (last - first + 1) as usize != self.series.len() {
                let mut dense: Vec<SecondStats> = (first..=last)
                    .map(|second| SecondStats {
                        second,
                        ..SecondStats::default()
                    })
                    .collect();
                for s in self.series.drain(..) {
                    let at = (s.second - first) as usize;
                    dense[at] = s;
                }
                self.series = dense;
            }
        }
        for s in &mut self.series {
            s.received_pps = s.received as f64;
            s.received_bps = s.bytes as f64 * 8.0;
            s.partial = false;
        }
        if let Some(last) = self.series.last_mut() {
            last.partial = true;
        }
    }
}

/// The UDP report as JSON: totals, rates and the per-second series. Keys:
/// `received`, `lost`, `reordered` (includes `late`), `late`, `duplicates`,
/// `foreign`, `dropped`, `untracked`, `flows`, `kernel_drops`, `bytes_received`,
/// `replies`, `bytes_sent`, `send_failed`, `rcvbuf_bytes`, `elapsed_s` (first to last
/// datagram), `loss_ratio` (lost / (received - duplicates - untracked + lost): the
/// fraction of the datagrams sent — as the sequence numbers tell — that never
/// arrived; 0 with no traffic), `received_pps` (received / elapsed_s; 0 when
/// elapsed_s is 0), `received_bps` (bits per second of the received datagrams: UDP
/// payload incl. blaster's header, excluding IP and UDP headers; 0 when elapsed_s is
/// 0) and `intervals` (the series: objects with the fields of [`SecondStats`]).
pub fn udp_report_json(stats: &SinkStats) -> serde_json::Value {
    let distinct = stats
        .received
        .saturating_sub(stats.duplicates)
        .saturating_sub(stats.untracked);
    let sent = distinct + stats.lost;
    let loss_ratio = if sent == 0 {
        0.0
    } else {
        stats.lost as f64 / sent as f64
    };
    let per_s = |n: u64| {
        if stats.elapsed_s > 0.0 {
            n as f64 / stats.elapsed_s
        } else {
            0.0
        }
    };
    serde_json::json!({
        "received": stats.received,
        "lost": stats.lost,
        "reordered": stats.reordered,
        "late": stats.late,
        "duplicates": stats.duplicates,
        "foreign": stats.foreign,
        "dropped": stats.dropped,
        "untracked": stats.untracked,
        "flows": stats.flows,
        "kernel_drops": stats.kernel_drops,
        "bytes_received": stats.bytes_received,
        "replies": stats.replies,
        "bytes_sent": stats.bytes_sent,
        "send_failed": stats.send_failed,
        "rcvbuf_bytes": stats.rcvbuf_bytes,
        "elapsed_s": stats.elapsed_s,
        "loss_ratio": loss_ratio,
        "received_pps": per_s(stats.received),
        "received_bps": per_s(stats.bytes_received) * 8.0,
        "intervals": stats.series,
    })
}

/// Why a sink could not start.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A [`SinkConfig`] field is out of range; the message names it and the bound.
    #[error("invalid sink configuration: {0}")]
    Config(String),
    /// Creating, binding or listening on a socket failed (e.g. the port is taken).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for (port already resolved for the second listener on).
        addr: SocketAddr,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// `io_uring_setup` failed (ENOMEM, EPERM under seccomp or sysctl, ENOSYS).
    #[error("cannot create an io_uring of {entries} entries for the sink on core {core}: {source}")]
    Ring {
        /// The core whose thread failed.
        core: usize,
        /// Submission queue entries asked for.
        entries: u32,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// The kernel's io_uring is too old for the sink.
    #[error(
        "the kernel's io_uring lacks {feature}, which the sink needs (Linux {kernel} or newer)"
    )]
    Unsupported {
        /// The core whose thread found out.
        core: usize,
        /// The missing feature, named as in the kernel headers.
        feature: &'static str,
        /// The first Linux version that has it.
        kernel: &'static str,
    },
    /// The OS refused to create a thread.
    #[error("cannot start the sink thread for core {core}: {source}")]
    Spawn {
        /// The core the thread was for.
        core: usize,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A thread died before reporting that it was ready (a bug: it should not panic).
    #[error("a sink thread exited during start-up")]
    ThreadExited,
}

/// How a TCP sink spread its connections (see `layout.rs`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TcpLayout {
    /// Rings (server threads) in all.
    pub rings: usize,
    /// Rings per entry of `cores`.
    pub rings_per_core: usize,
    /// Accepted sockets are io_uring direct descriptors (no ordinary fd each).
    pub direct_descriptors: bool,
    /// Connection slots per ring (the fixed-file table with direct descriptors).
    pub ring_table_slots: usize,
    /// Why direct descriptors are not used, when they were asked for and are not.
    pub fallback: Option<String>,
}

/// A running sink. Dropping it stops it, like [`SinkHandle::stop`].
pub struct SinkHandle {
    addr: SocketAddr,
    backend: Backend,
    threads: Vec<JoinHandle<SinkStats>>,
}

/// What the threads share, and where each publishes its counters.
enum Backend {
    Tcp {
        shared: Arc<Shared>,
        live: Vec<Arc<server::Live>>,
        layout: TcpLayout,
    },
    Udp {
        shared: Arc<UdpShared>,
        live: Vec<Arc<Mutex<Published>>>,
    },
}

impl fmt::Debug for SinkHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkHandle")
            .field("addr", &self.addr)
            .field("udp", &matches!(self.backend, Backend::Udp { .. }))
            .field("threads", &self.threads.len())
            .finish()
    }
}

impl SinkHandle {
    /// The address the sink listens on (port resolved if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// TCP: how the connections are spread over rings; `None` for UDP.
    pub fn tcp_layout(&self) -> Option<&TcpLayout> {
        match &self.backend {
            Backend::Tcp { layout, .. } => Some(layout),
            Backend::Udp { .. } => None,
        }
    }

    /// Stops every thread and returns their summed counters (TCP: with the
    /// connections open just before stopping). Returns within about 10 ms plus the
    /// time to close the connections held (bounded at 50 ms plus 10 µs per
    /// operation in flight, about two per connection: 0.3 s for 12,000 per ring);
    /// a UDP sink within about 10 ms (its receive timeout) plus one batch of sends.
    pub fn stop(mut self) -> SinkStats {
        self.stop_and_join()
    }

    /// The counters so far, summed over threads, without stopping anything. Each
    /// thread publishes after every pass of its loop (TCP: at most 10 ms apart while
    /// idle; UDP: after every batch), so this lags by at most one pass; the TCP
    /// `connections_open` and `connections_peak` are exact at the call. For UDP the
    /// series ends with the second under way, marked partial.
    pub fn snapshot(&self) -> SinkStats {
        match &self.backend {
            Backend::Tcp { live, shared, .. } => {
                let mut total = SinkStats::default();
                for l in live {
                    total.add(&l.load());
                }
                total.connections_open = shared.open.load(Ordering::Relaxed);
                total.connections_peak = shared.peak.load(Ordering::Relaxed);
                total
            }
            Backend::Udp { live, .. } => udp_total(live),
        }
    }

    fn stop_and_join(&mut self) -> SinkStats {
        let (stop, open) = match &self.backend {
            Backend::Tcp { shared, .. } => (&shared.stop, shared.open.load(Ordering::Relaxed)),
            Backend::Udp { shared, .. } => (&shared.stop, 0),
        };
        stop.store(true, Ordering::Release);
        let mut total = SinkStats::default();
        for thread in self.threads.drain(..) {
            // A thread that panicked has no counters to report; the others still do.
            if let Ok(stats) = thread.join() {
                total.add(&stats);
            }
        }
        match &self.backend {
            Backend::Tcp { shared, .. } => {
                total.connections_open = open;
                total.connections_peak = shared.peak.load(Ordering::Relaxed);
                total
            }
            // Every thread published its final counters before returning (and a
            // panicked one its last batch), so the published state is complete.
            Backend::Udp { live, .. } => udp_total(live),
        }
    }
}

/// The TCP report as JSON. Keys: `proto` ("tcp"), `connections` {`open` (held
/// now; at the end, just before stopping), `peak`, `accepted`, `rejected`,
/// `closed` (by `--close-every`), `reset` (by `--reset-ratio`), `closed_by_peer`},
/// `bytes_received`, `bytes_sent`, `replies`, `rings`, `rings_per_core`,
/// `direct_descriptors`, `ring_table_slots`, `fallback` (null or why direct
/// descriptors are not used), `memory` (the fields of [`MemoryFigures`]) and
/// `elapsed_s` (since the sink started).
pub fn tcp_report_json(
    stats: &SinkStats,
    layout: &TcpLayout,
    memory: &MemoryFigures,
    elapsed_s: f64,
) -> serde_json::Value {
    serde_json::json!({
        "proto": "tcp",
        "connections": {
            "open": stats.connections_open,
            "peak": stats.connections_peak,
            "accepted": stats.connections_accepted,
            "rejected": stats.connections_rejected,
            "closed": stats.connections_closed,
            "reset": stats.connections_reset,
            "closed_by_peer": stats.connections_closed_by_peer,
        },
        "bytes_received": stats.bytes_received,
        "bytes_sent": stats.bytes_sent,
        "replies": stats.replies,
        "rings": layout.rings,
        "rings_per_core": layout.rings_per_core,
        "direct_descriptors": layout.direct_descriptors,
        "ring_table_slots": layout.ring_table_slots,
        "fallback": layout.fallback,
        "memory": memory,
        "elapsed_s": elapsed_s,
    })
}

fn udp_total(live: &[Arc<Mutex<Published>>]) -> SinkStats {
    let mut total = SinkStats::default();
    for l in live {
        let part = udp::lock(l).to_stats();
        total.add(&part);
    }
    total.finish_udp();
    total
}

impl Drop for SinkHandle {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

fn validate(cfg: &SinkConfig) -> Result<(), SinkError> {
    let bad = |msg: String| Err(SinkError::Config(msg));
    if cfg.cores.is_empty() {
        return bad("cores: must name at least one core".into());
    }
    if cfg.udp {
        return validate_udp(cfg);
    }
    if cfg.mode == SinkMode::Count {
        return bad("mode count: only the UDP sink counts datagrams (set udp)".into());
    }
    if cfg.drop_ratio != 0.0 {
        return bad(format!(
            "drop_ratio: only the UDP sink drops datagrams, got {} for TCP",
            cfg.drop_ratio
        ));
    }
    if !(1..=CONNECTIONS_PER_CORE_MAX).contains(&cfg.max_connections_per_core) {
        return bad(format!(
            "max_connections_per_core: must be between 1 and {CONNECTIONS_PER_CORE_MAX}, got {}",
            cfg.max_connections_per_core
        ));
    }
    if let SinkMode::Fixed(n) = cfg.mode
        && !(1..=FIXED_REPLY_BYTES_MAX).contains(&n)
    {
        return bad(format!(
            "mode fixed:N: N must be between 1 and {FIXED_REPLY_BYTES_MAX}, got {n}"
        ));
    }
    if let Some((freeze, period)) = cfg.stall
        && (period.is_zero() || freeze >= period)
    {
        return bad(format!(
            "stall: the freeze ({freeze:?}) must be shorter than its period ({period:?})"
        ));
    }
    if let Some(every) = cfg.close_every
        && !(CLOSE_EVERY_MIN..=CLOSE_EVERY_MAX).contains(&every)
    {
        return bad(format!(
            "close_every: must be between {CLOSE_EVERY_MIN:?} and {CLOSE_EVERY_MAX:?}, got {every:?}"
        ));
    }
    if !(0.0..=1.0).contains(&cfg.reset_ratio) {
        return bad(format!(
            "reset_ratio: must be between 0 and 1, got {}",
            cfg.reset_ratio
        ));
    }
    Ok(())
}

fn validate_udp(cfg: &SinkConfig) -> Result<(), SinkError> {
    let bad = |msg: String| Err(SinkError::Config(msg));
    if let SinkMode::Fixed(n) = cfg.mode
        && !(UDP_FIXED_REPLY_BYTES_MIN..=UDP_FIXED_REPLY_BYTES_MAX).contains(&n)
    {
        return bad(format!(
            "mode fixed:N with udp: N must be between {UDP_FIXED_REPLY_BYTES_MIN} (the \
             header copied from the request) and {UDP_FIXED_REPLY_BYTES_MAX} (the largest \
             UDP payload), got {n}"
        ));
    }
    if !(0.0..=1.0).contains(&cfg.drop_ratio) {
        return bad(format!(
            "drop_ratio: must be between 0 and 1, got {}",
            cfg.drop_ratio
        ));
    }
    if cfg.delay.is_some() {
        return bad("delay: not supported by the UDP sink".into());
    }
    if cfg.stall.is_some() {
        return bad("stall: not supported by the UDP sink".into());
    }
    if cfg.close_every.is_some() {
        return bad("close_every: the UDP sink has no connections to close".into());
    }
    if cfg.reset_ratio != 0.0 {
        return bad("reset_ratio: the UDP sink has no connections to reset".into());
    }
    Ok(())
}

/// Starts a sink: binds one SO_REUSEPORT listener (UDP: socket) per core, spawns the
/// threads and returns once every TCP thread has its ring (UDP threads need none).
/// Clients may connect or send as soon as this returns (in fact as soon as the
/// sockets exist: datagrams sent before a thread runs wait in its socket).
pub fn start(cfg: &SinkConfig) -> Result<SinkHandle, SinkError> {
    if cfg.udp {
        return start_udp(cfg);
    }
    start_tuned(cfg, server::SQ_ENTRIES, server::RECV_BUFFERS)
}

fn start_udp(cfg: &SinkConfig) -> Result<SinkHandle, SinkError> {
    validate(cfg)?;
    let shared = Arc::new(UdpShared::new(cfg.mode, cfg.drop_ratio, cfg.seed));
    // The first bind resolves port 0; the others join the port it got.
    let first = socket::reuseport_udp(cfg.listen, udp::IO_TIMEOUT)?;
    let addr = socket::bound_addr(&first, cfg.listen)?;
    let mut sockets = vec![first];
    for _ in 1..cfg.cores.len() {
        sockets.push(socket::reuseport_udp(addr, udp::IO_TIMEOUT)?);
    }
    let live: Vec<Arc<Mutex<Published>>> = sockets
        .iter()
        .map(|s| {
            let rcvbuf = s.recv_buffer_size().unwrap_or(0) as u64;
            Arc::new(Mutex::new(Published::new(rcvbuf)))
        })
        .collect();
    let mut handle = SinkHandle {
        addr,
        backend: Backend::Udp {
            shared: Arc::clone(&shared),
            live: live.clone(),
        },
        threads: Vec::with_capacity(cfg.cores.len()),
    };
    for (index, ((&core, socket), live)) in cfg.cores.iter().zip(sockets).zip(live).enumerate() {
        // On an early return, dropping `handle` stops the threads already started.
        let thread = udp::spawn(core, index, socket, Arc::clone(&shared), live)
            .map_err(|source| SinkError::Spawn { core, source })?;
        handle.threads.push(thread);
    }
    Ok(handle)
}

/// The ring layout for `cfg`: direct descriptors where asked for and supported.
fn plan_rings(cfg: &SinkConfig) -> layout::RingLayout {
    let total = cfg.max_connections_per_core.saturating_mul(cfg.cores.len());
    if !cfg.direct_descriptors {
        return layout::plan(total, cfg.cores.len(), 0, false);
    }
    let direct = layout::plan(total, cfg.cores.len(), layout::fixed_table_cap(), true);
    match layout::probe_direct(direct.table) {
        Ok(()) => direct,
        Err(why) => layout::RingLayout {
            fallback: Some(why),
            ..layout::plan(total, cfg.cores.len(), 0, false)
        },
    }
}

/// [`start`] with a chosen submission queue depth and receive buffers per ring; tests
/// use tiny ones to force the "queue full: submit, then retry" and "no buffer: wait
/// for one" paths.
fn start_tuned(
    cfg: &SinkConfig,
    sq_entries: u32,
    recv_buffers: u16,
) -> Result<SinkHandle, SinkError> {
    assert!(sq_entries >= server::SQ_ENTRIES_MIN);
    assert!(recv_buffers.is_power_of_two());
    validate(cfg)?;
    let reply = match cfg.mode {
        SinkMode::Fixed(n) => vec![b'x'; n * (REPLY_BUFFER_BYTES / n).max(1)].into_boxed_slice(),
        SinkMode::Echo | SinkMode::Discard | SinkMode::Count => Box::default(),
    };
    let rings = plan_rings(cfg);
    let started = Instant::now();
    let shared = Arc::new(Shared {
        mode: cfg.mode,
        request_size: cfg.request_size,
        delay: cfg.delay,
        stall: cfg
            .stall
            .map(|(freeze, period)| Stall::new(started, freeze, period)),
        stop: AtomicBool::new(false),
        reply,
        connections_max: cfg.max_connections_per_core as u64 * cfg.cores.len() as u64,
        sq_entries,
        recv_buffers,
        close_every: cfg.close_every,
        reset_ratio: cfg.reset_ratio,
        seed: cfg.seed,
        started,
        open: AtomicU64::new(0),
        peak: AtomicU64::new(0),
    });

    // Ring r serves core cores[r / rings_per_core].
    let specs: Vec<RingSpec> = (0..cfg.cores.len() * rings.rings_per_core)
        .map(|index| RingSpec {
            core: cfg.cores[index / rings.rings_per_core],
            index,
            direct: rings.direct,
            table: rings.table,
        })
        .collect();
    // The first bind resolves port 0; the others join the port it got.
    let first = socket::reuseport_listener(cfg.listen)?;
    let addr = socket::bound_addr(&first, cfg.listen)?;
    let mut listeners = vec![first];
    for _ in 1..specs.len() {
        listeners.push(socket::reuseport_listener(addr)?);
    }

    let live: Vec<Arc<server::Live>> = specs.iter().map(|_| Arc::default()).collect();
    let mut handle = SinkHandle {
        addr,
        backend: Backend::Tcp {
            shared: Arc::clone(&shared),
            live: live.clone(),
            layout: TcpLayout {
                rings: specs.len(),
                rings_per_core: rings.rings_per_core,
                direct_descriptors: rings.direct,
                ring_table_slots: rings.table,
                fallback: rings.fallback.clone(),
            },
        },
        threads: Vec::with_capacity(specs.len()),
    };
    let (ready_tx, ready_rx) = mpsc::channel();
    for ((&spec, listener), live) in specs.iter().zip(listeners).zip(live) {
        // On any early return, dropping `handle` stops the threads already started.
        let thread = server::spawn(spec, listener, Arc::clone(&shared), live, ready_tx.clone())
            .map_err(|source| SinkError::Spawn {
                core: spec.core,
                source,
            })?;
        handle.threads.push(thread);
    }
    drop(ready_tx);
    for _ in &specs {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(SinkError::ThreadExited),
        }
    }
    Ok(handle)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod udp_tests;
