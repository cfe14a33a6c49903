//! The text report and the live line.

use super::frames::FrameInterval;
use super::{Percentiles, Report};
use crate::units::{fmt_ns, fmt_rate};
use std::fmt::Write;

/// The final report as text.
pub fn render(r: &Report) -> String {
    render_with_verdict(r, None)
}

/// The final report as text, with a verdict block (the judgement against `--slo`, which
/// the layer above renders) before the last line.
pub fn render_with_verdict(r: &Report, verdict: Option<&str>) -> String {
    let mut s = String::new();
    let w = &mut s;
    write_invalid_banner(w, r);
    if r.tls.as_ref().is_some_and(|t| t.insecure) {
        let _ = writeln!(
            w,
            "WARNING: --tls-insecure: the server's certificate was NOT verified (any certificate, any name)"
        );
    }
    write_header(w, r);
    write_rate(w, r);
    let _ = writeln!(w);
    write_latency(w, r);
    let _ = writeln!(w);
    write_health(w, r);
    let _ = writeln!(w);
    write_requests(w, r);
    write_connections(w, r);
    write_workers(w, r);
    write_host(w, r);
    write_udp(w, r);
    write_http(w, r);
    write_mix(w, r);
    write_targets(w, r);
    write_keys(w, r);
    write_notes(w, r);
    if let Some(v) = verdict {
        w.push_str(v);
    }
    if r.valid {
        let _ = writeln!(w, "run: VALID");
    } else {
        let _ = writeln!(w, "run: INVALID (exit code 3)");
    }
    s
}

/// `--tls`: the handshakes (time, full and resumed, failures by kind).
fn write_tls(w: &mut String, r: &Report) {
    let Some(t) = &r.tls else { return };
    let h = &t.tls_handshake_ns;
    let failed: Vec<String> = t
        .failed_by_kind
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    let _ = writeln!(
        w,
        "tls handshake ({}): p50 {}  p90 {}  p99 {}  max {}; {} full, {} resumed, {} failed{}",
        t.sni,
        fmt_ns(h.p50),
        fmt_ns(h.p90),
        fmt_ns(h.p99),
        fmt_ns(h.max),
        t.handshakes_full,
        t.handshakes_resumed,
        t.failed_by_kind.values().sum::<u64>(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(" ({})", failed.join(", "))
        }
    );
}

/// `--http2`: streams per connection, GOAWAYs and the retries they caused, resets,
/// flow-control stalls.
fn write_http2(w: &mut String, r: &Report) {
    let Some(h) = &r.http2 else { return };
    let _ = writeln!(
        w,
        "http2: up to {} streams per connection; {} GOAWAYs, {} requests retried on a new connection, \
         {} streams reset by the server, {} cancelled at their timeout, {} flow-control stalls{}",
        h.streams_per_connection,
        h.goaways,
        h.retried,
        h.stream_resets,
        h.streams_cancelled,
        h.flow_stalls,
        [
            (
                h.bodies_cut,
                "answered before their body was all sent (reset, the rest unsent)"
            ),
            (
                h.control_dropped,
                "control frames dropped (no room before the next send)"
            ),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!(", {n} {what}"))
        .collect::<String>()
    );
    if h.pings_sent > 0 || !h.goaway_codes.is_empty() {
        let codes: Vec<String> = (h.goaway_codes.iter())
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(
            w,
            "http2 keepalive: {} PINGs sent, {} acknowledged; GOAWAYs by code: {}{}",
            h.pings_sent,
            h.pings_acked,
            if codes.is_empty() {
                "none".to_string()
            } else {
                codes.join(", ")
            },
            h.first_goaway
                .as_ref()
                .map_or(String::new(), |g| format!(" (first: {g})"))
        );
    }
    if h.goaway_codes.contains_key("ENHANCE_YOUR_CALM") {
        let _ = writeln!(
            w,
            "http2: the server answered GOAWAY ENHANCE_YOUR_CALM: it allows PINGs less often \
             than they came{} (gRPC servers: grpc.http2.min_ping_interval_without_data_ms, \
             5 min by default without calls)",
            if h.pings_sent > 0 {
                " (--h2-keepalive)"
            } else {
                ""
            }
        );
    }
    if let Some(g) = &h.grpc {
        let codes: Vec<String> = g
            .status_codes
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(
            w,
            "grpc {}: {}",
            g.method,
            if codes.is_empty() {
                "no call answered".into()
            } else {
                codes.join(", ")
            }
        );
    }
}

/// The banner of an invalid run: the generator, not the target, was the limit.
fn write_invalid_banner(w: &mut String, r: &Report) {
    if !r.valid {
        let _ = writeln!(w, "{}", "=".repeat(78));
        let _ = writeln!(
            w,
            "INVALID RUN: the generator, not the target, limited this measurement."
        );
        for reason in &r.invalid_reasons {
            let _ = writeln!(w, "  - {reason}");
        }
        let _ = writeln!(w, "{}", "=".repeat(78));
    }
}

/// The first line (protocol, target, framer, seed, cores, connections, pipeline,
/// payload; a frames run: the workload instead of the request framer, pipeline and
/// payload, which it does not use) and a shard's fleet line.
fn write_header(w: &mut String, r: &Report) {
    let requests = format!(
        "framer={} seed={} cores={} connections={} pipeline={} payload={}B",
        r.framer,
        r.seed,
        crate::units::list_cores(&r.config.cores),
        r.config.connections,
        r.config.pipeline,
        r.config.payload_bytes,
    );
    let frames = format!(
        "workload=frames seed={} cores={} connections={}",
        r.seed,
        crate::units::list_cores(&r.config.cores),
        r.config.connections,
    );
    let _ = writeln!(
        w,
        "blaster: {} {} {}{}",
        r.protocol,
        r.target,
        if r.frames.is_some() { frames } else { requests },
        match (&r.abort, r.interrupted) {
            (Some(_), _) => " (aborted)",
            (None, true) => " (interrupted)",
            (None, false) => "",
        }
    );
    if let Some(p) = &r.replay {
        let _ = writeln!(
            w,
            "replay: {} ({}, {} requests), speed {}x, {}; read-ahead ran dry {} times",
            p.file,
            p.format,
            p.recorded_requests,
            p.speed,
            if p.looped { "looped" } else { "once" },
            p.read_ahead_dry
        );
        if let Some(why) = &p.stopped {
            let _ = writeln!(
                w,
                "REPLAY STOPPED: {why}; the figures below cover the requests before it (exit code 1)"
            );
        }
    }
    if let Some(a) = &r.abort {
        let _ = writeln!(
            w,
            "ABORTED: --abort-if '{}' held {} second{} in a row: the run stopped sending at \
             {} s; the figures below cover it until then (exit code 5)",
            a.condition,
            a.window_s,
            if a.window_s == 1 { "" } else { "s" },
            a.fired_at_s
        );
    }
    // A shard, or a run with a common start: say which and how it started.
    if let Some(f) = r.fleet.as_ref().filter(|f| f.reads_wall_clock()) {
        let _ = writeln!(w, "fleet: {}", f.text_line());
    }
}

/// The rate: closed loop, a timetable (its shape, arrivals, pacing checks and the
/// achieved rate) or `max`.
fn write_rate(w: &mut String, r: &Report) {
    if r.mode == "closed_loop" {
        let _ = writeln!(
            w,
            "CLOSED LOOP (--concurrency {}): throughput {}/s over {:.2} s; no timetable, so the \
             latency below is service time and hides queueing",
            r.config.connections,
            fmt_rate(r.rate.achieved_rps),
            r.elapsed_s,
        );
    } else if r.rate.intended_rps.is_finite() {
        if let Some(spec) = r.rate_spec.as_deref().filter(|s| s.parse::<f64>().is_err()) {
            let _ = writeln!(w, "rate shape: {spec}, {} arrivals", r.arrivals);
        } else if r.arrivals != "constant" {
            let _ = writeln!(w, "arrivals: {}", r.arrivals);
        }
        write_pacing(w, r);
        if r.frames.is_some() {
            // Frames are never answered: what was achieved is the frames put wholly on
            // the wire (the frames block below has what arrived).
            let _ = writeln!(
                w,
                "rate: frames sent {}/s of intended {}/s ({:.1}%) over {:.2} s ({:.2} s scheduled)",
                fmt_rate(r.rate.achieved_rps),
                fmt_rate(r.rate.intended_rps),
                100.0 * r.rate.achieved_rps / r.rate.intended_rps.max(1e-9),
                r.elapsed_s,
                r.duration_s,
            );
            return;
        }
        let _ = writeln!(
            w,
            "rate: achieved {}/s{} of intended {}/s ({:.1}%) over {:.2} s ({:.2} s scheduled); sent {}/s",
            fmt_rate(r.rate.achieved_rps),
            r.ci.as_ref().map_or(String::new(), |c| c.show_rate()),
            fmt_rate(r.rate.intended_rps),
            100.0 * r.rate.achieved_rps / r.rate.intended_rps.max(1e-9),
            r.elapsed_s,
            r.duration_s,
            fmt_rate(r.rate.sent_rps),
        );
    } else {
        let _ = writeln!(
            w,
            "rate: max (as fast as the send buffers allow): {}/s over {:.2} s; no timetable, so no dispatch lag",
            fmt_rate(r.rate.achieved_rps),
            r.duration_s,
        );
    }
}

/// The pacing checks of a run on a timetable: the Poisson fit and the pacing verdict.
fn write_pacing(w: &mut String, r: &Report) {
    if let Some(p) = &r.poisson_fit {
        let _ = writeln!(
            w,
            "pacing vs Poisson: KS D = {:.4} over {} gaps (1% critical {:.4}): {}",
            p.ks_d,
            p.gaps,
            p.ks_critical_1pct,
            if p.rejected {
                "the sends did NOT follow the intended process"
            } else {
                "consistent with the intended process"
            }
        );
    }
    if let Some(p) = &r.pacing {
        let _ = writeln!(
            w,
            "pacing: {} at resolution {} ({:.2} of a worker's mean gap {}): D = {:.4} over {} \
             gaps (critical {:.4}; plain KS D = {:.4}, critical {:.4})",
            if p.passed() { "PASS" } else { "FAIL" },
            fmt_ns(p.resolution_ns),
            p.resolution_gaps,
            fmt_ns(p.mean_gap_ns as u64),
            p.statistic,
            p.gaps,
            p.critical,
            p.raw_statistic,
            p.raw_critical,
        );
        let _ = writeln!(w, "  {}", p.reason);
    }
}

/// The latency table (latency and service time), or the frame figures of a frames run.
fn write_latency(w: &mut String, r: &Report) {
    if let Some(f) = &r.frames {
        // Frames are never answered: no latency table; the frame figures instead.
        super::frames::render(f, w);
        // A --connect-rate ramp: the connections up at each interval's end.
        let active: Vec<u64> = r
            .intervals
            .iter()
            .filter_map(|i| i.frames.as_ref().map(|f| f.connections_active))
            .collect();
        if active.windows(2).any(|p| p[0] != p[1]) {
            let series: Vec<String> = active.iter().map(u64::to_string).collect();
            let _ = writeln!(w, "  connections active per interval: {}", series.join(" "));
        }
    } else {
        write_latency_table(w, r);
        if let Some(ci) = r.latency_ns.ci.as_ref() {
            let _ = writeln!(
                w,
                "[brackets]: {:.0}% confidence intervals, {} (docs/metrics.md)",
                ci.level * 100.0,
                crate::metrics::ci::METHOD
            );
        }
        let _ = writeln!(
            w,
            "latency counts from each request's intended send time (coordinated-omission free);\n\
             service time counts from the actual send, as closed-loop tools such as wrk report it."
        );
    }
}

/// Latency and service time per percentile; with `--server-time`, the server's own
/// time and network + queueing beside them.
fn write_latency_table(w: &mut String, r: &Report) {
    let st = r.server_time.as_ref();
    let extra = |a: &str, b: &str| match st {
        Some(_) => format!(" {a:<16} {b:<16}"),
        None => String::new(),
    };
    let _ = writeln!(
        w,
        "{:<10} {:<30} {:<30}{}",
        "",
        "latency",
        "service time",
        extra("server time", "network+queueing")
    );
    let _ = writeln!(
        w,
        "{:<10} {:<30} {:<30}{}",
        "",
        "(intended)",
        "(closed-loop)",
        extra("(its reply said)", "(latency-server)")
    );
    type Pick = fn(&Percentiles) -> u64;
    let rows: [(&str, &str, Pick); 6] = [
        ("p50", "p50", |p| p.p50),
        ("p90", "p90", |p| p.p90),
        ("p99", "p99", |p| p.p99),
        ("p99.9", "p999", |p| p.p999),
        ("p99.99", "p9999", |p| p.p9999),
        ("max", "", |p| p.max),
    ];
    for (name, key, f) in rows {
        let more = st.map_or(String::new(), |s| {
            extra(
                &fmt_ns(f(&s.server_time_ns)),
                &fmt_ns(f(&s.network_queueing_ns)),
            )
        });
        let _ = writeln!(
            w,
            "{:<10} {:<30} {:<30}{}",
            name,
            with_ci(&r.latency_ns, key, f),
            with_ci(&r.service_time_ns, key, f),
            more.trim_end()
        );
    }
    if let Some(s) = st {
        let _ = writeln!(
            w,
            "server time (--server-time {}): {} replies carried it, {} did not (counted \
             apart); network+queueing is each reply's latency less its own server time",
            s.source, s.carried, s.missing
        );
    }
}

/// `1.23 ms [1.20, 1.27]`: a percentile (`key` as the JSON names it; empty: none, the
/// max) with its interval when the summary has them.
fn with_ci(s: &super::Summary, key: &str, f: fn(&Percentiles) -> u64) -> String {
    let v = f(s);
    match s.ci.as_ref().filter(|_| !key.is_empty()) {
        Some(ci) => format!("{}{}", fmt_ns(v), ci.show(key, v)),
        None => fmt_ns(v),
    }
}

/// The generator's health: dispatch lag against its gate, and the connection wait.
fn write_health(w: &mut String, r: &Report) {
    if let Some(lag) = &r.dispatch_lag_ns {
        let _ = writeln!(
            w,
            "dispatch lag     p99 {:>10}  max {:>10}   (generator health; gate: p99 < {})",
            with_ci(lag, "p99", |p| p.p99),
            fmt_ns(lag.max),
            fmt_ns(r.config.max_lag_ns)
        );
        let late = r.workers.iter().map(|w| w.timer_late_ns).max().unwrap_or(0);
        let tail = r.workers.iter().map(|w| w.timer_late_p995_ns).max();
        let _ = writeln!(
            w,
            "precision        resolution {}, spin {}, timer late {}, p99.5 {} (--resolution, --spin)",
            fmt_ns(r.config.resolution_ns),
            r.config.spin,
            fmt_ns(late),
            fmt_ns(tail.unwrap_or(0))
        );
        if r.io_uring_features
            .contains(&crate::engine::stamps::FEATURE)
        {
            let _ = writeln!(
                w,
                "                 {} timed by the kernel's receive timestamps",
                if r.frames.is_some() {
                    "frames"
                } else {
                    "responses"
                }
            );
        }
    }
    if r.frames.is_some() {
        return; // a frame never waits for a free connection: each has its own
    }
    let _ = writeln!(
        w,
        "connection wait  p99 {:>10}  max {:>10}   (due request waiting for a free connection)",
        with_ci(&r.connection_wait_ns, "p99", |p| p.p99),
        fmt_ns(r.connection_wait_ns.max)
    );
}

/// The requests' fate, error replies, errors by kind and the bytes moved.
fn write_requests(w: &mut String, r: &Report) {
    let q = &r.requests;
    // A frames run's `requests` count frames, which its own block shows.
    if r.frames.is_none() {
        let _ = writeln!(
            w,
            "requests: {} due, {} sent, {} completed, {} errors ({} timeouts), {} cut off by the end",
            q.dispatched, q.sent, q.completed, q.errors, q.timeouts, q.cut_off
        );
        if let Some(ci) = &r.ci {
            let ended = (q.completed + q.errors).max(1);
            let _ = writeln!(
                w,
                "error ratio: {:.3}%{} of requests that ended",
                q.errors as f64 * 100.0 / ended as f64,
                ci.show_error_ratio()
            );
        }
    }
    if r.error_replies > 0 {
        let kinds: Vec<String> = (r.error_replies_by_kind.iter())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(
            w,
            "error replies: {} (parsed, but reporting failure; among the errors{}) latency p50 {} p99 {} max {}",
            r.error_replies,
            if kinds.is_empty() {
                String::new()
            } else {
                format!(": {}", kinds.join(" "))
            },
            fmt_ns(r.error_latency_ns.p50),
            fmt_ns(r.error_latency_ns.p99),
            fmt_ns(r.error_latency_ns.max),
        );
    }
    if let Some(e) = &r.expect {
        let each: Vec<String> = (e.assertions.iter())
            .map(|a| format!("'{}'={}", a.assertion, a.failed))
            .collect();
        let failed: u64 = e.assertions.iter().map(|a| a.failed).sum();
        let _ = writeln!(
            w,
            "assertions: {failed} replies failed (among the errors, kind assertion): {}{}",
            each.join(" "),
            if e.unchecked > 0 {
                format!(
                    "; {} unchecked (body longer than half the receive buffer)",
                    e.unchecked
                )
            } else {
                String::new()
            }
        );
    }
    if !r.errors_by_kind.is_empty() {
        let kinds: Vec<String> = r
            .errors_by_kind
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(w, "errors by kind: {}", kinds.join(" "));
    }
    let _ = writeln!(
        w,
        "bytes: {} sent, {} received",
        r.bytes.sent, r.bytes.received
    );
}

/// One line per worker: its core, CPU, busy share, CPU per request (a frames run: per
/// frame sent, what its `requests.completed` counts), backlog peak.
fn write_workers(w: &mut String, r: &Report) {
    let per = if r.frames.is_some() {
        "frame sent"
    } else {
        "request"
    };
    for (i, wk) in r.workers.iter().enumerate() {
        let _ = writeln!(
            w,
            "worker {i} (core {}): cpu {:.2} s, busy {:.0}%, {:.0} ns busy CPU per {per}{}, backlog peak {}",
            wk.core.map_or("-".to_string(), |c| c.to_string()),
            wk.cpu_ns as f64 / 1e9,
            wk.busy_ratio * 100.0,
            wk.busy_cpu_ns_per_request,
            if wk.cpu_basis == "busy" {
                ""
            } else {
                " (at most: preempted while spinning)"
            },
            wk.backlog_peak
        );
    }
}

/// The host: core load, steal, the interface's traffic and link, drops, and the
/// kernel's drop counters.
fn write_host(w: &mut String, r: &Report) {
    let h = &r.host;
    let link = match (h.link_speed_bps, h.link_utilization_max) {
        (Some(l), Some(u)) => format!("{:.0}% of its {:.0} Mbit/s link", u * 100.0, l as f64 / 1e6),
        _ => "no link speed (loopback or virtual; --link-speed sets one)".to_string(),
    };
    let _ = writeln!(
        w,
        "host: busiest generator core {:.0}% busy (/proc/stat, spin excluded; workers' own \
         measure {:.0}%; hypervisor steal up to {:.1}%); {}: up to {:.1} Mbit/s out, {:.1} \
         Mbit/s in, {link}, {} drops",
        h.max_core_load * 100.0,
        h.max_worker_busy * 100.0,
        h.max_steal * 100.0,
        h.iface.as_deref().unwrap_or("interface unknown"),
        h.tx_bps_max / 1e6,
        h.rx_bps_max / 1e6,
        h.drops
    );
    let _ = writeln!(w, "{}", kernel_line(&h.kernel));
}

/// The kernel's drop counters over the run, each as a count or `n/a` (this host does
/// not expose it); a grown one is also a diagnosis below.
fn kernel_line(k: &super::KernelReport) -> String {
    let n = |c: Option<u64>| c.map_or("n/a".to_string(), |c| c.to_string());
    let c = &k.counters;
    format!(
        "kernel: conntrack drop {}, insert_failed {}, early_drop {} (nf_conntrack_count up \
         to {} of nf_conntrack_max {}); softnet dropped {}, time_squeeze {}; listen \
         overflows {}, drops {}; TCP retransmitted segments {}; NIC rx_missed {}, \
         rx_dropped {}, rx_fifo {}",
        n(c.conntrack_drop),
        n(c.conntrack_insert_failed),
        n(c.conntrack_early_drop),
        n(k.conntrack_count_max),
        n(k.conntrack_max),
        n(c.softnet_dropped),
        n(c.softnet_time_squeeze),
        n(c.listen_overflows),
        n(c.listen_drops),
        n(c.retrans_segs),
        n(c.nic_rx_missed),
        n(c.nic_rx_dropped),
        n(c.nic_rx_fifo),
    )
}

/// UDP: sent, received, lost, duplicates, reordered, late, foreign, joined.
fn write_udp(w: &mut String, r: &Report) {
    if let Some(u) = &r.udp {
        let _ = writeln!(
            w,
            "udp: {} sent, {} received, {} lost ({:.3}%), {} duplicates, {} reordered, {} late, {} foreign; sent {}/s = {:.1} Mbit/s{}",
            u.sent,
            u.received,
            u.lost,
            u.loss_ratio * 100.0,
            u.duplicates,
            u.reordered,
            u.late,
            u.foreign,
            fmt_rate(u.sent_pps),
            u.sent_bps / 1e6,
            if u.gso { " (GSO)" } else { "" }
        );
        if u.joined > 0 {
            let _ = writeln!(
                w,
                "udp: {} of the lost came back joined to another response in one datagram: \
                 the responder merges datagrams (a byte stream in its path, e.g. socat's PIPE)",
                u.joined
            );
        }
    }
}

/// HTTP status classes and codes (nothing when no reply carried an HTTP status: a
/// gRPC run's calls are counted by `grpc-status` instead).
fn write_http(w: &mut String, r: &Report) {
    if let Some(h) = r.http.as_ref().filter(|h| !h.status_codes.is_empty()) {
        let classes: Vec<String> = h
            .status_classes
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let codes: Vec<String> = (h.status_codes.iter())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(
            w,
            "http status: {}; codes: {} (errors: {})",
            classes.join(" "),
            codes.join(" "),
            h.error_status
        );
    }
}

/// The keys `{zipf:N:S}` / `{uniform:N}` drew: one line per placeholder.
fn write_keys(w: &mut String, r: &Report) {
    for k in &r.keys {
        let top: Vec<String> = (k.top.iter())
            .map(|t| {
                format!(
                    "{} {:.2}% (law {:.2}%)",
                    t.key,
                    t.share * 100.0,
                    t.expected * 100.0
                )
            })
            .collect();
        let _ = writeln!(
            w,
            "keys {}{}: {} requests drew {} of {} keys; most drawn: {}",
            k.placeholder,
            if k.entry.is_empty() {
                String::new()
            } else {
                format!(" ({})", k.entry)
            },
            k.requests,
            k.distinct,
            k.keys,
            top.join(", ")
        );
    }
}

/// The mix table: one row per entry.
fn write_mix(w: &mut String, r: &Report) {
    if let Some(mix) = &r.mix {
        let _ = writeln!(
            w,
            "{:<16} {:>6} {:>10} {:>8} {:>12} {:>12}  framer",
            "mix entry", "weight", "completed", "errors", "lat p50", "lat p99"
        );
        for e in mix {
            let _ = writeln!(
                w,
                "{:<16} {:>6} {:>10} {:>8} {:>12} {:>12}  {}",
                e.name,
                e.weight,
                e.completed,
                e.errors,
                fmt_ns(e.latency_ns.p50),
                fmt_ns(e.latency_ns.p99),
                e.framer
            );
        }
    }
}

/// The targets table (two or more targets): one row per destination, then the total,
/// so a slow or failing server of a pool stands out. Latency from the intended send.
fn write_targets(w: &mut String, r: &Report) {
    if r.targets.len() < 2 {
        return;
    }
    let _ = writeln!(
        w,
        "{:<24} {:>10} {:>10} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  errors by kind",
        "target",
        "sent",
        "completed",
        "errors",
        "rate/s",
        "lat p50",
        "lat p90",
        "lat p99",
        "lat p99.9",
        "lat max"
    );
    let row = |w: &mut String, name: &str, n: [u64; 3], rps: f64, p: &Percentiles, kinds: &str| {
        let _ = writeln!(
            w,
            "{:<24} {:>10} {:>10} {:>8} {:>10.1} {:>10} {:>10} {:>10} {:>10} {:>10}  {kinds}",
            name,
            n[0],
            n[1],
            n[2],
            rps,
            fmt_ns(p.p50),
            fmt_ns(p.p90),
            fmt_ns(p.p99),
            fmt_ns(p.p999),
            fmt_ns(p.max),
        );
    };
    let kinds = |m: &std::collections::BTreeMap<&'static str, u64>| {
        let k: Vec<String> = m.iter().map(|(k, n)| format!("{k}={n}")).collect();
        if k.is_empty() {
            "-".to_string()
        } else {
            k.join(" ")
        }
    };
    for t in &r.targets {
        let n = [t.sent, t.completed, t.errors];
        row(
            w,
            &t.address,
            n,
            t.achieved_rps,
            &t.latency_ns,
            &kinds(&t.errors_by_kind),
        );
    }
    let q = &r.requests;
    let n = [q.sent, q.completed, q.errors];
    let all = kinds(&r.errors_by_kind);
    row(w, "total", n, r.rate.achieved_rps, &r.latency_ns.p, &all);
    let unassigned = q.errors
        - r.targets
            .iter()
            .map(|t| t.errors)
            .sum::<u64>()
            .min(q.errors);
    if unassigned > 0 {
        let _ = writeln!(
            w,
            "  {unassigned} requests failed waiting for a free connection (a full backlog, \
             a timeout in the backlog): they went to no target"
        );
    }
}

/// The first protocol error, io_uring features, threads outside the cores, diagnosis notes.
fn write_notes(w: &mut String, r: &Report) {
    if let Some(bad) = &r.first_protocol_error {
        let _ = writeln!(w, "first protocol error: {bad}");
    }
    let _ = writeln!(w, "io_uring: {}", r.io_uring_features.join(", "));
    for t in crate::threads::outside(&r.threads, &r.config.cores, r.config.control_core) {
        let _ = writeln!(
            w,
            "warning: thread {} (tid {}) last ran on CPU {}, outside --cores {} and the \
             control core {}: it competed with other work there; keep other processes' \
             affinity off these cores, and check io_uring above for iowq_affinity",
            t.name,
            t.tid,
            t.cpu,
            crate::units::list_cores(&r.config.cores),
            r.config.control_core
        );
    }
    for d in &r.diagnosis {
        let _ = writeln!(w, "note: {d}");
    }
}

/// The once-a-second line on stderr.
pub fn live_line(
    second: u64,
    achieved_rps: f64,
    intended_rps: f64,
    latency: &Percentiles,
    errors: u64,
    lag_p99: u64,
) -> String {
    format!(
        "[{:>4}s] rate {:>8}/s of {:>8}/s | latency p50 {:>9} p99 {:>9} | errors {} | lag p99 {}",
        second + 1,
        fmt_rate(achieved_rps),
        fmt_rate(intended_rps),
        fmt_ns(latency.p50),
        fmt_ns(latency.p99),
        errors,
        fmt_ns(lag_p99)
    )
}

/// The once-a-second line of a frames run: frames up and down, the arrival deviation
/// p99, the retention and the late and lost frames (as counted in the second), the
/// dispatch lag p99.
pub fn frames_live_line(second: u64, f: &FrameInterval, lag_p99: u64) -> String {
    format!(
        "[{:>4}s] frames up {:>8}/s down {:>8}/s | deviation p99 {:>9} | retention {:.3}% \
         | late {} | lost {} | lag p99 {}",
        second + 1,
        fmt_rate(f.up_fps),
        fmt_rate(f.down_fps),
        fmt_ns(f.deviation_p99_ns),
        f.retention * 100.0,
        f.late,
        f.lost,
        fmt_ns(lag_p99)
    )
}

/// A frames second on the progress bar (narrower than the line).
pub fn frames_figures(f: &FrameInterval) -> String {
    format!(
        "frames up {}/s down {}/s | deviation p99 {} | retention {:.3}% | late {}",
        fmt_rate(f.up_fps),
        fmt_rate(f.down_fps),
        fmt_ns(f.deviation_p99_ns),
        f.retention * 100.0,
        f.late
    )
}

/// The connection lines: counts, connect times, reconnects, failures by errno and the
/// wall they point at, memory per connection.
fn write_connections(w: &mut String, r: &Report) {
    let c = &r.connections;
    let _ = writeln!(
        w,
        "connections ({}): {} requested, {} established in {}, {} opened in all, {} failed, \
         {} closed by the target, {} reconnects{}{}",
        r.mode,
        c.requested,
        c.established,
        fmt_ns(c.establish_all_ns),
        c.opened,
        c.failed,
        c.closed_by_target,
        c.reconnects,
        c.recycled.map_or(String::new(), |n| format!(
            " ({n} retired by --conn-max-age/--conn-max-requests)"
        )),
        if c.rings_per_core > 1 {
            format!(" ({} io_uring rings per core)", c.rings_per_core)
        } else {
            String::new()
        }
    );
    let ct = &r.connect_time_ns;
    if ct.count > 0 {
        let _ = writeln!(
            w,
            "connect time: p50 {}  p99 {}  max {}",
            fmt_ns(ct.p50),
            fmt_ns(ct.p99),
            fmt_ns(ct.max)
        );
    }
    write_tls(w, r);
    write_http2(w, r);
    let rd = &c.reconnect_delay_ns;
    if rd.count > 0 {
        let _ = writeln!(
            w,
            "reconnect delay (backoff): p50 {}  p99 {}  max {}",
            fmt_ns(rd.p50),
            fmt_ns(rd.p99),
            fmt_ns(rd.max)
        );
    }
    if !c.failed_by_errno.is_empty() {
        let e: Vec<String> = c
            .failed_by_errno
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(w, "connect failures by errno: {}", e.join(" "));
    }
    if !c.events_by_kind.is_empty() {
        let e: Vec<String> = (c.events_by_kind.iter())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(
            w,
            "connection events (failed no request, not among the errors): {}",
            e.join(" ")
        );
    }
    if let Some(wall) = &c.wall {
        let _ = writeln!(w, "wall: {wall}");
    }
    let m = &r.memory;
    let _ = writeln!(
        w,
        "generator memory: {:.0} bytes of user space per connection ({} MiB resident growth), \
         {:.0} while held ({} MiB)",
        m.user_bytes_per_connection,
        m.rss_growth_bytes >> 20,
        m.held_user_bytes_per_connection,
        m.held_rss_growth_bytes >> 20
    );
    if let Some(x) = &m.windows {
        let _ = writeln!(
            w,
            "  of which sequence windows {:.0} B per connection; without them {:.0} B \
             (connect phase), {:.0} B (held)",
            x.windows_bytes_per_connection,
            x.user_bytes_per_connection_excluding_windows,
            x.held_user_bytes_per_connection_excluding_windows
        );
    }
}
