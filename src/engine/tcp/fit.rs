//! The pacing fit: how closely the actual dispatch instants follow the intended
//! arrival process (Poisson or constant), judged in `metrics::pacing`.

use crate::clock::Nanos;
use crate::engine::worker_plan::WorkerPlan;
use crate::schedule::RateShape;

/// Time-rescaled gaps between actual dispatch instants: the worker's own process has
/// intensity rate(t) / L (L lanes: workers times shards), so Λ(t_k)/L - Λ(t_(k-1))/L of
/// consecutive dispatches is Exp(1) for Poisson arrivals and 1 for constant ones when
/// pacing is exact. Recorded x 1e6 in a histogram; the report judges it at the run's
/// pacing resolution (`metrics::pacing`) and keeps the plain KS test beside it.
pub(super) struct PacingFit {
    shape: Option<RateShape>,
    lanes: f64,
    prev: Option<f64>,
    /// The shape's piece of the previous dispatch: dispatch instants only go up, so
    /// `Λ` is found from there in O(1), not by a binary search per dispatch.
    cursor: usize,
}

impl PacingFit {
    pub(super) fn new(plan: &WorkerPlan) -> PacingFit {
        PacingFit {
            shape: plan.shape.clone(),
            lanes: plan
                .shard
                .lanes(plan.workers.max(1) as u64, plan.index as u64)
                .0 as f64,
            prev: None,
            cursor: 0,
        }
    }

    #[inline]
    pub(super) fn record(&mut self, now_ns: Nanos, h: &mut hdrhistogram::Histogram<u64>) {
        let Some(shape) = &self.shape else {
            return;
        };
        let lam = shape.cumulative_from(now_ns as f64, &mut self.cursor) / self.lanes;
        if let Some(prev) = self.prev.replace(lam) {
            h.saturating_record(((lam - prev).max(0.0) * GAP_SCALE) as u64);
        }
    }
}

/// Fixed-point scale of the time-rescaled gaps in
/// [`Histograms::pacing`](crate::engine::recorder::Histograms::pacing).
pub const GAP_SCALE: f64 = 1e6;
