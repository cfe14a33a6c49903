//! The kernel's own drop counters as diagnoses (issue 33, item 6): a conntrack table
//! filled in a network namespace of the test's own gives the `conntrack_table_full`
//! diagnosis, naming the sysctl, and the same run with the table at its usual size
//! gives none.
//!
//! Conntrack tracks a namespace's traffic once a rule there references it (an nftables
//! `ct state` rule on output), and the namespace's count is its own; but
//! `nf_conntrack_max` is global (read-only inside a namespace on current kernels), so
//! the filled case lowers the host's value for the few seconds of its run and puts it
//! back in a drop guard. Both cases hold one file lock so neither (nor another copy of
//! this test) runs while the host's value is lowered. Without nft, conntrack or
//! namespaces the tests print `SKIP` (common::skip).
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::Duration;

const MAX_PATH: &str = "/proc/sys/net/netfilter/nf_conntrack_max";
/// The table the filled case allows: 50 entries, fewer than the run's 400 connects.
const SMALL_MAX: u64 = 50;

/// Runs `cmd`; false when it cannot start or fails.
fn ok(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Held while a case runs: the host's `nf_conntrack_max` may be lowered meanwhile.
struct HostLock {
    _file: std::fs::File,
}

impl HostLock {
    fn take() -> HostLock {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open("/tmp/blaster-nf-conntrack-max.lock")
            .expect("lock file");
        // SAFETY: flock on a descriptor this File owns for as long as the lock is held.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(r, 0, "flock: {}", std::io::Error::last_os_error());
        HostLock { _file: f }
    }
}

/// The host's `nf_conntrack_max` lowered, put back on drop (also when the test panics).
struct LoweredMax {
    saved: String,
}

impl LoweredMax {
    fn to(max: u64) -> LoweredMax {
        let saved = std::fs::read_to_string(MAX_PATH).expect("conntrack is loaded");
        std::fs::write(MAX_PATH, max.to_string()).expect("root can write nf_conntrack_max");
        LoweredMax { saved }
    }
}

impl Drop for LoweredMax {
    fn drop(&mut self) {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(MAX_PATH)
            .unwrap();
        f.write_all(self.saved.trim().as_bytes()).unwrap();
    }
}

/// A network namespace whose loopback traffic conntrack tracks; deleted on drop.
struct TrackedNetns(String);

impl TrackedNetns {
    /// `None` (with `SKIP test: reason` printed) where this host cannot make one.
    fn create(test: &str) -> Option<TrackedNetns> {
        if !ok(Command::new("nft").arg("--version")) {
            skip(test, "nft (nftables) is not installed");
            return None;
        }
        if !std::path::Path::new(MAX_PATH).exists() {
            let _ = ok(Command::new("modprobe").arg("nf_conntrack"));
        }
        if !std::path::Path::new(MAX_PATH).exists() {
            skip(test, "conntrack (nf_conntrack) is not available");
            return None;
        }
        let ns = TrackedNetns(format!("blct{}{}", std::process::id() % 10_000, test.len()));
        let n = ns.0.as_str();
        let nft = |rule: &[&str]| {
            ok(Command::new("ip")
                .args(["netns", "exec", n, "nft"])
                .args(rule))
        };
        let made = ok(Command::new("ip").args(["netns", "add", n]))
            && ok(Command::new("ip").args(["-n", n, "link", "set", "lo", "up"]))
            && nft(&["add", "table", "inet", "t"])
            && nft(&[
                "add",
                "chain",
                "inet",
                "t",
                "c",
                "{ type filter hook output priority 0; }",
            ])
            && nft(&[
                "add", "rule", "inet", "t", "c", "ct", "state", "new", "accept",
            ]);
        if !made {
            skip(
                test,
                "cannot create a network namespace with an nftables ct rule here",
            );
            return None;
        }
        Some(ns)
    }

    fn exec(&self) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]);
        c
    }
}

impl Drop for TrackedNetns {
    fn drop(&mut self) {
        ok(Command::new("ip").args(["netns", "del", &self.0]));
    }
}

/// Runs 400 connections (one per request, 200/s for 2 s) against a sink in `ns`, with
/// the host's `nf_conntrack_max` at `max` during the run (`None`: as it is); returns
/// the JSON report and the text.
fn run_in(ns: &TrackedNetns, max: Option<u64>) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let mut sink = ns
        .exec()
        .args([
            bin(),
            "sink",
            "--listen",
            "127.0.0.1:9000",
            "--cores",
            sink_core(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let lowered = max.map(LoweredMax::to);
    let child = ns
        .exec()
        .args([
            bin(),
            "run",
            "--target",
            "127.0.0.1:9000",
            "--connect-per-request",
        ])
        .args([
            "--rate",
            "200",
            "--duration",
            "2s",
            "--cores",
            "0",
            "--timeout",
            "1s",
        ])
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_bounded(child, Duration::from_secs(30));
    drop(lowered);
    let _ = Command::new("kill")
        .args(["-INT", &sink.id().to_string()])
        .status();
    let _ = sink.wait();
    assert!(
        matches!(out.status.code(), Some(0 | 3 | 4)),
        "{}",
        stderr(&out)
    );
    (
        read_json(&json),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn a_full_conntrack_table_in_a_namespace_is_diagnosed_with_its_sysctl() {
    let test = "a_full_conntrack_table_in_a_namespace_is_diagnosed_with_its_sysctl";
    let _lock = HostLock::take();
    let Some(ns) = TrackedNetns::create(test) else {
        return;
    };
    let (v, text) = run_in(&ns, Some(SMALL_MAX));
    let k = &v["host"]["kernel"];
    assert!(f(k, "conntrack_drop") > 0.0, "{k}");
    assert_eq!(f(k, "conntrack_max"), SMALL_MAX as f64, "{k}");
    // The drops are in the series too, and add up to the total.
    let per_interval: f64 = v["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| f(i, "kernel.conntrack_drop"))
        .sum();
    assert_eq!(per_interval, f(k, "conntrack_drop"));
    let d = v["diagnosis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["code"] == "conntrack_table_full")
        .unwrap_or_else(|| panic!("no conntrack_table_full in {}", v["diagnosis"]));
    let message = d["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("of nf_conntrack_max {SMALL_MAX}")),
        "{message}"
    );
    assert!(
        d["remedy"]
            .as_str()
            .unwrap()
            .contains("net.netfilter.nf_conntrack_max"),
        "{d}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("note: conntrack table full")
                && l.contains("net.netfilter.nf_conntrack_max")),
        "{text}"
    );
    // The host's value is back.
    assert_ne!(
        std::fs::read_to_string(MAX_PATH).unwrap().trim(),
        SMALL_MAX.to_string()
    );
}

#[test]
fn a_conntrack_table_with_room_gives_no_conntrack_diagnosis() {
    let test = "a_conntrack_table_with_room_gives_no_conntrack_diagnosis";
    let _lock = HostLock::take();
    let Some(ns) = TrackedNetns::create(test) else {
        return;
    };
    let max: u64 = std::fs::read_to_string(MAX_PATH)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if max < 10_000 {
        skip(
            test,
            &format!("nf_conntrack_max is {max} on this host, too small"),
        );
        return;
    }
    let (v, text) = run_in(&ns, None);
    let k = &v["host"]["kernel"];
    // Read (a number, not null: conntrack is loaded and tracking) and zero.
    assert_eq!(f(k, "conntrack_drop"), 0.0, "{k}");
    assert!(
        f(k, "conntrack_count_max") > 0.0,
        "the namespace tracked: {k}"
    );
    assert!(
        !codes(&v["diagnosis"]).contains(&"conntrack_table_full".to_string()),
        "{}",
        v["diagnosis"]
    );
    assert!(!text.contains("conntrack table full"), "{text}");
    assert_eq!(v["requests"]["errors"], 0, "{}", v["requests"]);
}
