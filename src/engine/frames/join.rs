//! Joining a room (`--frame-proto`): the join exchange starts once a socket is connected
//! (or its TLS session open), the server's answers are fed to the connection's adapter,
//! and the connection is up once joined; a failed join is counted by kind and the
//! connection reopened after the backoff.

use super::{FrameWorker, tls};
use crate::clock::{Nanos, Ticks};
use crate::proto::frame_proto::{Join, JoinError, JoinFailure};

impl FrameWorker<'_> {
    /// Socket `c`'s TLS session is open: its join starts (NATS's, begun in plaintext
    /// before the upgrade, sends the bytes it held), or it is up (blaster frames).
    pub(super) fn session_open(&mut self, c: u32, now: Nanos) {
        if !self.joins {
            let _ = now;
            self.joined(c, self.clock.ticks());
        } else if tls::upgrades_after_greeting(self.fp.spec.kind) {
            self.flush_ctl(c);
        } else {
            self.set_join_rooms(c);
            let ctl = &mut self.ctl[c as usize];
            self.codecs[c as usize].join_start(&self.join_rooms, &mut ctl.next);
            self.flush_ctl(c);
        }
    }

    /// Connection `c` joined its room at `now_t`: it is up, its frames go out from its
    /// next due tick, and its join time (from the connect submitted) is recorded.
    pub(super) fn joined(&mut self, c: u32, now_t: Ticks) {
        let now = if self.running {
            self.clock.ns(now_t)
        } else {
            0
        };
        let conn = &mut self.conns[c as usize];
        if conn.joining {
            conn.joining = false;
            self.joining -= 1;
        }
        conn.up = true;
        conn.attempts = 0;
        (conn.last_rx, conn.ping_out) = (now, false);
        if let Some(cl) = self.plan.conn_life {
            let member = self.plan.conn_offset as u64 + u64::from(self.member(c));
            let conn = &mut self.conns[c as usize];
            conn.retire_ns = now.saturating_add(cl.age_ns(self.plan.seed, member, conn.joins));
            conn.frames_on = 0;
            conn.joins = conn.joins.wrapping_add(1);
        }
        let conn = &mut self.conns[c as usize];
        self.down_count -= 1;
        conn.up_since = now;
        let took = self.clock.between_ns(conn.open_t, now_t);
        self.out.hist.frame_join.saturating_record(took.max(1));
    }

    /// The wire rooms connection `c` joins, one per member slot (each slot's layout),
    /// into `join_rooms`.
    pub(super) fn set_join_rooms(&mut self, c: u32) {
        let j = self.plan.conn_offset as u64 + u64::from(self.member(c));
        let book = &self.book;
        self.join_rooms.clear();
        self.join_rooms
            .extend((0..self.slots).map(|s| book.wire_room(s, j)));
    }

    /// (room, member) of local connection `c` (slot 0's room).
    pub(super) fn room_member(&self, c: u32) -> (u32, u16) {
        let (room, member) = self
            .fp
            .grid
            .room_member(self.plan.conn_offset as u64 + u64::from(self.member(c)));
        (room as u32, member as u16)
    }

    /// Connection `c`'s join failed: counted by kind (the first reason kept), closed,
    /// reopened after the backoff.
    pub(super) fn join_failed(
        &mut self,
        c: u32,
        kind: Option<JoinFailure>,
        reason: String,
        now: Nanos,
    ) {
        let f = &mut self.join_failures;
        match kind {
            Some(JoinFailure::Refused) => f.refused += 1,
            Some(JoinFailure::Protocol) => f.protocol += 1,
            Some(JoinFailure::Closed) => f.closed += 1,
            None => f.timeout += 1,
        }
        self.first_join_error.get_or_insert(reason);
        let conn = &mut self.conns[c as usize];
        if conn.joining {
            conn.joining = false;
            self.joining -= 1;
        }
        self.drop_conn(c, now);
    }

    /// Feeds the bytes at `recv_buf[base..end]` to connection `c`'s join: `Some(n)`
    /// once joined (the bytes after `n` are downlink bytes); `None` while pending (the
    /// rest kept); `Err` when it failed (the connection closed). With `--tls`, NATS's
    /// upgrade starts once its plaintext `INFO` is answered (the answer waits for the
    /// session).
    pub(super) fn feed_join(
        &mut self,
        c: u32,
        base: usize,
        end: usize,
    ) -> Result<Option<usize>, ()> {
        self.set_join_rooms(c);
        let bytes = self.recv_buf.region(base..base + end);
        let out = &mut self.ctl[c as usize].next;
        match self.codecs[c as usize].join_feed(&self.join_rooms, bytes, out) {
            Join::Joined { consumed } => {
                self.flush_ctl(c);
                self.joined(c, self.clock.ticks());
                Ok(Some(consumed))
            }
            Join::Pending { consumed } => {
                let tail = end - consumed;
                if tail == self.recv_stride {
                    let e = JoinError {
                        proto: self.fp.spec.kind,
                        kind: JoinFailure::Protocol,
                        reason: format!(
                            "an answer longer than the receive region ({} bytes)",
                            self.recv_stride
                        ),
                    };
                    self.join_failed(c, Some(e.kind), e.to_string(), self.clock.now_ns());
                    return Err(());
                }
                if self.plan.tls.is_some()
                    && !self.tls_on(c)
                    && !self.ctl[c as usize].next.is_empty()
                {
                    // The greeting is answered: the rest goes over TLS.
                    self.conns[c as usize].recv_keep = 0;
                    self.tls_start(c);
                    return if self.conns[c as usize].fd != -1 {
                        Ok(None)
                    } else {
                        Err(())
                    };
                }
                if consumed > 0 && tail > 0 {
                    self.recv_buf.copy_within(base + consumed..base + end, base);
                }
                self.conns[c as usize].recv_keep = tail as u32;
                self.flush_ctl(c);
                Ok(None)
            }
            Join::Failed(e) => {
                self.join_failed(c, Some(e.kind), e.to_string(), self.clock.now_ns());
                Err(())
            }
        }
    }
}
