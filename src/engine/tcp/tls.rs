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
//! connection's [`TlsSession`] seals requests straight into `tls_out` and opens
//! responses in place in `tls_in`, whose plaintext the framer reads as on a plain
//! connection. Nothing of this allocates per request; the session is created at
//! connect. The session is the transport's (the frames engine runs the same one);
//! what is here is where its bytes go in this engine's buffers and ring.
//!
//! Bytes are appended to `tls_out` while a send is in the ring (after the range that
//! send reads); its completion sends them (see `on_send`).

use super::Worker;
use crate::clock::Ticks;
use crate::engine::conn_table::ConnState;
use crate::engine::recorder::ErrorKind;
use crate::limits::TLS_RECV_BUFFER_BYTES;
use crate::transport::tls::TlsFailure;
use crate::transport::tls_session::{Record, Shake, TlsSession};

impl Worker<'_> {
    /// The TCP connect of `c` completed at `now_t`: its handshake starts.
    pub(super) fn start_handshake(&mut self, c: u32, now_t: Ticks) {
        let tls = (self.plan.tls.as_ref()).expect("TLS sessions only with --tls");
        // `--tls-resume`: drawn per connection from the worker's seeded stream.
        let resume = tls.resumes(|| self.rng.f64());
        match TlsSession::start(tls, resume, now_t) {
            Ok(session) => {
                self.sessions[c as usize] = Some(Box::new(session));
                self.arm_recv(c);
                self.tls_process(c, now_t); // the ClientHello
            }
            Err((kind, why)) => self.tls_failed(c, kind, &why),
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
        let Some(s) = self.sessions[c as usize].as_mut().filter(|s| s.is_open()) else {
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
        match s.seal(plain, out) {
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
            // A single-shot receive: the bytes are in the region where it was armed.
            let Some(s) = self.sessions[c as usize].as_mut() else {
                return false;
            };
            s.received(
                self.tls_in.region_mut(base..base + TLS_RECV_BUFFER_BYTES),
                total,
            );
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
            let region = self.tls_in.region_mut(base..base + TLS_RECV_BUFFER_BYTES);
            off += s.append(region, &data[off..]);
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
        let handshaking =
            (self.sessions[c as usize].as_deref()).is_some_and(|s| s.is_handshaking());
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

    /// One step of `c`'s handshake; when it completes, the connection is ready.
    /// Returns false when the connection closed.
    fn tls_handshake(&mut self, c: u32, now_t: Ticks) -> bool {
        let start = self.tls_out_start(c);
        let out_len = self.tls_out_len;
        let Some(s) = self.sessions[c as usize].as_mut() else {
            return false;
        };
        let base = c as usize * TLS_RECV_BUFFER_BYTES;
        let incoming = self.tls_in.region_mut(base..base + TLS_RECV_BUFFER_BYTES);
        let obase = c as usize * out_len;
        let out = self.tls_out.region_mut(obase + start..obase + out_len);
        let mut written = 0;
        let step = s.handshake(incoming, out, &mut written);
        let started = s.started;
        self.tls_sent(c, written);
        match step {
            Err((kind, why)) => {
                self.tls_failed(c, kind, &why);
                false
            }
            Ok(Shake::Waiting) => true,
            Ok(Shake::Done { resumed }) => {
                let took = self.clock.ns(now_t).saturating_sub(self.clock.ns(started));
                self.out.tls_opened(took, resumed);
                let alpn_h2 = (self.sessions[c as usize].as_deref()).is_some_and(|s| s.alpn_h2);
                if self.h2.is_some() && !alpn_h2 {
                    self.tls_failed(
                        c,
                        TlsFailure::AlertNoApplicationProtocol,
                        "the server did not choose h2 over ALPN: it does not serve HTTP/2 over TLS here",
                    );
                    return false;
                }
                self.established(c, now_t);
                // Ready, or (HTTP/2) still connecting until the server's SETTINGS.
                matches!(
                    self.table.conns[c as usize].state,
                    ConnState::Ready | ConnState::Connecting
                )
            }
        }
    }

    /// Opens the whole records of `c`'s ciphertext (`region`, its part of `tls_in`)
    /// and frames their plaintext. Returns false when the connection was closed.
    fn tls_records(&mut self, c: u32, region: &mut [u8], now_t: Ticks) -> bool {
        let mut off = 0;
        loop {
            let Some(s) = self.sessions[c as usize].as_mut() else {
                return false;
            };
            match s.next_record(region, &mut off) {
                Record::Data(r) => {
                    if !self.tls_plaintext(c, &region[r], now_t) {
                        return false;
                    }
                }
                Record::More => return true,
                Record::Closed => {
                    self.peer_closed(c, now_t);
                    return false;
                }
                // A failed handshake of the alert's kind, retried after the backoff
                // (its requests fail as tls_handshake).
                Record::Refused((kind, why)) => {
                    self.tls_failed(c, kind, &why);
                    return false;
                }
                Record::Broken(why) => {
                    self.tls_broken(c, &why);
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

    /// A handshake of `c` failed (`kind`, rustls's `why`): counted by kind as a failed
    /// connection attempt, remembered for the run's one line, retried after the
    /// backoff.
    #[cold]
    pub(super) fn tls_failed(&mut self, c: u32, kind: TlsFailure, why: &str) {
        self.out.tls_failed(self.plan.tls.as_deref(), kind, why);
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
