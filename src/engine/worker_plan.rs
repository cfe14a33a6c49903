//! What one worker is told before it starts ([`WorkerPlan`]), and the timetable it
//! derives from it.

use super::backoff::Backoff;
use super::socket::SockOpts;
use crate::proto::Framing;
use crate::request::RequestSet;
use crate::schedule::{ArrivalKind, Arrivals, Constant, RateShape, Schedule, Shard};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// What goes over the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Persistent TCP connections, requests and framed responses.
    Tcp,
    /// Connected UDP sockets, one datagram per request, responses matched by sequence.
    Udp,
    /// Connected UDP sockets, fire and forget (`--no-response`).
    UdpBlast,
}

/// Everything one worker needs, fixed before it starts.
#[derive(Debug, Clone)]
pub struct WorkerPlan {
    pub index: usize,
    /// This machine's shard of the run (`--shard`): the worker takes its share of the
    /// shard's share of the global timetable.
    pub shard: Shard,
    pub transport: Transport,
    /// Global index of this worker's first connection (flow ids, `{conn}`).
    pub conn_offset: usize,
    /// Largest response accepted (`--max-response`).
    pub max_response: usize,
    pub workers: usize,
    pub core: Option<usize>,
    /// The first of `targets` (UDP uses only it).
    pub target: SocketAddr,
    /// Destinations: connection g (global index) uses pair g mod (sources x targets).
    pub targets: Arc<[SocketAddr]>,
    /// Source addresses to bind (`--source-ip`); empty: the kernel chooses.
    pub sources: Arc<[IpAddr]>,
    pub sockopts: SockOpts,
    /// `ip_local_port_range` (first port, size) for explicit source ports (`--source-ip`).
    pub source_ports: Option<(u16, u32)>,
    /// Connects this worker keeps pending at once in the connect phase (the core's
    /// share of [`crate::limits::CONNECTS_IN_FLIGHT_MAX`]).
    pub connects_in_flight: usize,
    /// Minimum gap between two connects of this worker (`--connect-rate`); 0: none.
    pub connect_gap_ns: u64,
    /// Reconnect backoff; `None` with `--no-reconnect`.
    pub backoff: Option<Backoff>,
    /// `--connect-per-request`: connect, send, receive, close for every request.
    pub per_request: bool,
    /// The `--rate` shape; `None`: a constant `rate_rps`.
    pub shape: Option<RateShape>,
    pub arrivals: ArrivalKind,
    /// `--concurrency`: each connection sends its next request when the previous
    /// response arrives (no timetable).
    pub closed_loop: bool,
    pub connections: usize,
    pub pipeline: usize,
    /// Intended rate in total; infinite for `--rate max` (UDP blast only).
    pub rate_rps: f64,
    pub duration_ns: u64,
    /// `--warmup`: requests due before this instant are run but not recorded.
    pub warmup_ns: u64,
    pub timeout_ns: u64,
    /// The request when it is one static payload (else empty).
    pub payload: Arc<[u8]>,
    pub requests: Arc<RequestSet>,
    /// Seed of the request choice and `{rand:N}` (per-worker streams derive from it).
    pub seed: u64,
    pub framing: Framing,
    /// HTTP status codes that are request errors (`--error-status`).
    pub error_status: crate::proto::ErrorStatus,
    /// `--expect`: this worker's own copy (its regexes' caches are its own).
    pub expect: crate::proto::Expectations,
    pub recv_buffer_bytes: usize,
    pub backlog_capacity: usize,
    pub interval_ns: u64,
    /// `--resolution` and `--spin`: how precisely sends keep to the timetable.
    pub precision: super::pacing::Precision,
    /// `--workload frames`: the frame run (`None`: request/response).
    pub frames: Option<FramePlan>,
    /// `--tls`: the client each connection's session comes from.
    pub tls: Option<Arc<crate::transport::tls::TlsClient>>,
    /// `--http2`: requests go out as HTTP/2 streams, `pipeline` of them at most per
    /// connection (fewer when the server says so).
    pub http2: Option<Http2Plan>,
    /// `--conn-max-age` and `--conn-max-requests`: when connections are retired.
    pub conn_life: Option<ConnLife>,
    /// `--server-time`: where each reply carries the server's own time.
    pub server_time: Option<Arc<crate::proto::ServerTimeSource>>,
    /// `--replay`: this worker's end of the recording's reader (set as the workers
    /// start: the reader runs for the run only).
    pub replay: Option<super::replay::Feed>,
}

/// `--conn-max-age D[±J]` and `--conn-max-requests N`: a connection takes no new
/// request once it is its age old or has taken N, and closes (replaced by a fresh
/// one) once those it has are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLife {
    /// The age (ns); `u64::MAX`: no limit.
    pub max_age_ns: u64,
    /// Each connection's age is drawn within `max_age_ns ± jitter_ns`.
    pub jitter_ns: u64,
    /// Requests per connection; `u32::MAX`: no limit.
    pub max_requests: u32,
}

impl ConnLife {
    /// The age connection `conn` draws at its `open`-th open: uniform within
    /// `max_age_ns ± jitter_ns`, from `seed` (the same on every rerun and shard);
    /// `Nanos::MAX` without an age.
    pub fn age_ns(&self, seed: u64, conn: u64, open: u32) -> crate::clock::Nanos {
        if self.max_age_ns == u64::MAX {
            return crate::clock::Nanos::MAX;
        }
        if self.jitter_ns == 0 {
            return self.max_age_ns;
        }
        let key = crate::schedule::mix64(conn) ^ u64::from(open).rotate_left(40);
        let mut rng = crate::request::request_rng(seed ^ 0x6c69_6665, key);
        self.max_age_ns - self.jitter_ns + rng.u64(0..=2 * self.jitter_ns)
    }
}

/// `--http2`, as every worker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Plan {
    /// `http` (h2c, prior knowledge) or `https` (h2 over TLS, ALPN `h2`).
    pub scheme: &'static str,
    /// `--grpc`: responses are judged by `grpc-status`.
    pub grpc: bool,
    /// `--h2-keepalive`: a PING on each connection that received nothing for this long.
    pub keepalive_ns: Option<u64>,
}

/// `--workload frames`, as every worker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramePlan {
    /// The server's protocol (`--frame-proto`) and what its messages name.
    pub spec: crate::proto::frame_proto::FrameSpec,
    pub grid: crate::schedule::FrameGrid,
    pub frame_size: usize,
    /// Arrival deviation beyond this is late (`--frame-budget`, default one tick).
    pub budget_ns: u64,
    /// Frames come back to their sender too (`--echo-to-sender`).
    pub echo: bool,
    /// `--aggregate --down-size B`: the server sends each member one downlink frame
    /// of B bytes per server tick instead of relaying.
    pub down_size: Option<usize>,
    /// `--members-per-connection M`: each connection carries M members, member slot s
    /// in room `s x rooms + room` (see [`super::frames::accounting::MemberBooks`]).
    pub members_per_connection: usize,
    /// `--room-layout`: which connections share a room in slots past the first
    /// ([`crate::schedule::room_mix`]).
    pub room_layout: crate::schedule::RoomLayout,
    /// `--slow-readers RATIO:RATE`: connections that read slowly, or not at all.
    pub slow_readers: Option<SlowReaders>,
    /// The rooms this process runs, `first_room..first_room + room_count` of the run's
    /// `grid.rooms()` (member slot s: the same range plus s x rooms): all of them, or
    /// under `--shard i/N` the shard's whole rooms. Connection ids, room ids and the
    /// timetable stay the run's, so N shards are one run.
    pub first_room: u64,
    pub room_count: u64,
}

/// `--slow-readers RATIO:RATE`: each connection reads at RATE bytes/s (0: stops
/// reading once joined) with probability RATIO, drawn from the run's seed by its
/// global index, so every shard and worker agrees on which are slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowReaders {
    /// RATIO x 2^53: a connection whose 53-bit draw is below it is slow.
    threshold: u64,
    /// RATIO as given (its bits: the plan compares as `Eq`).
    ratio_bits: u64,
    pub rate_bytes_per_s: u64,
}

impl SlowReaders {
    const ONE: u64 = 1 << 53;

    /// RATIO in (0, 1] (the plan checked it) and RATE.
    pub fn new(ratio: f64, rate_bytes_per_s: u64) -> SlowReaders {
        SlowReaders {
            threshold: (ratio * Self::ONE as f64).round() as u64,
            ratio_bits: ratio.to_bits(),
            rate_bytes_per_s,
        }
    }

    /// RATIO.
    pub fn ratio(&self) -> f64 {
        f64::from_bits(self.ratio_bits)
    }

    /// Whether connection `j` (global index) of a run seeded `seed` reads slowly.
    pub fn is_slow(&self, seed: u64, j: u64) -> bool {
        // A stream of its own: not the draws of --conn-max-age or the layout.
        let salt = 0x0051_0e7e_adeb_5103_u64;
        let draw = crate::schedule::mix64(seed ^ salt ^ crate::schedule::mix64(j));
        draw >> 11 < self.threshold
    }
}

impl FramePlan {
    /// The connections of this process's rooms: (global index of the first, count).
    pub fn owned_connections(&self) -> (u64, u64) {
        let size = self.grid.room_size;
        let first = self.first_room * size;
        let end = ((self.first_room + self.room_count) * size).min(self.grid.connections);
        (first, end - first)
    }

    /// Bytes the receive accounting of this plan's connections allocates at start,
    /// over all workers ([`FrameBook::bytes_for`](super::frames::accounting::FrameBook::bytes_for)).
    pub fn accounting_bytes(&self) -> u64 {
        super::frames::accounting::FrameBook::bytes_for(
            self.owned_connections().1,
            self.grid.senders_per_room(),
        )
        .saturating_mul(self.members_per_connection as u64)
        .saturating_add(
            crate::schedule::SlotMap::bytes_for(self.owned_connections().1)
                .saturating_mul(self.mixed_slots() as u64),
        )
    }

    /// Member slots whose rooms are a seeded permutation (`--room-layout mixed`: all
    /// but slot 0).
    pub fn mixed_slots(&self) -> usize {
        match self.room_layout {
            crate::schedule::RoomLayout::Mixed => self.members_per_connection - 1,
            crate::schedule::RoomLayout::Grouped => 0,
        }
    }

    /// The layout that ran: `mixed` only where a slot past the first was permuted.
    pub fn layout_ran(&self) -> crate::schedule::RoomLayout {
        if self.mixed_slots() > 0 {
            crate::schedule::RoomLayout::Mixed
        } else {
            crate::schedule::RoomLayout::Grouped
        }
    }
}

/// A worker's timetable and how many of its requests fall before the end (`u64::MAX`
/// until found on the way, for Poisson arrivals); no timetable (0 requests) for
/// `--hold` without heartbeats and for closed loop.
pub fn timetable(plan: &WorkerPlan) -> (Arrivals, u64) {
    let schedule = match &plan.shape {
        Some(s) => Arrivals::sharded(
            plan.arrivals,
            s,
            plan.workers,
            plan.index,
            plan.seed,
            plan.shard,
        ),
        None => Arrivals::Constant(Constant::new(
            if plan.rate_rps.is_finite() {
                plan.rate_rps.max(1.0)
            } else {
                1.0
            },
            plan.workers,
            plan.index,
        )),
    };
    let total = if plan.rate_rps > 0.0 && !plan.closed_loop {
        match schedule.count_before(plan.duration_ns) {
            Some(n) => n,
            None if schedule.due_ns(0) >= plan.duration_ns => 0,
            None => u64::MAX,
        }
    } else {
        0
    };
    (schedule, total)
}

impl WorkerPlan {
    /// The histograms this worker records into ([`HistShape`](super::recorder::HistShape)).
    pub fn hist_shape(&self) -> super::recorder::HistShape {
        super::recorder::HistShape {
            requests: self.frames.is_none(),
            frames: self.frames.is_some(),
            tls: self.tls.is_some(),
            server_time: self.server_time.is_some(),
        }
    }
}

#[cfg(test)]
impl WorkerPlan {
    /// A one-worker TCP plan of `connections` to the discard port, 1000/s for 10 ms
    /// (timeout 10 ms): what the mock-clock tests of the engines start from.
    pub(crate) fn for_tests(connections: usize) -> WorkerPlan {
        let payload: Arc<[u8]> = Arc::from(&b"ping"[..]);
        WorkerPlan {
            index: 0,
            shard: crate::schedule::Shard::WHOLE,
            transport: Transport::Tcp,
            conn_offset: 0,
            max_response: 1024,
            workers: 1,
            core: None,
            target: "127.0.0.1:9".parse().unwrap(),
            targets: vec!["127.0.0.1:9".parse().unwrap()].into(),
            sources: Vec::new().into(),
            sockopts: Default::default(),
            source_ports: None,
            connects_in_flight: 64,
            connect_gap_ns: 0,
            backoff: None,
            per_request: false,
            shape: None,
            arrivals: crate::schedule::ArrivalKind::Constant,
            closed_loop: false,
            connections,
            pipeline: 4,
            http2: None,
            conn_life: None,
            server_time: None,
            replay: None,
            rate_rps: 1000.0,
            duration_ns: 10_000_000,
            warmup_ns: 0,
            timeout_ns: 10_000_000,
            requests: Arc::new(crate::request::RequestSet::single(
                crate::request::Template::literal(&payload),
                crate::proto::Framing::Echo,
            )),
            payload,
            seed: 1,
            framing: crate::proto::Framing::Echo,
            error_status: crate::proto::ErrorStatus::default(),
            expect: crate::proto::Expectations::default(),
            recv_buffer_bytes: 1024,
            backlog_capacity: 16,
            interval_ns: 1_000_000_000,
            precision: super::pacing::Precision::fixed(0),
            frames: None,
            tls: None,
        }
    }
}

#[cfg(test)]
mod conn_life_tests {
    use super::*;
    use crate::clock::Nanos;

    #[test]
    fn ages_stay_within_the_jitter_and_differ_by_connection_and_open() {
        let cl = ConnLife {
            max_age_ns: 1_000,
            jitter_ns: 100,
            max_requests: u32::MAX,
        };
        let ages: Vec<Nanos> = (0..200).map(|c| cl.age_ns(7, c, 0)).collect();
        assert!(ages.iter().all(|a| (900..=1_100).contains(a)), "{ages:?}");
        assert!(ages.iter().any(|&a| a < 950) && ages.iter().any(|&a| a > 1_050));
        assert_ne!(cl.age_ns(7, 3, 0), cl.age_ns(7, 3, 1));
        assert_eq!(cl.age_ns(7, 3, 1), cl.age_ns(7, 3, 1), "reproducible");
        let fixed = ConnLife { jitter_ns: 0, ..cl };
        assert_eq!(fixed.age_ns(7, 3, 5), 1_000);
        let none = ConnLife {
            max_age_ns: u64::MAX,
            ..cl
        };
        assert_eq!(none.age_ns(7, 3, 5), Nanos::MAX);
    }
}
