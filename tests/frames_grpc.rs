//! `--workload frames --frame-proto grpc` against a gRPC broadcast room server written
//! in another implementation than blaster (Python grpcio,
//! tests/fixtures/grpc/room_server.py): each member is a bidirectional streaming call
//! on its connection (5 per connection here), its room in request metadata. Every
//! planned frame is accounted for exactly, each connection joins once (all its calls
//! answered), and a server that refuses the call, lacks the metadata it needs or does
//! not speak HTTP/2 fails the run in one line with its own words. The built-in sink
//! serves the same rooms (`sink --mode broadcast --http2`): a blaster run through it is
//! exact, and grpcio members (tests/fixtures/grpc/room_client.py) meet in its rooms
//! with every message intact, past grpcio's 64 KiB windows.
mod common;
use common::servers::{Server, python_with_grpcio, spawn};
use common::*;
use std::process::Command;
use std::time::Duration;

const CONNECTIONS: u64 = 4;
const MEMBERS: u64 = 5;
const ROOM: u64 = 4;
/// 3 s of 50 ms ticks.
const TICKS: u64 = 60;

fn room_server() -> (Server, u16) {
    room_server_with(&[])
}

/// The grpcio room server with `extra` arguments after its port (see its usage).
fn room_server_with(extra: &[&str]) -> (Server, u16) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/grpc/room_server.py"
    );
    let port = free_port();
    let mut cmd = Command::new(python_with_grpcio());
    cmd.args([script, &port.to_string()]).args(extra);
    (spawn(&mut cmd, None, port), port)
}

/// A frames run over gRPC against `port` with `extra` flags: the exit status, its
/// stderr and the JSON (Null when none was written).
fn grpc_frames(port: u16, extra: &[&str]) -> (std::process::Output, serde_json::Value) {
    grpc_frames_ticking(port, "50ms", extra)
}

/// As [`grpc_frames`], a tick of `tick`.
fn grpc_frames_ticking(
    port: u16,
    tick: &str,
    extra: &[&str],
) -> (std::process::Output, serde_json::Value) {
    let (_d, json) = tmp_json();
    let target = format!("127.0.0.1:{port}");
    let (c, m, r) = (
        CONNECTIONS.to_string(),
        MEMBERS.to_string(),
        ROOM.to_string(),
    );
    let mut args = vec![
        "run",
        "--cores",
        "0",
        "--target",
        &target,
        "--workload",
        "frames",
        "--frame-proto",
        "grpc",
        "--connections",
        &c,
        "--members-per-connection",
        &m,
        "--room-size",
        &r,
        "--tick",
        tick,
        "--duration",
        "3s",
        "--frame-budget",
        "300ms",
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

/// The sink's gRPC rooms (rooms of 4, 5 calls per connection) with `extra` flags,
/// and its port.
fn grpc_rooms(extra: &[&str]) -> (Sink, u16) {
    let args = [
        &[
            "--mode",
            "broadcast",
            "--http2",
            "--room-size",
            "4",
            "--members-per-connection",
            "5",
        ][..],
        extra,
    ]
    .concat();
    let sink = Sink::start(&args);
    let port = sink.addr.rsplit(':').next().unwrap().parse().unwrap();
    (sink, port)
}

/// The frames report's count `k`.
fn count(fr: &serde_json::Value, k: &str) -> u64 {
    fr[k]
        .as_u64()
        .unwrap_or_else(|| panic!("frames.{k} in {fr}"))
}

#[test]
fn every_planned_frame_crosses_grpcio_rooms_on_streams_of_shared_connections() {
    let _g = load_lock();
    let (_s, port) = room_server();
    let (out, v) = grpc_frames(port, &["--grpc", "blaster.Room/Join"]);
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let fr = &v["frames"];
    let n = |k: &str| count(fr, k);
    let planned = CONNECTIONS * MEMBERS * TICKS;
    assert_eq!(fr["proto"], "grpc");
    assert_eq!(n("members_per_connection"), MEMBERS);
    assert_eq!(n("planned"), planned);
    assert_eq!(
        (n("sent"), n("not_sent"), n("flow_stalled")),
        (planned, 0, 0)
    );
    // The server relays to every other member of the room, never back.
    assert_eq!(n("expected"), planned * (ROOM - 1));
    assert_eq!(
        (n("received"), n("lost"), n("foreign"), n("duplicates")),
        (planned * (ROOM - 1), 0, 0, 0),
        "{fr}"
    );
    let j = &fr["join"];
    assert_eq!(j["joined"], CONNECTIONS, "one join per connection: {j}");
    assert!(j["ns"]["p50"].as_u64().unwrap() > 0, "{j}");
    assert!(j["first_error"].is_null(), "{j}");
    assert_eq!(fr["residency"]["disconnects"], 0, "{fr}");
}

/// Every planned frame sent and received once, nothing lost, foreign or duplicated,
/// and one join per connection.
fn assert_every_frame(v: &serde_json::Value) {
    let fr = &v["frames"];
    let n = |k: &str| count(fr, k);
    let planned = CONNECTIONS * MEMBERS * TICKS;
    assert_eq!(
        (n("sent"), n("not_sent"), n("flow_stalled")),
        (planned, 0, 0),
        "{fr}"
    );
    assert_eq!(
        (
            n("expected"),
            n("received"),
            n("lost"),
            n("foreign"),
            n("duplicates")
        ),
        (planned * (ROOM - 1), planned * (ROOM - 1), 0, 0, 0),
        "{fr}"
    );
    assert_eq!(fr["join"]["joined"], CONNECTIONS, "{}", fr["join"]);
}

/// `--tls`: the calls go over h2 (ALPN `h2`, `:scheme https`) to grpcio's TLS port,
/// which refuses a client that does not offer h2, and to the sink's gRPC rooms
/// behind its TLS front; each connection made one full handshake.
#[test]
fn frames_cross_grpc_rooms_over_tls_to_grpcio_and_the_sink() {
    let _g = load_lock();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = common::servers::self_signed(dir.path());
    let (_s, grpcio_port) = room_server_with(&["room", &cert, &key]);
    let (_sink, sink_port) = grpc_rooms(&["--tls", "--cert", &cert, "--key", &key]);
    for (server, port) in [("grpcio", grpcio_port), ("sink", sink_port)] {
        let (out, v) = grpc_frames(
            port,
            &["--grpc", "blaster.Room/Join", "--tls", "--tls-ca", &cert],
        );
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "{server}: {}",
            stderr(&out)
        );
        assert_every_frame(&v);
        assert_eq!(
            v["tls"]["handshakes_full"], CONNECTIONS,
            "{server}: {}",
            v["tls"]
        );
    }
    // A TLS server that does not choose h2 (the sink's echo front offers no ALPN).
    let plain = Sink::start(&["--tls", "--cert", &cert, "--key", &key]);
    let port: u16 = plain.addr.rsplit(':').next().unwrap().parse().unwrap();
    let (out, _) = grpc_frames(
        port,
        &["--grpc", "blaster.Room/Join", "--tls", "--tls-ca", &cert],
    );
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(
        e.contains("the server did not choose h2 over ALPN") && e.lines().count() == 1,
        "{e}"
    );
}

/// `--h2-keepalive`: with a 1 s tick a connection is quiet between ticks, so it sends
/// PINGs, which the sink acknowledges, every one; without the flag, none. grpcio told
/// to allow one PING a minute without data ends the connections with GOAWAY
/// ENHANCE_YOUR_CALM, and the run names it.
#[test]
fn keepalive_pings_on_quiet_connections_are_acknowledged_and_a_strict_server_is_named() {
    let _g = load_lock();
    let (sink, port) = grpc_rooms(&[]);
    let join = ["--grpc", "blaster.Room/Join"];
    let (out, v) = grpc_frames_ticking(
        port,
        "1s",
        &[&join[..], &["--h2-keepalive", "100ms"]].concat(),
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let fr = &v["frames"];
    let n = |k: &str| count(fr, k);
    let planned = CONNECTIONS * MEMBERS * 3;
    assert_eq!(
        (n("sent"), n("received")),
        (planned, planned * (ROOM - 1)),
        "{fr}"
    );
    // About 900 ms quiet per tick and connection: at least 2 PINGs in each (due
    // 100 ms after the last receive, its ACK included, looked at every 50 ms).
    assert!(n("pings_sent") >= CONNECTIONS * 3 * 2, "{fr}");
    assert_eq!(n("pings_acked"), n("pings_sent"), "{fr}");
    let (_, v) = grpc_frames_ticking(port, "1s", &join);
    assert_eq!(count(&v["frames"], "pings_sent"), 0, "{}", v["frames"]);
    drop(sink);

    // grpcio: PINGs within a minute without data are strikes, the second ends it.
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/grpc/room_server.py"
    );
    let port = free_port();
    let mut cmd = Command::new(python_with_grpcio());
    cmd.args([script, &port.to_string()])
        .env("ROOM_SERVER_PING_STRIKES", "1");
    let _s = spawn(&mut cmd, None, port);
    let (out, v) = grpc_frames_ticking(
        port,
        "1s",
        &[&join[..], &["--h2-keepalive", "10ms"]].concat(),
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    assert_eq!(
        v["first_protocol_error"],
        "grpc the server sent GOAWAY (ENHANCE_YOUR_CALM): too_many_pings",
        "{}",
        v["frames"]
    );
    assert!(count(&v["frames"], "pings_sent") > 0);
}

#[test]
fn refused_calls_and_a_server_that_is_not_http2_fail_in_one_line() {
    let _g = load_lock();
    let (_s, port) = room_server();
    let one_line = |out: &std::process::Output| {
        let e = stderr(out);
        let last = e.trim_end().lines().last().unwrap_or("").to_string();
        assert!(!e.contains("panicked"), "{e}");
        last
    };
    let (out, _) = grpc_frames(port, &["--grpc", "blaster.Room/Nope"]);
    assert_ne!(out.status.code(), Some(0));
    let e = one_line(&out);
    assert!(
        e.contains("grpc join refused") && e.contains("grpc-status 12 (UNIMPLEMENTED)"),
        "{e}"
    );
    // The server finds the room under `room`: another name leaves it without one.
    let (out, _) = grpc_frames(
        port,
        &[
            "--grpc",
            "blaster.Room/Join",
            "--grpc-metadata",
            "table: {room}",
        ],
    );
    let e = one_line(&out);
    assert!(
        e.contains("grpc-status 3 (INVALID_ARGUMENT): no room metadata"),
        "{e}"
    );
    // An HTTP/1 server (Python's http.server) answers the preface with an error page.
    let port = free_port();
    let mut cmd = Command::new("python3");
    cmd.args([
        "-m",
        "http.server",
        "--bind",
        "127.0.0.1",
        &port.to_string(),
    ]);
    let _h = spawn(&mut cmd, None, port);
    let (out, _) = grpc_frames(port, &["--grpc", "blaster.Room/Join"]);
    let e = one_line(&out);
    assert!(
        e.contains("grpc join protocol error: not an HTTP/2 gRPC answer")
            && e.contains("<!DOCTYPE"),
        "{e}"
    );
}

#[test]
fn the_sinks_grpc_rooms_carry_every_frame_of_a_run() {
    let _g = load_lock();
    let (_sink, port) = grpc_rooms(&[]);
    let (out, v) = grpc_frames(port, &["--grpc", "blaster.Room/Join"]);
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    assert_every_frame(&v);
}

#[test]
fn grpcio_members_meet_in_the_sinks_grpc_rooms() {
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "broadcast", "--http2", "--room-size", "4"]);
    let port = sink.addr.rsplit(':').next().unwrap().to_string();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/grpc/room_client.py"
    );
    let client = |extra: &[&str]| {
        let mut cmd = Command::new(python_with_grpcio());
        cmd.args([script, &port, "7", "3", "3000"]).args(extra);
        let out = wait_bounded(spawn_piped(&mut cmd), Duration::from_secs(30));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let line = text.lines().next().unwrap_or("").to_string();
        serde_json::from_str::<serde_json::Value>(&line)
            .unwrap_or_else(|_| panic!("{text} {}", stderr(&out)))
    };
    // 3,000 messages of 45 bytes from each mate: past grpcio's first 64 KiB connection
    // window, so the sink relays within the windows grpcio gives back (red with the
    // sink ignoring the connection's WINDOW_UPDATEs: 728 of 3,000; grpcio's streams
    // get their room from its SETTINGS). The client sends in batches of 500 so a slow
    // Python reader never has a window's worth unread (the sink would drop copies).
    let v = client(&[]);
    let each = serde_json::json!(3000);
    for (m, got) in v["received"].as_array().unwrap().iter().enumerate() {
        let mates: Vec<String> = (0..3).filter(|&o| o != m).map(|o| o.to_string()).collect();
        for mate in &mates {
            assert_eq!(got[mate], each, "member {m}: {v}");
        }
    }
    assert_eq!(v["intact"], serde_json::json!([true, true, true]), "{v}");
    let v = client(&["--no-room"]);
    assert_eq!(
        v,
        serde_json::json!({"code": "INVALID_ARGUMENT", "details": "no room metadata (a decimal room number)"})
    );
}

/// A server whose windows open slower than the frames come (a 200-byte window per
/// stream, given back every 250 ms: under 3 of the 20 frames a second each member
/// sends): frames wait in the connection's backlog, are counted sent when a
/// WINDOW_UPDATE lets them go and not sent when the run ends with them still waiting,
/// so `sent + not_sent` is every planned frame and `sent` is exactly what the server
/// received.
#[test]
fn frames_waiting_for_a_window_count_as_sent_when_they_go_and_not_sent_if_they_never_do() {
    let _g = load_lock();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/grpc/narrow_window.py"
    );
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats");
    let port = free_port();
    let _s = common::servers::spawn(
        Command::new("python3").args([
            script,
            &port.to_string(),
            stats.to_str().unwrap(),
            "200",
            "250",
        ]),
        Some(dir),
        port,
    );
    let (out, v) = grpc_frames(port, &["--grpc", "blaster.Room/Join"]);
    let fr = &v["frames"];
    assert!(fr.is_object(), "{}", stderr(&out));
    let n = |k: &str| count(fr, k);
    let planned = CONNECTIONS * MEMBERS * TICKS;
    assert_eq!(n("planned"), planned);
    assert!(n("flow_stalled") > planned / 2, "{fr}");
    assert!(n("not_sent") > 0, "frames still waiting at the end: {fr}");
    assert_eq!(n("sent") + n("not_sent"), planned, "{fr}");
    // What the server received, once it has read everything (blaster has closed).
    let mut said = std::fs::read_to_string(&stats).unwrap();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        let now = std::fs::read_to_string(&stats).unwrap();
        if now == said {
            break;
        }
        said = now;
    }
    assert_eq!(stat(&said, "messages"), n("sent"), "{said} {fr}");
}
