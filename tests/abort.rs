//! `--abort-if` (issue 37 item 3): a condition on the live per-second figures that
//! stops the run once it held for its window, keeps what was measured, names the
//! condition and exits with code 5.
mod common;
use common::servers::nginx_listening;
use common::*;
use std::time::{Duration, Instant};

/// `blaster run` of 30 s at 200/s over 4 connections, `--http HTTP` against `target`.
fn run_args<'a>(target: &'a str, http: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--target",
        target,
        "--cores",
        "0",
        "--rate",
        "200",
        "--connections",
        "4",
        "--duration",
        "30s",
        "--http",
        http,
        "--quiet",
    ]
}

/// A 30 s run at 200/s of `path` against nginx (its `/fail` answers 503) with `extra`:
/// exit code, wall time, report.
fn against_nginx(path: &str, extra: &[&str]) -> (Option<i32>, Duration, serde_json::Value) {
    let (_nginx, port) = nginx_listening(1000, 128, None, "");
    let target = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let http = format!("GET {path}");
    let mut args = run_args(&target, &http);
    args.extend_from_slice(&["--json", json.to_str().unwrap()]);
    args.extend_from_slice(extra);
    let started = Instant::now();
    let o = run(&args, Duration::from_secs(60));
    let took = started.elapsed();
    let text = std::fs::read_to_string(&json).unwrap_or_else(|_| panic!("{}", stderr(&o)));
    (o.status.code(), took, serde_json::from_str(&text).unwrap())
}

#[test]
fn a_target_failing_every_request_stops_the_run_within_its_window() {
    let _g = load_lock();
    let (code, took, v) = against_nginx("/fail", &["--abort-if", "errors > 50% for 2s"]);
    assert_eq!(code, Some(5), "{v}");
    // Two seconds of 503s, then the stop: far from the 30 s asked for.
    assert!(took < Duration::from_secs(10), "{took:?}");
    let a = &v["abort"];
    assert_eq!(a["condition"], "errors>50% for 2s", "{a}");
    assert_eq!(a["window_s"], 2, "{a}");
    let fired = a["fired_at_s"].as_u64().unwrap();
    assert!((2..=4).contains(&fired), "{a}");
    // What was measured is kept: the errors, and the seconds up to the stop.
    let errors = v["requests"]["errors"].as_u64().unwrap();
    assert!((400..=1_000).contains(&errors), "{}", v["requests"]);
    assert!(v["intervals"].as_array().unwrap().len() >= 2);
}

#[test]
fn a_condition_that_never_holds_lets_the_run_finish() {
    let _g = load_lock();
    // Every request answered 200: the guard never fires, the run takes its 30 s...
    // too long for a test, so a short run with the same guard.
    let (_nginx, port) = nginx_listening(1000, 128, None, "");
    let target = format!("127.0.0.1:{port}");
    let v = run_report(
        &[
            "--target",
            &target,
            "--rate",
            "200",
            "--connections",
            "4",
            "--duration",
            "3s",
            "--http",
            "GET /",
            "--abort-if",
            "errors>50% for 2s",
            "--abort-if",
            "p99>5s for 1s",
        ],
        Duration::from_secs(60),
    );
    assert!(v["abort"].is_null(), "{}", v["abort"]);
    assert_eq!(v["requests"]["completed"], 600, "{}", v["requests"]);
}

#[test]
fn bad_abort_conditions_are_one_line_usage_errors() {
    for (cond, says) in [
        ("errors>5%", "CONDITION for DURATION"),
        ("errors<5% for 10s", "a floor crossed"),
        ("p99>200ms for 100ms", "for 1s to"),
        ("latency>1s for 2s", "unknown metric"),
        ("retention<99% for 2s", "needs --workload frames"),
    ] {
        let args = [
            "run",
            "--target",
            "127.0.0.1:9",
            "--rate",
            "10",
            "--duration",
            "1s",
            "--abort-if",
            cond,
        ];
        let e = assert_usage(&args, says);
        assert!(e.contains("--abort-if: "), "{cond}: {e}");
    }
    // Without a target (the baseline): refused too.
    assert_usage(&["run", "--abort-if", "errors>5% for 2s"], "needs --target");
}

/// Two shards of one run, each judging its own seconds, both fire: the merged report
/// names the shard that fired first and how many did.
#[test]
fn merged_shards_name_the_shard_whose_abort_fired_first() {
    let _g = load_lock();
    let (_nginx, port) = nginx_listening(1000, 128, None, "");
    let target = format!("127.0.0.1:{port}");
    let d = tempfile::tempdir().unwrap();
    let mut args = run_args(&target, "GET /fail");
    args.extend_from_slice(&["--abort-if", "errors > 50% for 2s"]);
    let mut files = Vec::new();
    for (out, json) in run_shards(d.path(), 2, &args) {
        assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
        files.push(json);
    }
    let (out, v) = merge_shards(d.path(), &files);
    let text = String::from_utf8_lossy(&out.stdout);
    let a = &v["abort"];
    let fired: Vec<u64> = files
        .iter()
        .map(|f| {
            let s: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
            s["abort"]["fired_at_s"].as_u64().unwrap()
        })
        .collect();
    let first = *fired.iter().min().unwrap();
    let shard = a["shard"].as_u64().unwrap();
    assert_eq!(fired[shard as usize], first, "{a} {fired:?}");
    assert_eq!(a["fired_at_s"], first, "{a}");
    assert_eq!(a["shards_fired"], 2, "{a}");
    assert!(
        text.contains(&format!("ABORTED: shard {shard} fired first")),
        "{text}"
    );
}
