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

use crate::cli::{RunArgs, SearchArgs};
use crate::cmd::run::{RunError, execute_step};
use crate::limits::DURATION_NS_MAX;
use crate::metrics::spread::{Held, Spread};
use crate::report::Report;
use crate::report::progress::Live;
use crate::run_plan::{HostFacts, PlanError, ROOM_SIZE_DEFAULT, RunPlan};
use crate::slo::{Observed, Slo, Verdict};
use crate::units::{fmt_ns, fmt_rate};
use serde::Serialize;
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use axis::Axis;

/// Default of `--factor`.
pub const FACTOR_DEFAULT: f64 = 1.5;
/// Largest `--factor`: beyond 10x per step the climb says little about the curve.
pub const FACTOR_MAX: f64 = 10.0;
/// Shortest `--step-duration`: the validity gate's busy check needs half a second of
/// schedule, and shorter steps measure connection setup more than the target.
pub const STEP_NS_MIN: u64 = 500_000_000;
/// Climbing steps at most, so a target that never breaks still ends (1.5^40 = 11M x).
pub const CLIMB_STEPS_MAX: usize = 40;
/// Bisection steps at most (each halves the gap: 12 take any gap below 0.1%).
pub const BISECT_STEPS_MAX: usize = 12;
/// `--precision` bounds: a share of the good rate.
pub const PRECISION_MIN: f64 = 0.001;
pub const PRECISION_MAX: f64 = 0.5;
/// Knee rule: latency elasticity (d ln p99 / d ln rate) that counts as a steep rise.
pub const KNEE_ELASTICITY_MIN: f64 = 2.0;
/// Knee rule: least p99 growth between the two steps, as a ratio.
pub const KNEE_GROWTH_MIN: f64 = 1.2;

/// How the rate grows from one climbing step to the next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Growth {
    Factor(f64),
    Add(f64),
}

impl Growth {
    fn apply(self, rate: f64) -> f64 {
        match self {
            Growth::Factor(f) => rate * f,
            Growth::Add(s) => rate + s,
        }
    }
}

/// The validated search parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchConfig {
    pub slo: Slo,
    pub axis: Axis,
    /// The first step's value on the axis (requests/s or connections).
    pub start: f64,
    pub growth: Growth,
    pub max: Option<f64>,
    /// Largest gap between the last good and the first bad value, as a share of the
    /// good one.
    pub precision: f64,
    pub step_duration_ns: u64,
    /// `--repeats`: runs of each decisive step.
    pub repeats: u32,
}

fn err(flag: &'static str, message: impl Into<String>) -> PlanError {
    PlanError {
        flag,
        message: message.into(),
    }
}

/// `5%` -> 0.05, within [`PRECISION_MIN`, `PRECISION_MAX`].
fn parse_precision(s: &str) -> Result<f64, PlanError> {
    let bad = || {
        err(
            "precision",
            format!("expected a percentage such as 5%, got {s:?}"),
        )
    };
    let v: f64 = s
        .trim()
        .strip_suffix('%')
        .ok_or_else(bad)?
        .trim()
        .parse()
        .map_err(|_| bad())?;
    let r = v / 100.0;
    if !(PRECISION_MIN..=PRECISION_MAX).contains(&r) {
        return Err(err(
            "precision",
            format!(
                "must be between {}% and {}%, got {s:?}",
                PRECISION_MIN * 100.0,
                PRECISION_MAX * 100.0
            ),
        ));
    }
    Ok(r)
}

/// Validates the search's own flags (the run flags are validated by [`crate::run_plan`], which
/// builds the steps' plan from the [`run_args`] built from them).
pub fn config_from_args(a: &SearchArgs) -> Result<SearchConfig, PlanError> {
    let spec = a
        .slo
        .as_deref()
        .ok_or_else(|| err("slo", "is required, e.g. --slo 'p99<20ms,errors<0.1%'"))?;
    let slo = Slo::parse(spec).map_err(|m| err("slo", m))?;
    let frames = a.work.workload == "frames";
    slo.check_workload(frames).map_err(|m| err("slo", m))?;
    let axis = match a.work.room_size.unwrap_or(ROOM_SIZE_DEFAULT) {
        _ if !frames => Axis::Rate,
        0 => return Err(err("room-size", "must be at least 1, got 0")),
        room_size => Axis::Connections { room_size },
    };
    let unit = match axis {
        Axis::Rate => "rate, requests/s",
        Axis::Connections { .. } => "connection count",
    };
    if a.load.target.is_empty() {
        return Err(err(
            "target",
            "is required: the address to search, HOST:PORT",
        ));
    }
    let start = axis.check(
        "start",
        a.start
            .ok_or_else(|| err("start", format!("is required: the first step's {unit}")))?,
    )?;
    let growth = match (a.factor, a.step) {
        (_, Some(s)) => Growth::Add(axis.check("step", s)?),
        (Some(f), None) if !(f > 1.0 && f <= FACTOR_MAX) => {
            return Err(err(
                "factor",
                format!("must be greater than 1 and at most {FACTOR_MAX}, got {f}"),
            ));
        }
        (f, None) => Growth::Factor(f.unwrap_or(FACTOR_DEFAULT)),
    };
    let max = match a.max {
        Some(m) if axis.check("max", m)? < start => {
            return Err(err(
                "max",
                format!("must be at least --start ({start}), got {m}"),
            ));
        }
        m => m,
    };
    let step = crate::run_plan::parse_duration("step-duration", &a.step_duration)?.as_nanos();
    if step < STEP_NS_MIN as u128 || step > DURATION_NS_MAX as u128 {
        return Err(err(
            "step-duration",
            format!(
                "must be between {} and {}, got {:?}",
                fmt_ns(STEP_NS_MIN),
                fmt_ns(DURATION_NS_MAX),
                a.step_duration
            ),
        ));
    }
    Ok(SearchConfig {
        slo,
        axis,
        start,
        growth,
        max,
        precision: parse_precision(&a.precision)?,
        step_duration_ns: step as u64,
        repeats: crate::run_plan::check_repeats(a.repeats)?,
    })
}

/// `run`'s defaults, from clap itself, so flags added to `run` later keep their
/// documented defaults in a search.
#[derive(clap::Parser)]
#[command(no_binary_name = true)]
struct RunDefaults {
    #[command(flatten)]
    run: RunArgs,
}

/// The `run` arguments of every step: the search's run flags, `run`'s defaults for
/// the rest. No `--rate`: [`crate::run_plan`] sets the start rate, each step its own.
pub fn run_args(a: &SearchArgs) -> Result<RunArgs, PlanError> {
    use clap::Parser;
    let mut r = RunDefaults::try_parse_from(std::iter::empty::<String>())
        .map_err(|e| err("slo", format!("internal: run defaults: {e}")))?
        .run;
    r.load = a.load.clone();
    r.work = a.work.clone();
    r.duration = a.step_duration.clone();
    r.link_speed = a.link_speed.clone();
    r.progress = a.progress;
    r.quiet = a.quiet;
    Ok(r)
}

/// The search's plan: the step flags `r` on the machine `facts` describes, at the
/// start value. Each step runs [`step_plan`] of it (see [`run`]).
pub fn plan(r: &RunArgs, facts: &HostFacts, cfg: &SearchConfig) -> Result<RunPlan, PlanError> {
    match cfg.axis {
        Axis::Rate => RunPlan::build_at_rate(r, facts, cfg.start),
        Axis::Connections { .. } => {
            // The largest step's flags are refused now rather than mid-search.
            if let Some(m) = cfg.max {
                RunPlan::build(&with_connections(r, m), facts)?;
            }
            RunPlan::build(&with_connections(r, cfg.start), facts)
        }
    }
}

/// `r` with `--connections n`.
fn with_connections(r: &RunArgs, n: f64) -> RunArgs {
    let mut r = r.clone();
    r.connections = n as usize;
    r
}

/// The plan of the step at `value` on the axis, for `--step-duration`: the search's
/// plan at that rate, or (frames) the plan rebuilt from the flags `r` for that many
/// connections, since the connection table, the rooms and the timetable all follow
/// from the count.
pub fn step_plan(
    plan: &RunPlan,
    r: &RunArgs,
    facts: &HostFacts,
    cfg: &SearchConfig,
    value: f64,
) -> Result<RunPlan, PlanError> {
    let p = match cfg.axis {
        Axis::Rate => plan.with_rate(value),
        Axis::Connections { .. } => RunPlan::build(&with_connections(r, value), facts)?,
    };
    Ok(p.with_duration(cfg.step_duration_ns))
}

/// Whether a step climbs or bisects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Climb,
    Bisect,
    /// A decisive step run again (`--repeats`): it never moves the search's
    /// conclusions, only their spread ([`Repeated`]).
    Repeat,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Climb => "climb",
            Phase::Bisect => "bisect",
            Phase::Repeat => "repeat",
        }
    }
}

/// The decisive steps over their runs (`--repeats`): the last good step's and the
/// first bad one's above it (values on the search's axis).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Repeated {
    pub good_value: f64,
    pub good: Held,
    /// Achieved rate and latency p99 over the good step's runs.
    pub achieved_rps: Spread,
    pub latency_p99_ns: Spread,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bad_value: Option<f64>,
    pub bad: Held,
    /// Every run of the good step good and every run of the bad one bad.
    pub stable: bool,
}

impl Repeated {
    /// From every step measured: `None` without a good step of the search itself.
    pub fn of(axis: Axis, steps: &[Step]) -> Option<Repeated> {
        let (good, bad) = decisive(axis, steps);
        let good_value = axis.of(good?);
        let at = |v: f64| steps.iter().filter(move |s| axis.of(s) == v);
        let bad_value = bad.map(|s| axis.of(s));
        let good_runs = Held::of(at(good_value).map(Step::good));
        let bad_runs = bad_value.map_or(Held { runs: 0, held: 0 }, |v| {
            Held::of(at(v).map(Step::good))
        });
        Some(Repeated {
            good_value,
            good: good_runs,
            achieved_rps: Spread::of(at(good_value).map(|s| s.achieved_rps))?,
            latency_p99_ns: Spread::of(at(good_value).map(|s| s.latency_p99_ns as f64))?,
            bad_value,
            bad: bad_runs,
            stable: good_runs.held == good_runs.runs && bad_runs.held == 0,
        })
    }
}

/// The search's own decisive steps (repeats aside): the best good one and the lowest
/// bad one on the axis.
fn decisive(axis: Axis, steps: &[Step]) -> (Option<&Step>, Option<&Step>) {
    let own = || steps.iter().filter(|s| s.phase != Phase::Repeat);
    let best = own().filter(|s| s.good()).max_by(|a, b| match axis {
        Axis::Rate => a.achieved_rps.total_cmp(&b.achieved_rps),
        Axis::Connections { .. } => a.connections.cmp(&b.connections),
    });
    let bad = own()
        .filter(|s| !s.good())
        .min_by(|a, b| axis.of(a).total_cmp(&axis.of(b)));
    (best, bad)
}

/// Why the planner ends the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The first step was bad: nothing to bisect.
    FirstStepBad,
    /// The last good and the first bad rate are within the precision (or the
    /// bisection step limit was reached).
    Converged,
    /// `--max` was measured and was good.
    ReachedMax,
    /// [`CLIMB_STEPS_MAX`] good steps, or the rate bound, without a bad one.
    StepLimit,
}

/// What the planner wants next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Next {
    /// Run a step at this value on the axis (requests/s or connections).
    Run {
        value: f64,
        phase: Phase,
    },
    Done(End),
}

/// The next step, from the steps so far: `(value on the axis, good)` in the order
/// run. On the connection axis every value is a whole number of rooms.
pub fn next_step(cfg: &SearchConfig, history: &[(f64, bool)]) -> Next {
    let axis = cfg.axis;
    if history.is_empty() {
        return Next::Run {
            value: cfg.start,
            phase: Phase::Climb,
        };
    }
    let lowest_bad = history
        .iter()
        .filter(|s| !s.1)
        .map(|s| s.0)
        .min_by(f64::total_cmp);
    let Some(bad) = lowest_bad else {
        let last = history.iter().map(|s| s.0).fold(0.0, f64::max);
        if cfg.max.is_some_and(|m| last >= m) {
            return Next::Done(End::ReachedMax);
        }
        if history.len() >= CLIMB_STEPS_MAX || last >= axis.limit() {
            return Next::Done(End::StepLimit);
        }
        // At least one room up (a factor of 1.05 on 10 connections would round back).
        let next = axis
            .ceil(cfg.growth.apply(last))
            .max(last + axis.quantum())
            .min(axis.limit());
        return Next::Run {
            value: cfg.max.map_or(next, |m| next.min(m)),
            phase: Phase::Climb,
        };
    };
    let good = history
        .iter()
        .filter(|s| s.1 && s.0 < bad)
        .map(|s| s.0)
        .max_by(f64::total_cmp);
    let Some(good) = good else {
        return Next::Done(End::FirstStepBad);
    };
    let first_bad_at = history.iter().position(|s| !s.1).unwrap_or(0);
    let bisections = history.len() - first_bad_at - 1;
    // Neighbouring room counts leave nothing between them to try.
    let gap = (cfg.precision * good).max(axis.quantum());
    if bad - good <= gap || bisections >= BISECT_STEPS_MAX {
        return Next::Done(End::Converged);
    }
    Next::Run {
        value: axis.floor((good + bad) / 2.0),
        phase: Phase::Bisect,
    }
}

/// The knee among `(rate, p99)` points sorted by rate (see the module doc): the index
/// of the last point before the first persistent steep rise, or `None`.
pub fn knee(points: &[(f64, f64)]) -> Option<usize> {
    for i in 0..points.len().saturating_sub(1) {
        let ((ra, pa), (rb, pb)) = (points[i], points[i + 1]);
        if !(ra > 0.0 && rb > ra && pa > 0.0 && pb > 0.0) {
            continue;
        }
        let growth = pb / pa;
        if growth < KNEE_GROWTH_MIN {
            continue;
        }
        let elasticity = growth.ln() / (rb / ra).ln();
        if elasticity < KNEE_ELASTICITY_MIN {
            continue;
        }
        let floor = (pa * pb).sqrt();
        if points[i + 2..].iter().all(|&(_, p)| p >= floor) {
            return Some(i);
        }
    }
    None
}

/// How one step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepOutcome {
    /// Valid generator, SLO met.
    Pass,
    /// Valid generator, SLO broken: the target's limit.
    SloBroken,
    /// The generator fell behind: its limit; the SLO verdict does not count.
    Invalid,
    /// Valid generator, SLO broken, but a generator core was over the busy watermark:
    /// the generator's limit (seed 000 trusts a step only under the watermark).
    GeneratorBound,
    /// Valid generator, SLO broken, but the link was saturated: the link's limit.
    LinkBound,
}

/// What other than the target was at its limit during a step (`steps[].saturation`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Saturation {
    /// The interface carried more than `saturated_at` of its link speed.
    Link { utilization: f64, saturated_at: f64 },
    /// The busiest generator worker's own busy share was over the watermark.
    Generator { busy: f64, watermark: f64 },
}

impl Saturation {
    /// From a run's host figures: the link first (it bounds everything behind it),
    /// then the generator's own busy share (other processes' load is a warning of its
    /// own, `generator_core_shared`).
    pub fn of(h: &crate::report::HostReport) -> Option<Saturation> {
        if h.nic_saturated() {
            return Some(Saturation::Link {
                utilization: h.link_utilization_max.unwrap_or(0.0),
                saturated_at: h.link_saturated_at,
            });
        }
        (h.max_worker_busy > h.core_busy_watermark).then_some(Saturation::Generator {
            busy: h.max_worker_busy,
            watermark: h.core_busy_watermark,
        })
    }

    /// `link 95% of its speed (saturated above 90%)`.
    fn describe(self) -> String {
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

/// A step's outcome from its validity, its SLO verdict and what was saturated (pure):
/// a broken SLO is the target's limit only when neither the link nor the generator
/// was at its own.
pub fn classify(valid: bool, met: bool, saturation: Option<Saturation>) -> StepOutcome {
    match (valid, met, saturation) {
        (false, _, _) => StepOutcome::Invalid,
        (true, true, _) => StepOutcome::Pass,
        (true, false, Some(Saturation::Link { .. })) => StepOutcome::LinkBound,
        (true, false, Some(Saturation::Generator { .. })) => StepOutcome::GeneratorBound,
        (true, false, None) => StepOutcome::SloBroken,
    }
}

/// A frames step's figures (`steps[].frames` in the JSON).
#[derive(Debug, Clone, Serialize)]
pub struct FrameStep {
    /// Frames sent per second, all connections.
    pub up_fps: f64,
    /// Frames received per second, all connections.
    pub down_fps: f64,
    pub expected: u64,
    pub received: u64,
    /// received / expected.
    pub retention: f64,
    /// The lowest connection's retention.
    pub retention_min: f64,
    pub lost: u64,
    pub late: u64,
    pub deviation_p50_ns: u64,
    pub deviation_p99_ns: u64,
    pub deviation_max_ns: u64,
    pub fanout_p99_ns: u64,
}

/// One step's figures (`steps[]` in the JSON).
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub phase: Phase,
    /// The step's `--connections`.
    pub connections: usize,
    pub intended_rps: f64,
    pub achieved_rps: f64,
    pub latency_p50_ns: u64,
    pub latency_p99_ns: u64,
    pub latency_p999_ns: u64,
    pub latency_mean_ns: f64,
    pub dispatched: u64,
    pub completed: u64,
    pub errors: u64,
    /// errors / dispatched.
    pub error_ratio: f64,
    pub dispatch_lag_p99_ns: u64,
    /// Busy share (CPU minus spinning, over wall time) of the busiest worker: the
    /// generator's CPU per core.
    pub generator_busy_ratio_max: f64,
    pub valid: bool,
    pub invalid_reasons: Vec<crate::diagnosis::Diagnosis>,
    pub outcome: StepOutcome,
    /// The link or the generator at its limit during the step, if either was.
    pub saturation: Option<Saturation>,
    pub slo: Verdict,
    /// The step's merged histograms, encoded (as the run JSON's `histograms`).
    pub histograms: crate::report::hdr::Encoded4,
    /// `--workload frames`: the frame figures the SLO judges.
    pub frames: Option<FrameStep>,
    /// `--tls`: the step's TLS handshake p90 (TCP connected -> handshake complete), the
    /// figure seed 003 grades a gateway's steps by; `null` without TLS.
    pub tls_handshake_p90_ns: Option<u64>,
}

impl Step {
    /// The step's figures from its run report.
    pub fn of(r: &Report, phase: Phase, slo: &Slo) -> Step {
        let verdict = slo.judge(&Observed::of(r));
        let saturation = Saturation::of(&r.host);
        let outcome = classify(r.valid, verdict.met, saturation);
        let frames = r.frames.as_ref().map(|f| FrameStep {
            up_fps: f.up_fps,
            down_fps: f.down_fps,
            expected: f.expected,
            received: f.received,
            retention: f.retention,
            retention_min: f.retention_min,
            lost: f.lost,
            late: f.late,
            deviation_p50_ns: f.deviation_ns.p50,
            deviation_p99_ns: f.deviation_ns.p99,
            deviation_max_ns: f.deviation_ns.max,
            fanout_p99_ns: f.fanout_ns.p99,
        });
        Step {
            phase,
            connections: r.config.connections,
            intended_rps: r.rate.intended_rps,
            achieved_rps: r.rate.achieved_rps,
            latency_p50_ns: r.latency_ns.p50,
            latency_p99_ns: r.latency_ns.p99,
            latency_p999_ns: r.latency_ns.p999,
            latency_mean_ns: r.latency_ns.mean,
            dispatched: r.requests.dispatched,
            completed: r.requests.completed,
            errors: r.requests.errors,
            error_ratio: r.requests.errors as f64 / r.requests.dispatched.max(1) as f64,
            dispatch_lag_p99_ns: r.dispatch_lag_ns.as_ref().map_or(0, |p| p.p99),
            generator_busy_ratio_max: r.workers.iter().map(|w| w.busy_ratio).fold(0.0, f64::max),
            valid: r.valid,
            invalid_reasons: r.invalid_reasons.clone(),
            outcome,
            saturation,
            slo: verdict,
            histograms: crate::report::hdr::Encoded4::of(&r.histograms),
            frames,
            tls_handshake_p90_ns: r.tls.as_ref().map(|t| t.tls_handshake_ns.p90),
        }
    }

    fn good(&self) -> bool {
        self.outcome == StepOutcome::Pass
    }

    /// The p99 the knee rule follows: request latency, or a frames step's arrival
    /// deviation.
    fn p99_ns(&self) -> u64 {
        self.frames
            .as_ref()
            .map_or(self.latency_p99_ns, |f| f.deviation_p99_ns)
    }

    /// The verdict column: `met`, `BROKEN p99<20ms`, `INVALID`.
    fn verdict_text(&self) -> String {
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

    /// A step that ends the search at once: not the target's limit, so bisecting
    /// below it would measure the generator or the link.
    fn ends_search(&self) -> bool {
        matches!(
            self.outcome,
            StepOutcome::GeneratorBound | StepOutcome::LinkBound
        )
    }
}

/// What bounded the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoppedBy {
    /// The SLO broke with a valid generator.
    Target,
    /// A step was invalid, or broke the SLO with a generator core over the watermark:
    /// the generator's limit came before the target's.
    Generator,
    /// A step broke the SLO with the link saturated: the link's limit.
    Link,
    /// `--max` (or the step limit) was reached with the SLO holding.
    Max,
    /// Ctrl-C before any step was bad.
    Interrupted,
}

/// The figure behind a generator- or link-bound stop, for the text.
fn saturation_note(r: &SearchReport) -> String {
    r.saturation
        .map(|s| format!(" while {}", s.describe()))
        .unwrap_or_default()
}

/// Search parameters as reported (`config` in the JSON).
#[derive(Debug, Clone, Serialize)]
pub struct ConfigReport {
    /// What the steps climb: `rate` (the `*_rps` fields below) or, with `--workload
    /// frames`, `connections` (the `*_connections` fields); the other axis' are null.
    pub axis: &'static str,
    pub start_rps: Option<f64>,
    pub factor: Option<f64>,
    pub step_rps: Option<f64>,
    pub max_rps: Option<f64>,
    pub start_connections: Option<usize>,
    pub step_connections: Option<usize>,
    pub max_connections: Option<usize>,
    pub precision: f64,
    pub step_duration_ns: u64,
    pub cores: Vec<usize>,
    pub connections: usize,
    pub pipeline: usize,
    pub payload_bytes: usize,
    pub timeout_ns: u64,
    pub max_lag_ns: u64,
    /// Frames: the tick, the frame size and the (fixed) room size.
    pub tick_ns: Option<u64>,
    pub frame_bytes: Option<usize>,
    pub room_size: Option<u64>,
}

/// The search's result (the JSON of `blaster search --json`).
#[derive(Debug, Clone, Serialize)]
pub struct SearchReport {
    pub schema_version: u32,
    pub mode: &'static str,
    pub target: String,
    pub slo_spec: String,
    pub config: ConfigReport,
    pub steps: Vec<Step>,
    /// Highest achieved rate of a good step (valid generator, SLO met).
    pub max_safe_throughput_rps: Option<f64>,
    /// That step's intended rate.
    pub max_safe_intended_rps: Option<f64>,
    pub latency_p99_ns_at_max_safe: Option<u64>,
    pub latency_mean_ns_at_max_safe: Option<f64>,
    /// Little's law: max safe throughput x mean latency.
    pub inflight_at_max_safe: Option<f64>,
    /// Achieved rate of the knee step (see the module doc).
    pub knee_rps: Option<f64>,
    /// Intended rate of the lowest bad step.
    pub first_bad_rps: Option<f64>,
    /// Frames: the largest connection count of a good step, and its figures.
    pub max_safe_connections: Option<usize>,
    pub deviation_p99_ns_at_max_safe: Option<u64>,
    pub retention_at_max_safe: Option<f64>,
    /// Frames: the connection count of the knee step and of the lowest bad step.
    pub knee_connections: Option<usize>,
    pub first_bad_connections: Option<usize>,
    pub stopped_by: StoppedBy,
    /// What was saturated at the step that stopped a generator- or link-bound search
    /// (the figure), else null.
    pub saturation: Option<Saturation>,
    pub interrupted: bool,
    /// `--repeats` above 1: the decisive steps over their runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeats: Option<Repeated>,
    /// The host's noise on the generator cores before the first step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_noise: Option<crate::metrics::noise::HostNoise>,
}

impl SearchReport {
    /// Exit status: generator-bound wins (3), then no good step at all (4).
    pub fn outcome(&self) -> crate::outcome::Outcome {
        use crate::outcome::Outcome;
        match self.stopped_by {
            StoppedBy::Generator | StoppedBy::Link => Outcome::Invalid,
            StoppedBy::Target if self.max_safe_throughput_rps.is_none() => Outcome::SloBroken,
            _ => Outcome::Ok,
        }
    }
}

/// The conclusions from the steps measured (pure).
pub fn conclude(
    plan: &RunPlan,
    target: SocketAddr,
    cfg: &SearchConfig,
    steps: Vec<Step>,
    interrupted: bool,
) -> SearchReport {
    let axis = cfg.axis;
    // Rate: the highest achieved rate; connections: the largest count (repeats aside).
    let (best, bad) = decisive(axis, &steps);
    let repeated = steps
        .iter()
        .any(|s| s.phase == Phase::Repeat)
        .then(|| Repeated::of(axis, &steps))
        .flatten();
    let stopped_by = match bad.map(|s| s.outcome) {
        Some(StepOutcome::Invalid | StepOutcome::GeneratorBound) => StoppedBy::Generator,
        Some(StepOutcome::LinkBound) => StoppedBy::Link,
        Some(_) => StoppedBy::Target,
        None if interrupted => StoppedBy::Interrupted,
        None => StoppedBy::Max,
    };
    let mut valid: Vec<&Step> = steps
        .iter()
        .filter(|s| s.valid && s.phase != Phase::Repeat)
        .collect();
    valid.sort_by(|a, b| axis.of(a).total_cmp(&axis.of(b)));
    let points: Vec<(f64, f64)> = valid
        .iter()
        .map(|s| (axis.of(s), s.p99_ns() as f64))
        .collect();
    let knee_step = knee(&points).map(|i| valid[i]);
    let (factor, step) = match cfg.growth {
        Growth::Factor(f) => (Some(f), None),
        Growth::Add(s) => (None, Some(s)),
    };
    let frames = plan.frames.as_ref();
    let is_frames = frames.is_some();
    let rate_axis = axis == Axis::Rate;
    let best_frames = best.and_then(|s| s.frames.as_ref());
    let safe_rps = repeated
        .as_ref()
        .filter(|_| rate_axis)
        .map(|r| r.achieved_rps.median)
        .or(best.map(|s| s.achieved_rps));
    SearchReport {
        schema_version: crate::report::SCHEMA_VERSION,
        mode: "search",
        target: target.to_string(),
        slo_spec: cfg.slo.spec.clone(),
        config: ConfigReport {
            axis: axis.name(),
            start_rps: rate_axis.then_some(cfg.start),
            factor,
            step_rps: step.filter(|_| rate_axis),
            max_rps: cfg.max.filter(|_| rate_axis),
            start_connections: (!rate_axis).then_some(cfg.start as usize),
            step_connections: step.filter(|_| !rate_axis).map(|s| s as usize),
            max_connections: cfg.max.filter(|_| !rate_axis).map(|m| m as usize),
            precision: cfg.precision,
            step_duration_ns: cfg.step_duration_ns,
            cores: plan.cores.clone(),
            connections: plan.connections,
            pipeline: plan.pipeline,
            payload_bytes: plan.payload.len(),
            timeout_ns: plan.timeout_ns,
            max_lag_ns: plan.max_lag_ns,
            tick_ns: frames.map(|f| f.grid.tick_ns),
            frame_bytes: frames.map(|f| f.frame_size),
            room_size: frames.map(|f| f.grid.room_size),
        },
        max_safe_throughput_rps: safe_rps,
        max_safe_intended_rps: best.map(|s| s.intended_rps),
        latency_p99_ns_at_max_safe: best.map(|s| s.latency_p99_ns),
        latency_mean_ns_at_max_safe: best.map(|s| s.latency_mean_ns),
        // Little's law at the figure reported (the median of the runs with --repeats).
        inflight_at_max_safe: safe_rps.zip(best).map(|(r, s)| r * s.latency_mean_ns / 1e9),
        knee_rps: knee_step.map(|s| s.achieved_rps),
        first_bad_rps: bad.map(|s| s.intended_rps),
        max_safe_connections: best.filter(|_| is_frames).map(|s| s.connections),
        deviation_p99_ns_at_max_safe: best_frames.map(|f| f.deviation_p99_ns),
        retention_at_max_safe: best_frames.map(|f| f.retention),
        knee_connections: knee_step.filter(|_| is_frames).map(|s| s.connections),
        first_bad_connections: bad.filter(|_| is_frames).map(|s| s.connections),
        stopped_by,
        saturation: bad.and_then(|s| s.saturation.filter(|_| s.ends_search())),
        interrupted,
        repeats: repeated,
        host_noise: None,
        steps,
    }
}

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

/// The progress line of one step.
fn step_line(s: &Step) -> String {
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

mod axis;
mod command;
mod frames;

pub use command::command;
#[cfg(test)]
mod tests;
