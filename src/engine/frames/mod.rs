//! The frames engine (`--workload frames`, issue 14): a workload of its own beside
//! request/response. Every connection sends one frame per tick on the absolute
//! timetable of [`timetable`]; what arrives is checked frame by frame, by source and
//! sequence number, in [`accounting`]. Nothing here completes a request: a frame is
//! never answered, it is relayed to the other members of its room by a broadcast
//! server (`blaster sink --mode broadcast`).
//!
//! The loop: now -> send every frame now due (dispatch lag recorded as for requests,
//! so the validity gate applies) -> reap completions (sends, receives, connects) ->
//! reconnects -> interval boundary -> wait (sleep on the ring, then spin). TCP frames
//! follow a 4-byte length (`proto::frame`), read into a region per connection; UDP
//! frames are one datagram each on a connected socket. Buffers, windows and the
//! connection table are sized at start; nothing allocates per frame.
//!
//! A frame due while its connection's previous send is still in the kernel waits (at
//! most [`SEND_FRAMES`] go out in one send); one due while its connection is down is
//! not sent (counted; the receivers count it lost). After the last frame is due, the
//! loop drains for `--frame-budget` (plus a margin) so frames planned just before the
//! end can arrive before loss is counted.

pub mod accounting;
pub mod downlink;
pub mod timetable;
mod tls;

pub use timetable::{FrameCursor, FrameGrid};

use super::conn_table::{IndexQueue, REGISTERED};
use super::driver::{Channels, Engine, Outbox, Ready, arm_fault_hook, drive};
use super::iobuf::IoBuf;
use super::pacing::Pacer;
use super::recorder::{FrameTotals, Histograms, Snapshot, WorkerTotals};
use super::ring::{Ring, Target, on_target};
use super::run_loop::{Hooks, LoopState, loop_parts};
use super::socket;
use super::stamps::{self, RecvMsgs};
use super::token::{Op, Token, next_generation};
use super::worker_plan::{FramePlan, Transport, WorkerPlan};
use crate::clock::{Clock, Nanos, Ticks};
use crate::engine::recorder::{FrameCounters, JoinFailures};
use crate::limits::{
    CQE_BATCH_MAX, DRAIN_NS_MAX, TLS_RECORD_OVERHEAD_BYTES, TLS_RECV_BUFFER_BYTES,
    TLS_SEND_BUFFER_BYTES_MIN, WAIT_NS_MAX,
};
use crate::proto::frame::{Entry, FrameHeader, HEADER_BYTES, LEN_PREFIX_BYTES};
use crate::proto::frame_proto::{
    CONTROL_BYTES_MAX, Control, Down, FrameProto, Join, JoinError, JoinFailure, Role,
};
use crate::transport::tls_record::RecordLayer;
use accounting::{FrameBook, MemberBooks};
use crossbeam_channel::{Receiver, Sender};
use downlink::DownBook;
use io_uring::{opcode, types};
use socket2::SockAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
/// Connects pending at once in the connect phase.
const CONNECTS_IN_FLIGHT: usize = 256;
/// Delay before reopening a connection the target closed, when `--no-reconnect` is
/// not given and no backoff applies (the backoff's first step is used otherwise).
const REOPEN_NS: u64 = 100_000_000;

/// Runs one frames worker to completion (see [`super::tcp::run_worker`] for the
/// protocol with the main thread).
pub fn run_frames_worker(plan: WorkerPlan, stop: Arc<AtomicBool>, ch: Channels) {
    drive(&plan, &stop, ch, "frames setup", FrameWorker::new);
}

#[derive(Debug, Clone, Copy, Default)]
struct Conn {
    /// The socket's descriptor, [`REGISTERED`] when it lives only in the ring's file
    /// table (slot = the connection's index), -1 when closed.
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
    opened_before: bool,
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
}

/// A connection's join and control bytes (the join exchange, pongs): those in the
/// kernel (`busy`, untouched until their send completes) and those waiting (`next`).
/// Joins may allocate (once per connection); pongs fit the capacity reserved at start.
#[derive(Debug, Default)]
struct Ctl {
    busy: Vec<u8>,
    next: Vec<u8>,
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
    ring: Ring,
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
    cqes: Box<[(u64, i32)]>,
    features: Vec<&'static str>,
    ops_in_ring: u64,
    /// The stop, its instant and the error that ended the run, shared with the loop.
    ls: LoopState,
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
    /// `--connect-rate`: the next local connection to open (they join in order).
    next_join: usize,
    ramp: bool,
}

impl Engine for FrameWorker<'_> {
    fn connect(&mut self, stop: &AtomicBool) -> Ready {
        self.connect_all(stop)
    }

    fn run_from(&mut self, clock: Clock, stop: &AtomicBool) {
        self.clock = clock;
        super::run_loop::run(self, stop);
    }

    fn quiesce(&mut self) {
        FrameWorker::quiesce(self);
    }

    fn outbox(&mut self) -> &mut Outbox {
        &mut self.out
    }
}

/// Buffers the kernel may still read or write are never freed under it (see
/// `Drop for Worker` in the TCP engine).
impl Drop for FrameWorker<'_> {
    fn drop(&mut self) {
        if self.ops_in_ring > 0 {
            self.send_buf.leak();
            self.recv_buf.leak();
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
        let spec = &plan.frames.as_ref().expect("checked above").spec;
        let joins = spec.joins();
        let first = plan.conn_offset as u64;
        // Sockets: one per connection, or a pair (`resp`: subscriber i, publisher
        // members + i).
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
        let send_buf = vec![0u8; n * send_stride];
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
            })
            .collect();
        // `--tls`: a send's frames or a piece of control bytes sealed, behind the
        // handshake's last messages (the client's Finished, its certificate chain).
        let tls_out_len = RecordLayer::sealed_len(send_stride.max(tls::PLAIN_CHUNK))
            + TLS_RECORD_OVERHEAD_BYTES
            + TLS_SEND_BUFFER_BYTES_MIN
            + plan.tls.as_ref().map_or(0, |t| t.identity_bytes);
        let tls = plan.tls.is_some();
        let mut ring = Ring::new((n * 3 + 64).min(u32::MAX as usize) as u32)?;
        ring.confine_io_workers(plan.core);
        arm_fault_hook(&mut ring);
        let fixed_files = !udp && ring.register_files_sparse(n as u32).is_ok();
        let mut features = ring.features.clone();
        features.push(if udp { "frames_udp" } else { "frames_tcp" });
        if fixed_files {
            features.push("registered_files");
        }
        let ramp = fp.grid.join_gap_ns > 0;
        // Kernel receive timestamps over plaintext TCP: a window's frames are reaped
        // in one wake-up without being timed late.
        let stamped = !udp && !tls;
        let one_per_tick = slots == 1 && fp.grid.room_size == 1 && fp.down_size.is_none();
        let wake_batch = ring.completions_per_wait_max();
        Ok(FrameWorker {
            plan,
            members,
            pairs,
            codecs,
            ctl,
            joins,
            joining: 0,
            join_failures: JoinFailures::default(),
            first_join_error: None,
            fp: fp.clone(),
            udp,
            ring,
            fixed_files,
            conns: vec![
                Conn {
                    fd: -1,
                    // Under a ramp a connection opens at its join, not by the reopen scan.
                    reopen_at: if ramp { Nanos::MAX } else { 0 },
                    ..Conn::default()
                };
                n
            ]
            .into_boxed_slice(),
            cursor: FrameCursor::new(fp.grid, first, members as u64, plan.duration_ns),
            book: MemberBooks::new(
                || {
                    let b = FrameBook::new(
                        fp.grid,
                        first,
                        members,
                        fp.echo,
                        fp.budget_ns,
                        plan.duration_ns,
                    );
                    if fp.down_size.is_some() {
                        b.aggregated()
                    } else {
                        b
                    }
                },
                slots,
                fp.grid.rooms(),
            ),
            slots,
            stamps: vec![FrameHeader::default(); SEND_FRAMES * slots].into_boxed_slice(),
            join_rooms: Vec::with_capacity(slots),
            down: fp
                .down_size
                .map(|_| DownBook::new(fp.grid, first, members, fp.budget_ns, plan.duration_ns)),
            send_buf: IoBuf::from_vec(send_buf),
            send_stride,
            wire_len,
            recv_buf: IoBuf::zeroed(n * recv_stride),
            recv_stride,
            rx: stamped.then(|| RecvMsgs::new(n)),
            rx_missing: 0,
            rx_batch: stamped && one_per_tick,
            wake_batch,
            sockopts: socket::SockOpts {
                rx_stamps: stamped,
                ..plan.sockopts
            },
            sessions: (0..if tls { n } else { 0 }).map(|_| None).collect(),
            tls_in: IoBuf::zeroed(if tls { n * TLS_RECV_BUFFER_BYTES } else { 0 }),
            tls_out: IoBuf::zeroed(if tls { n * tls_out_len } else { 0 }),
            tls_out_len,
            addr: Box::new(socket::sock_addr(&plan.target)),
            clock: Clock::new(),
            out: Outbox::new(plan.index, snap_tx, recycle_rx),
            cqes: vec![(0u64, 0i32); CQE_BATCH_MAX].into_boxed_slice(),
            features,
            ops_in_ring: 0,
            ls: LoopState::default(),
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
            next_join: if ramp { 0 } else { members },
            ramp,
        })
    }

    /// Queues `entry` for connection `c`.
    ///
    /// # Safety
    /// Every buffer and address the entry points to must stay valid and unmoved until
    /// its completion is reaped: `send_buf`, `recv_buf` and `addr` are allocated once,
    /// never reallocated, and leaked if the worker is dropped with operations in the
    /// ring (`Drop for FrameWorker`); a connection's regions are reused only once its
    /// operations have completed (`Conn::ops`).
    unsafe fn push(&mut self, c: u32, entry: &io_uring::squeue::Entry) {
        if self.ls.fatal.is_some() {
            return;
        }
        // SAFETY: forwarded to this function's contract.
        match unsafe { self.ring.push(entry) } {
            Ok(()) => {
                self.ops_in_ring += 1;
                self.conns[c as usize].ops += 1;
            }
            Err(e) => self.ls.fail(self.plan.index, &e),
        }
    }

    fn token(&self, c: u32, op: Op) -> u64 {
        Token {
            conn: c,
            op,
            generation: self.conns[c as usize].generation,
        }
        .encode()
    }

    /// Opens connection `c`: a connected UDP socket at once, or a TCP connect through
    /// the ring.
    fn open(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        conn.generation = next_generation(conn.generation);
        conn.recv_keep = 0;
        conn.sending = false;
        conn.ctl_sending = false;
        conn.pend = 0;
        conn.open_t = self.clock.ticks();
        if let Some(ctl) = self.ctl.get_mut(c as usize) {
            // Reopened only once its operations completed: nothing of these is in
            // the kernel.
            ctl.busy.clear();
            ctl.next.clear();
        }
        self.codecs[c as usize].reset();
        if let Some(s) = self.sessions.get_mut(c as usize) {
            *s = None; // its operations completed: nothing of it is in the kernel
        }
        if conn.opened_before {
            self.reconnects += 1;
        }
        conn.opened_before = true;
        if self.udp {
            match super::udp::udp_socket(self.plan, None) {
                Ok((fd, _)) => {
                    self.conns[c as usize].fd = fd;
                    self.connected(c);
                }
                Err(e) => self.connect_failed(c, e.raw_os_error().unwrap_or(libc::EIO)),
            }
            return;
        }
        // `--source-ip`: the connections take the sources in turn (the kernel picks
        // each port).
        let sources = &self.plan.sources;
        let source = (!sources.is_empty())
            .then(|| sources[(self.plan.conn_offset + self.member(c) as usize) % sources.len()]);
        let fd = match socket::tcp_socket(&self.plan.target, source, None, false, &self.sockopts) {
            Ok(fd) => fd,
            Err(e) => return self.connect_failed(c, e.raw_os_error().unwrap_or(libc::EIO)),
        };
        // Into the ring's file table, the descriptor closed at once.
        let fd = if self.fixed_files
            && self
                .ring
                .register_files_update(c, &[fd])
                .is_ok_and(|n| n == 1)
        {
            socket::close_descriptor(fd);
            REGISTERED
        } else {
            fd
        };
        let conn = &mut self.conns[c as usize];
        conn.fd = fd;
        conn.connecting = true;
        self.connecting += 1;
        let entry = on_target!(self.target(c), |t| opcode::Connect::new(
            t,
            self.addr.as_ptr().cast(),
            self.addr.len()
        )
        .build())
        .user_data(self.token(c, Op::Connect));
        // SAFETY: the connect reads `self.addr`, boxed and owned by the worker (see
        // `push`).
        unsafe { self.push(c, &entry) };
    }

    fn connect_failed(&mut self, c: u32, errno: i32) {
        self.first_errno.get_or_insert(errno);
        self.out.counters.connect_failed(errno);
        self.close_socket(c);
        let delay = self.reopen_delay(c);
        self.conns[c as usize].reopen_at = self.clock.now_ns().saturating_add(delay);
        self.watch(c);
    }

    /// Puts connection `c` (down) on the reopen watch list, at most once.
    fn watch(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        if !conn.watched {
            conn.watched = true;
            let queued = self.reopen_q.push(c);
            debug_assert!(queued, "each connection is queued at most once");
        }
    }

    /// How long connection `c` waits before it opens again (backoff with jitter).
    fn reopen_delay(&mut self, c: u32) -> u64 {
        let conn = &mut self.conns[c as usize];
        let attempt = conn.attempts;
        conn.attempts = conn.attempts.saturating_add(1);
        match &self.plan.backoff {
            Some(b) => b.delay_ns(attempt, self.rng.f64()),
            None => u64::MAX,
        }
        .max(if attempt == 0 { 0 } else { REOPEN_NS })
    }

    /// Connection `c`'s socket is connected: it joins its room (`--frame-proto`), or
    /// is up at once (blaster frames: the sink learns the room from the first frame).
    fn connected(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        debug_assert!(!conn.up);
        conn.connecting = false;
        self.out.counters.connections_opened += 1;
        if self.plan.tls.is_some() && !tls::upgrades_after_greeting(self.fp.spec.kind) {
            // The handshake first; the join (or, blaster frames, being up) after it.
            conn.joining = true;
            self.joining += 1;
            self.tls_start(c);
        } else if self.joins {
            conn.joining = true;
            self.joining += 1;
            self.set_join_rooms(c);
            let ctl = &mut self.ctl[c as usize];
            self.codecs[c as usize].join_start(&self.join_rooms, &mut ctl.next);
            self.flush_ctl(c);
        } else {
            self.joined(c, self.clock.ticks());
        }
        if self.conns[c as usize].fd != -1 {
            self.arm_recv(c);
        }
    }

    /// Where operations on connection `c`'s socket point.
    #[inline]
    fn target(&self, c: u32) -> Target {
        match self.conns[c as usize].fd {
            REGISTERED => Target::Fixed(c),
            fd => Target::Fd(fd),
        }
    }

    /// Closes connection `c`'s socket, waking what is pending on it: a descriptor at
    /// once; a file-table slot through the ring (a shutdown, then the close that frees
    /// the slot, both counted in `ops` so the connection reopens only after them).
    fn close_socket(&mut self, c: u32) {
        match self.conns[c as usize].fd {
            -1 => {}
            REGISTERED => {
                let token = self.token(c, Op::Close);
                let shut = opcode::Shutdown::new(types::Fixed(c), libc::SHUT_RDWR)
                    .build()
                    .flags(io_uring::squeue::Flags::IO_HARDLINK)
                    .user_data(token);
                let close = opcode::Close::new(types::Fixed(c)).build().user_data(token);
                // SAFETY: a shutdown and a close of a file-table slot point into no
                // memory.
                unsafe {
                    self.push(c, &shut);
                    self.push(c, &close);
                }
            }
            fd => socket::close(fd),
        }
        self.conns[c as usize].fd = -1;
    }

    /// Socket `c`'s TLS session is open: its join starts (NATS's, begun in plaintext
    /// before the upgrade, sends the bytes it held), or it is up (blaster frames).
    fn session_open(&mut self, c: u32, now: Nanos) {
        if !self.joins {
            let _ = now;
            self.joined(c, self.clock.ticks());
        } else if tls::upgrades_after_greeting(self.fp.spec.kind) {
            self.flush_ctl(c);
        } else {
            self.set_join_rooms(c);
            let ctl = &mut self.ctl[c as usize];
            self.codecs[c as usize].join_start(&self.join_rooms, &mut ctl.next);
            self.flush_ctl(c);
        }
    }

    /// Connection `c` joined its room at `now_t`: it is up, its frames go out from its
    /// next due tick, and its join time (from the connect submitted) is recorded.
    fn joined(&mut self, c: u32, now_t: Ticks) {
        let now = if self.running {
            self.clock.ns(now_t)
        } else {
            0
        };
        let conn = &mut self.conns[c as usize];
        if conn.joining {
            conn.joining = false;
            self.joining -= 1;
        }
        conn.up = true;
        conn.attempts = 0;
        self.down_count -= 1;
        conn.up_since = now;
        let took = self.clock.between_ns(conn.open_t, now_t);
        self.out.hist.frame_join.saturating_record(took.max(1));
    }

    /// The wire rooms connection `c` joins, one per member slot, into `join_rooms`.
    fn set_join_rooms(&mut self, c: u32) {
        let (room, _) = self.room_member(c);
        let fp = &self.fp;
        self.join_rooms.clear();
        self.join_rooms
            .extend((0..self.slots).map(|s| fp.wire_room(s, u64::from(room))));
    }

    /// (room, member) of local connection `c` (slot 0's room).
    fn room_member(&self, c: u32) -> (u32, u16) {
        let (room, member) = self
            .fp
            .grid
            .room_member(self.plan.conn_offset as u64 + u64::from(self.member(c)));
        (room as u32, member as u16)
    }

    /// The connection (member) socket `i` serves.
    #[inline]
    fn member(&self, i: u32) -> u32 {
        if self.pairs {
            i % self.members as u32
        } else {
            i
        }
    }

    /// The socket that sends member `c`'s frames.
    #[inline]
    fn sender(&self, c: u32) -> u32 {
        if self.pairs {
            c + self.members as u32
        } else {
            c
        }
    }

    /// Whether member `c`'s sockets are all up.
    fn member_up(&self, c: u32) -> bool {
        self.conns[c as usize].up && self.conns[self.sender(c) as usize].up
    }

    /// Connection `c`'s join failed: counted by kind (the first reason kept), closed,
    /// reopened after the backoff.
    fn join_failed(&mut self, c: u32, kind: Option<JoinFailure>, reason: String, now: Nanos) {
        let f = &mut self.join_failures;
        match kind {
            Some(JoinFailure::Refused) => f.refused += 1,
            Some(JoinFailure::Protocol) => f.protocol += 1,
            Some(JoinFailure::Closed) => f.closed += 1,
            None => f.timeout += 1,
        }
        self.first_join_error.get_or_insert(reason);
        let conn = &mut self.conns[c as usize];
        if conn.joining {
            conn.joining = false;
            self.joining -= 1;
        }
        self.drop_conn(c, now);
    }

    /// Sends connection `c`'s waiting join or control bytes unless a send is in the
    /// kernel (they go first once it completes, before any frame).
    fn flush_ctl(&mut self, c: u32) {
        let conn = &self.conns[c as usize];
        let Some(ctl) = self.ctl.get_mut(c as usize) else {
            return;
        };
        if conn.sending || ctl.next.is_empty() || conn.fd == -1 {
            return;
        }
        if self.tls_holding(c) {
            return; // no plaintext leaves a --tls socket: it waits for the session
        }
        let tls = self.tls_on(c);
        let ctl = &mut self.ctl[c as usize];
        debug_assert!(ctl.busy.is_empty());
        std::mem::swap(&mut ctl.busy, &mut ctl.next);
        if tls {
            let conn = &mut self.conns[c as usize];
            conn.sending = true;
            conn.ctl_sending = true;
            let len = self.ctl[c as usize].busy.len();
            return self.tls_send_plain(c, true, 0, len);
        }
        let (ptr, len) = (ctl.busy.as_ptr(), ctl.busy.len() as u32);
        let entry = on_target!(self.target(c), |t| opcode::Send::new(t, ptr, len).build())
            .user_data(self.token(c, Op::Send));
        let conn = &mut self.conns[c as usize];
        conn.sending = true;
        conn.ctl_sending = true;
        // SAFETY: the send reads `ctl[c].busy`, which is neither written nor dropped
        // until the send completes (`on_send` clears it; a reopen waits for `ops` to
        // reach 0; `Drop for FrameWorker` leaks `ctl` with operations in the ring).
        unsafe { self.push(c, &entry) };
    }

    /// Connection `c` went down (the target closed or reset it, or sent what is not a
    /// frame): counted, closed, reopened after the backoff.
    fn disconnect(&mut self, c: u32, now: Nanos) {
        let conn = &mut self.conns[c as usize];
        if conn.joining {
            let e = JoinError::closed(self.fp.spec.kind);
            return self.join_failed(c, Some(e.kind), e.to_string(), now);
        }
        if !conn.up {
            return;
        }
        conn.up = false;
        self.down_count += 1;
        conn.uptime += now.saturating_sub(conn.up_since);
        self.out.counters.frames.disconnects += 1;
        self.out.counters.closed_by_target += 1;
        self.drop_conn(c, now);
    }

    /// Closes connection `c`'s socket (its operations in the ring complete and are
    /// ignored: a new generation) and schedules its reopen after the backoff.
    fn drop_conn(&mut self, c: u32, now: Nanos) {
        let conn = &mut self.conns[c as usize];
        conn.generation = next_generation(conn.generation);
        self.close_socket(c);
        let delay = self.reopen_delay(c);
        self.conns[c as usize].reopen_at = now.saturating_add(delay);
        self.watch(c);
    }

    fn arm_recv(&mut self, c: u32) {
        if self.tls_on(c) {
            return self.tls_arm_recv(c);
        }
        let conn = &self.conns[c as usize];
        let keep = conn.recv_keep as usize;
        let base = c as usize * self.recv_stride;
        let buf = self
            .recv_buf
            .kernel_ptr(base + keep..base + self.recv_stride);
        let len = (self.recv_stride - keep) as u32;
        let entry = if let Some(rx) = self.rx.as_mut() {
            let hdr = rx.arm(c as usize, buf, len as usize);
            on_target!(self.target(c), |t| opcode::RecvMsg::new(t, hdr).build())
        } else {
            on_target!(self.target(c), |t| opcode::Recv::new(t, buf, len).build())
        }
        .user_data(self.token(c, Op::Recv));
        // SAFETY: the receive writes into connection `c`'s region of `recv_buf`
        // (bounds checked by `kernel_ptr`) and, a recvmsg, reads `c`'s header and
        // iovec and writes its control field in `rx` (never reallocated, rewritten
        // only when `c` is armed again, after this receive completed; leaked with
        // the buffers if the worker is dropped first); see `push`.
        unsafe { self.push(c, &entry) };
    }

    /// The connect phase: every connection opened, at most [`CONNECTS_IN_FLIGHT`]
    /// pending at once, each bounded by the timeout.
    fn connect_all(&mut self, stop: &AtomicBool) -> Ready {
        let n = self.conns.len();
        let started = self.clock.now_ns();
        // A ramp opens every connection at its join, during the run.
        let mut next = if self.ramp { n } else { 0 };
        loop {
            while next < n && self.connecting < CONNECTS_IN_FLIGHT {
                self.open(next as u32);
                next += 1;
            }
            let now = self.clock.now_ns();
            if (next == n && self.connecting == 0 && self.joining == 0)
                || stop.load(Ordering::Relaxed)
                || now > started + self.plan.timeout_ns.max(1_000_000_000)
                || self.ls.fatal.is_some()
            {
                break;
            }
            if let Err(e) = self.ring.submit_and_wait_ns(WAIT_NS_MAX) {
                self.ls.fail(self.plan.index, &e);
            }
            self.reap();
        }
        // Joins the server never finished within the connect phase fail as timeouts.
        let now = self.clock.now_ns();
        for c in 0..n as u32 {
            if self.conns[c as usize].joining && !self.tls_timed_out(c) {
                let reason = format!(
                    "{} join timeout: no answer within {}",
                    self.fp.spec.kind,
                    crate::units::fmt_ns(self.plan.timeout_ns.max(1_000_000_000))
                );
                self.join_failed(c, None, reason, now);
            }
        }
        let established = (0..self.members as u32)
            .filter(|&c| self.member_up(c))
            .count();
        Ready {
            worker: self.plan.index,
            established,
            failed: if self.ramp {
                0
            } else {
                self.members - established
            },
            first_errno: self.first_errno,
            establish_ns: self.clock.now_ns() - started,
            fatal: self.ls.fatal.as_ref().map(|e| e.to_string()),
            features: self.features.clone(),
            join_error: self.first_join_error.clone(),
        }
    }

    /// Frames now due: each goes out on its connection, or waits behind the send in
    /// the kernel, or (connection down) is not sent.
    fn dispatch_due(&mut self, now: Nanos) -> u64 {
        let mut n = 0;
        while let Some((c, k, intended)) = self.cursor.pop_due(now) {
            n += 1;
            self.out.counters.dispatched += self.slots as u64;
            self.out.counters.note_dispatch(intended, now);
            self.out.hist.dispatch_lag.saturating_record(now - intended);
            let s = self.sender(c);
            if !self.conns[s as usize].up {
                self.out.counters.frames.not_sent += self.slots as u64;
                continue;
            }
            if let Some(d) = self.down.as_mut() {
                d.joined(c, now); // the server learns the member from its first frame
            }
            let conn = &mut self.conns[s as usize];
            if conn.pend == 0 {
                conn.pend_k = k;
            }
            conn.pend += 1;
            if !conn.sending {
                self.send_pending(s);
            }
        }
        n
    }

    /// Sends connection `c`'s waiting frames (TCP: up to [`SEND_FRAMES`] ticks of its
    /// members' frames in one send, tick by tick, slot by slot; UDP: one datagram).
    fn send_pending(&mut self, c: u32) {
        let g = self.fp.grid;
        let gj = self.plan.conn_offset as u64 + u64::from(self.member(c));
        let (room, member) = self.room_member(c);
        let conn = &mut self.conns[c as usize];
        let count = (conn.pend as usize).min(if self.udp { 1 } else { SEND_FRAMES });
        let base = c as usize * self.send_stride;
        let slots = self.slots;
        // Slot s's room on the wire is `room + s x rooms` (`FramePlan::wire_room`),
        // the division behind `rooms()` taken once per send, none with one slot.
        let stride = if slots == 1 { 0 } else { g.rooms() as u32 };
        for i in 0..count {
            let k = conn.pend_k + i as u64;
            let intended_ns = g.intended_ns(gj, k);
            for (s, st) in self.stamps[i * slots..(i + 1) * slots]
                .iter_mut()
                .enumerate()
            {
                *st = FrameHeader {
                    room: room + s as u32 * stride,
                    member,
                    flags: 0,
                    entries: 0,
                    seq: k,
                    intended_ns,
                };
            }
        }
        let stamps = &self.stamps[..count * slots];
        let len = if self.udp {
            stamps[0].encode(self.send_buf.region_mut(base..base + HEADER_BYTES));
            self.wire_len
        } else {
            let region = self.send_buf.region_mut(base..base + self.send_stride);
            self.codecs[c as usize].encode_uplink(stamps, region)
        };
        conn.pend_k += count as u64;
        conn.pend -= count as u32;
        conn.sending = true;
        conn.send_off = 0;
        conn.send_len = len as u32;
        let frames = count * slots;
        conn.send_frames = frames as u32;
        self.out.counters.sent += frames as u64;
        self.out.counters.frames.sent += frames as u64;
        self.push_send(c);
    }

    fn push_send(&mut self, c: u32) {
        let conn = &self.conns[c as usize];
        let base = c as usize * self.send_stride;
        let (off, end) = (conn.send_off as usize, conn.send_len as usize);
        if self.tls_on(c) {
            return self.tls_send_plain(c, false, off, end - off);
        }
        let buf = self.send_buf.kernel_ptr(base + off..base + end);
        let len = (end - off) as u32;
        let entry = on_target!(self.target(c), |t| opcode::Send::new(t, buf, len).build())
            .user_data(self.token(c, Op::Send));
        // SAFETY: the send reads connection `c`'s region of `send_buf`, which is not
        // rewritten while `sending` (see `push`).
        unsafe { self.push(c, &entry) };
    }

    fn reap(&mut self) -> usize {
        let n = self.ring.reap_into(&mut self.cqes);
        self.ops_in_ring -= n as u64;
        let now_t = self.clock.ticks();
        let now = self.clock.ns(now_t);
        // The wall clock at `now_t`: a stamp's age is measured from both readings.
        let wall = self
            .rx
            .as_ref()
            .map_or(0, |_| crate::wallclock::now_unix_ns());
        for i in 0..n {
            let (data, res) = self.cqes[i];
            let Some(t) = Token::decode(data) else {
                continue;
            };
            let conn = &mut self.conns[t.conn as usize];
            conn.ops -= 1;
            if t.generation != conn.generation {
                continue; // an operation of a connection since closed
            }
            match t.op {
                Op::Connect => {
                    self.connecting -= 1;
                    if res < 0 {
                        self.conns[t.conn as usize].connecting = false;
                        self.connect_failed(t.conn, -res);
                    } else {
                        self.connected(t.conn);
                    }
                }
                Op::Send => {
                    if res > 0 {
                        self.out.counters.bytes_sent += res as u64;
                    }
                    if self.tls_on(t.conn) {
                        self.tls_on_send(t.conn, res, now);
                    } else {
                        self.on_send(t.conn, res, now);
                    }
                }
                Op::Recv => {
                    let at = self.arrival(t.conn, res, now_t, now, wall);
                    self.on_recv(t.conn, res, at)
                }
                Op::Close => {}
            }
        }
        n
    }

    fn on_send(&mut self, c: u32, res: i32, now: Nanos) {
        if self.conns[c as usize].ctl_sending {
            return self.on_ctl_send(c, res, now);
        }
        if res < 0 {
            if self.udp {
                // ECONNREFUSED (an ICMP unreachable) and the like: the frame is lost,
                // which the receivers count; the socket stays.
                self.conns[c as usize].sending = false;
            } else {
                self.disconnect(c, now);
                return;
            }
        } else {
            let conn = &mut self.conns[c as usize];
            conn.send_off += res as u32;
            if conn.send_off < conn.send_len {
                self.push_send(c); // a partial write: the rest
                return;
            }
            conn.sending = false;
            // Frames count as done once wholly on the wire (the achieved rate).
            self.out.counters.completed += u64::from(conn.send_frames);
        }
        self.send_next(c);
    }

    /// Connection `c` has no send in the kernel: join or control bytes first, then
    /// the frames waiting.
    fn send_next(&mut self, c: u32) {
        if self.ctl.get(c as usize).is_some_and(|x| !x.next.is_empty()) {
            self.flush_ctl(c);
        } else if self.conns[c as usize].pend > 0 && self.conns[c as usize].up {
            self.send_pending(c);
        }
    }

    /// A send of join or control bytes completed (a short write sends the rest).
    fn on_ctl_send(&mut self, c: u32, res: i32, now: Nanos) {
        if res < 0 {
            return self.disconnect(c, now);
        }
        let conn = &mut self.conns[c as usize];
        let ctl = &mut self.ctl[c as usize];
        ctl.busy.drain(..res as usize);
        conn.sending = false;
        conn.ctl_sending = false;
        if !ctl.busy.is_empty() {
            // The rest goes before anything queued since.
            let mut rest = std::mem::take(&mut ctl.busy);
            rest.extend_from_slice(&ctl.next);
            ctl.next.clear();
            ctl.busy = std::mem::replace(&mut ctl.next, rest);
        }
        self.send_next(c);
    }

    /// When connection `c`'s receive of `res` bytes arrived: its kernel timestamp
    /// (`wall`: the wall clock at `now_t`, read with it once per batch), else `now`,
    /// the reap. A receive with bytes and no timestamp ends the sleeping through
    /// completions.
    fn arrival(&mut self, c: u32, res: i32, now_t: Ticks, now: Nanos, wall: u64) -> Nanos {
        let Some(rx) = self.rx.as_ref().filter(|_| res > 0) else {
            return now;
        };
        match rx.stamp_ns(c as usize) {
            Some(stamp) => self
                .clock
                .ns(stamps::arrival(&self.clock, now_t, wall, stamp)),
            None => {
                self.rx_missing += 1;
                now
            }
        }
    }

    fn on_recv(&mut self, c: u32, res: i32, now: Nanos) {
        if res <= 0 {
            if self.udp && res < 0 {
                self.arm_recv(c); // transient on a connected UDP socket
            } else {
                self.disconnect(c, now);
            }
            return;
        }
        self.out.counters.bytes_received += res as u64;
        if self.tls_on(c) {
            return self.tls_on_recv(c, res as usize, now);
        }
        if self.udp {
            let base = c as usize * self.recv_stride;
            let bytes = self.recv_buf.region(base..base + res as usize);
            let counters = &mut self.out.counters.frames;
            deliver(
                &mut self.book,
                self.down.as_mut(),
                c,
                bytes,
                now,
                &mut self.out.hist,
                counters,
            );
            self.arm_recv(c);
            return;
        }
        if self.plain_received(c, res as usize, now) {
            self.arm_recv(c);
        }
    }

    /// `n` bytes arrived in connection `c`'s receive region after the bytes it kept:
    /// the join's answers, then downlink messages; an unfinished message is kept at
    /// the front. Returns whether the connection stays open and receiving (the caller
    /// arms its next receive).
    fn plain_received(&mut self, c: u32, n: usize, now: Nanos) -> bool {
        let base = c as usize * self.recv_stride;
        let keep = self.conns[c as usize].recv_keep as usize;
        let end = keep + n;
        let mut pos = 0;
        if self.conns[c as usize].joining {
            match self.feed_join(c, base, end) {
                Ok(Some(consumed)) => pos = consumed,
                Ok(None) => return true, // pending: the rest kept
                Err(()) => return false, // failed: closed
            }
        }
        match self.decode_stream(c, base + pos, base + end, now) {
            Ok(used) => pos += used,
            Err(reason) => {
                // Not the protocol: the connection is out of step; reopen it.
                if self.first_bad.is_none() {
                    let rest = self.recv_buf.region(base + pos..base + end);
                    self.first_bad = Some(format!(
                        "{reason}: \"{}\"",
                        crate::proto::escape_prefix(rest, 64)
                    ));
                }
                self.out.counters.frames.foreign += 1;
                self.disconnect(c, now);
                return false;
            }
        }
        if !self.conns[c as usize].up {
            return false; // closed by a control message (a WebSocket close)
        }
        let tail = end - pos;
        if tail == self.recv_stride {
            self.first_bad.get_or_insert_with(|| {
                format!(
                    "a message larger than the receive region ({} bytes)",
                    self.recv_stride
                )
            });
            self.out.counters.frames.foreign += 1;
            self.disconnect(c, now);
            return false;
        }
        if pos > 0 && tail > 0 {
            self.recv_buf.copy_within(base + pos..base + end, base);
        }
        self.conns[c as usize].recv_keep = tail as u32;
        self.flush_ctl(c);
        true
    }

    /// Feeds the bytes at `recv_buf[base..end]` to connection `c`'s join: `Some(n)`
    /// once joined (the bytes after `n` are downlink bytes); `None` while pending (the
    /// rest kept); `Err` when it failed (the connection closed). With `--tls`, NATS's
    /// upgrade starts once its plaintext `INFO` is answered (the answer waits for the
    /// session).
    fn feed_join(&mut self, c: u32, base: usize, end: usize) -> Result<Option<usize>, ()> {
        self.set_join_rooms(c);
        let bytes = self.recv_buf.region(base..base + end);
        let out = &mut self.ctl[c as usize].next;
        match self.codecs[c as usize].join_feed(&self.join_rooms, bytes, out) {
            Join::Joined { consumed } => {
                self.flush_ctl(c);
                self.joined(c, self.clock.ticks());
                Ok(Some(consumed))
            }
            Join::Pending { consumed } => {
                let tail = end - consumed;
                if tail == self.recv_stride {
                    let e = JoinError {
                        proto: self.fp.spec.kind,
                        kind: JoinFailure::Protocol,
                        reason: format!(
                            "an answer longer than the receive region ({} bytes)",
                            self.recv_stride
                        ),
                    };
                    self.join_failed(c, Some(e.kind), e.to_string(), self.clock.now_ns());
                    return Err(());
                }
                if self.plan.tls.is_some()
                    && !self.tls_on(c)
                    && !self.ctl[c as usize].next.is_empty()
                {
                    // The greeting is answered: the rest goes over TLS.
                    self.conns[c as usize].recv_keep = 0;
                    self.tls_start(c);
                    return if self.conns[c as usize].fd != -1 {
                        Ok(None)
                    } else {
                        Err(())
                    };
                }
                if consumed > 0 && tail > 0 {
                    self.recv_buf.copy_within(base + consumed..base + end, base);
                }
                self.conns[c as usize].recv_keep = tail as u32;
                self.flush_ctl(c);
                Ok(None)
            }
            Join::Failed(e) => {
                self.join_failed(c, Some(e.kind), e.to_string(), self.clock.now_ns());
                Err(())
            }
        }
    }

    /// Decodes the downlink bytes at `recv_buf[from..to]` of connection `c`: frames
    /// delivered to the accounting, pings answered (queued in `ctl`), a close closes.
    /// Returns the bytes consumed (the rest is a partial message), or why the bytes
    /// are not the protocol.
    fn decode_stream(
        &mut self,
        c: u32,
        from: usize,
        to: usize,
        now: Nanos,
    ) -> Result<usize, &'static str> {
        let m = self.member(c);
        let mut pos = from;
        let mut messages = 0;
        while pos < to {
            let input = self.recv_buf.region_mut(pos..to);
            let (book, hist) = (&mut self.book, &mut self.out.hist);
            let counters = &mut self.out.counters.frames;
            match self.codecs[c as usize].decode(input) {
                Down::Message { consumed, payload } => {
                    deliver(
                        book,
                        self.down.as_mut(),
                        m,
                        &input[payload],
                        now,
                        hist,
                        counters,
                    );
                    pos += consumed;
                    messages += 1;
                    if messages == 2 {
                        // Two frames in one receive share its stamp: the loop wakes
                        // for each receive from now on.
                        self.rx_batch = false;
                    }
                }
                Down::Control { consumed, control } => {
                    match control {
                        Control::Ping { payload } => {
                            let mut pong = [0u8; CONTROL_BYTES_MAX];
                            let n = self.codecs[c as usize].encode_pong(&input[payload], &mut pong);
                            self.ctl[c as usize].next.extend_from_slice(&pong[..n]);
                        }
                        Control::Error { text } => {
                            self.first_bad.get_or_insert_with(|| {
                                format!(
                                    "{} server error: {}",
                                    self.fp.spec.kind,
                                    crate::proto::escape_prefix(&input[text], 200)
                                )
                            });
                        }
                        Control::Close { code } => {
                            self.first_bad.get_or_insert_with(|| {
                                format!(
                                    "{} server closed the connection (close code {})",
                                    self.fp.spec.kind,
                                    code.map_or("none".into(), |c| c.to_string())
                                )
                            });
                            self.disconnect(c, now);
                            return Ok(pos + consumed - from);
                        }
                        Control::Pong | Control::Ack { .. } => {}
                    }
                    pos += consumed;
                }
                Down::Incomplete { consumed } => {
                    pos += consumed;
                    break;
                }
                Down::Invalid { reason } => return Err(reason),
            }
        }
        Ok(pos - from)
    }

    /// `--connect-rate`: opens the connections whose join has come; returns when the
    /// next one joins (`None`: all have).
    fn open_joins(&mut self, now: Nanos) -> Option<Nanos> {
        let first = self.plan.conn_offset as u64;
        while self.next_join < self.members {
            let at = self.fp.grid.join_ns(first + self.next_join as u64);
            if at > now {
                return Some(at);
            }
            let c = self.next_join as u32;
            self.next_join += 1;
            self.conns[c as usize].reopen_at = 0;
            self.open(c);
        }
        None
    }

    /// The connections up now (the per-interval `connections_active`).
    fn set_active(&mut self) {
        // With socket pairs: sockets up / 2 (a member with one socket down counts half).
        let sockets = self.conns.len() / self.members.max(1);
        self.out.counters.frames.connections_active =
            ((self.conns.len() - self.down_count) / sockets.max(1)) as u64;
    }

    /// Reopens connections whose backoff is over: only those on the watch list
    /// (down, waiting for their reopen), O(watched) not O(connections). A connection
    /// whose operations are still in the ring, or whose reopen is not yet due, goes
    /// back on the list.
    fn scan_reopens(&mut self, now: Nanos) {
        for _ in 0..self.reopen_q.len() {
            let Some(c) = self.reopen_q.pop() else { break };
            #[cfg(test)]
            {
                self.scan_visits += 1;
            }
            let conn = &mut self.conns[c as usize];
            conn.watched = false;
            if conn.up || conn.connecting {
                continue;
            }
            if conn.ops == 0 && conn.reopen_at <= now {
                self.open(c);
            } else if conn.reopen_at != Nanos::MAX {
                self.watch(c);
            }
        }
    }

    /// Closes the sockets and waits (while operations keep finishing, a second at
    /// most without progress) for the kernel to let go of the buffers.
    fn quiesce(&mut self) {
        for c in 0..self.conns.len() as u32 {
            match self.conns[c as usize].fd {
                -1 => {}
                REGISTERED => {
                    let shut = opcode::Shutdown::new(types::Fixed(c), libc::SHUT_RDWR)
                        .build()
                        .user_data(self.token(c, Op::Close));
                    // SAFETY: a shutdown of a file-table slot points into no memory; it
                    // wakes pending receives so they complete.
                    unsafe { self.push(c, &shut) };
                }
                // SAFETY: a plain syscall on a descriptor this worker owns; it wakes
                // pending receives so they complete.
                fd => unsafe {
                    libc::shutdown(fd, libc::SHUT_RDWR);
                },
            }
        }
        self.ops_in_ring = self
            .ring
            .wait_out(self.ops_in_ring, std::time::Duration::from_secs(1));
        for conn in self.conns.iter_mut() {
            if conn.fd >= 0 {
                socket::close(conn.fd);
            }
            // A file-table slot's socket closes with the ring.
            conn.fd = -1;
        }
    }
}

impl Hooks for FrameWorker<'_> {
    loop_parts!();

    fn on_start(&mut self) {
        self.running = true;
    }

    fn at_end(&self, now: Nanos) -> bool {
        self.cursor.all_dispatched() && now >= self.plan.duration_ns
    }

    fn on_stop(&mut self, _now: Nanos, interrupted: bool, _pace: &Pacer) -> u64 {
        // Downlink frames of server ticks after the schedule are not expected
        // (`downlink`).
        if let Some(d) = self.down.as_mut() {
            d.end_at(self.ls.stopped_ns);
        }
        // Frames planned in the last budget before the end get it to arrive.
        if interrupted {
            0
        } else {
            (self.fp.budget_ns + 10_000_000).min(DRAIN_NS_MAX)
        }
    }

    fn dispatch_due(&mut self, _now_t: Ticks, now: Nanos) -> u64 {
        if self.ramp {
            self.next_join_ns = self.open_joins(now);
        }
        FrameWorker::dispatch_due(self, now)
    }

    fn reap(&mut self) -> usize {
        FrameWorker::reap(self)
    }

    fn scan(&mut self, now: Nanos) {
        if !self.ls.stopping {
            self.scan_reopens(now);
        }
    }

    fn before_snapshot(&mut self) {
        self.set_active();
    }

    fn drained(&self) -> bool {
        false // the drain lasts its budget: frames still on their way may arrive
    }

    fn timers(&self) -> bool {
        !self.reopen_q.is_empty()
    }

    fn completions_per_wake(&self) -> u32 {
        // Frames are timed by the kernel: the loop need not wake for them while no
        // connect or join is under way and the schedule runs (the drain ends by its
        // budget, not by a count).
        if self.rx.is_some()
            && self.rx_missing == 0
            && self.rx_batch
            && self.running
            && !self.ls.stopping
            && self.connecting == 0
            && self.joining == 0
        {
            self.wake_batch
        } else {
            1
        }
    }

    fn next_due(&self) -> Option<Nanos> {
        match (self.cursor.next_due(), self.next_join_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn finish(&mut self, pace: &Pacer, end: Nanos) -> WorkerTotals {
        let stopped = self.ls.stopped_ns;
        for conn in self.conns.iter_mut() {
            if conn.up {
                conn.uptime += stopped.saturating_sub(conn.up_since.min(stopped));
            }
            self.out.counters.frames.not_sent += u64::from(conn.pend) * self.slots as u64;
            conn.pend = 0;
        }
        let mut book = self.book.totals();
        let (mut outside, mut shift_ns) = (0, 0);
        if let Some(d) = self.down.as_mut() {
            // Aggregated: what is expected and received is the downlink frames.
            let t = d.totals();
            book.expected = t.expected;
            book.received = t.received;
            book.per_receiver = t.per_receiver;
            book.lost_at_end = t.lost_at_end;
            outside = t.outside;
            shift_ns = t.shift_ns;
        }
        self.out.counters.frames.lost += book.lost_at_end;
        let (cpu_ns, spin_ns, busy_at_stop) = pace.totals(stopped);
        if self.rx.is_some() && self.rx_missing == 0 {
            self.features.push(stamps::FEATURE);
        }
        let first = self.plan.conn_offset as u64;
        let n = self.members as u64;
        let grid = self.fp.grid;
        let planned = (first..first + n)
            .map(|j| grid.planned(j, self.plan.duration_ns))
            .sum::<u64>()
            * self.slots as u64;
        self.set_active();
        WorkerTotals {
            core: self.plan.core,
            cpu_ns,
            spin_ns,
            sleep_ns: pace.sleep_ns(),
            sleeps: pace.sleeps(),
            timer_late_ns: pace.timer_late_ns(),
            timer_late_p995_ns: pace.timer_late_p995_ns(),
            wall_ns: end,
            stopped_ns: stopped,
            last_done_ns: end,
            busy_at_stop,
            completed: book.received,
            backlog_peak: 0,
            histogram_allocations: 0, // set by the outbox
            ring_features: self.features.clone(),
            first_protocol_error: self.first_bad.take(),
            entries: Vec::new(),
            error: self.ls.fatal.clone(),
            frames: Some(FrameTotals {
                planned,
                expected: book.expected,
                received: book.received,
                per_receiver: book.per_receiver,
                fanout_expected: book.fanout_expected,
                fanout_complete: book.fanout_complete,
                // A member's residency is its receiving socket's.
                // Slot by slot, as `per_receiver`.
                uptime_ns: (0..self.slots)
                    .flat_map(|_| self.conns[..self.members].iter().map(|c| c.uptime))
                    .collect(),
                span_ns: (0..self.slots)
                    .flat_map(|_| first..first + n)
                    .map(|j| stopped.saturating_sub(grid.joined_ns(j)))
                    .collect(),
                reconnects: self.reconnects,
                outside,
                shift_ns,
                join_failures: self.join_failures,
                first_join_error: self.first_join_error.take(),
            }),
            replies: Default::default(),
        }
    }
}

/// One whole frame `bytes` arrived on local connection `c` at `now`: a relayed frame
/// (no `down`), or with `--aggregate` a downlink frame whose entries are the room's
/// frames of one server tick. Anything else is foreign.
#[inline]
fn deliver(
    book: &mut MemberBooks,
    down: Option<&mut DownBook>,
    c: u32,
    bytes: &[u8],
    now: Nanos,
    hist: &mut Histograms,
    n: &mut FrameCounters,
) {
    match (FrameHeader::decode(bytes), down) {
        (Ok(h), None) if !h.aggregate() => book.arrive(c, &h, now, hist, n),
        (Ok(h), Some(d)) if h.aggregate() && book.addressed_to(c, &h) => {
            // `decode` checked that the entries are in `bytes`.
            for i in 0..h.entries as usize {
                let e = Entry::decode(bytes, i);
                if !book.carried(c, &e, now, hist, n) {
                    n.foreign += 1;
                }
            }
            d.arrive(c, &h, now, hist, n);
        }
        _ => n.foreign += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::frames::timetable::SENDERS_ALL;
    use crate::engine::worker_plan::FramePlan;

    pub(crate) fn worker_plan(connections: usize) -> WorkerPlan {
        let mut p = WorkerPlan::for_tests(connections);
        p.transport = Transport::Udp;
        p.frames = Some(FramePlan {
            spec: crate::proto::frame_proto::FrameSpec::new(
                crate::proto::frame_proto::FrameProtoKind::Blaster,
                crate::proto::frame_proto::TOPIC_DEFAULT,
                crate::proto::frame_proto::WS_PATH_DEFAULT,
                "localhost",
                64,
            )
            .unwrap(),
            grid: FrameGrid {
                tick_ns: 20_000_000,
                connections: connections as u64,
                room_size: 10,
                join_gap_ns: 0,
                joined_at_start: false,
                senders: SENDERS_ALL,
            },
            frame_size: 64,
            budget_ns: 20_000_000,
            echo: false,
            down_size: None,
            members_per_connection: 1,
        });
        p
    }

    /// The reopen scan visits only connections waiting for their reopen (issue 22):
    /// 300 connections, 2 of them down, cost 2 visits per scan, not 300; the count of
    /// connections up is kept as they change, never recounted.
    #[test]
    fn the_reopen_scan_visits_only_connections_waiting_to_reopen() {
        let p = worker_plan(300);
        let (snap_tx, _snap_rx) = crossbeam_channel::unbounded();
        let (_recycle_tx, recycle_rx) = crossbeam_channel::unbounded();
        let mut w = FrameWorker::new(&p, snap_tx, recycle_rx).expect("io_uring available");
        for c in 0..300 {
            w.open(c); // UDP: up at once
        }
        assert_eq!(w.down_count, 0);
        for c in [7, 200] {
            w.disconnect(c, 0);
            w.conns[c as usize].reopen_at = 1_000;
        }
        // Not while its receive is still in the ring (its region is the kernel's).
        w.scan_reopens(1_000);
        assert_eq!((w.scan_visits, w.down_count), (2, 2));
        for c in [7, 200] {
            w.conns[c as usize].ops = 0; // as if the receive had completed
        }
        assert_eq!(w.down_count, 2);
        w.set_active();
        assert_eq!(w.out.counters.frames.connections_active, 298);
        // Not yet due: visited, kept on the list.
        w.scan_reopens(500);
        assert_eq!(w.scan_visits, 4);
        assert!(w.timers());
        // Due: reopened, off the list; nothing left to visit.
        w.scan_reopens(1_000);
        assert_eq!((w.scan_visits, w.down_count), (6, 0));
        assert!(!w.timers());
        w.scan_reopens(2_000);
        assert_eq!(w.scan_visits, 6);
        w.quiesce();
    }
}
