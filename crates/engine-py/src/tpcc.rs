//! Bindings of TPC-C: its loader, its text rows for MySQL's LOAD DATA, and
//! its driver (the harness with `TpccProtocol`). Glue only; see
//! `perflab_engine::tpcc`.

use crate::errors::{config_error, engine_error};
use crate::glue::run_blocking;
use crate::harness::harness_binding;
use crate::results::{DriverResult, LoadReport};
use crate::tpch::write_part;
use perflab_engine::bulk::{parts_biggest_first, CopyTable};
use perflab_engine::tpcc::load::{self, LoadConfig, Table, TABLES};
use perflab_engine::tpcc::protocol::{Constants, Mode, TpccConfig};
use perflab_engine::tpcc::{TpccMysqlProtocol, TpccProtocol};
use pyo3::prelude::*;

/// Load the TPC-C initial database into existing empty tables.
#[pyfunction]
#[pyo3(signature = (
    conninfo, *, warehouses, jobs, seed, c_last, copy_format="binary", on_step=None, cancel=None
))]
#[allow(clippy::too_many_arguments)]
fn tpcc_load<'py>(
    py: Python<'py>,
    conninfo: String,
    warehouses: u32,
    jobs: u32,
    seed: u64,
    c_last: i64,
    copy_format: &str,
    on_step: Option<Bound<'py, PyAny>>,
    cancel: Option<Bound<'py, PyAny>>,
) -> PyResult<LoadReport> {
    let cfg = LoadConfig {
        conninfo,
        warehouses,
        jobs,
        seed,
        c_last_load: c_last,
        format: copy_format.parse().map_err(config_error)?,
    };
    let report = run_blocking(
        py,
        "perflab-tpcc-load",
        cancel.as_ref(),
        on_step.as_ref(),
        |abort, on_step| load::load(&cfg, abort, on_step),
    )?
    .map_err(engine_error)?;
    Ok(LoadReport::new(report.steps, report.rows))
}

fn table(name: &str, seed: u64, c_last: i64, now_s: i64) -> PyResult<Table> {
    if !(0..=255).contains(&c_last) {
        return Err(config_error(format!(
            "c_last {c_last} is out of range; allowed: 0..255"
        )));
    }
    Table::named(name, seed, c_last, now_s).ok_or_else(|| {
        config_error(format!(
            "no TPC-C table {name:?}; allowed: {}",
            TABLES.join(", ")
        ))
    })
}

/// (table, part, parts) of every part of `tables` at `warehouses`, the
/// biggest first: the jobs of a parallel load through `tpcc_write_text`.
#[pyfunction]
fn tpcc_parts(warehouses: u32, tables: Vec<String>) -> PyResult<Vec<(String, i32, i32)>> {
    if warehouses == 0 {
        return Err(config_error("warehouses must be at least 1"));
    }
    let tables = tables
        .iter()
        .map(|t| table(t, 0, 0, 0))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(parts_biggest_first(&tables, warehouses as f64)
        .into_iter()
        .map(|p| (p.table.name().to_string(), p.part, p.parts))
        .collect())
}

/// Part `part` of `parts` of TPC-C table `table_name` at `warehouses` as
/// text rows ('|' between fields, `\N` for NULL) written to `path` (a pipe,
/// a FIFO or a file that exists; never created), or with `insert_rows` as
/// multi-row INSERTs of at most that many rows, one a line; the GIL
/// released; the rows written. The load's `seed`, `c_last` and time `now_s`
/// (seconds since 1970) make the rows, as in `tpcc_load`.
#[pyfunction]
#[pyo3(signature = (path, table_name, warehouses, part, parts, *, seed, c_last, now_s, insert_rows=None, cancel=None))]
#[allow(clippy::too_many_arguments)]
fn tpcc_write_text(
    py: Python<'_>,
    path: &str,
    table_name: &str,
    warehouses: u32,
    part: i32,
    parts: i32,
    seed: u64,
    c_last: i64,
    now_s: i64,
    insert_rows: Option<usize>,
    cancel: Option<Bound<'_, PyAny>>,
) -> PyResult<u64> {
    if warehouses == 0 {
        return Err(config_error("warehouses must be at least 1"));
    }
    let t = table(table_name, seed, c_last, now_s)?;
    write_part(
        py,
        path,
        t,
        warehouses as f64,
        part,
        parts,
        insert_rows,
        cancel,
    )
}

/// The run's configuration, its weights checked (five values or none).
fn config(
    warehouses: u32,
    mode: Mode,
    constants: Constants,
    keying: bool,
    weights: Option<Vec<f64>>,
) -> PyResult<TpccConfig> {
    let weights = match weights {
        None => None,
        Some(w) => Some(<[f64; 5]>::try_from(w.as_slice()).map_err(|_| {
            config_error(format!(
                "weights has {} values; give 5 (new_order, payment, order_status, delivery, \
                 stock_level)",
                w.len()
            ))
        })?),
    };
    Ok(TpccConfig {
        warehouses,
        mode,
        constants,
        keying,
        weights,
    })
}

harness_binding! {
    /// Drive TPC-C's five transactions through the harness; returns the run's
    /// figures (by_type: new_order, new_order_rollback, payment, order_status,
    /// delivery, stock_level).
    #[pyo3(signature = (
        conninfo, *, warehouses, mode="statements", c_last, c_id, ol_i_id, keying=false,
        weights=None
    ))]
    fn tpcc_run<'py>(
        py: Python<'py>,
        conninfo: String,
        warehouses: u32,
        mode: &str,
        c_last: i64,
        c_id: i64,
        ol_i_id: i64,
        keying: bool,
        weights: Option<Vec<f64>>,
    ) with harness -> PyResult<DriverResult> {
        let mode = mode.parse::<Mode>().map_err(config_error)?;
        let k = Constants { c_last, c_id, ol_i_id };
        let cfg = config(warehouses, mode, k, keying, weights)?;
        let protocol = TpccProtocol::new(&conninfo, cfg).map_err(engine_error)?;
        harness.drive(py, protocol)
    }
}

harness_binding! {
    /// The same five transactions on MySQL or MariaDB (the engine's MySQL
    /// client; `conninfo` as it reads one), at `isolation`.
    #[pyo3(signature = (
        conninfo, *, warehouses, isolation="read committed", c_last, c_id, ol_i_id, keying=false,
        weights=None
    ))]
    fn tpcc_mysql_run<'py>(
        py: Python<'py>,
        conninfo: String,
        warehouses: u32,
        isolation: &str,
        c_last: i64,
        c_id: i64,
        ol_i_id: i64,
        keying: bool,
        weights: Option<Vec<f64>>,
    ) with harness -> PyResult<DriverResult> {
        let k = Constants { c_last, c_id, ol_i_id };
        let cfg = config(warehouses, Mode::Statements, k, keying, weights)?;
        let protocol = TpccMysqlProtocol::new(&conninfo, cfg, isolation).map_err(engine_error)?;
        harness.drive(py, protocol)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tpcc_load, m)?)?;
    m.add_function(wrap_pyfunction!(tpcc_parts, m)?)?;
    m.add_function(wrap_pyfunction!(tpcc_write_text, m)?)?;
    m.add_function(wrap_pyfunction!(tpcc_run, m)?)?;
    m.add_function(wrap_pyfunction!(tpcc_mysql_run, m)?)?;
    Ok(())
}
