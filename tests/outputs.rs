//! Outputs fail before the run, and a closed stdout or stderr never panics: an
//! unwritable `--json` is refused before anything connects, result files appear whole
//! or not at all, and `| head -c 1` or `2>&-` end the command with its usual exit code.
mod common;
use common::*;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn an_unwritable_json_is_refused_before_connecting() {
    // A listener the test owns: any connect attempt would sit in its accept queue.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let target = l.local_addr().unwrap().to_string();
    let started = Instant::now();
    let out = run(
        &[
            "run",
            "--target",
            &target,
            "--rate",
            "100",
            "--duration",
            "5s",
            "--cores",
            "0",
            "--json",
            "/nonexistent/dir/x.json",
        ],
        Duration::from_secs(30),
    );
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(e.contains("/nonexistent/dir/x.json"), "{e}");
    assert!(took < Duration::from_secs(1), "refused after {took:?}");
    assert!(
        l.accept()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "it connected before refusing the output"
    );
}

#[test]
fn the_json_is_written_whole_with_no_temporary_left() {
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "echo"]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.json");
    std::fs::write(&path, "old").unwrap();
    let out = run(
        &[
            "run",
            "--target",
            &sink.addr,
            "--rate",
            "500",
            "--duration",
            "1s",
            "--cores",
            "0",
            "--json",
            path.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&path);
    assert_eq!(v["schema_version"], 3);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

/// Runs `args` with stdout closed by its reader, as `| head -c 1` does once it has its byte.
fn with_stdout_closed_early(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Closed before the report is written (it is written in one piece at the end, so
    // reading a byte first would let the whole report through).
    drop(child.stdout.take());
    let out = wait_bounded(child, Duration::from_secs(30));
    (out.status.code(), stderr(&out))
}

#[test]
fn a_closed_stdout_does_not_panic() {
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "echo"]);
    // The text report and, with --json -, the JSON both go to the closed pipe.
    for json in [None, Some("-")] {
        let mut args = vec![
            "run",
            "--target",
            &sink.addr,
            "--rate",
            "500",
            "--duration",
            "1s",
            "--cores",
            "0",
        ];
        args.extend(json.map(|j| ["--json", j]).into_iter().flatten());
        let (code, err) = with_stdout_closed_early(&args);
        assert!(!err.contains("panicked"), "{err}");
        assert!(matches!(code, Some(0 | 3)), "exit {code:?}: {err}");
    }
}

#[test]
fn a_closed_stderr_does_not_panic_or_leak_into_files() {
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "echo"]);
    let (_dir, path) = tmp_json();
    // --progress prints a live line to stderr every second; with 2 closed, the JSON's
    // temporary file would be the next descriptor opened.
    let cmd = format!(
        "exec {} run --target {} --rate 500 --duration 2s --cores 0 --progress --json {} 2>&-",
        bin(),
        sink.addr,
        path.display()
    );
    let child = Command::new("sh")
        .args(["-c", &cmd])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_bounded(child, Duration::from_secs(30));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "exit {:?}: {text}",
        out.status.code()
    );
    assert!(text.contains("run: "), "{text}");
    let v = read_json(&path);
    assert_eq!(v["schema_version"], 3);
}
