//! Arrival schedules: pure functions from a request's sequence number to the instant
//! it is due, in nanoseconds since the run's start. Nothing here reads a clock or
//! sleeps: the worker compares the due instant of its next request with the TSC.
//!
//! Two independent choices make a schedule:
//!
//! - the **rate shape** ([`RateShape`], parsed by [`parse_rate_spec`] from `--rate`):
//!   the intended rate over time and its integral `Λ(t) = ∫0^t rate`;
//! - the **arrival process** ([`ArrivalKind`]): `constant` puts global request n at
//!   `Λ⁻¹(n)` (evenly paced in Λ); `poisson` puts a unit-rate Poisson process through
//!   the same time change, `Λ⁻¹(E_1 + ... + E_n)` — so `burst` with `poisson` is a
//!   Markov-modulated Poisson process with no special case.
//!
//! Either way the schedule is an absolute timetable: a worker that falls behind finds
//! its overdue requests already due and sends them at once.
//!
//! Sharding: with constant arrivals W workers interleave one global sequence (worker w
//! owns global requests w, w+W, w+2W, ...) so the aggregate is evenly spaced on the
//! wire; with Poisson arrivals each worker runs its own Poisson process at rate/W from
//! its own derived seed, and their superposition is Poisson at the full rate.
//!
//! Machine shards (`--shard i/N`) cut the same global sequence once more: see
//! [`shard`] for the rule and why it differs between paced and Poisson arrivals.
//!
//! [`Arrivals`] is what a worker holds: one enum over the three timetables, with
//! [`Schedule`] for the due instants and [`Arrivals::count_before`] for the number of
//! requests before the run's end (known in advance only for constant arrivals).
//!
//! The frames workload (`--workload frames`) has a timetable of its own, [`frames`]:
//! every connection sends one frame per tick at its phase within the tick; [`room_mix`]
//! places the members of `--members-per-connection` slots in their rooms.
mod constant;
pub mod frames;
mod poisson;
pub mod room_mix;
mod shapes;
pub mod shard;

pub use constant::{Constant, Paced};
pub use frames::{FrameCursor, FrameGrid, SENDERS_ALL};
pub use poisson::{Poisson, exp1};
pub use room_mix::{RoomLayout, SlotMap};
pub use shapes::{
    CHAOS_SAMPLE_NS, CHAOS_SAMPLES_MAX, RateShape, RateSpec, SHAPE_PIECES_MAX, lorenz_x,
    parse_rate_csv, parse_rate_file, parse_rate_spec, parse_rate_spec_in,
};
pub use shard::Shard;

use crate::clock::Nanos;

/// The due instant of a worker's k-th request.
pub trait Schedule {
    /// Due instant (ns since start) of this worker's request number `k` (0-based).
    /// `Nanos::MAX` means never (a shape whose rate fell to 0 for good).
    fn due_ns(&self, k: u64) -> Nanos;
    /// Global sequence number of this worker's k-th request.
    fn global_seq(&self, k: u64) -> u64;
}

/// `--arrivals`: how requests are spread within the intended rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArrivalKind {
    /// Evenly paced: request n at `Λ⁻¹(n)`.
    #[default]
    Constant,
    /// Exponential gaps from the seeded generator: request n at `Λ⁻¹(E_1 + ... + E_n)`.
    Poisson,
}

impl std::str::FromStr for ArrivalKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "constant" => Ok(ArrivalKind::Constant),
            "poisson" => Ok(ArrivalKind::Poisson),
            other => Err(format!("expected constant or poisson, got {other:?}")),
        }
    }
}

impl std::fmt::Display for ArrivalKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ArrivalKind::Constant => "constant",
            ArrivalKind::Poisson => "poisson",
        })
    }
}

/// One worker's timetable: what a worker holds in place of [`Constant`].
#[derive(Debug, Clone)]
pub enum Arrivals {
    /// A flat rate, evenly paced (the fastest path: no shape lookups).
    Constant(Constant),
    /// Any shape, evenly paced.
    Paced(Paced),
    /// Any shape, Poisson arrivals.
    Poisson(Poisson),
}

impl Arrivals {
    /// Worker `index` of `workers` following `shape` with `kind` arrivals; `seed` is the
    /// run's seed (Poisson derives a stream per worker from it). Out-of-range
    /// `workers`/`index` are clamped, never a panic.
    pub fn new(
        kind: ArrivalKind,
        shape: &RateShape,
        workers: usize,
        index: usize,
        seed: u64,
    ) -> Self {
        Self::sharded(kind, shape, workers, index, seed, Shard::WHOLE)
    }

    /// As [`Arrivals::new`] for worker `index` of `workers` on machine shard `shard`:
    /// its share of the global timetable (see [`shard`]).
    pub fn sharded(
        kind: ArrivalKind,
        shape: &RateShape,
        workers: usize,
        index: usize,
        seed: u64,
        shard: Shard,
    ) -> Self {
        let workers = workers.max(1);
        let index = index.min(workers - 1);
        let (lanes, lane) = shard.lanes(workers as u64, index as u64);
        let (lanes, lane) = (lanes as usize, lane as usize);
        match (kind, shape.constant_rps()) {
            (ArrivalKind::Constant, Some(rate)) => {
                Arrivals::Constant(Constant::new(rate, lanes, lane))
            }
            (ArrivalKind::Constant, None) => {
                Arrivals::Paced(Paced::new(shape.clone(), lanes, lane))
            }
            (ArrivalKind::Poisson, _) => {
                Arrivals::Poisson(Poisson::sharded(shape.clone(), workers, index, seed, shard))
            }
        }
    }

    /// This worker's requests due strictly before `end_ns`, when that is known without
    /// walking the timetable: `Some` for constant arrivals, `None` for Poisson (stop
    /// when `due_ns(k) >= end_ns` instead).
    pub fn count_before(&self, end_ns: Nanos) -> Option<u64> {
        match self {
            Arrivals::Constant(c) => Some(c.count_before(end_ns)),
            Arrivals::Paced(p) => Some(p.count_before(end_ns)),
            Arrivals::Poisson(_) => None,
        }
    }
}

impl Schedule for Arrivals {
    #[inline]
    fn due_ns(&self, k: u64) -> Nanos {
        match self {
            Arrivals::Constant(c) => c.due_ns(k),
            Arrivals::Paced(p) => p.due_ns(k),
            Arrivals::Poisson(p) => p.due_ns(k),
        }
    }

    #[inline]
    fn global_seq(&self, k: u64) -> u64 {
        match self {
            Arrivals::Constant(c) => c.global_seq(k),
            Arrivals::Paced(p) => p.global_seq(k),
            Arrivals::Poisson(p) => p.global_seq(k),
        }
    }
}

/// Rounds a fractional instant to ns; infinity (never) saturates to `Nanos::MAX`.
#[inline]
fn to_nanos(t_ns: f64) -> Nanos {
    // `as` saturates: +inf -> u64::MAX, NaN -> 0.
    t_ns.round() as Nanos
}

/// The splitmix64 finaliser: a bijective 64-bit mix, for deriving seeds.
#[inline]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of worker `index`'s own stream, derived from the run's seed.
pub fn worker_seed(seed: u64, index: u64) -> u64 {
    mix64(seed ^ mix64(index.wrapping_add(1)))
}

/// Smallest k with `due(k) >= end`, for a non-decreasing `due`: gallops from `guess`,
/// then bisects, so a close guess costs a few evaluations and a bad one O(log k).
fn first_at_or_after(due: impl Fn(u64) -> Nanos, end: Nanos, guess: u64) -> u64 {
    let before = |k: u64| due(k) < end;
    // Bracket [lo, hi]: due(lo - 1) < end (or lo = 0) and due(hi) >= end (or hi = MAX).
    let (mut lo, mut hi);
    if before(guess) {
        lo = guess.saturating_add(1);
        hi = lo;
        let mut step = 1u64;
        while hi < u64::MAX && before(hi) {
            lo = hi + 1;
            hi = hi.saturating_add(step);
            step = step.saturating_mul(2);
        }
    } else {
        hi = guess;
        lo = guess;
        let mut step = 1u64;
        while lo > 0 {
            let c = lo.saturating_sub(step);
            if before(c) {
                lo = c + 1;
                break;
            }
            hi = c;
            lo = c;
            step = step.saturating_mul(2);
        }
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if before(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The shape of a spec that must parse (tests only).
#[cfg(test)]
pub(crate) fn shape_of(spec: &str, duration_ns: Nanos) -> RateShape {
    match parse_rate_spec(spec, duration_ns, 1) {
        Ok(RateSpec::Shaped(s)) => s,
        other => panic!("{spec}: {other:?}"),
    }
}

#[cfg(test)]
mod tests;
