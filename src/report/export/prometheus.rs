//! The Prometheus text exposition (format 0.0.4) of a run so far: what `--metrics-listen`
//! serves at `/metrics` (the server is [`super::metrics_server`]). Pure: the collector's
//! completed intervals go in ([`Cumulative::add`]), text comes out ([`Cumulative::render`]).
//!
//! Latency, service time and dispatch lag are Prometheus **histograms** with cumulative
//! `le` buckets on one fixed ladder ([`LADDER_NS`]), in seconds, counted since the start
//! of the run. They come from the run's merged HdrHistograms, so the buckets of several
//! shards (or machines) add up exactly, and
//! `histogram_quantile(0.99, sum by (le) (rate(blaster_latency_seconds_bucket[1m])))`
//! is a correct merged percentile. Summaries are not used: their quantiles cannot be
//! combined, the same rule as never averaging percentiles.
//!
//! A recorded HdrHistogram bucket goes to the first ladder bound at or above its highest
//! equivalent value (the value HdrHistogram reports for a percentile that falls in it),
//! so the JSON's p99 lies in the ladder bucket where `histogram_quantile` finds the
//! 99th percentile. A bound is exact to HdrHistogram's resolution (0.1%).
//!
//! A frames run (`--workload frames`) adds its counters (`blaster_frames_*_total`:
//! sent, received, lost, late, not sent, duplicates, reordered, stale, foreign,
//! disconnects), the retention so far, the last interval's frames per second up and
//! down and connections up, and the arrival deviation, jitter and fan-out completion
//! as histograms on the same ladder (docs/metrics.md).
//!
//! Written by hand rather than with the `prometheus-client` crate: that crate encodes
//! OpenMetrics from metrics it observes itself, and exposing histograms that are
//! already merged would need its collector traits implemented over the same bucket
//! code as here; the text format is a few lines, tested below.

use super::IntervalView;
use crate::engine::recorder::FrameCounters;
use crate::limits::{HISTOGRAM_NS_MAX, HISTOGRAM_SIGFIG};
use crate::metrics::{Counters, ErrorKind};
use crate::report::frames::FrameInterval;
use hdrhistogram::Histogram;
use std::fmt::Write;

/// The bucket ladder, ns: 1-2-5 per decade from 1 us to 100 s (25 bounds, then
/// `+Inf`). Every shard and every run uses the same one, so buckets can be summed.
pub const LADDER_NS: [u64; 25] = [
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
    20_000_000_000,
    50_000_000_000,
    100_000_000_000,
];

/// The `Content-Type` of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The labels every sample carries: the run's id (`--run-id` or derived) and its shard
/// (`i/N`, `0/1` for a single machine).
#[derive(Debug, Clone)]
pub struct Labels {
    pub run_id: String,
    pub shard: String,
}

/// The run so far: histograms and counters summed over every completed interval, and
/// the gauges of the last one.
pub struct Cumulative {
    pub latency: Histogram<u64>,
    pub service: Histogram<u64>,
    pub dispatch_lag: Histogram<u64>,
    pub counters: Counters,
    /// The last completed interval's intended and achieved requests per second.
    pub intended_rps: f64,
    pub achieved_rps: f64,
    /// The last completed interval's busiest generator core (0..1).
    pub core_load: f64,
    /// The last completed interval's largest share of a generator core the
    /// hypervisor stole (0..1).
    pub steal: f64,
    /// The run has ended: what is served now is its final state.
    pub finished: bool,
    /// `--workload frames`: the frame families are rendered, with the arrival
    /// deviation summed here.
    pub frames: bool,
    pub frame_deviation: Histogram<u64>,
    pub frame_jitter: Histogram<u64>,
    pub frame_fanout: Histogram<u64>,
    /// The last completed interval's frame figures (its rates and connections up).
    pub frame_interval: FrameInterval,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HISTOGRAM_NS_MAX, HISTOGRAM_SIGFIG)
        .expect("constant histogram bounds are valid")
}

impl Default for Cumulative {
    fn default() -> Self {
        Cumulative {
            latency: histogram(),
            service: histogram(),
            dispatch_lag: histogram(),
            counters: Counters::default(),
            intended_rps: 0.0,
            achieved_rps: 0.0,
            core_load: 0.0,
            steal: 0.0,
            finished: false,
            frames: false,
            frame_deviation: histogram(),
            frame_jitter: histogram(),
            frame_fanout: histogram(),
            frame_interval: FrameInterval::default(),
        }
    }
}

impl Cumulative {
    /// Adds one completed interval (the collector hands them over in order).
    pub fn add(&mut self, iv: &IntervalView) {
        let h = iv.histograms;
        // Same bounds as the workers' histograms, so adding cannot fail; a value that
        // did not fit would have been clamped by the recorder already.
        let _ = self.latency.add(&h.latency);
        let _ = self.service.add(&h.service);
        let _ = self.dispatch_lag.add(&h.dispatch_lag);
        if self.frames {
            let _ = self.frame_deviation.add(&h.frame_deviation);
            let _ = self.frame_jitter.add(&h.frame_jitter);
            let _ = self.frame_fanout.add(&h.frame_fanout);
            if let Some(f) = &iv.row.frames {
                self.frame_interval = f.clone();
            }
        }
        self.counters.add(iv.counters);
        self.intended_rps = iv.row.intended_rps;
        self.achieved_rps = iv.row.achieved_rps;
        self.core_load = iv.row.core_load;
        self.steal = iv.row.steal;
    }

    /// The exposition text of the state so far.
    pub fn render(&self, labels: &Labels) -> String {
        let c = &self.counters;
        let mut x = Exposition::new(labels);
        x.family(
            "blaster_requests_dispatched_total",
            "counter",
            "Requests whose intended send time has come (the timetable's count).",
        );
        x.sample("blaster_requests_dispatched_total", &[], c.dispatched);
        x.family(
            "blaster_requests_total",
            "counter",
            "Requests by how they ended: completed, error (a request error of any kind), \
             cut_off (by the end of the run or Ctrl-C; not an error).",
        );
        for (outcome, n) in [
            ("completed", c.completed),
            ("error", c.request_errors()),
            ("cut_off", c.cut_off),
        ] {
            x.sample("blaster_requests_total", &[("outcome", outcome)], n);
        }
        x.family(
            "blaster_errors_total",
            "counter",
            "Failed requests by kind (each counted under one kind: they add up to \
             outcome=\"error\").",
        );
        for k in ErrorKind::ALL {
            x.sample(
                "blaster_errors_total",
                &[("kind", k.name())],
                c.errors_of(k),
            );
        }
        x.family(
            "blaster_connection_events_total",
            "counter",
            "Failures that failed no request, by kind: refused or failed connects and \
             handshakes no request was waiting for, unsolicited response bytes.",
        );
        for k in ErrorKind::ALL {
            x.sample(
                "blaster_connection_events_total",
                &[("kind", k.name())],
                c.events_of(k),
            );
        }
        for (name, help, v) in [
            (
                "blaster_sent_bytes_total",
                "Bytes of requests sent.",
                c.bytes_sent,
            ),
            (
                "blaster_received_bytes_total",
                "Bytes of responses received.",
                c.bytes_received,
            ),
            (
                "blaster_connections_opened_total",
                "Connections established (first opens and reopens).",
                c.connections_opened,
            ),
            (
                "blaster_connections_failed_total",
                "Connection attempts that failed.",
                c.connections_failed,
            ),
        ] {
            x.family(name, "counter", help);
            x.sample(name, &[], v);
        }
        self.render_gauges(&mut x);
        x.histogram(
            "blaster_latency_seconds",
            "Latency: response done minus intended send time (what a user of the target sees).",
            &self.latency,
        );
        x.histogram(
            "blaster_service_time_seconds",
            "Service time: response done minus actual send (what closed-loop tools report).",
            &self.service,
        );
        x.histogram(
            "blaster_dispatch_lag_seconds",
            "Dispatch lag: handled by the worker loop minus intended send time (the generator's health).",
            &self.dispatch_lag,
        );
        if self.frames {
            self.render_frames(&mut x);
        }
        x.out
    }

    /// The run's gauges: the last interval's rates and load, and whether it ended.
    fn render_gauges(&self, x: &mut Exposition) {
        for (name, help, v) in [
            (
                "blaster_intended_requests_per_second",
                "The rate the timetable intended in the last completed interval (this shard's share).",
                self.intended_rps,
            ),
            (
                "blaster_achieved_requests_per_second",
                "Responses completed per second in the last completed interval.",
                self.achieved_rps,
            ),
            (
                "blaster_generator_core_load_ratio",
                "Load of the busiest generator core in the last completed interval (0..1).",
                self.core_load,
            ),
            (
                "blaster_generator_steal_ratio",
                "Largest share of a generator core the hypervisor took for something else \
                 (steal) in the last completed interval (0..1).",
                self.steal,
            ),
            (
                "blaster_run_finished",
                "1 once the run has ended: the values are final.",
                if self.finished { 1.0 } else { 0.0 },
            ),
        ] {
            x.family(name, "gauge", help);
            x.sample(name, &[], Float(v));
        }
    }

    /// The frame families (docs/metrics.md, docs/frames.md).
    fn render_frames(&self, x: &mut Exposition) {
        for (name, help, v) in frame_counters(&self.counters.frames) {
            x.family(name, "counter", help);
            x.sample(name, &[], v);
        }
        self.render_frame_gauges(x);
        self.render_frame_histograms(x);
    }

    fn render_frame_histograms(&self, x: &mut Exposition) {
        x.histogram(
            "blaster_frame_deviation_seconds",
            "Frame arrival deviation: receive instant minus the frame's intended send \
             instant (with --aggregate, minus the server tick's expected arrival).",
            &self.frame_deviation,
        );
        x.histogram(
            "blaster_frame_jitter_seconds",
            "Frame jitter: the inter-arrival of consecutive frames from one source at one \
             receiver, minus the tick, absolute.",
            &self.frame_jitter,
        );
        x.histogram(
            "blaster_frame_fanout_seconds",
            "Frame fan-out completion: intended send instant to the last receiver of the \
             room; one sample per frame every receiver got.",
            &self.frame_fanout,
        );
    }

    /// The frame gauges: the retention so far and the last interval's rates.
    fn render_frame_gauges(&self, x: &mut Exposition) {
        let f = &self.counters.frames;
        let last = &self.frame_interval;
        for (name, help, v) in [
            (
                "blaster_frames_retention_ratio",
                "Frames received / (received + lost) over the run so far (1 before any); \
                 loss is counted late (see blaster_frames_lost_total), so it is exact once \
                 blaster_run_finished is 1.",
                crate::report::frames::retention_of(f.received, f.lost),
            ),
            (
                "blaster_frames_up_per_second",
                "Frames sent per second in the last completed interval.",
                last.up_fps,
            ),
            (
                "blaster_frames_down_per_second",
                "Planned frames received per second in the last completed interval.",
                last.down_fps,
            ),
            (
                "blaster_frames_connections_active",
                "Frame connections up at the end of the last completed interval.",
                last.connections_active as f64,
            ),
        ] {
            x.family(name, "gauge", help);
            x.sample(name, &[], Float(v));
        }
    }
}

/// The frame counters: (family, help, value).
fn frame_counters(f: &FrameCounters) -> [(&'static str, &'static str, u64); 10] {
    [
        (
            "blaster_frames_sent_total",
            "Frames put on the wire.",
            f.sent,
        ),
        (
            "blaster_frames_received_total",
            "Planned frames received (first arrivals; with --aggregate, downlink frames).",
            f.received,
        ),
        (
            "blaster_frames_lost_total",
            "Planned frames counted lost: a gap once 128 newer frames from its source \
                 arrived at the receiver, the rest when the run ends.",
            f.lost,
        ),
        (
            "blaster_frames_late_total",
            "Frames received with an arrival deviation beyond --frame-budget.",
            f.late,
        ),
        (
            "blaster_frames_not_sent_total",
            "Frames due while their connection was down: never sent.",
            f.not_sent,
        ),
        (
            "blaster_frames_duplicates_total",
            "Frames received again after their first arrival.",
            f.duplicates,
        ),
        (
            "blaster_frames_reordered_total",
            "Frames that arrived after a newer frame from the same source.",
            f.reordered,
        ),
        (
            "blaster_frames_stale_total",
            "Frames older than the receive window (not counted as received).",
            f.stale,
        ),
        (
            "blaster_frames_foreign_total",
            "Frames that do not belong to the receiver's room or plan.",
            f.foreign,
        ),
        (
            "blaster_frames_disconnects_total",
            "Frame connections that went down during the run.",
            f.disconnects,
        ),
    ]
}

/// Counts per ladder bucket (not cumulative) and the sum of the values in ns: each
/// recorded HdrHistogram bucket is placed by its highest equivalent value and summed
/// at its median equivalent (as HdrHistogram's mean does). Values above the last
/// bound are only in `+Inf` (the histogram's total count).
pub fn ladder_counts(h: &Histogram<u64>) -> ([u64; LADDER_NS.len()], f64) {
    let mut per = [0u64; LADDER_NS.len()];
    let mut sum_ns = 0.0;
    for v in h.iter_recorded() {
        let value = v.value_iterated_to();
        let n = v.count_at_value();
        let i = LADDER_NS.partition_point(|&b| b < value);
        if let Some(slot) = per.get_mut(i) {
            *slot += n;
        }
        sum_ns += h.median_equivalent(value) as f64 * n as f64;
    }
    (per, sum_ns)
}

/// `ns` as decimal seconds, exactly and in the shortest form (`1000` -> `0.000001`,
/// `2_000_000_000` -> `2`): the `le` values must be spelled identically everywhere.
pub fn secs(ns: u64) -> String {
    let whole = ns / 1_000_000_000;
    let frac = ns % 1_000_000_000;
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:09}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// A label value as the text format wants it: backslash, double quote and line feed
/// escaped.
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for ch in v.chars() {
        match ch {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A float as the text format spells it (Go's ParseFloat: `NaN`, `+Inf`, `-Inf`).
struct Float(f64);

impl std::fmt::Display for Float {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            v if v.is_nan() => f.write_str("NaN"),
            v if v == f64::INFINITY => f.write_str("+Inf"),
            v if v == f64::NEG_INFINITY => f.write_str("-Inf"),
            v => write!(f, "{v}"),
        }
    }
}

/// The text being written, with the run's labels rendered once.
struct Exposition {
    out: String,
    labels: String,
}

impl Exposition {
    fn new(l: &Labels) -> Exposition {
        Exposition {
            out: String::with_capacity(16 * 1024),
            labels: format!(
                "run_id=\"{}\",shard=\"{}\"",
                escape_label(&l.run_id),
                escape_label(&l.shard)
            ),
        }
    }

    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, extra: &[(&str, &str)], v: impl std::fmt::Display) {
        let _ = write!(self.out, "{name}{{{}", self.labels);
        for (k, val) in extra {
            let _ = write!(self.out, ",{k}=\"{}\"", escape_label(val));
        }
        let _ = writeln!(self.out, "}} {v}");
    }

    fn histogram(&mut self, name: &str, help: &str, h: &Histogram<u64>) {
        self.family(name, "histogram", help);
        let (per, sum_ns) = ladder_counts(h);
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (bound, n) in LADDER_NS.iter().zip(per) {
            cumulative += n;
            self.sample(&bucket, &[("le", &secs(*bound))], cumulative);
        }
        self.sample(&bucket, &[("le", "+Inf")], h.len());
        self.sample(&format!("{name}_sum"), &[], Float(sum_ns / 1e9));
        self.sample(&format!("{name}_count"), &[], h.len());
    }
}

/// The metric names of an exposition: every sample line's name (`_bucket`, `_sum` and
/// `_count` included), deduplicated, in order. For checking queries against it.
pub fn sample_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..end];
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Interval;

    fn labels() -> Labels {
        Labels {
            run_id: "r1".into(),
            shard: "0/1".into(),
        }
    }

    /// Sample value of the line that starts with `prefix` (name and labels).
    fn value(text: &str, prefix: &str) -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    fn state(values_ns: &[(u64, u64)]) -> Cumulative {
        let mut c = Cumulative::default();
        for &(v, n) in values_ns {
            c.latency.record_n(v, n).unwrap();
        }
        c
    }

    #[test]
    fn buckets_are_cumulative_and_inf_equals_count() {
        // 3 values at 800 ns, 5 at 1.5 us, 2 at 30 us, 1 at 200 s (past the ladder).
        let c = state(&[(800, 3), (1_500, 5), (30_000, 2), (200_000_000_000, 1)]);
        let text = c.render(&labels());
        let b = |le: &str| {
            value(
                &text,
                &format!(
                    "blaster_latency_seconds_bucket{{run_id=\"r1\",shard=\"0/1\",le=\"{le}\"}}"
                ),
            )
        };
        assert_eq!(b("0.000001"), 3.0);
        assert_eq!(b("0.000002"), 8.0);
        assert_eq!(b("0.00001"), 8.0);
        assert_eq!(b("0.00005"), 10.0);
        assert_eq!(b("100"), 10.0);
        assert_eq!(b("+Inf"), 11.0);
        let count = value(&text, "blaster_latency_seconds_count{");
        assert_eq!(count, 11.0);
        // Non-decreasing over the whole ladder.
        let series: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with("blaster_latency_seconds_bucket"))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(series.len(), LADDER_NS.len() + 1);
        assert!(series.windows(2).all(|w| w[0] <= w[1]), "{series:?}");
        // The sum is in seconds: 3x800ns + 5x1.5us + 2x30us + 200s, to 0.1%.
        let sum = value(&text, "blaster_latency_seconds_sum{");
        let want = 3.0 * 800e-9 + 5.0 * 1.5e-6 + 2.0 * 30e-6 + 200.0;
        assert!((sum - want).abs() / want < 1e-3, "{sum} vs {want}");
    }

    #[test]
    fn a_value_on_a_bound_is_in_that_bucket() {
        // Exact below 2048 ns: 1000 ns is le=1us, 1001 ns is not.
        let (per, _) = ladder_counts(&state(&[(1_000, 1), (1_001, 1)]).latency);
        assert_eq!(per[0], 1);
        assert_eq!(per[1], 1);
    }

    #[test]
    fn the_hdr_p99_lies_in_the_bucket_where_histogram_quantile_finds_it() {
        // Prometheus' histogram_quantile: the first bucket whose cumulative count
        // reaches rank = q * count, interpolated inside it.
        let mut c = Cumulative::default();
        for i in 1..=10_000u64 {
            c.latency.record(i * 397 % 9_000_000 + 500).unwrap();
        }
        let (per, _) = ladder_counts(&c.latency);
        let rank = 0.99 * c.latency.len() as f64;
        let mut cum = 0u64;
        let k = per
            .iter()
            .position(|&n| {
                cum += n;
                cum as f64 >= rank
            })
            .unwrap();
        let p99 = c.latency.value_at_quantile(0.99);
        let lower = if k == 0 { 0 } else { LADDER_NS[k - 1] };
        assert!(
            lower < p99 && p99 <= LADDER_NS[k],
            "{lower} {p99} {}",
            LADDER_NS[k]
        );
    }

    /// The steal gauge is the last added interval's, as the JSON row has it.
    #[test]
    fn the_steal_gauge_follows_the_last_interval() {
        let hist = crate::metrics::Histograms::new();
        let counters = Counters::default();
        let encoded = crate::report::hdr::Encoded4::of(&hist);
        let mut c = Cumulative::default();
        for steal in [0.25, 0.07] {
            let row = Interval {
                steal,
                ..Interval::default()
            };
            c.add(&IntervalView {
                row: &row,
                histograms: &hist,
                counters: &counters,
                encoded: &encoded,
            });
        }
        let text = c.render(&labels());
        assert_eq!(value(&text, "blaster_generator_steal_ratio{"), 0.07);
    }

    #[test]
    fn seconds_are_spelled_exactly() {
        assert_eq!(secs(1_000), "0.000001");
        assert_eq!(secs(2_500), "0.0000025");
        assert_eq!(secs(500_000_000), "0.5");
        assert_eq!(secs(1_000_000_000), "1");
        assert_eq!(secs(100_000_000_000), "100");
        assert_eq!(secs(1_200_000_000), "1.2");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("a\nb"), "a\\nb");
        let text = Cumulative::default().render(&Labels {
            run_id: "x\"y".into(),
            shard: "1/2".into(),
        });
        assert!(
            text.contains("blaster_requests_dispatched_total{run_id=\"x\\\"y\",shard=\"1/2\"} 0\n"),
            "{text}"
        );
    }

    #[test]
    fn every_family_has_help_and_type_before_its_samples() {
        let text = state(&[(5_000, 1)]).render(&labels());
        let names = sample_names(&text);
        for family in [
            "blaster_requests_total",
            "blaster_errors_total",
            "blaster_latency_seconds",
            "blaster_generator_core_load_ratio",
            "blaster_generator_steal_ratio",
        ] {
            let help = text.find(&format!("# HELP {family} ")).unwrap();
            let ty = text.find(&format!("# TYPE {family} ")).unwrap();
            let first = text.find(&format!("\n{family}")).unwrap();
            assert!(help < ty && ty < first, "{family}");
        }
        assert!(names.contains(&"blaster_latency_seconds_bucket".to_string()));
        assert!(names.contains(&"blaster_dispatch_lag_seconds_count".to_string()));
        assert_eq!(
            text.matches("blaster_errors_total{").count(),
            ErrorKind::ALL.len()
        );
        assert!(text.ends_with('\n'));
    }

    /// Every string of a JSON value, recursively, with the key it is under.
    fn strings<'a>(v: &'a serde_json::Value, key: &str, out: &mut Vec<(String, &'a str)>) {
        match v {
            serde_json::Value::String(s) => out.push((key.to_string(), s)),
            serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, key, out)),
            serde_json::Value::Object(o) => o.iter().for_each(|(k, x)| strings(x, k, out)),
            _ => {}
        }
    }

    /// The `blaster_...` identifiers in a text.
    fn metric_tokens(s: &str) -> Vec<&str> {
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let mut out = Vec::new();
        let mut rest = s;
        while let Some(i) = rest.find("blaster_") {
            let preceded = rest[..i].chars().next_back().is_some_and(ident);
            let end = rest[i..]
                .find(|c: char| !ident(c))
                .map_or(rest.len(), |e| i + e);
            if !preceded {
                out.push(&rest[i..end]);
            }
            rest = &rest[end..];
        }
        out
    }

    /// Label names a PromQL expression uses: in `by (...)` and in `{name="..."}`.
    fn label_names(expr: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (open, close) in [("by (", ')'), ("{", '}')] {
            let mut rest = expr;
            while let Some(i) = rest.find(open) {
                let inner = &rest[i + open.len()..];
                let end = inner.find(close).expect("closed");
                for part in inner[..end].split(',') {
                    let name = part.split(['=', '!', '~']).next().unwrap().trim();
                    if !name.is_empty() {
                        out.push(name.to_string());
                    }
                }
                rest = &inner[end..];
            }
        }
        out
    }

    /// deploy/grafana/blaster.json queries only what the exposition has: every
    /// `blaster_...` name in it is a sample or family name rendered here, every label
    /// it groups or matches by is one the samples carry, and the latency panel is the
    /// merged `histogram_quantile(..., sum by (le) (rate(..._bucket...)))`.
    #[test]
    fn the_grafana_dashboard_queries_only_exported_names() {
        let board: serde_json::Value =
            serde_json::from_str(include_str!("../../../deploy/grafana/blaster.json"))
                .expect("the dashboard is JSON");
        let mut c = state(&[(5_000, 1)]);
        c.frames = true;
        let text = c.render(&labels());
        let mut known = sample_names(&text);
        known.extend(
            text.lines()
                .filter_map(|l| l.strip_prefix("# TYPE "))
                .map(|l| l.split(' ').next().unwrap().to_string()),
        );
        // `job` is Prometheus' own target label: the "Shards up" panel reads Prometheus'
        // `up` series, which carries the target's labels (shard from the scrape config).
        let mut labels_known: Vec<String> = vec!["le".into(), "job".into()];
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            if let Some((_, inner)) = line.split_once('{') {
                labels_known.extend(label_names(&format!("{{{inner}")));
            }
        }
        let mut all = Vec::new();
        strings(&board, "", &mut all);
        let exprs: Vec<&str> = all
            .iter()
            .filter(|(k, _)| k == "expr")
            .map(|(_, s)| *s)
            .collect();
        assert!(exprs.len() >= 10, "{} queries", exprs.len());
        let mut used = 0;
        for (_, s) in &all {
            for name in metric_tokens(s) {
                used += 1;
                assert!(
                    known.iter().any(|k| k == name),
                    "{name} is not exported: {s}"
                );
            }
        }
        assert!(used >= exprs.len());
        for e in &exprs {
            for l in label_names(e) {
                assert!(labels_known.contains(&l), "label {l} is not exported: {e}");
            }
        }
        assert!(exprs.iter().any(|e| e.starts_with(
            "histogram_quantile(0.99, sum by (le) (rate(blaster_latency_seconds_bucket{"
        )));
        // Which shards answer: Prometheus' own heartbeat per shard.
        assert!(exprs.contains(&"max by (shard) (up{job=~\"$job\"})"));
    }

    #[test]
    fn a_frames_run_exposes_its_counters_retention_and_deviation_buckets() {
        let plain = state(&[(5_000, 1)]).render(&labels());
        assert!(
            !plain.contains("blaster_frame"),
            "request runs carry no frame families"
        );
        let mut c = state(&[]);
        c.frames = true;
        c.counters.frames.sent = 100;
        c.counters.frames.received = 891;
        c.counters.frames.lost = 9;
        c.counters.frames.late = 3;
        c.frame_deviation.record_n(3_000_000, 890).unwrap();
        c.frame_deviation.record(150_000_000).unwrap();
        let text = c.render(&labels());
        let v = |name: &str| value(&text, &format!("{name}{{run_id=\"r1\",shard=\"0/1\"}}"));
        assert_eq!(v("blaster_frames_sent_total"), 100.0);
        assert_eq!(v("blaster_frames_received_total"), 891.0);
        assert_eq!(v("blaster_frames_lost_total"), 9.0);
        assert_eq!(v("blaster_frames_late_total"), 3.0);
        assert_eq!(v("blaster_frames_retention_ratio"), 0.99);
        let b = |le: &str| {
            value(
                &text,
                &format!(
                    "blaster_frame_deviation_seconds_bucket{{run_id=\"r1\",shard=\"0/1\",le=\"{le}\"}}"
                ),
            )
        };
        assert_eq!(b("0.002"), 0.0);
        assert_eq!(b("0.005"), 890.0);
        assert_eq!(b("0.2"), 891.0);
        assert_eq!(b("+Inf"), 891.0);
        assert_eq!(v("blaster_frame_deviation_seconds_count"), 891.0);
    }

    /// Every frame counter the report has, the last interval's rates, and jitter and
    /// fan-out beside the deviation; each help text one clean sentence.
    #[test]
    fn a_frames_run_exposes_every_frame_figure() {
        let hist = crate::metrics::Histograms::new();
        let mut h = hist.clone();
        h.frame_jitter.record_n(1_000_000, 40).unwrap();
        h.frame_fanout.record_n(3_000_000, 5).unwrap();
        let mut counters = Counters::default();
        let fc = &mut counters.frames;
        (fc.not_sent, fc.duplicates, fc.reordered, fc.stale) = (11, 12, 13, 14);
        (fc.foreign, fc.disconnects) = (15, 2);
        let row = Interval {
            frames: Some(FrameInterval {
                up_fps: 5_000.0,
                down_fps: 45_000.0,
                connections_active: 98,
                ..FrameInterval::default()
            }),
            ..Interval::default()
        };
        let mut c = Cumulative {
            frames: true,
            ..Cumulative::default()
        };
        c.add(&IntervalView {
            row: &row,
            histograms: &h,
            counters: &counters,
            encoded: &crate::report::hdr::Encoded4::of(&hist),
        });
        let text = c.render(&labels());
        let v = |name: &str| value(&text, &format!("{name}{{run_id=\"r1\",shard=\"0/1\"}}"));
        assert_eq!(v("blaster_frames_not_sent_total"), 11.0);
        assert_eq!(v("blaster_frames_duplicates_total"), 12.0);
        assert_eq!(v("blaster_frames_reordered_total"), 13.0);
        assert_eq!(v("blaster_frames_stale_total"), 14.0);
        assert_eq!(v("blaster_frames_foreign_total"), 15.0);
        assert_eq!(v("blaster_frames_disconnects_total"), 2.0);
        assert_eq!(v("blaster_frames_up_per_second"), 5_000.0);
        assert_eq!(v("blaster_frames_down_per_second"), 45_000.0);
        assert_eq!(v("blaster_frames_connections_active"), 98.0);
        assert_eq!(v("blaster_frame_jitter_seconds_count"), 40.0);
        assert_eq!(v("blaster_frame_fanout_seconds_count"), 5.0);
        // A help text broken over source lines keeps no run of blanks.
        for help in text.lines().filter(|l| l.starts_with("# HELP")) {
            assert!(!help.contains("  "), "{help}");
        }
    }

    #[test]
    fn floats_use_the_go_spelling() {
        assert_eq!(Float(f64::NAN).to_string(), "NaN");
        assert_eq!(Float(f64::INFINITY).to_string(), "+Inf");
        assert_eq!(Float(0.25).to_string(), "0.25");
        assert_eq!(Float(20000.0).to_string(), "20000");
    }
}
