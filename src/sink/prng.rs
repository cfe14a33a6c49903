//! A tiny seeded PRNG (splitmix64) for the UDP sink's injected drops: deterministic
//! for a seed, no allocation, no crate.

/// The splitmix64 increment (the golden ratio in 64-bit fixed point).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64 (Steele, Lea, Flood 2014): passes BigCrush, any seed (including 0) is
/// fine.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The generator of sink thread `index` (its position in `SinkConfig::cores`):
    /// thread 0 uses the seed itself, the others streams offset from it.
    pub(crate) fn for_thread(seed: u64, index: usize) -> SplitMix64 {
        SplitMix64::new(seed ^ mix((index as u64).wrapping_mul(GAMMA)))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }

    /// Uniform in [0, 1), 53 bits.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The splitmix64 output function (a 64-bit finaliser; also used as a hash mix).
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // First outputs of splitmix64 seeded with 1234567 (reference implementation).
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(r.next_u64(), 9_817_491_932_198_370_423);
    }

    #[test]
    fn floats_are_in_the_unit_interval_and_roughly_uniform() {
        let mut r = SplitMix64::new(42);
        let mut below_half = 0;
        for _ in 0..100_000 {
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x));
            if x < 0.5 {
                below_half += 1;
            }
        }
        assert!((49_000..51_000).contains(&below_half), "{below_half}");
    }

    #[test]
    fn threads_get_different_streams() {
        let a = SplitMix64::for_thread(7, 0).next_u64();
        let b = SplitMix64::for_thread(7, 1).next_u64();
        assert_ne!(a, b);
        assert_eq!(a, SplitMix64::new(7).next_u64());
    }
}
