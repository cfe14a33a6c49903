//! `blaster merge`: the shards of one run (`--shard i/N`) back into one report.
//!
//! - Files must be blaster run reports of this schema, read and checked whole by
//!   [`crate::report::input`] (bounded reading, every histogram decoded within its bounds,
//!   counters non-negative and consistent with the histograms), of the same run (run
//!   id), the same plan (fingerprint, target, shard count), each shard at most once:
//!   anything else is refused with one line naming the file and the reason.
//! - Histograms are **added** (HdrHistogram `add`), never averaged: the merged
//!   percentiles are those of every request of every shard (`percentiles_exact`).
//! - Counters (exactly, as integers) and rates are summed; the per-second series are
//!   aligned on the common
//!   start (second k of every shard is the same wall-clock second) and added; each
//!   second's embedded histograms are added too, so its percentiles are exact
//!   (`interval_percentiles_exact`).
//! - The merged run is valid only if every shard was and none is missing; missing
//!   shards are named (`2 of 8 missing: 3, 6`) and make it incomplete, never silently
//!   smaller.
//! - The kernel's drop counters (`host.kernel`, `intervals[].kernel`) are each host's
//!   own: they add over the shards that could read them (`null` only where none
//!   could), conntrack's fill takes the fullest host's; each shard's kernel diagnoses
//!   (conntrack, softnet, listen queues, retransmits, NIC) are kept, naming the shard.
//! - A frames run's `frames` key merges by [`frames`]: counts add, the frame histograms
//!   add, ratios and percentiles come from the sums; shards of other rooms, tick or
//!   budget are refused (exit 2).
//! - The `targets` key (one entry per destination) merges by [`targets`]: entries of
//!   the same address add (counts, error kinds, rates, latency histograms), the
//!   percentiles come from the sums.

mod command;
mod frames;
mod targets;

pub use command::command;

use crate::report::input::{
    CheckedRun, InputError, MAIN_HISTOGRAMS as HISTOGRAMS, parse_run, read_run,
};
use crate::report::{Percentiles, hdr};
use hdrhistogram::Histogram;
use serde_json::{Map, Value, json};
use std::path::Path;

/// Why files were not merged: one line naming the file.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{path}: {reason}")]
    Refused { path: String, reason: String },
    /// Shards that disagree on what was run (a frames run's rooms, tick or budget):
    /// the files given were not one run's, a usage error.
    #[error("{path}: {reason}")]
    Disagree { path: String, reason: String },
}

impl MergeError {
    /// 2 for files that do not describe one run's shards, 1 for the rest.
    pub fn exit_code(&self) -> i32 {
        match self {
            MergeError::Disagree { .. } => crate::outcome::exit::USAGE,
            _ => crate::outcome::exit::RUNTIME,
        }
    }
}

fn refused(path: &str, reason: impl Into<String>) -> MergeError {
    MergeError::Refused {
        path: path.into(),
        reason: reason.into(),
    }
}

/// One shard's file as read.
struct Shard {
    path: String,
    value: Value,
    index: u64,
    /// The run's histograms, decoded by the reader.
    histograms: [Histogram<u64>; 4],
}

/// The merged report (a run report's JSON, with `fleet.merged` describing the
/// shards) and its text summary.
pub struct Merged {
    pub json: Value,
    pub text: String,
    pub valid: bool,
}

/// Reads and merges `paths`.
pub fn merge_files(paths: &[impl AsRef<Path>]) -> Result<Merged, MergeError> {
    let mut runs = Vec::with_capacity(paths.len());
    for p in paths {
        runs.push((p.as_ref().display().to_string(), read_run(p.as_ref())?));
    }
    merge_runs(runs)
}

/// Merges (name, JSON text) pairs; the names label errors and the per-shard table.
pub fn merge_texts(files: &[(String, String)]) -> Result<Merged, MergeError> {
    let mut runs = Vec::with_capacity(files.len());
    for (path, text) in files {
        runs.push((path.clone(), parse_run(path, text)?));
    }
    merge_runs(runs)
}

/// Merges runs read and checked by [`crate::report::input`].
fn merge_runs(runs: Vec<(String, CheckedRun)>) -> Result<Merged, MergeError> {
    let mut shards: Vec<Shard> = Vec::with_capacity(runs.len());
    for (path, run) in runs {
        let path = &path;
        let value = run.json;
        let f = &value["fleet"];
        let index = f["shard"]
            .as_u64()
            .ok_or_else(|| refused(path, "not a shard report: it has no fleet.shard"))?;
        if let Some(first) = shards.first() {
            let ff = &first.value["fleet"];
            for (key, what) in [
                ("run_id", "run id"),
                ("shards", "shard count"),
                (
                    "plan_fingerprint",
                    "plan fingerprint (targets, rate, arrivals, seed, duration, totals or requests differ)",
                ),
                ("start_at_unix_ms", "start instant"),
            ] {
                if f[key] != ff[key] {
                    return Err(refused(
                        path,
                        format!(
                            "{what} {} differs from {}'s {}: shards of different runs are not merged",
                            f[key], first.path, ff[key]
                        ),
                    ));
                }
            }
            if value["target"] != first.value["target"] {
                return Err(refused(
                    path,
                    format!(
                        "target {} differs from {}'s {}",
                        value["target"], first.path, first.value["target"]
                    ),
                ));
            }
        }
        if let Some(dup) = shards.iter().find(|s| s.index == index) {
            return Err(refused(
                path,
                format!(
                    "shard {index}/{} again: {} is the same shard",
                    f["shards"], dup.path
                ),
            ));
        }
        let count = f["shards"].as_u64().unwrap_or(1);
        if count as usize > crate::limits::SHARDS_MAX {
            // The missing shards are listed: a count from a crafted file would list
            // (and allocate) billions.
            return Err(refused(
                path,
                format!(
                    "a fleet of {count} shards: at most {} are run",
                    crate::limits::SHARDS_MAX
                ),
            ));
        }
        if index >= count {
            return Err(refused(path, format!("shard {index} of {}", f["shards"])));
        }
        shards.push(Shard {
            path: path.clone(),
            value,
            index,
            histograms: run.histograms,
        });
    }
    let n = shards
        .first()
        .ok_or_else(|| refused("-", "no files to merge"))?
        .value["fleet"]["shards"]
        .as_u64()
        .unwrap_or(1);
    shards.sort_by_key(|s| s.index);
    combine(&shards, n)
}

/// Adds up the shards (already checked to belong together).
fn combine(shards: &[Shard], n: u64) -> Result<Merged, MergeError> {
    let mut out = shards[0].value.clone();
    let missing: Vec<u64> = (0..n)
        .filter(|i| !shards.iter().any(|s| s.index == *i))
        .collect();
    add_counters(&mut out, shards);
    add_expect(&mut out, shards);
    merge_abort(&mut out, shards);
    add_histograms(&mut out, shards)?;
    add_error_latency(&mut out, shards);
    add_server_time(&mut out, shards);
    let (intervals, intervals_exact) = align_intervals(shards);
    out["intervals"] = Value::Array(intervals);
    merge_kernel(&mut out, shards);
    add_confidence(&mut out, shards)?;
    merge_frames(&mut out, shards)?;
    merge_targets(&mut out, shards)?;
    let valid = judge_validity(&mut out, shards, &missing, n);
    let unsynced = merged_fleet(&mut out, shards, &missing, intervals_exact);
    let text = summary(&out, shards, &missing, n, &unsynced);
    Ok(Merged {
        json: out,
        text,
        valid,
    })
}

/// The counts, rates and count maps, added.
fn add_counters(out: &mut Value, shards: &[Shard]) {
    // Counters: every number in these objects is a count or a rate to add.
    for key in ["requests", "bytes", "errors_by_kind", "connections", "rate"] {
        // A key the first shard lacks stays absent (not a null the reader refuses).
        if out.get(key).is_none() {
            continue;
        }
        let parts: Vec<&Value> = shards.iter().map(|s| &s.value[key]).collect();
        out[key] = sum_numbers(&parts);
    }
    out["error_replies"] = json!(
        shards
            .iter()
            .map(|s| s.value["error_replies"].as_u64().unwrap_or(0))
            .fold(0u64, u64::saturating_add)
    );
    // Maps of counts whose keys differ between shards (codes seen, reply kinds).
    out["error_replies_by_kind"] =
        sum_count_maps(shards.iter().map(|s| &s.value["error_replies_by_kind"]));
    if shards.iter().any(|s| s.value["http"].is_object()) {
        for key in ["status_classes", "status_codes"] {
            out["http"][key] = sum_count_maps(shards.iter().map(|s| &s.value["http"][key]));
        }
    }
    out["config"]["connections"] = json!(
        shards
            .iter()
            .map(|s| s.value["config"]["connections"].as_u64().unwrap_or(0))
            .fold(0u64, u64::saturating_add)
    );
}

/// `--expect`: every shard ran the same assertions (one command line); the replies
/// that failed each, and the unchecked ones, add.
fn add_expect(out: &mut Value, shards: &[Shard]) {
    let Some(list) = out["expect"]["assertions"].as_array().map(Vec::len) else {
        return;
    };
    let total = |at: &dyn Fn(&Value) -> &Value| {
        (shards.iter())
            .map(|s| at(&s.value["expect"]).as_u64().unwrap_or(0))
            .fold(0u64, u64::saturating_add)
    };
    for i in 0..list {
        out["expect"]["assertions"][i]["failed"] = json!(total(&|e| &e["assertions"][i]["failed"]));
    }
    out["expect"]["unchecked"] = json!(total(&|e| &e["unchecked"]));
}

/// `--abort-if`: each shard judges its own seconds; the merged run names the shard
/// whose condition fired first (the shards' seconds are the same wall-clock seconds;
/// a tie goes to the lowest shard) and how many fired. `null` when none did.
fn merge_abort(out: &mut Value, shards: &[Shard]) {
    let fired = || shards.iter().filter(|s| s.value["abort"].is_object());
    let first = fired().min_by_key(|s| (s.value["abort"]["fired_at_s"].as_u64(), s.index));
    out["abort"] = match first {
        Some(s) => {
            let mut a = s.value["abort"].clone();
            a["shard"] = json!(s.index);
            a["shards_fired"] = json!(fired().count());
            a
        }
        None => Value::Null,
    };
}

/// The histograms, added, every shard's (the reader decoded them all), and their
/// percentiles.
fn add_histograms(out: &mut Value, shards: &[Shard]) -> Result<(), MergeError> {
    // Histograms: added, every shard's (the reader decoded them all).
    for (k, (h, key)) in HISTOGRAMS.iter().enumerate() {
        let mut sum = shards[0].histograms[k].clone();
        sum.auto(true);
        for s in &shards[1..] {
            sum.add(&s.histograms[k]).map_err(|e| {
                refused(
                    &s.path,
                    format!(
                        "histograms.{h}: cannot be added to {}'s: {e:?}",
                        shards[0].path
                    ),
                )
            })?;
        }
        out[*key] = serde_json::to_value(Percentiles::of(&sum)).unwrap_or(Value::Null);
        out["histograms"][*h] = json!(hdr::encode(&sum));
    }
    Ok(())
}

/// The merged run's confidence intervals, from the merged seconds (each second's
/// histograms the sum of the shards', see [`align_intervals`]) and the merged totals, at
/// the first shard's level (`ci.level`; the default for reports before it), seeded by
/// the run's seed. A histogram whose seconds are not all exact gets no interval.
fn add_confidence(out: &mut Value, shards: &[Shard]) -> Result<(), MergeError> {
    use crate::report::ci::Builder;
    let level = shards[0].value["ci"]["level"]
        .as_f64()
        .unwrap_or(crate::metrics::ci::LEVEL_DEFAULT);
    let s = crate::metrics::ci::Settings::new(level, out["seed"].as_u64().unwrap_or(0));
    let mut totals = Vec::with_capacity(4);
    for (h, _) in HISTOGRAMS {
        let t = out["histograms"][h]
            .as_str()
            .and_then(|e| hdr::decode(e).ok())
            .ok_or_else(|| refused(&shards[0].path, format!("histograms.{h}: not decodable")))?;
        totals.push(t);
    }
    let r = &out["requests"];
    let (completed, errors) = (
        r["completed"].as_u64().unwrap_or(0),
        r["errors"].as_u64().unwrap_or(0),
    );
    let (run, hists) = Builder::of_json(out, &[0, 1, 2, 3]).finish(
        [&totals[0], &totals[1], &totals[2], &totals[3]],
        out["rate"]["achieved_rps"].as_f64().unwrap_or(0.0),
        errors as f64 / (completed + errors).max(1) as f64,
        &s,
    );
    out["ci"] = serde_json::to_value(&run).unwrap_or(Value::Null);
    for ((_, key), ci) in HISTOGRAMS.iter().zip(hists) {
        if let (Some(ci), Some(o)) = (ci, out[*key].as_object_mut()) {
            o.insert("ci".into(), serde_json::to_value(ci).unwrap_or(Value::Null));
        }
    }
    Ok(())
}

fn add_error_latency(out: &mut Value, shards: &[Shard]) {
    // The error replies' latency: added when every shard embeds it (runs before it
    // existed do not), else the percentiles' maxima.
    let errors_exact = shards
        .iter()
        .all(|s| s.value["histograms"]["error_latency"].is_string());
    match add_all(
        shards
            .iter()
            .map(|s| &s.value["histograms"]["error_latency"]),
    ) {
        Some(sum) if errors_exact => {
            out["error_latency_ns"] =
                serde_json::to_value(Percentiles::of(&sum)).unwrap_or(Value::Null);
            out["histograms"]["error_latency"] = json!(hdr::encode(&sum));
        }
        _ if !out["error_latency_ns"].is_null() => {
            let parts: Vec<&Value> = shards
                .iter()
                .map(|s| &s.value["error_latency_ns"])
                .collect();
            out["error_latency_ns"] = max_numbers(&parts);
            if let Some(h) = out["histograms"].as_object_mut() {
                h.remove("error_latency");
            }
        }
        _ => {}
    }
}

/// `--server-time`: the counts add; the server's time and network + queueing are
/// the shards' histograms added (a shard whose replies carried none has none), else,
/// when one cannot be read, the percentiles' maxima (an upper bound).
fn add_server_time(out: &mut Value, shards: &[Shard]) {
    if !out["server_time"].is_object() {
        return;
    }
    for key in ["carried", "missing"] {
        out["server_time"][key] = json!(
            (shards.iter())
                .map(|s| s.value["server_time"][key].as_u64().unwrap_or(0))
                .fold(0u64, u64::saturating_add)
        );
    }
    let carried: Vec<&Shard> = (shards.iter())
        .filter(|s| s.value["server_time"]["carried"].as_u64().unwrap_or(0) > 0)
        .collect();
    if carried.is_empty() {
        return;
    }
    for (h, key) in [
        ("server_time", "server_time_ns"),
        ("network_queueing", "network_queueing_ns"),
    ] {
        match add_all(carried.iter().map(|s| &s.value["histograms"][h])) {
            Some(sum) => {
                out["server_time"][key] =
                    serde_json::to_value(Percentiles::of(&sum)).unwrap_or(Value::Null);
                out["histograms"][h] = json!(hdr::encode(&sum));
            }
            None => {
                let parts: Vec<&Value> = carried
                    .iter()
                    .map(|s| &s.value["server_time"][key])
                    .collect();
                out["server_time"][key] = max_numbers(&parts);
                if let Some(hs) = out["histograms"].as_object_mut() {
                    hs.remove(h);
                }
            }
        }
    }
}

/// The codes of the diagnoses drawn from the kernel's drop counters: a host's own.
const KERNEL_CODES: [&str; 6] = [
    "conntrack_table_full",
    "softnet_backlog_drops",
    "softnet_time_squeeze",
    "listen_overflows",
    "tcp_retransmits",
    "nic_rx_drops",
];

/// `host.kernel` summed over the shards that have it, and every shard's kernel
/// diagnoses in place of the first shard's, each naming its shard (each host hit its
/// own wall, with its own numbers and fix).
fn merge_kernel(out: &mut Value, shards: &[Shard]) {
    let parts: Vec<&Value> = shards
        .iter()
        .map(|s| &s.value["host"]["kernel"])
        .filter(|k| k.is_object())
        .collect();
    if !parts.is_empty() && out["host"].is_object() {
        out["host"]["kernel"] = kernel_sum(&parts);
    }
    // `get_mut`, not `out["diagnosis"]`: indexing a report without diagnoses would
    // insert a null there, which no reader takes for the list it is.
    let Some(list) = out.get_mut("diagnosis").and_then(Value::as_array_mut) else {
        return;
    };
    let is_kernel = |d: &Value| KERNEL_CODES.iter().any(|c| d["code"] == *c);
    list.retain(|d| !is_kernel(d));
    for s in shards {
        for d in s.value["diagnosis"].as_array().into_iter().flatten() {
            if is_kernel(d) {
                let mut d = d.clone();
                if let Some(m) = d.get("message").and_then(Value::as_str) {
                    d["message"] = json!(format!("shard {}: {m}", s.index));
                }
                list.push(d);
            }
        }
    }
}

/// Kernel counter objects added key by key: a counter adds over the parts that have
/// it (`null`, not available, adds nothing; `null` only when no part has it);
/// conntrack's fill (`conntrack_count_max`, `conntrack_max`) keeps the largest.
fn kernel_sum(parts: &[&Value]) -> Value {
    let mut o = Map::new();
    for part in parts {
        for (k, v) in part.as_object().into_iter().flatten() {
            let acc = o.entry(k.clone()).or_insert(Value::Null);
            if let Some(n) = v.as_u64() {
                let gauge = k.starts_with("conntrack_count") || k == "conntrack_max";
                *acc = json!(match acc.as_u64() {
                    None => n,
                    Some(a) if gauge => a.max(n),
                    Some(a) => a.saturating_add(n),
                });
            }
        }
    }
    Value::Object(o)
}

/// The frames' keys, merged (a shard that disagrees or lacks them is refused).
fn merge_frames(out: &mut Value, shards: &[Shard]) -> Result<(), MergeError> {
    let parts: Vec<&Value> = shards.iter().map(|s| &s.value["frames"]).collect();
    match frames::merge(&parts) {
        Ok(Some(f)) => out["frames"] = f,
        Ok(None) => {}
        Err(e) => {
            let path = shards[e.index()].path.clone();
            let reason = e.to_string();
            return Err(match e {
                frames::FramesMergeError::Disagree { .. } => MergeError::Disagree { path, reason },
                frames::FramesMergeError::Missing { .. } => MergeError::Refused { path, reason },
            });
        }
    }
    Ok(())
}

/// Sets `valid` and `invalid_reasons` (a missing shard, each shard's reasons naming
/// it); returns whether the merged run is valid.
/// The per-destination figures, added by address (see [`targets`]); dropped when a
/// shard has none.
fn merge_targets(out: &mut Value, shards: &[Shard]) -> Result<(), MergeError> {
    let parts: Vec<&Value> = shards.iter().map(|s| &s.value["targets"]).collect();
    match targets::merge(&parts) {
        Ok(Some(t)) => out["targets"] = t,
        Ok(None) => {
            if let Some(o) = out.as_object_mut() {
                o.remove("targets");
            }
        }
        Err(e) => return Err(refused(&shards[e.index].path, e.reason)),
    }
    Ok(())
}

fn judge_validity(out: &mut Value, shards: &[Shard], missing: &[u64], n: u64) -> bool {
    let complete = missing.is_empty();
    let valid = complete && shards.iter().all(|s| s.value["valid"] == true);
    // Validity and its reasons, each naming its shard.
    let mut reasons: Vec<Value> = Vec::new();
    if !complete {
        reasons.push(json!({
            "code": "shards_missing",
            "message": missing_line(missing, n),
            "remedy": "merge every shard's file; a missing shard's load is missing from every figure",
        }));
    }
    for s in shards {
        for r in s.value["invalid_reasons"].as_array().into_iter().flatten() {
            let mut r = r.clone();
            if let Some(m) = r.get("message").and_then(Value::as_str) {
                r["message"] = json!(format!("shard {}: {m}", s.index));
            }
            reasons.push(r);
        }
    }
    out["valid"] = json!(valid);
    out["invalid_reasons"] = Value::Array(reasons);
    valid
}

/// The merged `fleet` key: the shards present and missing, each shard's line, the
/// worst start skew; returns the shards whose clocks were not synchronised.
fn merged_fleet(
    out: &mut Value,
    shards: &[Shard],
    missing: &[u64],
    intervals_exact: bool,
) -> Vec<u64> {
    let complete = missing.is_empty();
    let per_shard: Vec<Value> = shards
        .iter()
        .map(|s| {
            let f = &s.value["fleet"];
            json!({
                "shard": s.index,
                "file": s.path,
                "valid": s.value["valid"],
                "start_skew_ns": f["start_skew_ns"],
                "clock": f["clock"],
                "completed": s.value["requests"]["completed"],
                "intended_rps": s.value["rate"]["intended_rps"],
                "achieved_rps": s.value["rate"]["achieved_rps"],
            })
        })
        .collect();
    let unsynced: Vec<u64> = shards
        .iter()
        .filter(|s| s.value["fleet"]["clock"]["unsynchronised"] == true)
        .map(|s| s.index)
        .collect();
    out["fleet"]["shard"] = Value::Null;
    out["fleet"]["start_skew_ns"] = json!(
        shards
            .iter()
            .filter_map(|s| s.value["fleet"]["start_skew_ns"].as_u64())
            .max()
    );
    out["fleet"]["merged"] = json!({
        "shards_present": shards.len(),
        "missing": missing,
        "complete": complete,
        "percentiles_exact": true,
        "interval_percentiles_exact": intervals_exact,
        "unsynchronised_clocks": unsynced,
        "per_shard": per_shard,
    });
    unsynced
}

/// `2 of 8 missing: 3, 6`.
pub fn missing_line(missing: &[u64], n: u64) -> String {
    let list: Vec<String> = missing.iter().map(u64::to_string).collect();
    format!("{} of {n} missing: {}", missing.len(), list.join(", "))
}

/// Adds maps of counts key by key over the union of their keys (a key one shard lacks
/// counts 0 there), saturating; `{}` when no part is a map.
fn sum_count_maps<'a>(parts: impl Iterator<Item = &'a Value>) -> Value {
    let mut out = Map::new();
    for part in parts {
        for (k, v) in part.as_object().into_iter().flatten() {
            let n = out.get(k).and_then(Value::as_u64).unwrap_or(0);
            out.insert(k.clone(), json!(n.saturating_add(v.as_u64().unwrap_or(0))));
        }
    }
    Value::Object(out)
}

/// Sums the numbers of objects of the same shape, key by key (recursively); the first
/// object's non-numbers are kept. Counts (integers) add exactly, saturating.
fn sum_numbers(parts: &[&Value]) -> Value {
    combine_numbers(parts, Op::Sum)
}

fn max_numbers(parts: &[&Value]) -> Value {
    combine_numbers(parts, Op::Max)
}

#[derive(Clone, Copy)]
enum Op {
    Sum,
    Max,
}

fn combine_numbers(parts: &[&Value], op: Op) -> Value {
    match parts.first() {
        Some(Value::Object(first)) => {
            // Every key of any part (a shard with no timeouts has no `timeout` kind):
            // the first part's order, then the others' new keys.
            let mut keys: Vec<&String> = first.keys().collect();
            for p in &parts[1..] {
                for k in p.as_object().into_iter().flat_map(Map::keys) {
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
            }
            let mut o = Map::new();
            for k in keys {
                let sub: Vec<&Value> = parts.iter().filter_map(|p| p.get(k)).collect();
                o.insert(k.clone(), combine_numbers(&sub, op));
            }
            Value::Object(o)
        }
        Some(Value::Number(_)) => {
            if parts.iter().all(|p| p.is_u64()) {
                let ints = parts.iter().filter_map(|p| p.as_u64());
                return json!(match op {
                    Op::Sum => ints.fold(0u64, u64::saturating_add),
                    Op::Max => ints.max().unwrap_or(0),
                });
            }
            let f: fn(f64, f64) -> f64 = match op {
                Op::Sum => |a, b| a + b,
                Op::Max => f64::max,
            };
            json!(
                parts
                    .iter()
                    .filter_map(|p| p.as_f64())
                    .reduce(f)
                    .unwrap_or(0.0)
            )
        }
        Some(other) => (*other).clone(),
        None => Value::Null,
    }
}

/// Adds the embedded histograms `parts` (base64 V2); `None` when any is missing or
/// unreadable. The sum grows its bounds as needed, so a shard built with other bounds
/// adds instead of failing; it takes the precision of the first part holding a value.
fn add_all<'a>(parts: impl Iterator<Item = &'a Value>) -> Option<Histogram<u64>> {
    let mut sum: Option<Histogram<u64>> = None;
    for p in parts {
        let one = hdr::decode(p.as_str()?).ok()?;
        match &mut sum {
            // An empty part (a second no worker of that shard reported is a tiny
            // placeholder) must not set the sum's precision.
            Some(acc) if !acc.is_empty() || one.is_empty() => acc.add(&one).ok()?,
            _ => {
                let mut first = one;
                first.auto(true);
                sum = Some(first);
            }
        }
    }
    sum
}

/// Second k of every shard is the same wall-clock second (one start instant): rates,
/// counts and traffic add. When every shard embeds second k's histograms, they are
/// added and the second's percentiles are exact (and the sum is embedded again);
/// otherwise the second's percentiles and loads take the largest shard's (an upper
/// bound). Returns the rows and whether every second's percentiles were exact.
fn align_intervals(shards: &[Shard]) -> (Vec<Value>, bool) {
    let len = shards
        .iter()
        .map(|s| s.value["intervals"].as_array().map_or(0, Vec::len))
        .max()
        .unwrap_or(0);
    let mut all_exact = true;
    let rows = (0..len)
        .map(|k| {
            let rows: Vec<&Value> = shards
                .iter()
                .filter_map(|s| s.value["intervals"].get(k))
                .collect();
            let mut row = rows[0].clone();
            let Some(o) = row.as_object_mut() else {
                return row;
            };
            o.remove("histograms");
            // A first shard written before the kernel counters must not drop the
            // others' (rows without the key add nothing).
            if rows.iter().any(|r| r.get("kernel").is_some()) {
                o.entry("kernel").or_insert(Value::Null);
            }
            for key in o.keys().cloned().collect::<Vec<_>>() {
                let parts: Vec<&Value> = rows.iter().map(|r| &r[&key]).collect();
                let adds = key.ends_with("_rps")
                    || key.ends_with("_bps")
                    || key.ends_with("_pps")
                    || key == "errors"
                    || key == "drops";
                let keep = key == "second" || key == "duration_s";
                if key == "frames" {
                    o.insert(key, frames::merge_interval(&parts));
                } else if key == "kernel" {
                    o.insert(key, kernel_sum(&parts));
                } else if adds {
                    o.insert(key, sum_numbers(&parts));
                } else if !keep {
                    o.insert(key, max_numbers(&parts));
                }
            }
            // Every shard must have this second: one that ended early has nothing to
            // add, which is exact too, but a shard without histograms here is not.
            let merged: Option<Vec<Histogram<u64>>> = HISTOGRAMS
                .iter()
                .map(|(h, _)| add_all(rows.iter().map(|r| &r["histograms"][h])))
                .collect();
            match merged {
                Some(m) if rows.len() == shards.len() => {
                    let lat = Percentiles::of(&m[0]);
                    for (key, v) in [
                        ("latency_p50_ns", lat.p50),
                        ("latency_p90_ns", lat.p90),
                        ("latency_p99_ns", lat.p99),
                        ("latency_p999_ns", lat.p999),
                        ("latency_max_ns", lat.max),
                        ("dispatch_lag_p99_ns", Percentiles::of(&m[2]).p99),
                    ] {
                        o.insert(key.into(), json!(v));
                    }
                    let enc: Map<String, Value> = HISTOGRAMS
                        .iter()
                        .zip(&m)
                        .map(|((h, _), x)| ((*h).to_string(), json!(hdr::encode(x))))
                        .collect();
                    o.insert("histograms".into(), Value::Object(enc));
                }
                _ => all_exact = false,
            }
            row
        })
        .collect();
    (rows, all_exact)
}

/// The text: the whole, the per-shard table, what is missing or unsynchronised.
/// The merged summary's lines on what is missing, what fired and why it is invalid.
fn status_lines(s: &mut String, out: &Value, count: usize, missing: &[u64], n: u64) {
    use std::fmt::Write;
    if !missing.is_empty() {
        let _ = writeln!(
            s,
            "INCOMPLETE: {} (their load is in no figure below)",
            missing_line(missing, n)
        );
    }
    let a = &out["abort"];
    if a.is_object() {
        let _ = writeln!(
            s,
            "ABORTED: shard {} fired first: --abort-if '{}' at {} s ({} of {} shards fired)",
            a["shard"],
            a["condition"].as_str().unwrap_or("?"),
            a["fired_at_s"],
            a["shards_fired"],
            count
        );
    }
    if out["valid"] != true {
        let _ = writeln!(s, "INVALID merged run:");
        for r in out["invalid_reasons"].as_array().into_iter().flatten() {
            let _ = writeln!(s, "  - {}", r["message"].as_str().unwrap_or("?"));
        }
    }
}

fn summary(out: &Value, shards: &[Shard], missing: &[u64], n: u64, unsynced: &[u64]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let f = &out["fleet"];
    let _ = writeln!(
        s,
        "merged run {}: {} of {n} shards, target {}",
        f["run_id"].as_str().unwrap_or("?"),
        shards.len(),
        out["target"].as_str().unwrap_or("?")
    );
    status_lines(&mut s, out, shards.len(), missing, n);
    let r = &out["requests"];
    let _ = writeln!(
        s,
        "requests: {} dispatched, {} completed, {} errors; rate intended {:.1}/s, achieved {:.1}/s",
        r["dispatched"],
        r["completed"],
        r["errors"],
        out["rate"]["intended_rps"].as_f64().unwrap_or(0.0),
        out["rate"]["achieved_rps"].as_f64().unwrap_or(0.0),
    );
    let l = &out["latency_ns"];
    let ms = |v: &Value| v.as_f64().unwrap_or(0.0) / 1e6;
    let fr = &out["frames"];
    if fr.is_object() {
        let _ = writeln!(
            s,
            "frames: {} rooms of {}, {} sent of {} planned, retention {:.3}% ({} of {} expected), \
             deviation p99 {:.3} ms, fan-out p99 {:.3} ms",
            fr["rooms"],
            fr["room_size"],
            fr["sent"],
            fr["planned"],
            fr["retention"].as_f64().unwrap_or(0.0) * 100.0,
            fr["received"],
            fr["expected"],
            ms(&fr["deviation_ns"]["p99"]),
            ms(&fr["fanout_ns"]["p99"]),
        );
    }
    let ci: Option<crate::report::ci::HistCi> = serde_json::from_value(l["ci"].clone()).ok();
    let at = |key: &str| {
        let v = l[key].as_u64().unwrap_or(0);
        let shown = crate::units::fmt_ns(v);
        match &ci {
            Some(c) => format!("{shown}{}", c.show(key, v)),
            None => shown,
        }
    };
    let _ = writeln!(
        s,
        "latency: p50 {}, p99 {}, p99.9 {}, max {:.3} ms{}",
        at("p50"),
        at("p99"),
        at("p999"),
        ms(&l["max"]),
        ci.as_ref().map_or(String::new(), |c| format!(
            " ([brackets]: {:.0}% confidence intervals)",
            c.level * 100.0
        )),
    );
    s.push_str(&targets::table(&out["targets"]));
    let _ = writeln!(
        s,
        "{:>5}  {:<7}  {:>12}  {:>18}  {:>10}  {:>12}  {:>12}  file",
        "shard", "valid", "start skew", "clock", "completed", "intended/s", "achieved/s"
    );
    for sh in shards {
        let v = &sh.value;
        let c = &v["fleet"]["clock"];
        let clock = if c["unsynchronised"] == true {
            "UNSYNCHRONISED".to_string()
        } else if let Some(e) = c["max_error_us"].as_u64() {
            format!("max error {e} us")
        } else {
            "unknown".to_string()
        };
        let skew = v["fleet"]["start_skew_ns"]
            .as_u64()
            .map_or("-".to_string(), |ns| format!("{:.1} us", ns as f64 / 1e3));
        let _ = writeln!(
            s,
            "{:>5}  {:<7}  {:>12}  {:>18}  {:>10}  {:>12.1}  {:>12.1}  {}",
            sh.index,
            if v["valid"] == true { "yes" } else { "NO" },
            skew,
            clock,
            v["requests"]["completed"],
            v["rate"]["intended_rps"].as_f64().unwrap_or(0.0),
            v["rate"]["achieved_rps"].as_f64().unwrap_or(0.0),
            sh.path
        );
    }
    if !unsynced.is_empty() {
        let list: Vec<String> = unsynced.iter().map(u64::to_string).collect();
        let _ = writeln!(
            s,
            "warning: shards {} report an unsynchronised clock: their start skew and \
             cross-machine latency are only as good as their clocks (run chrony or ptp4l)",
            list.join(", ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard's empty placeholder second (a tiny, 1-digit histogram) first in line
    /// does not make the sum 1-digit: the sum takes the first part holding a value's.
    #[test]
    fn an_empty_placeholder_does_not_set_the_sums_precision() {
        let tiny = Histogram::<u64>::new_with_bounds(1, 2, 1).unwrap();
        let mut full = Histogram::<u64>::new(3).unwrap();
        full.record(1_234_567).unwrap();
        let parts = [json!(hdr::encode(&tiny)), json!(hdr::encode(&full))];
        let sum = add_all(parts.iter()).unwrap();
        assert_eq!(sum.sigfig(), 3);
        assert_eq!(sum.len(), 1);
        assert!(sum.equivalent(sum.value_at_quantile(0.5), 1_234_567));
    }

    /// A shard holding only `value` (what `merge_abort` reads).
    fn shard(index: u64, value: Value) -> Shard {
        let h = || Histogram::<u64>::new(3).unwrap();
        Shard {
            path: format!("s{index}.json"),
            value,
            index,
            histograms: [h(), h(), h(), h()],
        }
    }

    #[test]
    fn the_merged_abort_names_the_shard_that_fired_first() {
        let fired = |at: u64| json!({"abort": {"condition": "errors>5% for 2s", "window_s": 2, "fired_at_s": at}});
        let shards = [
            shard(0, fired(9)),
            shard(1, json!({"abort": null})),
            shard(2, fired(7)),
            shard(3, fired(7)),
        ];
        let mut out = json!({});
        merge_abort(&mut out, &shards);
        let a = &out["abort"];
        assert_eq!(
            (a["shard"].as_u64(), a["fired_at_s"].as_u64()),
            (Some(2), Some(7)),
            "{a}"
        );
        assert_eq!(a["shards_fired"], 3, "{a}");
        assert_eq!(a["condition"], "errors>5% for 2s", "{a}");
        // None fired: null, whatever the first shard said.
        let mut out = json!({"abort": {"condition": "x"}});
        merge_abort(
            &mut out,
            &[shard(0, json!({"abort": null})), shard(1, json!({}))],
        );
        assert!(out["abort"].is_null(), "{}", out["abort"]);
    }

    #[test]
    fn counters_add_as_integers_over_every_shards_keys() {
        let a = json!({"timeout": 2, "reset": 1, "rate": 1.5});
        let b = json!({"reset": 4, "protocol": 7, "rate": 2.0});
        let big = json!({"n": u64::MAX - 1});
        assert_eq!(
            sum_numbers(&[&a, &b]),
            json!({"timeout": 2, "reset": 5, "rate": 3.5, "protocol": 7})
        );
        assert_eq!(max_numbers(&[&a, &b])["reset"], 4);
        // Exact past 2^53, saturating at the top.
        assert_eq!(sum_numbers(&[&big, &json!({"n": 1})])["n"], u64::MAX);
        assert_eq!(
            sum_numbers(&[&json!({"n": (1u64 << 53) + 1}), &json!({"n": 2})])["n"],
            (1u64 << 53) + 3
        );
    }

    /// `--expect`: the failures of each assertion, and the unchecked replies, add over
    /// the shards; a run without `--expect` gains no key.
    #[test]
    fn assertion_failures_add_over_the_shards() {
        let shard = |index, expect: Value| Shard {
            path: format!("s{index}.json"),
            value: json!({ "expect": expect }),
            index,
            histograms: std::array::from_fn(|_| Histogram::new(3).unwrap()),
        };
        let one = |a: u64, b: u64, u: u64| {
            json!({"assertions": [{"assertion": "status:200", "failed": a},
                                  {"assertion": "!contains:fallback", "failed": b}],
                   "unchecked": u})
        };
        let shards = [shard(0, one(1, 10, 0)), shard(1, one(2, 20, 3))];
        let mut out = shards[0].value.clone();
        add_expect(&mut out, &shards);
        assert_eq!(out["expect"], one(3, 30, 3));
        let bare = [shard(0, Value::Null)];
        let mut out = json!({});
        add_expect(&mut out, &bare);
        assert_eq!(out, json!({}));
    }

    /// Issue 33, item 6: each host's kernel counters add; one that could not read a
    /// counter adds nothing, and conntrack's fill is the fullest host's.
    #[test]
    fn kernel_counters_add_over_the_hosts_that_read_them() {
        let a = json!({"conntrack_drop": 5, "nic_rx_missed": null, "retrans_segs": 1,
                       "conntrack_count_max": 40, "conntrack_max": 50});
        let b = json!({"conntrack_drop": 7, "nic_rx_missed": null, "retrans_segs": null,
                       "conntrack_count_max": 90, "conntrack_max": 100});
        assert_eq!(
            kernel_sum(&[&a, &b]),
            json!({"conntrack_drop": 12, "nic_rx_missed": null, "retrans_segs": 1,
                   "conntrack_count_max": 90, "conntrack_max": 100})
        );
    }

    /// A crafted shard count is refused before the missing shards are listed (the
    /// report fuzz target found 10^12 allocating gigabytes).
    #[test]
    fn a_shard_count_beyond_the_limit_is_refused_in_one_line() {
        let mut v: Value =
            serde_json::from_str(include_str!("../../fuzz/seeds/report/shard.json")).unwrap();
        v["fleet"]["shards"] = json!(100_000);
        let e = merge_texts(&[("a.json".into(), v.to_string())])
            .err()
            .expect("refused")
            .to_string();
        assert!(
            e.starts_with("a.json: ") && e.contains("a fleet of 100000 shards"),
            "{e}"
        );
    }
}
