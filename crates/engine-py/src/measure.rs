//! How the engine measures, for every workload alike: HDR latency
//! histograms as the results carry them (merge, summary, quantile, encode,
//! values) and the engine's clock.

use crate::errors::config_error;
use crate::results::LatencySummary;
use perflab_engine::hist::{self, LatencyHistogram};
use perflab_engine::sys::monotonic_ns;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Merge HDR histograms (V2 encoded) exactly into one encoded histogram.
#[pyfunction]
fn hdr_merge<'py>(py: Python<'py>, parts: Vec<Vec<u8>>) -> PyResult<Bound<'py, PyBytes>> {
    let merged = hist::merge_encoded(parts.iter().map(|p| p.as_slice()))
        .map_err(|e| config_error(e.to_string()))?;
    Ok(PyBytes::new(py, &merged))
}

/// Count, mean, stddev and percentiles (µs) of an encoded HDR histogram.
#[pyfunction]
fn hdr_summary(data: &[u8]) -> PyResult<LatencySummary> {
    let h = LatencyHistogram::decode(data).map_err(|e| config_error(e.to_string()))?;
    Ok(h.summary().into())
}

/// Value (µs) at a quantile (0..1) of an encoded HDR histogram.
#[pyfunction]
fn hdr_quantile_us(data: &[u8], quantile: f64) -> PyResult<u64> {
    if !(0.0..=1.0).contains(&quantile) {
        return Err(config_error(format!(
            "quantile {quantile} is out of range; allowed: 0..1"
        )));
    }
    let h = LatencyHistogram::decode(data).map_err(|e| config_error(e.to_string()))?;
    Ok(h.value_at_quantile_us(quantile))
}

/// Encode the given latencies (µs) as an HDR histogram (for tests and tools).
#[pyfunction]
fn hdr_encode<'py>(py: Python<'py>, latencies_us: Vec<u64>) -> Bound<'py, PyBytes> {
    let mut h = LatencyHistogram::new();
    for v in latencies_us {
        h.record_us(v);
    }
    PyBytes::new(py, &h.encode())
}

/// Every recorded value (µs, its bucket's) with its count, lowest first: the
/// samples an encoded HDR histogram holds.
#[pyfunction]
fn hdr_values(data: &[u8]) -> PyResult<Vec<(u64, u64)>> {
    let h = LatencyHistogram::decode(data).map_err(|e| config_error(e.to_string()))?;
    Ok(h.recorded())
}

/// CLOCK_MONOTONIC in ns, as the engine reads it (equals time.monotonic_ns()).
#[pyfunction]
fn monotonic_clock_ns() -> u64 {
    monotonic_ns()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(hdr_merge, m)?)?;
    m.add_function(wrap_pyfunction!(hdr_summary, m)?)?;
    m.add_function(wrap_pyfunction!(hdr_quantile_us, m)?)?;
    m.add_function(wrap_pyfunction!(hdr_encode, m)?)?;
    m.add_function(wrap_pyfunction!(hdr_values, m)?)?;
    m.add_function(wrap_pyfunction!(monotonic_clock_ns, m)?)?;
    Ok(())
}
