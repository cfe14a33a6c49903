//! `blaster plan` end to end: the issue 5 worked example through the binary, its JSON,
//! and bad inputs as one line with exit code 2. Only the `--from-frames` tests send
//! load: a short frames run against the broadcast sink, whose JSON the plan reads.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::process::{Command, Output};
use std::time::Duration;

fn plan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blaster"))
        .arg("plan")
        .args(args)
        .output()
        .expect("run blaster plan")
}

/// The worked example of issue 5.
const EXAMPLE: &[&str] = &[
    "--users",
    "4000000",
    "--msg-rate",
    "30",
    "--up-bytes",
    "50",
    "--down-bytes",
    "150",
    "--streams-per-conn",
    "100",
    "--cores",
    "32",
    "--nic-gbps",
    "25",
    "--cost-ns-per-msg",
    "300",
    "--syscalls-per-core",
    "200000",
];

/// The text line of dimension `name`.
fn line<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name} line in\n{text}"))
}

#[test]
fn worked_example_reproduces_the_issue_numbers() {
    let out = plan(EXAMPLE);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let conns = line(&text, "connections");
    assert!(
        conns.contains("40,000 connections") && conns.ends_with("-> 1"),
        "{conns}"
    );
    let cpu = line(&text, "cpu ");
    assert!(cpu.contains("72 + 12 = 84 cores"), "{cpu}");
    assert!(cpu.contains("20.8 effective cores"), "{cpu}");
    assert!(cpu.contains("4.04 -> 5"), "{cpu}");
    let up = line(&text, "uplink");
    assert!(
        up.contains("61 Gbps") && up.contains("17.5 Gbps") && up.contains("3.5 -> 4"),
        "{up}"
    );
    let down = line(&text, "downlink");
    assert!(
        down.contains("157 Gbps") && down.contains("9.0 -> 9") && down.contains("(binding)"),
        "{down}"
    );
    assert!(
        text.contains("answer: downlink binds: 9 generator machines + 1 coordinator = 10 machines"),
        "{text}"
    );
    assert!(
        text.contains(
            "with a 100 Gbps NIC: cpu binds: 5 generator machines + 1 coordinator = 6 machines"
        ),
        "{text}"
    );
    assert!(
        text.contains("2.4M syscalls/s / 200,000 per core = 12 cores"),
        "{text}"
    );
}

#[test]
fn json_carries_the_same_answer() {
    let mut args = EXAMPLE.to_vec();
    args.extend(["--json", "-"]);
    let out = plan(&args);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    assert_eq!(v["mode"], "plan");
    let p = &v["plan"];
    assert_eq!(p["connections"], 40_000);
    assert_eq!(p["cpu"]["total_cores"], 84.0);
    assert_eq!(p["binding"], "downlink");
    assert_eq!(p["generators"], 9);
    assert_eq!(p["machines"], 10);
    let down = &p["dimensions"][3];
    assert_eq!(down["name"], "downlink");
    assert!((down["demand"].as_f64().unwrap() - 157.44).abs() < 1e-9);
    assert_eq!(v["with_100gbps_nic"]["machines"], 6);
    // The text report moved to stderr.
    assert!(String::from_utf8_lossy(&out.stderr).contains("answer:"));
}

#[test]
fn cost_from_a_baseline_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baseline.json");
    std::fs::write(
        &path,
        r#"{"schema_version":1,"mode":"baseline","busy_cpu_ns_per_request_at_ceiling":300.0}"#,
    )
    .unwrap();
    let mut args: Vec<&str> = EXAMPLE
        .iter()
        .copied()
        .filter(|a| *a != "--cost-ns-per-msg" && *a != "300")
        .collect();
    let p = path.to_str().unwrap();
    args.extend(["--from", p]);
    let out = plan(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("72 + 12 = 84 cores"), "{text}");
    assert!(text.contains("measured in"), "{text}");
}

fn expect_usage_error(extra: &[(&str, Option<&str>)], needle: &str) {
    // The example with flags replaced (Some) or removed (None).
    let mut args: Vec<String> = Vec::new();
    let mut i = 0;
    while i < EXAMPLE.len() {
        let (flag, value) = (EXAMPLE[i], EXAMPLE[i + 1]);
        match extra.iter().find(|(f, _)| *f == flag) {
            Some((_, Some(v))) => args.extend([flag.to_string(), v.to_string()]),
            Some((_, None)) => {}
            None => args.extend([flag.to_string(), value.to_string()]),
        }
        i += 2;
    }
    for (f, v) in extra {
        if !EXAMPLE.contains(f)
            && let Some(v) = v
        {
            args.extend([f.to_string(), v.to_string()]);
        }
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = plan(&refs);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(
        err.contains(needle),
        "{args:?}: expected {needle:?} in {err:?}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(out.stdout.is_empty(), "no plan printed on error");
}

#[test]
fn bad_inputs_are_one_line_usage_errors() {
    expect_usage_error(
        &[("--users", Some("0"))],
        "--users: must be between 1 and 1000000000000, got 0",
    );
    expect_usage_error(&[("--users", None)], "--users: is required");
    expect_usage_error(
        &[("--msg-rate", Some("0"))],
        "--msg-rate: must be greater than 0",
    );
    expect_usage_error(&[("--up-bytes", Some("-5"))], "unexpected argument '-5'");
    expect_usage_error(
        &[("--down-bytes", Some("NaN"))],
        "--down-bytes: must be at least 0",
    );
    expect_usage_error(
        &[("--nic-gbps", Some("0"))],
        "--nic-gbps: must be at least 0.001 and at most 1000000, got 0",
    );
    expect_usage_error(
        &[("--cores", Some("many"))],
        "invalid value 'many' for '--cores",
    );
    expect_usage_error(
        &[("--cost-ns-per-msg", None)],
        "--cost-ns-per-msg: is required",
    );
    expect_usage_error(
        &[("--from", Some("/nonexistent/baseline.json"))],
        "--from: give --cost-ns-per-msg or --from, not both",
    );
    expect_usage_error(
        &[
            ("--cost-ns-per-msg", None),
            ("--from", Some("/nonexistent/baseline.json")),
        ],
        "--from: cannot read /nonexistent/baseline.json",
    );
    expect_usage_error(
        &[("--cpu-watermark", Some("1.5"))],
        "--cpu-watermark: must be at least 0.01 and at most 1, got 1.5",
    );
    expect_usage_error(
        &[("--streams-per-conn", Some("0"))],
        "--streams-per-conn: must be at least 1",
    );
    expect_usage_error(
        &[("--conns-per-machine", Some("0"))],
        "--conns-per-machine: must be at least 1",
    );
}

#[test]
fn a_file_that_is_not_a_baseline_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.json");
    std::fs::write(&path, r#"{"hello":"world"}"#).unwrap();
    expect_usage_error(
        &[
            ("--cost-ns-per-msg", None),
            ("--from", Some(path.to_str().unwrap())),
        ],
        "not a blaster baseline report",
    );
}

/// A frames run against the broadcast sink: 100 connections in rooms of 10, a frame
/// every 20 ms for 2 s; its JSON written to `path` (returned parsed).
fn frames_run_json(path: &std::path::Path) -> serde_json::Value {
    let _l = load_lock();
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "10"]);
    let mut args = vec!["run", "--cores", "0"];
    args.extend(frames_args(&sink.addr, "2s"));
    args.extend(["--json", path.to_str().unwrap()]);
    let out = run(&args, Duration::from_secs(60));
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    read_json(&path.to_path_buf())
}

/// Issue 14 item 5: the plan's message CPU is the frames run's measured client CPU per
/// frame, charged for every message up and down, and says where it came from.
#[test]
fn plan_from_a_frames_run_charges_its_measured_cpu_per_frame() {
    let dir = tempfile::tempdir().unwrap();
    let run_path = dir.path().join("frames.json");
    let v = frames_run_json(&run_path);
    let fr = &v["frames"];
    let (sent, received, busy) = (f(fr, "sent"), f(fr, "received"), f(fr, "busy_cpu_ns"));
    assert!(sent > 0.0 && received > 0.0, "{fr}");
    // The per-frame figure is the busy CPU over every frame sent and received; the
    // busy CPU is some of the workers' CPU time, never none of it.
    let per_frame = f(fr, "cpu_ns_per_frame");
    assert!(
        (per_frame - busy / (sent + received)).abs() <= 1e-9 * per_frame,
        "{fr}"
    );
    let cpu: f64 = v["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| f(w, "cpu_ns"))
        .sum();
    assert!(busy > 0.0 && busy <= cpu, "busy {busy} of {cpu} ns CPU");
    assert!((f(fr, "cpu_ns_per_frame_received") - busy / received).abs() <= 1e-9 * busy);

    // A load with the run's mix (9 frames down per frame up, rooms of 10).
    let p = run_path.to_str().unwrap();
    let load = [
        "--users",
        "1000000",
        "--msg-rate",
        "30",
        "--down-msg-rate",
        "270",
        "--up-bytes",
        "50",
        "--down-bytes",
        "50",
        "--cores",
        "32",
        "--nic-gbps",
        "25",
        "--syscalls-per-core",
        "200000",
        "--from-frames",
        p,
    ];
    let mut args = load.to_vec();
    args.extend(["--json", "-"]);
    let out = plan(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let expected_cores = 1e6 * (30.0 + 270.0) * per_frame / 1e9;
    let cores = f(&j, "plan.cpu.message_cores");
    assert!(
        (cores - expected_cores).abs() <= 1e-9 * expected_cores,
        "{cores} cores, expected {expected_cores} from {per_frame} ns per frame"
    );
    assert_eq!(f(&j, "input.cost_ns_per_msg"), per_frame);
    assert_eq!(j["input"]["cost_from_frames"]["file"], p);
    assert_eq!(f(&j, "input.cost_from_frames.sent"), sent);
    assert_eq!(f(&j, "input.cost_from_frames.received"), received);
    let source = j["input"]["cost_source"].as_str().unwrap();
    assert!(source.contains(&format!("measured in {p}")), "{source}");
    // The run's mix is the load's: no note that the cost holds at another mix.
    assert!(
        !j["notes"].to_string().contains("frames per frame sent"),
        "{}",
        j["notes"]
    );

    // The text report says so too, with the message cores it computed.
    let out = plan(&load);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(&format!("measured in {p}")), "{text}");
    let cpu_line = line(&text, "cpu:");
    let want = format!(
        "x {} ns = {} cores for messages",
        blaster::units::fmt_amount(per_frame),
        blaster::units::fmt_amount(expected_cores)
    );
    assert!(cpu_line.contains(&want), "{want:?} not in {cpu_line}");

    // The same figures with a mix the run did not measure: said so.
    let mut other = load.to_vec();
    other[5] = "30";
    let out = plan(&other);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("frames per frame sent, this load 1"),
        "{text}"
    );

    // A frames run that received nothing measured nothing: one line, exit 2.
    let mut none = v.clone();
    none["frames"]["received"] = 0.into();
    let none_path = dir.path().join("none.json");
    std::fs::write(&none_path, none.to_string()).unwrap();
    expect_usage_error(
        &[
            ("--cost-ns-per-msg", None),
            ("--from-frames", Some(none_path.to_str().unwrap())),
        ],
        "received 0 frames: no CPU per frame was measured",
    );
    // And --from, which takes a cost per request, refuses the frames run.
    expect_usage_error(
        &[("--cost-ns-per-msg", None), ("--from", Some(p))],
        "a frames run report (its cost is per frame, not per request): give it with --from-frames",
    );
}

#[test]
fn from_frames_refuses_a_report_that_is_not_a_frames_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baseline.json");
    std::fs::write(
        &path,
        r#"{"schema_version":1,"mode":"baseline","busy_cpu_ns_per_request_at_ceiling":300.0}"#,
    )
    .unwrap();
    let p = path.to_str().unwrap();
    expect_usage_error(
        &[("--cost-ns-per-msg", None), ("--from-frames", Some(p))],
        &format!("--from-frames: {p}: not a frames run report (no `frames` figures)"),
    );
    expect_usage_error(
        &[("--from-frames", Some(p))],
        "--from-frames: give --cost-ns-per-msg or --from-frames, not both",
    );
}

/// Issue 25 item 4: huge or tiny inputs aborted (exit 134: allocating one entry per
/// machine), panicked (exit 101) or grew without bound. Each is now a usage error
/// naming the flag and the bound, fast and within a small address space.
#[test]
fn out_of_range_inputs_are_usage_errors_fast_and_small() {
    let cases: [(&str, &str, &str); 6] = [
        (
            "--syscalls-per-core",
            "0.0000001",
            "--syscalls-per-core: must be at least 1000 and at most 1000000000000, got 1e-7",
        ),
        (
            "--users",
            "18446744073709551615",
            "--users: must be between 1 and 1000000000000, got 18446744073709551615",
        ),
        (
            "--cpu-watermark",
            "1e-300",
            "--cpu-watermark: must be at least 0.01 and at most 1, got 1e-300",
        ),
        (
            "--nic-watermark",
            "1e-300",
            "--nic-watermark: must be at least 0.01 and at most 1, got 1e-300",
        ),
        (
            "--nic-gbps",
            "1e-300",
            "--nic-gbps: must be at least 0.001 and at most 1000000, got 1e-300",
        ),
        (
            "--cost-ns-per-msg",
            "1e300",
            "--cost-ns-per-msg: must be at least 0 and at most 1000000000, got 1e300",
        ),
    ];
    for (flag, value, needle) in cases {
        // The example without `flag`, then `flag value`.
        let mut cleaned: Vec<&str> = Vec::new();
        let mut k = 0;
        while k < EXAMPLE.len() {
            if EXAMPLE[k] != flag {
                cleaned.extend([EXAMPLE[k], EXAMPLE[k + 1]]);
            }
            k += 2;
        }
        let mut args: Vec<&str> = vec!["plan"];
        args.extend(cleaned);
        args.extend([flag, value]);
        let t = std::time::Instant::now();
        let out = run_with_memory_limit(&args, 256 << 20, Duration::from_secs(30));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{flag} {value}: {:?} {err}",
            out.status
        );
        assert!(
            err.contains(needle),
            "{flag} {value}: {err:?} lacks {needle:?}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{flag}: {:?}",
            t.elapsed()
        );
    }
    // In range one by one, together past any fleet: a usage error naming the inputs.
    let mut args: Vec<&str> = vec!["plan"];
    args.extend(EXAMPLE);
    args.extend([
        "--users",
        "1000000000000",
        "--streams-per-conn",
        "1",
        "--conns-per-machine",
        "1",
    ]);
    let args: Vec<&str> = dedup_flags(&args);
    let out = run_with_memory_limit(&args, 256 << 20, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{:?} {err}", out.status);
    assert!(
        err.contains("--users: the load needs 1.00e12 generator machines (connections binds")
            && err.contains("more than the 1,000,000,000 a plan sizes"),
        "{err}"
    );
}

/// `args` with each flag kept once, its last value winning (the first entry is the
/// subcommand).
fn dedup_flags<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut out: Vec<&'a str> = vec![args[0]];
    let mut pairs: Vec<(&'a str, &'a str)> = Vec::new();
    for p in args[1..].chunks(2) {
        match pairs.iter_mut().find(|(f, _)| *f == p[0]) {
            Some(e) => e.1 = p[1],
            None => pairs.push((p[0], p[1])),
        }
    }
    for (f, v) in pairs {
        out.extend([f, v]);
    }
    out
}

/// Issue 25 item 4: `--users 100000000000` climbed at 170 MB/s, listing a command per
/// machine. The answer is counted, not built: 1.5 million generators in a few KB, the
/// shards as one command with `$SHARD`.
#[test]
fn a_fleet_of_a_million_machines_is_answered_small_and_fast() {
    let mut args: Vec<&str> = vec!["plan"];
    args.extend(EXAMPLE);
    args.extend([
        "--users",
        "100000000000",
        "--streams-per-conn",
        "1",
        "--json",
        "-",
    ]);
    let args = dedup_flags(&args);
    let t = std::time::Instant::now();
    let out = run_with_memory_limit(&args, 256 << 20, Duration::from_secs(30));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{:?} {}",
        out.status,
        stderr(&out)
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(
        out.stdout.len() < 16 << 10,
        "{} bytes of JSON",
        out.stdout.len()
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let fleet = &v["fleet"];
    assert_eq!(fleet["shards"], 1_528_847, "{fleet}");
    assert!(fleet["shard_commands"].is_null(), "{fleet}");
    let cmd = fleet["shard_command"].as_str().unwrap();
    assert!(
        cmd.contains("--shard $SHARD/1528847") && cmd.contains("--json shard-$SHARD.json"),
        "{cmd}"
    );
    let text = stderr(&out);
    assert!(
        text.contains("(one command for every shard, with SHARD = 0 .. 1528846)"),
        "{text}"
    );
    assert!(
        text.contains("more shards than `blaster run --shard` takes"),
        "{text}"
    );
}

/// The shard command with `$SHARD` is, for each index, the listed command of that shard.
#[test]
fn the_shard_command_template_is_each_listed_command() {
    // A 100 Gbps NIC: the CPU binds, 5 generators, listed one by one.
    let mut args: Vec<&str> = vec!["plan"];
    args.extend(EXAMPLE);
    args.extend(["--nic-gbps", "100", "--json", "-"]);
    let args = dedup_flags(&args);
    let out = plan(&args[1..]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let fleet = &v["fleet"];
    let template = fleet["shard_command"].as_str().unwrap();
    let listed = fleet["shard_commands"].as_array().unwrap();
    assert_eq!(listed.len(), 5);
    for (i, c) in listed.iter().enumerate() {
        assert_eq!(
            template.replace("$SHARD", &i.to_string()),
            c.as_str().unwrap()
        );
    }
}

/// Issue 23 part 3: with `--from-frames` the plan says how many members per connection
/// the cost was measured with (absent: 1), warns when the plan's streams per connection
/// differ, and prints frames commands for the fleet: the streams as members per
/// connection, each machine's share of the connections, the run's rooms, a tick of one
/// message interval. A minimal frames report written here; no load is sent.
#[test]
fn plan_from_frames_prints_frames_commands_and_warns_of_other_members_per_connection() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = |name: &str, members: Option<u64>| {
        let mut fr = serde_json::json!({
            "proto": "blaster", "room_size": 10, "senders_per_room": 10, "sent": 1000,
            "received": 9000, "busy_cpu_ns": 5_000_000, "cpu_basis": "busy",
            "cpu_ns_per_frame": 500.0,
        });
        if let Some(m) = members {
            fr["members_per_connection"] = m.into();
        }
        let v = serde_json::json!({"mode": "frames", "valid": true, "frames": fr});
        let p = dir.path().join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p.to_str().unwrap().to_string()
    };
    let one = fixture("one.json", None);
    let hundred = fixture("hundred.json", Some(100));
    let load = |file: &str| -> Vec<String> {
        [
            "--users",
            "4000000",
            "--msg-rate",
            "30",
            "--down-msg-rate",
            "270",
            "--up-bytes",
            "50",
            "--down-bytes",
            "50",
            "--streams-per-conn",
            "100",
            "--cores",
            "32",
            "--nic-gbps",
            "25",
            "--syscalls-per-core",
            "200000",
            "--target",
            "10.0.0.5:9000",
            "--from-frames",
            file,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let mut args = load(&one);
    args.extend(["--json".into(), "-".into()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = plan(&refs);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(j["input"]["cost_from_frames"]["members_per_connection"], 1);
    let w = j["members_per_connection_warning"].as_str().unwrap_or("");
    assert!(
        w.contains("1 member per connection, this plan 100 streams") && w.contains("overstates"),
        "{w}"
    );
    let fleet = &j["fleet"];
    assert_eq!(fleet["workload"], "frames");
    // One run of the 40,000 connections; each shard its whole rooms.
    let shards = fleet["shards"].as_u64().unwrap();
    let want = format!(
        "blaster run --target 10.0.0.5:9000 --workload frames --members-per-connection 100 \
         --connections 40000 --room-size 10 --tick 33333us --frame-size 50 --duration 60s \
         --cores 1-31 --shard $SHARD/{shards} --start-at $START --run-id $RUN_ID --json shard-$SHARD.json"
    );
    assert_eq!(fleet["shard_command"], want.as_str(), "{fleet}");

    // The text: the members measured with, the warning on one line, the command.
    let refs: Vec<&str> = args[..args.len() - 2].iter().map(String::as_str).collect();
    let out = plan(&refs);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("with 1 member per connection"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("warning: ")).count(),
        1,
        "{text}"
    );
    assert!(text.lines().any(|l| l.trim() == want), "{want}\n{text}");
    assert!(!text.contains("--rate"), "{text}");

    // Measured with 100 members per connection: said, no warning.
    let args = load(&hundred);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = plan(&refs);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("with 100 members per connection"), "{text}");
    assert!(!text.contains("warning:"), "{text}");
}
