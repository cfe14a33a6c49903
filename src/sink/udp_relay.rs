//! Broadcast mode on the UDP sink: each datagram is one frame (`proto::frame`), and
//! each peer (source address) is a member of the room its first frame names.
//!
//! Peers: a table of at most `peers_max` source addresses, pre-sized (an index
//! `HashMap` created with twice that capacity, so it never reallocates; address,
//! room and last-heard instant per peer). A peer joins its room (`rooms.rs`) at its
//! first frame; a full room or a full peer table refuses it (the datagram is ignored
//! and counted in `joins_refused`; its next one tries again). UDP has no
//! disconnect: a peer silent for [`PEER_IDLE`] leaves its room (checked once a
//! second), and a new address announcing a member its room already has takes that
//! member's place (the client's new socket, say the next run, or a NAT rebinding;
//! counted in `members_moved`). A datagram that does not decode is ignored and
//! counted.
//!
//! Relaying: every frame goes, unchanged, to every other member of the room (the
//! sender too with `echo_to_sender`), straight out of its receive buffer: the
//! outgoing messages of a batch point into the received datagrams and the peers'
//! stored addresses, and leave with `sendmmsg` in batches of [`OUT`] before the next
//! receive. A datagram the kernel refuses is counted in `relay_dropped`.
//!
//! Aggregate: as over TCP (`server/relay.rs`), each room's frames of a server tick
//! become the entries of one downlink datagram of `down_size` bytes per member,
//! sent at the tick; the thread waits for datagrams with `poll` at most until the
//! next tick (millisecond resolution), so a tick leaves within about a millisecond
//! of its instant on an idle core.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::time::Duration;

use super::BroadcastConfig;
use super::pending::Pending;
use super::rooms::{RoomSlot, Rooms};
use super::stats::BroadcastStats;
use crate::proto::frame::{self, Entry, FLAG_AGGREGATE, FrameHeader, HEADER_BYTES};

/// Messages per `sendmmsg`.
pub(crate) const OUT: usize = 256;
/// A peer silent this long leaves its room.
pub(crate) const PEER_IDLE: Duration = Duration::from_secs(10);
/// How often idle peers are looked for.
const SWEEP_EVERY_NS: u64 = 1_000_000_000;
const NO_ROOM: RoomSlot = RoomSlot::MAX;
/// Rooms beyond `peers / room_size` (partly filled rooms while members join).
const ROOMS_SPARE: usize = 64;

/// A source address as a map key: IPv6 (IPv4 mapped) and port.
type AddrKey = (u128, u16);

pub(crate) struct UdpRelay {
    cfg: BroadcastConfig,
    rooms: Rooms,
    index: HashMap<AddrKey, u32>,
    keys: Box<[AddrKey]>,
    addrs: Box<[libc::sockaddr_storage]>,
    namelens: Box<[libc::socklen_t]>,
    room: Box<[RoomSlot]>,
    member: Box<[u16]>,
    heard_ns: Box<[u64]>,
    free: Vec<u32>,
    next_sweep_ns: u64,
    /// Outgoing messages and their iovecs, boxed so their addresses stay put.
    out: Box<[libc::mmsghdr]>,
    out_iov: Box<[libc::iovec]>,
    queued: usize,
    /// Aggregate: `OUT` downlink datagrams being built, pending entries per room.
    down: Box<[u8]>,
    pending: Pending,
    tick_ns: u64,
    next_tick_ns: u64,
    next_seq: u64,
    pub(crate) stats: BroadcastStats,
}

impl UdpRelay {
    /// Peers and rooms for at most `peers_max` source addresses; `now_ns` is the
    /// sink's clock (ns since its start), which ticks count from.
    pub(crate) fn new(cfg: BroadcastConfig, peers_max: usize, now_ns: u64) -> UdpRelay {
        let rooms_max = (peers_max.div_ceil(cfg.room_size) + ROOMS_SPARE).min(peers_max);
        let (entries_max, tick_ns, down) = match cfg.aggregate {
            Some(a) => (
                (a.down_size - HEADER_BYTES) / frame::ENTRY_BYTES,
                a.tick.as_nanos() as u64,
                a.down_size,
            ),
            None => (0, u64::MAX, 0),
        };
        // SAFETY: sockaddr_storage, mmsghdr and iovec are C structs of integers and
        // raw pointers, for which all-zero bytes are valid (null pointers, 0 lengths).
        let zero_addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let zero_msg: libc::mmsghdr = unsafe { std::mem::zeroed() };
        let zero_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        UdpRelay {
            cfg,
            rooms: Rooms::new(rooms_max, cfg.room_size),
            index: HashMap::with_capacity(2 * peers_max),
            keys: vec![(0, 0); peers_max].into_boxed_slice(),
            addrs: vec![zero_addr; peers_max].into_boxed_slice(),
            namelens: vec![0; peers_max].into_boxed_slice(),
            room: vec![NO_ROOM; peers_max].into_boxed_slice(),
            member: vec![0; peers_max].into_boxed_slice(),
            heard_ns: vec![0; peers_max].into_boxed_slice(),
            free: (0..peers_max as u32).rev().collect(),
            next_sweep_ns: now_ns + SWEEP_EVERY_NS,
            out: vec![zero_msg; OUT].into_boxed_slice(),
            out_iov: vec![zero_iov; OUT].into_boxed_slice(),
            queued: 0,
            down: vec![0; OUT * down].into_boxed_slice(),
            pending: Pending::new(rooms_max, entries_max),
            tick_ns,
            next_tick_ns: now_ns.saturating_add(tick_ns),
            next_seq: 0,
            stats: BroadcastStats::default(),
        }
    }

    /// Aggregate: ns (sink clock) of the next server tick.
    pub(crate) fn next_tick_ns(&self) -> Option<u64> {
        self.cfg.aggregate.map(|_| self.next_tick_ns)
    }

    /// One received datagram `data` from `addr` (`namelen` bytes of it) at `now_ns`:
    /// joins, relays (queued; [`UdpRelay::flush`] sends) or records it for the tick.
    /// `data` must stay valid and unchanged until the next flush.
    pub(crate) fn on_datagram(
        &mut self,
        fd: RawFd,
        data: &[u8],
        addr: &libc::sockaddr_storage,
        namelen: libc::socklen_t,
        now_ns: u64,
    ) {
        let header = match FrameHeader::decode(data) {
            Ok(h) => h,
            Err(_) => {
                self.stats.frames_invalid += 1;
                return;
            }
        };
        let key = addr_key(addr);
        let peer = match self.index.get(&key) {
            Some(&p) => p as usize,
            None => match self.join(key, addr, namelen, header) {
                Some(p) => p,
                None => {
                    self.stats.joins_refused += 1;
                    return;
                }
            },
        };
        self.heard_ns[peer] = now_ns;
        self.stats.frames_received += 1;
        let room = self.room[peer];
        if self.cfg.aggregate.is_some() {
            let e = Entry {
                member: self.member[peer],
                seq: header.seq,
                intended_ns: header.intended_ns,
            };
            if !self.pending.push(room as usize, e) {
                self.stats.aggregate_overflow += 1;
            }
            return;
        }
        let echo = self.cfg.echo_to_sender;
        for i in 0..self.rooms.members(room).len() {
            let to = self.rooms.members(room)[i].peer as usize;
            if to == peer && !echo {
                continue;
            }
            self.queue(fd, to, data.as_ptr(), data.len());
            self.stats.relayed += 1;
        }
    }

    /// A new peer: a slot and a room, or `None` when either is full. A member its
    /// room already has under another address moves here: the old address leaves.
    fn join(
        &mut self,
        key: AddrKey,
        addr: &libc::sockaddr_storage,
        namelen: libc::socklen_t,
        header: FrameHeader,
    ) -> Option<usize> {
        if let Some(old) = self.rooms.peer_of(header.room, header.member) {
            self.leave(old as usize);
            self.stats.members_moved += 1;
        }
        let p = *self.free.last()?;
        let room = self.rooms.join(header.room, header.member, p).ok()?;
        self.free.pop();
        let p = p as usize;
        self.index.insert(key, p as u32);
        self.keys[p] = key;
        self.addrs[p] = *addr;
        self.namelens[p] = namelen;
        self.room[p] = room;
        self.member[p] = header.member;
        self.stats.joins += 1;
        Some(p)
    }

    /// Takes peer `p` out of its room and the table.
    fn leave(&mut self, p: usize) {
        if self.rooms.leave(self.room[p], p as u32) {
            self.pending.clear(self.room[p] as usize);
        }
        self.index.remove(&self.keys[p]);
        self.room[p] = NO_ROOM;
        self.free.push(p as u32);
    }

    /// Once a second: peers silent for [`PEER_IDLE`] leave.
    pub(crate) fn sweep_if_due(&mut self, now_ns: u64) {
        if now_ns < self.next_sweep_ns {
            return;
        }
        self.next_sweep_ns = now_ns + SWEEP_EVERY_NS;
        let idle = PEER_IDLE.as_nanos() as u64;
        for p in 0..self.room.len() {
            if self.room[p] != NO_ROOM && now_ns.saturating_sub(self.heard_ns[p]) >= idle {
                self.leave(p);
            }
        }
    }

    /// Queues `len` bytes at `ptr` to peer `to`, sending the batch first if full.
    fn queue(&mut self, fd: RawFd, to: usize, ptr: *const u8, len: usize) {
        if self.queued == OUT {
            self.flush(fd);
        }
        let i = self.queued;
        self.out_iov[i] = libc::iovec {
            iov_base: ptr.cast_mut().cast(),
            iov_len: len,
        };
        let h = &mut self.out[i].msg_hdr;
        h.msg_name = (&mut self.addrs[to] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = self.namelens[to];
        h.msg_iov = &mut self.out_iov[i];
        h.msg_iovlen = 1;
        self.queued += 1;
    }

    /// Sends every queued message; the kernel's refusals are counted.
    pub(crate) fn flush(&mut self, fd: RawFd) {
        let mut i = 0;
        while i < self.queued {
            // SAFETY: out[i..queued] were filled by `queue`: their names point into
            // `addrs` and their iovecs into `out_iov`, whose entries point to received
            // datagrams (valid until the next receive, which follows this flush) or to
            // `down`; all outlive the call, and sendmmsg only reads them.
            let rc = unsafe {
                libc::sendmmsg(fd, self.out.as_mut_ptr().add(i), (self.queued - i) as _, 0)
            };
            if rc > 0 {
                i += rc as usize;
            } else if rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {
                continue;
            } else {
                self.stats.relay_dropped += 1;
                i += 1;
            }
        }
        self.queued = 0;
    }

    /// Aggregate: at a tick boundary, one downlink datagram to every member.
    pub(crate) fn tick_if_due(&mut self, fd: RawFd, now_ns: u64) {
        let Some(agg) = self.cfg.aggregate else {
            return;
        };
        if now_ns < self.next_tick_ns {
            return;
        }
        // Ticks count from the relay's creation: tick k ends at (k + 1) × tick.
        let origin = self.next_tick_ns - (self.next_seq + 1) * self.tick_ns;
        let current = (now_ns - origin) / self.tick_ns;
        let seq = current - 1;
        self.stats.ticks_skipped += seq - self.next_seq;
        self.stats.ticks += 1;
        self.next_seq = seq + 1;
        self.next_tick_ns = origin + (current + 1) * self.tick_ns;
        let down = agg.down_size;
        let echo = self.cfg.echo_to_sender;
        // Datagrams built into `down` must not be rewritten before they are sent.
        self.flush(fd);
        let mut built = 0;
        for room in 0..self.rooms.capacity() as RoomSlot {
            let n = self.rooms.members(room).len();
            for i in 0..n {
                if built == OUT {
                    self.flush(fd);
                    built = 0;
                }
                let m = self.rooms.members(room)[i];
                let out = &mut self.down[built * down..(built + 1) * down];
                out.fill(0);
                let mut entries = 0;
                for e in self.pending.due(room as usize) {
                    if e.member == m.member && !echo {
                        continue;
                    }
                    e.encode(out, entries);
                    entries += 1;
                }
                FrameHeader {
                    room: self.rooms.id(room),
                    member: m.member,
                    flags: FLAG_AGGREGATE,
                    entries: entries as u32,
                    seq,
                    intended_ns: 0,
                }
                .encode(out);
                let ptr = out.as_ptr();
                self.queue(fd, m.peer as usize, ptr, down);
                self.stats.downlink_frames += 1;
                built += 1;
            }
            self.stats.aggregate_carried += self.pending.advance(room as usize);
        }
        self.flush(fd);
    }
}

/// The map key of a source address.
fn addr_key(addr: &libc::sockaddr_storage) -> AddrKey {
    let k = super::udp::flow_key(addr, 0);
    (k.ip, k.port)
}
