//! The search's model, pure: the step planner ([`next_step`]), the knee rule
//! ([`knee`]), each step's figures and outcome ([`Step`], [`classify`]), and the
//! conclusions from the steps measured ([`conclude`]).

use super::args::{Growth, SearchConfig};
use super::axis::Axis;
use crate::metrics::spread::{Held, Spread};
use crate::report::Report;
use crate::run_plan::RunPlan;
use crate::slo::{Observed, Slo, Verdict};
use serde::Serialize;
use std::net::SocketAddr;

/// Climbing steps at most, so a target that never breaks still ends (1.5^40 = 11M x).
pub const CLIMB_STEPS_MAX: usize = 40;
/// Bisection steps at most (each halves the gap: 12 take any gap below 0.1%).
pub const BISECT_STEPS_MAX: usize = 12;
/// Knee rule: latency elasticity (d ln p99 / d ln rate) that counts as a steep rise.
pub const KNEE_ELASTICITY_MIN: f64 = 2.0;
/// Knee rule: least p99 growth between the two steps, as a ratio.
pub const KNEE_GROWTH_MIN: f64 = 1.2;

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
pub(super) fn decisive(axis: Axis, steps: &[Step]) -> (Option<&Step>, Option<&Step>) {
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

    pub(super) fn good(&self) -> bool {
        self.outcome == StepOutcome::Pass
    }

    /// The p99 the knee rule follows: request latency, or a frames step's arrival
    /// deviation.
    pub(super) fn p99_ns(&self) -> u64 {
        self.frames
            .as_ref()
            .map_or(self.latency_p99_ns, |f| f.deviation_p99_ns)
    }

    /// A step that ends the search at once: not the target's limit, so bisecting
    /// below it would measure the generator or the link.
    pub(super) fn ends_search(&self) -> bool {
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
