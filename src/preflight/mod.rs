//! In-binary checks the run depends on. Issue 6 adds the full machine check in
//! `scripts/preflight.sh` with the same check names; here: file descriptors.

pub mod ports;
pub mod walls;

use nix::sys::resource::{Resource, getrlimit, setrlimit};

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
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
    #[error("file descriptors: cannot read or raise RLIMIT_NOFILE: {0}")]
    Rlimit(nix::Error),
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
    fn small_plans_fit_and_huge_ones_explain() {
        assert!(ensure_fds(10, 64).is_ok());
        let e = ensure_fds(u64::MAX / 4, 64).unwrap_err().to_string();
        assert!(
            e.contains("RLIMIT_NOFILE") && e.contains("ulimit -Hn"),
            "{e}"
        );
    }
}
