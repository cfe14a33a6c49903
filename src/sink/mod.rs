//! The built-in target server ("sink"): an io_uring TCP server that blaster measures
//! itself against.
//!
//! Design: one thread per configured core, each pinned, each with its own io_uring
//! and its own listening socket; all listeners share one port through SO_REUSEPORT,
//! so the kernel spreads connections across threads and no state is shared on the
//! hot path. A thread owns a pre-sized connection table whose slots keep a 64 KiB
//! buffer for life; every operation carries a token (slot | op | generation) in
//! `user_data`, and closing a slot bumps its generation so late completions for the
//! previous connection are ignored. Per connection the loop is strictly
//! recv → (reply send, re-armed at an offset until complete) → recv, so there is at
//! most one data operation in flight per socket.
//!
//! Modes: echo (send back exactly what was read), discard (never reply), fixed:N (N
//! bytes of b'x' per `request_size` bytes received, or per read; the replies owed by
//! one read leave as one send, or as 64 KiB pieces if larger). A service delay is an `IORING_OP_TIMEOUT` hard-linked
//! in front of the reply's first send, so the thread keeps serving other connections
//! meanwhile. A stall freezes every thread for S once every P, starting P/2 after the
//! first request byte (see `stall.rs`); a frozen thread sleeps and answers nothing
//! (a delayed reply whose timer was already running in the kernel is the exception).
//!
//! Stopping: [`SinkHandle::stop`] (or dropping the handle) sets a shared flag; every
//! thread waits for completions at most 10 ms at a time, then cancels its in-flight
//! operations, closes its sockets and returns its counters, which are summed.

mod server;
mod socket;
mod stall;
mod token;

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use server::Shared;
use stall::Stall;

/// Largest reply of `fixed:N`, in bytes.
pub const FIXED_REPLY_BYTES_MAX: usize = 1_048_576;
/// Largest connection table per core (bounds the up-front allocation).
pub const CONNECTIONS_PER_CORE_MAX: usize = 1_048_576;
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
}

impl FromStr for SinkMode {
    type Err = String;

    fn from_str(s: &str) -> Result<SinkMode, String> {
        match s {
            "echo" => Ok(SinkMode::Echo),
            "discard" => Ok(SinkMode::Discard),
            _ => match s.strip_prefix("fixed:") {
                Some(n) => match n.parse::<usize>() {
                    Ok(n) if (1..=FIXED_REPLY_BYTES_MAX).contains(&n) => Ok(SinkMode::Fixed(n)),
                    _ => Err(format!(
                        "sink mode fixed:N: N must be a byte count between 1 and \
                         {FIXED_REPLY_BYTES_MAX}, got {n:?}"
                    )),
                },
                None => Err(format!(
                    "unknown sink mode {s:?}: expected echo, discard or fixed:N"
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
    /// Connection table size per core; accepts beyond it are closed and counted.
    pub max_connections_per_core: usize,
}

/// Counters summed over all sink threads.
#[derive(Debug, Default, Clone)]
pub struct SinkStats {
    /// Connections given a slot in a connection table.
    pub connections_accepted: u64,
    /// Connections closed at once because the table was full.
    pub connections_rejected: u64,
    /// Request bytes read.
    pub bytes_received: u64,
    /// Reply bytes written.
    pub bytes_sent: u64,
    /// Replies fully sent (echo: one per read echoed).
    pub replies: u64,
}

impl SinkStats {
    fn add(&mut self, other: &SinkStats) {
        self.connections_accepted += other.connections_accepted;
        self.connections_rejected += other.connections_rejected;
        self.bytes_received += other.bytes_received;
        self.bytes_sent += other.bytes_sent;
        self.replies += other.replies;
    }
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

/// A running sink. Dropping it stops it, like [`SinkHandle::stop`].
pub struct SinkHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<SinkStats>>,
}

impl fmt::Debug for SinkHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkHandle")
            .field("addr", &self.addr)
            .field("threads", &self.threads.len())
            .finish()
    }
}

impl SinkHandle {
    /// The address the sink listens on (port resolved if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops every thread and returns their summed counters. Returns within about
    /// 10 ms plus the time to cancel in-flight operations (bounded at 50 ms).
    pub fn stop(mut self) -> SinkStats {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> SinkStats {
        self.shared.stop.store(true, Ordering::Release);
        let mut total = SinkStats::default();
        for thread in self.threads.drain(..) {
            // A thread that panicked has no counters to report; the others still do.
            if let Ok(stats) = thread.join() {
                total.add(&stats);
            }
        }
        total
    }
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
    Ok(())
}

/// Starts a sink: binds one SO_REUSEPORT listener per core, spawns the threads and
/// returns once every thread has its ring. Clients may connect as soon as this
/// returns (in fact as soon as the listeners exist).
pub fn start(cfg: &SinkConfig) -> Result<SinkHandle, SinkError> {
    start_with_sq_entries(cfg, server::SQ_ENTRIES)
}

/// [`start`] with a chosen submission queue depth; tests use a tiny one to force the
/// "queue full: submit, then retry" path.
fn start_with_sq_entries(cfg: &SinkConfig, sq_entries: u32) -> Result<SinkHandle, SinkError> {
    assert!(sq_entries >= server::SQ_ENTRIES_MIN);
    validate(cfg)?;
    let reply = match cfg.mode {
        SinkMode::Fixed(n) => vec![b'x'; n * (REPLY_BUFFER_BYTES / n).max(1)].into_boxed_slice(),
        SinkMode::Echo | SinkMode::Discard => Box::default(),
    };
    let shared = Arc::new(Shared {
        mode: cfg.mode,
        request_size: cfg.request_size,
        delay: cfg.delay,
        stall: cfg
            .stall
            .map(|(freeze, period)| Stall::new(Instant::now(), freeze, period)),
        stop: AtomicBool::new(false),
        reply,
        connections_max: cfg.max_connections_per_core,
        sq_entries,
    });

    // The first bind resolves port 0; the others join the port it got.
    let first = socket::reuseport_listener(cfg.listen)?;
    let addr = socket::bound_addr(&first, cfg.listen)?;
    let mut listeners = vec![first];
    for _ in 1..cfg.cores.len() {
        listeners.push(socket::reuseport_listener(addr)?);
    }

    let mut handle = SinkHandle {
        addr,
        shared: Arc::clone(&shared),
        threads: Vec::with_capacity(cfg.cores.len()),
    };
    let (ready_tx, ready_rx) = mpsc::channel();
    for (&core, listener) in cfg.cores.iter().zip(listeners) {
        // On any early return, dropping `handle` stops the threads already started.
        let thread = server::spawn(core, listener, Arc::clone(&shared), ready_tx.clone())
            .map_err(|source| SinkError::Spawn { core, source })?;
        handle.threads.push(thread);
    }
    drop(ready_tx);
    for _ in &cfg.cores {
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
