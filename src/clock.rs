//! The TSC clock. Raw ticks (quanta) are stored in the hot tables; they are scaled to
//! nanoseconds since the run's start only when a value is recorded.

/// Raw TSC ticks as returned by [`Clock::ticks`].
pub type Ticks = u64;
/// Nanoseconds since the run's start instant.
pub type Nanos = u64;

#[derive(Clone)]
pub struct Clock {
    inner: quanta::Clock,
    start: Ticks,
}

impl Clock {
    /// A TSC clock (falls back to the OS monotonic clock where the TSC is unusable).
    pub fn new() -> Self {
        let inner = quanta::Clock::new();
        let start = inner.raw();
        Clock { inner, start }
    }

    /// A clock driven by hand, for deterministic tests.
    pub fn mock() -> (Self, std::sync::Arc<quanta::Mock>) {
        let (inner, mock) = quanta::Clock::mock();
        let start = inner.raw();
        (Clock { inner, start }, mock)
    }

    /// Moves the start instant to `ns` nanoseconds from now (may be in the future).
    pub fn with_start_in(&self, ns: Nanos) -> Self {
        let now = self.inner.raw();
        let mut c = self.clone();
        c.start = now + self.ns_to_ticks(ns);
        c
    }

    #[inline]
    pub fn ticks(&self) -> Ticks {
        self.inner.raw()
    }

    /// Nanoseconds from the start instant to `t` (0 when `t` is before it).
    #[inline]
    pub fn ns(&self, t: Ticks) -> Nanos {
        if t <= self.start {
            0
        } else {
            self.inner.delta_as_nanos(self.start, t)
        }
    }

    /// Nanoseconds from `a` to `b` (0 when `b` is not after `a`), whatever the start
    /// instant: for spans that may cross the run's start (a join begun in the connect
    /// phase).
    #[inline]
    pub fn between_ns(&self, a: Ticks, b: Ticks) -> Nanos {
        if b <= a {
            0
        } else {
            self.inner.delta_as_nanos(a, b)
        }
    }

    /// Nanoseconds since the start instant, now.
    #[inline]
    pub fn now_ns(&self) -> Nanos {
        self.ns(self.ticks())
    }

    /// Nanoseconds until the start instant (0 once it has passed).
    pub fn until_start_ns(&self) -> Nanos {
        let now = self.ticks();
        if now >= self.start {
            0
        } else {
            self.inner.delta_as_nanos(now, self.start)
        }
    }

    /// The instant `ns` nanoseconds before `t` (the clock's first tick at most that far
    /// back).
    #[inline]
    pub fn ticks_before(&self, t: Ticks, ns: Nanos) -> Ticks {
        if ns == 0 {
            return t;
        }
        t.saturating_sub(self.ns_to_ticks(ns))
    }

    /// Approximate tick count for a duration, by calibrating against the clock itself.
    fn ns_to_ticks(&self, ns: Nanos) -> Ticks {
        // A billion ticks scaled tells the ratio to ~1 ppb; quanta has no inverse scaling.
        // The scaling depends on the span only, so no TSC reading is needed (this runs
        // per response timed by the kernel).
        let probe: u64 = 1_000_000_000;
        let scaled = self.inner.delta_as_nanos(0, probe).max(1);
        ((ns as u128 * probe as u128) / scaled as u128) as u64
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn mock_clock_scales_ticks_to_ns() {
        let (clock, mock) = Clock::mock();
        let t0 = clock.ticks();
        mock.increment(Duration::from_micros(1500));
        assert_eq!(clock.ns(clock.ticks()) - clock.ns(t0), 1_500_000);
    }

    #[test]
    fn start_in_future_reads_zero_until_then() {
        let clock = Clock::new().with_start_in(50_000_000);
        assert_eq!(clock.now_ns(), 0);
        let wait = clock.until_start_ns();
        assert!(wait > 40_000_000 && wait <= 50_000_000, "{wait}");
    }
}
