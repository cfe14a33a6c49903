//! The sink against hostile peers (issue 25): a client that sends without ever reading
//! must not stall the echo sink for everyone else, and a crafted datagram must not
//! wrap the UDP counters.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;

use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

/// What the non-reading client tries to send: far more than the sink's whole receive
/// pool (256 buffers of 16 KiB per ring) and loopback's socket buffers hold together.
const HOSTILE_BYTES: usize = 64 << 20;

/// A client with a 4 KiB receive buffer that writes [`HOSTILE_BYTES`] from a thread
/// and never reads. Returns a handle whose shutdown ends the writer, and the count
/// of bytes written so far.
fn non_reader(addr: &str) -> (TcpStream, Arc<AtomicU64>) {
    let to: SocketAddr = addr.parse().unwrap();
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    // Before connect, so the window it advertises is small from the start.
    s.set_recv_buffer_size(4096).unwrap();
    s.connect(&to.into()).unwrap();
    let stream: TcpStream = s.into();
    let mut writer = stream.try_clone().unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let w = Arc::clone(&written);
    std::thread::spawn(move || {
        let chunk = vec![0x5a_u8; 64 * 1024];
        let mut left = HOSTILE_BYTES;
        while left > 0 {
            // Blocks for good once the sink stops reading; the test's shutdown ends it.
            match writer.write(&chunk[..left.min(chunk.len())]) {
                Ok(n) if n > 0 => {
                    left -= n;
                    w.fetch_add(n as u64, Ordering::Relaxed);
                }
                _ => return,
            }
        }
    });
    (stream, written)
}

/// Waits until the writer has stopped making progress (the sink and the socket
/// buffers hold all they will), at most a few seconds.
fn wait_until_stalled(written: &AtomicU64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = written.load(Ordering::Relaxed);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = written.load(Ordering::Relaxed);
        if (now == last && now > 0) || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

#[test]
fn a_client_that_never_reads_does_not_stall_the_echo_sink() {
    let _lock = load_lock();
    let sink = Sink::start(&["--mode", "echo"]);
    let (hostile, written) = non_reader(&sink.addr);
    let stalled_at = wait_until_stalled(&written);
    assert!(
        stalled_at < HOSTILE_BYTES as u64,
        "the sink read all {stalled_at} bytes of a client that never reads: its replies \
         must be held somewhere"
    );
    let v = run_report(
        &[
            "--target",
            &sink.addr,
            "--rate",
            "1000",
            "--duration",
            "1s",
            "--connections",
            "4",
            "--timeout",
            "1s",
        ],
        Duration::from_secs(30),
    );
    // The hostile client is still connected and still not reading.
    let _ = hostile.shutdown(Shutdown::Both);
    assert_eq!(
        f(&v, "requests.completed"),
        1000.0,
        "a client that never reads stalled the sink for the others: {}",
        v["requests"]
    );
    assert_eq!(f(&v, "requests.errors"), 0.0);
}

/// A datagram with blaster's header (`src/proto/udp_header.rs`): magic, flow, seq,
/// intended instant, big-endian.
fn datagram(flow: u32, seq: u64) -> Vec<u8> {
    let mut d = b"BLST".to_vec();
    d.extend_from_slice(&flow.to_be_bytes());
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend_from_slice(&0u64.to_be_bytes());
    d.extend_from_slice(&[0; 8]);
    d
}

#[test]
fn a_crafted_sequence_number_saturates_the_udp_loss_instead_of_wrapping() {
    let (_dir, json) = tmp_json();
    let sink = Sink::start_udp(&["--mode", "count", "--json", json.to_str().unwrap()]);
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // Flow 1 from 0, then the last sequence number there is; flow 2 likewise, so the
    // expected count overflows across flows too.
    for (flow, seq) in [(1, 0), (1, u64::MAX), (2, u64::MAX - 1), (2, u64::MAX)] {
        sock.send_to(&datagram(flow, seq), &sink.addr).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    sink.stop();
    let v = read_json(&json);
    let udp = if v["udp"].is_object() { &v["udp"] } else { &v };
    assert_eq!(udp["received"], 4, "{udp}");
    assert_eq!(
        udp["lost"].as_u64(),
        Some(u64::MAX),
        "lost wrapped instead of saturating: {udp}"
    );
    let ratio = udp["loss_ratio"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&ratio), "loss_ratio {ratio}: {udp}");
    for s in udp["intervals"].as_array().unwrap() {
        assert!(
            s["lost"].as_i64().unwrap() >= 0,
            "a second's loss wrapped: {s}"
        );
    }
}
