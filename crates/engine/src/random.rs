//! Random numbers for the workloads (TPC-B draws) and the open-loop schedule.
//!
//! pgbench draws with xoroshiro128** (src/common/pg_prng.c) and maps to a
//! range without bias; `random(lb, ub)` is uniform and inclusive, and the
//! throttle schedule under `--rate` draws exponential gaps (a Poisson
//! process), `-log(1 - u) * mean`. The same algorithms are written here
//! from their published definitions.

/// xoroshiro128** (Blackman & Vigna, 2018), the generator pgbench uses.
#[derive(Clone, Debug)]
pub struct Prng {
    s0: u64,
    s1: u64,
}

/// SplitMix64: expands one seed into well-mixed state words.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Prng {
    pub fn seeded(seed: u64) -> Prng {
        let mut sm = seed;
        let s0 = splitmix64(&mut sm);
        let mut s1 = splitmix64(&mut sm);
        if s0 == 0 && s1 == 0 {
            s1 = 1; // the all-zero state is the one xoroshiro cannot leave
        }
        Prng { s0, s1 }
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let (s0, mut s1) = (self.s0, self.s1);
        let result = s0.wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        s1 ^= s0;
        self.s0 = s0.rotate_left(24) ^ s1 ^ (s1 << 16);
        self.s1 = s1.rotate_left(37);
        result
    }

    /// Uniform on [0, 1) with 53 random bits.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in [min, max], inclusive, unbiased: draw under the
    /// smallest covering bit mask and reject values beyond the range.
    #[inline]
    pub fn uniform_i64(&mut self, min: i64, max: i64) -> i64 {
        debug_assert!(min <= max);
        let span = max.wrapping_sub(min) as u64;
        if span == 0 {
            return min;
        }
        let mask = u64::MAX >> span.leading_zeros();
        loop {
            let v = self.next_u64() & mask;
            if v <= span {
                return min.wrapping_add(v as i64);
            }
        }
    }

    /// One exponential inter-arrival gap of a Poisson process with the given
    /// mean (any unit): -ln(1 - u) * mean, u uniform on [0, 1).
    #[inline]
    pub fn exponential_gap(&mut self, mean: f64) -> f64 {
        -(1.0 - self.next_f64()).ln() * mean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_covers_both_ends_and_nothing_outside() {
        let mut rng = Prng::seeded(1);
        let mut seen = [0u32; 11];
        for _ in 0..100_000 {
            let v = rng.uniform_i64(-5, 5);
            assert!((-5..=5).contains(&v));
            seen[(v + 5) as usize] += 1;
        }
        // Each of 11 values expected ~9091 times; 5 sigma is about 450.
        for count in seen {
            assert!((8600..9600).contains(&count), "{seen:?}");
        }
    }

    #[test]
    fn uniform_mean_matches_the_range_midpoint() {
        let mut rng = Prng::seeded(7);
        let n = 200_000;
        let sum: i64 = (0..n).map(|_| rng.uniform_i64(1, 100_000)).sum();
        let mean = sum as f64 / n as f64;
        // Standard error = 28868 / sqrt(n) = 65; allow 5 standard errors.
        assert!((mean - 50_000.5).abs() < 325.0, "mean {mean}");
    }

    #[test]
    fn exponential_gaps_have_the_requested_mean_and_variance() {
        let mut rng = Prng::seeded(3);
        let n = 200_000;
        let gaps: Vec<f64> = (0..n).map(|_| rng.exponential_gap(2.0)).collect();
        let mean = gaps.iter().sum::<f64>() / n as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n as f64;
        assert!((mean - 2.0).abs() < 0.03, "mean {mean}");
        // Exponential: variance = mean^2 = 4.
        assert!((var - 4.0).abs() < 0.15, "variance {var}");
        assert!(gaps.iter().all(|&g| g >= 0.0));
    }

    #[test]
    fn same_seed_same_sequence() {
        let mut a = Prng::seeded(42);
        let mut b = Prng::seeded(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = Prng::seeded(43);
        assert_ne!(Prng::seeded(42).next_u64(), c.next_u64());
    }
}
