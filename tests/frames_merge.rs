//! `blaster merge` of frames reports: two real frames runs against `blaster sink --mode
//! broadcast`, labelled as the two shards of one run, merged. The merged counts are the
//! shards' sums, the retention is recomputed from them, the frame histograms are added
//! (counts add, percentiles from the sum) and the per-second frame figures add; shards
//! of other rooms or tick are refused in one line, exit 2. Only sums and exact
//! recomputations are checked, none of the runs' timing.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A 1 s frames run of `connections` in rooms of 10 against a fresh broadcast sink.
fn frames_report(connections: &str) -> Value {
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "10"]);
    let v = run_report(
        &frames_args_with(&sink.addr, connections, "1s"),
        Duration::from_secs(60),
    );
    sink.stop();
    v
}

/// `v` written as shard `i` of 2 of one run (the first report's run id and plan).
fn as_shard(v: &Value, i: u64, first: &Value, path: &Path) -> PathBuf {
    let mut v = v.clone();
    let f = &first["fleet"];
    v["fleet"] = json!({
        "run_id": f["run_id"], "shard": i, "shards": 2,
        "plan_fingerprint": f["plan_fingerprint"], "start_at_unix_ms": 1,
        "start_at": null, "start_skew_ns": 0, "clock": f["clock"],
    });
    v["target"] = first["target"].clone();
    if i > 0 {
        // Its rooms after the first's, as `--shard` numbers them.
        v["frames"]["first_room"] = first["frames"]["rooms"].clone();
    }
    std::fs::write(path, serde_json::to_string(&v).unwrap()).unwrap();
    path.to_path_buf()
}

fn merge(files: &[&Path], out: &Path) -> (Option<i32>, String) {
    let mut args: Vec<String> = vec!["merge".into()];
    args.extend(files.iter().map(|p| p.display().to_string()));
    args.extend(["--json".into(), out.display().to_string()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run(&refs, Duration::from_secs(30));
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    (o.status.code(), text)
}

fn hist(v: &Value) -> Histogram<u64> {
    blaster::report::hdr::decode(v.as_str().expect("an embedded histogram")).unwrap()
}

fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, k| &v[k])
}

#[test]
fn merged_frames_are_the_shards_sums_and_their_histograms_added() {
    let _g = load_lock();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = frames_report("20");
    let b = frames_report("30");
    let fa = as_shard(&a, 0, &a, &d.join("a.json"));
    let fb = as_shard(&b, 1, &a, &d.join("b.json"));
    let out = d.join("merged.json");
    let (code, text) = merge(&[&fa, &fb], &out);
    assert!(matches!(code, Some(0 | 3)), "{text}");
    let m = read_json(&out);
    let (fa_, fb_, fm) = (&a["frames"], &b["frames"], &m["frames"]);
    for key in [
        "planned",
        "sent",
        "not_sent",
        "expected",
        "received",
        "lost",
        "duplicates",
        "reordered",
        "late",
        "stale",
        "foreign",
        "before_join",
        "rooms",
        "fanout_expected",
        "fanout_complete",
        "fanout_incomplete",
        "busy_cpu_ns",
        "join.joined",
        "join.failed.refused",
        "join.failed.timeout",
        "residency.up_whole_run",
        "residency.disconnects",
        "residency.reconnects",
    ] {
        let (x, y) = (at(fa_, key).as_u64(), at(fb_, key).as_u64());
        assert_eq!(
            at(fm, key).as_u64(),
            Some(x.unwrap() + y.unwrap()),
            "frames.{key}"
        );
    }
    assert_eq!(fm["rooms"], 5);
    assert_eq!(fm["join"]["joined"], 50);
    for key in ["room_size", "tick_ns", "budget_ns", "frame_bytes"] {
        assert_eq!(fm[key], fa_[key], "frames.{key} kept");
    }
    let (rec, exp) = (
        fm["received"].as_u64().unwrap(),
        fm["expected"].as_u64().unwrap(),
    );
    assert!(exp > 0);
    assert_eq!(fm["retention"].as_f64(), Some(rec as f64 / exp as f64));
    let up = fa_["up_fps"].as_f64().unwrap() + fb_["up_fps"].as_f64().unwrap();
    assert_eq!(fm["up_fps"].as_f64(), Some(up));
    let lowest = fa_["retention_min"]
        .as_f64()
        .unwrap()
        .min(fb_["retention_min"].as_f64().unwrap());
    assert_eq!(fm["retention_min"].as_f64(), Some(lowest));

    // Each frame histogram: the merged one is the shards' added, its percentiles too.
    for (name, pct) in [
        ("deviation", "deviation_ns"),
        ("jitter", "jitter_ns"),
        ("fanout", "fanout_ns"),
        ("join", "join.ns"),
    ] {
        let (ha, hb) = (
            hist(&fa_["histograms"][name]),
            hist(&fb_["histograms"][name]),
        );
        let hm = hist(&fm["histograms"][name]);
        assert_eq!(hm.len(), ha.len() + hb.len(), "histograms.{name} count");
        let mut added = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        added.add(&ha).unwrap();
        added.add(&hb).unwrap();
        let p = at(fm, pct);
        assert_eq!(p["count"].as_u64(), Some(added.len()), "{pct}");
        assert_eq!(
            p["p99"].as_u64(),
            Some(added.value_at_quantile(0.99)),
            "{pct}"
        );
        assert_eq!(p["max"].as_u64(), Some(added.max()), "{pct}");
    }

    // Second 0: the shards' frames figures added, the retention from the sums.
    let i = |v: &Value, k: &str| v["intervals"][0]["frames"][k].clone();
    for k in ["sent", "received", "lost", "late", "connections_active"] {
        assert_eq!(
            i(&m, k).as_u64(),
            Some(i(&a, k).as_u64().unwrap() + i(&b, k).as_u64().unwrap()),
            "intervals[0].frames.{k}"
        );
    }
    let (r, l) = (
        i(&m, "received").as_u64().unwrap(),
        i(&m, "lost").as_u64().unwrap(),
    );
    let want = if r + l == 0 {
        1.0
    } else {
        r as f64 / (r + l) as f64
    };
    assert_eq!(i(&m, "retention").as_f64(), Some(want));
    assert!(text.contains("frames: 5 rooms of 10"), "{text}");

    // Shards of other rooms or another tick: one line naming the file, exit 2.
    for (key, v) in [("room_size", json!(5)), ("tick_ns", json!(10_000_000))] {
        let mut bad = b.clone();
        bad["frames"][key] = v;
        let fbad = as_shard(&bad, 1, &a, &d.join(format!("bad-{key}.json")));
        let (code, text) = merge(&[&fa, &fbad], &d.join("refused.json"));
        assert_eq!(code, Some(2), "{text}");
        assert_eq!(text.trim().lines().count(), 1, "{text}");
        assert!(
            text.contains(&format!("frames.{key}")) && text.contains("bad-"),
            "{text}"
        );
    }
    // Two shards that ran the same rooms (each numbering from 0, as two copies of one
    // command would): refused, naming the overlap.
    let mut twin = b.clone();
    let ftwin = as_shard(&twin, 1, &a, &d.join("twin.json"));
    twin = read_json(&ftwin);
    twin["frames"]["first_room"] = json!(0);
    std::fs::write(&ftwin, serde_json::to_string(&twin).unwrap()).unwrap();
    let (code, text) = merge(&[&fa, &ftwin], &d.join("refused.json"));
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(text.trim().lines().count(), 1, "{text}");
    assert!(
        text.contains("overlapping rooms 0..2") && text.contains("twin"),
        "{text}"
    );
}
