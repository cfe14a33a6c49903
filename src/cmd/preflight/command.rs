//! `blaster preflight`'s command: the `run` command line validated as `run` validates
//! it, then every check of [`super::checks`] and the host's noise, printed (or the
//! JSON array); nothing is connected.

use crate::cli::RunArgs;
use crate::cmd::AppError;
use crate::cmd::output::emit_text;
use crate::cmd::run::RunError;
use crate::outcome::Outcome;
use crate::report::json;

/// `blaster preflight`: the checks that decide whether the plan can run on this
/// machine, one line each (or the JSON array with `--json`); nothing is connected.
pub fn command(a: &RunArgs) -> Result<Outcome, AppError> {
    use super::checks::{Host, Needs, Status, run_all};
    let plan = crate::cmd::run::validate(a)?.plan;
    let json_out = json::claim(plan.json.as_deref())?;
    let mut checks = run_all(&Needs::of(&plan), &Host::this_machine());
    let noise = crate::metrics::noise::probe(
        &plan.cores,
        crate::metrics::noise::period_for(plan.precision.resolution_ns),
        crate::metrics::noise::PROBE_NS,
    );
    checks.push(super::checks::host_noise(noise, plan.max_lag_ns));
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
    Err(RunError::from(super::PreflightError::Failed {
        count: failed.len(),
        names: failed.join(", "),
    })
    .into())
}
