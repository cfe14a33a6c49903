//! Kernel receive timestamps end to end, against the built-in sink on loopback: paced
//! requests at a coarse `--resolution` are reaped once per window, yet each response
//! is timed by when the kernel received it, and the worker wakes once per window, not
//! once per response. Where a response must be followed at once (a closed loop with
//! few requests in flight), the worker still wakes for each; a closed loop keeping
//! many in flight wakes once per batch of them.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]

mod common;

use common::{Sink, f, run_report};
use std::time::Duration;

/// The sink's service delay: every response arrives this long after its request.
const DELAY_MS: f64 = 2.0;

/// `blaster run` of `workload` against `sink` for 2 s in 20 ms windows: the report.
/// One run at a time: these check timing, and a closed loop's run takes a whole core.
fn in_20ms_windows(sink: &Sink, workload: &[&str]) -> serde_json::Value {
    let _g = common::load_lock();
    let mut args = vec!["--target", &sink.addr, "--duration", "2s"];
    args.extend_from_slice(&["--resolution", "20ms", "--max-lag", "100ms"]);
    args.extend_from_slice(workload);
    run_report(&args, Duration::from_secs(30))
}

/// The report claims that every receive was timed by the kernel.
fn assert_stamped(v: &serde_json::Value, stamped: bool) {
    let features = v["io_uring_features"].to_string();
    assert_eq!(
        features.contains("receive_timestamps"),
        stamped,
        "{features}"
    );
}

#[test]
fn responses_are_timed_when_the_kernel_received_them_and_reaped_once_per_window() {
    let sink = Sink::start(&["--delay", "2ms"]);
    // 500 requests/s in 20 ms windows: ten requests go out per wake-up, and their
    // responses (2 ms later) wait up to 18 ms in the ring for the next one.
    let v = in_20ms_windows(&sink, &["--rate", "500", "--connections", "32"]);
    assert_stamped(&v, true);
    let completed = f(&v, "requests.completed");
    assert_eq!(completed, 1000.0, "{v}");
    // Timed when reaped, the service time would be the delay plus most of a window
    // (about 10 ms at the median); timed by the kernel, it is the delay.
    let service_p50 = f(&v, "service_time_ns.p50") / 1e6;
    let service_p99 = f(&v, "service_time_ns.p99") / 1e6;
    assert!(
        (DELAY_MS..DELAY_MS + 1.5).contains(&service_p50) && service_p99 < DELAY_MS + 4.0,
        "service time p50 {service_p50} ms, p99 {service_p99} ms for a {DELAY_MS} ms delay"
    );
    // One wake-up per window (100 in 2 s) plus the scans and interval boundaries, not
    // one per response (1,000).
    let wakeups = f(&v["workers"][0], "wakeups");
    assert!(
        wakeups > 50.0 && wakeups < completed / 3.0,
        "{wakeups} wake-ups for {completed} responses"
    );
}

#[test]
fn a_closed_loop_still_wakes_for_every_response() {
    let sink = Sink::start(&[]);
    let v = in_20ms_windows(&sink, &["--concurrency", "1"]);
    assert_stamped(&v, false);
    // Each response sends the next request at once: thousands a second, not a
    // window's worth.
    let completed = f(&v, "requests.completed");
    assert!(
        completed > 1000.0,
        "{completed} requests in 2 s closed loop (a window's worth each 20 ms: 100)"
    );
}

#[test]
fn a_closed_loop_with_many_streams_in_flight_sleeps_through_completions() {
    // 8 connections x 16 streams: 128 requests in flight, each response sending the
    // next. The loop waits for a batch of completions (those 100 us bring at the rate
    // they arrive, up to 8) instead of waking for each, and the responses are timed by
    // the kernel meanwhile. Against nginx (docs/figures.md, issue 35's batching),
    // waking for each reap took 0.30-0.54 wake-ups a response; batched, 0.03-0.10.
    let sink = Sink::start(&["--http2"]);
    let many = [
        "--http2",
        "--concurrency",
        "8",
        "--streams-per-connection",
        "16",
    ];
    let v = in_20ms_windows(&sink, &many);
    assert_stamped(&v, true);
    let completed = f(&v, "requests.completed");
    let wakeups = f(&v["workers"][0], "wakeups");
    assert!(
        completed > 10_000.0 && wakeups < completed / 5.0,
        "{wakeups} wake-ups for {completed} responses"
    );
    // 8 in flight: a wake-up per response, timed when reaped.
    let few = [
        "--http2",
        "--concurrency",
        "8",
        "--streams-per-connection",
        "1",
    ];
    assert_stamped(&in_20ms_windows(&sink, &few), false);
}

#[test]
fn frames_are_timed_when_the_kernel_received_them_and_reaped_once_per_window() {
    let sink = Sink::start(&["--delay", "2ms"]);
    // Every frame of a 20 ms tick goes out in one wake-up (a window of up to a tick)
    // and its echo arrives 2 ms later, some 10 ms before the next wake-up reaps it.
    let frames = [
        "--workload",
        "frames",
        "--connections",
        "200",
        "--room-size",
        "1",
        "--echo-to-sender",
        "--tick",
        "20ms",
    ];
    let v = in_20ms_windows(&sink, &frames);
    assert_stamped(&v, true);
    let received = f(&v, "frames.received");
    assert_eq!(received, f(&v, "frames.expected"), "{v}");
    // Each frame's arrival deviation is its send's dispatch lag plus the echo's 2 ms
    // (and the sink's turn through 200 echoes): the two distributions lie 2-3 ms
    // apart. Timed when reaped, about 10 ms apart.
    let shift = (f(&v, "frames.deviation_ns.p50") - f(&v, "dispatch_lag_ns.p50")) / 1e6;
    assert!(
        (2.0..6.0).contains(&shift),
        "arrival deviation p50 less dispatch lag p50: {shift} ms for a 2 ms echo"
    );
    // About one wake-up per tick (100), not one per burst of echoes reaped (seen:
    // 2,812 for 20,000 frames).
    let wakeups = f(&v["workers"][0], "wakeups");
    assert!(
        wakeups < received / 20.0,
        "{wakeups} wake-ups for {received} frames received"
    );
}

#[test]
fn pipelined_responses_are_not_timed_by_a_shared_stamp() {
    // Responses read together in one receive would all carry the newest segment's
    // stamp: with more than one request in flight per connection, every response
    // wakes the loop and is timed when reaped, as before.
    let sink = Sink::start(&["--delay", "2ms"]);
    let pipelined = ["--rate", "500", "--connections", "4", "--pipeline", "4"];
    let v = in_20ms_windows(&sink, &pipelined);
    assert_stamped(&v, false);
    let completed = f(&v, "requests.completed");
    let wakeups = f(&v["workers"][0], "wakeups");
    assert!(
        wakeups > completed / 10.0,
        "{wakeups} wake-ups for {completed} pipelined responses"
    );
}

#[test]
fn frames_from_several_members_wake_the_loop_as_they_arrive() {
    // Rooms of 10 over a broadcast sink: each connection receives nine members'
    // frames a tick, which one receive could read together under one stamp; the loop
    // wakes for its receives instead of sleeping through a window (rooms of more than
    // one never batch, and a receive of two frames would stop the batching).
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "10"]);
    let mut args = common::frames_args(&sink.addr, "2s");
    args.extend_from_slice(&["--resolution", "20ms", "--max-lag", "100ms"]);
    let v = run_report(&args, Duration::from_secs(30));
    let received = f(&v, "frames.received");
    assert_eq!(received, f(&v, "frames.expected"), "{v}");
    // Seen: 1,208 wake-ups alone and 471 under CI's parallel load; sleeping through
    // its windows the loop woke 178-199 times (one per 20 ms window and its sends).
    let wakeups = f(&v["workers"][0], "wakeups");
    assert!(
        wakeups > 300.0,
        "{wakeups} wake-ups for {received} frames received in 100 ticks"
    );
}
