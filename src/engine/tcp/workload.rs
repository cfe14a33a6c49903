//! What the TCP worker's connections carry, as one enum matched on the hot path (static
//! dispatch, no flags): requests on the timetable over persistent connections, a
//! connection per request, or a closed loop. Each variant owns the state only it needs
//! (the timetable's cursor, the closed loop's queue); the worker asks it for the next
//! due request and tells it when a connection is ready or a response completed. A new
//! workload (frames, issue 14) is a new variant beside these, not new flags.

use super::fit::PacingFit;
use crate::clock::Nanos;
use crate::engine::conn_table::IndexQueue;
use crate::engine::replay::Cursor;
use crate::engine::worker_plan::{WorkerPlan, timetable};
use crate::schedule::{Arrivals, Schedule};

pub(super) enum Workload {
    /// Requests due on the timetable, pipelined over persistent connections (`--hold`
    /// with heartbeats included).
    Timetable(Timetable),
    /// `--connect-per-request`: requests due on the timetable, each on a connection of
    /// its own (connect, send, receive, close).
    PerRequest(Timetable),
    /// `--concurrency`: each connection keeps its pipeline (HTTP/2: its streams) full,
    /// sending the next request as each response arrives (no timetable).
    ClosedLoop(ClosedLoop),
}

impl Workload {
    pub(super) fn new(plan: &WorkerPlan) -> Workload {
        if plan.closed_loop {
            Workload::ClosedLoop(ClosedLoop::new(plan))
        } else if plan.per_request {
            Workload::PerRequest(Timetable::new(plan))
        } else {
            Workload::Timetable(Timetable::new(plan))
        }
    }

    /// A connection per request: closed connections wait for a request, never reopen
    /// by themselves.
    #[inline]
    pub(super) fn per_request(&self) -> bool {
        matches!(self, Workload::PerRequest(_))
    }

    /// Requests on the timetable over persistent connections: nothing but the
    /// timetable and the backlog waits for a completion.
    pub(super) fn paced_persistent(&self) -> bool {
        matches!(self, Workload::Timetable(_))
    }

    #[inline]
    pub(super) fn timetable(&mut self) -> Option<&mut Timetable> {
        match self {
            Workload::Timetable(t) | Workload::PerRequest(t) => Some(t),
            Workload::ClosedLoop(_) => None,
        }
    }

    #[inline]
    pub(super) fn closed_loop(&mut self) -> Option<&mut ClosedLoop> {
        match self {
            Workload::ClosedLoop(l) => Some(l),
            _ => None,
        }
    }

    /// `--concurrency`: a closed loop.
    #[inline]
    pub(super) fn closed(&self) -> bool {
        matches!(self, Workload::ClosedLoop(_))
    }

    /// Every request of the timetable has been dispatched (at once for a closed loop,
    /// which ends with the run's duration).
    #[inline]
    pub(super) fn all_dispatched(&self) -> bool {
        match self {
            Workload::Timetable(t) | Workload::PerRequest(t) => t.all_dispatched(),
            Workload::ClosedLoop(_) => true,
        }
    }

    /// `--replay`: the cursor on the recording.
    #[inline]
    pub(super) fn replay(&self) -> Option<&Cursor> {
        match self {
            Workload::Timetable(t) | Workload::PerRequest(t) => t.replay.as_ref(),
            Workload::ClosedLoop(_) => None,
        }
    }

    /// When the next request is due (`None`: no more requests on a timetable).
    #[inline]
    pub(super) fn next_due(&self) -> Option<Nanos> {
        match self {
            Workload::Timetable(t) | Workload::PerRequest(t) => t.next_due(),
            Workload::ClosedLoop(_) => None,
        }
    }
}

/// The worker's cursor on its shard of the timetable.
pub(super) struct Timetable {
    schedule: Arrivals,
    /// This worker's next request number in the schedule, and when it is due.
    next_k: u64,
    next_due: Nanos,
    /// Number of this worker's requests due before the end of the run (`u64::MAX`
    /// until found on the way, for Poisson arrivals).
    total_k: u64,
    duration_ns: Nanos,
    /// Goodness of fit of the actual dispatch instants (Poisson arrivals).
    pub(super) fit: PacingFit,
    /// `--replay`: the recording's requests in place of the schedule's.
    pub(super) replay: Option<Cursor>,
}

impl Timetable {
    pub(super) fn new(plan: &WorkerPlan) -> Timetable {
        let (schedule, total_k) = timetable(plan);
        Timetable {
            next_due: schedule.due_ns(0),
            schedule,
            next_k: 0,
            total_k,
            duration_ns: plan.duration_ns,
            fit: PacingFit::new(plan),
            replay: plan.replay.clone().map(Cursor::new),
        }
    }

    /// The next request due by `now_ns`, as (intended instant, global sequence number),
    /// advancing the cursor; `None` when none is due yet or the timetable is over.
    #[inline]
    pub(super) fn pop_due(&mut self, now_ns: Nanos) -> Option<(Nanos, u64)> {
        if let Some(r) = &mut self.replay {
            return r.pop_due(now_ns);
        }
        if self.next_k >= self.total_k || self.next_due > now_ns {
            return None;
        }
        let intended = self.next_due;
        let seq = self.schedule.global_seq(self.next_k);
        self.next_k += 1;
        self.next_due = self.schedule.due_ns(self.next_k);
        if self.next_due >= self.duration_ns {
            self.total_k = self.next_k; // Poisson: the timetable's end, found on the way
        }
        Some((intended, seq))
    }

    #[inline]
    pub(super) fn all_dispatched(&self) -> bool {
        match &self.replay {
            Some(r) => r.all_dispatched(),
            None => self.next_k >= self.total_k,
        }
    }

    #[inline]
    pub(super) fn next_due(&self) -> Option<Nanos> {
        match &self.replay {
            Some(r) => r.next_due(),
            None => (self.next_k < self.total_k).then_some(self.next_due),
        }
    }
}

/// `--concurrency`: each connection's pipeline (HTTP/2: its streams) kept full, the next
/// request issued as each response completes.
pub(super) struct ClosedLoop {
    /// Requests issued so far (their sequence numbers).
    pub(super) issued: u64,
    workers: u64,
    index: u64,
    /// Connections whose response completed, to send again.
    pub(super) reissue_q: IndexQueue,
}

impl ClosedLoop {
    fn new(plan: &WorkerPlan) -> ClosedLoop {
        ClosedLoop {
            issued: 0,
            workers: plan.workers as u64,
            index: plan.index as u64,
            // One entry per request slot: every response in flight may complete at once.
            reissue_q: IndexQueue::with_capacity(plan.connections * plan.pipeline),
        }
    }

    /// The global sequence number of the next request (workers interleave).
    #[inline]
    pub(super) fn next_seq(&mut self) -> u64 {
        let seq = self.issued * self.workers + self.index;
        self.issued += 1;
        seq
    }
}
