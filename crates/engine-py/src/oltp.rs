//! Bindings of sysbench's OLTP workload: its run (through `glue::drive`) and
//! its loader (through `glue::run_blocking`).

use crate::errors::{config_error, engine_error};
use crate::glue::{drive, run_blocking, HarnessArgs};
use crate::results::{DriverResult, LoadReport};
use perflab_engine::oltp::load::{self, LoadConfig};
use perflab_engine::oltp::{OltpProtocol, RandType, Script};
use pyo3::prelude::*;

/// Drive one of sysbench's OLTP scripts; returns the run's figures.
#[pyfunction]
#[pyo3(signature = (
    conninfo, *, script, tables, table_size, rand_type, clients, threads, t0_ns,
    duration_s=None, transactions=None, warmup_s=0.0, rate_tps=None, schedule="poisson",
    latency_limit_ms=None, max_tries=1, seed=0, io="epoll", progress=None, cancel=None,
    on_connected=None
))]
#[allow(clippy::too_many_arguments)]
fn oltp_run<'py>(
    py: Python<'py>,
    conninfo: String,
    script: &str,
    tables: u32,
    table_size: u32,
    rand_type: &str,
    clients: u32,
    threads: u32,
    t0_ns: u64,
    duration_s: Option<f64>,
    transactions: Option<u64>,
    warmup_s: f64,
    rate_tps: Option<f64>,
    schedule: &str,
    latency_limit_ms: Option<f64>,
    max_tries: u32,
    seed: u64,
    io: &str,
    progress: Option<Bound<'py, PyAny>>,
    cancel: Option<Bound<'py, PyAny>>,
    on_connected: Option<Bound<'py, PyAny>>,
) -> PyResult<DriverResult> {
    let script = script.parse::<Script>().map_err(config_error)?;
    let rand_type = rand_type.parse::<RandType>().map_err(config_error)?;
    let cfg = HarnessArgs {
        clients,
        threads,
        t0_ns,
        duration_s,
        transactions,
        warmup_s,
        rate_tps,
        schedule,
        latency_limit_ms,
        max_tries,
        seed,
        io,
    }
    .config()?;
    let protocol = OltpProtocol::new(&conninfo, script, tables, table_size, rand_type)
        .map_err(engine_error)?;
    drive(py, cfg, protocol, progress, cancel, on_connected)
}

/// Load sbtest1..tables; returns each table's seconds and rows.
#[pyfunction]
#[pyo3(signature = (conninfo, *, tables, table_size, rand_type, workers=2, seed=0, on_step=None, cancel=None))]
#[allow(clippy::too_many_arguments)]
fn oltp_load<'py>(
    py: Python<'py>,
    conninfo: String,
    tables: u32,
    table_size: u32,
    rand_type: &str,
    workers: u32,
    seed: u64,
    on_step: Option<Bound<'py, PyAny>>,
    cancel: Option<Bound<'py, PyAny>>,
) -> PyResult<LoadReport> {
    let cfg = LoadConfig {
        conninfo,
        tables,
        table_size,
        rand_type: rand_type.parse::<RandType>().map_err(config_error)?,
        workers,
        seed,
    };
    let report = run_blocking(
        py,
        "perflab-oltp-load",
        cancel.as_ref(),
        on_step.as_ref(),
        |abort, on_step| load::load(&cfg, abort, on_step),
    )?
    .map_err(engine_error)?;
    Ok(LoadReport::new(report.steps, report.rows))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(oltp_run, m)?)?;
    m.add_function(wrap_pyfunction!(oltp_load, m)?)?;
    Ok(())
}
