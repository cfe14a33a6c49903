//! The per-interval series of the JSON (`intervals[]`), bounded for soaks.
//!
//! The collector completes one [`Row`] per second. The first
//! [`INTERVAL_HISTOGRAMS_JSON_MAX`] seconds (an hour) are kept one entry each, with their
//! histograms; past that, consecutive seconds are merged into entries of
//! [`Resolution::coarse_s`] seconds by adding their histograms and counters, the width
//! chosen from the run's duration ([`coarse_s_for`]) so the series never holds more
//! than [`SERIES_ENTRIES_MAX`] entries. Only the entry being filled holds live
//! histograms; a closed one keeps its percentiles and its histograms compressed. A
//! merged entry's counts are the sum of its seconds, its traffic rates their mean, its
//! loads (core load, worker busy, other load, steal) the busiest second's, its kernel
//! drop counters their sum, its frames'
//! `connections_active` the last second's; [`Series::peak`] keeps every per-second
//! maximum for the report's host figures. Exporters (`--hdr-log`, `--csv`) still get
//! every second as it completes.

use super::Percentiles;
use super::assemble::{Load, Row};
use super::hdr::Encoded4;
use crate::limits::{INTERVAL_HISTOGRAMS_JSON_MAX, SERIES_COARSE_S_MIN, SERIES_ENTRIES_MAX};
use crate::metrics::Histograms;
use serde::Serialize;

/// How finely `intervals[]` is divided: the JSON's `intervals_resolution`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Resolution {
    /// Entries span one second each until this second (an hour)...
    pub fine_until_s: u64,
    /// ...and this many seconds after it (the last entry may be shorter).
    pub coarse_s: u64,
    /// The most entries a run's series holds.
    pub entries_max: usize,
}

/// The width of the entries past the first hour for a schedule of `duration_s`: the
/// shortest multiple of [`SERIES_COARSE_S_MIN`] that keeps the series within
/// [`SERIES_ENTRIES_MAX`] entries. The drain after the schedule's end folds into its
/// last second, so the series never runs past `duration_s`.
pub fn coarse_s_for(duration_s: u64) -> u64 {
    let fine = INTERVAL_HISTOGRAMS_JSON_MAX as u64;
    let room = (SERIES_ENTRIES_MAX as u64).saturating_sub(fine).max(1);
    let needed = duration_s.saturating_sub(fine).div_ceil(room);
    needed
        .div_ceil(SERIES_COARSE_S_MIN)
        .max(1)
        .saturating_mul(SERIES_COARSE_S_MIN)
}

/// The entries so far, and the one being filled.
pub struct Series {
    resolution: Resolution,
    rows: Vec<Row>,
    /// The entry being filled, with the sum of its seconds' histograms.
    open: Option<Row>,
    acc: Option<Box<Histograms>>,
    seconds: usize,
    peak: Load,
}

impl Series {
    /// The series of a schedule lasting `duration_ns`.
    pub fn new(duration_ns: u64) -> Series {
        Series {
            resolution: Resolution {
                fine_until_s: INTERVAL_HISTOGRAMS_JSON_MAX as u64,
                coarse_s: coarse_s_for(duration_ns.div_ceil(1_000_000_000)),
                entries_max: SERIES_ENTRIES_MAX,
            },
            rows: Vec::new(),
            open: None,
            acc: None,
            seconds: 0,
            peak: Load::default(),
        }
    }

    pub fn resolution(&self) -> Resolution {
        self.resolution
    }

    /// Seconds pushed so far (the next one's index).
    pub fn seconds(&self) -> usize {
        self.seconds
    }

    /// Each load and rate at its busiest second, drops summed: what the report's host
    /// figures take, exact whatever the entries' width.
    pub fn peak(&self) -> &Load {
        &self.peak
    }

    /// Entries held now (the one being filled included): at most
    /// [`Resolution::entries_max`].
    pub fn len(&self) -> usize {
        self.rows.len() + usize::from(self.open.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds second [`Series::seconds`]: `row` (its figures) and `histograms` (the
    /// second's merged histograms, read only past the first hour).
    pub fn push(&mut self, row: Row, histograms: &Histograms) {
        debug_assert_eq!(row.start_s, self.seconds as u64, "seconds come in order");
        self.seconds += 1;
        self.peak.peak(&row.load);
        let fine = self.resolution.fine_until_s;
        if row.start_s < fine {
            self.rows.push(row);
            return;
        }
        let width = self.resolution.coarse_s;
        let start = fine + (row.start_s - fine) / width * width;
        if self.open.as_ref().is_some_and(|o| o.start_s != start) {
            self.close();
        }
        let acc = self.acc.get_or_insert_with(|| Box::new(Histograms::new()));
        acc.add(histograms);
        let open = self.open.get_or_insert_with(|| Row {
            start_s: start,
            len_s: 0,
            ..Row::default()
        });
        merge_into(open, &row);
    }

    /// Closes the entry being filled: its percentiles and compressed histograms from
    /// the sum of its seconds', its rates the mean over them.
    fn close(&mut self) {
        let Some(mut row) = self.open.take() else {
            return;
        };
        if let Some(acc) = self.acc.as_mut() {
            row.latency = Percentiles::of(&acc.latency);
            row.lag_p99 = Percentiles::of(&acc.dispatch_lag).p99;
            if let Some((_, dev)) = row.frames.as_mut() {
                *dev = Percentiles::of(&acc.frame_deviation);
            }
            row.histograms = Some(Encoded4::of(acc));
            acc.reset();
        }
        let n = row.len_s.max(1) as f64;
        let l = &mut row.load;
        for rate in [&mut l.tx_bps, &mut l.rx_bps, &mut l.tx_pps, &mut l.rx_pps] {
            *rate /= n;
        }
        self.rows.push(row);
    }

    /// Every entry, in order.
    pub fn finish(mut self) -> Vec<Row> {
        self.close();
        self.rows
    }
}

/// Adds second `s` to entry `into`: counts add, loads keep the busiest second, rates
/// are summed here and divided by the length when the entry closes.
fn merge_into(into: &mut Row, s: &Row) {
    into.len_s += 1;
    into.completed += s.completed;
    into.errors += s.errors;
    into.reconnects += s.reconnects;
    let (a, b) = (&mut into.load, &s.load);
    a.core_load = a.core_load.max(b.core_load);
    a.worker_busy = a.worker_busy.max(b.worker_busy);
    a.other_load = a.other_load.max(b.other_load);
    a.steal = a.steal.max(b.steal);
    a.tx_bps += b.tx_bps;
    a.rx_bps += b.rx_bps;
    a.tx_pps += b.tx_pps;
    a.rx_pps += b.rx_pps;
    a.drops += b.drops;
    a.add_kernel(b);
    if let Some((c, _)) = &s.frames {
        let (acc, _) = into.frames.get_or_insert_with(Default::default);
        // A gauge: the entry's is its last second's.
        let active = c.connections_active;
        acc.add(c);
        acc.connections_active = active;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::hdr;

    /// Whether simulated second `i` has samples: every 37th (a prime, so they fall at
    /// every place of an entry). The others have none, which keeps a simulated day
    /// fast: adding an empty histogram costs nothing, resetting a full set does.
    fn sampled(i: u64) -> bool {
        i.is_multiple_of(37)
    }

    /// Second `i`'s row; a sampled second's samples are recorded into `h`, reset
    /// first, and the second's histograms are then `h`, else `empty`.
    fn second(i: u64, h: &mut Histograms, empty: &Histograms) -> Row {
        if sampled(i) {
            h.reset();
            for k in 0..(i % 5 + 1) {
                h.latency.record(1_000 + (i % 97) * 10 + k).unwrap();
                h.dispatch_lag.record(10 + i % 13).unwrap();
            }
        }
        Row {
            start_s: i,
            len_s: 1,
            completed: if sampled(i) { h.latency.len() } else { 0 },
            errors: i % 3,
            latency: if sampled(i) {
                Percentiles::of(&h.latency)
            } else {
                Percentiles::default()
            },
            load: Load {
                core_load: (i % 100) as f64 / 100.0,
                tx_bps: 1_000.0 + (i % 7) as f64,
                drops: i % 2,
                ..Load::default()
            },
            histograms: (i < INTERVAL_HISTOGRAMS_JSON_MAX as u64)
                .then(|| Encoded4::of(if sampled(i) { h } else { empty })),
            ..Row::default()
        }
    }

    #[test]
    fn the_coarse_width_keeps_any_duration_under_the_cap() {
        assert_eq!(coarse_s_for(0), SERIES_COARSE_S_MIN);
        assert_eq!(coarse_s_for(3_600), SERIES_COARSE_S_MIN);
        // A day: 82,800 s past the hour fit 1,400 entries of a minute.
        assert_eq!(coarse_s_for(86_400), 60);
        for d in [3_601, 86_400, 90_000, 10 * 86_400, u64::MAX / 2] {
            let w = coarse_s_for(d);
            assert_eq!(w % SERIES_COARSE_S_MIN, 0, "{d}");
            let entries = 3_600 + (d - 3_600).div_ceil(w);
            assert!(
                entries <= SERIES_ENTRIES_MAX as u64,
                "{d}: {entries} of {w} s"
            );
        }
    }

    /// A simulated 25-hour soak: the series stays under its cap, its entries tile the
    /// run, and every count and histogram adds up to exactly the per-second totals.
    #[test]
    fn a_25_hour_series_stays_under_the_cap_and_keeps_every_count() {
        let secs = 25 * 3_600u64;
        let mut s = Series::new(secs * 1_000_000_000);
        let mut total = Histograms::new();
        let (mut completed, mut errors, mut drops) = (0, 0, 0);
        let (mut max_load, mut max_tx) = (0.0f64, 0.0f64);
        let (mut h, empty) = (Histograms::new(), Histograms::new());
        for i in 0..secs {
            let row = second(i, &mut h, &empty);
            let hs = if sampled(i) { &h } else { &empty };
            completed += row.completed;
            errors += row.errors;
            drops += row.load.drops;
            max_load = max_load.max(row.load.core_load);
            max_tx = max_tx.max(row.load.tx_bps);
            total.add(hs);
            s.push(row, hs);
            assert!(s.len() <= SERIES_ENTRIES_MAX, "{} entries at {i}", s.len());
        }
        let r = s.resolution();
        assert_eq!(r.fine_until_s, 3_600);
        assert_eq!(r.coarse_s, 120);
        assert_eq!(s.peak().core_load, max_load);
        assert_eq!(s.peak().tx_bps, max_tx);
        assert_eq!(s.peak().drops, drops);
        let rows = s.finish();
        assert!(rows.len() <= SERIES_ENTRIES_MAX);
        assert_eq!(rows.len(), 3_600 + (secs as usize - 3_600) / 120);
        // The entries tile the run: per second for an hour, then 120 s each.
        let mut next = 0;
        for (k, row) in rows.iter().enumerate() {
            assert_eq!(row.start_s, next, "entry {k}");
            assert_eq!(row.len_s, if k < 3_600 { 1 } else { 120 }, "entry {k}");
            next += row.len_s;
        }
        assert_eq!(next, secs);
        assert_eq!(rows.iter().map(|r| r.completed).sum::<u64>(), completed);
        assert_eq!(rows.iter().map(|r| r.errors).sum::<u64>(), errors);
        assert_eq!(rows.iter().map(|r| r.load.drops).sum::<u64>(), drops);
        // Past the hour every entry embeds its histograms; with the first hour's they
        // are the run's, exactly.
        let mut sum = Histograms::new();
        for (k, row) in rows.iter().enumerate() {
            let Some(e) = row.histograms.as_ref() else {
                panic!("entry {k} has no histograms")
            };
            sum.latency.add(hdr::decode(&e.latency).unwrap()).unwrap();
            sum.dispatch_lag
                .add(hdr::decode(&e.dispatch_lag).unwrap())
                .unwrap();
        }
        // (Compared without `assert_eq!`, whose message would print every bucket.)
        let same = |a: &hdrhistogram::Histogram<u64>, b: &hdrhistogram::Histogram<u64>| {
            a == b || panic!("{} samples against {}", a.len(), b.len())
        };
        assert!(!total.latency.is_empty());
        assert!(same(&sum.latency, &total.latency));
        assert!(same(&sum.dispatch_lag, &total.dispatch_lag));
        // A merged entry's percentiles are its seconds' together; its rate their mean.
        let last = rows.last().unwrap();
        let mut merged = Histograms::new();
        let mut tx = 0.0;
        for i in last.start_s..last.start_s + 120 {
            let row = second(i, &mut h, &empty);
            merged.add(if sampled(i) { &h } else { &empty });
            tx += row.load.tx_bps;
        }
        assert!(!merged.latency.is_empty());
        assert_eq!(last.latency, Percentiles::of(&merged.latency));
        assert_eq!(last.lag_p99, Percentiles::of(&merged.dispatch_lag).p99);
        assert_eq!(last.load.tx_bps, tx / 120.0);
    }

    #[test]
    fn a_run_cut_short_ends_with_a_shorter_entry() {
        let mut s = Series::new(86_400 * 1_000_000_000);
        let (mut h, empty) = (Histograms::new(), Histograms::new());
        for i in 0..3_600 + 90 {
            let row = second(i, &mut h, &empty);
            s.push(row, if sampled(i) { &h } else { &empty });
        }
        let rows = s.finish();
        assert_eq!(rows.len(), 3_602);
        assert_eq!((rows[3_600].start_s, rows[3_600].len_s), (3_600, 60));
        assert_eq!((rows[3_601].start_s, rows[3_601].len_s), (3_660, 30));
    }
}
