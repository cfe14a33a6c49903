//! `blaster report RUN.json [B.json] --html FILE`: one self-contained HTML page of
//! charts, drawn with plotters' SVG backend and inlined, so the page opens with no
//! network (no scripts, fonts, stylesheets or images from anywhere).
//!
//! Charts of request runs: latency percentiles over time; intended vs achieved rate;
//! the percentile spectrum of latency and of service time on a "nines" axis (x =
//! -log10(1 - q), so 90%, 99%, 99.9% are evenly spaced: the tail gets the room it
//! deserves), drawn from the full histograms the report embeds. Frames runs have their
//! own sections instead ([`frames`]: deviation over time, frames per second, retention
//! and late frames, deviation and fan-out spectra, join time). Every run: dispatch lag
//! over time against the `--max-lag` gate; errors over time; generator core load; the
//! kernel's drop counters over time, and every run's diagnoses as a list. Each
//! run has its own colour; within a chart, line styles tell the series apart and a
//! legend beside the plot names both (file name first).
//!
//! [`render`] is a pure function from the runs read back by [`super::input`] to the
//! page's text; the command in `cmd` does the reading and the writing.

mod frames;

use super::Percentiles;
use super::input::RunInput;
use crate::metrics::host::STEAL_WARN;
use crate::units::{fmt_ns, fmt_rate};
use hdrhistogram::Histogram;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::prelude::*;
use std::fmt::Write as _;

/// One run to draw: its label (the file name) and its report.
pub struct RunView<'a> {
    pub label: String,
    pub run: &'a RunInput,
}

/// A percentile spectrum: (nines, value in ns) points, nines = -log10(1 - q).
#[derive(Debug, Clone, PartialEq)]
pub struct Spectrum {
    pub points: Vec<(f64, u64)>,
    /// Drawn from the full histogram (every bucket), not from a few printed percentiles.
    pub full: bool,
}

/// How far right the spectrum goes: the quantile of the largest sample is about
/// 1 - 1/count, so past log10(count) nines every percentile is the max.
fn nines_of_count(count: u64) -> f64 {
    (count.max(1) as f64).log10()
}

fn nines(q: f64) -> f64 {
    -(1.0 - q).log10()
}

/// The spectrum of a full histogram: the points of HdrHistogram's own percentile
/// distribution (`.hgrm`, five steps per halving of the remaining tail), ending at the
/// max.
pub fn spectrum_of(h: &Histogram<u64>) -> Spectrum {
    let mut points = Vec::new();
    if h.is_empty() {
        return Spectrum { points, full: true };
    }
    let last = nines_of_count(h.len());
    for v in h.iter_quantiles(5) {
        let x = nines(v.quantile_iterated_to());
        if !x.is_finite() || x >= last {
            break;
        }
        points.push((x, h.highest_equivalent(v.value_iterated_to())));
    }
    points.push((last, h.max()));
    Spectrum { points, full: true }
}

/// The spectrum from the percentile summary alone (p50 .. p99.99 and the max): what a
/// report without embedded histograms offers. Five points, so the curve between them is
/// a straight guess; the chart says so.
pub fn spectrum_of_summary(p: &Percentiles) -> Spectrum {
    if p.count == 0 {
        return Spectrum {
            points: Vec::new(),
            full: false,
        };
    }
    let last = nines_of_count(p.count);
    let mut points: Vec<(f64, u64)> = [
        (0.5, p.p50),
        (0.9, p.p90),
        (0.99, p.p99),
        (0.999, p.p999),
        (0.9999, p.p9999),
    ]
    .into_iter()
    .map(|(q, v)| (nines(q), v))
    .filter(|&(x, _)| x < last)
    .collect();
    points.push((last, p.max));
    Spectrum {
        points,
        full: false,
    }
}

/// The spectrum of an embedded histogram (`encoded`), or of its percentile summary
/// when it does not decode (a report read through [`super::input`] always does: it was
/// checked whole).
pub fn spectrum_or_summary(encoded: &str, summary: &Percentiles) -> Spectrum {
    match super::hdr::decode(encoded) {
        Ok(h) => spectrum_of(&h),
        Err(_) => spectrum_of_summary(summary),
    }
}

#[derive(Debug, thiserror::Error)]
#[error("drawing the {chart} chart failed: {reason}")]
pub struct RenderError {
    chart: String,
    reason: String,
}

/// Run colours: distinct on screen and in greyscale order; red is kept for the gate.
const PALETTE: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];
const GATE: RGBColor = RGBColor(214, 39, 40);
pub const RUNS_MAX: usize = PALETTE.len();

const FONT: &str = "sans-serif";
const WIDE: (u32, u32) = (1120, 280);
const HALF: (u32, u32) = (555, 340);

/// The page for `runs` (1 to [`RUNS_MAX`]).
pub fn render(runs: &[RunView]) -> Result<String, RenderError> {
    assert!(
        (1..=RUNS_MAX).contains(&runs.len()),
        "the command checks the count"
    );
    let names: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
    let mut page = String::new();
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>blaster report: {}</title><style>{CSS}</style></head><body>\n\
         <h1>blaster report</h1>\n",
        esc(&names.join(" vs "))
    );
    page.push_str(&runs_table(runs));
    page.push_str(&targets_table(runs));
    page.push_str(&diagnoses_list(runs));
    page.push_str(&frames::table(runs));
    for section in sections(runs) {
        let _ = write!(
            page,
            "<section><h2>{}</h2><p>{}</p><div class=\"row\">",
            section.heading, section.note
        );
        for chart in &section.charts {
            page.push_str(&draw(chart)?);
        }
        page.push_str("</div></section>\n");
    }
    page.push_str("</body></html>\n");
    Ok(page)
}

const CSS: &str = "body{font-family:sans-serif;margin:16px;color:#222;max-width:1140px}\
h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:18px 0 2px}\
p{margin:2px 0 6px;font-size:13px;color:#555}\
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;text-align:right;\
border-bottom:1px solid #ddd}th{background:#f4f4f4}td.l,th.l{text-align:left}\
.sw{display:inline-block;width:14px;height:14px;vertical-align:middle;margin-right:6px}\
.bad{color:#b00;font-weight:bold}.row{display:flex;gap:10px;flex-wrap:wrap}svg{display:block}";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn css_colour(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// The runs side by side: which colour is which file, and the headline figures.
fn runs_table(runs: &[RunView]) -> String {
    let mut t = String::from(
        "<table><tr><th class=\"l\">run</th><th class=\"l\">target</th><th>valid</th>\
         <th>duration</th><th>intended rate</th><th>achieved rate</th>\
         <th>latency p50</th><th>p99</th><th>p99.9</th><th>max</th>\
         <th>service p99</th><th>dispatch lag p99</th></tr>\n",
    );
    for (i, r) in runs.iter().enumerate() {
        let run = r.run;
        let valid = if run.valid {
            "yes".to_string()
        } else {
            "<span class=\"bad\">INVALID</span>".to_string()
        };
        let lag = run
            .dispatch_lag_ns
            .map_or("closed loop".to_string(), |p| fmt_ns(p.p99));
        // A frames run is never answered: no latency (its own table follows).
        let ns = |v: u64| {
            if run.frames.is_some() {
                "&ndash;".to_string()
            } else {
                fmt_ns(v)
            }
        };
        let _ = writeln!(
            t,
            "<tr><td class=\"l\"><span class=\"sw\" style=\"background:{}\"></span>{}</td>\
             <td class=\"l\">{} ({})</td><td>{valid}</td><td>{:.1} s</td><td>{}/s</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            css_colour(PALETTE[i]),
            esc(&r.label),
            esc(&run.target),
            esc(&run.mode),
            run.duration_s,
            fmt_rate(run.rate.intended_rps),
            rate_ci(run),
            ns_ci(run, &run.latency_ns, "p50"),
            ns_ci(run, &run.latency_ns, "p99"),
            ns_ci(run, &run.latency_ns, "p999"),
            ns(run.latency_ns.max),
            ns_ci(run, &run.service_time_ns, "p99"),
            lag,
        );
    }
    t.push_str("</table>\n");
    if let Some(level) = runs
        .iter()
        .find_map(|r| r.run.latency_ns.ci.as_ref().map(|c| c.level))
    {
        let _ = writeln!(
            t,
            "<p>[brackets]: {:.0}% confidence intervals, {} (docs/metrics.md); n/a: too few \
             samples to resolve that percentile.</p>",
            level * 100.0,
            crate::metrics::ci::METHOD
        );
    }
    t
}

/// Each run of several targets: one row per destination and the total, so the slow
/// or failing server of a pool stands out; nothing when no run had two targets.
fn targets_table(runs: &[RunView]) -> String {
    let many: Vec<(usize, &RunView)> = (runs.iter().enumerate())
        .filter(|(_, r)| r.run.targets.len() > 1)
        .collect();
    if many.is_empty() {
        return String::new();
    }
    let mut t = String::from(
        "<section><h2>Targets</h2><p>Each destination's requests, errors, rate and latency \
         (from the intended send), beside the run's total.</p>\n\
         <table><tr><th class=\"l\">run</th><th class=\"l\">target</th><th>sent</th>\
         <th>completed</th><th>errors</th><th>achieved rate</th><th>latency p50</th>\
         <th>p90</th><th>p99</th><th>p99.9</th><th>max</th>\
         <th class=\"l\">errors by kind</th></tr>\n",
    );
    for (i, r) in many {
        let run = r.run;
        let total = crate::report::input::TargetInput {
            address: "total".into(),
            sent: run.requests.sent,
            completed: run.requests.completed,
            errors: run.requests.errors,
            errors_by_kind: run.errors_by_kind.clone(),
            achieved_rps: run.rate.achieved_rps,
            latency_ns: run.latency_ns.p,
        };
        for x in run.targets.iter().chain([&total]) {
            let kinds: Vec<String> = (x.errors_by_kind.iter())
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            let p = &x.latency_ns;
            let _ = writeln!(
                t,
                "<tr><td class=\"l\"><span class=\"sw\" style=\"background:{}\"></span>{}</td>\
                 <td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}/s</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
                css_colour(PALETTE[i]),
                esc(&r.label),
                esc(&x.address),
                x.sent,
                x.completed,
                x.errors,
                fmt_rate(x.achieved_rps),
                fmt_ns(p.p50),
                fmt_ns(p.p90),
                fmt_ns(p.p99),
                fmt_ns(p.p999),
                fmt_ns(p.max),
                esc(&kinds.join(" ")),
            );
        }
    }
    t.push_str("</table></section>\n");
    t
}

/// Each run's diagnoses as the text report's notes have them: what was seen, then the
/// remedy; nothing when no run has any.
fn diagnoses_list(runs: &[RunView]) -> String {
    if runs.iter().all(|r| r.run.diagnosis.is_empty()) {
        return String::new();
    }
    let mut t = String::from("<section><h2>Diagnoses</h2>\n");
    for (i, r) in runs
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.run.diagnosis.is_empty())
    {
        let _ = write!(
            t,
            "<p><span class=\"sw\" style=\"background:{}\"></span>{}</p><ul>",
            css_colour(PALETTE[i]),
            esc(&r.label)
        );
        for d in &r.run.diagnosis {
            let _ = write!(
                t,
                "<li class=\"diag\" data-code=\"{}\">{}; <b>{}</b></li>",
                esc(&d.code),
                esc(&d.message),
                esc(&d.remedy)
            );
        }
        t.push_str("</ul>\n");
    }
    t.push_str("</section>\n");
    t
}

/// The achieved rate with its interval, when the report has one.
fn rate_ci(run: &super::input::RunInput) -> String {
    let r = fmt_rate(run.rate.achieved_rps);
    match run.ci.as_ref().and_then(|c| c.achieved_rps) {
        Some(ci) => format!("{r}/s [{}, {}]", fmt_rate(ci.low), fmt_rate(ci.high)),
        None => format!("{r}/s"),
    }
}

/// A percentile (`key` as the JSON names it) with its interval, when the report has
/// them; a frames run has no latency.
fn ns_ci(run: &super::input::RunInput, s: &super::input::SummaryInput, key: &str) -> String {
    if run.frames.is_some() {
        return "&ndash;".to_string();
    }
    let v = match key {
        "p50" => s.p50,
        "p99" => s.p99,
        _ => s.p999,
    };
    match &s.ci {
        Some(ci) => format!("{}{}", fmt_ns(v), esc(&ci.show(key, v))),
        None => fmt_ns(v),
    }
}

struct Section {
    heading: &'static str,
    note: String,
    charts: Vec<Chart>,
}

#[derive(Clone, Copy, PartialEq)]
enum XAxis {
    Seconds,
    Nines,
}

#[derive(Clone, Copy, PartialEq)]
enum YAxis {
    /// Nanoseconds on a log scale, labelled in ns/us/ms/s.
    Nanos,
    /// Requests per second.
    Rate,
    /// A share, drawn as percent.
    Percent,
    /// A small share, drawn as percent on a scale from 0 to at least 5%.
    SmallPercent,
    /// Plain count per second.
    PerSecond,
    /// A share near 1 (frame retention), drawn as percent on a scale from a little
    /// below the lowest value to 100%, so a loss of 0.1% is visible.
    Retention,
}

struct Line {
    label: String,
    colour: RGBColor,
    dashed: bool,
    /// Circles at the points: the curve between them is interpolated.
    marks: bool,
    points: Vec<(f64, f64)>,
}

struct Chart {
    title: String,
    y_desc: &'static str,
    x: XAxis,
    y: YAxis,
    size: (u32, u32),
    lines: Vec<Line>,
    /// Horizontal reference lines: (value, label).
    gates: Vec<(f64, String)>,
}

/// Time of an interval's point: its end, so a short last interval sits where it ended.
fn at(i: &super::Interval) -> f64 {
    i.second as f64 + i.duration_s
}

fn series(
    label: String,
    colour: RGBColor,
    dashed: bool,
    r: &RunInput,
    y: impl Fn(&super::Interval) -> f64,
) -> Line {
    Line {
        label,
        colour,
        dashed,
        marks: false,
        points: r.intervals.iter().map(|i| (at(i), y(i))).collect(),
    }
}

/// Runs drawn in a section, each with its colour (its place among all the runs).
type Picked<'r, 'a> = [(RGBColor, &'r RunView<'a>)];

/// The runs `keep` selects, with their colours.
fn pick<'r, 'a>(
    runs: &'r [RunView<'a>],
    keep: fn(&RunView) -> bool,
) -> Vec<(RGBColor, &'r RunView<'a>)> {
    runs.iter()
        .enumerate()
        .filter(|(_, r)| keep(r))
        .map(|(i, r)| (PALETTE[i], r))
        .collect()
}

/// Every picked run's lines.
fn lines_of(runs: &Picked, f: impl Fn(RGBColor, &RunView) -> Vec<Line>) -> Vec<Line> {
    runs.iter().flat_map(|(c, r)| f(*c, r)).collect()
}

/// A wide chart over the run's seconds.
fn time_chart(title: &str, y_desc: &'static str, y: YAxis, lines: Vec<Line>) -> Chart {
    Chart {
        title: title.to_string(),
        y_desc,
        x: XAxis::Seconds,
        y,
        size: WIDE,
        lines,
        gates: Vec::new(),
    }
}

/// A half-width percentile spectrum, one line per run (circles where it comes from
/// the printed percentiles only).
fn spectrum_chart<'s>(
    title: &str,
    runs: &Picked,
    spectra: impl Iterator<Item = &'s Spectrum>,
) -> Chart {
    Chart {
        title: title.to_string(),
        y_desc: "value at percentile (log scale)",
        x: XAxis::Nines,
        y: YAxis::Nanos,
        size: HALF,
        lines: runs
            .iter()
            .zip(spectra)
            .map(|((c, r), s)| Line {
                label: r.label.clone(),
                colour: *c,
                dashed: false,
                marks: !s.full,
                points: s.points.iter().map(|&(x, v)| (x, v as f64)).collect(),
            })
            .collect(),
        gates: Vec::new(),
    }
}

/// Red reference lines at `values` (deduplicated), labelled `what VALUE`.
fn gates_at(mut values: Vec<u64>, what: &str) -> Vec<(f64, String)> {
    values.sort_unstable();
    values.dedup();
    values
        .into_iter()
        .map(|g| (g as f64, format!("{what} {}", fmt_ns(g))))
        .collect()
}

/// The page's sections: the request runs' latency, rate and spectra, the frames runs'
/// own ([`frames::sections`]), then what every run has (dispatch lag, errors, load).
fn sections(runs: &[RunView]) -> Vec<Section> {
    let requests = pick(runs, |r| r.run.frames.is_none());
    let framed = pick(runs, |r| r.run.frames.is_some());
    let all = pick(runs, |_| true);
    let mut out = Vec::new();
    if !requests.is_empty() {
        out.push(latency_section(&requests));
        out.push(rate_section(&requests));
        out.push(spectrum_section(&requests));
    }
    if !framed.is_empty() {
        out.extend(frames::sections(&framed));
    }
    out.push(lag_section(&all));
    out.push(errors_section(&all));
    out.push(load_section(&all));
    let counted = pick(runs, |r| r.run.intervals.iter().any(|i| i.kernel.is_some()));
    if !counted.is_empty() {
        out.push(kernel_section(&counted));
    }
    out
}

/// The kernel's drops on the generator host per second (conntrack, softnet backlog,
/// listen queues, the NIC's receive), and its retransmitted segments.
fn kernel_section(runs: &Picked) -> Section {
    let n = |c: Option<u64>| c.unwrap_or(0) as f64;
    Section {
        heading: "Kernel drop counters",
        note: "Packets the generator host's kernel dropped per second: conntrack (table \
               full), the softnet backlog, listen queues and the NIC's receive ring (solid), \
               and TCP segments retransmitted (dashed). Any of them above zero is a wall \
               the report's diagnoses name, with the fix."
            .into(),
        charts: vec![time_chart(
            "kernel drops per second",
            "per second",
            YAxis::PerSecond,
            lines_of(runs, |c, r| {
                let per_s = move |s: &super::Interval, v: f64| v / s.duration_s.max(1e-9);
                vec![
                    series(format!("{} drops", r.label), c, false, r.run, move |s| {
                        let k = s.kernel.unwrap_or_default();
                        per_s(
                            s,
                            n(k.conntrack_drop)
                                + n(k.conntrack_insert_failed)
                                + n(k.softnet_dropped)
                                + n(k.listen_overflows)
                                + n(k.nic_rx_missed)
                                + n(k.nic_rx_dropped),
                        )
                    }),
                    series(
                        format!("{} retransmits", r.label),
                        c,
                        true,
                        r.run,
                        move |s| per_s(s, n(s.kernel.unwrap_or_default().retrans_segs)),
                    ),
                ]
            }),
        )],
    }
}

fn latency_section(runs: &Picked) -> Section {
    Section {
        heading: "Latency percentiles over time",
        note: "Latency counts from the intended send time (the schedule), so a stalled \
               target cannot hide; p50 dashed, p99 solid, one point per second, log scale."
            .into(),
        charts: vec![time_chart(
            "latency per second",
            "latency (log scale)",
            YAxis::Nanos,
            lines_of(runs, |c, r| {
                vec![
                    series(format!("{} p99", r.label), c, false, r.run, |s| {
                        s.latency_p99_ns as f64
                    }),
                    series(format!("{} p50", r.label), c, true, r.run, |s| {
                        s.latency_p50_ns as f64
                    }),
                ]
            }),
        )],
    }
}

fn rate_section(runs: &Picked) -> Section {
    Section {
        heading: "Intended vs achieved rate",
        note: "Intended (the timetable) dashed, achieved (responses completed) solid. A gap \
               means the target or the generator did not keep up."
            .into(),
        charts: vec![time_chart(
            "rate per second",
            "requests per second",
            YAxis::Rate,
            lines_of(runs, |c, r| {
                vec![
                    series(format!("{} achieved", r.label), c, false, r.run, |s| {
                        s.achieved_rps
                    }),
                    series(format!("{} intended", r.label), c, true, r.run, |s| {
                        s.intended_rps
                    }),
                ]
            }),
        )],
    }
}

/// Latency and service time on the nines axis, from the histograms the report embeds.
fn spectrum_section(runs: &Picked) -> Section {
    let spectra: Vec<(Spectrum, Spectrum)> = runs
        .iter()
        .map(|(_, r)| {
            let h = &r.run.histograms.main;
            (
                spectrum_or_summary(&h.latency, &r.run.latency_ns),
                spectrum_or_summary(&h.service_time, &r.run.service_time_ns),
            )
        })
        .collect();
    let full = spectra.iter().all(|(l, s)| l.full && s.full);
    Section {
        heading: "Percentile spectrum",
        note: format!(
            "Whole-run percentiles; each step right is one more nine (90%, 99%, 99.9%, ...), \
             ending at the max. Latency counts from the intended send time, service time from \
             the actual send (what closed-loop tools report). {}",
            spectrum_source(full)
        ),
        charts: vec![
            spectrum_chart("latency", runs, spectra.iter().map(|s| &s.0)),
            spectrum_chart("service time", runs, spectra.iter().map(|s| &s.1)),
        ],
    }
}

/// Where a spectrum section's lines come from.
fn spectrum_source(full: bool) -> &'static str {
    if full {
        "Drawn from the full histograms the report embeds."
    } else {
        "Drawn from the report's printed percentiles (p50, p90, p99, p99.9, p99.99, max; \
         the circles): between them the line is interpolated."
    }
}

fn lag_section(runs: &Picked) -> Section {
    let timed: Vec<_> = runs
        .iter()
        .copied()
        .filter(|(_, r)| r.run.dispatch_lag_ns.is_some())
        .collect();
    let mut lag = time_chart(
        "dispatch lag p99 per second",
        "dispatch lag p99 (log scale)",
        YAxis::Nanos,
        lines_of(&timed, |c, r| {
            vec![series(format!("{} p99", r.label), c, false, r.run, |s| {
                s.dispatch_lag_p99_ns as f64
            })]
        }),
    );
    lag.gates = gates_at(
        timed.iter().map(|(_, r)| r.run.config.max_lag_ns).collect(),
        "gate",
    );
    Section {
        heading: "Dispatch lag over time",
        note: "How late the generator handled each request against its timetable: its own \
               health. A run whose dispatch lag p99 crosses the gate (--max-lag, red) is \
               invalid: the generator, not the target, was the bottleneck. Closed-loop runs \
               have no timetable and no line."
            .into(),
        charts: vec![lag],
    }
}

fn errors_section(runs: &Picked) -> Section {
    Section {
        heading: "Errors over time",
        note: "Failed requests (timeouts, resets, protocol errors, ...) per second.".into(),
        charts: vec![time_chart(
            "errors per second",
            "errors per second",
            YAxis::PerSecond,
            lines_of(runs, |c, r| {
                vec![series(r.label.clone(), c, false, r.run, |s| {
                    s.errors as f64 / s.duration_s.max(1e-9)
                })]
            }),
        )],
    }
}

fn load_section(runs: &Picked) -> Section {
    let core = time_chart(
        "busiest generator core",
        "busy share of the core",
        YAxis::Percent,
        lines_of(runs, |c, r| {
            vec![
                series(format!("{} core", r.label), c, false, r.run, |s| {
                    s.core_load
                }),
                series(format!("{} workers", r.label), c, true, r.run, |s| {
                    s.worker_busy
                }),
            ]
        }),
    );
    let steal = Chart {
        gates: vec![(STEAL_WARN, format!("warning {:.0}%", STEAL_WARN * 100.0))],
        ..time_chart(
            "hypervisor steal",
            "share of the core stolen",
            YAxis::SmallPercent,
            lines_of(runs, |c, r| {
                vec![series(format!("{} steal", r.label), c, false, r.run, |s| {
                    s.steal
                })]
            }),
        )
    };
    Section {
        heading: "Generator core load",
        note: "The busiest generator core per /proc/stat less the workers' spinning (solid), \
               and as the workers measure themselves from the TSC (dashed). Near 100% the \
               generator is the limit. Below: the share of a generator core the hypervisor \
               took to run something else (steal, on a VM); above 2% in a second the report \
               warns, and those pauses are in the lag and the latency."
            .into(),
        charts: vec![core, steal],
    }
}

/// Tick label of a nanosecond value, three significant figures at most.
fn ns_label(v: f64) -> String {
    let (x, unit) = if v < 1e3 {
        (v, "ns")
    } else if v < 1e6 {
        (v / 1e3, "us")
    } else if v < 1e9 {
        (v / 1e6, "ms")
    } else {
        (v / 1e9, "s")
    };
    let digits = if x >= 100.0 || x.fract().abs() < 1e-9 {
        0
    } else if x >= 10.0 {
        1
    } else {
        2
    };
    let s = format!("{x:.digits$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    format!("{s} {unit}")
}

/// Tick label of the nines axis: x = 2 is "99%", x = 3 "99.9%".
fn nines_label(x: f64) -> String {
    if x <= 0.0 {
        return "0%".into();
    }
    let pct = 100.0 * (1.0 - 10f64.powf(-x));
    // As many decimals as the nines need, so 99.9 never prints as 100.
    let decimals = (x.ceil() as usize).saturating_sub(2);
    format!("{pct:.decimals$}%")
}

fn y_label(y: YAxis, v: f64) -> String {
    match y {
        YAxis::Nanos => ns_label(v),
        YAxis::Rate => fmt_rate(v),
        YAxis::Percent => format!("{:.0}%", v * 100.0),
        YAxis::SmallPercent => format!("{:.1}%", v * 100.0),
        YAxis::Retention => format!("{:.2}%", v * 100.0),
        YAxis::PerSecond => {
            if v.fract().abs() < 1e-9 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        }
    }
}

/// Draws one chart into an SVG string: plot on the left, legend on the right.
fn draw(c: &Chart) -> Result<String, RenderError> {
    let fail = |reason: String| RenderError {
        chart: c.title.clone(),
        reason,
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, c.size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
        let legend_w = if c.size.0 > 800 { 250 } else { 150 };
        let (plot, legend) = root.split_horizontally(c.size.0 - legend_w);
        draw_legend(&legend, c).map_err(|e| fail(e.to_string()))?;
        let values = || {
            c.lines
                .iter()
                .flat_map(|l| l.points.iter().map(|p| p.1))
                .chain(c.gates.iter().map(|g| g.0))
                .filter(|v| v.is_finite())
        };
        let x_max = c
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.0))
            .filter(|x| x.is_finite())
            .fold(1.0_f64, f64::max);
        let x_range = match c.x {
            XAxis::Seconds => 0.0..x_max,
            // Whole nines, so every tick is 90%, 99%, 99.9%, ...
            XAxis::Nines => 0.0..x_max.ceil().max(2.0),
        };
        let y_max = values().fold(0.0_f64, f64::max);
        match c.y {
            YAxis::Nanos => {
                // Log scale needs positive values: a 0 (an empty interval) is drawn at
                // the floor.
                let lo = values().filter(|&v| v > 0.0).fold(f64::INFINITY, f64::min);
                let lo = if lo.is_finite() { lo } else { 1.0 };
                let hi = y_max.max(lo * 10.0);
                let floor = (lo / 1.5).max(1.0);
                plot_on(&plot, c, x_range, (floor..hi * 1.5).log_scale(), floor)
            }
            YAxis::Percent => plot_on(&plot, c, x_range, 0.0..(y_max * 1.1).max(1.0), 0.0),
            YAxis::SmallPercent => plot_on(&plot, c, x_range, 0.0..(y_max * 1.1).max(0.05), 0.0),
            YAxis::Retention => {
                let lo = values().fold(1.0_f64, f64::min).min(0.99);
                let pad = (1.0 - lo) * 0.1;
                plot_on(&plot, c, x_range, (lo - pad).max(0.0)..1.0 + pad, 0.0)
            }
            _ => plot_on(&plot, c, x_range, 0.0..(y_max * 1.1).max(1.0), 0.0),
        }
        .map_err(fail)?;
        root.present().map_err(|e| fail(e.to_string()))?;
    }
    // Inline SVG in HTML needs no namespace, and without it the page carries no URL
    // at all, which the test checks.
    Ok(svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1))
}

fn plot_on<Y>(
    area: &DrawingArea<SVGBackend, Shift>,
    c: &Chart,
    x_range: std::ops::Range<f64>,
    y_range: Y,
    floor: f64,
) -> Result<(), String>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(&c.title, (FONT, 17))
        .margin(8)
        .x_label_area_size(44)
        .y_label_area_size(84)
        .build_cartesian_2d(x_range.clone(), y_range)
        .map_err(|e| e.to_string())?;
    let x_desc = match c.x {
        XAxis::Seconds => "time since start (s)",
        XAxis::Nines => "percentile (nines scale)",
    };
    let y_kind = c.y;
    let y_fmt = |v: &f64| y_label(y_kind, *v);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x_desc)
        .y_desc(c.y_desc)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .light_line_style(RGBColor(240, 240, 240))
        .y_label_formatter(&y_fmt);
    let nines_fmt = |x: &f64| nines_label(*x);
    if c.x == XAxis::Nines {
        mesh.x_labels((x_range.end - x_range.start) as usize + 1)
            .x_label_formatter(&nines_fmt);
    } else {
        mesh.x_labels(12);
    }
    mesh.draw().map_err(|e| e.to_string())?;
    for l in &c.lines {
        let style = l.colour.stroke_width(2);
        let pts: Vec<(f64, f64)> = l.points.iter().map(|&(x, y)| (x, y.max(floor))).collect();
        if l.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts.iter().copied(), 6, 4, style))
                .map_err(|e| e.to_string())?;
        } else {
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), style))
                .map_err(|e| e.to_string())?;
        }
        if l.marks {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, l.colour.filled())))
                .map_err(|e| e.to_string())?;
        }
    }
    for (g, _) in &c.gates {
        chart
            .draw_series(DashedLineSeries::new(
                [(x_range.start, *g), (x_range.end, *g)],
                8,
                5,
                GATE.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The legend beside the plot: a line sample and the series' name per row.
fn draw_legend(
    area: &DrawingArea<SVGBackend, Shift>,
    c: &Chart,
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let font = (FONT, 13).into_font().color(&BLACK);
    let rows = c
        .lines
        .iter()
        .map(|l| (l.label.clone(), l.colour, l.dashed))
        .chain(c.gates.iter().map(|(_, label)| (label.clone(), GATE, true)));
    let (w, _) = area.dim_in_pixel();
    // Long file names are cut so the row stays inside the legend.
    let chars = (w as usize).saturating_sub(44) / 7;
    for (row, (label, colour, dashed)) in rows.enumerate() {
        let y = 40 + row as i32 * 22;
        let style = colour.stroke_width(2);
        if dashed {
            area.draw(&PathElement::new([(4, y), (12, y)], style))?;
            area.draw(&PathElement::new([(18, y), (26, y)], style))?;
        } else {
            area.draw(&PathElement::new([(4, y), (26, y)], style))?;
        }
        let text: String = if label.chars().count() > chars {
            let keep: String = label.chars().rev().take(chars - 1).collect();
            format!("…{}", keep.chars().rev().collect::<String>())
        } else {
            label
        };
        area.draw(&Text::new(text, (34, y - 7), font.clone()))?;
    }
    if c.lines.iter().all(|l| l.points.is_empty()) {
        area.draw(&Text::new("no data", (34, 16), font))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request run's spectrum is drawn from the histograms the report embeds (many
    /// points, no circles), the page says so, and a frames section is not drawn.
    #[test]
    fn a_request_runs_spectrum_comes_from_its_histograms() {
        let mut v: serde_json::Value =
            serde_json::from_str(&frames::tests::frames_report(false)).unwrap();
        v.as_object_mut().unwrap().remove("frames");
        v["mode"] = "persistent".into();
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for k in 1..=1_500u64 {
            h.record(k * 1_000).unwrap();
        }
        for (key, summary) in [
            ("latency", "latency_ns"),
            ("service_time", "service_time_ns"),
        ] {
            v["histograms"][key] = crate::report::hdr::encode(&h).into();
            v[summary] = serde_json::to_value(Percentiles::of(&h)).unwrap();
        }
        let run = crate::report::input::parse_run("r.json", v.to_string())
            .unwrap()
            .input;
        let html = render(&[RunView {
            label: "r.json".into(),
            run: &run,
        }])
        .unwrap();
        let spectrum = &html[html.find("<h2>Percentile spectrum</h2>").unwrap()..];
        let spectrum = &spectrum[..spectrum.find("</section>").unwrap()];
        assert!(spectrum.contains("Drawn from the full histograms"));
        assert!(
            !spectrum.contains("<circle"),
            "circles: drawn from six points"
        );
        assert!(!html.contains("Frame arrival deviation"));
        assert!(html.contains("<h2>Latency percentiles over time</h2>"));
    }

    /// Issue 33, item 6: the diagnoses are listed (message and remedy, the code kept)
    /// and the kernel's drops drawn over time; a report written before the kernel
    /// counters has neither section and still draws.
    #[test]
    fn diagnoses_are_listed_and_kernel_drops_drawn_when_the_report_has_them() {
        let mut v: serde_json::Value =
            serde_json::from_str(&frames::tests::frames_report(false)).unwrap();
        let old = crate::report::input::parse_run("old.json", v.to_string())
            .unwrap()
            .input;
        let html = render(&[RunView {
            label: "old.json".into(),
            run: &old,
        }])
        .unwrap();
        assert!(!html.contains("<h2>Diagnoses</h2>") && !html.contains("Kernel drop counters"));
        for (k, i) in v["intervals"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .enumerate()
        {
            i["kernel"] = serde_json::json!({"conntrack_drop": k * 100, "retrans_segs": null});
        }
        v["diagnosis"] = serde_json::json!([{"code": "conntrack_table_full",
            "message": "conntrack table full: nf_conntrack_count 50 of nf_conntrack_max 50",
            "remedy": "raise net.netfilter.nf_conntrack_max <or NOTRACK>"}]);
        let run = crate::report::input::parse_run("k.json", v.to_string())
            .unwrap()
            .input;
        let html = render(&[RunView {
            label: "k.json".into(),
            run: &run,
        }])
        .unwrap();
        let list = &html[html.find("<h2>Diagnoses</h2>").unwrap()..];
        let list = &list[..list.find("</section>").unwrap()];
        assert!(
            list.contains("data-code=\"conntrack_table_full\""),
            "{list}"
        );
        assert!(list.contains("nf_conntrack_count 50 of nf_conntrack_max 50"));
        assert!(list.contains("raise net.netfilter.nf_conntrack_max &lt;or NOTRACK&gt;"));
        assert!(html.contains("<h2>Kernel drop counters</h2>"));
        assert!(html.contains("k.json drops"));
    }

    #[test]
    fn nines_axis_labels() {
        assert_eq!(nines_label(0.0), "0%");
        assert_eq!(nines_label(1.0), "90%");
        assert_eq!(nines_label(2.0), "99%");
        assert_eq!(nines_label(3.0), "99.9%");
        assert_eq!(nines_label(5.0), "99.999%");
    }

    #[test]
    fn small_shares_keep_a_decimal() {
        assert_eq!(y_label(YAxis::SmallPercent, 0.005), "0.5%");
        assert_eq!(y_label(YAxis::SmallPercent, 0.02), "2.0%");
        assert_eq!(y_label(YAxis::Percent, 0.02), "2%");
    }

    #[test]
    fn nanosecond_ticks_carry_units() {
        assert_eq!(ns_label(500.0), "500 ns");
        assert_eq!(ns_label(1_000.0), "1 us");
        assert_eq!(ns_label(2_500_000.0), "2.5 ms");
        assert_eq!(ns_label(20_000_000_000.0), "20 s");
    }

    #[test]
    fn spectrum_of_a_histogram_follows_its_percentiles_to_the_max() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for v in 1..=100_000u64 {
            h.record(v * 10).unwrap();
        }
        let s = spectrum_of(&h);
        assert!(s.full);
        assert!(s.points.len() > 30, "{} points", s.points.len());
        // Nines and values rise together, from about the median to the max at 5 nines.
        assert!(
            s.points
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
        );
        let at = |q: f64| {
            s.points
                .iter()
                .find(|p| p.0 >= nines(q) - 1e-9)
                .map(|p| p.1)
                .unwrap()
        };
        let close = |a: u64, b: u64| (a as f64 / b as f64 - 1.0).abs() < 0.01;
        assert!(close(at(0.99), h.value_at_quantile(0.99)), "{}", at(0.99));
        assert!(close(at(0.999), h.value_at_quantile(0.999)));
        assert_eq!(*s.points.last().unwrap(), (5.0, h.max()));
        assert!(
            spectrum_of(&Histogram::<u64>::new(3).unwrap())
                .points
                .is_empty()
        );
    }

    #[test]
    fn spectrum_of_a_summary_stops_at_the_max() {
        let p = Percentiles {
            p50: 10,
            p90: 20,
            p99: 30,
            p999: 40,
            p9999: 50,
            max: 60,
            mean: 12.0,
            count: 500,
        };
        let s = spectrum_of_summary(&p);
        assert!(!s.full);
        // 500 samples reach 2.7 nines: p99.9 and p99.99 are the max, not points.
        let values: Vec<u64> = s.points.iter().map(|p| p.1).collect();
        assert_eq!(values, vec![10, 20, 30, 60]);
        assert!((s.points[3].0 - 500f64.log10()).abs() < 1e-9);
    }
}
