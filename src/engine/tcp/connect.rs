//! The connect phase: every connection opened before the schedule starts, at most
//! `connects_in_flight` at a time, and the [`Ready`] that reports how it went.

use super::{REGISTER_BATCH, Reopen, Worker};
use crate::clock::Nanos;
use crate::engine::conn_table::ConnState;
use crate::engine::driver::{Ready, WorkerError};
use crate::limits::WAIT_NS_MAX;
use std::sync::atomic::{AtomicBool, Ordering};

impl Worker<'_> {
    /// Opens every connection, at most `connects_in_flight` at a time and no
    /// faster than `--connect-rate`, and waits for the outcomes (each connect bounded
    /// by the timeout). With `--connect-per-request` nothing opens here.
    pub(super) fn connect_all(&mut self, stop: &AtomicBool) -> Ready {
        let n = self.table.conns.len();
        if self.workload.per_request() {
            for c in 0..n as u32 {
                self.table.conns[c as usize].state = ConnState::Closed {
                    reopen_at_ns: Nanos::MAX,
                };
                self.mark_ready(c);
            }
            return self.ready(None, 0);
        }
        let started = self.clock.now_ns();
        let mut established_at = started;
        let mut next = 0;
        let mut next_scan = started;
        loop {
            let now = self.clock.now_ns();
            if self.plan.connect_gap_ns > 0 {
                while next < n
                    && self.connecting < self.plan.connects_in_flight
                    && now >= self.next_connect_ns
                {
                    self.open(next as u32);
                    next += 1;
                }
            } else {
                // Unpaced: sockets for consecutive connections, one file-table update
                // per batch.
                while next < n && self.connecting < self.plan.connects_in_flight {
                    let first = next as u32;
                    let len = (n - next)
                        .min(self.plan.connects_in_flight - self.connecting)
                        .min(REGISTER_BATCH);
                    let mut fds = [-1; REGISTER_BATCH];
                    for (i, fd) in fds.iter_mut().take(len).enumerate() {
                        *fd = self.new_socket(first + i as u32);
                    }
                    self.launch(first, &fds[..len]);
                    next += len;
                }
            }
            // A connect still pending after the timeout has failed (ETIMEDOUT); checked
            // every 10 ms, not every wake-up (a scan is O(connections)).
            let scan = now >= next_scan;
            if scan {
                next_scan = now + 10_000_000;
            }
            for c in (0..n as u32).filter(|_| scan) {
                let conn = &self.table.conns[c as usize];
                if conn.state == ConnState::Connecting
                    && self.clock.ns(conn.connect_started) + self.plan.timeout_ns <= now
                {
                    self.connect_timed_out(c);
                }
            }
            if (next == n && self.connecting == 0) || stop.load(Ordering::Relaxed) {
                break;
            }
            let wait = if next < n && self.connecting < self.plan.connects_in_flight {
                self.next_connect_ns
                    .saturating_sub(now)
                    .clamp(1_000, WAIT_NS_MAX)
            } else {
                WAIT_NS_MAX
            };
            self.core.submit_and_wait(wait);
            if let Some(e) = &self.core.fatal {
                return self.ready(Some(e.clone()), 0);
            }
            let before = self.out.counters.connections_opened;
            self.reap();
            // HTTP/2's preface and SETTINGS ACK go out during the connect.
            self.flush_sends();
            if self.out.counters.connections_opened > before {
                established_at = self.clock.now_ns();
            }
        }
        for c in 0..n as u32 {
            if self.table.conns[c as usize].state == ConnState::Connecting {
                self.close_conn(c, None, Reopen::Now); // Ctrl-C during the connect phase
            }
        }
        self.ready(self.core.fatal.clone(), established_at - started)
    }

    pub(super) fn ready(&self, fatal: Option<WorkerError>, establish_ns: u64) -> Ready {
        let established = self
            .table
            .conns
            .iter()
            .filter(|c| c.state == ConnState::Ready)
            .count();
        Ready {
            worker: self.plan.index,
            established,
            failed: self.plan.connections - established,
            first_errno: self.first_errno,
            establish_ns,
            fatal,
            features: self.core.ring.features.clone(),
            join_error: self.h2_refusal.clone(),
        }
    }
}
