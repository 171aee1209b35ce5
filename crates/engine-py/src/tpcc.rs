//! Bindings of TPC-C: its loader and its driver (the harness with
//! `TpccProtocol`). Glue only; see `perflab_engine::tpcc`.

use crate::errors::{engine_error, EngineError};
use crate::results::LoadReport;
use crate::tpcb::{check_cancel, POLL_INTERVAL};
use perflab_engine::error::EngineError as CoreError;
use perflab_engine::tpcc::load::{self, LoadConfig};
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

enum LoadMessage {
    Step(String),
    Done(Result<load::LoadReport, CoreError>),
}

/// Load the TPC-C initial database into existing empty tables.
#[pyfunction]
#[pyo3(signature = (conninfo, *, warehouses, jobs, seed, c_last, on_step=None, cancel=None))]
#[allow(clippy::too_many_arguments)]
fn tpcc_load<'py>(
    py: Python<'py>,
    conninfo: String,
    warehouses: u32,
    jobs: u32,
    seed: u64,
    c_last: i64,
    on_step: Option<Bound<'py, PyAny>>,
    cancel: Option<Bound<'py, PyAny>>,
) -> PyResult<LoadReport> {
    let cfg = LoadConfig {
        conninfo,
        warehouses,
        jobs,
        seed,
        c_last_load: c_last,
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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tpcc_load, m)?)?;
    Ok(())
}
