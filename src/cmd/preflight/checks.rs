//! The checks `blaster preflight` prints and `blaster run` enforces: whether *this*
//! plan fits the machine's file descriptors (`fd.limit`), ephemeral ports
//! (`ports.range`), memory (`mem.tcp`) and cores (`cores.online`).
//!
//! The names, the statuses and the line format are those of `scripts/preflight.sh`
//! (`STATUS  check  saw: ...; need: ...; fix: ...`), so a user reads one vocabulary
//! whichever tool printed it; the script checks the rest of the machine (conntrack,
//! TIME_WAIT, IRQs, NUMA, the clock). Where the binary knows more than the script, the
//! verdict follows the binary: a TCP plan beyond RLIMIT_NOFILE still runs when its
//! sockets fit several io_uring file tables per core (see [`super::check_plan`]).
//!
//! Everything here is a pure function of a [`Needs`] (what the plan asks for) and a
//! [`Host`] (what the machine offers, read once from files under a root directory, as
//! the script's `PREFLIGHT_ROOT`), so tests drive every path with fixture trees.

use super::walls::read_proc_u64;
use super::{RING_FILES_MIN, RINGS_PER_CORE_MAX};
use crate::engine::Transport;
use crate::limits::FD_MARGIN;
use crate::metrics::noise::HostNoise;
use crate::ports::{self, PortRange};
use crate::run_plan::RunPlan;
use crate::run_plan::parse_mem_available;
use crate::units::{list_cores, parse_core_list};
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// Kernel memory of one TCP socket beyond its buffers (struct tcp_sock, file, dentry,
/// ring bookkeeping), roughly; the script's `SOCK_OVERHEAD`.
pub const SOCKET_OVERHEAD_BYTES: u64 = 4096;
/// Widest `ip_local_port_range` the fix suggests (1024-65535): ports below 1024 are for
/// services.
const WIDE_PORTS: u64 = 64_512;
/// Histogram sets alive per worker: the one being filled, two handed back for reuse,
/// and the collector's pending copy of the interval.
const HISTOGRAM_SETS_PER_WORKER: u64 = 4;
/// Histograms in one set (`metrics::Histograms`).
const HISTOGRAMS_PER_SET: u64 = 6;
/// Generator memory per connection slot beyond its buffers: the connection table entry
/// and its in-flight FIFO header, the ready and flush queues.
const SLOT_BYTES: u64 = 256;
/// One request waiting in the backlog (index, intended and dispatch instants).
const BACKLOG_ENTRY_BYTES: u64 = 32;
/// One provided receive buffer of the multishot receive pool.
const RECV_CHUNK_BYTES: u64 = 4096;

/// A check's verdict: FAIL stops the plan, WARN and INFO do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Pass,
    Warn,
    Fail,
    Info,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Info => "INFO",
        })
    }
}

/// One check's line: what it saw, what the plan needs and the command that fixes it.
/// Serialises as the script's `{status, check, saw, need, fix}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub status: Status,
    pub check: &'static str,
    pub saw: String,
    pub need: String,
    pub fix: String,
    /// `host.noise`: the probe's figures ([`HostNoise`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise: Option<HostNoise>,
}

/// The script's line: `printf '%-5s %-19s saw: %s'`, then `; need: ...` and
/// `; fix: ...` when they are not empty.
impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<5} {:<19} saw: {}", self.status, self.check, self.saw)?;
        if !self.need.is_empty() {
            write!(f, "; need: {}", self.need)?;
        }
        if !self.fix.is_empty() {
            write!(f, "; fix: {}", self.fix)?;
        }
        Ok(())
    }
}

impl Check {
    fn new(status: Status, check: &'static str, saw: String, need: String, fix: String) -> Check {
        Check {
            status,
            check,
            saw,
            need,
            fix,
            noise: None,
        }
    }

    /// The script's `unreadable`: INFO, the path that could not be read.
    fn unreadable(check: &'static str, path: &Path) -> Check {
        Check::new(
            Status::Info,
            check,
            format!("cannot read {}", path.display()),
            String::new(),
            String::new(),
        )
    }
}

/// Every check name this module can print, in the order [`run_all`] prints them (a test
/// holds them to the names `scripts/preflight.sh` prints).
pub const CHECK_NAMES: [&str; 4] = ["fd.limit", "ports.range", "mem.tcp", "cores.online"];

/// What a plan asks of the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needs {
    /// Sockets on this host: the connections, twice over for the loopback baseline
    /// (its sink holds the other ends in this process).
    pub sockets: u64,
    pub connections: u64,
    /// TCP sockets live in io_uring file tables (one RLIMIT_NOFILE each); UDP sockets
    /// are ordinary descriptors.
    pub tcp: bool,
    /// The loopback baseline: the in-process sink's descriptors count too.
    pub baseline: bool,
    /// Worker cores, and the control core (collector, helpers).
    pub cores: Vec<usize>,
    pub control_core: usize,
    /// `--source-ip` addresses (0: the kernel chooses, one source).
    pub sources: usize,
    /// Destinations (0 counts as one).
    pub targets: usize,
    /// The generator's own memory for the plan (buffers, tables, histograms), bytes.
    pub generator_bytes: u64,
}

impl Needs {
    /// The needs of a validated plan.
    pub fn of(plan: &RunPlan) -> Needs {
        let baseline = plan.target.is_none();
        let conns = plan.connections as u64;
        Needs {
            sockets: if baseline { conns * 2 } else { conns },
            connections: conns,
            tcp: plan.transport == Transport::Tcp,
            baseline,
            cores: plan.cores.clone(),
            control_core: plan.control_core,
            sources: plan.sources.len(),
            targets: plan.targets.len().max(1),
            generator_bytes: generator_estimate(plan),
        }
    }
}

/// What the machine offers, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Where the files were read (`/` in production), for "cannot read" lines.
    pub root: PathBuf,
    /// RLIMIT_NOFILE, soft and hard.
    pub fd_soft: u64,
    pub fd_hard: u64,
    /// `fs.nr_open`: no RLIMIT_NOFILE may exceed it.
    pub nr_open: Option<u64>,
    pub port_range: Option<PortRange>,
    /// `net.ipv4.tcp_rmem` and `tcp_wmem`: min, default, max, bytes.
    pub tcp_rmem: Option<[u64; 3]>,
    pub tcp_wmem: Option<[u64; 3]>,
    /// `MemAvailable` of /proc/meminfo, bytes.
    pub mem_available: Option<u64>,
    /// `/sys/devices/system/cpu/online`, e.g. `0-3,6`.
    pub cpus_online: Option<String>,
}

impl Host {
    /// Reads every value under `root` (`/` in production, a fixture tree in tests);
    /// the descriptor limits are the caller's (getrlimit, or a test's numbers).
    pub fn read(root: &Path, fd_soft: u64, fd_hard: u64) -> Host {
        let text = |rel: &str| std::fs::read_to_string(root.join(rel)).ok();
        Host {
            root: root.to_path_buf(),
            fd_soft,
            fd_hard,
            nr_open: read_proc_u64(root, "proc/sys/fs/nr_open"),
            port_range: ports::read_port_range(root).ok(),
            tcp_rmem: text("proc/sys/net/ipv4/tcp_rmem").and_then(|t| parse_triple(&t)),
            tcp_wmem: text("proc/sys/net/ipv4/tcp_wmem").and_then(|t| parse_triple(&t)),
            mem_available: text("proc/meminfo").and_then(|t| parse_mem_available(&t)),
            cpus_online: text("sys/devices/system/cpu/online")
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()),
        }
    }

    /// The running machine: files under `/` (or under `$PREFLIGHT_ROOT`, as for
    /// `scripts/preflight.sh`, so tests can drive the binary with a fixture tree), this
    /// process's RLIMIT_NOFILE.
    pub fn this_machine() -> Host {
        use nix::sys::resource::{Resource, getrlimit};
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((0, 0));
        let root = std::env::var_os("PREFLIGHT_ROOT")
            .filter(|r| !r.is_empty())
            .map_or_else(|| PathBuf::from("/"), PathBuf::from);
        Host::read(&root, soft, hard)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
}

/// Three white-space separated numbers (`4096 131072 6291456`).
fn parse_triple(text: &str) -> Option<[u64; 3]> {
    let mut it = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    let v = [it.next()??, it.next()??, it.next()??];
    it.next().is_none().then_some(v)
}

/// The script's `human`: `512 B`, `1.5 GiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// Every check, in the order of [`CHECK_NAMES`].
pub fn run_all(needs: &Needs, host: &Host) -> Vec<Check> {
    vec![
        fd_limit(needs, host),
        ports_range(needs, host),
        mem_tcp(needs, host),
        cores_online(needs, host),
    ]
}

/// `host.noise`: the host's timer lateness, steal and other load on the run's cores,
/// measured for about a second ([`crate::metrics::noise`]), against the `--max-lag`
/// gate: WARN when even an idle generator could not hold it here (every step of a run
/// would be invalid), with the cause and the remedy.
pub fn host_noise(noise: HostNoise, gate_ns: u64) -> Check {
    let status = if noise.holds(gate_ns) {
        Status::Pass
    } else {
        Status::Warn
    };
    let mut c = Check::new(
        status,
        "host.noise",
        noise.summary(gate_ns),
        format!(
            "timer late p99 under {} (80% of --max-lag)",
            crate::units::fmt_ns(gate_ns * 4 / 5)
        ),
        noise.remedy(gate_ns).unwrap_or_default(),
    );
    c.noise = Some(noise);
    c
}

/// The memory and cores checks `blaster run` adds before connecting (descriptors and
/// ports are [`super::check_plan`]'s; the plan sizes the rings).
pub fn run_time(needs: &Needs, host: &Host) -> Vec<Check> {
    vec![mem_tcp(needs, host), cores_online(needs, host)]
}

/// `fd.limit`: the descriptors the plan needs against RLIMIT_NOFILE. TCP sockets (with
/// a target) live in io_uring file tables of up to the limit each, so the plan fits
/// when each core's share fits at most [`RINGS_PER_CORE_MAX`] tables of at least
/// [`RING_FILES_MIN`]; UDP sockets and the baseline's sink hold real descriptors, so
/// there the hard limit must cover them all.
pub fn fd_limit(n: &Needs, h: &Host) -> Check {
    let need_total = n.sockets + FD_MARGIN;
    let sockets = if n.baseline {
        format!(
            "{} sockets ({} connections, both ends on this host)",
            n.sockets, n.connections
        )
    } else {
        format!("{} connections", n.connections)
    };
    let mut need = format!("{need_total} ({sockets} + {FD_MARGIN} for the process)");
    let nr_open = h.nr_open.map_or("unknown".to_string(), |v| v.to_string());
    let mut saw = format!("RLIMIT_NOFILE soft {}, hard {}", h.fd_soft, h.fd_hard);
    let fix_for = |want: u64| {
        format!(
            "ulimit -Hn {want} && ulimit -Sn {want} (as root, in the shell that starts blaster; \
             to persist: '* hard nofile {want}' in /etc/security/limits.conf; \
             fs.nr_open={nr_open} is the ceiling)"
        )
    };
    // What the soft limit becomes: blaster raises it to the hard one (fs.nr_open caps).
    let ceiling = h.nr_open.map_or(h.fd_hard, |o| h.fd_hard.min(o));
    if n.tcp && !n.baseline && need_total > ceiling {
        let per_ring = ceiling.saturating_sub(FD_MARGIN);
        let per_core = n.connections.div_ceil(n.cores.len().max(1) as u64);
        let rings = per_core.div_ceil(per_ring.max(1));
        need = format!(
            "{need_total} ({sockets} + {FD_MARGIN}), or {per_core} per core in at most \
             {RINGS_PER_CORE_MAX} io_uring file tables of at least {RING_FILES_MIN} each"
        );
        if per_ring >= RING_FILES_MIN && rings <= RINGS_PER_CORE_MAX {
            saw.push_str(&format!(
                "; {per_core} connections per core fit {rings} rings of up to {per_ring} \
                 sockets each"
            ));
            return Check::new(Status::Pass, "fd.limit", saw, need, String::new());
        }
        saw.push_str(&format!(
            "; {per_core} connections per core would need {rings} rings of {per_ring}"
        ));
        return Check::new(Status::Fail, "fd.limit", saw, need, fix_for(need_total));
    }
    if need_total > ceiling {
        return Check::new(Status::Fail, "fd.limit", saw, need, fix_for(need_total));
    }
    if h.fd_soft < need_total {
        saw.push_str(" (blaster raises the soft limit to the hard one itself)");
    }
    Check::new(Status::Pass, "fd.limit", saw, need, String::new())
}

/// `ports.range`: connections on the busiest (source, destination) pair against
/// `ip_local_port_range`. A connected UDP socket holds its port for every
/// destination, so for UDP each source address is one pair.
pub fn ports_range(n: &Needs, h: &Host) -> Check {
    let Some(range) = h.port_range else {
        return Check::unreadable(
            "ports.range",
            &h.path("proc/sys/net/ipv4/ip_local_port_range"),
        );
    };
    let dests = if n.tcp { n.targets.max(1) } else { 1 };
    let srcs = n.sources.max(1);
    let conns = n.connections as usize;
    let budget = ports::check_budget(conns, srcs, dests, range);
    let pairs = srcs * dests;
    let per_pair = conns.div_ceil(pairs);
    let saw = format!(
        "ip_local_port_range {range} = {} ports per (source IP, destination); \
         {srcs} source IP(s) x {dests} destination(s)",
        range.size()
    );
    let need = format!("{per_pair} ports per pair ({conns} connections over {pairs} pair(s))");
    match budget {
        Ok(_) => Check::new(Status::Pass, "ports.range", saw, need, String::new()),
        Err(e) => {
            let wide = "sysctl -w net.ipv4.ip_local_port_range='1024 65535'";
            let fix = if per_pair as u64 <= WIDE_PORTS {
                format!(
                    "{wide}, or --source-ip with {} addresses, or {} destinations",
                    e.sources_needed, e.targets_needed
                )
            } else {
                let more = (conns as u64).div_ceil(WIDE_PORTS * dests as u64);
                format!(
                    "{wide} and --source-ip with {more} addresses (on the interface), or \
                     more destinations"
                )
            };
            Check::new(Status::Fail, "ports.range", saw, need, fix)
        }
    }
}

/// `mem.tcp`: socket buffers at the kernel's defaults (`tcp_rmem` + `tcp_wmem`) for
/// every socket on this host, plus the generator's own memory, against MemAvailable.
/// FAIL when even the minimums do not fit, WARN when full buffers would not.
pub fn mem_tcp(n: &Needs, h: &Host) -> Check {
    let Some(avail) = h.mem_available else {
        return Check::unreadable("mem.tcp", &h.path("proc/meminfo"));
    };
    let gen_bytes = n.generator_bytes;
    let own = format!(
        "blaster's own buffers and tables about {}",
        human(gen_bytes)
    );
    if !n.tcp {
        let saw = format!(
            "UDP sockets (tcp_rmem/tcp_wmem do not apply); {own}; MemAvailable {}",
            human(avail)
        );
        let need = format!("<= {}", human(avail));
        if gen_bytes > avail {
            return Check::new(
                Status::Fail,
                "mem.tcp",
                saw,
                need,
                "fewer connections or a lower rate on this machine (or add memory)".into(),
            );
        }
        return Check::new(Status::Pass, "mem.tcp", saw, need, String::new());
    }
    let (Some([rmin, rdef, rmax]), Some([wmin, wdef, wmax])) = (h.tcp_rmem, h.tcp_wmem) else {
        let missing = if h.tcp_rmem.is_none() {
            "proc/sys/net/ipv4/tcp_rmem"
        } else {
            "proc/sys/net/ipv4/tcp_wmem"
        };
        return Check::unreadable("mem.tcp", &h.path(missing));
    };
    let s = n.sockets;
    let per_def = rdef + wdef;
    let per_min = rmin + wmin + SOCKET_OVERHEAD_BYTES;
    let full = s.saturating_mul(per_def).saturating_add(gen_bytes);
    let floor = s.saturating_mul(per_min).saturating_add(gen_bytes);
    let saw = format!(
        "tcp_rmem default {rdef} + tcp_wmem default {wdef} = {} per socket x {s} = {} if \
         every buffer fills ({} at the minimums); {own}; MemAvailable {}",
        human(per_def),
        human(s.saturating_mul(per_def)),
        human(s.saturating_mul(per_min)),
        human(avail)
    );
    if floor > avail {
        let fit = avail.saturating_sub(gen_bytes) / per_min.max(1);
        return Check::new(
            Status::Fail,
            "mem.tcp",
            saw,
            format!("{} at least, <= MemAvailable", human(floor)),
            format!("fewer connections on this machine: at most about {fit} (or add memory)"),
        );
    }
    let need = format!("<= {} if every buffer fills", human(avail));
    if full > avail {
        let budget = avail.saturating_sub(gen_bytes) / 2 / s.max(1);
        let each = budget / 2 / 4096 * 4096;
        let fix = if each >= 4096 {
            format!(
                "sysctl -w net.ipv4.tcp_rmem='{rmin} {each} {rmax}' \
                 net.ipv4.tcp_wmem='{wmin} {each} {wmax}' (defaults that fit in half of \
                 MemAvailable), or --sockbuf {each}"
            )
        } else {
            format!(
                "fewer connections on this machine: at most {} with 4 KiB default buffers",
                avail / 2 / 8192
            )
        };
        return Check::new(Status::Warn, "mem.tcp", saw, need, fix);
    }
    Check::new(Status::Pass, "mem.tcp", saw, need, String::new())
}

/// `cores.online`: every worker core and the control core are online.
pub fn cores_online(n: &Needs, h: &Host) -> Check {
    let cpu = "sys/devices/system/cpu";
    let Some(online) = h.cpus_online.as_deref() else {
        return Check::unreadable("cores.online", &h.path(&format!("{cpu}/online")));
    };
    let Ok(on) = parse_core_list(online) else {
        return Check::unreadable("cores.online", &h.path(&format!("{cpu}/online")));
    };
    let mut wanted = n.cores.clone();
    if !wanted.contains(&n.control_core) {
        wanted.push(n.control_core);
    }
    let need = format!(
        "cores {} online (workers {}, control core {})",
        list_cores(&wanted),
        list_cores(&n.cores),
        n.control_core
    );
    let is_on = |c: &usize| on.iter().any(|r| r.contains(c));
    let missing: Vec<usize> = wanted.iter().copied().filter(|c| !is_on(c)).collect();
    if missing.is_empty() {
        return Check::new(
            Status::Pass,
            "cores.online",
            format!("online: {online}"),
            need,
            String::new(),
        );
    }
    let list: Vec<String> = missing.iter().map(usize::to_string).collect();
    Check::new(
        Status::Fail,
        "cores.online",
        format!(
            "cores {} are not online (online: {online})",
            list_cores(&missing)
        ),
        need,
        format!(
            "for c in {}; do echo 1 > {}/cpu$c/online; done (or choose --cores and \
             --control-core within {online})",
            list.join(" "),
            h.path(cpu).display()
        ),
    )
}

/// The generator's own memory for the plan, bytes: per worker its receive buffers and
/// provided-buffer pool, request staging, connection slots, backlog and histograms.
/// An estimate for the preflight (the report measures the real growth).
pub fn generator_estimate(plan: &RunPlan) -> u64 {
    let target = plan
        .target
        .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 9)));
    // The baseline's plan has no rate of its own: sized at its first step's.
    let stepped;
    let plan = match plan.rate_rps {
        Some(_) => plan,
        None => {
            stepped = plan.with_rate(plan.start_rate_rps);
            &stepped
        }
    };
    let histogram = histogram_bytes();
    plan.worker_plans(target)
        .iter()
        .map(|w| {
            let c = w.connections as u64;
            let pool = (c * 2).clamp(64, 4096).next_power_of_two() * RECV_CHUNK_BYTES;
            let recv = c * w.recv_buffer_bytes as u64;
            let staging = c * (w.requests.max_len() * w.pipeline) as u64;
            let slots = c * (SLOT_BYTES + 16 * w.pipeline as u64);
            let backlog = w.backlog_capacity as u64 * BACKLOG_ENTRY_BYTES;
            let hist = HISTOGRAM_SETS_PER_WORKER * HISTOGRAMS_PER_SET * histogram;
            pool + recv + staging + slots + backlog + hist
        })
        .sum::<u64>()
        .saturating_add(plan.frames.as_ref().map_or(0, |f| f.accounting_bytes()))
}

/// Bytes of one recording histogram (its counts array; bounds fixed in `limits`).
fn histogram_bytes() -> u64 {
    use crate::limits::{HISTOGRAM_NS_MAX, HISTOGRAM_SIGFIG};
    // The counts array: one sub-bucket run per power of two above the first bucket,
    // 2^ceil(log2(2 x 10^sigfig)) counts each, half of every further bucket new.
    let sub = (2 * 10u64.pow(u32::from(HISTOGRAM_SIGFIG))).next_power_of_two();
    let mut buckets = 1u64;
    let mut reach = sub;
    while reach < HISTOGRAM_NS_MAX {
        reach = reach.saturating_mul(2);
        buckets += 1;
    }
    (buckets + 1) * (sub / 2) * 8
}

/// The first FAIL of `checks`, as the one line `blaster run` refuses a plan with.
pub fn first_failure(checks: &[Check]) -> Option<&Check> {
    checks.iter().find(|c| c.status == Status::Fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A fixture root with the given files (relative path, content).
    fn root(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tempdir");
        for (rel, text) in files {
            let p = d.path().join(rel);
            fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            fs::write(p, text).expect("write");
        }
        d
    }

    fn machine() -> tempfile::TempDir {
        root(&[
            ("proc/sys/fs/nr_open", "1048576\n"),
            ("proc/sys/net/ipv4/ip_local_port_range", "32768\t60999\n"),
            ("proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n"),
            ("proc/sys/net/ipv4/tcp_wmem", "4096\t16384\t4194304\n"),
            (
                "proc/meminfo",
                "MemTotal:        8000000 kB\nMemFree:  100 kB\nMemAvailable:    4000000 kB\n",
            ),
            ("sys/devices/system/cpu/online", "0-3\n"),
        ])
    }

    fn needs(connections: u64) -> Needs {
        Needs {
            sockets: connections,
            connections,
            tcp: true,
            baseline: false,
            cores: vec![0, 1],
            control_core: 2,
            sources: 0,
            targets: 1,
            generator_bytes: 10 << 20,
        }
    }

    #[test]
    fn a_plan_that_fits_passes_every_check() {
        let d = machine();
        let h = Host::read(d.path(), 1024, 524_288);
        let checks = run_all(&needs(1000), &h);
        let names: Vec<&str> = checks.iter().map(|c| c.check).collect();
        assert_eq!(names, CHECK_NAMES);
        for c in &checks {
            assert_eq!(c.status, Status::Pass, "{c}");
        }
        assert!(
            checks[0].saw.contains("raises the soft limit"),
            "{}",
            checks[0]
        );
        assert_eq!(
            checks[3].to_string(),
            "PASS  cores.online        saw: online: 0-3; need: cores 0-2 online (workers 0-1, \
             control core 2)"
        );
    }

    #[test]
    fn too_many_connections_for_the_port_range_fail_with_the_fix() {
        let d = machine();
        let h = Host::read(d.path(), 1024, 524_288);
        let c = ports_range(&needs(30_000), &h);
        assert_eq!(c.status, Status::Fail);
        assert!(c.saw.contains("32768-60999 = 28232 ports"), "{c}");
        assert!(c.need.starts_with("30000 ports per pair"), "{c}");
        assert!(c.fix.contains("ip_local_port_range='1024 65535'"), "{c}");
        assert!(c.fix.contains("--source-ip with 2 addresses"), "{c}");
        let mut n = needs(30_000);
        n.sources = 2;
        assert_eq!(ports_range(&n, &h).status, Status::Pass);
        let beyond = ports_range(&needs(200_000), &h);
        assert!(
            beyond.fix.contains("--source-ip with 4 addresses"),
            "{beyond}"
        );
    }

    #[test]
    fn descriptors_fail_below_the_hard_limit_unless_rings_can_split_them() {
        let d = machine();
        // UDP: real descriptors, the hard limit must hold them all.
        let mut n = needs(5000);
        n.tcp = false;
        let c = fd_limit(&n, &Host::read(d.path(), 1024, 4096));
        assert_eq!(c.status, Status::Fail, "{c}");
        assert!(
            c.fix.starts_with("ulimit -Hn 5064 && ulimit -Sn 5064"),
            "{c}"
        );
        assert!(c.fix.contains("fs.nr_open=1048576"), "{c}");
        // TCP: 5000 over 2 cores fit one 4032-socket ring each.
        let c = fd_limit(&needs(5000), &Host::read(d.path(), 1024, 4096));
        assert_eq!(c.status, Status::Pass, "{c}");
        assert!(c.saw.contains("fit 1 rings"), "{c}");
        // TCP with a limit lowered below one ring's minimum.
        let c = fd_limit(&needs(5000), &Host::read(d.path(), 512, 1000));
        assert_eq!(c.status, Status::Fail, "{c}");
        // The baseline counts both ends.
        let mut b = needs(3000);
        b.baseline = true;
        b.sockets = 6000;
        let c = fd_limit(&b, &Host::read(d.path(), 1024, 4096));
        assert_eq!(c.status, Status::Fail, "{c}");
        assert!(c.need.starts_with("6064 (6000 sockets"), "{c}");
    }

    #[test]
    fn memory_warns_when_full_buffers_exceed_and_fails_when_minimums_do() {
        let d = root(&[
            ("proc/sys/net/ipv4/tcp_rmem", "4096 131072 6291456"),
            ("proc/sys/net/ipv4/tcp_wmem", "4096 16384 4194304"),
            ("proc/meminfo", "MemAvailable:    1048576 kB\n"),
        ]);
        let h = Host::read(d.path(), 1024, 1 << 20);
        // 1 GiB: 10,000 x 144 KiB = 1.4 GiB at the defaults, 117 MiB at the minimums.
        let c = mem_tcp(&needs(10_000), &h);
        assert_eq!(c.status, Status::Warn, "{c}");
        assert!(c.fix.contains("net.ipv4.tcp_rmem='4096 "), "{c}");
        assert!(c.saw.contains("blaster's own buffers"), "{c}");
        let c = mem_tcp(&needs(100_000), &h);
        assert_eq!(c.status, Status::Fail, "{c}");
        assert!(c.fix.starts_with("fewer connections"), "{c}");
        assert_eq!(mem_tcp(&needs(1000), &h).status, Status::Pass);
        // The generator's own memory alone can exceed it.
        let mut n = needs(10);
        n.generator_bytes = 2 << 30;
        assert_eq!(mem_tcp(&n, &h).status, Status::Fail);
    }

    #[test]
    fn offline_cores_fail_and_unreadable_files_are_info() {
        let d = root(&[("sys/devices/system/cpu/online", "0,2-3\n")]);
        let h = Host::read(d.path(), 1024, 4096);
        let c = cores_online(&needs(10), &h);
        assert_eq!(c.status, Status::Fail, "{c}");
        assert!(c.saw.starts_with("cores 1 are not online"), "{c}");
        assert!(c.fix.starts_with("for c in 1; do echo 1 > "), "{c}");
        let c = mem_tcp(&needs(10), &h);
        assert_eq!(c.status, Status::Info);
        assert!(c.saw.starts_with("cannot read ") && c.saw.ends_with("proc/meminfo"));
        assert_eq!(ports_range(&needs(10), &h).status, Status::Info);
    }

    #[test]
    fn json_is_the_scripts_shape() {
        let c = Check::new(
            Status::Warn,
            "mem.tcp",
            "a".into(),
            "b".into(),
            String::new(),
        );
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"status": "WARN", "check": "mem.tcp", "saw": "a", "need": "b", "fix": ""})
        );
    }

    #[test]
    fn helpers_parse_and_format() {
        assert_eq!(parse_triple("1 2 3\n"), Some([1, 2, 3]));
        assert_eq!(parse_triple("1 2"), None);
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 29), "1.5 GiB");
        // A histogram with bounds 1 ns..1 h at 3 digits: its real counts array.
        let real = hdrhistogram::Histogram::<u64>::new_with_bounds(
            1,
            crate::limits::HISTOGRAM_NS_MAX,
            crate::limits::HISTOGRAM_SIGFIG,
        )
        .unwrap()
        .distinct_values() as u64
            * 8;
        let est = histogram_bytes();
        assert!(
            est >= real && est <= real * 2,
            "estimate {est}, real {real}"
        );
    }
}
