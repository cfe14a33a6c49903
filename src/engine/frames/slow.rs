//! Slow readers (`--slow-readers RATIO:RATE`): a share of the connections read as a
//! slow subscriber does, so the server's answer to one (buffering, dropping frames,
//! disconnecting it) is measured. A slow connection, once joined, receives at most
//! [`Throttle::chunk`] bytes at a time and arms its next receive only when the bytes
//! read so far are due at RATE (a leaky bucket on the loop's timetable: the parked
//! connections wait in a heap sized at start, which the periodic scan pops; no thread
//! sleeps and no syscall is added). At RATE 0 it stops reading once joined: its
//! unread bytes fill the kernel's buffers and then the server's. The join itself is
//! never slowed (a subscriber that never subscribes is not a slow reader).
//!
//! What a slow reader gets is accounted apart ([`super::accounting`]): its frames
//! never count in the other readers' retention, loss or deviation.

use super::FrameWorker;
use crate::clock::Nanos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Smallest receive of a slow reader (bytes): below it a frame would take many.
const CHUNK_BYTES_MIN: usize = 256;
/// A slow reader's receive holds what RATE gives in this long (at least the above).
const CHUNK_NS: u64 = 20_000_000;

/// The slow readers' pacing of one worker.
pub(super) struct Throttle {
    rate_bytes_per_s: u64,
    /// Most bytes one receive of a slow reader takes.
    chunk: usize,
    /// Parked connections by the instant their next receive is due: (due, socket,
    /// generation). Sized at start for every slow socket twice (a reopened socket's
    /// old entry is skipped when it comes up); when full, a receive is armed at once.
    due: BinaryHeap<Reverse<(Nanos, u32, u32)>>,
}

impl Throttle {
    pub(super) fn new(rate_bytes_per_s: u64, sockets: usize) -> Throttle {
        let chunk = ((u128::from(rate_bytes_per_s) * u128::from(CHUNK_NS) / 1_000_000_000)
            as usize)
            .max(CHUNK_BYTES_MIN);
        Throttle {
            rate_bytes_per_s,
            chunk,
            due: BinaryHeap::with_capacity(2 * sockets + 16),
        }
    }

    /// Most bytes one receive of a slow reader takes.
    pub(super) fn chunk(&self) -> usize {
        self.chunk
    }

    /// When a reader that may read again at `ready` (or now, if later) and has just
    /// read `n` bytes may read next: the bytes' time at RATE after that.
    pub(super) fn next_at(&self, ready: Nanos, now: Nanos, n: usize) -> Nanos {
        let pause = (n as u128 * 1_000_000_000 / u128::from(self.rate_bytes_per_s)) as u64;
        ready.max(now).saturating_add(pause)
    }
}

impl FrameWorker<'_> {
    /// Connection `c` received `n` bytes at `now` and stays open: its next receive
    /// now, or, a slow reader that joined, when RATE allows (never at RATE 0).
    pub(super) fn next_recv(&mut self, c: u32, n: usize, now: Nanos) {
        let conn = &self.conns[c as usize];
        let Some(t) = self.throttle.as_mut().filter(|_| conn.slow && conn.up) else {
            return self.arm_recv(c);
        };
        if t.rate_bytes_per_s == 0 {
            return; // stopped reading
        }
        let at = t.next_at(conn.rx_at, now, n);
        if t.due.len() == t.due.capacity() {
            return self.arm_recv(c); // never reallocated: this once, unpaced
        }
        t.due.push(Reverse((at, c, conn.generation)));
        self.conns[c as usize].rx_at = at;
    }

    /// Arms the receives of the slow readers whose time has come (the periodic scan).
    pub(super) fn slow_scan(&mut self, now: Nanos) {
        loop {
            let Some(t) = self.throttle.as_mut() else {
                return;
            };
            let Some(&Reverse((at, c, generation))) = t.due.peek() else {
                return;
            };
            if at > now {
                return;
            }
            t.due.pop();
            let conn = &self.conns[c as usize];
            if conn.generation == generation && conn.up {
                self.arm_recv(c);
            }
        }
    }

    /// Slow readers wait for their turn.
    pub(super) fn slow_waiting(&self) -> bool {
        self.throttle.as_ref().is_some_and(|t| !t.due.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_readers_are_the_seeds_share_of_the_connections() {
        use crate::engine::worker_plan::SlowReaders;
        let s = SlowReaders::new(0.1, 0);
        let slow = |seed| (0..100_000).filter(|&j| s.is_slow(seed, j)).count();
        let n = slow(1);
        assert!((9_000..11_000).contains(&n), "{n} of 100,000 at 0.1");
        assert_eq!(slow(1), n, "reproducible");
        assert_ne!(slow(2), n, "the seed draws them");
        assert!((0..1000).all(|j| SlowReaders::new(1.0, 0).is_slow(3, j)));
        assert_eq!(s.ratio(), 0.1);
    }

    #[test]
    fn a_slow_reader_reads_at_its_rate() {
        let t = Throttle::new(10_000, 4);
        assert_eq!(t.chunk(), CHUNK_BYTES_MIN, "200 B per 20 ms: the floor");
        assert_eq!(Throttle::new(1_000_000, 1).chunk(), 20_000);
        // 500 B at 10 KB/s: 50 ms after it may read; a reader idle since is paced
        // from now, one still paying for earlier bytes from then.
        assert_eq!(t.next_at(0, 1_000, 500), 50_001_000);
        assert_eq!(t.next_at(80_000_000, 1_000, 500), 130_000_000);
        // 10,000 B in 40 receives of 250 B take one second.
        let mut at = 0;
        for _ in 0..40 {
            at = t.next_at(at, 0, 250);
        }
        assert_eq!(at, 1_000_000_000);
    }
}
