//! `blaster compare BASE NEW`'s command: the flags checked, the two reports read and
//! compared ([`super::compare`]), the table printed and the JSON written.

use super::{DEFAULT_PERCENTILES, Metric, RunFigures, check_same_workload, compare, parse_limits};
use crate::cli::CompareArgs;
use crate::cmd::AppError;
use crate::cmd::output::emit_text;
use crate::outcome::Outcome;
use crate::report::json;

/// `blaster compare BASE NEW`: the table, and exit 4 when a --max-regression limit is
/// crossed.
pub fn command(a: &CompareArgs) -> Result<Outcome, AppError> {
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
    emit_text(&super::render(&c), json::is_stdout(a.json.as_deref()));
    if let Some(d) = json_out {
        d.write(&c)?;
    }
    Ok(if c.regressed {
        Outcome::Regressed
    } else {
        Outcome::Ok
    })
}
