//! Sending: frames now due go out on their connections (or wait behind the send in the
//! kernel, or are not sent while the connection is down), up to [`SEND_FRAMES`] ticks of
//! them in one send, with join and control bytes sent before any frame.

use super::{FrameWorker, SEND_FRAMES};
use crate::clock::Nanos;
use crate::engine::ring::on_target;
use crate::engine::token::Op;
use crate::proto::frame::{FrameHeader, HEADER_BYTES};
use io_uring::opcode;

impl FrameWorker<'_> {
    /// Frames now due: each goes out on its connection, or waits behind the send in
    /// the kernel, or (connection down) is not sent.
    pub(super) fn dispatch_due(&mut self, now: Nanos) -> u64 {
        let mut n = 0;
        while let Some((c, k, intended)) = self.cursor.pop_due(now) {
            n += 1;
            self.out.counters.dispatched += self.slots as u64;
            self.out.counters.note_dispatch(intended, now);
            self.out.hist.dispatch_lag.saturating_record(now - intended);
            let s = self.sender(c);
            if !self.conns[s as usize].up {
                self.out.counters.frames.not_sent += self.slots as u64;
                continue;
            }
            if let Some(d) = self.down.as_mut() {
                d.joined(c, now); // the server learns the member from its first frame
            }
            let conn = &mut self.conns[s as usize];
            if conn.pend == 0 {
                conn.pend_k = k;
            }
            conn.pend += 1;
            if !conn.sending {
                self.send_pending(s);
            }
        }
        n
    }

    /// Sends connection `c`'s waiting frames (TCP: up to [`SEND_FRAMES`] ticks of its
    /// members' frames in one send, tick by tick, slot by slot; UDP: one datagram).
    pub(super) fn send_pending(&mut self, c: u32) {
        let g = self.fp.grid;
        let gj = self.plan.conn_offset as u64 + u64::from(self.member(c));
        let (room, member) = self.room_member(c);
        let conn = &mut self.conns[c as usize];
        let mut count = (conn.pend as usize).min(if self.udp { 1 } else { SEND_FRAMES });
        if let Some(cl) = self.plan.conn_life {
            // `--conn-max-requests`: whole ticks, up to the one that reaches the budget.
            let left = cl.max_requests.saturating_sub(conn.frames_on) as usize;
            count = count.min(left.div_ceil(self.slots));
            if count == 0 {
                return; // retiring once its send completes
            }
        }
        if self.pooled && !self.take_send_slot(c) {
            return; // it waits in line for a send slot
        }
        let conn = &mut self.conns[c as usize];
        let (base, out) = if self.pooled {
            (
                self.send_slots.range(conn.send_slot).start,
                &mut self.send_slots.buf,
            )
        } else {
            (c as usize * self.send_stride, &mut self.send_buf)
        };
        let slots = self.slots;
        // Slot s's room on the wire is its layout's room plus `s x rooms`
        // (`MemberBooks::wire_room`, a table look-up under --room-layout mixed); the
        // member number is the same in every slot.
        for i in 0..count {
            let k = conn.pend_k + i as u64;
            let intended_ns = g.intended_ns(gj, k);
            for (s, st) in self.stamps[i * slots..(i + 1) * slots]
                .iter_mut()
                .enumerate()
            {
                *st = FrameHeader {
                    room: if s == 0 {
                        room
                    } else {
                        self.book.wire_room(s, gj)
                    },
                    member,
                    flags: 0,
                    entries: 0,
                    seq: k,
                    intended_ns,
                };
            }
        }
        let stamps = &self.stamps[..count * slots];
        // Frames of these stamps not in this send: not sent, or waiting for a window.
        let mut held_back = 0;
        let len = if self.udp {
            stamps[0].encode(out.region_mut(base..base + HEADER_BYTES));
            self.wire_len
        } else {
            let region = out.region_mut(base..base + self.send_stride);
            let codec = &mut self.codecs[c as usize];
            let before = codec.stalls();
            let len = codec.encode_uplink(stamps, region);
            let after = codec.stalls();
            // gRPC: frames past the server's window wait in the adapter's backlog
            // (counted sent when a later reply writes them, not sent if their
            // connection goes down first) or, when it is full, are not sent.
            let f = &mut self.out.counters.frames;
            let waiting = after.waited - before.waited;
            f.flow_stalled += waiting;
            let unsent = after.unsent - before.unsent;
            f.not_sent += unsent;
            held_back = unsent + waiting;
            len
        };
        conn.pend_k += count as u64;
        conn.pend -= count as u32;
        if len == 0 {
            self.release_send_slot(c);
            return; // gRPC: every frame waits for a window (or was not sent)
        }
        conn.sending = true;
        conn.send_off = 0;
        conn.send_len = len as u32;
        let frames = count * slots - held_back as usize;
        conn.send_frames = frames as u32;
        self.out.counters.sent += frames as u64;
        self.out.counters.frames.sent += frames as u64;
        self.push_send(c);
    }

    pub(super) fn push_send(&mut self, c: u32) {
        let conn = &self.conns[c as usize];
        let (off, end) = (conn.send_off as usize, conn.send_len as usize);
        if self.tls_on(c) {
            return self.tls_send_plain(c, false, off, end - off);
        }
        let buf = if self.pooled {
            let base = self.send_slots.range(conn.send_slot).start;
            self.send_slots.buf.kernel_ptr(base + off..base + end)
        } else {
            let base = c as usize * self.send_stride;
            self.send_buf.kernel_ptr(base + off..base + end)
        };
        let len = (end - off) as u32;
        let entry = on_target!(self.target(c), |t| opcode::Send::new(t, buf, len).build())
            .user_data(self.token(c, Op::Send));
        // SAFETY: the send reads connection `c`'s region of `send_buf` (or its send
        // slot, neither given to another connection nor rewritten until the send
        // completed), which is not rewritten while `sending` (see `push`).
        unsafe { self.push(c, &entry) };
    }

    pub(super) fn on_send(&mut self, c: u32, res: i32, now: Nanos) {
        if self.conns[c as usize].ctl_sending {
            return self.on_ctl_send(c, res, now);
        }
        if res < 0 {
            self.release_send_slot(c);
            if self.udp {
                // ECONNREFUSED (an ICMP unreachable) and the like: the frame is lost,
                // which the receivers count; the socket stays.
                self.conns[c as usize].sending = false;
            } else {
                self.disconnect(c, now);
                return;
            }
        } else {
            let conn = &mut self.conns[c as usize];
            conn.send_off += res as u32;
            if conn.send_off < conn.send_len {
                self.push_send(c); // a partial write: the rest
                return;
            }
            conn.sending = false;
            self.release_send_slot(c);
            let conn = &mut self.conns[c as usize];
            // Frames count as done once wholly on the wire (the achieved rate).
            self.out.counters.completed += u64::from(conn.send_frames);
            conn.frames_on = conn.frames_on.saturating_add(conn.send_frames);
            if self.retire_if_due(c, now) {
                return;
            }
        }
        self.send_next(c);
    }

    /// Connection `c` has no send in the kernel: join or control bytes first, then
    /// the frames waiting.
    pub(super) fn send_next(&mut self, c: u32) {
        if self.ctl.get(c as usize).is_some_and(|x| !x.next.is_empty()) {
            self.flush_ctl(c);
        } else if self.conns[c as usize].pend > 0 && self.conns[c as usize].up {
            self.send_pending(c);
        }
    }

    /// Sends connection `c`'s waiting join or control bytes unless a send is in the
    /// kernel (they go first once it completes, before any frame).
    pub(super) fn flush_ctl(&mut self, c: u32) {
        let conn = &self.conns[c as usize];
        let Some(ctl) = self.ctl.get_mut(c as usize) else {
            return;
        };
        if conn.sending || ctl.next.is_empty() || conn.fd == -1 {
            return;
        }
        if self.tls_holding(c) {
            return; // no plaintext leaves a --tls socket: it waits for the session
        }
        let tls = self.tls_on(c);
        let ctl = &mut self.ctl[c as usize];
        debug_assert!(ctl.busy.is_empty());
        std::mem::swap(&mut ctl.busy, &mut ctl.next);
        // gRPC frames a window let go: sent now (those of a short write's rest were
        // counted when it first went).
        let going = std::mem::take(&mut ctl.next_frames);
        ctl.busy_frames += going;
        self.out.counters.sent += u64::from(going);
        self.out.counters.frames.sent += u64::from(going);
        if tls {
            let conn = &mut self.conns[c as usize];
            conn.sending = true;
            conn.ctl_sending = true;
            let len = self.ctl[c as usize].busy.len();
            return self.tls_send_plain(c, true, 0, len);
        }
        let (ptr, len) = (ctl.busy.as_ptr(), ctl.busy.len() as u32);
        let entry = on_target!(self.target(c), |t| opcode::Send::new(t, ptr, len).build())
            .user_data(self.token(c, Op::Send));
        let conn = &mut self.conns[c as usize];
        conn.sending = true;
        conn.ctl_sending = true;
        // SAFETY: the send reads `ctl[c].busy`, which is neither written nor dropped
        // until the send completes (`on_send` clears it; a reopen waits for `ops` to
        // reach 0; `Drop for FrameWorker` leaks `ctl` with operations in the ring).
        unsafe { self.push(c, &entry) };
    }

    /// A send of join or control bytes completed (a short write sends the rest).
    pub(super) fn on_ctl_send(&mut self, c: u32, res: i32, now: Nanos) {
        if res < 0 {
            return self.disconnect(c, now);
        }
        let conn = &mut self.conns[c as usize];
        let ctl = &mut self.ctl[c as usize];
        ctl.busy.drain(..res as usize);
        conn.sending = false;
        conn.ctl_sending = false;
        if ctl.busy.is_empty() {
            // Its gRPC frames are done (the achieved rate, `--conn-max-requests`).
            let done = std::mem::take(&mut ctl.busy_frames);
            self.out.counters.completed += u64::from(done);
            conn.frames_on = conn.frames_on.saturating_add(done);
            if done > 0 && self.retire_if_due(c, now) {
                return;
            }
        } else {
            // The rest goes before anything queued since.
            let mut rest = std::mem::take(&mut ctl.busy);
            rest.extend_from_slice(&ctl.next);
            ctl.next.clear();
            ctl.busy = std::mem::replace(&mut ctl.next, rest);
        }
        self.send_next(c);
    }
}
