//! What a sink is asked to do ([`SinkConfig`], [`SinkMode`]), the bounds on it, and
//! the checks [`super::start`] runs before anything is bound.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use super::SinkError;

/// Largest reply of `fixed:N`, in bytes.
pub const FIXED_REPLY_BYTES_MAX: usize = 1_048_576;
/// Most connections per core (the whole sink holds at most this times the cores).
pub const CONNECTIONS_PER_CORE_MAX: usize = 1_048_576;
/// Longest `close_every` period (a day; longer is no fault at all).
pub const CLOSE_EVERY_MAX: Duration = Duration::from_secs(86_400);
/// Shortest `close_every` period: closing every connection more often than this
/// leaves none to hold.
pub const CLOSE_EVERY_MIN: Duration = Duration::from_millis(10);
/// Largest `fixed:N` reply of the UDP sink (the IPv4 UDP payload limit).
pub const UDP_FIXED_REPLY_BYTES_MAX: usize = super::udp::UDP_REPLY_BYTES_MAX;
/// Smallest `fixed:N` reply of the UDP sink: the request's header is copied into it.
pub const UDP_FIXED_REPLY_BYTES_MIN: usize = crate::proto::udp_header::HEADER_LEN;
/// [`SinkConfig::default`]'s connection table size per core.
pub const DEFAULT_CONNECTIONS_PER_CORE: usize = 1024;
/// Largest broadcast room: the frame header's member index is 16 bits. Rooms of
/// thousands are live rooms of a few speakers and many listeners
/// (`--senders-per-room`); relaying one frame costs a queue append per member, and
/// an aggregate room is bounded further by its downlink frame, which holds one
/// entry per member.
pub const ROOM_SIZE_MAX: usize = u16::MAX as usize;
/// Shortest and longest aggregate server tick (as the generator's `--tick`).
pub const TICK_MIN: Duration = Duration::from_millis(1);
pub const TICK_MAX: Duration = Duration::from_secs(10);
/// The default aggregate server tick.
pub const DEFAULT_TICK: Duration = Duration::from_millis(33);
/// Largest aggregate downlink frame over TCP: it and its length prefix must fit one
/// member's send queue.
pub const TCP_DOWN_BYTES_MAX: usize =
    super::send_queue::QUEUE_BYTES - crate::proto::frame::LEN_PREFIX_BYTES;
/// Largest aggregate downlink frame over UDP (the IPv4 payload limit).
pub const UDP_DOWN_BYTES_MAX: usize = super::udp::UDP_REPLY_BYTES_MAX;

/// The smallest `--down-size` for rooms of `room_size`: the header and one entry per
/// member.
pub fn down_bytes_min(room_size: usize) -> usize {
    crate::proto::frame::HEADER_BYTES + room_size * crate::proto::frame::ENTRY_BYTES
}

/// What the sink sends back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkMode {
    /// Send back exactly the bytes received.
    Echo,
    /// Read forever, never reply.
    Discard,
    /// Reply this many bytes per request.
    Fixed(usize),
    /// UDP only: never reply, count (sequence, loss, reordering); TCP refuses it.
    Count,
    /// Frames (`proto::frame`) relayed to the sender's room, or aggregated per server
    /// tick; the rest is in [`SinkConfig::broadcast`].
    Broadcast,
}

impl FromStr for SinkMode {
    type Err = String;

    fn from_str(s: &str) -> Result<SinkMode, String> {
        match s {
            "echo" => Ok(SinkMode::Echo),
            "discard" => Ok(SinkMode::Discard),
            "count" => Ok(SinkMode::Count),
            "broadcast" => Ok(SinkMode::Broadcast),
            _ => match s.strip_prefix("fixed:") {
                Some(n) => match n.parse::<usize>() {
                    Ok(n) if (1..=FIXED_REPLY_BYTES_MAX).contains(&n) => Ok(SinkMode::Fixed(n)),
                    _ => Err(format!(
                        "sink mode fixed:N: N must be a byte count between 1 and \
                         {FIXED_REPLY_BYTES_MAX}, got {n:?}"
                    )),
                },
                None => Err(format!(
                    "unknown sink mode {s:?}: expected echo, discard, fixed:N, broadcast (or count, UDP only)"
                )),
            },
        }
    }
}

impl fmt::Display for SinkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SinkMode::Echo => f.write_str("echo"),
            SinkMode::Discard => f.write_str("discard"),
            SinkMode::Fixed(n) => write!(f, "fixed:{n}"),
            SinkMode::Count => f.write_str("count"),
            SinkMode::Broadcast => f.write_str("broadcast"),
        }
    }
}

/// Broadcast mode: rooms and what is sent to their members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BroadcastConfig {
    /// Most members per room (1..=[`ROOM_SIZE_MAX`]).
    pub room_size: usize,
    /// Most rooms one TCP connection joins (the generator's members per connection).
    pub rooms_per_connection: usize,
    /// Relay a frame to its sender too (aggregate: the receiver's own frames are in
    /// its downlink frame).
    pub echo_to_sender: bool,
    /// Aggregate instead of relaying each frame.
    pub aggregate: Option<AggregateConfig>,
    /// `--http2`: members are gRPC bidi calls of h2c connections, the room in their
    /// `room` metadata (`sink/server/relay_grpc.rs`).
    pub grpc: bool,
}

/// Aggregate broadcast: one downlink frame per member per server tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggregateConfig {
    /// Bytes of each downlink frame (header, entries, padding; TCP adds the prefix).
    pub down_size: usize,
    /// The server tick.
    pub tick: Duration,
}

/// How to run a sink.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// Address to listen on; with port 0 the kernel picks one and all cores share it.
    pub listen: SocketAddr,
    /// One server thread per entry, pinned to that core (unpinned if pinning fails).
    pub cores: Vec<usize>,
    /// What to send back.
    pub mode: SinkMode,
    /// Fixed mode: one reply per this many bytes received; 0 = one reply per read.
    pub request_size: usize,
    /// Fixed service delay before each reply.
    pub delay: Option<Duration>,
    /// A random service delay before each reply instead: exponential with this mean,
    /// drawn per reply from `seed` (`--delay-dist exp:MEAN`), so a test knows every
    /// percentile of it (p = -mean ln(1 - q)). TCP request/reply modes only.
    pub delay_exp_mean: Option<Duration>,
    /// (S, P): freeze all serving for S once every P, first at P/2 after the first
    /// request byte.
    pub stall: Option<(Duration, Duration)>,
    /// Connections per core: the sink holds at most this times `cores.len()` in
    /// total (an exact limit over all rings, however the kernel spreads them);
    /// accepts beyond it are closed and counted. It also sizes the rings: with
    /// direct descriptors each core runs as many rings as this needs at 85% of
    /// RLIMIT_NOFILE per ring.
    pub max_connections_per_core: usize,
    /// Serve UDP instead of TCP (see the module documentation). Default false.
    pub udp: bool,
    /// UDP only: the fraction (0.0 to 1.0) of datagrams dropped unanswered, chosen by
    /// a PRNG seeded with `seed`; counted in `dropped`, not `received`. Default 0.
    pub drop_ratio: f64,
    /// Seed of the drop draw (UDP) and the reset draw (TCP); thread i of the sink
    /// (UDP: i-th entry of `cores`; TCP: ring i) uses stream i of it, so one thread
    /// fed the same datagrams or connections drops or resets the same ones.
    /// Default 0.
    pub seed: u64,
    /// TCP: close every connection held at each multiple of this since the start.
    /// Default none.
    pub close_every: Option<Duration>,
    /// TCP: the probability (0.0 to 1.0) that an accepted connection is answered
    /// with RST at its first request. Default 0.
    pub reset_ratio: f64,
    /// TCP: accept into io_uring direct descriptors when the kernel allows (false
    /// forces ordinary descriptors, one ring per core). Default true.
    pub direct_descriptors: bool,
    /// Broadcast mode's rooms; `Some` exactly when `mode` is [`SinkMode::Broadcast`].
    /// Default none.
    pub broadcast: Option<BroadcastConfig>,
    /// Share the port with sockets already bound to it. The sink's own threads always
    /// share their port (SO_REUSEPORT); with this false a port that another socket
    /// holds is refused ([`super::SinkError::PortInUse`]) instead of being shared
    /// with it unnoticed. Default false.
    pub reuse_port: bool,
}

impl SinkConfig {
    /// A configuration listening on `listen` with one thread per entry of `cores`,
    /// serving `mode`; every other field as in [`SinkConfig::default`] (TCP).
    pub fn new(listen: SocketAddr, cores: Vec<usize>, mode: SinkMode) -> SinkConfig {
        SinkConfig {
            listen,
            cores,
            mode,
            ..SinkConfig::default()
        }
    }
}

impl Default for SinkConfig {
    /// TCP echo on 127.0.0.1 (kernel-chosen port), core 0, one reply per read, no
    /// delay or stall, [`DEFAULT_CONNECTIONS_PER_CORE`] connections per core; not
    /// UDP, no drops, seed 0, no faults, direct descriptors where supported, a port
    /// already in use refused.
    fn default() -> SinkConfig {
        SinkConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            cores: vec![0],
            mode: SinkMode::Echo,
            request_size: 0,
            delay: None,
            delay_exp_mean: None,
            stall: None,
            max_connections_per_core: DEFAULT_CONNECTIONS_PER_CORE,
            udp: false,
            drop_ratio: 0.0,
            seed: 0,
            close_every: None,
            reset_ratio: 0.0,
            direct_descriptors: true,
            broadcast: None,
            reuse_port: false,
        }
    }
}

pub(super) fn validate(cfg: &SinkConfig) -> Result<(), SinkError> {
    let bad = |msg: String| Err(SinkError::Config(msg));
    if cfg.cores.is_empty() {
        return bad("cores: must name at least one core".into());
    }
    validate_broadcast(cfg)?;
    if cfg.udp {
        return validate_udp(cfg);
    }
    if cfg.mode == SinkMode::Count {
        return bad("mode count: only the UDP sink counts datagrams (set udp)".into());
    }
    if cfg.drop_ratio != 0.0 {
        return bad(format!(
            "drop_ratio: only the UDP sink drops datagrams, got {} for TCP",
            cfg.drop_ratio
        ));
    }
    if !(1..=CONNECTIONS_PER_CORE_MAX).contains(&cfg.max_connections_per_core) {
        return bad(format!(
            "max_connections_per_core: must be between 1 and {CONNECTIONS_PER_CORE_MAX}, got {}",
            cfg.max_connections_per_core
        ));
    }
    if let SinkMode::Fixed(n) = cfg.mode
        && !(1..=FIXED_REPLY_BYTES_MAX).contains(&n)
    {
        return bad(format!(
            "mode fixed:N: N must be between 1 and {FIXED_REPLY_BYTES_MAX}, got {n}"
        ));
    }
    if cfg.delay_exp_mean.is_some() && cfg.delay.is_some() {
        return bad("delay_exp_mean: one service delay, fixed or random, not both".into());
    }
    if cfg.delay_exp_mean.is_some() && cfg.mode == SinkMode::Broadcast {
        return bad(
            "delay_exp_mean: not in broadcast mode (its relay holds every send by --delay)".into(),
        );
    }
    if let Some((freeze, period)) = cfg.stall
        && (period.is_zero() || freeze >= period)
    {
        return bad(format!(
            "stall: the freeze ({freeze:?}) must be shorter than its period ({period:?})"
        ));
    }
    if let Some(every) = cfg.close_every
        && !(CLOSE_EVERY_MIN..=CLOSE_EVERY_MAX).contains(&every)
    {
        return bad(format!(
            "close_every: must be between {CLOSE_EVERY_MIN:?} and {CLOSE_EVERY_MAX:?}, got {every:?}"
        ));
    }
    if !(0.0..=1.0).contains(&cfg.reset_ratio) {
        return bad(format!(
            "reset_ratio: must be between 0 and 1, got {}",
            cfg.reset_ratio
        ));
    }
    Ok(())
}

fn validate_broadcast(cfg: &SinkConfig) -> Result<(), SinkError> {
    let bad = |msg: String| Err(SinkError::Config(msg));
    let b = match (cfg.mode, cfg.broadcast) {
        (SinkMode::Broadcast, Some(b)) => b,
        (SinkMode::Broadcast, None) => return bad("mode broadcast: needs broadcast (rooms)".into()),
        (_, Some(_)) => return bad("broadcast: only with mode broadcast".into()),
        (_, None) => return Ok(()),
    };
    if cfg.cores.len() != 1 {
        return bad(format!(
            "mode broadcast: runs on one core (a room is never split across threads), got {}",
            cfg.cores.len()
        ));
    }
    if !(1..=ROOM_SIZE_MAX).contains(&b.room_size) {
        return bad(format!(
            "room_size: must be between 1 and {ROOM_SIZE_MAX}, got {}",
            b.room_size
        ));
    }
    if let Some(a) = b.aggregate {
        let max = if cfg.udp {
            UDP_DOWN_BYTES_MAX
        } else {
            TCP_DOWN_BYTES_MAX
        };
        let min = down_bytes_min(b.room_size);
        if !(min..=max).contains(&a.down_size) {
            return bad(format!(
                "down_size: must hold the header and {} entries ({min} bytes) and at most \
                 {max}, got {}",
                b.room_size, a.down_size
            ));
        }
        if !(TICK_MIN..=TICK_MAX).contains(&a.tick) {
            return bad(format!(
                "tick: must be between {TICK_MIN:?} and {TICK_MAX:?}, got {:?}",
                a.tick
            ));
        }
    }
    Ok(())
}

fn validate_udp(cfg: &SinkConfig) -> Result<(), SinkError> {
    let bad = |msg: String| Err(SinkError::Config(msg));
    if cfg.mode == SinkMode::Broadcast
        && !(1..=CONNECTIONS_PER_CORE_MAX).contains(&cfg.max_connections_per_core)
    {
        return bad(format!(
            "max_connections_per_core: broadcast over UDP tracks this many peers, between 1 \
             and {CONNECTIONS_PER_CORE_MAX}, got {}",
            cfg.max_connections_per_core
        ));
    }
    if let SinkMode::Fixed(n) = cfg.mode
        && !(UDP_FIXED_REPLY_BYTES_MIN..=UDP_FIXED_REPLY_BYTES_MAX).contains(&n)
    {
        return bad(format!(
            "mode fixed:N with udp: N must be between {UDP_FIXED_REPLY_BYTES_MIN} (the \
             header copied from the request) and {UDP_FIXED_REPLY_BYTES_MAX} (the largest \
             UDP payload), got {n}"
        ));
    }
    if !(0.0..=1.0).contains(&cfg.drop_ratio) {
        return bad(format!(
            "drop_ratio: must be between 0 and 1, got {}",
            cfg.drop_ratio
        ));
    }
    if cfg.delay.is_some() || cfg.delay_exp_mean.is_some() {
        return bad("delay: not supported by the UDP sink".into());
    }
    if cfg.stall.is_some() && cfg.mode != SinkMode::Broadcast {
        return bad("stall: the UDP sink stalls only in broadcast mode".into());
    }
    if cfg.close_every.is_some() {
        return bad("close_every: the UDP sink has no connections to close".into());
    }
    if cfg.reset_ratio != 0.0 {
        return bad("reset_ratio: the UDP sink has no connections to reset".into());
    }
    Ok(())
}
