//! PostgreSQL's binary COPY format (the COPY page of the PostgreSQL manual,
//! "Binary Format"): a header, then per row a 16-bit field count and each
//! field as a 32-bit length and the type's binary send form, then a trailer.
//!
//! The server parses a binary field with the type's `recv` function, which
//! for integers, numerics and dates is cheaper than parsing their text; the
//! generator is spared formatting them too. A field's bytes must match the
//! column's type exactly (int4 against `integer`, int8 against `bigint`), so
//! each table's writer follows its DDL column by column.

use std::fmt::Display;
use std::io::Write;

/// Signature, flags (no OIDs) and header extension length.
pub const HEADER: &[u8; 19] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// The field count -1 that ends the data.
pub const TRAILER: &[u8; 2] = b"\xff\xff";

/// Days from 1970-01-01 to 2000-01-01, PostgreSQL's date epoch.
const PG_EPOCH_DAYS: i32 = 10_957;

/// Start a row of `fields` fields.
#[inline]
pub fn row(buf: &mut Vec<u8>, fields: i16) {
    buf.extend_from_slice(&fields.to_be_bytes());
}

#[inline]
pub fn int4(buf: &mut Vec<u8>, v: i32) {
    buf.extend_from_slice(&4i32.to_be_bytes());
    buf.extend_from_slice(&v.to_be_bytes());
}

/// An `integer` column whose generator hands it over as i64: a value out of
/// int4's range would be a generator bug, so it panics rather than wrap.
#[inline]
pub fn int4_of(buf: &mut Vec<u8>, v: i64) {
    int4(
        buf,
        i32::try_from(v).expect("a value of an integer column is out of int4 range"),
    );
}

#[inline]
pub fn int8(buf: &mut Vec<u8>, v: i64) {
    buf.extend_from_slice(&8i32.to_be_bytes());
    buf.extend_from_slice(&v.to_be_bytes());
}

/// A text, varchar or char(n) column: its UTF-8 bytes (char(n) is padded by
/// the server, as from text input).
#[inline]
pub fn text(buf: &mut Vec<u8>, v: &str) {
    buf.extend_from_slice(&(v.len() as i32).to_be_bytes());
    buf.extend_from_slice(v.as_bytes());
}

/// A text column whose value is whatever `v` displays: written in place, its
/// length filled in afterwards.
#[inline]
pub fn display(buf: &mut Vec<u8>, v: impl Display) {
    text_with(buf, |buf| {
        write!(buf, "{v}").expect("writing to a Vec cannot fail");
    });
}

/// A text column whose bytes `write` appends: written in place, its length
/// filled in afterwards.
#[inline]
pub fn text_with(buf: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let at = buf.len();
    buf.extend_from_slice(&[0; 4]);
    write(buf);
    let len = (buf.len() - at - 4) as i32;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

/// A date given as days since 1970-01-01.
#[inline]
pub fn date_unix(buf: &mut Vec<u8>, days: i32) {
    int4(buf, days - PG_EPOCH_DAYS);
}

/// A numeric of scale 2 given in hundredths (1234 is 12.34).
#[inline]
pub fn numeric_cents(buf: &mut Vec<u8>, hundredths: i64) {
    numeric_fixed(buf, hundredths, 2);
}

/// A numeric of scale `scale` (1 to 4) given in units of 10^-scale (with
/// scale 4, 1234 is 0.1234): base-10000 digits, most significant first, the
/// last one the fraction's.
#[inline]
pub fn numeric_fixed(buf: &mut Vec<u8>, units: i64, scale: u32) {
    debug_assert!(
        (1..=4).contains(&scale),
        "numeric scale {scale} is not 1 to 4"
    );
    let unit = 10u64.pow(scale);
    let negative = units < 0;
    let magnitude = units.unsigned_abs();
    let mut whole = magnitude / unit;
    // 10^19 > u64::MAX > 10^16: at most 5 base-10000 digits of whole part
    let mut digits = [0u16; 6];
    let mut n = 0;
    while whole > 0 {
        digits[n] = (whole % 10_000) as u16;
        whole /= 10_000;
        n += 1;
    }
    digits[..n].reverse();
    digits[n] = ((magnitude % unit) * 10u64.pow(4 - scale)) as u16;
    let ndigits = n + 1;
    let weight = n as i16 - 1;
    buf.extend_from_slice(&(8 + 2 * ndigits as i32).to_be_bytes());
    buf.extend_from_slice(&(ndigits as i16).to_be_bytes());
    buf.extend_from_slice(&weight.to_be_bytes());
    let sign: u16 = if negative { 0x4000 } else { 0 };
    buf.extend_from_slice(&sign.to_be_bytes());
    buf.extend_from_slice(&(scale as i16).to_be_bytes()); // display scale
    for d in &digits[..ndigits] {
        buf.extend_from_slice(&d.to_be_bytes());
    }
}

/// Seconds from 1970-01-01 to 2000-01-01, PostgreSQL's timestamp epoch.
const PG_EPOCH_SECONDS: i64 = PG_EPOCH_DAYS as i64 * 86_400;

/// A `timestamp` (without time zone) given as seconds since 1970-01-01:
/// microseconds since 2000-01-01.
#[inline]
pub fn timestamp_unix(buf: &mut Vec<u8>, seconds: i64) {
    int8(buf, (seconds - PG_EPOCH_SECONDS) * 1_000_000);
}

/// A NULL field.
#[inline]
pub fn null(buf: &mut Vec<u8>) {
    buf.extend_from_slice(&(-1i32).to_be_bytes());
}

/// Decoding, for tests: a binary COPY stream back to rows of text fields in
/// the form COPY text would give, with each field's type named by `kinds`.
#[cfg(test)]
pub mod decode {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        Int4,
        Int8,
        Numeric,
        Date,
        Timestamp,
        Text,
    }

    fn be16(b: &[u8]) -> i16 {
        i16::from_be_bytes([b[0], b[1]])
    }

    fn be32(b: &[u8]) -> i32 {
        i32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    fn numeric(f: &[u8]) -> String {
        let n = be16(&f[0..]) as usize;
        let weight = be16(&f[2..]) as i32;
        let sign = be16(&f[4..]);
        let dscale = be16(&f[6..]) as usize;
        assert_eq!(f.len(), 8 + 2 * n);
        let digits: Vec<i64> = (0..n).map(|i| be16(&f[8 + 2 * i..]) as i64).collect();
        assert!(digits.iter().all(|&d| (0..10_000).contains(&d)));
        // value * 10^4 scaled to an integer number of 1/10000ths
        let mut scaled: i128 = 0;
        for (i, d) in digits.iter().enumerate() {
            let power = 4 * (weight - i as i32 + 1);
            scaled += *d as i128 * 10i128.pow(power as u32);
        }
        let whole = scaled / 10_000;
        let frac = format!("{:04}", scaled % 10_000);
        let minus = if sign == 0x4000 { "-" } else { "" };
        format!("{minus}{whole}.{}", &frac[..dscale])
    }

    fn date(days: i32) -> String {
        // civil from days since 2000-01-01 (H. Hinnant's algorithm)
        let z = days as i64 + 10_957 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        let y = yoe + era * 400 + i64::from(m <= 2);
        format!("{y:04}-{m:02}-{d:02}")
    }

    /// The rows of one COPY stream (header to trailer).
    pub fn rows(stream: &[u8], kinds: &[Kind]) -> Vec<Vec<String>> {
        assert_eq!(&stream[..19], super::HEADER);
        let mut at = 19;
        let mut out = Vec::new();
        loop {
            let fields = be16(&stream[at..]);
            at += 2;
            if fields == -1 {
                assert_eq!(at, stream.len(), "bytes after the trailer");
                return out;
            }
            assert_eq!(fields as usize, kinds.len());
            let mut row = Vec::new();
            for kind in kinds {
                let len = be32(&stream[at..]);
                at += 4;
                if len == -1 {
                    row.push("\\N".to_string()); // as COPY text writes NULL
                    continue;
                }
                let len = len as usize;
                let f = &stream[at..at + len];
                at += len;
                row.push(match kind {
                    Kind::Int4 => {
                        assert_eq!(len, 4);
                        be32(f).to_string()
                    }
                    Kind::Int8 => {
                        assert_eq!(len, 8);
                        i64::from_be_bytes(f.try_into().unwrap()).to_string()
                    }
                    Kind::Numeric => numeric(f),
                    Kind::Date => {
                        assert_eq!(len, 4);
                        date(be32(f))
                    }
                    Kind::Timestamp => {
                        assert_eq!(len, 8);
                        let micros = i64::from_be_bytes(f.try_into().unwrap());
                        assert_eq!(micros % 1_000_000, 0, "whole seconds only");
                        let s = micros / 1_000_000;
                        let day = date(s.div_euclid(86_400) as i32);
                        let t = s.rem_euclid(86_400);
                        format!("{day} {:02}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                    }
                    Kind::Text => String::from_utf8(f.to_vec()).unwrap(),
                });
            }
            out.push(row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::decode::{rows, Kind};
    use super::*;

    fn one(kind: Kind, write: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut buf = HEADER.to_vec();
        row(&mut buf, 1);
        write(&mut buf);
        buf.extend_from_slice(TRAILER);
        rows(&buf, &[kind]).remove(0).remove(0)
    }

    #[test]
    fn numerics_round_trip_with_two_decimals() {
        for (cents, text) in [
            (0, "0.00"),
            (5, "0.05"),
            (100, "1.00"),
            (1234, "12.34"),
            (-99_999, "-999.99"),
            (10_494_950, "104949.50"),
            (100_000_000, "1000000.00"),
            (123_456_789_012_345, "1234567890123.45"),
        ] {
            assert_eq!(one(Kind::Numeric, |b| numeric_cents(b, cents)), text);
        }
        let max = one(Kind::Numeric, |b| numeric_cents(b, i64::MIN + 1));
        assert_eq!(max, "-92233720368547758.07");
    }

    #[test]
    fn numerics_of_other_scales_round_trip() {
        for (units, scale, text) in [
            (0, 4, "0.0000"),
            (5, 4, "0.0005"),
            (2000, 4, "0.2000"),
            (12_345, 4, "1.2345"),
            (-1000, 4, "-0.1000"),
            (7, 1, "0.7"),
            (123_456, 3, "123.456"),
            (30_000_000, 2, "300000.00"),
        ] {
            assert_eq!(one(Kind::Numeric, |b| numeric_fixed(b, units, scale)), text);
        }
    }

    #[test]
    fn timestamps_count_microseconds_from_2000_and_null_has_no_bytes() {
        assert_eq!(
            one(Kind::Timestamp, |b| timestamp_unix(b, 1_700_000_000)),
            "2023-11-14 22:13:20"
        );
        assert_eq!(
            one(Kind::Timestamp, |b| timestamp_unix(b, 0)),
            "1970-01-01 00:00:00"
        );
        let mut buf = Vec::new();
        timestamp_unix(&mut buf, 946_684_801);
        assert_eq!(buf, [0, 0, 0, 8, 0, 0, 0, 0, 0, 0x0f, 0x42, 0x40]);
        assert_eq!(one(Kind::Int4, null), "\\N");
    }

    #[test]
    fn numeric_digits_are_base_10000_most_significant_first() {
        let mut buf = Vec::new();
        numeric_cents(&mut buf, 123_456_789); // 1234567.89
        let words: Vec<u16> = buf[4..]
            .chunks(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        // ndigits 3, weight 1, positive, dscale 2: 123 4567 . 8900
        assert_eq!(words, [3, 1, 0, 2, 123, 4567, 8900]);
        assert_eq!(i32::from_be_bytes(buf[..4].try_into().unwrap()), 14);
    }

    #[test]
    fn dates_count_from_2000() {
        assert_eq!(one(Kind::Date, |b| date_unix(b, 0)), "1970-01-01");
        assert_eq!(one(Kind::Date, |b| date_unix(b, 10_957)), "2000-01-01");
        assert_eq!(one(Kind::Date, |b| date_unix(b, 8_035)), "1992-01-01");
        let mut buf = Vec::new();
        date_unix(&mut buf, 10_958);
        assert_eq!(buf, [0, 0, 0, 4, 0, 0, 0, 1]);
    }

    #[test]
    fn text_and_display_carry_their_length() {
        assert_eq!(one(Kind::Text, |b| text(b, "Zürich")), "Zürich");
        assert_eq!(one(Kind::Text, |b| display(b, 42.5)), "42.5");
        let mut buf = Vec::new();
        display(&mut buf, "abc");
        assert_eq!(buf, [0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(one(Kind::Int8, |b| int8(b, -7)), "-7");
        assert_eq!(one(Kind::Int4, |b| int4_of(b, 7)), "7");
    }
}
