//! Aggregate mode: each room's frames waiting for the next server tick.
//!
//! A downlink frame holds `per_tick` entries. A room whose members' frames straddle
//! the sink's tick boundary sometimes sends one member's two frames within one tick
//! (send jitter moves a frame across the boundary) and none in the next: more than a
//! downlink frame holds. Such frames are *carried* to the next tick, in arrival order,
//! as a lockstep server processes an input in the next frame rather than dropping it.
//! Each room keeps room for a second tick's worth; beyond that a frame is lost
//! (counted by the caller as `aggregate_overflow`). Fixed at start: nothing grows.

use crate::proto::frame::Entry;

pub(crate) struct Pending {
    entries: Box<[Entry]>,
    len: Box<[u32]>,
    /// Entries one downlink frame holds.
    per_tick: usize,
}

impl Pending {
    /// For `rooms` rooms whose downlink frames hold `per_tick` entries each.
    pub(crate) fn new(rooms: usize, per_tick: usize) -> Pending {
        Pending {
            entries: vec![Entry::default(); rooms * 2 * per_tick].into_boxed_slice(),
            len: vec![0; rooms].into_boxed_slice(),
            per_tick,
        }
    }

    fn base(&self, room: usize) -> usize {
        room * 2 * self.per_tick
    }

    /// Queues `e` for `room`'s next tick; false when the room's buffer (this tick
    /// and a carried one) is full and `e` is lost.
    pub(crate) fn push(&mut self, room: usize, e: Entry) -> bool {
        let n = self.len[room] as usize;
        if n == 2 * self.per_tick {
            return false;
        }
        let at = self.base(room) + n;
        self.entries[at] = e;
        self.len[room] += 1;
        true
    }

    /// The entries `room`'s downlink frames carry this tick: the oldest `per_tick`.
    /// (A receiver skips its own without echo, so it never gets more.)
    pub(crate) fn due(&self, room: usize) -> &[Entry] {
        let n = (self.len[room] as usize).min(self.per_tick);
        let b = self.base(room);
        &self.entries[b..b + n]
    }

    /// Forgets `room`'s entries (its members left: the slot may go to another room).
    pub(crate) fn clear(&mut self, room: usize) {
        self.len[room] = 0;
    }

    /// After `room`'s tick went out: forgets what [`Pending::due`] returned and
    /// moves the rest to the front. Returns how many were carried to the next tick.
    pub(crate) fn advance(&mut self, room: usize) -> u64 {
        let n = self.len[room] as usize;
        let sent = n.min(self.per_tick);
        let b = self.base(room);
        self.entries.copy_within(b + sent..b + n, b);
        self.len[room] = (n - sent) as u32;
        (n - sent) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(member: u16, seq: u64) -> Entry {
        Entry {
            member,
            seq,
            intended_ns: seq * 10,
        }
    }

    #[test]
    fn frames_beyond_one_downlink_frame_go_out_the_next_tick_in_order() {
        let mut p = Pending::new(2, 3);
        for s in 0..4 {
            assert!(p.push(1, e(s as u16, s)));
        }
        assert!(p.push(0, e(9, 9)));
        let seqs = |p: &Pending, r| p.due(r).iter().map(|x| x.seq).collect::<Vec<_>>();
        assert_eq!(seqs(&p, 1), [0, 1, 2]);
        assert_eq!(seqs(&p, 0), [9], "rooms are apart");
        assert_eq!(p.advance(1), 1, "one carried");
        assert_eq!(p.advance(0), 0);
        assert_eq!(seqs(&p, 1), [3]);
        assert!(p.due(0).is_empty());
        assert!(p.push(1, e(4, 4)));
        assert_eq!(seqs(&p, 1), [3, 4]);
    }

    #[test]
    fn a_room_holds_two_ticks_and_loses_what_comes_beyond() {
        let mut p = Pending::new(1, 2);
        assert!((0..4).all(|s| p.push(0, e(0, s))));
        assert!(!p.push(0, e(0, 4)), "full: lost");
        assert_eq!(p.advance(0), 2);
        assert!(p.push(0, e(0, 5)));
        assert_eq!(p.due(0).iter().map(|x| x.seq).collect::<Vec<_>>(), [2, 3]);
    }
}
