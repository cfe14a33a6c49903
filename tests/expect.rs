//! `--expect` (issue 37 item 6): a reply that parses but fails an assertion is an error
//! of kind `assertion`, counted under the assertion it failed, so a circuit breaker's
//! fallback body served with 200 is caught.
//!
//! The target is a small HTTP/1.1 server in this file (std threads, one per
//! connection), answering every 10th request differently by its path:
//! `/fallback` a 200 with a fallback body, `/status` a 404; `/split` is `/fallback`
//! with each response's head and body written apart (so a body arrives after its head);
//! `/big` a 20 KiB body in pieces (longer than what the engine keeps whole).
mod common;
use common::servers::nginx_h2;
use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const OK: &[u8] = b"{\"ok\":true,\"items\":[1,2,3]}";
const FALLBACK: &[u8] = b"{\"fallback\":true,\"items\":[]}";

/// Starts the server on a free port; it runs until the test process ends.
fn server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let count = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let count = count.clone();
            std::thread::spawn(move || serve(conn, &count));
        }
    });
    addr
}

/// Answers the requests of one connection (GETs, no body) until it closes.
fn serve(mut conn: TcpStream, count: &AtomicU64) {
    conn.set_nodelay(true).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + 4);
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
            let tenth = count.fetch_add(1, Ordering::SeqCst) % 10 == 9;
            if answer(&mut conn, &path, tenth).is_err() {
                return;
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn answer(conn: &mut TcpStream, path: &str, tenth: bool) -> std::io::Result<()> {
    let (status, body): (&str, Vec<u8>) = match path {
        "/fallback" | "/split" if tenth => ("200 OK", FALLBACK.to_vec()),
        "/status" if tenth => ("404 Not Found", OK.to_vec()),
        "/big" => ("200 OK", vec![b'x'; 20 << 10]),
        _ => ("200 OK", OK.to_vec()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    match path {
        "/split" | "/big" => {
            // The head, then the body in pieces, each its own segment.
            conn.write_all(head.as_bytes())?;
            for piece in body.chunks(8 << 10) {
                std::thread::sleep(Duration::from_millis(2));
                conn.write_all(piece)?;
            }
            Ok(())
        }
        _ => conn.write_all(&[head.as_bytes(), &body].concat()),
    }
}

/// A fixed-rate run against the server: `rate` a second for `secs`, `GET path`, with
/// `expect` assertions; the report.
fn run_expect(path: &str, rate: u32, secs: u32, expect: &[&str]) -> serde_json::Value {
    run_with(path, rate, secs, expect, &["--connections", "4"])
}

/// [`run_expect`] with `extra` arguments (an empty `path`: no `--http`, for a mix).
fn run_with(
    path: &str,
    rate: u32,
    secs: u32,
    expect: &[&str],
    extra: &[&str],
) -> serde_json::Value {
    let addr = server();
    let http = format!("GET {path}");
    let (rate, duration) = (rate.to_string(), format!("{secs}s"));
    let mut args = vec!["--target", &addr, "--rate", &rate, "--duration", &duration];
    if !path.is_empty() {
        args.extend_from_slice(&["--http", &http]);
    }
    args.extend_from_slice(extra);
    for e in expect {
        args.extend_from_slice(&["--expect", e]);
    }
    run_report(&args, Duration::from_secs(60))
}

/// [`run_expect`] for a run where every reply fails: exit 1 ("nothing succeeded"),
/// with its report written.
fn run_failing(path: &str, rate: u32, secs: u32, expect: &str) -> serde_json::Value {
    let addr = server();
    let (_dir, json) = tmp_json();
    let http = format!("GET {path}");
    let (rate, duration) = (rate.to_string(), format!("{secs}s"));
    let args = [
        "run",
        "--cores",
        "0",
        "--target",
        &addr,
        "--rate",
        &rate,
        "--duration",
        &duration,
        "--connections",
        "4",
        "--http",
        &http,
        "--expect",
        expect,
        "--json",
        json.to_str().unwrap(),
    ];
    let out = run(&args, Duration::from_secs(60));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("errors by kind: assertion="), "{err}");
    // The text report names the assertion and its failures.
    let text = String::from_utf8_lossy(&out.stdout);
    let named = format!("'{expect}'=");
    assert!(
        text.lines()
            .any(|l| l.starts_with("assertions: ") && l.contains(&named)),
        "{text}"
    );
    read_json(&json)
}

fn failed(v: &serde_json::Value, i: usize) -> u64 {
    v["expect"]["assertions"][i]["failed"].as_u64().unwrap()
}

#[test]
fn a_fallback_body_on_every_tenth_reply_is_a_tenth_assertion_errors() {
    let _g = load_lock();
    let v = run_expect("/fallback", 500, 2, &["status:200", "!contains:fallback"]);
    let q = &v["requests"];
    assert_eq!(
        v["errors_by_kind"]["assertion"], 100,
        "{}",
        v["errors_by_kind"]
    );
    assert_eq!(q["errors"], 100, "{q}");
    assert_eq!(q["completed"], 900, "{q}");
    // Named: the body assertion failed them all, the status one none (they were 200s).
    let e = &v["expect"];
    assert_eq!(e["assertions"][1]["assertion"], "!contains:fallback", "{e}");
    assert_eq!((failed(&v, 0), failed(&v, 1)), (0, 100), "{e}");
    assert_eq!(e["unchecked"], 0, "{e}");
    // Their latency is kept apart, as error replies' is.
    assert_eq!(
        v["error_latency_ns"]["count"], 100,
        "{}",
        v["error_latency_ns"]
    );
}

#[test]
fn a_regex_over_the_body_catches_the_fallback_too() {
    let _g = load_lock();
    let v = run_expect("/fallback", 500, 2, &[r#"regex:^\{"ok":true,"items":\[\d"#]);
    assert_eq!(
        v["errors_by_kind"]["assertion"], 100,
        "{}",
        v["errors_by_kind"]
    );
    assert_eq!(failed(&v, 0), 100, "{}", v["expect"]);
    assert_eq!(v["requests"]["completed"], 900, "{}", v["requests"]);
}

#[test]
fn a_status_assertion_fails_the_replies_with_another_status() {
    let _g = load_lock();
    // 404 is not in --error-status (5xx): without --expect it would be a success.
    let v = run_expect("/status", 500, 2, &["status:2xx", "contains:ok"]);
    assert_eq!(
        v["errors_by_kind"]["assertion"], 100,
        "{}",
        v["errors_by_kind"]
    );
    assert_eq!((failed(&v, 0), failed(&v, 1)), (100, 0), "{}", v["expect"]);
    assert_eq!(v["http"]["status_codes"]["404"], 100, "{}", v["http"]);
}

#[test]
fn a_body_arriving_after_its_head_is_checked_whole() {
    let _g = load_lock();
    // Every body comes in its own segment after the head: the engine keeps the response
    // whole until it completes, so the assertion sees it (and a wrong one fails all).
    let v = run_expect("/split", 100, 2, &["!contains:fallback"]);
    assert_eq!(v["requests"]["completed"], 180, "{}", v["requests"]);
    assert_eq!(failed(&v, 0), 20, "{}", v["expect"]);
    assert_eq!(v["expect"]["unchecked"], 0, "{}", v["expect"]);
    // Pipelined on one connection: a response's body and the next one's head share a
    // receive, and the kept response moves to the front of the buffer.
    let one = ["--connections", "1", "--pipeline", "4"];
    let v = run_with("/split", 300, 1, &["!contains:fallback"], &one);
    assert_eq!(v["requests"]["completed"], 270, "{}", v["requests"]);
    assert_eq!(failed(&v, 0), 30, "{}", v["expect"]);
    assert_eq!(v["expect"]["unchecked"], 0, "{}", v["expect"]);
    let v = run_failing("/split", 100, 2, "contains:\"items\":[9]");
    assert_eq!(failed(&v, 0), 200, "{}", v["expect"]);
}

#[test]
fn a_body_longer_than_what_is_kept_is_counted_unchecked_not_passed() {
    let _g = load_lock();
    let v = run_expect("/big", 50, 2, &["status:200", "contains:y"]);
    assert_eq!(v["requests"]["completed"], 100, "{}", v["requests"]);
    assert_eq!(v["expect"]["unchecked"], 100, "{}", v["expect"]);
    assert_eq!((failed(&v, 0), failed(&v, 1)), (0, 0), "{}", v["expect"]);
    assert!(
        v["errors_by_kind"]["assertion"].is_null(),
        "{}",
        v["errors_by_kind"]
    );
}

#[test]
fn an_assertion_about_one_mix_entry_holds_only_its_replies() {
    let _g = load_lock();
    // Two entries asking the same path: every 10th reply (whichever entry asked) is the
    // fallback; only entry a is held to `!contains:fallback`.
    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("mix.txt");
    std::fs::write(&mix, "a 1 http1 GET /fallback\nb 1 http1 GET /fallback\n").unwrap();
    let mix = ["--connections", "4", "--mix", mix.to_str().unwrap()];
    let v = run_with("", 500, 2, &["a=!contains:fallback", "status:200"], &mix);
    let entry = |name: &str| {
        let m = v["mix"].as_array().unwrap();
        m.iter().find(|e| e["name"] == name).unwrap().clone()
    };
    let (a, b) = (entry("a"), entry("b"));
    let a_failed = a["errors"].as_u64().unwrap();
    // About a tenth of a's 500 or so: each reply drawn at random between the two.
    assert!((20..=90).contains(&a_failed), "{a}");
    assert_eq!(b["errors"], 0, "{b}");
    assert_eq!(
        v["errors_by_kind"]["assertion"], a_failed,
        "{}",
        v["errors_by_kind"]
    );
    assert_eq!(
        v["expect"]["assertions"][0]["assertion"],
        "a=!contains:fallback"
    );
    assert_eq!(
        (failed(&v, 0), failed(&v, 1)),
        (a_failed, 0),
        "{}",
        v["expect"]
    );
    assert_eq!(
        v["requests"]["completed"],
        1000 - a_failed,
        "{}",
        v["requests"]
    );
}

/// A run over HTTP/2 against nginx (`/` answers `hello`, `/fallback` a 200 with the
/// body `fallback`, `/big` 5,000 bytes) with `args`; its report (exit 0 or 3).
fn h2_expect(args: &[&str]) -> serde_json::Value {
    h2_expect_exiting(args, &[0, 3])
}

/// [`h2_expect`] for a run whose exit code is one of `codes`.
fn h2_expect_exiting(args: &[&str], codes: &[i32]) -> serde_json::Value {
    let (_s, port) = nginx_h2(1_000_000, 128, None);
    let (_dir, json) = tmp_json();
    let target = format!("127.0.0.1:{port}");
    let mut all = vec![
        "run",
        "--cores",
        "0",
        "--json",
        json.to_str().unwrap(),
        "--target",
        &target,
        "--http2",
        "--connections",
        "2",
        "--streams-per-connection",
        "8",
        "--rate",
        "500",
        "--duration",
        "2s",
    ];
    all.extend_from_slice(args);
    let out = run(&all, Duration::from_secs(60));
    let code = out.status.code().unwrap_or(-1);
    assert!(codes.contains(&code), "exit {code}: {}", stderr(&out));
    read_json(&json)
}

#[test]
fn over_http2_the_fallback_bodies_are_exactly_the_assertion_errors() {
    let _g = load_lock();
    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("mix.txt");
    std::fs::write(&mix, "ok 9 http1 GET /\nfb 1 http1 GET /fallback\n").unwrap();
    let v = h2_expect(&[
        "--mix",
        mix.to_str().unwrap(),
        "--expect",
        "status:200",
        "--expect",
        "!contains:fallback",
    ]);
    let entry = |name: &str| {
        let m = v["mix"].as_array().unwrap();
        m.iter().find(|e| e["name"] == name).unwrap().clone()
    };
    let (ok, fb) = (entry("ok"), entry("fb"));
    let fb_failed = fb["errors"].as_u64().unwrap();
    // Every reply to /fallback fails the body assertion, none to /.
    assert!((50..=150).contains(&fb_failed), "{fb}");
    assert_eq!(ok["errors"], 0, "{ok}");
    assert_eq!(
        v["errors_by_kind"]["assertion"], fb_failed,
        "{}",
        v["errors_by_kind"]
    );
    assert_eq!(
        (failed(&v, 0), failed(&v, 1)),
        (0, fb_failed),
        "{}",
        v["expect"]
    );
    assert_eq!(
        v["requests"]["completed"],
        1000 - fb_failed,
        "{}",
        v["requests"]
    );
    assert_eq!(v["expect"]["unchecked"], 0, "{}", v["expect"]);
}

#[test]
fn over_http2_a_body_longer_than_what_is_kept_is_unchecked_and_status_still_applies() {
    let _g = load_lock();
    // 5,000 bytes, over the 4 KiB kept per stream: the body assertion is not checked
    // (counted, never passed); the status one still fails every reply.
    let v = h2_expect(&["--http", "GET /big", "--expect", "contains:x"]);
    assert_eq!(v["requests"]["completed"], 1000, "{}", v["requests"]);
    assert_eq!(v["expect"]["unchecked"], 1000, "{}", v["expect"]);
    // Nothing succeeded: exit 1, the report written.
    let v = h2_expect_exiting(&["--http", "GET /big", "--expect", "status:204"], &[1]);
    assert_eq!(
        v["errors_by_kind"]["assertion"], 1000,
        "{}",
        v["errors_by_kind"]
    );
}
