//! What every command's output shares: the text report on stdout (or stderr when
//! stdout carries the JSON), and the refusal of two outputs that name one file.

use super::AppError;

/// The text report goes to stdout, or to stderr when stdout carries the JSON.
pub fn emit_text(s: &str, json_stdout: bool) {
    if json_stdout {
        crate::console::err_str(s);
    } else {
        crate::console::out_str(s);
    }
}

/// Refuses two outputs of one command that lead to the same file (exit 2).
pub fn distinct_outputs(outputs: &[(&str, Option<&std::path::Path>)]) -> Result<(), AppError> {
    let named: Vec<(&str, &std::path::Path)> = outputs
        .iter()
        .filter_map(|(f, p)| Some((*f, (*p)?)))
        .collect();
    crate::report::output::check_distinct(&named).map_err(AppError::Usage)
}
