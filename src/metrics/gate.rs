//! The validity gate: a run whose generator fell behind its own timetable is invalid,
//! because its latencies then describe the generator, not the target.
//!
//! Rule: dispatch lag (dispatched - intended) p99 must stay below `--max-lag`. A stall
//! of the *target* does not move dispatch lag (the schedule keeps dispatching into the
//! backlog), so it shows as connection wait and latency instead and leaves the run valid.

use hdrhistogram::Histogram;

#[derive(Debug, Clone, Copy)]
pub struct Gate {
    pub max_lag_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub valid: bool,
    pub reasons: Vec<String>,
}

impl Gate {
    pub fn judge(&self, dispatch_lag: &Histogram<u64>) -> Verdict {
        let mut reasons = Vec::new();
        if !dispatch_lag.is_empty() {
            let p99 = dispatch_lag.value_at_quantile(0.99);
            if p99 > self.max_lag_ns {
                reasons.push(format!(
                    "dispatch lag p99 {} exceeds --max-lag {}: the generator was the bottleneck; \
                     use more cores or a lower rate",
                    crate::report::fmt_ns(p99),
                    crate::report::fmt_ns(self.max_lag_ns)
                ));
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
        assert!(g.judge(&lag_with(1000, 5, 50_000_000)).valid);
    }

    #[test]
    fn lag_p99_above_bound_is_invalid_with_reason() {
        let g = Gate {
            max_lag_ns: 1_000_000,
        };
        let v = g.judge(&lag_with(980, 20, 300_000_000));
        assert!(!v.valid);
        assert!(v.reasons[0].contains("dispatch lag p99"), "{:?}", v.reasons);
    }

    #[test]
    fn empty_histogram_is_valid() {
        let g = Gate { max_lag_ns: 1 };
        let h = Histogram::<u64>::new_with_bounds(1, 1000, 3).unwrap();
        assert!(g.judge(&h).valid);
    }
}
