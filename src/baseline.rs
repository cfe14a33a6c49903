//! The loopback baseline: `blaster` with no target. It starts the built-in sink on a
//! core the workers do not use, then steps the rate up until the generator saturates
//! (the validity gate fails, the achieved rate falls short, or errors appear), bisects
//! once between the last good and the first bad step, and reports the generator's own
//! ceiling on this machine.

use crate::plan::RunPlan;
use crate::proto::Framing;
use crate::report::Report;
use crate::report::progress::Live;
use crate::run::{RunError, execute};
use crate::sink::{self, SinkConfig, SinkMode};
use crate::units::{fmt_ns, fmt_rate};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Rate multiplier between steps until the first saturated one.
const STEP_FACTOR: f64 = 1.5;
/// Steps at most, so a very fast machine still ends.
const STEPS_MAX: usize = 16;
/// Bisection steps between the last good and the first saturated rate.
const BISECT_STEPS: usize = 2;
/// The baseline does not step below this rate.
const RATE_MIN_RPS: f64 = 1_000.0;
/// A step counts as saturated below this share of its intended rate.
const ACHIEVED_MIN_RATIO: f64 = 0.97;

#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub intended_rps: f64,
    pub achieved_rps: f64,
    pub valid: bool,
    pub saturated: bool,
    pub dispatch_lag_p99_ns: u64,
    pub latency_p50_ns: u64,
    pub latency_p99_ns: u64,
    pub errors: u64,
    pub busy_cpu_ns_per_request: f64,
    /// The step's merged histograms, encoded (as the run JSON's `histograms`).
    pub histograms: crate::report::hdr::Encoded4,
}

#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    pub schema_version: u32,
    pub mode: &'static str,
    pub sink: String,
    pub worker_cores: Vec<usize>,
    pub sink_cores: Vec<usize>,
    pub shared_core: bool,
    pub connections: usize,
    pub payload_bytes: usize,
    pub steps: Vec<Step>,
    /// Highest achieved rate of a step that was valid and not saturated.
    pub ceiling_rps: f64,
    pub ceiling_rps_per_core: f64,
    pub dispatch_lag_p99_ns_at_ceiling: u64,
    pub busy_cpu_ns_per_request_at_ceiling: f64,
    pub interrupted: bool,
}

fn step_of(r: &Report) -> Step {
    let busy: u64 = r.workers.iter().map(|w| w.busy_cpu_ns).sum();
    let saturated = !r.valid
        || r.rate.achieved_rps < ACHIEVED_MIN_RATIO * r.rate.intended_rps
        || r.requests.errors > 0;
    Step {
        intended_rps: r.rate.intended_rps,
        achieved_rps: r.rate.achieved_rps,
        valid: r.valid,
        saturated,
        dispatch_lag_p99_ns: r.dispatch_lag_ns.map_or(0, |l| l.p99),
        latency_p50_ns: r.latency_ns.p50,
        latency_p99_ns: r.latency_ns.p99,
        errors: r.requests.errors,
        busy_cpu_ns_per_request: busy as f64 / r.requests.completed.max(1) as f64,
        histograms: crate::report::hdr::Encoded4::of(&r.histograms),
    }
}

/// Runs the baseline; progress lines go to stderr as each step ends.
pub fn run(plan: &RunPlan, stop: &Arc<AtomicBool>, usable: &[usize]) -> Result<Baseline, RunError> {
    let spare: Vec<usize> = usable
        .iter()
        .copied()
        .filter(|c| !plan.cores.contains(c))
        .collect();
    let shared_core = spare.is_empty();
    // The sink keeps off the control core too when another spare core exists.
    let sink_cores = if shared_core {
        vec![plan.cores[0]]
    } else {
        vec![
            spare
                .iter()
                .copied()
                .find(|&c| c != plan.control_core)
                .unwrap_or(spare[0]),
        ]
    };
    // The plan allows only echo and fixed:N without a target.
    let mode = match plan.framing {
        Framing::Fixed(n) => SinkMode::Fixed(n),
        _ => SinkMode::Echo,
    };
    let sink = sink::start(&SinkConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        cores: sink_cores.clone(),
        mode,
        request_size: plan.payload.len(),
        delay: None,
        stall: None,
        max_connections_per_core: plan.connections + 16,
        ..SinkConfig::default()
    })?;
    let addr = sink.local_addr();
    crate::errln!(
        "baseline: generator on cores {}, built-in sink on core {} at {addr}{}",
        crate::units::list_cores(&plan.cores),
        crate::units::list_cores(&sink_cores),
        if shared_core {
            " (sharing a core: the ceiling is a lower bound)"
        } else {
            ""
        }
    );
    let mut steps: Vec<Step> = Vec::new();
    let mut rate = plan.start_rate_rps;
    let mut good: Option<f64> = None;
    let mut bad: Option<f64> = None;
    let mut result = Ok(());
    let mut bisections = 0;
    while !stop.load(Ordering::Relaxed) {
        let label = format!("baseline step {} ({}/s)", steps.len() + 1, fmt_rate(rate));
        let step = plan.with_rate(rate).with_duration(plan.step_duration_ns);
        let report = match execute(
            &step,
            addr,
            stop,
            Live::for_step(plan.progress, label),
            &mut crate::report::export::Outputs::none(),
        ) {
            Ok(Report {
                worker_error: Some(e),
                ..
            }) => {
                result = Err(RunError::Worker(e.to_string()));
                break;
            }
            Ok(r) => r,
            Err(e) => {
                result = Err(e);
                break;
            }
        };
        if report.interrupted {
            break;
        }
        let step = step_of(&report);
        crate::errln!(
            "baseline: {:>8}/s intended -> {:>8}/s achieved, lag p99 {:>9}, latency p99 {:>9}, {}",
            fmt_rate(step.intended_rps),
            fmt_rate(step.achieved_rps),
            fmt_ns(step.dispatch_lag_p99_ns),
            fmt_ns(step.latency_p99_ns),
            if step.saturated { "saturated" } else { "ok" }
        );
        if step.saturated {
            bad = Some(bad.map_or(rate, |b: f64| b.min(rate)));
        } else {
            good = Some(good.map_or(rate, |g: f64| g.max(rate)));
        }
        steps.push(step);
        rate = match (good, bad) {
            (_, None) if steps.len() < STEPS_MAX => rate * STEP_FACTOR,
            // Even the first step saturated: step down until one holds.
            (None, Some(_)) if steps.len() < STEPS_MAX && rate / STEP_FACTOR >= RATE_MIN_RPS => {
                rate / STEP_FACTOR
            }
            (Some(g), Some(b)) if bisections < BISECT_STEPS && b > g * 1.05 => {
                bisections += 1;
                (g + b) / 2.0
            }
            _ => break,
        };
    }
    let interrupted = stop.load(Ordering::Relaxed);
    let _ = sink.stop();
    result?;
    let best = steps
        .iter()
        .filter(|s| !s.saturated)
        .max_by(|a, b| a.achieved_rps.total_cmp(&b.achieved_rps));
    Ok(Baseline {
        schema_version: crate::report::SCHEMA_VERSION,
        mode: "baseline",
        sink: addr.to_string(),
        worker_cores: plan.cores.clone(),
        sink_cores,
        shared_core,
        connections: plan.connections,
        payload_bytes: plan.payload.len(),
        ceiling_rps: best.map_or(0.0, |s| s.achieved_rps),
        ceiling_rps_per_core: best.map_or(0.0, |s| s.achieved_rps / plan.cores.len() as f64),
        dispatch_lag_p99_ns_at_ceiling: best.map_or(0, |s| s.dispatch_lag_p99_ns),
        busy_cpu_ns_per_request_at_ceiling: best.map_or(0.0, |s| s.busy_cpu_ns_per_request),
        steps,
        interrupted,
    })
}

/// The baseline's text summary.
pub fn render(b: &Baseline) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "loopback baseline: {} connections, {}-byte echo requests, generator cores {}, sink core {}\n",
        b.connections,
        b.payload_bytes,
        crate::units::list_cores(&b.worker_cores),
        crate::units::list_cores(&b.sink_cores)
    ));
    s.push_str(&format!(
        "{:>12} {:>12} {:>6} {:>12} {:>12} {:>12} {:>10}\n",
        "intended/s", "achieved/s", "valid", "lag p99", "lat p50", "lat p99", "cpu/req"
    ));
    for st in &b.steps {
        s.push_str(&format!(
            "{:>12.0} {:>12.0} {:>6} {:>12} {:>12} {:>12} {:>10}\n",
            st.intended_rps,
            st.achieved_rps,
            if st.saturated { "no" } else { "yes" },
            fmt_ns(st.dispatch_lag_p99_ns),
            fmt_ns(st.latency_p50_ns),
            fmt_ns(st.latency_p99_ns),
            fmt_ns(st.busy_cpu_ns_per_request as u64)
        ));
    }
    s.push_str(&format!(
        "generator ceiling: {}/s ({}/s per core), dispatch lag p99 {} at that rate, {} busy CPU per request{}\n",
        fmt_rate(b.ceiling_rps),
        fmt_rate(b.ceiling_rps_per_core),
        fmt_ns(b.dispatch_lag_p99_ns_at_ceiling),
        fmt_ns(b.busy_cpu_ns_per_request_at_ceiling as u64),
        if b.shared_core { " (sink shared a core: lower bound)" } else { "" }
    ));
    if b.interrupted {
        s.push_str("interrupted: the ceiling is the best step measured before Ctrl-C\n");
    }
    s
}
