//! The `frames` key of merged shards (`--workload frames`): counts add, histograms add
//! (deviation, jitter, fan-out, join), and every ratio and percentile is recomputed from
//! the sums, never averaged. What cannot be merged exactly (per-connection quantiles)
//! takes a stated bound. docs/fleet.md lists every rule.

use crate::report::{Percentiles, hdr};
use hdrhistogram::Histogram;
use serde_json::{Map, Value, json};

/// Figures every shard must share: the same rooms, rhythm and budget, else the
/// shards measured different things and their sum means nothing.
pub const SHAPE: [&str; 9] = [
    "proto",
    "tick_ns",
    "frame_bytes",
    "room_size",
    "senders_per_room",
    "budget_ns",
    "echo_to_sender",
    "members_per_connection",
    "room_layout",
];

/// Embedded frame histograms, `frames.histograms.<name>`, with the path of the
/// percentiles they make.
const HISTOGRAMS: [(&str, &[&str]); 4] = [
    ("deviation", &["deviation_ns"]),
    ("jitter", &["jitter_ns"]),
    ("fanout", &["fanout_ns"]),
    ("join", &["join", "ns"]),
];

/// Why the frames keys do not merge: the first shard's file index and the reason.
#[derive(Debug, PartialEq)]
pub enum FramesMergeError {
    /// Shard `index` (in the order given) disagrees with the first on a shape figure.
    Disagree {
        index: usize,
        key: &'static str,
        first: Value,
        this: Value,
    },
    /// Shard `index` has no `frames` key while another has one, or an embedded
    /// histogram is unreadable or cannot be added.
    Missing { index: usize, what: String },
}

impl std::fmt::Display for FramesMergeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FramesMergeError::Disagree {
                key, first, this, ..
            } => write!(
                f,
                "frames.{key} {this} differs from the first shard's {first}: shards of one frames run share rooms, tick and budget"
            ),
            FramesMergeError::Missing { what, .. } => write!(f, "{what}"),
        }
    }
}

impl FramesMergeError {
    pub fn index(&self) -> usize {
        match self {
            FramesMergeError::Disagree { index, .. } | FramesMergeError::Missing { index, .. } => {
                *index
            }
        }
    }
}

/// A shape figure as compared: `members_per_connection` absent means 1, `room_layout`
/// absent `grouped` (files from before either).
fn shape_of(f: &Value, key: &str) -> Value {
    match f.get(key) {
        None if key == "members_per_connection" => json!(1),
        None if key == "room_layout" => json!("grouped"),
        None => Value::Null,
        Some(v) => v.clone(),
    }
}

/// Every shard measured the same thing: the [`SHAPE`] figures and the aggregate's
/// downlink size are the first shard's.
fn check_shapes(parts: &[&Value]) -> Result<(), FramesMergeError> {
    let first = parts[0];
    for (index, p) in parts.iter().enumerate().skip(1) {
        for key in SHAPE {
            let (a, b) = (shape_of(first, key), shape_of(p, key));
            if a != b {
                return Err(FramesMergeError::Disagree {
                    index,
                    key,
                    first: a,
                    this: b,
                });
            }
        }
        let down = |v: &Value| v["aggregate"]["down_bytes"].clone();
        if down(first) != down(p) {
            return Err(FramesMergeError::Disagree {
                index,
                key: "aggregate.down_bytes",
                first: down(first),
                this: down(p),
            });
        }
    }
    Ok(())
}

/// Each shard ran its own rooms (`first_room`, and `rooms` over the member slots): two
/// that overlap ran the same rooms twice, and their sum would count every frame there
/// twice (each copy of a room sees the other's frames as foreign or duplicates).
fn check_rooms(parts: &[&Value]) -> Result<(), FramesMergeError> {
    let mut ranges: Vec<(u64, u64, usize)> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let first = p["first_room"].as_u64().unwrap_or(0);
            let slots = shape_of(p, "members_per_connection")
                .as_u64()
                .unwrap_or(1)
                .max(1);
            (first, first + p["rooms"].as_u64().unwrap_or(0) / slots, i)
        })
        .collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        let ((a0, a1, ai), (b0, b1, bi)) = (w[0], w[1]);
        if b0 < a1 {
            return Err(FramesMergeError::Missing {
                index: bi,
                what: format!(
                    "ran rooms {b0}..{b1}, overlapping rooms {a0}..{a1} of file {} given: the shards of one frames run own their rooms apart (give each machine --shard i/N)",
                    ai + 1
                ),
            });
        }
    }
    Ok(())
}

/// The merged `frames` key of `parts` (each shard's `frames`), `None` when no shard
/// has one (a request/response run).
pub fn merge(parts: &[&Value]) -> Result<Option<Value>, FramesMergeError> {
    if parts.iter().all(|p| !p.is_object()) {
        return Ok(None);
    }
    if let Some(index) = parts.iter().position(|p| !p.is_object()) {
        return Err(FramesMergeError::Missing {
            index,
            what: "has no frames key while another shard has one: a frames run's shards are all frames"
                .into(),
        });
    }
    check_shapes(parts)?;
    let first = parts[0];
    // Counts (and the rates over the one schedule) add, key by key: planned, sent,
    // not_sent, expected, received, lost, duplicates, reordered, late, stale, foreign,
    // before_join, rooms, join.joined, join.failed.*, fanout_*, residency counts,
    // up_fps, down_fps, busy_cpu_ns, aggregate.outside. What does not add is replaced.
    check_rooms(parts)?;
    let mut out = super::sum_numbers(parts);
    out["first_room"] = json!(
        parts
            .iter()
            .map(|p| p["first_room"].as_u64().unwrap_or(0))
            .min()
            .unwrap_or(0)
    );
    for key in SHAPE {
        if let Some(v) = first.get(key) {
            out[key] = v.clone();
        }
    }
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    let (expected, received, sent) = (n(&out, "expected"), n(&out, "received"), n(&out, "sent"));
    out["retention"] = json!(if expected == 0 {
        0.0
    } else {
        received as f64 / expected as f64
    });
    // Per-connection quantiles: the lowest is exact; the 1st percentile and the
    // median of the whole are at least the lowest shard's (a lower bound).
    for path in [
        &["retention_min"][..],
        &["retention_p1"],
        &["retention_median"],
        &["residency", "uptime_min"],
        &["residency", "uptime_median"],
    ] {
        let lowest = parts
            .iter()
            .filter_map(|p| at(p, path).as_f64())
            .reduce(f64::min);
        if let Some(v) = lowest {
            set(&mut out, path, json!(v));
        }
    }
    if out["slow_readers"].is_object() {
        // The flag's RATIO and RATE are every shard's; the counts add.
        let s = &mut out["slow_readers"];
        s["ratio"] = first["slow_readers"]["ratio"].clone();
        s["rate_bytes_per_s"] = first["slow_readers"]["rate_bytes_per_s"].clone();
        let (e, r) = (n(s, "expected"), n(s, "received"));
        s["retention"] = json!(if e == 0 { 0.0 } else { r as f64 / e as f64 });
    }
    if out["aggregate"].is_object() {
        out["aggregate"]["down_bytes"] = first["aggregate"]["down_bytes"].clone();
        out["aggregate"]["expected_arrival_shift_ns"] = json!(
            parts
                .iter()
                .filter_map(|p| p["aggregate"]["expected_arrival_shift_ns"].as_u64())
                .max()
                .unwrap_or(0)
        );
    }
    if out["join"].is_object() {
        out["join"]["first_error"] = parts
            .iter()
            .map(|p| &p["join"]["first_error"])
            .find(|e| !e.is_null())
            .cloned()
            .unwrap_or(Value::Null);
    }
    // The busy CPU adds; per frame from the sums.
    let busy = n(&out, "busy_cpu_ns");
    let per = |frames: u64| {
        if frames == 0 {
            0.0
        } else {
            busy as f64 / frames as f64
        }
    };
    out["cpu_ns_per_frame_received"] = json!(per(received));
    out["cpu_ns_per_frame"] = json!(per(sent + received));
    out["cpu_basis"] = json!(if parts.iter().all(|p| p["cpu_basis"] == "busy") {
        "busy"
    } else {
        "busy_at_most"
    });
    // Histograms: added, re-encoded, and the percentiles from the sums.
    out["histograms"] = first["histograms"].clone();
    for (name, pct) in HISTOGRAMS {
        if parts.iter().all(|p| p["histograms"].get(name).is_none()) {
            continue;
        }
        let sum = add(parts.iter().map(|p| &p["histograms"][name])).map_err(|i| {
            FramesMergeError::Missing {
                index: i,
                what: format!("frames.histograms.{name}: missing, unreadable or not addable"),
            }
        })?;
        out["histograms"][name] = json!(hdr::encode(&sum));
        set(
            &mut out,
            pct,
            serde_json::to_value(Percentiles::of(&sum)).unwrap_or(Value::Null),
        );
    }
    Ok(Some(out))
}

/// Adds the encoded histograms; `Err(i)`: part `i` is missing, unreadable or does not
/// add. The sum grows its bounds as needed.
fn add<'a>(parts: impl Iterator<Item = &'a Value>) -> Result<Histogram<u64>, usize> {
    let mut sum: Option<Histogram<u64>> = None;
    for (i, p) in parts.enumerate() {
        let one = hdr::decode(p.as_str().ok_or(i)?).map_err(|_| i)?;
        match &mut sum {
            Some(acc) => acc.add(&one).map_err(|_| i)?,
            None => {
                let mut first = one;
                first.auto(true);
                sum = Some(first);
            }
        }
    }
    sum.ok_or(0)
}

fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |v, k| &v[*k])
}

/// Sets `path` in `v`, creating objects on the way.
fn set(v: &mut Value, path: &[&str], x: Value) {
    let mut cur = v;
    for k in &path[..path.len() - 1] {
        if !cur[*k].is_object() {
            cur[*k] = Value::Object(Map::new());
        }
        cur = &mut cur[*k];
    }
    cur[path[path.len() - 1]] = x;
}

/// One second's `frames` figures of the shards (second k of each): rates and counts
/// add, connections up add, the retention from the summed counts; the deviation
/// percentiles take the largest shard's, an upper bound of the whole's (every shard
/// has at most 1% of its frames above its p99, so the whole has at most 1% above the
/// largest), exact for the max.
pub fn merge_interval(parts: &[&Value]) -> Value {
    let mut out = super::sum_numbers(parts);
    for key in [
        "deviation_p50_ns",
        "deviation_p99_ns",
        "deviation_p999_ns",
        "deviation_max_ns",
    ] {
        if out.get(key).is_some() {
            out[key] = json!(parts.iter().filter_map(|p| p[key].as_u64()).max());
        }
    }
    if out.get("retention").is_some() {
        let n = |k: &str| out[k].as_u64().unwrap_or(0);
        out["retention"] = json!(crate::report::frames::retention_of(
            n("received"),
            n("lost")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::Histogram;

    fn hist(values: &[u64]) -> (Histogram<u64>, String) {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        for v in values {
            h.record(*v).unwrap();
        }
        let e = hdr::encode(&h);
        (h, e)
    }

    fn shard(received: u64, expected: u64, dev: &[u64], p1: f64, cpu: u64) -> Value {
        let (_, d) = hist(dev);
        let (_, j) = hist(&[5]);
        json!({
            "proto": "blaster", "tick_ns": 20_000_000, "frame_bytes": 50, "room_size": 10,
            "senders_per_room": 10, "rooms": 2, "budget_ns": 20_000_000, "echo_to_sender": false,
            "planned": 100, "sent": 100, "expected": expected, "received": received,
            "lost": expected - received, "late": 1,
            "join": {"joined": 20, "failed": {"refused": 1, "timeout": 0}, "first_error": null,
                     "ns": {"p50": 0}},
            "retention": received as f64 / expected as f64,
            "retention_min": p1 - 0.01, "retention_p1": p1, "retention_median": 1.0,
            "residency": {"uptime_min": 1.0, "uptime_median": 1.0, "up_whole_run": 20,
                          "disconnects": 0, "reconnects": 0},
            "busy_cpu_ns": cpu, "cpu_basis": "busy",
            "deviation_ns": {"p99": 0},
            "up_fps": 100.0, "down_fps": 900.5,
            "histograms": {"encoding": "x", "deviation": d, "jitter": j, "fanout": j, "join": j},
        })
    }

    /// `v` as the shard whose rooms start at `first`.
    fn from_room(mut v: Value, first: u64) -> Value {
        v["first_room"] = json!(first);
        v
    }

    #[test]
    fn counts_add_ratios_and_percentiles_come_from_the_sums() {
        let a = shard(900, 1000, &[1_000; 99], 0.9, 1_000_000);
        let b = from_room(shard(2_950, 3000, &[1_000_000], 0.8, 3_000_000), 2);
        let m = merge(&[&a, &b]).unwrap().unwrap();
        assert_eq!(m["received"], 3850);
        assert_eq!(m["expected"], 4000);
        assert_eq!(m["lost"], 150);
        assert_eq!(m["rooms"], 4);
        assert_eq!(m["first_room"], 0);
        assert_eq!(m["join"]["joined"], 40);
        assert_eq!(m["join"]["failed"]["refused"], 2);
        assert_eq!(m["residency"]["up_whole_run"], 40);
        assert_eq!(m["retention"], 3850.0 / 4000.0);
        // Shapes kept, not summed.
        assert_eq!(m["tick_ns"], 20_000_000);
        assert_eq!(m["room_size"], 10);
        assert_eq!(m["up_fps"], 200.0);
        assert_eq!(m["down_fps"], 1801.0);
        // The lowest shard's quantiles.
        assert_eq!(m["retention_min"], 0.8 - 0.01);
        assert_eq!(m["retention_p1"], 0.8);
        assert_eq!(m["residency"]["uptime_min"], 1.0);
        // 100 deviations, one of 1 ms: the p99 of the whole is 1 us, the max 1 ms
        // (the largest shard's p99 would say 1 ms).
        let d = &m["deviation_ns"];
        assert_eq!(d["count"], 100);
        assert!(d["p99"].as_u64().unwrap() < 1_100, "{d}");
        assert!(d["max"].as_u64().unwrap() >= 1_000_000, "{d}");
        let sum = hdr::decode(m["histograms"]["deviation"].as_str().unwrap()).unwrap();
        assert_eq!(sum.len(), 100);
        assert_eq!(m["join"]["ns"]["count"], 2);
        assert_eq!(m["cpu_ns_per_frame_received"], 4_000_000.0 / 3850.0);
        assert_eq!(m["cpu_ns_per_frame"], 4_000_000.0 / (200.0 + 3850.0));
    }

    #[test]
    fn shards_of_other_rooms_tick_or_budget_are_refused() {
        let a = shard(900, 1000, &[1], 0.9, 1);
        let b = from_room(a.clone(), 2);
        for (key, v) in [
            ("room_size", json!(20)),
            ("tick_ns", json!(10_000_000)),
            ("budget_ns", json!(1)),
            ("members_per_connection", json!(10)),
            ("room_layout", json!("mixed")),
        ] {
            let mut b = b.clone();
            b[key] = v.clone();
            let e = merge(&[&a, &b]).unwrap_err();
            assert_eq!(e.index(), 1);
            assert!(e.to_string().contains(key), "{e}");
        }
        // Absent means one member per connection.
        let mut b = b.clone();
        b["members_per_connection"] = json!(1);
        assert!(merge(&[&a, &b]).is_ok());
        // Absent means grouped (every file before --room-layout).
        b["room_layout"] = json!("grouped");
        assert!(merge(&[&a, &b]).is_ok());
        // Rooms 1..3 overlap the first shard's 0..2; 2..4 do not, in either order.
        let e = merge(&[&a, &from_room(a.clone(), 1)]).unwrap_err();
        assert_eq!(e.index(), 1);
        assert!(
            e.to_string()
                .contains("ran rooms 1..3, overlapping rooms 0..2"),
            "{e}"
        );
        let m = merge(&[&from_room(a.clone(), 2), &a]).unwrap().unwrap();
        assert_eq!((&m["first_room"], &m["rooms"]), (&json!(0), &json!(4)));
        // Ten members a connection: 20 rooms over the slots are 2 of slot 0.
        let wide = |first| {
            let mut v = from_room(a.clone(), first);
            (v["members_per_connection"], v["rooms"]) = (json!(10), json!(20));
            v
        };
        assert!(merge(&[&wide(0), &wide(2)]).is_ok());
        assert!(merge(&[&wide(0), &wide(1)]).is_err());
        assert!(merge(&[&a, &Value::Null]).is_err());
        assert_eq!(merge(&[&Value::Null, &Value::Null]), Ok(None));
    }

    #[test]
    fn an_intervals_rates_add_and_its_retention_is_recomputed() {
        let a = json!({"up_fps": 100.0, "down_fps": 900.0, "sent": 100, "received": 900,
                       "lost": 100, "late": 2, "connections_active": 20, "retention": 0.9,
                       "deviation_p99_ns": 500, "deviation_max_ns": 900});
        let b = json!({"up_fps": 100.0, "down_fps": 1000.0, "sent": 100, "received": 1000,
                       "lost": 0, "late": 0, "connections_active": 20, "retention": 1.0,
                       "deviation_p99_ns": 700, "deviation_max_ns": 800});
        let m = merge_interval(&[&a, &b]);
        assert_eq!(m["down_fps"], 1900.0);
        assert_eq!(m["received"], 1900);
        assert_eq!(m["connections_active"], 40);
        assert_eq!(m["late"], 2);
        assert_eq!(m["retention"], 1900.0 / 2000.0);
        assert_eq!(m["deviation_p99_ns"], 700);
        assert_eq!(m["deviation_max_ns"], 900);
    }
}
