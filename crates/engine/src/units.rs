//! Durations as experiment files write them: "90s", "1.5m", "250ms", "2h", "1h30m".

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

#[cfg(test)]
mod tests {
    use super::*;

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
