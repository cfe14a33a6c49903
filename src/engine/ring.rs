//! The ring wrapper: builds the ring with the best setup flags the kernel accepts
//! (probing by trying, falling back cleanly), pushes entries with a full-queue path,
//! and waits for completions with a timeout.
//!
//! The full-queue path never spins blind. When the submission queue is full, a push
//! submits; when the kernel takes nothing (on 5.11-5.18 it refuses every submission
//! with EBUSY while completions wait for room in the completion queue; any kernel may
//! say EAGAIN without request memory), the ring moves the waiting completions into its
//! stash, a fixed FIFO as large as the completion queue, and submits again. Completion
//! handlers are never run from inside a push (they may push themselves); the stash is
//! read first by every reap ([`Ring::reap_each`]), so order is kept. After
//! [`PUSH_ROUNDS_MAX`] rounds without room the push fails with [`PushError::Full`].

use crate::limits::{IOWQ_WORKERS_MAX, PUSH_ROUNDS_MAX, RING_ENTRIES_MAX};
use io_uring::{IoUring, squeue, types};
use std::io;
use std::os::fd::RawFd;

/// The kernel's ceiling on completion queue entries (`IORING_MAX_CQ_ENTRIES`).
const CQ_ENTRIES_MAX: u32 = 65536;

pub struct Ring {
    /// Private: every entry goes through [`Ring::push`] (its safety contract) and every
    /// registration through a method here, so no caller hands the kernel memory
    /// behind the wrapper's back.
    uring: IoUring,
    /// Names of the setup flags and features in use, for the report.
    pub features: Vec<&'static str>,
    /// Test hook ([`Ring::fail_submits_after`]): submits left before every submit fails.
    submits_left: Option<u64>,
    /// Completions moved out of the completion queue by a push that needed room.
    stash: Stash,
    /// Test hook ([`Ring::refuse_while_overflowed`]): submits behave as on 5.11-5.18.
    refuse_while_overflowed: bool,
}

/// Why a push queued nothing.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The submission queue stayed full through `rounds` rounds of submitting and
    /// stashing completions: the kernel takes no more work from this ring.
    #[error(
        "the submission queue stayed full after {rounds} submits: the kernel took no more work (completion queue overflowed, or no request memory)"
    )]
    Full { rounds: u32 },
    /// io_uring_enter failed with an error that is not transient (ENOMEM, say).
    #[error(transparent)]
    Submit(#[from] io::Error),
}

impl From<PushError> for io::Error {
    fn from(e: PushError) -> io::Error {
        match e {
            PushError::Submit(e) => e,
            full @ PushError::Full { .. } => io::Error::other(full),
        }
    }
}

/// One completion: user data, result, flags.
type Cqe = (u64, i32, u32);

/// A fixed FIFO of completions, allocated with the ring, never grown. Sized for every
/// completion that can be outstanding at once, which only a push on a refusing kernel
/// ever fills: the slots are zeroed memory (calloc), so the pages of an unused stash
/// are never touched and cost no resident memory.
struct Stash {
    /// A completion as `[user data, result << 32 | flags]`: plain integers, so the
    /// allocation is a zeroed one.
    slots: Box<[[u64; 2]]>,
    head: usize,
    len: usize,
}

impl Stash {
    fn new(capacity: usize) -> Stash {
        Stash {
            slots: vec![[0u64; 2]; capacity.max(1)].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    fn room(&self) -> usize {
        self.slots.len() - self.len
    }

    /// Appends `c`; the caller checked [`Stash::room`].
    fn put(&mut self, c: Cqe) {
        let i = (self.head + self.len) % self.slots.len();
        self.slots[i] = [c.0, u64::from(c.1 as u32) << 32 | u64::from(c.2)];
        self.len += 1;
    }

    #[inline]
    fn pop(&mut self) -> Option<Cqe> {
        if self.len == 0 {
            return None;
        }
        let [data, packed] = self.slots[self.head];
        self.head = (self.head + 1) % self.slots.len();
        self.len -= 1;
        Some((data, (packed >> 32) as u32 as i32, packed as u32))
    }
}

/// `IORING_ENTER_GETEVENTS`: an enter that flushes overflowed completions.
const ENTER_GETEVENTS: u32 = 1;

/// Environment variable that makes a worker's ring fail its submits after this many
/// with ENOMEM: the end-to-end test of the submit-error path. Not for users.
pub const FAULT_SUBMIT_ENV: &str = "BLASTER_TEST_FAIL_SUBMIT_AFTER";

impl Ring {
    /// A ring of `entries` (rounded and clamped), completion queue twice as large.
    /// `entries` is the most operations the caller keeps in the ring at once: the
    /// stash holds that many completions (at least a completion queue's worth).
    pub fn new(entries: u32) -> io::Result<Ring> {
        Ring::with_completions(entries, 2)
    }

    /// [`Ring::new`] with `per_entry` completion queue entries per submission queue
    /// entry (at most the kernel's 65,536 in all): a server whose multishot accepts
    /// and receives post many completions per submission wants more than two.
    pub fn with_completions(entries: u32, per_entry: u32) -> io::Result<Ring> {
        let operations = entries as usize;
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
                    let stash = Stash::new(operations.max(uring.params().cq_entries() as usize));
                    return Ok(Ring {
                        uring,
                        features,
                        submits_left: None,
                        stash,
                        refuse_while_overflowed: false,
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

    /// Registers a sparse file table of `slots` entries (`IORING_REGISTER_FILES2`
    /// with no descriptors), for operations on [`Target::Fixed`] slots.
    pub fn register_files_sparse(&mut self, slots: u32) -> io::Result<()> {
        self.uring.submitter().register_files_sparse(slots)
    }

    /// Puts `fds` into the file table from slot `first` on (-1 leaves a slot empty);
    /// returns how many slots the kernel updated, which may be fewer than `fds.len()`.
    pub fn register_files_update(&mut self, first: u32, fds: &[RawFd]) -> io::Result<usize> {
        self.uring.submitter().register_files_update(first, fds)
    }

    /// Registers a provided-buffer ring of `entries` 16-byte entries at `ring_addr`
    /// under group `bgid` (`IORING_REGISTER_PBUF_RING`).
    ///
    /// # Safety
    /// `ring_addr` must be page aligned and valid for `entries * 16` bytes, and that
    /// memory and every buffer an entry ever names must stay valid while an operation
    /// that may pick a buffer of the group is in the ring (a shutdown that cannot wait
    /// for its operations leaks them instead).
    pub(crate) unsafe fn register_buf_ring(
        &mut self,
        ring_addr: u64,
        entries: u16,
        bgid: u16,
    ) -> io::Result<()> {
        // SAFETY: forwarded to the caller's contract above.
        unsafe {
            self.uring
                .submitter()
                .register_buf_ring_with_flags(ring_addr, entries, bgid, 0)
        }
    }

    /// Unregisters provided-buffer group `bgid`: the kernel picks no more buffers from
    /// it (a receive in flight that wants one fails with ENOBUFS).
    pub fn unregister_buf_ring(&mut self, bgid: u16) -> io::Result<()> {
        self.uring.submitter().unregister_buf_ring(bgid)
    }

    /// Queues an entry; when the submission queue is full, makes room first
    /// ([`Ring::make_room`]).
    ///
    /// # Safety
    /// Every buffer and address the entry points to must stay valid and unmoved until
    /// its completion has been reaped.
    #[inline]
    pub unsafe fn push(&mut self, entry: &squeue::Entry) -> Result<(), PushError> {
        // SAFETY: forwarded to the caller's contract above.
        if unsafe { self.uring.submission().push(entry) }.is_ok() {
            return Ok(());
        }
        self.make_room(1)?;
        // SAFETY: forwarded to the caller's contract above.
        unsafe { self.uring.submission().push(entry) }.map_err(|_| PushError::Full {
            rounds: PUSH_ROUNDS_MAX,
        })
    }

    /// Queues `entries` next to each other (a linked chain must not be split by a
    /// submit), making room first when they do not fit.
    ///
    /// # Safety
    /// As [`Ring::push`], for every entry.
    pub unsafe fn push_all(&mut self, entries: &[squeue::Entry]) -> Result<(), PushError> {
        // SAFETY: forwarded to the caller's contract above.
        if unsafe { self.uring.submission().push_multiple(entries) }.is_ok() {
            return Ok(());
        }
        self.make_room(entries.len())?;
        // SAFETY: forwarded to the caller's contract above.
        unsafe { self.uring.submission().push_multiple(entries) }.map_err(|_| PushError::Full {
            rounds: PUSH_ROUNDS_MAX,
        })
    }

    /// Submits until the submission queue has room for `n` entries. Each time the
    /// kernel takes nothing, the completions waiting in the completion queue move into
    /// the stash first (a 5.11-5.18 kernel accepts no submission while completions it
    /// could not post are pending). [`PushError::Full`] after [`PUSH_ROUNDS_MAX`]
    /// rounds, or at once when `n` exceeds the queue.
    #[cold]
    pub fn make_room(&mut self, n: usize) -> Result<(), PushError> {
        if n > self.uring.submission().capacity() {
            return Err(PushError::Full { rounds: 0 });
        }
        let mut rounds = 0;
        while self.sq_room() < n {
            if rounds == PUSH_ROUNDS_MAX {
                return Err(PushError::Full { rounds });
            }
            rounds += 1;
            self.submit()?;
            if self.sq_room() < n {
                self.stash_completions();
            }
        }
        Ok(())
    }

    /// Moves completions from the completion queue into the stash, as many as fit.
    fn stash_completions(&mut self) -> usize {
        let room = self.stash.room();
        let mut moved = 0;
        for cqe in self.uring.completion().take(room) {
            self.stash.put((cqe.user_data(), cqe.result(), cqe.flags()));
            moved += 1;
        }
        moved
    }

    /// Hands up to `max` completions, stashed ones first, to `f` as (user data,
    /// result, flags) in the order the kernel posted them; returns how many.
    #[inline]
    pub fn reap_each(&mut self, max: usize, mut f: impl FnMut(u64, i32, u32)) -> usize {
        let mut n = 0;
        while n < max
            && let Some((data, res, flags)) = self.stash.pop()
        {
            f(data, res, flags);
            n += 1;
        }
        // `take` asks for no more than it hands out: nothing is consumed unhandled.
        for cqe in self.uring.completion().take(max - n) {
            f(cqe.user_data(), cqe.result(), cqe.flags());
            n += 1;
        }
        n
    }

    /// Whether completions wait to be reaped (stashed or in the completion queue).
    #[inline]
    pub fn has_completions(&mut self) -> bool {
        self.stash.len > 0 || !self.uring.completion().is_empty()
    }

    /// Takes every waiting completion and returns how many ended their operation (no
    /// MORE flag: a multishot operation ends with its last completion). For draining
    /// at the end of a worker.
    pub fn take_finished(&mut self) -> u64 {
        let mut finished = 0;
        self.reap_each(usize::MAX, |_, _, flags| {
            finished += u64::from(!io_uring::cqueue::more(flags));
        });
        finished
    }

    /// Sizes the stash for `completions` outstanding at once (when more than it holds
    /// already). Call at setup, before any push: a caller whose operations may each
    /// post several completions knows its bound better than [`Ring::new`].
    pub fn hold_completions(&mut self, completions: usize) {
        if completions > self.stash.slots.len() && self.stash.len == 0 {
            self.stash = Stash::new(completions);
        }
    }

    /// Test hook: from now on every submit with entries queued behaves as on a
    /// 5.11-5.18 kernel: the overflowed completions are flushed into the completion
    /// queue as far as they fit, and while some remain the submit fails with EBUSY and
    /// queues nothing. Newer kernels keep accepting work (the overflow list grows in
    /// kernel memory), so this is the only way to force that path here.
    pub fn refuse_while_overflowed(&mut self) {
        self.refuse_while_overflowed = true;
    }

    /// The test hook's EBUSY, when it is on and completions are still overflowed.
    fn refused_as_before_5_19(&mut self) -> io::Result<()> {
        if !self.refuse_while_overflowed || self.uring.submission().is_empty() {
            return Ok(());
        }
        if self.uring.submission().cq_overflow() {
            // SAFETY: no argument is passed; an enter that submits nothing only flushes
            // overflowed completions and runs task work.
            let _ = unsafe {
                self.uring
                    .submitter()
                    .enter::<libc::sigset_t>(0, 0, ENTER_GETEVENTS, None)
            };
            if self.uring.submission().cq_overflow() {
                return Err(io::Error::from_raw_os_error(libc::EBUSY));
            }
        }
        Ok(())
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
        match self
            .refused_as_before_5_19()
            .and_then(|()| self.uring.submit())
        {
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
        self.submit_and_wait_for(timeout_ns, 1)
    }

    /// Half the completion queue: the most completions a wait may ask for (more would
    /// overflow it before the wait ends).
    pub fn completions_per_wait_max(&self) -> u32 {
        (self.uring.params().cq_entries() / 2).max(1)
    }

    /// Submits and waits for `want` completions (at least 1) or `timeout_ns`,
    /// whichever first.
    pub fn submit_and_wait_for(&mut self, timeout_ns: u64, want: u32) -> io::Result<()> {
        let ts = types::Timespec::new()
            .sec(timeout_ns / 1_000_000_000)
            .nsec((timeout_ns % 1_000_000_000) as u32);
        let args = types::SubmitArgs::new().timespec(&ts);
        self.injected_failure()?;
        let submitted = self.refused_as_before_5_19().and_then(|()| {
            self.uring
                .submitter()
                .submit_with_args(want.max(1) as usize, &args)
        });
        match submitted {
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
        let mut n = 0;
        self.reap_each(out.len(), |data, res, _| {
            out[n] = (data, res);
            n += 1;
        })
    }

    /// At the end of a worker: submits and waits until the `ops` operations still in
    /// the ring have ended (a multishot one with its last completion,
    /// [`Ring::take_finished`]), or until `quiet`
    /// passes with none completing, or the ring fails. Returns how many are left (the
    /// caller then must not free the buffers they point to).
    pub fn wait_out(&mut self, mut ops: u64, quiet: std::time::Duration) -> u64 {
        let mut deadline = std::time::Instant::now() + quiet;
        while ops > 0 && std::time::Instant::now() < deadline {
            if self.submit_and_wait_ns(10_000_000).is_err() {
                break;
            }
            let n = self.take_finished();
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
        assert_eq!(
            failed.and_then(|e| io::Error::from(e).raw_os_error()),
            Some(libc::ENOMEM)
        );
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

    /// Runs `f` on its own thread and fails the test if it takes longer than 10 s: a
    /// push that spins forever shows as a red test, not a hung suite.
    fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the push spun for 10 s instead of reaping or failing")
    }

    #[test]
    fn an_overflowed_completion_queue_is_stashed_and_the_push_retried() {
        // Issue 22, part 4: 8 submission and 8 completion entries, submits refused
        // while completions are overflowed (as 5.11-5.18 kernels refuse them), and
        // nothing reaped: NOPs complete at once, so the completion queue overflows on
        // the second submit and the kernel then takes nothing. The push moves the
        // completions into the stash and retries; 8 queued + 8 stashed + 8 in the
        // completion queue + 8 overflowed fit, the 33rd push fails typed, bounded.
        let (pushed, full, seen) = within_10s(|| {
            let mut r = Ring::with_completions(8, 1).expect("io_uring available");
            assert_eq!(r.uring.params().cq_entries(), 8);
            r.refuse_while_overflowed();
            let mut pushed = 0u64;
            let full = loop {
                let nop = opcode::Nop::new().build().user_data(pushed);
                // SAFETY: a NOP references no memory.
                match unsafe { r.push(&nop) } {
                    Ok(()) => pushed += 1,
                    Err(e) => break e,
                }
                assert!(pushed < 1000, "pushes never failed");
            };
            // Every completion comes back once, in order, stashed ones first.
            let mut seen = Vec::new();
            for _ in 0..100 {
                r.submit_and_wait_ns(1_000_000).unwrap();
                r.reap_each(usize::MAX, |data, res, _| seen.push((data, res)));
                if seen.len() as u64 >= pushed {
                    break;
                }
            }
            (pushed, full, seen)
        });
        assert_eq!(pushed, 32);
        assert!(
            matches!(full, PushError::Full { rounds } if rounds == PUSH_ROUNDS_MAX),
            "{full:?}"
        );
        assert_eq!(seen, (0..32).map(|i| (i, 0)).collect::<Vec<_>>());
    }

    #[test]
    fn without_the_hook_an_overflow_never_fails_a_push() {
        // Kernels from 5.19 keep accepting work while completions are overflowed: the
        // stash stays unused and nothing is lost or reordered.
        let mut r = Ring::with_completions(8, 1).unwrap();
        for i in 0..200u64 {
            let nop = opcode::Nop::new().build().user_data(i);
            // SAFETY: a NOP references no memory.
            unsafe { r.push(&nop) }.unwrap();
        }
        let mut seen = Vec::new();
        for _ in 0..100 {
            r.submit_and_wait_ns(1_000_000).unwrap();
            r.reap_each(usize::MAX, |data, _, _| seen.push(data));
            if seen.len() >= 200 {
                break;
            }
        }
        assert_eq!(seen, (0..200).collect::<Vec<_>>());
    }

    #[test]
    fn wait_times_out_without_completions() {
        let mut r = Ring::new(8).unwrap();
        let t = std::time::Instant::now();
        r.submit_and_wait_ns(20_000_000).unwrap();
        assert!(t.elapsed() >= std::time::Duration::from_millis(19));
    }
}
