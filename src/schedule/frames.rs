//! The frame timetable of `--workload frames`: connection j of N (global index) sends
//! frame k at `k * tick + j * tick / N`, absolute, for the whole run. The phases spread
//! the N connections evenly over one tick, so the aggregate send rate is smooth rather
//! than N frames at the top of every tick. Pure arithmetic, O(1) per frame.
//!
//! A worker owns a contiguous range of connections (whole rooms); within one tick its
//! connections are due in index order, so its cursor is (k, j) walking j over the range
//! and then k up by one: the due instants it yields never decrease.

use crate::clock::Nanos;

/// The shape of one frame run: the tick, the global connection count, the room size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameGrid {
    pub tick_ns: u64,
    /// Connections in the whole run (N).
    pub connections: u64,
    /// Members per room (R); the last room holds the remainder when R does not divide N.
    pub room_size: u64,
    /// `--connect-rate`: connection j joins (opens) at `j * join_gap_ns`; 0: every
    /// connection is open before the start and sends from frame 0.
    pub join_gap_ns: u64,
    /// Every member joined its room before the schedule started (`--frame-proto`
    /// other than blaster: the join is a subscription in the connect phase), so each
    /// receives every room mate's frames from frame 0. Without it a member joins at
    /// its first frame (the built-in sink learns members from their frames).
    pub joined_at_start: bool,
    /// `--senders-per-room K`: members 0..K of each room send, the rest only listen
    /// ([`SENDERS_ALL`]: every member sends).
    pub senders: u64,
}

/// [`FrameGrid::senders`] when every member sends.
pub const SENDERS_ALL: u64 = u64::MAX;

impl FrameGrid {
    /// The planned send instant of frame `k` of connection `j` (ns since the start).
    #[inline]
    pub fn intended_ns(&self, j: u64, k: u64) -> Nanos {
        k * self.tick_ns + self.phase_ns(j)
    }

    /// Connection `j`'s offset within each tick.
    #[inline]
    pub fn phase_ns(&self, j: u64) -> Nanos {
        // In u64 when the product fits (any tick up to 10 s with 1.8 billion
        // connections), without the 128-bit division (`__udivti3`, 29 of 227 ns of
        // user space per frame received in one bench/frames.sh PROFILE=2000 profile;
        // the total moved within the run-to-run noise, 220-263 ns, after the change).
        match j.checked_mul(self.tick_ns) {
            Some(p) => p / self.connections,
            None => {
                (u128::from(j) * u128::from(self.tick_ns) / u128::from(self.connections)) as u64
            }
        }
    }

    /// When connection `j` opens (ns since the start; 0 without a ramp).
    #[inline]
    pub fn join_ns(&self, j: u64) -> Nanos {
        j.saturating_mul(self.join_gap_ns)
    }

    /// Connection `j`'s first planned frame: 0 without a ramp; under `--connect-rate`
    /// the frame of the first tick that starts at least one whole tick after it opens
    /// (the tick is its time to connect). Earlier frames are not planned for it.
    #[inline]
    pub fn start_k(&self, j: u64) -> u64 {
        if self.join_gap_ns == 0 {
            0
        } else {
            self.join_ns(j).div_ceil(self.tick_ns) + 1
        }
    }

    /// The instant connection `j` joins its room: its first planned send (a broadcast
    /// server learns a member from its first frame).
    #[inline]
    pub fn joined_ns(&self, j: u64) -> Nanos {
        self.intended_ns(j, self.start_k(j))
    }

    /// The k with `intended_ns(j, k) < duration_ns`, from 0.
    fn end_k(&self, j: u64, duration_ns: Nanos) -> u64 {
        let phase = self.phase_ns(j);
        if phase >= duration_ns {
            return 0;
        }
        (duration_ns - phase).div_ceil(self.tick_ns)
    }

    /// One past the last frame of connection `j` intended before `t` (ns since the
    /// start): the sequence numbers below it were due by then.
    #[inline]
    pub fn due_before(&self, j: u64, t: Nanos) -> u64 {
        self.end_k(j, t)
    }

    /// Frames connection `j` is planned to send before `duration_ns`: the k from
    /// `start_k(j)` with `intended_ns(j, k) < duration_ns`.
    pub fn planned(&self, j: u64, duration_ns: Nanos) -> u64 {
        if !self.is_sender(j) {
            return 0;
        }
        self.end_k(j, duration_ns).saturating_sub(self.start_k(j))
    }

    /// Whether connection `j` sends (a listener under `--senders-per-room` does not).
    #[inline]
    pub fn is_sender(&self, j: u64) -> bool {
        j % self.room_size < self.senders
    }

    /// Members of each room that send: K, or the whole room.
    #[inline]
    pub fn senders_per_room(&self) -> u64 {
        self.senders.min(self.room_size)
    }

    /// Connections of the run that send: K per room (fewer in a short last room).
    pub fn senders_total(&self) -> u64 {
        let k = self.senders_per_room();
        let full = self.connections / self.room_size;
        let rest = self.connections % self.room_size;
        full * k + rest.min(k)
    }

    /// Whether frame `k` of `j` is on the timetable (from its start, before the end).
    #[inline]
    pub fn is_planned(&self, j: u64, k: u64, duration_ns: Nanos) -> bool {
        self.is_sender(j) && k >= self.start_k(j) && self.intended_ns(j, k) < duration_ns
    }

    /// Frame `k` of `j`'s intended send instant when it is on the timetable
    /// ([`FrameGrid::is_planned`]), `None` otherwise.
    #[inline]
    pub fn planned_at(&self, j: u64, k: u64, duration_ns: Nanos) -> Option<Nanos> {
        let t = self.intended_ns(j, k);
        (self.is_sender(j) && k >= self.start_k(j) && t < duration_ns).then_some(t)
    }

    /// The first frame of source `s` receiver `r` expects: its own from its start
    /// (echo), another member's from the first sent after `r` joined.
    #[inline]
    pub fn first_expected(&self, s: u64, r: u64) -> u64 {
        let start = self.start_k(s);
        if s == r || self.joined_at_start {
            return start;
        }
        let joined = self.joined_ns(r);
        let phase = self.phase_ns(s);
        // The least k with k * tick + phase > joined.
        let after = if joined < phase {
            0
        } else {
            (joined - phase) / self.tick_ns + 1
        };
        start.max(after)
    }

    /// Members of `room` that joined before instant `t` (joins increase with the index).
    #[inline]
    pub fn joined_before(&self, room: u64, t: Nanos) -> u64 {
        let base = room * self.room_size;
        let members = self.members(room);
        if self.joined_at_start {
            return members;
        }
        // The usual case, every frame after the room's last join: all of them, from one
        // join instant rather than a search (31-33 ns per frame received, a seventh of
        // the worker's user space, in a bench/frames.sh PROFILE=2000 profile).
        if members == 0 || self.joined_ns(base + members - 1) < t {
            return members;
        }
        let (mut lo, mut hi) = (0, members - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.joined_ns(base + mid) < t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Receivers of frame `k` of connection `s`: the other members that joined before
    /// it was sent, and `s` itself with echo.
    #[inline]
    pub fn receivers(&self, s: u64, k: u64, echo: bool) -> u64 {
        let t = self.intended_ns(s, k);
        let before = self.joined_before(s / self.room_size, t);
        let self_counted = u64::from(self.joined_at_start || self.joined_ns(s) < t);
        before - self_counted + u64::from(echo)
    }

    /// (room, member) of connection `j`: what its frames' headers carry.
    #[inline]
    pub fn room_member(&self, j: u64) -> (u64, u64) {
        (j / self.room_size, j % self.room_size)
    }

    /// Members of room `room` (the last one may be short).
    #[inline]
    pub fn members(&self, room: u64) -> u64 {
        let first = room * self.room_size;
        self.room_size.min(self.connections.saturating_sub(first))
    }

    /// Rooms in the run.
    pub fn rooms(&self) -> u64 {
        self.connections.div_ceil(self.room_size)
    }
}

/// A worker's cursor over its connections' frames, in due order.
#[derive(Debug, Clone)]
pub struct FrameCursor {
    grid: FrameGrid,
    /// Global index of the worker's first connection and how many it owns.
    first: u64,
    count: u64,
    duration_ns: Nanos,
    k: u64,
    /// Local index of the next connection due.
    c: u64,
    next_due: Nanos,
}

impl FrameCursor {
    pub fn new(grid: FrameGrid, first: u64, count: u64, duration_ns: Nanos) -> FrameCursor {
        let mut cur = FrameCursor {
            grid,
            first,
            count,
            duration_ns,
            k: 0,
            c: 0,
            next_due: 0,
        };
        cur.next_due = cur.due_of_cursor();
        cur
    }

    fn due_of_cursor(&mut self) -> Nanos {
        if self.count == 0 || self.grid.senders == 0 {
            return Nanos::MAX;
        }
        loop {
            let j = self.first + self.c;
            if !self.grid.is_sender(j) {
                // A listener sends nothing (a worker owns whole rooms, each with a
                // sender, so this ends within a room).
                self.step();
            } else if self.k < self.grid.start_k(j) {
                // Under a ramp, frames before a connection's start are not on the
                // timetable.
                if self.grid.intended_ns(j, self.k) >= self.duration_ns {
                    return Nanos::MAX;
                }
                self.step();
            } else {
                break;
            }
        }
        let due = self.grid.intended_ns(self.first + self.c, self.k);
        if due >= self.duration_ns {
            Nanos::MAX
        } else {
            due
        }
    }

    /// The next frame due by `now`, as (local connection, frame index k, intended
    /// instant), advancing the cursor; `None` when none is due yet or the run is over.
    #[inline]
    pub fn pop_due(&mut self, now: Nanos) -> Option<(u32, u64, Nanos)> {
        if self.next_due > now {
            return None;
        }
        let out = (self.c as u32, self.k, self.next_due);
        self.step();
        self.next_due = self.due_of_cursor();
        Some(out)
    }

    #[inline]
    fn step(&mut self) {
        self.c += 1;
        if self.c == self.count {
            self.c = 0;
            self.k += 1;
        }
    }

    /// When the next frame is due (`None`: every planned frame has been dispatched).
    #[inline]
    pub fn next_due(&self) -> Option<Nanos> {
        (self.next_due != Nanos::MAX).then_some(self.next_due)
    }

    pub fn all_dispatched(&self) -> bool {
        self.next_due == Nanos::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRID: FrameGrid = FrameGrid {
        tick_ns: 20_000_000,
        connections: 200,
        room_size: 10,
        join_gap_ns: 0,
        joined_at_start: false,
        senders: SENDERS_ALL,
    };

    #[test]
    fn phases_spread_the_connections_evenly_over_a_tick() {
        assert_eq!(GRID.intended_ns(0, 0), 0);
        assert_eq!(GRID.intended_ns(1, 0), 100_000);
        assert_eq!(GRID.intended_ns(199, 3), 3 * 20_000_000 + 19_900_000);
        assert_eq!(GRID.room_member(37), (3, 7));
        assert_eq!(GRID.rooms(), 20);
        let odd = FrameGrid {
            connections: 25,
            ..GRID
        };
        assert_eq!((odd.rooms(), odd.members(2)), (3, 5));
    }

    #[test]
    fn the_phase_is_exact_in_u64_and_beyond_it() {
        // j x tick overflows u64 here: the 128-bit path gives the same exact floor.
        let big = FrameGrid {
            tick_ns: 10_000_000_000,
            connections: u64::MAX / 4,
            ..GRID
        };
        let j = u64::MAX / 8;
        let exact = (u128::from(j) * 10_000_000_000 / u128::from(u64::MAX / 4)) as u64;
        assert_eq!(big.phase_ns(j), exact);
        assert_eq!(GRID.phase_ns(3), 300_000);
    }

    #[test]
    fn planned_counts_agree_with_the_cursor() {
        // 5 s at 20 ms: 250 frames per connection; a phase past a partial last tick
        // has one fewer.
        assert_eq!(GRID.planned(0, 5_000_000_000), 250);
        assert_eq!(GRID.planned(100, 4_990_000_000), 249);
        assert_eq!(GRID.planned(99, 4_990_000_000), 250);
        // Worker owning connections 100..150 over 1.01 s: every frame comes out in due
        // order and the count per connection is `planned`.
        let d = 1_010_000_000;
        let mut cur = FrameCursor::new(GRID, 100, 50, d);
        let mut last = 0;
        let mut per = [0u64; 50];
        while let Some((c, k, due)) = cur.pop_due(u64::MAX - 1) {
            assert!(due >= last, "due instants never decrease");
            assert_eq!(due, GRID.intended_ns(100 + u64::from(c), k));
            assert!(due < d);
            last = due;
            per[c as usize] += 1;
        }
        assert!(cur.all_dispatched());
        for (c, n) in per.iter().enumerate() {
            assert_eq!(*n, GRID.planned(100 + c as u64, d), "connection {c}");
        }
    }

    #[test]
    fn the_cursor_waits_for_the_due_instant() {
        let mut cur = FrameCursor::new(GRID, 10, 10, 1_000_000_000);
        assert_eq!(cur.next_due(), Some(1_000_000));
        assert_eq!(cur.pop_due(999_999), None);
        assert_eq!(cur.pop_due(1_000_000), Some((0, 0, 1_000_000)));
        assert_eq!(cur.next_due(), Some(1_100_000));
    }

    #[test]
    fn senders_total_counts_k_per_room_and_a_short_last_room() {
        // Rooms of 4.
        let grid = |connections, senders| FrameGrid {
            connections,
            senders,
            room_size: 4,
            ..GRID
        };
        assert_eq!(grid(10, SENDERS_ALL).senders_total(), 10);
        assert_eq!(grid(10, 2).senders_total(), 2 + 2 + 2);
        assert_eq!(grid(9, 2).senders_total(), 2 + 2 + 1);
        assert_eq!(grid(6, 2).senders_total(), 2 + 2);
    }

    #[test]
    fn listeners_plan_nothing_and_the_cursor_visits_only_senders() {
        let g = FrameGrid { senders: 2, ..GRID };
        let d = 3 * g.tick_ns;
        assert_eq!(
            (g.planned(1, d), g.planned(2, d), g.planned(12, d)),
            (3, 0, 0)
        );
        assert!(g.is_planned(11, 0, d) && !g.is_planned(19, 0, d));
        let mut cur = FrameCursor::new(g, 0, 200, d);
        let mut got = Vec::new();
        while let Some((c, k, at)) = cur.pop_due(d) {
            got.push((c, k, at));
        }
        // 20 rooms x 2 senders x 3 ticks, in due order, members 0 and 1 only.
        assert_eq!(got.len(), 20 * 2 * 3);
        assert!(got.iter().all(|&(c, _, _)| c % 10 < 2));
        assert!(got.windows(2).all(|w| w[0].2 <= w[1].2));
        assert_eq!(g.senders_per_room(), 2);
        assert_eq!(GRID.senders_per_room(), 10);
    }

    #[test]
    fn members_joined_at_start_expect_every_room_mate_from_frame_0() {
        let g = FrameGrid {
            joined_at_start: true,
            senders: SENDERS_ALL,
            ..GRID
        };
        // Connection 0 sends frame 0 at instant 0: its room mates expect it.
        for (s, r) in [(0, 1), (1, 0), (9, 0), (0, 9)] {
            assert_eq!(g.first_expected(s, r), 0, "{s} -> {r}");
        }
        assert_eq!(g.receivers(0, 0, false), g.room_size - 1);
        assert_eq!(g.receivers(0, 0, true), g.room_size);
        assert_eq!(g.joined_before(1, 0), g.room_size);
        // The built-in sink's members join at their first frame instead.
        assert_eq!(GRID.receivers(0, 0, false), 0);
        assert_eq!(GRID.first_expected(0, 1), 1);
    }

    #[test]
    fn joined_before_counts_the_members_joined_before_the_instant() {
        for join_gap_ns in [0, 3_000_000, 70_000_000] {
            let g = FrameGrid {
                tick_ns: 20_000_000,
                connections: 23,
                room_size: 5,
                join_gap_ns,
                joined_at_start: false,
                senders: SENDERS_ALL,
            };
            for room in 0..g.rooms() {
                let base = room * g.room_size;
                for k in 0..120 {
                    for t in [k * 10_000_000, k * 10_000_000 + 1] {
                        let want = (0..g.members(room))
                            .filter(|m| g.joined_ns(base + m) < t)
                            .count() as u64;
                        assert_eq!(g.joined_before(room, t), want, "{g:?} room {room} t {t}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_ramp_starts_each_connection_a_tick_after_it_joins() {
        // 50 connections/s, 20 ms tick: connection j opens at j * 20 ms and sends
        // from frame j + 1 (connection 0 from frame 1).
        let g = FrameGrid {
            join_gap_ns: 20_000_000,
            joined_at_start: false,
            senders: SENDERS_ALL,
            ..GRID
        };
        assert_eq!((g.start_k(0), g.start_k(3)), (1, 4));
        let d = 1_000_000_000;
        assert_eq!(g.planned(0, d), 49);
        assert_eq!(g.planned(3, d), 46);
        // Receiver 5 joined at frame 6 of its phase: member 1's frame 6 went before.
        assert_eq!(g.first_expected(1, 5), 7);
        assert_eq!(g.first_expected(8, 5), 9);
        // Frame 9 of member 8 (its first): members 0..=7 joined before it.
        assert_eq!(g.receivers(8, 9, false), 8);
        let mut cur = FrameCursor::new(g, 0, 10, d);
        let mut per = [0u64; 10];
        while let Some((c, k, _)) = cur.pop_due(u64::MAX - 1) {
            assert!(k >= g.start_k(u64::from(c)));
            per[c as usize] += 1;
        }
        for (c, n) in per.iter().enumerate() {
            assert_eq!(*n, g.planned(c as u64, d), "connection {c}");
        }
    }
}
