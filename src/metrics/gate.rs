//! The validity gate: a run whose generator fell behind its own timetable is invalid,
//! because its latencies then describe the generator, not the target.
//!
//! Rules:
//! - dispatch lag (dispatched - intended) p99 must stay below `--max-lag`. A stall of
//!   the *target* does not move dispatch lag (the schedule keeps dispatching into the
//!   backlog), so it shows as connection wait and latency instead and leaves the run
//!   valid.
//! - no worker may be busy (CPU time minus spinning for a due instant) more than
//!   `BUSY_RATIO_MAX` of the run. Dispatching into the backlog is cheap, so a worker
//!   that cannot keep up with *sending* and *receiving* shows low dispatch lag but a
//!   growing backlog: its connection wait and latency would then be the generator's
//!   own queueing, blamed on the target. A worker without idle time cannot tell.

use crate::diagnosis::Diagnosis;
use hdrhistogram::Histogram;

/// Largest share of its time a worker may be busy for the run to count as valid.
pub const BUSY_RATIO_MAX: f64 = 0.95;

#[derive(Debug, Clone, Copy)]
pub struct Gate {
    pub max_lag_ns: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub valid: bool,
    pub reasons: Vec<Diagnosis>,
}

impl Gate {
    /// `busiest`: the busiest worker's core and busy ratio (None when no timetable
    /// applies, as with `--rate max`).
    pub fn judge(
        &self,
        dispatch_lag: &Histogram<u64>,
        busiest: Option<(Option<usize>, f64)>,
    ) -> Verdict {
        let mut reasons = Vec::new();
        if let Some((core, ratio)) = busiest
            && ratio > BUSY_RATIO_MAX
        {
            reasons.push(Diagnosis::WorkerWithoutHeadroom {
                core,
                busy_ratio: ratio,
                gate: BUSY_RATIO_MAX,
            });
        }
        if !dispatch_lag.is_empty() {
            let p99 = dispatch_lag.value_at_quantile(0.99);
            if p99 > self.max_lag_ns {
                reasons.push(Diagnosis::DispatchLagHigh {
                    p99_ns: p99,
                    max_lag_ns: self.max_lag_ns,
                });
            }
        }
        Verdict {
            valid: reasons.is_empty(),
            reasons,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lag_with(fast: u64, slow: u64, slow_ns: u64) -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        h.record_n(2_000, fast).unwrap();
        h.record_n(slow_ns, slow).unwrap();
        h
    }

    #[test]
    fn small_lag_is_valid() {
        let g = Gate {
            max_lag_ns: 1_000_000,
        };
        assert!(
            g.judge(&lag_with(1000, 5, 50_000_000), Some((Some(0), 0.5)))
                .valid
        );
    }

    #[test]
    fn lag_p99_above_bound_is_invalid_with_reason() {
        let g = Gate {
            max_lag_ns: 1_000_000,
        };
        let v = g.judge(&lag_with(980, 20, 300_000_000), None);
        assert!(!v.valid);
        assert_eq!(v.reasons[0].code(), "dispatch_lag_high", "{:?}", v.reasons);
    }

    #[test]
    fn a_worker_without_headroom_is_invalid() {
        let g = Gate {
            max_lag_ns: 1_000_000,
        };
        let v = g.judge(&lag_with(1000, 0, 1), Some((Some(3), 0.99)));
        assert!(!v.valid);
        assert!(
            v.reasons[0].to_string().contains("core 3 was busy 99%"),
            "{:?}",
            v.reasons
        );
    }

    #[test]
    fn empty_histogram_is_valid() {
        let g = Gate { max_lag_ns: 1 };
        let h = Histogram::<u64>::new_with_bounds(1, 1000, 3).unwrap();
        assert!(g.judge(&h, None).valid);
    }
}

/// Kolmogorov-Smirnov test of time-rescaled gaps (recorded x `scale`) against Exp(1):
/// `(D, n)`, the largest distance between the empirical and the exponential CDF, and
/// the number of gaps. `None` without gaps.
pub fn ks_exponential(h: &hdrhistogram::Histogram<u64>, scale: f64) -> Option<(f64, u64)> {
    let n = h.len();
    if n == 0 {
        return None;
    }
    let mut below = 0u64;
    let mut d: f64 = 0.0;
    for v in h.iter_recorded() {
        let x = h.highest_equivalent(v.value_iterated_to()) as f64 / scale;
        let f = 1.0 - (-x).exp();
        let before = below as f64 / n as f64;
        below += v.count_at_value();
        let after = below as f64 / n as f64;
        d = d.max((before - f).abs()).max((after - f).abs());
    }
    Some((d, n))
}

/// The KS critical value at the 1% level for `n` samples (large-n approximation).
pub fn ks_critical_1pct(n: u64) -> f64 {
    1.63 / (n.max(1) as f64).sqrt()
}

#[cfg(test)]
mod ks_tests {
    use super::*;

    fn hist() -> hdrhistogram::Histogram<u64> {
        hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap()
    }

    #[test]
    fn exponential_gaps_pass_and_even_gaps_fail() {
        let mut rng = fastrand::Rng::with_seed(7);
        let (mut exp, mut even) = (hist(), hist());
        for _ in 0..20_000 {
            let g = -(1.0 - rng.f64()).ln();
            exp.record((g * 1e6) as u64).unwrap();
            even.record(1_000_000).unwrap();
        }
        let (d, n) = ks_exponential(&exp, 1e6).unwrap();
        assert_eq!(n, 20_000);
        assert!(
            d < ks_critical_1pct(n),
            "exponential gaps rejected: D = {d}"
        );
        let (d, _) = ks_exponential(&even, 1e6).unwrap();
        assert!(d > 0.3, "evenly spaced gaps pass as Poisson: D = {d}");
        assert_eq!(ks_exponential(&hist(), 1e6), None);
    }
}
