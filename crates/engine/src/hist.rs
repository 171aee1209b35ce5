//! HDR latency histograms: recorded in microseconds, encoded in the HdrHistogram
//! V2 compressed format (the one the Java, C and Go ports read), merged exactly.
//!
//! Merging is exact because every histogram in perflab has the same bucket
//! layout (`LOWEST_US`..`HIGHEST_US`, `SIGNIFICANT_DIGITS`): adding two of them
//! adds bucket counts, so percentiles of a merged histogram equal those of one
//! histogram that recorded every value.

use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use std::fmt;

/// Lowest and highest trackable latencies: 1 µs to one hour. A stalled server
/// can hold a transaction for minutes; larger values saturate at the top.
pub const LOWEST_US: u64 = 1;
pub const HIGHEST_US: u64 = 3_600_000_000;
/// 3 significant digits: values are kept to within 0.1%.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// The encoding name stored beside the bytes (model.Histogram.encoding).
pub const ENCODING: &str = "hdr-v2-deflate";

#[derive(Debug)]
pub struct HistError(pub String);

impl fmt::Display for HistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HistError {}

/// A latency histogram in microseconds.
#[derive(Clone)]
pub struct LatencyHistogram {
    inner: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

/// The figures a report needs from one histogram, in microseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_us: f64,
    pub stddev_us: f64,
    pub min_us: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl LatencyHistogram {
    pub fn new() -> Self {
        let inner = Histogram::new_with_bounds(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
            .expect("constant histogram bounds are valid");
        Self { inner }
    }

    /// Record one latency; 0 µs counts as 1 µs and values above an hour as an hour.
    #[inline]
    pub fn record_us(&mut self, latency_us: u64) {
        self.inner
            .saturating_record(latency_us.clamp(LOWEST_US, HIGHEST_US));
    }

    pub fn count(&self) -> u64 {
        self.inner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    pub fn reset(&mut self) {
        self.inner.reset();
    }

    /// Add every count of `other` (same layout, so exact).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        self.inner
            .add(&other.inner)
            .expect("histograms of one layout always merge");
    }

    /// The value below which `quantile` (0..=1) of the recordings fall.
    pub fn value_at_quantile_us(&self, quantile: f64) -> u64 {
        if self.inner.is_empty() {
            return 0;
        }
        self.inner.value_at_quantile(quantile)
    }

    pub fn mean_us(&self) -> f64 {
        if self.inner.is_empty() {
            0.0
        } else {
            self.inner.mean()
        }
    }

    pub fn summary(&self) -> LatencySummary {
        if self.inner.is_empty() {
            return LatencySummary::default();
        }
        let h = &self.inner;
        LatencySummary {
            count: h.len(),
            mean_us: h.mean(),
            stddev_us: h.stdev(),
            min_us: h.min(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }

    /// V2 compressed encoding (deflate), readable by every HdrHistogram port.
    /// Every recorded value (µs: the highest value of its bucket, which records
    /// into the same bucket again)
    /// with its count, lowest first.
    pub fn recorded(&self) -> Vec<(u64, u64)> {
        self.inner
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&self.inner, &mut out)
            .expect("serialising into a Vec cannot fail");
        out
    }

    /// Decode V2 (compressed or not). A histogram from another layout is
    /// re-recorded into perflab's layout so that merges stay exact.
    pub fn decode(bytes: &[u8]) -> Result<Self, HistError> {
        let decoded: Histogram<u64> = Deserializer::new()
            .deserialize(&mut &bytes[..])
            .map_err(|e| HistError(format!("not an HDR histogram (V2 encoding): {e:?}")))?;
        let mut out = Self::new();
        out.inner
            .add(&decoded)
            .map_err(|e| HistError(format!("histogram cannot be merged: {e:?}")))?;
        Ok(out)
    }
}

/// Merge encoded histograms into one encoded histogram.
pub fn merge_encoded<'a, I: IntoIterator<Item = &'a [u8]>>(parts: I) -> Result<Vec<u8>, HistError> {
    let mut total = LatencyHistogram::new();
    for part in parts {
        total.merge(&LatencyHistogram::decode(part)?);
    }
    Ok(total.encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_keeps_every_count() {
        let mut h = LatencyHistogram::new();
        for v in [1u64, 5, 250, 1_000, 12_345, 2_000_000] {
            h.record_us(v);
        }
        let back = LatencyHistogram::decode(&h.encode()).unwrap();
        assert_eq!(back.summary(), h.summary());
        assert_eq!(back.count(), 6);
    }

    #[test]
    fn merge_of_parts_equals_one_histogram_of_all_values() {
        let mut all = LatencyHistogram::new();
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        for i in 0..10_000u64 {
            let v = 50 + (i * 7919) % 40_000;
            all.record_us(v);
            if i % 3 == 0 {
                a.record_us(v)
            } else {
                b.record_us(v)
            }
        }
        let merged =
            LatencyHistogram::decode(&merge_encoded([&a.encode()[..], &b.encode()[..]]).unwrap())
                .unwrap();
        assert_eq!(merged.summary(), all.summary());
    }

    #[test]
    fn out_of_range_values_saturate_instead_of_failing() {
        let mut h = LatencyHistogram::new();
        h.record_us(0);
        h.record_us(u64::MAX);
        assert_eq!(h.count(), 2);
        assert_eq!(h.summary().min_us, 1);
        assert!(h.summary().max_us >= HIGHEST_US);
    }

    #[test]
    fn garbage_is_a_clear_error() {
        let err = LatencyHistogram::decode(b"not a histogram").err().unwrap();
        assert!(err.to_string().contains("not an HDR histogram"));
    }
}
