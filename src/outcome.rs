//! How a command ended, and the process exit code for it: a leaf, so every command
//! can return an [`Outcome`] without importing the application that maps it.

/// Exit codes, as documented in the README.
pub mod exit {
    pub const OK: i32 = 0;
    pub const RUNTIME: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const INVALID: i32 = 3;
    /// The run broke its `--slo` (an invalid run exits 3 instead), or a search's
    /// first step already broke it, or `compare` found a regression past its limit.
    pub const SLO_BROKEN: i32 = 4;
    /// An `--abort-if` condition held and stopped the run.
    pub const ABORTED: i32 = 5;
}

/// How a command that ran ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The run's generator was the bottleneck: the report says why.
    Invalid,
    /// The run was valid but broke its `--slo`; the report names the terms.
    SloBroken,
    /// `blaster compare`: NEW crossed a `--max-regression` limit.
    Regressed,
    /// An `--abort-if` condition held: the run stopped early, what it measured kept.
    Aborted,
}

impl Outcome {
    /// The process exit code of this outcome.
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Ok => exit::OK,
            Outcome::Invalid => exit::INVALID,
            Outcome::SloBroken | Outcome::Regressed => exit::SLO_BROKEN,
            Outcome::Aborted => exit::ABORTED,
        }
    }
}
