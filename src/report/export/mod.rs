//! Exporters: files written beside the report, one format per file behind one trait
//! (after hyperfine's exporters). Each is opened when the run is planned, so an
//! unwritable path fails before anything connects (exit 1); it is then fed every
//! interval as the collector completes it (to a temporary beside the file, see
//! [`crate::report::output`]); [`Exporter::finish`] writes the rest and renames it into
//! place, so a reader never sees half a file under the final name, and a run that
//! cannot finish leaves none. `-` means stdout, where the text report then does not go.
//!
//! - [`hdr_log::HdrLog`]: `--hdr-log`, the HdrHistogram interval log.
//! - [`hgrm::Hgrm`]: `--percentiles`, the `.hgrm` percentile distribution.
//! - [`csv::Csv`]: `--csv`, one row per interval.
//! - [`metrics_server::LiveMetrics`]: `--metrics-listen`, the Prometheus exposition
//!   ([`prometheus`]) served over HTTP instead of written to a file.

pub mod csv;
pub mod hdr_log;
pub mod hgrm;
pub mod metrics_request;
pub mod metrics_server;
pub mod prometheus;

use crate::metrics::{Counters, Histograms};
use crate::report::hdr::Encoded4;
use crate::report::{Interval, Report};
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// One completed interval, as the collector merged it from every worker.
pub struct IntervalView<'a> {
    /// The report's row for it: rates, percentiles, load.
    pub row: &'a Interval,
    /// Its merged histograms (ns) and counters.
    pub histograms: &'a Histograms,
    pub counters: &'a Counters,
    /// The same histograms encoded (computed once for the JSON and every exporter).
    pub encoded: &'a Encoded4,
}

impl IntervalView<'_> {
    /// Seconds from the schedule's start to the interval's start and its length.
    pub fn span_s(&self) -> (f64, f64) {
        (self.row.second as f64, self.row.duration_s)
    }
}

/// A format written as the run goes.
pub trait Exporter {
    /// The schedule's time zero, on the wall clock (before the first interval).
    fn start(&mut self, start: SystemTime) -> io::Result<()>;
    /// One completed interval, in order.
    fn interval(&mut self, iv: &IntervalView) -> io::Result<()>;
    /// The run's report: write what remains and put the file in place.
    fn finish(self: Box<Self>, report: &Report) -> io::Result<()>;
    /// The path as the user gave it, for error messages.
    fn path(&self) -> &Path;
}

pub use crate::report::output::OutputFile;

/// Every exporter of a run, fed by the collector. A write that fails mid-run is kept
/// (the run goes on: its other outputs are still worth having) and returned by
/// [`Outputs::finish`].
#[derive(Default)]
pub struct Outputs {
    exporters: Vec<Box<dyn Exporter>>,
    failed: Option<(PathBuf, io::Error)>,
}

impl Outputs {
    pub fn none() -> Outputs {
        Outputs::default()
    }

    pub fn push(&mut self, e: Box<dyn Exporter>) {
        self.exporters.push(e);
    }

    pub fn is_empty(&self) -> bool {
        self.exporters.is_empty()
    }

    fn note(&mut self, path: &Path, r: io::Result<()>) {
        if let Err(e) = r
            && self.failed.is_none()
        {
            self.failed = Some((path.to_path_buf(), e));
        }
    }

    pub fn start(&mut self, start: SystemTime) {
        let results: Vec<_> = self
            .exporters
            .iter_mut()
            .map(|e| (e.path().to_path_buf(), e.start(start)))
            .collect();
        for (p, r) in results {
            self.note(&p, r);
        }
    }

    pub fn interval(&mut self, iv: &IntervalView) {
        let results: Vec<_> = self
            .exporters
            .iter_mut()
            .map(|e| (e.path().to_path_buf(), e.interval(iv)))
            .collect();
        for (p, r) in results {
            self.note(&p, r);
        }
    }

    /// Finishes every exporter; the first failure (mid-run or now) names its path.
    pub fn finish(mut self, report: &Report) -> Result<(), (PathBuf, io::Error)> {
        for e in std::mem::take(&mut self.exporters) {
            let p = e.path().to_path_buf();
            let r = e.finish(report);
            self.note(&p, r);
        }
        match self.failed {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }
}

/// Seconds as the interval log and the CSV print them: three decimals.
pub fn secs3(s: f64) -> String {
    format!("{s:.3}")
}
