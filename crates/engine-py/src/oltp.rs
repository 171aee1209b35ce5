//! Bindings of sysbench's OLTP workload: its run (through `glue::drive`) and
//! its loader (through `glue::run_blocking`), on PostgreSQL or MySQL/MariaDB
//! (`server`: which client, and which form `conninfo` takes).

use crate::errors::{config_error, engine_error};
use crate::glue::run_blocking;
use crate::harness::harness_binding;
use crate::results::{DriverResult, LoadReport};
use perflab_engine::oltp::load::{self, LoadConfig};
use perflab_engine::oltp::{LoadMethod, MysqlOltpProtocol, OltpProtocol, RandType, Script, Server};
use pyo3::prelude::*;

harness_binding! {
    /// Drive one of sysbench's OLTP scripts; returns the run's figures.
    #[pyo3(signature = (conninfo, *, script, tables, table_size, rand_type, server = "postgres"))]
    fn oltp_run<'py>(
        py: Python<'py>,
        conninfo: String,
        script: &str,
        tables: u32,
        table_size: u32,
        rand_type: &str,
        server: &str,
    ) with harness -> PyResult<DriverResult> {
        let script = script.parse::<Script>().map_err(config_error)?;
        let rand_type = rand_type.parse::<RandType>().map_err(config_error)?;
        match server.parse::<Server>().map_err(config_error)? {
            Server::Postgres => {
                let protocol = OltpProtocol::new(&conninfo, script, tables, table_size, rand_type)
                    .map_err(engine_error)?;
                harness.drive(py, protocol)
            }
            Server::Mysql => {
                let protocol =
                    MysqlOltpProtocol::new(&conninfo, script, tables, table_size, rand_type)
                        .map_err(engine_error)?;
                harness.drive(py, protocol)
            }
        }
    }
}

/// Load sbtest1..tables; returns each table's seconds and rows.
#[pyfunction]
#[pyo3(signature = (
    conninfo, *, tables, table_size, rand_type, workers=2, seed=0, server="postgres",
    mysql_method="local_infile", on_step=None, cancel=None
))]
#[allow(clippy::too_many_arguments)]
fn oltp_load<'py>(
    py: Python<'py>,
    conninfo: String,
    tables: u32,
    table_size: u32,
    rand_type: &str,
    workers: u32,
    seed: u64,
    server: &str,
    mysql_method: &str,
    on_step: Option<Bound<'py, PyAny>>,
    cancel: Option<Bound<'py, PyAny>>,
) -> PyResult<LoadReport> {
    let cfg = LoadConfig {
        conninfo,
        tables,
        table_size,
        rand_type: rand_type.parse::<RandType>().map_err(config_error)?,
        workers,
        seed,
        server: server.parse::<Server>().map_err(config_error)?,
        mysql_method: mysql_method.parse::<LoadMethod>().map_err(config_error)?,
    };
    let report = run_blocking(
        py,
        "perflab-oltp-load",
        cancel.as_ref(),
        on_step.as_ref(),
        |abort, on_step| load::load(&cfg, abort, on_step),
    )?
    .map_err(engine_error)?;
    Ok(LoadReport::new(report.steps, report.rows))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(oltp_run, m)?)?;
    m.add_function(wrap_pyfunction!(oltp_load, m)?)?;
    Ok(())
}
