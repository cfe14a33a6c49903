//! In-binary checks the run depends on, with the same check names as the full machine
//! check in `scripts/preflight.sh`: file descriptors and ports here ([`check_plan`],
//! which refuses a ring layout the plan computed but cannot run), memory and cores in
//! [`checks`], which `blaster preflight` prints in full.

pub mod checks;
mod command;
pub mod walls;

pub use command::command;

use crate::limits::FD_MARGIN;
use crate::ports;
use nix::sys::resource::{Resource, getrlimit, setrlimit};

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "file descriptors (EMFILE): the plan needs {wanted} ({connections} connections + \
         {FD_MARGIN}) but RLIMIT_NOFILE allows soft {soft}, hard {hard}; sockets live in \
         io_uring file tables of at most the limit each, and {per_core} connections per \
         core would need {rings} rings of {per_ring} (blaster uses at most \
         {RINGS_PER_CORE_MAX} rings per core of at least {RING_FILES_MIN}): raise the limit \
         (`ulimit -n {wanted}`, `ulimit -Hn {wanted}` as root; fs.nr_open = {nr_open} is the \
         ceiling), or use fewer connections or more cores"
    )]
    Rings {
        connections: u64,
        per_core: u64,
        hard: u64,
        rings: u64,
        per_ring: u64,
        soft: u64,
        wanted: u64,
        nr_open: String,
    },
    #[error("{0}")]
    Ports(#[from] ports::BudgetError),
    #[error(
        "file descriptors: the plan needs {needed} ({connections} connections + {margin} for \
         the process) but RLIMIT_NOFILE allows {hard} (soft {soft}, hard {hard}); raise the hard \
         limit (`ulimit -Hn {needed}` as root, or `nofile` in /etc/security/limits.conf; \
         fs.nr_open = {nr_open} is the ceiling) or use fewer connections"
    )]
    Fds {
        needed: u64,
        connections: u64,
        margin: u64,
        soft: u64,
        hard: u64,
        nr_open: String,
    },
    #[error(
        "memory: --workload frames needs {needed_human} ({needed} bytes) for its receive \
         accounting ({connections} connections x --room-size {room_size}: a sequence window \
         per member of each receiver's room), but MemAvailable is {available_human} \
         ({available} bytes); use smaller rooms or fewer connections on this machine (at \
         this room size at most {fit} connections)"
    )]
    FramesMemory {
        needed: u64,
        needed_human: String,
        available: u64,
        available_human: String,
        connections: u64,
        room_size: u64,
        fit: u64,
    },
    #[error("file descriptors: cannot read or raise RLIMIT_NOFILE: {0}")]
    Rlimit(nix::Error),
    /// A check of [`checks`] that FAILed: its line, as `scripts/preflight.sh` prints it.
    #[error("{0}")]
    Check(String),
    /// `blaster preflight` found checks that FAIL (their lines are on stdout).
    #[error("preflight: {count} check(s) FAIL: {names}")]
    Failed { count: usize, names: String },
}

/// The memory and cores checks of [`checks`] for `plan` on this machine: the first
/// FAIL as an error carrying its line.
pub fn check_host(plan: &crate::run_plan::RunPlan) -> Result<(), PreflightError> {
    frames_memory(plan)?;
    let needs = checks::Needs::of(plan);
    let found = checks::run_time(&needs, &checks::Host::this_machine());
    match checks::first_failure(&found) {
        Some(c) => Err(PreflightError::Check(c.to_string())),
        None => Ok(()),
    }
}

/// A frames plan's receive accounting (allocated whole at start, connections x room
/// size sequence windows) against the `MemAvailable` the plan gathered: a plan that
/// cannot fit is refused before anything connects, instead of aborting on allocation.
pub fn frames_memory(plan: &crate::run_plan::RunPlan) -> Result<(), PreflightError> {
    let (Some(f), Some(available)) = (&plan.frames, plan.mem_available) else {
        return Ok(());
    };
    let needed = f.accounting_bytes();
    if needed <= available {
        return Ok(());
    }
    let (connections, room_size) = (f.owned_connections().1, f.grid.room_size);
    let per_connection = needed.div_ceil(connections.max(1)).max(1);
    Err(PreflightError::FramesMemory {
        needed,
        needed_human: checks::human(needed),
        available,
        available_human: checks::human(available),
        connections,
        room_size,
        fit: available / per_connection,
    })
}

pub use crate::limits::{RING_FILES_MIN, RINGS_PER_CORE_MAX};

/// The checks a TCP run against a target needs before it connects: the ephemeral-port
/// budget of every (source, destination) pair, and the descriptor limit, raised to the
/// hard one. Sockets live in each ring's file table (capped at RLIMIT_NOFILE per ring,
/// not per process), so a plan beyond the limit runs with several rings per core: the
/// plan's [`RingLayout`](crate::run_plan::RingLayout), computed from the same limits when
/// it was built; a layout that does not fit is refused here.
pub fn check_plan(plan: &crate::run_plan::RunPlan) -> Result<(), PreflightError> {
    let conns = plan.connections as u64;
    if plan.transport != crate::engine::Transport::Tcp {
        ensure_fds(conns, FD_MARGIN)?;
        return Ok(());
    }
    if !plan.per_request
        && let Some(range) = plan.port_range
    {
        let budget = ports::check_budget(
            plan.connections,
            plan.sources.len(),
            plan.targets.len(),
            range,
        )?;
        if let Some(w) = port_search_warning(plan.sources.is_empty(), budget.per_pair_max, range) {
            crate::errln!("blaster: warning: {w}");
        }
    }
    // Raise the soft limit to the hard one: each ring's table may then be that large.
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(PreflightError::Rlimit)?;
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(1 << 20);
    let lim = ensure_fds(hard.min(nr_open).saturating_sub(FD_MARGIN), FD_MARGIN)?;
    match plan.ring_layout {
        Some(layout) if !layout.fits() => Err(PreflightError::Rings {
            connections: conns,
            per_core: layout.per_core,
            hard: lim.hard,
            rings: layout.rings,
            per_ring: layout.per_ring,
            soft: lim.soft,
            wanted: conns + FD_MARGIN,
            nr_open: std::fs::read_to_string("/proc/sys/fs/nr_open")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
        }),
        _ => Ok(()),
    }
}

/// Without `--source-ip` the kernel picks every port, and its search takes even ports
/// first and scans the whole range for each connect once they are gone: past half the
/// range per (source, destination) pair, connects slow to hundreds per second.
pub fn port_search_warning(
    kernel_picks: bool,
    per_pair: usize,
    range: ports::PortRange,
) -> Option<String> {
    let half = range.size() as usize / 2;
    (kernel_picks && per_pair > half).then(|| {
        format!(
            "ports: {per_pair} connections per (source, destination) pair are more than half \
             of ip_local_port_range {range} ({half}): the kernel's port search slows to \
             hundreds of connects per second past that point; give --source-ip addresses \
             (blaster then binds the ports itself), e.g. --source-ip 127.0.0.2-127.0.0.{} \
             on loopback",
            1 + per_pair.div_ceil(half.max(1)).max(2)
        )
    })
}

/// The file-descriptor limit after [`ensure_fds`].
#[derive(Debug, Clone, Copy)]
pub struct FdLimit {
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft RLIMIT_NOFILE to what the plan needs (up to the hard limit), or
/// explains exactly why the plan cannot run.
pub fn ensure_fds(connections: u64, margin: u64) -> Result<FdLimit, PreflightError> {
    let needed = connections + margin;
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(PreflightError::Rlimit)?;
    if needed <= soft {
        return Ok(FdLimit { soft, hard });
    }
    if needed > hard {
        let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        return Err(PreflightError::Fds {
            needed,
            connections,
            margin,
            soft,
            hard,
            nr_open,
        });
    }
    setrlimit(Resource::RLIMIT_NOFILE, needed, hard).map_err(PreflightError::Rlimit)?;
    Ok(FdLimit { soft: needed, hard })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_search_warning_starts_past_half_the_range() {
        let range = ports::PortRange::new(32768, 60999).unwrap();
        assert_eq!(port_search_warning(true, 14_116, range), None);
        let w = port_search_warning(true, 20_000, range).unwrap();
        assert!(w.contains("20000") && w.contains("--source-ip"), "{w}");
        assert_eq!(port_search_warning(false, 20_000, range), None);
    }

    /// A frames plan of `connections` in rooms of `room` on a machine with
    /// `mem_available` bytes.
    fn frames_plan(
        connections: &str,
        room: &str,
        mem_available: Option<u64>,
    ) -> crate::run_plan::RunPlan {
        use clap::Parser;
        let argv = [
            "blaster",
            "run",
            "--target",
            "127.0.0.1:9",
            "--workload",
            "frames",
            "--connections",
            connections,
            "--room-size",
            room,
            "--cores",
            "0",
        ];
        let crate::cli::Command::Run(a) = crate::cli::Cli::try_parse_from(argv).unwrap().command
        else {
            unreachable!()
        };
        let facts = crate::run_plan::HostFacts {
            mem_available,
            ..crate::run_plan::HostFacts::with_cores(&[0, 1])
                .resolving("127.0.0.1:9", "127.0.0.1:9".parse().unwrap())
        };
        crate::run_plan::RunPlan::build(&a, &facts).unwrap()
    }

    #[test]
    fn a_frames_plan_beyond_available_memory_is_refused_with_the_bytes() {
        let gib = 1u64 << 30;
        // 20,000 in one room: about 25 GB of sequence windows, against 8 GiB.
        let e = frames_memory(&frames_plan("20000", "20000", Some(8 * gib)))
            .unwrap_err()
            .to_string();
        let needed = crate::engine::frames::accounting::FrameBook::bytes_for(20_000, 20_000);
        for want in [
            format!("({needed} bytes)"),
            format!("({} bytes)", 8 * gib),
            "--room-size 20000".to_string(),
            "MemAvailable is 8.0 GiB".to_string(),
        ] {
            assert!(e.contains(&want), "{want:?} missing in {e}");
        }
        // What the message offers fits: the connections it names, at that room size.
        let fit: u64 = e
            .split("at most ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(crate::engine::frames::accounting::FrameBook::bytes_for(fit, 20_000) <= 8 * gib);
        assert!(crate::engine::frames::accounting::FrameBook::bytes_for(fit + 1, 20_000) > 8 * gib);
        // Small rooms fit; unknown memory is not refused here.
        assert!(frames_memory(&frames_plan("20000", "10", Some(8 * gib))).is_ok());
        assert!(frames_memory(&frames_plan("20000", "20000", None)).is_ok());
    }

    #[test]
    fn small_plans_fit_and_huge_ones_explain() {
        assert!(ensure_fds(10, 64).is_ok());
        let e = ensure_fds(u64::MAX / 4, 64).unwrap_err().to_string();
        assert!(
            e.contains("RLIMIT_NOFILE") && e.contains("ulimit -Hn"),
            "{e}"
        );
    }
}
