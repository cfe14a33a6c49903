//! `--csv FILE`: one row per interval (second) of the run, written as each interval
//! completes:
//!
//! ```text
//! time_s,epoch_s,duration_s,intended_rps,achieved_rps,latency_p50_ns,latency_p90_ns,latency_p99_ns,latency_p999_ns,latency_max_ns,errors,dispatch_lag_p99_ns,core_load,link_utilization
//! 0,1700000000.123,1.000,20000.0,19998.0,41231,52100,80127,150015,301247,0,3100,0.412,
//! ```
//!
//! `time_s` is the interval's start in seconds since the schedule's start, `epoch_s` the
//! same instant on the wall clock (seconds since the epoch, three decimals) to line it up
//! with other monitoring. Durations are nanoseconds as in the JSON; `core_load` is the
//! busiest generator core's load (0..1, the JSON's `intervals[].core_load`) and
//! `link_utilization` max(tx, rx) over the link speed, empty without a link speed
//! (loopback). Plain RFC 4180: no quoting is ever needed.

use super::{Exporter, IntervalView, OutputFile};
use crate::report::{Percentiles, Report};
use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

pub const HEADER: &str = "time_s,epoch_s,duration_s,intended_rps,achieved_rps,\
latency_p50_ns,latency_p90_ns,latency_p99_ns,latency_p999_ns,latency_max_ns,errors,\
dispatch_lag_p99_ns,core_load,link_utilization";

pub struct Csv {
    out: OutputFile,
    start_epoch_s: f64,
}

impl Csv {
    pub fn create(path: &Path) -> io::Result<Csv> {
        Ok(Csv {
            out: OutputFile::create(path)?,
            start_epoch_s: 0.0,
        })
    }
}

/// One row (without the newline).
pub fn row(iv: &IntervalView, start_epoch_s: f64) -> String {
    let r = iv.row;
    let lat = Percentiles::of(&iv.histograms.latency);
    let link = r
        .link_utilization
        .map_or(String::new(), |u| format!("{u:.4}"));
    format!(
        "{},{:.3},{:.3},{:.1},{:.1},{},{},{},{},{},{},{},{:.3},{link}",
        r.second,
        start_epoch_s + r.second as f64,
        r.duration_s,
        r.intended_rps,
        r.achieved_rps,
        lat.p50,
        lat.p90,
        lat.p99,
        lat.p999,
        lat.max,
        r.errors,
        r.dispatch_lag_p99_ns,
        r.core_load,
    )
}

impl Exporter for Csv {
    fn start(&mut self, start: SystemTime) -> io::Result<()> {
        self.start_epoch_s = start
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        writeln!(self.out.writer(), "{HEADER}")?;
        self.out.flush()
    }

    fn interval(&mut self, iv: &IntervalView) -> io::Result<()> {
        let line = row(iv, self.start_epoch_s);
        writeln!(self.out.writer(), "{line}")?;
        self.out.flush()
    }

    fn finish(self: Box<Self>, _report: &Report) -> io::Result<()> {
        self.out.commit()
    }

    fn path(&self) -> &Path {
        self.out.path()
    }
}
