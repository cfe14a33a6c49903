//! `blaster compare BASE.json NEW.json`: two run reports side by side, and a regression
//! gate for CI. Percentiles come from the histograms the reports embed (schema 2 on),
//! so any percentile can be compared, p99.99 included, whether or not the run printed it.
//!
//! `--max-regression` terms, comma-separated:
//! - `pNN[.N]=X%` (and `max=X%`): NEW's latency percentile may exceed BASE's by at most
//!   X percent of BASE's.
//! - `errors=X%`: NEW's error ratio (request errors / dispatched) may exceed BASE's by
//!   at most X percentage points (a relative change of a ratio that is usually zero
//!   would mean nothing).
//! - `rate=-X%`: NEW's achieved rate may fall short of BASE's by at most X percent
//!   (the sign says which way is worse; `rate=X%` means the same).
//!
//! Each figure is decided with its confidence interval (issue 33 item 5), recomputed
//! from the report's per-second histograms and counts at `--confidence` (the bootstrap
//! of [`crate::metrics::ci`], seeded by each run's seed, so the same files always
//! decide the same): NEW regressed at a limited metric only when its whole interval
//! lies beyond BASE's whole interval moved by the limit (latency: NEW's low end above
//! BASE's high end times 1 + X%; rate: NEW's high end below BASE's low end times 1 -
//! X%; errors: NEW's low end above BASE's high end plus X points). An estimate past
//! the limit whose intervals do not say so is "within noise", exit 0. A figure with no
//! interval (a report without per-second histograms, too few samples at that
//! percentile) is decided on the estimates, as before, and the row says so. A merged
//! fleet run is compared the same way: its seconds embed the shards' sums.
//!
//! Runs of different workloads (protocol, framer, frames against requests) are not
//! compared: [`check_same_workload`].
//!
//! Pure: parsing, loading from a parsed JSON value, comparing and rendering; the command
//! ([`command`]) reads the files and maps the outcome to the exit code.

mod command;

pub use command::command;

use crate::metrics::ci::{Bounds, Settings};
use crate::report::SCHEMA_VERSION;
use crate::report::ci::{Builder, Parts};
use crate::report::input::CheckedRun;
use crate::units::{fmt_ns, fmt_rate};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::fmt::Write as _;

/// What a term limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    /// A latency percentile (0..100], as written (`99.9`, so equal terms compare equal);
    /// 100 is the max.
    Latency(f64),
    ErrorRatio,
    Rate,
}

impl Metric {
    /// `p50`, `p99.9`, `max`, `errors`, `rate`.
    pub fn name(self) -> String {
        match self {
            Metric::Latency(p) if p >= 100.0 => "max".to_string(),
            Metric::Latency(p) => format!("p{}", trim_float(p)),
            Metric::ErrorRatio => "errors".to_string(),
            Metric::Rate => "rate".to_string(),
        }
    }

    /// Parses a metric name: `pNN[.N]`, `max`, `errors`, `rate`.
    pub fn parse(s: &str) -> Result<Metric, String> {
        match s {
            "max" => return Ok(Metric::Latency(100.0)),
            "errors" => return Ok(Metric::ErrorRatio),
            "rate" => return Ok(Metric::Rate),
            _ => {}
        }
        let pct: f64 = s
            .strip_prefix('p')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| {
                format!("unknown metric {s:?}: expected pNN[.N] (e.g. p99.9), max, errors or rate")
            })?;
        if !(pct > 0.0 && pct <= 100.0) {
            return Err(format!("{s:?}: a percentile is above 0 and at most 100"));
        }
        Ok(Metric::Latency(pct))
    }
}

/// `99.9000001` -> `99.9`, `50` -> `50`.
fn trim_float(v: f64) -> String {
    let s = format!("{v:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// One `--max-regression` term.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    pub metric: Metric,
    /// Percent: of BASE for latency and rate, percentage points for errors.
    pub percent: f64,
}

/// Parses `p99=15%,p99.9=25%,errors=0.1%,rate=-1%`.
pub fn parse_limits(spec: &str) -> Result<Vec<Limit>, String> {
    let mut out: Vec<Limit> = Vec::new();
    for term in spec.split(',').map(str::trim) {
        if term.is_empty() {
            return Err(format!("empty term in {spec:?}"));
        }
        let (k, v) = term
            .split_once('=')
            .ok_or_else(|| format!("{term:?}: expected METRIC=X%, e.g. p99=15%"))?;
        let metric = Metric::parse(k.trim())?;
        let num = v
            .trim()
            .strip_suffix('%')
            .ok_or_else(|| format!("{term:?}: the limit is a percentage, e.g. {}=15%", k.trim()))?;
        let percent: f64 = num
            .trim()
            .parse()
            .map_err(|_| format!("{term:?}: {num:?} is not a number"))?;
        if !percent.is_finite() {
            return Err(format!("{term:?}: not a finite number"));
        }
        let percent = match metric {
            // The sign of a rate limit only says which way is worse.
            Metric::Rate => percent.abs(),
            _ if percent < 0.0 => {
                return Err(format!(
                    "{term:?}: a latency or error limit is how much worse NEW may be, at least 0%"
                ));
            }
            _ => percent,
        };
        if out.iter().any(|l| l.metric == metric) {
            return Err(format!("{} is limited twice", metric.name()));
        }
        out.push(Limit { metric, percent });
    }
    Ok(out)
}

/// The figures of one run report that a comparison reads.
pub struct RunFigures {
    pub latency: Histogram<u64>,
    pub achieved_rps: f64,
    pub intended_rps: f64,
    pub dispatched: u64,
    pub completed: u64,
    pub errors: u64,
    pub valid: bool,
    pub target: String,
    /// What was run: `tcp echo requests`, `tcp frames`, ...
    pub workload: String,
    /// The run's seed, which seeds its bootstrap.
    pub seed: u64,
    /// The per-second units of the latency histogram and the counts (`None`: the
    /// report has no intervals to draw from).
    pub parts: Option<Parts>,
}

impl RunFigures {
    pub fn error_ratio(&self) -> f64 {
        self.errors as f64 / self.dispatched.max(1) as f64
    }

    /// The figures of a run report read back and checked by [`crate::report::input`]
    /// (its histograms already decoded, within their bounds).
    pub fn of(r: &CheckedRun) -> RunFigures {
        let i = &r.input;
        let v = &r.json;
        let s = |k: &str| v[k].as_str().unwrap_or("?").to_string();
        let workload = if i.mode == "frames" {
            format!("{} frames", s("protocol"))
        } else {
            format!("{} {} requests", s("protocol"), s("framer"))
        };
        let parts = v["intervals"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
            .then(|| Builder::of_json(v, &[0]).parts());
        RunFigures {
            latency: r.latency().clone(),
            achieved_rps: i.rate.achieved_rps,
            intended_rps: i.rate.intended_rps,
            dispatched: i.requests.dispatched,
            completed: i.requests.completed,
            errors: i.requests.errors,
            valid: i.valid,
            target: i.target.clone(),
            workload,
            seed: v["seed"].as_u64().unwrap_or(0),
            parts,
        }
    }

    /// The interval of metric `m` at `level`: the same draws as the run's own report
    /// at that level. The error ratio's interval is of errors over requests that
    /// ended, moved onto this run's errors over dispatched.
    fn interval(&self, m: Metric, level: f64) -> Result<(f64, f64), String> {
        let Some(p) = &self.parts else {
            return Err("the report has no intervals".into());
        };
        let s = Settings::new(level, self.seed);
        let b = match m {
            Metric::Latency(pct) if pct >= 100.0 => {
                return Err("the max has no interval".into());
            }
            Metric::Latency(pct) => p
                .quantile(0, &self.latency, pct / 100.0, &s)
                .unwrap_or_else(|| Bounds::TooFew("no per-second latency histograms".into())),
            Metric::Rate => p.rate_and_errors(self.achieved_rps, 0.0, &s).0,
            Metric::ErrorRatio => {
                let ended = (self.completed + self.errors).max(1) as f64;
                let of_ended = self.errors as f64 / ended;
                match p.rate_and_errors(self.achieved_rps, of_ended, &s).1 {
                    Bounds::Range { low, high } => {
                        let scale = ended / self.dispatched.max(1) as f64;
                        Bounds::Range {
                            low: low * scale,
                            high: high * scale,
                        }
                    }
                    b => b,
                }
            }
        };
        match b {
            Bounds::Range { low, high } => Ok((low, high)),
            Bounds::TooFew(why) => Err(why),
        }
    }

    fn value(&self, m: Metric) -> f64 {
        match m {
            Metric::Latency(_) if self.latency.is_empty() => 0.0,
            Metric::Latency(p) if p >= 100.0 => self.latency.max() as f64,
            Metric::Latency(p) => self.latency.value_at_quantile(p / 100.0) as f64,
            Metric::ErrorRatio => self.error_ratio(),
            Metric::Rate => self.achieved_rps,
        }
    }
}

/// One row of the comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `p99`, `max`, `errors`, `rate`.
    pub metric: String,
    /// Latency in ns, rate in requests/s, errors as a ratio of dispatched requests.
    pub base: f64,
    pub new: f64,
    /// The confidence intervals (`null`: none, see `no_interval`).
    pub base_ci: Option<Range>,
    pub new_ci: Option<Range>,
    /// Why a side has no interval (the row is then decided on the estimates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_interval: Option<String>,
    /// Latency and rate: (new - base) / base, percent (`null` when base is 0); errors:
    /// new - base in percentage points.
    pub change_percent: Option<f64>,
    /// The `--max-regression` limit, percent as given (rate: the allowed drop).
    pub limit_percent: Option<f64>,
    pub regressed: bool,
    /// `regressed`; `within noise` (the estimates differ, past the limit if there is
    /// one, but the intervals do not say so); `worse` or `better` (the intervals say
    /// so, with no limit or within it); `same` (the estimates are equal).
    pub verdict: &'static str,
}

/// The ends of an interval.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Range {
    pub low: f64,
    pub high: f64,
}

/// The comparison (`--json` output of `blaster compare`).
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub schema_version: u32,
    pub mode: &'static str,
    pub base: String,
    pub new: String,
    pub base_valid: bool,
    pub new_valid: bool,
    /// `--confidence`.
    pub level: f64,
    /// [`crate::metrics::ci::METHOD`].
    pub method: &'static str,
    pub rows: Vec<Row>,
    /// Whether any limited metric crossed its limit beyond the intervals (exit code 4).
    pub regressed: bool,
}

/// Latency percentiles shown when `--percentiles` is not given.
pub const DEFAULT_PERCENTILES: [&str; 6] = ["p50", "p90", "p99", "p99.9", "p99.99", "max"];

/// Why two runs are not compared: they ran different workloads.
pub fn check_same_workload(base: &RunFigures, new: &RunFigures) -> Result<(), String> {
    if base.workload == new.workload {
        return Ok(());
    }
    Err(format!(
        "BASE is a {} run and NEW a {} run: runs of different workloads are not compared",
        base.workload, new.workload
    ))
}

/// Whether `new` is worse than `base` by more than `lim` percent (points for errors):
/// latency higher, rate lower, errors higher.
fn beyond(m: Metric, base: f64, new: f64, lim: f64) -> bool {
    match m {
        Metric::Latency(_) => new > base * (1.0 + lim / 100.0),
        Metric::Rate => new < base * (1.0 - lim / 100.0),
        Metric::ErrorRatio => (new - base) * 100.0 > lim,
    }
}

/// Compares `new` against `base`: a row per latency metric in `shown` and per limit
/// (in that order, no duplicates), then rate and errors; each decided with the
/// intervals at `level`.
pub fn compare(
    base_name: &str,
    base: &RunFigures,
    new_name: &str,
    new: &RunFigures,
    shown: &[Metric],
    limits: &[Limit],
    level: f64,
) -> Comparison {
    let mut metrics: Vec<Metric> = Vec::new();
    let latency_limited = limits
        .iter()
        .map(|l| l.metric)
        .filter(|m| matches!(m, Metric::Latency(_)));
    for m in shown.iter().copied().chain(latency_limited) {
        if !metrics.contains(&m) {
            metrics.push(m);
        }
    }
    metrics.sort_by(|a, b| match (a, b) {
        (Metric::Latency(x), Metric::Latency(y)) => x.total_cmp(y),
        _ => std::cmp::Ordering::Equal,
    });
    metrics.extend([Metric::Rate, Metric::ErrorRatio]);
    let rows: Vec<Row> = metrics
        .into_iter()
        .map(|m| {
            let (b, n) = (base.value(m), new.value(m));
            let change = match m {
                Metric::ErrorRatio => Some((n - b) * 100.0),
                _ if b > 0.0 => Some((n - b) / b * 100.0),
                _ => None,
            };
            let limit = limits.iter().find(|l| l.metric == m).map(|l| l.percent);
            let (bi, ni) = (base.interval(m, level), new.interval(m, level));
            let no_interval = match (&bi, &ni) {
                (Err(w), _) => Some(format!("base: {w}")),
                (_, Err(w)) => Some(format!("new: {w}")),
                _ => None,
            };
            let (bi, ni) = (bi.ok(), ni.ok());
            // The worst case for BASE and the best case for NEW: NEW is worse beyond
            // `lim` only if even these are. Without intervals, the estimates.
            let apart = |lim: f64| match (bi, ni) {
                (Some((bl, bh)), Some((nl, nh))) => match m {
                    Metric::Rate => beyond(m, bl, nh, lim),
                    _ => beyond(m, bh, nl, lim),
                },
                _ => beyond(m, b, n, lim),
            };
            // Better, the other way round.
            let better = match (bi, ni) {
                (Some((bl, bh)), Some((nl, nh))) => match m {
                    Metric::Rate => nl > bh,
                    _ => nh < bl,
                },
                _ => false,
            };
            let regressed = limit.is_some_and(apart);
            let verdict = if regressed {
                "regressed"
            } else if limit.is_none_or(|lim| !beyond(m, b, n, lim)) && apart(0.0) {
                "worse"
            } else if better {
                "better"
            } else if b == n {
                "same"
            } else {
                "within noise"
            };
            let range = |x: Option<(f64, f64)>| x.map(|(low, high)| Range { low, high });
            Row {
                metric: m.name(),
                base: b,
                new: n,
                base_ci: range(bi),
                new_ci: range(ni),
                no_interval,
                change_percent: change,
                limit_percent: limit.map(|l| if m == Metric::Rate { -l } else { l }),
                regressed,
                verdict,
            }
        })
        .collect();
    Comparison {
        schema_version: SCHEMA_VERSION,
        mode: "compare",
        base: base_name.to_string(),
        new: new_name.to_string(),
        base_valid: base.valid,
        new_valid: new.valid,
        level,
        method: crate::metrics::ci::METHOD,
        regressed: rows.iter().any(|r| r.regressed),
        rows,
    }
}

fn show(metric: &str, v: f64) -> String {
    match metric {
        "rate" => format!("{}/s", fmt_rate(v)),
        "errors" => format!("{:.3}%", v * 100.0),
        _ => fmt_ns(v as u64),
    }
}

/// A figure with its interval: `1.40 ms [1.38, 1.41]`, `1999/s [1996, 2006]`.
fn show_ci(metric: &str, v: f64, ci: Option<Range>) -> String {
    let Some(r) = ci else {
        return show(metric, v);
    };
    let ends = match metric {
        "rate" => format!("[{}, {}]", fmt_rate(r.low), fmt_rate(r.high)),
        "errors" => format!("[{:.3}, {:.3}]", r.low * 100.0, r.high * 100.0),
        _ => crate::units::fmt_ns_interval(v as u64, r.low as u64, r.high as u64),
    };
    format!("{} {ends}", show(metric, v))
}

/// The side-by-side table.
pub fn render(c: &Comparison) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "base: {}\nnew:  {}", c.base, c.new);
    for (name, valid) in [("base", c.base_valid), ("new", c.new_valid)] {
        if !valid {
            let _ = writeln!(
                s,
                "warning: the {name} run is INVALID (its generator fell behind): its figures \
                 describe the generator, not the target"
            );
        }
    }
    let _ = writeln!(
        s,
        "{:<18} {:<28} {:<28} {:>10} {:>8}  verdict",
        "metric", "base", "new", "change", "limit"
    );
    for r in &c.rows {
        let latency = !matches!(r.metric.as_str(), "rate" | "errors");
        let name = if latency {
            format!("latency {}", r.metric)
        } else {
            r.metric.clone()
        };
        let unit = if r.metric == "errors" { " pt" } else { "%" };
        let change = r
            .change_percent
            .map_or("-".to_string(), |c| format!("{c:+.1}{unit}"));
        let limit = r.limit_percent.map_or(String::new(), |l| {
            format!("{l}{}", if r.metric == "errors" { " pt" } else { "%" })
        });
        let mut verdict = match (r.limit_percent, r.verdict) {
            (Some(_), "regressed") => "REGRESSED".to_string(),
            (Some(_), "worse" | "better" | "same") => format!("ok ({})", r.verdict),
            (Some(_), v) => format!("ok ({v})"),
            (None, v) => v.to_string(),
        };
        if r.no_interval.is_some() && r.metric != "max" {
            verdict += " (no interval: on the estimates)";
        }
        let _ = writeln!(
            s,
            "{name:<18} {:<28} {:<28} {change:>10} {limit:>8}  {verdict}",
            show_ci(&r.metric, r.base, r.base_ci),
            show_ci(&r.metric, r.new, r.new_ci)
        );
    }
    let _ = writeln!(
        s,
        "[brackets]: {:.0}% confidence intervals, {} (errors in percent)",
        c.level * 100.0,
        c.method
    );
    let limited = c.rows.iter().any(|r| r.limit_percent.is_some());
    let apart: Vec<String> = (c.rows.iter())
        .filter(|r| matches!(r.verdict, "worse" | "better"))
        .map(|r| format!("{} {}", r.metric, r.verdict))
        .collect();
    let _ = writeln!(
        s,
        "{}",
        if c.regressed {
            "REGRESSED: NEW crossed a --max-regression limit, beyond both runs' intervals"
                .to_string()
        } else if !limited && !apart.is_empty() {
            format!(
                "beyond noise: {} (no --max-regression limit, so no gate)",
                apart.join(", ")
            )
        } else if limited {
            "within noise: no limited figure is worse beyond its limit and both intervals"
                .to_string()
        } else {
            "within noise: no figure differs beyond the intervals".to_string()
        }
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(latency_us: &[u64], rate: f64, errors: u64) -> RunFigures {
        let mut h = crate::metrics::Histograms::new().latency;
        for &v in latency_us {
            h.record(v * 1_000).unwrap();
        }
        RunFigures {
            latency: h,
            achieved_rps: rate,
            intended_rps: rate,
            dispatched: 10_000,
            completed: 10_000 - errors,
            errors,
            valid: true,
            target: "t".into(),
            workload: "tcp echo requests".into(),
            seed: 1,
            parts: None,
        }
    }

    /// A run of `k` seconds of 2,000 requests each, exponential latencies of mean
    /// `mean_us` (seeded by `seed`), with its per-second units.
    fn sampled(seed: u64, mean_us: f64, k: usize) -> RunFigures {
        let mut rng = fastrand::Rng::with_seed(seed);
        let starts: Vec<u64> = (0..k as u64).collect();
        let mut b = Builder::new(&starts, k as u64);
        let mut total = crate::metrics::Histograms::new().latency;
        for i in 0..k {
            let mut h = crate::metrics::Histograms::new().latency;
            for _ in 0..2_000 {
                let v = -(1.0 - rng.f64()).ln() * mean_us * 1e3;
                h.record(v.max(1.0) as u64).unwrap();
            }
            total.add(&h).unwrap();
            b.counts(i, 2_000, 0, 1.0);
            b.histogram(i, 0, Some(&h));
        }
        RunFigures {
            latency: total,
            achieved_rps: 2_000.0,
            intended_rps: 2_000.0,
            dispatched: 2_000 * k as u64,
            completed: 2_000 * k as u64,
            errors: 0,
            valid: true,
            target: "t".into(),
            workload: "tcp echo requests".into(),
            seed,
            parts: Some(b.parts()),
        }
    }

    /// Issue 33 item 5: two runs of one distribution are within noise even where
    /// their estimates differ by more than a tight limit; 20% slower is a regression.
    #[test]
    fn the_intervals_decide() {
        let limits = parse_limits("p50=1%,p90=1%").unwrap();
        let base = sampled(1, 1_000.0, 6);
        let mut noisy = 0;
        for seed in 2..12 {
            let same = sampled(seed, 1_000.0, 6);
            let c = compare("a", &base, "b", &same, &[], &limits, 0.95);
            assert!(!c.regressed, "{}", render(&c));
            noisy += c
                .rows
                .iter()
                .filter(|r| r.verdict == "within noise")
                .count();
        }
        // Some estimate crossed 1% in some run: the intervals kept it from counting.
        assert!(noisy > 0);
        let slower = sampled(99, 1_200.0, 6);
        let c = compare("a", &base, "b", &slower, &[], &limits, 0.95);
        assert!(c.regressed, "{}", render(&c));
        let text = render(&c);
        assert!(text.contains("REGRESSED") && text.contains("["), "{text}");
        // Faster is no regression.
        let c = compare("a", &slower, "b", &base, &[], &limits, 0.95);
        assert!(!c.regressed, "{}", render(&c));
        assert_eq!(c.rows[0].verdict, "better");
    }

    #[test]
    fn runs_of_different_workloads_are_not_compared() {
        let a = figures(&[100], 1.0, 0);
        let mut b = figures(&[100], 1.0, 0);
        assert!(check_same_workload(&a, &b).is_ok());
        b.workload = "tcp frames".into();
        let e = check_same_workload(&a, &b).unwrap_err();
        assert!(
            e.contains("tcp echo requests") && e.contains("tcp frames"),
            "{e}"
        );
    }

    #[test]
    fn parses_the_documented_spec() {
        let l = parse_limits("p99=15%,p99.9=25%,errors=0.1%,rate=-1%").unwrap();
        assert_eq!(l[0].metric, Metric::Latency(99.0));
        assert_eq!(l[1].metric, Metric::Latency(99.9));
        assert_eq!(
            l[2],
            Limit {
                metric: Metric::ErrorRatio,
                percent: 0.1
            }
        );
        assert_eq!(
            l[3],
            Limit {
                metric: Metric::Rate,
                percent: 1.0
            }
        );
        assert_eq!(Metric::parse("p99.99").unwrap().name(), "p99.99");
    }

    #[test]
    fn bad_specs_are_errors() {
        for bad in [
            "",
            "p99",
            "p99=15",
            "p99=x%",
            "q99=1%",
            "p0=1%",
            "p101=1%",
            "p99=-5%",
            "p99=1%,p99=2%",
            "p99=1%,",
            "errors=inf%",
        ] {
            assert!(parse_limits(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn latency_regression_beyond_the_limit_is_flagged() {
        let base = figures(&[100; 100], 1000.0, 0);
        let slower = figures(&[120; 100], 1000.0, 0);
        let limits = parse_limits("p99=15%").unwrap();
        let c = compare("a", &base, "b", &slower, &[], &limits, 0.95);
        assert!(c.regressed);
        let c = compare("a", &base, "b", &base, &[], &limits, 0.95);
        assert!(!c.regressed);
        // 10% slower passes a 15% limit.
        let c = compare(
            "a",
            &base,
            "b",
            &figures(&[110; 100], 1000.0, 0),
            &[],
            &limits,
            0.95,
        );
        assert!(!c.regressed, "{}", render(&c));
    }

    #[test]
    fn rate_drop_and_error_points() {
        let base = figures(&[100], 1000.0, 0);
        let limits = parse_limits("rate=-1%,errors=0.1%").unwrap();
        let regressed =
            |new: RunFigures| compare("a", &base, "b", &new, &[], &limits, 0.95).regressed;
        assert!(regressed(figures(&[100], 985.0, 0)));
        assert!(!regressed(figures(&[100], 995.0, 0)));
        // 20 errors of 10,000 = 0.2 points more than none.
        assert!(regressed(figures(&[100], 1000.0, 20)));
        assert!(!regressed(figures(&[100], 1000.0, 5)));
    }

    #[test]
    fn any_percentile_comes_from_the_histogram() {
        let mut lat = vec![100u64; 9_990];
        lat.extend([50_000; 10]);
        let base = figures(&lat, 1.0, 0);
        let shown = [
            Metric::parse("p99").unwrap(),
            Metric::parse("p99.99").unwrap(),
        ];
        let c = compare("a", &base, "b", &base, &shown, &[], 0.95);
        let row = |m: &str| c.rows.iter().find(|r| r.metric == m).unwrap().base;
        // Ten requests in 10,000 took 50 ms: p99.99 sees them, p99 does not.
        assert!(row("p99.99") >= 49e6, "{}", row("p99.99"));
        assert!(row("p99") < 101e3, "{}", row("p99"));
    }
}
