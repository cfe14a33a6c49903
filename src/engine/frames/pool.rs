//! Shared slots (issue 36): plain TCP frames keep no buffer per connection. A send's
//! bytes live in a send slot from its encoding to its completion, and the few bytes of
//! a frame split across two receives (the receives themselves go into the worker's
//! provided-buffer ring) wait in a tail slot until the rest arrives. Both are a
//! [`SlotPool`]: a fixed count of fixed-size slots, allocated zeroed at start and
//! handed out last-freed first, so the pages ever touched are those of the most slots
//! in use at once, not of the connections.

use crate::engine::iobuf::IoBuf;
use std::ops::Range;

/// A connection holding no slot.
pub const NO_SLOT: u32 = u32::MAX;

/// `count` slots of `len` bytes. A slot is the kernel's while a send out of it is in
/// flight, so the bytes are an [`IoBuf`].
pub struct SlotPool {
    pub buf: IoBuf,
    len: usize,
    count: u32,
    /// Slots never handed out yet: `fresh..count`.
    fresh: u32,
    /// Slots given back, the last one on top.
    free: Vec<u32>,
    /// Slots in use now.
    used: u32,
}

impl SlotPool {
    pub fn new(count: usize, len: usize) -> SlotPool {
        let count = count.min(NO_SLOT as usize - 1);
        SlotPool {
            buf: IoBuf::zeroed(count * len),
            len,
            count: count as u32,
            fresh: 0,
            // Grows only to the most slots given back at once, within `count`.
            free: Vec::with_capacity(count),
            used: 0,
        }
    }

    /// A free slot (the last one given back, else one never used), or `None` when
    /// every slot is in use.
    #[inline]
    pub fn take(&mut self) -> Option<u32> {
        let s = match self.free.pop() {
            Some(s) => s,
            None if self.fresh < self.count => {
                self.fresh += 1;
                self.fresh - 1
            }
            None => return None,
        };
        self.used += 1;
        Some(s)
    }

    /// Gives slot `s` back.
    #[inline]
    pub fn give(&mut self, s: u32) {
        assert!(s < self.fresh, "slot {s} was never taken");
        debug_assert!(!self.free.contains(&s), "slot {s} given back twice");
        self.free.push(s);
        self.used -= 1;
    }

    /// Slot `s`'s bytes in `buf`.
    #[inline]
    pub fn range(&self, s: u32) -> Range<usize> {
        let start = s as usize * self.len;
        start..start + self.len
    }

    /// Bytes per slot.
    #[inline]
    pub fn slot_len(&self) -> usize {
        self.len
    }

    /// Slots in the pool.
    pub fn count(&self) -> usize {
        self.count as usize
    }

    /// Slots in use now.
    pub fn used(&self) -> usize {
        self.used as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_last_freed_first_and_run_out_at_the_count() {
        let mut p = SlotPool::new(3, 8);
        let (a, b) = (p.take().unwrap(), p.take().unwrap());
        assert_eq!((a, b, p.used()), (0, 1, 2));
        p.give(a);
        assert_eq!(p.take(), Some(a), "the slot just freed, not a fresh one");
        assert_eq!(p.fresh, 2, "two slots ever touched");
        assert_eq!(p.take(), Some(2));
        assert_eq!(p.take(), None, "every slot in use");
        p.give(b);
        assert_eq!(p.take(), Some(b));
        assert_eq!((p.range(2), p.slot_len(), p.count()), (16..24, 8, 3));
        assert!(std::panic::catch_unwind(|| SlotPool::new(1, 1).give(0)).is_err());
    }

    /// This process's resident bytes (`/proc/self/statm`).
    fn rss() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    /// A pool of a slot per socket costs only the slots in use (the send slots are
    /// sized so, issue 36): creating 1 GiB of slots writes none of it, and taking one
    /// touches its own pages only.
    #[test]
    fn a_pool_costs_the_slots_used_not_its_count() {
        let before = rss();
        let mut p = SlotPool::new(50_000, 21_600);
        let s = p.take().unwrap();
        let r = p.range(s);
        p.buf.region_mut(r).fill(1);
        let grown = rss().saturating_sub(before);
        assert!(
            grown < 256 << 20,
            "{grown} bytes resident for one slot in use"
        );
    }
}
