//! `blaster search`: SLO-driven capacity search.
//!
//! The rate climbs from `--start`, multiplied by `--factor` (or plus `--step`) each
//! step, every step a full open-model run of `--step-duration` with its own validity
//! gate. A step is **good** when the generator was valid and the run met `--slo`;
//! otherwise it is **bad**: *broken* (valid generator, SLO not met: the target's
//! limit) or *invalid* (the generator fell behind: its limit, not the target's). The
//! climb stops at the first bad step, then the search bisects between the highest good
//! and the lowest bad rate until they are within `--precision` of the good one. The
//! planner ([`next_step`]) is a pure function of the steps measured so far.
//!
//! Conclusions:
//! - **max safe throughput**: the highest *achieved* rate of a good step.
//! - **stopped_by**: what the lowest bad step says: `target` (SLO broke with a valid
//!   generator), `generator` (invalid step; the max safe throughput is then only a
//!   lower bound on the target's), or `max` (`--max` or the step limit reached with the
//!   SLO holding), `interrupted` (Ctrl-C before any bad step).
//! - **in flight at the max safe rate**, by Little's law: achieved rate x mean latency.
//! - **the knee** ([`knee`]): the last rate before p99 starts growing much faster than
//!   the rate. Between neighbouring valid steps (by intended rate) the latency
//!   *elasticity* is e = ln(p99_b / p99_a) / ln(rate_b / rate_a): how many percent p99
//!   grows per percent of rate. Below saturation p99 is flat (e near 0); an M/M/1
//!   queue has e = rho / (1 - rho), which passes 2 at two-thirds load and grows without
//!   bound towards saturation. The knee is point `a` of the first pair with e >= 2
//!   (p99 grows at least as fast as the square of the rate) and p99 up by at least 20%
//!   (so jitter between closely spaced bisection steps does not count), provided the
//!   rise persists: no later valid step's p99 falls below the geometric mean of the
//!   pair's (a one-step hiccup on a noisy host is followed by a normal step and is
//!   ignored). It needs only two points on each side of the rise, does not depend on
//!   the step spacing (elasticity is scale free) and uses no fitted curve. No pair
//!   qualifying (e.g. an error-only SLO, or the generator saturating first) means no
//!   knee in the measured range: `knee_rps` is null.
//!
//! With `--workload frames` the search climbs the **connection count** instead of the
//! rate ([`Axis::Connections`]): every step is a frames run of that many connections
//! (one frame per connection per tick, rooms of the fixed `--room-size`), its plan
//! rebuilt for the count ([`step_plan`]); `--start`, `--step` and `--max` count
//! connections, every count a whole number of rooms, and the bisection ends when the
//! last good and the first bad count are one room apart (or within `--precision`).
//! The SLO bounds the frame figures (`deviation_p99<33ms,retention>99.9%`); the
//! conclusion is the largest connection count that met it with a valid generator, and
//! the knee is taken on deviation p99 against the count.
//!
//! The flags are read in [`args`], the steps planned and judged in [`model`], their
//! text written in [`render`]; [`run`] here climbs, running one step after another.

mod args;
mod axis;
mod command;
mod frames;
mod model;
mod render;
#[cfg(test)]
mod tests;

pub use args::*;
pub use axis::Axis;
pub use command::command;
pub use model::*;
pub use render::render;

use crate::cli::RunArgs;
use crate::cmd::run::{RunError, execute_step};
use crate::report::progress::Live;
use crate::run_plan::{HostFacts, RunPlan};
use crate::units::fmt_rate;
#[cfg(test)]
use args::RunDefaults;
use args::err;
use model::decisive;
use render::{saturation_note, step_line, write_repeats};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Runs the search; one progress line per step goes to stderr, and `on_step` sees the
/// conclusions so far after every step (to rewrite the JSON file as the search goes).
pub fn run(
    plan: &RunPlan,
    (r, facts): (&RunArgs, &HostFacts),
    target: SocketAddr,
    cfg: &SearchConfig,
    stop: &Arc<AtomicBool>,
    mut on_step: impl FnMut(&SearchReport) -> Result<(), RunError>,
) -> Result<SearchReport, RunError> {
    // The host's noise first: a gate the host cannot hold even idle makes every step
    // invalid, and the search would stop as generator-bound without saying why.
    let noise = crate::metrics::noise::probe(
        &plan.cores,
        crate::metrics::noise::period_for(plan.precision.resolution_ns),
        crate::metrics::noise::PROBE_NS,
    );
    crate::errln!("search: {}", noise.summary(plan.max_lag_ns));
    if let Some(remedy) = noise.remedy(plan.max_lag_ns) {
        crate::errln!("search: {remedy}");
    }
    let finish = |mut r: SearchReport| {
        r.host_noise = Some(noise.clone());
        r
    };
    let mut steps: Vec<Step> = Vec::new();
    let mut interrupted = false;
    loop {
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let history: Vec<(f64, bool)> = steps.iter().map(|s| (cfg.axis.of(s), s.good())).collect();
        let Next::Run { value, phase } = next_step(cfg, &history) else {
            break;
        };
        let at = match cfg.axis {
            Axis::Rate => format!("{}/s", fmt_rate(value)),
            Axis::Connections { .. } => format!("{value} connections"),
        };
        let label = format!("search step {} ({} {at})", steps.len() + 1, phase.name());
        let step = step_plan(plan, r, facts, cfg, value)?;
        if step.connections != plan.connections {
            // A larger table than the first step's: the limits it needs, again.
            crate::cmd::preflight::check_plan(&step)?;
        }
        let report = execute_step(&step, target, stop, Live::for_step(plan.progress, label))?;
        if report.interrupted {
            // A step cut short measures less than it claims: leave it out.
            interrupted = true;
            break;
        }
        let step = Step::of(&report, phase, &cfg.slo);
        crate::errln!("search: {}", step_line(&step));
        let ends = step.ends_search();
        steps.push(step);
        on_step(&finish(conclude(plan, target, cfg, steps.clone(), false)))?;
        if ends {
            break;
        }
    }
    // The decisive steps again, `--repeats` runs of each in all.
    let (good, bad) = decisive(cfg.axis, &steps);
    let values: Vec<f64> = [good, bad]
        .into_iter()
        .flatten()
        .map(|s| cfg.axis.of(s))
        .collect();
    'repeats: for repeat in 1..cfg.repeats {
        for &value in &values {
            if interrupted || stop.load(Ordering::Relaxed) {
                interrupted = true;
                break 'repeats;
            }
            let label = format!("search step {} (repeat {repeat})", steps.len() + 1);
            let step = step_plan(plan, r, facts, cfg, value)?;
            let report = execute_step(&step, target, stop, Live::for_step(plan.progress, label))?;
            if report.interrupted {
                interrupted = true;
                break 'repeats;
            }
            let step = Step::of(&report, Phase::Repeat, &cfg.slo);
            crate::errln!("search: {}", step_line(&step));
            steps.push(step);
            on_step(&finish(conclude(plan, target, cfg, steps.clone(), false)))?;
        }
    }
    Ok(finish(conclude(plan, target, cfg, steps, interrupted)))
}
