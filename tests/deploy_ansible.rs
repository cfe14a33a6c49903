//! Issue 13: the Ansible playbook (deploy/ansible/blaster.yml) run for real. The
//! script tests/deploy/ansible_netns.sh makes network namespaces as hosts, each with
//! Debian's sshd and a key generated for the test, a sink in another namespace and a
//! control namespace running ansible-playbook; all traffic stays inside them. Needs
//! root (ip netns); without it, a SKIP line.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Runs the script; `None` (after a SKIP line) when this machine cannot.
fn playbook(work: &Path, mode: &str, extra: &str) -> Option<(bool, String)> {
    let out = Command::new(format!("{ROOT}/tests/deploy/ansible_netns.sh"))
        .arg(work)
        .arg(common::bin())
        .arg(mode)
        .env("BLASTER_ANSIBLE_EXTRA", extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if out.status.code() == Some(77) {
        let reason = stdout.trim().trim_start_matches("SKIP ").to_string();
        assert!(
            std::env::var_os("CI").is_none() || reason.contains("root"),
            "under CI the tools must be installed (scripts/test.sh): {reason}"
        );
        common::skip("deploy_ansible", &reason);
        return None;
    }
    let log = std::fs::read_to_string(work.join("ansible.log")).unwrap_or_default();
    Some((
        out.status.success(),
        format!("{stdout}{}\n{log}", String::from_utf8_lossy(&out.stderr)),
    ))
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_failed_preflight_stops_the_fleet_before_it_sends() {
    let _g = common::load_lock();
    let dir = tempfile::tempdir().unwrap();
    let Some((ok, log)) = playbook(dir.path(), "bad-preflight", "") else {
        return;
    };
    assert!(ok, "{log}");
    assert!(
        log.contains("fatal: [h2]"),
        "h2's preflight is the failure: {log}"
    );
    assert!(
        log.contains("cores.online"),
        "the preflight line says why: {log}"
    );
    assert!(
        !log.contains("PLAY [Run the shards]"),
        "no shard started: {log}"
    );
    assert!(!dir.path().join("results").exists());
}

#[test]
fn three_shards_over_ssh_add_up_to_the_run() {
    let _g = common::load_lock();
    let dir = tempfile::tempdir().unwrap();
    let Some((ok, log)) = playbook(dir.path(), "good", "") else {
        return;
    };
    assert!(ok, "{log}");
    // 3,000 requests/s for 3 s, constant arrivals: 9,000 requests in all, 3,000 each.
    let mut dispatched = 0;
    for i in 0..3 {
        let shard = json(&dir.path().join(format!("results/shard-{i}.json")));
        let r = &shard["requests"];
        assert_eq!(r["dispatched"], 3000, "shard {i}: {r}");
        assert_eq!(r["completed"], r["dispatched"], "shard {i}: {r}");
        dispatched += r["dispatched"].as_u64().unwrap();
    }
    assert_eq!(dispatched, 9000);
    // blaster merge ran on the control machine: one run, three shards, all counted.
    let merged = json(&dir.path().join("results/merged.json"));
    assert_eq!(
        merged["requests"]["dispatched"], 9000,
        "{}",
        merged["requests"]
    );
    assert_eq!(merged["fleet"]["merged"]["complete"], true);
    assert_eq!(merged["fleet"]["merged"]["shards_present"], 3);
    assert!(log.contains("3 of 3 shards"), "{log}");
}

#[test]
fn a_frames_fleet_over_ssh_is_one_run_of_every_room() {
    let _g = common::load_lock();
    let dir = tempfile::tempdir().unwrap();
    let Some((ok, log)) = playbook(dir.path(), "frames", "") else {
        return;
    };
    assert!(ok, "{log}");
    // 60 connections in rooms of 10 for 2 s at 20 ms ticks: 6 rooms, 2 a shard, each
    // connection 100 frames, each frame to its 9 room mates (less what a mate sent in
    // the tick before the sink learnt of the receiver: at most one frame each).
    for i in 0..3u64 {
        let f = &json(&dir.path().join(format!("results/shard-{i}.json")))["frames"];
        assert_eq!(
            (&f["first_room"], &f["rooms"]),
            (&(2 * i).into(), &2.into()),
            "shard {i}"
        );
        assert_eq!(f["foreign"], 0, "shard {i}: {f}");
    }
    let merged = json(&dir.path().join("results/merged.json"));
    let f = &merged["frames"];
    assert_eq!(f["planned"], 6000, "{f}");
    let expected = f["expected"].as_u64().unwrap();
    assert!((54_000 - 60 * 9..=54_000).contains(&expected), "{f}");
    assert_eq!(f["received"], f["expected"], "{f}");
    assert_eq!(
        (&f["foreign"], &f["duplicates"]),
        (&0.into(), &0.into()),
        "{f}"
    );
    assert_eq!(merged["fleet"]["merged"]["complete"], true);
}
