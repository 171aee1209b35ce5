//! perflab._engine: PyO3 glue over perflab-engine. No benchmark logic lives here.

use pyo3::prelude::*;

mod errors;
mod glue;
mod harness;
mod http;
mod measure;
mod oltp;
mod relay;
mod results;
mod ssb;
mod stream;
mod tpcc;
mod tpch;
mod workloads;

/// Seconds in a duration string ("90s", "1h30m"); ValueError names what is allowed.
#[pyfunction]
fn parse_duration_s(text: &str) -> PyResult<f64> {
    perflab_engine::units::parse_duration_s(text).map_err(|e| errors::config_error(e.to_string()))
}

#[pymodule]
fn _engine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", perflab_engine::VERSION)?;
    m.add("build_profile", perflab_engine::build_profile())?;
    m.add_function(wrap_pyfunction!(parse_duration_s, m)?)?;
    errors::register(m)?;
    harness::register(m)?;
    results::register(m)?;
    measure::register(m)?;
    relay::register(m)?;
    stream::register(m)?;
    tpcc::register(m)?;
    tpch::register(m)?;
    http::register(m)?;
    ssb::register(m)?;
    oltp::register(m)?;
    workloads::register(m)?;
    Ok(())
}
