//! Measurements: four histograms and a set of counters per worker and interval,
//! merged across workers by adding histograms (never averaging percentiles), and the
//! validity gate that decides whether the generator itself was the bottleneck.
pub mod gate;
pub mod host;
pub mod recorder;

pub use gate::{Gate, Verdict};
pub use recorder::{Counters, ErrorKind, Histograms, Snapshot};
