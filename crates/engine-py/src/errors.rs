//! The engine's one error type (`perflab_engine::error::EngineError`) as Python
//! exceptions, mapped in this one place
//! (polars: `crates/polars-python/src/error.rs`).
//!
//! - `ConfigError(ValueError)`: bad settings the user can fix.
//! - `EngineConnectionError(ConnectionError)`: the target refused or failed.
//! - `Interrupted(BaseException)`: a signal or the caller's cancel stopped
//!   the work; perflab.errors.Interrupted is this class, so Python never
//!   infers an interrupt from a RuntimeError and a flag.
//! - `EngineError(RuntimeError)`: anything else (a bug, or the machine).

use perflab_engine::error::EngineError as CoreError;
use pyo3::create_exception;
use pyo3::exceptions::{PyBaseException, PyConnectionError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    perflab._engine,
    ConfigError,
    PyValueError,
    "Bad settings for the engine; the message says what is allowed."
);
create_exception!(
    perflab._engine,
    EngineConnectionError,
    PyConnectionError,
    "The target could not be reached, refused, or failed during set-up."
);
create_exception!(
    perflab._engine,
    Interrupted,
    PyBaseException,
    "SIGINT, SIGTERM or the caller's cancel: stop now, tear down, keep what is stored."
);
create_exception!(
    perflab._engine,
    EngineError,
    PyRuntimeError,
    "The engine failed for a reason that is neither the settings nor the target."
);

/// The one mapping from the engine's error to Python's.
pub fn engine_error(e: CoreError) -> PyErr {
    match e {
        CoreError::Config(m) => ConfigError::new_err(m),
        CoreError::Target(m) => EngineConnectionError::new_err(m),
        CoreError::Interrupted => Interrupted::new_err("interrupted"),
        CoreError::Internal(m) => EngineError::new_err(m),
    }
}

/// A bad argument, as ConfigError (a ValueError).
pub fn config_error(message: impl Into<String>) -> PyErr {
    ConfigError::new_err(message.into())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add(
        "EngineConnectionError",
        py.get_type::<EngineConnectionError>(),
    )?;
    m.add("Interrupted", py.get_type::<Interrupted>())?;
    m.add("EngineError", py.get_type::<EngineError>())?;
    Ok(())
}
