//! `--h2-keepalive` on frames connections (`--frame-proto grpc`): a PING on each
//! connection up that received nothing for the interval and has no PING unanswered,
//! as gRPC clients' keepalive does (a PING after a quiet spell, never one on top of an
//! unanswered one). Its ACK is a [`crate::proto::frame_proto::Control::Pong`]; both
//! are counted (`frames.pings_sent`, `frames.pings_acked`). A server that finds the
//! PINGs too frequent ends the connection with GOAWAY ENHANCE_YOUR_CALM, which the
//! run names like any other ending ([`crate::proto::frame_proto::grpc::ended_text`]).

use super::FrameWorker;
use crate::clock::Nanos;
use crate::proto::frame_proto::CONTROL_BYTES_MAX;

/// When the connections are next looked at, and how quiet one must be to be pinged.
#[derive(Debug, Clone, Copy)]
pub(super) struct Keepalive {
    pub every_ns: u64,
    pub next_scan: Nanos,
}

/// Whether a connection that last received at `last_rx` is due a PING at `now`.
#[inline]
pub(super) fn ping_due(now: Nanos, last_rx: Nanos, every_ns: u64, unanswered: bool) -> bool {
    !unanswered && now.saturating_sub(last_rx) >= every_ns
}

impl FrameWorker<'_> {
    /// Sends the PINGs due at `now` (the connections are looked at four times per
    /// interval, so a PING goes out at most a quarter of it late).
    pub(super) fn keepalive_scan(&mut self, now: Nanos) {
        let Some(ka) = self.keepalive.as_mut() else {
            return;
        };
        if now < ka.next_scan {
            return;
        }
        ka.next_scan = now + ka.every_ns / 4;
        let every = ka.every_ns;
        for c in 0..self.conns.len() {
            let conn = &self.conns[c];
            if !conn.up || !ping_due(now, conn.last_rx, every, conn.ping_out) {
                continue;
            }
            let mut ping = [0u8; CONTROL_BYTES_MAX];
            let n = self.codecs[c].encode_keepalive(&mut ping);
            if n == 0 {
                continue;
            }
            self.ctl[c].next.extend_from_slice(&ping[..n]);
            self.conns[c].ping_out = true;
            self.out.counters.frames.pings_sent += 1;
            self.flush_ctl(c as u32);
        }
    }

    /// Connection `c`'s PING was acknowledged.
    pub(super) fn on_pong(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        if conn.ping_out {
            conn.ping_out = false;
            self.out.counters.frames.pings_acked += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ping_due;

    #[test]
    fn a_ping_is_due_after_a_quiet_interval_and_never_on_an_unanswered_one() {
        assert!(!ping_due(1_099, 1_000, 100, false));
        assert!(ping_due(1_100, 1_000, 100, false));
        assert!(!ping_due(5_000, 1_000, 100, true));
        // A receive stamped after the scan's instant (kernel time) is not quiet.
        assert!(!ping_due(1_000, 1_050, 100, false));
    }
}
