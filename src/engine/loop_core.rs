//! What every worker embeds once, whatever its workload: the ring and the count of
//! operations in it (push, reap, quiesce), the run's end as the loop and the workload
//! share it (the stop, its instant, the first error), and the totals every worker
//! reports alike.
//!
//! The count is exact because nothing else touches the ring's queues: every entry
//! goes in through [`LoopCore::push`] and every completion comes out through
//! [`LoopCore::reap_into`] or [`LoopCore::reap_each`], so [`LoopCore::quiesce`] knows
//! how many operations the kernel still holds, and a worker's `Drop` whether its
//! buffers must be leaked.

use super::driver::{RingFailure, WorkerError};
use super::pacing::Pacer;
use super::recorder::WorkerTotals;
use super::ring::Ring;
use super::worker_plan::WorkerPlan;
use crate::clock::Nanos;

/// How long [`LoopCore::quiesce`] waits without any operation finishing: closing a
/// few hundred thousand sockets on a shared core takes longer than any fixed bound,
/// so the wait lasts as long as they keep finishing.
const QUIET: std::time::Duration = std::time::Duration::from_secs(1);

/// A worker's ring, what is in it, and how its run ends.
pub struct LoopCore {
    pub ring: Ring,
    /// The worker's index (its errors name it) and the CPU it is pinned to.
    worker: usize,
    cpu: Option<usize>,
    /// Operations submitted whose last completion has not been reaped: buffers they
    /// point into must stay alive until this is zero.
    ops_in_ring: u64,
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

impl LoopCore {
    pub fn new(ring: Ring, plan: &WorkerPlan) -> Self {
        LoopCore {
            ring,
            worker: plan.index,
            cpu: plan.core,
            ops_in_ring: 0,
            stopping: false,
            stopped_ns: 0,
            interrupted: false,
            fatal: None,
        }
    }

    /// Operations in the ring: while not zero, the buffers they point into belong to
    /// the kernel.
    #[inline]
    pub fn ops_in_ring(&self) -> u64 {
        self.ops_in_ring
    }

    /// Queues `entries` (a linked chain stays together) and counts them as in the
    /// ring; returns whether they went in. Once the ring has failed for good nothing
    /// is queued, and a push that fails ends the run (the first error wins).
    ///
    /// # Safety
    /// Every buffer and address the entries point to must stay valid and unmoved until
    /// their completions have been reaped: owned by the worker, allocated once, never
    /// reallocated, and leaked instead of freed when the worker is dropped while
    /// [`LoopCore::ops_in_ring`] is not zero.
    #[inline]
    pub unsafe fn push(&mut self, entries: &[io_uring::squeue::Entry]) -> bool {
        if self.fatal.is_some() {
            return false;
        }
        // SAFETY: forwarded to this function's contract.
        let pushed = unsafe {
            if let [entry] = entries {
                self.ring.push(entry)
            } else {
                self.ring.push_all(entries)
            }
        };
        match pushed {
            Ok(()) => {
                self.ops_in_ring += entries.len() as u64;
                true
            }
            Err(e) => {
                self.fail(&e);
                false
            }
        }
    }

    /// The ring refused a submit or a push for good: the first such error ends the
    /// run; later ones are dropped.
    #[cold]
    pub fn fail(&mut self, e: &impl RingFailure) {
        if self.fatal.is_none() {
            self.fatal = Some(WorkerError::submit(self.worker, e));
        }
    }

    /// Submits what is queued without waiting.
    #[inline]
    pub fn submit(&mut self) {
        if let Err(e) = self.ring.submit() {
            self.fail(&e);
        }
    }

    /// Submits and waits for a completion or `timeout_ns`.
    #[inline]
    pub fn submit_and_wait(&mut self, timeout_ns: u64) {
        self.submit_and_wait_for(timeout_ns, 1);
    }

    /// Submits and waits for `want` completions (at least 1) or `timeout_ns`.
    #[inline]
    pub fn submit_and_wait_for(&mut self, timeout_ns: u64, want: u32) {
        if let Err(e) = self.ring.submit_and_wait_for(timeout_ns, want) {
            self.fail(&e);
        }
    }

    /// Moves up to `out.len()` completions, (user data, result), into `out`; returns
    /// how many. For workers whose operations each end with one completion.
    #[inline]
    pub fn reap_into(&mut self, out: &mut [(u64, i32)]) -> usize {
        let n = self.ring.reap_into(out);
        self.ops_in_ring -= n as u64;
        n
    }

    /// Hands up to `max` completions, (user data, result, flags), to `f`; returns how
    /// many. A multishot operation is counted out with its last completion (no MORE
    /// flag).
    #[inline]
    pub fn reap_each(&mut self, max: usize, mut f: impl FnMut(u64, i32, u32)) -> usize {
        let mut finished = 0;
        let n = self.ring.reap_each(max, |data, res, flags| {
            finished += u64::from(!io_uring::cqueue::more(flags));
            f(data, res, flags);
        });
        self.ops_in_ring -= finished;
        n
    }

    /// Waits until the kernel has finished every operation in the ring, as long as
    /// they keep finishing (a second, `QUIET`, without progress ends the wait). The
    /// worker has closed or shut down its sockets first, so that pending receives
    /// complete; if some never finish, [`LoopCore::ops_in_ring`] stays above zero
    /// and the worker's `Drop` leaks the buffers rather than freeing them under the
    /// kernel.
    pub fn quiesce(&mut self) {
        self.ops_in_ring = self.ring.wait_out(self.ops_in_ring, QUIET);
    }

    /// What every worker reports alike once its loop ended at `end`: its CPU, where
    /// the time went, the stop, the ring's features and the error that ended the run.
    /// The workload adds its own figures ([`super::run_loop::Hooks::finish`]).
    pub fn totals(&self, pace: &Pacer, end: Nanos) -> WorkerTotals {
        let (cpu_ns, spin_ns, busy_at_stop) = pace.totals(self.stopped_ns);
        WorkerTotals {
            core: self.cpu,
            cpu_ns,
            spin_ns,
            sleep_ns: pace.sleep_ns(),
            sleeps: pace.sleeps(),
            timer_late_ns: pace.timer_late_ns(),
            timer_late_p995_ns: pace.timer_late_p995_ns(),
            wall_ns: end,
            stopped_ns: self.stopped_ns,
            busy_at_stop,
            histogram_allocations: 0, // set by the outbox
            ring_features: self.ring.features.clone(),
            error: self.fatal.clone(),
            ..WorkerTotals::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ring::PushError;
    use io_uring::opcode;

    fn core() -> LoopCore {
        let ring = Ring::new(8).expect("io_uring available");
        LoopCore::new(ring, &WorkerPlan::for_tests(1))
    }

    fn nop(data: u64) -> io_uring::squeue::Entry {
        opcode::Nop::new().build().user_data(data)
    }

    /// Every push is counted in, every completion out, and the quiesce finds nothing
    /// left; a chain goes in whole.
    #[test]
    fn pushes_are_counted_in_and_reaps_out() {
        let mut c = core();
        // SAFETY: a nop points into no memory.
        assert!(unsafe { c.push(&[nop(1)]) });
        // SAFETY: as above.
        assert!(unsafe { c.push(&[nop(2), nop(3)]) });
        assert_eq!(c.ops_in_ring(), 3);
        c.submit_and_wait_for(1_000_000_000, 3);
        let mut out = [(0u64, 0i32); 8];
        let mut reaped = 0;
        while reaped < 3 {
            reaped += c.reap_into(&mut out[reaped..]);
        }
        assert_eq!(c.ops_in_ring(), 0);
        c.quiesce();
        assert_eq!(c.ops_in_ring(), 0);
        assert!(c.fatal.is_none());
    }

    /// The first failed submit ends the run and names itself; a later one does not
    /// replace it, and nothing is queued (or counted) once the ring has failed.
    #[test]
    fn the_first_error_wins_and_nothing_is_pushed_after_it() {
        let mut c = core();
        c.ring.fail_submits_after(0);
        c.submit();
        let first = c.fatal.clone().expect("the failed submit is recorded");
        assert!(matches!(
            first,
            WorkerError::Submit {
                worker: 0,
                errno: libc::ENOMEM
            }
        ));
        c.fail(&PushError::Full { rounds: 3 });
        assert!(matches!(c.fatal, Some(WorkerError::Submit { .. })), "kept");
        // SAFETY: a nop points into no memory.
        assert!(!unsafe { c.push(&[nop(1)]) });
        assert_eq!(c.ops_in_ring(), 0);
    }
}
