//! Errors mapped to the wall that caused them (DESIGN.md, "Errors users will hit").
//!
//! A failed connect at scale is rarely the target's fault: the generator ran out of
//! file descriptors, of ephemeral ports for a (source, destination) pair, or a full
//! conntrack table is dropping SYNs. [`wall_hint`] turns an errno plus the numbers the
//! run already knows ([`WallContext`]) into one line: which wall, the numbers, the fix.
//! Errnos that are the target's doing (ECONNREFUSED, ECONNRESET, EPIPE) get no hint:
//! they are counted per kind and the connection reconnects with backoff.
//!
//! [`errno_name`] gives the symbolic name used as the key of
//! `connections.failed_by_errno` in the JSON report.

use crate::ports::PortRange;
use std::path::Path;

/// The symbolic name of a Linux errno: `ECONNREFUSED`, `EADDRNOTAVAIL`, ...; aliases
/// resolve to the kernel's primary name (`EAGAIN`, not `EWOULDBLOCK`). Any other value
/// in `0..4096` (the kernel's errno space: a CQE's `res` is in `-4095..0` on failure)
/// is `E<n>`; anything else is `E?`. Called when the report is assembled, never per
/// request, so the names may be built as strings.
pub fn errno_name(errno: i32) -> String {
    match nix::errno::Errno::from_raw(errno) {
        // nix's variants are the kernel's names, aliases folded into the primary one;
        // their Debug form is the name.
        nix::errno::Errno::UnknownErrno if (0..4096).contains(&errno) => format!("E{errno}"),
        nix::errno::Errno::UnknownErrno => "E?".to_string(),
        e => format!("{e:?}"),
    }
}

/// What the run knows when a connection fails; every field is optional in spirit
/// (zero or `None` when unknown) and the hint says less rather than guessing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WallContext {
    /// RLIMIT_NOFILE soft and hard limits in force.
    pub fd_soft: u64,
    pub fd_hard: u64,
    /// Descriptors the plan needs (connections + the process's own).
    pub fds_needed: u64,
    /// `fs.nr_open`, the ceiling of the hard limit even for root.
    pub nr_open: Option<u64>,
    /// `fs.file-max`, the system-wide file table (ENFILE).
    pub file_max: Option<u64>,
    /// `ip_local_port_range`.
    pub port_range: Option<PortRange>,
    /// Connections on the busiest (source, destination) pair.
    pub conns_per_pair: usize,
    /// Source IPs (0 = the kernel's choice) and destinations.
    pub sources: usize,
    pub targets: usize,
    /// `(nf_conntrack_count, nf_conntrack_max)` when conntrack is loaded.
    pub conntrack: Option<(u64, u64)>,
}

/// One line for an errno that hit a wall of the generator's machine: which wall, the
/// numbers, the fix. `None` for errnos that are the target's doing or carry no hint.
///
/// - EMFILE / ENFILE: file descriptors (per process / system wide).
/// - EADDRNOTAVAIL: ephemeral ports per (source, destination) pair, or a `--source-ip`
///   that is not assigned to this host (bind fails with the same errno).
/// - ETIMEDOUT: conntrack, when it is loaded and at least 99% full (entries expire while
///   the run goes on, so "full" is read with a little slack); otherwise the target's
///   accept backlog or dropped SYNs.
pub fn wall_hint(errno: i32, ctx: &WallContext) -> Option<String> {
    match errno {
        libc::EMFILE => Some(emfile(ctx)),
        libc::ENFILE => Some(enfile(ctx)),
        libc::EADDRNOTAVAIL => Some(eaddrnotavail(ctx)),
        libc::ETIMEDOUT => Some(etimedout(ctx)),
        _ => None,
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "unknown".into(), |v| v.to_string())
}

fn emfile(ctx: &WallContext) -> String {
    let needed = ctx.fds_needed;
    let mut fix = if needed > ctx.fd_hard {
        format!(
            "raise the hard limit (as root: `ulimit -Hn {needed}`, or `nofile` in \
             /etc/security/limits.conf or LimitNOFILE= for a service)"
        )
    } else {
        format!("raise the soft limit (`ulimit -n {needed}`, within the hard limit)")
    };
    match ctx.nr_open {
        Some(n) if needed > n => fix.push_str(&format!(
            ", and first fs.nr_open = {n}, which caps it (`sysctl -w fs.nr_open={needed}`)"
        )),
        n => fix.push_str(&format!("; fs.nr_open = {} is the ceiling", opt(n))),
    }
    format!(
        "file descriptors: EMFILE (too many open files): RLIMIT_NOFILE is {} (soft) / {} \
         (hard) but the plan needs {needed}; {fix}; or use fewer connections per process",
        ctx.fd_soft, ctx.fd_hard
    )
}

fn enfile(ctx: &WallContext) -> String {
    format!(
        "file descriptors: ENFILE (the system-wide file table is full): fs.file-max = {} \
         while the plan needs {} in this process; raise it (`sysctl -w fs.file-max=N`) or \
         stop other processes holding files",
        opt(ctx.file_max),
        ctx.fds_needed
    )
}

fn eaddrnotavail(ctx: &WallContext) -> String {
    let per_pair = ctx.conns_per_pair;
    let sources = if ctx.sources == 0 {
        "1 source IP (the kernel's choice)".to_string()
    } else if ctx.sources == 1 {
        "1 source IP".to_string()
    } else {
        format!("{} source IPs", ctx.sources)
    };
    let dests = match ctx.targets {
        1 => "1 destination".to_string(),
        n => format!("{n} destinations"),
    };
    let Some(range) = ctx.port_range else {
        return format!(
            "ports: EADDRNOTAVAIL (no free local port or address) with {per_pair} connections \
             per (source, destination) pair over {sources} x {dests} (ip_local_port_range \
             unknown); use more source IPs (--source-ip), more destinations (--target, \
             repeated) or a wider net.ipv4.ip_local_port_range"
        );
    };
    let size = range.size();
    let head = format!(
        "ports: EADDRNOTAVAIL (no free local port or address) with {per_pair} connections per \
         (source, destination) pair over {sources} x {dests} and ip_local_port_range {range} \
         ({size} ports)"
    );
    if per_pair as u64 > u64::from(size) {
        format!(
            "{head}; use more source IPs (--source-ip), more destinations (--target, \
             repeated) or widen the range (sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\")"
        )
    } else {
        format!(
            "{head}: the plan fits, so other sockets hold the ports (TIME_WAIT from closed \
             connections: --linger0 or net.ipv4.tcp_tw_reuse=1; other processes; \
             ip_local_reserved_ports) or a --source-ip address is not assigned to this host"
        )
    }
}

fn etimedout(ctx: &WallContext) -> String {
    match ctx.conntrack {
        // count >= 99% of max, in integers: count * 100 >= max * 99.
        Some((count, max)) if max > 0 && u128::from(count) * 100 >= u128::from(max) * 99 => {
            format!(
                "conntrack: connect timed out (ETIMEDOUT) and nf_conntrack_count {count} has \
                 reached nf_conntrack_max {max}, so new SYNs are dropped; raise it \
                 (`sysctl -w net.netfilter.nf_conntrack_max={}`), lower --connect-rate, or \
                 exempt the test traffic from tracking (`-j NOTRACK` in the raw table)",
                max.saturating_mul(2)
            )
        }
        ct => {
            let ct = match ct {
                Some((count, max)) => format!("conntrack is not full: {count} of {max}"),
                None => "conntrack is not loaded".to_string(),
            };
            format!(
                "connect timeouts (ETIMEDOUT): the target's accept backlog is full or its SYNs \
                 are dropped ({ct}); on the target raise the listen backlog, \
                 net.core.somaxconn and net.ipv4.tcp_max_syn_backlog, or lower --connect-rate"
            )
        }
    }
}

/// `(nf_conntrack_count, nf_conntrack_max)`, read where the per-interval kernel
/// counters read them (one reader for the preflight wall and the run's diagnosis).
pub use crate::metrics::kernel::read_conntrack;

/// Reads one number from `<root>/<rel>` (`proc/sys/fs/nr_open`, `proc/sys/fs/file-max`,
/// ...); `None` if absent or not a number.
pub fn read_proc_u64(root: &Path, rel: &str) -> Option<u64> {
    std::fs::read_to_string(root.join(rel))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_names() {
        let cases = [
            (libc::ECONNREFUSED, "ECONNREFUSED"),
            (libc::ETIMEDOUT, "ETIMEDOUT"),
            (libc::EADDRNOTAVAIL, "EADDRNOTAVAIL"),
            (libc::EMFILE, "EMFILE"),
            (libc::ENFILE, "ENFILE"),
            (libc::ECONNRESET, "ECONNRESET"),
            (libc::EPIPE, "EPIPE"),
            (libc::ENETUNREACH, "ENETUNREACH"),
            (libc::EHOSTUNREACH, "EHOSTUNREACH"),
            (libc::EADDRINUSE, "EADDRINUSE"),
            (libc::ENOBUFS, "ENOBUFS"),
            (libc::ENOMEM, "ENOMEM"),
            (libc::EINPROGRESS, "EINPROGRESS"),
            (libc::EWOULDBLOCK, "EAGAIN"),
            (libc::ECANCELED, "ECANCELED"),
            (0, "E0"),
            (7, "E2BIG"),
            (512, "E512"),
            (4095, "E4095"),
            (4096, "E?"),
            (-1, "E?"),
            (i32::MIN, "E?"),
        ];
        for (errno, name) in cases {
            assert_eq!(errno_name(errno), name, "{errno}");
        }
        // Every value names itself and unknown names are distinct numbers.
        for n in 0..4096 {
            let s = errno_name(n);
            assert!(s.starts_with('E') && s.len() > 1, "{n}: {s}");
            if s[1..].bytes().all(|b| b.is_ascii_digit()) {
                assert_eq!(s[1..].parse::<i32>().unwrap(), n);
            }
        }
    }

    fn ctx() -> WallContext {
        WallContext {
            fd_soft: 1024,
            fd_hard: 20_000,
            fds_needed: 30_064,
            nr_open: Some(1_048_576),
            file_max: Some(2_470_000),
            port_range: PortRange::new(32768, 60999),
            conns_per_pair: 30_000,
            sources: 0,
            targets: 1,
            conntrack: None,
        }
    }

    #[test]
    fn fd_walls_name_limits_and_fixes() {
        let h = wall_hint(libc::EMFILE, &ctx()).unwrap();
        for needle in [
            "file descriptors: EMFILE",
            "1024 (soft) / 20000 (hard)",
            "needs 30064",
            "ulimit -Hn 30064",
            "fs.nr_open = 1048576 is the ceiling",
        ] {
            assert!(h.contains(needle), "{needle}: {h}");
        }
        let soft_only = WallContext {
            fds_needed: 5000,
            ..ctx()
        };
        let h = wall_hint(libc::EMFILE, &soft_only).unwrap();
        assert!(h.contains("`ulimit -n 5000`") && !h.contains("-Hn"), "{h}");
        let past_nr_open = WallContext {
            fds_needed: 2_000_000,
            nr_open: Some(1_048_576),
            ..ctx()
        };
        let h = wall_hint(libc::EMFILE, &past_nr_open).unwrap();
        assert!(h.contains("sysctl -w fs.nr_open=2000000"), "{h}");
        let h = wall_hint(libc::ENFILE, &ctx()).unwrap();
        assert!(h.contains("fs.file-max = 2470000") && h.contains("sysctl -w fs.file-max"));
    }

    #[test]
    fn port_wall_tells_an_overfull_pair_from_a_busy_range() {
        let h = wall_hint(libc::EADDRNOTAVAIL, &ctx()).unwrap();
        for needle in [
            "ports: EADDRNOTAVAIL",
            "30000 connections per (source, destination) pair",
            "1 source IP (the kernel's choice) x 1 destination",
            "32768-60999 (28232 ports)",
            "--source-ip",
            "--target",
            "ip_local_port_range=\"1024 65535\"",
        ] {
            assert!(h.contains(needle), "{needle}: {h}");
        }
        let fits = WallContext {
            conns_per_pair: 5000,
            sources: 4,
            targets: 2,
            ..ctx()
        };
        let h = wall_hint(libc::EADDRNOTAVAIL, &fits).unwrap();
        assert!(h.contains("4 source IPs x 2 destinations"), "{h}");
        assert!(
            h.contains("the plan fits") && h.contains("--linger0"),
            "{h}"
        );
        assert!(h.contains("not assigned to this host"), "{h}");
        let unknown = WallContext {
            port_range: None,
            ..ctx()
        };
        assert!(
            wall_hint(libc::EADDRNOTAVAIL, &unknown)
                .unwrap()
                .contains("unknown")
        );
    }

    #[test]
    fn timeouts_name_conntrack_only_when_it_is_full() {
        let full = WallContext {
            conntrack: Some((262_000, 262_144)),
            ..ctx()
        };
        let h = wall_hint(libc::ETIMEDOUT, &full).unwrap();
        assert!(h.starts_with("conntrack: "), "{h}");
        assert!(
            h.contains("262000") && h.contains("nf_conntrack_max 262144"),
            "{h}"
        );
        assert!(h.contains("nf_conntrack_max=524288"), "{h}");
        let roomy = WallContext {
            conntrack: Some((100, 262_144)),
            ..ctx()
        };
        let h = wall_hint(libc::ETIMEDOUT, &roomy).unwrap();
        assert!(
            h.contains("accept backlog") && h.contains("not full: 100 of 262144"),
            "{h}"
        );
        assert!(
            h.contains("somaxconn") && h.contains("tcp_max_syn_backlog"),
            "{h}"
        );
        let h = wall_hint(libc::ETIMEDOUT, &ctx()).unwrap();
        assert!(h.contains("conntrack is not loaded"), "{h}");
        let zero = WallContext {
            conntrack: Some((0, 0)),
            ..ctx()
        };
        assert!(
            !wall_hint(libc::ETIMEDOUT, &zero)
                .unwrap()
                .starts_with("conntrack")
        );
    }

    #[test]
    fn target_errors_have_no_wall() {
        for e in [
            libc::ECONNREFUSED,
            libc::ECONNRESET,
            libc::EPIPE,
            0,
            -5,
            99_999,
        ] {
            assert_eq!(wall_hint(e, &ctx()), None, "{e}");
        }
        for e in [
            libc::EMFILE,
            libc::ENFILE,
            libc::EADDRNOTAVAIL,
            libc::ETIMEDOUT,
        ] {
            let h = wall_hint(e, &WallContext::default()).unwrap();
            assert!(!h.contains('\n'), "{h}");
        }
    }

    #[test]
    fn conntrack_is_read_from_a_fixture_root() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_conntrack(dir.path()), None, "not loaded");
        let nf = dir.path().join("proc/sys/net/netfilter");
        std::fs::create_dir_all(&nf).unwrap();
        std::fs::write(nf.join("nf_conntrack_count"), "1234\n").unwrap();
        assert_eq!(read_conntrack(dir.path()), None, "max missing");
        std::fs::write(nf.join("nf_conntrack_max"), "262144\n").unwrap();
        assert_eq!(read_conntrack(dir.path()), Some((1234, 262_144)));
        std::fs::write(nf.join("nf_conntrack_max"), "lots").unwrap();
        assert_eq!(read_conntrack(dir.path()), None);
        let fs = dir.path().join("proc/sys/fs");
        std::fs::create_dir_all(&fs).unwrap();
        std::fs::write(fs.join("nr_open"), "1048576\n").unwrap();
        assert_eq!(
            read_proc_u64(dir.path(), "proc/sys/fs/nr_open"),
            Some(1_048_576)
        );
    }
}
