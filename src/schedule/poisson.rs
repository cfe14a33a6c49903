//! Poisson arrivals on any rate shape, as a time-changed unit Poisson process.
//!
//! A unit-rate Poisson process has arrivals at `S_k = E_1 + ... + E_k` with
//! `E_i ~ Exp(1)` independent. Mapping its time through `Λ⁻¹` (`Λ(t) = ∫0^t rate`)
//! gives a Poisson process whose intensity at t is `rate(t)`: constant shapes give a
//! homogeneous process, `burst` a Markov-modulated one, a ramp an inhomogeneous one —
//! one mechanism, no per-shape sampling.
//!
//! Sharding: W independent Poisson processes at `rate/W` add up to one at `rate`
//! (superposition), so worker w runs its own unit process on `Λ/W`: its k-th request is
//! due at `Λ⁻¹(W · S_(k+1))`, drawn from its own stream (a seed derived from the run's
//! seed and w). Unlike constant arrivals there is no global interleaving; the
//! `global_seq` `k·W + w` is a unique identifier, not the rank of the arrival.
//!
//! Machine shards (`--shard i/N`, see `shard`): the worker still walks its whole
//! stream, drawing every exponential, but keeps only the arrivals at positions
//! `j·N + i`; its `due_ns(j)` and `global_seq(j)` are those of that arrival, so N shards
//! together are exactly the unsharded run's arrivals.
//!
//! The worker asks for `due_ns(k)` with k rising one at a time; the process keeps a
//! cursor (k, S, generator state, piece of `Λ`) in a `Cell`, so each next request is
//! one exponential draw and an O(1) inverse, and nothing allocates. Asking for an
//! earlier k replays the stream from the start: correct, only slower.

use super::{RateShape, Schedule, Shard, to_nanos, worker_seed};
use crate::clock::Nanos;
use std::cell::Cell;

/// Where the process stands: the stream's arrival `k` is due at `due`,
/// `sum` = `S_(k+1)`.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    k: u64,
    sum: f64,
    rng: u64,
    piece: usize,
    due: Nanos,
}

/// One worker's share of Poisson arrivals following a [`RateShape`].
#[derive(Debug, Clone)]
pub struct Poisson {
    shape: RateShape,
    workers: u64,
    index: u64,
    seed: u64,
    shard: Shard,
    cursor: Cell<Cursor>,
}

impl Poisson {
    /// Worker `index` of `workers` (clamped into range: `workers >= 1`,
    /// `index < workers`), drawing from a stream derived from the run's `seed`.
    pub fn new(shape: RateShape, workers: usize, index: usize, seed: u64) -> Self {
        Self::sharded(shape, workers, index, seed, Shard::WHOLE)
    }

    /// As [`Poisson::new`], keeping only `shard`'s share of the worker's stream.
    pub fn sharded(
        shape: RateShape,
        workers: usize,
        index: usize,
        seed: u64,
        shard: Shard,
    ) -> Self {
        let workers = workers.max(1) as u64;
        let index = (index as u64).min(workers - 1);
        let seed = worker_seed(seed, index);
        let p = Poisson {
            shape,
            workers,
            index,
            seed,
            shard,
            cursor: Cell::new(Cursor {
                k: 0,
                sum: 0.0,
                rng: seed,
                piece: 0,
                due: 0,
            }),
        };
        p.cursor.set(p.start());
        p
    }

    /// This worker's derived seed (for the report).
    pub fn worker_seed(&self) -> u64 {
        self.seed
    }

    /// The shape this process follows.
    pub fn shape(&self) -> &RateShape {
        &self.shape
    }

    /// The cursor at request 0.
    fn start(&self) -> Cursor {
        let mut c = Cursor {
            k: 0,
            sum: 0.0,
            rng: self.seed,
            piece: 0,
            due: 0,
        };
        c.sum = exp1(&mut c.rng);
        c.due = self.due_of(&mut c);
        c
    }

    #[inline]
    fn due_of(&self, c: &mut Cursor) -> Nanos {
        to_nanos(
            self.shape
                .inverse_from(c.sum * self.workers as f64, &mut c.piece),
        )
    }
}

impl Schedule for Poisson {
    #[inline]
    fn due_ns(&self, j: u64) -> Nanos {
        let k = self.shard.lane_position(j);
        let mut c = self.cursor.get();
        if k == c.k {
            return c.due;
        }
        if k < c.k {
            c = self.start();
        }
        while c.k < k {
            c.sum += exp1(&mut c.rng);
            c.k += 1;
        }
        c.due = self.due_of(&mut c);
        self.cursor.set(c);
        c.due
    }

    #[inline]
    fn global_seq(&self, j: u64) -> u64 {
        self.shard
            .lane_position(j)
            .saturating_mul(self.workers)
            .saturating_add(self.index)
    }
}

/// One Exp(1) draw from the fastrand (wyrand) stream whose state is `*state`:
/// `-ln(1 - U)` with U uniform in [0, 1), so the result is finite and >= 0.
#[inline]
pub fn exp1(state: &mut u64) -> f64 {
    let mut rng = fastrand::Rng::with_seed(*state);
    let u = rng.f64();
    *state = rng.get_seed();
    -(-u).ln_1p()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kolmogorov-Smirnov statistic of `sample` against Exp(mean): the largest gap
    /// between the empirical and the exponential distribution function.
    fn ks_exponential(sample: &mut [f64], mean: f64) -> f64 {
        sample.sort_by(f64::total_cmp);
        let n = sample.len() as f64;
        let mut d: f64 = 0.0;
        for (i, &x) in sample.iter().enumerate() {
            let f = 1.0 - (-x / mean).exp();
            d = d.max((i as f64 + 1.0) / n - f).max(f - i as f64 / n);
        }
        d
    }

    /// Mean, coefficient of variation and KS statistic of the gaps between `times`.
    fn gap_stats(times: &[Nanos], mean_expected_ns: f64) -> (f64, f64, f64, f64) {
        let mut gaps: Vec<f64> = times.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
        let n = gaps.len() as f64;
        let mean = gaps.iter().sum::<f64>() / n;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let cv = var.sqrt() / mean;
        let d = ks_exponential(&mut gaps, mean_expected_ns);
        (mean, cv, d, 1.63 / n.sqrt())
    }

    fn check_poisson(times: &[Nanos], rate: f64) {
        let expected = 1e9 / rate;
        let (mean, cv, d, critical) = gap_stats(times, expected);
        assert!(
            (mean / expected - 1.0).abs() < 0.02,
            "mean gap {mean} ns, expected {expected}"
        );
        assert!((cv - 1.0).abs() < 0.05, "coefficient of variation {cv}");
        assert!(
            d < critical,
            "KS statistic {d} >= {critical}: not exponential"
        );
    }

    #[test]
    fn one_worker_gaps_are_exponential() {
        // 50,000 scheduled sends at 20,000/s (mean gap 50 us).
        let rate = 20_000.0;
        let p = Poisson::new(RateShape::constant(rate).unwrap(), 1, 0, 42);
        let times: Vec<Nanos> = (0..50_001).map(|k| p.due_ns(k)).collect();
        check_poisson(&times, rate);
    }

    #[test]
    fn sharded_workers_add_up_to_one_poisson_process() {
        // 4 workers at rate/4 each, own streams: the merged arrivals are Poisson at rate.
        let rate = 40_000.0;
        let shape = RateShape::constant(rate).unwrap();
        let mut times: Vec<Nanos> = (0..4)
            .flat_map(|w| {
                let p = Poisson::new(shape.clone(), 4, w, 7);
                (0..12_500).map(move |k| p.due_ns(k))
            })
            .collect();
        times.sort_unstable();
        // The workers' last arrivals differ; keep the span all of them cover.
        let end = (0..4)
            .map(|w| Poisson::new(shape.clone(), 4, w, 7).due_ns(12_499))
            .min()
            .unwrap();
        times.retain(|&t| t <= end);
        assert!(times.len() > 45_000, "{}", times.len());
        check_poisson(&times, rate);
    }

    #[test]
    fn workers_draw_different_streams() {
        let shape = RateShape::constant(1000.0).unwrap();
        let a = Poisson::new(shape.clone(), 2, 0, 1);
        let b = Poisson::new(shape, 2, 1, 1);
        assert_ne!(a.due_ns(0), b.due_ns(0));
        assert_ne!(a.worker_seed(), b.worker_seed());
        assert_eq!(a.global_seq(3), 6);
        assert_eq!(b.global_seq(3), 7);
    }

    #[test]
    fn due_is_a_function_of_k_and_seed() {
        let shape = RateShape::constant(5000.0).unwrap();
        let p = Poisson::new(shape.clone(), 3, 1, 99);
        let forward: Vec<Nanos> = (0..1000).map(|k| p.due_ns(k)).collect();
        // Asking again, backwards, or with jumps gives the same instants.
        assert_eq!(p.due_ns(500), forward[500]);
        assert_eq!(p.due_ns(10), forward[10]);
        assert_eq!(p.due_ns(999), forward[999]);
        let q = Poisson::new(shape, 3, 1, 99);
        assert_eq!(q.due_ns(999), forward[999]);
        assert!(forward.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn burst_with_poisson_is_markov_modulated() {
        // burst: 20,000/s for 100 ms, then 2,000/s for 400 ms, repeated: arrivals in the
        // on phases are ten times as dense, and each phase holds its expected count.
        let shape = super::super::shape_of(
            "burst:base=2000,peak=20000,on=100ms,off=400ms",
            60_000_000_000,
        );
        let p = Poisson::new(shape, 1, 0, 3);
        let (mut on, mut off) = (0u64, 0u64);
        let mut k = 0;
        loop {
            let t = p.due_ns(k);
            if t >= 20_000_000_000 {
                break;
            }
            if t % 500_000_000 < 100_000_000 {
                on += 1;
            } else {
                off += 1;
            }
            k += 1;
        }
        // 40 cycles of 500 ms: on 20,000 x 0.1 = 2000, off 2,000 x 0.4 = 800 each.
        let (on_exp, off_exp) = (40.0 * 2000.0, 40.0 * 800.0);
        assert!((on as f64 / on_exp - 1.0).abs() < 0.03, "on {on}");
        assert!((off as f64 / off_exp - 1.0).abs() < 0.03, "off {off}");
    }

    #[test]
    fn exp1_is_finite_and_positive() {
        let mut s = 0u64;
        for _ in 0..100_000 {
            let e = exp1(&mut s);
            assert!(e.is_finite() && e >= 0.0);
        }
    }
}
