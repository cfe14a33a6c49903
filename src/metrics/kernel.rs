//! The kernel's own drop counters on the generator host, read per interval: conntrack
//! drops and failed inserts (`/proc/net/stat/nf_conntrack`, with `nf_conntrack_count`
//! and `nf_conntrack_max`), softnet backlog drops and time squeezes
//! (`/proc/net/softnet_stat`), listen-queue overflows and retransmitted segments
//! (`/proc/net/netstat`, `/proc/net/snmp`), and the NIC's missed and dropped receives
//! (`/sys/class/net/IF/statistics`). Each wall a load test hits in the kernel leaves its
//! mark in one of them long before a figure looks wrong, so each nonzero one becomes a
//! diagnosis naming the wall and the fix ([`diagnoses`]).
//!
//! The network files are read through `/proc/self/net`, so they are the counters of the
//! process's own network namespace (a run under `ip netns exec` reads its namespace's
//! conntrack table, not the host's). A counter whose file or column is missing (no
//! conntrack module, a driver without `rx_missed_errors`) is `None`, "not available",
//! never 0: a zero would claim the wall was checked and not hit. Parsing is pure
//! ([`conntrack_stat`], [`softnet_stat`], [`snmp_value`]) so tests feed it the kernel's
//! real text; [`read`] does the I/O, and the collector thread calls it once per interval
//! (never a worker).

use crate::diagnosis::Diagnosis;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Each counter as a total since boot (a [`read`]) or as the growth over an interval
/// ([`KernelCounters::since`]); `None` where this host does not expose it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KernelCounters {
    /// New connections conntrack dropped because its table was full (`drop`).
    pub conntrack_drop: Option<u64>,
    /// Unassured entries evicted to make room in a full table (`early_drop`).
    pub conntrack_early_drop: Option<u64>,
    /// Entries that could not be inserted (`insert_failed`).
    pub conntrack_insert_failed: Option<u64>,
    /// Packets dropped because a CPU's input backlog was full (softnet column 2).
    pub softnet_dropped: Option<u64>,
    /// NAPI rounds that ran out of budget or time with work left (softnet column 3).
    pub softnet_time_squeeze: Option<u64>,
    /// SYNs or handshakes dropped because a listen queue was full (TcpExt).
    pub listen_overflows: Option<u64>,
    /// Every drop at a listening socket, overflows included (TcpExt).
    pub listen_drops: Option<u64>,
    /// TCP segments retransmitted (Tcp RetransSegs).
    pub retrans_segs: Option<u64>,
    /// Retransmissions that were lost again (TcpExt TCPLostRetransmit).
    pub lost_retransmit: Option<u64>,
    /// Frames the NIC had no ring slot for (`rx_missed_errors`).
    pub nic_rx_missed: Option<u64>,
    /// Received frames the driver or stack dropped (`rx_dropped`).
    pub nic_rx_dropped: Option<u64>,
    /// Receive FIFO overruns (`rx_fifo_errors`).
    pub nic_rx_fifo: Option<u64>,
}

impl KernelCounters {
    /// Applies `f` to each counter of `self` and `o`, field by field.
    fn zip(self, o: Self, f: impl Fn(Option<u64>, Option<u64>) -> Option<u64>) -> Self {
        KernelCounters {
            conntrack_drop: f(self.conntrack_drop, o.conntrack_drop),
            conntrack_early_drop: f(self.conntrack_early_drop, o.conntrack_early_drop),
            conntrack_insert_failed: f(self.conntrack_insert_failed, o.conntrack_insert_failed),
            softnet_dropped: f(self.softnet_dropped, o.softnet_dropped),
            softnet_time_squeeze: f(self.softnet_time_squeeze, o.softnet_time_squeeze),
            listen_overflows: f(self.listen_overflows, o.listen_overflows),
            listen_drops: f(self.listen_drops, o.listen_drops),
            retrans_segs: f(self.retrans_segs, o.retrans_segs),
            lost_retransmit: f(self.lost_retransmit, o.lost_retransmit),
            nic_rx_missed: f(self.nic_rx_missed, o.nic_rx_missed),
            nic_rx_dropped: f(self.nic_rx_dropped, o.nic_rx_dropped),
            nic_rx_fifo: f(self.nic_rx_fifo, o.nic_rx_fifo),
        }
    }

    /// The growth from `then` to `self`: available only where both reads had the
    /// counter. A counter that went backwards (a NIC re-created, a 32-bit per-CPU
    /// conntrack counter wrapped) counts 0 rather than a huge number.
    pub fn since(self, then: Self) -> Self {
        self.zip(then, |now, then| Some(now?.saturating_sub(then?)))
    }

    /// Adds two intervals' growth: a counter available in either is available in the
    /// sum (an interval that could not read it adds nothing).
    pub fn plus(self, o: Self) -> Self {
        self.zip(o, |a, b| match (a, b) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        })
    }

    /// The same counters available, each 0: an interval too short to measure.
    pub fn zeroed(self) -> Self {
        self.zip(self, |a, _| a.map(|_| 0))
    }
}

/// One read: every counter, and conntrack's fill (`nf_conntrack_count`,
/// `nf_conntrack_max`) when conntrack is loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelSample {
    pub counters: KernelCounters,
    pub conntrack: Option<(u64, u64)>,
}

/// The sum over the per-CPU rows of `/proc/net/stat/nf_conntrack` (hex, one row per
/// CPU under a header naming the columns) of `drop`, `early_drop` and
/// `insert_failed`, found by name: the columns differ between kernels. `None` for each
/// column the header lacks.
pub fn conntrack_stat(text: &str) -> (Option<u64>, Option<u64>, Option<u64>) {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return (None, None, None);
    };
    let names: Vec<&str> = header.split_whitespace().collect();
    let rows: Vec<Vec<u64>> = lines.filter_map(hex_row).collect();
    let column = |name: &str| {
        let i = names.iter().position(|n| *n == name)?;
        rows.iter()
            .map(|r| r.get(i).copied())
            .sum::<Option<u64>>()
            .filter(|_| !rows.is_empty())
    };
    (
        column("drop"),
        column("early_drop"),
        column("insert_failed"),
    )
}

/// A row of whitespace-separated hex numbers; `None` for an empty or malformed row.
fn hex_row(line: &str) -> Option<Vec<u64>> {
    let row: Vec<u64> = line
        .split_whitespace()
        .map(|x| u64::from_str_radix(x, 16).ok())
        .collect::<Option<_>>()?;
    (!row.is_empty()).then_some(row)
}

/// `(dropped, time_squeeze)` summed over the per-CPU rows of `/proc/net/softnet_stat`
/// (hex; column 1 processed, 2 dropped, 3 time_squeeze); `None` with no rows.
pub fn softnet_stat(text: &str) -> Option<(u64, u64)> {
    let rows: Vec<Vec<u64>> = text.lines().filter_map(hex_row).collect();
    let sum = |i: usize| rows.iter().map(|r| r.get(i).copied()).sum::<Option<u64>>();
    (!rows.is_empty()).then_some((sum(1)?, sum(2)?))
}

/// A counter of `/proc/net/snmp` or `/proc/net/netstat`: each section is a pair of
/// lines, `Section: Name Name ...` then `Section: value value ...`; the value under
/// `field` in `section`'s pair.
pub fn snmp_value(text: &str, section: &str, field: &str) -> Option<u64> {
    let prefix = format!("{section}:");
    let mut pair = text.lines().filter(|l| l.starts_with(&prefix));
    while let (Some(names), Some(values)) = (pair.next(), pair.next()) {
        let i = names.split_whitespace().position(|n| n == field);
        if let Some(i) = i {
            return values.split_whitespace().nth(i)?.parse().ok();
        }
    }
    None
}

/// A number in a file (a sysctl, a sysfs counter); `None` if missing or not a number.
fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `(nf_conntrack_count, nf_conntrack_max)` under `<root>/proc/sys/net/netfilter`;
/// `None` when conntrack is not loaded (the files are absent) or either is unreadable.
/// The count is the namespace's own; the max is global on most kernels.
pub fn read_conntrack(root: &Path) -> Option<(u64, u64)> {
    let dir = root.join("proc/sys/net/netfilter");
    Some((
        read_u64(&dir.join("nf_conntrack_count"))?,
        read_u64(&dir.join("nf_conntrack_max"))?,
    ))
}

/// The interfaces whose NIC counters are read: the run's (`iface`), else every one
/// under `<root>/sys/class/net` but loopback.
fn nic_ifaces(root: &Path, iface: Option<&str>) -> Vec<String> {
    if let Some(i) = iface {
        return vec![i.to_string()];
    }
    let Ok(dir) = std::fs::read_dir(root.join("sys/class/net")) else {
        return Vec::new();
    };
    let mut all: Vec<String> = dir
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n != "lo")
        .collect();
    all.sort();
    all
}

/// A statistics file summed over `ifaces`: available when any interface has it.
fn nic_sum(root: &Path, ifaces: &[String], file: &str) -> Option<u64> {
    ifaces
        .iter()
        .filter_map(|i| {
            read_u64(
                &root
                    .join("sys/class/net")
                    .join(i)
                    .join("statistics")
                    .join(file),
            )
        })
        .reduce(u64::saturating_add)
}

/// Reads every counter under `root` (`/` in a run): the network files of this
/// process's namespace, and the NIC counters of `iface` (every non-loopback interface
/// when the run's is unknown).
pub fn read(root: &Path, iface: Option<&str>) -> KernelSample {
    let net = root.join("proc/self/net");
    let text = |f: &str| std::fs::read_to_string(net.join(f)).ok();
    let (conntrack_drop, conntrack_early_drop, conntrack_insert_failed) = text("stat/nf_conntrack")
        .map(|t| conntrack_stat(&t))
        .unwrap_or_default();
    let softnet = text("softnet_stat").and_then(|t| softnet_stat(&t));
    let netstat = text("netstat").unwrap_or_default();
    let snmp = text("snmp").unwrap_or_default();
    let ifaces = nic_ifaces(root, iface);
    KernelSample {
        counters: KernelCounters {
            conntrack_drop,
            conntrack_early_drop,
            conntrack_insert_failed,
            softnet_dropped: softnet.map(|s| s.0),
            softnet_time_squeeze: softnet.map(|s| s.1),
            listen_overflows: snmp_value(&netstat, "TcpExt", "ListenOverflows"),
            listen_drops: snmp_value(&netstat, "TcpExt", "ListenDrops"),
            retrans_segs: snmp_value(&snmp, "Tcp", "RetransSegs"),
            lost_retransmit: snmp_value(&netstat, "TcpExt", "TCPLostRetransmit"),
            nic_rx_missed: nic_sum(root, &ifaces, "rx_missed_errors"),
            nic_rx_dropped: nic_sum(root, &ifaces, "rx_dropped"),
            nic_rx_fifo: nic_sum(root, &ifaces, "rx_fifo_errors"),
        },
        conntrack: read_conntrack(root),
    }
}

/// Conntrack's fill over a run: the highest `nf_conntrack_count` seen at an interval's
/// end and `nf_conntrack_max`; each `None` when never read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConntrackFill {
    pub count_max: Option<u64>,
    pub max: Option<u64>,
}

/// One diagnosis per wall whose counter grew during the run (`totals`, the sum of the
/// intervals' growth): conntrack, the softnet backlog, the softnet budget, listen
/// queues, retransmissions, the NIC's receive ring. `iface` names the interface whose
/// NIC counters were read.
pub fn diagnoses(
    totals: &KernelCounters,
    fill: ConntrackFill,
    iface: Option<&str>,
) -> Vec<Diagnosis> {
    let n = |c: Option<u64>| c.unwrap_or(0);
    let t = totals;
    let mut out = Vec::new();
    if n(t.conntrack_drop) + n(t.conntrack_insert_failed) + n(t.conntrack_early_drop) > 0 {
        out.push(Diagnosis::ConntrackTableFull {
            drop: n(t.conntrack_drop),
            insert_failed: n(t.conntrack_insert_failed),
            early_drop: n(t.conntrack_early_drop),
            count: fill.count_max,
            max: fill.max,
        });
    }
    if n(t.softnet_dropped) > 0 {
        out.push(Diagnosis::SoftnetBacklogDrops {
            dropped: n(t.softnet_dropped),
        });
    }
    if n(t.softnet_time_squeeze) > 0 {
        out.push(Diagnosis::SoftnetTimeSqueeze {
            squeezed: n(t.softnet_time_squeeze),
        });
    }
    if n(t.listen_overflows) + n(t.listen_drops) > 0 {
        out.push(Diagnosis::ListenOverflows {
            overflows: n(t.listen_overflows),
            drops: n(t.listen_drops),
        });
    }
    if n(t.retrans_segs) > 0 {
        out.push(Diagnosis::TcpRetransmits {
            segments: n(t.retrans_segs),
            lost_again: t.lost_retransmit,
        });
    }
    if n(t.nic_rx_missed) + n(t.nic_rx_dropped) + n(t.nic_rx_fifo) > 0 {
        out.push(Diagnosis::NicRxDrops {
            iface: iface.map(str::to_string),
            missed: n(t.nic_rx_missed),
            dropped: n(t.nic_rx_dropped),
            fifo: n(t.nic_rx_fifo),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 6.x kernel's `/proc/net/stat/nf_conntrack` on two CPUs, after a table of 40
    /// entries refused 20 new connections (read from a test namespace).
    const CONNTRACK_6: &str = "\
entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart
00000028  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000002 0000000f 00000001 00000000  00000000 00000000 00000000 00000000
00000028  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000005 00000000 00000000  00000000 00000000 00000000 00000003
";

    /// A 4.x kernel's columns: `searched` and `delete_list`, another order.
    const CONNTRACK_4: &str = "\
entries  searched found new invalid ignore delete delete_list insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart
0000002a  00000000 000001ff 00000010 00000000 00000000 00000000 00000000 00000000 00000001 000000a0 00000000 00000000  00000000 00000000 00000000 00000000
";

    #[test]
    fn conntrack_columns_are_found_by_name_and_summed_over_cpus() {
        assert_eq!(conntrack_stat(CONNTRACK_6), (Some(20), Some(1), Some(2)));
        assert_eq!(conntrack_stat(CONNTRACK_4), (Some(160), Some(0), Some(1)));
        // A header without the columns, or no rows: not available, not 0.
        assert_eq!(
            conntrack_stat("entries found\n0000 0001\n"),
            (None, None, None)
        );
        assert_eq!(
            conntrack_stat(CONNTRACK_6.lines().next().unwrap()),
            (None, None, None)
        );
        assert_eq!(conntrack_stat(""), (None, None, None));
    }

    /// Two CPUs of a 6.x kernel (15 columns): processed, dropped, time_squeeze, ...
    const SOFTNET: &str = "\
00000494 00000003 00000010 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000
000027b1 00000001 0000000a 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000000 00000000
";

    #[test]
    fn softnet_sums_dropped_and_time_squeeze_over_cpus() {
        assert_eq!(softnet_stat(SOFTNET), Some((4, 26)));
        assert_eq!(softnet_stat(""), None);
        assert_eq!(
            softnet_stat("00000001\n"),
            None,
            "a row without the columns"
        );
    }

    const NETSTAT: &str = "\
TcpExt: SyncookiesSent SyncookiesRecv ListenOverflows ListenDrops TCPLostRetransmit
TcpExt: 0 0 12 14 3
IpExt: InNoRoutes InTruncatedPkts
IpExt: 0 0
";

    const SNMP: &str = "\
Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 3000
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 100 100 0 0 4 1000 1000 7 0 3 0
Udp: InDatagrams NoPorts
Udp: 5 0
";

    #[test]
    fn snmp_counters_come_from_their_section_pair() {
        assert_eq!(snmp_value(NETSTAT, "TcpExt", "ListenOverflows"), Some(12));
        assert_eq!(snmp_value(NETSTAT, "TcpExt", "ListenDrops"), Some(14));
        assert_eq!(snmp_value(NETSTAT, "TcpExt", "TCPLostRetransmit"), Some(3));
        assert_eq!(snmp_value(SNMP, "Tcp", "RetransSegs"), Some(7));
        // "Tcp:" is not "TcpExt:", and a missing field is not available.
        assert_eq!(snmp_value(SNMP, "Tcp", "ListenOverflows"), None);
        assert_eq!(snmp_value(NETSTAT, "IpExt", "Nope"), None);
        assert_eq!(snmp_value("", "Tcp", "RetransSegs"), None);
    }

    /// A fixture root: what [`read`] finds, and what it cannot.
    #[test]
    fn a_missing_file_is_not_available_rather_than_zero() {
        let d = tempfile::tempdir().unwrap();
        let empty = read(d.path(), Some("eth9"));
        assert_eq!(empty, KernelSample::default());
        let net = d.path().join("proc/self/net");
        std::fs::create_dir_all(net.join("stat")).unwrap();
        std::fs::write(net.join("stat/nf_conntrack"), CONNTRACK_6).unwrap();
        std::fs::write(net.join("softnet_stat"), SOFTNET).unwrap();
        std::fs::write(net.join("netstat"), NETSTAT).unwrap();
        std::fs::write(net.join("snmp"), SNMP).unwrap();
        let nf = d.path().join("proc/sys/net/netfilter");
        std::fs::create_dir_all(&nf).unwrap();
        std::fs::write(nf.join("nf_conntrack_count"), "40\n").unwrap();
        std::fs::write(nf.join("nf_conntrack_max"), "40\n").unwrap();
        let stats = d.path().join("sys/class/net/eth9/statistics");
        std::fs::create_dir_all(&stats).unwrap();
        // A driver with rx_dropped but no rx_missed_errors file.
        std::fs::write(stats.join("rx_dropped"), "5\n").unwrap();
        std::fs::write(stats.join("rx_fifo_errors"), "0\n").unwrap();
        let s = read(d.path(), Some("eth9"));
        assert_eq!(s.conntrack, Some((40, 40)));
        let c = s.counters;
        assert_eq!(
            (
                c.conntrack_drop,
                c.conntrack_early_drop,
                c.conntrack_insert_failed
            ),
            (Some(20), Some(1), Some(2))
        );
        assert_eq!(
            (c.softnet_dropped, c.softnet_time_squeeze),
            (Some(4), Some(26))
        );
        assert_eq!((c.listen_overflows, c.listen_drops), (Some(12), Some(14)));
        assert_eq!((c.retrans_segs, c.lost_retransmit), (Some(7), Some(3)));
        assert_eq!(
            (c.nic_rx_missed, c.nic_rx_dropped, c.nic_rx_fifo),
            (None, Some(5), Some(0))
        );
        // Without the run's interface: every interface but loopback.
        let lo = d.path().join("sys/class/net/lo/statistics");
        std::fs::create_dir_all(&lo).unwrap();
        std::fs::write(lo.join("rx_dropped"), "1000\n").unwrap();
        assert_eq!(read(d.path(), None).counters.nic_rx_dropped, Some(5));
    }

    #[test]
    fn growth_needs_both_reads_and_sums_keep_what_either_had() {
        let at = |drop, retrans| KernelCounters {
            conntrack_drop: drop,
            retrans_segs: retrans,
            ..KernelCounters::default()
        };
        let d = at(Some(25), Some(10)).since(at(Some(20), None));
        assert_eq!(d, at(Some(5), None));
        // Backwards (a wrapped per-CPU counter): 0, not 2^64 - 5.
        assert_eq!(
            at(Some(1), None).since(at(Some(6), None)),
            at(Some(0), None)
        );
        assert_eq!(
            at(Some(5), None).plus(at(None, Some(2))),
            at(Some(5), Some(2))
        );
        assert_eq!(at(Some(5), None).plus(at(Some(1), None)), at(Some(6), None));
        assert_eq!(at(Some(5), None).zeroed(), at(Some(0), None));
    }

    #[test]
    fn each_grown_counter_is_one_diagnosis_and_none_without_growth() {
        let none = KernelCounters::default();
        assert!(diagnoses(&none, ConntrackFill::default(), None).is_empty());
        let zeros = KernelCounters {
            conntrack_drop: Some(0),
            softnet_dropped: Some(0),
            retrans_segs: Some(0),
            ..none
        };
        assert!(diagnoses(&zeros, ConntrackFill::default(), None).is_empty());
        let all = KernelCounters {
            conntrack_drop: Some(20),
            softnet_dropped: Some(1),
            softnet_time_squeeze: Some(2),
            listen_overflows: Some(3),
            retrans_segs: Some(4),
            nic_rx_missed: Some(5),
            ..none
        };
        let fill = ConntrackFill {
            count_max: Some(40),
            max: Some(40),
        };
        let d = diagnoses(&all, fill, Some("eth9"));
        let codes: Vec<&str> = d.iter().map(Diagnosis::code).collect();
        assert_eq!(
            codes,
            [
                "conntrack_table_full",
                "softnet_backlog_drops",
                "softnet_time_squeeze",
                "listen_overflows",
                "tcp_retransmits",
                "nic_rx_drops"
            ]
        );
        let text = d[0].to_string();
        assert!(
            text.contains("nf_conntrack_count 40 of nf_conntrack_max 40")
                && text.contains("net.netfilter.nf_conntrack_max"),
            "{text}"
        );
        assert!(d[1].to_string().contains("net.core.netdev_max_backlog"));
        assert!(d[2].to_string().contains("net.core.netdev_budget"));
        assert!(d[3].to_string().contains("somaxconn"));
        assert!(d[5].to_string().contains("ethtool -G eth9"), "{}", d[5]);
    }
}
