//! What the host saw while the generator ran: the load of each generator core as
//! /proc/stat counts it, and the traffic of the interface that carries the run (bytes,
//! packets, drops from /sys/class/net/IF/statistics) against its link speed. Sampled by
//! the collector once per interval; parsing is pure so tests feed it fixture text.
//! Each sample also reads the kernel's drop counters ([`super::kernel`]) and keeps
//! their growth over the interval.

use super::kernel::{self, KernelCounters, KernelSample};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// A core above this busy share is "near saturation" (the design's CPU watermark).
pub const CORE_BUSY_WATERMARK: f64 = 0.65;
/// Other processes taking more than this share of a generator core is a warning: the
/// generator did not have its core to itself.
pub const OTHER_LOAD_WARN: f64 = 0.25;
/// A link above this share of its speed is saturated.
pub const LINK_SATURATED: f64 = 0.90;
/// The hypervisor taking more than this share of a generator core (steal) is a
/// warning: 20 ms a second, twenty times a 1 ms lag gate, during which the generator
/// neither sent nor read.
pub const STEAL_WARN: f64 = 0.02;

/// One `cpuN` line of /proc/stat, in jiffies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreJiffies {
    pub core: usize,
    /// Run by this machine: user, nice, system, irq, softirq.
    pub busy: u64,
    /// Taken by the hypervisor for something else (a VM's vCPU not running).
    pub steal: u64,
    /// All of it: busy, idle, iowait and steal.
    pub total: u64,
}

/// Each `cpuN` line of /proc/stat.
pub fn cpu_jiffies(stat: &str) -> Vec<CoreJiffies> {
    stat.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let core = it.next()?.strip_prefix("cpu")?.parse::<usize>().ok()?;
            let v: Vec<u64> = it.filter_map(|x| x.parse().ok()).collect();
            let at = |i: usize| v.get(i).copied().unwrap_or(0);
            // user nice system idle iowait irq softirq steal ...
            let total: u64 = v.iter().take(8).sum();
            let (idle, steal) = (at(3) + at(4), at(7));
            Some(CoreJiffies {
                core,
                busy: total.saturating_sub(idle + steal),
                steal,
                total,
            })
        })
        .collect()
}

/// Resident set size of this process in bytes (`/proc/self/statm`'s resident pages
/// times the page size), or `None` where that file is missing or unreadable.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    rss_of_statm(&statm, page_bytes()?)
}

fn page_bytes() -> Option<u64> {
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE).ok()??;
    u64::try_from(page).ok()
}

/// The resident pages (second field) of a statm line, in bytes.
fn rss_of_statm(statm: &str, page_bytes: u64) -> Option<u64> {
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    pages.checked_mul(page_bytes)
}

/// The `dev` of `ip route get` output (`10.0.0.2 dev veth0 src 10.0.0.1 ...`).
pub fn route_dev(ip_route_get: &str) -> Option<String> {
    let mut it = ip_route_get.split_whitespace();
    while let Some(w) = it.next() {
        if w == "dev" {
            return it.next().map(str::to_string);
        }
    }
    None
}

/// The interface traffic to `target` leaves by: `lo` for loopback, else what
/// `ip route get` says (`None` if it cannot tell).
pub fn iface_for(target: IpAddr) -> Option<String> {
    if target.is_loopback() {
        return Some("lo".to_string());
    }
    let out = std::process::Command::new("ip")
        .args(["route", "get", &target.to_string()])
        .output()
        .ok()?;
    route_dev(&String::from_utf8_lossy(&out.stdout))
}

/// Counters of one interface.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetCounters {
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub rx_packets: u64,
    pub drops: u64,
}

/// Reads `<root>/sys/class/net/<iface>/statistics/*`.
pub fn read_net(root: &Path, iface: &str) -> Option<NetCounters> {
    let dir: PathBuf = root.join("sys/class/net").join(iface).join("statistics");
    let get = |f: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some(NetCounters {
        tx_bytes: get("tx_bytes")?,
        rx_bytes: get("rx_bytes")?,
        tx_packets: get("tx_packets")?,
        rx_packets: get("rx_packets")?,
        drops: get("tx_dropped").unwrap_or(0) + get("rx_dropped").unwrap_or(0),
    })
}

/// The link speed sysfs reports, bits/s (`None` for loopback and virtual links that
/// report none).
pub fn read_link_speed(root: &Path, iface: &str) -> Option<u64> {
    let mbit: i64 = std::fs::read_to_string(root.join("sys/class/net").join(iface).join("speed"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    // -1 means "unknown"; it must not reach the multiply (it overflowed as u64).
    u64::try_from(mbit)
        .ok()
        .filter(|&m| m > 0)
        .and_then(|m| m.checked_mul(1_000_000))
}

/// One interval as the host saw it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostInterval {
    /// (core, busy share per /proc/stat) for each generator core.
    pub core_busy: Vec<(usize, f64)>,
    /// (core, share the hypervisor stole) for each generator core.
    pub core_steal: Vec<(usize, f64)>,
    /// (core, share of it this process's threads other than the workers used: io-wq
    /// helpers, an in-process sink, the collector) for each generator core: the
    /// generator's own load, not another process's ([`helper_ticks_per_core`]).
    pub core_helpers: Vec<(usize, f64)>,
    pub tx_bps: f64,
    pub rx_bps: f64,
    pub tx_pps: f64,
    pub rx_pps: f64,
    pub drops: u64,
    /// How much each kernel drop counter grew over the interval (`None`: not
    /// available on this host).
    pub kernel: KernelCounters,
    /// `(nf_conntrack_count, nf_conntrack_max)` at the interval's end, when conntrack
    /// is loaded.
    pub conntrack: Option<(u64, u64)>,
}

/// Samples /proc/stat and the interface counters; each sample covers the time since the
/// previous one.
pub struct HostSampler {
    root: PathBuf,
    cores: Vec<usize>,
    pub iface: Option<String>,
    cpu: Vec<CoreJiffies>,
    /// This process's threads at the previous sample: (tid, CPU ticks, last CPU).
    tasks: Vec<TaskTicks>,
    net: Option<NetCounters>,
    /// The kernel's counters at the previous sample.
    kernel: KernelSample,
    at: std::time::Instant,
    last: HostInterval,
}

/// One thread of this process at a sample: its tid, whether it is a helper (not a
/// worker), its CPU time in clock ticks and the CPU it last ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskTicks {
    pub tid: u32,
    pub helper: bool,
    pub ticks: u64,
    pub cpu: usize,
}

/// Whether a thread, by name, is one of the generator's helpers rather than a worker:
/// the workers measure their own CPU (taken off the core's load already); every other
/// thread of the process is the generator's too -- io-wq helpers (`iou-wrk-*`)
/// running the workers' operations, an in-process sink (`blaster-sink*`), the
/// collector -- and none of it is another process's load.
pub fn is_helper(name: &str) -> bool {
    !name.starts_with(crate::threads::WORKER_PREFIX)
}

/// Reads every thread under `task_dir` (`/proc/self/task`); threads that exit while
/// being read are skipped.
pub fn read_tasks(task_dir: &Path) -> Vec<TaskTicks> {
    let Ok(entries) = std::fs::read_dir(task_dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let (name, ticks) = crate::threads::parse_stat_name_ticks(&stat)?;
            Some(TaskTicks {
                tid,
                helper: is_helper(name),
                ticks,
                cpu: crate::threads::parse_stat_cpu(&stat)?,
            })
        })
        .collect()
}

/// Clock ticks the helper threads used between two samples, per CPU they last ran
/// on: (core, ticks), by core. A thread born in between counts from zero; one that
/// exited in between is not seen (at most its last interval is lost).
pub fn helper_ticks_per_core(then: &[TaskTicks], now: &[TaskTicks]) -> Vec<(usize, u64)> {
    let mut per_core: std::collections::BTreeMap<usize, u64> = Default::default();
    for t in now.iter().filter(|t| t.helper) {
        let before = then.iter().find(|b| b.tid == t.tid).map_or(0, |b| b.ticks);
        *per_core.entry(t.cpu).or_default() += t.ticks.saturating_sub(before);
    }
    per_core.into_iter().filter(|&(_, n)| n > 0).collect()
}

impl HostSampler {
    pub fn new(cores: &[usize], iface: Option<String>) -> HostSampler {
        let root = PathBuf::from("/");
        let mut s = HostSampler {
            root,
            cores: cores.to_vec(),
            iface,
            cpu: Vec::new(),
            tasks: Vec::new(),
            net: None,
            kernel: KernelSample::default(),
            at: std::time::Instant::now(),
            last: HostInterval::default(),
        };
        s.at -= std::time::Duration::from_millis(200);
        s.sample();
        s
    }

    /// The kernel counters' growth for a second nobody sampled: 0 for each counter
    /// this host exposes (its growth is counted by the next sample), `None` for the
    /// rest.
    pub fn kernel_unsampled(&self) -> KernelCounters {
        self.kernel.counters.zeroed()
    }

    /// The interval since the previous sample. A sample less than 100 ms after the
    /// previous one (rows completed together after a stalled worker) repeats it: too
    /// short a window has no /proc/stat ticks and turns a few packets into Gbit/s.
    pub fn sample(&mut self) -> HostInterval {
        let now = std::time::Instant::now();
        if now.duration_since(self.at) < std::time::Duration::from_millis(100) {
            // The kernel counters' growth is left for the next sample to count: a
            // repeated interval must not count it twice.
            let mut repeat = self.last.clone();
            repeat.kernel = repeat.kernel.zeroed();
            return repeat;
        }
        let secs = now.duration_since(self.at).as_secs_f64().max(1e-6);
        self.at = now;
        let cpu = std::fs::read_to_string(self.root.join("proc/stat"))
            .map(|s| cpu_jiffies(&s))
            .unwrap_or_default();
        let shares = |part: fn(&CoreJiffies) -> u64| -> Vec<(usize, f64)> {
            self.cores
                .iter()
                .filter_map(|&c| {
                    let now = cpu.iter().find(|x| x.core == c)?;
                    let then = self.cpu.iter().find(|x| x.core == c)?;
                    let dt = now.total.saturating_sub(then.total);
                    let d = part(now).saturating_sub(part(then));
                    (dt > 0).then(|| (c, d as f64 / dt as f64))
                })
                .collect()
        };
        let core_busy = shares(|j| j.busy);
        let core_steal = shares(|j| j.steal);
        let tasks = read_tasks(&self.root.join("proc/self/task"));
        let helpers = helper_ticks_per_core(&self.tasks, &tasks);
        let core_helpers = self
            .cores
            .iter()
            .filter_map(|&c| {
                let ticks = helpers.iter().find(|h| h.0 == c)?.1;
                let now = cpu.iter().find(|x| x.core == c)?;
                let then = self.cpu.iter().find(|x| x.core == c)?;
                let dt = now.total.saturating_sub(then.total);
                (dt > 0).then(|| (c, (ticks as f64 / dt as f64).min(1.0)))
            })
            .collect();
        self.tasks = tasks;
        self.cpu = cpu;
        let net = self.iface.as_deref().and_then(|i| read_net(&self.root, i));
        let mut out = HostInterval {
            core_busy,
            core_steal,
            core_helpers,
            ..HostInterval::default()
        };
        if let (Some(n1), Some(n0)) = (net, self.net) {
            out.tx_bps = n1.tx_bytes.saturating_sub(n0.tx_bytes) as f64 * 8.0 / secs;
            out.rx_bps = n1.rx_bytes.saturating_sub(n0.rx_bytes) as f64 * 8.0 / secs;
            out.tx_pps = n1.tx_packets.saturating_sub(n0.tx_packets) as f64 / secs;
            out.rx_pps = n1.rx_packets.saturating_sub(n0.rx_packets) as f64 / secs;
            out.drops = n1.drops.saturating_sub(n0.drops);
        }
        self.net = net;
        let kernel = kernel::read(&self.root, self.iface.as_deref());
        out.kernel = kernel.counters.since(self.kernel.counters);
        out.conntrack = kernel.conntrack;
        self.kernel = kernel;
        self.last = out.clone();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread as [`read_tasks`] would see it, named `name`.
    fn task(tid: u32, name: &str, ticks: u64, cpu: usize) -> TaskTicks {
        TaskTicks {
            tid,
            helper: is_helper(name),
            ticks,
            cpu,
        }
    }

    /// Issue 22, part 8: work the generator pushes into io-wq, or an in-process sink,
    /// is the generator's load, so it can never pass for another process's (which
    /// makes a timing test's failure look like noise). The workers' own CPU is taken
    /// off elsewhere and must not be counted twice.
    #[test]
    fn helper_threads_are_counted_per_core_and_workers_are_not() {
        assert!(is_helper("iou-wrk-4242"));
        assert!(is_helper("blaster-sink-1-0"));
        assert!(is_helper("blaster"));
        assert!(!is_helper("blaster-w0"));
        let then = [
            task(10, "blaster", 50, 1),
            task(11, "blaster-w0", 100, 0),
            task(12, "iou-wrk-11", 7, 0),
            task(13, "blaster-sink-1-0", 20, 1),
            task(14, "iou-wrk-11", 3, 0), // exits before the next sample
        ];
        let now = [
            task(10, "blaster", 52, 1),
            task(11, "blaster-w0", 190, 0),
            task(12, "iou-wrk-11", 37, 0),
            task(13, "blaster-sink-1-0", 60, 1),
            task(15, "iou-wrk-11", 5, 0), // born in between: all of it counts
        ];
        assert_eq!(helper_ticks_per_core(&then, &now), vec![(0, 35), (1, 42)]);
        // Nothing moved: no entry rather than zeros.
        assert_eq!(helper_ticks_per_core(&now, &now), vec![]);
    }

    #[test]
    fn this_process_reads_as_tasks_with_its_own_thread_a_helper() {
        let tasks = read_tasks(Path::new("/proc/self/task"));
        assert!(!tasks.is_empty());
        // The test harness's threads are not named blaster-w*: all helpers.
        assert!(tasks.iter().all(|t| t.helper), "{tasks:?}");
    }

    #[test]
    fn rss_is_resident_pages_times_page_size() {
        assert_eq!(
            rss_of_statm("1000 250 40 5 0 300 0\n", 4096),
            Some(1_024_000)
        );
        assert_eq!(rss_of_statm("1000", 4096), None);
        assert_eq!(rss_of_statm("1000 x", 4096), None);
        let rss = rss_bytes().expect("Linux has /proc/self/statm");
        // A test binary is at least a megabyte resident and well under a terabyte.
        assert!((1 << 20..1 << 40).contains(&rss), "{rss}");
    }

    #[test]
    fn proc_stat_lines_give_busy_steal_and_total() {
        let stat = "cpu  10 0 10 80 0 0 0 0 0 0\n\
                    cpu0 5 0 5 40 0 0 0 0 0 0\n\
                    cpu1 5 1 4 30 10 2 1 7 0 0\n\
                    intr 1 2 3\n";
        let j = |core, busy, steal, total| CoreJiffies {
            core,
            busy,
            steal,
            total,
        };
        // Steal is neither this machine's work nor idle time.
        assert_eq!(cpu_jiffies(stat), vec![j(0, 10, 0, 50), j(1, 13, 7, 60)]);
    }

    #[test]
    fn route_dev_is_found() {
        let out = "10.200.0.2 dev veth-g src 10.200.0.1 uid 0 \n    cache \n";
        assert_eq!(route_dev(out).as_deref(), Some("veth-g"));
        assert_eq!(route_dev("unreachable"), None);
        assert_eq!(
            iface_for("127.0.0.1".parse().unwrap()).as_deref(),
            Some("lo")
        );
    }

    #[test]
    fn interface_counters_and_speed_come_from_sysfs() {
        let d = tempfile::tempdir().unwrap();
        let stats = d.path().join("sys/class/net/eth9/statistics");
        std::fs::create_dir_all(&stats).unwrap();
        for (f, v) in [
            ("tx_bytes", "1000"),
            ("rx_bytes", "2000"),
            ("tx_packets", "10"),
            ("rx_packets", "20"),
            ("tx_dropped", "3"),
            ("rx_dropped", "4"),
        ] {
            std::fs::write(stats.join(f), v).unwrap();
        }
        std::fs::write(d.path().join("sys/class/net/eth9/speed"), "25000\n").unwrap();
        let n = read_net(d.path(), "eth9").unwrap();
        assert_eq!((n.tx_bytes, n.rx_packets, n.drops), (1000, 20, 7));
        assert_eq!(read_link_speed(d.path(), "eth9"), Some(25_000_000_000));
        std::fs::write(d.path().join("sys/class/net/eth9/speed"), "-1\n").unwrap();
        assert_eq!(read_link_speed(d.path(), "eth9"), None);
        assert_eq!(read_net(d.path(), "nope"), None);
    }
}
