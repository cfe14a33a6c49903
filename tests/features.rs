//! End-to-end checks of TCP features against peers started by the test: exact counts
//! from real sockets. The peers here are small std::net servers (not blaster's sink)
//! where what the server saw is the independent side of the check.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A TCP server on a free loopback port, one thread per connection, that answers each
/// request line by line: `answer(line)` returns the reply (empty for none). Every line
/// is kept for the test to inspect. The threads end with the test process.
struct LineServer {
    addr: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl LineServer {
    fn start(answer: fn(&str) -> Vec<u8>) -> LineServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let kept = lines.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let kept = kept.clone();
                std::thread::spawn(move || serve_lines(stream, answer, &kept));
            }
        });
        LineServer { addr, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

fn serve_lines(stream: TcpStream, answer: fn(&str) -> Vec<u8>, kept: &Mutex<Vec<String>>) {
    stream.set_nodelay(true).unwrap();
    let mut out = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
        kept.lock().unwrap().push(line.clone());
        let reply = answer(&line);
        if !reply.is_empty() && out.write_all(&reply).is_err() {
            return;
        }
        line.clear();
    }
}

#[test]
fn heartbeats_at_connections_per_period_answered_through_the_framer() {
    let _g = load_lock();
    // A peer that answers PING with +PONG (7 bytes for 6): only the RESP framer reads
    // it right; an echo-length framer would misframe every reply.
    let server = LineServer::start(|l| {
        if l == "PING\r\n" {
            b"+PONG\r\n".to_vec()
        } else {
            Vec::new()
        }
    });
    // 20 connections, one heartbeat each per 200 ms: 100/s, 200 in 2 s.
    let v = run_report(
        &[
            "--target",
            &server.addr,
            "--hold",
            "--connections",
            "20",
            "--heartbeat",
            "200ms",
            "--heartbeat-payload",
            "PING\\r\\n",
            "--framing",
            "resp",
            "--duration",
            "2s",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(v["mode"], "hold");
    assert_eq!(f(&v, "rate.intended_rps"), 100.0, "{}", v["rate"]);
    assert_eq!(f(&v, "connections.established"), 20.0);
    assert_eq!(f(&v, "requests.sent"), 200.0, "{}", v["requests"]);
    assert_eq!(f(&v, "requests.completed"), 200.0, "{}", v["requests"]);
    assert_eq!(f(&v, "requests.errors"), 0.0, "{}", v["errors_by_kind"]);
    assert_eq!(f(&v, "bytes.sent"), 200.0 * 6.0);
    assert_eq!(f(&v, "bytes.received"), 200.0 * 7.0);
    assert_eq!(f(&v, "latency_ns.count"), 200.0);
    let p50 = f(&v, "latency_ns.p50");
    assert!((2_000.0..20_000_000.0).contains(&p50), "latency p50 {p50}");
    // The peer saw each heartbeat once, and nothing else.
    let lines = server.lines();
    assert_eq!(lines.len(), 200);
    assert!(lines.iter().all(|l| l == "PING\r\n"), "{lines:?}");
}

/// Reads one HTTP/1.1 request head (through the empty line) per reply.
fn http_ok(line: &str) -> Vec<u8> {
    if line == "\r\n" {
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
    } else {
        Vec::new()
    }
}

#[test]
fn traffic_tag_header_reaches_the_server_rendered_per_request() {
    let _g = load_lock();
    let server = LineServer::start(http_ok);
    let v = run_report(
        &[
            "--target",
            &server.addr,
            "--http",
            "GET /",
            "-H",
            "X-Traffic-Tag: t-{seq}",
            "--rate",
            "500",
            "--duration",
            "1s",
            "--connections",
            "4",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(f(&v, "requests.completed"), 500.0, "{}", v["requests"]);
    assert_eq!(v["http"]["status_classes"]["2xx"], 500);
    let mut tags: Vec<u64> = server
        .lines()
        .iter()
        .filter_map(|l| l.strip_prefix("X-Traffic-Tag: t-"))
        .map(|t| t.trim_end().parse().unwrap())
        .collect();
    tags.sort_unstable();
    // One tag per request, each sequence number once: 0, 1, ..., 499.
    assert_eq!(tags, (0..500).collect::<Vec<u64>>());
}

/// A peer that answers every 16-byte request with a length-prefixed reply laid out as
/// `"LP" | u16be len | len bytes | "\n"`, i.e. `length-prefixed:u16be,offset=2,adjust=1`.
/// The body length varies (1 to 600 bytes, so the field's high byte is used too), and
/// each reply is written in three pieces split inside the header. Returns the address
/// and the (replies, bytes) the peer wrote.
fn length_prefixed_server() -> (String, Arc<AtomicU64>, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (replies, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (r, b) = (replies.clone(), bytes.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (r, b) = (r.clone(), b.clone());
            std::thread::spawn(move || {
                stream.set_nodelay(true).unwrap();
                let mut req = [0u8; 16];
                let mut k: usize = 0;
                while stream.read_exact(&mut req).is_ok() {
                    let len = 1 + (k * 97) % 600;
                    k += 1;
                    let mut reply = b"LP".to_vec();
                    reply.extend_from_slice(&(len as u16).to_be_bytes());
                    reply.extend(std::iter::repeat_n(b'x', len));
                    reply.push(b'\n');
                    for piece in [&reply[..3], &reply[3..5], &reply[5..]] {
                        if stream.write_all(piece).is_err() {
                            return;
                        }
                    }
                    r.fetch_add(1, Ordering::Relaxed);
                    b.fetch_add(reply.len() as u64, Ordering::Relaxed);
                }
            });
        }
    });
    (addr, replies, bytes)
}

#[test]
fn length_prefixed_framing_against_a_foreign_peer() {
    let _g = load_lock();
    let (addr, replies, bytes) = length_prefixed_server();
    let v = run_report(
        &[
            "--target",
            &addr,
            "--payload-size",
            "16",
            "--framing",
            "length-prefixed:u16be,offset=2,adjust=1",
            "--rate",
            "1000",
            "--duration",
            "2s",
            "--connections",
            "4",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(f(&v, "requests.errors"), 0.0, "{}", v["errors_by_kind"]);
    assert!(
        v["first_protocol_error"].is_null(),
        "{}",
        v["first_protocol_error"]
    );
    assert_eq!(f(&v, "requests.completed"), 2000.0, "{}", v["requests"]);
    // Every byte the peer wrote was framed into a response, and nothing more.
    assert_eq!(replies.load(Ordering::Relaxed), 2000);
    assert_eq!(
        f(&v, "bytes.received"),
        bytes.load(Ordering::Relaxed) as f64
    );
}

#[test]
fn connection_wait_diagnosis_with_littles_law_and_poisson_fit() {
    let _g = load_lock();
    // Two connections to a target that takes 10 ms per request serve 200/s; 400/s
    // arrive. Little's law: 400/s x 10 ms = 4 requests in flight needed, 2 allowed.
    let sink = Sink::start(&["--delay", "10ms"]);
    let v = run_report(
        &[
            "--target",
            &sink.addr,
            "--rate",
            "400",
            "--arrivals",
            "poisson",
            "--seed",
            "7",
            "--duration",
            "2s",
            "--connections",
            "2",
        ],
        Duration::from_secs(30),
    );
    assert!(
        f(&v, "connection_wait_ns.p99") > 100e6,
        "{}",
        v["connection_wait_ns"]
    );
    let diag = v["diagnosis"].as_array().unwrap();
    let line = diag
        .iter()
        .find(|d| d["code"] == "connection_wait_pool_limit")
        .and_then(|d| d["message"].as_str())
        .unwrap_or_else(|| panic!("no connection_wait_pool_limit diagnosis in {diag:?}"));
    assert!(line.contains("connection wait dominates latency"), "{line}");
    // "Little's law: R requests/s x S mean service time = N requests in flight
    // needed; this run allowed A (connections x pipeline)."
    let number_before = |marker: &str| -> f64 {
        let head = &line[..line
            .find(marker)
            .unwrap_or_else(|| panic!("{marker} in {line}"))];
        head.split_whitespace().last().unwrap().parse().unwrap()
    };
    let rate = number_before(" requests/s x ");
    let needed = number_before(" requests in flight needed");
    let allowed: f64 = line
        .split("this run allowed ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(allowed, 2.0, "{line}");
    let svc_s = f(&v, "service_time_ns.mean") / 1e9;
    assert!(svc_s >= 0.010, "the sink's 10 ms delay: {svc_s} s");
    assert_eq!(needed, (rate * svc_s).round(), "{line}");
    assert!(needed >= 3.0, "{line}");
    // The Poisson fit is computed from the run's own dispatch instants: one gap per
    // request after the first, the 1% critical value 1.63/sqrt(gaps), and a verdict
    // that follows from them.
    let fit = &v["poisson_fit"];
    assert_eq!(v["arrivals"], "poisson");
    let gaps = f(fit, "gaps");
    assert_eq!(gaps, f(&v, "requests.dispatched") - 1.0, "{fit}");
    assert!((700.0..=900.0).contains(&gaps), "{fit}");
    let critical = f(fit, "ks_critical_1pct");
    assert!((critical - 1.63 / gaps.sqrt()).abs() < 1e-9, "{fit}");
    let d = f(fit, "ks_d");
    assert!(d > 0.0 && d < 1.0, "{fit}");
    assert_eq!(fit["rejected"], d > critical, "{fit}");
}

#[test]
fn reconnects_keep_their_source_address() {
    let _g = load_lock();
    // The sink closes every connection each 400 ms; blaster reconnects after 10-20 ms.
    // Reconnects bind the source with IP_BIND_ADDRESS_NO_PORT (the first connect binds
    // an explicit port), so after two closes every connection is a reconnect.
    let sink = Sink::start(&["--close-every", "400ms"]);
    let port = sink.addr.rsplit(':').next().unwrap().to_string();
    let (_d, path) = tmp_json();
    let child = Command::new(bin())
        .args(["run", "--target", &sink.addr, "--cores", "0"])
        .args(["--source-ip", "127.0.0.2-127.0.0.3", "--connections", "4"])
        .args(["--reconnect-backoff", "base=10ms,max=20ms,jitter=0"])
        .args(["--rate", "200", "--duration", "3s"])
        .args(["--json", path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1300));
    let want = BTreeMap::from([("127.0.0.2".to_string(), 2), ("127.0.0.3".to_string(), 2)]);
    let deadline = Instant::now() + Duration::from_millis(1200);
    let mut seen = sources_connected_to(&port);
    while seen != want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(25));
        seen = sources_connected_to(&port);
    }
    let out = wait_bounded(child, Duration::from_secs(30));
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    assert_eq!(seen, want, "reconnected sources");
    let v = read_json(&path);
    let c = &v["connections"];
    let closed = f(c, "closed_by_target");
    assert!(closed >= 4.0 * 5.0, "{c}");
    // One reconnect per close, but for closes in the run's last backoff (the sink
    // closes on its own clock, so a close may come 10-20 ms before the end, and more
    // so when a busy host starts the run late): at most one per connection.
    let reconnects = f(c, "reconnects");
    assert!(
        reconnects <= closed && reconnects >= closed - 4.0,
        "one reconnect per close: {c}"
    );
    assert_eq!(
        f(c, "opened"),
        4.0 + reconnects,
        "every reconnect succeeded: {c}"
    );
    assert_eq!(f(c, "failed"), 0.0, "{c}");
}

/// Sockets in TIME_WAIT whose peer is `port` (the generator's side of its connections),
/// or on their way to it (FIN_WAIT: closed first, the peer's FIN not yet in; on a busy
/// host the readiness probe of `Sink::start` can still be there when counted).
fn time_wait_towards(port: &str) -> usize {
    let ss = Command::new("ss")
        .args([
            "-Htan",
            "state",
            "time-wait",
            "state",
            "fin-wait-1",
            "state",
            "fin-wait-2",
            "dport",
            "=",
            &format!(":{port}"),
        ])
        .output()
        .expect("ss (iproute2) is needed");
    String::from_utf8_lossy(&ss.stdout).lines().count()
}

#[test]
fn linger0_leaves_no_time_wait_on_the_generator() {
    let _g = load_lock();
    let run_against = |extra: &[&str]| -> usize {
        let sink = Sink::start(&[]);
        let port = sink.addr.rsplit(':').next().unwrap().to_string();
        // Sink::start's readiness probe closed first and left one of its own.
        let before = time_wait_towards(&port);
        let mut args = vec![
            "--target",
            sink.addr.as_str(),
            "--rate",
            "200",
            "--duration",
            "1s",
            "--connections",
            "8",
        ];
        args.extend_from_slice(extra);
        let v = run_report(&args, Duration::from_secs(30));
        assert_eq!(f(&v, "requests.completed"), 200.0, "{}", v["requests"]);
        time_wait_towards(&port) - before
    };
    // The control: closing with FIN leaves each of the 8 in TIME_WAIT on this side,
    // so the count below can see them.
    assert_eq!(run_against(&[]), 8, "TIME_WAIT without --linger0");
    assert_eq!(run_against(&["--linger0"]), 0, "TIME_WAIT with --linger0");
}

/// `--warmup 1s --duration 3s --rate 1000`: the server sees all 3,000 requests, the
/// report records exactly the 2,000 due after the warm-up (counters, histograms,
/// intervals, rates over 2 s), and says it warmed.
#[test]
fn warmup_runs_the_timetable_but_records_only_what_follows_it() {
    let _g = load_lock();
    let server = LineServer::start(|_| b"pong\n".to_vec());
    let (_dir, path) = tmp_json();
    let out = run(
        &[
            "run",
            "--target",
            &server.addr,
            "--cores",
            "0",
            "--connections",
            "4",
            "--rate",
            "1000",
            "--duration",
            "3s",
            "--warmup",
            "1s",
            "--payload",
            "ping\\n",
            "--framing",
            "delimiter:\\n",
            "--max-lag",
            "50ms",
            "--json",
            path.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&path);
    assert_eq!(
        server.lines().len(),
        3000,
        "the warm-up's requests were sent"
    );
    for key in [
        "requests.dispatched",
        "requests.sent",
        "requests.completed",
        "latency_ns.count",
        "dispatch_lag_ns.count",
        "connection_wait_ns.count",
    ] {
        assert_eq!(f(&v, key), 2000.0, "{key}: {}", v["requests"]);
    }
    assert_eq!(f(&v, "requests.errors"), 0.0);
    assert_eq!(f(&v, "config.warmup_ns"), 1e9);
    assert!(
        (f(&v, "duration_s") - 2.0).abs() < 1e-6,
        "{}",
        v["duration_s"]
    );
    let intervals = v["intervals"].as_array().unwrap();
    assert_eq!(intervals.len(), 2, "{}", v["intervals"]);
    let per_interval: f64 = intervals
        .iter()
        .map(|i| f(i, "achieved_rps") * f(i, "duration_s"))
        .sum();
    assert!((per_interval - 2000.0).abs() < 1e-6, "{per_interval}");
}

/// A target that accepts and resets every connection, and a UDP port nobody listens
/// on: nothing succeeds, so the run exits 1 with one line saying what happened, and
/// its report is still written.
#[test]
fn nothing_succeeded_is_a_failed_run() {
    let _g = load_lock();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            // Read the request, then close with RST (linger 0).
            let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
            let mut buf = [0u8; 64];
            let _ = (&stream).read(&mut buf);
            drop(stream);
        }
    });
    let tcp = [
        "--target",
        &addr,
        "--connections",
        "2",
        "--rate",
        "100",
        "--duration",
        "1s",
    ];
    let (err, v) = failed_run(&tcp);
    assert!(err.contains("nothing succeeded against"), "{err}");
    assert_eq!(f(&v, "requests.completed"), 0.0);
    assert!(f(&v, "requests.errors") > 0.0, "{}", v["errors_by_kind"]);

    // UDP to a port with no listener: every datagram lost.
    let target = format!("127.0.0.1:{}", free_port());
    let udp = [
        "--proto",
        "udp",
        "--target",
        &target,
        "--rate",
        "100",
        "--duration",
        "1s",
        "--timeout",
        "200ms",
    ];
    let (err, v) = failed_run(&udp);
    assert!(err.contains("nothing succeeded against"), "{err}");
    assert_eq!(f(&v, "requests.completed"), 0.0);

    // Frames through a server that accepts and reads but never relays: every planned
    // frame is lost.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while stream.read(&mut buf).is_ok_and(|n| n > 0) {}
            });
        }
    });
    let (err, v) = failed_run(&frames_args_with(&addr, "20", "1s"));
    assert!(
        err.contains("0 of") && err.contains("expected frames arrived"),
        "{err}"
    );
    assert_eq!(f(&v, "frames.received"), 0.0);
}

/// `blaster run` from core 0 with `args` and a JSON report, which must end as a failed
/// run (exit 1) whose report was written all the same: stderr and the report.
fn failed_run(args: &[&str]) -> (String, serde_json::Value) {
    let (_dir, path) = tmp_json();
    let mut all = vec!["run", "--cores", "0", "--max-lag", "50ms", "--json"];
    all.push(path.to_str().unwrap());
    all.extend_from_slice(args);
    let out = run(&all, Duration::from_secs(30));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    (err, read_json(&path))
}
