//! The process's resident memory, for the sink's memory-per-connection figure.

use crate::metrics::host::rss_bytes;

/// Memory figures of a TCP sink at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct MemoryFigures {
    /// RSS before the sink started (the rest of the process).
    pub rss_before_start_bytes: u64,
    /// RSS once every ring, table and buffer pool existed, with no connection.
    pub rss_started_bytes: u64,
    /// RSS now.
    pub rss_bytes: u64,
    /// (RSS now − RSS before start) / connections held: everything the sink costs,
    /// its pre-sized tables and rings included, per connection. `None` with none
    /// held.
    pub user_bytes_per_connection: Option<f64>,
    /// (RSS now − RSS once started) / connections held: what each further
    /// connection costs. `None` with none held.
    pub marginal_bytes_per_connection: Option<f64>,
}

impl MemoryFigures {
    /// The figures for `open` connections held now, from the two earlier readings.
    pub fn now(rss_before_start: u64, rss_started: u64, open: u64) -> MemoryFigures {
        let rss = rss_bytes().unwrap_or(0);
        let per = |base: u64| (open > 0).then(|| rss.saturating_sub(base) as f64 / open as f64);
        MemoryFigures {
            rss_before_start_bytes: rss_before_start,
            rss_started_bytes: rss_started,
            rss_bytes: rss,
            user_bytes_per_connection: per(rss_before_start),
            marginal_bytes_per_connection: per(rss_started),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_connection_needs_connections() {
        let m = MemoryFigures::now(1, 1, 0);
        assert_eq!(m.user_bytes_per_connection, None);
        let m = MemoryFigures::now(0, 0, 10);
        assert!(m.user_bytes_per_connection.expect("some") > 0.0);
    }
}
