//! A tiny seeded generator (SplitMix64) for tie-breaking: the only randomness in the core.

/// SplitMix64.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Where the generator is in its sequence. The difference of two positions, given to
    /// [`SplitMix64::advance`], replays the draws made between them.
    pub fn position(&self) -> u64 {
        self.0
    }

    /// Moves the generator forward as the draws between two [`SplitMix64::position`]s
    /// `step` apart did (each draw adds the same constant to the state).
    pub fn advance(&mut self, step: u64) {
        self.0 = self.0.wrapping_add(step);
    }

    /// A uniform value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
