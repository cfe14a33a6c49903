//! `--metrics-listen ADDR`: serves the run's Prometheus exposition
//! ([`super::prometheus`]) at `http://ADDR/metrics` while the run goes and after it.
//!
//! An exporter like the files: the collector hands it every completed interval, it
//! adds the interval to its running totals, renders the text once and publishes it.
//! The server is a small blocking `std::net` loop on a thread of its own, pinned to
//! the control core (never a worker's): each scrape takes a lock, clones an `Arc` of the
//! latest text and writes it, so the workers and their hot path never see it. It answers
//! one connection at a time (`Connection: close`), `GET` or `HEAD /metrics` only:
//! any other path is 404, any other method 405.
//!
//! The listener is bound when the run is planned, so an address in use fails before
//! anything connects (exit 1); nothing listens unless asked. A bare port means
//! 127.0.0.1. After the run the final state stays served until the process exits, and
//! with `--metrics-linger D` blaster waits (at most D) until one scrape has fetched
//! it, so a scraper polling every interval misses nothing.

use super::prometheus::{CONTENT_TYPE, Cumulative, Labels};
use super::{Exporter, IntervalView};
use crate::limits::{METRICS_IO_TIMEOUT_MS, METRICS_REQUEST_BYTES_MAX};
use crate::report::Report;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
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

/// The accept loop: one connection at a time, for the life of the process.
fn serve(listener: &TcpListener, shared: &Shared) {
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let _ = answer(stream, shared);
            }
            // A failed accept (the peer gave up, descriptors short) loses that scrape
            // only; a pause keeps a lasting failure from spinning the control core.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Reads one request head and answers it.
fn answer(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    let timeout = Some(Duration::from_millis(METRICS_IO_TIMEOUT_MS));
    stream.set_read_timeout(timeout)?;
    stream.set_write_timeout(timeout)?;
    let mut buf = [0u8; METRICS_REQUEST_BYTES_MAX];
    let mut len = 0;
    while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
        if len == buf.len() {
            return respond(&mut stream, "431 Request Header Fields Too Large", "", "");
        }
        match stream.read(&mut buf[len..])? {
            0 => break,
            n => len += n,
        }
    }
    let head = String::from_utf8_lossy(&buf[..len]);
    let mut words = head.lines().next().unwrap_or("").split(' ');
    let method = words.next().unwrap_or("");
    let path = words.next().unwrap_or("").split('?').next().unwrap_or("");
    if path != "/metrics" {
        return respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            "not found: the metrics are at /metrics\n",
        );
    }
    if method != "GET" && method != "HEAD" {
        return respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            "only GET and HEAD\n",
        );
    }
    let (body, version) = {
        let s = shared.lock();
        (s.body.clone(), s.version)
    };
    let header = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(header.as_bytes())?;
    if method == "GET" {
        stream.write_all(body.as_bytes())?;
        stream.flush()?;
        let mut s = shared.lock();
        s.scraped = s.scraped.max(version);
        shared.scraped.notify_all();
    }
    Ok(())
}

fn respond(stream: &mut TcpStream, status: &str, ty: &str, body: &str) -> io::Result<()> {
    let ty = if ty.is_empty() {
        String::new()
    } else {
        format!("Content-Type: {ty}\r\n")
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\n{ty}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
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
