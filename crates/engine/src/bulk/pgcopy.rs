//! The one parallel COPY loader of generated tables (TPC-H, SSB, TPC-C) into
//! PostgreSQL.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::{parts_biggest_first, CopyFormat, CopyTable, Part};
use crate::error::EngineError;
use crate::pg::{ConnInfo, PgConn, PgError, COPY_CHUNK_BYTES};

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

/// Generate `tables` at `scale` and COPY them in, in `format`, through
/// `connections` parallel connections to `conninfo` (a libpq key=value
/// string). Stopped between chunks once `abort` is set: then the COPY in
/// flight is abandoned (the server rolls it back) and the result is
/// `EngineError::Interrupted`. Parts already copied stay in their tables.
pub fn load_postgres<T: CopyTable>(
    conninfo: &str,
    scale: f64,
    tables: &[T],
    connections: usize,
    format: CopyFormat,
    abort: &AtomicBool,
) -> Result<Vec<TableLoad>, EngineError> {
    let info = ConnInfo::parse(conninfo)
        .map_err(|e| EngineError::Config(format!("bad connection string: {e}")))?;
    let jobs = parts_biggest_first(tables, scale);
    let dataset = tables.first().map_or("", |t| t.dataset());
    let loaders = connections.clamp(1, jobs.len().max(1));
    let queue = Mutex::new(VecDeque::from(jobs));
    let done: Mutex<BTreeMap<&'static str, TableLoad>> = Mutex::new(BTreeMap::new());
    let first_error: Mutex<Option<EngineError>> = Mutex::new(None);
    // Set by the first loader that fails, so the others stop mid-part too.
    let failed = AtomicBool::new(false);
    let stop = || abort.load(Ordering::Relaxed) || failed.load(Ordering::Relaxed);

    std::thread::scope(|scope| {
        for n in 0..loaders {
            let (info, queue, done, first_error, failed, stop) =
                (&info, &queue, &done, &first_error, &failed, &stop);
            let spawned = std::thread::Builder::new()
                .name(format!("perflab-load-{n}"))
                .spawn_scoped(scope, move || {
                    if let Err(e) = loader(dataset, info, scale, format, queue, done, stop) {
                        failed.store(true, Ordering::SeqCst);
                        queue.lock().unwrap().clear();
                        let mut first = first_error.lock().unwrap();
                        // A loader stopped by another's failure says only "interrupted".
                        if first.is_none() || *first == Some(EngineError::Interrupted) {
                            *first = Some(e);
                        }
                    }
                });
            if let Err(e) = spawned {
                failed.store(true, Ordering::SeqCst);
                *first_error.lock().unwrap() = Some(EngineError::Internal(format!(
                    "cannot start a loader thread: {e}"
                )));
            }
        }
    });
    if let Some(e) = first_error.into_inner().unwrap() {
        return Err(e);
    }
    if abort.load(Ordering::SeqCst) {
        return Err(EngineError::Interrupted);
    }
    let done = done.into_inner().unwrap();
    Ok(tables
        .iter()
        .filter_map(|t| done.get(t.name()).cloned())
        .collect())
}

fn loader<T: CopyTable>(
    dataset: &str,
    info: &ConnInfo,
    scale: f64,
    format: CopyFormat,
    queue: &Mutex<VecDeque<Part<T>>>,
    done: &Mutex<BTreeMap<&'static str, TableLoad>>,
    stop: &dyn Fn() -> bool,
) -> Result<(), EngineError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| EngineError::Internal(format!("cannot start a loader runtime: {e}")))?;
    let mut conn = rt
        .block_on(PgConn::connect(info))
        .map_err(|e| EngineError::Target(format!("cannot connect to load {dataset} data: {e}")))?;
    loop {
        if stop() {
            // Dropping the connection abandons nothing: no COPY is open.
            return Err(EngineError::Interrupted);
        }
        let Some(job) = queue.lock().unwrap().pop_front() else {
            break;
        };
        let started = Instant::now();
        let name = job.table.name();
        let part = job.part;
        let failed = |e: PgError| match e {
            PgError::Server(err) => EngineError::Target(format!("COPY {name} part {part}: {err}")),
            other => EngineError::Target(format!("COPY {name} part {part}: {other}")),
        };
        rt.block_on(conn.copy_start(&job.table.copy_statement(format)))
            .map_err(failed)?;
        let mut bytes: u64 = 0;
        let send = |chunk: Vec<u8>| {
            if stop() {
                // Returning drops the connection mid-COPY: the server rolls
                // the part back rather than keep half of it.
                return Err(EngineError::Interrupted);
            }
            bytes += chunk.len() as u64;
            rt.block_on(conn.copy_send(&chunk)).map_err(failed)
        };
        let rows = match format {
            CopyFormat::Text => {
                job.table
                    .write_copy_rows(scale, part, job.parts, COPY_CHUNK_BYTES, send)
            }
            CopyFormat::Binary => {
                job.table
                    .write_copy_binary(scale, part, job.parts, COPY_CHUNK_BYTES, send)
            }
        }?;
        if stop() {
            return Err(EngineError::Interrupted);
        }
        let copied = rt.block_on(conn.copy_finish()).map_err(failed)?;
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
