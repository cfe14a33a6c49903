//! Injected stalls: every sink thread freezes for `S` once every `P`.
//!
//! All threads share one origin `t0`, the instant the first request byte reached any
//! thread (stored as nanoseconds since the sink's start `Instant`, 0 meaning "not
//! yet"). The freeze windows are `[t0 + P/2 + k·P, t0 + P/2 + k·P + S)` for k = 0, 1,
//! …, so every thread computes the same windows without talking to the others, and
//! the first freeze comes half a period into the load, after it has settled.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where an instant falls relative to the freeze windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No request byte has arrived yet: no window is scheduled.
    Unarmed,
    /// Serving; the next window starts at this instant (ns since the epoch).
    Serving { next_freeze_ns: u64 },
    /// Inside a window that ends at this instant (ns since the epoch).
    Frozen { until_ns: u64 },
}

/// The pure window arithmetic: where `now_ns` falls given origin `t0_ns`, freeze
/// length `freeze_ns` and period `period_ns` (`freeze_ns < period_ns`).
pub(crate) fn phase_at(t0_ns: u64, now_ns: u64, freeze_ns: u64, period_ns: u64) -> Phase {
    let first = t0_ns.saturating_add(period_ns / 2);
    if now_ns < first {
        return Phase::Serving {
            next_freeze_ns: first,
        };
    }
    let k = (now_ns - first) / period_ns;
    let start = first + k * period_ns;
    let end = start + freeze_ns;
    if now_ns < end {
        Phase::Frozen { until_ns: end }
    } else {
        Phase::Serving {
            next_freeze_ns: start + period_ns,
        }
    }
}

/// The stall schedule shared by all threads of one sink.
#[derive(Debug, Clone)]
pub(crate) struct Stall {
    epoch: Instant,
    freeze_ns: u64,
    period_ns: u64,
    /// First request byte, ns since `epoch` (at least 1); 0 = none yet.
    t0_ns: Arc<AtomicU64>,
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Stall {
    /// `freeze < period` and `period > 0` are checked by the caller (config validation).
    pub(crate) fn new(epoch: Instant, freeze: Duration, period: Duration) -> Stall {
        Stall {
            epoch,
            freeze_ns: duration_ns(freeze),
            period_ns: duration_ns(period).max(1),
            t0_ns: Arc::new(AtomicU64::new(0)),
        }
    }

    pub(crate) fn now_ns(&self) -> u64 {
        duration_ns(self.epoch.elapsed())
    }

    pub(crate) fn instant_at(&self, ns: u64) -> Instant {
        self.epoch + Duration::from_nanos(ns)
    }

    /// Records the first request byte; later calls (from any thread) change nothing.
    pub(crate) fn mark_first_byte(&self) {
        let now = self.now_ns().max(1);
        // A failed exchange means another thread got there first, which is the point.
        let _ = self
            .t0_ns
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    pub(crate) fn phase(&self, now_ns: u64) -> Phase {
        match self.t0_ns.load(Ordering::Relaxed) {
            0 => Phase::Unarmed,
            t0 => phase_at(t0, now_ns, self.freeze_ns, self.period_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn windows_start_half_a_period_after_t0_and_repeat() {
        let (s, p, t0) = (300 * MS, 1000 * MS, 5000 * MS);
        assert_eq!(
            phase_at(t0, t0, s, p),
            Phase::Serving {
                next_freeze_ns: t0 + 500 * MS
            }
        );
        assert_eq!(
            phase_at(t0, t0 + 500 * MS, s, p),
            Phase::Frozen {
                until_ns: t0 + 800 * MS
            }
        );
        assert_eq!(
            phase_at(t0, t0 + 799 * MS, s, p),
            Phase::Frozen {
                until_ns: t0 + 800 * MS
            }
        );
        assert_eq!(
            phase_at(t0, t0 + 800 * MS, s, p),
            Phase::Serving {
                next_freeze_ns: t0 + 1500 * MS
            }
        );
        assert_eq!(
            phase_at(t0, t0 + 1600 * MS, s, p),
            Phase::Frozen {
                until_ns: t0 + 1800 * MS
            }
        );
    }

    #[test]
    fn first_byte_is_recorded_once() {
        let stall = Stall::new(
            Instant::now(),
            Duration::from_millis(1),
            Duration::from_secs(1),
        );
        assert_eq!(stall.phase(0), Phase::Unarmed);
        stall.mark_first_byte();
        let t0 = stall.t0_ns.load(Ordering::Relaxed);
        assert!(t0 >= 1);
        std::thread::sleep(Duration::from_millis(2));
        stall.mark_first_byte();
        assert_eq!(stall.t0_ns.load(Ordering::Relaxed), t0);
    }
}
