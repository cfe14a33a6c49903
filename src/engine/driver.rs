//! The thread protocol every worker (TCP, UDP, frames) shares with the main thread and
//! the collector: pin, set up, connect, say [`Ready`], wait for [`Control`], run the
//! one loop ([`run`]), quiesce; and the [`Outbox`] that carries each interval's
//! figures to the collector.

use super::pacing::Pacer;
use super::recorder::{Counters, HistShape, Histograms, Snapshot, WorkerTotals};
use super::ring::{FAULT_SUBMIT_ENV, PushError, Ring};
use super::run_loop::{Hooks, run};
use super::worker_plan::WorkerPlan;
use crate::clock::Clock;
use crate::limits::SNAPSHOTS_QUEUED_PER_WORKER;
use crate::transport::tls::{TlsClient, TlsFailure};
use crossbeam_channel::{Receiver, Sender};
use std::sync::Arc;
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
    pub fatal: Option<WorkerError>,
    pub features: Vec<&'static str>,
    /// Why the first failed protocol handshake failed: a join (frames with
    /// `--frame-proto`), or a server that did not take HTTP/2 (`--http2`).
    pub join_error: Option<String>,
}

/// What stops a worker, in its setup, its connect phase or the middle of its run, and
/// what stops the main thread from starting or joining one. A worker that fails in
/// its run ends it at once and sends what it measured so far (its last snapshot
/// carries the error); either way the run ends with this as its one line and exit
/// code 1.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WorkerError {
    /// io_uring_enter failed with an error that is not transient (ENOMEM, say): the
    /// ring cannot take more work.
    #[error("worker {worker}: io_uring submit failed: {}", std::io::Error::from_raw_os_error(*.errno))]
    Submit { worker: usize, errno: i32 },
    /// A push found the submission queue full through `rounds` rounds of submitting and
    /// moving completions out of the way ([`crate::limits::PUSH_ROUNDS_MAX`]).
    #[error(
        "worker {worker}: io_uring submission queue stayed full after {rounds} submits: the kernel took no more work"
    )]
    SubmitStuck { worker: usize, rounds: u32 },
    /// The worker could not set itself up (its ring, its sockets); `what` names the
    /// step (`io_uring setup`).
    #[error("worker {worker}: {what} failed: {source}")]
    Setup {
        worker: usize,
        what: &'static str,
        source: Arc<std::io::Error>,
    },
    /// The main thread could not start a worker thread.
    #[error("cannot start a worker thread: {0}")]
    Spawn(Arc<std::io::Error>),
    /// A worker thread panicked.
    #[error("a worker thread panicked")]
    Panicked,
}

impl WorkerError {
    /// A failed submit or push of worker `worker`.
    pub fn submit(worker: usize, e: &impl RingFailure) -> WorkerError {
        e.worker_error(worker)
    }
}

/// What the ring may fail with: a submit's error or a push's.
pub trait RingFailure {
    /// The error that ends worker `worker`.
    fn worker_error(&self, worker: usize) -> WorkerError;
}

impl RingFailure for std::io::Error {
    fn worker_error(&self, worker: usize) -> WorkerError {
        WorkerError::Submit {
            worker,
            errno: self.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

impl RingFailure for PushError {
    fn worker_error(&self, worker: usize) -> WorkerError {
        match self {
            PushError::Submit(e) => e.worker_error(worker),
            PushError::Full { rounds } => WorkerError::SubmitStuck {
                worker,
                rounds: *rounds,
            },
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

/// One worker thread: pin, set up, connect, report ready, run when told, quiesce.
/// Every outcome, setup failure included, is reported on the channels, so the main
/// thread never waits forever.
pub fn drive<'p, W: Hooks>(
    plan: &'p WorkerPlan,
    stop: &AtomicBool,
    ch: Channels,
    what: &'static str,
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
        Err(e) => return setup_failed(&ready_tx, plan, what, e),
    };
    let ready = w.connect(stop);
    let fatal = ready.fatal.is_some();
    let _ = ready_tx.send(ready);
    if !fatal && let Ok(Control::Start(clock)) = control_rx.recv() {
        // The spare histogram sets serve interval boundaries, which only the run has:
        // allocated here, not during the connect phase (issue 22: at 11 rings a core,
        // 200,000 held connections, they were 350 B of each connection's memory).
        w.out().arm_spares();
        run(&mut w, plan, clock, stop);
    }
    w.quiesce();
}

/// The channel that carries the workers' snapshots to the collector: bounded
/// ([`SNAPSHOTS_QUEUED_PER_WORKER`] per worker), so sending allocates nothing; a full
/// channel makes the worker wait rather than drop a snapshot.
pub fn snapshot_channel(workers: usize) -> (Sender<Snapshot>, Receiver<Snapshot>) {
    crossbeam_channel::bounded(workers.max(1) * SNAPSHOTS_QUEUED_PER_WORKER)
}

/// Histogram sets a worker allocates when its run starts (not during the connect phase,
/// where no interval ends) beside the one it records into,
/// so an interval boundary never allocates on the worker thread: the collector hands
/// each set back once merged (a channel of depth 2, `run::spawn`), so the
/// spares cover a collector up to this many intervals behind. Each set is about
/// 3 MB (eleven histograms of an hour at 3 significant digits; 1.35 MB for frames).
/// One: the collector merges a set in about a millisecond, and a second spare was
/// 135 B of each held frames connection at 10,000 a ring (issue 36); a collector
/// a whole interval late is counted (`workers[].histogram_allocations`).
pub const HISTOGRAM_SPARES: usize = 1;

/// What a worker records for the current interval, and the channels to the collector.
pub struct Outbox {
    worker: usize,
    pub hist: Histograms,
    pub counters: Counters,
    snap_tx: Sender<Snapshot>,
    recycle_rx: Receiver<Histograms>,
    /// Sets allocated when the run starts ([`HISTOGRAM_SPARES`], [`Outbox::arm_spares`]), refilled from the collector's
    /// returns; never grows beyond its capacity.
    spares: Vec<Histograms>,
    /// Interval boundaries that found neither a returned set nor a spare and allocated
    /// one on the worker thread (reported per worker; 0 unless the collector lags).
    allocations: u64,
    /// The histograms this worker records into (its sets' shape).
    shape: HistShape,
}

impl Outbox {
    pub fn new(worker: usize, snap_tx: Sender<Snapshot>, recycle_rx: Receiver<Histograms>) -> Self {
        Self::shaped(worker, HistShape::FULL, snap_tx, recycle_rx)
    }

    /// An outbox whose sets hold full histograms only where `shape` records.
    pub fn shaped(
        worker: usize,
        shape: HistShape,
        snap_tx: Sender<Snapshot>,
        recycle_rx: Receiver<Histograms>,
    ) -> Self {
        Outbox {
            worker,
            shape,
            hist: Histograms::shaped(shape),
            counters: Counters::default(),
            snap_tx,
            recycle_rx,
            spares: Vec::with_capacity(HISTOGRAM_SPARES),
            allocations: 0,
        }
    }

    /// A connection's TLS handshake completed after `took_ns`: its time recorded, the
    /// handshake counted full or resumed.
    pub fn tls_opened(&mut self, took_ns: u64, resumed: bool) {
        self.hist.tls_handshake.saturating_record(took_ns);
        let t = &mut self.counters.tls;
        if resumed {
            t.resumed += 1;
        } else {
            t.full += 1;
        }
    }

    /// A connection's TLS handshake failed (`kind`, rustls's `why`): counted by kind
    /// as a failed connection attempt, and remembered by `client` for the run's one
    /// line. Closing the connection is the workload's business.
    #[cold]
    pub fn tls_failed(&mut self, client: Option<&TlsClient>, kind: TlsFailure, why: &str) {
        if let Some(tls) = client {
            tls.note_failure(kind, why);
        }
        self.counters.tls.failed[kind as usize] += 1;
        self.counters.connections_failed += 1;
    }

    /// Allocates the spare sets ([`HISTOGRAM_SPARES`]): called once the schedule is
    /// about to start, so that a worker holding connections through its connect phase
    /// holds one set, not three (each about 3 MB).
    pub fn arm_spares(&mut self) {
        while self.spares.len() < HISTOGRAM_SPARES {
            self.spares.push(Histograms::shaped(self.shape));
        }
    }

    /// A reset set for the next interval: one the collector handed back, else a spare;
    /// allocated (and counted) only when the collector is more than the spares behind.
    /// Returns beyond the one taken refill the spares (up to their capacity).
    fn fresh(&mut self) -> Histograms {
        let fresh = match self.recycle_rx.try_recv() {
            Ok(h) => Some(h),
            Err(_) => self.spares.pop(),
        };
        while self.spares.len() < HISTOGRAM_SPARES
            && let Ok(h) = self.recycle_rx.try_recv()
        {
            self.spares.push(h);
        }
        fresh.unwrap_or_else(|| {
            self.allocations += 1;
            Histograms::shaped(self.shape)
        })
    }

    /// The warm-up ended: forgets what was recorded so far (histograms, counters, the
    /// pacer's usage) without sending it. Resets in place: no allocation.
    pub fn discard_warmup(&mut self, pace: &mut Pacer) {
        self.hist.reset_warmup();
        self.counters = Counters::default();
        let _ = pace.take_usage();
    }

    /// Sends this interval's figures and starts the next interval from zero, with
    /// histograms the collector handed back or a spare (see [`HISTOGRAM_SPARES`]).
    /// The last snapshot carries the count of boundaries that had to allocate. The
    /// channel is bounded ([`snapshot_channel`]): nothing is allocated to send, and
    /// a full channel waits for the collector instead of dropping the snapshot.
    pub fn send(&mut self, interval: u64, mut last: Option<WorkerTotals>, pace: &mut Pacer) {
        let fresh = self.fresh();
        if let Some(t) = &mut last {
            t.histogram_allocations = self.allocations;
        }
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
pub fn setup_failed(
    ready_tx: &Sender<Ready>,
    plan: &WorkerPlan,
    what: &'static str,
    e: std::io::Error,
) {
    let _ = ready_tx.send(Ready {
        worker: plan.index,
        established: 0,
        failed: plan.connections,
        first_errno: e.raw_os_error(),
        establish_ns: 0,
        fatal: Some(WorkerError::Setup {
            worker: plan.index,
            what,
            source: Arc::new(e),
        }),
        features: Vec::new(),
        join_error: None,
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    /// The lib's test binary allocates through this: it counts, per thread, every
    /// allocation the thread makes, so a test can prove a piece of code allocates
    /// nothing on the thread that runs it.
    struct Counting;

    thread_local! {
        static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    }

    fn count_one() {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
    }

    /// Allocations made so far by the calling thread.
    pub(crate) fn allocations_here() -> u64 {
        ALLOCATIONS.with(Cell::get)
    }

    // SAFETY: every call is forwarded to the system allocator unchanged; counting
    // touches only a const-initialised thread-local Cell, which never allocates.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            count_one();
            // SAFETY: forwarded to the caller's contract.
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            count_one();
            // SAFETY: forwarded to the caller's contract.
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            count_one();
            // SAFETY: forwarded to the caller's contract.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: forwarded to the caller's contract.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static COUNTING: Counting = Counting;

    /// Issue 22, part 6: a minute of one-second interval boundaries, through the run's
    /// own snapshot channel to a collector that keeps up (it merges and hands the
    /// histograms back, as `run::collect` does), allocates nothing on the worker
    /// thread: neither histograms (the spares and returns) nor the channel (bounded;
    /// the unbounded one allocated a block every 31 snapshots). The collector answers
    /// each snapshot before the next is sent, as a second apart it would.
    #[test]
    fn a_minute_of_interval_boundaries_allocates_nothing_on_the_worker() {
        let (snap_tx, snap_rx) = snapshot_channel(1);
        let (recycle_tx, recycle_rx) = crossbeam_channel::bounded(2);
        let (ack_tx, ack_rx) = crossbeam_channel::bounded::<()>(1);
        let collector = std::thread::spawn(move || {
            for snap in snap_rx.iter() {
                let last = snap.last.is_some();
                let mut used = snap.histograms;
                used.reset();
                let _ = recycle_tx.try_send(used);
                let _ = ack_tx.send(());
                if last {
                    break;
                }
            }
        });
        let mut out = Outbox::new(0, snap_tx, recycle_rx);
        out.arm_spares(); // as `drive` does when the run starts
        let mut pace = Pacer::start(1_000_000_000, 1_000_000_000);
        // Warm: the first waits on the acknowledgements set up crossbeam's per-thread
        // waiting context.
        for i in 0..3 {
            out.send(i, None, &mut pace);
            ack_rx.recv().unwrap();
        }
        let mut at_boundaries = 0;
        for i in 3..63 {
            let before = allocations_here();
            out.send(i, None, &mut pace);
            at_boundaries += allocations_here() - before;
            ack_rx.recv().unwrap();
        }
        out.send(63, Some(WorkerTotals::default()), &mut pace);
        collector.join().unwrap();
        assert_eq!(at_boundaries, 0, "allocations at 60 interval boundaries");
        assert_eq!(out.allocations, 0, "histogram sets allocated");
    }

    /// A push that found no room within the bound ends the worker with its own one
    /// line; a failed submit keeps its errno.
    #[test]
    fn a_full_ring_and_a_failed_submit_are_told_apart() {
        let full = WorkerError::submit(3, &PushError::Full { rounds: 64 });
        assert!(matches!(
            full,
            WorkerError::SubmitStuck {
                worker: 3,
                rounds: 64
            }
        ));
        assert!(
            full.to_string()
                .starts_with("worker 3: io_uring submission queue stayed full after 64 submits"),
            "{full}"
        );
        let enomem = std::io::Error::from_raw_os_error(libc::ENOMEM);
        let failed = WorkerError::submit(1, &PushError::Submit(enomem));
        assert!(matches!(
            failed,
            WorkerError::Submit {
                worker: 1,
                errno: libc::ENOMEM
            }
        ));
    }

    /// A setup failure and the main thread's own failures read as they always did.
    #[test]
    fn setup_and_thread_failures_keep_their_line() {
        let enomem = || Arc::new(std::io::Error::from_raw_os_error(libc::ENOMEM));
        let setup = WorkerError::Setup {
            worker: 2,
            what: "io_uring setup",
            source: enomem(),
        };
        assert_eq!(
            setup.to_string(),
            format!("worker 2: io_uring setup failed: {}", enomem())
        );
        assert_eq!(
            WorkerError::Spawn(enomem()).to_string(),
            format!("cannot start a worker thread: {}", enomem())
        );
        assert_eq!(
            WorkerError::Panicked.to_string(),
            "a worker thread panicked"
        );
    }

    #[test]
    fn the_counting_allocator_sees_this_threads_allocations() {
        // The proof above is only as good as the counter: an allocation must show.
        let before = allocations_here();
        let v = std::hint::black_box(vec![1u8; 100]);
        assert!(allocations_here() > before);
        drop(v);
    }

    fn outbox() -> (
        Outbox,
        crossbeam_channel::Receiver<Snapshot>,
        crossbeam_channel::Sender<Histograms>,
    ) {
        let (snap_tx, snap_rx) = crossbeam_channel::unbounded();
        let (recycle_tx, recycle_rx) = crossbeam_channel::bounded(2);
        (Outbox::new(0, snap_tx, recycle_rx), snap_rx, recycle_tx)
    }

    /// Issue 11 §6: a collector that hands nothing back for HISTOGRAM_SPARES intervals
    /// costs no allocation on the worker thread; one more interval behind is counted;
    /// returns refill the spares, so a collector that catches up costs nothing more.
    #[test]
    fn interval_boundaries_use_spares_and_count_what_they_allocate() {
        let (mut out, snap_rx, recycle_tx) = outbox();
        assert!(out.spares.is_empty(), "no spares during the connect phase");
        out.arm_spares();
        let mut pace = Pacer::start(1_000_000_000, 1_000_000_000);
        for i in 0..HISTOGRAM_SPARES as u64 {
            out.send(i, None, &mut pace);
        }
        assert_eq!(out.allocations, 0, "the spares cover a lagging collector");
        out.send(9, None, &mut pace);
        assert_eq!(
            out.allocations, 1,
            "no return, no spare: one allocation, counted"
        );
        // The collector catches up: sets back, one taken, one kept as a spare.
        for snap in snap_rx.try_iter().take(2) {
            recycle_tx.send(snap.histograms).unwrap();
        }
        out.send(10, None, &mut pace);
        assert_eq!(out.spares.len(), 1);
        out.send(11, None, &mut pace);
        assert_eq!(out.allocations, 1, "the refilled spare served");
        out.send(12, Some(WorkerTotals::default()), &mut pace);
        let last = snap_rx.try_iter().last().unwrap().last.unwrap();
        assert_eq!(last.histogram_allocations, out.allocations);
        assert!(
            out.spares.capacity() <= HISTOGRAM_SPARES,
            "spares never grow"
        );
    }
}
