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

    /// The warning an unsynchronised clock earns: cross-machine start and latency
    /// figures depend on it.
    pub fn clock_warning(&self) -> Option<Diagnosis> {
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
