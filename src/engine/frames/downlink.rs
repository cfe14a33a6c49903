//! Receive accounting of aggregated downlink frames (`--aggregate`), pure (no I/O, no
//! clock). The server (`blaster sink --mode broadcast --aggregate`) sends each member
//! one downlink frame per server tick, seq = the server's tick index k, carrying as
//! entries the room's frames that arrived during tick k. Server tick k ends at
//! `S + (k + 1) x tick` on the server's clock, whose origin S the generator does not
//! know; it places the ticks on its own clock from their arrivals.
//!
//! Expected arrival: the arrival phase of a downlink frame of tick k arriving at `a`
//! is `a - k x tick`. A tick cannot leave before it ends, so every arrival phase is at
//! least `S' + latency` (S' the tick origin on the generator's clock); late ticks (a
//! stall, a busy server, a slow network) only make it larger. The expected arrival of
//! tick k is `U + k x tick` with U the smallest arrival phase seen so far (this frame
//! included) over all the worker's receivers: the arrival of a tick sent on time over
//! the fastest path. Deviation `a - (U + k x tick)` is never negative; U only
//! decreases, and the decrease after measuring started (`shift`) bounds how much an
//! earlier deviation was understated. The generator's own dispatch lag cannot move U
//! (unlike the entries' send instants, which a late send makes look early).
//!
//! Planned downlink frames: the worker calibrates at its first downlink frame of a
//! tick after the first one it saw (tick k_c; U then comes from at least one whole
//! tick of arrivals). Receiver r expects every tick k > k_c from the earlier of two:
//! the tick of the first downlink frame it received after calibration (it had joined
//! by then), and the first tick with `U + k x tick >= joined(r) + 2 x tick`, where
//! `joined(r)` is when its first frame went out (the planned instant if it never did):
//! two ticks after its join the server has surely learnt it, even with the
//! generator's or the server's own delays up to a tick. This is fixed at r's first
//! downlink frame after calibration (or at the end if none came), up to the last
//! tick with `U + k x tick < end of the schedule` (fixed when the worker
//! stops sending). Downlink frames outside those ticks are counted apart (`outside`),
//! not as received. Loss is expected minus received; per interval, gaps that leave a
//! receiver's 128-tick window.

use super::accounting::{Seen, SeqWindow};
use crate::clock::Nanos;
use crate::engine::recorder::{FrameCounters, Histograms};
use crate::proto::frame::FrameHeader;
use crate::schedule::FrameGrid;

/// A receiver's first expected tick, not fixed yet.
const UNSET: u64 = u64::MAX;

/// A worker's accounting of the downlink frames its connections receive.
pub struct DownBook {
    grid: FrameGrid,
    first: u64,
    budget_ns: u64,
    windows: Box<[SeqWindow]>,
    /// Downlink frames received (unique, expected) per receiver.
    unique: Box<[u64]>,
    /// Per receiver: the first tick it expects ([`UNSET`] until fixed).
    k_first: Box<[u64]>,
    /// Per receiver: when its first frame went out (it joined its room then).
    joined: Box<[Option<Nanos>]>,
    /// U: the smallest arrival phase so far (ns, may be negative).
    phase_min: Option<i64>,
    /// The first tick seen, and the tick of the calibration.
    k_seen: Option<u64>,
    k_cal: Option<u64>,
    phase_at_cal: i64,
    /// The end of the schedule, and the last tick expected (fixed there, or when
    /// sending stops before it).
    end_ns: Nanos,
    k_last: Option<u64>,
    lost_so_far: u64,
    outside: u64,
}

/// One worker's downlink totals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DownTotals {
    pub expected: u64,
    pub received: u64,
    pub per_receiver: Vec<(u64, u64)>,
    /// Loss not finalised by the windows during the run.
    pub lost_at_end: u64,
    /// Downlink frames received outside the expected ticks (before the first or
    /// after the last).
    pub outside: u64,
    /// How far the expected arrival moved earlier after measuring started (ns): a
    /// deviation measured before was understated by at most this.
    pub shift_ns: u64,
}

impl DownBook {
    pub fn new(
        grid: FrameGrid,
        first: u64,
        count: usize,
        budget_ns: u64,
        end_ns: Nanos,
    ) -> DownBook {
        DownBook {
            grid,
            first,
            budget_ns,
            windows: vec![SeqWindow::default(); count].into_boxed_slice(),
            unique: vec![0; count].into_boxed_slice(),
            k_first: vec![UNSET; count].into_boxed_slice(),
            joined: vec![None; count].into_boxed_slice(),
            phase_min: None,
            k_seen: None,
            k_cal: None,
            phase_at_cal: 0,
            end_ns,
            k_last: None,
            lost_so_far: 0,
            outside: 0,
        }
    }

    fn tick(&self) -> i64 {
        self.grid.tick_ns as i64
    }

    /// Local receiver `r`'s first frame went out at `at` (later ones are ignored).
    #[inline]
    pub fn joined(&mut self, r: u32, at: Nanos) {
        self.joined[r as usize].get_or_insert(at);
    }

    /// The first tick whose expected arrival is at least `at`.
    fn first_tick_from(&self, at: i64) -> u64 {
        let (t, d) = (self.tick(), (at - self.phase_min.unwrap_or(0)).max(0));
        ((d + t - 1) / t) as u64
    }

    /// Receiver `r`'s first expected tick: two ticks after it joined (or was
    /// planned to), or `got` (the tick of its first downlink frame after calibration)
    /// if earlier; after the calibration's tick.
    fn first_expected(&self, r: usize, got: Option<u64>) -> u64 {
        let joined = match self.joined[r] {
            Some(at) => at,
            None => self.grid.joined_ns(self.first + r as u64),
        };
        let k = self.first_tick_from(joined as i64 + 2 * self.tick());
        let k = got.map_or(k, |g| k.min(g));
        self.k_cal.map_or(k, |c| k.max(c + 1))
    }

    /// Sending stopped at `end_ns` (the end of the schedule, or an interrupt before
    /// it; called at the first arrival after the end otherwise): the last tick expected is the last whose
    /// expected arrival precedes it. Later downlink frames count as outside.
    pub fn end_at(&mut self, end_ns: Nanos) {
        if self.k_last.is_none() {
            let last = end_ns as i64 - 1 - self.phase_min.unwrap_or(0);
            self.k_last = Some(if last < 0 {
                0
            } else {
                (last / self.tick()) as u64
            });
        }
    }

    /// Downlink frame `h` arrived at local receiver `r` at `at`.
    #[inline]
    pub fn arrive(
        &mut self,
        r: u32,
        h: &FrameHeader,
        at: Nanos,
        hist: &mut Histograms,
        n: &mut FrameCounters,
    ) {
        let k = h.seq;
        if self.k_last.is_none() && at >= self.end_ns {
            // Fixed before anything arriving after the end is counted: every frame
            // that arrived before had `U + k x tick <= at < end`.
            self.end_at(self.end_ns);
        }
        let phase = at as i64 - (k as i64).wrapping_mul(self.tick());
        let u = self.phase_min.map_or(phase, |p| p.min(phase));
        self.phase_min = Some(u);
        let seen = *self.k_seen.get_or_insert(k);
        if self.k_cal.is_none() {
            if k <= seen {
                self.outside += 1;
                return;
            }
            self.k_cal = Some(k);
            self.phase_at_cal = u;
        }
        let r = r as usize;
        if self.k_first[r] == UNSET {
            let kf = self.first_expected(r, Some(k));
            self.k_first[r] = kf;
            self.windows[r] = SeqWindow::starting_at(kf);
        }
        if k < self.k_first[r] || self.k_last.is_some_and(|l| k > l) {
            self.outside += 1;
            return;
        }
        let (seen, lost) = self.windows[r].arrive(k, at, self.grid.tick_ns);
        n.lost += lost;
        self.lost_so_far += lost;
        match seen {
            Seen::Duplicate => n.duplicates += 1,
            Seen::Stale => n.stale += 1,
            Seen::New {
                reordered,
                jitter_ns,
            } => {
                self.unique[r] += 1;
                n.received += 1;
                n.reordered += u64::from(reordered);
                let deviation = (phase - u) as u64;
                hist.frame_deviation.saturating_record(deviation);
                n.late += u64::from(deviation > self.budget_ns);
                if let Some(j) = jitter_ns {
                    hist.frame_jitter.saturating_record(j);
                }
            }
        }
    }

    /// The run's totals (after the drain).
    pub fn totals(&mut self) -> DownTotals {
        self.end_at(self.end_ns);
        let k_last = self.k_last.expect("set just above");
        let mut t = DownTotals {
            outside: self.outside,
            shift_ns: (self.phase_at_cal - self.phase_min.unwrap_or(0)).max(0) as u64,
            ..DownTotals::default()
        };
        for r in 0..self.windows.len() {
            // A receiver that got nothing after calibration: from its join (with no
            // downlink frame at all, the origin is the run's start).
            let kf = match self.k_first[r] {
                UNSET => self.first_expected(r, None),
                k => k,
            };
            let expected = (k_last + 1).saturating_sub(kf);
            t.expected += expected;
            t.received += self.unique[r];
            t.per_receiver.push((expected, self.unique[r]));
        }
        t.lost_at_end = t
            .expected
            .saturating_sub(t.received)
            .saturating_sub(self.lost_so_far);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::SENDERS_ALL;

    const TICK: u64 = 20_000_000;

    fn grid() -> FrameGrid {
        FrameGrid {
            tick_ns: TICK,
            connections: 4,
            room_size: 2,
            join_gap_ns: 0,
            joined_at_start: false,
            senders: SENDERS_ALL,
        }
    }

    fn down(k: u64) -> FrameHeader {
        FrameHeader {
            flags: crate::proto::frame::FLAG_AGGREGATE,
            seq: k,
            ..FrameHeader::default()
        }
    }

    /// A server whose tick k ends at 7 ms + (k - 100) x 20 ms on the generator's
    /// clock (its tick 100 ends 7 ms into the run).
    const END0: i64 = 7_000_000 - 100 * TICK as i64;

    fn tick_end(k: u64) -> u64 {
        (END0 + (k as i64) * TICK as i64) as u64
    }

    /// Tick k's downlink frames reach the 4 receivers at `tick_end(k) + 1 us + delay`
    /// (receiver r a further r us later).
    fn tick(b: &mut DownBook, k: u64, delay: u64, h: &mut Histograms, n: &mut FrameCounters) {
        for r in 0..4 {
            b.arrive(
                r,
                &down(k),
                tick_end(k) + 1_000 + delay + u64::from(r) * 1_000,
                h,
                n,
            );
        }
    }

    fn book() -> (DownBook, Histograms, FrameCounters) {
        let mut b = DownBook::new(grid(), 0, 4, TICK, 1_000_000_000);
        // Phases 0, 5, 10, 15 ms: each first frame went out on time.
        for r in 0..4 {
            b.joined(r, grid().phase_ns(u64::from(r)));
        }
        (b, Histograms::new(), FrameCounters::default())
    }

    #[test]
    fn ticks_are_placed_on_the_timetable_and_every_planned_one_counted() {
        let (mut b, mut h, mut n) = book();
        // Ticks 100.. end at 7, 27, ... ms; a run of 1 s.
        for k in 100..150 {
            tick(&mut b, k, 0, &mut h, &mut n);
        }
        tick(&mut b, 150, 0, &mut h, &mut n); // expected after the schedule
        let t = b.totals();
        // U: tick end + 1 us (the fastest receiver).
        assert_eq!(b.phase_min, Some(END0 + 1_000));
        // Tick 100 first seen, calibration at 101: each receiver expects from tick
        // 102 (the tick after calibration; its first frame after it was 101).
        assert_eq!(&b.k_first[..], &[102; 4]);
        // Ticks 102..=149 (149 expected at 0.987 s, 150 at 1.007 s).
        assert_eq!(t.expected, 4 * 48);
        assert_eq!(t.received, t.expected);
        assert_eq!(t.outside, 3 * 4);
        assert_eq!(n.received, t.received);
        assert_eq!((n.lost, t.lost_at_end, n.late, t.shift_ns), (0, 0, 0, 0));
        // Deviation: receiver r is r us after the fastest.
        assert_eq!(h.frame_deviation.len(), t.received);
        assert_eq!(
            h.frame_deviation.max(),
            h.frame_deviation.highest_equivalent(3_000)
        );
        // Jitter: consecutive ticks arrive exactly one tick apart.
        assert_eq!(h.frame_jitter.max(), 0);
        assert_eq!(h.frame_jitter.len(), t.received - 4);
    }

    #[test]
    fn a_skipped_tick_is_lost_and_a_late_tick_is_late_without_moving_the_expectation() {
        let (mut b, mut h, mut n) = book();
        for k in 100..150 {
            if k == 120 {
                continue; // a tick the server skipped (a stall)
            }
            let delay = if k == 121 { 30_000_000 } else { 0 };
            tick(&mut b, k, delay, &mut h, &mut n);
        }
        let t = b.totals();
        assert_eq!(b.phase_min, Some(END0 + 1_000));
        assert_eq!(t.expected - t.received, 4);
        assert_eq!(t.lost_at_end, 4, "no gap left a 128-tick window");
        assert_eq!(n.late, 4);
        assert_eq!(
            h.frame_deviation.max(),
            h.frame_deviation.highest_equivalent(30_003_000)
        );
    }

    #[test]
    fn a_receiver_that_joined_late_expects_from_its_join() {
        let (mut b, mut h, mut n) = book();
        // Receiver 3's first frame went out 100 ms late (its connection was down):
        // the ticks before are not expected from it. The server sends it nothing
        // until tick 109 (it was slow to take it in): ticks from 107 are expected.
        b.joined[3] = None;
        b.joined(3, 115_000_000);
        for k in 100..150 {
            for r in 0..4 {
                if r == 3 && k < 109 {
                    continue;
                }
                b.arrive(r, &down(k), tick_end(k) + 1_000, &mut h, &mut n);
            }
        }
        // Joined at 115 ms, + 2 ticks = 155 ms: tick 108 (167.001 ms) is the first
        // expected at or after it; the first received (109) is later.
        assert_eq!(b.k_first[3], 108);
        let t = b.totals();
        assert_eq!(t.per_receiver[3], (42, 41));
        // Receivers that got every tick expect from the one after calibration.
        assert_eq!(t.per_receiver[0], (48, 48));
    }

    #[test]
    fn an_earlier_arrival_after_calibration_is_reported_as_a_shift() {
        let (mut b, mut h, mut n) = book();
        for k in 100..110 {
            tick(&mut b, k, 0, &mut h, &mut n);
        }
        // Then the path gets 500 ns faster than anything before.
        b.arrive(0, &down(110), tick_end(110) + 500, &mut h, &mut n);
        let t = b.totals();
        assert_eq!(t.shift_ns, 500);
    }

    #[test]
    fn without_any_downlink_frame_everything_expected_is_lost() {
        let (mut b, _, _) = book();
        let t = b.totals();
        assert_eq!(t.received, 0);
        // Origin at the run's start: receiver 0 expects ticks 2..=49 (joined + 40 ms
        // <= 40 ms), the others ticks 3..=49 (<= 60 ms).
        assert_eq!(t.expected, 48 + 3 * 47);
    }
}
