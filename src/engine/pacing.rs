//! The bookkeeping both worker loops share: interval boundaries, the timeout-scan
//! period, the stop and its drain deadline, the time spent spinning, and when to wake.
//! Pure arithmetic on instants handed in (ns since the run's start); the loops own the
//! ring and decide what to do.

use crate::clock::Nanos;

pub struct Pacer {
    interval_ns: u64,
    next_interval: Nanos,
    interval_idx: u64,
    /// Timeouts are checked every 1% of the timeout (1-50 ms): precise enough, and a
    /// pass over the table stays rare even with many connections.
    pub scan_every: u64,
    next_scan: Nanos,
    drain_deadline: Nanos,
    spin_ns: u64,
    /// Since when the loop has been idle, and whether asleep in the ring (else spinning).
    idle_since: Option<(Nanos, bool)>,
    /// Wall time asleep in the ring, ns.
    sleep_ns: u64,
    cpu_start: u64,
    /// (CPU ns, spin ns) when the schedule stopped: the busy gate's window.
    at_stop: Option<(u64, u64)>,
    /// CPU and spin time at the last interval boundary ([`Pacer::take_usage`]).
    usage_mark: Usage,
    /// When the pacer started (the wall-time origin of [`Usage`]).
    born: std::time::Instant,
}

/// What the loop should do once an iteration's work is done.
/// How a worker spent an interval: its thread's CPU time, and the wall time it spun
/// for a due instant or slept in the ring (the rest of the wall time it worked).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Wall time the interval lasted for this worker.
    pub wall_ns: u64,
    pub cpu_ns: u64,
    pub spin_ns: u64,
    pub sleep_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    /// Instant (ns) to sleep until, at the latest.
    pub at: Nanos,
    /// The next due send is what sets `at` (spin from there instead of sleeping).
    pub due_soon: bool,
}

impl Pacer {
    /// Starts the loop's clocks; CPU time counts from here.
    pub fn start(interval_ns: u64, timeout_ns: u64) -> Pacer {
        Pacer {
            interval_ns,
            next_interval: interval_ns,
            interval_idx: 0,
            scan_every: (timeout_ns / 100).clamp(1_000_000, 50_000_000),
            next_scan: 0,
            drain_deadline: u64::MAX,
            spin_ns: 0,
            idle_since: None,
            sleep_ns: 0,
            cpu_start: thread_cpu_ns(),
            at_stop: None,
            usage_mark: Usage::default(),
            born: std::time::Instant::now(),
        }
    }

    /// Call first in every iteration: the previous iteration, if idle, was spinning.
    #[inline]
    pub fn begin(&mut self, now: Nanos) {
        match self.idle_since.take() {
            Some((t, false)) => self.spin_ns += now.saturating_sub(t),
            Some((t, true)) => self.sleep_ns += now.saturating_sub(t),
            None => {}
        }
    }

    /// The iteration that started at `now` did nothing but look.
    #[inline]
    pub fn idle(&mut self, now: Nanos) {
        self.idle_since = Some((now, false));
    }

    /// The loop goes to sleep in the ring at `now` (until the next `begin`).
    #[inline]
    pub fn sleep(&mut self, now: Nanos) {
        self.idle_since = Some((now, true));
    }

    /// The schedule stops now; the drain may last `drain_ns`.
    pub fn stop(&mut self, now: Nanos, drain_ns: u64) {
        self.at_stop = Some((self.cpu_ns(), self.spin_ns));
        self.drain_deadline = now + drain_ns;
    }

    /// The ring refused a submit for good: the loop ends now, with what was measured
    /// so far (operations in flight are cut off, not errors). Stops the clocks unless
    /// the loop was already stopping; one step for the TCP and UDP loops.
    pub fn halt(
        &mut self,
        now: Nanos,
        duration_ns: u64,
        stopping: &mut bool,
        stopped_ns: &mut Nanos,
    ) {
        if !*stopping {
            *stopped_ns = now.min(duration_ns);
            self.stop(now, 0);
        }
        *stopping = true;
    }

    #[inline]
    pub fn drain_over(&self, now: Nanos) -> bool {
        now >= self.drain_deadline
    }

    /// Whether the timeout scan is due (and if so, schedules the next one).
    #[inline]
    pub fn scan_due(&mut self, now: Nanos) -> bool {
        if now < self.next_scan {
            return false;
        }
        self.next_scan = now + self.scan_every;
        true
    }

    /// Intervals start after a warm-up of `warmup_ns` (the first one ends then plus an
    /// interval): interval 0 is the first recorded second.
    pub fn after_warmup(mut self, warmup_ns: u64) -> Pacer {
        self.next_interval += warmup_ns;
        self
    }

    /// The next interval that ended by `now`, if any (call until `None`).
    #[inline]
    pub fn interval_ended(&mut self, now: Nanos) -> Option<u64> {
        if now < self.next_interval {
            return None;
        }
        let i = self.interval_idx;
        self.interval_idx += 1;
        self.next_interval += self.interval_ns;
        Some(i)
    }

    /// The interval the loop is in (the drain folds into it after the stop).
    /// When the current interval ends, ns since start.
    pub fn interval_end(&self) -> Nanos {
        self.next_interval
    }

    pub fn interval(&self) -> u64 {
        self.interval_idx
    }

    /// When to wake: the drain deadline, the next interval boundary (while running),
    /// the next scan (when `timers` are pending), or `spin_ns` before `next_due`.
    #[inline]
    pub fn wake(
        &self,
        stopping: bool,
        timers: bool,
        next_due: Option<Nanos>,
        spin_ns: u64,
    ) -> Wake {
        let mut at = self.drain_deadline;
        if !stopping {
            at = at.min(self.next_interval);
        }
        if timers {
            at = at.min(self.next_scan);
        }
        let mut due_soon = false;
        if let Some(due) = next_due.filter(|_| !stopping) {
            let spin_from = due.saturating_sub(spin_ns);
            if spin_from <= at {
                at = spin_from;
                due_soon = true;
            }
        }
        Wake { at, due_soon }
    }

    /// CPU time, and wall time spinning and asleep, since the previous call (one
    /// interval), ns.
    pub fn take_usage(&mut self) -> Usage {
        let now = Usage {
            wall_ns: self.born.elapsed().as_nanos() as u64,
            cpu_ns: self.cpu_ns(),
            spin_ns: self.spin_ns,
            sleep_ns: self.sleep_ns,
        };
        let then = std::mem::replace(&mut self.usage_mark, now);
        Usage {
            wall_ns: now.wall_ns.saturating_sub(then.wall_ns),
            cpu_ns: now.cpu_ns.saturating_sub(then.cpu_ns),
            spin_ns: now.spin_ns.saturating_sub(then.spin_ns),
            sleep_ns: now.sleep_ns.saturating_sub(then.sleep_ns),
        }
    }

    fn cpu_ns(&self) -> u64 {
        thread_cpu_ns().saturating_sub(self.cpu_start)
    }

    /// Wall time asleep in the ring so far, ns.
    pub fn sleep_ns(&self) -> u64 {
        self.sleep_ns
    }

    /// (CPU ns, spin ns, busy share of the schedule's window) at the end of the run.
    pub fn totals(&self, stopped_ns: Nanos) -> (u64, u64, f64) {
        let cpu = self.cpu_ns();
        let (cpu_at_stop, spin_at_stop) = self.at_stop.unwrap_or((cpu, self.spin_ns));
        let busy = cpu_at_stop.saturating_sub(spin_at_stop) as f64 / stopped_ns.max(1) as f64;
        (cpu, self.spin_ns, busy)
    }
}

/// A worker's busy CPU: its CPU time less the CPU it spent spinning for due instants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BusyCpu {
    /// Busy CPU, ns: exact when `separated`, else an upper bound.
    pub ns: u64,
    /// Whether the spinning could be told apart from the work (within 5%).
    pub separated: bool,
}

/// Busy CPU from a worker's totals: `cpu_ns` of thread CPU time, and the wall time it
/// spun (`spin_ns`), slept in the ring (`sleep_ns`) and ran in all (`wall_ns`).
///
/// Spinning is measured in wall time, so on a loaded host it includes time the thread
/// was preempted, and `cpu - spin` understates the work -- down to 0 once the spinning
/// wall time exceeds the CPU time. The time off CPU while not asleep is
/// `wall - sleep - cpu`; at most that much of the spinning was off CPU, so at least
/// `spin - off_cpu` of it burnt CPU, and `cpu - (spin - off_cpu)` is an upper bound of
/// the work: exact on a quiet host (nothing off CPU), the whole CPU time when the
/// preemption could have covered all the spinning. Never 0 for a worker that ran.
pub fn busy_cpu_ns(cpu_ns: u64, spin_ns: u64, sleep_ns: u64, wall_ns: u64) -> BusyCpu {
    let off_cpu = wall_ns.saturating_sub(sleep_ns).saturating_sub(cpu_ns);
    let low = cpu_ns.saturating_sub(spin_ns);
    let high = cpu_ns.saturating_sub(spin_ns.saturating_sub(off_cpu));
    BusyCpu {
        ns: high,
        separated: (high - low) * 20 <= high,
    }
}

/// CPU time (user + system) of the calling thread, ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_scans_and_spin_are_counted() {
        let mut p = Pacer::start(1_000, 500_000_000);
        assert_eq!(p.scan_every, 5_000_000);
        assert_eq!(p.interval_ended(999), None);
        assert_eq!(p.interval_ended(2_500), Some(0));
        assert_eq!(p.interval_ended(2_500), Some(1));
        assert_eq!(p.interval_ended(2_500), None);
        assert_eq!(p.interval(), 2);
        assert!(p.scan_due(0) && !p.scan_due(1) && p.scan_due(5_000_000));
        p.idle(100);
        p.begin(350);
        p.begin(400); // not idle in between: nothing added
        assert_eq!(p.totals(1).1, 250);
    }

    #[test]
    fn busy_cpu_survives_spinning_measured_past_the_cpu_time() {
        // Quiet host: running time = CPU time, the spinning is exactly separated.
        assert_eq!(
            busy_cpu_ns(1_000, 300, 2_000, 3_000),
            BusyCpu {
                ns: 700,
                separated: true
            }
        );
        // Loaded host (the bug): 1.5 us of spinning wall time against 1 us of CPU, the
        // thread off CPU for 2 us. `cpu - spin` said 0; the CPU was all there is.
        assert_eq!(
            busy_cpu_ns(1_000, 1_500, 0, 3_000),
            BusyCpu {
                ns: 1_000,
                separated: false
            }
        );
        // Partly preempted: 400 ns off CPU, of 900 ns spinning at least 500 burnt CPU.
        let b = busy_cpu_ns(2_000, 900, 600, 3_000);
        assert_eq!(b.ns, 1_500);
        assert!(!b.separated);
        // A little noise stays within the 5%.
        assert!(busy_cpu_ns(2_000, 500, 0, 2_050).separated);
        assert_eq!(busy_cpu_ns(0, 0, 0, 0).ns, 0);
    }

    #[test]
    fn wake_prefers_the_earliest_deadline_and_spins_before_a_due_send() {
        let mut p = Pacer::start(1_000_000_000, 5_000_000_000);
        // Running, no timers, a send due at 10 ms with a 2 ms spin: wake at 8 ms.
        assert_eq!(
            p.wake(false, false, Some(10_000_000), 2_000_000),
            Wake {
                at: 8_000_000,
                due_soon: true
            }
        );
        // Nothing due: the interval boundary.
        assert_eq!(
            p.wake(false, false, None, 2_000_000),
            Wake {
                at: 1_000_000_000,
                due_soon: false
            }
        );
        // Stopping: only the drain deadline (and timers) count.
        p.stop(0, 300);
        assert_eq!(
            p.wake(true, false, Some(5), 0),
            Wake {
                at: 300,
                due_soon: false
            }
        );
        assert!(p.drain_over(300) && !p.drain_over(299));
    }
}
