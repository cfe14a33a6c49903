//! Reading a run's JSON back (`blaster report`): the subset of the [`Report`] keys the
//! renderers need, after checking that the file is a blaster run report of the schema
//! this build writes. A file from an older schema or another tool is refused with one
//! line naming the file and the reason, never half-read.
//!
//! [`Report`]: super::Report

use super::hdr::Encoded4;
use super::{Interval, Percentiles, SCHEMA_VERSION};
use serde::Deserialize;
use std::path::Path;

/// A run report as read back from its JSON.
#[derive(Debug, Clone, Deserialize)]
pub struct RunInput {
    pub schema_version: u32,
    pub valid: bool,
    pub target: String,
    pub mode: String,
    pub config: ConfigInput,
    pub duration_s: f64,
    pub rate: RateInput,
    pub latency_ns: Percentiles,
    pub service_time_ns: Percentiles,
    /// `null` in closed loop (no timetable).
    pub dispatch_lag_ns: Option<Percentiles>,
    pub intervals: Vec<Interval>,
    pub requests: RequestsInput,
    /// The run's merged histograms, encoded (see [`super::hdr`]).
    pub histograms: HistogramsInput,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RequestsInput {
    pub dispatched: u64,
    pub errors: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct HistogramsInput {
    /// [`super::hdr::ENCODING`]; `parse_run` refuses any other.
    pub encoding: String,
    #[serde(flatten)]
    pub main: Encoded4,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ConfigInput {
    /// The dispatch-lag gate (`--max-lag`).
    pub max_lag_ns: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RateInput {
    pub intended_rps: f64,
    pub achieved_rps: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not JSON: {reason}")]
    NotJson { path: String, reason: String },
    #[error("{path}: not a blaster run report ({reason})")]
    NotARun { path: String, reason: String },
    #[error(
        "{path}: schema_version {found}, but this blaster reads {SCHEMA_VERSION}: render it \
         with the blaster that wrote it, or re-run"
    )]
    Schema { path: String, found: u64 },
}

/// Reads and checks the run report at `path`.
pub fn read_run(path: &Path) -> Result<RunInput, InputError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
        path: name.clone(),
        source,
    })?;
    parse_run(&name, &text)
}

/// Checks and parses the text of a run report; `name` labels the errors.
pub fn parse_run(name: &str, text: &str) -> Result<RunInput, InputError> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| InputError::NotJson {
        path: name.into(),
        reason: e.to_string(),
    })?;
    let not_a_run = |reason: String| InputError::NotARun {
        path: name.into(),
        reason,
    };
    // The version first: an older report may lack keys, and "missing field" would
    // hide the real reason.
    let version = v
        .get("schema_version")
        .ok_or_else(|| not_a_run("no schema_version".into()))?;
    let found = version
        .as_u64()
        .ok_or_else(|| not_a_run(format!("schema_version is {version}")))?;
    if found != u64::from(SCHEMA_VERSION) {
        return Err(InputError::Schema {
            path: name.into(),
            found,
        });
    }
    // Search and baseline reports carry a schema_version too, but no intervals.
    if v.get("intervals").is_none() {
        let kind = if v.get("steps").is_some() {
            "a search or baseline report: it has steps, not intervals"
        } else {
            "no intervals"
        };
        return Err(not_a_run(kind.into()));
    }
    let run: RunInput = serde_json::from_value(v).map_err(|e| not_a_run(e.to_string()))?;
    if run.histograms.encoding != super::hdr::ENCODING {
        return Err(not_a_run(format!(
            "histograms.encoding is {:?}, not {:?}",
            run.histograms.encoding,
            super::hdr::ENCODING
        )));
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal(version: u32) -> serde_json::Value {
        serde_json::json!({
            "schema_version": version,
            "valid": true,
            "target": "127.0.0.1:9000",
            "mode": "persistent",
            "config": { "max_lag_ns": 1_000_000 },
            "duration_s": 1.0,
            "rate": { "intended_rps": 100.0, "achieved_rps": 99.0 },
            "latency_ns": Percentiles::default(),
            "service_time_ns": Percentiles::default(),
            "dispatch_lag_ns": null,
            "intervals": [],
            "requests": { "dispatched": 100, "errors": 0 },
            "histograms": {
                "encoding": super::super::hdr::ENCODING,
                "unit": "ns",
                "latency": "", "service_time": "", "dispatch_lag": "", "connection_wait": "",
            },
        })
    }

    #[test]
    fn reads_a_run_of_this_schema() {
        let r = parse_run("a.json", &minimal(SCHEMA_VERSION).to_string()).unwrap();
        assert_eq!(r.config.max_lag_ns, 1_000_000);
        assert!(r.dispatch_lag_ns.is_none());
    }

    #[test]
    fn refuses_other_schemas_and_tools_in_one_line() {
        let cases = [
            ("not json {".to_string(), "a.json: not JSON".to_string()),
            (
                "{\"foo\": 1}".to_string(),
                "not a blaster run report (no schema_version)".to_string(),
            ),
            (
                minimal(SCHEMA_VERSION + 7).to_string(),
                format!("schema_version {}", SCHEMA_VERSION + 7),
            ),
            (
                serde_json::json!({"schema_version": SCHEMA_VERSION, "steps": []}).to_string(),
                "a search or baseline report".to_string(),
            ),
            (
                {
                    let mut v = minimal(SCHEMA_VERSION);
                    v.as_object_mut().unwrap().remove("latency_ns");
                    v.to_string()
                },
                "missing field `latency_ns`".to_string(),
            ),
        ];
        for (text, want) in cases {
            let e = parse_run("a.json", &text).unwrap_err().to_string();
            assert!(e.contains(&want), "{e:?} lacks {want:?}");
            assert!(!e.contains('\n'), "{e:?} is not one line");
        }
    }
}
