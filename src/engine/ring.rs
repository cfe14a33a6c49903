//! The ring wrapper: builds the ring with the best setup flags the kernel accepts
//! (probing by trying, falling back cleanly), pushes entries with a full-queue path
//! (submit, then retry), and waits for completions with a timeout.

use crate::limits::{IOWQ_WORKERS_MAX, RING_ENTRIES_MAX};
use io_uring::{IoUring, squeue, types};
use std::io;
use std::os::fd::RawFd;

/// The kernel's ceiling on completion queue entries (`IORING_MAX_CQ_ENTRIES`).
const CQ_ENTRIES_MAX: u32 = 65536;

pub struct Ring {
    pub uring: IoUring,
    /// Names of the setup flags and features in use, for the report.
    pub features: Vec<&'static str>,
    /// Test hook ([`Ring::fail_submits_after`]): submits left before every submit fails.
    submits_left: Option<u64>,
}

/// Environment variable that makes a worker's ring fail its submits after this many
/// with ENOMEM: the end-to-end test of the submit-error path. Not for users.
pub const FAULT_SUBMIT_ENV: &str = "BLASTER_TEST_FAIL_SUBMIT_AFTER";

impl Ring {
    /// A ring of `entries` (rounded and clamped), completion queue twice as large.
    pub fn new(entries: u32) -> io::Result<Ring> {
        Ring::with_completions(entries, 2)
    }

    /// [`Ring::new`] with `per_entry` completion queue entries per submission queue
    /// entry (at most the kernel's 65,536 in all): a server whose multishot accepts
    /// and receives post many completions per submission wants more than two.
    pub fn with_completions(entries: u32, per_entry: u32) -> io::Result<Ring> {
        let entries = entries.clamp(8, RING_ENTRIES_MAX).next_power_of_two();
        let cq_entries = entries.saturating_mul(per_entry).min(CQ_ENTRIES_MAX);
        type Setup = (&'static [&'static str], fn(&mut io_uring::Builder));
        let attempts: [Setup; 3] = [
            (&["single_issuer", "defer_taskrun"], |b| {
                b.setup_single_issuer()
                    .setup_defer_taskrun()
                    .setup_taskrun_flag();
            }),
            (&["coop_taskrun"], |b| {
                b.setup_coop_taskrun().setup_taskrun_flag();
            }),
            (&[], |_| {}),
        ];
        let mut last_err = None;
        for (names, apply) in attempts {
            let mut b = IoUring::builder();
            b.setup_cqsize(cq_entries);
            apply(&mut b);
            match b.build(entries) {
                Ok(uring) => {
                    let mut features: Vec<&'static str> = names.to_vec();
                    let p = uring.params();
                    if p.is_feature_ext_arg() {
                        features.push("ext_arg");
                    }
                    if p.is_feature_fast_poll() {
                        features.push("fast_poll");
                    }
                    if p.is_feature_nodrop() {
                        features.push("nodrop");
                    }
                    if !p.is_feature_ext_arg() {
                        return Err(io::Error::other(
                            "io_uring without IORING_FEAT_EXT_ARG (kernel 5.11+) is not supported",
                        ));
                    }
                    return Ok(Ring {
                        uring,
                        features,
                        submits_left: None,
                    });
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("io_uring setup failed")))
    }

    /// Keeps the kernel's io-wq helper threads of the calling thread on `core` and
    /// bounds how many there may be, so every thread of the generator stays on
    /// `--cores` (the io_uring form of aligning a runtime's threads to its cores).
    ///
    /// io-wq workers belong to the task that submits (this worker thread), are created
    /// on demand for operations that cannot complete inline or through a poll, and by
    /// default may run on any CPU the process may use: one would preempt another
    /// worker's spinning loop. `IORING_REGISTER_IOWQ_AFF` confines them to `core`;
    /// `IORING_REGISTER_IOWQ_MAX_WORKERS` caps them at [`IOWQ_WORKERS_MAX`]. Each
    /// success is named in `features` (`iowq_affinity`, `iowq_max_workers`); a kernel
    /// without them (before 5.14) leaves the defaults, which the thread report at the
    /// end of the run then shows. Call it from the thread that submits, after the ring
    /// is built; `core` is `None` for an unpinned worker (affinity left alone).
    pub fn confine_io_workers(&mut self, core: Option<usize>) {
        if let Some(core) = core.filter(|&c| c < libc::CPU_SETSIZE as usize) {
            // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: `core` < CPU_SETSIZE (checked above), so the bit is inside `set`.
            unsafe { libc::CPU_SET(core, &mut set) };
            if self.uring.submitter().register_iowq_aff(&set).is_ok() {
                self.features.push("iowq_affinity");
            }
        }
        let mut max = IOWQ_WORKERS_MAX;
        if self
            .uring
            .submitter()
            .register_iowq_max_workers(&mut max)
            .is_ok()
        {
            self.features.push("iowq_max_workers");
        }
    }

    /// Queues an entry; when the submission queue is full, submits what is there first.
    ///
    /// # Safety
    /// Every buffer and address the entry points to must stay valid and unmoved until
    /// its completion has been reaped.
    #[inline]
    pub unsafe fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: forwarded to the caller's contract above.
            if unsafe { self.uring.submission().push(entry) }.is_ok() {
                return Ok(());
            }
            self.submit()?;
        }
    }

    /// Queues `entries` next to each other (a linked chain must not be split by a
    /// submit), submitting first when they do not fit.
    ///
    /// # Safety
    /// As [`Ring::push`], for every entry.
    pub unsafe fn push_all(&mut self, entries: &[squeue::Entry]) -> io::Result<()> {
        loop {
            // SAFETY: forwarded to the caller's contract above.
            if unsafe { self.uring.submission().push_multiple(entries) }.is_ok() {
                return Ok(());
            }
            self.submit()?;
        }
    }

    /// Test hook: after `n` more submits, every submit fails with ENOMEM (a
    /// non-transient error), as a kernel out of memory would make it.
    pub fn fail_submits_after(&mut self, n: u64) {
        self.submits_left = Some(n);
    }

    /// The injected failure, when the test hook's count has run out.
    #[inline]
    fn injected_failure(&mut self) -> io::Result<()> {
        match &mut self.submits_left {
            None => Ok(()),
            Some(0) => Err(io::Error::from_raw_os_error(libc::ENOMEM)),
            Some(n) => {
                *n -= 1;
                Ok(())
            }
        }
    }

    /// Free entries in the submission queue now. A caller that has work to do before
    /// any submit (the sink publishes the receive buffers the entries may pick) checks
    /// this before [`Ring::push_all`], which submits when the entries do not fit.
    #[inline]
    pub fn sq_room(&mut self) -> usize {
        let sq = self.uring.submission();
        sq.capacity() - sq.len()
    }

    /// Submits everything queued without waiting.
    #[inline]
    pub fn submit(&mut self) -> io::Result<()> {
        self.injected_failure()?;
        match self.uring.submit() {
            Ok(_) => Ok(()),
            Err(e) if is_transient(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether a submit would have any work to do (entries queued, deferred task work,
    /// or overflowed completions to flush). When false, a spinning loop can skip the
    /// syscall and just look at the completion queue.
    #[inline]
    pub fn needs_enter(&mut self) -> bool {
        let sq = self.uring.submission();
        !sq.is_empty() || sq.taskrun() || sq.cq_overflow()
    }

    /// Submits and waits for at least one completion or `timeout_ns`, whichever first.
    pub fn submit_and_wait_ns(&mut self, timeout_ns: u64) -> io::Result<()> {
        let ts = types::Timespec::new()
            .sec(timeout_ns / 1_000_000_000)
            .nsec((timeout_ns % 1_000_000_000) as u32);
        let args = types::SubmitArgs::new().timespec(&ts);
        self.injected_failure()?;
        match self.uring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e) if is_transient(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Moves up to `out.len()` completions, (user data, result), into `out` in the
    /// order the kernel posted them; returns how many. For workers whose operations
    /// each end with one completion (no multishot).
    #[inline]
    pub fn reap_into(&mut self, out: &mut [(u64, i32)]) -> usize {
        // `out` first: a full `out` ends the zip before a completion is taken.
        let mut n = 0;
        for (slot, cqe) in out.iter_mut().zip(self.uring.completion()) {
            *slot = (cqe.user_data(), cqe.result());
            n += 1;
        }
        n
    }

    /// At the end of a worker: submits and waits until the `ops` operations still in
    /// the ring (each ending with one completion) have completed, or until `quiet`
    /// passes with none completing, or the ring fails. Returns how many are left (the
    /// caller then must not free the buffers they point to).
    pub fn wait_out(&mut self, mut ops: u64, quiet: std::time::Duration) -> u64 {
        let mut deadline = std::time::Instant::now() + quiet;
        while ops > 0 && std::time::Instant::now() < deadline {
            if self.submit_and_wait_ns(10_000_000).is_err() {
                break;
            }
            let n = self.uring.completion().count() as u64;
            ops = ops.saturating_sub(n);
            if n > 0 {
                deadline = std::time::Instant::now() + quiet;
            }
        }
        ops
    }
}

/// Where an operation on a socket points: a slot of the ring's file table (a direct
/// descriptor, or a socket registered there: no per-operation descriptor lookup) or an
/// ordinary descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Fd(RawFd),
    Fixed(u32),
}

/// Builds an entry on either kind of [`Target`]: the crate's `types::Fd` and
/// `types::Fixed` are distinct types, so the builder is written once and expanded
/// for each.
macro_rules! on_target {
    ($target:expr, |$t:ident| $build:expr) => {
        match $target {
            $crate::engine::ring::Target::Fd(fd) => {
                let $t = ::io_uring::types::Fd(fd);
                $build
            }
            $crate::engine::ring::Target::Fixed(slot) => {
                let $t = ::io_uring::types::Fixed(slot);
                $build
            }
        }
    };
}
pub(crate) use on_target;

/// Results of io_uring_enter that only mean "nothing happened this time".
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use io_uring::opcode;

    #[test]
    fn builds_with_features_and_clamps_size() {
        let r = Ring::new(100_000).expect("io_uring available");
        assert_eq!(r.uring.params().sq_entries(), RING_ENTRIES_MAX);
        assert!(r.features.contains(&"ext_arg"));
    }

    #[test]
    fn smallest_queue_forces_the_full_sq_path() {
        // TigerBeetle's trick: a tiny queue (1 is clamped to 8 entries) makes pushes take
        // the submit-then-retry path; every NOP must still complete.
        let mut r = Ring::new(1).expect("io_uring available");
        let sq_len = r.uring.params().sq_entries() as u64;
        assert_eq!(sq_len, 8);
        for i in 0..(sq_len * 4) {
            let nop = opcode::Nop::new().build().user_data(i);
            // SAFETY: a NOP references no memory.
            unsafe { r.push(&nop) }.unwrap();
        }
        r.submit().unwrap();
        // Bounded: a lost completion fails the test instead of hanging it.
        let mut seen = 0;
        for _ in 0..100 {
            if seen >= sq_len * 4 {
                break;
            }
            r.submit_and_wait_ns(10_000_000).unwrap();
            seen += r.uring.completion().count() as u64;
        }
        assert_eq!(seen, sq_len * 4);
    }

    #[test]
    fn io_workers_are_confined_to_the_core() {
        let mut r = Ring::new(8).unwrap();
        r.confine_io_workers(Some(0));
        // Kernel 5.14+ has both; report which were used either way.
        let v = kernel_version();
        if v >= (5, 14) {
            assert!(r.features.contains(&"iowq_affinity"), "{:?}", r.features);
            assert!(r.features.contains(&"iowq_max_workers"), "{:?}", r.features);
        } else {
            eprintln!("kernel {v:?} predates IORING_REGISTER_IOWQ_*: not checked");
        }
        // The ring still works: an operation forced through io-wq completes.
        let nop = opcode::Nop::new()
            .build()
            .flags(io_uring::squeue::Flags::ASYNC)
            .user_data(7);
        // SAFETY: a NOP references no memory.
        unsafe { r.push(&nop) }.unwrap();
        let mut seen = 0;
        for _ in 0..100 {
            r.submit_and_wait_ns(10_000_000).unwrap();
            seen += r.uring.completion().count();
            if seen > 0 {
                break;
            }
        }
        assert_eq!(seen, 1);
    }

    /// (major, minor) of the running kernel.
    fn kernel_version() -> (u32, u32) {
        let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut it = r
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|p| p.parse().ok());
        (it.next().unwrap_or(0), it.next().unwrap_or(0))
    }

    #[test]
    fn the_fault_hook_fails_submits_after_its_count() {
        let mut r = Ring::new(8).unwrap();
        r.fail_submits_after(2);
        r.submit().unwrap();
        r.submit_and_wait_ns(1_000).unwrap();
        let e = r.submit().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOMEM));
        // A full queue's push goes through the failing submit and reports it.
        let nop = opcode::Nop::new().build();
        let mut failed = None;
        for _ in 0..16 {
            // SAFETY: a NOP references no memory.
            if let Err(e) = unsafe { r.push(&nop) } {
                failed = Some(e);
                break;
            }
        }
        assert_eq!(failed.and_then(|e| e.raw_os_error()), Some(libc::ENOMEM));
    }

    /// `n` NOPs with user data 0..n, submitted.
    fn nops(r: &mut Ring, n: u64) {
        for i in 0..n {
            let nop = opcode::Nop::new().build().user_data(i);
            // SAFETY: a NOP references no memory.
            unsafe { r.push(&nop) }.unwrap();
        }
        r.submit().unwrap();
    }

    #[test]
    fn reap_into_takes_no_more_than_fits_and_leaves_the_rest_in_order() {
        let mut r = Ring::new(16).unwrap();
        nops(&mut r, 5);
        let mut seen = Vec::new();
        let mut out = [(0u64, -1i32); 2];
        for _ in 0..100 {
            let n = r.reap_into(&mut out);
            assert!(n <= 2);
            seen.extend_from_slice(&out[..n]);
            if seen.len() == 5 {
                break;
            }
            r.submit_and_wait_ns(1_000_000).unwrap();
        }
        assert_eq!(seen, (0..5).map(|i| (i, 0)).collect::<Vec<_>>());
        assert_eq!(r.reap_into(&mut out), 0);
    }

    #[test]
    fn wait_out_returns_what_never_completed() {
        let mut r = Ring::new(16).unwrap();
        nops(&mut r, 3);
        assert_eq!(r.wait_out(3, std::time::Duration::from_secs(1)), 0);
        // Two operations that are not there: none completes within the quiet time.
        let t = std::time::Instant::now();
        assert_eq!(r.wait_out(2, std::time::Duration::from_millis(30)), 2);
        assert!(t.elapsed() >= std::time::Duration::from_millis(29));
    }

    #[test]
    fn wait_times_out_without_completions() {
        let mut r = Ring::new(8).unwrap();
        let t = std::time::Instant::now();
        r.submit_and_wait_ns(20_000_000).unwrap();
        assert!(t.elapsed() >= std::time::Duration::from_millis(19));
    }
}
