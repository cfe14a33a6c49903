//! JSON output: `--json FILE`, `-` for stdout.

use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// Writes `value` as pretty JSON to `path` (`-` = stdout).
pub fn write<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    if path.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{text}")?;
        out.flush()
    } else {
        std::fs::write(path, text + "\n")
    }
}

/// Whether the JSON goes to stdout (the text report then goes to stderr).
pub fn is_stdout(path: Option<&Path>) -> bool {
    path.is_some_and(|p| p.as_os_str() == "-")
}
