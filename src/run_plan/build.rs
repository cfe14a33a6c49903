//! The run's arguments -> a [`RunPlan`]: every cross-flag check, in the order the
//! user meets them.

use super::fleet::Fleet;
use super::frames::*;
use super::parse::*;
use super::*;
use crate::cli::RunArgs;
use crate::engine::Transport;
use crate::engine::backoff::Backoff;
use crate::engine::pacing::{Precision, Spin};
use crate::engine::socket::SockOpts;
use crate::limits::*;
use crate::proto::Framing;
use crate::request::{RequestSet, Template};
use crate::schedule::{ArrivalKind, RateShape, RateSpec, parse_rate_spec_in};
use std::sync::Arc;

impl RunPlan {
    /// The plan of `a` on the machine `facts` describes: a pure function of the two
    /// (no file, socket, clock or terminal is touched here; see [`HostFacts`]).
    pub fn build(a: &RunArgs, facts: &HostFacts) -> Result<RunPlan, PlanError> {
        Self::build_with(a, facts, None)
    }

    /// [`RunPlan::build`] at the constant rate `rate_rps` in place of `--rate` (a
    /// search's first step; each later step is [`RunPlan::with_rate`]).
    pub fn build_at_rate(
        a: &RunArgs,
        facts: &HostFacts,
        rate_rps: f64,
    ) -> Result<RunPlan, PlanError> {
        Self::build_with(a, facts, Some(rate_rps))
    }

    fn build_with(
        a: &RunArgs,
        facts: &HostFacts,
        rate_given: Option<f64>,
    ) -> Result<RunPlan, PlanError> {
        let usable = &facts.usable_cores[..];
        let (fleet, targets) = fleet_and_targets(a, facts)?;
        let target = targets.first().copied();
        let sources = source_ips(a, &targets)?;
        let connect_rate = connect_rate(a)?;
        let heartbeat_ns = a
            .heartbeat
            .as_deref()
            .map(|h| duration_ns("heartbeat", h, DURATION_NS_MAX))
            .transpose()?;
        // A rate given by the caller (a search's step) counts as `--rate`.
        let has_rate = a.rate.is_some() || rate_given.is_some();
        check_connection_modes(a, has_rate)?;
        let backoff = backoff(a)?;
        let sockopts = sockopts(a)?;
        let cores = parse_cores("cores", a.cores.as_deref().unwrap_or("0"), usable)?;
        check_counts(a, cores.len())?;
        let transport = transport(a, &targets)?;
        let replay = super::replay::plan(a, facts, transport, target.is_some(), rate_given)?;
        let (duration, warmup) = duration_and_warmup(a, replay.as_ref())?;
        let frames = frame_plan(a)?;
        check_warmup(a, warmup, frames.is_some(), target.is_some(), transport)?;
        if let Some(f) = &frames {
            check_frames(a, f, has_rate, &fleet, target.is_some(), cores.len())?;
        }
        let arrivals: ArrivalKind = a.arrivals.parse().map_err(|m| err("arrivals", m))?;
        check_concurrency(a, target.is_some(), transport)?;
        let spec = rate_spec(a, facts, rate_given, duration)?;
        let rated = RateInputs {
            heartbeat_ns,
            frames: frames.as_ref(),
            transport,
            has_target: target.is_some(),
            duration_ns: duration,
            replay_rps: replay.as_ref().map(|r| super::replay::rates(r, duration).0),
        };
        let (rate_rps, shape) = rate(a, spec, &rated)?;
        let requests = super::replay::requests(a, replay.as_ref(), facts.replay.as_ref())
            .unwrap_or_else(|| requests(a, facts).map(Arc::new))?;
        // HTTP/2's refusals first: its requests are HTTP/1.1 templates a baseline
        // would otherwise refuse for their framing.
        let http2 = http2_plan(a, &requests, transport, target.is_some(), frames.is_some())?;
        let modes = (
            transport,
            target.is_some(),
            frames.is_some(),
            http2.is_some(),
        );
        let expect = expect(a, &requests, modes)?;
        let server_time = server_time(a, &requests, modes)?;
        let checked = check_requests(a, &requests, transport, target.is_some())?;
        let (tls, tls_sink) = tls_client(a, facts, transport)?;
        let conn_life = conn_life(a, transport, target.is_some())?;
        let mut plan = RunPlan {
            http2,
            conn_life,
            grpc_method: grpc_method(a, frames.is_some())?,
            tls,
            tls_sink,
            frames,
            fleet,
            target,
            shape,
            arrivals,
            closed_loop: a.concurrency.is_some(),
            link_speed_bps: a
                .link_speed
                .as_deref()
                .map(|s| crate::units::parse_link_speed(s).map_err(|m| err("link-speed", m)))
                .transpose()?,
            targets,
            sources,
            sockopts,
            connect_rate,
            hold: a.hold,
            heartbeat_ns,
            backoff,
            per_request: a.connect_per_request,
            rings_per_core: 1,
            ring_layout: None,
            port_range: facts.port_range,
            mem_available: facts.mem_available,
            control_core: control_core(a.control_core, &cores, usable)?,
            cores,
            connections: a.concurrency.unwrap_or(a.connections),
            rate_rps,
            transport,
            max_response: checked.max_response,
            seed: a.seed,
            precision: precision(a)?,
            duration_ns: duration,
            warmup_ns: warmup,
            pipeline: pipeline(a, http2.is_some()),
            payload: checked.payload.into(),
            requests,
            replay: replay.map(Arc::new),
            framing: checked.framing,
            error_status: a.error_status.parse().map_err(|m| err("error-status", m))?,
            expect,
            server_time,
            timeout_ns: duration_ns("timeout", &a.timeout, TIMEOUT_NS_MAX)?,
            max_lag_ns: duration_ns("max-lag", &a.max_lag, TIMEOUT_NS_MAX)?,
            confidence: crate::units::check_level(a.confidence)
                .map_err(|m| err("confidence", m))?,
            json: a.json.clone(),
            progress: super::Progress::from_flags(a.progress, a.quiet),
            step_duration_ns: duration_ns("step-duration", &a.step_duration, DURATION_NS_MAX)?,
            start_rate_rps: check_rate("start-rate", a.start_rate)?,
            repeats: super::parse::check_repeats(a.repeats)?,
        };
        let rate_text = match (rate_given, &plan.shape) {
            (Some(_), Some(s)) => s.spec().to_string(),
            _ => a.rate.clone().unwrap_or_default(),
        };
        let text = plan.fleet_text(&rate_text);
        plan.fleet.seal(&text);
        plan.take_shard_share()?;
        plan.lay_out_rings(facts);
        Ok(plan)
    }

    /// The ring layout of a run against a target over TCP (the baseline and UDP use
    /// one ring per core); the preflight refuses a layout that does not fit.
    fn lay_out_rings(&mut self, facts: &HostFacts) {
        if self.target.is_some()
            && self.transport == Transport::Tcp
            && let Some(fds) = facts.fds
        {
            let layout = RingLayout::of(self.connections as u64, self.cores.len(), fds);
            self.ring_layout = Some(layout);
            self.rings_per_core = layout.rings as usize;
        }
    }

    /// What every shard of a run must agree on, rendered canonically for the run's
    /// fingerprint: the target, the global timetable (rate, arrivals, seed, duration,
    /// and for Poisson the worker count, whose streams make up the sequence), the
    /// requests, and the totals the shards split.
    pub(super) fn fleet_text(&self, rate_spec: &str) -> String {
        let lanes = match self.arrivals {
            ArrivalKind::Poisson => self.cores.len(),
            ArrivalKind::Constant => 0,
        };
        // A replay's recording by what it holds (its path may differ per machine).
        let replay = self.replay.as_ref().map(|r| {
            format!(
                " replay={}:{}:{}:{}:{}",
                r.format.name(),
                r.summary.requests,
                r.summary.last_offset_ns,
                r.timing.speed,
                r.looped
            )
        });
        format!(
            "targets={:?} rate={rate_spec} arrivals={} lanes={lanes} seed={} duration={} \
             connections={} pipeline={} transport={:?} requests={:?} shards={}{}",
            self.targets,
            self.arrivals,
            self.seed,
            self.duration_ns,
            self.connections,
            self.pipeline,
            self.transport,
            self.requests,
            self.fleet.shard.count(),
            replay.unwrap_or_default(),
        )
    }

    /// Cuts the plan's totals down to this shard's part: connections (and so pipeline
    /// slots) and `--connect-rate`. The request timetable is cut per worker
    /// (`schedule::shard`).
    pub(super) fn take_shard_share(&mut self) -> Result<(), PlanError> {
        let shard = self.fleet.shard;
        if shard.is_whole() {
            return Ok(());
        }
        if let Some(f) = &mut self.frames {
            // Whole rooms (`check_frames` saw at least one per worker core): the
            // connections are those rooms', numbered as in the whole run.
            let rooms = f.grid.rooms();
            f.first_room = shard.split_first(rooms);
            f.room_count = shard.split_count(rooms as usize) as u64;
            self.connections = f.owned_connections().1 as usize;
            return Ok(());
        }
        let total = self.connections;
        self.connections = shard.split_count(total);
        if self.connections < self.cores.len() {
            return Err(err(
                "shard",
                format!(
                    "shard {shard} gets {} of the {total} --connections, fewer than its {} \
                     worker cores: raise --connections to at least {}",
                    self.connections,
                    self.cores.len(),
                    self.cores.len() * shard.count() as usize
                ),
            ));
        }
        self.connect_rate = self.connect_rate.map(|r| r / f64::from(shard.count()));
        Ok(())
    }
}

/// `--shard`, `--start-at` and `--run-id` as one [`Fleet`], and the resolved targets.
fn fleet_and_targets(
    a: &RunArgs,
    facts: &HostFacts,
) -> Result<(Fleet, Vec<SocketAddr>), PlanError> {
    let fleet = Fleet::parse(
        a.shard.as_deref(),
        a.start_at.as_deref(),
        a.run_id.as_deref(),
        facts.now_unix_ns,
    )
    .map_err(|(flag, m)| err(flag, m))?;
    if !fleet.shard.is_whole() && a.target.is_empty() {
        return Err(err(
            "shard",
            "needs --target (the loopback baseline runs on one machine)",
        ));
    }
    if a.target.len() > crate::limits::TARGETS_MAX {
        return Err(err(
            "target",
            format!(
                "at most {} destinations, got {}",
                crate::limits::TARGETS_MAX,
                a.target.len()
            ),
        ));
    }
    let targets = a
        .target
        .iter()
        .map(|t| facts.target(t))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((fleet, targets))
}

/// `--source-ip`: the addresses to connect from, of the targets' IP version.
fn source_ips(a: &RunArgs, targets: &[SocketAddr]) -> Result<Vec<IpAddr>, PlanError> {
    let Some(spec) = &a.source_ip else {
        return Ok(Vec::new());
    };
    if targets.is_empty() {
        return Err(err("source-ip", "needs --target"));
    }
    let ips = crate::ports::parse_source_ips(spec).map_err(|m| err("source-ip", m))?;
    if let Some(bad) = targets.iter().find(|t| t.is_ipv4() != ips[0].is_ipv4()) {
        return Err(err(
            "source-ip",
            format!("{} and target {bad} are of different IP versions", ips[0]),
        ));
    }
    Ok(ips)
}

/// `--connect-rate`: positive and finite when given.
fn connect_rate(a: &RunArgs) -> Result<Option<f64>, PlanError> {
    match a.connect_rate {
        Some(r) if !(r > 0.0 && r.is_finite()) => Err(err(
            "connect-rate",
            format!("must be a positive number of connections per second, got {r}"),
        )),
        r => Ok(r),
    }
}

/// `--hold` and `--connect-per-request` against the flags they exclude.
fn check_connection_modes(a: &RunArgs, has_rate: bool) -> Result<(), PlanError> {
    if a.hold && has_rate {
        return Err(err(
            "hold",
            "sends no requests of its own: drop --rate (use --heartbeat for traffic)",
        ));
    }
    if a.hold && a.connect_per_request {
        return Err(err(
            "hold",
            "keeps connections open: drop --connect-per-request",
        ));
    }
    if a.connect_per_request && a.pipeline != 1 {
        return Err(err(
            "connect-per-request",
            "one request per connection: --pipeline must be 1",
        ));
    }
    Ok(())
}

/// `--reconnect-backoff`, or none with `--no-reconnect`.
fn backoff(a: &RunArgs) -> Result<Option<Backoff>, PlanError> {
    if a.no_reconnect {
        return Ok(None);
    }
    Ok(Some(match &a.reconnect_backoff {
        Some(spec) => spec
            .parse::<Backoff>()
            .map_err(|e| err("reconnect-backoff", e.to_string()))?,
        None => Backoff::default(),
    }))
}

/// `--sockbuf`, `--keepalive` and `--linger0`.
fn sockopts(a: &RunArgs) -> Result<SockOpts, PlanError> {
    Ok(SockOpts {
        sockbuf: a
            .sockbuf
            .as_deref()
            .map(|v| parse_size("sockbuf", v))
            .transpose()?,
        keepalive: a.keepalive.as_deref().map(parse_keepalive).transpose()?,
        linger0: a.linger0,
        rx_stamps: false,
    })
}

/// `--connections` (at least one per worker core) and `--pipeline` within bounds.
fn check_counts(a: &RunArgs, cores: usize) -> Result<(), PlanError> {
    if a.connections == 0 || a.connections > CONNECTIONS_MAX {
        return Err(err(
            "connections",
            format!(
                "must be between 1 and {CONNECTIONS_MAX}, got {}",
                a.connections
            ),
        ));
    }
    if a.connections < cores {
        return Err(err(
            "connections",
            format!(
                "must be at least one per worker core ({cores}), got {}",
                a.connections
            ),
        ));
    }
    if a.pipeline == 0 || a.pipeline > PIPELINE_MAX {
        return Err(err(
            "pipeline",
            format!("must be between 1 and {PIPELINE_MAX}, got {}", a.pipeline),
        ));
    }
    Ok(())
}

/// `--proto` and `--no-response`, and the flags only TCP or a target allows.
fn transport(a: &RunArgs, targets: &[SocketAddr]) -> Result<Transport, PlanError> {
    let transport = match (a.work.proto.as_str(), a.no_response) {
        ("tcp", false) => Transport::Tcp,
        ("tcp", true) => return Err(err("no-response", "needs --proto udp")),
        ("udp", false) => Transport::Udp,
        ("udp", true) => Transport::UdpBlast,
        (p, _) => return Err(err("proto", format!("expected tcp or udp, got {p:?}"))),
    };
    let tcp = transport == Transport::Tcp;
    if !tcp && (a.http.is_some() || a.mix.is_some() || a.framing.is_some()) {
        return Err(err(
            "proto",
            "udp matches responses by sequence: --http, --mix and --framing are TCP-only",
        ));
    }
    if !tcp && (a.hold || a.connect_per_request || a.source_ip.is_some() || targets.len() > 1) {
        return Err(err(
            "proto",
            "--hold, --connect-per-request, --source-ip and several --target are TCP-only",
        ));
    }
    if targets.is_empty() && (a.hold || a.connect_per_request || a.connect_rate.is_some()) {
        return Err(err(
            "target",
            "--hold, --connect-per-request and --connect-rate need --target",
        ));
    }
    if !tcp && targets.is_empty() {
        return Err(err("proto", "udp needs --target (the baseline is TCP)"));
    }
    Ok(transport)
}

/// The client side of `--tls`, and the TLS baseline's server side.
type TlsSides = (
    Option<Arc<crate::transport::tls::TlsClient>>,
    Option<Arc<rustls::ServerConfig>>,
);

/// `--tls` and its options: the client configuration every connection's session
/// comes from (trust from `--tls-ca`, the system store or `--tls-insecure`); without
/// `--target`, the TLS baseline's two sides (see [`baseline_tls`]).
fn tls_client(a: &RunArgs, facts: &HostFacts, transport: Transport) -> Result<TlsSides, PlanError> {
    use crate::transport::tls::{TlsClient, Trust, parse_certs, parse_key};
    let t = &a.tls;
    if !t.tls {
        return match t.first_option() {
            Some(flag) => Err(err(flag, "needs --tls")),
            None => Ok((None, None)),
        };
    }
    if transport != Transport::Tcp {
        return Err(err(
            "tls",
            "is TCP-only (DTLS is not supported): drop --proto udp",
        ));
    }
    let baseline = match a.target.first() {
        Some(_) => None,
        None => Some(baseline_tls(a, facts)?),
    };
    let version = t
        .tls_version
        .as_deref()
        .map(|v| v.parse().map_err(|m: String| err("tls-version", m)))
        .transpose()?;
    let trust = if let Some((trusted, _)) = &baseline {
        Trust::Roots(trusted.clone())
    } else if t.tls_insecure {
        Trust::Insecure
    } else if let Some(path) = &t.tls_ca {
        let bytes = facts
            .file(path)
            .map_err(|e| err("tls-ca", format!("cannot read {}: {e}", path.display())))?;
        Trust::Roots(
            parse_certs(bytes).map_err(|m| err("tls-ca", format!("{}: {m}", path.display())))?,
        )
    } else {
        match &facts.system_roots {
            Some(Ok(roots)) => Trust::Roots(roots.clone()),
            Some(Err(m)) => return Err(err("tls", m.clone())),
            None => return Err(err("tls", "the system's CA certificates were not read")),
        }
    };
    let mut alpn: Vec<String> = t
        .alpn
        .as_deref()
        .map(|l| l.split(',').map(|p| p.trim().to_string()).collect())
        .unwrap_or_default();
    if alpn.iter().any(|p| p.is_empty() || p.len() > 255) {
        return Err(err("alpn", "each protocol must be 1 to 255 bytes"));
    }
    if a.http2 || a.grpc.is_some() {
        if alpn.is_empty() {
            alpn.push("h2".into());
        } else if !alpn.iter().any(|p| p == "h2") {
            return Err(err("alpn", "--http2 over TLS offers h2: add it to --alpn"));
        }
    }
    let sni = t.tls_sni.clone().unwrap_or_else(|| {
        a.target
            .first()
            .map_or(BASELINE_TLS_NAME, |first| host_of(first))
            .to_string()
    });
    let flag = if t.tls_sni.is_some() {
        "tls-sni"
    } else {
        "target"
    };
    let resume = t.tls_resume.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&resume) {
        return Err(err(
            "tls-resume",
            format!("must be between 0 and 1, got {resume}"),
        ));
    }
    let identity = match (&t.tls_cert, &t.tls_key) {
        (Some(cert), Some(key)) => {
            let read = |flag, path: &std::path::Path| {
                facts
                    .file(path)
                    .map_err(|e| err(flag, format!("cannot read {}: {e}", path.display())))
            };
            let certs = parse_certs(read("tls-cert", cert)?)
                .map_err(|m| err("tls-cert", format!("{}: {m}", cert.display())))?;
            let key_der = parse_key(read("tls-key", key)?)
                .map_err(|m| err("tls-key", format!("{}: {m}", key.display())))?;
            Some((certs, key_der))
        }
        _ => None,
    };
    let client = TlsClient::new(&sni, trust, &alpn, version, resume).map_err(|m| err(flag, m))?;
    let client = match identity {
        Some((certs, key)) => client
            .with_identity(certs, key)
            .map_err(|m| err("tls-key", m))?,
        None => client,
    };
    Ok((Some(Arc::new(client)), baseline.map(|(_, server)| server)))
}

/// `--grpc`: the method called, for the report; with frames, --grpc names the
/// members' bidi method (the frame spec's) instead.
fn grpc_method(a: &RunArgs, frames: bool) -> Result<Option<String>, PlanError> {
    a.grpc
        .as_deref()
        .filter(|_| !frames)
        .map(crate::proto::grpc::path)
        .transpose()
        .map_err(|m| err("grpc", m))
}

/// `--server-time`: the source parsed (a bad one refused first), then the runs it
/// cannot read replies of refused rather than ignored.
fn server_time(
    a: &RunArgs,
    requests: &RequestSet,
    (transport, has_target, frames, http2): (Transport, bool, bool, bool),
) -> Result<Option<Arc<crate::proto::ServerTimeSource>>, PlanError> {
    let Some(spec) = &a.server_time else {
        return Ok(None);
    };
    let source: crate::proto::ServerTimeSource = spec.parse().map_err(|m| err("server-time", m))?;
    let http = source.is_http();
    // The HTTP/2 baseline's sink says its own time in Server-Timing.
    let sink_says = http2 && matches!(source, crate::proto::ServerTimeSource::ServerTiming { .. });
    let refused = [
        (
            !has_target && !sink_says,
            "needs --target (the built-in sink's replies carry none; its HTTP/2 replies, \
             --http2, say Server-Timing: sink;dur=)",
        ),
        (
            transport != Transport::Tcp || frames,
            "reads replies of TCP requests: not with --proto udp or --workload frames",
        ),
        (
            http2 && !http,
            "offset:OFF:LEN:UNIT reads raw replies: with --http2 or --grpc use \
             server-timing or header:NAME",
        ),
        (
            http && requests.entries.iter().any(|e| e.framing != Framing::Http1),
            "a header source reads HTTP/1.1 replies: needs --http, or a --mix whose \
             entries all use the http1 framer (offset:OFF:LEN:UNIT reads raw replies)",
        ),
        (
            !http && requests.entries.iter().any(|e| e.framing == Framing::Http1),
            "offset:OFF:LEN:UNIT reads raw replies: not with the http1 framer (use \
             server-timing or header:NAME)",
        ),
    ];
    match refused.into_iter().find(|(bad, _)| *bad) {
        Some((_, why)) => Err(err("server-time", why)),
        None => Ok(Some(Arc::new(source))),
    }
}

/// `--conn-max-age D[±J]` and `--conn-max-requests N`: TCP requests on a timetable
/// against a target.
fn conn_life(
    a: &RunArgs,
    transport: Transport,
    has_target: bool,
) -> Result<Option<crate::engine::worker_plan::ConnLife>, PlanError> {
    let flag = match (&a.conn_max_age, a.conn_max_requests) {
        (None, None) => return Ok(None),
        (Some(_), _) => "conn-max-age",
        (None, Some(_)) => "conn-max-requests",
    };
    let refused = [
        (
            transport != Transport::Tcp,
            "connections are TCP's: not with --proto udp",
        ),
        (
            !has_target,
            "give --target (the loopback baseline keeps its connections)",
        ),
        (
            a.connect_per_request || a.hold || a.concurrency.is_some(),
            "needs requests on a timetable over held connections: not with \
             --connect-per-request, --hold or --concurrency",
        ),
    ];
    if let Some((_, why)) = refused.into_iter().find(|(bad, _)| *bad) {
        return Err(err(flag, why));
    }
    let (max_age_ns, jitter_ns) = match &a.conn_max_age {
        Some(s) => crate::units::parse_age_jitter(s).map_err(|m| err("conn-max-age", m))?,
        None => (u64::MAX, 0),
    };
    let max_requests = match a.conn_max_requests {
        Some(0) => return Err(err("conn-max-requests", "must be at least 1, got 0")),
        Some(n) => n,
        None => u32::MAX,
    };
    Ok(Some(crate::engine::worker_plan::ConnLife {
        max_age_ns,
        jitter_ns,
        max_requests,
    }))
}

/// `--h2-keepalive` bounds: a PING at most every 10 ms, at least every hour.
const H2_KEEPALIVE_NS_MIN: u64 = 10_000_000;
const H2_KEEPALIVE_NS_MAX: u64 = 3_600_000_000_000;

/// `--h2-keepalive D`: a PING on each connection that received nothing for D (10 ms
/// to an hour).
pub(super) fn h2_keepalive_ns(a: &RunArgs) -> Result<Option<u64>, PlanError> {
    let Some(d) = a.load.h2_keepalive.as_deref() else {
        return Ok(None);
    };
    let ns = duration_ns("h2-keepalive", d, H2_KEEPALIVE_NS_MAX)?;
    if ns < H2_KEEPALIVE_NS_MIN {
        return Err(err("h2-keepalive", format!("at least 10ms, got {d}")));
    }
    Ok(Some(ns))
}

/// Requests in flight per connection: `--pipeline`, or with HTTP/2 the streams
/// (`--streams-per-connection`; one with `--connect-per-request`).
fn pipeline(a: &RunArgs, http2: bool) -> usize {
    match (http2, a.streams_per_connection) {
        (false, _) => a.pipeline,
        (true, Some(n)) => n,
        (true, None) if a.connect_per_request => 1,
        (true, None) => HTTP2_STREAMS_DEFAULT,
    }
}

/// Streams per connection with `--http2` unless `--streams-per-connection` says.
const HTTP2_STREAMS_DEFAULT: usize = 100;

/// `--http2` and `--streams-per-connection`: HTTP/1.1 requests (`--http`, http1 entries
/// of a mix) sent as streams over TCP; every entry must convert (no connection
/// headers) with a body of one DATA frame.
/// `--expect`: the assertions compiled (a bad one refused first, whatever else the
/// command line says), then the runs they cannot apply to refused rather than ignored.
fn expect(
    a: &RunArgs,
    requests: &RequestSet,
    (transport, has_target, frames, http2): (Transport, bool, bool, bool),
) -> Result<crate::proto::Expectations, PlanError> {
    let names: Vec<&str> = match a.mix {
        Some(_) => requests.entries.iter().map(|e| e.name.as_str()).collect(),
        None => Vec::new(),
    };
    let expect =
        crate::proto::Expectations::parse(&a.expect, &names).map_err(|m| err("expect", m))?;
    if expect.is_empty() {
        return Ok(expect);
    }
    let refused = [
        (!has_target, "needs --target"),
        (
            transport != Transport::Tcp || frames,
            "asserts HTTP/1.1 replies: not with --proto udp or --workload frames",
        ),
        (
            a.grpc.is_some(),
            "not with --grpc (a call's outcome is its grpc-status)",
        ),
        (
            requests.entries.iter().any(|e| e.framing != Framing::Http1),
            "asserts HTTP/1.1 replies: needs --http, or a --mix whose entries all use the \
             http1 framer",
        ),
    ];
    if let Some((_, why)) = refused.into_iter().find(|(bad, _)| *bad) {
        return Err(err("expect", why));
    }
    if http2 && expect.needs_body() {
        // Each stream's body is kept for the assertions: bounded memory.
        let streams = (a.concurrency.unwrap_or(a.connections))
            .saturating_mul(a.streams_per_connection.unwrap_or(HTTP2_STREAMS_DEFAULT));
        let kept = streams.saturating_mul(EXPECT_H2_BODY_BYTES);
        if kept > EXPECT_H2_KEPT_BYTES_MAX {
            return Err(err(
                "expect",
                format!(
                    "body assertions over HTTP/2 keep {} KiB of each stream's body: {streams} \
                     streams in flight need {} MiB, above {} MiB; use fewer --connections \
                     or --streams-per-connection",
                    EXPECT_H2_BODY_BYTES >> 10,
                    kept >> 20,
                    EXPECT_H2_KEPT_BYTES_MAX >> 20
                ),
            ));
        }
    }
    Ok(expect)
}

fn http2_plan(
    a: &RunArgs,
    requests: &RequestSet,
    transport: Transport,
    has_target: bool,
    frames: bool,
) -> Result<Option<crate::engine::worker_plan::Http2Plan>, PlanError> {
    use crate::proto::h2::request::block_from_http1;
    if frames && !a.http2 && a.streams_per_connection.is_none() {
        // `--frame-proto grpc` carries its own HTTP/2 (the frame plan checked --grpc).
        return Ok(None);
    }
    if !a.http2 && a.grpc.is_none() {
        if a.streams_per_connection.is_some() {
            return Err(err("streams-per-connection", "needs --http2 or --grpc"));
        }
        if a.h2_keepalive.is_some() {
            return Err(err("h2-keepalive", "needs --http2 or --grpc"));
        }
        return Ok(None);
    }
    let refused = [
        (transport != Transport::Tcp, "udp", "HTTP/2 runs over TCP"),
        (
            frames,
            "workload",
            "HTTP/2 carries requests, not frames (yet)",
        ),
        (
            a.connect_per_request && a.streams_per_connection.is_some_and(|n| n != 1),
            "connect-per-request",
            "one request per connection: --streams-per-connection must be 1",
        ),
        (
            a.pipeline != 1,
            "pipeline",
            "with --http2, requests in flight per connection are --streams-per-connection",
        ),
    ];
    if let Some((_, flag, why)) = refused.into_iter().find(|(bad, _, _)| *bad) {
        return Err(err(flag, why));
    }
    let connections = a.concurrency.unwrap_or(a.connections);
    if !has_target && connections > TLS_BASELINE_CONNECTIONS_MAX {
        return Err(err(
            "connections",
            format!(
                "the HTTP/2 baseline takes at most {TLS_BASELINE_CONNECTIONS_MAX} (its \
                 built-in sink's HTTP/2 front runs a thread per connection), got {connections}"
            ),
        ));
    }
    if let Some(n) = a.streams_per_connection
        && !(1..=PIPELINE_MAX).contains(&n)
    {
        return Err(err(
            "streams-per-connection",
            format!("must be between 1 and {PIPELINE_MAX}, got {n}"),
        ));
    }
    let scheme = if a.tls.tls { "https" } else { "http" };
    let mut block = Vec::new();
    let mut out = vec![0u8; requests.max_len()];
    for e in &requests.entries {
        if e.framing != Framing::Http1 {
            return Err(err(
                "http2",
                "sends HTTP requests: give --http, or a --mix whose entries are http1",
            ));
        }
        let n = e.template.render(
            &Default::default(),
            &mut fastrand::Rng::with_seed(0),
            &mut out,
        );
        let body = block_from_http1(&out[..n], scheme, &mut block)
            .map_err(|m| err("http2", format!("request {:?}: {m}", e.name)))?;
        let flag = if a.grpc.is_some() {
            "grpc-message"
        } else {
            "body"
        };
        if body.len() > HTTP2_BODY_BYTES_MAX {
            return Err(err(
                flag,
                format!(
                    "with --http2 a request body is at most {HTTP2_BODY_BYTES_MAX} bytes, got {}",
                    body.len()
                ),
            ));
        }
        if e.template.max_len() > crate::proto::h2::FRAME_SIZE_MIN as usize
            && e.template.static_after(b"\r\n\r\n").is_none()
        {
            // Rendered per request and kept, past its first DATA frame, in its
            // request slot until the windows let it go: bounded memory.
            let streams = connections.saturating_mul(pipeline(a, true));
            let kept = streams.saturating_mul(requests.max_len());
            if kept > HTTP2_TAILS_BYTES_MAX {
                return Err(err(
                    flag,
                    format!(
                        "a body with placeholders longer than one DATA frame ({} bytes) is \
                         kept per stream until it is sent: {streams} streams in flight x {} \
                         bytes need {} MiB, above {} MiB; use fewer --connections or \
                         --streams-per-connection, a shorter body, or one without \
                         placeholders",
                        crate::proto::h2::FRAME_SIZE_MIN,
                        requests.max_len(),
                        kept >> 20,
                        HTTP2_TAILS_BYTES_MAX >> 20
                    ),
                ));
            }
        }
    }
    let keepalive_ns = h2_keepalive_ns(a)?;
    Ok(Some(crate::engine::worker_plan::Http2Plan {
        scheme,
        grpc: a.grpc.is_some(),
        keepalive_ns,
    }))
}

/// The name the TLS baseline's certificate carries and its client sends.
const BASELINE_TLS_NAME: &str = "localhost";

/// `--tls` without `--target`: the loopback baseline over TLS. Its sink's TLS front
/// serves the certificate made at start for localhost (`facts.baseline_cert`), and
/// the client trusts that certificate alone: (the client's roots, the server's
/// configuration). The options that choose whom to trust or whom to present to have
/// nothing to act on there, so each is one line naming it; `--connections` is held to
/// [`TLS_BASELINE_CONNECTIONS_MAX`], the front's thread per connection.
fn baseline_tls(
    a: &RunArgs,
    facts: &HostFacts,
) -> Result<
    (
        Vec<rustls::pki_types::CertificateDer<'static>>,
        Arc<rustls::ServerConfig>,
    ),
    PlanError,
> {
    let t = &a.tls;
    let refused = [
        (
            "tls-ca",
            t.tls_ca.is_some(),
            "the TLS baseline's client trusts exactly the certificate its built-in sink \
             makes at start, no CA: drop --tls-ca, or give --target",
        ),
        (
            "tls-insecure",
            t.tls_insecure,
            "the TLS baseline verifies the certificate its built-in sink makes at start, \
             as a real client would: drop --tls-insecure, or give --target",
        ),
        (
            "tls-cert",
            t.tls_cert.is_some(),
            "the TLS baseline's built-in sink asks for no client certificate: drop \
             --tls-cert and --tls-key, or give --target",
        ),
    ];
    if let Some((flag, _, why)) = refused.into_iter().find(|(_, given, _)| *given) {
        return Err(err(flag, why));
    }
    if let Some(sni) = &t.tls_sni
        && sni != BASELINE_TLS_NAME
    {
        return Err(err(
            "tls-sni",
            format!(
                "the TLS baseline's built-in sink has a certificate for {BASELINE_TLS_NAME} \
                 only, not {sni:?}: drop --tls-sni, or give --target"
            ),
        ));
    }
    let connections = a.concurrency.unwrap_or(a.connections);
    if connections > TLS_BASELINE_CONNECTIONS_MAX {
        return Err(err(
            "connections",
            format!(
                "the TLS baseline takes at most {TLS_BASELINE_CONNECTIONS_MAX} (its built-in \
                 sink's TLS front runs a thread per connection), got {connections}"
            ),
        ));
    }
    let cert = match &facts.baseline_cert {
        Some(Ok(c)) => c,
        Some(Err(m)) => return Err(err("tls", m.clone())),
        None => return Err(err("tls", "the baseline's certificate was not made")),
    };
    let server = crate::transport::tls::server_config(&cert.cert_pem, &cert.key_pem)
        .map_err(|m| err("tls", format!("the baseline's certificate: {m}")))?;
    let trusted = crate::transport::tls::parse_certs(&cert.cert_pem)
        .map_err(|m| err("tls", format!("the baseline's certificate: {m}")))?;
    Ok((trusted, server))
}

/// The host part of a `--target` as given: `HOST:PORT`, `[V6]:PORT`.
fn host_of(target: &str) -> &str {
    let host = target.rsplit_once(':').map_or(target, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// `--duration` and `--warmup` (shorter than the duration), in ns.
fn duration_and_warmup(
    a: &RunArgs,
    replay: Option<&crate::request::replay::ReplayPlan>,
) -> Result<(u64, u64), PlanError> {
    let given = a
        .duration
        .as_deref()
        .map(|d| duration_ns("duration", d, DURATION_NS_MAX))
        .transpose()?;
    let duration = match replay {
        Some(r) => super::replay::duration_ns(r, given),
        None => given.unwrap_or(10_000_000_000),
    };
    let warmup = if a.warmup.trim() == "0" {
        0
    } else {
        duration_ns("warmup", &a.warmup, DURATION_NS_MAX)?
    };
    if warmup >= duration {
        return Err(err(
            "warmup",
            format!(
                "must be shorter than the run ({}), got {:?}",
                crate::units::fmt_ns(duration),
                a.warmup
            ),
        ));
    }
    Ok((duration, warmup))
}

/// A warm-up needs TCP requests on a timetable against a target.
fn check_warmup(
    a: &RunArgs,
    warmup: u64,
    frames: bool,
    has_target: bool,
    transport: Transport,
) -> Result<(), PlanError> {
    if warmup > 0
        && (frames
            || a.hold
            || a.concurrency.is_some()
            || !has_target
            || transport != Transport::Tcp)
    {
        return Err(err(
            "warmup",
            "needs TCP requests on a timetable against --target: not with --proto udp, --workload frames, --hold, --concurrency or the loopback baseline",
        ));
    }
    Ok(())
}

/// `--workload frames` against the flags it excludes, the target and the shard, and
/// at least one room per worker core.
fn check_frames(
    a: &RunArgs,
    f: &FramePlan,
    has_rate: bool,
    fleet: &Fleet,
    has_target: bool,
    cores: usize,
) -> Result<(), PlanError> {
    let conflicting = has_rate
        || a.hold
        || a.connect_per_request
        || a.concurrency.is_some()
        || a.no_response
        || a.http.is_some()
        || a.mix.is_some()
        || a.framing.is_some();
    if conflicting {
        return Err(err(
            "workload",
            "frames sends one frame per connection per --tick: drop --rate, --hold, --connect-per-request, --concurrency, --no-response, --http, --mix and --framing",
        ));
    }
    if !has_target {
        return Err(err(
            "workload",
            "frames needs --target (a broadcast server, e.g. blaster sink --mode broadcast)",
        ));
    }
    let rooms = f.grid.rooms() as usize;
    let shards = fleet.shard.count() as usize;
    if shards > 1 && rooms < cores * shards {
        return Err(err(
            "shard",
            format!(
                "{} connections in rooms of {} make {rooms} rooms: {shards} shards of {cores} worker cores need at least {} (a shard runs whole rooms, a worker at least one); at most {} shards fit",
                a.connections,
                f.grid.room_size,
                cores * shards,
                rooms / cores,
            ),
        ));
    }
    if rooms < cores {
        return Err(err(
            "room-size",
            format!(
                "{} connections in rooms of {} make {rooms} rooms, fewer than the {cores} worker cores (a room's members share a worker)",
                a.connections, f.grid.room_size,
            ),
        ));
    }
    Ok(())
}

/// `--concurrency` (the closed loop): over TCP against a target, within bounds.
fn check_concurrency(a: &RunArgs, has_target: bool, transport: Transport) -> Result<(), PlanError> {
    let Some(n) = a.concurrency else {
        return Ok(());
    };
    if !has_target || transport != Transport::Tcp || a.hold || a.connect_per_request {
        return Err(err(
            "concurrency",
            "closed loop needs --target over TCP, without --hold or --connect-per-request",
        ));
    }
    if n == 0 || n > CONNECTIONS_MAX {
        return Err(err(
            "concurrency",
            format!("must be between 1 and {CONNECTIONS_MAX}, got {n}"),
        ));
    }
    Ok(())
}

/// The rate asked for: `rate_given` (a constant) in place of `--rate`, else `--rate`'s
/// spec (a rate file read through `facts`), else none.
fn rate_spec(
    a: &RunArgs,
    facts: &HostFacts,
    rate_given: Option<f64>,
    duration: u64,
) -> Result<Option<RateSpec>, PlanError> {
    Ok(match (rate_given, a.rate.as_deref()) {
        (Some(r), _) => Some(RateSpec::Shaped(
            RateShape::constant(r).map_err(|m| err("rate", m))?,
        )),
        (None, Some(r)) => Some(
            parse_rate_spec_in(r, duration, a.seed, &|p| {
                facts.text(std::path::Path::new(p)).map(str::to_string)
            })
            .map_err(|m| err("rate", m))?,
        ),
        (None, None) => None,
    })
}

/// What the run's mean rate depends on beyond the rate spec.
struct RateInputs<'p> {
    heartbeat_ns: Option<u64>,
    frames: Option<&'p FramePlan>,
    transport: Transport,
    has_target: bool,
    duration_ns: u64,
    /// `--replay`: the recording's mean rate.
    replay_rps: Option<f64>,
}

/// The run's mean rate and its shape: from the spec, or from `--hold`'s heartbeats,
/// the closed loop (0) or the frames' ticks; `None` for the loopback baseline.
fn rate(
    a: &RunArgs,
    spec: Option<RateSpec>,
    r: &RateInputs,
) -> Result<(Option<f64>, Option<RateShape>), PlanError> {
    Ok(match spec {
        None if a.hold => match r.heartbeat_ns {
            // One heartbeat per connection per period, spread evenly.
            Some(h) => {
                let rps = check_rate("heartbeat", a.connections as f64 * 1e9 / h as f64)?;
                let shape = RateShape::constant(rps).map_err(|m| err("heartbeat", m))?;
                (Some(rps), Some(shape))
            }
            None => (Some(0.0), None),
        },
        None if a.concurrency.is_some() => (Some(0.0), None),
        None if r.replay_rps.is_some() => (r.replay_rps, None),
        // Frames: one per sending member per tick.
        None if r.frames.is_some() => {
            let f = r.frames.expect("checked");
            let rps = check_rate(
                "tick",
                (f.grid.senders_total() * f.members_per_connection as u64) as f64 * 1e9
                    / f.grid.tick_ns as f64,
            )?;
            let shape = RateShape::constant(rps).map_err(|m| err("tick", m))?;
            (Some(rps), Some(shape))
        }
        Some(RateSpec::Max) if r.transport == Transport::UdpBlast => (Some(f64::INFINITY), None),
        Some(RateSpec::Max) => {
            return Err(err("rate", "max is only for --proto udp --no-response"));
        }
        Some(RateSpec::Shaped(s)) => {
            check_rate("rate", s.peak_rps())?;
            let mean = s
                .constant_rps()
                .unwrap_or_else(|| s.mean_rps(r.duration_ns));
            (Some(mean), Some(s))
        }
        None if r.has_target => {
            return Err(err(
                "rate",
                "is required with --target (requests per second)",
            ));
        }
        None => (None, None),
    })
}

/// The unary call's message: `--grpc-message FILE` as it is, `--grpc-json` encoded
/// against `--grpc-proto` (its `{rand:N}` drawn per request), or empty.
fn grpc_message(
    a: &RunArgs,
    method: &str,
    facts: &HostFacts,
) -> Result<crate::request::protobuf::MessageTemplate, PlanError> {
    use crate::request::protobuf::{MessageTemplate, ProtoError, message_template_from_json};
    let read = |flag, f: &std::path::Path| {
        facts
            .file(f)
            .map(<[u8]>::to_vec)
            .map_err(|e| err(flag, format!("cannot read {}: {e}", f.display())))
    };
    let literal = |bytes| MessageTemplate {
        bytes,
        rand: Vec::new(),
    };
    match (&a.grpc_message, &a.grpc_proto, &a.grpc_json) {
        (Some(f), _, _) => read("grpc-message", f).map(literal),
        (None, Some(p), Some(json)) => {
            message_template_from_json(p, &read("grpc-proto", p)?, method, json).map_err(
                |e| match e {
                    ProtoError::Proto(m) => err("grpc-proto", m),
                    ProtoError::Json(m) => err("grpc-json", m),
                },
            )
        }
        (None, Some(_), None) => Err(err(
            "grpc-proto",
            "needs --grpc-json: the request message, as JSON",
        )),
        (None, None, Some(_)) => Err(err(
            "grpc-json",
            "needs --grpc-proto FILE: the .proto that defines the method's input",
        )),
        (None, None, None) => Ok(literal(Vec::new())),
    }
}

/// What the run sends: `--http` (with `-H` and a body), `--mix`, or one payload.
fn requests(a: &RunArgs, facts: &HostFacts) -> Result<RequestSet, PlanError> {
    let mut set = requests_unfed(a, facts)?;
    // `{line:FILE}`, `{csv:FILE:COLUMN}`: the files the facts read.
    let flag = if a.mix.is_some() {
        "mix"
    } else if a.http.is_some() {
        "http"
    } else {
        "payload"
    };
    for e in &mut set.entries {
        e.template
            .resolve_feeds(&mut |p| facts.file(p).map(<[u8]>::to_vec))
            .map_err(|m| err(flag, m))?;
    }
    Ok(set)
}

/// [`requests`] before the feeders' files are read into their templates.
fn requests_unfed(a: &RunArgs, facts: &HostFacts) -> Result<RequestSet, PlanError> {
    let host = a.target.first().cloned().unwrap_or_default();
    for h in &a.headers {
        crate::request::http::check_header(h).map_err(|m| err("header", m))?;
    }
    let http_of = |spec: &str, body: Option<&[u8]>| {
        crate::request::http::request(spec, &a.headers, body, &host)
    };
    if let Some(method) = a.grpc.as_ref().filter(|_| a.work.workload != "frames") {
        let message = grpc_message(a, method, facts)?;
        let timeout_ns = duration_ns("timeout", &a.timeout, TIMEOUT_NS_MAX)?;
        let mut headers = a.headers.clone();
        for m in &a.grpc_metadata {
            let m = crate::proto::frame_proto::grpc::Metadata::parse(m)
                .map_err(|m| err("grpc-metadata", m))?;
            if m.value.contains("{room}") {
                return Err(err(
                    "grpc-metadata",
                    "{room} is a member's room: with --workload frames --frame-proto grpc",
                ));
            }
            headers.push(format!("{}: {}", m.name, m.value));
        }
        let t = crate::request::http::grpc_request_drawn(
            method,
            &headers,
            &message.bytes,
            &message.rand,
            &host,
            timeout_ns,
        )
        .map_err(|m| err("grpc", m))?;
        Ok(RequestSet::single(t, Framing::Http1))
    } else if let Some(spec) = &a.http {
        let body = match (&a.body, &a.body_file) {
            (Some(b), _) => Some(unescape("body", b)?),
            (None, Some(f)) => Some(
                facts
                    .file(f)
                    .map_err(|e| err("body-file", format!("cannot read {}: {e}", f.display())))?
                    .to_vec(),
            ),
            _ => None,
        };
        let framing = framing_or(a, "http1")?;
        let t = http_of(spec, body.as_deref()).map_err(|m| err("http", m))?;
        Ok(RequestSet::single(t, framing))
    } else if let Some(f) = &a.mix {
        let text = facts
            .text(f)
            .map_err(|e| err("mix", format!("cannot read {}: {e}", f.display())))?;
        let entries = crate::request::mix::parse(
            text,
            |s| unescape("mix", s).map_err(|e| e.message),
            |s| http_of(s, None),
        )
        .map_err(|m| err("mix", format!("{}: {m}", f.display())))?;
        Ok(RequestSet::new(entries, true))
    } else if a.http2 && a.payload.is_none() && a.payload_file.is_none() && a.payload_size.is_none()
    {
        // `--http2` alone (the loopback baseline's `blaster --http2`): `GET /`.
        let t = http_of("GET /", None).map_err(|m| err("http", m))?;
        Ok(RequestSet::single(t, Framing::Http1))
    } else {
        payload_request(a, facts)
    }
}

/// `--framing`, or `default` when not given.
fn framing_or(a: &RunArgs, default: &str) -> Result<Framing, PlanError> {
    a.framing
        .as_deref()
        .unwrap_or(default)
        .parse()
        .map_err(|m| err("framing", m))
}

/// One payload: `--heartbeat-payload`, `--payload` (placeholders allowed),
/// `--payload-file` (byte for byte) or `--payload-size` bytes of `x`.
fn payload_request(a: &RunArgs, facts: &HostFacts) -> Result<RequestSet, PlanError> {
    let (flag, bytes) = if let Some(p) = &a.heartbeat_payload {
        ("heartbeat-payload", unescape("heartbeat-payload", p)?)
    } else if let Some(p) = &a.payload {
        ("payload", unescape("payload", p)?)
    } else if let Some(f) = &a.payload_file {
        (
            "payload-file",
            facts
                .file(f)
                .map_err(|e| err("payload-file", format!("cannot read {}: {e}", f.display())))?
                .to_vec(),
        )
    } else {
        ("payload-size", vec![b'x'; a.payload_size.unwrap_or(64)])
    };
    if bytes.is_empty() || bytes.len() > PAYLOAD_BYTES_MAX {
        return Err(err(
            flag,
            format!(
                "the payload must be between 1 and {PAYLOAD_BYTES_MAX} bytes, got {}",
                bytes.len()
            ),
        ));
    }
    // A payload from a file is sent byte for byte; text may hold placeholders.
    let t = if flag == "payload" {
        Template::parse(&bytes).map_err(|m| err("payload", m))?
    } else {
        Template::literal(&bytes)
    };
    Ok(RequestSet::single(t, framing_or(a, "echo")?))
}

/// The requests' checked outputs: the static payload (empty when the requests render
/// per request), the framing, and `--max-response`.
struct CheckedRequests {
    payload: Vec<u8>,
    framing: Framing,
    max_response: usize,
}

/// The requests against the size bounds, the framing and the transport.
fn check_requests(
    a: &RunArgs,
    requests: &RequestSet,
    transport: Transport,
    has_target: bool,
) -> Result<CheckedRequests, PlanError> {
    if requests.max_len() > PAYLOAD_BYTES_MAX {
        return Err(err(
            "payload",
            format!("a request may render to at most {PAYLOAD_BYTES_MAX} bytes"),
        ));
    }
    let framing = requests.framing();
    if requests.entries.iter().any(|e| e.framing == Framing::Echo)
        && requests.static_bytes().is_none()
    {
        return Err(err(
            "framing",
            "echo needs one request of fixed bytes: with placeholders or a mix, use fixed:N or a protocol framer",
        ));
    }
    let payload: Vec<u8> = requests
        .static_bytes()
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    if transport != Transport::Tcp && payload.is_empty() {
        return Err(err(
            "proto",
            "udp sends one static payload: placeholders, --http and --mix are TCP-only",
        ));
    }
    let max_response = parse_size("max-response", &a.max_response)?;
    for e in &requests.entries {
        if let Framing::Fixed(n) = e.framing
            && n > max_response
        {
            return Err(err(
                "max-response",
                format!("fixed:{n} responses exceed --max-response {max_response}"),
            ));
        }
    }
    let http2 = a.http2 || a.grpc.is_some();
    if !has_target && !http2 && !matches!(framing, Framing::Echo | Framing::Fixed(_)) {
        return Err(err(
            "framing",
            "the loopback baseline (no --target) uses echo or fixed:N",
        ));
    }
    if transport != Transport::Tcp && payload.len() + crate::proto::udp_header::HEADER_LEN > 65_000
    {
        return Err(err(
            "payload",
            "a UDP payload must fit one datagram (at most 64976 bytes)",
        ));
    }
    Ok(CheckedRequests {
        payload,
        framing,
        max_response,
    })
}

/// `--spin` (auto, 0, or a duration of at most [`SPIN_NS_MAX`]) and `--resolution`
/// (0, or at most [`RESOLUTION_NS_MAX`]).
fn precision(a: &RunArgs) -> Result<Precision, PlanError> {
    let spin = match a.spin.trim() {
        "auto" => Spin::Auto,
        "0" => Spin::Fixed(0),
        text => {
            let d = parse_duration("spin", text)?.as_nanos();
            if d > SPIN_NS_MAX as u128 {
                return Err(err(
                    "spin",
                    format!("must be auto or at most 1s, got {text:?}"),
                ));
            }
            Spin::Fixed(d as u64)
        }
    };
    let resolution_ns = match a.resolution.trim() {
        "0" => 0,
        text => {
            let d = parse_duration("resolution", text)?.as_nanos();
            if d > RESOLUTION_NS_MAX as u128 {
                return Err(err(
                    "resolution",
                    format!("must be at most 100ms, got {text:?}"),
                ));
            }
            d as u64
        }
    };
    Ok(Precision {
        resolution_ns,
        spin,
    })
}
