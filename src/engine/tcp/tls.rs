//! TLS on a connection (`--tls`): after the TCP connect the connection stays
//! `Connecting` while rustls shakes hands (so the connect phase waits for it, its
//! timeout covers it, and a reopen repeats it); the handshake's time is recorded on its
//! own. Then it is ready as a plain one would be.
//!
//! io_uring moves only ciphertext, through two pre-sized regions per connection:
//! `tls_in` gathers what arrives (a single-shot receive writes into it, a provided
//! buffer is copied into it) until records are whole, and `tls_out` holds what goes
//! out. During the handshake rustls's unbuffered connection reads and writes those
//! regions; once it completes, rustls hands over the traffic secrets and the
//! connection's [`RecordLayer`] seals requests straight into `tls_out` and opens
//! responses in place in `tls_in`, whose plaintext the framer reads as on a plain
//! connection. Nothing of this allocates per request; the session is created at
//! connect.
//!
//! Bytes are appended to `tls_out` while a send is in the ring (after the range that
//! send reads); its completion sends them (see `on_send`).

use super::Worker;
use crate::clock::Ticks;
use crate::engine::conn_table::ConnState;
use crate::engine::recorder::ErrorKind;
use crate::limits::TLS_RECV_BUFFER_BYTES;
use crate::transport::tls::{TlsFailure, handshake_step};
use crate::transport::tls_record::{Content, RecordError, RecordLayer};
use rustls::client::UnbufferedClientConnection;

/// Where a session is. (Boxed with its [`Session`]; the variants' sizes differ, but
/// a session spends its life in the largest.)
#[allow(clippy::large_enum_variant)]
pub(super) enum Phase {
    Handshake(UnbufferedClientConnection),
    Open(RecordLayer),
    /// Between the two, or after a failure (the connection is closing).
    Gone,
}

/// One connection's TLS state.
pub(super) struct Session {
    pub phase: Phase,
    /// When the TCP connect completed (the handshake's start).
    pub connected: Ticks,
    /// Bytes of ciphertext waiting in the connection's `tls_in` region (an
    /// unfinished record).
    pub in_fill: usize,
    /// Where in the region the single-shot receive in the ring writes (the fill when
    /// it was armed; records consumed meanwhile move the fill down).
    pub recv_at: usize,
    /// Application data has arrived (a fatal alert before it is a refused handshake).
    pub data_seen: bool,
}

impl Worker<'_> {
    /// The TCP connect of `c` completed at `now_t`: its handshake starts.
    pub(super) fn start_handshake(&mut self, c: u32, now_t: Ticks) {
        let tls = self
            .plan
            .tls
            .as_ref()
            .expect("TLS sessions only with --tls");
        // `--tls-resume`: drawn per connection from the worker's seeded stream.
        let resume = tls.resume_ratio > 0.0 && self.rng.f64() < tls.resume_ratio;
        match tls.session(resume) {
            Ok(conn) => {
                self.sessions[c as usize] = Some(Box::new(Session {
                    phase: Phase::Handshake(conn),
                    connected: now_t,
                    in_fill: 0,
                    recv_at: 0,
                    data_seen: false,
                }));
                self.arm_recv(c);
                self.tls_process(c, now_t); // the ClientHello
            }
            Err(e) => self.tls_failed(c, TlsFailure::of(&e), &e.to_string()),
        }
    }

    /// Where new ciphertext for `c` goes in its `tls_out` region: after what the send
    /// in the ring reads, or at the start when none is.
    fn tls_out_start(&mut self, c: u32) -> usize {
        let conn = &mut self.table.conns[c as usize];
        if !conn.send_armed {
            conn.send_done = 0;
            conn.send_len = 0;
        }
        conn.send_len as usize
    }

    /// `n` more bytes of ciphertext sit at the end of `c`'s `tls_out` region: they go
    /// out now, or when the send in the ring completes.
    fn tls_sent(&mut self, c: u32, n: usize) {
        let conn = &mut self.table.conns[c as usize];
        conn.send_len += n as u32;
        if n > 0 && !conn.send_armed {
            self.push_send(c);
        }
    }

    /// Seals the requests just rendered (`len` bytes of plaintext) into `c`'s
    /// `tls_out` region and sends them.
    pub(super) fn tls_write(&mut self, c: u32, len: usize) {
        let start = self.tls_out_start(c);
        let out_len = self.tls_out_len;
        let Some(s) = self.sessions[c as usize].as_mut() else {
            return;
        };
        let Phase::Open(records) = &mut s.phase else {
            return;
        };
        let plain = if self.render {
            let base = c as usize * self.staging_len;
            self.staging.region(base..base + len)
        } else {
            self.send_buf.region(0..len)
        };
        let base = c as usize * out_len;
        let out = self.tls_out.region_mut(base + start..base + out_len);
        match records.seal(plain, out) {
            Some(n) => self.tls_sent(c, n),
            None => self.tls_broken(c, "requests do not fit the TLS send buffer"),
        }
    }

    /// `total` bytes of ciphertext arrived for `c` (in provided buffer `bid`, or in its
    /// `tls_in` region): shake hands, or open records and frame their plaintext.
    /// Returns false when the connection was closed.
    pub(super) fn tls_recv(
        &mut self,
        c: u32,
        bid: Option<u16>,
        total: usize,
        now_t: Ticks,
    ) -> bool {
        let base = c as usize * TLS_RECV_BUFFER_BYTES;
        let Some(bid) = bid else {
            // A single-shot receive: the bytes are in the region at `recv_at`.
            let Some(s) = self.sessions[c as usize].as_mut() else {
                return false;
            };
            if s.recv_at != s.in_fill {
                self.tls_in
                    .region_mut(base..base + TLS_RECV_BUFFER_BYTES)
                    .copy_within(s.recv_at..s.recv_at + total, s.in_fill);
            }
            s.in_fill += total;
            return self.tls_process(c, now_t);
        };
        // The ring is lent out while its bytes are fed (as in `on_recv`); held in
        // ManuallyDrop so a panic meanwhile leaks it instead of freeing it under the
        // kernel.
        let br =
            std::mem::ManuallyDrop::new(self.buf_ring.take().expect("buffer id implies a ring"));
        let data = br.buf(bid, total);
        let mut off = 0;
        let mut open = true;
        while open && off < total {
            let Some(s) = self.sessions[c as usize].as_mut() else {
                open = false;
                break;
            };
            // Never full here: a whole record fits, and whole ones were consumed.
            let n = (TLS_RECV_BUFFER_BYTES - s.in_fill).min(total - off);
            self.tls_in
                .region_mut(base + s.in_fill..base + s.in_fill + n)
                .copy_from_slice(&data[off..off + n]);
            s.in_fill += n;
            off += n;
            open = self.tls_process(c, now_t);
        }
        let mut br = std::mem::ManuallyDrop::into_inner(br);
        br.recycle(bid);
        self.buf_ring = Some(br);
        open
    }

    /// Works through the ciphertext waiting in `c`'s `tls_in` region. Returns false
    /// when the connection was closed.
    fn tls_process(&mut self, c: u32, now_t: Ticks) -> bool {
        let handshaking = matches!(
            self.sessions[c as usize].as_deref(),
            Some(Session {
                phase: Phase::Handshake(_),
                ..
            })
        );
        if handshaking && !self.tls_handshake(c, now_t) {
            return false;
        }
        let base = c as usize * TLS_RECV_BUFFER_BYTES;
        // Lent out while its plaintext is framed (as `recv_buf` in `parse_received`);
        // ManuallyDrop leaks it if a panic unwinds meanwhile (other connections'
        // receives may be writing into it).
        let mut buf = std::mem::ManuallyDrop::new(std::mem::take(&mut self.tls_in));
        let open = self.tls_records(c, buf.region_mut(base..base + TLS_RECV_BUFFER_BYTES), now_t);
        self.tls_in = std::mem::ManuallyDrop::into_inner(buf);
        open
    }

    /// One step of `c`'s handshake; when it completes, the session becomes a record
    /// layer and the connection is ready. Returns false when the connection closed.
    fn tls_handshake(&mut self, c: u32, now_t: Ticks) -> bool {
        let start = self.tls_out_start(c);
        let out_len = self.tls_out_len;
        let Some(s) = self.sessions[c as usize].as_mut() else {
            return false;
        };
        let Phase::Handshake(conn) = &mut s.phase else {
            return true;
        };
        let base = c as usize * TLS_RECV_BUFFER_BYTES;
        let incoming = self.tls_in.region_mut(base..base + TLS_RECV_BUFFER_BYTES);
        let obase = c as usize * out_len;
        let out = self.tls_out.region_mut(obase + start..obase + out_len);
        let mut written = 0;
        let step = handshake_step(conn, incoming, &mut s.in_fill, out, &mut written);
        let full = s.in_fill == TLS_RECV_BUFFER_BYTES;
        self.tls_sent(c, written);
        match step {
            Err((kind, why)) => {
                self.tls_failed(c, kind, &why);
                false
            }
            Ok(false) if full => {
                self.tls_failed(
                    c,
                    TlsFailure::Other,
                    "a handshake message larger than the receive buffer",
                );
                false
            }
            Ok(false) => true,
            Ok(true) => {
                let s = self.sessions[c as usize]
                    .as_mut()
                    .expect("a handshake has a session");
                let Phase::Handshake(conn) = std::mem::replace(&mut s.phase, Phase::Gone) else {
                    unreachable!("checked above");
                };
                let resumed = conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                match crate::transport::tls::established(conn) {
                    Ok(records) => s.phase = Phase::Open(records),
                    Err(why) => {
                        self.tls_failed(c, TlsFailure::Other, &why);
                        return false;
                    }
                }
                self.handshake_done(c, now_t, resumed);
                self.table.conns[c as usize].state == ConnState::Ready
            }
        }
    }

    /// Opens the whole records of `c`'s ciphertext (`region`, its part of `tls_in`)
    /// and frames their plaintext; an unfinished record moves to the front. Returns
    /// false when the connection was closed.
    fn tls_records(&mut self, c: u32, region: &mut [u8], now_t: Ticks) -> bool {
        let mut off = 0;
        loop {
            let Some(s) = self.sessions[c as usize].as_mut() else {
                return false;
            };
            let Phase::Open(records) = &mut s.phase else {
                return true; // still shaking hands
            };
            let fill = s.in_fill;
            match records.open(&mut region[off..fill]) {
                Ok(None) => {
                    region.copy_within(off..fill, 0);
                    s.in_fill = fill - off;
                    return true;
                }
                Ok(Some((used, content))) => {
                    let at = off;
                    off += used;
                    match content {
                        Content::Data(r) => {
                            s.data_seen = true;
                            let plain = &region[at + r.start..at + r.end];
                            if !self.tls_plaintext(c, plain, now_t) {
                                return false;
                            }
                        }
                        Content::Closed => {
                            self.peer_closed(c, now_t);
                            return false;
                        }
                        Content::Control => {}
                    }
                }
                Err(e) => {
                    if let RecordError::Alert(d) = e
                        && !s.data_seen
                    {
                        // A TLS 1.3 server refuses the client's certificate (or its
                        // absence) only after the client's side of the handshake
                        // ended: a failed handshake of the alert's kind, retried
                        // after the backoff (its requests fail as tls_handshake).
                        let kind = TlsFailure::of(&rustls::Error::AlertReceived(d.into()));
                        self.tls_failed(c, kind, &e.to_string());
                        return false;
                    }
                    self.tls_broken(c, &e.to_string());
                    return false;
                }
            }
        }
    }

    /// Frames `data`, plaintext of `c`, as a provided buffer's bytes are framed.
    /// Returns false when the connection was closed.
    fn tls_plaintext(&mut self, c: u32, data: &[u8], now_t: Ticks) -> bool {
        if self.table.conns[c as usize].recv_keep == 0 {
            return self.parse_direct(c, data, now_t);
        }
        let len = self.plan.recv_buffer_bytes;
        let base = c as usize * len;
        let mut off = 0;
        while off < data.len() {
            let keep = self.table.conns[c as usize].recv_keep as usize;
            let n = (len - keep).min(data.len() - off);
            self.recv_buf
                .region_mut(base + keep..base + keep + n)
                .copy_from_slice(&data[off..off + n]);
            off += n;
            if !self.parse_received(c, n, now_t) {
                return false;
            }
        }
        true
    }

    /// `c`'s handshake completed at `now_t`: recorded, counted full or resumed, and
    /// the connection is ready.
    fn handshake_done(&mut self, c: u32, now_t: Ticks, resumed: bool) {
        let s = self.sessions[c as usize]
            .as_ref()
            .expect("a handshake has a session");
        let took = self
            .clock
            .ns(now_t)
            .saturating_sub(self.clock.ns(s.connected));
        self.out.hist.tls_handshake.saturating_record(took);
        let t = &mut self.out.counters.tls;
        if resumed {
            t.resumed += 1;
        } else {
            t.full += 1;
        }
        self.established(c, now_t);
    }

    /// A handshake of `c` failed (`kind`, rustls's `why`): counted by kind as a failed
    /// connection attempt, remembered for the run's one line, retried after the
    /// backoff.
    #[cold]
    pub(super) fn tls_failed(&mut self, c: u32, kind: TlsFailure, why: &str) {
        if let Some(tls) = &self.plan.tls {
            tls.note_failure(kind, why);
        }
        let ctr = &mut self.out.counters;
        ctr.tls.failed[kind as usize] += 1;
        ctr.connections_failed += 1;
        self.open_failed(c, ErrorKind::TlsHandshake);
    }

    /// An established session that cannot go on (a bad record, a fatal alert): its
    /// requests fail as protocol errors and the connection reopens.
    #[cold]
    fn tls_broken(&mut self, c: u32, why: &str) {
        if self.first_bad.is_none() {
            self.first_bad = Some(format!("TLS: {why}"));
        }
        self.protocol_error(c, "TLS", &[]);
    }
}
