//! Command-line definitions only (clap derive). Validation lives in `run_plan`.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "blaster",
    version,
    about = "Open-model TCP load generator on io_uring whose latency counts from the intended send time.",
    long_about = "Open-model TCP load generator on io_uring. Requests are sent on an absolute \
timetable; latency counts from the instant each request should have been sent, so a \
stalled target cannot hide behind coordinated omission. The run is marked invalid \
(exit code 3) when the generator itself fell behind.\n\nWith no subcommand, `blaster` \
runs `blaster run`; `blaster run` with no --target measures the generator's own \
ceiling against its built-in sink on loopback (the loopback baseline)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
#[allow(clippy::large_enum_variant)] // parsed once per process; size is irrelevant
pub enum Command {
    /// Run a load test against --target, or without --target the loopback baseline.
    Run(RunArgs),
    /// Serve as a target: the built-in io_uring sink.
    Sink(SinkArgs),
    /// Check whether this machine can run the plan given by the same flags as `run`:
    /// file descriptors, port space, memory and cores, one line per check as
    /// scripts/preflight.sh prints them. Exit 0 when nothing FAILs, 1 otherwise.
    Preflight(RunArgs),
    /// Size a generator cluster for a target load: connections, CPU, uplink and
    /// downlink sized separately, the largest wins, plus one coordinator.
    Plan(PlanArgs),
    /// Capacity search: raise the rate step by step until --slo breaks, bisect to
    /// --precision, report the max safe throughput, the knee and what stopped it.
    Search(SearchArgs),
    /// Render run reports (the JSON of `run --json`): `--html FILE` writes one
    /// self-contained HTML page of charts; two or more runs are overlaid.
    Report(ReportArgs),
    /// Compare two run reports (`blaster run --json`) side by side: latency
    /// percentiles from their embedded histograms (any percentile, p99.99 included),
    /// rate and errors. With --max-regression, a CI gate: exit 4 when NEW crossed a
    /// limit, 0 otherwise (2: bad spec; 1: a file that cannot be read or compared).
    Compare(CompareArgs),
    /// Merge the JSON reports of a run's shards (`run --shard i/N`) into one: the
    /// embedded histograms are added (never averaged), counters summed, the
    /// per-second series aligned on the common start and added, and a per-shard table
    /// printed. Missing shards are named and make the merge incomplete; files of
    /// different runs, plans or schemas, duplicate shards and non-blaster files are
    /// refused with one line naming the file (exit 1). Exit 3 when the merged run is
    /// invalid or incomplete.
    Merge(MergeArgs),
}

#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// The reference run's JSON report.
    pub base: PathBuf,

    /// The run to judge against it.
    pub new: PathBuf,

    /// Limits on how much worse NEW may be: `p99=15%,p99.9=25%,errors=0.1%,rate=-1%`.
    /// `pNN[.N]` and `max`: latency may grow by at most X% of BASE's; `errors`: the
    /// error ratio may grow by at most X percentage points; `rate`: the achieved rate
    /// may fall by at most X%. Default: none (the table only).
    #[arg(long)]
    pub max_regression: Option<String>,

    /// Latency percentiles to show, e.g. `p50,p99,p99.99,max` (limited ones are always
    /// shown). Default: p50,p90,p99,p99.9,p99.99,max.
    #[arg(long)]
    pub percentiles: Option<String>,

    /// Write the comparison as JSON to FILE (`-` for stdout, which then carries only
    /// JSON).
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Confidence level of the intervals compare decides with (recomputed from each
    /// report's per-second histograms): strictly between 0 and 1. Default: 0.95.
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
}

/// Flags shared by `run` and `search`: the target, the connections and what goes
/// over them.
#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    /// Target address, HOST:PORT; repeat for several destinations, at most 64
    /// (connections go round robin over every source x target pair; the report gives
    /// each its own latency, errors and rate beside the total). Without it, blaster
    /// measures its own ceiling against its built-in sink on loopback (the baseline).
    #[arg(long)]
    pub target: Vec<String>,

    /// Source addresses to bind, so connections spread over more 4-tuples: a list of
    /// addresses, ranges and CIDR blocks, e.g. `127.0.0.2-127.0.0.60`, `10.0.0.0/29`.
    /// Each connection's first connect binds a port of its own from
    /// ip_local_port_range (the kernel's search scans the whole range once half of it
    /// is taken); reconnects let the kernel pick at connect time
    /// (IP_BIND_ADDRESS_NO_PORT). Default: the kernel chooses the source.
    #[arg(long)]
    pub source_ip: Option<String>,

    /// Close connections with RST (SO_LINGER 0) so the generator keeps no TIME_WAIT.
    #[arg(long)]
    pub linger0: bool,

    /// Reconnect backoff after the target closes, resets or refuses a connection:
    /// `base=1s,mult=1.6,jitter=0.2,max=120s` (any subset; these are the defaults,
    /// gRPC's).
    #[arg(long)]
    pub reconnect_backoff: Option<String>,

    /// Do not reopen connections the target closed, reset or refused.
    #[arg(long, conflicts_with = "reconnect_backoff")]
    pub no_reconnect: bool,

    /// SO_SNDBUF and SO_RCVBUF of every connection, e.g. `4k` (smaller buffers, more
    /// connections per GiB). Default: the kernel's autotuning.
    #[arg(long)]
    pub sockbuf: Option<String>,

    /// TCP keepalive: `idle,interval,count`, e.g. `30s,10s,3`. Default: off.
    #[arg(long)]
    pub keepalive: Option<String>,

    /// Cores to run workers on, one pinned worker per core: `3`, `4-11`, `0,2,4-6`.
    /// Default: core 0.
    #[arg(long)]
    pub cores: Option<String>,

    /// Core of the main thread (collector, live line, report) and of every helper
    /// thread, so none of them preempts a worker. Default: the first usable core not in
    /// --cores, or the first of --cores when there is none.
    #[arg(long)]
    pub control_core: Option<usize>,

    /// Persistent connections in total, split across workers. Default: 64.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,

    /// How requests are spread within the rate: `constant` (evenly paced) or `poisson`
    /// (exponential gaps from --seed). Default: constant.
    #[arg(long, default_value = "constant")]
    pub arrivals: String,

    /// A response larger than this is a protocol error, e.g. `1MiB`, `64k`, `4096`.
    /// Default: 1MiB.
    #[arg(long, default_value = "1MiB")]
    pub max_response: String,

    /// How a worker waits for a due send. `auto` sleeps in the ring and spins only
    /// where spinning costs less than a sleep, or where --resolution is finer than the
    /// timer's measured lateness (wake-ups from sleep arrive tens of microseconds late
    /// on a quiet host, milliseconds on a busy VM host). A duration spins that long
    /// before every due send (the precise, costly way: `2ms` keeps a core busy at any
    /// rate above 500/s); `0` never spins. Default: auto.
    #[arg(long, default_value = "auto")]
    pub spin: String,

    /// Where sends are due closer together than this, a timer wake-up lands within
    /// this long after a send's instant and sends everything due by then (each
    /// request's latency still counts from its own intended instant, its lateness
    /// shows as dispatch lag); where they are further apart, each wake-up is aimed at
    /// its send's own instant. Coarser costs less CPU at high rates; `0` wakes for
    /// every due send. The report states the resolution used. Default: 100us.
    #[arg(long, default_value = "100us")]
    pub resolution: String,

    /// Seed of the generator for templates and request mixes; printed in the report.
    /// Default: 1.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Requests in flight per connection. Default: 1.
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,

    /// Request payload of N bytes (the letter x repeated). Default: 64.
    #[arg(long, conflicts_with_all = ["payload", "payload_file"])]
    pub payload_size: Option<usize>,

    /// Request payload as text; `\r`, `\n`, `\t`, `\\` and `\xHH` escapes are decoded.
    #[arg(long, conflicts_with = "payload_file")]
    pub payload: Option<String>,

    /// Request payload read from a file, sent byte for byte.
    #[arg(long)]
    pub payload_file: Option<PathBuf>,

    /// How a response ends: `echo` (as many bytes as the request), `fixed:N`,
    /// `delimiter:BYTES` (e.g. `delimiter:\r\n`), `length-prefixed:u16be|u32be|u32le
    /// [,offset=N][,adjust=N]`, `http1` or `resp` (Redis). Default: echo, or http1
    /// with --http.
    #[arg(long)]
    pub framing: Option<String>,

    /// HTTP status codes that are request errors: classes and codes, e.g.
    /// `5xx,429,404`, or `none`. Such replies count in errors (and the SLO's errors),
    /// their latency in error_latency_ns, never in the headline. RESP error replies and
    /// memcached ERROR/CLIENT_ERROR/SERVER_ERROR are always errors. Default: 5xx.
    #[arg(long, default_value = "5xx")]
    pub error_status: String,

    /// An assertion every HTTP/1.1 reply must pass, else it is an error of kind
    /// `assertion` (counted per assertion, latency in error_latency_ns): `status:CODES`
    /// (`status:200`, `status:2xx,304`), `contains:TEXT` (bytes in the body, with the
    /// escapes of --payload), `regex:RE` (a match in the body, regex crate syntax); a
    /// leading `!` turns one round (`!contains:fallback`), a leading `ENTRY=` holds only
    /// that --mix entry's replies to it (`search=status:200`). Repeatable, at most 8: all
    /// that apply must hold. Body assertions read responses up to half the receive
    /// buffer (HTTP/2: 4 KiB per stream); a longer one is counted unchecked. Needs
    /// --target, HTTP/1.1 or --http2 (not --grpc).
    #[arg(long, value_name = "ASSERTION")]
    pub expect: Vec<String>,

    /// Read the server's own time from each reply, into its own histogram
    /// (server_time_ns) beside `latency - server time` per request
    /// (network_queueing_ns): `server-timing` (the sum of the `Server-Timing` header's
    /// `dur=` values, in ms), `server-timing:NAME` (metric NAME's `dur=`), `header:NAME`
    /// (a header holding a duration such as `12.5ms`, `300us`, `2s`; a bare number is
    /// ms), or `offset:OFF:LEN:UNIT` for raw TCP replies (a big-endian unsigned integer of
    /// LEN = 1, 2, 4 or 8 bytes at byte OFF, in UNIT = ns, us or ms). Replies without one
    /// are counted (server_time.missing). Needs --target; HTTP/1.1, not --http2 yet.
    /// Default: off.
    #[arg(long, value_name = "SOURCE")]
    pub server_time: Option<String>,

    /// An HTTP/1.1 request instead of a raw payload: `--http 'GET /path'`. Host and
    /// Content-Length are filled in; the framer defaults to http1.
    #[arg(long, conflicts_with_all = ["payload", "payload_file", "payload_size", "mix"])]
    pub http: Option<String>,

    /// Send the requests (`--http`, or the http1 entries of a `--mix`) as HTTP/2:
    /// h2c with prior knowledge, or h2 over `--tls` (ALPN `h2`). Many requests share
    /// a connection as streams (--streams-per-connection).
    #[arg(long)]
    pub http2: bool,

    /// Retire each connection once it is D old (`30s`, or `30s±5s` / `30s+-5s`: each
    /// connection's age drawn uniformly within D-J..D+J from --seed, as servers'
    /// MaxConnectionAge with jitter): it takes no new request, its requests under way
    /// finish, then it closes and a fresh one opens. Counted as `connections.recycled`.
    /// TCP request runs on a timetable (HTTP/1.1, HTTP/2, gRPC, raw framers).
    #[arg(long, value_name = "D[±J]")]
    pub conn_max_age: Option<String>,

    /// Retire each connection after N requests (as --conn-max-age: drained, closed,
    /// replaced), as servers' max-requests-per-connection.
    #[arg(long, value_name = "N")]
    pub conn_max_requests: Option<u32>,

    /// A gRPC unary call to SERVICE/METHOD (e.g. `helloworld.Greeter/SayHello`) over
    /// HTTP/2 (implies --http2): `-H` headers are its metadata, --grpc-message its
    /// request, --timeout its deadline (`grpc-timeout`); `grpc-status` other than OK
    /// is an error, counted by code name.
    #[arg(long, value_name = "SERVICE/METHOD", conflicts_with_all = ["http", "payload", "payload_file", "payload_size", "mix", "body", "body_file"])]
    pub grpc: Option<String>,

    /// With --grpc: the serialized request message (protobuf bytes), sent as it is.
    /// Default: an empty message.
    #[arg(long, value_name = "FILE", requires = "grpc")]
    pub grpc_message: Option<PathBuf>,

    /// With --grpc and --grpc-json: the .proto file defining the method (its imports
    /// looked up beside it; Google's well-known types built in).
    #[arg(
        long,
        value_name = "FILE",
        requires = "grpc",
        conflicts_with = "grpc_message"
    )]
    pub grpc_proto: Option<PathBuf>,

    /// With --grpc and --grpc-proto: the request message as JSON (the proto3 JSON
    /// mapping), encoded once at start into protobuf, e.g. '{"name": "world"}'.
    #[arg(
        long,
        value_name = "JSON",
        requires = "grpc",
        conflicts_with = "grpc_message"
    )]
    pub grpc_json: Option<String>,

    /// gRPC metadata `name: value`, repeatable. With --workload frames --frame-proto
    /// grpc, each member's call carries it with `{room}` replaced by the member's room
    /// (default: `room: {room}`); with a unary --grpc, every call (an auth token, a
    /// test tag), as -H does.
    #[arg(long, value_name = "NAME: VALUE")]
    pub grpc_metadata: Vec<String>,

    /// With --http2: streams in flight per connection, at most the server's
    /// MAX_CONCURRENT_STREAMS. Default: 100.
    #[arg(long, value_name = "N")]
    pub streams_per_connection: Option<usize>,

    /// With --http2 or --grpc: send a PING on every connection that received nothing
    /// for D (gRPC's keepalive time), e.g. `10s`; the answers are counted, and a server
    /// that allows PINGs less often answers GOAWAY ENHANCE_YOUR_CALM (`too_many_pings`),
    /// which the report names. Default: off.
    #[arg(long, value_name = "D")]
    pub h2_keepalive: Option<String>,

    /// HTTP header `Name: value`, repeatable (with --http or http1 entries of --mix).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,

    /// HTTP request body (with --http); `{rand:N}` placeholders allowed.
    #[arg(long, requires = "http", conflicts_with = "body_file")]
    pub body: Option<String>,

    /// HTTP request body read from a file (with --http).
    #[arg(long, requires = "http")]
    pub body_file: Option<PathBuf>,

    /// A weighted request mix: one `name weight framer request` per line (see docs/flags.md).
    #[arg(long, conflicts_with_all = ["payload", "payload_file", "payload_size", "framing"])]
    pub mix: Option<PathBuf>,

    /// Replay a recording instead of --rate: a text file of `OFFSET TEMPLATE` lines
    /// (`12.5ms GET /users/7`), a pcap/pcapng capture of a TCP conversation (of a UDP
    /// one with --proto udp) or a GoReplay .gor file; each request goes out at its
    /// recorded offset and its latency counts from there.
    /// The run lasts the recording unless --duration is shorter (see docs/replay.md).
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,

    /// How a text recording's TEMPLATE is read: `http` (`METHOD /path`, with the -H
    /// headers) or `payload` (bytes as --payload takes them). Default: http (payload
    /// with --proto udp).
    #[arg(long, requires = "replay", value_name = "KIND")]
    pub replay_as: Option<String>,

    /// The recording's format: `text`, `pcap` (pcap or pcapng) or `gor` (GoReplay).
    /// Default: told by the file's first bytes.
    #[arg(long, requires = "replay", value_name = "FORMAT")]
    pub replay_format: Option<String>,

    /// Replay X times as fast (offsets divided by X), e.g. `2` or `0.5`. Default: 1.
    #[arg(long, requires = "replay", value_name = "X")]
    pub replay_speed: Option<f64>,

    /// Start the recording over at its end until --duration (default: once).
    #[arg(long, requires = "replay")]
    pub replay_loop: bool,

    /// The server's port in a capture. Default: the destination of its first SYN
    /// (UDP: of its first datagram).
    #[arg(long, requires = "replay", value_name = "PORT")]
    pub replay_port: Option<u16>,

    /// A request with no response after this long is an error, its latency recorded
    /// at the timeout. Default: 5s.
    #[arg(long, default_value = "5s")]
    pub timeout: String,

    /// Validity gate: a dispatch lag p99 above this marks the run invalid (exit 3).
    /// Default: 1ms.
    #[arg(long, default_value = "1ms")]
    pub max_lag: String,

    /// Confidence level of the intervals printed beside every percentile, the achieved
    /// rate and the error ratio (a bootstrap over the run's one-second intervals, see
    /// docs/metrics.md): strictly between 0 and 1. Default: 0.95.
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,

    /// TLS over every connection (see `TlsArgs`).
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// `--tls` and its options (TCP request/response workloads; see docs/flags.md).
#[derive(Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// Speak TLS (rustls) on every connection: the handshake follows the TCP connect
    /// and is measured on its own (`tls_handshake_ns`); requests and responses are
    /// encrypted in user space, io_uring moves the ciphertext. Without --target: the
    /// loopback baseline over TLS (the built-in sink's TLS front, with a certificate
    /// for localhost made at start that the client trusts alone).
    #[arg(long)]
    pub tls: bool,

    /// The server name sent (SNI) and checked against the certificate. Default: the
    /// host of the first --target as given.
    #[arg(long, value_name = "NAME")]
    pub tls_sni: Option<String>,

    /// Trust the CA certificates of this PEM file instead of the system's store.
    #[arg(long, value_name = "FILE", conflicts_with = "tls_insecure")]
    pub tls_ca: Option<std::path::PathBuf>,

    /// Accept any certificate for any name (the handshake's signatures are still
    /// checked). The report says so on its first line.
    #[arg(long)]
    pub tls_insecure: bool,

    /// ALPN protocols to offer, comma-separated, e.g. `http/1.1` or `h2,http/1.1`.
    /// Default: none offered.
    #[arg(long, value_name = "LIST")]
    pub alpn: Option<String>,

    /// Only this TLS version: `1.2` or `1.3`. Default: both, 1.3 preferred.
    #[arg(long, value_name = "V")]
    pub tls_version: Option<String>,

    /// The share of new connections (0 to 1) that resume a session with a ticket an
    /// earlier handshake received; the rest shake hands in full. Default: 0 (every
    /// handshake full, as `openssl s_time -new`).
    #[arg(long, value_name = "RATIO")]
    pub tls_resume: Option<f64>,

    /// Client certificate chain (PEM) sent when the server asks for one (mutual
    /// TLS). Needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// The client certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1). Needs
    /// --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
}

impl TlsArgs {
    /// The first `--tls-*` option given (they need `--tls`).
    pub fn first_option(&self) -> Option<&'static str> {
        [
            ("tls-sni", self.tls_sni.is_some()),
            ("tls-ca", self.tls_ca.is_some()),
            ("tls-insecure", self.tls_insecure),
            ("alpn", self.alpn.is_some()),
            ("tls-version", self.tls_version.is_some()),
            ("tls-resume", self.tls_resume.is_some()),
            ("tls-cert", self.tls_cert.is_some()),
            ("tls-key", self.tls_key.is_some()),
        ]
        .into_iter()
        .find_map(|(f, given)| given.then_some(f))
    }
}

/// The transport and what the connections carry: flags `run` and `search` share (a
/// frames search steps the connection count).
#[derive(Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// Transport: `tcp` (persistent connections) or `udp` (connected UDP sockets, one
    /// datagram per request, matched by sequence). Default: tcp.
    #[arg(long, default_value = "tcp")]
    pub proto: String,

    /// What the connections carry: `requests` (request/response on the timetable) or
    /// `frames` (every connection sends one frame per --tick for the whole run, rooms
    /// of --room-size receive each other's frames through a broadcast server such as
    /// `blaster sink --mode broadcast`; see docs/frames.md). Default: requests.
    #[arg(long, default_value = "requests")]
    pub workload: String,

    /// Frames: the tick, one frame per connection per tick, e.g. `33ms` (1ms to 10s).
    /// Default: 33ms.
    #[arg(long)]
    pub tick: Option<String>,

    /// Frames: bytes per frame, header (32 bytes) included. Default: 50.
    #[arg(long)]
    pub frame_size: Option<usize>,

    /// Frames: members per room; connection j is member j mod R of room j / R.
    /// Default: 10.
    #[arg(long)]
    pub room_size: Option<usize>,

    /// Frames: a frame whose arrival deviation (received - intended send instant)
    /// exceeds this is late, e.g. `20ms`. Default: one tick.
    #[arg(long)]
    pub frame_budget: Option<String>,

    /// Frames: the server relays each frame to its sender too (as `blaster sink
    /// --echo-to-sender` does), so every connection also expects its own frames.
    #[arg(long)]
    pub echo_to_sender: bool,

    /// Frames: the server aggregates (`blaster sink --mode broadcast --aggregate`):
    /// each member gets one downlink frame of --down-size bytes per server tick
    /// carrying its room's frames of that tick. --tick must be the sink's tick.
    /// Needs --down-size.
    #[arg(long)]
    pub aggregate: bool,

    /// Frames with --aggregate: bytes of each downlink frame, as given to the sink
    /// (at least 32 + 24 x --room-size).
    #[arg(long)]
    pub down_size: Option<usize>,

    /// Frames: the server's protocol. `blaster` (the built-in sink's broadcast mode),
    /// `nats` (nats-server: SUB and PUB per room subject), `mqtt` (3.1.1 at QoS 0,
    /// e.g. mosquitto), `ws` (WebSocket binary messages to a broadcast server at
    /// --ws-path), `resp` (Redis pub/sub) or `grpc` (each member a bidirectional
    /// streaming call to --grpc SERVICE/METHOD over h2c, its room in --grpc-metadata).
    /// Each connection joins its room first (timed as the join phase); see
    /// docs/frames.md. Default: blaster.
    #[arg(long)]
    pub frame_proto: Option<String>,

    /// Frames with --frame-proto nats, mqtt or resp: the subject, topic or channel of
    /// a room, with `{room}` for the room number. Default: `room.{room}`.
    #[arg(long)]
    pub frame_topic: Option<String>,

    /// Frames: members 0..K of each room send a frame per tick, the others only
    /// listen (a live room: thousands of listeners, a few speakers); the receive
    /// accounting grows with receivers x senders, not members squared. Listeners join
    /// before the run (a subscription; with the built-in sink, a join frame it sends
    /// back). TCP only. Default: every member sends.
    #[arg(long)]
    pub senders_per_room: Option<usize>,
    /// Frames: members carried by each connection (multiplexed streams, as a game
    /// client's bots or a gateway's players): each has its own sequence and accounting,
    /// one write per tick carries all of a connection's frames, and a room's members
    /// sit on different connections. --connections counts sockets; the members are
    /// --connections x M. Default: 1.
    #[arg(long)]
    pub members_per_connection: Option<usize>,

    /// Frames with --members-per-connection: which connections share a room in member
    /// slots past the first. `mixed`: each slot places its members by a permutation
    /// seeded from --seed, so a connection's room mates differ from slot to slot (as a
    /// gateway's or bot host's streams meet strangers), mixed within each worker's
    /// share of the rooms; `grouped`: every slot's room r holds the same connections.
    /// Default: mixed.
    #[arg(long)]
    pub room_layout: Option<String>,

    /// Frames: a share RATIO (above 0, at most 1) of the connections read slowly, at
    /// RATE bytes per second (`10KB`, `1MiB`; `0`: they stop reading once joined), as
    /// a slow subscriber does, so the server's answer (buffering, drops, disconnects)
    /// is measured. Each connection is slow with probability RATIO, drawn from --seed;
    /// a slow connection's members are all slow. Their frames are reported apart
    /// (`frames.slow_readers`), never in the other readers' retention and loss. TCP
    /// without --tls. E.g. `0.1:10KB`.
    #[arg(long)]
    pub slow_readers: Option<String>,

    /// Frames with --frame-proto ws: the request path of a room's WebSocket, with
    /// `{room}` for the room number. Default: `/room/{room}`.
    #[arg(long)]
    pub ws_path: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// The flags `run` shares with `search`: where to connect, what to send, how.
    #[command(flatten)]
    pub load: LoadArgs,

    /// The transport and the workload (`run` shares them with `search`).
    #[command(flatten)]
    pub work: WorkloadArgs,

    /// Open connections at no more than this many per second, in total (the first
    /// connects and every reconnect). Default: no limit (at most 512 pending per worker).
    #[arg(long)]
    pub connect_rate: Option<f64>,

    /// Hold --connections open for --duration without request traffic (only the
    /// heartbeats of --heartbeat, if given); report connect times, failures by errno
    /// and the generator's memory per connection.
    #[arg(long)]
    pub hold: bool,

    /// With --hold: send the heartbeat on every connection once per this period,
    /// spread evenly over it, and expect the framer's response, e.g. `10s`.
    #[arg(long, requires = "hold")]
    pub heartbeat: Option<String>,

    /// With --hold: the heartbeat's bytes (escapes as in --payload). Default: the
    /// request payload.
    #[arg(long, requires = "heartbeat")]
    pub heartbeat_payload: Option<String>,

    /// Connect, send, receive and close for every request (latency still counts from
    /// the intended instant; the connect time is reported separately). --connections
    /// bounds how many are open at once.
    #[arg(long)]
    pub connect_per_request: bool,

    /// Intended request rate in requests per second, in total across workers, or a
    /// shape: `step:1000..50000+1000/30s`, `ramp:0..50000/60s`,
    /// `spike:base=1000,peak=10000,at=30s,for=5s`, `burst:base=500,peak=5000,on=200ms,off=2s`,
    /// `chaos:base=2000,amp=0.5`, `file:rates.csv`. Required with --target (unless
    /// --concurrency or --hold); the baseline steps its own rate. `max` (UDP blast
    /// only): as fast as the send buffers allow.
    #[arg(long)]
    pub rate: Option<String>,

    /// The link speed of the interface carrying the run, e.g. `25gbit`, `200mbit`, for
    /// the NIC utilisation figures (virtual links report none or a nominal figure).
    /// Default: what /sys/class/net/IF/speed says.
    #[arg(long)]
    pub link_speed: Option<String>,

    /// Closed-loop mode, for comparison: N connections each keep --pipeline requests
    /// (HTTP/2: --streams-per-connection streams) in flight, sending the next as each
    /// response arrives (no --rate). Its latency hides queueing; the
    /// report says so and the validity gate does not apply.
    #[arg(long, conflicts_with = "rate")]
    pub concurrency: Option<usize>,

    /// UDP only: fire and forget; report packets/s and bits/s sent.
    #[arg(long)]
    pub no_response: bool,

    /// How long the schedule runs, e.g. `10s`, `500ms`, `2m`. Default: 10s (with
    /// --replay: the recording's length).
    #[arg(long)]
    pub duration: Option<String>,

    /// Run the timetable for this long before recording, within --duration: the
    /// connections open and the target's caches warm, and nothing of the warm-up
    /// enters histograms, counters or the SLO (`--warmup 1s --duration 3s` records
    /// 2 s). Shards warm the same global interval. Default: 0 (none).
    #[arg(long, default_value = "0")]
    pub warmup: String,

    /// Write the JSON report to FILE (`-` for stdout, which then carries only JSON).
    /// It embeds every histogram (HdrHistogram V2 compressed, base64).
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Write the HdrHistogram interval log to FILE (`-` for stdout): one line per
    /// second for each of latency, service time, dispatch lag and connection wait
    /// (tags `latency`, `service`, `lag`, `wait`), readable by HdrHistogram's tools.
    /// Written as the run goes, to a temporary beside FILE until the run ends.
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<PathBuf>,

    /// Write the percentile distributions of latency and service time to FILE (`-` for
    /// stdout) in HdrHistogram's `.hgrm` layout, values in milliseconds.
    #[arg(long, value_name = "FILE")]
    pub percentiles: Option<PathBuf>,

    /// Write one CSV row per second to FILE (`-` for stdout): rates, latency
    /// percentiles, errors, dispatch lag, core load, link utilisation. Written as the
    /// run goes, to a temporary beside FILE until the run ends.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,

    /// Serve the run's Prometheus metrics at http://ADDR/metrics while it runs:
    /// counters, rates, core load, and latency, service time and dispatch lag as
    /// histograms (buckets that add up across shards). ADDR is a port (on 127.0.0.1),
    /// `IPv4:PORT` or `[IPv6]:PORT`; only that address is bound, before the run (in
    /// use: exit 1). Nothing listens without it. Needs --target.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,

    /// After the run, keep serving --metrics-listen's final state until one scrape has
    /// fetched it, waiting at most this long, e.g. `30s` (twice the scrape interval is
    /// enough). Default: 0s, exit at once (the final seconds may then go unscraped).
    #[arg(
        long,
        value_name = "D",
        default_value = "0s",
        requires = "metrics_listen"
    )]
    pub metrics_linger: String,

    /// Judge the run against a service level objective, e.g. `p99<20ms,errors<0.1%`
    /// (terms: `pNN[.N]<DURATION` or `max<DURATION`, `errors<X%` of dispatched
    /// requests, `achieved>X%` of the intended rate). The verdict is printed and a
    /// broken SLO exits with code 4 (an invalid run's 3 wins). Needs --target.
    #[arg(long)]
    pub slo: Option<String>,

    /// Stop the run when a condition holds for a while, judged on each second's
    /// figures: `errors>5% for 10s`, `p99>200ms for 30s`, `achieved<90% for 5s` (the
    /// --slo metrics, the other way round). Repeatable. The run stops sending at once,
    /// keeps what it measured, says which condition fired and when, and exits with
    /// code 5. Needs --target.
    #[arg(long = "abort-if", value_name = "CONDITION")]
    pub abort_if: Vec<String>,

    /// Print the plain live line on stderr every second (elapsed second, achieved and
    /// intended rate, latency p50 and p99, errors, dispatch lag p99), also on a
    /// terminal. Default: a progress bar when stderr is a terminal, the live line when
    /// it is not (a baseline's steps: the bar, or one line per step).
    #[arg(long, conflicts_with = "quiet")]
    pub progress: bool,

    /// Show nothing on stderr while the run measures: no progress bar, no live line.
    #[arg(long)]
    pub quiet: bool,

    /// Run as shard i of N machines (0-based, like Kubernetes' JOB_COMPLETION_INDEX),
    /// e.g. `2/8`: this machine sends every N-th request of the one global timetable,
    /// so the N shards together send exactly what one machine would have. Connections,
    /// pipeline slots and --connect-rate are split; --source-ip stays per machine.
    /// Needs --start-at when N > 1. Default: 0/1, the whole run.
    #[arg(long)]
    pub shard: Option<String>,

    /// Start the timetable at this wall-clock instant, RFC 3339
    /// (`2025-06-01T12:00:00Z`) or Unix milliseconds: wait for it, then run on the TSC.
    /// Give every shard the same instant. Must lie ahead, by at most 24 h. The report
    /// records the start skew and the clock's sync state. Default: start at once.
    #[arg(long)]
    pub start_at: Option<String>,

    /// Name tying the shards of one run together (letters, digits, `.`, `_`, `-`; at
    /// most 63). Default: derived from --start-at and the plan, so shards started
    /// with the same command line agree on it.
    #[arg(long)]
    pub run_id: Option<String>,

    /// Baseline only: duration of each rate step. Default: 2s.
    #[arg(long, default_value = "2s")]
    pub step_duration: String,

    /// Baseline only: the first rate step, requests per second. Default: 20000.
    #[arg(long, default_value_t = 20_000.0)]
    pub start_rate: f64,

    /// Baseline only: how many times the decisive steps run (the ceiling's step and the
    /// first saturated one above it); the ceiling is the median of its step's runs,
    /// with their range, and called unstable when the runs disagree. Default: 3.
    #[arg(long, default_value_t = 3)]
    pub repeats: u32,
}

#[derive(Args, Debug, Clone)]
pub struct SinkArgs {
    /// Address to listen on, HOST:PORT. Default: 127.0.0.1:9000.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: String,

    /// Serve TLS (rustls) on --listen with --cert and --key: a front that terminates
    /// TLS and relays the plaintext to the sink on a private loopback port (one thread
    /// per connection: for tests and modest loads). TCP only.
    #[arg(long)]
    pub tls: bool,

    /// Serve HTTP/2 (h2c with prior knowledge; h2 with --tls, ALPN `h2`): every
    /// request is answered `200` with --mode's body (echo: the request's body;
    /// fixed:N: N bytes), a gRPC call (`content-type: application/grpc`) with its
    /// messages echoed and `grpc-status: 0`. One thread per connection: for tests and
    /// modest loads. Modes echo and fixed:N only; not with --udp or the faults.
    #[arg(long)]
    pub http2: bool,

    /// With --http2: SETTINGS_MAX_CONCURRENT_STREAMS, the streams a connection may
    /// have open at once (more are refused with REFUSED_STREAM). Default: 256.
    #[arg(long, value_name = "N")]
    pub max_concurrent_streams: Option<u32>,

    /// With --http2: each reply says the sink's own time with its request, from the
    /// read that completed it to the reply's headers (`server-timing: sink;dur=MS`),
    /// for `blaster run --server-time server-timing`. Default: off.
    #[arg(long, requires = "http2")]
    pub server_timing: bool,

    /// With --tls: the server's certificate chain, PEM.
    #[arg(long, value_name = "FILE")]
    pub cert: Option<std::path::PathBuf>,

    /// With --tls: the certificate's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE")]
    pub key: Option<std::path::PathBuf>,

    /// Cores to serve on, one thread per core (SO_REUSEPORT). Default: core 0.
    #[arg(long, default_value = "0")]
    pub cores: String,

    /// `echo` (reply with the bytes received), `discard` (never reply), `fixed:N`
    /// (N bytes per request) or `broadcast` (relay each frame of `--workload frames`
    /// to the sender's room; needs --room-size). Default: echo.
    #[arg(long, default_value = "echo")]
    pub mode: String,

    /// Broadcast: the most members a room holds; a connection (UDP: a source
    /// address) joins the room named by its first frame. Required by --mode
    /// broadcast.
    #[arg(long)]
    pub room_size: Option<usize>,

    /// Broadcast over TCP: the most rooms one connection joins, as many as the
    /// generator's --members-per-connection (a connection joins the room of each
    /// frame's header the first time it names it). Default: 1.
    #[arg(long)]
    pub members_per_connection: Option<usize>,

    /// Broadcast: relay a frame to its sender too (aggregate: the receiver's own
    /// frames are in its downlink frame). Default: off.
    #[arg(long)]
    pub echo_to_sender: bool,

    /// Broadcast: instead of relaying each frame, send each member one downlink frame
    /// of --down-size bytes per server tick (--tick) carrying the room's frames of
    /// that tick. Needs --down-size.
    #[arg(long)]
    pub aggregate: bool,

    /// Aggregate: bytes of each downlink frame; at least the 32-byte header plus 24
    /// bytes per room member.
    #[arg(long)]
    pub down_size: Option<usize>,

    /// Aggregate: the server tick, e.g. `20ms`. Default: 33ms.
    #[arg(long)]
    pub tick: Option<String>,

    /// fixed:N only: request size in bytes, one reply per this many bytes received;
    /// 0 means one reply per read. Default: 0.
    #[arg(long, default_value_t = 0)]
    pub request_size: usize,

    /// Fixed service delay before each reply, e.g. `2ms`. Default: none.
    #[arg(long)]
    pub delay: Option<String>,

    /// A random service delay before each reply instead of a fixed one: `exp:MEAN`,
    /// exponential with mean MEAN (e.g. `exp:200us`), drawn per reply from --seed, so
    /// every percentile of it is known (p = -MEAN ln(1 - q): p50 = 0.693 MEAN, p99 =
    /// 4.61 MEAN). TCP, not in broadcast mode. Default: none.
    #[arg(long, conflicts_with = "delay")]
    pub delay_dist: Option<String>,

    /// Freeze all serving for this long once every --every (first freeze at half of
    /// --every after the first request), e.g. `--stall 1s --every 10s`.
    #[arg(long, requires = "every")]
    pub stall: Option<String>,

    /// Period of --stall.
    #[arg(long, requires = "stall")]
    pub every: Option<String>,

    /// Connections per core: the sink holds at most this times the number of
    /// --cores in total, and closes (and counts) accepts beyond that. Accepted
    /// sockets are io_uring direct descriptors, which use no file descriptor, so this
    /// may exceed `ulimit -n`: each core then runs several rings (one per 85% of
    /// RLIMIT_NOFILE). Default: 16384.
    #[arg(long, default_value_t = 16_384)]
    pub max_connections: usize,

    /// Fault: every T (e.g. `2s`), close every connection the sink holds (the peers
    /// see end of stream); new connections are accepted as usual. Default: never.
    #[arg(long)]
    pub close_every: Option<String>,

    /// Fault: answer this fraction (0..1) of connections with RST instead of a reply
    /// when their first request arrives, chosen per connection by the generator
    /// seeded with --seed. Default: 0.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub reset_ratio: f64,

    /// Accept into ordinary file descriptors instead of io_uring direct descriptors
    /// (then RLIMIT_NOFILE bounds the connections held, and each core runs one ring).
    #[arg(long)]
    pub no_direct_descriptors: bool,

    /// Share --listen's port with sockets already bound to it (SO_REUSEPORT: the
    /// kernel then spreads new connections or datagrams over this sink and them).
    /// Default: off, and a port another socket holds is refused.
    #[arg(long)]
    pub reuse_port: bool,

    /// Stop after this long (default: run until Ctrl-C).
    #[arg(long)]
    pub duration: Option<String>,

    /// Serve UDP instead of TCP: `--mode echo` answers every datagram, `--mode count`
    /// only counts (packets/s, bits/s, loss and reordering from blaster's sequence
    /// numbers, per second and at the end).
    #[arg(long)]
    pub udp: bool,

    /// UDP: drop this fraction of received datagrams (0..1), chosen by the seeded
    /// generator, for loss tests. Default: 0.
    #[arg(long, default_value_t = 0.0)]
    pub drop: f64,

    /// Seed for --drop and --reset-ratio. Default: 1.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Write the sink's counts as JSON to FILE (`-` for stdout) when it stops. TCP:
    /// a FILE is also rewritten every second while the sink runs (replaced
    /// atomically), so a test can read the connections held.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    /// The shards' JSON reports (`blaster run --shard i/N --json FILE`).
    #[arg(required = true, num_args = 1.., value_name = "SHARD.json")]
    pub files: Vec<PathBuf>,

    /// Write the merged report as JSON to FILE (`-` for stdout, which then carries
    /// only JSON); it reads like one run's report, with `fleet.merged` describing the
    /// shards.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write the merged run's charts as one HTML page (as `blaster report --html`).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,

    /// Judge the merged run against an SLO (grammar as `run --slo`): from the added
    /// histograms and counters, never from the shards' own verdicts; a term with no
    /// samples is not met. Exit 4 when broken (3 when the merge is invalid).
    #[arg(long)]
    pub slo: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// Run reports written by `blaster run --json`, of this blaster's schema_version;
    /// up to four, drawn over each other in distinct colours.
    #[arg(required = true, num_args = 1..=4, value_name = "RUN.json")]
    pub runs: Vec<PathBuf>,

    /// Write the charts as one HTML file that opens with no network: latency
    /// percentiles, intended vs achieved rate, the percentile spectrum, dispatch lag
    /// against its gate, errors and generator core load over time.
    #[arg(long, value_name = "FILE", required = true)]
    pub html: PathBuf,
}

#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    /// Concurrent users (streams) of the target load. Required.
    #[arg(long)]
    pub users: Option<u64>,

    /// Messages per second each user sends (e.g. 30 for a 30 fps game tick); also the
    /// rate it receives unless --down-msg-rate. Required.
    #[arg(long)]
    pub msg_rate: Option<f64>,

    /// Messages per second each user receives. Default: --msg-rate.
    #[arg(long)]
    pub down_msg_rate: Option<f64>,

    /// Payload bytes of each message a user sends. Required.
    #[arg(long)]
    pub up_bytes: Option<f64>,

    /// Payload bytes of each message a user receives. Required.
    #[arg(long)]
    pub down_bytes: Option<f64>,

    /// Framing bytes each message adds on the wire. Default: 14.
    #[arg(long, default_value_t = 14.0)]
    pub frame_overhead: f64,

    /// Users (streams) multiplexed on one connection. Default: 1.
    #[arg(long, default_value_t = 1)]
    pub streams_per_conn: u64,

    /// Cores of one generator machine. Required.
    #[arg(long)]
    pub cores: Option<u64>,

    /// NIC speed of one generator machine, Gbit/s. Required.
    #[arg(long)]
    pub nic_gbps: Option<f64>,

    /// Busy CPU per message (encode or decode), ns. Required unless --from or
    /// --from-frames.
    #[arg(long)]
    pub cost_ns_per_msg: Option<f64>,

    /// Take the per-message cost from a blaster baseline JSON (`blaster --json FILE`
    /// with no --target): its busy CPU per request at the ceiling.
    #[arg(long)]
    pub from: Option<PathBuf>,

    /// Take the per-message cost from a frames run's JSON (`blaster run --workload
    /// frames ... --json FILE`): the client's busy CPU per frame sent or received
    /// (`frames.cpu_ns_per_frame`), charged for every message up and down.
    #[arg(long)]
    pub from_frames: Option<PathBuf>,

    /// Syscalls one core makes per second (a send or a receive each). Required.
    #[arg(long)]
    pub syscalls_per_core: Option<f64>,

    /// Share of each generator's cores the plan may use. Default: 0.65.
    #[arg(long, default_value_t = 0.65)]
    pub cpu_watermark: f64,

    /// Share of each generator's NIC speed the plan may use. Default: 0.7.
    #[arg(long, default_value_t = 0.7)]
    pub nic_watermark: f64,

    /// Connections one generator machine can hold. Default: 1048576 (blaster's cap per
    /// run, and what 16 GiB holds at 16 KiB per connection).
    #[arg(long, default_value_t = crate::limits::CONNS_PER_MACHINE_DEFAULT)]
    pub conns_per_machine: u64,

    /// The target of the fleet's command lines, HOST:PORT. Default: `$TARGET`, left for
    /// the shell.
    #[arg(long)]
    pub target: Option<String>,

    /// The run duration in the fleet's command lines. Default: 60s.
    #[arg(long, default_value = "60s")]
    pub duration: String,

    /// Write the plan as JSON to FILE (`-` for stdout, which then carries only JSON).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// `blaster search`: its own flags, then the run flags that apply to every step.
#[derive(Args, Debug, Clone)]
pub struct SearchArgs {
    /// The service level objective every step must meet, e.g. `p99<20ms,errors<0.1%`
    /// (grammar as `run --slo`). Required.
    #[arg(long)]
    pub slo: Option<String>,

    /// First rate step, requests per second (with --workload frames: the first
    /// connection count, a multiple of --room-size). Required.
    #[arg(long)]
    pub start: Option<f64>,

    /// Multiply the rate by this factor from one step to the next (more than 1, at
    /// most 10). Default: 1.5.
    #[arg(long, conflicts_with = "step")]
    pub factor: Option<f64>,

    /// Add this many requests per second (frames: connections, whole rooms) from one
    /// step to the next instead of multiplying by --factor.
    #[arg(long)]
    pub step: Option<f64>,

    /// How long each rate step runs, e.g. `5s` (at least 500ms). Default: 5s.
    #[arg(long, default_value = "5s")]
    pub step_duration: String,

    /// How many times the decisive steps run (the last good one and the first bad one
    /// above it, once the search has converged): the max safe throughput is then the
    /// median of its step's runs, with their range, and the result is called unstable
    /// when the runs of one step disagree. At most 20. Default: 1.
    #[arg(long, default_value_t = 1)]
    pub repeats: u32,

    /// Highest rate to try, requests per second (frames: connections, whole rooms):
    /// the search ends there when the SLO still holds. Default: no limit.
    #[arg(long)]
    pub max: Option<f64>,

    /// Bisect until the last good and the first bad rate are this close, as a share
    /// of the good one, e.g. `5%`. Default: 5%.
    #[arg(long, default_value = "5%")]
    pub precision: String,

    /// Write the search as JSON to FILE (`-` for stdout, which then carries only
    /// JSON); a FILE is rewritten after every step.
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Print the plain live line on stderr every second of every step, instead of
    /// the progress bar a terminal shows (elsewhere: only one line per step).
    #[arg(long, conflicts_with = "quiet")]
    pub progress: bool,

    /// Show no progress bar and no live line while a step runs (the one line per
    /// finished step stays).
    #[arg(long)]
    pub quiet: bool,

    /// The run flags of every step (as `blaster run`).
    /// The link speed of the interface carrying the steps, e.g. `25gbit` (as `run
    /// --link-speed`): a step that breaks the SLO with the link saturated stops the
    /// search as link-bound. Default: what /sys/class/net/IF/speed says.
    #[arg(long)]
    pub link_speed: Option<String>,

    #[command(flatten)]
    pub load: LoadArgs,

    /// The transport and the workload of every step (as `blaster run`); with
    /// `--workload frames` the steps climb the connection count instead of the rate.
    #[command(flatten)]
    pub work: WorkloadArgs,
}

/// Inserts `run` when the first argument is not a subcommand, so `blaster` and
/// `blaster --cores 4-11` mean `blaster run ...`.
pub fn with_default_subcommand(mut args: Vec<String>) -> Vec<String> {
    let first = args.get(1).map(String::as_str);
    let known = matches!(
        first,
        Some(
            "run"
                | "sink"
                | "plan"
                | "preflight"
                | "search"
                | "report"
                | "compare"
                | "merge"
                | "help"
                | "-h"
                | "--help"
                | "-V"
                | "--version"
        )
    );
    if !known {
        args.insert(1, "run".to_string());
    }
    args
}

impl std::ops::Deref for RunArgs {
    type Target = LoadArgs;

    fn deref(&self) -> &LoadArgs {
        &self.load
    }
}

impl std::ops::DerefMut for RunArgs {
    fn deref_mut(&mut self) -> &mut LoadArgs {
        &mut self.load
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn default_subcommand_is_run() {
        let a = |v: &[&str]| with_default_subcommand(v.iter().map(|s| s.to_string()).collect());
        assert_eq!(a(&["blaster"]), ["blaster", "run"]);
        assert_eq!(
            a(&["blaster", "--cores", "1"]),
            ["blaster", "run", "--cores", "1"]
        );
        assert_eq!(a(&["blaster", "sink"]), ["blaster", "sink"]);
        assert_eq!(a(&["blaster", "plan"]), ["blaster", "plan"]);
        assert_eq!(a(&["blaster", "preflight"]), ["blaster", "preflight"]);
        assert_eq!(a(&["blaster", "--help"]), ["blaster", "--help"]);
    }
}
