//! The loopback baseline: `blaster` with no target. It starts the built-in sink on cores
//! the workers do not use (as many as the generator's, up to the cores left: one
//! SO_REUSEPORT ring each), then steps the rate up until the generator saturates (the
//! validity gate fails, the achieved rate falls short, or errors appear), bisects once
//! between the last good and the first bad step, and reports the generator's own
//! ceiling on this machine.
//!
//! A ceiling is only the generator's when the generator had its cores and the sink kept
//! up, so each step carries what else ran on the generator's cores (other load and
//! steal, as the run report measures them) and how busy the sink's cores were; the
//! [`verdict`] says which the summary may claim: the ceiling, "at least" (the sink was
//! the limit), "this host's, not the generator's" (a shared core), or no valid step and
//! why.
//!
//! With `--tls` (still no target) the same steps run over TLS: the sink serves TLS
//! through its front ([`crate::sink::tls_front`]) on the sink's cores, with a
//! certificate for localhost made at start, which the client trusts alone; each step
//! carries its handshakes, and the summary calls the figure a TLS ceiling. The front
//! is a thread per connection with blocking I/O, so on a small host it is often the
//! limit: its threads are on the sink's cores, which then show busy, and the verdict
//! is "at least", the front's figure rather than the generator's.

use crate::cmd::run::{RunError, execute_step};
use crate::diagnosis::Diagnosis;
use crate::metrics::host::{HostSampler, OTHER_LOAD_WARN, STEAL_WARN};
use crate::metrics::noise::{self, HostNoise};
use crate::metrics::spread::{Held, Spread};
use crate::proto::Framing;
use crate::proto::h2::server::{Answer, ServerSettings};
use crate::report::Report;
use crate::report::progress::Live;
use crate::run_plan::RunPlan;
use crate::sink::h2_front::{H2Front, H2Options};
use crate::sink::tls_front::TlsFront;
use crate::sink::{self, SinkConfig, SinkMode};
use crate::units::{fmt_ns, fmt_rate, list_cores};
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
/// A sink core at least this busy (/proc/stat, over the step) marks the step
/// sink-bound: the sink, not the generator, may have set the pace.
pub const SINK_BOUND_BUSY: f64 = 0.90;

/// Where the built-in sink runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkPlacement {
    pub cores: Vec<usize>,
    /// No usable core is free of workers: the sink shares the first generator core.
    pub shared: bool,
}

/// The sink's cores: as many as the generator's, from the usable cores the workers do
/// not use, the control core (collector, helpers) last; never a generator core unless
/// there is no other. 16 cores with `--cores 4-11` (control core 0): cores 0-3,12-15;
/// 2 cores with `--cores 0`: core 1.
pub fn sink_cores(generator: &[usize], control_core: usize, usable: &[usize]) -> SinkPlacement {
    let spare: Vec<usize> = usable
        .iter()
        .copied()
        .filter(|c| !generator.contains(c))
        .collect();
    if spare.is_empty() {
        return SinkPlacement {
            cores: vec![generator.first().copied().unwrap_or(0)],
            shared: true,
        };
    }
    let want = generator.len().clamp(1, spare.len());
    let mut cores: Vec<usize> = spare
        .iter()
        .copied()
        .filter(|&c| c != control_core)
        .take(want)
        .collect();
    if cores.len() < want {
        // Fewer free cores than wanted implies the control core is among the spare.
        cores.push(control_core);
    }
    cores.sort_unstable();
    SinkPlacement {
        cores,
        shared: false,
    }
}

/// Connections each sink core admits: its share of `connections`, with room for
/// SO_REUSEPORT's uneven hashing (a quarter more, and 16).
pub fn sink_connections_per_core(connections: usize, sink_cores: usize) -> usize {
    let share = connections.div_ceil(sink_cores.max(1));
    share + share / 4 + 16
}

#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// 0: a step of the search; k: the k-th repeat of a decisive step (`--repeats`).
    pub repeat: u32,
    pub intended_rps: f64,
    pub achieved_rps: f64,
    pub valid: bool,
    pub saturated: bool,
    /// Why the validity gate failed (the run report's `invalid_reasons`).
    pub invalid_reasons: Vec<Diagnosis>,
    pub dispatch_lag_p99_ns: u64,
    pub latency_p50_ns: u64,
    pub latency_p99_ns: u64,
    pub errors: u64,
    pub busy_cpu_ns_per_request: f64,
    /// Largest share of a generator core other processes (and IRQs) took in a second
    /// of the step (the run report's `host.max_other_load`), and on which core.
    pub other_load: f64,
    pub other_load_core: Option<usize>,
    /// Largest share of a generator core the hypervisor stole (`host.max_steal`).
    pub steal: f64,
    /// Other load above [`OTHER_LOAD_WARN`] or steal above [`STEAL_WARN`]: the
    /// generator did not have its core to itself.
    pub shared: bool,
    /// Busiest sink core over the step (/proc/stat: the sink and anything else there).
    pub sink_busy: f64,
    /// `sink_busy` at least [`SINK_BOUND_BUSY`].
    pub sink_bound: bool,
    /// The step's merged histograms, encoded (as the run JSON's `histograms`).
    pub histograms: crate::report::hdr::Encoded4,
    /// The TLS baseline's handshakes over the step (`None`: plain TCP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<StepTls>,
    /// `--server-time` (the HTTP/2 baseline: the sink says its own time per reply):
    /// the sink's time and the rest of the latency, p50 and p99.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_time: Option<StepServerTime>,
}

/// A step's server time: what the sink said it took, and each reply's latency less it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepServerTime {
    pub server_time_p50_ns: u64,
    pub server_time_p99_ns: u64,
    pub network_queueing_p50_ns: u64,
    pub network_queueing_p99_ns: u64,
}

/// A TLS step's handshakes (the run report's `tls` section, in short).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepTls {
    pub handshakes_full: u64,
    pub handshakes_resumed: u64,
    pub handshakes_failed: u64,
    /// TCP connected -> handshake complete, p90.
    pub handshake_p90_ns: u64,
}

impl StepTls {
    fn of(t: &crate::report::TlsReport) -> StepTls {
        StepTls {
            handshakes_full: t.handshakes_full,
            handshakes_resumed: t.handshakes_resumed,
            handshakes_failed: t.failed_by_kind.values().sum(),
            handshake_p90_ns: t.tls_handshake_ns.p90,
        }
    }
}

/// What the summary may claim about the ceiling.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// The best valid step, with the generator's cores to itself and the sink keeping up.
    Ceiling { rps: f64 },
    /// The sink's cores were busy past [`SINK_BOUND_BUSY`] at the best valid step or at
    /// the saturated step above it: the generator can do at least `rps`.
    AtLeast {
        rps: f64,
        sink_busy: f64,
        sink_cores: Vec<usize>,
    },
    /// Other processes or the hypervisor took a share of a generator core during the
    /// best valid step: the figure is this host's, not the generator's.
    Shared {
        rps: f64,
        core: Option<usize>,
        other_load: f64,
        steal: f64,
    },
    /// No step was valid and unsaturated; `why` says what stopped them.
    NoValidStep { why: String },
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
    /// Over TLS (`--tls`): the sink's TLS front served the steps.
    pub tls: bool,
    /// `--http2` or `--grpc`: the steps' requests were HTTP/2 streams (gRPC calls),
    /// served by the sink's HTTP/2 front.
    pub http2: bool,
    /// The host's noise on the generator cores before the first step
    /// ([`crate::metrics::noise`]).
    pub host_noise: HostNoise,
    /// The `--max-lag` asked for, and the gate the steps were judged at: the same,
    /// unless the host's idle timer lateness could not hold the one asked for, when
    /// the steps are judged at the gate the host can hold and the ceiling is labelled
    /// so (and the command exits 3: no ceiling at the gate asked for).
    pub max_lag_asked_ns: u64,
    pub max_lag_ns: u64,
    /// The decisive steps' repeats (`--repeats`): the ceiling's figures are their
    /// medians.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeats: Option<Repeats>,
    pub steps: Vec<Step>,
    /// Highest achieved rate of a step that was valid and not saturated (0: none;
    /// `verdict` says what the figure is).
    pub ceiling_rps: f64,
    pub ceiling_rps_per_core: f64,
    pub dispatch_lag_p99_ns_at_ceiling: u64,
    pub busy_cpu_ns_per_request_at_ceiling: f64,
    /// The TLS baseline's handshakes at the ceiling step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_at_ceiling: Option<StepTls>,
    pub verdict: Verdict,
    pub interrupted: bool,
}

/// One step's figures: the run report's, and the sink cores' busy share over it.
fn step_of(r: &Report, sink_busy: f64) -> Step {
    let busy: u64 = r.workers.iter().map(|w| w.busy_cpu_ns).sum();
    let tls = r.tls.as_ref().map(StepTls::of);
    let saturated = !r.valid
        || r.rate.achieved_rps < ACHIEVED_MIN_RATIO * r.rate.intended_rps
        || r.requests.errors > 0
        || tls.is_some_and(|t| t.handshakes_failed > 0);
    Step {
        repeat: 0,
        intended_rps: r.rate.intended_rps,
        achieved_rps: r.rate.achieved_rps,
        valid: r.valid,
        saturated,
        invalid_reasons: r.invalid_reasons.clone(),
        dispatch_lag_p99_ns: r.dispatch_lag_ns.as_ref().map_or(0, |l| l.p99),
        latency_p50_ns: r.latency_ns.p50,
        latency_p99_ns: r.latency_ns.p99,
        errors: r.requests.errors,
        busy_cpu_ns_per_request: busy as f64 / r.requests.completed.max(1) as f64,
        other_load: r.host.max_other_load,
        other_load_core: r.host.max_other_load_core,
        steal: r.host.max_steal,
        shared: r.host.max_other_load > OTHER_LOAD_WARN || r.host.max_steal > STEAL_WARN,
        sink_busy,
        sink_bound: sink_busy >= SINK_BOUND_BUSY,
        histograms: crate::report::hdr::Encoded4::of(&r.histograms),
        tls,
        server_time: r.server_time.as_ref().map(|s| StepServerTime {
            server_time_p50_ns: s.server_time_ns.p50,
            server_time_p99_ns: s.server_time_ns.p99,
            network_queueing_p50_ns: s.network_queueing_ns.p50,
            network_queueing_p99_ns: s.network_queueing_ns.p99,
        }),
    }
}

/// The best valid step of the search (repeats aside): the highest achieved rate of a
/// step that was not saturated.
fn best(steps: &[Step]) -> Option<&Step> {
    steps
        .iter()
        .filter(|s| !s.saturated && s.repeat == 0)
        .max_by(|a, b| a.achieved_rps.total_cmp(&b.achieved_rps))
}

/// The gate the steps are judged at: `asked`, unless the host's idle timer lateness
/// cannot hold it, then the gate it can hold (never lower than asked).
pub fn gate_for(noise: &HostNoise, asked_ns: u64) -> u64 {
    if noise.holds(asked_ns) {
        asked_ns
    } else {
        noise.holdable_gate_ns().max(asked_ns)
    }
}

/// The rates that decided the ceiling: the best valid step's and the lowest saturated
/// one above it (either may be missing).
pub fn decisive_rates(steps: &[Step]) -> Vec<f64> {
    let Some(b) = best(steps) else {
        return Vec::new();
    };
    let above = steps
        .iter()
        .filter(|s| s.saturated && s.repeat == 0 && s.intended_rps > b.intended_rps)
        .map(|s| s.intended_rps)
        .min_by(f64::total_cmp);
    std::iter::once(b.intended_rps).chain(above).collect()
}

/// The decisive steps over their runs (`--repeats`): the ceiling is the median of its
/// step's runs, with their range, and stable only when every run of the ceiling's step
/// held and every run of the step above it saturated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Repeats {
    /// Runs of each decisive step, the search's own included.
    pub runs: u32,
    pub ceiling_step_rps: f64,
    /// The ceiling step's runs, and how many held (valid, not saturated).
    pub ceiling: Held,
    /// Over the ceiling step's runs: the achieved rate, busy CPU per request and
    /// dispatch lag p99.
    pub achieved_rps: Spread,
    pub cpu_ns: Spread,
    pub lag_p99_ns: Spread,
    /// The lowest saturated step above the ceiling, its runs and how many held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub above_step_rps: Option<f64>,
    pub above: Held,
    pub stable: bool,
}

impl Repeats {
    /// `None` without a valid step.
    pub fn of(steps: &[Step], runs: u32) -> Option<Repeats> {
        let rates = decisive_rates(steps);
        let at = |rate: f64| steps.iter().filter(move |s| s.intended_rps == rate);
        let ceiling_step_rps = *rates.first()?;
        let spread = |f: fn(&Step) -> f64| Spread::of(at(ceiling_step_rps).map(f));
        let above_step_rps = rates.get(1).copied();
        let ceiling = Held::of(at(ceiling_step_rps).map(|s| !s.saturated));
        let above = Held::of(
            above_step_rps
                .into_iter()
                .flat_map(at)
                .map(|s| !s.saturated),
        );
        Some(Repeats {
            runs,
            ceiling_step_rps,
            ceiling,
            achieved_rps: spread(|s| s.achieved_rps)?,
            cpu_ns: spread(|s| s.busy_cpu_ns_per_request)?,
            lag_p99_ns: spread(|s| s.dispatch_lag_p99_ns as f64)?,
            above_step_rps,
            above,
            stable: ceiling.held == ceiling.runs && above.held == 0,
        })
    }

    /// `repeats: 171k/s held in 3 of 3 runs (achieved 170.5k-171.0k/s, CPU/request
    /// 5.6-6.0 us); 190k/s saturated in 3 of 3: stable`.
    fn render(&self) -> String {
        let above = self
            .above_step_rps
            .map_or("; no step above it saturated".to_string(), |r| {
                format!(
                    "; {}/s saturated in {} of {}",
                    fmt_rate(r),
                    self.above.runs - self.above.held,
                    self.above.runs
                )
            });
        let verdict = if self.stable {
            "stable".to_string()
        } else {
            "UNSTABLE: the runs of one step disagree, so the host decided the ceiling, not the \
             generator; rerun on a quiet host (`blaster preflight` shows its noise)"
                .to_string()
        };
        format!(
            "repeats: {}/s held in {} of {} runs (achieved {}-{}/s, CPU/request {}-{}, lag p99 \
             up to {}){above}: {verdict}\n",
            fmt_rate(self.ceiling_step_rps),
            self.ceiling.held,
            self.ceiling.runs,
            fmt_rate(self.achieved_rps.min),
            fmt_rate(self.achieved_rps.max),
            fmt_ns(self.cpu_ns.min as u64),
            fmt_ns(self.cpu_ns.max as u64),
            fmt_ns(self.lag_p99_ns.max as u64),
        )
    }
}

impl Verdict {
    /// The ceiling's figure, replaced by the median of its step's runs.
    fn set_rps(&mut self, median: f64) {
        match self {
            Verdict::Ceiling { rps }
            | Verdict::AtLeast { rps, .. }
            | Verdict::Shared { rps, .. } => *rps = median,
            Verdict::NoValidStep { .. } => {}
        }
    }
}

/// What the steps allow the summary to claim (see [`Verdict`]); `sink_cores` names the
/// sink's cores in an "at least".
pub fn verdict(steps: &[Step], sink_cores: &[usize], interrupted: bool) -> Verdict {
    let Some(b) = best(steps) else {
        return Verdict::NoValidStep {
            why: no_valid_step_why(steps, interrupted),
        };
    };
    if b.shared {
        return Verdict::Shared {
            rps: b.achieved_rps,
            core: b.other_load_core,
            other_load: b.other_load,
            steal: b.steal,
        };
    }
    // The step that stopped the climb: the lowest saturated one above the ceiling.
    let limit = steps
        .iter()
        .filter(|s| s.saturated && s.repeat == 0 && s.intended_rps > b.intended_rps)
        .min_by(|x, y| x.intended_rps.total_cmp(&y.intended_rps));
    let sink = [Some(b), limit]
        .into_iter()
        .flatten()
        .filter(|s| s.sink_bound)
        .map(|s| s.sink_busy)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    match sink {
        Some(sink_busy) => Verdict::AtLeast {
            rps: b.achieved_rps,
            sink_busy,
            sink_cores: sink_cores.to_vec(),
        },
        None => Verdict::Ceiling {
            rps: b.achieved_rps,
        },
    }
}

/// Why no step counted: the lowest step's reasons (every step above it saturated
/// too), and what shared the generator's cores or kept the sink busy.
fn no_valid_step_why(steps: &[Step], interrupted: bool) -> String {
    let Some(low) = steps
        .iter()
        .min_by(|a, b| a.intended_rps.total_cmp(&b.intended_rps))
    else {
        return if interrupted {
            "interrupted before the first step ended".into()
        } else {
            "no step ran".into()
        };
    };
    let mut why: Vec<String> = low.invalid_reasons.iter().map(Diagnosis::message).collect();
    if low.achieved_rps < ACHIEVED_MIN_RATIO * low.intended_rps {
        why.push(format!(
            "achieved {}/s of {}/s",
            fmt_rate(low.achieved_rps),
            fmt_rate(low.intended_rps)
        ));
    }
    if low.errors > 0 {
        why.push(format!("{} errors", low.errors));
    }
    if let Some(t) = low.tls.filter(|t| t.handshakes_failed > 0) {
        why.push(format!("{} TLS handshakes failed", t.handshakes_failed));
    }
    let mut s = format!(
        "{} step{} from {}/s down to {}/s saturated; at {}/s: {}",
        steps.len(),
        if steps.len() == 1 { "" } else { "s" },
        fmt_rate(steps.iter().map(|s| s.intended_rps).fold(0.0, f64::max)),
        fmt_rate(low.intended_rps),
        fmt_rate(low.intended_rps),
        if why.is_empty() {
            "saturated".to_string()
        } else {
            why.join("; ")
        }
    );
    if let Some(sh) = steps
        .iter()
        .filter(|s| s.shared)
        .max_by(|a, b| a.other_load.total_cmp(&b.other_load))
    {
        s.push_str(&format!(
            "; {}",
            shared_text(sh.other_load_core, sh.other_load, sh.steal)
        ));
    }
    if let Some(sb) = steps
        .iter()
        .filter(|s| s.sink_bound)
        .max_by(|a, b| a.sink_busy.total_cmp(&b.sink_busy))
    {
        s.push_str(&format!(
            "; the sink's cores were {:.0}% busy",
            sb.sink_busy * 100.0
        ));
    }
    if interrupted {
        s.push_str("; interrupted");
    }
    s
}

/// `generator core 0 was shared: other processes took 48% of it, the hypervisor stole 3%`.
fn shared_text(core: Option<usize>, other_load: f64, steal: f64) -> String {
    let core = core.map_or("a generator core".to_string(), |c| {
        format!("generator core {c}")
    });
    let mut parts = Vec::new();
    if other_load > OTHER_LOAD_WARN || steal <= STEAL_WARN {
        parts.push(format!(
            "other processes took {:.0}% of it",
            other_load * 100.0
        ));
    }
    if steal > STEAL_WARN {
        parts.push(format!("the hypervisor stole {:.0}%", steal * 100.0));
    }
    format!("{core} was shared: {}", parts.join(", "))
}

/// Runs the baseline; progress lines go to stderr as each step ends.
pub fn run(plan: &RunPlan, stop: &Arc<AtomicBool>, usable: &[usize]) -> Result<Baseline, RunError> {
    let placement = sink_cores(&plan.cores, plan.control_core, usable);
    let shared_core = placement.shared;
    let sink_cores = placement.cores;
    // The host's noise first, on the generator cores before anything else runs.
    let host_noise = noise::probe(
        &plan.cores,
        noise::period_for(plan.precision.resolution_ns),
        noise::PROBE_NS,
    );
    crate::errln!("baseline: {}", host_noise.summary(plan.max_lag_ns));
    let max_lag_ns = gate_for(&host_noise, plan.max_lag_ns);
    if let Some(remedy) = host_noise.remedy(plan.max_lag_ns) {
        crate::errln!(
            "baseline: {remedy}; the steps are judged at --max-lag {}, labelled so",
            fmt_ns(max_lag_ns)
        );
    }
    let max_lag_asked_ns = plan.max_lag_ns;
    let judged = RunPlan {
        max_lag_ns,
        ..plan.clone()
    };
    let plan = &judged;
    let sink = start_sink(plan, &sink_cores)?;
    let addr = sink.addr;
    announce(plan, &sink_cores, &sink, shared_core);
    let mut steps: Vec<Step> = Vec::new();
    let mut search = Search::new(plan.start_rate_rps);
    let mut result = Ok(());
    while !stop.load(Ordering::Relaxed) {
        let number = steps.len() + 1;
        let step = match run_step(plan, &sink_cores, addr, stop, number, search.rate) {
            Ok(Some(step)) => step,
            Ok(None) => break,
            Err(e) => {
                result = Err(e);
                break;
            }
        };
        let saturated = step.saturated;
        steps.push(step);
        if !search.advance(saturated, steps.len()) {
            break;
        }
    }
    // The decisive steps again, `--repeats` runs of each in all.
    let decisive = decisive_rates(&steps);
    'repeats: for repeat in 1..plan.repeats {
        for &rate in &decisive {
            if result.is_err() || stop.load(Ordering::Relaxed) {
                break 'repeats;
            }
            let number = steps.len() + 1;
            match run_step(plan, &sink_cores, addr, stop, number, rate) {
                Ok(Some(step)) => steps.push(Step { repeat, ..step }),
                Ok(None) => break 'repeats,
                Err(e) => result = Err(e),
            }
        }
    }
    let interrupted = stop.load(Ordering::Relaxed);
    sink.stop();
    result?;
    let best = best(&steps);
    let repeats = (plan.repeats > 1)
        .then(|| Repeats::of(&steps, plan.repeats))
        .flatten();
    let mut verdict = verdict(&steps, &sink_cores, interrupted);
    if let Some(r) = &repeats {
        verdict.set_rps(r.achieved_rps.median);
    }
    // The ceiling's figures: the median of its step's runs with --repeats, else its one.
    let at_ceiling = |first: fn(&Step) -> f64, median: fn(&Repeats) -> f64| {
        repeats
            .as_ref()
            .map(median)
            .or(best.map(first))
            .unwrap_or(0.0)
    };
    let ceiling_rps = at_ceiling(|s| s.achieved_rps, |r| r.achieved_rps.median);
    Ok(Baseline {
        schema_version: crate::report::SCHEMA_VERSION,
        mode: "baseline",
        sink: addr.to_string(),
        worker_cores: plan.cores.clone(),
        verdict,
        host_noise,
        max_lag_asked_ns,
        max_lag_ns,
        repeats: repeats.clone(),
        sink_cores,
        shared_core,
        connections: plan.connections,
        payload_bytes: plan.payload.len(),
        tls: plan.tls_sink.is_some(),
        http2: plan.http2.is_some(),
        tls_at_ceiling: best.and_then(|s| s.tls),
        ceiling_rps,
        ceiling_rps_per_core: ceiling_rps / plan.cores.len() as f64,
        dispatch_lag_p99_ns_at_ceiling: at_ceiling(
            |s| s.dispatch_lag_p99_ns as f64,
            |r| r.lag_p99_ns.median,
        ) as u64,
        busy_cpu_ns_per_request_at_ceiling: at_ceiling(
            |s| s.busy_cpu_ns_per_request,
            |r| r.cpu_ns.median,
        ),
        steps,
        interrupted,
    })
}

/// The baseline's server: the built-in sink's ring (with its TLS front over TLS), or
/// with `--http2` its HTTP/2 front alone; and the address the steps connect to.
struct BaselineSink {
    ring: Option<sink::SinkHandle>,
    front: Option<TlsFront>,
    h2: Option<H2Front>,
    addr: SocketAddr,
}

impl BaselineSink {
    fn stop(self) {
        drop(self.front);
        drop(self.h2);
        if let Some(ring) = self.ring {
            let _ = ring.stop();
        }
    }
}

/// Starts the built-in sink on `sink_cores`: its ring and, over TLS, its front (which
/// relays to the ring); with `--http2` its HTTP/2 front (h2c, or h2 over TLS),
/// answering requests and gRPC calls with an echo.
fn start_sink(plan: &RunPlan, sink_cores: &[usize]) -> Result<BaselineSink, RunError> {
    let local = SocketAddr::from(([127, 0, 0, 1], 0));
    if plan.http2.is_some() {
        let opts = H2Options {
            settings: ServerSettings {
                max_concurrent_streams: plan.pipeline as u32,
                ..ServerSettings::default()
            },
            answer: Answer::Echo,
            tls: plan.tls_sink.clone(),
            // Reopens after a GOAWAY overlap the closes they replace.
            connections_max: plan.connections * 2 + 16,
            cores: sink_cores.to_vec(),
            stall: None,
            timed: plan.server_time.is_some(),
        };
        let h2 = H2Front::start(local, opts).map_err(|e| RunError::BaselineFront("HTTP/2", e))?;
        return Ok(BaselineSink {
            ring: None,
            front: None,
            addr: h2.local_addr(),
            h2: Some(h2),
        });
    }
    // The plan allows only echo and fixed:N without a target.
    let mode = match plan.framing {
        Framing::Fixed(n) => SinkMode::Fixed(n),
        _ => SinkMode::Echo,
    };
    let sink = sink::start(&SinkConfig {
        listen: local,
        cores: sink_cores.to_vec(),
        mode,
        request_size: plan.payload.len(),
        delay: None,
        stall: None,
        max_connections_per_core: sink_connections_per_core(plan.connections, sink_cores.len()),
        ..SinkConfig::default()
    })?;
    let front = match &plan.tls_sink {
        Some(config) => Some(
            TlsFront::start_on(local, sink.local_addr(), config.clone(), sink_cores)
                .map_err(|e| RunError::BaselineFront("TLS", e))?,
        ),
        None => None,
    };
    let addr = front
        .as_ref()
        .map_or(sink.local_addr(), TlsFront::local_addr);
    Ok(BaselineSink {
        ring: Some(sink),
        front,
        h2: None,
        addr,
    })
}

/// The line that says where the generator and the sink run.
fn announce(plan: &RunPlan, sink_cores: &[usize], sink: &BaselineSink, shared: bool) {
    let addr = sink.addr;
    crate::errln!(
        "baseline: generator on cores {}, built-in sink on {} {} at {addr}{}{}",
        list_cores(&plan.cores),
        if sink_cores.len() == 1 {
            "core"
        } else {
            "cores"
        },
        list_cores(sink_cores),
        if sink.h2.is_some() {
            " (HTTP/2: its front, a thread per connection)"
        } else if sink.front.is_some() {
            " (TLS: its front, a thread per connection, relays to its ring)"
        } else {
            ""
        },
        if shared {
            " (sharing a core: the ceiling is a lower bound)"
        } else {
            ""
        }
    );
}

/// Runs step `number` (from 1) at `rate` and prints its line; `None` when the run was
/// interrupted.
fn run_step(
    plan: &RunPlan,
    sink_cores: &[usize],
    addr: SocketAddr,
    stop: &Arc<AtomicBool>,
    number: usize,
    rate: f64,
) -> Result<Option<Step>, RunError> {
    let label = format!("baseline step {number} ({}/s)", fmt_rate(rate));
    let step = plan.with_rate(rate).with_duration(plan.step_duration_ns);
    // The sink's cores over the step, connecting and draining included.
    let mut sink_load = HostSampler::new(sink_cores, None);
    let report = execute_step(&step, addr, stop, Live::for_step(plan.progress, label))?;
    if report.interrupted {
        return Ok(None);
    }
    let sink_busy = sink_load
        .sample()
        .core_busy
        .iter()
        .map(|&(_, b)| b)
        .fold(0.0, f64::max);
    let step = step_of(&report, sink_busy);
    crate::errln!(
        "baseline: {:>8}/s intended -> {:>8}/s achieved, lag p99 {:>9}, latency p99 {:>9}, {}{}",
        fmt_rate(step.intended_rps),
        fmt_rate(step.achieved_rps),
        fmt_ns(step.dispatch_lag_p99_ns),
        fmt_ns(step.latency_p99_ns),
        if step.saturated { "saturated" } else { "ok" },
        step_notes(&step)
    );
    Ok(Some(step))
}

/// The search for the ceiling: up by [`STEP_FACTOR`] until a step saturates (down by
/// it while even the first saturates), then [`BISECT_STEPS`] bisections between the
/// best rate that held and the lowest that saturated.
struct Search {
    /// The rate of the step to run now.
    rate: f64,
    good: Option<f64>,
    bad: Option<f64>,
    bisections: usize,
}

impl Search {
    fn new(start: f64) -> Self {
        Search {
            rate: start,
            good: None,
            bad: None,
            bisections: 0,
        }
    }

    /// Takes the outcome of the step at `self.rate` (the `steps`-th) and moves `rate`
    /// to the next step's; false when the search is over.
    fn advance(&mut self, saturated: bool, steps: usize) -> bool {
        let rate = self.rate;
        if saturated {
            self.bad = Some(self.bad.map_or(rate, |b| b.min(rate)));
        } else {
            self.good = Some(self.good.map_or(rate, |g| g.max(rate)));
        }
        let next = match (self.good, self.bad) {
            (_, None) if steps < STEPS_MAX => rate * STEP_FACTOR,
            // Even the first step saturated: step down until one holds.
            (None, Some(_)) if steps < STEPS_MAX && rate / STEP_FACTOR >= RATE_MIN_RPS => {
                rate / STEP_FACTOR
            }
            (Some(g), Some(b)) if self.bisections < BISECT_STEPS && b > g * 1.05 => {
                self.bisections += 1;
                (g + b) / 2.0
            }
            _ => return false,
        };
        self.rate = next;
        true
    }
}

/// `, generator core 0 shared 48%, sink-bound (sink 95% busy)`, or nothing.
fn step_notes(st: &Step) -> String {
    let mut n = String::new();
    if st.shared {
        n.push_str(&format!(
            ", {}",
            shared_text(st.other_load_core, st.other_load, st.steal)
        ));
    }
    if st.sink_bound {
        n.push_str(&format!(
            ", sink-bound (sink cores {:.0}% busy)",
            st.sink_busy * 100.0
        ));
    }
    n
}

/// How the summary names what served the steps: the ring alone, or a front (TLS,
/// HTTP/2) of a thread per connection on the sink's cores.
struct Served {
    over: &'static str,
    header_note: &'static str,
    ceiling: &'static str,
    sink_what: &'static str,
    elsewhere: &'static str,
}

impl Served {
    fn of(b: &Baseline) -> Served {
        match (b.tls, b.http2) {
            (false, false) => Served {
                over: "",
                header_note: "",
                ceiling: "generator ceiling",
                sink_what: "",
                elsewhere: "a sink on another machine",
            },
            (true, false) => Served {
                over: " over TLS",
                header_note: " (TLS served by the sink's front: a thread per connection, on those cores)",
                ceiling: "generator TLS ceiling",
                sink_what: " (its ring and its TLS front, a thread per connection)",
                elsewhere: "`blaster sink --tls` on another machine and `blaster run --tls --target`",
            },
            (tls, true) => Served {
                over: if tls {
                    " over HTTP/2 and TLS"
                } else {
                    " over HTTP/2"
                },
                header_note: " (HTTP/2 served by the sink's HTTP/2 front: a thread per connection, on those cores)",
                ceiling: "generator HTTP/2 ceiling",
                sink_what: " (its HTTP/2 front, a thread per connection)",
                elsewhere: "`blaster sink --http2` on another machine and `blaster run --http2 --target`",
            },
        }
    }
}

/// The run's line and the step table's header.
fn render_header(b: &Baseline) -> String {
    let served = Served::of(b);
    let mut s = String::new();
    s.push_str(&format!(
        "loopback baseline{}: {} connections, {}, generator cores {}, sink {} {}{}\n",
        served.over,
        b.connections,
        if b.http2 {
            "HTTP/2 requests".to_string()
        } else {
            format!("{}-byte echo requests", b.payload_bytes)
        },
        list_cores(&b.worker_cores),
        if b.sink_cores.len() == 1 {
            "core"
        } else {
            "cores"
        },
        list_cores(&b.sink_cores),
        served.header_note
    ));
    s.push_str(&format!(
        "{:>12} {:>12} {:>6} {:>12} {:>12} {:>12} {:>10} {:>6} {:>6} {:>6}{}\n",
        "intended/s",
        "achieved/s",
        "valid",
        "lag p99",
        "lat p50",
        "lat p99",
        "cpu/req",
        "other",
        "steal",
        "sink",
        if b.tls {
            format!(" {:>11} {:>10}", "handshakes", "hs p90")
        } else {
            String::new()
        } + if b.steps.iter().any(|st| st.server_time.is_some()) {
            format!(" {:>12} {:>12}", "sink p50", "net+q p50")
        } else {
            String::new()
        }
        .as_str()
    ));
    s
}

/// One row of the step table.
fn render_step(st: &Step) -> String {
    let mut mark = match (st.shared, st.sink_bound) {
        (true, true) => "  shared core, sink-bound",
        (true, false) => "  shared core",
        (false, true) => "  sink-bound",
        (false, false) => "",
    }
    .to_string();
    if st.repeat > 0 {
        mark.push_str(&format!("  repeat {}", st.repeat));
    }
    let tls = st.tls.map_or(String::new(), |t| {
        format!(
            " {:>11} {:>10}",
            t.handshakes_full + t.handshakes_resumed,
            fmt_ns(t.handshake_p90_ns)
        )
    });
    let own = st.server_time.map_or(String::new(), |t| {
        format!(
            " {:>12} {:>12}",
            fmt_ns(t.server_time_p50_ns),
            fmt_ns(t.network_queueing_p50_ns)
        )
    });
    format!(
        "{:>12.0} {:>12.0} {:>6} {:>12} {:>12} {:>12} {:>10} {:>5.0}% {:>5.1}% {:>5.0}%{tls}{own}{mark}\n",
        st.intended_rps,
        st.achieved_rps,
        if st.saturated { "no" } else { "yes" },
        fmt_ns(st.dispatch_lag_p99_ns),
        fmt_ns(st.latency_p50_ns),
        fmt_ns(st.latency_p99_ns),
        fmt_ns(st.busy_cpu_ns_per_request as u64),
        st.other_load * 100.0,
        st.steal * 100.0,
        st.sink_busy * 100.0,
    )
}

/// The ceiling line: what the steps say of the generator.
fn render_verdict(b: &Baseline) -> String {
    let at_ceiling = || {
        format!(
            "dispatch lag p99 {} at that rate, {} busy CPU per request",
            fmt_ns(b.dispatch_lag_p99_ns_at_ceiling),
            fmt_ns(b.busy_cpu_ns_per_request_at_ceiling as u64)
        )
    };
    let per_core = |rps: f64| rps / b.worker_cores.len().max(1) as f64;
    let lower_bound = if b.shared_core {
        " (sink shared a core: lower bound)"
    } else {
        ""
    };
    let served = Served::of(b);
    let mut ceiling = served.ceiling.to_string();
    if b.max_lag_ns != b.max_lag_asked_ns {
        ceiling.push_str(&format!(
            " at --max-lag {} (this host's floor, not the {} asked for)",
            fmt_ns(b.max_lag_ns),
            fmt_ns(b.max_lag_asked_ns)
        ));
    }
    // Over TLS or HTTP/2 the sink's cores also run its front, the usual limit on a
    // small host.
    let Served {
        sink_what,
        elsewhere,
        ..
    } = served;
    match &b.verdict {
        Verdict::Ceiling { rps } => format!(
            "{ceiling}: {}/s ({}/s per core), {}{lower_bound}\n",
            fmt_rate(*rps),
            fmt_rate(per_core(*rps)),
            at_ceiling()
        ),
        Verdict::AtLeast {
            rps,
            sink_busy,
            sink_cores,
        } => format!(
            "{ceiling}: at least {}/s (at least {}/s per core), {}; sink-bound: the \
             sink's {} {}{sink_what} were {:.0}% busy, so the sink may have set the limit \
             (leave it more cores: fewer --cores, or {elsewhere}){lower_bound}\n",
            fmt_rate(*rps),
            fmt_rate(per_core(*rps)),
            at_ceiling(),
            if sink_cores.len() == 1 {
                "core"
            } else {
                "cores"
            },
            list_cores(sink_cores),
            sink_busy * 100.0
        ),
        Verdict::Shared {
            rps,
            core,
            other_load,
            steal,
        } => format!(
            "no {ceiling}: the best valid step ({}/s, {}/s per core) ran while {}; \
             the figure is this host's, not the generator's: rerun on a quiet host\n",
            fmt_rate(*rps),
            fmt_rate(per_core(*rps)),
            shared_text(*core, *other_load, *steal)
        ),
        Verdict::NoValidStep { why } => format!("no valid step: {why}\n"),
    }
}

/// The baseline's text summary.
pub fn render(b: &Baseline) -> String {
    let mut s = render_header(b);
    for st in &b.steps {
        s.push_str(&render_step(st));
    }
    s.push_str(&format!("{}\n", b.host_noise.summary(b.max_lag_asked_ns)));
    if b.max_lag_ns != b.max_lag_asked_ns {
        s.push_str(&format!(
            "no ceiling at --max-lag {}: even idle, this host's timer is late {} at p99, so \
             every step would fail that gate; below, the steps judged at --max-lag {}, the gate \
             this host can hold:\n",
            fmt_ns(b.max_lag_asked_ns),
            fmt_ns(b.host_noise.timer_late_p99_ns),
            fmt_ns(b.max_lag_ns),
        ));
    }
    s.push_str(&render_verdict(b));
    if let Some(r) = &b.repeats {
        s.push_str(&r.render());
    }
    if let Some(t) = &b.tls_at_ceiling {
        s.push_str(&format!(
            "tls at that rate: {} handshakes ({} full, {} resumed, {} failed), handshake p90 {}; \
             the sink's certificate was made at start for localhost and trusted alone\n",
            t.handshakes_full + t.handshakes_resumed,
            t.handshakes_full,
            t.handshakes_resumed,
            t.handshakes_failed,
            fmt_ns(t.handshake_p90_ns)
        ));
    }
    if b.interrupted {
        s.push_str("interrupted: the ceiling is the best step measured before Ctrl-C\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search whose steps saturate at and above `limit`; the rates it ran.
    fn rates_until(start: f64, limit: f64) -> Vec<f64> {
        let mut search = Search::new(start);
        let mut rates = vec![search.rate];
        while search.advance(search.rate >= limit, rates.len()) {
            rates.push(search.rate);
        }
        rates
    }

    #[test]
    fn the_search_steps_up_then_bisects_twice() {
        // The sequence a real baseline ran here: 60k, 90k ok; 135k, 112.5k, 101.25k
        // saturated; then two bisections are spent and the search ends.
        assert_eq!(
            rates_until(60_000.0, 100_000.0),
            [60_000.0, 90_000.0, 135_000.0, 112_500.0, 101_250.0]
        );
        // The bisection moves up when its midpoint holds.
        assert_eq!(
            rates_until(60_000.0, 130_000.0),
            [60_000.0, 90_000.0, 135_000.0, 112_500.0, 123_750.0]
        );
    }

    #[test]
    fn the_search_steps_down_while_even_the_first_step_saturates() {
        let rates = rates_until(9_000.0, 3_000.0);
        assert_eq!(rates[..4], [9_000.0, 6_000.0, 4_000.0, 4_000.0 / 1.5]);
        // Then up between the rate that held and the one that did not.
        assert_eq!(rates[4], (4_000.0 / 1.5 + 4_000.0) / 2.0);
        // Never below RATE_MIN_RPS, never more than STEPS_MAX steps.
        assert_eq!(rates_until(1_200.0, 0.0), [1_200.0]);
        assert_eq!(rates_until(1.0, f64::INFINITY).len(), STEPS_MAX);
    }

    #[test]
    fn the_sink_gets_as_many_cores_as_the_generator_from_the_rest() {
        let all: Vec<usize> = (0..16).collect();
        // --cores 4-11 on 16 cores: the control core is 0 (the first spare); the sink
        // takes the other seven spare cores and then the control core.
        let p = sink_cores(&(4..=11).collect::<Vec<_>>(), 0, &all);
        assert_eq!(p.cores, [0, 1, 2, 3, 12, 13, 14, 15]);
        assert!(!p.shared);
        // Fewer generator cores: the sink keeps off the control core.
        assert_eq!(sink_cores(&[4, 5], 0, &all).cores, [1, 2]);
        // Two cores, --cores 0: generator core 0, sink core 1 (also the control core).
        assert_eq!(
            sink_cores(&[0], 1, &[0, 1]),
            SinkPlacement {
                cores: vec![1],
                shared: false
            }
        );
        // Up to the cores left: 12 generator cores on 16 leave 4.
        let p = sink_cores(&(0..12).collect::<Vec<_>>(), 12, &all);
        assert_eq!(p.cores, [12, 13, 14, 15]);
        // Never a generator core, unless there is no other.
        for gen_cores in [vec![0], vec![3, 7], (0..15).collect()] {
            let p = sink_cores(&gen_cores, 15, &all);
            assert!(p.cores.iter().all(|c| !gen_cores.contains(c)), "{p:?}");
        }
        assert_eq!(
            sink_cores(&[0, 1], 0, &[0, 1]),
            SinkPlacement {
                cores: vec![0],
                shared: true
            }
        );
    }

    #[test]
    fn each_sink_core_admits_its_share_with_room_for_uneven_hashing() {
        assert_eq!(sink_connections_per_core(64, 1), 64 + 16 + 16);
        assert_eq!(sink_connections_per_core(100_000, 8), 12_500 + 3_125 + 16);
        assert!(sink_connections_per_core(7, 3) * 3 >= 7);
        assert_eq!(sink_connections_per_core(10, 0), 10 + 2 + 16);
    }

    fn step(intended: f64, saturated: bool) -> Step {
        Step {
            repeat: 0,
            intended_rps: intended,
            achieved_rps: if saturated { intended * 0.5 } else { intended },
            valid: !saturated,
            saturated,
            invalid_reasons: if saturated {
                vec![Diagnosis::DispatchLagHigh {
                    p99_ns: 3_000_000,
                    max_lag_ns: 1_000_000,
                }]
            } else {
                vec![]
            },
            dispatch_lag_p99_ns: 0,
            latency_p50_ns: 0,
            latency_p99_ns: 0,
            errors: 0,
            busy_cpu_ns_per_request: 0.0,
            other_load: 0.01,
            other_load_core: Some(0),
            steal: 0.0,
            shared: false,
            sink_busy: 0.3,
            sink_bound: false,
            histograms: crate::report::hdr::Encoded4::of(&crate::metrics::Histograms::new()),
            tls: None,
            server_time: None,
        }
    }

    fn again(mut s: Step, repeat: u32, achieved: f64) -> Step {
        s.repeat = repeat;
        s.achieved_rps = achieved;
        s
    }

    /// Issue 33: the decisive steps are the ceiling's and the first saturated above it;
    /// the ceiling is the median of its runs with their range, and unstable when runs
    /// of one step disagree.
    #[test]
    fn repeats_give_the_median_and_call_disagreement_unstable() {
        let search = vec![step(20e3, false), step(30e3, false), step(45e3, true)];
        assert_eq!(decisive_rates(&search), [30e3, 45e3]);
        assert_eq!(decisive_rates(&[step(20e3, true)]), Vec::<f64>::new());
        assert_eq!(Repeats::of(&[step(20e3, true)], 3), None);
        let mut steps = search.clone();
        steps.extend([
            again(step(30e3, false), 1, 29.0e3),
            again(step(45e3, true), 1, 20e3),
            again(step(30e3, false), 2, 29.5e3),
            again(step(45e3, true), 2, 20e3),
        ]);
        let r = Repeats::of(&steps, 3).unwrap();
        assert_eq!((r.ceiling.runs, r.ceiling.held), (3, 3));
        assert_eq!((r.above.runs, r.above.held), (3, 0));
        assert_eq!(r.achieved_rps.median, 29.5e3);
        assert_eq!((r.achieved_rps.min, r.achieved_rps.max), (29e3, 30e3));
        assert_eq!(r.above_step_rps, Some(45e3));
        assert!(r.stable, "{r:?}");
        assert!(r.render().contains(": stable"), "{}", r.render());
        // A repeat of the ceiling's step saturates: unstable, and said so.
        steps[3] = again(step(30e3, true), 1, 15e3);
        let r = Repeats::of(&steps, 3).unwrap();
        assert_eq!(r.ceiling.held, 2);
        assert!(
            !r.stable && r.render().contains("UNSTABLE"),
            "{}",
            r.render()
        );
        // The step above holds in a repeat: unstable too.
        steps[3] = again(step(30e3, false), 1, 29.0e3);
        steps[4] = again(step(45e3, false), 1, 45e3);
        let r = Repeats::of(&steps, 3).unwrap();
        assert_eq!(r.above.held, 1);
        assert!(!r.stable);
        // Repeats never move the ceiling the search found.
        assert_eq!(best(&steps).unwrap().intended_rps, 30e3);
    }

    #[test]
    fn a_gate_the_host_cannot_hold_is_raised_to_what_it_can() {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        h.record_n(60_000, 970).unwrap();
        h.record_n(2_500_000, 30).unwrap();
        let late = HostNoise::from_parts(&[0], 100_000, 1_000_000_000, &h, &[], &[]);
        assert_eq!(gate_for(&late, 1_000_000), 5_000_000);
        assert_eq!(gate_for(&late, 10_000_000), 10_000_000);
    }

    fn shared(mut s: Step, other_load: f64) -> Step {
        s.other_load = other_load;
        s.shared = true;
        s
    }

    fn sink_bound(mut s: Step) -> Step {
        s.sink_busy = 0.96;
        s.sink_bound = true;
        s
    }

    #[test]
    fn the_verdict_claims_only_what_the_steps_support() {
        let quiet = [step(20e3, false), step(30e3, false), step(45e3, true)];
        assert_eq!(verdict(&quiet, &[1], false), Verdict::Ceiling { rps: 30e3 });
        // The ceiling step's core was shared: not the generator's figure.
        let busy = [
            step(20e3, false),
            shared(step(30e3, false), 0.48),
            step(45e3, true),
        ];
        assert_eq!(
            verdict(&busy, &[1], false),
            Verdict::Shared {
                rps: 30e3,
                core: Some(0),
                other_load: 0.48,
                steal: 0.0
            }
        );
        // A shared step below the ceiling does not taint it.
        let early = [
            shared(step(20e3, false), 0.48),
            step(30e3, false),
            step(45e3, true),
        ];
        assert_eq!(verdict(&early, &[1], false), Verdict::Ceiling { rps: 30e3 });
        // The sink was busy at the step that stopped the climb: "at least".
        let sink = [
            step(20e3, false),
            step(30e3, false),
            sink_bound(step(45e3, true)),
        ];
        assert_eq!(
            verdict(&sink, &[1, 2], false),
            Verdict::AtLeast {
                rps: 30e3,
                sink_busy: 0.96,
                sink_cores: vec![1, 2]
            }
        );
        // ...or at the ceiling step itself.
        let at = [step(20e3, false), sink_bound(step(30e3, false))];
        assert!(matches!(verdict(&at, &[1], false), Verdict::AtLeast { .. }));
        // A sink-bound step far above the limit says nothing about it.
        let far = [
            step(20e3, false),
            step(30e3, true),
            sink_bound(step(45e3, true)),
        ];
        assert_eq!(verdict(&far, &[1], false), Verdict::Ceiling { rps: 20e3 });
    }

    #[test]
    fn no_valid_step_says_why_never_a_zero_ceiling() {
        let steps = [
            shared(step(20e3, true), 0.52),
            step(13_333.0, true),
            step(8_889.0, true),
        ];
        let Verdict::NoValidStep { why } = verdict(&steps, &[1], false) else {
            panic!("a verdict from saturated steps");
        };
        for want in [
            "3 steps from 20.0k/s down to 8889/s saturated",
            "dispatch lag p99 3.00 ms exceeds --max-lag",
            "achieved 4444/s of 8889/s",
            "generator core 0 was shared: other processes took 52% of it",
        ] {
            assert!(why.contains(want), "{want:?} missing in {why}");
        }
        assert_eq!(
            verdict(&[], &[1], true),
            Verdict::NoValidStep {
                why: "interrupted before the first step ended".into()
            }
        );
    }

    fn quiet_host() -> HostNoise {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        h.record_n(60_000, 1_000).unwrap();
        HostNoise::from_parts(&[0], 100_000, 1_000_000_000, &h, &[], &[])
    }

    #[test]
    fn a_ceiling_at_a_raised_gate_is_labelled_so() {
        let mut b = baseline(vec![step(20e3, false), step(30e3, true)]);
        b.max_lag_ns = 5_000_000;
        let text = render(&b);
        assert!(text.contains("no ceiling at --max-lag 1.00 ms"), "{text}");
        assert!(
            text.contains("generator ceiling at --max-lag 5.00 ms (this host's floor, not the 1.00 ms asked for): 20.0k/s"),
            "{text}"
        );
        assert!(text.contains("this host: timer late p99"), "{text}");
    }

    fn baseline(steps: Vec<Step>) -> Baseline {
        let best = best(&steps).map_or(0.0, |s| s.achieved_rps);
        Baseline {
            schema_version: 1,
            mode: "baseline",
            sink: "127.0.0.1:1".into(),
            worker_cores: vec![0],
            verdict: verdict(&steps, &[1], false),
            sink_cores: vec![1],
            shared_core: false,
            connections: 64,
            payload_bytes: 64,
            tls: false,
            http2: false,
            host_noise: quiet_host(),
            max_lag_asked_ns: 1_000_000,
            max_lag_ns: 1_000_000,
            repeats: None,
            tls_at_ceiling: None,
            ceiling_rps: best,
            ceiling_rps_per_core: best,
            dispatch_lag_p99_ns_at_ceiling: 0,
            busy_cpu_ns_per_request_at_ceiling: 0.0,
            steps,
            interrupted: false,
        }
    }

    #[test]
    fn the_summary_says_what_was_measured() {
        let text = render(&baseline(vec![step(20e3, false), step(30e3, true)]));
        assert!(
            text.contains("generator ceiling: 20.0k/s (20.0k/s per core)"),
            "{text}"
        );
        let text = render(&baseline(vec![
            shared(step(20e3, false), 0.48),
            step(30e3, true),
        ]));
        assert!(
            text.contains("no generator ceiling: the best valid step (20.0k/s")
                && text.contains("generator core 0 was shared: other processes took 48%")
                && text.contains("rerun on a quiet host")
                && text.contains("shared core"),
            "{text}"
        );
        let text = render(&baseline(vec![
            step(20e3, false),
            sink_bound(step(30e3, true)),
        ]));
        assert!(
            text.contains("generator ceiling: at least 20.0k/s") && text.contains("sink-bound"),
            "{text}"
        );
        let text = render(&baseline(vec![step(20e3, true)]));
        assert!(
            text.contains("no valid step: 1 step from 20.0k/s"),
            "{text}"
        );
        assert!(!text.contains("ceiling: 0"), "{text}");
    }

    fn over_tls(mut s: Step) -> Step {
        s.tls = Some(StepTls {
            handshakes_full: 60,
            handshakes_resumed: 4,
            handshakes_failed: 0,
            handshake_p90_ns: 1_500_000,
        });
        s
    }

    fn tls_baseline(steps: Vec<Step>) -> Baseline {
        let mut b = baseline(steps);
        b.tls = true;
        b.tls_at_ceiling = best(&b.steps).and_then(|s| s.tls);
        b
    }

    #[test]
    fn a_tls_summary_says_tls_and_what_its_front_costs() {
        let text = render(&tls_baseline(vec![
            over_tls(step(20e3, false)),
            over_tls(step(30e3, true)),
        ]));
        for want in [
            "loopback baseline over TLS: 64 connections",
            "a thread per connection",
            "generator TLS ceiling: 20.0k/s (20.0k/s per core)",
            "tls at that rate: 64 handshakes (60 full, 4 resumed, 0 failed), handshake p90 1.50 ms",
            "handshakes",
        ] {
            assert!(text.contains(want), "{want:?} missing in {text}");
        }
        // The front on the sink's cores set the pace: the figure is the front's.
        let text = render(&tls_baseline(vec![
            over_tls(step(20e3, false)),
            sink_bound(over_tls(step(30e3, true))),
        ]));
        assert!(
            text.contains("generator TLS ceiling: at least 20.0k/s")
                && text.contains(
                    "(its ring and its TLS front, a thread per connection) were 96% busy"
                )
                && text.contains("`blaster sink --tls` on another machine"),
            "{text}"
        );
        // A plain baseline says none of it.
        let text = render(&baseline(vec![step(20e3, false)]));
        assert!(!text.contains("TLS") && !text.contains("tls"), "{text}");
    }
}
