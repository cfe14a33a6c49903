//! Rate shapes: the intended rate as a function of time, parsed from one `--rate` spec.
//!
//! Every shape is stored the same way: a sorted list of pieces on which the rate is
//! linear in time (constant is the special case of slope 0), each carrying the
//! cumulative count `Λ(t0) = ∫0^t0 rate` at its start. Then
//!
//! - `Λ(t)` is one binary search plus a quadratic: [`RateShape::cumulative`];
//! - its inverse `Λ⁻¹(n)` (the instant the n-th request is due) is one search on the
//!   pieces' cumulative counts plus the stable root of a quadratic:
//!   [`RateShape::inverse`]. Callers walking `n` upwards pass a cursor (the piece of
//!   the previous answer) so the search is amortised O(1);
//! - the two-state `burst` shape repeats one cycle of pieces forever: `Λ` adds whole
//!   cycles, so a week-long burst run costs two pieces, not millions.
//!
//! The last piece of a non-repeating shape extends to infinity at a constant rate; a
//! shape whose rate ends at 0 (`ramp:5000..0/60s`) schedules a finite number of requests
//! and `inverse` answers infinity beyond them.
//!
//! `chaos` is the Lorenz system's x(t), integrated with RK4 from a seeded start once, at
//! parse time, into a table of one sample per 10 ms of the run (coarser for runs longer
//! than [`CHAOS_SAMPLES_MAX`] samples), linear between samples. So evaluation is as cheap
//! as any other shape and the same seed always gives the same timetable.

use super::mix64;
use crate::clock::Nanos;
use crate::limits::RATE_RPS_MAX;
use crate::units::fmt_number;
use std::sync::Arc;

const NS_PER_S: f64 = 1e9;
/// Pieces a `step` or `file` shape may have (each is 32 bytes, shared by all workers).
pub const SHAPE_PIECES_MAX: usize = 1 << 20;
/// Samples of the `chaos` table: 2^19 x 10 ms is 87 minutes at full resolution; longer
/// runs sample more coarsely so the table stays at 16 MiB.
pub const CHAOS_SAMPLES_MAX: usize = 1 << 19;
/// Default spacing of the `chaos` table's samples.
pub const CHAOS_SAMPLE_NS: u64 = 10_000_000;
/// Largest RK4 step, in Lorenz time units: 0.01 keeps the integration error far below
/// what the normalisation to [-1, 1] can show.
const LORENZ_STEP_MAX: f64 = 0.01;
/// Lorenz time integrated before the first sample, so the seeded start has fallen onto
/// the attractor.
const LORENZ_BURN_IN: f64 = 20.0;
/// x of the Lorenz attractor stays within about ±20: dividing by this normalises it.
const LORENZ_X_SCALE: f64 = 20.0;
/// Seed stream of the chaos start (distinct from the per-worker Poisson streams).
const CHAOS_SEED_STREAM: u64 = 0xc4a0_5eed_0000_0001;

/// What `--rate` asks for.
#[derive(Debug, Clone)]
pub enum RateSpec {
    /// `max`: as fast as the send path allows (no timetable).
    Max,
    /// A timetable following this rate shape.
    Shaped(RateShape),
}

/// One piece: from `t0_ns` to the next piece's start the rate is
/// `rate0 + slope * (t - t0_ns)` requests per ns; `cum0` is `Λ(t0_ns)`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Piece {
    t0_ns: f64,
    rate0: f64,
    slope: f64,
    cum0: f64,
}

impl Piece {
    /// Requests due in the first `dt` ns of the piece.
    #[inline]
    fn count(&self, dt: f64) -> f64 {
        self.rate0 * dt + 0.5 * self.slope * dt * dt
    }

    /// Rate (per ns) `dt` ns into the piece.
    #[inline]
    fn rate(&self, dt: f64) -> f64 {
        (self.rate0 + self.slope * dt).max(0.0)
    }

    /// Smallest `dt >= 0` with `count(dt) >= c`; infinity when the piece never gets
    /// there. Uses the cancellation-free root `2c / (a + sqrt(a² + 2bc))`.
    #[inline]
    fn solve(&self, c: f64) -> f64 {
        if c <= 0.0 {
            return 0.0;
        }
        let disc = self.rate0 * self.rate0 + 2.0 * self.slope * c;
        if disc < f64::MIN_POSITIVE {
            // Negative (the piece never gets there), or below f64's normal range:
            // rates under ~1e-145/s square to 0 and the root came out twice too late.
            return self.solve_small(c);
        }
        let denom = self.rate0 + disc.sqrt();
        if denom > 0.0 {
            2.0 * c / denom
        } else {
            f64::INFINITY
        }
    }

    /// [`Piece::solve`] when `a² + 2bc` is negative or underflowed: the same root from
    /// square roots of each term, so no intermediate leaves f64's range.
    #[cold]
    fn solve_small(&self, c: f64) -> f64 {
        let (a, b) = (self.rate0, self.slope);
        let s = (2.0 * b.abs()).sqrt() * c.sqrt(); // sqrt(|2bc|)
        let root = if b >= 0.0 {
            a.hypot(s)
        } else if s <= a {
            (a - s).sqrt() * (a + s).sqrt()
        } else {
            return f64::INFINITY;
        };
        let denom = a + root;
        if denom > 0.0 {
            2.0 * c / denom
        } else {
            f64::INFINITY
        }
    }
}

/// One cycle of a repeating shape: its length and the requests due in it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cycle {
    len_ns: f64,
    count: f64,
}

/// The intended rate over time, with its integral `Λ` and the inverse `Λ⁻¹`.
/// Cheap to clone (the pieces are shared), `Send + Sync`.
#[derive(Clone)]
pub struct RateShape {
    pieces: Arc<[Piece]>,
    cycle: Option<Cycle>,
    spec: Arc<str>,
}

impl std::fmt::Debug for RateShape {
    /// The spec and the table's size, not the table (a chaos table has 500k pieces).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateShape")
            .field("spec", &self.spec)
            .field("pieces", &self.pieces.len())
            .field("cycle", &self.cycle)
            .finish()
    }
}

/// Collects pieces left to right, keeping the running time and count.
struct Builder {
    pieces: Vec<Piece>,
    t_ns: f64,
    cum: f64,
}

impl Builder {
    fn new() -> Self {
        Builder {
            pieces: Vec::new(),
            t_ns: 0.0,
            cum: 0.0,
        }
    }

    /// Appends `len_ns` of a rate going linearly from `from_rps` to `to_rps`.
    fn linear(&mut self, len_ns: f64, from_rps: f64, to_rps: f64) {
        if len_ns <= 0.0 {
            return;
        }
        let p = Piece {
            t0_ns: self.t_ns,
            rate0: from_rps / NS_PER_S,
            slope: (to_rps - from_rps) / NS_PER_S / len_ns,
            cum0: self.cum,
        };
        self.cum += p.count(len_ns);
        self.t_ns += len_ns;
        self.pieces.push(p);
    }

    /// The last piece: `rate_rps` from here on, forever.
    fn tail(mut self, rate_rps: f64, spec: &str) -> RateShape {
        self.pieces.push(Piece {
            t0_ns: self.t_ns,
            rate0: rate_rps / NS_PER_S,
            slope: 0.0,
            cum0: self.cum,
        });
        RateShape {
            pieces: self.pieces.into(),
            cycle: None,
            spec: spec.into(),
        }
    }

    /// The pieces so far, repeated forever.
    fn repeat(self, spec: &str) -> RateShape {
        RateShape {
            cycle: Some(Cycle {
                len_ns: self.t_ns,
                count: self.cum,
            }),
            pieces: self.pieces.into(),
            spec: spec.into(),
        }
    }
}

impl RateShape {
    /// A constant rate. `rate_rps` must be positive, finite and at most
    /// [`RATE_RPS_MAX`].
    pub fn constant(rate_rps: f64) -> Result<RateShape, String> {
        crate::units::check_rate(rate_rps, RATE_RPS_MAX, "requests/s")?;
        Ok(Builder::new().tail(rate_rps, &fmt_number(rate_rps)))
    }

    /// The spec this shape was parsed from, for the report.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// The rate when it never changes (the fast [`super::Constant`] schedule applies).
    pub fn constant_rps(&self) -> Option<f64> {
        match (&*self.pieces, self.cycle) {
            ([p], None) => Some(p.rate0 * NS_PER_S),
            _ => None,
        }
    }

    /// Highest intended rate at any instant, requests/s (sizes backlogs: rate x timeout).
    pub fn peak_rps(&self) -> f64 {
        let ends = self.pieces.iter().enumerate().map(|(i, p)| {
            let len = self.piece_len(i);
            let end = if len.is_finite() { p.rate(len) } else { 0.0 };
            p.rate(0.0).max(end)
        });
        ends.fold(0.0, f64::max) * NS_PER_S
    }

    /// Intended rate at `t_ns` ns after the start, requests/s: the per-second report's
    /// "intended" column.
    pub fn rate_at(&self, t_ns: f64) -> f64 {
        let (_, t) = self.fold_cycle(t_ns.max(0.0));
        let i = self.piece_at(t);
        let p = &self.pieces[i];
        p.rate((t - p.t0_ns).clamp(0.0, self.piece_len(i))) * NS_PER_S
    }

    /// `Λ(t)`: requests due in `[0, t_ns)` (fractional).
    pub fn cumulative(&self, t_ns: f64) -> f64 {
        let mut cursor = 0;
        self.cumulative_from(t_ns, &mut cursor)
    }

    /// [`RateShape::cumulative`] starting its search at piece `*cursor` and leaving the
    /// answer's piece there: walking `t_ns` upwards (the pacing fit, once per dispatch)
    /// makes each call O(1) instead of a binary search. Any cursor value is safe (a
    /// wrong one costs a binary search).
    #[inline]
    pub fn cumulative_from(&self, t_ns: f64, cursor: &mut usize) -> f64 {
        if t_ns.is_nan() || t_ns <= 0.0 {
            return 0.0;
        }
        let (cycles, t) = self.fold_cycle(t_ns);
        let i = self.piece_at_from(t, cursor);
        let p = &self.pieces[i];
        let within = p.cum0 + p.count((t - p.t0_ns).clamp(0.0, self.piece_len(i)));
        match self.cycle {
            Some(c) => cycles * c.count + within,
            None => within,
        }
    }

    /// Requests intended in `[from_ns, to_ns)`: `Λ(to) - Λ(from)`.
    pub fn expected_between(&self, from_ns: f64, to_ns: f64) -> f64 {
        (self.cumulative(to_ns) - self.cumulative(from_ns)).max(0.0)
    }

    /// Mean intended rate over the first `duration_ns`, requests/s.
    pub fn mean_rps(&self, duration_ns: Nanos) -> f64 {
        if duration_ns == 0 {
            return self.rate_at(0.0);
        }
        self.cumulative(duration_ns as f64) / (duration_ns as f64 / NS_PER_S)
    }

    /// `Λ⁻¹(count)`: the earliest instant (ns, fractional) by which `count` requests
    /// are due; 0 for `count <= 0`, infinity when the shape never gets there.
    pub fn inverse(&self, count: f64) -> f64 {
        let mut cursor = 0;
        self.inverse_from(count, &mut cursor)
    }

    /// [`RateShape::inverse`] starting its search at piece `*cursor` and leaving the
    /// answer's piece there: walking `count` upwards makes each call O(1). Any cursor
    /// value is safe (a wrong one costs a binary search).
    #[inline]
    pub fn inverse_from(&self, count: f64, cursor: &mut usize) -> f64 {
        if count.is_nan() || count <= 0.0 {
            return 0.0;
        }
        match self.cycle {
            None => self.inverse_within(count, cursor),
            Some(c) => {
                // Whole cycles first, then the rest (in (0, count]) within one cycle, so
                // a count that ends exactly on a cycle lands at the end of its burst.
                let mut k = ((count / c.count).ceil() - 1.0).max(0.0);
                let mut rest = count - k * c.count;
                if rest > c.count {
                    k += 1.0;
                    rest -= c.count;
                }
                let rest = rest.clamp(f64::MIN_POSITIVE, c.count);
                k * c.len_ns + self.inverse_within(rest, cursor)
            }
        }
    }

    /// Inverse within the pieces (one cycle for a repeating shape); `c > 0`.
    #[inline]
    fn inverse_within(&self, c: f64, cursor: &mut usize) -> f64 {
        let n = self.pieces.len();
        let fits = |i: usize| self.pieces[i].cum0 < c && c <= self.piece_end_count(i);
        let h = (*cursor).min(n - 1);
        let i = if fits(h) {
            h
        } else if h + 1 < n && fits(h + 1) {
            h + 1
        } else {
            self.pieces
                .partition_point(|p| p.cum0 < c)
                .saturating_sub(1)
        };
        *cursor = i;
        let p = &self.pieces[i];
        let len = self.piece_len(i);
        let dt = p.solve(c - p.cum0);
        if dt > len {
            // Only the tail is unbounded; a finite piece overshoots by rounding only.
            if len.is_finite() && c <= self.piece_end_count(i) {
                return p.t0_ns + len;
            }
            return f64::INFINITY;
        }
        p.t0_ns + dt
    }

    /// Splits `t` into whole cycles and the time within the cycle.
    #[inline]
    fn fold_cycle(&self, t: f64) -> (f64, f64) {
        match self.cycle {
            Some(c) if c.len_ns > 0.0 => {
                let k = (t / c.len_ns).floor();
                (k, (t - k * c.len_ns).clamp(0.0, c.len_ns))
            }
            _ => (0.0, t),
        }
    }

    /// Index of the piece holding instant `t` (within a cycle).
    #[inline]
    fn piece_at(&self, t: f64) -> usize {
        #[cfg(test)]
        SEARCHES.with(|n| n.set(n.get() + 1));
        self.pieces
            .partition_point(|p| p.t0_ns <= t)
            .saturating_sub(1)
    }

    /// [`RateShape::piece_at`] trying the cursor's piece, the next one and the first
    /// (a repeating shape's next cycle) before searching; the answer's piece is left in
    /// `*cursor`. Piece `i` holds `t` when `t0(i) <= t` and
    /// the next piece starts after `t` (or there is none); the first piece also holds
    /// every `t` before it, as `piece_at` says.
    #[inline]
    fn piece_at_from(&self, t: f64, cursor: &mut usize) -> usize {
        let n = self.pieces.len();
        let holds = |i: usize| {
            (i == 0 || self.pieces[i].t0_ns <= t)
                && self.pieces.get(i + 1).is_none_or(|next| t < next.t0_ns)
        };
        let h = (*cursor).min(n - 1);
        let i = if holds(h) {
            h
        } else if h + 1 < n && holds(h + 1) {
            h + 1
        } else if holds(0) {
            0 // the next cycle of a repeating shape
        } else {
            self.piece_at(t)
        };
        *cursor = i;
        i
    }

    /// Length of piece `i` in ns (infinite for a non-repeating shape's tail).
    #[inline]
    fn piece_len(&self, i: usize) -> f64 {
        match (self.pieces.get(i + 1), self.cycle) {
            (Some(next), _) => next.t0_ns - self.pieces[i].t0_ns,
            (None, Some(c)) => c.len_ns - self.pieces[i].t0_ns,
            (None, None) => f64::INFINITY,
        }
    }

    /// `Λ` at the end of piece `i` (infinite for a tail with a positive rate).
    #[inline]
    fn piece_end_count(&self, i: usize) -> f64 {
        match (self.pieces.get(i + 1), self.cycle) {
            (Some(next), _) => next.cum0,
            (None, Some(c)) => c.count,
            (None, None) if self.pieces[i].rate0 > 0.0 => f64::INFINITY,
            (None, None) => self.pieces[i].cum0,
        }
    }
}

/// Parses one `--rate` spec (the caller prefixes errors with `--rate: `):
///
/// | spec | rate |
/// |---|---|
/// | `5000` | constant |
/// | `max` | as fast as possible ([`RateSpec::Max`]; the plan decides where it is allowed) |
/// | `step:1000..50000+1000/30s` | 1000/s for 30 s, then 2000/s, ... up to 50000/s, held |
/// | `ramp:0..50000/60s` | linear from 0 to 50000/s over 60 s, then held |
/// | `spike:base=1000,peak=10000,at=30s,for=5s` | base, with peak in [at, at+for) |
/// | `burst:base=500,peak=5000,on=200ms,off=2s` | peak for `on`, base for `off`, repeated (starts with `on`) |
/// | `chaos:base=2000,amp=0.5[,unit=1s]` | base x (1 + amp x Lorenz x(t)/20 clamped to ±1); `unit` = wall time per Lorenz time unit |
/// | `file:rates.csv` | `time_s,rate` rows, linear between rows, first rate before the first row, last after the last |
///
/// `duration_ns` is the run's length (the `chaos` table covers it; a `spike` must start
/// within it); `seed` is the run's seed (the `chaos` start).
pub fn parse_rate_spec(s: &str, duration_ns: Nanos, seed: u64) -> Result<RateSpec, String> {
    parse_rate_spec_in(s, duration_ns, seed, &|path| {
        crate::bounded::read_to_string(
            std::path::Path::new(path),
            crate::limits::RATE_FILE_BYTES_MAX,
        )
        .map_err(|e| e.to_string())
    })
}

/// [`parse_rate_spec`] with `file:PATH` read by `read` (the plan reads it from the
/// host facts gathered before the build, so the build touches no file).
pub fn parse_rate_spec_in(
    s: &str,
    duration_ns: Nanos,
    seed: u64,
    read: &dyn Fn(&str) -> Result<String, String>,
) -> Result<RateSpec, String> {
    let s = s.trim();
    if s == "max" {
        return Ok(RateSpec::Max);
    }
    let shape = match s.split_once(':') {
        None => match s.parse::<f64>() {
            Ok(v) if !v.is_nan() => RateShape::constant(v)?,
            _ => {
                return Err(format!(
                    "expected requests per second or max, or a shape \
                     (step:, ramp:, spike:, burst:, chaos:, file:), got {s:?}"
                ));
            }
        },
        Some(("step", body)) => parse_step(body, s)?,
        Some(("ramp", body)) => parse_ramp(body, s)?,
        Some(("spike", body)) => parse_spike(body, s, duration_ns)?,
        Some(("burst", body)) => parse_burst(body, s)?,
        Some(("chaos", body)) => parse_chaos(body, s, duration_ns, seed)?,
        Some(("file", path)) => parse_file(path.trim(), s, read)?,
        Some((name, _)) => {
            return Err(format!(
                "unknown shape {name:?} (expected step, ramp, spike, burst, chaos or file)"
            ));
        }
    };
    if shape.peak_rps() <= 0.0 {
        return Err(format!("{}: the rate is 0 everywhere", shape_name(s)));
    }
    Ok(RateSpec::Shaped(shape))
}

fn shape_name(s: &str) -> &str {
    s.split_once(':').map_or("rate", |(n, _)| n)
}

/// `step:START..END+INCREMENT/HOLD`.
fn parse_step(body: &str, spec: &str) -> Result<RateShape, String> {
    let usage = || {
        format!(
            "step: expected step:START..END+INCREMENT/HOLD such as \
             step:1000..50000+1000/30s, got {spec:?}"
        )
    };
    let (range, hold) = body.rsplit_once('/').ok_or_else(usage)?;
    let (range, inc) = range.rsplit_once('+').ok_or_else(usage)?;
    let (start, end) = range.split_once("..").ok_or_else(usage)?;
    let start = parse_rate("step", "start", start)?;
    let end = parse_rate("step", "end", end)?;
    let inc = parse_rate("step", "increment", inc)?;
    let hold = parse_span("step", "hold", hold)?;
    if end < start {
        return Err(format!(
            "step: end {} is below start {}",
            fmt_number(end),
            fmt_number(start)
        ));
    }
    if inc <= 0.0 {
        return Err("step: the increment must be greater than 0".into());
    }
    let steps = ((end - start) / inc).ceil();
    if steps >= SHAPE_PIECES_MAX as f64 {
        return Err(format!(
            "step: {steps} steps, at most {SHAPE_PIECES_MAX}: use a larger increment"
        ));
    }
    let mut b = Builder::new();
    let mut rate = start;
    for i in 1..=steps as u64 {
        b.linear(hold, rate, rate);
        rate = (start + i as f64 * inc).min(end);
    }
    Ok(b.tail(end, spec))
}

/// `ramp:START..END/OVER`.
fn parse_ramp(body: &str, spec: &str) -> Result<RateShape, String> {
    let usage = || {
        format!("ramp: expected ramp:START..END/DURATION such as ramp:0..50000/60s, got {spec:?}")
    };
    let (range, over) = body.rsplit_once('/').ok_or_else(usage)?;
    let (start, end) = range.split_once("..").ok_or_else(usage)?;
    let start = parse_rate("ramp", "start", start)?;
    let end = parse_rate("ramp", "end", end)?;
    let over = parse_span("ramp", "duration", over)?;
    let mut b = Builder::new();
    b.linear(over, start, end);
    Ok(b.tail(end, spec))
}

/// `spike:base=R,peak=R,at=D,for=D`.
fn parse_spike(body: &str, spec: &str, duration_ns: Nanos) -> Result<RateShape, String> {
    let k = Keys::parse("spike", body, &["base", "peak", "at", "for"])?;
    let base = k.rate("base")?;
    let peak = k.rate("peak")?;
    let at = k.duration("at", true)?;
    let span = k.duration("for", false)?;
    if duration_ns > 0 && at >= duration_ns as f64 {
        return Err(format!(
            "spike: at={} is not before the end of the run ({})",
            k.get("at").unwrap_or_default(),
            crate::units::fmt_duration(duration_ns)
        ));
    }
    let mut b = Builder::new();
    b.linear(at, base, base);
    b.linear(span, peak, peak);
    Ok(b.tail(base, spec))
}

/// `burst:base=R,peak=R,on=D,off=D`: a two-state cycle, `on` first.
fn parse_burst(body: &str, spec: &str) -> Result<RateShape, String> {
    let k = Keys::parse("burst", body, &["base", "peak", "on", "off"])?;
    let base = k.rate("base")?;
    let peak = k.rate("peak")?;
    let on = k.duration("on", false)?;
    let off = k.duration("off", false)?;
    let mut b = Builder::new();
    b.linear(on, peak, peak);
    b.linear(off, base, base);
    if b.cum <= 0.0 {
        return Err("burst: the rate is 0 everywhere".into());
    }
    Ok(b.repeat(spec))
}

/// `chaos:base=R,amp=A[,unit=D]`.
fn parse_chaos(body: &str, spec: &str, duration_ns: Nanos, seed: u64) -> Result<RateShape, String> {
    let k = Keys::parse("chaos", body, &["base", "amp", "unit"])?;
    let base = k.rate("base")?;
    let amp = k.number("amp")?;
    let unit_ns = match k.get("unit") {
        Some(v) => span_value("chaos", "unit", v)?,
        None => NS_PER_S,
    };
    if !(0.0..=1.0).contains(&amp) {
        return Err(format!(
            "chaos: amp={} must be between 0 and 1 (the rate stays >= 0)",
            fmt_number(amp)
        ));
    }
    if base * (1.0 + amp) > RATE_RPS_MAX {
        return Err(format!(
            "chaos: base x (1 + amp) exceeds {RATE_RPS_MAX} requests/s"
        ));
    }
    let samples = chaos_samples(duration_ns);
    let step_ns = duration_ns.max(CHAOS_SAMPLE_NS) as f64 / samples as f64;
    let xs = lorenz_x(seed, samples + 1, step_ns / unit_ns);
    let rate = |x: f64| base * (1.0 + amp * (x / LORENZ_X_SCALE).clamp(-1.0, 1.0));
    let mut b = Builder::new();
    for w in xs.windows(2) {
        b.linear(step_ns, rate(w[0]), rate(w[1]));
    }
    let last = xs.last().map_or(base, |&x| rate(x));
    Ok(b.tail(last, spec))
}

/// Samples of the chaos table for a run of `duration_ns`: one per 10 ms, at most
/// [`CHAOS_SAMPLES_MAX`], at least one.
fn chaos_samples(duration_ns: Nanos) -> usize {
    (duration_ns.div_ceil(CHAOS_SAMPLE_NS) as usize).clamp(1, CHAOS_SAMPLES_MAX)
}

/// `n` samples of the Lorenz system's x (sigma 10, rho 28, beta 8/3), `dt` Lorenz time
/// units apart, from a start derived from `seed` and run through a burn-in so it lies
/// on the attractor. Classic RK4 with steps of at most [`LORENZ_STEP_MAX`].
pub fn lorenz_x(seed: u64, n: usize, dt: f64) -> Vec<f64> {
    let mut hash = mix64(seed ^ CHAOS_SEED_STREAM);
    let mut unit = || {
        hash = mix64(hash);
        (hash >> 11) as f64 / (1u64 << 53) as f64
    };
    // Anywhere in the attractor's basin; the burn-in forgets the exact start.
    let mut s = [
        unit() * 20.0 - 10.0,
        unit() * 20.0 - 10.0,
        unit() * 20.0 + 10.0,
    ];
    let burn = (LORENZ_BURN_IN / LORENZ_STEP_MAX) as usize;
    for _ in 0..burn {
        s = rk4(s, LORENZ_STEP_MAX);
    }
    let dt = if dt.is_finite() && dt > 0.0 {
        dt
    } else {
        LORENZ_STEP_MAX
    };
    let sub = (dt / LORENZ_STEP_MAX).ceil().max(1.0) as usize;
    let step = dt / sub as f64;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(s[0]);
        for _ in 0..sub {
            s = rk4(s, step);
        }
    }
    out
}

/// The Lorenz vector field.
fn lorenz(s: [f64; 3]) -> [f64; 3] {
    const SIGMA: f64 = 10.0;
    const RHO: f64 = 28.0;
    const BETA: f64 = 8.0 / 3.0;
    [
        SIGMA * (s[1] - s[0]),
        s[0] * (RHO - s[2]) - s[1],
        s[0] * s[1] - BETA * s[2],
    ]
}

/// One classic fourth-order Runge-Kutta step of length `h`.
fn rk4(s: [f64; 3], h: f64) -> [f64; 3] {
    let add =
        |a: [f64; 3], b: [f64; 3], f: f64| [a[0] + f * b[0], a[1] + f * b[1], a[2] + f * b[2]];
    let k1 = lorenz(s);
    let k2 = lorenz(add(s, k1, h / 2.0));
    let k3 = lorenz(add(s, k2, h / 2.0));
    let k4 = lorenz(add(s, k3, h));
    let mut out = s;
    for i in 0..3 {
        out[i] += h / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]);
    }
    out
}

/// `file:PATH`.
fn parse_file(
    path: &str,
    spec: &str,
    read: &dyn Fn(&str) -> Result<String, String>,
) -> Result<RateShape, String> {
    if path.is_empty() {
        return Err("file: expected file:PATH to a CSV of time_s,rate rows".into());
    }
    let text = read(path).map_err(|e| format!("file: cannot read {path}: {e}"))?;
    parse_rate_file(&text, spec).map_err(|e| format!("file: {path} {e}"))
}

/// The shape of a rate file's text (`file:` without the reading): a pure function of the
/// text, so the fuzz target (fuzz/fuzz_targets/rate_file.rs) reaches all of it.
pub fn parse_rate_file(text: &str, spec: &str) -> Result<RateShape, String> {
    shape_from_rows(&parse_rate_csv(text)?, spec)
}

/// Parses `time_s,rate` rows: blank lines and `#` comments are skipped, a header line
/// (one that is not two numbers) is allowed first; times must not decrease (two rows
/// with the same time make a step). Errors name the 1-based line.
pub fn parse_rate_csv(text: &str) -> Result<Vec<(f64, f64)>, String> {
    let mut rows: Vec<(f64, f64)> = Vec::new();
    let mut seen_content = false;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let first = !seen_content;
        seen_content = true;
        let parsed = line.split_once(',').and_then(|(t, r)| {
            Some((t.trim().parse::<f64>().ok()?, r.trim().parse::<f64>().ok()?))
        });
        let (t, r) = match parsed {
            Some(v) => v,
            // A header such as `time_s,rate`.
            None if first && line.starts_with(|c: char| c.is_ascii_alphabetic()) => continue,
            None => {
                return Err(format!(
                    "line {line_no}: expected time_s,rate, got {line:?}"
                ));
            }
        };
        if !t.is_finite() || t < 0.0 {
            return Err(format!(
                "line {line_no}: time {t} must be a number of seconds >= 0"
            ));
        }
        if t * NS_PER_S > u64::MAX as f64 {
            return Err(format!("line {line_no}: time {t} s is too large"));
        }
        check_rate("rate", r).map_err(|e| format!("line {line_no}: {e}"))?;
        if let Some(&(prev, _)) = rows.last()
            && t < prev
        {
            return Err(format!(
                "line {line_no}: time {} is before the previous row's {}",
                fmt_number(t),
                fmt_number(prev)
            ));
        }
        if rows.len() >= SHAPE_PIECES_MAX {
            return Err(format!("line {line_no}: more than {SHAPE_PIECES_MAX} rows"));
        }
        rows.push((t, r));
    }
    if rows.is_empty() {
        return Err("has no time_s,rate rows".into());
    }
    Ok(rows)
}

/// Pieces linear between rows; the first rate holds before the first row, the last
/// after the last row.
fn shape_from_rows(rows: &[(f64, f64)], spec: &str) -> Result<RateShape, String> {
    let mut b = Builder::new();
    let (t_first, r_first) = rows[0];
    b.linear(t_first * NS_PER_S, r_first, r_first);
    for w in rows.windows(2) {
        let ((t0, r0), (t1, r1)) = (w[0], w[1]);
        b.linear((t1 - t0) * NS_PER_S, r0, r1);
    }
    let last = rows[rows.len() - 1].1;
    Ok(b.tail(last, spec))
}

/// `key=value` pairs of one shape, each used once.
struct Keys<'a> {
    shape: &'static str,
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Keys<'a> {
    /// Splits `body` on commas; rejects unknown and repeated keys.
    fn parse(shape: &'static str, body: &'a str, allowed: &[&str]) -> Result<Self, String> {
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for part in body.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                format!(
                    "{shape}: expected key=value, got {part:?} (keys: {})",
                    allowed.join(", ")
                )
            })?;
            let key = key.trim();
            if !allowed.contains(&key) {
                return Err(format!(
                    "{shape}: unknown key {key:?} (expected {})",
                    allowed.join(", ")
                ));
            }
            if pairs.iter().any(|(k, _)| *k == key) {
                return Err(format!("{shape}: {key}= given twice"));
            }
            pairs.push((key, value.trim()));
        }
        Ok(Keys { shape, pairs })
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn required(&self, key: &str) -> Result<&'a str, String> {
        self.get(key)
            .ok_or_else(|| format!("{}: missing {key}=", self.shape))
    }

    fn rate(&self, key: &'static str) -> Result<f64, String> {
        parse_rate(self.shape, key, self.required(key)?)
    }

    fn number(&self, key: &'static str) -> Result<f64, String> {
        let v = self.required(key)?;
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| format!("{}: {key}={v} is not a number", self.shape))
    }

    /// A duration in ns; `zero_ok` allows 0 (an instant such as `at=0s`).
    fn duration(&self, key: &'static str, zero_ok: bool) -> Result<f64, String> {
        let v = self.required(key)?;
        if zero_ok {
            duration_value(self.shape, key, v)
        } else {
            span_value(self.shape, key, v)
        }
    }
}

/// A rate in requests/s: finite, >= 0, at most [`RATE_RPS_MAX`].
fn parse_rate(shape: &str, what: &str, v: &str) -> Result<f64, String> {
    let v = v.trim();
    let r = v
        .parse::<f64>()
        .ok()
        .filter(|x| !x.is_nan())
        .ok_or_else(|| format!("{shape}: {what} {v:?} is not a rate (requests/s)"))?;
    check_rate(&format!("{shape}: {what}"), r)?;
    Ok(r)
}

fn check_rate(what: &str, r: f64) -> Result<(), String> {
    if r.is_nan() || r < 0.0 {
        return Err(format!("{what} {r} is negative"));
    }
    if r > RATE_RPS_MAX {
        return Err(format!("{what} {r} exceeds {RATE_RPS_MAX} requests/s"));
    }
    Ok(())
}

/// A duration that must be longer than 0, in ns.
fn parse_span(shape: &str, what: &str, v: &str) -> Result<f64, String> {
    span_value(shape, what, v)
}

fn span_value(shape: &str, what: &str, v: &str) -> Result<f64, String> {
    let ns = duration_value(shape, what, v)?;
    if ns <= 0.0 {
        return Err(format!("{shape}: {what} {v} must be longer than 0"));
    }
    Ok(ns)
}

/// A duration such as `30s` or `200ms`, in ns.
fn duration_value(shape: &str, what: &str, v: &str) -> Result<f64, String> {
    let v = v.trim();
    let d = crate::units::parse_duration(v).map_err(|m| format!("{shape}: {what}: {m}"))?;
    if d.as_nanos() > crate::limits::DURATION_NS_MAX as u128 {
        return Err(format!("{shape}: {what} {v} is longer than a day"));
    }
    Ok(d.as_nanos() as f64)
}

#[cfg(test)]
thread_local! {
    /// Binary searches for an instant's piece on this thread (tests count them).
    static SEARCHES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::shape_of;

    /// Issue 11 §6: the pacing fit walks `Λ` upwards once per dispatch. With the cursor
    /// it agrees exactly with the plain `cumulative`, leaves the answer's piece in the
    /// cursor, and searches only when a step skips pieces (never, at 10 µs steps);
    /// from a wrong cursor it is still right.
    #[test]
    fn cumulative_from_a_cursor_agrees_and_does_not_search_when_walking() {
        for spec in [
            "777",
            "step:100..900+100/50ms",
            "ramp:0..50000/1s",
            "spike:base=10,peak=10000,at=300ms,for=100ms",
            "burst:base=0,peak=5000,on=20ms,off=30ms",
            "chaos:base=2000,amp=1",
        ] {
            let shape = shape_of(spec, 2 * 1_000_000_000);
            let mut cursor = 0;
            let mut t = 0.0;
            let before = SEARCHES.with(|n| n.get());
            let mut pieces_seen = std::collections::BTreeSet::new();
            while t < 1.5e9 {
                let got = shape.cumulative_from(t, &mut cursor);
                let searches = SEARCHES.with(|n| n.get());
                assert_eq!(got, shape.cumulative(t), "{spec} at {t}");
                let (_, within) = shape.fold_cycle(t);
                SEARCHES.with(|n| n.set(searches));
                assert_eq!(cursor, shape.piece_at(within), "{spec} at {t}: cursor");
                SEARCHES.with(|n| n.set(searches));
                pieces_seen.insert(cursor);
                t += 10_000.0;
            }
            let searched = SEARCHES.with(|n| n.get()) - before;
            assert_eq!(
                searched, 0,
                "{spec}: {searched} binary searches while walking"
            );
            if shape.pieces.len() > 1 {
                assert!(pieces_seen.len() > 1, "{spec}: the walk crossed pieces");
            }
            // Any cursor, any instant: the same answer.
            let mut rng = fastrand::Rng::with_seed(7);
            for _ in 0..1000 {
                let t = rng.f64() * 3e9;
                let mut c = rng.usize(..shape.pieces.len() + 3);
                assert_eq!(
                    shape.cumulative_from(t, &mut c),
                    shape.cumulative(t),
                    "{spec}"
                );
            }
        }
    }
}
