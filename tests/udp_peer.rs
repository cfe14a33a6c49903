//! UDP request/response against a peer that reorders and duplicates on purpose: the
//! client's reorder and duplicate counters must match, exactly, what the peer did.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// What the peer did, counted as it did it.
#[derive(Default)]
struct Done {
    /// Pairs answered in swapped order: each makes one reordered response.
    swapped: AtomicU64,
    /// Responses sent a second time: each makes one duplicate.
    duplicated: AtomicU64,
    /// Responses sent once, in order or swapped (not counting the copies).
    answered: AtomicU64,
}

/// An echo peer for blaster's UDP header (sequence at bytes 8..16). Per sender it
/// holds each even sequence number until the next odd one arrives, then answers the
/// odd one first (a swap: the even one arrives below the highest seen); every
/// sequence ending in 3 is answered twice. A held datagram with no partner within
/// 20 ms is answered alone, in order.
fn reordering_peer(stop: Arc<AtomicBool>, done: Arc<Done>) -> String {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap().to_string();
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    std::thread::spawn(move || {
        let mut held: HashMap<SocketAddr, (u64, Vec<u8>)> = HashMap::new();
        let mut buf = [0u8; 2048];
        let send = |to: SocketAddr, d: &[u8]| {
            sock.send_to(d, to).unwrap();
        };
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = sock.recv_from(&mut buf) else {
                // Idle: answer whatever waits for a partner.
                for (to, (_, d)) in held.drain() {
                    send(to, &d);
                    done.answered.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            };
            let d = buf[..n].to_vec();
            assert!(n >= 24 && &d[..4] == b"BLST", "not blaster's header: {d:?}");
            let seq = u64::from_be_bytes(d[8..16].try_into().unwrap());
            if seq % 2 == 0 {
                if let Some((_, old)) = held.insert(from, (seq, d)) {
                    send(from, &old);
                    done.answered.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            send(from, &d);
            done.answered.fetch_add(1, Ordering::Relaxed);
            if seq % 10 == 3 {
                send(from, &d);
                done.duplicated.fetch_add(1, Ordering::Relaxed);
            }
            if let Some((held_seq, old)) = held.remove(&from) {
                send(from, &old);
                done.answered.fetch_add(1, Ordering::Relaxed);
                if held_seq + 1 == seq {
                    done.swapped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    addr
}

#[test]
fn udp_reorder_and_duplicate_counts_match_the_peer_exactly() {
    let _g = load_lock();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(Done::default());
    let addr = reordering_peer(stop.clone(), done.clone());
    // Two flows at 1,000/s in total for 2 s: 1,000 requests each, sequences 0..999.
    let v = run_report(
        &[
            "--proto",
            "udp",
            "--target",
            &addr,
            "--rate",
            "1000",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--timeout",
            "500ms",
        ],
        Duration::from_secs(30),
    );
    stop.store(true, Ordering::Relaxed);
    let udp = &v["udp"];
    let (swapped, duplicated, answered) = (
        done.swapped.load(Ordering::Relaxed) as f64,
        done.duplicated.load(Ordering::Relaxed) as f64,
        done.answered.load(Ordering::Relaxed) as f64,
    );
    assert_eq!(f(udp, "sent"), 2000.0, "{udp}");
    assert_eq!(answered, 2000.0, "the peer answered every request once");
    assert_eq!(f(udp, "received"), 2000.0, "{udp}");
    assert_eq!(f(udp, "lost"), 0.0, "{udp}");
    assert_eq!(f(udp, "late"), 0.0, "{udp}");
    assert_eq!(f(udp, "foreign"), 0.0, "{udp}");
    // Sequences 3, 13, ..., 993 on each flow: 100 per flow.
    assert_eq!(duplicated, 200.0);
    assert_eq!(f(udp, "duplicates"), duplicated, "{udp}");
    // 500 pairs per flow, unless the host stalled a flow past the 20 ms pairing wait.
    assert!(swapped >= 900.0, "the peer swapped only {swapped} pairs");
    assert_eq!(f(udp, "reordered"), swapped, "{udp}");
    assert_eq!(f(&v, "requests.completed"), 2000.0);
    assert_eq!(f(&v, "requests.errors"), 0.0, "{}", v["errors_by_kind"]);
}
