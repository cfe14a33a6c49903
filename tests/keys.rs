//! `{zipf:N:S}`, `{uniform:N}` and the feeders `{line:FILE}`, `{csv:FILE:COLUMN}`
//! (issue 37 item 2) against nginx, whose access log records every path it was asked
//! for: the keys follow the law, the report's key shares are exactly the log's, a
//! rerun with the same seed and two shards of one run ask for the same keys as one
//! whole run, and each request carries its feeders' rows.
mod common;
use common::servers::{Server, require, spawn};
use common::*;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// nginx answering 200 to everything, its access log one `$uri` per line.
fn logging_nginx() -> (Server, u16, PathBuf) {
    let bin = require("nginx", "nginx-light");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = dir.path().join("access.log");
    let conf = format!(
        "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; \
         error_log {d}/error.log; events {{ worker_connections 1024; }} \
         http {{ log_format keys $uri; access_log {log} keys; keepalive_requests 1000000; \
         client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; \
         uwsgi_temp_path {d}; scgi_temp_path {d}; \
         server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"ok\"; }} }} }}",
        d = dir.path().display(),
        log = log.display()
    );
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let mut cmd = Command::new(bin);
    cmd.args(["-c", conf_path.to_str().unwrap(), "-p"])
        .arg(dir.path());
    (spawn(&mut cmd, Some(dir), port), port, log)
}

/// Runs `--http GET /k/{zipf...}` at 10,000/s for 3 s; the report and the keys nginx
/// logged since `from` lines.
fn keyed_run(port: u16, log: &PathBuf, seed: &str) -> (serde_json::Value, Vec<u64>) {
    let before = std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .count();
    let (_d, json) = tmp_json();
    let target = format!("127.0.0.1:{port}");
    let out = run(
        &[
            "run",
            "--target",
            &target,
            "--cores",
            "0",
            "--http",
            "GET /k/{zipf:1000:1.1}",
            "--rate",
            "10000",
            "--duration",
            "3s",
            "--connections",
            "8",
            "--seed",
            seed,
            "--json",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&json);
    let text = std::fs::read_to_string(log).unwrap();
    let keys = text
        .lines()
        .skip(before)
        .map(|l| l.strip_prefix("/k/").unwrap().parse().unwrap())
        .collect();
    (v, keys)
}

#[test]
fn zipf_keys_follow_the_law_match_the_report_and_repeat_with_the_seed() {
    let _g = load_lock();
    let (_s, port, log) = logging_nginx();
    let (v, keys) = keyed_run(port, &log, "5");
    let n = keys.len() as f64;
    assert_eq!(n, f(&v, "requests.completed"), "every request logged once");
    assert_eq!(n, 30_000.0, "{}", v["requests"]);
    let mut count: HashMap<u64, u64> = HashMap::new();
    for &k in &keys {
        *count.entry(k).or_default() += 1;
    }
    assert!(keys.iter().all(|&k| (1..=1000).contains(&k)));
    // The law: key k with probability k^-1.1 / H, H = sum over 1..=1000.
    let h: f64 = (1..=1000).map(|k| (k as f64).powf(-1.1)).sum();
    for k in [1u64, 2, 5, 20] {
        let share = count.get(&k).copied().unwrap_or(0) as f64 / n;
        let law = (k as f64).powf(-1.1) / h;
        // 30,000 draws: the binomial sd is below 0.22 percentage points.
        assert!((share - law).abs() < 0.01, "key {k}: {share} vs {law}");
    }
    // The report's shares are the keys nginx saw, exactly.
    let r = &v["keys"][0];
    assert_eq!(r["placeholder"], "{zipf:1000:1.1}", "{r}");
    assert_eq!(f(r, "requests"), n, "{r}");
    assert_eq!(f(r, "distinct"), count.len() as f64, "{r}");
    for t in r["top"].as_array().unwrap() {
        let k = t["key"].as_u64().unwrap();
        assert_eq!(t["share"].as_f64().unwrap(), count[&k] as f64 / n, "{t}");
    }
    // The same seed asks for the same keys; another seed for others.
    let (_, again) = keyed_run(port, &log, "5");
    let sorted = |mut v: Vec<u64>| {
        v.sort_unstable();
        v
    };
    let keys = sorted(keys);
    assert_eq!(sorted(again), keys);
    let (_, other) = keyed_run(port, &log, "6");
    assert_ne!(sorted(other), keys);
}

/// `{line:FILE}` and `{csv:FILE:COLUMN}`: request `seq` carries line `seq mod L` and
/// row `seq mod R` (both of a file's columns from the same row), every one of them.
#[test]
fn feeders_give_each_request_its_rows() {
    let _g = load_lock();
    let (_s, port, log) = logging_nginx();
    let dir = tempfile::tempdir().unwrap();
    let lines = dir.path().join("users.txt");
    std::fs::write(&lines, "alice\r\nbob\ncarol\n").unwrap();
    let csv = dir.path().join("accounts.csv");
    std::fs::write(&csv, "id,name\n7,ann\n8,\"b,en\"\n").unwrap();
    let http = format!(
        "GET /u/{{seq}}/{{line:{}}}/{{csv:{c}:name}}/{{csv:{c}:id}}",
        lines.display(),
        c = csv.display()
    );
    let (_d, json) = tmp_json();
    let target = format!("127.0.0.1:{port}");
    let out = run(
        &[
            "run",
            "--target",
            &target,
            "--cores",
            "0",
            "--http",
            &http,
            "--rate",
            "1000",
            "--duration",
            "1s",
            "--json",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&json);
    let text = std::fs::read_to_string(&log).unwrap();
    let logged: Vec<&str> = text.lines().collect();
    assert_eq!(logged.len() as f64, f(&v, "requests.completed"));
    assert_eq!(logged.len(), 1000);
    let names = ["alice", "bob", "carol"];
    let rows = [("ann", "7"), ("b,en", "8")];
    for l in &logged {
        // nginx logs the path decoded: /u/SEQ/LINE/NAME/ID.
        let parts: Vec<&str> = l.trim_start_matches("/u/").splitn(4, '/').collect();
        let seq: usize = parts[0].parse().unwrap();
        assert_eq!(parts[1], names[seq % 3], "{l}");
        assert_eq!((parts[2], parts[3]), rows[seq % 2], "{l}");
    }
}

/// Runs `blaster run ARGS` as `n` shards started together (one `--start-at`), or as one
/// whole run for `n` = 1, and waits for them.
fn sharded(port: u16, n: u32, http: &str) {
    let target = format!("127.0.0.1:{port}");
    let at = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 1_500)
        .to_string();
    let children: Vec<_> = (0..n)
        .map(|i| {
            let mut args = vec![
                "run".to_string(),
                "--target".into(),
                target.clone(),
                "--cores".into(),
                "0".into(),
                "--http".into(),
                http.into(),
                "--rate".into(),
                "2000".into(),
                "--duration".into(),
                "2s".into(),
                "--seed".into(),
                "9".into(),
                "--quiet".into(),
            ];
            if n > 1 {
                args.extend([
                    "--shard".into(),
                    format!("{i}/{n}"),
                    "--start-at".into(),
                    at.clone(),
                ]);
            }
            Command::new(bin())
                .args(&args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = wait_bounded(c, Duration::from_secs(60));
        assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    }
}

/// Two shards of a run ask for exactly the (sequence number, key) pairs one machine
/// running it whole asks for: every key is the sequence number's, wherever it is sent.
#[test]
fn shards_ask_for_the_keys_one_machine_would() {
    let _g = load_lock();
    let (_s, port, log) = logging_nginx();
    let http = "GET /k/{seq}/{zipf:1000:1.1}/{uniform:50}";
    let pairs = |skip: usize| -> Vec<String> {
        let text = std::fs::read_to_string(&log).unwrap();
        let mut v: Vec<String> = text.lines().skip(skip).map(str::to_string).collect();
        v.sort_unstable();
        v
    };
    sharded(port, 1, http);
    let whole = pairs(0);
    assert_eq!(whole.len(), 4000);
    sharded(port, 2, http);
    let shards = pairs(whole.len());
    assert_eq!(shards, whole);
}
