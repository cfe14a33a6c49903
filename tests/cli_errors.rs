//! Every bad input gets one clear line on stderr and its exit code: 2 for usage,
//! 1 for runtime. Nothing here sends load.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::time::Duration;

/// What clap itself says when it rejects an argument list before blaster's own
/// validation runs. A check whose arguments trip one of these tests clap, not the
/// validation it names (a typo in a flag would otherwise pass when the needle is
/// quoted back in clap's message).
const CLAP_REJECTIONS: [&str; 4] = [
    "unexpected argument",
    "a value is required for",
    "invalid value",
    "cannot be used multiple times",
];

fn expect(args: &[&str], code: i32, needle: &str) {
    let out = run(args, Duration::from_secs(20));
    let err = stderr(&out);
    for clap in CLAP_REJECTIONS {
        assert!(
            !err.contains(clap),
            "args {args:?}: clap rejected the arguments ({err:?}); the validation was not reached"
        );
    }
    assert_eq!(out.status.code(), Some(code), "args {args:?}: stderr {err}");
    assert!(
        err.contains(needle),
        "args {args:?}: expected {needle:?} in {err:?}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line, got {err:?}");
    assert!(!err.contains("panicked"), "{err}");
}

const T: &str = "127.0.0.1:9";

#[test]
fn unknown_core_is_usage_error() {
    expect(
        &["run", "--target", T, "--rate", "10", "--cores", "4096"],
        2,
        "--cores: unknown core 4096",
    );
    expect(
        &["run", "--target", T, "--rate", "10", "--cores", "x-y"],
        2,
        "--cores: expected a core list",
    );
}

#[test]
fn zero_rate_is_usage_error() {
    expect(
        &["run", "--target", T, "--rate", "0"],
        2,
        "--rate: must be greater than 0",
    );
    expect(
        &["run", "--target", T, "--rate", "abc"],
        2,
        "--rate: expected requests per second or max",
    );
    expect(&["run", "--target", T], 2, "--rate: is required");
}

#[test]
fn bad_duration_is_usage_error() {
    expect(
        &["run", "--target", T, "--rate", "10", "--duration", "10x"],
        2,
        "--duration: expected a duration",
    );
    expect(
        &["run", "--target", T, "--rate", "10", "--timeout", "0s"],
        2,
        "--timeout: must be greater than 0",
    );
    expect(
        &["run", "--target", T, "--rate", "10", "--max-lag", "soon"],
        2,
        "--max-lag: expected a duration",
    );
}

#[test]
fn zero_connections_or_pipeline_is_usage_error() {
    expect(
        &["run", "--target", T, "--rate", "10", "--connections", "0"],
        2,
        "--connections: must be between 1 and",
    );
    expect(
        &["run", "--target", T, "--rate", "10", "--pipeline", "0"],
        2,
        "--pipeline: must be between 1 and 1024",
    );
}

#[test]
fn bad_framing_target_and_flags_are_usage_errors() {
    expect(
        &["run", "--target", T, "--rate", "10", "--framing", "fixed:0"],
        2,
        "--framing: fixed:N must be between 1",
    );
    expect(
        &["run", "--target", "nohost", "--rate", "10"],
        2,
        "--target: expected HOST:PORT",
    );
    expect(
        &["run", "--target", T, "--rate", "10", "--payload", "\\q"],
        2,
        "--payload: unknown escape",
    );
    expect(&["sink", "--mode", "loud"], 2, "--mode: unknown sink mode");
}

#[test]
fn refused_target_names_the_address() {
    let port = free_port();
    let target = format!("127.0.0.1:{port}");
    expect(
        &[
            "run",
            "--target",
            &target,
            "--rate",
            "100",
            "--duration",
            "1s",
            "--connections",
            "4",
        ],
        1,
        &format!("cannot connect to {target}: Connection refused"),
    );
}

#[test]
fn fd_limit_too_low_names_both_limits_and_the_fix() {
    // A hard limit of 200 descriptors cannot hold 1000 connections.
    let cmd = format!(
        "ulimit -Sn 100 && ulimit -Hn 200 && exec {} run --target 127.0.0.1:9 --rate 10 --connections 1000",
        bin()
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &cmd])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("needs 1064") && err.contains("hard 200") && err.contains("ulimit -Hn"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn help_and_version_exit_zero() {
    let out = run(&["--help"], Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("coordinated omission"));
    let out = run(&["run", "--help"], Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--max-lag"));
    let out = run(&["--version"], Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0));
    let version = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(version.contains(env!("CARGO_PKG_VERSION")), "{version}");
}

#[test]
fn protocol_and_udp_flags_are_checked() {
    expect(
        &[
            "run",
            "--target",
            T,
            "--rate",
            "10",
            "--framing",
            "length-prefixed:u64",
        ],
        2,
        "--framing: expected length-prefixed:",
    );
    expect(
        &[
            "run",
            "--target",
            T,
            "--rate",
            "10",
            "--framing",
            "delimiter:",
        ],
        2,
        "--framing: delimiter:BYTES must be 1 to 64 bytes",
    );
    expect(
        &["run", "--target", T, "--rate", "10", "--http", "GET"],
        2,
        "--http: expected 'METHOD /path'",
    );
    expect(
        &[
            "run", "--target", T, "--rate", "10", "--http", "GET /", "-H", "NoColon",
        ],
        2,
        "--header: header must be 'Name: value'",
    );
    expect(
        &["run", "--target", T, "--rate", "10", "--payload", "{nope}"],
        2,
        "unknown placeholder {nope}",
    );
    expect(
        &[
            "run",
            "--target",
            T,
            "--rate",
            "10",
            "--mix",
            "/nonexistent/mix",
        ],
        2,
        "--mix: cannot read",
    );
    expect(
        &["run", "--target", T, "--rate", "10", "--proto", "sctp"],
        2,
        "--proto: expected tcp or udp",
    );
    expect(
        &["run", "--target", T, "--rate", "max"],
        2,
        "--rate: max is only for",
    );
    expect(
        &["run", "--target", T, "--rate", "10", "--no-response"],
        2,
        "--no-response: needs --proto udp",
    );
    expect(
        &[
            "run",
            "--target",
            T,
            "--rate",
            "10",
            "--max-response",
            "lots",
        ],
        2,
        "--max-response: expected a size",
    );
    expect(
        &[
            "run",
            "--target",
            T,
            "--rate",
            "10",
            "--framing",
            "fixed:4096",
            "--max-response",
            "1024",
        ],
        2,
        "--max-response",
    );
    expect(
        &[
            "run", "--target", T, "--rate", "10", "--proto", "udp", "--http", "GET /",
        ],
        2,
        "--proto: udp matches responses by sequence",
    );
    expect(
        &["sink", "--udp", "--drop", "2"],
        2,
        "--drop: must be at least 0 and below 1",
    );
    expect(&["sink", "--drop", "0.1"], 2, "--drop: needs --udp");
    expect(
        &["sink", "--mode", "count"],
        2,
        "--mode: count needs --udp: only the UDP sink counts datagrams",
    );
}

/// Issue 25: sink usage errors that reached the sink's own validation exited 1 and
/// named its fields ("mode count: ... (set udp)"); each now names the flag, exit 2.
#[test]
fn sink_transport_mismatches_are_usage_errors_naming_the_flag() {
    for (args, needle) in [
        (
            &["sink", "--udp", "--mode", "fixed:10"][..],
            "--mode: fixed:N with --udp: N must be between 24",
        ),
        (
            &["sink", "--udp", "--mode", "fixed:70000"],
            "and 65507 (the largest UDP payload), got 70000",
        ),
        (&["sink", "--udp", "--delay", "1ms"], "--delay: needs TCP"),
        (
            &["sink", "--udp", "--stall", "1s", "--every", "10s"],
            "--stall: with --udp needs --mode broadcast",
        ),
        (
            &["sink", "--request-size", "10"],
            "--request-size: needs --mode fixed:N over TCP, got --mode echo",
        ),
        (
            &[
                "sink",
                "--udp",
                "--mode",
                "fixed:100",
                "--request-size",
                "10",
            ],
            "--request-size: needs --mode fixed:N over TCP, got --mode fixed:100 --udp",
        ),
    ] {
        let mut args = args.to_vec();
        // A free port, so a refusal could only come from the arguments.
        let port = format!("127.0.0.1:{}", free_port());
        args.extend(["--listen", &port, "--duration", "100ms"]);
        expect(&args, 2, needle);
        let err = stderr(&run(&args, Duration::from_secs(20)));
        for internal in ["set udp", "invalid sink configuration", "_ratio", "_size"] {
            assert!(!err.contains(internal), "{args:?}: {err}");
        }
    }
}

/// Issue 25: a second sink on a port already in use shared it through SO_REUSEPORT
/// and took part of the first one's traffic; now it is refused (one line, exit 1,
/// naming the address) unless `--reuse-port` asks to share.
#[test]
fn a_second_sink_on_a_held_port_is_refused_unless_reuse_port() {
    for udp in [false, true] {
        let first = if udp {
            Sink::start_udp(&[])
        } else {
            Sink::start(&[])
        };
        let mut args = vec!["sink", "--listen", &first.addr, "--duration", "300ms"];
        if udp {
            args.push("--udp");
        }
        expect(
            &args,
            1,
            &format!("cannot listen on {}: the address is in use", first.addr),
        );
        args.push("--reuse-port");
        let out = run(&args, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(0), "udp {udp}: {}", stderr(&out));
    }
}

/// Issue 14: the broadcast sink's flags.
#[test]
fn bad_broadcast_sink_flags_are_one_line_usage_errors() {
    const B: [&str; 3] = ["sink", "--mode", "broadcast"];
    let with =
        |more: &[&'static str]| -> Vec<&'static str> { B.iter().chain(more).copied().collect() };
    expect(
        &["sink", "--aggregate", "--down-size", "400"],
        2,
        "--aggregate: needs --mode broadcast, got --mode echo",
    );
    expect(
        &["sink", "--room-size", "4"],
        2,
        "--room-size: needs --mode broadcast",
    );
    expect(
        &["sink", "--mode", "discard", "--echo-to-sender"],
        2,
        "--echo-to-sender: needs --mode broadcast",
    );
    expect(&B, 2, "--room-size: is required by --mode broadcast");
    expect(
        &with(&["--room-size", "0"]),
        2,
        "--room-size: must be between 1 and 65535, got 0",
    );
    expect(
        &with(&["--room-size", "10", "--aggregate", "--down-size", "271"]),
        2,
        "--down-size: must hold the 32-byte header and 10 entries of 24 bytes (272 bytes), got 271",
    );
    expect(
        &with(&["--room-size", "10", "--aggregate"]),
        2,
        "--down-size: is required by --aggregate",
    );
    expect(
        &with(&["--room-size", "10", "--down-size", "300"]),
        2,
        "--down-size: needs --aggregate",
    );
    expect(
        &with(&[
            "--room-size",
            "2",
            "--aggregate",
            "--down-size",
            "80",
            "--tick",
            "0s",
        ]),
        2,
        "--tick: must be between 1ms and 10s",
    );
    if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
        expect(
            &with(&["--room-size", "2", "--cores", "0-1"]),
            2,
            "--cores: --mode broadcast runs on one core",
        );
    }
}

#[test]
fn a_bad_mix_file_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("mix.txt");
    std::fs::write(&mix, "get 1 echo x\nset zero echo y\n").unwrap();
    expect(
        &[
            "run",
            "--target",
            T,
            "--rate",
            "10",
            "--mix",
            mix.to_str().unwrap(),
        ],
        2,
        "line 2: weight must be a positive integer",
    );
}

#[test]
fn unknown_flag_is_clap_usage_error() {
    // The one check that wants clap's own message, so it bypasses `expect`.
    let out = run(&["run", "--bogus-flag"], Duration::from_secs(20));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unexpected argument '--bogus-flag'"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line, got {err:?}");
}

/// Issue 14: the frame workload's bounds, each one line and exit 2.
#[test]
fn frame_workload_bounds_are_usage_errors() {
    let f = |extra: &[&str]| {
        let mut a = vec![
            "run",
            "--target",
            T,
            "--workload",
            "frames",
            "--connections",
            "20",
        ];
        a.extend_from_slice(extra);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let cases: [(&[&str], &str); 12] = [
        (
            &["--room-size", "0"],
            "--room-size: must be between 1 and --connections (20), got 0",
        ),
        (
            &["--room-size", "21"],
            "--room-size: must be between 1 and --connections (20), got 21",
        ),
        (&["--tick", "999us"], "--tick: must be between 1ms and 10s"),
        (&["--tick", "11s"], "--tick: must be between 1ms and 10s"),
        (
            &["--frame-size", "31"],
            "--frame-size: must be between 32 (the frame header)",
        ),
        (&["--aggregate"], "--down-size: is required by --aggregate"),
        (
            &["--room-size", "10", "--aggregate", "--down-size", "271"],
            "--down-size: must be between 272 (the header and 10 entries",
        ),
        // A room of one without echo: nothing is broadcast, no downlink frame carries
        // a frame to place it on the timetable.
        (
            &["--room-size", "1", "--aggregate", "--down-size", "100"],
            "--aggregate: needs a broadcast: rooms of at least 2",
        ),
        (&["--down-size", "300"], "--down-size: needs --aggregate"),
        (
            &["--rate", "10"],
            "--workload: frames sends one frame per connection per --tick",
        ),
        (
            &["--frame-budget", "0s"],
            "--frame-budget: must be greater than 0",
        ),
        (
            &["--cores", "0-1", "--room-size", "20"],
            "--room-size: 20 connections in rooms of 20 make 1 rooms",
        ),
    ];
    for (extra, needle) in cases {
        if extra.contains(&"0-1") && std::thread::available_parallelism().map_or(1, |n| n.get()) < 2
        {
            continue; // needs two usable cores to be reached
        }
        let a = f(extra);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        expect(&a, 2, needle);
    }
    expect(
        &["run", "--target", T, "--rate", "10", "--aggregate"],
        2,
        "--aggregate: needs --workload frames",
    );
    expect(
        &["run", "--target", T, "--rate", "10", "--tick", "33ms"],
        2,
        "--workload: --tick, --frame-size",
    );
    expect(
        &["run", "--target", T, "--workload", "streams"],
        2,
        "--workload: expected requests or frames",
    );
}

/// Issue 23: `--frame-proto` and its templates, each one line and exit 2.
#[test]
fn frame_proto_bad_inputs_are_usage_errors() {
    let base = [
        "run",
        "--target",
        T,
        "--workload",
        "frames",
        "--connections",
        "20",
    ];
    let cases: [(&[&str], &str); 9] = [
        (
            &["--frame-proto", "amqp"],
            "--frame-proto: expected blaster, nats, mqtt, ws, resp or grpc, got \"amqp\"",
        ),
        (
            &["--frame-proto", "nats", "--frame-topic", "room.all"],
            "--frame-topic: must contain {room}, got \"room.all\"",
        ),
        (
            &["--frame-proto", "mqtt", "--frame-topic", "r/{room}/#"],
            "--frame-topic: spaces, control characters and the MQTT wildcards",
        ),
        (
            &["--frame-proto", "ws", "--ws-path", "/lobby"],
            "--ws-path: must contain {room}, got \"/lobby\"",
        ),
        (
            &["--frame-proto", "nats", "--ws-path", "/r/{room}"],
            "--ws-path: needs --frame-proto ws",
        ),
        (
            &["--frame-topic", "r.{room}"],
            "--frame-topic: needs --frame-proto nats, mqtt or resp",
        ),
        (
            &["--frame-proto", "nats", "--proto", "udp"],
            "--frame-proto: nats runs over TCP",
        ),
        (
            &["--frame-proto", "mqtt", "--echo-to-sender"],
            "--echo-to-sender: mqtt decides echo by its own rule",
        ),
        (
            &["--frame-proto", "nats", "--connect-rate", "100"],
            "--connect-rate: a ramp joins members during the run",
        ),
    ];
    for (extra, needle) in cases {
        let a: Vec<&str> = base.iter().chain(extra).copied().collect();
        expect(&a, 2, needle);
    }
    expect(
        &[
            "run",
            "--target",
            T,
            "--rate",
            "10",
            "--frame-proto",
            "nats",
        ],
        2,
        "--workload: --tick, --frame-size, --room-size, --frame-budget, --echo-to-sender, --frame-proto",
    );
}

/// Each (extra flags, expected line) on a frames run of 20 connections in rooms of 10:
/// one line, exit 2.
fn expect_frames_usage(cases: &[(&[&str], &str)]) {
    let base = [
        "run",
        "--target",
        T,
        "--workload",
        "frames",
        "--connections",
        "20",
        "--room-size",
        "10",
    ];
    for (extra, needle) in cases {
        let a: Vec<&str> = base.iter().chain(extra.iter()).copied().collect();
        expect(&a, 2, needle);
    }
}

/// Issue 23 part 3: `--members-per-connection` of 0 or above its bound, or where a
/// connection cannot carry several members (UDP, --aggregate, a WebSocket's one room
/// path); the sink's flag likewise: one line, exit 2.
#[test]
fn members_per_connection_bad_inputs_are_usage_errors() {
    let cases: [(&[&str], &str); 7] = [
        (
            &["--members-per-connection", "0"],
            "--members-per-connection: must be between 1 and 1024, got 0",
        ),
        (
            &["--members-per-connection", "1025"],
            "--members-per-connection: must be between 1 and 1024, got 1025",
        ),
        (
            &["--members-per-connection", "2", "--proto", "udp"],
            "--members-per-connection: carries several members on a TCP connection",
        ),
        (
            &[
                "--members-per-connection",
                "2",
                "--aggregate",
                "--down-size",
                "272",
            ],
            "--members-per-connection: --aggregate addresses one member per connection",
        ),
        (
            &["--members-per-connection", "2", "--frame-proto", "ws"],
            "--members-per-connection: a WebSocket is one room's path",
        ),
        (
            &["--members-per-connection", "2", "--room-layout", "shuffled"],
            "--room-layout: expected grouped or mixed, got \"shuffled\"",
        ),
        (
            &["--room-layout", "grouped"],
            "--room-layout: places the members of slots past the first: needs --members-per-connection 2",
        ),
    ];
    expect_frames_usage(&cases);
    for (extra, needle) in [
        (
            &["--members-per-connection", "0"][..],
            "--members-per-connection: must be between 1 and 1024, got 0",
        ),
        (
            &["--members-per-connection", "2", "--udp"][..],
            "--members-per-connection: needs TCP and relayed frames",
        ),
    ] {
        let a: Vec<&str> = ["sink", "--mode", "broadcast", "--room-size", "10"]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        expect(&a, 2, needle);
    }
    expect(
        &["sink", "--members-per-connection", "2"],
        2,
        "--members-per-connection: needs --mode broadcast",
    );
}

/// Issue 36 item 7: `--slow-readers` malformed, its RATIO outside (0, 1], its RATE
/// unreadable, where no reader can be slowed, or without frames: one line, exit 2,
/// before anything connects.
#[test]
fn slow_readers_bad_inputs_are_usage_errors() {
    let cases: [(&[&str], &str); 7] = [
        (
            &["--slow-readers", "0.1"],
            "--slow-readers: expected RATIO:RATE such as 0.1:10KB (0: stop reading), got \"0.1\"",
        ),
        (
            &["--slow-readers", "0:10KB"],
            "--slow-readers: RATIO must be above 0 and at most 1, got \"0\"",
        ),
        (
            &["--slow-readers", "1.5:10KB"],
            "--slow-readers: RATIO must be above 0 and at most 1, got \"1.5\"",
        ),
        (
            &["--slow-readers", "0.1:fast"],
            "--slow-readers: RATE must be bytes per second such as 0, 512, 10KB, 64KiB or 1MB, got \"fast\"",
        ),
        (
            &["--slow-readers", "0.1:10KB", "--proto", "udp"],
            "--slow-readers: slows a TCP connection's reads",
        ),
        (
            &["--slow-readers", "0.1:10KB", "--tls"],
            "--slow-readers: paces plaintext reads; not with --tls",
        ),
        (
            &[
                "--slow-readers",
                "0.1:0",
                "--aggregate",
                "--down-size",
                "272",
            ],
            "--slow-readers: accounts relayed frames per reader; not with --aggregate",
        ),
    ];
    expect_frames_usage(&cases);
    expect(
        &[
            "run",
            "--target",
            T,
            "--rate",
            "10",
            "--slow-readers",
            "0.1:0",
        ],
        2,
        "--room-layout and --slow-readers need --workload frames",
    );
}

/// Issue 23 part 4: `--senders-per-room` outside 1..=room size, or listeners where
/// they cannot join before the run (UDP, an aggregating sink, a ramp), or without
/// frames: one line, exit 2.
#[test]
fn senders_per_room_bad_inputs_are_usage_errors() {
    let cases: [(&[&str], &str); 5] = [
        (
            &["--senders-per-room", "0"],
            "--senders-per-room: must be between 1 and --room-size (10), got 0",
        ),
        (
            &["--senders-per-room", "11"],
            "--senders-per-room: must be between 1 and --room-size (10), got 11",
        ),
        (
            &["--senders-per-room", "2", "--proto", "udp"],
            "--senders-per-room: listeners join over TCP",
        ),
        (
            &[
                "--senders-per-room",
                "2",
                "--aggregate",
                "--down-size",
                "272",
            ],
            "--senders-per-room: --aggregate sends every member a downlink frame",
        ),
        (
            &["--senders-per-room", "2", "--connect-rate", "100"],
            "--senders-per-room: listeners join before the run starts",
        ),
    ];
    expect_frames_usage(&cases);
    expect(
        &[
            "run",
            "--target",
            T,
            "--rate",
            "10",
            "--senders-per-room",
            "2",
        ],
        2,
        "--room-layout and --slow-readers need --workload frames",
    );
}

/// Issue 21: a frames plan whose receive accounting cannot fit this machine's memory is
/// refused before anything connects, with the bytes it needs and the bytes available,
/// exit 1 (a host limit, as the descriptor check); it used to abort on allocation.
#[test]
fn a_frames_plan_that_cannot_fit_memory_is_refused_with_the_bytes() {
    let needed = blaster::engine::frames::accounting::FrameBook::bytes_for(65_535, 65_535);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let available = blaster::run_plan::parse_mem_available(&meminfo).unwrap();
    assert!(
        needed > available,
        "the premise: {needed} bytes exceed this host's {available}"
    );
    let args = [
        "run",
        "--target",
        T,
        "--workload",
        "frames",
        "--connections",
        "65535",
        "--room-size",
        "65535",
        "--cores",
        "0",
    ];
    expect(&args, 1, "memory: --workload frames needs");
    let err = stderr(&run(&args, Duration::from_secs(20)));
    assert!(err.contains(&format!("({needed} bytes)")), "{err}");
    assert!(err.contains("MemAvailable is"), "{err}");
}

/// Issue 12: `--metrics-listen` on a port in use fails before anything connects (the
/// target here refuses, so a run would have said so instead), exit 1; a bad address
/// or a missing --target is a usage error; the linger needs the listener.
#[test]
fn metrics_listen_port_in_use_fails_before_the_run() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let args = ["run", "--target", T, "--rate", "10", "--cores", "0"];
    for addr in [port.clone(), format!("127.0.0.1:{port}")] {
        let mut a = args.to_vec();
        a.extend(["--metrics-listen", &addr]);
        expect(
            &a,
            1,
            &format!("--metrics-listen 127.0.0.1:{port}: cannot listen: Address already in use"),
        );
    }
    let mut a = args.to_vec();
    a.extend(["--metrics-listen", "localhost:9100"]);
    expect(
        &a,
        2,
        "--metrics-listen: expected PORT, IPv4:PORT or [IPv6]:PORT",
    );
    let mut a = args.to_vec();
    a.extend(["--metrics-listen", "9100", "--metrics-linger", "2h"]);
    expect(&a, 2, "--metrics-linger: must be at most");
    expect(
        &["run", "--rate", "10", "--metrics-listen", "0"],
        2,
        "--metrics-listen: needs --target",
    );
}

/// Issue 25: clap's "required arguments were not provided" names what is missing.
#[test]
fn a_missing_required_argument_is_named() {
    for (args, missing) in [
        (&["run", "--heartbeat", "1s"][..], "--hold"),
        (&["sink", "--stall", "1s"][..], "--every"),
        (&["compare", "a.json"][..], "<NEW>"),
        (&["report", "x.json"][..], "--html"),
    ] {
        expect(args, 2, &format!("were not provided: {missing}"));
    }
}

/// Issue 25: `--run-id`'s help states the limit the validation enforces.
#[test]
fn the_run_id_help_states_the_limit_it_enforces() {
    let max = blaster::run_plan::fleet::RUN_ID_LEN_MAX;
    let help = run(&["run", "--help"], Duration::from_secs(20));
    let text = String::from_utf8_lossy(&help.stdout).replace('\n', " ");
    let line = text.split("--run-id").nth(1).expect("--run-id in the help");
    assert!(line.contains(&format!("at most {max})")), "{line:.300}");
    let id = |n: usize| "r".repeat(n);
    let over = id(max + 1);
    expect(
        &["run", "--target", T, "--rate", "10", "--run-id", &over],
        2,
        &format!("--run-id: expected 1 to {max}"),
    );
}

/// Issue 25: a CR or LF in `-H` would end the header and smuggle in another.
#[test]
fn a_line_break_in_a_header_is_a_usage_error() {
    for h in ["X-A: 1\r\nX-Smuggled: 2", "X-A: 1\nGET / HTTP/1.1"] {
        expect(
            &[
                "run", "--target", T, "--rate", "10", "--http", "GET /", "-H", h,
            ],
            2,
            "--header: a header may not hold a CR, LF or NUL",
        );
    }
}

/// Issue 25: `preflight` validates a command line as `run` does, so what `run`
/// refuses, `preflight` refuses with the same line and exit code.
#[test]
fn preflight_refuses_what_run_refuses_with_the_same_line() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x");
    let x = x.to_str().unwrap();
    let cases: [&[&str]; 6] = [
        &["--slo", "p99<1ms"],
        &["--csv", x],
        &["--target", T, "--rate", "10", "--slo", "nonsense"],
        &["--target", T, "--rate", "10", "--metrics-listen", "nope"],
        &["--target", T, "--rate", "10", "--json", x, "--hdr-log", x],
        &[
            "--target",
            T,
            "--rate",
            "10",
            "--workload",
            "frames",
            "--slo",
            "p99<1ms",
        ],
    ];
    for args in cases {
        let run_out = run(&[&["run"], args].concat(), Duration::from_secs(20));
        let pre_out = run(&[&["preflight"], args].concat(), Duration::from_secs(20));
        assert_eq!(
            run_out.status.code(),
            Some(2),
            "run {args:?}: {}",
            stderr(&run_out)
        );
        assert_eq!(
            pre_out.status.code(),
            Some(2),
            "preflight {args:?}: {}",
            stderr(&pre_out)
        );
        assert_eq!(stderr(&pre_out), stderr(&run_out), "{args:?}");
        assert_eq!(stderr(&pre_out).trim_end().lines().count(), 1);
    }
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

/// Issue 33: `--repeats 0` (and past its bound) is one line, exit 2, before anything runs.
#[test]
fn repeats_out_of_range_is_usage_error() {
    expect(
        &["--cores", "0", "--repeats", "0"],
        2,
        "--repeats: must be between 1 and 20, got 0",
    );
    expect(
        &["--cores", "0", "--repeats", "21"],
        2,
        "--repeats: must be between 1 and 20, got 21",
    );
}

/// Issue 33: a confidence level outside (0, 1) is one line and exit 2, for `run` and
/// for `compare` (checked before any file is read).
#[test]
fn a_confidence_level_outside_0_1_is_a_usage_error() {
    for level in ["0", "1", "1.5", "-0.2", "NaN"] {
        let flag = format!("--confidence={level}");
        expect(
            &["run", "--target", T, "--rate", "100", &flag],
            2,
            "--confidence: a confidence level is strictly between 0 and 1",
        );
        expect(
            &["compare", "a.json", "b.json", &flag],
            2,
            "--confidence: a confidence level is strictly between 0 and 1",
        );
    }
}

#[test]
fn bad_http2_and_grpc_flags_are_one_line_usage_errors() {
    fn run_with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        [&["run", "--target", T, "--rate", "10"], extra].concat()
    }
    expect(
        &run_with(&["--grpc", "nope"]),
        2,
        "--grpc: expected SERVICE/METHOD such as helloworld.Greeter/SayHello, got \"nope\"",
    );
    expect(
        &run_with(&["--grpc", "a.B/C", "--grpc-message", "/nonexistent/m.bin"]),
        2,
        "--grpc-message: cannot read /nonexistent/m.bin",
    );
    let dir = tempfile::tempdir().unwrap();
    let proto = dir.path().join("g.proto");
    std::fs::write(
        &proto,
        "syntax = \"proto3\"; package p; message M { int32 n = 1; } \
         service S { rpc Go (M) returns (M); }",
    )
    .unwrap();
    let proto = proto.to_str().unwrap();
    let bad = dir.path().join("bad.proto");
    std::fs::write(&bad, "message {").unwrap();
    expect(
        &run_with(&[
            "--grpc",
            "p.S/Go",
            "--grpc-proto",
            proto,
            "--grpc-json",
            r#"{"n": "x"}"#,
        ]),
        2,
        "--grpc-json: not a p.M in JSON: ",
    );
    expect(
        &run_with(&[
            "--grpc",
            "p.S/Stop",
            "--grpc-proto",
            proto,
            "--grpc-json",
            "{}",
        ]),
        2,
        "--grpc-proto: service p.S has no method Stop (it has: Go)",
    );
    expect(
        &run_with(&[
            "--grpc",
            "p.S/Go",
            "--grpc-proto",
            bad.to_str().unwrap(),
            "--grpc-json",
            "{}",
        ]),
        2,
        &format!("--grpc-proto: {}: ", bad.display()),
    );
    expect(
        &run_with(&["--grpc", "p.S/Go", "--grpc-proto", proto]),
        2,
        "--grpc-proto: needs --grpc-json: the request message, as JSON",
    );
    expect(
        &run_with(&[
            "--grpc",
            "p.S/Go",
            "--grpc-proto",
            proto,
            "--grpc-json",
            r#"{"name": "user-{seq}"}"#,
        ]),
        2,
        "--grpc-json: {seq} would change lengths inside the message (its protobuf is \
         encoded once, at start): only {rand:N} is drawn per request here; put other \
         per-request values in metadata, e.g. -H 'x-key: {seq}'",
    );
    expect(
        &run_with(&["--http", "GET /", "--streams-per-connection", "4"]),
        2,
        "--streams-per-connection: needs --http2 or --grpc",
    );
    expect(
        &run_with(&["--grpc", "a.B/C", "--streams-per-connection", "0"]),
        2,
        "--streams-per-connection: must be between 1 and 1024, got 0",
    );
    expect(
        &run_with(&["--http", "GET /{line:/nonexistent/users.txt}"]),
        2,
        "--http: cannot read /nonexistent/users.txt: No such file or directory",
    );
    expect(
        &run_with(&["--http", "GET /{zipf:10:0}"]),
        2,
        "--http: {zipf:10:0}: the exponent must be above 0, got \"0\"",
    );
    expect(
        &run_with(&["--payload", "k{uniform:0}"]),
        2,
        "--payload: {uniform:0}: the key count must be between 1 and 1099511627776, got \"0\"",
    );
    // A templated body past one DATA frame is kept per stream until it is sent:
    // 100 x 100 streams of a 20 KB request is above the bound.
    let templated = format!("{}{{rand:4}}", "a".repeat(20_000));
    // With a connection per request a connection carries one stream: 10,000 of them
    // are as many streams.
    for (conns, per_request) in [("100", None), ("10000", Some("--connect-per-request"))] {
        let mut args = vec!["--http2", "--http", "POST /", "--body", &templated];
        args.extend(per_request);
        args.extend(["--connections", conns]);
        expect(
            &run_with(&args),
            2,
            "--body: a body with placeholders longer than one DATA frame (16384 bytes) is kept \
             per stream until it is sent: 10000 streams in flight x 20065 bytes need 191 MiB, \
             above 128 MiB; use fewer --connections or --streams-per-connection, a shorter \
             body, or one without placeholders",
        );
    }
    expect(
        &run_with(&[
            "--http2",
            "--connect-per-request",
            "--streams-per-connection",
            "4",
        ]),
        2,
        "--connect-per-request: one request per connection: --streams-per-connection must be 1",
    );
    expect(
        &run_with(&["--http2", "--http", "GET /", "--pipeline", "4"]),
        2,
        "--pipeline: with --http2, requests in flight per connection are --streams-per-connection",
    );
    expect(
        &run_with(&["--http2", "--http", "GET /", "-H", "Connection: close"]),
        2,
        "a connection header (Connection, Keep-Alive, Transfer-Encoding, Upgrade, TE) is not allowed in HTTP/2",
    );
    expect(
        &["run", "--grpc", "a.B/C", "--connections", "300"],
        2,
        "--connections: the HTTP/2 baseline takes at most 256 (its built-in sink's HTTP/2 front runs a thread per connection), got 300",
    );
    expect(
        &run_with(&["--grpc", "a.B/C", "--grpc-metadata", "Room: 1"]),
        2,
        "--grpc-metadata: a metadata name is lowercase letters, digits, - _ and ., got \"Room\"",
    );
    expect(
        &run_with(&["--grpc", "a.B/C", "--grpc-metadata", "room: {room}"]),
        2,
        "--grpc-metadata: {room} is a member's room: with --workload frames --frame-proto grpc",
    );
    expect(
        &run_with(&["--http", "GET /", "--h2-keepalive", "1s"]),
        2,
        "--h2-keepalive: needs --http2 or --grpc",
    );
    expect(
        &run_with(&["--grpc", "a.B/C", "--h2-keepalive", "1ms"]),
        2,
        "--h2-keepalive: at least 10ms, got 1ms",
    );
    expect(
        &run_with(&["--http", "GET /", "--grpc-metadata", "a: b"]),
        2,
        "--grpc-metadata: needs --grpc (the calls it goes with)",
    );
}

#[test]
fn bad_grpc_frames_flags_are_one_line_usage_errors() {
    fn frames<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        [&["run", "--target", T, "--workload", "frames"], extra].concat()
    }
    expect(
        &frames(&["--frame-proto", "grpc"]),
        2,
        "--frame-proto: grpc needs --grpc SERVICE/METHOD: the bidirectional streaming method each member calls",
    );
    expect(
        &frames(&["--frame-proto", "nats", "--grpc", "a.B/C"]),
        2,
        "--grpc: with --workload frames, needs --frame-proto grpc (each member a bidi call)",
    );
    expect(
        &frames(&["--grpc-metadata", "room: {room}"]),
        2,
        "--grpc: with --workload frames, needs --frame-proto grpc (each member a bidi call)",
    );
    expect(
        &frames(&["--frame-proto", "nats", "--h2-keepalive", "1s"]),
        2,
        "--h2-keepalive: with --workload frames, needs --frame-proto grpc (PINGs are HTTP/2's)",
    );
    expect(
        &frames(&[
            "--frame-proto",
            "grpc",
            "--grpc",
            "a.B/C",
            "--h2-keepalive",
            "5ms",
        ]),
        2,
        "--h2-keepalive: at least 10ms, got 5ms",
    );
    expect(
        &frames(&["--frame-proto", "grpc", "--grpc", "nope"]),
        2,
        "--grpc: expected SERVICE/METHOD such as helloworld.Greeter/SayHello, got \"nope\"",
    );
    expect(
        &frames(&[
            "--frame-proto",
            "grpc",
            "--grpc",
            "a.B/C",
            "--grpc-metadata",
            "te: x",
        ]),
        2,
        "--grpc-metadata: \"te\" is set by blaster (reserved by gRPC)",
    );
}

#[test]
fn bad_connection_lifecycle_flags_are_one_line_usage_errors() {
    fn run_with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        [&["run", "--target", T, "--rate", "10"], extra].concat()
    }
    expect(
        &run_with(&["--conn-max-age", "1s±2s"]),
        2,
        "--conn-max-age: expected an age above 0 and a jitter below it (30s or 30s±5s), got \"1s±2s\"",
    );
    expect(
        &run_with(&["--conn-max-age", "soon"]),
        2,
        "--conn-max-age: expected a duration such as 10s or 500ms",
    );
    expect(
        &run_with(&["--conn-max-requests", "0"]),
        2,
        "--conn-max-requests: must be at least 1, got 0",
    );
    expect(
        &run_with(&["--conn-max-requests", "5", "--connect-per-request"]),
        2,
        "--conn-max-requests: needs requests on a timetable over held connections",
    );
    expect(
        &["run", "--rate", "10", "--conn-max-age", "1s"],
        2,
        "--conn-max-age: give --target",
    );
}

#[test]
fn bad_expect_assertions_are_usage_errors_before_any_traffic() {
    // Issue 37 item 6: an assertion that does not parse names --expect, exit 2.
    for (assertion, says) in [
        ("regex:(", "--expect: \"regex:(\": bad regex"),
        ("body:~x", "--expect: unknown form \"body\""),
        ("status:6xx", "--expect: \"status:6xx\": unknown class"),
        ("status", "--expect: expected status:CODES"),
        (
            "contains:",
            "--expect: \"contains:\": contains: needs a value",
        ),
        (
            "home=status:200",
            "--expect: \"home=status:200\": an assertion about entry \"home\" needs --mix",
        ),
    ] {
        expect(
            &[
                "run", "--target", T, "--rate", "10", "--http", "GET /", "--expect", assertion,
            ],
            2,
            says,
        );
    }
    // Where it cannot apply, refused rather than ignored.
    expect(
        &[
            "run",
            "--target",
            T,
            "--rate",
            "10",
            "--grpc",
            "pkg.Svc/Call",
            "--expect",
            "status:200",
        ],
        2,
        "--expect: not with --grpc",
    );
    // Over HTTP/2 each stream's body is kept: bounded.
    expect(
        &[
            "run",
            "--target",
            T,
            "--rate",
            "10",
            "--http2",
            "--connections",
            "1000",
            "--streams-per-connection",
            "100",
            "--expect",
            "contains:ok",
        ],
        2,
        "--expect: body assertions over HTTP/2 keep 4 KiB of each stream's body: 100000 streams",
    );
    expect(
        &[
            "run",
            "--target",
            T,
            "--rate",
            "10",
            "--expect",
            "status:200",
        ],
        2,
        "--expect: asserts HTTP/1.1 replies",
    );
    expect(
        &["run", "--http", "GET /", "--expect", "status:200"],
        2,
        "--expect: needs --target",
    );
}

/// `--server-time` (issue 37 item 4): a source that does not parse, or a run whose
/// replies it cannot read, is one line naming the flag, before any traffic (the target
/// here listens nowhere: a run would fail otherwise).
#[test]
fn bad_server_time_sources_are_usage_errors() {
    let http = ["run", "--target", T, "--rate", "10", "--http", "GET /"];
    let raw = [
        "run",
        "--target",
        T,
        "--rate",
        "10",
        "--framing",
        "fixed:16",
    ];
    for (base, source, needle) in [
        (
            &http,
            "servertiming",
            "--server-time: expected server-timing",
        ),
        (
            &http,
            "server-timing:",
            "--server-time: server-timing:NAME needs a metric name",
        ),
        (
            &http,
            "header:",
            "--server-time: header:NAME needs a header name",
        ),
        (
            &raw,
            "offset:4:3:us",
            "--server-time: offset:OFF:LEN: LEN must be 1, 2, 4 or 8",
        ),
        (
            &raw,
            "offset:4:4:s",
            "--server-time: offset:OFF:LEN:UNIT: UNIT must be ns, us or ms",
        ),
        (
            &raw,
            "offset:x:4:us",
            "--server-time: offset:OFF must be a byte offset",
        ),
        (
            &raw,
            "server-timing",
            "--server-time: a header source reads HTTP/1.1 replies",
        ),
        (
            &http,
            "offset:4:4:us",
            "--server-time: offset:OFF:LEN:UNIT reads raw replies",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(&["--server-time", source]);
        expect(&args, 2, needle);
    }
    expect(
        &["run", "--rate", "10", "--server-time", "server-timing"],
        2,
        "--server-time: needs --target",
    );
    expect(
        &[
            "run",
            "--target",
            T,
            "--rate",
            "10",
            "--http",
            "GET /",
            "--http2",
            "--server-time",
            "offset:4:4:us",
        ],
        2,
        "--server-time: offset:OFF:LEN:UNIT reads raw replies: with --http2",
    );
}
