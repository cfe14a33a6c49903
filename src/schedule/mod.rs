//! Arrival schedules: pure functions from a request's sequence number to the instant
//! it is due, in nanoseconds since the run's start. Nothing here reads a clock or
//! sleeps: the worker compares the due instant of its next request with the TSC.
//!
//! Sharding interleaves one global sequence: with W workers, worker w owns global
//! requests w, w+W, w+2W, ... so the aggregate arrivals are evenly spaced on the wire
//! even though each worker only sees every W-th one.
mod constant;

pub use constant::Constant;

use crate::clock::Nanos;

/// The due instant of a worker's k-th request.
pub trait Schedule {
    /// Due instant (ns since start) of this worker's request number `k` (0-based).
    fn due_ns(&self, k: u64) -> Nanos;
    /// Global sequence number of this worker's k-th request.
    fn global_seq(&self, k: u64) -> u64;
}
