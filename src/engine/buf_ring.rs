//! A provided-buffer ring (`IORING_REGISTER_PBUF_RING`) for multishot receives: the
//! kernel picks a free buffer for each completion, so a connection's receive stays
//! armed across responses instead of being re-submitted after every one.
//!
//! Layout (io_uring ABI): an array of `io_uring_buf { addr: u64, len: u32, bid: u16,
//! resv: u16 }`, page aligned; the ring's tail is the `resv` field of entry 0 (byte
//! offset 14). The application writes entries at `tail & mask` and publishes the new
//! tail with a release store; the kernel consumes from its head. The engine's workers
//! and the sink's receive pool (`sink::buf_pool`) both use it.
//!
//! The buffers are an [`IoBuf`]: the kernel may write any buffer provided to it while
//! the worker frames another, so no reference spans more than one buffer. The tests
//! run under Miri (`scripts/test.sh`), a "kernel" picking buffers from the ring as
//! io_uring does.

use super::iobuf::IoBuf;
use super::ring::Ring;
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU16, Ordering};

const ENTRY_BYTES: usize = 16;
const PAGE: usize = 4096;

// An entry's `addr` is written as a pointer (so that Miri follows it to the buffer it
// was taken for), which is the ABI's u64 only where pointers are 64 bits.
const _: () = assert!(size_of::<*mut u8>() == size_of::<u64>());

pub struct BufRing {
    /// The entries, page aligned. Only ever written through raw pointers (never a
    /// reference: the kernel reads entries behind the published tail meanwhile),
    /// except the tail, an atomic.
    ring: *mut u8,
    layout: Layout,
    entries: u16,
    tail: u16,
    /// The buffers: the kernel writes any buffer provided to it while the worker reads
    /// others, so they are an [`IoBuf`], never a `Box<[u8]>` sliced whole.
    bufs: IoBuf,
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
    pub fn new(ring: &mut Ring, entries: u16, buf_len: usize, bgid: u16) -> io::Result<BufRing> {
        let mut br = BufRing::unregistered(entries, buf_len, bgid)?;
        // SAFETY: `br.ring` is page aligned and sized for `entries`, and it and
        // `br.bufs` live as long as `br`. Every owner keeps `br` until its ring has no
        // operation left that could pick a buffer, or leaks it ([`BufRing::leak`],
        // also on an unwinding drop of the owner) when it could not wait; if the
        // registration fails, `br` is freed having never been the kernel's.
        unsafe { ring.register_buf_ring(br.ring as u64, entries, bgid)? };
        br.provide_all();
        Ok(br)
    }

    /// The ring and its buffers, allocated, not registered and with no buffer
    /// provided yet (what [`BufRing::new`] registers; the Miri tests use it as is).
    fn unregistered(entries: u16, buf_len: usize, bgid: u16) -> io::Result<BufRing> {
        assert!(entries.is_power_of_two() && entries <= 32768);
        let layout = Layout::from_size_align(entries as usize * ENTRY_BYTES, PAGE)
            .map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size (entries >= 1).
        let mem = unsafe { alloc_zeroed(layout) };
        if mem.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        Ok(BufRing {
            ring: mem,
            layout,
            entries,
            tail: 0,
            bufs: IoBuf::zeroed(entries as usize * buf_len),
            buf_len,
            bgid,
            leaked: false,
        })
    }

    /// Provides every buffer to the kernel and publishes them.
    fn provide_all(&mut self) {
        for bid in 0..self.entries {
            self.recycle(bid);
        }
        self.publish();
    }

    /// Where buffer `bid` lies in `bufs`, its first `len` bytes (at most all of it).
    #[inline]
    fn region(&self, bid: u16, len: usize) -> Range<usize> {
        let start = bid as usize * self.buf_len;
        start..start + len.min(self.buf_len)
    }

    /// The bytes of buffer `bid` (one the kernel has completed into and not been
    /// given back since).
    #[inline]
    pub fn buf(&self, bid: u16, len: usize) -> &[u8] {
        self.bufs.region(self.region(bid, len))
    }

    /// The bytes of buffer `bid`, writable (a frame's decoding may rewrite it in
    /// place; the kernel has completed into it and not been given it back since).
    #[inline]
    pub fn buf_mut(&mut self, bid: u16, len: usize) -> &mut [u8] {
        let r = self.region(bid, len);
        self.bufs.region_mut(r)
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

    /// The address of byte `off` of buffer `bid` (for a send out of it, which reads
    /// the rest of the buffer; the owner gives `bid` back only after it completed).
    #[inline]
    pub fn ptr(&mut self, bid: u16, off: usize) -> *const u8 {
        assert!(off <= self.buf_len);
        let r = self.region(bid, self.buf_len);
        self.bufs.kernel_ptr(r.start + off..r.end)
    }

    /// Never frees the ring or the buffers: for a shutdown that could not wait for
    /// every operation, which the kernel may still complete into them.
    pub fn leak(&mut self) {
        self.bufs.leak();
        self.leaked = true;
    }

    /// Gives buffer `bid` back to the kernel (visible after [`BufRing::publish`]).
    #[inline]
    pub fn recycle(&mut self, bid: u16) {
        assert!(bid < self.entries, "buffer {bid} of {}", self.entries);
        let slot = (self.tail & (self.entries - 1)) as usize;
        let addr = self.bufs.kernel_ptr(self.region(bid, self.buf_len));
        // SAFETY: `slot < entries`, so the 16-byte entry lies inside the ring memory;
        // the kernel reads only entries between its head and the published tail, and
        // this one is past the published tail until `publish`.
        unsafe {
            let e = self.ring.add(slot * ENTRY_BYTES);
            (e as *mut *mut u8).write(addr);
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
            // SAFETY: allocated in `unregistered` with this layout, freed once, here.
            unsafe { dealloc(self.ring, self.layout) };
        }
    }
}

/// Under Miri (`cargo +nightly miri test --lib engine::buf_ring`): no io_uring. The
/// "kernel" takes buffers from the ring as io_uring does (entry at its head, up to the
/// published tail) and writes through the address in the entry while the worker reads
/// other buffers, as multishot receives in flight do.
#[cfg(test)]
mod tests {
    use super::*;

    /// io_uring's side of the ring: its head, and the buffers it picks.
    struct Kernel {
        head: u16,
    }

    impl Kernel {
        /// Picks the next provided buffer: (its address, length, id); `None` when the
        /// ring is empty (ENOBUFS).
        fn pick(&mut self, br: &BufRing) -> Option<(*mut u8, usize, u16)> {
            // SAFETY: offset 14 is the tail (u16, aligned), read as the kernel does.
            let tail = unsafe { &*(br.ring.add(14) as *const AtomicU16) }.load(Ordering::Acquire);
            if tail == self.head {
                return None;
            }
            let slot = (self.head & (br.entries - 1)) as usize;
            self.head = self.head.wrapping_add(1);
            // SAFETY: a published entry inside the ring memory, read by raw pointer.
            unsafe {
                let e = br.ring.add(slot * ENTRY_BYTES);
                Some((
                    (e as *const *mut u8).read(),
                    (e.add(8) as *const u32).read() as usize,
                    (e.add(12) as *const u16).read(),
                ))
            }
        }

        /// Picks a buffer and receives `bytes` into it, as a receive completion.
        fn recv(&mut self, br: &BufRing, bytes: &[u8]) -> u16 {
            let (addr, len, bid) = self.pick(br).expect("a buffer provided");
            assert!(bytes.len() <= len);
            write_through(addr, bytes);
            bid
        }
    }

    /// A ring of `entries` buffers of `buf_len` bytes, all provided, and the kernel
    /// that picks from it.
    fn provided(entries: u16, buf_len: usize, bgid: u16) -> (BufRing, Kernel) {
        let mut br = BufRing::unregistered(entries, buf_len, bgid).unwrap();
        br.provide_all();
        (br, Kernel { head: 0 })
    }

    /// Writes `bytes` through a raw pointer, as the kernel does (no reference).
    fn write_through(p: *mut u8, bytes: &[u8]) {
        // SAFETY: the tests pass addresses of provided buffers at least this long.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
    }

    #[test]
    fn the_kernel_fills_buffers_while_the_worker_reads_others_and_gives_them_back() {
        let (mut br, mut k) = provided(4, 8, 0);
        let a = k.recv(&br, b"aaaa");
        // A receive in flight has picked the next buffer and writes it in two parts
        // while the worker frames the first one.
        let (addr, _, b) = k.pick(&br).unwrap();
        write_through(addr, b"bb");
        assert_eq!(br.buf(a, 4), b"aaaa");
        // SAFETY: 2 bytes into a buffer of 8.
        write_through(unsafe { addr.add(2) }, b"BB");
        assert_eq!(
            br.buf(a, 99),
            b"aaaa\0\0\0\0",
            "a length past the buffer is cut"
        );
        assert_eq!(br.buf(b, 4), b"bbBB");
        // Given back, the first buffer goes round the ring again.
        br.recycle(a);
        br.publish();
        for want in [2, 3] {
            assert_eq!(k.recv(&br, b"x"), want);
        }
        assert_eq!(k.recv(&br, b"again"), a);
        assert!(k.pick(&br).is_none(), "every buffer is the worker's now");
        assert_eq!(br.buf(a, 5), b"again");
        assert_eq!(br.buf(3, 1), b"x");
    }

    #[test]
    fn a_send_out_of_a_buffer_reads_it_while_the_kernel_fills_another() {
        let (mut br, mut k) = provided(2, 8, 7);
        let echo = k.recv(&br, b"echo me!");
        // The echo's send reads from byte 5 on while a receive fills the other buffer.
        let send = br.ptr(echo, 5);
        let other = k.recv(&br, b"next");
        // SAFETY: `send` points at the last 3 bytes of `echo`, lent to the send.
        let sent = unsafe { std::slice::from_raw_parts(send, 3) }.to_vec();
        assert_eq!(sent, b"me!");
        assert_eq!(br.buf(other, 4), b"next");
        // The send completed: the buffer goes back and is filled again.
        br.recycle(echo);
        br.publish();
        assert_eq!(k.recv(&br, b"second"), echo);
        assert_eq!(br.buf(echo, 6), b"second");
        assert_eq!(br.bgid, 7);
    }

    #[test]
    fn buffers_are_refused_outside_the_ring() {
        let mut br = BufRing::unregistered(2, 8, 0).unwrap();
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| br.recycle(2))).is_err());
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| br.ptr(0, 9))).is_err());
        assert!(std::panic::catch_unwind(|| br.buf(2, 1).len()).is_err());
        assert_eq!((br.entries(), br.buf_len()), (2, 8));
    }
}
