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
//!
//! The session is the transport's ([`TlsSession`], the same the request/response
//! engine runs); what is here is this engine's: its regions, its sends (one ciphertext
//! send in flight, the plaintext send riding on it) and what a failure closes.

use super::FrameWorker;
use crate::clock::Nanos;
use crate::engine::ring::on_target;
use crate::limits::TLS_RECV_BUFFER_BYTES;
use crate::proto::frame_proto::FrameProtoKind;
use crate::transport::tls::TlsFailure;
use crate::transport::tls_record::RecordLayer;
use crate::transport::tls_session::{Record, Shake, TlsSession};
use io_uring::opcode;

/// Plaintext sealed in one piece at most (a TLS record's).
pub(super) use crate::transport::tls_record::PLAINTEXT_MAX as PLAIN_CHUNK;

/// One socket's TLS session, and its ciphertext going out.
pub(super) struct Session {
    tls: TlsSession,
    /// Ciphertext in `tls_out`: `[out_off, out_end)` not yet sent; a send in the ring
    /// (`out_busy`) reads from `out_off`, new ciphertext goes after `out_end`.
    out_off: usize,
    out_end: usize,
    out_busy: bool,
    /// The plaintext send riding on the ciphertext: done (with `.1` bytes) once
    /// `out_off` reaches `.0`.
    plain: Option<(usize, u32)>,
}

impl Session {
    /// Where new ciphertext goes: `out_end`, moved back to the start of the region
    /// when nothing is waiting or in flight.
    fn out_start(&mut self) {
        if !self.out_busy && self.out_off == self.out_end {
            (self.out_off, self.out_end) = (0, 0);
        }
    }
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
            Some(Some(s)) => !s.tls.is_open(),
        }
    }

    /// Starts socket `c`'s handshake: its ClientHello goes out; the caller arms the
    /// receive (into `tls_in` from now on).
    pub(super) fn tls_start(&mut self, c: u32) {
        let tls = self.plan.tls.as_ref().expect("sessions only with --tls");
        let resume = tls.resumes(|| self.rng.f64());
        match TlsSession::start(tls, resume, self.clock.ticks()) {
            Ok(tls) => {
                self.sessions[c as usize] = Some(Box::new(Session {
                    tls,
                    out_off: 0,
                    out_end: 0,
                    out_busy: false,
                    plain: None,
                }));
                self.tls_handshake(c, self.clock.now_ns());
            }
            Err((kind, why)) => self.tls_failed(c, kind, &why),
        }
    }

    /// Arms socket `c`'s receive into its `tls_in` region, after the ciphertext held.
    pub(super) fn tls_arm_recv(&mut self, c: u32) {
        let fill = self.sessions[c as usize]
            .as_mut()
            .map_or(0, |s| s.tls.arm_recv());
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
        let Some(s) = self.sessions[c as usize]
            .as_mut()
            .filter(|s| s.tls.is_open())
        else {
            return;
        };
        s.out_start();
        let n = len.min(RecordLayer::plain_fitting(out_len - s.out_end));
        let plain = if ctl {
            &self.ctl[c as usize].busy[..n]
        } else {
            let base = c as usize * self.send_stride;
            self.send_buf.region(base + off..base + off + n)
        };
        let obase = c as usize * out_len;
        let out = self.tls_out.region_mut(obase + s.out_end..obase + out_len);
        match s.tls.seal(plain, out) {
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
            let base = c as usize * TLS_RECV_BUFFER_BYTES;
            let region = self.tls_in.region_mut(base..base + TLS_RECV_BUFFER_BYTES);
            s.tls.received(region, res);
        }
        let open = self.tls_handshake(c, now) && self.tls_records(c, now);
        if open && self.conns[c as usize].generation == generation {
            self.tls_arm_recv(c);
        }
    }

    /// One step of socket `c`'s handshake, if it is shaking hands; when it completes,
    /// the join starts. Returns false when the socket was closed.
    fn tls_handshake(&mut self, c: u32, now: Nanos) -> bool {
        let out_len = self.tls_out_len;
        let Some(s) = self.sessions[c as usize].as_mut() else {
            return false;
        };
        if !s.tls.is_handshaking() {
            return true;
        }
        s.out_start();
        let base = c as usize * TLS_RECV_BUFFER_BYTES;
        let incoming = self.tls_in.region_mut(base..base + TLS_RECV_BUFFER_BYTES);
        let obase = c as usize * out_len;
        let out = self.tls_out.region_mut(obase..obase + out_len);
        match s.tls.handshake(incoming, out, &mut s.out_end) {
            Err((kind, why)) => {
                self.tls_failed(c, kind, &why);
                false
            }
            Ok(Shake::Waiting) => {
                self.tls_flush_out(c);
                true
            }
            Ok(Shake::Done { resumed }) => {
                let took = self.clock.between_ns(s.tls.started, self.clock.ticks());
                self.out.tls_opened(took.max(1), resumed);
                if self.fp.spec.kind == FrameProtoKind::Grpc && !s.tls.alpn_h2 {
                    self.tls_failed(
                        c,
                        TlsFailure::AlertNoApplicationProtocol,
                        "the server did not choose h2 over ALPN: it does not serve HTTP/2 over TLS here",
                    );
                    return false;
                }
                self.tls_flush_out(c); // the client's Finished
                self.session_open(c, now);
                self.conns[c as usize].fd != -1
            }
        }
    }

    /// Opens the whole records of socket `c`'s ciphertext and hands their plaintext to
    /// the join and the frame decoder. Returns false when the socket was closed.
    fn tls_records(&mut self, c: u32, now: Nanos) -> bool {
        let base = c as usize * TLS_RECV_BUFFER_BYTES;
        let generation = self.conns[c as usize].generation;
        let mut off = 0;
        loop {
            let Some(s) = self.sessions[c as usize].as_mut() else {
                return false;
            };
            let region = self.tls_in.region_mut(base..base + TLS_RECV_BUFFER_BYTES);
            match s.tls.next_record(region, &mut off) {
                Record::Data(plain) => {
                    if !self.tls_plaintext(c, plain, now)
                        || self.conns[c as usize].generation != generation
                    {
                        return false;
                    }
                }
                Record::More => return true,
                Record::Closed => {
                    self.disconnect(c, now);
                    return false;
                }
                // Refused while joining: a failed handshake; after, a broken session.
                Record::Refused((kind, why)) if self.conns[c as usize].joining => {
                    self.tls_failed(c, kind, &why);
                    return false;
                }
                Record::Refused((_, why)) | Record::Broken(why) => {
                    self.tls_broken(c, &why, now);
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
        self.out.tls_failed(self.plan.tls.as_deref(), kind, why);
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
            Some(Some(s)) if s.tls.is_handshaking()
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

    /// Frames over TLS allocate nothing per frame once the session is open: a
    /// connection in a room of one, whose echo server (rustls, a thread) sends every
    /// frame back, 2,000 frames sealed, sent, received and opened (TLS 1.3 and 1.2).
    #[test]
    fn frames_over_tls_allocate_nothing_after_the_handshake() {
        use crate::engine::driver::tests::allocations_here;
        use crate::engine::run_loop::Hooks;
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
                w.core.ring.submit_and_wait_ns(10_000_000).unwrap();
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
                    w.core.ring.submit_and_wait_ns(10_000_000).unwrap();
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
