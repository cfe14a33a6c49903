//! One client TLS session over the caller's byte regions, whichever engine moves the
//! bytes: one handshake path, one record path (seal, open), one failure path.
//!
//! The caller owns the memory and the I/O: each connection has a receive region
//! (ciphertext as it arrives, [`TLS_RECV_BUFFER_BYTES`] in both engines) and a send
//! region (ciphertext to go out), handed in as plain slices on every call, so the same
//! session serves the request/response engine, the frames engine and, later, HTTP/2
//! (the client's ALPN protocols are [`TlsClient::new`]'s). The session keeps only the
//! bookkeeping that is the same everywhere: how much of the receive region holds
//! ciphertext, where the receive in flight writes, whether application data has
//! arrived.
//!
//! The life of a session: [`TlsSession::start`] at connect; [`TlsSession::handshake`]
//! whenever ciphertext arrived while it shakes hands (rustls's unbuffered connection
//! reads and writes the regions); once it completes, rustls hands the secrets over and
//! [`TlsSession::seal`] and [`TlsSession::next_record`] (the record layer,
//! [`crate::transport::tls_record`]) serve the traffic without allocating. Every
//! failure comes out as a [`TlsFailure`] with rustls's words: a handshake that failed
//! or was refused (a fatal alert before any application data: TLS 1.3's refusal of a
//! client certificate arrives after the client's side of the handshake), or a session
//! broken after it opened.
//!
//! [`TLS_RECV_BUFFER_BYTES`]: crate::limits::TLS_RECV_BUFFER_BYTES

use crate::clock::Ticks;
use crate::transport::tls::{TlsClient, TlsFailure, describe};
use crate::transport::tls_record::{Content, RecordError, RecordLayer};
use rustls::client::UnbufferedClientConnection;
use rustls::unbuffered::{ConnectionState, UnbufferedStatus};
use std::ops::Range;

/// A failed handshake: its kind and why, in words for the run's one line.
pub type Failure = (TlsFailure, String);

/// Where a session is. (Boxed with its [`TlsSession`]; the variants' sizes differ, but
/// a session spends its life in the largest.)
#[allow(clippy::large_enum_variant)]
enum Phase {
    Handshake(UnbufferedClientConnection),
    Open(RecordLayer),
    /// Between the two, or after a failure (the connection is closing).
    Gone,
}

/// How far a handshake step got.
#[derive(Debug, PartialEq, Eq)]
pub enum Shake {
    /// Waiting for the server.
    Waiting,
    /// Complete: the session is open (`resumed`: with a session the server issued
    /// before, `--tls-resume`).
    Done { resumed: bool },
}

/// The next record of the receive region.
#[derive(Debug, PartialEq, Eq)]
pub enum Record {
    /// Application data: its plaintext, in place at this range of the region.
    Data(Range<usize>),
    /// No whole record left (or the handshake is not over): an unfinished one was
    /// moved to the front of the region, where the next receive appends to it.
    More,
    /// The server's close_notify.
    Closed,
    /// A fatal alert before any application data: a refused handshake, of the alert's
    /// kind (TLS 1.3 servers refuse a client certificate, or its absence, only after
    /// the client's side of the handshake ended).
    Refused(Failure),
    /// The open session cannot go on (a bad record, a fatal alert after data).
    Broken(String),
}

/// One connection's TLS session; created at connect, never per request.
pub struct TlsSession {
    phase: Phase,
    /// When the handshake started (the TCP connect's completion, or NATS's `INFO`),
    /// on the caller's clock.
    pub started: Ticks,
    /// Bytes of ciphertext at the front of the receive region (an unfinished record,
    /// or handshake messages not yet processed).
    in_fill: usize,
    /// Where in the region the receive in flight writes (the fill when it was armed;
    /// records consumed meanwhile move the fill down).
    recv_at: usize,
    /// Application data has arrived (a fatal alert before it is a refused handshake).
    data_seen: bool,
    /// The server chose `h2` over ALPN (known once the handshake completed).
    pub alpn_h2: bool,
    /// Plaintext the server sent with its last handshake flight, opened by rustls and
    /// held at the front of the receive region: the first `next_record` hands it out.
    early: usize,
}

impl TlsSession {
    /// A new session of `client` started at `started`, offering a session ticket an
    /// earlier handshake received when `resume` (the first handshakes have none and are
    /// full). Its first [`handshake`](Self::handshake) writes the ClientHello.
    pub fn start(client: &TlsClient, resume: bool, started: Ticks) -> Result<Self, Failure> {
        let conn = client
            .session(resume)
            .map_err(|e| (TlsFailure::of(&e), e.to_string()))?;
        Ok(TlsSession {
            phase: Phase::Handshake(conn),
            started,
            in_fill: 0,
            recv_at: 0,
            data_seen: false,
            alpn_h2: false,
            early: 0,
        })
    }

    /// Whether the handshake is still going on.
    pub fn is_handshaking(&self) -> bool {
        matches!(self.phase, Phase::Handshake(_))
    }

    /// Whether the handshake completed: records can be sealed and opened.
    pub fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open(_))
    }

    /// A receive is being armed: where in the receive region it writes (after the
    /// ciphertext held; never at the region's end, as whole records are consumed).
    pub fn arm_recv(&mut self) -> usize {
        self.recv_at = self.in_fill;
        self.in_fill
    }

    /// The receive armed by [`arm_recv`](Self::arm_recv) wrote `n` bytes into
    /// `region`: they join the ciphertext held (moved down if records were consumed
    /// while it was in flight).
    pub fn received(&mut self, region: &mut [u8], n: usize) {
        if self.recv_at != self.in_fill {
            region.copy_within(self.recv_at..self.recv_at + n, self.in_fill);
        }
        self.in_fill += n;
    }

    /// Appends what fits of `data` (bytes received elsewhere, e.g. a provided buffer)
    /// to the ciphertext held in `region`; returns how much did.
    pub fn append(&mut self, region: &mut [u8], data: &[u8]) -> usize {
        let n = (region.len() - self.in_fill).min(data.len());
        region[self.in_fill..self.in_fill + n].copy_from_slice(&data[..n]);
        self.in_fill += n;
        n
    }

    /// One step of the handshake, if it is going on (else `Waiting`): the ciphertext
    /// held in `region` is processed, what rustls sends is written after
    /// `out[..*out_fill]`. Once complete, the secrets go to the record layer.
    pub fn handshake(
        &mut self,
        region: &mut [u8],
        out: &mut [u8],
        out_fill: &mut usize,
    ) -> Result<Shake, Failure> {
        let Phase::Handshake(conn) = &mut self.phase else {
            return Ok(Shake::Waiting);
        };
        if !handshake_step(
            conn,
            region,
            &mut self.in_fill,
            out,
            out_fill,
            &mut self.early,
        )? {
            if self.in_fill == region.len() {
                let why = "a handshake message larger than the receive buffer";
                return Err((TlsFailure::Other, why.into()));
            }
            return Ok(Shake::Waiting);
        }
        let Phase::Handshake(conn) = std::mem::replace(&mut self.phase, Phase::Gone) else {
            unreachable!("matched above");
        };
        let resumed = conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
        self.alpn_h2 = conn.alpn_protocol() == Some(b"h2");
        self.phase = Phase::Open(established(conn).map_err(|why| (TlsFailure::Other, why))?);
        Ok(Shake::Done { resumed })
    }

    /// Seals `plain` as application data into `out`: the bytes written, or None when
    /// `out` is too small or the session is not open.
    pub fn seal(&mut self, plain: &[u8], out: &mut [u8]) -> Option<usize> {
        let Phase::Open(records) = &mut self.phase else {
            return None;
        };
        records.seal(plain, out)
    }

    /// Opens the next whole record of the ciphertext held in `region`, from `*off`
    /// (0 for the first; moved past each record opened). Call it until it returns
    /// something other than `Data`; on `More` the region holds only an unfinished
    /// record, at its front.
    pub fn next_record(&mut self, region: &mut [u8], off: &mut usize) -> Record {
        let Phase::Open(records) = &mut self.phase else {
            return Record::More; // still shaking hands
        };
        if self.early > 0 && *off == 0 {
            let n = std::mem::take(&mut self.early);
            *off = n;
            self.data_seen = true;
            return Record::Data(0..n);
        }
        loop {
            let at = *off;
            match records.open(&mut region[at..self.in_fill]) {
                Ok(None) => {
                    region.copy_within(at..self.in_fill, 0);
                    self.in_fill -= at;
                    *off = 0;
                    return Record::More;
                }
                Ok(Some((used, content))) => {
                    *off += used;
                    match content {
                        Content::Data(r) => {
                            self.data_seen = true;
                            return Record::Data(at + r.start..at + r.end);
                        }
                        Content::Closed => return Record::Closed,
                        Content::Control => {}
                    }
                }
                Err(e) => {
                    return match e {
                        RecordError::Alert(d) if !self.data_seen => {
                            let kind = TlsFailure::of(&rustls::Error::AlertReceived(d.into()));
                            Record::Refused((kind, e.to_string()))
                        }
                        _ => Record::Broken(e.to_string()),
                    };
                }
            }
        }
    }
}

/// Drives a handshake with the ciphertext received so far, `incoming[..*fill]`
/// (what rustls is done with is removed from its front), writing what rustls sends
/// after `out[..*out_fill]`. Ok(true) once the handshake is complete, Ok(false) while
/// it waits for the server.
fn handshake_step(
    conn: &mut UnbufferedClientConnection,
    incoming: &mut [u8],
    fill: &mut usize,
    out: &mut [u8],
    out_fill: &mut usize,
    early: &mut usize,
) -> Result<bool, Failure> {
    loop {
        let UnbufferedStatus { discard, state } = conn.process_tls_records(&mut incoming[..*fill]);
        let done = match state {
            Err(e) => return Err((TlsFailure::of(&e), describe(&e))),
            Ok(ConnectionState::EncodeTlsData(mut s)) => {
                *out_fill += s.encode(&mut out[*out_fill..]).map_err(|e| {
                    (
                        TlsFailure::Other,
                        format!("a handshake message does not fit the send buffer ({e})"),
                    )
                })?;
                None
            }
            Ok(ConnectionState::TransmitTlsData(s)) => {
                s.done(); // the bytes are in `out`; the caller sends them
                None
            }
            Ok(ConnectionState::BlockedHandshake) => Some(false),
            Ok(ConnectionState::WriteTraffic(_)) => Some(true),
            // The server spoke first right after its Finished (an HTTP/2 server's
            // SETTINGS, in the same flight): the handshake is over and rustls has
            // opened those records; their plaintext goes to the front of the region,
            // where `next_record` hands it out first.
            Ok(ConnectionState::ReadTraffic(mut r)) => {
                let mut plain = Vec::new();
                let mut used = discard;
                while let Some(rec) = r.next_record() {
                    let rec = rec.map_err(|e| (TlsFailure::of(&e), describe(&e)))?;
                    plain.extend_from_slice(rec.payload);
                    used += rec.discard;
                }
                // Plaintext is never longer than the records it came from.
                incoming.copy_within(used..*fill, plain.len());
                incoming[..plain.len()].copy_from_slice(&plain);
                *fill = plain.len() + (*fill - used);
                *early = plain.len();
                return Ok(true);
            }
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                return Err((
                    TlsFailure::Closed,
                    "the server closed the session during the handshake".into(),
                ));
            }
            Ok(_) => {
                return Err((
                    TlsFailure::Other,
                    "application data before the handshake completed".into(),
                ));
            }
        };
        incoming.copy_within(discard..*fill, 0);
        *fill -= discard;
        if let Some(done) = done {
            return Ok(done);
        }
    }
}

/// A completed handshake's session, handed over to the record layer (rustls keeps
/// the secrets for key updates and the session tickets still to come).
fn established(conn: UnbufferedClientConnection) -> Result<RecordLayer, String> {
    let (secrets, kernel) = conn
        .dangerous_into_kernel_connection()
        .map_err(|e| e.to_string())?;
    RecordLayer::new(secrets, kernel).map_err(|e| e.to_string())
}

/// For unit tests: shakes hands between `client`'s session and the in-memory rustls
/// `server`, the session's ciphertext held in `region`: the session once its handshake
/// completed (with what the server sent after it, e.g. session tickets, held in
/// `region`) and whether it resumed, or why it failed.
#[cfg(test)]
pub(crate) fn shake_in_memory(
    client: &TlsClient,
    resume: bool,
    server: &mut rustls::ServerConnection,
    region: &mut [u8],
) -> Result<(TlsSession, bool), Failure> {
    let mut s = TlsSession::start(client, resume, 0)?;
    let mut out = vec![0u8; 4096];
    for _ in 0..8 {
        let mut written = 0;
        let step = s.handshake(region, &mut out, &mut written)?;
        server.read_tls(&mut &out[..written]).unwrap();
        // A server refusing the client fails here; its alert is what it sends next.
        let _ = server.process_new_packets();
        let mut sent = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut sent).unwrap();
        }
        assert_eq!(s.append(region, &sent), sent.len(), "the region holds it");
        if let Shake::Done { resumed } = step {
            return Ok((s, resumed));
        }
    }
    panic!("the handshake did not end");
}

#[cfg(test)]
impl TlsSession {
    /// The record layer of an open session and the bytes of ciphertext still held.
    pub(crate) fn into_records(self) -> (RecordLayer, usize) {
        match self.phase {
            Phase::Open(records) => (records, self.in_fill),
            _ => panic!("the session is not open"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::TLS_RECV_BUFFER_BYTES;
    use crate::transport::tls::{TlsVersion, Trust, self_signed_localhost, server_config};
    use std::io::{Read, Write};
    use std::sync::Arc;

    fn client(version: TlsVersion, resume_ratio: f64) -> TlsClient {
        TlsClient::new(
            "localhost",
            Trust::Insecure,
            &[],
            Some(version),
            resume_ratio,
        )
        .unwrap()
    }

    /// The plaintext of every record held in `region`, until `More` (or what ended
    /// the session).
    fn read_all(s: &mut TlsSession, region: &mut [u8]) -> (Vec<u8>, Record) {
        let (mut data, mut off) = (Vec::new(), 0);
        loop {
            match s.next_record(region, &mut off) {
                Record::Data(r) => data.extend_from_slice(&region[r]),
                end => return (data, end),
            }
        }
    }

    /// A session against rustls's own server, both versions: the handshake opens it
    /// (full), requests sealed here read back on the server, responses open here (the
    /// session tickets first, under TLS 1.3), the server's close_notify closes it.
    #[test]
    fn a_session_shakes_hands_carries_data_and_sees_the_close() {
        let cert = self_signed_localhost().unwrap();
        let config = server_config(&cert.cert_pem, &cert.key_pem).unwrap();
        for version in [TlsVersion::V13, TlsVersion::V12] {
            let mut server = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut region = vec![0u8; TLS_RECV_BUFFER_BYTES];
            let c = client(version, 0.0);
            let (mut s, resumed) = shake_in_memory(&c, false, &mut server, &mut region).unwrap();
            assert!(
                s.is_open() && !s.is_handshaking() && !resumed,
                "{version:?}"
            );
            for round in 0..3u8 {
                let mut wire = [0u8; 256];
                let n = s.seal(&[b'q', round], &mut wire).unwrap();
                server.read_tls(&mut &wire[..n]).unwrap();
                server.process_new_packets().unwrap();
                let mut got = [0u8; 2];
                server.reader().read_exact(&mut got).unwrap();
                assert_eq!(got, [b'q', round], "{version:?}");
                server.writer().write_all(&[b'r', round]).unwrap();
                let mut sent = Vec::new();
                server.write_tls(&mut sent).unwrap();
                s.append(&mut region, &sent);
                let (data, end) = read_all(&mut s, &mut region);
                assert_eq!(
                    (data, end),
                    (vec![b'r', round], Record::More),
                    "{version:?}"
                );
                assert_eq!(s.in_fill, 0, "{version:?}: whole records consumed");
            }
            server.send_close_notify();
            let mut sent = Vec::new();
            server.write_tls(&mut sent).unwrap();
            s.append(&mut region, &sent);
            assert_eq!(read_all(&mut s, &mut region).1, Record::Closed);
        }
    }

    /// `--tls-resume`: a second session of the same client offers the ticket the
    /// first one received, and the server accepts it.
    #[test]
    fn a_second_session_resumes_with_the_first_ones_ticket() {
        let cert = self_signed_localhost().unwrap();
        let config = server_config(&cert.cert_pem, &cert.key_pem).unwrap();
        for version in [TlsVersion::V13, TlsVersion::V12] {
            let c = client(version, 1.0);
            let mut region = vec![0u8; TLS_RECV_BUFFER_BYTES];
            let mut server = rustls::ServerConnection::new(config.clone()).unwrap();
            let (mut s, resumed) = shake_in_memory(&c, true, &mut server, &mut region).unwrap();
            assert!(!resumed, "{version:?}: nothing to resume yet");
            read_all(&mut s, &mut region); // the tickets (TLS 1.3)
            let mut region = vec![0u8; TLS_RECV_BUFFER_BYTES];
            let mut server = rustls::ServerConnection::new(config.clone()).unwrap();
            let (_, resumed) = shake_in_memory(&c, true, &mut server, &mut region).unwrap();
            assert!(resumed, "{version:?}");
        }
    }

    /// Records opened while a receive is in flight move the fill down: the bytes that
    /// receive wrote (at the old fill) join the unfinished record they continue.
    #[test]
    fn a_receive_in_flight_while_records_are_consumed_lands_after_the_rest() {
        let cert = self_signed_localhost().unwrap();
        let config = server_config(&cert.cert_pem, &cert.key_pem).unwrap();
        let mut server = rustls::ServerConnection::new(config).unwrap();
        let mut region = vec![0u8; TLS_RECV_BUFFER_BYTES];
        let c = client(TlsVersion::V13, 0.0);
        let (mut s, _) = shake_in_memory(&c, false, &mut server, &mut region).unwrap();
        read_all(&mut s, &mut region); // the tickets
        let mut wire = Vec::new();
        for part in [&b"first"[..], b"second"] {
            server.writer().write_all(part).unwrap();
            server.write_tls(&mut wire).unwrap();
        }
        let first = wire.len() - (5 + b"second".len() + 1 + 16);
        let split = first + 7; // the second record's header and a little more
        s.append(&mut region, &wire[..split]);
        let at = s.arm_recv();
        assert_eq!(at, split);
        // The receive writes the rest at `at`; the records held are opened meanwhile.
        region[at..wire.len()].copy_from_slice(&wire[split..]);
        assert_eq!(
            read_all(&mut s, &mut region),
            (b"first".to_vec(), Record::More)
        );
        s.received(&mut region, wire.len() - split);
        assert_eq!(
            read_all(&mut s, &mut region),
            (b"second".to_vec(), Record::More)
        );
    }

    /// The failure path: a handshake message larger than the receive region, a
    /// server that refuses the client (TLS 1.3 without the client certificate it
    /// requires: an alert after the client's side of the handshake, before any data),
    /// a record that fails authentication.
    #[test]
    fn failures_come_out_with_their_kind() {
        let cert = self_signed_localhost().unwrap();
        let config = server_config(&cert.cert_pem, &cert.key_pem).unwrap();
        let c = client(TlsVersion::V13, 0.0);

        let mut server = rustls::ServerConnection::new(config.clone()).unwrap();
        let mut small = vec![0u8; 256];
        let mut s = TlsSession::start(&c, false, 0).unwrap();
        let (mut out, mut written) = (vec![0u8; 4096], 0);
        assert_eq!(
            s.handshake(&mut small, &mut out, &mut written),
            Ok(Shake::Waiting)
        );
        server.read_tls(&mut &out[..written]).unwrap();
        server.process_new_packets().unwrap();
        let mut sent = Vec::new();
        server.write_tls(&mut sent).unwrap();
        // The records that fit are processed; the certificate's does not fit.
        let mut fed = 0;
        let (kind, why) = loop {
            let n = s.append(&mut small, &sent[fed..]);
            assert!(n > 0, "the region is full and the handshake waits on");
            fed += n;
            match s.handshake(&mut small, &mut out, &mut written) {
                Err(e) => break e,
                Ok(step) => assert!(step == Shake::Waiting && fed < sent.len()),
            }
        };
        assert_eq!(kind, TlsFailure::Other);
        assert!(why.contains("larger than the receive buffer"), "{why}");

        let roots = Arc::new({
            let mut r = rustls::RootCertStore::empty();
            r.add_parsable_certificates(
                crate::transport::tls::parse_certs(&cert.cert_pem).unwrap(),
            );
            r
        });
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .unwrap();
        let requiring = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                crate::transport::tls::parse_certs(&cert.cert_pem).unwrap(),
                crate::transport::tls::parse_key(&cert.key_pem).unwrap(),
            )
            .unwrap();
        let mut server = rustls::ServerConnection::new(Arc::new(requiring)).unwrap();
        let mut region = vec![0u8; TLS_RECV_BUFFER_BYTES];
        let (mut s, _) = shake_in_memory(&c, false, &mut server, &mut region).unwrap();
        match read_all(&mut s, &mut region) {
            (data, Record::Refused((kind, _))) if data.is_empty() => {
                assert_eq!(kind, TlsFailure::AlertCertificateRequired);
            }
            other => panic!("{other:?}"),
        }

        let mut server = rustls::ServerConnection::new(config).unwrap();
        let mut region = vec![0u8; TLS_RECV_BUFFER_BYTES];
        let (mut s, _) = shake_in_memory(&c, false, &mut server, &mut region).unwrap();
        read_all(&mut s, &mut region);
        server.writer().write_all(b"x").unwrap();
        let mut sent = Vec::new();
        server.write_tls(&mut sent).unwrap();
        let last = sent.len() - 1;
        sent[last] ^= 1;
        s.append(&mut region, &sent);
        match read_all(&mut s, &mut region).1 {
            Record::Broken(why) => assert!(why.contains("authentication"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
