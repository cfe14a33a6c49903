//! `blaster sink`'s command: the built-in target server ([`crate::sink`]) started on
//! the flags' configuration (behind a TLS front with `--tls`), a line a second while it
//! serves, and its counts and memory per connection when it stops.

use crate::cli::SinkArgs;
use crate::cmd::AppError;
use crate::cmd::run::RunError;
use crate::outcome::Outcome;
use crate::report::json;
use crate::run_plan::{sink_config, usable_cores};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// `blaster sink --tls --cert FILE --key FILE`: the server configuration, or the
/// usage error (exit 2) that names the flag.
fn sink_tls(a: &SinkArgs) -> Result<Option<Arc<rustls::ServerConfig>>, AppError> {
    let usage = |m: String| AppError::Usage(m);
    if !a.tls {
        return match (&a.cert, &a.key) {
            (Some(_), _) => Err(usage("--cert: needs --tls".into())),
            (_, Some(_)) => Err(usage("--key: needs --tls".into())),
            _ => Ok(None),
        };
    }
    if a.udp {
        return Err(usage(
            "--tls: is TCP-only (DTLS is not supported): drop --udp".into(),
        ));
    }
    let read = |flag: &str, p: &Option<std::path::PathBuf>| match p {
        None => Err(usage(format!(
            "--{flag}: --tls needs --cert FILE and --key FILE"
        ))),
        Some(p) => crate::bounded::read(p, crate::limits::PEM_FILE_BYTES_MAX)
            .map_err(|e| usage(format!("--{flag}: cannot read {}: {e}", p.display()))),
    };
    let cert = read("cert", &a.cert)?;
    let key = read("key", &a.key)?;
    crate::transport::tls::server_config(&cert, &key)
        .map(Some)
        .map_err(usage)
}

/// `blaster sink`: serves until Ctrl-C or `--duration`.
pub fn command(a: &SinkArgs, stop: &Arc<AtomicBool>) -> Result<Outcome, AppError> {
    let tls = sink_tls(a)?;
    // `--mode broadcast --http2`: gRPC rooms on the io_uring sink; other HTTP/2 on
    // the HTTP/2 front.
    if (a.http2 && !a.mode.starts_with("broadcast")) || a.max_concurrent_streams.is_some() {
        return crate::cmd::sink_http2::command(a, stop, tls);
    }
    let (mut cfg, duration) = sink_config(a, &usable_cores())?;
    // With --tls the io_uring sink listens on a private loopback port behind the
    // TLS front, which takes --listen.
    let public = cfg.listen;
    if tls.is_some() {
        cfg.listen = loopback_like(public);
    }
    let cfg = cfg;
    // Claimed before it starts, so an unwritable path fails first; a regular file is
    // also rewritten every second as the sink runs.
    let json_out = json::claim(a.json.as_deref())?;
    // Ordinary descriptors (UDP, or TCP without direct descriptors) count against
    // RLIMIT_NOFILE: raise it as far as the plan needs, or as far as it goes.
    crate::cmd::preflight::ensure_fds(
        (cfg.max_connections_per_core * cfg.cores.len()) as u64,
        crate::limits::FD_MARGIN,
    )
    .or_else(|_| crate::cmd::preflight::ensure_fds(0, crate::limits::FD_MARGIN))
    .map_err(RunError::from)?;
    let rss_before_start = crate::metrics::host::rss_bytes().unwrap_or(0);
    let sink = crate::sink::start(&cfg).map_err(RunError::from)?;
    // gRPC rooms over TLS: the front offers h2 alone, as gRPC clients require.
    let tls = tls.map(|config| {
        if a.http2 {
            let mut c = (*config).clone();
            c.alpn_protocols = vec![b"h2".to_vec()];
            Arc::new(c)
        } else {
            config
        }
    });
    let front = match tls {
        Some(config) => Some(
            crate::sink::tls_front::TlsFront::start(public, sink.local_addr(), config).map_err(
                |source| RunError::SinkTlsFront {
                    addr: public,
                    source,
                },
            )?,
        ),
        None => None,
    };
    let rss_started = crate::metrics::host::rss_bytes().unwrap_or(0);
    sink_banner(a, &cfg, &sink, front.as_ref());
    let run = SinkRun {
        started: std::time::Instant::now(),
        rss_before_start,
        rss_started,
        layout: sink.tcp_layout().cloned(),
    };
    run.serve(a, &cfg, &sink, stop, duration)?;
    // Memory is read before the stop frees anything.
    let memory_at_stop = (!cfg.udp).then(|| {
        let open = sink.snapshot().connections_open;
        crate::sink::MemoryFigures::now(run.rss_before_start, run.rss_started, open)
    });
    if let Some(f) = front {
        let failed = f.failed.load(Ordering::Relaxed);
        drop(f); // closes the TLS connections before the sink's own
        if failed > 0 {
            crate::errln!("sink: {failed} TLS handshakes failed");
        }
    }
    let stats = sink.stop();
    let v = match memory_at_stop {
        None => udp_sink_summary(&stats),
        Some(memory) => run.tcp_summary(&stats, &memory),
    };
    if let Some(d) = json_out {
        d.write(&v)?;
    }
    Ok(Outcome::Ok)
}

/// The loopback address of `public`'s family, any port.
fn loopback_like(public: SocketAddr) -> SocketAddr {
    let ip: std::net::IpAddr = if public.is_ipv4() {
        std::net::Ipv4Addr::LOCALHOST.into()
    } else {
        std::net::Ipv6Addr::LOCALHOST.into()
    };
    SocketAddr::new(ip, 0)
}

/// The sink's first lines: what it serves, where, on which cores and rings.
fn sink_banner(
    a: &SinkArgs,
    cfg: &crate::sink::SinkConfig,
    sink: &crate::sink::SinkHandle,
    front: Option<&crate::sink::tls_front::TlsFront>,
) {
    let rings = match sink.tcp_layout() {
        Some(l) => format!(
            ", {} ring{} of {} slots, {}",
            l.rings,
            if l.rings == 1 { "" } else { "s" },
            l.ring_table_slots,
            if l.direct_descriptors {
                "direct descriptors"
            } else {
                "ordinary descriptors"
            }
        ),
        None => String::new(),
    };
    let shown = match front {
        Some(f) => format!("{} (TLS, relayed to {})", f.local_addr(), sink.local_addr()),
        None => sink.local_addr().to_string(),
    };
    crate::errln!(
        "sink: {} on {shown} (cores {}{rings}), Ctrl-C to stop",
        a.mode,
        crate::units::list_cores(&cfg.cores)
    );
    if let Some(why) = sink.tcp_layout().and_then(|l| l.fallback.as_deref()) {
        crate::errln!(
            "sink: warning: io_uring direct descriptors are unavailable ({why}); every \
             connection uses a file descriptor, so RLIMIT_NOFILE bounds how many the sink holds"
        );
    }
}

/// A running sink's reference points: its start, its memory before and after it
/// started, and its TCP layout.
struct SinkRun {
    started: std::time::Instant,
    rss_before_start: u64,
    rss_started: u64,
    layout: Option<crate::sink::TcpLayout>,
}

impl SinkRun {
    /// The TCP sink's JSON for `stats`, and its memory figures now.
    fn tcp_report(
        &self,
        stats: &crate::sink::SinkStats,
    ) -> (serde_json::Value, crate::sink::MemoryFigures) {
        let memory = crate::sink::MemoryFigures::now(
            self.rss_before_start,
            self.rss_started,
            stats.connections_open,
        );
        (self.tcp_json(stats, &memory), memory)
    }

    fn tcp_json(
        &self,
        stats: &crate::sink::SinkStats,
        memory: &crate::sink::MemoryFigures,
    ) -> serde_json::Value {
        let layout = self.layout.as_ref().expect("a TCP sink has a layout");
        let secs = self.started.elapsed().as_secs_f64();
        crate::sink::tcp_report_json(stats, layout, memory, secs)
    }

    /// Serves until Ctrl-C or `duration`: a line a second (UDP on a terminal: what
    /// arrived; TCP: the counts when they changed), and the JSON file rewritten.
    fn serve(
        &self,
        a: &SinkArgs,
        cfg: &crate::sink::SinkConfig,
        sink: &crate::sink::SinkHandle,
        stop: &Arc<AtomicBool>,
        duration: Option<std::time::Duration>,
    ) -> Result<(), AppError> {
        let live_udp = cfg.udp && std::io::IsTerminal::is_terminal(&std::io::stderr());
        let json_file = json::rewritable(a.json.as_deref());
        let mut next_line = std::time::Duration::from_secs(1);
        let mut last = crate::sink::SinkStats::default();
        let started = self.started;
        while !stop.load(Ordering::Relaxed) && duration.is_none_or(|d| started.elapsed() < d) {
            std::thread::sleep(std::time::Duration::from_millis(20));
            if started.elapsed() < next_line {
                continue;
            }
            let now = sink.snapshot();
            if live_udp {
                // UDP live line: what arrived in the last second.
                crate::errln!(
                    "[{:>4}s] received {:>9}/s {:>8.1} Mbit/s | lost {} reordered {} duplicates {}",
                    next_line.as_secs(),
                    now.received - last.received,
                    (now.bytes_received - last.bytes_received) as f64 * 8.0 / 1e6,
                    now.lost.saturating_sub(last.lost),
                    now.reordered - last.reordered,
                    now.duplicates - last.duplicates
                );
            } else if !cfg.udp {
                let (v, memory) = self.tcp_report(&now);
                let changed = (
                    now.connections_open,
                    now.connections_accepted,
                    now.connections_rejected,
                    now.replies,
                ) != (
                    last.connections_open,
                    last.connections_accepted,
                    last.connections_rejected,
                    last.replies,
                );
                if changed {
                    crate::errln!("[{:>4}s] {}", next_line.as_secs(), tcp_line(&now, &memory));
                }
                if let Some(p) = json_file {
                    json::write(p, &v)?;
                }
            }
            last = now;
            next_line += std::time::Duration::from_secs(1);
        }
        Ok(())
    }

    /// The TCP sink's last lines, and its JSON.
    fn tcp_summary(
        &self,
        stats: &crate::sink::SinkStats,
        memory: &crate::sink::MemoryFigures,
    ) -> serde_json::Value {
        let v = self.tcp_json(stats, memory);
        crate::errln!("sink: {}", tcp_line(stats, memory));
        crate::errln!(
            "sink: {} bytes received, {} bytes sent, {} replies",
            stats.bytes_received,
            stats.bytes_sent,
            stats.replies
        );
        v
    }
}

/// The UDP sink's last line, and its JSON.
fn udp_sink_summary(stats: &crate::sink::SinkStats) -> serde_json::Value {
    let v = crate::sink::udp_report_json(stats);
    crate::errln!(
        "sink: udp {} received, {} lost, {} reordered, {} duplicates, {} foreign, {} dropped; {:.0} packets/s",
        v["received"],
        v["lost"],
        v["reordered"],
        v["duplicates"],
        v["foreign"],
        v["dropped"],
        v["received_pps"].as_f64().unwrap_or(0.0)
    );
    v
}

/// One line of TCP sink counts: connections and memory per connection.
fn tcp_line(s: &crate::sink::SinkStats, m: &crate::sink::MemoryFigures) -> String {
    let per = match m.user_bytes_per_connection {
        Some(b) => format!(", {b:.0} B/connection"),
        None => String::new(),
    };
    // Only when it happened: a peer that does not read its echo is rare.
    let throttled = match s.connections_throttled {
        0 => String::new(),
        n => format!(", receives throttled {n} (unread replies)"),
    };
    format!(
        "connections open {} (peak {}), accepted {}, rejected {}, closed {}, reset {}, \
         closed by peer {}{throttled} | rss {:.1} MiB{per}",
        s.connections_open,
        s.connections_peak,
        s.connections_accepted,
        s.connections_rejected,
        s.connections_closed,
        s.connections_reset,
        s.connections_closed_by_peer,
        m.rss_bytes as f64 / (1 << 20) as f64
    )
}
