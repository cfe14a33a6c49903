//! Connection scale and lifecycle (issue 4), end to end on loopback: holding
//! connections past RLIMIT_NOFILE over several source addresses, reconnect storms,
//! connection per request, and the walls a plan hits before it connects.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::time::Duration;

/// `ip_local_port_range` as (low, high).
fn port_range() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let mut it = s.split_whitespace().map(|v| v.parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

#[test]
fn a_plan_beyond_the_port_space_is_refused_before_connecting() {
    let (lo, hi) = port_range();
    let size = hi - lo + 1;
    let conns = (size + 1000).to_string();
    // Nobody listens there: a run that tried to connect would fail with "refused".
    let target = format!("127.0.0.1:{}", free_port());
    let out = run(
        &[
            "run",
            "--target",
            &target,
            "--rate",
            "10",
            "--connections",
            &conns,
        ],
        Duration::from_secs(20),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for needle in [
        "ports:".to_string(),
        format!("{conns} connections"),
        format!("{lo}-{hi} gives {size}"),
        "--source-ip".to_string(),
        "ip_local_port_range".to_string(),
    ] {
        assert!(err.contains(&needle), "missing {needle:?} in {err}");
    }
    assert!(!err.contains("refused"), "{err}");
}

#[test]
fn connection_per_request_completes_every_request_and_times_its_connects() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    // The counts must hold even when the host stalled the generator (exit 3).
    let v = run_report(
        &[
            "--target",
            &sink.addr,
            "--connect-per-request",
            "--linger0",
            "--connections",
            "16",
            "--rate",
            "1000",
            "--duration",
            "5s",
        ],
        Duration::from_secs(40),
    );
    assert_eq!(v["mode"], "per_request");
    let done = f(&v, "requests.completed");
    assert_eq!(f(&v, "requests.dispatched"), 5000.0, "{}", v["requests"]);
    assert_eq!(f(&v, "requests.sent"), done, "{}", v["requests"]);
    assert_eq!(done, 5000.0, "{} {}", v["requests"], v["errors_by_kind"]);
    // One connect per request, each timed; none counted as a reconnect.
    assert_eq!(f(&v, "connect_time_ns.count"), done);
    assert!(f(&v, "connect_time_ns.p50") > 0.0);
    assert_eq!(f(&v, "connections.opened"), done);
    assert_eq!(f(&v, "connections.reconnects"), 0.0);
    // The connect is part of the latency, which counts from the intended instant.
    assert!(f(&v, "latency_ns.p50") >= f(&v, "connect_time_ns.p50") * 0.5);
}

/// Issue 33: every failed request is counted once, under one kind, so the kinds add up
/// to `requests.errors`, in the JSON and in the text. Against a port nobody listens on,
/// a request whose own connection is refused fails as `connect_refused` (it used to be
/// counted `no_connection` as well: 100 errors, 200 by kind); UDP datagrams to it are
/// `lost`.
#[test]
fn issue_33_errors_by_kind_add_up_to_the_errors() {
    // Below the ephemeral range (see `free_port`): a closed port, which no connect of
    // the run can take as its own source port and so connect to itself.
    let target = format!("127.0.0.1:{}", free_port());
    for mode in ["--connect-per-request", "udp"] {
        let (_d, path) = tmp_json();
        let mut args = vec!["run", "--cores", "0", "--target", &target];
        args.extend(["--rate", "100", "--duration", "1s", "--timeout", "200ms"]);
        args.extend(["--connections", "4", "--json", path.to_str().unwrap()]);
        match mode {
            "udp" => args.extend(["--proto", "udp"]),
            m => args.push(m),
        }
        let out = run(&args, Duration::from_secs(30));
        // Nothing succeeded: one line, exit 1, the report written all the same.
        assert_eq!(out.status.code(), Some(1), "{mode}: {}", stderr(&out));
        let v = read_json(&path);
        let errors = f(&v, "requests.errors");
        let kinds = v["errors_by_kind"].as_object().expect("errors_by_kind");
        let sum: f64 = kinds.values().map(|n| n.as_f64().unwrap()).sum();
        assert_eq!(sum, errors, "{mode}: {kinds:?}");
        // Every request due ended as an error (none completed, none cut off).
        assert!(errors > 0.0, "{}", v["requests"]);
        assert_eq!(errors, f(&v, "requests.dispatched"), "{}", v["requests"]);
        if mode == "udp" {
            assert_eq!(f(&v, "errors_by_kind.lost"), errors, "{kinds:?}");
        } else {
            // Each request's own connect was refused: that is its one error.
            assert_eq!(f(&v, "errors_by_kind.connect_refused"), errors, "{kinds:?}");
            assert_eq!(f(&v, "connections.failed"), errors, "{}", v["connections"]);
            // A refusal that failed a request is not a connection event as well.
            let events = &v["connections"]["events_by_kind"];
            assert_eq!(events, &serde_json::json!({}), "{}", v["connections"]);
        }
        // The text report says the same.
        let text = String::from_utf8_lossy(&out.stdout);
        let line = (text.lines())
            .find_map(|l| l.strip_prefix("errors by kind: "))
            .unwrap_or_else(|| panic!("no errors by kind in {text}"));
        let text_sum: f64 = (line.split_whitespace())
            .map(|kv| kv.split_once('=').unwrap().1.parse::<f64>().unwrap())
            .sum();
        assert_eq!(text_sum, errors, "{mode}: {line}");
        assert!(
            text.contains(&format!(" {errors} errors (")),
            "{mode}: requests line in {text}"
        );
    }
}

#[test]
fn holds_20000_connections_over_several_source_addresses() {
    let _g = load_lock();
    let sink = Sink::start(&["--max-connections", "25000"]);
    let (_d, path) = tmp_json();
    let child = std::process::Command::new(bin())
        .args(["run", "--target", &sink.addr, "--cores", "0", "--hold"])
        .args([
            "--source-ip",
            "127.0.0.2-127.0.0.5",
            "--connections",
            "20000",
        ])
        .args([
            "--duration",
            "4s",
            "--quiet",
            "--json",
            path.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // While they are held: which source addresses the sink's peers have.
    let port = sink.addr.rsplit(':').next().unwrap().to_string();
    // The fullest view seen while they were held.
    let mut per_source = std::collections::BTreeMap::<String, usize>::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline && per_source.values().sum::<usize>() < 20_000 {
        std::thread::sleep(Duration::from_millis(300));
        let seen = sources_connected_to(&port);
        if seen.values().sum::<usize>() > per_source.values().sum::<usize>() {
            per_source = seen;
        }
    }
    let out = wait_bounded(child, Duration::from_secs(60));
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&path);
    assert_eq!(v["mode"], "hold");
    assert_eq!(
        f(&v, "connections.established"),
        20000.0,
        "{}",
        v["connections"]
    );
    assert_eq!(f(&v, "connections.failed"), 0.0, "{}", v["connections"]);
    assert_eq!(f(&v, "connect_time_ns.count"), 20000.0);
    assert!(f(&v, "connections.establish_all_ns") > 0.0);
    let mem = f(&v, "memory.user_bytes_per_connection");
    assert!(mem > 0.0 && mem < 4096.0, "memory per connection {mem}");
    // Past RLIMIT_NOFILE (20,000 here) the core's connections span several rings:
    // one ring's file table holds the hard limit less the process's 64.
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    let nr_open: u64 = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 20);
    let per_ring = hard.min(nr_open).saturating_sub(64).max(1);
    let rings = 20_000u64.div_ceil(per_ring) as f64;
    assert_eq!(
        f(&v, "connections.rings_per_core"),
        rings,
        "{}",
        v["connections"]
    );
    // Each of the four sources holds its quarter (a stray 127.0.0.1 socket, such as
    // the harness's readiness probe, does not count).
    for i in 2..=5 {
        let ip = format!("127.0.0.{i}");
        assert_eq!(per_source.get(&ip), Some(&5000), "{ip}: {per_source:?}");
    }
}

#[test]
fn a_reconnect_storm_is_spread_by_jitter_and_requests_keep_completing() {
    let _g = load_lock();
    let sink = Sink::start(&["--close-every", "2s"]);
    let v = run_report(
        &[
            "--target",
            &sink.addr,
            "--connections",
            "200",
            "--rate",
            "1000",
            "--duration",
            "7s",
            "--reconnect-backoff",
            "base=500ms,jitter=0.2",
        ],
        Duration::from_secs(40),
    );
    let c = &v["connections"];
    // The sink closed every connection at least twice (about 2 s and 4 s in).
    assert!(f(&v, "connections.closed_by_target") >= 400.0, "{c}");
    assert!(f(&v, "connections.reconnects") >= 400.0, "{c}");
    assert_eq!(f(&v, "connections.failed"), 0.0, "{c}");
    // Each reconnect waits base +-20%: 400-600 ms, spread over that window rather
    // than all at once.
    let d = |k: &str| f(&v, &format!("connections.reconnect_delay_ns.{k}"));
    assert!(d("p50") >= 400e6 && d("max") <= 601e6, "{c}");
    assert!(d("p90") - d("p50") > 10e6, "reconnects bunched: {c}");
    // Requests keep completing through the storms: every second of the schedule.
    for i in v["intervals"].as_array().unwrap() {
        assert!(i["achieved_rps"].as_f64().unwrap() > 100.0, "{i}");
    }
    let done = f(&v, "requests.completed");
    assert!(
        done >= 0.9 * f(&v, "requests.dispatched"),
        "{}",
        v["requests"]
    );
    // Requests in flight when the sink closed are errors, not retried; they add up.
    let total = done + f(&v, "requests.errors") + f(&v, "requests.cut_off");
    assert_eq!(total, f(&v, "requests.dispatched"));
}

#[test]
fn connect_rate_paces_the_connects() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let v = run_report(
        &[
            "--target",
            &sink.addr,
            "--hold",
            "--connections",
            "300",
            "--connect-rate",
            "1000",
            "--duration",
            "1s",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(
        f(&v, "connections.established"),
        300.0,
        "{}",
        v["connections"]
    );
    // 300 connects at 1,000/s take about 0.3 s; unpaced they take a few ms.
    let took = f(&v, "connections.establish_all_ns") / 1e9;
    assert!(
        (0.28..1.5).contains(&took),
        "300 connects at 1000/s took {took} s"
    );
}
