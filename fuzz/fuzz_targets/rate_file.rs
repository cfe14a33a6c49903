//! The `--rate file:` parser (src/schedule/shapes.rs): any text as a rate file, then the
//! timetable built from it. Accepted rows have finite times >= 0 that never decrease and
//! rates in [0, RATE_RPS_MAX]. The shape integrates the rows (its count at the last row
//! is the trapezoid sum of the file), never counts backwards, peaks at the highest row
//! rate, and its inverse lands where the count reaches n whatever cursor the search
//! starts from. The evenly paced timetable of 1 to 4 workers never goes back in time
//! and agrees with its own `count_before`, as the engine relies on.
#![no_main]
use blaster::limits::RATE_RPS_MAX;
use blaster::schedule::{Paced, Schedule, parse_rate_csv, parse_rate_file};
use libfuzzer_sys::fuzz_target;

const NS: f64 = 1e9;

/// `a` and `b` agree to 1e-9 of `scale` (plus a thousandth of a request).
fn near(a: f64, b: f64, scale: f64) -> bool {
    (a - b).abs() <= 1e-9 * scale.abs() + 1e-3
}

fuzz_target!(|data: &[u8]| {
    // Parameter bytes first (workers, cursor), then the file.
    let (params, file) = data.split_at(data.len().min(2));
    let workers = 1 + params.first().copied().unwrap_or(0) as usize % 4;
    let cursor = params.get(1).copied().unwrap_or(0) as usize;
    let Ok(text) = std::str::from_utf8(file) else {
        return;
    };
    let rows = match parse_rate_csv(text) {
        Ok(rows) => rows,
        Err(e) => {
            assert!(
                !e.is_empty() && !e.contains('\n'),
                "error is not one line: {e:?}"
            );
            assert!(parse_rate_file(text, "file:fuzz").is_err());
            return;
        }
    };
    assert!(!rows.is_empty());
    for (i, &(t, r)) in rows.iter().enumerate() {
        assert!(
            t.is_finite() && t >= 0.0 && t * NS <= u64::MAX as f64,
            "time {t}"
        );
        assert!((0.0..=RATE_RPS_MAX).contains(&r), "rate {r}");
        assert!(i == 0 || rows[i - 1].0 <= t, "times go back at row {i}");
    }
    let shape = parse_rate_file(text, "file:fuzz").expect("rows parsed");
    // The highest rate a row holds for some time: before the first row, on either side
    // of a row (a ramp to or from it), or after the last; a row between two rows at the
    // same time (a step through it) holds for no time at all.
    let n = rows.len();
    let holds = |i: usize| {
        let t = rows[i].0;
        (i == 0 && t > 0.0)
            || (i > 0 && rows[i - 1].0 < t)
            || (i + 1 < n && t < rows[i + 1].0)
            || i + 1 == n
    };
    let peak_row = (0..n)
        .filter(|&i| holds(i))
        .map(|i| rows[i].1)
        .fold(0.0, f64::max);
    assert!(
        near(shape.peak_rps(), peak_row, peak_row),
        "peak {}",
        shape.peak_rps()
    );
    if peak_row <= 0.0 {
        return; // parse_rate_spec rejects a rate that is 0 everywhere
    }
    if rows
        .iter()
        .any(|r| r.1 > 0.0 && r.1 / NS < f64::MIN_POSITIVE)
    {
        return; // per ns the rate is subnormal: f64 keeps it to a few digits only
    }

    // Λ at each row's time against the file's own integral.
    let (t_first, r_first) = rows[0];
    let mut expected = t_first * r_first;
    let mut last = 0.0;
    for (i, &(t, r)) in rows.iter().enumerate() {
        if i > 0 {
            let (t0, r0) = rows[i - 1];
            expected += (t - t0) * (r0 + r) / 2.0;
        }
        let at = shape.cumulative(t * NS);
        let scale = expected + peak_row * t;
        assert!(
            near(at, expected, scale),
            "row {i}: count {at}, file says {expected}"
        );
        assert!(
            at >= last - 1e-9 * scale - 1e-3,
            "count went back at row {i}"
        );
        last = at;
    }

    // The inverse: from any cursor the same answer, and the count reaches n there.
    let total = last;
    for n in [0.5, 1.0, 2.0, total / 3.0, total / 2.0, total, total + 1.0] {
        let t = shape.inverse(n);
        let mut c = cursor;
        assert_eq!(
            shape.inverse_from(n, &mut c).to_bits(),
            t.to_bits(),
            "cursor {cursor}"
        );
        if t.is_finite() && n > 0.0 {
            let scale = n + peak_row * t / NS;
            assert!(
                near(shape.cumulative(t), n, scale),
                "Λ(Λ⁻¹({n})) = {}",
                shape.cumulative(t)
            );
        }
    }

    // Each worker's timetable, as the engine walks it.
    for w in 0..workers {
        let p = Paced::new(shape.clone(), workers, w);
        let mut prev = 0;
        for k in 0..64 {
            let due = p.due_ns(k);
            assert!(due >= prev, "worker {w}: request {k} due before {}", k - 1);
            if due == u64::MAX {
                break; // never: the rate fell to 0 for good
            }
            assert!(p.count_before(due) <= k, "worker {w}: count_before({due})");
            assert!(
                p.count_before(due + 1) > k,
                "worker {w}: count_before({due}+1)"
            );
            prev = due;
        }
    }
});
