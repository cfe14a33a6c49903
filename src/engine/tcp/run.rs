//! The TCP workload's hooks into the one worker loop ([`crate::engine::run_loop`]):
//! dispatch due -> reap -> backlog -> closed loop -> deferred connects -> scan ->
//! interval boundary -> sends.

use super::Worker;
use crate::clock::{Clock, Nanos, Ticks};
use crate::engine::driver::{Outbox, Ready};
use crate::engine::loop_core::LoopCore;
use crate::engine::pacing::Pacer;
use crate::engine::recorder::WorkerTotals;
use crate::engine::run_loop::Hooks;
use crate::limits::DRAIN_NS_MAX;
use std::sync::atomic::AtomicBool;

impl Worker<'_> {
    /// A closed loop's batch, from the rate its requests were issued since it was last
    /// set (every [`super::CLOSED_BATCH_EVERY_NS`]).
    fn set_closed_batch(&mut self, now: Nanos) {
        let (at, before) = self.closed_mark;
        let elapsed = now.saturating_sub(at);
        if elapsed < super::CLOSED_BATCH_EVERY_NS {
            return;
        }
        let Some(issued) = self.workload.closed_loop().map(|l| l.issued) else {
            return;
        };
        self.closed_batch =
            super::closed_batch_for(issued - before, elapsed, self.closed_batch_max);
        self.closed_mark = (now, issued);
    }

    /// Every response so far was timed by its kernel timestamp.
    fn stamped(&self) -> bool {
        self.stamps.is_some() && self.stamps_missing == 0
    }
}

impl Hooks for Worker<'_> {
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
        self.unix_at_start_ns = crate::wallclock::unix_at_start_ns(&clock);
        self.rebase(clock);
    }

    fn shut_down(&mut self) {
        self.close_all();
    }

    fn on_start(&mut self) {
        self.running = true;
        self.warming = self.plan.warmup_ns > 0;
        if self.workload.closed_loop().is_some() {
            let now_t = self.clock.ticks();
            for c in 0..self.table.conns.len() as u32 {
                self.fill(c, now_t);
            }
        }
    }

    fn on_iteration(&mut self, now: Nanos, pace: &mut Pacer) {
        if self.warming && now >= self.plan.warmup_ns {
            // The warm-up is over: nothing of it is recorded (requests due before it
            // that end later are left out one by one, `recorded`).
            self.warming = false;
            self.out.discard_warmup(pace);
            self.replies.clear();
        }
    }

    fn at_end(&self, now: Nanos) -> bool {
        // The schedule's natural end: every request due before it is still served,
        // until it completes or times out, so a target that stalls at the end still
        // shows in the latency.
        self.workload.all_dispatched() && now >= self.plan.duration_ns
    }

    fn on_stop(&mut self, _now: Nanos, interrupted: bool, pace: &Pacer) -> u64 {
        if !interrupted {
            return self.plan.timeout_ns + pace.scan_every;
        }
        // Ctrl-C: stop now; what waits for a connection was never sent.
        while self.backlog.pop().is_some() {
            self.out.counters.cut_off += 1;
        }
        self.plan.timeout_ns.min(DRAIN_NS_MAX)
    }

    fn dispatch_due(&mut self, now_t: Ticks, now: Nanos) -> u64 {
        Worker::dispatch_due(self, now_t, now)
    }

    fn reap(&mut self) -> usize {
        Worker::reap(self)
    }

    fn after_reap(&mut self, _now_t: Ticks, now: Nanos) {
        self.serve_backlog();
        if self
            .workload
            .closed_loop()
            .is_some_and(|l| !l.reissue_q.is_empty())
        {
            self.reissue();
        }
        if !self.deferred_q.is_empty() {
            self.open_deferred(now);
        }
    }

    fn scan(&mut self, now: Nanos) {
        Worker::scan(self, now);
        if self.closed_batch_max > 1 {
            self.set_closed_batch(now);
        }
    }

    fn before_wait(&mut self) {
        self.flush_sends();
    }

    fn drained(&self) -> bool {
        self.inflight == 0 && self.backlog.is_empty()
    }

    fn timers(&self) -> bool {
        self.inflight > 0 || self.closed > 0 || !self.backlog.is_empty()
    }

    fn completions_per_wake(&self) -> u32 {
        // Responses are timed by the kernel: the loop need not wake for them unless a
        // due request waits for a connection they free, a connect is pending, or the
        // drain waits for the last of them.
        if !(self.stamped()
            && self.running
            && !self.core.stopping
            && self.backlog.is_empty()
            && self.connecting == 0)
        {
            return 1;
        }
        if !self.workload.closed() {
            return self.wake_batch;
        }
        // A closed loop waits for a batch only while many more are in flight (a
        // batch larger than what is in flight would wait out its whole time).
        if self.inflight >= 4 * u64::from(self.closed_batch) {
            self.closed_batch
        } else {
            1
        }
    }

    fn batch_wait_ns(&self) -> u64 {
        if self.workload.closed() {
            super::CLOSED_WAKE_WAIT_NS
        } else {
            u64::MAX
        }
    }

    fn next_due(&self) -> Option<Nanos> {
        let next_due = self.workload.next_due();
        // A connection waiting for its turn under --connect-rate wakes the loop too.
        match (next_due, self.deferred_q.is_empty()) {
            (Some(d), false) => Some(d.min(self.next_connect_ns)),
            (None, false) => Some(self.next_connect_ns),
            (d, true) => d,
        }
    }

    fn finish(&mut self, t: &mut WorkerTotals) {
        // Whatever is still waiting after the drain is cut off, not an error.
        while self.backlog.pop().is_some() {
            self.out.counters.cut_off += 1;
        }
        for c in 0..self.table.conns.len() as u32 {
            while let Some(req) = self.table.pop_front(c) {
                if req.stream == crate::engine::conn_table::ANSWERED {
                    continue;
                }
                self.inflight -= 1;
                self.out.counters.cut_off += 1;
            }
        }
        self.close_all();
        if self.stamped() {
            t.ring_features.push(crate::engine::stamps::FEATURE);
        }
        t.last_done_ns = self.last_done_ns;
        t.completed = self.completed_total;
        t.backlog_peak = self.backlog_peak;
        t.first_protocol_error = self.first_bad.take();
        t.first_goaway = self.h2.as_deref_mut().and_then(|h| h.first_goaway.take());
        t.entries = std::mem::take(&mut self.entries);
        t.targets = std::mem::take(&mut self.targets);
        t.replies = std::mem::take(&mut self.replies);
    }
}
