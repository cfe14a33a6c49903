//! The `--slo` grammar (src/slo.rs): any text as a spec. An accepted spec is the input
//! without whitespace, its terms are the spec's comma-separated pieces, each metric
//! bounded once and every bound in range; parsing the spec again gives the same `Slo`;
//! and judging it follows the terms: a run with no samples or no intended rate breaks
//! every term that needs them, and a run whose every latency is one value meets a
//! latency term exactly when that value is under the bound. A rejection is one line.
#![no_main]
use blaster::limits::HISTOGRAM_NS_MAX;
use blaster::slo::{Metric, Observed, Slo};
use hdrhistogram::Histogram;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// The latency every sample of the one-value run has (and the histogram's reading of
/// it: hdrhistogram keeps 3 significant digits, so it is read back as its bucket's
/// highest equivalent value).
const LATENCY_NS: u64 = 1_234_567;

fn histograms() -> &'static (Histogram<u64>, Histogram<u64>) {
    static H: OnceLock<(Histogram<u64>, Histogram<u64>)> = OnceLock::new();
    H.get_or_init(|| {
        let empty = Histogram::new_with_bounds(1, HISTOGRAM_NS_MAX, 3).unwrap();
        let mut one = empty.clone();
        one.record_n(LATENCY_NS, 1000).unwrap();
        (empty, one)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let slo = match Slo::parse(text) {
        Ok(slo) => slo,
        Err(e) => {
            assert!(
                !e.is_empty() && !e.contains('\n'),
                "error is not one line: {e:?}"
            );
            return;
        }
    };
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    assert_eq!(slo.spec, compact);
    assert!(!slo.terms.is_empty());
    let texts: Vec<&str> = slo.terms.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(texts.join(","), slo.spec);
    for (i, t) in slo.terms.iter().enumerate() {
        assert!(
            slo.terms[..i].iter().all(|u| u.metric != t.metric),
            "{:?} bounded twice",
            t.metric
        );
        match t.metric {
            Metric::Percentile(p) => assert!(p > 0.0 && p < 100.0, "percentile {p}"),
            Metric::Max => {}
            Metric::Errors => assert!(t.limit > 0.0 && t.limit <= 1.0, "{}", t.limit),
            Metric::Achieved | Metric::Retention => {
                assert!((0.0..=1.0).contains(&t.limit), "{}", t.limit)
            }
            Metric::Deviation(p) => assert!(p > 0.0 && p <= 100.0, "percentile {p}"),
        }
        if matches!(
            t.metric,
            Metric::Percentile(_) | Metric::Max | Metric::Deviation(_)
        ) {
            assert!(
                t.limit >= 1.0 && t.limit <= HISTOGRAM_NS_MAX as f64,
                "{}",
                t.limit
            );
            assert_eq!(t.limit.fract(), 0.0, "a latency bound is whole ns");
        }
    }
    assert_eq!(
        Slo::parse(&slo.spec).as_ref(),
        Ok(&slo),
        "the spec does not parse back"
    );

    let (empty, one) = histograms();
    // Nothing measured: every latency and achieved term is broken, with no figure.
    let nothing = Observed {
        latency: empty,
        dispatched: 0,
        errors: 0,
        intended_rps: 0.0,
        achieved_rps: 0.0,
        deviation: Some(empty),
        retention: None,
    };
    let v = slo.judge(&nothing);
    assert_eq!(v.terms.len(), slo.terms.len());
    for (t, tv) in slo.terms.iter().zip(&v.terms) {
        assert_eq!(tv.term, t.text);
        if t.metric != Metric::Errors {
            assert!(
                !tv.met && tv.measured.is_none(),
                "{} met on nothing",
                t.text
            );
        }
    }
    assert_eq!(v.met, v.terms.iter().all(|t| t.met));

    // Every latency the same value, 1% errors, 99% of the intended rate.
    let some = Observed {
        latency: one,
        dispatched: 1000,
        errors: 10,
        intended_rps: 1000.0,
        achieved_rps: 990.0,
        deviation: Some(one),
        retention: Some(0.99),
    };
    let read = one.max();
    let v = slo.judge(&some);
    for (t, tv) in slo.terms.iter().zip(&v.terms) {
        let expect = match t.metric {
            Metric::Percentile(_) | Metric::Max | Metric::Deviation(_) => (read as f64) < t.limit,
            Metric::Retention => 0.99 > t.limit,
            Metric::Errors => 0.01 < t.limit,
            Metric::Achieved => 0.99 > t.limit,
        };
        assert_eq!(tv.met, expect, "{} judged wrong", t.text);
    }
    let text = v.render();
    assert_eq!(text.contains("slo: MET"), v.met);
    assert_eq!(text.lines().count(), slo.terms.len() + 2);
});
