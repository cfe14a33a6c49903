//! Service-level objectives: `--slo 'p99<20ms,errors<0.1%'`, parsed once into an
//! [`Slo`] and judged against a finished run.
//!
//! Grammar (whitespace is ignored, terms are separated by commas, every term must hold):
//!
//! ```text
//! spec     = term ("," term)*
//! term     = latency "<" duration      latency percentile below a bound
//!          | "errors" "<" percent       errored / dispatched requests below a share
//!          | "achieved" ">" percent     achieved / intended rate above a share
//!          | "deviation_" latency "<" duration
//!                                       frame arrival deviation percentile below a
//!                                       bound (`--workload frames`)
//!          | "retention" ">" percent    frames received / expected above a share
//!                                       (`--workload frames`)
//! latency  = "max" | "p" digits ["." digits]
//! duration = every flag's duration grammar (humantime), e.g. 20ms, 1.5ms, 500us, 2s
//! percent  = number "%"
//! ```
//!
//! Percentiles: `p50`, `p90`, `p99`, `p99.9` are what they say; without a dot, digits
//! after a leading `99` are decimals (`p999` = p99.9, `p9999` = p99.99), as in the
//! report's keys. Any percentile works (`p75`, `p99.95`): it is read from the merged
//! latency histogram, not from a fixed list.
//!
//! Judging is strict and pessimistic: a term with no samples is "not met (no samples)"
//! -- a latency term of a run with no successful reply (error replies are not in the
//! latency histogram), `errors` when nothing was due, `achieved>X%` without an
//! intended rate, `retention` when no frame was expected. A run that measured nothing
//! cannot prove it met a bound.
//!
//! A frames run answers no requests: its terms are `deviation_*` and `retention` (and
//! `errors`), and a request-latency or `achieved` term is refused for it, as a frame
//! term is for request/response ([`Slo::check_workload`]).

use crate::report::Report;
use crate::units::fmt_ns;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::fmt::Write;

/// Which figure a term bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    /// Latency (done - intended) at a percentile in (0, 100).
    Percentile(f64),
    /// The largest latency recorded.
    Max,
    /// Errored requests as a share of dispatched requests.
    Errors,
    /// Achieved rate as a share of the intended rate.
    Achieved,
    /// Frame arrival deviation at a percentile in (0, 100), or 100 for the largest
    /// (`deviation_p99`, `deviation_max`).
    Deviation(f64),
    /// Frames received / frames expected (`--workload frames`).
    Retention,
}

impl Metric {
    /// Whether the term bounds a figure of `--workload frames`.
    pub fn is_frames(self) -> bool {
        matches!(self, Metric::Deviation(_) | Metric::Retention)
    }

    /// Whether the term bounds a figure only request/response has.
    pub fn is_requests(self) -> bool {
        matches!(self, Metric::Percentile(_) | Metric::Max | Metric::Achieved)
    }
}

/// One term: a metric and its bound (ns for latency, a ratio in (0, 1] otherwise).
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    /// The term as written, whitespace removed, e.g. `p99<20ms`.
    pub text: String,
    pub metric: Metric,
    pub limit: f64,
}

/// A parsed `--slo` spec: every term must hold for the run to meet it.
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    /// The spec as written, whitespace removed.
    pub spec: String,
    pub terms: Vec<Term>,
}

/// A figure of a verdict: nanoseconds for latency terms, a ratio for the others.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Amount {
    Ns(u64),
    Ratio(f64),
}

/// One term judged against a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TermVerdict {
    pub term: String,
    /// `ns` (limit and measured in nanoseconds) or `ratio` (0..1).
    pub unit: &'static str,
    pub limit: Amount,
    /// `None` when the run has nothing to measure it with (no latency samples, or no
    /// intended rate); the term is then broken.
    pub measured: Option<Amount>,
    pub met: bool,
}

/// A run judged against an [`Slo`]; the `slo` block of the JSON report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub spec: String,
    pub met: bool,
    pub terms: Vec<TermVerdict>,
}

/// The figures of a run that an SLO is judged on.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// Merged latency (done - intended) of the whole run.
    pub latency: &'a Histogram<u64>,
    pub dispatched: u64,
    pub errors: u64,
    pub intended_rps: f64,
    pub achieved_rps: f64,
    /// `--workload frames`: the merged arrival deviation.
    pub deviation: Option<&'a Histogram<u64>>,
    /// `--workload frames`: received / expected (`None` when nothing was expected).
    pub retention: Option<f64>,
}

impl<'a> Observed<'a> {
    /// The figures of a finished run.
    pub fn of(r: &'a Report) -> Self {
        Observed {
            latency: &r.histograms.latency,
            dispatched: r.requests.dispatched,
            errors: r.requests.errors,
            intended_rps: r.rate.intended_rps,
            achieved_rps: r.rate.achieved_rps,
            deviation: r.frames.as_ref().map(|_| &r.histograms.frame_deviation),
            retention: r
                .frames
                .as_ref()
                .filter(|f| f.expected > 0)
                .map(|f| f.retention),
        }
    }
}

impl Slo {
    /// Parses a spec; the error is one line without the flag name (the caller adds
    /// `--slo: `).
    pub fn parse(spec: &str) -> Result<Slo, String> {
        let compact: String = spec.chars().filter(|c| !c.is_whitespace()).collect();
        if compact.is_empty() {
            return Err("expected terms such as p99<20ms,errors<0.1%, got an empty spec".into());
        }
        let mut terms: Vec<Term> = Vec::new();
        for text in compact.split(',') {
            if text.is_empty() {
                return Err(format!("empty term in {compact:?}"));
            }
            let term = parse_term(text)?;
            if terms.iter().any(|t| t.metric == term.metric) {
                return Err(format!("{text:?}: {} is bounded twice", metric_name(text)));
            }
            terms.push(term);
        }
        Ok(Slo {
            spec: compact,
            terms,
        })
    }

    /// Refuses terms the workload has no figure for: a request-latency or `achieved`
    /// term for `--workload frames`, a `deviation_*` or `retention` term without it.
    /// The error is one line without the flag name.
    pub fn check_workload(&self, frames: bool) -> Result<(), String> {
        for t in &self.terms {
            if frames && t.metric.is_requests() {
                return Err(format!(
                    "{:?}: --workload frames answers no requests; bound deviation_p99, retention or errors",
                    t.text
                ));
            }
            if !frames && t.metric.is_frames() {
                return Err(format!("{:?}: needs --workload frames", t.text));
            }
        }
        Ok(())
    }

    /// Judges the run's figures against every term.
    pub fn judge(&self, o: &Observed) -> Verdict {
        let terms: Vec<TermVerdict> = self.terms.iter().map(|t| judge_term(t, o)).collect();
        Verdict {
            spec: self.spec.clone(),
            met: terms.iter().all(|t| t.met),
            terms,
        }
    }
}

/// `--abort-if 'errors>5% for 10s'`: a condition on the live per-second figures that
/// stops the run when it held for `seconds` seconds in a row. The condition is an SLO
/// term turned round (`errors>5%` breaks `errors<5%`, `achieved<90%` breaks
/// `achieved>90%`), judged on each second's figures alone; a second with nothing to
/// judge by (no latency sample, nothing due) neither holds nor breaks the streak.
#[derive(Debug, Clone, PartialEq)]
pub struct AbortIf {
    /// The condition as written, whitespace removed, e.g. `errors>5%for10s`.
    pub text: String,
    /// What must keep holding: the condition turned round, e.g. `errors<5%`.
    pub hold: Term,
    pub seconds: u64,
}

/// The longest `for` of an `--abort-if`.
const ABORT_SECONDS_MAX: u64 = 3_600;

impl AbortIf {
    /// Parses `CONDITION for DURATION`; the error is one line without the flag name.
    pub fn parse(spec: &str) -> Result<AbortIf, String> {
        let compact: String = spec.chars().filter(|c| !c.is_whitespace()).collect();
        let usage = || {
            format!(
                "{spec:?}: expected CONDITION for DURATION, e.g. 'errors>5% for 10s', \
                 'p99>200ms for 30s' or 'achieved<90% for 5s'"
            )
        };
        let (cond, window) = compact.split_once("for").ok_or_else(usage)?;
        if cond.is_empty() || window.is_empty() {
            return Err(usage());
        }
        let turned: String = cond
            .chars()
            .map(|c| match c {
                '<' => '>',
                '>' => '<',
                c => c,
            })
            .collect();
        let hold = parse_term(&turned).map_err(|m| {
            if turned.contains(['<', '>']) && m.contains("bound") {
                format!(
                    "{cond:?}: a latency or errors condition is a floor crossed (p99>200ms, \
                     errors>5%), achieved and retention a ceiling fallen under \
                     (achieved<90%, retention<99%)"
                )
            } else {
                m.replace(&turned, cond)
            }
        })?;
        let ns = crate::units::parse_duration(window)
            .map_err(|m| format!("{spec:?}: {m}"))?
            .as_nanos();
        if !(1_000_000_000..=u128::from(ABORT_SECONDS_MAX) * 1_000_000_000).contains(&ns) {
            return Err(format!(
                "{spec:?}: the condition is judged per second: for 1s to for {ABORT_SECONDS_MAX}s"
            ));
        }
        Ok(AbortIf {
            text: compact.clone(),
            hold,
            seconds: ns.div_ceil(1_000_000_000) as u64,
        })
    }

    /// Whether one second's figures break the hold condition; `None` when they have
    /// nothing to judge it by.
    pub fn broken(&self, o: &Observed) -> Option<bool> {
        let v = judge_term(&self.hold, o);
        v.measured.map(|_| !v.met)
    }

    /// The condition as the user wrote it, spaced: `errors>5% for 10s`.
    pub fn condition(&self) -> String {
        let (cond, window) = self.text.split_once("for").unwrap_or((&self.text, ""));
        format!("{cond} for {window}")
    }
}

/// The metric's name as written (`p99`, `errors`), for messages.
fn metric_name(text: &str) -> &str {
    text.split(['<', '>']).next().unwrap_or(text)
}

fn parse_term(text: &str) -> Result<Term, String> {
    let Some(op_at) = text.find(['<', '>']) else {
        return Err(format!(
            "{text:?}: expected a bound such as p99<20ms, errors<0.1% or achieved>97%"
        ));
    };
    let (name, op, value) = (&text[..op_at], &text[op_at..=op_at], &text[op_at + 1..]);
    let metric = match name {
        "errors" => Metric::Errors,
        "achieved" => Metric::Achieved,
        "retention" => Metric::Retention,
        _ => match name.strip_prefix("deviation_") {
            Some(p) => match parse_latency_metric(p).map_err(|m| format!("{text:?}: {m}"))? {
                Metric::Percentile(p) => Metric::Deviation(p),
                _ => Metric::Deviation(100.0),
            },
            None => parse_latency_metric(name).map_err(|m| format!("{text:?}: {m}"))?,
        },
    };
    let lower = matches!(metric, Metric::Achieved | Metric::Retention);
    let want = if lower { ">" } else { "<" };
    if op != want {
        return Err(match metric {
            Metric::Achieved => format!(
                "{text:?}: achieved is a lower bound on achieved/intended rate: achieved>97%"
            ),
            Metric::Retention => format!(
                "{text:?}: retention is a lower bound on received/expected frames: retention>99.9%"
            ),
            Metric::Errors => format!("{text:?}: errors is an upper bound: errors<0.1%"),
            _ => format!("{text:?}: a latency limit is an upper bound: {name}<20ms"),
        });
    }
    let limit = match metric {
        Metric::Errors | Metric::Achieved | Metric::Retention => {
            let r = parse_percent(value).map_err(|m| format!("{text:?}: {m}"))?;
            if metric == Metric::Errors && r <= 0.0 {
                return Err(format!(
                    "{text:?}: errors<0% can never hold; use a small share such as errors<0.001%"
                ));
            }
            r
        }
        _ => parse_duration_ns(value).map_err(|m| format!("{text:?}: {m}"))? as f64,
    };
    Ok(Term {
        text: text.to_string(),
        metric,
        limit,
    })
}

/// `max`, `p50`, `p99.9`, `p999` (= p99.9), `p100` (= max).
fn parse_latency_metric(name: &str) -> Result<Metric, String> {
    let bad = || {
        format!(
            "unknown metric {name:?}: expected a percentile such as p50, p99, p99.9 (p999) or \
             max, errors, achieved, deviation_p99 (deviation_max) or retention"
        )
    };
    if name == "max" {
        return Ok(Metric::Max);
    }
    let digits = name.strip_prefix('p').ok_or_else(bad)?;
    let well_formed = !digits.is_empty()
        && !digits.starts_with('.')
        && !digits.ends_with('.')
        && digits.chars().filter(|&c| c == '.').count() <= 1
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.');
    if !well_formed {
        return Err(bad());
    }
    let percent: f64 = if digits.contains('.') || digits.len() <= 2 || digits == "100" {
        digits.parse().map_err(|_| bad())?
    } else if let Some(rest) = digits.strip_prefix("99") {
        format!("99.{rest}").parse().map_err(|_| bad())?
    } else {
        return Err(bad());
    };
    if percent == 100.0 {
        return Ok(Metric::Max);
    }
    if !(percent > 0.0 && percent < 100.0) {
        return Err(format!("{name:?}: a percentile must be between 0 and 100"));
    }
    Ok(Metric::Percentile(percent))
}

/// `0.1%` -> 0.001. The share must be in [0, 100]%.
fn parse_percent(s: &str) -> Result<f64, String> {
    let bad = || format!("expected a percentage such as 0.1% or 97%, got {s:?}");
    let v: f64 = s
        .strip_suffix('%')
        .ok_or_else(bad)?
        .parse()
        .map_err(|_| bad())?;
    if !(0.0..=100.0).contains(&v) {
        return Err(format!(
            "a percentage must be between 0% and 100%, got {s:?}"
        ));
    }
    Ok(v / 100.0)
}

/// A latency limit in the one duration grammar ([`crate::units::parse_duration`]):
/// `20ms`, `1.5ms`, `500us`, `500µs`, `2s`, `800ns` -> nanoseconds, from 1 ns to the
/// histogram's ceiling.
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let ns = crate::units::parse_duration(s)?.as_nanos();
    if ns < 1 {
        return Err(format!("a latency limit must be at least 1ns, got {s:?}"));
    }
    if ns > u128::from(crate::limits::HISTOGRAM_NS_MAX) {
        return Err(format!(
            "a latency limit must be at most {}, got {s:?}",
            fmt_ns(crate::limits::HISTOGRAM_NS_MAX)
        ));
    }
    Ok(ns as u64)
}

/// Percent -> quantile, rounded so that `p99.9` reads exactly the quantile 0.999 the
/// report prints (99.9 / 100 is 0.9990000000000001, one sample higher in 1000).
fn quantile(percent: f64) -> f64 {
    (percent * 1e6).round() / 1e8
}

fn judge_term(t: &Term, o: &Observed) -> TermVerdict {
    let (unit, limit, measured, met) = match t.metric {
        Metric::Percentile(_) | Metric::Max => {
            let limit = t.limit as u64;
            let measured = (!o.latency.is_empty()).then(|| match t.metric {
                Metric::Percentile(p) => o.latency.value_at_quantile(quantile(p)),
                _ => o.latency.max(),
            });
            let met = measured.is_some_and(|m| m < limit);
            ("ns", Amount::Ns(limit), measured.map(Amount::Ns), met)
        }
        Metric::Errors => {
            // Nothing due: no share to judge, so the bound is not met (no samples).
            let r = (o.dispatched > 0).then(|| o.errors as f64 / o.dispatched as f64);
            let met = r.is_some_and(|r| r < t.limit);
            ("ratio", Amount::Ratio(t.limit), r.map(Amount::Ratio), met)
        }
        Metric::Achieved => {
            let r = (o.intended_rps.is_finite() && o.intended_rps > 0.0)
                .then(|| o.achieved_rps / o.intended_rps);
            let met = r.is_some_and(|r| r > t.limit);
            ("ratio", Amount::Ratio(t.limit), r.map(Amount::Ratio), met)
        }
        Metric::Deviation(p) => {
            let limit = t.limit as u64;
            let measured = o.deviation.filter(|h| !h.is_empty()).map(|h| {
                if p >= 100.0 {
                    h.max()
                } else {
                    h.value_at_quantile(quantile(p))
                }
            });
            let met = measured.is_some_and(|m| m < limit);
            ("ns", Amount::Ns(limit), measured.map(Amount::Ns), met)
        }
        Metric::Retention => {
            let met = o.retention.is_some_and(|r| r > t.limit);
            (
                "ratio",
                Amount::Ratio(t.limit),
                o.retention.map(Amount::Ratio),
                met,
            )
        }
    };
    TermVerdict {
        term: t.text.clone(),
        unit,
        limit,
        measured,
        met,
    }
}

/// A figure in human form: `12.3 ms`, `0.012%`.
fn fmt_amount(a: Option<Amount>) -> String {
    match a {
        None => "n/a".to_string(),
        Some(Amount::Ns(ns)) => fmt_ns(ns),
        Some(Amount::Ratio(r)) => format!("{:.3}%", r * 100.0),
    }
}

impl TermVerdict {
    /// `p99<20ms: measured 31.2 ms, limit 20.00 ms: BROKEN`; a term with nothing to
    /// measure it by: `p99<20ms: not met (no samples)`.
    pub fn line(&self) -> String {
        if self.measured.is_none() {
            return format!("{}: not met (no samples)", self.term);
        }
        format!(
            "{}: measured {}, limit {}: {}",
            self.term,
            fmt_amount(self.measured),
            fmt_amount(Some(self.limit)),
            if self.met { "met" } else { "BROKEN" }
        )
    }
}

/// The run report as written to JSON: the [`Report`]'s keys, plus `slo` when the run
/// was judged against `--slo`.
#[derive(Debug, Clone, Serialize)]
pub struct RunOutput<'a> {
    #[serde(flatten)]
    pub report: &'a Report,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo: Option<&'a Verdict>,
}

impl Verdict {
    /// The terms that broke, as written, e.g. `p99<20ms, errors<0.1%`.
    pub fn broken_terms(&self) -> String {
        let broken: Vec<&str> = self
            .terms
            .iter()
            .filter(|t| !t.met)
            .map(|t| t.term.as_str())
            .collect();
        broken.join(", ")
    }

    /// The verdict block of the text report: one line per term, then the outcome.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "slo {}:", self.spec);
        for t in &self.terms {
            let _ = writeln!(s, "  {}", t.line());
        }
        if self.met {
            let _ = writeln!(s, "slo: MET");
        } else {
            let _ = writeln!(
                s,
                "slo: BROKEN ({}) (exit code 4 unless the run is invalid)",
                self.broken_terms()
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        for &v in values {
            h.record(v).unwrap();
        }
        h
    }

    fn observed(h: &Histogram<u64>) -> Observed<'_> {
        Observed {
            latency: h,
            dispatched: 10_000,
            errors: 5,
            intended_rps: 1000.0,
            achieved_rps: 990.0,
            deviation: None,
            retention: None,
        }
    }

    fn metric(spec: &str) -> Metric {
        Slo::parse(spec).unwrap().terms[0].metric
    }

    #[test]
    fn abort_conditions_parse_turned_round_and_judge_a_second() {
        let a = AbortIf::parse(" errors > 5% for 10s ").unwrap();
        assert_eq!(
            (a.hold.metric, a.hold.limit, a.seconds),
            (Metric::Errors, 0.05, 10)
        );
        assert_eq!(a.condition(), "errors>5% for 10s");
        let p = AbortIf::parse("p99>200ms for 1.5s").unwrap();
        assert_eq!((p.hold.metric, p.seconds), (Metric::Percentile(99.0), 2));
        let low = AbortIf::parse("achieved<90% for 5s").unwrap();
        assert_eq!(low.hold.metric, Metric::Achieved);
        // Judged on one second: 5 errors of 10,000 hold errors<5%; p99 of 300 ms
        // breaks p99<200ms; a second without latency samples says nothing.
        let h = hist(&[300_000_000; 10]);
        assert_eq!(a.broken(&observed(&h)), Some(false));
        assert_eq!(p.broken(&observed(&h)), Some(true));
        assert_eq!(p.broken(&observed(&hist(&[]))), None);
        let mut o = observed(&h);
        o.errors = 600;
        assert_eq!(a.broken(&o), Some(true));
        // Refused: no window, the wrong way round, a window under a second, a metric
        // that does not exist.
        for (bad, says) in [
            ("errors>5%", "CONDITION for DURATION"),
            ("errors<5% for 10s", "a floor crossed"),
            ("achieved>90% for 10s", "a floor crossed"),
            ("p99>200ms for 500ms", "for 1s to"),
            ("p99>200ms for 2h", "for 1s to"),
            ("bogus>1 for 2s", "unknown metric"),
            ("p99>20xs for 2s", "p99>20xs"),
        ] {
            let e = AbortIf::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn parses_the_documented_forms() {
        let s = Slo::parse(" p99 < 20ms , errors<0.1% ").unwrap();
        assert_eq!(s.spec, "p99<20ms,errors<0.1%");
        assert_eq!(s.terms.len(), 2);
        assert_eq!(s.terms[0].metric, Metric::Percentile(99.0));
        assert_eq!(s.terms[0].limit, 20e6);
        assert_eq!(s.terms[0].text, "p99<20ms");
        assert_eq!(s.terms[1].metric, Metric::Errors);
        assert!((s.terms[1].limit - 0.001).abs() < 1e-12);
        assert_eq!(metric("p50<1ms"), Metric::Percentile(50.0));
        assert_eq!(metric("p90<1ms"), Metric::Percentile(90.0));
        assert_eq!(metric("p99.9<1ms"), Metric::Percentile(99.9));
        assert_eq!(metric("p999<1ms"), Metric::Percentile(99.9));
        assert_eq!(metric("p9999<1ms"), Metric::Percentile(99.99));
        assert_eq!(metric("p75<1ms"), Metric::Percentile(75.0));
        assert_eq!(metric("max<1s"), Metric::Max);
        assert_eq!(metric("p100<1s"), Metric::Max);
        let a = Slo::parse("achieved>97%").unwrap();
        assert_eq!(a.terms[0].metric, Metric::Achieved);
        assert!((a.terms[0].limit - 0.97).abs() < 1e-12);
    }

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration_ns("20ms"), Ok(20_000_000));
        assert_eq!(parse_duration_ns("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_duration_ns("500us"), Ok(500_000));
        assert_eq!(parse_duration_ns("500µs"), Ok(500_000));
        assert_eq!(parse_duration_ns("2s"), Ok(2_000_000_000));
        assert_eq!(parse_duration_ns("800ns"), Ok(800));
        // The grammar every flag uses: minutes too, within the histogram's hour.
        assert_eq!(parse_duration_ns("20min"), Ok(1_200_000_000_000));
        assert_eq!(parse_duration_ns("1h"), Ok(3_600_000_000_000));
        for bad in ["20", "ms", "1.2.3ms", "-1ms", "1.5ns", ""] {
            assert!(parse_duration_ns(bad).is_err(), "{bad:?} accepted");
        }
        assert!(
            parse_duration_ns("0ms")
                .unwrap_err()
                .contains("at least 1ns")
        );
        assert!(parse_duration_ns("2h").is_err());
    }

    #[test]
    fn bad_specs_are_one_line_errors_naming_the_term() {
        let cases = [
            ("", "empty spec"),
            ("p99<20ms,", "empty term"),
            ("p99", "expected a bound"),
            ("p99=20ms", "expected a bound"),
            ("p99>20ms", "upper bound"),
            ("errors>1%", "upper bound"),
            ("achieved<97%", "lower bound"),
            ("p99<20", "expected a duration"),
            ("p99<=20ms", "expected a duration"),
            ("p98.x<1ms", "unknown metric"),
            ("p<1ms", "unknown metric"),
            ("p.9<1ms", "unknown metric"),
            ("p123<1ms", "unknown metric"),
            ("p0<1ms", "between 0 and 100"),
            ("p100.5<1ms", "between 0 and 100"),
            ("latency<1ms", "unknown metric"),
            ("errors<0.1", "expected a percentage"),
            ("errors<0%", "can never hold"),
            ("errors<150%", "between 0% and 100%"),
            ("p99<1ms,p99<2ms", "bounded twice"),
            ("p999<1ms,p99.9<2ms", "bounded twice"),
        ];
        for (spec, needle) in cases {
            let e = Slo::parse(spec).expect_err(spec);
            assert!(e.contains(needle), "{spec:?}: {e:?} lacks {needle:?}");
            assert!(!e.contains('\n'), "{spec:?}: {e:?}");
        }
    }

    #[test]
    fn judges_each_term() {
        // 1000 samples 1..=1000 us: p50 = 500 us, p99 = 990 us, max = 1 ms.
        let values: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        let h = hist(&values);
        let o = observed(&h);
        let v = Slo::parse("p50<600us,p99<900us,max<2ms,errors<0.1%,achieved>98%")
            .unwrap()
            .judge(&o);
        let met: Vec<bool> = v.terms.iter().map(|t| t.met).collect();
        // errors 5/10000 = 0.05% < 0.1%; achieved 99% > 98%.
        assert_eq!(met, [true, false, true, true, true]);
        assert!(!v.met);
        assert_eq!(v.broken_terms(), "p99<900us");
        match v.terms[1].measured {
            Some(Amount::Ns(ns)) => assert!((989_000..=991_000).contains(&ns), "{ns}"),
            m => panic!("{m:?}"),
        }
        assert_eq!(v.terms[1].limit, Amount::Ns(900_000));
        let ok = Slo::parse("p99<1s,errors<1%").unwrap().judge(&o);
        assert!(ok.met);
        assert!(ok.render().contains("slo: MET"));
        let bad = Slo::parse("errors<0.01%,achieved>99.5%").unwrap().judge(&o);
        assert_eq!(bad.broken_terms(), "errors<0.01%, achieved>99.5%");
        assert!(
            bad.render()
                .contains("errors<0.01%: measured 0.050%, limit 0.010%: BROKEN")
        );
    }

    #[test]
    fn percentiles_match_the_report() {
        let values: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        let h = hist(&values);
        let p = crate::report::Percentiles::of(&h);
        assert_eq!(quantile(99.9), 0.999);
        let o = observed(&h);
        let v = Slo::parse("p50<1s,p90<1s,p99<1s,p99.9<1s,p9999<1s,max<1s")
            .unwrap()
            .judge(&o);
        let got: Vec<Option<Amount>> = v.terms.iter().map(|t| t.measured).collect();
        let want = [p.p50, p.p90, p.p99, p.p999, p.p9999, p.max].map(|n| Some(Amount::Ns(n)));
        assert_eq!(got, want);
    }

    #[test]
    fn a_limit_equal_to_the_measure_is_broken() {
        let h = hist(&[5_000_000; 10]);
        let v = Slo::parse("p99<5ms").unwrap().judge(&observed(&h));
        assert!(!v.met);
    }

    #[test]
    fn nothing_measured_cannot_meet_a_bound() {
        let h = hist(&[]);
        let mut o = observed(&h);
        o.intended_rps = f64::INFINITY;
        let v = Slo::parse("p99<1s,achieved>1%").unwrap().judge(&o);
        assert!(v.terms.iter().all(|t| !t.met && t.measured.is_none()));
        assert!(
            v.render().contains("p99<1s: not met (no samples)"),
            "{}",
            v.render()
        );
        // No request dispatched: no error share, and no data is never met.
        o.dispatched = 0;
        o.errors = 0;
        let v = Slo::parse("errors<1%").unwrap().judge(&o);
        assert!(!v.met && v.terms[0].measured.is_none());
        assert!(v.render().contains("errors<1%: not met (no samples)"));
    }

    #[test]
    fn verdict_serialises_with_units() {
        let h = hist(&[1_000_000]);
        let v = Slo::parse("p99<20ms,errors<0.1%")
            .unwrap()
            .judge(&observed(&h));
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["spec"], "p99<20ms,errors<0.1%");
        assert_eq!(j["met"], true);
        assert_eq!(j["terms"][0]["term"], "p99<20ms");
        assert_eq!(j["terms"][0]["unit"], "ns");
        assert_eq!(j["terms"][0]["limit"], 20_000_000);
        assert_eq!(j["terms"][1]["unit"], "ratio");
        assert_eq!(j["terms"][1]["measured"], 0.0005);
    }

    #[test]
    fn frame_terms_parse_judge_and_belong_to_frames_only() {
        let s = Slo::parse("deviation_p99<33ms,retention>99.9%").unwrap();
        assert_eq!(s.terms[0].metric, Metric::Deviation(99.0));
        assert_eq!(s.terms[0].limit, 33e6);
        assert_eq!(s.terms[1].metric, Metric::Retention);
        assert_eq!(metric("deviation_max<1s"), Metric::Deviation(100.0));
        assert_eq!(metric("deviation_p999<1s"), Metric::Deviation(99.9));
        assert!(
            Slo::parse("retention<99%")
                .unwrap_err()
                .contains("lower bound")
        );
        assert!(Slo::parse("deviation_x<1ms").is_err());
        assert!(s.check_workload(true).is_ok());
        let e = s.check_workload(false).unwrap_err();
        assert!(
            e.contains("needs --workload frames") && !e.contains('\n'),
            "{e}"
        );
        let p = Slo::parse("p99<20ms,retention>99%").unwrap();
        assert!(
            p.check_workload(true)
                .unwrap_err()
                .contains("answers no requests")
        );
        // Judged on the frame figures: deviation 20 ms for every frame, 99.5% kept.
        let d = hist(&[20_000_000; 10]);
        let none = hist(&[]);
        let mut o = observed(&none);
        o.deviation = Some(&d);
        o.retention = Some(0.995);
        let v = Slo::parse("deviation_p99<33ms,retention>99%")
            .unwrap()
            .judge(&o);
        assert!(v.met, "{v:?}");
        let v = s.judge(&o);
        assert_eq!((v.terms[0].met, v.terms[1].met), (true, false), "{v:?}");
        // Nothing measured: broken, no figure.
        let v = s.judge(&observed(&none));
        assert!(
            v.terms.iter().all(|t| !t.met && t.measured.is_none()),
            "{v:?}"
        );
    }
}
