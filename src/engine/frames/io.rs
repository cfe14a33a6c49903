//! I/O of the frames worker: entries pushed into the ring for a connection (each
//! counted, in the ring and on its connection), their tokens and the socket they point
//! at, and the completions reaped and handed out by operation.

use super::FrameWorker;
use crate::engine::conn_table::REGISTERED;
use crate::engine::ring::Target;
use crate::engine::token::{Op, Token};

impl FrameWorker<'_> {
    /// Queues `entry` for connection `c` through the worker's
    /// [`LoopCore::push`](crate::engine::loop_core::LoopCore::push), and counts it on
    /// the connection.
    ///
    /// # Safety
    /// Every buffer and address the entry points to must stay valid and unmoved until
    /// its completion is reaped: `send_buf`, `recv_buf` and `addr` are allocated once,
    /// never reallocated, and leaked if the worker is dropped with operations in the
    /// ring (`Drop for FrameWorker`); a connection's regions are reused only once its
    /// operations have completed (`Conn::ops`).
    pub(super) unsafe fn push(&mut self, c: u32, entry: &io_uring::squeue::Entry) {
        // SAFETY: forwarded to this function's contract.
        if unsafe { self.core.push(std::slice::from_ref(entry)) } {
            self.conns[c as usize].ops += 1;
        }
    }

    pub(super) fn token(&self, c: u32, op: Op) -> u64 {
        Token {
            conn: c,
            op,
            generation: self.conns[c as usize].generation,
        }
        .encode()
    }

    /// Where operations on connection `c`'s socket point.
    #[inline]
    pub(super) fn target(&self, c: u32) -> Target {
        match self.conns[c as usize].fd {
            REGISTERED => Target::Fixed(c),
            fd => Target::Fd(fd),
        }
    }

    pub(super) fn reap(&mut self) -> usize {
        let n = self.core.reap_into(&mut self.cqes);
        let now_t = self.clock.ticks();
        let now = self.clock.ns(now_t);
        // The wall clock at `now_t`: a stamp's age is measured from both readings.
        let wall = self
            .rx
            .as_ref()
            .map_or(0, |_| crate::wallclock::now_unix_ns());
        for i in 0..n {
            let (data, res) = self.cqes[i];
            let Some(t) = Token::decode(data) else {
                continue;
            };
            let conn = &mut self.conns[t.conn as usize];
            conn.ops -= 1;
            if t.generation != conn.generation {
                continue; // an operation of a connection since closed
            }
            match t.op {
                Op::Connect => {
                    self.connecting -= 1;
                    if res < 0 {
                        self.conns[t.conn as usize].connecting = false;
                        self.connect_failed(t.conn, -res);
                    } else {
                        self.connected(t.conn);
                    }
                }
                Op::Send => {
                    if res > 0 {
                        self.out.counters.bytes_sent += res as u64;
                    }
                    if self.tls_on(t.conn) {
                        self.tls_on_send(t.conn, res, now);
                    } else {
                        self.on_send(t.conn, res, now);
                    }
                }
                Op::Recv => {
                    let at = self.arrival(t.conn, res, now_t, now, wall);
                    self.on_recv(t.conn, res, at)
                }
                Op::Close => {}
            }
        }
        n
    }
}
