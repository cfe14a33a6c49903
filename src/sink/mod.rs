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
//! Broadcast (`SinkMode::Broadcast`, `SinkConfig::broadcast`): frames of
//! `proto::frame` relayed to the sender's room, or aggregated into one downlink frame
//! per member per server tick; one ring on one core, so a room is never split across
//! threads (`rooms.rs`, `send_queue.rs`, `server/relay.rs`).
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
//! datagrams (a seeded fastrand draw per datagram, before anything else): they are
//! counted in `dropped`, neither received nor answered, so they show up in `lost`
//! exactly as they do in the client's loss. A per-second series starts at the first
//! datagram. Delay and the connection faults are TCP-only, stalls TCP and UDP
//! broadcast (`udp_relay.rs`); `request_size`
//! and `max_connections_per_core` are ignored for UDP.

mod buf_pool;
mod config;
mod flows;
pub mod h2_front;
mod layout;
mod memory;
mod pending;
mod rooms;
mod send_queue;
mod server;
mod socket;
mod stall;
mod stats;
pub mod tls_front;
mod token;
mod udp;
mod udp_relay;

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Instant;

pub use config::{
    AggregateConfig, BroadcastConfig, CLOSE_EVERY_MAX, CLOSE_EVERY_MIN, CONNECTIONS_PER_CORE_MAX,
    DEFAULT_CONNECTIONS_PER_CORE, DEFAULT_TICK, FIXED_REPLY_BYTES_MAX, ROOM_SIZE_MAX, SinkConfig,
    SinkMode, TCP_DOWN_BYTES_MAX, TICK_MAX, TICK_MIN, UDP_DOWN_BYTES_MAX,
    UDP_FIXED_REPLY_BYTES_MAX, UDP_FIXED_REPLY_BYTES_MIN, down_bytes_min,
};
pub use memory::MemoryFigures;
pub use stats::{BroadcastStats, SecondStats, SinkStats, tcp_report_json, udp_report_json};

use config::validate;
use server::{RingSpec, Shared};
use stall::Stall;
use udp::{Published, UdpShared};

/// Fixed mode keeps one reply buffer of about this size (a whole number of replies,
/// at least one), so a read that completes many requests is answered in one send.
const REPLY_BUFFER_BYTES: usize = 64 * 1024;

/// The generator of sink thread `index` (TCP: ring index; UDP: position in
/// `SinkConfig::cores`): one stream per thread derived from the one seed, as the
/// generator's workers derive theirs, so a thread fed the same traffic draws the same.
fn thread_rng(seed: u64, index: usize) -> fastrand::Rng {
    fastrand::Rng::with_seed(seed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Why a sink could not start.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A [`SinkConfig`] field is out of range; the message names it and the bound.
    #[error("invalid sink configuration: {0}")]
    Config(String),
    /// Another socket already holds the address and sharing it was not asked for
    /// ([`SinkConfig::reuse_port`]).
    #[error(
        "cannot listen on {addr}: the address is in use by another socket (--reuse-port \
         shares it through SO_REUSEPORT)"
    )]
    PortInUse {
        /// The address asked for.
        addr: SocketAddr,
    },
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

/// Starts a sink: binds one SO_REUSEPORT listener (UDP: socket) per core, spawns the
/// threads and returns once every TCP thread has its ring (UDP threads need none).
/// A port another socket already holds is refused unless `cfg.reuse_port`.
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
    let mut shared = UdpShared::new(cfg.mode, cfg.drop_ratio, cfg.seed);
    shared.broadcast = cfg.broadcast;
    shared.peers_max = cfg.max_connections_per_core;
    shared.stall = cfg
        .stall
        .map(|(freeze, period)| Stall::new(shared.epoch, freeze, period));
    let shared = Arc::new(shared);
    if !cfg.reuse_port {
        socket::ensure_unused(cfg.listen, socket::Kind::Udp)?;
    }
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
    if cfg.broadcast.is_some() {
        // One ring holds every room (validation allows one core): a table as large
        // as the connections asked for, or as RLIMIT_NOFILE lets one ring register.
        return plan_one_ring(cfg, total);
    }
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

/// Broadcast: a single ring, its table capped at what one ring may register.
fn plan_one_ring(cfg: &SinkConfig, total: usize) -> layout::RingLayout {
    let ordinary = layout::plan(total, 1, 0, false);
    if !cfg.direct_descriptors {
        return ordinary;
    }
    let table = total
        .min(layout::fixed_table_cap())
        .min(layout::FIXED_FILES_MAX);
    let direct = layout::RingLayout {
        direct: true,
        rings_per_core: 1,
        table,
        fallback: None,
    };
    match layout::probe_direct(table) {
        Ok(()) => direct,
        Err(why) => layout::RingLayout {
            fallback: Some(why),
            ..ordinary
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
    start_with(
        cfg,
        server::Tuning {
            sq_entries,
            recv_buffers,
            ..server::Tuning::DEFAULT
        },
    )
}

/// [`start`] with every ring built as `tuning` says.
fn start_with(cfg: &SinkConfig, tuning: server::Tuning) -> Result<SinkHandle, SinkError> {
    let server::Tuning {
        sq_entries,
        recv_buffers,
        ..
    } = tuning;
    assert!(sq_entries >= server::SQ_ENTRIES_MIN);
    assert!(recv_buffers.is_power_of_two());
    validate(cfg)?;
    let reply = match cfg.mode {
        SinkMode::Fixed(n) => vec![b'x'; n * (REPLY_BUFFER_BYTES / n).max(1)].into_boxed_slice(),
        SinkMode::Echo | SinkMode::Discard | SinkMode::Count | SinkMode::Broadcast => {
            Box::default()
        }
    };
    let rings = plan_rings(cfg);
    let started = Instant::now();
    let shared = Arc::new(Shared {
        mode: cfg.mode,
        request_size: cfg.request_size,
        delay: cfg.delay,
        delay_exp_mean: cfg.delay_exp_mean,
        stall: cfg
            .stall
            .map(|(freeze, period)| Stall::new(started, freeze, period)),
        stop: AtomicBool::new(false),
        reply,
        connections_max: cfg.max_connections_per_core as u64 * cfg.cores.len() as u64,
        sq_entries,
        recv_buffers,
        cq_per_sq: tuning.cq_per_sq,
        refuse_while_overflowed: tuning.refuse_while_overflowed,
        close_every: cfg.close_every,
        reset_ratio: cfg.reset_ratio,
        seed: cfg.seed,
        started,
        open: AtomicU64::new(0),
        peak: AtomicU64::new(0),
        broadcast: cfg.broadcast,
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
    if !cfg.reuse_port {
        socket::ensure_unused(cfg.listen, socket::Kind::Tcp)?;
    }
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
