//! Load models end to end (issue 5): closed loop against open loop on a stalling
//! target, a rate shape's per-second intended and achieved rates, Poisson arrivals.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::time::Duration;

fn run_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--quiet"];
    all.extend_from_slice(args);
    run_report(&all, Duration::from_secs(40))
}

#[test]
fn closed_loop_hides_the_stall_that_open_loop_shows() {
    let _g = load_lock();
    // The target freezes for 300 ms once a second.
    let sink = Sink::start(&["--stall", "300ms", "--every", "1s"]);
    let closed = run_json(&[
        "--target",
        &sink.addr,
        "--concurrency",
        "8",
        "--duration",
        "3s",
    ]);
    let open = run_json(&["--target", &sink.addr, "--rate", "2000", "--duration", "3s"]);
    assert_eq!(closed["mode"], "closed_loop");
    assert!(closed["dispatch_lag_ns"].is_null(), "no timetable, no lag");
    assert_eq!(
        closed["valid"], true,
        "the gate does not apply to a closed loop"
    );
    assert!(
        common::codes(&closed["diagnosis"]).contains(&"closed_loop_hides_queueing".to_string()),
        "{}",
        closed["diagnosis"]
    );
    // Open loop: requests due during each freeze queue up and count from their due
    // instant; closed loop: the 8 connections just wait, and the waits do not count.
    let closed_p99 = f(&closed, "latency_ns.p99");
    let open_p99 = f(&open, "latency_ns.p99");
    assert!(
        open_p99 > 100e6,
        "open-loop p99 {open_p99} should show the stall"
    );
    assert!(
        closed_p99 * 10.0 < open_p99,
        "closed-loop p99 {closed_p99} should be far below open-loop {open_p99}"
    );
}

#[test]
fn a_closed_loop_keeps_every_pipeline_slot_busy() {
    let _g = load_lock();
    // Each reply 20 ms late: 2 connections x 8 requests in flight complete 16 every
    // 20 ms, 800 in 1 s (one in flight per connection would complete 100).
    let sink = Sink::start(&["--delay", "20ms"]);
    let v = run_json(&[
        "--target",
        &sink.addr,
        "--concurrency",
        "2",
        "--pipeline",
        "8",
        "--duration",
        "1s",
    ]);
    let done = f(&v, "requests.completed");
    assert!((640.0..=816.0).contains(&done), "completed {done}");
    assert_eq!(f(&v, "requests.errors"), 0.0, "{}", v["requests"]);
}

#[test]
fn a_ramp_intends_and_achieves_its_rate_second_by_second() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    on_a_quiet_host(
        "a_ramp_intends_and_achieves_its_rate_second_by_second",
        &RATE_ON_CORES_0_1,
        || {
            let v = run_json(&[
                "--target",
                &sink.addr,
                "--rate",
                "ramp:1000..5000/3s",
                "--duration",
                "3s",
            ]);
            assert_eq!(v["rate_spec"], "ramp:1000..5000/3s");
            let rows = v["intervals"].as_array().unwrap();
            assert_eq!(rows.len(), 3);
            assert_eq!(f(&v, "requests.dispatched"), 9000.0);
            // Mean of a linear ramp over each second: 1667, 3000, 4333 requests/s. The
            // intended rate is the plan's; the achieved one needs the host's cores.
            for (row, want) in rows.iter().zip([1666.7, 3000.0, 4333.3]) {
                let intended = row["intended_rps"].as_f64().unwrap();
                let achieved = row["achieved_rps"].as_f64().unwrap();
                assert!((intended - want).abs() < want * 0.01, "{row}");
                if (achieved - intended).abs() >= intended * 0.05 {
                    let lag = &row["dispatch_lag_p99_ns"];
                    let why = format!(
                        "second {}: intended {intended}/s, achieved {achieved}/s, lag p99 {lag} ns",
                        row["second"]
                    );
                    let second = Duration::from_secs(1);
                    return Err(Miss::in_run(&v, why).sized(achieved, intended, 0.05, second));
                }
            }
            Ok(())
        },
    );
}

#[test]
fn poisson_arrivals_keep_the_mean_rate() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let v = run_json(&[
        "--target",
        &sink.addr,
        "--rate",
        "5000",
        "--arrivals",
        "poisson",
        "--duration",
        "3s",
    ]);
    assert_eq!(v["arrivals"], "poisson");
    // 15,000 expected; a Poisson count has sd ~122, so 3% is over 3 sd.
    let n = f(&v, "requests.dispatched");
    assert!((n - 15_000.0).abs() < 450.0, "dispatched {n}");
    assert_eq!(f(&v, "requests.completed") + f(&v, "requests.errors"), n);
}
