//! `--workload frames --frame-proto` against real servers (issue 23): nats-server,
//! mosquitto, redis-server and a Python `websockets` broadcast server, started on
//! loopback (tests/common/servers.rs). Every planned frame is accounted for, exactly:
//! each member joins before the schedule (one `join` sample per connection), sends
//! one frame per tick, and receives every room mate's frames (its own too where the
//! protocol echoes). A server that refuses the join fails the run with the server's
//! words; a server stopped for 300 ms shows as late frames of those ticks; a server
//! killed mid-run shows as disconnects in a complete report.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::servers::{Server, mosquitto, nats, redis, ws_server, ws_server_pinging};
use common::*;
use std::process::Command;
use std::time::Duration;

const CONNECTIONS: u64 = 20;
const ROOM: u64 = 10;
/// 2 s of 20 ms ticks: 100 frames per connection.
const TICKS: u64 = 100;

/// `blaster run --workload frames --frame-proto PROTO` against 127.0.0.1:`port`: 20
/// connections in rooms of 10, a frame every 20 ms for `duration`, the JSON parsed.
fn frames_run(
    proto: &str,
    port: u16,
    duration: &str,
    extra: &[&str],
) -> (std::process::Output, serde_json::Value) {
    let (_dir, json) = tmp_json();
    let target = format!("127.0.0.1:{port}");
    let n = CONNECTIONS.to_string();
    let mut args = vec![
        "run",
        "--cores",
        "0",
        "--target",
        &target,
        "--workload",
        "frames",
        "--frame-proto",
        proto,
        "--connections",
        &n,
        "--room-size",
        "10",
        "--tick",
        "20ms",
        "--duration",
        duration,
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = run(&args, Duration::from_secs(60));
    let v = if json.exists() {
        read_json(&json)
    } else {
        serde_json::Value::Null
    };
    (out, v)
}

/// Every planned frame sent and received by every receiver the protocol's rules
/// make one (`echo`: the sender too), nothing lost, foreign or outside the plan, and
/// one join per connection.
fn assert_exact(proto: &str, out: &std::process::Output, v: &serde_json::Value, echo: bool) {
    assert_exact_sockets(proto, out, v, echo, 1)
}

/// [`assert_exact`] with `sockets` sockets per connection, each joining once.
fn assert_exact_sockets(
    proto: &str,
    out: &std::process::Output,
    v: &serde_json::Value,
    echo: bool,
    sockets: u64,
) {
    assert_exact_members(proto, out, v, echo, sockets, 1)
}

/// [`assert_exact_sockets`] with `members` members per connection.
fn assert_exact_members(
    proto: &str,
    out: &std::process::Output,
    v: &serde_json::Value,
    echo: bool,
    sockets: u64,
    members: u64,
) {
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(out));
    let fr = &v["frames"];
    let n = |k: &str| {
        fr[k]
            .as_u64()
            .unwrap_or_else(|| panic!("frames.{k} in {fr}"))
    };
    let planned = CONNECTIONS * TICKS * members;
    let receivers = ROOM - 1 + u64::from(echo);
    assert_eq!(fr["proto"], proto);
    assert_eq!(n("planned"), planned, "{proto}");
    assert_eq!((n("sent"), n("not_sent")), (planned, 0), "{proto}");
    assert_eq!(n("expected"), planned * receivers, "{proto}");
    assert_eq!(
        (n("received"), n("lost"), n("foreign"), n("before_join")),
        (planned * receivers, 0, 0, 0),
        "{proto}: {fr}"
    );
    assert_eq!((n("duplicates"), n("stale")), (0, 0), "{proto}");
    let j = &fr["join"];
    assert_eq!(j["joined"], CONNECTIONS * sockets, "{proto}: {j}");
    assert!(j["ns"]["p50"].as_u64().unwrap() > 0, "{proto}: {j}");
    for kind in ["refused", "protocol", "closed", "timeout"] {
        assert_eq!(j["failed"][kind], 0, "{proto} {kind}: {j}");
    }
    assert!(j["first_error"].is_null(), "{proto}: {j}");
}

/// A budget far above a busy host's stalls: nothing here may count as lost for
/// arriving after the drain.
const CALM: [&str; 2] = ["--frame-budget", "300ms"];

#[test]
fn nats_rooms_carry_every_planned_frame_without_echo() {
    let _g = load_lock();
    let (_s, port) = nats(&[]);
    let (out, v) = frames_run("nats", port, "2s", &CALM);
    assert_exact("nats", &out, &v, false);
}

#[test]
fn mqtt_rooms_carry_every_planned_frame_and_the_senders_own() {
    let _g = load_lock();
    // set_tcp_nodelay: mosquitto's default (Nagle on its sends) holds relayed frames
    // back by up to the peer's delayed ACK.
    let (_s, port) = mosquitto("allow_anonymous true\nset_tcp_nodelay true");
    let (out, v) = frames_run("mqtt", port, "2s", &CALM);
    assert_exact("mqtt", &out, &v, true);
}

/// Issue 36 item 7: 20 connections of 4 members through mosquitto under the default
/// `--room-layout mixed`: each connection subscribes to its 4 slots' topics, which the
/// permutation gives other room mates in every slot, and every planned frame is
/// received exactly once by each room mate (and its sender: MQTT echoes).
#[test]
fn mqtt_mixed_rooms_of_multiplexed_members_carry_every_planned_frame() {
    let _g = load_lock();
    let (_s, port) = mosquitto("allow_anonymous true\nset_tcp_nodelay true");
    let extra = [
        CALM[0],
        CALM[1],
        "--members-per-connection",
        "4",
        "--seed",
        "7",
    ];
    let (out, v) = frames_run("mqtt", port, "2s", &extra);
    assert_eq!(v["frames"]["room_layout"], "mixed");
    assert_exact_members("mqtt", &out, &v, true, 1, 4);
}

/// Issue 36 item 7: `--slow-readers 0.2:0` through mosquitto: the slow connections
/// (drawn from --seed 7, the same draw as `SlowReaders::is_slow`) stop reading once
/// subscribed, and everything they did not read is reported apart: the other readers
/// get every planned frame (nothing lost, retention 1 for each of them), and the slow
/// readers' frames are expected, received, dropped or unread in `frames.slow_readers`
/// alone.
#[test]
fn mqtt_slow_readers_are_accounted_apart_from_the_others() {
    use blaster::engine::worker_plan::SlowReaders;
    let _g = load_lock();
    let (_s, port) = mosquitto("allow_anonymous true\nset_tcp_nodelay true");
    let extra = [CALM[0], CALM[1], "--slow-readers", "0.2:0", "--seed", "7"];
    let (out, v) = frames_run("mqtt", port, "2s", &extra);
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let fr = &v["frames"];
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
    let slow = (0..CONNECTIONS)
        .filter(|&j| SlowReaders::new(0.2, 0).is_slow(7, j))
        .count() as u64;
    assert!(
        (1..CONNECTIONS).contains(&slow),
        "seed 7 draws {slow} slow of 20"
    );
    let sr = &fr["slow_readers"];
    assert_eq!(
        (n(sr, "connections"), n(sr, "members")),
        (slow, slow),
        "{sr}"
    );
    // MQTT echoes: every receiver expects its room's 10 members' 100 frames.
    let per_receiver = ROOM * TICKS;
    assert_eq!(n(fr, "planned"), CONNECTIONS * TICKS, "{fr}");
    assert_eq!(
        n(fr, "expected"),
        (CONNECTIONS - slow) * per_receiver,
        "{fr}"
    );
    assert_eq!(
        (n(fr, "received"), n(fr, "lost"), n(fr, "foreign")),
        (n(fr, "expected"), 0, 0),
        "the other readers are untouched: {fr}"
    );
    assert_eq!(fr["retention_min"], 1.0, "{fr}");
    assert_eq!(n(sr, "expected"), slow * per_receiver, "{sr}");
    assert!(
        n(sr, "received") < n(sr, "expected") / 2,
        "stopped readers read little: {sr}"
    );
    assert_eq!(
        n(sr, "received") + n(sr, "dropped") + n(sr, "unread"),
        n(sr, "expected"),
        "{sr}"
    );
    assert_eq!(
        (sr["ratio"].as_f64(), n(sr, "rate_bytes_per_s")),
        (Some(0.2), 0)
    );
}

#[test]
fn websocket_rooms_carry_every_planned_frame() {
    let _g = load_lock();
    let (_s, port) = ws_server();
    let (out, v) = frames_run("ws", port, "2s", &CALM);
    assert_exact("ws", &out, &v, false);
}

/// Redis pub/sub: each connection is a subscriber socket and a publisher socket (a
/// subscribed connection cannot publish), both joining; Redis delivers a publisher's
/// messages to its own member's subscriber too.
#[test]
fn redis_pubsub_rooms_carry_every_planned_frame_and_the_senders_own() {
    let _g = load_lock();
    let (_s, port) = redis(&[]);
    let (out, v) = frames_run("resp", port, "2s", &CALM);
    assert_exact_sockets("resp", &out, &v, true, 2);
}

/// `--conn-max-requests` over Redis pub/sub: a member whose publisher reaches its
/// budget retires as a whole (its subscriber too, as a client reconnecting does):
/// both sockets close, reopen at the next scan and join again (the subscriber
/// subscribes again, missing the room's relays meanwhile); every frame is sent or
/// counted not sent, no reopen is a disconnect, each is a reconnect in the
/// per-second series.
#[test]
fn redis_members_retire_with_both_sockets() {
    let _g = load_lock();
    let (_s, port) = redis(&[]);
    let (out, v) = frames_run("resp", port, "3s", &["--conn-max-requests", "50"]);
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let (c, fr) = (&v["connections"], &v["frames"]);
    let n = |k: &str| fr[k].as_f64().unwrap();
    assert_eq!(n("sent") + n("not_sent"), n("planned"), "{fr}");
    assert_eq!(fr["residency"]["disconnects"], 0, "{fr}");
    let sockets = 2.0 * CONNECTIONS as f64;
    let (opened, reconnects, recycled) = (f(c, "opened"), f(c, "reconnects"), f(c, "recycled"));
    // 50 frames a second per member over 3 s: each retires two or three times.
    assert!(recycled >= 2.0 * sockets, "{c}");
    // Both sockets of a member retire and reopen together.
    assert_eq!(recycled % 2.0, 0.0, "{c}");
    assert_eq!(reconnects % 2.0, 0.0, "{c}");
    assert_eq!(opened, sockets + reconnects, "{c}");
    assert_eq!(fr["join"]["joined"].as_f64().unwrap(), opened, "{fr}");
    // The subscriber, away while it resubscribes, missed relays.
    assert!(n("lost") > 0.0, "{fr}");
    let per_second: f64 = v["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["reconnects"].as_f64().unwrap())
        .sum();
    assert_eq!(per_second, reconnects, "{c}");
}

/// A WebSocket server that pings every 100 ms and closes a client whose pong is
/// 100 ms late: blaster answers every ping, so no connection is lost.
#[test]
fn websocket_pings_are_answered() {
    let _g = load_lock();
    let (_s, port) = ws_server_pinging(0.1);
    let (out, v) = frames_run("ws", port, "2s", &CALM);
    assert_eq!(
        v["frames"]["residency"]["disconnects"], 0,
        "{}",
        v["frames"]
    );
    assert_exact("ws", &out, &v, false);
}

/// The server refuses every join: the run fails (exit 1) with one line that carries
/// the server's own reason, and sends nothing.
#[test]
fn a_refused_join_fails_the_run_with_the_servers_reason() {
    let _g = load_lock();
    let (_s, port) = nats(&["--user", "u", "--pass", "p"]);
    let (out, _) = frames_run("nats", port, "1s", &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("nats join refused") && err.contains("Authorization Violation"),
        "{err}"
    );
    let (_m, mport) = mosquitto("allow_anonymous false");
    let (out, _) = frames_run("mqtt", mport, "1s", &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("mqtt join refused: CONNACK return code 5"),
        "{err}"
    );
}

/// Sends `signal` to the server's process.
fn signal(s: &Server, sig: &str) {
    let pid = s.child.id().to_string();
    assert!(
        Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success()
    );
}

/// nats-server frozen for 300 ms (SIGSTOP, SIGCONT) a second into the run: the frames
/// of those ticks arrive late, all of them, and none is lost (TCP holds them); the
/// deviation's maximum is the stall.
#[test]
fn a_stalled_server_shows_as_late_frames_of_the_stalled_ticks() {
    let _g = load_lock();
    let (s, port) = nats(&[]);
    let stall = std::thread::scope(|sc| {
        let h = sc.spawn(|| frames_run("nats", port, "3s", &["--frame-budget", "50ms"]));
        // The run starts after its connect phase and a short start delay.
        std::thread::sleep(Duration::from_millis(1500));
        signal(&s, "-STOP");
        std::thread::sleep(Duration::from_millis(300));
        signal(&s, "-CONT");
        h.join().unwrap()
    });
    let (out, v) = stall;
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let fr = &v["frames"];
    let n = |k: &str| fr[k].as_u64().unwrap();
    assert_eq!((n("lost"), n("foreign")), (0, 0), "{fr}");
    // Frames intended in the stall's first 250 ms (300 ms less the 50 ms budget)
    // arrive later than the budget: 12.5 ticks x 20 senders x 9 receivers = 2,250.
    let late = n("late");
    assert!((1_500..=3_500).contains(&late), "late {late}: {fr}");
    let max = fr["deviation_ns"]["max"].as_u64().unwrap();
    assert!(
        (250_000_000..700_000_000).contains(&max),
        "max deviation {max}: {fr}"
    );
}

/// nats-server killed a second into the run: every connection's loss of its server
/// is a disconnect, the frames after it are lost or not sent, and the report is
/// complete (written, with the join and the frames before the kill).
#[test]
fn a_killed_server_shows_as_disconnects_in_a_complete_report() {
    let _g = load_lock();
    let (mut s, port) = nats(&[]);
    let (out, v) = std::thread::scope(|sc| {
        let h = sc.spawn(|| frames_run("nats", port, "2s", &[]));
        std::thread::sleep(Duration::from_millis(1200));
        let _ = s.child.kill();
        let _ = s.child.wait();
        h.join().unwrap()
    });
    assert!(
        matches!(out.status.code(), Some(0 | 1 | 3)),
        "{}",
        stderr(&out)
    );
    let fr = &v["frames"];
    assert_eq!(fr["residency"]["disconnects"], CONNECTIONS, "{fr}");
    assert_eq!(fr["join"]["joined"], CONNECTIONS, "{fr}");
    let n = |k: &str| fr[k].as_u64().unwrap();
    assert!(
        n("received") > 0 && n("lost") > 0 && n("not_sent") > 0,
        "{fr}"
    );
    assert_eq!(n("received") + n("lost"), n("expected"), "{fr}");
}
