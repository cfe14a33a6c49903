//! `blaster plan` end to end: the issue 5 worked example through the binary, its JSON,
//! and bad inputs as one line with exit code 2. Nothing here sends load.
use std::process::{Command, Output};

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
