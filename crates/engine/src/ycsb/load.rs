//! YCSB's load phase: `usertable` with key numbers 0..record_count, every
//! field `field_length` random value bytes (`gen::value`), each row's values
//! from its own stream (seed and key number), so the data depends neither
//! on the number of connections nor on the split into parts.
//!
//! The table is a `CopyTable` (its scale the record count), so the engine's
//! one parallel COPY loader (`crate::bulk::pgcopy`) streams it into
//! PostgreSQL: the table is created without its primary key, which is
//! added once the rows are in (one sorted build instead of a random insert
//! per row; building it also gives the planner the table's size). It is not
//! analyzed, as go-ycsb's and YCSB's JDBC loads do not: every statement's
//! plan is the primary key's whatever the statistics (ANALYZE took 40% of a
//! 100,000-row load here), and autovacuum analyzes it in its own time. On
//! MySQL and MariaDB the same text rows go, part
//! by part on `workers` connections, through LOAD DATA LOCAL INFILE into
//! go-ycsb's table (its primary key from the start: InnoDB keeps rows in
//! it), then ANALYZE TABLE.

use super::gen::{key_name, value};
use crate::bulk::{parts_biggest_first, pgbinary, pgcopy, CopyChunks, CopyFormat, CopyTable, Part};
use crate::error::EngineError;
use crate::mysql::{MyConn, MyConnInfo, MyError};
use crate::pg::{ConnInfo, PgConn};
use crate::random::Prng;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Which server `conninfo` names (its client's conninfo form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    Postgres,
    Mysql,
}

impl std::str::FromStr for Server {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "postgres" => Ok(Server::Postgres),
            "mysql" => Ok(Server::Mysql),
            other => Err(format!(
                "server {other:?} is unknown; allowed: postgres, mysql"
            )),
        }
    }
}

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub conninfo: String,
    pub server: Server,
    pub record_count: i64,
    pub field_count: u32,
    pub field_length: u32,
    /// Connections loading at once.
    pub workers: u32,
    pub seed: u64,
}

#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// (step, seconds) in the order they ran.
    pub steps: Vec<(String, f64)>,
    /// (table, rows loaded).
    pub rows: Vec<(String, i64)>,
}

/// Rows at most per LOAD DATA or COPY chunk (bytes).
const CHUNK_BYTES: usize = 256 * 1024;

/// `usertable` as the bulk loaders see it.
#[derive(Debug, Clone, Copy)]
pub struct UserTable {
    pub field_count: u32,
    pub field_length: u32,
    pub seed: u64,
}

impl UserTable {
    /// Key numbers of part `part` of `parts` of `rows` rows.
    fn range(rows: f64, part: i32, parts: i32) -> (i64, i64) {
        let rows = rows as i64;
        let at = |p: i32| (rows as i128 * p as i128 / parts as i128) as i64;
        (at(part - 1), at(part))
    }

    fn columns(self) -> String {
        let fields: Vec<String> = (0..self.field_count).map(|i| format!("FIELD{i}")).collect();
        format!("YCSB_KEY, {}", fields.join(", "))
    }

    /// One row's values, field after field, into `values`.
    fn values(self, key: i64, values: &mut Vec<u8>) {
        values.clear();
        let mut rng = Prng::seeded(self.seed ^ (key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        value(
            &mut rng,
            self.field_length as usize * self.field_count as usize,
            values,
        );
    }

    /// The rows of key numbers `from..to` as text ('|' between fields, no
    /// escapes needed), appended to `out` until it holds `chunk_bytes`;
    /// returns the next key number.
    fn text_rows(self, from: i64, to: i64, chunk_bytes: usize, out: &mut Vec<u8>) -> i64 {
        let (mut key, mut values) = (Vec::with_capacity(32), Vec::new());
        let len = self.field_length as usize;
        let mut n = from;
        while n < to && out.len() < chunk_bytes {
            key_name(n, &mut key);
            self.values(n, &mut values);
            out.extend_from_slice(&key);
            for field in values.chunks(len) {
                out.push(b'|');
                out.extend_from_slice(field);
            }
            out.push(b'\n');
            n += 1;
        }
        n
    }

    fn create_postgres(self) -> String {
        let fields: Vec<String> = (0..self.field_count)
            .map(|i| format!(", FIELD{i} VARCHAR({})", self.field_length))
            .collect();
        format!(
            "CREATE TABLE usertable (YCSB_KEY VARCHAR(64){})",
            fields.concat()
        )
    }

    /// go-ycsb's CREATE TABLE on MySQL.
    fn create_mysql(self) -> String {
        let fields: Vec<String> = (0..self.field_count)
            .map(|i| format!(", FIELD{i} VARCHAR({})", self.field_length))
            .collect();
        format!(
            "CREATE TABLE usertable (YCSB_KEY VARCHAR(64) PRIMARY KEY{})",
            fields.concat()
        )
    }
}

impl CopyTable for UserTable {
    fn dataset(self) -> &'static str {
        "YCSB"
    }

    fn name(self) -> &'static str {
        "usertable"
    }

    fn approx_rows(self, scale: f64) -> f64 {
        scale
    }

    fn part_work(self, scale: f64, parts: i32) -> f64 {
        scale * self.field_count as f64 * self.field_length as f64 / parts as f64
    }

    fn copy_statement(self, format: CopyFormat) -> String {
        let columns = self.columns();
        match format {
            CopyFormat::Text => {
                format!("COPY usertable ({columns}) FROM STDIN (FORMAT text, DELIMITER '|')")
            }
            CopyFormat::Binary => format!("COPY usertable ({columns}) FROM STDIN (FORMAT binary)"),
        }
    }

    fn write_copy_rows<E>(
        self,
        scale: f64,
        part: i32,
        parts: i32,
        chunk_bytes: usize,
        mut emit: impl FnMut(Vec<u8>) -> Result<(), E>,
    ) -> Result<u64, E> {
        let (from, to) = UserTable::range(scale, part, parts);
        let mut n = from;
        while n < to {
            let mut out = Vec::with_capacity(chunk_bytes + 4096);
            n = self.text_rows(n, to, chunk_bytes, &mut out);
            emit(out)?;
        }
        Ok((to - from) as u64)
    }

    fn write_copy_binary<E>(
        self,
        scale: f64,
        part: i32,
        parts: i32,
        chunk_bytes: usize,
        emit: impl FnMut(Vec<u8>) -> Result<(), E>,
    ) -> Result<u64, E> {
        let (from, to) = UserTable::range(scale, part, parts);
        let mut out = CopyChunks::new_binary(chunk_bytes, emit);
        let (mut key, mut values) = (Vec::with_capacity(32), Vec::new());
        let len = self.field_length as usize;
        for n in from..to {
            key_name(n, &mut key);
            self.values(n, &mut values);
            pgbinary::row(&mut out.buf, 1 + self.field_count as i16);
            for field in std::iter::once(&key[..]).chain(values.chunks(len)) {
                out.buf
                    .extend_from_slice(&(field.len() as i32).to_be_bytes());
                out.buf.extend_from_slice(field);
            }
            out.row_done()?;
        }
        out.finish_binary()?;
        Ok((to - from) as u64)
    }
}

/// Load `usertable`; `on_step` hears each step as it starts. Checks `abort`
/// between chunks.
pub fn load(
    cfg: &LoadConfig,
    abort: &AtomicBool,
    mut on_step: impl FnMut(&str),
) -> Result<LoadReport, EngineError> {
    if cfg.record_count < 1 || cfg.field_count < 1 || cfg.field_length < 1 {
        return Err(EngineError::Config(
            "record_count, field_count and field_length must be at least 1".into(),
        ));
    }
    if cfg.field_count > i16::MAX as u32 - 1 {
        return Err(EngineError::Config(format!(
            "field_count {} is more than a table holds",
            cfg.field_count
        )));
    }
    let table = UserTable {
        field_count: cfg.field_count,
        field_length: cfg.field_length,
        seed: cfg.seed,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| EngineError::Internal(format!("no load runtime: {e}")))?;
    let mut report = LoadReport::default();
    let step = |name: &str, started: Instant, report: &mut LoadReport| {
        report
            .steps
            .push((name.to_string(), started.elapsed().as_secs_f64()));
    };
    match cfg.server {
        Server::Postgres => {
            let info = ConnInfo::parse(&cfg.conninfo)?;
            let mut conn = rt.block_on(PgConn::connect(&info))?;
            rt.block_on(async {
                conn.simple("DROP TABLE IF EXISTS usertable").await?;
                conn.simple(&table.create_postgres()).await
            })?;
            on_step("rows");
            let started = Instant::now();
            pgcopy::load_postgres(
                &cfg.conninfo,
                cfg.record_count as f64,
                &[table],
                cfg.workers as usize,
                CopyFormat::Binary,
                abort,
            )?;
            step("rows", started, &mut report);
            on_step("primary key");
            let started = Instant::now();
            rt.block_on(conn.simple("ALTER TABLE usertable ADD PRIMARY KEY (YCSB_KEY)"))?;
            step("primary key", started, &mut report);
            conn.terminate();
        }
        Server::Mysql => {
            let info = MyConnInfo::parse(&cfg.conninfo)?;
            let mut conn = rt.block_on(MyConn::connect(&info))?;
            rt.block_on(async {
                conn.query("DROP TABLE IF EXISTS usertable").await?;
                conn.query(&table.create_mysql()).await
            })?;
            on_step("rows");
            let started = Instant::now();
            load_mysql(&info, table, cfg.record_count, cfg.workers, abort)?;
            step("rows", started, &mut report);
            on_step("analyze");
            let started = Instant::now();
            rt.block_on(conn.query("ANALYZE TABLE usertable"))?;
            step("analyze", started, &mut report);
            conn.terminate();
        }
    }
    report.rows.push(("usertable".into(), cfg.record_count));
    Ok(report)
}

/// The table's parts through LOAD DATA LOCAL INFILE, on `workers`
/// connections at once, biggest part first.
fn load_mysql(
    info: &MyConnInfo,
    table: UserTable,
    rows: i64,
    workers: u32,
    abort: &AtomicBool,
) -> Result<(), EngineError> {
    let scale = rows as f64;
    let jobs = parts_biggest_first(&[table], scale);
    let loaders = (workers as usize).clamp(1, jobs.len().max(1));
    let queue: Mutex<VecDeque<Part<UserTable>>> = Mutex::new(VecDeque::from(jobs));
    let failed = AtomicBool::new(false);
    let sql = format!(
        "LOAD DATA LOCAL INFILE 'usertable' INTO TABLE usertable FIELDS TERMINATED BY '|' ({})",
        table.columns()
    );
    let results: Vec<Result<(), EngineError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..loaders)
            .map(|_| {
                let (queue, failed, sql) = (&queue, &failed, &sql);
                scope.spawn(move || {
                    let result = load_parts(info, scale, queue, sql, abort, failed);
                    if result.is_err() {
                        failed.store(true, Ordering::SeqCst);
                    }
                    result
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(EngineError::Internal("a loader panicked".into())))
            })
            .collect()
    });
    // the first real failure, before another loader's "interrupted"
    let mut first = None;
    for r in results {
        if let Err(e) = r {
            if first.is_none() || first == Some(EngineError::Interrupted) {
                first = Some(e);
            }
        }
    }
    first.map_or(Ok(()), Err)
}

fn load_parts(
    info: &MyConnInfo,
    scale: f64,
    queue: &Mutex<VecDeque<Part<UserTable>>>,
    sql: &str,
    abort: &AtomicBool,
    failed: &AtomicBool,
) -> Result<(), EngineError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| EngineError::Internal(format!("no load runtime: {e}")))?;
    rt.block_on(async {
        let mut conn = MyConn::connect(info).await?;
        loop {
            let Some(job) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front() else {
                break;
            };
            let (from, to) = UserTable::range(scale, job.part, job.parts);
            let mut next = from;
            let took = conn
                .load_data_local(sql, |out| {
                    if abort.load(Ordering::Relaxed) || failed.load(Ordering::Relaxed) {
                        return Err(MyError::Interrupted);
                    }
                    next = job.table.text_rows(next, to, CHUNK_BYTES, out);
                    Ok(next < to)
                })
                .await?;
            if took != (to - from) as u64 {
                return Err(EngineError::Target(format!(
                    "LOAD DATA usertable part {}: {} rows sent, the server took {took}",
                    job.part,
                    to - from
                )));
            }
        }
        conn.terminate();
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: UserTable = UserTable {
        field_count: 3,
        field_length: 5,
        seed: 1,
    };

    #[test]
    fn parts_cover_the_keys_once() {
        let mut seen = Vec::new();
        for part in 1..=7 {
            let (a, b) = UserTable::range(100.0, part, 7);
            seen.extend(a..b);
        }
        assert_eq!(seen, (0..100).collect::<Vec<i64>>());
    }

    #[test]
    fn text_rows_are_key_and_fields_and_the_same_whatever_the_split() {
        let mut whole = Vec::new();
        T.write_copy_rows(10.0, 1, 1, 1 << 20, |c| {
            whole.extend(c);
            Ok::<(), ()>(())
        })
        .unwrap();
        let text = String::from_utf8(whole.clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 10);
        let first: Vec<&str> = lines[0].split('|').collect();
        assert_eq!(first[0], "user6284781860667377211");
        assert_eq!(first.len(), 4);
        assert!(first[1..].iter().all(|f| f.len() == 5));
        let mut split = Vec::new();
        for part in 1..=3 {
            // small chunks: a chunk ends between rows
            T.write_copy_rows(10.0, part, 3, 40, |c| {
                split.extend(c);
                Ok::<(), ()>(())
            })
            .unwrap();
        }
        assert_eq!(split, whole);
    }

    #[test]
    fn binary_rows_carry_the_same_fields() {
        let mut out = Vec::new();
        let rows = T
            .write_copy_binary(2.0, 1, 1, 1 << 20, |c| {
                out.extend(c);
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!(rows, 2);
        assert!(out.starts_with(pgbinary::HEADER) && out.ends_with(pgbinary::TRAILER));
        // per row: field count 2, then 4 fields of length 4 + bytes
        let key = b"user6284781860667377211";
        assert_eq!(
            out.len(),
            19 + 2 * 2 + 2 * (3 * (4 + 5)) + 2 * 4 + key.len() + 23 + 2
        );
        assert_eq!(&out[19..21], &4i16.to_be_bytes());
        assert_eq!(&out[25..25 + key.len()], key);
    }

    #[test]
    fn ddl_is_go_ycsbs() {
        assert_eq!(
            T.create_mysql(),
            "CREATE TABLE usertable (YCSB_KEY VARCHAR(64) PRIMARY KEY, FIELD0 VARCHAR(5), \
             FIELD1 VARCHAR(5), FIELD2 VARCHAR(5))"
        );
        assert!(!T.create_postgres().contains("PRIMARY KEY"));
        assert!(T
            .copy_statement(CopyFormat::Binary)
            .starts_with("COPY usertable (YCSB_KEY, FIELD0, FIELD1, FIELD2) FROM STDIN"));
    }
}
