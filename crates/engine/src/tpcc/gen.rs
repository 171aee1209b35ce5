//! TPC-C's data rules (clause 4.3.2, 4.3.3 and 2.1.6): random strings,
//! NURand, last names, prices, written straight into COPY buffers.

use crate::random::Prng;

/// The 62 characters of an a-string (clause 4.3.2.2: random alphanumeric).
const ALNUM: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The syllables of a last name (clause 4.3.2.3).
pub const SYLLABLES: [&str; 10] = [
    "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
];

/// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x
/// (clause 2.1.6).
#[inline]
pub fn nurand(rng: &mut Prng, a: i64, x: i64, y: i64, c: i64) -> i64 {
    (((rng.uniform_i64(0, a) | rng.uniform_i64(x, y)) + c) % (y - x + 1)) + x
}

/// Append the last name of `number` (0..=999): its three digits' syllables.
#[inline]
pub fn write_last_name(out: &mut Vec<u8>, number: i64) {
    let n = number as usize;
    out.extend_from_slice(SYLLABLES[n / 100].as_bytes());
    out.extend_from_slice(SYLLABLES[(n / 10) % 10].as_bytes());
    out.extend_from_slice(SYLLABLES[n % 10].as_bytes());
}

pub fn last_name(number: i64) -> String {
    let mut out = Vec::with_capacity(15);
    write_last_name(&mut out, number);
    String::from_utf8(out).expect("syllables are ASCII")
}

/// Append a random a-string of length in [min, max]. Four characters per
/// 64-bit draw (16 bits each, mapped to 0..62 by a multiply: bias < 0.1%).
#[inline]
pub fn write_astring(out: &mut Vec<u8>, rng: &mut Prng, min: i64, max: i64) {
    let len = rng.uniform_i64(min, max) as usize;
    write_alnum(out, rng, len);
}

/// Append a random alphanumeric string of exactly `len`.
#[inline]
pub fn write_alnum(out: &mut Vec<u8>, rng: &mut Prng, len: usize) {
    let mut left = len;
    while left > 0 {
        let mut bits = rng.next_u64();
        for _ in 0..left.min(4) {
            out.push(ALNUM[(((bits & 0xFFFF) * 62) >> 16) as usize]);
            bits >>= 16;
        }
        left -= left.min(4);
    }
}

/// Append a random n-string (digits) of exactly `len`.
#[inline]
pub fn write_nstring(out: &mut Vec<u8>, rng: &mut Prng, len: usize) {
    let mut left = len;
    while left > 0 {
        let mut bits = rng.next_u64();
        for _ in 0..left.min(4) {
            out.push(b'0' + (((bits & 0xFFFF) * 10) >> 16) as u8);
            bits >>= 16;
        }
        left -= left.min(4);
    }
}

/// Append a zip code: 4 random digits and "11111" (clause 4.3.2.7).
#[inline]
pub fn write_zip(out: &mut Vec<u8>, rng: &mut Prng) {
    write_nstring(out, rng, 4);
    out.extend_from_slice(b"11111");
}

/// Append i_data / s_data: an a-string [26, 50]; 10% of them hold
/// "ORIGINAL" at a random position (clause 4.3.3.1).
#[inline]
pub fn write_data_original(out: &mut Vec<u8>, rng: &mut Prng) {
    let len = rng.uniform_i64(26, 50) as usize;
    if rng.uniform_i64(1, 10) == 1 {
        let at = rng.uniform_i64(0, len as i64 - 8) as usize;
        write_alnum(out, rng, at);
        out.extend_from_slice(b"ORIGINAL");
        write_alnum(out, rng, len - 8 - at);
    } else {
        write_alnum(out, rng, len);
    }
}

pub use crate::pg::write_fixed;

/// Text of a UTC timestamp "YYYY-MM-DD HH:MM:SS" for `unix_s`.
pub fn timestamp_text(unix_s: i64) -> String {
    let days = unix_s.div_euclid(86_400);
    let secs = unix_s.rem_euclid(86_400);
    let (year, month, day) = crate::units::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_names_are_three_syllables() {
        assert_eq!(last_name(371), "PRICALLYOUGHT");
        assert_eq!(last_name(0), "BARBARBAR");
        assert_eq!(last_name(999), "EINGEINGEING");
    }

    #[test]
    fn nurand_stays_in_range_and_is_skewed() {
        let mut rng = Prng::seeded(5);
        let mut hits = vec![0u32; 3001];
        for _ in 0..300_000 {
            let v = nurand(&mut rng, 1023, 1, 3000, 259);
            assert!((1..=3000).contains(&v));
            hits[v as usize] += 1;
        }
        for _ in 0..100_000 {
            let v = nurand(&mut rng, 8191, 1, 100_000, 7911);
            assert!((1..=100_000).contains(&v));
            let v = nurand(&mut rng, 255, 0, 999, 223);
            assert!((0..=999).contains(&v));
        }
        // Non-uniform: the busiest value is drawn far more than the mean (100).
        assert!(*hits.iter().max().unwrap() > 250, "not skewed");
    }

    #[test]
    fn original_is_in_about_a_tenth_of_the_data() {
        let mut rng = Prng::seeded(11);
        let mut with = 0;
        let n = 100_000;
        let mut out = Vec::new();
        for _ in 0..n {
            out.clear();
            write_data_original(&mut out, &mut rng);
            assert!((26..=50).contains(&out.len()));
            assert!(out.iter().all(|c| c.is_ascii_alphanumeric()));
            if out.windows(8).any(|w| w == b"ORIGINAL") {
                with += 1;
            }
        }
        let share = with as f64 / n as f64;
        assert!((0.095..0.105).contains(&share), "share {share}");
    }

    #[test]
    fn strings_have_their_lengths_and_alphabets() {
        let mut rng = Prng::seeded(2);
        let mut out = Vec::new();
        for _ in 0..1000 {
            out.clear();
            write_astring(&mut out, &mut rng, 8, 16);
            assert!((8..=16).contains(&out.len()));
            out.clear();
            write_zip(&mut out, &mut rng);
            assert_eq!(out.len(), 9);
            assert!(out.iter().all(|c| c.is_ascii_digit()));
            assert!(out.ends_with(b"11111"));
        }
    }

    #[test]
    fn fixed_point_and_timestamps_are_text_postgres_reads() {
        let f = |v, s| {
            let mut out = Vec::new();
            write_fixed(&mut out, v, s);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(f(1234, 2), "12.34");
        assert_eq!(f(-1000, 2), "-10.00");
        assert_eq!(f(5, 4), "0.0005");
        assert_eq!(f(30_000_000, 2), "300000.00");
        assert_eq!(timestamp_text(0), "1970-01-01 00:00:00");
        assert_eq!(timestamp_text(1_700_000_000), "2023-11-14 22:13:20");
    }
}
