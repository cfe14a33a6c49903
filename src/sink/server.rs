//! One sink ring: a pinned thread looping over its own io_uring and its own listener.
//!
//! Each iteration: sleep through a stall window if one is open; close every
//! connection if a `close_every` instant has come; re-arm the accept if it has ended;
//! publish the receive buffers given back; submit everything queued and wait (at
//! most 10 ms, and never past the next stall window or close instant) for at least
//! one completion; drain the completion queue into a fixed array; dispatch each
//! completion, which queues the connection's next operation; re-arm the receives
//! that stopped for want of buffers. This file holds the thread, the loop and
//! shutdown; `server/conn.rs` the operations of one connection.
//!
//! Connections: the multishot accept puts each new socket straight into the ring's
//! fixed-file table (a direct descriptor: no ordinary fd, so RLIMIT_NOFILE does not
//! count it) and the slot the kernel picked is the connection's index in the
//! connection table. Without direct descriptors the accept returns ordinary fds and
//! a free list picks the index. An idle connection owns nothing but its table entry
//! (`Conn`, a few dozen bytes) and one armed multishot receive; the kernel takes a
//! buffer from the ring's shared pool (`buf_pool.rs`) only when data arrives.
//!
//! Replies: echo keeps each received buffer in the connection's send chain until its
//! bytes are sent back (one send in flight per connection, re-armed at an offset on
//! a partial send), then gives it back to the pool; a chain that reaches the
//! connection's share of the pool stops that connection's receive (echo receives
//! are single-shot, one buffer each, so the chain never overshoots) until its sends drain it to half the
//! share, so a peer that never reads holds only its share and the others keep
//! receiving (`buf_pool.rs`); fixed mode gives the buffer back
//! at once and owes the connection N bytes per request, sent from one shared reply
//! buffer; discard gives it back at once. A service delay is an `IORING_OP_TIMEOUT`
//! linked in front of each reply's first send (`ETIME_SUCCESS`, so an expired timer
//! lets the send run and a cancelled one cancels it).
//!
//! Teardown (peer closed, `close_every`, `reset_ratio`): the slot's generation is
//! bumped at once, so late completions of its operations are ignored (a late echo
//! send still gives back the buffer its token names); then, hard-linked, an optional
//! SO_LINGER {on, 0} (reset: the close sends RST), a cancel of each operation still
//! armed on the socket (the receive, the send and its delay timer: each holds a
//! reference that would keep the socket open), by exact `user_data` so the kernel
//! finds it by hash, and the close of the slot or descriptor.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types};
use socket2::Socket;

mod conn;
mod relay;
mod relay_grpc;

use super::buf_pool::{BufPool, Chain};
use super::stall::{Phase, Stall};
use super::stats::BroadcastStats;
use super::token::{Op, Token};
use super::{BroadcastConfig, SinkError, SinkMode, SinkStats};
use crate::engine::ring::{Ring, Target};
use crate::engine::socket::close_descriptor;

/// Submission queue depth: large enough that a full batch of completions (each
/// queueing at most three entries) rarely has to flush mid-dispatch.
pub(crate) const SQ_ENTRIES: u32 = 4096;
/// The most entries of one teardown: linger, three cancels, close.
const TEARDOWN_ENTRIES_MAX: usize = 5;
/// The smallest submission queue that works: a teardown's linked entries must be
/// queued together.
pub(crate) const SQ_ENTRIES_MIN: u32 = 8;
/// Completion queue entries per submission queue entry. Completions beyond it are
/// kept by the kernel (IORING_FEAT_NODROP) until there is room.
const CQ_PER_SQ: u32 = 4;
/// Most operations one connection has in the ring at once: its teardown group (at
/// most [`SQ_ENTRIES_MIN`] entries) behind its receive, send and delay timer. With
/// the receive buffers (a multishot receive completes once per buffer) and the
/// accepts, it bounds the completions a ring's stash must hold.
const OPS_PER_CONN_MAX: usize = SQ_ENTRIES_MIN as usize + 3;

/// How each ring is built: [`Tuning::DEFAULT`] except in tests that force the hard
/// paths (a full submission queue, an empty buffer pool, an overflowed completion
/// queue on a kernel that then refuses submissions).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tuning {
    pub sq_entries: u32,
    pub recv_buffers: u16,
    pub cq_per_sq: u32,
    /// [`Ring::refuse_while_overflowed`]: submits behave as on 5.11-5.18.
    pub refuse_while_overflowed: bool,
}

impl Tuning {
    pub(crate) const DEFAULT: Tuning = Tuning {
        sq_entries: SQ_ENTRIES,
        recv_buffers: RECV_BUFFERS,
        cq_per_sq: CQ_PER_SQ,
        refuse_while_overflowed: false,
    };
}
/// Receive buffers per ring, shared by all its connections.
pub(crate) const RECV_BUFFERS: u16 = 256;
/// Bytes per receive buffer.
pub(crate) const RECV_BUFFER_BYTES: usize = 16 * 1024;
/// The buffer group of each ring's pool (groups are per ring).
const BUFFER_GROUP: u16 = 0;
/// Completions copied out of the ring per dispatch pass.
const CQE_BATCH: usize = 1024;
/// Longest wait for completions, so the stop flag and stall windows are seen promptly.
const WAIT_MAX: Duration = Duration::from_millis(10);
/// Longest sleep slice inside a stall window, for the same reason.
const STALL_SLICE_MAX: Duration = Duration::from_millis(10);
/// How long shutdown waits for cancelled operations before giving up on them, plus
/// [`SHUTDOWN_DRAIN_PER_OP`] for each operation in flight.
const SHUTDOWN_DRAIN_MAX: Duration = Duration::from_millis(50);
/// Extra shutdown wait per operation in flight (12,000 connections: 120 ms more).
const SHUTDOWN_DRAIN_PER_OP: Duration = Duration::from_micros(10);
/// Back-off before re-arming an accept that failed for lack of resources (EMFILE…),
/// so a full descriptor table does not turn the loop into a busy spin.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(10);

/// SO_LINGER {on, 0}: a close that sends RST. Static, so its address outlives every
/// operation that reads it.
static LINGER_ZERO: libc::linger = libc::linger {
    l_onoff: 1,
    l_linger: 0,
};

/// Everything the threads of one sink share: read-only apart from the stop flag, the
/// stall origin and the open-connection counts.
pub(crate) struct Shared {
    pub mode: SinkMode,
    pub request_size: usize,
    pub delay: Option<Duration>,
    /// `--delay-dist exp:MEAN`: each reply's delay drawn from an exponential.
    pub delay_exp_mean: Option<Duration>,
    pub stall: Option<Stall>,
    pub stop: AtomicBool,
    /// Fixed mode: a whole number of replies of b'x'; empty otherwise.
    pub reply: Box<[u8]>,
    /// Most connections the whole sink holds at once; accepts beyond are closed.
    pub connections_max: u64,
    /// [`SQ_ENTRIES`] except in tests that force the full-queue path.
    pub sq_entries: u32,
    /// [`RECV_BUFFERS`] except in tests that force the empty-pool path.
    pub recv_buffers: u16,
    /// [`CQ_PER_SQ`] except in tests that overflow the completion queue.
    pub cq_per_sq: u32,
    /// False except in tests of the pre-5.19 EBUSY path.
    pub refuse_while_overflowed: bool,
    /// Close every connection at each multiple of this since `started`.
    pub close_every: Option<Duration>,
    /// Probability that an accepted connection is reset at its first request.
    pub reset_ratio: f64,
    pub seed: u64,
    pub started: Instant,
    /// Connections held now, over all rings.
    pub open: AtomicU64,
    /// The most held at once.
    pub peak: AtomicU64,
    /// Broadcast mode's rooms.
    pub broadcast: Option<BroadcastConfig>,
}

/// What one ring is: its core, its number among all rings (the PRNG stream), and
/// its table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RingSpec {
    pub core: usize,
    pub index: usize,
    /// Accepted sockets are direct descriptors.
    pub direct: bool,
    /// Slots of the connection table (and of the fixed-file table when direct).
    pub table: usize,
}

/// A thread's counters as last published (after every pass of its loop), for
/// [`super::SinkHandle::snapshot`]; written by the thread only.
#[derive(Debug, Default)]
pub(crate) struct Live {
    connections_accepted: AtomicU64,
    connections_rejected: AtomicU64,
    connections_closed: AtomicU64,
    connections_reset: AtomicU64,
    connections_closed_by_peer: AtomicU64,
    connections_throttled: AtomicU64,
    bytes_received: AtomicU64,
    bytes_sent: AtomicU64,
    replies: AtomicU64,
    broadcast: [AtomicU64; BroadcastStats::FIELDS],
}

impl Live {
    fn store(&self, s: &SinkStats) {
        let r = Ordering::Relaxed;
        self.connections_accepted.store(s.connections_accepted, r);
        self.connections_rejected.store(s.connections_rejected, r);
        self.connections_closed.store(s.connections_closed, r);
        self.connections_reset.store(s.connections_reset, r);
        self.connections_closed_by_peer
            .store(s.connections_closed_by_peer, r);
        self.connections_throttled.store(s.connections_throttled, r);
        self.bytes_received.store(s.bytes_received, r);
        self.bytes_sent.store(s.bytes_sent, r);
        self.replies.store(s.replies, r);
        for (a, v) in self.broadcast.iter().zip(s.broadcast.to_array()) {
            a.store(v, r);
        }
    }

    pub(crate) fn load(&self) -> SinkStats {
        let r = Ordering::Relaxed;
        SinkStats {
            connections_accepted: self.connections_accepted.load(r),
            connections_rejected: self.connections_rejected.load(r),
            connections_closed: self.connections_closed.load(r),
            connections_reset: self.connections_reset.load(r),
            connections_closed_by_peer: self.connections_closed_by_peer.load(r),
            connections_throttled: self.connections_throttled.load(r),
            bytes_received: self.bytes_received.load(r),
            bytes_sent: self.bytes_sent.load(r),
            replies: self.replies.load(r),
            broadcast: BroadcastStats::from_array(std::array::from_fn(|i| {
                self.broadcast[i].load(r)
            })),
            ..SinkStats::default()
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Completion {
    user_data: u64,
    result: i32,
    flags: u32,
}

/// One slot of the connection table: all a held connection costs in user space.
#[derive(Debug, Clone, Copy)]
struct Conn {
    /// The ordinary descriptor; -1 with direct descriptors (the slot is the index).
    fd: RawFd,
    generation: u32,
    open: bool,
    /// Answer the first request with RST.
    reset_pending: bool,
    /// A receive is armed (multishot or single).
    recv_armed: bool,
    /// The slot has an entry in the wait list (kept across connections, so the list
    /// never holds a slot twice).
    listed: bool,
    /// The connection waits for receive buffers.
    starved: bool,
    /// Echo: the chain reached the connection's share of the pool; its receive is
    /// stopped (cancelled, or not re-armed) until the chain drains to half of it.
    throttled: bool,
    /// A send (maybe behind its delay timer) is in flight.
    sending: bool,
    /// Echo: bytes of the chain's head buffer already sent.
    send_off: u32,
    /// Fixed: requests received but not yet a whole request.
    partial: u32,
    /// Echo: buffers still to send back, oldest first.
    chain: Chain,
    /// Fixed: reply bytes owed, including the send in flight.
    owed: u64,
    /// Fixed: requests answered by `owed`, credited when it is all sent.
    replies_owed: u64,
}

impl Conn {
    const FREE: Conn = Conn {
        fd: -1,
        generation: 0,
        open: false,
        reset_pending: false,
        recv_armed: false,
        listed: false,
        starved: false,
        throttled: false,
        sending: false,
        send_off: 0,
        partial: 0,
        chain: Chain::EMPTY,
        owed: 0,
        replies_owed: 0,
    };
}

fn ring_error(core: usize, entries: u32) -> impl Fn(io::Error) -> SinkError {
    move |source| SinkError::Ring {
        core,
        entries,
        source,
    }
}

/// The ring (the engine's setup: the best flags the kernel accepts, waits with a
/// timeout required) with its fixed-file table (direct descriptors) and its buffer
/// pool.
fn build_ring(spec: RingSpec, shared: &Shared) -> Result<(Ring, BufPool), SinkError> {
    let sq_entries = shared.sq_entries;
    let core = spec.core;
    let mut ring = Ring::with_completions(sq_entries, shared.cq_per_sq)
        .map_err(ring_error(core, sq_entries))?;
    if shared.refuse_while_overflowed {
        ring.refuse_while_overflowed();
    }
    // Every completion that can be outstanding (one accept per slot at most), so a
    // push on a kernel that refuses work while completions wait can always move them
    // out of the way.
    ring.hold_completions(spec.table * (OPS_PER_CONN_MAX + 1) + usize::from(shared.recv_buffers));
    if spec.direct {
        ring.register_files_sparse(spec.table as u32)
            .map_err(ring_error(core, sq_entries))?;
    }
    let pool = BufPool::new(
        &mut ring,
        shared.recv_buffers,
        RECV_BUFFER_BYTES,
        BUFFER_GROUP,
    )
    .map_err(|e| match e.raw_os_error() {
        Some(libc::EINVAL) => SinkError::Unsupported {
            core,
            feature: "IORING_REGISTER_PBUF_RING (provided buffer rings)",
            kernel: "5.19",
        },
        _ => ring_error(core, sq_entries)(e),
    })?;
    Ok((ring, pool))
}

/// Spawns the thread of one ring. It reports on `ready` once its ring exists (or why
/// it could not be created); `listener` is already listening, so clients may
/// connect before that.
pub(crate) fn spawn(
    spec: RingSpec,
    listener: Socket,
    shared: Arc<Shared>,
    live: Arc<Live>,
    ready: mpsc::Sender<Result<(), SinkError>>,
) -> io::Result<JoinHandle<SinkStats>> {
    std::thread::Builder::new()
        .name(format!("blaster-sink-{}-{}", spec.core, spec.index))
        // The loop keeps one 16 KiB batch array on its stack; the rest is small.
        .stack_size(256 * 1024)
        .spawn(move || {
            // Pinning is best-effort: an unpinned sink serves correctly, with more jitter.
            crate::threads::pin_current(spec.core);
            let (ring, bufs) = match build_ring(spec, &shared) {
                Ok(built) => built,
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return SinkStats::default();
                }
            };
            let mut worker = Worker::new(spec, ring, bufs, listener, shared, live);
            let _ = ready.send(Ok(()));
            drop(ready);
            worker.run();
            worker.publish();
            if let Some(e) = &worker.fatal {
                crate::errln!(
                    "blaster: sink ring {} on core {} stopped early: io_uring: {e}",
                    spec.index,
                    spec.core
                );
            }
            worker.stats.clone()
        })
}

struct Worker {
    spec: RingSpec,
    ring: Ring,
    /// Declared after the ring: dropped after it.
    bufs: BufPool,
    listener: Socket,
    shared: Arc<Shared>,
    /// Where `stats` is published for snapshots.
    live: Arc<Live>,
    conns: Vec<Conn>,
    /// Ordinary descriptors only: free slot indices, a stack.
    free: Vec<u32>,
    /// Slots whose receive stopped for want of buffers (see `Conn::listed`).
    waiting: Vec<u32>,
    /// The service delay, boxed so its address is stable while a timer refers to it.
    delay_ts: Option<Box<types::Timespec>>,
    /// `--delay-dist`: each connection's drawn delay (a connection has one delayed
    /// send at a time), sized with the table at start, and the draws' generator.
    delay_each: Option<Box<[types::Timespec]>>,
    delay_rng: fastrand::Rng,
    accept_armed: bool,
    accept_retry_at: Option<Instant>,
    /// Multishot receives work (kernel 6.0+); else single-shot, re-armed each time.
    recv_multishot: bool,
    /// Operations submitted whose final completion has not been seen.
    inflight: usize,
    /// This thread has reported a request byte to the stall schedule.
    stall_marked: bool,
    /// Draws which connections are reset.
    rng: fastrand::Rng,
    next_close: Option<Instant>,
    /// Broadcast mode: rooms, send queues, aggregate state.
    relay: Option<Box<relay::Relay>>,
    stats: SinkStats,
    fatal: Option<io::Error>,
}

impl Worker {
    fn new(
        spec: RingSpec,
        ring: Ring,
        bufs: BufPool,
        listener: Socket,
        shared: Arc<Shared>,
        live: Arc<Live>,
    ) -> Worker {
        let n = spec.table;
        let free = if spec.direct {
            Vec::new()
        } else {
            (0..n as u32).rev().collect()
        };
        let delay_ts = shared
            .delay
            .filter(|d| !d.is_zero())
            .map(|d| Box::new(types::Timespec::from(d)));
        let delay_each = shared
            .delay_exp_mean
            .map(|_| vec![types::Timespec::new(); n].into_boxed_slice());
        // Its own stream, so the delays drawn do not move which connections are reset.
        let delay_rng = super::thread_rng(shared.seed ^ 0xde1a_u64 << 32, spec.index);
        let next_close = shared.close_every.map(|every| shared.started + every);
        let rng = super::thread_rng(shared.seed, spec.index);
        let relay = shared
            .broadcast
            .map(|b| Box::new(relay::Relay::new(b, n, shared.started)));
        Worker {
            spec,
            ring,
            bufs,
            listener,
            shared,
            live,
            conns: vec![Conn::FREE; n],
            free,
            waiting: Vec::with_capacity(n),
            delay_ts,
            delay_each,
            delay_rng,
            accept_armed: false,
            accept_retry_at: None,
            recv_multishot: true,
            inflight: 0,
            stall_marked: false,
            rng,
            next_close,
            relay,
            stats: SinkStats::default(),
            fatal: None,
        }
    }

    /// Publishes the counters for snapshots.
    fn publish(&mut self) {
        if let Some(r) = &self.relay {
            self.stats.broadcast = r.stats;
        }
        self.live.store(&self.stats);
    }

    fn stopping(&self) -> bool {
        self.shared.stop.load(Ordering::Acquire)
    }

    fn run(&mut self) {
        let mut batch = [Completion::default(); CQE_BATCH];
        while !self.stopping() && self.fatal.is_none() {
            if self.sleep_if_frozen() {
                continue;
            }
            self.close_all_if_due();
            self.arm_accept_if_due();
            self.bufs.publish();
            let wait_ns = u64::try_from(self.wait_budget().as_nanos()).unwrap_or(u64::MAX);
            if let Err(e) = self.ring.submit_and_wait_ns(wait_ns) {
                self.fatal = Some(e);
                break;
            }
            // A window may have opened while we waited: nothing is answered inside it.
            if self.sleep_if_frozen() {
                continue;
            }
            loop {
                let n = self.drain(&mut batch);
                for c in &batch[..n] {
                    self.dispatch(*c);
                }
                if n < CQE_BATCH {
                    break;
                }
            }
            self.relay_tick_if_due();
            self.relay_flush();
            self.rearm_starved();
            self.publish();
        }
        self.shutdown(&mut batch);
    }

    /// If a stall window is open, sleeps until it closes (in slices, watching the
    /// stop flag) and returns true.
    fn sleep_if_frozen(&self) -> bool {
        let Some(stall) = &self.shared.stall else {
            return false;
        };
        let Phase::Frozen { until_ns } = stall.phase(stall.now_ns()) else {
            return false;
        };
        let until = stall.instant_at(until_ns);
        loop {
            let now = Instant::now();
            if now >= until || self.stopping() {
                return true;
            }
            std::thread::sleep((until - now).min(STALL_SLICE_MAX));
        }
    }

    /// How long the next wait for completions may last.
    fn wait_budget(&self) -> Duration {
        let mut wait = WAIT_MAX;
        if let Some(stall) = &self.shared.stall {
            let now = stall.now_ns();
            if let Phase::Serving { next_freeze_ns } = stall.phase(now) {
                wait = wait.min(Duration::from_nanos(next_freeze_ns.saturating_sub(now)));
            }
        }
        let now = Instant::now();
        let tick = self.relay.as_ref().and_then(|r| r.next_tick());
        for at in [self.accept_retry_at, self.next_close, tick]
            .into_iter()
            .flatten()
        {
            wait = wait.min(at.saturating_duration_since(now));
        }
        wait
    }

    /// Queues `entries` contiguously (a linked group must not be split across two
    /// submissions), submitting first if the queue lacks room. Never drops an entry;
    /// on a broken ring it records the error in `fatal` and gives up.
    ///
    /// # Safety
    /// Every buffer or timespec the entries point to must stay valid and unmoved
    /// until the operation's completion has been reaped.
    unsafe fn push(&mut self, entries: &[squeue::Entry]) {
        assert!(
            entries.len() <= SQ_ENTRIES_MIN as usize,
            "a group of entries must fit an empty submission queue"
        );
        if self.ring.sq_room() < entries.len() {
            // Entries about to be submitted may pick receive buffers: publish first.
            self.bufs.publish();
        }
        // SAFETY: the caller guarantees the entries' memory outlives the operations.
        // When the kernel takes nothing (busy: completions wait for room), the ring
        // moves the completions into its stash, which `drain` reads first, and retries
        // a bounded number of times before failing.
        match unsafe { self.ring.push_all(entries) } {
            Ok(()) => self.inflight += entries.len(),
            Err(e) => self.fatal = Some(e.into()),
        }
    }

    fn target(&self, index: usize) -> Target {
        if self.spec.direct {
            Target::Fixed(index as u32)
        } else {
            Target::Fd(self.conns[index].fd)
        }
    }

    fn drain(&mut self, batch: &mut [Completion]) -> usize {
        let mut n = 0;
        // Stashed completions first; no more are taken than `batch` holds.
        self.ring
            .reap_each(batch.len(), |user_data, result, flags| {
                batch[n] = Completion {
                    user_data,
                    result,
                    flags,
                };
                n += 1;
            })
    }

    /// Marks the end of an operation unless more completions of it will follow
    /// (multishot accept and receive).
    fn retire(&mut self, flags: u32) {
        if !cqueue::more(flags) {
            self.inflight = self.inflight.saturating_sub(1);
        }
    }

    /// The slot `token` refers to, if it still holds the connection the operation
    /// was issued for.
    fn live_slot(&self, token: Token) -> Option<usize> {
        let index = token.index as usize;
        let conn = self.conns.get(index)?;
        (conn.open && conn.generation == token.generation).then_some(index)
    }

    fn dispatch(&mut self, c: Completion) {
        let Some(token) = Token::decode(c.user_data) else {
            return;
        };
        self.retire(c.flags);
        match token.op {
            Op::Accept => self.on_accept(c.result, c.flags),
            Op::Recv => self.on_recv(token, c.result, c.flags),
            Op::Send => self.on_send(token, c.result),
            // The delay timer ends with -ETIME by design and its send follows; a
            // cancel finding nothing (-ENOENT) or a failed linger do not stop the
            // close behind them (hard links); the rest only matter at shutdown.
            Op::Timeout | Op::Cancel | Op::Linger | Op::CancelConn | Op::Close => {}
        }
    }

    /// Stops accepting and tears every connection down (its receive, send and delay
    /// timer cancelled by exact `user_data` — a cancelled timer cancels its linked
    /// send — and the socket closed), then waits for the completions: at most
    /// [`SHUTDOWN_DRAIN_MAX`] plus [`SHUTDOWN_DRAIN_PER_OP`] per operation in flight.
    /// One cancel-everything request would be simpler, but the kernel finds its
    /// matches by rescanning every request it already cancelled, quadratic in the
    /// connections held (seconds at 12,000). Memory an unfinished operation may still
    /// touch is leaked, never freed.
    fn shutdown(&mut self, batch: &mut [Completion]) {
        // SAFETY: plain syscall on the listener this Worker owns; it ends the accept.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        if self.fatal.is_none() {
            if self.accept_armed {
                let cancel = opcode::AsyncCancel::new(Token::new(0, Op::Accept, 0).encode())
                    .build()
                    .user_data(Token::new(0, Op::Cancel, 0).encode());
                // SAFETY: a cancel request refers to no memory.
                unsafe { self.push(&[cancel]) };
            }
            for index in 0..self.conns.len() {
                if self.conns[index].open {
                    self.teardown(index, false);
                }
            }
        }
        let drain = SHUTDOWN_DRAIN_MAX + SHUTDOWN_DRAIN_PER_OP * self.inflight.min(1 << 20) as u32;
        let deadline = Instant::now() + drain;
        while self.inflight > 0 && self.fatal.is_none() {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let wait = (deadline - now).min(Duration::from_millis(5));
            if let Err(e) = self.ring.submit_and_wait_ns(wait.as_nanos() as u64) {
                self.fatal = Some(e);
                break;
            }
            let n = self.drain(batch);
            for c in &batch[..n] {
                self.retire(c.flags);
                let accepted_fd = !self.spec.direct && c.result >= 0;
                if accepted_fd && Token::decode(c.user_data).map(|t| t.op) == Some(Op::Accept) {
                    close_descriptor(c.result);
                }
            }
        }
        let mut held = 0;
        for conn in self.conns.iter_mut().filter(|c| c.open) {
            if conn.fd >= 0 {
                close_descriptor(conn.fd);
            }
            conn.open = false;
            held += 1;
        }
        self.shared.open.fetch_sub(held, Ordering::Relaxed);
        if self.inflight > 0 {
            crate::errln!(
                "blaster: sink ring {} on core {}: {} operations did not finish at shutdown; \
                 their buffers are leaked",
                self.spec.index,
                self.spec.core,
                self.inflight
            );
            self.bufs.leak();
            std::mem::forget(Arc::clone(&self.shared));
            std::mem::forget(self.delay_ts.take());
            std::mem::forget(self.delay_each.take());
            std::mem::forget(self.relay.take());
        } else {
            let _ = self.ring.unregister_buf_ring(self.bufs.bgid());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_slot_stays_small() {
        // What an idle connection costs in user space (docs/sink.md: "48-byte table entry").
        assert!(
            std::mem::size_of::<Conn>() <= 48,
            "{}",
            std::mem::size_of::<Conn>()
        );
    }
}
