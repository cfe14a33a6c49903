//! The TLS record layer once the handshake is over: rustls shakes hands, then hands
//! over the traffic secrets ([`rustls::kernel`], the interface meant for kTLS) and
//! records are sealed into and opened in place in the caller's buffers with `ring`,
//! so a request costs no allocation (rustls 0.23 allocates a vector for every record
//! it encrypts, even through its unbuffered API).
//!
//! rustls keeps what only it can do: session tickets that arrive after the handshake
//! (`--tls-resume` needs them) and the secrets of a TLS 1.3 key update.
//!
//! Wire formats (RFC 8446 §5.2, RFC 5288 §3, RFC 7905 §2): TLS 1.3 seals the content
//! type after the plaintext and authenticates the record header, with the nonce the IV
//! XOR the sequence number; TLS 1.2 authenticates sequence number, type, version and
//! plaintext length, and AES-GCM sends the nonce's last 8 bytes before the ciphertext.

use ring::aead::{AES_128_GCM, AES_256_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce};
use ring::aead::{Algorithm, UnboundKey};
use rustls::client::ClientConnectionData;
use rustls::kernel::KernelConnection;
use rustls::{ConnectionTrafficSecrets, ExtractedSecrets, ProtocolVersion};
use std::ops::Range;

/// A record's header: type, version, length.
pub const HEADER_BYTES: usize = 5;
/// Most plaintext one record carries (2^14).
pub const PLAINTEXT_MAX: usize = 1 << 14;
/// Most ciphertext one record may carry (TLS 1.2: 2^14 + 2048; TLS 1.3 allows less).
pub const CIPHERTEXT_MAX: usize = PLAINTEXT_MAX + 2048;
/// The largest record on the wire: what a receive buffer must hold whole.
pub const RECORD_MAX: usize = HEADER_BYTES + CIPHERTEXT_MAX;
const TAG_BYTES: usize = 16;
const EXPLICIT_NONCE_BYTES: usize = 8;

const CHANGE_CIPHER_SPEC: u8 = 20;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;
const NEW_SESSION_TICKET: u8 = 4;
const KEY_UPDATE: u8 = 24;

/// Why a record could not be opened or the session cannot go on.
#[derive(Debug)]
pub enum RecordError {
    /// Authentication failed (corrupted, forged, or out of sequence).
    Decrypt,
    /// A record longer than TLS allows.
    Overflow(usize),
    /// The server sent a fatal alert (its description's number).
    Alert(u8),
    /// Something the protocol does not allow here.
    Unexpected(&'static str),
    /// rustls refused a ticket or a key update.
    Rustls(rustls::Error),
    /// A cipher suite this layer does not implement.
    Unsupported,
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Decrypt => write!(f, "a record failed authentication"),
            RecordError::Overflow(n) => write!(f, "a record of {n} bytes exceeds TLS's limit"),
            RecordError::Alert(d) => {
                write!(
                    f,
                    "received fatal alert {:?}",
                    rustls::AlertDescription::from(*d)
                )
            }
            RecordError::Unexpected(what) => write!(f, "unexpected {what}"),
            RecordError::Rustls(e) => write!(f, "{e}"),
            RecordError::Unsupported => write!(f, "cipher suite not supported"),
        }
    }
}

/// What one record held.
#[derive(Debug, PartialEq, Eq)]
pub enum Content {
    /// Application data: its plaintext, in place in the buffer.
    Data(Range<usize>),
    /// The server's close_notify: no more data follows.
    Closed,
    /// Nothing for the application (a session ticket, a key update).
    Control,
}

/// One direction's key and sequence number.
struct Keys {
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

impl Keys {
    fn new(seq: u64, secrets: &ConnectionTrafficSecrets) -> Result<(Keys, bool), RecordError> {
        let (alg, key, iv, gcm): (&'static Algorithm, _, _, bool) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&AES_128_GCM, key, iv, true),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&AES_256_GCM, key, iv, true),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&CHACHA20_POLY1305, key, iv, false)
            }
            _ => return Err(RecordError::Unsupported),
        };
        let key = UnboundKey::new(alg, key.as_ref()).map_err(|_| RecordError::Unsupported)?;
        let iv: [u8; 12] = iv
            .as_ref()
            .try_into()
            .map_err(|_| RecordError::Unsupported)?;
        Ok((
            Keys {
                key: LessSafeKey::new(key),
                iv,
                seq,
            },
            gcm,
        ))
    }

    /// The IV XOR the sequence number (TLS 1.3, ChaCha20 in TLS 1.2, and the nonce
    /// AES-GCM in TLS 1.2 sends explicitly).
    fn nonce(&self) -> [u8; 12] {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        n
    }
}

/// TLS 1.2's additional data: sequence number, type, version, plaintext length.
fn tls12_aad(seq: u64, typ: u8, len: usize) -> [u8; 13] {
    let mut a = [0u8; 13];
    a[..8].copy_from_slice(&seq.to_be_bytes());
    a[8] = typ;
    a[9] = 3;
    a[10] = 3;
    a[11..].copy_from_slice(&(len as u16).to_be_bytes());
    a
}

/// An established session's records: one per connection, made when its handshake
/// completes. Sealing and opening allocate nothing.
pub struct RecordLayer {
    tx: Keys,
    rx: Keys,
    tls13: bool,
    /// TLS 1.2 with AES-GCM: an explicit nonce precedes the ciphertext.
    explicit_nonce: bool,
    /// The server asked for a key update: ours goes out before the next data.
    key_update_due: bool,
    kernel: KernelConnection<ClientConnectionData>,
}

impl RecordLayer {
    pub fn new(
        secrets: ExtractedSecrets,
        kernel: KernelConnection<ClientConnectionData>,
    ) -> Result<RecordLayer, RecordError> {
        let (tx, gcm) = Keys::new(secrets.tx.0, &secrets.tx.1)?;
        let (rx, _) = Keys::new(secrets.rx.0, &secrets.rx.1)?;
        let tls13 = kernel.protocol_version() == ProtocolVersion::TLSv1_3;
        Ok(RecordLayer {
            tx,
            rx,
            tls13,
            explicit_nonce: !tls13 && gcm,
            key_update_due: false,
            kernel,
        })
    }

    /// Ciphertext `plain` becomes at most (headers, nonces, tags and all).
    pub fn sealed_len(plain: usize) -> usize {
        let records = plain.div_ceil(PLAINTEXT_MAX).max(1);
        plain + records * (HEADER_BYTES + EXPLICIT_NONCE_BYTES + TAG_BYTES)
    }

    /// The largest plaintext whose sealed records fit `space` bytes (a key update's
    /// record included): what one send may take when its ciphertext must fit a region.
    pub fn plain_fitting(space: usize) -> usize {
        let room = space.saturating_sub(crate::limits::TLS_RECORD_OVERHEAD_BYTES);
        let mut n = room;
        while n > 0 && RecordLayer::sealed_len(n) > room {
            let records = n.div_ceil(PLAINTEXT_MAX);
            n = n.saturating_sub((RecordLayer::sealed_len(n) - room).max(records));
        }
        n
    }

    /// Seals `plain` as application data records into `out`; returns the bytes
    /// written, or None when `out` is too small (nothing is sent then).
    pub fn seal(&mut self, plain: &[u8], out: &mut [u8]) -> Option<usize> {
        let mut n = 0;
        if self.key_update_due {
            // KeyUpdate(update_not_requested), under the old key; then the new one.
            n += self.seal_record(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0], out)?;
            let (seq, secrets) = self.kernel.update_tx_secret().ok()?;
            self.tx = Keys::new(seq, &secrets).ok()?.0;
            self.key_update_due = false;
        }
        for chunk in plain.chunks(PLAINTEXT_MAX) {
            n += self.seal_record(APPLICATION_DATA, chunk, &mut out[n..])?;
        }
        Some(n)
    }

    fn seal_record(&mut self, typ: u8, plain: &[u8], out: &mut [u8]) -> Option<usize> {
        let nonce = self.tx.nonce();
        let (body, total) = if self.tls13 {
            let body = plain.len() + 1;
            (body, HEADER_BYTES + body + TAG_BYTES)
        } else {
            let ex = if self.explicit_nonce {
                EXPLICIT_NONCE_BYTES
            } else {
                0
            };
            (plain.len(), HEADER_BYTES + ex + plain.len() + TAG_BYTES)
        };
        let out = out.get_mut(..total)?;
        let wire_len = (total - HEADER_BYTES) as u16;
        let outer = if self.tls13 { APPLICATION_DATA } else { typ };
        let header = [outer, 3, 3, (wire_len >> 8) as u8, wire_len as u8];
        out[..HEADER_BYTES].copy_from_slice(&header);
        let mut at = HEADER_BYTES;
        if self.explicit_nonce {
            out[at..at + EXPLICIT_NONCE_BYTES].copy_from_slice(&nonce[4..]);
            at += EXPLICIT_NONCE_BYTES;
        }
        out[at..at + plain.len()].copy_from_slice(plain);
        let tag = if self.tls13 {
            out[at + plain.len()] = typ;
            self.tx.key.seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(header),
                &mut out[at..at + body],
            )
        } else {
            self.tx.key.seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(tls12_aad(self.tx.seq, typ, plain.len())),
                &mut out[at..at + body],
            )
        }
        .ok()?;
        out[at + body..].copy_from_slice(tag.as_ref());
        self.tx.seq += 1;
        Some(total)
    }

    /// Opens the first record of `buf` in place: None when it has not arrived whole,
    /// else the bytes it took and what it held.
    pub fn open(&mut self, buf: &mut [u8]) -> Result<Option<(usize, Content)>, RecordError> {
        if buf.len() < HEADER_BYTES {
            return Ok(None);
        }
        let typ = buf[0];
        let len = u16::from_be_bytes([buf[3], buf[4]]) as usize;
        if len > CIPHERTEXT_MAX {
            return Err(RecordError::Overflow(len));
        }
        let used = HEADER_BYTES + len;
        if buf.len() < used {
            return Ok(None);
        }
        if typ == CHANGE_CIPHER_SPEC {
            return Ok(Some((used, Content::Control))); // middlebox compatibility
        }
        let header: [u8; HEADER_BYTES] = [buf[0], buf[1], buf[2], buf[3], buf[4]];
        let nonce = self.rx.nonce();
        let (typ, range) = if self.tls13 {
            if typ != APPLICATION_DATA || len < TAG_BYTES + 1 {
                return Err(RecordError::Unexpected("unprotected record"));
            }
            let plain = self
                .rx
                .key
                .open_in_place(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(header),
                    &mut buf[HEADER_BYTES..used],
                )
                .map_err(|_| RecordError::Decrypt)?;
            // The content type is the last byte that is not padding.
            let Some(end) = plain.iter().rposition(|&b| b != 0) else {
                return Err(RecordError::Unexpected("record without a content type"));
            };
            (plain[end], HEADER_BYTES..HEADER_BYTES + end)
        } else {
            let ex = if self.explicit_nonce {
                EXPLICIT_NONCE_BYTES
            } else {
                0
            };
            if len < ex + TAG_BYTES {
                return Err(RecordError::Decrypt);
            }
            let nonce = if self.explicit_nonce {
                let mut n = self.rx.iv;
                n[4..].copy_from_slice(&buf[HEADER_BYTES..HEADER_BYTES + ex]);
                n
            } else {
                nonce
            };
            let plain_len = len - ex - TAG_BYTES;
            let start = HEADER_BYTES + ex;
            self.rx
                .key
                .open_in_place(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(tls12_aad(self.rx.seq, typ, plain_len)),
                    &mut buf[start..used],
                )
                .map_err(|_| RecordError::Decrypt)?;
            (typ, start..start + plain_len)
        };
        self.rx.seq += 1;
        let content = match typ {
            APPLICATION_DATA => Content::Data(range),
            ALERT => match buf[range] {
                [_, 0] => Content::Closed,  // close_notify
                [1, _] => Content::Control, // a warning
                [_, d] => return Err(RecordError::Alert(d)),
                _ => return Err(RecordError::Unexpected("alert length")),
            },
            HANDSHAKE => {
                self.handshake(range, buf)?;
                Content::Control
            }
            _ => return Err(RecordError::Unexpected("record type")),
        };
        Ok(Some((used, content)))
    }

    /// Handshake messages after the handshake: TLS 1.3 session tickets go to rustls's
    /// cache, key updates renew the receiving key (and ours, when asked). TLS 1.2's
    /// only one, a renegotiation request, is ignored (as it may be).
    fn handshake(&mut self, range: Range<usize>, buf: &[u8]) -> Result<(), RecordError> {
        if !self.tls13 {
            return Ok(());
        }
        let mut msgs = &buf[range];
        while let [typ, a, b, c, rest @ ..] = msgs {
            let len = u32::from_be_bytes([0, *a, *b, *c]) as usize;
            if rest.len() < len {
                return Err(RecordError::Unexpected(
                    "handshake message split across records",
                ));
            }
            let (body, next) = rest.split_at(len);
            match *typ {
                NEW_SESSION_TICKET => self
                    .kernel
                    .handle_new_session_ticket(body)
                    .map_err(RecordError::Rustls)?,
                KEY_UPDATE => {
                    let (seq, secrets) = self
                        .kernel
                        .update_rx_secret()
                        .map_err(RecordError::Rustls)?;
                    self.rx = Keys::new(seq, &secrets)?.0;
                    self.key_update_due |= body.first() == Some(&1);
                }
                _ => return Err(RecordError::Unexpected("handshake message")),
            }
            msgs = next;
        }
        if !msgs.is_empty() {
            return Err(RecordError::Unexpected(
                "handshake message split across records",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::tls::{TlsClient, TlsVersion, Trust};
    use crate::transport::tls_session::shake_in_memory;
    use rustls::CipherSuite as S;
    use std::io::{Read, Write};

    /// A session with an in-memory rustls server offering only `suite`: the client's
    /// record layer, the server, and what the server sent after the handshake.
    fn session(
        version: TlsVersion,
        suite: S,
        dir: &std::path::Path,
    ) -> (RecordLayer, rustls::ServerConnection, Vec<u8>) {
        let cert = std::fs::read(dir.join("cert.pem")).unwrap();
        let key = std::fs::read(dir.join("key.pem")).unwrap();
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites.retain(|s| s.suite() == suite);
        let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                crate::transport::tls::parse_certs(&cert).unwrap(),
                crate::transport::tls::parse_key(&key).unwrap(),
            )
            .unwrap();
        let mut server = rustls::ServerConnection::new(std::sync::Arc::new(config)).unwrap();
        let tls = TlsClient::new("localhost", Trust::Insecure, &[], Some(version), 0.0).unwrap();
        let mut region = vec![0u8; RECORD_MAX];
        let (client, _) = shake_in_memory(&tls, false, &mut server, &mut region).unwrap();
        let (records, held) = client.into_records();
        assert_eq!(records.kernel.negotiated_cipher_suite().suite(), suite);
        (records, server, region[..held].to_vec())
    }

    /// Every AEAD this layer implements, in both versions, against rustls's own
    /// record layer: requests sealed here read back on the server, responses the
    /// server wrote open here (session tickets first, under TLS 1.3); a flipped bit
    /// fails authentication.
    #[test]
    fn records_round_trip_with_rustls_for_every_suite() {
        let dir = tempfile::tempdir().unwrap();
        crate::transport::tls::self_signed_localhost_in(dir.path());
        for (version, suite) in [
            (TlsVersion::V13, S::TLS13_AES_128_GCM_SHA256),
            (TlsVersion::V13, S::TLS13_AES_256_GCM_SHA384),
            (TlsVersion::V13, S::TLS13_CHACHA20_POLY1305_SHA256),
            (TlsVersion::V12, S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
            (TlsVersion::V12, S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
            (
                TlsVersion::V12,
                S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            ),
        ] {
            let (mut rl, mut server, mut pending) = session(version, suite, dir.path());
            // Header, plaintext, tag; TLS 1.3 adds the content type, TLS 1.2's
            // AES-GCM the explicit nonce.
            let want = 5 + 2 + 16 + usize::from(rl.tls13) + if rl.explicit_nonce { 8 } else { 0 };
            assert!(want <= RecordLayer::sealed_len(2));
            for round in 0..3u8 {
                let request = [b'q', round];
                let mut wire = [0u8; 256];
                let n = rl.seal(&request, &mut wire).unwrap();
                assert_eq!(n, want, "{suite:?}");
                server.read_tls(&mut &wire[..n]).unwrap();
                server.process_new_packets().unwrap();
                let mut got = [0u8; 2];
                server.reader().read_exact(&mut got).unwrap();
                assert_eq!(got, request, "{suite:?}");
                server.writer().write_all(&[b'r', round]).unwrap();
                server.write_tls(&mut pending).unwrap();
                let mut data = Vec::new();
                let mut off = 0;
                while let Some((used, content)) = rl.open(&mut pending[off..]).unwrap() {
                    if let Content::Data(r) = content {
                        data.extend_from_slice(&pending[off + r.start..off + r.end]);
                    }
                    off += used;
                }
                assert_eq!(off, pending.len(), "{suite:?}: whole records");
                assert_eq!(data, [b'r', round], "{suite:?}");
                pending.clear();
            }
            server.writer().write_all(b"x").unwrap();
            server.write_tls(&mut pending).unwrap();
            let last = pending.len() - 1;
            pending[last] ^= 1;
            assert!(
                matches!(rl.open(&mut pending), Err(RecordError::Decrypt)),
                "{suite:?}"
            );
        }
    }

    #[test]
    fn the_plaintext_that_fits_seals_within_the_space() {
        use crate::limits::TLS_RECORD_OVERHEAD_BYTES;
        for space in [0, 1, 63, 64, 65, 100, 2048, 16_448, 16_500, 40_000, 300_000] {
            let n = RecordLayer::plain_fitting(space);
            if n > 0 {
                assert!(
                    RecordLayer::sealed_len(n) + TLS_RECORD_OVERHEAD_BYTES <= space,
                    "{space}: {n}"
                );
            }
            // Not much less than the space allows: one record's overhead per 16 KiB.
            let slack = TLS_RECORD_OVERHEAD_BYTES
                + (space / PLAINTEXT_MAX + 1) * 29
                + space / PLAINTEXT_MAX;
            assert!(n + slack >= space, "{space}: {n}");
        }
    }
}
