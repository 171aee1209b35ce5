//! What crosses into Python from a run: frozen, typed objects whose every
//! field `_engine.pyi` states, never a dict whose keys only Rust knows.

use perflab_engine::harness::{EngineEvent, IntervalReport, RunSummary};
use perflab_engine::hist::{self, LatencyHistogram, LatencySummary as Summary};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::BTreeMap;

/// Count, mean, spread and percentiles of one HDR histogram, in µs.
#[pyclass(module = "perflab._engine", frozen, get_all, eq)]
#[derive(Clone, PartialEq)]
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

#[pymethods]
impl LatencySummary {
    fn __repr__(&self) -> String {
        format!(
            "LatencySummary(count={}, mean_us={:.1}, p50_us={}, p99_us={}, max_us={})",
            self.count, self.mean_us, self.p50_us, self.p99_us, self.max_us
        )
    }
}

impl From<Summary> for LatencySummary {
    fn from(s: Summary) -> Self {
        LatencySummary {
            count: s.count,
            mean_us: s.mean_us,
            stddev_us: s.stddev_us,
            min_us: s.min_us,
            p50_us: s.p50_us,
            p90_us: s.p90_us,
            p95_us: s.p95_us,
            p99_us: s.p99_us,
            p999_us: s.p999_us,
            max_us: s.max_us,
        }
    }
}

/// One second of a run (the live display and the stored series).
#[pyclass(module = "perflab._engine", frozen, get_all)]
#[derive(Clone)]
pub struct Interval {
    /// End of the interval, seconds since t0 on CLOCK_MONOTONIC.
    pub t_s: f64,
    pub interval_s: f64,
    pub warmup: bool,
    pub transactions: u64,
    pub tps: f64,
    pub latency_mean_ms: f64,
    pub latency_p99_ms: f64,
    pub failed: u64,
    pub skipped: u64,
    pub lag_mean_ms: f64,
    pub clients_running: u32,
    pub transactions_by_type: Vec<u64>,
    /// This second's latency histogram, encoded, in a gated run (else None).
    pub latency_histogram: Option<EncodedBytes>,
    /// Scheduled transactions whose lag `lag_mean_ms` is the mean of.
    pub lag_count: u64,
}

/// Bytes that cross into Python as `bytes` (an encoded histogram).
#[derive(Clone)]
pub struct EncodedBytes(pub Vec<u8>);

impl<'py> IntoPyObject<'py> for &EncodedBytes {
    type Target = PyBytes;
    type Output = Bound<'py, PyBytes>;
    type Error = std::convert::Infallible;
    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(PyBytes::new(py, &self.0))
    }
}

impl From<&IntervalReport> for Interval {
    fn from(r: &IntervalReport) -> Self {
        Interval {
            t_s: r.t_s,
            interval_s: r.interval_s,
            warmup: r.warmup,
            transactions: r.transactions,
            tps: r.tps,
            latency_mean_ms: r.latency_mean_ms,
            latency_p99_ms: r.latency_p99_ms,
            failed: r.failed,
            skipped: r.skipped,
            lag_mean_ms: r.lag_mean_ms,
            clients_running: r.clients_running,
            transactions_by_type: r.transactions_by_type.clone(),
            latency_histogram: r.latency_encoded.clone().map(EncodedBytes),
            lag_count: r.lag_count,
        }
    }
}

/// Something that happened during a run, on its clock.
#[pyclass(module = "perflab._engine", frozen, get_all)]
#[derive(Clone)]
pub struct DriverEvent {
    pub t_s: f64,
    pub kind: String,
    pub message: String,
}

impl From<&EngineEvent> for DriverEvent {
    fn from(e: &EngineEvent) -> Self {
        DriverEvent {
            t_s: e.t_s,
            kind: e.kind.clone(),
            message: e.message.clone(),
        }
    }
}

/// One transaction type's figures over the measured window.
#[pyclass(module = "perflab._engine", frozen, get_all)]
pub struct TxTypeResult {
    pub name: String,
    pub committed: u64,
    /// Bytes of the committed transactions (HTTP: body bytes; else 0).
    pub payload_bytes: u64,
    pub failed: u64,
    pub latency: LatencySummary,
    /// The type's latency histogram, encoded (`histogram_encoding`).
    pub histogram: Py<PyBytes>,
}

/// Everything a run measured (the measured window only: warm-up excluded).
#[pyclass(module = "perflab._engine", frozen, get_all)]
pub struct DriverResult {
    pub transactions: u64,
    /// Bytes the committed transactions moved (HTTP: body bytes; else 0).
    pub payload_bytes: u64,
    pub failed: u64,
    pub skipped: u64,
    pub late: u64,
    pub retries: u64,
    pub retried: u64,
    pub errors_by_kind: BTreeMap<String, u64>,
    pub measured_s: f64,
    pub measure_start_t_s: f64,
    pub tps: f64,
    pub latency: LatencySummary,
    pub lag: LatencySummary,
    pub failed_latency: LatencySummary,
    pub latency_histogram: Py<PyBytes>,
    pub lag_histogram: Option<Py<PyBytes>>,
    pub failed_histogram: Option<Py<PyBytes>>,
    pub histogram_encoding: &'static str,
    pub by_type: Vec<Py<TxTypeResult>>,
    pub clients: u32,
    pub threads: u32,
    pub lost_clients: u32,
    pub connect_total_s: f64,
    pub connect_max_s: f64,
    pub connect_phase_s: f64,
    pub driver_cpu_s: f64,
    pub process_cpu_s: f64,
    pub cpu_given_s: f64,
    pub client_bound: bool,
    pub io: String,
    pub io_enters_per_tx: f64,
    pub series: Vec<Interval>,
    pub events: Vec<DriverEvent>,
}

fn encoded(py: Python<'_>, h: &LatencyHistogram) -> Py<PyBytes> {
    PyBytes::new(py, &h.encode()).unbind()
}

fn encoded_unless_empty(py: Python<'_>, h: &LatencyHistogram) -> Option<Py<PyBytes>> {
    (!h.is_empty()).then(|| encoded(py, h))
}

impl DriverResult {
    pub fn new(py: Python<'_>, s: &RunSummary) -> PyResult<DriverResult> {
        let by_type = s
            .by_type
            .iter()
            .map(|t| {
                Py::new(
                    py,
                    TxTypeResult {
                        name: t.name.to_string(),
                        committed: t.committed,
                        payload_bytes: t.bytes,
                        failed: t.failed,
                        latency: t.latency.summary().into(),
                        histogram: encoded(py, &t.latency),
                    },
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(DriverResult {
            transactions: s.transactions,
            payload_bytes: s.bytes,
            failed: s.failed,
            skipped: s.skipped,
            late: s.late,
            retries: s.retries,
            retried: s.retried,
            errors_by_kind: s.errors_by_kind.clone(),
            measured_s: s.measured_s,
            measure_start_t_s: s.measure_start_t_s,
            tps: s.tps,
            latency: s.latency.summary().into(),
            lag: s.lag.summary().into(),
            failed_latency: s.failed_latency.summary().into(),
            latency_histogram: encoded(py, &s.latency),
            lag_histogram: encoded_unless_empty(py, &s.lag),
            failed_histogram: encoded_unless_empty(py, &s.failed_latency),
            histogram_encoding: hist::ENCODING,
            by_type,
            clients: s.clients,
            threads: s.threads,
            lost_clients: s.lost_clients,
            connect_total_s: s.connect_total_s,
            connect_max_s: s.connect_max_s,
            connect_phase_s: s.connect_phase_s,
            driver_cpu_s: s.driver_cpu_s,
            process_cpu_s: s.process_cpu_s,
            cpu_given_s: s.cpu_given_s,
            client_bound: s.client_bound,
            io: s.io.clone(),
            io_enters_per_tx: s.io_enters_per_tx,
            series: s.series.iter().map(Interval::from).collect(),
            events: s.events.iter().map(DriverEvent::from).collect(),
        })
    }
}

/// What a data load did: each step's seconds, in order, and rows per table.
#[pyclass(module = "perflab._engine", frozen, get_all)]
pub struct LoadReport {
    pub steps: Vec<(String, f64)>,
    pub rows: BTreeMap<String, i64>,
}

/// One TPC-H table's share of a parallel COPY load.
#[pyclass(module = "perflab._engine", frozen, get_all)]
pub struct TableLoad {
    pub table: String,
    pub rows: u64,
    pub bytes: u64,
    pub parts: i32,
    /// Sum of the loaders' busy seconds on this table's parts.
    pub busy_s: f64,
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<LatencySummary>()?;
    m.add_class::<Interval>()?;
    m.add_class::<DriverEvent>()?;
    m.add_class::<TxTypeResult>()?;
    m.add_class::<DriverResult>()?;
    m.add_class::<LoadReport>()?;
    m.add_class::<TableLoad>()?;
    Ok(())
}
