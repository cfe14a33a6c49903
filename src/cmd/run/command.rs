//! `blaster run`'s command: validates the command line ([`validate`]), claims the
//! outputs and opens the exporters, checks the host, then runs the plan against
//! `--target` ([`super::execute`]) or the loopback baseline, prints, writes and judges.

use super::{RunError, execute};
use crate::cli::RunArgs;
use crate::cmd::AppError;
use crate::cmd::output::{distinct_outputs, emit_text};
use crate::outcome::Outcome;
use crate::report::export::{self, Outputs};
use crate::report::{json, text};
use crate::run_plan::{HostFacts, RunPlan};
use crate::slo::{AbortIf, Observed, Slo, Verdict};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// A `run` command line, validated: everything `run` refuses is refused here, before
/// anything is created, bound or connected; `preflight` validates through it too, so
/// it refuses the same command lines with the same lines.
pub struct ValidRun {
    pub plan: RunPlan,
    pub facts: HostFacts,
    pub slo: Option<Slo>,
    /// `--abort-if`: conditions that stop the run.
    pub abort_if: Vec<AbortIf>,
    /// `--metrics-listen`'s address and `--metrics-linger`.
    pub metrics: Option<(std::net::SocketAddr, std::time::Duration)>,
}

/// Validates a `run` command line (and `preflight`'s): the plan, the SLO, the outputs.
pub fn validate(a: &RunArgs) -> Result<ValidRun, AppError> {
    let slo = a
        .slo
        .as_deref()
        .map(|s| Slo::parse(s).map_err(|m| AppError::Usage(format!("--slo: {m}"))))
        .transpose()?;
    let abort_if = a
        .abort_if
        .iter()
        .map(|s| AbortIf::parse(s).map_err(|m| AppError::Usage(format!("--abort-if: {m}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let facts = HostFacts::gather(a);
    let plan = RunPlan::build(a, &facts)?;
    for guard in &abort_if {
        let one = Slo {
            spec: guard.text.clone(),
            terms: vec![guard.hold.clone()],
        };
        one.check_workload(plan.frames.is_some())
            .map_err(|m| AppError::Usage(format!("--abort-if: {m}")))?;
    }
    if let Some(s) = &slo {
        s.check_workload(plan.frames.is_some())
            .map_err(|m| AppError::Usage(format!("--slo: {m}")))?;
    }
    let has_target = plan.target.is_some();
    for (flag, p) in exports_of(a) {
        if p.is_some() && !has_target {
            return Err(AppError::Usage(format!(
                "--{flag}: needs --target (the baseline's steps are not one run to export)"
            )));
        }
    }
    // At most one output on stdout, and no two on one file.
    let mut all = vec![("json", a.json.as_deref())];
    all.extend(exports_of(a).map(|(f, p)| (f, p.as_deref())));
    distinct_outputs(&all)?;
    let metrics = match &a.metrics_listen {
        Some(_) if !has_target => {
            return Err(AppError::Usage(
                "--metrics-listen: needs --target (the baseline's steps are not one run)".into(),
            ));
        }
        Some(addr) => Some((
            export::metrics_server::parse_listen(addr)
                .map_err(|m| AppError::Usage(format!("--metrics-listen: {m}")))?,
            metrics_linger(&a.metrics_linger)?,
        )),
        None => None,
    };
    if slo.is_some() && !has_target {
        return Err(AppError::Usage(
            "--slo: needs --target (the baseline measures the generator, not a target)".into(),
        ));
    }
    if !abort_if.is_empty() && !has_target {
        return Err(AppError::Usage(
            "--abort-if: needs --target (the baseline measures the generator, not a target)".into(),
        ));
    }
    Ok(ValidRun {
        plan,
        facts,
        slo,
        abort_if,
        metrics,
    })
}

/// `run`'s exports by flag: `--hdr-log`, `--percentiles`, `--csv`.
fn exports_of(a: &RunArgs) -> impl Iterator<Item = (&'static str, &Option<std::path::PathBuf>)> {
    [
        ("hdr-log", &a.hdr_log),
        ("percentiles", &a.percentiles),
        ("csv", &a.csv),
    ]
    .into_iter()
}

/// `blaster run`: one measured run against `--target`, or the loopback baseline.
pub fn command(a: &RunArgs, stop: &Arc<AtomicBool>) -> Result<Outcome, AppError> {
    let ValidRun {
        plan,
        facts,
        slo,
        abort_if,
        metrics,
    } = validate(a)?;
    // Claimed before anything connects: an unwritable path fails now, not after the run.
    let mut exporters = open_exporters(a, &plan, metrics, stop)?;
    let json_out = json::claim(plan.json.as_deref())?;
    let json_stdout = json::is_stdout(plan.json.as_deref()) || exporters.stdout_taken;
    // Memory and cores before anything connects (descriptors and ports: check_plan).
    crate::cmd::preflight::check_host(&plan).map_err(RunError::from)?;
    let Some(target) = plan.target else {
        // Generator and in-process sink both hold the connections; over TLS the
        // sink's front holds two more per connection (the client's, the relay's).
        let ends = if plan.tls_sink.is_some() { 4 } else { 2 };
        crate::cmd::preflight::ensure_fds(plan.connections as u64 * ends, crate::limits::FD_MARGIN)
            .map_err(RunError::from)?;
        let b = crate::cmd::baseline::run(&plan, stop, &facts.usable_cores)?;
        emit_text(&crate::cmd::baseline::render(&b), json_stdout);
        if let Some(d) = json_out {
            d.write(&b)?;
        }
        // No step the generator kept up with, or none at the gate asked for (the host
        // could not hold it even idle): as an invalid run, exit 3.
        let none = matches!(b.verdict, crate::cmd::baseline::Verdict::NoValidStep { .. })
            || b.max_lag_ns != b.max_lag_asked_ns;
        return Ok(if none && !b.interrupted {
            Outcome::Invalid
        } else {
            Outcome::Ok
        });
    };
    crate::cmd::preflight::check_plan(&plan).map_err(RunError::from)?;
    let rate = plan.rate_rps.expect("plan requires --rate with --target");
    if let Some(w) = crate::cmd::run::time_wait_warning(&plan, rate) {
        crate::errln!("blaster: warning: {w}");
    }
    let report = execute(
        &plan,
        target,
        stop,
        crate::report::progress::Live::for_run(plan.progress),
        &mut exporters.outputs,
        &abort_if,
    )?;
    let verdict = slo.map(|s| s.judge(&Observed::of(&report)));
    emit_text(
        &text::render_with_verdict(&report, verdict.as_ref().map(Verdict::render).as_deref()),
        json_stdout,
    );
    if let Some(d) = json_out {
        let out = crate::slo::RunOutput {
            report: &report,
            slo: verdict.as_ref(),
        };
        d.write(&out)?;
    }
    exporters
        .outputs
        .finish(&report)
        .map_err(|(p, e)| output_error(&p, e))?;
    // A worker whose ring failed: what it measured is reported above, and the run
    // ends as an environment error.
    if let Some(e) = report.worker_error {
        return Err(RunError::Worker(e).into());
    }
    // The replay's file changed under it: the run did not send what was asked.
    if let Some(why) = report.replay.as_ref().and_then(|r| r.stopped.clone()) {
        return Err(RunError::ReplayStopped(why).into());
    }
    // An abort stopped the run on purpose (a failing target, most often): its own
    // exit code, before the others.
    if report.abort.is_some() {
        return Ok(Outcome::Aborted);
    }
    // Nothing answered is not a success, whatever the gate says about the generator.
    if let Some(why) = report.nothing_succeeded() {
        return Err(RunError::NothingSucceeded(why).into());
    }
    // An invalid run's figures describe the generator, so its SLO verdict cannot
    // count: exit code 3 wins over 4.
    Ok(if !report.valid {
        Outcome::Invalid
    } else if verdict.is_some_and(|v| !v.met) {
        Outcome::SloBroken
    } else {
        Outcome::Ok
    })
}

/// The exporters of `run` (`--hdr-log`, `--percentiles`, `--csv`, `--metrics-listen`),
/// opened (and the listener bound) before the run.
struct Exporters {
    outputs: Outputs,
    /// Some output is `-`: the text report goes to stderr.
    stdout_taken: bool,
}

/// Opens the exporters' files now (validated by [`validate`]), so an unwritable
/// path fails before anything connects.
fn open_exporters(
    a: &RunArgs,
    plan: &RunPlan,
    metrics: Option<(std::net::SocketAddr, std::time::Duration)>,
    stop: &Arc<AtomicBool>,
) -> Result<Exporters, AppError> {
    let stdout_taken = exports_of(a).any(|(_, p)| json::is_stdout(p.as_deref()));
    let mut outputs = Outputs::none();
    if let Some(p) = &a.hdr_log {
        let e = export::hdr_log::HdrLog::create(p, plan.frames.is_some())
            .map_err(|e| output_error(p, e))?;
        outputs.push(Box::new(e));
    }
    if let Some(p) = &a.percentiles {
        let e = export::hgrm::Hgrm::create(p).map_err(|e| output_error(p, e))?;
        outputs.push(Box::new(e));
    }
    if let Some(p) = &a.csv {
        let e =
            export::csv::Csv::create(p, plan.frames.is_some()).map_err(|e| output_error(p, e))?;
        outputs.push(Box::new(e));
    }
    // Last, so its linger after the run comes once the files are in place.
    if let Some((addr, linger)) = metrics {
        let labels = export::prometheus::Labels {
            run_id: plan.fleet.run_id.clone(),
            shard: plan.fleet.shard.to_string(),
        };
        let m = export::metrics_server::LiveMetrics::bind(
            addr,
            labels,
            linger,
            Some(plan.control_core),
            stop.clone(),
        )?;
        let m = if plan.frames.is_some() {
            m.for_frames()
        } else {
            m
        };
        crate::errln!("blaster: metrics at http://{}/metrics", m.local_addr());
        outputs.push(Box::new(m));
    }
    Ok(Exporters {
        outputs,
        stdout_taken,
    })
}

/// `--metrics-linger`: a duration up to [`crate::limits::METRICS_LINGER_NS_MAX`].
fn metrics_linger(s: &str) -> Result<std::time::Duration, AppError> {
    let max = crate::limits::METRICS_LINGER_NS_MAX;
    match crate::units::parse_duration(s) {
        Ok(d) if d.as_nanos() <= u128::from(max) => Ok(d),
        Ok(_) => Err(AppError::Usage(format!(
            "--metrics-linger: must be at most {}, got {s}",
            crate::units::fmt_ns(max)
        ))),
        Err(m) => Err(AppError::Usage(format!("--metrics-linger: {m}"))),
    }
}

fn output_error(p: &std::path::Path, source: std::io::Error) -> AppError {
    crate::report::output::OutputError {
        path: p.display().to_string(),
        source,
    }
    .into()
}
