//! Connection lifecycle of the frames worker: opening (a connected UDP socket at once,
//! a TCP connect through the ring; under `--connect-rate` each at its join), going down,
//! closing, the reopen watch list and its backoff, and shutting the sockets down for
//! the quiesce; and which member a socket serves.

use super::{FrameWorker, tls};
use crate::clock::Nanos;
use crate::engine::conn_table::REGISTERED;
use crate::engine::ring::on_target;
use crate::engine::socket;
use crate::engine::token::{Op, next_generation};
use crate::proto::frame_proto::JoinError;
use io_uring::{opcode, types};

/// Delay before reopening a connection the target closed, when `--no-reconnect` is
/// not given and no backoff applies (the backoff's first step is used otherwise).
const REOPEN_NS: u64 = 100_000_000;

impl FrameWorker<'_> {
    /// Opens connection `c`: a connected UDP socket at once, or a TCP connect through
    /// the ring.
    pub(super) fn open(&mut self, c: u32) {
        self.drop_tail(c);
        let conn = &mut self.conns[c as usize];
        conn.generation = next_generation(conn.generation);
        conn.sending = false;
        conn.ctl_sending = false;
        debug_assert_eq!(conn.pend, 0, "counted as not sent when it went down");
        conn.pend = 0;
        conn.open_t = self.clock.ticks();
        if let Some(ctl) = self.ctl.get_mut(c as usize) {
            // Reopened only once its operations completed: nothing of these is in
            // the kernel.
            ctl.busy.clear();
            ctl.next.clear();
            debug_assert_eq!(ctl.next_frames, 0, "counted as not sent when it went down");
            (ctl.busy_frames, ctl.next_frames) = (0, 0);
        }
        self.codecs[c as usize].reset();
        if let Some(s) = self.sessions.get_mut(c as usize) {
            *s = None; // its operations completed: nothing of it is in the kernel
        }
        if self.udp {
            match crate::engine::udp::udp_socket(self.plan, None) {
                Ok((fd, _)) => {
                    self.conns[c as usize].fd = fd;
                    self.connected(c);
                }
                Err(e) => self.connect_failed(c, e.raw_os_error().unwrap_or(libc::EIO)),
            }
            return;
        }
        // `--source-ip`: the connections take the sources in turn (the kernel picks
        // each port).
        let sources = &self.plan.sources;
        let source = (!sources.is_empty())
            .then(|| sources[(self.plan.conn_offset + self.member(c) as usize) % sources.len()]);
        let fd = match socket::tcp_socket(&self.plan.target, source, None, false, &self.sockopts) {
            Ok(fd) => fd,
            Err(e) => return self.connect_failed(c, e.raw_os_error().unwrap_or(libc::EIO)),
        };
        // Into the ring's file table, the descriptor closed at once.
        let fd = if self.fixed_files
            && self
                .core
                .ring
                .register_files_update(c, &[fd])
                .is_ok_and(|n| n == 1)
        {
            socket::close_descriptor(fd);
            REGISTERED
        } else {
            fd
        };
        let conn = &mut self.conns[c as usize];
        conn.fd = fd;
        conn.connecting = true;
        self.connecting += 1;
        let entry = on_target!(self.target(c), |t| opcode::Connect::new(
            t,
            self.addr.as_ptr().cast(),
            self.addr.len()
        )
        .build())
        .user_data(self.token(c, Op::Connect));
        // SAFETY: the connect reads `self.addr`, boxed and owned by the worker (see
        // `push`).
        unsafe { self.push(c, &entry) };
    }

    pub(super) fn connect_failed(&mut self, c: u32, errno: i32) {
        self.first_errno.get_or_insert(errno);
        self.out.counters.connect_failed(errno);
        self.close_socket(c);
        let delay = self.reopen_delay(c);
        self.conns[c as usize].reopen_at = self.clock.now_ns().saturating_add(delay);
        self.watch(c);
    }

    /// Puts connection `c` (down) on the reopen watch list, at most once.
    pub(super) fn watch(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        if !conn.watched {
            conn.watched = true;
            let queued = self.reopen_q.push(c);
            debug_assert!(queued, "each connection is queued at most once");
        }
    }

    /// How long connection `c` waits before it opens again (backoff with jitter).
    pub(super) fn reopen_delay(&mut self, c: u32) -> u64 {
        let conn = &mut self.conns[c as usize];
        let attempt = conn.attempts;
        conn.attempts = conn.attempts.saturating_add(1);
        match &self.plan.backoff {
            Some(b) => b.delay_ns(attempt, self.rng.f64()),
            None => u64::MAX,
        }
        .max(if attempt == 0 { 0 } else { REOPEN_NS })
    }

    /// Connection `c`'s socket is connected: it joins its room (`--frame-proto`), or
    /// is up at once (blaster frames: the sink learns the room from the first frame).
    pub(super) fn connected(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        debug_assert!(!conn.up);
        conn.connecting = false;
        if conn.was_up {
            self.reconnects += 1;
            self.out.counters.reconnects += 1;
        }
        conn.was_up = true;
        self.out.counters.connections_opened += 1;
        if self.plan.tls.is_some() && !tls::upgrades_after_greeting(self.fp.spec.kind) {
            // The handshake first; the join (or, blaster frames, being up) after it.
            conn.joining = true;
            self.joining += 1;
            self.tls_start(c);
        } else if self.joins {
            conn.joining = true;
            self.joining += 1;
            self.set_join_rooms(c);
            let ctl = &mut self.ctl[c as usize];
            self.codecs[c as usize].join_start(&self.join_rooms, &mut ctl.next);
            self.flush_ctl(c);
        } else {
            self.joined(c, self.clock.ticks());
        }
        if self.conns[c as usize].fd != -1 {
            self.arm_recv(c);
        }
    }

    /// Closes connection `c`'s socket, waking what is pending on it: a descriptor at
    /// once; a file-table slot through the ring (a shutdown, then the close that frees
    /// the slot, both counted in `ops` so the connection reopens only after them).
    pub(super) fn close_socket(&mut self, c: u32) {
        match self.conns[c as usize].fd {
            -1 => {}
            REGISTERED => {
                let token = self.token(c, Op::Close);
                let shut = opcode::Shutdown::new(types::Fixed(c), libc::SHUT_RDWR)
                    .build()
                    .flags(io_uring::squeue::Flags::IO_HARDLINK)
                    .user_data(token);
                let close = opcode::Close::new(types::Fixed(c)).build().user_data(token);
                // SAFETY: a shutdown and a close of a file-table slot point into no
                // memory.
                unsafe {
                    self.push(c, &shut);
                    self.push(c, &close);
                }
            }
            fd => socket::close(fd),
        }
        self.conns[c as usize].fd = -1;
    }

    /// Connection `c` went down (the target closed or reset it, or sent what is not a
    /// frame): counted, closed, reopened after the backoff.
    pub(super) fn disconnect(&mut self, c: u32, now: Nanos) {
        let conn = &mut self.conns[c as usize];
        if conn.joining {
            let e = JoinError::closed(self.fp.spec.kind);
            return self.join_failed(c, Some(e.kind), e.to_string(), now);
        }
        if !conn.up {
            return;
        }
        self.went_down(c, now);
        self.out.counters.frames.disconnects += 1;
        self.slow_disconnects += u64::from(self.conns[c as usize].slow);
        self.out.counters.closed_by_target += 1;
        self.drop_conn(c, now);
    }

    /// Connection `c`, up, is down from `now`: its uptime ends there.
    /// Its frames due and not sent yet never will be (its next socket starts from the
    /// frames due then), nor those waiting for a gRPC window: counted as not sent, as
    /// those due while it is down are.
    fn went_down(&mut self, c: u32, now: Nanos) {
        let conn = &mut self.conns[c as usize];
        conn.up = false;
        conn.uptime += now.saturating_sub(conn.up_since);
        self.out.counters.frames.not_sent += u64::from(conn.pend) * self.slots as u64;
        conn.pend = 0;
        self.out.counters.frames.not_sent += self.codecs[c as usize].drop_backlog();
        if let Some(ctl) = self.ctl.get_mut(c as usize) {
            // gRPC frames let go by a window but not yet handed to the kernel.
            self.out.counters.frames.not_sent += u64::from(ctl.next_frames);
            ctl.next_frames = 0;
        }
        self.down_count += 1;
    }

    /// `--conn-max-age` / `--conn-max-requests`: connection `c`, up, whose last send
    /// completed, retires when it is its age old or sent its frames: it closes and a
    /// fresh one opens and joins at the next scan (no backoff), counted as recycled
    /// and reconnected, not as a disconnect. What its members miss meanwhile is what
    /// a client that reconnects misses: frames not sent, relays to it lost. True
    /// when it closed.
    pub(super) fn retire_if_due(&mut self, c: u32, now: Nanos) -> bool {
        let Some(cl) = self.plan.conn_life else {
            return false;
        };
        let conn = &mut self.conns[c as usize];
        if !conn.up || (conn.frames_on < cl.max_requests && now < conn.retire_ns) {
            return false;
        }
        self.went_down(c, now);
        let conn = &mut self.conns[c as usize];
        conn.attempts = 0;
        self.out.counters.connections_recycled += 1;
        self.close_reopening_at(c, now);
        // `--frame-proto resp`: the member's subscriber, up, goes with its publisher
        // (the client reconnects as a whole); both open again at the next scan, and
        // the subscriber subscribes again; each socket counts (as reconnects do). (A subscriber
        // still joining or down is left to its own course.)
        if self.pairs && c as usize >= self.members {
            let sub = c - self.members as u32;
            if self.conns[sub as usize].up {
                self.went_down(sub, now);
                self.conns[sub as usize].attempts = 0;
                self.out.counters.connections_recycled += 1;
                self.close_reopening_at(sub, now);
            }
        }
        true
    }

    /// Closes connection `c`'s socket and schedules its reopen after the backoff.
    pub(super) fn drop_conn(&mut self, c: u32, now: Nanos) {
        let delay = self.reopen_delay(c);
        self.close_reopening_at(c, now.saturating_add(delay));
    }

    /// Closes connection `c`'s socket (its operations in the ring complete and are
    /// ignored: a new generation); it reopens at `at`.
    fn close_reopening_at(&mut self, c: u32, at: Nanos) {
        let conn = &mut self.conns[c as usize];
        conn.generation = next_generation(conn.generation);
        self.close_socket(c);
        self.conns[c as usize].reopen_at = at;
        self.watch(c);
    }

    /// `--connect-rate`: opens the connections whose join has come; returns when the
    /// next one joins (`None`: all have).
    pub(super) fn open_joins(&mut self, now: Nanos) -> Option<Nanos> {
        let first = self.plan.conn_offset as u64;
        while self.next_join < self.members {
            let at = self.fp.grid.join_ns(first + self.next_join as u64);
            if at > now {
                return Some(at);
            }
            let c = self.next_join as u32;
            self.next_join += 1;
            self.conns[c as usize].reopen_at = 0;
            self.open(c);
        }
        None
    }

    /// Reopens connections whose backoff is over: only those on the watch list
    /// (down, waiting for their reopen), O(watched) not O(connections). A connection
    /// whose operations are still in the ring, or whose reopen is not yet due, goes
    /// back on the list.
    pub(super) fn scan_reopens(&mut self, now: Nanos) {
        for _ in 0..self.reopen_q.len() {
            let Some(c) = self.reopen_q.pop() else { break };
            #[cfg(test)]
            {
                self.scan_visits += 1;
            }
            let conn = &mut self.conns[c as usize];
            conn.watched = false;
            if conn.up || conn.connecting {
                continue;
            }
            if conn.ops == 0 && conn.reopen_at <= now {
                self.open(c);
            } else if conn.reopen_at != Nanos::MAX {
                self.watch(c);
            }
        }
    }

    /// The connections up now (the per-interval `connections_active`).
    pub(super) fn set_active(&mut self) {
        // With socket pairs: sockets up / 2 (a member with one socket down counts half).
        let sockets = self.conns.len() / self.members.max(1);
        self.out.counters.frames.connections_active =
            ((self.conns.len() - self.down_count) / sockets.max(1)) as u64;
    }

    /// Shuts every socket down, so that the receives still in the ring complete (the
    /// quiesce then waits for them, [`crate::engine::loop_core::LoopCore::quiesce`]).
    pub(super) fn shut_down_all(&mut self) {
        for c in 0..self.conns.len() as u32 {
            match self.conns[c as usize].fd {
                -1 => {}
                REGISTERED => {
                    let shut = opcode::Shutdown::new(types::Fixed(c), libc::SHUT_RDWR)
                        .build()
                        .user_data(self.token(c, Op::Close));
                    // SAFETY: a shutdown of a file-table slot points into no memory; it
                    // wakes pending receives so they complete.
                    unsafe { self.push(c, &shut) };
                }
                // SAFETY: a plain syscall on a descriptor this worker owns; it wakes
                // pending receives so they complete.
                fd => unsafe {
                    libc::shutdown(fd, libc::SHUT_RDWR);
                },
            }
        }
    }

    /// Once the ring is quiet: closes the descriptors.
    pub(super) fn close_all(&mut self) {
        for conn in self.conns.iter_mut() {
            if conn.fd >= 0 {
                socket::close(conn.fd);
            }
            // A file-table slot's socket closes with the ring.
            conn.fd = -1;
        }
    }

    /// The connection (member) socket `i` serves.
    #[inline]
    pub(super) fn member(&self, i: u32) -> u32 {
        if self.pairs {
            i % self.members as u32
        } else {
            i
        }
    }

    /// The socket that sends member `c`'s frames.
    #[inline]
    pub(super) fn sender(&self, c: u32) -> u32 {
        if self.pairs {
            c + self.members as u32
        } else {
            c
        }
    }

    /// Whether member `c`'s sockets are all up.
    pub(super) fn member_up(&self, c: u32) -> bool {
        self.conns[c as usize].up && self.conns[self.sender(c) as usize].up
    }
}
