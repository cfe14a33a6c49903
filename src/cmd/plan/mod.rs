//! `blaster plan`: how many generator machines a target load needs.
//!
//! Four dimensions are sized separately, each against one generator machine's usable
//! share, and the largest wins; one more machine coordinates (starts the shards,
//! collects and merges their histograms):
//!
//! | dimension | demand | one machine gives |
//! |---|---|---|
//! | connections | users / streams per connection | `--conns-per-machine` |
//! | CPU | users x (up + down msg/s) x cost per message, plus connections x (up + down msg/s) syscalls / syscalls per core | cores x CPU watermark (0.65) |
//! | uplink | users x up msg/s x (up bytes + frame overhead) x 8 | NIC Gbps x NIC watermark (0.7) |
//! | downlink | users x down msg/s x (down bytes + frame overhead) x 8 | NIC Gbps x NIC watermark |
//!
//! The syscall term counts one send and one receive per connection per tick: the
//! streams sharing a connection are batched into one write and one read. Watermarks
//! keep headroom so the generator never becomes the bottleneck it is there to find.
//!
//! Everything here is a pure function of [`PlanInput`] except [`input_from_args`],
//! which reads `--from` or `--from-frames`. The per-message cost is given
//! (`--cost-ns-per-msg`) or measured: a baseline's busy CPU per request (`--from`), or
//! a frames run's client CPU per frame sent or received (`--from-frames`).
//!
//! The flags are read in [`args`], the plan is sized in [`model`], its text is
//! [`render`]ed, and [`fleet_plan`] turns the answer into commands.

mod args;
mod command;
pub mod fleet_plan;
mod model;
mod render;
#[cfg(test)]
mod tests;

pub use args::{cost_from_report, frames_cost_from_report, input_from_args};
pub use command::command;
pub use model::*;
pub use render::render;
