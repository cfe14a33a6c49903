//! `--metrics-listen ADDR`: serves the run's Prometheus exposition
//! ([`super::prometheus`]) at `http://ADDR/metrics` while the run goes and after it.
//!
//! An exporter like the files: the collector hands it every completed interval, it
//! adds the interval to its running totals, renders the text once and publishes it.
//! The server is a thread of its own, pinned to the control core (never a worker's):
//! each scrape takes a lock, clones an `Arc` of the latest text and writes it, so the
//! workers and their hot path never see it. `GET` or `HEAD /metrics` only: any other
//! path is 404, any other method 405 (the request heads are read by the pure
//! `metrics_request::parse`).
//!
//! Hostile or slow clients: one thread serves up to [`METRICS_CONNECTIONS_MAX`]
//! connections at once with non-blocking sockets and `poll(2)`, so a client that
//! sends nothing, or reads its answer slowly, delays nobody else. Each connection has
//! [`METRICS_HEADER_TIMEOUT_MS`] to send a request head and [`METRICS_IO_TIMEOUT_MS`]
//! to take its answer; when all slots are taken, a new connection replaces the one
//! that has waited longest for its request (so a crowd of silent clients cannot lock
//! a scraper out, as threads or a queue with a cap would). One thread rather than a
//! thread per connection: nothing to spawn per scrape, and the bound on connections
//! is also the bound on descriptors and memory (a request buffer each, made once).
//! Requests sent back to back on one connection are each answered in order; the
//! connection closes after the answer to the last request it had sent (`Connection:
//! close` on that answer), or after one that asked to close.
//!
//! The listener is bound when the run is planned, so an address in use fails before
//! anything connects (exit 1); nothing listens unless asked. A bare port means
//! 127.0.0.1. After the run the final state stays served until the process exits, and
//! with `--metrics-linger D` blaster waits (at most D) until one scrape has fetched
//! it, so a scraper polling every interval misses nothing.

use super::metrics_request::{Answer, Parsed, parse};
use super::prometheus::{CONTENT_TYPE, Cumulative, Labels};
use super::{Exporter, IntervalView};
use crate::limits::{
    FD_MARGIN, METRICS_CONNECTIONS_MAX, METRICS_HEADER_TIMEOUT_MS, METRICS_IO_TIMEOUT_MS,
    METRICS_REQUEST_BYTES_MAX,
};
use crate::report::Report;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The listener could not be bound (exit 1).
#[derive(Debug, thiserror::Error)]
#[error("--metrics-listen {addr}: cannot listen: {source}")]
pub struct ListenError {
    pub addr: SocketAddr,
    pub source: io::Error,
}

/// `--metrics-listen`'s value: `PORT` (on 127.0.0.1), `IPv4:PORT` or `[IPv6]:PORT`.
/// Host names are refused: the address bound is exactly the one given.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<u16>()
            .map(|p| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), p))
            .map_err(|_| format!("port must be at most 65535, got {s}"));
    }
    s.parse::<SocketAddr>().map_err(|_| {
        format!(
            "expected PORT, IPv4:PORT or [IPv6]:PORT (e.g. 9100, 0.0.0.0:9100, [::1]:9100), got {s:?}"
        )
    })
}

/// What the server hands out: the latest text, its version, and the newest version
/// a scrape has fetched completely.
struct Served {
    body: Arc<String>,
    version: u64,
    scraped: u64,
}

struct Shared {
    served: Mutex<Served>,
    /// Signalled after every complete scrape (for the linger wait).
    scraped: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Served> {
        self.served.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The `--metrics-listen` exporter: running totals, the labels, and the server.
pub struct LiveMetrics {
    totals: Cumulative,
    labels: Labels,
    shared: Arc<Shared>,
    addr: SocketAddr,
    linger: Duration,
    /// Ctrl-C: set during the linger, it ends the wait.
    stop: Arc<AtomicBool>,
    /// `--metrics-listen ADDR`, for the exporters' error messages.
    name: PathBuf,
}

impl LiveMetrics {
    /// Binds `addr` and starts the server thread (pinned to `core` when given). The
    /// state served until the first interval completes is all zeros. `stop` is the
    /// Ctrl-C flag: raised during the linger, it ends the wait.
    pub fn bind(
        addr: SocketAddr,
        labels: Labels,
        linger: Duration,
        core: Option<usize>,
        stop: Arc<AtomicBool>,
    ) -> Result<LiveMetrics, ListenError> {
        let listener = TcpListener::bind(addr).map_err(|source| ListenError { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| ListenError { addr, source })?;
        let totals = Cumulative::default();
        let shared = Arc::new(Shared {
            served: Mutex::new(Served {
                body: Arc::new(totals.render(&labels)),
                version: 0,
                scraped: 0,
            }),
            scraped: Condvar::new(),
        });
        let server = shared.clone();
        std::thread::Builder::new()
            .name("blaster-metrics".into())
            .spawn(move || {
                if let Some(c) = core {
                    crate::threads::pin_current(c);
                }
                serve(&listener, &server)
            })
            .map_err(|source| ListenError { addr, source })?;
        Ok(LiveMetrics {
            totals,
            labels,
            shared,
            addr: bound,
            linger,
            stop,
            name: PathBuf::from(format!("--metrics-listen {addr}")),
        })
    }

    /// A frames run: the frame families are served too (from the first body on).
    pub fn for_frames(mut self) -> LiveMetrics {
        self.totals.frames = true;
        self.shared.lock().body = Arc::new(self.totals.render(&self.labels));
        self
    }

    /// The address actually bound (port 0 resolved).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Publishes the final state and waits, at most the linger, until a scrape has
    /// fetched it. A Ctrl-C during the wait ends it (one that stopped the run before
    /// does not: the final state of an interrupted run is worth a scrape too).
    fn end(&mut self) {
        self.totals.finished = true;
        let version = self.publish();
        let deadline = Instant::now() + self.linger;
        let stopped_before = self.stop.load(Ordering::Relaxed);
        let mut s = self.shared.lock();
        while s.scraped < version {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || (!stopped_before && self.stop.load(Ordering::Relaxed)) {
                break;
            }
            // Wakes for a scrape, or to look at the Ctrl-C flag again.
            let left = left.min(Duration::from_millis(100));
            s = self
                .shared
                .scraped
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Renders the totals and makes them the served state; returns its version.
    fn publish(&self) -> u64 {
        let body = Arc::new(self.totals.render(&self.labels));
        let mut s = self.shared.lock();
        s.body = body;
        s.version += 1;
        s.version
    }
}

impl Exporter for LiveMetrics {
    fn start(&mut self, _start: SystemTime) -> io::Result<()> {
        Ok(())
    }

    fn interval(&mut self, iv: &IntervalView) -> io::Result<()> {
        self.totals.add(iv);
        self.publish();
        Ok(())
    }

    /// Marks the state final and, with a linger, waits until a scrape has fetched it.
    /// The server goes on serving it until the process exits.
    fn finish(mut self: Box<Self>, _report: &Report) -> io::Result<()> {
        self.end();
        Ok(())
    }

    fn path(&self) -> &Path {
        &self.name
    }
}

// The server's descriptors come out of the margin the run keeps for itself.
const _: () = assert!(2 * METRICS_CONNECTIONS_MAX as u64 <= FD_MARGIN);

/// The answer being written on a connection.
struct Out {
    /// Status line and headers (with the small body of an error answer).
    head: Vec<u8>,
    /// `GET /metrics`: the exposition, and the version it is (marked scraped once
    /// all of it is written).
    body: Option<(Arc<String>, u64)>,
    /// Bytes of `head` then `body` written so far.
    at: usize,
    /// Close the connection after this answer.
    close: bool,
}

impl Out {
    fn remaining(&self) -> &[u8] {
        match self.head.get(self.at..) {
            Some(rest) if !rest.is_empty() => rest,
            _ => {
                let body = self.body.as_ref().map_or("", |(b, _)| b.as_str());
                &body.as_bytes()[self.at - self.head.len()..]
            }
        }
    }

    fn done(&self) -> bool {
        self.at == self.head.len() + self.body.as_ref().map_or(0, |(b, _)| b.len())
    }
}

/// One client: its socket, the bytes of its requests not yet answered, and the answer
/// under way.
struct Conn {
    stream: TcpStream,
    buf: Box<[u8]>,
    len: usize,
    /// The peer has shut its side: nothing more will come.
    eof: bool,
    out: Option<Out>,
    /// Closed when this passes: the request head or the answer is late.
    deadline: Instant,
    /// When the connection last began waiting for a request (eviction order).
    waiting_since: Instant,
}

/// A slot: a connection, and a request buffer kept across connections.
struct Slot {
    conn: Option<Conn>,
    spare: Option<Box<[u8]>>,
}

/// The accept and serve loop, for the life of the process (see the module comment).
fn serve(listener: &TcpListener, shared: &Shared) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let mut slots: Vec<Slot> = (0..METRICS_CONNECTIONS_MAX)
        .map(|_| Slot {
            conn: None,
            spare: Some(vec![0; METRICS_REQUEST_BYTES_MAX].into_boxed_slice()),
        })
        .collect();
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(METRICS_CONNECTIONS_MAX + 1);
    let mut polled: Vec<usize> = Vec::with_capacity(METRICS_CONNECTIONS_MAX);
    loop {
        let now = Instant::now();
        for slot in &mut slots {
            if slot.conn.as_ref().is_some_and(|c| now >= c.deadline) {
                close(slot);
            }
        }
        fds.clear();
        polled.clear();
        fds.push(libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        let mut next_deadline: Option<Instant> = None;
        for (i, slot) in slots.iter().enumerate() {
            let Some(c) = &slot.conn else { continue };
            let events = if c.out.is_some() {
                libc::POLLOUT
            } else {
                libc::POLLIN
            };
            fds.push(libc::pollfd {
                fd: c.stream.as_raw_fd(),
                events,
                revents: 0,
            });
            polled.push(i);
            next_deadline = Some(next_deadline.map_or(c.deadline, |d| d.min(c.deadline)));
        }
        let timeout_ms = next_deadline.map_or(-1, |d| {
            // Rounded up, so the wake-up is past the deadline.
            let ms = d.saturating_duration_since(now).as_micros().div_ceil(1000);
            i32::try_from(ms).unwrap_or(i32::MAX)
        });
        // SAFETY: `fds` holds `fds.len()` initialised pollfd structs that live through
        // the call; poll writes only their `revents`.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n < 0 {
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                // Cannot happen with valid descriptors; a pause keeps it from spinning.
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        // Connections first: accepting may replace one of them.
        for (k, &i) in polled.iter().enumerate() {
            if fds[k + 1].revents != 0 {
                drive(&mut slots[i], shared);
            }
        }
        if fds[0].revents != 0 {
            accept_all(listener, &mut slots, shared);
        }
    }
}

/// Accepts every connection waiting, each into a free slot or in place of the one
/// that has waited longest for its request, and serves what it already sent.
fn accept_all(listener: &TcpListener, slots: &mut [Slot], shared: &Shared) {
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // WouldBlock: all taken. Anything else (the peer gave up, descriptors
            // short) loses that connection only.
            Err(_) => return,
        };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        let i = match slots.iter().position(|s| s.conn.is_none()) {
            Some(i) => i,
            None => {
                let victim = slots
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| s.conn.as_ref().map(|c| (i, c)))
                    // One waiting for its request before one taking its answer, then
                    // the one waiting longest.
                    .min_by_key(|(_, c)| (c.out.is_some(), c.waiting_since))
                    .map(|(i, _)| i)
                    .expect("a full table has connections");
                close(&mut slots[victim]);
                victim
            }
        };
        let now = Instant::now();
        let slot = &mut slots[i];
        slot.conn = Some(Conn {
            stream,
            buf: slot.spare.take().expect("a free slot keeps its buffer"),
            len: 0,
            eof: false,
            out: None,
            deadline: now + Duration::from_millis(METRICS_HEADER_TIMEOUT_MS),
            waiting_since: now,
        });
        drive(slot, shared);
    }
}

/// Closes the slot's connection and keeps its buffer for the next.
fn close(slot: &mut Slot) {
    if let Some(c) = slot.conn.take() {
        slot.spare = Some(c.buf);
    }
}

/// Reads, answers and writes on one connection as far as its socket allows without
/// blocking; closes it when done or broken.
fn drive(slot: &mut Slot, shared: &Shared) {
    let Some(c) = slot.conn.as_mut() else { return };
    if step(c, shared).is_err() {
        close(slot);
    }
}

/// Why a connection ends (an `Err` of [`step`]): done, or broken.
struct Closed;

fn step(c: &mut Conn, shared: &Shared) -> Result<(), Closed> {
    loop {
        if let Some(out) = &mut c.out {
            if !out.done() {
                match c.stream.write(out.remaining()) {
                    Ok(0) => return Err(Closed),
                    Ok(n) => out.at += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Err(Closed),
                }
                continue;
            }
            if let Some((_, version)) = out.body {
                let mut s = shared.lock();
                s.scraped = s.scraped.max(version);
                shared.scraped.notify_all();
            }
            if out.close {
                return Err(Closed);
            }
            c.out = None;
            let now = Instant::now();
            c.deadline = now + Duration::from_millis(METRICS_HEADER_TIMEOUT_MS);
            c.waiting_since = now;
            continue;
        }
        match parse(&c.buf[..c.len], c.buf.len(), c.eof) {
            Parsed::Complete { answer, len, close } => {
                c.buf.copy_within(len..c.len, 0);
                c.len -= len;
                // Pull in what else has arrived, to know whether a request follows.
                if c.len == 0 && !close {
                    read_some(c)?;
                }
                let last = close || c.eof || c.len == 0;
                c.out = Some(answer_to(answer, last, shared));
                c.deadline = Instant::now() + Duration::from_millis(METRICS_IO_TIMEOUT_MS);
            }
            Parsed::TooLarge => {
                c.out = Some(plain("431 Request Header Fields Too Large", "", true));
                c.deadline = Instant::now() + Duration::from_millis(METRICS_IO_TIMEOUT_MS);
            }
            Parsed::Incomplete if c.eof => return Err(Closed),
            Parsed::Incomplete => {
                if !read_some(c)? {
                    return Ok(());
                }
            }
        }
    }
}

/// One non-blocking read into the free end of the buffer: whether it made progress
/// (bytes, or the end of stream).
fn read_some(c: &mut Conn) -> Result<bool, Closed> {
    if c.len == c.buf.len() || c.eof {
        return Ok(false);
    }
    loop {
        return match c.stream.read(&mut c.buf[c.len..]) {
            Ok(0) => {
                c.eof = true;
                Ok(true)
            }
            Ok(n) => {
                c.len += n;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => Err(Closed),
        };
    }
}

/// The answer to `answer`; `last` closes the connection after it.
fn answer_to(answer: Answer, last: bool, shared: &Shared) -> Out {
    match answer {
        Answer::Metrics | Answer::MetricsHead => {
            let (body, version) = {
                let s = shared.lock();
                (s.body.clone(), s.version)
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\n{}\r\n",
                body.len(),
                connection(last)
            );
            Out {
                head: head.into_bytes(),
                body: (answer == Answer::Metrics).then_some((body, version)),
                at: 0,
                close: last,
            }
        }
        Answer::NotFound => plain(
            "404 Not Found",
            "not found: the metrics are at /metrics\n",
            last,
        ),
        Answer::MethodNotAllowed => plain("405 Method Not Allowed", "only GET and HEAD\n", last),
        Answer::BadRequest => plain("400 Bad Request", "not an HTTP/1.x request\n", true),
    }
}

fn connection(last: bool) -> &'static str {
    if last { "Connection: close\r\n" } else { "" }
}

/// A small answer with a plain-text body (none when `body` is empty).
fn plain(status: &str, body: &str, last: bool) -> Out {
    let ty = if body.is_empty() {
        ""
    } else {
        "Content-Type: text/plain\r\n"
    };
    let head = format!(
        "HTTP/1.1 {status}\r\n{ty}Content-Length: {}\r\n{}\r\n{body}",
        body.len(),
        connection(last)
    );
    Out {
        head: head.into_bytes(),
        body: None,
        at: 0,
        close: last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    fn server() -> LiveMetrics {
        let labels = Labels {
            run_id: "t".into(),
            shard: "0/1".into(),
        };
        LiveMetrics::bind(
            "127.0.0.1:0".parse().unwrap(),
            labels,
            Duration::ZERO,
            None,
            Arc::default(),
        )
        .unwrap()
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(parse_listen("9100").unwrap().to_string(), "127.0.0.1:9100");
        assert_eq!(
            parse_listen("0.0.0.0:9100").unwrap().to_string(),
            "0.0.0.0:9100"
        );
        assert_eq!(
            parse_listen("[::1]:9100").unwrap().to_string(),
            "[::1]:9100"
        );
        for bad in ["", "localhost:9100", "70000", "1.2.3.4", ":9100"] {
            assert!(parse_listen(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn serves_metrics_and_404_elsewhere() {
        let m = server();
        let ok = get(m.local_addr(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains(CONTENT_TYPE));
        assert!(ok.contains("\r\n\r\n# HELP blaster_"), "{ok}");
        assert!(ok.contains("blaster_run_finished{run_id=\"t\",shard=\"0/1\"} 0\n"));
        let len: usize = ok
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(len, ok.split_once("\r\n\r\n").unwrap().1.len());
        for path in ["/", "/metricsx", "/favicon.ico"] {
            let r = get(m.local_addr(), &format!("GET {path} HTTP/1.1\r\n\r\n"));
            assert!(r.starts_with("HTTP/1.1 404 "), "{path}: {r}");
        }
        let r = get(m.local_addr(), "POST /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 405 "), "{r}");
        let r = get(m.local_addr(), "HEAD /metrics?x=1 HTTP/1.1\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 200 ") && r.ends_with("\r\n\r\n"),
            "{r}"
        );
    }

    #[test]
    fn a_request_ending_in_bare_lf_is_answered() {
        // Issue 25: `printf 'GET /metrics HTTP/1.1\n\n' | nc` waited for a CRLF forever.
        let m = server();
        let r = get(m.local_addr(), "GET /metrics HTTP/1.1\nHost: x\n\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("# HELP blaster_"), "{r}");
    }

    #[test]
    fn pipelined_requests_are_each_answered_in_order() {
        // Issue 25: three requests in one write got one answer.
        let m = server();
        let r = get(
            m.local_addr(),
            "GET /metrics HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\nHEAD /metrics HTTP/1.1\r\n\r\n",
        );
        let statuses: Vec<&str> = r
            .match_indices("HTTP/1.1 ")
            .map(|(i, _)| &r[i + 9..i + 12])
            .collect();
        assert_eq!(statuses, ["200", "404", "200"], "{r}");
        // Only the answer to the last request closes the connection.
        assert_eq!(r.matches("Connection: close").count(), 1, "{r}");
        assert!(r.trim_end().ends_with("Connection: close"), "{r}");
    }

    #[test]
    fn silent_clients_do_not_delay_a_scrape() {
        // Issue 25: every silent connection held the server for 2 s, one at a time.
        let m = server();
        let silent: Vec<TcpStream> = (0..200)
            .map(|_| TcpStream::connect(m.local_addr()).unwrap())
            .collect();
        let t = Instant::now();
        let mut s = TcpStream::connect(m.local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
        drop(silent);
    }

    #[test]
    fn a_port_in_use_fails_at_bind() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let labels = Labels {
            run_id: "t".into(),
            shard: "0/1".into(),
        };
        let e = LiveMetrics::bind(
            taken.local_addr().unwrap(),
            labels,
            Duration::ZERO,
            None,
            Arc::default(),
        )
        .err()
        .expect("bind must fail");
        assert_eq!(e.source.kind(), io::ErrorKind::AddrInUse);
        assert!(
            e.to_string().starts_with("--metrics-listen 127.0.0.1:"),
            "{e}"
        );
    }

    #[test]
    fn a_ctrl_c_during_the_linger_ends_it() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut m = LiveMetrics::bind(
            "127.0.0.1:0".parse().unwrap(),
            Labels {
                run_id: "t".into(),
                shard: "0/1".into(),
            },
            Duration::from_secs(30),
            None,
            stop.clone(),
        )
        .unwrap();
        let flag = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            flag.store(true, Ordering::Relaxed);
        });
        let t = Instant::now();
        m.end();
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }

    #[test]
    fn the_linger_ends_at_the_first_scrape_of_the_final_state() {
        let mut m = LiveMetrics::bind(
            "127.0.0.1:0".parse().unwrap(),
            Labels {
                run_id: "t".into(),
                shard: "0/1".into(),
            },
            Duration::from_secs(30),
            None,
            Arc::default(),
        )
        .unwrap();
        let addr = m.local_addr();
        let scraper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            get(addr, "GET /metrics HTTP/1.1\r\n\r\n")
        });
        let t = Instant::now();
        m.end();
        let waited = t.elapsed();
        let body = scraper.join().unwrap();
        assert!(body.contains("blaster_run_finished{run_id=\"t\",shard=\"0/1\"} 1\n"));
        assert!(
            waited >= Duration::from_millis(150) && waited < Duration::from_secs(10),
            "{waited:?}"
        );
    }
}
