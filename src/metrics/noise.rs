//! The host's noise floor, measured before a run decides anything (issue 33): for about
//! a second, one sleeper thread pinned to each of the run's cores wakes on an absolute
//! timetable at the run's resolution (`clock_nanosleep(TIMER_ABSTIME)`, as cyclictest
//! does) and records how late each wake-up lands; /proc/stat gives the share of each
//! core the hypervisor stole and other tasks took over the same second.
//!
//! The worker loop sleeps to its due instants the same way, so the sleepers' lateness
//! at p99 is the dispatch lag an idle generator cannot get under on this host: a
//! `--max-lag` below it fails at every rate, whatever the generator does. The probe
//! says so before the run, and names the gate this host can hold
//! ([`HostNoise::holdable_gate_ns`]), so a baseline can print its ceiling at that gate,
//! labelled, instead of "no valid step".
//!
//! The measuring is the thin part ([`probe`]); what it means is pure
//! ([`HostNoise::from_parts`], [`HostNoise::holds`], [`HostNoise::summary`]).

use crate::metrics::host::{CoreJiffies, cpu_jiffies};
use hdrhistogram::Histogram;
use serde::Serialize;

/// How long the probe listens by default (the "about 1 s"; its whole cost,
/// threads started and joined, stays under 1.5 s).
pub const PROBE_NS: u64 = 1_000_000_000;
/// The sleepers' period when the run has no resolution (`--resolution 0`): a timer
/// asked for every 100 us, the default window.
pub const PROBE_PERIOD_NS_DEFAULT: u64 = 100_000;
/// Shortest period a sleeper is asked to keep (a finer one measures the loop, not the
/// timer).
const PROBE_PERIOD_NS_MIN: u64 = 20_000;
/// A gate is taken to hold when the idle lateness p99 is below this share of it: the
/// dispatch lag adds the run's own work and window to the timer's lateness.
const GATE_HEADROOM: f64 = 0.8;

/// What the probe saw on the run's cores.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostNoise {
    pub cores: Vec<usize>,
    /// The sleepers' period, ns (the run's resolution).
    pub period_ns: u64,
    /// How long the probe listened, ns.
    pub probe_ns: u64,
    /// Wake-ups measured, all cores.
    pub wakeups: u64,
    /// Timer lateness over every core's wake-ups, ns.
    pub timer_late_p50_ns: u64,
    pub timer_late_p99_ns: u64,
    pub timer_late_max_ns: u64,
    /// Largest share of a probed core the hypervisor took (steal), and which core.
    pub steal: f64,
    pub steal_core: Option<usize>,
    /// Largest share of a probed core other tasks ran on (the sleepers themselves use
    /// next to nothing), and which core.
    pub other_load: f64,
    pub other_load_core: Option<usize>,
}

impl HostNoise {
    /// The figures from the sleepers' lateness histogram and each core's /proc/stat
    /// counts before and after.
    pub fn from_parts(
        cores: &[usize],
        period_ns: u64,
        probe_ns: u64,
        late: &Histogram<u64>,
        before: &[CoreJiffies],
        after: &[CoreJiffies],
    ) -> HostNoise {
        let (mut steal, mut steal_core, mut other, mut other_core) = (0.0, None, 0.0, None);
        for &c in cores {
            let (Some(a), Some(b)) = (
                before.iter().find(|j| j.core == c),
                after.iter().find(|j| j.core == c),
            ) else {
                continue;
            };
            let total = b.total.saturating_sub(a.total).max(1) as f64;
            let s = b.steal.saturating_sub(a.steal) as f64 / total;
            let o = b.busy.saturating_sub(a.busy) as f64 / total;
            if s > steal {
                (steal, steal_core) = (s, Some(c));
            }
            if o > other {
                (other, other_core) = (o, Some(c));
            }
        }
        let q = |q: f64| {
            if late.is_empty() {
                0
            } else {
                late.highest_equivalent(late.value_at_quantile(q))
            }
        };
        HostNoise {
            cores: cores.to_vec(),
            period_ns,
            probe_ns,
            wakeups: late.len(),
            timer_late_p50_ns: q(0.50),
            timer_late_p99_ns: q(0.99),
            timer_late_max_ns: if late.is_empty() { 0 } else { late.max() },
            steal,
            steal_core,
            other_load: other,
            other_load_core: other_core,
        }
    }

    /// Whether a dispatch lag gate of `gate_ns` at p99 can hold on this host even with
    /// the generator idle: the timer's own lateness p99 within [`GATE_HEADROOM`] of it.
    pub fn holds(&self, gate_ns: u64) -> bool {
        (self.timer_late_p99_ns as f64) < GATE_HEADROOM * gate_ns as f64
    }

    /// The smallest gate this host can hold ([`HostNoise::holds`]), rounded up to a
    /// figure a user would type: 1, 2 or 5 times a power of ten, in microseconds.
    pub fn holdable_gate_ns(&self) -> u64 {
        let need = (self.timer_late_p99_ns as f64 / GATE_HEADROOM).ceil() as u64 + 1;
        let mut unit = 1_000u64;
        loop {
            for m in [1, 2, 5] {
                if m * unit >= need {
                    return m * unit;
                }
            }
            unit = unit.saturating_mul(10);
        }
    }

    /// The one line: `this host: timer late p99 2.5 ms (p50 62 us) on cores 0, steal
    /// 4%, other load 0%: a --max-lag under 5 ms cannot hold here`.
    pub fn summary(&self, gate_ns: u64) -> String {
        use crate::metrics::host::{OTHER_LOAD_WARN, STEAL_WARN};
        use crate::units::{fmt_ns, list_cores};
        let busy = if self.other_load >= OTHER_LOAD_WARN || self.steal >= STEAL_WARN {
            "; but the cores are not the generator's alone now (other load or steal), so a \
             run measures this host's load too"
        } else {
            ""
        };
        let verdict = if self.holds(gate_ns) {
            format!("the --max-lag {} gate can hold here{busy}", fmt_ns(gate_ns))
        } else {
            format!(
                "a --max-lag under {} cannot hold here (asked: {})",
                fmt_ns(self.holdable_gate_ns()),
                fmt_ns(gate_ns)
            )
        };
        format!(
            "this host: timer late p99 {} (p50 {}, max {}) at a {} period on core{} {}, steal \
             {:.0}%, other load {:.0}%: {verdict}",
            fmt_ns(self.timer_late_p99_ns),
            fmt_ns(self.timer_late_p50_ns),
            fmt_ns(self.timer_late_max_ns),
            fmt_ns(self.period_ns),
            if self.cores.len() == 1 { "" } else { "s" },
            list_cores(&self.cores),
            self.steal * 100.0,
            self.other_load * 100.0,
        )
    }

    /// What makes the timer late, and the remedies, when `gate_ns` cannot hold.
    pub fn remedy(&self, gate_ns: u64) -> Option<String> {
        if self.holds(gate_ns) {
            return None;
        }
        use crate::metrics::host::{OTHER_LOAD_WARN, STEAL_WARN};
        let cause = if self.other_load >= OTHER_LOAD_WARN {
            format!(
                "other tasks took {:.0}% of core {}: give the generator cores of its own",
                self.other_load * 100.0,
                self.other_load_core.unwrap_or(0)
            )
        } else if self.steal >= STEAL_WARN {
            format!(
                "the hypervisor stole {:.0}% of core {}: a host with dedicated vCPUs",
                self.steal * 100.0,
                self.steal_core.unwrap_or(0)
            )
        } else {
            "the timer itself (a VM's timer exits, deep idle states): a host with \
             dedicated cores, `idle=poll` or a `performance` governor, isolcpus/nohz_full \
             on the generator cores"
                .to_string()
        };
        Some(format!(
            "even idle, this host's timer wakes up {} late at p99, past the --max-lag {} \
             gate: {cause}; or judge at --max-lag {} (what this host can hold)",
            crate::units::fmt_ns(self.timer_late_p99_ns),
            crate::units::fmt_ns(gate_ns),
            crate::units::fmt_ns(self.holdable_gate_ns()),
        ))
    }
}

/// The sleepers' period for a run with `resolution_ns` (0: the default window).
pub fn period_for(resolution_ns: u64) -> u64 {
    if resolution_ns == 0 {
        PROBE_PERIOD_NS_DEFAULT
    } else {
        resolution_ns.max(PROBE_PERIOD_NS_MIN)
    }
}

/// Listens for `probe_ns` on `cores`, one pinned sleeper each, waking every `period_ns`.
pub fn probe(cores: &[usize], period_ns: u64, probe_ns: u64) -> HostNoise {
    let stat =
        || std::fs::read_to_string("/proc/stat").map_or_else(|_| Vec::new(), |s| cpu_jiffies(&s));
    let before = stat();
    let sleepers: Vec<_> = cores
        .iter()
        .map(|&core| {
            std::thread::Builder::new()
                .name(format!("blaster-probe-{core}"))
                .spawn(move || {
                    crate::threads::pin_current(core);
                    sleeper(period_ns, probe_ns)
                })
        })
        .collect();
    let mut late = lateness_histogram();
    for s in sleepers.into_iter().flatten() {
        if let Ok(h) = s.join() {
            let _ = late.add(&h);
        }
    }
    let after = stat();
    HostNoise::from_parts(cores, period_ns, probe_ns, &late, &before, &after)
}

fn lateness_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("static bounds are valid")
}

/// One sleeper: wakes at `start + k * period` (absolute, CLOCK_MONOTONIC) until
/// `probe_ns` has passed, recording how late each wake-up is. A wake-up later than a
/// period skips the instants it missed (they would only measure the same delay again).
fn sleeper(period_ns: u64, probe_ns: u64) -> Histogram<u64> {
    let mut h = lateness_histogram();
    let now = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into the timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let start = now();
    let mut next = start + period_ns;
    while next < start + probe_ns {
        let ts = libc::timespec {
            tv_sec: (next / 1_000_000_000) as libc::time_t,
            tv_nsec: (next % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: clock_nanosleep reads the timespec we own; no remainder is asked for
        // (TIMER_ABSTIME), so the null pointer is never written.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        let woke = now();
        if rc == 0 {
            let _ = h.record(woke.saturating_sub(next).max(1));
        }
        next += period_ns;
        if woke > next {
            next = woke - (woke - next) % period_ns + period_ns;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jiffies(core: usize, busy: u64, steal: u64, total: u64) -> CoreJiffies {
        CoreJiffies {
            core,
            busy,
            steal,
            total,
        }
    }

    fn noise(late_p99_us: u64) -> HostNoise {
        let mut h = lateness_histogram();
        h.record_n(50_000, 980).unwrap();
        h.record_n(late_p99_us * 1_000, 20).unwrap();
        HostNoise::from_parts(&[0], 100_000, PROBE_NS, &h, &[], &[])
    }

    #[test]
    fn lateness_steal_and_other_load_are_read_per_core() {
        let mut h = lateness_histogram();
        h.record_n(60_000, 980).unwrap();
        h.record_n(2_500_000, 20).unwrap();
        let before = [jiffies(0, 10, 0, 100), jiffies(1, 10, 0, 100)];
        let after = [jiffies(0, 30, 4, 200), jiffies(1, 11, 8, 200)];
        let n = HostNoise::from_parts(&[0, 1], 100_000, PROBE_NS, &h, &before, &after);
        assert_eq!(n.wakeups, 1_000);
        assert!((60_000..61_000).contains(&n.timer_late_p50_ns), "{n:?}");
        assert!(
            (2_500_000..2_510_000).contains(&n.timer_late_p99_ns),
            "{n:?}"
        );
        assert_eq!((n.steal, n.steal_core), (0.08, Some(1)));
        assert_eq!((n.other_load, n.other_load_core), (0.2, Some(0)));
        // A core missing from /proc/stat is left out, not a panic.
        let n = HostNoise::from_parts(&[7], 100_000, PROBE_NS, &h, &before, &after);
        assert_eq!((n.steal, n.other_load), (0.0, 0.0));
    }

    #[test]
    fn a_gate_holds_only_above_the_idle_lateness_with_headroom() {
        // The host: 2.5 ms late at p99 against the 1 ms gate.
        let n = noise(2_500);
        assert!(!n.holds(1_000_000) && !n.holds(3_000_000) && n.holds(5_000_000));
        assert_eq!(n.holdable_gate_ns(), 5_000_000);
        assert!(
            n.summary(1_000_000)
                .contains("a --max-lag under 5.00 ms cannot hold here"),
            "{}",
            n.summary(1_000_000)
        );
        let remedy = n.remedy(1_000_000).unwrap();
        assert!(remedy.contains("--max-lag 5.00 ms"), "{remedy}");
        // This VM on a quiet day: ~100 us late at p99; the 1 ms gate holds.
        let n = noise(100);
        assert!(n.holds(1_000_000));
        assert_eq!(n.remedy(1_000_000), None);
        assert!(n.summary(1_000_000).contains("gate can hold here"));
        assert!(!n.summary(1_000_000).contains("not the generator's alone"));
        let mut busy = noise(100);
        busy.other_load = 0.9;
        assert!(
            busy.summary(1_000_000)
                .contains("not the generator's alone")
        );
        assert_eq!(n.holdable_gate_ns(), 200_000);
        assert_eq!(noise(700).holdable_gate_ns(), 1_000_000);
        assert_eq!(noise(900).holdable_gate_ns(), 2_000_000);
    }

    #[test]
    fn the_remedy_names_the_cause() {
        let mut n = noise(3_000);
        n.other_load = 0.5;
        n.other_load_core = Some(0);
        assert!(
            n.remedy(1_000_000)
                .unwrap()
                .contains("other tasks took 50% of core 0")
        );
        n.other_load = 0.0;
        n.steal = 0.05;
        n.steal_core = Some(1);
        assert!(
            n.remedy(1_000_000)
                .unwrap()
                .contains("the hypervisor stole 5% of core 1")
        );
        n.steal = 0.0;
        assert!(n.remedy(1_000_000).unwrap().contains("the timer itself"));
    }

    #[test]
    fn the_period_is_the_runs_resolution() {
        assert_eq!(period_for(0), PROBE_PERIOD_NS_DEFAULT);
        assert_eq!(period_for(1_000), PROBE_PERIOD_NS_MIN);
        assert_eq!(period_for(500_000), 500_000);
    }

    /// The real thing, briefly: a sleeper on core 0 wakes about every period and is
    /// late by something, never by nothing.
    #[test]
    fn a_short_probe_measures_wakeups() {
        let n = probe(&[0], 1_000_000, 50_000_000);
        assert!((30..=50).contains(&n.wakeups), "{n:?}");
        assert!(n.timer_late_p50_ns > 0, "{n:?}");
    }
}
