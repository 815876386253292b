//! The seeded random source every model draws from.
//!
//! xoshiro256++ : fast (one `next_u64` is a handful of instructions), statistically strong
//! enough for emulation, and fully determined by its seed, so the same seed and the same input
//! give the same decisions on every run and every machine.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// A seeded pseudo-random generator.
#[derive(Clone, Debug)]
pub struct Rng(Xoshiro256PlusPlus);

/// SplitMix64's output function: spreads nearby seeds (0, 1, 2…) far apart.
const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of one direction (0 = a→b, 1 = b→a), derived from the run's seed so the two
/// directions draw independent streams.
pub const fn direction_seed(seed: u64, direction: u64) -> u64 {
    mix(seed ^ mix(direction.wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

impl Rng {
    pub fn seeded(seed: u64) -> Rng {
        Rng(Xoshiro256PlusPlus::seed_from_u64(seed))
    }

    /// Stream `id` of this generator: an independent generator derived from its state, which
    /// stays as it was (what it draws next is unchanged). For a model whose draws must not
    /// depend on when other models draw (a queue discipline decides frames at times the
    /// steps after it do not see).
    pub fn stream(&self, id: u64) -> Rng {
        let first = self.clone().next_u64();
        Rng::seeded(mix(first ^ mix(id.wrapping_add(0x9e37_79b9_7f4a_7c15))))
    }

    /// A uniformly distributed `u64`.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// True with probability `threshold / 2^64` (see [`crate::units::Probability::threshold`]).
    #[inline(always)]
    pub fn chance(&mut self, threshold: u64) -> bool {
        self.next_u64() < threshold
    }

    /// A uniform draw in `[0, 1)` with 53 bits of precision.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform draw in `(0, 1]`: safe to take the logarithm of.
    #[inline]
    pub fn unit_open0(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in `[0, n)` (n > 0), without modulo bias worth noticing (Lemire).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

impl RngCore for Rng {
    fn next_u32(&mut self) -> u32 {
        self.0.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.0.fill_bytes(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_leaves_its_parent_alone_and_draws_apart() {
        let parent = Rng::seeded(7);
        let (mut a, mut b) = (parent.stream(1), parent.stream(1));
        assert_eq!(a.next_u64(), b.next_u64(), "the same stream twice");
        let mut other = parent.stream(2);
        let mut p = parent.clone();
        let mut fresh = Rng::seeded(7);
        assert_eq!(p.next_u64(), fresh.next_u64(), "the parent draws as before");
        assert_ne!(a.next_u64(), other.next_u64());
    }

    #[test]
    fn same_seed_same_stream_and_directions_differ() {
        let mut a = Rng::seeded(direction_seed(42, 0));
        let mut b = Rng::seeded(direction_seed(42, 0));
        let mut c = Rng::seeded(direction_seed(42, 1));
        let va: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let vb: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let vc: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(va, vb);
        assert_ne!(va, vc);
        assert_ne!(direction_seed(1, 0), direction_seed(2, 0));
    }

    #[test]
    fn unit_ranges() {
        let mut r = Rng::seeded(7);
        let n = 100_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
            let v = r.unit_open0();
            assert!(v > 0.0 && v <= 1.0);
            assert!(r.below(10) < 10);
            sum += u;
        }
        // Mean of U(0,1) is 1/2 with std 1/sqrt(12 n); 5 sigma.
        let sigma = (1.0 / 12.0 / n as f64).sqrt();
        assert!((sum / n as f64 - 0.5).abs() < 5.0 * sigma);
    }
}
