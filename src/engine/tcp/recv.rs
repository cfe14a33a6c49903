//! Receive and framing: bytes from a provided buffer or the connection's own region
//! go through the connection's framer; each complete response completes the oldest
//! request in flight and records its latencies.

use super::{Reopen, Worker};
use crate::clock::Ticks;
use crate::engine::conn_table::{ConnState, Req};
use crate::engine::recorder::ErrorKind;
use crate::engine::socket;
use crate::engine::stamps;
use crate::proto::server_time::{self, ServerTimeSource};
use crate::proto::{Framer, Framing, Parsed, Verdict};

/// How a response that completed a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reply {
    /// An answer (every `--expect` assertion held).
    Answer,
    /// An answer whose `--expect` body assertions could not be checked: counted apart.
    Unchecked,
    /// A reply reporting failure (`--error-status`, RESP and memcached error replies).
    Error,
    /// A reply failing the `--expect` assertion at this index.
    Assertion(u8),
}

impl Reply {
    /// The request error this reply is, if it is one.
    #[inline]
    pub(super) fn failure(self) -> Option<ErrorKind> {
        match self {
            Reply::Answer | Reply::Unchecked => None,
            Reply::Error => Some(ErrorKind::ErrorReply),
            Reply::Assertion(_) => Some(ErrorKind::Assertion),
        }
    }

    /// An answer, or an error reply when `failed`.
    #[inline]
    pub(super) fn error_if(failed: bool) -> Reply {
        if failed { Reply::Error } else { Reply::Answer }
    }
}

impl Worker<'_> {
    /// A multishot recvmsg's completion: its payload goes on to [`Self::on_recv`],
    /// timed by the kernel's receive timestamp (`wall`: the wall clock at `now_t`,
    /// read with it once per batch). A refused recvmsg (a kernel without multishot
    /// recvmsg) turns the timestamps off; a payload without one is timed at `now_t`
    /// and ends the sleeping through completions.
    pub(super) fn on_stamped_recv(
        &mut self,
        c: u32,
        res: i32,
        flags: u32,
        now_t: Ticks,
        wall: u64,
    ) {
        let bid = io_uring::cqueue::buffer_select(flags);
        let (Some(bid), Some(br), true) = (bid, &self.buf_ring, res > 0) else {
            if res == -libc::EINVAL && bid.is_none() {
                // No multishot receives on this kernel: `on_recv` falls back to
                // single-shot ones, which carry no timestamp. The header is leaked,
                // not freed: entries queued in this batch may still point at it.
                std::mem::forget(self.stamps.take());
            }
            return self.on_recv(c, res, flags, now_t, 0);
        };
        let Some(got) = stamps::received(br.buf(bid, res as usize), res as usize) else {
            return self.on_recv(c, res, flags, now_t, 0);
        };
        let at = match got.unix_ns {
            Some(stamp) => stamps::arrival(&self.clock, now_t, wall, stamp),
            None if got.len == 0 => now_t,
            None => {
                self.stamps_missing += 1;
                now_t
            }
        };
        self.on_recv(c, got.len as i32, flags, at, stamps::PAYLOAD_OFFSET);
    }

    /// A receive's completion: `res` bytes (at `off` in a provided buffer) arrived at
    /// `now_t`.
    pub(super) fn on_recv(&mut self, c: u32, res: i32, flags: u32, now_t: Ticks, off: usize) {
        let bid = io_uring::cqueue::buffer_select(flags);
        if !io_uring::cqueue::more(flags) {
            self.table.conns[c as usize].recv_armed = false;
        }
        let expiring = self.table.conns[c as usize].state == ConnState::Expiring;
        if res <= 0 || expiring {
            if let (Some(bid), Some(br)) = (bid, &mut self.buf_ring) {
                br.recycle(bid);
            }
            if expiring {
                return; // unmatched bytes; the scan closes it once its requests expired
            }
            if res == -libc::EINVAL && bid.is_none() && self.multishot {
                // A kernel with buffer rings but without multishot receive (5.19):
                // fall back to single-shot receives for the rest of the run.
                self.multishot = false;
                self.arm_recv(c);
                return;
            }
            if res == -libc::ENOBUFS {
                // Every provided buffer was in use: receive again once some are back.
                if !self.table.conns[c as usize].recv_armed {
                    self.arm_recv(c);
                }
                return;
            }
            if self.table.conns[c as usize].state == ConnState::Connecting
                && self.plan.tls.is_none()
            {
                // Closed or reset before the server's HTTP/2 SETTINGS.
                self.open_failed(c, ErrorKind::ClosedByPeer);
                return;
            }
            if self.table.conns[c as usize].state == ConnState::Connecting {
                // Closed or reset during the TLS handshake.
                let why = if res == 0 {
                    "the server closed the connection during the handshake".to_string()
                } else {
                    socket::errno_text(-res)
                };
                self.tls_failed(c, crate::transport::tls::TlsFailure::Closed, &why);
                return;
            }
            if res == 0 {
                self.peer_closed(c, now_t);
            } else {
                self.out.counters.closed_by_target += u64::from(res == -libc::ECONNRESET);
                self.close_conn(c, Some(socket::io_error_kind(-res)), Reopen::Backoff);
            }
            return;
        }
        self.out.counters.bytes_received += res as u64;
        let total = res as usize;
        let open = match bid {
            _ if self.plan.tls.is_some() => self.tls_recv(c, bid, total, now_t),
            // Single-shot receive: the bytes already sit after the kept ones.
            None => self.parse_received(c, total, now_t),
            Some(bid) => {
                // Multishot: frame straight out of the provided buffer; only an
                // unfinished tail is copied into the connection's region, and bytes
                // that follow a kept tail are appended there. The ring is lent out
                // while framing; ManuallyDrop leaks it if a panic unwinds meanwhile
                // (the kernel still owns its other buffers).
                let br = std::mem::ManuallyDrop::new(
                    self.buf_ring.take().expect("buffer id implies a ring"),
                );
                let data = &br.buf(bid, off + total)[off..];
                let open = if self.table.conns[c as usize].recv_keep == 0 {
                    self.parse_direct(c, data, now_t)
                } else {
                    let len = self.plan.recv_buffer_bytes;
                    let base = c as usize * len;
                    let mut off = 0;
                    let mut open = true;
                    while open && off < total {
                        let keep = self.table.conns[c as usize].recv_keep as usize;
                        let n = (len - keep).min(total - off);
                        self.recv_buf
                            .region_mut(base + keep..base + keep + n)
                            .copy_from_slice(&data[off..off + n]);
                        off += n;
                        open = self.parse_received(c, n, now_t);
                    }
                    open
                };
                let mut br = std::mem::ManuallyDrop::into_inner(br);
                br.recycle(bid);
                self.buf_ring = Some(br);
                open
            }
        };
        if !open {
            return;
        }
        if !self.table.conns[c as usize].recv_armed {
            self.arm_recv(c);
        }
        if self.table.has_free_slot(c) && self.table.conns[c as usize].state == ConnState::Ready {
            self.mark_ready(c);
        }
    }

    /// The target ended the stream of `c` (EOF, or a TLS close_notify): a body that
    /// runs until the connection closes ends here; the connection reopens after the
    /// backoff.
    pub(super) fn peer_closed(&mut self, c: u32, now_t: Ticks) {
        if self.table.conns[c as usize].framer.eof() {
            if self.stamps.is_some() {
                // A close carries no timestamp: this response is timed at the reap,
                // so the loop must wake for each from now on.
                self.stamps_missing += 1;
            }
            let reply = self.reply_at_close(c);
            if self.complete_one(c, now_t, reply) {
                self.count_status(c);
            }
        }
        self.out.counters.closed_by_target += 1;
        self.close_conn(c, Some(ErrorKind::ClosedByPeer), Reopen::Backoff);
    }

    /// Frames `data` (a provided buffer, nothing kept before it); an unfinished tail
    /// moves into the connection's region. Returns false when the connection closed.
    pub(super) fn parse_direct(&mut self, c: u32, data: &[u8], now_t: Ticks) -> bool {
        let Some(pos) = self.parse(c, data, now_t) else {
            return false;
        };
        let tail = &data[pos..];
        let len = self.plan.recv_buffer_bytes;
        if tail.len() >= len {
            self.protocol_error(c, "response larger than the receive buffer", tail);
            return false;
        }
        let base = c as usize * len;
        self.recv_buf
            .region_mut(base..base + tail.len())
            .copy_from_slice(tail);
        self.table.conns[c as usize].recv_keep = tail.len() as u32;
        true
    }

    /// Frames the `n` bytes just placed after the kept ones in connection `c`'s region,
    /// completing requests; keeps an unfinished tail for the next bytes. Returns false
    /// when the connection was closed (protocol error, `Connection: close`).
    pub(super) fn parse_received(&mut self, c: u32, n: usize, now_t: Ticks) -> bool {
        let len = self.plan.recv_buffer_bytes;
        let base = c as usize * len;
        let end = self.table.conns[c as usize].recv_keep as usize + n;
        // Lent out while framing, so the bytes and the worker can be borrowed at once;
        // held in ManuallyDrop so that a panic while lent leaks it (other connections'
        // receives may be writing into it) instead of freeing it.
        let buf = std::mem::ManuallyDrop::new(std::mem::take(&mut self.recv_buf));
        let parsed = self.parse(c, buf.region(base..base + end), now_t);
        self.recv_buf = std::mem::ManuallyDrop::into_inner(buf);
        let Some(pos) = parsed else {
            return false;
        };
        let keep = end - pos;
        if keep == len {
            let buf = std::mem::ManuallyDrop::new(std::mem::take(&mut self.recv_buf));
            self.protocol_error(
                c,
                "response larger than the receive buffer",
                buf.region(base + pos..base + end),
            );
            self.recv_buf = std::mem::ManuallyDrop::into_inner(buf);
            return false;
        }
        if keep > 0 && pos > 0 {
            self.recv_buf.copy_within(base + pos..base + end, base);
        }
        self.table.conns[c as usize].recv_keep = keep as u32;
        true
    }

    /// Frames the responses at the start of `input`, completing requests. Returns how
    /// many bytes they took (the rest is an unfinished response), or `None` when the
    /// connection was closed (protocol error, `Connection: close`, connection per
    /// request done).
    pub(super) fn parse(&mut self, c: u32, input: &[u8], now_t: Ticks) -> Option<usize> {
        if self.h2.is_some() {
            return self.parse_h2(c, input, now_t);
        }
        let end = input.len();
        // Where the response in progress started in `input`, when known: a response
        // kept whole (`--expect`) starts at the kept bytes, and the framer already read
        // `capture_skip` of them.
        let conn = &mut self.table.conns[c as usize];
        let mut start = (conn.at_boundary || conn.capture_at_start).then_some(0);
        let mut pos = std::mem::take(&mut conn.capture_skip) as usize;
        conn.capture_at_start = false;
        while pos < end {
            if self.mixed_framing && self.table.conns[c as usize].at_boundary {
                self.select_framer(c);
            }
            // The response starts here when the last one ended here (its first bytes
            // name an error reply, its body is what `--expect` reads).
            if self.table.conns[c as usize].at_boundary {
                start = Some(pos);
                self.server_field_at_start(c, &input[pos..]);
            }
            let parsed = self.table.conns[c as usize].framer.feed(&input[pos..]);
            self.table.conns[c as usize].at_boundary = matches!(parsed, Parsed::Complete { .. });
            match parsed {
                Parsed::Complete { consumed } => {
                    let response = start.map_or(&[][..], |s| &input[s..pos + consumed]);
                    if start.is_some() {
                        // Whole: the field is read from the response's own bytes.
                        self.server_field_at_start(c, response);
                    }
                    let reply = self.reply_of(c, response, start.is_some());
                    if !self.complete_one(c, now_t, reply) {
                        // A response nobody asked for: the stream is out of step.
                        let why = "response with no request in flight";
                        self.protocol_error(c, why, &input[pos..]);
                        return None;
                    }
                    pos += consumed;
                    self.count_status(c);
                    if self.table.conns[c as usize].framer.close_after() {
                        // `Connection: close`: requests pipelined behind this response
                        // will not be answered on this connection. An orderly close:
                        // reopen at once.
                        self.close_and_reopen(c, Some(ErrorKind::ClosedByPeer));
                        return None;
                    }
                    if self.workload.per_request() && self.table.conns[c as usize].inflight == 0 {
                        self.close_conn(c, None, Reopen::Now);
                        return None;
                    }
                    if self.retire_drained(c) {
                        return None;
                    }
                }
                Parsed::Incomplete { consumed } => {
                    pos += consumed;
                    if self.expect_body
                        && let Some(s) = start
                        && self.keep_whole(c, s, pos, end)
                    {
                        return Some(s);
                    }
                    break;
                }
                Parsed::Invalid { reason } => {
                    self.protocol_error(c, reason, &input[pos..]);
                    return None;
                }
            }
        }
        Some(pos)
    }

    /// `--server-time offset:`: reads the field from `bytes`, which start with the
    /// current response of `c` (a response that is not yet whole may hold fewer of its
    /// bytes than the field needs: then it carries none).
    #[inline]
    fn server_field_at_start(&mut self, c: u32, bytes: &[u8]) {
        if let Some(source) = &self.plan.server_time
            && let ServerTimeSource::Offset {
                offset,
                len,
                unit_ns,
            } = **source
        {
            self.server_fields[c as usize] =
                server_time::field_ns(bytes, offset, len, unit_ns).unwrap_or(u64::MAX);
        }
    }

    /// The server's own time the response that just completed on `c` carried, if any.
    #[inline]
    fn server_time_of(&self, c: u32, req: &Req) -> Option<u64> {
        if self.h2.is_some() {
            // Its slot still holds it while it is recorded.
            let ns = self.server_fields[self.h2_slot(c, req.stream)?];
            return (ns != u64::MAX).then_some(ns);
        }
        match self.plan.server_time.as_deref()? {
            ServerTimeSource::Offset { .. } => {
                let ns = self.server_fields[c as usize];
                (ns != u64::MAX).then_some(ns)
            }
            _ => self.table.conns[c as usize].framer.server_time_ns(),
        }
    }

    /// Counts the status of the response that just completed: HTTP status classes and
    /// exact codes.
    #[inline]
    pub(super) fn count_status(&mut self, c: u32) {
        let conn = &self.table.conns[c as usize];
        let Some(status) = conn.framer.status() else {
            return;
        };
        if self.plan.requests.entries[conn.framer_entry as usize].framing == Framing::Http1 {
            let class = (status / 100) as usize;
            self.out.counters.http_status[if (1..=5).contains(&class) { class } else { 0 }] += 1;
            self.replies.http(status);
        }
    }

    /// `--expect` body assertions: whether the response in progress on `c`, started at
    /// `start` of the bytes being framed (`end` of them, the framer read up to `pos`),
    /// stays kept whole: it does while it fits in half the receive buffer (so the next
    /// receive still has room beside it); past that it streams on and its body goes
    /// unchecked.
    #[inline]
    fn keep_whole(&mut self, c: u32, start: usize, pos: usize, end: usize) -> bool {
        let conn = &mut self.table.conns[c as usize];
        if conn.capture_lost || end - start > self.plan.recv_buffer_bytes / 2 {
            conn.capture_lost = true;
            return false;
        }
        conn.capture_at_start = true;
        conn.capture_skip = (pos - start) as u32;
        true
    }

    /// What the response that just completed on `c` was (`response`: its bytes, whole
    /// when `whole`, else empty): an answer, or a reply reporting failure (an HTTP
    /// status in `--error-status`, a RESP error reply, a memcached error line; counted
    /// by its first word), or one failing an `--expect` assertion.
    #[inline]
    pub(super) fn reply_of(&mut self, c: u32, response: &[u8], whole: bool) -> Reply {
        let conn = &mut self.table.conns[c as usize];
        let lost = std::mem::take(&mut conn.capture_lost);
        let Some(status) = conn.framer.status() else {
            return Reply::Answer;
        };
        match self.plan.requests.entries[conn.framer_entry as usize].framing {
            Framing::Http1 if self.plan.error_status.contains(status) => Reply::Error,
            Framing::Http1 if self.plan.expect.is_empty() => Reply::Answer,
            Framing::Http1 => {
                // The request answered is still the oldest in flight.
                let entry = self.table.front(c).map_or(0, |r| r.entry);
                let conn = &self.table.conns[c as usize];
                let body = (whole && !lost)
                    .then(|| conn.framer.body_start())
                    .flatten()
                    .map(|b| &response[b.min(response.len())..]);
                match self.plan.expect.check(entry, status, body) {
                    Verdict::Pass => Reply::Answer,
                    Verdict::Unchecked => Reply::Unchecked,
                    Verdict::Fail(i) => Reply::Assertion(i),
                }
            }
            Framing::Resp | Framing::Memcached if status != 0 => {
                self.replies.error_name(response);
                Reply::Error
            }
            _ => Reply::Answer,
        }
    }

    /// [`Self::reply_of`] for a response the close ended (a body until the close): its
    /// bytes are the kept ones when it was kept whole.
    fn reply_at_close(&mut self, c: u32) -> Reply {
        let conn = &self.table.conns[c as usize];
        if !conn.capture_at_start {
            return self.reply_of(c, &[], false);
        }
        let len = self.plan.recv_buffer_bytes;
        let base = c as usize * len;
        let keep = conn.recv_keep as usize;
        // Lent out while judged, as in `parse_received`.
        let buf = std::mem::ManuallyDrop::new(std::mem::take(&mut self.recv_buf));
        let reply = self.reply_of(c, buf.region(base..base + keep), true);
        self.recv_buf = std::mem::ManuallyDrop::into_inner(buf);
        reply
    }

    /// Points the connection's framer at the entry of its oldest request in flight
    /// (mixes whose entries use different framers).
    pub(super) fn select_framer(&mut self, c: u32) {
        let Some(front) = self.table.front(c) else {
            return;
        };
        let conn = &mut self.table.conns[c as usize];
        if conn.framer_entry != front.entry {
            conn.framer = self.entry_framers[front.entry as usize].clone();
            conn.framer_entry = front.entry;
        }
    }

    /// Counts a failed request of `kind` (per mix entry too, and per target when it
    /// failed on connection `conn`; `None`: it waited in the backlog for any
    /// connection, so no destination failed it); `latency_ns` is recorded when given
    /// (timeouts are recorded at the timeout).
    #[inline]
    pub(super) fn request_error(
        &mut self,
        req: &Req,
        conn: Option<u32>,
        kind: ErrorKind,
        latency_ns: Option<u64>,
    ) {
        if !self.recorded(req.intended_ns) {
            return;
        }
        self.out.counters.error(kind);
        if let Some(to) = conn.and_then(|c| self.target_of(c)) {
            to.errors[kind as usize] += 1;
            if let Some(l) = latency_ns {
                to.latency.saturating_record(l);
            }
        }
        if let Some(e) = self.entries.get_mut(req.entry as usize) {
            e.errors += 1;
            if let Some(l) = latency_ns {
                e.latency.saturating_record(l);
            }
        }
        if let Some(l) = latency_ns {
            self.out.hist.latency.saturating_record(l);
        }
    }

    /// A response that cannot be parsed: the requests in flight are protocol errors and
    /// the connection is reopened; with nothing in flight the bytes were unsolicited.
    /// The first such event keeps its reason and first bytes (escaped) for the report.
    pub(super) fn protocol_error(&mut self, c: u32, reason: &str, bytes: &[u8]) {
        if self.first_bad.is_none() {
            self.first_bad = Some(format!(
                "{reason}: \"{}\"",
                crate::proto::escape_prefix(bytes, 64)
            ));
        }
        if self.table.conns[c as usize].inflight == 0 {
            self.out.counters.event(ErrorKind::Unsolicited);
        }
        self.close_conn(c, Some(ErrorKind::Protocol), Reopen::Now);
    }

    /// Whether a request due at `intended_ns` is recorded: not one of the warm-up's.
    #[inline]
    pub(super) fn recorded(&self, intended_ns: u64) -> bool {
        intended_ns >= self.plan.warmup_ns
    }

    /// Records the oldest in-flight request of `c` as answered at `done` by `reply`.
    #[inline]
    pub(super) fn complete_one(&mut self, c: u32, done: Ticks, reply: Reply) -> bool {
        let conn = &self.table.conns[c as usize];
        if conn.inflight == conn.unsent {
            // Nothing in flight has been sent: this response answers no request.
            return false;
        }
        let Some(req) = self.table.pop_front(c) else {
            return false;
        };
        self.answered(c, req, done, reply);
        true
    }

    /// `--server-time`: records the server's own time of the answer that just completed
    /// on `c` and, for the same request, `latency` less it (network and queueing); an
    /// answer without one is counted, never recorded as zero.
    #[inline]
    fn record_server_time(&mut self, c: u32, req: &Req, latency: u64) {
        match self.server_time_of(c, req) {
            Some(server_ns) => {
                self.out.hist.server_time.saturating_record(server_ns);
                self.out
                    .hist
                    .network_queueing
                    .saturating_record(latency.saturating_sub(server_ns));
            }
            None => self.out.counters.server_time_missing += 1,
        }
    }

    /// Records `req`, a request of `c` in flight, as answered at `done` by `reply`: a
    /// success, or a failure (an error reply, a failed assertion: counted as an error,
    /// its latency kept apart).
    #[inline]
    pub(super) fn answered(&mut self, c: u32, req: Req, done: Ticks, reply: Reply) {
        self.inflight -= 1;
        self.completed_total += 1;
        // A kernel timestamp read against a wall clock that stepped back could lie
        // before the send: the response came after it.
        let done = done.max(req.sent);
        if done != self.last_done {
            self.last_done = done;
            self.last_done_ns = self.clock.ns(done);
        }
        let done_ns = self.last_done_ns;
        let sent_ns = self.clock.ns(req.sent);
        let latency = done_ns.saturating_sub(req.intended_ns);
        if !self.recorded(req.intended_ns) {
            // Due in the warm-up, answered after it: part of the warm-up.
        } else if let Some(kind) = reply.failure() {
            // Answered, but a failure: an error whose latency never improves the
            // headline.
            self.out.counters.error(kind);
            if let Reply::Assertion(i) = reply
                && let Some(n) = self.replies.expect_failed.get_mut(i as usize)
            {
                *n += 1;
            }
            self.out.hist.error_latency.saturating_record(latency);
            if let Some(e) = self.entries.get_mut(req.entry as usize) {
                e.errors += 1;
            }
            if let Some(to) = self.target_of(c) {
                to.errors[kind as usize] += 1;
            }
        } else {
            self.replies.expect_unchecked += u64::from(reply == Reply::Unchecked);
            self.out.counters.completed += 1;
            self.out.hist.latency.saturating_record(latency);
            if self.plan.server_time.is_some() {
                self.record_server_time(c, &req, latency);
            }
            self.out
                .hist
                .service
                .saturating_record(done_ns.saturating_sub(sent_ns));
            if let Some(e) = self.entries.get_mut(req.entry as usize) {
                e.completed += 1;
                e.latency.saturating_record(latency);
            }
            if let Some(to) = self.target_of(c) {
                to.completed += 1;
                to.latency.saturating_record(latency);
            }
        }
        if !self.core.stopping
            && let Some(closed_loop) = self.workload.closed_loop()
        {
            // Closed loop: the next request follows this response, once it is known
            // that the connection stays open (`Connection: close`, end of stream).
            let queued = closed_loop.reissue_q.push(c);
            debug_assert!(queued, "one entry per request in flight");
        }
    }
}
