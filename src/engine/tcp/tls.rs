//! TLS on a connection (`--tls`): after the TCP connect the connection stays
//! `Connecting` while rustls shakes hands (so the connect phase waits for it, its
//! timeout covers it, and a reopen repeats it); the handshake's time is recorded on its
//! own. Then it is ready as a plain one would be.
//!
//! io_uring moves only ciphertext: received bytes (a provided buffer, or the
//! connection's `tls_in` region on kernels without buffer rings) are fed to rustls, and
//! the plaintext it yields is copied into the connection's receive region, where the
//! framer reads it exactly as on a plain connection. Requests are written into rustls
//! as they go out, and the ciphertext it has ready is sent from the connection's
//! pre-sized `tls_out` region, one send at a time; what does not fit goes out when that
//! send completes. The session is created at connect, never per request.

use super::{Reopen, Worker};
use crate::clock::Ticks;
use crate::engine::conn_table::ConnState;
use crate::engine::recorder::ErrorKind;
use crate::transport::tls::TlsFailure;
use std::io::{Read, Write};

/// One connection's TLS state.
pub(super) struct Session {
    pub conn: rustls::ClientConnection,
    /// When the TCP connect completed (the handshake's start).
    pub connected: Ticks,
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
                    conn,
                    connected: now_t,
                }));
                self.arm_recv(c);
                self.tls_pump(c);
            }
            Err(e) => self.tls_failed(c, TlsFailure::of(&e), &e.to_string()),
        }
    }

    /// Moves the ciphertext rustls has ready into `c`'s send region and sends it, when
    /// no send of `c` is in the ring (the region is the send's until it completes).
    pub(super) fn tls_pump(&mut self, c: u32) {
        let len = self.tls_out_len;
        let conn = &mut self.table.conns[c as usize];
        if conn.send_armed {
            return;
        }
        let Some(s) = self.sessions[c as usize].as_mut() else {
            return;
        };
        let base = c as usize * len;
        let region = self.tls_out.region_mut(base..base + len);
        let mut n = 0;
        while n < len && s.conn.wants_write() {
            let mut w: &mut [u8] = &mut region[n..];
            match s.conn.write_tls(&mut w) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
        if n == 0 {
            return;
        }
        conn.send_done = 0;
        conn.send_len = n as u32;
        self.push_send(c);
    }

    /// Hands the requests just rendered (`bytes` of plaintext) to `c`'s session; they
    /// go out encrypted with the next [`Worker::tls_pump`].
    pub(super) fn tls_write(&mut self, c: u32, len: usize) {
        let Some(s) = self.sessions[c as usize].as_mut() else {
            return;
        };
        let bytes = if self.render {
            let base = c as usize * self.staging_len;
            self.staging.region(base..base + len)
        } else {
            self.send_buf.region(0..len)
        };
        // rustls's buffers are unlimited (`TlsClient::session`): a write takes it all.
        let _ = s.conn.writer().write_all(bytes);
        self.table.conns[c as usize].sending = 0;
        self.tls_pump(c);
    }

    /// `total` bytes of ciphertext arrived for `c` (in provided buffer `bid`, or in its
    /// `tls_in` region): decrypt, finish the handshake, frame the plaintext. Returns
    /// false when the connection was closed.
    pub(super) fn tls_recv(
        &mut self,
        c: u32,
        bid: Option<u16>,
        total: usize,
        now_t: Ticks,
    ) -> bool {
        // The bytes' owner is lent out while they are fed (as in `on_recv`); held in
        // ManuallyDrop so a panic meanwhile leaks it instead of freeing it under the
        // kernel.
        match bid {
            Some(bid) => {
                let br = std::mem::ManuallyDrop::new(
                    self.buf_ring.take().expect("buffer id implies a ring"),
                );
                let open = self.tls_feed(c, br.buf(bid, total), now_t);
                let mut br = std::mem::ManuallyDrop::into_inner(br);
                br.recycle(bid);
                self.buf_ring = Some(br);
                open
            }
            None => {
                let base = c as usize * super::RECV_CHUNK_BYTES;
                let buf = std::mem::ManuallyDrop::new(std::mem::take(&mut self.tls_in));
                let open = self.tls_feed(c, buf.region(base..base + total), now_t);
                self.tls_in = std::mem::ManuallyDrop::into_inner(buf);
                open
            }
        }
    }

    fn tls_feed(&mut self, c: u32, mut data: &[u8], now_t: Ticks) -> bool {
        while !data.is_empty() {
            let Some(s) = self.sessions[c as usize].as_mut() else {
                return false;
            };
            match s.conn.read_tls(&mut data) {
                Ok(0) => break, // nothing taken (cannot happen with bytes left; no spin)
                Ok(_) => {}
                Err(e) => {
                    self.tls_broken(c, &e.to_string(), data);
                    return false;
                }
            }
            let state = match s.conn.process_new_packets() {
                Ok(state) => state,
                Err(e) => {
                    let why = e.to_string();
                    if self.table.conns[c as usize].state == ConnState::Connecting {
                        self.tls_failed(c, TlsFailure::of(&e), &why);
                    } else {
                        self.tls_broken(c, &why, &[]);
                    }
                    return false;
                }
            };
            if self.table.conns[c as usize].state == ConnState::Connecting {
                if s.conn.is_handshaking() {
                    continue;
                }
                self.handshake_done(c, now_t);
                if self.table.conns[c as usize].state != ConnState::Ready {
                    return false;
                }
            }
            if !self.tls_plaintext(c, state.plaintext_bytes_to_read(), now_t) {
                return false;
            }
            if state.peer_has_closed() {
                self.peer_closed(c, now_t);
                return false;
            }
        }
        self.tls_pump(c); // handshake messages, alerts, key updates
        true
    }

    /// Moves `avail` bytes of plaintext from `c`'s session into its receive region
    /// and frames them. Returns false when the connection was closed.
    fn tls_plaintext(&mut self, c: u32, mut avail: usize, now_t: Ticks) -> bool {
        let len = self.plan.recv_buffer_bytes;
        let base = c as usize * len;
        while avail > 0 {
            let keep = self.table.conns[c as usize].recv_keep as usize;
            let Some(s) = self.sessions[c as usize].as_mut() else {
                return false;
            };
            let room = self.recv_buf.region_mut(base + keep..base + len);
            let n = match s.conn.reader().read(room) {
                Ok(n) if n > 0 => n,
                _ => return true,
            };
            avail = avail.saturating_sub(n);
            if !self.parse_received(c, n, now_t) {
                return false;
            }
        }
        true
    }

    /// `c`'s handshake completed at `now_t`: recorded, counted full or resumed, and
    /// the connection is ready.
    fn handshake_done(&mut self, c: u32, now_t: Ticks) {
        let s = self.sessions[c as usize]
            .as_ref()
            .expect("a handshake has a session");
        let took = self
            .clock
            .ns(now_t)
            .saturating_sub(self.clock.ns(s.connected));
        let resumed = s.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
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
        ctr.error(ErrorKind::TlsHandshake);
        self.close_conn(c, Some(ErrorKind::NoConnection), Reopen::Backoff);
    }

    /// An established session that cannot go on (a bad record, a fatal alert): its
    /// requests fail as protocol errors and the connection reopens.
    #[cold]
    fn tls_broken(&mut self, c: u32, why: &str, bytes: &[u8]) {
        if self.first_bad.is_none() {
            self.first_bad = Some(format!("TLS: {why}"));
        }
        self.protocol_error(c, "TLS", bytes);
    }
}
