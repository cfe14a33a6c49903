//! Exporters: files written beside the report, one format per file behind one trait
//! (after hyperfine's exporters). Each is opened when the run is planned, so an
//! unwritable path fails before anything connects (exit 1); it is then fed every
//! interval as the collector completes it, so a run that dies still leaves its data in
//! `FILE.partial`; [`Exporter::finish`] writes the rest and renames the file into place,
//! so a reader never sees half a file under the final name. `-` means stdout, where the
//! text report then does not go (see [`Outputs::stdout_taken`]).
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
use std::fs::File;
use std::io::{self, BufWriter, Write};
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

/// An output file opened at plan time: `-` is stdout; anything else is written to
/// `PATH.partial` and renamed to PATH by [`OutputFile::commit`].
pub struct OutputFile {
    path: PathBuf,
    out: Out,
    /// Something was written: an uncommitted file is then kept as the run's partial
    /// data; an empty one (the run failed before it started) is removed on drop.
    written: bool,
}

enum Out {
    Stdout(io::Stdout),
    File { tmp: PathBuf, w: BufWriter<File> },
}

/// Where an output file is written while the run goes: `PATH.partial`.
pub fn partial_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    PathBuf::from(tmp)
}

impl OutputFile {
    /// Opens `path` for writing (`-` = stdout). Fails now, with the OS's reason, when the
    /// directory is missing or not writable, or when `path` is a directory.
    pub fn create(path: &Path) -> io::Result<OutputFile> {
        if is_stdout(path) {
            return Ok(OutputFile {
                path: path.to_path_buf(),
                out: Out::Stdout(io::stdout()),
                written: false,
            });
        }
        if path.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory",
            ));
        }
        let tmp = partial_path(path);
        let file = File::create(&tmp)?;
        Ok(OutputFile {
            path: path.to_path_buf(),
            out: Out::File {
                tmp,
                w: BufWriter::new(file),
            },
            written: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes what was written so far, so a crash leaves it in `PATH.partial`.
    pub fn flush(&mut self) -> io::Result<()> {
        self.writer().flush()
    }

    pub fn writer(&mut self) -> &mut dyn Write {
        self.written = true;
        match &mut self.out {
            Out::Stdout(s) => s,
            Out::File { w, .. } => w,
        }
    }

    /// Flushes and renames the file into place (stdout: flushes).
    pub fn commit(mut self) -> io::Result<()> {
        self.flush()?;
        // Committed: nothing for drop to clean up, whatever happens below.
        self.written = true;
        match &mut self.out {
            Out::Stdout(_) => Ok(()),
            Out::File { tmp, w } => {
                w.get_ref().sync_all()?;
                std::fs::rename(tmp, &self.path)
            }
        }
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let Out::File { tmp, .. } = &self.out
            && !self.written
        {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Whether `path` means stdout.
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_file_appears_only_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.txt");
        let mut f = OutputFile::create(&p).unwrap();
        writeln!(f.writer(), "hello").unwrap();
        f.flush().unwrap();
        assert!(!p.exists());
        assert_eq!(
            std::fs::read_to_string(partial_path(&p)).unwrap(),
            "hello\n"
        );
        f.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "hello\n");
        assert!(!partial_path(&p).exists());
    }

    #[test]
    fn an_unused_output_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.txt");
        drop(OutputFile::create(&p).unwrap());
        assert!(!partial_path(&p).exists() && !p.exists());
        // Written but not committed (a run cut short): the partial data stays.
        let mut f = OutputFile::create(&p).unwrap();
        write!(f.writer(), "x").unwrap();
        f.flush().unwrap();
        drop(f);
        assert!(partial_path(&p).exists());
    }

    #[test]
    fn unwritable_paths_fail_at_open() {
        let dir = tempfile::tempdir().unwrap();
        assert!(OutputFile::create(&dir.path().join("missing/out.txt")).is_err());
        assert!(OutputFile::create(dir.path()).is_err());
    }
}
