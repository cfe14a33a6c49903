//! The loop: now -> stop? -> dispatch due -> reap -> backlog -> closed loop ->
//! deferred connects -> scan -> interval boundary -> sends -> wait (sleep or spin).

use super::Worker;
use crate::engine::conn_table::ConnState;
use crate::engine::driver::wait_for_start;
use crate::engine::pacing::Pacer;
use crate::engine::recorder::WorkerTotals;
use crate::limits::{DRAIN_NS_MAX, WAIT_NS_MAX};
use std::sync::atomic::{AtomicBool, Ordering};

impl Worker<'_> {
    pub(super) fn run(&mut self, stop: &AtomicBool) {
        wait_for_start(&self.clock, self.plan.spin_ns);
        self.running = true;
        if self.workload.closed_loop().is_some() {
            let now_t = self.clock.ticks();
            for c in 0..self.table.conns.len() as u32 {
                if self.table.conns[c as usize].state == ConnState::Ready {
                    self.issue(c, now_t);
                }
            }
        }
        let timeout = self.plan.timeout_ns;
        let mut pace =
            Pacer::start(self.plan.interval_ns, timeout).after_warmup(self.plan.warmup_ns);
        let mut warming = self.plan.warmup_ns > 0;
        loop {
            let now_t = self.clock.ticks();
            let now = self.clock.ns(now_t);
            pace.begin(now);
            if warming && now >= self.plan.warmup_ns {
                // The warm-up is over: nothing of it is recorded (requests due before it
                // that end later are left out one by one, `recorded`).
                warming = false;
                self.out.discard_warmup(&mut pace);
                self.replies.clear();
            }
            if self.fatal.is_some() {
                pace.halt(
                    now,
                    self.plan.duration_ns,
                    &mut self.stopping,
                    &mut self.stopped_ns,
                );
                self.interrupted = true;
                break;
            }
            if !self.stopping {
                if stop.load(Ordering::Relaxed) {
                    // Ctrl-C: stop now; what waits for a connection was never sent.
                    self.stopping = true;
                    self.interrupted = true;
                    self.stopped_ns = now.min(self.plan.duration_ns);
                    pace.stop(now, timeout.min(DRAIN_NS_MAX));
                    while self.backlog.pop().is_some() {
                        self.out.counters.cut_off += 1;
                    }
                } else if self.workload.all_dispatched() && now >= self.plan.duration_ns {
                    // The schedule's natural end: every request due before it is still
                    // served, until it completes or times out, so a target that stalls
                    // at the end still shows in the latency.
                    self.stopping = true;
                    self.stopped_ns = self.plan.duration_ns;
                    pace.stop(now, timeout + pace.scan_every);
                }
            }
            let mut work = 0;
            if !self.stopping {
                work += self.dispatch_due(now_t, now);
            }
            work += self.reap() as u64;
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
            if pace.scan_due(now) {
                self.scan(now);
            }
            // After the stop, the drain folds into the last interval of the schedule.
            // The interval that reaches the schedule's end stays open until the stop
            // (a late worker would otherwise start one that lies after the end).
            while !self.stopping
                && pace.interval_end() < self.plan.duration_ns
                && let Some(i) = pace.interval_ended(now)
            {
                self.out.send(i, None, &mut pace);
            }
            self.flush_sends();
            if self.stopping
                && ((self.inflight == 0 && self.backlog.is_empty()) || pace.drain_over(now))
            {
                break;
            }
            // Wait: sleep on the ring until `--spin` before the next due send (or another
            // deadline), then spin on the TSC without entering the kernel needlessly.
            let timers = self.inflight > 0 || self.closed > 0 || !self.backlog.is_empty();
            let next_due = self.workload.next_due();
            // A connection waiting for its turn under --connect-rate wakes the loop too.
            let next_due = match (next_due, self.deferred_q.is_empty()) {
                (Some(d), false) => Some(d.min(self.next_connect_ns)),
                (None, false) => Some(self.next_connect_ns),
                (d, true) => d,
            };
            let wake = pace.wake(self.stopping, timers, next_due, self.plan.spin_ns);
            let pending_cqes = self.ring.has_completions();
            let now2 = if work == 0 && !pending_cqes && wake.at > now + 1_000 {
                self.clock.now_ns() // only a sleep needs a fresh reading
            } else {
                now
            };
            if work == 0 && !pending_cqes && wake.at > now2 + 1_000 {
                pace.sleep(now2);
                self.submit_and_wait((wake.at - now2).min(WAIT_NS_MAX));
            } else {
                if self.ring.needs_enter() || (work == 0 && !wake.due_soon) {
                    self.submit();
                }
                if work == 0 && !pending_cqes {
                    // The whole iteration did nothing but look: count it as spinning.
                    pace.idle(now);
                    std::hint::spin_loop();
                }
            }
        }
        // Whatever is still waiting after the drain is cut off, not an error.
        while self.backlog.pop().is_some() {
            self.out.counters.cut_off += 1;
        }
        for c in 0..self.table.conns.len() as u32 {
            while self.table.pop_front(c).is_some() {
                self.inflight -= 1;
                self.out.counters.cut_off += 1;
            }
        }
        let end = self.clock.now_ns();
        let (cpu_ns, spin_ns, busy_at_stop) = pace.totals(self.stopped_ns);
        self.close_all();
        let totals = WorkerTotals {
            core: self.plan.core,
            cpu_ns,
            spin_ns,
            sleep_ns: pace.sleep_ns(),
            wall_ns: end,
            stopped_ns: self.stopped_ns,
            last_done_ns: self.last_done_ns,
            busy_at_stop,
            completed: self.completed_total,
            backlog_peak: self.backlog_peak,
            histogram_allocations: 0, // set by the outbox
            ring_features: self.ring.features.clone(),
            first_protocol_error: self.first_bad.take(),
            entries: std::mem::take(&mut self.entries),
            error: self.fatal.clone(),
            frames: None,
            replies: std::mem::take(&mut self.replies),
        };
        let interval = pace.interval();
        self.out.send(interval, Some(totals), &mut pace);
    }
}
