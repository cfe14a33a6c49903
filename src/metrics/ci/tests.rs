//! The estimator's tests: the quantile functions against their tables, the too-few rules, and
//! the coverage of 100 seeded synthetic runs drawn from a known distribution.

use super::*;
use crate::metrics::Histograms;

fn hist() -> Histogram<u64> {
    Histograms::new().latency
}

#[test]
fn normal_and_t_quantiles_match_the_tables() {
    assert!((normal_quantile(0.975) - 1.959_964).abs() < 1e-6);
    assert!((normal_quantile(0.5)).abs() < 1e-12);
    assert!((normal_quantile(0.005) + 2.575_829).abs() < 1e-6);
    // Student t at 97.5%: 4, 9, 49 and 1000 degrees of freedom.
    for (nu, t) in [(4.0, 2.776), (9.0, 2.262), (49.0, 2.010), (1000.0, 1.962)] {
        let got = student_t_quantile(0.975, nu);
        assert!((got - t).abs() < 0.002, "nu {nu}: {got} against {t}");
    }
    assert!((student_t_quantile(0.975, 1.0) - 12.706).abs() < 0.001);
    assert!((student_t_quantile(0.975, 2.0) - 4.303).abs() < 0.001);
}

#[test]
fn the_widening_falls_to_one_as_units_grow() {
    let w = |k| widening(k, 0.95);
    assert!((w(5) - 1.584).abs() < 0.01, "{}", w(5));
    assert!((w(10) - 1.216).abs() < 0.01, "{}", w(10));
    assert!((w(50) - 1.036).abs() < 0.01, "{}", w(50));
    assert!(w(1).is_infinite());
}

#[test]
fn long_runs_group_their_seconds_into_blocks() {
    let (n, b) = blocks_of(&[0, 1, 2], 3);
    assert_eq!((n, b), (3, vec![0, 1, 2]));
    let starts: Vec<u64> = (0..500).collect();
    let (n, b) = blocks_of(&starts, 500);
    assert_eq!(n, CI_BLOCKS_MAX);
    assert_eq!((b[0], b[9], b[10], b[499]), (0, 0, 1, CI_BLOCKS_MAX - 1));
    // Coarse entries past the first hour (60 s each) fall by their seconds.
    let mut starts: Vec<u64> = (0..3_600).collect();
    starts.extend((0..60).map(|i| 3_600 + 60 * i));
    let (_, b) = blocks_of(&starts, 7_200);
    assert_eq!(b[3_599], 24);
    assert_eq!(*b.last().unwrap(), CI_BLOCKS_MAX - 1);
}

/// `k` intervals of `per` samples each, all `v`.
fn flat(k: usize, per: u64, v: u64) -> (Units, Histogram<u64>) {
    let mut b = UnitsBuilder::new(k);
    let mut total = hist();
    for i in 0..k {
        let mut h = hist();
        h.record_n(v, per).unwrap();
        total.add(&h).unwrap();
        b.add(i, &h);
    }
    (b.build(), total)
}

#[test]
fn too_few_intervals_or_tail_samples_give_a_reason_not_a_number() {
    let s = Settings::new(0.95, 1);
    let (u, total) = flat(4, 1_000, 5_000);
    let b = quantiles(&u, &total, &[0.5], &s);
    assert!(
        matches!(&b[0], Bounds::TooFew(w) if w.contains("4 intervals with samples, 5 needed")),
        "{b:?}"
    );
    // 5,000 samples: p99 has 50 beyond it, p99.99 none.
    let (u, total) = flat(5, 1_000, 5_000);
    let b = quantiles(&u, &total, &[0.99, 0.9999], &s);
    assert!(b[0].range().is_some(), "{b:?}");
    assert!(
        matches!(&b[1], Bounds::TooFew(w) if w.contains("0 beyond p99.99 of 5000")),
        "{b:?}"
    );
}

#[test]
fn a_constant_value_gives_its_bucket() {
    let (u, total) = flat(8, 100, 5_000);
    let b = quantiles(&u, &total, &[0.5, 0.9], &Settings::new(0.95, 7));
    for x in b {
        let (l, h) = x.range().unwrap();
        assert_eq!(
            (l as u64, h as u64),
            (
                total.lowest_equivalent(5_000),
                total.highest_equivalent(5_000)
            )
        );
    }
}

/// Draws from an exponential of mean `mean`.
fn exp(rng: &mut fastrand::Rng, mean: f64) -> f64 {
    -(1.0 - rng.f64()).ln() * mean
}

fn gauss(rng: &mut fastrand::Rng) -> f64 {
    let (u, v) = (1.0 - rng.f64(), rng.f64());
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// A synthetic run as a real one looks: `k` one-second intervals of `per` requests,
/// each an exponential of mean `mean_ns` scaled by the interval's own factor
/// `exp(sigma * x_i)`, where x is an AR(1) process of lag-1 correlation `rho` (a target
/// slower for a few seconds at a time).
struct Synthetic {
    k: usize,
    per: usize,
    mean_ns: f64,
    sigma: f64,
    rho: f64,
}

impl Synthetic {
    fn run(&self, seed: u64) -> (Units, Histogram<u64>) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut b = UnitsBuilder::new(self.k);
        let mut total = hist();
        let mut x = gauss(&mut rng);
        let mut h = hist();
        for i in 0..self.k {
            x = self.rho * x + (1.0 - self.rho * self.rho).sqrt() * gauss(&mut rng);
            let scale = self.mean_ns * (self.sigma * x).exp();
            h.reset();
            for _ in 0..self.per {
                h.record(exp(&mut rng, scale).max(1.0) as u64).unwrap();
            }
            total.add(&h).unwrap();
            b.add(i, &h);
        }
        (b.build(), total)
    }

    /// The true quantile q of the run's distribution: the exponential mixed over the
    /// stationary (lognormal) scale, by quadrature and bisection.
    fn truth(&self, q: f64) -> f64 {
        let cdf = |v: f64| {
            let (mut sum, mut w) = (0.0, 0.0);
            for j in -4000..=4000 {
                let z = j as f64 / 500.0;
                let pdf = (-z * z / 2.0).exp();
                let scale = self.mean_ns * (self.sigma * z).exp();
                sum += pdf * (1.0 - (-v / scale).exp());
                w += pdf;
            }
            sum / w
        };
        let (mut lo, mut hi) = (0.0, self.mean_ns * 100.0);
        for _ in 0..100 {
            let mid = (lo + hi) / 2.0;
            if cdf(mid) < q {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (lo + hi) / 2.0
    }

    /// Of `runs` seeded runs, how many intervals of each quantile held the truth.
    fn coverage(&self, qs: &[f64], runs: u64) -> Vec<usize> {
        let truth: Vec<f64> = qs.iter().map(|&q| self.truth(q)).collect();
        let mut hits = vec![0; qs.len()];
        for seed in 0..runs {
            let (u, total) = self.run(1_000 + seed);
            let b = quantiles(&u, &total, qs, &Settings::new(0.95, seed));
            for (j, x) in b.iter().enumerate() {
                hits[j] += usize::from(x.contains(truth[j]));
            }
        }
        hits
    }
}

/// Issue 33 item 4: the 95% intervals of p50 and p99 hold the true value in at least
/// 90 of 100 seeded runs whose intervals are drawn from a known distribution (an
/// exponential of mean 200 us, 2,000 requests a second, each second's scale moving as
/// an AR(1) process of correlation 0.3 and 3% spread: what a run against the sink with
/// `--delay-dist exp:200us` looks like). Ten seconds, and the shortest run an interval
/// is given for (five).
#[test]
fn intervals_of_p50_and_p99_cover_the_truth_in_90_of_100_runs() {
    for k in [10, 5] {
        let s = Synthetic {
            k,
            per: 2_000,
            mean_ns: 200_000.0,
            sigma: 0.03,
            rho: 0.3,
        };
        let hits = s.coverage(&[0.5, 0.99], 100);
        eprintln!(
            "{k} intervals: p50 {} of 100, p99 {} of 100",
            hits[0], hits[1]
        );
        assert!(
            hits[0] >= 90,
            "{k} intervals: p50 covered {} of 100",
            hits[0]
        );
        assert!(
            hits[1] >= 90,
            "{k} intervals: p99 covered {} of 100",
            hits[1]
        );
    }
}

#[test]
fn the_bootstrap_is_seeded() {
    let s = Synthetic {
        k: 8,
        per: 500,
        mean_ns: 1e6,
        sigma: 0.0,
        rho: 0.0,
    };
    let (u, total) = s.run(3);
    let a = quantiles(&u, &total, &[0.5, 0.99], &Settings::new(0.95, 11));
    let b = quantiles(&u, &total, &[0.5, 0.99], &Settings::new(0.95, 11));
    assert_eq!(a, b);
    // The estimate lies inside its interval, and a higher level is no narrower.
    let wide = quantiles(&u, &total, &[0.5], &Settings::new(0.99, 11));
    let p50 = total.value_at_quantile(0.5) as f64;
    assert!(a[0].contains(p50), "{a:?} {p50}");
    let ((l95, h95), (l99, h99)) = (a[0].range().unwrap(), wide[0].range().unwrap());
    assert!(l99 <= l95 && h99 >= h95, "{a:?} {wide:?}");
}

#[test]
fn rates_and_error_ratios() {
    let s = Settings::new(0.95, 5);
    let done = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1000.0];
    let secs = [1.0; 6];
    let (l, h) = ratio(&done, &secs, 1000.0, &s).range().unwrap();
    assert!(
        l < 1000.0 && h > 1000.0 && l > 980.0 && h < 1020.0,
        "{l} {h}"
    );
    // No error in 6,000: [0, 1 - 0.025^(1/6000)], about 3.7 / 6000.
    let (l, h) = proportion(&[0.0; 6], &done, 0.0, &s).range().unwrap();
    assert_eq!(l, 0.0);
    assert!((h - 6.1e-4).abs() < 0.2e-4, "{h}");
    assert!(matches!(
        ratio(&done[..4], &secs[..4], 1000.0, &s),
        Bounds::TooFew(_)
    ));
}
