//! `blaster preflight` (issue 6, item 4) and core alignment (item 3), driven through
//! the binary: a plan that fits passes every check, one beyond the port range fails
//! `ports.range` with exit 1, `--json -` parses as the script's array, every check
//! name the binary prints is one `scripts/preflight.sh` prints too, `run` refuses a
//! FAIL of the host checks with the check's line before connecting, and a run against
//! the sink on `--cores 0` reports every worker thread on CPU 0.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;

use common::{Sink, bin, load_lock, skip, wait_bounded};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/preflight.sh");

/// `blaster ARGS`, with `PREFLIGHT_ROOT` when given, bounded in time.
fn blaster(args: &[&str], root: Option<&std::path::Path>) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(r) = root {
        cmd.env("PREFLIGHT_ROOT", r);
    }
    wait_bounded(cmd.spawn().expect("start blaster"), Duration::from_secs(30))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Ports in this machine's ip_local_port_range.
fn port_range_size() -> usize {
    let r = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let v: Vec<usize> = r.split_whitespace().map(|x| x.parse().unwrap()).collect();
    v[1] - v[0] + 1
}

/// Every check name scripts/preflight.sh can print: the second word of its `emit` and
/// the first of its `unreadable` calls (names built from a loop variable expanded).
fn script_names() -> Vec<String> {
    let src = std::fs::read_to_string(SCRIPT).unwrap();
    let mut names = Vec::new();
    for line in src.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let name = match words.as_slice() {
            ["emit", status, name, ..] if status.chars().all(|c| c.is_ascii_uppercase()) => name,
            ["unreadable", name, ..] => name,
            _ => continue,
        };
        let name = name.trim_matches('"');
        if name.contains("${dir}") {
            names.push(name.replace("${dir}", "rmem"));
            names.push(name.replace("${dir}", "wmem"));
        } else {
            names.push(name.to_string());
        }
    }
    names
}

#[test]
fn a_plan_that_fits_passes_every_check() {
    let o = blaster(
        &[
            "preflight",
            "--target",
            "127.0.0.1:9",
            "--rate",
            "100",
            "--connections",
            "100",
        ],
        None,
    );
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    for name in ["fd.limit", "ports.range", "mem.tcp", "cores.online"] {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in:\n{out}"));
        assert!(line.starts_with("PASS  "), "{line}");
        assert!(
            line.contains(" saw: ") && line.contains("; need: "),
            "{line}"
        );
    }
}

#[test]
fn too_many_connections_for_the_port_range_fail_ports_range() {
    let conns = (port_range_size() + 1).to_string();
    let o = blaster(
        &[
            "preflight",
            "--target",
            "127.0.0.1:9",
            "--rate",
            "100",
            "--connections",
            &conns,
        ],
        None,
    );
    let out = text(&o.stdout);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("FAIL  ports.range"))
        .unwrap_or_else(|| panic!("no FAIL ports.range in:\n{out}"));
    assert!(
        line.contains(&format!("need: {conns} ports per pair")),
        "{line}"
    );
    assert!(
        line.contains("fix: sysctl -w net.ipv4.ip_local_port_range"),
        "{line}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("ports.range"), "{err}");
}

#[test]
fn json_is_the_scripts_array_and_names_are_the_scripts() {
    let script = script_names();
    assert!(script.len() > 20, "parsed too few names: {script:?}");
    for name in blaster::cmd::preflight::checks::CHECK_NAMES {
        assert!(script.iter().any(|s| s == name), "{name} not in {script:?}");
    }
    let big = (port_range_size() + 1).to_string();
    for (conns, code) in [("100", 0), (big.as_str(), 1)] {
        let o = blaster(
            &[
                "preflight",
                "--target",
                "127.0.0.1:9",
                "--rate",
                "100",
                "--connections",
                conns,
                "--json",
                "-",
            ],
            None,
        );
        assert_eq!(o.status.code(), Some(code), "{}", text(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
        let items = v.as_array().expect("an array");
        // fd.limit, ports.range, mem.tcp, cores.online and host.noise (issue 33).
        assert_eq!(items.len(), 5, "{v}");
        for it in items {
            let obj = it.as_object().expect("objects");
            let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
            keys.sort();
            // host.noise carries the probe's figures beside the script's five keys.
            if it["check"] == "host.noise" {
                assert!(it["noise"]["timer_late_p99_ns"].is_u64(), "{it}");
                keys.retain(|k| *k != "noise");
            }
            assert_eq!(keys, ["check", "fix", "need", "saw", "status"], "{it}");
            let status = it["status"].as_str().unwrap();
            assert!(["PASS", "WARN", "FAIL", "INFO"].contains(&status), "{it}");
            let name = it["check"].as_str().unwrap();
            assert!(script.iter().any(|s| s == name), "{name} not in the script");
        }
        let failed: Vec<&str> = items
            .iter()
            .filter(|i| i["status"] == "FAIL")
            .map(|i| i["check"].as_str().unwrap())
            .collect();
        assert_eq!(
            failed,
            if code == 0 {
                vec![]
            } else {
                vec!["ports.range"]
            }
        );
    }
}

#[test]
fn run_refuses_an_offline_control_core_with_the_checks_line() {
    // A fixture machine where only core 0 is online, and a control core of 1: the run
    // must stop at cores.online, before it tries the (closed) target.
    let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
    if usable < 2 {
        skip(
            "run_refuses_an_offline_control_core_with_the_checks_line",
            "needs two usable cores for --control-core 1",
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let cpu = d.path().join("sys/devices/system/cpu");
    std::fs::create_dir_all(&cpu).unwrap();
    std::fs::write(cpu.join("online"), "0\n").unwrap();
    let port = common::free_port().to_string();
    let target = format!("127.0.0.1:{port}");
    let args = [
        "run",
        "--target",
        &target,
        "--rate",
        "100",
        "--cores",
        "0",
        "--control-core",
        "1",
        "--duration",
        "1s",
    ];
    let o = blaster(&args, Some(d.path()));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("blaster: FAIL  cores.online        saw: cores 1 are not online"),
        "{err}"
    );
    // `blaster preflight` says the same, among its other lines.
    let mut pre = args;
    pre[0] = "preflight";
    let o = blaster(&pre, Some(d.path()));
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stdout).contains("FAIL  cores.online"));
}

#[test]
fn every_worker_thread_stays_on_its_core() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let o = blaster(
        &[
            "run",
            "--target",
            &sink.addr,
            "--rate",
            "2000",
            "--duration",
            "1s",
            "--cores",
            "0",
            "--json",
            "-",
        ],
        None,
    );
    // 3: a busy host may make the run invalid; where threads ran is reported either way.
    assert!(
        matches!(o.status.code(), Some(0 | 3)),
        "{}",
        text(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    let threads = v["threads"].as_array().expect("threads[]");
    let control = v["config"]["control_core"].as_u64().expect("control_core");
    let workers: Vec<&serde_json::Value> = threads
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with("blaster-w"))
        .collect();
    assert_eq!(workers.len(), 1, "{threads:?}");
    for t in &workers {
        assert_eq!(t["cpu"], 0, "{t}");
        assert!(t["tid"].as_u64().unwrap() > 0, "{t}");
    }
    // The main thread (collector) ran on the control core.
    let main = threads
        .iter()
        .find(|t| t["name"] == "blaster")
        .expect("main thread");
    assert_eq!(main["cpu"].as_u64(), Some(control), "{main}");
    // io-wq helpers, when the kernel started any, stayed on the worker's core.
    let features = v["io_uring_features"].as_array().unwrap();
    if features.iter().any(|f| f == "iowq_affinity") {
        for t in threads
            .iter()
            .filter(|t| t["name"].as_str().unwrap().starts_with("iou-wrk-"))
        {
            assert_eq!(t["cpu"], 0, "{t}");
        }
    }
    assert!(
        !text(&o.stderr).contains("warning: thread"),
        "{}",
        text(&o.stderr)
    );
}
