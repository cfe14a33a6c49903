//! `blaster search`'s flags -> a validated [`SearchConfig`], the `run` arguments every
//! step shares, and each step's plan (the rate, or a frames run's connection count,
//! set on the first step's).

use super::axis::Axis;
use crate::cli::{RunArgs, SearchArgs};
use crate::limits::DURATION_NS_MAX;
use crate::run_plan::{HostFacts, PlanError, ROOM_SIZE_DEFAULT, RunPlan};
use crate::slo::Slo;
use crate::units::fmt_ns;

/// Default of `--factor`.
pub const FACTOR_DEFAULT: f64 = 1.5;
/// Largest `--factor`: beyond 10x per step the climb says little about the curve.
pub const FACTOR_MAX: f64 = 10.0;
/// Shortest `--step-duration`: the validity gate's busy check needs half a second of
/// schedule, and shorter steps measure connection setup more than the target.
pub const STEP_NS_MIN: u64 = 500_000_000;
/// `--precision` bounds: a share of the good rate.
pub const PRECISION_MIN: f64 = 0.001;
pub const PRECISION_MAX: f64 = 0.5;

/// How the rate grows from one climbing step to the next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Growth {
    Factor(f64),
    Add(f64),
}

impl Growth {
    pub(super) fn apply(self, rate: f64) -> f64 {
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

pub(super) fn err(flag: &'static str, message: impl Into<String>) -> PlanError {
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
pub(super) struct RunDefaults {
    #[command(flatten)]
    pub(super) run: RunArgs,
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
    r.duration = Some(a.step_duration.clone());
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
