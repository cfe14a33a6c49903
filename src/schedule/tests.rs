//! Shape tests: every shape's integrated timetable holds the spec's per-second counts
//! within 1%, bad specs give one clear line, and nothing panics on any input.

use super::*;
use std::io::Write;

const S: u64 = 1_000_000_000;

/// Midpoint-rule integral of `rate` over second `s` (2000 slices): the spec's count,
/// computed without the shape's own pieces.
fn spec_count(rate: &dyn Fn(f64) -> f64, s: u64) -> f64 {
    let n = 2000;
    (0..n)
        .map(|i| rate(s as f64 + (i as f64 + 0.5) / n as f64))
        .sum::<f64>()
        / n as f64
}

/// 1% of the spec's count, but at least one request (the timetable is integral).
fn close(count: f64, expected: f64) -> bool {
    (count - expected).abs() <= (0.01 * expected).max(1.0)
}

/// Per-second counts of `workers` constant-arrival shards from `count_before`.
fn counts_by_count_before(shape: &RateShape, workers: usize, seconds: u64) -> Vec<u64> {
    let shards: Vec<Arrivals> = (0..workers)
        .map(|w| Arrivals::new(ArrivalKind::Constant, shape, workers, w, 1))
        .collect();
    let before = |t: u64| -> u64 { shards.iter().map(|a| a.count_before(t).unwrap()).sum() };
    (0..seconds)
        .map(|s| before((s + 1) * S) - before(s * S))
        .collect()
}

/// Per-second counts of `workers` shards from walking `due_ns` itself.
fn counts_by_walking(shape: &RateShape, workers: usize, seconds: u64) -> Vec<u64> {
    let mut counts = vec![0u64; seconds as usize];
    for w in 0..workers {
        let a = Arrivals::new(ArrivalKind::Constant, shape, workers, w, 1);
        let mut k = 0;
        loop {
            let t = a.due_ns(k);
            if t >= seconds * S {
                break;
            }
            counts[(t / S) as usize] += 1;
            k += 1;
        }
    }
    counts
}

/// Checks both count methods, with 1 and 3 workers, against `rate`.
fn check_shape(spec: &str, seconds: u64, walk: bool, rate: &dyn Fn(f64) -> f64) {
    let shape = shape_of(spec, seconds * S);
    for workers in [1, 3] {
        let mut methods = vec![(
            "count_before",
            counts_by_count_before(&shape, workers, seconds),
        )];
        if walk {
            methods.push(("due_ns", counts_by_walking(&shape, workers, seconds)));
        }
        for (method, counts) in methods {
            for (s, &c) in counts.iter().enumerate() {
                let e = spec_count(rate, s as u64);
                assert!(
                    close(c as f64, e),
                    "{spec} ({method}, {workers} workers): second {s} has {c}, spec {e:.1}"
                );
            }
        }
    }
    // The intended rate the report shows is the spec's.
    for s in 0..seconds {
        let t = s as f64 + 0.37;
        let (got, want) = (shape.rate_at(t * 1e9), rate(t));
        assert!(
            (got - want).abs() <= 1e-6 * want.max(1.0),
            "{spec} rate_at({t}) {got} vs {want}"
        );
        let e = shape.expected_between(s as f64 * 1e9, (s + 1) as f64 * 1e9);
        assert!(
            close(e, spec_count(rate, s)),
            "{spec} second {s}: expected_between {e}"
        );
    }
}

#[test]
fn constant_shape_counts() {
    check_shape("5000", 10, true, &|_| 5000.0);
    assert_eq!(shape_of("5000", 0).constant_rps(), Some(5000.0));
}

#[test]
fn step_shape_counts() {
    // The spec, 1000 -> 50000 by 1000 every 30 s, then held: 1560 s in all.
    check_shape("step:1000..50000+1000/30s", 1560, false, &|t| {
        (1000.0 + (t / 30.0).floor() * 1000.0).min(50_000.0)
    });
    // A short one walked request by request; 4500 is not a multiple, the last step is
    // clamped to the end.
    check_shape("step:1000..4500+1000/3s", 15, true, &|t| {
        (1000.0 + (t / 3.0).floor() * 1000.0).min(4500.0)
    });
}

#[test]
fn ramp_shape_counts() {
    check_shape("ramp:0..50000/60s", 90, true, &|t| {
        50_000.0 * (t / 60.0).min(1.0)
    });
    check_shape("ramp:8000..2000/20s", 30, true, &|t| {
        8000.0 - 6000.0 * (t / 20.0).min(1.0)
    });
}

#[test]
fn spike_shape_counts() {
    check_shape("spike:base=1000,peak=10000,at=30s,for=5s", 60, true, &|t| {
        if (30.0..35.0).contains(&t) {
            10_000.0
        } else {
            1000.0
        }
    });
}

#[test]
fn burst_shape_counts() {
    // on 200 ms at 5000/s, off 2 s at 500/s, starting with on.
    let spec = "burst:base=500,peak=5000,on=200ms,off=2s";
    check_shape(spec, 66, true, &|t| {
        if t % 2.2 < 0.2 { 5000.0 } else { 500.0 }
    });
    // Counts per phase, to the request: 1000 in each burst, 1000 in each pause.
    let shape = shape_of(spec, 66 * S);
    let a = Arrivals::new(ArrivalKind::Constant, &shape, 1, 0, 1);
    let Some(before) = a.count_before(22 * S / 10) else {
        panic!()
    };
    assert_eq!(before, 2000);
    assert_eq!(a.count_before(S / 5), Some(1000));
}

#[test]
fn chaos_shape_counts() {
    let spec = "chaos:base=2000,amp=0.5";
    let shape = shape_of(spec, 120 * S);
    let rate = |t: f64| shape.rate_at(t * 1e9);
    check_shape(spec, 120, true, &rate);
}

#[test]
fn file_shape_counts() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        f,
        "time_s,rate\n# warm up\n5,1000\n10,5000\n\n10,2000\n30,2000\n40,0"
    )
    .unwrap();
    let spec = format!("file:{}", f.path().display());
    check_shape(&spec, 50, true, &|t| match t {
        t if t < 5.0 => 1000.0,
        t if t < 10.0 => 1000.0 + 800.0 * (t - 5.0),
        t if t < 30.0 => 2000.0,
        t if t < 40.0 => 2000.0 - 200.0 * (t - 30.0),
        _ => 0.0,
    });
}

#[test]
fn chaos_is_deterministic_bounded_and_wanders() {
    let d = 300 * S;
    let a = shape_of("chaos:base=2000,amp=0.5", d);
    let b = shape_of("chaos:base=2000,amp=0.5", d);
    let other = match parse_rate_spec("chaos:base=2000,amp=0.5", d, 2) {
        Ok(RateSpec::Shaped(s)) => s,
        e => panic!("{e:?}"),
    };
    let mut differs = false;
    let (mut low, mut high) = (0, 0);
    for ms in (0..300_000u64).step_by(10) {
        let t = (ms * 1_000_000) as f64;
        let r = a.rate_at(t);
        assert_eq!(r, b.rate_at(t), "same seed, same rate");
        differs |= r != other.rate_at(t);
        assert!((1000.0 - 1e-9..=3000.0 + 1e-9).contains(&r), "{r}");
        if r < 1800.0 {
            low += 1;
        }
        if r > 2200.0 {
            high += 1;
        }
    }
    assert!(differs, "another seed gives another trajectory");
    // The Lorenz x visits both lobes: well above and well below base, often.
    assert!(low > 3000 && high > 3000, "low {low} high {high}");
    // Mean near base (the attractor is symmetric), and no period of a few seconds:
    // the rate one 1 s, 2 s, 5 s later is not the same curve.
    let mean = a.mean_rps(d);
    assert!((1700.0..2300.0).contains(&mean), "mean {mean}");
    for lag_s in [1.0, 2.0, 5.0] {
        let diff: f64 = (0..2000)
            .map(|i| {
                let t = i as f64 * 0.1e9;
                (a.rate_at(t) - a.rate_at(t + lag_s * 1e9)).abs()
            })
            .sum::<f64>()
            / 2000.0;
        assert!(diff > 50.0, "lag {lag_s}s: mean difference {diff}");
    }
}

#[test]
fn chaos_unit_slows_the_attractor() {
    // With 5 s per Lorenz time unit the rate 5 s in equals the default's 1 s in (up to
    // the tables' different sample grids and RK4 steps).
    let fast = shape_of("chaos:base=2000,amp=0.5", 60 * S);
    let slow = shape_of("chaos:base=2000,amp=0.5,unit=5s", 60 * S);
    for s in [1.0, 3.0, 7.0] {
        let (a, b) = (fast.rate_at(s * 1e9), slow.rate_at(5.0 * s * 1e9));
        assert!((a - b).abs() < 1e-3 * a, "{s}: {a} vs {b}");
    }
}

#[test]
fn lorenz_rk4_converges() {
    // One Lorenz time unit with steps of 0.01 and of 0.005 agrees to 1e-4 (x is about
    // ±20; the rate resolves x/20): RK4 error is far below what the rate can show.
    let coarse = lorenz_x(5, 101, 0.01);
    let fine = lorenz_x(5, 201, 0.005);
    assert!(
        (coarse[100] - fine[200]).abs() < 1e-4,
        "{} {}",
        coarse[100],
        fine[200]
    );
    assert!(coarse.iter().all(|x| x.abs() < 30.0));
}

#[test]
fn long_chaos_runs_keep_the_table_bounded() {
    let shape = shape_of("chaos:base=100,amp=1", 86_400 * S);
    assert!(shape.rate_at(86_000.0 * 1e9) <= 200.0);
    assert!(shape.cumulative(86_400.0 * 1e9) > 0.0);
}

#[test]
fn inverse_undoes_cumulative() {
    for spec in [
        "777",
        "step:0..900+300/2s",
        "ramp:0..50000/60s",
        "spike:base=10,peak=10000,at=3s,for=1s",
        "burst:base=0,peak=5000,on=200ms,off=2s",
        "chaos:base=2000,amp=1",
    ] {
        let shape = shape_of(spec, 60 * S);
        let mut cursor = 0;
        for i in 1..2000 {
            let n = i as f64 * 37.5;
            let t = shape.inverse_from(n, &mut cursor);
            assert!(t.is_finite(), "{spec} {n}");
            let back = shape.cumulative(t);
            assert!(
                (back - n).abs() < 1e-6 * n.max(1.0),
                "{spec}: Λ(Λ⁻¹({n})) = {back}"
            );
            assert_eq!(t, shape.inverse(n), "{spec}: the cursor changes nothing");
        }
    }
}

/// Found by fuzz/fuzz_targets/rate_file.rs: below ~1e-145 requests/s the rate per ns
/// squares to 0 in f64, and Λ⁻¹ came out twice too late (a flat piece) or never (a
/// falling one). Each `file:` shape is walked instant -> Λ -> Λ⁻¹ and must come back.
#[test]
fn tiny_rates_keep_their_timetable() {
    for text in [
        "0,1e-231",
        "0,1e-160\n1,0",
        "0,1e-200\n1,3e-200",
        "0,1e-290",
    ] {
        let shape = parse_rate_file(text, "file:tiny").unwrap();
        for t in [0.25, 0.5, 0.75].map(|s| s * S as f64) {
            let n = shape.cumulative(t);
            assert!(n > 0.0, "{text:?}: Λ({t}) = {n}");
            let back = shape.inverse(n);
            assert!(
                (back - t).abs() <= 1e-9 * t,
                "{text:?}: Λ⁻¹(Λ({t})) = {back}"
            );
        }
    }
}

#[test]
fn burst_with_zero_base_sends_nothing_between_bursts() {
    // 1000 requests per burst and none between. Request n is due when Λ reaches n, so
    // request 0 opens the first burst at 0 and request 1000 closes it at 200 ms; the
    // second burst holds requests 1001..=2000, from 2.2002 s to 2.4 s.
    let shape = shape_of("burst:base=0,peak=5000,on=200ms,off=2s", 60 * S);
    let a = Arrivals::new(ArrivalKind::Constant, &shape, 1, 0, 1);
    assert_eq!(a.due_ns(1000), 200_000_000);
    assert_eq!(a.due_ns(1001), 2_200_200_000);
    assert_eq!(a.due_ns(2000), 2_400_000_000);
    assert_eq!(a.count_before(2_200_000_000), Some(1001));
    assert_eq!(a.count_before(2_200_000_001), Some(1001));
}

#[test]
fn max_is_kept() {
    assert!(matches!(parse_rate_spec("max", S, 1), Ok(RateSpec::Max)));
}

#[test]
fn peak_and_mean() {
    assert_eq!(
        shape_of("spike:base=1000,peak=10000,at=30s,for=5s", 60 * S).peak_rps(),
        10_000.0
    );
    assert_eq!(shape_of("ramp:0..50000/60s", 60 * S).peak_rps(), 50_000.0);
    assert!((shape_of("ramp:0..50000/60s", 60 * S).mean_rps(60 * S) - 25_000.0).abs() < 1e-6);
    assert!(
        (shape_of("burst:base=500,peak=5000,on=200ms,off=2s", 60 * S).peak_rps() - 5000.0).abs()
            < 1e-9
    );
}

#[test]
fn arrivals_pick_the_fast_path_for_flat_rates() {
    let flat = shape_of("5000", S);
    assert!(matches!(
        Arrivals::new(ArrivalKind::Constant, &flat, 2, 1, 1),
        Arrivals::Constant(_)
    ));
    let ramp = shape_of("ramp:0..5/1s", S);
    assert!(matches!(
        Arrivals::new(ArrivalKind::Constant, &ramp, 2, 1, 1),
        Arrivals::Paced(_)
    ));
    let p = Arrivals::new(ArrivalKind::Poisson, &flat, 2, 1, 1);
    assert!(matches!(p, Arrivals::Poisson(_)));
    assert_eq!(p.count_before(S), None);
    // Out-of-range shards are clamped, not a panic.
    let odd = Arrivals::new(ArrivalKind::Constant, &ramp, 0, 9, 1);
    assert_eq!(odd.global_seq(4), 4);
    assert_eq!("poisson".parse::<ArrivalKind>(), Ok(ArrivalKind::Poisson));
    assert!(
        "uniform"
            .parse::<ArrivalKind>()
            .unwrap_err()
            .contains("constant or poisson")
    );
}

fn error_of(spec: &str) -> String {
    match parse_rate_spec(spec, 60 * S, 1) {
        Ok(s) => panic!("{spec} parsed: {s:?}"),
        Err(e) => {
            assert!(!e.contains('\n'), "one line: {e:?}");
            e
        }
    }
}

#[test]
fn bad_specs_say_what_is_wrong() {
    let cases: &[(&str, &str)] = &[
        ("abc", "expected requests per second or max"),
        (
            "0",
            "must be greater than 0 and at most 100000000 requests/s, got 0",
        ),
        ("-5", "must be greater than 0 and at most"),
        ("1e12", "at most 100000000 requests/s, got 1000000000000"),
        ("wobble:3", "unknown shape \"wobble\""),
        ("step:1000..500+100/1s", "step: end 500 is below start 1000"),
        (
            "step:1000..5000/1s",
            "step: expected step:START..END+INCREMENT/HOLD",
        ),
        (
            "step:1000..5000+0/1s",
            "step: the increment must be greater than 0",
        ),
        ("step:1..100000000+1/1s", "steps, at most"),
        ("step:-1..5+1/1s", "step: start -1 is negative"),
        ("step:1..5+1/0s", "step: hold 0s must be longer than 0"),
        (
            "step:1..5+1/soon",
            "step: hold: expected a duration such as 10s or 500ms, got \"soon\"",
        ),
        ("ramp:0..100/0s", "ramp: duration 0s must be longer than 0"),
        ("ramp:0..x/1s", "ramp: end \"x\" is not a rate"),
        ("ramp:0..0/10s", "ramp: the rate is 0 everywhere"),
        ("ramp:100", "ramp: expected ramp:START..END/DURATION"),
        ("spike:base=1000,peak=10000,at=30s", "spike: missing for="),
        (
            "spike:base=-1,peak=10,at=1s,for=1s",
            "spike: base -1 is negative",
        ),
        (
            "spike:base=1,peak=10,at=1s,for=1s,x=2",
            "spike: unknown key \"x\" (expected base, peak, at, for)",
        ),
        (
            "spike:base=1,base=2,peak=10,at=1s,for=1s",
            "spike: base= given twice",
        ),
        (
            "spike:base=1,peak=10,at=90s,for=1s",
            "spike: at=90s is not before the end of the run (1m)",
        ),
        ("spike:base,peak=10", "spike: expected key=value"),
        (
            "burst:base=1,peak=2,on=0ms,off=1s",
            "burst: on 0ms must be longer than 0",
        ),
        (
            "burst:base=0,peak=0,on=1s,off=1s",
            "burst: the rate is 0 everywhere",
        ),
        ("burst:base=1,peak=2,on=1s", "burst: missing off="),
        (
            "chaos:base=100,amp=2",
            "chaos: amp=2 must be between 0 and 1",
        ),
        ("chaos:base=100,amp=half", "chaos: amp=half is not a number"),
        ("chaos:amp=0.5", "chaos: missing base="),
        ("file:", "file: expected file:PATH"),
        (
            "file:/nonexistent/rates.csv",
            "file: cannot read /nonexistent/rates.csv",
        ),
    ];
    for (spec, needle) in cases {
        let e = error_of(spec);
        assert!(e.contains(needle), "{spec}: expected {needle:?} in {e:?}");
    }
}

#[test]
fn bad_rate_files_name_the_line() {
    let cases: &[(&str, &str)] = &[
        (
            "time_s,rate\n0,100\nten,200\n",
            "line 3: expected time_s,rate, got \"ten,200\"",
        ),
        ("0,100\n5,-2\n", "line 2: rate -2 is negative"),
        (
            "0,100\n5,200\n4,300\n",
            "line 3: time 4 is before the previous row's 5",
        ),
        (
            "-1,100\n",
            "line 1: time -1 must be a number of seconds >= 0",
        ),
        ("0;100\n", "line 1: expected time_s,rate"),
        ("# nothing\n\n", "has no time_s,rate rows"),
        ("0,1e12\n", "line 1: rate 1000000000000 exceeds"),
    ];
    for (text, needle) in cases {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        let path = f.path().display().to_string();
        let e = error_of(&format!("file:{path}"));
        assert!(e.starts_with(&format!("file: {path} ")), "{e}");
        assert!(e.contains(needle), "{text:?}: expected {needle:?} in {e:?}");
    }
}

proptest::proptest! {
    #[test]
    fn no_spec_panics(body in "[a-z0-9.=,:+/ -]{0,40}", shape in 0usize..7) {
        let prefix = ["", "step:", "ramp:", "spike:", "burst:", "chaos:", "file:"][shape];
        let spec = format!("{prefix}{body}");
        if let Ok(RateSpec::Shaped(s)) = parse_rate_spec(&spec, 10 * S, 1) {
            // Whatever parsed evaluates without panicking, too.
            let a = Arrivals::new(ArrivalKind::Poisson, &s, 2, 1, 1);
            let _ = (a.due_ns(0), a.due_ns(10), s.rate_at(1e9), s.inverse(1e300));
            let c = Arrivals::new(ArrivalKind::Constant, &s, 2, 1, 1);
            let _ = (c.due_ns(u64::MAX), c.count_before(10 * S));
        }
    }

    #[test]
    fn step_inverse_is_monotone(start in 0u32..5000, span in 0u32..5000, inc in 1u32..3000, hold_ms in 1u64..5000) {
        let spec = format!("step:{start}..{}+{inc}/{hold_ms}ms", start + span);
        if let Ok(RateSpec::Shaped(s)) = parse_rate_spec(&spec, 10 * S, 1) {
            let p = Paced::new(s, 1, 0);
            let mut last = 0;
            for k in 0..500 {
                let t = p.due_ns(k);
                proptest::prop_assert!(t >= last);
                last = t;
            }
        }
    }
}
