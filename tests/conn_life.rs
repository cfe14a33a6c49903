//! `--conn-max-requests` and `--conn-max-age` against real servers on loopback: a
//! connection retired by its budget or its age finishes the requests it carries,
//! closes, and is replaced, so nothing is lost or sent twice, and a server's own limit
//! just above blaster's is never reached (nginx's `keepalive_requests`, which closes an
//! HTTP/1.1 connection under pipelined requests and sends HTTP/2 a GOAWAY).
mod common;
use common::servers::{nginx_h2, nginx_listening};
use common::*;
use std::time::Duration;

fn life_run(port: u16, args: &[&str]) -> serde_json::Value {
    let (_d, json) = tmp_json();
    let target = format!("127.0.0.1:{port}");
    let mut all = vec!["run", "--target", &target, "--cores", "0"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let out = run(&all, Duration::from_secs(60));
    assert!(
        out.status.code().is_some_and(|c| c == 0 || c == 3),
        "{}",
        stderr(&out)
    );
    read_json(&json)
}

/// Every request sent once and answered; the connections opened are the first ones
/// plus one per reconnect, and the per-second series holds every reconnect.
fn assert_exact(v: &serde_json::Value, n: f64, connections: f64) {
    assert_eq!(f(v, "requests.sent"), n, "{}", v["requests"]);
    assert_eq!(f(v, "requests.completed"), n, "{}", v["requests"]);
    assert_eq!(f(v, "requests.errors"), 0.0, "{}", v["errors_by_kind"]);
    let c = &v["connections"];
    assert_eq!(f(c, "opened"), connections + f(c, "reconnects"), "{c}");
    let per_second: f64 = v["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["reconnects"].as_f64().unwrap())
        .sum();
    assert_eq!(per_second, f(c, "reconnects"), "{c}");
}

/// nginx closes an HTTP/1.1 connection after 60 requests, with `Connection: close`
/// on the 60th response: requests pipelined behind it fail. blaster retiring at 50
/// never reaches it: 8,000 pipelined requests, none failed, none closed by nginx.
#[test]
fn http1_retires_before_the_servers_keepalive_budget() {
    let _g = load_lock();
    let (_s, port) = nginx_listening(60, 128, None, "");
    let v = life_run(
        port,
        &[
            "--http",
            "GET /",
            "--pipeline",
            "8",
            "--rate",
            "4000",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--conn-max-requests",
            "50",
        ],
    );
    assert_exact(&v, 8000.0, 2.0);
    let c = &v["connections"];
    // 8,000 / 50 = 160 retirements, less those whose last request was answered after
    // the schedule ended (no reopen then).
    assert!((150.0..=160.0).contains(&f(c, "recycled")), "{c}");
    assert_eq!(f(c, "closed_by_target"), 0.0, "{c}");
}

/// HTTP/2: nginx sends a GOAWAY after 50 requests on a connection; blaster retiring
/// at 40 never gets one, and retries nothing.
#[test]
fn http2_retires_before_the_servers_goaway() {
    let _g = load_lock();
    let (_s, port) = nginx_h2(50, 128, None);
    let v = life_run(
        port,
        &[
            "--http2",
            "--http",
            "GET /",
            "--streams-per-connection",
            "16",
            "--rate",
            "4000",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--conn-max-requests",
            "40",
        ],
    );
    assert_exact(&v, 8000.0, 2.0);
    let h = &v["http2"];
    assert_eq!((f(h, "goaways"), f(h, "retried")), (0.0, 0.0), "{h}");
    let c = &v["connections"];
    assert!((190.0..=200.0).contains(&f(c, "recycled")), "{c}");
}

/// `--conn-max-age 200ms±50ms` against the sink: 4 connections over 2 s live 150-250
/// ms each, so 4 x 2 s / 250 ms - 4 to 4 x 2 s / 150 ms retirements.
#[test]
fn connections_retire_at_their_drawn_age() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let port: u16 = sink.addr.rsplit(':').next().unwrap().parse().unwrap();
    let v = life_run(
        port,
        &[
            "--rate",
            "2000",
            "--duration",
            "2s",
            "--connections",
            "4",
            "--conn-max-age",
            "200ms±50ms",
        ],
    );
    sink.stop();
    assert_exact(&v, 4000.0, 4.0);
    let c = &v["connections"];
    assert!((28.0..=54.0).contains(&f(c, "recycled")), "{c}");
}

/// Frames over gRPC against the sink's rooms (seed 000's MaxConnectionAge, from the
/// client's side): a connection retires after its budget of frames or at its drawn
/// age, closes and is replaced at the next scan. No connection sends past its budget, every
/// planned frame is sent or counted not sent, every reopen is a reconnect in the
/// per-second series, and none is a disconnect.
#[test]
fn frames_connections_retire_by_budget_and_by_age() {
    let _g = load_lock();
    let sink = Sink::start(&[
        "--mode",
        "broadcast",
        "--http2",
        "--room-size",
        "4",
        "--members-per-connection",
        "5",
    ]);
    let port: u16 = sink.addr.rsplit(':').next().unwrap().parse().unwrap();
    let frames = |life: &[&str]| {
        let mut args = vec![
            "--workload",
            "frames",
            "--frame-proto",
            "grpc",
            "--grpc",
            "blaster.Room/Join",
            "--connections",
            "8",
            "--members-per-connection",
            "5",
            "--room-size",
            "4",
            "--tick",
            "50ms",
            "--duration",
            "3s",
        ];
        args.extend_from_slice(life);
        let v = life_run(port, &args);
        let c = v["connections"].clone();
        let fr = v["frames"].clone();
        let n = |k: &str| fr[k].as_f64().unwrap();
        assert_eq!(n("sent") + n("not_sent"), n("planned"), "{fr}");
        assert_eq!(fr["residency"]["disconnects"], 0, "{fr}");
        assert_eq!(f(&c, "opened"), 8.0 + f(&c, "reconnects"), "{c}");
        // Each retired connection reopened, but those retired at the very end.
        let (reconnects, recycled) = (f(&c, "reconnects"), f(&c, "recycled"));
        assert!(
            reconnects <= recycled && reconnects >= recycled - 8.0,
            "{c}"
        );
        let per_second: f64 = v["intervals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["reconnects"].as_f64().unwrap())
            .sum();
        assert_eq!(per_second, f(&c, "reconnects"), "{c}");
        (f(&c, "recycled"), n("sent"))
    };
    // 50 frames: 10 ticks of the connection's 5 members, then a fresh connection.
    let (recycled, sent) = frames(&["--conn-max-requests", "50"]);
    assert!(recycled >= 24.0, "recycled {recycled}");
    assert!(
        sent <= (recycled + 8.0) * 50.0,
        "{sent} frames sent over {recycled} + 8 joins of at most 50"
    );
    // Ages of 0.8 to 1.2 s over 3 s: each connection retires twice or three times.
    let (recycled, _) = frames(&["--conn-max-age", "1s±200ms"]);
    assert!((16.0..=24.0).contains(&recycled), "recycled {recycled}");
}
