//! `--http2` end to end against real HTTP/2 servers from Debian packages, started on
//! free loopback ports: nghttpd (nghttp2-server, h2c with prior knowledge) and nginx
//! (`listen ... http2`, h2c and h2 over TLS with ALPN). Each checks that every request
//! completed once, by status, and what the servers did to the connections (GOAWAY
//! after `keepalive_requests`, a MAX_CONCURRENT_STREAMS below the streams asked for).
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::servers::{Server, nginx_h2, python_with_grpcio, require, spawn};
use common::*;
use std::process::Command;
use std::time::Duration;

/// nghttpd serving a 5-byte `index.html` over h2c.
fn nghttpd() -> (Server, u16) {
    nghttpd_with(&[])
}

/// nghttpd with `extra` options before its port.
fn nghttpd_with(extra: &[&str]) -> (Server, u16) {
    let bin = require("nghttpd", "nghttp2-server");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "hello").unwrap();
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.args(["--no-tls", "-d"])
        .arg(dir.path())
        .args(extra)
        .arg(port.to_string())
        .current_dir(dir.path());
    let s = spawn(&mut cmd, Some(dir), port);
    (s, port)
}

/// A gRPC server in Python grpcio (tests/fixtures/grpc/echo_server.py) whose
/// `/blaster.Echo/Check` accepts only the message `expected` with a deadline; `extra`:
/// its other arguments (a max connection age in ms).
fn grpcio_server(expected: &str, extra: &[&str]) -> (Server, u16) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/grpc/echo_server.py"
    );
    let port = free_port();
    let mut cmd = Command::new(python_with_grpcio());
    cmd.args([script, &port.to_string(), expected]).args(extra);
    let s = spawn(&mut cmd, None, port);
    (s, port)
}

/// Runs blaster against `port` with `args` and its JSON; exit 0 or 3 (a generator
/// disturbed by other load may be invalid without changing what these tests check).
fn h2_run(port: u16, args: &[&str]) -> serde_json::Value {
    h2_run_exiting(port, args, &[0, 3])
}

/// [`h2_run`] for a run whose exit code is one of `codes`.
fn h2_run_exiting(port: u16, args: &[&str], codes: &[i32]) -> serde_json::Value {
    let (_d, json) = tmp_json();
    let target = format!("127.0.0.1:{port}");
    let mut all = vec!["run", "--target", &target, "--http2", "--cores", "0"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let out = run(&all, Duration::from_secs(60));
    assert!(
        out.status.code().is_some_and(|c| codes.contains(&c)),
        "{}",
        stderr(&out)
    );
    read_json(&json)
}

/// Every request sent once and completed, no errors.
fn assert_all_completed(v: &serde_json::Value, n: f64) {
    assert_eq!(f(v, "requests.sent"), n, "{}", v["requests"]);
    assert_eq!(f(v, "requests.completed"), n, "{}", v["requests"]);
    assert_eq!(f(v, "requests.errors"), 0.0, "{}", v["errors_by_kind"]);
    assert!(
        v["first_protocol_error"].is_null(),
        "{}",
        v["first_protocol_error"]
    );
}

/// Bodies beyond one DATA frame go out in frames of at most 16 KiB as the windows
/// open: nghttpd with 16 KiB stream and 64 KiB connection windows echoes 200 KB bodies
/// whole (its WINDOW_UPDATEs let them continue: flow-control stalls counted), and
/// grpcio accepts a 100,000-byte message only when every byte arrived in order.
#[test]
fn bodies_beyond_one_frame_go_out_as_the_windows_open() {
    let _g = load_lock();
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.bin");
    let body: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    std::fs::write(&big, &body).unwrap();
    let (_s, port) = nghttpd_with(&["--echo-upload", "-w", "14", "-W", "16"]);
    let v = h2_run(
        port,
        &[
            "--http",
            "POST /index.html",
            "--body-file",
            big.to_str().unwrap(),
            "--rate",
            "50",
            "--duration",
            "2s",
            "--connections",
            "2",
        ],
    );
    assert_all_completed(&v, 100.0);
    assert_eq!(v["http"]["status_classes"]["2xx"], 100, "{}", v["http"]);
    assert!(f(&v, "bytes.sent") > 100.0 * 200_000.0, "{}", v["bytes"]);
    assert!(
        f(&v, "bytes.received") > 100.0 * 200_000.0,
        "{}",
        v["bytes"]
    );
    assert!(f(&v, "http2.flow_stalls") > 0.0, "{}", v["http2"]);

    let expected = "x".repeat(100_000);
    let (_g2, port) = grpcio_server(&expected, &[]);
    let msg = dir.path().join("msg.bin");
    std::fs::write(&msg, &expected).unwrap();
    let v = h2_run(
        port,
        &[
            "--grpc",
            "blaster.Echo/Check",
            "--grpc-message",
            msg.to_str().unwrap(),
            "--rate",
            "50",
            "--duration",
            "2s",
            "--connections",
            "2",
        ],
    );
    assert_all_completed(&v, 100.0);
    assert_eq!(
        v["http2"]["grpc"]["status_codes"],
        serde_json::json!({"OK": 100}),
        "{}",
        v["http2"]
    );
}

/// `--connect-per-request --http2`: each request opens its own connection (preface,
/// SETTINGS, one stream) and closes it once answered, as HTTP/1.1's does: nginx
/// answers every request, and as many connections opened as requests.
#[test]
fn a_connection_per_request_carries_one_stream() {
    let _g = load_lock();
    let (_s, port) = nginx_h2(1_000_000, 128, None);
    let v = h2_run(
        port,
        &[
            "--connect-per-request",
            "--http",
            "GET /",
            "--rate",
            "200",
            "--duration",
            "1s",
            "--connections",
            "4",
        ],
    );
    assert_all_completed(&v, 200.0);
    assert_eq!(v["http"]["status_classes"]["2xx"], 200, "{}", v["http"]);
    assert_eq!(f(&v, "connections.opened"), 200.0, "{}", v["connections"]);
    assert_eq!(f(&v, "connections.failed"), 0.0, "{}", v["connections"]);
}

/// A body with placeholders longer than one DATA frame is rendered once per request
/// and its tail sent from the request's slot as the windows open: nginx (h2c) hands
/// each whole body to a Python backend that checks it byte for byte, its random parts
/// rendered (the second lies past the first 16 KiB) and never one request's tail in
/// another's body.
#[test]
fn a_templated_body_beyond_one_frame_arrives_whole() {
    let _g = load_lock();
    let backend = free_port();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/http/body_check.py"
    );
    let _b = common::servers::spawn(
        Command::new("python3").args([script, &backend.to_string(), "20000", "20000"]),
        None,
        backend,
    );
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = format!(
        "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; \
         error_log {d}/error.log; events {{ worker_connections 1024; }} \
         http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d}; \
         fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d}; \
         server {{ listen 127.0.0.1:{port} http2; client_max_body_size 1m; \
         location / {{ proxy_pass http://127.0.0.1:{backend}; proxy_http_version 1.1; }} }} }}",
        d = dir.path().display()
    );
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let mut cmd = Command::new(require("nginx", "nginx-light"));
    cmd.args(["-c", conf_path.to_str().unwrap(), "-p"])
        .arg(dir.path());
    let _n = common::servers::spawn(&mut cmd, Some(dir), port);
    let body = format!(
        "{{rand:16}}{}{{rand:16}}{}",
        "a".repeat(20_000),
        "b".repeat(20_000)
    );
    let v = h2_run(
        port,
        &[
            "--http",
            "POST /check",
            "--body",
            &body,
            "--rate",
            "100",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--streams-per-connection",
            "8",
        ],
    );
    assert_all_completed(&v, 200.0);
    assert_eq!(v["http"]["status_classes"]["2xx"], 200, "{}", v["http"]);
}

/// A server may answer before the request body is all sent (RFC 9113 §8.1) and leave
/// ending the stream to the client: blaster resets such a stream (RST_STREAM CANCEL)
/// and sends no more of its body, for a body sent from the request set and for one
/// rendered per request, so it never holds one of the server's 4 concurrent streams
/// (the test's server answers at the HEADERS, resets nothing itself and sends no
/// WINDOW_UPDATE: a stream left open would stall the connection at 4 requests).
#[test]
fn a_stream_answered_before_its_body_is_sent_is_reset() {
    let _g = load_lock();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/http/early_h2.py"
    );
    for body in [
        "a".repeat(100_000),
        format!("{{rand:8}}{}", "a".repeat(100_000)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let stats = dir.path().join("stats");
        let port = free_port();
        let _s = common::servers::spawn(
            Command::new("python3").args([script, &port.to_string(), stats.to_str().unwrap()]),
            Some(dir),
            port,
        );
        let v = h2_run(
            port,
            &[
                "--http",
                "POST /upload",
                "--body",
                &body,
                "--rate",
                "50",
                "--duration",
                "2s",
                "--connections",
                "1",
                "--streams-per-connection",
                "8",
                "--timeout",
                "1s",
            ],
        );
        assert_all_completed(&v, 100.0);
        assert_eq!(v["http2"]["bodies_cut"], 100, "{}", v["http2"]);
        let said = std::fs::read_to_string(&stats).unwrap();
        let count = |k: &str| stat(&said, k);
        assert_eq!(count("answered"), 100, "{said}");
        assert_eq!(count("cancel_resets"), 100, "{said}");
        assert_eq!(count("other_resets"), 0, "{said}");
    }
}

/// `--grpc-proto FILE --grpc-json JSON`: the message is the protobuf encoding of the
/// JSON as the method's input type, byte for byte what grpcio's Check expects.
#[test]
fn a_grpc_message_from_json_and_a_proto_is_the_protobuf_the_server_expects() {
    let _g = load_lock();
    let dir = tempfile::tempdir().unwrap();
    let proto = dir.path().join("echo.proto");
    std::fs::write(
        &proto,
        "syntax = \"proto3\";\npackage blaster;\n\
         message Hello { string name = 1; int32 n = 2; }\n\
         message Empty {}\n\
         service Echo { rpc Check (Hello) returns (Empty); rpc Fresh (Hello) returns (Empty); }\n",
    )
    .unwrap();
    // field 1 "world" (tag 0x0a, length 5), field 2 varint 7 (tag 0x10).
    let (_s, port) = grpcio_server("\n\x05world\x10\x07", &[]);
    let v = h2_run(
        port,
        &[
            "--grpc",
            "blaster.Echo/Check",
            "--grpc-proto",
            proto.to_str().unwrap(),
            "--grpc-json",
            r#"{"name": "world", "n": 7}"#,
            "--rate",
            "100",
            "--duration",
            "1s",
        ],
    );
    assert_all_completed(&v, 100.0);
    assert_eq!(
        v["http2"]["grpc"]["status_codes"],
        serde_json::json!({"OK": 100}),
        "{}",
        v["http2"]
    );
}

/// `{rand:N}` in a `--grpc-json` string is drawn afresh for each call, inside the
/// message's protobuf (every length in it as encoded): grpcio's Fresh accepts a call
/// only when its message is field 1 "u-" and 8 letters or digits never seen before,
/// then field 2 = 7.
#[test]
fn rand_in_a_grpc_json_message_is_drawn_per_call() {
    let _g = load_lock();
    let dir = tempfile::tempdir().unwrap();
    let proto = dir.path().join("echo.proto");
    std::fs::write(
        &proto,
        "syntax = \"proto3\";\npackage blaster;\n\
         message Hello { string name = 1; int32 n = 2; }\n\
         message Empty {}\n\
         service Echo { rpc Fresh (Hello) returns (Empty); }\n",
    )
    .unwrap();
    let (_s, port) = grpcio_server("\n\x0au-????????\x10\x07", &[]);
    let v = h2_run(
        port,
        &[
            "--grpc",
            "blaster.Echo/Fresh",
            "--grpc-proto",
            proto.to_str().unwrap(),
            "--grpc-json",
            r#"{"name": "u-{rand:8}", "n": 7}"#,
            "--rate",
            "100",
            "--duration",
            "1s",
        ],
    );
    assert_all_completed(&v, 100.0);
    assert_eq!(
        v["http2"]["grpc"]["status_codes"],
        serde_json::json!({"OK": 100}),
        "{}",
        v["http2"]
    );
}

#[test]
fn nghttpd_h2c_answers_every_stream() {
    let _g = load_lock();
    let (_s, port) = nghttpd();
    let v = h2_run(
        port,
        &[
            "--http",
            "GET /index.html",
            "--rate",
            "2000",
            "--duration",
            "2s",
            "--connections",
            "4",
        ],
    );
    assert_all_completed(&v, 4000.0);
    assert_eq!(v["http"]["status_classes"]["2xx"], 4000, "{}", v["http"]);
    assert_eq!(v["http2"]["streams_per_connection"], 100, "{}", v["http2"]);
    assert_eq!(v["http2"]["goaways"], 0, "{}", v["http2"]);
    // 4 connections carried 4,000 requests: streams, not a connection each.
    assert_eq!(f(&v, "connections.opened"), 4.0, "{}", v["connections"]);
}

#[test]
fn nginx_goaway_retries_and_the_servers_stream_limit_hold() {
    let _g = load_lock();
    // A GOAWAY every 50 requests on a connection; 4 streams at most where 64 are asked.
    // One connection, sends batched by a 1 ms window (4 requests a batch): the 50th
    // request of a connection often has others behind it in its batch, streams the
    // server will not process.
    let (_s, port) = nginx_h2(50, 4, None);
    let v = h2_run(
        port,
        &[
            "--http",
            "GET /",
            "--rate",
            "4000",
            "--duration",
            "2s",
            "--connections",
            "1",
            "--resolution",
            "1ms",
            "--streams-per-connection",
            "64",
        ],
    );
    // Requests the server did not process before its GOAWAY were sent again on a new
    // connection (opened as soon as the old one closed): each still one request,
    // none lost, none counted twice.
    assert_all_completed(&v, 8000.0);
    let h = &v["http2"];
    assert!(f(&v, "http2.goaways") >= 150.0, "{h}");
    assert!(f(&v, "http2.retried") >= 10.0, "{h}");
    assert!(f(&v, "connections.opened") >= 150.0, "{}", v["connections"]);
    // Beyond 4 streams nginx would refuse (RST_STREAM): the cap was honoured.
    assert_eq!(h["stream_resets"], 0, "{h}");
    assert_eq!(v["http"]["status_classes"]["2xx"], 8000, "{}", v["http"]);
}

#[test]
fn nginx_5xx_over_http2_are_error_replies() {
    let _g = load_lock();
    let (_s, port) = nginx_h2(1_000_000, 128, None);
    // Nothing succeeded: exit 1, the report written.
    let v = h2_run_exiting(
        port,
        &[
            "--http",
            "GET /fail",
            "--rate",
            "500",
            "--duration",
            "1s",
            "--connections",
            "2",
        ],
        &[1],
    );
    assert_eq!(f(&v, "requests.errors"), 500.0, "{}", v["requests"]);
    assert_eq!(
        v["errors_by_kind"]["error_reply"], 500,
        "{}",
        v["errors_by_kind"]
    );
    assert_eq!(v["http"]["status_codes"]["503"], 500, "{}", v["http"]);
}

/// A self-signed certificate for localhost (`cert.pem`, `key.pem`) in a new directory.
fn self_signed() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = common::servers::self_signed(dir.path());
    (dir, cert, key)
}

#[test]
fn a_tls_server_that_does_not_choose_h2_is_named() {
    let _g = load_lock();
    // The sink's TLS front configures no ALPN: the handshake completes without h2.
    let (_d, cert, key) = self_signed();
    let sink = Sink::start(&["--mode", "fixed:8", "--tls", "--cert", &cert, "--key", &key]);
    let target = sink.addr.clone();
    let out = run(
        &[
            "run",
            "--target",
            &target,
            "--http2",
            "--http",
            "GET /",
            "--tls",
            "--tls-ca",
            &cert,
            "--tls-sni",
            "localhost",
            "--rate",
            "100",
            "--duration",
            "1s",
            "--connections",
            "1",
            "--cores",
            "0",
            "--timeout",
            "1s",
        ],
        Duration::from_secs(30),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("did not choose h2 over ALPN"), "{err}");
    sink.stop();
}

#[test]
fn nginx_h2_over_tls_negotiates_alpn() {
    let _g = load_lock();
    let (_d, cert, key) = self_signed();
    let (cert, key) = (cert.as_str(), key.as_str());
    // A GOAWAY every 100 requests: every reconnect shakes hands again.
    let (_s, port) = nginx_h2(100, 128, Some((cert, key)));
    let v = h2_run(
        port,
        &[
            "--http",
            "GET /",
            "--tls",
            "--tls-ca",
            cert,
            "--tls-sni",
            "localhost",
            "--rate",
            "1000",
            "--duration",
            "2s",
            "--connections",
            "2",
        ],
    );
    assert_all_completed(&v, 2000.0);
    assert!(f(&v, "tls.handshakes_full") >= 20.0, "{}", v["tls"]);
    assert!(f(&v, "http2.goaways") >= 18.0, "{}", v["http2"]);
}

#[test]
fn an_http1_server_is_named_not_hung_on() {
    let _g = load_lock();
    // nghttpd over TLS-less h2c is HTTP/2 only; a plain HTTP/1.1 listener (the sink)
    // answers the preface with nothing HTTP/2 can parse.
    let sink = Sink::start(&["--mode", "fixed:8"]);
    let target = sink.addr.clone();
    let out = run(
        &[
            "run",
            "--target",
            &target,
            "--http2",
            "--http",
            "GET /",
            "--rate",
            "100",
            "--duration",
            "1s",
            "--connections",
            "1",
            "--cores",
            "0",
            "--timeout",
            "1s",
        ],
        Duration::from_secs(30),
    );
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("HTTP/2"), "{err}");
    sink.stop();
}

/// `--grpc` against grpcio: the message from `--grpc-message` and the deadline from
/// `--timeout` reach the server (its Check method refuses anything else), grpc-status
/// from the trailers decides success, and every other code is an error counted by
/// name. 300 calls each, one connection.
#[test]
fn grpc_unary_calls_against_grpcio_are_judged_by_grpc_status() {
    let _g = load_lock();
    let (_s, port) = grpcio_server("hello grpc", &[]);
    let dir = tempfile::tempdir().unwrap();
    let msg = dir.path().join("msg.bin");
    let other = dir.path().join("other.bin");
    std::fs::write(&msg, "hello grpc").unwrap();
    std::fs::write(&other, "hello http").unwrap();
    let call = |method: &str, message: &std::path::Path, codes: &[i32]| {
        h2_run_exiting(
            port,
            &[
                "--grpc",
                method,
                "--grpc-message",
                message.to_str().unwrap(),
                "--timeout",
                "5s",
                "--rate",
                "300",
                "--duration",
                "1s",
                "--connections",
                "1",
            ],
            codes,
        )
    };
    let codes = |v: &serde_json::Value| v["http2"]["grpc"]["status_codes"].clone();

    let v = call("blaster.Echo/Check", &msg, &[0, 3]);
    assert_all_completed(&v, 300.0);
    assert_eq!(
        v["http2"]["grpc"]["method"], "/blaster.Echo/Check",
        "{}",
        v["http2"]
    );
    assert_eq!(codes(&v), serde_json::json!({"OK": 300}), "{}", v["http2"]);

    // Another message: the server sees it and says INVALID_ARGUMENT, every call.
    let v = call("blaster.Echo/Check", &other, &[1]);
    assert_eq!(f(&v, "requests.errors"), 300.0, "{}", v["requests"]);
    assert_eq!(
        codes(&v),
        serde_json::json!({"INVALID_ARGUMENT": 300}),
        "{}",
        v["http2"]
    );

    let v = call("blaster.Echo/Fail", &msg, &[1]);
    assert_eq!(f(&v, "requests.sent"), 300.0, "{}", v["requests"]);
    assert_eq!(f(&v, "requests.errors"), 300.0, "{}", v["requests"]);
    assert_eq!(
        v["errors_by_kind"]["error_reply"], 300,
        "{}",
        v["errors_by_kind"]
    );
    assert_eq!(
        codes(&v),
        serde_json::json!({"RESOURCE_EXHAUSTED": 300}),
        "{}",
        v["http2"]
    );
}

/// Every status code a server returns is counted under its name, and the method a
/// server does not have is UNIMPLEMENTED: `/blaster.Echo/Code` answers the code its
/// `x-code` metadata (an `-H` header) asks for.
/// `--server-time` over gRPC (issue 37 item 4): a grpcio method that takes 10 ms and
/// says `server-timing: app;dur=7` in its headers and `db;dur=3` in its trailers. The
/// sum of every metric is its 10 ms, the named one its 7; network + queueing is each
/// call's latency less it.
#[test]
fn grpc_server_timing_in_headers_and_trailers_is_the_server_time() {
    let _g = load_lock();
    let (_s, port) = grpcio_server("", &[]);
    let run = |source: &str| {
        h2_run(
            port,
            &[
                "--grpc",
                "blaster.Echo/Timed",
                "--rate",
                "50",
                "--duration",
                "2s",
                "--connections",
                "2",
                "--server-time",
                source,
            ],
        )
    };
    for (source, want_ms) in [("server-timing", 10.0), ("server-timing:app", 7.0)] {
        let v = run(source);
        let completed = f(&v, "requests.completed");
        assert_eq!(completed, 100.0, "{}", v["requests"]);
        assert_eq!(
            f(&v, "server_time.carried"),
            completed,
            "{}",
            v["server_time"]
        );
        assert_eq!(f(&v, "server_time.missing"), 0.0);
        let want = want_ms * 1e6;
        for p in ["p50", "p99", "max"] {
            let st = f(&v, &format!("server_time.server_time_ns.{p}"));
            assert!(
                (st - want).abs() <= want * 0.002,
                "{source}: server time {p} {st}"
            );
        }
        let (lat, nq) = (
            f(&v, "latency_ns.p50"),
            f(&v, "server_time.network_queueing_ns.p50"),
        );
        // It slept 10 ms: the latency is above it, the rest is the latency less it.
        assert!(lat >= 10e6, "{source}: latency p50 {lat}");
        assert!(
            (nq - (lat - want)).abs() <= lat * 0.002 + 50_000.0,
            "{source}: network+queueing p50 {nq} vs latency {lat} - {want}"
        );
    }
}

#[test]
fn grpc_status_codes_are_counted_by_name() {
    let _g = load_lock();
    let (_s, port) = grpcio_server("x", &[]);
    for (method, code, name) in [
        ("blaster.Echo/Code", "14", "UNAVAILABLE"),
        ("blaster.Echo/Code", "4", "DEADLINE_EXCEEDED"),
        ("blaster.Echo/Code", "16", "UNAUTHENTICATED"),
        ("blaster.Echo/Nope", "0", "UNIMPLEMENTED"),
    ] {
        let header = format!("x-code: {code}");
        let v = h2_run_exiting(
            port,
            &[
                "--grpc",
                method,
                "-H",
                &header,
                "--rate",
                "200",
                "--duration",
                "500ms",
            ],
            &[1],
        );
        assert_eq!(f(&v, "requests.errors"), 100.0, "{name}: {}", v["requests"]);
        assert_eq!(
            v["http2"]["grpc"]["status_codes"],
            serde_json::json!({ name: 100 }),
            "{}",
            v["http2"]
        );
        assert_eq!(
            v["error_replies_by_kind"][name], 100,
            "{}",
            v["error_replies_by_kind"]
        );
    }
}

/// grpcio ends each connection at 300 ms of age with a GOAWAY (MaxConnectionAge):
/// blaster finishes the calls under way, reopens, and every call is answered once.
#[test]
fn grpc_max_connection_age_loses_and_doubles_nothing() {
    let _g = load_lock();
    let (_s, port) = grpcio_server("x", &["300"]);
    let v = h2_run(
        port,
        &[
            "--grpc",
            "blaster.Echo/Say",
            "--rate",
            "500",
            "--duration",
            "3s",
            "--connections",
            "2",
        ],
    );
    assert_all_completed(&v, 1500.0);
    assert!(f(&v, "http2.goaways") >= 10.0, "{}", v["http2"]);
    assert!(f(&v, "connections.opened") >= 10.0, "{}", v["connections"]);
    assert_eq!(
        v["http2"]["grpc"]["status_codes"],
        serde_json::json!({"OK": 1500}),
        "{}",
        v["http2"]
    );
}

/// `--h2-keepalive`: quiet connections get PINGs; nghttpd answers each, and a grpcio
/// server enforcing a minute between PINGs without calls answers GOAWAY
/// ENHANCE_YOUR_CALM `too_many_pings`, which the report names (its calls complete on
/// new connections all the same).
#[test]
fn keepalive_pings_are_answered_or_named_when_too_many() {
    let _g = load_lock();
    let (_n, port) = nghttpd();
    let quiet = [
        "--http",
        "GET /",
        "--rate",
        "2",
        "--duration",
        "2s",
        "--connections",
        "2",
        "--h2-keepalive",
        "100ms",
    ];
    let v = h2_run(port, &quiet);
    assert_all_completed(&v, 4.0);
    let h = &v["http2"];
    let (sent, acked) = (f(&v, "http2.pings_sent"), f(&v, "http2.pings_acked"));
    // Two connections quiet between requests 500 ms apart: a PING every ~100 ms.
    assert!(sent >= 10.0 && acked >= sent - 2.0, "{h}");
    assert_eq!(h["goaway_codes"], serde_json::json!({}), "{h}");
    let (_s, port) = grpcio_server("x", &["strict-pings"]);
    let (_d, json) = tmp_json();
    let target = format!("127.0.0.1:{port}");
    let out = run(
        &[
            "run",
            "--target",
            &target,
            "--cores",
            "0",
            "--grpc",
            "blaster.Echo/Say",
            "--rate",
            "2",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--h2-keepalive",
            "100ms",
            "--json",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("the server answered GOAWAY ENHANCE_YOUR_CALM"),
        "{text}"
    );
    let v = read_json(&json);
    assert_all_completed(&v, 4.0);
    let h = &v["http2"];
    assert!(f(&v, "http2.goaway_codes.ENHANCE_YOUR_CALM") >= 1.0, "{h}");
    assert_eq!(
        h["first_goaway"], "ENHANCE_YOUR_CALM: too_many_pings",
        "{h}"
    );
    assert_eq!(
        h["grpc"]["status_codes"],
        serde_json::json!({"OK": 4}),
        "{h}"
    );
}

/// `--grpc` against blaster's own `sink --http2`, which echoes unary calls.
#[test]
fn grpc_unary_calls_against_the_sink() {
    let _g = load_lock();
    let sink = Sink::start(&["--http2", "--duration", "60s"]);
    let port: u16 = sink.addr.rsplit(':').next().unwrap().parse().unwrap();
    let v = h2_run(
        port,
        &[
            "--grpc",
            "blaster.Echo/Say",
            "--rate",
            "1000",
            "--duration",
            "1s",
        ],
    );
    sink.stop();
    assert_all_completed(&v, 1000.0);
    assert_eq!(
        v["http2"]["grpc"]["status_codes"],
        serde_json::json!({"OK": 1000}),
        "{}",
        v["http2"]
    );
}

/// The sink's HTTP/2 front freezing for `stall` every `every`, and its port.
fn stalling_sink(stall: &str, every: &str) -> (Sink, u16) {
    let sink = Sink::start(&[
        "--http2",
        "--stall",
        stall,
        "--every",
        every,
        "--duration",
        "5m",
    ]);
    let port = sink.addr.rsplit(':').next().unwrap().parse().unwrap();
    (sink, port)
}

/// The open-loop truth over gRPC (issue 35's benchmark, bar truth-http-stall for
/// HTTP/1.1): the sink's HTTP/2 front freezing S = 1 s every T = 10 s delays S/T = 10%
/// of calls uniformly on (0, S], so p99 = S (1 - 0.01 T / S) = 0.9 s, counted from
/// each call's intended send. Only a run whose generator fell behind is retried.
#[test]
fn grpc_calls_through_a_stalling_sink_give_the_analytic_p99() {
    let _g = load_lock();
    let (_sink, port) = stalling_sink("1s", "10s");
    on_a_quiet_host(
        "grpc_calls_through_a_stalling_sink_give_the_analytic_p99",
        &RATE_ON_CORES_0_1,
        || {
            let v = h2_run(
                port,
                &[
                    "--grpc",
                    "blaster.Echo/Say",
                    "--rate",
                    "2000",
                    "--duration",
                    "10s",
                    "--connections",
                    "16",
                    "--max-lag",
                    "20ms",
                ],
            );
            generator_kept_up(&v)?;
            assert_all_completed(&v, 20_000.0);
            let p99 = f(&v, "latency_ns.p99") / 1e9;
            assert!(
                (0.81..=0.99).contains(&p99),
                "latency p99 {p99} s, expected 0.9 s +- 10%"
            );
            Ok(())
        },
    );
}

/// `blaster --grpc ...` and `blaster --http2` (no target): the loopback baseline
/// against the sink's HTTP/2 front, nothing outside. Whatever the shared host lets the
/// steps reach, the summary gives an HTTP/2 figure, and no step had an error. A lax
/// `--max-lag` keeps a busy host from invalidating every step.
#[test]
fn the_http2_baseline_runs_against_the_sinks_front() {
    let _g = load_lock();
    for proto in [&["--grpc", "blaster.Echo/Say"][..], &["--http2"][..]] {
        let (_dir, path) = tmp_json();
        let mut args = proto.to_vec();
        args.extend_from_slice(&[
            "--cores",
            "0",
            "--connections",
            "4",
            "--start-rate",
            "500",
            "--step-duration",
            "1s",
            "--max-lag",
            "1s",
            // Issue 37 item 4: the sink says its own time, the steps show it.
            "--server-time",
            "server-timing:sink",
            "--json",
            path.to_str().unwrap(),
        ]);
        let out = run(&args, Duration::from_secs(120));
        let text = String::from_utf8_lossy(&out.stdout);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{text}{err}");
        assert!(
            err.contains("(HTTP/2: its front, a thread per connection)"),
            "{err}"
        );
        assert!(
            text.starts_with("loopback baseline over HTTP/2: 4 connections, HTTP/2 requests"),
            "{text}"
        );
        assert!(
            text.contains("\ngenerator HTTP/2 ceiling: ")
                || text.contains("\nno generator HTTP/2 ceiling: the best valid step ("),
            "{text}"
        );
        let v = read_json(&path);
        assert_eq!(v["http2"], true, "{v}");
        assert!(f(&v, "ceiling_rps") > 0.0, "{v}");
        assert!(text.contains("sink p50    net+q p50"), "{text}");
        for s in v["steps"].as_array().unwrap() {
            assert_eq!(f(s, "errors"), 0.0, "{s}");
            assert!(f(s, "achieved_rps") > 0.0, "{s}");
            // The sink's own time: more than nothing, less than the whole latency,
            // and the rest of it is network and queueing.
            let (own, lat) = (
                f(s, "server_time.server_time_p50_ns"),
                f(s, "latency_p50_ns"),
            );
            assert!(own > 0.0 && own < lat, "sink {own} vs latency {lat}: {s}");
            let rest = f(s, "server_time.network_queueing_p50_ns");
            assert!(rest > 0.0 && rest <= lat, "{s}");
        }
    }
}

#[test]
fn a_stream_past_its_timeout_is_cancelled_and_its_connection_goes_on() {
    let _g = load_lock();
    // The sink freezes 300 ms every second: streams sent in a freeze pass their 100 ms
    // timeout. Each is cancelled alone (RST_STREAM CANCEL, a timeout error); the two
    // connections carry on, so no connection is opened again.
    let (sink, port) = stalling_sink("300ms", "1s");
    let v = h2_run(
        port,
        &[
            "--http",
            "GET /",
            "--rate",
            "500",
            "--duration",
            "3s",
            "--connections",
            "2",
            "--streams-per-connection",
            "100",
            "--timeout",
            "100ms",
        ],
    );
    let cancelled = f(&v, "http2.streams_cancelled");
    let timeouts = f(&v, "requests.timeouts");
    assert!(cancelled >= 100.0, "{}", v["http2"]);
    assert_eq!(cancelled, timeouts, "{}", v["requests"]);
    assert_eq!(f(&v, "connections.opened"), 2.0, "{}", v["connections"]);
    assert_eq!(
        f(&v, "requests.completed") + f(&v, "requests.errors"),
        1500.0,
        "{}",
        v["requests"]
    );
    assert!(
        v["first_protocol_error"].is_null(),
        "{}",
        v["first_protocol_error"]
    );
    sink.stop();
}
