//! What a run shows on stderr while it measures, read off a real screen: a run
//! against the sink inside tmux (a pseudo-terminal, Debian's `tmux`) shows the
//! progress bar with its clock, rate, p99 and errors; a Ctrl-C leaves the final
//! report on a clean screen with nothing measured lost; the same run piped shows the
//! plain once-a-second lines and no escape sequence or bar character; `--quiet`
//! shows neither.
//!
//! Each test has its own tmux server (`-L`, a socket named for the process and the
//! test), killed by a guard even when the test fails, so these run beside other tests.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]

mod common;

use common::{Sink, bin, load_lock, read_json, skip, tmp_json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The characters indicatif draws the bar with (`report::progress`).
const BAR_CHARS: &[char] = &['█', '▉', '▊', '▋', '▌', '▍', '▎', '▏'];

/// Whether tmux is there; without it the test is skipped (counted), except under CI,
/// where `scripts/test.sh` installs it and its absence fails.
fn tmux_missing(test: &str) -> bool {
    let there = Command::new("tmux")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !there {
        assert!(
            std::env::var_os("CI").is_none(),
            "under CI tmux must be installed (scripts/test.sh; Debian package tmux)"
        );
        skip(test, "no tmux (Debian package tmux)");
    }
    !there
}

/// A tmux server of its own running one detached 160x40 session; killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Runs `script` with `sh -c` in a new session on socket `name`. The script should
    /// end in a long sleep, so the pane (and what it shows) outlives blaster. The shell
    /// traps SIGINT, so a Ctrl-C stops only blaster (dash would die of it, and the pane
    /// with it); blaster starts with the default disposition, as from a login shell.
    fn start(name: &str, script: &str) -> Tmux {
        let t = Tmux {
            socket: format!("blaster-{name}-{}", std::process::id()),
        };
        let status = t
            .cmd()
            .args(["new-session", "-d", "-x", "160", "-y", "40", "sh", "-c"])
            .arg(format!("trap true INT; {script}"))
            .status()
            .expect("run tmux");
        assert!(status.success(), "tmux new-session failed");
        t
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]).stdin(Stdio::null());
        c
    }

    /// The screen and its scroll-back, wrapped lines joined.
    fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-J", "-S", "-"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls the screen until `done` holds, at most `limit`; returns the screen.
    fn wait_for(&self, what: &str, limit: Duration, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let s = self.screen();
            if done(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {limit:?}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn keys(&self, keys: &str) {
        let status = self
            .cmd()
            .args(["send-keys", keys])
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self
            .cmd()
            .arg("kill-server")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The bar's line on the screen once it carries a measured second's figures.
fn bar_line(screen: &str) -> Option<&str> {
    screen
        .lines()
        .find(|l| l.contains(" left [") && l.contains("rate ") && l.contains("| p99 "))
}

/// The end of the script's output: blaster's exit status.
fn exit_status(screen: &str) -> Option<i32> {
    screen
        .lines()
        .find_map(|l| l.strip_prefix("blaster-exit="))
        .and_then(|c| c.trim().parse().ok())
}

fn run_cmd(sink: &Sink, extra: &str) -> String {
    format!(
        "{} run --target {} --rate 1000 --connections 8 --cores 0 {extra}",
        bin(),
        sink.addr
    )
}

#[test]
fn a_terminal_shows_the_bar_and_ctrl_c_leaves_the_report_on_a_clean_screen() {
    if tmux_missing("a_terminal_shows_the_bar_and_ctrl_c_leaves_the_report_on_a_clean_screen") {
        return;
    }
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let (_dir, json) = tmp_json();
    let run = run_cmd(
        &sink,
        &format!("--duration 60s --json {}", json.to_str().unwrap()),
    );
    let tmux = Tmux::start("bar", &format!("{run}; echo blaster-exit=$?; sleep 600"));

    let screen = tmux.wait_for("progress bar", Duration::from_secs(20), |s| {
        bar_line(s).is_some()
    });
    let bar = bar_line(&screen).expect("present");
    // Elapsed and remaining time, achieved vs intended rate, the second's p99, errors.
    assert!(bar.contains("/60s, "), "no clock in {bar:?}");
    assert!(
        bar.contains("/s of 1000/s"),
        "no rate vs intended in {bar:?}"
    );
    assert!(bar.contains("| errors "), "no errors in {bar:?}");
    assert!(bar.contains(BAR_CHARS), "no bar drawn in {bar:?}");
    // The bar stays one line: nothing scrolls.
    assert_eq!(screen.lines().filter(|l| l.contains(" left [")).count(), 1);

    tmux.keys("C-c");
    let screen = tmux.wait_for("exit after Ctrl-C", Duration::from_secs(20), |s| {
        exit_status(s).is_some()
    });
    assert!(
        matches!(exit_status(&screen), Some(0 | 3)),
        "exit status; the screen:\n{screen}"
    );
    // The final report is there, marked interrupted...
    assert!(screen.contains("(interrupted)"), "no report:\n{screen}");
    assert!(screen.contains("rate: achieved"), "no report:\n{screen}");
    assert!(screen.contains("\nrun: "), "no verdict line:\n{screen}");
    // ...on a clean screen: the bar, and the terminal's `^C` echo with it, are gone.
    assert!(!screen.contains(BAR_CHARS), "bar left behind:\n{screen}");
    assert!(!screen.contains(" left ["), "bar left behind:\n{screen}");
    assert!(!screen.contains("^C"), "Ctrl-C echo left behind:\n{screen}");
    // Nothing measured is lost: the JSON has what the seconds before Ctrl-C measured.
    let v = read_json(&json);
    assert_eq!(v["interrupted"], true, "{}", v["interrupted"]);
    assert!(v["requests"]["completed"].as_u64().unwrap_or(0) > 0);
    assert!(!v["intervals"].as_array().expect("intervals").is_empty());
}

#[test]
fn piped_shows_the_plain_lines_and_quiet_shows_nothing() {
    if tmux_missing("piped_shows_the_plain_lines_and_quiet_shows_nothing") {
        return;
    }
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    for (label, extra) in [("piped", ""), ("quiet", "--quiet")] {
        // On a terminal, but stderr (and stdout) go through a pipe into a file.
        let raw = dir.path().join(format!("{label}.txt"));
        let run = run_cmd(&sink, &format!("--duration 3s {extra}"));
        let tmux = Tmux::start(
            label,
            &format!(
                "{run} 2>&1 | tee {}; echo blaster-exit=$?; sleep 600",
                raw.display()
            ),
        );
        let screen = tmux.wait_for("end of the run", Duration::from_secs(30), |s| {
            exit_status(s).is_some()
        });
        let bytes = std::fs::read(&raw).expect("the piped output");
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.contains("rate: achieved"),
            "{label}: no report:\n{text}"
        );
        assert!(
            !text.contains('\x1b'),
            "{label}: an escape sequence:\n{text:?}"
        );
        assert!(
            !text.contains(BAR_CHARS),
            "{label}: bar characters:\n{text}"
        );
        assert!(!screen.contains(" left ["), "{label}: a bar:\n{screen}");
        // The plain live line: `[   1s] rate ... of ... | latency p50 ... p99 ...`.
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with('[') && l.contains("s] rate "))
            .collect();
        if label == "quiet" {
            assert!(lines.is_empty(), "quiet: live lines:\n{text}");
            continue;
        }
        assert!(lines.len() >= 2, "piped: no live lines:\n{text}");
        for l in &lines {
            assert!(
                l.contains("of     1000/s") && l.contains(" p99 ") && l.contains("| errors "),
                "piped: {l:?}"
            );
        }
        // The screen shows what went through the pipe.
        assert!(screen.contains(lines[0]), "piped: screen:\n{screen}");
    }
}

#[test]
fn a_search_step_has_its_own_bar_and_the_step_line_stays() {
    if tmux_missing("a_search_step_has_its_own_bar_and_the_step_line_stays") {
        return;
    }
    let _g = load_lock();
    let sink = Sink::start(&[]);
    // One step (--max = --start) of 4 s; --max-lag 1s so a busy host still ends it
    // as measured. What is checked is what the screen shows, not the verdict.
    let search = format!(
        "{} search --target {} --slo 'p99<1s' --start 500 --max 500 --step-duration 4s \
         --max-lag 1s --connections 8 --cores 0",
        bin(),
        sink.addr
    );
    let tmux = Tmux::start(
        "search",
        &format!("{search}; echo blaster-exit=$?; sleep 600"),
    );
    let screen = tmux.wait_for("step bar", Duration::from_secs(20), |s| {
        bar_line(s).is_some()
    });
    let bar = bar_line(&screen).expect("present");
    assert!(
        bar.starts_with("search step 1 (climb 500/s) "),
        "no step label in {bar:?}"
    );
    assert!(
        bar.contains("/s of 500/s"),
        "no rate vs intended in {bar:?}"
    );
    let screen = tmux.wait_for("end of the search", Duration::from_secs(30), |s| {
        exit_status(s).is_some()
    });
    // The step's own line and the search's report, on a screen the bar has left.
    assert!(
        screen.contains("search: climb ") && screen.contains("max safe throughput"),
        "no step line or report:\n{screen}"
    );
    assert!(!screen.contains(BAR_CHARS), "bar left behind:\n{screen}");
    assert!(!screen.contains(" left ["), "bar left behind:\n{screen}");
}
