//! One sink thread: a pinned loop over its own io_uring and its own listener.
//!
//! Each iteration: sleep through a stall window if one is open; re-arm the accept if
//! it has ended; submit everything queued and wait (at most 10 ms, and never past the
//! next stall window) for at least one completion; drain the completion queue into a
//! fixed array; dispatch each completion, which queues the connection's next
//! operation. A connection has at most one data operation (recv or send, the send
//! optionally preceded by its hard-linked delay timer) in flight, so closing it after
//! a completion never races with another operation on the same descriptor.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use socket2::Socket;

use super::socket::set_nodelay;
use super::stall::{Phase, Stall};
use super::token::{GENERATION_MASK, Op, Token};
use super::{SinkError, SinkMode, SinkStats};

/// Submission queue depth: large enough that a full batch of completions (each
/// queueing at most two entries) rarely has to flush mid-dispatch.
pub(crate) const SQ_ENTRIES: u32 = 4096;
/// The smallest submission queue that works: a delay timer and its send must be
/// queued together.
pub(crate) const SQ_ENTRIES_MIN: u32 = 2;
/// The kernel's ceiling on completion queue entries (2 × IORING_MAX_ENTRIES).
const CQ_ENTRIES_MAX: usize = 65536;
/// Per-connection receive buffer; echo replies are sent straight out of it.
pub(crate) const CONN_BUFFER_BYTES: usize = 64 * 1024;
/// Completions copied out of the ring per dispatch pass.
const CQE_BATCH: usize = 1024;
/// Longest wait for completions, so the stop flag and stall windows are seen promptly.
const WAIT_MAX: Duration = Duration::from_millis(10);
/// Longest sleep slice inside a stall window, for the same reason.
const STALL_SLICE_MAX: Duration = Duration::from_millis(10);
/// How long shutdown waits for cancelled operations before giving up on them.
const SHUTDOWN_DRAIN_MAX: Duration = Duration::from_millis(50);
/// Back-off before re-arming an accept that failed for lack of resources (EMFILE…),
/// so a full descriptor table does not turn the loop into a busy spin.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(10);

/// Everything the threads of one sink share, read-only apart from the stop flag and
/// the stall origin.
pub(crate) struct Shared {
    pub mode: SinkMode,
    pub request_size: usize,
    pub delay: Option<Duration>,
    pub stall: Option<Stall>,
    pub stop: AtomicBool,
    /// Fixed mode: a whole number of replies of b'x'; empty otherwise.
    pub reply: Box<[u8]>,
    pub connections_max: usize,
    /// [`SQ_ENTRIES`] except in tests that force the full-queue path.
    pub sq_entries: u32,
}

/// A thread's counters as last published (after every pass of its loop), for
/// [`super::SinkHandle::snapshot`]; written by the thread only.
#[derive(Debug, Default)]
pub(crate) struct Live {
    connections_accepted: AtomicU64,
    connections_rejected: AtomicU64,
    bytes_received: AtomicU64,
    bytes_sent: AtomicU64,
    replies: AtomicU64,
}

impl Live {
    fn store(&self, s: &SinkStats) {
        self.connections_accepted
            .store(s.connections_accepted, Ordering::Relaxed);
        self.connections_rejected
            .store(s.connections_rejected, Ordering::Relaxed);
        self.bytes_received
            .store(s.bytes_received, Ordering::Relaxed);
        self.bytes_sent.store(s.bytes_sent, Ordering::Relaxed);
        self.replies.store(s.replies, Ordering::Relaxed);
    }

    pub(crate) fn load(&self) -> SinkStats {
        SinkStats {
            connections_accepted: self.connections_accepted.load(Ordering::Relaxed),
            connections_rejected: self.connections_rejected.load(Ordering::Relaxed),
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            replies: self.replies.load(Ordering::Relaxed),
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

/// One slot of the connection table.
struct Conn {
    /// -1 while the slot is free.
    fd: RawFd,
    generation: u32,
    /// Allocated on the slot's first connection and kept for every later one.
    buf: Box<[u8]>,
    /// Bytes of the current reply already sent.
    send_off: usize,
    /// Total bytes of the current reply.
    send_len: usize,
    /// Fixed mode: bytes received of a request that is not complete yet.
    partial: usize,
    /// Requests answered by the reply being sent, credited when it is fully sent.
    replies_pending: u64,
}

impl Conn {
    fn free() -> Conn {
        Conn {
            fd: -1,
            generation: 0,
            buf: Box::default(),
            send_off: 0,
            send_len: 0,
            partial: 0,
            replies_pending: 0,
        }
    }
}

fn is_transient(errno: i32) -> bool {
    matches!(errno, libc::EINTR | libc::EAGAIN)
}

/// Errors of `io_uring_enter` that only mean "nothing to report yet".
fn is_benign_enter_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ETIME | libc::EINTR | libc::EAGAIN | libc::EBUSY)
    )
}

fn close_fd(fd: RawFd) {
    // SAFETY: `fd` was returned by accept to this thread and is closed exactly once
    // (the slot is marked free right after); no Rust object owns it.
    unsafe {
        libc::close(fd);
    }
}

fn build_ring(core: usize, connections_max: usize, sq_entries: u32) -> Result<IoUring, SinkError> {
    // Room for every connection's recv/send plus its delay timer, the accept and the
    // cancel, so the completion queue does not overflow at the configured maximum.
    let cq_entries = connections_max
        .saturating_mul(2)
        .saturating_add(64)
        .clamp(2 * sq_entries as usize, CQ_ENTRIES_MAX) as u32;
    let ring = match IoUring::builder()
        .setup_cqsize(cq_entries)
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(sq_entries)
    {
        Ok(ring) => ring,
        // Kernels before 6.1 reject DEFER_TASKRUN; it is an optimisation only.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::builder()
            .setup_cqsize(cq_entries)
            .build(sq_entries)
            .map_err(|source| SinkError::Ring {
                core,
                entries: sq_entries,
                source,
            })?,
        Err(source) => {
            return Err(SinkError::Ring {
                core,
                entries: sq_entries,
                source,
            });
        }
    };
    if !ring.params().is_feature_ext_arg() {
        return Err(SinkError::Unsupported {
            core,
            feature: "IORING_FEAT_EXT_ARG (waiting for completions with a timeout)",
            kernel: "5.11",
        });
    }
    Ok(ring)
}

/// Spawns the thread for `core`. It reports on `ready` once its ring exists (or why
/// it could not be created); `listener` is already listening, so clients may
/// connect before that.
pub(crate) fn spawn(
    core: usize,
    listener: Socket,
    shared: Arc<Shared>,
    live: Arc<Live>,
    ready: mpsc::Sender<Result<(), SinkError>>,
) -> io::Result<JoinHandle<SinkStats>> {
    std::thread::Builder::new()
        .name(format!("blaster-sink-{core}"))
        .spawn(move || {
            // Pinning is best-effort: an unpinned sink serves correctly, with more jitter.
            let _ = core_affinity::set_for_current(core_affinity::CoreId { id: core });
            let ring = match build_ring(core, shared.connections_max, shared.sq_entries) {
                Ok(ring) => ring,
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return SinkStats::default();
                }
            };
            let mut worker = Worker::new(core, ring, listener, shared, live);
            let _ = ready.send(Ok(()));
            drop(ready);
            worker.run();
            worker.live.store(&worker.stats);
            if let Some(e) = &worker.fatal {
                eprintln!("blaster: sink thread on core {core} stopped early: io_uring: {e}");
            }
            worker.stats.clone()
        })
}

struct Worker {
    core: usize,
    ring: IoUring,
    listener: Socket,
    shared: Arc<Shared>,
    /// Where `stats` is published for snapshots.
    live: Arc<Live>,
    conns: Vec<Conn>,
    /// Free slot indices; a stack, so recently used (warm) buffers are reused first.
    free: Vec<u32>,
    /// The service delay, boxed so its address is stable while a timer refers to it.
    delay_ts: Option<Box<types::Timespec>>,
    accept_armed: bool,
    accept_multishot: bool,
    accept_retry_at: Option<Instant>,
    /// Operations submitted whose final completion has not been seen.
    inflight: usize,
    /// This thread has reported a request byte to the stall schedule.
    stall_marked: bool,
    stats: SinkStats,
    fatal: Option<io::Error>,
}

impl Worker {
    fn new(
        core: usize,
        ring: IoUring,
        listener: Socket,
        shared: Arc<Shared>,
        live: Arc<Live>,
    ) -> Worker {
        let n = shared.connections_max;
        let mut conns = Vec::with_capacity(n);
        conns.resize_with(n, Conn::free);
        let free = (0..n as u32).rev().collect();
        let delay_ts = shared
            .delay
            .filter(|d| !d.is_zero())
            .map(|d| Box::new(types::Timespec::from(d)));
        Worker {
            core,
            ring,
            listener,
            shared,
            live,
            conns,
            free,
            delay_ts,
            accept_armed: false,
            accept_multishot: true,
            accept_retry_at: None,
            inflight: 0,
            stall_marked: false,
            stats: SinkStats::default(),
            fatal: None,
        }
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
            self.arm_accept_if_due();
            let ts = types::Timespec::from(self.wait_budget());
            let args = types::SubmitArgs::new().timespec(&ts);
            if let Err(e) = self.ring.submitter().submit_with_args(1, &args)
                && !is_benign_enter_error(&e)
            {
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
            self.live.store(&self.stats);
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
        if let Some(at) = self.accept_retry_at {
            wait = wait.min(at.saturating_duration_since(Instant::now()));
        }
        wait
    }

    /// Queues `entries` contiguously (a linked pair must not be split across two
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
        loop {
            {
                let mut sq = self.ring.submission();
                if sq.capacity() - sq.len() >= entries.len() {
                    for entry in entries {
                        // SAFETY: the caller guarantees the entry's memory outlives
                        // the operation; room was checked just above.
                        if unsafe { sq.push(entry) }.is_err() {
                            unreachable!("submission queue full after checking for room");
                        }
                    }
                    self.inflight += entries.len();
                    return;
                }
            }
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if is_benign_enter_error(&e) && !self.stopping() => {
                    std::thread::yield_now();
                }
                Err(e) => {
                    self.fatal = Some(e);
                    return;
                }
            }
        }
    }

    fn arm_accept_if_due(&mut self) {
        if self.accept_armed {
            return;
        }
        if let Some(at) = self.accept_retry_at {
            if Instant::now() < at {
                return;
            }
            self.accept_retry_at = None;
        }
        let fd = types::Fd(self.listener.as_raw_fd());
        let entry = if self.accept_multishot {
            opcode::AcceptMulti::new(fd)
                .flags(libc::SOCK_CLOEXEC)
                .build()
        } else {
            opcode::Accept::new(fd, std::ptr::null_mut(), std::ptr::null_mut())
                .flags(libc::SOCK_CLOEXEC)
                .build()
        };
        let entry = entry.user_data(Token::new(0, Op::Accept, 0).encode());
        // SAFETY: the accept asks for no peer address, so it refers to no memory; the
        // listener outlives the ring (both live in this Worker, which cancels every
        // operation at shutdown).
        unsafe { self.push(&[entry]) };
        self.accept_armed = true;
    }

    fn arm_recv(&mut self, index: usize) {
        let conn = &mut self.conns[index];
        let entry = opcode::Recv::new(
            types::Fd(conn.fd),
            conn.buf.as_mut_ptr(),
            conn.buf.len() as u32,
        )
        .build()
        .user_data(Token::new(index as u32, Op::Recv, conn.generation).encode());
        // SAFETY: `conn.buf` is a heap allocation owned by the connection table, which
        // is never shrunk and is only freed after every operation has completed (or is
        // leaked by `shutdown` if some never do).
        unsafe { self.push(&[entry]) };
    }

    /// Sends the next part of the connection's reply; `first` marks the first send of
    /// a reply, which is the one held back by the service delay.
    fn arm_send(&mut self, index: usize, first: bool) {
        let conn = &self.conns[index];
        let left = conn.send_len - conn.send_off;
        let (ptr, len) = match self.shared.mode {
            // The reply buffer is uniform, so any prefix of it continues any reply.
            SinkMode::Fixed(_) => (
                self.shared.reply.as_ptr(),
                left.min(self.shared.reply.len()),
            ),
            SinkMode::Echo | SinkMode::Discard | SinkMode::Count => {
                (conn.buf[conn.send_off..].as_ptr(), left)
            }
        };
        let send = opcode::Send::new(types::Fd(conn.fd), ptr, len as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(Token::new(index as u32, Op::Send, conn.generation).encode());
        let timer = match (&self.delay_ts, first) {
            (Some(ts), true) => Some(
                opcode::Timeout::new(&**ts)
                    .build()
                    .flags(squeue::Flags::IO_HARDLINK)
                    .user_data(Token::new(index as u32, Op::Timeout, conn.generation).encode()),
            ),
            _ => None,
        };
        match timer {
            // SAFETY: the send reads from the connection's buffer or the shared reply
            // buffer (the Worker holds an Arc to it), both alive until the send
            // completes; the timespec is boxed in the Worker and never replaced while
            // operations are in flight.
            Some(timer) => unsafe { self.push(&[timer, send]) },
            // SAFETY: as above, the send's source buffer outlives the operation.
            None => unsafe { self.push(&[send]) },
        }
    }

    fn close(&mut self, index: usize) {
        let conn = &mut self.conns[index];
        close_fd(conn.fd);
        conn.fd = -1;
        conn.generation = conn.generation.wrapping_add(1) & GENERATION_MASK;
        conn.send_off = 0;
        conn.send_len = 0;
        conn.partial = 0;
        conn.replies_pending = 0;
        self.free.push(index as u32);
    }

    fn drain(&mut self, batch: &mut [Completion]) -> usize {
        let mut n = 0;
        let mut cq = self.ring.completion();
        // `zip` asks `batch` first, so no completion is consumed without a place to go.
        for (slot, cqe) in batch.iter_mut().zip(&mut cq) {
            *slot = Completion {
                user_data: cqe.user_data(),
                result: cqe.result(),
                flags: cqe.flags(),
            };
            n += 1;
        }
        n
    }

    /// Marks the end of an operation unless this is one of several completions of a
    /// multishot accept.
    fn retire(&mut self, token: Token, flags: u32) {
        if !(token.op == Op::Accept && cqueue::more(flags)) {
            self.inflight = self.inflight.saturating_sub(1);
        }
    }

    /// The slot `token` refers to, if it still holds the connection the operation
    /// was issued for.
    fn live_slot(&self, token: Token) -> Option<usize> {
        let index = token.index as usize;
        let conn = self.conns.get(index)?;
        (conn.fd >= 0 && conn.generation == token.generation).then_some(index)
    }

    fn dispatch(&mut self, c: Completion) {
        let Some(token) = Token::decode(c.user_data) else {
            return;
        };
        self.retire(token, c.flags);
        match token.op {
            Op::Accept => self.on_accept(c.result, c.flags),
            Op::Recv => {
                if let Some(index) = self.live_slot(token) {
                    self.on_recv(index, c.result);
                }
            }
            Op::Send => {
                if let Some(index) = self.live_slot(token) {
                    self.on_send(index, c.result);
                }
            }
            // The delay timer ends with -ETIME by design; its send follows regardless
            // (hard link). The cancel only matters at shutdown.
            Op::Timeout | Op::Cancel => {}
        }
    }

    fn on_accept(&mut self, result: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accept_armed = false;
        }
        if result < 0 {
            match -result {
                // Kernels before 5.19 do not know multishot accept.
                libc::EINVAL if self.accept_multishot => self.accept_multishot = false,
                // The peer gave up before we accepted, or a signal: just re-arm.
                libc::ECONNABORTED | libc::EINTR | libc::EAGAIN | libc::ECANCELED => {}
                // EMFILE, ENFILE, ENOBUFS, ENOMEM, …: wait before trying again.
                _ => self.accept_retry_at = Some(Instant::now() + ACCEPT_RETRY_DELAY),
            }
            return;
        }
        let fd = result;
        let Some(index) = self.free.pop() else {
            close_fd(fd);
            self.stats.connections_rejected += 1;
            return;
        };
        // Without TCP_NODELAY the connection still works, only with Nagle delays;
        // not a reason to drop it.
        let _ = set_nodelay(fd);
        let index = index as usize;
        let conn = &mut self.conns[index];
        if conn.buf.is_empty() {
            conn.buf = vec![0u8; CONN_BUFFER_BYTES].into_boxed_slice();
        }
        conn.fd = fd;
        self.stats.connections_accepted += 1;
        self.arm_recv(index);
    }

    fn on_recv(&mut self, index: usize, result: i32) {
        if result < 0 && is_transient(-result) {
            self.arm_recv(index);
            return;
        }
        if result <= 0 {
            // 0: the peer closed; negative: reset, cancelled, … — either way, done.
            self.close(index);
            return;
        }
        let n = result as usize;
        self.stats.bytes_received += n as u64;
        if !self.stall_marked {
            if let Some(stall) = &self.shared.stall {
                stall.mark_first_byte();
            }
            self.stall_marked = true;
        }
        let conn = &mut self.conns[index];
        let replies = match self.shared.mode {
            SinkMode::Discard | SinkMode::Count => 0,
            SinkMode::Echo => {
                conn.send_len = n;
                1
            }
            SinkMode::Fixed(size) => {
                let count = match self.shared.request_size {
                    0 => 1,
                    request_size => {
                        let total = conn.partial + n;
                        conn.partial = total % request_size;
                        total / request_size
                    }
                };
                conn.send_len = count * size;
                count
            }
        };
        if replies == 0 {
            self.arm_recv(index);
        } else {
            conn.send_off = 0;
            conn.replies_pending = replies as u64;
            self.arm_send(index, true);
        }
    }

    fn on_send(&mut self, index: usize, result: i32) {
        if result < 0 && is_transient(-result) {
            self.arm_send(index, false);
            return;
        }
        if result <= 0 {
            // EPIPE, ECONNRESET, …; a zero-byte send of a non-empty buffer would
            // otherwise repeat forever.
            self.close(index);
            return;
        }
        let n = result as usize;
        self.stats.bytes_sent += n as u64;
        let conn = &mut self.conns[index];
        conn.send_off += n;
        if conn.send_off < conn.send_len {
            self.arm_send(index, false);
        } else {
            self.stats.replies += conn.replies_pending;
            conn.replies_pending = 0;
            self.arm_recv(index);
        }
    }

    /// Shuts every socket down, which completes each recv, send and accept pending
    /// on it. This comes before the cancel because a hard-linked send still runs when
    /// its delay timer is cancelled; on a shut socket it fails instead of leaking a
    /// reply early.
    fn shutdown_sockets(&self) {
        for conn in self.conns.iter().filter(|c| c.fd >= 0) {
            // SAFETY: plain syscall on a descriptor this thread owns.
            unsafe { libc::shutdown(conn.fd, libc::SHUT_RDWR) };
        }
        // SAFETY: as above; the listener is owned by this Worker.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
    }

    /// Shuts the sockets down, cancels every operation (delay timers, and anything
    /// the shutdown did not complete), waits briefly for their completions, closes
    /// every connection. Memory an unfinished operation may still touch is leaked, never
    /// freed.
    fn shutdown(&mut self, batch: &mut [Completion]) {
        self.shutdown_sockets();
        if self.inflight > 0 && self.fatal.is_none() {
            let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any())
                .build()
                .user_data(Token::new(0, Op::Cancel, 0).encode());
            // SAFETY: a cancel request refers to no memory.
            unsafe { self.push(&[cancel]) };
        }
        let deadline = Instant::now() + SHUTDOWN_DRAIN_MAX;
        while self.inflight > 0 && self.fatal.is_none() {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let ts = types::Timespec::from((deadline - now).min(Duration::from_millis(5)));
            let args = types::SubmitArgs::new().timespec(&ts);
            if let Err(e) = self.ring.submitter().submit_with_args(1, &args)
                && !is_benign_enter_error(&e)
            {
                self.fatal = Some(e);
                break;
            }
            let n = self.drain(batch);
            for c in &batch[..n] {
                let Some(token) = Token::decode(c.user_data) else {
                    continue;
                };
                self.retire(token, c.flags);
                if token.op == Op::Accept && c.result >= 0 {
                    close_fd(c.result);
                }
            }
        }
        for index in 0..self.conns.len() {
            if self.conns[index].fd >= 0 {
                self.close(index);
            }
        }
        if self.inflight > 0 {
            eprintln!(
                "blaster: sink thread on core {}: {} operations did not finish at shutdown; \
                 their buffers are leaked",
                self.core, self.inflight
            );
            std::mem::forget(std::mem::take(&mut self.conns));
            std::mem::forget(Arc::clone(&self.shared));
            std::mem::forget(self.delay_ts.take());
        }
    }
}
