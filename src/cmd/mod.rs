//! The commands: parse the command line, then hand it to one subcommand (`run`, `sink`,
//! `preflight`, `plan`, `search`, `report`, `compare`, `merge`), each of which owns its
//! glue in its own module (`cmd::X::command`). `main` only maps the [`Outcome`] or
//! [`AppError`] to an exit code. The top layer: everything here may use every other
//! module; nothing outside `cmd` uses it.

pub mod baseline;
pub mod compare;
pub mod merge;
pub mod output;
pub mod plan;
pub mod preflight;
pub mod report;
pub mod run;
pub mod search;
pub mod sink;
pub mod sink_http2;

use crate::cli::{Cli, Command, with_default_subcommand};
use crate::cmd::run::RunError;
use crate::outcome::{Outcome, exit};
use crate::report::export;
use crate::run_plan::PlanError;
use clap::Parser;
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
        Command::Run(a) => run::command(&a, &stop),
        Command::Sink(a) => sink::command(&a, &stop),
        Command::Plan(a) => plan::command(&a),
        Command::Search(a) => search::command(&a, &stop),
        Command::Preflight(a) => preflight::command(&a),
        Command::Report(a) => report::command(&a),
        Command::Compare(a) => compare::command(&a),
        Command::Merge(a) => merge::command(&a),
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
