//! Plain TCP frames without a buffer per connection (issue 36: a held connection
//! costs its state, not its buffers). Each socket has one multishot receive armed into
//! the worker's provided-buffer ring ([`crate::engine::buf_ring`]; a multishot
//! `recvmsg` when frames are timed by the kernel): a buffer is decoded as it
//! completes and given back at once. A frame cut by a buffer's end waits, its head
//! copied into a tail slot (at most one frame's bytes, held only while the frame is
//! split), for the receive that brings the rest: every frame is decoded whole, once.
//! A send's bytes live in a send slot from its encoding to its completion (one slot
//! per socket, touched only as used; a connection with frames due and no slot free,
//! which only the test hook makes happen, waits in line for one, counted).
//! A receive that finds no buffer (ENOBUFS) is counted and armed again.

use super::FrameWorker;
use super::pool::NO_SLOT;
use super::recv::deliver;
use crate::clock::{Nanos, Ticks};
use crate::engine::ring::on_target;
use crate::engine::stamps;
use crate::engine::token::Op;
use crate::proto::frame_proto::Down;
use io_uring::{cqueue, opcode};
use std::ops::Range;

/// Where the bytes being decoded are.
enum Src {
    /// In the tail slots' memory.
    Tail(Range<usize>),
    /// In provided buffer `bid`, this range of it.
    Ring(u16, Range<usize>),
}

impl FrameWorker<'_> {
    /// Arms connection `c`'s multishot receive into the provided-buffer ring.
    pub(super) fn arm_pooled_recv(&mut self, c: u32) {
        let bgid = self.buf_ring.as_ref().expect("a pooled worker's ring").bgid;
        let entry = if let Some(hdr) = &self.stamp_hdr {
            let hdr = &**hdr as *const libc::msghdr;
            on_target!(self.target(c), |t| opcode::RecvMsgMulti::new(t, hdr, bgid)
                .build())
        } else {
            on_target!(self.target(c), |t| opcode::RecvMulti::new(t, bgid).build())
        }
        .user_data(self.token(c, Op::Recv));
        // SAFETY: the receive writes only into buffers the worker provided to group
        // `bgid` (`buf_ring`, whose memory lives as long as the worker and is leaked
        // with operations in the ring) and reads `stamp_hdr`, boxed, never written
        // after start, leaked likewise (`Drop for FrameWorker`); see `push`.
        unsafe { self.push(c, &entry) };
    }

    /// A completion of connection `c`'s multishot receive (`now`: the reap; `wall`:
    /// the wall clock at `now_t`, for the kernel's timestamp).
    pub(super) fn on_pooled_recv(&mut self, c: u32, res: i32, flags: u32, now_t: Ticks, wall: u64) {
        let now = self.clock.ns(now_t);
        let more = cqueue::more(flags);
        let bid = cqueue::buffer_select(flags);
        let Some(bid) = bid.filter(|_| res > 0 && self.conns[c as usize].up) else {
            if let Some(bid) = bid {
                self.recycle(bid); // a receive for a connection since gone down
            }
            if res == -libc::ENOBUFS {
                self.out.counters.frames.recv_no_buffer += 1;
                if !more && self.conns[c as usize].up {
                    self.arm_recv(c); // buffers are given back by the time it runs
                }
            } else if res <= 0 && !more {
                self.disconnect(c, now);
            }
            return;
        };
        let br = self.buf_ring.as_ref().expect("a pooled worker's ring");
        let (off, len, at) = match &self.stamp_hdr {
            Some(_) => match stamps::received(br.buf(bid, res as usize), res as usize) {
                Some(got) => {
                    let at = match got.unix_ns {
                        Some(stamp) => {
                            self.clock
                                .ns(stamps::arrival(&self.clock, now_t, wall, stamp))
                        }
                        None => {
                            self.rx_missing += u64::from(got.len > 0);
                            now
                        }
                    };
                    (stamps::PAYLOAD_OFFSET, got.len, at)
                }
                None => (0, 0, now),
            },
            None => (0, res as usize, now),
        };
        if len == 0 {
            // The peer closed the stream (a recvmsg's empty payload).
            self.recycle(bid);
            return self.disconnect(c, now);
        }
        self.out.counters.bytes_received += len as u64;
        self.conns[c as usize].last_rx = at;
        let open = self.pooled_received(c, bid, off..off + len, at);
        self.recycle(bid);
        if open && !more {
            self.arm_recv(c); // the multishot ended with this buffer: on again
        }
    }

    /// Gives provided buffer `bid` back (published after the reap's batch).
    fn recycle(&mut self, bid: u16) {
        if let Some(br) = self.buf_ring.as_mut() {
            br.recycle(bid);
        }
    }

    /// Connection `c`'s bytes `r` of provided buffer `bid` arrived at `now`: after
    /// the head of a split frame if one waits, decoded; what is left (the head of the
    /// next frame) waits in a tail slot. Returns whether the connection stays open.
    fn pooled_received(&mut self, c: u32, bid: u16, r: Range<usize>, now: Nanos) -> bool {
        let cap = self.tails.slot_len();
        let mut from = r.start;
        let keep = self.conns[c as usize].recv_keep as usize;
        if keep > 0 {
            let slot = self.conns[c as usize].tail_slot;
            let t = self.tails.range(slot);
            let take = r.len().min(cap - keep);
            let br = self.buf_ring.as_ref().expect("a pooled worker's ring");
            let src = &br.buf(bid, r.start + take)[r.start..];
            (self
                .tails
                .buf
                .region_mut(t.start + keep..t.start + keep + take))
            .copy_from_slice(src);
            let used = match self.decode_pooled(c, Src::Tail(t.start..t.start + keep + take), now) {
                Ok(used) => used,
                Err(reason) => return self.pooled_bad(c, reason, now),
            };
            if used >= keep {
                // The split frame is whole: the rest of the buffer from after it.
                from = r.start + (used - keep);
                self.tails.give(slot);
                let conn = &mut self.conns[c as usize];
                conn.tail_slot = NO_SLOT;
                conn.recv_keep = 0;
            } else if take == r.len() && keep + take - used < cap {
                // Still not whole: the whole buffer joined the head.
                self.tails
                    .buf
                    .copy_within(t.start + used..t.start + keep + take, t.start);
                self.conns[c as usize].recv_keep = (keep + take - used) as u32;
                return true;
            } else {
                return self.pooled_bad(c, "a frame larger than the largest planned", now);
            }
        }
        let used = match self.decode_pooled(c, Src::Ring(bid, from..r.end), now) {
            Ok(used) => used,
            Err(reason) => return self.pooled_bad(c, reason, now),
        };
        let rest = from + used..r.end;
        if rest.is_empty() {
            return true;
        }
        if rest.len() >= cap {
            return self.pooled_bad(c, "a frame larger than the largest planned", now);
        }
        let Some(slot) = self.tails.take() else {
            // One slot per socket: a socket holds at most one.
            unreachable!("every tail slot in use");
        };
        let t = self.tails.range(slot);
        let br = self.buf_ring.as_ref().expect("a pooled worker's ring");
        (self.tails.buf.region_mut(t.start..t.start + rest.len()))
            .copy_from_slice(&br.buf(bid, rest.end)[rest.start..]);
        let conn = &mut self.conns[c as usize];
        conn.tail_slot = slot;
        conn.recv_keep = rest.len() as u32;
        true
    }

    /// Decodes the frames in `src` for connection `c`, each delivered to the
    /// accounting; returns the bytes consumed (the rest is a frame's head).
    fn decode_pooled(&mut self, c: u32, src: Src, now: Nanos) -> Result<usize, &'static str> {
        let m = self.member(c);
        let input = match src {
            Src::Tail(r) => self.tails.buf.region_mut(r),
            Src::Ring(bid, r) => {
                let br = self.buf_ring.as_mut().expect("a pooled worker's ring");
                &mut br.buf_mut(bid, r.end)[r.start..]
            }
        };
        let codec = &mut self.codecs[c as usize];
        let (book, hist) = (&mut self.book, &mut self.out.hist);
        let counters = &mut self.out.counters.frames;
        let mut pos = 0;
        let mut messages = 0;
        while pos < input.len() {
            let at = &mut input[pos..];
            match codec.decode(at) {
                Down::Message { consumed, payload } => {
                    deliver(
                        book,
                        self.down.as_mut(),
                        m,
                        &at[payload],
                        now,
                        hist,
                        counters,
                    );
                    pos += consumed;
                    messages += 1;
                }
                Down::Incomplete { consumed } => {
                    pos += consumed;
                    break;
                }
                Down::Invalid { reason } => return Err(reason),
                Down::Held { .. } | Down::Control { .. } => {
                    return Err("a message blaster frames do not send");
                }
            }
        }
        if messages >= 2 {
            // Two frames in one receive share its stamp: the loop wakes for each
            // receive from now on.
            self.rx_batch = false;
        }
        Ok(pos)
    }

    /// Connection `c` received what is not a frame (`reason`): foreign, reopened.
    fn pooled_bad(&mut self, c: u32, reason: &'static str, now: Nanos) -> bool {
        self.first_bad.get_or_insert_with(|| reason.to_string());
        self.out.counters.frames.foreign += 1;
        self.disconnect(c, now);
        false
    }

    /// Connection `c`'s tail slot back (it reopens: a split frame's head is void).
    pub(super) fn drop_tail(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        let slot = std::mem::replace(&mut conn.tail_slot, NO_SLOT);
        conn.recv_keep = 0;
        if slot != NO_SLOT {
            self.tails.give(slot);
        }
    }

    /// A send slot for connection `c`'s send (true), or (false) it waits in line for
    /// one, counted once per wait.
    pub(super) fn take_send_slot(&mut self, c: u32) -> bool {
        let conn = &mut self.conns[c as usize];
        if conn.send_slot != NO_SLOT {
            return true;
        }
        if let Some(s) = self.send_slots.take() {
            conn.send_slot = s;
            return true;
        }
        if !conn.slot_wait {
            conn.slot_wait = true;
            let queued = self.slot_waits.push(c);
            debug_assert!(queued, "each connection waits at most once");
            self.out.counters.frames.send_slot_waits += 1;
        }
        false
    }

    /// Connection `c`'s send no longer reads its slot (it completed or failed): the
    /// slot goes to the connections waiting for one, in turn.
    pub(super) fn release_send_slot(&mut self, c: u32) {
        let slot = std::mem::replace(&mut self.conns[c as usize].send_slot, NO_SLOT);
        if slot == NO_SLOT {
            return;
        }
        self.send_slots.give(slot);
        while self.send_slots.used() < self.send_slots.count() {
            let Some(w) = self.slot_waits.pop() else {
                break;
            };
            let conn = &mut self.conns[w as usize];
            conn.slot_wait = false;
            if conn.up && conn.pend > 0 && !conn.sending {
                self.send_pending(w);
            }
        }
    }
}
