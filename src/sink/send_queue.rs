//! The broadcast sink's per-connection send queues: one fixed byte ring per
//! connection slot, all in one allocation made at start (`slots × QUEUE_BYTES`,
//! zeroed, so the pages of a slot never used are never touched).
//!
//! Relaying a frame to a member appends its bytes whole (a TCP frame is never split
//! across a full queue: the stream stays framed); a frame that does not fit the
//! member's free space is not queued, and the caller counts it. One send per slot is
//! in flight at a time, reading the queue's oldest contiguous bytes.
//!
//! Ownership across incarnations of a slot: the kernel reads an in-flight send's bytes
//! until its completion, which may arrive after the connection was torn down and the
//! slot given to a new connection. So the queue outlives the connection: a teardown
//! ([`SendQueues::abandon`]) drops the bytes not yet handed to the kernel but keeps the
//! in-flight range reserved; the next incarnation appends after it and sends nothing
//! until the stale completion ([`SendQueues::sent`] with the whole in-flight length)
//! releases it. Bytes under a send are therefore never rewritten while it runs.
//!
//! The bytes are an [`IoBuf`]: while one slot's send is in flight the worker appends
//! to other slots (and to the free part of the same one), so no reference may span
//! more than the bytes being written. The tests run under Miri (`scripts/test.sh`).

use crate::engine::iobuf::IoBuf;

/// Bytes of one connection's send queue (of one member's: a connection of M members
/// gets M times this, up to [`QUEUE_BYTES_MAX`]).
pub(crate) const QUEUE_BYTES: usize = 16 * 1024;
/// Most bytes of one connection's send queue.
pub(crate) const QUEUE_BYTES_MAX: usize = 256 * 1024;

#[derive(Debug, Clone, Copy, Default)]
struct Queue {
    /// Oldest byte not known to be sent (a position; the ring index is `% QUEUE_BYTES`).
    head: u32,
    /// One past the newest byte queued.
    tail: u32,
    /// Bytes from `head` under the send in flight; 0 when none is.
    inflight: u32,
}

pub(crate) struct SendQueues {
    bytes: IoBuf,
    queues: Box<[Queue]>,
    /// Bytes of each slot's queue.
    cap: usize,
}

impl SendQueues {
    /// Queues of `cap` bytes per slot, a power of two (positions wrap at 2^32).
    pub(crate) fn with_capacity(slots: usize, cap: usize) -> SendQueues {
        assert!(cap.is_power_of_two() && cap <= QUEUE_BYTES_MAX);
        SendQueues {
            bytes: IoBuf::zeroed(slots * cap),
            queues: vec![Queue::default(); slots].into_boxed_slice(),
            cap,
        }
    }

    /// Bytes queued in `slot` (in flight or not).
    pub(crate) fn queued(&self, slot: usize) -> usize {
        let q = &self.queues[slot];
        q.tail.wrapping_sub(q.head) as usize
    }

    /// Appends the concatenation of `parts` whole, or nothing (returns false) when it
    /// does not fit.
    pub(crate) fn push(&mut self, slot: usize, parts: &[&[u8]]) -> bool {
        let n: usize = parts.iter().map(|p| p.len()).sum();
        if n > self.cap - self.queued(slot) {
            return false;
        }
        let q = &mut self.queues[slot];
        let base = slot * self.cap;
        let mut at = q.tail as usize % self.cap;
        // Only the free bytes are written, each part in at most two pieces (up to the
        // end of the ring, then from its start): the send in flight reads the others.
        for part in parts {
            let first = part.len().min(self.cap - at);
            let (to_end, from_start) = part.split_at(first);
            self.bytes
                .region_mut(base + at..base + at + first)
                .copy_from_slice(to_end);
            self.bytes
                .region_mut(base..base + from_start.len())
                .copy_from_slice(from_start);
            at = (at + part.len()) % self.cap;
        }
        q.tail = q.tail.wrapping_add(n as u32);
        true
    }

    /// Starts the next send of `slot`: the oldest queued bytes up to the end of the
    /// ring, as (address, length); `None` if a send is in flight or nothing is queued.
    /// The address stays valid (and its bytes unchanged) until [`SendQueues::sent`].
    pub(crate) fn begin_send(&mut self, slot: usize) -> Option<(*const u8, usize)> {
        let queued = self.queued(slot);
        let q = &mut self.queues[slot];
        if q.inflight > 0 || queued == 0 {
            return None;
        }
        let at = q.head as usize % self.cap;
        let len = queued.min(self.cap - at);
        q.inflight = len as u32;
        let start = slot * self.cap + at;
        Some((self.bytes.kernel_ptr(start..start + len).cast_const(), len))
    }

    /// The send in flight on `slot` ended having sent `n` bytes (at most its length;
    /// 0 to send the same bytes again). A stale send (its connection is gone) passes
    /// its whole length: `abandon` already dropped what followed it.
    pub(crate) fn sent(&mut self, slot: usize, n: usize) {
        let q = &mut self.queues[slot];
        assert!(n <= q.inflight as usize, "sent more than was in flight");
        q.head = q.head.wrapping_add(n as u32);
        q.inflight = 0;
    }

    /// The length of the send in flight on `slot` (0: none).
    pub(crate) fn inflight(&self, slot: usize) -> usize {
        self.queues[slot].inflight as usize
    }

    /// The connection of `slot` is gone: drops its queued bytes except those under the
    /// send in flight, which stay reserved until that send's completion.
    pub(crate) fn abandon(&mut self, slot: usize) {
        let q = &mut self.queues[slot];
        q.tail = q.head.wrapping_add(q.inflight);
    }
}

/// Pure (no syscall), so they run under Miri too (`cargo +nightly miri test --lib
/// sink::send_queue`): a send's pointer is read after the worker appended to the same
/// and to other slots, as the kernel reads a send in flight.
#[cfg(test)]
mod tests {
    use super::*;

    fn take(q: &mut SendQueues, slot: usize) -> Vec<u8> {
        let (ptr, len) = q.begin_send(slot).expect("something to send");
        // SAFETY: begin_send returned a range inside `q.bytes`, unchanged until `sent`.
        let v = unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec();
        q.sent(slot, len);
        v
    }

    #[test]
    fn frames_go_out_in_order_across_the_wrap() {
        let mut q = SendQueues::with_capacity(2, QUEUE_BYTES);
        let a = vec![1u8; QUEUE_BYTES - 10];
        assert!(q.push(1, &[&a]));
        assert_eq!(take(&mut q, 1), a);
        // 20 bytes from ring offset QUEUE_BYTES - 10: two sends, 10 and 10.
        let b: Vec<u8> = (0..20).collect();
        assert!(q.push(1, &[&b[..4], &b[4..]]));
        let mut got = take(&mut q, 1);
        assert_eq!(got.len(), 10);
        got.extend(take(&mut q, 1));
        assert_eq!(got, b);
        assert_eq!((q.queued(1), q.queued(0)), (0, 0));
        assert!(q.begin_send(1).is_none());
    }

    #[test]
    fn a_frame_that_does_not_fit_is_refused_whole() {
        let mut q = SendQueues::with_capacity(1, QUEUE_BYTES);
        assert!(q.push(0, &[&[7; QUEUE_BYTES - 5]]));
        assert!(!q.push(0, &[&[8; 6]]));
        assert_eq!(q.queued(0), QUEUE_BYTES - 5);
        assert!(q.push(0, &[&[8; 5]]));
        assert!(!q.push(0, &[&[9; 1]]));
    }

    #[test]
    fn one_send_at_a_time_and_partial_sends_resume() {
        let mut q = SendQueues::with_capacity(1, QUEUE_BYTES);
        q.push(0, &[b"abcdef"]);
        let (_, len) = q.begin_send(0).unwrap();
        assert_eq!(len, 6);
        q.push(0, &[b"gh"]);
        assert!(q.begin_send(0).is_none(), "a send is in flight");
        q.sent(0, 4);
        assert_eq!(take(&mut q, 0), b"efgh");
    }

    #[test]
    fn an_abandoned_queue_keeps_the_in_flight_bytes_until_their_completion() {
        let mut q = SendQueues::with_capacity(1, QUEUE_BYTES);
        q.push(0, &[b"old-in-flight"]);
        let (ptr, len) = q.begin_send(0).unwrap();
        q.push(0, &[b"old-queued"]);
        q.abandon(0);
        // The next connection on the slot queues behind the reserved range...
        q.push(0, &[b"new"]);
        assert!(q.begin_send(0).is_none());
        // SAFETY: the range stays reserved until `sent`.
        assert_eq!(
            unsafe { std::slice::from_raw_parts(ptr, len) },
            b"old-in-flight"
        );
        // ...and the stale completion releases it.
        q.sent(0, len);
        assert_eq!(take(&mut q, 0), b"new");
    }

    #[test]
    fn sends_in_flight_on_several_slots_survive_appends_everywhere_else() {
        let cap = 64;
        let mut q = SendQueues::with_capacity(3, cap);
        // Slot 0's send covers the end of its ring; slot 1's frame wraps around it.
        assert!(q.push(0, &[&[0; 40]]));
        assert_eq!(take(&mut q, 0).len(), 40);
        assert!(q.push(0, &[b"zero-to-the-end:", &[b'.'; 8]]));
        let (p0, n0) = q.begin_send(0).unwrap();
        assert!(q.push(1, &[&[0; 62]]));
        assert_eq!(take(&mut q, 1).len(), 62);
        assert!(q.push(1, &[b"one"]));
        let (p1, n1) = q.begin_send(1).unwrap();
        // While both sends are in flight: appends to slot 2, to the free part of slot 1
        // and to slot 0 after the wrap (the bytes before its send).
        assert!(q.push(2, &[b"two"]));
        assert!(q.push(1, &[b"-more"]));
        assert!(q.push(0, &[&[b'w'; 30]]));
        // SAFETY: both ranges stay reserved until `sent`.
        let (s0, s1) = unsafe {
            (
                std::slice::from_raw_parts(p0, n0),
                std::slice::from_raw_parts(p1, n1),
            )
        };
        assert_eq!((s0, s1), (&b"zero-to-the-end:........"[..], &b"on"[..]));
        q.sent(0, n0);
        q.sent(1, n1);
        assert_eq!(take(&mut q, 0), [b'w'; 30]);
        assert_eq!(take(&mut q, 1), b"e-more");
        assert_eq!(take(&mut q, 2), b"two");
    }
}
