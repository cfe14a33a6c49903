//! `blaster plan`'s command: the flags validated into a [`super::PlanInput`], the plan
//! sized, printed and written; nothing is sent.

use crate::cli::PlanArgs;
use crate::cmd::AppError;
use crate::cmd::output::emit_text;
use crate::outcome::Outcome;
use crate::report::json;

/// `blaster plan`: sizes a generator cluster; nothing is sent.
pub fn command(a: &PlanArgs) -> Result<Outcome, AppError> {
    let input = super::input_from_args(a)?;
    let report = super::plan_report(&input)?;
    let json_out = json::claim(a.json.as_deref())?;
    emit_text(&super::render(&report), json::is_stdout(a.json.as_deref()));
    if let Some(d) = json_out {
        d.write(&report)?;
    }
    Ok(Outcome::Ok)
}
