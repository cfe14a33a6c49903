//! One ring's receive buffers: a provided-buffer ring (`IORING_REGISTER_PBUF_RING`)
//! shared by every connection of the ring, so an idle connection owns no buffer at
//! all — the kernel picks one only when data arrives.
//!
//! Layout (io_uring ABI): an array of `io_uring_buf { addr: u64, len: u32, bid: u16,
//! resv: u16 }`, page aligned; the ring's tail is the `resv` field of entry 0 (byte
//! offset 14). The sink writes entries at `tail & mask` and publishes the new tail
//! with a release store; the kernel consumes from its head.
//!
//! Echo keeps a received buffer until its bytes have been sent back; the buffers a
//! connection still has to send form a FIFO chain linked through `next` (one `u16`
//! per buffer, no allocation). The pool counts the buffers it has lent out, so the
//! server knows when it is worth re-arming receives that ran out of buffers.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::IoUring;

use super::token::NO_BUF;

const ENTRY_BYTES: usize = 16;
const PAGE: usize = 4096;

/// A FIFO of buffers linked through the pool (head and tail; [`NO_BUF`] when empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chain {
    pub head: u16,
    pub tail: u16,
}

impl Chain {
    pub(crate) const EMPTY: Chain = Chain {
        head: NO_BUF,
        tail: NO_BUF,
    };

    pub(crate) fn is_empty(&self) -> bool {
        self.head == NO_BUF
    }
}

pub(crate) struct BufPool {
    ring: *mut u8,
    layout: Layout,
    entries: u16,
    tail: u16,
    mem: Box<[u8]>,
    buf_bytes: usize,
    /// Bytes received into each buffer (what echo sends back).
    filled: Box<[u32]>,
    /// Chain links.
    next: Box<[u16]>,
    /// Buffers the kernel has filled and the sink not yet given back.
    lent: usize,
    bgid: u16,
    /// Set by [`BufPool::leak`]: the memory is never freed.
    leaked: bool,
}

// SAFETY: the ring memory is owned by this value and only touched by the sink thread
// that owns it (and the kernel, through the registration).
unsafe impl Send for BufPool {}

impl BufPool {
    /// Registers `entries` (a power of two, at most 32768) buffers of `buf_bytes`
    /// under group `bgid` with `ring`, all provided to the kernel. The buffer memory
    /// is zero-allocated, so pages the kernel never writes cost nothing.
    pub(crate) fn new(
        ring: &IoUring,
        entries: u16,
        buf_bytes: usize,
        bgid: u16,
    ) -> io::Result<BufPool> {
        assert!(entries.is_power_of_two() && entries <= 32768 && entries < NO_BUF);
        let layout = Layout::from_size_align(entries as usize * ENTRY_BYTES, PAGE)
            .map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size (entries >= 1).
        let mem = unsafe { alloc_zeroed(layout) };
        if mem.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        let mut pool = BufPool {
            ring: mem,
            layout,
            entries,
            tail: 0,
            mem: vec![0u8; entries as usize * buf_bytes].into_boxed_slice(),
            buf_bytes,
            filled: vec![0; entries as usize].into_boxed_slice(),
            next: vec![NO_BUF; entries as usize].into_boxed_slice(),
            lent: entries as usize,
            bgid,
            leaked: false,
        };
        // SAFETY: `mem` is page aligned, sized for `entries` and lives (with the
        // buffers) as long as `pool`; the server drops the pool only after the ring
        // has no operation left that could pick a buffer (or leaks it).
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(mem as u64, entries, bgid, 0)?;
        }
        for bid in 0..entries {
            pool.give_back(bid);
        }
        pool.publish();
        Ok(pool)
    }

    pub(crate) fn bgid(&self) -> u16 {
        self.bgid
    }

    pub(crate) fn buf_bytes(&self) -> usize {
        self.buf_bytes
    }

    /// Buffers the kernel can still fill.
    pub(crate) fn available(&self) -> usize {
        self.entries as usize - self.lent
    }

    /// Records that the kernel filled `bid` with `len` bytes (a receive completion).
    pub(crate) fn taken(&mut self, bid: u16, len: usize) {
        self.lent += 1;
        self.filled[bid as usize] = len as u32;
        self.next[bid as usize] = NO_BUF;
    }

    /// Bytes received into `bid`.
    pub(crate) fn filled(&self, bid: u16) -> usize {
        self.filled[bid as usize] as usize
    }

    /// The address of byte `off` of buffer `bid` (for a send).
    pub(crate) fn ptr(&self, bid: u16, off: usize) -> *const u8 {
        assert!(off <= self.buf_bytes);
        self.mem[bid as usize * self.buf_bytes + off..].as_ptr()
    }

    /// Gives buffer `bid` back to the kernel (visible after [`BufPool::publish`]).
    pub(crate) fn give_back(&mut self, bid: u16) {
        assert!(
            bid < self.entries && self.lent > 0,
            "buffer {bid} given back twice"
        );
        self.lent -= 1;
        let slot = (self.tail & (self.entries - 1)) as usize;
        let addr = self.mem.as_ptr() as u64 + (bid as usize * self.buf_bytes) as u64;
        // SAFETY: `slot < entries`, so the 16-byte entry lies inside the ring memory;
        // the kernel reads only entries between its head and the published tail, and
        // this one is past the published tail until `publish`.
        unsafe {
            let e = self.ring.add(slot * ENTRY_BYTES);
            (e as *mut u64).write(addr);
            (e.add(8) as *mut u32).write(self.buf_bytes as u32);
            (e.add(12) as *mut u16).write(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes the buffers given back since the last call.
    pub(crate) fn publish(&self) {
        // SAFETY: offset 14 is the tail field of the ring header (u16, 2-aligned since
        // the ring is page aligned); the kernel reads it with acquire semantics.
        let tail = unsafe { &*(self.ring.add(14) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }

    /// Appends `bid` to `chain`.
    pub(crate) fn push(&mut self, chain: &mut Chain, bid: u16) {
        self.next[bid as usize] = NO_BUF;
        if chain.is_empty() {
            chain.head = bid;
        } else {
            self.next[chain.tail as usize] = bid;
        }
        chain.tail = bid;
    }

    /// Removes the head of `chain` (which must not be empty) and returns it.
    pub(crate) fn pop(&mut self, chain: &mut Chain) -> u16 {
        let bid = chain.head;
        assert!(bid != NO_BUF, "pop from an empty chain");
        chain.head = self.next[bid as usize];
        if chain.head == NO_BUF {
            chain.tail = NO_BUF;
        }
        bid
    }

    /// Never frees the ring or the buffers: for a shutdown that could not wait for
    /// every receive or send, which the kernel may still complete into them.
    pub(crate) fn leak(&mut self) {
        std::mem::forget(std::mem::take(&mut self.mem));
        self.leaked = true;
    }
}

impl Drop for BufPool {
    fn drop(&mut self) {
        if !self.leaked {
            // SAFETY: allocated in `new` with this layout.
            unsafe { dealloc(self.ring, self.layout) };
        }
    }
}
