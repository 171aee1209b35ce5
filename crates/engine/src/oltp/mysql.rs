//! sysbench's OLTP scripts on MySQL and MariaDB (its mysql driver's SQL),
//! as a protocol of the load harness, and their tables' loader.
//!
//! As on PostgreSQL (`protocol`), one transaction is one sysbench event,
//! every statement is prepared once per connection and executed with binary
//! parameters (sysbench's `--db-ps-mode=auto` on its mysql driver), and each
//! waits for its own answer, as sysbench's does: MySQL runs a pipeline's
//! later statements after an earlier one failed, so BEGIN .. COMMIT is never
//! pipelined. sysbench restarts an event on its mysql driver's ignorable
//! errors, 1213 (deadlock), 1205 (lock wait timeout) and 1020: those are
//! retryable here (`mysql::ServerError::error_class`).
//!
//! The loader leaves what `sysbench oltp_* --db-driver=mysql prepare` does:
//! sysbench's CREATE TABLE (InnoDB, AUTO_INCREMENT id), ids 1..table_size,
//! `k` by `rand_type`, `c` and `pad` of 11-digit groups, then the secondary
//! index `k_N`. Rows stream with LOAD DATA LOCAL INFILE (the faster of the two
//! ways measured, see benchmarks/README.md), or as multi-row INSERTs.

use super::protocol::{
    digits, Draws, Events, KeyRand, Kind, RandType, Script, StatementTimes, C_LEN, PAD_LEN,
    STATEMENT_NAMES,
};
use crate::error::EngineError;
use crate::harness::{ErrorClass, Protocol, TxType};
use crate::mysql::{MyConn, MyConnInfo, MyError, Param, Stmt, LOCAL_CHUNK_BYTES};
use crate::random::Prng;
use crate::uring::Ring;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

pub struct MysqlOltpProtocol {
    info: MyConnInfo,
    events: Events,
    types: [&'static str; 1],
}

impl MysqlOltpProtocol {
    pub fn new(
        conninfo: &str,
        script: Script,
        tables: u32,
        table_size: u32,
        rand_type: RandType,
    ) -> Result<MysqlOltpProtocol, EngineError> {
        Ok(MysqlOltpProtocol {
            info: MyConnInfo::parse(conninfo)?,
            events: Events::new(script, tables, table_size, rand_type)?,
            types: [script.name()],
        })
    }
}

pub struct MysqlOltpClient {
    conn: MyConn,
    begin: Stmt,
    commit: Stmt,
    /// Prepared statements, [table * PER_TABLE.len() + kind].
    stmts: Vec<Option<Stmt>>,
    times: StatementTimes,
    /// The server thread serving the connection, when it could be told
    /// (`MyConn::find_server_thread`, in a pinned run: `Protocol::locate`).
    server_thread: Option<u32>,
}

impl MysqlOltpClient {
    fn stmt(&self, kind: Kind, table: u32) -> Result<&Stmt, MyError> {
        match kind {
            Kind::Begin => Ok(&self.begin),
            Kind::Commit => Ok(&self.commit),
            _ => kind
                .per_table_index()
                .and_then(|k| self.stmts[table as usize * Kind::PER_TABLE.len() + k].as_ref())
                .ok_or_else(|| MyError::Protocol(format!("{kind:?} was not prepared"))),
        }
    }
}

impl Protocol for MysqlOltpProtocol {
    type Client = MysqlOltpClient;
    type Request = Draws;
    type Error = MyError;
    const SUPPORTS_RING: bool = true;
    const TIMERS_IN_FLIGHT: bool = false;
    const TIMES_OPERATIONS: bool = true;

    fn transaction_types(&self) -> &[&'static str] {
        &self.types
    }

    fn read_only(&self) -> bool {
        self.events.script.read_only()
    }

    fn operation_types(&self) -> &[&'static str] {
        &STATEMENT_NAMES
    }

    fn take_operations(&self, client: &mut MysqlOltpClient, record: impl FnMut(usize, u64)) {
        client.times.take(record);
    }

    async fn connect(&self, _client: u32) -> Result<MysqlOltpClient, MyError> {
        let mut conn = MyConn::connect(&self.info).await?;
        // every statement prepared in one round trip
        let kinds = self.events.kinds();
        let mut texts = vec!["BEGIN".to_string(), "COMMIT".to_string()];
        for table in 0..self.events.tables {
            texts.extend(kinds.iter().map(|kind| kind.mysql_sql(table + 1)));
        }
        let prepared = conn.prepare_all(&texts).await.map_err(|err| {
            MyError::Connect(format!(
                "preparing the {} statements failed: {err} (are sbtest1..{} loaded?)",
                self.events.script.name(),
                self.events.tables
            ))
        })?;
        let mut stmts = vec![None; self.events.tables as usize * Kind::PER_TABLE.len()];
        let mut it = prepared.into_iter();
        let (begin, commit) = (it.next().unwrap(), it.next().unwrap());
        for table in 0..self.events.tables as usize {
            for &kind in &kinds {
                let k = kind.per_table_index().unwrap_or(0);
                stmts[table * Kind::PER_TABLE.len() + k] = it.next();
            }
        }
        Ok(MysqlOltpClient {
            conn,
            begin,
            commit,
            stmts,
            times: StatementTimes::new(self.events.plan.len()),
            server_thread: None,
        })
    }

    fn socket(&self, client: &MysqlOltpClient) -> Option<RawFd> {
        Some(client.conn.raw_fd())
    }

    fn server_pid(&self, client: &MysqlOltpClient) -> Option<u32> {
        client.server_thread
    }

    async fn locate(&self, client: &mut MysqlOltpClient) {
        client.server_thread = client.conn.find_server_thread().await;
    }

    // No MIGRATES: MariaDB's connection threads do not stay on a CPU as
    // PostgreSQL's backends do. Followed on 2 pinned threads (point_select,
    // 4 alternating pairs of 10 s), clients moved about once every 6-8 s
    // each and still found their threads off CPU in 0.36-0.49 of samples:
    // 10% more tps at 8 clients, 10% fewer at 32 (benchmarks/README.md,
    // "A driver that follows its backends"). The sampled share stays.

    fn next_transaction(&self, _client: &mut MysqlOltpClient, rng: &mut Prng) -> (TxType, Draws) {
        (0, self.events.draw(rng))
    }

    async fn execute(
        &self,
        client: &mut MysqlOltpClient,
        _tx: TxType,
        d: &Draws,
    ) -> Result<(), MyError> {
        client.times.start();
        for st in &d.steps {
            let stmt = *client.stmt(st.kind, st.table)?;
            let (a, b) = (Param::Int(st.a), Param::Int(st.b));
            let conn = &mut client.conn;
            match st.kind {
                Kind::Begin | Kind::Commit => conn.put_execute(&stmt, &[]),
                Kind::SimpleRange | Kind::SumRange | Kind::OrderRange | Kind::DistinctRange => {
                    conn.put_execute(&stmt, &[a, b])
                }
                Kind::NonIndexUpdate => conn.put_execute(&stmt, &[Param::Text(&d.c_update), a]),
                Kind::Insert => conn.put_execute(
                    &stmt,
                    &[a, b, Param::Text(&d.c_insert), Param::Text(&d.pad)],
                ),
                Kind::InsertAuto => {
                    conn.put_execute(&stmt, &[b, Param::Text(&d.c_insert), Param::Text(&d.pad)])
                }
                _ => conn.put_execute(&stmt, &[a]),
            }
            if let Err(err) = conn.read_result(None).await {
                if matches!(err, MyError::Server(_)) && conn.in_transaction() {
                    conn.query("ROLLBACK").await?;
                }
                return Err(err);
            }
            client.times.answered(st.kind);
        }
        Ok(())
    }

    fn classify(&self, error: &MyError) -> ErrorClass {
        error.error_class()
    }

    fn use_ring(&self, client: &mut MysqlOltpClient, ring: &Rc<Ring>) -> Result<(), String> {
        client
            .conn
            .use_ring(ring.clone())
            .map_err(|e| e.to_string())
    }

    fn close(&self, mut client: MysqlOltpClient) {
        client.conn.terminate();
    }
}

/// How the loader sends rows to MySQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadMethod {
    /// LOAD DATA LOCAL INFILE, the rows streamed as they are made.
    LocalInfile,
    /// INSERT .. VALUES of `INSERT_ROWS` rows a statement.
    Insert,
}

impl FromStr for LoadMethod {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "local_infile" => Ok(LoadMethod::LocalInfile),
            "insert" => Ok(LoadMethod::Insert),
            other => Err(format!(
                "load method {other:?} is unknown; allowed: local_infile, insert"
            )),
        }
    }
}

/// Rows per multi-row INSERT (about 200 KB of SQL).
const INSERT_ROWS: usize = 1000;

/// sysbench's CREATE TABLE on MySQL (auto_inc on, PRIMARY KEY on id, InnoDB).
pub fn create_table(table: u32) -> String {
    format!(
        "CREATE TABLE sbtest{table}(id INTEGER NOT NULL AUTO_INCREMENT, \
         k INTEGER DEFAULT '0' NOT NULL, c CHAR(120) DEFAULT '' NOT NULL, \
         pad CHAR(60) DEFAULT '' NOT NULL, PRIMARY KEY (id)) /*! ENGINE = innodb */"
    )
}

/// The rows (id, k, c, pad) of one table, in LOAD DATA's default text
/// format (tabs, newlines; the values need no escaping) or as INSERT tuples.
pub struct TextRows {
    next: i64,
    last: i64,
    keys: KeyRand,
    rng: Prng,
}

impl TextRows {
    pub fn new(table_size: u32, rand_type: RandType, seed: u64) -> TextRows {
        TextRows {
            next: 1,
            last: table_size as i64,
            keys: KeyRand {
                rand_type,
                n: table_size as i64,
            },
            rng: Prng::seeded(seed),
        }
    }

    /// One row's fields, or None when all are made.
    fn row(&mut self, c: &mut [u8; C_LEN], pad: &mut [u8; PAD_LEN]) -> Option<(i64, i64)> {
        if self.next > self.last {
            return None;
        }
        let id = self.next;
        let k = self.keys.draw(&mut self.rng);
        digits(&mut self.rng, c);
        digits(&mut self.rng, pad);
        self.next += 1;
        Some((id, k))
    }

    /// Append tab-separated lines up to about `LOCAL_CHUNK_BYTES`; false when done.
    pub fn fill_tsv(&mut self, out: &mut Vec<u8>) -> bool {
        let (mut c, mut pad) = ([0u8; C_LEN], [0u8; PAD_LEN]);
        while out.len() < LOCAL_CHUNK_BYTES {
            let Some((id, k)) = self.row(&mut c, &mut pad) else {
                return false;
            };
            crate::pg::write_i64(out, id);
            out.push(b'\t');
            crate::pg::write_i64(out, k);
            out.push(b'\t');
            out.extend_from_slice(&c);
            out.push(b'\t');
            out.extend_from_slice(&pad);
            out.push(b'\n');
        }
        self.next <= self.last
    }

    /// One INSERT of up to `rows` rows into `table`; false when no rows were left.
    pub fn insert_sql(&mut self, table: u32, rows: usize, out: &mut Vec<u8>) -> bool {
        let (mut c, mut pad) = ([0u8; C_LEN], [0u8; PAD_LEN]);
        out.clear();
        out.extend_from_slice(
            format!("INSERT INTO sbtest{table} (id, k, c, pad) VALUES ").as_bytes(),
        );
        let mut n = 0;
        while n < rows {
            let Some((id, k)) = self.row(&mut c, &mut pad) else {
                break;
            };
            if n > 0 {
                out.push(b',');
            }
            out.push(b'(');
            crate::pg::write_i64(out, id);
            out.push(b',');
            crate::pg::write_i64(out, k);
            out.extend_from_slice(b",'");
            out.extend_from_slice(&c);
            out.extend_from_slice(b"','");
            out.extend_from_slice(&pad);
            out.extend_from_slice(b"')");
            n += 1;
        }
        n > 0
    }
}

/// Load one table on `conn`: sysbench's DDL, its rows, its `k` index.
pub async fn load_table(
    conn: &mut MyConn,
    table: u32,
    table_size: u32,
    rand_type: RandType,
    seed: u64,
    method: LoadMethod,
    abort: &AtomicBool,
) -> Result<(), EngineError> {
    conn.query(&format!("DROP TABLE IF EXISTS sbtest{table}"))
        .await?;
    conn.query(&create_table(table)).await?;
    // unique_checks and foreign_key_checks stay on: with both off, MariaDB
    // 10.11 loads an empty table by its bulk path (sorted, one undo record),
    // which cost the server about 1.4x the CPU here, the rows being in id
    // order already (benchmarks/README.md). The `k` index is built after the
    // rows, as sysbench does: built with them it cost more too.
    let mut rows = TextRows::new(table_size, rand_type, seed);
    match method {
        LoadMethod::LocalInfile => {
            let sql = format!(
                "LOAD DATA LOCAL INFILE 'sbtest{table}' INTO TABLE sbtest{table} (id, k, c, pad)"
            );
            conn.load_data_local(&sql, |out| {
                if abort.load(Ordering::Relaxed) {
                    return Err(MyError::Interrupted);
                }
                Ok(rows.fill_tsv(out))
            })
            .await?;
        }
        LoadMethod::Insert => {
            let mut sql = Vec::with_capacity(256 * 1024);
            conn.query("BEGIN").await?;
            while rows.insert_sql(table, INSERT_ROWS, &mut sql) {
                if abort.load(Ordering::Relaxed) {
                    // dropping the connection inside the transaction rolls it back
                    return Err(EngineError::Interrupted);
                }
                let text =
                    std::str::from_utf8(&sql).map_err(|e| EngineError::Internal(e.to_string()))?;
                conn.query(text).await?;
            }
            conn.query("COMMIT").await?;
        }
    }
    conn.query(&format!("CREATE INDEX k_{table} ON sbtest{table}(k)"))
        .await?;
    conn.query(&format!("ANALYZE TABLE sbtest{table}")).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_sysbenchs_columns_as_tsv_and_inserts() {
        let mut rows = TextRows::new(1000, RandType::Special, 3);
        let mut out = Vec::new();
        assert!(!rows.fill_tsv(&mut out));
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1000);
        let first: Vec<&str> = lines[0].split('\t').collect();
        assert_eq!(first[0], "1");
        assert_eq!((first[2].len(), first[3].len()), (C_LEN, PAD_LEN));
        assert!(lines[999].starts_with("1000\t"));
        let mut again = TextRows::new(3, RandType::Uniform, 1);
        let mut sql = Vec::new();
        assert!(again.insert_sql(7, 2, &mut sql));
        let sql = String::from_utf8(sql).unwrap();
        assert!(
            sql.starts_with("INSERT INTO sbtest7 (id, k, c, pad) VALUES (1,"),
            "{sql}"
        );
        assert_eq!(sql.matches("),(").count(), 1);
        let mut last = Vec::new();
        assert!(again.insert_sql(7, 2, &mut last));
        assert!(!again.insert_sql(7, 2, &mut last));
        assert!(create_table(2).contains("AUTO_INCREMENT") && create_table(2).contains("innodb"));
        assert!(Kind::InsertAuto.mysql_sql(1).contains("VALUES (0, ?"));
    }
}
