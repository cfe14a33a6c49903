//! The Poisson pacing fit: how closely the actual dispatch instants follow the
//! intended Poisson process.

use crate::clock::Nanos;
use crate::engine::worker_plan::WorkerPlan;
use crate::schedule::{ArrivalKind, RateShape};

/// Time-rescaled gaps between actual dispatch instants: with Poisson arrivals the
/// worker's own process has intensity rate(t) / workers, so Λ(t_k)/W - Λ(t_(k-1))/W of
/// consecutive dispatches is Exp(1) when pacing is exact. Recorded x 1e6 in a histogram;
/// the report tests it against the exponential (Kolmogorov-Smirnov).
pub(super) struct PacingFit {
    shape: Option<RateShape>,
    workers: f64,
    prev: Option<f64>,
}

impl PacingFit {
    pub(super) fn new(plan: &WorkerPlan) -> PacingFit {
        PacingFit {
            shape: plan
                .shape
                .clone()
                .filter(|_| plan.arrivals == ArrivalKind::Poisson),
            workers: plan.workers as f64,
            prev: None,
        }
    }

    #[inline]
    pub(super) fn record(&mut self, now_ns: Nanos, h: &mut hdrhistogram::Histogram<u64>) {
        let Some(shape) = &self.shape else {
            return;
        };
        let lam = shape.cumulative(now_ns as f64) / self.workers;
        if let Some(prev) = self.prev.replace(lam) {
            h.saturating_record(((lam - prev).max(0.0) * GAP_SCALE) as u64);
        }
    }
}

/// Fixed-point scale of the time-rescaled gaps in
/// [`Histograms::pacing`](crate::engine::recorder::Histograms::pacing).
pub const GAP_SCALE: f64 = 1e6;
