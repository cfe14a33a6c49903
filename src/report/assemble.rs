//! Report assembly: turns what the collector gathered (merged histograms, counters,
//! per-interval rows, each worker's totals) and what the connect phase established into
//! the [`Report`], and judges it: the validity gate's reasons and the diagnoses, typed
//! ([`Diagnosis`]), with the numbers that support them.

use super::{
    Bytes, Config, Connections, HostReport, HttpReport, Interval, Memory, MixEntryReport,
    Percentiles, Rate, Report, Requests, SCHEMA_VERSION, TargetReport, UdpReport, WindowsMemory,
    WorkerReport,
};
use crate::diagnosis::Diagnosis;
use crate::engine::Transport;
use crate::engine::pacing::Usage;
use crate::engine::recorder::WorkerTotals;
use crate::metrics::host::{
    CORE_BUSY_WATERMARK, HostInterval, LINK_SATURATED, OTHER_LOAD_WARN, STEAL_WARN, read_link_speed,
};
use crate::metrics::kernel::{ConntrackFill, KernelCounters};
use crate::metrics::{Counters, ErrorKind, Gate, Histograms};
use crate::report::hdr::Encoded4;
use crate::run_plan::RunPlan;
use std::net::SocketAddr;

/// Shortest schedule the busy-worker gate judges (startup noise dominates below).
const BUSY_WINDOW_MIN_NS: u64 = 500_000_000;

/// Delay between "all connected" and the schedule's time zero, so every worker is
/// spinning on the TSC before its first due instant.
/// The run's host figures: the busiest generator core and the interface's traffic.
/// The host figures from every second's busiest values (`peak`, see
/// [`super::series::Series::peak`]).
pub fn host_report(peak: &Load, iface: Option<String>, link_bps: Option<u64>) -> HostReport {
    HostReport {
        max_core_load: peak.core_load,
        max_worker_busy: peak.worker_busy,
        max_other_load: peak.other_load,
        max_other_load_core: peak.other_load_core.filter(|_| peak.other_load > 0.0),
        other_load_warn_at: OTHER_LOAD_WARN,
        max_steal: peak.steal,
        steal_warn_at: STEAL_WARN,
        iface,
        link_speed_bps: link_bps,
        tx_bps_max: peak.tx_bps,
        rx_bps_max: peak.rx_bps,
        link_utilization_max: link_bps.map(|l| peak.tx_bps.max(peak.rx_bps) / l as f64),
        drops: peak.drops,
        kernel: super::KernelReport {
            counters: peak.kernel,
            conntrack_count_max: peak.conntrack.count_max,
            conntrack_max: peak.conntrack.max,
        },
        core_busy_watermark: CORE_BUSY_WATERMARK,
        link_saturated_at: LINK_SATURATED,
    }
}

/// What the connect phase established, before the schedule started.
pub struct Setup {
    /// io_uring features of the first worker's ring.
    pub features: Vec<&'static str>,
    pub established: u64,
    pub establish_ns: u64,
    pub rss_growth: u64,
    /// The largest resident set sampled while the schedule ran less the resident set
    /// before the workers started (0: none sampled).
    pub held_rss_growth: u64,
    pub first_errno: Option<i32>,
    /// The wall the first failed connect points at, with the numbers and the fix.
    pub wall: Option<String>,
    /// Names of the errnos in the connect-failure counters, `other` last.
    pub errno_names: Vec<String>,
    /// Connection per request about to run out of ports in TIME_WAIT.
    pub time_wait: Option<Diagnosis>,
}

/// Everything the collector gathered.
pub struct Collected {
    pub total: Histograms,
    pub counters: Counters,
    /// The JSON's `intervals[]`, filled as intervals complete: one row per second for
    /// the first hour, coarser after (see [`super::series`]).
    pub series: super::series::Series,
    pub totals: Vec<WorkerTotals>,
    /// The interface that carried the run, when known.
    pub iface: Option<String>,
    /// The largest resident set sampled while the schedule ran (at each interval
    /// snapshot a worker sent before its last), bytes; 0 with no such snapshot.
    pub rss_held_max: u64,
    /// The `--abort-if` condition that stopped the run, if one did.
    pub abort: Option<super::AbortReport>,
    /// `--replay`: why the reader stopped before the recording's end, if it did.
    pub replay_stopped: Option<String>,
}

/// An interval reduced to the figures the report keeps, so a day-long run holds a few
/// numbers and a few compressed kilobytes per second rather than four full histograms
/// per second.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// The seconds it spans: `start_s .. start_s + len_s` of the schedule (one second
    /// as the collector completes it; more once merged, see [`super::series`]).
    pub start_s: u64,
    pub len_s: u64,
    pub completed: u64,
    pub errors: u64,
    pub reconnects: u64,
    pub latency: Percentiles,
    pub lag_p99: u64,
    /// Frames: the interval's frame counts and arrival-deviation percentiles.
    pub frames: Option<(crate::engine::recorder::FrameCounters, Percentiles)>,
    pub load: Load,
    /// The interval's histograms, encoded for the JSON (the first
    /// [`crate::limits::INTERVAL_HISTOGRAMS_JSON_MAX`] seconds, then every merged entry).
    pub histograms: Option<Encoded4>,
}

/// What turning a [`Row`] into the report's [`Interval`] needs beside it: the collector
/// does it as each interval completes (for the exporters), [`build`] for the report.
pub struct IntervalShape<'a> {
    pub plan: &'a RunPlan,
    pub rate_rps: f64,
    pub link_bps: Option<u64>,
}

impl IntervalShape<'_> {
    /// The report's entries for `rows` (see [`Self::interval`]).
    pub fn intervals(&self, rows: &[Row], stopped_ns: u64) -> Vec<Interval> {
        rows.iter().map(|r| self.interval(r, stopped_ns)).collect()
    }

    /// The report's entry for `row`; `stopped_ns` is when the schedule stopped
    /// (`u64::MAX` while some worker still runs): the last interval ends there, its
    /// drain folded in.
    pub fn interval(&self, row: &Row, stopped_ns: u64) -> Interval {
        let (start, end) = self.bounds(row.start_s, row.len_s, stopped_ns);
        let len_s = (end - start) as f64 / 1e9;
        Interval {
            second: row.start_s,
            duration_s: len_s,
            intended_rps: self.span_rps(row.start_s, row.len_s, stopped_ns),
            achieved_rps: row.completed as f64 / len_s,
            latency_p50_ns: row.latency.p50,
            latency_p90_ns: row.latency.p90,
            latency_p99_ns: row.latency.p99,
            latency_p999_ns: row.latency.p999,
            latency_max_ns: row.latency.max,
            dispatch_lag_p99_ns: row.lag_p99,
            errors: row.errors,
            reconnects: row.reconnects,
            core_load: row.load.core_load,
            worker_busy: row.load.worker_busy,
            other_load: row.load.other_load,
            other_load_core: row.load.other_load_core,
            steal: row.load.steal,
            tx_bps: row.load.tx_bps,
            rx_bps: row.load.rx_bps,
            tx_pps: row.load.tx_pps,
            rx_pps: row.load.rx_pps,
            link_utilization: self
                .link_bps
                .map(|l| row.load.tx_bps.max(row.load.rx_bps) / l as f64),
            drops: row.load.drops,
            kernel: Some(row.load.kernel),
            frames: row
                .frames
                .map(|(c, dev)| super::frames::FrameInterval::of(&c, &dev, len_s)),
            histograms: row.histograms.clone(),
        }
    }
}

impl IntervalShape<'_> {
    /// The start and end of seconds `start_s .. start_s + len_s`, ns since time zero
    /// (second 0 starts when the warm-up ends).
    fn bounds(&self, start_s: u64, len_s: u64, stopped_ns: u64) -> (u64, u64) {
        let start = start_s
            .saturating_mul(1_000_000_000)
            .saturating_add(self.plan.warmup_ns);
        let end = start.saturating_add(len_s.max(1).saturating_mul(1_000_000_000));
        (start, end.min(stopped_ns.max(start + 1)))
    }

    /// The rate second `i` intends: a shape's own rate for that very second, else the
    /// run's.
    pub fn intended_rps(&self, i: usize, stopped_ns: u64) -> f64 {
        self.span_rps(i as u64, 1, stopped_ns)
    }

    /// The rate a span of seconds intends (a shape's mean over it).
    fn span_rps(&self, start_s: u64, len_s: u64, stopped_ns: u64) -> f64 {
        let (start, end) = self.bounds(start_s, len_s, stopped_ns);
        match &self.plan.shape {
            Some(s) if s.constant_rps().is_none() => {
                s.expected_between(start as f64, end as f64)
                    / ((end - start) as f64 / 1e9)
                    / f64::from(self.plan.fleet.shard.count())
            }
            _ => self.rate_rps,
        }
    }
}

/// The link speed of the run's interface: `--link-speed`, else what sysfs says.
pub fn link_bps(plan: &RunPlan, iface: Option<&str>) -> Option<u64> {
    plan.link_speed_bps
        .or_else(|| iface.and_then(|i| read_link_speed(std::path::Path::new("/"), i)))
}

/// When the schedule stopped, from every worker's totals: the configured end, or
/// Ctrl-C.
pub fn stopped_ns(totals: &[WorkerTotals], duration_ns: u64) -> u64 {
    totals
        .iter()
        .map(|t| t.stopped_ns)
        .max()
        .unwrap_or(duration_ns)
        .min(duration_ns)
        .max(1)
}

/// How loaded the generator's cores and the interface were in one interval.
#[derive(Debug, Clone, Copy, Default)]
pub struct Load {
    /// Busiest core as /proc/stat counts it, minus the workers' own spinning there (a
    /// worker spinning for a due instant looks 100% busy to /proc/stat).
    pub core_load: f64,
    /// Busiest core as the workers measure themselves: CPU minus spin, over the interval.
    pub worker_busy: f64,
    /// Busiest core's time taken by anything but the workers (other processes, IRQs).
    pub other_load: f64,
    /// The generator core `other_load` was found on.
    pub other_load_core: Option<usize>,
    /// Largest share of a generator core the hypervisor took (steal).
    pub steal: f64,
    pub tx_bps: f64,
    pub rx_bps: f64,
    pub tx_pps: f64,
    pub rx_pps: f64,
    pub drops: u64,
    /// The kernel's drop counters' growth (summed when intervals are combined).
    pub kernel: KernelCounters,
    /// Conntrack's fill: the highest count at an interval's end, and the max.
    pub conntrack: ConntrackFill,
}

impl Load {
    /// Adds `o`'s kernel counters and keeps conntrack's highest fill: the same for a
    /// merged series entry and for the run's peak.
    pub fn add_kernel(&mut self, o: &Load) {
        self.kernel = self.kernel.plus(o.kernel);
        self.conntrack.count_max = self.conntrack.count_max.max(o.conntrack.count_max);
        self.conntrack.max = o.conntrack.max.or(self.conntrack.max);
    }

    /// Keeps the larger of each figure, drops summed: the run's busiest seconds.
    pub fn peak(&mut self, o: &Load) {
        self.core_load = self.core_load.max(o.core_load);
        self.worker_busy = self.worker_busy.max(o.worker_busy);
        if o.other_load > self.other_load {
            self.other_load_core = o.other_load_core;
        }
        self.other_load = self.other_load.max(o.other_load);
        self.steal = self.steal.max(o.steal);
        self.tx_bps = self.tx_bps.max(o.tx_bps);
        self.rx_bps = self.rx_bps.max(o.rx_bps);
        self.tx_pps = self.tx_pps.max(o.tx_pps);
        self.rx_pps = self.rx_pps.max(o.rx_pps);
        self.drops += o.drops;
        self.add_kernel(o);
    }

    /// Reduces one interval: the workers' own usage (per worker, with its core) and what
    /// the host saw.
    pub fn of(usage: &[(usize, Usage)], host: &HostInterval) -> Load {
        // Per core: the workers' CPU share, and the share of wall time they worked
        // (neither spinning nor asleep) -- their own, TSC-measured figure.
        let mut per_core: std::collections::BTreeMap<usize, (f64, f64)> = Default::default();
        for &(core, u) in usage {
            let len = u.wall_ns.max(1) as f64;
            let e = per_core.entry(core).or_default();
            e.0 += u.cpu_ns as f64 / len;
            e.1 += (len - (u.spin_ns + u.sleep_ns) as f64).max(0.0) / len;
        }
        let worker_busy = per_core.values().map(|v| v.1.min(1.0)).fold(0.0, f64::max);
        // /proc/stat counts a spinning worker as busy: replace the workers' CPU share
        // with the part of it that was work, keeping everything else on the core.
        let core_load = host
            .core_busy
            .iter()
            .map(|&(c, busy)| {
                let (cpu, work) = per_core.get(&c).copied().unwrap_or_default();
                (busy - cpu + work.min(cpu)).clamp(0.0, 1.0)
            })
            .fold(0.0, f64::max);
        // The generator's other threads on the core (io-wq helpers, an in-process
        // sink) are its own load too, not another process's.
        let helpers = |c: usize| {
            host.core_helpers
                .iter()
                .find(|h| h.0 == c)
                .map_or(0.0, |h| h.1)
        };
        let (other_load_core, other_load) = host
            .core_busy
            .iter()
            .map(|&(c, busy)| {
                let own = per_core.get(&c).map_or(0.0, |v| v.0) + helpers(c);
                let other = (busy - own).clamp(0.0, 1.0);
                (Some(c), other)
            })
            .fold((None, 0.0), |best, x| if x.1 > best.1 { x } else { best });
        let steal = host.core_steal.iter().map(|&(_, s)| s).fold(0.0, f64::max);
        Load {
            core_load,
            worker_busy,
            other_load,
            other_load_core,
            steal,
            tx_bps: host.tx_bps,
            rx_bps: host.rx_bps,
            tx_pps: host.tx_pps,
            rx_pps: host.rx_pps,
            drops: host.drops,
            kernel: host.kernel,
            conntrack: ConntrackFill {
                count_max: host.conntrack.map(|c| c.0),
                max: host.conntrack.map(|c| c.1),
            },
        }
    }
}

/// The report of one run.
#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename them
pub fn build(
    plan: &RunPlan,
    target: SocketAddr,
    rate_rps: f64,
    duration_ns: u64,
    c: Collected,
    setup: Setup,
    interrupted: bool,
) -> Report {
    let Timing {
        stopped_ns,
        recorded_ns,
        secs,
        elapsed,
    } = Timing::of(plan, &c.totals, duration_ns);
    let verdict = judge(plan, &c, rate_rps, recorded_ns);
    let link_bps = link_bps(plan, c.iface.as_deref());
    let shape = IntervalShape {
        plan,
        rate_rps,
        link_bps,
    };
    let host = host_report(c.series.peak(), c.iface.clone(), link_bps);
    let workers: Vec<WorkerReport> = c.totals.iter().map(worker_report).collect();
    let pacing_ctx = pacing_context(plan, &host, &workers);
    let intervals_resolution = c.series.resolution();
    let rows = c.series.finish();
    let intervals = shape.intervals(&rows, stopped_ns);
    let ctr = &c.counters;
    let latency = Percentiles::of(&c.total.latency);
    let service = Percentiles::of(&c.total.service);
    let wait = Percentiles::of(&c.total.connection_wait);
    let mut diagnosis: Vec<Diagnosis> = setup.time_wait.clone().into_iter().collect();
    diagnosis.extend(host.warnings());
    diagnosis.extend(diagnose_waits(
        plan, rate_rps, ctr, &latency, &service, &wait,
    ));
    let blast = plan.transport == Transport::UdpBlast;
    let udp = udp_report(plan, ctr, &c.totals, secs, elapsed);
    let replies = reply_tally(&c.totals);
    diagnosis.extend(diagnose_error_replies(ctr, &replies, &plan.error_status));
    diagnosis.extend(diagnose_resumption(plan, ctr));
    let http = http_report(plan, ctr, &replies);
    let achieved_rps = achieved_rps(blast, udp.as_ref(), ctr, elapsed);
    let features = ring_features(&setup.features, &c.totals);
    let (run_ci, [latency_ci, service_ci, lag_ci, wait_ci]) = confidence(
        plan,
        &rows,
        &intervals,
        &c.total,
        achieved_rps,
        ctr.request_errors(),
        ctr.completed,
    );
    let with = |p: Percentiles, ci| super::Summary { p, ci };
    let first_protocol_error = c.totals.iter().find_map(|t| t.first_protocol_error.clone());
    // Each destination's figures: the counters, the histograms, each worker's totals.
    let sums = (ctr, &c.total, c.totals.as_slice());
    Report {
        schema_version: SCHEMA_VERSION,
        valid: verdict.valid,
        invalid_reasons: verdict.reasons,
        target: target.to_string(),
        protocol: protocol(plan.transport),
        seed: plan.seed,
        framer: framer(plan),
        config: config(plan, duration_ns),
        duration_s: secs,
        elapsed_s: elapsed,
        rate: Rate {
            intended_rps: rate_rps,
            achieved_rps,
            sent_rps: ctr.sent as f64 / if blast { secs } else { elapsed },
        },
        requests: requests(ctr),
        error_replies: ctr.errors_of(ErrorKind::ErrorReply),
        error_replies_by_kind: error_replies_by_kind(&replies),
        error_latency_ns: Percentiles::of(&c.total.error_latency),
        bytes: Bytes {
            sent: ctr.bytes_sent,
            received: ctr.bytes_received,
        },
        errors_by_kind: Report::errors_map(ctr),
        connections: connections(plan, ctr, &setup, &c.total),
        connect_time_ns: Percentiles::of(&c.total.connect),
        host,
        memory: memory(plan, &setup),
        mode: mode(plan),
        latency_ns: with(latency, latency_ci),
        service_time_ns: with(service, service_ci),
        dispatch_lag_ns: (!plan.closed_loop)
            .then(|| with(Percentiles::of(&c.total.dispatch_lag), lag_ci)),
        rate_spec: plan.shape.as_ref().map(|s| s.spec().to_string()),
        pacing: pacing(
            plan,
            &c.total,
            ctr.dispatched,
            c.totals.len(),
            recorded_ns,
            &pacing_ctx,
        ),
        poisson_fit: poisson_fit(plan, &c.total),
        arrivals: plan.arrivals.to_string(),
        connection_wait_ns: with(wait, wait_ci),
        ci: Some(run_ci),
        workers,
        io_uring_features: features,
        threads: Vec::new(),
        worker_error: None,
        diagnosis,
        interrupted,
        intervals_resolution,
        intervals,
        udp,
        http,
        mix: mix_report(plan, &c.totals),
        targets: targets_report(plan, target, sums, (elapsed, achieved_rps)),
        keys: keys_report(plan, ctr.sent),
        tls: tls_report(plan, ctr, &c.total),
        server_time: server_time_report(plan, ctr, &c.total),
        replay: replay_report(plan, ctr, c.replay_stopped.clone()),
        http2: http2_report(plan, ctr, &c.totals),
        first_protocol_error,
        fleet: None,
        machine: super::Machine::this(&plan.cores),
        histograms: c.total,
        frames: None,
        abort: c.abort,
        expect: expect_report(plan, &replies),
    }
}

/// `--expect`: each assertion with the replies that failed it.
fn expect_report(
    plan: &RunPlan,
    replies: &crate::engine::recorder::ReplyTally,
) -> Option<super::ExpectReport> {
    (!plan.expect.is_empty()).then(|| super::ExpectReport {
        assertions: (plan.expect.assertions().iter().enumerate())
            .map(|(i, a)| super::AssertionReport {
                assertion: a.text().to_string(),
                failed: replies.expect_failed.get(i).copied().unwrap_or(0),
            })
            .collect(),
        unchecked: replies.expect_unchecked,
    })
}

/// Every worker's replies by kind, added up.
fn reply_tally(totals: &[WorkerTotals]) -> crate::engine::recorder::ReplyTally {
    let mut replies = crate::engine::recorder::ReplyTally::new();
    for t in totals {
        replies.add(&t.replies);
    }
    replies
}

/// What the run achieved per second: a UDP blast's packets sent (it reads no
/// replies), any other run's requests completed.
fn achieved_rps(blast: bool, udp: Option<&UdpReport>, ctr: &Counters, elapsed: f64) -> f64 {
    if blast {
        udp.map_or(0.0, |u| u.sent_pps)
    } else {
        ctr.completed as f64 / elapsed
    }
}

/// The framer's name, or `mixed` when the request mix frames its entries differently.
fn framer(plan: &RunPlan) -> String {
    if plan.requests.mixed_framing() {
        "mixed".to_string()
    } else {
        plan.framing.to_string()
    }
}

/// The requests' fate, from the run's counters.
fn requests(ctr: &Counters) -> Requests {
    Requests {
        dispatched: ctr.dispatched,
        sent: ctr.sent,
        completed: ctr.completed,
        errors: ctr.request_errors(),
        timeouts: ctr.errors_of(ErrorKind::Timeout),
        cut_off: ctr.cut_off,
    }
}

/// `--tls-resume` that no handshake honoured: a note, once handshakes completed (a
/// run whose every handshake failed says so on its own). A server that issued
/// sessions none of which was offered back (every connection opened before the first
/// ticket came) has not been asked, and gets none.
fn diagnose_resumption(plan: &RunPlan, ctr: &Counters) -> Option<Diagnosis> {
    let tls = plan.tls.as_ref()?;
    let (issued, offered) = (tls.sessions.issued(), tls.sessions.offered());
    let handshakes = ctr.tls.full + ctr.tls.resumed;
    let asked = tls.resume_ratio > 0.0 && handshakes > 0 && ctr.tls.resumed == 0;
    (asked && (issued == 0 || offered > 0)).then_some(Diagnosis::TlsResumeNotHonoured {
        ratio: tls.resume_ratio,
        handshakes,
        issued,
        offered,
    })
}

/// The confidence intervals (`--confidence`) from the run's own entries: each row's
/// histograms (decoded one at a time) and counts; the bootstrap is seeded by the run's
/// seed, so a report is reproducible.
fn confidence(
    plan: &RunPlan,
    rows: &[Row],
    intervals: &[Interval],
    total: &Histograms,
    achieved_rps: f64,
    errors: u64,
    completed: u64,
) -> (super::ci::RunCi, [Option<super::ci::HistCi>; 4]) {
    let starts: Vec<u64> = rows.iter().map(|r| r.start_s).collect();
    let span = rows.last().map_or(0, |r| r.start_s + r.len_s.max(1));
    let mut b = super::ci::Builder::new(&starts, span);
    for (i, (row, iv)) in rows.iter().zip(intervals).enumerate() {
        b.counts(i, row.completed, row.errors, iv.duration_s);
        let enc = row.histograms.as_ref();
        for (k, s) in enc
            .map(|e| {
                [
                    &e.latency,
                    &e.service_time,
                    &e.dispatch_lag,
                    &e.connection_wait,
                ]
            })
            .into_iter()
            .flatten()
            .enumerate()
        {
            b.histogram(i, k, super::hdr::decode(s).ok().as_ref());
        }
        if enc.is_none() {
            for k in 0..4 {
                b.histogram(i, k, None);
            }
        }
    }
    let ended = (completed + errors).max(1);
    let (mut run, hists) = b.finish(
        [
            &total.latency,
            &total.service,
            &total.dispatch_lag,
            &total.connection_wait,
        ],
        achieved_rps,
        errors as f64 / ended as f64,
        &crate::metrics::ci::Settings::new(plan.confidence, plan.seed),
    );
    if plan.frames.is_some() {
        // A frames run's rate and errors are the frames block's (frames sent,
        // received, lost), not these counts: docs/frames.md.
        for figure in ["achieved_rps", "error_ratio"] {
            run.reasons
                .insert(figure.into(), "frames: see the frames block".into());
        }
        run.achieved_rps = None;
        run.error_ratio = None;
    }
    if plan.transport == Transport::UdpBlast {
        // Nothing is answered: the achieved rate is the datagrams sent, not counted per
        // second.
        run.achieved_rps = None;
        run.reasons.insert(
            "achieved_rps".into(),
            "udp-blast: the rate sent is not kept per interval".into(),
        );
    }
    (run, hists)
}

/// `--replay`: the recording and how often a worker's read-ahead ran dry.
fn replay_report(
    plan: &RunPlan,
    ctr: &Counters,
    stopped: Option<String>,
) -> Option<super::ReplayReport> {
    let r = plan.replay.as_ref()?;
    Some(super::ReplayReport {
        file: r.path.display().to_string(),
        format: r.format.name(),
        recorded_requests: r.summary.requests,
        speed: r.timing.speed,
        looped: r.looped,
        read_ahead_dry: ctr.replay_dry,
        stopped,
    })
}

/// `--tls`: the handshakes of the run.
/// `--server-time`: the server's time and network + queueing, per reply that said.
fn server_time_report(
    plan: &RunPlan,
    ctr: &Counters,
    h: &Histograms,
) -> Option<super::ServerTimeReport> {
    let source = plan.server_time.as_ref()?;
    Some(super::ServerTimeReport {
        source: source.to_string(),
        carried: h.server_time.len(),
        missing: ctr.server_time_missing,
        server_time_ns: Percentiles::of(&h.server_time),
        network_queueing_ns: Percentiles::of(&h.network_queueing),
    })
}

fn tls_report(plan: &RunPlan, ctr: &Counters, h: &Histograms) -> Option<super::TlsReport> {
    let tls = plan.tls.as_ref()?;
    Some(super::TlsReport {
        sni: tls.sni.clone(),
        insecure: tls.insecure,
        handshakes_full: ctr.tls.full,
        handshakes_resumed: ctr.tls.resumed,
        sessions_issued: tls.sessions.issued(),
        sessions_offered: tls.sessions.offered(),
        failed_by_kind: crate::transport::tls::TlsFailure::ALL
            .iter()
            .map(|k| (k.name(), ctr.tls.failed[*k as usize]))
            .filter(|(_, n)| *n > 0)
            .collect(),
        tls_handshake_ns: Percentiles::of(&h.tls_handshake),
    })
}

/// When the schedule stopped, how long was recorded, and how long the run took.
struct Timing {
    /// The schedule ran until the configured end, or until Ctrl-C stopped it.
    stopped_ns: u64,
    /// What was recorded: from the end of the warm-up (0 without one).
    recorded_ns: u64,
    /// `recorded_ns` in seconds.
    secs: f64,
    /// Until the last response, from the end of the warm-up, in seconds.
    elapsed: f64,
}

impl Timing {
    fn of(plan: &RunPlan, totals: &[WorkerTotals], duration_ns: u64) -> Timing {
        let stopped_ns = stopped_ns(totals, duration_ns);
        let recorded_ns = stopped_ns.saturating_sub(plan.warmup_ns).max(1);
        // Rates count over the whole time it took: a schedule whose requests waited in
        // the backlog and completed during the drain did not achieve its rate.
        // Until the last response: timeouts at the end do not stretch it.
        let last_done_ns = totals.iter().map(|t| t.last_done_ns).max().unwrap_or(0);
        let elapsed = last_done_ns
            .max(stopped_ns)
            .saturating_sub(plan.warmup_ns)
            .max(1) as f64
            / 1e9;
        Timing {
            stopped_ns,
            recorded_ns,
            secs: recorded_ns as f64 / 1e9,
            elapsed,
        }
    }
}

/// The validity gate's verdict: dispatch lag, and the busiest worker's share while the
/// schedule ran (the drain is mostly sleeping), judged only on windows long enough to
/// mean something.
fn judge(
    plan: &RunPlan,
    c: &Collected,
    rate_rps: f64,
    recorded_ns: u64,
) -> crate::metrics::Verdict {
    let busiest = c
        .totals
        .iter()
        .map(|t| (t.core, t.busy_at_stop))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .filter(|_| recorded_ns >= BUSY_WINDOW_MIN_NS);
    // A closed loop has no timetable to fall behind: the gate does not apply.
    Gate {
        max_lag_ns: if plan.closed_loop {
            u64::MAX
        } else {
            plan.max_lag_ns
        },
    }
    .judge(
        &c.total.dispatch_lag,
        busiest.filter(|_| rate_rps.is_finite() && !plan.closed_loop),
    )
}

/// The `udp` key: datagrams sent, received, lost, and the send rate (over the recorded
/// time for a blast, over the whole run otherwise).
fn udp_report(
    plan: &RunPlan,
    ctr: &Counters,
    totals: &[WorkerTotals],
    secs: f64,
    elapsed: f64,
) -> Option<UdpReport> {
    let blast = plan.transport == Transport::UdpBlast;
    (plan.transport != Transport::Tcp && plan.frames.is_none()).then(|| {
        let failed = ctr.errors_of(ErrorKind::Io);
        let sent = if blast {
            ctr.sent.saturating_sub(failed)
        } else {
            ctr.sent
        };
        let lost = ctr.errors_of(ErrorKind::Lost);
        UdpReport {
            sent,
            received: ctr.completed,
            lost,
            duplicates: ctr.duplicates,
            reordered: ctr.reordered,
            foreign: ctr.foreign,
            late: ctr.late,
            joined: ctr.joined,
            loss_ratio: if blast {
                0.0
            } else {
                lost as f64 / (ctr.completed + lost).max(1) as f64
            },
            sent_pps: sent as f64 / if blast { secs } else { elapsed },
            sent_bps: ctr.bytes_sent as f64 * 8.0 / if blast { secs } else { elapsed },
            gso: totals.iter().any(|t| t.ring_features.contains(&"udp_gso")),
        }
    })
}

/// The `http` key: status classes and codes, for runs with an HTTP framer.
fn http_report(
    plan: &RunPlan,
    ctr: &Counters,
    replies: &crate::engine::recorder::ReplyTally,
) -> Option<HttpReport> {
    // A frames run sends no requests (its --grpc names the members' method).
    (plan.frames.is_none()
        && (plan.requests.entries.iter()).any(|e| e.framing == crate::proto::Framing::Http1))
    .then(|| HttpReport {
        status_classes: ["other", "1xx", "2xx", "3xx", "4xx", "5xx"]
            .iter()
            .zip(ctr.http_status)
            .filter(|&(_, n)| n > 0)
            .map(|(&k, n)| (k, n))
            .collect(),
        status_codes: (replies.http_codes.iter().enumerate())
            .filter(|&(_, &n)| n > 0)
            .map(|(code, &n)| {
                let name = if code == 0 {
                    "other".to_string()
                } else {
                    code.to_string()
                };
                (name, n)
            })
            .collect(),
        error_status: plan.error_status.spec(),
    })
}

/// The `mix` key: each entry's counts and latency, summed over the workers.
/// The keys `{zipf:N:S}` / `{uniform:N}` drew, redrawn for the first `sent` sequence
/// numbers of a whole run (a shard's are not the first ones); none for frames.
fn keys_report(plan: &RunPlan, sent: u64) -> Vec<crate::request::keys::KeyShares> {
    use crate::request::keys::{KEY_SHARES_SEQS_MAX, key_shares};
    if !plan.fleet.shard.is_whole() || plan.frames.is_some() {
        return Vec::new();
    }
    key_shares(&plan.requests, plan.seed, 0..sent.min(KEY_SHARES_SEQS_MAX))
}

fn mix_report(plan: &RunPlan, totals: &[WorkerTotals]) -> Option<Vec<MixEntryReport>> {
    plan.requests.is_mix.then(|| {
        plan.requests
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let mut sum = crate::engine::recorder::EntryTotals::new();
                for t in totals {
                    if let Some(x) = t.entries.get(i) {
                        sum.add(x);
                    }
                }
                MixEntryReport {
                    name: e.name.clone(),
                    weight: e.weight,
                    framer: e.framing.to_string(),
                    completed: sum.completed,
                    errors: sum.errors,
                    latency_ns: Percentiles::of(&sum.latency),
                    latency_histogram: sum.latency,
                }
            })
            .collect()
    })
}

/// The `targets` key: with several targets each one's figures summed over the
/// workers; with one, the run's totals (its counters, histograms and each worker's
/// totals) and its achieved rate. Rates per second of `elapsed`. None for frames.
fn targets_report(
    plan: &RunPlan,
    target: SocketAddr,
    (ctr, total, totals): (&Counters, &Histograms, &[WorkerTotals]),
    (elapsed, achieved_rps): (f64, f64),
) -> Vec<TargetReport> {
    use crate::engine::recorder::TargetTotals;
    if plan.frames.is_some() {
        return Vec::new();
    }
    if plan.targets.len() < 2 {
        let latency = &total.latency;
        return vec![TargetReport {
            address: target.to_string(),
            sent: ctr.sent,
            completed: ctr.completed,
            errors: ctr.request_errors(),
            errors_by_kind: Report::errors_map(ctr),
            achieved_rps,
            latency_ns: Percentiles::of(latency),
            latency_histogram: latency.clone(),
        }];
    }
    (plan.targets.iter().enumerate())
        .map(|(i, addr)| {
            let mut sum = TargetTotals::new();
            for t in totals.iter().filter_map(|t| t.targets.get(i)) {
                sum.add(t);
            }
            TargetReport {
                address: addr.to_string(),
                sent: sum.sent,
                completed: sum.completed,
                errors: sum.request_errors(),
                errors_by_kind: Report::kinds_map(|k| sum.errors[k as usize]),
                achieved_rps: sum.completed as f64 / elapsed,
                latency_ns: Percentiles::of(&sum.latency),
                latency_histogram: sum.latency,
            }
        })
        .collect()
}

/// The setup's io_uring features, then those any worker's ring added, once each.
fn ring_features(setup: &[&'static str], totals: &[WorkerTotals]) -> Vec<&'static str> {
    {
        let mut f = setup.to_vec();
        for t in totals {
            for x in &t.ring_features {
                if !f.contains(x) {
                    f.push(x);
                }
            }
        }
        // Received bytes timed by the kernel only if by every worker.
        let stamped = |t: &WorkerTotals| t.ring_features.contains(&crate::engine::stamps::FEATURE);
        if !totals.iter().all(stamped) {
            f.retain(|x| *x != crate::engine::stamps::FEATURE);
        }
        f
    }
}

fn protocol(transport: Transport) -> &'static str {
    match transport {
        Transport::Tcp => "tcp",
        Transport::Udp => "udp",
        Transport::UdpBlast => "udp-blast",
    }
}

fn config(plan: &RunPlan, duration_ns: u64) -> Config {
    Config {
        cores: plan.cores.clone(),
        connections: plan.connections,
        pipeline: plan.pipeline,
        payload_bytes: plan.requests.max_len(),
        duration_ns,
        warmup_ns: plan.warmup_ns,
        timeout_ns: plan.timeout_ns,
        max_lag_ns: plan.max_lag_ns,
        control_core: plan.control_core,
        resolution_ns: plan.precision.resolution_ns,
        spin: plan.precision.spin.to_string(),
    }
}

/// Error replies by name, the names beyond the tally's bound as `(other)`.
fn error_replies_by_kind(
    replies: &crate::engine::recorder::ReplyTally,
) -> std::collections::BTreeMap<String, u64> {
    {
        let mut m: std::collections::BTreeMap<String, u64> =
            replies.names.iter().cloned().collect();
        if replies.other_names > 0 {
            m.insert("(other)".into(), replies.other_names);
        }
        m
    }
}

fn connections(plan: &RunPlan, ctr: &Counters, setup: &Setup, total: &Histograms) -> Connections {
    Connections {
        requested: plan.connections,
        established: setup.established,
        opened: ctr.connections_opened,
        failed: ctr.connections_failed,
        failed_by_errno: (setup.errno_names.iter().cloned())
            .zip(ctr.failed_errno)
            .filter(|&(_, n)| n > 0)
            .collect(),
        closed_by_target: ctr.closed_by_target,
        events_by_kind: Report::events_map(ctr),
        reconnects: ctr.reconnects,
        recycled: plan.conn_life.map(|_| ctr.connections_recycled),
        reconnect_delay_ns: Percentiles::of(&total.reconnect_delay),
        establish_all_ns: setup.establish_ns,
        rings_per_core: plan.rings_per_core,
        wall: setup.wall.clone().filter(|_| ctr.connections_failed > 0),
    }
}

fn memory(plan: &RunPlan, setup: &Setup) -> Memory {
    // A connection per request holds none at the start: per connection slot.
    let per = if plan.per_request {
        plan.connections as u64
    } else {
        setup.established.max(1)
    } as f64;
    let held = setup.held_rss_growth.max(setup.rss_growth);
    Memory {
        user_bytes_per_connection: setup.rss_growth as f64 / per,
        rss_growth_bytes: setup.rss_growth,
        held_rss_growth_bytes: held,
        held_user_bytes_per_connection: held as f64 / per,
        windows: plan.frames.as_ref().map(|f| {
            // The tables of every connection this process owns, over the ones held.
            let windows = f.accounting_bytes() as f64 / per;
            WindowsMemory {
                windows_bytes_per_connection: windows,
                user_bytes_per_connection_excluding_windows: (setup.rss_growth as f64 / per
                    - windows)
                    .max(0.0),
                held_user_bytes_per_connection_excluding_windows: (held as f64 / per - windows)
                    .max(0.0),
            }
        }),
    }
}

/// The load model: frames, closed loop, hold, a connection per request, or persistent.
fn mode(plan: &RunPlan) -> &'static str {
    if plan.frames.is_some() {
        "frames"
    } else if plan.closed_loop {
        "closed_loop"
    } else if plan.hold {
        "hold"
    } else if plan.per_request {
        "per_request"
    } else {
        "persistent"
    }
}

/// What the pacing check judges a run by besides its gaps: the configured window and
/// the host's figures that name a cause.
fn pacing_context(
    plan: &RunPlan,
    host: &HostReport,
    workers: &[WorkerReport],
) -> crate::metrics::pacing_check::Context {
    crate::metrics::pacing_check::Context {
        window_ns: plan.precision.resolution_ns,
        other_load: host.max_other_load,
        other_load_core: host.max_other_load_core,
        steal: host.max_steal,
        worker_busy: host.max_worker_busy,
        timer_late_p995_ns: workers
            .iter()
            .map(|w| w.timer_late_p995_ns)
            .max()
            .unwrap_or(0),
    }
}

/// The pacing self-check against the intended arrivals.
fn pacing(
    plan: &RunPlan,
    total: &Histograms,
    dispatched: u64,
    workers: usize,
    recorded_ns: u64,
    ctx: &crate::metrics::pacing_check::Context,
) -> Option<crate::metrics::pacing_check::Pacing> {
    crate::metrics::pacing_check::judge(
        &total.pacing,
        crate::engine::GAP_SCALE,
        &total.dispatch_lag,
        match plan.arrivals {
            crate::schedule::ArrivalKind::Constant => {
                crate::metrics::pacing_check::Intended::Constant
            }
            crate::schedule::ArrivalKind::Poisson => {
                crate::metrics::pacing_check::Intended::Poisson
            }
        },
        // A worker's mean intended gap, from what the workers dispatched.
        recorded_ns as f64 * workers as f64 / dispatched.max(1) as f64,
        ctx,
    )
}

/// The Kolmogorov-Smirnov fit of the gaps to Poisson arrivals, for Poisson runs.
fn poisson_fit(plan: &RunPlan, total: &Histograms) -> Option<crate::report::PoissonFit> {
    crate::metrics::gate::ks_exponential(&total.pacing, crate::engine::GAP_SCALE)
        .filter(|_| plan.arrivals == crate::schedule::ArrivalKind::Poisson)
        .map(|(d, n)| {
            let critical = crate::metrics::gate::ks_critical_1pct(n);
            crate::report::PoissonFit {
                ks_d: d,
                gaps: n,
                ks_critical_1pct: critical,
                rejected: d > critical,
            }
        })
}

/// When most replies were errors: the top code or reply and its share.
fn diagnose_error_replies(
    ctr: &crate::metrics::Counters,
    replies: &crate::engine::recorder::ReplyTally,
    error_status: &crate::proto::ErrorStatus,
) -> Option<Diagnosis> {
    let failed = ctr.errors_of(ErrorKind::ErrorReply);
    let answered = ctr.completed + failed;
    if failed * 2 <= answered {
        return None;
    }
    // The most frequent failing HTTP code, else the most frequent error reply.
    let top_code = (replies.http_codes.iter().enumerate())
        .filter(|&(code, &n)| n > 0 && error_status.contains(code as u16))
        .max_by_key(|&(_, &n)| n)
        .map(|(code, &n)| (format!("HTTP {code}"), n));
    let top_name = (replies.names.iter())
        .max_by_key(|(_, n)| *n)
        .map(|(name, n)| (name.clone(), *n));
    let (top, top_count) = top_code
        .or(top_name)
        .unwrap_or(("error reply".into(), failed));
    Some(Diagnosis::MostRepliesFailed {
        failed,
        answered,
        top,
        top_count,
    })
}

/// How the model and the connection waits read: a closed loop hides queueing; a
/// connection wait that dominates latency points at the target's closes or, by
/// Little's law, at too little in flight.
fn diagnose_waits(
    plan: &RunPlan,
    rate_rps: f64,
    ctr: &Counters,
    latency: &Percentiles,
    service: &Percentiles,
    wait: &Percentiles,
) -> Vec<Diagnosis> {
    let mut d = Vec::new();
    if plan.closed_loop {
        d.push(Diagnosis::ClosedLoopHidesQueueing {
            connections: plan.connections,
        });
    }
    let dominates = wait.p99 > 1_000_000 && wait.p99 * 2 > latency.p99;
    if dominates && ctr.closed_by_target > 0 {
        d.push(Diagnosis::ConnectionWaitTargetCloses {
            wait_p99_ns: wait.p99,
            latency_p99_ns: latency.p99,
            closed_by_target: ctr.closed_by_target,
            reconnects: ctr.reconnects,
        });
    } else if dominates && !plan.per_request {
        // (With a connection per request the wait includes the connect, reported as
        // connect_time_ns; the pool-size advice does not apply.)
        d.push(Diagnosis::ConnectionWaitPoolLimit {
            wait_p99_ns: wait.p99,
            latency_p99_ns: latency.p99,
            rate_rps,
            service_mean_ns: service.mean as u64,
            inflight_needed: rate_rps * service.mean / 1e9,
            inflight_allowed: plan.connections * plan.pipeline,
        });
    }
    d
}

/// A worker's line of the report. Its busy CPU is `engine::pacing::busy_cpu_ns`: the
/// spinning is wall time, so `cpu - spin` read 0 on a loaded host.
fn worker_report(t: &WorkerTotals) -> WorkerReport {
    let busy = crate::engine::pacing::busy_cpu_ns(t.cpu_ns, t.spin_ns, t.sleep_ns, t.wall_ns);
    WorkerReport {
        core: t.core,
        cpu_ns: t.cpu_ns,
        spin_ns: t.spin_ns,
        busy_cpu_ns: busy.ns,
        cpu_basis: if busy.separated {
            "busy"
        } else {
            "busy_at_most"
        },
        busy_cpu_ns_per_request: busy.ns as f64 / t.completed.max(1) as f64,
        busy_ratio: busy.ns as f64 / t.wall_ns.max(1) as f64,
        backlog_peak: t.backlog_peak,
        wakeups: t.sleeps,
        timer_late_ns: t.timer_late_ns,
        timer_late_p995_ns: t.timer_late_p995_ns,
        histogram_allocations: t.histogram_allocations,
    }
}

/// `--http2` (and `--grpc`): the streams asked for and what the servers did.
fn http2_report(
    plan: &RunPlan,
    ctr: &Counters,
    totals: &[crate::engine::recorder::WorkerTotals],
) -> Option<super::Http2Report> {
    plan.http2.map(|_| super::Http2Report {
        streams_per_connection: plan.pipeline,
        goaways: ctr.http2.goaways,
        retried: ctr.http2.retried,
        stream_resets: ctr.http2.stream_resets,
        streams_cancelled: ctr.http2.streams_cancelled,
        bodies_cut: ctr.http2.bodies_cut,
        flow_stalls: ctr.http2.flow_stalls,
        control_dropped: ctr.http2.control_dropped,
        pings_sent: ctr.http2.pings_sent,
        pings_acked: ctr.http2.pings_acked,
        goaway_codes: (ctr.http2.goaway_codes.iter().enumerate())
            .filter(|&(_, &n)| n > 0)
            .map(|(i, &n)| {
                let name = if i + 1 == ctr.http2.goaway_codes.len() {
                    "OTHER"
                } else {
                    crate::proto::h2::ErrorCode(i as u32).name()
                };
                (name, n)
            })
            .collect(),
        first_goaway: totals.iter().find_map(|t| t.first_goaway.clone()),
        grpc: plan.grpc_method.as_ref().map(|m| super::GrpcReport {
            method: m.clone(),
            status_codes: grpc_codes(&ctr.grpc),
        }),
    })
}

/// `--grpc`: the nonzero counts of `Counters::grpc` by code name.
fn grpc_codes(counts: &[u64; 18]) -> std::collections::BTreeMap<&'static str, u64> {
    counts
        .iter()
        .enumerate()
        .filter(|&(_, &n)| n > 0)
        .map(|(code, &n)| {
            (
                crate::proto::grpc::CODE_NAMES
                    .get(code)
                    .copied()
                    .unwrap_or("OTHER"),
                n,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loaded host: 1.5 s of spinning wall time against 1.4 s of CPU in 2 s, never
    /// asleep. The old `cpu - spin` gave 0 ns per request and 0% busy.
    #[test]
    fn worker_busy_cpu_is_not_zero_when_spinning_outlasts_the_cpu_time() {
        let t = WorkerTotals {
            cpu_ns: 1_400_000_000,
            spin_ns: 1_500_000_000,
            sleep_ns: 0,
            wall_ns: 2_000_000_000,
            completed: 1_000_000,
            ..WorkerTotals::default()
        };
        let w = worker_report(&t);
        // Off CPU 0.6 s: at least 0.9 s of the spinning was on CPU, 0.5 s was work.
        assert_eq!(w.busy_cpu_ns, 500_000_000);
        assert_eq!(w.cpu_basis, "busy_at_most");
        assert_eq!(w.busy_cpu_ns_per_request, 500.0);
        assert_eq!(w.busy_ratio, 0.25);
        // A quiet host: exact.
        let quiet = worker_report(&WorkerTotals {
            cpu_ns: 1_000_000_000,
            spin_ns: 200_000_000,
            sleep_ns: 1_000_000_000,
            ..t
        });
        assert_eq!(quiet.busy_cpu_ns, 800_000_000);
        assert_eq!(quiet.cpu_basis, "busy");
    }

    /// Steal is the busiest generator core's, and is not counted as other load: the
    /// hypervisor's time is not another process on the core.
    #[test]
    fn steal_is_the_largest_per_core_share_and_not_other_load() {
        let usage = [(
            0,
            Usage {
                wall_ns: 1_000_000_000,
                cpu_ns: 400_000_000,
                spin_ns: 0,
                sleep_ns: 600_000_000,
            },
        )];
        let host = HostInterval {
            core_busy: vec![(0, 0.4), (1, 0.1)],
            core_steal: vec![(0, 0.05), (1, 0.12)],
            ..HostInterval::default()
        };
        let l = Load::of(&usage, &host);
        assert_eq!(l.steal, 0.12);
        assert_eq!(l.other_load, 0.1);
        // Core 0's 40% busy is the worker's own CPU; the other load is core 1's.
        assert_eq!(l.other_load_core, Some(1));
        let h = host_report(&l, None, None);
        assert_eq!(h.max_steal, 0.12);
        let codes: Vec<&str> = h.warnings().iter().map(Diagnosis::code).collect();
        assert_eq!(codes, ["hypervisor_steal"]);
        let at_the_limit = host_report(
            &Load {
                steal: STEAL_WARN,
                ..Load::default()
            },
            None,
            None,
        );
        assert!(at_the_limit.warnings().is_empty());
    }

    /// Issue 22, part 8: 30% of core 0 used by the worker's io-wq helpers is the
    /// generator's load, not another process's: only the remaining 10% is other load.
    #[test]
    fn the_generators_helper_threads_are_not_other_load() {
        let usage = [(
            0,
            Usage {
                wall_ns: 1_000_000_000,
                cpu_ns: 400_000_000,
                spin_ns: 0,
                sleep_ns: 600_000_000,
            },
        )];
        let host = HostInterval {
            core_busy: vec![(0, 0.8)],
            core_helpers: vec![(0, 0.3)],
            ..HostInterval::default()
        };
        let l = Load::of(&usage, &host);
        assert!((l.other_load - 0.1).abs() < 1e-9, "{}", l.other_load);
        assert_eq!(l.other_load_core, Some(0));
    }
    #[test]
    fn the_top_failing_code_is_a_failing_one() {
        // 60% of the replies failed (29 x 500, 31 x 503); 200 is the most frequent code
        // but not a failure, so the diagnosis names 503.
        let mut replies = crate::engine::recorder::ReplyTally::new();
        for (code, n) in [(200, 40), (500, 29), (503, 31)] {
            for _ in 0..n {
                replies.http(code);
            }
        }
        let mut ctr = Counters {
            completed: 40,
            ..Counters::default()
        };
        for _ in 0..60 {
            ctr.error(ErrorKind::ErrorReply);
        }
        let d = diagnose_error_replies(&ctr, &replies, &crate::proto::ErrorStatus::default());
        let Some(Diagnosis::MostRepliesFailed {
            top,
            top_count,
            failed,
            answered,
        }) = d
        else {
            panic!("{d:?}");
        };
        assert_eq!(
            (top.as_str(), top_count, failed, answered),
            ("HTTP 503", 31, 60, 100)
        );
        // Half or fewer failed: no diagnosis.
        ctr.completed = 60;
        assert!(
            diagnose_error_replies(&ctr, &replies, &crate::proto::ErrorStatus::default()).is_none()
        );
    }
}
