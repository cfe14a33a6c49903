//! JSON output: `--json FILE`, `-` for stdout. A file is claimed when the command
//! starts ([`claim`]: an unwritable path fails before anything runs) and written
//! atomically (a temporary sibling renamed over it); a device or a FIFO is written in
//! place: see [`super::output`].

use super::output::{OutputError, Pending};
use serde::Serialize;
use std::path::Path;

/// Where a command's JSON goes, claimed before the work.
#[derive(Debug)]
pub enum Dest {
    Stdout,
    File(Pending),
}

/// Claims `path` (`-` = stdout): the file's directory must take a temporary now.
pub fn claim(path: Option<&Path>) -> Result<Option<Dest>, OutputError> {
    Ok(match path {
        None => None,
        Some(p) if is_stdout(Some(p)) => Some(Dest::Stdout),
        Some(p) => Some(Dest::File(Pending::claim(p)?)),
    })
}

impl Dest {
    /// Writes `value` as pretty JSON; on stdout a reader that went away is not an error.
    pub fn write<T: Serialize>(self, value: &T) -> Result<(), OutputError> {
        let text = serde_json::to_string_pretty(value).unwrap_or_default() + "\n";
        match self {
            Dest::Stdout => {
                crate::console::out_str(&text);
                Ok(())
            }
            Dest::File(p) => p.commit(text.as_bytes()),
        }
    }
}

/// Writes `value` as pretty JSON to `path` (`-` = stdout) now, atomically: for files
/// rewritten as a command goes (the sink's counts, a search's steps).
pub fn write<T: Serialize>(path: &Path, value: &T) -> Result<(), OutputError> {
    match claim(Some(path))? {
        Some(d) => d.write(value),
        None => Ok(()),
    }
}

/// Whether the JSON goes to stdout (`-`, `/dev/stdout`, a link to it): the text
/// report then goes to stderr.
pub fn is_stdout(path: Option<&Path>) -> bool {
    path.is_some_and(super::output::is_stdout)
}

/// The path, when it is a regular file a command may rewrite as it goes (a sink's
/// counts, a search's steps); a stream (stdout, a device, a FIFO) gets only the end.
pub fn rewritable(path: Option<&Path>) -> Option<&Path> {
    path.filter(|p| super::output::is_rewritable(p))
}
