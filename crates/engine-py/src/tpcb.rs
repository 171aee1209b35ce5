//! Bindings of TPC-B (the harness's first protocol, and its loader). Runs
//! and loads go through `glue`: the GIL released, signals and `cancel`
//! checked every POLL_INTERVAL.

use crate::errors::{config_error, engine_error};
use crate::glue::{harness_binding, run_blocking};
use crate::results::{DriverResult, LoadReport};
use perflab_engine::tpcb::load::{self, LoadConfig};
use perflab_engine::tpcb::{QueryMode, Script, TpcbProtocol};
use pyo3::prelude::*;

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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tpcb_run, m)?)?;
    m.add_function(wrap_pyfunction!(tpcb_load, m)?)?;
    Ok(())
}
