//! The broadcast sink's room table: which peers (TCP connection slots, UDP peer
//! indices) are members of which room.
//!
//! A peer joins at its first frame, under the (room, member) of that frame's header;
//! a room holds at most `room_size` members, and the table at most `rooms_max` rooms
//! at once, both fixed at start: the member array is `rooms_max × room_size` entries
//! allocated once, the room-id index is a `HashMap` created with twice the capacity
//! it can ever hold (so inserting and removing never reallocates, not even to clean
//! up tombstones), and a room slot freed by its last member goes back on a free list.
//! Relaying a frame walks the sender's room: `members(room)` is a slice, no lookup.
//! Leaving scans the room's members (at most `room_size`; leaving is rare) and moves
//! the last member into the hole, so a room's members stay contiguous.

use std::collections::HashMap;

/// A room slot: an index into the table, stable while the room has members.
pub(crate) type RoomSlot = u32;

/// One member of a room: the peer, and the member index its first frame announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member {
    pub peer: u32,
    pub member: u16,
}

/// Why a peer could not join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JoinError {
    /// The room already has `room_size` members.
    Full,
    /// The table already holds `rooms_max` rooms.
    NoRoom,
}

pub(crate) struct Rooms {
    room_size: usize,
    /// Room id (from the frame header) -> slot.
    index: HashMap<u32, RoomSlot>,
    /// Per slot: the room id and how many members it has (0: free).
    ids: Box<[u32]>,
    lens: Box<[u16]>,
    /// `rooms_max × room_size` members; slot s owns `[s × room_size, (s+1) × room_size)`.
    members: Box<[Member]>,
    /// Free slots, a stack.
    free: Vec<RoomSlot>,
}

impl Rooms {
    /// A table of at most `rooms_max` rooms of at most `room_size` members each.
    pub(crate) fn new(rooms_max: usize, room_size: usize) -> Rooms {
        assert!(rooms_max > 0 && (1..=u16::MAX as usize).contains(&room_size));
        Rooms {
            room_size,
            index: HashMap::with_capacity(2 * rooms_max),
            ids: vec![0; rooms_max].into_boxed_slice(),
            lens: vec![0; rooms_max].into_boxed_slice(),
            members: vec![Member { peer: 0, member: 0 }; rooms_max * room_size].into_boxed_slice(),
            free: (0..rooms_max as RoomSlot).rev().collect(),
        }
    }

    /// Puts `peer` into room `room` as `member`; the slot of the room.
    pub(crate) fn join(
        &mut self,
        room: u32,
        member: u16,
        peer: u32,
    ) -> Result<RoomSlot, JoinError> {
        let slot = match self.index.get(&room) {
            Some(&slot) => slot,
            None => {
                let slot = self.free.pop().ok_or(JoinError::NoRoom)?;
                self.index.insert(room, slot);
                self.ids[slot as usize] = room;
                slot
            }
        };
        let len = self.lens[slot as usize] as usize;
        if len == self.room_size {
            return Err(JoinError::Full);
        }
        self.members[slot as usize * self.room_size + len] = Member { peer, member };
        self.lens[slot as usize] += 1;
        Ok(slot)
    }

    /// Takes `peer` out of the room in `slot`; the room is freed with its last member
    /// (then true).
    pub(crate) fn leave(&mut self, slot: RoomSlot, peer: u32) -> bool {
        let s = slot as usize;
        let len = self.lens[s] as usize;
        let base = s * self.room_size;
        let room = &mut self.members[base..base + len];
        let at = room
            .iter()
            .position(|m| m.peer == peer)
            .expect("a peer leaves the room it joined");
        room[at] = room[len - 1];
        self.lens[s] -= 1;
        if len == 1 {
            self.index.remove(&self.ids[s]);
            self.free.push(slot);
        }
        len == 1
    }

    /// The peer that is `member` of room `room` (the id of the frame header), if any.
    pub(crate) fn peer_of(&self, room: u32, member: u16) -> Option<u32> {
        let slot = *self.index.get(&room)?;
        let m = self.members(slot).iter().find(|m| m.member == member)?;
        Some(m.peer)
    }

    /// The members of the room in `slot`, in no particular order.
    pub(crate) fn members(&self, slot: RoomSlot) -> &[Member] {
        let base = slot as usize * self.room_size;
        &self.members[base..base + self.lens[slot as usize] as usize]
    }

    /// How many room slots the table has.
    pub(crate) fn capacity(&self) -> usize {
        self.ids.len()
    }

    /// The room id of `slot`.
    pub(crate) fn id(&self, slot: RoomSlot) -> u32 {
        self.ids[slot as usize]
    }

    /// Rooms with at least one member.
    #[cfg(test)]
    fn active(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(r: &Rooms, slot: RoomSlot) -> Vec<u32> {
        let mut p: Vec<u32> = r.members(slot).iter().map(|m| m.peer).collect();
        p.sort();
        p
    }

    #[test]
    fn peers_join_their_room_and_rooms_are_separate() {
        let mut r = Rooms::new(4, 3);
        let a = r.join(70, 0, 10).unwrap();
        let b = r.join(71, 0, 20).unwrap();
        assert_ne!(a, b);
        assert_eq!(r.join(70, 1, 11), Ok(a));
        assert_eq!(peers(&r, a), vec![10, 11]);
        assert_eq!(peers(&r, b), vec![20]);
        assert_eq!((r.id(a), r.id(b), r.active()), (70, 71, 2));
        assert!(r.members(a).contains(&Member {
            peer: 11,
            member: 1
        }));
    }

    #[test]
    fn a_full_room_refuses_and_a_leave_makes_space() {
        let mut r = Rooms::new(2, 2);
        let a = r.join(5, 0, 1).unwrap();
        r.join(5, 1, 2).unwrap();
        assert_eq!(r.join(5, 2, 3), Err(JoinError::Full));
        assert!(!r.leave(a, 1));
        assert_eq!(peers(&r, a), vec![2]);
        assert_eq!(r.join(5, 2, 3), Ok(a));
        assert_eq!(peers(&r, a), vec![2, 3]);
    }

    #[test]
    fn the_last_leave_frees_the_room_for_another_id() {
        let mut r = Rooms::new(1, 2);
        let a = r.join(9, 0, 1).unwrap();
        assert_eq!(r.join(8, 0, 2), Err(JoinError::NoRoom));
        assert!(r.leave(a, 1));
        assert_eq!(r.active(), 0);
        let b = r.join(8, 0, 2).unwrap();
        assert_eq!((r.id(b), peers(&r, b)), (8, vec![2]));
        assert_eq!(r.join(9, 0, 3), Err(JoinError::NoRoom));
    }

    #[test]
    fn peer_of_finds_a_member_by_its_header_index() {
        let mut r = Rooms::new(2, 3);
        let a = r.join(5, 0, 10).unwrap();
        r.join(5, 2, 12).unwrap();
        r.join(6, 2, 22).unwrap();
        assert_eq!(r.peer_of(5, 2), Some(12));
        assert_eq!(r.peer_of(5, 0), Some(10));
        assert_eq!(r.peer_of(6, 2), Some(22));
        assert_eq!(r.peer_of(5, 1), None);
        assert_eq!(r.peer_of(7, 0), None);
        r.leave(a, 10);
        assert_eq!(r.peer_of(5, 0), None);
    }

    #[test]
    fn churn_never_grows_the_index() {
        let mut r = Rooms::new(8, 4);
        let cap = r.index.capacity();
        for i in 0..10_000u32 {
            let s = r.join(i, 0, i).unwrap();
            r.leave(s, i);
        }
        assert_eq!(r.index.capacity(), cap);
    }
}
