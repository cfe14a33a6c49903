//! scripts/preflight.sh against fixture trees: each test builds a healthy machine
//! under a tempdir (`PREFLIGHT_ROOT`), breaks one thing, and checks the status of that
//! check, the fix it prints and the exit code. The commands that cannot read a root
//! (`ulimit`, `ip route get`, `ethtool -l`) are replaced through the script's
//! environment overrides; the stand-ins for `ip` and `ethtool` live in
//! tests/fixtures/preflight/bin. scripts/tune.sh is run for real, inside a throwaway
//! network namespace.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::skip;
use std::path::{Path, PathBuf};
use std::process::Command;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/preflight.sh");
const TUNE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/tune.sh");
const PROFILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sysctl/blaster.conf");
const FAKES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/preflight/bin");

/// A fake machine: 4 online cores (0-3, no SMT, node 0, performance governor), an
/// invariant TSC, eth0 with 4 queues whose IRQs 24-27 are pinned one per core, loaded
/// conntrack, 8 GiB available, no irqbalance; every limit wide enough for 100
/// connections.
struct Machine {
    dir: tempfile::TempDir,
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Machine {
    fn healthy() -> Machine {
        let m = Machine {
            dir: tempfile::tempdir().unwrap(),
        };
        for (path, value) in [
            ("proc/sys/kernel/osrelease", "6.8.0-41-generic\n"),
            ("proc/sys/kernel/io_uring_disabled", "0\n"),
            ("proc/sys/fs/nr_open", "1048576\n"),
            ("proc/sys/fs/file-max", "9223372036854775807\n"),
            ("proc/sys/fs/file-nr", "1024\t0\t9223372036854775807\n"),
            ("proc/sys/net/ipv4/ip_local_port_range", "32768\t60999\n"),
            ("proc/sys/net/ipv4/tcp_tw_reuse", "1\n"),
            ("proc/sys/net/ipv4/tcp_fin_timeout", "15\n"),
            ("proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n"),
            ("proc/sys/net/ipv4/tcp_wmem", "4096\t16384\t4194304\n"),
            ("proc/sys/net/ipv4/tcp_mem", "88053\t117405\t176106\n"),
            ("proc/sys/net/ipv4/tcp_max_syn_backlog", "4096\n"),
            ("proc/sys/net/core/somaxconn", "4096\n"),
            ("proc/sys/net/core/rmem_max", "4194304\n"),
            ("proc/sys/net/core/wmem_max", "4194304\n"),
            ("proc/sys/net/netfilter/nf_conntrack_max", "262144\n"),
            ("proc/sys/net/netfilter/nf_conntrack_count", "12\n"),
            ("proc/sys/net/netfilter/nf_conntrack_buckets", "65536\n"),
            (
                "proc/sys/net/netfilter/nf_conntrack_tcp_timeout_time_wait",
                "120\n",
            ),
            (
                "proc/meminfo",
                "MemTotal:       16000000 kB\nMemFree:         9000000 kB\nMemAvailable:    8388608 kB\n",
            ),
            (
                "proc/cmdline",
                "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet\n",
            ),
            ("proc/1/comm", "systemd\n"),
            ("proc/2/comm", "kthreadd\n"),
            ("sys/devices/system/cpu/online", "0-3\n"),
            ("sys/devices/system/node/node0/cpulist", "0-3\n"),
            ("sys/devices/system/node/node1/cpulist", "4-7\n"),
            (
                "sys/devices/system/clocksource/clocksource0/current_clocksource",
                "tsc\n",
            ),
            (
                "sys/devices/system/clocksource/clocksource0/available_clocksource",
                "tsc hpet acpi_pm \n",
            ),
            ("sys/class/net/eth0/device/numa_node", "0\n"),
            ("sys/class/net/eth0/speed", "25000\n"),
            ("sys/class/net/eth0/operstate", "up\n"),
            ("sys/class/net/lo/operstate", "unknown\n"),
        ] {
            m.set(path, value);
        }
        let mut cpuinfo = String::new();
        let mut interrupts = String::from(
            "            CPU0       CPU1       CPU2       CPU3\n   0:         9          0          0          0   IO-APIC   2-edge      timer\n",
        );
        for c in 0..4 {
            cpuinfo += &format!(
                "processor\t: {c}\nflags\t\t: fpu tsc msr constant_tsc nonstop_tsc rep_good\n\n"
            );
            let cpu = format!("sys/devices/system/cpu/cpu{c}");
            m.set(
                &format!("{cpu}/topology/thread_siblings_list"),
                &format!("{c}\n"),
            );
            m.set(&format!("{cpu}/cpufreq/scaling_governor"), "performance\n");
            m.set(&format!("{cpu}/node0/cpulist"), "0-3\n");
            m.set(&format!("sys/class/net/eth0/queues/rx-{c}/rps_cpus"), "0\n");
            m.set(
                &format!("proc/irq/{}/smp_affinity_list", 24 + c),
                &format!("{c}\n"),
            );
            interrupts += &format!(
                "  {}:      100        0        0        0  PCI-MSI 524288{c}-edge      eth0-TxRx-{c}\n",
                24 + c
            );
        }
        interrupts += "  28:        1        0        0        0  PCI-MSI 5242884-edge      eth0\n";
        m.set("proc/irq/28/smp_affinity_list", "0\n");
        m.set("proc/cpuinfo", &cpuinfo);
        m.set("proc/interrupts", &interrupts);
        m
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn set(&self, p: &str, v: &str) -> &Self {
        let f = self.path(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, v).unwrap();
        self
    }

    fn remove(&self, p: &str) -> &Self {
        let f = self.path(p);
        if f.is_dir() {
            std::fs::remove_dir_all(f).unwrap();
        } else {
            std::fs::remove_file(f).unwrap();
        }
        self
    }

    fn run(&self, args: &[&str]) -> Out {
        self.run_env(args, &[])
    }

    /// Runs the script with the fakes in place: RLIMIT_NOFILE 1024/1048576, a route to
    /// any address through eth0, no `ethtool -l` support, 4 KiB pages.
    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Out {
        let mut cmd = Command::new("bash");
        cmd.arg(SCRIPT)
            .args(args)
            .env("PREFLIGHT_ROOT", self.dir.path())
            .env("PREFLIGHT_ULIMIT_SOFT", "1024")
            .env("PREFLIGHT_ULIMIT_HARD", "1048576")
            .env("PREFLIGHT_IP", format!("{FAKES}/ip"))
            .env("PREFLIGHT_ETHTOOL", format!("{FAKES}/ethtool"))
            .env("PREFLIGHT_PAGE_SIZE", "4096")
            .env("FAKE_ROUTE_DEV", "eth0")
            .env_remove("FAKE_COMBINED")
            .env_remove("FAKE_COMBINED_MAX");
        for (k, v) in env {
            cmd.env(k, v);
        }
        run(cmd)
    }
}

fn run(mut cmd: Command) -> Out {
    let out = cmd.output().unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

impl Out {
    /// The line of `check` (its second column), or a panic that shows the output.
    fn line(&self, check: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(check))
            .unwrap_or_else(|| panic!("no {check} line in\n{}{}", self.stdout, self.stderr))
    }

    fn status(&self, check: &str) -> &str {
        self.line(check).split_whitespace().next().unwrap()
    }

    /// Asserts `check` has `status` and its line contains every needle.
    fn expect(&self, check: &str, status: &str, needles: &[&str]) {
        let line = self.line(check);
        assert_eq!(self.status(check), status, "{line}");
        for n in needles {
            assert!(line.contains(n), "{n:?} missing in: {line}");
        }
    }

    fn fix(&self, check: &str) -> &str {
        let line = self.line(check);
        line.split_once("; fix: ")
            .unwrap_or_else(|| panic!("no fix in: {line}"))
            .1
    }
}

const PLAN: &[&str] = &[
    "--connections",
    "100",
    "--cores",
    "0-3",
    "--targets",
    "10.0.0.5:9000",
];

fn plan_with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = PLAN.to_vec();
    v.extend_from_slice(extra);
    v
}

#[test]
fn passes_a_plan_that_fits() {
    let m = Machine::healthy();
    let out = m.run(&plan_with(&["--short-connections", "--rate", "100"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    // Every check ran and passed (an empty output would not do).
    for check in [
        "io_uring.kernel",
        "io_uring.disabled",
        "io_uring.memlock",
        "fd.limit",
        "fd.nr_open",
        "fd.file_max",
        "ports.range",
        "ports.time_wait",
        "ports.tw_reuse",
        "ports.fin_timeout",
        "conntrack.table",
        "conntrack.hashsize",
        "mem.tcp",
        "mem.tcp_mem",
        "cores.online",
        "cores.smt",
        "cores.governor",
        "clock.tsc",
        "clock.source",
        "nic.iface",
        "nic.irq_affinity",
        "nic.irqbalance",
        "nic.rss_queues",
        "nic.numa",
        "nic.speed",
        "net.somaxconn",
        "net.syn_backlog",
        "net.rmem_max",
        "net.wmem_max",
    ] {
        assert_eq!(out.status(check), "PASS", "{}", out.line(check));
        assert!(!out.line(check).contains("fix:"), "{}", out.line(check));
    }
    out.expect("cores.isolation", "INFO", &["isolcpus=0-3 nohz_full=0-3"]);
    assert!(
        out.stdout
            .lines()
            .all(|l| l.starts_with("PASS") || l.starts_with("INFO")),
        "{}",
        out.stdout
    );
    // The IRQs were found by name and the stray "eth0" IRQ 28 counted too.
    out.expect(
        "nic.irq_affinity",
        "PASS",
        &["5 IRQs of eth0", "24:0", "27:3"],
    );
    out.expect("nic.iface", "PASS", &["eth0", "route to 10.0.0.5"]);
    out.expect("nic.speed", "PASS", &["25000 Mb/s"]);
    // The first line names the plan it checked.
    out.expect(
        "plan",
        "INFO",
        &["--cores 0-3 --connections 100 --target 10.0.0.5:9000 --connect-per-request --rate 100"],
    );
}

#[test]
fn too_few_ports_fails_with_the_fix() {
    let m = Machine::healthy();
    m.set("proc/sys/net/ipv4/ip_local_port_range", "60000\t60099\n");
    let out = m.run(&["--connections", "1000"]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    out.expect(
        "ports.range",
        "FAIL",
        &["60000-60099 = 100 ports", "1000 ports per pair"],
    );
    assert_eq!(
        out.fix("ports.range"),
        "sysctl -w net.ipv4.ip_local_port_range='1024 65535'"
    );
    // Ten source IPs, or ten destinations, give each pair 100 connections: enough.
    let out = m.run(&["--connections", "1000", "--source-ips", "10"]);
    out.expect(
        "ports.range",
        "PASS",
        &["10 source IP(s) x 1 destination(s)"],
    );
    let targets: Vec<String> = (0..10).map(|i| format!("10.0.0.5:{}", 9000 + i)).collect();
    let out = m.run(&["--connections", "1000", "--targets", &targets.join(",")]);
    out.expect(
        "ports.range",
        "PASS",
        &["1 source IP(s) x 10 destination(s)"],
    );
    // Beyond even the widest range: the fix names the source IPs needed.
    let out = m.run(&["--connections", "200000"]);
    out.expect("ports.range", "FAIL", &[]);
    assert!(
        out.fix("ports.range")
            .contains("--source-ip with 4 addresses"),
        "{}",
        out.stdout
    );
}

#[test]
fn offline_core_fails() {
    let m = Machine::healthy();
    m.set("sys/devices/system/cpu/online", "0-1\n");
    let out = m.run(&["--cores", "0,3"]);
    assert_eq!(out.code, 1);
    out.expect("cores.online", "FAIL", &["cores 3 are not online"]);
    assert!(
        out.fix("cores.online").contains("echo 1 >"),
        "{}",
        out.stdout
    );
}

#[test]
fn fd_limit_beyond_hard_fails() {
    // The real `ulimit`, lowered in a shell that then runs the script.
    let m = Machine::healthy();
    // No --target: the loopback baseline, whose sink holds the other 1000 ends here.
    let cmd = format!("ulimit -Sn 100 && ulimit -Hn 200 && exec bash {SCRIPT} --connections 1000");
    let mut sh = Command::new("sh");
    sh.args(["-c", &cmd]).env("PREFLIGHT_ROOT", m.dir.path());
    let out = run(sh);
    assert_eq!(out.code, 1, "{}", out.stdout);
    out.expect(
        "fd.limit",
        "FAIL",
        &[
            "soft 100, hard 200",
            "2064 (2000 sockets: 1000 connections with both ends on this host",
        ],
    );
    assert!(
        out.fix("fd.limit").starts_with("ulimit -Hn 2064"),
        "{}",
        out.stdout
    );
    // The same through the overrides; a soft limit below the need passes when the hard
    // one allows it (blaster raises it).
    let out = m.run_env(
        &["--connections", "1000"],
        &[("PREFLIGHT_ULIMIT_HARD", "200")],
    );
    out.expect("fd.limit", "FAIL", &["hard 200"]);
    let out = m.run_env(
        &["--connections", "1000"],
        &[
            ("PREFLIGHT_ULIMIT_SOFT", "100"),
            ("PREFLIGHT_ULIMIT_HARD", "unlimited"),
        ],
    );
    out.expect("fd.limit", "PASS", &["raises the soft limit"]);
}

#[test]
fn nr_open_and_file_max_fail() {
    let m = Machine::healthy();
    m.set("proc/sys/fs/nr_open", "1000\n")
        .set("proc/sys/fs/file-max", "3000\n")
        .set("proc/sys/fs/file-nr", "2500\t0\t3000\n");
    let out = m.run(&["--connections", "2000", "--target", "10.0.0.5:9000"]);
    assert_eq!(out.code, 1);
    out.expect("fd.nr_open", "FAIL", &["fs.nr_open 1000", ">= 2064"]);
    assert_eq!(out.fix("fd.nr_open"), "sysctl -w fs.nr_open=2064");
    out.expect("fd.file_max", "FAIL", &["500 left"]);
    assert_eq!(out.fix("fd.file_max"), "sysctl -w fs.file-max=6628");
}

#[test]
fn short_connections_check_time_wait() {
    let m = Machine::healthy();
    m.set("proc/sys/net/ipv4/tcp_tw_reuse", "2\n")
        .set("proc/sys/net/ipv4/tcp_fin_timeout", "60\n");
    // 1000/s x 60 s = 60000 TIME_WAIT ports > 28232, and reuse (2) is loopback only.
    let out = m.run(&plan_with(&["--short-connections", "--rate", "1000"]));
    assert_eq!(out.code, 1, "{}", out.stdout);
    out.expect(
        "ports.time_wait",
        "FAIL",
        &["60000 sockets", "tcp_tw_reuse=2"],
    );
    assert_eq!(
        out.fix("ports.time_wait"),
        "sysctl -w net.ipv4.tcp_tw_reuse=1"
    );
    out.expect("ports.tw_reuse", "WARN", &["2 = loopback only"]);
    assert_eq!(
        out.fix("ports.tw_reuse"),
        "sysctl -w net.ipv4.tcp_tw_reuse=1"
    );
    out.expect("ports.fin_timeout", "WARN", &["60 s"]);
    assert_eq!(
        out.fix("ports.fin_timeout"),
        "sysctl -w net.ipv4.tcp_fin_timeout=15"
    );
    // On loopback, 2 does reuse: the run depends on it, a warning.
    let out = m.run(&[
        "--targets",
        "127.0.0.1:9000",
        "--short-connections",
        "--rate",
        "1000",
    ]);
    out.expect("ports.time_wait", "WARN", &[]);
    out.expect("ports.tw_reuse", "PASS", &[]);
    // A rate beyond every port even with reuse needs more source IPs.
    m.set("proc/sys/net/ipv4/tcp_tw_reuse", "1\n");
    let out = m.run(&plan_with(&["--short-connections", "--rate", "100000"]));
    out.expect("ports.time_wait", "FAIL", &[]);
    assert!(
        out.fix("ports.time_wait")
            .contains("--source-ip with 2 addresses"),
        "{}",
        out.stdout
    );
    // Without --short-connections none of these run.
    let out = m.run(PLAN);
    assert!(!out.stdout.contains("ports.time_wait"), "{}", out.stdout);
}

#[test]
fn conntrack_table_and_hashsize() {
    let m = Machine::healthy();
    m.set("proc/sys/net/netfilter/nf_conntrack_max", "1000\n")
        .set("proc/sys/net/netfilter/nf_conntrack_count", "500\n");
    let out = m.run(&["--connections", "1000"]);
    assert_eq!(out.code, 1);
    out.expect(
        "conntrack.table",
        "FAIL",
        &["nf_conntrack_max 1000, 500 entries in use", ">= 1500"],
    );
    assert_eq!(
        out.fix("conntrack.table"),
        "sysctl -w net.netfilter.nf_conntrack_max=2048"
    );
    // TIME_WAIT entries count with short connections: 10/s x 120 s.
    let out = m.run(&[
        "--connections",
        "100",
        "--short-connections",
        "--rate",
        "10",
    ]);
    out.expect(
        "conntrack.table",
        "FAIL",
        &[">= 1800", "10/s x 120 s in TIME_WAIT"],
    );
    m.set("proc/sys/net/netfilter/nf_conntrack_buckets", "16\n");
    let out = m.run(&["--connections", "100"]);
    out.expect("conntrack.hashsize", "WARN", &["16 hash buckets"]);
    assert!(
        out.fix("conntrack.hashsize")
            .ends_with("/sys/module/nf_conntrack/parameters/hashsize"),
        "{}",
        out.stdout
    );
    // Not loaded: nothing to fill.
    m.remove("proc/sys/net/netfilter");
    let out = m.run(&["--connections", "100"]);
    out.expect("conntrack.table", "PASS", &["not loaded"]);
    assert!(!out.stdout.contains("conntrack.hashsize"), "{}", out.stdout);
}

#[test]
fn memory_per_connection() {
    let m = Machine::healthy();
    // 10000 x 144 KiB = 1.4 GiB if every buffer fills, against 1 GiB available.
    m.set("proc/meminfo", "MemAvailable:    1048576 kB\n");
    let out = m.run(&["--connections", "10000", "--target", "10.0.0.5:9000"]);
    out.expect(
        "mem.tcp",
        "WARN",
        &["144.0 KiB per connection", "MemAvailable 1.0 GiB"],
    );
    assert!(
        out.fix("mem.tcp")
            .starts_with("sysctl -w net.ipv4.tcp_rmem='4096 "),
        "{}",
        out.stdout
    );
    // 360000 pages at the defaults, past the pressure mark of 117405.
    out.expect("mem.tcp_mem", "WARN", &["360000 at the defaults"]);
    assert!(
        out.fix("mem.tcp_mem").starts_with("sysctl -w"),
        "{}",
        out.stdout
    );
    // Even the minimum buffers do not fit in 100 MB.
    m.set("proc/meminfo", "MemAvailable:     100000 kB\n");
    let out = m.run(&["--connections", "10000", "--target", "10.0.0.5:9000"]);
    assert_eq!(out.code, 1);
    out.expect("mem.tcp", "FAIL", &[]);
    assert!(
        out.fix("mem.tcp").starts_with("fewer connections"),
        "{}",
        out.stdout
    );
    // tcp_mem's hard limit below the minimum buffers.
    let m = Machine::healthy();
    m.set("proc/sys/net/ipv4/tcp_mem", "10\t20\t30\n");
    let out = m.run(&["--connections", "100", "--target", "10.0.0.5:9000"]);
    out.expect(
        "mem.tcp_mem",
        "FAIL",
        &["200 pages at the minimums", "limit >= 200 pages"],
    );
    assert_eq!(
        out.fix("mem.tcp_mem"),
        "sysctl -w net.ipv4.tcp_mem='10 200 300'"
    );
}

#[test]
fn smt_siblings_warn_and_the_fix_keeps_one_per_core() {
    let m = Machine::healthy();
    for (c, sib) in [(0, "0-1"), (1, "0-1"), (2, "2-3"), (3, "2-3")] {
        m.set(
            &format!("sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list"),
            &format!("{sib}\n"),
        );
    }
    let out = m.run(&["--cores", "0-3"]);
    assert_eq!(out.code, 0, "a warning is not a failure: {}", out.stdout);
    out.expect("cores.smt", "WARN", &["0+1 2+3"]);
    assert_eq!(out.fix("cores.smt"), "--cores 0,2");
    let out = m.run(&["--cores", "0,2"]);
    out.expect("cores.smt", "PASS", &[]);
}

#[test]
fn isolation_is_reported() {
    let m = Machine::healthy();
    m.set(
        "proc/cmdline",
        "root=/dev/sda1 isolcpus=2-3 nohz_full=2-3\n",
    );
    let out = m.run(&["--cores", "2-3"]);
    out.expect("cores.isolation", "INFO", &["isolcpus=2-3 nohz_full=2-3"]);
}

#[test]
fn governor_not_performance_warns() {
    let m = Machine::healthy();
    m.set(
        "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
        "powersave\n",
    );
    let out = m.run(&["--cores", "0-3"]);
    assert_eq!(out.code, 0);
    out.expect("cores.governor", "WARN", &["cpu1=powersave"]);
    assert_eq!(
        out.fix("cores.governor"),
        "for c in 1; do echo performance > /sys/devices/system/cpu/cpu$c/cpufreq/scaling_governor; done"
    );
    for c in 0..4 {
        m.remove(&format!("sys/devices/system/cpu/cpu{c}/cpufreq"));
    }
    let out = m.run(&["--cores", "0-3"]);
    out.expect("cores.governor", "INFO", &["no cpufreq"]);
}

#[test]
fn clock_tsc_and_clocksource() {
    let m = Machine::healthy();
    m.set(
        "proc/cpuinfo",
        "processor\t: 0\nflags\t\t: fpu tsc constant_tsc\n",
    )
    .set(
        "sys/devices/system/clocksource/clocksource0/current_clocksource",
        "hpet\n",
    );
    let out = m.run(&[]);
    assert_eq!(out.code, 0);
    out.expect("clock.tsc", "WARN", &["lack nonstop_tsc"]);
    out.expect("clock.source", "WARN", &["clocksource hpet"]);
    assert_eq!(
        out.fix("clock.source"),
        "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource"
    );
    m.set(
        "sys/devices/system/clocksource/clocksource0/current_clocksource",
        "kvm-clock\n",
    );
    let out = m.run(&[]);
    out.expect("clock.source", "INFO", &["kvm-clock"]);
}

#[test]
fn irq_affinity_straddling_generator_cores_warns() {
    let m = Machine::healthy();
    m.set("proc/irq/25/smp_affinity_list", "0-7\n");
    let out = m.run(PLAN);
    assert_eq!(out.code, 0);
    out.expect("nic.irq_affinity", "WARN", &["IRQs 25 may fire"]);
    let fix = out.fix("nic.irq_affinity");
    for want in [
        "systemctl stop irqbalance",
        "echo 0 > /proc/irq/24/smp_affinity_list",
        "echo 1 > /proc/irq/25/smp_affinity_list",
        "echo 0 > /proc/irq/28/smp_affinity_list",
    ] {
        assert!(fix.contains(want), "{want:?} missing in {fix}");
    }
    // IRQs entirely off the generator cores are a deliberate layout: PASS.
    let out = m.run(&["--cores", "8-9", "--iface", "eth0"]);
    out.expect("nic.irq_affinity", "PASS", &["0 on --cores, 5 off them"]);
}

#[test]
fn irqs_found_through_the_device_link_and_msi_irqs() {
    let m = Machine::healthy();
    // virtio names its IRQs after the device (virtio3-input.0), not the interface.
    m.set("sys/devices/virtio3/numa_node", "0\n")
        .set("sys/class/net/eth1/operstate", "up\n")
        .set("sys/class/net/eth1/queues/rx-0/rps_cpus", "0\n")
        .set(
            "proc/interrupts",
            "           CPU0\n 40:  1  PCI-MSIX 0-edge  virtio3-config\n 41:  9  PCI-MSIX 1-edge  virtio3-input.0\n 42:  9  PCI-MSIX 2-edge  virtio3-output.0\n 43:  1  PCI-MSIX 0-edge  mlx5_comp0@pci:0000:3b:00.0\n",
        );
    for q in 40..44 {
        m.set(&format!("proc/irq/{q}/smp_affinity_list"), "0\n");
    }
    std::os::unix::fs::symlink(
        "../../../devices/virtio3",
        m.path("sys/class/net/eth1/device"),
    )
    .unwrap();
    let out = m.run(&["--cores", "0", "--iface", "eth1"]);
    out.expect("nic.irq_affinity", "PASS", &["2 IRQs of eth1", "41:0 42:0"]);
    // A driver that names IRQs after the PCI function (mlx5): msi_irqs lists them.
    m.set("sys/class/net/eth0/device/msi_irqs/43", "msix\n");
    let out = m.run(&["--cores", "0", "--iface", "eth0"]);
    out.expect("nic.irq_affinity", "PASS", &["1 IRQs of eth0", "43:0"]);
    // No `ip` to ask for the route.
    let out = m.run_env(
        &["--targets", "10.0.0.5:1"],
        &[("PREFLIGHT_IP", "/nonexistent/ip")],
    );
    out.expect("nic.iface", "FAIL", &["cannot run '/nonexistent/ip'"]);
}

/// A process that exits between the listing of /proc and the read of its
/// `comm` (ever likelier when a fleet tool forks beside the script) is
/// skipped, not the end of the script. A Unix socket stands in for the
/// vanished file: readable by its mode, but `open` fails on it.
#[test]
fn a_process_that_vanishes_mid_scan_is_skipped() {
    let m = Machine::healthy();
    let dir = m.path("proc/4322");
    std::fs::create_dir_all(&dir).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(dir.join("comm")).unwrap();
    let out = m.run(PLAN);
    assert_eq!(out.code, 0, "{}", out.stdout);
    out.expect("nic.irqbalance", "PASS", &["irqbalance not running"]);
}

#[test]
fn irqbalance_running_warns() {
    let m = Machine::healthy();
    m.set("proc/4321/comm", "irqbalance\n");
    let out = m.run(PLAN);
    assert_eq!(out.code, 0);
    out.expect("nic.irqbalance", "WARN", &["pid 4321"]);
    assert!(
        out.fix("nic.irqbalance")
            .starts_with("systemctl stop irqbalance")
    );
    // Also for the loopback baseline, whose interface is lo.
    let out = m.run(&[]);
    out.expect("nic.irqbalance", "WARN", &[]);
    out.expect(
        "nic.iface",
        "PASS",
        &["lo, loopback (the loopback baseline"],
    );
}

#[test]
fn rss_queues_from_ethtool_and_sysfs() {
    let m = Machine::healthy();
    let out = m.run_env(PLAN, &[("FAKE_COMBINED", "2"), ("FAKE_COMBINED_MAX", "8")]);
    assert_eq!(out.code, 0);
    out.expect(
        "nic.rss_queues",
        "WARN",
        &["2 RX queues (ethtool -l eth0)", "maximum 8"],
    );
    assert_eq!(out.fix("nic.rss_queues"), "ethtool -L eth0 combined 4");
    let out = m.run_env(PLAN, &[("FAKE_COMBINED", "8"), ("FAKE_COMBINED_MAX", "8")]);
    out.expect("nic.rss_queues", "PASS", &["8 RX queues"]);
    // No ethtool support: count the sysfs queues; too few and no more in hardware -> RPS.
    m.remove("sys/class/net/eth0/queues/rx-2")
        .remove("sys/class/net/eth0/queues/rx-3");
    let out = m.run(PLAN);
    out.expect(
        "nic.rss_queues",
        "WARN",
        &["2 RX queues (/sys/class/net/eth0/queues/rx-*)"],
    );
    assert!(
        out.fix("nic.rss_queues")
            .contains("echo 0000000f > $q/rps_cpus"),
        "{}",
        out.stdout
    );
}

#[test]
fn nic_on_another_numa_node_warns() {
    let m = Machine::healthy();
    m.set("sys/class/net/eth0/device/numa_node", "1\n");
    let out = m.run(PLAN);
    out.expect(
        "nic.numa",
        "WARN",
        &["NUMA node 1", "cores 0-3 on another node"],
    );
    assert_eq!(out.fix("nic.numa"), "--cores from 4-7");
    m.set("sys/class/net/eth0/device/numa_node", "-1\n");
    let out = m.run(PLAN);
    out.expect("nic.numa", "INFO", &["no NUMA node"]);
}

#[test]
fn link_speed_loopback_and_down() {
    let m = Machine::healthy();
    // A loopback target needs no route lookup (FAKE_ROUTE_DEV unset: ip would fail).
    let out = m.run_env(&["--targets", "127.0.0.1:9000"], &[("FAKE_ROUTE_DEV", "")]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    out.expect("nic.iface", "PASS", &["lo, loopback"]);
    out.expect("nic.speed", "INFO", &["no link speed"]);
    out.expect("nic.irq_affinity", "INFO", &["no IRQs"]);
    out.expect("nic.rss_queues", "INFO", &[]);
    m.set("sys/class/net/eth0/operstate", "down\n");
    let out = m.run(PLAN);
    assert_eq!(out.code, 1);
    out.expect("nic.speed", "FAIL", &["operstate down"]);
    assert!(out.fix("nic.speed").starts_with("ip link set eth0 up"));
}

#[test]
fn interface_not_found_or_unroutable_fails() {
    let m = Machine::healthy();
    let out = m.run_env(PLAN, &[("FAKE_ROUTE_DEV", "")]);
    assert_eq!(out.code, 1);
    out.expect("nic.iface", "FAIL", &["no route to 10.0.0.5"]);
    let out = m.run(&["--iface", "eth9"]);
    assert_eq!(out.code, 1);
    out.expect("nic.iface", "FAIL", &["no interface eth9"]);
}

#[test]
fn listen_backlogs_warn() {
    let m = Machine::healthy();
    m.set("proc/sys/net/core/somaxconn", "128\n")
        .set("proc/sys/net/ipv4/tcp_max_syn_backlog", "128\n");
    let out = m.run(&["--connections", "1000"]);
    assert_eq!(out.code, 0);
    out.expect("net.somaxconn", "WARN", &["somaxconn 128", ">= 1000"]);
    assert_eq!(
        out.fix("net.somaxconn"),
        "sysctl -w net.core.somaxconn=65535"
    );
    out.expect("net.syn_backlog", "WARN", &["128"]);
    assert_eq!(
        out.fix("net.syn_backlog"),
        "sysctl -w net.ipv4.tcp_max_syn_backlog=65535"
    );
}

#[test]
fn socket_buffer_ceilings_against_sockbuf() {
    let m = Machine::healthy();
    let out = m.run(&["--sockbuf", "8388608"]);
    assert_eq!(out.code, 1);
    out.expect("net.rmem_max", "FAIL", &["4194304", "SO_RCVBUF"]);
    assert_eq!(
        out.fix("net.rmem_max"),
        "sysctl -w net.core.rmem_max=8388608"
    );
    out.expect("net.wmem_max", "FAIL", &["SO_SNDBUF"]);
    let out = m.run(&["--sockbuf", "4194304"]);
    out.expect("net.rmem_max", "PASS", &[">= 4194304"]);
}

#[test]
fn unreadable_files_are_info_not_failures() {
    let empty = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg(SCRIPT)
        .args(["--iface", "lo"])
        .env("PREFLIGHT_ROOT", empty.path())
        .env("PREFLIGHT_ULIMIT_SOFT", "1024")
        .env("PREFLIGHT_ULIMIT_HARD", "1024");
    let out = run(cmd);
    // lo does not exist in an empty tree: that is the only failure.
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let fails: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("FAIL"))
        .collect();
    assert_eq!(fails.len(), 1, "{}", out.stdout);
    out.expect("nic.iface", "FAIL", &[]);
    out.expect("ports.range", "INFO", &["cannot read"]);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
}

#[test]
fn json_output_parses_and_matches_the_text() {
    let m = Machine::healthy();
    m.set("proc/sys/net/ipv4/ip_local_port_range", "60000\t60099\n")
        .set("proc/4321/comm", "irqbalance\n");
    let args = plan_with(&[
        "--connections",
        "1000",
        "--short-connections",
        "--rate",
        "10",
    ]);
    let text = m.run(&args);
    let mut json_args = args.clone();
    json_args.push("--json");
    let json = m.run(&json_args);
    assert_eq!(json.code, 1);
    assert_eq!(text.code, json.code);
    let v: serde_json::Value =
        serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", json.stdout));
    let items = v.as_array().unwrap();
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(items.len(), lines.len(), "{}", json.stdout);
    for (item, line) in items.iter().zip(&lines) {
        let obj = item.as_object().unwrap();
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["check", "fix", "need", "saw", "status"]);
        let f = |k: &str| obj[k].as_str().unwrap();
        assert!(["PASS", "WARN", "FAIL", "INFO"].contains(&f("status")));
        assert!(line.starts_with(f("status")), "{line}");
        assert_eq!(line.split_whitespace().nth(1), Some(f("check")));
        assert!(line.contains(f("saw")), "{line}");
        if matches!(f("status"), "FAIL" | "WARN") {
            assert!(!f("fix").is_empty(), "{item}");
            assert!(line.ends_with(&format!("; fix: {}", f("fix"))), "{line}");
        }
    }
    let by = |c: &str| items.iter().find(|i| i["check"] == c).unwrap();
    assert_eq!(by("ports.range")["status"], "FAIL");
    assert_eq!(
        by("ports.range")["fix"],
        "sysctl -w net.ipv4.ip_local_port_range='1024 65535'"
    );
    assert_eq!(by("nic.irqbalance")["status"], "WARN");
    assert_eq!(by("fd.limit")["status"], "PASS");
}

#[test]
fn bad_arguments_exit_2_with_one_line() {
    let m = Machine::healthy();
    for (args, needle) in [
        (
            &["--connections", "0"][..],
            "--connections: must be a positive integer, got '0'",
        ),
        (&["--connections", "x"][..], "got 'x'"),
        (&["--connections"][..], "--connections: needs a value"),
        (&["--cores", "3-a"][..], "--cores: must be a list"),
        (
            &["--cores", "5-3"][..],
            "--cores: range '5-3' runs backwards",
        ),
        (
            &["--rate", "99999999999999999999"][..],
            "--rate: must be a positive integer",
        ),
        (&["--targets", "nohost"][..], "'nohost' is not HOST:PORT"),
        (&["--targets", "h:70000"][..], "port from 1 to 65535"),
        (&["--source-ips", "-1"][..], "--source-ips"),
        (&["--iface", "a/b"][..], "--iface"),
        (&["--short-connections"][..], "needs --rate"),
        (&["--bogus"][..], "unknown argument '--bogus'"),
    ] {
        let out = m.run(args);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    }
    let out = m.run(&["--help"]);
    assert_eq!(out.code, 0);
    assert!(
        out.stdout.contains("PREFLIGHT_ULIMIT_SOFT"),
        "{}",
        out.stdout
    );
}

/// The check names docs/preflight.md documents are exactly the ones the script prints.
#[test]
fn docs_list_every_check() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/preflight.md")).unwrap();
    let section = doc
        .split("## Preflight checks")
        .nth(1)
        .expect("docs/preflight.md has a '## Preflight checks' section");
    let section = section.split("\n#").next().unwrap();
    let mut documented: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    documented.sort();
    let m = Machine::healthy();
    let out = m.run(&plan_with(&["--short-connections", "--rate", "10"]));
    let mut printed: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    printed.sort();
    assert_eq!(documented, printed);
}

/// The script on this machine itself (no fixture root): read-only, like the real
/// command. Limits, commands and files are the host's.
fn on_this_machine(args: &[&str]) -> Out {
    let mut cmd = Command::new("bash");
    cmd.arg(SCRIPT).args(args);
    for k in [
        "PREFLIGHT_ROOT",
        "PREFLIGHT_ULIMIT_SOFT",
        "PREFLIGHT_ULIMIT_HARD",
        "PREFLIGHT_ULIMIT_MEMLOCK",
        "PREFLIGHT_UID",
        "SUDO_USER",
        "SUDO_UID",
    ] {
        cmd.env_remove(k);
    }
    run(cmd)
}

/// Issue 21: a core that is not online fails `cores.online`, naming the online cores
/// (`--cores 5` on the 2-core reference VM; the first core not online elsewhere).
#[test]
fn this_machine_fails_a_core_that_is_not_online_naming_the_online_ones() {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let online = online.trim();
    let on = |c: usize| {
        online.split(',').any(|r| match r.split_once('-') {
            Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).contains(&c),
            None => r.parse::<usize>().unwrap() == c,
        })
    };
    let core = (5..).find(|&c| !on(c)).unwrap().to_string();
    let out = on_this_machine(&["--cores", &core]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    out.expect(
        "cores.online",
        "FAIL",
        &[
            &format!("cores {core} are not online"),
            &format!("(online: {online})"),
        ],
    );
    assert!(
        out.fix("cores.online")
            .contains(&format!("choose --cores within {online}")),
        "{}",
        out.stdout
    );
}

/// Issue 21: `--connections 30000 --cores 0` checks ports and descriptors for 30,000
/// connections: exactly on a fixture (the baseline's sink holds the other ends, so the
/// descriptors count twice), and by name on this machine.
#[test]
fn thirty_thousand_connections_are_checked_for_ports_and_descriptors() {
    let out = on_this_machine(&["--connections", "30000", "--cores", "0"]);
    for check in ["ports.range", "fd.limit", "conntrack.table"] {
        if out.stdout.contains(&format!(" {check} ")) && out.status(check) != "INFO" {
            assert!(out.line(check).contains("30000"), "{}", out.line(check));
        }
    }
    out.expect(
        "ports.range",
        out.status("ports.range"),
        &["30000 ports per pair"],
    );
    out.expect(
        "fd.limit",
        out.status("fd.limit"),
        &["60064 (60000 sockets: 30000 connections"],
    );
    let m = Machine::healthy();
    let out = m.run(&["--connections", "30000", "--cores", "0"]);
    out.expect(
        "ports.range",
        "FAIL",
        &[
            "28232 ports per",
            "30000 ports per pair (30000 connections over 1 pair(s))",
        ],
    );
    out.expect(
        "fd.limit",
        "PASS",
        &["60064 (60000 sockets: 30000 connections with both ends on this host"],
    );
    out.expect("fd.nr_open", "PASS", &[">= 60064"]);
    out.expect(
        "conntrack.table",
        "PASS",
        &[">= 30012 entries (12 in use + 30000 connections)"],
    );
    // Against a target, the other ends are elsewhere.
    let out = m.run(&[
        "--connections",
        "30000",
        "--cores",
        "0",
        "--target",
        "10.0.0.5:9000",
    ]);
    out.expect("fd.limit", "PASS", &["30064 (30000 connections + 64"]);
}

/// Issue 21: without plan flags the first line names the default plan it checked.
#[test]
fn no_flags_names_the_default_plan() {
    let m = Machine::healthy();
    for args in [
        &[][..],
        &["--json", "report.json"][..],
        &["--iface", "eth0"][..],
    ] {
        let out = m.run(args);
        assert!(
            out.stdout.starts_with("INFO  plan "),
            "{args:?}: {}",
            out.stdout
        );
        out.expect(
            "plan",
            "INFO",
            &[
                "no plan flags: checked blaster's default plan, --cores 0 --connections 64, no --target: the loopback baseline",
                "128 sockets",
            ],
        );
        assert!(out.fix("plan").contains("--cores 4-11"), "{}", out.stdout);
    }
    // With plan flags it names them, and it is not the default any more.
    let out = m.run(&["--cores", "1"]);
    out.expect("plan", "INFO", &["--cores 1 --connections 64, no --target"]);
    assert!(
        !out.line("plan").contains("no plan flags"),
        "{}",
        out.stdout
    );
}

/// Issue 21: `blaster run`'s spelling, so the same words go to both: `--target`
/// (repeatable), `--source-ip` ranges, `--connect-per-request`, `--flag=value`, a
/// `--json FILE`, `--shard`, `--proto udp`, `--control-core`, and the flags that change
/// nothing here.
#[test]
fn blaster_run_flags_in_blaster_spelling_check_that_plan() {
    let m = Machine::healthy();
    let out = m.run(&[
        "--cores",
        "0-3",
        "--connections",
        "100000",
        "--target",
        "10.0.0.5:9000",
        "--source-ip",
        "10.0.0.2-10.0.0.9",
        "--rate",
        "50000",
        "--duration=60s",
        "--json",
        "run.json",
        "--payload-size",
        "64",
        "--quiet",
    ]);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    // Eight sources: 12,500 connections per pair fit 28,232 ports.
    out.expect(
        "ports.range",
        "PASS",
        &["8 source IP(s) x 1 destination(s)", "12500 ports per pair"],
    );
    out.expect("nic.iface", "PASS", &["eth0", "route to 10.0.0.5"]);
    out.expect("fd.limit", "PASS", &["100064 (100000 connections + 64"]);
    out.expect(
        "plan",
        "INFO",
        &["--cores 0-3 --connections 100000 --target 10.0.0.5:9000 --source-ip 10.0.0.2-10.0.0.9 (8 addresses) --rate 50000"],
    );
    // Text, not JSON: `--json run.json` was blaster's.
    assert!(out.stdout.starts_with("INFO  plan"), "{}", out.stdout);
    // Two targets are two destinations; over UDP, one pair per source.
    let two = [
        "--connections",
        "40000",
        "--target",
        "10.0.0.5:9000",
        "--target",
        "10.0.0.6:9000",
    ];
    let out = m.run(&two);
    out.expect(
        "ports.range",
        "PASS",
        &["1 source IP(s) x 2 destination(s)"],
    );
    let mut udp = two.to_vec();
    udp.extend(["--proto", "udp"]);
    let out = m.run(&udp);
    out.expect(
        "ports.range",
        "FAIL",
        &["1 source IP(s) x 1 destination(s)", "40000 ports per pair"],
    );
    // A shard holds its part of the connections.
    let out = m.run(&[
        "--connections",
        "1000",
        "--shard",
        "1/4",
        "--target",
        "10.0.0.5:9000",
    ]);
    out.expect("ports.range", "PASS", &["250 ports per pair"]);
    // --connect-per-request is --short-connections.
    let out = m.run(&[
        "--target",
        "10.0.0.5:9000",
        "--connect-per-request",
        "--rate",
        "1000",
    ]);
    out.expect("ports.time_wait", "WARN", &["1000 connections/s x 60 s"]);
    // The control core is checked with the workers.
    let out = m.run(&["--cores", "0", "--control-core", "7"]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    out.expect(
        "cores.online",
        "FAIL",
        &["cores 7 are not online (online: 0-3)"],
    );
}

/// Every flag `blaster run --help` lists is known to the script (a new one must be
/// added to its lists): all of them at once, with a value each one takes, exit 0 or 1.
#[test]
fn every_blaster_run_flag_is_known() {
    let help = Command::new(common::bin())
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let sample = |flag: &str| -> &str {
        match flag {
            "--cores" | "--control-core" => "0",
            "--connections" | "--concurrency" => "10",
            "--target" => "10.0.0.5:9000",
            "--source-ip" => "10.0.0.2",
            "--rate" => "100",
            "--proto" => "tcp",
            "--shard" => "0/1",
            "--sockbuf" => "4096",
            _ => "x",
        }
    };
    let mut args: Vec<String> = Vec::new();
    let mut flags = 0;
    for line in help.lines() {
        let t = line.trim_start();
        let t = t.strip_prefix("-H, ").unwrap_or(t);
        let Some(rest) = t.strip_prefix("--") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let flag = format!("--{}", words.next().unwrap());
        if flag == "--help" {
            continue;
        }
        flags += 1;
        let takes_value = words.next().is_some_and(|w| w.starts_with('<'));
        args.push(flag.clone());
        if takes_value {
            args.push(sample(&flag).to_string());
        }
    }
    assert!(flags > 40, "{help}");
    let m = Machine::healthy();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = m.run(&args);
    assert!(
        matches!(out.code, 0 | 1),
        "{args:?}: {}{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    // And `blaster run`'s leading word is taken too.
    let out = m.run(&["run", "--cores", "0"]);
    assert!(matches!(out.code, 0 | 1), "{}", out.stderr);
}

/// Issue 21: io_uring itself: the kernel version, `kernel.io_uring_disabled`, and
/// RLIMIT_MEMLOCK where it still counts (kernels before 5.12).
#[test]
fn io_uring_kernel_switch_and_memlock() {
    let m = Machine::healthy();
    let out = m.run(&[]);
    out.expect("io_uring.kernel", "PASS", &["kernel 6.8.0-41-generic"]);
    out.expect("io_uring.disabled", "PASS", &["kernel.io_uring_disabled=0"]);
    out.expect("io_uring.memlock", "PASS", &["memory cgroup"]);
    // Too old a kernel.
    m.set("proc/sys/kernel/osrelease", "5.10.0-28-amd64\n");
    let out = m.run(&[]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    out.expect(
        "io_uring.kernel",
        "FAIL",
        &["kernel 5.10.0-28-amd64", ">= 5.11"],
    );
    // 5.11: io_uring works, but rings count against a 64 KiB RLIMIT_MEMLOCK; 5.4's
    // sysctl-less kernels have no io_uring_disabled.
    m.set("proc/sys/kernel/osrelease", "5.11.0-1-amd64\n")
        .remove("proc/sys/kernel/io_uring_disabled");
    let out = m.run_env(
        &["--cores", "0-3"],
        &[("PREFLIGHT_ULIMIT_MEMLOCK", "65536")],
    );
    out.expect(
        "io_uring.kernel",
        "PASS",
        &["no multishot receive before 6.0"],
    );
    out.expect("io_uring.disabled", "PASS", &["before kernel 6.6"]);
    // Four generator rings and four of the baseline's sink, 512 KiB each.
    out.expect(
        "io_uring.memlock",
        "FAIL",
        &[
            "RLIMIT_MEMLOCK 64.0 KiB",
            ">= 4.0 MiB (8 rings x 512.0 KiB)",
        ],
    );
    assert!(
        out.fix("io_uring.memlock")
            .starts_with("ulimit -l unlimited")
    );
    let out = m.run_env(
        &["--cores", "0-3"],
        &[("PREFLIGHT_ULIMIT_MEMLOCK", "unlimited")],
    );
    out.expect("io_uring.memlock", "PASS", &[]);
    // The switch: 2 is off for everyone; 1 is root (or a group) only.
    let m = Machine::healthy();
    m.set("proc/sys/kernel/io_uring_disabled", "2\n");
    let out = m.run(&[]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    out.expect(
        "io_uring.disabled",
        "FAIL",
        &["io_uring is off for every process"],
    );
    assert_eq!(
        out.fix("io_uring.disabled"),
        "sysctl -w kernel.io_uring_disabled=0"
    );
    m.set("proc/sys/kernel/io_uring_disabled", "1\n")
        .set("proc/sys/kernel/io_uring_group", "-1\n");
    let out = m.run_env(&[], &[("PREFLIGHT_UID", "4242")]);
    out.expect("io_uring.disabled", "FAIL", &["blaster runs as uid 4242"]);
    let out = m.run_env(&[], &[("PREFLIGHT_UID", "0")]);
    out.expect("io_uring.disabled", "PASS", &["blaster runs as uid 0"]);
}

/// Issue 21: under sudo the descriptor check reads the limits of the shell that ran
/// sudo (blaster runs there), else says plainly that it checked root's.
#[test]
fn under_sudo_the_invoking_users_descriptor_limit_is_checked() {
    let m = Machine::healthy();
    // The script's parent is this test process: it plays the user's shell.
    let pid = std::process::id();
    m.set(
        &format!("proc/{pid}/status"),
        "Name:\tbash\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\n",
    )
    .set(
        &format!("proc/{pid}/limits"),
        "Limit                     Soft Limit           Hard Limit           Units     \n\
         Max locked memory         65536                65536                bytes     \n\
         Max open files            1024                 1500                 files     \n",
    );
    let sudo = |uid: &str| {
        let mut cmd = Command::new("bash");
        cmd.arg(SCRIPT)
            .args(["--connections", "1000", "--target", "10.0.0.5:9000"])
            .env("PREFLIGHT_ROOT", m.dir.path())
            .env("PREFLIGHT_UID", "0")
            .env("SUDO_USER", "alice")
            .env("SUDO_UID", uid)
            .env("PREFLIGHT_IP", format!("{FAKES}/ip"))
            .env("PREFLIGHT_ETHTOOL", format!("{FAKES}/ethtool"))
            .env("FAKE_ROUTE_DEV", "eth0")
            .env_remove("PREFLIGHT_ULIMIT_SOFT")
            .env_remove("PREFLIGHT_ULIMIT_HARD");
        run(cmd)
    };
    let out = sudo("1000");
    out.expect(
        "fd.limit",
        "PASS",
        &[
            &format!("RLIMIT_NOFILE of alice's shell (pid {pid}, which ran sudo"),
            "soft 1024, hard 1500",
        ],
    );
    // alice's hard limit is below what 2000 connections need.
    let mut cmd = Command::new("bash");
    cmd.arg(SCRIPT)
        .args(["--connections", "2000", "--target", "10.0.0.5:9000"])
        .env("PREFLIGHT_ROOT", m.dir.path())
        .env("PREFLIGHT_UID", "0")
        .env("SUDO_USER", "alice")
        .env("SUDO_UID", "1000")
        .env("PREFLIGHT_IP", format!("{FAKES}/ip"))
        .env("FAKE_ROUTE_DEV", "eth0")
        .env_remove("PREFLIGHT_ULIMIT_SOFT")
        .env_remove("PREFLIGHT_ULIMIT_HARD");
    let out = run(cmd);
    out.expect("fd.limit", "FAIL", &["alice's shell", "hard 1500"]);
    // No ancestor of alice's: root's limit, said so.
    let out = sudo("1001");
    out.expect(
        "fd.limit",
        out.status("fd.limit"),
        &["RLIMIT_NOFILE (root's, under sudo: alice's shell or its limits were not found"],
    );
}

/// Issue 21: a core online but outside this shell's affinity cannot run a worker
/// started from it.
#[test]
fn cores_outside_the_affinity_warn() {
    let m = Machine::healthy();
    m.set("proc/self/status", "Name:\tbash\nCpus_allowed_list:\t0-1\n");
    let out = m.run(&["--cores", "0-3"]);
    // A warning: a preflight in its own container has another cpuset than blaster's.
    assert_eq!(out.code, 0, "{}", out.stdout);
    out.expect(
        "cores.online",
        "WARN",
        &["cores 2-3 are online but outside this shell's affinity (Cpus_allowed_list 0-1; online: 0-3)"],
    );
    assert!(
        out.fix("cores.online")
            .starts_with("choose --cores within 0-1")
    );
    let out = m.run(&["--cores", "0-1"]);
    out.expect("cores.online", "PASS", &["usable here: 0-1"]);
}

/// Issue 21: bad values of blaster's spellings are one line and exit 2, as the others.
#[test]
fn bad_blaster_spellings_exit_2_with_one_line() {
    let m = Machine::healthy();
    for (args, needle) in [
        (
            &["--target", "nohost"][..],
            "--target: 'nohost' is not HOST:PORT",
        ),
        (
            &["--source-ip", "10.0.0.9-10.0.0.2"][..],
            "--source-ip: expected addresses",
        ),
        (&["--source-ip", "10.0.0.0/8"][..], "at most 65536"),
        (&["--shard", "4/4"][..], "--shard: expected I/N with I < N"),
        (&["--proto", "sctp"][..], "--proto: expected tcp or udp"),
        (&["--sockbuf", "4q"][..], "--sockbuf: expected a size"),
        (
            &["--control-core", "x"][..],
            "--control-core: must be a core number",
        ),
        (
            &["--connect-per-request", "--rate", "ramp:0..10/1s"][..],
            "--connect-per-request: needs --rate R",
        ),
        (&["--duration"][..], "--duration: needs a value"),
        (
            &["--warp-speed", "9"][..],
            "unknown argument '--warp-speed'",
        ),
    ] {
        let out = m.run(args);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    }
}

fn tune(args: &[&str]) -> Out {
    let mut cmd = Command::new("bash");
    cmd.arg(TUNE).args(args);
    run(cmd)
}

#[test]
fn tune_arguments_and_missing_state() {
    let out = tune(&["sideways"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("unknown mode 'sideways'"),
        "{}",
        out.stderr
    );
    let out = tune(&["apply", "--state"]);
    assert_eq!(out.code, 2);
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("none");
    let out = tune(&["revert", "--state", state.to_str().unwrap()]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("nothing to revert") || out.stderr.contains("needs root"),
        "{}",
        out.stderr
    );
}

/// apply then revert in a fresh network namespace: net.* keys are per namespace there,
/// so the host is never touched. The profile is cut to its net.* keys (fs.* are global)
/// plus one key no kernel has.
#[test]
fn tune_apply_then_revert_restores_every_value() {
    let probe = Command::new("unshare").args(["-n", "true"]).output();
    if !matches!(&probe, Ok(o) if o.status.success()) {
        skip(
            "tune_apply_then_revert_restores_every_value",
            &format!(
                "cannot create a network namespace (unshare -n needs root or user namespaces): {probe:?}"
            ),
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let profile = d.path().join("net.conf");
    let mut text: String = std::fs::read_to_string(PROFILE)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("net."))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(text.lines().count() >= 8, "{text}");
    text += "net.ipv4.blaster_no_such_key = 1\n";
    std::fs::write(&profile, &text).unwrap();
    let state = d.path().join("state");
    let snapshot = "for k in $(grep -o '^[a-z0-9_.]*' \"$1\"); do f=/proc/sys/$(echo $k | tr . /); \
                    if [ -e $f ]; then echo \"$k=$(cat $f)\"; fi; done";
    let script = format!(
        "snap() {{ {snapshot}; }}; set -e; snap '{p}' > '{d}/before'; \
         bash '{TUNE}' apply --profile '{p}' --state '{s}'; snap '{p}' > '{d}/applied'; \
         cat '{s}' > '{d}/saved'; bash '{TUNE}' revert --state '{s}'; snap '{p}' > '{d}/after'",
        p = profile.display(),
        s = state.display(),
        d = d.path().display(),
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-n", "bash", "-c", &script]);
    let out = run(cmd);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let read = |n: &str| std::fs::read_to_string(d.path().join(n)).unwrap();
    let (before, applied, after) = (read("before"), read("applied"), read("after"));
    assert_eq!(before, after, "revert did not restore:\n{}", out.stdout);
    assert_ne!(before, applied, "apply changed nothing:\n{}", out.stdout);
    assert!(applied.contains("net.core.somaxconn=65535"), "{applied}");
    assert!(
        applied.contains("net.ipv4.ip_local_port_range=1024\t65535"),
        "{applied}"
    );
    assert!(
        read("saved").contains("net.core.somaxconn = "),
        "{}",
        read("saved")
    );
    assert!(
        out.stdout
            .contains("skip  net.ipv4.blaster_no_such_key: not on this machine"),
        "{}",
        out.stdout
    );
    assert!(!state.exists(), "revert leaves no state behind");
    println!("{}", out.stdout);
}

/// Guard for the fixture stand-ins: they must stay executable in the checkout.
#[test]
fn fakes_are_executable() {
    use std::os::unix::fs::PermissionsExt;
    for f in ["ip", "ethtool"] {
        let p = Path::new(FAKES).join(f);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert!(mode & 0o111 != 0, "{} is not executable", p.display());
    }
}
