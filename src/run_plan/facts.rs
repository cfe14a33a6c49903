//! Host facts: everything a plan depends on beyond its arguments, gathered once before
//! the plan is built: the cores this process may use, the wall clock (for `--start-at`),
//! the addresses `--target` resolves to, the contents of the files the arguments name,
//! the ephemeral port range and the descriptor limits. (Whether stderr is a terminal is
//! not a plan's business: the plan keeps `--progress`/`--quiet` as given and
//! `report::progress` looks at the terminal when it draws.)
//!
//! [`HostFacts::gather`] is the only part that touches the machine (DNS, files, /proc,
//! getrlimit); [`RunPlan::build`](super::RunPlan::build) is then a pure function of
//! (arguments, facts), so every check and the ring layout can be tested with facts made
//! by hand. A fact that could not be found is kept as the error the build reports at the
//! point it needs the fact, so errors come in the same order as when the build read the
//! machine itself.

use super::{PlanError, err};
use crate::cli::RunArgs;
use crate::limits::{
    FD_MARGIN, MIX_FILE_BYTES_MAX, PAYLOAD_BYTES_MAX, PEM_FILE_BYTES_MAX, RATE_FILE_BYTES_MAX,
    RING_FILES_MIN, RINGS_PER_CORE_MAX,
};
use crate::ports::PortRange;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// RLIMIT_NOFILE (soft, hard) and `fs.nr_open`, the ceiling of the hard limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdFacts {
    pub soft: u64,
    pub hard: u64,
    /// `/proc/sys/fs/nr_open` (2^20 when unreadable, the kernel's default).
    pub nr_open: u64,
}

/// What the machine says, for one command line.
#[derive(Debug, Clone, Default)]
pub struct HostFacts {
    /// The cores this process may run on (its affinity mask).
    pub usable_cores: Vec<usize>,
    /// Wall clock, ns since the Unix epoch (`--start-at` in seconds from now).
    pub now_unix_ns: u64,
    /// Each `--target` as given, and its first address or why it has none.
    pub targets: Vec<(String, Result<SocketAddr, PlanError>)>,
    /// Each file the arguments name (`--body-file`, `--mix`, `--payload-file`,
    /// `--rate file:`), and its contents or why it could not be read.
    pub files: Vec<(PathBuf, Result<Vec<u8>, String>)>,
    /// `net.ipv4.ip_local_port_range` (`None`: unreadable).
    pub port_range: Option<PortRange>,
    /// The descriptor limits (`None`: getrlimit failed; the preflight says why).
    pub fds: Option<FdFacts>,
    /// `MemAvailable` of /proc/meminfo, bytes (`None`: unreadable). What a plan's
    /// start-up allocations are held to (the frames accounting).
    pub mem_available: Option<u64>,
    /// `--tls` without `--tls-ca` or `--tls-insecure`: the system's trusted roots, or
    /// why there are none (`None`: not needed).
    pub system_roots: Option<Result<Vec<rustls::pki_types::CertificateDer<'static>>, String>>,
    /// `--tls` without `--target` (the TLS baseline): the certificate its sink
    /// serves and its client trusts, made now, or why it could not be (`None`: not
    /// needed).
    pub baseline_cert: Option<Result<crate::transport::tls::SelfSigned, String>>,
    /// `--replay`: what the first reading of the recording found, or why it failed
    /// (`None`: no replay).
    pub replay: Option<Result<super::replay::ReplayFacts, String>>,
}

impl HostFacts {
    /// Reads what `a` needs from this machine: resolves every `--target`, reads the
    /// files the build will read (the same conditions as the build), and the limits.
    pub fn gather(a: &RunArgs) -> HostFacts {
        // Each file with its bound: a path to /dev/zero or an endless FIFO costs the
        // bound and a one-line error, never the machine's memory.
        let mut paths: Vec<(PathBuf, u64)> = Vec::new();
        let payload_max = PAYLOAD_BYTES_MAX as u64;
        if a.grpc.is_some() {
            if let Some(f) = &a.grpc_message {
                paths.push((f.clone(), payload_max));
            }
            if let Some(f) = &a.grpc_proto {
                paths.push((f.clone(), payload_max));
            }
        } else if a.http.is_some() {
            if a.body.is_none()
                && let Some(f) = &a.body_file
            {
                paths.push((f.clone(), payload_max));
            }
        } else if let Some(f) = &a.mix {
            paths.push((f.clone(), MIX_FILE_BYTES_MAX));
        } else if a.heartbeat_payload.is_none()
            && a.payload.is_none()
            && let Some(f) = &a.payload_file
        {
            paths.push((f.clone(), payload_max));
        }
        if a.tls.tls
            && let Some(f) = &a.tls.tls_ca
        {
            paths.push((f.clone(), PEM_FILE_BYTES_MAX));
        }
        if a.tls.tls {
            for f in [&a.tls.tls_cert, &a.tls.tls_key].into_iter().flatten() {
                paths.push((f.clone(), PEM_FILE_BYTES_MAX));
            }
        }
        if let Some(path) = a.rate.as_deref().and_then(rate_file) {
            paths.push((PathBuf::from(path), RATE_FILE_BYTES_MAX));
        }
        let mut files: Vec<(PathBuf, Result<Vec<u8>, String>)> = paths
            .into_iter()
            .map(|(p, limit)| {
                let bytes = crate::bounded::read(&p, limit).map_err(|e| e.to_string());
                (p, bytes)
            })
            .collect();
        // Feeder files the templates name (`{line:FILE}`, `{csv:FILE:COLUMN}`), in
        // the flags and in the mix file just read.
        let mut texts: Vec<String> = [&a.http, &a.payload, &a.body]
            .into_iter()
            .flatten()
            .cloned()
            .chain(a.headers.iter().cloned())
            .collect();
        if let Some(Ok(mix)) =
            (a.mix.as_ref()).and_then(|m| files.iter().find(|(p, _)| p == m).map(|(_, b)| b))
        {
            texts.push(String::from_utf8_lossy(mix).into_owned());
        }
        for path in texts
            .iter()
            .flat_map(|t| crate::request::template::feed_paths(t))
        {
            if !files.iter().any(|(p, _)| *p == path) {
                let bytes = crate::bounded::read(&path, crate::limits::FEED_FILE_BYTES_MAX)
                    .map_err(|e| e.to_string());
                files.push((path, bytes));
            }
        }
        let nofile = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE);
        HostFacts {
            usable_cores: super::usable_cores(),
            now_unix_ns: crate::wallclock::now_unix_ns(),
            targets: a
                .target
                .iter()
                .map(|t| (t.clone(), super::parse::resolve("target", t)))
                .collect(),
            files,
            port_range: crate::ports::read_port_range(Path::new("/")).ok(),
            fds: nofile.ok().map(|(soft, hard)| FdFacts {
                soft,
                hard,
                nr_open: std::fs::read_to_string("/proc/sys/fs/nr_open")
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .unwrap_or(1 << 20),
            }),
            mem_available: std::fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|t| parse_mem_available(&t)),
            system_roots: (a.tls.tls
                && !a.target.is_empty()
                && a.tls.tls_ca.is_none()
                && !a.tls.tls_insecure)
                .then(crate::transport::tls::system_roots),
            baseline_cert: (a.tls.tls && a.target.is_empty())
                .then(crate::transport::tls::self_signed_localhost),
            replay: super::replay::read_facts(a),
        }
    }

    /// A machine with these usable cores and nothing else known: no target resolves,
    /// no file exists. Tests add what they need.
    pub fn with_cores(usable: &[usize]) -> HostFacts {
        HostFacts {
            usable_cores: usable.to_vec(),
            ..HostFacts::default()
        }
    }

    /// `given` resolves to `addr`.
    pub fn resolving(mut self, given: &str, addr: SocketAddr) -> HostFacts {
        self.targets.push((given.to_string(), Ok(addr)));
        self
    }

    /// `path` holds `bytes`.
    pub fn with_file(mut self, path: impl Into<PathBuf>, bytes: &[u8]) -> HostFacts {
        self.files.push((path.into(), Ok(bytes.to_vec())));
        self
    }

    /// The address `--target given` resolved to.
    pub(super) fn target(&self, given: &str) -> Result<SocketAddr, PlanError> {
        match self.targets.iter().find(|(g, _)| g == given) {
            Some((_, r)) => r.clone(),
            None => Err(err("target", format!("{given:?} was not resolved"))),
        }
    }

    /// The bytes of `path`, or the read error's text.
    pub(super) fn file(&self, path: &Path) -> Result<&[u8], String> {
        match self.files.iter().find(|(p, _)| p == path) {
            Some((_, Ok(b))) => Ok(b),
            Some((_, Err(e))) => Err(e.clone()),
            None => Err("not read".into()),
        }
    }

    /// The text of `path` (what `read_to_string` gives, and its error for bytes that
    /// are not UTF-8).
    pub(super) fn text(&self, path: &Path) -> Result<&str, String> {
        std::str::from_utf8(self.file(path)?)
            .map_err(|_| "stream did not contain valid UTF-8".to_string())
    }
}

/// `MemAvailable:  123456 kB` of /proc/meminfo -> bytes.
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix("MemAvailable:")?;
        let kb: u64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kb.saturating_mul(1024))
    })
}

/// The path of a `--rate file:PATH` spec.
fn rate_file(spec: &str) -> Option<&str> {
    match spec.trim().split_once(':') {
        Some(("file", path)) if !path.trim().is_empty() => Some(path.trim()),
        _ => None,
    }
}

/// How a TCP run's sockets spread over io_uring file tables: each ring's table holds at
/// most the descriptor limit the preflight raises the soft limit to (the hard limit,
/// capped by `fs.nr_open`), less the process's margin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLayout {
    /// Connections per core (the busiest core).
    pub per_core: u64,
    /// Sockets one ring's table may hold.
    pub per_ring: u64,
    /// Rings per core, >= 1.
    pub rings: u64,
}

impl RingLayout {
    /// The layout of `connections` over `cores` under `fds`.
    pub fn of(connections: u64, cores: usize, fds: FdFacts) -> RingLayout {
        // ensure_fds raises the soft limit to min(hard, nr_open) when that is higher.
        let wanted = fds.hard.min(fds.nr_open).saturating_sub(FD_MARGIN) + FD_MARGIN;
        let soft = fds.soft.max(wanted.min(fds.hard));
        let per_ring = soft.saturating_sub(FD_MARGIN);
        let per_core = connections.div_ceil(cores.max(1) as u64);
        RingLayout {
            per_core,
            per_ring,
            rings: per_core.div_ceil(per_ring.max(1)).max(1),
        }
    }

    /// Whether blaster runs this layout: one ring, or several of at least
    /// [`RING_FILES_MIN`] sockets and at most [`RINGS_PER_CORE_MAX`] per core.
    pub fn fits(&self) -> bool {
        self.rings <= 1 || (self.per_ring >= RING_FILES_MIN && self.rings <= RINGS_PER_CORE_MAX)
    }
}
