//! Measurements: four histograms and a set of counters per worker and interval,
//! merged across workers by adding histograms (never averaging percentiles), and the
//! validity gate that decides whether the generator itself was the bottleneck.
//!
//! The per-worker recorder itself lives in [`crate::engine::recorder`] (the worker loops
//! write it); it is re-exported here for the layers above.
pub mod ci;
pub mod gate;
pub mod host;
pub mod kernel;
pub mod noise;
pub mod pacing_check;
pub mod spread;

pub use crate::engine::recorder::{Counters, ErrorKind, Histograms, Snapshot};
pub use gate::{Gate, Verdict};
