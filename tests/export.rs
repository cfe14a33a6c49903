//! Issue 12 (items 1-3 and 7): the report's embedded histograms, the exporters
//! (`--hdr-log`, `--percentiles`, `--csv`) read back by other parsers, and `blaster
//! compare` as a CI gate, against the built-in sink.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]

mod common;

use common::{
    Miss, RATE_ON_CORES_0_1, Sink, bin, foreign_other_load, load_lock, on_a_quiet_host, read_json,
    run, stderr,
};
use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn decode(s: &str) -> Histogram<u64> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(s).unwrap();
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .unwrap()
}

/// A run against `sink` writing every output into `dir`; returns the JSON.
fn run_with_outputs(sink: &Sink, dir: &Path, extra: &[&str]) -> serde_json::Value {
    let p = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let (json, hlog, hgrm, csv) = (p("r.json"), p("r.hlog"), p("r.hgrm"), p("r.csv"));
    let mut args = vec![
        "run",
        "--cores",
        "0",
        "--target",
        &sink.addr,
        "--rate",
        "1000",
        "--duration",
        "3s",
        "--connections",
        "8",
        "--json",
        &json,
        "--hdr-log",
        &hlog,
        "--percentiles",
        &hgrm,
        "--csv",
        &csv,
    ];
    args.extend_from_slice(extra);
    let out = run(&args, Duration::from_secs(30));
    // Exit 3 is accepted: the shared host may stall the generator; the files still
    // describe the run.
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    read_json(&PathBuf::from(json))
}

#[test]
fn exporters_agree_with_the_report() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let v = run_with_outputs(&sink, dir.path(), &[]);
    assert_eq!(v["schema_version"], 3);
    let count = v["latency_ns"]["count"].as_u64().unwrap();
    assert!(count > 2_000, "{count}");
    let total = decode(v["histograms"]["latency"].as_str().unwrap());
    assert_eq!(total.len(), count);
    assert_eq!(
        total.value_at_quantile(0.99),
        v["latency_ns"]["p99"].as_u64().unwrap()
    );
    assert!(!v["machine"]["kernel"].as_str().unwrap().is_empty());
    assert!(v["machine"]["command_line"].as_array().unwrap().len() > 5);

    // Issue 33: the confidence intervals beside the CSV, one row per figure (a 3 s run
    // has too few seconds for an interval: the rows say so).
    let ci = std::fs::read_to_string(dir.path().join("r.ci.csv")).expect("r.ci.csv written");
    let lines: Vec<&str> = ci.lines().collect();
    assert_eq!(lines[0], "figure,percentile,value,low,high,level,note");
    assert_eq!(lines.len(), 1 + 4 * 5 + 2, "{ci}");
    let p50 = format!("latency_ns,p50,{},", v["latency_ns"]["p50"]);
    assert!(lines[1].starts_with(&p50), "{ci}");
    assert!(
        lines[1].ends_with(",0.95,too few samples: 3 intervals with samples; 5 needed"),
        "{ci}"
    );
    assert!(lines.last().unwrap().starts_with("error_ratio,,"), "{ci}");

    // The interval log, read by the hdrhistogram crate's own reader.
    let log = std::fs::read_to_string(dir.path().join("r.hlog")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.contains(&"#[Histogram log format version 1.3]"));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("#[StartTime: ") && l.contains(" (seconds since epoch), "))
    );
    assert!(lines.contains(
        &"\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
    ));
    let mut merged: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    let mut latency_lines = 0;
    for e in IntervalLogIterator::new(log.as_bytes()) {
        let LogEntry::Interval(i) = e.expect("every line parses") else {
            continue;
        };
        let tag = i.tag().expect("every line is tagged").as_str().to_string();
        let h = decode(i.encoded_histogram());
        // The max column is the interval's max in milliseconds.
        if !h.is_empty() {
            assert!(
                (i.max() - h.max() as f64 / 1e6).abs() < 0.001,
                "{}",
                i.max()
            );
        }
        latency_lines += usize::from(tag == "latency");
        let m = merged
            .entry(tag)
            .or_insert_with(|| Histogram::new_with_bounds(1, h.high(), 3).unwrap());
        m.add(&h).unwrap();
    }
    let tags: Vec<&str> = merged.keys().map(String::as_str).collect();
    assert_eq!(tags, ["lag", "latency", "service", "wait"]);
    assert_eq!(latency_lines, v["intervals"].as_array().unwrap().len());
    assert_eq!(merged["latency"].len(), count);
    assert_eq!(
        merged["latency"].value_at_quantile(0.99),
        v["latency_ns"]["p99"].as_u64().unwrap()
    );
    assert_eq!(
        merged["service"].len(),
        v["service_time_ns"]["count"].as_u64().unwrap()
    );

    // CSV: one row per second of the run, every field numeric but the empty link one.
    let csv = std::fs::read_to_string(dir.path().join("r.csv")).unwrap();
    let mut rows = csv.lines();
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    assert_eq!(header[0], "time_s");
    assert!(header.contains(&"latency_p99_ns") && header.contains(&"link_utilization"));
    let rows: Vec<Vec<&str>> = rows.map(|r| r.split(',').collect()).collect();
    assert_eq!(rows.len(), 3, "{csv}");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.len(), header.len());
        assert_eq!(r[0], i.to_string());
        for f in &r[..r.len() - 1] {
            f.parse::<f64>()
                .unwrap_or_else(|_| panic!("{f:?} in {r:?}"));
        }
    }
    let p99_col = header.iter().position(|h| *h == "latency_p99_ns").unwrap();
    assert_eq!(
        rows[1][p99_col].parse::<u64>().unwrap(),
        v["intervals"][1]["latency_p99_ns"].as_u64().unwrap()
    );

    // .hgrm: two distributions whose rows parse, counts climbing to the total.
    let hgrm = std::fs::read_to_string(dir.path().join("r.hgrm")).unwrap();
    let mut distributions = 0;
    let mut last_count = 0u64;
    for l in hgrm.lines() {
        if l.trim_start().starts_with("Value") {
            distributions += 1;
            last_count = 0;
            continue;
        }
        if l.starts_with("#[Max") {
            let total: u64 = l
                .rsplit('=')
                .next()
                .unwrap()
                .trim_end_matches(']')
                .trim()
                .parse()
                .unwrap();
            assert_eq!(total, last_count);
            assert_eq!(total, count);
        }
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let f: Vec<f64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
        assert!(f.len() == 4 || f.len() == 3, "{l}");
        assert!(f[2] as u64 >= last_count, "{l}");
        last_count = f[2] as u64;
    }
    assert_eq!(distributions, 2);
    // Every file is in place; no partial file is left.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".partial")), "{names:?}");
}

/// A `--mix` run's interval log ends with one `mix.NAME` line per entry spanning the
/// run, read by the hdrhistogram crate's reader: each holds exactly the entry's
/// latency histogram from the JSON, and the entries add up to the run's latency.
#[test]
fn a_mix_runs_interval_log_has_one_line_per_entry() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("mix.txt");
    std::fs::write(
        &mix,
        "small 70 fixed:9 x{rand:8}\nbig,one 30 fixed:65 y{rand:64}\n",
    )
    .unwrap();
    let v = run_with_outputs(&sink, dir.path(), &["--mix", mix.to_str().unwrap()]);
    let log = std::fs::read_to_string(dir.path().join("r.hlog")).unwrap();
    let mut mix_lines = BTreeMap::new();
    let mut latency = 0;
    for e in IntervalLogIterator::new(log.as_bytes()) {
        let LogEntry::Interval(i) = e.expect("every line parses") else {
            continue;
        };
        let tag = i.tag().expect("tagged").as_str().to_string();
        let h = decode(i.encoded_histogram());
        if tag == "latency" {
            latency += h.len();
        } else if tag.starts_with("mix.") {
            assert_eq!(i.start_timestamp(), Duration::ZERO, "{tag} starts the run");
            assert!(mix_lines.insert(tag, h).is_none(), "one line per entry");
        }
    }
    let entries = v["mix"].as_array().unwrap();
    let names: Vec<&str> = mix_lines.keys().map(String::as_str).collect();
    assert_eq!(names, ["mix.big_one", "mix.small"]);
    let mut sum = 0;
    for e in entries {
        let tag = format!("mix.{}", e["name"].as_str().unwrap().replace(',', "_"));
        let json = decode(e["latency_histogram"].as_str().unwrap());
        assert_eq!(mix_lines[&tag], json, "{tag}");
        assert_eq!(json.len(), e["latency_ns"]["count"].as_u64().unwrap());
        sum += json.len();
    }
    assert_eq!(sum, latency);
    assert!(sum > 2_000, "{sum}");
}

#[test]
fn unwritable_output_fails_before_connecting() {
    // Nothing listens on the target: a run that got as far as connecting would say so.
    let target = format!("127.0.0.1:{}", common::free_port());
    for flag in ["--hdr-log", "--csv", "--percentiles", "--json"] {
        let out = run(
            &[
                "run",
                "--cores",
                "0",
                "--target",
                &target,
                "--rate",
                "100",
                "--duration",
                "1s",
                flag,
                "/nonexistent-dir/out",
            ],
            Duration::from_secs(10),
        );
        assert_eq!(out.status.code(), Some(1), "{flag}: {}", stderr(&out));
        let e = stderr(&out);
        assert!(e.contains("/nonexistent-dir/out"), "{flag}: {e}");
        assert!(!e.contains("cannot connect"), "{flag}: {e}");
    }
}

#[test]
fn two_outputs_on_stdout_is_a_usage_error() {
    let out = run(
        &[
            "run",
            "--target",
            "127.0.0.1:9",
            "--rate",
            "100",
            "--json",
            "-",
            "--csv",
            "-",
        ],
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("stdout"));
}

fn compare(args: &[&str]) -> std::process::Output {
    let mut all = vec!["compare"];
    all.extend_from_slice(args);
    run(&all, Duration::from_secs(10))
}

/// A 2 s run against `sink`; whether it was valid.
fn quick_run(sink: &Sink, json: &Path) -> bool {
    let out = run(
        &[
            "run",
            "--cores",
            "0",
            "--target",
            &sink.addr,
            "--rate",
            "500",
            "--duration",
            "2s",
            "--connections",
            "8",
            "--json",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    out.status.code() == Some(0)
}

#[test]
fn compare_gates_a_slower_target() {
    let _g = load_lock();
    let dir = tempfile::tempdir().unwrap();
    let (fast, slow) = (dir.path().join("fast.json"), dir.path().join("slow.json"));
    // A 2 ms delay shows at p99 only when the generator kept its timetable and the
    // sink had its core: a CI run here had both runs valid and the plain sink's p99 at
    // 5.39 ms (its core taken for milliseconds at a time), above the delayed sink's
    // 4.12 ms. So the runs and their comparison are a timing check; the synthetic
    // comparison after it holds whatever the host did.
    on_a_quiet_host("compare_gates_a_slower_target", &RATE_ON_CORES_0_1, || {
        let a = quick_run(&Sink::start(&[]), &fast);
        let b = quick_run(&Sink::start(&["--delay", "2ms"]), &slow);
        let other = [&fast, &slow]
            .iter()
            .filter_map(|f| foreign_other_load(&read_json(f)))
            .reduce(f64::max);
        let miss = |why: String| Miss {
            why,
            other_load: other,
            size: None,
        };
        if !(a && b) {
            return Err(miss(format!("a run was invalid: fast {a}, slow {b}")));
        }
        compare_real_runs(dir.path(), &fast, &slow).map_err(miss)
    });
    // Whatever the host did: BASE with every latency 25% longer must cross p99=15%, and
    // 5% longer must not. Every second's histogram is scaled with the run's: compare
    // decides with the intervals drawn from them (issue 33).
    let scaled = |factor: f64, name: &str| {
        use base64::Engine as _;
        use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
        let scale = |enc: &serde_json::Value| -> serde_json::Value {
            let h = decode(enc.as_str().unwrap());
            let mut out = Histogram::<u64>::new_with_bounds(1, h.high(), 3).unwrap();
            for x in h.iter_recorded() {
                let value = (x.value_iterated_to() as f64 * factor) as u64;
                out.record_n(value, x.count_at_value()).unwrap();
            }
            let mut buf = Vec::new();
            V2DeflateSerializer::new()
                .serialize(&out, &mut buf)
                .unwrap();
            base64::engine::general_purpose::STANDARD.encode(buf).into()
        };
        let mut v = read_json(&fast);
        v["histograms"]["latency"] = scale(&v["histograms"]["latency"]);
        for iv in v["intervals"].as_array_mut().unwrap() {
            iv["histograms"]["latency"] = scale(&iv["histograms"]["latency"]);
        }
        let p = dir.path().join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p.to_str().unwrap().to_string()
    };
    let f = fast.to_str().unwrap();
    for (factor, code) in [(1.25, 4), (1.05, 0)] {
        let new = scaled(factor, &format!("x{factor}.json"));
        let out = compare(&[f, &new, "--max-regression", "p99=15%"]);
        assert_eq!(
            out.status.code(),
            Some(code),
            "x{factor}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// `blaster compare` on a run against the plain sink (`fast`) and one against a sink
/// that holds each response 2 ms (`slow`): itself passes, the slower one regresses at
/// p99 past 15%, the other way round does not. `Err` when the comparison did not see
/// the delay (the host's timing, see the caller).
fn compare_real_runs(dir: &Path, fast: &Path, slow: &Path) -> Result<(), String> {
    let (f, s) = (fast.to_str().unwrap(), slow.to_str().unwrap());
    let gate = "p99=15%";
    let same = compare(&[f, f, "--max-regression", gate]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    let table = String::from_utf8_lossy(&same.stdout).to_string();
    assert!(table.contains("latency p99.99"), "{table}");
    let out_json = dir.join("cmp.json");
    let slower = compare(&[
        f,
        s,
        "--max-regression",
        gate,
        "--json",
        out_json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&slower.stdout).to_string();
    if slower.status.code() != Some(4) {
        return Err(format!("slower: exit {:?}: {stdout}", slower.status.code()));
    }
    assert!(stdout.contains("REGRESSED"), "{stdout}");
    let c = read_json(&out_json);
    assert_eq!(c["regressed"], true);
    let p99 = c["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "p99")
        .unwrap();
    assert_eq!(p99["regressed"], true);
    // Every response of the delayed sink took 2 ms at least.
    assert!(p99["new"].as_f64().unwrap() > 2e6, "{p99}");
    // Faster than the base is no regression.
    let faster = compare(&[s, f, "--max-regression", gate]);
    if faster.status.code() != Some(0) {
        return Err(format!(
            "faster: exit {:?}: {}",
            faster.status.code(),
            String::from_utf8_lossy(&faster.stdout)
        ));
    }
    Ok(())
}

#[test]
fn compare_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let w = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let old = w("old.json", r#"{"schema_version":1,"valid":true}"#);
    let foreign = w("k6.json", r#"{"metrics":{}}"#);
    let garbage = w("garbage.json", "not json");
    let missing = dir
        .path()
        .join("missing.json")
        .to_str()
        .unwrap()
        .to_string();
    for (file, why) in [
        (&old, "schema_version 1, but this blaster reads 3"),
        (&foreign, "not a blaster run report"),
        (&garbage, "not JSON"),
        (&missing, "cannot read"),
    ] {
        let out = compare(&[file, file]);
        assert_eq!(out.status.code(), Some(1), "{file}: {}", stderr(&out));
        let e = stderr(&out);
        assert!(e.contains(file.as_str()) && e.contains(why), "{e}");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
    }
    for spec in ["p99", "p99=abc%", "latency=5%", "p99=-1%"] {
        let out = compare(&[&old, &old, "--max-regression", spec]);
        assert_eq!(out.status.code(), Some(2), "{spec}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("--max-regression"),
            "{}",
            stderr(&out)
        );
    }
    let _ = bin();
}

/// Issue 25: `/metrics` served one connection at a time, 2 s per silent one, so a
/// crowd of silent clients made it unreachable; a bare-LF request got no answer and
/// pipelined requests one answer. During a run: 200 silent clients connected, then
/// a scrape answers at once, a bare-LF request is answered and three pipelined
/// requests get three answers.
#[test]
fn metrics_stay_reachable_with_200_silent_clients() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Instant;

    let _lock = load_lock();
    let sink = Sink::start(&[]);
    let port = common::free_port();
    let listen = format!("127.0.0.1:{port}");
    let child = common::spawn_piped(std::process::Command::new(bin()).args([
        "run",
        "--cores",
        "0",
        "--target",
        &sink.addr,
        "--rate",
        "100",
        "--duration",
        "8s",
        "--quiet",
        "--metrics-listen",
        &listen,
    ]));
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(&listen).is_err() {
        assert!(Instant::now() < deadline, "/metrics never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let exchange = |request: &str| -> (String, Duration) {
        let t = Instant::now();
        let mut s = TcpStream::connect(&listen).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        (String::from_utf8_lossy(&raw).into_owned(), t.elapsed())
    };
    let silent: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(&listen).unwrap())
        .collect();
    let (scrape, took) = exchange("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(scrape.starts_with("HTTP/1.1 200 OK\r\n"), "{scrape:?}");
    assert!(scrape.contains("blaster_requests_total"), "{scrape}");
    assert!(
        took < Duration::from_secs(1),
        "a scrape behind 200 silent clients took {took:?}"
    );
    let (bare, _) = exchange("GET /metrics HTTP/1.1\nHost: x\n\n");
    assert!(bare.starts_with("HTTP/1.1 200 OK\r\n"), "bare LF: {bare:?}");
    let (piped, _) = exchange(
        "GET /metrics HTTP/1.1\r\n\r\nGET /other HTTP/1.1\r\n\r\nHEAD /metrics HTTP/1.1\r\n\r\n",
    );
    let statuses: Vec<&str> = piped
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| &piped[i + 9..i + 12])
        .collect();
    assert_eq!(statuses, ["200", "404", "200"], "{piped}");
    drop(silent);
    let out = common::wait_bounded(child, Duration::from_secs(30));
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
}
