//! The UDP worker: connected UDP sockets ("flows"), one datagram per request, each
//! starting with blaster's header (magic, flow, sequence, intended instant; see
//! `proto::udp_header`).
//!
//! Request/response: a response is matched to its request by (flow, sequence) through
//! a pre-sized window per flow (slot = seq mod W). A request whose response has not
//! come within `--timeout` is lost: an error, its latency recorded at the timeout. A
//! response for a slot already answered is a duplicate; one whose sequence is below the
//! highest already answered on its flow is reordered; one that arrives after its
//! request was counted lost is late; anything without our header, or for a flow or
//! sequence we never sent, is foreign. A response datagram that carries further whole
//! request datagrams after the first (an echo through a byte stream joined them) counts
//! those as joined; their requests are not answered by it and stay lost.
//!
//! Blast (`--no-response`): fire and forget, at the timetable's rate or as fast as the
//! send buffers allow (`--rate max`). With UDP GSO (`UDP_SEGMENT`, probed per socket)
//! one send carries up to 64 datagrams of the same flow; without it, one send per
//! datagram, all submitted in one batch per loop iteration.
//!
//! Send buffers come from a fixed pool whose payload bytes are written once at start;
//! only the 24-byte header is written per datagram. Nothing allocates per request.
//!
//! `--replay`: the recording's requests come from the replay's cursor in place of the
//! timetable, each datagram the header and then the recorded bytes (copied into its
//! send buffer when it is sent; one datagram per send). Responses are matched by the
//! header as in any UDP run, so the target must send the header back (an echo).
//! Requests waiting in the backlog keep their chunk of the recording from being handed
//! back to the reader until they are sent or fail.

use super::conn_table::{Fifo, IndexQueue};
use super::driver::{Channels, Outbox, Ready, arm_fault_hook, drive};
use super::iobuf::IoBuf;
use super::loop_core::LoopCore;
use super::pacing::Pacer;
use super::recorder::{ErrorKind, Histograms, Snapshot, WorkerTotals};
use super::replay::Cursor;
use super::ring::Ring;
use super::run_loop::Hooks;
use super::token::{Op, Token};
use super::worker_plan::{Transport, WorkerPlan, timetable};
use crate::clock::{Clock, Nanos, Ticks};
use crate::limits::{CQE_BATCH_MAX, DRAIN_NS_MAX};
use crate::proto::udp_header::{self, HEADER_LEN, UdpHeader};
use crate::schedule::{Arrivals, Schedule};
use crossbeam_channel::{Receiver, Sender};
use io_uring::{opcode, types};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Most datagrams one GSO send may carry (the kernel's UDP_MAX_SEGMENTS: 128 since
/// Linux 6.9; an older kernel refuses larger sends, and the probe falls back).
const GSO_SEGMENTS_MAX: usize = 128;
/// Largest GSO send, bytes (a UDP datagram's maximum payload, with margin).
const GSO_BYTES_MAX: usize = 65_000;
/// Send buffers per worker in request/response mode.
const SEND_BUFFERS_RR: usize = 1024;
/// Send buffers per worker in blast mode (each holds up to a GSO batch).
const SEND_BUFFERS_BLAST: usize = 256;
/// Window slots per flow, at least and at most (power of two).
const WINDOW_MIN: usize = 64;
const WINDOW_MAX: usize = 1 << 20;
/// Receive buffer per flow: a response larger than this is truncated (only the header
/// is needed to match it).
const RECV_BYTES: usize = 2048;
/// `--replay`: send buffers per worker hold at most this many bytes (a recording's
/// longest datagram may be 64 KiB), and there are at least `SEND_BUFFERS_REPLAY_MIN`.
const SEND_POOL_BYTES_REPLAY: usize = 16 << 20;
const SEND_BUFFERS_REPLAY_MIN: usize = 64;

/// A due request: its intended instant, when it was dispatched, and (`--replay`) its
/// global sequence number, whose bytes the cursor holds.
#[derive(Clone, Copy, Default)]
struct Due {
    intended_ns: Nanos,
    dispatched: Ticks,
    seq: u64,
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum SlotState {
    #[default]
    Empty,
    InFlight,
    Done,
    Lost,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    seq: u64,
    intended_ns: Nanos,
    sent: Ticks,
    state: SlotState,
}

struct Flow {
    fd: RawFd,
    /// Global flow id carried in the header.
    id: u32,
    next_seq: u64,
    /// Lowest sequence that may still be in flight.
    oldest: u64,
    /// One past the highest sequence answered so far.
    highest_rx: u64,
    recv_armed: bool,
    /// On the scan's watch list.
    watched: bool,
}

/// Runs one UDP worker to completion (see [`super::tcp::run_worker`] for the
/// protocol with the main thread).
pub fn run_udp_worker(plan: WorkerPlan, stop: Arc<AtomicBool>, ch: Channels) {
    drive(&plan, &stop, ch, "UDP setup", UdpWorker::new);
}

struct UdpWorker<'p> {
    plan: &'p WorkerPlan,
    /// The ring, what is in it, and how the run ends.
    core: LoopCore,
    flows: Vec<Flow>,
    window: Box<[Slot]>,
    /// Slots per flow: a power of two, so a sequence's slot is a mask, not a division.
    window_len: usize,
    send_bufs: IoBuf,
    send_buf_len: usize,
    free_bufs: Fifo<u32>,
    /// Per send buffer: flow index and how many datagrams it carries.
    buf_use: Box<[(u32, u32)]>,
    recv_bufs: IoBuf,
    backlog: Fifo<Due>,
    dgram_len: usize,
    /// Datagrams per send (GSO segments; 1 without GSO).
    batch: usize,
    blast: bool,
    clock: Clock,
    /// This interval's histograms and counters, and the channel to the collector.
    out: Outbox,
    cqes: Box<[(u64, i32)]>,
    schedule: Option<Arrivals>,
    /// `--replay`: the recording's requests in place of the schedule's.
    replay: Option<Cursor>,
    next_k: u64,
    total_k: u64,
    next_flow: usize,
    inflight: u64,
    /// Flows with requests that may still be in flight: the only ones the timeout
    /// scan visits (each listed at most once, `Flow::watched`).
    watch_q: IndexQueue,
    completed_total: u64,
    backlog_peak: u64,
    /// Flows the timeout scan has visited (tests check it is O(watched)).
    #[cfg(test)]
    scan_visits: u64,
    /// When the last response completed, and the same instant in ns since start. A
    /// completion batch is reaped at one instant, so the tick-to-ns conversion is done
    /// once per batch (when the instant changes), not once per response.
    last_done: Ticks,
    last_done_ns: Nanos,
}

pub(super) fn udp_socket(
    plan: &WorkerPlan,
    gso_len: Option<usize>,
) -> std::io::Result<(RawFd, bool)> {
    let s = Socket::new(
        Domain::for_address(plan.target),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    let _ = s.set_send_buffer_size(4 << 20);
    let _ = s.set_recv_buffer_size(4 << 20);
    s.connect(&SockAddr::from(plan.target))?;
    let fd = s.into_raw_fd();
    let mut gso = false;
    if let Some(len) = gso_len {
        let v = len as libc::c_int;
        // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live local.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        gso = rc == 0;
    }
    Ok((fd, gso))
}

impl<'p> UdpWorker<'p> {
    fn new(
        plan: &'p WorkerPlan,
        snap_tx: Sender<Snapshot>,
        recycle_rx: Receiver<Histograms>,
    ) -> std::io::Result<Self> {
        let blast = plan.transport == Transport::UdpBlast;
        // A replay's payload is as long as its longest request.
        let dgram_len = HEADER_LEN + plan.payload.len();
        // GSO sends segments of one size: a replay's datagrams go one per send.
        let want_batch = if blast && plan.replay.is_none() {
            (GSO_BYTES_MAX / dgram_len).clamp(1, GSO_SEGMENTS_MAX)
        } else {
            1
        };
        let mut flows = Vec::with_capacity(plan.connections);
        let mut gso_all = want_batch > 1;
        for i in 0..plan.connections {
            let (fd, gso) = udp_socket(plan, (want_batch > 1).then_some(dgram_len))?;
            gso_all &= gso;
            flows.push(Flow {
                fd,
                id: (plan.conn_offset + i) as u32,
                next_seq: 0,
                oldest: 0,
                highest_rx: 0,
                recv_armed: false,
                watched: false,
            });
        }
        let batch = if gso_all { want_batch } else { 1 };
        let buffers = if blast {
            SEND_BUFFERS_BLAST
        } else {
            SEND_BUFFERS_RR
        };
        let send_buf_len = dgram_len * batch;
        let buffers = match plan.replay {
            Some(_) => {
                (SEND_POOL_BYTES_REPLAY / send_buf_len).clamp(SEND_BUFFERS_REPLAY_MIN, buffers)
            }
            None => buffers,
        };
        let mut send_bufs = vec![0u8; buffers * send_buf_len];
        for d in send_bufs.chunks_mut(dgram_len) {
            d[HEADER_LEN..].copy_from_slice(&plan.payload);
        }
        let send_bufs = IoBuf::from_vec(send_bufs);
        let mut free_bufs = Fifo::with_capacity(buffers);
        for b in 0..buffers as u32 {
            let _ = free_bufs.push(b);
        }
        // Window per flow: the flow's share of rate x timeout, with a margin.
        let per_flow_rate = if plan.rate_rps.is_finite() {
            plan.rate_rps / plan.workers as f64 / plan.connections as f64
        } else {
            0.0
        };
        // A replay's bursts: at least the flow's share of the backlog, which is sized for
        // the recording's busiest second.
        let per_flow_burst = match plan.replay {
            Some(_) => plan.backlog_capacity / plan.connections.max(1),
            None => 0,
        };
        let window_len = if blast {
            1
        } else {
            ((per_flow_rate * plan.timeout_ns as f64 / 1e9 * 1.25) as usize)
                .max(per_flow_burst)
                .clamp(WINDOW_MIN, WINDOW_MAX)
                .next_power_of_two()
        };
        let mut ring = Ring::new((buffers + plan.connections + 64) as u32)?;
        ring.confine_io_workers(plan.core);
        arm_fault_hook(&mut ring);
        if blast {
            // Ahead of the ring's own features, as the report lists them.
            let gso = if gso_all {
                "udp_gso"
            } else {
                "udp_gso_unavailable"
            };
            ring.features.insert(0, gso);
        }
        // `--rate max` has no timetable: every free buffer is filled at once. A replay's
        // timetable is the recording's.
        let (schedule, total_k) = if plan.replay.is_some() {
            (None, 0)
        } else if plan.rate_rps.is_finite() {
            let (s, n) = timetable(plan);
            (Some(s), n)
        } else {
            (None, u64::MAX)
        };
        Ok(UdpWorker {
            plan,
            core: LoopCore::new(ring, plan),
            window: vec![Slot::default(); if blast { 0 } else { flows.len() * window_len }]
                .into_boxed_slice(),
            window_len,
            flows,
            send_bufs,
            send_buf_len,
            free_bufs,
            buf_use: vec![(0, 0); buffers].into_boxed_slice(),
            recv_bufs: IoBuf::zeroed(if blast {
                0
            } else {
                plan.connections * RECV_BYTES
            }),
            backlog: Fifo::with_capacity(plan.backlog_capacity),
            dgram_len,
            batch,
            blast,
            clock: Clock::new(),
            out: Outbox::shaped(plan.index, plan.hist_shape(), snap_tx, recycle_rx),
            cqes: vec![(0u64, 0i32); CQE_BATCH_MAX].into_boxed_slice(),
            schedule,
            replay: plan.replay.clone().map(Cursor::new),
            next_k: 0,
            total_k,
            next_flow: 0,
            inflight: 0,
            watch_q: IndexQueue::with_capacity(plan.connections),
            completed_total: 0,
            #[cfg(test)]
            scan_visits: 0,
            backlog_peak: 0,
            last_done: 0,
            last_done_ns: 0,
        })
    }

    /// Due instant of request `k` of the timetable (`Nanos::MAX` without one).
    #[inline]
    fn due_ns(&self, k: u64) -> Nanos {
        self.schedule.as_ref().map_or(Nanos::MAX, |s| s.due_ns(k))
    }

    fn arm_recv(&mut self, f: usize) {
        let flow = &mut self.flows[f];
        flow.recv_armed = true;
        let token = Token {
            conn: f as u32,
            op: Op::Recv,
            generation: 0,
        };
        let buf = self
            .recv_bufs
            .kernel_ptr(f * RECV_BYTES..(f + 1) * RECV_BYTES);
        let entry = opcode::Recv::new(types::Fd(flow.fd), buf, RECV_BYTES as u32)
            .build()
            .user_data(token.encode());
        // SAFETY: the receive writes into flow `f`'s region of `recv_bufs` (bounds
        // checked by `kernel_ptr`), owned by the worker, never reallocated, and
        // outliving the operation (leaked if the worker is dropped before it completes).
        unsafe { self.core.push(&[entry]) };
    }

    /// Sends up to `count` datagrams on one flow from one buffer. Returns how many.
    fn send_batch(&mut self, count: usize, intended: &[Due], now_t: Ticks) -> usize {
        let Some(b) = self.free_bufs.pop() else {
            return 0;
        };
        let f = self.next_flow;
        self.next_flow += 1;
        if self.next_flow == self.flows.len() {
            self.next_flow = 0;
        }
        let n = count.min(self.batch);
        let base = b as usize * self.send_buf_len;
        let sent_ns = self.clock.ns(now_t);
        // Connection wait is recorded once per run of datagrams dispatched at the same
        // instant (a whole batch under `--rate max`), not once per datagram.
        let mut run: (Ticks, u64) = (intended[0].dispatched, 0);
        let mut len = 0;
        for d in intended.iter().take(n) {
            let (intended_ns, dispatched) = (d.intended_ns, d.dispatched);
            let flow = &mut self.flows[f];
            let seq = flow.next_seq;
            flow.next_seq += 1;
            let at = base + len;
            // A replayed request's own bytes follow the header (one per send).
            len += match &self.replay {
                Some(r) => {
                    let bytes = r.bytes(d.seq);
                    self.send_bufs
                        .region_mut(at + HEADER_LEN..at + HEADER_LEN + bytes.len())
                        .copy_from_slice(bytes);
                    HEADER_LEN + bytes.len()
                }
                None => self.dgram_len,
            };
            UdpHeader {
                flow: flow.id,
                seq,
                intended_ns,
            }
            .write(self.send_bufs.region_mut(at..at + HEADER_LEN));
            if !self.blast {
                let slot = &mut self.window[self.slot_of(f, seq)];
                *slot = Slot {
                    seq,
                    intended_ns,
                    sent: now_t,
                    state: SlotState::InFlight,
                };
                self.inflight += 1;
                self.watch(f);
            }
            if dispatched != run.0 {
                self.record_wait(sent_ns, run);
                run = (dispatched, 0);
            }
            run.1 += 1;
        }
        self.record_wait(sent_ns, run);
        self.buf_use[b as usize] = (f as u32, n as u32);
        self.out.counters.sent += n as u64;
        let token = Token {
            conn: b,
            op: Op::Send,
            generation: 0,
        };
        let buf = self.send_bufs.kernel_ptr(base..base + len);
        let entry = opcode::Send::new(types::Fd(self.flows[f].fd), buf, len as u32)
            .build()
            .user_data(token.encode());
        // SAFETY: the send reads buffer `b` of `send_bufs`, owned by the worker and
        // never reallocated; `b` stays out of `free_bufs` (so is not rewritten) until
        // this send completes, and the memory outlives the operation (leaked if the
        // worker is dropped before it completes).
        unsafe { self.core.push(&[entry]) };
        n
    }

    /// Records `count` connection waits of requests dispatched at `dispatched`.
    #[inline]
    fn record_wait(&mut self, sent_ns: Nanos, (dispatched, count): (Ticks, u64)) {
        let wait = sent_ns.saturating_sub(self.clock.ns(dispatched));
        if count > 0 {
            self.out
                .hist
                .connection_wait
                .saturating_record_n(wait, count);
        }
    }

    /// Index in `window` of flow `f`'s slot for sequence `seq` (`window_len` is a power
    /// of two: a mask instead of a division per datagram).
    #[inline]
    fn slot_of(&self, f: usize, seq: u64) -> usize {
        debug_assert!(self.window_len.is_power_of_two());
        f * self.window_len + (seq as usize & (self.window_len - 1))
    }

    /// Whether flow `next_flow`'s window has room for its next sequence.
    #[inline]
    fn window_free(&self) -> bool {
        if self.blast {
            return true;
        }
        let f = self.next_flow;
        let seq = self.flows[f].next_seq;
        self.window[self.slot_of(f, seq)].state != SlotState::InFlight
    }

    /// One request: sent at once when a buffer and a window slot are free, else it
    /// waits in the backlog (its wait is connection wait).
    #[inline]
    fn dispatch_one(&mut self, due: Due, now_t: Ticks) {
        if self.backlog.is_empty()
            && !self.free_bufs.is_empty()
            && self.window_free()
            && self.send_batch(1, &[due], now_t) == 1
        {
            return;
        }
        if !self.backlog.push(due) {
            self.out.counters.error(ErrorKind::BacklogOverflow);
            self.out
                .hist
                .latency
                .saturating_record(self.plan.timeout_ns);
        }
    }

    /// Sends waiting requests while buffers and window slots allow; in blast mode
    /// packs up to a GSO batch per send.
    fn serve_backlog(&mut self, now_t: Ticks) {
        let mut group = [Due::default(); GSO_SEGMENTS_MAX];
        while !self.backlog.is_empty() && !self.free_bufs.is_empty() && self.window_free() {
            let n = self.backlog.len().min(self.batch);
            for g in group.iter_mut().take(n) {
                *g = self.backlog.pop().expect("not empty");
            }
            let sent = self.send_batch(n, &group[..n], now_t);
            debug_assert_eq!(sent, n);
        }
        self.backlog_peak = self.backlog_peak.max(self.backlog.len() as u64);
    }

    /// `--rate max`: fill every free buffer with a full batch.
    fn blast_max(&mut self, now_t: Ticks, now_ns: Nanos) -> u64 {
        let mut n = 0;
        let group = [Due {
            intended_ns: now_ns,
            dispatched: now_t,
            seq: 0,
        }; GSO_SEGMENTS_MAX];
        while !self.free_bufs.is_empty() {
            let sent = self.send_batch(self.batch, &group[..self.batch], now_t) as u64;
            self.out.counters.dispatched += sent;
            n += sent;
        }
        n
    }

    /// The next request due by `now_ns`, as (intended instant, global sequence number;
    /// 0 without a replay, which is all that needs it), advancing the timetable.
    #[inline]
    fn pop_due(&mut self, now_ns: Nanos) -> Option<(Nanos, u64)> {
        if let Some(r) = &mut self.replay {
            return r.pop_due(now_ns);
        }
        if self.next_k >= self.total_k {
            return None;
        }
        let intended = self.due_ns(self.next_k);
        if intended >= self.plan.duration_ns {
            self.total_k = self.next_k; // Poisson: the timetable's end
            return None;
        }
        if intended > now_ns {
            return None;
        }
        self.next_k += 1;
        Some((intended, 0))
    }

    /// `--replay`: hands the reader back the chunks whose requests are all sent (or
    /// failed): everything before the oldest request still in the backlog.
    #[inline]
    fn release_replayed(&mut self) {
        if let Some(r) = &mut self.replay {
            r.release_before(self.backlog.front().map(|d| d.seq));
            self.out.counters.replay_dry += std::mem::take(&mut r.starved);
        }
    }

    fn dispatch_due(&mut self, now_t: Ticks, now_ns: Nanos) -> u64 {
        if self.schedule.is_none() && self.replay.is_none() {
            return self.blast_max(now_t, now_ns);
        }
        let mut n = 0;
        while let Some((intended, seq)) = self.pop_due(now_ns) {
            let due = Due {
                intended_ns: intended,
                dispatched: now_t,
                seq,
            };
            n += 1;
            self.out.counters.dispatched += 1;
            self.out.counters.note_dispatch(intended, now_ns);
            self.out
                .hist
                .dispatch_lag
                .saturating_record(now_ns - intended);
            if !self.blast {
                self.dispatch_one(due, now_t);
            } else if !self.backlog.push(due) {
                // Blast: due datagrams go through the backlog to share GSO sends.
                self.out.counters.error(ErrorKind::BacklogOverflow);
            }
        }
        if self.blast {
            self.serve_backlog(now_t);
        }
        self.backlog_peak = self.backlog_peak.max(self.backlog.len() as u64);
        self.release_replayed();
        n
    }

    fn reap(&mut self) -> usize {
        let n = self.core.reap_into(&mut self.cqes);
        let now_t = self.clock.ticks();
        for i in 0..n {
            let (data, res) = self.cqes[i];
            let Some(token) = Token::decode(data) else {
                continue;
            };
            match token.op {
                Op::Send => self.on_send(token.conn, res),
                Op::Recv => self.on_recv(token.conn as usize, res, now_t),
                Op::Connect | Op::Close => {}
            }
        }
        n
    }

    fn on_send(&mut self, b: u32, res: i32) {
        let (_, n) = self.buf_use[b as usize];
        let _ = self.free_bufs.push(b);
        if res >= 0 {
            self.out.counters.bytes_sent += res as u64;
            return;
        }
        // Not sent: ECONNREFUSED (an ICMP port unreachable came back) is a connection
        // event; ENOBUFS and the like are transient. In request/response mode the
        // datagrams stay in their window slots and are counted lost at their timeout;
        // in blast mode each is an error.
        if -res == libc::ECONNREFUSED {
            self.out.counters.event(ErrorKind::ConnectRefused);
        }
        if self.blast {
            for _ in 0..n {
                self.out.counters.error(ErrorKind::Io);
            }
        }
    }

    fn on_recv(&mut self, f: usize, res: i32, done: Ticks) {
        self.flows[f].recv_armed = false;
        if res > 0 {
            self.out.counters.bytes_received += res as u64;
            let buf = self
                .recv_bufs
                .region(f * RECV_BYTES..f * RECV_BYTES + (res as usize).min(RECV_BYTES));
            // A replay's datagrams differ in length: no joined ones to find.
            if self.replay.is_none() && buf.len() >= 2 * self.dgram_len {
                self.out.counters.joined += udp_header::joined(buf, self.dgram_len);
            }
            self.on_datagram(f, UdpHeader::read(buf), done);
        }
        // Errors on a connected UDP socket (ECONNREFUSED from an ICMP unreachable) are
        // transient: the request they concern is lost at its timeout.
        if !(self.core.stopping && self.inflight == 0) {
            self.arm_recv(f);
        }
    }

    fn on_datagram(&mut self, f: usize, header: Option<UdpHeader>, done: Ticks) {
        let flow = &self.flows[f];
        let Some(h) = header.filter(|h| h.flow == flow.id && h.seq < flow.next_seq) else {
            self.out.counters.foreign += 1;
            return;
        };
        let slot = &mut self.window[self.slot_of(f, h.seq)];
        if slot.seq != h.seq {
            self.out.counters.late += 1; // the slot was reused: long since counted lost
            return;
        }
        match slot.state {
            SlotState::InFlight => {
                slot.state = SlotState::Done;
                let (intended, sent) = (slot.intended_ns, slot.sent);
                self.inflight -= 1;
                self.out.counters.completed += 1;
                self.completed_total += 1;
                if done != self.last_done {
                    self.last_done = done;
                    self.last_done_ns = self.clock.ns(done);
                }
                let done_ns = self.last_done_ns;
                self.out
                    .hist
                    .latency
                    .saturating_record(done_ns.saturating_sub(intended));
                self.out
                    .hist
                    .service
                    .saturating_record(done_ns.saturating_sub(self.clock.ns(sent)));
                let flow = &mut self.flows[f];
                if h.seq + 1 < flow.highest_rx {
                    self.out.counters.reordered += 1;
                }
                flow.highest_rx = flow.highest_rx.max(h.seq + 1);
            }
            SlotState::Done => self.out.counters.duplicates += 1,
            SlotState::Lost => self.out.counters.late += 1,
            SlotState::Empty => self.out.counters.foreign += 1,
        }
    }

    /// Requests past their timeout are lost; their latency is recorded at the timeout.
    fn scan(&mut self, now_ns: Nanos) {
        let timeout = self.plan.timeout_ns;
        while let Some(d) = self.backlog.front() {
            if d.intended_ns + timeout > now_ns {
                break;
            }
            self.backlog.pop();
            self.out.counters.error(ErrorKind::Timeout);
            self.out.hist.latency.saturating_record(timeout);
        }
        if self.blast {
            return;
        }
        // Only flows on the watch list can have a request in flight: O(watched), not
        // O(flows). Each visit puts the flow back while it still has some.
        for _ in 0..self.watch_q.len() {
            let Some(f) = self.watch_q.pop() else { break };
            let f = f as usize;
            self.flows[f].watched = false;
            self.expire_flow(f, now_ns);
            if self.flows[f].oldest < self.flows[f].next_seq {
                self.watch(f);
            }
        }
    }

    /// Requests of flow `f` past their timeout are lost, oldest first.
    fn expire_flow(&mut self, f: usize, now_ns: Nanos) {
        #[cfg(test)]
        {
            self.scan_visits += 1;
        }
        let timeout = self.plan.timeout_ns;
        loop {
            let flow = &self.flows[f];
            if flow.oldest >= flow.next_seq {
                break;
            }
            let seq = flow.oldest;
            let slot = &mut self.window[self.slot_of(f, seq)];
            if slot.seq == seq && slot.state == SlotState::InFlight {
                if slot.intended_ns + timeout > now_ns {
                    break;
                }
                slot.state = SlotState::Lost;
                self.inflight -= 1;
                self.out.counters.error(ErrorKind::Lost);
                self.out.hist.latency.saturating_record(timeout);
            }
            self.flows[f].oldest += 1;
        }
    }

    /// Puts flow `f` on the scan's watch list (at most once).
    #[inline]
    fn watch(&mut self, f: usize) {
        if !self.flows[f].watched {
            self.flows[f].watched = true;
            let queued = self.watch_q.push(f as u32);
            debug_assert!(queued, "each flow is queued at most once");
        }
    }
}

impl Hooks for UdpWorker<'_> {
    fn core(&mut self) -> &mut LoopCore {
        &mut self.core
    }

    fn out(&mut self) -> &mut Outbox {
        &mut self.out
    }

    /// The flows are connected UDP sockets, ready once created.
    fn connect(&mut self, _stop: &AtomicBool) -> Ready {
        Ready {
            worker: self.plan.index,
            established: self.flows.len(),
            failed: 0,
            first_errno: None,
            establish_ns: 0,
            fatal: None,
            features: self.core.ring.features.clone(),
            join_error: None,
        }
    }

    fn adopt_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    fn shut_down(&mut self) {
        for flow in &self.flows {
            // SAFETY: plain syscalls on descriptors this worker owns.
            unsafe {
                libc::shutdown(flow.fd, libc::SHUT_RDWR);
            }
        }
    }

    fn release(&mut self) {
        for flow in &self.flows {
            // SAFETY: as above; the descriptor is not used after this.
            unsafe {
                libc::close(flow.fd);
            }
        }
    }

    fn on_start(&mut self) {
        if !self.blast {
            for f in 0..self.flows.len() {
                self.arm_recv(f);
            }
        }
    }

    fn at_end(&self, now: Nanos) -> bool {
        now >= self.plan.duration_ns
            && match &self.replay {
                Some(r) => r.all_dispatched(),
                None => self.schedule.is_none() || self.next_k >= self.total_k,
            }
    }

    fn on_stop(&mut self, now: Nanos, _interrupted: bool, pace: &Pacer) -> u64 {
        if self.at_end(now) && !self.blast {
            // Requests due before the end are still answered or time out.
            return self.plan.timeout_ns + pace.scan_every;
        }
        while self.backlog.pop().is_some() {
            self.out.counters.cut_off += 1;
        }
        self.plan.timeout_ns.min(DRAIN_NS_MAX)
    }

    fn dispatch_due(&mut self, now_t: Ticks, now: Nanos) -> u64 {
        UdpWorker::dispatch_due(self, now_t, now)
    }

    fn reap(&mut self) -> usize {
        UdpWorker::reap(self)
    }

    fn after_reap(&mut self, now_t: Ticks, _now: Nanos) {
        if !self.blast {
            self.serve_backlog(now_t);
        }
        self.release_replayed();
    }

    fn scan(&mut self, now: Nanos) {
        UdpWorker::scan(self, now);
    }

    fn drained(&self) -> bool {
        let sends_pending = self.free_bufs.len() < self.buf_use.len();
        self.inflight == 0 && self.backlog.is_empty() && !sends_pending
    }

    fn timers(&self) -> bool {
        self.inflight > 0 || !self.backlog.is_empty()
    }

    fn next_due(&self) -> Option<Nanos> {
        if let Some(r) = &self.replay {
            return r.next_due();
        }
        match &self.schedule {
            Some(_) => (self.next_k < self.total_k).then(|| self.due_ns(self.next_k)),
            // `--rate max`: never sleep while a send buffer is free; with all of them
            // in flight, sleep until a send completes.
            None => (!self.free_bufs.is_empty()).then_some(0),
        }
    }

    fn finish(&mut self, t: &mut WorkerTotals) {
        while self.backlog.pop().is_some() {
            self.out.counters.cut_off += 1;
        }
        self.out.counters.cut_off += self.inflight;
        self.inflight = 0;
        t.last_done_ns = self.last_done_ns;
        t.completed = if self.blast {
            self.out.counters.sent
        } else {
            self.completed_total
        };
        t.backlog_peak = self.backlog_peak;
    }
}

/// Whatever ends the worker's life (a normal return after `quiesce`, a setup error, a
/// panic unwinding through the loop), buffers the kernel may still read or write are
/// never freed under it: while operations remain in the ring they are leaked (the ring,
/// dropped after this, cancels what is left).
impl Drop for UdpWorker<'_> {
    fn drop(&mut self) {
        if self.core.ops_in_ring() > 0 {
            self.send_bufs.leak();
            self.recv_bufs.leak();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: Nanos = 1_000_000;

    #[test]
    fn latency_counts_from_the_intended_instant_and_service_time_from_the_send() {
        // One request/response datagram due at 1 ms, sent late at 4 ms, answered at
        // 5 ms: latency 4 ms (what the user waited), service time 1 ms.
        let mut p = WorkerPlan::for_tests(1);
        p.transport = Transport::Udp;
        let (snap_tx, _snap_rx) = crossbeam_channel::unbounded();
        let (_recycle_tx, recycle_rx) = crossbeam_channel::unbounded();
        let mut w = UdpWorker::new(&p, snap_tx, recycle_rx).expect("io_uring available");
        let (clock, mock) = Clock::mock();
        w.clock = clock;
        mock.increment(Duration::from_millis(4));
        w.window[0] = Slot {
            seq: 0,
            intended_ns: MS,
            sent: w.clock.ticks(),
            state: SlotState::InFlight,
        };
        w.flows[0].next_seq = 1;
        w.inflight = 1;
        mock.increment(Duration::from_millis(1));
        let header = UdpHeader {
            flow: w.flows[0].id,
            seq: 0,
            intended_ns: MS,
        };
        w.on_datagram(0, Some(header), w.clock.ticks());
        assert_eq!(w.out.counters.completed, 1);
        let h = &w.out.hist;
        assert!(
            h.latency.equivalent(h.latency.max(), 4 * MS),
            "{}",
            h.latency.max()
        );
        assert!(
            h.service.equivalent(h.service.max(), MS),
            "{}",
            h.service.max()
        );
        // The same datagram again is a duplicate, not a second answer.
        w.on_datagram(0, Some(header), w.clock.ticks());
        assert_eq!(w.out.counters.duplicates, 1);
        assert_eq!(w.out.counters.completed, 1);
    }

    /// The timeout scan visits only flows with requests in flight (issue 22): 500
    /// flows, 3 of them with a request out, cost 3 visits, not 500; once those are
    /// counted lost, nothing is left to visit.
    #[test]
    fn the_timeout_scan_visits_only_flows_with_requests_in_flight() {
        let mut p = WorkerPlan::for_tests(500);
        p.transport = Transport::Udp;
        let (snap_tx, _snap_rx) = crossbeam_channel::unbounded();
        let (_recycle_tx, recycle_rx) = crossbeam_channel::unbounded();
        let mut w = UdpWorker::new(&p, snap_tx, recycle_rx).expect("io_uring available");
        let (clock, mock) = Clock::mock();
        w.clock = clock;
        let now_t = w.clock.ticks();
        for _ in 0..3 {
            let due = Due {
                dispatched: now_t,
                ..Due::default()
            };
            assert_eq!(w.send_batch(1, &[due], now_t), 1);
        }
        assert_eq!(w.inflight, 3);
        // Before the timeout: 3 visits, nothing lost, still watched.
        w.scan(1);
        assert_eq!(
            (w.scan_visits, w.out.counters.errors_of(ErrorKind::Lost)),
            (3, 0)
        );
        mock.increment(Duration::from_millis(20));
        w.scan(p.timeout_ns + 1);
        assert_eq!(
            (w.scan_visits, w.out.counters.errors_of(ErrorKind::Lost)),
            (6, 3)
        );
        assert_eq!(w.inflight, 0);
        w.scan(p.timeout_ns + 2);
        assert_eq!(
            w.scan_visits, 6,
            "flows with nothing in flight are not visited"
        );
        w.quiesce();
    }

    /// A flow's slot is a mask of the sequence, equal to the `%` it replaced, for
    /// every flow and across many wraps of the window.
    #[test]
    fn window_slot_is_the_sequence_modulo_the_window() {
        let mut p = WorkerPlan::for_tests(3);
        p.transport = Transport::Udp;
        let (snap_tx, _snap_rx) = crossbeam_channel::unbounded();
        let (_recycle_tx, recycle_rx) = crossbeam_channel::unbounded();
        let w = UdpWorker::new(&p, snap_tx, recycle_rx).expect("io_uring available");
        let len = w.window_len;
        assert!(len.is_power_of_two() && len > 1, "{len}");
        for f in 0..3 {
            for seq in (0..4 * len as u64).chain([u64::MAX - 1, u64::MAX]) {
                let want = f * len + (seq % len as u64) as usize;
                assert_eq!(w.slot_of(f, seq), want, "flow {f} seq {seq}");
            }
        }
    }

    /// Responses reaped at one instant share one tick-to-ns conversion; a response at a
    /// later instant gets its own (the cached instant is not reused across batches).
    #[test]
    fn each_completion_instant_is_converted_once_and_never_reused_for_a_later_one() {
        let mut p = WorkerPlan::for_tests(1);
        p.transport = Transport::Udp;
        let (snap_tx, _snap_rx) = crossbeam_channel::unbounded();
        let (_recycle_tx, recycle_rx) = crossbeam_channel::unbounded();
        let mut w = UdpWorker::new(&p, snap_tx, recycle_rx).expect("io_uring available");
        let (clock, mock) = Clock::mock();
        w.clock = clock;
        mock.increment(Duration::from_millis(1));
        for seq in 0..3u64 {
            let i = w.slot_of(0, seq);
            w.window[i] = Slot {
                seq,
                intended_ns: 0,
                sent: w.clock.ticks(),
                state: SlotState::InFlight,
            };
        }
        w.flows[0].next_seq = 3;
        w.inflight = 3;
        let answer = |w: &mut UdpWorker<'_>, seq: u64, done: Ticks| {
            let header = UdpHeader {
                flow: w.flows[0].id,
                seq,
                intended_ns: 0,
            };
            w.on_datagram(0, Some(header), done);
        };
        // Two answers in one batch (one instant, 2 ms), then one at 7 ms.
        mock.increment(Duration::from_millis(1));
        let batch = w.clock.ticks();
        answer(&mut w, 0, batch);
        answer(&mut w, 1, batch);
        mock.increment(Duration::from_millis(5));
        let later = w.clock.ticks();
        answer(&mut w, 2, later);
        assert_eq!(w.out.counters.completed, 3);
        let h = &w.out.hist.latency;
        assert_eq!(h.count_between(2 * MS, 2 * MS), 2, "the batch at 2 ms");
        assert!(
            h.equivalent(h.max(), 7 * MS),
            "the later answer: {}",
            h.max()
        );
        assert_eq!(w.last_done_ns, 7 * MS);
    }
}
