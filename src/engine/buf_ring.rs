//! A provided-buffer ring (`IORING_REGISTER_PBUF_RING`) for multishot receives: the
//! kernel picks a free buffer for each completion, so a connection's receive stays
//! armed across responses instead of being re-submitted after every one.
//!
//! Layout (io_uring ABI): an array of `io_uring_buf { addr: u64, len: u32, bid: u16,
//! resv: u16 }`, page aligned; the ring's tail is the `resv` field of entry 0 (byte
//! offset 14). The application writes entries at `tail & mask` and publishes the new
//! tail with a release store; the kernel consumes from its head. The engine's workers
//! and the sink's receive pool (`sink::buf_pool`) both use it.

use io_uring::Submitter;
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

const ENTRY_BYTES: usize = 16;
const PAGE: usize = 4096;

pub struct BufRing {
    ring: *mut u8,
    layout: Layout,
    entries: u16,
    tail: u16,
    bufs: Box<[u8]>,
    buf_len: usize,
    pub bgid: u16,
    /// Set by [`BufRing::leak`]: the memory is never freed.
    leaked: bool,
}

// SAFETY: the ring memory is owned by this value and only touched by the worker thread
// that owns it (and the kernel, through the registration).
unsafe impl Send for BufRing {}

impl BufRing {
    /// Registers with `ring` a ring of `entries` (a power of two, at most 32768)
    /// buffers of `buf_len` bytes under group `bgid`, all provided to the kernel. The
    /// buffer memory is zero-allocated, so pages the kernel never writes cost nothing.
    pub fn new(
        ring: &Submitter<'_>,
        entries: u16,
        buf_len: usize,
        bgid: u16,
    ) -> io::Result<BufRing> {
        assert!(entries.is_power_of_two() && entries <= 32768);
        let layout = Layout::from_size_align(entries as usize * ENTRY_BYTES, PAGE)
            .map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size (entries >= 1).
        let mem = unsafe { alloc_zeroed(layout) };
        if mem.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        let mut br = BufRing {
            ring: mem,
            layout,
            entries,
            tail: 0,
            bufs: vec![0u8; entries as usize * buf_len].into_boxed_slice(),
            buf_len,
            bgid,
            leaked: false,
        };
        // SAFETY: `mem` is page aligned, sized for `entries` and lives (with `bufs`)
        // as long as `br`, which the worker drops only after the ring has no operation
        // left that could pick a buffer.
        unsafe {
            ring.register_buf_ring_with_flags(mem as u64, entries, bgid, 0)?;
        }
        for bid in 0..entries {
            br.recycle(bid);
        }
        br.publish();
        Ok(br)
    }

    /// The bytes of buffer `bid`.
    #[inline]
    pub fn buf(&self, bid: u16, len: usize) -> &[u8] {
        let start = bid as usize * self.buf_len;
        &self.bufs[start..start + len.min(self.buf_len)]
    }

    /// Buffers in the ring.
    #[inline]
    pub fn entries(&self) -> u16 {
        self.entries
    }

    /// Bytes per buffer.
    #[inline]
    pub fn buf_len(&self) -> usize {
        self.buf_len
    }

    /// The address of byte `off` of buffer `bid` (for a send out of it).
    #[inline]
    pub fn ptr(&self, bid: u16, off: usize) -> *const u8 {
        assert!(off <= self.buf_len);
        self.bufs[bid as usize * self.buf_len + off..].as_ptr()
    }

    /// Never frees the ring or the buffers: for a shutdown that could not wait for
    /// every operation, which the kernel may still complete into them.
    pub fn leak(&mut self) {
        std::mem::forget(std::mem::take(&mut self.bufs));
        self.leaked = true;
    }

    /// Gives buffer `bid` back to the kernel (visible after [`BufRing::publish`]).
    #[inline]
    pub fn recycle(&mut self, bid: u16) {
        let slot = (self.tail & (self.entries - 1)) as usize;
        let addr = self.bufs.as_ptr() as u64 + (bid as usize * self.buf_len) as u64;
        // SAFETY: `slot < entries`, so the 16-byte entry lies inside the ring memory;
        // the kernel reads only entries between its head and the published tail, and
        // this one is past the published tail until `publish`.
        unsafe {
            let e = self.ring.add(slot * ENTRY_BYTES);
            (e as *mut u64).write(addr);
            (e.add(8) as *mut u32).write(self.buf_len as u32);
            (e.add(12) as *mut u16).write(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes recycled buffers to the kernel.
    #[inline]
    pub fn publish(&self) {
        // SAFETY: offset 14 is the tail field of the ring header (u16, 2-aligned since
        // the ring is page aligned); the kernel reads it with acquire semantics.
        let tail = unsafe { &*(self.ring.add(14) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if !self.leaked {
            // SAFETY: allocated in `new` with this layout.
            unsafe { dealloc(self.ring, self.layout) };
        }
    }
}
