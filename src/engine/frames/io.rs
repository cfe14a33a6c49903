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
    /// its completion is reaped: `send_buf`, `recv_buf`, the send slots, the provided
    /// buffers and `addr` are allocated once,
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
        let cqes = &mut self.cqes;
        let mut i = 0;
        let n = self.core.reap_each(cqes.len(), |data, res, flags| {
            cqes[i] = (data, res, flags);
            i += 1;
        });
        let now_t = self.clock.ticks();
        let now = self.clock.ns(now_t);
        // The wall clock at `now_t`: a stamp's age is measured from both readings.
        let wall = if self.stamped() {
            crate::wallclock::now_unix_ns()
        } else {
            0
        };
        for i in 0..n {
            let (data, res, flags) = self.cqes[i];
            let Some(t) = Token::decode(data) else {
                continue;
            };
            let conn = &mut self.conns[t.conn as usize];
            // A multishot receive is in the ring until its last completion.
            if !io_uring::cqueue::more(flags) {
                conn.ops -= 1;
            }
            if t.generation != conn.generation {
                // An operation of a connection since closed: what it held goes back.
                if let (Some(bid), Some(br)) = (
                    io_uring::cqueue::buffer_select(flags),
                    self.buf_ring.as_mut(),
                ) {
                    br.recycle(bid);
                }
                if t.op == Op::Send {
                    self.release_send_slot(t.conn);
                }
                continue;
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
                Op::Recv if self.pooled => self.on_pooled_recv(t.conn, res, flags, now_t, wall),
                Op::Recv => {
                    let at = self.arrival(t.conn, res, now_t, now, wall);
                    self.on_recv(t.conn, res, at)
                }
                Op::Close => {}
            }
        }
        if n > 0
            && let Some(br) = &self.buf_ring
        {
            br.publish();
        }
        n
    }

    /// Frames are timed by the kernel's receive timestamp.
    pub(super) fn stamped(&self) -> bool {
        self.rx.is_some() || self.stamp_hdr.is_some()
    }
}
