//! The text of `blaster search`: each step's progress line, the header, the steps'
//! table, the repeats, the conclusions and what stopped the search.

use super::frames;
use super::model::{Saturation, SearchReport, Step, StepOutcome, StoppedBy};
use crate::units::{fmt_ns, fmt_rate};
use std::fmt::Write;

impl Saturation {
    /// `link 95% of its speed (saturated above 90%)`.
    pub(super) fn describe(self) -> String {
        match self {
            Saturation::Link {
                utilization,
                saturated_at,
            } => format!(
                "the link carried {:.0}% of its speed (saturated above {:.0}%)",
                utilization * 100.0,
                saturated_at * 100.0
            ),
            Saturation::Generator { busy, watermark } => format!(
                "the busiest generator core was {:.0}% busy (watermark {:.0}%)",
                busy * 100.0,
                watermark * 100.0
            ),
        }
    }
}

impl Step {
    /// The verdict column: `met`, `BROKEN p99<20ms`, `INVALID`.
    pub(super) fn verdict_text(&self) -> String {
        match self.outcome {
            StepOutcome::Pass => "met".to_string(),
            StepOutcome::SloBroken => format!("BROKEN {}", self.slo.broken_terms()),
            StepOutcome::Invalid => "INVALID (generator)".to_string(),
            StepOutcome::GeneratorBound => {
                format!("BROKEN {} (generator-bound)", self.slo.broken_terms())
            }
            StepOutcome::LinkBound => format!("BROKEN {} (link-bound)", self.slo.broken_terms()),
        }
    }
}

/// The figure behind a generator- or link-bound stop, for the text.
pub(super) fn saturation_note(r: &SearchReport) -> String {
    r.saturation
        .map(|s| format!(" while {}", s.describe()))
        .unwrap_or_default()
}

/// The progress line of one step.
pub(super) fn step_line(s: &Step) -> String {
    if let Some(f) = &s.frames {
        return frames::step_line(s, f);
    }
    format!(
        "{:<6} {:>8}/s intended -> {:>8}/s achieved, p99 {:>9}, errors {}, {}lag p99 {:>9}, \
         busiest worker {:.0}%: {}",
        s.phase.name(),
        fmt_rate(s.intended_rps),
        fmt_rate(s.achieved_rps),
        fmt_ns(s.latency_p99_ns),
        s.errors,
        s.tls_handshake_p90_ns.map_or(String::new(), |p| format!(
            "tls handshake p90 {}, ",
            fmt_ns(p)
        )),
        fmt_ns(s.dispatch_lag_p99_ns),
        s.generator_busy_ratio_max * 100.0,
        s.verdict_text()
    )
}

/// The search's text report: the step table (sorted by rate) and the conclusions.
pub fn render(r: &SearchReport) -> String {
    if r.config.axis == "connections" {
        return frames::render(r);
    }
    let mut s = String::new();
    let w = &mut s;
    write_header(w, r);
    write_steps(w, r);
    write_conclusions(w, r);
    write_repeats(w, r);
    write_stopped_by(w, r);
    s
}

/// The host's noise line and, with `--repeats`, the decisive steps over their runs.
pub(super) fn write_repeats(w: &mut String, r: &SearchReport) {
    if let Some(n) = &r.host_noise {
        let _ = writeln!(w, "{}", n.summary(r.config.max_lag_ns));
    }
    let Some(rep) = &r.repeats else {
        return;
    };
    let value = |v: f64| match r.config.axis {
        "connections" => format!("{v} connections"),
        _ => format!("{}/s", fmt_rate(v)),
    };
    let bad = rep.bad_value.map_or(String::new(), |v| {
        format!(
            "; {} bad in {} of {}",
            value(v),
            rep.bad.runs - rep.bad.held,
            rep.bad.runs
        )
    });
    let _ = writeln!(
        w,
        "repeats: {} good in {} of {} runs (achieved median {}/s, {}-{}/s; p99 {}-{}){bad}: {}",
        value(rep.good_value),
        rep.good.held,
        rep.good.runs,
        fmt_rate(rep.achieved_rps.median),
        fmt_rate(rep.achieved_rps.min),
        fmt_rate(rep.achieved_rps.max),
        fmt_ns(rep.latency_p99_ns.min as u64),
        fmt_ns(rep.latency_p99_ns.max as u64),
        if rep.stable {
            "stable".to_string()
        } else {
            "UNSTABLE: runs of one step disagree, so the host or the target's noise decided \
             where the limit lies, not the search; rerun on a quiet host or with longer \
             --step-duration"
                .to_string()
        }
    );
}

/// The first line: target, SLO, the steps' start and growth, precision, the plan.
fn write_header(w: &mut String, r: &SearchReport) {
    let c = &r.config;
    let growth = match (c.factor, c.step_rps) {
        (Some(f), _) => format!("x{f}"),
        (_, Some(st)) => format!("+{}/s", fmt_rate(st)),
        _ => String::new(),
    };
    let _ = writeln!(
        w,
        "search: {} slo {} | from {}/s {growth} per step of {}, precision {}% | cores {}, \
         {} connections, pipeline {}, payload {}B",
        r.target,
        r.slo_spec,
        fmt_rate(c.start_rps.unwrap_or(0.0)),
        fmt_ns(c.step_duration_ns),
        c.precision * 100.0,
        crate::units::list_cores(&c.cores),
        c.connections,
        c.pipeline,
        c.payload_bytes
    );
}

/// One row per step, in order of intended rate.
fn write_steps(w: &mut String, r: &SearchReport) {
    // With TLS, a column of the handshake p90 (seed 003's table).
    let tls = r.steps.iter().any(|st| st.tls_handshake_p90_ns.is_some());
    let tls_cell = |st: &Step| match (tls, st.tls_handshake_p90_ns) {
        (false, _) => String::new(),
        (true, p) => format!(" {:>10}", p.map_or("-".into(), fmt_ns)),
    };
    let _ = writeln!(
        w,
        "{:<6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}{} {:>10} {:>6} {:>5}  slo",
        "phase",
        "intended/s",
        "achieved/s",
        "lat p50",
        "lat p99",
        "lat p99.9",
        "errors",
        if tls {
            format!(" {:>10}", "tls p90")
        } else {
            String::new()
        },
        "lag p99",
        "busy",
        "valid"
    );
    let mut order: Vec<&Step> = r.steps.iter().collect();
    order.sort_by(|a, b| a.intended_rps.total_cmp(&b.intended_rps));
    for st in order {
        let _ = writeln!(
            w,
            "{:<6} {:>10.0} {:>10.0} {:>10} {:>10} {:>10} {:>8}{} {:>10} {:>5.0}% {:>5}  {}",
            st.phase.name(),
            st.intended_rps,
            st.achieved_rps,
            fmt_ns(st.latency_p50_ns),
            fmt_ns(st.latency_p99_ns),
            fmt_ns(st.latency_p999_ns),
            st.errors,
            tls_cell(st),
            fmt_ns(st.dispatch_lag_p99_ns),
            st.generator_busy_ratio_max * 100.0,
            if st.valid { "yes" } else { "NO" },
            st.verdict_text()
        );
    }
    let _ = writeln!(w, "(busy: CPU share of the busiest generator worker core)");
}

/// The max safe throughput with its in-flight count, and the knee.
fn write_conclusions(w: &mut String, r: &SearchReport) {
    match (r.max_safe_throughput_rps, r.max_safe_intended_rps) {
        (Some(a), Some(i)) => {
            let _ = writeln!(
                w,
                "max safe throughput: {}/s achieved (intended {}/s), p99 {}",
                fmt_rate(a),
                fmt_rate(i),
                fmt_ns(r.latency_p99_ns_at_max_safe.unwrap_or(0))
            );
            let _ = writeln!(
                w,
                "in flight at the max safe rate (Little's law): {}/s x {} mean latency = {:.1} requests",
                fmt_rate(a),
                fmt_ns(r.latency_mean_ns_at_max_safe.unwrap_or(0.0) as u64),
                r.inflight_at_max_safe.unwrap_or(0.0)
            );
        }
        _ => {
            let _ = writeln!(
                w,
                "max safe throughput: none (no step met the SLO with a valid generator)"
            );
        }
    }
    match r.knee_rps {
        Some(k) => {
            let _ = writeln!(
                w,
                "knee: {}/s, the last rate before p99 grew at least as fast as the square of the rate",
                fmt_rate(k)
            );
        }
        None => {
            let _ = writeln!(
                w,
                "knee: none in the measured range (p99 never rose steeply)"
            );
        }
    }
}

/// What stopped the search, and whether Ctrl-C cut it short.
fn write_stopped_by(w: &mut String, r: &SearchReport) {
    let bad = r.first_bad_rps.map(fmt_rate).unwrap_or_default();
    let _ = match r.stopped_by {
        StoppedBy::Target if r.max_safe_throughput_rps.is_none() => writeln!(
            w,
            "stopped by: target: even the first step ({bad}/s) broke the SLO; lower --start (exit code 4)"
        ),
        StoppedBy::Target => writeln!(
            w,
            "stopped by: target: the SLO broke at {bad}/s with a valid generator"
        ),
        StoppedBy::Generator if r.saturation.is_some() => writeln!(
            w,
            "stopped by: generator-bound: the SLO broke at {bad}/s{}, so that is the \
             generator's limit, not the target's, and the max safe throughput is a lower bound \
             on the target's; use more cores (exit code 3)",
            saturation_note(r)
        ),
        StoppedBy::Generator => writeln!(
            w,
            "stopped by: generator: the step at {bad}/s was invalid (the generator fell behind \
             before the target broke the SLO), so the max safe throughput is a lower bound on \
             the target's; use more cores (exit code 3)"
        ),
        StoppedBy::Link => writeln!(
            w,
            "stopped by: link-bound: the SLO broke at {bad}/s{}, so that is the link's limit, \
             not the target's; use a faster link or more generator hosts (exit code 3)",
            saturation_note(r)
        ),
        StoppedBy::Max => writeln!(
            w,
            "stopped by: max: the SLO held up to the highest rate tried; raise --max to search further"
        ),
        StoppedBy::Interrupted => {
            writeln!(w, "stopped by: interrupted before any step broke the SLO")
        }
    };
    if r.interrupted {
        let _ = writeln!(
            w,
            "interrupted: the conclusions cover the steps measured before Ctrl-C"
        );
    }
}
