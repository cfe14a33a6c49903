//! Frames over TLS (`--workload frames --tls`): wss, MQTT over TLS, NATS with TLS,
//! RESP through a TLS front, blaster frames to `blaster sink --tls`.
//!
//! The frames logic above stays plaintext: a socket's join and control bytes and its
//! frames are sealed here into the socket's `tls_out` region and io_uring sends the
//! ciphertext; what arrives lands in its `tls_in` region, whole records are opened in
//! place and their plaintext is copied into the socket's plaintext receive region,
//! where the join and the frame decoder read it as on a plain connection. One
//! plaintext send is in flight per socket (as without TLS); it completes when the
//! ciphertext it became has left, so a frame still counts as sent once on the wire.
//!
//! The handshake runs after the TCP connect and before the join (NATS: after the
//! server's plaintext `INFO`, as its protocol upgrades), so the join time includes it
//! and the handshake's own time is recorded (`tls_handshake`). No plaintext byte ever
//! leaves a `--tls` socket: join bytes wait until the session is open. Nothing here
//! allocates per frame: the session is created at connect.

use super::FrameWorker;
use crate::clock::{Nanos, Ticks};
use crate::engine::ring::on_target;
use crate::limits::TLS_RECV_BUFFER_BYTES;
use crate::proto::frame_proto::FrameProtoKind;
use crate::transport::tls::{TlsFailure, established, handshake_step};
use crate::transport::tls_record::{Content, RecordError, RecordLayer};
use io_uring::opcode;
use rustls::client::UnbufferedClientConnection;

/// Plaintext sealed in one piece at most (a TLS record's).
pub(super) const PLAIN_CHUNK: usize = 1 << 14;

/// Where a session is. (Boxed in its [`Session`]; a session spends its life in the
/// largest variant.)
#[allow(clippy::large_enum_variant)]
enum Phase {
    Handshake(UnbufferedClientConnection),
    Open(RecordLayer),
    Gone,
}

/// One socket's TLS state.
pub(super) struct Session {
    phase: Phase,
    /// When the TCP connect completed (or NATS's `INFO` arrived): the handshake's start.
    started: Ticks,
    /// Ciphertext waiting in the socket's `tls_in` region (an unfinished record).
    in_fill: usize,
    /// Ciphertext in `tls_out`: `[out_off, out_end)` not yet sent; a send in the ring
    /// (`out_busy`) reads from `out_off`, new ciphertext goes after `out_end`.
    out_off: usize,
    out_end: usize,
    out_busy: bool,
    /// The plaintext send riding on the ciphertext: done (with `.1` bytes) once
    /// `out_off` reaches `.0`.
    plain: Option<(usize, u32)>,
    /// Application data arrived (a fatal alert before it is a refused handshake).
    data_seen: bool,
}

/// The largest plaintext whose sealed records fit `space` bytes (a key update's record
/// included).
pub(super) fn plain_fitting(space: usize) -> usize {
    let room = space.saturating_sub(crate::limits::TLS_RECORD_OVERHEAD_BYTES);
    let mut n = room;
    while n > 0 && RecordLayer::sealed_len(n) > room {
        let records = n.div_ceil(PLAIN_CHUNK);
        n = n.saturating_sub((RecordLayer::sealed_len(n) - room).max(records));
    }
    n
}

/// Whether the protocol's server speaks first in plaintext and the client upgrades
/// after it (NATS: `INFO`, then the TLS handshake, then `CONNECT`).
pub(super) fn upgrades_after_greeting(kind: FrameProtoKind) -> bool {
    kind == FrameProtoKind::Nats
}

impl FrameWorker<'_> {
    /// Whether socket `c` speaks TLS now (its session was started).
    #[inline]
    pub(super) fn tls_on(&self, c: u32) -> bool {
        self.sessions.get(c as usize).is_some_and(Option::is_some)
    }

    /// Whether socket `c` must hold its plaintext (`--tls` and no open session yet).
    pub(super) fn tls_holding(&self, c: u32) -> bool {
        match self.sessions.get(c as usize) {
            None => false,
            Some(None) => true,
            Some(Some(s)) => !matches!(s.phase, Phase::Open(_)),
        }
    }

    /// Starts socket `c`'s handshake: its ClientHello goes out; the caller arms the
    /// receive (into `tls_in` from now on).
    pub(super) fn tls_start(&mut self, c: u32) {
        let tls = self.plan.tls.as_ref().expect("sessions only with --tls");
        let resume = tls.resume_ratio > 0.0 && self.rng.f64() < tls.resume_ratio;
        match tls.session(resume) {
            Ok(conn) => {
                self.sessions[c as usize] = Some(Box::new(Session {
                    phase: Phase::Handshake(conn),
                    started: self.clock.ticks(),
                    in_fill: 0,
                    out_off: 0,
                    out_end: 0,
                    out_busy: false,
                    plain: None,
                    data_seen: false,
                }));
                self.tls_handshake(c, self.clock.now_ns());
            }
            Err(e) => self.tls_failed(c, TlsFailure::of(&e), &e.to_string()),
        }
    }

    /// Arms socket `c`'s receive into its `tls_in` region, after the ciphertext held.
    pub(super) fn tls_arm_recv(&mut self, c: u32) {
        let fill = self.sessions[c as usize].as_ref().map_or(0, |s| s.in_fill);
        let base = c as usize * TLS_RECV_BUFFER_BYTES;
        let buf = self
            .tls_in
            .kernel_ptr(base + fill..base + TLS_RECV_BUFFER_BYTES);
        let len = (TLS_RECV_BUFFER_BYTES - fill) as u32;
        let entry = on_target!(self.target(c), |t| opcode::Recv::new(t, buf, len).build())
            .user_data(self.token(c, super::Op::Recv));
        // SAFETY: the receive writes into socket `c`'s region of `tls_in` (bounds
        // checked by `kernel_ptr`), which nothing else writes while it is armed
        // (records are opened only after its completion); see `push`.
        unsafe { self.push(c, &entry) };
    }

    /// Sends socket `c`'s unsent ciphertext unless a send of it is in the ring.
    fn tls_flush_out(&mut self, c: u32) {
        let Some(s) = self.sessions[c as usize].as_mut() else {
            return;
        };
        if s.out_busy || s.out_off == s.out_end {
            return;
        }
        s.out_busy = true;
        let base = c as usize * self.tls_out_len;
        let buf = self.tls_out.kernel_ptr(base + s.out_off..base + s.out_end);
        let len = (s.out_end - s.out_off) as u32;
        let entry = on_target!(self.target(c), |t| opcode::Send::new(t, buf, len).build())
            .user_data(self.token(c, super::Op::Send));
        // SAFETY: the send reads `[out_off, out_end)` of socket `c`'s `tls_out`
        // region; new ciphertext is only written after `out_end`, and the range is
        // reused only once this send completed (`tls_on_send`); see `push`.
        unsafe { self.push(c, &entry) };
    }

    /// Seals `len` bytes of plaintext of socket `c` (its control bytes, or its frames
    /// region from `off`) and sends them; the plaintext send completes, with the bytes
    /// that fitted, once their ciphertext has left.
    pub(super) fn tls_send_plain(&mut self, c: u32, ctl: bool, off: usize, len: usize) {
        let out_len = self.tls_out_len;
        let Some(s) = self.sessions[c as usize].as_mut() else {
            return;
        };
        let Phase::Open(records) = &mut s.phase else {
            return;
        };
        if !s.out_busy && s.out_off == s.out_end {
            (s.out_off, s.out_end) = (0, 0);
        }
        let n = len.min(plain_fitting(out_len - s.out_end));
        let plain = if ctl {
            &self.ctl[c as usize].busy[..n]
        } else {
            let base = c as usize * self.send_stride;
            self.send_buf.region(base + off..base + off + n)
        };
        let obase = c as usize * out_len;
        let out = self.tls_out.region_mut(obase + s.out_end..obase + out_len);
        match records.seal(plain, out) {
            Some(w) if n > 0 => {
                s.out_end += w;
                s.plain = Some((s.out_end, n as u32));
                self.tls_flush_out(c);
            }
            _ => self.tls_broken(c, "the TLS send buffer is full", self.clock.now_ns()),
        }
    }

    /// A ciphertext send of socket `c` completed with `res`: the rest goes, and the
    /// plaintext send it carried completes once all of it has left.
    pub(super) fn tls_on_send(&mut self, c: u32, res: i32, now: Nanos) {
        let Some(s) = self.sessions[c as usize].as_mut() else {
            return;
        };
        s.out_busy = false;
        if res < 0 {
            s.plain = None;
            return self.on_send(c, res, now);
        }
        s.out_off += res as usize;
        let done = match s.plain {
            Some((at, n)) if s.out_off >= at => {
                s.plain = None;
                Some(n)
            }
            _ => None,
        };
        self.tls_flush_out(c);
        if let Some(n) = done {
            self.on_send(c, n as i32, now);
        }
    }

    /// `res` bytes of ciphertext arrived for socket `c`: the handshake goes on, or
    /// whole records are opened and their plaintext framed; the receive is armed again
    /// while the socket stays open.
    pub(super) fn tls_on_recv(&mut self, c: u32, res: usize, now: Nanos) {
        let generation = self.conns[c as usize].generation;
        if let Some(s) = self.sessions[c as usize].as_mut() {
            s.in_fill += res;
        }
        let open = self.tls_handshake(c, now) && self.tls_records(c, now);
        if open && self.conns[c as usize].generation == generation {
            self.tls_arm_recv(c);
        }
    }

    /// One step of socket `c`'s handshake, if it is shaking hands; when it completes,
    /// the session becomes a record layer and the join starts. Returns false when the
    /// socket was closed.
    fn tls_handshake(&mut self, c: u32, now: Nanos) -> bool {
        let out_len = self.tls_out_len;
        let Some(s) = self.sessions[c as usize].as_mut() else {
            return false;
        };
        let Phase::Handshake(conn) = &mut s.phase else {
            return true;
        };
        if !s.out_busy && s.out_off == s.out_end {
            (s.out_off, s.out_end) = (0, 0);
        }
        let base = c as usize * TLS_RECV_BUFFER_BYTES;
        let incoming = self.tls_in.region_mut(base..base + TLS_RECV_BUFFER_BYTES);
        let obase = c as usize * out_len;
        let out = self.tls_out.region_mut(obase..obase + out_len);
        let step = handshake_step(conn, incoming, &mut s.in_fill, out, &mut s.out_end);
        let full = s.in_fill == TLS_RECV_BUFFER_BYTES;
        match step {
            Err((kind, why)) => {
                self.tls_failed(c, kind, &why);
                false
            }
            Ok(false) if full => {
                let why = "a handshake message larger than the receive buffer";
                self.tls_failed(c, TlsFailure::Other, why);
                false
            }
            Ok(false) => {
                self.tls_flush_out(c);
                true
            }
            Ok(true) => {
                let Phase::Handshake(conn) = std::mem::replace(&mut s.phase, Phase::Gone) else {
                    unreachable!("checked above");
                };
                let resumed = conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                match established(conn) {
                    Ok(records) => s.phase = Phase::Open(records),
                    Err(why) => {
                        self.tls_failed(c, TlsFailure::Other, &why);
                        return false;
                    }
                }
                let took = self.clock.between_ns(s.started, self.clock.ticks());
                self.out.hist.tls_handshake.saturating_record(took.max(1));
                let t = &mut self.out.counters.tls;
                if resumed {
                    t.resumed += 1;
                } else {
                    t.full += 1;
                }
                self.tls_flush_out(c); // the client's Finished
                self.session_open(c, now);
                self.conns[c as usize].fd != -1
            }
        }
    }

    /// Opens the whole records of socket `c`'s ciphertext and hands their plaintext to
    /// the join and the frame decoder; an unfinished record moves to the front.
    /// Returns false when the socket was closed.
    fn tls_records(&mut self, c: u32, now: Nanos) -> bool {
        let base = c as usize * TLS_RECV_BUFFER_BYTES;
        let generation = self.conns[c as usize].generation;
        let mut off = 0;
        loop {
            let Some(s) = self.sessions[c as usize].as_mut() else {
                return false;
            };
            let Phase::Open(records) = &mut s.phase else {
                return true; // still shaking hands
            };
            let fill = s.in_fill;
            let region = self.tls_in.region_mut(base..base + TLS_RECV_BUFFER_BYTES);
            match records.open(&mut region[off..fill]) {
                Ok(None) => {
                    region.copy_within(off..fill, 0);
                    s.in_fill = fill - off;
                    return true;
                }
                Ok(Some((used, Content::Data(r)))) => {
                    s.data_seen = true;
                    let plain = off + r.start..off + r.end;
                    off += used;
                    if !self.tls_plaintext(c, plain, now)
                        || self.conns[c as usize].generation != generation
                    {
                        return false;
                    }
                }
                Ok(Some((_, Content::Closed))) => {
                    self.disconnect(c, now);
                    return false;
                }
                Ok(Some((used, Content::Control))) => off += used,
                Err(e) => {
                    if let RecordError::Alert(d) = e
                        && !s.data_seen
                        && self.conns[c as usize].joining
                    {
                        // A TLS 1.3 server refuses the client's certificate (or its
                        // absence) only after the client's side of the handshake.
                        let kind = TlsFailure::of(&rustls::Error::AlertReceived(d.into()));
                        self.tls_failed(c, kind, &e.to_string());
                    } else {
                        self.tls_broken(c, &e.to_string(), now);
                    }
                    return false;
                }
            }
        }
    }

    /// Copies the plaintext at `tls_in[range]` of socket `c` into its receive region,
    /// a region's room at a time, and frames it. Returns false when the socket was
    /// closed.
    fn tls_plaintext(&mut self, c: u32, range: std::ops::Range<usize>, now: Nanos) -> bool {
        let base = c as usize * TLS_RECV_BUFFER_BYTES;
        let rbase = c as usize * self.recv_stride;
        let mut at = range.start;
        while at < range.end {
            let keep = self.conns[c as usize].recv_keep as usize;
            let n = (self.recv_stride - keep).min(range.end - at);
            self.recv_buf
                .region_mut(rbase + keep..rbase + keep + n)
                .copy_from_slice(self.tls_in.region(base + at..base + at + n));
            at += n;
            if !self.plain_received(c, n, now) {
                return false;
            }
        }
        true
    }

    /// A handshake of socket `c` failed (`kind`, rustls's `why`): counted by kind,
    /// remembered for the run's one line, the socket reopened after the backoff.
    #[cold]
    pub(super) fn tls_failed(&mut self, c: u32, kind: TlsFailure, why: &str) {
        if let Some(tls) = &self.plan.tls {
            tls.note_failure(kind, why);
        }
        let ctr = &mut self.out.counters;
        ctr.tls.failed[kind as usize] += 1;
        ctr.connections_failed += 1;
        let conn = &mut self.conns[c as usize];
        if conn.joining {
            conn.joining = false;
            self.joining -= 1;
        }
        self.drop_conn(c, self.clock.now_ns());
    }

    /// An open session that cannot go on (a bad record, a fatal alert): the socket is
    /// out of step, as with bytes that are not the protocol; it reopens.
    #[cold]
    fn tls_broken(&mut self, c: u32, why: &str, now: Nanos) {
        self.first_bad.get_or_insert_with(|| format!("TLS: {why}"));
        self.out.counters.frames.foreign += 1;
        self.disconnect(c, now);
    }

    /// Socket `c`'s handshakes still unfinished at the end of the connect phase fail
    /// as handshake timeouts (their join has not begun). Returns whether it was one.
    pub(super) fn tls_timed_out(&mut self, c: u32) -> bool {
        let shaking = matches!(
            self.sessions.get(c as usize),
            Some(Some(s)) if matches!(s.phase, Phase::Handshake(_))
        );
        if shaking {
            let why = format!(
                "no TLS handshake within {}",
                crate::units::fmt_ns(self.plan.timeout_ns.max(1_000_000_000))
            );
            self.tls_failed(c, TlsFailure::HandshakeTimeout, &why);
        }
        shaking
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plaintext_that_fits_seals_within_the_space() {
        for space in [0, 1, 63, 64, 65, 100, 2048, 16_448, 16_500, 40_000, 300_000] {
            let n = plain_fitting(space);
            if n > 0 {
                assert!(
                    RecordLayer::sealed_len(n) + crate::limits::TLS_RECORD_OVERHEAD_BYTES <= space,
                    "{space}: {n}"
                );
            }
            // Not much less than the space allows: one record's overhead per 16 KiB.
            let slack = crate::limits::TLS_RECORD_OVERHEAD_BYTES
                + (space / PLAIN_CHUNK + 1) * 29
                + space / PLAIN_CHUNK;
            assert!(n + slack >= space, "{space}: {n}");
        }
    }

    /// Frames over TLS allocate nothing per frame once the session is open: a
    /// connection in a room of one, whose echo server (rustls, a thread) sends every
    /// frame back, 2,000 frames sealed, sent, received and opened (TLS 1.3 and 1.2).
    #[test]
    fn frames_over_tls_allocate_nothing_after_the_handshake() {
        use crate::engine::driver::tests::allocations_here;
        use crate::engine::worker_plan::Transport;
        use crate::transport::tls::{TlsClient, TlsVersion, Trust};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = crate::transport::tls::self_signed_localhost_in(dir.path());
        for version in [TlsVersion::V13, TlsVersion::V12] {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut p = super::super::tests::worker_plan(1);
            p.transport = Transport::Tcp;
            p.duration_ns = 1_000_000_000_000; // every frame sent here is planned
            p.target = listener.local_addr().unwrap();
            p.targets = vec![p.target].into();
            let fp = p.frames.as_mut().unwrap();
            fp.grid.room_size = 1;
            fp.echo = true;
            let client = TlsClient::new("localhost", Trust::Insecure, &[], Some(version), 0.0);
            p.tls = Some(Arc::new(client.unwrap()));
            let server = crate::transport::tls::echo_server(listener, &cert, &key);
            let (snap_tx, _snap_rx) = crossbeam_channel::unbounded();
            let (_recycle_tx, recycle_rx) = crossbeam_channel::unbounded();
            let mut w = FrameWorker::new(&p, snap_tx, recycle_rx).expect("io_uring available");
            w.open(0);
            let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !w.conns[0].up && std::time::Instant::now() < end {
                w.ring.submit_and_wait_ns(10_000_000).unwrap();
                w.reap();
            }
            assert!(w.conns[0].up, "{version:?}: handshake");
            let mut k = 0;
            let mut frames = |w: &mut FrameWorker<'_>, n: u64| {
                let until = w.out.counters.frames.received + n;
                while w.out.counters.frames.received < until && std::time::Instant::now() < end {
                    if !w.conns[0].sending {
                        let conn = &mut w.conns[0];
                        (conn.pend_k, conn.pend) = (k, 1);
                        k += 1;
                        w.send_pending(0);
                    }
                    w.ring.submit_and_wait_ns(10_000_000).unwrap();
                    w.reap();
                }
                assert!(
                    w.out.counters.frames.received >= until,
                    "{version:?}: echoes"
                );
            };
            frames(&mut w, 50);
            let before = allocations_here();
            frames(&mut w, 2_000);
            let allocated = allocations_here() - before;
            assert_eq!(w.out.counters.tls.full, 1, "{version:?}");
            let f = &w.out.counters.frames;
            assert!(f.received >= 2_000 && f.foreign == 0, "{version:?}: {f:?}");
            assert_eq!(allocated, 0, "{version:?}: allocations in 2,000 frames");
            w.quiesce();
            drop(w);
            server.join().unwrap();
        }
    }

    #[test]
    fn only_nats_upgrades_after_the_servers_greeting() {
        assert!(upgrades_after_greeting(FrameProtoKind::Nats));
        for k in [
            FrameProtoKind::Mqtt,
            FrameProtoKind::Ws,
            FrameProtoKind::Resp,
            FrameProtoKind::Blaster,
        ] {
            assert!(!upgrades_after_greeting(k), "{k:?}");
        }
    }
}
