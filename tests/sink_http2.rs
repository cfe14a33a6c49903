//! `blaster sink --http2` (issue 35 item 6) against real HTTP/2 peers on loopback:
//! h2load and nghttp (Debian nghttp2-client) over h2c and over TLS with ALPN `h2`, and
//! a gRPC unary client in Python grpcio (tests/fixtures/grpc/echo_client.py), in the
//! clear and over TLS. Exact counts: every request the peer sent is answered 2xx, and
//! the sink's own JSON counts the same requests, streams and connections. The bad
//! combinations are one line, exit 2.
mod common;
use common::servers::{python_with_grpcio, require, self_signed};
use common::*;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Runs a peer to completion, at most `limit`. Its output goes to files, not pipes: a
/// peer printing a body larger than a pipe holds would block until it is read.
fn peer(cmd: &mut Command, limit: Duration) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("start the peer");
    let status = wait_bounded(child, limit).status;
    Output {
        status,
        stdout: std::fs::read(&out).unwrap(),
        stderr: std::fs::read(&err).unwrap(),
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// h2load's summary must say every one of `n` requests succeeded with a 2xx.
fn assert_h2load_all_2xx(o: &Output, n: u64) {
    let t = text(o);
    assert!(o.status.success(), "h2load failed: {t}");
    let done = format!("requests: {n} total, {n} started, {n} done, {n} succeeded, 0 failed");
    assert!(t.contains(&done), "h2load: {t}");
    assert!(
        t.contains(&format!("status codes: {n} 2xx, 0 3xx, 0 4xx, 0 5xx")),
        "h2load: {t}"
    );
}

/// The sink's JSON at its stop (SIGINT): `blaster sink --http2 ARGS --json FILE`.
fn with_sink(extra: &[&str], body: impl FnOnce(&str)) -> serde_json::Value {
    let (_dir, json) = tmp_json();
    let json_arg = json.to_str().unwrap();
    let args = [&["--http2", "--json", json_arg, "--duration", "60s"], extra].concat();
    let sink = Sink::start(&args);
    body(&sink.addr);
    sink.stop();
    read_json(&json)
}

fn n(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

fn grpc_calls(target: &str, calls: u32, ca: Option<&str>) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/grpc/echo_client.py"
    );
    let mut cmd = Command::new(python_with_grpcio());
    cmd.args([script, target, &calls.to_string()]);
    if let Some(ca) = ca {
        cmd.arg(ca);
    }
    let o = peer(&mut cmd, Duration::from_secs(60));
    let t = text(&o);
    assert!(o.status.success(), "grpc client: {t}");
    assert!(t.contains(&format!("ok {calls}")), "grpc client: {t}");
}

#[test]
fn h2load_over_h2c_every_request_answered() {
    let _g = load_lock();
    let h2load = require("h2load", "nghttp2-client");
    let v = with_sink(&["--mode", "fixed:64"], |addr| {
        let o = peer(
            Command::new(&h2load)
                .args(["-n", "1000", "-c", "4", "-m", "10"])
                .arg(format!("http://{addr}/")),
            Duration::from_secs(60),
        );
        assert_h2load_all_2xx(&o, 1000);
        // The body is the fixed reply's: 64 bytes each.
        assert!(text(&o).contains("(64000) data"), "{}", text(&o));
    });
    assert_eq!(n(&v, "requests"), 1000, "{v}");
    assert_eq!(n(&v, "streams"), 1000, "{v}");
    // h2load's four, and the readiness probe of Sink::start (a connect, then close).
    assert_eq!(n(&v, "connections_accepted"), 5, "{v}");
    assert_eq!(n(&v, "body_bytes_sent"), 64_000, "{v}");
    for zero in [
        "streams_refused",
        "stream_errors",
        "connection_errors",
        "grpc_calls",
    ] {
        assert_eq!(n(&v, zero), 0, "{zero}: {v}");
    }
}

/// A small MAX_CONCURRENT_STREAMS: h2load keeps to it (never more streams open than
/// the sink allows), so none is refused and every request is answered.
#[test]
fn h2load_keeps_to_the_sinks_stream_limit() {
    let _g = load_lock();
    let h2load = require("h2load", "nghttp2-client");
    let v = with_sink(&["--max-concurrent-streams", "2"], |addr| {
        let o = peer(
            Command::new(&h2load)
                .args(["-n", "300", "-c", "2", "-m", "16"])
                .arg(format!("http://{addr}/")),
            Duration::from_secs(60),
        );
        assert_h2load_all_2xx(&o, 300);
    });
    assert_eq!(
        (n(&v, "requests"), n(&v, "streams_refused")),
        (300, 0),
        "{v}"
    );
}

/// nghttp POSTs 200 KB; the echo sink answers it byte for byte (beyond nghttp's
/// 64 KiB stream window: the reply waits for its WINDOW_UPDATEs).
#[test]
fn nghttp_one_request_echoed() {
    let nghttp = require("nghttp", "nghttp2-client");
    let dir = tempfile::tempdir().unwrap();
    let body: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let file = dir.path().join("body");
    std::fs::write(&file, &body).unwrap();
    let v = with_sink(&[], |addr| {
        let o = peer(
            Command::new(&nghttp)
                .arg("-d")
                .arg(&file)
                .arg(format!("http://{addr}/echo")),
            Duration::from_secs(30),
        );
        assert!(o.status.success(), "nghttp: {}", text(&o));
        assert!(
            o.stdout == body,
            "nghttp got {} bytes back, not the body",
            o.stdout.len()
        );
    });
    assert_eq!(
        (n(&v, "requests"), n(&v, "body_bytes_received")),
        (1, 200_000),
        "{v}"
    );
}

/// h2 over TLS: ALPN `h2` negotiated, h2load's requests all answered, nghttp too;
/// replies of 100 KB, beyond what rustls buffers by default, so the front must not
/// lose bytes between its HTTP/2 output and the TLS records.
#[test]
fn h2_over_tls_with_alpn() {
    let _g = load_lock();
    let h2load = require("h2load", "nghttp2-client");
    let nghttp = require("nghttp", "nghttp2-client");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let v = with_sink(
        &[
            "--tls",
            "--cert",
            &cert,
            "--key",
            &key,
            "--mode",
            "fixed:100000",
        ],
        |addr| {
            let url = format!("https://{addr}/");
            let o = peer(
                Command::new(&h2load)
                    .args(["-n", "200", "-c", "2", "-m", "10"])
                    .arg(&url),
                Duration::from_secs(60),
            );
            assert_h2load_all_2xx(&o, 200);
            assert!(text(&o).contains("(20000000) data"), "{}", text(&o));
            assert!(
                text(&o).contains("Application protocol: h2"),
                "{}",
                text(&o)
            );
            let o = peer(Command::new(&nghttp).arg(&url), Duration::from_secs(30));
            assert!(o.status.success(), "nghttp: {}", text(&o));
            assert!(
                o.stdout == vec![b'x'; 100_000],
                "nghttp: {} bytes",
                o.stdout.len()
            );
        },
    );
    assert_eq!(n(&v, "requests"), 201, "{v}");
    assert_eq!(v["tls"], true, "{v}");
    assert_eq!(n(&v, "tls_handshakes_failed"), 0, "{v}");
}

/// gRPC unary calls from grpcio, messages from empty to 40 KB (split across DATA
/// frames and flow-control windows), each echoed with status OK; in the clear and
/// over TLS (grpcio trusting the sink's certificate alone).
#[test]
fn grpc_unary_echo_from_grpcio() {
    let _g = load_lock();
    let v = with_sink(&[], |addr| grpc_calls(addr, 200, None));
    assert_eq!((n(&v, "grpc_calls"), n(&v, "requests")), (200, 200), "{v}");
    assert_eq!(n(&v, "refused_requests"), 0, "{v}");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let v = with_sink(&["--tls", "--cert", &cert, "--key", &key], |addr| {
        let port = addr.rsplit(':').next().unwrap();
        grpc_calls(&format!("localhost:{port}"), 50, Some(&cert));
    });
    assert_eq!(n(&v, "grpc_calls"), 50, "{v}");
}

/// `--server-timing`: each reply says the sink's own time (`server-timing: sink;dur=`),
/// which `blaster run --server-time` reads: every answer carries one, smaller than its
/// latency. Without the flag no reply carries one.
#[test]
fn a_timed_sink_says_its_own_time_per_reply() {
    let _g = load_lock();
    let run = |target: &str| {
        run_report(
            &[
                "--target",
                target,
                "--http2",
                "--rate",
                "1000",
                "--duration",
                "1s",
                "--connections",
                "2",
                "--server-time",
                "server-timing:sink",
            ],
            Duration::from_secs(60),
        )
    };
    with_sink(&["--server-timing"], |target| {
        let v = run(target);
        let done = f(&v, "requests.completed");
        assert_eq!(done, 1000.0, "{}", v["requests"]);
        assert_eq!(f(&v, "server_time.carried"), done, "{}", v["server_time"]);
        let own = f(&v, "server_time.server_time_ns.p50");
        let lat = f(&v, "latency_ns.p50");
        assert!(own > 0.0 && own < lat, "sink {own} vs latency {lat}");
    });
    with_sink(&[], |target| {
        let v = run(target);
        assert_eq!(f(&v, "server_time.carried"), 0.0, "{}", v["server_time"]);
        assert_eq!(f(&v, "server_time.missing"), 1000.0, "{}", v["server_time"]);
    });
}

#[test]
fn combinations_that_make_no_sense_are_one_line_exit_2() {
    assert_usage(&["sink", "--http2", "--udp"], "drop --udp");
    assert_usage(
        &["sink", "--http2", "--mode", "broadcast"],
        "--mode broadcast",
    );
    assert_usage(&["sink", "--http2", "--mode", "discard"], "--mode discard");
    assert_usage(
        &["sink", "--http2", "--delay", "1ms"],
        "--delay: not with --http2",
    );
    assert_usage(
        &["sink", "--http2", "--reset-ratio", "0.5"],
        "--reset-ratio",
    );
    assert_usage(&["sink", "--max-concurrent-streams", "8"], "needs --http2");
    assert_usage(
        &["sink", "--http2", "--max-concurrent-streams", "0"],
        "between 1",
    );
}

/// An HTTP/1.1 client is not one: the sink sends its SETTINGS, then a GOAWAY with
/// PROTOCOL_ERROR, closes, and counts a connection error.
#[test]
fn an_http1_client_gets_a_goaway_and_the_close() {
    use std::io::{Read, Write};
    let v = with_sink(&[], |addr| {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got)
            .expect("the sink closes the connection");
        // SETTINGS (9 + 18 bytes), WINDOW_UPDATE (13), then GOAWAY: type 7, stream 0,
        // last stream 0, code 1.
        let goaway = &got[40..];
        assert_eq!(&goaway[3..9], &[7, 0, 0, 0, 0, 0], "{got:?}");
        assert_eq!(&goaway[9..17], &[0, 0, 0, 0, 0, 0, 0, 1], "{got:?}");
    });
    assert_eq!(n(&v, "connection_errors"), 1, "{v}");
    assert_eq!(n(&v, "requests"), 0, "{v}");
}
