//! One measured run: spawn the pinned workers, wait until every connection is open,
//! start them on one shared time zero, collect their interval snapshots (merging
//! histograms, printing the live line), and build the report.

use crate::clock::Clock;
use crate::engine::pacing::Usage;
use crate::engine::recorder::{CONNECT_ERRNOS, WorkerTotals};
use crate::engine::udp::run_udp_worker;
use crate::engine::{Channels, Control, Ready, Transport, run_worker};
use crate::metrics::host::{
    CORE_BUSY_WATERMARK, HostInterval, HostSampler, LINK_SATURATED, OTHER_LOAD_WARN, iface_for,
    read_link_speed, rss_bytes,
};
use crate::metrics::{Counters, ErrorKind, Gate, Histograms, Snapshot};
use crate::plan::RunPlan;
use crate::report::{
    Bytes, Config, Connections, HostReport, HttpReport, Interval, Memory, MixEntryReport,
    Percentiles, Rate, Report, Requests, SCHEMA_VERSION, UdpReport, WorkerReport, text,
};
use crate::units::fmt_ns;
use crossbeam_channel::{RecvTimeoutError, bounded, unbounded};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A run that could not take place (exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot connect to {addr}: {reason} ({failed} of {connections} connections failed)")]
    Connect {
        addr: SocketAddr,
        reason: String,
        failed: usize,
        connections: usize,
    },
    #[error("{0}")]
    Worker(String),
    #[error(transparent)]
    Preflight(#[from] crate::preflight::PreflightError),
    #[error(transparent)]
    Sink(#[from] crate::sink::SinkError),
    #[error("cannot write {path}: {source}")]
    Output {
        path: String,
        source: std::io::Error,
    },
}

/// Shortest schedule the busy-worker gate judges (startup noise dominates below).
const BUSY_WINDOW_MIN_NS: u64 = 500_000_000;

/// Delay between "all connected" and the schedule's time zero, so every worker is
/// spinning on the TSC before its first due instant.
const START_DELAY_NS: u64 = 20_000_000;

/// Keeps the calling (collector) thread off the worker cores: on the control core
/// (`--control-core`), so merging histograms and printing never preempts a spinning
/// worker. Threads it starts inherit the control core; workers then pin themselves.
fn keep_off_worker_cores(control: usize) {
    crate::threads::pin_current(control);
}

/// Runs the plan against `target` at `rate_rps` for `duration_ns`.
pub fn execute(
    plan: &RunPlan,
    target: SocketAddr,
    rate_rps: f64,
    duration_ns: u64,
    stop: &Arc<AtomicBool>,
    live: bool,
) -> Result<Report, RunError> {
    let workers = plan.worker_plans(target, rate_rps, duration_ns);
    let n = workers.len();
    let rss_before = rss_bytes().unwrap_or(0);
    keep_off_worker_cores(plan.control_core);
    let (ready_tx, ready_rx) = unbounded::<Ready>();
    let (snap_tx, snap_rx) = unbounded::<Snapshot>();
    let mut controls = Vec::with_capacity(n);
    let mut recycle = Vec::with_capacity(n);
    let mut handles = Vec::with_capacity(n);
    for wp in workers.iter().cloned() {
        let (ctl_tx, control_rx) = bounded::<Control>(1);
        controls.push(ctl_tx);
        let (recycle_tx, recycle_rx) = bounded::<Histograms>(2);
        recycle.push(recycle_tx);
        let ch = Channels {
            ready_tx: ready_tx.clone(),
            control_rx,
            snap_tx: snap_tx.clone(),
            recycle_rx,
        };
        let stop = stop.clone();
        let name = format!("blaster-w{}", wp.index);
        let h = std::thread::Builder::new()
            .name(name)
            .spawn(move || match wp.transport {
                Transport::Tcp => run_worker(wp, stop, ch),
                Transport::Udp | Transport::UdpBlast => run_udp_worker(wp, stop, ch),
            })
            .map_err(|e| RunError::Worker(format!("cannot start a worker thread: {e}")))?;
        handles.push(h);
    }
    drop(snap_tx);
    // Only the workers hold senders now: a worker that dies before Ready ends the wait.
    drop(ready_tx);

    let mut readies: Vec<Ready> = Vec::with_capacity(n);
    while readies.len() < n {
        match ready_rx.recv() {
            Ok(r) => readies.push(r),
            Err(_) => break,
        }
    }
    let fatal = readies.iter().find_map(|r| r.fatal.clone());
    let established: usize = readies.iter().map(|r| r.established).sum();
    let setup = Setup {
        features: Vec::new(),
        established: established as u64,
        establish_ns: readies.iter().map(|r| r.establish_ns).max().unwrap_or(0),
        rss_growth: rss_bytes().unwrap_or(0).saturating_sub(rss_before),
        first_errno: readies.iter().find_map(|r| r.first_errno),
    };
    // A connection per request opens nothing before the schedule starts.
    if fatal.is_some() || (established == 0 && !plan.per_request) || readies.len() < n {
        for c in &controls {
            let _ = c.send(Control::Abort);
        }
        for h in handles {
            let _ = h.join();
        }
        if let Some(f) = fatal {
            return Err(RunError::Worker(f));
        }
        let errno = setup.first_errno;
        return Err(RunError::Connect {
            addr: target,
            reason: errno.map_or("no connection could be opened".to_string(), |e| {
                let text = crate::engine::socket::errno_text(e);
                match crate::preflight::walls::wall_hint(e, &wall_context(plan)) {
                    Some(hint) => format!("{text}; {hint}"),
                    None => text,
                }
            }),
            failed: plan.connections - established,
            connections: plan.connections,
        });
    }
    // Every worker has pinned itself by now (before its Ready).
    let sampler = crate::threads::Sampler::start(plan.control_core);
    let clock = match plan.fleet.start_at_ns {
        Some(at) => clock_starting_at(at),
        None => Clock::new().with_start_in(START_DELAY_NS),
    };
    for c in &controls {
        let _ = c.send(Control::Start(clock.clone()));
    }

    let mut host = HostSampler::new(&plan.cores, iface_for(target.ip()));
    let worker_cores: Vec<usize> = workers.iter().map(|w| w.core.unwrap_or(0)).collect();
    let mut collected = collect(&snap_rx, &recycle, rate_rps, live, &mut host, &worker_cores);
    let worker_error = collected.totals.iter().find_map(|t| t.error.clone());
    collected.iface = host.iface.clone();
    for h in handles {
        if h.join().is_err() {
            return Err(RunError::Worker("a worker thread panicked".into()));
        }
    }
    let threads = sampler.finish();
    let features = readies
        .first()
        .map(|r| r.features.clone())
        .unwrap_or_default();
    let mut report = build_report(
        plan,
        target,
        rate_rps,
        duration_ns,
        collected,
        Setup { features, ..setup },
        stop.load(Ordering::Relaxed),
    );
    report.threads = threads;
    report.worker_error = worker_error;
    Ok(report)
}

/// A TSC clock whose start instant is the wall-clock instant `at_ns` (`--start-at`):
/// sleep on the wall clock until shortly before it, then read the wall clock and the
/// TSC together and put the start the remaining distance ahead on the TSC, where the
/// workers spin to it. Past `at_ns` already (connecting took too long), it starts at
/// once and the report's start skew shows by how much it was late.
fn clock_starting_at(at_ns: u64) -> Clock {
    crate::wallclock::wait_until(at_ns.saturating_sub(START_DELAY_NS));
    let clock = Clock::new();
    let wall = crate::wallclock::now_unix_ns();
    clock.with_start_in(at_ns.saturating_sub(wall))
}

/// Connection per request without `--linger0`: whether the rate would use up the
/// ephemeral ports within TIME_WAIT (60 s), with the numbers and fixes.
pub fn time_wait_warning(plan: &RunPlan, rate_rps: f64) -> Option<String> {
    use crate::ports;
    if !plan.per_request || plan.sockopts.linger0 {
        return None;
    }
    let range = ports::read_port_range(std::path::Path::new("/")).ok()?;
    let pairs = ports::Placement::new(plan.connections, plan.sources.len(), plan.targets.len());
    ports::time_wait_warning(rate_rps, pairs.pairs(), range, 60.0)
}

/// The run's host figures: the busiest generator core and the interface's traffic.
fn host_report(rows: &[Interval], iface: Option<String>, link_bps: Option<u64>) -> HostReport {
    let max = |f: fn(&Interval) -> f64| rows.iter().map(f).fold(0.0, f64::max);
    HostReport {
        max_core_load: max(|i| i.core_load),
        max_worker_busy: max(|i| i.worker_busy),
        max_other_load: max(|i| i.other_load),
        other_load_warn_at: OTHER_LOAD_WARN,
        iface,
        link_speed_bps: link_bps,
        tx_bps_max: max(|i| i.tx_bps),
        rx_bps_max: max(|i| i.rx_bps),
        link_utilization_max: link_bps.map(|_| max(|i| i.link_utilization.unwrap_or(0.0))),
        drops: rows.iter().map(|i| i.drops).sum(),
        core_busy_watermark: CORE_BUSY_WATERMARK,
        link_saturated_at: LINK_SATURATED,
    }
}

/// What the connect phase established, before the schedule started.
struct Setup {
    /// io_uring features of the first worker's ring.
    features: Vec<&'static str>,
    established: u64,
    establish_ns: u64,
    rss_growth: u64,
    first_errno: Option<i32>,
}

/// The numbers a failed connection's wall message needs.
fn wall_context(plan: &RunPlan) -> crate::preflight::walls::WallContext {
    use crate::ports;
    use crate::preflight::walls;
    let root = std::path::Path::new("/");
    let (soft, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .unwrap_or((0, 0));
    let placement = ports::Placement::new(plan.connections, plan.sources.len(), plan.targets.len());
    walls::WallContext {
        fd_soft: soft,
        fd_hard: hard,
        fds_needed: plan.fds_needed(),
        nr_open: walls::read_proc_u64(root, "proc/sys/fs/nr_open"),
        file_max: walls::read_proc_u64(root, "proc/sys/fs/file-max"),
        port_range: ports::read_port_range(root).ok(),
        conns_per_pair: placement.max_per_pair(),
        sources: plan.sources.len(),
        targets: plan.targets.len().max(1),
        conntrack: walls::read_conntrack(root),
    }
}

/// Everything the collector gathered.
struct Collected {
    total: Histograms,
    counters: Counters,
    /// One summary row per interval, filled as intervals complete.
    rows: Vec<Row>,
    totals: Vec<WorkerTotals>,
    /// The interface that carried the run, when known.
    iface: Option<String>,
}

/// An interval reduced to the figures the report keeps, so a day-long run holds a few
/// numbers per second rather than four histograms per second.
#[derive(Debug, Clone, Copy, Default)]
struct Row {
    completed: u64,
    errors: u64,
    latency: Percentiles,
    lag_p99: u64,
    load: Load,
}

/// How loaded the generator's cores and the interface were in one interval.
#[derive(Debug, Clone, Copy, Default)]
struct Load {
    /// Busiest core as /proc/stat counts it, minus the workers' own spinning there (a
    /// worker spinning for a due instant looks 100% busy to /proc/stat).
    core_load: f64,
    /// Busiest core as the workers measure themselves: CPU minus spin, over the interval.
    worker_busy: f64,
    /// Busiest core's time taken by anything but the workers (other processes, IRQs).
    other_load: f64,
    tx_bps: f64,
    rx_bps: f64,
    tx_pps: f64,
    rx_pps: f64,
    drops: u64,
}

impl Load {
    /// Reduces one interval: the workers' own usage (per worker, with its core) and what
    /// the host saw.
    fn of(usage: &[(usize, Usage)], host: &HostInterval) -> Load {
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
        let other_load = host
            .core_busy
            .iter()
            .map(|&(c, busy)| (busy - per_core.get(&c).map_or(0.0, |v| v.0)).clamp(0.0, 1.0))
            .fold(0.0, f64::max);
        Load {
            core_load,
            worker_busy,
            other_load,
            tx_bps: host.tx_bps,
            rx_bps: host.rx_bps,
            tx_pps: host.tx_pps,
            rx_pps: host.rx_pps,
            drops: host.drops,
        }
    }
}

/// An interval some workers have not reported yet.
struct Pending {
    histograms: Histograms,
    counters: Counters,
    /// Each reporting worker's core and how it spent the interval.
    usage: Vec<(usize, Usage)>,
}

/// Receives snapshots until every worker sent its last one. An interval is complete
/// when every worker has reported it (or finished); it is then reduced to a [`Row`]
/// and, when `live`, printed as the live line.
fn collect(
    rx: &crossbeam_channel::Receiver<Snapshot>,
    recycle: &[crossbeam_channel::Sender<Histograms>],
    rate_rps: f64,
    live: bool,
    host: &mut HostSampler,
    worker_cores: &[usize],
) -> Collected {
    let workers = recycle.len();
    let mut c = Collected {
        total: Histograms::new(),
        counters: Counters::default(),
        rows: Vec::new(),
        totals: vec![WorkerTotals::default(); workers],
        iface: None,
    };
    let mut pending: std::collections::BTreeMap<usize, Pending> = Default::default();
    // Per worker: intervals reported so far (they arrive in order) and whether done.
    let mut reported = vec![0usize; workers];
    let mut finished = vec![false; workers];
    while finished.iter().any(|f| !f) {
        let snap = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(s) => s,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let i = snap.interval as usize;
        let p = pending.entry(i).or_insert_with(|| Pending {
            histograms: Histograms::new(),
            counters: Counters::default(),
            usage: Vec::new(),
        });
        p.usage.push((worker_cores[snap.worker], snap.usage));
        p.histograms.add(&snap.histograms);
        p.counters.add(&snap.counters);
        c.total.add(&snap.histograms);
        c.counters.add(&snap.counters);
        reported[snap.worker] = reported[snap.worker].max(i + 1);
        if let Some(t) = snap.last {
            c.totals[snap.worker] = t;
            finished[snap.worker] = true;
        }
        let mut used = snap.histograms;
        used.reset();
        let _ = recycle[snap.worker].try_send(used);
        // Complete every interval that all workers have reported or finished past.
        while let Some((&first, _)) = pending.first_key_value() {
            let done = (0..workers).all(|w| finished[w] || reported[w] > first);
            if !done {
                break;
            }
            let p = pending.remove(&first).expect("present");
            while c.rows.len() < first {
                c.rows.push(Row::default());
            }
            let row = Row {
                completed: p.counters.completed,
                errors: p.counters.request_errors(),
                latency: Percentiles::of(&p.histograms.latency),
                lag_p99: Percentiles::of(&p.histograms.dispatch_lag).p99,
                load: Load::of(&p.usage, &host.sample()),
            };
            if live {
                eprintln!(
                    "{}",
                    text::live_line(
                        first as u64,
                        row.completed as f64,
                        rate_rps,
                        &row.latency,
                        row.errors,
                        row.lag_p99
                    )
                );
            }
            c.rows.push(row);
        }
    }
    c
}

#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename them
fn build_report(
    plan: &RunPlan,
    target: SocketAddr,
    rate_rps: f64,
    duration_ns: u64,
    c: Collected,
    setup: Setup,
    interrupted: bool,
) -> Report {
    // The schedule ran until the configured end, or until Ctrl-C stopped it.
    let stopped_ns = c
        .totals
        .iter()
        .map(|t| t.stopped_ns)
        .max()
        .unwrap_or(duration_ns)
        .min(duration_ns)
        .max(1);
    let secs = stopped_ns as f64 / 1e9;
    // Rates count over the whole time it took: a schedule whose requests waited in the
    // backlog and completed during the drain did not achieve its rate.
    // Until the last response: timeouts at the end do not stretch it.
    let last_done_ns = c.totals.iter().map(|t| t.last_done_ns).max().unwrap_or(0);
    let elapsed = last_done_ns.max(stopped_ns) as f64 / 1e9;
    // Busy share while the schedule ran (the drain is mostly sleeping); judged only on
    // windows long enough to mean something.
    let busiest = c
        .totals
        .iter()
        .map(|t| (t.core, t.busy_at_stop))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .filter(|_| stopped_ns >= BUSY_WINDOW_MIN_NS);
    // A closed loop has no timetable to fall behind: the gate does not apply.
    let verdict = Gate {
        max_lag_ns: if plan.closed_loop {
            u64::MAX
        } else {
            plan.max_lag_ns
        },
    }
    .judge(
        &c.total.dispatch_lag,
        busiest.filter(|_| rate_rps.is_finite() && !plan.closed_loop),
    );
    let link_bps = plan.link_speed_bps.or_else(|| {
        c.iface
            .as_deref()
            .and_then(|i| read_link_speed(std::path::Path::new("/"), i))
    });
    let intervals: Vec<Interval> = c
        .rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let start = i as u64 * 1_000_000_000;
            // The last interval ends where the schedule stopped (its drain is folded in).
            let end = (start + 1_000_000_000).min(stopped_ns.max(start + 1));
            let len_s = (end - start) as f64 / 1e9;
            Interval {
                second: i as u64,
                duration_s: len_s,
                // A shaped rate: what the shape intends for this very second.
                intended_rps: match &plan.shape {
                    Some(s) if s.constant_rps().is_none() => {
                        s.expected_between(start as f64, end as f64) / len_s
                    }
                    _ => rate_rps,
                },
                achieved_rps: row.completed as f64 / len_s,
                latency_p50_ns: row.latency.p50,
                latency_p99_ns: row.latency.p99,
                dispatch_lag_p99_ns: row.lag_p99,
                errors: row.errors,
                core_load: row.load.core_load,
                worker_busy: row.load.worker_busy,
                other_load: row.load.other_load,
                tx_bps: row.load.tx_bps,
                rx_bps: row.load.rx_bps,
                tx_pps: row.load.tx_pps,
                rx_pps: row.load.rx_pps,
                link_utilization: link_bps.map(|l| row.load.tx_bps.max(row.load.rx_bps) / l as f64),
                drops: row.load.drops,
            }
        })
        .collect();
    let workers: Vec<WorkerReport> = c
        .totals
        .iter()
        .map(|t| {
            let busy = t.cpu_ns.saturating_sub(t.spin_ns);
            WorkerReport {
                core: t.core,
                cpu_ns: t.cpu_ns,
                spin_ns: t.spin_ns,
                busy_cpu_ns_per_request: busy as f64 / t.completed.max(1) as f64,
                busy_ratio: busy as f64 / t.wall_ns.max(1) as f64,
                backlog_peak: t.backlog_peak,
            }
        })
        .collect();
    let ctr = &c.counters;
    let latency = Percentiles::of(&c.total.latency);
    let service = Percentiles::of(&c.total.service);
    let wait = Percentiles::of(&c.total.connection_wait);
    let mut diagnosis: Vec<String> = time_wait_warning(plan, rate_rps).into_iter().collect();
    let host = host_report(&intervals, c.iface.clone(), link_bps);
    diagnosis.extend(host.warnings());
    if plan.closed_loop {
        diagnosis.push(format!(
            "closed model (--concurrency {}): each connection waited for its response before \
             sending again, so a slow target slowed the load instead of queueing it; this \
             latency is service time and hides queueing. Run open-loop (--rate) for the \
             latency users see.",
            plan.connections
        ));
    }
    if wait.p99 > 1_000_000 && wait.p99 * 2 > latency.p99 && ctr.closed_by_target > 0 {
        diagnosis.push(format!(
            "connection wait dominates latency (p99 {} of {}): the target closed or reset \
             {} connections and due requests waited while they came back after the reconnect \
             backoff ({} reconnects); the target's closes, not the pool size, are the limit.",
            fmt_ns(wait.p99),
            fmt_ns(latency.p99),
            ctr.closed_by_target,
            ctr.reconnects
        ));
    } else if wait.p99 > 1_000_000 && wait.p99 * 2 > latency.p99 && !plan.per_request {
        // (With a connection per request the wait includes the connect, reported as
        // connect_time_ns; the pool-size advice does not apply.)
        let inflight_needed = rate_rps * service.mean / 1e9;
        diagnosis.push(format!(
            "connection wait dominates latency (p99 {} of {}): due requests waited for a free \
             connection, so the target, or too few connections / too little pipelining, is the \
             limit, not the generator. Little's law: {:.0} requests/s x {} mean service time \
             = {:.0} requests in flight needed; this run allowed {} (connections x pipeline).",
            fmt_ns(wait.p99),
            fmt_ns(latency.p99),
            rate_rps,
            fmt_ns(service.mean as u64),
            inflight_needed,
            plan.connections * plan.pipeline
        ));
    }
    let blast = plan.transport == Transport::UdpBlast;
    let udp = (plan.transport != Transport::Tcp).then(|| {
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
            loss_ratio: if blast {
                0.0
            } else {
                lost as f64 / (ctr.completed + lost).max(1) as f64
            },
            sent_pps: sent as f64 / if blast { secs } else { elapsed },
            sent_bps: ctr.bytes_sent as f64 * 8.0 / if blast { secs } else { elapsed },
            gso: c
                .totals
                .iter()
                .any(|t| t.ring_features.contains(&"udp_gso")),
        }
    });
    let http = (plan.requests.entries.iter())
        .any(|e| e.framing == crate::proto::Framing::Http1)
        .then(|| HttpReport {
            status_classes: ["other", "1xx", "2xx", "3xx", "4xx", "5xx"]
                .iter()
                .zip(ctr.http_status)
                .filter(|&(_, n)| n > 0)
                .map(|(&k, n)| (k, n))
                .collect(),
        });
    let first_protocol_error = c.totals.iter().find_map(|t| t.first_protocol_error.clone());
    let mix = plan.requests.is_mix.then(|| {
        plan.requests
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let mut sum = crate::engine::recorder::EntryTotals::new();
                for t in &c.totals {
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
                }
            })
            .collect()
    });
    let achieved_rps = if blast {
        udp.as_ref().map_or(0.0, |u| u.sent_pps)
    } else {
        ctr.completed as f64 / elapsed
    };
    let features = {
        let mut f = setup.features.clone();
        for t in &c.totals {
            for x in &t.ring_features {
                if !f.contains(x) {
                    f.push(x);
                }
            }
        }
        f
    };
    Report {
        schema_version: SCHEMA_VERSION,
        valid: verdict.valid,
        invalid_reasons: verdict.reasons,
        target: target.to_string(),
        protocol: match plan.transport {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
            Transport::UdpBlast => "udp-blast",
        },
        seed: plan.seed,
        framer: if plan.requests.mixed_framing() {
            "mixed".to_string()
        } else {
            plan.framing.to_string()
        },
        config: Config {
            cores: plan.cores.clone(),
            connections: plan.connections,
            pipeline: plan.pipeline,
            payload_bytes: plan.requests.max_len(),
            duration_ns,
            timeout_ns: plan.timeout_ns,
            max_lag_ns: plan.max_lag_ns,
            control_core: plan.control_core,
        },
        duration_s: secs,
        elapsed_s: elapsed,
        rate: Rate {
            intended_rps: rate_rps,
            achieved_rps,
            sent_rps: ctr.sent as f64 / if blast { secs } else { elapsed },
        },
        requests: Requests {
            dispatched: ctr.dispatched,
            sent: ctr.sent,
            completed: ctr.completed,
            errors: ctr.request_errors(),
            timeouts: ctr.errors_of(ErrorKind::Timeout),
            cut_off: ctr.cut_off,
        },
        error_replies: ctr.error_replies,
        bytes: Bytes {
            sent: ctr.bytes_sent,
            received: ctr.bytes_received,
        },
        errors_by_kind: Report::errors_map(ctr),
        connections: Connections {
            requested: plan.connections,
            established: setup.established,
            opened: ctr.connections_opened,
            failed: ctr.connections_failed,
            failed_by_errno: CONNECT_ERRNOS
                .iter()
                .map(|&e| crate::preflight::walls::errno_name(e))
                .chain(std::iter::once("other".to_string()))
                .zip(ctr.failed_errno)
                .filter(|&(_, n)| n > 0)
                .collect(),
            closed_by_target: ctr.closed_by_target,
            reconnects: ctr.reconnects,
            reconnect_delay_ns: Percentiles::of(&c.total.reconnect_delay),
            establish_all_ns: setup.establish_ns,
            rings_per_core: plan.rings_per_core,
            wall: setup
                .first_errno
                .filter(|_| ctr.connections_failed > 0)
                .and_then(|e| crate::preflight::walls::wall_hint(e, &wall_context(plan))),
        },
        connect_time_ns: Percentiles::of(&c.total.connect),
        host,
        memory: Memory {
            // A connection per request holds none at the start: per connection slot.
            user_bytes_per_connection: setup.rss_growth as f64
                / if plan.per_request {
                    plan.connections as u64
                } else {
                    setup.established.max(1)
                } as f64,
            rss_growth_bytes: setup.rss_growth,
        },
        mode: if plan.closed_loop {
            "closed_loop"
        } else if plan.hold {
            "hold"
        } else if plan.per_request {
            "per_request"
        } else {
            "persistent"
        },
        latency_ns: latency,
        service_time_ns: service,
        dispatch_lag_ns: (!plan.closed_loop).then(|| Percentiles::of(&c.total.dispatch_lag)),
        rate_spec: plan.shape.as_ref().map(|s| s.spec().to_string()),
        pacing: crate::metrics::pacing::judge(
            &c.total.pacing,
            crate::engine::GAP_SCALE,
            &c.total.dispatch_lag,
            match plan.arrivals {
                crate::schedule::ArrivalKind::Constant => {
                    crate::metrics::pacing::Intended::Constant
                }
                crate::schedule::ArrivalKind::Poisson => crate::metrics::pacing::Intended::Poisson,
            },
            // A worker's mean intended gap, from what the workers dispatched.
            stopped_ns as f64 * c.totals.len() as f64 / ctr.dispatched.max(1) as f64,
        ),
        poisson_fit: crate::metrics::gate::ks_exponential(
            &c.total.pacing,
            crate::engine::GAP_SCALE,
        )
        .filter(|_| plan.arrivals == crate::schedule::ArrivalKind::Poisson)
        .map(|(d, n)| {
            let critical = crate::metrics::gate::ks_critical_1pct(n);
            crate::report::PoissonFit {
                ks_d: d,
                gaps: n,
                ks_critical_1pct: critical,
                rejected: d > critical,
            }
        }),
        arrivals: plan.arrivals.to_string(),
        connection_wait_ns: wait,
        workers,
        io_uring_features: features,
        threads: Vec::new(),
        worker_error: None,
        diagnosis,
        interrupted,
        intervals,
        udp,
        http,
        mix,
        first_protocol_error,
        histograms: c.total,
    }
}
