//! A run's place in a fleet, as its report states it: which shard of which run, the
//! common start and how far this shard missed it, and what the kernel says of the
//! clock that measured both. `blaster merge` reads these back to tie shards together
//! and to show the start skews side by side.

use crate::diagnosis::Diagnosis;
use crate::wallclock::ClockSync;
use serde::{Deserialize, Serialize};

/// The `fleet` key of the JSON report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetReport {
    /// `--run-id`, or derived from the start and the plan.
    pub run_id: String,
    /// This shard's 0-based index, and the number of shards (`--shard i/N`).
    pub shard: u32,
    pub shards: u32,
    /// 16 hex digits over what every shard must share (targets, timetable, requests,
    /// totals): a merge refuses files whose fingerprints differ.
    pub plan_fingerprint: String,
    /// `--start-at`, Unix ms (`null`: started at once).
    pub start_at_unix_ms: Option<u64>,
    /// `--start-at` as RFC 3339.
    pub start_at: Option<String>,
    /// How late the first request went out against its place on the common timetable,
    /// by this host's wall clock: (wall clock when the timetable began - start-at) +
    /// (the first request's dispatch - its due instant). `null` without `--start-at` or
    /// without a request.
    pub start_skew_ns: Option<u64>,
    /// The host clock's state from adjtimex (`null` where it cannot be read).
    pub clock: Option<ClockSync>,
}

impl FleetReport {
    /// `shard 2/8 of run <id>`, or `run <id>` for a whole run.
    pub fn describe(&self) -> String {
        if self.shards <= 1 {
            format!("run {}", self.run_id)
        } else {
            format!(
                "shard {}/{} of run {}",
                self.shard, self.shards, self.run_id
            )
        }
    }

    /// Whether this run read the wall clock: a common start (`--start-at`) or a shard
    /// of several. A run on one machine times everything on the TSC and never does.
    pub fn reads_wall_clock(&self) -> bool {
        self.shards > 1 || self.start_at.is_some()
    }

    /// The warning an unsynchronised clock earns where the wall clock matters
    /// ([`FleetReport::reads_wall_clock`]): cross-machine start and latency figures
    /// depend on it. Elsewhere the clock's state is recorded (`clock`), not warned about.
    pub fn clock_warning(&self) -> Option<Diagnosis> {
        if !self.reads_wall_clock() {
            return None;
        }
        let c = self.clock?;
        c.unsynchronised.then_some(Diagnosis::ClockUnsynchronised {
            max_error_us: c.max_error_us,
        })
    }

    /// One line for the text report.
    pub fn text_line(&self) -> String {
        let mut line = self.describe();
        if let Some(at) = &self.start_at {
            line.push_str(&format!(", start at {at}"));
        }
        if let Some(s) = self.start_skew_ns {
            line.push_str(&format!(", start skew {}", crate::units::fmt_ns(s)));
        }
        match self.clock {
            Some(c) if c.unsynchronised => line.push_str(", clock UNSYNCHRONISED"),
            Some(c) => line.push_str(&format!(
                ", clock synchronised (max error {} us, estimated {} us)",
                c.max_error_us, c.est_error_us
            )),
            None => line.push_str(", clock state unknown"),
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(shards: u32, start_at: Option<&str>, unsynchronised: bool) -> FleetReport {
        FleetReport {
            run_id: "r".into(),
            shard: 0,
            shards,
            plan_fingerprint: "0".into(),
            start_at_unix_ms: start_at.map(|_| 1),
            start_at: start_at.map(str::to_string),
            start_skew_ns: None,
            clock: Some(ClockSync {
                unsynchronised,
                max_error_us: 16_000_000,
                est_error_us: 0,
            }),
        }
    }

    #[test]
    fn the_clock_note_is_for_runs_that_read_the_wall_clock() {
        // One machine, started at once: the TSC times everything, no note.
        assert_eq!(fleet(1, None, true).clock_warning(), None);
        // A common start, or a shard of several: the note, when unsynchronised.
        let at = Some("2025-06-01T12:00:00Z");
        assert!(fleet(1, at, true).clock_warning().is_some());
        assert!(fleet(3, None, true).clock_warning().is_some());
        assert_eq!(fleet(3, at, false).clock_warning(), None);
    }
}
