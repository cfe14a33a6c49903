//! The frames workload's hooks into the one worker loop ([`crate::engine::run_loop`]):
//! dispatch what is due (and, under `--connect-rate`, open the connections whose join
//! has come) -> reap -> the reopen scan -> interval boundary; the drain lasts the frame
//! budget, and the totals come from [`super::totals`].

use super::FrameWorker;
use crate::clock::{Nanos, Ticks};
use crate::engine::pacing::Pacer;
use crate::engine::recorder::WorkerTotals;
use crate::engine::run_loop::{Hooks, loop_parts};
use crate::limits::DRAIN_NS_MAX;

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
        self.totals(pace, end)
    }
}
