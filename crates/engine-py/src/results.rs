//! What crosses into Python from a run: frozen, typed objects whose every
//! field `_engine.pyi` states, never a dict whose keys only Rust knows.

use perflab_engine::harness::{EngineEvent, IntervalReport, RunSummary, TxTypeSummary};
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

/// Declares a result class once: per field its doc, name, Rust type, Python
/// type (as `_engine.pyi` states it) and value, computed from the engine's
/// record `$s` (with the GIL, `$py`). From that one list follow the pyclass,
/// its constructor `new(py, s)` and, for the stub test, `FIELDS` (name,
/// Python type) in order; merge.py reads the fields from the class itself.
macro_rules! record {
    (
        $(#[$meta:meta])*
        pub struct $class:ident from |$py:ident, $s:ident: &$source:ty| {
            $( $(#[doc = $doc:literal])* $name:ident: $ty:ty as $pyty:literal = $value:expr, )*
        }
    ) => {
        $(#[$meta])*
        #[pyclass(module = "perflab._engine", frozen, get_all)]
        pub struct $class {
            $( $(#[doc = $doc])* pub $name: $ty, )*
        }

        impl $class {
            /// Every field (name, Python type), in the order the stub states them.
            #[cfg_attr(not(test), allow(dead_code))]
            pub const FIELDS: &'static [(&'static str, &'static str)] =
                &[$( (stringify!($name), $pyty), )*];

            #[allow(unused_variables)]
            pub fn new($py: Python<'_>, $s: &$source) -> PyResult<$class> {
                Ok($class { $( $name: $value, )* })
            }
        }
    };
}

record! {
    /// One second of a run (the live display and the stored series).
    #[derive(Clone)]
    pub struct Interval from |py, r: &IntervalReport| {
        /// End of the interval, seconds since t0 on CLOCK_MONOTONIC.
        t_s: f64 as "float" = r.t_s,
        interval_s: f64 as "float" = r.interval_s,
        warmup: bool as "bool" = r.warmup,
        transactions: u64 as "int" = r.transactions,
        tps: f64 as "float" = r.tps,
        latency_mean_ms: f64 as "float" = r.latency_mean_ms,
        latency_p99_ms: f64 as "float" = r.latency_p99_ms,
        failed: u64 as "int" = r.failed,
        skipped: u64 as "int" = r.skipped,
        lag_mean_ms: f64 as "float" = r.lag_mean_ms,
        clients_running: u32 as "int" = r.clients_running,
        transactions_by_type: Vec<u64> as "list[int]" = r.transactions_by_type.clone(),
        /// This second's latency histogram, encoded, in a gated run (else None).
        latency_histogram: Option<EncodedBytes> as "bytes | None" =
            r.latency_encoded.clone().map(EncodedBytes),
        /// Scheduled transactions whose lag `lag_mean_ms` is the mean of.
        lag_count: u64 as "int" = r.lag_count,
    }
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

record! {
    /// One transaction type's figures over the measured window.
    pub struct TxTypeResult from |py, t: &TxTypeSummary| {
        name: String as "str" = t.name.to_string(),
        committed: u64 as "int" = t.committed,
        /// Bytes of the response bodies its committed transactions received
        /// (HTTP; else 0).
        body_bytes: u64 as "int" = t.body_bytes,
        failed: u64 as "int" = t.failed,
        latency: LatencySummary as "LatencySummary" = t.latency.summary().into(),
        /// The type's latency histogram, encoded (`histogram_encoding`).
        histogram: Py<PyBytes> as "bytes" = encoded(py, &t.latency),
    }
}

record! {
    /// Everything a run measured (the measured window only: warm-up excluded).
    pub struct DriverResult from |py, s: &RunSummary| {
        transactions: u64 as "int" = s.transactions,
        /// Bytes of the response bodies the committed transactions received
        /// (HTTP; else 0).
        body_bytes: u64 as "int" = s.body_bytes,
        failed: u64 as "int" = s.failed,
        skipped: u64 as "int" = s.skipped,
        late: u64 as "int" = s.late,
        retries: u64 as "int" = s.retries,
        retried: u64 as "int" = s.retried,
        errors_by_kind: BTreeMap<String, u64> as "dict[str, int]" = s.errors_by_kind.clone(),
        measured_s: f64 as "float" = s.measured_s,
        measure_start_t_s: f64 as "float" = s.measure_start_t_s,
        tps: f64 as "float" = s.tps,
        latency: LatencySummary as "LatencySummary" = s.latency.summary().into(),
        lag: LatencySummary as "LatencySummary" = s.lag.summary().into(),
        failed_latency: LatencySummary as "LatencySummary" = s.failed_latency.summary().into(),
        latency_histogram: Py<PyBytes> as "bytes" = encoded(py, &s.latency),
        lag_histogram: Option<Py<PyBytes>> as "bytes | None" = encoded_unless_empty(py, &s.lag),
        failed_histogram: Option<Py<PyBytes>> as "bytes | None" =
            encoded_unless_empty(py, &s.failed_latency),
        histogram_encoding: &'static str as "str" = hist::ENCODING,
        by_type: Vec<Py<TxTypeResult>> as "list[TxTypeResult]" = s
            .by_type
            .iter()
            .map(|t| Py::new(py, TxTypeResult::new(py, t)?))
            .collect::<PyResult<Vec<_>>>()?,
        /// Per operation type (a protocol's statements: oltp's), the
        /// operations of the committed transactions (`committed` counts
        /// them); empty for a protocol that does not time them.
        operations: Vec<Py<TxTypeResult>> as "list[TxTypeResult]" = s
            .operations
            .iter()
            .map(|t| Py::new(py, TxTypeResult::new(py, t)?))
            .collect::<PyResult<Vec<_>>>()?,
        clients: u32 as "int" = s.clients,
        threads: u32 as "int" = s.threads,
        lost_clients: u32 as "int" = s.lost_clients,
        connect_total_s: f64 as "float" = s.connect_total_s,
        connect_max_s: f64 as "float" = s.connect_max_s,
        connect_phase_s: f64 as "float" = s.connect_phase_s,
        driver_cpu_s: f64 as "float" = s.driver_cpu_s,
        process_cpu_s: f64 as "float" = s.process_cpu_s,
        cpu_given_s: f64 as "float" = s.cpu_given_s,
        client_bound: bool as "bool" = s.client_bound,
        io: String as "str" = s.io.clone(),
        io_enters_per_tx: f64 as "float" = s.io_enters_per_tx,
        /// Server processes sampled once a second against their client's
        /// pinned driver thread (a PostgreSQL server on this machine), and
        /// the samples that found one on another CPU.
        server_sampled: u64 as "int" = s.server_sampled,
        server_off_cpu: u64 as "int" = s.server_off_cpu,
        series: Vec<Interval> as "list[Interval]" = s
            .series
            .iter()
            .map(|r| Interval::new(py, r))
            .collect::<PyResult<Vec<_>>>()?,
        events: Vec<DriverEvent> as "list[DriverEvent]" =
            s.events.iter().map(DriverEvent::from).collect(),
    }
}

fn encoded(py: Python<'_>, h: &LatencyHistogram) -> Py<PyBytes> {
    PyBytes::new(py, &h.encode()).unbind()
}

fn encoded_unless_empty(py: Python<'_>, h: &LatencyHistogram) -> Option<Py<PyBytes>> {
    (!h.is_empty()).then(|| encoded(py, h))
}

/// What a data load did: each step's seconds, in order, and rows per table.
#[pyclass(module = "perflab._engine", frozen, get_all)]
pub struct LoadReport {
    pub steps: Vec<(String, f64)>,
    pub rows: BTreeMap<String, i64>,
}

impl LoadReport {
    pub fn new(steps: Vec<(String, f64)>, rows: Vec<(String, i64)>) -> Self {
        LoadReport {
            steps,
            rows: rows.into_iter().collect(),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The `name: type` lines of class `class` in the stub, in order.
    fn stub_fields(class: &str) -> Vec<(String, String)> {
        let stub = include_str!("../../../python/perflab/_engine.pyi");
        let start = stub
            .find(&format!("\nclass {class}:\n"))
            .unwrap_or_else(|| panic!("_engine.pyi has no class {class}"));
        let mut fields = Vec::new();
        let mut in_doc = false;
        for line in stub[start..].lines().skip(2) {
            let text = line.trim();
            if line.is_empty() {
                break;
            }
            if in_doc || text.starts_with("\"\"\"") {
                let quotes = text.matches("\"\"\"").count();
                in_doc = if in_doc { quotes == 0 } else { quotes == 1 };
                continue;
            }
            if text.starts_with('#') {
                continue;
            }
            let (name, ty) = text.split_once(": ").expect("a `name: type` line");
            fields.push((name.to_string(), ty.to_string()));
        }
        fields
    }

    fn declared(fields: &[(&str, &str)]) -> Vec<(String, String)> {
        fields
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn the_stub_states_every_record_field_with_its_type_in_order() {
        for (class, fields) in [
            ("DriverResult", DriverResult::FIELDS),
            ("TxTypeResult", TxTypeResult::FIELDS),
            ("Interval", Interval::FIELDS),
        ] {
            assert_eq!(
                stub_fields(class),
                declared(fields),
                "python/perflab/_engine.pyi's class {class} (left) is not the record! here \
                 (right): state each field there as declared here, in this order"
            );
        }
    }
}
