//! The text of a frames search (`--workload frames`): steps by connection count.

use super::{FrameStep, SearchReport, Step, StoppedBy};
use crate::units::{fmt_ns, fmt_rate};
use std::fmt::Write;

/// The progress line of one frames step.
pub(super) fn step_line(s: &Step, f: &FrameStep) -> String {
    format!(
        "{:<6} {:>6} connections, {:>8}/s frames up, {:>8}/s down, deviation p99 {:>9}, \
         retention {:.3}%, lost {}, late {}, lag p99 {:>9}, busiest worker {:.0}%: {}",
        s.phase.name(),
        s.connections,
        fmt_rate(f.up_fps),
        fmt_rate(f.down_fps),
        fmt_ns(f.deviation_p99_ns),
        f.retention * 100.0,
        f.lost,
        f.late,
        fmt_ns(s.dispatch_lag_p99_ns),
        s.generator_busy_ratio_max * 100.0,
        s.verdict_text()
    )
}

/// The frames search's text report: the step table (by connection count) and the
/// conclusions.
pub(super) fn render(r: &SearchReport) -> String {
    let mut s = String::new();
    write_header(&mut s, r);
    write_rows(&mut s, r);
    write_conclusions(&mut s, r);
    super::write_repeats(&mut s, r);
    write_stopped_by(&mut s, r);
    if r.interrupted {
        let _ = writeln!(
            &mut s,
            "interrupted: the conclusions cover the steps measured before Ctrl-C"
        );
    }
    s
}

/// The search's line (target, SLO, steps, rooms, cores) and the table's header.
fn write_header(w: &mut String, r: &SearchReport) {
    let c = &r.config;
    let growth = match (c.factor, c.step_connections) {
        (Some(f), _) => format!("x{f}"),
        (_, Some(st)) => format!("+{st}"),
        _ => String::new(),
    };
    let _ = writeln!(
        w,
        "search: {} slo {} | frames: from {} connections {growth} per step of {}, precision \
         {}% | rooms of {}, tick {}, {}B frames | cores {}",
        r.target,
        r.slo_spec,
        c.start_connections.unwrap_or(0),
        fmt_ns(c.step_duration_ns),
        c.precision * 100.0,
        c.room_size.unwrap_or(0),
        fmt_ns(c.tick_ns.unwrap_or(0)),
        c.frame_bytes.unwrap_or(0),
        crate::units::list_cores(&c.cores),
    );
    let _ = writeln!(
        w,
        "{:<6} {:>11} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9} {:>8} {:>8} {:>10} {:>6} {:>5}  slo",
        "phase",
        "connections",
        "up/s",
        "down/s",
        "dev p50",
        "dev p99",
        "fan-out p99",
        "retention",
        "lost",
        "late",
        "lag p99",
        "busy",
        "valid"
    );
}

/// One row per step, by connection count.
fn write_rows(w: &mut String, r: &SearchReport) {
    let mut order: Vec<&Step> = r.steps.iter().collect();
    order.sort_by_key(|s| s.connections);
    for st in order {
        let Some(f) = &st.frames else { continue };
        let _ = writeln!(
            w,
            "{:<6} {:>11} {:>9} {:>9} {:>10} {:>10} {:>10} {:>8.3}% {:>8} {:>8} {:>10} {:>5.0}% {:>5}  {}",
            st.phase.name(),
            st.connections,
            fmt_rate(f.up_fps),
            fmt_rate(f.down_fps),
            fmt_ns(f.deviation_p50_ns),
            fmt_ns(f.deviation_p99_ns),
            fmt_ns(f.fanout_p99_ns),
            f.retention * 100.0,
            f.lost,
            f.late,
            fmt_ns(st.dispatch_lag_p99_ns),
            st.generator_busy_ratio_max * 100.0,
            if st.valid { "yes" } else { "NO" },
            st.verdict_text()
        );
    }
    let _ = writeln!(w, "(busy: CPU share of the busiest generator worker core)");
}

/// The largest count that met the SLO and the knee.
fn write_conclusions(w: &mut String, r: &SearchReport) {
    let c = &r.config;
    match r.max_safe_connections {
        Some(n) => {
            let _ = writeln!(
                w,
                "max connections meeting the SLO: {n} ({} rooms of {}), deviation p99 {}, \
                 retention {:.3}%",
                n as u64 / c.room_size.unwrap_or(1).max(1),
                c.room_size.unwrap_or(0),
                fmt_ns(r.deviation_p99_ns_at_max_safe.unwrap_or(0)),
                r.retention_at_max_safe.unwrap_or(0.0) * 100.0
            );
        }
        None => {
            let _ = writeln!(
                w,
                "max connections meeting the SLO: none (no step met it with a valid generator)"
            );
        }
    }
    let _ = match r.knee_connections {
        Some(k) => writeln!(
            w,
            "knee: {k} connections, the last count before deviation p99 grew at least as \
             fast as the square of the count"
        ),
        None => writeln!(
            w,
            "knee: none in the measured range (deviation p99 never rose steeply)"
        ),
    };
}

/// What ended the search.
fn write_stopped_by(w: &mut String, r: &SearchReport) {
    let bad = r
        .first_bad_connections
        .map(|n| n.to_string())
        .unwrap_or_default();
    let _ = match r.stopped_by {
        StoppedBy::Target if r.max_safe_connections.is_none() => writeln!(
            w,
            "stopped by: target: even the first step ({bad} connections) broke the SLO; lower \
             --start (exit code 4)"
        ),
        StoppedBy::Target => writeln!(
            w,
            "stopped by: target: the SLO broke at {bad} connections with a valid generator"
        ),
        StoppedBy::Generator if r.saturation.is_some() => writeln!(
            w,
            "stopped by: generator-bound: the SLO broke at {bad} connections{}, so that is \
             the generator's limit, not the target's; use more cores (exit code 3)",
            super::saturation_note(r)
        ),
        StoppedBy::Generator => writeln!(
            w,
            "stopped by: generator: the step at {bad} connections was invalid (the generator \
             fell behind before the target broke the SLO), so the max is a lower bound on the \
             target's; use more cores (exit code 3)"
        ),
        StoppedBy::Link => writeln!(
            w,
            "stopped by: link-bound: the SLO broke at {bad} connections{}, so that is the \
             link's limit, not the target's (exit code 3)",
            super::saturation_note(r)
        ),
        StoppedBy::Max => writeln!(
            w,
            "stopped by: max: the SLO held up to the largest count tried; raise --max to \
             search further"
        ),
        StoppedBy::Interrupted => {
            writeln!(w, "stopped by: interrupted before any step broke the SLO")
        }
    };
}
