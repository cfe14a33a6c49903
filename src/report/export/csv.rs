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
//!
//! A frames run (`--workload frames`) appends [`FRAME_COLUMNS`] (the JSON's
//! `intervals[].frames`: frames up and down per second, the retention, late and lost
//! frames as counted in the interval, the arrival deviation's percentiles and the
//! connections up) and leaves the latency columns empty: frames are never answered,
//! so there is no request latency to print (a 0 would read as an instant answer).
//!
//! The run's confidence intervals are whole-run figures, not a column of the series:
//! when the run ends they go to a second file beside it, the path with `.ci.csv` for
//! its extension (`r.csv` -> `r.ci.csv`; not written when FILE is a stream such as
//! `-`), one row per figure ([`CI_HEADER`]): each percentile of the four per-request
//! histograms, the achieved rate and the error ratio, with the estimate, the ends,
//! the level, and the reason when there is no interval (the ends then empty).
//!
//! With several `--target`, each destination's whole-run figures go to a third file,
//! `.targets.csv` (`r.csv` -> `r.targets.csv`; not for a stream), one row per target
//! in `--target` order and a last row `total` ([`TARGETS_HEADER`]): requests sent,
//! completed and failed, the achieved rate, the latency percentiles (ns, from the
//! intended send) and the errors by kind as `kind=n` joined by `;`.

use super::{Exporter, IntervalView, OutputFile};
use crate::report::frames::FrameInterval;
use crate::report::{Percentiles, Report};
use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

pub const HEADER: &str = "time_s,epoch_s,duration_s,intended_rps,achieved_rps,\
latency_p50_ns,latency_p90_ns,latency_p99_ns,latency_p999_ns,latency_max_ns,errors,\
dispatch_lag_p99_ns,core_load,link_utilization";

/// The header of the `.ci.csv` file.
pub const CI_HEADER: &str = "figure,percentile,value,low,high,level,note";

/// The header of the `.targets.csv` file.
pub const TARGETS_HEADER: &str = "target,sent,completed,errors,achieved_rps,latency_p50_ns,\
latency_p90_ns,latency_p99_ns,latency_p999_ns,latency_max_ns,errors_by_kind";

/// Where the `.targets.csv` of `path` goes.
pub fn targets_path(path: &Path) -> std::path::PathBuf {
    path.with_extension("targets.csv")
}

/// The `.targets.csv` text of `r`: empty with fewer than two targets.
pub fn targets_rows(r: &Report) -> String {
    use std::collections::BTreeMap;
    if r.targets.len() < 2 {
        return String::new();
    }
    let line = |name: &str, n: [u64; 3], rps: f64, p: &Percentiles, k: &BTreeMap<_, u64>| {
        let kinds: Vec<String> = k.iter().map(|(k, n)| format!("{k}={n}")).collect();
        format!(
            "{name},{},{},{},{rps:.1},{},{},{},{},{},{}\n",
            n[0],
            n[1],
            n[2],
            p.p50,
            p.p90,
            p.p99,
            p.p999,
            p.max,
            kinds.join(";")
        )
    };
    let mut s = format!("{TARGETS_HEADER}\n");
    for t in &r.targets {
        let n = [t.sent, t.completed, t.errors];
        s += &line(
            &t.address,
            n,
            t.achieved_rps,
            &t.latency_ns,
            &t.errors_by_kind,
        );
    }
    let q = &r.requests;
    let n = [q.sent, q.completed, q.errors];
    s += &line(
        "total",
        n,
        r.rate.achieved_rps,
        &r.latency_ns.p,
        &r.errors_by_kind,
    );
    s
}

/// Where the `.ci.csv` of `path` goes.
pub fn ci_path(path: &Path) -> std::path::PathBuf {
    path.with_extension("ci.csv")
}

/// The `.ci.csv` text of `r` (empty when it has no intervals).
pub fn ci_rows(r: &Report) -> String {
    let Some(run) = &r.ci else {
        return String::new();
    };
    let mut s = format!("{CI_HEADER}\n");
    let level = run.level;
    let hists = [
        ("latency_ns", Some(&r.latency_ns)),
        ("service_time_ns", Some(&r.service_time_ns)),
        ("dispatch_lag_ns", r.dispatch_lag_ns.as_ref()),
        ("connection_wait_ns", Some(&r.connection_wait_ns)),
    ];
    for (name, h) in hists {
        let Some(h) = h else { continue };
        let Some(ci) = &h.ci else { continue };
        let points = [h.p50, h.p90, h.p99, h.p999, h.p9999];
        for ((key, _), v) in crate::report::ci::QUANTILES.iter().zip(points) {
            let (low, high, note) = match ci.get(key) {
                Ok(x) => (x.low.to_string(), x.high.to_string(), String::new()),
                Err(why) => (String::new(), String::new(), why.replace(',', ";")),
            };
            s += &format!("{name},{key},{v},{low},{high},{level},{note}\n");
        }
    }
    let ended = (r.requests.completed + r.requests.errors).max(1);
    let figures = [
        ("achieved_rps", r.rate.achieved_rps, run.achieved_rps),
        (
            "error_ratio",
            r.requests.errors as f64 / ended as f64,
            run.error_ratio,
        ),
    ];
    for (name, v, range) in figures {
        let (low, high, note) = match range {
            Some(x) => (x.low.to_string(), x.high.to_string(), String::new()),
            None => (
                String::new(),
                String::new(),
                run.reasons
                    .get(name)
                    .cloned()
                    .unwrap_or_default()
                    .replace(',', ";"),
            ),
        };
        s += &format!("{name},,{v},{low},{high},{level},{note}\n");
    }
    s
}

/// The columns a frames run appends to [`HEADER`].
pub const FRAME_COLUMNS: &str = "frames_up_fps,frames_down_fps,frames_retention,frames_late,\
frames_lost,frames_deviation_p50_ns,frames_deviation_p99_ns,frames_deviation_p999_ns,\
frames_deviation_max_ns,frames_connections_active";

pub struct Csv {
    out: OutputFile,
    start_epoch_s: f64,
    /// `--workload frames`: [`FRAME_COLUMNS`] too, and no latency.
    frames: bool,
}

impl Csv {
    pub fn create(path: &Path, frames: bool) -> io::Result<Csv> {
        Ok(Csv {
            out: OutputFile::create(path)?,
            start_epoch_s: 0.0,
            frames,
        })
    }
}

/// The header line (without the newline).
pub fn header(frames: bool) -> String {
    if frames {
        format!("{HEADER},{FRAME_COLUMNS}")
    } else {
        HEADER.to_string()
    }
}

/// One row (without the newline); `frames`: a frames run's.
pub fn row(iv: &IntervalView, start_epoch_s: f64, frames: bool) -> String {
    let r = iv.row;
    let lat = if frames {
        ",,,,".to_string() // never answered: no latency
    } else {
        let l = Percentiles::of(&iv.histograms.latency);
        format!("{},{},{},{},{}", l.p50, l.p90, l.p99, l.p999, l.max)
    };
    let link = r
        .link_utilization
        .map_or(String::new(), |u| format!("{u:.4}"));
    let mut line = format!(
        "{},{:.3},{:.3},{:.1},{:.1},{lat},{},{},{:.3},{link}",
        r.second,
        start_epoch_s + r.second as f64,
        r.duration_s,
        r.intended_rps,
        r.achieved_rps,
        r.errors,
        r.dispatch_lag_p99_ns,
        r.core_load,
    );
    if frames {
        line.push(',');
        line.push_str(&frame_cells(r.frames.as_ref()));
    }
    line
}

/// A frames run's cells of [`FRAME_COLUMNS`]; an interval without frame figures (none
/// is) gets empty cells.
fn frame_cells(f: Option<&FrameInterval>) -> String {
    let Some(f) = f else {
        return ",".repeat(FRAME_COLUMNS.split(',').count() - 1);
    };
    format!(
        "{:.1},{:.1},{:.6},{},{},{},{},{},{},{}",
        f.up_fps,
        f.down_fps,
        f.retention,
        f.late,
        f.lost,
        f.deviation_p50_ns,
        f.deviation_p99_ns,
        f.deviation_p999_ns,
        f.deviation_max_ns,
        f.connections_active
    )
}

impl Exporter for Csv {
    fn start(&mut self, start: SystemTime) -> io::Result<()> {
        self.start_epoch_s = start
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        writeln!(self.out.writer(), "{}", header(self.frames))?;
        self.out.flush()
    }

    fn interval(&mut self, iv: &IntervalView) -> io::Result<()> {
        let line = row(iv, self.start_epoch_s, self.frames);
        writeln!(self.out.writer(), "{line}")?;
        self.out.flush()
    }

    fn finish(self: Box<Self>, report: &Report) -> io::Result<()> {
        let path = self.out.path().to_path_buf();
        self.out.commit()?;
        for (rows, side) in [
            (ci_rows(report), ci_path(&path)),
            (targets_rows(report), targets_path(&path)),
        ] {
            if !rows.is_empty() && crate::report::output::is_rewritable(&path) {
                // Whole or not at all, as every output (a temporary renamed over it).
                crate::report::output::Pending::claim(&side)
                    .and_then(|p| p.commit(rows.as_bytes()))
                    .map_err(io::Error::other)?;
            }
        }
        Ok(())
    }

    fn path(&self) -> &Path {
        self.out.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Counters, Histograms};
    use crate::report::Interval;
    use crate::report::hdr::Encoded4;

    fn csv_of(frames: bool, r: &Interval, h: &Histograms) -> (Vec<String>, Vec<String>) {
        let counters = Counters::default();
        let encoded = Encoded4::default();
        let iv = IntervalView {
            row: r,
            histograms: h,
            counters: &counters,
            encoded: &encoded,
        };
        let split = |s: String| s.split(',').map(str::to_string).collect::<Vec<_>>();
        (
            split(header(frames)),
            split(row(&iv, 1_700_000_000.0, frames)),
        )
    }

    /// A frames run: the frame columns after the request ones, filled from
    /// `intervals[].frames`, and no latency (a 0 would read as an instant answer).
    #[test]
    fn a_frames_row_has_frame_columns_and_no_latency() {
        let mut h = Histograms::new();
        h.latency.record(5).unwrap(); // ignored: a frames run has no latency
        let row = Interval {
            second: 2,
            duration_s: 1.0,
            frames: Some(FrameInterval {
                up_fps: 5_000.0,
                down_fps: 44_550.0,
                retention: 0.99,
                late: 7,
                lost: 450,
                deviation_p50_ns: 1_500_000,
                deviation_p99_ns: 8_300_000,
                deviation_p999_ns: 16_000_000,
                deviation_max_ns: 19_000_000,
                connections_active: 100,
                ..FrameInterval::default()
            }),
            ..Interval::default()
        };
        let (head, cells) = csv_of(true, &row, &h);
        assert_eq!(head.len(), cells.len());
        let at = |name: &str| cells[head.iter().position(|c| c == name).unwrap()].clone();
        assert_eq!(at("latency_p50_ns"), "");
        assert_eq!(at("latency_max_ns"), "");
        assert_eq!(at("frames_up_fps"), "5000.0");
        assert_eq!(at("frames_down_fps"), "44550.0");
        assert_eq!(at("frames_retention"), "0.990000");
        assert_eq!(at("frames_late"), "7");
        assert_eq!(at("frames_lost"), "450");
        assert_eq!(at("frames_deviation_p99_ns"), "8300000");
        assert_eq!(at("frames_deviation_max_ns"), "19000000");
        assert_eq!(at("frames_connections_active"), "100");
        // A request run: the header and latency as ever.
        let (head, cells) = csv_of(false, &row, &h);
        assert_eq!(head.join(","), HEADER);
        assert_eq!(head.len(), cells.len());
        assert_eq!(cells[5], "5");
    }
}
