//! One measured run: spawn the pinned workers, wait until every connection is open,
//! start them on one shared time zero, collect their interval snapshots (merging
//! histograms, printing the live line), and build the report.

mod command;

pub use command::{ValidRun, command, validate};

use crate::clock::Clock;
use crate::diagnosis::Diagnosis;
use crate::engine::driver::WorkerError;
use crate::engine::frames::run_frames_worker;
use crate::engine::pacing::Usage;
use crate::engine::recorder::{CONNECT_ERRNOS, HistShape, WorkerTotals};
use crate::engine::udp::run_udp_worker;
use crate::engine::{Channels, Control, Ready, Transport, run_worker};
use crate::limits::INTERVAL_HISTOGRAMS_JSON_MAX;
use crate::metrics::host::{HostSampler, iface_for, rss_bytes};
use crate::metrics::{Counters, Histograms, Snapshot};
use crate::report::assemble::{self, Collected, IntervalShape, Load, Row, Setup, link_bps};
use crate::report::export::{IntervalView, Outputs};
use crate::report::fleet_report::FleetReport;
use crate::report::hdr::Encoded4;
use crate::report::progress::{Display, Live, Second, TICK};
use crate::report::{Percentiles, Report};
use crate::run_plan::RunPlan;
use crate::slo::{AbortIf, Observed};
use crate::wallclock::ClockSync;
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
    /// Every handshake failed (a certificate that does not verify, say).
    #[error(
        "TLS handshake with {server} ({addr}) failed: {kind}: {why} ({failed} of {connections} connections failed)"
    )]
    Tls {
        server: String,
        addr: SocketAddr,
        kind: &'static str,
        why: String,
        failed: usize,
        connections: usize,
    },
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The TLS front before the baseline's in-process sink, or its HTTP/2 front,
    /// could not start.
    #[error("the baseline's {0} front: {1}")]
    BaselineFront(&'static str, std::io::Error),
    /// `blaster sink --tls`: the TLS front could not listen on `--listen`.
    #[error("sink --tls: cannot listen on {addr}: {source}")]
    SinkTlsFront {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// `blaster sink --http2`: the HTTP/2 front could not listen on `--listen`.
    #[error("sink --http2: cannot listen on {addr}: {source}")]
    SinkHttp2Front {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The run tried and nothing succeeded (its report is written all the same).
    #[error("{0}")]
    NothingSucceeded(String),
    /// `--replay`: the reader stopped before the recording's end (the report, written
    /// all the same, covers the requests before it).
    #[error("{0}; the report covers the requests before it")]
    ReplayStopped(String),
    /// A search step's plan could not be built (e.g. a connection count the climb
    /// reached exceeds a limit the first step's did not).
    #[error("search step: {0}")]
    Step(#[from] crate::run_plan::PlanError),
    #[error(transparent)]
    Preflight(#[from] crate::cmd::preflight::PreflightError),
    #[error(transparent)]
    Sink(#[from] crate::sink::SinkError),
    #[error("cannot write {path}: {source}")]
    Output {
        path: String,
        source: std::io::Error,
    },
}

const START_DELAY_NS: u64 = 20_000_000;

/// Keeps the calling (collector) thread off the worker cores: on the control core
/// (`--control-core`), so merging histograms and printing never preempts a spinning
/// worker. Threads it starts inherit the control core; workers then pin themselves.
fn keep_off_worker_cores(control: usize) {
    crate::threads::pin_current(control);
}

/// Runs one step of a search or a baseline: no outputs of its own, and a worker's
/// error is the step's error.
pub fn execute_step(
    step: &RunPlan,
    target: SocketAddr,
    stop: &Arc<AtomicBool>,
    live: Live,
) -> Result<Report, RunError> {
    let report = execute(step, target, stop, live, &mut Outputs::none(), &[])?;
    match &report.worker_error {
        Some(e) => Err(RunError::Worker(e.clone())),
        None => Ok(report),
    }
}

/// Runs the plan against `target` (its first `--target`, or the baseline's sink) at
/// the plan's rate for the plan's duration, showing `live` on stderr while it
/// measures; the first of `guards` (`--abort-if`) to hold stops it as Ctrl-C would.
pub fn execute(
    plan: &RunPlan,
    target: SocketAddr,
    stop: &Arc<AtomicBool>,
    live: Live,
    outputs: &mut Outputs,
    guards: &[AbortIf],
) -> Result<Report, RunError> {
    let rate_rps = plan
        .rate_rps
        .expect("a run's plan has a rate (baseline and search steps set theirs)");
    let duration_ns = plan.duration_ns;
    let mut workers = plan.worker_plans(target);
    // Workers get the whole run's rate (each takes its share of the one timetable); the
    // report's intended rate is this shard's share of it.
    let shard_rate_rps = rate_rps / f64::from(plan.fleet.shard.count());
    let rss_before = rss_bytes().unwrap_or(0);
    keep_off_worker_cores(plan.control_core);
    // The replay's reader starts here, off the workers' cores like this thread.
    let mut replay_stopped = None;
    if let Some(r) = &plan.replay {
        let (feeds, stopped) =
            crate::engine::replay::start(r, duration_ns, plan.fleet.shard, workers.len())
                .map_err(|e| WorkerError::Spawn(Arc::new(e)))?;
        for (w, f) in workers.iter_mut().zip(feeds) {
            w.replay = Some(f);
        }
        replay_stopped = Some(stopped);
    }
    let fleet = spawn_workers(&workers, stop)?;
    let readies = fleet.await_ready();
    let setup = setup_of(plan, &readies, rss_before, rate_rps);
    if let Some(e) = unready(plan, target, &readies, workers.len(), &setup) {
        fleet.abort();
        return Err(e);
    }
    // Every worker has pinned itself by now (before its Ready).
    let sampler = crate::threads::Sampler::start(plan.control_core);
    let (clock, start_late_ns, wall_start) = start_clock(plan);
    for c in &fleet.controls {
        let _ = c.send(Control::Start(clock.clone()));
    }
    outputs.start(wall_start);
    let zero = std::time::Instant::now() + Duration::from_nanos(clock.until_start_ns());
    let display = Display::start(live, duration_ns, plan.max_lag_ns, zero);

    let mut host = HostSampler::new(&plan.cores, iface_for(target.ip()));
    let worker_cores: Vec<usize> = workers.iter().map(|w| w.core.unwrap_or(0)).collect();
    let shape = IntervalShape {
        plan,
        rate_rps: shard_rate_rps,
        link_bps: link_bps(plan, host.iface.as_deref()),
    };
    let mut watch = AbortWatch::new(guards, stop);
    // The collector's sets are full only where the workers record (a frames run's
    // request histograms tiny: issue 36).
    let sets = workers.first().map_or(HistShape::FULL, |w| w.hist_shape());
    let mut collected = collect(
        &fleet.snap_rx,
        &fleet.recycle,
        &shape,
        sets,
        duration_ns,
        &display,
        &mut host,
        &worker_cores,
        outputs,
        &mut watch,
    );
    collected.abort = watch.fired;
    // The replay's reader stopped early (the file changed under it): said once the
    // workers have sent what it read before.
    collected.replay_stopped = replay_stopped.and_then(|s| s.get().cloned());
    // Every snapshot is in: the bar leaves the screen before anything else is printed.
    drop(display);
    collected.iface = host.iface.clone();
    fleet.join()?;
    let features = readies
        .first()
        .map(|r| r.features.clone())
        .unwrap_or_default();
    let ran = Ran {
        plan,
        target,
        shard_rate_rps,
        setup: Setup {
            features,
            held_rss_growth: collected.rss_held_max.saturating_sub(rss_before),
            ..setup
        },
        interrupted: stop.load(Ordering::Relaxed),
        start_late_ns,
    };
    Ok(ran.report(collected, sampler.finish()))
}

/// The workers of one run, started and waiting for their start instant.
struct Fleet {
    ready_rx: crossbeam_channel::Receiver<Ready>,
    snap_rx: crossbeam_channel::Receiver<Snapshot>,
    controls: Vec<crossbeam_channel::Sender<Control>>,
    recycle: Vec<crossbeam_channel::Sender<Histograms>>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

/// Spawns one thread per worker plan; each connects, pins itself and reports Ready.
fn spawn_workers(
    workers: &[crate::engine::worker_plan::WorkerPlan],
    stop: &Arc<AtomicBool>,
) -> Result<Fleet, RunError> {
    let n = workers.len();
    let (ready_tx, ready_rx) = unbounded::<Ready>();
    let (snap_tx, snap_rx) = crate::engine::driver::snapshot_channel(n);
    let mut fleet = Fleet {
        ready_rx,
        snap_rx,
        controls: Vec::with_capacity(n),
        recycle: Vec::with_capacity(n),
        handles: Vec::with_capacity(n),
    };
    for wp in workers.iter().cloned() {
        let (ctl_tx, control_rx) = bounded::<Control>(1);
        fleet.controls.push(ctl_tx);
        let (recycle_tx, recycle_rx) = bounded::<Histograms>(2);
        fleet.recycle.push(recycle_tx);
        let ch = Channels {
            ready_tx: ready_tx.clone(),
            control_rx,
            snap_tx: snap_tx.clone(),
            recycle_rx,
        };
        let stop = stop.clone();
        let name = format!("{}{}", crate::threads::WORKER_PREFIX, wp.index);
        let h = std::thread::Builder::new()
            .name(name)
            .spawn(move || match wp.transport {
                _ if wp.frames.is_some() => run_frames_worker(wp, stop, ch),
                Transport::Tcp => run_worker(wp, stop, ch),
                Transport::Udp | Transport::UdpBlast => run_udp_worker(wp, stop, ch),
            })
            .map_err(|e| WorkerError::Spawn(Arc::new(e)))?;
        fleet.handles.push(h);
    }
    // Only the workers hold senders now: a worker that dies before Ready ends the wait.
    Ok(fleet)
}

impl Fleet {
    /// Every worker's Ready (fewer when one died before sending it).
    fn await_ready(&self) -> Vec<Ready> {
        let n = self.handles.len();
        let mut readies: Vec<Ready> = Vec::with_capacity(n);
        while readies.len() < n {
            match self.ready_rx.recv() {
                Ok(r) => readies.push(r),
                Err(_) => break,
            }
        }
        readies
    }

    /// Tells every worker to give up before the start, and waits for them.
    fn abort(self) {
        for c in &self.controls {
            let _ = c.send(Control::Abort);
        }
        for h in self.handles {
            let _ = h.join();
        }
    }

    /// Waits for every worker to end once its totals are in.
    fn join(self) -> Result<(), RunError> {
        for h in self.handles {
            if h.join().is_err() {
                return Err(WorkerError::Panicked.into());
            }
        }
        Ok(())
    }
}

/// What the connecting phase found: connections, their errors and the memory they took.
fn setup_of(plan: &RunPlan, readies: &[Ready], rss_before: u64, rate_rps: f64) -> Setup {
    let first_errno = readies.iter().find_map(|r| r.first_errno);
    Setup {
        features: Vec::new(),
        established: readies.iter().map(|r| r.established).sum::<usize>() as u64,
        establish_ns: readies.iter().map(|r| r.establish_ns).max().unwrap_or(0),
        rss_growth: rss_bytes().unwrap_or(0).saturating_sub(rss_before),
        held_rss_growth: 0,
        first_errno,
        wall: first_errno
            .and_then(|e| crate::cmd::preflight::walls::wall_hint(e, &wall_context(plan))),
        errno_names: CONNECT_ERRNOS
            .iter()
            .map(|&e| crate::cmd::preflight::walls::errno_name(e))
            .chain(std::iter::once("other".to_string()))
            .collect(),
        time_wait: time_wait_warning(plan, rate_rps),
    }
}

/// Why the run cannot start, if it cannot: a worker failed, or no connection opened
/// (a connection per request, or a frames ramp, opens none before the start).
fn unready(
    plan: &RunPlan,
    target: SocketAddr,
    readies: &[Ready],
    n: usize,
    setup: &Setup,
) -> Option<RunError> {
    let fatal = readies.iter().find_map(|r| r.fatal.clone());
    let established = setup.established as usize;
    let ramp = plan.frames.as_ref().is_some_and(|f| f.grid.join_gap_ns > 0);
    let everyone_ready = readies.len() >= n;
    if fatal.is_none() && (established > 0 || plan.per_request || ramp) && everyone_ready {
        return None;
    }
    if let Some(f) = fatal {
        return Some(RunError::Worker(f));
    }
    if let Some((kind, why)) = plan.tls.as_ref().and_then(|t| t.first_failure()) {
        return Some(RunError::Tls {
            server: plan
                .tls
                .as_ref()
                .map_or_else(String::new, |t| t.sni.clone()),
            addr: target,
            kind: kind.name(),
            why,
            failed: plan.connections - established,
            connections: plan.connections,
        });
    }
    let errno = setup.first_errno;
    let join_error = readies.iter().find_map(|r| r.join_error.clone());
    Some(RunError::Connect {
        addr: target,
        reason: match join_error {
            Some(j) if errno.is_none() => j,
            _ => errno.map_or("no connection could be opened".to_string(), |e| {
                let text = crate::engine::socket::errno_text(e);
                match crate::cmd::preflight::walls::wall_hint(e, &wall_context(plan)) {
                    Some(hint) => format!("{text}; {hint}"),
                    None => text,
                }
            }),
        },
        failed: plan.connections - established,
        connections: plan.connections,
    })
}

/// The schedule's time zero on the TSC, how late it is past `--start-at` (ns), and the
/// same instant on the wall clock, for the exporters' timestamps.
fn start_clock(plan: &RunPlan) -> (Clock, u64, std::time::SystemTime) {
    match plan.fleet.start_at_ns {
        Some(at) => {
            let (clock, late) = clock_starting_at(at);
            let wall = std::time::UNIX_EPOCH + Duration::from_nanos(at.saturating_add(late));
            (clock, late, wall)
        }
        None => (
            Clock::new().with_start_in(START_DELAY_NS),
            0,
            std::time::SystemTime::now() + Duration::from_nanos(START_DELAY_NS),
        ),
    }
}

/// A run that has ended: what its report is built from besides what was collected.
struct Ran<'a> {
    plan: &'a RunPlan,
    target: SocketAddr,
    shard_rate_rps: f64,
    setup: Setup,
    interrupted: bool,
    start_late_ns: u64,
}

impl Ran<'_> {
    /// The run's report, from what the collector gathered and the threads' CPU.
    fn report(self, collected: Collected, threads: Vec<crate::threads::ThreadCpu>) -> Report {
        let (plan, duration_ns) = (self.plan, self.plan.duration_ns);
        let worker_error = collected.totals.iter().find_map(|t| t.error.clone());
        let first = collected.counters.first_dispatch;
        let frames = crate::report::frames::build(
            plan,
            &collected.total,
            &collected.counters.frames,
            &collected.totals,
            crate::report::assemble::stopped_ns(&collected.totals, duration_ns),
        );
        let mut report = crate::report::assemble::build(
            plan,
            self.target,
            self.shard_rate_rps,
            duration_ns,
            collected,
            self.setup,
            self.interrupted,
        );
        report.threads = threads;
        report
            .diagnosis
            .extend(frames.as_ref().and_then(crate::report::frames::collisions));
        report.frames = frames;
        let fleet = fleet_report(plan, first, self.start_late_ns);
        report.diagnosis.extend(fleet.clock_warning());
        report.fleet = Some(fleet);
        report.worker_error = worker_error;
        report
    }
}

/// A TSC clock whose start instant is the wall-clock instant `at_ns` (`--start-at`):
/// sleep on the wall clock until shortly before it, then read the wall clock and the
/// TSC together and put the start the remaining distance ahead on the TSC, where the
/// workers spin to it. Past `at_ns` already (connecting took too long), it starts at
/// once and the report's start skew shows by how much it was late (returned: ns past
/// `at_ns` on the wall clock when the timetable began, 0 when on time).
fn clock_starting_at(at_ns: u64) -> (Clock, u64) {
    crate::wallclock::wait_until(at_ns.saturating_sub(START_DELAY_NS));
    let clock = Clock::new();
    let wall = crate::wallclock::now_unix_ns();
    (
        clock.with_start_in(at_ns.saturating_sub(wall)),
        wall.saturating_sub(at_ns),
    )
}

/// The report's `fleet` key: the shard, the start and how far this shard missed it,
/// and the clock's state.
fn fleet_report(plan: &RunPlan, first: Option<(u64, u64)>, start_late_ns: u64) -> FleetReport {
    let f = &plan.fleet;
    FleetReport {
        run_id: f.run_id.clone(),
        shard: f.shard.index(),
        shards: f.shard.count(),
        plan_fingerprint: f.fingerprint.clone(),
        start_at_unix_ms: f.start_at_ns.map(|n| n / 1_000_000),
        start_at: f.start_at_ns.map(crate::wallclock::rfc3339),
        start_skew_ns: f
            .start_at_ns
            .and(first)
            .map(|(intended, dispatched)| start_late_ns + dispatched.saturating_sub(intended)),
        clock: ClockSync::read(),
    }
}

/// Connection per request without `--linger0`: whether the rate would use up the
/// ephemeral ports within TIME_WAIT (60 s), with the numbers and fixes.
pub fn time_wait_warning(plan: &RunPlan, rate_rps: f64) -> Option<Diagnosis> {
    use crate::ports;
    if !plan.per_request || plan.sockopts.linger0 {
        return None;
    }
    let range = ports::read_port_range(std::path::Path::new("/")).ok()?;
    let pairs = ports::Placement::new(plan.connections, plan.sources.len(), plan.targets.len());
    ports::time_wait_warning(rate_rps, pairs.pairs(), range, 60.0)
}

/// The numbers a failed connection's wall message needs.
fn wall_context(plan: &RunPlan) -> crate::cmd::preflight::walls::WallContext {
    use crate::cmd::preflight::walls;
    use crate::ports;
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

/// An interval some workers have not reported yet.
struct Pending {
    histograms: Histograms,
    counters: Counters,
    /// Each reporting worker's core and how it spent the interval.
    usage: Vec<(usize, Usage)>,
}

/// Receives snapshots until every worker sent its last one. An interval is complete
/// when every worker has reported it (or finished); it is then reduced to a [`Row`],
/// handed to the exporters and shown on the live display.
#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename them
fn collect(
    rx: &crossbeam_channel::Receiver<Snapshot>,
    recycle: &[crossbeam_channel::Sender<Histograms>],
    shape: &IntervalShape,
    sets: HistShape,
    duration_ns: u64,
    display: &Display,
    host: &mut HostSampler,
    worker_cores: &[usize],
    outputs: &mut Outputs,
    watch: &mut AbortWatch<'_>,
) -> Collected {
    let workers = recycle.len();
    let mut c = Collected {
        total: Histograms::shaped(sets),
        counters: Counters::default(),
        series: crate::report::series::Series::new(duration_ns),
        totals: vec![WorkerTotals::default(); workers],
        iface: None,
        abort: None,
        replay_stopped: None,
        rss_held_max: 0,
    };
    let mut pending: std::collections::BTreeMap<usize, Pending> = Default::default();
    // Per worker: intervals reported so far (they arrive in order) and whether done.
    let mut reported = vec![0usize; workers];
    let mut finished = vec![false; workers];
    let empty = Pending {
        histograms: Histograms::empty(),
        counters: Counters::default(),
        usage: Vec::new(),
    };
    while finished.iter().any(|f| !f) {
        let snap = match rx.recv_timeout(TICK) {
            Ok(s) => s,
            Err(RecvTimeoutError::Timeout) => {
                display.tick();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let i = snap.interval as usize;
        let p = pending.entry(i).or_insert_with(|| Pending {
            histograms: Histograms::shaped(sets),
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
        } else {
            // The connections held, their buffers in use (a worker's last snapshot
            // comes with its end-of-run totals, which are not).
            c.rss_held_max = c.rss_held_max.max(rss_bytes().unwrap_or(0));
        }
        let mut used = snap.histograms;
        used.reset();
        let _ = recycle[snap.worker].try_send(used);
        // Where the schedule stopped, once every worker has said so.
        let stopped = if finished.iter().all(|&f| f) {
            assemble::stopped_ns(&c.totals, duration_ns)
        } else {
            u64::MAX
        };
        // Complete every interval that all workers have reported or finished past.
        while let Some((&first, _)) = pending.first_key_value() {
            let done = (0..workers).all(|w| finished[w] || reported[w] > first);
            if !done {
                break;
            }
            let p = pending.remove(&first).expect("present");
            // Seconds no worker reported (none had anything to say) still get a row.
            while c.series.seconds() < first {
                let row = complete(
                    c.series.seconds(),
                    &empty,
                    Load {
                        kernel: host.kernel_unsampled(),
                        ..Load::default()
                    },
                    shape,
                    stopped,
                    outputs,
                );
                c.series.push(row, &empty.histograms);
            }
            let row = complete(
                first,
                &p,
                Load::of(&p.usage, &host.sample()),
                shape,
                stopped,
                outputs,
            );
            watch.second(
                first,
                &p,
                &row,
                shape.plan,
                shape.intended_rps(first, stopped),
            );
            display.second(&Second {
                index: first as u64,
                achieved_rps: row.completed as f64,
                intended_rps: shape.intended_rps(first, stopped),
                latency: &row.latency,
                errors: row.errors,
                lag_p99_ns: row.lag_p99,
                frames: row
                    .frames
                    .as_ref()
                    .map(|(c, dev)| crate::report::frames::FrameInterval::of(c, dev, 1.0)),
            });
            c.series.push(row, &p.histograms);
        }
    }
    c
}

/// The `--abort-if` conditions over the completed seconds: each its streak of seconds
/// in a row that broke it; the first whose streak reaches its window stops the run.
struct AbortWatch<'a> {
    guards: &'a [AbortIf],
    streaks: Vec<u64>,
    stop: &'a AtomicBool,
    fired: Option<crate::report::AbortReport>,
}

impl<'a> AbortWatch<'a> {
    fn new(guards: &'a [AbortIf], stop: &'a AtomicBool) -> Self {
        AbortWatch {
            guards,
            streaks: vec![0; guards.len()],
            stop,
            fired: None,
        }
    }

    /// Judges second `i` (its interval `p`, reduced to `row`) against every guard.
    fn second(&mut self, i: usize, p: &Pending, row: &Row, plan: &RunPlan, intended_rps: f64) {
        if self.guards.is_empty() || self.fired.is_some() {
            return;
        }
        let f = &p.counters.frames;
        let o = Observed {
            latency: &p.histograms.latency,
            dispatched: p.counters.dispatched,
            errors: p.counters.request_errors(),
            intended_rps,
            achieved_rps: row.completed as f64 / row.len_s.max(1) as f64,
            deviation: plan.frames.as_ref().map(|_| &p.histograms.frame_deviation),
            retention: (f.received + f.lost > 0)
                .then(|| f.received as f64 / (f.received + f.lost) as f64),
        };
        for (g, streak) in self.guards.iter().zip(self.streaks.iter_mut()) {
            match g.broken(&o) {
                Some(true) => *streak += 1,
                Some(false) => *streak = 0,
                None => {}
            }
            if *streak >= g.seconds {
                self.fired = Some(crate::report::AbortReport {
                    condition: g.condition(),
                    window_s: g.seconds,
                    fired_at_s: (i + 1) as u64,
                });
                self.stop.store(true, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// Reduces completed interval `i` to its [`Row`] and hands it to the exporters. The
/// histograms are encoded once, for the JSON and every exporter, and not at all when
/// neither wants them.
fn complete(
    i: usize,
    p: &Pending,
    load: Load,
    shape: &IntervalShape,
    stopped_ns: u64,
    outputs: &mut Outputs,
) -> Row {
    let embed = i < INTERVAL_HISTOGRAMS_JSON_MAX;
    let encoded = if embed || !outputs.is_empty() {
        Encoded4::of(&p.histograms)
    } else {
        Encoded4::default()
    };
    let row = Row {
        start_s: i as u64,
        len_s: 1,
        completed: p.counters.completed,
        errors: p.counters.request_errors(),
        reconnects: p.counters.reconnects,
        latency: Percentiles::of(&p.histograms.latency),
        lag_p99: Percentiles::of(&p.histograms.dispatch_lag).p99,
        frames: shape.plan.frames.as_ref().map(|_| {
            (
                p.counters.frames,
                Percentiles::of(&p.histograms.frame_deviation),
            )
        }),
        load,
        histograms: embed.then(|| encoded.clone()),
    };
    if !outputs.is_empty() {
        outputs.interval(&IntervalView {
            row: &shape.interval(&row, stopped_ns),
            histograms: &p.histograms,
            counters: &p.counters,
            encoded: &encoded,
        });
    }
    row
}
