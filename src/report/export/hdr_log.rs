//! `--hdr-log FILE`: the HdrHistogram interval log, as the reference Java
//! `HistogramLogWriter` writes it, so HdrHistogram's own tools (HistogramLogProcessor,
//! HdrHistogramVisualizer, hdr-plot, the libraries' log readers) read it:
//!
//! ```text
//! #[Logged with blaster 0.1.0]
//! #[Histogram log format version 1.3]
//! #[StartTime: 1700000000.123 (seconds since epoch), Tue Nov 14 22:13:20 UTC 2023]
//! #[BaseTime: 1700000000.123 (seconds since epoch)]
//! #[Values in nanoseconds; Interval_Max in milliseconds (max value unit ratio 1000000.0)]
//! "StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
//! Tag=latency,0.000,1.000,1.234,HISTFAAA...
//! ```
//!
//! Both StartTime and BaseTime are the schedule's time zero, so every interval's
//! timestamp is seconds since the start (three decimals). Every interval has one line
//! per histogram, tagged `latency` (done - intended), `service` (done - sent), `lag`
//! (dispatched - intended) and `wait` (sent - dispatched), empty ones included, so the
//! lines of a tag add up to the run's histogram. A frames run (`--workload frames`)
//! writes `lag` and then `frames.deviation`, `frames.jitter` and `frames.fanout`
//! ([`FRAME_TAGS`]), with the same rule; its frames are never answered, so the
//! request tags `latency`, `service` and `wait` ([`REQUEST_ONLY_TAGS`]), which would
//! only ever be empty, are left out. A `--mix` run ends with one line per entry, tagged
//! `mix.NAME` ([`mix_tag`]), spanning the whole run (start 0, length the duration): the
//! entries' latency histograms are kept per run, not per interval. The max column is the interval's max
//! divided by [`MAX_VALUE_UNIT_RATIO`] (ns -> ms, the Java writer's default). Payloads
//! are the compressed V2 encoding: the hdrhistogram crate's own writer omits the version
//! and legend lines and its example uses the uncompressed form, which other readers
//! reject, hence this writer.

use super::{Exporter, IntervalView, OutputFile};
use crate::report::Report;
use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The log format version written (the reference writer's current one: tags).
pub const FORMAT_VERSION: &str = "1.3";
/// Interval_Max is the max in ns divided by this: milliseconds.
pub const MAX_VALUE_UNIT_RATIO: f64 = 1_000_000.0;
/// The tags, in the order each interval's lines are written.
pub const TAGS: [&str; 4] = ["latency", "service", "lag", "wait"];
/// A frames run's tags, after [`TAGS`]: arrival deviation, jitter, fan-out completion
/// (docs/frames.md).
pub const FRAME_TAGS: [&str; 3] = ["frames.deviation", "frames.jitter", "frames.fanout"];
/// The tags of [`TAGS`] a frames run does not write: request figures it never has.
pub const REQUEST_ONLY_TAGS: [&str; 3] = ["latency", "service", "wait"];

pub struct HdrLog {
    out: OutputFile,
    /// `--workload frames`: the frame histograms too.
    frames: bool,
}

impl HdrLog {
    pub fn create(path: &Path, frames: bool) -> io::Result<HdrLog> {
        Ok(HdrLog {
            out: OutputFile::create(path)?,
            frames,
        })
    }
}

/// The header lines for a log whose intervals count from `start`.
pub fn header(start: SystemTime) -> String {
    let since = start.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = format!("{}.{:03}", since.as_secs(), since.subsec_millis());
    format!(
        "#[Logged with blaster {}]\n\
         #[Histogram log format version {FORMAT_VERSION}]\n\
         #[StartTime: {secs} (seconds since epoch), {}]\n\
         #[BaseTime: {secs} (seconds since epoch)]\n\
         #[Values in nanoseconds; Interval_Max in milliseconds (max value unit ratio {MAX_VALUE_UNIT_RATIO:.1})]\n\
         \"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n",
        env!("CARGO_PKG_VERSION"),
        java_date(since.as_secs())
    )
}

/// `Tue Nov 14 22:13:20 UTC 2023`: Java's `Date.toString()` in UTC, which the
/// reference writer puts after the StartTime.
pub fn java_date(epoch_secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = epoch_secs / 86_400;
    let rem = epoch_secs % 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{} {} {d:02} {:02}:{:02}:{:02} UTC {y}",
        DAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 -> (year, month 1..=12, day 1..=31), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The tag of a `--mix` entry's line: `mix.NAME`, with any character a log line's
/// syntax uses (comma, blank) replaced by `_`.
pub fn mix_tag(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c == ',' || c.is_whitespace() {
                '_'
            } else {
                c
            }
        })
        .collect();
    format!("mix.{safe}")
}

/// One interval line: `Tag=T,start,length,max,payload`.
pub fn line(tag: &str, start_s: f64, length_s: f64, max_ns: u64, payload: &str) -> String {
    format!(
        "Tag={tag},{start_s:.3},{length_s:.3},{:.3},{payload}\n",
        max_ns as f64 / MAX_VALUE_UNIT_RATIO
    )
}

impl Exporter for HdrLog {
    fn start(&mut self, start: SystemTime) -> io::Result<()> {
        self.out.writer().write_all(header(start).as_bytes())?;
        self.out.flush()
    }

    fn interval(&mut self, iv: &IntervalView) -> io::Result<()> {
        let (start, len) = iv.span_s();
        let h = iv.histograms;
        let e = iv.encoded;
        let parts = [
            (&h.latency, &e.latency),
            (&h.service, &e.service_time),
            (&h.dispatch_lag, &e.dispatch_lag),
            (&h.connection_wait, &e.connection_wait),
        ];
        let w = self.out.writer();
        // The histogram's max is the highest value equivalent to the largest recorded
        // (as Java's getMaxValue); 0 for an empty interval.
        let max =
            |hist: &hdrhistogram::Histogram<u64>| if hist.is_empty() { 0 } else { hist.max() };
        for (tag, (hist, payload)) in TAGS.iter().zip(parts) {
            if self.frames && REQUEST_ONLY_TAGS.contains(tag) {
                continue;
            }
            w.write_all(line(tag, start, len, max(hist), payload).as_bytes())?;
        }
        if self.frames {
            // Encoded here, once per interval (the JSON's intervals carry only the
            // frames' p99), on the collector thread.
            let frames = [&h.frame_deviation, &h.frame_jitter, &h.frame_fanout];
            for (tag, hist) in FRAME_TAGS.iter().zip(frames) {
                let payload = crate::report::hdr::encode(hist);
                w.write_all(line(tag, start, len, max(hist), &payload).as_bytes())?;
            }
        }
        self.out.flush()
    }

    fn finish(mut self: Box<Self>, report: &Report) -> io::Result<()> {
        // `--mix` entries: the workers keep each entry's latency histogram over the
        // whole run (not per interval), so each entry gets one line spanning the run.
        let len = report.duration_s;
        for e in report.mix.iter().flatten() {
            let h = &e.latency_histogram;
            let max = if h.is_empty() { 0 } else { h.max() };
            let payload = crate::report::hdr::encode(h);
            let tag = mix_tag(&e.name);
            self.out
                .writer()
                .write_all(line(&tag, 0.0, len, max, &payload).as_bytes())?;
        }
        self.out.commit()
    }

    fn path(&self) -> &Path {
        self.out.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn mix_tags_keep_the_line_syntax() {
        assert_eq!(mix_tag("get"), "mix.get");
        assert_eq!(mix_tag("a,b c"), "mix.a_b_c");
    }

    #[test]
    fn dates_as_java_prints_them() {
        assert_eq!(java_date(0), "Thu Jan 01 00:00:00 UTC 1970");
        assert_eq!(java_date(1_700_000_000), "Tue Nov 14 22:13:20 UTC 2023");
        // A leap day.
        assert_eq!(java_date(951_782_400), "Tue Feb 29 00:00:00 UTC 2000");
    }

    #[test]
    fn header_has_version_times_and_legend() {
        let h = header(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123));
        let lines: Vec<&str> = h.lines().collect();
        assert_eq!(lines[1], "#[Histogram log format version 1.3]");
        assert_eq!(
            lines[2],
            "#[StartTime: 1700000000.123 (seconds since epoch), Tue Nov 14 22:13:20 UTC 2023]"
        );
        assert_eq!(
            lines[3],
            "#[BaseTime: 1700000000.123 (seconds since epoch)]"
        );
        assert_eq!(
            lines[5],
            "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
        );
    }

    #[test]
    fn lines_have_three_decimals_and_max_in_ms() {
        assert_eq!(
            line("latency", 3.0, 1.0, 1_234_567, "HISTx"),
            "Tag=latency,3.000,1.000,1.235,HISTx\n"
        );
    }

    #[test]
    fn the_crates_reader_parses_the_header_and_lines() {
        use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
        let mut h = crate::metrics::Histograms::new().latency;
        h.record(2_000_000).unwrap();
        let payload = crate::report::hdr::encode(&h);
        let log = header(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
            + &line("latency", 0.0, 1.0, h.max(), &payload);
        let entries: Vec<_> = IntervalLogIterator::new(log.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        assert!(matches!(entries[0], LogEntry::StartTime(_)));
        assert!(matches!(entries[1], LogEntry::BaseTime(_)));
        let LogEntry::Interval(i) = &entries[2] else {
            panic!("{:?}", entries[2])
        };
        assert_eq!(i.tag().unwrap().as_str(), "latency");
        let back = crate::report::hdr::decode(i.encoded_histogram()).unwrap();
        assert_eq!(back.len(), 1);
    }
}
