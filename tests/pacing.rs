//! The pacing self-check end to end, both directions, against the built-in sink on
//! loopback, at the defaults every user runs (`--spin auto --resolution 100us`,
//! issue 33): on an idle worker core the pacing passes at 1,000, 5,000, 20,000 and
//! 100,000/s (constant; Poisson to 20,000/s), with the dispatch lag p99 under
//! [`LAG_P99_MAX_NS`]; with a CPU hog pinned to the worker core the same runs fail, and
//! the report names the hog as the cause.
//!
//! Timing-sensitive: run under `flock /work/bench.lock` on a shared machine. The idle
//! case needs an idle core, and it gets up to three attempts that miss with nothing
//! to show for it (`common::on_a_quiet_host`): on this VM the hypervisor sometimes
//! delays a wake-up by hundreds of microseconds with nothing on the core to show for
//! it (seen: resolution 1.06 gaps on an idle core, then 0.2 the next run, on
//! the code of both before and after a change), so one failed attempt on an idle core
//! is retried, and the test fails when no attempt passed and at least one was on an
//! idle core. When every attempt's own host figures show another process took the
//! worker core (`host.max_other_load` above [`OTHER_LOAD_MAX`]), or the
//! hypervisor did (any steal on core 0 in /proc/stat during the attempt), the premise did not
//! hold: it is skipped (counted by `scripts/test.sh`), never passed
//! (`common::on_a_quiet_host`).
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]

mod common;

use common::{Hog, Miss, Quiet, Sink, f, load_lock, on_a_quiet_host, run, stderr, tmp_json};
use std::time::Duration;

/// The worker core, and no steal on it at all. Steal is counted in 10 ms jiffies, and
/// the sub-jiffy descheduling that spoils pacing shows only now and then: on this VM,
/// with other load at 0.00-0.05, attempts failed with 0.3-3.9% steal (one to a dozen
/// jiffies) and up to 30%, and passed with 0.0-1.0%. Any stolen jiffy during an
/// attempt means the premise (a worker core that was ours) did not hold.
const IDLE_CORE_0: Quiet = Quiet {
    cores: &[0],
    steal_max: 0.0,
};

/// The largest share of the worker core another process (or IRQs) may take in any
/// second of an attempt, from the run's own `host.max_other_load`. Far below the
/// report's warning level (0.25, for a run's validity): at 5,000/s, 10 ms of another
/// process in one second holds some 50 sends back by more than a gap, which is enough
/// to coarsen the resolution past it (a CI attempt here: resolution 1.09 gaps with
/// other load 0.01 and no steal). Quiet attempts here show 0.00.
const OTHER_LOAD_MAX: f64 = 0.005;

/// The dispatch lag p99 the defaults keep on an idle core (issue 33: within 150 us at
/// every rate; this bound leaves the hypervisor's odd late wake-up some room).
const LAG_P99_MAX_NS: f64 = 200_000.0;

/// `blaster run --cores 0` at `rate` with `arrivals` and otherwise the defaults against
/// the sink: (JSON report, text report).
fn paced_run(sink: &Sink, rate: &str, arrivals: &str) -> (serde_json::Value, String) {
    let (_dir, path) = tmp_json();
    let args = [
        "run",
        "--target",
        &sink.addr,
        "--cores",
        "0",
        "--rate",
        rate,
        "--arrivals",
        arrivals,
        "--duration",
        "3s",
        "--json",
        path.to_str().unwrap(),
    ];
    let out = run(&args, Duration::from_secs(60));
    // Exit 3 (invalid run) is expected with the hog: the generator fell behind.
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (common::read_json(&path), text)
}

fn idle_core_passes(test: &str, arrivals: &str, rates: &[&str]) {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    for &rate in rates {
        let passed = on_a_quiet_host(test, &IDLE_CORE_0, || {
            let (v, text) = paced_run(&sink, rate, arrivals);
            let p = &v["pacing"];
            assert_eq!(p["arrivals"], arrivals, "{v}");
            let lag_p99 = f(&v, "dispatch_lag_ns.p99");
            eprintln!(
                "{arrivals} {rate}/s: resolution {} ns ({:.3} gaps), D {:.4} (critical {:.4}), \
                 raw D {:.4}, {}; lag p99 {lag_p99} ns; other load on the core {:.2}",
                p["resolution_ns"],
                f(p, "resolution_gaps"),
                f(p, "statistic"),
                f(p, "critical"),
                f(p, "raw_statistic"),
                p["verdict"],
                f(&v, "host.max_other_load"),
            );
            assert_eq!(f(p, "window_ns"), 100_000.0, "the default window: {p}");
            if p["verdict"] != "pass" || lag_p99 > LAG_P99_MAX_NS {
                let mut miss = Miss::in_run(
                    &v,
                    format!("{arrivals} at {rate}/s: lag p99 {lag_p99} ns, {p}"),
                );
                let other = f(&v, "host.max_other_load");
                if other > OTHER_LOAD_MAX {
                    miss.other_load = Some(miss.other_load.map_or(other, |o| o.max(other)));
                }
                return Err(miss);
            }
            assert!(text.contains("pacing: PASS at resolution"), "{text}");
            Ok(())
        });
        if !passed {
            return;
        }
    }
}

#[test]
fn poisson_on_an_idle_core_passes() {
    idle_core_passes(
        "poisson_on_an_idle_core_passes",
        "poisson",
        &["1000", "5000", "20000"],
    );
}

#[test]
fn constant_on_an_idle_core_passes() {
    idle_core_passes(
        "constant_on_an_idle_core_passes",
        "constant",
        &["1000", "5000", "20000", "100000"],
    );
}

#[test]
fn a_hog_on_the_worker_core_fails_with_the_reason() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    // A hog at the worker's own priority does not reliably take its timing: the
    // scheduler lets the waking worker preempt it (measured by hand: 2,000/s poisson
    // passed 3 runs of 4, 20,000/s constant 1 of 4, the hog at 98% of core 0 each
    // time). At nice -19 it holds the core for scheduler slices: 8 runs of 8 failed.
    let _hog = Hog::niced(0, -19);
    for (rate, arrivals) in [("2000", "poisson"), ("20000", "constant")] {
        let (v, text) = paced_run(&sink, rate, arrivals);
        let p = &v["pacing"];
        eprintln!(
            "hog, {arrivals} {rate}/s: resolution {} ns ({:.3} gaps), D {:.4}, raw D {:.4}, {}",
            p["resolution_ns"],
            f(p, "resolution_gaps"),
            f(p, "statistic"),
            f(p, "raw_statistic"),
            p["verdict"]
        );
        assert_eq!(p["verdict"], "fail", "{v}");
        // By a wide margin: at least twice the coarsest resolution that passes.
        assert!(f(p, "resolution_gaps") >= 2.0, "{p}");
        let reason = p["reason"].as_str().unwrap();
        assert!(
            reason.contains("coarser than a worker's mean gap"),
            "{reason}"
        );
        // The real cause, from the run's own host figures: the hog, on core 0.
        assert!(
            reason.contains("Cause: another process took") && reason.contains("of core 0"),
            "{reason}"
        );
        assert!(text.contains("pacing: FAIL at resolution"), "{text}");
        assert!(text.contains(reason), "{text}");
        // The raw statistic stays beside the verdict.
        assert!(
            f(p, "raw_statistic") > 0.0 && f(p, "raw_critical") > 0.0,
            "{p}"
        );
    }
}
