//! `blaster sink --mode broadcast` (issue 14, item 2) against small std::net clients
//! on loopback: frames built with `blaster::proto::frame`, rooms joined by their first
//! frame, every frame checked at every member. Every test takes the load lock: the
//! sinks all serve on core 1, and a reader that a second test's sink delays overflows
//! its socket buffer (a loss the drop tests would count).
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use blaster::proto::frame::{self, Entry, FrameHeader, HEADER_BYTES, LEN_PREFIX_BYTES};

const FRAME_BYTES: usize = 50;

/// The frame `member` of `room` sends at tick `seq`, with its TCP prefix; the
/// padding depends on all three so a relay that mixed bytes up is caught.
fn tcp_frame(room: u32, member: u16, seq: u64, size: usize) -> Vec<u8> {
    let mut b = vec![0u8; LEN_PREFIX_BYTES + size];
    frame::encode_len(size, &mut b);
    FrameHeader {
        room,
        member,
        seq,
        intended_ns: seq * 1000 + member as u64,
        ..FrameHeader::default()
    }
    .encode(&mut b[LEN_PREFIX_BYTES..]);
    for (i, x) in b[LEN_PREFIX_BYTES + HEADER_BYTES..].iter_mut().enumerate() {
        *x = (i as u64 ^ seq ^ (member as u64) << 3 ^ room as u64) as u8;
    }
    b
}

struct Member {
    room: u32,
    member: u16,
    s: TcpStream,
}

impl Member {
    fn connect(addr: &str, room: u32, member: u16) -> Member {
        let s = TcpStream::connect(addr).expect("connect to the sink");
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Member { room, member, s }
    }

    fn send(&mut self, seq: u64) {
        self.s
            .write_all(&tcp_frame(self.room, self.member, seq, FRAME_BYTES))
            .unwrap();
    }

    /// The next frame (prefix included), or `None` at end of stream.
    fn recv(&mut self) -> Option<Vec<u8>> {
        let mut prefix = [0u8; LEN_PREFIX_BYTES];
        match self.s.read_exact(&mut prefix) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return None,
            Err(e) => panic!("member {} of room {}: {e}", self.member, self.room),
        }
        let len = u32::from_be_bytes(prefix) as usize;
        let mut b = prefix.to_vec();
        b.resize(LEN_PREFIX_BYTES + len, 0);
        self.s.read_exact(&mut b[LEN_PREFIX_BYTES..]).unwrap();
        Some(b)
    }

    /// The next frame if one starts arriving within `wait`.
    fn try_recv(&mut self, wait: Duration) -> Option<Vec<u8>> {
        self.s.set_read_timeout(Some(wait)).unwrap();
        let mut first = [0u8; 1];
        let r = self.s.read(&mut first);
        self.s
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        match r {
            Ok(1) => {}
            Ok(_) => return None,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None;
            }
            Err(e) => panic!("{e}"),
        }
        let mut rest = [0u8; LEN_PREFIX_BYTES - 1];
        self.s.read_exact(&mut rest).unwrap();
        let prefix = [first[0], rest[0], rest[1], rest[2]];
        let len = u32::from_be_bytes(prefix) as usize;
        let mut b = prefix.to_vec();
        b.resize(LEN_PREFIX_BYTES + len, 0);
        self.s.read_exact(&mut b[LEN_PREFIX_BYTES..]).unwrap();
        Some(b)
    }

    /// Nothing arrives within `wait`.
    fn quiet(&mut self, wait: Duration) -> bool {
        self.s.set_read_timeout(Some(wait)).unwrap();
        let mut b = [0u8; 1];
        let r = self.s.read(&mut b);
        self.s
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        matches!(r, Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
    }
}

fn header(b: &[u8]) -> FrameHeader {
    FrameHeader::decode(&b[LEN_PREFIX_BYTES..]).expect("a relayed frame decodes")
}

/// Joins members one at a time: member k's first frame (seq 0) must reach every
/// member already in, which proves k is in before the next one joins.
fn join_room(addr: &str, room: u32, size: u16, echo: bool) -> Vec<Member> {
    let mut ms: Vec<Member> = Vec::new();
    for k in 0..size {
        let mut m = Member::connect(addr, room, k);
        m.send(0);
        if echo {
            assert_eq!(m.recv(), Some(tcp_frame(room, k, 0, FRAME_BYTES)));
        }
        for other in &mut ms {
            assert_eq!(other.recv(), Some(tcp_frame(room, k, 0, FRAME_BYTES)));
        }
        ms.push(m);
    }
    ms
}

/// Every member sends `frames` frames (seq 1..=frames); each member must receive
/// every other member's, byte for byte and in order per sender, and its own exactly
/// when `echo`.
fn exchange(ms: &mut [Member], frames: u64, echo: bool) {
    for seq in 1..=frames {
        for m in ms.iter_mut() {
            m.send(seq);
        }
    }
    let n = ms.len();
    for m in ms.iter_mut() {
        let expected = if echo { n } else { n - 1 } * frames as usize;
        let mut next: BTreeMap<u16, u64> = BTreeMap::new();
        for _ in 0..expected {
            let b = m.recv().expect("the sink closed a member");
            let h = header(&b);
            assert_eq!(h.room, m.room, "a frame from another room");
            assert!(
                echo || h.member != m.member,
                "member {} got its own frame without --echo-to-sender",
                m.member
            );
            let seq = next.entry(h.member).or_insert(1);
            assert_eq!(h.seq, *seq, "member {} from {}", m.member, h.member);
            assert_eq!(b, tcp_frame(m.room, h.member, h.seq, FRAME_BYTES));
            *seq += 1;
        }
        assert!(m.quiet(Duration::from_millis(100)), "more frames than sent");
    }
}

fn sink_json(sink: Sink, json: &std::path::Path) -> serde_json::Value {
    sink.stop();
    read_json(&json.to_path_buf())
}

#[test]
fn every_member_gets_every_other_members_frames_and_rooms_stay_apart() {
    let _l = load_lock();
    let (_dir, json) = tmp_json();
    let sink = Sink::start(&[
        "--mode",
        "broadcast",
        "--room-size",
        "5",
        "--json",
        json.to_str().unwrap(),
    ]);
    let mut a = join_room(&sink.addr, 7, 5, false);
    let mut b = join_room(&sink.addr, 8, 3, false);
    exchange(&mut a, 20, false);
    exchange(&mut b, 20, false);
    let v = sink_json(sink, &json);
    let bc = &v["broadcast"];
    // Joins: 5 + 3 frames of seq 0 then 20 each.
    assert_eq!(bc["frames_received"], 8 + 8 * 20, "{v}");
    assert_eq!(bc["joins"], 8);
    // Room of 5: each frame to 4 others; room of 3: to 2. Joins went to those in.
    let joins: u64 = (0..5).sum::<u64>() + (0..3).sum::<u64>();
    assert_eq!(bc["relayed"], joins + 5 * 20 * 4 + 3 * 20 * 2, "{v}");
    assert_eq!(bc["relay_dropped"], 0);
}

#[test]
fn echo_to_sender_relays_the_senders_own_frames_too() {
    let _l = load_lock();
    let sink = Sink::start(&[
        "--mode",
        "broadcast",
        "--room-size",
        "3",
        "--echo-to-sender",
    ]);
    let mut a = join_room(&sink.addr, 1, 3, true);
    exchange(&mut a, 10, true);
}

#[test]
fn a_full_room_refuses_the_next_member_and_a_leave_makes_room() {
    let _l = load_lock();
    let (_dir, json) = tmp_json();
    let sink = Sink::start(&[
        "--mode",
        "broadcast",
        "--room-size",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    let mut a = join_room(&sink.addr, 3, 2, false);
    let mut extra = Member::connect(&sink.addr, 3, 2);
    extra.send(0);
    assert_eq!(
        extra.recv(),
        None,
        "the third member of a room of 2 is closed"
    );
    // Member 1 leaves; a newcomer takes its place (once the sink has seen the leave:
    // until then it is refused and closed, and tries again).
    drop(a.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut newcomer = loop {
        let mut m = Member::connect(&sink.addr, 3, 1);
        m.send(0);
        if let Some(b) = a[0].try_recv(Duration::from_millis(300)) {
            assert_eq!(b, tcp_frame(3, 1, 0, FRAME_BYTES));
            break m;
        }
        assert_eq!(m.recv(), None, "neither joined nor refused");
        assert!(Instant::now() < deadline, "the leave never freed the room");
    };
    newcomer.send(1);
    assert_eq!(a[0].recv(), Some(tcp_frame(3, 1, 1, FRAME_BYTES)));
    a[0].send(1);
    assert_eq!(newcomer.recv(), Some(tcp_frame(3, 0, 1, FRAME_BYTES)));
    let v = sink_json(sink, &json);
    assert!(
        v["broadcast"]["joins_refused"].as_u64().unwrap() >= 1,
        "{v}"
    );
}

#[test]
fn a_frame_that_does_not_decode_closes_its_connection_and_is_counted() {
    let _l = load_lock();
    let (_dir, json) = tmp_json();
    let sink = Sink::start(&[
        "--mode",
        "broadcast",
        "--room-size",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    let mut http = Member::connect(&sink.addr, 0, 0);
    http.s
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(http.recv(), None);
    let mut bad_magic = Member::connect(&sink.addr, 0, 0);
    let mut f = tcp_frame(0, 0, 0, FRAME_BYTES);
    f[LEN_PREFIX_BYTES] = b'X';
    bad_magic.s.write_all(&f).unwrap();
    assert_eq!(bad_magic.recv(), None);
    // The sink still serves a well-formed room.
    let mut a = join_room(&sink.addr, 9, 2, false);
    exchange(&mut a, 3, false);
    let v = sink_json(sink, &json);
    assert_eq!(v["broadcast"]["frames_invalid"], 2, "{v}");
}

#[test]
fn frames_split_at_every_byte_are_relayed_whole() {
    let _l = load_lock();
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "2"]);
    let mut a = join_room(&sink.addr, 4, 2, false);
    // Two frames in one write, then one frame byte by byte.
    let mut two = tcp_frame(4, 0, 1, FRAME_BYTES);
    two.extend(tcp_frame(4, 0, 2, FRAME_BYTES));
    a[0].s.write_all(&two).unwrap();
    for byte in tcp_frame(4, 0, 3, FRAME_BYTES) {
        a[0].s.write_all(&[byte]).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    for seq in 1..=3 {
        assert_eq!(a[1].recv(), Some(tcp_frame(4, 0, seq, FRAME_BYTES)));
    }
}

#[test]
fn a_member_that_does_not_read_loses_frames_counted_and_the_others_do_not() {
    let _l = load_lock();
    let (_dir, json) = tmp_json();
    let sink = Sink::start(&[
        "--mode",
        "broadcast",
        "--room-size",
        "3",
        "--json",
        json.to_str().unwrap(),
    ]);
    let mut a = join_room(&sink.addr, 5, 3, false);
    // Member 2 stops reading; member 0 sends 8 MB in 4 KiB frames, each once
    // member 1 has the one before (so member 1, which reads, is never behind), which
    // member 2's socket buffers and its 16 KiB send queue at the sink cannot hold.
    let frames = 2000;
    let size = 4096;
    for seq in 1..=frames {
        let f = tcp_frame(5, 0, seq, size);
        a[0].s.write_all(&f).unwrap();
        let got = a[1].recv().expect("member 1 is served");
        assert!(got == f, "member 1: frame {seq} differs");
    }
    let v = sink_json(sink, &json);
    let dropped = v["broadcast"]["relay_dropped"].as_u64().unwrap();
    assert!(dropped > 0 && dropped < frames, "{v}");
    assert_eq!(
        v["broadcast"]["relayed"].as_u64().unwrap() + dropped,
        3 + 2 * frames,
        "{v}"
    );
}

#[test]
fn a_stall_freezes_relaying_for_its_length() {
    let _l = load_lock();
    let sink = Sink::start(&[
        "--mode",
        "broadcast",
        "--room-size",
        "2",
        "--stall",
        "400ms",
        "--every",
        "1s",
    ]);
    // The stall schedule starts at the first request byte; the first freeze is at
    // 500 ms after it and lasts 400 ms.
    let started = Instant::now();
    let mut a = join_room(&sink.addr, 6, 2, false);
    let mut worst = Duration::ZERO;
    let mut seq = 1;
    while started.elapsed() < Duration::from_millis(1300) {
        let t = Instant::now();
        a[0].send(seq);
        assert_eq!(a[1].recv(), Some(tcp_frame(6, 0, seq, FRAME_BYTES)));
        worst = worst.max(t.elapsed());
        seq += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    // A frame sent during the freeze waits for its end: at least most of 400 ms.
    assert!(worst >= Duration::from_millis(250), "worst relay {worst:?}");
    assert!(worst < Duration::from_millis(1000), "worst relay {worst:?}");
}

#[test]
fn a_delay_holds_each_relay_back() {
    let _l = load_lock();
    let sink = Sink::start(&["--mode", "broadcast", "--room-size", "2", "--delay", "50ms"]);
    let mut a = join_room(&sink.addr, 2, 2, false);
    for seq in 1..=5 {
        let t = Instant::now();
        a[0].send(seq);
        assert_eq!(a[1].recv(), Some(tcp_frame(2, 0, seq, FRAME_BYTES)));
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(45), "relay after {took:?}");
    }
}

/// Aggregate downlink frames: decode one, returning its header and entries.
fn downlink(b: &[u8]) -> (FrameHeader, Vec<Entry>) {
    let h = header(b);
    let body = &b[LEN_PREFIX_BYTES..];
    let entries = (0..h.entries as usize)
        .map(|i| Entry::decode(body, i))
        .collect();
    (h, entries)
}

/// Joins members one at a time for an aggregating sink: member k is in once it gets
/// a downlink frame (only members get them).
fn join_aggregate(addr: &str, room: u32, size: u16) -> Vec<Member> {
    (0..size)
        .map(|k| {
            let mut m = Member::connect(addr, room, k);
            m.send(0);
            let (h, _) = downlink(&m.recv().expect("a downlink frame"));
            assert_eq!((h.room, h.member), (room, k));
            m
        })
        .collect()
}

#[test]
fn aggregate_sends_each_member_one_downlink_frame_per_tick_with_the_rooms_frames() {
    let _l = load_lock();
    let (_dir, json) = tmp_json();
    let sink = Sink::start(&[
        "--mode",
        "broadcast",
        "--room-size",
        "3",
        "--aggregate",
        "--down-size",
        "200",
        "--tick",
        "30ms",
        "--json",
        json.to_str().unwrap(),
    ]);
    let mut ms = join_aggregate(&sink.addr, 11, 3);
    let frames = 10u64;
    for seq in 1..=frames {
        for m in ms.iter_mut() {
            m.send(seq);
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    let mut consecutive = true;
    for m in ms.iter_mut() {
        // (sender, seq) of every entry, after the joins.
        let mut seen: BTreeMap<(u16, u64), u32> = BTreeMap::new();
        let mut last_tick: Option<u64> = None;
        let deadline = Instant::now() + Duration::from_secs(5);
        while seen.keys().filter(|(_, seq)| *seq == frames).count() < 2 {
            assert!(Instant::now() < deadline, "member {}: {seen:?}", m.member);
            let b = m.recv().expect("downlink frames keep coming");
            assert_eq!(
                b.len(),
                LEN_PREFIX_BYTES + 200,
                "a downlink frame of --down-size"
            );
            let (h, entries) = downlink(&b);
            assert!(h.aggregate());
            assert_eq!((h.room, h.member, h.intended_ns), (11, m.member, 0));
            if let Some(t) = last_tick {
                assert!(h.seq > t, "one downlink per tick: {} after {t}", h.seq);
                consecutive &= h.seq == t + 1;
            }
            last_tick = Some(h.seq);
            for e in entries {
                assert_ne!(e.member, m.member, "own frame without --echo-to-sender");
                assert_eq!(e.intended_ns, e.seq * 1000 + e.member as u64);
                if e.seq > 0 {
                    *seen.entry((e.member, e.seq)).or_default() += 1;
                }
            }
        }
        let expected: Vec<(u16, u64)> = (0..3u16)
            .filter(|&o| o != m.member)
            .flat_map(|o| (1..=frames).map(move |s| (o, s)))
            .collect();
        assert_eq!(seen.keys().copied().collect::<Vec<_>>(), expected);
        assert!(seen.values().all(|&n| n == 1), "an entry twice: {seen:?}");
    }
    let v = sink_json(sink, &json);
    let bc = &v["broadcast"];
    assert_eq!(bc["frames_received"], 3 + 3 * frames, "{v}");
    assert_eq!(bc["relayed"], 0, "aggregate relays nothing frame by frame");
    assert_eq!(bc["aggregate_overflow"], 0);
    assert!(bc["downlink_frames"].as_u64().unwrap() >= 3 * frames, "{v}");
    // Consecutive ticks at every member, unless the sink says it skipped some.
    assert!(
        consecutive || bc["ticks_skipped"].as_u64().unwrap() > 0,
        "{v}"
    );
}

// ---- UDP: one frame per datagram, a peer is a source address ----

struct UdpMember {
    room: u32,
    member: u16,
    s: std::net::UdpSocket,
}

impl UdpMember {
    fn bind(addr: &str, room: u32, member: u16) -> UdpMember {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        UdpMember { room, member, s }
    }

    fn datagram(&self, seq: u64, size: usize) -> Vec<u8> {
        tcp_frame(self.room, self.member, seq, size)[LEN_PREFIX_BYTES..].to_vec()
    }

    fn send(&self, seq: u64) {
        self.s.send(&self.datagram(seq, FRAME_BYTES)).unwrap();
    }

    fn try_recv(&self, wait: Duration) -> Option<Vec<u8>> {
        self.s.set_read_timeout(Some(wait)).unwrap();
        let mut b = vec![0u8; 65536];
        let r = self.s.recv(&mut b);
        self.s
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        match r {
            Ok(n) => {
                b.truncate(n);
                Some(b)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
            Err(e) => panic!("{e}"),
        }
    }

    fn recv(&self) -> Vec<u8> {
        self.try_recv(Duration::from_secs(5))
            .unwrap_or_else(|| panic!("member {} of room {}: nothing", self.member, self.room))
    }
}

/// The UDP twin of `join_room` (no loss: no --drop).
fn join_udp(addr: &str, room: u32, size: u16) -> Vec<UdpMember> {
    let mut ms: Vec<UdpMember> = Vec::new();
    for k in 0..size {
        let m = UdpMember::bind(addr, room, k);
        m.send(0);
        for other in &ms {
            assert_eq!(other.recv(), m.datagram(0, FRAME_BYTES));
        }
        ms.push(m);
    }
    ms
}

fn udp_sink(extra: &[&str], json: &std::path::Path) -> Sink {
    let mut args = vec!["--mode", "broadcast", "--json", json.to_str().unwrap()];
    args.extend_from_slice(extra);
    Sink::start_udp(&args)
}

#[test]
fn udp_every_member_gets_every_other_members_datagrams() {
    let _l = load_lock();
    let (_dir, json) = tmp_json();
    let sink = udp_sink(&["--room-size", "4"], &json);
    let ms = join_udp(&sink.addr, 21, 4);
    let other = join_udp(&sink.addr, 22, 2);
    // A datagram that is no frame is ignored (and counted).
    ms[0].s.send(b"hello").unwrap();
    let frames = 20;
    for seq in 1..=frames {
        for m in ms.iter().chain(&other) {
            m.send(seq);
        }
    }
    for m in ms.iter().chain(&other) {
        let n = if m.room == 21 { 4 } else { 2 };
        let mut next: BTreeMap<u16, u64> = BTreeMap::new();
        for _ in 0..(n - 1) * frames {
            let b = m.recv();
            let h = FrameHeader::decode(&b).expect("a relayed frame");
            assert_eq!(h.room, m.room, "a datagram from another room");
            assert_ne!(h.member, m.member, "its own frame without --echo-to-sender");
            let seq = next.entry(h.member).or_insert(1);
            assert_eq!(h.seq, *seq);
            assert_eq!(b, tcp_frame(m.room, h.member, h.seq, FRAME_BYTES)[4..]);
            *seq += 1;
        }
        assert_eq!(
            m.try_recv(Duration::from_millis(100)),
            None,
            "more than sent"
        );
    }
    sink.stop();
    let v = read_json(&json);
    let bc = &v["broadcast"];
    assert_eq!(bc["frames_invalid"], 1, "{v}");
    assert_eq!(bc["joins"], 6, "{v}");
    assert_eq!(bc["frames_received"], 6 + 6 * frames, "{v}");
    assert_eq!(bc["relayed"], (6 + 1) + 4 * 3 * frames + 2 * frames, "{v}");
}

/// UDP has no disconnect: a client that comes back on a new socket (the next run, a
/// NAT rebinding) announces the same member from a new address. It takes the
/// member's place at once, not after the old address's 10 s of silence (until then
/// the room would be full, or relay to an address nobody reads).
#[test]
fn udp_a_member_on_a_new_address_takes_its_place() {
    let _l = load_lock();
    let (_dir, json) = tmp_json();
    let sink = udp_sink(&["--room-size", "2"], &json);
    let old = join_udp(&sink.addr, 31, 2);
    // Member 0 again, from a new socket: member 1 hears it, as a room of 2 allows.
    let moved = UdpMember::bind(&sink.addr, 31, 0);
    moved.send(1);
    assert_eq!(old[1].recv(), moved.datagram(1, FRAME_BYTES));
    // Member 1's frames go to the new address only.
    old[1].send(2);
    assert_eq!(moved.recv(), old[1].datagram(2, FRAME_BYTES));
    assert_eq!(old[0].try_recv(Duration::from_millis(200)), None);
    // The old address is no member any more: its next frame rejoins as member 0,
    // moving the member back.
    old[0].send(3);
    assert_eq!(old[1].recv(), old[0].datagram(3, FRAME_BYTES));
    assert_eq!(moved.try_recv(Duration::from_millis(200)), None);
    sink.stop();
    let v = read_json(&json);
    let bc = &v["broadcast"];
    assert_eq!(bc["members_moved"], 2, "{v}");
    assert_eq!(bc["joins"], 4, "{v}");
    assert_eq!(bc["joins_refused"], 0, "{v}");
}

#[test]
fn udp_drop_loses_about_that_share_of_the_frames() {
    let _l = load_lock();
    let (_dir, json) = tmp_json();
    let sink = udp_sink(
        &["--room-size", "2", "--echo-to-sender", "--drop", "0.2"],
        &json,
    );
    // With --echo-to-sender a member hears its own join; a dropped join is resent.
    let join = |k: u16| {
        let m = UdpMember::bind(&sink.addr, 31, k);
        for _ in 0..50 {
            m.send(0);
            if let Some(b) = m.try_recv(Duration::from_millis(100)) {
                assert_eq!(b, m.datagram(0, FRAME_BYTES));
                return m;
            }
        }
        panic!("member {k} never joined");
    };
    let sender = join(0);
    let receiver = join(1);
    let frames = 2000u64;
    // The receiver reads as the frames arrive, so its socket buffer never overflows.
    let reader = std::thread::spawn(move || {
        let mut got = 0u64;
        while let Some(b) = receiver.try_recv(Duration::from_millis(500)) {
            let h = FrameHeader::decode(&b).unwrap();
            if h.member == 0 && h.seq > 0 {
                got += 1;
            }
        }
        got
    });
    for seq in 1..=frames {
        sender.send(seq);
        if seq % 20 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let got = reader.join().unwrap();
    let lost = frames - got;
    // Binomial(2000, 0.2): 400 ± 18 (one standard deviation); the seed fixes the draw.
    assert!((300..=500).contains(&lost), "lost {lost} of {frames}");
    sink.stop();
    let v = read_json(&json);
    assert!(v["dropped"].as_u64().unwrap() >= lost, "{v}");
}

#[test]
fn udp_stall_freezes_relaying_for_its_length() {
    let _l = load_lock();
    let (_dir, json) = tmp_json();
    let sink = udp_sink(
        &["--room-size", "2", "--stall", "400ms", "--every", "1s"],
        &json,
    );
    let started = Instant::now();
    let ms = join_udp(&sink.addr, 41, 2);
    let mut worst = Duration::ZERO;
    let mut seq = 1;
    while started.elapsed() < Duration::from_millis(1300) {
        let t = Instant::now();
        ms[0].send(seq);
        assert_eq!(ms[1].recv(), ms[0].datagram(seq, FRAME_BYTES));
        worst = worst.max(t.elapsed());
        seq += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(worst >= Duration::from_millis(250), "worst relay {worst:?}");
    assert!(worst < Duration::from_millis(1000), "worst relay {worst:?}");
}

#[test]
fn udp_aggregate_sends_one_downlink_datagram_per_member_per_tick() {
    let _l = load_lock();
    let (_dir, json) = tmp_json();
    let sink = udp_sink(
        &[
            "--room-size",
            "3",
            "--aggregate",
            "--down-size",
            "150",
            "--tick",
            "30ms",
        ],
        &json,
    );
    let ms: Vec<UdpMember> = (0..3)
        .map(|k| {
            let m = UdpMember::bind(&sink.addr, 51, k);
            m.send(0);
            let b = m.recv();
            let h = FrameHeader::decode(&b).unwrap();
            assert_eq!((h.room, h.member, h.aggregate()), (51, k, true));
            m
        })
        .collect();
    let frames = 10u64;
    for seq in 1..=frames {
        for m in &ms {
            m.send(seq);
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    let mut consecutive = true;
    for m in &ms {
        let mut seen: BTreeMap<(u16, u64), u32> = BTreeMap::new();
        let mut last: Option<u64> = None;
        let deadline = Instant::now() + Duration::from_secs(5);
        while seen.keys().filter(|(_, s)| *s == frames).count() < 2 {
            assert!(Instant::now() < deadline, "member {}: {seen:?}", m.member);
            let b = m.recv();
            assert_eq!(b.len(), 150);
            let h = FrameHeader::decode(&b).unwrap();
            assert!(h.aggregate());
            assert_eq!((h.room, h.member, h.intended_ns), (51, m.member, 0));
            if let Some(t) = last {
                assert!(h.seq > t, "one downlink per tick: {} after {t}", h.seq);
                consecutive &= h.seq == t + 1;
            }
            last = Some(h.seq);
            for i in 0..h.entries as usize {
                let e = Entry::decode(&b, i);
                assert_ne!(e.member, m.member);
                if e.seq > 0 {
                    *seen.entry((e.member, e.seq)).or_default() += 1;
                }
            }
        }
        let expected: Vec<(u16, u64)> = (0..3u16)
            .filter(|&o| o != m.member)
            .flat_map(|o| (1..=frames).map(move |s| (o, s)))
            .collect();
        assert_eq!(seen.keys().copied().collect::<Vec<_>>(), expected);
        assert!(seen.values().all(|&n| n == 1), "an entry twice: {seen:?}");
    }
    sink.stop();
    let v = read_json(&json);
    let bc = &v["broadcast"];
    assert_eq!(bc["frames_received"], 3 + 3 * frames, "{v}");
    assert!(
        consecutive || bc["ticks_skipped"].as_u64().unwrap() > 0,
        "{v}"
    );
}

/// `--members-per-connection 2`: connection A carries a member of room 1 and one of
/// room 2, each with other room mates (B in room 1, C in room 2). Each frame goes to
/// the room its header names: A's room-2 frame reaches C and not B. A third room on
/// A is refused (the connection closed, counted).
#[test]
fn a_connection_of_several_members_is_in_each_of_their_rooms() {
    let _l = load_lock();
    let (_dir, json) = tmp_json();
    let sink = Sink::start(&[
        "--mode",
        "broadcast",
        "--room-size",
        "5",
        "--members-per-connection",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    let mut b = Member::connect(&sink.addr, 1, 1);
    b.send(0);
    let mut c = Member::connect(&sink.addr, 2, 1);
    c.send(0);
    let mut a = Member::connect(&sink.addr, 1, 0);
    a.send(0); // joins room 1
    assert_eq!(b.recv(), Some(tcp_frame(1, 0, 0, FRAME_BYTES)));
    a.room = 2;
    a.send(0); // joins room 2
    assert_eq!(c.recv(), Some(tcp_frame(2, 0, 0, FRAME_BYTES)));
    // Room mates' frames reach A by their rooms.
    b.send(1);
    c.send(1);
    let mut got = [a.recv().unwrap(), a.recv().unwrap()];
    got.sort();
    let mut want = [
        tcp_frame(1, 1, 1, FRAME_BYTES),
        tcp_frame(2, 1, 1, FRAME_BYTES),
    ];
    want.sort();
    assert_eq!(got, want);
    // A's next frame in room 2 goes to C only.
    a.send(1);
    assert_eq!(c.recv(), Some(tcp_frame(2, 0, 1, FRAME_BYTES)));
    assert!(
        b.quiet(Duration::from_millis(200)),
        "a room-2 frame reached room 1"
    );
    // A third room is one too many.
    a.room = 3;
    a.send(0);
    assert_eq!(
        a.recv(),
        None,
        "the sink closes a connection past its rooms"
    );
    let v = sink_json(sink, &json);
    assert_eq!(v["broadcast"]["joins"], 4, "{v}");
    assert_eq!(v["broadcast"]["joins_refused"], 1, "{v}");
}
