//! The frames workload's hooks into the one worker loop ([`crate::engine::run_loop`]):
//! dispatch what is due (and, under `--connect-rate`, open the connections whose join
//! has come) -> reap -> the reopen scan -> interval boundary; the drain lasts the frame
//! budget, and the totals come from [`super::totals`].

use super::{Drain, FrameWorker, quiet_ns};
use crate::clock::{Clock, Nanos, Ticks};
use crate::engine::driver::{Outbox, Ready};
use crate::engine::loop_core::LoopCore;
use crate::engine::pacing::Pacer;
use crate::engine::recorder::WorkerTotals;
use crate::engine::run_loop::Hooks;
use crate::limits::DRAIN_NS_MAX;
use std::sync::atomic::AtomicBool;

impl Hooks for FrameWorker<'_> {
    fn core(&mut self) -> &mut LoopCore {
        &mut self.core
    }

    fn out(&mut self) -> &mut Outbox {
        &mut self.out
    }

    fn connect(&mut self, stop: &AtomicBool) -> Ready {
        self.connect_all(stop)
    }

    fn adopt_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    fn shut_down(&mut self) {
        self.shut_down_all();
    }

    fn release(&mut self) {
        self.close_all();
    }

    fn on_start(&mut self) {
        self.running = true;
    }

    fn at_end(&self, now: Nanos) -> bool {
        self.cursor.all_dispatched() && now >= self.plan.duration_ns
    }

    fn on_stop(&mut self, now: Nanos, interrupted: bool, _pace: &Pacer) -> u64 {
        // Downlink frames of server ticks after the schedule are not expected
        // (`downlink`).
        if let Some(d) = self.down.as_mut() {
            d.end_at(self.core.stopped_ns);
        }
        if interrupted {
            return 0;
        }
        if self.down.is_some() {
            // Frames planned in the last budget before the end get it to arrive.
            return (self.fp.budget_ns + 10_000_000).min(DRAIN_NS_MAX);
        }
        // Until every expected frame is in, or none came for a while, or the cap.
        self.note_deviation();
        self.drain = Some(Drain {
            expected: self.book.totals().expected,
            received: self.book.received(),
            last_arrival: now,
            quiet_ns: quiet_ns(self.deviation_p99_max, self.fp.budget_ns),
            quiet: false,
        });
        DRAIN_NS_MAX
    }

    fn after_reap(&mut self, _now_t: Ticks, now: Nanos) {
        if let Some(d) = self.drain.as_mut() {
            let received = self.book.received();
            if received != d.received {
                (d.received, d.last_arrival) = (received, now);
            }
            d.quiet = now >= d.last_arrival + d.quiet_ns;
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
        if !self.core.stopping {
            self.scan_reopens(now);
            self.keepalive_scan(now);
            self.slow_scan(now);
        }
    }

    fn before_snapshot(&mut self, end: Nanos) {
        // Gaps whose time is up count lost in this interval.
        self.book.expire(end, &mut self.out.counters.frames);
        self.set_active();
        self.note_deviation();
    }

    fn drained(&self) -> bool {
        // Under `--aggregate` the drain lasts its budget.
        self.drain.is_some_and(|d| d.done())
    }

    fn timers(&self) -> bool {
        !self.reopen_q.is_empty()
            || (self.keepalive.is_some() && self.running)
            || self.slow_waiting()
    }

    fn completions_per_wake(&self) -> u32 {
        // Frames are timed by the kernel: the loop need not wake for them while no
        // connect or join is under way and the schedule runs (the drain ends by its
        // budget, not by a count).
        if self.stamped()
            && self.rx_missing == 0
            && self.rx_batch
            && self.running
            && !self.core.stopping
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

    fn finish(&mut self, totals: &mut WorkerTotals) {
        self.totals(totals);
    }
}
