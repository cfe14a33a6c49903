//! The commands: parse the command line, then run one subcommand (`run`, `sink`,
//! `preflight`, `plan`, `search`, `report`, `compare`, `merge`). `main` only maps the
//! [`Outcome`] or [`AppError`] to an exit code. The top layer: everything here may use
//! every other module; nothing outside `cmd` uses it.

pub mod baseline;
pub mod compare;
pub mod merge;
pub mod plan;
pub mod preflight;
pub mod run;
pub mod search;

use crate::cli::{
    Cli, Command, CompareArgs, PlanArgs, ReportArgs, RunArgs, SearchArgs, SinkArgs,
    with_default_subcommand,
};
use crate::cmd::run::{RunError, execute};
use crate::outcome::{Outcome, exit};
use crate::report::export::{self, Outputs};
use crate::report::{json, text};
use crate::run_plan::{HostFacts, PlanError, RunPlan, sink_config, usable_cores};
use crate::slo::{Observed, Slo, Verdict};
use clap::Parser;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Bad command line (clap's message, already one line, or ours).
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Run(#[from] RunError),
    /// A file `blaster report` reads is missing, unreadable or not a run report.
    #[error(transparent)]
    Input(#[from] crate::report::input::InputError),
    /// An output file could not be claimed or written.
    #[error(transparent)]
    Output(#[from] crate::report::output::OutputError),
    #[error(transparent)]
    Render(#[from] crate::report::html::RenderError),
    /// Shard files that do not belong together, or are not run reports.
    #[error(transparent)]
    Merge(#[from] crate::cmd::merge::MergeError),
    /// `--metrics-listen`'s address could not be bound (in use, not local).
    #[error(transparent)]
    Listen(#[from] export::metrics_server::ListenError),
}

impl From<PlanError> for AppError {
    fn from(e: PlanError) -> Self {
        AppError::Usage(e.to_string())
    }
}

impl AppError {
    pub fn exit_code(&self) -> i32 {
        match self {
            AppError::Usage(_) => exit::USAGE,
            AppError::Merge(e) => e.exit_code(),
            AppError::Run(_)
            | AppError::Input(_)
            | AppError::Output(_)
            | AppError::Render(_)
            | AppError::Listen(_) => exit::RUNTIME,
        }
    }
}

/// Parses `args` (including argv[0]) and runs the command.
pub fn main_with_args(args: Vec<String>) -> Result<Outcome, AppError> {
    let cli = match Cli::try_parse_from(with_default_subcommand(args)) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return Ok(Outcome::Ok);
            }
            return Err(AppError::Usage(clap_line(&e.render().to_string())));
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    on_signals(&stop);
    match cli.command {
        Command::Run(a) => run_command(&a, &stop),
        Command::Sink(a) => sink_command(&a, &stop),
        Command::Plan(a) => plan_command(&a),
        Command::Search(a) => search_command(&a, &stop),
        Command::Preflight(a) => preflight_command(&a),
        Command::Report(a) => report_command(&a),
        Command::Compare(a) => compare_command(&a),
        Command::Merge(a) => merge_command(&a),
    }
}

/// clap's error as one line: its first line, with the list that follows a line ending
/// in `:` (the missing arguments of "the following required arguments were not
/// provided:") joined onto it; the usage hint after it is dropped.
fn clap_line(rendered: &str) -> String {
    let mut lines = rendered.lines();
    let first = lines.next().unwrap_or("invalid arguments");
    let first = first.trim_start_matches("error: ").trim_end();
    if !first.ends_with(':') {
        return first.to_string();
    }
    let items: Vec<&str> = lines
        .take_while(|l| l.starts_with(' ') && !l.trim().is_empty())
        .map(str::trim)
        .collect();
    format!("{first} {}", items.join(", "))
}

/// Ctrl-C, SIGTERM and SIGHUP: the first asks for a clean stop and report; a second
/// exits at once (128 + the signal), removing every output temporary first.
fn on_signals(stop: &Arc<AtomicBool>) {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        let stop = stop.clone();
        let action = move || {
            if stop.swap(true, Ordering::SeqCst) {
                crate::report::output::remove_temporaries();
                signal_hook::low_level::exit(128 + sig);
            }
        };
        // SAFETY: the action is async-signal-safe: an atomic swap, then the output
        // module's sweep (atomics and unlink(2)) and _exit(2).
        let _ = unsafe { signal_hook::low_level::register(sig, action) };
    }
}

/// Refuses two outputs of one command that lead to the same file (exit 2).
fn distinct_outputs(outputs: &[(&str, Option<&std::path::Path>)]) -> Result<(), AppError> {
    let named: Vec<(&str, &std::path::Path)> = outputs
        .iter()
        .filter_map(|(f, p)| Some((*f, (*p)?)))
        .collect();
    crate::report::output::check_distinct(&named).map_err(AppError::Usage)
}

/// `blaster merge SHARD.json...`: adds the shards' histograms into one run report.
fn merge_command(a: &crate::cli::MergeArgs) -> Result<Outcome, AppError> {
    use crate::cmd::merge;
    use crate::report::{html, input, json, output};
    // Outputs are claimed first, so a bad path fails before any work.
    distinct_outputs(&[("json", a.json.as_deref()), ("html", a.html.as_deref())])?;
    let slo = a
        .slo
        .as_deref()
        .map(|s| Slo::parse(s).map_err(|m| AppError::Usage(format!("--slo: {m}"))))
        .transpose()?;
    let json_out = json::claim(a.json.as_deref())?;
    let html_out = a.html.as_deref().map(output::Pending::claim).transpose()?;
    let mut merged = merge::merge_files(&a.files)?;
    // A shard's own verdict is not the merged run's: judged again or left out.
    let verdict = slo.map(|s| judge_merged(&s, &merged.json));
    match (&verdict, merged.json.as_object_mut()) {
        (Some(v), Some(o)) => {
            o.insert("slo".into(), serde_json::to_value(v).unwrap_or_default());
        }
        (None, Some(o)) => {
            o.remove("slo");
        }
        _ => {}
    }
    let mut text = merged.text.clone();
    if let Some(v) = &verdict {
        text.push_str(&v.render());
    }
    if json::is_stdout(a.json.as_deref()) || json::is_stdout(a.html.as_deref()) {
        crate::errln!("{}", text.trim_end());
    } else {
        crate::console::out_str(&text);
    }
    if let (Some(out), Some(path)) = (html_out, &a.html) {
        let text = serde_json::to_string(&merged.json).unwrap_or_default();
        let run = input::parse_run("merged", &text)?.input;
        let view = html::RunView {
            label: format!(
                "merged {}",
                merged.json["fleet"]["run_id"].as_str().unwrap_or("")
            ),
            run: &run,
        };
        out.commit(html::render(&[view])?.as_bytes())?;
        if !json::is_stdout(Some(path)) {
            crate::errln!("blaster: wrote {}", path.display());
        }
    }
    if let Some(out) = json_out {
        out.write(&merged.json)?;
    }
    Ok(if !merged.valid {
        Outcome::Invalid
    } else if verdict.is_some_and(|v| !v.met) {
        Outcome::SloBroken
    } else {
        Outcome::Ok
    })
}

/// Judges a merged report (JSON) against `slo`: its added latency (and frame
/// deviation) histograms and its summed counters. A histogram that is missing or does
/// not decode has no samples, so its terms are not met.
fn judge_merged(slo: &Slo, m: &serde_json::Value) -> Verdict {
    let hist = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|s| crate::report::hdr::decode(s).ok())
            .unwrap_or_else(|| crate::metrics::Histograms::new().latency)
    };
    let latency = hist(&m["histograms"]["latency"]);
    let frames = m["frames"].is_object();
    let deviation = hist(&m["frames"]["histograms"]["deviation"]);
    let num = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    slo.judge(&Observed {
        latency: &latency,
        dispatched: m["requests"]["dispatched"].as_u64().unwrap_or(0),
        errors: m["requests"]["errors"].as_u64().unwrap_or(0),
        intended_rps: m["rate"]["intended_rps"].as_f64().unwrap_or(f64::NAN),
        achieved_rps: num(&m["rate"]["achieved_rps"]),
        deviation: frames.then_some(&deviation),
        retention: (frames && num(&m["frames"]["expected"]) > 0.0)
            .then(|| num(&m["frames"]["received"]) / num(&m["frames"]["expected"])),
    })
}

fn report_command(a: &ReportArgs) -> Result<Outcome, AppError> {
    use crate::report::{html, input, output};
    let out = output::Pending::claim(&a.html)?;
    let runs = a
        .runs
        .iter()
        .map(|p| input::read_run(p).map(|r| r.input))
        .collect::<Result<Vec<_>, _>>()?;
    let views: Vec<html::RunView> = a
        .runs
        .iter()
        .zip(&runs)
        .map(|(p, run)| html::RunView {
            label: p
                .file_name()
                .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into()),
            run,
        })
        .collect();
    let page = html::render(&views)?;
    out.commit(page.as_bytes())?;
    if !json::is_stdout(Some(&a.html)) {
        crate::errln!("blaster: wrote {}", a.html.display());
    }
    Ok(Outcome::Ok)
}

/// A `run` command line, validated: everything `run` refuses is refused here, before
/// anything is created, bound or connected; `preflight` validates through it too, so
/// it refuses the same command lines with the same lines.
struct ValidRun {
    plan: RunPlan,
    facts: HostFacts,
    slo: Option<Slo>,
    /// `--metrics-listen`'s address and `--metrics-linger`.
    metrics: Option<(std::net::SocketAddr, std::time::Duration)>,
}

fn validate_run(a: &RunArgs) -> Result<ValidRun, AppError> {
    let slo = a
        .slo
        .as_deref()
        .map(|s| Slo::parse(s).map_err(|m| AppError::Usage(format!("--slo: {m}"))))
        .transpose()?;
    let facts = HostFacts::gather(a);
    let plan = RunPlan::build(a, &facts)?;
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
    Ok(ValidRun {
        plan,
        facts,
        slo,
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

fn run_command(a: &RunArgs, stop: &Arc<AtomicBool>) -> Result<Outcome, AppError> {
    let ValidRun {
        plan,
        facts,
        slo,
        metrics,
    } = validate_run(a)?;
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

/// `blaster search`: steps the rate against --target until --slo breaks.
fn search_command(a: &SearchArgs, stop: &Arc<AtomicBool>) -> Result<Outcome, AppError> {
    let cfg = crate::cmd::search::config_from_args(a)?;
    let run_args = crate::cmd::search::run_args(a)?;
    let facts = HostFacts::gather(&run_args);
    let plan = crate::cmd::search::plan(&run_args, &facts, &cfg)?;
    let target = plan
        .target
        .ok_or_else(|| AppError::Usage("--target: is required".into()))?;
    // Claimed before anything connects: an unwritable path fails now.
    let json_out = json::claim(a.json.as_deref())?;
    crate::cmd::preflight::check_host(&plan).map_err(RunError::from)?;
    crate::cmd::preflight::check_plan(&plan).map_err(RunError::from)?;
    let json_stdout = json::is_stdout(a.json.as_deref());
    let json_file = json::rewritable(a.json.as_deref());
    let report =
        crate::cmd::search::run(&plan, (&run_args, &facts), target, &cfg, stop, |partial| {
            // Rewritten after every step, so an aborted search still leaves its steps.
            match json_file {
                Some(p) => json::write(p, partial).map_err(|e| RunError::Output {
                    path: e.path,
                    source: e.source,
                }),
                None => Ok(()),
            }
        })?;
    emit_text(&crate::cmd::search::render(&report), json_stdout);
    if let Some(d) = json_out {
        d.write(&report)?;
    }
    Ok(report.outcome())
}

/// `blaster compare BASE NEW`: the table, and exit 4 when a --max-regression limit is
/// crossed.
fn compare_command(a: &CompareArgs) -> Result<Outcome, AppError> {
    use crate::cmd::compare::{
        DEFAULT_PERCENTILES, Metric, RunFigures, check_same_workload, compare, parse_limits,
    };
    let level = crate::units::check_level(a.confidence)
        .map_err(|m| AppError::Usage(format!("--confidence: {m}")))?;
    let limits = a
        .max_regression
        .as_deref()
        .map(parse_limits)
        .transpose()
        .map_err(|m| AppError::Usage(format!("--max-regression: {m}")))?
        .unwrap_or_default();
    let shown = match &a.percentiles {
        Some(list) => list
            .split(',')
            .map(|p| Metric::parse(p.trim()))
            .collect::<Result<Vec<_>, _>>(),
        None => DEFAULT_PERCENTILES
            .iter()
            .map(|p| Metric::parse(p))
            .collect(),
    }
    .map_err(|m| AppError::Usage(format!("--percentiles: {m}")))?;
    if let Some(m) = shown.iter().find(|m| !matches!(m, Metric::Latency(_))) {
        return Err(AppError::Usage(format!(
            "--percentiles: {} is not a latency percentile",
            m.name()
        )));
    }
    // Claimed before any reading: an unwritable path fails first.
    let json_out = json::claim(a.json.as_deref())?;
    let load = |p: &std::path::Path| -> Result<RunFigures, AppError> {
        Ok(RunFigures::of(&crate::report::input::read_run(p)?))
    };
    let (base, new) = (load(&a.base)?, load(&a.new)?);
    check_same_workload(&base, &new).map_err(|m| {
        AppError::Usage(format!(
            "{} against {}: {m}",
            a.base.display(),
            a.new.display()
        ))
    })?;
    let c = compare(
        &a.base.display().to_string(),
        &base,
        &a.new.display().to_string(),
        &new,
        &shown,
        &limits,
        level,
    );
    emit_text(
        &crate::cmd::compare::render(&c),
        json::is_stdout(a.json.as_deref()),
    );
    if let Some(d) = json_out {
        d.write(&c)?;
    }
    Ok(if c.regressed {
        Outcome::Regressed
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

/// Opens the exporters' files now (validated by [`validate_run`]), so an unwritable
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

/// `blaster preflight`: the checks that decide whether the plan can run on this
/// machine, one line each (or the JSON array with `--json`); nothing is connected.
fn preflight_command(a: &RunArgs) -> Result<Outcome, AppError> {
    use crate::cmd::preflight::checks::{Host, Needs, Status, run_all};
    let plan = validate_run(a)?.plan;
    let json_out = json::claim(plan.json.as_deref())?;
    let mut checks = run_all(&Needs::of(&plan), &Host::this_machine());
    let noise = crate::metrics::noise::probe(
        &plan.cores,
        crate::metrics::noise::period_for(plan.precision.resolution_ns),
        crate::metrics::noise::PROBE_NS,
    );
    checks.push(crate::cmd::preflight::checks::host_noise(
        noise,
        plan.max_lag_ns,
    ));
    let json_stdout = json::is_stdout(plan.json.as_deref());
    let lines: String = checks.iter().map(|c| format!("{c}\n")).collect();
    emit_text(&lines, json_stdout);
    if let Some(d) = json_out {
        d.write(&checks)?;
    }
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.check)
        .collect();
    if failed.is_empty() {
        return Ok(Outcome::Ok);
    }
    Err(
        RunError::from(crate::cmd::preflight::PreflightError::Failed {
            count: failed.len(),
            names: failed.join(", "),
        })
        .into(),
    )
}

/// `blaster plan`: sizes a generator cluster; nothing is sent.
fn plan_command(a: &PlanArgs) -> Result<Outcome, AppError> {
    let input = crate::cmd::plan::input_from_args(a)?;
    let report = crate::cmd::plan::plan_report(&input)?;
    let json_out = json::claim(a.json.as_deref())?;
    emit_text(
        &crate::cmd::plan::render(&report),
        json::is_stdout(a.json.as_deref()),
    );
    if let Some(d) = json_out {
        d.write(&report)?;
    }
    Ok(Outcome::Ok)
}

/// The text report goes to stdout, or to stderr when stdout carries the JSON.
fn emit_text(s: &str, json_stdout: bool) {
    if json_stdout {
        crate::console::err_str(s);
    } else {
        crate::console::out_str(s);
    }
}

/// `blaster sink --tls --cert FILE --key FILE`: the server configuration, or the
/// usage error (exit 2) that names the flag.
fn sink_tls(a: &SinkArgs) -> Result<Option<Arc<rustls::ServerConfig>>, AppError> {
    let usage = |m: String| AppError::Usage(m);
    if !a.tls {
        return match (&a.cert, &a.key) {
            (Some(_), _) => Err(usage("--cert: needs --tls".into())),
            (_, Some(_)) => Err(usage("--key: needs --tls".into())),
            _ => Ok(None),
        };
    }
    if a.udp {
        return Err(usage(
            "--tls: is TCP-only (DTLS is not supported): drop --udp".into(),
        ));
    }
    let read = |flag: &str, p: &Option<std::path::PathBuf>| match p {
        None => Err(usage(format!(
            "--{flag}: --tls needs --cert FILE and --key FILE"
        ))),
        Some(p) => crate::bounded::read(p, crate::limits::PEM_FILE_BYTES_MAX)
            .map_err(|e| usage(format!("--{flag}: cannot read {}: {e}", p.display()))),
    };
    let cert = read("cert", &a.cert)?;
    let key = read("key", &a.key)?;
    crate::transport::tls::server_config(&cert, &key)
        .map(Some)
        .map_err(usage)
}

fn sink_command(a: &SinkArgs, stop: &Arc<AtomicBool>) -> Result<Outcome, AppError> {
    let tls = sink_tls(a)?;
    let (mut cfg, duration) = sink_config(a, &usable_cores())?;
    // With --tls the io_uring sink listens on a private loopback port behind the
    // TLS front, which takes --listen.
    let public = cfg.listen;
    if tls.is_some() {
        cfg.listen = loopback_like(public);
    }
    let cfg = cfg;
    // Claimed before it starts, so an unwritable path fails first; a regular file is
    // also rewritten every second as the sink runs.
    let json_out = json::claim(a.json.as_deref())?;
    // Ordinary descriptors (UDP, or TCP without direct descriptors) count against
    // RLIMIT_NOFILE: raise it as far as the plan needs, or as far as it goes.
    crate::cmd::preflight::ensure_fds(
        (cfg.max_connections_per_core * cfg.cores.len()) as u64,
        crate::limits::FD_MARGIN,
    )
    .or_else(|_| crate::cmd::preflight::ensure_fds(0, crate::limits::FD_MARGIN))
    .map_err(RunError::from)?;
    let rss_before_start = crate::metrics::host::rss_bytes().unwrap_or(0);
    let sink = crate::sink::start(&cfg).map_err(RunError::from)?;
    let front = match tls {
        Some(config) => Some(
            crate::sink::tls_front::TlsFront::start(public, sink.local_addr(), config).map_err(
                |source| RunError::SinkTlsFront {
                    addr: public,
                    source,
                },
            )?,
        ),
        None => None,
    };
    let rss_started = crate::metrics::host::rss_bytes().unwrap_or(0);
    sink_banner(a, &cfg, &sink, front.as_ref());
    let run = SinkRun {
        started: std::time::Instant::now(),
        rss_before_start,
        rss_started,
        layout: sink.tcp_layout().cloned(),
    };
    run.serve(a, &cfg, &sink, stop, duration)?;
    // Memory is read before the stop frees anything.
    let memory_at_stop = (!cfg.udp).then(|| {
        let open = sink.snapshot().connections_open;
        crate::sink::MemoryFigures::now(run.rss_before_start, run.rss_started, open)
    });
    if let Some(f) = front {
        let failed = f.failed.load(Ordering::Relaxed);
        drop(f); // closes the TLS connections before the sink's own
        if failed > 0 {
            crate::errln!("sink: {failed} TLS handshakes failed");
        }
    }
    let stats = sink.stop();
    let v = match memory_at_stop {
        None => udp_sink_summary(&stats),
        Some(memory) => run.tcp_summary(&stats, &memory),
    };
    if let Some(d) = json_out {
        d.write(&v)?;
    }
    Ok(Outcome::Ok)
}

/// The loopback address of `public`'s family, any port.
fn loopback_like(public: SocketAddr) -> SocketAddr {
    let ip: std::net::IpAddr = if public.is_ipv4() {
        std::net::Ipv4Addr::LOCALHOST.into()
    } else {
        std::net::Ipv6Addr::LOCALHOST.into()
    };
    SocketAddr::new(ip, 0)
}

/// The sink's first lines: what it serves, where, on which cores and rings.
fn sink_banner(
    a: &SinkArgs,
    cfg: &crate::sink::SinkConfig,
    sink: &crate::sink::SinkHandle,
    front: Option<&crate::sink::tls_front::TlsFront>,
) {
    let rings = match sink.tcp_layout() {
        Some(l) => format!(
            ", {} ring{} of {} slots, {}",
            l.rings,
            if l.rings == 1 { "" } else { "s" },
            l.ring_table_slots,
            if l.direct_descriptors {
                "direct descriptors"
            } else {
                "ordinary descriptors"
            }
        ),
        None => String::new(),
    };
    let shown = match front {
        Some(f) => format!("{} (TLS, relayed to {})", f.local_addr(), sink.local_addr()),
        None => sink.local_addr().to_string(),
    };
    crate::errln!(
        "sink: {} on {shown} (cores {}{rings}), Ctrl-C to stop",
        a.mode,
        crate::units::list_cores(&cfg.cores)
    );
    if let Some(why) = sink.tcp_layout().and_then(|l| l.fallback.as_deref()) {
        crate::errln!(
            "sink: warning: io_uring direct descriptors are unavailable ({why}); every \
             connection uses a file descriptor, so RLIMIT_NOFILE bounds how many the sink holds"
        );
    }
}

/// A running sink's reference points: its start, its memory before and after it
/// started, and its TCP layout.
struct SinkRun {
    started: std::time::Instant,
    rss_before_start: u64,
    rss_started: u64,
    layout: Option<crate::sink::TcpLayout>,
}

impl SinkRun {
    /// The TCP sink's JSON for `stats`, and its memory figures now.
    fn tcp_report(
        &self,
        stats: &crate::sink::SinkStats,
    ) -> (serde_json::Value, crate::sink::MemoryFigures) {
        let memory = crate::sink::MemoryFigures::now(
            self.rss_before_start,
            self.rss_started,
            stats.connections_open,
        );
        (self.tcp_json(stats, &memory), memory)
    }

    fn tcp_json(
        &self,
        stats: &crate::sink::SinkStats,
        memory: &crate::sink::MemoryFigures,
    ) -> serde_json::Value {
        let layout = self.layout.as_ref().expect("a TCP sink has a layout");
        let secs = self.started.elapsed().as_secs_f64();
        crate::sink::tcp_report_json(stats, layout, memory, secs)
    }

    /// Serves until Ctrl-C or `duration`: a line a second (UDP on a terminal: what
    /// arrived; TCP: the counts when they changed), and the JSON file rewritten.
    fn serve(
        &self,
        a: &SinkArgs,
        cfg: &crate::sink::SinkConfig,
        sink: &crate::sink::SinkHandle,
        stop: &Arc<AtomicBool>,
        duration: Option<std::time::Duration>,
    ) -> Result<(), AppError> {
        let live_udp = cfg.udp && std::io::IsTerminal::is_terminal(&std::io::stderr());
        let json_file = json::rewritable(a.json.as_deref());
        let mut next_line = std::time::Duration::from_secs(1);
        let mut last = crate::sink::SinkStats::default();
        let started = self.started;
        while !stop.load(Ordering::Relaxed) && duration.is_none_or(|d| started.elapsed() < d) {
            std::thread::sleep(std::time::Duration::from_millis(20));
            if started.elapsed() < next_line {
                continue;
            }
            let now = sink.snapshot();
            if live_udp {
                // UDP live line: what arrived in the last second.
                crate::errln!(
                    "[{:>4}s] received {:>9}/s {:>8.1} Mbit/s | lost {} reordered {} duplicates {}",
                    next_line.as_secs(),
                    now.received - last.received,
                    (now.bytes_received - last.bytes_received) as f64 * 8.0 / 1e6,
                    now.lost.saturating_sub(last.lost),
                    now.reordered - last.reordered,
                    now.duplicates - last.duplicates
                );
            } else if !cfg.udp {
                let (v, memory) = self.tcp_report(&now);
                let changed = (
                    now.connections_open,
                    now.connections_accepted,
                    now.connections_rejected,
                    now.replies,
                ) != (
                    last.connections_open,
                    last.connections_accepted,
                    last.connections_rejected,
                    last.replies,
                );
                if changed {
                    crate::errln!("[{:>4}s] {}", next_line.as_secs(), tcp_line(&now, &memory));
                }
                if let Some(p) = json_file {
                    json::write(p, &v)?;
                }
            }
            last = now;
            next_line += std::time::Duration::from_secs(1);
        }
        Ok(())
    }

    /// The TCP sink's last lines, and its JSON.
    fn tcp_summary(
        &self,
        stats: &crate::sink::SinkStats,
        memory: &crate::sink::MemoryFigures,
    ) -> serde_json::Value {
        let v = self.tcp_json(stats, memory);
        crate::errln!("sink: {}", tcp_line(stats, memory));
        crate::errln!(
            "sink: {} bytes received, {} bytes sent, {} replies",
            stats.bytes_received,
            stats.bytes_sent,
            stats.replies
        );
        v
    }
}

/// The UDP sink's last line, and its JSON.
fn udp_sink_summary(stats: &crate::sink::SinkStats) -> serde_json::Value {
    let v = crate::sink::udp_report_json(stats);
    crate::errln!(
        "sink: udp {} received, {} lost, {} reordered, {} duplicates, {} foreign, {} dropped; {:.0} packets/s",
        v["received"],
        v["lost"],
        v["reordered"],
        v["duplicates"],
        v["foreign"],
        v["dropped"],
        v["received_pps"].as_f64().unwrap_or(0.0)
    );
    v
}

/// One line of TCP sink counts: connections and memory per connection.
fn tcp_line(s: &crate::sink::SinkStats, m: &crate::sink::MemoryFigures) -> String {
    let per = match m.user_bytes_per_connection {
        Some(b) => format!(", {b:.0} B/connection"),
        None => String::new(),
    };
    // Only when it happened: a peer that does not read its echo is rare.
    let throttled = match s.connections_throttled {
        0 => String::new(),
        n => format!(", receives throttled {n} (unread replies)"),
    };
    format!(
        "connections open {} (peak {}), accepted {}, rejected {}, closed {}, reset {}, \
         closed by peer {}{throttled} | rss {:.1} MiB{per}",
        s.connections_open,
        s.connections_peak,
        s.connections_accepted,
        s.connections_rejected,
        s.connections_closed,
        s.connections_reset,
        s.connections_closed_by_peer,
        m.rss_bytes as f64 / (1 << 20) as f64
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_clap_error_is_one_line_naming_what_is_missing() {
        let rendered = "error: the following required arguments were not provided:\n  \
                        --hold\n  <NEW>\n\nUsage: blaster run --hold\n\nFor more information, try '--help'.\n";
        assert_eq!(
            super::clap_line(rendered),
            "the following required arguments were not provided: --hold, <NEW>"
        );
        assert_eq!(
            super::clap_line("error: unexpected argument '--x' found\n\nUsage: blaster\n"),
            "unexpected argument '--x' found"
        );
    }
}
