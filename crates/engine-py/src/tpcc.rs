//! Bindings of TPC-C: its loader and its driver (the harness with
//! `TpccProtocol`). Glue only; see `perflab_engine::tpcc`.

use crate::errors::{config_error, engine_error, EngineError};
use crate::results::{DriverResult, LoadReport};
use crate::tpcb::{check_cancel, drive_gated, harness_config, POLL_INTERVAL};
use perflab_engine::error::EngineError as CoreError;
use perflab_engine::tpcc::load::{self, LoadConfig};
use perflab_engine::tpcc::protocol::{Constants, Mode, TpccConfig};
use perflab_engine::tpcc::TpccProtocol;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

enum LoadMessage {
    Step(String),
    Done(Result<load::LoadReport, CoreError>),
}

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
    let abort = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let thread_abort = abort.clone();
    let loader = std::thread::Builder::new()
        .name("perflab-tpcc-load".into())
        .spawn(move || {
            let step_tx = tx.clone();
            let result = load::load(&cfg, &thread_abort, |name| {
                let _ = step_tx.send(LoadMessage::Step(name.to_string()));
            });
            let _ = tx.send(LoadMessage::Done(result));
        })
        .map_err(|e| EngineError::new_err(format!("cannot start a thread: {e}")))?;
    let rx = Mutex::new(rx);
    let result = loop {
        let message = py.detach(|| rx.lock().unwrap().recv_timeout(POLL_INTERVAL));
        let mut checked = py
            .check_signals()
            .and_then(|()| check_cancel(cancel.as_ref()));
        match message {
            Ok(LoadMessage::Step(name)) => {
                if let (Ok(()), Some(callback)) = (&checked, &on_step) {
                    checked = callback.call1((name,)).map(|_| ());
                }
            }
            Ok(LoadMessage::Done(result)) => break result,
            Err(_) => {}
        }
        if let Err(err) = checked {
            abort.store(true, Ordering::SeqCst);
            let _ = py.detach(|| loader.join());
            return Err(err);
        }
    };
    let _ = loader.join();
    let report = result.map_err(engine_error)?;
    Ok(LoadReport {
        steps: report.steps,
        rows: report.rows.into_iter().collect(),
    })
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
    let cfg = harness_config(
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
    )?;
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
    drive_gated(py, cfg, protocol, progress, cancel, on_connected)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tpcc_load, m)?)?;
    m.add_function(wrap_pyfunction!(tpcc_run, m)?)?;
    Ok(())
}
