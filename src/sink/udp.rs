//! One UDP sink thread: a pinned loop over its own SO_REUSEPORT socket.
//!
//! Each iteration receives up to [`BATCH`] datagrams with one `recvmmsg`
//! (MSG_WAITFORONE: block for the first, at most the socket's 10 ms receive timeout,
//! then take whatever else is queued), counts them (see `flows.rs`), and sends the
//! batch's replies with one `sendmmsg`. Nothing is allocated per datagram: the
//! thread owns [`BATCH`] receive buffers of [`DATAGRAM_BYTES_MAX`] bytes (larger than
//! any UDP payload, so no datagram is ever truncated), the message headers that
//! point into them, and a pre-sized flow table.
//!
//! Replies: echo sends the datagram back unchanged to its source, straight out of
//! its receive buffer; fixed:N sends N bytes, the request's first
//! [`HEADER_LEN`] bytes (so the reply carries the request's flow and sequence)
//! followed by b'x' filler, as two iovecs (no copy); count and discard never reply.
//! A datagram chosen by the `drop_ratio` draw is neither counted as received nor
//! answered.
//!
//! Publishing: after each batch the thread copies its counters into its
//! `Mutex<Published>` (one uncontended lock per batch), and when a second of the
//! series ends it appends that second there, so [`super::SinkHandle::snapshot`] can
//! read totals and series while it runs.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::Socket;

use super::flows::{Counters, FlowKey, FlowTable};
use super::stall::{Phase, Stall};
use super::stats::BroadcastStats;
use super::udp_relay::UdpRelay;
use super::{BroadcastConfig, SecondStats, SinkMode, SinkStats};
use crate::proto::udp_header::{HEADER_LEN, UdpHeader};

/// Datagrams per `recvmmsg` / `sendmmsg`.
pub(crate) const BATCH: usize = 64;
/// Receive buffer per datagram: above the largest UDP payload (65507 bytes over IPv4,
/// 65527 over IPv6), so MSG_TRUNC cannot happen.
pub(crate) const DATAGRAM_BYTES_MAX: usize = 65_536;
/// Largest `fixed:N` reply over UDP (the IPv4 payload limit).
pub(crate) const UDP_REPLY_BYTES_MAX: usize = 65_507;
/// Receive and send timeout of the sockets: how soon a thread sees the stop flag.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_millis(10);
/// Control buffer per datagram, for the SO_RXQ_OVFL drop counter.
const CONTROL_WORDS: usize = 8;
/// Series seconds reserved up front per thread (an hour).
const SECONDS_RESERVED: usize = 3600;
const NS_PER_S: u64 = 1_000_000_000;
/// `series_origin_ns` before the first datagram.
const NO_ORIGIN: u64 = u64::MAX;

/// Everything the UDP threads of one sink share.
pub(crate) struct UdpShared {
    pub mode: SinkMode,
    pub drop_ratio: f64,
    pub seed: u64,
    pub stop: AtomicBool,
    /// Timestamps are ns since this instant (the sink's start).
    pub epoch: Instant,
    /// When the first datagram reached any thread (ns since `epoch`), or
    /// [`NO_ORIGIN`]: second 0 of the series starts there.
    pub series_origin_ns: AtomicU64,
    /// Fixed mode: N bytes of b'x'; a reply is the request's first (up to
    /// [`HEADER_LEN`]) bytes plus as much filler as makes N. Empty otherwise.
    pub filler: Box<[u8]>,
    /// Broadcast mode's rooms (and the peers each thread tracks at most).
    pub broadcast: Option<BroadcastConfig>,
    pub peers_max: usize,
    /// Broadcast: the stall schedule (the other UDP modes refuse stalls).
    pub stall: Option<Stall>,
}

impl UdpShared {
    pub(crate) fn new(mode: SinkMode, drop_ratio: f64, seed: u64) -> UdpShared {
        let filler = match mode {
            SinkMode::Fixed(n) => vec![b'x'; n].into_boxed_slice(),
            _ => Box::default(),
        };
        UdpShared {
            mode,
            drop_ratio,
            seed,
            stop: AtomicBool::new(false),
            epoch: Instant::now(),
            series_origin_ns: AtomicU64::new(NO_ORIGIN),
            filler,
            broadcast: None,
            peers_max: 0,
            stall: None,
        }
    }
}

/// One second of one thread: what changed during it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bucket {
    second: u64,
    delta: Counters,
    lost: i64,
}

/// What a thread has published; read by snapshots and at stop.
#[derive(Debug, Clone, Default)]
pub(crate) struct Published {
    counters: Counters,
    first_ns: Option<u64>,
    last_ns: Option<u64>,
    kernel_drops: u64,
    rcvbuf_bytes: u64,
    broadcast: BroadcastStats,
    /// Seconds that have ended.
    seconds: Vec<Bucket>,
    /// The second under way and the counters at its start.
    open: Option<(u64, Counters)>,
}

impl Published {
    pub(crate) fn new(rcvbuf_bytes: u64) -> Published {
        Published {
            rcvbuf_bytes,
            seconds: Vec::with_capacity(SECONDS_RESERVED),
            ..Published::default()
        }
    }

    /// This thread's part of the stats (series not yet gap-filled or rated; see
    /// `SinkStats::finish_udp`).
    pub(crate) fn to_stats(&self) -> SinkStats {
        let c = &self.counters;
        let open = self.open.map(|(second, start)| Bucket {
            second,
            delta: c.since(&start),
            lost: c.lost_since(&start),
        });
        let series = self
            .seconds
            .iter()
            .chain(open.as_ref())
            .map(|b| SecondStats {
                second: b.second,
                received: b.delta.received,
                bytes: b.delta.bytes,
                lost: b.lost,
                reordered: b.delta.reordered,
                duplicates: b.delta.duplicates,
                dropped: b.delta.dropped,
                foreign: b.delta.foreign,
                ..SecondStats::default()
            })
            .collect();
        SinkStats {
            bytes_received: c.bytes,
            bytes_sent: c.bytes_sent,
            replies: c.replies,
            received: c.received,
            foreign: c.foreign,
            duplicates: c.duplicates,
            reordered: c.reordered,
            late: c.late,
            lost: c.lost(),
            dropped: c.dropped,
            untracked: c.untracked,
            flows: c.flows,
            send_failed: c.send_failed,
            kernel_drops: self.kernel_drops,
            rcvbuf_bytes: self.rcvbuf_bytes,
            first_datagram_ns: self.first_ns,
            last_datagram_ns: self.last_ns,
            series,
            broadcast: self.broadcast,
            ..SinkStats::default()
        }
    }
}

pub(crate) fn lock(live: &Mutex<Published>) -> MutexGuard<'_, Published> {
    // A poisoned lock only means a thread panicked mid-copy of plain counters.
    live.lock().unwrap_or_else(|e| e.into_inner())
}

/// Spawns the thread for `core`, the `index`-th of the sink (which picks its PRNG
/// stream). `socket` is already bound, so datagrams queue before the thread runs.
pub(crate) fn spawn(
    core: usize,
    index: usize,
    socket: Socket,
    shared: Arc<UdpShared>,
    live: Arc<Mutex<Published>>,
) -> io::Result<JoinHandle<SinkStats>> {
    std::thread::Builder::new()
        .name(format!("blaster-sink-udp-{core}"))
        .spawn(move || {
            // Pinning is best-effort: an unpinned sink serves correctly, with more jitter.
            crate::threads::pin_current(core);
            let mut worker = Worker::new(index, socket, shared, live);
            worker.run();
            lock(&worker.live).to_stats()
        })
}

/// The message headers of one batch, boxed so the pointers between them stay valid.
struct Batch {
    recv: [libc::mmsghdr; BATCH],
    recv_iov: [libc::iovec; BATCH],
    addrs: [libc::sockaddr_storage; BATCH],
    control: [[u64; CONTROL_WORDS]; BATCH],
    send: [libc::mmsghdr; BATCH],
    send_iov: [[libc::iovec; 2]; BATCH],
}

struct Worker {
    socket: Socket,
    shared: Arc<UdpShared>,
    live: Arc<Mutex<Published>>,
    table: FlowTable,
    counters: Counters,
    rng: fastrand::Rng,
    first_ns: Option<u64>,
    last_ns: Option<u64>,
    kernel_drops: u64,
    open: Option<(u64, Counters)>,
    /// `BATCH` receive buffers of `DATAGRAM_BYTES_MAX` bytes, back to back.
    bufs: Vec<u8>,
    batch: Box<Batch>,
    /// Receive headers the kernel may have written since they were last reset.
    dirty: usize,
    /// Broadcast mode: peers, rooms, outgoing relays.
    relay: Option<Box<UdpRelay>>,
}

impl Worker {
    fn new(
        index: usize,
        socket: Socket,
        shared: Arc<UdpShared>,
        live: Arc<Mutex<Published>>,
    ) -> Worker {
        // Zeroed: pages are only touched as datagrams of that size arrive.
        let mut bufs = vec![0u8; BATCH * DATAGRAM_BYTES_MAX];
        // SAFETY: every field of `Batch` is a C struct or array of integers and raw
        // pointers, for which all-zero bytes is a valid value (null pointers, zero
        // lengths).
        let mut batch: Box<Batch> = Box::new(unsafe { std::mem::zeroed() });
        let base = bufs.as_mut_ptr();
        let b = &mut *batch;
        for i in 0..BATCH {
            b.recv_iov[i] = libc::iovec {
                // SAFETY: i * DATAGRAM_BYTES_MAX < bufs.len(): the offset stays inside
                // the allocation.
                iov_base: unsafe { base.add(i * DATAGRAM_BYTES_MAX) }.cast(),
                iov_len: DATAGRAM_BYTES_MAX,
            };
            let h = &mut b.recv[i].msg_hdr;
            h.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_iov = &mut b.recv_iov[i];
            h.msg_iovlen = 1;
            h.msg_control = b.control[i].as_mut_ptr().cast();
        }
        let rng = super::thread_rng(shared.seed, index);
        let now = shared.epoch.elapsed().as_nanos() as u64;
        let relay = shared
            .broadcast
            .map(|b| Box::new(UdpRelay::new(b, shared.peers_max, now)));
        Worker {
            socket,
            shared,
            live,
            table: FlowTable::new(),
            counters: Counters::default(),
            rng,
            first_ns: None,
            last_ns: None,
            kernel_drops: 0,
            open: None,
            bufs,
            batch,
            dirty: BATCH,
            relay,
        }
    }

    fn run(&mut self) {
        while !self.shared.stop.load(Ordering::Acquire) {
            if self.sleep_if_frozen() {
                continue;
            }
            let n = if self.wait_for_datagrams() {
                self.receive()
            } else {
                0
            };
            let now = self.shared.epoch.elapsed().as_nanos() as u64;
            if n > 0 {
                self.note_time(now);
                let replies = self.process(n);
                self.send(replies);
            }
            if let Some(r) = self.relay.as_mut() {
                let fd = self.socket.as_raw_fd();
                r.flush(fd);
                r.tick_if_due(fd, now);
                r.sweep_if_due(now);
            }
            if n > 0 || self.relay.is_some() {
                self.publish();
            }
        }
        self.publish();
    }

    /// Broadcast with a stall: if a freeze window is open, sleeps until it closes (in
    /// slices, watching the stop flag) and returns true. Datagrams wait in the socket.
    fn sleep_if_frozen(&self) -> bool {
        let Some(stall) = &self.shared.stall else {
            return false;
        };
        let Phase::Frozen { until_ns } = stall.phase(stall.now_ns()) else {
            return false;
        };
        let until = stall.instant_at(until_ns);
        while Instant::now() < until && !self.shared.stop.load(Ordering::Acquire) {
            std::thread::sleep((until - Instant::now()).min(IO_TIMEOUT));
        }
        true
    }

    /// Aggregate: waits for a datagram at most until the next server tick (and the
    /// receive timeout); false when none came. Other modes block in the receive.
    fn wait_for_datagrams(&self) -> bool {
        let Some(tick_ns) = self.relay.as_ref().and_then(|r| r.next_tick_ns()) else {
            return true;
        };
        let now = self.shared.epoch.elapsed().as_nanos() as u64;
        let wait = Duration::from_nanos(tick_ns.saturating_sub(now)).min(IO_TIMEOUT);
        let mut pfd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd owned by this frame, for the call's duration.
        let rc = unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as libc::c_int) };
        rc > 0
    }

    /// One `recvmmsg`; the number of datagrams received (0 on timeout or error).
    fn receive(&mut self) -> usize {
        let b = &mut *self.batch;
        for m in &mut b.recv[..self.dirty] {
            m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            m.msg_hdr.msg_controllen = size_of::<[u64; CONTROL_WORDS]>() as _;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        // SAFETY: `recv` holds BATCH headers whose name, iovec and control pointers
        // point into `addrs`, `recv_iov`/`bufs` and `control` with the lengths just
        // set; all of them are owned by this Worker (the Box and the Vec's heap
        // buffer do not move) and outlive the call.
        let rc = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                b.recv.as_mut_ptr(),
                BATCH as _,
                libc::MSG_WAITFORONE as _,
                std::ptr::null_mut(),
            )
        };
        if rc <= 0 {
            // EAGAIN: the 10 ms timeout (check the stop flag); EINTR; ENOMEM and the
            // like: try again. The socket itself cannot go away under us.
            self.dirty = 0;
            return 0;
        }
        let n = rc as usize;
        self.dirty = n;
        n
    }

    /// Starts the series on the first datagram, and closes the second under way if
    /// `now` is past it. Called before the batch is counted.
    fn note_time(&mut self, now: u64) {
        if self.first_ns.is_none() {
            self.first_ns = Some(now);
            let _ = self.shared.series_origin_ns.compare_exchange(
                NO_ORIGIN,
                now,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        self.last_ns = Some(now);
        let origin = self.shared.series_origin_ns.load(Ordering::Acquire);
        let second = now.saturating_sub(origin) / NS_PER_S;
        match self.open {
            None => self.open = Some((second, self.counters)),
            Some((open, start)) if second > open => {
                let bucket = Bucket {
                    second: open,
                    delta: self.counters.since(&start),
                    lost: self.counters.lost_since(&start),
                };
                // Once a second; the vector is pre-sized for an hour.
                let mut live = lock(&self.live);
                live.seconds.push(bucket);
                live.open = Some((second, self.counters));
                drop(live);
                self.open = Some((second, self.counters));
            }
            Some(_) => {}
        }
    }

    /// Counts the batch's `n` datagrams and prepares the replies; returns how many.
    fn process(&mut self, n: usize) -> usize {
        let mode = self.shared.mode;
        let drop_ratio = self.shared.drop_ratio;
        let b = &mut *self.batch;
        let mut out = 0;
        let fd = self.socket.as_raw_fd();
        // SO_RXQ_OVFL carries the socket's running drop total: the batch's last
        // datagram has the largest, so one control-message walk per batch is enough.
        if n > 0 && b.recv[n - 1].msg_hdr.msg_controllen > 0 {
            self.kernel_drops = self.kernel_drops.max(rxq_overflow(&b.recv[n - 1].msg_hdr));
        }
        for i in 0..n {
            let len = (b.recv[i].msg_len as usize).min(DATAGRAM_BYTES_MAX);
            if drop_ratio > 0.0 && self.rng.f64() < drop_ratio {
                self.counters.dropped += 1;
                continue;
            }
            let start = i * DATAGRAM_BYTES_MAX;
            let data = &self.bufs[start..start + len];
            if let Some(relay) = self.relay.as_mut() {
                if let Some(stall) = &self.shared.stall {
                    stall.mark_first_byte();
                }
                self.counters.bytes += len as u64;
                let now = self.shared.epoch.elapsed().as_nanos() as u64;
                relay.on_datagram(fd, data, &b.addrs[i], b.recv[i].msg_hdr.msg_namelen, now);
                continue;
            }
            match UdpHeader::read(data) {
                Some(h) => {
                    let key = flow_key(&b.addrs[i], h.flow);
                    self.counters.record(&mut self.table, key, h.seq, len);
                }
                None => self.counters.foreign += 1,
            }
            let (head, tail) = match mode {
                SinkMode::Echo => (len, 0),
                SinkMode::Fixed(size) => {
                    let head = len.min(HEADER_LEN);
                    (head, size - head)
                }
                SinkMode::Count | SinkMode::Discard | SinkMode::Broadcast => continue,
            };
            let iov = &mut b.send_iov[out];
            iov[0] = libc::iovec {
                iov_base: data.as_ptr().cast_mut().cast(),
                iov_len: head,
            };
            iov[1] = libc::iovec {
                iov_base: self.shared.filler.as_ptr().cast_mut().cast(),
                iov_len: tail,
            };
            let h = &mut b.send[out].msg_hdr;
            h.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = b.recv[i].msg_hdr.msg_namelen;
            h.msg_iov = iov.as_mut_ptr();
            h.msg_iovlen = if tail > 0 { 2 } else { 1 };
            out += 1;
        }
        out
    }

    /// Sends the `count` prepared replies, retrying after a partial `sendmmsg`; a
    /// reply the kernel refuses (or that waits out the send timeout) is counted in
    /// `send_failed` and skipped.
    fn send(&mut self, count: usize) {
        let b = &mut *self.batch;
        let mut i = 0;
        while i < count {
            // SAFETY: send[i..count] were prepared by `process` for this batch: their
            // names point into `addrs`, their iovecs into `send_iov`, whose entries
            // point into `bufs` (the received datagrams, lengths within them) and the
            // shared filler (sliced within its length); all outlive the call, and
            // sendmmsg only reads the data.
            let rc = unsafe {
                libc::sendmmsg(
                    self.socket.as_raw_fd(),
                    b.send.as_mut_ptr().add(i),
                    (count - i) as _,
                    0,
                )
            };
            if rc > 0 {
                let sent = rc as usize;
                for m in &b.send[i..i + sent] {
                    self.counters.replies += 1;
                    self.counters.bytes_sent += m.msg_len as u64;
                }
                i += sent;
            } else if rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            } else {
                self.counters.send_failed += 1;
                i += 1;
            }
        }
    }

    fn publish(&mut self) {
        let mut live = lock(&self.live);
        live.counters = self.counters;
        live.first_ns = self.first_ns;
        live.last_ns = self.last_ns;
        live.kernel_drops = self.kernel_drops;
        live.open = self.open;
        if let Some(r) = &self.relay {
            live.broadcast = r.stats;
        }
    }
}

/// The flow key of a datagram from `addr` (as filled in by the kernel).
pub(crate) fn flow_key(addr: &libc::sockaddr_storage, flow: u32) -> FlowKey {
    let (ip, port) = match addr.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the kernel wrote a sockaddr_in, which is smaller
            // than sockaddr_storage and has no stricter alignment.
            let a =
                unsafe { &*(addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let v4 = u32::from_be(a.sin_addr.s_addr);
            ((0xffff_u128 << 32) | v4 as u128, u16::from_be(a.sin_port))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a =
                unsafe { &*(addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            (
                u128::from_be_bytes(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
            )
        }
        _ => (0, 0),
    };
    FlowKey { ip, port, flow }
}

/// The socket's cumulative drop count carried by SO_RXQ_OVFL, or 0.
fn rxq_overflow(hdr: &libc::msghdr) -> u64 {
    let mut drops = 0;
    // SAFETY: `hdr` was filled by recvmmsg: msg_control points to this datagram's
    // control buffer and msg_controllen is what the kernel wrote into it, so the
    // CMSG_* walk stays inside it; the data of an SO_RXQ_OVFL message is a u32,
    // read unaligned.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SO_RXQ_OVFL {
                drops = libc::CMSG_DATA(cmsg).cast::<u32>().read_unaligned() as u64;
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    drops
}
