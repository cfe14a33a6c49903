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
}

impl FrameGrid {
    /// The planned send instant of frame `k` of connection `j` (ns since the start).
    #[inline]
    pub fn intended_ns(&self, j: u64, k: u64) -> Nanos {
        k * self.tick_ns + self.phase_ns(j)
    }

    /// Connection `j`'s offset within each tick.
    #[inline]
    pub fn phase_ns(&self, j: u64) -> Nanos {
        (u128::from(j) * u128::from(self.tick_ns) / u128::from(self.connections)) as u64
    }

    /// Frames connection `j` is planned to send before `duration_ns`: the k with
    /// `intended_ns(j, k) < duration_ns`.
    pub fn planned(&self, j: u64, duration_ns: Nanos) -> u64 {
        let phase = self.phase_ns(j);
        if phase >= duration_ns {
            return 0;
        }
        (duration_ns - phase).div_ceil(self.tick_ns)
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

    fn due_of_cursor(&self) -> Nanos {
        if self.count == 0 {
            return Nanos::MAX;
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
        self.c += 1;
        if self.c == self.count {
            self.c = 0;
            self.k += 1;
        }
        self.next_due = self.due_of_cursor();
        Some(out)
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
}
