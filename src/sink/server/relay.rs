//! Broadcast mode on a sink ring: frames in, relayed to the sender's room (or
//! aggregated into one downlink frame per member per server tick).
//!
//! Receiving: a connection's received buffers stay in its chain (`Conn::chain`)
//! until every frame in them is relayed; a frame split over buffers is copied out
//! whole into one scratch buffer (at most [`LEN_PREFIX_BYTES`] + [`FRAME_BYTES_MAX`]
//! bytes, allocated at start), then the buffers it used up go back to the pool. A
//! frame that does not decode closes the connection (counted in `frames_invalid`).
//!
//! Rooms: a connection joins the room of its first frame's header, as that header's
//! member (`rooms.rs`); a full room (or a full room table) refuses it, and the
//! connection is closed. Later frames are relayed to the room it joined, whatever
//! their header says. With `--members-per-connection M` a connection joins the room
//! of each frame whose room it has not named before, up to M rooms (one more is
//! refused), and each frame goes to the room its header names. It leaves its room when it is torn down. A join frame
//! (`FLAG_JOIN`: a listener that may never send) joins the same way and is sent back
//! to its sender alone, the acknowledgement; it is not a frame received.
//!
//! Sending: each frame, prefix included and unchanged, is appended to every other
//! member's send queue (`send_queue.rs`; the sender's too with `echo_to_sender`); a
//! member whose queue lacks room loses that frame (counted in `relay_dropped`). The
//! members that got bytes are listed, and after the whole batch of completions each
//! starts one send of what it has queued, so frames arriving together leave together.
//! Every send goes behind the service delay, if any: each relayed byte leaves at
//! least the delay after it arrived.
//!
//! Aggregate: frames are not relayed but recorded as entries of their room's pending
//! downlink (member, seq, intended_ns), as many as one downlink frame holds. At each
//! server tick (ticks counted from the sink's start: tick k ends at start + (k+1) ×
//! tick) every member of every room gets one frame of `down_size` bytes: header
//! (FLAG_AGGREGATE, the room, member = the receiver, seq = k, intended_ns = 0), the
//! room's entries of that tick (without the receiver's own unless
//! `echo_to_sender`), zero padding. Ticks the loop missed (a stall) are counted,
//! not sent late.

use std::time::{Duration, Instant};

use super::Worker;
use super::relay_grpc::{Blocks, GrpcPeer};
use crate::proto::frame::{
    self, Entry, FLAG_AGGREGATE, FLAG_JOIN, FRAME_BYTES_MAX, FrameHeader, HEADER_BYTES,
    LEN_PREFIX_BYTES,
};
use crate::sink::BroadcastConfig;
use crate::sink::pending::Pending;
use crate::sink::rooms::{RoomSlot, Rooms};
use crate::sink::send_queue::{QUEUE_BYTES, QUEUE_BYTES_MAX, SendQueues};
use crate::sink::stats::BroadcastStats;
use crate::sink::token::Token;

/// An unused entry of a connection's room list.
const NO_ROOM: RoomSlot = RoomSlot::MAX;
/// Rooms the table holds beyond `slots / room_size` (partly filled rooms while
/// members join).
const ROOMS_SPARE: usize = 64;

/// One connection slot's broadcast state.
#[derive(Debug, Clone, Copy)]
pub(super) struct Peer {
    /// The member index of its first room's frames (an aggregate downlink's receiver).
    member: u16,
    /// Bytes of the chain's head buffer already consumed.
    pub(super) rx_off: u32,
    /// Bytes in the chain not yet consumed.
    pub(super) rx_len: u32,
}

impl Peer {
    const NONE: Peer = Peer {
        member: 0,
        rx_off: 0,
        rx_len: 0,
    };
}

pub(super) struct Relay {
    pub(super) cfg: BroadcastConfig,
    pub(super) rooms: Rooms,
    pub(super) queues: SendQueues,
    pub(super) peers: Box<[Peer]>,
    /// Per connection slot, the rooms it joined (`rooms_per_connection` entries each:
    /// room id from the header, and the table's slot), and how many.
    pub(super) peer_rooms: Box<[(u32, RoomSlot)]>,
    pub(super) peer_nrooms: Box<[u16]>,
    /// Per connection slot, where the last frame's room was found in its list (the
    /// next frame's is usually the one after: a connection sends its members' frames
    /// in slot order).
    peer_hint: Box<[u16]>,
    /// One whole frame (prefix included), or one downlink frame being built.
    pub(super) scratch: Box<[u8]>,
    /// `--http2` (gRPC rooms): each connection's HTTP/2 side, made at its first bytes.
    pub(super) grpc: Box<[Option<Box<GrpcPeer>>]>,
    pub(super) grpc_blocks: Blocks,
    /// Slots with bytes queued since the last flush; `listed` marks them.
    ready: Vec<u32>,
    listed: Box<[bool]>,
    /// Aggregate: per room slot, the entries waiting for the tick.
    pending: Pending,
    /// Aggregate: the tick, the end of the tick under way, its index.
    tick: Duration,
    next_tick_at: Instant,
    next_seq: u64,
    started: Instant,
    pub(super) stats: BroadcastStats,
}

impl Relay {
    pub(super) fn new(cfg: BroadcastConfig, slots: usize, started: Instant) -> Relay {
        let per = cfg.rooms_per_connection;
        let memberships = slots * per;
        let rooms_max = (memberships.div_ceil(cfg.room_size) + ROOMS_SPARE).min(memberships);
        let (entries_max, tick, down) = match cfg.aggregate {
            Some(a) => (
                (a.down_size - HEADER_BYTES) / frame::ENTRY_BYTES,
                a.tick,
                a.down_size,
            ),
            None => (0, Duration::from_secs(1), 0),
        };
        Relay {
            cfg,
            rooms: Rooms::new(rooms_max, cfg.room_size),
            // A connection of M members hears M rooms: M times the queue.
            queues: SendQueues::with_capacity(
                slots,
                (QUEUE_BYTES * per).next_power_of_two().min(QUEUE_BYTES_MAX),
            ),
            peers: vec![Peer::NONE; slots].into_boxed_slice(),
            peer_rooms: vec![(0, NO_ROOM); memberships].into_boxed_slice(),
            peer_nrooms: vec![0; slots].into_boxed_slice(),
            peer_hint: vec![0; slots].into_boxed_slice(),
            scratch: vec![0; LEN_PREFIX_BYTES + FRAME_BYTES_MAX.max(down)].into_boxed_slice(),
            grpc: (0..slots).map(|_| None).collect(),
            grpc_blocks: Blocks::new(),
            ready: Vec::with_capacity(slots),
            listed: vec![false; slots].into_boxed_slice(),
            pending: Pending::new(rooms_max, entries_max),
            tick,
            next_tick_at: started + tick,
            next_seq: 0,
            started,
            stats: BroadcastStats::default(),
        }
    }

    pub(super) fn list(&mut self, slot: usize) {
        if !self.listed[slot] {
            self.listed[slot] = true;
            self.ready.push(slot as u32);
        }
    }

    /// The table slot of room `id` when connection `index` has joined it: its list
    /// searched from the slot after the last one found.
    #[inline]
    fn room_of(&mut self, index: usize, id: u32) -> Option<RoomSlot> {
        let per = self.cfg.rooms_per_connection;
        let n = self.peer_nrooms[index] as usize;
        let list = &self.peer_rooms[index * per..index * per + n];
        if per == 1 {
            // One room per connection: later frames go to the room it joined,
            // whatever their header says.
            return list.first().map(|&(_, room)| room);
        }
        let hint = self.peer_hint[index] as usize;
        for step in 0..n {
            let i = (hint + step) % n;
            if list[i].0 == id {
                self.peer_hint[index] = ((i + 1) % per) as u16;
                return Some(list[i].1);
            }
        }
        None
    }

    /// Connection `index` joins the room of `header` (its first frame naming it);
    /// `None` when the room is full, the table is, or the connection has joined
    /// `rooms_per_connection` rooms already.
    fn join(&mut self, index: usize, header: &FrameHeader) -> Option<RoomSlot> {
        let per = self.cfg.rooms_per_connection;
        let n = self.peer_nrooms[index] as usize;
        if n == per {
            return None;
        }
        let room = self
            .rooms
            .join(header.room, header.member, index as u32)
            .ok()?;
        self.peer_rooms[index * per + n] = (header.room, room);
        self.peer_nrooms[index] += 1;
        if n == 0 {
            self.peers[index].member = header.member;
        }
        self.stats.joins += 1;
        Some(room)
    }

    /// The next server tick, when aggregating.
    pub(super) fn next_tick(&self) -> Option<Instant> {
        self.cfg.aggregate.map(|_| self.next_tick_at)
    }
}

impl Worker {
    fn relay(&mut self) -> &mut Relay {
        self.relay.as_mut().expect("broadcast mode has a relay")
    }

    /// A fresh connection in `index` (nothing received, no room).
    pub(super) fn relay_accept(&mut self, index: usize) {
        if let Some(r) = self.relay.as_mut() {
            r.peers[index] = Peer::NONE;
            r.peer_nrooms[index] = 0;
            r.peer_hint[index] = 0;
            r.grpc[index] = None;
        }
    }

    /// Broadcast: buffer `bid` (`n` bytes) arrived on `index`; relays every whole
    /// frame. False when the connection was closed (a bad frame, or no room).
    pub(super) fn relay_recv(&mut self, index: usize, bid: u16, n: usize) -> bool {
        let mut chain = self.conns[index].chain;
        self.bufs.push(&mut chain, bid);
        self.conns[index].chain = chain;
        self.relay().peers[index].rx_len += n as u32;
        if self.relay().cfg.grpc {
            return self.grpc_recv(index);
        }
        loop {
            let peer = self.relay().peers[index];
            let avail = peer.rx_len as usize;
            if avail < LEN_PREFIX_BYTES {
                return true;
            }
            let relay = self.relay.as_mut().expect("broadcast mode has a relay");
            let chain = self.conns[index].chain;
            let off = peer.rx_off as usize;
            self.bufs
                .copy_out(&chain, off, &mut relay.scratch[..LEN_PREFIX_BYTES]);
            // Only the prefix is given: a valid one says "more bytes needed".
            if frame::next_tcp_frame(&relay.scratch[..LEN_PREFIX_BYTES]).is_err() {
                return self.relay_refuse(index, true);
            }
            let prefix: [u8; LEN_PREFIX_BYTES] = relay.scratch[..LEN_PREFIX_BYTES]
                .try_into()
                .expect("the prefix's bytes");
            let end = LEN_PREFIX_BYTES + u32::from_be_bytes(prefix) as usize;
            if avail < end {
                return true;
            }
            self.bufs.copy_out(&chain, off, &mut relay.scratch[..end]);
            let header = match FrameHeader::decode(&relay.scratch[LEN_PREFIX_BYTES..end]) {
                Ok(h) => h,
                Err(_) => return self.relay_refuse(index, true),
            };
            if !self.relay_frame(index, header, end) {
                return false;
            }
            self.relay_consume(index, end);
        }
    }

    /// Drops the first `n` unconsumed bytes of `index`'s chain, giving back the
    /// buffers they used up.
    pub(super) fn relay_consume(&mut self, index: usize, n: usize) {
        let relay = self.relay.as_mut().expect("broadcast mode has a relay");
        let peer = &mut relay.peers[index];
        peer.rx_len -= n as u32;
        let mut off = peer.rx_off as usize + n;
        let mut chain = self.conns[index].chain;
        while !chain.is_empty() && off >= self.bufs.filled(chain.head) {
            off -= self.bufs.filled(chain.head);
            let bid = self.bufs.pop(&mut chain);
            self.bufs.give_back(bid);
        }
        peer.rx_off = off as u32;
        self.conns[index].chain = chain;
    }

    /// Closes a connection that sent a bad frame (`invalid`) or found no room.
    pub(super) fn relay_refuse(&mut self, index: usize, invalid: bool) -> bool {
        let stats = &mut self.relay().stats;
        if invalid {
            stats.frames_invalid += 1;
        } else {
            stats.joins_refused += 1;
        }
        self.teardown(index, false);
        false
    }

    /// The frame in `scratch[..len]` (prefix included) arrived on `index`: joins the
    /// room if needed, then relays the frame or records it for the tick.
    fn relay_frame(&mut self, index: usize, header: FrameHeader, len: usize) -> bool {
        let relay = self.relay.as_mut().expect("broadcast mode has a relay");
        let room = match relay.room_of(index, header.room) {
            Some(room) => room,
            None => match relay.join(index, &header) {
                Some(room) => room,
                None => return self.relay_refuse(index, false),
            },
        };
        if header.flags & FLAG_JOIN != 0 {
            // A join frame (a listener's way in): acknowledged by sending it back,
            // relayed to nobody.
            if relay.queues.push(index, &[&relay.scratch[..len]]) {
                relay.list(index);
            } else {
                relay.stats.relay_dropped += 1;
            }
            return true;
        }
        relay.stats.frames_received += 1;
        if relay.cfg.aggregate.is_some() {
            let e = Entry {
                member: relay.peers[index].member,
                seq: header.seq,
                intended_ns: header.intended_ns,
            };
            if !relay.pending.push(room as usize, e) {
                relay.stats.aggregate_overflow += 1;
            }
            return true;
        }
        let echo = relay.cfg.echo_to_sender;
        let members = relay.rooms.members(room).len();
        for i in 0..members {
            let peer = relay.rooms.members(room)[i].peer as usize;
            if peer == index && !echo {
                continue;
            }
            if relay.queues.push(peer, &[&relay.scratch[..len]]) {
                relay.stats.relayed += 1;
                relay.list(peer);
            } else {
                relay.stats.relay_dropped += 1;
            }
        }
        true
    }

    /// The connection in `index` is gone: out of its room, its queue dropped (but
    /// for a send in flight).
    pub(super) fn relay_leave(&mut self, index: usize) {
        let Some(relay) = self.relay.as_mut() else {
            return;
        };
        let per = relay.cfg.rooms_per_connection;
        for i in 0..relay.peer_nrooms[index] as usize {
            let (_, room) = relay.peer_rooms[index * per + i];
            if relay.rooms.leave(room, index as u32) {
                relay.pending.clear(room as usize);
            }
        }
        relay.peer_nrooms[index] = 0;
        relay.peer_hint[index] = 0;
        relay.peers[index] = Peer::NONE;
        relay.grpc[index] = None;
        relay.queues.abandon(index);
    }

    /// A broadcast send completed: releases its bytes and sends what follows.
    pub(super) fn relay_sent(&mut self, token: Token, result: i32) {
        let index = token.index as usize;
        let Some(live) = self.live_slot(token) else {
            // A previous connection's send: its bytes were abandoned; the slot's
            // current connection (if any) may send now.
            let relay = self.relay();
            let n = relay.queues.inflight(index);
            relay.queues.sent(index, n);
            if relay.queues.queued(index) > 0 {
                relay.list(index);
            }
            return;
        };
        self.conns[live].sending = false;
        if result < 0 && crate::engine::socket::is_transient(-result) {
            self.relay().queues.sent(index, 0);
            self.arm_send(index, false);
            return;
        }
        if result <= 0 {
            self.relay().queues.sent(index, 0);
            self.stats.connections_closed_by_peer += 1;
            self.teardown(index, false);
            return;
        }
        self.stats.bytes_sent += result as u64;
        let relay = self.relay();
        relay.queues.sent(index, result as usize);
        if relay.queues.queued(index) > 0 {
            relay.list(index);
        }
    }

    /// After a batch of completions: one send for each member that got bytes.
    pub(super) fn relay_flush(&mut self) {
        let Some(relay) = self.relay.as_mut() else {
            return;
        };
        let mut ready = std::mem::take(&mut relay.ready);
        for &slot in &ready {
            let slot = slot as usize;
            self.relay().listed[slot] = false;
            if self.conns[slot].open && !self.conns[slot].sending {
                self.arm_send(slot, true);
            }
        }
        ready.clear();
        self.relay().ready = ready;
    }

    /// Aggregate: at a tick boundary, a downlink frame to every member.
    pub(super) fn relay_tick_if_due(&mut self) {
        let Some(relay) = self.relay.as_mut() else {
            return;
        };
        let Some(agg) = relay.cfg.aggregate else {
            return;
        };
        let now = Instant::now();
        if now < relay.next_tick_at {
            return;
        }
        let tick_ns = relay.tick.as_nanos();
        let current = ((now - relay.started).as_nanos() / tick_ns) as u64;
        // The tick that just ended; those before it that the loop missed are skipped.
        let seq = current - 1;
        relay.stats.ticks_skipped += seq - relay.next_seq;
        relay.next_seq = seq + 1;
        relay.next_tick_at =
            relay.started + Duration::from_nanos(((current + 1) as u128 * tick_ns) as u64);
        relay.stats.ticks += 1;
        let down = agg.down_size;
        let echo = relay.cfg.echo_to_sender;
        let rooms_max = relay.rooms.capacity();
        for room in 0..rooms_max as RoomSlot {
            let n_members = relay.rooms.members(room).len();
            if n_members == 0 {
                continue;
            }
            for i in 0..n_members {
                let m = relay.rooms.members(room)[i];
                let out = &mut relay.scratch[..LEN_PREFIX_BYTES + down];
                out.fill(0);
                frame::encode_len(down, out);
                let body = &mut out[LEN_PREFIX_BYTES..];
                let mut entries = 0;
                for e in relay.pending.due(room as usize) {
                    if e.member == m.member && !echo {
                        continue;
                    }
                    e.encode(body, entries);
                    entries += 1;
                }
                FrameHeader {
                    room: relay.rooms.id(room),
                    member: m.member,
                    flags: FLAG_AGGREGATE,
                    entries: entries as u32,
                    seq,
                    intended_ns: 0,
                }
                .encode(body);
                let peer = m.peer as usize;
                if relay
                    .queues
                    .push(peer, &[&relay.scratch[..LEN_PREFIX_BYTES + down]])
                {
                    relay.stats.downlink_frames += 1;
                    relay.list(peer);
                } else {
                    relay.stats.relay_dropped += 1;
                }
            }
            relay.stats.aggregate_carried += relay.pending.advance(room as usize);
        }
    }
}
