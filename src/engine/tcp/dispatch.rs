//! Dispatch and backlog: requests due on the timetable go onto a connection with a
//! free pipeline slot, or wait in the backlog behind older ones; in a closed loop a
//! completed response issues the next request on its connection.

use super::Worker;
use crate::clock::{Nanos, Ticks};
use crate::engine::conn_table::{ConnState, Req};
use crate::engine::recorder::ErrorKind;
use crate::request::request_rng;

impl Worker<'_> {
    /// Closed loop: issues the next request on each connection whose response just
    /// completed and which is still usable (one per completed response, so requests
    /// answered in one read go out again together, in one send).
    pub(super) fn reissue(&mut self) {
        let now_t = self.clock.ticks();
        while let Some(c) = self.workload.closed_loop().and_then(|l| l.reissue_q.pop()) {
            if self.table.has_free_slot(c) && !self.core.stopping {
                self.issue(c, now_t);
            }
        }
    }

    /// Closed loop: fills connection `c`'s pipeline (HTTP/2: its streams, within the
    /// server's limit) with new requests, as it opens or the schedule starts.
    pub(super) fn fill(&mut self, c: u32, now_t: Ticks) {
        while self.table.has_free_slot(c) && !self.core.stopping {
            self.issue(c, now_t);
        }
    }

    /// Closed loop: a request on connection `c`, intended now (there is no timetable,
    /// so the latency is the service time and hides any queueing).
    pub(super) fn issue(&mut self, c: u32, now_t: Ticks) {
        let Some(closed_loop) = self.workload.closed_loop() else {
            return;
        };
        let seq = closed_loop.next_seq();
        let req = Req {
            intended_ns: self.clock.ns(now_t),
            dispatched: now_t,
            sent: 0,
            seq,
            entry: self
                .plan
                .requests
                .choose(&mut request_rng(self.plan.seed, seq)),
            ..Req::default()
        };
        self.out.counters.dispatched += 1;
        self.assign(c, req);
    }

    #[inline]
    pub(super) fn mark_ready(&mut self, c: u32) {
        let conn = &mut self.table.conns[c as usize];
        if !conn.in_ready_queue {
            conn.in_ready_queue = true;
            let queued = self.ready_q.push(c);
            debug_assert!(queued, "each connection is queued at most once");
        }
    }

    #[inline]
    pub(super) fn mark_flush(&mut self, c: u32) {
        let conn = &mut self.table.conns[c as usize];
        if !conn.in_flush_queue {
            conn.in_flush_queue = true;
            let queued = self.flush_q.push(c);
            debug_assert!(queued, "each connection is queued at most once");
        }
    }

    /// A connection with a free pipeline slot, round robin; `None` if all are busy.
    #[inline]
    pub(super) fn free_conn(&mut self) -> Option<u32> {
        while let Some(c) = self.ready_q.pop() {
            self.table.conns[c as usize].in_ready_queue = false;
            if !self.retiring(c) && (self.table.has_free_slot(c) || self.idle_closed(c)) {
                return Some(c);
            }
        }
        None
    }

    /// Connection per request: a closed slot with nothing queued takes the next request.
    #[inline]
    pub(super) fn idle_closed(&self, c: u32) -> bool {
        let conn = &self.table.conns[c as usize];
        self.workload.per_request()
            && conn.inflight == 0
            && matches!(conn.state, ConnState::Closed { .. })
    }

    #[inline]
    pub(super) fn assign(&mut self, c: u32, req: Req) {
        let opening = self.idle_closed(c);
        self.table.push_req(c, req);
        if let Some(r) = self.workload.replay() {
            let i = self
                .table
                .slot_index(c, self.table.conns[c as usize].inflight - 1);
            self.replay_slots.put(i, r.bytes(req.seq));
        }
        self.inflight += 1;
        self.life_served(c, req.dispatched);
        self.activate(c);
        if opening {
            // Its latency still counts from the intended instant, connect included.
            self.open(c);
            return;
        }
        if self.table.has_free_slot(c) && !self.retiring(c) {
            self.mark_ready(c);
        }
        if self.table.conns[c as usize].sending == 0 {
            self.mark_flush(c);
        }
    }

    /// Dispatches every request due by `now`: onto a free connection, or into the
    /// backlog behind older waiting requests.
    #[inline]
    pub(super) fn dispatch_due(&mut self, now_t: Ticks, now_ns: Nanos) -> u64 {
        let mut n = 0;
        while let Some(timetable) = self.workload.timetable()
            && let Some((intended, seq)) = timetable.pop_due(now_ns)
        {
            timetable.fit.record(now_ns, &mut self.out.hist.pacing);
            let req = Req {
                intended_ns: intended,
                dispatched: now_t,
                sent: 0,
                seq,
                entry: self
                    .plan
                    .requests
                    .choose(&mut request_rng(self.plan.seed, seq)),
                ..Req::default()
            };
            n += 1;
            if self.recorded(intended) {
                self.out.counters.dispatched += 1;
                self.out.counters.note_dispatch(intended, now_ns);
                self.out
                    .hist
                    .dispatch_lag
                    .saturating_record(now_ns - intended);
            }
            if self.backlog.is_empty()
                && let Some(c) = self.free_conn()
            {
                self.assign(c, req);
                continue;
            }
            if !self.backlog.push(req) {
                self.request_error(
                    &req,
                    None,
                    ErrorKind::BacklogOverflow,
                    Some(self.plan.timeout_ns),
                );
            }
        }
        self.backlog_peak = self.backlog_peak.max(self.backlog.len() as u64);
        self.release_replayed();
        n
    }

    /// `--replay`: hands the reader back the chunks whose requests are all placed
    /// (or failed): everything before the oldest request still in the backlog.
    #[inline]
    pub(super) fn release_replayed(&mut self) {
        if self.plan.replay.is_none() {
            return;
        }
        let oldest = self.backlog.front().map(|r| r.seq);
        if let Some(t) = self.workload.timetable()
            && let Some(r) = &mut t.replay
        {
            r.release_before(oldest);
            self.out.counters.replay_dry += std::mem::take(&mut r.starved);
        }
    }

    /// Moves waiting requests onto connections that have a free slot again.
    #[inline]
    pub(super) fn serve_backlog(&mut self) {
        while !self.backlog.is_empty() {
            let Some(c) = self.free_conn() else { break };
            let req = self.backlog.pop().expect("not empty");
            self.assign(c, req);
        }
        self.release_replayed();
    }
}
