//! The report: one serialisable structure built from merged histograms and counters,
//! rendered as text (`text`) or JSON (`json`). The JSON schema is documented in
//! docs/report.md; `schema_version` changes when a key changes meaning or goes away.
pub mod assemble;
pub mod ci;
pub mod export;
pub mod fleet_report;
pub mod frames;
pub mod hdr;
pub mod html;
pub mod input;
pub mod json;
pub mod output;
pub mod progress;
pub mod series;
pub mod text;

use crate::diagnosis::Diagnosis;
use crate::metrics::kernel::{self, ConntrackFill, KernelCounters};
use crate::metrics::{Counters, ErrorKind, Histograms};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// 2: `invalid_reasons` and `diagnosis` became `{code, message, remedy}` objects.
/// 3: embedded histograms (`histograms`, `intervals[].histograms`,
/// `mix[].latency_histogram`, search and baseline `steps[].histograms`), `machine`,
/// `intervals[].latency_p90_ns` / `latency_p999_ns` / `latency_max_ns`.
pub const SCHEMA_VERSION: u32 = 3;

/// A histogram's percentiles with their confidence intervals (`latency_ns`: the
/// percentiles, and `ci` beside them; see [`ci`]). Reads as its [`Percentiles`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    #[serde(flatten)]
    pub p: Percentiles,
    /// Absent when the run kept no per-second histograms of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci: Option<ci::HistCi>,
}

impl std::ops::Deref for Summary {
    type Target = Percentiles;
    fn deref(&self) -> &Percentiles {
        &self.p
    }
}

impl From<Percentiles> for Summary {
    fn from(p: Percentiles) -> Summary {
        Summary { p, ci: None }
    }
}

/// `--server-time`: the server's own time its replies carried, and what is left of
/// the latency (network and queueing), per request.
#[derive(Debug, Clone, Serialize)]
pub struct ServerTimeReport {
    /// The `--server-time` source, as given.
    pub source: String,
    /// Answers whose reply carried a server time (the histograms' count).
    pub carried: u64,
    /// Answers whose reply carried none: in neither histogram.
    pub missing: u64,
    /// The server's own time, as its replies said.
    pub server_time_ns: Percentiles,
    /// latency - server time of each reply that carried one (saturating at 0).
    pub network_queueing_ns: Percentiles,
}

/// `--replay`: the recording and how it was replayed.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub file: String,
    /// `text` or `pcap`.
    pub format: &'static str,
    /// Requests in one pass over the recording.
    pub recorded_requests: u64,
    /// `--replay-speed`.
    pub speed: f64,
    /// `--replay-loop`.
    pub looped: bool,
    /// Times a worker found its next request not yet read (the reader was behind, or
    /// its read-ahead was held by requests waiting for a connection); each may have
    /// made requests late, as the dispatch lag shows.
    pub read_ahead_dry: u64,
    /// Why the reader stopped before the recording's end (the file changed during
    /// the run: a request longer than any checked, or bytes that no longer parse);
    /// `null` when it did not. The requests before it were sent; the run exits 1.
    pub stopped: Option<String>,
}

/// `--tls`: the server name, the trust, and the handshakes.
#[derive(Debug, Clone, Serialize)]
pub struct TlsReport {
    /// The name sent (SNI) and verified.
    pub sni: String,
    /// `--tls-insecure`: the server's certificate was not verified.
    pub insecure: bool,
    /// Handshakes completed without resuming a session.
    pub handshakes_full: u64,
    /// Handshakes that resumed a session.
    pub handshakes_resumed: u64,
    /// `--tls-resume`: sessions the server issued (TLS 1.3 tickets, TLS 1.2 session ids
    /// or tickets) to the connections that keep them.
    pub sessions_issued: u64,
    /// `--tls-resume`: handshakes that offered a session back.
    pub sessions_offered: u64,
    /// Failed handshakes by kind (`unknown_ca`, `name_mismatch`, `expired`,
    /// `protocol_version`, `alert_*`, ...); zero counts left out.
    pub failed_by_kind: BTreeMap<&'static str, u64>,
    /// TCP connected -> handshake complete.
    pub tls_handshake_ns: Percentiles,
}

/// `--http2`: the streams per connection asked for and what the servers did.
#[derive(Debug, Clone, Serialize)]
pub struct Http2Report {
    /// `--streams-per-connection`: streams in flight per connection at most (fewer
    /// where a server's MAX_CONCURRENT_STREAMS is lower).
    pub streams_per_connection: usize,
    /// GOAWAY frames received (each closes its connection once its streams finish).
    pub goaways: u64,
    /// Requests sent again on another connection (not processed before a GOAWAY,
    /// or refused with REFUSED_STREAM); still one request each.
    pub retried: u64,
    /// Streams the server reset; those not refused are `stream_reset` errors.
    pub stream_resets: u64,
    /// Streams cancelled at their timeout (RST_STREAM CANCEL), each a `timeout`
    /// error; their connections stayed open.
    pub streams_cancelled: u64,
    /// Streams answered before their request body was all sent: reset by blaster
    /// (RST_STREAM CANCEL), the rest of the body not sent.
    #[serde(default)]
    pub bodies_cut: u64,
    /// Times requests waited for a send window (flow control).
    pub flow_stalls: u64,
    /// Control frames (PING ACKs, window updates, resets) that found no room before the next send.
    pub control_dropped: u64,
    /// `--h2-keepalive`: PINGs sent on quiet connections, and acknowledged.
    pub pings_sent: u64,
    pub pings_acked: u64,
    /// GOAWAYs by error code name (`NO_ERROR`, `ENHANCE_YOUR_CALM`, ...; `OTHER`
    /// beyond RFC 9113's); zero counts left out.
    pub goaway_codes: BTreeMap<&'static str, u64>,
    /// The first GOAWAY's code and debug text (`ENHANCE_YOUR_CALM: too_many_pings`).
    pub first_goaway: Option<String>,
    /// `--grpc`: the method and the calls' outcomes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcReport>,
}

/// `--grpc`: the method called and the answered calls by status code.
#[derive(Debug, Clone, Serialize)]
pub struct GrpcReport {
    /// `/SERVICE/METHOD`.
    pub method: String,
    /// Answered calls by `grpc-status` name (`OK`, `UNAVAILABLE`, ...; `OTHER` for a
    /// code beyond 16); a call without `grpc-status` counts under the code its HTTP
    /// status maps to. Zero counts left out. Every code but `OK` is also an error.
    pub status_codes: BTreeMap<&'static str, u64>,
}

/// Percentiles of one histogram, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub max: u64,
    pub mean: f64,
    pub count: u64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            max: h.max(),
            mean: h.mean(),
            count: h.len(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub cores: Vec<usize>,
    pub connections: usize,
    pub pipeline: usize,
    pub payload_bytes: usize,
    pub duration_ns: u64,
    /// `--warmup`: the first part of `duration_ns`, run but not recorded (0: none).
    /// The figures, `duration_s`, `elapsed_s` and the intervals cover the rest.
    pub warmup_ns: u64,
    pub timeout_ns: u64,
    pub max_lag_ns: u64,
    /// `--control-core`: where the main thread and helper threads run.
    pub control_core: usize,
    /// `--resolution`: timer wake-ups for due sends at least this far apart, ns.
    pub resolution_ns: u64,
    /// `--spin`: `auto`, or how long a worker spins before each due send.
    pub spin: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Rate {
    pub intended_rps: f64,
    /// Responses completed per second of `elapsed_s` (blast: datagrams sent per second).
    pub achieved_rps: f64,
    /// Requests put on the wire per second of `elapsed_s`.
    pub sent_rps: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Requests {
    pub dispatched: u64,
    pub sent: u64,
    pub completed: u64,
    pub errors: u64,
    pub timeouts: u64,
    pub cut_off: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Connections {
    pub requested: usize,
    /// Established by the end of the connect phase (before the schedule started).
    pub established: u64,
    /// Successful connects over the whole run (reconnects included).
    pub opened: u64,
    /// Failed connection attempts over the whole run.
    pub failed: u64,
    /// errno name -> failed attempts (`ECONNREFUSED`, `ETIMEDOUT`, ...).
    pub failed_by_errno: BTreeMap<String, u64>,
    /// Established connections the target closed or reset.
    pub closed_by_target: u64,
    /// Failures that failed no request, by kind: `connect_refused`, `connect_failed`
    /// and `tls_handshake` of connections no request was waiting for (their attempts
    /// are also in `failed`), `unsolicited` response bytes; only kinds that occurred.
    /// Not in `requests.errors` or `errors_by_kind`.
    pub events_by_kind: BTreeMap<&'static str, u64>,
    pub reconnects: u64,
    /// `--conn-max-age`, `--conn-max-requests`: connections retired (drained, closed
    /// and replaced; their reopens are in `reconnects`). Absent without the flags.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recycled: Option<u64>,
    /// Backoff delays chosen (with jitter) before opening again: reconnects and retries
    /// of failed connects.
    pub reconnect_delay_ns: Percentiles,
    /// From the first connect to the last one established in the connect phase, ns.
    pub establish_all_ns: u64,
    /// Workers (one io_uring ring each) per core.
    pub rings_per_core: usize,
    /// The wall a failure points at, with the numbers and the fix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall: Option<String>,
}

/// The generator's own memory.
#[derive(Debug, Clone, Serialize)]
pub struct Memory {
    /// Resident set growth from before the workers started to the end of the connect
    /// phase, per established connection (user space; the kernel's socket memory is
    /// not in it).
    pub user_bytes_per_connection: f64,
    pub rss_growth_bytes: u64,
    /// The largest resident set sampled while the schedule ran (at the workers'
    /// interval snapshots) less the resident set before the workers started: what
    /// holding the connections cost with their buffers in use, not only at the end
    /// of the connect phase (at least the connect phase's figure).
    pub held_rss_growth_bytes: u64,
    pub held_user_bytes_per_connection: f64,
    /// Frames: the members' sequence windows (the receive accounting's tables, fixed
    /// at start, [`FramePlan::accounting_bytes`](crate::engine::worker_plan::FramePlan::accounting_bytes)),
    /// per connection, and both figures above without them (issue 36's goal is stated
    /// without the windows, which grow with members and room size).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows: Option<WindowsMemory>,
}

/// A frames run's memory with the sequence windows apart.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct WindowsMemory {
    pub windows_bytes_per_connection: f64,
    pub user_bytes_per_connection_excluding_windows: f64,
    pub held_user_bytes_per_connection_excluding_windows: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Bytes {
    pub sent: u64,
    pub received: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct WorkerReport {
    pub core: Option<usize>,
    pub cpu_ns: u64,
    pub spin_ns: u64,
    /// CPU time minus the CPU spent spinning for a due instant, ns: exact when
    /// `cpu_basis` is `busy`, an upper bound when `busy_at_most` (the worker was
    /// preempted while spinning; `engine::pacing::busy_cpu_ns`).
    pub busy_cpu_ns: u64,
    pub cpu_basis: &'static str,
    /// busy_cpu_ns per completed request.
    pub busy_cpu_ns_per_request: f64,
    /// busy_cpu_ns over the worker's wall time.
    pub busy_ratio: f64,
    pub backlog_peak: u64,
    /// Times the worker slept in the ring, each ended by a wake-up (a timer or
    /// completions): what a response or a due send costs beyond its own I/O.
    pub wakeups: u64,
    /// How late the ring's timeouts ended for this worker (a moving average), ns:
    /// what `--spin auto` aimed its timer by.
    pub timer_late_ns: u64,
    /// How late they ended at about the 99.5th percentile, ns: a resolution window's
    /// wake-up was aimed this early (at most half the resolution).
    pub timer_late_p995_ns: u64,
    /// Interval boundaries where the worker allocated histograms (0 unless the
    /// collector fell more than one interval behind).
    pub histogram_allocations: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Interval {
    /// Where the interval starts, in seconds of the schedule; it lasts `duration_s`
    /// (one second each for the first hour, see [`series`]).
    pub second: u64,
    pub duration_s: f64,
    pub intended_rps: f64,
    pub achieved_rps: f64,
    pub latency_p50_ns: u64,
    pub latency_p90_ns: u64,
    pub latency_p99_ns: u64,
    pub latency_p999_ns: u64,
    pub latency_max_ns: u64,
    pub dispatch_lag_p99_ns: u64,
    pub errors: u64,
    /// Connections opened again in the interval (after a close, a failure, a GOAWAY
    /// or a retirement).
    #[serde(default)]
    pub reconnects: u64,
    /// Busiest generator core per /proc/stat, minus the workers' spinning there.
    pub core_load: f64,
    /// Busiest generator core as its workers measure themselves: the share of wall time
    /// they worked (neither spinning for a due instant nor asleep), from the TSC.
    pub worker_busy: f64,
    /// Share of the busiest generator core taken by anything but the workers.
    pub other_load: f64,
    /// The generator core of `other_load` (absent from reports written before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_load_core: Option<usize>,
    /// Largest share of a generator core the hypervisor took for something else
    /// (/proc/stat steal): time the workers could neither send nor read. (Absent from
    /// reports written before it, read as 0.)
    #[serde(default)]
    pub steal: f64,
    /// The interface's bits per second sent and received.
    pub tx_bps: f64,
    pub rx_bps: f64,
    /// The interface's packets per second sent and received.
    pub tx_pps: f64,
    pub rx_pps: f64,
    /// max(tx, rx) over the link speed; `null` without one (loopback).
    pub link_utilization: Option<f64>,
    pub drops: u64,
    /// How much each of the kernel's drop counters grew in the interval on the
    /// generator host (`null` each: not available here; the key is absent from
    /// reports written before it). See [`crate::metrics::kernel`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelCounters>,
    /// `--workload frames`: the interval's frame figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<frames::FrameInterval>,
    /// This interval's merged histograms, encoded as `histograms.encoding` says (a
    /// merged entry's are the sum of its seconds').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histograms: Option<hdr::Encoded4>,
}

/// Kolmogorov-Smirnov test of the actual dispatch instants, time-rescaled by the
/// intended rate, against the exponential gaps of a Poisson process.
#[derive(Debug, Clone, Serialize)]
pub struct PoissonFit {
    pub ks_d: f64,
    pub gaps: u64,
    /// 1.63 / sqrt(gaps): D above it rejects the Poisson process at the 1% level.
    pub ks_critical_1pct: f64,
    pub rejected: bool,
}

/// The generator's cores and the interface carrying the run, over the whole run.
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    /// Highest per-interval core load (see [`Interval::core_load`]).
    pub max_core_load: f64,
    pub max_worker_busy: f64,
    /// Highest share of a generator core taken by other processes (and IRQs).
    pub max_other_load: f64,
    /// The generator core `max_other_load` was found on (`null`: none was taken).
    pub max_other_load_core: Option<usize>,
    pub other_load_warn_at: f64,
    /// Highest per-interval share of a generator core the hypervisor stole.
    pub max_steal: f64,
    pub steal_warn_at: f64,
    pub iface: Option<String>,
    /// `--link-speed`, else what sysfs reports; `null` for loopback and virtual links.
    pub link_speed_bps: Option<u64>,
    pub tx_bps_max: f64,
    pub rx_bps_max: f64,
    pub link_utilization_max: Option<f64>,
    pub drops: u64,
    /// The kernel's drop counters over the run, with conntrack's fill.
    pub kernel: KernelReport,
    pub core_busy_watermark: f64,
    pub link_saturated_at: f64,
}

impl HostReport {
    /// A core above the watermark means the generator is near saturation.
    pub fn near_saturation(&self) -> bool {
        self.max_core_load.max(self.max_worker_busy) > self.core_busy_watermark
    }

    pub fn nic_saturated(&self) -> bool {
        self.link_utilization_max
            .is_some_and(|u| u > self.link_saturated_at)
    }

    /// The report's warnings about the host.
    pub fn warnings(&self) -> Vec<Diagnosis> {
        let mut w = Vec::new();
        if self.near_saturation() {
            w.push(Diagnosis::GeneratorNearSaturation {
                core_load: self.max_core_load,
                worker_busy: self.max_worker_busy,
                watermark: self.core_busy_watermark,
            });
        }
        if self.max_other_load > self.other_load_warn_at {
            w.push(Diagnosis::GeneratorCoreShared {
                other_load: self.max_other_load,
                warn_at: self.other_load_warn_at,
            });
        }
        if self.max_steal > self.steal_warn_at {
            w.push(Diagnosis::HypervisorSteal {
                steal: self.max_steal,
                warn_at: self.steal_warn_at,
            });
        }
        if self.nic_saturated() {
            w.push(Diagnosis::NicSaturated {
                iface: self.iface.clone(),
                bps: self.tx_bps_max.max(self.rx_bps_max),
                utilization: self.link_utilization_max.unwrap_or(0.0),
                link_bps: self.link_speed_bps.unwrap_or(0),
            });
        }
        let k = &self.kernel;
        let fill = ConntrackFill {
            count_max: k.conntrack_count_max,
            max: k.conntrack_max,
        };
        w.extend(kernel::diagnoses(&k.counters, fill, self.iface.as_deref()));
        w
    }
}

/// `host.kernel`: each kernel drop counter's growth over the run (the sum of the
/// intervals'; `null`: not available on this host), and conntrack's fill.
#[derive(Debug, Clone, Serialize)]
pub struct KernelReport {
    #[serde(flatten)]
    pub counters: KernelCounters,
    /// The highest `nf_conntrack_count` at an interval's end (`null`: conntrack not
    /// loaded).
    pub conntrack_count_max: Option<u64>,
    /// `nf_conntrack_max` (`null`: conntrack not loaded).
    pub conntrack_max: Option<u64>,
}

/// UDP figures (`--proto udp`).
#[derive(Debug, Clone, Serialize)]
pub struct UdpReport {
    /// Datagrams sent (blast: accepted by the kernel).
    pub sent: u64,
    /// Responses matched to a request (0 in blast mode).
    pub received: u64,
    /// Requests with no response within the timeout.
    pub lost: u64,
    pub duplicates: u64,
    pub reordered: u64,
    pub foreign: u64,
    /// Responses that came after their request was counted lost.
    pub late: u64,
    /// Requests whose response came joined to another one in a single datagram (an
    /// echo through a byte stream); they are among the lost.
    pub joined: u64,
    /// lost / (received + lost).
    pub loss_ratio: f64,
    pub sent_pps: f64,
    /// UDP payload bits (blaster header included) per second.
    pub sent_bps: f64,
    /// Whether UDP GSO batched the sends.
    pub gso: bool,
}

/// One `--mix` entry's figures.
#[derive(Debug, Clone, Serialize)]
pub struct MixEntryReport {
    pub name: String,
    pub weight: u32,
    pub framer: String,
    pub completed: u64,
    pub errors: u64,
    pub latency_ns: Percentiles,
    /// The entry's latency histogram over the run, encoded.
    #[serde(serialize_with = "hdr::serialize_one")]
    pub latency_histogram: Histogram<u64>,
}

/// One destination's figures (`--target`, repeated; one entry with one target):
/// what went to it, what came back, how fast, from the intended send instant.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    /// The destination, `HOST:PORT` as resolved.
    pub address: String,
    /// Requests put on the wire to it.
    pub sent: u64,
    /// Responses it completed.
    pub completed: u64,
    /// Requests failed on its connections (timeouts, resets, error replies, ...).
    pub errors: u64,
    /// `errors` by kind (kinds that occurred), as the run's `errors_by_kind`.
    pub errors_by_kind: BTreeMap<&'static str, u64>,
    /// `completed` per second of the run's `elapsed_s`.
    pub achieved_rps: f64,
    /// done - intended of its requests (timeouts at the timeout), as `latency_ns`.
    pub latency_ns: Percentiles,
    /// Its latency histogram over the run, encoded (`blaster merge` adds these).
    #[serde(serialize_with = "hdr::serialize_one")]
    pub latency_histogram: Histogram<u64>,
}

/// HTTP figures (`--framing http1`).
#[derive(Debug, Clone, Serialize)]
pub struct HttpReport {
    /// `"2xx"` -> count, ...; `"other"` for status codes outside 100-599.
    pub status_classes: BTreeMap<&'static str, u64>,
    /// Exact status code (`"503"`) -> count; `"other"` for codes outside 100-599.
    pub status_codes: BTreeMap<String, u64>,
    /// `--error-status`: the codes counted as request errors (`5xx`, `none`, ...).
    pub error_status: &'static str,
}

/// `--expect`: the assertions, and how many replies failed each.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExpectReport {
    /// In the order given. A reply counts under the first assertion it failed, as
    /// one request error of kind `assertion`.
    pub assertions: Vec<AssertionReport>,
    /// Replies whose body assertions could not be checked (the response outgrew half
    /// the connection's receive buffer): counted as completed, neither passed nor failed.
    pub unchecked: u64,
}

/// One `--expect` assertion and the replies that failed it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssertionReport {
    /// As written: `status:200`, `!contains:fallback`.
    pub assertion: String,
    pub failed: u64,
}

/// An `--abort-if` condition that held and stopped the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AbortReport {
    /// As written, spaced: `errors>5% for 10s`.
    pub condition: String,
    /// The seconds in a row it had to hold.
    pub window_s: u64,
    /// The end of the second that completed the streak, from the start: the run
    /// stopped sending then.
    pub fired_at_s: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub valid: bool,
    /// The validity gate's reasons, as `{code, message, remedy}` (schema 2).
    pub invalid_reasons: Vec<Diagnosis>,
    pub target: String,
    pub protocol: &'static str,
    pub framer: String,
    pub seed: u64,
    pub config: Config,
    /// Seconds the schedule ran (shorter than configured after Ctrl-C).
    pub duration_s: f64,
    /// Seconds from the start until the last request ended (the schedule plus the
    /// drain); rates achieved are counted over this.
    pub elapsed_s: f64,
    pub rate: Rate,
    pub requests: Requests,
    /// Responses that parsed but report failure (HTTP codes in `--error-status`, RESP
    /// error replies, memcached ERROR/CLIENT_ERROR/SERVER_ERROR): request errors, also
    /// in `requests.errors` and `errors_by_kind.error_reply`.
    pub error_replies: u64,
    /// Error replies by their first word (`-WRONGTYPE`, `SERVER_ERROR`; HTTP errors
    /// are in `http.status_codes`); names past the eighth count as `(other)`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub error_replies_by_kind: BTreeMap<String, u64>,
    /// done - intended of the error replies: apart from `latency_ns`, so fast failures
    /// cannot improve the headline.
    pub error_latency_ns: Percentiles,
    pub bytes: Bytes,
    pub errors_by_kind: BTreeMap<&'static str, u64>,
    pub connections: Connections,
    /// Time from connect submitted to established.
    pub connect_time_ns: Percentiles,
    pub host: HostReport,
    pub memory: Memory,
    /// `persistent`, `hold`, `per_request` or `closed_loop`.
    pub mode: &'static str,
    pub latency_ns: Summary,
    pub service_time_ns: Summary,
    /// `null` in closed loop (no timetable).
    pub dispatch_lag_ns: Option<Summary>,
    /// The `--rate` spec (`null` without a timetable).
    pub rate_spec: Option<String>,
    /// `constant` or `poisson`.
    pub arrivals: String,
    /// Poisson arrivals: how well the actual dispatch instants fit the intended process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poisson_fit: Option<PoissonFit>,
    /// The pacing self-check at the run's pacing resolution (TCP runs with a
    /// timetable): see [`crate::metrics::pacing_check`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pacing: Option<crate::metrics::pacing_check::Pacing>,
    pub connection_wait_ns: Summary,
    /// The confidence intervals' level and method, and the achieved rate's and the
    /// error ratio's intervals (each histogram's are in its `ci`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci: Option<ci::RunCi>,
    pub workers: Vec<WorkerReport>,
    pub io_uring_features: Vec<&'static str>,
    /// Every thread of the process seen during the run and the CPU it last ran on
    /// (`/proc/self/task/*/stat` field 39), by tid.
    pub threads: Vec<crate::threads::ThreadCpu>,
    /// A worker stopped early because its ring failed: the figures cover the run up
    /// to then, and the command ends with this error (exit code 1). Not in the JSON.
    #[serde(skip)]
    pub worker_error: Option<crate::engine::driver::WorkerError>,
    /// Observations with their remedy, e.g. connection wait dominating latency, as
    /// `{code, message, remedy}` (schema 2).
    pub diagnosis: Vec<Diagnosis>,
    pub interrupted: bool,
    /// How finely `intervals` is divided: a second each for the first hour, then
    /// entries of `coarse_s` seconds ([`series`]).
    pub intervals_resolution: series::Resolution,
    pub intervals: Vec<Interval>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpReport>,
    /// `--workload frames`: see docs/frames.md.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames: Option<frames::FramesReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpReport>,
    /// Per `--mix` entry; the totals above cover all entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mix: Option<Vec<MixEntryReport>>,
    /// Per destination, in `--target` order (one entry with one target; absent for
    /// frames runs). The totals above cover them all; with several targets, requests
    /// that failed before any connection took them (a full backlog, a timeout in
    /// the backlog) are in the totals only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetReport>,
    /// `{zipf:N:S}`, `{uniform:N}`: the keys the requests drew (see docs/report.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<crate::request::keys::KeyShares>,
    /// `--tls`: the handshakes (see docs/report.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsReport>,
    /// `--server-time`: the server's own time and the rest of the latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_time: Option<ServerTimeReport>,
    /// `--replay`: the recording replayed (see docs/replay.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayReport>,
    /// `--http2`: streams and what the servers did to them (see docs/report.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http2: Option<Http2Report>,
    /// `--abort-if`: the condition that stopped the run (`null` when none fired).
    pub abort: Option<AbortReport>,
    /// `--expect`: the assertions and their failures (absent without `--expect`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect: Option<ExpectReport>,
    /// The first response that did not parse, escaped and truncated.
    pub first_protocol_error: Option<String>,
    /// Which shard of which run, the common start and the clock (`--shard`,
    /// `--start-at`, `--run-id`); present for every run (a whole run is shard 0/1).
    pub fleet: Option<fleet_report::FleetReport>,
    /// The machine and the command that produced this report.
    pub machine: Machine,
    /// The run's merged histograms (ns), encoded: see [`hdr::Embedded`].
    #[serde(serialize_with = "hdr::serialize_embedded")]
    pub histograms: Histograms,
}

/// Facts about the generator machine and the command, so a result read later says
/// where it came from.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct Machine {
    pub blaster_version: String,
    /// The command line, one argument per element.
    pub command_line: Vec<String>,
    /// `uname -r` (from /proc/sys/kernel/osrelease).
    pub kernel: String,
    /// The first `model name` of /proc/cpuinfo.
    pub cpu_model: String,
    /// Logical CPUs online.
    pub cpus_online: usize,
    /// The cores the workers ran on (`--cores`).
    pub cores_used: Vec<usize>,
    pub hostname: String,
}

impl Machine {
    /// This machine, for a run on `cores`.
    pub fn this(cores: &[usize]) -> Machine {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default();
        Machine {
            blaster_version: env!("CARGO_PKG_VERSION").to_string(),
            command_line: std::env::args().collect(),
            kernel: read("/proc/sys/kernel/osrelease"),
            cpu_model,
            cpus_online: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cores_used: cores.to_vec(),
            hostname: read("/proc/sys/kernel/hostname"),
        }
    }
}

impl Report {
    /// Failed requests by kind (kinds that occurred): they add up to
    /// `requests.errors`, each failed request being counted under one kind.
    pub fn errors_map(c: &Counters) -> BTreeMap<&'static str, u64> {
        let map = Self::kinds_map(|k| c.errors_of(k));
        debug_assert_eq!(map.values().sum::<u64>(), c.request_errors());
        map
    }

    /// Connection events by kind (kinds that occurred): failures that failed no
    /// request.
    pub fn events_map(c: &Counters) -> BTreeMap<&'static str, u64> {
        Self::kinds_map(|k| c.events_of(k))
    }

    fn kinds_map(count: impl Fn(ErrorKind) -> u64) -> BTreeMap<&'static str, u64> {
        ErrorKind::ALL
            .iter()
            .map(|&k| (k.name(), count(k)))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    /// One line saying what happened when nothing succeeded although the run tried and
    /// something failed: every reply an error, every connection reset, every datagram
    /// lost, every frame lost. `None` when anything succeeded, or nothing was tried
    /// (held connections, a run cut off before any answer could come).
    pub fn nothing_succeeded(&self) -> Option<String> {
        if let Some(f) = &self.frames {
            // Another run on the same rooms explains it better than the target.
            let cause = match self.diagnosis.iter().find_map(|d| match d {
                crate::diagnosis::Diagnosis::FramesCollide {
                    foreign,
                    duplicates,
                    ..
                } => Some((foreign, duplicates)),
                _ => None,
            }) {
                Some((foreign, duplicates)) => format!(
                    "{foreign} foreign and {duplicates} duplicate frames came instead: another \
                     run on the same rooms (give each machine its --shard)"
                ),
                None => "target refused, unreachable or not relaying".to_string(),
            };
            return (f.expected > 0 && f.received == 0).then(|| {
                format!(
                    "nothing succeeded: 0 of {} expected frames arrived ({} sent, {} not sent, {} connections opened, {} failed): {cause}",
                    f.expected,
                    self.frames_sent(),
                    f.not_sent,
                    self.connections.opened,
                    self.connections.failed,
                )
            });
        }
        let q = &self.requests;
        if q.completed > 0 || self.protocol == "udp-blast" {
            return None;
        }
        if q.errors == 0 && self.connections.failed == 0 {
            return None;
        }
        let kinds: Vec<String> = (self.errors_by_kind.iter())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let what = if self.error_replies > 0 && self.error_replies == q.errors {
            // Every reply failed, so the diagnosis of mostly failed replies is there.
            let top = (self.diagnosis.iter())
                .find_map(|d| match d {
                    Diagnosis::MostRepliesFailed { top, top_count, .. } => {
                        Some(format!(" (most frequent: {top}, {top_count})"))
                    }
                    _ => None,
                })
                .unwrap_or_default();
            format!(
                "every reply was an error: {} error replies{top}",
                self.error_replies
            )
        } else if self.protocol == "udp" {
            format!(
                "no datagram was answered: {} sent, {} lost (a port with no listener, or a filter in the path)",
                q.sent,
                self.errors_by_kind.get("lost").copied().unwrap_or(0)
            )
        } else if self.connections.opened == 0 {
            "target refused or unreachable: no connection was established".to_string()
        } else {
            format!(
                "no request succeeded: {} due, {} errors, {} connections opened and {} closed by the target",
                q.dispatched, q.errors, self.connections.opened, self.connections.closed_by_target
            )
        };
        Some(format!(
            "nothing succeeded against {}: {what}; errors by kind: {}",
            self.target,
            if kinds.is_empty() {
                "none".to_string()
            } else {
                kinds.join(" ")
            }
        ))
    }

    fn frames_sent(&self) -> u64 {
        self.frames
            .as_ref()
            .map_or(0, |f| f.planned.saturating_sub(f.not_sent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_empty_are_zero() {
        let h = Histogram::<u64>::new_with_bounds(1, 1000, 3).unwrap();
        // Zeros, not NaN means or a max from an empty range.
        assert_eq!(Percentiles::of(&h), Percentiles::default());
        let mut one = h.clone();
        one.record(700).unwrap();
        let p = Percentiles::of(&one);
        assert_eq!((p.count, p.max, p.p50), (1, 700, 700));
    }
}
