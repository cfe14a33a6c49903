//! Connection scale and lifecycle (issue 4), end to end on loopback: holding
//! connections past RLIMIT_NOFILE over several source addresses, reconnect storms,
//! connection per request, and the walls a plan hits before it connects.
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
    let (_d, path) = tmp_json();
    let out = run(
        &[
            "run",
            "--target",
            &sink.addr,
            "--cores",
            "0",
            "--connect-per-request",
            "--linger0",
            "--connections",
            "16",
            "--rate",
            "1000",
            "--duration",
            "5s",
            "--json",
            path.to_str().unwrap(),
        ],
        Duration::from_secs(40),
    );
    // 3: the host may have stalled the generator; the counts must hold either way.
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&path);
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
