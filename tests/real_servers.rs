//! End-to-end against real servers from Debian packages, started by the tests on free
//! loopback ports: nginx (HTTP/1.1 keep-alive), redis-server (RESP), memcached (text
//! protocol, a mix with two framers), socat (UDP echo). Each checks completed = sent,
//! zero protocol errors and a plausible latency. `.ci/run` installs the packages; a
//! test whose server binary is missing fails and says which package to install.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Server(Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn require(bin: &str, package: &str) -> String {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"] {
        let p = format!("{dir}/{bin}");
        if Path::new(&p).exists() {
            return p;
        }
    }
    panic!("{bin} not found: install the Debian package {package} (.ci/run does)");
}

fn wait_tcp(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "server on port {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn spawn(cmd: &mut Command) -> Server {
    Server(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start server"),
    )
}

/// Runs blaster and checks the invariants every real-server test shares.
fn check_run(target: &str, args: &[&str], expect_completed: u64) -> serde_json::Value {
    let v = check_run_with_latency(target, args, expect_completed);
    assert_latency_plausible(&v);
    v
}

/// [`check_run`] without the loopback latency range, for a server slow on purpose.
fn check_run_with_latency(target: &str, args: &[&str], expect_completed: u64) -> serde_json::Value {
    let (code, v, err) = run_json(target, args);
    // These tests check protocols; a generator disturbed by other load on the machine
    // may mark the run invalid (exit 3) without changing what is checked here.
    assert!(matches!(code, Some(0 | 3)), "{err}");
    assert_eq!(
        f(&v, "requests.sent"),
        expect_completed as f64,
        "{}",
        v["requests"]
    );
    assert_eq!(
        f(&v, "requests.completed"),
        expect_completed as f64,
        "{}",
        v["requests"]
    );
    assert_eq!(f(&v, "requests.errors"), 0.0, "{}", v["errors_by_kind"]);
    assert!(
        v["errors_by_kind"].get("protocol").is_none(),
        "{}",
        v["errors_by_kind"]
    );
    assert!(
        v["first_protocol_error"].is_null(),
        "{}",
        v["first_protocol_error"]
    );
    v
}

/// At the rates these tests use (at most 4,000/s on 2 to 8 connections, far below
/// what the servers sustain) a loopback answer takes 20 to 100 µs on an idle host.
/// Latency counts from the intended instant, so it is never below service time. The
/// 2 µs floor is two context switches through another process; the 20 ms ceiling is
/// room for a host shared with compilers (6 ms p50 seen at load 16 on 2 vCPUs) and
/// still catches ns recorded as µs (x1000). The scale itself is checked against an
/// independent clock by [`redis_debug_sleep_latency_matches_the_servers_own_timing`].
fn assert_latency_plausible(v: &serde_json::Value) {
    let p50 = f(v, "latency_ns.p50");
    let svc = f(v, "service_time_ns.p50");
    assert!(
        (2_000.0..20_000_000.0).contains(&p50),
        "implausible latency p50 {p50} ns"
    );
    assert!(
        svc >= 2_000.0 && p50 >= svc,
        "latency p50 {p50} ns against service time p50 {svc} ns"
    );
}

fn nginx() -> (Server, u16, tempfile::TempDir) {
    nginx_with(1_000_000)
}

fn nginx_with(keepalive_requests: u64) -> (Server, u16, tempfile::TempDir) {
    let bin = require("nginx", "nginx-light");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = format!(
        "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; \
         error_log {d}/error.log; events {{ worker_connections 1024; }} \
         http {{ access_log off; keepalive_requests {keepalive_requests}; \
         client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; \
         uwsgi_temp_path {d}; scgi_temp_path {d}; \
         server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"hello from nginx\\n\"; }} \
         location /missing {{ return 404; }} location /fail {{ return 503; }} }} }}",
        d = dir.path().display()
    );
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let s = spawn(
        Command::new(bin)
            .args(["-c", conf_path.to_str().unwrap(), "-p"])
            .arg(dir.path()),
    );
    wait_tcp(port);
    (s, port, dir)
}

#[test]
fn nginx_http1_keepalive() {
    let _g = load_lock();
    let (_s, port, _d) = nginx();
    let target = format!("127.0.0.1:{port}");
    let v = check_run(
        &target,
        &[
            "--http",
            "GET /",
            "-H",
            "Accept: */*",
            "--rate",
            "2000",
            "--duration",
            "2s",
            "--connections",
            "8",
        ],
        4000,
    );
    assert_eq!(v["protocol"], "tcp");
    assert_eq!(v["framer"], "http1");
    assert_eq!(v["http"]["status_classes"]["2xx"], 4000);
}

#[test]
fn nginx_connection_close_reopens_without_errors() {
    let _g = load_lock();
    // nginx answers every 100th request on a connection with `Connection: close`.
    let (_s, port, _d) = nginx_with(100);
    let target = format!("127.0.0.1:{port}");
    let v = check_run(
        &target,
        &[
            "--http",
            "GET /",
            "--rate",
            "2000",
            "--duration",
            "2s",
            "--connections",
            "8",
        ],
        4000,
    );
    assert!(f(&v, "connections.opened") >= 40.0, "{}", v["connections"]);
}

#[test]
fn nginx_http1_pipelined_and_status_classes() {
    let _g = load_lock();
    let (_s, port, _d) = nginx();
    let target = format!("127.0.0.1:{port}");
    let v = check_run(
        &target,
        &[
            "--http",
            "GET /",
            "--rate",
            "4000",
            "--duration",
            "2s",
            "--connections",
            "4",
            "--pipeline",
            "4",
        ],
        8000,
    );
    assert_eq!(v["http"]["status_classes"]["2xx"], 8000);
    let v = check_run(
        &target,
        &[
            "--http",
            "GET /missing",
            "--rate",
            "500",
            "--duration",
            "1s",
        ],
        500,
    );
    assert_eq!(v["http"]["status_classes"]["4xx"], 500);
}

/// Runs blaster against `target` with `args` (JSON to a temporary file): the exit
/// code, the report and stderr.
fn run_json(target: &str, args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let (_dir, path) = tmp_json();
    let p = path.to_str().unwrap();
    let mut all = vec!["run", "--target", target, "--cores", "0", "--json", p];
    all.extend_from_slice(args);
    let out = run(&all, Duration::from_secs(60));
    let v = read_json(&path);
    (out.status.code(), v, stderr(&out))
}

/// nginx answers 503 on /fail and 200 on /: a seeded mix sends a known share to each.
/// Every 503 is a request error, the headline latency holds only the 200s, the error
/// replies' latency has its own histogram, and an SLO on errors breaks (exit 4).
#[test]
fn nginx_503_replies_are_errors() {
    let _g = load_lock();
    let (_s, port, d) = nginx();
    let target = format!("127.0.0.1:{port}");
    let mix = d.path().join("mix.txt");
    std::fs::write(&mix, "ok 70 http1 GET /\nfail 30 http1 GET /fail\n").unwrap();
    let (code, v, err) = run_json(
        &target,
        &[
            "--mix",
            mix.to_str().unwrap(),
            "--rate",
            "2000",
            "--duration",
            "2s",
            "--connections",
            "4",
            "--max-lag",
            "20ms",
            "--slo",
            "p99<50ms,errors<1%",
        ],
    );
    // errors<1% breaks (exit 4); a generator disturbed by the host exits 3 instead,
    // and the verdict below still holds.
    assert!(
        code == Some(4) || (code == Some(3) && v["valid"] == false),
        "errors<1% must break: {err}"
    );
    let codes = &v["http"]["status_codes"];
    let (ok, fail) = (f(codes, "200"), f(codes, "503"));
    let entries = v["mix"].as_array().unwrap();
    assert_eq!(ok + fail, 4000.0, "{codes}");
    assert_eq!(
        fail,
        f(&entries[1], "errors"),
        "the 503s are the fail entry's errors"
    );
    assert_eq!(f(&entries[1], "completed"), 0.0);
    assert!((1000.0..1400.0).contains(&fail), "30% of 4000: {fail}");
    assert_eq!(f(&v, "requests.errors"), fail, "{}", v["errors_by_kind"]);
    assert_eq!(f(&v, "errors_by_kind.error_reply"), fail);
    assert_eq!(f(&v, "error_replies"), fail);
    assert_eq!(f(&v, "requests.completed"), ok);
    assert_eq!(
        f(&v, "latency_ns.count"),
        ok,
        "the headline holds the 200s only"
    );
    assert_eq!(f(&v, "error_latency_ns.count"), fail);
    assert_eq!(v["http"]["status_classes"]["5xx"], fail as u64);
    assert_eq!(v["slo"]["met"], false);
    let text = run_text(&target, &["--mix", mix.to_str().unwrap()]);
    assert!(text.contains("codes: 200="), "{text}");
    assert!(text.contains("error replies:"), "{text}");

    // --error-status none: the same replies are all answers.
    let (code, v, err) = run_json(
        &target,
        &[
            "--mix",
            mix.to_str().unwrap(),
            "--rate",
            "1000",
            "--duration",
            "1s",
            "--error-status",
            "none",
            "--max-lag",
            "20ms",
        ],
    );
    assert!(matches!(code, Some(0 | 3)), "{err}");
    assert_eq!(f(&v, "requests.errors"), 0.0);
    assert_eq!(f(&v, "requests.completed"), 1000.0);
    // --error-status 404 only: the 503s are answers, the 404s errors.
    let (_, v, _) = run_json(
        &target,
        &[
            "--http",
            "GET /missing",
            "--rate",
            "500",
            "--duration",
            "1s",
            "--error-status",
            "404,5xx",
            "--max-lag",
            "20ms",
        ],
    );
    assert_eq!(f(&v, "requests.errors"), 500.0);
}

/// The text report of a short run (stdout), for its lines.
fn run_text(target: &str, args: &[&str]) -> String {
    let mut all = vec![
        "run",
        "--target",
        target,
        "--cores",
        "0",
        "--rate",
        "500",
        "--duration",
        "1s",
        "--max-lag",
        "20ms",
    ];
    all.extend_from_slice(args);
    let out = run(&all, Duration::from_secs(60));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every reply an error: the run exits 1 with one line saying so, its report still
/// written, and the diagnosis names the top code and its share.
#[test]
fn nginx_all_503_is_a_failed_run() {
    let _g = load_lock();
    let (_s, port, _d) = nginx();
    let target = format!("127.0.0.1:{port}");
    let (code, v, err) = run_json(
        &target,
        &[
            "--http",
            "GET /fail",
            "--rate",
            "500",
            "--duration",
            "1s",
            "--slo",
            "p99<50ms",
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("nothing succeeded") && err.contains("every reply was an error"),
        "{err}"
    );
    assert!(err.contains("503"), "{err}");
    assert_eq!(f(&v, "requests.errors"), 500.0);
    assert_eq!(f(&v, "requests.completed"), 0.0);
    let d = v["diagnosis"].as_array().unwrap();
    let top = d
        .iter()
        .find(|d| d["code"] == "most_replies_failed")
        .expect("diagnosis");
    assert!(
        top["message"]
            .as_str()
            .unwrap()
            .contains("HTTP 503 (500, 100.0%"),
        "{top}"
    );
    // No latency samples: the p99 term is not met, never met by default.
    assert_eq!(v["slo"]["met"], false);
    assert!(v["slo"]["terms"][0]["measured"].is_null());
}

/// Redis: GET on a list answers -WRONGTYPE, each counted as an error by name.
#[test]
fn redis_wrongtype_replies_are_errors() {
    let _g = load_lock();
    let (_s, port) = redis();
    let target = format!("127.0.0.1:{port}");
    {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(b"*3\r\n$5\r\nLPUSH\r\n$4\r\nlist\r\n$1\r\na\r\n")
            .unwrap();
        let mut buf = [0u8; 16];
        let n = c.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b":1\r\n");
    }
    let mix_dir = tempfile::tempdir().unwrap();
    let mix = mix_dir.path().join("mix.txt");
    std::fs::write(
        &mix,
        "ping 50 resp PING\\r\\n\n\
         wrong 50 resp *2\\r\\n$3\\r\\nGET\\r\\n$4\\r\\nlist\\r\\n\n",
    )
    .unwrap();
    let (code, v, err) = run_json(
        &target,
        &[
            "--mix",
            mix.to_str().unwrap(),
            "--rate",
            "1000",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--max-lag",
            "20ms",
        ],
    );
    assert!(matches!(code, Some(0 | 3)), "{err}");
    let entries = v["mix"].as_array().unwrap();
    let wrong = f(&entries[1], "errors");
    assert_eq!(f(&entries[1], "completed"), 0.0);
    assert_eq!(f(&entries[0], "errors"), 0.0);
    assert_eq!(f(&entries[0], "completed") + wrong, 2000.0);
    assert_eq!(f(&v, "requests.errors"), wrong);
    assert_eq!(
        f(&v, "error_replies_by_kind.-WRONGTYPE"),
        wrong,
        "{}",
        v["error_replies_by_kind"]
    );
    assert_eq!(f(&v, "error_latency_ns.count"), wrong);
}

/// memcached: a value over the item size limit (-I 1024) answers SERVER_ERROR, counted
/// as an error; the stores that fit are answers. (`-I` below the default slab chunk
/// needs `slab_chunk_max` lowered with it.)
#[test]
fn memcached_server_error_is_an_error() {
    let _g = load_lock();
    let bin = require("memcached", "memcached");
    let port = free_port();
    let _s = spawn(Command::new(bin).args([
        "-p",
        &port.to_string(),
        "-U",
        "0",
        "-l",
        "127.0.0.1",
        "-u",
        "root",
        "-I",
        "1024",
        "-o",
        "slab_chunk_max=1024",
    ]));
    wait_tcp(port);
    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("mix.txt");
    let big = "x".repeat(2000);
    std::fs::write(
        &mix,
        format!(
            "small 50 memcached set s{{rand:1}} 0 0 5\\r\\nhello\\r\\n\n\
             big 50 memcached set b 0 0 2000\\r\\n{big}\\r\\n\n"
        ),
    )
    .unwrap();
    let target = format!("127.0.0.1:{port}");
    let (code, v, err) = run_json(
        &target,
        &[
            "--mix",
            mix.to_str().unwrap(),
            "--rate",
            "500",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--max-lag",
            "20ms",
        ],
    );
    assert!(matches!(code, Some(0 | 3)), "{err}");
    let entries = v["mix"].as_array().unwrap();
    let big_errors = f(&entries[1], "errors");
    assert!(big_errors > 300.0, "{}", v["mix"]);
    assert_eq!(f(&entries[1], "completed"), 0.0);
    assert_eq!(f(&entries[0], "errors"), 0.0);
    assert_eq!(f(&entries[0], "completed") + big_errors, 1000.0);
    assert_eq!(f(&v, "requests.errors"), big_errors);
    assert_eq!(
        f(&v, "error_replies_by_kind.SERVER_ERROR"),
        big_errors,
        "{}",
        v["error_replies_by_kind"]
    );
}

fn redis() -> (Server, u16) {
    redis_with(&[])
}

fn redis_with(extra: &[&str]) -> (Server, u16) {
    let bin = require("redis-server", "redis-server");
    let port = free_port();
    let s = spawn(Command::new(bin).args(extra).args([
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
    ]));
    wait_tcp(port);
    (s, port)
}

#[test]
fn redis_ping_and_get_via_resp() {
    let _g = load_lock();
    let (_s, port) = redis();
    let target = format!("127.0.0.1:{port}");
    check_run(
        &target,
        &[
            "--payload",
            "PING\\r\\n",
            "--framing",
            "resp",
            "--rate",
            "3000",
            "--duration",
            "2s",
            "--connections",
            "8",
        ],
        6000,
    );
    // GET of a missing key answers a null bulk string ($-1); pipelined 8 deep. The key
    // has a fixed length ({rand:4}) because RESP states it ($5).
    check_run(
        &target,
        &[
            "--payload",
            "*2\\r\\n$3\\r\\nGET\\r\\n$5\\r\\nk{rand:4}\\r\\n",
            "--framing",
            "resp",
            "--rate",
            "3000",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--pipeline",
            "8",
        ],
        6000,
    );
    // GET of a key that holds a value answers a bulk string ($5 hello): the framer must
    // count the bulk's bytes and its CRLF exactly, or responses run into each other.
    check_run(
        &target,
        &[
            "--payload",
            "*3\\r\\n$3\\r\\nSET\\r\\n$5\\r\\nkbulk\\r\\n$5\\r\\nhello\\r\\n",
            "--framing",
            "resp",
            "--rate",
            "1000",
            "--duration",
            "1s",
            "--connections",
            "1",
        ],
        1000,
    );
    check_run(
        &target,
        &[
            "--payload",
            "*2\\r\\n$3\\r\\nGET\\r\\n$5\\r\\nkbulk\\r\\n",
            "--framing",
            "resp",
            "--rate",
            "3000",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--pipeline",
            "8",
        ],
        6000,
    );
}

/// One request/response exchange with a RESP server over a blocking socket.
fn resp_command(port: u16, cmd: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(cmd.as_bytes()).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    // INFO answers a bulk string: `$LEN\r\n` then LEN bytes and `\r\n`.
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "redis closed the connection");
        out.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&out);
        if let Some((head, body)) = text.split_once("\r\n")
            && let Some(len) = head.strip_prefix('$')
            && body.len() >= len.parse::<usize>().unwrap() + 2
        {
            return text.into_owned();
        }
    }
}

#[test]
fn redis_debug_sleep_latency_matches_the_servers_own_timing() {
    // Each DEBUG SLEEP holds redis for 10 ms, and redis times every command itself
    // (INFO commandstats, usec per call): an independent clock for the same requests.
    // One connection at 50/s leaves it idle half the time, so nothing queues: blaster's
    // mean service time is the server's time plus a loopback round trip. A unit or
    // clock-scale slip (TSC ticks read as ns, µs as ns) moves it by 2x or more.
    let _g = load_lock();
    let (_s, port) = redis_with(&["--enable-debug-command", "yes"]);
    let target = format!("127.0.0.1:{port}");
    let v = check_run_with_latency(
        &target,
        &[
            "--payload",
            "DEBUG SLEEP 0.01\\r\\n",
            "--framing",
            "resp",
            "--rate",
            "50",
            "--duration",
            "2s",
            "--connections",
            "1",
        ],
        100,
    );
    let stats = resp_command(port, "INFO commandstats\r\n");
    let line = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_debug:"))
        .unwrap_or_else(|| panic!("no cmdstat_debug in {stats}"));
    let field = |k: &str| -> f64 {
        let rest = &line[line.find(&format!("{k}=")).unwrap() + k.len() + 1..];
        rest.split(',').next().unwrap().parse().unwrap()
    };
    assert_eq!(field("calls"), 100.0, "{line}");
    let server_ns = field("usec_per_call") * 1e3;
    assert!(server_ns >= 10e6, "redis slept {server_ns} ns per call");
    let svc = f(&v, "service_time_ns.mean");
    let lat = f(&v, "latency_ns.mean");
    assert!(
        svc >= server_ns && svc <= server_ns * 1.2 + 1e6,
        "blaster's mean service time {svc} ns against redis's own {server_ns} ns per call"
    );
    assert!(
        lat >= svc,
        "latency mean {lat} ns below service time {svc} ns"
    );
    assert!(
        f(&v, "latency_ns.p50") >= 10e6,
        "latency p50 below the 10 ms sleep: {}",
        v["latency_ns"]
    );
}

#[test]
fn memcached_mix_of_set_and_get_with_two_framers() {
    let _g = load_lock();
    let bin = require("memcached", "memcached");
    let port = free_port();
    let _s = spawn(Command::new(bin).args([
        "-p",
        &port.to_string(),
        "-U",
        "0",
        "-l",
        "127.0.0.1",
        "-u",
        "root",
    ]));
    wait_tcp(port);
    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("mix.txt");
    std::fs::write(
        &mix,
        "# name weight framer request\n\
         set 30 delimiter:\\r\\n set key{rand:1} 0 0 5\\r\\nhello\\r\\n\n\
         get 70 delimiter:END\\r\\n get key{rand:1}\\r\\n\n",
    )
    .unwrap();
    let target = format!("127.0.0.1:{port}");
    let v = check_run(
        &target,
        &[
            "--mix",
            mix.to_str().unwrap(),
            "--rate",
            "3000",
            "--duration",
            "2s",
            "--connections",
            "8",
            "--pipeline",
            "2",
        ],
        6000,
    );
    let entries = v["mix"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    let done: f64 = entries.iter().map(|e| f(e, "completed")).sum();
    assert_eq!(done, 6000.0);
    let set = f(&entries[0], "completed");
    assert!(
        (1500.0..2100.0).contains(&set),
        "set share {set} of 6000 at weight 30%"
    );
    assert_eq!(v["framer"], "mixed");
}

/// socat as a UDP echo on a free loopback port (`-b` bytes per read when given),
/// and `blaster run --proto udp` against it from core 0 at `rate` for 2 s over two
/// flows: (exit status, JSON report, text report).
fn socat_udp_run(block: Option<&str>, rate: &str) -> (Output, serde_json::Value, String) {
    let bin = require("socat", "socat");
    let port = free_port();
    let mut args = vec![];
    if let Some(b) = block {
        args.extend(["-b", b]);
    }
    let listen = format!("UDP4-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork");
    args.extend(["-T", "5", &listen, "PIPE"]);
    let _s = spawn(Command::new(bin).args(&args));
    std::thread::sleep(Duration::from_millis(300));
    let target = format!("127.0.0.1:{port}");
    let (_dir, path) = tmp_json();
    let out = run(
        &[
            "run",
            "--proto",
            "udp",
            "--target",
            &target,
            "--cores",
            "0",
            "--rate",
            rate,
            "--duration",
            "2s",
            "--connections",
            "2",
            // The UDP echo through socat is checked, not this VM's timer: a CI run saw
            // lag p99 4 ms at 1,000/s with the hypervisor stealing the vCPU.
            "--max-lag",
            "20ms",
            "--json",
            path.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    let v = read_json(&path);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, v, text)
}

#[test]
fn socat_udp_echo() {
    let _g = load_lock();
    // socat echoes through a pipe, a byte stream: two datagrams in the pipe at once
    // come back as one datagram of both (see the next test). `-b 88`, exactly one of
    // blaster's datagrams (24-byte header + 64-byte payload), makes each read of the
    // pipe one datagram again.
    let (out, v, _) = socat_udp_run(Some("88"), "1000");
    // Valid or not (a stolen vCPU may fail the lag gate): the echo is what is checked.
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    assert_eq!(v["protocol"], "udp");
    assert_eq!(f(&v, "udp.sent"), 2000.0);
    // socat forks a child per peer on its first datagram; until the child's socket is
    // connected, a datagram of the other peer may reach it and come back on the wrong
    // flow, counted foreign (0-2 lost, each one foreign, in 9 runs here). Nothing else
    // may be lost, and the window is short: 50 datagrams are 50 ms at this rate, a
    // fork slowed by a busy host included.
    let (lost, foreign) = (f(&v, "udp.lost"), f(&v, "udp.foreign"));
    assert!(lost <= foreign && foreign <= 50.0, "{}", v["udp"]);
    assert_eq!(f(&v, "udp.joined"), 0.0, "{}", v["udp"]);
    assert_eq!(f(&v, "udp.duplicates"), 0.0);
    assert_latency_plausible(&v);
}

/// Without `-b`, socat reads its pipe 8 KiB at a time, so the requests that met in the
/// pipe come back joined in one datagram: the requests after the first are lost, and
/// the report names them (`udp.joined`) instead of leaving the loss unexplained.
#[test]
fn socat_joining_datagrams_is_reported() {
    let _g = load_lock();
    // Every loss explained needs socat to keep up with 20,000 datagrams/s: a CI run
    // under 50-60% steal lost 15,983 with 13,336 joined and none foreign, the rest
    // dropped while socat was off its vCPU (UDP's own loss, nothing to explain).
    on_a_quiet_host(
        "socat_joining_datagrams_is_reported",
        &RATE_ON_CORES_0_1,
        || {
            let (out, v, text) = socat_udp_run(None, "20000");
            assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
            let (lost, joined) = (f(&v, "udp.lost"), f(&v, "udp.joined"));
            let foreign = f(&v, "udp.foreign");
            assert!(joined > 0.0, "{}", v["udp"]);
            // Every joined request is lost...
            assert!(joined <= lost, "{}", v["udp"]);
            assert!(
                text.contains(&format!("udp: {joined} of the lost came back joined")),
                "{text}"
            );
            // ...and every lost one is explained: it came back joined, or (socat's
            // fork window, a few datagrams at this rate: 5 in a CI run) on the other
            // peer's flow, counted foreign.
            ensure_run(&v, lost <= joined + foreign, || format!("{}", v["udp"]))
        },
    );
}
