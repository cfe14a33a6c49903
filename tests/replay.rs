//! `--replay` (issue 37 item 1): a recording's requests sent at their recorded
//! offsets, checked on the wire. The tests write a text recording, replay it against
//! nginx while tshark captures the loopback traffic to the server's port, then replay
//! that capture (pcap) and capture again: each request appears exactly once, at its
//! offset. Shards of a replay send every line exactly once between them. UDP: a
//! conversation of datagrams recorded by tshark, and a text recording, replayed with
//! `--proto udp` against the sink's echo, each datagram once at its instant. A GoReplay
//! file written by the test goes out at its offsets too. Bad recordings are refused in
//! one line before any traffic.
mod common;
use common::servers::nginx_listening;
use common::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Requests in the test recording.
const LINES: usize = 60;
/// How far a request's wire instant may be from its recorded offset (the two aligned,
/// see [`assert_on_time`]): the median, and every one beyond what the run itself
/// reported as its dispatch lag (a host that stalls the generator makes a request
/// late; the report must then say so). A broken timetable (everything at once, or at
/// a constant rate) misses by hundreds of ms.
const MEDIAN_ERR_NS: i64 = 300_000;
const MAX_ERR_NS: i64 = 5_000_000;

/// The recording: request i is `GET /r/i` at an irregular offset (bursts of 0 ms
/// gaps, pauses of 60 ms), about one second in all.
fn recording() -> (String, Vec<i64>) {
    const GAPS_MS: [i64; 6] = [1, 25, 0, 7, 60, 3];
    let mut at = 0;
    let mut offsets = Vec::new();
    let mut text = String::from("# written by tests/replay.rs\n");
    for i in 0..LINES {
        at += GAPS_MS[i % GAPS_MS.len()];
        offsets.push(at * 1_000_000);
        text.push_str(&format!("{at}ms GET /r/{i}\n"));
    }
    (text, offsets)
}

/// tshark capturing TCP to and from `port` on loopback into `file`, once it says it
/// captures; `None` (the test skips) when it cannot capture here.
fn capture(port: u16, file: &Path) -> Option<Child> {
    capture_filtered(&format!("tcp port {port}"), file)
}

/// tshark capturing what `filter` (a capture filter) passes on loopback into `file`.
fn capture_filtered(filter: &str, file: &Path) -> Option<Child> {
    let bin = common::servers::require("tshark", "tshark");
    let mut child = Command::new(bin)
        .args(["-i", "lo", "-f", filter, "-w"])
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tshark");
    // tshark says "Capturing on 'Loopback: lo'" once the capture runs.
    let mut err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut seen = Vec::new();
        let mut b = [0u8; 256];
        while let Ok(n) = err.read(&mut b) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&b[..n]);
            if String::from_utf8_lossy(&seen).contains("Capturing on") {
                let _ = tx.send(true);
            }
        }
        let _ = tx.send(false);
    });
    if rx.recv_timeout(Duration::from_secs(20)) == Ok(true) {
        // The capture is armed: a little more for the filter to be in place.
        std::thread::sleep(Duration::from_millis(300));
        return Some(child);
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Stops tshark (SIGINT: it writes out what it captured) and waits for it.
fn stop(mut child: Child) {
    std::thread::sleep(Duration::from_millis(300));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "tshark did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Each HTTP request in `file` (by tshark's dissector): its path and wire instant
/// (ns since the epoch), in capture order.
fn requests_on_wire(file: &Path, port: u16) -> Vec<(String, i64)> {
    let out = Command::new(common::servers::require("tshark", "tshark"))
        .args(["-r"])
        .arg(file)
        .args([
            "-d",
            &format!("tcp.port=={port},http"),
            "-Y",
            "http.request",
            "-T",
            "fields",
            "-e",
            "frame.time_epoch",
            "-e",
            "http.request.uri",
        ])
        .output()
        .expect("run tshark -r");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (t, uri) = l.split_once('\t').expect("two fields");
            let (s, frac) = t.split_once('.').expect("seconds.fraction");
            let frac = format!("{frac:0<9}");
            let ns = s.parse::<i64>().unwrap() * 1_000_000_000 + frac[..9].parse::<i64>().unwrap();
            (uri.to_string(), ns)
        })
        .collect()
}

/// The wire instant of each of the recording's requests, relative to the first's,
/// checking each was sent exactly once.
fn instants(wire: &[(String, i64)]) -> Vec<i64> {
    let mut at: HashMap<&str, Vec<i64>> = HashMap::new();
    for (uri, t) in wire {
        at.entry(uri.as_str()).or_default().push(*t);
    }
    assert_eq!(wire.len(), LINES, "requests on the wire: {wire:?}");
    let times: Vec<i64> = (0..LINES)
        .map(|i| {
            let seen = &at[format!("/r/{i}").as_str()];
            assert_eq!(seen.len(), 1, "/r/{i} sent {} times", seen.len());
            seen[0]
        })
        .collect();
    times.iter().map(|t| t - times[0]).collect()
}

/// Each `got[i] - want[i]` less their median (the wire has no mark of the run's
/// start, so the recording is aligned where most requests agree: one late request,
/// the first included, stays one error), checked against the bounds: (median, max)
/// of |error|.
fn assert_on_time(got: &[i64], want: &[i64], v: &serde_json::Value, what: &str) {
    let lag = v["dispatch_lag_ns"]["max"]
        .as_i64()
        .expect("the run's dispatch lag");
    let mut shift: Vec<i64> = got.iter().zip(want).map(|(g, w)| g - w).collect();
    shift.sort_unstable();
    let shift = shift[shift.len() / 2];
    let mut err: Vec<i64> = (got.iter().zip(want))
        .map(|(g, w)| (g - w - shift).abs())
        .collect();
    err.sort_unstable();
    let (median, max) = (err[err.len() / 2], err[err.len() - 1]);
    eprintln!("{what}: |wire - recorded| median {median} ns, max {max} ns; lag max {lag} ns");
    assert!(
        median <= MEDIAN_ERR_NS && max <= MAX_ERR_NS + lag,
        "{what}: |wire - recorded| median {median} ns, max {max} ns (bounds {MEDIAN_ERR_NS}, \
         {MAX_ERR_NS} + the reported dispatch lag max {lag})"
    );
}

fn replay_run(port: u16, args: &[&str]) -> serde_json::Value {
    let target = format!("127.0.0.1:{port}");
    let mut all = vec!["--target", &target, "--connections", "4"];
    all.extend_from_slice(args);
    run_report(&all, Duration::from_secs(60))
}

#[test]
fn a_recording_goes_out_at_its_offsets_and_its_capture_replays_the_same() {
    let (_nginx, port) = nginx_listening(10_000, 128, None, "");
    let dir = tempfile::tempdir().unwrap();
    let (text, offsets) = recording();
    let rec = dir.path().join("rec.txt");
    std::fs::write(&rec, text).unwrap();
    let first = offsets[0];
    let want: Vec<i64> = offsets.iter().map(|o| o - first).collect();

    // The text recording, on the wire.
    let cap: PathBuf = dir.path().join("a.pcap");
    let Some(tshark) = capture(port, &cap) else {
        skip(
            "a_recording_goes_out_at_its_offsets_and_its_capture_replays_the_same",
            "tshark cannot capture on lo here (not root?)",
        );
        return;
    };
    let v = replay_run(port, &["--replay", rec.to_str().unwrap()]);
    stop(tshark);
    assert_eq!(v["replay"]["format"], "text");
    assert_eq!(v["replay"]["recorded_requests"], LINES);
    assert_eq!(v["requests"]["completed"], LINES, "{}", v["requests"]);
    assert_eq!(v["requests"]["errors"], 0);
    assert_eq!(v["http"]["status_codes"]["200"], LINES, "{}", v["http"]);
    let a = instants(&requests_on_wire(&cap, port));
    assert_on_time(&a, &want, &v, "text recording");

    // That capture, replayed at twice the speed: the same requests, at half the
    // captured offsets.
    let cap2 = dir.path().join("b.pcap");
    let tshark = capture(port, &cap2).expect("tshark captured once already");
    // The server found by itself: the destination of the capture's first SYN.
    let v = replay_run(
        port,
        &["--replay", cap.to_str().unwrap(), "--replay-speed", "2"],
    );
    stop(tshark);
    assert_eq!(v["replay"]["format"], "pcap");
    assert_eq!(v["replay"]["recorded_requests"], LINES);
    assert_eq!(v["requests"]["completed"], LINES, "{}", v["requests"]);
    let b = instants(&requests_on_wire(&cap2, port));
    let half: Vec<i64> = a.iter().map(|t| t / 2).collect();
    assert_on_time(&b, &half, &v, "the capture at speed 2");
}

/// `--shard i/3` of one replay: between them the shards send every line once.
#[test]
fn shards_of_a_replay_send_every_line_exactly_once() {
    let (_nginx, port) = nginx_listening(10_000, 128, None, "");
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.txt");
    std::fs::write(&rec, recording().0).unwrap();
    let cap = dir.path().join("shards.pcap");
    let Some(tshark) = capture(port, &cap) else {
        skip(
            "shards_of_a_replay_send_every_line_exactly_once",
            "tshark cannot capture on lo here (not root?)",
        );
        return;
    };
    let target = format!("127.0.0.1:{port}");
    let shards = run_shards(
        dir.path(),
        3,
        &[
            "run",
            "--target",
            &target,
            "--cores",
            "0",
            "--connections",
            "3",
            "--replay",
            rec.to_str().unwrap(),
        ],
    );
    stop(tshark);
    let mut sent = 0;
    for (out, json) in &shards {
        assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(out));
        let v = read_json(&PathBuf::from(json));
        sent += v["requests"]["completed"].as_u64().unwrap();
    }
    assert_eq!(sent, LINES as u64);
    // Every line exactly once on the wire (`instants` checks it).
    instants(&requests_on_wire(&cap, port));
}

/// A bad recording or flag: one line naming the file and line, exit 2, and nothing
/// sent (a listener that accepts nothing sees no connection).
#[test]
fn bad_recordings_are_refused_in_one_line_before_any_traffic() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let target = listener.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let unsorted = file("unsorted.txt", b"0s GET /a\n2s GET /b\n1s GET /c\n");
    let empty = file("empty.txt", b"# nothing here\n\n");
    let bad_offset = file("bad.txt", b"0s GET /\nsoon GET /x\n");
    let bad_method = file("method.txt", b"0s get /\n");
    // A pcap whose only packet record is cut short.
    let mut pcap = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
    pcap.extend_from_slice(&[0; 8]);
    pcap.extend_from_slice(&65535u32.to_le_bytes());
    pcap.extend_from_slice(&1u32.to_le_bytes());
    pcap.extend_from_slice(&[0; 8]);
    pcap.extend_from_slice(&100u32.to_le_bytes());
    pcap.extend_from_slice(&100u32.to_le_bytes());
    pcap.extend_from_slice(&[0; 20]);
    let truncated = file("cut.pcap", &pcap);
    let ok = file("ok.txt", b"0s GET /\n");
    let missing = dir.path().join("missing.txt").display().to_string();
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["--replay", &unsorted], format!("{unsorted}: line 3: ")),
        (vec!["--replay", &unsorted], "sorted by offset".into()),
        (vec!["--replay", &empty], "holds no request".into()),
        (
            vec!["--replay", &bad_offset],
            format!("{bad_offset}: line 2: "),
        ),
        (
            vec!["--replay", &bad_method],
            "line 1: method must be upper-case".into(),
        ),
        (vec!["--replay", &truncated], "truncated".into()),
        (vec!["--replay", &missing], "cannot read it".into()),
        (
            vec!["--replay", &ok, "--replay-speed", "0"],
            "--replay-speed".into(),
        ),
        (
            vec!["--replay", &ok, "--replay-loop"],
            "needs --duration".into(),
        ),
        (
            vec!["--replay", &ok, "--replay-as", "xml"],
            "expected http or payload".into(),
        ),
        (
            vec!["--replay", &ok, "--replay-port", "80"],
            "is for captures".into(),
        ),
        (
            vec!["--replay", &ok, "--rate", "100"],
            "not with --rate".into(),
        ),
        (
            vec!["--replay", &ok, "--http", "GET /"],
            "not with --http".into(),
        ),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["run", "--target", &target, "--cores", "0"];
        args.extend_from_slice(&extra);
        assert_usage(&args, &needle);
    }
    // A search steps its own rates: a recording has one.
    assert_usage(
        &[
            "search", "--target", &target, "--cores", "0", "--replay", &ok, "--slo", "p99<10ms",
            "--start", "100",
        ],
        "not with blaster search's steps",
    );
    assert!(
        listener.accept().is_err(),
        "a refused recording must send nothing"
    );
}

/// The same for UDP replays and GoReplay files: one line naming the file and the
/// line, packet or record, exit 2, nothing sent (over TCP or UDP).
#[test]
fn bad_udp_and_goreplay_recordings_are_refused_in_one_line_before_any_traffic() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let target = listener.local_addr().unwrap().to_string();
    // The UDP cases' datagrams would come here (the same port).
    let udp = std::net::UdpSocket::bind(&target).unwrap();
    udp.set_nonblocking(true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let ok = file("ok.txt", b"0s GET /\n");
    let gor_ok = "1 ab 1000 0\nGET / HTTP/1.1\r\n\r\n\n🐵🙈🙉\n";
    let gor_cut = file(
        "cut.gor",
        format!("{gor_ok}1 ac 2000 0\nGET /x HTTP/1.1\r\n").as_bytes(),
    );
    let gor_bad = file(
        "bad.gor",
        format!("{gor_ok}{gor_ok}1 ad soon 0\nGET /\n🐵🙈🙉\n").as_bytes(),
    );
    let gor = file("ok.gor", gor_ok.as_bytes());
    let long_udp = file(
        "long.txt",
        format!("0s a\n1s {}\n", "x".repeat(70_000)).as_bytes(),
    );
    let tcp_only = file("tcp.pcap", &tcp_capture());
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["--replay", &ok, "--proto", "udp", "--replay-as", "http"],
            "http is for TCP".into(),
        ),
        (
            vec!["--replay", &long_udp, "--proto", "udp"],
            format!("{long_udp}: line 2: request 2 is 70000 bytes"),
        ),
        (
            vec!["--replay", &tcp_only, "--proto", "udp"],
            "holds TCP segments and no UDP datagram".into(),
        ),
        (vec!["--replay", &gor_cut], format!("{gor_cut}: record 2: ")),
        (vec!["--replay", &gor_cut], "truncated".into()),
        (vec!["--replay", &gor_bad], format!("{gor_bad}: record 3: ")),
        (
            vec!["--replay", &gor, "--proto", "udp"],
            "GoReplay file holds HTTP requests".into(),
        ),
        (
            vec!["--replay", &ok, "--replay-format", "har"],
            "--replay-format".into(),
        ),
        (
            vec!["--replay", &ok, "--replay-format", "gor"],
            format!("{ok}: record 1: "),
        ),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["run", "--target", &target, "--cores", "0"];
        args.extend_from_slice(&extra);
        assert_usage(&args, &needle);
    }
    assert!(
        listener.accept().is_err(),
        "a refused recording must send nothing"
    );
    assert!(
        udp.recv(&mut [0u8; 64]).is_err(),
        "a refused UDP recording must send nothing"
    );
}

/// A pcap holding one TCP segment with data (Ethernet, IPv4), for a UDP replay to
/// refuse.
fn tcp_capture() -> Vec<u8> {
    let builder = etherparse::PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4([127, 0, 0, 1], [127, 0, 0, 1], 64)
        .tcp(40000, 80, 1, 1000);
    let mut pkt = Vec::new();
    builder.write(&mut pkt, b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut pcap = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
    pcap.extend_from_slice(&[0; 8]);
    pcap.extend_from_slice(&65535u32.to_le_bytes());
    pcap.extend_from_slice(&1u32.to_le_bytes());
    pcap.extend_from_slice(&[0; 8]);
    pcap.extend_from_slice(&(pkt.len() as u32).to_le_bytes());
    pcap.extend_from_slice(&(pkt.len() as u32).to_le_bytes());
    pcap.extend_from_slice(&pkt);
    pcap
}

/// Datagrams in the UDP recording.
const DATAGRAMS: usize = 40;

/// Each UDP datagram to `port` in `file`: its payload (less `skip` leading bytes, the
/// header blaster puts first) and wire instant (ns since the epoch), in capture order.
fn datagrams_on_wire(file: &Path, port: u16, skip: usize) -> Vec<(String, i64)> {
    let out = Command::new(common::servers::require("tshark", "tshark"))
        .args(["-r"])
        .arg(file)
        .args([
            "-Y",
            &format!("udp.dstport=={port}"),
            "-T",
            "fields",
            "-e",
            "frame.time_epoch",
            "-e",
            "udp.payload",
        ])
        .output()
        .expect("run tshark -r");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (t, hex) = l.split_once('\t').expect("two fields");
            let hex: String = hex.chars().filter(|c| *c != ':').collect();
            let bytes: Vec<u8> = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                .collect();
            let (s, frac) = t.split_once('.').expect("seconds.fraction");
            let frac = format!("{frac:0<9}");
            let ns = s.parse::<i64>().unwrap() * 1_000_000_000 + frac[..9].parse::<i64>().unwrap();
            let payload = String::from_utf8_lossy(bytes.get(skip..).unwrap_or(&[])).to_string();
            (payload, ns)
        })
        .collect()
}

/// The wire instant of each datagram `{prefix}{i}`, relative to the first's, checking
/// each was sent exactly once and nothing else was.
fn datagram_instants(wire: &[(String, i64)], prefix: &str) -> Vec<i64> {
    let mut at: HashMap<&str, Vec<i64>> = HashMap::new();
    for (payload, t) in wire {
        at.entry(payload.as_str()).or_default().push(*t);
    }
    assert_eq!(wire.len(), DATAGRAMS, "datagrams on the wire: {wire:?}");
    let times: Vec<i64> = (0..DATAGRAMS)
        .map(|i| {
            let seen = at
                .get(format!("{prefix}{i}").as_str())
                .unwrap_or_else(|| panic!("{prefix}{i} not sent: {wire:?}"));
            assert_eq!(seen.len(), 1, "{prefix}{i} sent {} times", seen.len());
            seen[0]
        })
        .collect();
    times.iter().map(|t| t - times[0]).collect()
}

/// Sends datagram `q/i` to `addr` at the recording's offsets (its first `DATAGRAMS`),
/// as a client of a UDP service would, reading the echoes.
fn udp_client(addr: &str) {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    let (_, offsets) = recording();
    let start = Instant::now();
    let mut buf = [0u8; 2048];
    for (i, at) in offsets.iter().take(DATAGRAMS).enumerate() {
        let due = start + Duration::from_nanos(*at as u64);
        while Instant::now() < due {
            let _ = sock.recv(&mut buf);
        }
        sock.send(format!("q/{i}").as_bytes()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
}

/// Issue 37: UDP replay. A UDP conversation recorded by tshark (a client's datagrams
/// to the sink, and the sink's echoes) replayed with `--proto udp`: each datagram to
/// the server goes out once, blaster's header then the recorded bytes, at its recorded
/// instant, and every one is answered. Then a text recording over UDP, the same.
#[test]
fn a_udp_conversation_and_a_text_recording_replay_over_udp_at_their_offsets() {
    let sink = Sink::start_udp(&[]);
    let port: u16 = sink.addr.rsplit(':').next().unwrap().parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let filter = format!("udp port {port}");
    let rec = dir.path().join("udp.pcapng");
    let Some(tshark) = capture_filtered(&filter, &rec) else {
        skip(
            "a_udp_conversation_and_a_text_recording_replay_over_udp_at_their_offsets",
            "tshark cannot capture on lo here (not root?)",
        );
        return;
    };
    udp_client(&sink.addr);
    stop(tshark);
    let recorded = datagram_instants(&datagrams_on_wire(&rec, port, 0), "q/");

    let udp_run = |file: &Path, extra: &[&str]| {
        let mut args = vec![
            "--proto",
            "udp",
            "--target",
            &sink.addr,
            "--connections",
            "4",
            "--replay",
            file.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        run_report(&args, Duration::from_secs(60))
    };
    let check = |v: &serde_json::Value, format: &str| {
        assert_eq!(v["replay"]["format"], format);
        assert_eq!(v["replay"]["recorded_requests"], DATAGRAMS);
        assert_eq!(v["requests"]["completed"], DATAGRAMS, "{}", v["requests"]);
        assert_eq!(v["requests"]["errors"], 0, "{}", v["requests"]);
    };

    // The capture: the client's datagrams (the echoes are the server's, not requests).
    let cap = dir.path().join("replayed.pcap");
    let tshark = capture_filtered(&filter, &cap).expect("tshark captured once already");
    let v = udp_run(&rec, &[]);
    stop(tshark);
    check(&v, "pcap");
    let got = datagram_instants(&datagrams_on_wire(&cap, port, 24), "q/");
    assert_on_time(&got, &recorded, &v, "a UDP capture");

    // A text recording over UDP: each line's payload one datagram.
    let text: String = recording()
        .1
        .iter()
        .take(DATAGRAMS)
        .enumerate()
        .map(|(i, at)| format!("{}us u/{i}\n", at / 1000))
        .collect();
    let txt = dir.path().join("udp.txt");
    std::fs::write(&txt, text).unwrap();
    let cap = dir.path().join("text.pcap");
    let tshark = capture_filtered(&filter, &cap).expect("tshark captured once already");
    let v = udp_run(&txt, &["--replay-speed", "2"]);
    stop(tshark);
    check(&v, "text");
    let got = datagram_instants(&datagrams_on_wire(&cap, port, 24), "u/");
    let (_, offsets) = recording();
    let half: Vec<i64> = offsets[..DATAGRAMS]
        .iter()
        .map(|o| (o - offsets[0]) / 2)
        .collect();
    assert_on_time(&got, &half, &v, "a text recording over UDP at speed 2");
}

/// Issue 37: a GoReplay `.gor` file (requests, and a response record to skip) replayed
/// against nginx: each request once, at its offset from the first's timestamp.
#[test]
fn a_goreplay_file_goes_out_at_its_offsets() {
    let (_nginx, port) = nginx_listening(10_000, 128, None, "");
    let dir = tempfile::tempdir().unwrap();
    let (_, offsets) = recording();
    let epoch: i64 = 1_700_000_000_000_000_000;
    let mut gor = String::new();
    for (i, at) in offsets.iter().enumerate() {
        let ts = epoch + at;
        gor.push_str(&format!(
            "1 {i:024x} {ts} 0\nGET /r/{i} HTTP/1.1\r\nHost: recorded.example\r\n\r\n\n🐵🙈🙉\n"
        ));
        gor.push_str(&format!(
            "2 {i:024x} {} 100\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n\n🐵🙈🙉\n",
            ts + 100
        ));
    }
    let file = dir.path().join("traffic.gor");
    std::fs::write(&file, gor).unwrap();
    let cap = dir.path().join("gor.pcap");
    let Some(tshark) = capture(port, &cap) else {
        skip(
            "a_goreplay_file_goes_out_at_its_offsets",
            "tshark cannot capture on lo here (not root?)",
        );
        return;
    };
    let v = replay_run(port, &["--replay", file.to_str().unwrap()]);
    stop(tshark);
    assert_eq!(v["replay"]["format"], "gor");
    assert_eq!(v["replay"]["recorded_requests"], LINES);
    assert_eq!(v["requests"]["completed"], LINES, "{}", v["requests"]);
    assert_eq!(v["http"]["status_codes"]["200"], LINES, "{}", v["http"]);
    let got = instants(&requests_on_wire(&cap, port));
    let want: Vec<i64> = offsets.iter().map(|o| o - offsets[0]).collect();
    assert_on_time(&got, &want, &v, "a GoReplay file");
}

/// `--shard i/3` of a UDP replay: between them the shards send every datagram once.
#[test]
fn shards_of_a_udp_replay_send_every_datagram_exactly_once() {
    let sink = Sink::start_udp(&[]);
    let port: u16 = sink.addr.rsplit(':').next().unwrap().parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..DATAGRAMS)
        .map(|i| format!("{}ms s/{i}\n", 3 * i))
        .collect();
    let rec = dir.path().join("udp.txt");
    std::fs::write(&rec, text).unwrap();
    let cap = dir.path().join("shards.pcap");
    let Some(tshark) = capture_filtered(&format!("udp port {port}"), &cap) else {
        skip(
            "shards_of_a_udp_replay_send_every_datagram_exactly_once",
            "tshark cannot capture on lo here (not root?)",
        );
        return;
    };
    let shards = run_shards(
        dir.path(),
        3,
        &[
            "run",
            "--proto",
            "udp",
            "--target",
            &sink.addr,
            "--cores",
            "0",
            "--connections",
            "3",
            "--replay",
            rec.to_str().unwrap(),
        ],
    );
    stop(tshark);
    let mut answered = 0;
    for (out, json) in &shards {
        assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(out));
        let v = read_json(&PathBuf::from(json));
        answered += v["requests"]["completed"].as_u64().unwrap();
    }
    assert_eq!(answered, DATAGRAMS as u64);
    // Every datagram exactly once on the wire (`datagram_instants` checks it).
    datagram_instants(&datagrams_on_wire(&cap, port, 24), "s/");
}

/// A recording that changes during the run (here: rewritten after the first pass was
/// opened, so the second pass of `--replay-loop` finds a request longer than any the
/// plan checked) stops the reader: the requests read before it are sent and reported,
/// the report says why the replay stopped, and the run exits 1 with that line.
#[test]
fn a_recording_changed_during_the_run_stops_the_replay_with_its_reason() {
    let (_nginx, port) = nginx_listening(100_000, 128, None, "");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.txt");
    // 2,000 requests of ~2 KB over 2 s: a pass is 4 MB, well beyond the reader's
    // read-ahead (8 chunks of 256 KiB), so the second pass opens the file again
    // about 1 s into the run.
    let pad = "a".repeat(2_000);
    let text: String = (0..2_000)
        .map(|i| format!("{i}ms GET /r/{i}?{pad}\n"))
        .collect();
    std::fs::write(&path, &text).unwrap();
    let (_d, json) = tmp_json();
    let target = format!("127.0.0.1:{port}");
    let child = std::process::Command::new(bin())
        .args([
            "run",
            "--target",
            &target,
            "--connections",
            "4",
            "--cores",
            "0",
        ])
        .args(["--replay", path.to_str().unwrap(), "--replay-loop"])
        .args([
            "--duration",
            "4s",
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start blaster");
    // The reader opens the first pass before the workers connect: once a connection
    // is up, the file is replaced (a new file renamed over it; the open pass reads
    // on), its first request now longer than any the plan checked.
    let deadline = Instant::now() + Duration::from_secs(20);
    while sources_connected_to(&port.to_string()).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let longer = format!(
        "0ms GET /r/longer?{pad}{pad}\n{}",
        &text[text.find('\n').unwrap() + 1..]
    );
    let fresh = dir.path().join("rec.new");
    std::fs::write(&fresh, longer).unwrap();
    std::fs::rename(&fresh, &path).unwrap();
    let out = wait_bounded(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("line 1") && err.contains("changed during the run"),
        "{err}"
    );
    let v = read_json(&json);
    let why = v["replay"]["stopped"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", v["replay"]));
    assert!(why.contains("changed during the run"), "{why}");
    // The first pass went out whole and was answered; the second never started.
    assert_eq!(f(&v, "requests.completed"), 2_000.0, "{}", v["requests"]);
    assert_eq!(f(&v, "requests.errors"), 0.0, "{}", v["requests"]);
}
