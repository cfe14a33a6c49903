//! `--server-time` (issue 37 item 4): the server's own time, read from each reply, in
//! its own histogram beside `latency - server time` of the same request.
//!
//! The targets are small servers in this file (std threads, one per connection) that
//! really take the time they report: an HTTP/1.1 server that sleeps 7 ms per request and
//! answers `Server-Timing: app;dur=7` and `X-Took: 3ms` (on `/some`, every 4th reply
//! carries neither), and a raw TCP server answering 16-byte requests with 16 bytes
//! holding 7000 (us, big-endian u32) at byte 4.
mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

const SERVER_MS: u64 = 7;

/// Starts a server on a free port running `serve` per connection, until the test
/// process ends.
fn server(serve: fn(TcpStream)) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || serve(conn));
        }
    });
    addr
}

/// HTTP/1.1, GETs without a body, until the connection closes.
fn serve_http(mut conn: TcpStream) {
    conn.set_nodelay(true).unwrap();
    let (mut buf, mut chunk, mut n) = (Vec::new(), [0u8; 4096], 0u64);
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let some = buf.starts_with(b"GET /some ");
            buf.drain(..end + 4);
            n += 1;
            std::thread::sleep(Duration::from_millis(SERVER_MS));
            let timing = if some && n % 4 == 0 {
                String::new()
            } else {
                format!("Server-Timing: app;dur={SERVER_MS}\r\nX-Took: 3ms\r\n")
            };
            let reply = format!("HTTP/1.1 200 OK\r\n{timing}Content-Length: 2\r\n\r\nok");
            if conn.write_all(reply.as_bytes()).is_err() {
                return;
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
        }
    }
}

/// Raw TCP: 16-byte requests, 16-byte replies with the server's time in us at byte 4.
fn serve_raw(mut conn: TcpStream) {
    conn.set_nodelay(true).unwrap();
    let mut req = [0u8; 16];
    while conn.read_exact(&mut req).is_ok() {
        std::thread::sleep(Duration::from_millis(SERVER_MS));
        let mut reply = [0u8; 16];
        reply[..4].copy_from_slice(b"BLST");
        reply[4..8].copy_from_slice(&((SERVER_MS * 1000) as u32).to_be_bytes());
        if conn.write_all(&reply).is_err() {
            return;
        }
    }
}

/// 100 requests a second for 1.5 s over 4 connections, with `args`.
fn run_timed(addr: &str, args: &[&str]) -> serde_json::Value {
    let _guard = load_lock();
    let mut all = vec![
        "--target",
        addr,
        "--rate",
        "100",
        "--duration",
        "1500ms",
        "--connections",
        "4",
    ];
    all.extend_from_slice(args);
    run_report(&all, Duration::from_secs(60))
}

/// Whether `got` is `want` within the histograms' precision (3 significant digits)
/// plus `slack_ns`.
fn near(got: f64, want: f64, slack_ns: f64) -> bool {
    (got - want).abs() <= want.abs() * 0.002 + slack_ns
}

/// Every answer carried a server time of `want_ns`, and network + queueing is each
/// request's latency less it: the latency percentiles shifted down by it.
fn assert_server_time(v: &serde_json::Value, want_ns: f64) {
    let completed = f(v, "requests.completed");
    assert!(completed >= 100.0, "{v}");
    assert_eq!(
        f(v, "server_time.carried"),
        completed,
        "{}",
        v["server_time"]
    );
    assert_eq!(f(v, "server_time.missing"), 0.0, "{}", v["server_time"]);
    for p in ["p50", "p99", "max"] {
        let st = f(v, &format!("server_time.server_time_ns.{p}"));
        assert!(near(st, want_ns, 0.0), "server time {p} {st} != {want_ns}");
    }
    for p in ["p50", "p90", "p99"] {
        let lat = f(v, &format!("latency_ns.{p}"));
        let nq = f(v, &format!("server_time.network_queueing_ns.{p}"));
        // The server sleeps what it says: the rest is loopback and queueing, small.
        assert!(
            lat >= want_ns,
            "latency {p} {lat} below the server's own time"
        );
        assert!(
            near(nq, lat - want_ns, 20_000.0),
            "network+queueing {p} {nq} != latency {lat} - {want_ns}"
        );
    }
    assert!(
        v["histograms"]["server_time"].is_string(),
        "{}",
        v["histograms"]
    );
    assert!(v["histograms"]["network_queueing"].is_string());
}

#[test]
fn server_timing_dur_is_the_server_time_and_the_rest_is_network_and_queueing() {
    let addr = server(serve_http);
    let v = run_timed(
        &addr,
        &["--http", "GET /", "--server-time", "server-timing"],
    );
    assert_eq!(v["server_time"]["source"], "server-timing");
    assert_server_time(&v, (SERVER_MS * 1_000_000) as f64);
    // A named metric, and a header holding a duration with its unit.
    let v = run_timed(
        &addr,
        &["--http", "GET /", "--server-time", "server-timing:app"],
    );
    assert_server_time(&v, (SERVER_MS * 1_000_000) as f64);
    let v = run_timed(
        &addr,
        &["--http", "GET /", "--server-time", "header:x-took"],
    );
    assert_server_time(&v, 3_000_000.0);
}

#[test]
fn replies_without_a_server_time_are_counted_not_recorded() {
    let addr = server(serve_http);
    let v = run_timed(
        &addr,
        &["--http", "GET /some", "--server-time", "server-timing"],
    );
    let completed = f(&v, "requests.completed");
    let (carried, missing) = (f(&v, "server_time.carried"), f(&v, "server_time.missing"));
    assert_eq!(carried + missing, completed, "{}", v["server_time"]);
    // Every 4th reply of each connection carries none.
    assert!(
        (missing - completed / 4.0).abs() <= 4.0,
        "{}",
        v["server_time"]
    );
    // None of them recorded as zero: the smallest server time is the server's.
    let st = f(&v, "server_time.server_time_ns.p50");
    assert!(near(st, 7e6, 0.0), "{st}");
}

#[test]
fn a_binary_field_at_an_offset_is_the_server_time() {
    let addr = server(serve_raw);
    let v = run_timed(
        &addr,
        &[
            "--payload-size",
            "16",
            "--framing",
            "fixed:16",
            "--server-time",
            "offset:4:4:us",
        ],
    );
    assert_eq!(v["server_time"]["source"], "offset:4:4:us");
    assert_server_time(&v, (SERVER_MS * 1_000_000) as f64);
}

/// `blaster merge` adds the shards' server time: the counts, and the histograms (the
/// merged percentiles are the whole run's, every reply's server time 7 ms).
#[test]
fn merged_shards_add_their_server_time() {
    let _guard = load_lock();
    let addr = server(serve_http);
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "run",
        "--target",
        &addr,
        "--http",
        "GET /some",
        "--rate",
        "100",
        "--duration",
        "1500ms",
        "--connections",
        "4",
        "--cores",
        "0",
        "--quiet",
        "--server-time",
        "server-timing",
    ];
    let mut files = Vec::new();
    for (out, json) in run_shards(dir.path(), 2, &args) {
        assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
        files.push(json);
    }
    let (out, m) = merge_shards(dir.path(), &files);
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let shards: Vec<serde_json::Value> = files.iter().map(|p| read_json(&p.into())).collect();
    for key in ["carried", "missing"] {
        let sum: f64 = shards
            .iter()
            .map(|s| f(s, &format!("server_time.{key}")))
            .sum();
        assert_eq!(
            f(&m, &format!("server_time.{key}")),
            sum,
            "{key}: {}",
            m["server_time"]
        );
    }
    assert!(f(&m, "server_time.missing") > 0.0, "{}", m["server_time"]);
    assert_eq!(
        f(&m, "server_time.server_time_ns.count"),
        f(&m, "server_time.carried"),
        "the merged histogram holds every shard's replies: {}",
        m["server_time"]
    );
    assert!(near(f(&m, "server_time.server_time_ns.p99"), 7e6, 0.0));
    assert!(m["histograms"]["network_queueing"].is_string());
}
