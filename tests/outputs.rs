//! Outputs fail before the run, and a closed stdout or stderr never panics: an
//! unwritable `--json` is refused before anything connects, result files appear whole
//! or not at all, and `| head -c 1` or `2>&-` end the command with its usual exit code.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::net::TcpListener;
use std::path::PathBuf;
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
    // The series' resolution is stated (issue 25): a second each for the first hour.
    let r = &v["intervals_resolution"];
    assert_eq!(r["fine_until_s"], 3600, "{r}");
    assert_eq!(r["coarse_s"], 60, "{r}");
    // The precision is stated (issue 22): the resolution, and the timer lateness a
    // window's wake-up was aimed by (a 99.5th percentile, never above a millisecond).
    assert_eq!(v["config"]["resolution_ns"], 100_000, "{}", v["config"]);
    let tail = v["workers"][0]["timer_late_p995_ns"]
        .as_u64()
        .expect("timer_late_p995_ns");
    assert!(tail <= 1_000_000, "{tail}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("resolution 100.0 us, spin auto, timer late "),
        "{text}"
    );
    assert!(text.contains(", p99.5 "), "{text}");
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

// Issue 25: outputs never replace a device or a link, and leave no temporary.

/// Makes a private device node (`mknod`, as root) in `dir`: never the machine's own.
fn mknod(dir: &std::path::Path, name: &str, kind: &str, major: u32, minor: u32) -> PathBuf {
    let p = dir.join(name);
    let st = Command::new("mknod")
        .arg(&p)
        .args([kind, &major.to_string(), &minor.to_string()])
        .status()
        .expect("mknod");
    assert!(st.success(), "mknod {kind} {major} {minor} (needs root)");
    p
}

fn mkfifo(dir: &std::path::Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    assert!(Command::new("mkfifo").arg(&p).status().unwrap().success());
    p
}

/// A thread reading a FIFO to its end. The test holds a write end of its own until
/// [`FifoReader::finish`], so the reader never waits forever, whatever blaster does.
struct FifoReader {
    holder: std::fs::File,
    thread: std::thread::JoinHandle<String>,
}

impl FifoReader {
    fn start(fifo: &std::path::Path) -> FifoReader {
        // O_RDWR on a FIFO does not wait for the other end (Linux).
        let holder = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(fifo)
            .unwrap();
        let fifo = fifo.to_path_buf();
        let thread = std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap());
        FifoReader { holder, thread }
    }

    /// Everything written to the FIFO, once every writer has closed it.
    fn finish(self) -> String {
        drop(self.holder);
        self.thread.join().unwrap()
    }
}

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn file_type(p: &std::path::Path) -> std::fs::FileType {
    std::fs::symlink_metadata(p).unwrap().file_type()
}

/// `blaster plan`'s arguments: a command that writes a JSON and touches no network.
fn plan_args(json: &str) -> Vec<String> {
    let args = "plan --users 1000 --msg-rate 10 --up-bytes 100 --down-bytes 100 --cores 4 \
                --nic-gbps 10 --cost-ns-per-msg 1000 --syscalls-per-core 100000 --json";
    let mut v: Vec<String> = args.split_whitespace().map(String::from).collect();
    v.push(json.into());
    v
}

/// Runs blaster with `args`, reading its stdout as it comes (an HTML page is larger
/// than a pipe holds).
fn run_reading_stdout(args: &[&str]) -> (std::process::Output, String) {
    // In a directory of its own: a `-` taken for a file name lands there.
    let cwd = tempfile::tempdir().unwrap();
    let mut child = Command::new(bin())
        .current_dir(cwd.path())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).unwrap();
        s
    });
    let out = wait_bounded(child, Duration::from_secs(30));
    let text = reader.join().unwrap();
    assert!(names(cwd.path()).is_empty(), "{:?}", names(cwd.path()));
    (out, text)
}

fn run_strings(args: &[String]) -> std::process::Output {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&a, Duration::from_secs(30))
}

/// One line on stderr, exit 1, naming `what`.
fn assert_one_line_exit_1(out: &std::process::Output, what: &str) {
    let e = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(e.contains(what), "{e}");
}

#[test]
fn a_private_null_stays_a_device_and_a_private_full_is_one_line() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let null = mknod(dir.path(), "null", "c", 1, 3);
    let full = mknod(dir.path(), "full", "c", 1, 7);
    let out = run_strings(&plan_args(null.to_str().unwrap()));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        file_type(&null).is_char_device(),
        "the null node was replaced"
    );
    let out = run_strings(&plan_args(full.to_str().unwrap()));
    assert_one_line_exit_1(&out, "No space left on device");
    assert!(
        file_type(&full).is_char_device(),
        "the full node was replaced"
    );
    assert_eq!(names(dir.path()), ["full", "null"]);
}

#[test]
fn a_block_device_or_a_socket_is_refused_with_one_line() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    // A private node for a loop device: refused before it is ever opened.
    let blk = mknod(dir.path(), "blk", "b", 7, 200);
    let out = run_strings(&plan_args(blk.to_str().unwrap()));
    assert_one_line_exit_1(&out, "is a block device");
    assert!(file_type(&blk).is_block_device());
    let sock = dir.path().join("sock");
    let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let out = run_strings(&plan_args(sock.to_str().unwrap()));
    assert_one_line_exit_1(&out, "is a socket");
    assert!(file_type(&sock).is_socket());
    assert_eq!(names(dir.path()), ["blk", "sock"]);
}

#[test]
fn a_fifo_is_written_through_to_its_reader() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = mkfifo(dir.path(), "fifo");
    let reader = FifoReader::start(&fifo);
    let out = run_strings(&plan_args(fifo.to_str().unwrap()));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = reader.finish();
    let v: serde_json::Value = serde_json::from_str(&text).expect("the JSON came through");
    assert_eq!(v["mode"], "plan");
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&file_type(&fifo)));
    assert_eq!(names(dir.path()), ["fifo"]);
}

#[test]
fn dash_is_stdout_for_the_json() {
    let args = plan_args("-");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (out, text) = run_reading_stdout(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&text).expect("stdout is JSON");
    assert_eq!(v["mode"], "plan");
}

/// A run whose every output goes somewhere that is not a plain new file: the JSON to a
/// private null device, the CSV through a link, the interval log into a FIFO; then the
/// report commands' outputs on `-`.
#[test]
fn a_runs_outputs_go_through_devices_links_and_fifos() {
    use std::os::unix::fs::FileTypeExt;
    let _g = load_lock();
    let sink = Sink::start(&["--mode", "echo"]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let null = mknod(d, "null", "c", 1, 3);
    std::fs::write(d.join("real.csv"), "old").unwrap();
    std::os::unix::fs::symlink("real.csv", d.join("link.csv")).unwrap();
    let fifo = mkfifo(d, "log.fifo");
    let reader = FifoReader::start(&fifo);
    let json = d.join("r.json");
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let base = [
        "run",
        "--target",
        &sink.addr,
        "--rate",
        "200",
        "--duration",
        "1s",
        "--cores",
        "0",
    ];
    let mut args: Vec<String> = base.iter().map(|x| x.to_string()).collect();
    args.extend(["--csv".into(), s(&d.join("link.csv"))]);
    args.extend(["--hdr-log".into(), s(&fifo)]);
    args.extend(["--percentiles".into(), s(&null)]);
    args.extend(["--json".into(), s(&json)]);
    let out = run_strings(&args);
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    assert!(
        file_type(&null).is_char_device(),
        "the null node was replaced"
    );
    assert!(
        file_type(&d.join("link.csv")).is_symlink(),
        "the link was replaced"
    );
    let csv = std::fs::read_to_string(d.join("real.csv")).unwrap();
    assert!(csv.starts_with("time_s,"), "{csv}");
    // The confidence intervals beside it, named after the path given (issue 33).
    let ci = std::fs::read_to_string(d.join("link.ci.csv")).unwrap();
    assert!(ci.starts_with("figure,percentile,"), "{ci}");
    let log = reader.finish();
    assert!(log.contains("Tag=latency,"), "{log}");
    assert!(file_type(&fifo).is_fifo());
    // What the run wrote, and nothing else (the report commands below add nothing).
    let written = [
        "link.ci.csv",
        "link.csv",
        "log.fifo",
        "null",
        "r.json",
        "real.csv",
    ];
    assert_eq!(names(d), written);
    // `-` is stdout for the report commands' outputs too.
    let j = s(&json);
    for (args, starts) in [
        (vec!["report", &j, "--html", "-"], "<!"),
        (vec!["merge", &j, "--json", "-"], "{"),
        (vec!["compare", &j, &j, "--json", "-"], "{"),
    ] {
        let (out, text) = run_reading_stdout(&args);
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(
            text.trim_start().starts_with(starts),
            "{args:?}: {text:.200}"
        );
        assert!(!stderr(&out).contains("wrote -"), "{}", stderr(&out));
    }
    assert_eq!(names(d), written);
}

#[test]
fn two_outputs_naming_one_file_are_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("x"), "").unwrap();
    std::os::unix::fs::symlink("x", d.join("link")).unwrap();
    let x = d.join("x").to_str().unwrap().to_string();
    let link = d.join("link").to_str().unwrap().to_string();
    let new = d.join("new").to_str().unwrap().to_string();
    let run_base = [
        "run",
        "--target",
        "127.0.0.1:9",
        "--rate",
        "10",
        "--duration",
        "1s",
        "--cores",
        "0",
    ];
    let cases: Vec<Vec<&str>> = vec![
        [&run_base[..], &["--json", &x, "--csv", &x]].concat(),
        [&run_base[..], &["--json", &new, "--hdr-log", &new]].concat(),
        [&run_base[..], &["--csv", &x, "--percentiles", &link]].concat(),
        [&run_base[..], &["--json", "-", "--csv", "-"]].concat(),
        vec!["merge", &x, "--json", &link, "--html", &x],
    ];
    for args in cases {
        let out = run(&args, Duration::from_secs(30));
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(
            e.contains("both write") || e.contains("only one output"),
            "{e}"
        );
    }
    assert_eq!(names(d), ["link", "x"]);
}

/// A second Ctrl-C, SIGTERM or SIGHUP exits at once; every output's temporary goes with
/// it. The target accepts and never answers, so the run's drain after the first signal
/// lasts long enough for the second to find it still running.
#[test]
fn a_second_signal_leaves_no_temporary() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = l.local_addr().unwrap().to_string();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let p = |n: &str| d.join(n).to_str().unwrap().to_string();
        let child = Command::new(bin())
            .args([
                "run",
                "--target",
                &target,
                "--rate",
                "50",
                "--duration",
                "30s",
            ])
            .args(["--cores", "0", "--json", &p("r.json"), "--csv", &p("r.csv")])
            .args(["--hdr-log", &p("r.hlog"), "--percentiles", &p("r.hgrm")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Under way: the CSV's temporary has its header.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_dir(d).unwrap().any(|e| {
            let e = e.unwrap();
            e.file_name().to_string_lossy().contains("r.csv") && e.metadata().unwrap().len() > 0
        }) {
            assert!(Instant::now() < deadline, "the run did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        let pid = Pid::from_raw(child.id() as i32);
        kill(pid, sig).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        kill(pid, sig).unwrap();
        let out = wait_bounded(child, Duration::from_secs(30));
        assert_eq!(
            out.status.code(),
            Some(128 + sig as i32),
            "{sig}: {}",
            stderr(&out)
        );
        assert!(names(d).is_empty(), "{sig}: {:?}", names(d));
    }
}
