//! Expiry: the timeout scan over the backlog and the connections, requests recorded
//! at the timeout, expired connections closed, closed ones reopened when due.

use super::{Reopen, Worker};
use crate::clock::Nanos;
use crate::engine::conn_table::ConnState;
use crate::engine::recorder::ErrorKind;

impl Worker<'_> {
    /// Times out the requests of connection `c` whose deadline has passed (recorded at
    /// the timeout); whether any did.
    pub(super) fn expire_front(&mut self, c: u32, now_ns: Nanos) -> bool {
        let timeout = self.plan.timeout_ns;
        let mut expired = false;
        while let Some(r) = self.table.front(c) {
            if r.intended_ns + timeout > now_ns {
                break;
            }
            self.table.pop_front(c);
            self.table.pop_answered(c);
            self.inflight -= 1;
            let conn = &mut self.table.conns[c as usize];
            conn.unsent = conn.unsent.min(conn.inflight);
            self.request_error(&r, Some(c), ErrorKind::Timeout, Some(timeout));
            expired = true;
        }
        expired
    }

    /// Timeouts (in flight and in the backlog) and reconnects; run about once a ms.
    pub(super) fn scan(&mut self, now_ns: Nanos) {
        let timeout = self.plan.timeout_ns;
        while let Some(req) = self.backlog.front() {
            if req.intended_ns + timeout > now_ns {
                break;
            }
            self.backlog.pop();
            self.request_error(&req, None, ErrorKind::Timeout, Some(timeout));
        }
        // Only the connections on the watch list can have anything due: requests in
        // flight, a connect pending, a reopen scheduled, a close in the ring. O(watched),
        // not O(connections), also when connections are closed (every idle one in
        // per-request mode, those that stay closed under --no-reconnect). Each visit
        // puts the connection back if it still needs watching.
        for _ in 0..self.active_q.len() {
            let Some(c) = self.active_q.pop() else { break };
            self.table.conns[c as usize].in_active = false;
            self.scan_conn(c, now_ns);
        }
        if let Some(ka) = self.plan.http2.and_then(|h| h.keepalive_ns) {
            self.h2_keepalive(now_ns, ka);
        }
    }

    /// Timeouts and reopening for connection `c` (see [`Worker::scan`]).
    pub(super) fn scan_conn(&mut self, c: u32, now_ns: Nanos) {
        #[cfg(test)]
        {
            self.scan_visits += 1;
        }
        let timeout = self.plan.timeout_ns;
        let state = self.table.conns[c as usize].state;
        match state {
            // HTTP/2: each stream times out alone, its connection stays.
            ConnState::Ready if self.h2.is_some() => self.h2_expire(c, now_ns),
            ConnState::Ready | ConnState::Expiring => {
                let expired = self.expire_front(c, now_ns);
                let conn = &mut self.table.conns[c as usize];
                if expired && conn.state == ConnState::Ready {
                    conn.state = ConnState::Expiring;
                    // Requests not yet on the wire stay in the FIFO and time out
                    // at their own deadlines like the rest.
                    conn.unsent = (conn.unsent + conn.sending).min(conn.inflight);
                    conn.sending = 0;
                }
                if conn.state == ConnState::Expiring && conn.inflight == 0 {
                    self.close_conn(c, None, Reopen::Now);
                }
            }
            // Connection per request: a request waiting for its connection (deferred
            // by --connect-rate, or still connecting) times out like any other,
            // recorded at the timeout; a connect left with nothing to carry is
            // abandoned.
            ConnState::Closed { .. } | ConnState::Connecting
                if self.expire_front(c, now_ns) && self.table.conns[c as usize].inflight == 0 =>
            {
                if self.table.conns[c as usize].state == ConnState::Connecting {
                    self.close_conn(c, None, Reopen::Now);
                } else {
                    self.mark_ready(c);
                }
            }
            ConnState::Closed { reopen_at_ns }
                if (!self.core.stopping || self.reopens_in_drain()) && reopen_at_ns <= now_ns =>
            {
                self.open(c);
            }
            ConnState::Connecting
                if self.clock.ns(self.table.conns[c as usize].connect_started) + timeout
                    <= now_ns =>
            {
                self.connect_timed_out(c);
            }
            _ => {}
        }
        self.watch(c);
    }

    /// Whether the timeout scan has anything to look at on connection `c`: requests in
    /// flight (or waiting for its connect), a pending connect (its timeout), a reopen
    /// instant, or a close still in the ring. An open idle connection, or a closed one
    /// that never reopens by itself (`--no-reconnect`, connection per request) and
    /// holds no request, needs nothing until a request or a state change puts it back.
    #[inline]
    pub(super) fn needs_scan(&self, c: u32) -> bool {
        let conn = &self.table.conns[c as usize];
        match conn.state {
            ConnState::Ready | ConnState::Expiring => conn.inflight > 0,
            ConnState::Connecting | ConnState::Closing { .. } => true,
            ConnState::Closed { reopen_at_ns } => conn.inflight > 0 || reopen_at_ns != Nanos::MAX,
        }
    }

    /// Puts connection `c` on the watch list when it needs the scan.
    #[inline]
    pub(super) fn watch(&mut self, c: u32) {
        if self.needs_scan(c) {
            self.activate(c);
        }
    }

    /// Puts connection `c` on the list the timeout scan looks at (at most once).
    #[inline]
    pub(super) fn activate(&mut self, c: u32) {
        let conn = &mut self.table.conns[c as usize];
        if !conn.in_active {
            conn.in_active = true;
            let queued = self.active_q.push(c);
            debug_assert!(queued, "each connection is queued at most once");
        }
    }
}
