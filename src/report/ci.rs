//! The report's confidence intervals: `latency_ns.ci` (and the other three per-request
//! histograms'), and the run's `ci` key (the level, the method, the achieved rate's
//! and the error ratio's intervals), from the run's own per-second entries by
//! [`crate::metrics::ci`]. A run computes them from its series as it ends; `merge`
//! and `compare` from the `intervals[]` a JSON report embeds, the same way.

use crate::metrics::ci::{self, Bounds, Settings, Units, UnitsBuilder};
use crate::units::fmt_ns_interval;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The percentiles given an interval: the JSON's key and the quantile.
pub const QUANTILES: [(&str, f64); 5] = [
    ("p50", 0.5),
    ("p90", 0.9),
    ("p99", 0.99),
    ("p999", 0.999),
    ("p9999", 0.9999),
];

/// The ends of an interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Range<T> {
    pub low: T,
    pub high: T,
}

/// A histogram's intervals (`latency_ns.ci`): each percentile's, `null` with its
/// reason in `reasons` when too few samples resolve it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistCi {
    pub level: f64,
    pub p50: Option<Range<u64>>,
    pub p90: Option<Range<u64>>,
    pub p99: Option<Range<u64>>,
    pub p999: Option<Range<u64>>,
    pub p9999: Option<Range<u64>>,
    /// Percentile key -> why it has no interval (`too few samples: ...`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reasons: BTreeMap<String, String>,
}

impl HistCi {
    /// The interval of percentile `key` (`p99`), or why there is none.
    pub fn get(&self, key: &str) -> Result<Range<u64>, &str> {
        let r = match key {
            "p50" => self.p50,
            "p90" => self.p90,
            "p99" => self.p99,
            "p999" => self.p999,
            "p9999" => self.p9999,
            _ => None,
        };
        r.ok_or_else(|| self.reasons.get(key).map_or("no interval", String::as_str))
    }

    /// ` [1.20, 1.27]` beside a point printed by `fmt_ns`, or ` [n/a: too few
    /// samples]`.
    pub fn show(&self, key: &str, point: u64) -> String {
        match self.get(key) {
            Ok(r) => format!(" {}", fmt_ns_interval(point, r.low, r.high)),
            Err(why) => format!(" [n/a: {}]", short(why)),
        }
    }
}

/// The reason's head (`too few samples`), for the text's brackets.
fn short(why: &str) -> &str {
    why.split(':').next().unwrap_or(why)
}

/// The run's `ci` key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunCi {
    /// `--confidence`.
    pub level: f64,
    /// [`ci::METHOD`].
    pub method: String,
    pub resamples: usize,
    /// Resampling units: one per entry of `intervals[]`, or blocks of consecutive
    /// seconds past [`crate::limits::CI_BLOCKS_MAX`].
    pub units: usize,
    /// Responses per second (`rate.achieved_rps`).
    pub achieved_rps: Option<Range<f64>>,
    /// Request errors over requests that ended (completed or failed).
    pub error_ratio: Option<Range<f64>>,
    /// Figure -> why it has no interval.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reasons: BTreeMap<String, String>,
}

impl RunCi {
    /// ` [a, b]` for the achieved rate, in requests/s.
    pub fn show_rate(&self) -> String {
        match &self.achieved_rps {
            Some(r) => format!(" [{:.1}, {:.1}]", r.low, r.high),
            None => " [n/a: too few samples]".to_string(),
        }
    }

    /// ` [a%, b%]` for the error ratio.
    pub fn show_error_ratio(&self) -> String {
        match &self.error_ratio {
            Some(r) => format!(" [{:.3}%, {:.3}%]", r.low * 100.0, r.high * 100.0),
            None => " [n/a: too few samples]".to_string(),
        }
    }
}

/// Gathers a run's entries (per-second rows, or a JSON's `intervals[]`), then computes
/// every interval. Entries are added in order.
pub struct Builder {
    blocks: Vec<usize>,
    units: [UnitsBuilder; 4],
    /// Whether each of the four histograms had an entry without it.
    missing: [bool; 4],
    completed: Vec<f64>,
    errors: Vec<f64>,
    seconds: Vec<f64>,
}

impl Builder {
    /// For entries starting at `starts` (seconds), spanning `span_s` seconds in all.
    pub fn new(starts: &[u64], span_s: u64) -> Builder {
        let (n, blocks) = ci::blocks_of(starts, span_s);
        Builder {
            blocks,
            units: std::array::from_fn(|_| UnitsBuilder::new(n)),
            missing: [false; 4],
            completed: vec![0.0; n],
            errors: vec![0.0; n],
            seconds: vec![0.0; n],
        }
    }

    /// Entry `i`'s counts: requests completed and failed in `secs` seconds.
    pub fn counts(&mut self, i: usize, completed: u64, errors: u64, secs: f64) {
        let b = self.blocks[i];
        self.completed[b] += completed as f64;
        self.errors[b] += errors as f64;
        self.seconds[b] += secs;
    }

    /// Entry `i`'s histogram `which` (the order of [`super::input::MAIN_HISTOGRAMS`]),
    /// or `None` when the entry has none.
    pub fn histogram(&mut self, i: usize, which: usize, h: Option<&Histogram<u64>>) {
        match h {
            Some(h) => self.units[which].add(self.blocks[i], h),
            None => self.missing[which] = true,
        }
    }

    /// The units gathered: each histogram's (`None` when an entry lacked it, as older
    /// reports' do) and the counts'.
    pub fn parts(self) -> Parts {
        let missing = self.missing;
        let mut units = self
            .units
            .into_iter()
            .enumerate()
            .map(|(k, b)| (!missing[k]).then(|| b.build()));
        Parts {
            units: std::array::from_fn(|_| units.next().flatten()),
            completed: self.completed,
            errors: self.errors,
            seconds: self.seconds,
        }
    }

    /// [`Builder::parts`], then [`Parts::finish`].
    pub fn finish(
        self,
        totals: [&Histogram<u64>; 4],
        rate: f64,
        error_ratio: f64,
        s: &Settings,
    ) -> (RunCi, [Option<HistCi>; 4]) {
        self.parts().finish(totals, rate, error_ratio, s)
    }

    /// A JSON report's entries (`intervals[]`: `second`, `duration_s`,
    /// `achieved_rps`, `errors`, `histograms`), the histograms `which` (indices into
    /// [`super::input::MAIN_HISTOGRAMS`]) decoded, the others left out. An entry
    /// without a histogram (an older report, a merged second a shard lacked) leaves
    /// that histogram without intervals.
    pub fn of_json(v: &serde_json::Value, which: &[usize]) -> Builder {
        let rows: &[serde_json::Value] = v["intervals"].as_array().map_or(&[], Vec::as_slice);
        let starts: Vec<u64> = rows
            .iter()
            .map(|r| r["second"].as_u64().unwrap_or(0))
            .collect();
        let secs = |r: &serde_json::Value| r["duration_s"].as_f64().unwrap_or(0.0);
        let span = rows.last().map_or(0, |r| {
            r["second"].as_u64().unwrap_or(0) + secs(r).ceil().max(1.0) as u64
        });
        let mut b = Builder::new(&starts, span);
        for k in 0..4 {
            if !which.contains(&k) {
                b.missing[k] = true;
            }
        }
        for (i, r) in rows.iter().enumerate() {
            let completed = (r["achieved_rps"].as_f64().unwrap_or(0.0) * secs(r)).round() as u64;
            b.counts(i, completed, r["errors"].as_u64().unwrap_or(0), secs(r));
            for &k in which {
                let key = super::input::MAIN_HISTOGRAMS[k].0;
                let h = r["histograms"][key]
                    .as_str()
                    .and_then(|s| super::hdr::decode(s).ok());
                b.histogram(i, k, h.as_ref());
            }
        }
        b
    }
}

/// A run's resampling units, gathered by a [`Builder`].
pub struct Parts {
    /// Each of the four histograms' units (`None`: some entry lacked it).
    pub units: [Option<Units>; 4],
    completed: Vec<f64>,
    errors: Vec<f64>,
    seconds: Vec<f64>,
}

impl Parts {
    /// The intervals: the run's `ci` key, and each histogram's. `totals` are the run's
    /// four histograms, `rate` and `error_ratio` the run's figures the intervals are
    /// around.
    pub fn finish(
        &self,
        totals: [&Histogram<u64>; 4],
        rate: f64,
        error_ratio: f64,
        s: &Settings,
    ) -> (RunCi, [Option<HistCi>; 4]) {
        let units = self.completed.len();
        let mut reasons = BTreeMap::new();
        let (rate_b, errors_b) = self.rate_and_errors(rate, error_ratio, s);
        let mut keep = |name: &str, b: Bounds| match b {
            Bounds::Range { low, high } => Some(Range { low, high }),
            Bounds::TooFew(why) => {
                reasons.insert(name.to_string(), why);
                None
            }
        };
        let achieved_rps = keep("achieved_rps", rate_b);
        let error_ratio = keep("error_ratio", errors_b);
        let run = RunCi {
            level: s.level,
            method: ci::METHOD.to_string(),
            resamples: s.resamples,
            units,
            achieved_rps,
            error_ratio,
            reasons,
        };
        let mut hists: [Option<HistCi>; 4] = Default::default();
        for (k, (u, total)) in self.units.iter().zip(totals).enumerate() {
            hists[k] = u.as_ref().map(|u| hist_ci(u, total, &s.stream(k as u64)));
        }
        (run, hists)
    }

    /// The interval of quantile `q` of histogram `k` (`None`: no units for it), drawn
    /// as [`Parts::finish`] draws it.
    pub fn quantile(
        &self,
        k: usize,
        total: &Histogram<u64>,
        q: f64,
        s: &Settings,
    ) -> Option<Bounds> {
        let u = self.units[k].as_ref()?;
        ci::quantiles(u, total, &[q], &s.stream(k as u64)).pop()
    }

    /// The achieved rate's and the error ratio's intervals, around `rate` and
    /// `error_ratio`, drawn as [`Parts::finish`] draws them.
    pub fn rate_and_errors(&self, rate: f64, error_ratio: f64, s: &Settings) -> (Bounds, Bounds) {
        let ended: Vec<f64> = (self.completed.iter().zip(&self.errors))
            .map(|(c, e)| c + e)
            .collect();
        (
            ci::ratio(&self.completed, &self.seconds, rate, &s.stream(100)),
            ci::proportion(&self.errors, &ended, error_ratio, &s.stream(101)),
        )
    }
}

/// Every percentile's interval of one histogram.
pub fn hist_ci(units: &Units, total: &Histogram<u64>, s: &Settings) -> HistCi {
    let qs: Vec<f64> = QUANTILES.iter().map(|q| q.1).collect();
    let bounds = ci::quantiles(units, total, &qs, s);
    let mut out = HistCi {
        level: s.level,
        ..HistCi::default()
    };
    for ((key, _), b) in QUANTILES.iter().zip(bounds) {
        let r = match b {
            Bounds::Range { low, high } => Some(Range {
                low: low as u64,
                high: high as u64,
            }),
            Bounds::TooFew(why) => {
                out.reasons.insert(key.to_string(), why);
                None
            }
        };
        match *key {
            "p50" => out.p50 = r,
            "p90" => out.p90 = r,
            "p99" => out.p99 = r,
            "p999" => out.p999 = r,
            _ => out.p9999 = r,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percentile_without_an_interval_says_why() {
        let mut c = HistCi {
            level: 0.95,
            p99: Some(Range {
                low: 1_200_000,
                high: 1_270_000,
            }),
            ..HistCi::default()
        };
        c.reasons
            .insert("p9999".into(), "too few samples: 3 beyond p99.99".into());
        assert_eq!(c.show("p99", 1_230_000), " [1.20, 1.27]");
        assert_eq!(c.show("p9999", 2_000_000), " [n/a: too few samples]");
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["p99"]["low"], 1_200_000);
        assert!(v["p9999"].is_null());
        assert_eq!(v["reasons"]["p9999"], "too few samples: 3 beyond p99.99");
        let back: HistCi = serde_json::from_value(v).unwrap();
        assert_eq!(back, c);
    }
}
