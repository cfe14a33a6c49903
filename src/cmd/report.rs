//! `blaster report RUN.json [B.json] --html FILE`'s command: reads the runs and writes
//! their HTML page ([`crate::report::html`]).

use crate::cli::ReportArgs;
use crate::cmd::AppError;
use crate::outcome::Outcome;
use crate::report::{html, input, json, output};

/// `blaster report`: one HTML page of the runs named, each labelled by its file name.
pub fn command(a: &ReportArgs) -> Result<Outcome, AppError> {
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
