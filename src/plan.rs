//! Raw arguments -> a validated, immutable [`RunPlan`]. Every cross-flag check and
//! every bound lives here, so the engine never sees a plan it cannot run. Messages
//! name the flag and the bound.

use crate::cli::{RunArgs, SinkArgs};
use crate::engine::backoff::Backoff;
use crate::engine::frames::FrameGrid;
use crate::engine::socket::SockOpts;
use crate::engine::worker_plan::FramePlan;
use crate::engine::{Transport, WorkerPlan};
use crate::fleet::Fleet;
use crate::limits::*;
use crate::proto::Framing;
use crate::request::{RequestSet, Template};
use crate::schedule::{ArrivalKind, RateShape, RateSpec, parse_rate_spec};
use crate::sink::{
    AggregateConfig, BroadcastConfig, CLOSE_EVERY_MAX, CLOSE_EVERY_MIN, DEFAULT_TICK,
    ROOM_SIZE_MAX, SinkConfig, SinkMode, TCP_DOWN_BYTES_MAX, TICK_MAX, TICK_MIN,
    UDP_DOWN_BYTES_MAX, down_bytes_min,
};
use crate::units::list_cores;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A usage error: the command line asks for something that cannot be run (exit 2).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--{flag}: {message}")]
pub struct PlanError {
    pub flag: &'static str,
    pub message: String,
}

fn err(flag: &'static str, message: impl Into<String>) -> PlanError {
    PlanError {
        flag,
        message: message.into(),
    }
}

#[derive(Debug, Clone)]
pub struct RunPlan {
    /// `None`: the loopback baseline against the built-in sink. The first of `targets`.
    pub target: Option<SocketAddr>,
    /// Every `--target` (empty for the baseline).
    pub targets: Vec<SocketAddr>,
    /// `--source-ip` addresses (empty: the kernel chooses).
    pub sources: Vec<IpAddr>,
    pub sockopts: SockOpts,
    /// `--connect-rate`, connections per second in total.
    pub connect_rate: Option<f64>,
    /// `--hold`: connections without request traffic (heartbeats only).
    pub hold: bool,
    /// `--heartbeat` period with `--hold`.
    pub heartbeat_ns: Option<u64>,
    /// Reconnect backoff; `None` with `--no-reconnect`.
    pub backoff: Option<Backoff>,
    /// `--connect-per-request`.
    pub per_request: bool,
    /// The `--rate` shape (`None` for the baseline, `--rate max`, closed loop and
    /// `--hold` without heartbeats); `rate_rps` is then its mean.
    pub shape: Option<RateShape>,
    pub arrivals: ArrivalKind,
    /// `--concurrency`: closed loop, one request in flight per connection.
    pub closed_loop: bool,
    /// `--link-speed`, bits/s.
    pub link_speed_bps: Option<u64>,
    /// Workers (each one ring) per core: more than one when a core's connections do
    /// not fit one ring's file table (RLIMIT_NOFILE); set by the preflight. Default 1.
    pub rings_per_core: usize,
    pub cores: Vec<usize>,
    /// `--control-core`: where the main thread (collector) and helper threads run.
    pub control_core: usize,
    pub connections: usize,
    /// `None` only for the baseline, which steps its own rate; infinite for `max`.
    pub rate_rps: Option<f64>,
    pub transport: Transport,
    pub max_response: usize,
    pub seed: u64,
    pub spin_ns: u64,
    pub duration_ns: u64,
    pub pipeline: usize,
    /// The request when it is one static payload (else empty; see `requests`).
    pub payload: Arc<[u8]>,
    pub requests: Arc<RequestSet>,
    /// The framing when every request uses the same one (else that of the first).
    pub framing: Framing,
    pub timeout_ns: u64,
    pub max_lag_ns: u64,
    pub json: Option<PathBuf>,
    pub progress: bool,
    pub step_duration_ns: u64,
    pub start_rate_rps: f64,
    /// `--shard`, `--start-at`, `--run-id`. With N shards, `connections` and
    /// `connect_rate` above are already this shard's part.
    pub fleet: Fleet,
    /// `--workload frames` (`None`: request/response).
    pub frames: Option<FramePlan>,
}

/// `--workload`, `--tick`, `--frame-size`, `--room-size`, `--frame-budget`,
/// `--echo-to-sender`, `--aggregate`: the frame run, or `None` for request/response
/// (where the frame flags are refused).
fn frame_plan(a: &RunArgs) -> Result<Option<FramePlan>, PlanError> {
    let frame_flags = a.tick.is_some()
        || a.frame_size.is_some()
        || a.room_size.is_some()
        || a.frame_budget.is_some()
        || a.echo_to_sender;
    match a.workload.as_str() {
        "requests" => {
            if a.aggregate {
                return Err(err("aggregate", "needs --workload frames"));
            }
            if frame_flags {
                return Err(err(
                    "workload",
                    "--tick, --frame-size, --room-size, --frame-budget and --echo-to-sender need --workload frames",
                ));
            }
            return Ok(None);
        }
        "frames" => {}
        w => {
            return Err(err(
                "workload",
                format!("expected requests or frames, got {w:?}"),
            ));
        }
    }
    if a.aggregate {
        return Err(err(
            "aggregate",
            "aggregated downlink frames are not measured by the generator yet: use the relayed broadcast (drop --aggregate)",
        ));
    }
    let tick_s = a.tick.as_deref().unwrap_or("33ms");
    let tick_ns = parse_duration("tick", tick_s)?.as_nanos();
    if !(u128::from(TICK_NS_MIN)..=u128::from(TICK_NS_MAX)).contains(&tick_ns) {
        return Err(err(
            "tick",
            format!("must be between 1ms and 10s, got {tick_s:?}"),
        ));
    }
    let tick_ns = tick_ns as u64;
    let frame_size = a.frame_size.unwrap_or(50);
    let (lo, hi) = (
        crate::proto::frame::HEADER_BYTES,
        crate::proto::frame::FRAME_BYTES_MAX,
    );
    if !(lo..=hi).contains(&frame_size) {
        return Err(err(
            "frame-size",
            format!("must be between {lo} (the frame header) and {hi} bytes, got {frame_size}"),
        ));
    }
    let room_size = a.room_size.unwrap_or(10);
    if room_size == 0 || room_size > a.connections || room_size > usize::from(u16::MAX) {
        return Err(err(
            "room-size",
            format!(
                "must be between 1 and --connections ({}), got {room_size}",
                a.connections
            ),
        ));
    }
    let budget_ns = match a.frame_budget.as_deref() {
        Some(b) => duration_ns("frame-budget", b, TIMEOUT_NS_MAX)?,
        None => tick_ns,
    };
    Ok(Some(FramePlan {
        grid: FrameGrid {
            tick_ns,
            connections: a.connections as u64,
            room_size: room_size as u64,
        },
        frame_size,
        budget_ns,
        echo: a.echo_to_sender,
    }))
}

/// Parses `--keepalive idle,interval,count`, e.g. `30s,10s,3`.
fn parse_keepalive(s: &str) -> Result<(Duration, Duration, u32), PlanError> {
    let bad = || {
        err(
            "keepalive",
            format!("expected idle,interval,count such as 30s,10s,3, got {s:?}"),
        )
    };
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let [idle, interval, count] = parts[..] else {
        return Err(bad());
    };
    let idle = parse_duration("keepalive", idle)?;
    let interval = parse_duration("keepalive", interval)?;
    let count: u32 = count.parse().map_err(|_| bad())?;
    if idle.as_secs() == 0 || interval.as_secs() == 0 || count == 0 {
        return Err(err(
            "keepalive",
            format!("idle and interval must be whole seconds >= 1s and count >= 1, got {s:?}"),
        ));
    }
    Ok((idle, interval, count))
}

/// Parses a duration in the one grammar ([`crate::units::parse_duration`]).
pub fn parse_duration(flag: &'static str, s: &str) -> Result<Duration, PlanError> {
    crate::units::parse_duration(s).map_err(|m| err(flag, m))
}

fn duration_ns(flag: &'static str, s: &str, max_ns: u64) -> Result<u64, PlanError> {
    let d = parse_duration(flag, s)?;
    let ns = d.as_nanos();
    if ns == 0 {
        return Err(err(flag, format!("must be greater than 0, got {s:?}")));
    }
    if ns > max_ns as u128 {
        return Err(err(
            flag,
            format!(
                "must be at most {}, got {s:?}",
                crate::units::fmt_ns(max_ns)
            ),
        ));
    }
    Ok(ns as u64)
}

/// Parses `3`, `4-11`, `0,2,4-6` and checks every core is one this process may use.
pub fn parse_cores(flag: &'static str, s: &str, usable: &[usize]) -> Result<Vec<usize>, PlanError> {
    let mut cores = Vec::new();
    for range in crate::units::parse_core_list(s).map_err(|m| err(flag, m))? {
        for c in range {
            if !usable.contains(&c) {
                return Err(err(
                    flag,
                    format!(
                        "unknown core {c}: this process may use cores {}",
                        list_cores(usable)
                    ),
                ));
            }
            if cores.contains(&c) {
                return Err(err(flag, format!("core {c} is listed twice")));
            }
            cores.push(c);
        }
    }
    Ok(cores)
}

/// `--control-core`: the given core when this process may use it; by default the first
/// usable core that runs no worker, else the first worker core.
fn control_core(
    given: Option<usize>,
    cores: &[usize],
    usable: &[usize],
) -> Result<usize, PlanError> {
    match given {
        Some(c) if usable.contains(&c) => Ok(c),
        Some(c) => Err(err(
            "control-core",
            format!(
                "unknown core {c}: this process may use cores {}",
                list_cores(usable)
            ),
        )),
        None => Ok(usable
            .iter()
            .copied()
            .find(|c| !cores.contains(c))
            .or_else(|| cores.first().copied())
            .unwrap_or(0)),
    }
}

/// The cores this process may run on: its affinity mask as first seen (read once, so
/// pinning a thread later does not shrink it).
pub fn usable_cores() -> Vec<usize> {
    static USABLE: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    USABLE
        .get_or_init(|| match core_affinity::get_core_ids() {
            Some(ids) if !ids.is_empty() => ids.into_iter().map(|c| c.id).collect(),
            _ => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
        })
        .clone()
}

/// Decodes the escapes of a payload given as text (see [`crate::proto::unescape`]).
pub fn unescape(flag: &'static str, s: &str) -> Result<Vec<u8>, PlanError> {
    crate::proto::unescape(s).map_err(|m| err(flag, m))
}

fn resolve(flag: &'static str, s: &str) -> Result<SocketAddr, PlanError> {
    let mut addrs = s
        .to_socket_addrs()
        .map_err(|e| err(flag, format!("expected HOST:PORT, got {s:?} ({e})")))?;
    let addr = addrs
        .next()
        .ok_or_else(|| err(flag, format!("{s:?} resolves to no address")))?;
    if addr.port() == 0 && flag == "target" {
        return Err(err(flag, format!("port 0 is not a target port, got {s:?}")));
    }
    Ok(addr)
}

impl RunPlan {
    pub fn from_args(a: &RunArgs, usable: &[usize]) -> Result<RunPlan, PlanError> {
        let fleet = Fleet::parse(
            a.shard.as_deref(),
            a.start_at.as_deref(),
            a.run_id.as_deref(),
            crate::wallclock::now_unix_ns(),
        )
        .map_err(|(flag, m)| err(flag, m))?;
        if !fleet.shard.is_whole() && a.target.is_empty() {
            return Err(err(
                "shard",
                "needs --target (the loopback baseline runs on one machine)",
            ));
        }
        let targets = a
            .target
            .iter()
            .map(|t| resolve("target", t))
            .collect::<Result<Vec<_>, _>>()?;
        let target = targets.first().copied();
        let sources = match &a.source_ip {
            Some(spec) => {
                if target.is_none() {
                    return Err(err("source-ip", "needs --target"));
                }
                let ips = crate::ports::parse_source_ips(spec).map_err(|m| err("source-ip", m))?;
                if let Some(bad) = targets.iter().find(|t| t.is_ipv4() != ips[0].is_ipv4()) {
                    return Err(err(
                        "source-ip",
                        format!("{} and target {bad} are of different IP versions", ips[0]),
                    ));
                }
                ips
            }
            None => Vec::new(),
        };
        let connect_rate = match a.connect_rate {
            Some(r) if !(r > 0.0 && r.is_finite()) => {
                return Err(err(
                    "connect-rate",
                    format!("must be a positive number of connections per second, got {r}"),
                ));
            }
            r => r,
        };
        let heartbeat_ns = a
            .heartbeat
            .as_deref()
            .map(|h| duration_ns("heartbeat", h, DURATION_NS_MAX))
            .transpose()?;
        if a.hold && a.rate.is_some() {
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
        let backoff = if a.no_reconnect {
            None
        } else {
            Some(match &a.reconnect_backoff {
                Some(spec) => spec
                    .parse::<Backoff>()
                    .map_err(|e| err("reconnect-backoff", e.to_string()))?,
                None => Backoff::default(),
            })
        };
        let sockopts = SockOpts {
            sockbuf: a
                .sockbuf
                .as_deref()
                .map(|v| parse_size("sockbuf", v))
                .transpose()?,
            keepalive: a.keepalive.as_deref().map(parse_keepalive).transpose()?,
            linger0: a.linger0,
        };
        let cores = parse_cores("cores", a.cores.as_deref().unwrap_or("0"), usable)?;
        if a.connections == 0 || a.connections > CONNECTIONS_MAX {
            return Err(err(
                "connections",
                format!(
                    "must be between 1 and {CONNECTIONS_MAX}, got {}",
                    a.connections
                ),
            ));
        }
        if a.connections < cores.len() {
            return Err(err(
                "connections",
                format!(
                    "must be at least one per worker core ({}), got {}",
                    cores.len(),
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
        let transport = match (a.proto.as_str(), a.no_response) {
            ("tcp", false) => Transport::Tcp,
            ("tcp", true) => return Err(err("no-response", "needs --proto udp")),
            ("udp", false) => Transport::Udp,
            ("udp", true) => Transport::UdpBlast,
            (p, _) => return Err(err("proto", format!("expected tcp or udp, got {p:?}"))),
        };
        if transport != Transport::Tcp
            && (a.http.is_some() || a.mix.is_some() || a.framing.is_some())
        {
            return Err(err(
                "proto",
                "udp matches responses by sequence: --http, --mix and --framing are TCP-only",
            ));
        }
        if transport != Transport::Tcp
            && (a.hold || a.connect_per_request || a.source_ip.is_some() || targets.len() > 1)
        {
            return Err(err(
                "proto",
                "--hold, --connect-per-request, --source-ip and several --target are TCP-only",
            ));
        }
        if target.is_none() && (a.hold || a.connect_per_request || a.connect_rate.is_some()) {
            return Err(err(
                "target",
                "--hold, --connect-per-request and --connect-rate need --target",
            ));
        }
        if transport != Transport::Tcp && target.is_none() {
            return Err(err("proto", "udp needs --target (the baseline is TCP)"));
        }
        let duration = duration_ns("duration", &a.duration, DURATION_NS_MAX)?;
        let frames = frame_plan(a)?;
        if let Some(f) = &frames {
            let conflicting = a.rate.is_some()
                || a.hold
                || a.connect_per_request
                || a.concurrency.is_some()
                || a.no_response
                || a.http.is_some()
                || a.mix.is_some()
                || a.framing.is_some()
                || a.connect_rate.is_some();
            if conflicting {
                return Err(err(
                    "workload",
                    "frames sends one frame per connection per --tick: drop --rate, --hold, --connect-per-request, --concurrency, --no-response, --http, --mix, --framing and --connect-rate",
                ));
            }
            if target.is_none() {
                return Err(err(
                    "workload",
                    "frames needs --target (a broadcast server, e.g. blaster sink --mode broadcast)",
                ));
            }
            if !fleet.shard.is_whole() {
                return Err(err("shard", "--workload frames runs on one machine"));
            }
            let rooms = f.grid.rooms() as usize;
            if rooms < cores.len() {
                return Err(err(
                    "room-size",
                    format!(
                        "{} connections in rooms of {} make {rooms} rooms, fewer than the {} worker cores (a room's members share a worker)",
                        a.connections,
                        f.grid.room_size,
                        cores.len()
                    ),
                ));
            }
        }
        let arrivals: ArrivalKind = a.arrivals.parse().map_err(|m| err("arrivals", m))?;
        if let Some(n) = a.concurrency {
            if target.is_none() || transport != Transport::Tcp || a.hold || a.connect_per_request {
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
        }
        let mut shape = None;
        let rate_rps = match a.rate.as_deref() {
            None if a.hold => match heartbeat_ns {
                // One heartbeat per connection per period, spread evenly.
                Some(h) => {
                    let r = check_rate("heartbeat", a.connections as f64 * 1e9 / h as f64)?;
                    shape = Some(RateShape::constant(r).map_err(|m| err("heartbeat", m))?);
                    Some(r)
                }
                None => Some(0.0),
            },
            None if a.concurrency.is_some() => Some(0.0),
            // Frames: one per connection per tick.
            None if frames.is_some() => {
                let f = frames.as_ref().expect("checked");
                let r = check_rate(
                    "tick",
                    f.grid.connections as f64 * 1e9 / f.grid.tick_ns as f64,
                )?;
                shape = Some(RateShape::constant(r).map_err(|m| err("tick", m))?);
                Some(r)
            }
            Some(r) => match parse_rate_spec(r, duration, a.seed).map_err(|m| err("rate", m))? {
                RateSpec::Max if transport == Transport::UdpBlast => Some(f64::INFINITY),
                RateSpec::Max => {
                    return Err(err("rate", "max is only for --proto udp --no-response"));
                }
                RateSpec::Shaped(s) => {
                    check_rate("rate", s.peak_rps())?;
                    let mean = s.constant_rps().unwrap_or_else(|| s.mean_rps(duration));
                    shape = Some(s);
                    Some(mean)
                }
            },
            None if target.is_some() => {
                return Err(err(
                    "rate",
                    "is required with --target (requests per second)",
                ));
            }
            None => None,
        };
        let host = a.target.first().cloned().unwrap_or_default();
        let http_of = |spec: &str, body: Option<&[u8]>| {
            crate::request::http::request(spec, &a.headers, body, &host)
        };
        let requests = if let Some(spec) = &a.http {
            let body =
                match (&a.body, &a.body_file) {
                    (Some(b), _) => Some(unescape("body", b)?),
                    (None, Some(f)) => Some(std::fs::read(f).map_err(|e| {
                        err("body-file", format!("cannot read {}: {e}", f.display()))
                    })?),
                    _ => None,
                };
            let framing: Framing = a
                .framing
                .as_deref()
                .unwrap_or("http1")
                .parse()
                .map_err(|m| err("framing", m))?;
            let t = http_of(spec, body.as_deref()).map_err(|m| err("http", m))?;
            RequestSet::single(t, framing)
        } else if let Some(f) = &a.mix {
            let text = std::fs::read_to_string(f)
                .map_err(|e| err("mix", format!("cannot read {}: {e}", f.display())))?;
            let entries = crate::request::mix::parse(
                &text,
                |s| unescape("mix", s).map_err(|e| e.message),
                |s| http_of(s, None),
            )
            .map_err(|m| err("mix", format!("{}: {m}", f.display())))?;
            RequestSet::new(entries, true)
        } else {
            let (flag, bytes) = if let Some(p) = &a.heartbeat_payload {
                ("heartbeat-payload", unescape("heartbeat-payload", p)?)
            } else if let Some(p) = &a.payload {
                ("payload", unescape("payload", p)?)
            } else if let Some(f) = &a.payload_file {
                (
                    "payload-file",
                    std::fs::read(f).map_err(|e| {
                        err("payload-file", format!("cannot read {}: {e}", f.display()))
                    })?,
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
            let framing: Framing = a
                .framing
                .as_deref()
                .unwrap_or("echo")
                .parse()
                .map_err(|m| err("framing", m))?;
            RequestSet::single(t, framing)
        };
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
        let payload_flag = "payload";
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
        if target.is_none() && !matches!(framing, Framing::Echo | Framing::Fixed(_)) {
            return Err(err(
                "framing",
                "the loopback baseline (no --target) uses echo or fixed:N",
            ));
        }
        if transport != Transport::Tcp
            && payload.len() + crate::proto::udp_header::HEADER_LEN > 65_000
        {
            return Err(err(
                payload_flag,
                "a UDP payload must fit one datagram (at most 64976 bytes)",
            ));
        }
        let mut plan = RunPlan {
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
            control_core: control_core(a.control_core, &cores, usable)?,
            cores,
            connections: a.concurrency.unwrap_or(a.connections),
            rate_rps,
            transport,
            max_response,
            seed: a.seed,
            spin_ns: if a.spin.trim() == "0" {
                0
            } else {
                let d = parse_duration("spin", &a.spin)?.as_nanos();
                if d > SPIN_NS_MAX as u128 {
                    return Err(err("spin", format!("must be at most 1s, got {:?}", a.spin)));
                }
                d as u64
            },
            duration_ns: duration,
            pipeline: a.pipeline,
            payload: payload.into(),
            requests: Arc::new(requests),
            framing,
            timeout_ns: duration_ns("timeout", &a.timeout, TIMEOUT_NS_MAX)?,
            max_lag_ns: duration_ns("max-lag", &a.max_lag, TIMEOUT_NS_MAX)?,
            json: a.json.clone(),
            progress: if a.progress {
                true
            } else if a.quiet {
                false
            } else {
                std::io::IsTerminal::is_terminal(&std::io::stderr())
            },
            step_duration_ns: duration_ns("step-duration", &a.step_duration, DURATION_NS_MAX)?,
            start_rate_rps: check_rate("start-rate", a.start_rate)?,
        };
        let text = plan.fleet_text(a.rate.as_deref().unwrap_or(""));
        plan.fleet.seal(&text);
        plan.take_shard_share()?;
        Ok(plan)
    }

    /// What every shard of a run must agree on, rendered canonically for the run's
    /// fingerprint: the target, the global timetable (rate, arrivals, seed, duration,
    /// and for Poisson the worker count, whose streams make up the sequence), the
    /// requests, and the totals the shards split.
    fn fleet_text(&self, rate_spec: &str) -> String {
        let lanes = match self.arrivals {
            ArrivalKind::Poisson => self.cores.len(),
            ArrivalKind::Constant => 0,
        };
        format!(
            "targets={:?} rate={rate_spec} arrivals={} lanes={lanes} seed={} duration={} \
             connections={} pipeline={} transport={:?} requests={:?} shards={}",
            self.targets,
            self.arrivals,
            self.seed,
            self.duration_ns,
            self.connections,
            self.pipeline,
            self.transport,
            self.requests,
            self.fleet.shard.count(),
        )
    }

    /// Cuts the plan's totals down to this shard's part: connections (and so pipeline
    /// slots) and `--connect-rate`. The request timetable is cut per worker
    /// (`schedule::shard`).
    fn take_shard_share(&mut self) -> Result<(), PlanError> {
        let shard = self.fleet.shard;
        if shard.is_whole() {
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

    /// Bytes of one response, for sizing receive buffers.
    pub fn response_len(&self) -> usize {
        match self.framing {
            Framing::Echo => self.payload.len(),
            Framing::Fixed(n) => n,
            // Framers stream what they can; at most 8 KiB (a header line) must be kept
            // contiguous, so twice that leaves room for the next read.
            _ => 16 << 10,
        }
    }

    /// File descriptors the plan needs (connections plus the process's own margin).
    pub fn fds_needed(&self) -> u64 {
        self.connections as u64 + FD_MARGIN
    }

    /// Worker `i` of `w`'s connections: (global index of the first, how many). Evenly
    /// split; with frames, by whole rooms (a room's members share a worker, so the
    /// worker sees the room's every frame).
    fn split_connections(&self, w: usize, i: usize) -> (usize, usize) {
        let Some(f) = &self.frames else {
            let share = |j: usize| self.connections / w + usize::from(j < self.connections % w);
            return ((0..i).map(share).sum(), share(i));
        };
        let rooms = f.grid.rooms() as usize;
        let share = |j: usize| rooms / w + usize::from(j < rooms % w);
        let first_room: usize = (0..i).map(share).sum();
        let first = first_room * f.grid.room_size as usize;
        let end = ((first_room + share(i)) * f.grid.room_size as usize).min(self.connections);
        (first, end - first)
    }

    /// Splits connections and rate over the workers; the rate is split by
    /// interleaving one global sequence (see `schedule`).
    pub fn worker_plans(
        &self,
        target: SocketAddr,
        rate_rps: f64,
        duration_ns: u64,
    ) -> Vec<WorkerPlan> {
        let w = self.cores.len() * self.rings_per_core;
        let connect_gap_ns = self
            .connect_rate
            .map_or(0, |r| (w as f64 * 1e9 / r).round().max(1.0) as u64);
        let recv_buffer_bytes =
            (self.response_len() * self.pipeline).clamp(4096, RECV_BUFFER_BYTES_MAX);
        let timeout_s = self.timeout_ns as f64 / 1e9;
        (0..w)
            .map(|i| {
                // Consecutive workers (and so consecutive requests) rotate over cores.
                let core = self.cores[i % self.cores.len()];
                let (conn_offset, connections) = self.split_connections(w, i);
                // Sized for the peak of a shaped rate, not its mean.
                let peak = self
                    .shape
                    .as_ref()
                    .map_or(rate_rps, |s| s.peak_rps().max(rate_rps));
                let lanes = w as f64 * f64::from(self.fleet.shard.count());
                // `--rate max` (infinite) has no timetable to fall behind: only what the
                // connections hold. (inf as usize saturates, and the sum overflowed.)
                let due = if peak.is_finite() {
                    (peak / lanes * timeout_s * 1.1) as usize
                } else {
                    0
                };
                let backlog = due + connections * self.pipeline;
                WorkerPlan {
                    index: i,
                    shard: self.fleet.shard,
                    transport: self.transport,
                    conn_offset,
                    max_response: self.max_response,
                    workers: w,
                    core: Some(core),
                    target,
                    targets: if self.targets.is_empty() {
                        vec![target].into()
                    } else {
                        self.targets.clone().into()
                    },
                    sources: self.sources.clone().into(),
                    sockopts: self.sockopts,
                    connect_gap_ns,
                    connects_in_flight: (CONNECTS_IN_FLIGHT_MAX / self.rings_per_core).max(64),
                    source_ports: (!self.sources.is_empty())
                        .then(|| crate::ports::read_port_range(std::path::Path::new("/")).ok())
                        .flatten()
                        .map(|r| (r.lo(), r.size())),
                    backoff: self.backoff,
                    per_request: self.per_request,
                    // The baseline and the search step constant rates of their own
                    // (`rate_rps`): a flat shape follows the step's rate, so Poisson
                    // arrivals still apply.
                    shape: match &self.shape {
                        Some(s) if s.constant_rps().is_none() => Some(s.clone()),
                        _ if rate_rps > 0.0 && rate_rps.is_finite() => {
                            RateShape::constant(rate_rps).ok()
                        }
                        _ => None,
                    },
                    arrivals: self.arrivals,
                    closed_loop: self.closed_loop,
                    connections,
                    pipeline: self.pipeline,
                    rate_rps,
                    duration_ns,
                    timeout_ns: self.timeout_ns,
                    payload: self.payload.clone(),
                    requests: self.requests.clone(),
                    seed: self.seed,
                    framing: self.framing,
                    recv_buffer_bytes,
                    backlog_capacity: backlog.clamp(1024, BACKLOG_REQUESTS_MAX),
                    interval_ns: INTERVAL_NS,
                    // Workers sharing a core must not spin against each other.
                    spin_ns: if self.rings_per_core > 1 {
                        0
                    } else {
                        self.spin_ns
                    },
                    frames: self.frames,
                }
            })
            .collect()
    }
}

/// Parses a byte size: `4096`, `64k`, `64KiB`, `1M`, `1MiB` (k and M are 1024-based).
pub fn parse_size(flag: &'static str, s: &str) -> Result<usize, PlanError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: usize = match unit.trim() {
        "" | "B" => 1,
        "k" | "K" | "KiB" | "kB" => 1 << 10,
        "M" | "MiB" | "MB" => 1 << 20,
        _ => {
            return Err(err(
                flag,
                format!("expected a size such as 4096, 64KiB or 1MiB, got {s:?}"),
            ));
        }
    };
    let n: usize = num.parse().map_err(|_| {
        err(
            flag,
            format!("expected a size such as 4096, 64KiB or 1MiB, got {s:?}"),
        )
    })?;
    let v = n.saturating_mul(mult);
    if v == 0 || v > 1 << 30 {
        return Err(err(
            flag,
            format!("must be between 1 byte and 1GiB, got {s:?}"),
        ));
    }
    Ok(v)
}

/// A rate in requests/s, at most [`RATE_RPS_MAX`] (the one rate check, shared with
/// `blaster search`).
pub fn check_rate(flag: &'static str, r: f64) -> Result<f64, PlanError> {
    crate::units::check_rate(r, RATE_RPS_MAX, "requests/s").map_err(|m| err(flag, m))
}

/// `blaster sink --mode broadcast`'s flags: the rooms, or none in the other modes
/// (where each broadcast flag is refused).
fn sink_broadcast(
    a: &SinkArgs,
    mode: SinkMode,
    cores: &[usize],
) -> Result<Option<BroadcastConfig>, PlanError> {
    if mode != SinkMode::Broadcast {
        let given = [
            ("room-size", a.room_size.is_some()),
            ("echo-to-sender", a.echo_to_sender),
            ("aggregate", a.aggregate),
            ("down-size", a.down_size.is_some()),
            ("tick", a.tick.is_some()),
        ];
        return match given.into_iter().find(|(_, set)| *set) {
            Some((flag, _)) => Err(err(
                flag,
                format!("needs --mode broadcast, got --mode {mode}"),
            )),
            None => Ok(None),
        };
    }
    let Some(room_size) = a.room_size else {
        return Err(err("room-size", "is required by --mode broadcast"));
    };
    if !(1..=ROOM_SIZE_MAX).contains(&room_size) {
        return Err(err(
            "room-size",
            format!("must be between 1 and {ROOM_SIZE_MAX}, got {room_size}"),
        ));
    }
    if cores.len() != 1 {
        return Err(err(
            "cores",
            format!(
                "--mode broadcast runs on one core (a room is never split across threads), got {}",
                crate::units::list_cores(cores)
            ),
        ));
    }
    if !a.aggregate {
        for (flag, set) in [
            ("down-size", a.down_size.is_some()),
            ("tick", a.tick.is_some()),
        ] {
            if set {
                return Err(err(flag, "needs --aggregate"));
            }
        }
    }
    let aggregate = if a.aggregate {
        let Some(down_size) = a.down_size else {
            return Err(err("down-size", "is required by --aggregate"));
        };
        let min = down_bytes_min(room_size);
        let max = if a.udp {
            UDP_DOWN_BYTES_MAX
        } else {
            TCP_DOWN_BYTES_MAX
        };
        if down_size < min {
            return Err(err(
                "down-size",
                format!(
                    "must hold the {}-byte header and {room_size} entries of {} bytes \
                     ({min} bytes), got {down_size}",
                    crate::proto::frame::HEADER_BYTES,
                    crate::proto::frame::ENTRY_BYTES
                ),
            ));
        }
        if down_size > max {
            return Err(err(
                "down-size",
                format!("must be at most {max} bytes, got {down_size}"),
            ));
        }
        let tick = match a.tick.as_deref() {
            Some(t) => parse_duration("tick", t)?,
            None => DEFAULT_TICK,
        };
        if !(TICK_MIN..=TICK_MAX).contains(&tick) {
            return Err(err(
                "tick",
                format!(
                    "must be between {} and {}, got {:?}",
                    humantime::format_duration(TICK_MIN),
                    humantime::format_duration(TICK_MAX),
                    a.tick.as_deref().unwrap_or_default()
                ),
            ));
        }
        Some(AggregateConfig { down_size, tick })
    } else {
        None
    };
    Ok(Some(BroadcastConfig {
        room_size,
        echo_to_sender: a.echo_to_sender,
        aggregate,
    }))
}

/// Validates `blaster sink` arguments into a sink configuration.
pub fn sink_config(
    a: &SinkArgs,
    usable: &[usize],
) -> Result<(SinkConfig, Option<Duration>), PlanError> {
    let listen = resolve("listen", &a.listen)?;
    let cores = parse_cores("cores", &a.cores, usable)?;
    let mode: SinkMode = a.mode.parse().map_err(|m: String| err("mode", m))?;
    let delay = a
        .delay
        .as_deref()
        .map(|d| parse_duration("delay", d))
        .transpose()?;
    let stall = match (&a.stall, &a.every) {
        (Some(s), Some(e)) => {
            let s = parse_duration("stall", s)?;
            let e = parse_duration("every", e)?;
            if e.is_zero() || s >= e {
                return Err(err(
                    "stall",
                    "must be shorter than --every, and --every above 0",
                ));
            }
            Some((s, e))
        }
        _ => None,
    };
    if a.max_connections == 0 || a.max_connections > CONNECTIONS_MAX {
        return Err(err(
            "max-connections",
            format!(
                "must be between 1 and {CONNECTIONS_MAX}, got {}",
                a.max_connections
            ),
        ));
    }
    let duration = a
        .duration
        .as_deref()
        .map(|d| parse_duration("duration", d))
        .transpose()?;
    if !(0.0..1.0).contains(&a.drop) {
        return Err(err(
            "drop",
            format!("must be at least 0 and below 1, got {}", a.drop),
        ));
    }
    if a.drop > 0.0 && !a.udp {
        return Err(err("drop", "needs --udp"));
    }
    let close_every = a
        .close_every
        .as_deref()
        .map(|d| parse_duration("close-every", d))
        .transpose()?;
    if let Some(every) = close_every {
        if a.udp {
            return Err(err(
                "close-every",
                "needs TCP: the UDP sink holds no connections",
            ));
        }
        if !(CLOSE_EVERY_MIN..=CLOSE_EVERY_MAX).contains(&every) {
            return Err(err(
                "close-every",
                format!(
                    "must be between {} and {}, got {:?}",
                    humantime::format_duration(CLOSE_EVERY_MIN),
                    humantime::format_duration(CLOSE_EVERY_MAX),
                    a.close_every.as_deref().unwrap_or_default()
                ),
            ));
        }
    }
    if !(0.0..=1.0).contains(&a.reset_ratio) {
        return Err(err(
            "reset-ratio",
            format!("must be between 0 and 1, got {}", a.reset_ratio),
        ));
    }
    if a.reset_ratio > 0.0 && a.udp {
        return Err(err(
            "reset-ratio",
            "needs TCP: the UDP sink holds no connections",
        ));
    }
    if a.no_direct_descriptors && a.udp {
        return Err(err(
            "no-direct-descriptors",
            "needs TCP: the UDP sink accepts no connections",
        ));
    }
    let broadcast = sink_broadcast(a, mode, &cores)?;
    Ok((
        SinkConfig {
            listen,
            cores,
            mode,
            request_size: a.request_size,
            delay,
            stall,
            max_connections_per_core: a.max_connections,
            udp: a.udp,
            drop_ratio: a.drop,
            seed: a.seed,
            close_every,
            reset_ratio: a.reset_ratio,
            direct_descriptors: !a.no_direct_descriptors,
            broadcast,
        },
        duration,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_lists_parse() {
        let usable: Vec<usize> = (0..16).collect();
        assert_eq!(parse_cores("cores", "3", &usable).unwrap(), vec![3]);
        assert_eq!(parse_cores("cores", "4-6", &usable).unwrap(), vec![4, 5, 6]);
        assert_eq!(
            parse_cores("cores", "0,2,4-6", &usable).unwrap(),
            vec![0, 2, 4, 5, 6]
        );
        let e = parse_cores("cores", "99", &usable).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--cores: unknown core 99: this process may use cores 0-15"
        );
        assert!(parse_cores("cores", "3-1", &usable).is_err());
        assert!(parse_cores("cores", "a", &usable).is_err());
        assert!(parse_cores("cores", "1,1", &usable).is_err());
    }

    #[test]
    fn escapes_decode() {
        assert_eq!(
            unescape("payload", r"GET\r\n\x41\\").unwrap(),
            b"GET\r\nA\\"
        );
        assert!(unescape("payload", r"\q").is_err());
        assert!(unescape("payload", r"\x4").is_err());
    }

    #[test]
    fn durations_are_checked() {
        assert_eq!(
            duration_ns("duration", "10s", DURATION_NS_MAX).unwrap(),
            10_000_000_000
        );
        assert_eq!(
            duration_ns("max-lag", "250us", DURATION_NS_MAX).unwrap(),
            250_000
        );
        assert!(duration_ns("duration", "10x", DURATION_NS_MAX).is_err());
        assert!(duration_ns("duration", "0s", DURATION_NS_MAX).is_err());
    }

    /// `blaster run ARGS...` as clap parses it.
    fn run_args(extra: &[&str]) -> RunArgs {
        use clap::Parser;
        let argv = ["blaster", "run"].iter().chain(extra);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Run(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn rate_and_split() {
        assert!(check_rate("rate", 0.0).is_err());
        assert!(check_rate("rate", f64::NAN).is_err());
        assert!(check_rate("rate", -5.0).is_err());
        let args = run_args(&[
            "--target",
            "127.0.0.1:9",
            "--cores",
            "0-2",
            "--rate",
            "9000",
            "--duration",
            "1s",
            "--max-lag",
            "1ms",
            "--quiet",
        ]);
        let plan = RunPlan::from_args(&args, &[0, 1, 2]).unwrap();
        let ws = plan.worker_plans(plan.target.unwrap(), 9000.0, plan.duration_ns);
        assert_eq!(
            ws.iter().map(|w| w.connections).collect::<Vec<_>>(),
            [22, 21, 21]
        );
        assert!(ws.iter().all(|w| w.rate_rps == 9000.0 && w.workers == 3));
        let mut bad = args.clone();
        bad.connections = 0;
        assert_eq!(
            RunPlan::from_args(&bad, &[0, 1, 2])
                .unwrap_err()
                .to_string(),
            "--connections: must be between 1 and 1048576, got 0"
        );
        bad = args.clone();
        bad.pipeline = 0;
        assert!(RunPlan::from_args(&bad, &[0, 1, 2]).is_err());
        bad = args.clone();
        bad.rate = None;
        assert!(RunPlan::from_args(&bad, &[0, 1, 2]).is_err());
    }

    #[test]
    fn control_core_defaults_to_a_spare_core() {
        let plan = |extra: &[&str], usable: &[usize]| {
            let mut a = vec!["--target", "127.0.0.1:9", "--rate", "10", "--quiet"];
            a.extend_from_slice(extra);
            RunPlan::from_args(&run_args(&a), usable).map(|p| p.control_core)
        };
        assert_eq!(plan(&["--cores", "0-1"], &[0, 1, 2, 3]).unwrap(), 2);
        assert_eq!(plan(&["--cores", "0-1"], &[0, 1]).unwrap(), 0);
        assert_eq!(plan(&["--control-core", "1"], &[0, 1]).unwrap(), 1);
        assert_eq!(
            plan(&["--control-core", "7"], &[0, 1])
                .unwrap_err()
                .to_string(),
            "--control-core: unknown core 7: this process may use cores 0-1"
        );
    }
}
