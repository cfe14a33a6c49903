//! The frames worker's totals, sent with the last snapshot: frames planned, expected
//! and received (the downlink frames' under `--aggregate`), frames never sent, each
//! member's residency and span, reconnects and join failures.

use super::FrameWorker;
use crate::engine::recorder::{FrameTotals, SlowTotals, WorkerTotals};
use crate::engine::stamps;

impl FrameWorker<'_> {
    /// Adds what this worker did to the totals every worker reports, for
    /// [`Hooks::finish`](crate::engine::run_loop::Hooks::finish).
    pub(super) fn totals(&mut self, t: &mut WorkerTotals) {
        let (stopped, end) = (t.stopped_ns, t.wall_ns);
        for (conn, codec) in self.conns.iter_mut().zip(self.codecs.iter_mut()) {
            if conn.up {
                conn.uptime += stopped.saturating_sub(conn.up_since.min(stopped));
            }
            self.out.counters.frames.not_sent += u64::from(conn.pend) * self.slots as u64;
            conn.pend = 0;
            // gRPC: frames still waiting for a window at the end never went.
            self.out.counters.frames.not_sent += codec.drop_backlog();
        }
        for ctl in self.ctl.iter_mut() {
            self.out.counters.frames.not_sent += u64::from(ctl.next_frames);
            ctl.next_frames = 0;
        }
        let mut book = self.book.totals();
        let (mut outside, mut shift_ns) = (0, 0);
        if let Some(d) = self.down.as_mut() {
            // Aggregated: what is expected and received is the downlink frames.
            let down = d.totals();
            book.expected = down.expected;
            book.received = down.received;
            book.per_receiver = down.per_receiver;
            book.lost_at_end = down.lost_at_end;
            outside = down.outside;
            shift_ns = down.shift_ns;
        }
        // A drain cut by its cap while frames still came: the missing ones were on
        // their way, not lost (a gap the windows moved past is lost either way).
        let in_flight_at_end = match self.drain {
            Some(d) if !d.done() => book.lost_at_end,
            _ => 0,
        };
        self.out.counters.frames.lost += book.lost_at_end - in_flight_at_end;
        if self.stamped() && self.rx_missing == 0 {
            t.ring_features.push(stamps::FEATURE);
        }
        let first = self.plan.conn_offset as u64;
        let n = self.members as u64;
        let grid = self.fp.grid;
        let planned = (first..first + n)
            .map(|j| grid.planned(j, self.plan.duration_ns))
            .sum::<u64>()
            * self.slots as u64;
        self.set_active();
        t.last_done_ns = end;
        t.completed = book.received;
        t.first_protocol_error = self.first_bad.take();
        t.frames = Some(FrameTotals {
            planned,
            expected: book.expected,
            received: book.received,
            in_flight_at_end,
            per_receiver: book.per_receiver,
            fanout_expected: book.fanout_expected,
            fanout_complete: book.fanout_complete,
            // A member's residency is its receiving socket's.
            // Slot by slot, as `per_receiver`.
            uptime_ns: (0..self.slots)
                .flat_map(|_| self.conns[..self.members].iter().map(|c| c.uptime))
                .collect(),
            span_ns: (0..self.slots)
                .flat_map(|_| first..first + n)
                .map(|j| stopped.saturating_sub(grid.joined_ns(j)))
                .collect(),
            reconnects: self.reconnects,
            outside,
            shift_ns,
            join_failures: self.join_failures,
            first_join_error: self.first_join_error.take(),
            slow: SlowTotals {
                connections: self.conns[..self.members].iter().filter(|c| c.slow).count() as u64,
                members: book.slow.receivers,
                expected: book.slow.expected,
                received: book.slow.n.received,
                dropped: book.slow.n.lost,
                unread: (book.slow.expected - book.slow.n.received)
                    .saturating_sub(book.slow.n.lost),
                late: book.slow.n.late,
                duplicates: book.slow.n.duplicates,
                disconnects: self.slow_disconnects,
            },
        });
    }
}
