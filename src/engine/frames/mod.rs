//! placeholder
pub mod accounting;
pub mod timetable;
pub use timetable::{FrameCursor, FrameGrid};
