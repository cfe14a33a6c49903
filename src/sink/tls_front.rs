//! `blaster sink --tls`: a rustls front on the sink's address that terminates TLS and
//! relays the plaintext to the io_uring sink listening on a private loopback port,
//! so every mode (echo, fixed, discard, broadcast) serves TLS unchanged.
//!
//! One thread per connection, blocking I/O with poll(2) for readiness: simple and
//! exact, meant for tests and modest loads (a handful to a few hundred connections),
//! not for the sink's held-connection scale. The TLS baseline (`blaster --tls`) runs
//! it in process on the sink's cores, where it is often what sets the pace: its
//! figure is then the front's ceiling, and the baseline says so (sink-bound).

use rustls::ServerConnection;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often blocked threads look at the stop flag.
const POLL_MS: i32 = 50;

/// The running front: its address, and the thread accepting connections.
pub struct TlsFront {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    /// Handshakes that failed (a client that does not trust the certificate, say).
    pub failed: Arc<AtomicU64>,
}

impl TlsFront {
    /// Listens on `listen` and relays every connection's plaintext to `inner`.
    pub fn start(
        listen: SocketAddr,
        inner: SocketAddr,
        config: Arc<rustls::ServerConfig>,
    ) -> io::Result<TlsFront> {
        Self::start_on(listen, inner, config, &[])
    }

    /// As [`TlsFront::start`], every thread of the front on `cores` (empty: where
    /// the kernel puts them): the accepting thread confines itself there before it
    /// accepts, and each connection's thread inherits its affinity. Its threads are
    /// named as the sink's (`blaster-sink-t*`), so a run in the same process counts
    /// them as the target's.
    pub fn start_on(
        listen: SocketAddr,
        inner: SocketAddr,
        config: Arc<rustls::ServerConfig>,
        cores: &[usize],
    ) -> io::Result<TlsFront> {
        let listener = TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let failed = Arc::new(AtomicU64::new(0));
        let (s, f) = (stop.clone(), failed.clone());
        let cores = cores.to_vec();
        let accept = std::thread::Builder::new()
            .name("blaster-sink-tl".into())
            .spawn(move || {
                confine(&cores);
                accept_loop(&listener, inner, &config, &s, &f)
            })?;
        Ok(TlsFront {
            addr,
            stop,
            accept: Some(accept),
            failed,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// Confines the calling thread (and the threads it starts) to `cores`, best effort:
/// cores this process may not use leave its affinity as it was.
pub(super) fn confine(cores: &[usize]) {
    if cores.is_empty() {
        return;
    }
    let mut set = nix::sched::CpuSet::new();
    for &c in cores {
        let _ = set.set(c);
    }
    let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
}

fn accept_loop(
    listener: &TcpListener,
    inner: SocketAddr,
    config: &Arc<rustls::ServerConfig>,
    stop: &Arc<AtomicBool>,
    failed: &Arc<AtomicU64>,
) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((client, _)) => {
                let (config, stop, failed) = (config.clone(), stop.clone(), failed.clone());
                let h = std::thread::Builder::new()
                    .name("blaster-sink-tc".into())
                    .spawn(move || {
                        if let Err(Failure::Handshake) = relay(client, inner, config, &stop) {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                if let Ok(h) = h {
                    conns.push(h);
                }
                conns.retain(|h| !h.is_finished());
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    for h in conns {
        let _ = h.join();
    }
}

enum Failure {
    Handshake,
    Io,
}

/// Whether `fds` are readable, waiting at most [`POLL_MS`].
fn readable(fds: [&impl AsRawFd; 2]) -> [bool; 2] {
    let mut p = fds.map(|f| libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    // SAFETY: `p` is a valid array of two pollfd for the duration of the call.
    let n = unsafe { libc::poll(p.as_mut_ptr(), 2, POLL_MS) };
    if n <= 0 {
        return [false; 2];
    }
    p.map(|x| x.revents != 0)
}

fn flush(tls: &mut ServerConnection, client: &mut TcpStream) -> Result<(), Failure> {
    while tls.wants_write() {
        tls.write_tls(client).map_err(|_| Failure::Io)?;
    }
    Ok(())
}

/// Serves one client until either side closes or the sink stops.
fn relay(
    mut client: TcpStream,
    inner: SocketAddr,
    config: Arc<rustls::ServerConfig>,
    stop: &AtomicBool,
) -> Result<(), Failure> {
    client.set_nonblocking(false).map_err(|_| Failure::Io)?;
    let _ = client.set_nodelay(true);
    let mut tls = ServerConnection::new(config).map_err(|_| Failure::Io)?;
    let mut backend: Option<TcpStream> = None;
    let mut buf = vec![0u8; 16 << 10];
    while !stop.load(Ordering::Relaxed) {
        flush(&mut tls, &mut client)?;
        let [from_client, from_inner] = match &backend {
            Some(b) => readable([&client, b]),
            None => {
                let [c, _] = readable([&client, &client]);
                [c, false]
            }
        };
        if from_client {
            if tls.read_tls(&mut client).map_err(|_| Failure::Io)? == 0 {
                return Ok(());
            }
            let state = match tls.process_new_packets() {
                Ok(s) => s,
                Err(_) => {
                    let _ = flush(&mut tls, &mut client); // the alert
                    return Err(if tls.is_handshaking() {
                        Failure::Handshake
                    } else {
                        Failure::Io
                    });
                }
            };
            if !tls.is_handshaking() && backend.is_none() {
                let b = TcpStream::connect(inner).map_err(|_| Failure::Io)?;
                let _ = b.set_nodelay(true);
                backend = Some(b);
            }
            let mut left = state.plaintext_bytes_to_read();
            while left > 0 {
                let n = tls.reader().read(&mut buf).map_err(|_| Failure::Io)?;
                if n == 0 {
                    break;
                }
                left = left.saturating_sub(n);
                if let Some(b) = backend.as_mut() {
                    b.write_all(&buf[..n]).map_err(|_| Failure::Io)?;
                }
            }
            if state.peer_has_closed() {
                return Ok(());
            }
        }
        if from_inner && let Some(b) = backend.as_mut() {
            let n = b.read(&mut buf).map_err(|_| Failure::Io)?;
            if n == 0 {
                tls.send_close_notify();
                let _ = flush(&mut tls, &mut client);
                return Ok(());
            }
            tls.writer().write_all(&buf[..n]).map_err(|_| Failure::Io)?;
        }
    }
    Ok(())
}
