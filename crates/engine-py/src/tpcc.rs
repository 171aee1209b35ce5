//! Bindings of TPC-C: its loader and its driver (the harness with
//! `TpccProtocol`). Glue only; see `perflab_engine::tpcc`.

use crate::errors::{config_error, engine_error};
use crate::glue::{drive, run_blocking, HarnessArgs};
use crate::results::{DriverResult, LoadReport};
use perflab_engine::tpcc::load::{self, LoadConfig};
use perflab_engine::tpcc::protocol::{Constants, Mode, TpccConfig};
use perflab_engine::tpcc::TpccProtocol;
use pyo3::prelude::*;

/// Load the TPC-C initial database into existing empty tables.
#[pyfunction]
#[pyo3(signature = (
    conninfo, *, warehouses, jobs, seed, c_last, copy_format="binary", on_step=None, cancel=None
))]
#[allow(clippy::too_many_arguments)]
fn tpcc_load<'py>(
    py: Python<'py>,
    conninfo: String,
    warehouses: u32,
    jobs: u32,
    seed: u64,
    c_last: i64,
    copy_format: &str,
    on_step: Option<Bound<'py, PyAny>>,
    cancel: Option<Bound<'py, PyAny>>,
) -> PyResult<LoadReport> {
    let cfg = LoadConfig {
        conninfo,
        warehouses,
        jobs,
        seed,
        c_last_load: c_last,
        format: copy_format.parse().map_err(config_error)?,
    };
    let report = run_blocking(
        py,
        "perflab-tpcc-load",
        cancel.as_ref(),
        on_step.as_ref(),
        |abort, on_step| load::load(&cfg, abort, on_step),
    )?
    .map_err(engine_error)?;
    Ok(LoadReport::new(report.steps, report.rows))
}

/// Drive TPC-C's five transactions through the harness; returns the run's
/// figures (by_type: new_order, new_order_rollback, payment, order_status,
/// delivery, stock_level).
#[pyfunction]
#[pyo3(signature = (
    conninfo, *, warehouses, clients, threads, t0_ns, mode="statements",
    duration_s=None, transactions=None, warmup_s=0.0, rate_tps=None, schedule="poisson",
    latency_limit_ms=None, max_tries=1, seed=0, c_last, c_id, ol_i_id, keying=false,
    weights=None, io="epoll", progress=None, cancel=None, on_connected=None
))]
#[allow(clippy::too_many_arguments)]
fn tpcc_run<'py>(
    py: Python<'py>,
    conninfo: String,
    warehouses: u32,
    clients: u32,
    threads: u32,
    t0_ns: u64,
    mode: &str,
    duration_s: Option<f64>,
    transactions: Option<u64>,
    warmup_s: f64,
    rate_tps: Option<f64>,
    schedule: &str,
    latency_limit_ms: Option<f64>,
    max_tries: u32,
    seed: u64,
    c_last: i64,
    c_id: i64,
    ol_i_id: i64,
    keying: bool,
    weights: Option<Vec<f64>>,
    io: &str,
    progress: Option<Bound<'py, PyAny>>,
    cancel: Option<Bound<'py, PyAny>>,
    on_connected: Option<Bound<'py, PyAny>>,
) -> PyResult<DriverResult> {
    let weights = match weights {
        None => None,
        Some(w) => Some(<[f64; 5]>::try_from(w.as_slice()).map_err(|_| {
            config_error(format!(
                "weights has {} values; give 5 (new_order, payment, order_status, delivery, \
                 stock_level)",
                w.len()
            ))
        })?),
    };
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
    let protocol = TpccProtocol::new(
        &conninfo,
        TpccConfig {
            warehouses,
            mode: mode.parse::<Mode>().map_err(config_error)?,
            constants: Constants {
                c_last,
                c_id,
                ol_i_id,
            },
            keying,
            weights,
        },
    )
    .map_err(engine_error)?;
    drive(py, cfg, protocol, progress, cancel, on_connected)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tpcc_load, m)?)?;
    m.add_function(wrap_pyfunction!(tpcc_run, m)?)?;
    Ok(())
}
