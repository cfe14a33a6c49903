//! Loopback tests of the UDP sink: real sockets on 127.0.0.1 (and ::1 if the host
//! has it), one or two cores.

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use super::*;
use crate::proto::udp_header::{HEADER_LEN, UdpHeader};

fn udp_config(mode: SinkMode) -> SinkConfig {
    SinkConfig {
        udp: true,
        ..SinkConfig::new("127.0.0.1:0".parse().expect("literal"), vec![0], mode)
    }
}

fn client(addr: SocketAddr) -> UdpSocket {
    let local: SocketAddr = if addr.is_ipv4() {
        "127.0.0.1:0".parse().expect("literal")
    } else {
        "[::1]:0".parse().expect("literal")
    };
    let s = UdpSocket::bind(local).expect("bind client");
    s.connect(addr).expect("connect client");
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("read timeout");
    s
}

/// A datagram of `len` bytes (at least the header) for `flow`/`seq`, with a payload
/// that differs per sequence number.
fn datagram(flow: u32, seq: u64, len: usize) -> Vec<u8> {
    let mut buf: Vec<u8> = (0..len.max(HEADER_LEN))
        .map(|i| (i as u64 ^ seq) as u8)
        .collect();
    UdpHeader {
        flow,
        seq,
        intended_ns: seq * 1000,
    }
    .write(&mut buf);
    buf
}

fn recv(s: &UdpSocket) -> Vec<u8> {
    let mut buf = vec![0u8; 65_536];
    let n = s.recv(&mut buf).expect("a reply datagram");
    buf.truncate(n);
    buf
}

fn assert_silent(s: &UdpSocket, wait: Duration) {
    s.set_read_timeout(Some(wait)).expect("read timeout");
    let mut buf = [0u8; 64];
    match s.recv(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("expected silence, got {other:?}"),
    }
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("read timeout");
}

/// Waits (at most 2 s) until the sink has read `n` datagrams of any kind.
fn wait_for(sink: &SinkHandle, n: u64) -> SinkStats {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let s = sink.snapshot();
        let seen = s.received + s.foreign + s.dropped;
        if seen >= n {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "sink read {seen} of {n} datagrams: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn echo_returns_datagrams_unchanged() {
    let sink = start(&udp_config(SinkMode::Echo)).expect("sink starts");
    let c = client(sink.local_addr());
    let sizes = [HEADER_LEN, 64, 1400, 9000, 65_000];
    for (seq, &len) in sizes.iter().enumerate() {
        let d = datagram(1, seq as u64, len);
        c.send(&d).expect("send");
        assert_eq!(recv(&c), d, "datagram of {len} bytes");
    }
    // Foreign datagrams are echoed too, and counted as foreign.
    c.send(b"not ours").expect("send");
    assert_eq!(recv(&c), b"not ours");
    let stats = sink.stop();
    assert_eq!(stats.received, sizes.len() as u64);
    assert_eq!(stats.foreign, 1);
    assert_eq!(stats.replies, sizes.len() as u64 + 1);
    assert_eq!(stats.bytes_received, sizes.iter().sum::<usize>() as u64);
    assert_eq!(stats.bytes_sent, stats.bytes_received + 8);
    assert_eq!((stats.lost, stats.reordered, stats.duplicates), (0, 0, 0));
    assert_eq!(stats.flows, 1);
    assert_eq!(stats.send_failed, 0);
    assert!(stats.rcvbuf_bytes > 0);
}

#[test]
fn count_mode_counts_loss_reordering_duplicates_and_foreign() {
    let sink = start(&udp_config(SinkMode::Count)).expect("sink starts");
    let c = client(sink.local_addr());
    // Flow 1: 0..100 without 10 values.
    let mut sent = 0;
    for seq in (0..100u64).filter(|s| s % 10 != 5) {
        c.send(&datagram(1, seq, 64)).expect("send");
        sent += 1;
    }
    // Flow 2: 5 before 3 and 4 (reordered), 7 twice (duplicate).
    for seq in [0, 1, 2, 5, 3, 4, 6, 7, 7] {
        c.send(&datagram(2, seq, 100)).expect("send");
        sent += 1;
    }
    for foreign in [&b""[..], b"BLS", b"hello, sink", &[0u8; 40]] {
        c.send(foreign).expect("send");
        sent += 1;
    }
    let live = wait_for(&sink, sent);
    assert_eq!(live.received, 99);
    assert_silent(&c, Duration::from_millis(50));
    let stats = sink.stop();
    assert_eq!(stats.received, 99);
    assert_eq!(stats.lost, 10);
    assert_eq!(stats.reordered, 2);
    assert_eq!(stats.duplicates, 1);
    assert_eq!(stats.foreign, 4);
    assert_eq!(stats.dropped, 0);
    assert_eq!(stats.flows, 2);
    assert_eq!(stats.replies, 0);
    assert_eq!(stats.bytes_received, 90 * 64 + 9 * 100);

    let json = udp_report_json(&stats);
    for key in [
        "received",
        "lost",
        "reordered",
        "duplicates",
        "foreign",
        "dropped",
        "loss_ratio",
        "received_pps",
        "received_bps",
        "intervals",
    ] {
        assert!(json.get(key).is_some(), "missing {key}: {json}");
    }
    assert_eq!(json["lost"], 10);
    // 108 datagrams sent by the sequence numbers' account (100 + 8), 10 missing.
    let ratio = json["loss_ratio"].as_f64().expect("number");
    assert!((ratio - 10.0 / 108.0).abs() < 1e-12, "{ratio}");
    let intervals = json["intervals"].as_array().expect("array");
    assert!(!intervals.is_empty());
    let sum = |k: &str| -> i64 { intervals.iter().map(|i| i[k].as_i64().expect(k)).sum() };
    assert_eq!(sum("received"), 99);
    assert_eq!(sum("lost"), 10);
    assert_eq!(sum("duplicates"), 1);
    assert_eq!(intervals.last().expect("one")["partial"], true);
    if stats.elapsed_s > 0.0 {
        let pps = json["received_pps"].as_f64().expect("number");
        assert!((pps - 99.0 / stats.elapsed_s).abs() < 1e-6 * pps.max(1.0));
    }
}

#[test]
fn discard_never_replies_but_counts() {
    let sink = start(&udp_config(SinkMode::Discard)).expect("sink starts");
    let c = client(sink.local_addr());
    for seq in 0..5 {
        c.send(&datagram(0, seq, 64)).expect("send");
    }
    wait_for(&sink, 5);
    assert_silent(&c, Duration::from_millis(30));
    let stats = sink.stop();
    assert_eq!((stats.received, stats.lost, stats.replies), (5, 0, 0));
}

#[test]
fn fixed_replies_n_bytes_starting_with_the_request_header() {
    let sink = start(&udp_config(SinkMode::Fixed(100))).expect("sink starts");
    let c = client(sink.local_addr());
    for (seq, len) in [(0, 1000), (1, HEADER_LEN), (2, 100)] {
        let d = datagram(9, seq, len);
        c.send(&d).expect("send");
        let reply = recv(&c);
        assert_eq!(reply.len(), 100);
        assert_eq!(reply[..HEADER_LEN], d[..HEADER_LEN]);
        assert!(reply[HEADER_LEN..].iter().all(|&b| b == b'x'));
        assert_eq!(
            UdpHeader::read(&reply).map(|h| (h.flow, h.seq)),
            Some((9, seq))
        );
    }
    c.send(b"abc").expect("send");
    assert_eq!(recv(&c), [&b"abc"[..], &[b'x'; 97]].concat());
    let stats = sink.stop();
    assert_eq!((stats.replies, stats.bytes_sent), (4, 400));
}

#[test]
fn drop_ratio_drops_the_seeded_half_and_echo_answers_the_rest() {
    const N: u64 = 1000;
    const SEED: u64 = 0x5eed;
    let mut cfg = udp_config(SinkMode::Echo);
    cfg.drop_ratio = 0.5;
    cfg.seed = SEED;
    // The decisions the single sink thread must make, datagram by datagram.
    let mut rng = thread_rng(SEED, 0);
    let dropped: Vec<bool> = (0..N).map(|_| rng.f64() < 0.5).collect();
    let expected_dropped = dropped.iter().filter(|&&d| d).count() as u64;
    assert!((400..600).contains(&expected_dropped), "{expected_dropped}");

    let sink = start(&cfg).expect("sink starts");
    let c = client(sink.local_addr());
    let mut echoed = Vec::new();
    // In chunks, reading the echoes of each, so no socket buffer overflows (an
    // overflow would shift the draws).
    for chunk in (0..N).collect::<Vec<_>>().chunks(100) {
        for &seq in chunk {
            c.send(&datagram(3, seq, 64)).expect("send");
        }
        let answered = chunk.iter().filter(|&&s| !dropped[s as usize]).count();
        for _ in 0..answered {
            let reply = recv(&c);
            echoed.push(UdpHeader::read(&reply).expect("our header").seq);
        }
    }
    assert_silent(&c, Duration::from_millis(30));
    let stats = sink.stop();
    let want: Vec<u64> = (0..N).filter(|&s| !dropped[s as usize]).collect();
    assert_eq!(echoed, want);
    assert_eq!(stats.dropped, expected_dropped);
    assert_eq!(stats.received, N - expected_dropped);
    assert_eq!(stats.replies, N - expected_dropped);
    assert_eq!(stats.kernel_drops, 0);
    // Dropped datagrams are lost to the sink too, except trailing ones it cannot know.
    let trailing = dropped.iter().rev().take_while(|&&d| d).count() as u64;
    assert_eq!(stats.lost, expected_dropped - trailing);
}

#[test]
fn two_cores_share_one_port() {
    let mut cfg = udp_config(SinkMode::Echo);
    cfg.cores = vec![0, 1];
    let sink = start(&cfg).expect("sink starts");
    let clients: Vec<UdpSocket> = (0..16).map(|_| client(sink.local_addr())).collect();
    for (i, c) in clients.iter().enumerate() {
        for seq in 0..3 {
            let d = datagram(i as u32, seq, 32 + i);
            c.send(&d).expect("send");
            assert_eq!(recv(c), d);
        }
    }
    // A thread publishes right after its batch's replies leave: wait for it.
    let live = wait_for(&sink, 48);
    assert_eq!(live.received, 48);
    let stats = sink.stop();
    assert_eq!((stats.received, stats.flows, stats.lost), (48, 16, 0));
    assert_eq!(stats.replies, 48);
}

#[test]
fn stop_returns_promptly() {
    for mode in [SinkMode::Count, SinkMode::Echo] {
        let sink = start(&udp_config(mode)).expect("sink starts");
        let c = client(sink.local_addr());
        for seq in 0..10 {
            c.send(&datagram(0, seq, 64)).expect("send");
        }
        wait_for(&sink, 10);
        let t = Instant::now();
        let stats = sink.stop();
        let took = t.elapsed();
        assert!(took < Duration::from_millis(100), "stop took {took:?}");
        assert_eq!(stats.received, 10);
    }
    // An idle sink stops as fast.
    let sink = start(&udp_config(SinkMode::Count)).expect("sink starts");
    let t = Instant::now();
    let stats = sink.stop();
    assert!(t.elapsed() < Duration::from_millis(100));
    assert_eq!(stats.first_datagram_ns, None);
    assert!(stats.series.is_empty());
    assert_eq!(udp_report_json(&stats)["loss_ratio"], 0.0);
}

#[test]
fn the_series_has_one_entry_per_second() {
    let sink = start(&udp_config(SinkMode::Count)).expect("sink starts");
    let c = client(sink.local_addr());
    for seq in 0..5 {
        c.send(&datagram(0, seq, 100)).expect("send");
    }
    wait_for(&sink, 5);
    std::thread::sleep(Duration::from_millis(1100));
    // Seq 5 and 6 never sent.
    for seq in 7..10 {
        c.send(&datagram(0, seq, 100)).expect("send");
    }
    wait_for(&sink, 8);
    let stats = sink.stop();
    assert!(stats.elapsed_s >= 1.0, "{}", stats.elapsed_s);
    let s = &stats.series;
    assert_eq!(s.len(), 2, "{s:?}");
    assert_eq!((s[0].second, s[0].received, s[0].lost), (0, 5, 0));
    assert_eq!((s[1].second, s[1].received, s[1].lost), (1, 3, 2));
    assert_eq!(s[0].received_pps, 5.0);
    assert_eq!(s[0].received_bps, 5.0 * 100.0 * 8.0);
    assert!(!s[0].partial && s[1].partial);
}

#[test]
fn ipv6_sources_are_tracked() {
    if UdpSocket::bind("[::1]:0").is_err() {
        return; // no IPv6 loopback on this host
    }
    let mut cfg = udp_config(SinkMode::Echo);
    cfg.listen = "[::1]:0".parse().expect("literal");
    let sink = start(&cfg).expect("sink starts");
    let c = client(sink.local_addr());
    for seq in [0, 2, 1, 1] {
        let d = datagram(4, seq, 48);
        c.send(&d).expect("send");
        assert_eq!(recv(&c), d);
    }
    let stats = sink.stop();
    assert_eq!(
        (
            stats.received,
            stats.reordered,
            stats.duplicates,
            stats.lost
        ),
        (4, 1, 1, 0)
    );
}

#[test]
fn udp_only_settings_are_configuration_errors() {
    let tcp_count = SinkConfig::new(
        "127.0.0.1:0".parse().expect("literal"),
        vec![0],
        SinkMode::Count,
    );
    let err = start(&tcp_count).expect_err("count needs udp");
    assert!(matches!(err, SinkError::Config(_)), "{err:?}");
    assert!(err.to_string().contains("count"), "{err}");

    let tcp_drops = SinkConfig {
        drop_ratio: 0.1,
        ..SinkConfig::default()
    };
    assert!(matches!(start(&tcp_drops), Err(SinkError::Config(_))));

    for (mode, ratio) in [
        (SinkMode::Fixed(HEADER_LEN - 1), 0.0),
        (SinkMode::Fixed(65_508), 0.0),
        (SinkMode::Echo, 1.5),
        (SinkMode::Echo, -0.1),
        (SinkMode::Echo, f64::NAN),
    ] {
        let mut cfg = udp_config(mode);
        cfg.drop_ratio = ratio;
        let err = start(&cfg).expect_err("invalid");
        assert!(
            matches!(err, SinkError::Config(_)),
            "{mode} {ratio}: {err:?}"
        );
    }
    let mut cfg = udp_config(SinkMode::Echo);
    cfg.delay = Some(Duration::from_millis(1));
    assert!(matches!(start(&cfg), Err(SinkError::Config(_))));
    let mut cfg = udp_config(SinkMode::Fixed(HEADER_LEN));
    cfg.drop_ratio = 1.0;
    start(&cfg).expect("the bounds are valid").stop();
}

#[test]
fn count_mode_parses_and_prints() {
    assert_eq!("count".parse::<SinkMode>(), Ok(SinkMode::Count));
    assert_eq!(SinkMode::Count.to_string(), "count");
    let err = "counting".parse::<SinkMode>().expect_err("unknown");
    assert!(err.contains("count, UDP only"), "{err}");
}

#[test]
fn tcp_snapshot_reads_live_counters() {
    use std::io::{Read, Write};
    let sink = start(&SinkConfig::default()).expect("sink starts");
    let mut s = std::net::TcpStream::connect(sink.local_addr()).expect("connect");
    s.write_all(b"ping").expect("write");
    let mut buf = [0u8; 4];
    s.read_exact(&mut buf).expect("echo");
    let deadline = Instant::now() + Duration::from_secs(2);
    let live = loop {
        let live = sink.snapshot();
        if live.replies == 1 || Instant::now() > deadline {
            break live;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(
        (live.connections_accepted, live.bytes_received, live.replies),
        (1, 4, 1)
    );
    assert_eq!(live.received, 0);
    drop(s);
    assert_eq!(sink.stop().bytes_sent, 4);
}

#[test]
fn thread_parts_merge_by_second_and_gaps_are_filled() {
    let entry = |second, received| SecondStats {
        second,
        received,
        bytes: received * 10,
        lost: 1,
        ..SecondStats::default()
    };
    let a = SinkStats {
        received: 3,
        first_datagram_ns: Some(5_000),
        last_datagram_ns: Some(3_000_000_000),
        series: vec![entry(0, 1), entry(3, 2)],
        ..SinkStats::default()
    };
    let b = SinkStats {
        received: 4,
        first_datagram_ns: Some(1_000),
        last_datagram_ns: Some(1_500_000_000),
        series: vec![entry(0, 3), entry(1, 1)],
        ..SinkStats::default()
    };
    let mut total = SinkStats::default();
    total.add(&a);
    total.add(&b);
    total.finish_udp();
    assert_eq!(total.received, 7);
    assert_eq!(total.first_datagram_ns, Some(1_000));
    assert!((total.elapsed_s - 2.999_999).abs() < 1e-9);
    let got: Vec<(u64, u64, i64, bool)> = total
        .series
        .iter()
        .map(|s| (s.second, s.received, s.lost, s.partial))
        .collect();
    assert_eq!(
        got,
        [
            (0, 4, 2, false),
            (1, 1, 1, false),
            (2, 0, 0, false),
            (3, 2, 1, true)
        ]
    );
    assert_eq!(total.series[0].received_bps, 320.0);
}
