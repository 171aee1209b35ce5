//! YCSB's core workloads A-F (Cooper et al., SoCC 2010; the CoreWorkload of
//! brianfrankcooper/YCSB and pingcap/go-ycsb) on PostgreSQL (`pg`) and on
//! MySQL/MariaDB (`mysql`), as protocols of the load harness, and their
//! table's load (`load`).
//!
//! One transaction is one YCSB operation, and the harness keeps one latency
//! histogram per operation type: read (all fields of one row), update (one
//! field of one row, `writeallfields=false`), insert (a new row of every
//! field), scan (all fields of up to `max_scan_length` rows from a key, in
//! key order; the length uniform from 1) and read-modify-write (a read, then
//! an update of the same row, each its own statement, as YCSB runs them).
//! The table is YCSB's `usertable` (YCSB_KEY VARCHAR(64) PRIMARY KEY,
//! FIELD0..FIELDn VARCHAR(field_length)), its keys and values those of
//! `gen`: go-ycsb can run on a table loaded here, and this on go-ycsb's.
//!
//! Inserts take the next key number from a counter all clients share (YCSB's
//! `transactioninsertkeysequence`); a key counts as inserted, for the key
//! choosers, once it and every key before it was acknowledged (its insert
//! answered), as YCSB's acknowledged counter does.

pub mod gen;
pub mod load;
pub mod mysql;
pub mod pg;

pub use gen::{Distribution, KeyChooser};

use crate::error::EngineError;
use crate::harness::registry::{self, Loaded, Params, Running, Workload};
use crate::harness::HarnessConfig;
use crate::random::Prng;
use std::collections::BTreeSet;
use std::str::FromStr;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

/// ycsb on the harness (`harness::registry`): `ycsb_run(conninfo, server,
/// workload, record_count, operation_count, distribution, field_count,
/// field_length, max_scan_length, <harness>)` and `ycsb_load(conninfo,
/// server, record_count, field_count, field_length, workers, seed)`.
pub static WORKLOAD: Workload = Workload {
    name: "ycsb",
    run,
    load: Some(load_data),
};

/// The run's settings from Python's: the letter's, with the distribution
/// and the longest scan when given.
fn config(p: &Params) -> Result<Config, EngineError> {
    let mut workload: CoreWorkload = p.parse("workload")?;
    if p.str("distribution").is_ok() {
        workload.distribution = p.parse("distribution")?;
    }
    workload.max_scan_length = p.int_or("max_scan_length", workload.max_scan_length)?;
    let operations: i64 = p.int_or("operation_count", 0)?;
    Ok(Config {
        workload,
        record_count: p.int("record_count")?,
        operation_count: (operations > 0).then_some(operations as u64),
        field_count: p.int_or("field_count", 10)?,
        field_length: p.int_or("field_length", 100)?,
    })
}

fn run(
    conninfo: &str,
    p: &Params,
    cfg: HarnessConfig,
    gated: bool,
) -> Result<Box<dyn Running>, EngineError> {
    let draws = Draws::new(config(p)?)?;
    match p.parse::<load::Server>("server")? {
        load::Server::Postgres => {
            registry::start(cfg, pg::YcsbPgProtocol::new(conninfo, draws)?, gated)
        }
        load::Server::Mysql => {
            registry::start(cfg, mysql::YcsbMysqlProtocol::new(conninfo, draws)?, gated)
        }
    }
}

fn load_data(
    conninfo: &str,
    p: &Params,
    abort: &AtomicBool,
    on_step: &mut dyn FnMut(&str),
) -> Result<Loaded, EngineError> {
    let cfg = load::LoadConfig {
        conninfo: conninfo.to_string(),
        server: p.parse("server")?,
        record_count: p.int("record_count")?,
        field_count: p.int_or("field_count", 10)?,
        field_length: p.int_or("field_length", 100)?,
        workers: p.int_or("workers", 2)?,
        seed: p.int_or("seed", 0)?,
    };
    let report = load::load(&cfg, abort, on_step)?;
    Ok(Loaded {
        steps: report.steps,
        rows: report.rows,
    })
}

/// The operation types, as the harness names their histograms (TxType is
/// the index).
pub const OPERATIONS: [&str; 5] = ["read", "update", "insert", "scan", "read_modify_write"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Op {
    Read = 0,
    Update = 1,
    Insert = 2,
    Scan = 3,
    ReadModifyWrite = 4,
}

impl Op {
    const ALL: [Op; 5] = [
        Op::Read,
        Op::Update,
        Op::Insert,
        Op::Scan,
        Op::ReadModifyWrite,
    ];
}

/// YCSB's scan lengths are uniform on 1..=maxscanlength; its default.
pub const MAX_SCAN_LENGTH: u32 = 1000;

/// One of YCSB's core workloads (workloads/workloada..f): its operation
/// mix (proportions in `OPERATIONS` order), its request distribution and
/// its longest scan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoreWorkload {
    pub letter: char,
    pub mix: [f64; 5],
    pub distribution: Distribution,
    pub max_scan_length: u32,
}

impl CoreWorkload {
    pub const LETTERS: &'static str = "abcdef";

    /// Workload A "update heavy", B "read mostly", C "read only", D "read
    /// latest", E "short ranges", F "read-modify-write".
    pub fn letter(letter: char) -> Option<CoreWorkload> {
        use Distribution::*;
        let (mix, distribution, max_scan_length) = match letter {
            'a' => ([0.5, 0.5, 0.0, 0.0, 0.0], Zipfian, MAX_SCAN_LENGTH),
            'b' => ([0.95, 0.05, 0.0, 0.0, 0.0], Zipfian, MAX_SCAN_LENGTH),
            'c' => ([1.0, 0.0, 0.0, 0.0, 0.0], Zipfian, MAX_SCAN_LENGTH),
            'd' => ([0.95, 0.0, 0.05, 0.0, 0.0], Latest, MAX_SCAN_LENGTH),
            'e' => ([0.0, 0.0, 0.05, 0.95, 0.0], Zipfian, 100),
            'f' => ([0.5, 0.0, 0.0, 0.0, 0.5], Zipfian, MAX_SCAN_LENGTH),
            _ => return None,
        };
        Some(CoreWorkload {
            letter,
            mix,
            distribution,
            max_scan_length,
        })
    }

    /// Whether every operation only reads.
    pub fn read_only(&self) -> bool {
        self.mix[Op::Update as usize] == 0.0
            && self.mix[Op::Insert as usize] == 0.0
            && self.mix[Op::ReadModifyWrite as usize] == 0.0
    }

    pub fn uses(&self, op: Op) -> bool {
        self.mix[op as usize] > 0.0
    }
}

impl FromStr for CoreWorkload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut chars = s.chars();
        match (chars.next().map(|c| c.to_ascii_lowercase()), chars.next()) {
            (Some(c), None) => CoreWorkload::letter(c),
            _ => None,
        }
        .ok_or_else(|| {
            format!("workload {s:?} is not one of YCSB's core workloads; allowed: a, b, c, d, e, f")
        })
    }
}

/// The settings of a YCSB run on either server.
#[derive(Debug, Clone)]
pub struct Config {
    pub workload: CoreWorkload,
    /// Rows in the table before the run: key numbers 0..record_count.
    pub record_count: i64,
    /// Operations the run expects, when it is counted rather than timed
    /// (the zipfian's key range covers twice its expected inserts, YCSB's rule).
    pub operation_count: Option<u64>,
    pub field_count: u32,
    pub field_length: u32,
}

impl Config {
    pub fn check(&self) -> Result<(), EngineError> {
        let bad = |m: String| Err(EngineError::Config(m));
        if self.record_count < 1 {
            return bad(format!(
                "record_count {} must be at least 1",
                self.record_count
            ));
        }
        if self.field_count < 1 || self.field_count > 1000 {
            return bad(format!("field_count {} must be 1..1000", self.field_count));
        }
        if self.field_length < 1 || self.field_length > 65_000 {
            return bad(format!(
                "field_length {} must be 1..65000",
                self.field_length
            ));
        }
        if self.workload.max_scan_length < 1 {
            return bad("max_scan_length must be at least 1".into());
        }
        Ok(())
    }

    /// The columns after YCSB_KEY: FIELD0, FIELD1, ...
    pub fn fields(&self) -> Vec<String> {
        (0..self.field_count).map(|i| format!("FIELD{i}")).collect()
    }
}

/// One operation's draws, reused by every retry: its key number, the field
/// an update writes, a scan's length, and the seed of the values it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub op: Op,
    pub key: i64,
    pub field: u32,
    pub scan_length: u32,
    pub value_seed: u64,
}

/// YCSB's acknowledged counter: the next key number to insert, and the
/// newest key number below which every insert has been answered.
#[derive(Debug)]
pub struct InsertKeys {
    next: AtomicI64,
    newest: AtomicI64,
    /// Answered key numbers past `newest` (waiting for an earlier one).
    pending: Mutex<BTreeSet<i64>>,
}

impl InsertKeys {
    pub fn new(first: i64) -> InsertKeys {
        InsertKeys {
            next: AtomicI64::new(first),
            newest: AtomicI64::new(first - 1),
            pending: Mutex::new(BTreeSet::new()),
        }
    }

    pub fn take(&self) -> i64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    #[inline]
    pub fn newest(&self) -> i64 {
        self.newest.load(Ordering::Acquire)
    }

    /// Key `key`'s insert was answered (committed or not: YCSB acknowledges
    /// either way, so that one failure does not stall the choosers).
    pub fn acknowledge(&self, key: i64) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let mut newest = self.newest.load(Ordering::Relaxed);
        if key <= newest {
            return; // a retry's
        }
        pending.insert(key);
        while pending.first() == Some(&(newest + 1)) {
            pending.pop_first();
            newest += 1;
        }
        self.newest.store(newest, Ordering::Release);
    }
}

/// What both servers' protocols draw from: the mix, the key chooser (each
/// client clones it), the insert counter.
#[derive(Debug)]
pub struct Draws {
    pub config: Config,
    /// Cumulative proportions, in `OPERATIONS` order, summing to 1.
    cumulative: [f64; 5],
    chooser: KeyChooser,
    pub inserts: InsertKeys,
}

impl Draws {
    pub fn new(config: Config) -> Result<Draws, EngineError> {
        config.check()?;
        let w = &config.workload;
        let total: f64 = w.mix.iter().sum();
        if total.is_nan() || total <= 0.0 {
            return Err(EngineError::Config("the operation mix is empty".into()));
        }
        let mut cumulative = [0.0; 5];
        let mut sum = 0.0;
        for (c, p) in cumulative.iter_mut().zip(w.mix) {
            sum += p / total;
            *c = sum;
        }
        let expected = config.operation_count.map_or(0, |n| {
            (n as f64 * w.mix[Op::Insert as usize] / total * 2.0) as i64
        });
        let chooser = KeyChooser::new(w.distribution, config.record_count, expected);
        Ok(Draws {
            inserts: InsertKeys::new(config.record_count),
            cumulative,
            chooser,
            config,
        })
    }

    /// A client's own key chooser.
    pub fn chooser(&self) -> KeyChooser {
        self.chooser.clone()
    }

    /// The next operation, drawn from `rng` with the client's `chooser`.
    #[inline]
    pub fn draw(&self, chooser: &mut KeyChooser, rng: &mut Prng) -> Request {
        let u = rng.next_f64();
        let op = Op::ALL[self.cumulative.iter().position(|&c| u < c).unwrap_or(4)];
        let key = match op {
            Op::Insert => self.inserts.take(),
            _ => chooser.next(rng, self.inserts.newest()),
        };
        let (field, scan_length) = match op {
            Op::Update | Op::ReadModifyWrite => (
                rng.uniform_i64(0, self.config.field_count as i64 - 1) as u32,
                0,
            ),
            Op::Scan => (
                0,
                rng.uniform_i64(1, self.config.workload.max_scan_length as i64) as u32,
            ),
            _ => (0, 0),
        };
        Request {
            op,
            key,
            field,
            scan_length,
            value_seed: rng.next_u64(),
        }
    }

    /// The request's key, into `key`; the values it writes (one field for an
    /// update, every field for an insert) one after the other into `values`.
    pub fn fill(&self, request: &Request, key: &mut Vec<u8>, values: &mut Vec<u8>) {
        gen::key_name(request.key, key);
        values.clear();
        let len = self.config.field_length as usize;
        let fields = match request.op {
            Op::Update | Op::ReadModifyWrite => 1,
            Op::Insert => self.config.field_count as usize,
            _ => return,
        };
        let mut rng = Prng::seeded(request.value_seed);
        gen::value(&mut rng, len * fields, values);
    }
}

/// Which of the client's statements a prepared text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    Read,
    Scan,
    Insert,
    /// The update of field i.
    Update(usize),
}

/// What a failed preparation says, on either server.
pub fn prepare_failed(config: &Config, err: impl std::fmt::Display) -> String {
    format!(
        "preparing YCSB's statements failed: {err} (is usertable loaded, with {} fields?)",
        config.field_count
    )
}

/// SQL of both servers (`$n` or `?` placeholders).
pub struct Sql {
    pub read: String,
    pub scan: String,
    pub insert: String,
    /// One per field: SET FIELDi = ...
    pub update: Vec<String>,
}

impl Sql {
    /// The statements workload `w` runs, in the order both drivers prepare
    /// them: the read (read-modify-write reads too), the scan, the insert,
    /// one update per field (read-modify-write updates too).
    pub fn used(&self, w: &CoreWorkload) -> Vec<(Slot, &str)> {
        let mut out = Vec::new();
        if w.uses(Op::Read) || w.uses(Op::ReadModifyWrite) {
            out.push((Slot::Read, self.read.as_str()));
        }
        if w.uses(Op::Scan) {
            out.push((Slot::Scan, self.scan.as_str()));
        }
        if w.uses(Op::Insert) {
            out.push((Slot::Insert, self.insert.as_str()));
        }
        if w.uses(Op::Update) || w.uses(Op::ReadModifyWrite) {
            out.extend(
                self.update
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (Slot::Update(i), t.as_str())),
            );
        }
        out
    }

    pub fn new(config: &Config, postgres: bool) -> Sql {
        let fields = config.fields();
        let p = |n: usize| {
            if postgres {
                format!("${n}")
            } else {
                "?".into()
            }
        };
        let list = fields.join(", ");
        let marks: Vec<String> = (1..=fields.len() + 1).map(p).collect();
        let insert = format!(
            "INSERT {}INTO usertable (YCSB_KEY, {list}) VALUES ({}){}",
            if postgres { "" } else { "IGNORE " },
            marks.join(", "),
            if postgres {
                " ON CONFLICT DO NOTHING"
            } else {
                ""
            }
        );
        Sql {
            read: format!("SELECT {list} FROM usertable WHERE YCSB_KEY = {}", p(1)),
            scan: format!(
                "SELECT {list} FROM usertable WHERE YCSB_KEY >= {} ORDER BY YCSB_KEY LIMIT {}",
                p(1),
                p(2)
            ),
            insert,
            update: fields
                .iter()
                .map(|f| {
                    format!(
                        "UPDATE usertable SET {f} = {} WHERE YCSB_KEY = {}",
                        p(1),
                        p(2)
                    )
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(letter: char) -> Config {
        Config {
            workload: CoreWorkload::letter(letter).unwrap(),
            record_count: 1000,
            operation_count: None,
            field_count: 10,
            field_length: 100,
        }
    }

    #[test]
    fn letters_are_ycsbs_core_workloads() {
        assert!("abcdef".chars().all(|c| CoreWorkload::letter(c).is_some()));
        assert_eq!("A".parse::<CoreWorkload>().unwrap().letter, 'a');
        for bad in ["g", "", "ab", "workloada"] {
            let e = bad.parse::<CoreWorkload>().unwrap_err();
            assert!(e.contains("allowed: a, b, c, d, e, f"), "{e}");
        }
        let d = CoreWorkload::letter('d').unwrap();
        assert_eq!(d.distribution, Distribution::Latest);
        let e = CoreWorkload::letter('e').unwrap();
        assert_eq!((e.max_scan_length, e.uses(Op::Scan)), (100, true));
        assert!(CoreWorkload::letter('c').unwrap().read_only());
        assert!(!CoreWorkload::letter('f').unwrap().read_only());
    }

    #[test]
    fn the_mix_is_the_workloads() {
        for letter in CoreWorkload::LETTERS.chars() {
            let d = Draws::new(config(letter)).unwrap();
            let mut chooser = d.chooser();
            let mut rng = Prng::seeded(4);
            let mut counts = [0f64; 5];
            let n = 100_000;
            for _ in 0..n {
                let r = d.draw(&mut chooser, &mut rng);
                counts[r.op as usize] += 1.0;
                if r.op == Op::Insert {
                    d.inserts.acknowledge(r.key);
                }
                if r.op == Op::Scan {
                    assert!((1..=100).contains(&r.scan_length));
                }
                assert!(r.field < 10);
            }
            let want = d.config.workload.mix;
            for (got, want) in counts.iter().zip(want) {
                assert!((got / n as f64 - want).abs() < 0.01, "{letter}: {counts:?}");
            }
        }
    }

    #[test]
    fn inserts_take_new_keys_and_count_once_acknowledged_in_order() {
        let keys = InsertKeys::new(100);
        assert_eq!(keys.newest(), 99);
        let (a, b, c) = (keys.take(), keys.take(), keys.take());
        assert_eq!((a, b, c), (100, 101, 102));
        keys.acknowledge(b);
        assert_eq!(keys.newest(), 99); // 100 not yet answered
        keys.acknowledge(a);
        assert_eq!(keys.newest(), 101);
        keys.acknowledge(a); // a retry's answer
        keys.acknowledge(c);
        assert_eq!(keys.newest(), 102);
    }

    #[test]
    fn bad_settings_are_config_errors() {
        type Spoil = fn(&mut Config);
        let cases: [(Spoil, &str); 3] = [
            (|c| c.record_count = 0, "record_count"),
            (|c| c.field_count = 0, "field_count"),
            (|c| c.field_length = 0, "field_length"),
        ];
        for (f, what) in cases {
            let mut c = config('a');
            f(&mut c);
            match Draws::new(c) {
                Err(EngineError::Config(m)) => assert!(m.contains(what), "{m}"),
                other => panic!("{other:?}"),
            }
        }
        assert!("pareto".parse::<Distribution>().is_err());
    }

    #[test]
    fn values_are_drawn_again_alike_for_a_retry() {
        let d = Draws::new(config('d')).unwrap();
        let mut chooser = d.chooser();
        let mut rng = Prng::seeded(8);
        let r = loop {
            let r = d.draw(&mut chooser, &mut rng);
            if r.op == Op::Insert {
                break r;
            }
        };
        let (mut k1, mut v1, mut k2, mut v2) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        d.fill(&r, &mut k1, &mut v1);
        d.fill(&r, &mut k2, &mut v2);
        assert_eq!((k1.clone(), v1.len()), (k2, 1000));
        assert_eq!(v1, v2);
        assert!(k1.starts_with(b"user"));
    }

    #[test]
    fn sql_names_ycsbs_columns_in_each_dialect() {
        let c = config('a');
        let pg = Sql::new(&c, true);
        assert_eq!(
            pg.read,
            "SELECT FIELD0, FIELD1, FIELD2, FIELD3, FIELD4, FIELD5, FIELD6, FIELD7, FIELD8, \
             FIELD9 FROM usertable WHERE YCSB_KEY = $1"
        );
        assert!(
            pg.insert.ends_with("$11) ON CONFLICT DO NOTHING"),
            "{}",
            pg.insert
        );
        assert_eq!(
            pg.update[3],
            "UPDATE usertable SET FIELD3 = $1 WHERE YCSB_KEY = $2"
        );
        assert!(pg.scan.ends_with(">= $1 ORDER BY YCSB_KEY LIMIT $2"));
        let my = Sql::new(&c, false);
        assert!(my
            .insert
            .starts_with("INSERT IGNORE INTO usertable (YCSB_KEY, FIELD0"));
        assert_eq!(
            my.update[0],
            "UPDATE usertable SET FIELD0 = ? WHERE YCSB_KEY = ?"
        );
    }
}
