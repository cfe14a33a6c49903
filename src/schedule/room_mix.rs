//! Which connections share a room in member slot s (`--members-per-connection M`,
//! `--room-layout`). Slot 0 is the one-member layout: connection j is member `j mod R`
//! of room `j / R`. Under `grouped` every slot copies it (room r of each slot has the
//! same R connections), so a multiplexing client's M streams all meet the same R - 1
//! other clients. Under `mixed` (the default) slot s >= 1 places its members by a
//! seeded permutation, so a connection's room mates differ from slot to slot, as the
//! streams of real multiplexed clients (a gateway's players, a bot host's bots) meet
//! strangers.
//!
//! The permutation keeps each connection's member number (`j mod R`) and shuffles,
//! for each member number m, the rooms of the ones holding m: every room keeps exactly
//! its member count (the short last room too), members 0..K of each room stay its
//! senders (`--senders-per-room`), and a room's R members are R different connections.
//!
//! It is a bijection over one worker's connections (whole rooms, contiguous), never
//! wider: the worker's receive accounting must see every frame of its rooms (fan-out
//! to the last receiver is counted where all the room's receivers are), and `--shard`
//! gives each machine whole rooms. So under W workers x S shards the members mix within
//! each of the W x S shares; the layout is a pure function of the run's seed, the slot
//! and the share's first connection and size, computed once at start by the worker
//! that sends, joins and accounts for those connections. Two tables per slot (a `u32`
//! each way per connection) make it O(1) on the hot path.

use super::mix64;

/// `--room-layout`: how member slots past the first place their members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RoomLayout {
    /// Every slot's room r holds the same R connections.
    Grouped,
    /// Slot s >= 1 shuffles rooms per member number, seeded (the default).
    #[default]
    Mixed,
}

impl RoomLayout {
    pub fn name(self) -> &'static str {
        match self {
            RoomLayout::Grouped => "grouped",
            RoomLayout::Mixed => "mixed",
        }
    }
}

impl std::str::FromStr for RoomLayout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "grouped" => Ok(RoomLayout::Grouped),
            "mixed" => Ok(RoomLayout::Mixed),
            _ => Err(format!("expected grouped or mixed, got {s:?}")),
        }
    }
}

/// One member slot's placement over a share of connections `first..first + count`
/// (global indices; `first` a room boundary): the room of a connection and the
/// connection of a room's member, both global.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMap {
    first: u64,
    room_size: u64,
    /// Per local connection c, its position `room x R + m` (local); empty: identity.
    fwd: Box<[u32]>,
    /// Per local position, the local connection there.
    inv: Box<[u32]>,
}

impl SlotMap {
    /// The one-member layout: connection j in room `j / R`.
    pub fn identity(first: u64, room_size: u64) -> SlotMap {
        SlotMap {
            first,
            room_size,
            fwd: Box::new([]),
            inv: Box::new([]),
        }
    }

    /// Slot `slot`'s placement for `layout`: the identity for slot 0 and `grouped`.
    pub fn new(
        layout: RoomLayout,
        seed: u64,
        slot: usize,
        first: u64,
        count: usize,
        room_size: u64,
    ) -> SlotMap {
        if slot == 0 || layout == RoomLayout::Grouped {
            return SlotMap::identity(first, room_size);
        }
        SlotMap::mixed(seed, slot, first, count, room_size)
    }

    /// A seeded shuffle of the share's rooms for each member number (Fisher-Yates,
    /// one stream per (seed, slot, share, member number)).
    pub fn mixed(seed: u64, slot: usize, first: u64, count: usize, room_size: u64) -> SlotMap {
        assert_eq!(first % room_size, 0, "a share is whole rooms");
        assert!(count <= u32::MAX as usize);
        let r = room_size as usize;
        let rooms = count.div_ceil(r);
        let last = count - (rooms.saturating_sub(1)) * r;
        let mut fwd = vec![0u32; count].into_boxed_slice();
        let mut inv = vec![0u32; count].into_boxed_slice();
        let mut perm: Vec<u32> = Vec::with_capacity(rooms);
        let share = mix64(seed ^ mix64(slot as u64) ^ mix64(first.wrapping_add(1) << 1));
        for m in 0..r.min(count) {
            // Rooms holding member m: all, but the short last one when m is past it.
            let n = if m < last { rooms } else { rooms - 1 };
            perm.clear();
            perm.extend(0..n as u32);
            fastrand::Rng::with_seed(mix64(share ^ m as u64)).shuffle(&mut perm);
            for (x, &y) in perm.iter().enumerate() {
                let c = x * r + m;
                let v = y as usize * r + m;
                fwd[c] = v as u32;
                inv[v] = c as u32;
            }
        }
        SlotMap {
            first,
            room_size,
            fwd,
            inv,
        }
    }

    /// The rooms are the one-member layout's.
    #[inline]
    pub fn is_identity(&self) -> bool {
        self.fwd.is_empty()
    }

    /// The room (global) of connection `j` (global, of the share).
    #[inline]
    pub fn room(&self, j: u64) -> u64 {
        if self.fwd.is_empty() {
            return j / self.room_size;
        }
        (self.first + u64::from(self.fwd[(j - self.first) as usize])) / self.room_size
    }

    /// The connection (global) that is member `m` of room `room` (global, of the
    /// share; `m` below the room's member count).
    #[inline]
    pub fn conn(&self, room: u64, m: u64) -> u64 {
        let pos = room * self.room_size + m;
        if self.inv.is_empty() {
            return pos;
        }
        self.first + u64::from(self.inv[(pos - self.first) as usize])
    }

    /// Bytes a mixed slot over `count` connections holds.
    pub fn bytes_for(count: u64) -> u64 {
        count.saturating_mul(2 * std::mem::size_of::<u32>() as u64)
    }

    /// Bytes this slot's tables hold.
    pub fn table_bytes(&self) -> u64 {
        (std::mem::size_of_val(&*self.fwd) + std::mem::size_of_val(&*self.inv)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every connection has one room, every room its exact members, and `conn` undoes
    /// `room`: a bijection that keeps member numbers.
    fn check_bijection(map: &SlotMap, first: u64, count: u64, r: u64) {
        let mut seen = BTreeSet::new();
        for j in first..first + count {
            let room = map.room(j);
            let m = j % r;
            assert!(
                room >= first / r && room < (first + count).div_ceil(r),
                "{j}"
            );
            assert_eq!(map.conn(room, m), j, "conn undoes room for {j}");
            assert!(seen.insert((room, m)), "two connections at ({room}, {m})");
        }
        for room in first / r..(first + count).div_ceil(r) {
            let members = r.min(first + count - room * r);
            let held = (first..first + count)
                .filter(|&j| map.room(j) == room)
                .count() as u64;
            assert_eq!(held, members, "room {room}");
        }
    }

    #[test]
    fn mixed_is_a_bijection_with_exact_room_sizes() {
        // Whole rooms, a short last room, one room, rooms of one, a share from 40.
        for (first, count, r) in [
            (0, 100, 10),
            (0, 97, 10),
            (0, 7, 7),
            (0, 5, 1),
            (40, 63, 10),
        ] {
            for slot in 1..4 {
                let map = SlotMap::mixed(7, slot, first, count as usize, r);
                check_bijection(&map, first, count, r);
                assert_eq!(map.table_bytes(), SlotMap::bytes_for(count));
            }
        }
        let id = SlotMap::identity(40, 10);
        check_bijection(&id, 40, 63, 10);
        assert_eq!(id.table_bytes(), 0);
    }

    #[test]
    fn mixed_is_seeded_and_actually_mixes() {
        let (first, count, r) = (0u64, 200usize, 10u64);
        let a = SlotMap::mixed(1, 1, first, count, r);
        assert_eq!(a, SlotMap::mixed(1, 1, first, count, r), "reproducible");
        assert_ne!(a, SlotMap::mixed(2, 1, first, count, r), "the seed counts");
        assert_ne!(
            a,
            SlotMap::mixed(1, 2, first, count, r),
            "each slot its own"
        );
        // Slot 0 and grouped are the identity; mixed slot 0 too.
        assert!(SlotMap::new(RoomLayout::Mixed, 1, 0, first, count, r).is_identity());
        assert!(SlotMap::new(RoomLayout::Grouped, 1, 3, first, count, r).is_identity());
        assert_eq!(SlotMap::new(RoomLayout::Mixed, 1, 1, first, count, r), a);
        // Connection 0's room mates in slot 1 are not its slot-0 mates (1..10): with
        // 20 rooms, a mate stays with probability 1/20 each.
        let mates = |m: &SlotMap, j: u64| -> BTreeSet<u64> {
            let room = m.room(j);
            (0..r)
                .map(|k| m.conn(room, k))
                .filter(|&x| x != j)
                .collect()
        };
        let id = SlotMap::identity(first, r);
        let kept: usize = (0..count as u64)
            .map(|j| mates(&a, j).intersection(&mates(&id, j)).count())
            .sum();
        // 200 x 9 pairs, about 1/20 of them kept; far below half.
        assert!(kept < 200 * 9 / 4, "{kept} of 1800 room-mate pairs stayed");
    }

    #[test]
    fn layout_names_parse_back() {
        for l in [RoomLayout::Grouped, RoomLayout::Mixed] {
            assert_eq!(l.name().parse::<RoomLayout>(), Ok(l));
        }
        assert!("random".parse::<RoomLayout>().is_err());
    }
}
