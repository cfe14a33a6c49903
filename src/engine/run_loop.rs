//! The worker loop, once for every workload (TCP request/response, UDP, frames):
//! now -> stop? -> dispatch what is due -> reap -> the workload's follow-ups -> scan
//! -> interval boundaries -> wait (sleep in the ring or spin), until the drain ends;
//! then the workload's totals go out with the last snapshot.
//!
//! A workload brings hooks ([`Hooks`]): what is due, what completed, what its scan
//! does, when its next send is due, whether it has drained, and its totals. The loop
//! owns the rest: the stop and its drain, first-error-wins ([`LoopState::fail`]), one
//! TSC reading per busy iteration, and the sleep-or-spin decision ([`Pacer::step`]).

use super::driver::{Outbox, RingFailure, WorkerError, wait_for_start};
use super::pacing::{Pacer, Step};
use super::recorder::WorkerTotals;
use super::ring::Ring;
use super::worker_plan::WorkerPlan;
use crate::clock::{Clock, Nanos, Ticks};
use crate::limits::WAIT_NS_MAX;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the loop and its workload share about the run's end.
#[derive(Debug, Default)]
pub struct LoopState {
    /// The schedule has stopped (its end, Ctrl-C, or a failed ring): only the drain
    /// is left.
    pub stopping: bool,
    /// When the schedule stopped, ns since start.
    pub stopped_ns: Nanos,
    /// Stopped before the schedule's end (Ctrl-C or a failed ring).
    pub interrupted: bool,
    /// The first error that ended the run; later ones are dropped.
    pub fatal: Option<WorkerError>,
}

impl LoopState {
    /// The ring refused a submit for good: the first such error ends the run.
    #[cold]
    pub fn fail(&mut self, worker: usize, e: &impl RingFailure) {
        if self.fatal.is_none() {
            self.fatal = Some(WorkerError::submit(worker, e));
        }
    }
}

/// What a workload brings to the loop.
pub trait Hooks {
    fn plan(&self) -> &WorkerPlan;
    fn clock(&self) -> &Clock;
    fn ring(&mut self) -> &mut Ring;
    fn out(&mut self) -> &mut Outbox;
    fn state(&mut self) -> &mut LoopState;
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
    /// Before an interval's snapshot leaves.
    fn before_snapshot(&mut self) {}
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
    /// When the next send is due (`Some(0)`: at once, never sleep).
    fn next_due(&self) -> Option<Nanos>;
    /// The workload's totals, once the loop has ended at `end`.
    fn finish(&mut self, pace: &Pacer, end: Nanos) -> WorkerTotals;
}

/// The five accessors of [`Hooks`], for a worker whose fields are named `plan`,
/// `clock`, `ring`, `out` and `ls` (every workload's are).
macro_rules! loop_parts {
    () => {
        fn plan(&self) -> &$crate::engine::worker_plan::WorkerPlan {
            self.plan
        }

        fn clock(&self) -> &$crate::clock::Clock {
            &self.clock
        }

        fn ring(&mut self) -> &mut $crate::engine::ring::Ring {
            &mut self.ring
        }

        fn out(&mut self) -> &mut $crate::engine::driver::Outbox {
            &mut self.out
        }

        fn state(&mut self) -> &mut $crate::engine::run_loop::LoopState {
            &mut self.ls
        }
    };
}
pub(crate) use loop_parts;

/// Runs workload `w` from the start instant until its drain ends, and sends its
/// totals with the last snapshot.
pub fn run<W: Hooks>(w: &mut W, stop: &AtomicBool) {
    let plan = w.plan();
    let (precision, interval_ns, timeout_ns) = (plan.precision, plan.interval_ns, plan.timeout_ns);
    let (duration_ns, warmup_ns, worker) = (plan.duration_ns, plan.warmup_ns, plan.index);
    wait_for_start(w.clock(), precision.start_spin_ns());
    w.on_start();
    let mut pace =
        Pacer::with_precision(interval_ns, timeout_ns, precision).after_warmup(warmup_ns);
    loop {
        let now_t = w.clock().ticks();
        let now = w.clock().ns(now_t);
        pace.begin(now);
        w.on_iteration(now, &mut pace);
        let st = w.state();
        if st.fatal.is_some() {
            pace.halt(now, duration_ns, &mut st.stopping, &mut st.stopped_ns);
            st.interrupted = true;
            break;
        }
        if !st.stopping {
            let interrupted = stop.load(Ordering::Relaxed);
            if interrupted || w.at_end(now) {
                let st = w.state();
                st.stopping = true;
                st.interrupted = interrupted;
                st.stopped_ns = now.min(duration_ns);
                let drain = w.on_stop(now, interrupted, &pace);
                pace.stop(now, drain);
            }
        }
        let mut work = 0;
        if !w.state().stopping {
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
        while !w.state().stopping
            && pace.interval_end() < duration_ns
            && let Some(i) = pace.interval_ended(now)
        {
            w.before_snapshot();
            w.out().send(i, None, &mut pace);
        }
        w.before_wait();
        let stopping = w.state().stopping;
        if stopping && (w.drained() || pace.drain_over(now)) {
            break;
        }
        let wake = pace.wake(stopping, w.timers(), w.next_due());
        let pending_cqes = w.ring().has_completions();
        let step = if work == 0 && !pending_cqes {
            pace.step(now, wake)
        } else {
            Step::Spin
        };
        match step {
            Step::Sleep(until) => {
                let now2 = w.clock().now_ns(); // only a sleep needs a fresh reading
                pace.sleep(now2, until);
                let wait = until.saturating_sub(now2).clamp(1_000, WAIT_NS_MAX);
                let want = w.completions_per_wake();
                if let Err(e) = w.ring().submit_and_wait_for(wait, want) {
                    w.state().fail(worker, &e);
                }
            }
            Step::Spin => {
                if (w.ring().needs_enter() || (work == 0 && !wake.due_soon))
                    && let Err(e) = w.ring().submit()
                {
                    w.state().fail(worker, &e);
                }
                if work == 0 && !pending_cqes {
                    // The whole iteration did nothing but look: count it as spinning.
                    pace.idle(now);
                    std::hint::spin_loop();
                }
            }
        }
    }
    let end = w.clock().now_ns();
    let totals = w.finish(&pace, end);
    let interval = pace.interval();
    w.out().send(interval, Some(totals), &mut pace);
}
