//! `blaster sink --http2`: an HTTP/2 server on the sink's address, h2c with prior
//! knowledge or h2 over TLS (rustls, ALPN `h2`), answering every request with
//! [`ServerConn`] (a fixed or echoed body; gRPC unary calls echoed with
//! `grpc-status: 0`).
//!
//! Like the TLS front, one thread per connection with blocking I/O and poll(2) for
//! readiness: simple and exact, meant for tests and modest loads (a handful to a few
//! hundred connections, tens of thousands of requests a second), not for the io_uring
//! sink's held-connection scale. A loopback baseline through it is often bound by it,
//! and its figure is then the front's ceiling. A reply is written with a blocking
//! write (bounded by [`WRITE_TIMEOUT`]), so a client that neither reads nor closes
//! holds its own connection's thread only.

use super::stall::{Phase, Stall};
use crate::proto::h2::server::{Answer, ServerConn, ServerSettings, ServerStats};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often blocked threads look at the stop flag.
const POLL_MS: i32 = 50;
/// A write that makes no progress for this long ends its connection.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// After the graceful GOAWAY at stop, how long streams under way may take to finish.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
/// One read's worth of bytes.
const READ_BYTES: usize = 64 << 10;

/// How the front serves.
#[derive(Debug, Clone)]
pub struct H2Options {
    pub settings: ServerSettings,
    pub answer: Answer,
    /// h2 over TLS with this configuration (its ALPN set to `h2` here); h2c without.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Connections held at once; accepts beyond are closed and counted.
    pub connections_max: usize,
    /// Cores the front's threads run on (empty: where the kernel puts them).
    pub cores: Vec<usize>,
    /// `--stall S --every P`: every connection's thread freezes for S once every P
    /// (the io_uring sink's windows, [`super::stall`]): what arrives meanwhile is read
    /// and answered after it.
    pub stall: Option<(Duration, Duration)>,
    /// Each reply says the sink's own time with the request (`server-timing:
    /// sink;dur=MS`): the HTTP/2 baseline's `--server-time`.
    pub timed: bool,
}

/// The front's counts since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct H2Counts {
    pub connections_accepted: u64,
    pub connections_open: u64,
    /// Accepts closed at once for `connections_max`.
    pub connections_rejected: u64,
    /// Connections this side ended with a GOAWAY for a protocol error.
    pub connection_errors: u64,
    /// TLS handshakes that failed (no common ALPN, an untrusted certificate...).
    pub handshakes_failed: u64,
    /// Bytes read and written on the connections (plaintext: HTTP/2 frames).
    pub bytes_received: u64,
    pub bytes_sent: u64,
    /// The HTTP/2 layer's counts, summed over connections.
    pub h2: ServerStats,
}

#[derive(Default)]
struct Shared {
    accepted: AtomicU64,
    open: AtomicU64,
    rejected: AtomicU64,
    connection_errors: AtomicU64,
    handshakes_failed: AtomicU64,
    bytes_received: AtomicU64,
    bytes_sent: AtomicU64,
    requests: AtomicU64,
    grpc_calls: AtomicU64,
    refused_requests: AtomicU64,
    streams: AtomicU64,
    streams_refused: AtomicU64,
    streams_reset_by_peer: AtomicU64,
    stream_errors: AtomicU64,
    body_bytes_received: AtomicU64,
    body_bytes_sent: AtomicU64,
}

impl Shared {
    fn add(&self, s: &ServerStats) {
        let r = Ordering::Relaxed;
        self.requests.fetch_add(s.requests, r);
        self.grpc_calls.fetch_add(s.grpc_calls, r);
        self.refused_requests.fetch_add(s.refused_requests, r);
        self.streams.fetch_add(s.streams, r);
        self.streams_refused.fetch_add(s.streams_refused, r);
        self.streams_reset_by_peer
            .fetch_add(s.streams_reset_by_peer, r);
        self.stream_errors.fetch_add(s.stream_errors, r);
        self.body_bytes_received.fetch_add(s.body_bytes_received, r);
        self.body_bytes_sent.fetch_add(s.body_bytes_sent, r);
    }

    fn counts(&self) -> H2Counts {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        H2Counts {
            connections_accepted: g(&self.accepted),
            connections_open: g(&self.open),
            connections_rejected: g(&self.rejected),
            connection_errors: g(&self.connection_errors),
            handshakes_failed: g(&self.handshakes_failed),
            bytes_received: g(&self.bytes_received),
            bytes_sent: g(&self.bytes_sent),
            h2: ServerStats {
                requests: g(&self.requests),
                grpc_calls: g(&self.grpc_calls),
                refused_requests: g(&self.refused_requests),
                streams: g(&self.streams),
                streams_refused: g(&self.streams_refused),
                streams_reset_by_peer: g(&self.streams_reset_by_peer),
                stream_errors: g(&self.stream_errors),
                body_bytes_received: g(&self.body_bytes_received),
                body_bytes_sent: g(&self.body_bytes_sent),
            },
        }
    }
}

/// The running front: its address, and the thread accepting connections.
pub struct H2Front {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl H2Front {
    /// Listens on `listen` and serves HTTP/2 on every connection.
    pub fn start(listen: SocketAddr, opts: H2Options) -> io::Result<H2Front> {
        let mut opts = opts;
        if let Some(cfg) = opts.tls.take() {
            let mut c = (*cfg).clone();
            c.alpn_protocols = vec![b"h2".to_vec()];
            opts.tls = Some(Arc::new(c));
        }
        let listener = TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared::default());
        let (s, sh) = (stop.clone(), shared.clone());
        let stall = (opts.stall).map(|(freeze, period)| Stall::new(Instant::now(), freeze, period));
        let accept = std::thread::Builder::new()
            .name("blaster-sink-h2".into())
            .spawn(move || {
                super::tls_front::confine(&opts.cores);
                accept_loop(&listener, &opts, &s, &sh, stall.as_ref())
            })?;
        Ok(H2Front {
            addr,
            stop,
            accept: Some(accept),
            shared,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counts so far.
    pub fn counts(&self) -> H2Counts {
        self.shared.counts()
    }

    /// Sends every connection the graceful GOAWAY, lets streams under way finish
    /// (at most [`DRAIN_TIMEOUT`]), closes them; the counts at the end.
    pub fn stop(mut self) -> H2Counts {
        self.halt();
        self.shared.counts()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

impl Drop for H2Front {
    fn drop(&mut self) {
        self.halt();
    }
}

fn accept_loop(
    listener: &TcpListener,
    opts: &H2Options,
    stop: &AtomicBool,
    shared: &Arc<Shared>,
    stall: Option<&Stall>,
) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    let stop_all = Arc::new(AtomicBool::new(false));
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((client, _)) => {
                conns.retain(|h| !h.is_finished());
                if shared.open.load(Ordering::Relaxed) >= opts.connections_max as u64 {
                    shared.rejected.fetch_add(1, Ordering::Relaxed);
                    drop(client);
                    continue;
                }
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                shared.open.fetch_add(1, Ordering::Relaxed);
                let (o, sh, st) = (opts.clone(), shared.clone(), stop_all.clone());
                let stall = stall.cloned();
                let h = std::thread::Builder::new()
                    .name("blaster-sink-hc".into())
                    .spawn(move || {
                        serve(client, &o, &sh, &st, stall.as_ref());
                        sh.open.fetch_sub(1, Ordering::Relaxed);
                    });
                match h {
                    Ok(h) => conns.push(h),
                    Err(_) => {
                        shared.open.fetch_sub(1, Ordering::Relaxed);
                    }
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    stop_all.store(true, Ordering::Relaxed);
    for h in conns {
        let _ = h.join();
    }
}

/// Arms `stall` at the first request byte and, inside a freeze window, sleeps to its
/// end: what was read is answered after it.
fn freeze_if_due(stall: &Stall) {
    stall.mark_first_byte();
    if let Phase::Frozen { until_ns } = stall.phase(stall.now_ns()) {
        let until = stall.instant_at(until_ns);
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
    }
}

/// Whether `fd` is readable, waiting at most [`POLL_MS`].
fn readable(fd: &impl AsRawFd) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut p, 1, POLL_MS) };
    n > 0 && p.revents != 0
}

/// Why a connection ended early.
enum Failure {
    Handshake,
    Io,
}

/// The bytes under HTTP/2: the socket itself, or a TLS session over it.
enum Transport {
    Plain(TcpStream),
    Tls(Box<rustls::ServerConnection>, TcpStream),
}

impl Transport {
    fn socket(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) | Transport::Tls(_, s) => s,
        }
    }

    /// Reads what is there into `into`; false at end of stream.
    fn read(&mut self, into: &mut Vec<u8>, buf: &mut [u8]) -> Result<bool, Failure> {
        match self {
            Transport::Plain(s) => {
                let n = s.read(buf).map_err(|_| Failure::Io)?;
                into.extend_from_slice(&buf[..n]);
                Ok(n > 0)
            }
            Transport::Tls(tls, s) => {
                if tls.read_tls(s).map_err(|_| Failure::Io)? == 0 {
                    return Ok(false);
                }
                if tls.process_new_packets().is_err() {
                    let _ = flush_tls(tls, s); // the alert
                    return Err(if tls.is_handshaking() {
                        Failure::Handshake
                    } else {
                        Failure::Io
                    });
                }
                loop {
                    match tls.reader().read(buf) {
                        Ok(0) => return Ok(false),
                        Ok(n) => into.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => return Err(Failure::Io),
                    }
                }
                flush_tls(tls, s)?;
                Ok(true)
            }
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        match self {
            Transport::Plain(s) => s.write_all(bytes).map_err(|_| Failure::Io),
            Transport::Tls(tls, s) => {
                tls.writer().write_all(bytes).map_err(|_| Failure::Io)?;
                flush_tls(tls, s)
            }
        }
    }
}

fn flush_tls(tls: &mut rustls::ServerConnection, s: &mut TcpStream) -> Result<(), Failure> {
    while tls.wants_write() {
        tls.write_tls(s).map_err(|_| Failure::Io)?;
    }
    Ok(())
}

/// Serves one connection until the client closes, a protocol error, or the stop
/// (graceful GOAWAY, then [`DRAIN_TIMEOUT`] for streams under way).
fn serve(
    client: TcpStream,
    opts: &H2Options,
    shared: &Shared,
    stop: &AtomicBool,
    stall: Option<&Stall>,
) {
    let _ = client.set_nodelay(true);
    let _ = client.set_write_timeout(Some(WRITE_TIMEOUT));
    let transport = match &opts.tls {
        None => Transport::Plain(client),
        Some(cfg) => match rustls::ServerConnection::new(cfg.clone()) {
            Ok(mut tls) => {
                // Whatever the HTTP/2 layer queued goes whole into TLS records (the
                // client's windows bound it); rustls' default 64 KiB limit would
                // take a part of a larger output and drop the rest.
                tls.set_buffer_limit(None);
                Transport::Tls(Box::new(tls), client)
            }
            Err(_) => return,
        },
    };
    let mut conn = ServerConn::new(opts.settings, opts.answer);
    if opts.timed {
        conn = conn.timed(monotonic_ns);
    }
    if let Err(Failure::Handshake) = exchange(transport, &mut conn, shared, stop, stall) {
        shared.handshakes_failed.fetch_add(1, Ordering::Relaxed);
    }
    shared.add(&conn.take_stats());
}

fn exchange(
    mut t: Transport,
    conn: &mut ServerConn,
    shared: &Shared,
    stop: &AtomicBool,
    stall: Option<&Stall>,
) -> Result<(), Failure> {
    let mut input: Vec<u8> = Vec::with_capacity(READ_BYTES);
    let mut buf = vec![0u8; READ_BYTES];
    let mut draining: Option<Instant> = None;
    loop {
        let out = conn.output();
        if !out.is_empty() {
            t.write_all(out)?;
            shared
                .bytes_sent
                .fetch_add(out.len() as u64, Ordering::Relaxed);
            let n = out.len();
            conn.written(n);
        }
        shared.add(&conn.take_stats());
        if conn.finished() {
            return Ok(());
        }
        if stop.load(Ordering::Relaxed) {
            match draining {
                None => {
                    draining = Some(Instant::now());
                    conn.shutdown();
                    continue;
                }
                Some(t0) if t0.elapsed() > DRAIN_TIMEOUT => return Ok(()),
                Some(_) => {}
            }
        }
        if !readable(t.socket()) {
            continue;
        }
        let before = input.len();
        if !t.read(&mut input, &mut buf)? {
            return Ok(());
        }
        shared
            .bytes_received
            .fetch_add((input.len() - before) as u64, Ordering::Relaxed);
        if let Some(s) = stall {
            freeze_if_due(s);
        }
        conn.read_now();
        match conn.receive(&input) {
            Ok(n) => {
                input.drain(..n);
            }
            Err(_) => {
                shared.connection_errors.fetch_add(1, Ordering::Relaxed);
                let _ = t.write_all(conn.output()); // the GOAWAY
                return Ok(());
            }
        }
    }
}

/// The sink's clock for its own time per reply: ns on the monotonic clock.
fn monotonic_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::h2::encode_request_headers;
    use crate::proto::h2::frame::{self, END_HEADERS, END_STREAM, FrameParsed, Kind, PREFACE};

    fn front() -> H2Front {
        H2Front::start(
            "127.0.0.1:0".parse().unwrap(),
            H2Options {
                settings: ServerSettings::default(),
                answer: Answer::Fixed(3),
                tls: None,
                connections_max: 2,
                cores: vec![],
                stall: None,
                timed: false,
            },
        )
        .unwrap()
    }

    /// Reads frames until one of `kind` on `stream` arrives; every frame read.
    fn until(s: &mut TcpStream, kind: Kind, stream: u32) -> Vec<(Kind, u32, u8)> {
        let mut input = Vec::new();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        loop {
            while let FrameParsed::Complete { frame: f, consumed } =
                frame::parse_frame(&input, crate::proto::h2::FRAME_SIZE_MAX)
            {
                seen.push((f.kind, f.stream, f.flags));
                input.drain(..consumed);
                if f.kind == kind && f.stream == stream {
                    return seen;
                }
            }
            let n = s.read(&mut buf).expect("the front answers");
            assert!(n > 0, "closed early after {seen:?}");
            input.extend_from_slice(&buf[..n]);
        }
    }

    #[test]
    fn a_request_over_a_socket_and_the_goaway_at_stop() {
        let f = front();
        let mut s = TcpStream::connect(f.local_addr()).unwrap();
        let mut hello = PREFACE.to_vec();
        let mut b = [0u8; 64];
        let n = frame::write_settings(&mut b, &[]).unwrap();
        hello.extend_from_slice(&b[..n]);
        let block = encode_request_headers("GET", "http", "h", "/", &[]).unwrap();
        let mut h = vec![0u8; 9 + block.len()];
        frame::write_headers(&mut h, 1, &block, true, 16_384).unwrap();
        hello.extend_from_slice(&h);
        s.write_all(&hello).unwrap();
        let seen = until(&mut s, Kind::Data, 1);
        assert_eq!(seen.last(), Some(&(Kind::Data, 1, END_STREAM)));
        assert!(seen.contains(&(Kind::Headers, 1, END_HEADERS)), "{seen:?}");
        // A third connection over connections_max (2) is closed at once.
        let _second = TcpStream::connect(f.local_addr()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let mut third = TcpStream::connect(f.local_addr()).unwrap();
        third
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(third.read(&mut b).unwrap_or(0), 0);
        let counts = f.counts();
        assert_eq!(counts.h2.requests, 1);
        assert_eq!(counts.connections_rejected, 1);
        // The stop sends the graceful GOAWAY (last stream 1) and closes.
        let stopper = std::thread::spawn(move || f.stop());
        let seen = until(&mut s, Kind::GoAway, 0);
        assert_eq!(seen.last().unwrap().0, Kind::GoAway);
        let end = stopper.join().unwrap();
        assert_eq!(end.connections_open, 0);
        assert_eq!(end.connections_accepted, 2);
    }
}
