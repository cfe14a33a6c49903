//! How many rings the TCP sink runs and how large their tables are.
//!
//! Accepted sockets go straight into a ring's fixed-file table (io_uring direct
//! descriptors), so they use no ordinary file descriptor and RLIMIT_NOFILE does not
//! bound how many the process holds. It still bounds each ring's table: the kernel
//! refuses to register more slots than RLIMIT_NOFILE. To hold more, the sink runs
//! several rings per core, each with its own SO_REUSEPORT listener; the kernel hashes
//! connections over the listeners, so each ring is planned for at most
//! [`TABLE_FILL_PERCENT`] of its table and the rest is margin for the hash's
//! unevenness (at 17,000 expected per ring the standard deviation is about 130).
//!
//! Without direct descriptors (an old kernel, or `SinkConfig::direct_descriptors`
//! false) every connection is an ordinary descriptor: one ring per core, and the
//! process's RLIMIT_NOFILE is the limit, as for any server.

use io_uring::IoUring;

use super::token::INDEX_LIMIT;

/// The kernel's ceiling on one ring's fixed-file table (`IORING_MAX_FIXED_FILES`).
pub(crate) const FIXED_FILES_MAX: usize = INDEX_LIMIT as usize;
/// Plan each ring for at most this share of its table.
pub(crate) const TABLE_FILL_PERCENT: usize = 85;
/// Slack added to a table beyond its planned share.
const TABLE_SLACK: usize = 64;
/// Most rings one core may run (a bound, with the 20-bit slot index, on the total).
pub(crate) const RINGS_PER_CORE_MAX: usize = 256;

/// The shape of a TCP sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RingLayout {
    /// Accepted sockets are direct descriptors.
    pub direct: bool,
    pub rings_per_core: usize,
    /// Slots per ring (the fixed-file table, or the connection table with ordinary
    /// descriptors).
    pub table: usize,
    /// Why direct descriptors are not used, when they are not.
    pub fallback: Option<String>,
}

/// Plans `total` connections over `cores` cores, each ring's table capped at
/// `table_cap` (RLIMIT_NOFILE, or less), or, when `direct` is false, one ring per core
/// with ordinary descriptors.
pub(crate) fn plan(total: usize, cores: usize, table_cap: usize, direct: bool) -> RingLayout {
    assert!(total > 0 && cores > 0);
    if !direct {
        return RingLayout {
            direct: false,
            rings_per_core: 1,
            table: total.div_ceil(cores).min(FIXED_FILES_MAX),
            fallback: None,
        };
    }
    let table_cap = table_cap.clamp(1, FIXED_FILES_MAX);
    let usable = (table_cap * TABLE_FILL_PERCENT / 100).max(1);
    let rings_per_core = total
        .div_ceil(cores)
        .div_ceil(usable)
        .clamp(1, RINGS_PER_CORE_MAX);
    let share = total.div_ceil(cores * rings_per_core);
    let table = (share * 100 / TABLE_FILL_PERCENT + TABLE_SLACK).min(table_cap);
    RingLayout {
        direct: true,
        rings_per_core,
        table,
        fallback: None,
    }
}

/// Raises RLIMIT_NOFILE's soft limit to its hard limit (best effort) and returns the
/// soft limit: the largest fixed-file table the kernel lets a ring register.
pub(crate) fn fixed_table_cap() -> usize {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    let soft = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    usize::try_from(soft)
        .unwrap_or(FIXED_FILES_MAX)
        .min(FIXED_FILES_MAX)
}

/// Whether this kernel lets a ring register a sparse fixed-file table of `table`
/// slots (direct descriptors need it); the error says why not. The probe ring lives
/// on a thread of its own: tearing a ring down can leave task work for its creator,
/// which would interrupt the caller's next blocking call with EINTR.
pub(crate) fn probe_direct(table: usize) -> Result<(), String> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let ring = IoUring::new(4).map_err(|e| format!("io_uring_setup: {e}"))?;
                ring.submitter()
                    .register_files_sparse(table as u32)
                    .map_err(|e| format!("registering a sparse table of {table} files: {e}"))
            })
            .join()
            .unwrap_or_else(|_| Err("the probe thread panicked".into()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_plan_is_one_ring_per_core_with_margin() {
        let l = plan(64, 1, 20_000, true);
        assert_eq!((l.rings_per_core, l.table), (1, 64 * 100 / 85 + 64));
        assert!(l.direct);
    }

    #[test]
    fn plans_past_the_descriptor_limit_spread_over_rings() {
        // 25,000 on one core with a 20,000 cap: two rings of about 12,500.
        let l = plan(25_000, 1, 20_000, true);
        assert_eq!(l.rings_per_core, 2);
        assert!(l.table >= 12_500 * 100 / 85 && l.table <= 20_000, "{l:?}");
        // A million on one core: 59 rings of 17,000 at most, tables at the cap.
        let l = plan(1_000_000, 1, 20_000, true);
        assert_eq!(l.rings_per_core, 59);
        assert_eq!(l.table, 20_000);
        // Spread over cores, fewer rings each.
        assert_eq!(plan(1_000_000, 4, 20_000, true).rings_per_core, 15);
    }

    #[test]
    fn every_planned_ring_stays_below_its_fill_target() {
        for total in [1, 100, 16_999, 17_000, 17_001, 500_000, 1_048_576] {
            for cores in [1, 2, 3] {
                let l = plan(total, cores, 20_000, true);
                let rings = l.rings_per_core * cores;
                assert!(
                    rings * l.table * TABLE_FILL_PERCENT / 100 >= total,
                    "{total} {l:?}"
                );
                assert!(l.table <= 20_000);
            }
        }
    }

    #[test]
    fn ordinary_descriptors_use_one_ring_per_core() {
        let l = plan(30_000, 2, 20_000, false);
        assert_eq!((l.direct, l.rings_per_core, l.table), (false, 1, 15_000));
    }
}
