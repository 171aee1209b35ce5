//! Every workload the engine declares (`perflab_engine::harness::registry`:
//! a `pub static WORKLOAD` in its own module) as `NAME_run` and, when it has
//! a loader, `NAME_load`, with no binding file of its own:
//!
//! - `NAME_run(conninfo, *, harness, t0_ns, progress=None, cancel=None,
//!   on_connected=None, **own)`: the harness's settings as one object, as
//!   every driver binding takes them (`harness::config`); the other keywords
//!   are the workload's own settings (`Params`); through `glue::poll` as any
//!   binding's run.
//! - `NAME_load(conninfo, *, on_step=None, cancel=None, **own)`: through
//!   `glue::run_blocking`.
//!
//! `workloads()` names them. `_engine.pyi` states each function.

use crate::errors::{config_error, engine_error};
use crate::glue::{poll, run_blocking};
use crate::harness;
use crate::results::{DriverResult, LoadReport};
use perflab_engine::harness::registry::{Params, Value, Workload, WORKLOADS};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyCFunction, PyDict, PyFloat, PyInt, PyString, PyTuple};
use std::ffi::CString;

/// The workloads the engine declares, by name.
#[pyfunction]
fn workloads() -> Vec<&'static str> {
    WORKLOADS.iter().map(|w| w.name).collect()
}

/// `key` taken out of `kwargs` (None when absent or None).
fn take<'py>(kwargs: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    let value = kwargs.get_item(key)?;
    if value.is_some() {
        kwargs.del_item(key)?;
    }
    Ok(value.filter(|v| !v.is_none()))
}

/// The workload's own settings: every keyword left (None: not given).
fn params(kwargs: &Bound<'_, PyDict>) -> PyResult<Params> {
    let mut out = Params::default();
    for (key, value) in kwargs.iter() {
        let key: String = key.extract()?;
        let value = if value.is_none() {
            continue;
        } else if value.is_instance_of::<PyBool>() {
            Value::Bool(value.extract()?)
        } else if value.is_instance_of::<PyInt>() {
            Value::Int(value.extract()?)
        } else if value.is_instance_of::<PyFloat>() {
            Value::Float(value.extract()?)
        } else if value.is_instance_of::<PyString>() {
            Value::Str(value.extract()?)
        } else {
            return Err(config_error(format!(
                "{key} = {value} is not allowed; allowed: a bool, int, float or str"
            )));
        };
        out.insert(key, value);
    }
    Ok(out)
}

/// The call's one positional argument (conninfo) and a copy of its
/// keywords, to take the known ones out of.
fn split<'py>(
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<(String, Bound<'py, PyDict>)> {
    let (conninfo,): (String,) = args.extract()?;
    let kwargs = match kwargs {
        Some(k) => k.copy()?,
        None => PyDict::new(args.py()),
    };
    Ok((conninfo, kwargs))
}

fn run(
    workload: &'static Workload,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<DriverResult> {
    let py = args.py();
    let (conninfo, kwargs) = split(args, kwargs)?;
    let progress = take(&kwargs, "progress")?;
    let cancel = take(&kwargs, "cancel")?;
    let on_connected = take(&kwargs, "on_connected")?;
    let required = |key: &str| {
        take(&kwargs, key)?
            .ok_or_else(|| PyTypeError::new_err(format!("missing keyword argument {key}")))
    };
    let settings = required("harness")?;
    let config = harness::config(settings.cast::<PyDict>()?, required("t0_ns")?.extract()?)?;
    let own = params(&kwargs)?;
    let started = (workload.run)(&conninfo, &own, config, on_connected.is_some());
    poll(
        py,
        started.map_err(engine_error)?,
        progress,
        cancel,
        on_connected,
    )
}

fn load(
    workload: &'static Workload,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<LoadReport> {
    let py = args.py();
    let (conninfo, kwargs) = split(args, kwargs)?;
    let on_step = take(&kwargs, "on_step")?;
    let cancel = take(&kwargs, "cancel")?;
    let own = params(&kwargs)?;
    let loader = workload.load.expect("registered only with a loader");
    let thread = format!("perflab-{}-load", workload.name);
    let report = run_blocking(
        py,
        &thread,
        cancel.as_ref(),
        on_step.as_ref(),
        |abort, on_step| loader(&conninfo, &own, abort, on_step),
    )?
    .map_err(engine_error)?;
    Ok(LoadReport::new(report.steps, report.rows))
}

/// A name for the interpreter, kept for the module's life (a few bytes per
/// workload, once).
fn leaked(name: String) -> &'static std::ffi::CStr {
    Box::leak(
        CString::new(name)
            .expect("no NUL in a workload's name")
            .into_boxed_c_str(),
    )
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(workloads, m)?)?;
    for &workload in WORKLOADS {
        let name = format!("{}_run", workload.name);
        let doc = leaked(format!(
            "Drive {} through the load harness; returns the run's figures.",
            workload.name
        ));
        let f =
            PyCFunction::new_closure(py, Some(leaked(name.clone())), Some(doc), move |a, k| {
                run(workload, a, k)
            })?;
        m.add(name, f)?;
        if workload.load.is_some() {
            let name = format!("{}_load", workload.name);
            let doc = leaked(format!(
                "Load {}'s data set; returns each step's seconds and rows.",
                workload.name
            ));
            let f = PyCFunction::new_closure(
                py,
                Some(leaked(name.clone())),
                Some(doc),
                move |a, k| load(workload, a, k),
            )?;
            m.add(name, f)?;
        }
    }
    Ok(())
}
