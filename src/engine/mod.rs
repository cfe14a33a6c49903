//! The engine: one pinned worker thread per core, each owning an io_uring ring and a
//! pre-sized connection table, sending on an absolute timetable.
//!
//! - [`driver`]: the thread protocol every worker shares, and the outbox.
//! - [`worker_plan`]: what a worker is told before it starts, and its timetable.
//! - [`recorder`]: the histograms and counters a worker records per interval.
//! - [`backoff`]: reconnect delays, exponential with jitter (gRPC's defaults).
//! - [`token`]: what `user_data` carries (connection index, operation, generation).
//! - [`ring`]: ring setup with feature probing and fallback; push with a full-SQ path.
//! - [`iobuf`]: memory shared with the kernel, lent out one region at a time.
//! - [`conn_table`]: per-connection state and the in-flight FIFO of request instants.
//! - [`socket`]: creating sockets and mapping errno to error kinds.
//! - [`stamps`]: kernel receive timestamps, so responses are not timed by the wake-up.
//! - [`run_loop`]: the one worker loop; each workload brings its hooks.
//! - [`loop_core`]: what every worker embeds: the counted ring, the stop, the totals.
//! - [`pacing`]: the loop's bookkeeping: intervals, scans, stop, precision, wake.
//! - [`tcp`]: the TCP workload: dispatch due -> reap -> advance -> one submit.
//! - [`udp`]: the UDP workload: request/response matched by sequence, or blast.
//! - [`frames`]: the frames workload: a frame per tick per member, checked on arrival.
pub mod backoff;
pub mod buf_ring;
pub mod conn_table;
pub mod driver;
pub mod frames;
pub mod iobuf;
pub mod loop_core;
pub mod pacing;
pub mod recorder;
pub mod replay;
pub mod ring;
pub mod run_loop;
pub mod socket;
pub mod stamps;
pub mod tcp;
pub mod token;
pub mod udp;
pub mod worker_plan;

pub use driver::{Channels, Control, Ready};
pub use tcp::fit::GAP_SCALE;
pub use tcp::run_worker;
pub use worker_plan::{Transport, WorkerPlan};
