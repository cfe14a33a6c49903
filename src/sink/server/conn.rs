//! One connection's life on a sink ring: accepting it into a slot, arming its
//! receive, answering what arrives (echo, fixed or discard, behind the service delay),
//! and tearing it down; the loop that drives them is in `server.rs`.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types};

use super::{ACCEPT_RETRY_DELAY, Conn, LINGER_ZERO, TEARDOWN_ENTRIES_MAX, Worker};
use crate::engine::ring::{Target, on_target};
use crate::engine::socket::{close_descriptor, is_transient};
use crate::engine::token::next_generation;
use crate::sink::SinkMode;
use crate::sink::socket::set_linger_zero;
use crate::sink::token::{NO_BUF, Op, Token};

impl Worker {
    pub(super) fn arm_accept_if_due(&mut self) {
        if self.accept_armed {
            return;
        }
        if let Some(at) = self.accept_retry_at {
            if Instant::now() < at {
                return;
            }
            self.accept_retry_at = None;
        }
        let fd = types::Fd(self.listener.as_raw_fd());
        let entry = if self.spec.direct {
            // SOCK_CLOEXEC is refused with a direct descriptor (it has no fd).
            opcode::AcceptMulti::new(fd)
                .allocate_file_index(true)
                .build()
        } else {
            opcode::AcceptMulti::new(fd)
                .flags(libc::SOCK_CLOEXEC)
                .build()
        };
        let entry = entry.user_data(Token::new(0, Op::Accept, 0).encode());
        // SAFETY: the accept asks for no peer address, so it refers to no memory; the
        // listener outlives the ring (both live in this Worker, which cancels every
        // operation at shutdown).
        unsafe { self.push(&[entry]) };
        self.accept_armed = true;
    }

    fn arm_recv(&mut self, index: usize) {
        let target = self.target(index);
        let conn = &mut self.conns[index];
        let token = Token::new(index as u32, Op::Recv, conn.generation).encode();
        let group = self.bufs.bgid();
        // Echo holds what it receives until it is sent back: a multishot receive
        // takes buffers in kernel bursts (up to 32 per wake-up, while this thread is
        // descheduled) before a cancel can land, so one peer that never reads could
        // empty the pool for every other connection. One buffer per armed receive
        // keeps its chain within its share exactly.
        let entry = if self.recv_multishot && self.shared.mode != SinkMode::Echo {
            on_target!(target, |t| opcode::RecvMulti::new(t, group).build())
        } else {
            let len = self.bufs.buf_bytes() as u32;
            on_target!(target, |t| opcode::Recv::new(t, std::ptr::null_mut(), len)
                .buf_group(group)
                .build()
                .flags(squeue::Flags::BUFFER_SELECT))
        };
        conn.recv_armed = true;
        // SAFETY: the receive writes only into a buffer of the pool, which lives in
        // this Worker and is freed only once no operation is in flight (else leaked).
        unsafe { self.push(&[entry.user_data(token)]) };
    }

    /// Sends the next part of the connection's reply; `first` marks the first send of
    /// a reply, which is the one held back by the service delay.
    pub(super) fn arm_send(&mut self, index: usize, first: bool) {
        let target = self.target(index);
        let conn = &self.conns[index];
        let (ptr, len, buf) = match self.shared.mode {
            // The oldest bytes of the connection's send queue, reserved until this
            // send completes; nothing when a send (maybe a previous connection's)
            // is in flight or nothing is queued.
            SinkMode::Broadcast => {
                let relay = self.relay.as_mut().expect("broadcast mode has a relay");
                match relay.queues.begin_send(index) {
                    Some((ptr, len)) => (ptr, len, NO_BUF),
                    None => return,
                }
            }
            // The reply buffer is uniform, so any prefix of it continues any reply.
            SinkMode::Fixed(_) => {
                let len = conn.owed.min(self.shared.reply.len() as u64) as usize;
                (self.shared.reply.as_ptr(), len, NO_BUF)
            }
            SinkMode::Echo | SinkMode::Discard | SinkMode::Count => {
                let bid = conn.chain.head;
                let off = conn.send_off as usize;
                (self.bufs.ptr(bid, off), self.bufs.filled(bid) - off, bid)
            }
        };
        let token = Token::with_buf(index as u32, Op::Send, conn.generation, buf);
        let send = on_target!(target, |t| opcode::Send::new(t, ptr, len as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build())
        .user_data(token.encode());
        // The delay's timespec: the fixed one, or this connection's own, drawn now.
        let ts: Option<*const types::Timespec> = match (&mut self.delay_each, first) {
            (_, false) => None,
            (Some(each), true) => {
                let mean = self.shared.delay_exp_mean.unwrap_or_default().as_nanos() as f64;
                let ns = (-(1.0 - self.delay_rng.f64()).ln() * mean) as u64;
                each[index] = types::Timespec::new()
                    .sec(ns / 1_000_000_000)
                    .nsec((ns % 1_000_000_000) as u32);
                Some(&each[index])
            }
            (None, true) => self.delay_ts.as_deref().map(|t| t as *const _),
        };
        let timer = ts.map(|ts| {
            opcode::Timeout::new(ts)
                .flags(types::TimeoutFlags::ETIME_SUCCESS)
                .build()
                .flags(squeue::Flags::IO_LINK)
                .user_data(Token::new(index as u32, Op::Timeout, conn.generation).encode())
        });
        self.conns[index].sending = true;
        match timer {
            // SAFETY: the send reads from a pool buffer (kept out of the pool until
            // this send completes; its token names it), the shared reply buffer
            // (the Worker holds an Arc to it) or the slot's send queue (its bytes
            // under this send are reserved until its completion, whichever
            // connection then holds the slot; leaked at shutdown if it never
            // comes); the timespec is boxed in the Worker and
            // never replaced while operations are in flight (a connection's drawn
            // one is rewritten only when it arms its next delayed send, after the
            // completion of this one).
            Some(timer) => unsafe { self.push(&[timer, send]) },
            // SAFETY: as above, the send's source buffer outlives the operation.
            None => unsafe { self.push(&[send]) },
        }
    }

    /// Ends connection `index`: frees its slot at once (generation bumped, buffers
    /// not in flight given back) and queues linger (if `reset`), cancel and close.
    pub(super) fn teardown(&mut self, index: usize, reset: bool) {
        let target = self.target(index);
        let conn = self.conns[index];
        assert!(conn.open, "teardown of a free slot");
        self.relay_leave(index);
        let mut chain = conn.chain;
        // Echo sends from its chain's head; broadcast's chain holds received bytes only.
        if conn.sending && self.shared.mode == SinkMode::Echo && !chain.is_empty() {
            // The head is being sent; its send's completion gives it back.
            self.bufs.pop(&mut chain);
        }
        while !chain.is_empty() {
            let bid = self.bufs.pop(&mut chain);
            self.bufs.give_back(bid);
        }
        let generation = conn.generation;
        self.conns[index] = Conn {
            generation: next_generation(generation),
            listed: conn.listed,
            ..Conn::FREE
        };
        self.shared.open.fetch_sub(1, Ordering::Relaxed);
        if !self.spec.direct {
            self.free.push(index as u32);
        }
        let tok = |op| Token::new(index as u32, op, generation).encode();
        // Linger, cancels and close, hard-linked so each runs whatever the one before
        // it returned (a cancel that finds nothing fails with ENOENT).
        let mut group: [squeue::Entry; TEARDOWN_ENTRIES_MAX] =
            std::array::from_fn(|_| opcode::Nop::new().build());
        let mut n = 0;
        let mut add = |entry: squeue::Entry| {
            group[n] = entry.flags(squeue::Flags::IO_HARDLINK);
            n += 1;
        };
        match target {
            Target::Fixed(slot) if reset => add(opcode::SetSockOpt::new(
                types::Fixed(slot),
                libc::SOL_SOCKET as u32,
                libc::SO_LINGER as u32,
                (&raw const LINGER_ZERO).cast(),
                std::mem::size_of::<libc::linger>() as u32,
            )
            .build()
            .user_data(tok(Op::Linger))),
            Target::Fd(fd) if reset => {
                // Best effort: without it the close sends FIN instead of RST.
                let _ = set_linger_zero(fd);
            }
            _ => {}
        }
        // Operations still armed hold the socket open: cancel them, each by its
        // exact user_data, which the kernel finds by hash (a cancel by descriptor
        // would scan every armed request of the ring: quadratic in a close wave).
        let cancel = |user_data: u64| {
            opcode::AsyncCancel::new(user_data)
                .build()
                .user_data(tok(Op::CancelConn))
        };
        if conn.recv_armed {
            add(cancel(tok(Op::Recv)));
        }
        if conn.sending {
            let buf = match self.shared.mode {
                SinkMode::Echo => conn.chain.head,
                SinkMode::Fixed(_) | SinkMode::Discard | SinkMode::Count | SinkMode::Broadcast => {
                    NO_BUF
                }
            };
            add(cancel(
                Token::with_buf(index as u32, Op::Send, generation, buf).encode(),
            ));
            if self.delay_ts.is_some() {
                // A pending delay timer: cancelling it cancels its linked send.
                add(cancel(tok(Op::Timeout)));
            }
        }
        let close = on_target!(target, |t| opcode::Close::new(t).build()).user_data(tok(Op::Close));
        group[n] = close;
        // SAFETY: the option value is a static; cancels and close refer to no memory.
        unsafe { self.push(&group[..=n]) };
    }

    /// At each `close_every` instant: tears down every connection held.
    pub(super) fn close_all_if_due(&mut self) {
        let (Some(at), Some(every)) = (self.next_close, self.shared.close_every) else {
            return;
        };
        let now = Instant::now();
        if now < at {
            return;
        }
        // The next multiple of `every` after now, so a late pass does not cascade.
        let periods = (now - self.shared.started).as_nanos() / every.as_nanos() + 1;
        let next_ns = u64::try_from(periods * every.as_nanos()).unwrap_or(u64::MAX);
        self.next_close = Some(self.shared.started + Duration::from_nanos(next_ns));
        for index in 0..self.conns.len() {
            if self.conns[index].open {
                self.teardown(index, false);
                self.stats.connections_closed += 1;
            }
        }
    }

    /// Re-arms receives that ran out of buffers, while the pool has some.
    pub(super) fn rearm_starved(&mut self) {
        while self.bufs.available() > 0 {
            let Some(index) = self.waiting.pop() else {
                return;
            };
            let index = index as usize;
            let conn = &mut self.conns[index];
            conn.listed = false;
            // A throttled connection is re-armed as its chain drains, not here.
            if conn.open && conn.starved && !conn.recv_armed && !conn.throttled {
                conn.starved = false;
                self.arm_recv(index);
            }
        }
    }

    /// Closes an accepted socket that gets no slot.
    fn reject(&mut self, target: Target) {
        self.stats.connections_rejected += 1;
        match target {
            Target::Fd(fd) => close_descriptor(fd),
            Target::Fixed(slot) => {
                let close = opcode::Close::new(types::Fixed(slot))
                    .build()
                    .user_data(Token::new(slot, Op::Close, 0).encode());
                // SAFETY: a close refers to no memory.
                unsafe { self.push(&[close]) };
            }
        }
    }

    pub(super) fn on_accept(&mut self, result: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accept_armed = false;
        }
        if result < 0 {
            match -result {
                // The fixed-file table is full: the kernel has closed the socket.
                libc::ENFILE if self.spec.direct => self.stats.connections_rejected += 1,
                // The peer gave up before we accepted, or a signal: just re-arm.
                e if is_transient(e) || matches!(e, libc::ECONNABORTED | libc::ECANCELED) => {}
                // EMFILE, ENFILE, ENOBUFS, ENOMEM, …: wait before trying again.
                _ => self.accept_retry_at = Some(Instant::now() + ACCEPT_RETRY_DELAY),
            }
            return;
        }
        let (index, fd) = if self.spec.direct {
            (result as usize, -1)
        } else {
            match self.free.pop() {
                Some(index) => (index as usize, result),
                None => return self.reject(Target::Fd(result)),
            }
        };
        let target = match fd {
            -1 => Target::Fixed(index as u32),
            fd => Target::Fd(fd),
        };
        assert!(
            index < self.conns.len(),
            "the kernel picked a slot beyond the table"
        );
        let open = self.shared.open.fetch_add(1, Ordering::Relaxed) + 1;
        if open > self.shared.connections_max {
            self.shared.open.fetch_sub(1, Ordering::Relaxed);
            if !self.spec.direct {
                self.free.push(index as u32);
            }
            return self.reject(target);
        }
        self.shared.peak.fetch_max(open, Ordering::Relaxed);
        let reset_pending =
            self.shared.reset_ratio > 0.0 && self.rng.f64() < self.shared.reset_ratio;
        let conn = &mut self.conns[index];
        *conn = Conn {
            fd,
            generation: conn.generation,
            open: true,
            reset_pending,
            listed: conn.listed,
            ..Conn::FREE
        };
        self.stats.connections_accepted += 1;
        self.relay_accept(index);
        self.arm_recv(index);
    }

    pub(super) fn on_recv(&mut self, token: Token, result: i32, flags: u32) {
        let buf = cqueue::buffer_select(flags);
        if let Some(bid) = buf {
            self.bufs.taken(bid, result.max(0) as usize);
        }
        let Some(index) = self.live_slot(token) else {
            // A completion for a connection already torn down: only its buffer matters.
            if let Some(bid) = buf {
                self.bufs.give_back(bid);
            }
            return;
        };
        if !cqueue::more(flags) {
            self.conns[index].recv_armed = false;
        }
        if result <= 0 {
            match -result {
                // Its receive was stopped because its chain holds its share (or found
                // the pool empty meanwhile): it resumes as its sends drain the chain.
                libc::ECANCELED | libc::ENOBUFS if self.conns[index].throttled => {
                    self.resume_if_drained(index);
                }
                // The pool is empty: wait for buffers to come back.
                libc::ENOBUFS => self.starve(index),
                // Kernels before 6.0 know no multishot receive.
                libc::EINVAL if self.recv_multishot => {
                    self.recv_multishot = false;
                    self.arm_recv(index);
                }
                e if is_transient(e) => {
                    if self.conns[index].throttled {
                        self.resume_if_drained(index);
                    } else if !self.conns[index].recv_armed {
                        self.arm_recv(index);
                    }
                }
                // 0: the peer closed; else reset, … — either way, done.
                _ => {
                    self.stats.connections_closed_by_peer += 1;
                    self.teardown(index, false);
                }
            }
            return;
        }
        let Some(bid) = buf else {
            unreachable!("a receive from the buffer pool completed without a buffer");
        };
        let n = result as usize;
        self.stats.bytes_received += n as u64;
        if !self.stall_marked {
            if let Some(stall) = &self.shared.stall {
                stall.mark_first_byte();
            }
            self.stall_marked = true;
        }
        if self.conns[index].reset_pending {
            self.bufs.give_back(bid);
            self.stats.connections_reset += 1;
            self.teardown(index, true);
            return;
        }
        match self.shared.mode {
            SinkMode::Discard | SinkMode::Count => self.bufs.give_back(bid),
            SinkMode::Broadcast => {
                if !self.relay_recv(index, bid, n) {
                    return;
                }
            }
            SinkMode::Echo => {
                let conn = &mut self.conns[index];
                self.bufs.push(&mut conn.chain, bid);
                if !conn.sending {
                    self.arm_send(index, true);
                }
                self.throttle_if_full(index);
            }
            SinkMode::Fixed(size) => {
                self.bufs.give_back(bid);
                let conn = &mut self.conns[index];
                let count = match self.shared.request_size {
                    0 => 1,
                    request_size => {
                        let total = conn.partial as usize + n;
                        conn.partial = (total % request_size) as u32;
                        total / request_size
                    }
                };
                conn.owed += (count * size) as u64;
                conn.replies_owed += count as u64;
                if count > 0 && !conn.sending {
                    self.arm_send(index, true);
                }
            }
        }
        // A throttled connection's receive is re-armed by its sends (`resume_if_drained`).
        if !self.conns[index].recv_armed && !self.conns[index].throttled {
            self.arm_recv(index);
        }
    }

    /// Echo: stops the receive of a connection whose chain holds its share of the pool
    /// (its peer does not read its replies as fast as it sends), so it cannot take
    /// the buffers the other connections receive into. A multishot receive still armed
    /// is cancelled by its exact `user_data`; receives the kernel completes before the
    /// cancel reaches it are still taken (the chain overshoots by those).
    fn throttle_if_full(&mut self, index: usize) {
        let conn = self.conns[index];
        if conn.throttled || self.bufs.may_hold_more(conn.chain.len) {
            return;
        }
        self.conns[index].throttled = true;
        self.stats.connections_throttled += 1;
        if conn.recv_armed {
            let recv = Token::new(index as u32, Op::Recv, conn.generation).encode();
            let cancel = opcode::AsyncCancel::new(recv)
                .build()
                .user_data(Token::new(index as u32, Op::CancelConn, conn.generation).encode());
            // SAFETY: a cancel refers to no memory.
            unsafe { self.push(&[cancel]) };
        }
    }

    /// Re-arms the receive of a throttled connection once its receive has ended and
    /// its chain has drained: to half its share while the pool can spare more, or
    /// to nothing (then no send is left to call this again, so it must re-arm).
    /// A throttled connection whose chain is not drained has a send in flight, whose
    /// completion calls this again.
    fn resume_if_drained(&mut self, index: usize) {
        let conn = self.conns[index];
        let held = conn.chain.len;
        let drained = held == 0 || (held <= self.bufs.resume_at() && self.bufs.may_hold_more(held));
        if conn.throttled && !conn.recv_armed && drained {
            let conn = &mut self.conns[index];
            conn.throttled = false;
            conn.starved = false;
            self.arm_recv(index);
        }
    }

    /// Puts a connection whose receive found no buffer on the wait list.
    fn starve(&mut self, index: usize) {
        let conn = &mut self.conns[index];
        conn.starved = true;
        if !conn.listed {
            conn.listed = true;
            self.waiting.push(index as u32);
        }
    }

    pub(super) fn on_send(&mut self, token: Token, result: i32) {
        if self.shared.mode == SinkMode::Broadcast {
            return self.relay_sent(token, result);
        }
        let Some(index) = self.live_slot(token) else {
            if token.buf != NO_BUF {
                self.bufs.give_back(token.buf);
            }
            return;
        };
        self.conns[index].sending = false;
        if result < 0 && is_transient(-result) {
            self.arm_send(index, false);
            return;
        }
        if result <= 0 {
            // EPIPE, ECONNRESET, …; a zero-byte send of a non-empty buffer would
            // otherwise repeat forever.
            self.stats.connections_closed_by_peer += 1;
            self.teardown(index, false);
            return;
        }
        let n = result as usize;
        self.stats.bytes_sent += n as u64;
        let conn = &mut self.conns[index];
        if token.buf == NO_BUF {
            // Fixed mode.
            conn.owed -= n as u64;
            if conn.owed > 0 {
                self.arm_send(index, false);
            } else {
                self.stats.replies += conn.replies_owed;
                conn.replies_owed = 0;
            }
            return;
        }
        conn.send_off += n as u32;
        if (conn.send_off as usize) < self.bufs.filled(token.buf) {
            self.arm_send(index, false);
            return;
        }
        conn.send_off = 0;
        let bid = self.bufs.pop(&mut conn.chain);
        debug_assert_eq!(bid, token.buf);
        let more = !conn.chain.is_empty();
        self.bufs.give_back(bid);
        self.stats.replies += 1;
        if more {
            self.arm_send(index, true);
        }
        self.resume_if_drained(index);
    }
}
