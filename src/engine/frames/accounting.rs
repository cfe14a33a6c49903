//! Receive accounting of `--workload frames`, pure (no I/O, no clock): every frame that
//! arrives at a receiving connection is checked against the plan by its source and
//! sequence number, so a frame that never arrives is counted, not merely missing from
//! a latency histogram (coordinated omission's frame-sync variant).
//!
//! Per (receiver, source) a [`SeqWindow`]: the last [`WINDOW_SEQS`] sequence numbers
//! as a bitmap. A sequence seen twice is a duplicate; one below the highest seen is
//! reordered; one that pushes older unfilled sequences out of the window finalises
//! them as lost (per interval); one older than the window is stale (too old to tell a
//! late frame from a duplicate; counted, never received). A gap (a sequence below the
//! highest seen that has not arrived) is also finalised as lost by time, in the
//! interval during which it became more than the budget plus [`reorder_allowance_ns`]
//! older than its intended send instant ([`FrameBook::expire`]), so a loss shows in
//! the second it happened, not 128 frames later. Memory is fixed at start:
//! connections x room size windows, and [`FAN_SLOTS`] fan-out slots per source.
//!
//! Per planned frame: a receiver expects every frame its room's other members are
//! planned to send during the run (its own too with `--echo-to-sender`) from the
//! instant it joined the room. A broadcast server learns a member from its first
//! frame, so receiver r joins at its first planned send, `phase(r)`: frame 0 of a
//! member with an earlier phase (a lower member index) is not expected at r, and
//! counts as `before_join` if it comes (not foreign: a server that learns members on
//! connect relays it, as does one that reads r's first frame before it). Loss over
//! the run is expected minus received (unique), whichever way a frame went missing.
//! Fan-out completion: the instant the last receiver of the room got a frame, minus
//! the frame's intended send instant; a frame some receiver never got gives no sample
//! and counts as incomplete.

use crate::clock::Nanos;
use crate::engine::recorder::{FrameCounters, Histograms};
use crate::proto::frame::{Entry, FrameHeader};
use crate::schedule::{FrameGrid, SlotMap};

/// Sequence numbers remembered per (receiver, source).
pub const WINDOW_SEQS: u64 = 128;
/// Frames per source whose fan-out is tracked at once (a frame still incomplete
/// [`FAN_SLOTS`] ticks later is incomplete for good).
pub const FAN_SLOTS: usize = 64;

/// The shortest wait past a frame's budget for a gap to fill by reordering.
pub const REORDER_ALLOWANCE_NS_MIN: u64 = 200_000_000;
/// The allowance in ticks, when that is longer.
pub const REORDER_ALLOWANCE_TICKS: u64 = 4;

/// How long past its budget a gap waits for the missing frame (a reordered frame
/// arrives after a newer one): four ticks, at least 200 ms.
pub fn reorder_allowance_ns(tick_ns: u64) -> u64 {
    tick_ns
        .saturating_mul(REORDER_ALLOWANCE_TICKS)
        .max(REORDER_ALLOWANCE_NS_MIN)
}

/// What one arrival was, for one (receiver, source).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// First arrival of this sequence; `jitter_ns` when it follows its predecessor
    /// (|gap between the two arrivals - tick|).
    New {
        reordered: bool,
        jitter_ns: Option<u64>,
    },
    Duplicate,
    /// Older than the window.
    Stale,
}

/// The recent sequence numbers from one source at one receiver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeqWindow {
    /// Bit i: sequence `base + i` arrived.
    bits: u128,
    base: u64,
    /// One past the highest sequence seen.
    top: u64,
    /// The newest sequence seen and when (for jitter).
    last_seq: u64,
    last_at: Nanos,
    seen_any: bool,
}

impl SeqWindow {
    /// A window whose first expected sequence is `seq` (earlier ones are stale).
    pub fn starting_at(seq: u64) -> SeqWindow {
        SeqWindow {
            base: seq,
            top: seq,
            ..SeqWindow::default()
        }
    }

    /// Records sequence `seq` arriving at `at`; returns what it was and how many older
    /// sequences it pushed out of the window without their having arrived (lost).
    #[inline]
    pub fn arrive(&mut self, seq: u64, at: Nanos, tick_ns: u64) -> (Seen, u64) {
        if seq < self.base {
            return (Seen::Stale, 0);
        }
        let mut lost = 0;
        if seq >= self.base + WINDOW_SEQS {
            let shift = seq - (self.base + WINDOW_SEQS - 1);
            if shift >= WINDOW_SEQS {
                lost = (WINDOW_SEQS - u64::from(self.bits.count_ones())) + (shift - WINDOW_SEQS);
                self.bits = 0;
            } else {
                let out = self.bits & ((1u128 << shift) - 1);
                lost = shift - u64::from(out.count_ones());
                self.bits >>= shift;
            }
            self.base += shift;
        }
        let bit = 1u128 << (seq - self.base);
        if self.bits & bit != 0 {
            return (Seen::Duplicate, lost);
        }
        self.bits |= bit;
        let reordered = seq + 1 < self.top;
        self.top = self.top.max(seq + 1);
        let jitter_ns = (self.seen_any && seq == self.last_seq + 1)
            .then(|| (at.saturating_sub(self.last_at)).abs_diff(tick_ns));
        if !self.seen_any || seq > self.last_seq {
            self.last_seq = seq;
            self.last_at = at;
            self.seen_any = true;
        }
        (
            Seen::New {
                reordered,
                jitter_ns,
            },
            lost,
        )
    }
}

impl SeqWindow {
    /// Finalises as lost the gaps below `limit` (the sequences whose time is up):
    /// those below the highest seen that never arrived; returns how many. Sequences at
    /// or above the highest seen are not gaps (they may still be on their way) and stay.
    #[inline]
    pub fn expire(&mut self, limit: u64) -> u64 {
        let limit = limit.min(self.top);
        if limit <= self.base {
            return 0;
        }
        // `top <= base + WINDOW_SEQS`: the shift stays within the bitmap.
        let shift = limit - self.base;
        let (out, rest) = if shift >= WINDOW_SEQS {
            (self.bits, 0)
        } else {
            (self.bits & ((1u128 << shift) - 1), self.bits >> shift)
        };
        self.bits = rest;
        self.base = limit;
        shift - u64::from(out.count_ones())
    }
}

/// One source frame's progress to its room's receivers.
#[derive(Debug, Clone, Copy, Default)]
struct FanSlot {
    seq: u64,
    got: u32,
    last_at: Nanos,
}

/// A worker's receive accounting over its connections (whole rooms).
pub struct FrameBook {
    grid: FrameGrid,
    /// Global index of the worker's first connection (a room boundary).
    first: u64,
    count: usize,
    echo: bool,
    budget_ns: u64,
    duration_ns: Nanos,
    /// Per receiver, per member of its room.
    windows: Box<[SeqWindow]>,
    /// Frames received (unique, planned) per receiver.
    unique: Box<[u64]>,
    fan: Box<[FanSlot]>,
    /// Frames per source whose fan-out completed.
    fan_complete: u64,
    /// Gaps finalised as lost by the windows so far.
    lost_so_far: u64,
    /// Frames received (unique, planned) by every receiver so far.
    received: u64,
    /// `--aggregate`: frames arrive as entries of downlink frames ([`FrameBook::carried`]).
    aggregate: bool,
    /// Which of the worker's connections share a room (`--room-layout`): the
    /// one-member layout, or a member slot's permutation ([`crate::schedule::room_mix`]).
    map: SlotMap,
    /// Under a permutation with a ramp, per room of the worker, the instant its last
    /// member joins (a room's joins are then not in member order); empty otherwise
    /// (without a ramp the last joins before the end of the first tick).
    room_joined: Box<[Nanos]>,
    /// `--slow-readers`: per receiver, whether it reads slowly (empty: none does).
    /// A slow receiver's frames count in `slow_n`, never in the interval's figures,
    /// the deviation and jitter histograms, `received` or `lost_so_far`.
    slow: Box<[bool]>,
    slow_n: FrameCounters,
}

/// The run's totals of one worker's accounting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BookTotals {
    /// Frames the receivers were planned to get.
    pub expected: u64,
    pub received: u64,
    /// Per receiver: (expected, received).
    pub per_receiver: Vec<(u64, u64)>,
    /// Frames sent to at least one receiver, and those all receivers got.
    pub fanout_expected: u64,
    pub fanout_complete: u64,
    /// Loss not yet finalised by the windows (counted at the end).
    pub lost_at_end: u64,
    /// `--slow-readers`: the slow receivers' part, apart from all the above.
    pub slow: SlowBook,
}

/// What the slow receivers (`--slow-readers`) were planned to get and got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlowBook {
    pub receivers: u64,
    pub expected: u64,
    /// Received (unique), late, duplicates, stale, and `lost`: gaps below a frame
    /// received, which over TCP the server dropped.
    pub n: FrameCounters,
}

impl SlowBook {
    pub fn add(&mut self, o: &SlowBook) {
        self.receivers += o.receivers;
        self.expected += o.expected;
        self.n.add(&o.n);
    }
}

impl FrameBook {
    pub fn new(
        grid: FrameGrid,
        first: u64,
        count: usize,
        echo: bool,
        budget_ns: u64,
        duration_ns: Nanos,
    ) -> FrameBook {
        let map = SlotMap::identity(first, grid.room_size);
        FrameBook::placed(grid, first, count, echo, budget_ns, duration_ns, map)
    }

    /// [`FrameBook::new`] with the rooms placed by `map` (a member slot's layout).
    pub fn placed(
        grid: FrameGrid,
        first: u64,
        count: usize,
        echo: bool,
        budget_ns: u64,
        duration_ns: Nanos,
        map: SlotMap,
    ) -> FrameBook {
        assert_eq!(first % grid.room_size, 0, "a worker owns whole rooms");
        // A window per (receiver, sender): K senders per room, or the whole room.
        let r_size = grid.senders_per_room() as usize;
        let mut windows = vec![SeqWindow::default(); count * r_size].into_boxed_slice();
        // Frames sent before the receiver joined (frame 0 of a lower member; under a
        // ramp, everything before it) are not expected: its window starts at the first
        // expected one, so that gap is never counted lost.
        for (i, w) in windows.iter_mut().enumerate() {
            let (r, m) = (i / r_size, i % r_size);
            let gr = first + r as u64;
            let room = map.room(gr);
            if m as u64 >= grid.members(room) {
                continue; // a short last room's missing member: never sends
            }
            let gs = map.conn(room, m as u64);
            *w = SeqWindow::starting_at(grid.first_expected(gs, gr));
        }
        let first_room = first / grid.room_size;
        // Without a ramp every member joins within the first tick (its phase), so the
        // table is needed only with one: 8 bytes per room and member slot otherwise
        // (792 B per connection at 100 members in rooms of one).
        let room_joined: Box<[Nanos]> = if map.is_identity() || grid.join_gap_ns == 0 {
            Box::new([])
        } else {
            (first_room..(first + count as u64).div_ceil(grid.room_size))
                .map(|room| {
                    (0..grid.members(room))
                        .map(|m| grid.joined_ns(map.conn(room, m)))
                        .max()
                        .unwrap_or(0)
                })
                .collect()
        };
        FrameBook {
            grid,
            first,
            count,
            echo,
            budget_ns,
            duration_ns,
            windows,
            unique: vec![0; count].into_boxed_slice(),
            fan: vec![FanSlot::default(); count * FAN_SLOTS].into_boxed_slice(),
            fan_complete: 0,
            lost_so_far: 0,
            received: 0,
            aggregate: false,
            map,
            room_joined,
            slow: Box::new([]),
            slow_n: FrameCounters::default(),
        }
    }

    /// The same book with receivers `slow[r]` reading slowly (`--slow-readers`).
    pub fn with_slow(mut self, slow: Box<[bool]>) -> FrameBook {
        assert!(slow.is_empty() || slow.len() == self.count);
        self.slow = slow;
        self
    }

    #[inline]
    fn is_slow(&self, r: usize) -> bool {
        !self.slow.is_empty() && self.slow[r]
    }

    /// The room (global) of connection `j` of this book's worker.
    #[inline]
    pub fn room_of(&self, j: u64) -> u64 {
        self.map.room(j)
    }

    /// Receivers of frame `k` of source `gs` in `room`: [`FrameGrid::receivers`], with
    /// the room's members wherever the layout put them (their joins are then not in
    /// member order: counted one by one, only while the room is still filling, i.e.
    /// frame 0 without a ramp).
    #[inline]
    fn receivers(&self, gs: u64, room: u64, k: u64) -> u64 {
        let g = &self.grid;
        if self.map.is_identity() {
            return g.receivers(gs, k, self.echo);
        }
        let t = g.intended_ns(gs, k);
        let members = g.members(room);
        let filled = if self.room_joined.is_empty() {
            // No ramp: each member joins at its phase, within the first tick.
            t >= g.tick_ns
        } else {
            self.room_joined[(room - self.first / g.room_size) as usize] < t
        };
        let before = if g.joined_at_start || filled {
            members
        } else {
            (0..members)
                .filter(|&m| g.joined_ns(self.map.conn(room, m)) < t)
                .count() as u64
        };
        let self_counted = u64::from(g.joined_at_start || g.joined_ns(gs) < t);
        before - self_counted + u64::from(self.echo)
    }

    /// Bytes a book over `receivers` connections in rooms of `room_size` allocates at
    /// start: a [`SeqWindow`] per (receiver, room member), a unique count per receiver
    /// and [`FAN_SLOTS`] fan-out slots per receiver (each receiver is also a source).
    /// Linear in the receivers, so a plan's workers together need
    /// `bytes_for(connections, room_size)` whatever its split; saturates rather than
    /// wraps (a plan that large is refused either way).
    pub fn bytes_for(receivers: u64, senders_per_room: u64) -> u64 {
        let window = std::mem::size_of::<SeqWindow>() as u64;
        let per_receiver = senders_per_room
            .saturating_mul(window)
            .saturating_add(std::mem::size_of::<u64>() as u64)
            .saturating_add(FAN_SLOTS as u64 * std::mem::size_of::<FanSlot>() as u64);
        receivers.saturating_mul(per_receiver)
    }

    /// Bytes this book's tables hold (what [`FrameBook::bytes_for`] predicts).
    pub fn table_bytes(&self) -> u64 {
        (std::mem::size_of_val(&*self.windows)
            + std::mem::size_of_val(&*self.unique)
            + std::mem::size_of_val(&*self.fan)) as u64
    }

    /// The same book for `--aggregate`: frames arrive as entries of downlink frames,
    /// and only frames from 1 on have a fan-out (see [`FrameBook::carried`]).
    pub fn aggregated(mut self) -> FrameBook {
        self.aggregate = true;
        self
    }

    /// Whether downlink frame `h` is addressed to local receiver `r` (its room, and
    /// the receiver as member).
    #[inline]
    pub fn addressed_to(&self, r: u32, h: &FrameHeader) -> bool {
        debug_assert!(self.map.is_identity(), "--aggregate has one member slot");
        let gr = self.first + u64::from(r);
        let (room, member) = self.grid.room_member(gr);
        u64::from(h.room) == room && u64::from(h.member) == member
    }

    /// Frame `seq` of global sender `gs` (sent for `intended_ns`) reached one more of
    /// its `receivers` at `at`: when that was the last one, its fan-out completion
    /// (intended -> last receiver) is recorded.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn fan_arrival(
        &mut self,
        gs: u64,
        seq: u64,
        intended_ns: Nanos,
        at: Nanos,
        receivers: u64,
        hist: &mut Histograms,
        n: &mut FrameCounters,
    ) {
        let s = (gs - self.first) as usize;
        let slot = &mut self.fan[s * FAN_SLOTS + (seq as usize % FAN_SLOTS)];
        if slot.seq != seq || slot.got == 0 {
            *slot = FanSlot {
                seq,
                got: 0,
                last_at: 0,
            };
        }
        slot.got += 1;
        slot.last_at = slot.last_at.max(at);
        if u64::from(slot.got) == receivers {
            hist.frame_fanout
                .saturating_record(slot.last_at.saturating_sub(intended_ns));
            self.fan_complete += 1;
            n.fanout_complete += 1;
        }
    }

    /// `--aggregate`: entry `e` of a downlink frame arrived at local receiver `r` at
    /// `at`. False when `e` is not a frame of the room's timetable (another member's
    /// frame as planned, the receiver's own only with echo, its intended instant
    /// exactly the timetable's): it must then neither count nor bound the tick.
    /// Frames after a member's first feed the fan-out (deduplicated by the (receiver,
    /// source) window); its first frame's receivers are whoever the server knew at its tick.
    #[inline]
    pub fn carried(
        &mut self,
        r: u32,
        e: &Entry,
        at: Nanos,
        hist: &mut Histograms,
        n: &mut FrameCounters,
    ) -> bool {
        debug_assert!(self.map.is_identity(), "--aggregate has one member slot");
        let g = &self.grid;
        let gr = self.first + u64::from(r);
        let room = gr / g.room_size;
        let members = g.members(room);
        let member = u64::from(e.member);
        let gs = room * g.room_size + member;
        if member >= members
            || (gs == gr && !self.echo)
            || !g.is_planned(gs, e.seq, self.duration_ns)
            || e.intended_ns != g.intended_ns(gs, e.seq)
        {
            return false;
        }
        // A member's first frame (frame 0, or under a ramp the first after it
        // joined) reaches whoever the server knew at its tick: no fan-out.
        if e.seq == g.start_k(gs) {
            return true;
        }
        let w = r as usize * g.senders_per_room() as usize + member as usize;
        if let (Seen::New { .. }, _) = self.windows[w].arrive(e.seq, at, g.tick_ns) {
            let receivers = g.receivers(gs, e.seq, self.echo);
            self.fan_arrival(gs, e.seq, e.intended_ns, at, receivers, hist, n);
        }
        true
    }

    /// Frames of source `gs` receiver `gr` expects: the planned ones from the first
    /// sent after it joined.
    fn expected_from(&self, gs: u64, gr: u64) -> u64 {
        let g = &self.grid;
        let planned = g.planned(gs, self.duration_ns);
        let skipped = g.first_expected(gs, gr) - g.start_k(gs);
        planned.saturating_sub(skipped)
    }

    /// Accounts frame `h` arriving at local receiver `r` at `at`, recording into `hist`
    /// and `n`.
    #[inline]
    pub fn arrive(
        &mut self,
        r: u32,
        h: &FrameHeader,
        at: Nanos,
        hist: &mut Histograms,
        n: &mut FrameCounters,
    ) {
        let g = &self.grid;
        let gr = self.first + u64::from(r);
        let room = self.map.room(gr);
        let members = g.members(room);
        let member = u64::from(h.member);
        if u64::from(h.room) != room || member >= members {
            n.foreign += 1;
            return;
        }
        // The member's connection: its phase, join and fan-out slots are its own, and
        // its frame carries its timetable's instant (one of another connection with
        // the same member number, delivered to the wrong room, does not).
        let gs = self.map.conn(room, member);
        if (gs == gr && !self.echo)
            || g.planned_at(gs, h.seq, self.duration_ns) != Some(h.intended_ns)
        {
            n.foreign += 1;
            return;
        }
        if h.seq < g.first_expected(gs, gr) {
            // A room mate's frame sent before this receiver joined: the server knew
            // the receiver already (it learns members on connect, or it read the
            // receiver's first frame first). Not expected, and not foreign either.
            n.before_join += 1;
            return;
        }
        let w = r as usize * g.senders_per_room() as usize + member as usize;
        let (seen, lost) = self.windows[w].arrive(h.seq, at, g.tick_ns);
        let slow = self.is_slow(r as usize);
        // A slow reader's figures apart: the others' stay what the server did to them.
        if !slow {
            self.lost_so_far += lost;
        }
        let c = if slow { &mut self.slow_n } else { &mut *n };
        c.lost += lost;
        match seen {
            Seen::Duplicate => c.duplicates += 1,
            Seen::Stale => c.stale += 1,
            Seen::New {
                reordered,
                jitter_ns,
            } => {
                self.unique[r as usize] += 1;
                c.received += 1;
                c.reordered += u64::from(reordered);
                let deviation = at.saturating_sub(h.intended_ns);
                c.late += u64::from(deviation > self.budget_ns);
                if !slow {
                    self.received += 1;
                    hist.frame_deviation.saturating_record(deviation);
                    if let Some(j) = jitter_ns {
                        hist.frame_jitter.saturating_record(j);
                    }
                }
                let receivers = self.receivers(gs, room, h.seq);
                self.fan_arrival(gs, h.seq, h.intended_ns, at, receivers, hist, n);
            }
        }
    }

    /// Finalises as lost, into `n`, every gap whose frame was intended more than the
    /// budget plus [`reorder_allowance_ns`] before `now` (see [`SeqWindow::expire`]).
    /// Called at each interval's end. Not under `--aggregate`, whose downlink ticks
    /// are accounted by [`super::downlink`] (these windows only deduplicate fan-out).
    pub fn expire(&mut self, now: Nanos, n: &mut FrameCounters) {
        let g = &self.grid;
        let wait = self.budget_ns + reorder_allowance_ns(g.tick_ns);
        if self.aggregate || now <= wait {
            return;
        }
        let due = (now - wait).min(self.duration_ns);
        let r_size = g.senders_per_room() as usize;
        let (mut lost, mut slow_lost) = (0, 0);
        for (i, w) in self.windows.iter_mut().enumerate() {
            let (r, m) = (i / r_size, (i % r_size) as u64);
            let (gr, slow) = (self.first + r as u64, !self.slow.is_empty() && self.slow[r]);
            let room = self.map.room(gr);
            if m < g.members(room) {
                let gone = w.expire(g.due_before(self.map.conn(room, m), due));
                if slow {
                    slow_lost += gone;
                } else {
                    lost += gone;
                }
            }
        }
        n.lost += lost;
        self.lost_so_far += lost;
        self.slow_n.lost += slow_lost;
    }

    /// The run's totals (after the drain).
    pub fn totals(&self) -> BookTotals {
        let g = &self.grid;
        let mut t = BookTotals::default();
        for r in 0..self.count as u64 {
            let gr = self.first + r;
            let room = self.map.room(gr);
            let members = g.members(room);
            let mut expected = 0;
            for m in 0..members.min(g.senders) {
                let gs = self.map.conn(room, m);
                if gs != gr || self.echo {
                    expected += self.expected_from(gs, gr);
                }
            }
            let got = self.unique[r as usize];
            if self.is_slow(r as usize) {
                t.slow.receivers += 1;
                t.slow.expected += expected;
            } else {
                t.expected += expected;
                t.received += got;
                t.per_receiver.push((expected, got));
            }
            // As a source: its frames that have at least one receiver.
            // (receivers never decrease with k: count up to the first frame with any.)
            let start = g.start_k(gr);
            let planned = g.planned(gr, self.duration_ns);
            if planned == 0 {
                continue; // a listener
            }
            let end = start + planned;
            // Aggregated: a member's first frame has no fan-out (see `carried`).
            let mut k = start + u64::from(self.aggregate);
            while k < end && self.receivers(gr, room, k) == 0 {
                k += 1;
            }
            t.fanout_expected += end - k;
        }
        t.fanout_complete = self.fan_complete;
        t.lost_at_end = (t.expected - t.received).saturating_sub(self.lost_so_far);
        t.slow.n = self.slow_n;
        t
    }
}

/// The accounting of a worker whose connections carry M members each
/// (`--members-per-connection`): member slot s of every connection is one copy of the
/// one-member grid, its rooms numbered `s x rooms + room` on the wire, so a room's
/// members sit on different connections and every slot has its own [`FrameBook`].
/// Which connections share a room in slot s is the slot's [`SlotMap`] (the one-member
/// layout, or under `--room-layout mixed` a seeded permutation): the book that accounts
/// for the slot is also what the sender and the join ask for a connection's room.
pub struct MemberBooks {
    books: Box<[FrameBook]>,
    /// Rooms of one slot (the whole run's), the stride of the wire's room ids.
    rooms: u64,
}

impl MemberBooks {
    /// `members` books (slots; `book(s)` makes slot s's) over the worker's connections.
    pub fn new(book: impl Fn(usize) -> FrameBook, members: usize, rooms: u64) -> MemberBooks {
        assert!(members >= 1 && rooms >= 1);
        MemberBooks {
            books: (0..members).map(book).collect(),
            rooms,
        }
    }

    /// The wire room id of connection `j`'s member in slot `slot`: its room in the
    /// slot's layout, plus `slot x rooms`.
    #[inline]
    pub fn wire_room(&self, slot: usize, j: u64) -> u32 {
        (slot as u64 * self.rooms + self.books[slot].room_of(j)) as u32
    }

    /// The slot of wire room `room` and the room within it (`None`: no slot has it).
    #[inline]
    fn slot(&self, room: u32) -> Option<(usize, u32)> {
        if self.books.len() == 1 {
            return Some((0, room));
        }
        let (slot, within) = (u64::from(room) / self.rooms, u64::from(room) % self.rooms);
        (slot < self.books.len() as u64).then_some((slot as usize, within as u32))
    }

    /// [`FrameBook::arrive`] in the slot the frame's room names; a room of no slot is
    /// foreign.
    #[inline]
    pub fn arrive(
        &mut self,
        r: u32,
        h: &FrameHeader,
        at: Nanos,
        hist: &mut Histograms,
        n: &mut FrameCounters,
    ) {
        match self.slot(h.room) {
            Some((slot, room)) => {
                let h = FrameHeader { room, ..*h };
                self.books[slot].arrive(r, &h, at, hist, n);
            }
            None => n.foreign += 1,
        }
    }

    /// `--aggregate` (one member per connection): [`FrameBook::addressed_to`].
    #[inline]
    pub fn addressed_to(&self, r: u32, h: &FrameHeader) -> bool {
        self.books[0].addressed_to(r, h)
    }

    /// `--aggregate` (one member per connection): [`FrameBook::carried`].
    #[inline]
    pub fn carried(
        &mut self,
        r: u32,
        e: &Entry,
        at: Nanos,
        hist: &mut Histograms,
        n: &mut FrameCounters,
    ) -> bool {
        self.books[0].carried(r, e, at, hist, n)
    }

    /// The slots' totals together; `per_receiver` slot by slot.
    pub fn totals(&self) -> BookTotals {
        let mut t = BookTotals::default();
        for b in self.books.iter() {
            let x = b.totals();
            t.expected += x.expected;
            t.received += x.received;
            t.per_receiver.extend(x.per_receiver);
            t.fanout_expected += x.fanout_expected;
            t.fanout_complete += x.fanout_complete;
            t.lost_at_end += x.lost_at_end;
            t.slow.add(&x.slow);
        }
        t
    }

    /// [`FrameBook::expire`] in every slot.
    pub fn expire(&mut self, now: Nanos, n: &mut FrameCounters) {
        for b in self.books.iter_mut() {
            b.expire(now, n);
        }
    }

    /// Bytes the books' tables hold.
    pub fn table_bytes(&self) -> u64 {
        self.books.iter().map(FrameBook::table_bytes).sum()
    }

    /// Frames received (unique, planned) so far, over every slot.
    pub fn received(&self) -> u64 {
        self.books.iter().map(|b| b.received).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::SENDERS_ALL;

    const TICK: u64 = 20_000_000;

    #[test]
    fn window_counts_duplicates_reorder_jitter_and_slides_out_gaps_as_lost() {
        let mut w = SeqWindow::default();
        assert_eq!(
            w.arrive(0, 1_000, TICK),
            (
                Seen::New {
                    reordered: false,
                    jitter_ns: None
                },
                0
            )
        );
        // 25 ms after its predecessor: 5 ms of jitter.
        assert_eq!(
            w.arrive(1, 1_000 + 25_000_000, TICK),
            (
                Seen::New {
                    reordered: false,
                    jitter_ns: Some(5_000_000)
                },
                0
            )
        );
        assert_eq!(w.arrive(1, 2, TICK).0, Seen::Duplicate);
        // 2 skipped, then 3, then 2 late: reordered.
        assert!(matches!(
            w.arrive(3, 3, TICK).0,
            Seen::New {
                reordered: false,
                ..
            }
        ));
        assert!(matches!(
            w.arrive(2, 4, TICK).0,
            Seen::New {
                reordered: true,
                ..
            }
        ));
        // Sequence 5 never comes; 4 does. 4 + 128 pushes 0..=4 out: 0 lost (all seen)...
        w.arrive(4, 5, TICK);
        assert_eq!(w.arrive(4 + WINDOW_SEQS, 6, TICK).1, 0);
        // ...and 5 + 128 pushes out 5: one lost.
        assert_eq!(w.arrive(5 + WINDOW_SEQS, 7, TICK).1, 1);
        assert_eq!(w.arrive(5, 8, TICK).0, Seen::Stale);
        // A jump far ahead finalises every gap in between.
        let (_, lost) = w.arrive(5 + 3 * WINDOW_SEQS, 9, TICK);
        // Window was 6..=133 with 132 and 133 seen: 126 unseen there, plus 134..=388
        // below the new base 389 - 127 = 262 ... counted exactly:
        let unseen_in_window = WINDOW_SEQS - 2;
        let beyond = (5 + 3 * WINDOW_SEQS) - (6 + WINDOW_SEQS - 1) - WINDOW_SEQS;
        assert_eq!(lost, unseen_in_window + beyond);
    }

    #[test]
    fn expire_finalises_only_the_gaps_below_the_limit_and_the_highest_seen() {
        let mut w = SeqWindow::starting_at(10);
        for seq in [10, 12, 15] {
            w.arrive(seq, 0, TICK);
        }
        // Nothing is due yet; then 10..13 is due: 11 is a gap.
        assert_eq!(w.expire(10), 0);
        assert_eq!(w.expire(13), 1);
        assert_eq!(w.expire(13), 0, "counted once");
        // Everything is due, but only sequences below the highest seen (15) are gaps:
        // 13 and 14; 16 on may still be on its way.
        assert_eq!(w.expire(1_000), 2);
        // A gap's frame arriving after it was counted is stale, not received.
        assert_eq!(w.arrive(14, 0, TICK).0, Seen::Stale);
        assert!(matches!(w.arrive(16, 0, TICK).0, Seen::New { .. }));
        // The window's arrival rule and the time rule never count a gap twice.
        let mut w = SeqWindow::starting_at(0);
        w.arrive(1, 0, TICK); // 0 is a gap
        assert_eq!(w.expire(1), 1);
        // 129 moves the window to 2..=129 (1 leaves it, seen): nothing lost yet...
        assert_eq!(w.arrive(WINDOW_SEQS + 1, 0, TICK).1, 0);
        // ...then 2..=128 expire, once.
        assert_eq!(w.expire(u64::MAX), WINDOW_SEQS - 1);
        assert_eq!(w.arrive(2 * WINDOW_SEQS + 1, 0, TICK).1, 0);
        // A full window's gaps at once.
        let mut w = SeqWindow::starting_at(0);
        w.arrive(WINDOW_SEQS - 1, 0, TICK);
        assert_eq!(w.expire(u64::MAX), WINDOW_SEQS - 1);
    }

    #[test]
    fn a_gap_counts_lost_in_the_interval_its_time_ran_out() {
        // One room of 2, 50 ms ticks, budget one tick: the allowance is 200 ms (four
        // ticks are 200 ms too), so frame k's gap is due at 50k + phase + 250 ms.
        let grid = FrameGrid {
            tick_ns: 50_000_000,
            connections: 2,
            room_size: 2,
            join_gap_ns: 0,
            joined_at_start: false,
            senders: SENDERS_ALL,
        };
        assert_eq!(reorder_allowance_ns(grid.tick_ns), 200_000_000);
        assert_eq!(reorder_allowance_ns(100_000_000), 400_000_000);
        let d = 40 * grid.tick_ns; // 2 s
        let mut b = FrameBook::new(grid, 0, 2, false, grid.tick_ns, d);
        let (mut h, mut n) = (Histograms::new(), FrameCounters::default());
        // Member 1 gets member 0's frames 1..=30 but 5 and 6, on time.
        for seq in (1..=30).filter(|s| ![5, 6].contains(s)) {
            let f = frame(0, 0, seq, &grid);
            b.arrive(1, &f, f.intended_ns + 1_000_000, &mut h, &mut n);
        }
        // Frame 5 was intended at 250 ms: its gap is due at 500 ms; frame 6's at 550 ms.
        b.expire(499_000_000, &mut n);
        assert_eq!(n.lost, 0);
        b.expire(501_000_000, &mut n);
        assert_eq!(n.lost, 1);
        b.expire(549_000_000, &mut n);
        assert_eq!(n.lost, 1);
        b.expire(551_000_000, &mut n);
        assert_eq!(n.lost, 2);
        // Frames 31.. never came, but nothing newer did: not gaps, however late.
        b.expire(10_000_000_000, &mut n);
        assert_eq!(n.lost, 2);
        let t = b.totals();
        // Member 0 got none of member 1's 40 frames (it had joined before member 1's
        // frame 0), member 1 28 of member 0's 39 after frame 0: the end counts what
        // the intervals did not.
        assert_eq!(t.expected - t.received, 40 + 11);
        assert_eq!(t.lost_at_end, 40 + 11 - 2);
        // Under --aggregate the windows only deduplicate fan-out: nothing expires.
        let mut a = FrameBook::new(grid, 0, 2, false, grid.tick_ns, d).aggregated();
        let mut n = FrameCounters::default();
        a.expire(10_000_000_000, &mut n);
        assert_eq!(n.lost, 0);
    }

    #[test]
    fn bytes_for_is_what_a_book_allocates() {
        for (connections, room, count) in [(3, 3, 3), (40, 10, 20), (12, 4, 12), (7, 7, 7)] {
            let grid = FrameGrid {
                tick_ns: TICK,
                connections,
                room_size: room,
                join_gap_ns: 0,
                joined_at_start: false,
                senders: SENDERS_ALL,
            };
            let b = FrameBook::new(grid, 0, count, false, TICK, 10 * TICK);
            assert_eq!(
                b.table_bytes(),
                FrameBook::bytes_for(count as u64, room),
                "{connections} {room} {count}"
            );
        }
        // The plan issue 21 saw abort: 20,000 connections in one room of 20,000, about
        // 25 GB of sequence windows.
        let big = FrameBook::bytes_for(20_000, 20_000);
        assert!((25_000_000_000..27_000_000_000).contains(&big), "{big}");
        assert_eq!(FrameBook::bytes_for(u64::MAX, 2), u64::MAX);
    }

    fn frame(room: u32, member: u16, seq: u64, grid: &FrameGrid) -> FrameHeader {
        FrameHeader {
            room,
            member,
            seq,
            intended_ns: grid
                .intended_ns(u64::from(room) * grid.room_size + u64::from(member), seq),
            ..FrameHeader::default()
        }
    }

    #[test]
    fn a_room_counts_every_planned_frame_and_its_fan_out() {
        // One worker, one room of 3 (connections 0..3), 10 frames each.
        let grid = FrameGrid {
            tick_ns: TICK,
            connections: 3,
            room_size: 3,
            join_gap_ns: 0,
            joined_at_start: false,
            senders: SENDERS_ALL,
        };
        let d = 10 * TICK;
        let mut b = FrameBook::new(grid, 0, 3, false, TICK, d);
        let mut h = Histograms::new();
        let mut n = FrameCounters::default();
        for seq in 0..10 {
            for src in 0..3u16 {
                let f = frame(0, src, seq, &grid);
                for r in 0..3u32 {
                    if u32::from(src) == r
                        || (src == 2 && r == 0 && seq == 7)
                        || (seq == 0 && u32::from(src) < r)
                    {
                        // Own frame (no echo); one frame lost to 0; and frame 0 of a
                        // member that sent before r joined (the server did not know r).
                        continue;
                    }
                    b.arrive(
                        r,
                        &f,
                        f.intended_ns + 1_000_000 * u64::from(r + 1),
                        &mut h,
                        &mut n,
                    );
                }
            }
        }
        // An own frame without echo, a frame from another room, one past the plan:
        // foreign. Frame 0 of member 0 at member 1 (sent before 1 joined): before_join.
        b.arrive(1, &frame(0, 1, 3, &grid), 0, &mut h, &mut n);
        b.arrive(1, &frame(1, 0, 3, &grid), 0, &mut h, &mut n);
        b.arrive(1, &frame(0, 0, 10, &grid), 0, &mut h, &mut n);
        b.arrive(1, &frame(0, 0, 0, &grid), 0, &mut h, &mut n);
        assert_eq!((n.foreign, n.before_join), (3, 1));
        // A room mate's number on another connection's instant (a frame delivered to
        // the wrong room): foreign.
        let mut off = frame(0, 2, 3, &grid);
        off.intended_ns += 1;
        b.arrive(1, &off, 0, &mut h, &mut n);
        assert_eq!(n.foreign, 4);
        let t = b.totals();
        // 3 x 2 x 10, less frame 0 of (0 at 1), (0 at 2), (1 at 2).
        assert_eq!(t.expected, 3 * 2 * 10 - 3);
        assert_eq!(t.received, 56);
        assert_eq!(n.received, 56);
        assert_eq!(t.per_receiver[0], (20, 19));
        assert_eq!(t.per_receiver[2], (18, 18));
        assert_eq!(t.lost_at_end, 1);
        assert_eq!(n.lost, 0, "no gap left the window in 10 frames");
        // Frame 0 of member 0 has no receiver; one frame (2's seq 7) misses 0.
        assert_eq!(t.fanout_expected, 29);
        assert_eq!(t.fanout_complete, 28);
        assert_eq!(h.frame_fanout.len(), 28);
        // Fan-out is to the last receiver: frames of source 0 reach 1 and 2 at +2 and
        // +3 ms, so their fan-out is 3 ms.
        assert_eq!(
            h.frame_fanout.max(),
            h.frame_fanout.highest_equivalent(3_000_000)
        );
        assert_eq!(h.frame_deviation.len(), 56);
        assert_eq!(n.late, 0);
        // 6 (receiver, source) pairs x 9 consecutive pairs of frames, less the two that
        // the lost frame breaks (7 after 6, 8 after 7) and the three pairs without
        // frame 0.
        assert_eq!(h.frame_jitter.len(), 6 * 9 - 2 - 3);
    }

    #[test]
    fn listeners_get_the_senders_frames_and_windows_grow_with_senders_only() {
        // A room of 6 joined at start, members 0 and 1 speak, 2..6 listen; 5 ticks.
        let grid = FrameGrid {
            tick_ns: TICK,
            connections: 6,
            room_size: 6,
            join_gap_ns: 0,
            joined_at_start: true,
            senders: 2,
        };
        let d = 5 * TICK;
        let mut b = FrameBook::new(grid, 0, 6, false, TICK, d);
        assert_eq!(b.table_bytes(), FrameBook::bytes_for(6, 2));
        // A room of 20,000 listeners and 2 speakers: tens of MiB, not gigabytes.
        assert!(FrameBook::bytes_for(20_000, 2) < 64 << 20);
        assert!(FrameBook::bytes_for(20_000, 20_000) > 8 << 30);
        let (mut h, mut n) = (Histograms::new(), FrameCounters::default());
        for seq in 0..5 {
            for src in 0..2u16 {
                let f = frame(0, src, seq, &grid);
                for r in (0..6u32).filter(|&r| r != u32::from(src)) {
                    b.arrive(r, &f, f.intended_ns + 1_000, &mut h, &mut n);
                }
            }
        }
        // A listener's "frame" is not on the timetable: foreign.
        b.arrive(0, &frame(0, 4, 1, &grid), 0, &mut h, &mut n);
        assert_eq!(n.foreign, 1);
        let t = b.totals();
        // 2 senders x 5 frames, each to the 5 others.
        assert_eq!((t.expected, t.received, t.lost_at_end), (50, 50, 0));
        assert_eq!(t.per_receiver[0], (5, 5));
        assert_eq!(t.per_receiver[4], (10, 10));
        assert_eq!((t.fanout_expected, t.fanout_complete), (10, 10));
    }

    #[test]
    fn the_unexpected_frame_0_never_counts_as_a_gap() {
        // Member 1 never expects frame 0 of member 0; 200 frames 1.. arrive and move
        // the window well past 0: nothing is lost, in the interval or at the end.
        let grid = FrameGrid {
            tick_ns: TICK,
            connections: 2,
            room_size: 2,
            join_gap_ns: 0,
            joined_at_start: false,
            senders: SENDERS_ALL,
        };
        let mut b = FrameBook::new(grid, 0, 2, false, TICK, 201 * TICK);
        let mut h = Histograms::new();
        let mut n = FrameCounters::default();
        for seq in 1..=200 {
            let f = frame(0, 0, seq, &grid);
            b.arrive(1, &f, f.intended_ns, &mut h, &mut n);
        }
        assert_eq!(n.lost, 0);
        let t = b.totals();
        assert_eq!(t.per_receiver[1], (200, 200));
    }

    #[test]
    fn echo_expects_own_frames_and_late_frames_count_against_the_budget() {
        let grid = FrameGrid {
            tick_ns: TICK,
            connections: 2,
            room_size: 2,
            join_gap_ns: 0,
            joined_at_start: false,
            senders: SENDERS_ALL,
        };
        let mut b = FrameBook::new(grid, 0, 2, true, 5_000_000, 2 * TICK);
        let mut h = Histograms::new();
        let mut n = FrameCounters::default();
        let f = frame(0, 0, 1, &grid);
        b.arrive(0, &f, f.intended_ns + 1_000_000, &mut h, &mut n);
        b.arrive(1, &f, f.intended_ns + 6_000_000, &mut h, &mut n);
        assert_eq!((n.received, n.late, n.foreign), (2, 1, 0));
        assert_eq!(n.fanout_complete, 1);
        // 2 receivers x 2 sources x 2 frames, less frame 0 of member 0 at member 1.
        assert_eq!(b.totals().expected, 2 * 2 * 2 - 1);
        // Own frame 0 comes back: expected (a member joins with its first frame).
        let own = frame(0, 1, 0, &grid);
        b.arrive(1, &own, own.intended_ns, &mut h, &mut n);
        assert_eq!(n.foreign, 0);
    }

    /// Relays every planned frame of a slot laid out by `map` the way a broadcast server
    /// that learns members from their first frame does: to the room's other members
    /// that sent before it (a ramp included), each one once.
    fn relay_slot(grid: &FrameGrid, map: &SlotMap, d: Nanos, b: &mut FrameBook) -> FrameCounters {
        let (mut h, mut n) = (Histograms::new(), FrameCounters::default());
        for k in 0..d / grid.tick_ns + 1 {
            for j in 0..grid.connections {
                if !grid.is_planned(j, k, d) {
                    continue;
                }
                let room = map.room(j);
                let f = FrameHeader {
                    room: room as u32,
                    member: (j % grid.room_size) as u16,
                    seq: k,
                    intended_ns: grid.intended_ns(j, k),
                    ..FrameHeader::default()
                };
                for m in 0..grid.members(room) {
                    let r = map.conn(room, m);
                    if r != j && grid.joined_ns(r) < f.intended_ns {
                        b.arrive(r as u32, &f, f.intended_ns + 1_000, &mut h, &mut n);
                    }
                }
            }
        }
        n
    }

    #[test]
    fn a_mixed_slot_counts_every_planned_frame_once() {
        // 43 connections in rooms of 4 (a short last room), with and without a ramp:
        // the permuted rooms' frames are all expected, received, and fanned out.
        for join_gap_ns in [0, TICK / 3] {
            let grid = FrameGrid {
                tick_ns: TICK,
                connections: 43,
                room_size: 4,
                join_gap_ns,
                joined_at_start: false,
                senders: SENDERS_ALL,
            };
            let d = 30 * TICK;
            let map = SlotMap::mixed(9, 1, 0, 43, 4);
            assert!((0..43).any(|j| map.room(j) != j / 4), "the slot is mixed");
            let mut b = FrameBook::placed(grid, 0, 43, false, TICK, d, map.clone());
            let n = relay_slot(&grid, &map, d, &mut b);
            let t = b.totals();
            assert_eq!(
                (n.foreign, n.duplicates, n.lost),
                (0, 0, 0),
                "{join_gap_ns}"
            );
            assert_eq!(t.received, t.expected, "{join_gap_ns}");
            assert!(t.expected > 2_000, "{}", t.expected);
            assert_eq!(t.fanout_complete, t.fanout_expected, "{join_gap_ns}");
            // The same frames placed by the one-member layout are another room's.
            let mut grouped = FrameBook::new(grid, 0, 43, false, TICK, d);
            let n = relay_slot(&grid, &map, d, &mut grouped);
            assert!(n.foreign > 0);
        }
    }

    #[test]
    fn aggregate_entries_complete_a_fan_out_once_and_foreign_ones_are_refused() {
        // One room of 3; frames arrive as entries of downlink frames.
        let grid = FrameGrid {
            tick_ns: TICK,
            connections: 3,
            room_size: 3,
            join_gap_ns: 0,
            joined_at_start: false,
            senders: SENDERS_ALL,
        };
        let mut b = FrameBook::new(grid, 0, 3, false, TICK, 10 * TICK).aggregated();
        let mut h = Histograms::new();
        let mut n = FrameCounters::default();
        let e = |member: u16, seq: u64| Entry {
            member,
            seq,
            intended_ns: grid.intended_ns(u64::from(member), seq),
        };
        let at = e(0, 4).intended_ns + 3_000_000;
        assert!(b.carried(1, &e(0, 4), at, &mut h, &mut n));
        // The same entry twice at one receiver (a duplicate) does not complete it.
        assert!(b.carried(1, &e(0, 4), at, &mut h, &mut n));
        assert_eq!(n.fanout_complete, 0);
        assert!(b.carried(2, &e(0, 4), at + 1_000_000, &mut h, &mut n));
        assert_eq!(n.fanout_complete, 1);
        assert_eq!(
            h.frame_fanout.max(),
            h.frame_fanout.highest_equivalent(4_000_000)
        );
        // Frame 0 is a valid entry but has no fan-out.
        assert!(b.carried(1, &e(0, 0), at, &mut h, &mut n));
        assert!(b.carried(2, &e(0, 0), at, &mut h, &mut n));
        assert_eq!(n.fanout_complete, 1);
        // Not of the timetable: the receiver's own frame, a member past the room, a
        // sequence past the plan, an intended instant off by 1 ns.
        assert!(!b.carried(0, &e(0, 5), at, &mut h, &mut n));
        assert!(!b.carried(0, &e(3, 5), at, &mut h, &mut n));
        assert!(!b.carried(0, &e(1, 10), at, &mut h, &mut n));
        let mut off = e(1, 5);
        off.intended_ns += 1;
        assert!(!b.carried(0, &off, at, &mut h, &mut n));
        // Aggregated: frames from 1 on have a fan-out (3 sources x 9 frames).
        assert_eq!(b.totals().fanout_expected, 3 * 9);
        // Entries are not received frames: the downlink frames are (`downlink`).
        assert_eq!((n.received, h.frame_deviation.len()), (0, 0));
    }
}
