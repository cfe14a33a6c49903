//! The frames engine (`--workload frames`, issue 14): a workload of its own beside
//! request/response. Every connection sends one frame per tick on the absolute
//! timetable of [`crate::schedule::frames`]; what arrives is checked frame by frame,
//! by source and sequence number, in [`accounting`]. Nothing here completes a request:
//! a frame is never answered, it is relayed to the other members of its room by a
//! broadcast server (`blaster sink --mode broadcast`).
//!
//! The loop: now -> send every frame now due (dispatch lag recorded as for requests,
//! so the validity gate applies) -> reap completions (sends, receives, connects) ->
//! reconnects -> interval boundary -> wait (sleep on the ring, then spin). TCP frames
//! follow a 4-byte length (`proto::frame`): plain TCP frames are received into the
//! worker's shared provided-buffer ring and sent out of a shared pool of send slots
//! ([`pooled`], issue 36: no buffer per connection); TLS, a server's protocol and
//! `--slow-readers` read into a region per connection. UDP frames are one datagram
//! each on a connected socket. Buffers, windows and the connection table are sized at
//! start; nothing allocates per frame.
//!
//! A frame due while its connection's previous send is still in the kernel waits (at
//! most [`SEND_FRAMES`] go out in one send); one due while its connection is down is
//! not sent (counted; the receivers count it lost). After the last frame is due, the
//! loop drains until every expected frame is in, or none came for a quiet interval
//! ([`quiet_ns`]), or the cap; frames still coming at the cap are in flight, not lost.
//!
//! The worker is split by job, one file each; every file adds methods to
//! [`FrameWorker`]:
//! - [`lifecycle`]: opening, going down, closing and reopening connections;
//! - [`connect`]: the connect phase before the schedule starts;
//! - [`join`]: joining a room (`--frame-proto`);
//! - [`io`]: pushing entries into the ring and reaping completions;
//! - [`send`]: due frames onto their connections, and join and control bytes;
//! - [`recv`]: receives, decoded and delivered to the accounting;
//! - [`run`]: the hooks into the one worker loop, and [`totals`], what the run did;
//! - [`tls`]: the same over TLS;
//! - [`slow`]: `--slow-readers`, connections that read slowly or not at all.

pub mod accounting;
mod connect;
pub mod downlink;
mod io;
mod join;
mod keepalive;
mod lifecycle;
mod pool;
mod pooled;
mod recv;
mod run;
mod send;
mod slow;
#[cfg(test)]
mod tests;
mod tls;
mod totals;

use super::buf_ring::BufRing;
use super::conn_table::IndexQueue;
use super::driver::{Channels, Outbox, arm_fault_hook, drive};
use super::iobuf::IoBuf;
use super::loop_core::LoopCore;
use super::recorder::{Histograms, Snapshot};
use super::ring::Ring;
use super::socket;
use super::stamps::RecvMsgs;
use super::token::Op;
use super::worker_plan::{FramePlan, Transport, WorkerPlan};
use crate::clock::{Clock, Nanos, Ticks};
use crate::engine::recorder::JoinFailures;
use crate::limits::{
    CQE_BATCH_MAX, TLS_RECORD_OVERHEAD_BYTES, TLS_RECV_BUFFER_BYTES, TLS_SEND_BUFFER_BYTES_MIN,
};
use crate::proto::frame::{FrameHeader, LEN_PREFIX_BYTES};
use crate::proto::frame_proto::{CONTROL_BYTES_MAX, FrameProto, Role};
use crate::schedule::{FrameCursor, SlotMap};
use crate::transport::tls_record::RecordLayer;
use accounting::{FrameBook, MemberBooks};
use crossbeam_channel::{Receiver, Sender};
use downlink::DownBook;
use pool::{NO_SLOT, SlotPool};
use socket2::SockAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Most frames one TCP send carries (frames that fell due while the previous send was
/// in the kernel).
pub const SEND_FRAMES: usize = 4;
/// Smallest receive region per connection.
const RECV_BYTES_MIN: usize = 2048;
/// Smallest receive region of a connection speaking a server's protocol: the join's
/// answers (a NATS `INFO` line, an HTTP 101 response) must fit whole.
const RECV_BYTES_MIN_JOIN: usize = 8192;
/// Largest receive region: a connection of many members gets up to a tick of their
/// relayed frames in one receive, within this.
const RECV_BYTES_MAX: usize = 64 * 1024;
/// Room for a protocol's envelope around each relayed payload in the receive region
/// (a NATS `MSG` line, a Redis array header, a WebSocket frame header).
const ENVELOPE_BYTES: usize = 512;
/// Control answers (pongs) a connection can queue without allocating.
const CTL_QUEUED: usize = 4;
/// Plain TCP frames (issue 36): bytes per buffer of the worker's provided-buffer ring,
/// and the most buffers; the ring has one per 32 sockets within 64..=4096 (a power
/// of two). A receive that finds none is counted and armed again. One per 32: at
/// 20,000 x 100 (5 s tick, echo) 256 buffers a ring of 10,000 sockets met no receive
/// without one, and one per 16 cost 105 B more of each connection (figures.md).
const RECV_POOL_BUFFER_BYTES: usize = 4096;
const RECV_POOL_SOCKETS_PER_BUFFER: usize = 32;
const RECV_POOL_BUFFERS_MIN: usize = 64;
const RECV_POOL_BUFFERS_MAX: usize = 4096;
/// Test hooks, not for users: a plain TCP frames worker's provided buffers (rounded
/// down to a power of two) and send slots, in place of the sizes above and of one send
/// slot per socket, so that the end-to-end tests run out of both
/// (`frames.recv_no_buffer`, `frames.send_slot_waits`) on purpose: the buffers
/// otherwise only when the host lags, the send slots never.
pub const TEST_RECV_BUFFERS_ENV: &str = "BLASTER_TEST_RECV_BUFFERS";
pub const TEST_SEND_SLOTS_ENV: &str = "BLASTER_TEST_SEND_SLOTS";

/// A test hook's count ([`TEST_RECV_BUFFERS_ENV`], [`TEST_SEND_SLOTS_ENV`]), at least 1.
fn test_count(env: &str) -> Option<usize> {
    let n: usize = std::env::var(env).ok()?.parse().ok()?;
    Some(n.max(1))
}

/// Runs one frames worker to completion (see [`super::tcp::run_worker`] for the
/// protocol with the main thread).
pub fn run_frames_worker(plan: WorkerPlan, stop: Arc<AtomicBool>, ch: Channels) {
    drive(&plan, &stop, ch, "frames setup", FrameWorker::new);
}

#[derive(Debug, Clone, Copy, Default)]
struct Conn {
    /// The socket's descriptor, [`REGISTERED`](super::conn_table::REGISTERED) when it
    /// lives only in the ring's file table (slot = the connection's index), -1 when
    /// closed.
    fd: RawFd,
    generation: u32,
    up: bool,
    connecting: bool,
    sending: bool,
    /// Operations of this connection in the ring: it reopens only at zero (its regions
    /// are then the kernel's no longer).
    ops: u32,
    /// Frames due but not yet sent: `pend` of them from frame `pend_k`.
    pend_k: u64,
    pend: u32,
    send_off: u32,
    send_len: u32,
    recv_keep: u32,
    /// Connected at least once: its later connects are reconnects (one still in
    /// flight when the run ends is not, so `opened` is the first plus `reconnects`).
    was_up: bool,
    up_since: Nanos,
    uptime: Nanos,
    reopen_at: Nanos,
    attempts: u32,
    /// On the reopen watch list.
    watched: bool,
    /// Connected, its join exchange under way (`--frame-proto`): not up yet.
    joining: bool,
    /// The send in the kernel carries join or control bytes (`Ctl::busy`), not frames.
    ctl_sending: bool,
    /// Frames in the send in the kernel.
    send_frames: u32,
    /// When its connect was submitted (the join is timed from it).
    open_t: Ticks,
    /// `--h2-keepalive`: when it last received (or joined), and whether a PING of
    /// its is unanswered.
    last_rx: Nanos,
    ping_out: bool,
    /// `--conn-max-age` / `--conn-max-requests`: when it retires, the frames it sent
    /// since it joined, and its joins so far (for the age's draw).
    retire_ns: Nanos,
    frames_on: u32,
    joins: u32,
    /// `--slow-readers`: its member reads slowly, and when it may read next.
    slow: bool,
    rx_at: Nanos,
    /// Plain TCP frames: the send slot its send in the kernel reads, the tail slot
    /// holding the first `recv_keep` bytes of a frame split across receives (each
    /// [`NO_SLOT`] when none), and whether it waits for a send slot.
    send_slot: u32,
    tail_slot: u32,
    slot_wait: bool,
}

/// A connection's join and control bytes (the join exchange, pongs): those in the
/// kernel (`busy`, untouched until their send completes) and those waiting (`next`).
/// Joins may allocate (once per connection); pongs fit the capacity reserved at start.
/// gRPC frames a window let go ride with them: counted sent when their bytes go to
/// the kernel, done when that send completes, not sent if still waiting when the
/// connection goes down or the run ends.
#[derive(Debug, Default)]
struct Ctl {
    busy: Vec<u8>,
    next: Vec<u8>,
    /// Frames in `busy` (counted sent, not yet done) and in `next` (not yet sent).
    busy_frames: u32,
    next_frames: u32,
}

struct FrameWorker<'p> {
    plan: &'p WorkerPlan,
    /// This worker's connections (members); the socket table below holds one socket
    /// per connection, or two (`pairs`).
    members: usize,
    /// `--frame-proto resp`: socket i (< members) subscribes for member i, socket
    /// members + i publishes its frames.
    pairs: bool,
    /// `--frame-proto`: each connection's adapter (TCP; its join state and any partial
    /// downlink message).
    codecs: Box<[FrameProto<'p>]>,
    /// Per connection, join and control bytes to send.
    ctl: Box<[Ctl]>,
    /// The adapter has a join exchange (every `--frame-proto` but blaster).
    joins: bool,
    /// Connections connected and joining (the connect phase waits for them).
    joining: usize,
    join_failures: JoinFailures,
    first_join_error: Option<String>,
    fp: FramePlan,
    udp: bool,
    /// The ring, the count of what is in it, and how the run ends.
    core: LoopCore,
    /// TCP sockets live in the ring's file table (one slot per socket), so a worker's
    /// connections are bounded by its table, not by the process's RLIMIT_NOFILE.
    fixed_files: bool,
    conns: Box<[Conn]>,
    cursor: FrameCursor,
    book: MemberBooks,
    /// `--members-per-connection`: members (frames per tick) each connection carries.
    slots: usize,
    /// The stamps of one send ([`SEND_FRAMES`] ticks x `slots`), written per send.
    stamps: Box<[FrameHeader]>,
    /// The wire rooms a connection joins, one per slot, written per join.
    join_rooms: Vec<u32>,
    /// `--aggregate`: the downlink frames' accounting.
    down: Option<DownBook>,
    /// Per connection [`SEND_FRAMES`] frames (TCP: each after its length prefix),
    /// prefixes and padding written once at start; only headers are written per frame.
    send_buf: IoBuf,
    send_stride: usize,
    /// Bytes of one frame on the wire (prefix included over TCP).
    wire_len: usize,
    recv_buf: IoBuf,
    recv_stride: usize,
    /// Plain TCP frames (not TLS, UDP, a server's protocol or `--slow-readers`): no
    /// buffer per connection. Receives are multishot, into `buf_ring` (a `recvmsg`
    /// with `stamp_hdr` when timed by the kernel), a split frame's head waits in a
    /// `tails` slot, and a send's bytes live in a `send_slots` slot until it completes
    /// (`slot_waits`: connections waiting for one). [`pooled`].
    pooled: bool,
    buf_ring: Option<BufRing>,
    stamp_hdr: Option<Box<libc::msghdr>>,
    tails: SlotPool,
    send_slots: SlotPool,
    slot_waits: IndexQueue,
    /// Frames are timed by the kernel's receive timestamp: each TCP connection
    /// receives with a `recvmsg` of these headers ([`crate::engine::stamps`]). None:
    /// timed when reaped (UDP, TLS).
    rx: Option<RecvMsgs>,
    /// Receives with bytes but no timestamp (timed when reaped). While 0 the loop may
    /// sleep through completions.
    rx_missing: u64,
    /// The loop may sleep through frames: each connection receives one frame per
    /// tick (its own echo: one member per connection, rooms of one, no downlink), so
    /// no receive reads two frames that arrived apart (a receive's stamp is the newest
    /// segment it read). False for good once a receive carried two.
    rx_batch: bool,
    /// After the schedule: waiting for the frames still on their way (`None` while
    /// the schedule runs, after Ctrl-C, and under `--aggregate`, whose drain is fixed).
    drain: Option<Drain>,
    /// The highest per-interval p99 arrival deviation so far: what the drain's quiet
    /// interval is derived from.
    deviation_p99_max: u64,
    /// How many completions a sleep may wait for while frames are timed by the
    /// kernel: half the completion queue.
    wake_batch: u32,
    /// The plan's socket options, with SO_TIMESTAMPNS when `rx` is on.
    sockopts: socket::SockOpts,
    /// `--tls`: each socket's session (`None` before its handshake starts); empty
    /// without TLS.
    sessions: Box<[Option<Box<tls::Session>>]>,
    /// `--tls`: per socket, [`TLS_RECV_BUFFER_BYTES`] of ciphertext received and
    /// `tls_out_len` of ciphertext to send.
    tls_in: IoBuf,
    tls_out: IoBuf,
    tls_out_len: usize,
    addr: Box<SockAddr>,
    clock: Clock,
    out: Outbox,
    cqes: Box<[(u64, i32, u32)]>,
    running: bool,
    /// Connections down (not up): kept as they change, never recounted.
    down_count: usize,
    /// Connections down and not connecting, waiting for their reopen: the only ones
    /// the scan visits (each listed at most once, `Conn::watched`).
    reopen_q: IndexQueue,
    /// `--connect-rate`: when the next connection joins (`None`: all have).
    next_join_ns: Option<Nanos>,
    /// Connections the reopen scan has visited (tests check it is O(watched)).
    #[cfg(test)]
    scan_visits: u64,
    connecting: usize,
    reconnects: u64,
    first_errno: Option<i32>,
    first_bad: Option<String>,
    rng: fastrand::Rng,
    /// `--h2-keepalive` (`--frame-proto grpc`).
    keepalive: Option<keepalive::Keepalive>,
    /// `--connect-rate`: the next local connection to open (they join in order).
    next_join: usize,
    ramp: bool,
    /// `--slow-readers`: the slow sockets' pacing, and their disconnects.
    throttle: Option<slow::Throttle>,
    slow_disconnects: u64,
}

/// Buffers the kernel may still read or write are never freed under it (see
/// `Drop for Worker` in the TCP engine).
impl Drop for FrameWorker<'_> {
    fn drop(&mut self) {
        if self.core.ops_in_ring() > 0 {
            self.send_buf.leak();
            self.recv_buf.leak();
            self.send_slots.buf.leak();
            if let Some(br) = self.buf_ring.as_mut() {
                br.leak();
            }
            std::mem::forget(self.stamp_hdr.take());
            if let Some(rx) = self.rx.as_mut() {
                rx.leak();
            }
            self.tls_in.leak();
            self.tls_out.leak();
            std::mem::forget(std::mem::take(&mut self.ctl));
            std::mem::forget(std::mem::replace(
                &mut self.addr,
                Box::new(socket::sock_addr(&self.plan.target)),
            ));
        }
    }
}

/// How a frames worker's sockets and buffers are laid out, from its plan.
struct Layout<'p> {
    /// Sockets: one per connection, or a pair (`resp`: subscriber i, publisher
    /// members + i).
    n: usize,
    pairs: bool,
    joins: bool,
    codecs: Box<[FrameProto<'p>]>,
    ctl: Box<[Ctl]>,
    slots: usize,
    wire_len: usize,
    send_stride: usize,
    recv_stride: usize,
    tls_out_len: usize,
    /// Plain TCP frames: shared pools instead of the per-connection regions.
    pooled: bool,
    /// Bytes of the largest downlink frame (a tail slot: a split frame's head).
    frame_in_bytes: usize,
}

impl<'p> Layout<'p> {
    fn new(plan: &'p WorkerPlan, fp: &FramePlan, udp: bool) -> Self {
        let members = plan.connections;
        let spec = &plan
            .frames
            .as_ref()
            .expect("a frames worker has a frame plan")
            .spec;
        let joins = spec.joins();
        let first = plan.conn_offset as u64;
        let pairs = spec.kind.sockets_per_connection() == 2;
        let n = members * spec.kind.sockets_per_connection();
        let codecs: Box<[FrameProto<'p>]> = (0..n)
            .map(|i| {
                let role = match (pairs, i < members) {
                    (false, _) => Role::Both,
                    (true, true) => Role::Subscriber,
                    (true, false) => Role::Publisher,
                };
                let id = first * 2 + i as u64;
                FrameProto::new(spec, role, id, plan.seed ^ id)
            })
            .collect();
        let slots = fp.members_per_connection;
        let wire_len = fp.frame_size + if udp { 0 } else { LEN_PREFIX_BYTES };
        // TCP: up to SEND_FRAMES messages of the adapter per send (their envelopes
        // written per send); UDP: one bare frame per datagram.
        let send_stride = if udp {
            wire_len
        } else {
            codecs[0].uplink_bytes_max(SEND_FRAMES * slots)
        };
        // What arrives: relayed frames, or downlink frames of --down-size.
        let in_len = fp.down_size.unwrap_or(fp.frame_size);
        let recv_stride = if udp {
            in_len.max(RECV_BYTES_MIN)
        } else if joins {
            (2 * (in_len + ENVELOPE_BYTES) * slots).clamp(RECV_BYTES_MIN_JOIN, RECV_BYTES_MAX)
        } else {
            // A tick's relayed frames in one receive: M members' room mates.
            let heard = slots * (fp.grid.room_size as usize).saturating_sub(1).max(2);
            ((in_len + LEN_PREFIX_BYTES) * heard).clamp(RECV_BYTES_MIN, RECV_BYTES_MAX)
        };
        let ctl = (0..if joins { n } else { 0 })
            .map(|_| Ctl {
                busy: Vec::with_capacity(CTL_QUEUED * CONTROL_BYTES_MAX),
                next: Vec::with_capacity(CTL_QUEUED * CONTROL_BYTES_MAX),
                ..Ctl::default()
            })
            .collect();
        // `--tls`: a send's frames or a piece of control bytes sealed, behind the
        // handshake's last messages (the client's Finished, its certificate chain).
        let tls_out_len = RecordLayer::sealed_len(send_stride.max(tls::PLAIN_CHUNK))
            + TLS_RECORD_OVERHEAD_BYTES
            + TLS_SEND_BUFFER_BYTES_MIN
            + plan.tls.as_ref().map_or(0, |t| t.identity_bytes);
        let pooled = !udp && plan.tls.is_none() && !joins && fp.slow_readers.is_none();
        Layout {
            n,
            pairs,
            joins,
            codecs,
            ctl,
            slots,
            wire_len,
            send_stride,
            recv_stride,
            tls_out_len,
            pooled,
            frame_in_bytes: in_len + LEN_PREFIX_BYTES,
        }
    }
}

/// A frames worker's ring for `n` sockets (a connect, a send and a receive each, and
/// room), its features named; TCP sockets in its file table where it has one (the
/// `bool`).
fn frames_ring(plan: &WorkerPlan, n: usize, udp: bool) -> std::io::Result<(Ring, bool)> {
    let mut ring = Ring::new((n * 3 + 64).min(u32::MAX as usize) as u32)?;
    ring.confine_io_workers(plan.core);
    arm_fault_hook(&mut ring);
    let fixed_files = !udp && ring.register_files_sparse(n as u32).is_ok();
    ring.features
        .push(if udp { "frames_udp" } else { "frames_tcp" });
    if fixed_files {
        ring.features.push("registered_files");
    }
    Ok((ring, fixed_files))
}

/// Plain TCP frames' shared pools ([`pooled`]): the provided-buffer ring (registered
/// with `ring`), the tail slots and the send slots; empty otherwise.
fn pools(lay: &Layout, ring: &mut Ring) -> std::io::Result<(Option<BufRing>, SlotPool, SlotPool)> {
    let n = lay.n;
    if !lay.pooled {
        return Ok((None, SlotPool::new(0, 1), SlotPool::new(0, 1)));
    }
    let want = test_count(TEST_RECV_BUFFERS_ENV).unwrap_or(
        (n / RECV_POOL_SOCKETS_PER_BUFFER).clamp(RECV_POOL_BUFFERS_MIN, RECV_POOL_BUFFERS_MAX),
    );
    let entries = 1u16 << want.min(RECV_POOL_BUFFERS_MAX).ilog2();
    let br = BufRing::new(ring, entries, RECV_POOL_BUFFER_BYTES, 0)?;
    // A tail slot for every socket (never short), touched only as many at once as
    // frames are split at once.
    let tails = SlotPool::new(n, lay.frame_in_bytes);
    // A send slot for every socket: a socket has at most one send in the kernel, so
    // no connection ever waits for a slot (sockets stalled on a slow target cannot
    // starve the others), and, zeroed and handed out last-freed first, the pages
    // touched are those of the most sends in flight at once. Fewer only through the
    // test hook, which makes connections wait in line.
    let count = test_count(TEST_SEND_SLOTS_ENV).unwrap_or(n);
    Ok((Some(br), tails, SlotPool::new(count, lay.send_stride)))
}

/// The receivers' accounting: one book per member slot, each with its slot's layout
/// (the downlink frames' under `--aggregate`).
fn member_books(plan: &WorkerPlan, fp: &FramePlan, slots: usize) -> MemberBooks {
    let (first, members) = (plan.conn_offset as u64, plan.connections);
    MemberBooks::new(
        |slot| {
            let map = SlotMap::new(
                fp.room_layout,
                plan.seed,
                slot,
                first,
                members,
                fp.grid.room_size,
            );
            let slow: Box<[bool]> = match fp.slow_readers {
                Some(s) => (0..members as u64)
                    .map(|c| s.is_slow(plan.seed, first + c))
                    .collect(),
                None => Box::new([]),
            };
            let b = FrameBook::placed(
                fp.grid,
                first,
                members,
                fp.echo,
                fp.budget_ns,
                plan.duration_ns,
                map,
            )
            .with_slow(slow);
            if fp.down_size.is_some() {
                b.aggregated()
            } else {
                b
            }
        },
        slots,
        fp.grid.rooms(),
    )
}

/// The drain after the last planned frame: it ends when every expected frame has
/// arrived, or when none has arrived for `quiet_ns` (what is missing then is lost), or
/// at the cap (what is missing then was still on its way: `in_flight_at_end`).
#[derive(Debug, Clone, Copy)]
struct Drain {
    expected: u64,
    received: u64,
    last_arrival: Nanos,
    quiet_ns: u64,
    /// Nothing arrived for `quiet_ns`.
    quiet: bool,
}

impl Drain {
    fn done(&self) -> bool {
        self.received >= self.expected || self.quiet
    }
}

impl FrameWorker<'_> {
    /// Keeps the interval's p99 arrival deviation if it is the worst so far.
    pub(super) fn note_deviation(&mut self) {
        let p99 = self.out.hist.frame_deviation.value_at_quantile(0.99);
        self.deviation_p99_max = self.deviation_p99_max.max(p99);
    }
}

/// The drain's quiet interval: twice the run's worst per-interval p99 arrival
/// deviation, at least the frame budget plus 10 ms, at most the drain's cap (which
/// wins over a budget past it: a `--tick` over 2 s).
pub(super) fn quiet_ns(deviation_p99_max: u64, budget_ns: u64) -> u64 {
    deviation_p99_max
        .saturating_mul(2)
        .max(budget_ns.saturating_add(10_000_000))
        .min(crate::limits::DRAIN_NS_MAX)
}

impl<'p> FrameWorker<'p> {
    fn new(
        plan: &'p WorkerPlan,
        snap_tx: Sender<Snapshot>,
        recycle_rx: Receiver<Histograms>,
    ) -> std::io::Result<Self> {
        let fp = plan
            .frames
            .clone()
            .expect("a frames worker has a frame plan");
        let udp = plan.transport != Transport::Tcp;
        let members = plan.connections;
        let first = plan.conn_offset as u64;
        let lay = Layout::new(plan, &fp, udp);
        let (n, slots) = (lay.n, lay.slots);
        let tls = plan.tls.is_some();
        let (mut ring, fixed_files) = frames_ring(plan, n, udp)?;
        let pooled = lay.pooled;
        let (buf_ring, tails, send_slots) = pools(&lay, &mut ring)?;
        let ramp = fp.grid.join_gap_ns > 0;
        // Kernel receive timestamps over plaintext TCP: a window's frames are reaped
        // in one wake-up without being timed late.
        let stamped = !udp && !tls;
        let one_per_tick = slots == 1 && fp.grid.room_size == 1 && fp.down_size.is_none();
        let wake_batch = ring.completions_per_wait_max();
        let slow_reader = |c: usize| {
            let member = first + (c % members) as u64;
            fp.slow_readers
                .is_some_and(|s| s.is_slow(plan.seed, member))
        };
        let mut conns = vec![
            Conn {
                fd: -1,
                send_slot: NO_SLOT,
                tail_slot: NO_SLOT,
                // Under a ramp a connection opens at its join, not by the reopen scan.
                reopen_at: if ramp { Nanos::MAX } else { 0 },
                ..Conn::default()
            };
            n
        ]
        .into_boxed_slice();
        for (c, conn) in conns.iter_mut().enumerate() {
            conn.slow = slow_reader(c);
        }
        let throttle = fp.slow_readers.map(|s| {
            let sockets = conns.iter().filter(|c| c.slow).count();
            slow::Throttle::new(s.rate_bytes_per_s, sockets)
        });
        let keepalive = (lay.codecs.first())
            .and_then(|c| c.keepalive_ns())
            .map(|every_ns| keepalive::Keepalive {
                every_ns,
                next_scan: 0,
            });
        Ok(FrameWorker {
            plan,
            members,
            pairs: lay.pairs,
            codecs: lay.codecs,
            ctl: lay.ctl,
            joins: lay.joins,
            joining: 0,
            join_failures: JoinFailures::default(),
            first_join_error: None,
            fp: fp.clone(),
            udp,
            core: LoopCore::new(ring, plan),
            fixed_files,
            conns,
            cursor: FrameCursor::new(fp.grid, first, members as u64, plan.duration_ns),
            book: member_books(plan, &fp, slots),
            slots,
            stamps: vec![FrameHeader::default(); SEND_FRAMES * slots].into_boxed_slice(),
            join_rooms: Vec::with_capacity(slots),
            down: fp
                .down_size
                .map(|_| DownBook::new(fp.grid, first, members, fp.budget_ns, plan.duration_ns)),
            send_buf: IoBuf::from_vec(vec![0u8; if pooled { 0 } else { n * lay.send_stride }]),
            send_stride: lay.send_stride,
            wire_len: lay.wire_len,
            recv_buf: IoBuf::zeroed(if pooled { 0 } else { n * lay.recv_stride }),
            recv_stride: lay.recv_stride,
            pooled,
            buf_ring,
            stamp_hdr: (pooled && stamped).then(super::stamps::msghdr),
            tails,
            send_slots,
            slot_waits: IndexQueue::with_capacity(if pooled { n } else { 0 }),
            rx: (stamped && !pooled).then(|| RecvMsgs::new(n)),
            rx_missing: 0,
            rx_batch: stamped && one_per_tick,
            drain: None,
            deviation_p99_max: 0,
            wake_batch,
            sockopts: socket::SockOpts {
                rx_stamps: stamped,
                ..plan.sockopts
            },
            sessions: (0..if tls { n } else { 0 }).map(|_| None).collect(),
            tls_in: IoBuf::zeroed(if tls { n * TLS_RECV_BUFFER_BYTES } else { 0 }),
            tls_out: IoBuf::zeroed(if tls { n * lay.tls_out_len } else { 0 }),
            tls_out_len: lay.tls_out_len,
            addr: Box::new(socket::sock_addr(&plan.target)),
            clock: Clock::new(),
            out: Outbox::shaped(plan.index, plan.hist_shape(), snap_tx, recycle_rx),
            cqes: vec![(0u64, 0i32, 0u32); CQE_BATCH_MAX].into_boxed_slice(),
            running: false,
            down_count: n,
            reopen_q: IndexQueue::with_capacity(n),
            next_join_ns: None,
            #[cfg(test)]
            scan_visits: 0,
            connecting: 0,
            reconnects: 0,
            first_errno: None,
            first_bad: None,
            rng: fastrand::Rng::with_seed(plan.seed ^ plan.index as u64),
            keepalive,
            next_join: if ramp { 0 } else { members },
            ramp,
            throttle,
            slow_disconnects: 0,
        })
    }
}
