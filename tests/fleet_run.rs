//! Issue 13: shards of one run, started together on loopback, against a recording
//! target written here (a line echo server that keeps every request's `{seq}` and
//! `{time_ns}`), so the union of what the shards sent is checked on the wire: exactly
//! the single-machine sequence, no gap, no duplicate, each at its intended instant.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// (seq, time_ns, the `{rand:6}` text) of every request the server received.
type Seen = Arc<Mutex<Vec<(u64, u64, String)>>>;

/// A line echo server on a free loopback port: each request `SEQ TIME_NS RAND\n` is
/// recorded and echoed back (so `--framing delimiter:\n` finds the response's end).
fn recording_server() -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen: Seen = Arc::default();
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let s = s.clone();
            std::thread::spawn(move || serve(conn, &s));
        }
    });
    (addr, seen)
}

fn serve(conn: TcpStream, seen: &Mutex<Vec<(u64, u64, String)>>) {
    let _ = conn.set_nodelay(true);
    let mut out = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [seq, t, rand] = f[..] {
            let record = (seq.parse().unwrap(), t.parse().unwrap(), rand.to_string());
            seen.lock().unwrap().push(record);
        }
        if out.write_all(line.as_bytes()).is_err() {
            return;
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Runs `shards` shards (or one whole run for `None`) with one start instant against
/// `addr`; returns each shard's JSON report and the start instant (Unix ms).
fn fleet(addr: &str, shards: Option<u32>, extra: &[&str]) -> (Vec<serde_json::Value>, u64) {
    let dir = tempfile::tempdir().unwrap();
    let at = unix_ms() + 2_500;
    let n = shards.unwrap_or(1);
    let children: Vec<_> = (0..n)
        .map(|i| {
            let json = dir.path().join(format!("shard-{i}.json"));
            let mut args: Vec<String> = [
                "run",
                "--target",
                addr,
                "--payload",
                "{seq} {time_ns} {rand:6}\\n",
                "--framing",
                "delimiter:\\n",
                "--cores",
                "0",
                "--start-at",
                &at.to_string(),
                "--quiet",
                "--json",
                json.to_str().unwrap(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            if shards.is_some() {
                args.extend(["--shard".into(), format!("{i}/{n}")]);
            }
            args.extend(extra.iter().map(|s| s.to_string()));
            std::process::Command::new(bin())
                .args(&args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let reports = children
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let out = wait_bounded(c, Duration::from_secs(60));
            assert!(
                matches!(out.status.code(), Some(0 | 3)),
                "shard {i}: {}",
                stderr(&out)
            );
            let text = std::fs::read_to_string(dir.path().join(format!("shard-{i}.json")));
            serde_json::from_str(&text.unwrap()).unwrap()
        })
        .collect();
    (reports, at)
}

/// seq -> (intended instant relative to the start, `{rand:6}`), from what the server
/// saw; panics on a duplicate.
fn by_seq(seen: &[(u64, u64, String)], at_ms: u64) -> BTreeMap<u64, (i64, String)> {
    let mut m = BTreeMap::new();
    for (seq, t, rand) in seen {
        let rel = *t as i64 - (at_ms * 1_000_000) as i64;
        assert!(
            m.insert(*seq, (rel, rand.clone())).is_none(),
            "seq {seq} arrived twice"
        );
    }
    m
}

#[test]
fn three_shards_with_one_start_replay_the_single_machine_timetable() {
    let _g = load_lock();
    // The start skew and the rate achieved are timing: the shards share core 0, and a
    // vCPU held by the hypervisor at the start instant delays a shard's first send.
    on_a_quiet_host(
        "three_shards_with_one_start_replay_the_single_machine_timetable",
        &RATE_ON_CORES_0_1,
        three_shards,
    );
}

fn three_shards() -> Result<(), Miss> {
    let (addr, seen) = recording_server();
    // 3,000 requests/s for 3 s over 3 shards; they share core 0, so they sleep to each
    // send rather than spin against each other.
    let args = [
        "--rate",
        "3000",
        "--duration",
        "3s",
        "--connections",
        "6",
        "--spin",
        "0",
    ];
    let (reports, at) = fleet(&addr, Some(3), &args);
    let run_id = reports[0]["fleet"]["run_id"].as_str().unwrap().to_string();
    let (mut completed, mut achieved) = (0, 0.0);
    let mut skews = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        let f = &r["fleet"];
        assert_eq!(
            (f["shard"].as_u64(), f["shards"].as_u64()),
            (Some(i as u64), Some(3))
        );
        assert_eq!(f["run_id"], run_id.as_str(), "one run id");
        assert_eq!(f["start_at_unix_ms"], at);
        skews.push(f["start_skew_ns"].as_u64().expect("start skew reported"));
        assert!(f["clock"]["max_error_us"].is_u64(), "{f}");
        // This shard intended a third of the rate.
        assert_eq!(r["rate"]["intended_rps"], 1000.0, "{}", r["rate"]);
        assert_eq!(r["requests"]["dispatched"], 3000);
        completed += r["requests"]["completed"].as_u64().unwrap();
        achieved += r["rate"]["achieved_rps"].as_f64().unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        completed,
        seen.len() as u64,
        "merged completed = what the target saw"
    );
    // The union of the shards' sequence numbers is 0..9000: no gap, no duplicate, and
    // each request carried its single-machine instant, seq / 3000 s after the start.
    let m = by_seq(&seen, at);
    assert_eq!(m.len(), 9000);
    assert_eq!(
        m.keys().copied().collect::<Vec<_>>(),
        (0..9000).collect::<Vec<_>>()
    );
    // The instants carry each shard's reading of the wall clock at its start (a
    // vCPU held at that moment shifts a whole shard): timing, like the skews below.
    let off = m.iter().find_map(|(&seq, &(rel, _))| {
        let want = (seq as f64 * 1e9 / 3000.0).round() as i64;
        ((rel - want).abs() >= 200_000)
            .then(|| format!("seq {seq}: intended {rel} ns, want {want}"))
    });
    // Within 20 ms: a shard that ignored --start-at would start up to 2.5 s off. Not
    // 1 ms: a CI run here saw 7.9 ms with the hypervisor holding the vCPU at the
    // instant; the skews of a quiet host are in docs/figures.md (175-230 us).
    // A miss counts as seen with other load when any shard's report saw it.
    let host = reports
        .iter()
        .find(|r| saw_other_load(r))
        .unwrap_or(&reports[0]);
    ensure_run(host, off.is_none(), || off.clone().unwrap_or_default())?;
    ensure_run(host, skews.iter().all(|&s| s < 20_000_000), || {
        format!("start skews {skews:?} ns")
    })?;
    if (achieved / 3000.0 - 1.0).abs() >= 0.01 {
        let why = format!("achieved {achieved}/s of 3000/s");
        let run = Duration::from_secs(3);
        return Err(Miss::in_run(host, why).sized(achieved, 3000.0, 0.01, run));
    }
    Ok(())
}

#[test]
fn poisson_shards_send_the_unsharded_runs_instants() {
    let _g = load_lock();
    let args = [
        "--rate",
        "1500",
        "--duration",
        "2s",
        "--connections",
        "6",
        "--spin",
        "0",
        "--arrivals",
        "poisson",
        "--seed",
        "7",
    ];
    // The sequence numbers, the {rand} characters and the totals are exact whatever the
    // host does; the intended instants are compared through each worker's wall-clock
    // reading of the start. A worker that reads it late (three shards spinning to one
    // start on one core) still gets the start (wallclock::unix_at_start_ns: before that
    // fix this failed 2 runs of 3 by 1.5-6 ms); a vCPU taken between the reading's two
    // clock reads still moves it: a timing check.
    on_a_quiet_host(
        "poisson_shards_send_the_unsharded_runs_instants",
        &RATE_ON_CORES_0_1,
        || {
            let (addr, seen) = recording_server();
            let (whole_reports, at) = fleet(&addr, None, &args);
            let whole = by_seq(&seen.lock().unwrap(), at);
            let (addr, seen) = recording_server();
            let (reports, at) = fleet(&addr, Some(3), &args);
            let sharded = by_seq(&seen.lock().unwrap(), at);
            assert!(whole.len() > 2500, "{}", whole.len());
            assert_eq!(
                sharded.keys().collect::<Vec<_>>(),
                whole.keys().collect::<Vec<_>>(),
                "the shards' sequence numbers are the unsharded run's"
            );
            let total: u64 = reports
                .iter()
                .map(|r| r["requests"]["dispatched"].as_u64().unwrap())
                .sum();
            assert_eq!(total as usize, whole.len());
            // Each request carried the same {rand} characters and the same intended
            // instant (relative to the start), up to the µs the workers' wall-clock
            // reading of the start may differ by.
            let mut off = None;
            for (seq, (rel, rand)) in &sharded {
                let (whole_rel, whole_rand) = &whole[seq];
                assert_eq!(rand, whole_rand, "seq {seq}: {{rand}} differs");
                if off.is_none() && (rel - whole_rel).abs() >= 100_000 {
                    off = Some(format!("seq {seq}: {rel} vs {whole_rel} ns"));
                }
            }
            let host = reports
                .iter()
                .chain(&whole_reports)
                .find(|r| saw_other_load(r))
                .unwrap_or(&reports[0]);
            ensure_run(host, off.is_none(), || off.clone().unwrap_or_default())
        },
    );
}

/// Issue 21: the clock note belongs where the wall clock matters. A plain run times
/// everything on the TSC: no note, whatever the clock's state. A run with --start-at
/// reads the wall clock: the note exactly when the kernel says the clock is
/// unsynchronised (adjtimex, read here as the run reads it).
#[test]
fn the_clock_note_only_where_the_wall_clock_matters() {
    let (addr, _seen) = recording_server();
    let note = "this host's clock is unsynchronised";
    let run = |extra: &[String]| {
        let mut args: Vec<String> = [
            "run",
            "--target",
            &addr,
            "--payload",
            "{seq} {time_ns} {rand:6}\\n",
            "--framing",
            "delimiter:\\n",
            "--cores",
            "0",
            "--rate",
            "200",
            "--duration",
            "500ms",
            "--quiet",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().cloned());
        let out = wait_bounded(
            spawn_piped(std::process::Command::new(bin()).args(&args)),
            Duration::from_secs(30),
        );
        assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
        format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out))
    };
    let plain = run(&[]);
    assert!(!plain.contains(note), "{plain}");
    let at = unix_ms() + 1_500;
    let started = run(&["--start-at".into(), at.to_string()]);
    let unsynchronised = blaster::wallclock::ClockSync::read()
        .expect("adjtimex reads the clock's state")
        .unsynchronised;
    assert_eq!(started.contains(note), unsynchronised, "{started}");
    // Either way the run that read the wall clock says how it started.
    assert!(started.contains("fleet: "), "{started}");
}
