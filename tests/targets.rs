//! A result per target (issue 37 item 5): with several `--target`, the report gives
//! each destination its own latency, errors and rate beside the total, so one run
//! tells which server of a pool is slow. Against two HTTP servers on loopback, nginx
//! and a Python server that answers each request 20 ms late.
mod common;
use common::servers::{Server, nginx_listening, spawn};
use common::*;
use std::process::Command;
use std::time::Duration;

/// An HTTP/1.1 keep-alive server that sleeps 20 ms before each reply (nginx-light
/// has no delay of its own): `200 ok`, but every fifth a `503`, so this target also
/// fails where nginx does not. One thread per connection, the reply in one write with
/// Nagle off, so the delay is the only one.
const DELAYED_HTTP: &str = r#"
import itertools, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
n = itertools.count(1)
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def do_GET(self):
        time.sleep(0.02)
        if next(n) % 5 == 0:
            self.wfile.write(b"HTTP/1.1 503 Busy\r\nContent-Length: 2\r\n\r\nno")
            return
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    def log_message(self, *a):
        pass
ThreadingHTTPServer.request_queue_size = 128
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

fn delayed_http() -> (Server, u16) {
    let port = free_port();
    let mut cmd = Command::new("python3");
    cmd.args(["-c", DELAYED_HTTP, &port.to_string()]);
    (spawn(&mut cmd, None, port), port)
}

fn target<'v>(v: &'v serde_json::Value, addr: &str) -> &'v serde_json::Value {
    v["targets"]
        .as_array()
        .expect("a targets array")
        .iter()
        .find(|t| t["address"] == addr)
        .unwrap_or_else(|| panic!("no target {addr} in {}", v["targets"]))
}

fn p50(t: &serde_json::Value) -> u64 {
    t["latency_ns"]["p50"].as_u64().unwrap()
}

/// The pool: nginx and the 20 ms server (kept running while held), and their
/// addresses, fast then slow.
fn pool() -> ((Server, Server), String, String) {
    let (nginx, fast_port) = nginx_listening(1_000_000, 128, None, "");
    let (slow, slow_port) = delayed_http();
    (
        (nginx, slow),
        format!("127.0.0.1:{fast_port}"),
        format!("127.0.0.1:{slow_port}"),
    )
}

/// `run` against both targets at 200/s for 2 s over 8 connections, then `extra`.
fn run_args<'a>(fast: &'a str, slow: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "run",
        "--target",
        fast,
        "--target",
        slow,
        "--cores",
        "0",
        "--http",
        "GET /",
        "--rate",
        "200",
        "--duration",
        "2s",
        "--connections",
        "8",
    ];
    a.extend_from_slice(extra);
    a
}

/// The slow target's p50 is at least 20 ms and the fast one's well under; each got
/// requests; the slow one's 503s are its errors (`error_reply`), the fast one has
/// none; the per-target counts add up exactly to the run's.
fn assert_split(v: &serde_json::Value, fast: &str, slow: &str) {
    let (f, s) = (target(v, fast), target(v, slow));
    assert_eq!(f["errors"], 0, "{f}");
    assert!(s["errors"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["errors_by_kind"]["error_reply"], s["errors"], "{s}");
    assert!(p50(s) >= 20_000_000, "slow p50 {} ns: {s}", p50(s));
    assert!(p50(f) < 10_000_000, "fast p50 {} ns: {f}", p50(f));
    for t in [f, s] {
        assert!(t["completed"].as_u64().unwrap() > 0, "{t}");
        assert!(t["achieved_rps"].as_f64().unwrap() > 0.0, "{t}");
        assert_eq!(t["latency_ns"]["count"], t["completed"], "{t}");
    }
    for key in ["completed", "sent", "errors"] {
        let sum: u64 = (v["targets"].as_array().unwrap().iter())
            .map(|t| t[key].as_u64().unwrap())
            .sum();
        assert_eq!(sum, v["requests"][key].as_u64().unwrap(), "{key}");
    }
}

/// One run over the pool: the JSON's `targets` tell the slow server from the fast one
/// and add up to the totals; the text report, the `.targets.csv` beside `--csv` and
/// the HTML page show each destination and the total.
#[test]
fn each_target_has_its_own_latency_and_the_counts_add_up() {
    let _lock = load_lock();
    let (_servers, fast, slow) = pool();
    let (d, json) = tmp_json();
    let csv = d.path().join("r.csv");
    let (json_s, csv_s) = (json.to_str().unwrap(), csv.to_str().unwrap());
    let out = run(
        &run_args(&fast, &slow, &["--json", json_s, "--csv", csv_s]),
        Duration::from_secs(60),
    );
    // A loaded host may make the run invalid (exit 3); the per-target figures hold.
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&json);
    assert_split(&v, &fast, &slow);
    assert!(v["requests"]["completed"].as_u64().unwrap() > 300);
    let text = String::from_utf8_lossy(&out.stdout);
    let rows = std::fs::read_to_string(d.path().join("r.targets.csv")).expect("r.targets.csv");
    let html = d.path().join("r.html");
    let o = run(
        &["report", "--html", html.to_str().unwrap(), json_s],
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<h2>Targets</h2>"), "no targets section");
    for row in [fast.as_str(), slow.as_str(), "total"] {
        assert!(
            text.lines().any(|l| l.starts_with(row)),
            "no row {row} in:\n{text}"
        );
        assert!(
            rows.lines().any(|l| l.starts_with(&format!("{row},"))),
            "no row {row} in:\n{rows}"
        );
        assert!(
            page.contains(&format!("<td class=\"l\">{row}</td>")),
            "{row}"
        );
    }
    // Every total row gives the run's errors by kind, the HTML page's too.
    let kinds = format!("error_reply={}", v["requests"]["errors"]);
    let total_html = (page.lines())
        .find(|l| l.contains("<td class=\"l\">total</td>"))
        .unwrap();
    assert!(total_html.contains(&kinds), "{kinds}: {total_html}");
    for total in [text.as_ref(), rows.as_str()] {
        let line = total.lines().find(|l| l.starts_with("total")).unwrap();
        assert!(line.contains(&kinds), "{kinds}: {line}");
    }
    // The slow server's CSV row: its p50 (column 6) at least 20 ms.
    let slow_row = rows.lines().find(|l| l.starts_with(&slow)).unwrap();
    let cells: Vec<&str> = slow_row.split(',').collect();
    assert_eq!(cells.len(), 11, "{slow_row}");
    assert!(cells[5].parse::<u64>().unwrap() >= 20_000_000, "{slow_row}");
}

/// Two shards of one run over the pool, merged: each address's figures are the two
/// shards' added, its percentiles from the added histograms (the slow server stays
/// slow), and the merged targets add up to the merged totals.
#[test]
fn merged_shards_keep_a_result_per_target() {
    let _lock = load_lock();
    let (_servers, fast, slow) = pool();
    let d = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (out, json) in run_shards(d.path(), 2, &run_args(&fast, &slow, &["--quiet"])) {
        assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
        files.push(json);
    }
    let (out, m) = merge_shards(d.path(), &files);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "{text}{}",
        stderr(&out)
    );
    let parts: Vec<serde_json::Value> = files.iter().map(|f| read_json(&f.into())).collect();
    for addr in [&fast, &slow] {
        let sum = |key: &str| -> u64 {
            (parts.iter())
                .map(|p| target(p, addr)[key].as_u64().unwrap())
                .sum()
        };
        let t = target(&m, addr);
        for key in ["sent", "completed", "errors"] {
            assert_eq!(t[key].as_u64().unwrap(), sum(key), "{addr} {key}");
        }
        assert_eq!(t["latency_ns"]["count"].as_u64().unwrap(), sum("completed"));
        assert!(text.contains(&format!("target {addr}:")), "{text}");
    }
    assert_split(&m, &fast, &slow);
}

/// `--target` is bounded (each one costs every worker a latency histogram): the 65th
/// is refused before anything runs, naming the flag and the bound.
#[test]
fn more_targets_than_the_bound_are_refused_in_one_line() {
    let addrs: Vec<String> = (0..65)
        .map(|i| format!("127.0.0.1:{}", 20_000 + i))
        .collect();
    let mut args = vec!["run", "--rate", "10", "--cores", "0"];
    for a in &addrs {
        args.extend(["--target", a.as_str()]);
    }
    assert_usage(&args, "--target: at most 64 destinations, got 65");
}
