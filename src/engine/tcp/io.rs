//! I/O submission and reaping: entries built on a connection's socket and pushed into
//! the ring, completions drained into a fixed array and handed out by operation, and
//! the sends that cover each connection's unsent requests.

use super::{Reopen, Worker};
use crate::clock::{Nanos, Ticks};
use crate::engine::conn_table::ConnState;
use crate::engine::socket;
use crate::engine::token::{Op, Token};
use crate::request::{Ctx, RENDER_STREAM, request_rng};
use io_uring::opcode;

impl Worker<'_> {
    /// Queues `entries` (a linked chain stays together) through the worker's
    /// [`LoopCore::push`](crate::engine::loop_core::LoopCore::push), and counts each on
    /// its connection (a connection reopens only once its count is back at zero).
    ///
    /// # Safety
    /// Every buffer and address the entries point to must stay valid and unmoved until
    /// their completions have been reaped. Memory owned by the worker does: it is
    /// allocated once, never reallocated, and leaked instead of freed when the worker
    /// is dropped with operations in the ring (`Drop for Worker`).
    #[inline]
    pub(super) unsafe fn push(&mut self, entries: &[io_uring::squeue::Entry]) {
        // SAFETY: forwarded to this function's contract.
        if !unsafe { self.core.push(entries) } {
            return;
        }
        for e in entries {
            if let Some(t) = Token::decode(e.get_user_data()) {
                let conn = &mut self.table.conns[t.conn as usize];
                conn.ops = conn
                    .ops
                    .checked_add(1)
                    .expect("a few operations a connection");
            }
        }
    }

    pub(super) fn arm_recv(&mut self, c: u32) {
        let len = self.plan.recv_buffer_bytes;
        let conn = &mut self.table.conns[c as usize];
        let keep = conn.recv_keep as usize;
        conn.recv_armed = true;
        let token = Token {
            conn: c,
            op: Op::Recv,
            generation: conn.generation,
        };
        let entry = if self.multishot
            && let Some(br) = &self.buf_ring
            && let Some(hdr) = &self.stamps
        {
            // One multishot recvmsg per connection: the control data before each
            // payload carries the kernel's receive timestamp.
            let (bgid, hdr) = (br.bgid, &**hdr as *const libc::msghdr);
            on_socket!(self, c, conn.fd, |t| opcode::RecvMsgMulti::new(
                t, hdr, bgid
            )
            .build())
            .user_data(token.encode())
        } else if self.multishot
            && let Some(br) = &self.buf_ring
        {
            // One multishot receive per connection: it stays armed across responses.
            let bgid = br.bgid;
            on_socket!(self, c, conn.fd, |t| opcode::RecvMulti::new(t, bgid)
                .build())
            .user_data(token.encode())
        } else if self.plan.tls.is_some() {
            // Ciphertext: after what waits in this connection's region of `tls_in`
            // (an unfinished record; never the whole region).
            let size = crate::limits::TLS_RECV_BUFFER_BYTES;
            let fill = self.sessions[c as usize]
                .as_mut()
                .map_or(0, |s| s.arm_recv());
            let base = c as usize * size;
            let ptr = self.tls_in.kernel_ptr(base + fill..base + size);
            on_socket!(self, c, conn.fd, |t| opcode::Recv::new(
                t,
                ptr,
                (size - fill) as u32
            )
            .build())
            .user_data(token.encode())
        } else {
            // The rest of this connection's region of `recv_buf`, after the kept bytes.
            let region = c as usize * len..(c as usize + 1) * len;
            let ptr = self.recv_buf.kernel_ptr(region.start + keep..region.end);
            let n = (len - keep) as u32;
            on_socket!(self, c, conn.fd, |t| opcode::Recv::new(t, ptr, n).build())
                .user_data(token.encode())
        };
        // SAFETY: a multishot receive writes into the buffer ring's memory (a recvmsg
        // also reads the two lengths of `stamps`'s header, boxed, owned by the worker
        // and leaked with the buffers if it is dropped first), a single
        // receive into this connection's region of `recv_buf` or, with TLS, of
        // `tls_in` (bounds checked by
        // `kernel_ptr`), which no other operation is using: a single-shot receive is
        // armed only after the previous one completed (`recv_armed`), and a reopened
        // connection only once its old operations have (`ops`). Both are owned by the
        // worker, never reallocated, and outlive the operation (leaked if the worker is
        // dropped before it completes).
        unsafe { self.push(&[entry]) };
    }

    pub(super) fn push_send(&mut self, c: u32) {
        let conn = &self.table.conns[c as usize];
        let token = Token {
            conn: c,
            op: Op::Send,
            generation: conn.generation,
        };
        let (done, end) = (conn.send_done as usize, conn.send_len as usize);
        let ptr: *const u8 = if self.plan.tls.is_some() {
            let base = c as usize * self.tls_out_len;
            self.tls_out.kernel_ptr(base + done..base + end)
        } else if self.render {
            let base = c as usize * self.staging_len;
            self.staging.kernel_ptr(base + done..base + end)
        } else {
            self.send_buf.kernel_ptr_read(done..end)
        };
        let n = (end - done) as u32;
        let entry = on_socket!(self, c, conn.fd, |t| opcode::Send::new(t, ptr, n).build())
            .user_data(token.encode());
        self.table.conns[c as usize].send_armed = true;
        // SAFETY: the send reads `n` bytes of this connection's region of `staging`
        // (or of `send_buf`, never written after start; or, with TLS, of `tls_out`,
        // where new ciphertext goes only after the bytes an armed send reads:
        // `tls_out_start`), bounds checked by
        // `kernel_ptr`, owned by the worker and never reallocated; the region is not
        // written again until the send completes (`sending` > 0 keeps `flush_sends`
        // away, and a closed connection reopens only once `ops` is 0), and it outlives
        // the operation (leaked if the worker is dropped first).
        unsafe { self.push(&[entry]) };
    }

    /// Drains up to `CQE_BATCH_MAX` completions into the fixed array, then handles them.
    pub(super) fn reap(&mut self) -> usize {
        let cqes = &mut self.cqes;
        let mut i = 0;
        let n = self.core.reap_each(cqes.len(), |data, res, flags| {
            cqes[i] = (data, res, flags);
            i += 1;
        });
        if n == 0 {
            return 0; // no clock read on an empty poll (the spinning path)
        }
        let now_t = self.clock.ticks();
        // The wall clock at `now_t`: a stamp's age is measured from both readings.
        let wall = self
            .stamps
            .as_ref()
            .map_or(0, |_| crate::wallclock::now_unix_ns());
        for i in 0..n {
            let (data, res, flags) = self.cqes[i];
            let Some(token) = Token::decode(data) else {
                continue;
            };
            let finished = !io_uring::cqueue::more(flags);
            let conn = &mut self.table.conns[token.conn as usize];
            if finished {
                conn.ops -= 1;
            }
            if conn.generation != token.generation {
                // A completion for a connection since closed; its buffer goes back.
                if let (Some(bid), Some(br)) =
                    (io_uring::cqueue::buffer_select(flags), &mut self.buf_ring)
                {
                    br.recycle(bid);
                }
            } else {
                match token.op {
                    Op::Connect => self.on_connect(token.conn, res),
                    Op::Send => self.on_send(token.conn, res),
                    Op::Recv if self.stamps.is_some() => {
                        self.on_stamped_recv(token.conn, res, flags, now_t, wall);
                    }
                    Op::Recv => self.on_recv(token.conn, res, flags, now_t, 0),
                    Op::Close => {}
                }
            }
            if finished {
                self.finish_close(token.conn);
            }
        }
        if n > 0
            && let Some(br) = &self.buf_ring
        {
            br.publish();
        }
        n
    }

    pub(super) fn on_send(&mut self, c: u32, res: i32) {
        self.table.conns[c as usize].send_armed = false;
        if self.table.conns[c as usize].state == ConnState::Expiring {
            return; // its requests time out; nothing more goes out on it
        }
        if res < 0 {
            self.out.counters.closed_by_target += u64::from(-res == libc::ECONNRESET);
            self.close_conn(c, Some(socket::io_error_kind(-res)), Reopen::Backoff);
            return;
        }
        self.out.counters.bytes_sent += res as u64;
        let conn = &mut self.table.conns[c as usize];
        conn.send_done += res as u32;
        if conn.send_done < conn.send_len {
            self.push_send(c); // partial send: re-arm from the offset
            return;
        }
        conn.sending = 0;
        if conn.unsent > 0 || self.h2_ctl_pending(c) || self.h2_bodies_left(c) {
            self.mark_flush(c);
        }
    }

    /// Request slot `i` (of connection `c`) goes on the wire at `t` (`t_ns`): its send instant, and the
    /// time it waited for its connection. A request sent again (HTTP/2's retries after
    /// a GOAWAY) is one request: counted at its first send only.
    #[inline]
    pub(super) fn stamp_sent(&mut self, c: u32, i: usize, t: Ticks, t_ns: Nanos) {
        let req = &mut self.table.slots[i];
        let first = req.sent == 0;
        req.sent = t;
        let wait = t_ns.saturating_sub(self.clock.ns(req.dispatched));
        if first && req.intended_ns >= self.plan.warmup_ns {
            self.out.hist.connection_wait.saturating_record(wait);
            self.out.counters.sent += 1;
            if let Some(to) = self.target_of(c) {
                to.sent += 1;
            }
        }
    }

    /// Queues one send per connection covering all its unsent requests (rendering
    /// them first when requests are templated or mixed).
    pub(super) fn flush_sends(&mut self) {
        if self.flush_q.is_empty() {
            return;
        }
        // The send instant: read here, after the completions of this iteration were
        // handled, so their cost is not charged to the target; the submit follows.
        let t = self.clock.ticks();
        let t_ns = self.clock.ns(t);
        let payload_len = self.plan.payload.len();
        while let Some(c) = self.flush_q.pop() {
            self.table.conns[c as usize].in_flush_queue = false;
            if self.h2.is_some() {
                self.flush_h2(c, t, t_ns);
                continue;
            }
            let conn = &mut self.table.conns[c as usize];
            if conn.state != ConnState::Ready || conn.sending > 0 || conn.unsent == 0 {
                continue;
            }
            let k = conn.unsent;
            let first = conn.inflight - k;
            conn.sending = k;
            conn.send_done = 0;
            conn.unsent = 0;
            let base = c as usize * self.staging_len;
            let mut len = 0;
            for nth in first..first + k {
                let i = self.table.slot_index(c, nth);
                self.stamp_sent(c, i, t, t_ns);
                let req = &self.table.slots[i];
                if self.plan.replay.is_some() {
                    let bytes = self.replay_slots.get(i);
                    let at = base + len;
                    self.staging
                        .region_mut(at..at + bytes.len())
                        .copy_from_slice(bytes);
                    len += bytes.len();
                } else if self.render {
                    let ctx = Ctx {
                        seq: req.seq,
                        conn: (self.plan.conn_offset + c as usize) as u64,
                        worker: self.plan.index as u64,
                        time_ns: self.unix_at_start_ns + req.intended_ns,
                    };
                    let template = &self.plan.requests.entries[req.entry as usize].template;
                    // Drawn from the request's global sequence number, not the
                    // worker's stream, so {rand} is the same whichever worker or shard
                    // sends it (a fresh stream, not the one that chose the entry).
                    let mut rng = request_rng(self.plan.seed ^ RENDER_STREAM, req.seq);
                    // Only this connection's region: other connections' sends may be
                    // reading theirs.
                    let region = base + len..base + self.staging_len;
                    len += template.render(&ctx, &mut rng, self.staging.region_mut(region));
                } else {
                    len += payload_len;
                }
            }
            if self.plan.tls.is_some() {
                self.tls_write(c, len);
                continue;
            }
            self.table.conns[c as usize].send_len = len as u32;
            self.push_send(c);
        }
    }
}
