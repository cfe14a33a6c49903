//! `blaster report --html`: real runs against the built-in sink rendered to HTML,
//! opened in headless Chromium (Debian package `chromium`, installed by .ci/run). The
//! screenshot must show the charts (many colours, the runs' colours in quantity) and
//! Chromium's net log must show no request from the page to any network scheme.
//! Bad input is refused with one line and exit 1, before any output is written.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]

mod common;

use common::{Sink, bin, load_lock, run, run_report, stderr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The colours of the first two runs (html.rs PALETTE).
const BLUE: [u8; 3] = [31, 119, 180];
const ORANGE: [u8; 3] = [255, 127, 14];

/// Two short runs made once for every test here: A against a plain sink, B against a
/// sink that delays each reply by 1 ms at a higher rate, so the overlay has two
/// visibly different runs.
fn runs() -> &'static (tempfile::TempDir, PathBuf, PathBuf) {
    static RUNS: OnceLock<(tempfile::TempDir, PathBuf, PathBuf)> = OnceLock::new();
    RUNS.get_or_init(|| {
        let _l = load_lock();
        let dir = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        for (name, sink_args, rate) in [
            ("a.json", &[][..], "1000"),
            ("b.json", &["--delay", "1ms"][..], "2000"),
        ] {
            let sink = Sink::start(sink_args);
            let v = run_report(
                &["--target", &sink.addr, "--rate", rate, "--duration", "3s"],
                Duration::from_secs(60),
            );
            let p = dir.path().join(name);
            std::fs::write(&p, v.to_string()).unwrap();
            paths.push(p);
        }
        (dir, paths[0].clone(), paths[1].clone())
    })
}

fn report(args: &[&str]) -> std::process::Output {
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    run(&all, Duration::from_secs(30))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn chromium() -> PathBuf {
    for name in ["chromium", "chromium-browser"] {
        for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "headless Chromium is needed for this test and is not installed: apt-get install \
         chromium (.ci/run installs it)"
    );
}

struct Shot {
    width: usize,
    rgb: Vec<[u8; 3]>,
    /// URLs of network requests the page made (not Chromium's own background ones).
    page_requests: Vec<String>,
}

impl Shot {
    fn non_white_share(&self) -> f64 {
        self.rgb.iter().filter(|p| **p != [255, 255, 255]).count() as f64 / self.rgb.len() as f64
    }

    fn distinct_colours(&self) -> usize {
        let mut c: Vec<[u8; 3]> = self.rgb.clone();
        c.sort_unstable();
        c.dedup();
        c.len()
    }

    /// Pixels within antialiasing distance of `c`.
    fn near(&self, c: [u8; 3]) -> usize {
        self.rgb
            .iter()
            .filter(|p| p.iter().zip(c).all(|(&a, b)| a.abs_diff(b) <= 30))
            .count()
    }
}

/// Opens `html` in headless Chromium with no profile, takes a 1200x2400 screenshot and
/// the net log.
fn screenshot(html: &Path) -> Shot {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("shot.png");
    let netlog = dir.path().join("net.json");
    let child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1200,2400")
        .arg(format!("--log-net-log={}", netlog.display()))
        .arg(format!("file://{}", html.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let out = common::wait_bounded(child, Duration::from_secs(90));
    assert!(
        png.exists(),
        "chromium wrote no screenshot: {}",
        stderr(&out)
    );

    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = info.color_type.samples();
    assert!(
        step >= 3,
        "unexpected PNG colour type {:?}",
        info.color_type
    );
    let rgb = buf[..info.buffer_size()]
        .chunks(step)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    Shot {
        width: info.width as usize,
        rgb,
        page_requests: page_requests(&netlog),
    }
}

/// Network requests in Chromium's net log that a page started. Chromium's own
/// background requests (component updater, account checks) carry the initiator
/// "not an origin"; a request from a file:// page carries its opaque origin, "null".
fn page_requests(netlog: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(netlog).expect("chromium wrote its net log");
    // Chromium may be stopped before it closes the events array.
    let log: serde_json::Value = serde_json::from_str(&text)
        .or_else(|_| serde_json::from_str(&format!("{}]}}", text.trim_end().trim_end_matches(','))))
        .expect("net log parses");
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
        .as_u64()
        .expect("net log names URL_REQUEST_START_JOB");
    let events = log["events"].as_array().expect("net log has events");
    let requests: Vec<String> = events
        .iter()
        .filter(|e| e["type"].as_u64() == Some(start_job))
        .filter(|e| e["params"]["initiator"].as_str() != Some("not an origin"))
        .filter_map(|e| e["params"]["url"].as_str())
        .filter(|u| {
            ["http:", "https:", "ws:", "wss:", "ftp:"]
                .iter()
                .any(|s| u.starts_with(s))
        })
        .map(String::from)
        .collect();
    requests
}

/// The page's own text: no URL, script, external resource or empty chart.
fn assert_self_contained(html: &str, charts: usize) {
    for bad in [
        "http://", "https://", "<script", "src=", "url(", "@import", "<link",
    ] {
        assert!(!html.contains(bad), "the page contains {bad:?}");
    }
    let svgs: Vec<&str> = html.split("<svg").skip(1).collect();
    assert_eq!(svgs.len(), charts, "one SVG per chart");
    for (i, svg) in svgs.iter().enumerate() {
        let svg = &svg[..svg.find("</svg>").expect("closed svg")];
        assert!(
            svg.matches("<polyline").count() + svg.matches("<path").count() >= 1,
            "chart {i} has no lines"
        );
        assert!(svg.contains("<text"), "chart {i} has no labels");
    }
}

fn render(runs: &[&Path], out: &Path) -> String {
    let mut args: Vec<&str> = runs.iter().map(|p| s(p)).collect();
    args.extend(["--html", s(out)]);
    let o = report(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    std::fs::read_to_string(out).unwrap()
}

#[test]
fn one_run_renders_in_chromium_with_no_network() {
    let (dir, a, _) = runs();
    let out = dir.path().join("report.html");
    let html = render(&[a], &out);
    // Eight charts and the kernel drop counters (issue 33, item 6).
    assert_self_contained(&html, 9);
    for text in [
        "a.json",
        "time since start (s)",
        "99.9%",
        "gate 1.00 ms",
        "requests per second",
        "Kernel drop counters",
    ] {
        assert!(html.contains(text), "the page lacks {text:?}");
    }
    let shot = screenshot(&out);
    assert_eq!(shot.width, 1200);
    eprintln!(
        "single: {:.1}% non-white, {} colours, {} blue pixels",
        shot.non_white_share() * 100.0,
        shot.distinct_colours(),
        shot.near(BLUE)
    );
    assert!(shot.non_white_share() > 0.10, "blank page");
    assert!(
        shot.distinct_colours() > 40,
        "{} colours",
        shot.distinct_colours()
    );
    // The run's lines, not only its swatch (14x14) in the table.
    assert!(shot.near(BLUE) > 3_000, "{} blue pixels", shot.near(BLUE));
    assert!(shot.page_requests.is_empty(), "{:?}", shot.page_requests);
}

#[test]
fn two_runs_overlay_in_distinct_colours() {
    let (dir, a, b) = runs();
    let out = dir.path().join("cmp.html");
    let html = render(&[a, b], &out);
    // Eight charts and the kernel drop counters (issue 33, item 6).
    assert_self_contained(&html, 9);
    assert!(
        html.contains("a.json p99") && html.contains("b.json p99"),
        "legend names both files"
    );
    let shot = screenshot(&out);
    eprintln!(
        "overlay: {:.1}% non-white, {} colours, {} blue, {} orange pixels",
        shot.non_white_share() * 100.0,
        shot.distinct_colours(),
        shot.near(BLUE),
        shot.near(ORANGE)
    );
    assert!(shot.non_white_share() > 0.10, "blank page");
    assert!(shot.near(BLUE) > 3_000, "{} blue pixels", shot.near(BLUE));
    assert!(
        shot.near(ORANGE) > 3_000,
        "{} orange pixels",
        shot.near(ORANGE)
    );
    assert!(shot.page_requests.is_empty(), "{:?}", shot.page_requests);
}

/// The net-log check can fail: a page that loads an image from loopback is caught.
#[test]
fn a_page_that_fetches_is_caught_by_the_net_log_check() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/probe.png", listener.local_addr().unwrap());
    let page = dir.path().join("fetches.html");
    std::fs::write(
        &page,
        format!("<!DOCTYPE html><html><body><img src=\"{url}\"></body></html>"),
    )
    .unwrap();
    // Accept and close, so the load ends quickly whatever Chromium waits for.
    std::thread::spawn(move || {
        for c in listener.incoming().flatten() {
            drop(c);
        }
    });
    let shot = screenshot(&page);
    assert_eq!(shot.page_requests, vec![url]);
}

#[test]
fn bad_input_is_refused_in_one_line() {
    let (_, a, _) = runs();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.html");
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let mut old: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a).unwrap()).unwrap();
    old["schema_version"] = serde_json::json!(0);
    let cases = [
        (dir.path().join("missing.json"), "missing.json: cannot read"),
        (write("garbage.json", "not json"), "garbage.json: not JSON"),
        (
            write("other.json", r#"{"data": [1, 2, 3]}"#),
            "not a blaster run report",
        ),
        (
            write("old.json", &old.to_string()),
            "old.json: schema_version 0",
        ),
        (
            write(
                "search.json",
                &format!(
                    r#"{{"schema_version": {}, "steps": []}}"#,
                    blaster::report::SCHEMA_VERSION
                ),
            ),
            "a search or baseline report",
        ),
    ];
    for (input, want) in &cases {
        let o = report(&[s(a), s(input), "--html", s(&out)]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{input:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{input:?}: {e}");
        assert!(e.contains(want), "{input:?}: {e:?} lacks {want:?}");
    }
    // Nothing written, no temporary left behind.
    assert!(!out.exists());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains("html"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn unwritable_output_fails_before_reading_anything() {
    let dir = tempfile::tempdir().unwrap();
    // The input does not exist either: the error must be about the output, which is
    // checked first.
    let missing = dir.path().join("missing.json");
    for out in [
        dir.path().join("no/such/dir/r.html"),
        dir.path().to_path_buf(),
    ] {
        let o = report(&[s(&missing), "--html", s(&out)]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains("cannot write") && e.contains(s(&out)), "{e}");
    }
    let o = report(&[s(&missing)]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "--html is required: {}",
        stderr(&o)
    );
    let o = Command::new(bin())
        .args(["report", "--html", "x.html"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "a run is required: {}",
        stderr(&o)
    );
}
