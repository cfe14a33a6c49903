//! TLS with rustls: the client configuration a run shares (trust, SNI, ALPN, version,
//! client certificate), the server configuration of the sink, and handshake failures
//! sorted into kinds.
//!
//! The engine owns the I/O: io_uring moves ciphertext between the socket and pre-sized
//! per-connection buffers (this kernel has no kTLS). Each connection's session
//! ([`crate::transport::tls_session`]) shakes hands in them with rustls's unbuffered
//! connection, then hands its secrets to the record layer
//! ([`crate::transport::tls_record`]), which serves the requests. Everything here runs
//! at start-up, at connect or on a failure, never per request.
//!
//! The crypto provider is `ring`: it builds with a C compiler alone (aws-lc-rs needs
//! cmake and Go or prebuilt objects), and its AES-GCM and ChaCha20 are the assembly
//! BoringSSL uses.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{UnbufferedClientConnection, WebPkiServerVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, Error, OtherError,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Session tickets kept for `--tls-resume` (shared by the workers; rustls's default).
const SESSIONS_CACHED: usize = 256;

/// `--tls-version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    V12,
    V13,
}

impl std::str::FromStr for TlsVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "1.2" => Ok(TlsVersion::V12),
            "1.3" => Ok(TlsVersion::V13),
            _ => Err(format!("must be 1.2 or 1.3, got {s:?}")),
        }
    }
}

/// Whom the client trusts.
#[derive(Debug, Clone)]
pub enum Trust {
    /// The certificates of a PEM file (`--tls-ca`) or of the system store.
    Roots(Vec<CertificateDer<'static>>),
    /// `--tls-insecure`: any certificate, any name. The report says so.
    Insecure,
}

/// The client side of `--tls`, shared by every worker of a run.
#[derive(Debug)]
pub struct TlsClient {
    /// Never resumes (each handshake full).
    pub config: Arc<ClientConfig>,
    /// Resumes with the tickets its earlier handshakes received (`--tls-resume`);
    /// `None` when the ratio is 0.
    pub resuming: Option<Arc<ClientConfig>>,
    /// `--tls-resume`: the share of new connections that try to resume.
    pub resume_ratio: f64,
    pub server_name: ServerName<'static>,
    /// `--tls-sni` or the target's host name, as given.
    pub sni: String,
    pub insecure: bool,
    /// Bytes of the client certificate chain (`--tls-cert`; 0 without): the
    /// handshake's send buffer must hold it.
    pub identity_bytes: usize,
    /// `--tls-resume`: the sessions the server issued and those offered back to it.
    pub sessions: Arc<SessionCounts>,
    /// The first handshake that failed, and why (for the one line when no connection
    /// could be established). Written once, on a failure; never on the hot path.
    first_failure: Mutex<Option<(TlsFailure, String)>>,
}

impl TlsClient {
    /// A client trusting `trust`, naming `sni`, offering `alpn`, limited to `version`.
    pub fn new(
        sni: &str,
        trust: Trust,
        alpn: &[String],
        version: Option<TlsVersion>,
        resume_ratio: f64,
    ) -> Result<TlsClient, String> {
        let server_name = ServerName::try_from(sni.to_string())
            .map_err(|_| format!("{sni:?} is not a host name or IP address"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: &[&rustls::SupportedProtocolVersion] = match version {
            None => rustls::DEFAULT_VERSIONS,
            Some(TlsVersion::V12) => &[&rustls::version::TLS12],
            Some(TlsVersion::V13) => &[&rustls::version::TLS13],
        };
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(|e| e.to_string())?;
        let insecure = matches!(trust, Trust::Insecure);
        let mut config = match trust {
            Trust::Roots(certs) => {
                let mut roots = rustls::RootCertStore::empty();
                let (added, _ignored) = roots.add_parsable_certificates(certs.iter().cloned());
                if added == 0 {
                    return Err("no usable CA certificate".into());
                }
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| e.to_string())?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(Pinning {
                        webpki,
                        pinned: certs,
                    }))
                    .with_no_client_auth()
            }
            Trust::Insecure => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
                .with_no_client_auth(),
        };
        config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
        config.resumption = rustls::client::Resumption::disabled();
        // After the handshake the worker seals and opens records itself
        // (`tls_record`), with the secrets rustls hands over.
        config.enable_secret_extraction = true;
        let sessions = Arc::new(SessionCounts::default());
        let resuming = (resume_ratio > 0.0).then(|| {
            let mut r = config.clone();
            r.resumption = rustls::client::Resumption::store(Arc::new(CountingStore {
                inner: rustls::client::ClientSessionMemoryCache::new(SESSIONS_CACHED),
                counts: sessions.clone(),
            }));
            Arc::new(r)
        });
        Ok(TlsClient {
            config: Arc::new(config),
            resuming,
            resume_ratio,
            server_name,
            sni: sni.to_string(),
            insecure,
            identity_bytes: 0,
            sessions,
            first_failure: Mutex::new(None),
        })
    }

    /// The same client, presenting `certs` (its chain, leaf first) signed for with
    /// `key` when a server asks for a client certificate (`--tls-cert`,
    /// `--tls-key`). Err: the key does not fit the certificate, or is unusable.
    pub fn with_identity(
        mut self,
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<TlsClient, String> {
        let chain_bytes = certs.iter().map(|c| c.len()).sum();
        let provider = rustls::crypto::ring::default_provider();
        let certified = rustls::sign::CertifiedKey::from_der(certs, key, &provider)
            .map_err(|e| format!("does not fit the certificate of --tls-cert ({e})"))?;
        let resolver = Arc::new(rustls::sign::SingleCertAndKey::from(certified));
        for config in [Some(&mut self.config), self.resuming.as_mut()]
            .into_iter()
            .flatten()
        {
            let mut c = (**config).clone();
            c.client_auth_cert_resolver = resolver.clone();
            *config = Arc::new(c);
        }
        self.identity_bytes = chain_bytes;
        Ok(self)
    }

    /// A new client session (at connect; never per request): rustls's unbuffered
    /// connection, which reads from and writes into the caller's buffers, for the
    /// handshake; then its secrets go to the record layer (both in a
    /// [`TlsSession`](crate::transport::tls_session::TlsSession)). With `resume`, the
    /// session offers a ticket an earlier handshake received (the first handshakes
    /// have none and are full).
    pub fn session(&self, resume: bool) -> Result<UnbufferedClientConnection, Error> {
        let config = match (&self.resuming, resume) {
            (Some(r), true) => r.clone(),
            _ => self.config.clone(),
        };
        UnbufferedClientConnection::new(config, self.server_name.clone())
    }

    /// Whether a new session tries to resume (`--tls-resume`): `draw`, a uniform
    /// number in [0, 1) from the worker's seeded stream, is drawn only when the ratio
    /// is above 0 (a run without resumption draws nothing).
    pub fn resumes(&self, draw: impl FnOnce() -> f64) -> bool {
        self.resume_ratio > 0.0 && draw() < self.resume_ratio
    }

    /// Remembers the first failed handshake.
    #[cold]
    pub fn note_failure(&self, kind: TlsFailure, why: &str) {
        if let Ok(mut f) = self.first_failure.lock()
            && f.is_none()
        {
            *f = Some((kind, why.to_string()));
        }
    }

    /// The first failed handshake: its kind and rustls's description.
    pub fn first_failure(&self) -> Option<(TlsFailure, String)> {
        self.first_failure.lock().ok().and_then(|f| f.clone())
    }
}

/// `--tls-resume`, seen from the client's session store: sessions the server issued
/// (TLS 1.3 tickets, TLS 1.2 session ids or tickets) and handshakes that offered one
/// back. With the resumed handshakes they tell apart a server that never issues a
/// session from one that refuses those offered. Counted at connect, never per request.
#[derive(Debug, Default)]
pub struct SessionCounts {
    issued: AtomicU64,
    offered: AtomicU64,
}

impl SessionCounts {
    pub fn issued(&self) -> u64 {
        self.issued.load(Ordering::Relaxed)
    }

    pub fn offered(&self) -> u64 {
        self.offered.load(Ordering::Relaxed)
    }
}

/// rustls's in-memory session store, counting into [`SessionCounts`]. rustls looks a
/// TLS 1.3 ticket up first and a TLS 1.2 session only without one, so a handshake
/// that offers a session counts once.
#[derive(Debug)]
struct CountingStore {
    inner: rustls::client::ClientSessionMemoryCache,
    counts: Arc<SessionCounts>,
}

impl CountingStore {
    fn offered<T>(&self, found: Option<T>) -> Option<T> {
        if found.is_some() {
            self.counts.offered.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    fn issued(&self) {
        self.counts.issued.fetch_add(1, Ordering::Relaxed);
    }
}

impl rustls::client::ClientSessionStore for CountingStore {
    fn set_kx_hint(&self, server_name: ServerName<'static>, group: rustls::NamedGroup) {
        self.inner.set_kx_hint(server_name, group)
    }

    fn kx_hint(&self, server_name: &ServerName<'_>) -> Option<rustls::NamedGroup> {
        self.inner.kx_hint(server_name)
    }

    fn set_tls12_session(
        &self,
        server_name: ServerName<'static>,
        value: rustls::client::Tls12ClientSessionValue,
    ) {
        self.issued();
        self.inner.set_tls12_session(server_name, value)
    }

    fn tls12_session(
        &self,
        server_name: &ServerName<'_>,
    ) -> Option<rustls::client::Tls12ClientSessionValue> {
        self.offered(self.inner.tls12_session(server_name))
    }

    fn remove_tls12_session(&self, server_name: &ServerName<'static>) {
        self.inner.remove_tls12_session(server_name)
    }

    fn insert_tls13_ticket(
        &self,
        server_name: ServerName<'static>,
        value: rustls::client::Tls13ClientSessionValue,
    ) {
        self.issued();
        self.inner.insert_tls13_ticket(server_name, value)
    }

    fn take_tls13_ticket(
        &self,
        server_name: &ServerName<'static>,
    ) -> Option<rustls::client::Tls13ClientSessionValue> {
        self.offered(self.inner.take_tls13_ticket(server_name))
    }
}

/// Why a handshake failed, in words for the run's one line: rustls's description (or
/// the words of [`CaNotPinned`], which rustls would show by its `Debug`) and, for a
/// certificate that did not verify, the fix.
pub fn describe(e: &Error) -> String {
    if let Error::InvalidCertificate(CertificateError::Other(OtherError(o))) = e
        && o.is::<CaNotPinned>()
    {
        return format!("invalid peer certificate: {o}");
    }
    let fix = match TlsFailure::of(e) {
        TlsFailure::UnknownCa => {
            "no certificate in --tls-ca (or the system's store without it) signed the \
             server's: give the CA that did, or the server's own certificate, with --tls-ca"
        }
        TlsFailure::NameMismatch => {
            "the certificate is not for the name sent: connect by a name it carries, or \
             send one with --tls-sni"
        }
        TlsFailure::Expired | TlsFailure::NotYetValid => {
            "renew the server's certificate, or check this host's clock"
        }
        _ => return e.to_string(),
    };
    format!("{e}: {fix}")
}

/// `--tls-insecure`: accepts any certificate for any name, but still checks that the
/// handshake's signatures are made with the certificate's key (so the session keys
/// are the server's), as `curl -k` does.
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Trust in the certificates of `--tls-ca` (or the system store): webpki's chain
/// verification, and besides it each of those certificates pinned exactly, as curl's
/// `--cacert` accepts a server whose certificate is the one given. A self-signed
/// certificate made the usual way (`openssl req -x509 ...`) is marked a CA
/// (basicConstraints CA:TRUE), which webpki refuses as a server's
/// (`CaUsedAsEndEntity`) even when it is the very certificate trusted. The pin checks
/// what still means something for a certificate trusted by its bytes: its dates (webpki
/// checks them before the CA flag, so any error but an expiry means they held), its
/// purpose and its name; and the handshake's signatures are verified with its key
/// either way, so the server holds the pinned certificate's private key.
#[derive(Debug)]
struct Pinning {
    webpki: Arc<WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for Pinning {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let e = match (self.webpki).verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp,
            now,
        ) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let pinned = (self.pinned.iter()).any(|p| p.as_ref() == end_entity.as_ref());
        match (pinned, &e) {
            (true, Error::InvalidCertificate(c)) if pin_overrides(c) => {
                let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&cert, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            (false, _) if is_ca_used_as_end_entity(&e) => Err(Error::InvalidCertificate(
                CertificateError::Other(OtherError(Arc::new(CaNotPinned))),
            )),
            _ => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Whether a pinned certificate is accepted although webpki refused it with `c`: the
/// refusals about its chain (a CA flag, an issuer not found, its own signature: the
/// bytes are trusted, not a signer), never those about the certificate itself (its
/// dates, its purpose, its name, a revocation).
fn pin_overrides(c: &CertificateError) -> bool {
    use CertificateError as C;
    !matches!(
        c,
        C::Expired
            | C::ExpiredContext { .. }
            | C::NotValidYet
            | C::NotValidYetContext { .. }
            | C::InvalidPurpose
            | C::InvalidPurposeContext { .. }
            | C::NotValidForName
            | C::NotValidForNameContext { .. }
            | C::Revoked
            | C::BadEncoding
    )
}

/// webpki's refusal of a certificate marked a CA (basicConstraints CA:TRUE) as the
/// server's own.
fn is_ca_used_as_end_entity(e: &Error) -> bool {
    matches!(e, Error::InvalidCertificate(CertificateError::Other(OtherError(o)))
        if matches!(o.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity)))
}

/// A server certificate marked a CA and not one of the trusted certificates: the
/// cause and the fix, for the run's one line.
#[derive(Debug)]
struct CaNotPinned;

impl std::fmt::Display for CaNotPinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "the server's certificate is marked a CA (basicConstraints CA:TRUE, as \
             `openssl req -x509` makes it) and is none of the --tls-ca certificates: \
             give the server's own certificate in --tls-ca (trusted exactly, as curl's \
             --cacert), or serve one with basicConstraints CA:FALSE signed by a CA in \
             --tls-ca",
        )
    }
}

impl std::error::Error for CaNotPinned {}

/// The certificates of a PEM file's bytes (`--tls-ca`, `--cert`).
pub fn parse_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("not a PEM certificate file ({e})"))?;
    if certs.is_empty() {
        return Err("no certificate in the file".into());
    }
    Ok(certs)
}

/// The private key of a PEM file's bytes (`--tls-key`, the sink's `--key`).
pub fn parse_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| format!("not a PEM private key ({e})"))
}

/// The system's trusted roots (rustls-native-certs: the distribution's store, which
/// its administrators keep current, where webpki-roots would freeze Mozilla's list
/// into the binary). Read once, at start.
pub fn system_roots() -> Result<Vec<CertificateDer<'static>>, String> {
    let found = rustls_native_certs::load_native_certs();
    if found.certs.is_empty() {
        return Err(match found.errors.first() {
            Some(e) => format!("no system CA certificates ({e}); give --tls-ca FILE"),
            None => "no system CA certificates; give --tls-ca FILE".into(),
        });
    }
    Ok(found.certs)
}

/// The sink's server configuration from PEM bytes of its certificate chain and key.
pub fn server_config(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs = parse_certs(cert_pem).map_err(|e| format!("--cert: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| format!("--key: not a PEM private key ({e})"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(rustls::DEFAULT_VERSIONS)
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("--key: does not fit the certificate ({e})"))?;
    Ok(Arc::new(config))
}

/// Why a handshake failed, counted per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum TlsFailure {
    /// The server's certificate chains to no trusted root.
    UnknownCa,
    /// The certificate does not name the server (`--tls-sni`).
    NameMismatch,
    Expired,
    NotYetValid,
    /// Another certificate problem (bad signature, revoked, wrong purpose, ...).
    BadCertificate,
    /// No protocol version in common (`--tls-version`).
    ProtocolVersion,
    /// No cipher suite, group or signature scheme in common.
    NoCommonParameters,
    /// The server sent an alert (each kind below is one alert by name).
    AlertHandshakeFailure,
    AlertProtocolVersion,
    AlertBadCertificate,
    AlertUnknownCa,
    AlertUnrecognisedName,
    AlertNoApplicationProtocol,
    /// TLS 1.3's refusal of a connection without a client certificate
    /// (`--tls-cert`); it arrives after the client's side of the handshake ended,
    /// before any response.
    AlertCertificateRequired,
    AlertInternalError,
    AlertDecodeError,
    /// Any other alert.
    AlertOther,
    /// The server closed the connection during the handshake.
    Closed,
    /// The TCP connect completed but the handshake did not within `--timeout` (a
    /// server that accepts and never answers the ClientHello).
    HandshakeTimeout,
    /// Anything else (a malformed message, a peer misbehaving).
    Other,
}

impl TlsFailure {
    pub const ALL: [TlsFailure; 20] = [
        TlsFailure::UnknownCa,
        TlsFailure::NameMismatch,
        TlsFailure::Expired,
        TlsFailure::NotYetValid,
        TlsFailure::BadCertificate,
        TlsFailure::ProtocolVersion,
        TlsFailure::NoCommonParameters,
        TlsFailure::AlertHandshakeFailure,
        TlsFailure::AlertProtocolVersion,
        TlsFailure::AlertBadCertificate,
        TlsFailure::AlertUnknownCa,
        TlsFailure::AlertUnrecognisedName,
        TlsFailure::AlertNoApplicationProtocol,
        TlsFailure::AlertCertificateRequired,
        TlsFailure::AlertInternalError,
        TlsFailure::AlertDecodeError,
        TlsFailure::AlertOther,
        TlsFailure::Closed,
        TlsFailure::HandshakeTimeout,
        TlsFailure::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TlsFailure::UnknownCa => "unknown_ca",
            TlsFailure::NameMismatch => "name_mismatch",
            TlsFailure::Expired => "expired",
            TlsFailure::NotYetValid => "not_yet_valid",
            TlsFailure::BadCertificate => "bad_certificate",
            TlsFailure::ProtocolVersion => "protocol_version",
            TlsFailure::NoCommonParameters => "no_common_parameters",
            TlsFailure::AlertHandshakeFailure => "alert_handshake_failure",
            TlsFailure::AlertProtocolVersion => "alert_protocol_version",
            TlsFailure::AlertBadCertificate => "alert_bad_certificate",
            TlsFailure::AlertUnknownCa => "alert_unknown_ca",
            TlsFailure::AlertUnrecognisedName => "alert_unrecognised_name",
            TlsFailure::AlertNoApplicationProtocol => "alert_no_application_protocol",
            TlsFailure::AlertCertificateRequired => "alert_certificate_required",
            TlsFailure::AlertInternalError => "alert_internal_error",
            TlsFailure::AlertDecodeError => "alert_decode_error",
            TlsFailure::AlertOther => "alert_other",
            TlsFailure::Closed => "closed",
            TlsFailure::HandshakeTimeout => "handshake_timeout",
            TlsFailure::Other => "other",
        }
    }

    /// A verification failure of the server's certificate (the run's one line names
    /// it when no connection could be established).
    pub fn is_verification(self) -> bool {
        matches!(
            self,
            TlsFailure::UnknownCa
                | TlsFailure::NameMismatch
                | TlsFailure::Expired
                | TlsFailure::NotYetValid
                | TlsFailure::BadCertificate
        )
    }

    /// The kind of a rustls error met during the handshake.
    pub fn of(e: &Error) -> TlsFailure {
        use rustls::PeerIncompatible as P;
        match e {
            Error::InvalidCertificate(c) => match c {
                CertificateError::UnknownIssuer => TlsFailure::UnknownCa,
                // Not trusted: no CA given signed it, and it is not the one given.
                CertificateError::Other(OtherError(o)) if o.is::<CaNotPinned>() => {
                    TlsFailure::UnknownCa
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => TlsFailure::NameMismatch,
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    TlsFailure::Expired
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    TlsFailure::NotYetValid
                }
                _ => TlsFailure::BadCertificate,
            },
            Error::PeerIncompatible(
                P::ServerDoesNotSupportTls12Or13
                | P::ServerTlsVersionIsDisabledByOurConfig
                | P::SupportedVersionsExtensionRequired
                | P::Tls12NotOffered
                | P::Tls12NotOfferedOrEnabled,
            ) => TlsFailure::ProtocolVersion,
            Error::PeerIncompatible(_) => TlsFailure::NoCommonParameters,
            Error::AlertReceived(a) => match a {
                AlertDescription::HandshakeFailure => TlsFailure::AlertHandshakeFailure,
                AlertDescription::ProtocolVersion => TlsFailure::AlertProtocolVersion,
                AlertDescription::BadCertificate => TlsFailure::AlertBadCertificate,
                AlertDescription::UnknownCA => TlsFailure::AlertUnknownCa,
                AlertDescription::UnrecognisedName => TlsFailure::AlertUnrecognisedName,
                AlertDescription::NoApplicationProtocol => TlsFailure::AlertNoApplicationProtocol,
                AlertDescription::CertificateRequired => TlsFailure::AlertCertificateRequired,
                AlertDescription::InternalError => TlsFailure::AlertInternalError,
                AlertDescription::DecodeError => TlsFailure::AlertDecodeError,
                _ => TlsFailure::AlertOther,
            },
            _ => TlsFailure::Other,
        }
    }
}

/// A certificate for `localhost` and 127.0.0.1 signed by its own key, and that key
/// (PEM each): what the TLS baseline's sink serves and its client trusts, nothing else.
#[derive(Clone)]
pub struct SelfSigned {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for SelfSigned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SelfSigned { localhost, key not shown }")
    }
}

/// A fresh [`SelfSigned`] certificate, made in process by rcgen (the rustls project's
/// certificate generator, on the same `ring`): a P-256 key, the names `localhost` and
/// 127.0.0.1, no CA flag (webpki refuses a CA certificate as a server's), valid from
/// 1975 to 4096 (rcgen's defaults: no clock is read and no run can outlive it).
pub fn self_signed_localhost() -> Result<SelfSigned, String> {
    let why = |e: rcgen::Error| format!("cannot make a certificate for localhost ({e})");
    let key = rcgen::KeyPair::generate().map_err(why)?;
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .map_err(why)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let cert = params.self_signed(&key).map_err(why)?;
    Ok(SelfSigned {
        cert_pem: cert.pem().into_bytes(),
        key_pem: key.serialize_pem().into_bytes(),
    })
}

/// For unit tests: [`self_signed_localhost`]'s certificate and key, also written to
/// `cert.pem` and `key.pem` in `dir` (a test's temporary directory).
#[cfg(test)]
pub(crate) fn self_signed_localhost_in(dir: &std::path::Path) -> (Vec<u8>, Vec<u8>) {
    let s = self_signed_localhost().expect("rcgen makes a certificate");
    std::fs::write(dir.join("cert.pem"), &s.cert_pem).unwrap();
    std::fs::write(dir.join("key.pem"), &s.key_pem).unwrap();
    (s.cert_pem, s.key_pem)
}

/// For unit tests: a TLS echo server (rustls, a thread) for the self-signed
/// localhost certificate `cert`/`key`: accepts one connection on `listener` and sends
/// back every byte it receives until the client closes.
#[cfg(test)]
pub(crate) fn echo_server(
    listener: std::net::TcpListener,
    cert: &[u8],
    key: &[u8],
) -> std::thread::JoinHandle<()> {
    let config = server_config(cert, key).unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (sock, _) = listener.accept().unwrap();
        let conn = rustls::ServerConnection::new(config).unwrap();
        let mut s = rustls::StreamOwned::new(conn, sock);
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = s.read(&mut buf) {
            if s.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_errors_fall_into_their_kinds() {
        let cert = |c| TlsFailure::of(&Error::InvalidCertificate(c));
        assert_eq!(cert(CertificateError::UnknownIssuer), TlsFailure::UnknownCa);
        assert_eq!(
            cert(CertificateError::NotValidForName),
            TlsFailure::NameMismatch
        );
        assert_eq!(cert(CertificateError::Expired), TlsFailure::Expired);
        assert_eq!(
            cert(CertificateError::BadSignature),
            TlsFailure::BadCertificate
        );
        assert!(cert(CertificateError::Expired).is_verification());
        assert_eq!(
            TlsFailure::of(&Error::AlertReceived(AlertDescription::ProtocolVersion)),
            TlsFailure::AlertProtocolVersion
        );
        assert_eq!(
            TlsFailure::of(&Error::PeerIncompatible(
                rustls::PeerIncompatible::ServerDoesNotSupportTls12Or13
            )),
            TlsFailure::ProtocolVersion
        );
        assert!(!TlsFailure::AlertHandshakeFailure.is_verification());
    }

    /// Drives a handshake between `client` and a rustls server with `server`, in
    /// memory: the client's error when it refuses the server.
    fn shake(client: &TlsClient, server: Arc<rustls::ServerConfig>) -> Result<(), Error> {
        use rustls::{ClientConnection, Connection, ServerConnection};
        fn pass(from: &mut Connection, to: &mut Connection) {
            let mut wire = Vec::new();
            while from.wants_write() {
                from.write_tls(&mut wire).unwrap();
            }
            let mut rd = &wire[..];
            while !rd.is_empty() {
                to.read_tls(&mut rd).unwrap();
            }
        }
        let name = client.server_name.clone();
        let mut c = Connection::from(ClientConnection::new(client.config.clone(), name)?);
        let mut s = Connection::from(ServerConnection::new(server)?);
        for _ in 0..8 {
            pass(&mut c, &mut s);
            s.process_new_packets()?;
            pass(&mut s, &mut c);
            c.process_new_packets()?;
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(());
            }
        }
        panic!("the handshake did not end");
    }

    #[test]
    fn the_self_signed_certificate_is_trusted_alone_for_localhost() {
        let mine = self_signed_localhost().unwrap();
        let server = server_config(&mine.cert_pem, &mine.key_pem).unwrap();
        let trusting = |sni: &str, cert: &[u8], version| {
            let roots = Trust::Roots(parse_certs(cert).unwrap());
            TlsClient::new(sni, roots, &[], Some(version), 0.0).unwrap()
        };
        for version in [TlsVersion::V13, TlsVersion::V12] {
            for sni in ["localhost", "127.0.0.1"] {
                let c = trusting(sni, &mine.cert_pem, version);
                assert!(shake(&c, server.clone()).is_ok(), "{sni} {version:?}");
            }
        }
        // Another certificate made the same way is not trusted (same subject, so
        // webpki tries its key and finds a bad signature), nor another name.
        let other = self_signed_localhost().unwrap();
        assert_ne!(other.cert_pem, mine.cert_pem);
        let c = trusting("localhost", &other.cert_pem, TlsVersion::V13);
        let e = shake(&c, server.clone()).unwrap_err();
        assert_eq!(TlsFailure::of(&e), TlsFailure::BadCertificate, "{e}");
        let c = trusting("example.com", &mine.cert_pem, TlsVersion::V13);
        let e = shake(&c, server).unwrap_err();
        assert_eq!(TlsFailure::of(&e), TlsFailure::NameMismatch, "{e}");
        assert!(!format!("{mine:?}").contains("PRIVATE"));
    }

    /// A self-signed certificate for localhost marked a CA, as `openssl req -x509`
    /// makes it (basicConstraints CA:TRUE), and its key (PEM each).
    fn self_signed_ca_localhost() -> (Vec<u8>, Vec<u8>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "localhost");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        (cert.pem().into_bytes(), key.serialize_pem().into_bytes())
    }

    /// Issue 33: a certificate marked a CA is trusted as the server's when it is
    /// exactly one of the certificates given (webpki alone refuses it as
    /// `CaUsedAsEndEntity`); another such certificate is not, with the cause and the
    /// fix named; the pinned one is still checked for its name.
    #[test]
    fn a_ca_marked_self_signed_certificate_is_trusted_when_pinned_exactly() {
        let (cert, key) = self_signed_ca_localhost();
        let server = server_config(&cert, &key).unwrap();
        let trusting = |sni: &str, pem: &[u8], version| {
            let roots = Trust::Roots(parse_certs(pem).unwrap());
            TlsClient::new(sni, roots, &[], Some(version), 0.0).unwrap()
        };
        for version in [TlsVersion::V13, TlsVersion::V12] {
            let c = trusting("localhost", &cert, version);
            assert!(shake(&c, server.clone()).is_ok(), "{version:?}");
        }
        // Among other certificates in the file, too.
        let other = self_signed_localhost().unwrap();
        let both = [other.cert_pem.clone(), cert.clone()].concat();
        let c = trusting("localhost", &both, TlsVersion::V13);
        assert!(shake(&c, server.clone()).is_ok());
        // Another certificate made the same way: not trusted, cause and fix named.
        let (stranger, _) = self_signed_ca_localhost();
        let c = trusting("localhost", &stranger, TlsVersion::V13);
        let e = shake(&c, server.clone()).unwrap_err();
        assert_eq!(TlsFailure::of(&e), TlsFailure::UnknownCa, "{e}");
        let why = describe(&e);
        for needle in ["CA:TRUE", "openssl req -x509", "--tls-ca", "CA:FALSE"] {
            assert!(why.contains(needle), "{needle}: {why}");
        }
        // The pin trusts the bytes, not any name.
        let c = trusting("example.com", &cert, TlsVersion::V13);
        let e = shake(&c, server).unwrap_err();
        assert_eq!(TlsFailure::of(&e), TlsFailure::NameMismatch, "{e}");
    }

    #[test]
    fn kinds_are_listed_once_in_order() {
        for (i, k) in TlsFailure::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i, "{}", k.name());
        }
    }

    #[test]
    fn versions_and_names_are_checked() {
        assert_eq!("1.3".parse::<TlsVersion>(), Ok(TlsVersion::V13));
        assert!("1.1".parse::<TlsVersion>().is_err());
        assert!(TlsClient::new("bad name!", Trust::Insecure, &[], None, 0.0).is_err());
        let c = TlsClient::new("localhost", Trust::Insecure, &["h2".into()], None, 0.0).unwrap();
        assert!(c.insecure && c.session(true).is_ok() && c.resuming.is_none());
        let r = TlsClient::new("localhost", Trust::Insecure, &[], None, 0.5).unwrap();
        assert!(r.resuming.is_some() && r.session(true).is_ok());
        assert!(parse_certs(b"nothing").is_err());
    }
}
