//! Unit tests of the search: the step planner, the knee rule, conclusions, the
//! flags and the steps' plan.

use super::*;
use crate::cli::{Cli, Command};
use crate::limits::RATE_RPS_MAX;
use crate::slo::{Observed, Slo};
use clap::Parser;

fn cfg(growth: Growth, max: Option<f64>) -> SearchConfig {
    SearchConfig {
        slo: Slo::parse("p99<20ms").unwrap(),
        axis: Axis::Rate,
        start: 1000.0,
        growth,
        max,
        precision: 0.05,
        step_duration_ns: 1_000_000_000,
        repeats: 1,
    }
}

/// Runs the planner against a target that is good below `capacity`.
fn simulate(cfg: &SearchConfig, capacity: f64) -> (Vec<(f64, bool)>, End) {
    let mut h = Vec::new();
    loop {
        match next_step(cfg, &h) {
            Next::Run { value, .. } => h.push((value, value < capacity)),
            Next::Done(end) => return (h, end),
        }
        assert!(h.len() < 100, "planner does not end");
    }
}

#[test]
fn climbs_by_factor_then_bisects_to_the_precision() {
    let c = cfg(Growth::Factor(1.5), None);
    let (h, end) = simulate(&c, 4000.0);
    assert_eq!(end, End::Converged);
    let rates: Vec<f64> = h.iter().map(|s| s.0).collect();
    assert_eq!(&rates[..5], &[1000.0, 1500.0, 2250.0, 3375.0, 5062.5]);
    let good = h.iter().filter(|s| s.1).map(|s| s.0).fold(0.0, f64::max);
    let bad = h
        .iter()
        .filter(|s| !s.1)
        .map(|s| s.0)
        .fold(f64::MAX, f64::min);
    assert!(good < 4000.0 && bad >= 4000.0);
    assert!(bad - good <= 0.05 * good, "{good} {bad}");
    assert_eq!(
        next_step(&c, &h[..5]),
        Next::Run {
            value: (3375.0 + 5062.5) / 2.0,
            phase: Phase::Bisect
        }
    );
}

#[test]
fn climbs_by_step_and_stops_at_max() {
    let c = cfg(Growth::Add(500.0), Some(2200.0));
    let (h, end) = simulate(&c, 1e9);
    assert_eq!(end, End::ReachedMax);
    let rates: Vec<f64> = h.iter().map(|s| s.0).collect();
    assert_eq!(rates, [1000.0, 1500.0, 2000.0, 2200.0]);
}

#[test]
fn first_bad_step_ends_at_once() {
    let c = cfg(Growth::Factor(1.5), None);
    let (h, end) = simulate(&c, 500.0);
    assert_eq!((h.len(), end), (1, End::FirstStepBad));
}

#[test]
fn a_target_that_never_breaks_hits_the_step_limit() {
    let mut c = cfg(Growth::Factor(1.5), None);
    c.start = 1.0;
    let (h, end) = simulate(&c, f64::INFINITY);
    assert_eq!((h.len(), end), (CLIMB_STEPS_MAX, End::StepLimit));
    let c = cfg(Growth::Factor(10.0), None);
    let (h, end) = simulate(&c, f64::INFINITY);
    assert_eq!(end, End::StepLimit);
    assert_eq!(h.last().unwrap().0, RATE_RPS_MAX);
}

#[test]
fn bisection_is_bounded() {
    let mut c = cfg(Growth::Factor(1.5), None);
    c.precision = PRECISION_MIN;
    let (h, end) = simulate(&c, 3999.0);
    assert_eq!(end, End::Converged);
    assert!(h.len() <= 5 + BISECT_STEPS_MAX);
}

#[test]
fn knee_is_the_last_rate_before_a_persistent_steep_rise() {
    // Flat, then queueing: the rise from 3375 (3 ms) to 3800 (9 ms) has e = 9.3.
    let pts = [
        (1000.0, 2.1),
        (1500.0, 2.2),
        (2250.0, 2.4),
        (3375.0, 3.0),
        (3800.0, 9.0),
        (5062.0, 900.0),
    ];
    assert_eq!(knee(&pts), Some(3));
    // Just faster than the rate squared is steep enough; linear growth is not.
    assert_eq!(knee(&[(1000.0, 1.0), (2000.0, 4.1)]), Some(0));
    assert_eq!(knee(&[(1000.0, 1.0), (2000.0, 2.0), (4000.0, 4.0)]), None);
    // Jitter between close bisection steps: e = 3 but only 9% growth.
    assert_eq!(knee(&[(3796.0, 2.3), (3902.0, 2.5)]), None);
    // A one-step hiccup that the next step does not confirm is ignored.
    let hiccup = [(1500.0, 2.2), (2250.0, 6.0), (3375.0, 2.6), (5062.0, 500.0)];
    assert_eq!(knee(&hiccup), Some(2));
    // Too few points or no rise.
    assert_eq!(knee(&[]), None);
    assert_eq!(knee(&[(1000.0, 5.0)]), None);
    assert_eq!(knee(&[(1000.0, 5.0), (1500.0, 5.0)]), None);
    // Zero p99 (nothing completed) is skipped, not divided by.
    assert_eq!(knee(&[(1000.0, 0.0), (1500.0, 5.0)]), None);
}

fn step(rate: f64, achieved: f64, p99_ms: f64, outcome: StepOutcome) -> Step {
    let slo = Slo::parse("p99<20ms").unwrap();
    let h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    let mut verdict = slo.judge(&Observed {
        latency: &h,
        dispatched: 0,
        errors: 0,
        intended_rps: rate,
        achieved_rps: achieved,
        deviation: None,
        retention: None,
    });
    verdict.met = outcome == StepOutcome::Pass;
    Step {
        phase: Phase::Climb,
        connections: 64,
        intended_rps: rate,
        achieved_rps: achieved,
        latency_p50_ns: 1_000_000,
        latency_p99_ns: (p99_ms * 1e6) as u64,
        latency_p999_ns: (p99_ms * 2e6) as u64,
        latency_mean_ns: 2_000_000.0,
        dispatched: 0,
        completed: 0,
        errors: 0,
        error_ratio: 0.0,
        dispatch_lag_p99_ns: 0,
        generator_busy_ratio_max: 0.1,
        valid: outcome != StepOutcome::Invalid,
        invalid_reasons: Vec::new(),
        outcome,
        saturation: match outcome {
            StepOutcome::LinkBound => Some(Saturation::Link {
                utilization: 0.97,
                saturated_at: 0.9,
            }),
            StepOutcome::GeneratorBound => Some(Saturation::Generator {
                busy: 0.8,
                watermark: 0.65,
            }),
            _ => None,
        },
        slo: verdict,
        histograms: Default::default(),
        frames: None,
        tls_handshake_p90_ns: None,
    }
}

fn plan() -> RunPlan {
    let r = RunDefaults::try_parse_from(["--target", "127.0.0.1:9", "--rate", "1"])
        .unwrap()
        .run;
    let facts =
        HostFacts::with_cores(&[0]).resolving("127.0.0.1:9", "127.0.0.1:9".parse().unwrap());
    RunPlan::build(&r, &facts).unwrap()
}

#[test]
fn conclusions_and_exit_codes() {
    use crate::outcome::Outcome;
    use StepOutcome::*;
    let c = cfg(Growth::Factor(1.5), None);
    let t: SocketAddr = "127.0.0.1:9".parse().unwrap();
    // The target breaks the SLO at 5062 after a steep p99 rise from 3375.
    let steps = vec![
        step(1000.0, 999.0, 3.0, Pass),
        step(1500.0, 1498.0, 3.1, Pass),
        step(2250.0, 2247.0, 3.3, Pass),
        step(3375.0, 3370.0, 4.0, Pass),
        step(5062.5, 3900.0, 400.0, SloBroken),
        step(4218.75, 3890.0, 90.0, SloBroken),
        step(3796.875, 3790.0, 15.0, Pass),
    ];
    let r = conclude(&plan(), t, &c, steps, false);
    assert_eq!(r.stopped_by, StoppedBy::Target);
    assert_eq!(r.max_safe_throughput_rps, Some(3790.0));
    assert_eq!(r.max_safe_intended_rps, Some(3796.875));
    // Little's law: 3790/s x 2 ms.
    assert!((r.inflight_at_max_safe.unwrap() - 7.58).abs() < 1e-9);
    // 3375 (4 ms) -> 3796.875 (15 ms): e = 11.2; the knee is 3375's achieved rate.
    assert_eq!(r.knee_rps, Some(3370.0));
    assert_eq!(r.first_bad_rps, Some(4218.75));
    assert_eq!(r.outcome(), Outcome::Ok);
    let text = render(&r);
    assert!(
        text.contains("stopped by: target: the SLO broke at 4219/s"),
        "{text}"
    );
    assert!(
        text.contains("max safe throughput: 3790/s achieved"),
        "{text}"
    );
    // The lowest bad step invalid: the generator is the limit, exit 3.
    let steps = vec![
        step(1000.0, 999.0, 3.0, Pass),
        step(1500.0, 1200.0, 9.0, Invalid),
    ];
    let r = conclude(&plan(), t, &c, steps, false);
    assert_eq!(
        (r.stopped_by, r.outcome()),
        (StoppedBy::Generator, Outcome::Invalid)
    );
    assert_eq!(r.knee_rps, None);
    // Even the first step broke the SLO: exit 4, nothing safe.
    let r = conclude(
        &plan(),
        t,
        &c,
        vec![step(1000.0, 990.0, 30.0, SloBroken)],
        false,
    );
    assert_eq!(
        (r.stopped_by, r.outcome()),
        (StoppedBy::Target, Outcome::SloBroken)
    );
    assert_eq!(
        (r.max_safe_throughput_rps, r.inflight_at_max_safe),
        (None, None)
    );
    assert!(render(&r).contains("even the first step (1000/s)"));
    // Never broke: --max; Ctrl-C before any bad step: interrupted. Both exit 0.
    let good = vec![step(1000.0, 999.0, 3.0, Pass)];
    let r = conclude(&plan(), t, &c, good.clone(), false);
    assert_eq!((r.stopped_by, r.outcome()), (StoppedBy::Max, Outcome::Ok));
    let r = conclude(&plan(), t, &c, good, true);
    assert_eq!(
        (r.stopped_by, r.outcome()),
        (StoppedBy::Interrupted, Outcome::Ok)
    );
    let j = serde_json::to_value(&r).unwrap();
    for k in [
        "steps",
        "max_safe_throughput_rps",
        "knee_rps",
        "inflight_at_max_safe",
        "stopped_by",
        "slo_spec",
    ] {
        assert!(j.get(k).is_some(), "{k} missing");
    }
    assert_eq!(j["stopped_by"], "interrupted");
    assert_eq!(j["steps"][0]["outcome"], "pass");
    assert_eq!(j["steps"][0]["phase"], "climb");
}

fn search_args(extra: &[&str]) -> Result<SearchConfig, String> {
    let mut argv = vec!["blaster", "search"];
    argv.extend_from_slice(extra);
    let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
    let Command::Search(a) = cli.command else {
        panic!("not search")
    };
    config_from_args(&a).map_err(|e| e.to_string())
}

#[test]
fn validates_the_search_flags() {
    let base = [
        "--target",
        "127.0.0.1:9",
        "--slo",
        "p99<20ms",
        "--start",
        "1000",
    ];
    let ok = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        search_args(&a)
    };
    let c = ok(&[]).unwrap();
    assert_eq!(c.growth, Growth::Factor(FACTOR_DEFAULT));
    assert_eq!((c.precision, c.step_duration_ns), (0.05, 5_000_000_000));
    assert_eq!(ok(&["--step", "250"]).unwrap().growth, Growth::Add(250.0));
    assert_eq!(ok(&["--precision", "2.5%"]).unwrap().precision, 0.025);
    let cases: [(&[&str], &str); 9] = [
        (&["--factor", "1"], "--factor: must be greater than 1"),
        (&["--factor", "11"], "--factor: must be greater than 1"),
        (&["--step", "0"], "--step: must be greater than 0"),
        (&["--max", "500"], "--max: must be at least --start"),
        (&["--precision", "5"], "--precision: expected a percentage"),
        (&["--precision", "80%"], "--precision: must be between"),
        (
            &["--step-duration", "100ms"],
            "--step-duration: must be between",
        ),
        (
            &["--step-duration", "x"],
            "--step-duration: expected a duration",
        ),
        (&["--factor", "2", "--step", "5"], "cannot be used with"),
    ];
    for (extra, needle) in cases {
        let e = ok(extra).unwrap_err();
        assert!(e.contains(needle), "{extra:?}: {e}");
    }
    let e = search_args(&["--target", "127.0.0.1:9", "--start", "1"]).unwrap_err();
    assert!(e.contains("--slo: is required"), "{e}");
    let e = search_args(&["--slo", "p99<1ms", "--start", "1"]).unwrap_err();
    assert!(e.contains("--target: is required"), "{e}");
    let e = search_args(&["--target", "127.0.0.1:9", "--slo", "p99<1ms"]).unwrap_err();
    assert!(e.contains("--start: is required"), "{e}");
    let e = search_args(&["--target", "x:1", "--slo", "p99", "--start", "1"]).unwrap_err();
    assert!(e.starts_with("--slo: \"p99\": expected a bound"), "{e}");
}

#[test]
fn run_args_carry_the_run_flags_with_run_defaults() {
    let cli = Cli::try_parse_from([
        "blaster",
        "search",
        "--target",
        "127.0.0.1:9",
        "--slo",
        "p99<1ms",
        "--start",
        "1000",
        "--connections",
        "8",
        "--cores",
        "0",
        "--step-duration",
        "2s",
        "--timeout",
        "1s",
    ])
    .unwrap();
    let Command::Search(a) = cli.command else {
        panic!("not search")
    };
    let c = config_from_args(&a).unwrap();
    let r = run_args(&a).unwrap();
    assert_eq!(
        r.rate, None,
        "each step's rate comes from the plan, not a string"
    );
    assert_eq!((r.connections, r.duration.as_deref()), (8, Some("2s")));
    assert_eq!((r.timeout.as_str(), r.work.proto.as_str()), ("1s", "tcp"));
    assert!(!r.quiet && !r.progress && r.slo.is_none() && r.json.is_none());
    let facts =
        HostFacts::with_cores(&[0]).resolving("127.0.0.1:9", "127.0.0.1:9".parse().unwrap());
    let plan = super::plan(&r, &facts, &c).unwrap();
    assert_eq!(plan.duration_ns, 2_000_000_000);
    assert_eq!(plan.connections, 8);
    assert_eq!(plan.rate_rps, Some(1000.0));
    // A step: the same plan at its own rate, a flat shape of that rate.
    let step = plan.with_rate(2250.0);
    assert_eq!(step.rate_rps, Some(2250.0));
    assert_eq!(
        step.shape.as_ref().and_then(|s| s.constant_rps()),
        Some(2250.0)
    );
    assert_eq!((step.connections, step.duration_ns), (8, 2_000_000_000));
}

#[test]
fn the_connection_axis_climbs_and_bisects_in_whole_rooms() {
    let mut c = cfg(Growth::Factor(1.5), None);
    c.axis = Axis::Connections { room_size: 10 };
    c.start = 10.0;
    // Good up to 47 connections: the answer is 40, the last whole room below.
    let (h, end) = simulate(&c, 47.0);
    assert_eq!(end, End::Converged);
    let counts: Vec<f64> = h.iter().map(|s| s.0).collect();
    // 10 x 1.5 = 15 rounds up to 20; 30; 45 -> 50 (bad); then 40 (bad 50, good 30).
    assert_eq!(counts, [10.0, 20.0, 30.0, 50.0, 40.0], "{h:?}");
    // A factor that would not reach the next room still climbs one room.
    c.growth = Growth::Factor(1.05);
    assert_eq!(
        next_step(&c, &[(10.0, true)]),
        Next::Run {
            value: 20.0,
            phase: Phase::Climb
        }
    );
    // Neighbouring rooms leave nothing to bisect, whatever the precision.
    c.precision = PRECISION_MIN;
    assert_eq!(
        next_step(&c, &[(40.0, true), (50.0, false)]),
        Next::Done(End::Converged)
    );
    // The midpoint is a whole room: (40 + 70) / 2 = 55 -> 50.
    assert_eq!(
        next_step(&c, &[(40.0, true), (70.0, false)]),
        Next::Run {
            value: 50.0,
            phase: Phase::Bisect
        }
    );
}

#[test]
fn a_broken_step_at_a_saturated_link_or_generator_is_not_the_targets_limit() {
    use crate::outcome::Outcome;
    use StepOutcome::*;
    let link = Some(Saturation::Link {
        utilization: 0.95,
        saturated_at: 0.9,
    });
    let generator = Some(Saturation::Generator {
        busy: 0.7,
        watermark: 0.65,
    });
    assert_eq!(classify(true, false, None), SloBroken);
    assert_eq!(classify(true, false, link), LinkBound);
    assert_eq!(classify(true, false, generator), GeneratorBound);
    // Met, or invalid: the saturation does not change the outcome.
    assert_eq!(classify(true, true, link), Pass);
    assert_eq!(classify(false, false, generator), Invalid);

    let c = cfg(Growth::Factor(1.5), None);
    let t: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let r = conclude(
        &plan(),
        t,
        &c,
        vec![
            step(1000.0, 999.0, 3.0, Pass),
            step(1500.0, 1400.0, 90.0, LinkBound),
        ],
        false,
    );
    assert_eq!(
        (r.stopped_by, r.outcome()),
        (StoppedBy::Link, Outcome::Invalid)
    );
    let text = render(&r);
    assert!(
        text.contains("stopped by: link-bound: the SLO broke at 1500/s while the link carried 97% of its speed (saturated above 90%)"),
        "{text}"
    );
    assert!(text.contains("BROKEN p99<20ms (link-bound)"), "{text}");
    let r = conclude(
        &plan(),
        t,
        &c,
        vec![
            step(1000.0, 999.0, 3.0, Pass),
            step(1500.0, 1400.0, 90.0, GeneratorBound),
        ],
        false,
    );
    assert_eq!(
        (r.stopped_by, r.outcome()),
        (StoppedBy::Generator, Outcome::Invalid)
    );
    assert!(
        render(&r).contains("generator-bound: the SLO broke at 1500/s while the busiest generator core was 80% busy (watermark 65%)"),
        "{}",
        render(&r)
    );
    assert_eq!(
        serde_json::to_value(&r).unwrap()["saturation"]["kind"],
        "generator"
    );
}

/// Issue 24: with --tls each step's handshake p90 is a column of the table and part
/// of its progress line (seed 003 grades a gateway's steps by it); without TLS the
/// table has no such column.
#[test]
fn tls_steps_show_their_handshake_p90() {
    use StepOutcome::*;
    let c = cfg(Growth::Factor(1.5), None);
    let t: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let tls = |rate: f64, p90_ms: u64| Step {
        tls_handshake_p90_ns: Some(p90_ms * 1_000_000),
        ..step(rate, rate, 3.0, Pass)
    };
    let r = conclude(
        &plan(),
        t,
        &c,
        vec![tls(2000.0, 48), tls(3200.0, 92)],
        false,
    );
    let text = render(&r);
    assert!(text.contains("tls p90"), "{text}");
    let row = text
        .lines()
        .find(|l| l.contains(" 3200 "))
        .expect("the 3200/s row");
    assert!(row.contains("92.00 ms"), "{row}");
    assert!(step_line(&r.steps[0]).contains("tls handshake p90 48.00 ms"));
    let plain = conclude(&plan(), t, &c, vec![step(2000.0, 2000.0, 3.0, Pass)], false);
    assert!(!render(&plain).contains("tls p90"));
}

fn repeat(mut s: Step) -> Step {
    s.phase = Phase::Repeat;
    s
}

/// Issue 33: repeats of the decisive steps give the max safe throughput as the median
/// of the good step's runs, never move the search's own conclusions, and are called
/// unstable when runs of one step disagree.
#[test]
fn repeats_give_the_median_and_never_move_the_conclusions() {
    use StepOutcome::*;
    let c = cfg(Growth::Factor(1.5), None);
    let t: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let search = vec![
        step(1000.0, 999.0, 3.0, Pass),
        step(1500.0, 1498.0, 3.1, Pass),
        step(2250.0, 2000.0, 90.0, SloBroken),
    ];
    let mut steps = search.clone();
    steps.extend([
        repeat(step(1500.0, 1490.0, 3.4, Pass)),
        repeat(step(2250.0, 2010.0, 80.0, SloBroken)),
        repeat(step(1500.0, 1496.0, 3.2, Pass)),
        repeat(step(2250.0, 1990.0, 95.0, SloBroken)),
    ]);
    let r = conclude(&plan(), t, &c, steps.clone(), false);
    let rep = r.repeats.as_ref().unwrap();
    assert_eq!(
        (rep.good_value, rep.good.runs, rep.good.held),
        (1500.0, 3, 3)
    );
    assert_eq!(
        (rep.bad_value, rep.bad.runs, rep.bad.held),
        (Some(2250.0), 3, 0)
    );
    assert!(rep.stable);
    assert_eq!(r.max_safe_throughput_rps, Some(1496.0));
    assert_eq!(
        (rep.achieved_rps.min, rep.achieved_rps.max),
        (1490.0, 1498.0)
    );
    assert_eq!(r.first_bad_rps, Some(2250.0));
    let text = render(&r);
    assert!(
        text.contains("repeats: 1500/s good in 3 of 3 runs"),
        "{text}"
    );
    assert!(text.contains(": stable"), "{text}");
    // A repeat of the bad step met the SLO: it stays the first bad step, and the
    // result is unstable.
    steps[4] = repeat(step(2250.0, 2240.0, 4.0, Pass));
    let r = conclude(&plan(), t, &c, steps, false);
    assert_eq!(r.first_bad_rps, Some(2250.0));
    assert_eq!(r.max_safe_intended_rps, Some(1500.0));
    let rep = r.repeats.as_ref().unwrap();
    assert_eq!(rep.bad.held, 1);
    assert!(!rep.stable);
    assert!(render(&r).contains("UNSTABLE"), "{}", render(&r));
    // Without repeats, no repeats object.
    assert!(conclude(&plan(), t, &c, search, false).repeats.is_none());
}
