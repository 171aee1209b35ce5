//! Durations as experiment files write them: "90s", "1.5m", "250ms", "2h", "1h30m";
//! and civil dates as days since 1970-01-01 (the data generators' calendars).

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError {
    pub given: String,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a duration; allowed: a number with a unit of us, ms, s, m, h or d \
             (e.g. \"250ms\", \"60s\", \"1h30m\")",
            self.given
        )
    }
}

impl std::error::Error for DurationError {}

fn unit_seconds(unit: &str) -> Option<f64> {
    Some(match unit {
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" | "sec" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return None,
    })
}

/// Parse a duration into seconds. A bare number means seconds. Every part needs a
/// unit once a unit is used ("1h30m"); negative or non-finite values are refused.
pub fn parse_duration_s(text: &str) -> Result<f64, DurationError> {
    let err = || DurationError {
        given: text.to_string(),
    };
    let s = text.trim();
    if s.is_empty() {
        return Err(err());
    }
    if let Ok(v) = s.parse::<f64>() {
        return if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(err())
        };
    }
    let mut total = 0.0;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        if num_len == 0 {
            return Err(err());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = rest[num_len..].trim_start();
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.' || c == ' ')
            .unwrap_or(rest.len());
        let factor = unit_seconds(&rest[..unit_len]).ok_or_else(err)?;
        total += value * factor;
        rest = rest[unit_len..].trim_start();
    }
    if total.is_finite() {
        Ok(total)
    } else {
        Err(err())
    }
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian; the
/// era-based method of H. Hinnant, "chrono-compatible low-level date
/// algorithms").
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month, day) of days since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_round_trip_through_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn plain_units() {
        assert_eq!(parse_duration_s("60s").unwrap(), 60.0);
        assert_eq!(parse_duration_s("250ms").unwrap(), 0.25);
        assert_eq!(parse_duration_s("2h").unwrap(), 7200.0);
        assert_eq!(parse_duration_s("1.5m").unwrap(), 90.0);
        assert_eq!(parse_duration_s("12").unwrap(), 12.0);
    }

    #[test]
    fn compound() {
        assert_eq!(parse_duration_s("1h30m").unwrap(), 5400.0);
        assert_eq!(parse_duration_s("1m 30s").unwrap(), 90.0);
    }

    #[test]
    fn refused() {
        for bad in [
            "",
            "10 parsecs",
            "s",
            "-5s",
            "1h30",
            "ten seconds",
            "inf",
            "NaN",
        ] {
            assert!(parse_duration_s(bad).is_err(), "{bad} should be refused");
        }
    }
}
