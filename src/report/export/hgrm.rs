//! `--percentiles FILE`: the `.hgrm` percentile distribution in the layout of the
//! reference `outputPercentileDistribution` (Java, C and the plotters that read its
//! output, e.g. HdrHistogram's plotFiles.html and hdr-plot):
//!
//! ```text
//!        Value     Percentile TotalCount 1/(1-Percentile)
//!
//!        0.051 0.000000000000          1           1.00
//!        ...
//! #[Mean    =        0.093, StdDeviation   =        0.021]
//! #[Max     =        1.234, Total count    =       600000]
//! #[Buckets =           32, SubBuckets     =         2048]
//! ```
//!
//! Values are in milliseconds (the recorded nanoseconds divided by
//! [`VALUE_UNIT_RATIO`]), five percentile ticks per half distance as the reference's
//! default. The file holds two distributions, latency then service time, each under a
//! `#[Histogram: NAME]` comment line; plotters that take one distribution per file read
//! up to the first footer.

use super::{Exporter, IntervalView, OutputFile};
use crate::report::Report;
use hdrhistogram::Histogram;
use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::time::SystemTime;

/// Values are printed in ns / this: milliseconds.
pub const VALUE_UNIT_RATIO: f64 = 1_000_000.0;
/// Percentile ticks per half distance to 100% (the reference's default).
pub const TICKS_PER_HALF_DISTANCE: u32 = 5;

pub struct Hgrm {
    out: OutputFile,
}

impl Hgrm {
    pub fn create(path: &Path) -> io::Result<Hgrm> {
        Ok(Hgrm {
            out: OutputFile::create(path)?,
        })
    }
}

/// The distribution of `h` in the reference layout, values divided by `ratio`.
pub fn distribution(h: &Histogram<u64>, ratio: f64) -> String {
    let sig = h.sigfig() as usize;
    let mut s = format!(
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    if !h.is_empty() {
        for v in h.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
            total += v.count_since_last_iteration();
            let value = h.highest_equivalent(v.value_iterated_to()) as f64 / ratio;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                let _ = writeln!(
                    s,
                    "{value:>12.sig$} {q:>2.12} {total:>10} {:>14.2}",
                    1.0 / (1.0 - q)
                );
            } else {
                let _ = writeln!(s, "{value:>12.sig$} {q:>2.12} {total:>10}");
            }
        }
    }
    let (mean, sd, max) = if h.is_empty() {
        (0.0, 0.0, 0.0)
    } else {
        (h.mean() / ratio, h.stdev() / ratio, h.max() as f64 / ratio)
    };
    let _ = writeln!(
        s,
        "#[Mean    = {mean:>12.sig$}, StdDeviation   = {sd:>12.sig$}]"
    );
    let _ = writeln!(
        s,
        "#[Max     = {max:>12.sig$}, Total count    = {:>12}]",
        h.len()
    );
    let _ = writeln!(
        s,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        h.buckets(),
        sub_buckets(h.sigfig())
    );
    s
}

/// Sub-buckets per bucket for `sigfig` significant digits (2048 for 3), as the
/// reference computes it: the power of two above 2 x 10^sigfig.
fn sub_buckets(sigfig: u8) -> u64 {
    (2 * 10u64.pow(u32::from(sigfig))).next_power_of_two()
}

impl Exporter for Hgrm {
    fn start(&mut self, _start: SystemTime) -> io::Result<()> {
        Ok(())
    }

    fn interval(&mut self, _iv: &IntervalView) -> io::Result<()> {
        Ok(())
    }

    fn finish(mut self: Box<Self>, report: &Report) -> io::Result<()> {
        let h = &report.histograms;
        let w = self.out.writer();
        write!(
            w,
            "#[Histogram: latency (done - intended), milliseconds]\n{}",
            distribution(&h.latency, VALUE_UNIT_RATIO)
        )?;
        write!(
            w,
            "#[Histogram: service_time (done - sent), milliseconds]\n{}",
            distribution(&h.service, VALUE_UNIT_RATIO)
        )?;
        self.out.commit()
    }

    fn path(&self) -> &Path {
        self.out.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Histogram<u64> {
        let mut h = crate::metrics::Histograms::new().latency;
        for v in 1..=1000u64 {
            h.record(v * 10_000).unwrap();
        }
        h
    }

    #[test]
    fn layout_matches_the_reference() {
        let d = distribution(&sample(), VALUE_UNIT_RATIO);
        let lines: Vec<&str> = d.lines().collect();
        assert_eq!(
            lines[0],
            "       Value     Percentile TotalCount 1/(1-Percentile)"
        );
        assert_eq!(lines[1], "");
        assert_eq!(
            lines[2],
            "       0.010 0.000000000000          1           1.00"
        );
        let footer = &lines[lines.len() - 3..];
        assert!(
            footer[0].starts_with("#[Mean    =        5.00"),
            "{}",
            footer[0]
        );
        assert!(
            footer[1].ends_with("Total count    =         1000]"),
            "{}",
            footer[1]
        );
        assert!(
            footer[2].ends_with("SubBuckets     =         2048]"),
            "{}",
            footer[2]
        );
        // The last percentile line is 100% without the inverse column.
        let last = lines[lines.len() - 4];
        assert!(last.contains(" 1.000000000000       1000"), "{last}");
        assert_eq!(last.split_whitespace().count(), 3);
    }

    #[test]
    fn empty_histogram_has_header_and_footer() {
        let d = distribution(&crate::metrics::Histograms::new().latency, VALUE_UNIT_RATIO);
        assert!(d.contains("Total count    =            0]"));
    }
}
