//! Raw arguments -> a validated, immutable [`RunPlan`]. Every cross-flag check and
//! every bound lives here, so the engine never sees a plan it cannot run. Messages
//! name the flag and the bound.

mod build;
mod facts;
pub mod fleet;
mod frames;
mod parse;
pub mod replay;
mod sink;
mod workers;

pub use facts::{FdFacts, HostFacts, RingLayout, parse_mem_available};
pub use frames::ROOM_SIZE_DEFAULT;
pub use parse::{
    check_rate, check_repeats, parse_cores, parse_duration, parse_size, unescape, usable_cores,
};
pub use sink::sink_config;

use crate::engine::Transport;
use crate::engine::backoff::Backoff;
use crate::engine::socket::SockOpts;
use crate::engine::worker_plan::FramePlan;
use crate::limits::FD_MARGIN;
use crate::proto::Framing;
use crate::request::RequestSet;
use crate::run_plan::fleet::Fleet;
use crate::schedule::{ArrivalKind, RateShape};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

/// What the user asked to see on stderr while a run measures; whether stderr is a
/// terminal decides the rest (`report::progress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Neither flag: a bar on a terminal, else plain once-a-second lines (for a search
    /// or baseline step: a bar on a terminal, else only the step's own line).
    Auto,
    /// `--progress`: the plain once-a-second line, terminal or not.
    Lines,
    /// `--quiet`: nothing while the run measures.
    Quiet,
}

impl Progress {
    /// From the two flags (clap makes them exclusive).
    pub fn from_flags(progress: bool, quiet: bool) -> Progress {
        match (progress, quiet) {
            (true, _) => Progress::Lines,
            (_, true) => Progress::Quiet,
            _ => Progress::Auto,
        }
    }
}

/// A usage error: the command line asks for something that cannot be run (exit 2).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
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
    /// `--concurrency`: closed loop, each connection's pipeline kept full.
    pub closed_loop: bool,
    /// `--link-speed`, bits/s.
    pub link_speed_bps: Option<u64>,
    /// Workers (each one ring) per core: more than one when a core's connections do
    /// not fit one ring's file table (RLIMIT_NOFILE); `ring_layout.rings`, else 1.
    pub rings_per_core: usize,
    /// How a TCP run against a target spreads its sockets over ring file tables (from
    /// the descriptor limits; `None` for the baseline, UDP, or unknown limits). The
    /// preflight refuses a layout that does not [fit](RingLayout::fits).
    pub ring_layout: Option<RingLayout>,
    /// `net.ipv4.ip_local_port_range` as gathered (`--source-ip` binds ports from it).
    pub port_range: Option<crate::ports::PortRange>,
    /// `MemAvailable` as gathered: the preflight refuses a frames plan whose receive
    /// accounting ([`FramePlan::accounting_bytes`]) exceeds it.
    pub mem_available: Option<u64>,
    pub cores: Vec<usize>,
    /// `--control-core`: where the main thread (collector) and helper threads run.
    pub control_core: usize,
    pub connections: usize,
    /// `None` only for the baseline, which steps its own rate; infinite for `max`.
    pub rate_rps: Option<f64>,
    pub transport: Transport,
    pub max_response: usize,
    pub seed: u64,
    /// `--spin` and `--resolution`.
    pub precision: crate::engine::pacing::Precision,
    pub duration_ns: u64,
    /// `--warmup`: the first part of `duration_ns` that is run but not recorded.
    pub warmup_ns: u64,
    /// `--http2`: requests as HTTP/2 streams (`pipeline` is then the streams per
    /// connection).
    pub http2: Option<crate::engine::worker_plan::Http2Plan>,
    /// `--conn-max-age` and `--conn-max-requests`.
    pub conn_life: Option<crate::engine::worker_plan::ConnLife>,
    /// `--grpc`: the method called (`/SERVICE/METHOD`), for the report.
    pub grpc_method: Option<String>,
    pub pipeline: usize,
    /// The request when it is one static payload (else empty; see `requests`).
    pub payload: Arc<[u8]>,
    pub requests: Arc<RequestSet>,
    /// The framing when every request uses the same one (else that of the first).
    pub framing: Framing,
    /// `--error-status`: HTTP status codes that are request errors.
    pub error_status: crate::proto::ErrorStatus,
    /// `--expect`: assertions every HTTP/1.1 reply must pass (empty: none).
    pub expect: crate::proto::Expectations,
    /// `--server-time`: where each reply carries the server's own time.
    pub server_time: Option<Arc<crate::proto::ServerTimeSource>>,
    pub timeout_ns: u64,
    pub max_lag_ns: u64,
    /// `--confidence`: the level of the report's confidence intervals, in (0, 1).
    pub confidence: f64,
    pub json: Option<PathBuf>,
    /// What the run shows on stderr while it measures (`--progress`, `--quiet`).
    pub progress: Progress,
    pub step_duration_ns: u64,
    pub start_rate_rps: f64,
    /// `--repeats`: runs of each decisive baseline step.
    pub repeats: u32,
    /// `--shard`, `--start-at`, `--run-id`. With N shards, `connections` and
    /// `connect_rate` above are already this shard's part.
    pub fleet: Fleet,
    /// `--workload frames` (`None`: request/response).
    pub frames: Option<FramePlan>,
    /// `--tls`: the client every connection's session comes from.
    pub tls: Option<Arc<crate::transport::tls::TlsClient>>,
    /// `--tls` without `--target`: the server side of the TLS baseline, which its
    /// sink's TLS front serves (the certificate [`Self::tls`] trusts alone).
    pub tls_sink: Option<Arc<rustls::ServerConfig>>,
    /// `--replay`: the recording the timetable comes from (in place of `--rate`).
    pub replay: Option<Arc<crate::request::replay::ReplayPlan>>,
}

impl RunPlan {
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

    /// The same plan at a constant `rate_rps` (a search or baseline step): the rate and
    /// its flat shape (the baseline has none; its workers make one from the rate).
    pub fn with_rate(&self, rate_rps: f64) -> RunPlan {
        RunPlan {
            rate_rps: Some(rate_rps),
            shape: self
                .shape
                .as_ref()
                .and_then(|_| RateShape::constant(rate_rps).ok()),
            ..self.clone()
        }
    }

    /// The same plan for `duration_ns` (a baseline step).
    pub fn with_duration(&self, duration_ns: u64) -> RunPlan {
        RunPlan {
            duration_ns,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests;
