//! `blaster sink --http2`: the HTTP/2 front ([`crate::sink::h2_front`]) on `--listen`,
//! h2c or h2 over `--tls`, the flags that make no sense with it refused (exit 2), a
//! line a second while it serves, and its counts when it stops.

use crate::cli::SinkArgs;
use crate::cmd::AppError;
use crate::cmd::run::RunError;
use crate::outcome::Outcome;
use crate::proto::h2::server::{Answer, ServerSettings};
use crate::report::json;
use crate::run_plan::{sink_config, usable_cores};
use crate::sink::SinkMode;
use crate::sink::h2_front::{H2Counts, H2Front, H2Options};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The answer `--mode` asks for, or the one-line usage error for a combination the
/// HTTP/2 front does not serve.
fn http2_answer(a: &SinkArgs) -> Result<(Answer, u32), AppError> {
    let usage = |m: String| Err(AppError::Usage(m));
    if !a.http2 {
        return usage("--max-concurrent-streams: needs --http2".into());
    }
    if a.udp {
        return usage("--http2: HTTP/2 runs over TCP: drop --udp".into());
    }
    let mode: SinkMode = a.mode.parse().map_err(AppError::Usage)?;
    let answer = match mode {
        SinkMode::Echo => Answer::Echo,
        SinkMode::Fixed(n) => Answer::Fixed(n),
        other => {
            return usage(format!(
                "--http2: answers with --mode echo or fixed:N, got --mode {other} \
                 (broadcast over HTTP/2 streams is not served)"
            ));
        }
    };
    let unsupported = [
        ("delay", a.delay.is_some()),
        ("delay-dist", a.delay_dist.is_some()),
        ("close-every", a.close_every.is_some()),
        ("reset-ratio", a.reset_ratio != 0.0),
        ("request-size", a.request_size != 0),
        ("reuse-port", a.reuse_port),
        ("no-direct-descriptors", a.no_direct_descriptors),
    ];
    if let Some((flag, _)) = unsupported.iter().find(|(_, set)| *set) {
        return usage(format!(
            "--{flag}: not with --http2 (its front serves modes echo and fixed:N; of the \
             faults, --stall only)"
        ));
    }
    let streams = a.max_concurrent_streams.unwrap_or(256);
    if !(1..=crate::proto::h2::WINDOW_MAX).contains(&streams) {
        return usage(format!(
            "--max-concurrent-streams: must be between 1 and 2^31-1, got {streams}"
        ));
    }
    Ok((answer, streams))
}

/// `blaster sink --http2`: serves until Ctrl-C or `--duration`.
pub fn command(
    a: &SinkArgs,
    stop: &Arc<AtomicBool>,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> Result<Outcome, AppError> {
    let (answer, max_concurrent_streams) = http2_answer(a)?;
    let (cfg, duration) = sink_config(a, &usable_cores())?;
    let json_out = json::claim(a.json.as_deref())?;
    let over_tls = tls.is_some();
    let opts = H2Options {
        settings: ServerSettings {
            max_concurrent_streams,
            ..ServerSettings::default()
        },
        answer,
        tls,
        connections_max: cfg.max_connections_per_core * cfg.cores.len(),
        cores: cfg.cores.clone(),
        stall: cfg.stall,
        timed: a.server_timing,
    };
    let front = H2Front::start(cfg.listen, opts).map_err(|source| RunError::SinkHttp2Front {
        addr: cfg.listen,
        source,
    })?;
    crate::errln!(
        "sink: HTTP/2 ({}) {} on {} (cores {}, a thread per connection), Ctrl-C to stop",
        if over_tls { "h2 over TLS" } else { "h2c" },
        a.mode,
        front.local_addr(),
        crate::units::list_cores(&cfg.cores)
    );
    let started = Instant::now();
    let json_file = json::rewritable(a.json.as_deref());
    let mut next_line = Duration::from_secs(1);
    let mut last = H2Counts::default();
    while !stop.load(Ordering::Relaxed) && duration.is_none_or(|d| started.elapsed() < d) {
        std::thread::sleep(Duration::from_millis(20));
        if started.elapsed() < next_line {
            continue;
        }
        let now = front.counts();
        if now != last {
            crate::errln!("[{:>4}s] {}", next_line.as_secs(), line(&now));
        }
        if let Some(p) = json_file {
            json::write(p, &counts_json(&now, over_tls, started))?;
        }
        last = now;
        next_line += Duration::from_secs(1);
    }
    let end = front.stop();
    crate::errln!("sink: {}", line(&end));
    if end.handshakes_failed > 0 {
        crate::errln!("sink: {} TLS handshakes failed", end.handshakes_failed);
    }
    if let Some(d) = json_out {
        d.write(&counts_json(&end, over_tls, started))?;
    }
    Ok(Outcome::Ok)
}

/// One line of counts: connections, then what was answered.
fn line(c: &H2Counts) -> String {
    let h = &c.h2;
    format!(
        "connections open {}, accepted {}, rejected {}, protocol errors {} | requests \
         answered {} (gRPC {}, refused {}), streams {} (refused {}, reset by peer {}, \
         reset for errors {})",
        c.connections_open,
        c.connections_accepted,
        c.connections_rejected,
        c.connection_errors,
        h.requests,
        h.grpc_calls,
        h.refused_requests,
        h.streams,
        h.streams_refused,
        h.streams_reset_by_peer,
        h.stream_errors
    )
}

fn counts_json(c: &H2Counts, tls: bool, started: Instant) -> serde_json::Value {
    let h = &c.h2;
    serde_json::json!({
        "http2": true,
        "tls": tls,
        "elapsed_s": started.elapsed().as_secs_f64(),
        "connections_open": c.connections_open,
        "connections_accepted": c.connections_accepted,
        "connections_rejected": c.connections_rejected,
        "connection_errors": c.connection_errors,
        "tls_handshakes_failed": c.handshakes_failed,
        "bytes_received": c.bytes_received,
        "bytes_sent": c.bytes_sent,
        "requests": h.requests,
        "grpc_calls": h.grpc_calls,
        "refused_requests": h.refused_requests,
        "streams": h.streams,
        "streams_refused": h.streams_refused,
        "streams_reset_by_peer": h.streams_reset_by_peer,
        "stream_errors": h.stream_errors,
        "body_bytes_received": h.body_bytes_received,
        "body_bytes_sent": h.body_bytes_sent,
    })
}
