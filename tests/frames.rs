//! `--workload frames` end to end against `blaster sink --mode broadcast` (issue 14):
//! every planned frame accounted at every receiver, over TCP and UDP, a stalling
//! server seen in the per-interval figures, and the coordinated-omission comparison.
//! Loopback only; each run is bounded.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::time::Duration;

/// 200 connections in rooms of 10, a frame every 20 ms for 5 s (the room size and
/// tick are `frames_args_with`'s).
const CONNS: u64 = 200;
const ROOM: u64 = 10;
const TICK_MS: u64 = 20;
const SECS: u64 = 5;
/// Frames planned: every connection, every tick.
const PLANNED: u64 = CONNS * SECS * 1000 / TICK_MS;
/// Frames the receivers expect: each frame at the 9 other members of its room, less
/// frame 0 of each member at the members that joined after it (docs/frames.md): 45
/// per room of 10.
const EXPECTED: u64 = PLANNED * (ROOM - 1) - (CONNS / ROOM) * 45;

fn frames_run(sink: &Sink, extra: &[&str]) -> serde_json::Value {
    let (conns, dur) = (CONNS.to_string(), format!("{SECS}s"));
    let mut a = frames_args_with(&sink.addr, &conns, &dur);
    a.extend_from_slice(extra);
    run_report(&a, Duration::from_secs(60))
}

/// Exact figures that need the generator (core 0) and the sink (core 1) on time, as
/// (figure, got, want): all equal, or a timing miss. A valid generator is not enough
/// (the lag gate does not see the sink's core): a CI run under 16% steal had a valid
/// ramp receive 132,448 of 132,450 frames, two arriving after the 30 ms drain.
fn timely(v: &serde_json::Value, exact: &[(&str, u64, u64)]) -> Result<(), Miss> {
    let wrong: Vec<_> = exact.iter().filter(|(_, got, want)| got != want).collect();
    ensure_run(v, wrong.is_empty(), || {
        format!(
            "(figure, got, want): {wrong:?}; valid {}: {}",
            v["valid"], v["frames"]
        )
    })
}

/// The frames lost in every interval but the last: gaps the receive window moved past
/// (128 newer frames from the same source at that receiver) before the run's end. The
/// rest of the loss, what had not arrived by the drain, is counted in the last one.
fn lost_before_the_end(v: &serde_json::Value) -> u64 {
    let iv = v["intervals"].as_array().unwrap();
    let all_but_last = &iv[..iv.len().saturating_sub(1)];
    all_but_last
        .iter()
        .map(|i| f(&i["frames"], "lost") as u64)
        .sum()
}

/// The accounting of a TCP frames run, asserted on every attempt (no busy host excuses
/// it, docs/testing.md): each expected frame received (one deviation sample each) or
/// lost, and nothing lost before the run's end but what is `explained` (the frames of
/// senders whose connection was down, `not_sent`; the aggregating sink's skipped
/// ticks). Over TCP a late host delays frames, never drops them: the sink's send queue
/// (16 KiB per receiver) holds far more than a stall of these runs piles up, so any
/// other gap in the middle of the run is the code's.
fn assert_tcp_accounting(v: &serde_json::Value, explained: u64) {
    let fr = &v["frames"];
    let (expected, received) = (f(fr, "expected") as u64, f(fr, "received") as u64);
    assert_eq!(received + f(fr, "lost") as u64, expected, "{fr}");
    assert_eq!(
        f(fr, "deviation_ns.count") as u64,
        received,
        "one sample each: {fr}"
    );
    let before_end = lost_before_the_end(v);
    assert!(
        before_end <= explained,
        "{before_end} frames lost before the run's last interval, {explained} explained: \
         {fr}; intervals {:?}",
        frame_intervals(v)
    );
}

/// Frames still on their way at the drain (counted lost in the last interval): a
/// timing miss whose size is the share of the run's `window` they amount to, so only
/// a disturbance that could have held that many back excuses it (`common::excuse`).
fn nothing_lost_at_the_end(v: &serde_json::Value, window: Duration) -> Result<(), Miss> {
    let fr = &v["frames"];
    let (lost, expected) = (f(fr, "lost"), f(fr, "expected"));
    if lost == 0.0 {
        return Ok(());
    }
    let why = format!("{lost} frames not received by the end of the drain: {fr}");
    Err(Miss::in_run(v, why).sized(expected - lost, expected, 0.0, window))
}

/// Issue 34 item 7: a frame lost in the middle of a TCP run fails the test on every
/// attempt, whatever the host did; one lost at the end is a timing miss as large as
/// the share of the run it amounts to, for `common::excuse` to weigh.
#[test]
fn a_loss_before_the_end_is_never_a_timing_miss() {
    let run = |lost_per_interval: [u64; 3]| {
        let lost: u64 = lost_per_interval.iter().sum();
        let iv: Vec<_> = lost_per_interval
            .iter()
            .map(|l| serde_json::json!({"frames": {"lost": l, "late": 0, "deviation_p99_ns": 0}}))
            .collect();
        serde_json::json!({
            "frames": {"expected": 1000, "received": 1000 - lost, "lost": lost,
                       "deviation_ns": {"count": 1000 - lost}},
            "intervals": iv,
        })
    };
    let mid = run([0, 9, 0]);
    let caught = std::panic::catch_unwind(|| assert_tcp_accounting(&mid, 0));
    assert!(caught.is_err(), "a loss in the middle of the run passed");
    // Explained: one frame its sender never sent, lost at its 9 room mates.
    assert_tcp_accounting(&mid, 9);
    // At the end: the accounting holds, and the miss is 1% of the run.
    let end = run([0, 0, 10]);
    assert_tcp_accounting(&end, 0);
    let miss = nothing_lost_at_the_end(&end, Duration::from_secs(5)).unwrap_err();
    let size = miss.size.expect("a loss at the end states its size");
    assert!((size.off - 0.01).abs() < 1e-9, "{size:?}");
    assert!((size.unexplained_ns() - 50e6).abs() < 1.0, "{size:?}");
    assert!(nothing_lost_at_the_end(&run([0, 0, 0]), Duration::from_secs(5)).is_ok());
}

#[test]
fn tcp_broadcast_delivers_every_planned_frame_to_every_member() {
    let _l = load_lock();
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "10"]);
    // Every planned frame sent and every copy in before the 30 ms drain needs the
    // generator (core 0) and the sink (core 1) on time: a CI run under 27-37% steal
    // sent 14,946 of 14,950 planned frames in a test like this one.
    on_a_quiet_host(
        "tcp_broadcast_delivers_every_planned_frame_to_every_member",
        &RATE_ON_CORES_0_1,
        || tcp_broadcast_run(&sink),
    );
}

fn tcp_broadcast_run(sink: &Sink) -> Result<(), Miss> {
    let v = frames_run(sink, &[]);
    let fr = &v["frames"];
    assert_tcp_accounting(&v, f(fr, "not_sent") as u64 * (ROOM - 1));
    assert_eq!(v["mode"], "frames");
    assert_eq!(f(fr, "planned") as u64, PLANNED, "{fr}");
    // Each frame is expected by the other 9 members of its room (from when they joined).
    assert_eq!(f(fr, "expected") as u64, EXPECTED);
    assert_eq!(f(fr, "duplicates") + f(fr, "foreign") + f(fr, "stale"), 0.0);
    let iv = v["intervals"].as_array().unwrap();
    assert!(iv.len() >= SECS as usize, "{}", iv.len());
    // The intervals' loss adds up to the run's (none here: the frame 0 a member never
    // expected must not show as a gap when the window moves past it, 2.56 s in).
    let lost: Vec<f64> = iv.iter().map(|i| f(&i["frames"], "lost")).collect();
    assert_eq!(lost.iter().sum::<f64>(), f(fr, "lost"), "{lost:?}");
    // The per-interval series carries the frame figures: they add up to what was sent.
    let up: f64 = iv
        .iter()
        .map(|i| f(&i["frames"], "up_fps") * f(i, "duration_s"))
        .sum();
    assert!((up - f(fr, "sent")).abs() < 1.0, "{up}");
    nothing_lost_at_the_end(&v, Duration::from_secs(SECS))?;
    // Exact, on a host that kept up: (figure, got, want). A room mate's frame 0 at
    // a later member needs the sink to read the members' first frames in the order
    // they were sent, which a sink running late does not (a run with another process
    // on its core: 6 relayed before the join).
    let exact = [
        ("before_join", f(fr, "before_join") as u64, 0),
        ("sent", f(fr, "sent") as u64, PLANNED),
        ("retention < 1", u64::from(f(fr, "retention") < 1.0), 0),
        (
            "retention_min < 1",
            u64::from(f(fr, "retention_min") < 1.0),
            0,
        ),
        // One fan-out sample per planned frame that has a receiver (all but each
        // room's first member's frame 0): the instant its last receiver got it.
        (
            "fanout_ns.count",
            f(fr, "fanout_ns.count") as u64,
            PLANNED - CONNS / ROOM,
        ),
        ("fanout_incomplete", f(fr, "fanout_incomplete") as u64, 0),
        (
            "deviation_ns.count",
            f(fr, "deviation_ns.count") as u64,
            EXPECTED,
        ),
        // Jitter: consecutive pairs per (receiver, source): 249 per pair, 248 for the
        // 45 pairs per room that start at frame 1.
        (
            "jitter_ns.count",
            f(fr, "jitter_ns.count") as u64,
            CONNS * (ROOM - 1) * (SECS * 1000 / TICK_MS - 1) - (CONNS / ROOM) * 45,
        ),
        (
            "up_whole_run",
            f(fr, "residency.up_whole_run") as u64,
            CONNS,
        ),
        ("disconnects", f(fr, "residency.disconnects") as u64, 0),
        // The dispatch-lag gate applies to frames: the report has the lag of every frame.
        (
            "dispatch_lag_ns.count",
            f(&v, "dispatch_lag_ns.count") as u64,
            PLANNED,
        ),
    ];
    timely(&v, &exact)
}

/// A relay that learns its members on connect, as many game servers do: it accepts
/// `members` connections (one room), then relays every length-prefixed frame from one
/// to all the others as it comes. Threads and blocking sockets, nothing of blaster's.
fn connect_relay(members: usize) -> String {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let conns: Vec<TcpStream> = (0..members).map(|_| l.accept().unwrap().0).collect();
        let out: Vec<TcpStream> = conns.iter().map(|c| c.try_clone().unwrap()).collect();
        let out = Arc::new(Mutex::new(out));
        for (i, mut c) in conns.into_iter().enumerate() {
            let out = Arc::clone(&out);
            std::thread::spawn(move || {
                let mut len = [0u8; 4];
                while c.read_exact(&mut len).is_ok() {
                    let mut frame = len.to_vec();
                    frame.resize(4 + u32::from_be_bytes(len) as usize, 0);
                    if c.read_exact(&mut frame[4..]).is_err() {
                        break;
                    }
                    for (j, o) in out.lock().unwrap().iter_mut().enumerate() {
                        if j != i {
                            let _ = o.write_all(&frame);
                        }
                    }
                }
            });
        }
    });
    addr
}

/// A server that knows every member from its connect relays frame 0 of the lower
/// members to the later ones, sent before those joined by their first frame: each is
/// counted `before_join`, exactly R(R-1)/2 per room, and none as foreign.
#[test]
fn frames_from_before_a_receiver_joined_are_counted_apart_from_foreign() {
    let _l = load_lock();
    let addr = connect_relay(10);
    let v = run_report(
        &frames_args_with(&addr, "10", "1s"),
        Duration::from_secs(60),
    );
    let fr = &v["frames"];
    assert_eq!(f(fr, "before_join"), 45.0, "{fr}");
    assert_eq!(
        f(fr, "foreign") + f(fr, "duplicates") + f(fr, "stale"),
        0.0,
        "{fr}"
    );
    assert_eq!(f(fr, "expected"), 50.0 * 10.0 * 9.0 - 45.0, "{fr}");
}

#[test]
fn udp_broadcast_with_drops_counts_the_loss_per_planned_frame() {
    let _l = load_lock();
    // Loss beyond the sink's drops is a socket buffer that overflowed while a stolen
    // vCPU did not read it: the loss bound needs a quiet host.
    on_a_quiet_host(
        "udp_broadcast_with_drops_counts_the_loss_per_planned_frame",
        &RATE_ON_CORES_0_1,
        || {
            let sink =
                Sink::start_udp(&["--mode", "broadcast", "--room-size", "10", "--drop", "0.05"]);
            let v = frames_run(&sink, &["--proto", "udp"]);
            let fr = &v["frames"];
            let expected = f(fr, "expected");
            assert_eq!(expected as u64, EXPECTED);
            let loss = f(fr, "lost") / expected;
            let retention = f(fr, "retention");
            assert!((retention + loss - 1.0).abs() < 1e-9, "{retention} {loss}");
            assert!(f(fr, "fanout_incomplete") > 0.0);
            assert_eq!(f(fr, "duplicates"), 0.0);
            // A loss shows in the second it happened (issue 36): a gap counts lost once
            // it is the budget (20 ms) plus the reorder allowance (200 ms) old, not
            // once 128 newer frames came (2.56 s at 50 frames/s, which showed 100%
            // retention for two seconds). Every interval but the last (which also
            // holds the end's) loses about 5% of its frames; the first about 78% of
            // that (its gaps after 780 ms are due in the second); the sum is the total.
            let lost: Vec<f64> = v["intervals"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| f(&i["frames"], "lost"))
                .collect();
            assert_eq!(lost.len() as u64, SECS, "{lost:?}");
            assert_eq!(lost.iter().sum::<f64>(), f(fr, "lost"), "{lost:?}");
            let per_second = expected / SECS as f64;
            for (i, l) in lost[..lost.len() - 1].iter().enumerate() {
                assert!(*l > 0.02 * per_second, "interval {i}: {lost:?}");
            }
            // The sink drops whole datagrams with p = 0.05. Bound by the widest binomial
            // spread: drops correlated per sent frame (each dropped uplink datagram is
            // lost at all 9 receivers), sigma = sqrt(p (1 - p) / planned) = 0.00097;
            // 5 sigma.
            let sigma = (0.05f64 * 0.95 / PLANNED as f64).sqrt();
            ensure_run(&v, (loss - 0.05).abs() < 5.0 * sigma, || {
                format!("loss {loss}, sigma {sigma}: {fr}")
            })
        },
    );
}

/// A UDP broadcast sink left running serves run after run: each run's sockets are new
/// source addresses announcing the same (room, member) as the last run's, and they
/// take those members' places (the last run's addresses would hold the rooms full
/// for 10 s of silence otherwise, and the second run would receive nothing).
#[test]
fn a_udp_broadcast_sink_serves_one_run_after_another() {
    let _l = load_lock();
    let (_dir, json) = tmp_json();
    let sink = Sink::start_udp(&[
        "--mode",
        "broadcast",
        "--room-size",
        "10",
        "--json",
        json.to_str().unwrap(),
    ]);
    for run in 0..2 {
        let mut args = frames_args(&sink.addr, "2s");
        args.extend(["--proto", "udp", "--max-lag", "20ms"]);
        let v = run_report(&args, Duration::from_secs(30));
        let fr = &v["frames"];
        // Loopback UDP keeps nearly every frame; the fault this catches keeps none.
        assert!(f(fr, "retention") > 0.99, "run {run}: {fr}");
    }
    sink.stop();
    let bc = read_json(&json)["broadcast"].clone();
    // Every member of the second run moved from the first run's address.
    assert_eq!(bc["members_moved"], 100, "{bc}");
    assert_eq!(bc["joins"], 200, "{bc}");
    assert_eq!(bc["joins_refused"], 0, "{bc}");
}

/// Intervals (whole seconds of the schedule) and their frame figures.
fn frame_intervals(v: &serde_json::Value) -> Vec<(u64, u64, u64)> {
    v["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                f(&i["frames"], "late") as u64,
                f(&i["frames"], "deviation_p99_ns") as u64,
                f(&i["frames"], "lost") as u64,
            )
        })
        .collect()
}

#[test]
fn a_stalling_server_shows_as_deviation_and_late_frames_in_the_affected_intervals() {
    let _l = load_lock();
    // A quiet second's deviation stays under the 20 ms budget only if the generator
    // and the sink had their cores: a vCPU stolen for 20 ms makes late frames too.
    on_a_quiet_host(
        "a_stalling_server_shows_as_deviation_and_late_frames_in_the_affected_intervals",
        &RATE_ON_CORES_0_1,
        || {
            // A fresh sink each attempt: its stalls count from its first frame, at 1.1 s
            // and 3.3 s of the run, and the next (5.5 s) after its end; a stall holding
            // the last frames past the run's 30 ms drain would count them lost.
            let sink = Sink::start(&[
                "--mode",
                "broadcast",
                "--room-size",
                "10",
                "--stall",
                "200ms",
                "--every",
                "2200ms",
            ]);
            let v = frames_run(&sink, &[]);
            let fr = &v["frames"];
            let iv = frame_intervals(&v);
            // TCP keeps every frame: late, not lost; unless a sink that is late on
            // top of its stalls holds the last ones past the run's 30 ms drain (a CI
            // run under 36% steal), which only the run's end can show.
            assert_tcp_accounting(&v, f(fr, "not_sent") as u64 * (ROOM - 1));
            nothing_lost_at_the_end(&v, Duration::from_secs(SECS))?;
            // Over 5 s, the two 200 ms stalls fall in seconds 1 and 3 (up to four
            // seconds, should they cross boundaries). Those seconds have late frames and a
            // deviation p99 of the stall's order; the others none and below the 20 ms
            // budget.
            let stalled: Vec<_> = iv.iter().filter(|i| i.0 > 0).collect();
            let quiet: Vec<_> = iv.iter().filter(|i| i.0 == 0).collect();
            ensure_run(
                &v,
                (2..=4).contains(&stalled.len())
                    && !quiet.is_empty()
                    && stalled.iter().any(|i| i.1 >= 100_000_000)
                    && quiet.iter().all(|i| i.1 < 20_000_000),
                || format!("(late, deviation p99, lost) per second: {iv:?}"),
            )?;
            // A stall holds back ~ (200 ms - budget) of every frame stream: at least 2
            // stalls of at least 100 ms each of the down rate were late.
            let down = f(fr, "down_fps");
            ensure_run(&v, f(fr, "late") >= 2.0 * 0.1 * down, || format!("{fr}"))
        },
    );
}

/// The coordinated-omission variant: the same stalling server measured by a closed
/// loop of requests (what wrk and most load tools do: the next request waits for the
/// previous response) looks healthy at p99, because during a stall each connection
/// records one slow sample and then nothing; the frames, every one planned on the
/// timetable and checked, show the stall in the deviation p99 and the late count.
#[test]
fn request_latency_hides_the_stall_that_frame_metrics_show() {
    let _l = load_lock();
    let stall = ["--room-size", "10", "--stall", "200ms", "--every", "2s"];
    let sink = Sink::start(&[&["--mode", "broadcast"][..], &stall[..]].concat());
    let frames = frames_run(&sink, &[]);
    drop(sink);
    let echo = Sink::start(&[&["--mode", "echo"][..], &stall[2..]].concat());
    let closed = run_report(
        &[
            "--target",
            &echo.addr,
            "--concurrency",
            "200",
            "--duration",
            "5s",
            "--quiet",
        ],
        Duration::from_secs(60),
    );
    let dev_p99 = f(&frames["frames"], "deviation_ns.p99");
    let late_share = f(&frames["frames"], "late") / f(&frames["frames"], "received");
    let closed_p99 = f(&closed, "latency_ns.p99");
    assert!(
        dev_p99 >= 1e8 && late_share > 0.02,
        "frames must show the stall: deviation p99 {dev_p99}, late share {late_share}"
    );
    assert!(
        closed_p99 * 5.0 < dev_p99,
        "closed-loop p99 {closed_p99} should look far better than the frames' {dev_p99}"
    );
}

/// `--aggregate`: bytes of each downlink frame, the least a room of 10 needs.
const DOWN: &str = "272";
/// Server ticks in the run (the sink ticks at the client's 20 ms).
const TICKS: u64 = SECS * 1000 / TICK_MS;

fn aggregate_sink(udp: bool, extra: &[&str]) -> Sink {
    let a = [
        &[
            "--mode",
            "broadcast",
            "--room-size",
            "10",
            "--aggregate",
            "--down-size",
            DOWN,
            "--tick",
            "20ms",
        ][..],
        extra,
    ]
    .concat();
    if udp {
        Sink::start_udp(&a)
    } else {
        Sink::start(&a)
    }
}

/// The aggregating sink: every member gets one downlink frame per server tick, each
/// one counted against the plan (docs/frames.md, "Aggregated downlink frames").
#[test]
fn tcp_aggregate_delivers_one_downlink_frame_per_member_per_server_tick() {
    let _l = load_lock();
    // The deviation, late and carry checks need the sink's ticks on time, which a
    // stolen vCPU (core 1) breaks with the generator still valid (a CI run: deviation
    // p50 over 2 ms): they are timing checks, retried on a quiet host.
    on_a_quiet_host(
        "tcp_aggregate_delivers_one_downlink_frame_per_member_per_server_tick",
        &RATE_ON_CORES_0_1,
        tcp_aggregate_run,
    );
}

fn tcp_aggregate_run() -> Result<(), Miss> {
    let (_dir, json) = tmp_json();
    let sink = aggregate_sink(false, &["--json", json.to_str().unwrap()]);
    let v = frames_run(&sink, &["--aggregate", "--down-size", DOWN]);
    sink.stop();
    let bc = read_json(&json)["broadcast"].clone();
    let fr = &v["frames"];
    assert_eq!(f(fr, "aggregate.down_bytes") as u64, 272);
    // Every receiver expects the server ticks from one tick after its first frame
    // (and after the two ticks that place the server's ticks on the timetable) to
    // the last before the end: between TICKS - 4 and TICKS each.
    let expected = f(fr, "expected") as u64;
    assert!(
        (CONNS * (TICKS - 4)..=CONNS * TICKS).contains(&expected),
        "{expected}: {fr}"
    );
    let received = f(fr, "received") as u64;
    assert_eq!(f(fr, "duplicates") + f(fr, "foreign") + f(fr, "stale"), 0.0);
    // One deviation sample per downlink frame received.
    assert_eq!(f(fr, "deviation_ns.count") as u64, received);
    // The ticks before the timetable is placed are received outside it.
    assert!(f(fr, "aggregate.outside") > 0.0, "{fr}");
    let iv = v["intervals"].as_array().unwrap();
    let down: f64 = iv
        .iter()
        .map(|i| f(&i["frames"], "down_fps") * f(i, "duration_s"))
        .sum();
    assert!((down - received as f64).abs() < 1.0, "{down}");
    // TCP loses nothing: every planned downlink frame arrived, once, but those of the
    // ticks the sink skipped (it was late) and those still on their way at the end.
    assert_tcp_accounting(&v, f(&bc, "ticks_skipped") as u64 * CONNS);
    nothing_lost_at_the_end(&v, Duration::from_secs(SECS))?;
    // Every planned frame sent; one jitter sample per consecutive pair of ticks at a
    // receiver.
    timely(
        &v,
        &[
            ("sent", f(fr, "sent") as u64, PLANNED),
            (
                "retention_min < 1",
                u64::from(f(fr, "retention_min") < 1.0),
                0,
            ),
            (
                "jitter_ns.count",
                f(fr, "jitter_ns.count") as u64,
                expected - CONNS,
            ),
        ],
    )?;
    if v["valid"] != true {
        // A busy shared host: the generator's own lag decides which ticks a late
        // member's first frame joined, and how late everything arrived.
        eprintln!("generator invalid on this host: fan-out count and deviation not checked");
        return Ok(());
    }
    // Against the server tick's expected arrival (its earliest arrival phase), an
    // idle loopback sink's downlink frames deviate by well under a tick.
    let on_time = f(fr, "deviation_ns.p50") < 2e6 && f(fr, "late") < 0.001 * expected as f64;
    ensure(on_time, || format!("deviation or late: {fr}"))?;
    // Fan-out through the aggregates: every frame from 1 on of every connection is
    // expected at its 9 room mates (frame 0's receivers are whoever the server knew at
    // its tick, so it has no fan-out); each completed one is one fan-out sample. The
    // downlink frame holds exactly a room's 10 frames; a member whose frames straddle
    // the sink's tick boundary sometimes lands two in one tick, and the sink carries
    // the 11th to the next tick (`aggregate_carried`) instead of dropping it: every
    // fan-out completes. (Before carrying, the sink dropped them, 39-900 per run here,
    // and exactly that many fan-outs were incomplete.)
    let complete = f(fr, "fanout_complete") as u64;
    let incomplete = f(fr, "fanout_incomplete") as u64;
    assert_eq!(f(fr, "fanout_expected") as u64, PLANNED - CONNS);
    assert_eq!(complete + incomplete, PLANNED - CONNS, "{fr}");
    assert_eq!(f(fr, "fanout_ns.count") as u64, complete, "{fr}");
    ensure(
        f(&bc, "aggregate_overflow") == 0.0 && incomplete == 0,
        || format!("{incomplete} fan-outs incomplete: {bc}: {fr}"),
    )
}

#[test]
fn udp_aggregate_counts_dropped_uplink_frames_in_the_fan_out_not_the_downlink() {
    let _l = load_lock();
    // The downlink's retention and the fan-out share need the aggregating sink's
    // ticks on time (a tick it skips is lost at every member) and the generator valid.
    on_a_quiet_host(
        "udp_aggregate_counts_dropped_uplink_frames_in_the_fan_out_not_the_downlink",
        &RATE_ON_CORES_0_1,
        || {
            let sink = aggregate_sink(true, &["--drop", "0.05"]);
            let v = frames_run(
                &sink,
                &[
                    "--proto",
                    "udp",
                    "--aggregate",
                    "--down-size",
                    DOWN,
                    "--max-lag",
                    "20ms",
                ],
            );
            let fr = &v["frames"];
            let expected = f(fr, "expected") as u64;
            assert!(
                (CONNS * (TICKS - 4)..=CONNS * TICKS).contains(&expected),
                "{expected}: {fr}"
            );
            assert_eq!(f(fr, "received") + f(fr, "lost"), expected as f64);
            // The sink drops uplink datagrams; its downlink frames still come every tick.
            ensure_run(&v, f(fr, "retention") > 0.99, || format!("{fr}"))?;
            generator_kept_up(&v)?;
            // A dropped uplink frame is missing at all 9 room mates: its fan-out never
            // completes. Complete share = 1 - p, within 5 binomial sigma.
            let share = f(fr, "fanout_ns.count") / f(fr, "fanout_expected");
            let sigma = (0.05f64 * 0.95 / (PLANNED - CONNS) as f64).sqrt();
            ensure_run(&v, (share - 0.95).abs() < 5.0 * sigma, || {
                format!("complete {share}, sigma {sigma}: {fr}")
            })
        },
    );
}

/// A PCU ramp: 100 connections in rooms of 10 joining at 50/s, 20 ms tick, 4 s, plus
/// `extra`; the run's JSON.
fn ramp_run(sink: &Sink, extra: &[&str]) -> serde_json::Value {
    let mut args = frames_args(&sink.addr, "4s");
    args.extend(["--connect-rate", "50"]);
    args.extend_from_slice(extra);
    run_report(&args, Duration::from_secs(60))
}

/// A PCU ramp against an aggregating server: 100 connections join at 50/s (the last
/// at 1.98 s of 4 s). Every receiver expects the downlink ticks from its own join, and
/// every frame after a member's first reaches all room mates that had joined: nothing
/// is lost, and in a valid run every fan-out completes.
#[test]
fn a_connect_rate_ramp_against_an_aggregating_server_loses_nothing() {
    let _l = load_lock();
    on_a_quiet_host(
        "a_connect_rate_ramp_against_an_aggregating_server_loses_nothing",
        &RATE_ON_CORES_0_1,
        aggregate_ramp_run,
    );
}

fn aggregate_ramp_run() -> Result<(), Miss> {
    let (_dir, json) = tmp_json();
    let sink = aggregate_sink(false, &["--json", json.to_str().unwrap()]);
    let v = ramp_run(
        &sink,
        &["--aggregate", "--down-size", DOWN, "--max-lag", "20ms"],
    );
    sink.stop();
    let fr = &v["frames"];
    // Planned: connection j's first frame is at tick j + 1 (it opens at j x 20 ms).
    let planned: u64 = (0..100u64).map(|j| 199 - j).sum();
    assert_eq!(f(fr, "planned") as u64, planned, "{fr}");
    assert_eq!(f(fr, "duplicates") + f(fr, "foreign") + f(fr, "stale"), 0.0);
    // Every downlink frame of the 100 members arrived, but those of the ticks the
    // sink skipped and those still on their way at the end: on every attempt.
    let skipped = f(&read_json(&json), "broadcast.ticks_skipped") as u64;
    assert_tcp_accounting(&v, skipped * 100);
    generator_kept_up(&v)?;
    // Receivers joined over 2 s of 4: each expects about 200 - (its join tick) ticks.
    let expected = f(fr, "expected") as u64;
    assert!((9_000..=15_000).contains(&expected), "{expected}: {fr}");
    nothing_lost_at_the_end(&v, Duration::from_secs(4))?;
    timely(
        &v,
        &[
            ("sent", f(fr, "sent") as u64, planned),
            (
                "retention_min < 1",
                u64::from(f(fr, "retention_min") < 1.0),
                0,
            ),
        ],
    )?;
    // Fan-out: every frame but each member's first, and but each room's first
    // member's second (tick 2, just before its second member's first frame at tick 2
    // and a later phase: it has no receiver yet).
    assert_eq!(f(fr, "fanout_expected") as u64, planned - 100 - 10, "{fr}");
    assert_eq!(
        f(fr, "fanout_complete") + f(fr, "fanout_incomplete"),
        f(fr, "fanout_expected"),
        "{fr}"
    );
    // The sink drops an entry only when a room has two ticks' worth waiting, i.e. its
    // own tick came a tick late (a CI run saw 15 dropped with the host's vCPUs stolen;
    // the ramp's late joiners were all accounted even then). A dropped entry is a frame
    // its room never got, an incomplete fan-out; with nothing dropped and the
    // generator on time, every fan-out completes.
    // A CI run under steal had 31 fan-outs incomplete with nothing dropped and the
    // generator valid: the sink's core was held, and a room's members got a tick's
    // frames more than the fan-out window apart. So it is a timing check too.
    let overflow = f(&read_json(&json), "broadcast.aggregate_overflow");
    let incomplete = f(fr, "fanout_incomplete") as u64;
    timely(
        &v,
        &[
            ("aggregate_overflow", overflow as u64, 0),
            ("fanout_incomplete", incomplete, 0),
        ],
    )
}

/// A stalling aggregating server skips the ticks it missed (it does not send them
/// late): each skipped tick is lost at every member.
#[test]
fn a_stalling_aggregate_server_loses_whole_ticks_at_every_member() {
    let _l = load_lock();
    let (_dir, json) = tmp_json();
    let sink = aggregate_sink(
        false,
        &[
            "--stall",
            "200ms",
            "--every",
            "2s",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let v = frames_run(&sink, &["--aggregate", "--down-size", DOWN]);
    sink.stop();
    let fr = &v["frames"];
    let lost = f(fr, "lost") as u64;
    // Two stalls of 200 ms in the run skip about 10 ticks each; the same ticks at
    // every member.
    assert_eq!(lost % CONNS, 0, "{fr}");
    let skipped = f(&read_json(&json), "broadcast.ticks_skipped") as u64;
    assert!(
        (16..=skipped).contains(&(lost / CONNS)),
        "{} ticks lost, the sink skipped {skipped}: {fr}",
        lost / CONNS
    );
    let iv = frame_intervals(&v);
    assert_eq!(iv.iter().map(|i| i.2).sum::<u64>(), lost, "{iv:?}");
}

/// `--hdr-log` of a frames run: the frame histograms per interval, tagged
/// `frames.deviation`, `frames.jitter` and `frames.fanout`, read back by the
/// hdrhistogram crate's own log reader; each tag's interval counts add up to the
/// run's totals; the dispatch lag is there, the request tags that a frames run never
/// fills (latency, service time, connection wait) are not.
#[test]
fn the_hdr_log_carries_the_frame_histograms_per_interval() {
    use hdrhistogram::serialization::Deserializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    let _l = load_lock();
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "10"]);
    let dir = tempfile::tempdir().unwrap();
    let hlog = dir.path().join("f.hlog");
    let v = frames_run(&sink, &["--hdr-log", hlog.to_str().unwrap()]);
    let fr = &v["frames"];
    let log = std::fs::read_to_string(&hlog).unwrap();
    let mut count: std::collections::BTreeMap<String, (u64, usize)> = Default::default();
    for e in IntervalLogIterator::new(log.as_bytes()) {
        let LogEntry::Interval(i) = e.expect("every line parses") else {
            continue;
        };
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(i.encoded_histogram())
            .unwrap();
        let h: hdrhistogram::Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .unwrap();
        if !h.is_empty() {
            assert!(
                (i.max() - h.max() as f64 / 1e6).abs() < 0.001,
                "{}",
                i.max()
            );
        }
        let c = count
            .entry(i.tag().unwrap().as_str().to_string())
            .or_default();
        c.0 += h.len();
        c.1 += 1;
    }
    let tags: Vec<&str> = count.keys().map(String::as_str).collect();
    assert_eq!(
        tags,
        ["frames.deviation", "frames.fanout", "frames.jitter", "lag",]
    );
    let intervals = v["intervals"].as_array().unwrap().len();
    for (tag, key) in [
        ("frames.deviation", "deviation_ns.count"),
        ("frames.jitter", "jitter_ns.count"),
        ("frames.fanout", "fanout_ns.count"),
    ] {
        assert_eq!(count[tag].1, intervals, "{tag}: one line per interval");
        assert_eq!(count[tag].0, f(fr, key) as u64, "{tag}: {fr}");
    }
    // One deviation sample per frame received, one lag sample per frame sent: counts
    // of the run's own report (all planned on a host that kept up; the exact totals
    // are the TCP broadcast test's).
    assert_eq!(
        count["frames.deviation"].0,
        f(fr, "received") as u64,
        "{fr}"
    );
    assert_eq!(count["lag"].0, f(&v, "dispatch_lag_ns.count") as u64);
    assert!(count["lag"].0 > PLANNED / 2, "{}", count["lag"].0);
}

/// Item 4, a PCU ramp: 100 connections joining at 50/s (one every 20 ms, the tick),
/// rooms of 10, 4 s. Connection j opens at j * 20 ms and sends from frame j + 1 (the
/// first tick at least a tick after it opens) to frame 199; receiver r expects frame
/// k of member s once r has sent its first frame before it (docs/frames.md).
#[test]
fn a_connect_rate_ramp_joins_connections_over_time_and_keeps_retention_exact() {
    let _l = load_lock();
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "10"]);
    // Every fan-out completing needs no receiver more than the fan-out window behind
    // its room mates, which a stolen vCPU can break with every frame still received
    // (a run here: fan-outs incomplete, nothing lost): that one is a timing check.
    on_a_quiet_host(
        "a_connect_rate_ramp_joins_connections_over_time_and_keeps_retention_exact",
        &RATE_ON_CORES_0_1,
        || ramp_retention_run(&sink),
    );
}

fn ramp_retention_run(sink: &Sink) -> Result<(), Miss> {
    let v = ramp_run(sink, &["--max-lag", "20ms"]);
    let fr = &v["frames"];
    // Planned: sum over j of 199 - j.
    let planned: u64 = (0..100u64).map(|j| 199 - j).sum();
    assert_eq!(f(fr, "planned") as u64, planned, "{fr}");
    assert_eq!(
        f(fr, "duplicates") + f(fr, "foreign") + f(fr, "stale"),
        0.0,
        "{fr}"
    );
    // On every attempt: nothing lost before the end but the frames of senders whose
    // connection was down, each at its 9 room mates.
    assert_tcp_accounting(&v, f(fr, "not_sent") as u64 * 9);
    generator_kept_up(&v)?;
    // Expected, pair by pair within a room (index = member here, the room's first
    // index being a multiple of 10 only shifts both): s's frames from its start, and
    // for s < r (its phase earlier in the tick) from the tick after r's first frame.
    let mut expected = 0;
    for room in 0..10u64 {
        for r in room * 10..room * 10 + 10 {
            for s in room * 10..room * 10 + 10 {
                if s != r {
                    let first = if s < r { r + 2 } else { s + 1 };
                    expected += 200 - first;
                }
            }
        }
    }
    assert_eq!(f(fr, "expected") as u64, expected, "{fr}");
    nothing_lost_at_the_end(&v, Duration::from_secs(4))?;
    timely(
        &v,
        &[
            // The sink reads each joiner's first frame after its room mates' earlier
            // ones only when it keeps up (a CI run under 36% steal: 6 relayed early).
            ("before_join", f(fr, "before_join") as u64, 0),
            ("sent", f(fr, "sent") as u64, planned),
            ("not_sent", f(fr, "not_sent") as u64, 0),
            ("retention < 1", u64::from(f(fr, "retention") < 1.0), 0),
            (
                "retention_min < 1",
                u64::from(f(fr, "retention_min") < 1.0),
                0,
            ),
            ("fanout_incomplete", f(fr, "fanout_incomplete") as u64, 0),
        ],
    )?;
    // Residency against each connection's own span: the last joiner (opened at 1.98 s
    // of 4 s) was up all of its span, not half the run.
    assert_eq!(f(fr, "residency.up_whole_run"), 100.0, "{fr}");
    assert_eq!(f(fr, "residency.uptime_min"), 1.0, "{fr}");
    // Connections active at each interval's end: 50 or 51 joined by 1 s (the 51st
    // opens at 1.000 s), all 100 by 1.98 s.
    let active: Vec<u64> = v["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| f(&i["frames"], "connections_active") as u64)
        .collect();
    assert!(active.len() >= 4, "{active:?}");
    assert!((50..=51).contains(&active[0]), "{active:?}");
    assert!(active[1..].iter().all(|&a| a == 100), "{active:?}");
    Ok(())
}

/// SLO terms the workload has no figure for are usage errors, one line, exit 2,
/// before anything connects: a request-latency term for frames, a frame term for
/// request/response.
#[test]
fn slo_terms_of_the_other_workload_are_usage_errors() {
    let frames = [
        "--target",
        "127.0.0.1:9",
        "--workload",
        "frames",
        "--connections",
        "10",
        "--duration",
        "1s",
        "--quiet",
        "--slo",
        "p99<20ms",
    ];
    let requests = [
        "--target",
        "127.0.0.1:9",
        "--rate",
        "100",
        "--duration",
        "1s",
        "--quiet",
        "--slo",
        "retention>99.9%",
    ];
    for (args, says) in [
        (&frames[..], "answers no requests"),
        (&requests[..], "needs --workload frames"),
    ] {
        let out = run(args, Duration::from_secs(20));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(says) && err.trim().lines().count() == 1,
            "{err}"
        );
    }
}

/// Issue 23, part 5: every output of a frames run shows frames, none a request
/// latency of 0 ns. The live line (frames up and down, deviation p99, retention,
/// late), the text report (no request framer header, no requests line), the CSV's
/// frame columns (latency empty), and the HTML page's frames sections from the JSON.
#[test]
fn every_output_of_a_frames_run_shows_frames_not_request_latency() {
    let _l = load_lock();
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "10"]);
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let (json, csv, html) = (p("f.json"), p("f.csv"), p("f.html"));
    let mut args = vec!["run", "--cores", "0"];
    // Not --quiet: the live line is what is checked (stderr is not a terminal).
    args.extend(
        frames_args_with(&sink.addr, "50", "2s")
            .into_iter()
            .filter(|a| *a != "--quiet"),
    );
    args.extend(["--json", &json, "--csv", &csv]);
    let out = run(&args, Duration::from_secs(60));
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let (live, text) = (
        stderr(&out),
        String::from_utf8_lossy(&out.stdout).to_string(),
    );
    let lines: Vec<&str> = live.lines().filter(|l| l.starts_with('[')).collect();
    assert!(!lines.is_empty(), "no live line: {live}");
    for l in &lines {
        for want in ["frames up", "/s down", "deviation p99", "retention", "late"] {
            assert!(l.contains(want), "{want:?} not in the live line {l:?}");
        }
        assert!(!l.contains("latency"), "{l}");
    }
    // The text report: the workload, not a request framer, pipeline and payload.
    let head = text.lines().find(|l| l.starts_with("blaster: ")).unwrap();
    assert!(head.contains("workload=frames"), "{head}");
    for bad in ["framer=", "payload=", "pipeline="] {
        assert!(!head.contains(bad), "{head}");
    }
    for bad in ["\nrequests: ", "connection wait", "per request"] {
        assert!(!text.contains(bad), "{bad:?} in\n{text}");
    }
    assert!(text.contains("rate: frames sent"), "{text}");
    // The CSV: frame columns filled, latency columns empty.
    let v = read_json(&json.clone().into());
    let csv = std::fs::read_to_string(&csv).unwrap();
    let mut rows = csv.lines().map(|l| l.split(',').collect::<Vec<_>>());
    let head = rows.next().unwrap();
    let col = |name: &str| head.iter().position(|c| *c == name).unwrap();
    let rows: Vec<Vec<&str>> = rows.collect();
    assert_eq!(rows.len(), v["intervals"].as_array().unwrap().len());
    let sum = |name: &str| -> f64 {
        rows.iter()
            .map(|r| r[col(name)].parse::<f64>().unwrap())
            .sum()
    };
    assert!(
        rows.iter().all(|r| r[col("latency_p99_ns")].is_empty()),
        "{csv}"
    );
    assert!(sum("frames_down_fps") > 0.0, "{csv}");
    assert_eq!(sum("frames_late"), f(&v["frames"], "late"), "{csv}");
    // The JSON's intervals carry the counts behind the rates.
    let received: u64 = v["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| f(&i["frames"], "received") as u64)
        .sum();
    assert_eq!(received, f(&v["frames"], "received") as u64);
    // The page: frames sections and table, no request latency section.
    let o = run(&["report", &json, "--html", &html], Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    for want in [
        "<h2>Frame arrival deviation over time</h2>",
        "<h2>Retention and late frames per interval</h2>",
        "<h2>Frame percentile spectra</h2>",
        "frames run",
    ] {
        assert!(page.contains(want), "the page lacks {want:?}");
    }
    assert!(!page.contains("Latency percentiles over time"));
}

/// Issue 23 part 4: a live room of 2,000 members of which 2 send, against the
/// built-in sink. Listeners plan nothing and join with a join frame the sink sends
/// back, so every member hears every frame from frame 0; the accounting keeps a
/// window per receiver and sender (2,000 x 2), which runs under an address-space
/// limit that one per receiver and member (2,000 x 2,000 windows, 256 MB) does not.
#[test]
fn a_room_of_two_thousand_with_two_senders_runs_within_its_memory() {
    const MEMBERS: u64 = 2000;
    const SENDERS: u64 = 2;
    const TICKS: u64 = 2000 / 50;
    const AS_BYTES: u64 = 160 << 20;
    let _l = load_lock();
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "2000"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let members = MEMBERS.to_string();
    let args = [
        "run",
        "--target",
        &sink.addr,
        "--workload",
        "frames",
        "--connections",
        &members,
        "--room-size",
        &members,
        "--senders-per-room",
        "2",
        "--tick",
        "50ms",
        "--duration",
        "2s",
        "--cores",
        "0",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ];
    on_a_quiet_host(
        "a_room_of_two_thousand_with_two_senders_runs_within_its_memory",
        &RATE_ON_CORES_0_1,
        || {
            let out = run_with_memory_limit(&args, AS_BYTES, Duration::from_secs(60));
            assert!(
                out.status.code().is_some_and(|c| c == 0 || c == 3),
                "{:?}: {}",
                out.status,
                stderr(&out)
            );
            let v = read_json(&json);
            let fr = &v["frames"];
            // Deterministic: the plan and the joins.
            assert_eq!(f(fr, "senders_per_room") as u64, SENDERS, "{fr}");
            assert_eq!(f(fr, "planned") as u64, SENDERS * TICKS, "{fr}");
            assert_eq!(f(fr, "join.joined") as u64, MEMBERS, "{fr}");
            assert_eq!(f(fr, "expected") as u64, SENDERS * TICKS * (MEMBERS - 1));
            assert!(
                f(&v, "rate.intended_rps") <= (SENDERS * 20) as f64 + 0.5,
                "{}",
                v["rate"]
            );
            // On every attempt: nothing lost before the end but the frames of a
            // sender whose connection was down, each at the room's other members.
            assert_tcp_accounting(&v, f(fr, "not_sent") as u64 * (MEMBERS - 1));
            nothing_lost_at_the_end(&v, Duration::from_secs(2))?;
            let exact = [
                ("sent", f(fr, "sent") as u64, SENDERS * TICKS),
                ("foreign", f(fr, "foreign") as u64, 0),
                ("before_join", f(fr, "before_join") as u64, 0),
            ];
            timely(&v, &exact)
        },
    );
    sink.stop();
}

/// Issue 23 part 3: 20 connections carrying 10 members each against the built-in
/// sink. Member slot s of every connection is in a room of slot s, so each room's 10
/// members are on 10 different connections and every relay crosses connections; each
/// member has its own sequence and accounting, and one write per tick carries a
/// connection's 10 frames. Issue 36 item 7: under the default `--room-layout mixed`
/// slots 1..10 place their members by a seeded permutation, and the sender, the
/// joins and the accounting agree on it: not one frame foreign, every one expected.
#[test]
fn twenty_connections_of_ten_members_are_accounted_per_member() {
    const CONNS: u64 = 20;
    const M: u64 = 10;
    const TICKS: u64 = 2000 / 20;
    let _l = load_lock();
    let sink = Sink::start(&[
        "--mode",
        "broadcast",
        "--room-size",
        "10",
        "--members-per-connection",
        "10",
    ]);
    on_a_quiet_host(
        "twenty_connections_of_ten_members_are_accounted_per_member",
        &RATE_ON_CORES_0_1,
        || {
            let mut a = frames_args_with(&sink.addr, "20", "2s");
            a.extend_from_slice(&["--members-per-connection", "10", "--seed", "7"]);
            let v = run_report(&a, Duration::from_secs(60));
            let fr = &v["frames"];
            assert_eq!(fr["room_layout"], "mixed", "the default");
            let planned = CONNS * M * TICKS;
            // Each frame at the 9 other members of its room, less frame 0 of each member
            // at the members that joined after it: 45 per room, 2 rooms per slot.
            let expected = planned * 9 - 45 * 2 * M;
            assert_eq!(f(fr, "members_per_connection") as u64, M, "{fr}");
            assert_eq!(f(fr, "rooms") as u64, 2 * M, "{fr}");
            assert_eq!(f(fr, "planned") as u64, planned, "{fr}");
            assert_eq!(f(fr, "expected") as u64, expected, "{fr}");
            assert_eq!(f(fr, "join.joined") as u64, CONNS, "{fr}");
            // One lag sample per write: a connection's tick.
            assert_eq!(f(&v, "dispatch_lag_ns.count") as u64, CONNS * TICKS);
            // Whatever the host's timing: no frame lands in another member's
            // accounting, and every slot hears its rooms (a late host loses a few
            // frames at the end, never a slot's worth).
            assert_eq!(f(fr, "foreign") + f(fr, "duplicates"), 0.0, "{fr}");
            assert!(f(fr, "received") > 0.9 * expected as f64, "{fr}");
            // On every attempt: nothing lost before the end but the frames of the
            // members of a connection that was down, each at its 9 room mates.
            assert_tcp_accounting(&v, f(fr, "not_sent") as u64 * 9);
            nothing_lost_at_the_end(&v, Duration::from_secs(2))?;
            let exact = [
                ("sent", f(fr, "sent") as u64, planned),
                ("before_join", f(fr, "before_join") as u64, 0),
                (
                    "retention_min < 1",
                    u64::from(f(fr, "retention_min") < 1.0),
                    0,
                ),
                (
                    "fanout_complete",
                    f(fr, "fanout_complete") as u64,
                    planned - 2 * M,
                ),
            ];
            timely(&v, &exact)
        },
    );
    sink.stop();
}

/// What each of the 20 connections of a `--members-per-connection 4` run (rooms of
/// 10, `--seed 7`, one worker) sent in its first tick, read off the wire by a listener
/// that relays nothing: per connection (numbered `room x 10 + member` from its slot-0
/// frame), the room of each slot (its wire room less `slot x 2`).
fn rooms_on_the_wire(layout: &str) -> std::collections::BTreeMap<u64, Vec<u64>> {
    use blaster::proto::frame::{FrameHeader, next_tcp_frame};
    use std::io::Read;
    const SLOTS: usize = 4;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    #[rustfmt::skip]
    let args = [
        "run", "--cores", "0", "--target", &addr, "--workload", "frames",
        "--connections", "20", "--room-size", "10", "--members-per-connection", "4",
        "--room-layout", layout, "--seed", "7", "--tick", "20ms", "--duration", "1s",
        "--quiet",
    ];
    let child = spawn_piped(std::process::Command::new(bin()).args(args));
    let (mut by_conn, mut open) = (std::collections::BTreeMap::new(), vec![]);
    for _ in 0..20 {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let (mut buf, mut got) = (vec![0u8; 4096], 0);
        let (mut rooms, mut member) = (vec![u64::MAX; SLOTS], 0);
        while rooms.contains(&u64::MAX) {
            let n = s.read(&mut buf[got..]).unwrap();
            assert!(n > 0, "closed before its first tick");
            got += n;
            while let Ok(Some((start, end))) = next_tcp_frame(&buf[..got]) {
                let h = FrameHeader::decode(&buf[start..end]).unwrap();
                if h.seq == 0 {
                    let slot = h.room as usize / 2;
                    rooms[slot] = u64::from(h.room) % 2;
                    member = u64::from(h.member);
                }
                buf.copy_within(end..got, 0);
                got -= end;
            }
        }
        by_conn.insert(rooms[0] * 10 + member, rooms);
        open.push(s); // open until the run ends: one connection each, no reconnects
    }
    let _ = wait_bounded(child, Duration::from_secs(30));
    by_conn
}

/// Issue 36 item 7: under `--room-layout mixed` a connection's room mates differ from
/// slot to slot, on the wire, exactly where `SlotMap` (the function the sender, the
/// joins and the accounting share) puts them; under `grouped` every slot's rooms hold
/// the slot-0 rooms' connections. Either way each room has its 10 members, each on its
/// own connection.
#[test]
fn mixed_room_mates_differ_from_slot_to_slot_on_the_wire() {
    use blaster::schedule::{RoomLayout, SlotMap};
    let _l = load_lock();
    for layout in [RoomLayout::Mixed, RoomLayout::Grouped] {
        let rooms = rooms_on_the_wire(layout.name());
        assert_eq!(rooms.len(), 20, "20 connections, each its own slot-0 place");
        let mut moved = 0;
        for slot in 0..4 {
            let map = SlotMap::new(layout, 7, slot, 0, 20, 10);
            for (&j, r) in &rooms {
                assert_eq!(
                    r[slot],
                    map.room(j),
                    "{layout:?} slot {slot} connection {j}"
                );
                moved += usize::from(r[slot] != r[0]);
            }
            for room in 0..2 {
                let members: std::collections::BTreeSet<u64> = (rooms.iter())
                    .filter(|(_, r)| r[slot] == room)
                    .map(|(j, _)| j % 10)
                    .collect();
                assert_eq!(members.len(), 10, "{layout:?} slot {slot} room {room}");
            }
        }
        match layout {
            RoomLayout::Grouped => assert_eq!(moved, 0, "grouped slots are slot 0's rooms"),
            RoomLayout::Mixed => assert!(moved >= 10, "{moved} members left their slot-0 room"),
        }
    }
}

/// The local IPv4 addresses of the established TCP sockets connected to 127.0.0.1:`port`
/// (/proc/net/tcp), with their counts.
fn sources_connected_to(port: u16) -> std::collections::BTreeMap<String, u64> {
    let mut by_source = std::collections::BTreeMap::new();
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let want = format!("0100007F:{port:04X}");
    for line in table.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() > 3 && cols[2] == want && cols[3] == "01" {
            let hex = cols[1].split(':').next().unwrap_or("");
            let ip = u32::from_str_radix(hex, 16).unwrap_or(0).to_le_bytes();
            let ip = std::net::Ipv4Addr::from(ip).to_string();
            *by_source.entry(ip).or_insert(0) += 1;
        }
    }
    by_source
}

/// Frames sockets live in the rings' file tables, not the process's descriptor table
/// (issue 22): 3,000 connections run under RLIMIT_NOFILE 1,100 (three rings on core
/// 0), and `--source-ip` spreads them over its addresses in turn (it was ignored by
/// frames runs).
#[test]
fn frames_connections_pass_the_descriptor_limit_from_every_source_address() {
    let _l = load_lock();
    let sink = Sink::start(&[
        "--mode",
        "broadcast",
        "--room-size",
        "10",
        "--max-connections",
        "4000",
    ]);
    let port: u16 = sink.addr.rsplit(':').next().unwrap().parse().unwrap();
    let (_dir, json) = tmp_json();
    let args = [
        "run",
        "--cores",
        "0",
        "--json",
        json.to_str().unwrap(),
        "--target",
        &sink.addr,
        "--workload",
        "frames",
        "--connections",
        "3000",
        "--room-size",
        "10",
        "--tick",
        "200ms",
        "--duration",
        "3s",
        "--source-ip",
        "127.0.0.2-127.0.0.3",
        "--quiet",
    ];
    let mut child = spawn_with_rlimit(&args, libc::RLIMIT_NOFILE, 1100);
    // While it holds its connections: where they come from. /proc/net/tcp is read in
    // pieces, not as one snapshot: a read while thousands of sockets connect can list
    // some twice (a CI run: 3,652 for 3,000) or miss some, so the reads go on until
    // one lists exactly the 3,000 (or the run ends; the closest read is kept).
    let mut most = std::collections::BTreeMap::new();
    let end = std::time::Instant::now() + Duration::from_secs(20);
    let off = |m: &std::collections::BTreeMap<String, u64>| m.values().sum::<u64>().abs_diff(3000);
    while std::time::Instant::now() < end {
        let seen = sources_connected_to(port);
        if most.is_empty() || off(&seen) < off(&most) {
            most = seen;
        }
        if off(&most) == 0 || !matches!(child.try_wait(), Ok(None)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = wait_bounded(child, Duration::from_secs(60));
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&json);
    assert_eq!(
        f(&v, "connections.established"),
        3000.0,
        "{}",
        v["connections"]
    );
    assert!(
        f(&v, "connections.rings_per_core") >= 3.0,
        "{}",
        v["connections"]
    );
    let features = v["io_uring_features"].to_string();
    assert!(features.contains("registered_files"), "{features}");
    let want: std::collections::BTreeMap<String, u64> = [
        ("127.0.0.2".to_string(), 1500),
        ("127.0.0.3".to_string(), 1500),
    ]
    .into();
    assert_eq!(most, want, "sockets to the sink by source address");
    sink.stop();
}

/// A plain TCP frames run of `conns` connections of `members` members echoed to their
/// senders (rooms of one, a frame every 20 ms for 2 s) with a test hook (`env`,
/// `value`) shrinking one of the worker's shared pools (issue 36).
fn pooled_run(sink: &Sink, conns: u64, members: u64, env: &str, value: &str) -> serde_json::Value {
    let (_dir, path) = tmp_json();
    let (c, m) = (conns.to_string(), members.to_string());
    let args = [
        "run",
        "--cores",
        "0",
        "--target",
        &sink.addr,
        "--workload",
        "frames",
        "--connections",
        &c,
        "--members-per-connection",
        &m,
        "--room-size",
        "1",
        "--echo-to-sender",
        "--tick",
        "20ms",
        "--duration",
        "2s",
        "--quiet",
        "--json",
        path.to_str().unwrap(),
    ];
    let child = std::process::Command::new(bin())
        .args(args)
        .env(env, value)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start blaster");
    let out = wait_bounded(child, Duration::from_secs(30));
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&path);
    assert_exit_matches_validity(&out, &v);
    v
}

/// Every planned frame of a pooled run arrived once (whatever the host's timing: the
/// pools make frames wait, never drop them).
fn all_arrived(fr: &serde_json::Value, conns: u64, members: u64) {
    let planned = (conns * members * 100) as f64;
    let mut fr = fr.clone();
    fr.as_object_mut()
        .unwrap()
        .retain(|k, _| !k.ends_with("ns") && k != "histograms");
    let fr = &fr;
    assert_eq!(f(fr, "planned"), planned, "{fr}");
    assert_eq!(f(fr, "expected"), planned, "{fr}");
    assert_eq!(f(fr, "received"), planned, "{fr}");
    assert_eq!(f(fr, "retention"), 1.0, "{fr}");
    let wrong = [
        "lost",
        "duplicates",
        "foreign",
        "not_sent",
        "in_flight_at_end",
    ];
    for k in wrong {
        assert_eq!(f(fr, k), 0.0, "{k}: {fr}");
    }
}

#[test]
fn connections_wait_in_line_for_a_send_slot_and_every_frame_arrives() {
    // One send slot for 1,000 connections: whenever two are due at once (20 us apart
    // in a 20 ms tick), the second waits in line until the first's send completes. A
    // connection left out of the line sends only at its next tick, so its last frames
    // are never sent (red: 4,914 of 200,000 with the line broken).
    let _l = load_lock();
    let sink = Sink::start(&["--mode", "echo"]);
    let v = pooled_run(&sink, 1000, 2, "BLASTER_TEST_SEND_SLOTS", "1");
    let fr = &v["frames"];
    assert!(f(fr, "send_slot_waits") > 0.0, "{fr}");
    all_arrived(fr, 1000, 2);
    sink.stop();
}

#[test]
fn receives_that_find_no_buffer_are_armed_again_and_every_frame_arrives() {
    // Two 4 KiB provided buffers for 200 sockets, each echoed 10 frames a tick: a
    // multishot receive finding both in use ends with ENOBUFS, counted and re-armed
    // (red with the re-arm left out: 50,460 of 200,000 arrived).
    let _l = load_lock();
    let sink = Sink::start(&["--mode", "echo"]);
    let v = pooled_run(&sink, 200, 10, "BLASTER_TEST_RECV_BUFFERS", "2");
    let fr = &v["frames"];
    assert!(f(fr, "recv_no_buffer") > 0.0, "{fr}");
    all_arrived(fr, 200, 10);
    sink.stop();
}
