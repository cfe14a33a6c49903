//! One ring's receive buffers: a provided-buffer ring ([`BufRing`], the engine's)
//! shared by every connection of the ring, so an idle connection owns no buffer at
//! all — the kernel picks one only when data arrives.
//!
//! Echo keeps a received buffer until its bytes have been sent back; the buffers a
//! connection still has to send form a FIFO chain linked through `next` (one `u16`
//! per buffer, no allocation). The pool counts the buffers it has lent out, so the
//! server knows when it is worth re-arming receives that ran out of buffers.
//!
//! Fair share: a peer that sends without reading its echo would otherwise let its
//! chain grow until it held the whole pool, and every other connection of the ring
//! would find no buffer to receive into. So a chain may grow only while it is shorter
//! than the connection's share ([`BufPool::may_hold_more`]): a fixed fraction of the
//! pool ([`SINK_RECV_POOL_SHARES`]) and never as many as the pool still has free.
//! One such peer holds at most 1/8 of the pool, each further one at most half of what
//! is still free. The server stops that connection's receive (and only its own) until
//! its sends drain; a chain may overshoot its share by the receives the kernel
//! completed before the stop reached it.

use std::io;

use super::token::NO_BUF;
use crate::engine::buf_ring::BufRing;
use crate::engine::ring::Ring;
use crate::limits::SINK_RECV_POOL_SHARES;

/// A FIFO of buffers linked through the pool (head and tail; [`NO_BUF`] when empty)
/// and how many it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chain {
    pub head: u16,
    pub tail: u16,
    /// Buffers in the chain (at most the pool's, which fit a `u16`).
    pub len: u16,
}

impl Chain {
    pub(crate) const EMPTY: Chain = Chain {
        head: NO_BUF,
        tail: NO_BUF,
        len: 0,
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
    /// Most buffers one connection's chain may reach before its receive stops.
    share: usize,
}

impl BufPool {
    /// Registers `entries` (a power of two, at most 32768) buffers of `buf_bytes`
    /// under group `bgid` with `ring`, all provided to the kernel.
    pub(crate) fn new(
        ring: &mut Ring,
        entries: u16,
        buf_bytes: usize,
        bgid: u16,
    ) -> io::Result<BufPool> {
        assert!(entries < NO_BUF);
        Ok(BufPool {
            ring: BufRing::new(ring, entries, buf_bytes, bgid)?,
            filled: vec![0; entries as usize].into_boxed_slice(),
            next: vec![NO_BUF; entries as usize].into_boxed_slice(),
            lent: 0,
            share: share(entries),
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

    /// Whether a connection whose chain holds `held` buffers may receive into another:
    /// below its share of the pool, and below what the pool still has free (so k
    /// connections that never drain cannot empty it between them).
    pub(crate) fn may_hold_more(&self, held: u16) -> bool {
        within_share(held as usize, self.share, self.available())
    }

    /// At or below this many held buffers a connection stopped by
    /// [`BufPool::may_hold_more`] receives again: half its share, so a connection
    /// that drains keeps data flowing instead of emptying its chain first.
    pub(crate) fn resume_at(&self) -> u16 {
        (self.share / 2) as u16
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
    pub(crate) fn ptr(&mut self, bid: u16, off: usize) -> *const u8 {
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
        chain.len += 1;
    }

    /// Removes the head of `chain` (which must not be empty) and returns it.
    pub(crate) fn pop(&mut self, chain: &mut Chain) -> u16 {
        let bid = chain.head;
        assert!(bid != NO_BUF, "pop from an empty chain");
        chain.head = self.next[bid as usize];
        chain.len -= 1;
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

/// One connection's share of a pool of `entries` buffers: a fixed fraction, at least
/// one buffer (a chain of one always drains: its send is in flight).
fn share(entries: u16) -> usize {
    (entries as usize / SINK_RECV_POOL_SHARES).max(1)
}

/// See [`BufPool::may_hold_more`].
fn within_share(held: usize, share: usize, available: usize) -> bool {
    held < share && held < available
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_may_hold_less_than_its_share_and_than_what_is_free() {
        assert!(within_share(0, 32, 256));
        assert!(within_share(31, 32, 200));
        assert!(!within_share(32, 32, 200), "its share reached");
        assert!(!within_share(5, 32, 5), "no more than the pool has left");
        assert!(
            within_share(0, 32, 1),
            "a connection holding none may always ask"
        );
        // Eight connections that never drain, one after the other: each stops at its
        // share or at what the others left, and the pool never runs dry.
        let mut free = 256;
        for _ in 0..8 {
            let mut held = 0;
            while within_share(held, share(256), free) {
                held += 1;
                free -= 1;
            }
        }
        assert!(free > 0, "{free}");
    }

    #[test]
    fn a_share_is_a_fixed_fraction_of_the_pool_and_at_least_one_buffer() {
        assert_eq!(share(256), 256 / SINK_RECV_POOL_SHARES);
        assert_eq!(share(2), 1);
        assert_eq!(share(1), 1);
    }
}
