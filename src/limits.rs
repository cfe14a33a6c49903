//! Every bound blaster enforces, in one place, units last, each with the reason.

/// Connections per run: sockets live in io_uring file tables (several rings per core
/// past RLIMIT_NOFILE), so the bound is memory and ports (`N=1000000
/// bench/connections.sh` holds 1,000,000 here).
pub const CONNECTIONS_MAX: usize = 1_048_576;
/// Default `--conns-per-machine` of `blaster plan`: the per-run cap above, which is
/// also what 16 GiB set aside for sockets holds at 16 KiB per connection (kernel socket
/// with small buffers ~10 KiB, blaster's slot and receive buffer ~4 KiB, headroom).
pub const CONNS_PER_MACHINE_DEFAULT: u64 = CONNECTIONS_MAX as u64;
/// Destinations per run (`--target`, repeated). Each has its own latency histogram in
/// every worker, sized at start (~270 KB each, zero-filled), so the report can tell which
/// server of a pool is slow: 64 targets cost a worker ~17 MB. A pool larger than this
/// belongs behind its own load balancer, or split over shards.
pub const TARGETS_MAX: usize = 64;
/// Requests in flight per connection (`--pipeline`).
pub const PIPELINE_MAX: usize = 1024;
/// Request payload size. Larger payloads are a bulk-transfer test, not a request test.
pub const PAYLOAD_BYTES_MAX: usize = 1 << 20;
/// Expected response size for `fixed:N`.
pub const RESPONSE_BYTES_MAX: usize = 1 << 20;
/// Intended rate, requests per second, per run.
pub const RATE_RPS_MAX: f64 = 100_000_000.0;
/// Run duration: one day is a soak; longer belongs to a scheduler, not a flag.
pub const DURATION_NS_MAX: u64 = 86_400 * 1_000_000_000;
/// Request timeout.
pub const TIMEOUT_NS_MAX: u64 = 3_600 * 1_000_000_000;
/// Highest value a latency histogram records; larger values are clamped (saturating).
pub const HISTOGRAM_NS_MAX: u64 = 3_600 * 1_000_000_000;
/// Significant digits of every histogram: 0.1% value resolution.
pub const HISTOGRAM_SIGFIG: u8 = 3;
/// Seconds the JSON's `intervals[]` keeps one entry each, with its histograms: an hour.
/// Four compressed histograms take 1-10 KB per second (6.6 KB at 20,000 requests/s),
/// so a day-long soak at one entry per second would carry hundreds of megabytes in its
/// JSON (and in memory until the end). Past it, entries are coarser
/// ([`SERIES_ENTRIES_MAX`]); `--hdr-log` streams every second to disk instead.
pub const INTERVAL_HISTOGRAMS_JSON_MAX: usize = 3_600;
/// Entries of the JSON's `intervals[]`, the first hour's per-second ones included:
/// past the hour each entry spans [`SERIES_COARSE_S_MIN`] seconds or a multiple of it,
/// chosen from the run's duration so the series stays under this bound (a day: 3,600
/// entries of a second, then 1,380 of a minute, a few tens of megabytes with their histograms).
pub const SERIES_ENTRIES_MAX: usize = 5_000;
/// Shortest entry past the first hour: a minute, the step of a soak's dashboards.
pub const SERIES_COARSE_S_MIN: u64 = 60;
/// Requests a worker may hold waiting for a free connection slot. Sized from the plan
/// (rate x timeout) and clamped here; a request that finds the backlog full is counted
/// as a `backlog_overflow` error with its latency recorded at the timeout.
pub const BACKLOG_REQUESTS_MAX: usize = 8 << 20;
/// Submission queue entries per worker ring; a fuller queue is submitted and refilled.
pub const RING_ENTRIES_MAX: u32 = 4096;
/// Completions drained per loop iteration before they are handled.
pub const CQE_BATCH_MAX: usize = 1024;
/// Rounds of "submit, then move the waiting completions into the ring's stash" one
/// push may take while the submission queue stays full, before it fails with
/// `PushError::Full` (which ends the run with one line). On the 5.11-5.18 kernels
/// io_uring_enter refuses every submission (EBUSY) while completions wait for room in
/// the completion queue; each round empties the completion queue into the stash (as
/// large as the completion queue), so two rounds are enough unless the stash is full
/// or the kernel is out of request memory (EAGAIN). 64 syscalls are a few hundred
/// microseconds: a ring that makes no progress in them will not make any, and before
/// this bound the worker spun forever.
pub const PUSH_ROUNDS_MAX: u32 = 64;
/// Snapshots per worker the channel to the collector holds (`engine::driver::
/// snapshot_channel`): a bounded channel is one array allocated at start, where an
/// unbounded one allocated a block every 31 snapshots on the sending worker. A worker
/// that finds it full waits (a snapshot is never dropped: its histograms are the
/// run's). A collector that far behind has long been counted: past
/// `HISTOGRAM_SPARES` (1) interval every boundary allocates a histogram set, so a
/// full channel means at least 7 counted in `workers[].histogram_allocations`, and the
/// wait itself shows in dispatch lag.
pub const SNAPSHOTS_QUEUED_PER_WORKER: usize = 8;
/// Resident bytes of the TCP worker's table per held connection (its `Conn` and its
/// entries in the watch list and ready queue; request slots and backlog room are
/// resident only once used): with a worker's fixed ~3.5 MB (one histogram set, the
/// ring) spread over 18,000 connections a ring (the 20,000-descriptor limit), this
/// keeps `bench/connections.sh` under 400 B per connection (issue 22).
pub const HELD_CONNECTION_BYTES_MAX: usize = 160;
/// Receive buffer per connection (holds several pipelined responses).
pub const RECV_BUFFER_BYTES_MAX: usize = 256 << 10;
/// `--http2`: each connection's receive buffer, frames rather than responses: a whole
/// frame of the largest size the client accepts (16 KiB + 9 bytes) kept while the rest
/// arrives, and room after it.
pub const HTTP2_RECV_BUFFER_BYTES: usize = 32 << 10;
/// Longest HTTP/2 request body: a body file or gRPC message ([`PAYLOAD_BYTES_MAX`])
/// with the 5-byte gRPC prefix. Kept once per request entry and sent in DATA frames as
/// the windows allow, so it costs memory once, not per stream. A body with
/// placeholders is rendered per request; what its first DATA frame (16 KiB) does not
/// carry is kept in the request's slot ([`HTTP2_TAILS_BYTES_MAX`]).
pub const HTTP2_BODY_BYTES_MAX: usize = PAYLOAD_BYTES_MAX + 5;
/// `--http2` with a body with placeholders longer than one DATA frame: the most a
/// worker's request slots (connections x streams x the longest request) may keep of
/// the rendered bodies until the send windows let them go: 128 MiB.
pub const HTTP2_TAILS_BYTES_MAX: usize = 128 << 20;
/// Default of `--spin`: the worker sleeps until this long before the next due send and
/// spins on the TSC for the rest. Timer wake-ups on the reference VM arrive 60-70 us
/// late on a quiet host and milliseconds late on a busy one (waking a halted vCPU);
/// a spinning vCPU stays scheduled, so 2 ms keeps dispatch lag p99 in microseconds
/// at any rate above 500 requests/s, at the price of a busy worker core.
pub const SPIN_NS: u64 = 2_000_000;
/// CPU one sleep in the ring is taken to cost against spinning (arming the timeout,
/// the context switch, on a VM the exit for the timer): `--spin auto` spins only waits
/// shorter than this. An order of magnitude, not a measurement: no bench here times
/// one sleep; `bench/pacing.sh` measures what the whole policy costs per request.
pub const SLEEP_CPU_NS: u64 = 10_000;
/// The timer lateness `--spin auto` assumes before it has measured any: wake-ups from
/// the ring's timeouts arrive 60-70 us late on the project's VM, less on bare metal.
pub const TIMER_LATE_NS_INITIAL: u64 = 50_000;
/// The timer lateness's 99.5th percentile a resolution window assumes before it has
/// measured any (the VM's tail reaches 150-250 us): on the safe side, so the first
/// windows are shorter rather than late; the estimate settles within a second or two.
pub const TIMER_LATE_TAIL_NS_INITIAL: u64 = 200_000;
/// A `--resolution` finer than this is finer than any timer wake-up gives (they end
/// tens of microseconds late on a quiet host): `--spin auto` then spins before each
/// send instead of sleeping.
pub const FINE_RESOLUTION_NS: u64 = 100_000;
/// Default `--resolution`: where sends are due closer together than this, the wake-up
/// for a due send lands by this long after its instant (the timer aimed early by its
/// lateness) and sends everything due by then; where they are further apart, each
/// wake-up is aimed at its send's own instant. The dispatch lag p99 then stays within
/// about 150 us on an idle host at every rate (issue 33: the earlier 500 us added some
/// 350 us of the generator's own delay to every latency at 2,000/s, and batched sends
/// past the pacing check above 2,500/s). Its price, measured on the project's VM
/// (`RATES="100 1000 2000 5000 20000" MODES="default auto500" DUR=6 RUNS=3
/// bench/pacing.sh`): 1.18x oha's CPU per request at 2,000/s and 1.65x at 20,000/s
/// (500 us: 1.13x and 0.77x), for a lag p99 of 116 and 97 us (500 us: 154 and 473 us).
pub const RESOLUTION_NS: u64 = 100_000;
/// A worker whose sends are due at least this far apart (1,000/s or less) has
/// `--spin auto` aim each wake-up early by the timer's lateness p99.5 (at most a quarter
/// of the gap) and spin the rest: the timer's tail (`workers[].timer_late_p995_ns`
/// 160-260 us on this VM after sleeps of 1-10 ms) would otherwise be the dispatch lag
/// p99, and at these rates the spinning costs at most a quarter of the core.
pub const LOW_RATE_GAP_NS: u64 = 1_000_000;
/// Coarsest `--resolution`: dispatch lag up to this much is the price asked for.
pub const RESOLUTION_NS_MAX: u64 = 100_000_000;
/// Longest `--spin`.
pub const SPIN_NS_MAX: u64 = 1_000_000_000;
/// Longest single sleep in the worker loop, so stop requests and timeouts are noticed.
pub const WAIT_NS_MAX: u64 = 10_000_000;
/// Time allowed for in-flight requests to complete after the schedule ends or Ctrl-C.
pub const DRAIN_NS_MAX: u64 = 2_000_000_000;
/// File descriptors kept free for the process itself (rings, stdio, listeners, the
/// `/metrics` connections of [`METRICS_CONNECTIONS_MAX`]).
pub const FD_MARGIN: u64 = 64;
/// Fewest sockets one ring's file table must hold before blaster splits a core's
/// connections over more rings rather than refuse: below it the descriptor limit was
/// lowered on purpose and is reported as the wall it is.
pub const RING_FILES_MIN: u64 = 1024;
/// Most rings (worker threads) per core.
pub const RINGS_PER_CORE_MAX: u64 = 64;
/// Length of a report interval (the live line, `intervals[]`).
pub const INTERVAL_NS: u64 = 1_000_000_000;
/// Bootstrap resamples behind every confidence interval (`metrics::ci`): at a 95%
/// level the ends are the 10th lowest and highest of 400 estimates, steady to a few
/// tenths of a percent of the estimate, and 400 merges of at most [`CI_BLOCKS_MAX`]
/// sparse histograms take milliseconds once, at report time.
pub const CI_RESAMPLES: usize = 400;
/// Fewest resampling units (intervals, or blocks of them) an interval is given from:
/// below five, the resamples are too few distinct runs to say anything about spread.
pub const CI_UNITS_MIN: usize = 5;
/// Most resampling units: a long run's seconds are grouped into at most this many
/// blocks of consecutive seconds, which keeps the bootstrap cheap and absorbs
/// correlation between neighbouring seconds (a batch-means block).
pub const CI_BLOCKS_MAX: usize = 50;
/// Fewest samples beyond a quantile for its interval: p99 needs 1,000 samples, p99.99
/// 100,000. With fewer, the tail is a handful of values and no resampling resolves it.
pub const CI_TAIL_SAMPLES_MIN: u64 = 10;
/// Connects one core keeps pending at once (split over its rings): a larger storm
/// overflows the target's
/// SYN queue, and the dropped SYNs come back as 1 s retransmits that measure the
/// storm, not the target.
pub const CONNECTS_IN_FLIGHT_MAX: usize = 512;
/// io-wq helper threads per worker thread, `[bounded, unbounded]`
/// (`IORING_REGISTER_IOWQ_MAX_WORKERS`). Bounded workers serve regular files and
/// block devices, which blaster never reads on the hot path; unbounded ones serve
/// socket operations that could neither complete inline nor wait on a poll, which with
/// fast poll (required: kernel 5.11+) and no `IOSQE_ASYNC` is rare. They are confined to
/// the worker's own core, where a second one could only take turns with the first and
/// with the worker: one of each keeps the rare fallback working without letting a burst
/// of punted operations fill the core with threads.
pub const IOWQ_WORKERS_MAX: [u32; 2] = [1, 1];
/// Machine shards per run (`--shard i/N`): 10,000 generator machines is far beyond any
/// fleet blaster's planner sizes, and `blaster merge` reads one file per shard.
pub const SHARDS_MAX: usize = 10_000;
/// How far ahead `--start-at` may be: a start a day away is a typo or a scheduler's
/// job, and a shard waiting that long is indistinguishable from a hung one.
pub const START_AHEAD_NS_MAX: u64 = 86_400 * 1_000_000_000;

/// Shortest `--tick`: below a millisecond a frame per tick per connection is a
/// request stream, not a frame rhythm, and timer wake-ups are tens of microseconds late.
pub const TICK_NS_MIN: u64 = 1_000_000;
/// Longest `--tick`: beyond 10 s nothing ticks.
pub const TICK_NS_MAX: u64 = 10_000_000_000;
/// Shares of a sink ring's receive-buffer pool: an echo connection whose replies are
/// not read (its peer never reads, or reads slowly) holds at most 1/8 of the pool
/// (32 of 256 buffers, 512 KiB) before its receive stops until its sends drain, so a
/// peer that never reads cannot take the buffers every other connection receives into.
/// 512 KiB in flight is more than a loopback socket's default send buffer, so a peer
/// that does read is never slowed by it.
pub const SINK_RECV_POOL_SHARES: usize = 8;
/// Bytes of an HTTP request head the `--metrics-listen` server reads: a scraper's
/// `GET /metrics` is a few hundred bytes; anything longer is not a scrape.
pub const METRICS_REQUEST_BYTES_MAX: usize = 8 * 1024;
/// How long a `/metrics` client has to take its answer once the server starts writing
/// it; one that reads slower is closed. Other connections are served meanwhile.
pub const METRICS_IO_TIMEOUT_MS: u64 = 2_000;
/// How long a `/metrics` connection may take to send a whole request head (from its
/// accept, or from the previous answer when requests were pipelined) before it is
/// closed: a scraper sends its request at once.
pub const METRICS_HEADER_TIMEOUT_MS: u64 = 1_000;
/// `/metrics` connections served at once. Each holds a descriptor the run's
/// descriptor budget keeps aside (`FD_MARGIN`) and a request buffer; a scraper fleet
/// is a few Prometheus servers. When all are taken, a new connection replaces the one
/// that has waited longest for its request, so silent clients cannot lock scrapers out.
pub const METRICS_CONNECTIONS_MAX: usize = 16;
/// `--metrics-linger`: waiting longer than ten minutes for a last scrape means no
/// scraper is coming (Prometheus scrapes every 15 s to 1 min).
pub const METRICS_LINGER_NS_MAX: u64 = 600 * 1_000_000_000;
/// Symbolic links followed to find where an output really goes: the kernel's own bound
/// (MAXSYMLINKS), past which a path is a loop.
pub const OUTPUT_LINK_HOPS_MAX: usize = 40;
/// Output temporaries open at once. A command has at most a handful of outputs (run: the
/// JSON and three exports; a search: its JSON and the step being rewritten); the table
/// a signal handler sweeps must be fixed-size, since it cannot allocate or lock.
pub const OUTPUT_TEMPORARIES_MAX: usize = 32;

/// Bytes of a report file read back (`merge`, `compare`, `report`, `plan --from` and
/// `--from-frames`): a day-long run's JSON, with its 86,400 interval rows and an hour of
/// per-second histograms (3,600 x four of up to 10 KB), is about 100 MB. A larger file
/// is not a blaster report, and reading it whole would only exhaust memory.
pub const REPORT_FILE_BYTES_MAX: u64 = 256 << 20;
/// Bytes of a `--mix` file: its 64 entries with requests of up to
/// [`PAYLOAD_BYTES_MAX`] written raw.
pub const MIX_FILE_BYTES_MAX: u64 = 64 << 20;
/// A feeder file (`{line:FILE}`, `{csv:FILE:COLUMN}`): held in memory once per
/// placeholder for the run.
pub const FEED_FILE_BYTES_MAX: u64 = 256 << 20;
/// Bytes of a PEM file (`--tls-ca`, the sink's `--cert` and `--key`): a system CA
/// bundle is about 200 KiB; anything past 1 MiB is not a certificate file.
pub const PEM_FILE_BYTES_MAX: u64 = 1 << 20;
/// Ciphertext a TLS connection's send buffer holds per plaintext record: the record
/// header (5), TLS 1.2's explicit nonce (8) and the AEAD tag (16), rounded up; what
/// does not fit goes out with the next send.
pub const TLS_RECORD_OVERHEAD_BYTES: usize = 64;
/// TLS receive buffer per connection: the largest record TLS allows (header 5,
/// ciphertext 2^14 + 2048), which must arrive whole before it can be opened; also
/// the largest handshake message accepted from a server.
pub const TLS_RECV_BUFFER_BYTES: usize = 5 + (1 << 14) + 2048;
/// Smallest TLS send buffer per connection: a ClientHello with its key shares fits.
pub const TLS_SEND_BUFFER_BYTES_MIN: usize = 2048;
/// Connections of the TLS baseline (`blaster --tls`, no target): the built-in sink's
/// TLS front runs a thread per connection (blocking rustls, a 16 KiB buffer and a
/// stack each), which stays reasonable to a few hundred on the sink's cores; the
/// plain baseline's thousands of connections are the io_uring sink's, not the front's.
pub const TLS_BASELINE_CONNECTIONS_MAX: usize = 256;
/// Bytes of a `--rate file:` table: its most rows (2^20, `SHAPE_PIECES_MAX`) of
/// `time_s,rate` at up to 64 bytes each.
pub const RATE_FILE_BYTES_MAX: u64 = 64 << 20;
/// Bytes an embedded histogram decompresses to (the V2 header and its counts):
/// blaster's own (1 ns to 1 h, 3 significant digits: 33,792 counts of at most 9 bytes)
/// take at most 300 KiB. The bound is checked while inflating, so a deflate bomb stops
/// here instead of filling memory.
pub const HISTOGRAM_DECODED_BYTES_MAX: usize = 1 << 20;
/// Counts (8 bytes each) the header of an embedded histogram may make the decoder
/// allocate: blaster's own have 33,792; 2^20 admits 4 significant digits over the whole
/// u64 range, and refuses a header asking for 50 MB (5 digits over the u64 range).
pub const HISTOGRAM_COUNTS_MAX: u64 = 1 << 20;

/// `blaster plan --users`: a hundred times the people on Earth; more is a typo.
pub const PLAN_USERS_MAX: u64 = 1_000_000_000_000;
/// Least `--syscalls-per-core` of `blaster plan`: a core makes hundreds of thousands of
/// syscalls a second; below a thousand the figure is a unit mistake, and it would size
/// an astronomical fleet.
pub const PLAN_SYSCALLS_PER_CORE_MIN: f64 = 1_000.0;
/// Least `--cpu-watermark` and `--nic-watermark`: a plan using under 1% of each machine
/// is a unit mistake (0.65 means 65%), not a plan.
pub const PLAN_WATERMARK_MIN: f64 = 0.01;
/// Least `--nic-gbps`: 1 Mbit/s.
pub const PLAN_NIC_GBPS_MIN: f64 = 0.001;
/// Most generator machines `blaster plan` sizes: a larger answer comes from a unit
/// mistake, and counts far past it stop being exact in the arithmetic (f64).
pub const PLAN_GENERATORS_MAX: u64 = 1_000_000_000;
/// Shard command lines a plan lists one by one (text and JSON); a larger fleet gets
/// one command with `$SHARD` for the index, so the output does not grow with the fleet.
pub const PLAN_SHARD_COMMANDS_LISTED_MAX: u64 = 8;

/// Most `--members-per-connection`: a connection's tick is one write of M frames and
/// its send region holds 4 ticks of them; seed 000's example multiplexes 100.
pub const MEMBERS_PER_CONNECTION_MAX: usize = 1024;

/// Most runs of one decisive step (`--repeats`): each is a step's duration, so 20
/// already makes a baseline of minutes.
pub const REPEATS_MAX: u32 = 20;

/// Most `--expect` assertions in one run: each has its own failure count in every
/// worker's tally and the report; a handful says what a reply must be.
pub const EXPECT_MAX: usize = 8;
/// Longest `--expect contains:TEXT`, bytes: a marker in a body, not a body.
pub const EXPECT_TEXT_BYTES_MAX: usize = 4096;
/// Largest compiled `--expect regex:RE` program (the regex crate's `size_limit`): a
/// pattern past it is a mistake (`a{99999999}`), refused before any traffic rather than
/// built for seconds and megabytes.
pub const EXPECT_REGEX_BYTES_MAX: usize = 1 << 20;
/// Largest lazy-DFA cache of one `--expect regex:` in one worker (`dfa_size_limit`):
/// bounds the memory each worker's copy may grow to; past it the regex crate falls back
/// to a slower engine, it never fails.
pub const EXPECT_DFA_BYTES_MAX: usize = 2 << 20;
/// `--expect` body assertions over HTTP/2: the bytes of each stream's response body
/// kept for them (a longer body is counted unchecked, not passed).
pub const EXPECT_H2_BODY_BYTES: usize = 4096;
/// ... and the most all of a worker's streams may keep (connections x streams x
/// [`EXPECT_H2_BODY_BYTES`]): 128 MiB, 32,768 streams in flight.
pub const EXPECT_H2_KEPT_BYTES_MAX: usize = 128 << 20;
