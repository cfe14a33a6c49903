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
//!
//! The worker is split by job, one file each; every file adds methods to [`Worker`]:
//! - [`lifecycle`]: opening, closing and reopening connections;
//! - [`connect`]: the connect phase before the schedule starts;
//! - [`io`]: building entries, pushing them into the ring, reaping completions, sends;
//! - [`recv`]: receives, framing and completing requests;
//! - [`dispatch`]: due requests onto connections, the backlog, the closed loop;
//! - [`expiry`]: the timeout scan and reopening;
//! - [`run`]: the loop;
//! - [`workload`]: what the connections carry (the timetable, or a closed loop) and
//!   [`fit`], the Poisson pacing fit.

/// Builds an operation on connection `$c`'s socket: through its file-table slot when
/// the socket lives there (no descriptor, no per-operation fd lookup), else by
/// descriptor.
macro_rules! on_socket {
    ($w:expr, $c:expr, $fd:expr, |$t:ident| $build:expr) => {
        if $fd == $crate::engine::conn_table::REGISTERED {
            let $t = ::io_uring::types::Fixed($c);
            $build
        } else {
            let $t = ::io_uring::types::Fd($fd);
            $build
        }
    };
}

mod connect;
mod dispatch;
mod expiry;
pub mod fit;
mod h2;
mod io;
mod lifecycle;
mod recv;
mod recycle;
mod run;
mod tls;
mod workload;

use super::buf_ring::BufRing;
use super::conn_table::{Backlog, ConnTable, IndexQueue};
use super::driver::{Channels, Outbox, arm_fault_hook, drive};
use super::iobuf::IoBuf;
use super::loop_core::LoopCore;
use super::recorder::{EntryTotals, Histograms, ReplyTally, Snapshot, TargetTotals};
use super::ring::Ring;
use super::socket;
use super::stamps;
use super::worker_plan::WorkerPlan;
use crate::clock::{Clock, Nanos, Ticks};
use crate::limits::{
    CQE_BATCH_MAX, TLS_RECORD_OVERHEAD_BYTES, TLS_RECV_BUFFER_BYTES, TLS_SEND_BUFFER_BYTES_MIN,
};
use crate::ports::Placement;
use crate::proto::AnyFramer;
use crossbeam_channel::{Receiver, Sender};
use socket2::SockAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use workload::Workload;

/// Whether responses are timed by the kernel's receive timestamps, and a closed loop's
/// largest wake batch (1: none). Stamps where the loop may sleep through responses:
/// paced requests on persistent plaintext connections with multishot receives
/// (`multishot`; a closed loop, a connect per request or a TLS handshake follow each
/// completion at once; TLS receives go into the connection's own region), one request
/// in flight per connection (a receive's stamp is the newest segment it read:
/// pipelined responses read together would all carry the last one's).
///
/// A closed loop with many requests in flight sleeps through a few completions too
/// (the loop's wake-ups, not its sends, were most of its CPU): its responses are then
/// timed by the kernel, a receive that read several at once timing each at the newest
/// segment it read (never before the response arrived, never after the loop reaped it).
fn stamping(
    plan: &WorkerPlan,
    workload: &Workload,
    multishot: bool,
    wake_batch: u32,
) -> (bool, u32) {
    let closed_batch_max = if plan.closed_loop && multishot && plan.tls.is_none() {
        ((plan.connections * plan.pipeline) / CLOSED_INFLIGHT_PER_WAKE)
            .clamp(1, wake_batch as usize) as u32
    } else {
        1
    };
    let stamped = multishot
        && plan.tls.is_none()
        && ((workload.paced_persistent() && plan.pipeline == 1) || closed_batch_max > 1);
    (stamped, closed_batch_max)
}

/// A closed loop sleeps through one completion per this many requests it keeps in
/// flight (128 in flight: 8 a wake).
const CLOSED_INFLIGHT_PER_WAKE: usize = 16;

/// A closed loop's sleep waits for as many completions as arrived in this long at the
/// rate they last arrived, and no longer than this: a response read together with
/// later ones on its connection is timed by the newest, at most this long (plus the
/// loop's busy iteration, as without the batch) after it arrived.
pub(super) const CLOSED_WAKE_WAIT_NS: u64 = 100_000;

/// How often a closed loop's batch is set again from the rate completions arrive.
pub(super) const CLOSED_BATCH_EVERY_NS: u64 = 10_000_000;

/// The completions a closed loop's sleep waits for: those that arrived in
/// [`CLOSED_WAKE_WAIT_NS`] at the rate of `issued` requests in `elapsed_ns` (each
/// completion issues one), between 1 and `max`.
pub(super) fn closed_batch_for(issued: u64, elapsed_ns: u64, max: u32) -> u32 {
    let per_wait =
        u128::from(issued) * u128::from(CLOSED_WAKE_WAIT_NS) / u128::from(elapsed_ns.max(1));
    per_wait.clamp(1, u128::from(max.max(1))) as u32
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

/// Runs one worker to completion. Every outcome, including setup failure, is reported
/// on the channels, so the main thread never waits forever.
pub fn run_worker(plan: WorkerPlan, stop: Arc<AtomicBool>, ch: Channels) {
    drive(&plan, &stop, ch, "io_uring setup", Worker::new);
}

struct Worker<'p> {
    plan: &'p WorkerPlan,
    /// The ring, the count of what is in it (buffers they point into must stay alive
    /// until it is zero: see the `Drop` below), and how the run ends.
    core: LoopCore,
    table: ConnTable,
    ready_q: IndexQueue,
    flush_q: IndexQueue,
    /// `--connect-rate`: connections waiting for their turn to connect.
    deferred_q: IndexQueue,
    /// The watch list: connections the timeout scan looks at (requests in flight, a
    /// pending connect, a reopen instant, a close in the ring; see `needs_scan`).
    active_q: IndexQueue,
    backlog: Backlog,
    /// Per connection, `recv_buffer_bytes`: single-shot receives write into it, and
    /// a response's unfinished tail is kept there.
    recv_buf: IoBuf,
    /// The payload repeated `pipeline` times: a send of k requests is its first k copies.
    /// Empty when requests are rendered (`staging` instead).
    send_buf: IoBuf,
    /// Rendered requests: per connection, room for `pipeline` requests of the longest
    /// rendering; a send covers the unsent requests rendered back to back.
    staging: IoBuf,
    /// Bytes of `staging` per connection.
    staging_len: usize,
    /// `--tls`: each connection's session (None until its TCP connect completes).
    /// Empty without TLS.
    sessions: Vec<Option<Box<crate::transport::tls_session::TlsSession>>>,
    /// `--tls`: per connection, `tls_out_len` bytes of ciphertext to send.
    tls_out: IoBuf,
    tls_out_len: usize,
    /// `--tls`: per connection, `TLS_RECV_BUFFER_BYTES` of ciphertext received and
    /// not yet opened (records are opened in place here).
    tls_in: IoBuf,
    /// Requests are rendered per request (templates or a mix).
    render: bool,
    /// `--replay`: each placed request's bytes (empty without a replay).
    replay_slots: crate::engine::replay::Slots,
    /// The framer of each request-set entry (cloned into a connection when the next
    /// response belongs to another entry).
    entry_framers: Vec<AnyFramer>,
    mixed_framing: bool,
    /// Per `--mix` entry figures (empty without a mix).
    entries: Vec<EntryTotals>,
    /// Per destination figures, in `--target` order (empty with fewer than two).
    targets: Vec<TargetTotals>,
    /// Each connection's destination: an index into `targets` (empty with fewer than
    /// two), fixed at start by the placement, so a request's target is one load.
    conn_target: Box<[u8]>,
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
    /// The socket options of this worker's connections (the plan's, and SO_TIMESTAMPNS
    /// when responses are timed by the kernel).
    sockopts: socket::SockOpts,
    /// Responses are timed by the kernel's receive timestamp: receives are multishot
    /// `recvmsg`s armed with this header ([`stamps`]). None: timed when reaped.
    stamps: Option<Box<libc::msghdr>>,
    /// Responses timed when reaped while `stamps` was on: payloads that came without
    /// a timestamp, and responses that ended with the close. While 0 the loop may
    /// sleep through completions ([`Worker::stamped`]).
    stamps_missing: u64,
    /// How many completions a sleep may wait for while responses are timed by the
    /// kernel: half the provided buffers and half the completion queue, so neither
    /// runs out before the loop wakes.
    wake_batch: u32,
    /// A closed loop keeping at least [`CLOSED_INFLIGHT_PER_WAKE`] x 2 requests in
    /// flight: how many completions a sleep waits for (at most
    /// [`CLOSED_WAKE_WAIT_NS`]), its responses timed by the kernel; 1 otherwise.
    /// Set at each scan to the completions the last ones took that long for
    /// ([`closed_batch_for`]), up to `closed_batch_max`.
    closed_batch: u32,
    closed_batch_max: u32,
    /// When `closed_batch` was last set, and the requests issued by then.
    closed_mark: (Nanos, u64),
    /// What the connections carry: where requests come from, how connections live.
    workload: Workload,
    /// The schedule has started (the connect phase is over).
    running: bool,
    /// `--warmup` has not ended yet.
    warming: bool,
    inflight: u64,
    closed: usize,
    first_errno: Option<i32>,
    backlog_peak: u64,
    completed_total: u64,
    /// When the last response completed, and the same instant in ns since start. A
    /// completion batch is reaped at one instant, so the tick-to-ns conversion is done
    /// once per batch (when the instant changes), not once per response.
    last_done: Ticks,
    last_done_ns: Nanos,
    /// The first response that did not parse, escaped and truncated.
    first_bad: Option<String>,
    /// `--server-time offset:`: per connection, the field read at the start of its
    /// current response (`u64::MAX`: none; its first bytes did not arrive in one
    /// receive); with `--http2`, per request slot, what its header blocks said. Empty
    /// otherwise, so a held connection costs nothing more.
    server_fields: Vec<u64>,
    /// Exact HTTP status codes and error-reply kinds over the run.
    replies: ReplyTally,
    /// `--expect` reads bodies: responses are kept whole while they arrive.
    expect_body: bool,
    /// `--http2`: the connections' HTTP/2 state (None without it).
    h2: Option<Box<h2::H2Side>>,
    /// `--conn-max-age`, `--conn-max-requests`: each connection's life (empty
    /// without them).
    life: Vec<recycle::Life>,
    /// `--http2`: why the first connection the server refused as HTTP/2 failed (its
    /// preface answered with something else, or not at all).
    h2_refusal: Option<String>,
    /// Connections the timeout scan has visited (tests check it is O(watched)).
    #[cfg(test)]
    scan_visits: u64,
}

/// Whatever ends the worker's life (a normal return after `quiesce`, a setup error, a
/// panic unwinding through the loop), buffers the kernel may still read or write are
/// never freed under it: while operations remain in the ring they are leaked. The ring
/// itself is dropped after this (its fields drop after `drop` returns), which cancels
/// what is left; the leaked memory is what those cancels may still touch.
impl Drop for Worker<'_> {
    fn drop(&mut self) {
        if self.core.ops_in_ring() == 0 {
            return;
        }
        // A broken ring (`fatal`) explains itself; the leak needs no line of its own.
        if self.core.fatal.is_none() {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "blaster: worker {}: {} io_uring operations did not finish; leaking their buffers",
                self.plan.index,
                self.core.ops_in_ring()
            );
        }
        std::mem::forget(self.buf_ring.take());
        self.recv_buf.leak();
        self.send_buf.leak();
        self.staging.leak();
        self.tls_out.leak();
        self.tls_in.leak();
        std::mem::forget(std::mem::take(&mut self.addrs));
        std::mem::forget(self.stamps.take());
    }
}

/// The ring of a TCP worker, and what it could set up on it.
struct RingSetup {
    ring: Ring,
    /// Sockets live in the ring's file table.
    fixed_files: bool,
    /// Provided receive buffers (None: the kernel has no provided-buffer rings).
    buf_ring: Option<BufRing>,
    /// How many the buffer ring holds (or would have held).
    buf_count: u16,
}

impl RingSetup {
    /// A ring for `plan.connections` connections (a receive and a send each, and room
    /// for connects and closes), with a file-table slot per connection and a
    /// provided-buffer ring where the kernel has them.
    fn new(plan: &WorkerPlan) -> std::io::Result<Self> {
        let entries = (plan.connections * 2 + 64) as u32;
        let mut ring = Ring::new(entries)?;
        ring.confine_io_workers(plan.core);
        arm_fault_hook(&mut ring);
        // Two receive buffers per connection, 64 to 4096 of 4 KiB each: buffers are
        // handed back as soon as their bytes are framed, so thousands of mostly idle
        // connections share a pool (a receive that finds it empty is re-armed).
        let buf_count = (plan.connections * 2)
            .clamp(64, RECV_BUFFERS_MAX)
            .next_power_of_two() as u16;
        let fixed_files = ring.register_files_sparse(plan.connections as u32).is_ok();
        if fixed_files {
            ring.features.push("registered_files");
        }
        let buf_ring = match BufRing::new(&mut ring, buf_count, RECV_CHUNK_BYTES, 0) {
            Ok(b) => {
                ring.features.push("multishot_recv");
                ring.features.push("provided_buffer_ring");
                Some(b)
            }
            Err(_) => None,
        };
        Ok(RingSetup {
            ring,
            fixed_files,
            buf_ring,
            buf_count,
        })
    }
}

/// One framer per request-set entry, reading `--server-time` from the replies'
/// headers when it names one.
fn entry_framers(plan: &WorkerPlan) -> Vec<AnyFramer> {
    (plan.requests.entries.iter())
        .map(|e| {
            let mut f = e.framing.framer(plan.payload.len(), plan.max_response);
            if let Some(source) = &plan.server_time {
                f.read_server_time(source);
            }
            f
        })
        .collect()
}

/// `--server-time offset:`: one field slot per connection; none otherwise.
fn server_fields(plan: &WorkerPlan) -> Vec<u64> {
    match plan.server_time.as_deref() {
        // HTTP/2: one per request slot (a connection's streams answer in any order).
        Some(_) if plan.http2.is_some() => vec![u64::MAX; plan.connections * plan.pipeline],
        Some(source) if !source.is_http() => vec![u64::MAX; plan.connections],
        _ => Vec::new(),
    }
}

/// Bytes per connection of the staging region (`render`: requests rendered there, or
/// `h2_staging` with HTTP/2; 0 when the payload is sent as it is) and of the TLS
/// ciphertext region.
fn send_region_lens(plan: &WorkerPlan, render: bool, h2_staging: Option<usize>) -> (usize, usize) {
    let staging_len = if let Some(n) = h2_staging {
        n
    } else if render {
        plan.requests.max_len() * plan.pipeline
    } else {
        0
    };
    // Ciphertext of a whole pipeline of the longest requests, record overheads
    // included.
    let plain = if render {
        staging_len
    } else {
        plan.payload.len() * plan.pipeline
    };
    // Plus room for handshake messages still going out when the first requests
    // follow them (the client's Finished; its certificate chain, asked for).
    let tls_out_len = plain
        + (plain / (16 << 10) + 1) * TLS_RECORD_OVERHEAD_BYTES
        + TLS_SEND_BUFFER_BYTES_MIN
        + plan.tls.as_ref().map_or(0, |t| t.identity_bytes);
    (staging_len, tls_out_len)
}

/// Per `--mix` entry figures: none without a mix.
fn entry_totals(plan: &WorkerPlan) -> Vec<EntryTotals> {
    if plan.requests.is_mix {
        vec![EntryTotals::new(); plan.requests.entries.len()]
    } else {
        Vec::new()
    }
}

/// The destinations a worker keeps figures for: every target when there are several,
/// none with one (the run's totals are that one's).
fn tracked_targets(plan: &WorkerPlan) -> usize {
    if plan.targets.len() > 1 {
        plan.targets.len()
    } else {
        0
    }
}

/// Which (source, destination) pair each connection of the run takes.
fn placement(plan: &WorkerPlan) -> Placement {
    Placement::new(
        plan.conn_offset + plan.connections * plan.workers,
        plan.sources.len(),
        plan.targets.len(),
    )
}

/// Each of the worker's connections' destination (see `Worker::conn_target`): the
/// placement's, computed once here rather than per request. Empty with one target.
fn conn_targets(plan: &WorkerPlan, placement: &Placement) -> Box<[u8]> {
    const _: () = assert!(crate::limits::TARGETS_MAX <= u8::MAX as usize + 1);
    if tracked_targets(plan) == 0 {
        return Box::default();
    }
    (0..plan.connections)
        .map(|c| placement.pair_of(plan.conn_offset + c).1 as u8)
        .collect()
}

impl<'p> Worker<'p> {
    /// The figures of connection `c`'s destination; `None` with fewer than two targets
    /// (the run's totals are the one target's).
    #[inline]
    fn target_of(&mut self, c: u32) -> Option<&mut TargetTotals> {
        let t = *self.conn_target.get(c as usize)?;
        self.targets.get_mut(t as usize)
    }

    fn new(
        plan: &'p WorkerPlan,
        snap_tx: Sender<Snapshot>,
        recycle_rx: Receiver<Histograms>,
    ) -> std::io::Result<Self> {
        // On the worker's own thread: each regex's cache is made here, not at the
        // first reply.
        plan.expect.warm();
        let RingSetup {
            ring,
            fixed_files,
            buf_ring,
            buf_count,
        } = RingSetup::new(plan)?;
        let entry_framers = entry_framers(plan);
        let framer = entry_framers[0].clone();
        let h2 = h2::H2Side::new(plan).map_err(std::io::Error::other)?;
        // HTTP/2 writes each request into the staging region (its stream id differs).
        let render =
            h2.is_some() || plan.requests.static_bytes().is_none() || plan.replay.is_some();
        let h2_staging = h2.as_ref().map(|h| h.staging_len(plan.pipeline));
        let (staging_len, tls_out_len) = send_region_lens(plan, render, h2_staging);
        // Connections with a TLS session and ciphertext regions: none without TLS.
        let tls_conns = if plan.tls.is_some() {
            plan.connections
        } else {
            0
        };
        let wake_batch = (u32::from(buf_count) / 2).clamp(1, ring.completions_per_wait_max());
        let workload = Workload::new(plan);
        let (stamped, closed_batch_max) = stamping(plan, &workload, buf_ring.is_some(), wake_batch);
        let sockopts = socket::SockOpts {
            rx_stamps: stamped,
            ..plan.sockopts
        };
        Ok(Worker {
            sessions: (0..tls_conns).map(|_| None).collect(),
            tls_out: IoBuf::zeroed(tls_out_len * tls_conns),
            tls_out_len,
            tls_in: IoBuf::zeroed(TLS_RECV_BUFFER_BYTES * tls_conns),
            plan,
            core: LoopCore::new(ring, plan),
            table: {
                let mut t = ConnTable::new(plan.connections, plan.pipeline, framer);
                if plan.http2.is_some() {
                    t.caps = vec![plan.pipeline as u32; plan.connections];
                }
                t
            },
            ready_q: IndexQueue::with_capacity(plan.connections),
            deferred_q: IndexQueue::with_capacity(plan.connections),
            active_q: IndexQueue::with_capacity(plan.connections),
            flush_q: IndexQueue::with_capacity(plan.connections),
            backlog: Backlog::with_capacity(plan.backlog_capacity),
            recv_buf: IoBuf::zeroed(plan.connections * plan.recv_buffer_bytes),
            send_buf: if render {
                IoBuf::default()
            } else {
                IoBuf::from_vec(plan.payload.repeat(plan.pipeline))
            },
            staging: IoBuf::zeroed(staging_len * plan.connections),
            staging_len,
            render,
            replay_slots: if plan.replay.is_some() {
                crate::engine::replay::Slots::new(
                    plan.connections * plan.pipeline,
                    plan.requests.max_len(),
                )
            } else {
                crate::engine::replay::Slots::default()
            },
            entry_framers,
            mixed_framing: plan.requests.mixed_framing(),
            entries: entry_totals(plan),
            targets: vec![TargetTotals::new(); tracked_targets(plan)],
            conn_target: conn_targets(plan, &placement(plan)),
            // Per-worker streams derived from the one seed, so runs repeat.
            rng: fastrand::Rng::with_seed(
                plan.seed ^ (plan.index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ),
            unix_at_start_ns: 0,
            addrs: plan.targets.iter().map(socket::sock_addr).collect(),
            placement: placement(plan),
            next_connect_ns: 0,
            connecting: 0,
            clock: Clock::new(),
            out: Outbox::shaped(plan.index, plan.hist_shape(), snap_tx, recycle_rx),
            cqes: vec![(0u64, 0i32, 0u32); CQE_BATCH_MAX].into_boxed_slice(),
            multishot: buf_ring.is_some(),
            buf_ring,
            sockopts,
            stamps: stamped.then(stamps::msghdr),
            stamps_missing: 0,
            wake_batch,
            closed_batch: 1,
            closed_batch_max,
            closed_mark: (0, 0),
            fixed_files,
            workload,
            running: false,
            warming: false,
            inflight: 0,
            closed: plan.connections,
            first_errno: None,
            backlog_peak: 0,
            completed_total: 0,
            last_done: 0,
            last_done_ns: 0,
            first_bad: None,
            server_fields: server_fields(plan),
            replies: ReplyTally {
                expect_failed: vec![0; plan.expect.len()],
                ..ReplyTally::new()
            },
            expect_body: plan.expect.needs_body(),
            h2,
            life: vec![
                recycle::Life::default();
                if plan.conn_life.is_some() {
                    plan.connections
                } else {
                    0
                }
            ],
            h2_refusal: None,
            #[cfg(test)]
            scan_visits: 0,
        })
    }
}

#[cfg(test)]
mod tests;
