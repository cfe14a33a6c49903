//! Frames runs sharded (issue 36 item 1): three `--shard i/3` processes with one start
//! instant against one broadcast sink are one run of every room: each runs whole rooms
//! numbered as in the whole run (no room shared, no frame foreign), and `blaster merge`
//! of their reports counts exactly what one process running every room counts. Two
//! runs on the same rooms are named; one process holds frames connections past its
//! descriptor limit.
mod common;
use common::servers::{nats, require};
use common::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const CONNECTIONS: &str = "60";

/// `blaster run` of 60 connections in rooms of 10 (6 rooms) for 2 s against `addr`,
/// with `extra`; the report.
fn frames_run(addr: &str, extra: &[&str], json: &std::path::Path) -> Command {
    let mut c = Command::new(bin());
    c.args(["run", "--cores", "0", "--json", json.to_str().unwrap()])
        .args(frames_args_with(addr, CONNECTIONS, "2s"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn n(v: &Value, key: &str) -> u64 {
    v["frames"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("frames.{key}: {v}"))
}

/// Three `--shard i/3` runs with one start instant and run id against `addr`, each
/// with `extra` and the shard's own arguments (`per_shard(i)`), then `blaster merge`:
/// the shards' reports and the merged one.
fn three_shards(
    addr: &str,
    extra: &[&str],
    per_shard: impl Fn(usize) -> Vec<String>,
) -> (Vec<Value>, Value) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let at = (unix_ms() + 2_000).to_string();
    let files: Vec<_> = (0..3).map(|i| d.join(format!("shard-{i}.json"))).collect();
    let children: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let shard = format!("{i}/3");
            let mut args = vec!["--shard", &shard, "--start-at", &at, "--run-id", "rooms"];
            args.extend_from_slice(extra);
            let own = per_shard(i);
            args.extend(own.iter().map(String::as_str));
            frames_run(addr, &args, f).spawn().unwrap()
        })
        .collect();
    for (i, c) in children.into_iter().enumerate() {
        let out = wait_bounded(c, Duration::from_secs(60));
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "shard {i}: {}",
            stderr(&out)
        );
    }
    let shards: Vec<Value> = files.iter().map(read_json).collect();
    for (i, s) in shards.iter().enumerate() {
        // Whole rooms apart: rooms 0-1, 2-3, 4-5 of the run's six.
        assert_eq!(
            (n(s, "first_room"), n(s, "rooms")),
            (2 * i as u64, 2),
            "shard {i}"
        );
        assert_eq!(n(s, "foreign"), 0, "shard {i}");
        assert!(
            !s["diagnosis"].to_string().contains("frames_collide"),
            "shard {i}"
        );
        assert_eq!(n(s, "received"), n(s, "expected"), "shard {i}");
    }
    let merged = d.join("merged.json");
    let mut args = vec!["merge".to_string()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    args.extend(["--json".into(), merged.display().to_string()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run(&refs, Duration::from_secs(30));
    assert!(matches!(o.status.code(), Some(0 | 3)), "{}", stderr(&o));
    (shards, read_json(&merged))
}

#[test]
fn three_shards_are_one_run_of_every_room() {
    let _g = load_lock();
    let dir = tempfile::tempdir().unwrap();

    // One process, every room.
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "10"]);
    let whole = dir.path().join("whole.json");
    let out = wait_bounded(
        frames_run(&sink.addr, &[], &whole).spawn().unwrap(),
        Duration::from_secs(60),
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    sink.stop();
    let w = read_json(&whole);

    // Three shards, one start instant, one run id, one sink.
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "10"]);
    let (_, m) = three_shards(&sink.addr, &[], |_| vec![]);
    sink.stop();
    // The merged run is the whole run: same rooms, same planned and expected frames,
    // every one received, none foreign or twice.
    for key in ["rooms", "first_room", "planned", "expected", "received"] {
        assert_eq!(n(&m, key), n(&w, key), "frames.{key}");
    }
    for key in ["lost", "foreign", "duplicates"] {
        assert_eq!((n(&m, key), n(&w, key)), (0, 0), "frames.{key}");
    }
    assert_eq!(n(&w, "planned"), 60 * 100, "{w}");
}

#[test]
fn three_shards_from_three_addresses_through_one_nats_server() {
    let _g = load_lock();
    let (_nats, port) = nats(&[]);
    let addr = format!("127.0.0.1:{port}");
    // Subjects carry the run's room ids: the shards' rooms never meet on the server.
    let (_, m) = three_shards(&addr, &["--frame-proto", "nats"], |i| {
        vec!["--source-ip".into(), format!("127.0.0.{}", 2 + i)]
    });
    // Joined before the first tick: every frame to its 9 room mates.
    assert_eq!(n(&m, "planned"), 6_000, "{m}");
    assert_eq!(n(&m, "expected"), 54_000, "{m}");
    assert_eq!(n(&m, "received"), 54_000, "{m}");
    assert_eq!((n(&m, "foreign"), n(&m, "duplicates")), (0, 0), "{m}");
}

#[test]
fn a_shard_without_a_room_per_core_is_refused() {
    // 20 connections in rooms of 10 are 2 rooms: 2 shards of one core fit, 3 do not.
    let at = (unix_ms() + 3_600_000).to_string();
    let args = [
        "run",
        "--target",
        "127.0.0.1:9",
        "--workload",
        "frames",
        "--connections",
        "20",
        "--room-size",
        "10",
        "--cores",
        "0",
        "--shard",
        "0/3",
        "--start-at",
        &at,
    ];
    assert_usage(&args, "at most 2 shards fit");
}

#[test]
fn two_copies_of_one_command_on_one_sink_are_named() {
    let _g = load_lock();
    let dir = tempfile::tempdir().unwrap();
    // The mistake a fleet without --shard makes: two machines, the same rooms.
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "20"]);
    let files: Vec<_> = (0..2)
        .map(|i| dir.path().join(format!("copy-{i}.json")))
        .collect();
    // The printed command's one start instant. The sink's rooms take twenty members,
    // as a broker's take any number: both copies' rooms of ten land in the same rooms
    // (a sink room of ten would refuse the copy whose members came second, which then
    // sees closed connections rather than another run's frames).
    let at = (unix_ms() + 1_500).to_string();
    let children: Vec<_> = files
        .iter()
        .map(|f| {
            frames_run(&sink.addr, &["--start-at", &at], f)
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = wait_bounded(c, Duration::from_secs(60));
        assert!(
            matches!(out.status.code(), Some(0 | 1 | 3)),
            "{}",
            stderr(&out)
        );
    }
    sink.stop();
    for f in &files {
        let v = read_json(f);
        assert!(n(&v, "foreign") + n(&v, "duplicates") > 10, "{v}");
        let codes: Vec<&str> = v["diagnosis"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["code"].as_str())
            .collect();
        assert!(codes.contains(&"frames_collide"), "{codes:?}");
    }
}

#[test]
fn frames_connections_past_the_descriptor_limit() {
    let _g = load_lock();
    // RLIMIT_NOFILE 1,100 and 3,000 frames connections: sockets live in io_uring file
    // tables of at most the limit each, so the worker spreads them over 3 rings.
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "10"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("held.json");
    let prlimit = require("prlimit", "util-linux");
    let child = Command::new(prlimit)
        .args(["--nofile=1100:1100", bin(), "run", "--cores", "0", "--json"])
        .arg(&json)
        .args([
            "--target",
            &sink.addr,
            "--workload",
            "frames",
            "--connections",
            "3000",
        ])
        .args([
            "--room-size",
            "10",
            "--tick",
            "100ms",
            "--duration",
            "2s",
            "--quiet",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_bounded(child, Duration::from_secs(60));
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    sink.stop();
    let v = read_json(&json);
    assert_eq!(
        v["connections"]["established"], 3000,
        "{}",
        v["connections"]
    );
    assert!(
        v["connections"]["rings_per_core"].as_u64().unwrap() >= 3,
        "{}",
        v["connections"]
    );
    assert_eq!(n(&v, "received"), n(&v, "expected"), "{}", v["frames"]);
}
