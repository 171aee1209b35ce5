//! YCSB's request distributions (Cooper et al., "Benchmarking Cloud Serving
//! Systems with YCSB", SoCC 2010, section 3.2; CoreWorkload's key choosers),
//! written from their published definitions:
//!
//! - zipfian: Gray et al.'s generator ("Quickly generating billion-record
//!   synthetic databases", SIGMOD 1994) with theta 0.99, *scrambled* as
//!   YCSB does: a draw over 10^10 items hashed (FNV-1a) into the key range,
//!   so that the popular keys are spread over the table instead of being
//!   its first ones;
//! - uniform: every loaded key alike;
//! - latest: the zipfian's popularity counted back from the newest inserted
//!   key (the `SkewedLatest` chooser), its item count growing as rows are
//!   inserted (zeta extended term by term, as Gray et al. allow).
//!
//! Keys are YCSB's `"user" + hash(keynum)` (`insertorder=hashed`), the hash
//! FNV-1a over the key number's 8 bytes, most significant first: the same
//! keys go-ycsb makes, so either driver runs on the other's table.

use crate::random::Prng;

/// YCSB's zipfian constant (theta).
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// The scrambled zipfian draws from this many items, then hashes the draw
/// into the key range.
pub const SCRAMBLED_ITEMS: u64 = 10_000_000_000;
/// zeta(SCRAMBLED_ITEMS, 0.99): too many terms to sum at start, so YCSB
/// gives the sum (`sum_{i=1}^{10^10} i^-0.99`).
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a of `n`'s 8 bytes, big-endian, as a non-negative number.
#[inline]
pub fn hash(n: i64) -> i64 {
    let mut h = FNV_OFFSET;
    for b in n.to_be_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(FNV_PRIME);
    }
    (h as i64).wrapping_abs().max(0)
}

/// The row key of key number `n`: "user" and the decimal of its hash,
/// written into `out` (cleared first).
#[inline]
pub fn key_name(n: i64, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(b"user");
    crate::pg::write_i64(out, hash(n));
}

/// `sum_{i=from+1}^{to} i^-theta + initial`: zeta extended from `from`
/// terms to `to`.
pub fn zeta(from: u64, to: u64, theta: f64, initial: f64) -> f64 {
    (from..to).fold(initial, |sum, i| sum + 1.0 / ((i + 1) as f64).powf(theta))
}

/// Gray et al.'s zipfian over `base .. base + items`, item 0 the most
/// popular. A draw may name a larger item count than at construction
/// (the latest chooser's table grows): zeta is then extended to it.
#[derive(Debug, Clone)]
pub struct Zipfian {
    base: i64,
    theta: f64,
    alpha: f64,
    zeta2: f64,
    zetan: f64,
    eta: f64,
    /// The item count `zetan` is the sum for.
    counted: u64,
}

impl Zipfian {
    /// Over `items` items from `base`, zeta summed here (O(items)).
    pub fn new(base: i64, items: u64, theta: f64) -> Zipfian {
        Zipfian::with_zetan(base, items, theta, zeta(0, items, theta, 0.0))
    }

    /// Over `items` items from `base`, with zeta(items, theta) given.
    pub fn with_zetan(base: i64, items: u64, theta: f64, zetan: f64) -> Zipfian {
        let items = items.max(1);
        let zeta2 = zeta(0, 2, theta, 0.0);
        let mut z = Zipfian {
            base,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta2,
            zetan,
            eta: 0.0,
            counted: items,
        };
        z.eta = z.eta_for(items);
        z
    }

    fn eta_for(&self, items: u64) -> f64 {
        (1.0 - (2.0 / items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
    }

    /// One draw over the first `items` items (at least the constructed
    /// count; a larger one extends zeta, a smaller one keeps it: YCSB's
    /// rule, since summing again from the start is slow).
    #[inline]
    pub fn next(&mut self, rng: &mut Prng, items: u64) -> i64 {
        if items > self.counted {
            self.zetan = zeta(self.counted, items, self.theta, self.zetan);
            self.counted = items;
            self.eta = self.eta_for(items);
        }
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        let spread = (self.eta * u - self.eta + 1.0).powf(self.alpha);
        self.base + ((items as f64 * spread) as i64).min(items as i64 - 1)
    }
}

/// YCSB's request distributions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    Uniform,
    Zipfian,
    Latest,
}

impl Distribution {
    pub const NAMES: [&'static str; 3] = ["uniform", "zipfian", "latest"];
}

impl std::str::FromStr for Distribution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uniform" => Ok(Distribution::Uniform),
            "zipfian" => Ok(Distribution::Zipfian),
            "latest" => Ok(Distribution::Latest),
            other => Err(format!(
                "request distribution {other:?} is unknown; allowed: {}",
                Distribution::NAMES.join(", ")
            )),
        }
    }
}

/// Which key number an operation on an existing row names: one per
/// client (the zipfian's zeta grows with its own draws), cloned from the
/// protocol's, whose zeta was summed once.
#[derive(Debug, Clone)]
pub enum KeyChooser {
    /// Uniform over the keys loaded before the run, 0..keys.
    Uniform { keys: i64 },
    /// Scrambled zipfian over 0..=range (the loaded keys and the inserts
    /// the run expects: YCSB's `recordcount + 2 x operationcount x
    /// insertproportion`), a draw past the newest inserted key drawn again.
    Zipfian { gen: Zipfian, range: i64 },
    /// Zipfian from the newest inserted key backwards.
    Latest { gen: Zipfian },
}

impl KeyChooser {
    /// `keys` rows loaded (key numbers 0..keys), `expected_inserts` the
    /// run's expected new keys (the zipfian's range covers them).
    pub fn new(distribution: Distribution, keys: i64, expected_inserts: i64) -> KeyChooser {
        let keys = keys.max(1);
        match distribution {
            Distribution::Uniform => KeyChooser::Uniform { keys },
            Distribution::Zipfian => KeyChooser::Zipfian {
                gen: Zipfian::with_zetan(0, SCRAMBLED_ITEMS, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN),
                range: keys + expected_inserts.max(0),
            },
            Distribution::Latest => KeyChooser::Latest {
                gen: Zipfian::new(0, keys as u64, ZIPFIAN_CONSTANT),
            },
        }
    }

    /// A key number of an existing row; `newest` is the newest key whose
    /// insert has been acknowledged (keys 0..=newest exist).
    #[inline]
    pub fn next(&mut self, rng: &mut Prng, newest: i64) -> i64 {
        match self {
            KeyChooser::Uniform { keys } => rng.uniform_i64(0, *keys - 1),
            KeyChooser::Zipfian { gen, range } => loop {
                // scrambled: the draw's hash, into 0..=range
                let drawn = gen.next(rng, SCRAMBLED_ITEMS);
                let key = hash(drawn) % (*range + 1);
                if key <= newest {
                    return key;
                }
            },
            KeyChooser::Latest { gen } => {
                let items = (newest.max(0) + 1) as u64;
                newest - gen.next(rng, items)
            }
        }
    }
}

/// Value bytes: 64 letters, digits and `-_`, each 6 bits of a draw: text
/// every server stores as given, and that COPY text and LOAD DATA take
/// without escaping.
pub const VALUE_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// `len` random value bytes appended to `out`, 10 per draw.
#[inline]
pub fn value(rng: &mut Prng, len: usize, out: &mut Vec<u8>) {
    let mut left = len;
    while left > 0 {
        let mut bits = rng.next_u64();
        for _ in 0..left.min(10) {
            out.push(VALUE_ALPHABET[(bits & 63) as usize]);
            bits >>= 6;
        }
        left -= left.min(10);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_go_ycsbs() {
        // FNV-1a 64 of 8 zero bytes is 0xa8c7f832281a39c5 (negative as i64:
        // its absolute value is kept); go-ycsb's first key is user6284781860667377211.
        assert_eq!(hash(0), 6284781860667377211);
        let mut k = Vec::new();
        key_name(0, &mut k);
        assert_eq!(k, b"user6284781860667377211");
        assert!((0..100_000).all(|n| hash(n) >= 0));
        // distinct keys for distinct numbers (FNV over 8 bytes is a bijection-free
        // hash, but no collision among a realistic table's first keys)
        let mut seen: Vec<i64> = (0..100_000).map(hash).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 100_000);
    }

    #[test]
    fn zeta_of_the_scrambled_range_is_ycsbs_constant() {
        // The sum's tail, checked by its first million terms plus the
        // integral of x^-0.99 from 10^6 + 0.5 to 10^10 + 0.5 (the midpoint
        // rule's error is far below the tolerance).
        let head = zeta(0, 1_000_000, ZIPFIAN_CONSTANT, 0.0);
        let f = |x: f64| x.powf(0.01) / 0.01;
        let tail = f(1e10 + 0.5) - f(1e6 + 0.5);
        assert!(
            (head + tail - SCRAMBLED_ZETAN).abs() < 1e-3,
            "{}",
            head + tail
        );
    }

    #[test]
    fn zipfian_follows_its_law() {
        // P(item i) = (i + 1)^-theta / zeta(n): the first items' shares
        // within 3% of the law over 10^6 draws
        let n = 1000u64;
        let mut z = Zipfian::new(0, n, ZIPFIAN_CONSTANT);
        let zn = zeta(0, n, ZIPFIAN_CONSTANT, 0.0);
        let mut rng = Prng::seeded(7);
        let draws = 1_000_000;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..draws {
            let v = z.next(&mut rng, n);
            assert!((0..n as i64).contains(&v));
            counts[v as usize] += 1;
        }
        for (i, &count) in counts.iter().enumerate().take(2) {
            let want = 1.0 / ((i + 1) as f64).powf(ZIPFIAN_CONSTANT) / zn;
            let got = count as f64 / draws as f64;
            assert!(
                (got / want - 1.0).abs() < 0.03,
                "item {i}: {got} against {want}"
            );
        }
        // the head is heavy, the tail light: the first 10% of items take
        // about 70% of draws (the law: H(100)/H(1000) at 0.99, 0.69)
        let head: u64 = counts[..100].iter().sum();
        let share = head as f64 / draws as f64;
        let law = zeta(0, 100, ZIPFIAN_CONSTANT, 0.0) / zn;
        assert!(
            (share - law).abs() < 0.03,
            "head share {share} against {law}"
        );
        // its rank order: the counts fall with the item (by decades)
        let decade = |a: usize, b: usize| counts[a..b].iter().sum::<u64>() as f64 / (b - a) as f64;
        assert!(decade(0, 10) > decade(10, 100) && decade(10, 100) > decade(100, 1000));
    }

    #[test]
    fn zipfian_grows_its_item_count() {
        // zeta extended to a larger count is the sum from the start
        let mut z = Zipfian::new(0, 100, ZIPFIAN_CONSTANT);
        let mut rng = Prng::seeded(1);
        for _ in 0..10 {
            assert!(z.next(&mut rng, 150) < 150);
        }
        assert!((z.zetan - zeta(0, 150, ZIPFIAN_CONSTANT, 0.0)).abs() < 1e-9);
    }

    /// Pearson's chi-square of counts against equal expected ones.
    fn chi_square(counts: &[u64]) -> f64 {
        let total: u64 = counts.iter().sum();
        let expected = total as f64 / counts.len() as f64;
        counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum()
    }

    #[test]
    fn uniform_is_uniform_over_the_loaded_keys() {
        let mut k = KeyChooser::new(Distribution::Uniform, 100, 1000);
        let mut rng = Prng::seeded(3);
        let mut counts = [0u64; 100];
        for _ in 0..200_000 {
            let v = k.next(&mut rng, 10_000);
            counts[v as usize] += 1;
        }
        // 99 degrees of freedom, p = 0.001: 148.23
        let x = chi_square(&counts);
        assert!(x < 148.23, "chi-square {x}");
    }

    #[test]
    fn scrambled_zipfian_is_skewed_but_spread_over_the_table() {
        let keys = 10_000i64;
        let mut k = KeyChooser::new(Distribution::Zipfian, keys, 0);
        let mut rng = Prng::seeded(11);
        let draws = 500_000;
        let mut counts = vec![0u64; keys as usize];
        for _ in 0..draws {
            let v = k.next(&mut rng, keys - 1);
            assert!((0..keys).contains(&v), "{v}");
            counts[v as usize] += 1;
        }
        // skewed: the hottest key alone takes a few percent (item 0 of the
        // 10^10 has 1/zetan = 3.8% of draws), the hottest 1% of keys far
        // more than 1%
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let top = sorted[0] as f64 / draws as f64;
        assert!(
            (top - 1.0 / SCRAMBLED_ZETAN).abs() < 0.01,
            "hottest key {top}"
        );
        let top1: u64 = sorted[..100].iter().sum();
        assert!(top1 as f64 / draws as f64 > 0.2);
        // scrambled: the hot keys are not the first ones; each tenth of the
        // key numbers gets a share of draws far from the unscrambled 1.0 of
        // the first tenth (0.73 by the law on 10,000 items)
        let tenth = keys as usize / 10;
        for part in counts.chunks(tenth) {
            let share = part.iter().sum::<u64>() as f64 / draws as f64;
            assert!(share < 0.35, "a tenth of the keys took {share}");
        }
    }

    #[test]
    fn zipfian_never_names_a_key_not_yet_inserted() {
        // range covers 1000 expected inserts of which none is acknowledged yet
        let mut k = KeyChooser::new(Distribution::Zipfian, 1000, 1000);
        let mut rng = Prng::seeded(5);
        assert!((0..100_000).all(|_| k.next(&mut rng, 999) <= 999));
        // once they are, they are drawn too
        assert!((0..100_000).any(|_| k.next(&mut rng, 1999) >= 1000));
    }

    #[test]
    fn latest_favours_the_newest_keys_and_follows_inserts() {
        let mut k = KeyChooser::new(Distribution::Latest, 10_000, 0);
        let mut rng = Prng::seeded(9);
        let draws = 200_000;
        let mut newest_hits = 0;
        let mut recent = 0;
        for _ in 0..draws {
            let v = k.next(&mut rng, 9_999);
            assert!((0..10_000).contains(&v), "{v}");
            newest_hits += (v == 9_999) as u64;
            recent += (v >= 9_000) as u64;
        }
        // the newest key is the zipfian's item 0: 1 / zeta(10,000) of draws
        let want = 1.0 / zeta(0, 10_000, ZIPFIAN_CONSTANT, 0.0);
        let got = newest_hits as f64 / draws as f64;
        assert!((got / want - 1.0).abs() < 0.05, "{got} against {want}");
        // the newest 10% take most draws (by the law about 0.76)
        let law = zeta(0, 1000, ZIPFIAN_CONSTANT, 0.0) / zeta(0, 10_000, ZIPFIAN_CONSTANT, 0.0);
        let share = recent as f64 / draws as f64;
        assert!((share - law).abs() < 0.02, "{share} against {law}");
        // after 500 inserts the newest is key 10,499
        let mut top = 0;
        for _ in 0..1000 {
            let v = k.next(&mut rng, 10_499);
            assert!(v <= 10_499);
            top = top.max(v);
        }
        assert_eq!(top, 10_499);
    }

    #[test]
    fn values_are_the_alphabets_and_as_long_as_asked() {
        let mut rng = Prng::seeded(2);
        let mut out = Vec::new();
        value(&mut rng, 100, &mut out);
        value(&mut rng, 7, &mut out);
        assert_eq!(out.len(), 107);
        assert!(out.iter().all(|b| VALUE_ALPHABET.contains(b)));
        let mut counts = [0u64; 64];
        let mut big = Vec::new();
        value(&mut rng, 640_000, &mut big);
        for b in big {
            counts[VALUE_ALPHABET.iter().position(|&a| a == b).unwrap()] += 1;
        }
        // 63 degrees of freedom, p = 0.001: 103.44
        assert!(chi_square(&counts) < 103.44);
    }
}
