//! The connect phase of the frames worker: every connection opened (and joined) before
//! the schedule starts, at most [`CONNECTS_IN_FLIGHT`] pending at once, and the
//! [`Ready`] that reports how it went.

use super::FrameWorker;
use crate::engine::driver::Ready;
use crate::limits::WAIT_NS_MAX;
use std::sync::atomic::{AtomicBool, Ordering};

/// Connects pending at once in the connect phase.
const CONNECTS_IN_FLIGHT: usize = 256;

impl FrameWorker<'_> {
    /// The connect phase: every connection opened, at most [`CONNECTS_IN_FLIGHT`]
    /// pending at once, each bounded by the timeout.
    pub(super) fn connect_all(&mut self, stop: &AtomicBool) -> Ready {
        let n = self.conns.len();
        let started = self.clock.now_ns();
        // A ramp opens every connection at its join, during the run.
        let mut next = if self.ramp { n } else { 0 };
        loop {
            while next < n && self.connecting < CONNECTS_IN_FLIGHT {
                self.open(next as u32);
                next += 1;
            }
            let now = self.clock.now_ns();
            if (next == n && self.connecting == 0 && self.joining == 0)
                || stop.load(Ordering::Relaxed)
                || now > started + self.plan.timeout_ns.max(1_000_000_000)
                || self.core.fatal.is_some()
            {
                break;
            }
            self.core.submit_and_wait(WAIT_NS_MAX);
            self.reap();
        }
        // Joins the server never finished within the connect phase fail as timeouts.
        let now = self.clock.now_ns();
        for c in 0..n as u32 {
            if self.conns[c as usize].joining && !self.tls_timed_out(c) {
                let reason = format!(
                    "{} join timeout: no answer within {}",
                    self.fp.spec.kind,
                    crate::units::fmt_ns(self.plan.timeout_ns.max(1_000_000_000))
                );
                self.join_failed(c, None, reason, now);
            }
        }
        let established = (0..self.members as u32)
            .filter(|&c| self.member_up(c))
            .count();
        Ready {
            worker: self.plan.index,
            established,
            failed: if self.ramp {
                0
            } else {
                self.members - established
            },
            first_errno: self.first_errno,
            establish_ns: self.clock.now_ns() - started,
            fatal: self.core.fatal.clone(),
            features: self.core.ring.features.clone(),
            join_error: self.first_join_error.clone(),
        }
    }
}
