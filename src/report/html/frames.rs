//! The frames part of the HTML page (`--workload frames`, docs/frames.md). Frames are
//! never answered, so a frames run has no latency charts; instead:
//!
//! - a table of the frame figures beside the runs table;
//! - the arrival deviation's p50 and p99 over time against the frame budget;
//! - frames per second up (sent) and down (received);
//! - the retention and the late and lost frames per interval;
//! - the deviation and fan-out spectra on the nines axis, drawn from the histograms
//!   the report embeds (`frames.histograms`);
//! - the join time (the control plane of a frame protocol adapter: connect, handshake,
//!   subscribe), drawn from `frames.histograms.join` when the report has one.

use super::{
    Chart, HALF, Picked, RunView, Section, Spectrum, YAxis, css_colour, esc, gates_at, lines_of,
    series, spectrum_chart, spectrum_or_summary, spectrum_source, time_chart,
};
use crate::report::frames::FrameInterval;
use crate::report::input::FramesInput;
use crate::units::{fmt_ns, fmt_rate};
use std::fmt::Write as _;

/// The frames of run `r` (the caller picked frames runs only).
fn of<'a>(r: &'a RunView) -> &'a FramesInput {
    r.run
        .frames
        .as_ref()
        .expect("frames sections draw frames runs")
}

/// A figure of interval `i`'s frames, 0 for an interval without them.
fn frame_at(i: &crate::report::Interval, y: fn(&FrameInterval) -> f64) -> f64 {
    i.frames.as_ref().map_or(0.0, y)
}

/// The frames table: one row per frames run, empty without any.
pub(super) fn table(runs: &[RunView]) -> String {
    if runs.iter().all(|r| r.run.frames.is_none()) {
        return String::new();
    }
    let mut t = String::from(
        "<table><tr><th class=\"l\">frames run</th><th>tick</th><th>rooms</th>\
         <th>up</th><th>down</th><th>retention</th><th>lost</th><th>late</th>\
         <th>deviation p50</th><th>p99</th><th>max</th><th>fan-out p99</th></tr>\n",
    );
    for (i, r) in runs.iter().enumerate() {
        let Some(f) = &r.run.frames else { continue };
        let _ = writeln!(
            t,
            "<tr><td class=\"l\"><span class=\"sw\" style=\"background:{}\"></span>{}</td>\
             <td>{}</td><td>{} of {}</td><td>{}/s</td><td>{}/s</td><td>{:.3}%</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            css_colour(super::PALETTE[i]),
            esc(&r.label),
            fmt_ns(f.tick_ns),
            f.rooms,
            f.room_size,
            fmt_rate(f.up_fps),
            fmt_rate(f.down_fps),
            f.retention * 100.0,
            f.lost,
            f.late,
            fmt_ns(f.deviation_ns.p50),
            fmt_ns(f.deviation_ns.p99),
            fmt_ns(f.deviation_ns.max),
            fmt_ns(f.fanout_ns.p99),
        );
    }
    t.push_str("</table>\n");
    t
}

/// The frames runs' sections, in the page's order.
pub(super) fn sections(runs: &Picked) -> Vec<Section> {
    let mut out = vec![
        deviation_section(runs),
        rate_section(runs),
        retention_section(runs),
        spectra_section(runs),
    ];
    // The join phase (protocol adapters) is its own section, after the data plane's,
    // drawn only when some run has one.
    out.extend(join_section(runs));
    out
}

fn deviation_section(runs: &Picked) -> Section {
    let mut chart = time_chart(
        "arrival deviation per second",
        "deviation (log scale)",
        YAxis::Nanos,
        lines_of(runs, |c, r| {
            vec![
                series(format!("{} p99", r.label), c, false, r.run, |s| {
                    frame_at(s, |f| f.deviation_p99_ns as f64)
                }),
                series(format!("{} p50", r.label), c, true, r.run, |s| {
                    frame_at(s, |f| f.deviation_p50_ns as f64)
                }),
            ]
        }),
    );
    chart.gates = budgets(runs);
    Section {
        heading: "Frame arrival deviation over time",
        note: "Receive instant minus the frame's intended send instant, per frame received: \
               what a player or listener feels. p50 dashed, p99 solid, one point per second, \
               log scale; the frame budget (--frame-budget, red) is where a frame counts late."
            .into(),
        charts: vec![chart],
    }
}

/// The runs' frame budgets as reference lines.
fn budgets(runs: &Picked) -> Vec<(f64, String)> {
    gates_at(
        runs.iter().map(|(_, r)| of(r).budget_ns).collect(),
        "budget",
    )
}

fn rate_section(runs: &Picked) -> Section {
    Section {
        heading: "Frames per second",
        note: "Frames sent (up, dashed) and planned frames received at every member (down, \
               solid) per second; a room of R multiplies what is sent by up to R - 1."
            .into(),
        charts: vec![time_chart(
            "frames per second",
            "frames per second",
            YAxis::Rate,
            lines_of(runs, |c, r| {
                vec![
                    series(format!("{} down", r.label), c, false, r.run, |s| {
                        frame_at(s, |f| f.down_fps)
                    }),
                    series(format!("{} up", r.label), c, true, r.run, |s| {
                        frame_at(s, |f| f.up_fps)
                    }),
                ]
            }),
        )],
    }
}

fn retention_section(runs: &Picked) -> Section {
    let retention = Chart {
        size: HALF,
        ..time_chart(
            "retention per interval",
            "received / (received + lost)",
            YAxis::Retention,
            lines_of(runs, |c, r| {
                vec![series(r.label.clone(), c, false, r.run, |s| {
                    frame_at(s, |f| f.retention)
                })]
            }),
        )
    };
    let late = Chart {
        size: HALF,
        ..time_chart(
            "late and lost frames",
            "frames per second",
            YAxis::PerSecond,
            lines_of(runs, |c, r| {
                let per_s = |n: u64, s: &crate::report::Interval| n as f64 / s.duration_s.max(1e-9);
                vec![
                    series(format!("{} late", r.label), c, false, r.run, move |s| {
                        per_s(s.frames.as_ref().map_or(0, |f| f.late), s)
                    }),
                    series(format!("{} lost", r.label), c, true, r.run, move |s| {
                        per_s(s.frames.as_ref().map_or(0, |f| f.lost), s)
                    }),
                ]
            }),
        )
    };
    Section {
        heading: "Retention and late frames per interval",
        note: "Left: the share of the frames counted in each second that arrived. Right: \
               frames that arrived beyond the budget (late, solid) and frames counted lost \
               (dashed). A gap is counted lost once 128 newer frames from its source have \
               arrived, so a loss shows up to 128 ticks after it happened."
            .into(),
        charts: vec![retention, late],
    }
}

/// Deviation and fan-out on the nines axis, from the embedded histograms.
fn spectra_section(runs: &Picked) -> Section {
    let spectra: Vec<(Spectrum, Spectrum)> = runs
        .iter()
        .map(|(_, r)| {
            let f = of(r);
            (
                spectrum_or_summary(&f.histograms.deviation, &f.deviation_ns),
                spectrum_or_summary(&f.histograms.fanout, &f.fanout_ns),
            )
        })
        .collect();
    let full = spectra.iter().all(|(d, f)| d.full && f.full);
    let mut deviation = spectrum_chart("arrival deviation", runs, spectra.iter().map(|s| &s.0));
    deviation.gates = budgets(runs);
    Section {
        heading: "Frame percentile spectra",
        note: format!(
            "Whole-run percentiles on the nines axis, ending at the max. Left: arrival \
             deviation per frame received, against the budget (red). Right: fan-out \
             completion, the intended send instant to the last member of the room, one per \
             frame every member got. {}",
            spectrum_source(full)
        ),
        charts: vec![
            deviation,
            spectrum_chart(
                "fan-out to the last member",
                runs,
                spectra.iter().map(|s| &s.1),
            ),
        ],
    }
}

/// The join time of the runs that have a join phase (`frames.histograms.join`), or
/// nothing when none has.
fn join_section(runs: &Picked) -> Option<Section> {
    let joined: Vec<_> = runs
        .iter()
        .copied()
        .filter(|(_, r)| of(r).histograms.join.is_some())
        .collect();
    if joined.is_empty() {
        return None;
    }
    let spectra: Vec<Spectrum> = joined
        .iter()
        .map(|(_, r)| {
            let f = of(r);
            let encoded = f.histograms.join.as_deref().unwrap_or_default();
            spectrum_or_summary(encoded, &f.join.as_ref().map(|j| j.ns).unwrap_or_default())
        })
        .collect();
    let chart = Chart {
        y_desc: "join time at percentile (log scale)",
        ..spectrum_chart("join time", &joined, spectra.iter())
    };
    Some(Section {
        heading: "Join time",
        note: format!(
            "The control plane, apart from the frames: per connection, its join exchange \
             with the server (connect, handshake, subscribe and its acknowledgement). A \
             member's frames start at its first tick after it joined. {}",
            spectrum_source(spectra.iter().all(|s| s.full))
        ),
        charts: vec![chart],
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::{RunView, render};
    use crate::metrics::Histograms;
    use crate::report::hdr;
    use crate::report::input::parse_run;

    /// A frames run's report as the JSON has it: 3 seconds, a loss in the second, a
    /// deviation histogram of 1,000 frames and a fan-out one; `join`: with a join
    /// histogram.
    pub(in crate::report::html) fn frames_report(join: bool) -> String {
        let mut h = Histograms::new();
        for v in 1..=1_000u64 {
            h.frame_deviation.record(v * 10_000).unwrap();
        }
        h.frame_fanout.record_n(3_000_000, 100).unwrap();
        let empty = hdr::encode(&h.latency);
        let interval = |second: u64, lost: u64| {
            serde_json::json!({
                "second": second, "duration_s": 1.0, "intended_rps": 500.0,
                "achieved_rps": 500.0, "latency_p50_ns": 0, "latency_p90_ns": 0,
                "latency_p99_ns": 0, "latency_p999_ns": 0, "latency_max_ns": 0,
                "dispatch_lag_p99_ns": 20_000, "errors": 0, "core_load": 0.2,
                "worker_busy": 0.1, "other_load": 0.0, "tx_bps": 0.0, "rx_bps": 0.0,
                "tx_pps": 0.0, "rx_pps": 0.0, "link_utilization": null, "drops": 0,
                "frames": { "up_fps": 500.0, "down_fps": 4_500.0 - lost as f64,
                    "deviation_p99_ns": 9_000_000, "deviation_p50_ns": 5_000_000,
                    "late": lost, "lost": lost, "connections_active": 10,
                    "sent": 500, "received": 4_500 - lost,
                    "retention": (4_500 - lost) as f64 / 4_500.0 },
            })
        };
        let mut join_hist = Histograms::new().latency;
        join_hist.record_n(250_000, 10).unwrap();
        let p = |h: &hdrhistogram::Histogram<u64>| {
            serde_json::to_value(crate::report::Percentiles::of(h)).unwrap()
        };
        let mut v = serde_json::json!({
            "schema_version": crate::report::SCHEMA_VERSION, "valid": true,
            "target": "127.0.0.1:9000", "mode": "frames",
            "config": { "max_lag_ns": 1_000_000, "connections": 10 },
            "duration_s": 3.0,
            "rate": { "intended_rps": 500.0, "achieved_rps": 500.0, "sent_rps": 500.0 },
            "latency_ns": crate::report::Percentiles::default(),
            "service_time_ns": crate::report::Percentiles::default(),
            "dispatch_lag_ns": { "p50": 10_000, "p90": 20_000, "p99": 20_000, "p999": 20_000,
                "p9999": 20_000, "max": 20_000, "mean": 1.0, "count": 0 },
            "intervals": [interval(0, 0), interval(1, 45), interval(2, 0)],
            "requests": { "dispatched": 1500, "completed": 1500, "errors": 0, "cut_off": 0 },
            "histograms": { "encoding": hdr::ENCODING, "unit": "ns", "latency": empty,
                "service_time": empty, "dispatch_lag": empty, "connection_wait": empty },
            "frames": {
                "tick_ns": 20_000_000, "budget_ns": 20_000_000, "room_size": 10,
                "rooms": 1, "up_fps": 500.0, "down_fps": 4_485.0, "retention": 0.99,
                "lost": 45, "late": 45,
                "deviation_ns": p(&h.frame_deviation), "fanout_ns": p(&h.frame_fanout),
                "histograms": { "encoding": hdr::ENCODING,
                    "deviation": hdr::encode(&h.frame_deviation),
                    "jitter": hdr::encode(&h.frame_jitter),
                    "fanout": hdr::encode(&h.frame_fanout), "join": null },
            },
        });
        if join {
            v["frames"]["join"] = serde_json::json!({ "ns": p(&join_hist) });
            v["frames"]["histograms"]["join"] = hdr::encode(&join_hist).into();
        }
        v.to_string()
    }

    fn page(join: bool) -> String {
        let run = parse_run("f.json", frames_report(join)).unwrap().input;
        render(&[RunView {
            label: "f.json".into(),
            run: &run,
        }])
        .unwrap()
    }

    /// The headings of a page's sections, in order.
    fn headings(html: &str) -> Vec<&str> {
        html.split("<h2>")
            .skip(1)
            .map(|s| &s[..s.find("</h2>").unwrap()])
            .collect()
    }

    /// A frames run: its own sections and table, no request latency, rate or spectrum
    /// (all zero for frames), and the common sections after.
    #[test]
    fn a_frames_run_draws_its_frames_not_request_latency() {
        let html = page(false);
        assert_eq!(
            headings(&html),
            [
                "Frame arrival deviation over time",
                "Frames per second",
                "Retention and late frames per interval",
                "Frame percentile spectra",
                "Dispatch lag over time",
                "Errors over time",
                "Generator core load",
            ]
        );
        assert!(html.contains("<th class=\"l\">frames run</th>"));
        // The table's retention, the budget on the charts, the full-histogram note.
        assert!(html.contains("<td>99.000%</td>"), "retention in the table");
        assert!(html.contains("budget 20.00 ms"));
        assert!(html.contains("Drawn from the full histograms"));
        assert!(!html.contains("no data"), "every chart has lines");
        // No latency of 0 ns in the runs table: a dash.
        assert!(!html.contains("<td>0 ns</td>"), "a zero latency cell");
    }

    /// The retention chart's scale reaches below the second with the loss (99%), and
    /// the deviation spectrum is the histogram's (many points, not six).
    #[test]
    fn retention_and_spectra_come_from_the_data() {
        let html = page(false);
        // 4,455 of 4,500: 99.00%, so the retention axis reaches below 99.5%.
        let retention = &html[html.find("retention per interval").unwrap()..];
        let retention = &retention[..retention.find("</svg>").unwrap()];
        assert!(
            retention.contains("99.00%") || retention.contains("98.9"),
            "retention axis: {retention}"
        );
        let spectra = &html[html.find("Frame percentile spectra").unwrap()..];
        let deviation_svg =
            &spectra[spectra.find("<svg").unwrap()..spectra.find("</svg>").unwrap()];
        // A full histogram's spectrum is drawn as a line without the circles of a
        // summary's six points.
        assert!(
            !deviation_svg.contains("<circle"),
            "circles: drawn from the summary"
        );
    }

    /// With `frames.histograms.join` the page has a join time section, last of the
    /// frames sections; without, none.
    #[test]
    fn a_join_histogram_gets_its_own_section() {
        assert!(!page(false).contains("Join time"));
        let html = page(true);
        let h = headings(&html);
        let at = h
            .iter()
            .position(|x| *x == "Join time")
            .expect("a join section");
        assert_eq!(h[at - 1], "Frame percentile spectra");
        assert!(html.contains("join time at percentile"));
        let join = &html[html.find("<h2>Join time</h2>").unwrap()..];
        assert!(!join[..join.find("</svg>").unwrap()].contains("no data"));
    }
}
