//! The pacing self-check: did the sends follow the intended arrival process, and down
//! to which gap length?
//!
//! A worker handles every request due by the time it looks, so requests due within one
//! loop iteration share its instant: gaps shorter than an iteration cannot be
//! reproduced, and a Kolmogorov-Smirnov test on tens of thousands of gaps detects that
//! in every run. A verdict that rejects every run teaches users to ignore it, so the
//! check is judged at the run's own **pacing resolution** instead:
//!
//! - resolution `r` = the spread of the dispatch lag (its `1 - LAG_TAIL` quantile minus
//!   its `LAG_TAIL` quantile). Each gap is the intended gap plus the difference of two
//!   lags, so all but the lag's tails are displaced by less than `r`.
//! - at that resolution the observed gap CDF must lie inside the intended one widened
//!   sideways by `r` (`F(x - r) <= F_obs(x) <= F(x + r)`, a Lévy band), up to the KS
//!   critical value plus the share of gaps the lag tails may displace further. A wrong
//!   process (even gaps for Poisson, bursts for constant) leaves the band; jitter below
//!   `r` does not.
//! - and `r` must be finer than the mean gap of a worker: a coarser resolution means the
//!   sends went out in batches and the schedule was kept only on average -- unless the
//!   batches are the configuration: with `--resolution W` a wake-up sends a window's
//!   worth, so a spread up to [`WINDOW_SPREAD_MAX`] windows is judged at the window
//!   the run was configured with (the band test still applies). A spread past that is
//!   a worker late beyond its configuration, and the verdict names the cause the run's
//!   own host figures point at ([`Context::cause`]): another process on the worker's
//!   core, the hypervisor's steal, a worker busy to its limit, or a host whose timer
//!   wakes later than the window.
//!
//! Gaps are time-rescaled by the intended rate (see `engine::tcp::fit`): in units of
//! the worker's mean gap, Exp(1) for Poisson arrivals and exactly 1 for constant ones.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Share of the dispatch lag left out at each end when measuring its spread: one
/// preempted iteration in 200 does not set the resolution of the whole run.
pub const LAG_TAIL: f64 = 0.005;

/// Largest resolution, in mean gaps of a worker, at which the schedule still counts
/// as reproduced: coarser, most sends went out in batches.
pub const RESOLUTION_GAPS_MAX: f64 = 1.0;

/// A spread of the dispatch lag up to this many `--resolution` windows is the
/// configuration's (a window's sends lag from 0 to the window, and the timer's own
/// lateness widens that by up to another window on an idle host), not a late worker.
pub const WINDOW_SPREAD_MAX: f64 = 2.0;

/// What the run knew besides the gaps: its configured window, and what the host
/// showed, to name the cause when the pacing fails.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Context {
    /// `--resolution`, ns (0: one wake-up per due send).
    pub window_ns: u64,
    /// Largest share of a generator core other processes took in any second, and the
    /// core.
    pub other_load: f64,
    pub other_load_core: Option<usize>,
    /// Largest share of a generator core the hypervisor took (steal) in any second.
    pub steal: f64,
    /// Largest busy share of a worker in any second.
    pub worker_busy: f64,
    /// The timer's lateness at p99.5 as the workers measured it (the largest), ns.
    pub timer_late_p995_ns: u64,
}

impl Context {
    /// Why a worker was late beyond its configuration, from the run's own figures, most
    /// telling first; a remedy with each.
    pub fn cause(&self) -> String {
        use crate::metrics::host::{CORE_BUSY_WATERMARK, OTHER_LOAD_WARN, STEAL_WARN};
        let core = self
            .other_load_core
            .map_or_else(|| "a generator core".to_string(), |c| format!("core {c}"));
        let pct = |x: f64| format!("{:.0}%", x * 100.0);
        if self.other_load >= OTHER_LOAD_WARN {
            format!(
                "another process took {} of {core}: give the generator cores of its own \
                 (--cores, taskset the rest away)",
                pct(self.other_load)
            )
        } else if self.steal >= STEAL_WARN {
            format!(
                "the hypervisor stole {} of a generator core: a host with dedicated vCPUs, \
                 or a coarser --resolution",
                pct(self.steal)
            )
        } else if self.worker_busy >= CORE_BUSY_WATERMARK {
            format!(
                "the worker was busy {} of the time: the generator is the bottleneck (more                  --cores or a lower rate)",
                pct(self.worker_busy)
            )
        } else if self.timer_late_p995_ns > self.window_ns.max(1) {
            format!(
                "this host's timer wakes up {} late at p99.5, later than the window: a                  --resolution of at least that, or --spin 2ms for precision at a core's cost",
                crate::units::fmt_ns(self.timer_late_p995_ns)
            )
        } else if self.other_load > 0.0 {
            format!(
                "another process took {} of {core} in its busiest second",
                pct(self.other_load)
            )
        } else {
            "nothing on the host showed why (no other load, steal or busy worker in \
             any second): preemptions shorter than the 10 ms the kernel counts in"
                .to_string()
        }
    }
}

/// The process the schedule intended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intended {
    Constant,
    Poisson,
}

impl Intended {
    /// CDF of a time-rescaled gap (in mean gaps).
    pub fn cdf(self, x: f64) -> f64 {
        match self {
            Intended::Poisson if x > 0.0 => 1.0 - (-x).exp(),
            Intended::Poisson => 0.0,
            Intended::Constant if x >= 1.0 => 1.0,
            Intended::Constant => 0.0,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Intended::Constant => "constant",
            Intended::Poisson => "poisson",
        }
    }
}

/// The spread of the dispatch lag, ns: gaps shorter than this were not reproduced.
/// `None` without dispatches.
pub fn resolution_ns(lag: &Histogram<u64>) -> Option<u64> {
    if lag.is_empty() {
        return None;
    }
    let hi = lag.value_at_quantile(1.0 - LAG_TAIL);
    let lo = lag.lowest_equivalent(lag.value_at_quantile(LAG_TAIL));
    Some(hi.saturating_sub(lo))
}

/// Largest distance of the empirical CDF of the gaps (recorded x `scale`) outside the
/// intended CDF widened sideways by `band` (same units as the gaps once divided by
/// `scale`): `max(F_obs(x) - F(x + band), F(x - band) - F_obs(x), 0)` over all x.
/// With `band = 0` this is the plain KS statistic. `None` without gaps.
pub fn banded_ks(
    gaps: &Histogram<u64>,
    scale: f64,
    intended: Intended,
    band: f64,
) -> Option<(f64, u64)> {
    let n = gaps.len();
    if n == 0 {
        return None;
    }
    let mut below = 0u64;
    let mut d: f64 = 0.0;
    for v in gaps.iter_recorded() {
        let lo = gaps.lowest_equivalent(v.value_iterated_to()) as f64 / scale;
        let hi = gaps.highest_equivalent(v.value_iterated_to()) as f64 / scale;
        let before = below as f64 / n as f64;
        below += v.count_at_value();
        let after = below as f64 / n as f64;
        // Just below this bucket the observed CDF is still `before`; at its top it is
        // `after`. Bucket edges are taken in the generator's favour (3 significant
        // digits: far below any resolution).
        d = d
            .max(intended.cdf(lo - band) - before)
            .max(after - intended.cdf(hi + band));
    }
    Some((d, n))
}

/// The KS critical value at the 1% level for `n` samples (large-n approximation).
pub fn ks_critical_1pct(n: u64) -> f64 {
    1.63 / (n.max(1) as f64).sqrt()
}

/// The pacing self-check of a run, as reported (text and JSON `pacing`).
#[derive(Debug, Clone, Serialize)]
pub struct Pacing {
    /// `constant` or `poisson`: the process the sends are judged against.
    pub arrivals: &'static str,
    /// Gaps between consecutive sends of a worker that were judged.
    pub gaps: u64,
    /// A worker's mean intended gap, ns.
    pub mean_gap_ns: f64,
    /// Gap length below which the schedule was not reproduced: the spread of the
    /// dispatch lag (`LAG_TAIL` left out at each end).
    pub resolution_ns: u64,
    /// `resolution_ns / mean_gap_ns`.
    pub resolution_gaps: f64,
    /// The `--resolution` window the run was configured with, ns: a spread up to
    /// [`WINDOW_SPREAD_MAX`] of it is the configuration's batching, not a late worker.
    pub window_ns: u64,
    /// KS statistic of the gaps at full resolution (rejects nearly every real run).
    pub raw_statistic: f64,
    /// Its 1% critical value.
    pub raw_critical: f64,
    /// Distance of the gap CDF outside the intended CDF widened by the resolution.
    pub statistic: f64,
    /// 1% KS critical value plus the share of gaps the lag tails may displace.
    pub critical: f64,
    /// `pass` or `fail`.
    pub verdict: &'static str,
    pub reason: String,
}

impl Pacing {
    pub fn passed(&self) -> bool {
        self.verdict == "pass"
    }
}

/// Judges the sends: `gaps` time-rescaled (x `scale`), `lag` the dispatch lag in ns,
/// `mean_gap_ns` a worker's mean intended gap. `None` without gaps or lag.
pub fn judge(
    gaps: &Histogram<u64>,
    scale: f64,
    lag: &Histogram<u64>,
    intended: Intended,
    mean_gap_ns: f64,
    ctx: &Context,
) -> Option<Pacing> {
    let resolution_ns = resolution_ns(lag)?;
    let resolution_gaps = resolution_ns as f64 / mean_gap_ns.max(1.0);
    let (raw, n) = banded_ks(gaps, scale, intended, 0.0)?;
    let (statistic, _) = banded_ks(gaps, scale, intended, resolution_gaps)?;
    let raw_critical = ks_critical_1pct(n);
    let critical = raw_critical + 4.0 * LAG_TAIL;
    let r = crate::units::fmt_ns(resolution_ns);
    let g = crate::units::fmt_ns(mean_gap_ns as u64);
    let window = crate::units::fmt_ns(ctx.window_ns);
    let process = intended.name();
    let coarse = resolution_gaps >= RESOLUTION_GAPS_MAX;
    let configured = resolution_ns as f64 <= WINDOW_SPREAD_MAX * ctx.window_ns as f64;
    let (verdict, reason) = if coarse && !configured {
        (
            "fail",
            format!(
                "pacing resolution {r} is coarser than a worker's mean gap {g} and than the \
                 configured --resolution {window} accounts for: the sends went out in batches \
                 and followed the {process} schedule only on average (the worker was late by \
                 up to the dispatch lag). Cause: {}",
                ctx.cause()
            ),
        )
    } else if statistic > critical {
        (
            "fail",
            format!(
                "even at the pacing resolution {r} the gaps between sends depart from the \
                 intended {process} process (D = {statistic:.4} > {critical:.4})"
            ),
        )
    } else if coarse {
        (
            "pass",
            format!(
                "the sends went out in windows of the configured --resolution {window} (about \
                 {:.1} per wake-up) and follow the intended {process} process at {r} and \
                 coarser, as configured (mean gap {g}); a finer --resolution reproduces \
                 shorter gaps at more CPU",
                resolution_gaps.max(1.0)
            ),
        )
    } else {
        (
            "pass",
            format!(
                "the gaps between sends follow the intended {process} process at {r} and \
                 coarser (mean gap {g}); shorter gaps were not reproduced (requests due within \
                 one loop iteration share its instant)"
            ),
        )
    };
    Some(Pacing {
        arrivals: process,
        gaps: n,
        mean_gap_ns,
        resolution_ns,
        resolution_gaps,
        window_ns: ctx.window_ns,
        raw_statistic: raw,
        raw_critical,
        statistic,
        critical,
        verdict,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCALE: f64 = 1e6;

    fn hist() -> Histogram<u64> {
        Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap()
    }

    /// Dispatch instants (in mean gaps) of `n` arrivals of `intended`, handled by a loop
    /// whose iterations start every `iter` mean gaps, plus a stall of `stall` mean gaps
    /// every `stall_every` iterations (0: none). Returns (gaps x SCALE, lag in ns with
    /// a mean gap of `gap_ns`).
    fn simulate(
        intended: Intended,
        n: usize,
        iter: f64,
        stall_every: usize,
        stall: f64,
        gap_ns: f64,
    ) -> (Histogram<u64>, Histogram<u64>) {
        let mut rng = fastrand::Rng::with_seed(11);
        let (mut gaps, mut lag) = (hist(), hist());
        let (mut due, mut now, mut iters) = (0.0f64, 0.0f64, 0usize);
        let mut prev: Option<f64> = None;
        for _ in 0..n {
            due += match intended {
                Intended::Poisson => -(1.0 - rng.f64()).ln(),
                Intended::Constant => 1.0,
            };
            // The loop looks at `now`, `now + iter`, ...; a stall delays one look.
            while now < due {
                iters += 1;
                now += iter;
                if stall_every > 0 && iters.is_multiple_of(stall_every) {
                    now += stall;
                }
            }
            lag.record(((now - due) * gap_ns) as u64).unwrap();
            if let Some(p) = prev.replace(now) {
                gaps.record(((now - p) * SCALE) as u64).unwrap();
            }
        }
        (gaps, lag)
    }

    #[test]
    fn cdfs_of_the_intended_processes() {
        assert_eq!(Intended::Poisson.cdf(-1.0), 0.0);
        assert!((Intended::Poisson.cdf(1.0) - 0.632_12).abs() < 1e-4);
        assert_eq!(Intended::Constant.cdf(0.999), 0.0);
        assert_eq!(Intended::Constant.cdf(1.0), 1.0);
    }

    #[test]
    fn resolution_is_the_spread_of_the_lag_without_its_tails() {
        let mut lag = hist();
        assert_eq!(resolution_ns(&lag), None);
        lag.record_n(50_000, 500).unwrap();
        lag.record_n(80_000, 500).unwrap();
        lag.record_n(9_000_000, 2).unwrap(); // 0.2%: a tail, left out
        let r = resolution_ns(&lag).unwrap();
        assert!((29_900..30_100).contains(&r), "{r}");
    }

    #[test]
    fn the_band_forgives_jitter_below_it_and_nothing_else() {
        // Constant gaps of 1 +- 0.2: plain KS far off, within a band of 0.25.
        let mut g = hist();
        for i in 0..10_000u64 {
            g.record(800_000 + (i % 401) * 1_000).unwrap();
        }
        let (raw, n) = banded_ks(&g, SCALE, Intended::Constant, 0.0).unwrap();
        assert_eq!(n, 10_000);
        assert!(raw > 0.4, "{raw}");
        let (d, _) = banded_ks(&g, SCALE, Intended::Constant, 0.25).unwrap();
        assert_eq!(d, 0.0);
        // Judged as Poisson, the same even gaps are far outside any small band.
        let (d, _) = banded_ks(&g, SCALE, Intended::Poisson, 0.25).unwrap();
        assert!(d > 0.3, "{d}");
        assert_eq!(banded_ks(&hist(), SCALE, Intended::Poisson, 0.0), None);
    }

    #[test]
    fn good_pacing_passes_at_its_resolution_though_plain_ks_rejects_it() {
        // Iterations every 0.3 mean gaps (20k/s with a 15 us loop).
        for intended in [Intended::Poisson, Intended::Constant] {
            let (gaps, lag) = simulate(intended, 60_000, 0.3, 0, 0.0, 50_000.0);
            let p = judge(&gaps, SCALE, &lag, intended, 50_000.0, &Context::default()).unwrap();
            assert!(p.passed(), "{intended:?}: {p:?}");
            assert!(p.resolution_gaps < 0.35, "{p:?}");
            if intended == Intended::Poisson {
                assert!(p.raw_statistic > p.raw_critical, "{p:?}");
            }
        }
    }

    #[test]
    fn batched_sends_fail_with_the_reason() {
        // A hog on the core: every 4th look comes 8 mean gaps late.
        for intended in [Intended::Poisson, Intended::Constant] {
            let (gaps, lag) = simulate(intended, 60_000, 0.1, 4, 8.0, 500_000.0);
            let hog = Context {
                window_ns: 100_000,
                other_load: 0.5,
                other_load_core: Some(0),
                ..Context::default()
            };
            let p = judge(&gaps, SCALE, &lag, intended, 500_000.0, &hog).unwrap();
            assert_eq!(p.verdict, "fail", "{intended:?}: {p:?}");
            assert!(
                p.reason.contains("coarser than a worker's mean gap"),
                "{p:?}"
            );
            assert!(
                p.reason.contains("another process took 50% of core 0"),
                "{p:?}"
            );
            assert!(p.resolution_gaps > 2.0, "{p:?}");
        }
    }

    /// Issue 33: sends batched by the configured window are the configuration, not a
    /// late worker; the same spread past twice the window fails, naming the cause.
    #[test]
    fn batches_of_the_configured_window_pass_and_beyond_it_fail_with_the_cause() {
        // 20,000/s (50 us gaps) looked at every 2 gaps (a 100 us window).
        for intended in [Intended::Poisson, Intended::Constant] {
            let (gaps, lag) = simulate(intended, 60_000, 2.0, 0, 0.0, 50_000.0);
            let at = |window_ns| Context {
                window_ns,
                ..Context::default()
            };
            let p = judge(&gaps, SCALE, &lag, intended, 50_000.0, &at(100_000)).unwrap();
            assert!(p.passed(), "{intended:?}: {p:?}");
            assert!(p.resolution_gaps >= 1.0, "{p:?}");
            assert!(p.reason.contains("configured --resolution 100"), "{p:?}");
            assert_eq!(p.window_ns, 100_000);
            // Without the window (--resolution 0) the same batches are a late worker.
            let p = judge(&gaps, SCALE, &lag, intended, 50_000.0, &at(0)).unwrap();
            assert_eq!(p.verdict, "fail", "{p:?}");
            assert!(p.reason.contains("Cause: nothing on the host"), "{p:?}");
        }
    }

    #[test]
    fn the_cause_is_the_most_telling_figure() {
        let c = |other_load, steal, worker_busy, timer_late_p995_ns| {
            Context {
                window_ns: 100_000,
                other_load,
                other_load_core: Some(3),
                steal,
                worker_busy,
                timer_late_p995_ns,
            }
            .cause()
        };
        assert!(c(0.4, 0.1, 0.9, 1_000_000).starts_with("another process took 40% of core 3"));
        assert!(c(0.0, 0.05, 0.9, 1_000_000).starts_with("the hypervisor stole 5%"));
        assert!(c(0.0, 0.0, 0.9, 1_000_000).starts_with("the worker was busy 90%"));
        assert!(c(0.0, 0.0, 0.1, 1_000_000).starts_with("this host's timer wakes up 1"));
        assert!(c(0.1, 0.0, 0.1, 50_000).starts_with("another process took 10% of core 3"));
        assert!(c(0.0, 0.0, 0.1, 50_000).starts_with("nothing on the host"));
    }

    #[test]
    fn a_wrong_process_fails_even_with_perfect_timing() {
        // Even gaps sent on time, judged as the Poisson process they should have been.
        let (gaps, lag) = simulate(Intended::Constant, 20_000, 0.001, 0, 0.0, 500_000.0);
        let p = judge(
            &gaps,
            SCALE,
            &lag,
            Intended::Poisson,
            500_000.0,
            &Context::default(),
        )
        .unwrap();
        assert_eq!(p.verdict, "fail", "{p:?}");
        assert!(
            p.reason.contains("depart from the intended poisson"),
            "{p:?}"
        );
    }
}
