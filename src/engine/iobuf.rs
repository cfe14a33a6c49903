//! Memory shared with the kernel: one allocation that io_uring operations read and
//! write while the worker reads and writes other parts of it.
//!
//! A `Box<[u8]>` cannot hold such memory soundly: every `&mut buf[..]`, `copy_within`
//! or index write asserts, for the whole allocation, that nothing else touches it,
//! while the kernel may be writing another connection's region at that very moment.
//! [`IoBuf`] owns the allocation through a raw pointer and never makes a reference to
//! more than the region asked for: operations get a raw pointer and a length
//! ([`IoBuf::kernel_ptr`]; [`IoBuf::kernel_ptr_read`] for bytes many sends read at
//! once), the worker gets `&[u8]` / `&mut [u8]` to one region
//! ([`IoBuf::region`], [`IoBuf::region_mut`]) or moves bytes inside one
//! ([`IoBuf::copy_within`]). Which regions the kernel is using is the owner's
//! bookkeeping (a region is re-armed only after its operation completed); this type
//! makes sure no Rust reference reaches beyond the region it is for.
//!
//! The unit tests run under Miri (`scripts/test.sh`): a pointer handed to the
//! "kernel" stays valid across the worker's accesses to other regions.

use std::ops::Range;
use std::ptr::NonNull;

pub struct IoBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// Set by [`IoBuf::leak`]: never freed.
    leaked: bool,
}

// SAFETY: `IoBuf` owns its allocation like a `Box<[u8]>` does; it is used by one
// thread at a time (the worker that owns it, and the kernel on its behalf).
unsafe impl Send for IoBuf {}

impl Default for IoBuf {
    fn default() -> Self {
        IoBuf::from_vec(Vec::new())
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoBuf({} bytes)", self.len)
    }
}

impl IoBuf {
    /// `len` zero bytes. Zeroed memory comes from the allocator untouched, so pages
    /// that no operation ever fills cost no resident memory.
    pub fn zeroed(len: usize) -> IoBuf {
        IoBuf::from_vec(vec![0u8; len])
    }

    /// Takes over `bytes` (e.g. a payload prepared before any operation).
    pub fn from_vec(bytes: Vec<u8>) -> IoBuf {
        let raw = Box::into_raw(bytes.into_boxed_slice());
        let len = raw.len();
        IoBuf {
            // SAFETY: `Box::into_raw` never returns null (a dangling, aligned pointer
            // for an empty slice).
            ptr: unsafe { NonNull::new_unchecked(raw.cast::<u8>()) },
            len,
            leaked: false,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    #[track_caller]
    fn check(&self, r: &Range<usize>) {
        assert!(
            r.start <= r.end && r.end <= self.len,
            "region {r:?} outside a {}-byte buffer",
            self.len
        );
    }

    /// The address of region `r` for an operation (the kernel reads or writes
    /// `r.len()` bytes from it). No reference outlives the call; the owner must not
    /// touch `r` until the operation has completed.
    ///
    /// `&mut self`, although only a pointer comes back: the pointer is taken through a
    /// `&mut` to `r`, which must not overlap a `&[u8]` from [`IoBuf::region`] that safe
    /// code still holds. Through `&self` it could (`let a = b.region(r); b.kernel_ptr(r)`
    /// and `a` is then used after a unique borrow of its bytes: undefined behaviour
    /// without an `unsafe` in sight); through `&mut self` the borrow checker refuses it.
    #[inline]
    #[track_caller]
    pub fn kernel_ptr(&mut self, r: Range<usize>) -> *mut u8 {
        self.check(&r);
        // SAFETY: `r` lies inside the allocation (checked), `&mut self` means no
        // reference this buffer handed out is alive, and no operation is using `r` (the
        // owner's contract above), so the `&mut` to exactly `r` made here (dropped at
        // once) aliases nothing. The pointer is taken through it, so
        // under Miri it is valid for `r` only and is invalidated by any later
        // reference that reaches into `r`, which is what the tests below check for.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(r.start), r.len()) }
            .as_mut_ptr()
    }

    /// The address of region `r` for operations that only read it, any number at once
    /// (sends of bytes written once at start). The pointer is taken through a shared
    /// reference, so several stay valid side by side, where each [`IoBuf::kernel_ptr`]
    /// to the same bytes would invalidate the one before; any later `&mut` reaching
    /// into `r` invalidates them all. The kernel must never write through it.
    #[inline]
    #[track_caller]
    pub fn kernel_ptr_read(&self, r: Range<usize>) -> *const u8 {
        self.region(r).as_ptr()
    }

    /// The bytes of region `r` (no operation may be writing them).
    #[inline]
    #[track_caller]
    pub fn region(&self, r: Range<usize>) -> &[u8] {
        self.check(&r);
        // SAFETY: `r` lies inside the allocation (checked); the reference covers only
        // `r`, which the owner does not lend to the kernel meanwhile, and lives no
        // longer than `&self`, so `IoBuf` is not freed under it.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(r.start), r.len()) }
    }

    /// The bytes of region `r`, writable (no operation may be using them).
    #[inline]
    #[track_caller]
    pub fn region_mut(&mut self, r: Range<usize>) -> &mut [u8] {
        self.check(&r);
        // SAFETY: as in `region`; `&mut self` makes it the only reference this
        // buffer hands out while it lives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(r.start), r.len()) }
    }

    /// Copies region `src` to offset `dest` (the ranges may overlap), touching nothing
    /// outside them: `<[u8]>::copy_within` would borrow the whole allocation.
    #[inline]
    #[track_caller]
    pub fn copy_within(&mut self, src: Range<usize>, dest: usize) {
        self.check(&src);
        self.check(&(dest..dest + src.len()));
        // SAFETY: both ranges lie inside the allocation (checked); `ptr::copy` allows
        // overlap and makes no reference to anything outside them.
        unsafe {
            let base = self.ptr.as_ptr();
            std::ptr::copy(base.add(src.start), base.add(dest), src.len());
        }
    }

    /// Never frees the allocation: for a shutdown that could not wait for every
    /// operation, which the kernel may still complete into it.
    pub fn leak(&mut self) {
        self.leaked = true;
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if !self.leaked {
            let raw = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
            // SAFETY: made by `Box::into_raw` of a boxed slice of `len` bytes in
            // `from_vec`, freed once, here.
            drop(unsafe { Box::from_raw(raw) });
        }
    }
}

/// Under Miri (`cargo +nightly miri test --lib engine::iobuf`): no syscalls, no
/// io_uring. The "kernel" is a raw pointer from [`IoBuf::kernel_ptr`] written while
/// the worker uses other regions, as a receive in flight is.
#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `bytes` through a pointer as the kernel would (no reference).
    fn kernel_writes(p: *mut u8, bytes: &[u8]) {
        // SAFETY: the tests hand in pointers to regions at least `bytes.len()` long
        // that no reference covers.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
    }

    #[test]
    fn a_pointer_lent_to_the_kernel_survives_the_owner_using_other_regions() {
        let mut b = IoBuf::zeroed(32);
        let kernel = b.kernel_ptr(16..32);
        kernel_writes(kernel, b"first");
        // The worker frames and moves bytes in its own region meanwhile.
        b.region_mut(0..8).copy_from_slice(b"abcdefgh");
        b.copy_within(2..6, 0);
        assert_eq!(b.region(0..8), b"cdefefgh");
        // The receive is still in flight: it writes again into its region.
        kernel_writes(kernel, b"second");
        assert_eq!(b.region(16..22), b"second");
        assert_eq!(b.region(8..16), &[0; 8], "untouched bytes stay zero");
    }

    #[test]
    fn two_regions_lent_out_at_once_stay_apart() {
        let mut b = IoBuf::zeroed(12);
        // A request is rendered into its region, then a send reads it while a receive
        // writes the region before it and the worker frames the one after.
        b.region_mut(4..8).copy_from_slice(b"ssss");
        let (recv, send) = (b.kernel_ptr(0..4), b.kernel_ptr(4..8));
        kernel_writes(recv, b"rrrr");
        b.region_mut(8..12).copy_from_slice(b"tttt");
        // SAFETY: `send` points at 4 initialised bytes no `&mut` covers now.
        let sent = unsafe { std::slice::from_raw_parts(send, 4) }.to_vec();
        kernel_writes(recv, b"RRRR");
        assert_eq!(sent, b"ssss");
        assert_eq!(b.region(0..12), b"RRRRsssstttt");
    }

    #[test]
    fn sends_of_the_same_bytes_stay_valid_side_by_side() {
        let b = IoBuf::from_vec(b"request".to_vec());
        // Three connections send the one request at once; a fourth reads part of it.
        let sends = [
            b.kernel_ptr_read(0..7),
            b.kernel_ptr_read(0..7),
            b.kernel_ptr_read(3..7),
        ];
        assert_eq!(
            b.region(0..3),
            b"req",
            "the worker may read the bytes meanwhile"
        );
        // SAFETY: each points at initialised bytes of `b` that no `&mut` covers.
        let sent: Vec<&[u8]> = unsafe {
            vec![
                std::slice::from_raw_parts(sends[0], 7),
                std::slice::from_raw_parts(sends[1], 7),
                std::slice::from_raw_parts(sends[2], 4),
            ]
        };
        assert_eq!(sent, [&b"request"[..], b"request", b"uest"]);
    }

    #[test]
    fn copy_within_moves_overlapping_bytes_like_the_slice_method() {
        for (src, dest) in [(2..7, 0), (0..5, 2), (3..3, 8), (0..10, 0)] {
            let mut b = IoBuf::from_vec((0..10).collect());
            let mut want: Vec<u8> = (0..10).collect();
            want.copy_within(src.clone(), dest);
            b.copy_within(src.clone(), dest);
            assert_eq!(b.region(0..10), &want[..], "{src:?} -> {dest}");
        }
    }

    #[test]
    fn regions_outside_the_buffer_are_refused() {
        let b = IoBuf::zeroed(4);
        for r in [0..5, 3..5, 5..5] {
            let caught = std::panic::catch_unwind(|| b.region(r.clone()).len());
            assert!(caught.is_err(), "{r:?}");
        }
        assert!(std::panic::catch_unwind(|| IoBuf::zeroed(4).copy_within(2..4, 3)).is_err());
        assert_eq!(b.region(4..4), b"", "an empty region at the end is fine");
        assert_eq!(IoBuf::default().len(), 0);
        assert!(IoBuf::default().is_empty());
    }

    /// A leaked buffer is not freed (Miri would report a leak: run outside Miri).
    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_leaked_buffer_stays_allocated() {
        let mut b = IoBuf::from_vec(vec![7; 16]);
        let p = b.kernel_ptr(0..16);
        b.leak();
        drop(b);
        // SAFETY: leaked, so the 16 bytes are still allocated and initialised.
        assert_eq!(unsafe { *p.add(15) }, 7);
    }
}
