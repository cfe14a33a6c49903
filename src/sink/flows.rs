//! Per-flow sequence tracking for the UDP sink: loss, reordering and duplicates from
//! the sequence numbers in blaster's datagram header. Pure, no I/O; after
//! construction nothing allocates.
//!
//! A flow is (source IP, source port, flow id of the header). The table is
//! pre-sized: an open-addressing index of [`INDEX_SLOTS`] (load factor at most 1/2)
//! over a dense array of at most [`FLOW_CAPACITY`] flow states, reserved up front
//! and filled in arrival order. A datagram of a new flow that finds the table full is
//! counted (`untracked`), not tracked, and the table is never grown.
//!
//! Per flow: the highest sequence number seen and a 1024-bit window of which of the
//! 1024 sequence numbers up to it have arrived. An arrival is
//! - *in order* when its sequence number is above the highest (numbers skipped
//!   over become holes in the window),
//! - a *duplicate* when its bit is already set,
//! - *reordered* when it is below the highest and its bit was clear (it fills a
//!   hole),
//! - *late* when it is more than 1023 below the highest: the window cannot tell, so
//!   it is assumed to be a reordered original (counted in `reordered` and `late`).
//!
//! Loss needs no per-flow pass: `expected` accumulates, over flows, highest + 1 (each
//! flow from sequence 0), and `lost = expected - distinct tracked arrivals`, so a
//! reordered datagram arriving later reduces it.
//!
//! Sequence numbers come from the network, so a peer may send any: one datagram with
//! sequence 2^64 - 1 claims 2^64 datagrams expected. Every sum that can grow from them
//! saturates: `expected` stops at `u64::MAX`, and `lost` then reads `u64::MAX` (at
//! least that many lost), never a wrapped small or negative figure.

/// Flows tracked per sink thread.
pub(crate) const FLOW_CAPACITY: usize = 65_536;
/// Slots of the open-addressing index (a power of two, twice the capacity).
const INDEX_SLOTS: usize = 2 * FLOW_CAPACITY;
/// Bits in the per-flow arrival window.
pub(crate) const WINDOW_BITS: u64 = 1024;
const WINDOW_WORDS: usize = (WINDOW_BITS / 64) as usize;

/// The splitmix64 finaliser (Steele, Lea, Flood 2014), the flow index's hash: every
/// input bit reaches every output bit, so the table's low bits spread well even for
/// sources that differ in one port or flow id; no per-datagram cost beyond a few
/// multiplies (std's SipHash would be several times that).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Who sent a datagram: IPv4 addresses are stored v4-mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct FlowKey {
    pub ip: u128,
    pub port: u16,
    pub flow: u32,
}

impl FlowKey {
    fn hash(&self) -> u64 {
        let ip = (self.ip as u64) ^ mix((self.ip >> 64) as u64);
        mix(ip ^ ((self.port as u64) << 32 | self.flow as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }
}

/// What an arrival was, relative to what its flow had seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// First of its flow, or above the highest seen.
    InOrder,
    /// Below the highest, not seen before.
    Reordered,
    /// Seen before.
    Duplicate,
    /// More than the window below the highest: assumed reordered, not a duplicate.
    Late,
    /// Its flow is new and the table is full.
    Untracked,
}

struct Flow {
    key: FlowKey,
    highest: u64,
    /// Bit `seq % WINDOW_BITS` set when `seq` (within the window) has arrived.
    window: [u64; WINDOW_WORDS],
}

/// Counters of one sink thread (summed into `SinkStats`). Plain integers: the owning
/// thread updates them and publishes copies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// Datagrams with blaster's header, not dropped on purpose.
    pub received: u64,
    /// Their bytes (UDP payload: header + payload; no IP/UDP headers).
    pub bytes: u64,
    /// Datagrams without the header (or too short for it).
    pub foreign: u64,
    pub duplicates: u64,
    /// Includes `late`.
    pub reordered: u64,
    pub late: u64,
    /// Received datagrams of flows that did not fit the table.
    pub untracked: u64,
    /// Dropped on purpose (`drop_ratio`): not received, not answered.
    pub dropped: u64,
    /// Sum over tracked flows of highest sequence + 1.
    pub expected: u64,
    /// Flows in the table.
    pub flows: u64,
    /// Replies sent, their bytes, and replies the kernel refused.
    pub replies: u64,
    pub bytes_sent: u64,
    pub send_failed: u64,
}

impl Counters {
    /// Tracked arrivals that were not duplicates.
    pub(crate) fn distinct(&self) -> u64 {
        self.received - self.duplicates - self.untracked
    }

    /// Datagrams never seen (saturating: a late duplicate beyond the window is taken
    /// for an original and could otherwise make it negative; `u64::MAX` once
    /// `expected` has saturated, as crafted sequence numbers can make it).
    pub(crate) fn lost(&self) -> u64 {
        if self.expected == u64::MAX {
            return u64::MAX;
        }
        self.expected.saturating_sub(self.distinct())
    }

    /// Change of the (unsaturated) loss since `earlier`; negative when reordered
    /// datagrams filled more holes than new ones opened. Like [`Counters::lost`] it
    /// saturates: `i64::MAX` in the interval where `expected` reached `u64::MAX`
    /// (crafted sequence numbers), 0 after it (the loss stays pinned at its maximum).
    pub(crate) fn lost_since(&self, earlier: &Counters) -> i64 {
        if self.expected == u64::MAX {
            return if earlier.expected == u64::MAX {
                0
            } else {
                i64::MAX
            };
        }
        let opened = i64::try_from(self.expected - earlier.expected).unwrap_or(i64::MAX);
        let filled = i64::try_from(self.distinct() - earlier.distinct()).unwrap_or(i64::MAX);
        opened.saturating_sub(filled)
    }

    pub(crate) fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            received: self.received - earlier.received,
            bytes: self.bytes - earlier.bytes,
            foreign: self.foreign - earlier.foreign,
            duplicates: self.duplicates - earlier.duplicates,
            reordered: self.reordered - earlier.reordered,
            late: self.late - earlier.late,
            untracked: self.untracked - earlier.untracked,
            dropped: self.dropped - earlier.dropped,
            expected: self.expected - earlier.expected,
            flows: self.flows - earlier.flows,
            replies: self.replies - earlier.replies,
            bytes_sent: self.bytes_sent - earlier.bytes_sent,
            send_failed: self.send_failed - earlier.send_failed,
        }
    }

    /// Counts a datagram with our header of `len` bytes that `table` classified.
    pub(crate) fn record(&mut self, table: &mut FlowTable, key: FlowKey, seq: u64, len: usize) {
        self.received += 1;
        self.bytes += len as u64;
        let (arrival, expected_delta) = table.record(key, seq);
        self.expected = self.expected.saturating_add(expected_delta);
        match arrival {
            Arrival::InOrder => {}
            Arrival::Reordered => self.reordered += 1,
            Arrival::Duplicate => self.duplicates += 1,
            Arrival::Late => {
                self.reordered += 1;
                self.late += 1;
            }
            Arrival::Untracked => self.untracked += 1,
        }
        self.flows = table.len() as u64;
    }
}

/// The flow table of one sink thread.
pub(crate) struct FlowTable {
    /// 0 = empty, else index into `flows` + 1.
    index: Vec<u32>,
    flows: Vec<Flow>,
    capacity: usize,
}

impl FlowTable {
    pub(crate) fn new() -> FlowTable {
        FlowTable::with_capacity(FLOW_CAPACITY)
    }

    /// A table for at most `capacity` flows (tests use small ones).
    pub(crate) fn with_capacity(capacity: usize) -> FlowTable {
        let slots = if capacity == FLOW_CAPACITY {
            INDEX_SLOTS
        } else {
            (2 * capacity).next_power_of_two()
        };
        FlowTable {
            // Zeroed allocations: pages are only touched as flows arrive.
            index: vec![0; slots],
            flows: Vec::with_capacity(capacity),
            capacity,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.flows.len()
    }

    /// Classifies an arrival and updates its flow; also returns by how much the
    /// flow's highest + 1 grew (the `expected` increment).
    pub(crate) fn record(&mut self, key: FlowKey, seq: u64) -> (Arrival, u64) {
        let mask = self.index.len() - 1;
        let mut slot = key.hash() as usize & mask;
        loop {
            match self.index[slot] {
                0 => return self.insert(slot, key, seq),
                i if self.flows[i as usize - 1].key == key => {
                    return self.flows[i as usize - 1].arrive(seq);
                }
                // Linear probing; the index is at most half full, so this ends.
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    fn insert(&mut self, slot: usize, key: FlowKey, seq: u64) -> (Arrival, u64) {
        if self.flows.len() == self.capacity {
            return (Arrival::Untracked, 0);
        }
        let mut flow = Flow {
            key,
            highest: seq,
            window: [0; WINDOW_WORDS],
        };
        flow.set(seq);
        // Within the reserved capacity: no reallocation.
        self.flows.push(flow);
        self.index[slot] = self.flows.len() as u32;
        (Arrival::InOrder, seq.saturating_add(1))
    }
}

impl Flow {
    fn bit(seq: u64) -> (usize, u64) {
        let pos = seq % WINDOW_BITS;
        ((pos / 64) as usize, 1u64 << (pos % 64))
    }

    fn set(&mut self, seq: u64) {
        let (word, bit) = Flow::bit(seq);
        self.window[word] |= bit;
    }

    /// Clears the window bits of the `count` (< WINDOW_BITS) sequence numbers from
    /// `from` on.
    fn clear(&mut self, from: u64, count: u64) {
        let mut pos = from % WINDOW_BITS;
        let mut left = count;
        while left > 0 {
            let word = (pos / 64) as usize;
            let bit = pos % 64;
            let n = (64 - bit).min(left);
            let mask = if n == 64 {
                !0
            } else {
                ((1u64 << n) - 1) << bit
            };
            self.window[word] &= !mask;
            left -= n;
            pos = (pos + n) % WINDOW_BITS;
        }
    }

    fn arrive(&mut self, seq: u64) -> (Arrival, u64) {
        if seq > self.highest {
            let advance = seq - self.highest;
            if advance >= WINDOW_BITS {
                self.window = [0; WINDOW_WORDS];
            } else {
                // The numbers between the old highest and `seq` enter the window as
                // holes (their bits still hold arrivals from 1024 numbers earlier).
                self.clear(self.highest + 1, advance);
            }
            self.set(seq);
            self.highest = seq;
            return (Arrival::InOrder, advance);
        }
        if self.highest - seq >= WINDOW_BITS {
            return (Arrival::Late, 0);
        }
        let (word, bit) = Flow::bit(seq);
        if self.window[word] & bit != 0 {
            (Arrival::Duplicate, 0)
        } else {
            self.window[word] |= bit;
            (Arrival::Reordered, 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(flow: u32) -> FlowKey {
        FlowKey {
            ip: 0xffff_7f00_0001,
            port: 40_000,
            flow,
        }
    }

    fn feed(seqs: impl IntoIterator<Item = u64>) -> Counters {
        let mut table = FlowTable::with_capacity(16);
        let mut c = Counters::default();
        for seq in seqs {
            c.record(&mut table, key(1), seq, 100);
        }
        c
    }

    #[test]
    fn in_order_stream_has_no_loss() {
        let c = feed(0..5000);
        assert_eq!(c.received, 5000);
        assert_eq!(c.bytes, 500_000);
        assert_eq!((c.lost(), c.reordered, c.duplicates), (0, 0, 0));
        assert_eq!(c.flows, 1);
    }

    #[test]
    fn gaps_are_lost_until_they_arrive() {
        let c = feed((0..100).filter(|s| s % 10 != 3));
        assert_eq!(c.received, 90);
        assert_eq!(c.lost(), 10);
        // One of the holes filled late: reordered, and one less lost.
        let c = feed((0..100).filter(|s| s % 10 != 3).chain([33]));
        assert_eq!((c.lost(), c.reordered, c.duplicates), (9, 1, 0));
    }

    #[test]
    fn duplicates_and_reordering_are_told_apart() {
        let c = feed([0, 1, 2, 5, 3, 4, 7, 7, 6, 3]);
        assert_eq!(c.received, 10);
        assert_eq!(c.reordered, 3); // 3, 4, 6
        assert_eq!(c.duplicates, 2); // second 7, second 3
        assert_eq!(c.lost(), 0);
        // A flow need not start at 0: the numbers before its first are lost.
        let c = feed([10, 11]);
        assert_eq!(c.lost(), 10);
    }

    #[test]
    fn the_window_wraps_and_stale_bits_do_not_look_like_duplicates() {
        // Every number but 1500 up to 2000, then 1500: a hole whose bit position was
        // used by 476 (set) must have been cleared when the window advanced past it.
        let c = feed((0..2000).filter(|&s| s != 1500).chain([1500]));
        assert_eq!((c.lost(), c.reordered, c.duplicates), (0, 1, 0));
        // A big jump clears the whole window.
        let c = feed([0, 5000, 4000, 4000]);
        assert_eq!((c.reordered, c.duplicates), (1, 1));
        assert_eq!(c.lost(), 5001 - 3);
        // Beyond the window: late, taken as reordered.
        let c = feed([0, 3000, 1]);
        assert_eq!((c.reordered, c.late, c.duplicates), (1, 1, 0));
    }

    #[test]
    fn flows_are_separate_and_overflow_is_counted() {
        let mut table = FlowTable::with_capacity(2);
        let mut c = Counters::default();
        for flow in 0..3 {
            for seq in 0..10 {
                c.record(&mut table, key(flow), seq, 24);
            }
        }
        let other_port = FlowKey { port: 1, ..key(0) };
        c.record(&mut table, other_port, 0, 24);
        assert_eq!(c.received, 31);
        assert_eq!(c.untracked, 11);
        assert_eq!(c.flows, 2);
        assert_eq!((c.lost(), c.duplicates), (0, 0));
    }

    #[test]
    fn many_flows_fill_the_full_size_table() {
        let mut table = FlowTable::new();
        let mut c = Counters::default();
        for flow in 0..(FLOW_CAPACITY as u32 + 10) {
            c.record(&mut table, key(flow), 0, 24);
            c.record(&mut table, key(flow), 2, 24);
        }
        assert_eq!(c.flows, FLOW_CAPACITY as u64);
        assert_eq!(c.untracked, 20);
        assert_eq!(c.lost(), FLOW_CAPACITY as u64);
    }

    #[test]
    fn lost_since_is_signed() {
        let mut table = FlowTable::with_capacity(4);
        let mut c = Counters::default();
        c.record(&mut table, key(0), 0, 24);
        c.record(&mut table, key(0), 3, 24);
        let mid = c;
        assert_eq!(c.lost(), 2);
        c.record(&mut table, key(0), 1, 24);
        c.record(&mut table, key(0), 2, 24);
        assert_eq!(c.lost_since(&mid), -2);
        assert_eq!(c.since(&mid).reordered, 2);
    }

    #[test]
    fn a_crafted_sequence_number_saturates_the_loss() {
        // Issue 25: sequence 2^64 - 1 made `lost` wrap to 2^64 - 2 (and the second's
        // loss to a negative number).
        let mut table = FlowTable::with_capacity(4);
        let mut c = Counters::default();
        let start = c;
        c.record(&mut table, key(0), 0, 24);
        c.record(&mut table, key(0), u64::MAX, 24);
        c.record(&mut table, key(1), u64::MAX, 24);
        assert_eq!(c.expected, u64::MAX);
        assert_eq!(c.lost(), u64::MAX);
        assert_eq!(c.lost_since(&start), i64::MAX);
        let saturated = c;
        c.record(&mut table, key(0), 5, 24);
        assert_eq!((c.lost(), c.lost_since(&saturated)), (u64::MAX, 0));
    }
}
