//! TPC-H glue: data generation + COPY into PostgreSQL, Arrow streams for
//! DuckDB, text rows for MySQL's LOAD DATA, refresh-function sets. Every
//! long call releases the GIL.

use std::ffi::CString;
use std::path::Path;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule};

use crate::errors::{config_error, engine_error};
use crate::glue::run_blocking;
use crate::results::TableLoad;

use perflab_engine::bulk::{
    parts_biggest_first, pgcopy, textfile, CopyFormat, CopyTable, GeneratedTable,
};
use perflab_engine::tpch::{self, refresh, Table};

fn table(name: &str) -> PyResult<Table> {
    Table::from_name(name).ok_or_else(|| {
        config_error(format!(
            "{name:?} is not a TPC-H table; allowed: region, nation, part, supplier, partsupp, customer, orders, lineitem"
        ))
    })
}

pub(crate) fn scale_factor(sf: f64) -> PyResult<f64> {
    if sf.is_finite() && sf > 0.0 {
        Ok(sf)
    } else {
        Err(config_error(format!(
            "scale factor {sf} is not a positive number"
        )))
    }
}

/// Generate `tables` at `scale_factor` and COPY them into PostgreSQL over
/// `connections` parallel connections, in COPY format `copy_format`
/// ("binary" or "text"); returns one TableLoad per table. A set `cancel`
/// stops the load between chunks.
#[pyfunction]
#[pyo3(signature = (conninfo, scale_factor, tables, connections, copy_format = "binary", *, cancel = None))]
pub fn tpch_load_postgres(
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

/// Generate the named tables (`parse` finds each) and COPY them into
/// PostgreSQL through the engine's shared loader, the GIL released; stopped
/// between chunks by a signal or `cancel`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn load_tables<T: GeneratedTable>(
    py: Python<'_>,
    conninfo: &str,
    scale_factor: f64,
    names: &[String],
    parse: fn(&str) -> PyResult<T>,
    connections: usize,
    copy_format: &str,
    cancel: Option<Bound<'_, PyAny>>,
) -> PyResult<Vec<TableLoad>> {
    let sf = self::scale_factor(scale_factor)?;
    let format: CopyFormat = copy_format.parse().map_err(config_error)?;
    let tables = names
        .iter()
        .map(|t| parse(t))
        .collect::<PyResult<Vec<_>>>()?;
    let loads = run_blocking(py, "perflab-copy", cancel.as_ref(), None, |abort, _| {
        pgcopy::load_postgres(conninfo, sf, &tables, connections, format, abort)
    })?
    .map_err(engine_error)?;
    Ok(table_loads(loads))
}

/// The parts a loader of `names` at `scale_factor` takes one at a time:
/// (table, part, parts), the biggest first.
pub(crate) fn table_parts<T: GeneratedTable>(
    scale_factor: f64,
    names: &[String],
    parse: fn(&str) -> PyResult<T>,
) -> PyResult<Vec<(String, i32, i32)>> {
    let sf = self::scale_factor(scale_factor)?;
    let tables = names
        .iter()
        .map(|t| parse(t))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(parts_biggest_first(&tables, sf)
        .into_iter()
        .map(|p| (p.table.name().to_string(), p.part, p.parts))
        .collect())
}

/// Part `part` of `parts` of one table as text rows written to `path`
/// (or, with `insert_rows`, as multi-row INSERTs of that many rows, one a
/// line), the GIL released; stopped between chunks by a signal or `cancel`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_text<T: GeneratedTable>(
    py: Python<'_>,
    path: &str,
    name: &str,
    parse: fn(&str) -> PyResult<T>,
    scale_factor: f64,
    part: i32,
    parts: i32,
    insert_rows: Option<usize>,
    cancel: Option<Bound<'_, PyAny>>,
) -> PyResult<u64> {
    let sf = self::scale_factor(scale_factor)?;
    let table = parse(name)?;
    write_part(py, path, table, sf, part, parts, insert_rows, cancel)
}

/// `textfile::write_text_part`, or `write_insert_part` with `insert_rows`,
/// the GIL released: what every `*_write_text` binding runs.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_part<T: CopyTable>(
    py: Python<'_>,
    path: &str,
    table: T,
    scale: f64,
    part: i32,
    parts: i32,
    insert_rows: Option<usize>,
    cancel: Option<Bound<'_, PyAny>>,
) -> PyResult<u64> {
    let path = Path::new(path);
    run_blocking(
        py,
        "perflab-text",
        cancel.as_ref(),
        None,
        |abort, _| match insert_rows {
            None => textfile::write_text_part(path, table, scale, part, parts, abort),
            Some(rows) => textfile::write_insert_part(path, table, scale, part, parts, rows, abort),
        },
    )?
    .map_err(engine_error)
}

/// (table, part, parts) of every part of `tables` at `scale_factor`, the
/// biggest first: the jobs of a parallel load through `tpch_write_text`.
#[pyfunction]
pub fn tpch_parts(scale_factor: f64, tables: Vec<String>) -> PyResult<Vec<(String, i32, i32)>> {
    table_parts(scale_factor, &tables, table)
}

/// Part `part` of `parts` of `table_name` at `scale_factor` as text rows
/// ('|' between fields, as COPY text) written to `path` (a pipe, a FIFO, or
/// a file that exists; never created); the rows written. With
/// `insert_rows`, multi-row INSERT statements of at most that many rows
/// instead, one a line (for a server that refuses LOAD DATA LOCAL).
#[pyfunction]
#[pyo3(signature = (path, table_name, scale_factor, part, parts, *, insert_rows = None, cancel = None))]
#[allow(clippy::too_many_arguments)]
pub fn tpch_write_text(
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

fn table_loads(loads: Vec<pgcopy::TableLoad>) -> Vec<TableLoad> {
    loads
        .into_iter()
        .map(|load| TableLoad {
            table: load.table.to_string(),
            rows: load.rows,
            bytes: load.bytes,
            parts: load.parts,
            busy_s: load.busy_s,
        })
        .collect()
}

/// An Arrow C stream PyCapsule ("arrow_array_stream") over a generated table.
pub(crate) fn stream_capsule<T: Send + 'static>(
    py: Python<'_>,
    stream: T,
) -> PyResult<Bound<'_, PyCapsule>> {
    let name = CString::new("arrow_array_stream").expect("no NUL in the name");
    PyCapsule::new(py, stream, Some(name))
}

/// One table as an Arrow C stream PyCapsule ("arrow_array_stream"),
/// generated by `threads` threads while the consumer reads it.
#[pyfunction]
pub fn tpch_arrow_stream<'py>(
    py: Python<'py>,
    table_name: &str,
    scale_factor: f64,
    threads: usize,
) -> PyResult<Bound<'py, PyCapsule>> {
    let sf = self::scale_factor(scale_factor)?;
    let stream = tpch::arrow_stream::table_stream(table(table_name)?, sf, threads);
    stream_capsule(py, stream)
}

/// (block, insert slot, delete slot) of refresh pair `pair` (1-based) under `seed`.
#[pyfunction]
pub fn tpch_refresh_pair(pair: u64, seed: u64) -> PyResult<(i32, u64, u64)> {
    if pair == 0 {
        return Err(config_error("refresh pairs are numbered from 1"));
    }
    let p = refresh::refresh_pair(pair, seed);
    Ok((p.block, p.insert_slot, p.delete_slot))
}

/// RF1's rows as COPY text ('|'-delimited): (orders, lineitem, n orders, n lineitems).
#[pyfunction]
pub fn tpch_rf1_rows<'py>(
    py: Python<'py>,
    scale_factor: f64,
    pair: u64,
    seed: u64,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, u64, u64)> {
    let sf = self::scale_factor(scale_factor)?;
    let p = refresh::refresh_pair(pair.max(1), seed);
    let (orders, lineitems, n_orders, n_lineitems) = py.detach(|| refresh::rf1_rows(sf, p));
    Ok((
        PyBytes::new(py, &orders),
        PyBytes::new(py, &lineitems),
        n_orders,
        n_lineitems,
    ))
}

/// RF2's order keys.
#[pyfunction]
pub fn tpch_rf2_keys(
    py: Python<'_>,
    scale_factor: f64,
    pair: u64,
    seed: u64,
) -> PyResult<Vec<i64>> {
    let sf = self::scale_factor(scale_factor)?;
    let p = refresh::refresh_pair(pair.max(1), seed);
    Ok(py.detach(|| refresh::rf2_keys(sf, p)))
}

/// The TPC's SF 1 answer to query `query` (validation parameters), as shipped
/// in the `tpchgen` crate; None when there is none.
#[pyfunction]
pub fn tpch_official_answer_sf1(query: i32) -> Option<&'static str> {
    tpch::official_answer_sf1(query)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tpch_load_postgres, m)?)?;
    m.add_function(wrap_pyfunction!(tpch_arrow_stream, m)?)?;
    m.add_function(wrap_pyfunction!(tpch_parts, m)?)?;
    m.add_function(wrap_pyfunction!(tpch_write_text, m)?)?;
    m.add_function(wrap_pyfunction!(tpch_refresh_pair, m)?)?;
    m.add_function(wrap_pyfunction!(tpch_rf1_rows, m)?)?;
    m.add_function(wrap_pyfunction!(tpch_rf2_keys, m)?)?;
    m.add_function(wrap_pyfunction!(tpch_official_answer_sf1, m)?)?;
    Ok(())
}
