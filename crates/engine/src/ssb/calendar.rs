//! The DATE dimension's calendar: keys, month lengths, selling seasons.

use crate::units::{civil_from_days, days_from_civil};

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

pub(super) fn month_days(y: i64, m: u32) -> u32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

pub(super) fn first_day() -> i64 {
    days_from_civil(1992, 1, 1)
}

/// The DATE key (yyyymmdd) of day `offset` after 1992-01-01.
pub(super) fn date_key(offset: i64) -> i64 {
    let (y, m, d) = civil_from_days(first_day() + offset);
    y * 10_000 + m as i64 * 100 + d as i64
}

pub(super) fn selling_season(m: u32, d: u32) -> &'static str {
    match (m, d) {
        (12, _) => "Christmas",
        (1..=2, _) => "Winter",
        (3..=5, _) => "Spring",
        (6..=8, _) => "Summer",
        (11, 24..) => "Christmas",
        _ => "Fall",
    }
}
