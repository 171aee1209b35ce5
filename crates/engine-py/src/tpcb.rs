//! Bindings of the TPC-B driver, its loader and the HDR histogram helpers.
//!
//! A run or a load executes on Rust threads with the GIL released. The
//! calling thread wakes every POLL_INTERVAL to take the GIL briefly and call
//! `py.check_signals()`: when that raises (perflab's SIGINT/SIGTERM handler
//! raises perflab.errors.Interrupted) every client is stopped and the error is
//! returned to Python within about a second.

use perflab_engine::hist::{self, LatencyHistogram, LatencySummary};
use perflab_engine::tpcb::driver::{
    monotonic_ns, DriverError, IntervalReport, Progress, TpcbConfig, TpcbRun, TpcbSummary,
};
use perflab_engine::tpcb::load::{self, LoadConfig, LoadError};
use perflab_engine::tpcb::{Protocol, Script};
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

const POLL_INTERVAL: Duration = Duration::from_millis(200);

fn driver_error(e: DriverError) -> PyErr {
    match e {
        DriverError::Config(m) => PyValueError::new_err(m),
        DriverError::Connect(m) => PyConnectionError::new_err(m),
        DriverError::Interrupted => PyRuntimeError::new_err("run interrupted"),
    }
}

/// Whether the runner asked to stop (a threading.Event-like object).
fn cancelled(cancel: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    match cancel {
        Some(event) => event.call_method0("is_set")?.extract(),
        None => Ok(false),
    }
}

fn latency_dict<'py>(py: Python<'py>, s: &LatencySummary) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("count", s.count)?;
    d.set_item("mean_us", s.mean_us)?;
    d.set_item("stddev_us", s.stddev_us)?;
    d.set_item("min_us", s.min_us)?;
    d.set_item("p50_us", s.p50_us)?;
    d.set_item("p90_us", s.p90_us)?;
    d.set_item("p95_us", s.p95_us)?;
    d.set_item("p99_us", s.p99_us)?;
    d.set_item("p999_us", s.p999_us)?;
    d.set_item("max_us", s.max_us)?;
    Ok(d)
}

fn interval_dict<'py>(py: Python<'py>, r: &IntervalReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("t_s", r.t_s)?;
    d.set_item("interval_s", r.interval_s)?;
    d.set_item("warmup", r.warmup)?;
    d.set_item("transactions", r.transactions)?;
    d.set_item("tps", r.tps)?;
    d.set_item("latency_mean_ms", r.latency_mean_ms)?;
    d.set_item("latency_p99_ms", r.latency_p99_ms)?;
    d.set_item("failed", r.failed)?;
    d.set_item("skipped", r.skipped)?;
    d.set_item("lag_mean_ms", r.lag_mean_ms)?;
    d.set_item("clients_running", r.clients_running)?;
    Ok(d)
}

fn summary_dict<'py>(py: Python<'py>, s: &TpcbSummary) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("transactions", s.transactions)?;
    d.set_item("failed", s.failed)?;
    d.set_item("skipped", s.skipped)?;
    d.set_item("late", s.late)?;
    d.set_item("retries", s.retries)?;
    d.set_item("retried", s.retried)?;
    let errors = PyDict::new(py);
    for (state, n) in &s.errors_by_sqlstate {
        errors.set_item(state, n)?;
    }
    d.set_item("errors_by_sqlstate", errors)?;
    d.set_item("measured_s", s.measured_s)?;
    d.set_item("measure_start_t_s", s.measure_start_t_s)?;
    d.set_item("tps", s.tps)?;
    d.set_item("latency", latency_dict(py, &s.latency.summary())?)?;
    d.set_item("lag", latency_dict(py, &s.lag.summary())?)?;
    d.set_item(
        "failed_latency",
        latency_dict(py, &s.failed_latency.summary())?,
    )?;
    let hists = PyDict::new(py);
    hists.set_item("latency", PyBytes::new(py, &s.latency.encode()))?;
    if !s.lag.is_empty() {
        hists.set_item("lag", PyBytes::new(py, &s.lag.encode()))?;
    }
    if !s.failed_latency.is_empty() {
        hists.set_item(
            "failed_latency",
            PyBytes::new(py, &s.failed_latency.encode()),
        )?;
    }
    d.set_item("histograms", hists)?;
    d.set_item("histogram_encoding", hist::ENCODING)?;
    d.set_item("clients", s.clients)?;
    d.set_item("threads", s.threads)?;
    d.set_item("lost_connections", s.lost_connections)?;
    d.set_item("connect_total_s", s.connect_total_s)?;
    d.set_item("connect_max_s", s.connect_max_s)?;
    d.set_item("connect_phase_s", s.connect_phase_s)?;
    d.set_item("driver_cpu_s", s.driver_cpu_s)?;
    d.set_item("process_cpu_s", s.process_cpu_s)?;
    d.set_item("cpu_given_s", s.cpu_given_s)?;
    d.set_item("client_bound", s.client_bound)?;
    d.set_item("io", s.io.as_str())?;
    d.set_item("io_enters_per_tx", s.io_enters_per_tx)?;
    let series = PyList::empty(py);
    for r in &s.series {
        series.append(interval_dict(py, r)?)?;
    }
    d.set_item("series", series)?;
    let events = PyList::empty(py);
    for e in &s.events {
        events.append((e.t_s, e.kind.as_str(), e.message.as_str()))?;
    }
    d.set_item("events", events)?;
    Ok(d)
}

/// Drive the TPC-B-like workload; returns the run's figures as a dict.
#[pyfunction]
#[pyo3(signature = (
    conninfo, *, script, scale, clients, threads, protocol, t0_ns,
    duration_s=None, transactions=None, warmup_s=0.0, rate_tps=None,
    latency_limit_ms=None, max_tries=1, seed=0, io="epoll", progress=None, cancel=None
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
    latency_limit_ms: Option<f64>,
    max_tries: u32,
    seed: u64,
    io: &str,
    progress: Option<Bound<'py, PyAny>>,
    cancel: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let cfg = TpcbConfig {
        conninfo,
        script: script.parse::<Script>().map_err(PyValueError::new_err)?,
        scale,
        clients,
        threads,
        protocol: protocol
            .parse::<Protocol>()
            .map_err(PyValueError::new_err)?,
        duration_s,
        transactions_per_client: transactions,
        warmup_s,
        rate_tps,
        latency_limit_us: latency_limit_ms.map(|ms| (ms * 1000.0).round() as u64),
        max_tries,
        seed,
        t0_ns,
        io: io.parse().map_err(PyValueError::new_err)?,
    };
    let run = TpcbRun::start(cfg).map_err(driver_error)?;
    loop {
        let step = py.detach(|| run.next_progress(POLL_INTERVAL));
        let stop = py
            .check_signals()
            .and_then(|()| match cancelled(cancel.as_ref())? {
                true => Err(PyRuntimeError::new_err("run cancelled")),
                false => Ok(()),
            })
            .and_then(|()| match (&step, &progress) {
                (Progress::Interval(report), Some(callback)) => {
                    callback.call1((interval_dict(py, report)?,)).map(|_| ())
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
    let summary = py.detach(|| run.join()).map_err(driver_error)?;
    summary_dict(py, &summary)
}

enum LoadMessage {
    Step(String),
    Done(Result<load::LoadReport, LoadError>),
}

/// Load the pgbench data set; returns {"steps": [(name, seconds)], "rows": {table: n}}.
#[pyfunction]
#[pyo3(signature = (conninfo, *, scale, fillfactor=100, on_step=None))]
fn tpcb_load<'py>(
    py: Python<'py>,
    conninfo: String,
    scale: u32,
    fillfactor: u32,
    on_step: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
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
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start a thread: {e}")))?;
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
    let report = result.map_err(|e| match e {
        LoadError::Config(m) => PyValueError::new_err(m),
        LoadError::Db(e) => PyConnectionError::new_err(e.to_string()),
        LoadError::Interrupted => PyRuntimeError::new_err("load interrupted"),
    })?;
    let d = PyDict::new(py);
    let steps = PyList::empty(py);
    for (name, seconds) in &report.steps {
        steps.append((name.as_str(), *seconds))?;
    }
    d.set_item("steps", steps)?;
    let rows = PyDict::new(py);
    for (table, n) in &report.rows {
        rows.set_item(table, n)?;
    }
    d.set_item("rows", rows)?;
    Ok(d)
}

/// Merge HDR histograms (V2 encoded) exactly into one encoded histogram.
#[pyfunction]
fn hdr_merge<'py>(py: Python<'py>, parts: Vec<Vec<u8>>) -> PyResult<Bound<'py, PyBytes>> {
    let merged = hist::merge_encoded(parts.iter().map(|p| p.as_slice()))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyBytes::new(py, &merged))
}

/// Count, mean, stddev and percentiles (µs) of an encoded HDR histogram.
#[pyfunction]
fn hdr_summary<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let h = LatencyHistogram::decode(data).map_err(|e| PyValueError::new_err(e.to_string()))?;
    latency_dict(py, &h.summary())
}

/// Value (µs) at a quantile (0..1) of an encoded HDR histogram.
#[pyfunction]
fn hdr_quantile_us(data: &[u8], quantile: f64) -> PyResult<u64> {
    if !(0.0..=1.0).contains(&quantile) {
        return Err(PyValueError::new_err(format!(
            "quantile {quantile} is out of range; allowed: 0..1"
        )));
    }
    let h = LatencyHistogram::decode(data).map_err(|e| PyValueError::new_err(e.to_string()))?;
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
    m.add_function(wrap_pyfunction!(monotonic_clock_ns, m)?)?;
    Ok(())
}
