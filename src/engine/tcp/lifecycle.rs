//! Connection lifecycle: opening (paced by `--connect-rate`, placed over the
//! (source, target) pairs), connecting, closing through the ring, reopening after
//! the backoff, and closing them all before the quiesce.

use super::workload::Workload;
use super::{Reopen, Worker};
use crate::clock::{Clock, Nanos};
use crate::engine::conn_table::{ANSWERED, ConnState, Opened, REGISTERED};
use crate::engine::recorder::ErrorKind;
use crate::engine::socket;
use crate::engine::token::{Op, Token, next_generation};
use crate::proto::Framer;
use io_uring::{opcode, types};
use std::net::IpAddr;
use std::os::fd::RawFd;

impl Worker<'_> {
    /// Switches to the run's clock: instants set during the connect phase (reopen
    /// times, the next connect) keep their distance from now.
    pub(super) fn rebase(&mut self, clock: Clock) {
        let setup_now = self.clock.now_ns();
        self.clock = clock;
        let shift = |t: Nanos| {
            if t == Nanos::MAX {
                t
            } else {
                t.saturating_sub(setup_now)
            }
        };
        for conn in self.table.conns.iter_mut() {
            if let ConnState::Closed { reopen_at_ns } | ConnState::Closing { reopen_at_ns } =
                &mut conn.state
            {
                *reopen_at_ns = shift(*reopen_at_ns);
            }
        }
        self.next_connect_ns = shift(self.next_connect_ns);
        // Whatever the connect phase left for the scan (a connection to reopen after
        // a failed connect, say) goes on the watch list once, here.
        for c in 0..self.table.conns.len() as u32 {
            self.watch(c);
        }
    }

    /// The (source, target) indices of connection `c`: connections go round robin over
    /// every pair, so each pair carries at most ceil(connections / pairs) of them.
    #[inline]
    pub(super) fn pair_of(&self, c: u32) -> (Option<IpAddr>, usize) {
        let (s, t) = self.placement.pair_of(self.plan.conn_offset + c as usize);
        (self.plan.sources.get(s).copied(), t)
    }

    /// The source port of connection `c`'s first connect with `--source-ip`: the
    /// connections of one (source, destination) pair take consecutive ports of the
    /// ephemeral range, so mass establishment needs no port search. Reconnects (which
    /// may find their old port in TIME_WAIT) and connections per request let the
    /// kernel choose.
    #[inline]
    pub(super) fn first_port(&self, c: u32) -> Option<u16> {
        let (lo, size) = self.plan.source_ports?;
        if self.workload.per_request() || self.table.conns[c as usize].opened != Opened::Never {
            return None;
        }
        let g = self.plan.conn_offset + c as usize;
        let nth = g / self.placement.pairs().max(1);
        Some(lo + (nth % size as usize) as u16)
    }

    /// Opens connection `c` now, or, under `--connect-rate`, at its turn.
    pub(super) fn open(&mut self, c: u32) {
        let now = self.clock.now_ns();
        if self.plan.connect_gap_ns > 0 {
            if now < self.next_connect_ns {
                // Its turn comes at `next_connect_ns`: queued, opened by the loop then.
                let conn = &mut self.table.conns[c as usize];
                if let ConnState::Closed { reopen_at_ns } = &mut conn.state {
                    *reopen_at_ns = self.next_connect_ns;
                }
                if !conn.deferred {
                    conn.deferred = true;
                    let queued = self.deferred_q.push(c);
                    debug_assert!(queued, "each connection is queued at most once");
                }
                self.watch(c);
                return;
            }
            // No credit for idle time beyond one gap: the rate is a ceiling.
            self.next_connect_ns = self
                .next_connect_ns
                .max(now.saturating_sub(self.plan.connect_gap_ns))
                + self.plan.connect_gap_ns;
        }
        let fd = self.new_socket(c);
        self.launch(c, &[fd]);
    }

    /// `--connect-rate`: opens the connections whose turn has come, in order.
    pub(super) fn open_deferred(&mut self, now: Nanos) {
        while now >= self.next_connect_ns
            && let Some(c) = self.deferred_q.pop()
        {
            let conn = &mut self.table.conns[c as usize];
            conn.deferred = false;
            // Still closed, and wanted: a connection per request with its request, or a
            // connection that is to be reopened.
            if matches!(conn.state, ConnState::Closed { reopen_at_ns } if reopen_at_ns != Nanos::MAX)
                && !self.core.stopping
            {
                self.open(c);
            }
        }
    }

    /// A socket for connection `c`, options set and bound; -1 when that failed (the
    /// failure is counted and the connection waits for its backoff).
    pub(super) fn new_socket(&mut self, c: u32) -> RawFd {
        let (source, t) = self.pair_of(c);
        let port = self.first_port(c);
        let reuse = self.plan.targets.len() > 1;
        match socket::tcp_socket(&self.plan.targets[t], source, port, reuse, &self.sockopts) {
            Ok(fd) => fd,
            Err(e) => {
                self.connect_failed(c, e.raw_os_error().unwrap_or(libc::EIO));
                -1
            }
        }
    }

    /// Connects connections `first..first + fds.len()` on their new sockets (-1: none,
    /// skipped). The sockets move into the ring's file table in one update and their
    /// descriptors are closed, so connections are not bounded by RLIMIT_NOFILE (each
    /// ring's table is).
    pub(super) fn launch(&mut self, first: u32, fds: &[RawFd]) {
        // The update may stop early: the first `registered` slots took their socket.
        let registered = if self.fixed_files {
            self.core
                .ring
                .register_files_update(first, fds)
                .unwrap_or(0)
        } else {
            0
        };
        let now_t = self.clock.ticks();
        for (i, &fd) in fds.iter().enumerate() {
            if fd < 0 {
                continue;
            }
            let c = first + i as u32;
            let fd = if i < registered {
                socket::close_descriptor(fd);
                REGISTERED
            } else {
                fd
            };
            let (_, t) = self.pair_of(c);
            let conn = &mut self.table.conns[c as usize];
            if conn.opened == Opened::Never {
                conn.opened = Opened::Submitted;
            }
            conn.fd = fd;
            conn.state = ConnState::Connecting;
            conn.connect_started = now_t;
            self.closed -= 1;
            self.connecting += 1;
            let token = Token {
                conn: c,
                op: Op::Connect,
                generation: conn.generation,
            };
            let addr = &self.addrs[t];
            let (addr, addr_len) = (addr.as_ptr().cast(), addr.len());
            let entry = on_socket!(self, c, fd, |s| opcode::Connect::new(s, addr, addr_len)
                .build())
            .user_data(token.encode());
            self.activate(c); // its connect timeout
            // SAFETY: the connect reads the address in `self.addrs`, a boxed slice
            // owned by the worker and never reallocated, which outlives the operation
            // (leaked if the worker is dropped before it completes).
            unsafe { self.push(&[entry]) };
        }
    }

    /// A connection attempt that failed with `errno`: counted by errno, retried after
    /// the backoff.
    pub(super) fn connect_failed(&mut self, c: u32, errno: i32) {
        self.first_errno.get_or_insert(errno);
        self.out.counters.connect_failed(errno);
        self.open_failed(c, socket::connect_error_kind(errno));
    }

    /// Connection `c` could not be opened (its connect or its handshake failed with
    /// `kind`): the requests waiting for it fail as `kind`, each counted once; with
    /// none waiting (only a connection per request has a request waiting for its
    /// connect) the failure is a connection event. Retried after the backoff.
    pub(super) fn open_failed(&mut self, c: u32, kind: ErrorKind) {
        if self.table.conns[c as usize].inflight == 0 {
            self.out.counters.event(kind);
        }
        self.close_conn(c, Some(kind), Reopen::Backoff);
    }

    /// A connection still `Connecting` at its timeout: with TLS, once its TCP connect
    /// completed (it has a session), the handshake is what stalled (a TLS failure of
    /// its own kind, not a connect timeout); else the connect timed out.
    pub(super) fn connect_timed_out(&mut self, c: u32) {
        if self.h2_started(c) {
            self.h2_refused(c, "the server sent no HTTP/2 SETTINGS within --timeout: it does not speak HTTP/2 with prior knowledge (h2c) here; for h2 over TLS give --tls".into());
        } else if self.sessions.get(c as usize).is_some_and(Option::is_some) {
            self.tls_failed(
                c,
                crate::transport::tls::TlsFailure::HandshakeTimeout,
                "the server did not complete the handshake within --timeout",
            );
        } else {
            self.connect_failed(c, libc::ETIMEDOUT);
        }
    }

    pub(super) fn on_connect(&mut self, c: u32, res: i32) {
        if res < 0 {
            self.connect_failed(c, -res);
            return;
        }
        let now_t = self.clock.ticks();
        let conn = &self.table.conns[c as usize];
        let took = self.clock.ns(now_t) - self.clock.ns(conn.connect_started);
        self.out.hist.connect.saturating_record(took);
        if self.plan.tls.is_some() {
            self.start_handshake(c, now_t); // `established` once it completes
            return;
        }
        self.established(c, now_t);
    }

    /// Connection `c` is open (connected, and with TLS its handshake done) at `now_t`:
    /// ready for requests.
    pub(super) fn established(&mut self, c: u32, now_t: crate::clock::Ticks) {
        if self.h2_handshaking(c) {
            return; // HTTP/2: ready once the server's SETTINGS arrive (`h2.rs`)
        }
        self.connecting -= 1;
        let conn = &mut self.table.conns[c as usize];
        conn.attempts = 0;
        conn.state = ConnState::Ready;
        let unsent = conn.unsent;
        let armed = conn.recv_armed;
        if conn.opened == Opened::Up && !self.workload.per_request() {
            self.out.counters.reconnects += 1;
        }
        conn.opened = Opened::Up;
        self.out.counters.connections_opened += 1;
        self.life_begins(c, self.clock.ns(now_t));
        if !armed {
            self.arm_recv(c);
        }
        if unsent > 0 {
            self.mark_flush(c); // connection per request: its request goes out now
        } else {
            match self.workload {
                // Requests go out only once the schedule runs (not in the connect phase).
                Workload::ClosedLoop(_) => {
                    if self.running {
                        self.fill(c, now_t);
                    }
                }
                Workload::Timetable(_) => self.mark_ready(c),
                Workload::PerRequest(_) => {}
            }
        }
    }

    /// When a closed connection opens again: after the backoff (a target that closed
    /// or refused it), at once (the generator's own decision: expired requests, a
    /// response that did not parse, `Connection: close`), or never.
    pub(super) fn reopen_at(&mut self, c: u32, reopen: Reopen) -> Nanos {
        if (self.core.stopping && !self.reopens_in_drain()) || self.workload.per_request() {
            return Nanos::MAX;
        }
        match (reopen, &self.plan.backoff) {
            (Reopen::Now, _) => 0,
            (Reopen::Backoff, Some(b)) => {
                let conn = &mut self.table.conns[c as usize];
                let delay = b.delay_ns(u32::from(conn.attempts), self.rng.f64());
                conn.attempts = conn.attempts.saturating_add(1);
                self.out.hist.reconnect_delay.saturating_record(delay);
                self.clock.now_ns() + delay
            }
            (Reopen::Backoff, None) => Nanos::MAX, // --no-reconnect
        }
    }

    /// Closes connection `c`; requests in flight on it become errors of `kind` (or are
    /// cut off when the run is stopping). It reopens as `reopen` says.
    pub(super) fn close_conn(&mut self, c: u32, kind: Option<ErrorKind>, reopen: Reopen) {
        while let Some(req) = self.table.pop_front(c) {
            if req.stream == ANSWERED {
                continue; // answered out of order (HTTP/2): already counted
            }
            self.inflight -= 1;
            // Cut off by Ctrl-C or the end of the run; but a target that closes or
            // fails during the drain after the natural end has failed those requests.
            if self.core.interrupted || (self.core.stopping && kind.is_none()) {
                self.out.counters.cut_off += 1;
            } else {
                self.request_error(&req, Some(c), kind.unwrap_or(ErrorKind::Io), None);
            }
        }
        let reopen_at_ns = self.reopen_at(c, reopen);
        let conn = &mut self.table.conns[c as usize];
        // The operation that would keep the socket alive in the ring: a pending connect
        // or the armed receive (a send completes by itself).
        // The operations that would keep the socket alive in the ring: a pending
        // connect, the armed receive, and a send the socket cannot take (a target that
        // stopped reading).
        let mut pending = [None; 2];
        match conn.state {
            // (A TLS handshake in progress has its receive and sends in the ring.)
            ConnState::Connecting if !conn.recv_armed && !conn.send_armed => {
                pending[0] = Some(Op::Connect)
            }
            _ => {
                pending[0] = conn.recv_armed.then_some(Op::Recv);
                pending[1] = conn.send_armed.then_some(Op::Send);
            }
        }
        let pending = pending.map(|op| {
            op.map(|op| Token {
                conn: c,
                op,
                generation: conn.generation,
            })
        });
        match conn.state {
            ConnState::Closed { .. } | ConnState::Closing { .. } => {}
            ConnState::Connecting => {
                self.connecting -= 1;
                self.closed += 1;
            }
            _ => self.closed += 1,
        }
        conn.generation = next_generation(conn.generation);
        let generation = conn.generation;
        let fd = std::mem::replace(&mut conn.fd, -1);
        conn.state = ConnState::Closed { reopen_at_ns };
        conn.unsent = 0;
        conn.sending = 0;
        conn.head = 0;
        conn.recv_armed = false;
        conn.send_armed = false;
        conn.recv_keep = 0;
        conn.framer.reset();
        conn.at_boundary = true;
        conn.capture_at_start = false;
        conn.capture_lost = false;
        conn.capture_skip = 0;
        if let Some(s) = self.sessions.get_mut(c as usize) {
            *s = None;
        }
        let conn = &mut self.table.conns[c as usize];
        if fd == REGISTERED {
            // Cancel the operation still holding the socket (by its user_data: a hash
            // lookup, where cancelling by file would scan every request in the ring),
            // then drop the table's reference; the slot is free once the close is done.
            conn.state = ConnState::Closing { reopen_at_ns };
            let token = Token {
                conn: c,
                op: Op::Close,
                generation,
            };
            let close = opcode::Close::new(types::Fixed(c))
                .build()
                .user_data(token.encode());
            // Each cancel hard-linked to the next entry, the close last.
            let mut chain: [Option<io_uring::squeue::Entry>; 3] = [None, None, None];
            let mut n = 0;
            for t in pending.into_iter().flatten() {
                chain[n] = Some(
                    opcode::AsyncCancel2::new(types::CancelBuilder::user_data(t.encode()))
                        .build()
                        .flags(io_uring::squeue::Flags::IO_HARDLINK)
                        .user_data(0),
                );
                n += 1;
            }
            chain[n] = Some(close);
            n += 1;
            let entries: [io_uring::squeue::Entry; 3] =
                chain.map(|e| e.unwrap_or_else(|| opcode::Nop::new().build()));
            // SAFETY: cancels by user_data and a close of a file-table slot point into
            // no memory.
            unsafe { self.push(&entries[..n]) };
        } else {
            // Cancel what still points into the connection's regions (a receive on a
            // kernel without provided-buffer rings writes into its own region; closing
            // the descriptor would not end it: the ring holds the socket), then close.
            // The connection stays `Closing` until they have completed.
            let mut n = 0;
            let mut cancels = [opcode::Nop::new().build(), opcode::Nop::new().build()];
            for t in pending.into_iter().flatten() {
                cancels[n] = opcode::AsyncCancel2::new(types::CancelBuilder::user_data(t.encode()))
                    .build()
                    .user_data(0);
                n += 1;
            }
            if n > 0 {
                conn.state = ConnState::Closing { reopen_at_ns };
                // SAFETY: cancels by user_data point into no memory.
                unsafe { self.push(&cancels[..n]) };
            }
            if fd >= 0 {
                socket::close(fd);
            }
            if n == 0 && self.workload.per_request() {
                self.mark_ready(c);
            }
        }
        // Closing, or closed with a reopen instant or a request waiting: the scan
        // looks at it; closed for good and empty: it does not.
        self.watch(c);
    }

    /// A closing connection whose last operation has completed (its socket closed,
    /// its receive and send done or cancelled) is closed: its file-table slot and its
    /// regions may be used again, by a reopen or (connection per request) the next
    /// request.
    pub(super) fn finish_close(&mut self, c: u32) {
        let conn = &mut self.table.conns[c as usize];
        if conn.ops > 0 {
            return;
        }
        if let ConnState::Closing { reopen_at_ns } = conn.state {
            conn.state = ConnState::Closed { reopen_at_ns };
            if self.workload.per_request() {
                self.mark_ready(c);
            }
            self.reopen_if_closed(c);
        }
    }

    /// Closes `c` in order (`kind`: what its requests still in flight fail as) and
    /// opens it again as soon as the close completes: a server's `Connection: close`
    /// or GOAWAY, a retirement. The next timeout scan may be tens of ms away.
    pub(super) fn close_and_reopen(&mut self, c: u32, kind: Option<ErrorKind>) {
        self.close_conn(c, kind, Reopen::Now);
        self.table.conns[c as usize].reopen_when_closed = true;
        self.reopen_if_closed(c);
    }

    /// Opens `c` if it was closed in order and its close has completed.
    pub(super) fn reopen_if_closed(&mut self, c: u32) {
        let conn = &mut self.table.conns[c as usize];
        if conn.reopen_when_closed
            && let ConnState::Closed { reopen_at_ns } = conn.state
        {
            conn.reopen_when_closed = false;
            if reopen_at_ns != Nanos::MAX {
                self.open(c);
            }
        }
    }

    /// Closes every connection still open (its socket, and what is in the ring on
    /// it): at the end of the loop, and again before the quiesce (after an aborted
    /// start, say).
    pub(super) fn close_all(&mut self) {
        for c in 0..self.table.conns.len() as u32 {
            if self.table.conns[c as usize].fd != -1 {
                self.close_conn(c, None, Reopen::Now);
            }
        }
    }
}
