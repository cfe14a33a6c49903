//! blaster: an open-model load generator for raw TCP over io_uring.
pub mod sink;
