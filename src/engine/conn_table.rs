//! The connection table: every connection's state, its in-flight FIFO of request
//! instants, and the ready queue of connections with a free pipeline slot. All of it is
//! sized once from the plan (connections x pipeline); nothing grows during a run.

use crate::clock::{Nanos, Ticks};
use crate::proto::AnyFramer;
use std::os::fd::RawFd;

/// [`Conn::fd`] of a socket held only in the ring's file table (no descriptor).
pub const REGISTERED: RawFd = -2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// No socket; reopen at the given instant (ns since start).
    Closed { reopen_at_ns: Nanos },
    /// Its socket is being closed in the ring (cancel + close of the file-table slot);
    /// the slot is reused only after the close completes. Then `Closed`.
    Closing { reopen_at_ns: Nanos },
    /// Connect submitted.
    Connecting,
    /// Connected and usable.
    Ready,
    /// A request on it timed out: responses can no longer be matched to requests, so
    /// it takes no new requests, ignores what it receives, and each request still in
    /// flight times out at its own deadline; then it is closed and reopened.
    Expiring,
}

/// The instants of one request in flight. `intended` comes from the schedule (ns since
/// start); the others are raw TSC ticks, scaled only when recorded.
#[derive(Debug, Clone, Copy, Default)]
pub struct Req {
    pub intended_ns: Nanos,
    pub dispatched: Ticks,
    pub sent: Ticks,
    /// Global sequence number (`{seq}`).
    pub seq: u64,
    /// Index of its entry in the request set (a `--mix` entry; 0 otherwise).
    pub entry: u16,
    /// `--http2`: the response's status once its headers arrived (0 before).
    pub status: u16,
    /// `--http2`: its stream id once sent (0 before), [`ANSWERED`] once its response
    /// completed while an older request of the connection still waits for its own.
    pub stream: u32,
}

/// [`Req::stream`] of a request answered out of order (HTTP/2): its slot is freed when
/// every older request of its connection has been answered too.
pub const ANSWERED: u32 = u32::MAX;

/// How far a connection slot has got (one byte: the slot's size is bounded, see
/// `a_held_connection_costs_at_most_its_bound`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    Never,
    /// A connect was submitted (a later one binds no fixed `--source-ip` port).
    Submitted,
    /// Established at least once: a later establishment is a reconnect (one whose
    /// connect is still in flight when the run ends is not, so `opened` is the first
    /// connections plus `reconnects`).
    Up,
}

#[derive(Debug, Clone)]
pub struct Conn {
    /// The socket's descriptor, [`REGISTERED`] when the socket lives only in the ring's
    /// file table at the connection's index, -1 when there is none.
    pub fd: RawFd,
    pub state: ConnState,
    pub generation: u32,
    /// Requests assigned to this connection and not yet answered: FIFO in `slots`.
    pub inflight: u32,
    /// Of those, how many are not yet covered by a send operation (the newest ones).
    pub unsent: u32,
    /// Requests covered by the send operation in the ring (0 = no send in flight).
    pub sending: u32,
    /// Bytes of the in-flight send already accepted by the kernel (partial sends).
    /// (u32: a connection's staging region is far below 4 GiB; the narrow fields keep
    /// a held connection small, see `a_held_connection_costs_at_most_its_bound`.)
    pub send_done: u32,
    pub send_len: u32,
    pub recv_armed: bool,
    /// A send operation of this connection is in the ring.
    pub send_armed: bool,
    /// Bytes kept at the start of the receive buffer for the framer (partial frame).
    pub recv_keep: u32,
    /// Operations of this connection in the ring (any generation): its receive and
    /// staging regions are re-armed, and a closed connection reopened, only once the
    /// operations that point into them have completed (`Closing` until then).
    pub ops: u8,
    /// Index in `slots` of the oldest in-flight request, relative to the connection.
    pub head: u32,
    pub in_ready_queue: bool,
    pub in_flush_queue: bool,
    pub framer: AnyFramer,
    /// The request-set entry `framer` is configured for (mixes with several framers).
    pub framer_entry: u16,
    /// The framer is between responses (may be switched to another entry's framer).
    pub at_boundary: bool,
    /// `--expect` body assertions: the kept bytes (`recv_keep`) start with the current
    /// response's first byte, so it is whole once it completes.
    pub capture_at_start: bool,
    /// `--expect`: the current response outgrew what is kept whole; its body goes
    /// unchecked.
    pub capture_lost: bool,
    /// Of the kept bytes of a response kept whole, how many the framer already read.
    pub capture_skip: u32,
    /// When the current connect was submitted.
    pub connect_started: Ticks,
    /// Failed attempts since the last established connection (the backoff exponent).
    pub attempts: u16,
    /// How far this slot's connections have got: its later connects bind no fixed
    /// `--source-ip` port, its later establishments are reconnects.
    pub opened: Opened,
    /// Waiting in the worker's `--connect-rate` queue.
    pub deferred: bool,
    /// On the worker's watch list (what the timeout scan looks at).
    pub in_active: bool,
    /// Closed in order (`Connection: close`, a GOAWAY, a retirement): opens again as
    /// soon as its close completes, not at the next timeout scan.
    pub reopen_when_closed: bool,
}

/// `i mod cap` for `i < 2 * cap`: a compare and a subtraction instead of an integer
/// division. Every index below is a position (< cap) plus an offset (<= cap), so one
/// subtraction always suffices, and capacity stays exactly what was asked for.
#[inline(always)]
fn wrap<I: Copy + PartialOrd + std::ops::Sub<Output = I>>(i: I, cap: I) -> I {
    if i >= cap { i - cap } else { i }
}

/// A fixed-capacity FIFO ring, allocated once and never grown. Its storage is
/// reserved up front but filled only as positions are first used (`Vec::push` within
/// the capacity, which never reallocates), so the pages of a deep queue that never
/// fills (the backlog is sized for every connection's pipeline) stay untouched and cost
/// no resident memory.
#[derive(Debug)]
pub struct Fifo<T> {
    buf: Vec<T>,
    cap: usize,
    head: usize,
    len: usize,
}

impl<T: Copy + Default> Fifo<T> {
    pub fn with_capacity(cap: usize) -> Self {
        let cap = cap.max(1);
        Fifo {
            buf: Vec::with_capacity(cap),
            cap,
            head: 0,
            len: 0,
        }
    }
    /// False (and nothing stored) when full: the caller counts the overflow.
    #[inline]
    #[must_use]
    pub fn push(&mut self, v: T) -> bool {
        if self.len == self.cap {
            return false;
        }
        let i = wrap(self.head + self.len, self.cap);
        // Positions are first used in order (the write position only advances), so a
        // position not yet stored is the next one: push it, within the capacity.
        if i < self.buf.len() {
            self.buf[i] = v;
        } else {
            debug_assert_eq!(i, self.buf.len());
            self.buf.push(v);
        }
        self.len += 1;
        true
    }
    #[inline]
    pub fn front(&self) -> Option<T> {
        (self.len > 0).then(|| self.buf[self.head])
    }
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        let v = self.front()?;
        self.head = wrap(self.head + 1, self.cap);
        self.len -= 1;
        Some(v)
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Connection indices (the ready and flush queues): each connection is queued at most
/// once, so capacity = connections never overflows.
pub type IndexQueue = Fifo<u32>;
/// Requests waiting for a free connection slot (`sent` not yet set).
pub type Backlog = Fifo<Req>;

/// `n` default requests in zeroed memory: the allocator hands out fresh pages already
/// zero, so a connection's slots become resident only when it first carries a request
/// (held connections without traffic cost none), where `vec![Req::default(); n]` would
/// write every slot at start.
fn zeroed_reqs(n: usize) -> Box<[Req]> {
    let slots = Box::<[Req]>::new_zeroed_slice(n);
    // SAFETY: `Req` is integers only (no padding invariants, no niches), so the
    // all-zero bit pattern is a valid `Req`, and it is `Req::default()`.
    unsafe { slots.assume_init() }
}

/// Connections plus their request slots (connections x pipeline).
pub struct ConnTable {
    pub conns: Vec<Conn>,
    pub slots: Box<[Req]>,
    pub pipeline: u32,
    /// `--http2`: per connection, the requests it may carry at once (the pipeline, or
    /// fewer when the server's MAX_CONCURRENT_STREAMS says so; 0 after a GOAWAY).
    /// Empty otherwise: every connection carries `pipeline`.
    pub caps: Vec<u32>,
}

impl ConnTable {
    pub fn new(connections: usize, pipeline: usize, framer: AnyFramer) -> Self {
        let conns = (0..connections)
            .map(|_| Conn {
                fd: -1,
                state: ConnState::Closed { reopen_at_ns: 0 },
                generation: 0,
                inflight: 0,
                unsent: 0,
                sending: 0,
                send_done: 0,
                send_len: 0,
                recv_armed: false,
                send_armed: false,
                recv_keep: 0,
                ops: 0,
                head: 0,
                in_ready_queue: false,
                in_flush_queue: false,
                framer: framer.clone(),
                framer_entry: 0,
                at_boundary: true,
                capture_at_start: false,
                capture_lost: false,
                capture_skip: 0,
                connect_started: 0,
                attempts: 0,
                opened: Opened::Never,
                deferred: false,
                in_active: false,
                reopen_when_closed: false,
            })
            .collect();
        ConnTable {
            conns,
            slots: zeroed_reqs(connections * pipeline),
            pipeline: pipeline as u32,
            caps: Vec::new(),
        }
    }

    #[inline]
    pub fn slot_index(&self, c: u32, nth: u32) -> usize {
        let conn = &self.conns[c as usize];
        debug_assert!(conn.head < self.pipeline && nth < self.pipeline);
        c as usize * self.pipeline as usize + wrap(conn.head + nth, self.pipeline) as usize
    }

    /// Appends a request to connection `c`'s FIFO. The caller checked there is room.
    #[inline]
    pub fn push_req(&mut self, c: u32, req: Req) {
        let n = self.conns[c as usize].inflight;
        debug_assert!(n < self.pipeline);
        let i = self.slot_index(c, n);
        self.slots[i] = req;
        let conn = &mut self.conns[c as usize];
        conn.inflight += 1;
        conn.unsent += 1;
    }

    /// The oldest in-flight request of `c`.
    #[inline]
    pub fn front(&self, c: u32) -> Option<Req> {
        (self.conns[c as usize].inflight > 0).then(|| self.slots[self.slot_index(c, 0)])
    }

    #[inline]
    pub fn pop_front(&mut self, c: u32) -> Option<Req> {
        let r = self.front(c)?;
        let conn = &mut self.conns[c as usize];
        conn.head = wrap(conn.head + 1, self.pipeline);
        conn.inflight -= 1;
        Some(r)
    }

    /// Stamps the send instant on the `count` newest unsent requests of `c`.
    #[inline]
    pub fn stamp_sent(&mut self, c: u32, count: u32, t: Ticks) {
        let conn = &self.conns[c as usize];
        let first = conn.inflight - conn.unsent;
        for nth in first..first + count {
            let i = self.slot_index(c, nth);
            self.slots[i].sent = t;
        }
    }

    #[inline]
    pub fn has_free_slot(&self, c: u32) -> bool {
        let conn = &self.conns[c as usize];
        conn.state == ConnState::Ready
            && conn.inflight < self.caps.get(c as usize).copied().unwrap_or(self.pipeline)
    }

    /// Pops the requests at the front of `c`'s FIFO already answered out of order.
    #[inline]
    pub fn pop_answered(&mut self, c: u32) {
        while self.front(c).is_some_and(|r| r.stream == ANSWERED) {
            self.pop_front(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Framing;

    #[test]
    fn fifo_keeps_order_across_wraparound() {
        let mut t = ConnTable::new(2, 3, Framing::Echo.framer(8, 1 << 20));
        t.conns[1].state = ConnState::Ready;
        for round in 0..5u64 {
            for i in 0..3 {
                assert!(t.has_free_slot(1));
                t.push_req(
                    1,
                    Req {
                        intended_ns: round * 10 + i,
                        ..Req::default()
                    },
                );
            }
            assert!(!t.has_free_slot(1));
            t.stamp_sent(1, 3, 42);
            for i in 0..3 {
                let r = t.pop_front(1).unwrap();
                assert_eq!(r.intended_ns, round * 10 + i);
                assert_eq!(r.sent, 42);
            }
            t.conns[1].unsent = 0;
        }
        assert!(t.pop_front(1).is_none());
        assert!(t.front(0).is_none());
    }

    #[test]
    fn backlog_is_bounded_fifo() {
        let mut b = Fifo::<(u64, u64)>::with_capacity(2);
        assert!(b.push((1, 1)));
        assert!(b.push((2, 2)));
        assert!(
            !b.push((3, 3)),
            "full backlog refuses, caller counts overflow"
        );
        assert_eq!(b.pop(), Some((1, 1)));
        assert!(b.push((3, 3)));
        assert_eq!(b.pop(), Some((2, 2)));
        assert_eq!(b.pop(), Some((3, 3)));
        assert!(b.is_empty());
    }

    #[test]
    fn index_queue_round_robins() {
        let mut q = IndexQueue::with_capacity(3);
        assert!(q.push(0) && q.push(1));
        assert_eq!(q.pop(), Some(0));
        assert!(q.push(2) && q.push(0));
        assert_eq!(
            (q.pop(), q.pop(), q.pop(), q.pop()),
            (Some(1), Some(2), Some(0), None)
        );
    }

    /// Against a VecDeque model, for capacities around powers of two: every push up to
    /// the requested depth fits, the next is refused, and order survives many wraps.
    #[test]
    fn fifo_matches_model_at_capacity_boundaries() {
        for cap in [1usize, 2, 3, 4, 5, 7, 8, 9, 16, 17] {
            let mut f = Fifo::<u64>::with_capacity(cap);
            let mut model = std::collections::VecDeque::new();
            let mut rng = fastrand::Rng::with_seed(cap as u64);
            for v in 0..2_000u64 {
                if rng.bool() {
                    let fits = model.len() < cap;
                    assert_eq!(f.push(v), fits, "cap {cap} len {}", model.len());
                    if fits {
                        model.push_back(v);
                    }
                } else {
                    assert_eq!(f.pop(), model.pop_front(), "cap {cap}");
                }
                assert_eq!(f.len(), model.len());
                assert_eq!(f.front(), model.front().copied());
            }
            // Fill to exactly the requested depth from a wrapped head.
            while f.push(0) {}
            assert_eq!(f.len(), cap, "a requested depth still fits");
        }
    }

    /// Issue 22: the memory a held connection costs is the connection slot plus the
    /// entries of the queues it sits in (the watch list, the ready queue); its request
    /// slots and the backlog's room for its pipeline become resident only when used.
    /// The sum stays within the bound, so a field that grows the table cannot pass
    /// silently (`bench/connections.sh` measures the whole, docs/figures.md).
    #[test]
    fn a_held_connection_costs_at_most_its_bound() {
        let held = std::mem::size_of::<Conn>() + 2 * std::mem::size_of::<u32>();
        eprintln!(
            "Conn {} B, Req {} B, AnyFramer {} B: {held} B per held connection",
            std::mem::size_of::<Conn>(),
            std::mem::size_of::<Req>(),
            std::mem::size_of::<AnyFramer>()
        );
        assert!(
            held <= crate::limits::HELD_CONNECTION_BYTES_MAX,
            "{held} B per held connection"
        );
        assert!(std::mem::size_of::<Req>() <= 40);
    }

    /// Untouched capacity is not written: a backlog sized for 1,000,000 requests
    /// stores only what was pushed (the rest stays unreserved pages), and a request
    /// table starts as default requests.
    #[test]
    fn queues_and_slots_start_untouched_and_default() {
        let mut b = Backlog::with_capacity(1_000_000);
        assert_eq!(b.buf.len(), 0);
        assert!(b.buf.capacity() >= 1_000_000);
        assert!(b.push(Req::default()));
        assert_eq!(b.buf.len(), 1);
        let t = ConnTable::new(3, 4, Framing::Echo.framer(8, 1 << 20));
        assert_eq!(t.slots.len(), 12);
        for r in t.slots.iter() {
            assert_eq!(
                (r.intended_ns, r.dispatched, r.sent, r.seq, r.entry),
                (0, 0, 0, 0, 0)
            );
        }
    }

    /// The slot index equals the `%` formula for every head and offset, for pipelines
    /// that are and are not powers of two, and stays inside the connection's slots.
    #[test]
    fn slot_index_wraps_like_modulo() {
        for pipeline in [1u32, 2, 3, 4, 5, 8, 13] {
            let mut t = ConnTable::new(3, pipeline as usize, Framing::Echo.framer(8, 1 << 20));
            for head in 0..pipeline {
                t.conns[2].head = head;
                for nth in 0..pipeline {
                    let want = 2 * pipeline as usize + ((head + nth) % pipeline) as usize;
                    assert_eq!(t.slot_index(2, nth), want, "p {pipeline} h {head} n {nth}");
                }
                t.conns[2].inflight = 1;
                t.pop_front(2);
                assert_eq!(t.conns[2].head, (head + 1) % pipeline);
            }
        }
    }
}
