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
//! Pure: parsing, loading from a parsed JSON value, comparing and rendering; the command
//! in `cmd` reads the files and maps the outcome to the exit code.

use crate::report::SCHEMA_VERSION;
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
#[derive(Debug, Clone)]
pub struct RunFigures {
    pub latency: Histogram<u64>,
    pub achieved_rps: f64,
    pub intended_rps: f64,
    pub dispatched: u64,
    pub errors: u64,
    pub valid: bool,
    pub target: String,
}

impl RunFigures {
    pub fn error_ratio(&self) -> f64 {
        self.errors as f64 / self.dispatched.max(1) as f64
    }

    /// The figures of a run report read back and checked by [`crate::report::input`]
    /// (its histograms already decoded, within their bounds).
    pub fn of(r: &CheckedRun) -> RunFigures {
        let i = &r.input;
        RunFigures {
            latency: r.latency().clone(),
            achieved_rps: i.rate.achieved_rps,
            intended_rps: i.rate.intended_rps,
            dispatched: i.requests.dispatched,
            errors: i.requests.errors,
            valid: i.valid,
            target: i.target.clone(),
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
    /// Latency and rate: (new - base) / base, percent (`null` when base is 0); errors:
    /// new - base in percentage points.
    pub change_percent: Option<f64>,
    /// The `--max-regression` limit, percent as given (rate: the allowed drop).
    pub limit_percent: Option<f64>,
    pub regressed: bool,
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
    pub rows: Vec<Row>,
    /// Whether any limited metric crossed its limit (exit code 4).
    pub regressed: bool,
}

/// Latency percentiles shown when `--percentiles` is not given.
pub const DEFAULT_PERCENTILES: [&str; 6] = ["p50", "p90", "p99", "p99.9", "p99.99", "max"];

/// Compares `new` against `base`: a row per latency metric in `shown` and per limit
/// (in that order, no duplicates), then rate and errors.
pub fn compare(
    base_name: &str,
    base: &RunFigures,
    new_name: &str,
    new: &RunFigures,
    shown: &[Metric],
    limits: &[Limit],
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
            let regressed = limit.is_some_and(|lim| match m {
                Metric::Latency(_) => n > b * (1.0 + lim / 100.0),
                Metric::Rate => n < b * (1.0 - lim / 100.0),
                Metric::ErrorRatio => (n - b) * 100.0 > lim,
            });
            Row {
                metric: m.name(),
                base: b,
                new: n,
                change_percent: change,
                limit_percent: limit.map(|l| if m == Metric::Rate { -l } else { l }),
                regressed,
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
        "{:<10} {:>12} {:>12} {:>10} {:>8}  verdict",
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
        let verdict = match (r.limit_percent, r.regressed) {
            (None, _) => "",
            (Some(_), false) => "ok",
            (Some(_), true) => "REGRESSED",
        };
        let _ = writeln!(
            s,
            "{name:<18} {:>12} {:>12} {change:>10} {limit:>8}  {verdict}",
            show(&r.metric, r.base),
            show(&r.metric, r.new)
        );
    }
    let _ = writeln!(
        s,
        "{}",
        if c.regressed {
            "REGRESSED: NEW crossed a --max-regression limit"
        } else {
            "no limit crossed"
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
            errors,
            valid: true,
            target: "t".into(),
        }
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
        let c = compare("a", &base, "b", &slower, &[], &limits);
        assert!(c.regressed);
        let c = compare("a", &base, "b", &base, &[], &limits);
        assert!(!c.regressed);
        // 10% slower passes a 15% limit.
        let c = compare(
            "a",
            &base,
            "b",
            &figures(&[110; 100], 1000.0, 0),
            &[],
            &limits,
        );
        assert!(!c.regressed, "{}", render(&c));
    }

    #[test]
    fn rate_drop_and_error_points() {
        let base = figures(&[100], 1000.0, 0);
        let limits = parse_limits("rate=-1%,errors=0.1%").unwrap();
        assert!(compare("a", &base, "b", &figures(&[100], 985.0, 0), &[], &limits).regressed);
        assert!(!compare("a", &base, "b", &figures(&[100], 995.0, 0), &[], &limits).regressed);
        // 20 errors of 10,000 = 0.2 points more than none.
        assert!(compare("a", &base, "b", &figures(&[100], 1000.0, 20), &[], &limits).regressed);
        assert!(!compare("a", &base, "b", &figures(&[100], 1000.0, 5), &[], &limits).regressed);
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
        let c = compare("a", &base, "b", &base, &shown, &[]);
        let row = |m: &str| c.rows.iter().find(|r| r.metric == m).unwrap().base;
        // Ten requests in 10,000 took 50 ms: p99.99 sees them, p99 does not.
        assert!(row("p99.99") >= 49e6, "{}", row("p99.99"));
        assert!(row("p99") < 101e3, "{}", row("p99"));
    }
}
