//! The thread protocol every worker loop (TCP and UDP) shares with the main thread and
//! the collector: pin, set up, connect, say [`Ready`], wait for [`Control`], run,
//! quiesce; and the [`Outbox`] that carries each interval's figures to the collector.

use super::pacing::Pacer;
use super::recorder::{Counters, Histograms, Snapshot, WorkerTotals};
use super::ring::{FAULT_SUBMIT_ENV, Ring};
use super::worker_plan::WorkerPlan;
use crate::clock::Clock;
use crossbeam_channel::{Receiver, Sender};
use std::sync::atomic::AtomicBool;

/// Sent once the worker's connections are open (or failed), before the schedule starts.
#[derive(Debug, Clone)]
pub struct Ready {
    pub worker: usize,
    pub established: usize,
    pub failed: usize,
    /// errno of the first failed connect or socket creation.
    pub first_errno: Option<i32>,
    /// From the first connect to the last established one, ns.
    pub establish_ns: u64,
    /// A setup failure that stops this worker (ring, pinning is not one).
    pub fatal: Option<String>,
    pub features: Vec<&'static str>,
}

/// What stops a worker in the middle of its run. The worker ends its run at once, sends
/// what it measured so far (its last snapshot carries the error), and the run ends
/// with this as its one line and exit code 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerError {
    /// io_uring_enter failed with an error that is not transient (ENOMEM, say): the
    /// ring cannot take more work.
    #[error("worker {worker}: io_uring submit failed: {}", std::io::Error::from_raw_os_error(*.errno))]
    Submit { worker: usize, errno: i32 },
}

impl WorkerError {
    /// A failed submit of worker `worker`.
    pub fn submit(worker: usize, e: &std::io::Error) -> WorkerError {
        WorkerError::Submit {
            worker,
            errno: e.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

/// The main thread's answer to [`Ready`].
#[derive(Clone)]
pub enum Control {
    /// Run the schedule; the clock's start instant is the schedule's time zero.
    Start(Clock),
    Abort,
}

/// A worker's channels to the main thread and the collector.
pub struct Channels {
    pub ready_tx: Sender<Ready>,
    pub control_rx: Receiver<Control>,
    pub snap_tx: Sender<Snapshot>,
    /// Histograms the collector has merged and reset, handed back for reuse so the
    /// worker does not allocate at interval boundaries once the run is warm.
    pub recycle_rx: Receiver<Histograms>,
}

/// A worker loop as the thread that drives it sees it (TCP and UDP).
pub trait Engine {
    /// Opens the connections (or flows) and says how that went.
    fn connect(&mut self, stop: &AtomicBool) -> Ready;
    /// Runs the schedule from `clock`'s start instant to its end.
    fn run_from(&mut self, clock: Clock, stop: &AtomicBool);
    /// Closes everything and waits for the kernel to let go of the buffers.
    fn quiesce(&mut self);
}

/// One worker thread: pin, set up, connect, report ready, run when told, quiesce.
/// Every outcome, setup failure included, is reported on the channels, so the main
/// thread never waits forever.
pub fn drive<'p, W: Engine>(
    plan: &'p WorkerPlan,
    stop: &AtomicBool,
    ch: Channels,
    what: &str,
    make: impl FnOnce(&'p WorkerPlan, Sender<Snapshot>, Receiver<Histograms>) -> std::io::Result<W>,
) {
    let Channels {
        ready_tx,
        control_rx,
        snap_tx,
        recycle_rx,
    } = ch;
    if let Some(core) = plan.core {
        crate::threads::pin_current(core);
    }
    let mut w = match make(plan, snap_tx, recycle_rx) {
        Ok(w) => w,
        Err(e) => return setup_failed(&ready_tx, plan, what, &e),
    };
    let ready = w.connect(stop);
    let fatal = ready.fatal.is_some();
    let _ = ready_tx.send(ready);
    if !fatal && let Ok(Control::Start(clock)) = control_rx.recv() {
        w.run_from(clock, stop);
    }
    w.quiesce();
}

/// What a worker records for the current interval, and the channels to the collector.
pub struct Outbox {
    worker: usize,
    pub hist: Histograms,
    pub counters: Counters,
    snap_tx: Sender<Snapshot>,
    recycle_rx: Receiver<Histograms>,
}

impl Outbox {
    pub fn new(worker: usize, snap_tx: Sender<Snapshot>, recycle_rx: Receiver<Histograms>) -> Self {
        Outbox {
            worker,
            hist: Histograms::new(),
            counters: Counters::default(),
            snap_tx,
            recycle_rx,
        }
    }

    /// Sends this interval's figures and starts the next interval from zero, with
    /// histograms the collector handed back (allocating only until it has).
    pub fn send(&mut self, interval: u64, last: Option<WorkerTotals>, pace: &mut Pacer) {
        let fresh = self.recycle_rx.try_recv().unwrap_or_default();
        let snap = Snapshot {
            worker: self.worker,
            interval,
            histograms: std::mem::replace(&mut self.hist, fresh),
            counters: std::mem::take(&mut self.counters),
            usage: pace.take_usage(),
            last,
        };
        let _ = self.snap_tx.send(snap);
    }
}

/// Tells the main thread that worker `plan.index` could not start.
pub fn setup_failed(ready_tx: &Sender<Ready>, plan: &WorkerPlan, what: &str, e: &std::io::Error) {
    let _ = ready_tx.send(Ready {
        worker: plan.index,
        established: 0,
        failed: plan.connections,
        first_errno: e.raw_os_error(),
        establish_ns: 0,
        fatal: Some(format!("worker {}: {what} failed: {e}", plan.index)),
        features: Vec::new(),
    });
}

/// Arms the ring's submit-failure hook when the test environment asks for it
/// ([`FAULT_SUBMIT_ENV`]); the end-to-end test of the submit-error path uses it.
pub fn arm_fault_hook(ring: &mut Ring) {
    if let Some(n) = std::env::var(FAULT_SUBMIT_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
    {
        ring.fail_submits_after(n);
    }
}

/// Sleeps, then spins, until the schedule's start instant.
pub fn wait_for_start(clock: &Clock, spin_ns: u64) {
    let until = clock.until_start_ns();
    if until > spin_ns {
        std::thread::sleep(std::time::Duration::from_nanos(until - spin_ns));
    }
    while clock.until_start_ns() > 0 {
        std::hint::spin_loop();
    }
}
