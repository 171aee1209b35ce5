//! Bindings of TPC-B (the harness's first protocol, and its loader) and the
//! HDR histogram helpers. Runs and loads go through `glue`: the GIL released,
//! signals and `cancel` checked every POLL_INTERVAL.

use crate::errors::{config_error, engine_error};
use crate::glue::{harness_binding, run_blocking};
use crate::results::{DriverResult, LatencySummary, LoadReport};
use perflab_engine::hist::{self, LatencyHistogram};
use perflab_engine::sys::monotonic_ns;
use perflab_engine::tpcb::load::{self, LoadConfig};
use perflab_engine::tpcb::{QueryMode, Script, TpcbProtocol};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

harness_binding! {
    /// Drive pgbench's TPC-B-like scripts; returns the run's figures.
    #[pyo3(signature = (conninfo, *, script, scale, protocol))]
    fn tpcb_run<'py>(
        py: Python<'py>,
        conninfo: String,
        script: &str,
        scale: u32,
        protocol: &str,
    ) with harness -> PyResult<DriverResult> {
        let script = script.parse::<Script>().map_err(config_error)?;
        let mode = protocol.parse::<QueryMode>().map_err(config_error)?;
        let protocol = TpcbProtocol::new(&conninfo, script, scale, mode).map_err(engine_error)?;
        harness.drive(py, protocol)
    }
}

/// Load the pgbench data set; returns each step's seconds and rows per table.
#[pyfunction]
#[pyo3(signature = (conninfo, *, scale, fillfactor=100, on_step=None, cancel=None))]
fn tpcb_load<'py>(
    py: Python<'py>,
    conninfo: String,
    scale: u32,
    fillfactor: u32,
    on_step: Option<Bound<'py, PyAny>>,
    cancel: Option<Bound<'py, PyAny>>,
) -> PyResult<LoadReport> {
    let cfg = LoadConfig {
        conninfo,
        scale,
        fillfactor,
    };
    let report = run_blocking(
        py,
        "perflab-tpcb-load",
        cancel.as_ref(),
        on_step.as_ref(),
        |abort, on_step| load::load(&cfg, abort, on_step),
    )?
    .map_err(engine_error)?;
    Ok(LoadReport::new(report.steps, report.rows))
}

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
    m.add_function(wrap_pyfunction!(tpcb_run, m)?)?;
    m.add_function(wrap_pyfunction!(tpcb_load, m)?)?;
    m.add_function(wrap_pyfunction!(hdr_merge, m)?)?;
    m.add_function(wrap_pyfunction!(hdr_summary, m)?)?;
    m.add_function(wrap_pyfunction!(hdr_quantile_us, m)?)?;
    m.add_function(wrap_pyfunction!(hdr_encode, m)?)?;
    m.add_function(wrap_pyfunction!(hdr_values, m)?)?;
    m.add_function(wrap_pyfunction!(monotonic_clock_ns, m)?)?;
    Ok(())
}
