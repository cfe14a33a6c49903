//! Leaf helpers shared by every layer: the human forms of durations, rates, counts,
//! amounts and core lists, and the parsers of values given in units. Nothing here imports
//! another module of the crate, so anything may use it.

/// The one duration grammar of every flag and spec (`--duration`, `--timeout`,
/// `--backoff`, `--rate` shapes, `--slo`, ...): humantime's, e.g. `10s`, `500ms`,
/// `1.5ms`, `250us` (or `µs`), `800ns`, `2m`, `1h 30m`. Units are required; fractions
/// are exact down to the nanosecond (a finer fraction is an error, not a rounding).
/// Bounds are the caller's: each flag has its own. The error is one line without the
/// flag (the caller names it).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|_| format!("expected a duration such as 10s or 500ms, got {s:?}"))
}

/// `D`, `D±J` or `D+-J` (`30s±5s`): an age and the jitter around it, in ns. The age
/// is more than 0, the jitter below it (every drawn age stays above 0).
pub fn parse_age_jitter(s: &str) -> Result<(u64, u64), String> {
    let (age, jitter) = match s.split_once('±').or_else(|| s.split_once("+-")) {
        Some((a, j)) => (a, Some(j)),
        None => (s, None),
    };
    let ns = |d: &str| parse_duration(d).map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let age = ns(age)?;
    let jitter = jitter.map(ns).transpose()?.unwrap_or(0);
    if age == 0 || jitter >= age {
        return Err(format!(
            "expected an age above 0 and a jitter below it (30s or 30s±5s), got {s:?}"
        ));
    }
    Ok((age, jitter))
}

/// The one check of a rate given on the command line: greater than 0 and at most
/// `max` (so neither NaN nor infinite), counted in `unit` (`requests/s`). The error is
/// one line without the flag (the caller names it).
pub fn check_rate(r: f64, max: f64, unit: &str) -> Result<f64, String> {
    if r > 0.0 && r <= max {
        return Ok(r);
    }
    Err(format!(
        "must be greater than 0 and at most {max} {unit}, got {r}"
    ))
}

/// Human form of a nanosecond count: `850 ns`, `12.3 us`, `4.56 ms`, `1.20 s`.
pub fn fmt_ns(ns: u64) -> String {
    let v = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} us", v / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", v / 1e6)
    } else {
        format!("{:.2} s", v / 1e9)
    }
}

/// The one check of a confidence level (`--confidence`): strictly between 0 and 1 (so
/// not NaN). The error is one line without the flag.
pub fn check_level(v: f64) -> Result<f64, String> {
    if v > 0.0 && v < 1.0 {
        return Ok(v);
    }
    Err(format!(
        "a confidence level is strictly between 0 and 1 (e.g. 0.95), got {v}"
    ))
}

/// A quantile as a percentile's name: 0.5 -> `50`, 0.999 -> `99.9`, 0.9999 -> `99.99`.
pub fn fmt_quantile(q: f64) -> String {
    let s = format!("{:.4}", q * 100.0);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// An interval in the unit `fmt_ns` would give `point`: `[1.20, 1.27]` for a point of
/// 1.23 ms, so the interval reads beside it without repeating the unit.
pub fn fmt_ns_interval(point: u64, low: u64, high: u64) -> String {
    let (div, digits) = if point < 1_000 {
        (1.0, 0)
    } else if point < 1_000_000 {
        (1e3, 1)
    } else if point < 1_000_000_000 {
        (1e6, 2)
    } else {
        (1e9, 2)
    };
    format!(
        "[{:.*}, {:.*}]",
        digits,
        low as f64 / div,
        digits,
        high as f64 / div
    )
}

/// Human form of a rate: `20000`, `183.4k`, `1.20M`.
pub fn fmt_rate(r: f64) -> String {
    if r < 10_000.0 {
        format!("{r:.0}")
    } else if r < 1_000_000.0 {
        format!("{:.1}k", r / 1e3)
    } else {
        format!("{:.2}M", r / 1e6)
    }
}

/// Parses a core list as `--cores` and sysfs (`/sys/devices/system/cpu/online`) write
/// it: comma-separated items, each a core `3` or an inclusive range `4-11`, white
/// space around items and numbers ignored (`0, 2, 4-6`, a trailing newline). Returns
/// the ranges in the order given, without expanding them, so `0-99999999999` costs
/// nothing; duplicates and whether the cores exist are the caller's checks.
pub fn parse_core_list(s: &str) -> Result<Vec<std::ops::RangeInclusive<usize>>, String> {
    let bad = || format!("expected a core list such as 3, 4-11 or 0,2,4-6, got {s:?}");
    let num = |t: &str| t.trim().parse::<usize>().map_err(|_| bad());
    s.trim()
        .split(',')
        .map(|item| {
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => (num(item)?, num(item)?),
            };
            if lo > hi {
                return Err(bad());
            }
            Ok(lo..=hi)
        })
        .collect()
}

/// `0-3,6` style rendering of a core list.
pub fn list_cores(cores: &[usize]) -> String {
    let mut sorted = cores.to_vec();
    sorted.sort_unstable();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// `25gbit`, `200mbit`, `10g`, `1000m`, `100000000` (bits per second) -> bits/s.
pub fn parse_link_speed(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("bps")
        .or_else(|| t.strip_suffix("bit"))
        .unwrap_or(&t);
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k')) => (&t[..i], 1e3),
        Some((i, 'm')) => (&t[..i], 1e6),
        Some((i, 'g')) => (&t[..i], 1e9),
        Some((i, 't')) => (&t[..i], 1e12),
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok((v * mult) as u64),
        _ => Err(format!(
            "expected a link speed such as 25gbit, 200mbit or 10g, got {s:?}"
        )),
    }
}

/// `4,000,000`.
pub fn fmt_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An amount at the precision that matters: `157`, `3.5`, `0.25`.
pub fn fmt_amount(v: f64) -> String {
    let a = v.abs();
    if a >= 10.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A large rate: `2.4M`, `310k`, `950`; `3.1e15` past a billion.
pub fn fmt_big(v: f64) -> String {
    if v >= 1e9 {
        format!("{v:.2e}")
    } else if v >= 1e6 {
        format!("{}M", fmt_amount(v / 1e6))
    } else if v >= 1e4 {
        format!("{}k", fmt_amount(v / 1e3))
    } else {
        fmt_amount(v)
    }
}

/// A number as the user may have typed it: `0.65`, `200000`, and `1e-300` rather than
/// three hundred digits.
pub fn fmt_input(v: f64) -> String {
    let a = v.abs();
    if v != 0.0 && a.is_finite() && !(1e-4..1e15).contains(&a) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// A number without a useless `.0`, as `--rate` and the shapes take it: `1000`, `0.5`.
pub fn fmt_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// A nanosecond count as humantime writes a duration: `1s 500ms`, `2m`.
pub fn fmt_duration(ns: u64) -> String {
    humantime::format_duration(std::time::Duration::from_nanos(ns)).to_string()
}

/// Seconds with one decimal, or hours beyond an hour: `12.5 s`, `1.5 h`.
pub fn fmt_s(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{s:.1} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_age_with_and_without_jitter() {
        assert_eq!(parse_age_jitter("30s"), Ok((30_000_000_000, 0)));
        assert_eq!(
            parse_age_jitter("30s±5s"),
            Ok((30_000_000_000, 5_000_000_000))
        );
        assert_eq!(
            parse_age_jitter("200ms+-50ms"),
            Ok((200_000_000, 50_000_000))
        );
        for bad in ["0s", "1s±1s", "1s±2s", "x", "1s±", "±1s"] {
            assert!(parse_age_jitter(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_units() {
        assert_eq!(fmt_ns(850), "850 ns");
        assert_eq!(fmt_ns(12_345), "12.3 us");
        assert_eq!(fmt_ns(4_560_000), "4.56 ms");
        assert_eq!(fmt_ns(1_200_000_000), "1.20 s");
        assert_eq!(fmt_rate(20_000.0), "20.0k");
        assert_eq!(fmt_rate(1_200_000.0), "1.20M");
    }

    #[test]
    fn durations_have_one_grammar() {
        let ns = |s: &str| parse_duration(s).map(|d| d.as_nanos());
        assert_eq!(ns("10s"), Ok(10_000_000_000));
        assert_eq!(ns(" 500ms "), Ok(500_000_000));
        assert_eq!(ns("1.5ms"), Ok(1_500_000));
        assert_eq!(ns("250us"), Ok(250_000));
        assert_eq!(ns("250µs"), Ok(250_000));
        assert_eq!(ns("800ns"), Ok(800));
        assert_eq!(ns("2m"), Ok(120_000_000_000));
        assert_eq!(ns("1h 30m"), Ok(5_400_000_000_000));
        for bad in [
            "", "20", "ms", "fast", "-1ms", "1.2.3ms", "1.5ns", "p99<5ms",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert_eq!(
                e,
                format!("expected a duration such as 10s or 500ms, got {bad:?}")
            );
        }
    }

    #[test]
    fn rates_are_positive_finite_and_bounded() {
        assert_eq!(check_rate(1.0, 1e8, "requests/s"), Ok(1.0));
        assert_eq!(check_rate(1e8, 1e8, "requests/s"), Ok(1e8));
        assert_eq!(
            check_rate(0.0, 1e8, "requests/s"),
            Err("must be greater than 0 and at most 100000000 requests/s, got 0".into())
        );
        for bad in [-5.0, -0.0, f64::NAN, f64::INFINITY, 1e8 + 1.0] {
            let e = check_rate(bad, 1e8, "requests/s").unwrap_err();
            assert!(e.ends_with(&format!("got {bad}")), "{e}");
        }
    }

    #[test]
    fn core_lists_parse_as_ranges_and_render_back() {
        assert_eq!(parse_core_list("3"), Ok(vec![3..=3]));
        assert_eq!(parse_core_list("0-2,5\n"), Ok(vec![0..=2, 5..=5]));
        assert_eq!(
            parse_core_list(" 0, 2 ,4 - 6"),
            Ok(vec![0..=0, 2..=2, 4..=6])
        );
        assert_eq!(
            parse_core_list("0-99999999999"),
            Ok(vec![0..=99_999_999_999])
        );
        for bad in ["", "3-1", "a", "1,,2", "1,", "-1", "1-", "1-2-3", "0x3"] {
            assert_eq!(
                parse_core_list(bad),
                Err(format!(
                    "expected a core list such as 3, 4-11 or 0,2,4-6, got {bad:?}"
                )),
            );
        }
        assert_eq!(list_cores(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(list_cores(&[8, 7, 0]), "0,7-8");
    }

    #[test]
    fn link_speeds_parse_with_units() {
        assert_eq!(parse_link_speed("25gbit"), Ok(25_000_000_000));
        assert_eq!(parse_link_speed("200mbit"), Ok(200_000_000));
        assert_eq!(parse_link_speed("10G"), Ok(10_000_000_000));
        assert_eq!(parse_link_speed("1000000"), Ok(1_000_000));
        assert!(parse_link_speed("fast").is_err());
        assert!(parse_link_speed("0gbit").is_err());
        assert!(parse_link_speed("-5m").is_err());
    }

    #[test]
    fn counts_amounts_and_numbers() {
        assert_eq!(fmt_count(4_000_000), "4,000,000");
        assert_eq!(fmt_count(999), "999");
        assert_eq!(fmt_count(1000), "1,000");
        assert_eq!(fmt_amount(157.44), "157");
        assert_eq!(fmt_amount(3.51), "3.5");
        assert_eq!(fmt_amount(0.254), "0.25");
        assert_eq!(fmt_amount(12.0), "12");
        assert_eq!(fmt_big(2_400_000.0), "2.4M");
        assert_eq!(fmt_number(1000.0), "1000");
        assert_eq!(fmt_number(0.5), "0.5");
        assert_eq!(fmt_number(120_000_000.0), "120000000");
        assert_eq!(fmt_input(1e-300), "1e-300");
        assert_eq!(fmt_s(90 * 60 * 1_000_000_000), "1.5 h");
        assert_eq!(fmt_duration(1_500_000_000), "1s 500ms");
    }
}
