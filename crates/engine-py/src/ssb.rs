//! Star Schema Benchmark glue: data generation + COPY into PostgreSQL, Arrow
//! streams for DuckDB, text rows for MySQL's LOAD DATA, through the loaders
//! TPC-H uses. Every long call releases the GIL.

use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::errors::config_error;
use crate::results::TableLoad;
use crate::tpch::{load_tables, scale_factor, stream_capsule, table_parts, write_text};

use perflab_engine::bulk::arrow_stream;
use perflab_engine::ssb::Table;

fn table(name: &str) -> PyResult<Table> {
    Table::from_name(name).ok_or_else(|| {
        config_error(format!(
            "{name:?} is not an SSB table; allowed: date, customer, supplier, part, lineorder"
        ))
    })
}

/// Generate SSB `tables` at `scale_factor` and COPY them into PostgreSQL over
/// `connections` parallel connections; returns one TableLoad per table. A
/// set `cancel` stops the load between chunks.
#[pyfunction]
#[pyo3(signature = (conninfo, scale_factor, tables, connections, copy_format = "binary", *, cancel = None))]
pub fn ssb_load_postgres(
    py: Python<'_>,
    conninfo: &str,
    scale_factor: f64,
    tables: Vec<String>,
    connections: usize,
    copy_format: &str,
    cancel: Option<Bound<'_, PyAny>>,
) -> PyResult<Vec<TableLoad>> {
    load_tables(
        py,
        conninfo,
        scale_factor,
        &tables,
        table,
        connections,
        copy_format,
        cancel,
    )
}

/// One SSB table as an Arrow C stream PyCapsule ("arrow_array_stream").
#[pyfunction]
pub fn ssb_arrow_stream<'py>(
    py: Python<'py>,
    table_name: &str,
    scale_factor: f64,
    threads: usize,
) -> PyResult<Bound<'py, PyCapsule>> {
    let sf = self::scale_factor(scale_factor)?;
    stream_capsule(
        py,
        arrow_stream::table_stream(table(table_name)?, sf, threads),
    )
}

/// (table, part, parts) of every part of SSB `tables`, the biggest first.
#[pyfunction]
pub fn ssb_parts(scale_factor: f64, tables: Vec<String>) -> PyResult<Vec<(String, i32, i32)>> {
    table_parts(scale_factor, &tables, table)
}

/// Part `part` of `parts` of an SSB table as text rows written to `path`,
/// as tpch_write_text (`insert_rows` too); the rows written.
#[pyfunction]
#[pyo3(signature = (path, table_name, scale_factor, part, parts, *, insert_rows = None, cancel = None))]
#[allow(clippy::too_many_arguments)]
pub fn ssb_write_text(
    py: Python<'_>,
    path: &str,
    table_name: &str,
    scale_factor: f64,
    part: i32,
    parts: i32,
    insert_rows: Option<usize>,
    cancel: Option<Bound<'_, PyAny>>,
) -> PyResult<u64> {
    write_text(
        py,
        path,
        table_name,
        table,
        scale_factor,
        part,
        parts,
        insert_rows,
        cancel,
    )
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ssb_load_postgres, m)?)?;
    m.add_function(wrap_pyfunction!(ssb_arrow_stream, m)?)?;
    m.add_function(wrap_pyfunction!(ssb_parts, m)?)?;
    m.add_function(wrap_pyfunction!(ssb_write_text, m)?)?;
    Ok(())
}
