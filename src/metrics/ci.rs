//! Confidence intervals from a run's own intervals: a bootstrap over whole intervals.
//!
//! A run's requests are not independent samples: a second in which the target paused
//! holds many slow ones together, so resampling single requests would make the
//! interval of a tail percentile far too narrow. What repeats is the interval (one
//! second of the run, with its own histogram). So the unit of resampling is the
//! interval: each resample draws as many intervals as the run has, with replacement,
//! adds their histograms, and reads the percentile of the sum; the ends of the
//! interval are the (1-level)/2 and (1+level)/2 quantiles of those estimates (the
//! percentile bootstrap). It keeps every request of a drawn interval together, so the
//! correlation inside a second is respected, and it works for tail percentiles, where
//! batch means (the mean of per-batch percentiles) would be biased: a second's p99.9 is
//! its one or two slowest requests.
//!
//! A long run's seconds are grouped into at most [`CI_BLOCKS_MAX`] blocks of
//! consecutive seconds, which are then the units: cheaper, and correlation between
//! neighbouring seconds stays inside a block. With few units the percentile bootstrap
//! is too narrow (its variance is (k-1)/k of the truth, and k draws carry the
//! uncertainty of a Student t with k-1 degrees of freedom, not of a normal): each end
//! is moved away from the estimate by `sqrt(k/(k-1)) * t(k-1) / z`, 1.58 at 5 units,
//! 1.22 at 10, 1.03 at 50. Bounds are then widened to the edges of the histogram's
//! buckets (0.1%): the true value lies somewhere in a bucket.
//!
//! No interval is given with fewer than [`CI_UNITS_MIN`] units, or fewer than
//! [`CI_TAIL_SAMPLES_MIN`] samples beyond the quantile: [`Bounds::TooFew`] says why.
//!
//! The bootstrap is seeded (the run's seed): a report is reproducible. A resample adds
//! sparse histograms (a block's nonzero buckets, indexed into the run's distinct
//! values) into one reused array of counts, so it costs the nonzero buckets it adds,
//! not a histogram's 33,792 counters.

use crate::limits::{CI_BLOCKS_MAX, CI_RESAMPLES, CI_TAIL_SAMPLES_MIN, CI_UNITS_MIN};
use hdrhistogram::Histogram;
use std::collections::BTreeMap;

/// Default `--confidence`.
pub const LEVEL_DEFAULT: f64 = 0.95;

/// The name of the method, as the JSON's `ci.method` says it.
pub const METHOD: &str = "bootstrap over intervals";

/// How an interval is computed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Confidence level, in (0, 1).
    pub level: f64,
    pub resamples: usize,
    pub seed: u64,
}

impl Settings {
    /// `level` with the default resamples; `seed` makes it reproducible.
    pub fn new(level: f64, seed: u64) -> Settings {
        Settings {
            level,
            resamples: CI_RESAMPLES,
            seed,
        }
    }

    /// The same settings, another stream of draws (one per histogram or figure).
    pub fn stream(self, k: u64) -> Settings {
        Settings {
            seed: self
                .seed
                .wrapping_add(k.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            ..self
        }
    }
}

/// An interval, or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub enum Bounds {
    Range { low: f64, high: f64 },
    TooFew(String),
}

impl Bounds {
    pub fn range(&self) -> Option<(f64, f64)> {
        match *self {
            Bounds::Range { low, high } => Some((low, high)),
            Bounds::TooFew(_) => None,
        }
    }

    pub fn contains(&self, v: f64) -> bool {
        self.range().is_some_and(|(l, h)| l <= v && v <= h)
    }
}

/// Which block each of a run's entries falls in: entries start at `starts` (seconds
/// since the start, ascending) and the run spans `span_s` seconds. Returns the number
/// of blocks and each entry's block: one per entry up to [`CI_BLOCKS_MAX`], else
/// blocks of equal length in seconds.
pub fn blocks_of(starts: &[u64], span_s: u64) -> (usize, Vec<usize>) {
    if starts.len() <= CI_BLOCKS_MAX {
        return (starts.len(), (0..starts.len()).collect());
    }
    let span = span_s.max(1) as u128;
    let n = CI_BLOCKS_MAX;
    let of = |s: u64| ((u128::from(s) * n as u128 / span) as usize).min(n - 1);
    (n, starts.iter().map(|&s| of(s)).collect())
}

/// One histogram's resampling units, built by adding each entry's histogram into its
/// block.
pub struct UnitsBuilder {
    blocks: Vec<BTreeMap<u64, u64>>,
}

impl UnitsBuilder {
    pub fn new(blocks: usize) -> UnitsBuilder {
        UnitsBuilder {
            blocks: vec![BTreeMap::new(); blocks],
        }
    }

    /// Adds an entry's histogram to block `block`.
    pub fn add(&mut self, block: usize, h: &Histogram<u64>) {
        let b = &mut self.blocks[block];
        for v in h.iter_recorded() {
            *b.entry(v.value_iterated_to()).or_default() += v.count_at_value();
        }
    }

    pub fn build(self) -> Units {
        let mut values: Vec<u64> = self.blocks.iter().flat_map(|b| b.keys().copied()).collect();
        values.sort_unstable();
        values.dedup();
        let index = |v: u64| values.binary_search(&v).expect("a value of a block") as u32;
        let blocks = self
            .blocks
            .iter()
            .map(|b| b.iter().map(|(&v, &c)| (index(v), c)).collect())
            .collect();
        Units { values, blocks }
    }
}

/// The units of one histogram: each block's nonzero buckets as (index into `values`,
/// count); `values` are bucket values (highest equivalent), ascending.
#[derive(Debug, Clone, Default)]
pub struct Units {
    values: Vec<u64>,
    blocks: Vec<Vec<(u32, u64)>>,
}

impl Units {
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Units with any sample.
    fn sampled(&self) -> usize {
        self.blocks.iter().filter(|b| !b.is_empty()).count()
    }
}

/// The factor each end of a percentile-bootstrap interval from `k` units is moved away
/// from the estimate by: `sqrt(k/(k-1))` (the bootstrap's variance is (k-1)/k of the
/// truth) times `t(k-1) / z` at `level` (k units carry a Student t's uncertainty).
pub fn widening(k: usize, level: f64) -> f64 {
    if k < 2 {
        return f64::INFINITY;
    }
    let p = 0.5 + level / 2.0;
    let nu = (k - 1) as f64;
    (k as f64 / nu).sqrt() * student_t_quantile(p, nu) / normal_quantile(p)
}

/// The bootstrap's spread turned into the interval: each end moved away from `point`
/// by the small-sample factor.
fn interval(point: f64, estimates: &mut [f64], k: usize, level: f64) -> (f64, f64) {
    estimates.sort_by(f64::total_cmp);
    let n = estimates.len();
    let at = |p: f64| {
        let i = ((p * n as f64).floor() as usize).min(n - 1);
        estimates[i]
    };
    let alpha = 1.0 - level;
    let (lo, hi) = (at(alpha / 2.0), at(1.0 - alpha / 2.0));
    let f = widening(k, level);
    (
        point - f * (point - lo.min(point)),
        point + f * (hi.max(point) - point),
    )
}

/// Intervals of the quantiles `qs` (each in (0, 1], ascending or not) of `total`, the
/// sum of `units`.
pub fn quantiles(units: &Units, total: &Histogram<u64>, qs: &[f64], s: &Settings) -> Vec<Bounds> {
    let k = units.len();
    let n = total.len();
    let few = |q: f64| -> Option<String> {
        if units.sampled() < CI_UNITS_MIN {
            return Some(format!(
                "too few samples: {} intervals with samples, {CI_UNITS_MIN} needed",
                units.sampled()
            ));
        }
        let beyond = (n as f64 * (1.0 - q)).floor() as u64;
        (beyond < CI_TAIL_SAMPLES_MIN).then(|| {
            format!(
                "too few samples: {beyond} beyond p{} of {n}, {CI_TAIL_SAMPLES_MIN} needed",
                crate::units::fmt_quantile(q)
            )
        })
    };
    let reasons: Vec<Option<String>> = qs.iter().map(|&q| few(q)).collect();
    if reasons.iter().all(Option::is_some) {
        return reasons
            .into_iter()
            .map(|r| Bounds::TooFew(r.unwrap()))
            .collect();
    }
    // Sorted quantile order, so one sweep over the counts finds them all.
    let mut order: Vec<usize> = (0..qs.len()).collect();
    order.sort_by(|&a, &b| qs[a].total_cmp(&qs[b]));
    let mut estimates: Vec<Vec<f64>> = vec![Vec::with_capacity(s.resamples); qs.len()];
    let mut counts = vec![0u64; units.values.len()];
    let mut rng = fastrand::Rng::with_seed(s.seed);
    for _ in 0..s.resamples {
        counts.fill(0);
        let mut sum = 0u64;
        for _ in 0..k {
            for &(i, c) in &units.blocks[rng.usize(..k)] {
                counts[i as usize] += c;
                sum += c;
            }
        }
        if sum == 0 {
            continue;
        }
        // hdrhistogram's rule: the first value whose cumulative count reaches
        // ceil(q * n), at least 1.
        let mut cum = 0u64;
        let mut i = 0usize;
        for &j in &order {
            let need = ((qs[j] * sum as f64).ceil() as u64).max(1);
            while cum + counts[i] < need && i + 1 < counts.len() {
                cum += counts[i];
                i += 1;
            }
            estimates[j].push(units.values[i] as f64);
        }
    }
    qs.iter()
        .zip(reasons)
        .zip(&mut estimates)
        .map(|((&q, why), est)| {
            if let Some(why) = why {
                return Bounds::TooFew(why);
            }
            if est.is_empty() {
                return Bounds::TooFew("too few samples: no resample held any".into());
            }
            let point = total.value_at_quantile(q) as f64;
            let (low, high) = interval(point, est, k, s.level);
            Bounds::Range {
                low: total.lowest_equivalent(low.max(0.0) as u64) as f64,
                high: total.highest_equivalent(high.max(0.0) as u64) as f64,
            }
        })
        .collect()
}

/// Interval of a ratio of sums, `sum(num) / sum(den)` over the units (a rate: counts
/// over seconds), around `point`.
pub fn ratio(num: &[f64], den: &[f64], point: f64, s: &Settings) -> Bounds {
    let k = num.len().min(den.len());
    if k < CI_UNITS_MIN {
        return Bounds::TooFew(format!(
            "too few samples: {k} intervals, {CI_UNITS_MIN} needed"
        ));
    }
    let mut rng = fastrand::Rng::with_seed(s.seed);
    let mut est = Vec::with_capacity(s.resamples);
    for _ in 0..s.resamples {
        let (mut a, mut b) = (0.0, 0.0);
        for _ in 0..k {
            let i = rng.usize(..k);
            a += num[i];
            b += den[i];
        }
        if b > 0.0 {
            est.push(a / b);
        }
    }
    if est.is_empty() {
        return Bounds::TooFew("too few samples: nothing in any interval".into());
    }
    let (low, high) = interval(point, &mut est, k, s.level);
    Bounds::Range {
        low: low.max(0.0),
        high,
    }
}

/// Interval of a proportion (errors over requests that ended), per unit `hits` of
/// `trials`, around `point`. With no hit at all the bootstrap has no spread to show,
/// so the upper end is the exact binomial bound for zero of n, `1 - ((1-level)/2)^(1/n)`
/// (about 3.7/n at 95%).
pub fn proportion(hits: &[f64], trials: &[f64], point: f64, s: &Settings) -> Bounds {
    let n: f64 = trials.iter().sum();
    if hits.iter().sum::<f64>() == 0.0 && n >= 1.0 && hits.len() >= CI_UNITS_MIN {
        let alpha = 1.0 - s.level;
        return Bounds::Range {
            low: 0.0,
            high: 1.0 - (alpha / 2.0).powf(1.0 / n),
        };
    }
    match ratio(hits, trials, point, s) {
        Bounds::Range { low, high } => Bounds::Range {
            low,
            high: high.min(1.0),
        },
        b => b,
    }
}

/// The standard normal's quantile (Acklam's rational approximation, relative error
/// below 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Student's t quantile with `nu` degrees of freedom: exact for 1 and 2, else the
/// Cornish-Fisher expansion in the normal quantile (Abramowitz and Stegun 26.7.5;
/// 2.775 for 2.776 at nu = 4, p = 0.975).
pub fn student_t_quantile(p: f64, nu: f64) -> f64 {
    if nu <= 1.0 {
        return (std::f64::consts::PI * (p - 0.5)).tan();
    }
    if nu <= 2.0 {
        return (2.0 * p - 1.0) / (2.0 * p * (1.0 - p)).sqrt();
    }
    let z = normal_quantile(p);
    let z2 = z * z;
    let g1 = (z2 + 1.0) * z / 4.0;
    let g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0;
    let g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0;
    let g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0;
    z + g1 / nu + g2 / nu.powi(2) + g3 / nu.powi(3) + g4 / nu.powi(4)
}

#[cfg(test)]
mod tests;
