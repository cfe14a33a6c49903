//! `blaster search`'s command: the flags validated into a search and its first step's
//! plan, the host checked, the steps run ([`super::run`]) with the JSON rewritten after
//! each, and the conclusions printed and written.

use crate::cli::SearchArgs;
use crate::cmd::AppError;
use crate::cmd::output::emit_text;
use crate::cmd::run::RunError;
use crate::outcome::Outcome;
use crate::report::json;
use crate::run_plan::HostFacts;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// `blaster search`: steps the rate against --target until --slo breaks.
pub fn command(a: &SearchArgs, stop: &Arc<AtomicBool>) -> Result<Outcome, AppError> {
    let cfg = super::config_from_args(a)?;
    let run_args = super::run_args(a)?;
    let facts = HostFacts::gather(&run_args);
    let plan = super::plan(&run_args, &facts, &cfg)?;
    let target = plan
        .target
        .ok_or_else(|| AppError::Usage("--target: is required".into()))?;
    // Claimed before anything connects: an unwritable path fails now.
    let json_out = json::claim(a.json.as_deref())?;
    crate::cmd::preflight::check_host(&plan).map_err(RunError::from)?;
    crate::cmd::preflight::check_plan(&plan).map_err(RunError::from)?;
    let json_stdout = json::is_stdout(a.json.as_deref());
    let json_file = json::rewritable(a.json.as_deref());
    let report = super::run(&plan, (&run_args, &facts), target, &cfg, stop, |partial| {
        // Rewritten after every step, so an aborted search still leaves its steps.
        match json_file {
            Some(p) => json::write(p, partial).map_err(|e| RunError::Output {
                path: e.path,
                source: e.source,
            }),
            None => Ok(()),
        }
    })?;
    emit_text(&super::render(&report), json_stdout);
    if let Some(d) = json_out {
        d.write(&report)?;
    }
    Ok(report.outcome())
}
