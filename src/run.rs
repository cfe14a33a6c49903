//! One measured run: spawn the pinned workers, wait until every connection is open,
//! start them on one shared time zero, collect their interval snapshots (merging
//! histograms, printing the live line), and build the report.

use crate::clock::Clock;
use crate::engine::{Channels, Control, Ready, run_worker};
use crate::metrics::recorder::WorkerTotals;
use crate::metrics::{Counters, ErrorKind, Gate, Histograms, Snapshot};
use crate::plan::RunPlan;
use crate::report::{
    Bytes, Config, Connections, Interval, Percentiles, Rate, Report, Requests, SCHEMA_VERSION,
    WorkerReport, fmt_ns, text,
};
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

/// Delay between "all connected" and the schedule's time zero, so every worker is
/// spinning on the TSC before its first due instant.
const START_DELAY_NS: u64 = 20_000_000;

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
            .spawn(move || run_worker(wp, stop, ch))
            .map_err(|e| RunError::Worker(format!("cannot start a worker thread: {e}")))?;
        handles.push(h);
    }
    drop(snap_tx);

    let mut readies: Vec<Ready> = Vec::with_capacity(n);
    while readies.len() < n {
        match ready_rx.recv() {
            Ok(r) => readies.push(r),
            Err(_) => break,
        }
    }
    let fatal = readies.iter().find_map(|r| r.fatal.clone());
    let established: usize = readies.iter().map(|r| r.established).sum();
    if fatal.is_some() || established == 0 || readies.len() < n {
        for c in &controls {
            let _ = c.send(Control::Abort);
        }
        for h in handles {
            let _ = h.join();
        }
        if let Some(f) = fatal {
            return Err(RunError::Worker(f));
        }
        let errno = readies.iter().find_map(|r| r.first_errno);
        return Err(RunError::Connect {
            addr: target,
            reason: errno.map_or("no connection could be opened".to_string(), |e| {
                crate::engine::socket::errno_text(e)
            }),
            failed: plan.connections - established,
            connections: plan.connections,
        });
    }
    let clock = Clock::new().with_start_in(START_DELAY_NS);
    for c in &controls {
        let _ = c.send(Control::Start(clock.clone()));
    }

    let collected = collect(&snap_rx, &recycle, rate_rps, duration_ns, live);
    for h in handles {
        if h.join().is_err() {
            return Err(RunError::Worker("a worker thread panicked".into()));
        }
    }
    let features = readies
        .first()
        .map(|r| r.features.clone())
        .unwrap_or_default();
    Ok(build_report(
        plan,
        target,
        rate_rps,
        duration_ns,
        collected,
        features,
        stop.load(Ordering::Relaxed),
    ))
}

/// Everything the collector gathered.
struct Collected {
    total: Histograms,
    counters: Counters,
    intervals: Vec<(Histograms, Counters, usize)>,
    totals: Vec<WorkerTotals>,
}

/// Receives snapshots until every worker sent its last one; prints the live line when
/// an interval has been reported by every worker.
fn collect(
    rx: &crossbeam_channel::Receiver<Snapshot>,
    recycle: &[crossbeam_channel::Sender<Histograms>],
    rate_rps: f64,
    duration_ns: u64,
    live: bool,
) -> Collected {
    let workers = recycle.len();
    let mut c = Collected {
        total: Histograms::new(),
        counters: Counters::default(),
        intervals: Vec::new(),
        totals: vec![WorkerTotals::default(); workers],
    };
    let mut finished = 0;
    let mut printed = 0usize;
    while finished < workers {
        let snap = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(s) => s,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let i = snap.interval as usize;
        while c.intervals.len() <= i {
            c.intervals
                .push((Histograms::new(), Counters::default(), 0));
        }
        let slot = &mut c.intervals[i];
        slot.0.add(&snap.histograms);
        slot.1.add(&snap.counters);
        slot.2 += 1;
        c.total.add(&snap.histograms);
        c.counters.add(&snap.counters);
        let mut used = snap.histograms;
        used.reset();
        let _ = recycle[snap.worker].try_send(used);
        if let Some(t) = snap.last {
            c.totals[snap.worker] = t;
            finished += 1;
        }
        // Live line for every interval all workers have reported, in order.
        while live && printed < c.intervals.len() && c.intervals[printed].2 >= workers {
            let (_, ctr, _) = &c.intervals[printed];
            if (printed as u64) * 1_000_000_000 < duration_ns {
                let lat = Percentiles::of(&c.total.latency);
                let lag = c.total.dispatch_lag.value_at_quantile(0.99);
                eprintln!(
                    "{}",
                    text::live_line(
                        printed as u64,
                        ctr.completed as f64,
                        rate_rps,
                        &lat,
                        c.counters.request_errors(),
                        lag
                    )
                );
            }
            printed += 1;
        }
    }
    c
}

fn build_report(
    plan: &RunPlan,
    target: SocketAddr,
    rate_rps: f64,
    duration_ns: u64,
    c: Collected,
    features: Vec<&'static str>,
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
    let wall_ns = c
        .totals
        .iter()
        .map(|t| t.wall_ns)
        .max()
        .unwrap_or(duration_ns);
    let verdict = Gate {
        max_lag_ns: plan.max_lag_ns,
    }
    .judge(&c.total.dispatch_lag);
    let n = c.intervals.len();
    let intervals: Vec<Interval> = c
        .intervals
        .iter()
        .enumerate()
        .map(|(i, (h, ctr, _))| {
            let start = i as u64 * 1_000_000_000;
            let end = if i + 1 == n {
                wall_ns.max(start + 1)
            } else {
                start + 1_000_000_000
            };
            let len_s = (end - start) as f64 / 1e9;
            let scheduled = (stopped_ns.min(end).saturating_sub(start)) as f64 / 1e9;
            Interval {
                second: i as u64,
                duration_s: len_s,
                intended_rps: rate_rps * scheduled / len_s,
                achieved_rps: ctr.completed as f64 / len_s,
                latency_p50_ns: Percentiles::of(&h.latency).p50,
                latency_p99_ns: Percentiles::of(&h.latency).p99,
                dispatch_lag_p99_ns: Percentiles::of(&h.dispatch_lag).p99,
                errors: ctr.request_errors(),
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
    let mut diagnosis = Vec::new();
    if wait.p99 > 1_000_000 && wait.p99 * 2 > latency.p99 {
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
    Report {
        schema_version: SCHEMA_VERSION,
        valid: verdict.valid,
        invalid_reasons: verdict.reasons,
        target: target.to_string(),
        protocol: "tcp",
        framer: plan.framing.to_string(),
        config: Config {
            cores: plan.cores.clone(),
            connections: plan.connections,
            pipeline: plan.pipeline,
            payload_bytes: plan.payload.len(),
            duration_ns,
            timeout_ns: plan.timeout_ns,
            max_lag_ns: plan.max_lag_ns,
        },
        duration_s: secs,
        rate: Rate {
            intended_rps: rate_rps,
            achieved_rps: ctr.completed as f64 / secs,
            sent_rps: ctr.sent as f64 / secs,
        },
        requests: Requests {
            dispatched: ctr.dispatched,
            sent: ctr.sent,
            completed: ctr.completed,
            errors: ctr.request_errors(),
            timeouts: ctr.errors_of(ErrorKind::Timeout),
            cut_off: ctr.cut_off,
        },
        bytes: Bytes {
            sent: ctr.bytes_sent,
            received: ctr.bytes_received,
        },
        errors_by_kind: Report::errors_map(ctr),
        connections: Connections {
            requested: plan.connections,
            opened: ctr.connections_opened,
            failed: ctr.connections_failed,
        },
        latency_ns: latency,
        service_time_ns: service,
        dispatch_lag_ns: Percentiles::of(&c.total.dispatch_lag),
        connection_wait_ns: wait,
        workers,
        io_uring_features: features,
        diagnosis,
        interrupted,
        intervals,
        histograms: c.total,
    }
}
