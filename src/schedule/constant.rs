//! Constant (evenly paced) arrivals. [`Constant`]: a flat rate, global request g is due
//! at g / rate. [`Paced`]: any [`RateShape`], global request n is due at `Λ⁻¹(n)`, the
//! instant by which the shape's integral reaches n — for a flat shape the same timetable.

use super::{RateShape, Schedule, first_at_or_after, to_nanos};
use crate::clock::Nanos;
use std::cell::Cell;

/// A constant-rate timetable sharded over `workers`, seen by worker `index`.
#[derive(Debug, Clone, Copy)]
pub struct Constant {
    period_ns: f64,
    workers: u64,
    index: u64,
}

impl Constant {
    /// `rate_rps` must be positive and finite (the plan checks it).
    pub fn new(rate_rps: f64, workers: usize, index: usize) -> Self {
        assert!(rate_rps > 0.0 && rate_rps.is_finite());
        assert!(index < workers);
        Constant {
            period_ns: 1e9 / rate_rps,
            workers: workers as u64,
            index: index as u64,
        }
    }

    /// Number of this worker's requests due strictly before `end_ns`.
    pub fn count_before(&self, end_ns: Nanos) -> u64 {
        // Smallest k with due_ns(k) >= end_ns, found from the inverse then corrected for
        // floating-point rounding so that it agrees exactly with due_ns.
        let global = (end_ns as f64 / self.period_ns).ceil() as u64;
        let mut k = global.saturating_sub(self.index).div_ceil(self.workers);
        while k > 0 && self.due_ns(k - 1) >= end_ns {
            k -= 1;
        }
        while self.due_ns(k) < end_ns {
            k += 1;
        }
        k
    }
}

impl Schedule for Constant {
    #[inline]
    fn due_ns(&self, k: u64) -> Nanos {
        (self.global_seq(k) as f64 * self.period_ns).round() as Nanos
    }

    #[inline]
    fn global_seq(&self, k: u64) -> u64 {
        // Saturating: k near u64::MAX (never reached in a run) must not panic.
        k.saturating_mul(self.workers).saturating_add(self.index)
    }
}

/// Evenly paced arrivals following a [`RateShape`], sharded over `workers` as one
/// interleaved global sequence (worker w takes n = w, w + W, w + 2W, ...).
///
/// `due_ns` keeps the piece of its last answer in a `Cell`, so a worker walking k
/// upwards pays O(1) per request and never allocates; any k is still answered exactly.
#[derive(Debug, Clone)]
pub struct Paced {
    shape: RateShape,
    workers: u64,
    index: u64,
    piece: Cell<usize>,
}

impl Paced {
    /// Worker `index` of `workers` (clamped into range: `workers >= 1`,
    /// `index < workers`).
    pub fn new(shape: RateShape, workers: usize, index: usize) -> Self {
        let workers = workers.max(1) as u64;
        Paced {
            shape,
            workers,
            index: (index as u64).min(workers - 1),
            piece: Cell::new(0),
        }
    }

    /// The shape this timetable follows.
    pub fn shape(&self) -> &RateShape {
        &self.shape
    }

    /// Number of this worker's requests due strictly before `end_ns` (a shape whose
    /// rate falls to 0 may have fewer than that forever: those never come due).
    pub fn count_before(&self, end_ns: Nanos) -> u64 {
        // Estimate from Λ, then let the due times themselves decide, so the count
        // agrees exactly with due_ns whatever the rounding.
        let global = self.shape.cumulative(end_ns as f64).ceil();
        let guess = if global.is_finite() && global < u64::MAX as f64 {
            (global as u64)
                .saturating_sub(self.index)
                .div_ceil(self.workers)
        } else {
            0
        };
        first_at_or_after(|k| self.due_ns(k), end_ns, guess)
    }
}

impl Schedule for Paced {
    #[inline]
    fn due_ns(&self, k: u64) -> Nanos {
        let mut piece = self.piece.get();
        let t = self
            .shape
            .inverse_from(self.global_seq(k) as f64, &mut piece);
        self.piece.set(piece);
        to_nanos(t)
    }

    #[inline]
    fn global_seq(&self, k: u64) -> u64 {
        k.saturating_mul(self.workers).saturating_add(self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_worker_is_evenly_spaced() {
        let s = Constant::new(20_000.0, 1, 0);
        assert_eq!(s.due_ns(0), 0);
        assert_eq!(s.due_ns(1), 50_000);
        assert_eq!(s.due_ns(20_000), 1_000_000_000);
    }

    #[test]
    fn workers_interleave_one_global_sequence() {
        // 3 workers at 3000 rps: the union of their timetables is one request every
        // 333.3 us, never two at once, never clumped on a 1 ms scale.
        let shards: Vec<_> = (0..3).map(|w| Constant::new(3000.0, 3, w)).collect();
        let mut all: Vec<u64> = shards
            .iter()
            .flat_map(|s| (0..1000).map(move |k| s.due_ns(k)))
            .collect();
        all.sort_unstable();
        for pair in all.windows(2) {
            let gap = pair[1] - pair[0];
            assert!((333_332..=333_334).contains(&gap), "gap {gap}");
        }
        // Each millisecond holds exactly 3 arrivals.
        for ms in 0..900u64 {
            let n = all
                .iter()
                .filter(|&&t| t >= ms * 1_000_000 && t < (ms + 1) * 1_000_000)
                .count();
            assert_eq!(n, 3, "ms {ms}");
        }
    }

    #[test]
    fn count_before_matches_due_times() {
        for (rate, workers) in [(1000.0, 1), (20_000.0, 2), (333.0, 3), (1e6, 7)] {
            for w in 0..workers {
                let s = Constant::new(rate, workers, w);
                for end in [0u64, 1, 999_999, 1_000_000, 5_000_000_001, 10_000_000_000] {
                    let k = s.count_before(end);
                    assert!(k == 0 || s.due_ns(k - 1) < end);
                    assert!(s.due_ns(k) >= end);
                }
            }
        }
    }

    #[test]
    fn sharded_total_equals_rate_times_duration() {
        let workers = 4;
        let total: u64 = (0..workers)
            .map(|w| Constant::new(50_000.0, workers, w).count_before(5_000_000_000))
            .sum();
        assert_eq!(total, 250_000);
    }

    #[test]
    fn long_runs_keep_ns_precision() {
        // A day at 1M rps: f64 still resolves the due instant to well under 1 ns drift
        // per request, so the timetable never wanders.
        let s = Constant::new(1e6, 1, 0);
        assert_eq!(s.due_ns(86_400_000_000), 86_400_000_000_000);
    }
}

#[cfg(test)]
mod paced_tests {
    use super::*;

    #[test]
    fn flat_shape_matches_constant() {
        for (rate, workers) in [(1000.0, 1), (20_000.0, 2), (333.0, 3), (1e6, 7)] {
            let shape = RateShape::constant(rate).unwrap();
            for w in 0..workers {
                let c = Constant::new(rate, workers, w);
                let p = Paced::new(shape.clone(), workers, w);
                for k in (0..5000).chain([1_000_000, 86_400_000]) {
                    let (a, b) = (c.due_ns(k), p.due_ns(k));
                    assert!(a.abs_diff(b) <= 1, "k {k}: {a} vs {b}");
                    assert_eq!(c.global_seq(k), p.global_seq(k));
                }
                for end in [0u64, 1, 999_999, 5_000_000_001, 10_000_000_000] {
                    let k = p.count_before(end);
                    assert!(k == 0 || p.due_ns(k - 1) < end);
                    assert!(p.due_ns(k) >= end);
                }
            }
        }
    }

    #[test]
    fn rate_falling_to_zero_ends_the_timetable() {
        // ramp 1000 -> 0 over 2 s: Λ ends at 1000, so requests 0..=1000 (request n is
        // due when Λ reaches n; the last exactly at 2 s) and the rest never come due.
        let shape = super::super::shape_of("ramp:1000..0/2s", 10_000_000_000);
        let p = Paced::new(shape, 1, 0);
        assert_eq!(p.count_before(10_000_000_000), 1001);
        assert_eq!(p.due_ns(1000), 2_000_000_000);
        assert_eq!(p.due_ns(1001), Nanos::MAX);
        assert_eq!(p.count_before(Nanos::MAX), 1001);
    }

    #[test]
    fn cursor_is_an_optimisation_only() {
        let shape = super::super::shape_of("step:100..1000+100/1s", 20_000_000_000);
        let p = Paced::new(shape.clone(), 2, 1);
        let forward: Vec<Nanos> = (0..3000).map(|k| p.due_ns(k)).collect();
        assert!(forward.windows(2).all(|w| w[0] <= w[1]));
        for k in [2999, 0, 1500, 7, 2000] {
            assert_eq!(p.due_ns(k), forward[k as usize]);
            assert_eq!(
                Paced::new(shape.clone(), 2, 1).due_ns(k),
                forward[k as usize]
            );
        }
    }
}
