//! The delay relay (perflab_engine::relay) as perflab._engine.DelayRelay.

use std::time::Duration;

use pyo3::prelude::*;

use crate::errors;

/// A TCP relay holding each chunk `delay_s` ± `jitter_s` in each direction.
/// Its threads live in the network namespace of the thread that started it.
#[pyclass(module = "perflab._engine")]
pub struct DelayRelay {
    inner: Option<perflab_engine::relay::Relay>,
    port: u16,
}

#[pymethods]
impl DelayRelay {
    #[new]
    #[pyo3(signature = (listen, upstream, delay_s, jitter_s = 0.0, seed = 1))]
    fn new(listen: &str, upstream: &str, delay_s: f64, jitter_s: f64, seed: u64) -> PyResult<Self> {
        if !(delay_s.is_finite() && delay_s >= 0.0 && jitter_s.is_finite() && jitter_s >= 0.0) {
            return Err(errors::config_error(format!(
                "delay {delay_s} s and jitter {jitter_s} s: both must be finite and not negative"
            )));
        }
        let relay = perflab_engine::relay::Relay::start(
            listen,
            upstream,
            Duration::from_secs_f64(delay_s),
            Duration::from_secs_f64(jitter_s),
            seed,
        )
        .map_err(|e| errors::config_error(format!("delay relay on {listen} to {upstream}: {e}")))?;
        let port = relay.port();
        Ok(DelayRelay {
            inner: Some(relay),
            port,
        })
    }

    /// The port it listens on.
    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// Close every connection, join every thread; a dict of connections,
    /// bytes_up, bytes_down and cpu_s (all its threads). Idempotent.
    fn stop(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let stats = match self.inner.as_mut() {
            Some(relay) => py.detach(|| relay.stop()),
            None => Default::default(),
        };
        let d = pyo3::types::PyDict::new(py);
        d.set_item("connections", stats.connections)?;
        d.set_item("bytes_up", stats.bytes_up)?;
        d.set_item("bytes_down", stats.bytes_down)?;
        d.set_item("cpu_s", stats.cpu_s)?;
        Ok(d.into_any().unbind())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DelayRelay>()
}
