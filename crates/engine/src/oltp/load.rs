//! sysbench's tables, generated here and streamed with binary COPY.
//!
//! The result is what `sysbench oltp_* --db-driver=pgsql prepare` leaves
//! (its defaults: SERIAL primary key, secondary index `k_N`): the same DDL,
//! ids 1..table_size, `k` drawn by `rand_type` from 1..table_size, `c` and
//! `pad` of random 11-digit groups, and the id sequence moved past the rows
//! so the `insert` script's ids follow them. Beyond sysbench: rows are
//! written frozen into the table created in the same transaction, tables
//! load on `workers` connections at once, and each is analyzed.
//!
//! On MySQL and MariaDB (`Server::Mysql`) the same rows go through
//! `super::mysql::load_table` (sysbench's MySQL DDL, LOAD DATA LOCAL).

use super::mysql::{self as my, LoadMethod};
use super::protocol::{digits, KeyRand, RandType, C_LEN, PAD_LEN};
use super::Server;
use crate::bulk::pgbinary;
use crate::error::EngineError;
use crate::mysql::{MyConn, MyConnInfo};
use crate::pg::{ConnInfo, PgConn, COPY_CHUNK_BYTES};
use crate::random::Prng;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub conninfo: String,
    pub tables: u32,
    pub table_size: u32,
    pub rand_type: RandType,
    /// Connections loading tables at once.
    pub workers: u32,
    pub seed: u64,
    /// Which server `conninfo` names (its client's conninfo form).
    pub server: Server,
    /// How rows go to MySQL (unused on PostgreSQL).
    pub mysql_method: LoadMethod,
}

/// One loading connection, to either server.
enum Conn {
    Pg(PgConn),
    My(MyConn),
}

enum Info {
    Pg(ConnInfo),
    My(MyConnInfo),
}

#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// (step, seconds): "tables", the wall time of every table's load.
    pub steps: Vec<(String, f64)>,
    /// (table, rows loaded).
    pub rows: Vec<(String, i64)>,
}

/// sysbench's CREATE TABLE on PostgreSQL (auto_inc on), without its
/// PRIMARY KEY on id: `primary_key` adds that after the rows, in the same
/// transaction, so the index is built once from the sorted rows instead of
/// taking them one by one (10 tables of 100,000 rows: 1.90-2.05 s against
/// 2.24-2.34 s, and about a tenth less CPU, server's and ours together;
/// benchmarks/README.md, "The PostgreSQL load").
pub fn create_table(table: u32) -> String {
    format!(
        "CREATE TABLE sbtest{table}(id SERIAL, k INTEGER DEFAULT '0' NOT NULL, \
         c CHAR(120) DEFAULT '' NOT NULL, pad CHAR(60) DEFAULT '' NOT NULL)"
    )
}

/// sysbench's PRIMARY KEY (id), added once the rows are in (`create_table`).
/// Its name, sbtest{table}_pkey, is the one CREATE TABLE would have given.
pub fn primary_key(table: u32) -> String {
    format!("ALTER TABLE sbtest{table} ADD PRIMARY KEY (id)")
}

/// Binary COPY rows (id, k, c, pad) of one table, chunk by chunk.
pub struct Rows {
    next: i64,
    last: i64,
    keys: KeyRand,
    rng: Prng,
    started: bool,
}

impl Rows {
    pub fn new(table_size: u32, rand_type: RandType, seed: u64) -> Rows {
        Rows {
            next: 1,
            last: table_size as i64,
            keys: KeyRand {
                rand_type,
                n: table_size as i64,
            },
            rng: Prng::seeded(seed),
            started: false,
        }
    }

    /// Append rows to `out` (the header first, the trailer last); false when done.
    pub fn fill(&mut self, out: &mut Vec<u8>) -> bool {
        if !self.started {
            out.extend_from_slice(pgbinary::HEADER);
            self.started = true;
        }
        let (mut c, mut pad) = ([0u8; C_LEN], [0u8; PAD_LEN]);
        while self.next <= self.last && out.len() < COPY_CHUNK_BYTES {
            pgbinary::row(out, 4);
            pgbinary::int4_of(out, self.next);
            pgbinary::int4_of(out, self.keys.draw(&mut self.rng));
            digits(&mut self.rng, &mut c);
            digits(&mut self.rng, &mut pad);
            for field in [&c[..], &pad[..]] {
                out.extend_from_slice(&(field.len() as i32).to_be_bytes());
                out.extend_from_slice(field);
            }
            self.next += 1;
        }
        if self.next > self.last {
            out.extend_from_slice(pgbinary::TRAILER);
            return false;
        }
        true
    }
}

/// Load sbtest1..tables; `on_step` hears each table as it starts. Checks
/// `abort` between chunks; an aborted table's transaction rolls back.
pub fn load(
    cfg: &LoadConfig,
    abort: &AtomicBool,
    mut on_step: impl FnMut(&str),
) -> Result<LoadReport, EngineError> {
    if cfg.tables == 0 || cfg.table_size == 0 || cfg.table_size > i32::MAX as u32 {
        return Err(EngineError::Config(
            "tables must be at least 1 and table_size 1..2147483647".into(),
        ));
    }
    let info = match cfg.server {
        Server::Postgres => Info::Pg(ConnInfo::parse(&cfg.conninfo)?),
        Server::Mysql => Info::My(MyConnInfo::parse(&cfg.conninfo)?),
    };
    let next = Mutex::new(1u32);
    let report = Mutex::new(LoadReport::default());
    let workers = cfg.workers.clamp(1, cfg.tables);
    let (tx, rx) = mpsc::channel::<String>();
    let started = Instant::now();
    let results: Vec<Result<(), EngineError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                let tx = tx.clone();
                let (next, report, info) = (&next, &report, &info);
                scope.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| EngineError::Internal(format!("no load runtime: {e}")))?;
                    rt.block_on(async {
                        let mut conn = match info {
                            Info::Pg(info) => Conn::Pg(PgConn::connect(info).await?),
                            Info::My(info) => Conn::My(MyConn::connect(info).await?),
                        };
                        loop {
                            let table = {
                                let mut n = next.lock().unwrap();
                                *n += 1;
                                *n - 1
                            };
                            if table > cfg.tables {
                                return Ok(());
                            }
                            let _ = tx.send(format!("sbtest{table}"));
                            match &mut conn {
                                Conn::Pg(conn) => load_table(conn, cfg, table, abort).await?,
                                Conn::My(conn) => {
                                    my::load_table(
                                        conn,
                                        table,
                                        cfg.table_size,
                                        cfg.rand_type,
                                        cfg.seed ^ table as u64,
                                        cfg.mysql_method,
                                        abort,
                                    )
                                    .await?
                                }
                            }
                            let rows = (format!("sbtest{table}"), cfg.table_size as i64);
                            report.lock().unwrap().rows.push(rows);
                        }
                    })
                })
            })
            .collect();
        drop(tx);
        // Steps are heard on the calling thread, as they start.
        for step in rx {
            on_step(&step);
        }
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    let mut report = report.into_inner().unwrap();
    // Tables load in parallel: one step, the wall time of them all.
    report
        .steps
        .push(("tables".into(), started.elapsed().as_secs_f64()));
    report
        .rows
        .sort_by_key(|(name, _)| name[6..].parse::<u32>().unwrap_or(0));
    Ok(report)
}

async fn load_table(
    conn: &mut PgConn,
    cfg: &LoadConfig,
    table: u32,
    abort: &AtomicBool,
) -> Result<(), EngineError> {
    conn.simple(&format!("DROP TABLE IF EXISTS sbtest{table}"))
        .await?;
    conn.simple("BEGIN").await?;
    conn.simple(&create_table(table)).await?;
    let mut rows = Rows::new(cfg.table_size, cfg.rand_type, cfg.seed ^ table as u64);
    let mut interrupted = false;
    // FREEZE: the table was created in this transaction.
    let copy = format!("COPY sbtest{table} (id, k, c, pad) FROM STDIN (FORMAT binary, FREEZE)");
    let copied = conn
        .copy_in(&copy, |out| {
            if abort.load(Ordering::Relaxed) {
                interrupted = true;
                return false;
            }
            rows.fill(out)
        })
        .await;
    if interrupted {
        // Dropping the connection inside the transaction rolls it back.
        return Err(EngineError::Interrupted);
    }
    copied?;
    conn.simple(&format!(
        "SELECT setval('sbtest{table}_id_seq', {})",
        cfg.table_size
    ))
    .await?;
    conn.simple(&primary_key(table)).await?;
    conn.simple("COMMIT").await?;
    conn.simple(&format!("CREATE INDEX k_{table} ON sbtest{table}(k)"))
        .await?;
    conn.simple(&format!("ANALYZE sbtest{table}")).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_sysbenchs_columns_in_binary_copy() {
        let mut rows = Rows::new(1000, RandType::Special, 3);
        let mut out = Vec::new();
        assert!(!rows.fill(&mut out));
        assert!(out.starts_with(pgbinary::HEADER) && out.ends_with(pgbinary::TRAILER));
        // per row: count 2 + id 8 + k 8 + c 4+119 + pad 4+59
        assert_eq!(
            out.len(),
            19 + 1000 * (2 + 8 + 8 + 4 + C_LEN + 4 + PAD_LEN) + 2
        );
        let first = &out[19..];
        assert_eq!(&first[..2], &4i16.to_be_bytes());
        assert_eq!(&first[6..10], &1i32.to_be_bytes());
        assert!(create_table(3).starts_with("CREATE TABLE sbtest3(id SERIAL"));
        assert!(!create_table(3).contains("PRIMARY KEY"));
        assert_eq!(primary_key(3), "ALTER TABLE sbtest3 ADD PRIMARY KEY (id)");
    }
}
