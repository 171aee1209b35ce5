//! Parallel COPY of generated tables (TPC-H, SSB) into PostgreSQL.
//!
//! Each loader is one OS thread with its own connection and a single-threaded
//! tokio runtime: it generates a chunk of rows, hands it to COPY, and goes on
//! generating while the server parses, so generation and the server's work
//! overlap without intermediate files. Loaders take (table, part) jobs from a
//! shared queue, biggest first, so the tail of the load is short.
//!
//! It uses the engine's one PostgreSQL client (`crate::pg`), as the TPC-B
//! loader and driver do.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

use super::{CopyFormat, GeneratedTable};
use crate::error::EngineError;
use crate::pg::{ConnInfo, PgConn, COPY_CHUNK_BYTES};

#[derive(Debug, Clone)]
pub struct TableLoad {
    pub table: &'static str,
    pub rows: u64,
    /// COPY data sent, in the format used.
    pub bytes: u64,
    pub parts: i32,
    /// Sum of the loaders' busy time on this table's parts.
    pub busy_s: f64,
}

#[derive(Debug, Clone, Copy)]
struct Job<T> {
    table: T,
    part: i32,
    parts: i32,
}

/// Generate `tables` at `sf` and COPY them in, in `format`, through
/// `connections` parallel connections to `conninfo` (a libpq key=value
/// string).
pub fn load_postgres<T: GeneratedTable>(
    conninfo: &str,
    sf: f64,
    tables: &[T],
    connections: usize,
    format: CopyFormat,
) -> Result<Vec<TableLoad>, EngineError> {
    let info = ConnInfo::parse(conninfo)
        .map_err(|e| EngineError::Config(format!("bad connection string: {e}")))?;
    let mut jobs: Vec<Job<T>> = tables
        .iter()
        .flat_map(|&table| {
            let parts = table.default_parts(sf);
            (1..=parts).map(move |part| Job { table, part, parts })
        })
        .collect();
    jobs.sort_by(|a, b| {
        let size = |j: &Job<T>| j.table.approx_rows(sf) / j.parts as f64;
        size(b).total_cmp(&size(a))
    });
    let dataset = tables.first().map_or("", |t| t.dataset());
    let queue = Mutex::new(VecDeque::from(jobs));
    let done: Mutex<BTreeMap<&'static str, TableLoad>> = Mutex::new(BTreeMap::new());
    let first_error: Mutex<Option<EngineError>> = Mutex::new(None);

    std::thread::scope(|scope| {
        for _ in 0..connections.max(1) {
            scope.spawn(|| {
                if let Err(e) = loader(dataset, &info, sf, format, &queue, &done) {
                    first_error.lock().unwrap().get_or_insert(e);
                    queue.lock().unwrap().clear(); // the others stop after their part
                }
            });
        }
    });
    if let Some(e) = first_error.into_inner().unwrap() {
        return Err(e);
    }
    let done = done.into_inner().unwrap();
    Ok(tables
        .iter()
        .filter_map(|t| done.get(t.name()).cloned())
        .collect())
}

fn loader<T: GeneratedTable>(
    dataset: &str,
    info: &ConnInfo,
    sf: f64,
    format: CopyFormat,
    queue: &Mutex<VecDeque<Job<T>>>,
    done: &Mutex<BTreeMap<&'static str, TableLoad>>,
) -> Result<(), EngineError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| EngineError::Internal(format!("cannot start a loader runtime: {e}")))?;
    let mut conn = rt
        .block_on(PgConn::connect(info))
        .map_err(|e| EngineError::Target(format!("cannot connect to load {dataset} data: {e}")))?;
    loop {
        let Some(job) = queue.lock().unwrap().pop_front() else {
            break;
        };
        let started = Instant::now();
        let name = job.table.name();
        let part = job.part;
        let statement = match format {
            CopyFormat::Text => format!("COPY {name} FROM STDIN (FORMAT text, DELIMITER '|')"),
            CopyFormat::Binary => format!("COPY {name} FROM STDIN (FORMAT binary)"),
        };
        rt.block_on(conn.copy_start(&statement))
            .map_err(|e| EngineError::Target(format!("COPY {name}: {e}")))?;
        let mut bytes: u64 = 0;
        let send = |chunk: Vec<u8>| {
            bytes += chunk.len() as u64;
            rt.block_on(conn.copy_send(&chunk))
        };
        let generated = match format {
            CopyFormat::Text => {
                job.table
                    .write_copy_rows(sf, part, job.parts, COPY_CHUNK_BYTES, send)
            }
            CopyFormat::Binary => {
                job.table
                    .write_copy_binary(sf, part, job.parts, COPY_CHUNK_BYTES, send)
            }
        };
        let rows =
            generated.map_err(|e| EngineError::Target(format!("COPY {name} part {part}: {e}")))?;
        let copied = rt
            .block_on(conn.copy_finish())
            .map_err(|e| EngineError::Target(format!("COPY {name} part {part}: {e}")))?;
        if copied != rows {
            return Err(EngineError::Target(format!(
                "COPY {name}: generated {rows} rows, server took {copied}"
            )));
        }
        let mut done = done.lock().unwrap();
        let entry = done.entry(name).or_insert(TableLoad {
            table: name,
            rows: 0,
            bytes: 0,
            parts: job.parts,
            busy_s: 0.0,
        });
        entry.rows += rows;
        entry.bytes += bytes;
        entry.busy_s += started.elapsed().as_secs_f64();
    }
    conn.terminate();
    Ok(())
}
