//! Shared test helpers: start the sink as a process on a free loopback port, run the
//! blaster binary, parse its JSON. Tests that put load on the machine take
//! [`load_lock`] so they run one at a time (two cores: parallel load tests would
//! measure each other).
#![allow(dead_code)]

pub mod servers;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_blaster")
}

static LOAD: Mutex<()> = Mutex::new(());

pub fn load_lock() -> MutexGuard<'static, ()> {
    LOAD.lock().unwrap_or_else(|e| e.into_inner())
}

/// A loopback port nobody uses right now (TCP and UDP), below the kernel's ephemeral
/// range: a port the kernel hands out (`bind` to port 0) may be taken as the source
/// port of another test's `connect` before the process it is meant for binds it, which
/// then fails (CI once lost a `--metrics-listen` test to that). Ports below the range
/// are only ever taken by an explicit bind; each call starts its search at a different
/// place (process id, a counter), so parallel tests do not pick the same one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    const FIRST: u32 = 10_000;
    let span = low.saturating_sub(FIRST).max(1);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let start = std::process::id()
        .wrapping_mul(7919)
        .wrapping_add(call.wrapping_mul(104_729));
    for k in 0..span.min(4096) {
        let port = (FIRST + (start.wrapping_add(k.wrapping_mul(37))) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok()
            && std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok()
        {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The second core when there is one (the sink's), else core 0.
pub fn sink_core() -> &'static str {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
        "1"
    } else {
        "0"
    }
}

pub struct Sink {
    child: Child,
    pub addr: String,
}

/// Cores of the `blaster sink` processes this test process has running, by pid: their
/// load on a run's core is the test's own, never another process's
/// ([`saw_other_load`]).
static SINK_CORES: Mutex<Vec<(u32, Vec<u64>)>> = Mutex::new(Vec::new());

/// The cores a `blaster sink` started with `args` runs on: its last `--cores` (a
/// comma list of cores and `a-b` ranges).
pub fn cores_of_args(args: &[&str]) -> Vec<u64> {
    let Some(list) = args
        .windows(2)
        .filter(|w| w[0] == "--cores")
        .map(|w| w[1])
        .next_back()
    else {
        return Vec::new();
    };
    let mut cores = Vec::new();
    for part in list.split(',') {
        let mut ends = part.splitn(2, '-').map(|x| x.trim().parse::<u64>());
        match (ends.next(), ends.next()) {
            (Some(Ok(a)), None) => cores.push(a),
            (Some(Ok(a)), Some(Ok(b))) => cores.extend(a..=b),
            _ => {}
        }
    }
    cores
}

/// Cores where a sink of this test process runs now.
pub fn own_sink_cores() -> Vec<u64> {
    let live = SINK_CORES.lock().unwrap_or_else(|e| e.into_inner());
    live.iter().flat_map(|(_, c)| c.iter().copied()).collect()
}

fn register_sink(child: &Child, args: &[&str]) {
    let mut live = SINK_CORES.lock().unwrap_or_else(|e| e.into_inner());
    live.push((child.id(), cores_of_args(args)));
}

impl Sink {
    /// Starts `blaster sink` with extra args and waits until it accepts connections.
    pub fn start(extra: &[&str]) -> Sink {
        // A port another process took between `free_port` and the sink's bind makes the
        // sink exit while the probe below reaches that other process (a CI run: every
        // connect refused a moment later): the sink must still be running after the
        // probe, else it starts again on another port.
        for _ in 0..3 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let args = [&["sink", "--listen", &addr, "--cores", sink_core()], extra].concat();
            let mut child = Command::new(bin())
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start sink");
            register_sink(&child, &args);
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::net::TcpStream::connect(&addr).is_err() {
                assert!(Instant::now() < deadline, "sink did not start on {addr}");
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(Duration::from_millis(50));
            if matches!(child.try_wait(), Ok(None)) {
                return Sink { child, addr };
            }
        }
        panic!("the sink exited at start three times (its port taken each time?)");
    }
}

impl Sink {
    /// Starts `blaster sink --udp` with extra args; UDP cannot be probed with a
    /// connect, so it waits for the process to report that it listens.
    pub fn start_udp(extra: &[&str]) -> Sink {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let args = [
            &["sink", "--udp", "--listen", &addr, "--cores", sink_core()],
            extra,
        ]
        .concat();
        let mut child = Command::new(bin())
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sink");
        register_sink(&child, &args);
        // The sink prints its "sink: ... on ADDR" line once it is bound.
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut err, &mut line).unwrap();
        assert!(line.contains(&addr), "sink did not start: {line}");
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        Sink { child, addr }
    }

    /// Stops the sink with SIGINT (so it writes its report) and waits for it.
    pub fn stop(mut self) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-INT", &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "sink did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let id = self.child.id();
        let mut live = SINK_CORES.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|(pid, _)| *pid != id);
    }
}

pub fn tmp_json() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("report.json");
    (dir, p)
}

/// Runs blaster with args; returns the output (bounded by `limit`).
pub fn run(args: &[&str], limit: Duration) -> Output {
    let child = Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start blaster");
    wait_bounded(child, limit)
}

/// Runs `n` shards of one run at once: `blaster ARGS...` (from `run` on) with
/// `--shard i/n`, one `--start-at` 2 s ahead and `--json DIR/shard-i.json`; waits
/// for each (60 s at most) and returns its output and report path, in shard order.
pub fn run_shards(dir: &std::path::Path, n: usize, args: &[&str]) -> Vec<(Output, String)> {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 2_000;
    let at = at.to_string();
    let children: Vec<_> = (0..n)
        .map(|i| {
            let json = dir.join(format!("shard-{i}.json")).display().to_string();
            let shard = format!("{i}/{n}");
            let mut cmd = Command::new(bin());
            cmd.args(args)
                .args(["--shard", &shard, "--start-at", &at, "--json", &json]);
            (spawn_piped(&mut cmd), json)
        })
        .collect();
    (children.into_iter())
        .map(|(c, json)| (wait_bounded(c, Duration::from_secs(60)), json))
        .collect()
}

/// `blaster merge FILES... --json DIR/merged.json` (30 s at most): its output and the
/// merged report (`Null` when none was written).
pub fn merge_shards(dir: &std::path::Path, files: &[String]) -> (Output, serde_json::Value) {
    let merged = dir.join("merged.json");
    let mut args = vec!["merge"];
    args.extend(files.iter().map(String::as_str));
    args.extend_from_slice(&["--json", merged.to_str().unwrap()]);
    let out = run(&args, Duration::from_secs(30));
    let v = std::fs::read_to_string(&merged).map_or(serde_json::Value::Null, |t| {
        serde_json::from_str(&t).unwrap()
    });
    (out, v)
}

/// Waits for a child at most `limit`, killing it (and failing) past that.
pub fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "blaster did not finish within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `blaster run --cores 0 ARGS... --json TMP` (bounded by `limit`) and returns
/// the parsed report. Exit 3 is accepted with 0: the shared host may stall the
/// generator and make a run invalid; the figures the callers check still hold.
pub fn run_report(args: &[&str], limit: Duration) -> serde_json::Value {
    let (_dir, path) = tmp_json();
    let mut all: Vec<&str> = vec!["run", "--cores", "0"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", path.to_str().unwrap()]);
    let out = run(&all, limit);
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&path);
    assert_exit_matches_validity(&out, &v);
    v
}

/// Exit 0 goes with `"valid": true` and no reasons, exit 3 with `"valid": false` and
/// at least one reason; any other exit code leaves the report unchecked here.
pub fn assert_exit_matches_validity(out: &Output, v: &serde_json::Value) {
    let reasons = v["invalid_reasons"].as_array().map_or(0, Vec::len);
    match out.status.code() {
        Some(0) => assert!(v["valid"] == true && reasons == 0, "exit 0 but {v}"),
        Some(3) => assert!(v["valid"] == false && reasons > 0, "exit 3 but {v}"),
        _ => {}
    }
}

/// The codes of a `diagnosis` or `invalid_reasons` array (`{code, message, remedy}`
/// objects); each must carry a non-empty message and remedy.
pub fn codes(v: &serde_json::Value) -> Vec<String> {
    let items = v.as_array().expect("an array of diagnoses");
    items
        .iter()
        .map(|d| {
            for k in ["message", "remedy"] {
                assert!(d[k].as_str().is_some_and(|s| !s.is_empty()), "{k} in {d}");
            }
            d["code"].as_str().expect("a code").to_string()
        })
        .collect()
}

pub fn read_json(p: &PathBuf) -> serde_json::Value {
    let text = std::fs::read_to_string(p).expect("JSON report written");
    serde_json::from_str(&text).expect("JSON report parses")
}

/// `blaster ARGS` is a usage error: exit 2, one line on stderr, saying `needle`.
/// Returns that line, for more checks.
pub fn assert_usage(args: &[&str], needle: &str) -> String {
    let out = run(args, Duration::from_secs(30));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?} should say {needle}: {err}");
    err
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn f(v: &serde_json::Value, path: &str) -> f64 {
    let mut cur = v;
    for k in path.split('.') {
        cur = &cur[k];
    }
    cur.as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number in {v}"))
}

/// Reports a test that cannot run on this machine (no permission for namespaces, too
/// few cores) and returns so the caller can `return`. The line `SKIP <test>: <reason>`
/// goes straight to stderr, past libtest's capture (which would hide it for a passing
/// test), and is appended to `$BLASTER_SKIP_LOG` when set, so `scripts/test.sh` can
/// count the skips instead of letting them pass silently.
pub fn skip(test: &str, reason: &str) {
    use std::io::Write;
    let line = format!("SKIP {test}: {reason}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os("BLASTER_SKIP_LOG") {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        if let Ok(mut file) = file {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// Starts `cmd` with stdout and stderr captured (for [`wait_bounded`]).
pub fn spawn_piped(cmd: &mut std::process::Command) -> Child {
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the child")
}

/// (steal, all) jiffies of `cores` together, from their `cpuN` lines of /proc/stat:
/// the time the hypervisor ran something else on those vCPUs.
pub fn steal_jiffies(cores: &[usize]) -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let (mut steal, mut all) = (0, 0);
    for line in stat.lines() {
        let mut words = line.split_whitespace();
        let core = words.next().and_then(|w| w.strip_prefix("cpu"));
        if !core
            .and_then(|c| c.parse().ok())
            .is_some_and(|c| cores.contains(&c))
        {
            continue;
        }
        let v: Vec<u64> = words.filter_map(|x| x.parse().ok()).collect();
        steal += v.get(7).copied().unwrap_or(0);
        all += v.iter().take(8).sum::<u64>();
    }
    (steal, all)
}

/// The time the hypervisor took from a check's cores during one attempt, from their
/// `cpuN` lines of /proc/stat read before and after it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stolen {
    /// The share of the cores' time stolen.
    pub share: f64,
    /// The time stolen, summed over the cores, in nanoseconds.
    pub ns: f64,
}

impl Stolen {
    /// From the (steal, all) jiffies of [`steal_jiffies`] before and after an attempt.
    pub fn between(before: (u64, u64), after: (u64, u64)) -> Stolen {
        let steal = after.0.saturating_sub(before.0);
        let all = after.1.saturating_sub(before.1);
        // SAFETY: sysconf reads a constant of the C library; no memory is involved.
        let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
        Stolen {
            share: steal as f64 / all.max(1) as f64,
            ns: steal as f64 * 1e9 / ticks_per_s as f64,
        }
    }
}

/// How far a measured figure missed its check, for a miss that can say (a rate off by
/// 3% in a one-second interval, the check allowing 1%).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MissSize {
    /// The share the figure was off by (0.03: 3%).
    pub off: f64,
    /// The share the check allows on a quiet host.
    pub tolerance: f64,
    /// The window the figure was measured over.
    pub window: Duration,
}

impl MissSize {
    /// The part of the miss past the check's tolerance, as a share of the window: the
    /// share of it the generator must have lost for the miss to be the host's doing.
    pub fn beyond_tolerance(&self) -> f64 {
        (self.off - self.tolerance).max(0.0)
    }

    /// [`Self::beyond_tolerance`] as time: a rate 3% short over one second with 1%
    /// allowed needs 20 ms taken from the generator.
    pub fn unexplained_ns(&self) -> f64 {
        self.beyond_tolerance() * self.window.as_nanos() as f64
    }
}

/// Why one attempt of a timing check failed: the reason, the share of a second another
/// process took on the run's cores when the run's own host figures saw one there
/// (`host.max_other_load` above the warning level, [`foreign_other_load`]), and how far
/// the figure missed when the check can say ([`Miss::sized`]).
#[derive(Debug)]
pub struct Miss {
    pub why: String,
    pub other_load: Option<f64>,
    pub size: Option<MissSize>,
}

impl From<String> for Miss {
    fn from(why: String) -> Miss {
        Miss {
            why,
            other_load: None,
            size: None,
        }
    }
}

/// `Err(why())` unless `ok`: a timing assertion inside [`on_a_quiet_host`].
pub fn ensure(ok: bool, why: impl FnOnce() -> String) -> Result<(), Miss> {
    if ok { Ok(()) } else { Err(why().into()) }
}

/// As [`ensure`], for a check on the run that `v` reports: a miss carries whether the
/// run's own host figures saw another process on its cores ([`Miss::in_run`]).
pub fn ensure_run(
    v: &serde_json::Value,
    ok: bool,
    why: impl FnOnce() -> String,
) -> Result<(), Miss> {
    if ok {
        Ok(())
    } else {
        Err(Miss::in_run(v, why()))
    }
}

/// Whether the run that `v` reports saw another process on its cores
/// ([`foreign_other_load`]).
pub fn saw_other_load(v: &serde_json::Value) -> bool {
    foreign_other_load(v).is_some()
}

/// The largest share of a second another process took on a core of the run that `v`
/// reports (`host.max_other_load`), when above the warning level and not on a core of
/// one of this test's own sinks ([`other_load_is_foreign`]). blaster's own threads
/// (io-wq helpers, an in-process sink) are not in that figure: the report counts them
/// as the generator's.
pub fn foreign_other_load(v: &serde_json::Value) -> Option<f64> {
    let other = v["host"]["max_other_load"].as_f64().unwrap_or(0.0);
    let warn = v["host"]["other_load_warn_at"]
        .as_f64()
        .unwrap_or(f64::INFINITY);
    let core = v["host"]["max_other_load_core"].as_u64();
    other_load_is_foreign(other, warn, core, &own_sink_cores()).then_some(other)
}

/// Whether a run's other load (`other`, on `core`) excuses a timing miss: above the
/// warning level, and not on a core where one of the test's own sinks runs (its load
/// there is the test's, which a regression could push up: never noise).
pub fn other_load_is_foreign(other: f64, warn: f64, core: Option<u64>, own: &[u64]) -> bool {
    other > warn && !core.is_some_and(|c| own.contains(&c))
}

/// `Err` unless the run that `v` reports is valid (the generator kept its
/// timetable): a timing miss with the run's own reasons. Exact accounting needs it (a
/// CI run with 27-37% of the vCPUs stolen sent 14,946 of 14,950 planned frames, the
/// last ones due after the generator fell behind).
pub fn generator_kept_up(v: &serde_json::Value) -> Result<(), Miss> {
    ensure_run(v, v["valid"] == true, || {
        format!("generator invalid: {}", v["invalid_reasons"])
    })
}

impl Miss {
    /// A miss in the run that `v` reports, marked as seen with another process on
    /// its cores when the report's own host figures say so.
    pub fn in_run(v: &serde_json::Value, why: String) -> Miss {
        Miss {
            why,
            other_load: foreign_other_load(v),
            size: None,
        }
    }

    /// This miss, with how far its figure missed: `measured` against `expected` over
    /// `window`, the check allowing `tolerance` (a share of `expected`).
    pub fn sized(mut self, measured: f64, expected: f64, tolerance: f64, window: Duration) -> Miss {
        self.size = Some(MissSize {
            off: (measured / expected - 1.0).abs(),
            tolerance,
            window,
        });
        self
    }
}

/// What made an attempt's miss the host's doing rather than the code's ([`excuse`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Excuse {
    /// Another process took this share of a second on the run's cores.
    OtherLoad(f64),
    /// The hypervisor stole this from the check's cores during the attempt.
    Steal(Stolen),
}

impl std::fmt::Display for Excuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Excuse::OtherLoad(share) => write!(f, "other load {:.0}%", share * 100.0),
            Excuse::Steal(s) => write!(f, "steal {:.1}% ({:.0} ms)", s.share * 100.0, s.ns / 1e6),
        }
    }
}

/// Whether what was measured during one attempt could explain its miss, and what did
/// (docs/testing.md, "Timing checks"); `None` when nothing could: the code's fault.
///
/// - Other load: the run's report saw another process on its cores above the warning
///   level ([`foreign_other_load`]), and, for a sized miss, that share of a second
///   covers the part of the miss past the check's tolerance
///   ([`MissSize::beyond_tolerance`]).
/// - Steal: more than `steal_max` of the check's cores' time was stolen during the
///   attempt, and, for a sized miss, the time stolen covers the time the miss past the
///   tolerance amounts to ([`MissSize::unexplained_ns`]).
///
/// An unsized miss (a latency or lag percentile past a gate, a comparison's verdict)
/// is explained by either disturbance alone: one pause of a stolen or shared core of
/// tens of milliseconds moves a percentile past any millisecond gate.
pub fn excuse(miss: &Miss, stolen: Stolen, steal_max: f64) -> Option<Excuse> {
    let needs_share = miss.size.map_or(0.0, |s| s.beyond_tolerance());
    let needs_ns = miss.size.map_or(0.0, |s| s.unexplained_ns());
    if let Some(other) = miss.other_load
        && other >= needs_share
    {
        return Some(Excuse::OtherLoad(other));
    }
    (stolen.share > steal_max && stolen.ns >= needs_ns).then_some(Excuse::Steal(stolen))
}

/// Attempts of a timing check in [`on_a_quiet_host`] whose miss nothing measured
/// explains: the third such miss fails the check.
pub const QUIET_ATTEMPTS: usize = 3;

/// Attempts of a timing check in [`on_a_quiet_host`] in all, the disturbed ones (a
/// miss the host explains) included: a disturbed attempt does not use up one of the
/// [`QUIET_ATTEMPTS`], up to this many. A busy CI host once skipped four checks at
/// three attempts each, one more than the suite's skip budget.
pub const ALL_ATTEMPTS: usize = 6;

/// The pause after a disturbed attempt, before the next: a hypervisor's or another
/// process's burst often lasts seconds. A fixed pause, not a wait for the steal to
/// stop: a vCPU accrues steal only while it wants to run, so an idle check core shows
/// none however busy the host is.
pub const AFTER_DISTURBED: Duration = Duration::from_secs(2);

/// What a timing check needs of the host: the cores it runs on, and the largest
/// share of their time the hypervisor may steal (/proc/stat) before an attempt no
/// longer tested the code.
pub struct Quiet {
    pub cores: &'static [usize],
    pub steal_max: f64,
}

/// The generator's worker on core 0, whose rate over a second is checked to 1%: up
/// to 1% of the attempt stolen is within what a one-second interval absorbs. Idle,
/// this VM loses 0.1-0.5% to steal; loaded, 10-30% has been seen.
pub const RATE_ON_CORE_0: Quiet = Quiet {
    cores: &[0],
    steal_max: 0.01,
};

/// As [`RATE_ON_CORE_0`], with the sink's core as well (the run's answers count).
pub const RATE_ON_CORES_0_1: Quiet = Quiet {
    cores: &[0, 1],
    steal_max: 0.01,
};

/// Runs a timing check whose premise is a machine that gives the test its cores:
/// until one attempt passes, up to [`QUIET_ATTEMPTS`] attempts that miss for no
/// measured reason and [`ALL_ATTEMPTS`] in all. Structural assertions and exact
/// counts inside `check` panic as usual (on every attempt, never retried); timing
/// assertions return a [`Miss`].
///
/// On this VM the hypervisor takes a vCPU away for tens of milliseconds now and then
/// (steal in /proc/stat, up to 30% of a run seen while the VM was busy), which no
/// generator can hide: 10 ms stolen is 1% of a one-second interval's rate, and a
/// dispatch lag past any millisecond gate. So an attempt whose miss what was measured
/// during it could explain ([`excuse`]: steal above `quiet.steal_max` of its cores'
/// time, or another process on its core, each large enough for a sized miss) did not
/// test the code: it does not use up an attempt, and the next waits
/// [`AFTER_DISTURBED`]. The check fails when no attempt passed and at least one miss
/// had no such explanation (the code's fault); when every attempt's had one it is
/// skipped (counted against the skip budget by `scripts/test.sh`), never passed.
/// Returns whether an attempt passed.
pub fn on_a_quiet_host(test: &str, quiet: &Quiet, check: impl FnMut() -> Result<(), Miss>) -> bool {
    match attempt(test, quiet, || std::thread::sleep(AFTER_DISTURBED), check) {
        Attempts::Passed => true,
        Attempts::Missed { quiet: misses, all } => panic!(
            "{test}: no attempt passed, and {} of {all} missed with nothing measured to \
             explain it (steal at most {:.1}% of cores {:?} or too little for the miss, no \
             other load large enough): {misses:#?}",
            misses.len(),
            quiet.steal_max * 100.0,
            quiet.cores
        ),
        Attempts::Disturbed(excuses) => {
            skip(
                test,
                &format!(
                    "the host explains the miss of each of {} attempts ({})",
                    excuses.len(),
                    excuses.join("; ")
                ),
            );
            false
        }
    }
}

/// How the attempts of [`attempt`] ended.
#[derive(Debug, PartialEq)]
pub enum Attempts {
    /// One passed.
    Passed,
    /// None passed, and these misses (of `all` attempts) had nothing measured to
    /// explain them.
    Missed { quiet: Vec<String>, all: usize },
    /// None passed, and the host explained every miss (these excuses).
    Disturbed(Vec<String>),
}

/// The loop of [`on_a_quiet_host`], `pause()` after each disturbed attempt: until one
/// attempt passes, [`QUIET_ATTEMPTS`] miss for no measured reason, or
/// [`ALL_ATTEMPTS`] were made.
pub fn attempt(
    test: &str,
    quiet: &Quiet,
    mut pause: impl FnMut(),
    mut check: impl FnMut() -> Result<(), Miss>,
) -> Attempts {
    let mut quiet_failures = Vec::new();
    let mut disturbed = Vec::new();
    let mut last_disturbed = false;
    while quiet_failures.len() < QUIET_ATTEMPTS
        && quiet_failures.len() + disturbed.len() < ALL_ATTEMPTS
    {
        if last_disturbed {
            pause();
        }
        let before = steal_jiffies(quiet.cores);
        let result = check();
        let stolen = Stolen::between(before, steal_jiffies(quiet.cores));
        let Err(miss) = result else {
            return Attempts::Passed;
        };
        match excuse(&miss, stolen, quiet.steal_max) {
            Some(excuse) => {
                eprintln!("{test}: disturbed attempt ({excuse}): {}", miss.why);
                disturbed.push(excuse.to_string());
                last_disturbed = true;
            }
            None => {
                eprintln!(
                    "{test}: missed, and nothing measured explains it (steal {}, \
                     other load {:?}, size {:?}): {}",
                    Excuse::Steal(stolen),
                    miss.other_load,
                    miss.size,
                    miss.why
                );
                quiet_failures.push(miss.why);
                last_disturbed = false;
            }
        }
    }
    if quiet_failures.is_empty() {
        Attempts::Disturbed(disturbed)
    } else {
        Attempts::Missed {
            all: quiet_failures.len() + disturbed.len(),
            quiet: quiet_failures,
        }
    }
}

/// `--target T --workload frames --connections 100 --room-size 10 --tick 20ms
/// --duration D --quiet`: the small frames run several tests drive (ten rooms, a frame
/// every 20 ms), for `blaster run` with the test's own flags after it.
pub fn frames_args<'a>(target: &'a str, duration: &'a str) -> Vec<&'a str> {
    frames_args_with(target, "100", duration)
}

/// [`frames_args`] with `connections` of its own (rooms of 10, a frame every 20 ms).
pub fn frames_args_with<'a>(
    target: &'a str,
    connections: &'a str,
    duration: &'a str,
) -> Vec<&'a str> {
    vec![
        "--target",
        target,
        "--workload",
        "frames",
        "--connections",
        connections,
        "--room-size",
        "10",
        "--tick",
        "20ms",
        "--duration",
        duration,
        "--quiet",
    ]
}

/// Runs blaster with `args` under an address-space limit of `as_bytes` (RLIMIT_AS, set
/// in the child only), bounded by `limit` like [`run`]: a runaway allocation fails the
/// child (an abort, not exit 1 or 2) instead of taking the machine's memory, so a
/// regression shows as a failed test.
pub fn run_with_memory_limit(args: &[&str], as_bytes: u64, limit: Duration) -> Output {
    let child = spawn_with_rlimit(args, libc::RLIMIT_AS, as_bytes);
    wait_bounded(child, limit)
}

/// Starts blaster with `args` (output piped) under the limit `value` of `resource`
/// (soft and hard, set in the child only).
pub fn spawn_with_rlimit(args: &[&str], resource: libc::__rlimit_resource_t, value: u64) -> Child {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs between fork and exec and calls only setrlimit, which is
    // async-signal-safe; it touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            if libc::setrlimit(resource, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().expect("start blaster")
}

/// A private endless source: a FIFO in `dir` that a thread feeds with zeros for as
/// long as a reader holds it open (never the machine's own /dev/zero).
pub struct EndlessFifo {
    pub path: PathBuf,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl EndlessFifo {
    pub fn new(dir: &std::path::Path, name: &str) -> EndlessFifo {
        use std::os::unix::ffi::OsStrExt;
        let path = dir.join(name);
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let p = path.clone();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            // Blocks until a reader opens the FIFO.
            let Ok(mut w) = std::fs::OpenOptions::new().write(true).open(&p) else {
                return;
            };
            let zeros = vec![0u8; 1 << 16];
            // Until the reader closes its end (EPIPE: Rust ignores SIGPIPE).
            while w.write_all(&zeros).is_ok() {}
        });
        EndlessFifo {
            path,
            writer: Some(writer),
        }
    }

    pub fn arg(&self) -> &str {
        self.path.to_str().unwrap()
    }
}

impl Drop for EndlessFifo {
    fn drop(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        // A writer still waiting for a reader (the command never opened the FIFO) is
        // released by a reader that opens and closes at once; its next write fails.
        let Some(w) = self.writer.take() else { return };
        for _ in 0..100 {
            if w.is_finished() {
                let _ = w.join();
                return;
            }
            let _ = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.path);
            std::thread::sleep(Duration::from_millis(20));
        }
        // Not finished within 2 s: left detached rather than hanging the test.
    }
}

/// A busy loop (`sh -c 'while :; do :; done'`) pinned to one core, killed when dropped:
/// the other process a test puts on a generator core. [`Hog::niced`] runs it at a
/// nice level (-20: it then holds the core against a waking sleeper for whole slices).
pub struct Hog(Child);

impl Hog {
    pub fn on_core(core: usize) -> Hog {
        Hog::spawn(core, None)
    }

    pub fn niced(core: usize, nice: i32) -> Hog {
        Hog::spawn(core, Some(nice))
    }

    fn spawn(core: usize, nice: Option<i32>) -> Hog {
        let mut args = vec!["-c".to_string(), core.to_string()];
        if let Some(n) = nice {
            args.extend(["nice".into(), "-n".into(), n.to_string()]);
        }
        args.extend(["sh", "-c", "while :; do :; done"].map(String::from));
        Hog(std::process::Command::new("taskset")
            .args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("taskset (util-linux) starts the busy loop"))
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Established connections to `port` on loopback, counted by the generator's address.
pub fn sources_connected_to(port: &str) -> std::collections::BTreeMap<String, usize> {
    let ss = std::process::Command::new("ss")
        .args([
            "-Htn",
            "state",
            "established",
            "dport",
            "=",
            &format!(":{port}"),
        ])
        .output()
        .expect("ss (iproute2) is needed");
    let mut seen = std::collections::BTreeMap::new();
    for line in String::from_utf8_lossy(&ss.stdout).lines() {
        // Recv-Q Send-Q Local:Port Peer:Port; the local address is the generator's.
        let local = line.split_whitespace().nth(2).unwrap_or("");
        let ip = local.rsplit_once(':').map_or("", |(ip, _)| ip);
        *seen.entry(ip.to_string()).or_default() += 1;
    }
    seen
}

/// The count `key` in a test server's stats line (`key N key N ...`, the raw HTTP/2
/// fixtures' STATS_FILE).
pub fn stat(said: &str, key: &str) -> u64 {
    let w: Vec<&str> = said.split_whitespace().collect();
    let at = w
        .iter()
        .position(|x| *x == key)
        .unwrap_or_else(|| panic!("{key} in {said}"));
    w[at + 1].parse().unwrap()
}
