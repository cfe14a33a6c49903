//! Receiving: each connection's receive (timed by the kernel's timestamp where there is
//! one), the join's answers, then downlink messages decoded and delivered to the
//! accounting ([`super::accounting`], [`super::downlink`]), pings answered, a close
//! obeyed.

use super::FrameWorker;
use super::accounting::MemberBooks;
use super::downlink::DownBook;
use crate::clock::{Nanos, Ticks};
use crate::engine::recorder::{FrameCounters, Histograms};
use crate::engine::ring::on_target;
use crate::engine::stamps;
use crate::engine::token::Op;
use crate::proto::frame::{Entry, FrameHeader};
use crate::proto::frame_proto::{CONTROL_BYTES_MAX, Control, Down};
use io_uring::opcode;

impl FrameWorker<'_> {
    pub(super) fn arm_recv(&mut self, c: u32) {
        if self.tls_on(c) {
            return self.tls_arm_recv(c);
        }
        if self.pooled {
            return self.arm_pooled_recv(c);
        }
        let conn = &self.conns[c as usize];
        let keep = conn.recv_keep as usize;
        let base = c as usize * self.recv_stride;
        let buf = self
            .recv_buf
            .kernel_ptr(base + keep..base + self.recv_stride);
        let conn = &self.conns[c as usize];
        let mut len = self.recv_stride - keep;
        if let Some(t) = self.throttle.as_ref().filter(|_| conn.slow && conn.up) {
            len = len.min(t.chunk()); // a slow reader takes a little at a time
        }
        let len = len as u32;
        let entry = if let Some(rx) = self.rx.as_mut() {
            let hdr = rx.arm(c as usize, buf, len as usize);
            on_target!(self.target(c), |t| opcode::RecvMsg::new(t, hdr).build())
        } else {
            on_target!(self.target(c), |t| opcode::Recv::new(t, buf, len).build())
        }
        .user_data(self.token(c, Op::Recv));
        // SAFETY: the receive writes into connection `c`'s region of `recv_buf`
        // (bounds checked by `kernel_ptr`) and, a recvmsg, reads `c`'s header and
        // iovec and writes its control field in `rx` (never reallocated, rewritten
        // only when `c` is armed again, after this receive completed; leaked with
        // the buffers if the worker is dropped first); see `push`.
        unsafe { self.push(c, &entry) };
    }

    /// When connection `c`'s receive of `res` bytes arrived: its kernel timestamp
    /// (`wall`: the wall clock at `now_t`, read with it once per batch), else `now`,
    /// the reap. A receive with bytes and no timestamp ends the sleeping through
    /// completions.
    pub(super) fn arrival(
        &mut self,
        c: u32,
        res: i32,
        now_t: Ticks,
        now: Nanos,
        wall: u64,
    ) -> Nanos {
        let Some(rx) = self.rx.as_ref().filter(|_| res > 0) else {
            return now;
        };
        match rx.stamp_ns(c as usize) {
            Some(stamp) => self
                .clock
                .ns(stamps::arrival(&self.clock, now_t, wall, stamp)),
            None => {
                self.rx_missing += 1;
                now
            }
        }
    }

    pub(super) fn on_recv(&mut self, c: u32, res: i32, now: Nanos) {
        if res <= 0 {
            if self.udp && res < 0 {
                self.arm_recv(c); // transient on a connected UDP socket
            } else {
                self.disconnect(c, now);
            }
            return;
        }
        self.out.counters.bytes_received += res as u64;
        self.conns[c as usize].last_rx = now;
        if self.tls_on(c) {
            return self.tls_on_recv(c, res as usize, now);
        }
        if self.udp {
            let base = c as usize * self.recv_stride;
            let bytes = self.recv_buf.region(base..base + res as usize);
            let counters = &mut self.out.counters.frames;
            deliver(
                &mut self.book,
                self.down.as_mut(),
                c,
                bytes,
                now,
                &mut self.out.hist,
                counters,
            );
            self.arm_recv(c);
            return;
        }
        if self.plain_received(c, res as usize, now) {
            self.next_recv(c, res as usize, now);
        }
    }

    /// `n` bytes arrived in connection `c`'s receive region after the bytes it kept:
    /// the join's answers, then downlink messages; an unfinished message is kept at
    /// the front. Returns whether the connection stays open and receiving (the caller
    /// arms its next receive).
    pub(super) fn plain_received(&mut self, c: u32, n: usize, now: Nanos) -> bool {
        let base = c as usize * self.recv_stride;
        let keep = self.conns[c as usize].recv_keep as usize;
        let end = keep + n;
        let mut pos = 0;
        if self.conns[c as usize].joining {
            match self.feed_join(c, base, end) {
                Ok(Some(consumed)) => pos = consumed,
                Ok(None) => return true, // pending: the rest kept
                Err(()) => return false, // failed: closed
            }
        }
        match self.decode_stream(c, base + pos, base + end, now) {
            Ok(used) => pos += used,
            Err(reason) => {
                // Not the protocol: the connection is out of step; reopen it.
                if self.first_bad.is_none() {
                    let rest = self.recv_buf.region(base + pos..base + end);
                    self.first_bad = Some(format!(
                        "{reason}: \"{}\"",
                        crate::proto::escape_prefix(rest, 64)
                    ));
                }
                self.out.counters.frames.foreign += 1;
                self.disconnect(c, now);
                return false;
            }
        }
        if !self.conns[c as usize].up {
            return false; // closed by a control message (a WebSocket close)
        }
        let tail = end - pos;
        if tail == self.recv_stride {
            self.first_bad.get_or_insert_with(|| {
                format!(
                    "a message larger than the receive region ({} bytes)",
                    self.recv_stride
                )
            });
            self.out.counters.frames.foreign += 1;
            self.disconnect(c, now);
            return false;
        }
        if pos > 0 && tail > 0 {
            self.recv_buf.copy_within(base + pos..base + end, base);
        }
        self.conns[c as usize].recv_keep = tail as u32;
        self.flush_ctl(c);
        true
    }

    /// Decodes the downlink bytes at `recv_buf[from..to]` of connection `c`: frames
    /// delivered to the accounting, pings answered (queued in `ctl`), a close closes.
    /// Returns the bytes consumed (the rest is a partial message), or why the bytes
    /// are not the protocol.
    pub(super) fn decode_stream(
        &mut self,
        c: u32,
        from: usize,
        to: usize,
        now: Nanos,
    ) -> Result<usize, &'static str> {
        let m = self.member(c);
        let mut pos = from;
        let mut messages = 0;
        while pos < to {
            let input = self.recv_buf.region_mut(pos..to);
            let (book, hist) = (&mut self.book, &mut self.out.hist);
            let counters = &mut self.out.counters.frames;
            match self.codecs[c as usize].decode(input) {
                Down::Message { consumed, payload } => {
                    deliver(
                        book,
                        self.down.as_mut(),
                        m,
                        &input[payload],
                        now,
                        hist,
                        counters,
                    );
                    pos += consumed;
                    messages += 1;
                    if messages == 2 {
                        // Two frames in one receive share its stamp: the loop wakes
                        // for each receive from now on.
                        self.rx_batch = false;
                    }
                }
                Down::Held { consumed } => {
                    let held = self.codecs[c as usize].held();
                    deliver(book, self.down.as_mut(), m, held, now, hist, counters);
                    pos += consumed;
                    messages += 1;
                    if messages == 2 {
                        self.rx_batch = false;
                    }
                }
                Down::Control { consumed, control } => {
                    match control {
                        Control::Reply => {
                            let ctl = &mut self.ctl[c as usize];
                            let codec = &mut self.codecs[c as usize];
                            let before = codec.stalls().released;
                            codec.take_reply(&mut ctl.next);
                            // gRPC: frames that waited for a window go with these
                            // bytes (counted sent as they go to the kernel).
                            ctl.next_frames += (codec.stalls().released - before) as u32;
                        }
                        Control::Ended { what } => {
                            let said = self.codecs[c as usize].ended(what);
                            self.first_bad
                                .get_or_insert_with(|| format!("{} {said}", self.fp.spec.kind));
                            self.disconnect(c, now);
                            return Ok(pos + consumed - from);
                        }
                        Control::Ping { payload } => {
                            let mut pong = [0u8; CONTROL_BYTES_MAX];
                            let n = self.codecs[c as usize].encode_pong(&input[payload], &mut pong);
                            self.ctl[c as usize].next.extend_from_slice(&pong[..n]);
                        }
                        Control::Error { text } => {
                            self.first_bad.get_or_insert_with(|| {
                                format!(
                                    "{} server error: {}",
                                    self.fp.spec.kind,
                                    crate::proto::escape_prefix(&input[text], 200)
                                )
                            });
                        }
                        Control::Close { code } => {
                            self.first_bad.get_or_insert_with(|| {
                                format!(
                                    "{} server closed the connection (close code {})",
                                    self.fp.spec.kind,
                                    code.map_or("none".into(), |c| c.to_string())
                                )
                            });
                            self.disconnect(c, now);
                            return Ok(pos + consumed - from);
                        }
                        Control::Pong => self.on_pong(c),
                        Control::Ack { .. } => {}
                    }
                    pos += consumed;
                }
                Down::Incomplete { consumed } => {
                    pos += consumed;
                    break;
                }
                Down::Invalid { reason } => return Err(reason),
            }
        }
        Ok(pos - from)
    }
}

/// One whole frame `bytes` arrived on local connection `c` at `now`: a relayed frame
/// (no `down`), or with `--aggregate` a downlink frame whose entries are the room's
/// frames of one server tick. Anything else is foreign.
#[inline]
pub(super) fn deliver(
    book: &mut MemberBooks,
    down: Option<&mut DownBook>,
    c: u32,
    bytes: &[u8],
    now: Nanos,
    hist: &mut Histograms,
    n: &mut FrameCounters,
) {
    match (FrameHeader::decode(bytes), down) {
        (Ok(h), None) if !h.aggregate() => book.arrive(c, &h, now, hist, n),
        (Ok(h), Some(d)) if h.aggregate() && book.addressed_to(c, &h) => {
            // `decode` checked that the entries are in `bytes`.
            for i in 0..h.entries as usize {
                let e = Entry::decode(bytes, i);
                if !book.carried(c, &e, now, hist, n) {
                    n.foreign += 1;
                }
            }
            d.arrive(c, &h, now, hist, n);
        }
        _ => n.foreign += 1,
    }
}
