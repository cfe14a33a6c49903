//! The bookkeeping of the worker loop ([`super::run_loop`]): interval boundaries, the
//! timeout-scan period, the stop and its drain deadline, the time spent spinning, and
//! when to wake and whether to sleep or spin until then. Pure arithmetic on instants
//! handed in (ns since the run's start); the loop owns the ring.
//!
//! Precision is a setting with a cost ([`Precision`]): a wake-up sends everything due
//! by then, and the wake-up for a due send is aimed to land by `--resolution` after
//! its instant ([`aim`]), so at high rates one wake-up sends a window's worth (each
//! request's latency still counts from its own intended instant, as catch-up does) and
//! the dispatch lag stays within the resolution. The timer is aimed early by a high
//! percentile of its measured lateness ([`late_tail`]), at most half the resolution.
//! `--spin auto` spins only where spinning is cheaper than a sleep ([`SLEEP_CPU_NS`])
//! or where the resolution asked for is finer than the timer's measured lateness.
//! Nothing is ever sent before its instant: a wake-up sends only what is due by then.

use crate::clock::Nanos;
use crate::limits::{
    FINE_RESOLUTION_NS, LOW_RATE_GAP_NS, SLEEP_CPU_NS, SPIN_NS, TIMER_LATE_NS_INITIAL,
    TIMER_LATE_TAIL_NS_INITIAL,
};

/// `--spin`: how the loop waits for a due send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spin {
    /// Spin only when it is cheaper than sleeping or the resolution needs it.
    Auto,
    /// Spin for this long before every due send (0: never spin).
    Fixed(u64),
}

impl std::fmt::Display for Spin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Spin::Auto => f.write_str("auto"),
            Spin::Fixed(0) => f.write_str("0"),
            Spin::Fixed(ns) => write!(f, "{:?}", std::time::Duration::from_nanos(*ns)),
        }
    }
}

/// `--resolution` and `--spin`: how precisely the loop sends on the timetable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Precision {
    /// The wake-up for a due send lands by this long after its instant and sends
    /// everything due by then (0: one wake-up per due send).
    pub resolution_ns: u64,
    pub spin: Spin,
}

impl Precision {
    /// Today's fixed spin, one wake-up per due send: what `--spin D` alone meant.
    pub const fn fixed(spin_ns: u64) -> Precision {
        Precision {
            resolution_ns: 0,
            spin: Spin::Fixed(spin_ns),
        }
    }

    /// `--spin auto` with a resolution finer than any timer gives
    /// ([`FINE_RESOLUTION_NS`]): precision needs spinning. Decided by the setting, not
    /// by the measured lateness, so a noisy timer never flips the loop into spinning.
    pub fn fine(&self) -> bool {
        self.spin == Spin::Auto && self.resolution_ns < FINE_RESOLUTION_NS
    }

    /// How long to spin before the schedule's start instant.
    pub fn start_spin_ns(&self) -> u64 {
        match self.spin {
            Spin::Fixed(ns) => ns,
            Spin::Auto => SPIN_NS,
        }
    }
}

/// What the loop does until the next wake-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Sleep in the ring until this instant (a completion may end it sooner).
    Sleep(Nanos),
    /// Spin on the TSC (look again without entering the kernel).
    Spin,
}

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
    precision: Precision,
    /// How late the ring's timeouts end, ns: a running median of what was measured.
    late_ns: u64,
    /// How late the ring's timeouts end, ns: a running 99.5th percentile
    /// ([`late_tail`]), what a resolution window's wake-up is aimed by.
    late_tail_ns: u64,
    /// A worker's typical gap between due sends, ns ([`Pacer::sent`]): whether a
    /// resolution window would batch sends at all ([`aim`]). `u64::MAX` until measured.
    gap_ns: u64,
    /// The instant the current sleep was asked to end at.
    sleep_until: Nanos,
    /// Since when the loop has been idle, and whether asleep in the ring (else spinning).
    idle_since: Option<(Nanos, bool)>,
    /// Wall time asleep in the ring, ns.
    sleep_ns: u64,
    /// Sleeps in the ring so far.
    sleeps: u64,
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
    /// When `due_soon`: the instant the loop means to be awake by for the next send
    /// (its due instant, or where the resolution window's wake-up is aimed).
    pub target: Nanos,
}

impl Pacer {
    /// Starts the loop's clocks with today's fixed spin; CPU time counts from here.
    pub fn start(interval_ns: u64, timeout_ns: u64) -> Pacer {
        Pacer::with_precision(interval_ns, timeout_ns, Precision::fixed(0))
    }

    /// Starts the loop's clocks; CPU time counts from here.
    pub fn with_precision(interval_ns: u64, timeout_ns: u64, precision: Precision) -> Pacer {
        Pacer {
            interval_ns,
            next_interval: interval_ns,
            interval_idx: 0,
            scan_every: (timeout_ns / 100).clamp(1_000_000, 50_000_000),
            next_scan: 0,
            drain_deadline: u64::MAX,
            spin_ns: 0,
            precision,
            late_ns: TIMER_LATE_NS_INITIAL,
            late_tail_ns: TIMER_LATE_TAIL_NS_INITIAL,
            gap_ns: u64::MAX,
            sleep_until: 0,
            idle_since: None,
            sleep_ns: 0,
            sleeps: 0,
            cpu_start: thread_cpu_ns(),
            at_stop: None,
            usage_mark: Usage::default(),
            born: std::time::Instant::now(),
        }
    }

    /// Call first in every iteration: the previous iteration, if idle, was spinning
    /// or asleep; a sleep that ended at or after its instant measures the timer's
    /// lateness.
    #[inline]
    pub fn begin(&mut self, now: Nanos) {
        match self.idle_since.take() {
            Some((t, false)) => self.spin_ns += now.saturating_sub(t),
            Some((t, true)) => {
                self.sleep_ns += now.saturating_sub(t);
                if now >= self.sleep_until {
                    let late = now - self.sleep_until;
                    self.late_ns = late_average(self.late_ns, late);
                    self.late_tail_ns = late_tail(self.late_tail_ns, late);
                }
            }
            None => {}
        }
    }

    /// How late the ring's timeouts end, as measured so far (typically), ns.
    pub fn timer_late_ns(&self) -> u64 {
        self.late_ns
    }

    /// How late the ring's timeouts end at the 99.5th percentile, as measured so far,
    /// ns (a window's wake-up is aimed by this, at most half the resolution: [`aim`]).
    pub fn timer_late_p995_ns(&self) -> u64 {
        self.late_tail_ns
    }

    fn fine(&self) -> bool {
        self.precision.fine()
    }

    /// One dispatch sent `n` requests (or frames): the first was the one due at
    /// `first_due`, and the next one is now due at `next_due`, so the `n` sends covered
    /// `next_due - first_due` of the timetable. A running mean of that per send (an
    /// eighth of each measure) is the worker's gap between due sends, whatever the
    /// arrival process or rate shape; the first measure is taken whole.
    #[inline]
    pub fn sent(&mut self, first_due: Option<Nanos>, n: u64, next_due: Option<Nanos>) {
        if let (Some(from), Some(to), true) = (first_due, next_due, n > 0)
            && from > 0
            && to > from
        {
            let gap = (to - from) / n;
            self.gap_ns = if self.gap_ns == u64::MAX {
                gap
            } else {
                self.gap_ns - self.gap_ns / 8 + gap / 8
            };
        }
    }

    /// The worker's typical gap between due sends as measured so far, ns (`None`
    /// before the first dispatch).
    #[cfg(test)]
    pub fn gap_ns(&self) -> Option<u64> {
        (self.gap_ns != u64::MAX).then_some(self.gap_ns)
    }

    /// The iteration that started at `now` did nothing but look.
    #[inline]
    pub fn idle(&mut self, now: Nanos) {
        self.idle_since = Some((now, false));
    }

    /// The loop goes to sleep in the ring at `now` until `until` at the latest (a
    /// completion may wake it sooner).
    #[inline]
    pub fn sleep(&mut self, now: Nanos, until: Nanos) {
        self.idle_since = Some((now, true));
        self.sleep_until = until;
        self.sleeps += 1;
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
    /// the next scan (when `timers` are pending), or the wake-up aimed for the next
    /// send, due at `next_due` ([`aim`]).
    #[inline]
    pub fn wake(&self, stopping: bool, timers: bool, next_due: Option<Nanos>) -> Wake {
        let mut at = self.drain_deadline;
        if !stopping {
            at = at.min(self.next_interval);
        }
        if timers {
            at = at.min(self.next_scan);
        }
        let (mut due_soon, mut target) = (false, 0);
        if let Some(due) = next_due.filter(|_| !stopping) {
            let timer = Timer {
                late: self.late_ns,
                late_tail: self.late_tail_ns,
                gap: self.gap_ns,
            };
            let (from, awake_by) = aim(due, self.precision, timer);
            if from <= at {
                at = from;
                due_soon = true;
                target = awake_by;
            }
        }
        Wake {
            at,
            due_soon,
            target,
        }
    }

    /// Sleep or spin, from `now`, for `wake`. With `--spin auto` and a coarse
    /// resolution the loop spins only the last [`SLEEP_CPU_NS`] before a wake-up's
    /// target (cheaper than a sleep) and otherwise sleeps (the target was aimed early
    /// by the timer's lateness); else it sleeps until `wake.at` when that is more than
    /// a microsecond away.
    #[inline]
    pub fn step(&self, now: Nanos, wake: Wake) -> Step {
        if wake.due_soon && self.precision.spin == Spin::Auto && !self.fine() {
            // Woken by a timer aimed early (a low rate's lead): spin the rest.
            return if wake.target <= now + SLEEP_CPU_NS || now >= wake.at {
                Step::Spin
            } else {
                Step::Sleep(wake.at.max(now + 1_000))
            };
        }
        if wake.at > now + 1_000 {
            Step::Sleep(wake.at)
        } else {
            Step::Spin
        }
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

    /// Sleeps in the ring so far.
    pub fn sleeps(&self) -> u64 {
        self.sleeps
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

/// The timer's typical lateness updated with a new measure: a running median (a step
/// of a sixteenth up or down, at least 1 us), so the preemptions of a busy host, long
/// and rare, do not pull it the way they pull a mean.
fn late_average(est: u64, measured: u64) -> u64 {
    let step = (est / 16).max(1_000);
    match measured.cmp(&est) {
        std::cmp::Ordering::Greater => est.saturating_add(step).min(LATE_NS_MAX),
        std::cmp::Ordering::Less => est.saturating_sub(step),
        std::cmp::Ordering::Equal => est,
    }
}

/// The timer's lateness at about its 99.5th percentile, updated with a new measure: a
/// stochastic quantile estimate, an eighth up for a measure above it (at least 1 us)
/// and 1/200 of that down for one at or below it, so it settles where one measure in
/// about two hundred lies above. Never negative, at most [`LATE_NS_MAX`].
///
/// A window's first send has a dispatch lag over the resolution only when its wake-up
/// is later than this; aiming by the 99.5th rather than the 99th percentile keeps
/// those sends well under 1% (the lag's p99 within the resolution) for a slightly
/// shorter window.
pub fn late_tail(est: u64, measured: u64) -> u64 {
    let up = (est / 8).max(1_000);
    if measured > est {
        est.saturating_add(up).min(LATE_NS_MAX)
    } else {
        est.saturating_sub(up / 200)
    }
}

/// What [`aim`] knows of the timer and the timetable, ns: the timer's lateness,
/// typical and at the 99.5th percentile, and the worker's typical gap between due sends
/// (`u64::MAX`: not measured yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timer {
    pub late: u64,
    pub late_tail: u64,
    pub gap: u64,
}

/// Where to aim the wake-up for a send due at `due`: (when to stop sleeping, the
/// instant to be awake by).
///
/// With a resolution `R`, a wake-up may land as late as `due + R` and send everything
/// due by then: at rates where sends are due closer together than `R` (the worker's
/// measured gap below `R`), one wake-up sends a window's worth, and the timer is aimed
/// at `due + R` less the lateness's 99.5th percentile, at most `R/2` (so the dispatch
/// lag stays within `R`, and a noisy timer shortens the window, never empties it).
/// Where the gap is `R` or longer (or not yet measured) a window would hold one send
/// and delay it for nothing: the wake-up is aimed at the due instant itself, and the
/// dispatch lag is the timer's own lateness. Without a resolution, at the due instant.
/// Then the lead: the fixed spin, or with `--spin auto` twice the typical lateness when
/// the resolution is finer than a timer gives (spun), the lateness's 99.5th percentile
/// (at most a quarter of the gap) at low rates ([`LOW_RATE_GAP_NS`]: the timer's tail
/// would be the lag p99, and the spin is cheap there), else nothing. Sends never go out
/// before they are due: whenever the loop wakes, it sends only what is due by then.
/// `due == 0` is "at once" (`--rate max`).
pub fn aim(due: Nanos, precision: Precision, timer: Timer) -> (Nanos, Nanos) {
    if due == 0 {
        return (0, 0);
    }
    let r = precision.resolution_ns;
    let target = if r == 0 || timer.gap >= r {
        due
    } else {
        due.saturating_add(r - timer.late_tail.min(r / 2))
    };
    let lead = match precision.spin {
        Spin::Fixed(ns) => ns,
        Spin::Auto if precision.fine() => (2 * timer.late).min(SPIN_NS),
        Spin::Auto if timer.gap >= LOW_RATE_GAP_NS && timer.gap != u64::MAX => {
            timer.late_tail.min(timer.gap / 4).min(SPIN_NS)
        }
        Spin::Auto => 0,
    };
    (target.saturating_sub(lead), target)
}

/// Largest timer lateness `--spin auto` assumes (aiming a timer earlier than this
/// only adds wake-ups).
const LATE_NS_MAX: u64 = 1_000_000;

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
        let fixed = Precision::fixed(2_000_000);
        let mut p = Pacer::with_precision(1_000_000_000, 5_000_000_000, fixed);
        // Running, no timers, a send due at 10 ms with a 2 ms spin: wake at 8 ms.
        let w = p.wake(false, false, Some(10_000_000));
        assert_eq!((w.at, w.due_soon, w.target), (8_000_000, true, 10_000_000));
        assert_eq!(p.step(7_000_000, w), Step::Sleep(8_000_000));
        assert_eq!(p.step(8_000_000, w), Step::Spin);
        // Nothing due: the interval boundary.
        let w = p.wake(false, false, None);
        assert_eq!((w.at, w.due_soon), (1_000_000_000, false));
        // Stopping: only the drain deadline (and timers) count.
        p.stop(0, 300);
        let w = p.wake(true, false, Some(5));
        assert_eq!((w.at, w.due_soon), (300, false));
        assert!(p.drain_over(300) && !p.drain_over(299));
    }

    fn auto(resolution_ns: u64) -> Pacer {
        let precision = Precision {
            resolution_ns,
            spin: Spin::Auto,
        };
        Pacer::with_precision(1_000_000_000, 5_000_000_000, precision)
    }

    #[test]
    fn auto_sleeps_to_a_timer_aimed_early_and_spins_only_what_a_sleep_costs() {
        let mut p = auto(500_000);
        p.sent(Some(1_000_000), 10, Some(1_500_000)); // 50 us apart: windows batch
        let late = p.timer_late_p995_ns();
        // A send due at 10 ms: the wake-up is aimed to land by the window's end, 10.5
        // ms, so the timer is aimed the lateness's 99.5th percentile before that.
        let w = p.wake(false, false, Some(10_000_000));
        assert_eq!((w.at, w.target), (10_500_000 - late, 10_500_000 - late));
        assert_eq!(p.step(1_000_000, w), Step::Sleep(w.at));
        // Woken early, 30 us before: sleeping again is cheaper than spinning 30 us.
        assert_eq!(p.step(w.at - 30_000, w), Step::Sleep(w.at));
        // Within what a sleep costs: spin.
        assert_eq!(p.step(w.at - SLEEP_CPU_NS, w), Step::Spin);
    }

    #[test]
    fn a_window_is_aimed_from_its_first_due_instant() {
        let precision = |resolution_ns, spin| Precision {
            resolution_ns,
            spin,
        };
        let coarse = precision(1_000_000, Spin::Auto);
        // Sends due 50 us apart: a 1 ms window batches them.
        let t = |late, late_tail| Timer {
            late,
            late_tail,
            gap: 50_000,
        };
        // Due at 10 ms, timer 80 us late at p99.5: aimed at 10.92 ms, no spin.
        assert_eq!(
            aim(10_000_000, coarse, t(60_000, 80_000)),
            (10_920_000, 10_920_000)
        );
        // The aim is early by at most half the resolution: a timer 3 ms late at p99.5 still
        // leaves half a window, never aims before the due instant.
        assert_eq!(aim(10_000_000, coarse, t(60_000, 3_000_000)).1, 10_500_000);
        // A resolution of 0 is one wake-up per due send, at its instant; `--spin auto`
        // spins twice the typical lateness before it.
        assert_eq!(
            aim(10_000_000, precision(0, Spin::Auto), t(60_000, 80_000)),
            (9_880_000, 10_000_000)
        );
        // A fixed spin leads the aim by the spin; `--spin 0` sleeps to it.
        let fixed = |ns| precision(1_000_000, Spin::Fixed(ns));
        assert_eq!(aim(10_000_000, fixed(2_000_000), t(0, 80_000)).0, 8_920_000);
        assert_eq!(aim(10_000_000, fixed(0), t(0, 80_000)).0, 10_920_000);
        // `--rate max`: at once.
        assert_eq!(aim(0, coarse, t(60_000, 80_000)), (0, 0));
    }

    /// Sends due a window or more apart gain nothing from a window: each wake-up is
    /// aimed at its send's own instant, so the generator adds no delay of its own to
    /// a low-rate run (the default's ~350 us at 2,000/s in issue 33).
    #[test]
    fn a_window_that_would_hold_one_send_is_not_waited_for() {
        let coarse = Precision {
            resolution_ns: 100_000,
            spin: Spin::Auto,
        };
        let t = |gap| Timer {
            late: 60_000,
            late_tail: 80_000,
            gap,
        };
        // 2,000/s (500 us apart), 10,000/s (exactly the window), not measured yet: at
        // the due instant.
        for gap in [500_000, 100_000, u64::MAX] {
            assert_eq!(aim(10_000_000, coarse, t(gap)), (10_000_000, 10_000_000));
        }
        // 20,000/s: the window's worth, aimed at 10 ms + 100 us - 50 us.
        assert_eq!(aim(10_000_000, coarse, t(50_000)).1, 10_050_000);
    }

    /// At 1,000/s and less the timer is aimed early by its lateness p99.5 (at most a
    /// quarter of the gap) and the rest is spun, so its tail is not the lag p99.
    #[test]
    fn a_low_rate_is_aimed_early_by_the_timers_tail_and_spun() {
        let auto = Precision {
            resolution_ns: 100_000,
            spin: Spin::Auto,
        };
        let t = |late_tail, gap| Timer {
            late: 60_000,
            late_tail,
            gap,
        };
        // 100/s, tail 300 us: the timer at 10 ms - 300 us, awake by 10 ms.
        assert_eq!(
            aim(10_000_000, auto, t(300_000, 10_000_000)),
            (9_700_000, 10_000_000)
        );
        // 1,000/s with a 400 us tail: at most a quarter of the 1 ms gap.
        assert_eq!(aim(10_000_000, auto, t(400_000, 1_000_000)).0, 9_750_000);
        // 2,000/s, or not measured yet: no lead.
        assert_eq!(aim(10_000_000, auto, t(300_000, 500_000)).0, 10_000_000);
        assert_eq!(aim(10_000_000, auto, t(300_000, u64::MAX)).0, 10_000_000);
        // The loop sleeps to the early timer, then spins from it to the due instant.
        let mut p = Pacer::with_precision(1_000_000_000, 5_000_000_000, auto);
        p.sent(Some(1_000_000), 1, Some(11_000_000));
        let w = p.wake(false, false, Some(20_000_000));
        assert!(w.at < w.target && w.target == 20_000_000, "{w:?}");
        assert_eq!(p.step(w.at - 100_000, w), Step::Sleep(w.at));
        assert_eq!(p.step(w.at + 20_000, w), Step::Spin);
    }

    #[test]
    fn the_gap_between_due_sends_is_learnt_from_what_each_dispatch_sent() {
        let mut p = auto(100_000);
        assert_eq!(p.gap_ns(), None);
        // Nothing sent, nothing next, or `--rate max` (due 0): no measure.
        p.sent(Some(1_000), 0, Some(2_000));
        p.sent(Some(1_000), 3, None);
        p.sent(Some(0), 3, Some(2_000));
        assert_eq!(p.gap_ns(), None);
        // Four sends covered 200 us: 50 us apart, taken whole the first time.
        p.sent(Some(1_000_000), 4, Some(1_200_000));
        assert_eq!(p.gap_ns(), Some(50_000));
        // Then a running mean: an eighth of each measure.
        p.sent(Some(2_000_000), 1, Some(2_450_000));
        assert_eq!(p.gap_ns(), Some(50_000 - 6_250 + 56_250));
        for k in 0..100 {
            let from = 3_000_000 + k * 500_000;
            p.sent(Some(from), 1, Some(from + 500_000));
        }
        assert!(
            (499_000..=500_000).contains(&p.gap_ns().unwrap()),
            "{:?}",
            p.gap_ns()
        );
    }

    #[test]
    fn a_resolution_finer_than_the_timer_spins_twice_its_lateness() {
        let mut p = auto(10_000);
        p.sent(Some(1_000_000), 100, Some(1_500_000)); // 5 us apart: windows batch
        let late = p.timer_late_ns();
        const { assert!(10_000 < FINE_RESOLUTION_NS) };
        let w = p.wake(false, false, Some(10_000_000));
        // Aimed half the window in (its p99.5 exceeds half), spun from twice
        // the typical lateness before.
        assert_eq!((w.at, w.target), (10_005_000 - 2 * late, 10_005_000));
        assert_eq!(p.step(w.at, w), Step::Spin);
        assert_eq!(p.step(w.at - 5_000, w), Step::Sleep(w.at));
    }

    /// A timer later than the resolution (a busy host) never flips `--spin auto` into
    /// spinning before each send: whether to spin is the setting's, not the measure's.
    #[test]
    fn a_late_timer_does_not_turn_auto_into_spinning() {
        let mut p = auto(500_000);
        p.sent(Some(1_000_000), 10, Some(1_500_000)); // 50 us apart: windows batch
        for i in 0..200 {
            let t = i * 2_000_000;
            p.sleep(t, t + 500_000);
            p.begin(t + 500_000 + 800_000); // 800 us late
        }
        assert!(
            p.timer_late_p995_ns() > 500_000,
            "{}",
            p.timer_late_p995_ns()
        );
        let w = p.wake(false, false, Some(100_000_000));
        assert_eq!((w.at, w.due_soon), (100_000_000 + 250_000, true));
        // 100 us before the aim: sleep (late), do not spin 100 us.
        assert_eq!(p.step(w.at - 100_000, w), Step::Sleep(w.at));
    }

    /// A tiny deterministic generator for the tests below (xorshift), in (0, 1].
    struct Rng(u64);

    impl Rng {
        fn unit(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            ((self.0 >> 11) + 1) as f64 / (1u64 << 53) as f64
        }

        /// A timer's lateness like this VM's: 40-80 us, 1 in 100 at 150-250 us.
        fn lateness(&mut self) -> u64 {
            let base = 40_000 + (self.unit() * 40_000.0) as u64;
            if self.unit() < 0.01 {
                base + 110_000 + (self.unit() * 60_000.0) as u64
            } else {
                base
            }
        }
    }

    #[test]
    fn the_lateness_tail_settles_near_the_99_5th_percentile() {
        let mut rng = Rng(42);
        let mut est = TIMER_LATE_NS_INITIAL;
        let mut seen = Vec::new();
        for _ in 0..20_000 {
            let late = rng.lateness();
            est = late_tail(est, late);
            seen.push(late);
        }
        seen.sort_unstable();
        let q = |f: f64| seen[(f * seen.len() as f64) as usize];
        assert!(est >= q(0.99) && est <= q(0.999), "{est}: p99 {}", q(0.99));
        // Bounded: never negative, never past LATE_NS_MAX.
        assert_eq!(late_tail(0, 0), 0);
        assert_eq!(late_tail(LATE_NS_MAX, u64::MAX), LATE_NS_MAX);
        assert_eq!(late_tail(0, 5), 1_000);
    }

    /// What the loop does, on a model of the ring: Poisson arrivals at `rate` per
    /// second for 2 s, wake-ups late as `Rng::lateness`, each wake-up sending what is
    /// due. Returns (dispatch lags sorted, timer wake-ups).
    fn simulate(resolution_ns: u64, rate: f64) -> (Vec<u64>, u64) {
        let mut p = auto(resolution_ns);
        let mut rng = Rng(7);
        let mut due = 1_000_000u64;
        let (mut now, mut lags, mut wakes) = (0u64, Vec::new(), 0);
        while now < 2_000_000_000 {
            p.begin(now);
            while p.interval_ended(now).is_some() {}
            let (first, mut n) = (due, 0);
            while due <= now {
                lags.push(now - due);
                due += (-rng.unit().ln() * 1e9 / rate) as u64 + 1;
                n += 1;
            }
            p.sent(Some(first), n, Some(due));
            let w = p.wake(false, false, Some(due));
            match p.step(now, w) {
                Step::Sleep(until) => {
                    p.sleep(now, until);
                    now = until.max(now + 1_000) + rng.lateness();
                    wakes += 1;
                }
                Step::Spin => {
                    p.idle(now);
                    now += 100;
                }
            }
        }
        lags.sort_unstable();
        (lags, wakes)
    }

    #[test]
    fn the_dispatch_lag_p99_stays_within_the_resolution() {
        for (resolution_ns, rate) in [(500_000, 2_000.0), (1_000_000, 2_000.0)]
            .into_iter()
            .chain([(500_000, 20_000.0), (1_000_000, 20_000.0)])
        {
            let (lags, wakes) = simulate(resolution_ns, rate);
            let p99 = lags[lags.len() * 99 / 100];
            assert!(
                p99 <= resolution_ns,
                "{rate}/s at {resolution_ns}: p99 {p99}"
            );
            // One wake-up sends a window's worth: at most one per half window.
            assert!(
                wakes * resolution_ns / 2 <= 2_000_000_000,
                "{rate}/s at {resolution_ns}: {wakes} wake-ups"
            );
        }
        // At 20,000/s a 1 ms window sends about 20 at a time.
        let (lags, wakes) = simulate(1_000_000, 20_000.0);
        assert!(lags.len() as u64 >= 15 * wakes, "{} in {wakes}", lags.len());
    }

    #[test]
    fn the_timer_lateness_is_measured_from_sleeps_that_ran_out() {
        let mut p = auto(500_000);
        let before = p.timer_late_ns();
        for i in 0..64 {
            let t = i * 1_000_000;
            p.sleep(t, t + 500_000);
            p.begin(t + 500_000 + 200_000); // 200 us late
        }
        assert!(p.timer_late_ns() > before && p.timer_late_ns() <= 200_000);
        assert!(p.timer_late_ns() > 180_000, "{}", p.timer_late_ns());
        // A few long preemptions among typical measures do not move it far.
        for i in 0..64 {
            let t = 1_000_000_000 + i * 1_000_000;
            p.sleep(t, t + 500_000);
            let late = if i % 8 == 0 { 5_000_000 } else { 200_000 };
            p.begin(t + 500_000 + late);
        }
        assert!(p.timer_late_ns() < 260_000, "{}", p.timer_late_ns());
        // Woken by a completion before the instant: no measure.
        let now = p.timer_late_ns();
        p.sleep(100_000_000, 101_000_000);
        p.begin(100_500_000);
        assert_eq!(p.timer_late_ns(), now);
        // A preemption of seconds moves it one step, never past a millisecond.
        assert_eq!(late_average(100_000, 5_000_000_000), 106_250);
        assert_eq!(late_average(LATE_NS_MAX, 5_000_000_000), LATE_NS_MAX);
    }
}
