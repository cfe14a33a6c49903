//! One ring's receive buffers: a provided-buffer ring ([`BufRing`], the engine's)
//! shared by every connection of the ring, so an idle connection owns no buffer at
//! all — the kernel picks one only when data arrives.
//!
//! Echo keeps a received buffer until its bytes have been sent back; the buffers a
//! connection still has to send form a FIFO chain linked through `next` (one `u16`
//! per buffer, no allocation). The pool counts the buffers it has lent out, so the
//! server knows when it is worth re-arming receives that ran out of buffers.

use std::io;

use io_uring::IoUring;

use super::token::NO_BUF;
use crate::engine::buf_ring::BufRing;

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
    ring: BufRing,
    /// Bytes received into each buffer (what echo sends back).
    filled: Box<[u32]>,
    /// Chain links.
    next: Box<[u16]>,
    /// Buffers the kernel has filled and the sink not yet given back.
    lent: usize,
}

impl BufPool {
    /// Registers `entries` (a power of two, at most 32768) buffers of `buf_bytes`
    /// under group `bgid` with `ring`, all provided to the kernel.
    pub(crate) fn new(
        ring: &IoUring,
        entries: u16,
        buf_bytes: usize,
        bgid: u16,
    ) -> io::Result<BufPool> {
        assert!(entries < NO_BUF);
        Ok(BufPool {
            ring: BufRing::new(&ring.submitter(), entries, buf_bytes, bgid)?,
            filled: vec![0; entries as usize].into_boxed_slice(),
            next: vec![NO_BUF; entries as usize].into_boxed_slice(),
            lent: 0,
        })
    }

    pub(crate) fn bgid(&self) -> u16 {
        self.ring.bgid
    }

    pub(crate) fn buf_bytes(&self) -> usize {
        self.ring.buf_len()
    }

    /// Buffers the kernel can still fill.
    pub(crate) fn available(&self) -> usize {
        self.ring.entries() as usize - self.lent
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

    /// Copies `out.len()` bytes of `chain`'s buffers, starting `off` bytes into its
    /// head, into `out` (which the chain's bytes must cover).
    pub(crate) fn copy_out(&self, chain: &Chain, off: usize, out: &mut [u8]) {
        let (mut bid, mut off, mut at) = (chain.head, off, 0);
        while at < out.len() {
            assert!(bid != NO_BUF, "copy beyond the chain's bytes");
            let src = &self.ring.buf(bid, self.filled(bid))[off..];
            let n = src.len().min(out.len() - at);
            out[at..at + n].copy_from_slice(&src[..n]);
            at += n;
            off = 0;
            bid = self.next[bid as usize];
        }
    }

    /// The address of byte `off` of buffer `bid` (for a send).
    pub(crate) fn ptr(&self, bid: u16, off: usize) -> *const u8 {
        self.ring.ptr(bid, off)
    }

    /// Gives buffer `bid` back to the kernel (visible after [`BufPool::publish`]).
    pub(crate) fn give_back(&mut self, bid: u16) {
        assert!(
            bid < self.ring.entries() && self.lent > 0,
            "buffer {bid} given back twice"
        );
        self.lent -= 1;
        self.ring.recycle(bid);
    }

    /// Publishes the buffers given back since the last call.
    pub(crate) fn publish(&self) {
        self.ring.publish();
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
        self.ring.leak();
    }
}
