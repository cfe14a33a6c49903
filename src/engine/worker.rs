//! The worker: one pinned thread, one ring, one shard of the timetable.
//!
//! Each loop iteration: read the TSC -> dispatch every request now due (stamping its
//! dispatch lag) onto a connection with a free pipeline slot or into the backlog ->
//! drain completions into a fixed array, then handle them (responses are framed and
//! their latencies recorded) -> hand freed slots to the backlog -> queue one send per
//! connection with unsent requests -> one submit for the whole batch. The wait is a
//! ring wait with a timeout that ends `--spin` before the next due send; the rest is
//! spent spinning on the TSC, because timer wake-ups arrive tens of microseconds late.
//!
//! Nothing here allocates per request: the connection table, request slots, backlog,
//! receive buffers and the completion array are sized before the first send.

use super::backoff::Backoff;
use super::buf_ring::BufRing;
use super::conn_table::{Backlog, ConnState, ConnTable, IndexQueue, REGISTERED, Req};
use super::pacing::Pacer;
use super::ring::Ring;
use super::socket::{self, SockOpts};
use super::token::{Op, Token, next_generation};
use crate::clock::{Clock, Nanos, Ticks};
use crate::limits::{CQE_BATCH_MAX, DRAIN_NS_MAX, WAIT_NS_MAX};
use crate::metrics::recorder::{EntryTotals, WorkerTotals};
use crate::metrics::{Counters, ErrorKind, Histograms, Snapshot};
use crate::ports::Placement;
use crate::proto::{AnyFramer, Framer, Framing, Parsed};
use crate::request::{Ctx, RequestSet};
use crate::schedule::{ArrivalKind, Arrivals, Constant, RateShape, Schedule};
use crossbeam_channel::{Receiver, Sender};
use io_uring::{opcode, types};
use socket2::SockAddr;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What goes over the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Persistent TCP connections, requests and framed responses.
    Tcp,
    /// Connected UDP sockets, one datagram per request, responses matched by sequence.
    Udp,
    /// Connected UDP sockets, fire and forget (`--no-response`).
    UdpBlast,
}

/// Builds an operation on connection `$c`'s socket: through its file-table slot when
/// the socket lives there (no descriptor, no per-operation fd lookup), else by
/// descriptor.
macro_rules! on_socket {
    ($w:expr, $c:expr, $fd:expr, |$t:ident| $build:expr) => {
        if $fd == REGISTERED {
            let $t = types::Fixed($c);
            $build
        } else {
            let $t = types::Fd($fd);
            $build
        }
    };
}

/// When a closed connection opens again (see `Worker::reopen_at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reopen {
    /// After the reconnect backoff (the target closed, reset or refused it).
    Backoff,
    /// At once (the generator closed it).
    Now,
}

/// Sockets registered in the ring's file table per update in the connect phase.
const REGISTER_BATCH: usize = 64;
/// Most provided receive buffers per worker.
const RECV_BUFFERS_MAX: usize = 4096;
/// Size of each provided receive buffer: one completion carries at most this much.
const RECV_CHUNK_BYTES: usize = 4096;

/// Everything one worker needs, fixed before it starts.
#[derive(Debug, Clone)]
pub struct WorkerPlan {
    pub index: usize,
    pub transport: Transport,
    /// Global index of this worker's first connection (flow ids, `{conn}`).
    pub conn_offset: usize,
    /// Largest response accepted (`--max-response`).
    pub max_response: usize,
    pub workers: usize,
    pub core: Option<usize>,
    /// The first of `targets` (UDP uses only it).
    pub target: SocketAddr,
    /// Destinations: connection g (global index) uses pair g mod (sources x targets).
    pub targets: Arc<[SocketAddr]>,
    /// Source addresses to bind (`--source-ip`); empty: the kernel chooses.
    pub sources: Arc<[IpAddr]>,
    pub sockopts: SockOpts,
    /// `ip_local_port_range` (first port, size) for explicit source ports (`--source-ip`).
    pub source_ports: Option<(u16, u32)>,
    /// Connects this worker keeps pending at once in the connect phase (the core's
    /// share of [`crate::limits::CONNECTS_IN_FLIGHT_MAX`]).
    pub connects_in_flight: usize,
    /// Minimum gap between two connects of this worker (`--connect-rate`); 0: none.
    pub connect_gap_ns: u64,
    /// Reconnect backoff; `None` with `--no-reconnect`.
    pub backoff: Option<Backoff>,
    /// `--connect-per-request`: connect, send, receive, close for every request.
    pub per_request: bool,
    /// The `--rate` shape; `None`: a constant `rate_rps`.
    pub shape: Option<RateShape>,
    pub arrivals: ArrivalKind,
    /// `--concurrency`: each connection sends its next request when the previous
    /// response arrives (no timetable).
    pub closed_loop: bool,
    pub connections: usize,
    pub pipeline: usize,
    /// Intended rate in total; infinite for `--rate max` (UDP blast only).
    pub rate_rps: f64,
    pub duration_ns: u64,
    pub timeout_ns: u64,
    /// The request when it is one static payload (else empty).
    pub payload: Arc<[u8]>,
    pub requests: Arc<RequestSet>,
    /// Seed of the request choice and `{rand:N}` (per-worker streams derive from it).
    pub seed: u64,
    pub framing: Framing,
    pub recv_buffer_bytes: usize,
    pub backlog_capacity: usize,
    pub interval_ns: u64,
    /// Spin on the TSC for this long before a due send instead of sleeping.
    pub spin_ns: u64,
}

/// Sent once the worker's connections are open (or failed), before the schedule starts.
#[derive(Debug, Clone)]
pub struct Ready {
    pub worker: usize,
    pub established: usize,
    pub failed: usize,
    /// errno of the first failed connect or socket creation.
    pub first_errno: Option<i32>,
    /// From the first connect to the last established one, ns.
    pub establish_ns: u64,
    /// A setup failure that stops this worker (ring, pinning is not one).
    pub fatal: Option<String>,
    pub features: Vec<&'static str>,
}

/// The main thread's answer to [`Ready`].
#[derive(Clone)]
pub enum Control {
    /// Run the schedule; the clock's start instant is the schedule's time zero.
    Start(Clock),
    Abort,
}

/// A worker's channels to the main thread and the collector.
pub struct Channels {
    pub ready_tx: Sender<Ready>,
    pub control_rx: Receiver<Control>,
    pub snap_tx: Sender<Snapshot>,
    /// Histograms the collector has merged and reset, handed back for reuse so the
    /// worker does not allocate at interval boundaries once the run is warm.
    pub recycle_rx: Receiver<Histograms>,
}

/// Runs one worker to completion. Every outcome, including setup failure, is reported
/// on the channels, so the main thread never waits forever.
pub fn run_worker(plan: WorkerPlan, stop: Arc<AtomicBool>, ch: Channels) {
    drive(&plan, &stop, ch, "io_uring setup", Worker::new);
}

/// A worker loop as the thread that drives it sees it (TCP and UDP).
pub trait Engine {
    /// Opens the connections (or flows) and says how that went.
    fn connect(&mut self, stop: &AtomicBool) -> Ready;
    /// Runs the schedule from `clock`'s start instant to its end.
    fn run_from(&mut self, clock: Clock, stop: &AtomicBool);
    /// Closes everything and waits for the kernel to let go of the buffers.
    fn quiesce(&mut self);
}

/// One worker thread: pin, set up, connect, report ready, run when told, quiesce.
/// Every outcome, setup failure included, is reported on the channels, so the main
/// thread never waits forever.
pub fn drive<'p, W: Engine>(
    plan: &'p WorkerPlan,
    stop: &AtomicBool,
    ch: Channels,
    what: &str,
    make: impl FnOnce(&'p WorkerPlan, Sender<Snapshot>, Receiver<Histograms>) -> std::io::Result<W>,
) {
    let Channels {
        ready_tx,
        control_rx,
        snap_tx,
        recycle_rx,
    } = ch;
    if let Some(core) = plan.core {
        crate::threads::pin_current(core);
    }
    let mut w = match make(plan, snap_tx, recycle_rx) {
        Ok(w) => w,
        Err(e) => return setup_failed(&ready_tx, plan, what, &e),
    };
    let ready = w.connect(stop);
    let fatal = ready.fatal.is_some();
    let _ = ready_tx.send(ready);
    if !fatal && let Ok(Control::Start(clock)) = control_rx.recv() {
        w.run_from(clock, stop);
    }
    w.quiesce();
}

impl Engine for Worker<'_> {
    fn connect(&mut self, stop: &AtomicBool) -> Ready {
        self.connect_all(stop)
    }

    fn run_from(&mut self, clock: Clock, stop: &AtomicBool) {
        let unix_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.unix_at_start_ns = unix_now + clock.until_start_ns();
        self.rebase(clock);
        self.run(stop);
    }

    fn quiesce(&mut self) {
        Worker::quiesce(self);
    }
}

/// What a worker records for the current interval, and the channels to the collector.
pub struct Outbox {
    worker: usize,
    pub hist: Histograms,
    pub counters: Counters,
    snap_tx: Sender<Snapshot>,
    recycle_rx: Receiver<Histograms>,
}

impl Outbox {
    pub fn new(worker: usize, snap_tx: Sender<Snapshot>, recycle_rx: Receiver<Histograms>) -> Self {
        Outbox {
            worker,
            hist: Histograms::new(),
            counters: Counters::default(),
            snap_tx,
            recycle_rx,
        }
    }

    /// Sends this interval's figures and starts the next interval from zero, with
    /// histograms the collector handed back (allocating only until it has).
    pub fn send(&mut self, interval: u64, last: Option<WorkerTotals>, pace: &mut Pacer) {
        let fresh = self.recycle_rx.try_recv().unwrap_or_default();
        let snap = Snapshot {
            worker: self.worker,
            interval,
            histograms: std::mem::replace(&mut self.hist, fresh),
            counters: std::mem::take(&mut self.counters),
            usage: pace.take_usage(),
            last,
        };
        let _ = self.snap_tx.send(snap);
    }
}

/// Tells the main thread that worker `plan.index` could not start.
pub fn setup_failed(ready_tx: &Sender<Ready>, plan: &WorkerPlan, what: &str, e: &std::io::Error) {
    let _ = ready_tx.send(Ready {
        worker: plan.index,
        established: 0,
        failed: plan.connections,
        first_errno: e.raw_os_error(),
        establish_ns: 0,
        fatal: Some(format!("worker {}: {what} failed: {e}", plan.index)),
        features: Vec::new(),
    });
}

struct Worker<'p> {
    plan: &'p WorkerPlan,
    ring: Ring,
    table: ConnTable,
    ready_q: IndexQueue,
    flush_q: IndexQueue,
    /// Closed loop: connections whose response completed, to send again.
    reissue_q: IndexQueue,
    /// `--connect-rate`: connections waiting for their turn to connect.
    deferred_q: IndexQueue,
    /// Connections with requests in flight: what the timeout scan looks at when every
    /// connection is open.
    active_q: IndexQueue,
    backlog: Backlog,
    recv_buf: Box<[u8]>,
    /// The payload repeated `pipeline` times: a send of k requests is its first k copies.
    /// Empty when requests are rendered (`staging` instead).
    send_buf: Box<[u8]>,
    /// Rendered requests: per connection, room for `pipeline` requests of the longest
    /// rendering; a send covers the unsent requests rendered back to back.
    staging: Box<[u8]>,
    /// Bytes of `staging` per connection.
    staging_len: usize,
    /// Requests are rendered per request (templates or a mix).
    render: bool,
    /// The framer of each request-set entry (cloned into a connection when the next
    /// response belongs to another entry).
    entry_framers: Vec<AnyFramer>,
    mixed_framing: bool,
    /// Per `--mix` entry figures (empty without a mix).
    entries: Vec<EntryTotals>,
    rng: fastrand::Rng,
    unix_at_start_ns: u64,
    /// One per target; boxed so a connect still in the ring at exit can be leaked.
    addrs: Box<[SockAddr]>,
    /// Which (source, target) pair each connection uses.
    placement: Placement,
    /// Earliest instant of the next connect (`--connect-rate`), ns.
    next_connect_ns: Nanos,
    /// Connections in `Connecting`.
    connecting: usize,
    clock: Clock,
    /// This interval's histograms and counters, and the channel to the collector.
    out: Outbox,
    cqes: Box<[(u64, i32, u32)]>,
    /// Multishot receives pick buffers from here (None: kernel without provided-buffer
    /// rings; each receive is then re-armed into the connection's region).
    buf_ring: Option<BufRing>,
    /// Sockets are registered in the ring's file table at their connection's index.
    fixed_files: bool,
    /// Receives are multishot (into `buf_ring`); false after the kernel refused one.
    multishot: bool,
    schedule: Arrivals,
    /// Goodness of fit of the actual dispatch instants (Poisson arrivals).
    pacing: PacingFit,
    /// Requests issued in closed-loop mode (their sequence numbers).
    closed_issued: u64,
    /// The schedule has started (the connect phase is over).
    running: bool,
    /// Stopped by Ctrl-C (requests still in flight are cut off, not errors).
    interrupted: bool,
    /// This worker's next request number in the schedule, and when it is due.
    next_k: u64,
    next_due: Nanos,
    /// Number of this worker's requests due before the end of the run.
    total_k: u64,
    inflight: u64,
    closed: usize,
    stopping: bool,
    first_errno: Option<i32>,
    backlog_peak: u64,
    completed_total: u64,
    stopped_ns: Nanos,
    /// When the last response completed.
    last_done: Ticks,
    /// The first response that did not parse, escaped and truncated.
    first_bad: Option<String>,
    /// Operations submitted whose completion has not been reaped: buffers they point
    /// into must stay alive until this is zero.
    ops_in_ring: u64,
}

impl<'p> Worker<'p> {
    fn new(
        plan: &'p WorkerPlan,
        snap_tx: Sender<Snapshot>,
        recycle_rx: Receiver<Histograms>,
    ) -> std::io::Result<Self> {
        let entries = (plan.connections * 2 + 64) as u32;
        let mut ring = Ring::new(entries)?;
        ring.confine_io_workers(plan.core);
        // Two receive buffers per connection, 64 to 4096 of 4 KiB each: buffers are
        // handed back as soon as their bytes are framed, so thousands of mostly idle
        // connections share a pool (a receive that finds it empty is re-armed).
        let buf_count = (plan.connections * 2)
            .clamp(64, RECV_BUFFERS_MAX)
            .next_power_of_two() as u16;
        let fixed_files = ring
            .uring
            .submitter()
            .register_files_sparse(plan.connections as u32)
            .is_ok();
        if fixed_files {
            ring.features.push("registered_files");
        }
        let buf_ring = match BufRing::new(&ring.uring.submitter(), buf_count, RECV_CHUNK_BYTES, 0) {
            Ok(b) => {
                ring.features.push("multishot_recv");
                ring.features.push("provided_buffer_ring");
                Some(b)
            }
            Err(_) => None,
        };
        let entry_framers: Vec<AnyFramer> = plan
            .requests
            .entries
            .iter()
            .map(|e| e.framing.framer(plan.payload.len(), plan.max_response))
            .collect();
        let framer = entry_framers[0].clone();
        let (schedule, total_k) = timetable(plan);
        let render = plan.requests.static_bytes().is_none();
        let send_buf = if render {
            Box::default()
        } else {
            plan.payload.repeat(plan.pipeline).into_boxed_slice()
        };
        let staging_len = if render {
            plan.requests.max_len() * plan.pipeline
        } else {
            0
        };
        Ok(Worker {
            plan,
            ring,
            table: ConnTable::new(plan.connections, plan.pipeline, framer),
            ready_q: IndexQueue::with_capacity(plan.connections),
            reissue_q: IndexQueue::with_capacity(plan.connections),
            deferred_q: IndexQueue::with_capacity(plan.connections),
            active_q: IndexQueue::with_capacity(plan.connections),
            flush_q: IndexQueue::with_capacity(plan.connections),
            backlog: Backlog::with_capacity(plan.backlog_capacity),
            recv_buf: vec![0u8; plan.connections * plan.recv_buffer_bytes].into_boxed_slice(),
            send_buf,
            staging: vec![0u8; staging_len * plan.connections].into_boxed_slice(),
            staging_len,
            render,
            entry_framers,
            mixed_framing: plan.requests.mixed_framing(),
            entries: if plan.requests.is_mix {
                vec![EntryTotals::new(); plan.requests.entries.len()]
            } else {
                Vec::new()
            },
            // Per-worker streams derived from the one seed, so runs repeat.
            rng: fastrand::Rng::with_seed(
                plan.seed ^ (plan.index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ),
            unix_at_start_ns: 0,
            addrs: plan.targets.iter().map(socket::sock_addr).collect(),
            placement: Placement::new(
                plan.conn_offset + plan.connections * plan.workers,
                plan.sources.len(),
                plan.targets.len(),
            ),
            next_connect_ns: 0,
            connecting: 0,
            clock: Clock::new(),
            out: Outbox::new(plan.index, snap_tx, recycle_rx),
            cqes: vec![(0u64, 0i32, 0u32); CQE_BATCH_MAX].into_boxed_slice(),
            multishot: buf_ring.is_some(),
            buf_ring,
            fixed_files,
            next_due: schedule.due_ns(0),
            schedule,
            closed_issued: 0,
            pacing: PacingFit::new(plan),
            running: false,
            interrupted: false,
            next_k: 0,
            total_k,
            inflight: 0,
            closed: plan.connections,
            stopping: false,
            first_errno: None,
            backlog_peak: 0,
            completed_total: 0,
            stopped_ns: 0,
            last_done: 0,
            first_bad: None,
            ops_in_ring: 0,
        })
    }

    // ---- connection lifecycle -------------------------------------------------------

    /// Switches to the run's clock: instants set during the connect phase (reopen
    /// times, the next connect) keep their distance from now.
    fn rebase(&mut self, clock: Clock) {
        let setup_now = self.clock.now_ns();
        self.clock = clock;
        let shift = |t: Nanos| {
            if t == Nanos::MAX {
                t
            } else {
                t.saturating_sub(setup_now)
            }
        };
        for conn in self.table.conns.iter_mut() {
            if let ConnState::Closed { reopen_at_ns } | ConnState::Closing { reopen_at_ns } =
                &mut conn.state
            {
                *reopen_at_ns = shift(*reopen_at_ns);
            }
        }
        self.next_connect_ns = shift(self.next_connect_ns);
    }

    /// The (source, target) indices of connection `c`: connections go round robin over
    /// every pair, so each pair carries at most ceil(connections / pairs) of them.
    #[inline]
    fn pair_of(&self, c: u32) -> (Option<IpAddr>, usize) {
        let (s, t) = self.placement.pair_of(self.plan.conn_offset + c as usize);
        (self.plan.sources.get(s).copied(), t)
    }

    /// The source port of connection `c`'s first connect with `--source-ip`: the
    /// connections of one (source, destination) pair take consecutive ports of the
    /// ephemeral range, so mass establishment needs no port search. Reconnects (which
    /// may find their old port in TIME_WAIT) and connections per request let the
    /// kernel choose.
    #[inline]
    fn first_port(&self, c: u32) -> Option<u16> {
        let (lo, size) = self.plan.source_ports?;
        if self.plan.per_request || self.table.conns[c as usize].opened_before {
            return None;
        }
        let g = self.plan.conn_offset + c as usize;
        let nth = g / self.placement.pairs().max(1);
        Some(lo + (nth % size as usize) as u16)
    }

    /// Opens connection `c` now, or, under `--connect-rate`, at its turn.
    fn open(&mut self, c: u32) {
        let now = self.clock.now_ns();
        if self.plan.connect_gap_ns > 0 {
            if now < self.next_connect_ns {
                // Its turn comes at `next_connect_ns`: queued, opened by the loop then.
                let conn = &mut self.table.conns[c as usize];
                if let ConnState::Closed { reopen_at_ns } = &mut conn.state {
                    *reopen_at_ns = self.next_connect_ns;
                }
                if !conn.deferred {
                    conn.deferred = true;
                    let queued = self.deferred_q.push(c);
                    debug_assert!(queued, "each connection is queued at most once");
                }
                return;
            }
            // No credit for idle time beyond one gap: the rate is a ceiling.
            self.next_connect_ns = self
                .next_connect_ns
                .max(now.saturating_sub(self.plan.connect_gap_ns))
                + self.plan.connect_gap_ns;
        }
        let fd = self.new_socket(c);
        self.launch(c, &[fd]);
    }

    /// `--connect-rate`: opens the connections whose turn has come, in order.
    fn open_deferred(&mut self, now: Nanos) {
        while now >= self.next_connect_ns
            && let Some(c) = self.deferred_q.pop()
        {
            let conn = &mut self.table.conns[c as usize];
            conn.deferred = false;
            // Still closed, and wanted: a connection per request with its request, or a
            // connection that is to be reopened.
            if matches!(conn.state, ConnState::Closed { reopen_at_ns } if reopen_at_ns != Nanos::MAX)
                && !self.stopping
            {
                self.open(c);
            }
        }
    }

    /// A socket for connection `c`, options set and bound; -1 when that failed (the
    /// failure is counted and the connection waits for its backoff).
    fn new_socket(&mut self, c: u32) -> RawFd {
        let (source, t) = self.pair_of(c);
        let port = self.first_port(c);
        let reuse = self.plan.targets.len() > 1;
        match socket::tcp_socket(
            &self.plan.targets[t],
            source,
            port,
            reuse,
            &self.plan.sockopts,
        ) {
            Ok(fd) => fd,
            Err(e) => {
                self.connect_failed(c, e.raw_os_error().unwrap_or(libc::EIO));
                -1
            }
        }
    }

    /// Connects connections `first..first + fds.len()` on their new sockets (-1: none,
    /// skipped). The sockets move into the ring's file table in one update and their
    /// descriptors are closed, so connections are not bounded by RLIMIT_NOFILE (each
    /// ring's table is).
    fn launch(&mut self, first: u32, fds: &[RawFd]) {
        // The update may stop early: the first `registered` slots took their socket.
        let registered = if self.fixed_files {
            self.ring
                .uring
                .submitter()
                .register_files_update(first, fds)
                .unwrap_or(0)
        } else {
            0
        };
        let now_t = self.clock.ticks();
        for (i, &fd) in fds.iter().enumerate() {
            if fd < 0 {
                continue;
            }
            let c = first + i as u32;
            let fd = if i < registered {
                socket::close_descriptor(fd);
                REGISTERED
            } else {
                fd
            };
            let (_, t) = self.pair_of(c);
            let conn = &mut self.table.conns[c as usize];
            if conn.opened_before && !self.plan.per_request {
                self.out.counters.reconnects += 1;
            }
            conn.opened_before = true;
            conn.fd = fd;
            conn.state = ConnState::Connecting;
            conn.connect_started = now_t;
            self.closed -= 1;
            self.connecting += 1;
            let token = Token {
                conn: c,
                op: Op::Connect,
                generation: conn.generation,
            };
            let addr = &self.addrs[t];
            let (addr, addr_len) = (addr.as_ptr().cast(), addr.len());
            let entry = on_socket!(self, c, fd, |s| opcode::Connect::new(s, addr, addr_len)
                .build())
            .user_data(token.encode());
            // SAFETY: `self.addrs` lives in the worker, which outlives every operation
            // it queued (the worker drains or closes all connections before it returns).
            self.push(&entry);
        }
    }

    /// A connection attempt that failed with `errno`: counted by errno, retried after
    /// the backoff.
    fn connect_failed(&mut self, c: u32, errno: i32) {
        self.first_errno.get_or_insert(errno);
        self.out.counters.connect_failed(errno);
        self.out.counters.error(socket::connect_error_kind(errno));
        // Only a connection per request has a request waiting for its connect.
        self.close_conn(c, Some(ErrorKind::NoConnection), Reopen::Backoff);
    }

    fn on_connect(&mut self, c: u32, res: i32) {
        if res < 0 {
            self.connect_failed(c, -res);
            return;
        }
        self.connecting -= 1;
        let now_t = self.clock.ticks();
        let conn = &mut self.table.conns[c as usize];
        conn.attempts = 0;
        conn.state = ConnState::Ready;
        let took = self.clock.ns(now_t) - self.clock.ns(conn.connect_started);
        let unsent = conn.unsent;
        self.out.hist.connect.saturating_record(took);
        self.out.counters.connections_opened += 1;
        self.arm_recv(c);
        if unsent > 0 {
            self.mark_flush(c); // connection per request: its request goes out now
        } else if self.plan.closed_loop {
            // Requests go out only once the schedule runs (not in the connect phase).
            if self.running && !self.stopping {
                self.issue(c, now_t);
            }
        } else if !self.plan.per_request {
            self.mark_ready(c);
        }
    }

    /// When a closed connection opens again: after the backoff (a target that closed
    /// or refused it), at once (the generator's own decision: expired requests, a
    /// response that did not parse, `Connection: close`), or never.
    fn reopen_at(&mut self, c: u32, reopen: Reopen) -> Nanos {
        if self.stopping || self.plan.per_request {
            return Nanos::MAX;
        }
        match (reopen, &self.plan.backoff) {
            (Reopen::Now, _) => 0,
            (Reopen::Backoff, Some(b)) => {
                let conn = &mut self.table.conns[c as usize];
                let delay = b.delay_ns(u32::from(conn.attempts), self.rng.f64());
                conn.attempts = conn.attempts.saturating_add(1);
                self.out.hist.reconnect_delay.saturating_record(delay);
                self.clock.now_ns() + delay
            }
            (Reopen::Backoff, None) => Nanos::MAX, // --no-reconnect
        }
    }

    /// Closes connection `c`; requests in flight on it become errors of `kind` (or are
    /// cut off when the run is stopping). It reopens as `reopen` says.
    fn close_conn(&mut self, c: u32, kind: Option<ErrorKind>, reopen: Reopen) {
        while let Some(req) = self.table.pop_front(c) {
            self.inflight -= 1;
            // Cut off by Ctrl-C or the end of the run; but a target that closes or
            // fails during the drain after the natural end has failed those requests.
            if self.interrupted || (self.stopping && kind.is_none()) {
                self.out.counters.cut_off += 1;
            } else {
                self.request_error(&req, kind.unwrap_or(ErrorKind::Io), None);
            }
        }
        let reopen_at_ns = self.reopen_at(c, reopen);
        let conn = &mut self.table.conns[c as usize];
        // The operation that would keep the socket alive in the ring: a pending connect
        // or the armed receive (a send completes by itself).
        // The operations that would keep the socket alive in the ring: a pending
        // connect, the armed receive, and a send the socket cannot take (a target that
        // stopped reading).
        let mut pending = [None; 2];
        match conn.state {
            ConnState::Connecting => pending[0] = Some(Op::Connect),
            _ => {
                pending[0] = conn.recv_armed.then_some(Op::Recv);
                pending[1] = conn.send_armed.then_some(Op::Send);
            }
        }
        let pending = pending.map(|op| {
            op.map(|op| Token {
                conn: c,
                op,
                generation: conn.generation,
            })
        });
        match conn.state {
            ConnState::Closed { .. } | ConnState::Closing { .. } => {}
            ConnState::Connecting => {
                self.connecting -= 1;
                self.closed += 1;
            }
            _ => self.closed += 1,
        }
        conn.generation = next_generation(conn.generation);
        let generation = conn.generation;
        let fd = std::mem::replace(&mut conn.fd, -1);
        conn.state = ConnState::Closed { reopen_at_ns };
        conn.unsent = 0;
        conn.sending = 0;
        conn.head = 0;
        conn.recv_armed = false;
        conn.send_armed = false;
        conn.recv_keep = 0;
        conn.framer.reset();
        conn.at_boundary = true;
        if fd == REGISTERED {
            // Cancel the operation still holding the socket (by its user_data: a hash
            // lookup, where cancelling by file would scan every request in the ring),
            // then drop the table's reference; the slot is free once the close is done.
            conn.state = ConnState::Closing { reopen_at_ns };
            let token = Token {
                conn: c,
                op: Op::Close,
                generation,
            };
            let close = opcode::Close::new(types::Fixed(c))
                .build()
                .user_data(token.encode());
            // Each cancel hard-linked to the next entry, the close last.
            let mut chain: [Option<io_uring::squeue::Entry>; 3] = [None, None, None];
            let mut n = 0;
            for t in pending.into_iter().flatten() {
                chain[n] = Some(
                    opcode::AsyncCancel2::new(types::CancelBuilder::user_data(t.encode()))
                        .build()
                        .flags(io_uring::squeue::Flags::IO_HARDLINK)
                        .user_data(0),
                );
                n += 1;
            }
            chain[n] = Some(close);
            n += 1;
            let entries: [io_uring::squeue::Entry; 3] =
                chain.map(|e| e.unwrap_or_else(|| opcode::Nop::new().build()));
            // SAFETY: none of the entries points into memory.
            match unsafe { self.ring.push_all(&entries[..n]) } {
                Ok(()) => self.ops_in_ring += n as u64,
                Err(e) => panic!("io_uring submit failed: {e}"),
            }
        } else {
            if fd >= 0 {
                socket::close(fd);
            }
            if self.plan.per_request {
                self.mark_ready(c);
            }
        }
    }

    /// The ring has closed connection `c`'s socket: its slot may be reused.
    fn on_close(&mut self, c: u32) {
        let conn = &mut self.table.conns[c as usize];
        if let ConnState::Closing { reopen_at_ns } = conn.state {
            conn.state = ConnState::Closed { reopen_at_ns };
            if self.plan.per_request {
                self.mark_ready(c);
            }
        }
    }

    /// Closes every connection and waits until the kernel has finished every operation
    /// that points into the worker's buffers, as long as they keep finishing (a second
    /// without progress ends the wait: closing a few hundred thousand sockets on a
    /// shared core takes longer than any fixed bound). If some never finish, the
    /// buffers are leaked rather than freed under the kernel's feet.
    fn quiesce(&mut self) {
        self.close_all();
        let quiet = std::time::Duration::from_secs(1);
        let mut deadline = std::time::Instant::now() + quiet;
        while self.ops_in_ring > 0 && std::time::Instant::now() < deadline {
            if self.ring.submit_and_wait_ns(10_000_000).is_err() {
                break;
            }
            // Only a completion without MORE ends an operation (multishot receives).
            let n = self
                .ring
                .uring
                .completion()
                .filter(|c| !io_uring::cqueue::more(c.flags()))
                .count() as u64;
            self.ops_in_ring = self.ops_in_ring.saturating_sub(n);
            if n > 0 {
                deadline = std::time::Instant::now() + quiet;
            }
        }
        if self.ops_in_ring > 0 {
            eprintln!(
                "blaster: worker {}: {} io_uring operations did not finish; leaking their buffers",
                self.plan.index, self.ops_in_ring
            );
            std::mem::forget(self.buf_ring.take());
            std::mem::forget(std::mem::take(&mut self.recv_buf));
            std::mem::forget(std::mem::take(&mut self.send_buf));
            Box::leak(std::mem::take(&mut self.addrs));
        }
    }

    fn close_all(&mut self) {
        for c in 0..self.table.conns.len() as u32 {
            if self.table.conns[c as usize].fd != -1 {
                self.close_conn(c, None, Reopen::Now);
            }
        }
    }

    /// Opens every connection, at most `connects_in_flight` at a time and no
    /// faster than `--connect-rate`, and waits for the outcomes (each connect bounded
    /// by the timeout). With `--connect-per-request` nothing opens here.
    fn connect_all(&mut self, stop: &AtomicBool) -> Ready {
        let n = self.table.conns.len();
        if self.plan.per_request {
            for c in 0..n as u32 {
                self.table.conns[c as usize].state = ConnState::Closed {
                    reopen_at_ns: Nanos::MAX,
                };
                self.mark_ready(c);
            }
            return self.ready(None, 0);
        }
        let started = self.clock.now_ns();
        let mut established_at = started;
        let mut next = 0;
        let mut next_scan = started;
        loop {
            let now = self.clock.now_ns();
            if self.plan.connect_gap_ns > 0 {
                while next < n
                    && self.connecting < self.plan.connects_in_flight
                    && now >= self.next_connect_ns
                {
                    self.open(next as u32);
                    next += 1;
                }
            } else {
                // Unpaced: sockets for consecutive connections, one file-table update
                // per batch.
                while next < n && self.connecting < self.plan.connects_in_flight {
                    let first = next as u32;
                    let len = (n - next)
                        .min(self.plan.connects_in_flight - self.connecting)
                        .min(REGISTER_BATCH);
                    let mut fds = [-1; REGISTER_BATCH];
                    for (i, fd) in fds.iter_mut().take(len).enumerate() {
                        *fd = self.new_socket(first + i as u32);
                    }
                    self.launch(first, &fds[..len]);
                    next += len;
                }
            }
            // A connect still pending after the timeout has failed (ETIMEDOUT); checked
            // every 10 ms, not every wake-up (a scan is O(connections)).
            let scan = now >= next_scan;
            if scan {
                next_scan = now + 10_000_000;
            }
            for c in (0..n as u32).filter(|_| scan) {
                let conn = &self.table.conns[c as usize];
                if conn.state == ConnState::Connecting
                    && self.clock.ns(conn.connect_started) + self.plan.timeout_ns <= now
                {
                    self.connect_failed(c, libc::ETIMEDOUT);
                }
            }
            if (next == n && self.connecting == 0) || stop.load(Ordering::Relaxed) {
                break;
            }
            let wait = if next < n && self.connecting < self.plan.connects_in_flight {
                self.next_connect_ns
                    .saturating_sub(now)
                    .clamp(1_000, WAIT_NS_MAX)
            } else {
                WAIT_NS_MAX
            };
            if let Err(e) = self.ring.submit_and_wait_ns(wait) {
                return self.ready(Some(format!("io_uring wait failed: {e}")), 0);
            }
            let before = self.out.counters.connections_opened;
            self.reap();
            if self.out.counters.connections_opened > before {
                established_at = self.clock.now_ns();
            }
        }
        for c in 0..n as u32 {
            if self.table.conns[c as usize].state == ConnState::Connecting {
                self.close_conn(c, None, Reopen::Now); // Ctrl-C during the connect phase
            }
        }
        self.ready(None, established_at - started)
    }

    fn ready(&self, fatal: Option<String>, establish_ns: u64) -> Ready {
        let established = self
            .table
            .conns
            .iter()
            .filter(|c| c.state == ConnState::Ready)
            .count();
        Ready {
            worker: self.plan.index,
            established,
            failed: self.plan.connections - established,
            first_errno: self.first_errno,
            establish_ns,
            fatal,
            features: self.ring.features.clone(),
        }
    }

    // ---- ring operations ------------------------------------------------------------

    #[inline]
    fn push(&mut self, entry: &io_uring::squeue::Entry) {
        // SAFETY: every entry built in this file points into buffers owned by the
        // worker (`recv_buf`, `send_buf`, `addr`), allocated once and never moved or
        // freed while the worker runs; stale completions are filtered by generation.
        if let Err(e) = unsafe { self.ring.push(entry) } {
            // A submit error other than a transient one means the ring is unusable.
            panic!("io_uring submit failed: {e}");
        }
        self.ops_in_ring += 1;
    }

    fn arm_recv(&mut self, c: u32) {
        let len = self.plan.recv_buffer_bytes;
        let conn = &mut self.table.conns[c as usize];
        let keep = conn.recv_keep;
        conn.recv_armed = true;
        let token = Token {
            conn: c,
            op: Op::Recv,
            generation: conn.generation,
        };
        let entry = if self.multishot
            && let Some(br) = &self.buf_ring
        {
            // One multishot receive per connection: it stays armed across responses.
            let bgid = br.bgid;
            on_socket!(self, c, conn.fd, |t| opcode::RecvMulti::new(t, bgid)
                .build())
            .user_data(token.encode())
        } else {
            let start = c as usize * len + keep;
            // `start..start + len - keep` lies inside this connection's region of
            // `recv_buf`, which outlives the operation.
            let ptr = self.recv_buf[start..].as_mut_ptr();
            let n = (len - keep) as u32;
            on_socket!(self, c, conn.fd, |t| opcode::Recv::new(t, ptr, n).build())
                .user_data(token.encode())
        };
        self.push(&entry);
    }

    fn push_send(&mut self, c: u32) {
        let conn = &self.table.conns[c as usize];
        let token = Token {
            conn: c,
            op: Op::Send,
            generation: conn.generation,
        };
        let rest = if self.render {
            let base = c as usize * self.staging_len;
            &self.staging[base + conn.send_done..base + conn.send_len]
        } else {
            &self.send_buf[conn.send_done..conn.send_len]
        };
        let (ptr, n) = (rest.as_ptr(), rest.len() as u32);
        let entry = on_socket!(self, c, conn.fd, |t| opcode::Send::new(t, ptr, n).build())
            .user_data(token.encode());
        self.table.conns[c as usize].send_armed = true;
        self.push(&entry);
    }

    /// Drains up to `CQE_BATCH_MAX` completions into the fixed array, then handles them.
    fn reap(&mut self) -> usize {
        let mut n = 0;
        let mut finished = 0;
        for cqe in self.ring.uring.completion() {
            self.cqes[n] = (cqe.user_data(), cqe.result(), cqe.flags());
            // A multishot operation ends with its last completion (no MORE flag).
            finished += u64::from(!io_uring::cqueue::more(cqe.flags()));
            n += 1;
            if n == self.cqes.len() {
                break;
            }
        }
        self.ops_in_ring -= finished;
        if n == 0 {
            return 0; // no clock read on an empty poll (the spinning path)
        }
        let now_t = self.clock.ticks();
        for i in 0..n {
            let (data, res, flags) = self.cqes[i];
            let Some(token) = Token::decode(data) else {
                continue;
            };
            let conn = &self.table.conns[token.conn as usize];
            if conn.generation != token.generation {
                // A completion for a connection since closed; its buffer goes back.
                if let (Some(bid), Some(br)) =
                    (io_uring::cqueue::buffer_select(flags), &mut self.buf_ring)
                {
                    br.recycle(bid);
                }
                continue;
            }
            match token.op {
                Op::Connect => self.on_connect(token.conn, res),
                Op::Send => self.on_send(token.conn, res),
                Op::Recv => self.on_recv(token.conn, res, flags, now_t),
                Op::Close => self.on_close(token.conn),
            }
        }
        if n > 0
            && let Some(br) = &self.buf_ring
        {
            br.publish();
        }
        n
    }

    fn on_send(&mut self, c: u32, res: i32) {
        self.table.conns[c as usize].send_armed = false;
        if self.table.conns[c as usize].state == ConnState::Expiring {
            return; // its requests time out; nothing more goes out on it
        }
        if res < 0 {
            self.out.counters.closed_by_target += u64::from(-res == libc::ECONNRESET);
            self.close_conn(c, Some(socket::io_error_kind(-res)), Reopen::Backoff);
            return;
        }
        self.out.counters.bytes_sent += res as u64;
        let conn = &mut self.table.conns[c as usize];
        conn.send_done += res as usize;
        if conn.send_done < conn.send_len {
            self.push_send(c); // partial send: re-arm from the offset
            return;
        }
        conn.sending = 0;
        if conn.unsent > 0 {
            self.mark_flush(c);
        }
    }

    fn on_recv(&mut self, c: u32, res: i32, flags: u32, now_t: Ticks) {
        let bid = io_uring::cqueue::buffer_select(flags);
        if !io_uring::cqueue::more(flags) {
            self.table.conns[c as usize].recv_armed = false;
        }
        let expiring = self.table.conns[c as usize].state == ConnState::Expiring;
        if res <= 0 || expiring {
            if let (Some(bid), Some(br)) = (bid, &mut self.buf_ring) {
                br.recycle(bid);
            }
            if expiring {
                return; // unmatched bytes; the scan closes it once its requests expired
            }
            if res == -libc::EINVAL && bid.is_none() && self.multishot {
                // A kernel with buffer rings but without multishot receive (5.19):
                // fall back to single-shot receives for the rest of the run.
                self.multishot = false;
                self.arm_recv(c);
                return;
            }
            if res == -libc::ENOBUFS {
                // Every provided buffer was in use: receive again once some are back.
                if !self.table.conns[c as usize].recv_armed {
                    self.arm_recv(c);
                }
                return;
            }
            let kind = if res == 0 {
                // A body that runs until the connection closes ends here.
                if self.table.conns[c as usize].framer.eof() && self.complete_one(c, now_t) {
                    self.count_status(c);
                }
                ErrorKind::ClosedByPeer
            } else {
                socket::io_error_kind(-res)
            };
            self.out.counters.closed_by_target += u64::from(res == 0 || res == -libc::ECONNRESET);
            self.close_conn(c, Some(kind), Reopen::Backoff);
            return;
        }
        self.out.counters.bytes_received += res as u64;
        let total = res as usize;
        let open = match bid {
            // Single-shot receive: the bytes already sit after the kept ones.
            None => self.parse_received(c, total, now_t),
            Some(bid) => {
                // Multishot: frame straight out of the provided buffer; only an
                // unfinished tail is copied into the connection's region, and bytes
                // that follow a kept tail are appended there.
                let br = self.buf_ring.take().expect("buffer id implies a ring");
                let data = br.buf(bid, total);
                let open = if self.table.conns[c as usize].recv_keep == 0 {
                    self.parse_direct(c, data, now_t)
                } else {
                    let len = self.plan.recv_buffer_bytes;
                    let base = c as usize * len;
                    let mut off = 0;
                    let mut open = true;
                    while open && off < total {
                        let keep = self.table.conns[c as usize].recv_keep;
                        let n = (len - keep).min(total - off);
                        self.recv_buf[base + keep..base + keep + n]
                            .copy_from_slice(&data[off..off + n]);
                        off += n;
                        open = self.parse_received(c, n, now_t);
                    }
                    open
                };
                let mut br = br;
                br.recycle(bid);
                self.buf_ring = Some(br);
                open
            }
        };
        if !open {
            return;
        }
        if !self.table.conns[c as usize].recv_armed {
            self.arm_recv(c);
        }
        if self.table.has_free_slot(c) {
            self.mark_ready(c);
        }
    }

    /// Frames `data` (a provided buffer, nothing kept before it); an unfinished tail
    /// moves into the connection's region. Returns false when the connection closed.
    fn parse_direct(&mut self, c: u32, data: &[u8], now_t: Ticks) -> bool {
        let Some(pos) = self.parse(c, data, now_t) else {
            return false;
        };
        let tail = &data[pos..];
        let len = self.plan.recv_buffer_bytes;
        if tail.len() >= len {
            self.protocol_error(c, "response larger than the receive buffer", tail);
            return false;
        }
        let base = c as usize * len;
        self.recv_buf[base..base + tail.len()].copy_from_slice(tail);
        self.table.conns[c as usize].recv_keep = tail.len();
        true
    }

    /// Frames the `n` bytes just placed after the kept ones in connection `c`'s region,
    /// completing requests; keeps an unfinished tail for the next bytes. Returns false
    /// when the connection was closed (protocol error, `Connection: close`).
    fn parse_received(&mut self, c: u32, n: usize, now_t: Ticks) -> bool {
        let len = self.plan.recv_buffer_bytes;
        let base = c as usize * len;
        let end = self.table.conns[c as usize].recv_keep + n;
        // Lent out while framing, so the bytes and the worker can be borrowed at once.
        let buf = std::mem::take(&mut self.recv_buf);
        let parsed = self.parse(c, &buf[base..base + end], now_t);
        self.recv_buf = buf;
        let Some(pos) = parsed else {
            return false;
        };
        let keep = end - pos;
        if keep == len {
            let buf = std::mem::take(&mut self.recv_buf);
            self.protocol_error(
                c,
                "response larger than the receive buffer",
                &buf[base + pos..base + end],
            );
            self.recv_buf = buf;
            return false;
        }
        if keep > 0 && pos > 0 {
            self.recv_buf.copy_within(base + pos..base + end, base);
        }
        self.table.conns[c as usize].recv_keep = keep;
        true
    }

    /// Frames the responses at the start of `input`, completing requests. Returns how
    /// many bytes they took (the rest is an unfinished response), or `None` when the
    /// connection was closed (protocol error, `Connection: close`, connection per
    /// request done).
    fn parse(&mut self, c: u32, input: &[u8], now_t: Ticks) -> Option<usize> {
        let end = input.len();
        let mut pos = 0;
        while pos < end {
            if self.mixed_framing && self.table.conns[c as usize].at_boundary {
                self.select_framer(c);
            }
            let parsed = self.table.conns[c as usize].framer.feed(&input[pos..]);
            self.table.conns[c as usize].at_boundary = matches!(parsed, Parsed::Complete { .. });
            match parsed {
                Parsed::Complete { consumed } => {
                    if !self.complete_one(c, now_t) {
                        // A response nobody asked for: the stream is out of step.
                        let why = "response with no request in flight";
                        self.protocol_error(c, why, &input[pos..]);
                        return None;
                    }
                    pos += consumed;
                    self.count_status(c);
                    if self.table.conns[c as usize].framer.close_after() {
                        // `Connection: close`: requests pipelined behind this response
                        // will not be answered on this connection. An orderly close:
                        // reopen at once.
                        self.close_conn(c, Some(ErrorKind::ClosedByPeer), Reopen::Now);
                        return None;
                    }
                    if self.plan.per_request && self.table.conns[c as usize].inflight == 0 {
                        self.close_conn(c, None, Reopen::Now);
                        return None;
                    }
                }
                Parsed::Incomplete { consumed } => {
                    pos += consumed;
                    break;
                }
                Parsed::Invalid { reason } => {
                    self.protocol_error(c, reason, &input[pos..]);
                    return None;
                }
            }
        }
        Some(pos)
    }

    /// Counts the status of the response that just completed: HTTP status classes, and
    /// RESP error replies.
    #[inline]
    fn count_status(&mut self, c: u32) {
        let conn = &self.table.conns[c as usize];
        let Some(status) = conn.framer.status() else {
            return;
        };
        let framing = self.plan.requests.entries[conn.framer_entry as usize].framing;
        match framing {
            Framing::Http1 => {
                let class = (status / 100) as usize;
                self.out.counters.http_status[if (1..=5).contains(&class) { class } else { 0 }] +=
                    1;
            }
            Framing::Resp if status != 0 => self.out.counters.error_replies += 1,
            _ => {}
        }
    }

    /// Points the connection's framer at the entry of its oldest request in flight
    /// (mixes whose entries use different framers).
    fn select_framer(&mut self, c: u32) {
        let Some(front) = self.table.front(c) else {
            return;
        };
        let conn = &mut self.table.conns[c as usize];
        if conn.framer_entry != front.entry {
            conn.framer = self.entry_framers[front.entry as usize].clone();
            conn.framer_entry = front.entry;
        }
    }

    /// Counts a failed request of `kind` (per mix entry too); `latency_ns` is recorded
    /// when given (timeouts are recorded at the timeout).
    #[inline]
    fn request_error(&mut self, req: &Req, kind: ErrorKind, latency_ns: Option<u64>) {
        self.out.counters.error(kind);
        if let Some(e) = self.entries.get_mut(req.entry as usize) {
            e.errors += 1;
            if let Some(l) = latency_ns {
                e.latency.saturating_record(l);
            }
        }
        if let Some(l) = latency_ns {
            self.out.hist.latency.saturating_record(l);
        }
    }

    /// A response that cannot be parsed: the requests in flight are protocol errors and
    /// the connection is reopened; with nothing in flight the bytes were unsolicited.
    /// The first such event keeps its reason and first bytes (escaped) for the report.
    fn protocol_error(&mut self, c: u32, reason: &str, bytes: &[u8]) {
        if self.first_bad.is_none() {
            self.first_bad = Some(format!(
                "{reason}: \"{}\"",
                crate::proto::escape_prefix(bytes, 64)
            ));
        }
        if self.table.conns[c as usize].inflight == 0 {
            self.out.counters.error(ErrorKind::Unsolicited);
        }
        self.close_conn(c, Some(ErrorKind::Protocol), Reopen::Now);
    }

    /// Records the oldest in-flight request of `c` as answered at `done`.
    #[inline]
    fn complete_one(&mut self, c: u32, done: Ticks) -> bool {
        let conn = &self.table.conns[c as usize];
        if conn.inflight == conn.unsent {
            // Nothing in flight has been sent: this response answers no request.
            return false;
        }
        let Some(req) = self.table.pop_front(c) else {
            return false;
        };
        self.inflight -= 1;
        self.out.counters.completed += 1;
        self.completed_total += 1;
        self.last_done = done;
        let done_ns = self.clock.ns(done);
        let sent_ns = self.clock.ns(req.sent);
        let latency = done_ns.saturating_sub(req.intended_ns);
        self.out.hist.latency.saturating_record(latency);
        self.out
            .hist
            .service
            .saturating_record(done_ns.saturating_sub(sent_ns));
        if let Some(e) = self.entries.get_mut(req.entry as usize) {
            e.completed += 1;
            e.latency.saturating_record(latency);
        }
        if self.plan.closed_loop && !self.stopping {
            // Closed loop: the next request follows this response, once it is known
            // that the connection stays open (`Connection: close`, end of stream).
            let queued = self.reissue_q.push(c);
            debug_assert!(queued, "one request in flight per connection");
        }
        true
    }

    /// Closed loop: issues the next request on each connection whose response just
    /// completed and which is still usable.
    fn reissue(&mut self) {
        let now_t = self.clock.ticks();
        while let Some(c) = self.reissue_q.pop() {
            if self.table.conns[c as usize].state == ConnState::Ready && !self.stopping {
                self.issue(c, now_t);
            }
        }
    }

    /// Closed loop: a request on connection `c`, intended now (there is no timetable,
    /// so the latency is the service time and hides any queueing).
    fn issue(&mut self, c: u32, now_t: Ticks) {
        let seq = self.closed_issued * self.plan.workers as u64 + self.plan.index as u64;
        self.closed_issued += 1;
        let req = Req {
            intended_ns: self.clock.ns(now_t),
            dispatched: now_t,
            sent: 0,
            seq,
            entry: self.plan.requests.choose(&mut self.rng),
        };
        self.out.counters.dispatched += 1;
        self.assign(c, req);
    }

    // ---- scheduling -------------------------------------------------------------------

    #[inline]
    fn mark_ready(&mut self, c: u32) {
        let conn = &mut self.table.conns[c as usize];
        if !conn.in_ready_queue {
            conn.in_ready_queue = true;
            let queued = self.ready_q.push(c);
            debug_assert!(queued, "each connection is queued at most once");
        }
    }

    #[inline]
    fn mark_flush(&mut self, c: u32) {
        let conn = &mut self.table.conns[c as usize];
        if !conn.in_flush_queue {
            conn.in_flush_queue = true;
            let queued = self.flush_q.push(c);
            debug_assert!(queued, "each connection is queued at most once");
        }
    }

    /// A connection with a free pipeline slot, round robin; `None` if all are busy.
    #[inline]
    fn free_conn(&mut self) -> Option<u32> {
        while let Some(c) = self.ready_q.pop() {
            self.table.conns[c as usize].in_ready_queue = false;
            if self.table.has_free_slot(c) || self.idle_closed(c) {
                return Some(c);
            }
        }
        None
    }

    /// Connection per request: a closed slot with nothing queued takes the next request.
    #[inline]
    fn idle_closed(&self, c: u32) -> bool {
        let conn = &self.table.conns[c as usize];
        self.plan.per_request
            && conn.inflight == 0
            && matches!(conn.state, ConnState::Closed { .. })
    }

    #[inline]
    fn assign(&mut self, c: u32, req: Req) {
        let opening = self.idle_closed(c);
        self.table.push_req(c, req);
        self.inflight += 1;
        self.activate(c);
        if opening {
            // Its latency still counts from the intended instant, connect included.
            self.open(c);
            return;
        }
        if self.table.has_free_slot(c) {
            self.mark_ready(c);
        }
        if self.table.conns[c as usize].sending == 0 {
            self.mark_flush(c);
        }
    }

    /// Dispatches every request due by `now`: onto a free connection, or into the
    /// backlog behind older waiting requests.
    #[inline]
    fn dispatch_due(&mut self, now_t: Ticks, now_ns: Nanos) -> u64 {
        let mut n = 0;
        while self.next_k < self.total_k {
            let intended = self.next_due;
            if intended > now_ns {
                break;
            }
            let req = Req {
                intended_ns: intended,
                dispatched: now_t,
                sent: 0,
                seq: self.schedule.global_seq(self.next_k),
                entry: self.plan.requests.choose(&mut self.rng),
            };
            self.next_k += 1;
            self.next_due = self.schedule.due_ns(self.next_k);
            if self.next_due >= self.plan.duration_ns {
                self.total_k = self.next_k; // Poisson: the timetable's end, found on the way
            }
            n += 1;
            self.out.counters.dispatched += 1;
            self.out
                .hist
                .dispatch_lag
                .saturating_record(now_ns - intended);
            self.pacing.record(now_ns, &mut self.out.hist.pacing);
            if self.backlog.is_empty()
                && let Some(c) = self.free_conn()
            {
                self.assign(c, req);
                continue;
            }
            if !self.backlog.push(req) {
                self.request_error(&req, ErrorKind::BacklogOverflow, Some(self.plan.timeout_ns));
            }
        }
        self.backlog_peak = self.backlog_peak.max(self.backlog.len() as u64);
        n
    }

    /// Moves waiting requests onto connections that have a free slot again.
    #[inline]
    fn serve_backlog(&mut self) {
        while !self.backlog.is_empty() {
            let Some(c) = self.free_conn() else { break };
            let req = self.backlog.pop().expect("not empty");
            self.assign(c, req);
        }
    }

    /// Queues one send per connection covering all its unsent requests (rendering
    /// them first when requests are templated or mixed).
    fn flush_sends(&mut self) {
        if self.flush_q.is_empty() {
            return;
        }
        // The send instant: read here, after the completions of this iteration were
        // handled, so their cost is not charged to the target; the submit follows.
        let t = self.clock.ticks();
        let t_ns = self.clock.ns(t);
        let payload_len = self.plan.payload.len();
        while let Some(c) = self.flush_q.pop() {
            let conn = &mut self.table.conns[c as usize];
            conn.in_flush_queue = false;
            if conn.state != ConnState::Ready || conn.sending > 0 || conn.unsent == 0 {
                continue;
            }
            let k = conn.unsent;
            let first = conn.inflight - k;
            conn.sending = k;
            conn.send_done = 0;
            conn.unsent = 0;
            let base = c as usize * self.staging_len;
            let mut len = 0;
            for nth in first..first + k {
                let i = self.table.slot_index(c, nth);
                let req = &mut self.table.slots[i];
                req.sent = t;
                let wait = t_ns.saturating_sub(self.clock.ns(req.dispatched));
                self.out.hist.connection_wait.saturating_record(wait);
                if self.render {
                    let ctx = Ctx {
                        seq: req.seq,
                        conn: (self.plan.conn_offset + c as usize) as u64,
                        worker: self.plan.index as u64,
                        time_ns: self.unix_at_start_ns + req.intended_ns,
                    };
                    let template = &self.plan.requests.entries[req.entry as usize].template;
                    len += template.render(&ctx, &mut self.rng, &mut self.staging[base + len..]);
                } else {
                    len += payload_len;
                }
            }
            self.table.conns[c as usize].send_len = len;
            self.out.counters.sent += k as u64;
            self.push_send(c);
        }
    }

    /// Times out the requests of connection `c` whose deadline has passed (recorded at
    /// the timeout); whether any did.
    fn expire_front(&mut self, c: u32, now_ns: Nanos) -> bool {
        let timeout = self.plan.timeout_ns;
        let mut expired = false;
        while let Some(r) = self.table.front(c) {
            if r.intended_ns + timeout > now_ns {
                break;
            }
            self.table.pop_front(c);
            self.inflight -= 1;
            let conn = &mut self.table.conns[c as usize];
            conn.unsent = conn.unsent.min(conn.inflight);
            self.request_error(&r, ErrorKind::Timeout, Some(timeout));
            expired = true;
        }
        expired
    }

    /// Timeouts (in flight and in the backlog) and reconnects; run about once a ms.
    fn scan(&mut self, now_ns: Nanos) {
        let timeout = self.plan.timeout_ns;
        while let Some(req) = self.backlog.front() {
            if req.intended_ns + timeout > now_ns {
                break;
            }
            self.backlog.pop();
            self.request_error(&req, ErrorKind::Timeout, Some(timeout));
        }
        // With every connection open and none connecting (a steady hold with heartbeats,
        // say), only the connections with requests in flight need a look: O(active),
        // not O(connections). Closed or connecting ones need the full pass.
        if self.closed > 0 || self.connecting > 0 {
            for c in 0..self.table.conns.len() as u32 {
                self.scan_conn(c, now_ns);
            }
        } else {
            for _ in 0..self.active_q.len() {
                let Some(c) = self.active_q.pop() else { break };
                self.table.conns[c as usize].in_active = false;
                self.scan_conn(c, now_ns);
            }
        }
    }

    /// Timeouts and reopening for connection `c` (see [`Worker::scan`]).
    fn scan_conn(&mut self, c: u32, now_ns: Nanos) {
        let timeout = self.plan.timeout_ns;
        let state = self.table.conns[c as usize].state;
        match state {
            ConnState::Ready | ConnState::Expiring => {
                let expired = self.expire_front(c, now_ns);
                let conn = &mut self.table.conns[c as usize];
                if expired && conn.state == ConnState::Ready {
                    conn.state = ConnState::Expiring;
                    // Requests not yet on the wire stay in the FIFO and time out
                    // at their own deadlines like the rest.
                    conn.unsent = (conn.unsent + conn.sending).min(conn.inflight);
                    conn.sending = 0;
                }
                if conn.state == ConnState::Expiring && conn.inflight == 0 {
                    self.close_conn(c, None, Reopen::Now);
                }
            }
            // Connection per request: a request waiting for its connection (deferred
            // by --connect-rate, or still connecting) times out like any other,
            // recorded at the timeout; a connect left with nothing to carry is
            // abandoned.
            ConnState::Closed { .. } | ConnState::Connecting
                if self.expire_front(c, now_ns) && self.table.conns[c as usize].inflight == 0 =>
            {
                if self.table.conns[c as usize].state == ConnState::Connecting {
                    self.close_conn(c, None, Reopen::Now);
                } else {
                    self.mark_ready(c);
                }
            }
            ConnState::Closed { reopen_at_ns } if !self.stopping && reopen_at_ns <= now_ns => {
                self.open(c);
            }
            ConnState::Connecting
                if self.clock.ns(self.table.conns[c as usize].connect_started) + timeout
                    <= now_ns =>
            {
                self.connect_failed(c, libc::ETIMEDOUT);
            }
            _ => {}
        }
        let conn = &self.table.conns[c as usize];
        if conn.inflight > 0 && matches!(conn.state, ConnState::Ready | ConnState::Expiring) {
            self.activate(c);
        }
    }

    /// Puts connection `c` on the list the timeout scan looks at.
    #[inline]
    fn activate(&mut self, c: u32) {
        let conn = &mut self.table.conns[c as usize];
        if !conn.in_active {
            conn.in_active = true;
            let queued = self.active_q.push(c);
            debug_assert!(queued, "each connection is queued at most once");
        }
    }

    // ---- the loop -------------------------------------------------------------------

    fn run(&mut self, stop: &AtomicBool) {
        wait_for_start(&self.clock, self.plan.spin_ns);
        self.running = true;
        if self.plan.closed_loop {
            let now_t = self.clock.ticks();
            for c in 0..self.table.conns.len() as u32 {
                if self.table.conns[c as usize].state == ConnState::Ready {
                    self.issue(c, now_t);
                }
            }
        }
        let timeout = self.plan.timeout_ns;
        let mut pace = Pacer::start(self.plan.interval_ns, timeout);
        loop {
            let now_t = self.clock.ticks();
            let now = self.clock.ns(now_t);
            pace.begin(now);
            if !self.stopping {
                if stop.load(Ordering::Relaxed) {
                    // Ctrl-C: stop now; what waits for a connection was never sent.
                    self.stopping = true;
                    self.interrupted = true;
                    self.stopped_ns = now.min(self.plan.duration_ns);
                    pace.stop(now, timeout.min(DRAIN_NS_MAX));
                    while self.backlog.pop().is_some() {
                        self.out.counters.cut_off += 1;
                    }
                } else if self.next_k >= self.total_k && now >= self.plan.duration_ns {
                    // The schedule's natural end: every request due before it is still
                    // served, until it completes or times out, so a target that stalls
                    // at the end still shows in the latency.
                    self.stopping = true;
                    self.stopped_ns = self.plan.duration_ns;
                    pace.stop(now, timeout + pace.scan_every);
                }
            }
            let mut work = 0;
            if !self.stopping {
                work += self.dispatch_due(now_t, now);
            }
            work += self.reap() as u64;
            self.serve_backlog();
            if !self.reissue_q.is_empty() {
                self.reissue();
            }
            if !self.deferred_q.is_empty() {
                self.open_deferred(now);
            }
            if pace.scan_due(now) {
                self.scan(now);
            }
            // After the stop, the drain folds into the last interval of the schedule.
            // The interval that reaches the schedule's end stays open until the stop
            // (a late worker would otherwise start one that lies after the end).
            while !self.stopping
                && pace.interval_end() < self.plan.duration_ns
                && let Some(i) = pace.interval_ended(now)
            {
                self.out.send(i, None, &mut pace);
            }
            self.flush_sends();
            if self.stopping
                && ((self.inflight == 0 && self.backlog.is_empty()) || pace.drain_over(now))
            {
                break;
            }
            // Wait: sleep on the ring until `--spin` before the next due send (or another
            // deadline), then spin on the TSC without entering the kernel needlessly.
            let timers = self.inflight > 0 || self.closed > 0 || !self.backlog.is_empty();
            let next_due = (self.next_k < self.total_k).then_some(self.next_due);
            // A connection waiting for its turn under --connect-rate wakes the loop too.
            let next_due = match (next_due, self.deferred_q.is_empty()) {
                (Some(d), false) => Some(d.min(self.next_connect_ns)),
                (None, false) => Some(self.next_connect_ns),
                (d, true) => d,
            };
            let wake = pace.wake(self.stopping, timers, next_due, self.plan.spin_ns);
            let pending_cqes = !self.ring.uring.completion().is_empty();
            let now2 = if work == 0 && !pending_cqes && wake.at > now + 1_000 {
                self.clock.now_ns() // only a sleep needs a fresh reading
            } else {
                now
            };
            if work == 0 && !pending_cqes && wake.at > now2 + 1_000 {
                pace.sleep(now2);
                let _ = self
                    .ring
                    .submit_and_wait_ns((wake.at - now2).min(WAIT_NS_MAX));
            } else {
                if self.ring.needs_enter() || (work == 0 && !wake.due_soon) {
                    let _ = self.ring.submit();
                }
                if work == 0 && !pending_cqes {
                    // The whole iteration did nothing but look: count it as spinning.
                    pace.idle(now);
                    std::hint::spin_loop();
                }
            }
        }
        // Whatever is still waiting after the drain is cut off, not an error.
        while self.backlog.pop().is_some() {
            self.out.counters.cut_off += 1;
        }
        for c in 0..self.table.conns.len() as u32 {
            while self.table.pop_front(c).is_some() {
                self.inflight -= 1;
                self.out.counters.cut_off += 1;
            }
        }
        let end = self.clock.now_ns();
        let (cpu_ns, spin_ns, busy_at_stop) = pace.totals(self.stopped_ns);
        self.close_all();
        let totals = WorkerTotals {
            core: self.plan.core,
            cpu_ns,
            spin_ns,
            wall_ns: end,
            stopped_ns: self.stopped_ns,
            last_done_ns: self.clock.ns(self.last_done),
            busy_at_stop,
            completed: self.completed_total,
            backlog_peak: self.backlog_peak,
            ring_features: self.ring.features.clone(),
            first_protocol_error: self.first_bad.take(),
            entries: std::mem::take(&mut self.entries),
        };
        let interval = pace.interval();
        self.out.send(interval, Some(totals), &mut pace);
    }
}

/// Time-rescaled gaps between actual dispatch instants: with Poisson arrivals the
/// worker's own process has intensity rate(t) / workers, so Λ(t_k)/W - Λ(t_(k-1))/W of
/// consecutive dispatches is Exp(1) when pacing is exact. Recorded x 1e6 in a histogram;
/// the report tests it against the exponential (Kolmogorov-Smirnov).
struct PacingFit {
    shape: Option<RateShape>,
    workers: f64,
    prev: Option<f64>,
}

impl PacingFit {
    fn new(plan: &WorkerPlan) -> PacingFit {
        PacingFit {
            shape: plan
                .shape
                .clone()
                .filter(|_| plan.arrivals == ArrivalKind::Poisson),
            workers: plan.workers as f64,
            prev: None,
        }
    }

    #[inline]
    fn record(&mut self, now_ns: Nanos, h: &mut hdrhistogram::Histogram<u64>) {
        let Some(shape) = &self.shape else {
            return;
        };
        let lam = shape.cumulative(now_ns as f64) / self.workers;
        if let Some(prev) = self.prev.replace(lam) {
            h.saturating_record(((lam - prev).max(0.0) * GAP_SCALE) as u64);
        }
    }
}

/// Fixed-point scale of the time-rescaled gaps in [`Histograms::pacing`].
pub const GAP_SCALE: f64 = 1e6;

/// A worker's timetable and how many of its requests fall before the end (`u64::MAX`
/// until found on the way, for Poisson arrivals); no timetable (0 requests) for
/// `--hold` without heartbeats and for closed loop.
pub fn timetable(plan: &WorkerPlan) -> (Arrivals, u64) {
    let schedule = match &plan.shape {
        Some(s) => Arrivals::new(plan.arrivals, s, plan.workers, plan.index, plan.seed),
        None => Arrivals::Constant(Constant::new(
            if plan.rate_rps.is_finite() {
                plan.rate_rps.max(1.0)
            } else {
                1.0
            },
            plan.workers,
            plan.index,
        )),
    };
    let total = if plan.rate_rps > 0.0 && !plan.closed_loop {
        match schedule.count_before(plan.duration_ns) {
            Some(n) => n,
            None if schedule.due_ns(0) >= plan.duration_ns => 0,
            None => u64::MAX,
        }
    } else {
        0
    };
    (schedule, total)
}

/// Sleeps, then spins, until the schedule's start instant.
pub fn wait_for_start(clock: &Clock, spin_ns: u64) {
    let until = clock.until_start_ns();
    if until > spin_ns {
        std::thread::sleep(std::time::Duration::from_nanos(until - spin_ns));
    }
    while clock.until_start_ns() > 0 {
        std::hint::spin_loop();
    }
}

/// CPU time (user + system) of the calling thread, ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
