//! Issue 13, item 7: `blaster plan` prints the fleet, and the command lines it prints
//! are the run: a plan sized to 3 generators, its 3 shard commands run as printed (the
//! shell fills in $START and $RUN_ID) against the sink, merged complete and whole.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// 900 users, 1 message/s each, 100 per connection (9 connections), 3 connections per
/// machine: 3 generators; 2 cores each, so the workers get core 1.
fn plan_args(target: &str) -> Vec<String> {
    [
        "plan",
        "--users",
        "900",
        "--msg-rate",
        "1",
        "--up-bytes",
        "16",
        "--down-bytes",
        "16",
        "--streams-per-conn",
        "100",
        "--cores",
        "2",
        "--nic-gbps",
        "10",
        "--cost-ns-per-msg",
        "300",
        "--syscalls-per-core",
        "200000",
        "--conns-per-machine",
        "3",
        "--duration",
        "2s",
        "--target",
        target,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn the_printed_shard_commands_run_the_planned_load_and_merge_whole() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let mut args = plan_args(&sink.addr);
    args.extend(["--json".into(), "-".into()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&refs, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let fleet = &plan["fleet"];
    assert_eq!(fleet["shards"], 3, "{fleet}");
    assert_eq!(fleet["kubernetes"]["completions"], 3);
    assert_eq!(fleet["ansible"]["blaster_cores"], "1");
    let cmds: Vec<String> = fleet["shard_commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    assert_eq!(cmds.len(), 3);
    // The text names the same commands.
    let text_out = run(&refs[..refs.len() - 2], Duration::from_secs(10));
    let text = String::from_utf8_lossy(&text_out.stdout).to_string();
    for c in &cmds {
        assert!(text.contains(c.as_str()), "{c} not in\n{text}");
    }

    // Run them as printed, through a shell, with one start instant and run id.
    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 2_000;
    let children: Vec<_> = cmds
        .iter()
        .map(|c| {
            let c = c.strip_prefix("blaster ").expect("starts with blaster");
            spawn_piped(
                std::process::Command::new("sh")
                    .arg("-c")
                    .arg(format!("exec \"$BLASTER\" {c} --quiet --spin 0"))
                    .env("BLASTER", bin())
                    .env("START", start.to_string())
                    .env("RUN_ID", "planned-fleet")
                    .current_dir(dir.path()),
            )
        })
        .collect();
    for c in children {
        let out = wait_bounded(c, Duration::from_secs(60));
        assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    }
    sink.stop();

    let files: Vec<String> = (0..3)
        .map(|i| {
            dir.path()
                .join(format!("shard-{i}.json"))
                .display()
                .to_string()
        })
        .collect();
    let merged = dir.path().join("merged.json");
    let mut margs = vec!["merge".to_string()];
    margs.extend(files);
    margs.extend(["--json".into(), merged.display().to_string()]);
    let mrefs: Vec<&str> = margs.iter().map(String::as_str).collect();
    let out = run(&mrefs, Duration::from_secs(30));
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let m = read_json(&merged);
    assert_eq!(m["fleet"]["merged"]["complete"], true, "{m}");
    assert_eq!(m["fleet"]["run_id"], "planned-fleet");
    // The planned load: 900 users x 1 message/s for 2 s, over 9 connections.
    assert_eq!(m["requests"]["dispatched"], 1800);
    assert_eq!(m["config"]["connections"], 9);
}
