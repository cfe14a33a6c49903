//! `blaster plan` end to end: the issue 5 worked example through the binary, its JSON,
//! and bad inputs as one line with exit code 2. Only the `--from-frames` tests send
//! load: a short frames run against the broadcast sink, whose JSON the plan reads.
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
        "--users: must be at least 1, got 0",
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
        "--nic-gbps: must be greater than 0",
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
        "--cpu-watermark: must be greater than 0 and at most 1, got 1.5",
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
        blaster::capacity::fmt_amount(per_frame),
        blaster::capacity::fmt_amount(expected_cores)
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
