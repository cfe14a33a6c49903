//! End-to-end tests with real sockets on loopback: the sink and blaster run as
//! processes, the JSON report is parsed and checked. Each test takes the load lock.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Every dispatched request ends as exactly one of completed, an error, or cut off.
fn assert_accounted(v: &serde_json::Value) {
    if v["protocol"] == "udp-blast" {
        return; // fire and forget: nothing completes
    }
    let total = f(v, "requests.completed") + f(v, "requests.errors") + f(v, "requests.cut_off");
    assert_eq!(
        f(v, "requests.dispatched"),
        total,
        "requests do not add up: {}",
        v["requests"]
    );
}

/// Starts a 5000 requests/s run of `duration` against `target` writing JSON to
/// `path`; returns the child and its pid for signals.
fn spawn_run(
    target: &str,
    duration: &str,
    path: &std::path::Path,
) -> (std::process::Child, String) {
    let child = Command::new(bin())
        .args(["run", "--target", target, "--cores", "0", "--rate", "5000"])
        .args(["--duration", duration, "--json", path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    (child, pid)
}

fn run_json(
    target: &str,
    extra: &[&str],
    limit: Duration,
) -> (std::process::Output, serde_json::Value) {
    let (_dir, path) = tmp_json();
    let p = path.to_str().unwrap();
    let mut args = vec!["run", "--target", target, "--cores", "0", "--json", p];
    args.extend_from_slice(extra);
    let out = run(&args, limit);
    assert!(path.exists(), "no JSON; stderr: {}", stderr(&out));
    let v = read_json(&path);
    assert_accounted(&v);
    assert_exit_matches_validity(&out, &v);
    (out, v)
}

#[test]
fn end_to_end_report_has_the_documented_keys() {
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "echo"]);
    // A valid run is part of what is checked; a vCPU stolen for 40 ms (1% of the
    // requests late) invalidates any run, so validity and the first second's rate are
    // retried on a quiet host. The keys and counts are checked every attempt.
    on_a_quiet_host(
        "end_to_end_report_has_the_documented_keys",
        &RATE_ON_CORE_0,
        || documented_keys_run(&sink),
    );
}

fn documented_keys_run(sink: &Sink) -> Result<(), Miss> {
    // --max-lag 20ms: on this VM the hypervisor delays a worker's wake-up by a
    // millisecond or more with nothing on the core to show for it (lag p99 6.8 ms at
    // 2,000/s seen in a CI run); the generator keeping up is what is checked, not the
    // host's timer.
    let (s0, t0) = steal_jiffies(&[0]);
    let (out, v) = run_json(
        &sink.addr,
        &[
            "--rate",
            "2000",
            "--duration",
            "2s",
            "--connections",
            "16",
            "--payload-size",
            "100",
            "--max-lag",
            "20ms",
        ],
        Duration::from_secs(30),
    );
    let (s1, t1) = steal_jiffies(&[0]);
    let stolen = (s1 - s0) as f64 / (t1 - t0).max(1) as f64;
    assert_eq!(v["schema_version"], 3);
    assert_eq!(f(&v, "rate.intended_rps"), 2000.0);
    assert_eq!(f(&v, "requests.sent"), 4000.0);
    assert_eq!(f(&v, "requests.completed"), 4000.0);
    assert_eq!(f(&v, "requests.errors"), 0.0);
    assert_eq!(f(&v, "requests.timeouts"), 0.0);
    assert_eq!(f(&v, "bytes.received"), 400_000.0);
    for h in [
        "latency_ns",
        "service_time_ns",
        "dispatch_lag_ns",
        "connection_wait_ns",
    ] {
        for k in ["p50", "p90", "p99", "p999", "p9999", "max", "mean", "count"] {
            assert!(v[h][k].is_number(), "{h}.{k} missing");
        }
    }
    assert_eq!(f(&v, "latency_ns.count"), 4000.0);
    // Latency counts from the intended instant, so it is never below service time.
    assert!(f(&v, "latency_ns.p50") >= f(&v, "service_time_ns.p50"));
    let iv = v["intervals"].as_array().unwrap();
    assert!(iv.len() >= 2, "{iv:?}");
    for k in [
        "achieved_rps",
        "latency_p50_ns",
        "latency_p99_ns",
        "errors",
        "steal",
    ] {
        assert!(iv[0][k].is_number(), "intervals[].{k}");
    }
    // The hypervisor's share of core 0 (/proc/stat steal), per second: a substantial
    // steal seen by the test around the run shows in the run's own figure.
    let max_steal = f(&v, "host.max_steal");
    assert!((0.0..=1.0).contains(&max_steal), "{}", v["host"]);
    if stolen > 0.05 {
        assert!(
            max_steal > 0.0,
            "{stolen} stolen around the run: {}",
            v["host"]
        );
    }
    assert_eq!(f(&v, "host.steal_warn_at"), 0.02);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("service time"), "{text}");
    assert!(text.contains("hypervisor steal up to"), "{text}");
    // 2,000/s on 16 connections is far below one core's ceiling: the run must be
    // valid, and the report must say so.
    generator_kept_up(&v)?;
    assert_eq!(v["valid"], true);
    assert_eq!(v["invalid_reasons"].as_array().unwrap().len(), 0);
    assert!(text.contains("run: VALID"), "{text}");
    let first = f(&iv[0], "achieved_rps");
    if (first - 2000.0).abs() >= 100.0 {
        let why = format!("first second {:?}", iv[0]);
        let second = Duration::from_secs(1);
        return Err(Miss::in_run(&v, why).sized(first, 2000.0, 0.05, second));
    }
    Ok(())
}

#[test]
fn fixed_framing_and_pipelining_against_the_sink() {
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "fixed:200", "--request-size", "10"]);
    let (out, v) = run_json(
        &sink.addr,
        &[
            "--rate",
            "5000",
            "--duration",
            "2s",
            "--connections",
            "4",
            "--pipeline",
            "8",
            "--payload",
            "ping\\r\\nabcd",
            "--framing",
            "fixed:200",
        ],
        Duration::from_secs(30),
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out)); // validity is not what this tests
    assert_eq!(f(&v, "requests.completed"), 10_000.0);
    assert_eq!(f(&v, "bytes.received"), 2_000_000.0);
    assert_eq!(f(&v, "bytes.sent"), 100_000.0);
}

#[test]
fn rate_accuracy_within_one_percent() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    for rate in [1_000.0, 10_000.0, 50_000.0] {
        let r = rate.to_string();
        on_a_quiet_host("rate_accuracy_within_one_percent", &RATE_ON_CORE_0, || {
            let (out, v) = run_json(
                &sink.addr,
                &["--rate", &r, "--duration", "5s", "--connections", "64"],
                Duration::from_secs(40),
            );
            // The rate is what is checked; a host hiccup may flip validity (exit 3).
            assert!(
                matches!(out.status.code(), Some(0 | 3)),
                "rate {rate}: {}",
                stderr(&out)
            );
            let achieved = f(&v, "rate.achieved_rps");
            if (achieved - rate).abs() > rate * 0.01 {
                let why = format!("rate {rate}: achieved {achieved}");
                let run = Duration::from_secs(5);
                return Err(Miss::in_run(&v, why).sized(achieved, rate, 0.01, run));
            }
            // Per second too: every full interval within 1%.
            for iv in v["intervals"].as_array().unwrap().iter().take(5) {
                let a = f(iv, "achieved_rps");
                if (a - rate).abs() > rate * 0.01 {
                    let why = format!("rate {rate}: interval {iv}");
                    let second = Duration::from_secs(1);
                    return Err(Miss::in_run(&v, why).sized(a, rate, 0.01, second));
                }
            }
            Ok(())
        });
    }
}

#[test]
fn coordinated_omission_target_stall_shows_in_latency_not_service_time() {
    let _g = load_lock();
    // A freeze of S = 1 s every T = 10 s: a request arriving t into the freeze waits
    // S - t, so S/T = 10% of requests are delayed uniformly on (0, S] and
    // p99 = S (1 - 0.01 T / S) = 0.9 s.
    let sink = Sink::start(&["--stall", "1s", "--every", "10s"]);
    // The premise is a generator that kept its timetable through the stall: the gate
    // checks that, and a vCPU stolen for 20 ms breaks it whatever the code does. Only
    // an invalid run is retried.
    on_a_quiet_host(
        "coordinated_omission_target_stall_shows_in_latency_not_service_time",
        &RATE_ON_CORES_0_1,
        || {
            // --max-lag 20ms: a host whose timer wake-ups come milliseconds late (a VM)
            // is not what this checks; a generator that waited for the stalled target
            // would lag by the whole second.
            let (out, v) = run_json(
                &sink.addr,
                &[
                    "--rate",
                    "2000",
                    "--duration",
                    "10s",
                    "--connections",
                    "64",
                    "--max-lag",
                    "20ms",
                ],
                Duration::from_secs(60),
            );
            assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
            assert_eq!(f(&v, "requests.errors"), 0.0);
            // A target stall must not invalidate.
            generator_kept_up(&v)?;
            // A generator that kept its timetable measured the stall: from here on the
            // figures are the code's, whatever the host did.
            let p99 = f(&v, "latency_ns.p99") / 1e9;
            assert!(
                (0.81..=0.99).contains(&p99),
                "latency p99 {p99} s, expected 0.9 s +- 10%"
            );
            let svc = f(&v, "service_time_ns.p99") / 1e9;
            assert!(
                svc < 0.1,
                "service time p99 {svc} s should stay far below latency"
            );
            assert!(
                f(&v, "connection_wait_ns.max") > 0.5e9,
                "the stall shows as connection wait"
            );
            Ok(())
        },
    );
}

#[test]
fn generator_pause_makes_the_run_invalid() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let (_dir, path) = tmp_json();
    let (child, pid) = spawn_run(&sink.addr, "4s", &path);
    std::thread::sleep(Duration::from_millis(1500));
    Command::new("kill").args(["-STOP", &pid]).status().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    Command::new("kill").args(["-CONT", &pid]).status().unwrap();
    let out = wait_bounded(child, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let v = read_json(&path);
    assert_eq!(v["valid"], false);
    let codes = common::codes(&v["invalid_reasons"]);
    assert!(
        codes.contains(&"dispatch_lag_high".to_string()),
        "{codes:?}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("INVALID RUN"));
}

#[test]
fn ctrl_c_stops_and_still_reports() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let (_dir, path) = tmp_json();
    let (child, pid) = spawn_run(&sink.addr, "30s", &path);
    std::thread::sleep(Duration::from_millis(1500));
    let t = Instant::now();
    Command::new("kill").args(["-INT", &pid]).status().unwrap();
    let out = wait_bounded(child, Duration::from_secs(10));
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "stop took {:?}",
        t.elapsed()
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out)); // validity is not what this tests
    let v = read_json(&path);
    assert_accounted(&v);
    assert_eq!(v["interrupted"], true);
    assert_eq!(
        f(&v, "requests.errors"),
        0.0,
        "cut-off requests are not errors"
    );
    let secs = f(&v, "duration_s");
    assert!(secs > 1.0 && secs < 3.0, "schedule ran {secs} s");
    // The rate is over the time that ran, not the 30 s scheduled (250/s); 10%, since
    // requests due while a stolen vCPU held the worker just before the interrupt are
    // never sent.
    let achieved = f(&v, "rate.achieved_rps");
    assert!((achieved - 5000.0).abs() < 500.0, "achieved {achieved}/s");
}

#[test]
fn timeouts_are_errors_recorded_at_the_timeout() {
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "discard"]);
    let (out, v) = run_json(
        &sink.addr,
        &[
            "--rate",
            "200",
            "--duration",
            "2s",
            "--connections",
            "8",
            "--timeout",
            "300ms",
        ],
        Duration::from_secs(30),
    );
    // Nothing answered: a failed run (exit 1, one line), its report written all the same.
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("nothing succeeded") && err.contains("timeout="),
        "{err}"
    );
    let timeouts = f(&v, "requests.timeouts");
    assert!(timeouts > 300.0, "timeouts {timeouts}");
    assert_eq!(f(&v, "requests.completed"), 0.0);
    // A dead target cannot make the histogram look better: every sample is the timeout
    // itself (recorded at the deadline, not when the scan noticed it), so the median and
    // the maximum are 300 ms within the histogram's 3-digit precision.
    for q in ["p50", "max"] {
        let l = f(&v, &format!("latency_ns.{q}"));
        assert!((0.2997e9..=0.3003e9).contains(&l), "latency {q} {l}");
    }
    assert_eq!(v["errors_by_kind"]["timeout"], timeouts as u64);
}

#[test]
fn loopback_baseline_reports_a_ceiling() {
    let _g = load_lock();
    on_a_quiet_host(
        "loopback_baseline_reports_a_ceiling",
        &RATE_ON_CORES_0_1,
        || {
            let (_dir, path) = tmp_json();
            let out = run(
                &[
                    "--cores",
                    "0",
                    "--start-rate",
                    "40000",
                    "--step-duration",
                    "1s",
                    "--json",
                    path.to_str().unwrap(),
                ],
                Duration::from_secs(60),
            );
            let v = read_json(&path);
            assert_eq!(v["mode"], "baseline");
            assert!(!v["steps"].as_array().unwrap().is_empty());
            // A step the baseline itself saw sharing core 0 did not test the code.
            let shared = v["steps"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["shared"] == true);
            let text = String::from_utf8_lossy(&out.stdout);
            // "at_least": the sink set the pace; the figure is still the generator's floor.
            let kind = v["verdict"]["kind"].as_str().unwrap_or_default();
            if out.status.code() != Some(0) || !["ceiling", "at_least"].contains(&kind) {
                // The step says only that its core was shared (other load or steal
                // above the warning level), not by how much: the whole core, for a
                // miss that states no size.
                return Err(Miss {
                    why: format!("exit {:?}: {text}", out.status.code()),
                    other_load: shared.then_some(1.0),
                    size: None,
                });
            }
            assert!(text.contains("generator ceiling"), "{text}");
            // Issue 33: the host's noise first, and the decisive steps three times each.
            assert!(text.contains("this host: timer late p99"), "{text}");
            assert!(text.contains("repeats: "), "{text}");
            assert_eq!(v["repeats"]["ceiling"]["runs"], 3, "{}", v["repeats"]);
            assert!(f(&v, "host_noise.wakeups") > 1_000.0, "{}", v["host_noise"]);
            // The first step (40,000/s, a sixth of this VM's measured ceiling) held.
            ensure(f(&v, "ceiling_rps") >= 40_000.0, || {
                let steps: Vec<String> = v["steps"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| {
                        format!(
                            "{} -> {} valid {} lag p99 {} ns",
                            s["intended_rps"],
                            s["achieved_rps"],
                            s["valid"],
                            s["dispatch_lag_p99_ns"]
                        )
                    })
                    .collect();
                format!("ceiling {}: {steps:?}", v["ceiling_rps"])
            })
        },
    );
}

/// Issue 21: the baseline on a host whose generator core is busy says so, naming the
/// core and the share taken, instead of presenting the number as the generator's.
/// Whichever way the steps went (a ceiling on a shared core, or no valid step at all),
/// the summary names generator core 0 as shared and never prints "ceiling: 0".
#[test]
fn the_baseline_names_a_shared_generator_core() {
    let _g = load_lock();
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        skip(
            "the_baseline_names_a_shared_generator_core",
            "needs two cores (generator core 0, the sink on core 1)",
        );
        return;
    }
    let (_dir, path) = tmp_json();
    let busy = Hog::on_core(0);
    let out = run(
        &[
            "--cores",
            "0",
            "--start-rate",
            "2000",
            "--step-duration",
            "500ms",
            "--json",
            path.to_str().unwrap(),
        ],
        Duration::from_secs(90),
    );
    drop(busy);
    let text = String::from_utf8_lossy(&out.stdout);
    let v = read_json(&path);
    let kind = v["verdict"]["kind"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        ["shared", "no_valid_step"].contains(&kind.as_str()),
        "{kind}: {text}{}",
        stderr(&out)
    );
    assert!(
        text.contains("generator core 0 was shared: other processes took"),
        "{text}"
    );
    assert!(!text.contains("ceiling: 0"), "{text}");
    if kind == "shared" {
        assert!(text.contains("rerun on a quiet host"), "{text}");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    } else {
        assert!(text.contains("no valid step: "), "{text}");
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    }
    // Every step carries the other load it saw on core 0.
    for s in v["steps"].as_array().unwrap() {
        assert_eq!(s["other_load_core"], 0, "{s}");
    }
}

#[test]
fn udp_loss_from_a_dropping_sink_is_reported() {
    let _g = load_lock();
    let sink = Sink::start_udp(&["--mode", "echo", "--drop", "0.01", "--seed", "3"]);
    let (out, v) = run_json(
        &sink.addr,
        &[
            "--proto",
            "udp",
            "--rate",
            "10000",
            "--duration",
            "3s",
            "--connections",
            "4",
            "--timeout",
            "200ms",
        ],
        Duration::from_secs(30),
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let loss = f(&v, "udp.loss_ratio");
    assert!(
        (0.007..=0.013).contains(&loss),
        "loss ratio {loss}, expected about 1%"
    );
    assert_eq!(f(&v, "udp.lost"), f(&v, "requests.errors"));
    assert_eq!(f(&v, "udp.duplicates"), 0.0);
    // Lost datagrams are recorded at the timeout: p99.9 sits there.
    assert!(f(&v, "latency_ns.p999") >= 0.19e9, "{}", v["latency_ns"]);
}

#[test]
fn udp_blast_counted_by_the_sink() {
    let _g = load_lock();
    let (_dir, sink_json) = tmp_json();
    let sink = Sink::start_udp(&["--mode", "count", "--json", sink_json.to_str().unwrap()]);
    let (out, v) = run_json(
        &sink.addr,
        &[
            "--proto",
            "udp",
            "--no-response",
            "--rate",
            "50000",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--payload-size",
            "64",
        ],
        Duration::from_secs(30),
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    assert_eq!(v["protocol"], "udp-blast");
    assert_eq!(f(&v, "udp.sent"), 100_000.0);
    assert!((f(&v, "udp.sent_pps") - 50_000.0).abs() < 500.0);
    let bps = f(&v, "udp.sent_bps");
    assert!(
        (bps - f(&v, "udp.sent_pps") * 88.0 * 8.0).abs() < 1.0,
        "{bps}"
    );
    sink.stop();
    let s = read_json(&sink_json);
    let received = f(&s, "received");
    assert!(received >= 99_000.0, "sink received {received} of 100000");
    assert_eq!(f(&s, "lost") + received, 100_000.0, "{s}");
    // One flow over loopback at 50,000/s: in order, at the rate sent.
    assert_eq!(f(&s, "reordered"), 0.0, "{s}");
    let pps = f(&s, "received_pps");
    assert!(
        (45_000.0..=55_000.0).contains(&pps),
        "sink received {pps}/s"
    );
}

#[test]
fn udp_blast_at_max_rate() {
    let _g = load_lock();
    let sink = Sink::start_udp(&["--mode", "count"]);
    let (out, v) = run_json(
        &sink.addr,
        &[
            "--proto",
            "udp",
            "--no-response",
            "--rate",
            "max",
            "--duration",
            "1s",
            "--connections",
            "2",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // GSO batches send about 2M/s here (bench/udp.sh); a quarter of that still
    // catches a lost batching path without flaking on a noisy host.
    assert!(f(&v, "udp.sent_pps") > 500_000.0, "{}", v["udp"]);
    assert!(
        v["rate"]["intended_rps"].is_null(),
        "max has no intended rate"
    );
}

/// Issue 10 §4: a submit error that is not transient (ENOMEM, injected through the
/// ring's test hook) ends the run with one line naming it and exit code 1, with what
/// was measured so far still reported; no panic. TCP and UDP.
#[test]
fn a_failing_submit_ends_the_run_with_one_line_and_the_figures_so_far() {
    let _g = load_lock();
    for udp in [false, true] {
        let sink = if udp {
            Sink::start_udp(&["--mode", "echo"])
        } else {
            Sink::start(&["--mode", "echo"])
        };
        let (_dir, path) = tmp_json();
        let mut args = vec!["run", "--target", &sink.addr, "--cores", "0"];
        args.extend_from_slice(&["--rate", "2000", "--duration", "3s", "--connections", "4"]);
        args.extend_from_slice(&["--json", path.to_str().unwrap()]);
        if udp {
            args.extend_from_slice(&["--proto", "udp"]);
        }
        let child = Command::new(bin())
            .args(&args)
            .env("BLASTER_TEST_FAIL_SUBMIT_AFTER", "300")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = wait_bounded(child, Duration::from_secs(20));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "udp={udp}: {err}");
        assert!(!err.contains("panicked"), "udp={udp}: {err}");
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("io_uring submit failed"))
            .collect();
        assert_eq!(lines.len(), 1, "udp={udp}: {err}");
        assert!(lines[0].contains("Cannot allocate memory"), "{}", lines[0]);
        // What was measured before the failure is still reported, in text and JSON.
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("rate:"), "udp={udp}: no report: {text}");
        let v = read_json(&path);
        assert!(
            f(&v, "requests.completed") > 0.0,
            "udp={udp}: {}",
            v["requests"]
        );
        assert!(
            f(&v, "duration_s") < 2.5,
            "udp={udp}: the run did not stop early"
        );
        assert_accounted(&v);
    }
}

/// Issue 34 item 7: a timing miss is the host's doing only when what was measured
/// during its attempt could explain it (`common::excuse`, docs/testing.md): steal above
/// the check's share, or another process's load, and for a miss that states its size,
/// enough of either to cover the part past the check's tolerance. Everything else fails.
#[test]
fn a_miss_is_excused_only_by_a_disturbance_that_explains_it() {
    let ms = |ms: f64| ms * 1e6;
    let stolen = |share: f64, ns: f64| Stolen { share, ns };
    let plain = || Miss::from("lag p99 past the gate".to_string());
    // A rate 3% off over one second, 1% allowed: 2% of the second, 20 ms, unexplained.
    let sized = |other_load: Option<f64>| Miss {
        why: "rate 3% short".into(),
        other_load,
        size: Some(MissSize {
            off: 0.03,
            tolerance: 0.01,
            window: Duration::from_secs(1),
        }),
    };
    assert!((sized(None).size.unwrap().unexplained_ns() - ms(20.0)).abs() < 1.0);
    // Unsized: steal above the check's share explains it, at or below it does not.
    let steal = stolen(0.02, ms(100.0));
    assert_eq!(excuse(&plain(), steal, 0.01), Some(Excuse::Steal(steal)));
    assert_eq!(excuse(&plain(), stolen(0.01, ms(50.0)), 0.01), None);
    assert_eq!(excuse(&plain(), stolen(0.0, 0.0), 0.01), None);
    // Unsized: another process's load on the run's cores explains it.
    let mut other = plain();
    other.other_load = Some(0.3);
    assert_eq!(
        excuse(&other, stolen(0.0, 0.0), 0.01),
        Some(Excuse::OtherLoad(0.3))
    );
    // Sized: the steal must be above the share and cover the 20 ms.
    assert_eq!(excuse(&sized(None), stolen(0.02, ms(19.0)), 0.01), None);
    let enough = stolen(0.02, ms(20.0));
    assert_eq!(
        excuse(&sized(None), enough, 0.01),
        Some(Excuse::Steal(enough))
    );
    assert_eq!(excuse(&sized(None), stolen(0.005, ms(25.0)), 0.01), None);
    // Sized: other load must cover the 2% of the second too.
    assert_eq!(excuse(&sized(Some(0.015)), stolen(0.0, 0.0), 0.01), None);
    assert_eq!(
        excuse(&sized(Some(0.3)), stolen(0.0, 0.0), 0.01),
        Some(Excuse::OtherLoad(0.3))
    );
    // Miss::sized measures the miss as a share of what was expected.
    let m = Miss::from(String::new()).sized(970.0, 1000.0, 0.01, Duration::from_secs(1));
    assert!((m.size.unwrap().off - 0.03).abs() < 1e-9);
    // Stolen::between: the steal over all the cores' time, in ns at the kernel's tick.
    let s = Stolen::between((10, 1000), (20, 1100));
    assert!((s.share - 0.1).abs() < 1e-9);
    // SAFETY: sysconf reads a constant of the C library; no memory is involved.
    let tick_ns = 1e9 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    assert!((s.ns - 10.0 * tick_ns).abs() < 1.0);
}

/// The attempts of a timing check: a miss the host explains does not use up one of
/// the three, up to six attempts in all; three misses nothing explains fail it.
#[test]
fn a_disturbed_attempt_does_not_use_up_an_attempt() {
    // Steal never excuses here (more than all of the time); other load always does.
    let never_steal = Quiet {
        cores: &[0],
        steal_max: 2.0,
    };
    let disturbed = || {
        let mut m = Miss::from("lag p99 past the gate (busy)".to_string());
        m.other_load = Some(0.5);
        Err(m)
    };
    let quiet = || Err(Miss::from("lag p99 past the gate".to_string()));
    // Each attempt's outcome in turn ('d' disturbed, 'q' quiet miss, 'p' pass), and how
    // many attempts were made. A pause follows each disturbed attempt that has a next
    // one, and nothing else: `pauses` counts them.
    let pauses = std::cell::Cell::new(0);
    let run = |plan: &str| {
        let plan: Vec<char> = plan.chars().collect();
        let made = std::cell::Cell::new(0);
        pauses.set(0);
        let end = attempt(
            "t",
            &never_steal,
            || {
                let m = made.get();
                assert_eq!(plan[m - 1], 'd', "a pause after {m} attempts of {plan:?}");
                pauses.set(pauses.get() + 1);
            },
            || {
                made.set(made.get() + 1);
                match plan[made.get() - 1] {
                    'd' => disturbed(),
                    'q' => quiet(),
                    _ => Ok(()),
                }
            },
        );
        (end, made.get())
    };
    let (end, made) = run("dddddd");
    assert_eq!(made, ALL_ATTEMPTS);
    assert!(matches!(end, Attempts::Disturbed(e) if e.len() == ALL_ATTEMPTS));
    assert_eq!(pauses.get(), ALL_ATTEMPTS - 1);
    assert_eq!(run("ddddp"), (Attempts::Passed, 5));
    assert_eq!(pauses.get(), 4);
    assert_eq!(run("qqp"), (Attempts::Passed, 3));
    assert_eq!(pauses.get(), 0);
    let (end, made) = run("qqq");
    assert_eq!(made, QUIET_ATTEMPTS);
    assert!(matches!(end, Attempts::Missed { quiet, all: 3 } if quiet.len() == 3));
    let (end, made) = run("dqdqdd");
    assert_eq!(made, 6);
    assert!(matches!(end, Attempts::Missed { quiet, all: 6 } if quiet.len() == 2));
    assert_eq!(pauses.get(), 3);
    let (end, made) = run("qdqdq");
    assert_eq!(made, 5);
    assert!(matches!(end, Attempts::Missed { quiet, all: 5 } if quiet.len() == 3));
    assert_eq!(pauses.get(), 2);
}

/// Issue 22, part 8: the quiet-host gate's idea of "other load". A sink this test
/// started is the test's own load wherever it runs, so a miss with other load on its
/// core is a failure, not a skip; elsewhere, above the warning level, it is noise.
#[test]
fn other_load_on_the_tests_own_sink_core_is_no_excuse() {
    assert_eq!(
        cores_of_args(&["sink", "--cores", "1", "--mode", "echo"]),
        vec![1]
    );
    assert_eq!(
        cores_of_args(&["sink", "--cores", "1", "--cores", "0,2-3"]),
        vec![0, 2, 3]
    );
    assert_eq!(cores_of_args(&["sink"]), Vec::<u64>::new());
    assert!(other_load_is_foreign(0.5, 0.25, Some(0), &[1]));
    assert!(!other_load_is_foreign(0.5, 0.25, Some(1), &[1]));
    assert!(!other_load_is_foreign(0.2, 0.25, Some(0), &[]));
    // A live Sink registers its cores, and forgets them when dropped (the lock keeps
    // the other load tests' sinks out of the way).
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "echo"]);
    let core: u64 = sink_core().parse().unwrap();
    assert!(own_sink_cores().contains(&core));
    let v = serde_json::json!({"host": {
        "max_other_load": 0.9, "other_load_warn_at": 0.25, "max_other_load_core": core
    }});
    assert!(!saw_other_load(&v), "the test's own sink passed for noise");
    drop(sink);
    assert!(!own_sink_cores().contains(&core));
    assert!(saw_other_load(&v));
}
