//! Issue 13, bad input: `--shard`, `--start-at` and `--run-id` are refused with one
//! line naming the flag and the bound, exit 2, before anything connects.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn expect(args: &[&str], needle: &str) {
    let mut all = vec!["run", "--target", "127.0.0.1:9", "--rate", "10"];
    all.extend_from_slice(args);
    let out = run(&all, Duration::from_secs(20));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "args {args:?}: stderr {err}");
    assert!(
        err.contains(needle),
        "args {args:?}: expected {needle:?} in {err:?}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line, got {err:?}");
}

fn unix_ms_from_now(offset_ms: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    (now + offset_ms).to_string()
}

#[test]
fn bad_shards_are_usage_errors() {
    let at = unix_ms_from_now(60_000);
    let at = at.as_str();
    expect(
        &["--shard", "3/3", "--start-at", at],
        "--shard: the shard index is 0-based and must be less than the shard count 3, got 3/3",
    );
    expect(
        &["--shard", "0/0", "--start-at", at],
        "--shard: the shard count must be at least 1, got 0/0",
    );
    expect(
        &["--shard", "0/10001", "--start-at", at],
        "--shard: the shard count must be at most 10000, got 0/10001",
    );
    expect(
        &["--shard", "two/3", "--start-at", at],
        "--shard: expected i/N such as 2/8 (0-based index / shard count), got \"two/3\"",
    );
    expect(
        &["--shard", "1/3"],
        "--shard: the shards of a run must start together",
    );
    expect(
        &["--shard", "2/3", "--start-at", at, "--connections", "2"],
        "--shard: shard 2/3 gets 0 of the 2 --connections, fewer than its 1 worker cores",
    );
}

#[test]
fn bad_start_instants_are_usage_errors() {
    expect(
        &["--start-at", "tomorrow"],
        "--start-at: expected an RFC 3339 time such as 2025-06-01T12:00:00Z or Unix \
         milliseconds such as 1748779200000, got \"tomorrow\"",
    );
    expect(
        &["--start-at", "2001-01-01T00:00:00Z"],
        " in the past (this machine's clock says ",
    );
    expect(
        &["--start-at", &unix_ms_from_now(-5_000)],
        "s in the past (this machine's clock says ",
    );
    expect(
        &["--start-at", &unix_ms_from_now(25 * 3_600_000)],
        "h ahead; at most 24 h ahead",
    );
    expect(
        &["--run-id", "no spaces"],
        "--run-id: expected 1 to 63 letters, digits, '.', '_' or '-', got \"no spaces\"",
    );
}
