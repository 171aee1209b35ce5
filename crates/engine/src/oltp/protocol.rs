//! sysbench's OLTP scripts on PostgreSQL, as a protocol of the load harness.
//!
//! One transaction is one sysbench event: `point_select`, `update_index`,
//! `update_non_index` and `insert` are one autocommit statement; `read_only`,
//! `read_write` and `write_only` are BEGIN, sysbench's statement groups and
//! COMMIT. Per event each group picks its table uniformly from 1..tables and
//! its ids from 1..table_size by `rand_type`; a range is `id .. id + 99`.
//! Statements are prepared once per connection (sysbench's default
//! `--db-ps-mode=auto`) and each waits for its own ReadyForQuery, as
//! sysbench's driver does. sysbench restarts an event on a deadlock, a
//! serialization failure or a duplicate key (its pgsql driver's ignorable
//! errors): those are retryable here.

use crate::harness::{EngineError, ErrorClass, Protocol, TxType};
use crate::pg::{ConnInfo, Param, PgConn, PgError, SqlError};
use crate::random::Prng;
use crate::uring::Ring;
use std::fmt;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::str::FromStr;
use std::time::Instant;

/// sysbench's defaults: statements per group, the range length.
const POINT_SELECTS: usize = 10;
pub const RANGE_SIZE: i64 = 100;
/// `c` is 10 groups of 11 digits joined by dashes (119 bytes), `pad` 5 (59).
pub const C_LEN: usize = 119;
pub const PAD_LEN: usize = 59;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    PointSelect,
    ReadOnly,
    ReadWrite,
    WriteOnly,
    UpdateIndex,
    UpdateNonIndex,
    Insert,
}

impl Script {
    pub const NAMES: [&'static str; 7] = [
        "point_select",
        "read_only",
        "read_write",
        "write_only",
        "update_index",
        "update_non_index",
        "insert",
    ];
    const ALL: [Script; 7] = [
        Script::PointSelect,
        Script::ReadOnly,
        Script::ReadWrite,
        Script::WriteOnly,
        Script::UpdateIndex,
        Script::UpdateNonIndex,
        Script::Insert,
    ];

    pub fn name(self) -> &'static str {
        Script::NAMES[self as usize]
    }

    /// Whether the script's events only read (no insert, update or delete).
    pub fn read_only(self) -> bool {
        matches!(self, Script::PointSelect | Script::ReadOnly)
    }

    /// The statements one event runs, in order (BEGIN and COMMIT included).
    pub fn statements(self) -> Vec<Kind> {
        use Kind::*;
        let reads = [
            [PointSelect; POINT_SELECTS].as_slice(),
            &[SimpleRange, SumRange, OrderRange, DistinctRange],
        ]
        .concat();
        let writes = [IndexUpdate, NonIndexUpdate, Delete, Insert];
        match self {
            Script::PointSelect => vec![PointSelect],
            Script::ReadOnly => [&[Begin][..], &reads, &[Commit]].concat(),
            Script::ReadWrite => [&[Begin][..], &reads, &writes, &[Commit]].concat(),
            Script::WriteOnly => [&[Begin][..], &writes, &[Commit]].concat(),
            Script::UpdateIndex => vec![IndexUpdate],
            Script::UpdateNonIndex => vec![NonIndexUpdate],
            Script::Insert => vec![InsertAuto],
        }
    }
}

impl FromStr for Script {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Script::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                format!(
                    "script {s:?} is not one of sysbench's; allowed: {}",
                    Script::NAMES.join(", ")
                )
            })
    }
}

/// One statement of a script. Reads and writes take their table from the
/// event's draw for their group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Begin,
    Commit,
    PointSelect,
    SimpleRange,
    SumRange,
    OrderRange,
    DistinctRange,
    IndexUpdate,
    NonIndexUpdate,
    Delete,
    /// delete_inserts' insert: the deleted id again.
    Insert,
    /// oltp_insert on PostgreSQL: the id from the SERIAL sequence.
    InsertAuto,
}

/// The statement kinds' names, as their histograms are named
/// (`latency.statement.<name>`); `Kind::statement` indexes them.
pub const STATEMENT_NAMES: [&str; 11] = [
    "begin",
    "commit",
    "point_select",
    "simple_range",
    "sum_range",
    "order_range",
    "distinct_range",
    "index_update",
    "non_index_update",
    "delete",
    "insert",
];

/// Each statement's latency (from its send to its answer) in the event's
/// last try, by kind, until the harness takes them
/// (`Protocol::take_operations`). Its buffer is made once per client.
pub struct StatementTimes {
    at: Instant,
    done: Vec<(usize, u64)>,
}

impl StatementTimes {
    pub fn new(statements: usize) -> Self {
        StatementTimes {
            at: Instant::now(),
            done: Vec::with_capacity(statements),
        }
    }

    /// A try starts: forget an earlier try's statements.
    pub fn start(&mut self) {
        self.done.clear();
        self.at = Instant::now();
    }

    /// A statement answered; the next one is sent from now (one clock read).
    pub fn answered(&mut self, kind: Kind) {
        let now = Instant::now();
        let us = now.saturating_duration_since(self.at).as_micros() as u64;
        self.done.push((kind.statement(), us));
        self.at = now;
    }

    pub fn take(&mut self, mut record: impl FnMut(usize, u64)) {
        for &(kind, us) in &self.done {
            record(kind, us);
        }
        self.done.clear();
    }
}

impl Kind {
    /// Its index in `STATEMENT_NAMES` (both inserts are "insert").
    pub fn statement(self) -> usize {
        match self {
            Kind::InsertAuto => Kind::Insert as usize,
            k => k as usize,
        }
    }

    pub const PER_TABLE: [Kind; 10] = [
        Kind::PointSelect,
        Kind::SimpleRange,
        Kind::SumRange,
        Kind::OrderRange,
        Kind::DistinctRange,
        Kind::IndexUpdate,
        Kind::NonIndexUpdate,
        Kind::Delete,
        Kind::Insert,
        Kind::InsertAuto,
    ];

    /// sysbench's statement (oltp_common.lua's `stmt_defs`) with `$n` for `?`.
    fn sql(self, table: u32) -> String {
        let range = "WHERE id BETWEEN $1 AND $2";
        match self {
            Kind::Begin => "BEGIN".into(),
            Kind::Commit => "COMMIT".into(),
            Kind::PointSelect => format!("SELECT c FROM sbtest{table} WHERE id=$1"),
            Kind::SimpleRange => format!("SELECT c FROM sbtest{table} {range}"),
            Kind::SumRange => format!("SELECT SUM(k) FROM sbtest{table} {range}"),
            Kind::OrderRange => format!("SELECT c FROM sbtest{table} {range} ORDER BY c"),
            Kind::DistinctRange => {
                format!("SELECT DISTINCT c FROM sbtest{table} {range} ORDER BY c")
            }
            Kind::IndexUpdate => format!("UPDATE sbtest{table} SET k=k+1 WHERE id=$1"),
            Kind::NonIndexUpdate => format!("UPDATE sbtest{table} SET c=$1 WHERE id=$2"),
            Kind::Delete => format!("DELETE FROM sbtest{table} WHERE id=$1"),
            Kind::Insert => {
                format!("INSERT INTO sbtest{table} (id, k, c, pad) VALUES ($1, $2, $3, $4)")
            }
            Kind::InsertAuto => {
                format!("INSERT INTO sbtest{table} (k, c, pad) VALUES ($1, $2, $3)")
            }
        }
    }
}

impl Kind {
    /// sysbench's statement for MySQL (its mysql driver's `?` placeholders;
    /// oltp_insert.lua gives id 0 there, so AUTO_INCREMENT picks it).
    pub fn mysql_sql(self, table: u32) -> String {
        let range = "WHERE id BETWEEN ? AND ?";
        match self {
            Kind::Begin => "BEGIN".into(),
            Kind::Commit => "COMMIT".into(),
            Kind::PointSelect => format!("SELECT c FROM sbtest{table} WHERE id=?"),
            Kind::SimpleRange => format!("SELECT c FROM sbtest{table} {range}"),
            Kind::SumRange => format!("SELECT SUM(k) FROM sbtest{table} {range}"),
            Kind::OrderRange => format!("SELECT c FROM sbtest{table} {range} ORDER BY c"),
            Kind::DistinctRange => {
                format!("SELECT DISTINCT c FROM sbtest{table} {range} ORDER BY c")
            }
            Kind::IndexUpdate => format!("UPDATE sbtest{table} SET k=k+1 WHERE id=?"),
            Kind::NonIndexUpdate => format!("UPDATE sbtest{table} SET c=? WHERE id=?"),
            Kind::Delete => format!("DELETE FROM sbtest{table} WHERE id=?"),
            Kind::Insert => {
                format!("INSERT INTO sbtest{table} (id, k, c, pad) VALUES (?, ?, ?, ?)")
            }
            Kind::InsertAuto => {
                format!("INSERT INTO sbtest{table} (id, k, c, pad) VALUES (0, ?, ?, ?)")
            }
        }
    }

    /// Index of a per-table statement in `PER_TABLE` (BEGIN and COMMIT: none).
    pub fn per_table_index(self) -> Option<usize> {
        Kind::PER_TABLE.iter().position(|&x| x == self)
    }
}

/// sysbench's `--rand-type`, with its default parameters (`--rand-spec-iter=12`,
/// `--rand-spec-pct=1`, `--rand-spec-res=75`, `--rand-pareto-h=0.2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RandType {
    Uniform,
    Gaussian,
    Special,
    Pareto,
}

impl FromStr for RandType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uniform" => Ok(RandType::Uniform),
            "gaussian" => Ok(RandType::Gaussian),
            "special" => Ok(RandType::Special),
            "pareto" => Ok(RandType::Pareto),
            other => Err(format!(
                "rand_type {other:?} is unknown; allowed: uniform, gaussian, special, pareto"
            )),
        }
    }
}

const SPEC_ITER: i64 = 12;
const SPEC_PCT: i64 = 1;
const SPEC_RES: i64 = 75;
const PARETO_H: f64 = 0.2;

/// `sysbench.rand.default(1, n)`: a key in 1..=n by the distribution.
#[derive(Debug, Clone, Copy)]
pub struct KeyRand {
    pub rand_type: RandType,
    pub n: i64,
}

impl KeyRand {
    #[inline]
    pub fn draw(&self, rng: &mut Prng) -> i64 {
        let t = self.n;
        // The mean of SPEC_ITER uniform draws on 0..t: bell-shaped, centred.
        let bell = |rng: &mut Prng| {
            (0..SPEC_ITER)
                .map(|_| rng.uniform_i64(0, t - 1))
                .sum::<i64>()
                / SPEC_ITER
        };
        1 + match self.rand_type {
            RandType::Uniform => rng.uniform_i64(0, t - 1),
            RandType::Gaussian => bell(rng),
            RandType::Special => {
                // SPEC_RES percent of draws hit the SPEC_PCT percent of keys
                // in the middle; the rest are bell-shaped over all keys.
                let res = rng.uniform_i64(1, t * (100 / (100 - SPEC_RES)));
                if res <= t {
                    bell(rng)
                } else {
                    let d = (t * SPEC_PCT / 100).max(1);
                    res % d + t / 2 - t * SPEC_PCT / 200
                }
            }
            RandType::Pareto => {
                let power = PARETO_H.ln() / (1.0 - PARETO_H).ln();
                ((t as f64 * rng.next_f64().powf(power)) as i64).min(t - 1)
            }
        }
    }
}

/// `sysbench.rand.string("###########-...")`: `n` bytes of 11-digit groups
/// joined by dashes, each digit uniform and independent of the others.
///
/// One 64-bit draw gives 18 digits: a draw below 18 x 10^18 (the largest
/// multiple of 10^18 under 2^64; 2.4% of draws are rejected) is uniform on
/// that range, so its remainder by 10^18 is uniform on [0, 10^18), whose 18
/// decimal digits are then uniform and independent. Drawing each digit
/// alone (under a 4-bit mask, rejecting 10-15) took 264 draws a row and a
/// branch that mispredicted a third of the time: the loader's client CPU
/// was 1.3x sysbench prepare's (benchmarks/README.md, "The PostgreSQL load").
pub fn digits(rng: &mut Prng, out: &mut [u8]) {
    const BLOCK: u64 = 1_000_000_000_000_000_000; // 10^18
    const LIMIT: u64 = 18 * BLOCK; // <= u64::MAX (about 1.84 x 10^19)
    let (mut pool, mut left) = (0u64, 0u32);
    for (i, b) in out.iter_mut().enumerate() {
        if i % 12 == 11 {
            *b = b'-';
            continue;
        }
        if left == 0 {
            pool = loop {
                let v = rng.next_u64();
                if v < LIMIT {
                    break v % BLOCK;
                }
            };
            left = 18;
        }
        *b = b'0' + (pool % 10) as u8;
        pool /= 10;
        left -= 1;
    }
}

/// One statement's draws: its table (0-based) and up to two numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub kind: Kind,
    pub table: u32,
    pub a: i64,
    pub b: i64,
}

/// One event's draws, reused by every retry.
#[derive(Debug, Clone)]
pub struct Draws {
    pub steps: Vec<Step>,
    pub c_update: [u8; C_LEN],
    pub c_insert: [u8; C_LEN],
    pub pad: [u8; PAD_LEN],
}

/// One script's events over the tables: what every server's protocol draws.
#[derive(Debug, Clone)]
pub struct Events {
    pub script: Script,
    pub tables: u32,
    pub keys: KeyRand,
    /// The statements of one event, in order.
    pub plan: Vec<Kind>,
}

pub struct OltpProtocol {
    info: ConnInfo,
    events: Events,
    /// Prepared statement names, [table * PER_TABLE.len() + kind].
    names: Vec<String>,
    types: [&'static str; 1],
}

impl OltpProtocol {
    pub fn new(
        conninfo: &str,
        script: Script,
        tables: u32,
        table_size: u32,
        rand_type: RandType,
    ) -> Result<OltpProtocol, EngineError> {
        let events = Events::new(script, tables, table_size, rand_type)?;
        let info = ConnInfo::parse(conninfo).map_err(|e| EngineError::Config(e.to_string()))?;
        let names = (1..=tables)
            .flat_map(|t| (0..Kind::PER_TABLE.len()).map(move |k| format!("s{t}_{k}")))
            .collect();
        Ok(OltpProtocol {
            info,
            events,
            names,
            types: [script.name()],
        })
    }

    fn name(&self, kind: Kind, table: u32) -> &str {
        match kind {
            Kind::Begin => "begin",
            Kind::Commit => "commit",
            _ => {
                let k = kind.per_table_index().unwrap_or(0);
                &self.names[table as usize * Kind::PER_TABLE.len() + k]
            }
        }
    }

    pub fn draw(&self, rng: &mut Prng) -> Draws {
        self.events.draw(rng)
    }
}

impl Events {
    pub fn new(
        script: Script,
        tables: u32,
        table_size: u32,
        rand_type: RandType,
    ) -> Result<Events, EngineError> {
        if tables == 0 || table_size == 0 {
            return Err(EngineError::Config(
                "tables and table_size must be at least 1".into(),
            ));
        }
        Ok(Events {
            script,
            tables,
            keys: KeyRand {
                rand_type,
                n: table_size as i64,
            },
            plan: script.statements(),
        })
    }

    /// The per-table statements an event runs (each once).
    pub fn kinds(&self) -> Vec<Kind> {
        let mut kinds: Vec<Kind> = Vec::new();
        for &k in &self.plan {
            if !matches!(k, Kind::Begin | Kind::Commit) && !kinds.contains(&k) {
                kinds.push(k);
            }
        }
        kinds
    }

    /// The draws of one event, group by group as oltp_common.lua makes them.
    pub fn draw(&self, rng: &mut Prng) -> Draws {
        let mut d = Draws {
            steps: Vec::with_capacity(self.plan.len()),
            c_update: [0; C_LEN],
            c_insert: [0; C_LEN],
            pad: [0; PAD_LEN],
        };
        let mut table = 0;
        let mut group = None;
        let mut delete_id = 0;
        for &kind in &self.plan {
            // A new group (a run of one kind; delete and insert share one)
            // draws its table.
            let same = group == Some(kind) || (group == Some(Kind::Delete) && kind == Kind::Insert);
            if !same && !matches!(kind, Kind::Begin | Kind::Commit) {
                table = rng.uniform_i64(0, self.tables as i64 - 1) as u32;
                group = Some(kind);
            }
            let (a, b) = match kind {
                Kind::Begin | Kind::Commit => (0, 0),
                Kind::SimpleRange | Kind::SumRange | Kind::OrderRange | Kind::DistinctRange => {
                    let id = self.keys.draw(rng);
                    (id, id + RANGE_SIZE - 1)
                }
                Kind::NonIndexUpdate => {
                    digits(rng, &mut d.c_update);
                    (self.keys.draw(rng), 0)
                }
                Kind::Delete => {
                    delete_id = self.keys.draw(rng);
                    (delete_id, 0)
                }
                Kind::Insert | Kind::InsertAuto => {
                    let k = self.keys.draw(rng);
                    digits(rng, &mut d.c_insert);
                    digits(rng, &mut d.pad);
                    (delete_id, k)
                }
                _ => (self.keys.draw(rng), 0),
            };
            d.steps.push(Step { kind, table, a, b });
        }
        d
    }
}

pub struct OltpClient {
    conn: PgConn,
    times: StatementTimes,
}

#[derive(Debug)]
pub enum OltpError {
    Sql(SqlError),
    Pg(PgError),
}

impl fmt::Display for OltpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OltpError::Sql(e) => e.fmt(f),
            OltpError::Pg(e) => e.fmt(f),
        }
    }
}

impl From<PgError> for OltpError {
    fn from(e: PgError) -> Self {
        OltpError::Pg(e)
    }
}

impl Protocol for OltpProtocol {
    type Client = OltpClient;
    type Request = Draws;
    type Error = OltpError;
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

    fn take_operations(&self, client: &mut OltpClient, record: impl FnMut(usize, u64)) {
        client.times.take(record);
    }

    async fn connect(&self, _client: u32) -> Result<OltpClient, OltpError> {
        let mut conn = PgConn::connect(&self.info).await?;
        conn.put_parse("begin", "BEGIN");
        conn.put_parse("commit", "COMMIT");
        let kinds = self.events.kinds();
        for table in 0..self.events.tables {
            for &kind in &kinds {
                conn.put_parse(self.name(kind, table), &kind.sql(table + 1));
            }
        }
        conn.put_sync();
        if let Some(err) = conn.round_trip().await? {
            return Err(OltpError::Pg(PgError::Connect(format!(
                "preparing the {} statements failed: {err} (are sbtest1..{} loaded?)",
                self.events.script.name(),
                self.events.tables
            ))));
        }
        Ok(OltpClient {
            conn,
            times: StatementTimes::new(self.events.plan.len()),
        })
    }

    fn socket(&self, client: &OltpClient) -> Option<RawFd> {
        Some(client.conn.raw_fd())
    }

    fn server_pid(&self, client: &OltpClient) -> Option<u32> {
        client.conn.local_backend_pid()
    }

    // A OltpClient is a PgConn (a socket and its buffers once it has left its
    // thread) and owned buffers: nothing tied to a thread.
    const MIGRATES: bool = true;

    fn leave_thread(&self, client: &mut OltpClient) {
        client.conn.leave_thread();
    }

    fn join_thread(&self, client: &mut OltpClient, ring: Option<&Rc<Ring>>) -> Result<(), String> {
        client.conn.join_thread(ring).map_err(|e| e.to_string())
    }

    fn next_transaction(&self, _client: &mut OltpClient, rng: &mut Prng) -> (TxType, Draws) {
        (0, self.draw(rng))
    }

    async fn execute(
        &self,
        client: &mut OltpClient,
        _tx: TxType,
        d: &Draws,
    ) -> Result<(), OltpError> {
        let conn = &mut client.conn;
        client.times.start();
        for st in &d.steps {
            let name = self.name(st.kind, st.table);
            let (a, b) = (Param::Int(st.a), Param::Int(st.b));
            match st.kind {
                Kind::Begin | Kind::Commit => conn.put_bind(name, &[]),
                Kind::SimpleRange | Kind::SumRange | Kind::OrderRange | Kind::DistinctRange => {
                    conn.put_bind(name, &[a, b])
                }
                Kind::NonIndexUpdate => conn.put_bind(name, &[Param::Text(&d.c_update), a]),
                Kind::Insert => {
                    conn.put_bind(name, &[a, b, Param::Text(&d.c_insert), Param::Text(&d.pad)])
                }
                Kind::InsertAuto => {
                    conn.put_bind(name, &[b, Param::Text(&d.c_insert), Param::Text(&d.pad)])
                }
                _ => conn.put_bind(name, &[a]),
            }
            conn.put_execute();
            conn.put_sync();
            if let Some(err) = conn.round_trip().await? {
                if conn.tx_status != b'I' {
                    conn.put_query("ROLLBACK");
                    conn.round_trip().await?;
                }
                return Err(OltpError::Sql(err));
            }
            client.times.answered(st.kind);
        }
        Ok(())
    }

    fn classify(&self, error: &OltpError) -> ErrorClass {
        match error {
            // sysbench's pgsql driver restarts the event on a duplicate key too.
            OltpError::Sql(e) if &e.sqlstate == b"23505" => ErrorClass::Retryable {
                kind: "23505".into(),
            },
            OltpError::Sql(e) => e.error_class(),
            OltpError::Pg(_) => ErrorClass::Fatal,
        }
    }

    fn use_ring(&self, client: &mut OltpClient, ring: &Rc<Ring>) -> Result<(), String> {
        client
            .conn
            .use_ring(ring.clone())
            .map_err(|e| e.to_string())
    }

    fn close(&self, mut client: OltpClient) {
        client.conn.terminate();
    }
}

#[cfg(test)]
mod tests;
