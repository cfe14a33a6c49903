//! The worker loop, once for every workload (TCP request/response, UDP, frames):
//! now -> stop? -> dispatch what is due -> reap -> the workload's follow-ups -> scan
//! -> interval boundaries -> wait (sleep in the ring or spin), until the drain ends;
//! then the workload's totals go out with the last snapshot.
//!
//! A workload brings hooks ([`Hooks`]): how it connects, what is due, what completed,
//! what its scan does, when its next send is due, whether it has drained, how its
//! sockets close, and its own totals. The loop owns the rest: the stop and its drain,
//! one TSC reading per busy iteration, and the sleep-or-spin decision
//! ([`Pacer::step`]); the worker's [`LoopCore`] owns the ring (every push counted,
//! first error wins), the quiesce and the totals every worker shares.

use super::driver::{Outbox, Ready, wait_for_start};
use super::loop_core::LoopCore;
use super::pacing::{Pacer, Step};
use super::recorder::WorkerTotals;
use super::worker_plan::WorkerPlan;
use crate::clock::{Clock, Nanos, Ticks};
use crate::limits::WAIT_NS_MAX;
use std::sync::atomic::{AtomicBool, Ordering};

/// What a workload brings to its worker thread ([`super::driver::drive`]) and to the
/// one loop ([`run`]).
pub trait Hooks {
    /// The worker's ring, the count of what is in it, and how the run ends.
    fn core(&mut self) -> &mut LoopCore;
    /// Where the worker records its figures.
    fn out(&mut self) -> &mut Outbox;
    /// Opens the connections (or flows) and says how that went.
    fn connect(&mut self, stop: &AtomicBool) -> Ready;
    /// Takes the schedule's clock (its start instant is time zero) before the start.
    fn adopt_clock(&mut self, clock: Clock);
    /// Closes or shuts down every socket, so that what is still in the ring completes.
    fn shut_down(&mut self);
    /// Once the ring is quiet: closes what could not be closed under the kernel.
    fn release(&mut self) {}
    /// Closes everything and waits for the kernel to let go of the buffers (once, in
    /// [`LoopCore::quiesce`]).
    fn quiesce(&mut self) {
        self.shut_down();
        self.core().quiesce();
        self.release();
    }
    /// At the start instant, before the first iteration.
    fn on_start(&mut self) {}
    /// First in every iteration, once the clocks have been read (the warm-up's end).
    fn on_iteration(&mut self, _now: Nanos, _pace: &mut Pacer) {}
    /// The schedule has run its course by `now` (every send planned is out).
    fn at_end(&self, now: Nanos) -> bool;
    /// The schedule stops at `now` (`interrupted`: Ctrl-C): returns how long the
    /// drain may last.
    fn on_stop(&mut self, now: Nanos, interrupted: bool, pace: &Pacer) -> u64;
    /// Sends what is due by `now`; returns how many went out (or were dispatched).
    fn dispatch_due(&mut self, now_t: Ticks, now: Nanos) -> u64;
    /// Handles the completions in the ring; returns how many.
    fn reap(&mut self) -> usize;
    /// After the reap: what waited for a connection or a completion.
    fn after_reap(&mut self, _now_t: Ticks, _now: Nanos) {}
    /// The periodic scan (timeouts, reopens), every [`Pacer::scan_every`].
    fn scan(&mut self, now: Nanos);
    /// Before the snapshot of the interval that ended at `end` (ns since the start)
    /// leaves.
    fn before_snapshot(&mut self, _end: Nanos) {}
    /// Before the wait: sends queued during the iteration.
    fn before_wait(&mut self) {}
    /// Nothing is left to wait for after the stop.
    fn drained(&self) -> bool;
    /// Something the scan must look at is pending (timeouts, reopens).
    fn timers(&self) -> bool;
    /// How many completions a sleep waits for before its timeout: 1 (the default)
    /// wakes the loop at each; more when every completion is timed without the loop
    /// (kernel receive timestamps) and none has anything waiting on it.
    fn completions_per_wake(&self) -> u32 {
        1
    }
    /// The longest a sleep waiting for more than one completion may last.
    fn batch_wait_ns(&self) -> u64 {
        u64::MAX
    }
    /// When the next send is due (`Some(0)`: at once, never sleep).
    fn next_due(&self) -> Option<Nanos>;
    /// The loop has ended: the workload adds its own figures to `totals`, which
    /// [`LoopCore::totals`] filled with what every worker reports alike.
    fn finish(&mut self, totals: &mut WorkerTotals);
}

/// Runs workload `w` on `clock` (its start instant is the schedule's time zero) until
/// its drain ends, and sends its totals with the last snapshot.
pub fn run<W: Hooks>(w: &mut W, plan: &WorkerPlan, clock: Clock, stop: &AtomicBool) {
    let (precision, interval_ns, timeout_ns) = (plan.precision, plan.interval_ns, plan.timeout_ns);
    let (duration_ns, warmup_ns) = (plan.duration_ns, plan.warmup_ns);
    w.adopt_clock(clock.clone());
    wait_for_start(&clock, precision.start_spin_ns());
    w.on_start();
    let mut pace =
        Pacer::with_precision(interval_ns, timeout_ns, precision).after_warmup(warmup_ns);
    loop {
        let now_t = clock.ticks();
        let now = clock.ns(now_t);
        pace.begin(now);
        w.on_iteration(now, &mut pace);
        let core = w.core();
        if core.fatal.is_some() {
            pace.halt(now, duration_ns, &mut core.stopping, &mut core.stopped_ns);
            core.interrupted = true;
            break;
        }
        if !core.stopping {
            let interrupted = stop.load(Ordering::Relaxed);
            if interrupted || w.at_end(now) {
                let core = w.core();
                core.stopping = true;
                core.interrupted = interrupted;
                core.stopped_ns = now.min(duration_ns);
                let drain = w.on_stop(now, interrupted, &pace);
                pace.stop(now, drain);
            }
        }
        let mut work = 0;
        if !w.core().stopping {
            let first_due = w.next_due();
            work = w.dispatch_due(now_t, now);
            if work > 0 {
                pace.sent(first_due, work, w.next_due());
            }
        }
        work += w.reap() as u64;
        w.after_reap(now_t, now);
        if pace.scan_due(now) {
            w.scan(now);
        }
        // After the stop, the drain folds into the last interval of the schedule.
        // The interval that reaches the schedule's end stays open until the stop
        // (a late worker would otherwise start one that lies after the end).
        while !w.core().stopping && pace.interval_end() < duration_ns {
            let end = pace.interval_end();
            let Some(i) = pace.interval_ended(now) else {
                break;
            };
            w.before_snapshot(end);
            w.out().send(i, None, &mut pace);
        }
        w.before_wait();
        let stopping = w.core().stopping;
        if stopping && (w.drained() || pace.drain_over(now)) {
            break;
        }
        let wake = pace.wake(stopping, w.timers(), w.next_due());
        let pending_cqes = w.core().ring.has_completions();
        let step = if work == 0 && !pending_cqes {
            pace.step(now, wake)
        } else {
            Step::Spin
        };
        match step {
            Step::Sleep(until) => {
                let now2 = clock.now_ns(); // only a sleep needs a fresh reading
                pace.sleep(now2, until);
                let mut wait = until.saturating_sub(now2).clamp(1_000, WAIT_NS_MAX);
                let want = w.completions_per_wake();
                if want > 1 {
                    wait = wait.min(w.batch_wait_ns());
                }
                w.core().submit_and_wait_for(wait, want);
            }
            Step::Spin => {
                let core = w.core();
                if core.ring.needs_enter() || (work == 0 && !wake.due_soon) {
                    core.submit();
                }
                if work == 0 && !pending_cqes {
                    // The whole iteration did nothing but look: count it as spinning.
                    pace.idle(now);
                    std::hint::spin_loop();
                }
            }
        }
    }
    let end = clock.now_ns();
    let mut totals = w.core().totals(&pace, end);
    w.finish(&mut totals);
    let interval = pace.interval();
    w.out().send(interval, Some(totals), &mut pace);
}
