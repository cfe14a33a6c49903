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
            self.inflight -= 1;
            let conn = &mut self.table.conns[c as usize];
            conn.unsent = conn.unsent.min(conn.inflight);
            self.request_error(&r, ErrorKind::Timeout, Some(timeout));
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
            self.request_error(&req, ErrorKind::Timeout, Some(timeout));
        }
        // With every connection open and none connecting (a steady hold with heartbeats,
        // say), only the connections with requests in flight need a look: O(active),
        // not O(connections). Closed or connecting ones need the full pass.
        if self.closed > 0 || self.connecting > 0 {
            for c in 0..self.table.conns.len() as u32 {
                self.scan_conn(c, now_ns);
            }
        } else {
            for _ in 0..self.active_q.len() {
                let Some(c) = self.active_q.pop() else { break };
                self.table.conns[c as usize].in_active = false;
                self.scan_conn(c, now_ns);
            }
        }
    }

    /// Timeouts and reopening for connection `c` (see [`Worker::scan`]).
    pub(super) fn scan_conn(&mut self, c: u32, now_ns: Nanos) {
        let timeout = self.plan.timeout_ns;
        let state = self.table.conns[c as usize].state;
        match state {
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
            ConnState::Closed { reopen_at_ns } if !self.stopping && reopen_at_ns <= now_ns => {
                self.open(c);
            }
            ConnState::Connecting
                if self.clock.ns(self.table.conns[c as usize].connect_started) + timeout
                    <= now_ns =>
            {
                self.connect_failed(c, libc::ETIMEDOUT);
            }
            _ => {}
        }
        let conn = &self.table.conns[c as usize];
        if conn.inflight > 0 && matches!(conn.state, ConnState::Ready | ConnState::Expiring) {
            self.activate(c);
        }
    }

    /// Puts connection `c` on the list the timeout scan looks at.
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
