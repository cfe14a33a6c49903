//! Issue 5 items 4 and 5: `blaster search` against the sink with a known capacity, and
//! `blaster run --slo`. The sink runs as a process on its own core; every test that
//! sends load takes the load lock.
//!
//! The known capacity: with `--delay 20ms` every reply takes 20 ms, so 80 connections
//! with one request in flight each complete at most 80 / 20 ms = 4000 requests/s.
//! Above that the open-model schedule keeps dispatching into the backlog, connection
//! wait grows for the whole step and p99 runs into hundreds of milliseconds: the SLO
//! `p99<100ms` breaks with a valid generator (the target is the limit). Below it p99
//! stays near 20 ms, so 100 ms leaves room for a noisy 2-core VM.
//!
//! Why 20 ms x 80 rather than 2 ms x 8 (the same nominal rate): on the shared 2-core
//! VM the sink's replies come a few hundred microseconds late whatever the delay (its
//! core is shared), which is 10-25% of 2 ms but 1-5% of 20 ms. Measured with 6000
//! requests/s offered: 2 ms x 8 completed 3070-3400/s, 10 ms x 40 3560-3610/s, 20 ms
//! x 80 3810-3935/s. The search reports what the target completes, so only the longer
//! delay keeps the known rate within the 15% this test promises.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::time::Duration;

/// Connections / delay of the sink: the rate the target can complete.
const CAPACITY_RPS: f64 = 80.0 / 0.020;

#[test]
fn search_finds_the_pool_limit_and_blames_the_target() {
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "echo", "--delay", "20ms"]);
    // The answer depends on the sink's replies on core 1 coming on time and the
    // generator on core 0 keeping up: a stolen vCPU breaks both.
    on_a_quiet_host(
        "search_finds_the_pool_limit_and_blames_the_target",
        &RATE_ON_CORES_0_1,
        || pool_limit_search(&sink),
    );
}

fn pool_limit_search(sink: &Sink) -> Result<(), Miss> {
    let (_dir, path) = tmp_json();
    let p = path.to_str().unwrap();
    // --max-lag 20ms: the host is shared; the test is about the target's limit, and a
    // generator stalled by a neighbour for a few milliseconds is not what it checks.
    let out = run(
        &[
            "search",
            "--target",
            &sink.addr,
            "--cores",
            "0",
            "--connections",
            "80",
            "--pipeline",
            "1",
            "--slo",
            "p99<100ms",
            "--start",
            "1000",
            "--factor",
            "1.5",
            "--step-duration",
            "1500ms",
            "--max-lag",
            "20ms",
            "--repeats",
            "2",
            "--json",
            p,
        ],
        Duration::from_secs(90),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let err = stderr(&out);
    let v = read_json(&path);
    // Issue 33: the host's noise before the first step, and the decisive steps twice.
    assert!(err.contains("search: this host: timer late p99"), "{err}");
    assert!(f(&v, "host_noise.wakeups") > 1_000.0, "{}", v["host_noise"]);
    let all = v["steps"].as_array().unwrap();
    let repeats: Vec<&serde_json::Value> = all.iter().filter(|s| s["phase"] == "repeat").collect();
    let rep = &v["repeats"];
    assert_eq!(
        repeats.len(),
        2,
        "one more run of the last good and the first bad: {text}"
    );
    assert_eq!(rep["good"]["runs"], 2, "{rep}");
    assert_eq!(rep["good_value"], v["max_safe_intended_rps"], "{rep}");
    assert_eq!(rep["bad_value"], v["first_bad_rps"], "{rep}");
    assert!(text.contains("repeats: "), "{text}");
    let steps: Vec<serde_json::Value> = all
        .iter()
        .filter(|s| s["phase"] != "repeat")
        .cloned()
        .collect();
    let steps = &steps;
    // Structure first (not retried): the report's shape and every step's figures.
    assert_eq!(v["mode"], "search");
    assert_eq!(v["slo_spec"], "p99<100ms");
    for s in steps {
        for k in [
            "achieved_rps",
            "latency_p50_ns",
            "latency_p99_ns",
            "latency_p999_ns",
            "errors",
            "dispatch_lag_p99_ns",
            "generator_busy_ratio_max",
        ] {
            assert!(s[k].is_number(), "steps[].{k} missing: {s}");
        }
        assert!(
            s["valid"].is_boolean() && s["slo"]["met"].is_boolean(),
            "{s}"
        );
        assert!(s["phase"] == "climb" || s["phase"] == "bisect", "{s}");
    }
    assert!(err.contains("search: climb"), "{err}");
    // The planner's arithmetic is exact whatever the host does (outside the quiet-host
    // gate): the climb starts at --start and multiplies by --factor; every bisection
    // step lies strictly inside the bracket of a passed and a broken rate.
    let climb: Vec<f64> = steps
        .iter()
        .filter(|s| s["phase"] == "climb")
        .map(|s| f(s, "intended_rps"))
        .collect();
    assert_eq!(climb.first(), Some(&1000.0), "{text}");
    for w in climb.windows(2) {
        // Rounded up to the rate axis' quantum at most.
        assert!(
            w[1] >= w[0] * 1.5 && w[1] < w[0] * 1.5 + 1.0,
            "climb {climb:?}: {text}"
        );
    }
    assert_bisection_inside_its_bracket(steps, "intended_rps", &text);
    // The answer: a search the generator kept up with and the target stopped.
    ensure(out.status.code() == Some(0), || format!("{text}\n{err}"))?;
    ensure(v["stopped_by"] == "target", || {
        format!("stopped by: {text}")
    })?;
    let safe = f(&v, "max_safe_throughput_rps");
    ensure((safe - CAPACITY_RPS).abs() <= 0.15 * CAPACITY_RPS, || {
        format!("max safe {safe}/s is not within 15% of {CAPACITY_RPS}/s:\n{text}")
    })?;
    // The climb: 1000, 1500, 2250, 3375, 5062.5 (bad), then bisection.
    let rates: Vec<f64> = steps.iter().map(|s| f(s, "intended_rps")).collect();
    ensure(
        rates.len() > 5 && rates[..5] == [1000.0, 1500.0, 2250.0, 3375.0, 5062.5],
        || format!("climb {rates:?}, or no bisection:\n{text}"),
    )?;
    // The bisection converged: the first bad rate is within 5% of the best good one.
    let good = steps
        .iter()
        .filter(|s| s["outcome"] == "pass")
        .map(|s| f(s, "intended_rps"))
        .fold(0.0, f64::max);
    let bad = f(&v, "first_bad_rps");
    ensure(bad > good && bad - good <= 0.05 * good, || {
        format!("good {good}, bad {bad}:\n{text}")
    })?;
    // An over-capacity step completes about the capacity, not what was intended.
    let over = &steps[4];
    ensure(over["outcome"] == "slo_broken", || format!("{text}"))?;
    ensure(f(over, "achieved_rps") < 1.15 * CAPACITY_RPS, || {
        format!("{over}")
    })?;
    // Little's law at the max safe rate: rate x mean latency (arithmetic, not timing).
    let inflight = f(&v, "inflight_at_max_safe");
    let want = safe * f(&v, "latency_mean_ns_at_max_safe") / 1e9;
    assert!(
        (inflight - want).abs() < 1e-6 * want.max(1.0),
        "{inflight} {want}"
    );
    // Every request takes at least the 20 ms delay; queueing adds to that.
    ensure(inflight >= 0.99 * safe * 0.020 && inflight < 800.0, || {
        format!("{inflight} in flight at {safe}/s")
    })?;
    // p99 rises steeply into saturation, so there is a knee, and it is no higher
    // than the first bad rate.
    let knee = f(&v, "knee_rps");
    ensure(knee >= 1000.0 && knee <= bad, || {
        format!("knee {knee}, first bad {bad}:\n{text}")
    })?;
    assert!(text.contains("max safe throughput:"), "{text}");
    assert!(text.contains("stopped by: target"), "{text}");
    assert!(text.contains("Little's law"), "{text}");
    Ok(())
}

#[test]
fn search_whose_first_step_breaks_exits_4() {
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "echo", "--delay", "2ms"]);
    // The one step must be valid (a 50 ms lag gate; 1% of 500 requests late breaks
    // it): only that is retried.
    on_a_quiet_host(
        "search_whose_first_step_breaks_exits_4",
        &RATE_ON_CORE_0,
        || {
            let (_dir, path) = tmp_json();
            let out = run(
                &[
                    "search",
                    "--target",
                    &sink.addr,
                    "--cores",
                    "0",
                    "--connections",
                    "8",
                    "--slo",
                    "p99<1ms",
                    "--start",
                    "500",
                    "--step-duration",
                    "1s",
                    "--max-lag",
                    "50ms",
                    "--json",
                    path.to_str().unwrap(),
                ],
                Duration::from_secs(30),
            );
            let text = String::from_utf8_lossy(&out.stdout);
            let v = read_json(&path);
            assert_eq!(v["steps"].as_array().unwrap().len(), 1);
            ensure(v["steps"][0]["valid"] == true, || {
                format!("invalid step: {text}")
            })?;
            assert_eq!(out.status.code(), Some(4), "{text}\n{}", stderr(&out));
            assert_eq!(v["stopped_by"], "target");
            assert!(v["max_safe_throughput_rps"].is_null(), "{v}");
            assert!(v["inflight_at_max_safe"].is_null(), "{v}");
            assert!(text.contains("even the first step"), "{text}");
            Ok(())
        },
    );
}

/// A step that breaks the SLO while the link is saturated is the link's limit, not
/// the target's: the search stops there and says link-bound, with the figure (exit 3).
/// `--link-speed 100kbit` makes loopback a slow link: 500 requests/s of 64 bytes is
/// about 2.5 times that (the same search without it blames the target: the test above).
#[test]
fn search_at_a_saturated_link_stops_link_bound() {
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "echo", "--delay", "2ms"]);
    on_a_quiet_host(
        "search_at_a_saturated_link_stops_link_bound",
        &RATE_ON_CORE_0,
        || {
            let (_dir, path) = tmp_json();
            let out = run(
                &[
                    "search",
                    "--target",
                    &sink.addr,
                    "--cores",
                    "0",
                    "--connections",
                    "8",
                    "--slo",
                    "p99<1ms",
                    "--start",
                    "250",
                    "--step-duration",
                    "1s",
                    "--max-lag",
                    "50ms",
                    "--link-speed",
                    "100kbit",
                    "--json",
                    path.to_str().unwrap(),
                ],
                Duration::from_secs(30),
            );
            let text = String::from_utf8_lossy(&out.stdout);
            let v = read_json(&path);
            ensure(v["steps"][0]["valid"] == true, || {
                format!("invalid step: {text}")
            })?;
            assert_eq!(v["steps"].as_array().unwrap().len(), 1, "{text}");
            assert_eq!(v["steps"][0]["outcome"], "link_bound", "{text}");
            assert_eq!(out.status.code(), Some(3), "{text}\n{}", stderr(&out));
            assert_eq!(v["stopped_by"], "link");
            assert_eq!(v["saturation"]["kind"], "link");
            assert!(f(&v, "saturation.utilization") > 0.9, "{v}");
            assert!(text.contains("stopped by: link-bound"), "{text}");
            Ok(())
        },
    );
}

#[test]
fn run_slo_verdict_sets_exit_4_and_lands_in_the_json() {
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "echo"]);
    let run_slo = |slo: &str| {
        let (_dir, path) = tmp_json();
        let out = run(
            &[
                "run",
                "--target",
                &sink.addr,
                "--cores",
                "0",
                "--connections",
                "8",
                "--rate",
                "500",
                "--duration",
                "1s",
                "--max-lag",
                "50ms",
                "--slo",
                slo,
                "--json",
                path.to_str().unwrap(),
            ],
            Duration::from_secs(30),
        );
        (out, read_json(&path))
    };
    // No loopback round trip takes under a microsecond. The host is shared with other
    // load tests: a run a neighbour made invalid exits 3 (which wins over 4), and is
    // tried again, up to three times, for a valid one.
    let (mut out, mut v) = run_slo("p99<1us,errors<50%");
    for _ in 0..2 {
        if v["valid"] == true {
            break;
        }
        assert_eq!(out.status.code(), Some(3), "invalid wins: {}", stderr(&out));
        (out, v) = run_slo("p99<1us,errors<50%");
    }
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{text}\n{}", stderr(&out));
    assert!(text.contains("p99<1us: measured"), "{text}");
    assert!(text.contains("slo: BROKEN (p99<1us)"), "{text}");
    assert_eq!(v["valid"], true);
    assert_eq!(v["slo"]["spec"], "p99<1us,errors<50%");
    assert_eq!(v["slo"]["met"], false);
    let t = &v["slo"]["terms"];
    assert_eq!(
        (t[0]["term"].as_str(), t[0]["met"].as_bool()),
        (Some("p99<1us"), Some(false))
    );
    assert_eq!(t[0]["limit"], 1000);
    assert_eq!(t[0]["measured"], v["latency_ns"]["p99"]);
    assert_eq!(
        (t[1]["unit"].as_str(), t[1]["met"].as_bool()),
        (Some("ratio"), Some(true))
    );
    // A generous SLO holds: exit 0 (3 if a neighbour made the run invalid), verdict met.
    let (out, v) = run_slo("p99<4s");
    let want = if v["valid"] == true { 0 } else { 3 };
    assert_eq!(out.status.code(), Some(want), "{}", stderr(&out));
    assert_eq!(v["slo"]["met"], true);
    assert!(String::from_utf8_lossy(&out.stdout).contains("slo: MET"));
}

/// Bad specs and flags: exit 2, one line naming the flag; nothing is sent.
#[test]
fn bad_slo_and_search_flags_are_one_line_usage_errors() {
    const T: &str = "127.0.0.1:9";
    let cases: [(&[&str], &str); 14] = [
        (
            &["run", "--target", T, "--rate", "10", "--slo", "p99>1ms"],
            "--slo: \"p99>1ms\": a latency limit is an upper bound",
        ),
        (
            &["run", "--target", T, "--rate", "10", "--slo", "p99<20"],
            "--slo: \"p99<20\": expected a duration",
        ),
        (
            &["run", "--target", T, "--rate", "10", "--slo", "errors<1"],
            "--slo: \"errors<1\": expected a percentage",
        ),
        (
            &["run", "--target", T, "--rate", "10", "--slo", "p42x<1ms"],
            "--slo: \"p42x<1ms\": unknown metric",
        ),
        (&["run", "--slo", "p99<1ms"], "--slo: needs --target"),
        (
            &["search", "--target", T, "--start", "100", "--slo", ""],
            "--slo: expected terms",
        ),
        (
            &["search", "--target", T, "--start", "100"],
            "--slo: is required",
        ),
        (
            &["search", "--target", T, "--slo", "p99<1ms"],
            "--start: is required",
        ),
        (
            &[
                "search", "--target", T, "--slo", "p99<1ms", "--start", "100", "--factor", "0.5",
            ],
            "--factor: must be greater than 1",
        ),
        (
            &[
                "search",
                "--target",
                T,
                "--slo",
                "p99<1ms",
                "--start",
                "100",
                "--precision",
                "x",
            ],
            "--precision: expected a percentage",
        ),
        (
            &[
                "search",
                "--target",
                T,
                "--slo",
                "retention>99%",
                "--start",
                "100",
            ],
            "--slo: \"retention>99%\": needs --workload frames",
        ),
        (
            &[
                "search",
                "--target",
                T,
                "--workload",
                "frames",
                "--slo",
                "p99<20ms",
                "--start",
                "100",
            ],
            "--slo: \"p99<20ms\": --workload frames answers no requests",
        ),
        (
            &[
                "search",
                "--target",
                T,
                "--workload",
                "frames",
                "--slo",
                "retention>99%",
                "--start",
                "25",
            ],
            "--start: counts connections with --workload frames: a whole number of rooms (a multiple of --room-size 10)",
        ),
        (
            &[
                "search",
                "--target",
                T,
                "--workload",
                "frames",
                "--room-size",
                "4",
                "--slo",
                "retention>99%",
                "--start",
                "8",
                "--max",
                "10",
            ],
            "--max: counts connections with --workload frames: a whole number of rooms (a multiple of --room-size 4)",
        ),
    ];
    for (args, needle) in cases {
        let out = run(args, Duration::from_secs(20));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(needle),
            "{args:?}: expected {needle:?} in {err:?}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err:?}");
    }
}

/// A broadcast sink in rooms of 10 holding at most 40 connections (UDP: peers).
const BROADCAST_40: [&str; 6] = [
    "--mode",
    "broadcast",
    "--room-size",
    "10",
    "--max-connections",
    "40",
];

/// Issue 11 (frame mode) item 4: `blaster search --workload frames` climbs the
/// connection count at a fixed room size. The sink holds at most 40 connections
/// (`--max-connections 40` on its one core) and closes every accept beyond: a step of
/// 50 has a room whose members never connect, so retention falls to 80% and the SLO
/// breaks with a valid generator. The largest count meeting
/// `retention>99.9%` is then exactly 40: whole rooms, bisected to one room.
#[test]
fn frames_search_finds_the_sinks_connection_limit_exactly() {
    let _g = load_lock();
    let sink = Sink::start(&BROADCAST_40);
    // Every step's answer needs the generator valid (a 20 ms lag gate).
    on_a_quiet_host(
        "frames_search_finds_the_sinks_connection_limit_exactly",
        &RATE_ON_CORES_0_1,
        || frames_search(&sink, false),
    );
}

/// The same over UDP: the sink's peer table holds 40 source addresses. Each step's
/// sockets are new addresses announcing the previous step's (room, member)s, which
/// take their places (`members_moved`); before that, every step after the first found
/// its rooms full of the last step's addresses and the search answered 10.
#[test]
fn frames_search_over_udp_finds_the_same_limit() {
    let _g = load_lock();
    let sink = Sink::start_udp(&BROADCAST_40);
    // UDP loses what a stolen vCPU leaves in a socket buffer: the answer itself is a
    // timing check here.
    on_a_quiet_host(
        "frames_search_over_udp_finds_the_same_limit",
        &RATE_ON_CORES_0_1,
        || frames_search(&sink, true),
    );
}

fn frames_search(sink: &Sink, udp: bool) -> Result<(), Miss> {
    let (_dir, path) = tmp_json();
    let p = path.to_str().unwrap();
    let proto = if udp { "udp" } else { "tcp" };
    // --max-lag 20ms and a 100 ms deviation bound: the host is shared; the test is
    // about the connection limit, not a neighbour's millisecond stalls.
    let out = run(
        &[
            "search",
            "--target",
            &sink.addr,
            "--proto",
            proto,
            "--workload",
            "frames",
            "--tick",
            "20ms",
            "--room-size",
            "10",
            "--cores",
            "0",
            "--slo",
            "deviation_p99<100ms,retention>99.9%",
            "--start",
            "10",
            "--factor",
            "2",
            "--step-duration",
            "1s",
            "--max-lag",
            "20ms",
            "--json",
            p,
        ],
        Duration::from_secs(60),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let v = read_json(&path);
    assert_eq!(v["config"]["axis"], "connections", "{text}");
    assert_eq!(v["config"]["room_size"], 10);
    let steps = v["steps"].as_array().unwrap();
    // The planner's steps are exact whatever the host does (outside the quiet-host
    // gate): the climb doubles from --start 10, and bisection keeps whole rooms inside
    // the bracket of a passed and a broken count.
    let climb: Vec<u64> = steps
        .iter()
        .filter(|s| s["phase"] == "climb")
        .map(|s| s["connections"].as_u64().unwrap())
        .collect();
    assert_eq!(climb.first(), Some(&10), "{text}");
    for w in climb.windows(2) {
        assert_eq!(w[1], w[0] * 2, "climb {climb:?}: {text}");
    }
    for s in steps.iter().filter(|s| s["phase"] == "bisect") {
        assert_eq!(s["connections"].as_u64().unwrap() % 10, 0, "{s}: {text}");
    }
    assert_bisection_inside_its_bracket(steps, "connections", &text);
    // Above 40 connections the refused rooms' share is missing whatever the host does
    // (a step at 50 keeps 40/50 at best).
    for s in steps {
        let n = s["connections"].as_f64().unwrap();
        let retention = f(s, "frames.retention");
        assert!(
            n <= 40.0 || retention <= 40.0 / n + 1e-9,
            "{n}: {retention}: {text}"
        );
    }
    // The answer is exact once every step's generator kept up (a stolen vCPU fails
    // the 20 ms lag gate, and the search then stops at the generator): only that is
    // retried over TCP. Over UDP the answer is retried too.
    let invalid: Vec<_> = steps.iter().filter(|s| s["valid"] != true).collect();
    ensure(invalid.is_empty(), || {
        format!("invalid steps {invalid:?}: {text}")
    })?;
    let counts: Vec<u64> = steps
        .iter()
        .map(|s| s["connections"].as_u64().unwrap())
        .collect();
    // Each step ran its own count: up to 40 every frame arrives, above it the SLO
    // breaks. Climb 10, 20, 40, 80 (bad), then bisect in whole rooms: 60, 50.
    let outcomes_right = steps.iter().all(|s| {
        let n = s["connections"].as_f64().unwrap();
        if n <= 40.0 {
            s["outcome"] == "pass" && f(s, "frames.retention") == 1.0
        } else {
            s["outcome"] == "slo_broken"
        }
    });
    let answer_right = out.status.code() == Some(0)
        && v["stopped_by"] == "target"
        && v["max_safe_connections"] == 40
        && v["first_bad_connections"] == 50
        && counts == [10, 20, 40, 80, 60, 50]
        && outcomes_right
        && text.contains("max connections meeting the SLO: 40 (4 rooms of 10)");
    let why = || {
        format!(
            "{proto}: exit {:?}: {text}\n{}",
            out.status.code(),
            stderr(&out)
        )
    };
    if udp {
        return ensure(answer_right, why);
    }
    assert!(answer_right, "{}", why());
    Ok(())
}

/// Each bisection step of a search lies strictly between the best passed and the
/// lowest broken value of the steps before it: the planner's arithmetic, exact on any
/// host (which step passes is the host's; where the next one goes is not).
fn assert_bisection_inside_its_bracket(steps: &[serde_json::Value], axis: &str, text: &str) {
    for (i, s) in steps.iter().enumerate() {
        if s["phase"] != "bisect" {
            continue;
        }
        let before = &steps[..i];
        let good = before
            .iter()
            .filter(|s| s["outcome"] == "pass")
            .map(|s| f(s, axis))
            .fold(0.0, f64::max);
        let bad = before
            .iter()
            .filter(|s| s["outcome"] != "pass")
            .map(|s| f(s, axis))
            .fold(f64::INFINITY, f64::min);
        let x = f(s, axis);
        assert!(
            good < x && x < bad,
            "bisection step {i} at {x} outside ({good}, {bad}): {text}"
        );
    }
}
