//! Issue 25: hostile inputs. Crafted report files (a corrupt embedded histogram, a
//! negative count, a histogram declaring a 4 GB payload, a deflate bomb) are refused by
//! every command that reads reports -- `merge` (several files and one), `compare` and
//! `report --html` -- with one line naming the file and the field, exit 1, under a
//! memory limit so that an allocation the input asks for fails the test. Every file
//! input pointed at a private endless FIFO (or a huge sparse file) stops at its bound
//! with one line naming the file and the limit.
//!
//! The reports are synthetic (no load): counters and histograms made to agree, so the
//! one thing wrong in each crafted file is the one the test put there.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use base64::Engine as _;
use common::*;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Address space the commands run in: far more than reading these files needs (tens
/// of MB), far less than what the attacks asked for (gigabytes).
const AS_BYTES: u64 = 1 << 30;
const LIMIT: Duration = Duration::from_secs(60);

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn encode(h: &Histogram<u64>) -> String {
    let mut buf = Vec::new();
    V2DeflateSerializer::new().serialize(h, &mut buf).unwrap();
    b64(&buf)
}

/// `n` values from 100 us up, in steps of 1 us.
fn hist(n: u64) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
    for k in 0..n {
        h.record(100_000 + k * 1_000).unwrap();
    }
    h
}

fn percentiles(h: &Histogram<u64>) -> Value {
    let q = |x| h.value_at_quantile(x);
    json!({"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p999": q(0.999),
           "p9999": q(0.9999), "max": h.max(), "mean": h.mean(), "count": h.len()})
}

fn interval(second: u64, h: &Histogram<u64>) -> Value {
    let e = encode(h);
    json!({"second": second, "duration_s": 1.0, "intended_rps": 500.0,
           "achieved_rps": h.len() as f64, "latency_p50_ns": h.value_at_quantile(0.5),
           "latency_p90_ns": h.value_at_quantile(0.9), "latency_p99_ns": h.value_at_quantile(0.99),
           "latency_p999_ns": h.value_at_quantile(0.999), "latency_max_ns": h.max(),
           "dispatch_lag_p99_ns": 10_000, "errors": 0, "core_load": 0.1, "worker_busy": 0.1,
           "other_load": 0.0, "tx_bps": 1.0, "rx_bps": 1.0, "tx_pps": 1.0, "rx_pps": 1.0,
           "link_utilization": null, "drops": 0,
           "histograms": {"latency": e, "service_time": e, "dispatch_lag": e, "connection_wait": e}})
}

/// Shard `shard` of 2 of a 2 s run: 1,000 requests, all completed, 500 a second, each
/// in every histogram once; counters, summaries and histograms agree.
fn report(shard: u64) -> Value {
    let whole = hist(1000);
    let half = hist(500);
    let e = encode(&whole);
    let none = encode(&hist(0));
    json!({
        "schema_version": blaster::report::SCHEMA_VERSION, "valid": true, "invalid_reasons": [],
        "target": "10.0.0.5:9000", "mode": "persistent",
        "config": {"max_lag_ns": 1_000_000, "connections": 4},
        "duration_s": 2.0,
        "rate": {"intended_rps": 500.0, "achieved_rps": 500.0, "sent_rps": 500.0},
        "requests": {"dispatched": 1000, "sent": 1000, "completed": 1000, "errors": 0,
                     "timeouts": 0, "cut_off": 0},
        "errors_by_kind": {}, "error_replies": 0,
        "bytes": {"sent": 64_000, "received": 64_000},
        "latency_ns": percentiles(&whole), "service_time_ns": percentiles(&whole),
        "dispatch_lag_ns": percentiles(&whole), "connection_wait_ns": percentiles(&whole),
        "intervals": [interval(0, &half), interval(1, &half)],
        "histograms": {"encoding": "hdrhistogram-v2-compressed-base64", "unit": "ns",
                       "latency": e, "service_time": e, "dispatch_lag": e, "connection_wait": e,
                       "connect_time": none, "reconnect_delay": none},
        "fleet": {"run_id": "hostile", "shard": shard, "shards": 2, "plan_fingerprint": "f",
                  "start_at_unix_ms": 1, "start_skew_ns": 1000, "clock": null},
    })
}

fn write(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The uncompressed V2 form: header (payload length as declared) and payload.
fn v2(declared: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(0x1c84_9313u32.to_be_bytes());
    b.extend(declared.to_be_bytes());
    b.extend(0u32.to_be_bytes());
    b.extend(3u32.to_be_bytes());
    b.extend(1u64.to_be_bytes());
    b.extend(3_600_000_000_000u64.to_be_bytes());
    b.extend(1.0f64.to_be_bytes());
    b.extend(payload);
    b
}

/// The compressed V2 form of `zeros` zero bytes after `head`, deflated as a stream (the
/// zeros are never held whole), base64.
fn compressed(head: &[u8], zeros: u64) -> String {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(head).unwrap();
    let chunk = vec![0u8; 1 << 20];
    let mut left = zeros;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        z.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    let z = z.finish().unwrap();
    let mut b = Vec::new();
    b.extend(0x1c84_9314u32.to_be_bytes());
    b.extend((z.len() as u32).to_be_bytes());
    b.extend(z);
    b64(&b)
}

/// Every command that reads reports, on `bad` (with a good shard 0 beside it where the
/// command takes two): each exits 1 with one line naming the file and `needle`, fast
/// and within [`AS_BYTES`].
fn refused_everywhere(dir: &Path, good: &Path, bad: &Path, needle: &str) {
    let html = dir.join("out.html");
    let commands: [Vec<&str>; 4] = [
        vec!["merge", s(good), s(bad)],
        vec!["merge", s(bad)],
        vec!["compare", s(good), s(bad)],
        vec!["report", s(bad), "--html", s(&html)],
    ];
    for args in commands {
        let t = Instant::now();
        let out = run_with_memory_limit(&args, AS_BYTES, LIMIT);
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {:?} {e}", out.status);
        assert_eq!(e.trim_end().lines().count(), 1, "{args:?}: one line: {e}");
        assert!(
            e.contains(s(bad)) && e.contains(needle),
            "{args:?}: {e:?} lacks the file or {needle:?}"
        );
        assert!(
            out.stdout.is_empty(),
            "{args:?}: nothing merged or compared"
        );
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{args:?}: {:?}",
            t.elapsed()
        );
    }
    assert!(!html.exists());
}

/// The synthetic shards are good: merged, compared and drawn (the control for every
/// refusal below).
#[test]
fn the_synthetic_shards_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (a, b) = (
        write(d, "s0.json", &report(0)),
        write(d, "s1.json", &report(1)),
    );
    let merged = d.join("m.json");
    let out = run_with_memory_limit(
        &["merge", s(&a), s(&b), "--json", s(&merged)],
        AS_BYTES,
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let m = read_json(&merged);
    assert_eq!(m["requests"]["completed"], 2000);
    assert_eq!(m["latency_ns"]["count"], 2000);
    let out = run_with_memory_limit(&["compare", s(&a), s(&b)], AS_BYTES, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let html = d.join("r.html");
    let out = run_with_memory_limit(
        &["report", s(&a), s(&merged), "--html", s(&html)],
        AS_BYTES,
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(html.exists());
}

/// Issue 25 item 2: merge said VALID with the corrupt shard's requests counted and its
/// latency left out.
#[test]
fn a_corrupt_histogram_is_refused_by_merge_compare_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = write(d, "s0.json", &report(0));
    let whole = encode(&hist(1000));
    let cases: [(&str, String, &str); 3] = [
        // Cut short: the deflated stream ends early.
        (
            "latency",
            whole[..whole.len() / 2].to_string(),
            "histograms.latency: ",
        ),
        // Not base64.
        (
            "service_time",
            "%%%%".into(),
            "histograms.service_time: not base64",
        ),
        // A valid histogram of other data: more values than requests.
        (
            "latency",
            encode(&hist(1500)),
            "histograms.latency: holds 1500 values, but latency_ns.count is 1000",
        ),
    ];
    for (k, (key, text, needle)) in cases.into_iter().enumerate() {
        let mut v = report(1);
        v["histograms"][key] = json!(text);
        let bad = write(d, &format!("corrupt-{k}.json"), &v);
        refused_everywhere(d, &good, &bad, needle);
    }
    // A second's histogram, too.
    let mut v = report(1);
    v["intervals"][1]["histograms"]["dispatch_lag"] = json!("AAAA");
    let bad = write(d, "corrupt-second.json", &v);
    refused_everywhere(d, &good, &bad, "intervals[1].histograms.dispatch_lag: ");
}

/// Issue 25 item 2: `completed: -5` was merged as 995.0.
#[test]
fn negative_and_impossible_counts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = write(d, "s0.json", &report(0));
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit, &str); 5] = [
        (
            "negative",
            |v| v["requests"]["completed"] = json!(-5),
            "requests.completed: -5 is not a count",
        ),
        (
            "fraction",
            |v| v["requests"]["errors"] = json!(0.5),
            "requests.errors: 0.5 is not a count",
        ),
        (
            "kind",
            |v| v["errors_by_kind"] = json!({"timeout": -3}),
            "errors_by_kind.timeout: -3 is not a count",
        ),
        (
            "rate",
            |v| v["rate"]["achieved_rps"] = json!(-500.0),
            "rate.achieved_rps: -500.0 is not a non-negative number",
        ),
        (
            "more-than-dispatched",
            |v| {
                v["requests"]["dispatched"] = json!(10);
            },
            "requests: 1000 completed + 0 errors + 0 cut off is more than the 10 dispatched",
        ),
    ];
    for (name, edit, needle) in cases {
        let mut v = report(1);
        edit(&mut v);
        let bad = write(d, &format!("{name}.json"), &v);
        refused_everywhere(d, &good, &bad, needle);
    }
}

/// Issue 25 item 3: a 10 KB report whose histogram declared a 4 GB payload made compare
/// allocate 4.2 GB.
#[test]
fn a_histogram_declaring_a_4_gb_payload_is_refused_without_the_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = write(d, "s0.json", &report(0));
    let mut v = report(1);
    v["histograms"]["latency"] = json!(compressed(&v2(u32::MAX - 15, &[0; 16]), 0));
    let bad = write(d, "4gb.json", &v);
    assert!(std::fs::metadata(&bad).unwrap().len() < 64 << 10);
    refused_everywhere(
        d,
        &good,
        &bad,
        "histograms.latency: its header declares a 4294967280-byte payload but 16 bytes follow",
    );
}

/// Issue 25 item 3: a 5 MB deflate bomb peaked at 3.9 GB and exited 0. This one
/// inflates to 2 GiB, twice the address space the commands get: its header declares
/// exactly what the stream holds, so only a bound on inflating stops it.
#[test]
fn a_deflate_bomb_is_refused_fast_within_the_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = write(d, "s0.json", &report(0));
    let n: u64 = 2 << 30;
    let mut v = report(1);
    v["histograms"]["latency"] = json!(compressed(&v2((n - 1) as u32, &[]), n - 1));
    let bad = write(d, "bomb.json", &v);
    let size = std::fs::metadata(&bad).unwrap().len();
    assert!(size < 16 << 20, "the bomb is small: {size} bytes");
    refused_everywhere(
        d,
        &good,
        &bad,
        "histograms.latency: it decompresses to more than 1048576 bytes",
    );
}

/// Issue 25 item 3: every file input pointed at an endless source read about 2 GB
/// before failing. Each now stops at its bound, in one line naming the file and the
/// limit: the run's inputs (exit 2, a usage error), plan's (exit 2) and the reports
/// (exit 1).
#[test]
fn file_inputs_pointed_at_an_endless_fifo_stop_at_their_bound() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run_args = [
        "run",
        "--target",
        "127.0.0.1:9",
        "--rate",
        "100",
        "--duration",
        "1s",
    ];
    let plan_args = [
        "plan",
        "--users",
        "1000",
        "--msg-rate",
        "1",
        "--up-bytes",
        "50",
        "--down-bytes",
        "50",
        "--cores",
        "4",
        "--nic-gbps",
        "10",
        "--syscalls-per-core",
        "200000",
    ];
    // Arguments for a FIFO path, the exit code and the bound.
    type Case = (Vec<String>, i32, u64);
    type MakeCase<'a> = Box<dyn Fn(&str) -> Case + 'a>;
    let cases: Vec<(&str, MakeCase)> = vec![
        (
            "payload-file",
            Box::new(|f| (flags(&run_args, &["--payload-file", f]), 2, 1 << 20)),
        ),
        (
            "body-file",
            Box::new(|f| {
                (
                    flags(&run_args, &["--http", "POST /", "--body-file", f]),
                    2,
                    1 << 20,
                )
            }),
        ),
        (
            "mix",
            Box::new(|f| {
                (
                    flags(&run_args[..5], &["--duration", "1s", "--mix", f]),
                    2,
                    64 << 20,
                )
            }),
        ),
        (
            "rate",
            Box::new(|f| {
                let spec = format!("file:{f}");
                (
                    flags(
                        &["run", "--target", "127.0.0.1:9", "--duration", "1s"],
                        &["--rate", &spec],
                    ),
                    2,
                    64 << 20,
                )
            }),
        ),
        (
            "from",
            Box::new(|f| (flags(&plan_args, &["--from", f]), 2, 256 << 20)),
        ),
        (
            "from-frames",
            Box::new(|f| (flags(&plan_args, &["--from-frames", f]), 2, 256 << 20)),
        ),
        (
            "merge",
            Box::new(|f| (flags(&["merge"], &[f]), 1, 256 << 20)),
        ),
        (
            "compare",
            Box::new(|f| (flags(&["compare"], &[f, f]), 1, 256 << 20)),
        ),
    ];
    for (name, case) in &cases {
        let fifo = EndlessFifo::new(d, &format!("{name}.fifo"));
        let (args, code, limit) = case(fifo.arg());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let t = Instant::now();
        let out = run_with_memory_limit(&refs, AS_BYTES, LIMIT);
        let e = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{name}: {:?} {e}",
            out.status
        );
        assert_eq!(e.trim_end().lines().count(), 1, "{name}: one line: {e}");
        let want = format!("larger than the limit of {limit} bytes");
        assert!(
            e.contains(fifo.arg()) && e.contains(&want),
            "{name}: {e:?} lacks the file or {want:?}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{name}: {:?}",
            t.elapsed()
        );
    }
    // report (which claims its output first, so it gets one it can write).
    let fifo = EndlessFifo::new(d, "report.fifo");
    let html = d.join("r.html");
    let out = run_with_memory_limit(&["report", fifo.arg(), "--html", s(&html)], AS_BYTES, LIMIT);
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "report: {:?} {e}", out.status);
    assert!(
        e.contains(fifo.arg()) && e.contains("larger than the limit of 268435456 bytes"),
        "{e}"
    );
}

/// A huge regular file is refused by its size, before any of it is read.
#[test]
fn a_huge_sparse_file_is_refused_by_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let big = d.join("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    for args in [
        vec!["merge", s(&big)],
        vec!["compare", s(&big), s(&big)],
        vec![
            "run",
            "--target",
            "127.0.0.1:9",
            "--rate",
            "100",
            "--payload-file",
            s(&big),
        ],
    ] {
        let t = Instant::now();
        let out = run_with_memory_limit(&args, AS_BYTES, LIMIT);
        let e = stderr(&out);
        assert!(
            matches!(out.status.code(), Some(1 | 2)),
            "{args:?}: {:?} {e}",
            out.status
        );
        assert!(
            e.contains(s(&big)) && e.contains("larger than the limit of"),
            "{args:?}: {e}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{args:?}: {:?}",
            t.elapsed()
        );
    }
}

fn flags(base: &[&str], extra: &[&str]) -> Vec<String> {
    base.iter().chain(extra).map(|s| s.to_string()).collect()
}
