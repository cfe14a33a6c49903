//! What a search's steps climb: the request rate, or a frames run's connection count.

use super::{Step, err};
use crate::limits::{CONNECTIONS_MAX, RATE_RPS_MAX};
use crate::run_plan::{PlanError, check_rate};

/// What the steps climb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    /// The request rate (requests/s), at the fixed `--connections`.
    Rate,
    /// The connection count of a frames run, in whole rooms of `room_size`.
    Connections { room_size: usize },
}

impl Axis {
    /// The smallest difference between two step values (0: continuous).
    pub(super) fn quantum(self) -> f64 {
        match self {
            Axis::Rate => 0.0,
            Axis::Connections { room_size } => room_size as f64,
        }
    }

    /// `v` rounded down to a step value.
    pub(super) fn floor(self, v: f64) -> f64 {
        match self.quantum() {
            0.0 => v,
            q => (v / q).floor() * q,
        }
    }

    /// `v` rounded up to a step value.
    pub(super) fn ceil(self, v: f64) -> f64 {
        match self.quantum() {
            0.0 => v,
            q => (v / q).ceil() * q,
        }
    }

    /// The largest step value.
    pub(super) fn limit(self) -> f64 {
        match self {
            Axis::Rate => RATE_RPS_MAX,
            Axis::Connections { .. } => self.floor(CONNECTIONS_MAX as f64),
        }
    }

    /// A step's value on this axis.
    pub(super) fn of(self, s: &Step) -> f64 {
        match self {
            Axis::Rate => s.intended_rps,
            Axis::Connections { .. } => s.connections as f64,
        }
    }

    /// The JSON name of the axis.
    pub fn name(self) -> &'static str {
        match self {
            Axis::Rate => "rate",
            Axis::Connections { .. } => "connections",
        }
    }

    /// `--start`, `--step` or `--max` on this axis: a rate, or a connection count
    /// that is a whole number of rooms.
    pub(super) fn check(self, flag: &'static str, v: f64) -> Result<f64, PlanError> {
        let Axis::Connections { room_size } = self else {
            return check_rate(flag, v);
        };
        let whole = v.fract() == 0.0 && v >= room_size as f64 && self.floor(v) == v;
        if !(whole && v <= CONNECTIONS_MAX as f64) {
            return Err(err(
                flag,
                format!(
                    "counts connections with --workload frames: a whole number of rooms (a \
                     multiple of --room-size {room_size}) up to {CONNECTIONS_MAX}, got {v}"
                ),
            ));
        }
        Ok(v)
    }
}
