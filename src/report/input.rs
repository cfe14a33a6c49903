//! Reading a run's JSON back: the one reader `blaster report`, `compare` and `merge`
//! share. A file is read with a bound ([`REPORT_FILE_BYTES_MAX`]), checked to be a
//! blaster run report of the schema this build writes, and then checked whole before
//! anything is merged, compared or drawn:
//!
//! - every counter (`requests`, `bytes`, `errors_by_kind`, `connections`, the
//!   percentile summaries, `intervals[]`, `mix[]`) is a non-negative integer (each
//!   kernel drop counter of `intervals[].kernel` one or `null`, not available), and
//!   `rate` holds non-negative numbers;
//! - every embedded histogram decodes, through [`hdr::decode`]'s bounds (declared
//!   lengths against the bytes present, the decompressed size, the counts its bounds
//!   imply);
//! - the counts agree: the latency histogram holds at most one value per completed or
//!   failed request, and at least one per completed request (every mode but frames,
//!   whose `requests` count frames); service time one per completed request at most;
//!   each percentile summary's `count` is its histogram's; the seconds' latency
//!   histograms hold no more than the run's; no more requests ended than were
//!   dispatched.
//!
//! Anything else is refused with one line naming the file and the field, never
//! half-read.
//!
//! [`Report`]: super::Report

use super::hdr::{self, Encoded4};
use super::{Interval, Percentiles, SCHEMA_VERSION};
use crate::limits::REPORT_FILE_BYTES_MAX;
use hdrhistogram::Histogram;
use serde::Deserialize;
use serde_json::Value;
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
    pub latency_ns: SummaryInput,
    pub service_time_ns: SummaryInput,
    /// `null` in closed loop (no timetable).
    pub dispatch_lag_ns: Option<Percentiles>,
    /// The confidence intervals' level, method, rate and error ratio (absent from
    /// reports before them).
    #[serde(default)]
    pub ci: Option<super::ci::RunCi>,
    pub intervals: Vec<Interval>,
    pub requests: RequestsInput,
    /// The run's errors by kind (the HTML targets table's total row).
    #[serde(default)]
    pub errors_by_kind: std::collections::BTreeMap<String, u64>,
    /// The run's merged histograms, encoded (see [`super::hdr`]).
    pub histograms: HistogramsInput,
    /// `--workload frames`: the `frames` key's figures the renderers draw.
    #[serde(default)]
    pub frames: Option<FramesInput>,
    /// The run's observations and warnings (the kernel's drop counters' among them),
    /// as the JSON has them.
    #[serde(default)]
    pub diagnosis: Vec<DiagnosisInput>,
    /// Per destination (absent from reports before it and from frames runs).
    #[serde(default)]
    pub targets: Vec<TargetInput>,
}

/// One `targets[]` entry: a destination's figures.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct TargetInput {
    pub address: String,
    pub sent: u64,
    pub completed: u64,
    pub errors: u64,
    pub errors_by_kind: std::collections::BTreeMap<String, u64>,
    pub achieved_rps: f64,
    pub latency_ns: Percentiles,
}

/// One `diagnosis[]` entry: `{code, message, remedy}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct DiagnosisInput {
    pub code: String,
    pub message: String,
    pub remedy: String,
}

/// A histogram's percentiles with their intervals (`ci`, absent from reports before
/// them); reads as its [`Percentiles`].
#[derive(Debug, Clone, Deserialize)]
pub struct SummaryInput {
    #[serde(flatten)]
    pub p: Percentiles,
    #[serde(default)]
    pub ci: Option<super::ci::HistCi>,
}

impl std::ops::Deref for SummaryInput {
    type Target = Percentiles;
    fn deref(&self) -> &Percentiles {
        &self.p
    }
}

/// The `frames` key as the HTML page reads it (docs/frames.md has every figure).
#[derive(Debug, Clone, Deserialize)]
pub struct FramesInput {
    pub tick_ns: u64,
    pub budget_ns: u64,
    pub room_size: u64,
    pub rooms: u64,
    pub up_fps: f64,
    pub down_fps: f64,
    pub retention: f64,
    pub lost: u64,
    pub late: u64,
    pub deviation_ns: Percentiles,
    pub fanout_ns: Percentiles,
    /// The join phase (connect, and a frame protocol adapter's handshake and
    /// subscribe), per connection; absent from older reports.
    #[serde(default)]
    pub join: Option<JoinInput>,
    pub histograms: FrameHistogramsInput,
}

/// `frames.join`: the joins' percentiles.
#[derive(Debug, Clone, Deserialize)]
pub struct JoinInput {
    pub ns: Percentiles,
}

/// `frames.histograms`, encoded as [`super::hdr::ENCODING`].
#[derive(Debug, Clone, Deserialize)]
pub struct FrameHistogramsInput {
    pub deviation: String,
    pub jitter: String,
    pub fanout: String,
    /// The join time (`frames.join.ns`), when the report has a join phase.
    #[serde(default)]
    pub join: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RequestsInput {
    pub dispatched: u64,
    #[serde(default)]
    pub sent: u64,
    pub completed: u64,
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

/// The run's four per-request histograms as `histograms` names them, in the order of
/// [`CheckedRun::histograms`], with the percentile summary each feeds.
pub const MAIN_HISTOGRAMS: [(&str, &str); 4] = [
    ("latency", "latency_ns"),
    ("service_time", "service_time_ns"),
    ("dispatch_lag", "dispatch_lag_ns"),
    ("connection_wait", "connection_wait_ns"),
];

/// A run report read and checked whole.
#[derive(Debug, Clone)]
pub struct CheckedRun {
    /// The keys the renderers read.
    pub input: RunInput,
    /// The whole report, as `merge` adds it up.
    pub json: Value,
    /// The run's histograms, decoded, in the order of [`MAIN_HISTOGRAMS`].
    pub histograms: [Histogram<u64>; 4],
}

impl CheckedRun {
    pub fn latency(&self) -> &Histogram<u64> {
        &self.histograms[0]
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: String,
        source: crate::bounded::ReadError,
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
    /// A field that is there but cannot be so: a corrupt histogram, a negative count,
    /// counts that contradict each other.
    #[error("{path}: {field}: {reason}")]
    Field {
        path: String,
        field: String,
        reason: String,
    },
}

/// Reads and checks the run report at `path`.
pub fn read_run(path: &Path) -> Result<CheckedRun, InputError> {
    let name = path.display().to_string();
    let bytes =
        crate::bounded::read(path, REPORT_FILE_BYTES_MAX).map_err(|source| InputError::Read {
            path: name.clone(),
            source,
        })?;
    parse_run(&name, &bytes)
}

/// Checks and parses the text of a run report; `name` labels the errors.
pub fn parse_run(name: &str, text: impl AsRef<[u8]>) -> Result<CheckedRun, InputError> {
    let v: Value = serde_json::from_slice(text.as_ref()).map_err(|e| InputError::NotJson {
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
    let field = |(field, reason): Bad| InputError::Field {
        path: name.into(),
        field,
        reason,
    };
    let encoding = &v["histograms"]["encoding"];
    if encoding != hdr::ENCODING {
        return Err(not_a_run(format!(
            "histograms.encoding is {encoding}, not {:?}",
            hdr::ENCODING
        )));
    }
    // The counters and histograms before the typed parse, whose errors name no field.
    check_counters(&v).map_err(field)?;
    let histograms = check_histograms(&v).map_err(field)?;
    let input = RunInput::deserialize(&v).map_err(|e| not_a_run(e.to_string()))?;
    Ok(CheckedRun {
        input,
        json: v,
        histograms,
    })
}

/// A field that failed a check, and why.
type Bad = (String, String);

fn bad(field: impl Into<String>, reason: impl Into<String>) -> Bad {
    (printable(&field.into()), reason.into())
}

/// A field's path as one line: a key may hold any character, and a control character
/// (a newline) would break the one-line error; those are escaped (`\n`).
fn printable(field: &str) -> String {
    field
        .chars()
        .flat_map(|c| {
            let escaped = c.is_control().then(|| c.escape_default());
            escaped
                .into_iter()
                .flatten()
                .chain((!c.is_control()).then_some(c))
        })
        .collect()
}

/// `v` is a count: a non-negative integer.
fn count(v: &Value, field: &str) -> Result<u64, Bad> {
    v.as_u64().ok_or_else(|| {
        bad(
            field,
            format!("{v} is not a count (a non-negative integer)"),
        )
    })
}

/// Every number in `v` (an object of counts, recursively) is a count, but for a
/// percentile summary's `mean`, a non-negative number. With `numbers_only`, anything
/// but a number or an object is refused too (objects whose every value `merge` adds).
fn check_counts(v: &Value, field: &str, numbers_only: bool) -> Result<(), Bad> {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                let f = format!("{field}.{k}");
                if k == "mean" && x.is_number() {
                    non_negative(x, &f)?;
                } else if k == "ci" {
                    check_ci(x, &f)?;
                } else {
                    check_counts(x, &f, numbers_only)?;
                }
            }
            Ok(())
        }
        Value::Number(_) => count(v, field).map(drop),
        _ if numbers_only => Err(bad(field, format!("{v} is not a count"))),
        _ => Ok(()),
    }
}

/// A `ci` object (beside a histogram's percentiles, or the run's): every number in it
/// non-negative (its level, each interval's ends), `null` for an interval not given;
/// anything else (its method, the reasons) is text. Reports before it have none.
fn check_ci(v: &Value, field: &str) -> Result<(), Bad> {
    match v {
        Value::Object(o) => o
            .iter()
            .try_for_each(|(k, x)| check_ci(x, &format!("{field}.{k}"))),
        Value::Number(_) => non_negative(v, field),
        _ => Ok(()),
    }
}

/// `v` is a non-negative number (or null, when `nullable`).
fn non_negative(v: &Value, field: &str) -> Result<(), Bad> {
    match v.as_f64() {
        Some(x) if x >= 0.0 => Ok(()),
        _ => Err(bad(field, format!("{v} is not a non-negative number"))),
    }
}

/// The counters `merge` adds and the renderers print, each where the report has it.
fn check_counters(v: &Value) -> Result<(), Bad> {
    for key in ["requests", "bytes", "errors_by_kind"] {
        if let Some(x) = v.get(key) {
            check_counts(x, key, true)?;
        }
    }
    for key in [
        "connections",
        "latency_ns",
        "service_time_ns",
        "dispatch_lag_ns",
    ] {
        if let Some(x) = v.get(key) {
            check_counts(x, key, false)?;
        }
    }
    for key in ["connection_wait_ns", "connect_time_ns"] {
        if let Some(x) = v.get(key) {
            check_counts(x, key, false)?;
        }
    }
    for key in ["dispatched", "completed", "errors"] {
        let f = format!("requests.{key}");
        count(&v["requests"][key], &f)?;
    }
    if let Some(x) = v.get("error_replies") {
        count(x, "error_replies")?;
    }
    if let Some(x) = v["config"].get("connections") {
        count(x, "config.connections")?;
    }
    if let Some(Value::Object(rate)) = v.get("rate") {
        for (k, x) in rate {
            if !x.is_null() {
                non_negative(x, &format!("rate.{k}"))?;
            }
        }
    }
    for (k, row) in v["intervals"].as_array().into_iter().flatten().enumerate() {
        let Some(o) = row.as_object() else { continue };
        for (key, x) in o {
            let f = format!("intervals[{k}].{key}");
            if key == "errors" || key == "drops" || key == "second" {
                count(x, &f)?;
            } else if key == "kernel" {
                // The kernel's drop counters: each a count, or null (not available).
                for (k, c) in x.as_object().into_iter().flatten() {
                    if !c.is_null() {
                        count(c, &format!("{f}.{k}"))?;
                    }
                }
            } else if key.ends_with("_rps") || key.ends_with("_bps") || key.ends_with("_pps") {
                non_negative(x, &f)?;
            }
        }
    }
    for (k, e) in v["mix"].as_array().into_iter().flatten().enumerate() {
        for key in ["completed", "errors"] {
            count(&e[key], &format!("mix[{k}].{key}"))?;
        }
    }
    for (k, e) in v["targets"].as_array().into_iter().flatten().enumerate() {
        for key in ["sent", "completed", "errors"] {
            count(&e[key], &format!("targets[{k}].{key}"))?;
        }
        for (kind, n) in e["errors_by_kind"].as_object().into_iter().flatten() {
            count(n, &format!("targets[{k}].errors_by_kind.{kind}"))?;
        }
        non_negative(&e["achieved_rps"], &format!("targets[{k}].achieved_rps"))?;
    }
    // Each dispatched request ends as exactly one of completed, failed or cut off
    // (frames count frames received, which a room multiplies).
    let r = &v["requests"];
    let n = |k: &str| r[k].as_u64().unwrap_or(0);
    let ended = u128::from(n("completed")) + u128::from(n("errors")) + u128::from(n("cut_off"));
    if v["mode"] != "frames" && ended > u128::from(n("dispatched")) {
        return Err(bad(
            "requests",
            format!(
                "{} completed + {} errors + {} cut off is more than the {} dispatched",
                n("completed"),
                n("errors"),
                n("cut_off"),
                n("dispatched")
            ),
        ));
    }
    Ok(())
}

/// Decodes one embedded histogram (bounded: [`hdr::decode`]).
fn decode(v: &Value, field: &str) -> Result<Histogram<u64>, Bad> {
    let s = v
        .as_str()
        .ok_or_else(|| bad(field, "missing or not a string"))?;
    hdr::decode(s).map_err(|e| bad(field, e.to_string()))
}

/// Each entry of the array `key` (`targets`, `mix`) embeds its latency histogram,
/// which decodes and holds no more than the entry's (`what`'s) completed and failed
/// requests.
fn check_part_histograms(v: &Value, key: &str, what: &str) -> Result<(), Bad> {
    for (k, e) in v[key].as_array().into_iter().flatten().enumerate() {
        let f = format!("{key}[{k}].latency_histogram");
        let one = decode(&e["latency_histogram"], &f)?;
        let most = u128::from(e["completed"].as_u64().unwrap_or(0))
            + u128::from(e["errors"].as_u64().unwrap_or(0));
        if u128::from(one.len()) > most {
            return Err(bad(
                f,
                format!(
                    "holds {} values, more than the {what}'s {most} completed and failed requests",
                    one.len()
                ),
            ));
        }
    }
    Ok(())
}

/// Decodes every embedded histogram (keeping the run's four) and checks their counts
/// against the counters.
fn check_histograms(v: &Value) -> Result<[Histogram<u64>; 4], Bad> {
    let h = &v["histograms"];
    let mut main = Vec::with_capacity(4);
    for (key, _) in MAIN_HISTOGRAMS {
        main.push(decode(&h[key], &format!("histograms.{key}"))?);
    }
    for key in ["connect_time", "reconnect_delay"] {
        if let Some(x) = h.get(key) {
            decode(x, &format!("histograms.{key}"))?;
        }
    }
    let main: [Histogram<u64>; 4] = main.try_into().expect("four histograms");
    // A percentile summary is its histogram's.
    for ((key, summary), hist) in MAIN_HISTOGRAMS.iter().zip(&main) {
        if let Some(c) = v[*summary].get("count").and_then(Value::as_u64)
            && c != hist.len()
        {
            return Err(bad(
                format!("histograms.{key}"),
                format!("holds {} values, but {summary}.count is {c}", hist.len()),
            ));
        }
    }
    // check_counters has made these counts.
    let completed = v["requests"]["completed"].as_u64().unwrap_or(0);
    let errors = v["requests"]["errors"].as_u64().unwrap_or(0);
    let (latency, service) = (&main[0], &main[1]);
    let most = u128::from(completed) + u128::from(errors);
    if u128::from(latency.len()) > most {
        return Err(bad(
            "histograms.latency",
            format!(
                "holds {} values, more than the {completed} completed + {errors} failed requests",
                latency.len(),
            ),
        ));
    }
    if v["mode"] != "frames" {
        if latency.len() < completed {
            return Err(bad(
                "histograms.latency",
                format!(
                    "holds {} values, fewer than the {completed} completed requests",
                    latency.len(),
                ),
            ));
        }
        if service.len() > completed {
            return Err(bad(
                "histograms.service_time",
                format!(
                    "holds {} values, more than the {completed} completed requests",
                    service.len(),
                ),
            ));
        }
    }
    // The seconds' histograms: each decodes, and together they hold no more than the
    // run's (they are its parts; the JSON keeps the first hour's).
    let mut seconds: u128 = 0;
    for (k, row) in v["intervals"].as_array().into_iter().flatten().enumerate() {
        let Some(hs) = row.get("histograms") else {
            continue;
        };
        for (key, _) in MAIN_HISTOGRAMS {
            let one = decode(&hs[key], &format!("intervals[{k}].histograms.{key}"))?;
            if key == "latency" {
                seconds += u128::from(one.len());
            }
        }
    }
    if seconds > u128::from(latency.len()) {
        return Err(bad(
            "intervals[].histograms.latency",
            format!(
                "the seconds hold {seconds} values, more than the run's {}",
                latency.len()
            ),
        ));
    }
    check_part_histograms(v, "targets", "target")?;
    check_part_histograms(v, "mix", "entry")?;
    if let Some(fh) = v["frames"].get("histograms") {
        for key in ["deviation", "jitter", "fanout", "join"] {
            // `join` is null in a report without a join phase.
            if let Some(x) = fh.get(key).filter(|x| !x.is_null()) {
                decode(x, &format!("frames.histograms.{key}"))?;
            }
        }
    }
    Ok(main)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> String {
        hdr::encode(&crate::metrics::Histograms::new().latency)
    }

    /// A histogram holding `n` values of 1 ms.
    fn hist(n: u64) -> Histogram<u64> {
        let mut h = crate::metrics::Histograms::new().latency;
        h.record_n(1_000_000, n).unwrap();
        h
    }

    fn of(n: u64) -> String {
        hdr::encode(&hist(n))
    }

    fn minimal(version: u32) -> Value {
        serde_json::json!({
            "schema_version": version,
            "valid": true,
            "target": "127.0.0.1:9000",
            "mode": "persistent",
            "config": { "max_lag_ns": 1_000_000, "connections": 1 },
            "duration_s": 1.0,
            "rate": { "intended_rps": 100.0, "achieved_rps": 99.0, "sent_rps": null },
            "latency_ns": Percentiles::default(),
            "service_time_ns": Percentiles::default(),
            "dispatch_lag_ns": null,
            "intervals": [],
            "requests": { "dispatched": 100, "completed": 0, "errors": 0, "cut_off": 0 },
            "histograms": {
                "encoding": super::super::hdr::ENCODING,
                "unit": "ns",
                "latency": empty(), "service_time": empty(), "dispatch_lag": empty(),
                "connection_wait": empty(),
            },
        })
    }

    /// `minimal` with `n` requests completed, each in every histogram once.
    fn completed(n: u64) -> Value {
        let mut v = minimal(SCHEMA_VERSION);
        v["requests"]["completed"] = n.into();
        for (key, summary) in MAIN_HISTOGRAMS {
            v["histograms"][key] = of(n).into();
            v[summary] = serde_json::to_value(Percentiles::of(&hist(n))).unwrap();
        }
        v
    }

    #[test]
    fn reads_a_run_of_this_schema() {
        let r = parse_run("a.json", minimal(SCHEMA_VERSION).to_string()).unwrap();
        assert_eq!(r.input.config.max_lag_ns, 1_000_000);
        assert!(r.input.dispatch_lag_ns.is_none());
        let r = parse_run("a.json", completed(90).to_string()).unwrap();
        assert_eq!(r.latency().len(), 90);
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

    /// A key with a control character is named escaped: the error stays one line (a
    /// fuzzing find: `service_time_ns.me\n` split it in two).
    #[test]
    fn a_field_with_a_newline_in_its_key_is_named_on_one_line() {
        let (field, _) = bad("service_time_ns.me\n\u{7}x", "1.5 is not a count");
        assert_eq!(field, "service_time_ns.me\\n\\u{7}x");
        assert_eq!(printable("p99.9 é"), "p99.9 é");
    }

    /// Each broken report is refused with one line naming the file and the field.
    #[test]
    fn refuses_corrupt_histograms_and_impossible_counts_naming_the_field() {
        let edit = |f: &dyn Fn(&mut Value)| {
            let mut v = completed(90);
            f(&mut v);
            v.to_string()
        };
        let cases: Vec<(String, &str)> = vec![
            (
                edit(&|v| v["histograms"]["latency"] = "HISTFAAAAB".into()),
                "histograms.latency: ",
            ),
            (
                edit(&|v| v["histograms"]["service_time"] = "bm90IGEgaGlzdG9ncmFt".into()),
                "histograms.service_time: not an HdrHistogram",
            ),
            (
                edit(&|v| v["histograms"]["connection_wait"] = 5.into()),
                "histograms.connection_wait: missing or not a string",
            ),
            (
                edit(&|v| v["requests"]["completed"] = (-5).into()),
                "requests.completed: -5 is not a count",
            ),
            (
                edit(&|v| v["requests"]["errors"] = 1.5.into()),
                "requests.errors: 1.5 is not a count",
            ),
            (
                edit(&|v| v["requests"]["sent"] = "many".into()),
                "requests.sent: \"many\" is not a count",
            ),
            (
                edit(&|v| v["errors_by_kind"] = serde_json::json!({"timeout": -1})),
                "errors_by_kind.timeout: -1 is not a count",
            ),
            (
                edit(&|v| v["rate"]["achieved_rps"] = (-3.0).into()),
                "rate.achieved_rps: -3.0 is not a non-negative number",
            ),
            (
                edit(&|v| v["latency_ns"]["count"] = (-1).into()),
                "latency_ns.count: -1 is not a count",
            ),
            (
                edit(&|v| v["requests"]["completed"] = 95.into()),
                "histograms.latency: holds 90 values, fewer than the 95 completed requests",
            ),
            (
                edit(&|v| v["requests"]["completed"] = 80.into()),
                "histograms.latency: holds 90 values, more than the 80 completed + 0 failed",
            ),
            (
                edit(&|v| {
                    v["requests"]["completed"] = 80.into();
                    v["requests"]["errors"] = 10.into();
                }),
                "histograms.service_time: holds 90 values, more than the 80 completed",
            ),
            (
                edit(&|v| v["latency_ns"]["count"] = 7.into()),
                "histograms.latency: holds 90 values, but latency_ns.count is 7",
            ),
            (
                edit(&|v| v["requests"]["dispatched"] = 50.into()),
                "requests: 90 completed + 0 errors + 0 cut off is more than the 50 dispatched",
            ),
            (
                edit(&|v| {
                    v["intervals"] = serde_json::json!([{"second": 0, "errors": -2}]);
                }),
                "intervals[0].errors: -2 is not a count",
            ),
            (
                edit(&|v| {
                    let hs = serde_json::json!({"latency": of(60), "service_time": empty(),
                        "dispatch_lag": empty(), "connection_wait": empty()});
                    let mut row = serde_json::to_value(Interval::default()).unwrap();
                    row["histograms"] = hs;
                    v["intervals"] = serde_json::json!([row.clone(), row]);
                }),
                "intervals[].histograms.latency: the seconds hold 120 values, more than the run's 90",
            ),
            (
                edit(&|v| {
                    let mut row = serde_json::to_value(Interval::default()).unwrap();
                    row["histograms"] = serde_json::json!({"latency": "!!"});
                    v["intervals"] = serde_json::json!([row]);
                }),
                "intervals[0].histograms.latency: not base64",
            ),
            (
                edit(&|v| {
                    v["mix"] = serde_json::json!([{"completed": 1, "errors": 0,
                        "latency_histogram": of(2)}]);
                }),
                "mix[0].latency_histogram: holds 2 values, more than the entry's 1",
            ),
        ];
        for (text, want) in cases {
            let e = parse_run("a.json", &text).unwrap_err().to_string();
            assert!(e.starts_with("a.json: "), "{e:?}");
            assert!(e.contains(want), "{e:?} lacks {want:?}");
            assert!(!e.contains('\n'), "{e:?} is not one line");
        }
        // A frames run counts frames received: no floor from completed.
        let mut v = completed(0);
        v["mode"] = "frames".into();
        v["requests"]["completed"] = 500.into();
        assert!(parse_run("f.json", v.to_string()).is_ok());
    }
}
