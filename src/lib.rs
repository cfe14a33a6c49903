//! blaster: an open-model load generator for raw TCP and UDP on io_uring, whose
//! numbers do not lie.
//!
//! ```text
//! main (cli) ──> run_plan::RunPlan (validated; every bad input is a clear error here)
//!    ├── cmd::preflight: port budget, descriptor limit (rings per core), memory, cores
//!    ├── cmd::run: spawn engine::worker(s) per core in --cores, pinned (one ring each; more
//!    │      than one per core when the connections exceed one ring's file table)
//!    │      worker = io_uring ring + ConnTable (pre-sized) + schedule shard + framer
//!    │               + engine::recorder (Histograms, Counters)
//!    │      loop: now = TSC -> dispatch due -> reap completions -> advance connections
//!    │            -> one submit for the batch -> wait until --spin before the next due
//!    │            send, then spin
//!    ├── collector (in cmd::run): per-second snapshots over crossbeam-channel, merged by
//!    │      adding histograms, live line on stderr; metrics::host samples core load
//!    │      and the interface each second
//!    └── report: text and JSON; metrics::gate decides validity (exit 3 when invalid)
//! ```
//!
//! Measurement semantics: every request has four instants — intended (from the
//! schedule), dispatched (handled by the loop), sent (send SQE queued for submission),
//! done (last response byte parsed). Latency = done - intended is the headline; service
//! time = done - sent is what closed-loop tools report; dispatch lag = dispatched -
//! intended is the generator's health, gated; connection wait = sent - dispatched shows
//! a target (or a too-small connection pool) that cannot keep up.
//!
//! `blaster` with no target runs [`cmd::baseline`]: the generator against the built-in
//! [`sink`] on loopback, stepping the rate up to find its own ceiling. `blaster plan`
//! ([`cmd::plan`]) sizes a generator cluster for a target load from such a measured
//! cost. `blaster search` ([`cmd::search`]) steps the rate against a target until an
//! [`slo`] breaks, and reports the max safe throughput and the knee. Every subcommand
//! lives under [`cmd`]; `docs/layout.md` lists every file with its first line.
//!
//! Imports point one way, each layer using only the layers before it: leaf helpers
//! ([`units`], [`limits`], [`bounded`], [`outcome`], [`diagnosis`], [`console`],
//! [`clock`], [`wallclock`], [`threads`], [`ports`]) -> the command line ([`cli`]) ->
//! [`proto`], [`request`], [`schedule`], [`transport`] -> [`engine`] (with the per-worker recorder,
//! `engine::recorder`, which the loops write) -> [`metrics`] -> [`sink`] ->
//! [`run_plan`] -> [`report`] -> [`slo`] -> the commands ([`cmd`]: run, preflight,
//! baseline, search, plan, report, compare, merge, sink). A helper a low layer needs
//! belongs in a low layer, not imported from above: `tests/layers.rs` reads this
//! order and fails on an import that points up it.
// Test code is exempt from the 120-line bound on functions (Cargo.toml [lints]): a
// test scenario may read top to bottom. Allowed under cfg(test) only, which exempts
// no non-test function: CI's `cargo clippy --all-targets` also lints this crate
// without cfg(test), where every non-test function is checked.
#![cfg_attr(test, allow(clippy::too_many_lines))]
pub mod bounded;
pub mod cli;
pub mod clock;
pub mod cmd;
pub mod console;
pub mod diagnosis;
pub mod engine;
pub mod limits;
pub mod metrics;
pub mod outcome;
pub mod ports;
pub mod proto;
pub mod report;
pub mod request;
pub mod run_plan;
pub mod schedule;
pub mod sink;
pub mod slo;
pub mod threads;
pub mod transport;
pub mod units;
pub mod wallclock;
