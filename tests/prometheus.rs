//! `--metrics-listen` scraped by a real Prometheus server (issue 12 item 6): the test
//! starts the sink, a Prometheus (Debian's `prometheus`) on loopback scraping blaster
//! every second with its own storage in a temporary directory, and a run that lingers
//! until its final state was scraped; then it asks Prometheus' HTTP API for the request
//! counter (equal to the JSON's completed count) and for the merged p99
//! (`histogram_quantile(0.99, sum by (le) (...))`, in the ladder bucket of the JSON's p99).
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use blaster::report::export::prometheus::LADDER_NS;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A plain HTTP/1.1 GET on loopback: (status, body).
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant query's single value (None: no result yet).
fn query(port: u16, promql: &str) -> Option<f64> {
    let (status, body) = http_get(port, &format!("/api/v1/query?query={}", url_encode(promql)))?;
    assert_eq!(status, 200, "{promql}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("Prometheus answers JSON");
    assert_eq!(v["status"], "success", "{promql}: {body}");
    let result = v["data"]["result"].as_array()?;
    assert!(result.len() <= 1, "{promql}: one series expected: {body}");
    result.first()?["value"][1].as_str()?.parse().ok()
}

/// Polls two instant queries until they answer `want`, at most `within`, and asserts
/// they did (`what` names them). A scrape is in the TSDB just after the response
/// blaster waited for, and `up` changes at the next scrape, so the tests poll briefly.
fn assert_eventually(
    port: u16,
    queries: [&str; 2],
    want: (Option<f64>, Option<f64>),
    within: Duration,
    what: &str,
) {
    let deadline = Instant::now() + within;
    let mut seen = (query(port, queries[0]), query(port, queries[1]));
    while seen != want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        seen = (query(port, queries[0]), query(port, queries[1]));
    }
    assert_eq!(seen, want, "{what}");
}

/// The merged p99 Prometheus computes from the cumulative buckets of the series `sel`
/// selects (`histogram_quantile` interpolates inside one ladder bucket) lies in the
/// ladder bucket that holds `p99_ns`, the p99 of the JSON (`of`).
fn assert_merged_p99_in_bucket(port: u16, sel: &str, p99_ns: u64, of: &str) {
    let q = format!(
        "histogram_quantile(0.99, sum by (le) (last_over_time(blaster_latency_seconds_bucket{{{sel}}}[5m])))"
    );
    let prom_p99_s = query(port, &q).expect("a merged p99");
    let k = LADDER_NS.partition_point(|&b| b < p99_ns);
    let upper = LADDER_NS.get(k).copied().unwrap_or(u64::MAX) as f64 / 1e9;
    let lower = if k == 0 {
        0.0
    } else {
        LADDER_NS[k - 1] as f64 / 1e9
    };
    assert!(
        lower <= prom_p99_s && prom_p99_s <= upper,
        "Prometheus' merged p99 {prom_p99_s} s outside the bucket [{lower}, {upper}] of {of} p99 {p99_ns} ns"
    );
}

struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus on a free loopback port, scraping `target_port` every second,
    /// and waits until it is ready.
    fn start(target_port: u16) -> Prometheus {
        Prometheus::start_targets(&[(target_port, None)])
    }

    /// Starts Prometheus scraping every `(port, shard)` target each second, a target
    /// with a shard labelled `shard="i/N"` as deploy/prometheus/prometheus.yml does (so
    /// Prometheus' own `up` series names the shard).
    fn start_targets(targets: &[(u16, Option<&str>)]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        let mut yml = String::from(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n\
             scrape_configs:\n  - job_name: blaster\n    honor_labels: true\n    static_configs:\n",
        );
        for (port, shard) in targets {
            yml.push_str(&format!("      - targets: ['127.0.0.1:{port}']\n"));
            if let Some(shard) = shard {
                yml.push_str(&format!("        labels: {{shard: '{shard}'}}\n"));
            }
        }
        std::fs::write(&config, yml).unwrap();
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        let p = Prometheus {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while http_get(port, "/-/ready").map(|r| r.0) != Some(200) {
            assert!(Instant::now() < deadline, "prometheus not ready on {port}");
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn prometheus_installed() -> bool {
    Command::new("prometheus")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

#[test]
fn prometheus_scrapes_the_request_counter_and_a_merged_p99() {
    // A real-server test fails, never skips, when its server is missing (issue 10).
    assert!(
        prometheus_installed(),
        "no prometheus binary: install Debian's prometheus (scripts/test.sh does)"
    );
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let metrics_port = free_port();
    let prom = Prometheus::start(metrics_port);
    let (_dir, json) = tmp_json();
    let listen = format!("127.0.0.1:{metrics_port}");
    let out = run(
        &[
            "run",
            "--cores",
            "0",
            "--target",
            &sink.addr,
            "--rate",
            "2000",
            "--connections",
            "8",
            "--duration",
            "4s",
            "--metrics-listen",
            &listen,
            // Until Prometheus has scraped the final state (every second).
            "--metrics-linger",
            "20s",
            "--json",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&json);
    assert_exit_matches_validity(&out, &v);
    let completed = f(&v, "requests.completed");
    let p99_ns = f(&v, "latency_ns.p99") as u64;
    assert!(completed > 7_000.0, "{completed}");
    let run_id = v["fleet"]["run_id"].as_str().unwrap();
    let sel = format!("run_id=\"{run_id}\",shard=\"0/1\"");

    // The final scrape is in the TSDB once its samples are appended (just after the
    // response blaster waited for): poll briefly. After blaster exits its series go
    // stale, hence the *_over_time over the run.
    let counter =
        format!("max_over_time(blaster_requests_total{{{sel},outcome=\"completed\"}}[5m])");
    let finished = format!("max_over_time(blaster_run_finished{{{sel}}}[5m])");
    let want = (Some(completed), Some(1.0));
    assert_eventually(
        prom.port,
        [&counter, &finished],
        want,
        Duration::from_secs(10),
        &format!("Prometheus' completed counter and run_finished against the JSON's {completed}"),
    );

    // The merged p99 over the whole run (cumulative buckets at the final scrape).
    assert_merged_p99_in_bucket(prom.port, &sel, p99_ns, "the JSON's");
    // Every request the JSON counts is in the histogram Prometheus holds.
    let count = format!("max_over_time(blaster_latency_seconds_count{{{sel}}}[5m])");
    assert_eq!(query(prom.port, &count), Some(f(&v, "latency_ns.count")));
    // Every query of the Grafana board parses and evaluates in this Prometheus
    // (its variables filled in as Grafana would).
    let board: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/grafana/blaster.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    for panel in board["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            let filled = expr
                .replace("$run_id", run_id)
                .replace("$job", "blaster")
                .replace("$__rate_interval", "1m");
            let at = format!("/api/v1/query?query={}", url_encode(&filled));
            let (status, body) = http_get(prom.port, &at).expect("Prometheus answers");
            assert!(
                status == 200 && body.contains("\"status\":\"success\""),
                "{expr}: {body}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 10);
    drop(prom);
    sink.stop();
}

/// Unix time in ms (for `--start-at`).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Starts shard `i` of 2 of run `run_id` at `at_ms` against `sink`, serving
/// `/metrics` on `port`.
fn shard(
    sink: &str,
    i: u32,
    at_ms: u64,
    run_id: &str,
    port: u16,
    duration: &str,
    json: &Path,
) -> Child {
    spawn_piped(Command::new(bin()).args([
        "run",
        "--cores",
        "0",
        "--target",
        sink,
        "--rate",
        "2000",
        "--connections",
        "8",
        "--duration",
        duration,
        "--shard",
        &format!("{i}/2"),
        "--start-at",
        &at_ms.to_string(),
        "--run-id",
        run_id,
        "--metrics-listen",
        &format!("127.0.0.1:{port}"),
        "--metrics-linger",
        "20s",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]))
}

/// The query for `up` of the target labelled `shard`.
fn up(shard: &str) -> String {
    format!("up{{job=\"blaster\",shard=\"{shard}\"}}")
}

/// Issue 13 item 4: two shards of one run scraped by one Prometheus, each target
/// labelled with its shard as deploy/prometheus/prometheus.yml does. Summed across
/// shards, the counter equals the two JSONs' completed counts added and the merged p99
/// lies in the ladder bucket of `blaster merge`'s p99; in a second run, Prometheus' own
/// `up` (the board's "Shards up" panel) drops to 0 for a shard killed mid-run while the
/// other stays 1.
#[test]
fn two_shards_add_up_in_prometheus_and_a_dead_shard_drops_from_up() {
    assert!(
        prometheus_installed(),
        "no prometheus binary: install Debian's prometheus (scripts/test.sh does)"
    );
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let ports = [free_port(), free_port()];
    let prom = Prometheus::start_targets(&[(ports[0], Some("0/2")), (ports[1], Some("1/2"))]);
    let dir = tempfile::tempdir().unwrap();
    let jsons = [dir.path().join("s0.json"), dir.path().join("s1.json")];

    // Run 1: both shards run their share to the end and linger until scraped.
    let at = unix_ms() + 2_500;
    let run_id = format!("prom-two-shards-{at}");
    let children: Vec<Child> = (0..2)
        .map(|i| {
            shard(
                &sink.addr,
                i,
                at,
                &run_id,
                ports[i as usize],
                "4s",
                &jsons[i as usize],
            )
        })
        .collect();
    for (i, c) in children.into_iter().enumerate() {
        let out = wait_bounded(c, Duration::from_secs(60));
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "shard {i}: {}",
            stderr(&out)
        );
    }
    let reports: Vec<serde_json::Value> = jsons.iter().map(read_json).collect();
    let completed: f64 = reports.iter().map(|v| f(v, "requests.completed")).sum();
    assert!(completed > 7_000.0, "{completed}");
    let merged = dir.path().join("merged.json");
    let out = run(
        &[
            "merge",
            jsons[0].to_str().unwrap(),
            jsons[1].to_str().unwrap(),
            "--json",
            merged.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "merge: {}",
        stderr(&out)
    );
    let merged = read_json(&merged);
    assert_eq!(f(&merged, "requests.completed"), completed);
    let p99_ns = f(&merged, "latency_ns.p99") as u64;

    let sel = format!("run_id=\"{run_id}\"");
    let counter =
        format!("sum(max_over_time(blaster_requests_total{{{sel},outcome=\"completed\"}}[5m]))");
    // Both finished, each under its own shard label (the samples' own, kept by
    // honor_labels: a constant label would count one).
    let shards =
        format!("count(count by (shard) (max_over_time(blaster_run_finished{{{sel}}}[5m]) == 1))");
    let want = (Some(completed), Some(2.0));
    assert_eventually(
        prom.port,
        [&counter, &shards],
        want,
        Duration::from_secs(10),
        &format!(
            "the completed counter summed over both shards, and both finished, against the JSONs' {completed}"
        ),
    );
    assert_merged_p99_in_bucket(prom.port, &sel, p99_ns, "blaster merge's");

    // Run 2: both up while running; shard 1 dies (SIGKILL, a lost machine) and its
    // `up` drops to 0 within a few scrapes while shard 0's stays 1.
    let at = unix_ms() + 2_000;
    let run_id = format!("prom-up-{at}");
    let mut children: Vec<Child> = (0..2)
        .map(|i| {
            shard(
                &sink.addr,
                i,
                at,
                &run_id,
                ports[i as usize],
                "12s",
                &jsons[i as usize],
            )
        })
        .collect();
    let ups = [up("0/2"), up("1/2")];
    let both = (Some(1.0), Some(1.0));
    let what = "up of shards 0/2 and 1/2 while both run";
    assert_eventually(
        prom.port,
        [&ups[0], &ups[1]],
        both,
        Duration::from_secs(10),
        what,
    );
    children[1].kill().unwrap();
    children[1].wait().unwrap();
    let one = (Some(1.0), Some(0.0));
    let what = "up of shards 0/2 and 1/2 after shard 1 died";
    assert_eventually(
        prom.port,
        [&ups[0], &ups[1]],
        one,
        Duration::from_secs(5),
        what,
    );
    let _ = children[0].kill();
    let _ = children[0].wait();
    drop(prom);
    sink.stop();
}

/// The value of the first sample line of `name` (any labels) in an exposition.
fn sample(text: &str, name: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// A frames run's `/metrics` (scraped directly, no Prometheus needed): the frame
/// counters, the retention gauge and the deviation histogram's buckets agree with the
/// run's JSON once the run has finished (docs/metrics.md).
#[test]
fn a_frames_run_exposes_its_counters_retention_and_deviation_histogram() {
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "10"]);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let (_dir, json) = tmp_json();
    let mut child = spawn_piped(
        Command::new(bin())
            .arg("run")
            .args(frames_args(&sink.addr, "3s"))
            .args([
                "--metrics-listen",
                &listen,
                "--metrics-linger",
                "20s",
                "--json",
                json.to_str().unwrap(),
            ]),
    );
    // Scrape until the final state is served (that scrape ends the linger).
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("the run never finished: {:?}\n{}", out.status, stderr(&out));
        }
        if let Some((200, body)) = http_get(port, "/metrics")
            && body.contains("blaster_frame_deviation_seconds_count")
            && sample(&body, "blaster_run_finished") == 1.0
        {
            break body;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = wait_bounded(child, Duration::from_secs(30));
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&json);
    let fr = &v["frames"];
    for (metric, key) in [
        ("blaster_frames_sent_total", "sent"),
        ("blaster_frames_received_total", "received"),
        ("blaster_frames_lost_total", "lost"),
        ("blaster_frames_late_total", "late"),
        ("blaster_frames_not_sent_total", "not_sent"),
        ("blaster_frames_duplicates_total", "duplicates"),
        ("blaster_frames_reordered_total", "reordered"),
        ("blaster_frames_stale_total", "stale"),
        ("blaster_frames_foreign_total", "foreign"),
        ("blaster_frames_disconnects_total", "residency.disconnects"),
        (
            "blaster_frame_deviation_seconds_count",
            "deviation_ns.count",
        ),
        ("blaster_frame_jitter_seconds_count", "jitter_ns.count"),
        ("blaster_frame_fanout_seconds_count", "fanout_ns.count"),
    ] {
        assert_eq!(sample(&text, metric), f(fr, key), "{metric} against {key}");
    }
    assert!(f(fr, "received") > 100_000.0, "{fr}");
    let retention = sample(&text, "blaster_frames_retention_ratio");
    assert!((retention - f(fr, "retention")).abs() < 1e-9, "{retention}");
    // The last interval's gauges are its JSON row's.
    let last = &v["intervals"].as_array().unwrap().last().unwrap()["frames"];
    for (metric, key) in [
        ("blaster_frames_up_per_second", "up_fps"),
        ("blaster_frames_down_per_second", "down_fps"),
        ("blaster_frames_connections_active", "connections_active"),
    ] {
        assert!(
            (sample(&text, metric) - f(last, key)).abs() < 1e-6,
            "{metric} against {last}"
        );
    }
    // The JSON's deviation p99 lies in the ladder bucket where histogram_quantile finds
    // the 99th percentile of the exposed buckets.
    let count = sample(&text, "blaster_frame_deviation_seconds_count");
    let buckets: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("blaster_frame_deviation_seconds_bucket{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(buckets.len(), LADDER_NS.len() + 1);
    assert_eq!(*buckets.last().unwrap(), count);
    let k = buckets.iter().position(|&c| c >= 0.99 * count).unwrap();
    let p99 = f(fr, "deviation_ns.p99") as u64;
    let lower = if k == 0 { 0 } else { LADDER_NS[k - 1] };
    let upper = LADDER_NS.get(k).copied().unwrap_or(u64::MAX);
    assert!(
        lower < p99 && p99 <= upper,
        "p99 {p99} outside ({lower}, {upper}]"
    );
    sink.stop();
}
