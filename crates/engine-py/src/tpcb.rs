//! Bindings of the load harness (TPC-B, its first protocol), the TPC-B
//! loader and the HDR histogram helpers.
//!
//! A run or a load executes on Rust threads with the GIL released. The
//! calling thread wakes every POLL_INTERVAL to take the GIL briefly, call
//! `py.check_signals()` and the caller's `cancel.is_set()`: when either says
//! stop, every client is stopped and the error (the signal handler's, or
//! `Interrupted`) is returned to Python within about a second.

use crate::errors::{config_error, engine_error, EngineError, Interrupted};
use crate::results::{DriverResult, Interval, LatencySummary, LoadReport};
use perflab_engine::error::EngineError as CoreError;
use perflab_engine::harness::{HarnessConfig, Progress, Protocol, Run};
use perflab_engine::hist::{self, LatencyHistogram};
use perflab_engine::sys::monotonic_ns;
use perflab_engine::tpcb::load::{self, LoadConfig};
use perflab_engine::tpcb::{QueryMode, Script, TpcbProtocol};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Stop when the runner asked to (a threading.Event-like object).
pub(crate) fn check_cancel(cancel: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    match cancel {
        Some(event) if event.call_method0("is_set")?.extract::<bool>()? => {
            Err(Interrupted::new_err("run cancelled"))
        }
        _ => Ok(()),
    }
}

/// Drive any protocol through the harness with the GIL released, reporting
/// each second to `progress`. Every protocol's binding calls this (or
/// `drive_gated`, when it can be one of several drivers).
#[allow(dead_code)] // tpcb and tpcc bind drive_gated; a binding without a barrier calls this
pub(crate) fn drive<P: Protocol>(
    py: Python<'_>,
    cfg: HarnessConfig,
    protocol: P,
    progress: Option<Bound<'_, PyAny>>,
    cancel: Option<Bound<'_, PyAny>>,
) -> PyResult<DriverResult> {
    drive_gated(py, cfg, protocol, progress, cancel, None)
}

/// The harness settings every binding takes from Python, parsed in one place.
#[allow(clippy::too_many_arguments)]
pub(crate) fn harness_config(
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
) -> PyResult<HarnessConfig> {
    Ok(HarnessConfig {
        clients,
        threads,
        duration_s,
        transactions_per_client: transactions,
        warmup_s,
        rate_tps,
        schedule: schedule.parse().map_err(config_error)?,
        latency_limit_us: latency_limit_ms.map(|ms| (ms * 1000.0).round() as u64),
        max_tries,
        seed,
        t0_ns,
        io: io.parse().map_err(config_error)?,
    })
}

/// `drive`, and with `on_connected` a gated run: once every client is
/// connected, `on_connected()` is called (it waits on the drivers' shared
/// barrier) and returns the CLOCK_MONOTONIC ns to start at.
pub(crate) fn drive_gated<P: Protocol>(
    py: Python<'_>,
    cfg: HarnessConfig,
    protocol: P,
    progress: Option<Bound<'_, PyAny>>,
    cancel: Option<Bound<'_, PyAny>>,
    on_connected: Option<Bound<'_, PyAny>>,
) -> PyResult<DriverResult> {
    let run = match on_connected {
        Some(_) => Run::start_gated(cfg, protocol),
        None => Run::start(cfg, protocol),
    }
    .map_err(engine_error)?;
    let mut gate = on_connected;
    loop {
        let step = py.detach(|| run.next_progress(POLL_INTERVAL));
        let stop = py
            .check_signals()
            .and_then(|()| check_cancel(cancel.as_ref()))
            .and_then(|()| match gate.as_ref() {
                Some(callback) if run.connected() => {
                    let at: u64 = callback.call0()?.extract()?;
                    gate = None;
                    run.go_at(at);
                    Ok(())
                }
                _ => Ok(()),
            })
            .and_then(|()| match (&step, &progress) {
                (Progress::Interval(report), Some(callback)) => {
                    callback.call1((Interval::from(report),)).map(|_| ())
                }
                _ => Ok(()),
            });
        if let Err(err) = stop {
            run.abort();
            let _ = py.detach(|| run.join());
            return Err(err);
        }
        if matches!(step, Progress::Finished) {
            break;
        }
    }
    let summary = py.detach(|| run.join()).map_err(engine_error)?;
    DriverResult::new(py, &summary)
}

/// Drive pgbench's TPC-B-like scripts; returns the run's figures.
#[pyfunction]
#[pyo3(signature = (
    conninfo, *, script, scale, clients, threads, protocol, t0_ns,
    duration_s=None, transactions=None, warmup_s=0.0, rate_tps=None, schedule="poisson",
    latency_limit_ms=None, max_tries=1, seed=0, io="epoll", progress=None, cancel=None,
    on_connected=None
))]
#[allow(clippy::too_many_arguments)]
fn tpcb_run<'py>(
    py: Python<'py>,
    conninfo: String,
    script: &str,
    scale: u32,
    clients: u32,
    threads: u32,
    protocol: &str,
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
    let mode = protocol.parse::<QueryMode>().map_err(config_error)?;
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
    let protocol = TpcbProtocol::new(&conninfo, script, scale, mode).map_err(engine_error)?;
    drive_gated(py, cfg, protocol, progress, cancel, on_connected)
}

enum LoadMessage {
    Step(String),
    Done(Result<load::LoadReport, CoreError>),
}

/// Load the pgbench data set; returns each step's seconds and rows per table.
#[pyfunction]
#[pyo3(signature = (conninfo, *, scale, fillfactor=100, on_step=None))]
fn tpcb_load<'py>(
    py: Python<'py>,
    conninfo: String,
    scale: u32,
    fillfactor: u32,
    on_step: Option<Bound<'py, PyAny>>,
) -> PyResult<LoadReport> {
    let cfg = LoadConfig {
        conninfo,
        scale,
        fillfactor,
    };
    let abort = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let thread_abort = abort.clone();
    let loader = std::thread::Builder::new()
        .name("perflab-tpcb-load".into())
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
        let mut checked = py.check_signals();
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
