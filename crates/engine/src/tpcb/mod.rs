//! The TPC-B-like workload of pgbench: its three built-in scripts, its data
//! set (`load`), and its protocol for the load harness (`protocol`).
//!
//! Statements and random draws follow pgbench's built-in scripts
//! (`pgbench --show-script=tpcb-like`, PostgreSQL 15): per transaction
//! `aid = random(1, 100000 * scale)`, `bid = random(1, scale)`,
//! `tid = random(1, 10 * scale)`, `delta = random(-5000, 5000)`, drawn in that
//! order, uniform and inclusive.

pub mod load;
pub mod protocol;

pub use protocol::TpcbProtocol;

use crate::error::EngineError;
use crate::harness::registry::{self, Loaded, Params, Running, Workload};
use crate::harness::HarnessConfig;
use crate::random::Prng;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::AtomicBool;

/// tpcb on the harness (`harness::registry`): `tpcb_run(conninfo, script,
/// scale, protocol, <harness>)` and `tpcb_load(conninfo, scale, fillfactor)`.
pub static WORKLOAD: Workload = Workload {
    name: "tpcb",
    run,
    load: Some(load_data),
};

fn run(
    conninfo: &str,
    p: &Params,
    cfg: HarnessConfig,
    gated: bool,
) -> Result<Box<dyn Running>, EngineError> {
    let protocol = TpcbProtocol::new(
        conninfo,
        p.parse("script")?,
        p.int("scale")?,
        p.parse("protocol")?,
    )?;
    registry::start(cfg, protocol, gated)
}

fn load_data(
    conninfo: &str,
    p: &Params,
    abort: &AtomicBool,
    on_step: &mut dyn FnMut(&str),
) -> Result<Loaded, EngineError> {
    let cfg = load::LoadConfig {
        conninfo: conninfo.to_string(),
        scale: p.int("scale")?,
        fillfactor: p.int_or("fillfactor", 100)?,
    };
    let report = load::load(&cfg, abort, on_step)?;
    Ok(Loaded {
        steps: report.steps,
        rows: report.rows,
    })
}

/// Rows per scale unit, as in pgbench.c (`nbranches`, `ntellers`, `naccounts`).
pub const BRANCHES_PER_SCALE: i64 = 1;
pub const TELLERS_PER_SCALE: i64 = 10;
pub const ACCOUNTS_PER_SCALE: i64 = 100_000;
/// From this scale on pgbench stores aid as bigint (SCALE_32BIT_THRESHOLD).
pub const SCALE_BIGINT_THRESHOLD: u32 = 20_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    TpcbLike,
    SimpleUpdate,
    SelectOnly,
}

impl Script {
    pub const NAMES: [&'static str; 3] = ["tpcb-like", "simple-update", "select-only"];

    pub fn name(self) -> &'static str {
        match self {
            Script::TpcbLike => "tpcb-like",
            Script::SimpleUpdate => "simple-update",
            Script::SelectOnly => "select-only",
        }
    }

    /// The script's SQL, with pgbench's `:variable` references.
    pub fn templates(self) -> &'static [&'static str] {
        const UPDATE_ACCOUNTS: &str =
            "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;";
        const SELECT_ACCOUNT: &str = "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;";
        const INSERT_HISTORY: &str = "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) \
             VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);";
        match self {
            Script::TpcbLike => &[
                "BEGIN;",
                UPDATE_ACCOUNTS,
                SELECT_ACCOUNT,
                "UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;",
                "UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;",
                INSERT_HISTORY,
                "END;",
            ],
            Script::SimpleUpdate => &[
                "BEGIN;",
                UPDATE_ACCOUNTS,
                SELECT_ACCOUNT,
                INSERT_HISTORY,
                "END;",
            ],
            Script::SelectOnly => &[SELECT_ACCOUNT],
        }
    }
}

impl FromStr for Script {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tpcb-like" => Ok(Script::TpcbLike),
            "simple-update" => Ok(Script::SimpleUpdate),
            "select-only" => Ok(Script::SelectOnly),
            other => Err(format!(
                "script {other:?} is not built in; allowed: {}",
                Script::NAMES.join(", ")
            )),
        }
    }
}

/// How statements travel, as pgbench's `--protocol` (its `QueryMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryMode {
    /// Query messages with values written into the text.
    Simple,
    /// Parse of an unnamed statement + Bind + Execute + Sync for each statement.
    Extended,
    /// Named statements parsed once per connection, then Bind + Execute + Sync.
    Prepared,
}

impl FromStr for QueryMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "simple" => Ok(QueryMode::Simple),
            "extended" => Ok(QueryMode::Extended),
            "prepared" => Ok(QueryMode::Prepared),
            other => Err(format!(
                "protocol {other:?} is unknown; allowed: simple, extended, prepared"
            )),
        }
    }
}

impl fmt::Display for QueryMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QueryMode::Simple => "simple",
            QueryMode::Extended => "extended",
            QueryMode::Prepared => "prepared",
        })
    }
}

/// The script variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    Aid,
    Bid,
    Tid,
    Delta,
}

impl Var {
    fn named(name: &str) -> Option<Var> {
        match name {
            "aid" => Some(Var::Aid),
            "bid" => Some(Var::Bid),
            "tid" => Some(Var::Tid),
            "delta" => Some(Var::Delta),
            _ => None,
        }
    }
}

/// One transaction's draws.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Draws {
    pub aid: i64,
    pub bid: i64,
    pub tid: i64,
    pub delta: i64,
}

impl Draws {
    /// Draw as the script's `\set` lines do, in their order.
    pub fn draw(script: Script, scale: u32, rng: &mut Prng) -> Draws {
        let scale = scale as i64;
        let aid = rng.uniform_i64(1, ACCOUNTS_PER_SCALE * scale);
        if script == Script::SelectOnly {
            return Draws {
                aid,
                ..Draws::default()
            };
        }
        let bid = rng.uniform_i64(1, BRANCHES_PER_SCALE * scale);
        let tid = rng.uniform_i64(1, TELLERS_PER_SCALE * scale);
        let delta = rng.uniform_i64(-5000, 5000);
        Draws {
            aid,
            bid,
            tid,
            delta,
        }
    }

    #[inline]
    pub fn get(&self, var: Var) -> i64 {
        match var {
            Var::Aid => self.aid,
            Var::Bid => self.bid,
            Var::Tid => self.tid,
            Var::Delta => self.delta,
        }
    }
}

/// A piece of a statement for the simple protocol: text, or a variable.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    Value(Var),
}

/// A statement ready for each protocol.
#[derive(Debug, Clone)]
pub struct Statement {
    /// With `$1..$n` in place of variables, numbered by first appearance (as
    /// pgbench numbers them).
    pub positional_sql: String,
    /// The variable bound to each `$n`.
    pub params: Vec<Var>,
    /// For the simple protocol: text and values in order.
    pub pieces: Vec<Piece>,
    /// Prepared statement name, "P_<command number>" as pgbench names them.
    pub prepared_name: String,
}

impl Statement {
    pub fn compile(template: &str, index: usize) -> Statement {
        let mut positional_sql = String::new();
        let mut params: Vec<Var> = Vec::new();
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut rest = template;
        while let Some(colon) = rest.find(':') {
            let after = &rest[colon + 1..];
            let name_len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            match Var::named(&after[..name_len]) {
                Some(var) => {
                    text.push_str(&rest[..colon]);
                    positional_sql.push_str(&rest[..colon]);
                    let number = match params.iter().position(|&p| p == var) {
                        Some(i) => i + 1,
                        None => {
                            params.push(var);
                            params.len()
                        }
                    };
                    positional_sql.push_str(&format!("${number}"));
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                    pieces.push(Piece::Value(var));
                    rest = &after[name_len..];
                }
                None => {
                    text.push_str(&rest[..=colon]);
                    positional_sql.push_str(&rest[..=colon]);
                    rest = after;
                }
            }
        }
        text.push_str(rest);
        positional_sql.push_str(rest);
        pieces.push(Piece::Text(text));
        pieces.retain(|p| !matches!(p, Piece::Text(t) if t.is_empty()));
        Statement {
            positional_sql,
            params,
            pieces,
            prepared_name: format!("P_{index}"),
        }
    }

    /// The statement text with values written in, as pgbench's simple protocol sends it.
    pub fn write_simple(&self, draws: &Draws, out: &mut Vec<u8>) {
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.extend_from_slice(t.as_bytes()),
                Piece::Value(v) => {
                    crate::pg::write_i64(out, draws.get(*v));
                }
            }
        }
    }
}

pub fn compile_script(script: Script) -> Vec<Statement> {
    script
        .templates()
        .iter()
        .enumerate()
        .map(|(i, t)| Statement::compile(t, i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positional_parameters_are_numbered_by_first_appearance() {
        let s = compile_script(Script::TpcbLike);
        assert_eq!(s.len(), 7);
        assert_eq!(
            s[1].positional_sql,
            "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;"
        );
        assert_eq!(s[1].params, vec![Var::Delta, Var::Aid]);
        assert_eq!(
            s[5].positional_sql,
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP);"
        );
        assert_eq!(s[5].params, vec![Var::Tid, Var::Bid, Var::Aid, Var::Delta]);
        assert_eq!(s[0].params, vec![]);
        assert_eq!(s[6].prepared_name, "P_6");
    }

    #[test]
    fn simple_protocol_text_has_values_in_place() {
        let s = compile_script(Script::TpcbLike);
        let draws = Draws {
            aid: 42,
            bid: 1,
            tid: 7,
            delta: -300,
        };
        let mut out = Vec::new();
        s[1].write_simple(&draws, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "UPDATE pgbench_accounts SET abalance = abalance + -300 WHERE aid = 42;"
        );
    }

    #[test]
    fn draws_stay_in_the_scale_ranges() {
        let mut rng = Prng::seeded(9);
        for _ in 0..10_000 {
            let d = Draws::draw(Script::TpcbLike, 3, &mut rng);
            assert!((1..=300_000).contains(&d.aid));
            assert!((1..=3).contains(&d.bid));
            assert!((1..=30).contains(&d.tid));
            assert!((-5000..=5000).contains(&d.delta));
        }
        let d = Draws::draw(Script::SelectOnly, 1, &mut rng);
        assert_eq!((d.bid, d.tid, d.delta), (0, 0, 0));
    }

    #[test]
    fn names_parse_and_unknown_names_say_what_is_allowed() {
        assert_eq!("select-only".parse::<Script>().unwrap(), Script::SelectOnly);
        assert!("tpcc".parse::<Script>().unwrap_err().contains("tpcb-like"));
        assert_eq!(
            "prepared".parse::<QueryMode>().unwrap(),
            QueryMode::Prepared
        );
        assert!("binary".parse::<QueryMode>().is_err());
    }
}
