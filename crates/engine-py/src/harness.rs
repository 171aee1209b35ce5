//! The harness's settings as they cross from Python: one object, `harness`
//! (a dict, `HarnessSettings.engine_settings()` in
//! python/perflab/workloads/harness.py), with one name and one unit per
//! setting and no default here: Python's model declares each default once
//! and gives every setting, so the two cannot disagree. A key missing or
//! unknown is a ConfigError naming it. `SETTINGS` is the list the engine
//! reads (`harness_settings()` shows it; tests/test_settings_layers.py
//! holds the model and the stub to it).
//!
//! A driver binding (`harness_binding!`) states only its own parameters and
//! takes `harness`, `t0_ns` (the run's clock, not a setting) and the
//! callbacks `progress`, `cancel`, `on_connected`; its body gets them as one
//! `HarnessCall`. A declared workload (`workloads.rs`) takes the same.
//!
//! ```text
//! harness_binding! {
//!     /// Drive one of sysbench's OLTP scripts; returns the run's figures.
//!     #[pyo3(signature = (conninfo, *, script, tables))]
//!     fn oltp_run<'py>(py: Python<'py>, conninfo: String, script: &str, tables: u32)
//!         with harness -> PyResult<DriverResult> {
//!         let protocol = OltpProtocol::new(..).map_err(engine_error)?;
//!         harness.drive(py, protocol)
//!     }
//! }
//! ```

use crate::errors::config_error;
use crate::glue::drive;
use crate::results::DriverResult;
use perflab_engine::harness::{HarnessConfig, Protocol};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Every harness setting the engine reads, by its one name (the field of
/// HarnessSettings; `transactions` is the workload's own count per client,
/// http's `requests`) and its unit.
pub(crate) const SETTINGS: [(&str, &str); 13] = [
    ("clients", "clients"),
    ("threads", "threads"),
    ("duration", "s"),
    ("transactions", "tx"),
    ("warmup", "s"),
    ("rate", "tx/s"),
    ("schedule", "name"),
    ("latency_limit", "s"),
    ("max_tries", "tries"),
    ("seed", "seed"),
    ("io", "name"),
    ("pin", "name"),
    ("follow", "bool"),
];

/// The harness settings the engine reads from `harness`: (name, unit).
#[pyfunction]
fn harness_settings() -> Vec<(&'static str, &'static str)> {
    SETTINGS.to_vec()
}

/// The harness's config from Python's one object and the run's clock;
/// ConfigError names a missing, unknown or bad setting.
pub(crate) fn config(harness: &Bound<'_, PyDict>, t0_ns: u64) -> PyResult<HarnessConfig> {
    let names = SETTINGS.map(|(name, _)| name);
    for key in harness.keys() {
        let key: String = key.extract()?;
        if !names.contains(&key.as_str()) {
            return Err(config_error(format!(
                "harness setting {key:?} is not one the engine reads; it reads: {}",
                names.join(", ")
            )));
        }
    }
    let get = |name: &str| {
        harness.get_item(name)?.ok_or_else(|| {
            config_error(format!(
                "harness setting {name} is missing; every one is given (HarnessSettings.engine_settings)"
            ))
        })
    };
    let some = |name: &str| get(name).map(|v| Some(v).filter(|v| !v.is_none()));
    let name = |key: &str| get(key)?.extract::<String>();
    Ok(HarnessConfig {
        clients: get("clients")?.extract()?,
        threads: get("threads")?.extract()?,
        duration_s: some("duration")?.map(|v| v.extract()).transpose()?,
        transactions_per_client: some("transactions")?.map(|v| v.extract()).transpose()?,
        warmup_s: get("warmup")?.extract()?,
        rate_tps: some("rate")?.map(|v| v.extract()).transpose()?,
        schedule: name("schedule")?.parse().map_err(config_error)?,
        latency_limit_us: some("latency_limit")?
            .map(|v| v.extract::<f64>())
            .transpose()?
            .map(|s| (s * 1e6).round() as u64),
        max_tries: get("max_tries")?.extract()?,
        seed: get("seed")?.extract()?,
        t0_ns,
        io: name("io")?.parse().map_err(config_error)?,
        pin: name("pin")?.parse().map_err(config_error)?,
        follow: get("follow")?.extract()?,
    })
}

/// What a driver binding hands its body (`harness_binding!`): the harness's
/// config, checked, and Python's callbacks.
pub(crate) struct HarnessCall<'py> {
    pub config: HarnessConfig,
    pub progress: Option<Bound<'py, PyAny>>,
    pub cancel: Option<Bound<'py, PyAny>>,
    pub on_connected: Option<Bound<'py, PyAny>>,
}

impl<'py> HarnessCall<'py> {
    /// Drive `protocol` through the harness (`glue::drive`).
    pub(crate) fn drive<P: Protocol>(self, py: Python<'py>, protocol: P) -> PyResult<DriverResult> {
        drive(
            py,
            self.config,
            protocol,
            self.progress,
            self.cancel,
            self.on_connected,
        )
    }
}

/// A driver binding: a `#[pyfunction]` with the binding's own parameters and
/// then `harness` (the one settings object), `t0_ns` and the callbacks
/// `progress`, `cancel`, `on_connected`, which reach its body as one
/// `HarnessCall` named after `with`. A bad setting is a ConfigError before
/// the body runs. See the module's doc for how a binding adopts it.
macro_rules! harness_binding {
    (
        $(#[doc = $doc:expr])*
        #[pyo3(signature = ($($sig:tt)*))]
        fn $name:ident<$py:lifetime>($($param:ident: $ty:ty),* $(,)?)
        with $call:ident -> $ret:ty $body:block
    ) => {
        $(#[doc = $doc])*
        #[::pyo3::pyfunction]
        #[pyo3(signature = (
            $($sig)*, harness, t0_ns, progress = None, cancel = None, on_connected = None
        ))]
        #[allow(clippy::too_many_arguments)]
        fn $name<$py>(
            $($param: $ty),*,
            harness: ::pyo3::Bound<$py, ::pyo3::types::PyDict>,
            t0_ns: u64,
            progress: Option<::pyo3::Bound<$py, ::pyo3::PyAny>>,
            cancel: Option<::pyo3::Bound<$py, ::pyo3::PyAny>>,
            on_connected: Option<::pyo3::Bound<$py, ::pyo3::PyAny>>,
        ) -> $ret {
            let $call = $crate::harness::HarnessCall {
                config: $crate::harness::config(&harness, t0_ns)?,
                progress,
                cancel,
                on_connected,
            };
            $body
        }
    };
}
pub(crate) use harness_binding;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(harness_settings, m)?)?;
    Ok(())
}
