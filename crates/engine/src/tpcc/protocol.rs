//! TPC-C's five transactions (clause 2.4 to 2.8) on PostgreSQL, as a
//! protocol of the load harness.
//!
//! Two modes. `Statements`: the transactions' SQL, each statement prepared
//! once per connection; statements that do not depend on each other's
//! results travel in one pipeline (Bind/Execute ..., one Sync), and the
//! New-Order's items are batched (`= ANY(array)`, `unnest`), so a New-Order
//! is two round trips, a Payment by id one, a Delivery three. `Procedures`:
//! one `SELECT tpcc_xxx(...)` per transaction, to the PL/pgSQL functions
//! whose signatures `PROCEDURES.md` states.
//!
//! Draws follow clause 2.4.1, 2.5.1, 2.6.1, 2.7.1 and 2.8.1; the type comes
//! from a per-client deck of 23 cards (10 New-Order, 10 Payment, one of
//! each other) or from given weights. A New-Order whose last item is the
//! unused id 100001 (1%) is the type "new_order_rollback": its rollback is
//! the expected outcome and counts as committed.

use super::gen::nurand;
use super::{DISTRICTS_PER_WAREHOUSE, ITEMS};
use crate::harness::{EngineError, ErrorClass, Protocol, TxType};
use crate::pg::{write_fixed, write_i64, ConnInfo, Param, PgConn, PgError, Rows, SqlError};
use crate::random::Prng;
use crate::uring::Ring;
use std::fmt;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::str::FromStr;
use std::time::Duration;

/// The transaction types, in the order of `DriverResult.by_type`.
pub const TYPES: [&str; 6] = [
    "new_order",
    "new_order_rollback",
    "payment",
    "order_status",
    "delivery",
    "stock_level",
];
pub const NEW_ORDER: TxType = 0;
pub const NEW_ORDER_ROLLBACK: TxType = 1;
pub const PAYMENT: TxType = 2;
pub const ORDER_STATUS: TxType = 3;
pub const DELIVERY: TxType = 4;
pub const STOCK_LEVEL: TxType = 5;

/// The item id no item has: the last item of a rolled-back New-Order.
pub const UNUSED_ITEM: i64 = ITEMS + 1;

/// Keying times (clause 5.2.5.7) and mean think times (5.2.5.4), seconds,
/// per type (the rollback New-Order as the New-Order).
const KEYING_S: [f64; 6] = [18.0, 18.0, 3.0, 2.0, 2.0, 2.0];
const THINK_MEAN_S: [f64; 6] = [12.0, 12.0, 12.0, 10.0, 5.0, 5.0];

const SERIALIZATION_FAILURE: [u8; 5] = *b"40001";
const DEADLOCK_DETECTED: [u8; 5] = *b"40P01";
const RAISE_EXCEPTION: [u8; 5] = *b"P0001";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Statements,
    Procedures,
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "statements" => Ok(Mode::Statements),
            "procedures" => Ok(Mode::Procedures),
            other => Err(format!(
                "mode {other:?} is unknown; allowed: statements, procedures"
            )),
        }
    }
}

/// The run's C constants (clause 2.1.6): for NURand(255, 0, 999) of last
/// names, NURand(1023, 1, 3000) of customer ids and NURand(8191, 1, 100000)
/// of item ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Constants {
    pub c_last: i64,
    pub c_id: i64,
    pub ol_i_id: i64,
}

#[derive(Debug, Clone)]
pub struct TpccConfig {
    pub warehouses: u32,
    pub mode: Mode,
    pub constants: Constants,
    /// Keying and think times around each transaction.
    pub keying: bool,
    /// Weights of new_order, payment, order_status, delivery, stock_level;
    /// None: the 23-card deck.
    pub weights: Option<[f64; 5]>,
}

// ---- statements ------------------------------------------------------------

/// Statement indexes (prepared as "T<index>").
mod st {
    pub const BEGIN: usize = 0;
    pub const COMMIT: usize = 1;
    pub const NO_W: usize = 2;
    pub const NO_D: usize = 3;
    pub const NO_C: usize = 4;
    pub const NO_I: usize = 5;
    pub const NO_O: usize = 6;
    pub const NO_NO: usize = 7;
    pub const P_W: usize = 8;
    pub const P_D: usize = 9;
    pub const P_CN: usize = 10;
    pub const P_C: usize = 11;
    pub const P_H: usize = 12;
    pub const OS_CN: usize = 13;
    pub const OS_C: usize = 14;
    pub const OS_O: usize = 15;
    pub const OS_OL: usize = 16;
    pub const D_NO: usize = 17;
    pub const D_O: usize = 18;
    pub const D_OL: usize = 19;
    pub const D_C: usize = 20;
    pub const SL: usize = 21;
    /// NO_S + d - 1: the stock update and order lines of district d.
    pub const NO_S: usize = 22;
    pub const COUNT: usize = 32;
}

/// Procedure calls (prepared as "T<index>" in procedures mode).
mod pr {
    pub const NEW_ORDER: usize = 0;
    pub const PAYMENT: usize = 1;
    pub const ORDER_STATUS: usize = 2;
    pub const DELIVERY: usize = 3;
    pub const STOCK_LEVEL: usize = 4;
}

const STATEMENT_NAMES: [&str; st::COUNT] = [
    "T0", "T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "T9", "T10", "T11", "T12", "T13", "T14",
    "T15", "T16", "T17", "T18", "T19", "T20", "T21", "T22", "T23", "T24", "T25", "T26", "T27",
    "T28", "T29", "T30", "T31",
];

fn statements_sql() -> Vec<String> {
    let mut sql: Vec<String> = [
        "BEGIN",
        "COMMIT",
        // New-Order
        "SELECT w_tax FROM warehouse WHERE w_id = $1",
        "UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = $1 AND d_id = $2 \
         RETURNING d_tax, d_next_o_id - 1",
        "SELECT c_discount, c_last, c_credit FROM customer \
         WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
        "SELECT i_id, i_price, i_name, i_data FROM item WHERE i_id = ANY($1::int[])",
        "INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, \
         o_all_local) VALUES ($1, $2, $3, $4, now(), NULL, $5, $6)",
        "INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES ($1, $2, $3)",
        // Payment
        "UPDATE warehouse SET w_ytd = w_ytd + $2 WHERE w_id = $1 \
         RETURNING w_name, w_street_1, w_street_2, w_city, w_state, w_zip",
        "UPDATE district SET d_ytd = d_ytd + $3 WHERE d_w_id = $1 AND d_id = $2 \
         RETURNING d_name, d_street_1, d_street_2, d_city, d_state, d_zip",
        "SELECT c_id FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3 \
         ORDER BY c_first",
        "UPDATE customer SET c_balance = c_balance - $4::numeric, \
         c_ytd_payment = c_ytd_payment + $4::numeric, c_payment_cnt = c_payment_cnt + 1, \
         c_data = CASE WHEN c_credit = 'BC' THEN left(format('%s %s %s %s %s %s | ', c_id, \
         c_d_id, c_w_id, $5::int, $6::int, $4::numeric) || c_data, 500) ELSE c_data END \
         WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3 \
         RETURNING c_first, c_middle, c_last, c_street_1, c_street_2, c_city, c_state, c_zip, \
         c_phone, c_since, c_credit, c_credit_lim, c_discount, c_balance, \
         CASE WHEN c_credit = 'BC' THEN left(c_data, 200) END",
        "INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, \
         h_data) VALUES ($1, $2, $3, $4, $5, now(), $6, \
         (SELECT w_name FROM warehouse WHERE w_id = $5) || '    ' || \
         (SELECT d_name FROM district WHERE d_w_id = $5 AND d_id = $4))",
        // Order-Status
        "SELECT c_id, c_balance, c_first, c_middle, c_last FROM customer \
         WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3 ORDER BY c_first",
        "SELECT c_balance, c_first, c_middle, c_last FROM customer \
         WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
        "SELECT o_id, o_carrier_id, o_entry_d FROM orders \
         WHERE o_w_id = $1 AND o_d_id = $2 AND o_c_id = $3 ORDER BY o_id DESC LIMIT 1",
        "SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line \
         WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = \
         (SELECT max(o_id) FROM orders WHERE o_w_id = $1 AND o_d_id = $2 AND o_c_id = $3)",
        // Delivery
        "DELETE FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 AND no_o_id = \
         (SELECT min(no_o_id) FROM new_order WHERE no_w_id = $1 AND no_d_id = $2) \
         RETURNING no_o_id",
        "UPDATE orders SET o_carrier_id = $4 WHERE o_w_id = $1 AND o_d_id = $2 AND o_id = $3 \
         RETURNING o_c_id",
        "WITH l AS (UPDATE order_line SET ol_delivery_d = now() \
         WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3 RETURNING ol_amount) \
         SELECT coalesce(sum(ol_amount), 0) FROM l",
        "UPDATE customer SET c_balance = c_balance + $4, c_delivery_cnt = c_delivery_cnt + 1 \
         WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
        // Stock-Level (the district's next order id read in the same statement)
        "SELECT count(DISTINCT s_i_id) FROM order_line JOIN stock \
         ON s_w_id = ol_w_id AND s_i_id = ol_i_id \
         WHERE ol_w_id = $1 AND ol_d_id = $2 \
         AND ol_o_id < (SELECT d_next_o_id FROM district WHERE d_w_id = $1 AND d_id = $2) \
         AND ol_o_id >= (SELECT d_next_o_id - 20 FROM district WHERE d_w_id = $1 AND d_id = $2) \
         AND s_quantity < $3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for d in 1..=DISTRICTS_PER_WAREHOUSE {
        sql.push(format!(
            "WITH u AS (SELECT * FROM unnest($4::int[], $5::int[], $6::int[], $7::int[], \
             $8::numeric[]) AS u(n, i, sw, q, amount)), \
             s AS (UPDATE stock SET s_quantity = CASE WHEN s_quantity - u.q >= 10 \
             THEN s_quantity - u.q ELSE s_quantity - u.q + 91 END, s_ytd = s_ytd + u.q, \
             s_order_cnt = s_order_cnt + 1, \
             s_remote_cnt = s_remote_cnt + CASE WHEN u.sw <> $3::int THEN 1 ELSE 0 END \
             FROM u WHERE s_i_id = u.i AND s_w_id = u.sw \
             RETURNING s_i_id, s_w_id, s_dist_{d:02} AS dist, s_quantity, s_data) \
             INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, \
             ol_supply_w_id, ol_delivery_d, ol_quantity, ol_amount, ol_dist_info) \
             SELECT $1::int, $2::int, $3::int, u.n, u.i, u.sw, NULL, u.q, u.amount, s.dist \
             FROM u JOIN s ON s.s_i_id = u.i AND s.s_w_id = u.sw"
        ));
    }
    assert_eq!(sql.len(), st::COUNT);
    sql
}

fn procedures_sql() -> Vec<String> {
    [
        "SELECT tpcc_new_order($1::int, $2::int, $3::int, $4::int, $5::int[], $6::int[], $7::int[])",
        "SELECT tpcc_payment($1::int, $2::int, $3::int, $4::int, $5::int, $6::text, $7::numeric)",
        "SELECT tpcc_order_status($1::int, $2::int, $3::int, $4::text)",
        "SELECT tpcc_delivery($1::int, $2::int)",
        "SELECT tpcc_stock_level($1::int, $2::int, $3::int)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

// ---- draws -------------------------------------------------------------------

pub const MAX_ITEMS: usize = 15;

/// One transaction's draws (clause 2.x.1); what a type does not use is 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Request {
    pub w_id: i64,
    pub d_id: i64,
    /// The customer's warehouse and district (Payment's may be remote).
    pub c_w_id: i64,
    pub c_d_id: i64,
    /// 0: the customer is chosen by last name.
    pub c_id: i64,
    /// The last name's number (0..999) when c_id is 0.
    pub c_last: i64,
    pub ol_cnt: usize,
    /// Sorted by (supply warehouse, item) so stock rows lock in one order.
    pub items: [i32; MAX_ITEMS],
    pub supply_w: [i32; MAX_ITEMS],
    pub quantities: [i32; MAX_ITEMS],
    /// Payment amount, in cents.
    pub amount_cents: i64,
    pub carrier_id: i64,
    pub threshold: i64,
}

/// A warehouse other than `home`, uniform (clause 2.4.1.5, 2.5.1.2).
fn other_warehouse(rng: &mut Prng, home: i64, warehouses: i64) -> i64 {
    if warehouses <= 1 {
        return home;
    }
    let w = rng.uniform_i64(1, warehouses - 1);
    if w >= home {
        w + 1
    } else {
        w
    }
}

impl Request {
    fn customer(&mut self, rng: &mut Prng, k: &Constants) {
        if rng.uniform_i64(1, 100) <= 60 {
            self.c_id = 0;
            self.c_last = nurand(rng, 255, 0, 999, k.c_last);
        } else {
            self.c_id = nurand(rng, 1023, 1, 3000, k.c_id);
        }
    }

    /// Draw a New-Order; true when it is to roll back.
    pub fn new_order(rng: &mut Prng, w_id: i64, warehouses: i64, k: &Constants) -> (Request, bool) {
        let mut r = Request {
            w_id,
            d_id: rng.uniform_i64(1, DISTRICTS_PER_WAREHOUSE),
            c_w_id: w_id,
            ..Request::default()
        };
        r.c_d_id = r.d_id;
        r.c_id = nurand(rng, 1023, 1, 3000, k.c_id);
        r.ol_cnt = rng.uniform_i64(5, MAX_ITEMS as i64) as usize;
        let rollback = rng.uniform_i64(1, 100) == 1;
        let mut n = 0;
        while n < r.ol_cnt {
            let item = if rollback && n == r.ol_cnt - 1 {
                UNUSED_ITEM
            } else {
                nurand(rng, 8191, 1, ITEMS, k.ol_i_id)
            };
            let supply = if rng.uniform_i64(1, 100) > 1 {
                w_id
            } else {
                other_warehouse(rng, w_id, warehouses)
            };
            // Distinct (item, supply) pairs: one order line per stock row.
            if (0..n).any(|j| r.items[j] == item as i32 && r.supply_w[j] == supply as i32) {
                continue;
            }
            r.items[n] = item as i32;
            r.supply_w[n] = supply as i32;
            r.quantities[n] = rng.uniform_i64(1, 10) as i32;
            n += 1;
        }
        let mut order: [(i32, i32, i32); MAX_ITEMS] = [(0, 0, 0); MAX_ITEMS];
        for (j, slot) in order.iter_mut().enumerate().take(r.ol_cnt) {
            *slot = (r.supply_w[j], r.items[j], r.quantities[j]);
        }
        order[..r.ol_cnt].sort_unstable();
        for (j, &(s, i, q)) in order[..r.ol_cnt].iter().enumerate() {
            r.supply_w[j] = s;
            r.items[j] = i;
            r.quantities[j] = q;
        }
        (r, rollback)
    }

    pub fn payment(rng: &mut Prng, w_id: i64, warehouses: i64, k: &Constants) -> Request {
        let mut r = Request {
            w_id,
            d_id: rng.uniform_i64(1, DISTRICTS_PER_WAREHOUSE),
            ..Request::default()
        };
        if rng.uniform_i64(1, 100) <= 85 || warehouses <= 1 {
            r.c_w_id = w_id;
            r.c_d_id = r.d_id;
        } else {
            r.c_w_id = other_warehouse(rng, w_id, warehouses);
            r.c_d_id = rng.uniform_i64(1, DISTRICTS_PER_WAREHOUSE);
        }
        r.customer(rng, k);
        r.amount_cents = rng.uniform_i64(100, 500_000);
        r
    }

    pub fn order_status(rng: &mut Prng, w_id: i64, k: &Constants) -> Request {
        let mut r = Request {
            w_id,
            d_id: rng.uniform_i64(1, DISTRICTS_PER_WAREHOUSE),
            ..Request::default()
        };
        r.c_w_id = w_id;
        r.c_d_id = r.d_id;
        r.customer(rng, k);
        r
    }
}

/// The 23-card deck of clause 5.2.4.2's minimum mix: 10 New-Order,
/// 10 Payment, 1 Order-Status, 1 Delivery, 1 Stock-Level.
const DECK: [TxType; 23] = [
    NEW_ORDER,
    NEW_ORDER,
    NEW_ORDER,
    NEW_ORDER,
    NEW_ORDER,
    NEW_ORDER,
    NEW_ORDER,
    NEW_ORDER,
    NEW_ORDER,
    NEW_ORDER,
    PAYMENT,
    PAYMENT,
    PAYMENT,
    PAYMENT,
    PAYMENT,
    PAYMENT,
    PAYMENT,
    PAYMENT,
    PAYMENT,
    PAYMENT,
    ORDER_STATUS,
    DELIVERY,
    STOCK_LEVEL,
];

/// A client's deck: shuffled, dealt, redealt when empty.
#[derive(Debug, Clone)]
pub struct Deck {
    cards: [TxType; 23],
    next: usize,
}

impl Default for Deck {
    fn default() -> Self {
        Deck {
            cards: DECK,
            next: DECK.len(),
        }
    }
}

impl Deck {
    pub fn deal(&mut self, rng: &mut Prng) -> TxType {
        if self.next == self.cards.len() {
            for i in (1..self.cards.len()).rev() {
                let j = rng.uniform_i64(0, i as i64) as usize;
                self.cards.swap(i, j);
            }
            self.next = 0;
        }
        self.next += 1;
        self.cards[self.next - 1]
    }
}

// ---- the protocol ------------------------------------------------------------

pub struct TpccProtocol {
    info: ConnInfo,
    cfg: TpccConfig,
    sql: Vec<String>,
    /// Cumulative weights of the five kinds, when weights are given.
    cumulative: Option<[f64; 5]>,
}

impl TpccProtocol {
    pub fn new(conninfo: &str, cfg: TpccConfig) -> Result<TpccProtocol, EngineError> {
        let bad = |m: String| Err(EngineError::Config(m));
        if cfg.warehouses == 0 {
            return bad("warehouses must be at least 1".into());
        }
        let k = cfg.constants;
        if !(0..=255).contains(&k.c_last)
            || !(0..=1023).contains(&k.c_id)
            || !(0..=8191).contains(&k.ol_i_id)
        {
            return bad(format!(
                "C constants out of range: c_last {} (0..255), c_id {} (0..1023), \
                 ol_i_id {} (0..8191)",
                k.c_last, k.c_id, k.ol_i_id
            ));
        }
        let cumulative = match cfg.weights {
            None => None,
            Some(w) => {
                if w.iter().any(|x| !x.is_finite() || *x < 0.0) || w.iter().sum::<f64>() <= 0.0 {
                    return bad(format!(
                        "weights {w:?}: each must be >= 0 and their sum > 0 \
                         (new_order, payment, order_status, delivery, stock_level)"
                    ));
                }
                let total: f64 = w.iter().sum();
                let mut acc = 0.0;
                let mut c = [0.0; 5];
                for (slot, x) in c.iter_mut().zip(w) {
                    acc += x / total;
                    *slot = acc;
                }
                Some(c)
            }
        };
        let info = ConnInfo::parse(conninfo).map_err(|e| EngineError::Config(e.to_string()))?;
        let sql = match cfg.mode {
            Mode::Statements => statements_sql(),
            Mode::Procedures => procedures_sql(),
        };
        Ok(TpccProtocol {
            info,
            cfg,
            sql,
            cumulative,
        })
    }

    /// The next type: from the deck, or from the weights.
    fn next_type(&self, deck: &mut Deck, rng: &mut Prng) -> TxType {
        match &self.cumulative {
            None => deck.deal(rng),
            Some(c) => {
                let u = rng.next_f64();
                let kind = c.iter().position(|&x| u < x).unwrap_or(4);
                [NEW_ORDER, PAYMENT, ORDER_STATUS, DELIVERY, STOCK_LEVEL][kind]
            }
        }
    }

    /// Draw one transaction for a client at `home_w`, `home_d`.
    pub fn draw(&self, tx: TxType, home_w: i64, home_d: i64, rng: &mut Prng) -> (TxType, Request) {
        let w = self.cfg.warehouses as i64;
        let k = &self.cfg.constants;
        match tx {
            NEW_ORDER | NEW_ORDER_ROLLBACK => {
                let (r, rollback) = Request::new_order(rng, home_w, w, k);
                (
                    if rollback {
                        NEW_ORDER_ROLLBACK
                    } else {
                        NEW_ORDER
                    },
                    r,
                )
            }
            PAYMENT => (PAYMENT, Request::payment(rng, home_w, w, k)),
            ORDER_STATUS => (ORDER_STATUS, Request::order_status(rng, home_w, k)),
            DELIVERY => (
                DELIVERY,
                Request {
                    w_id: home_w,
                    carrier_id: rng.uniform_i64(1, 10),
                    ..Request::default()
                },
            ),
            _ => (
                STOCK_LEVEL,
                Request {
                    w_id: home_w,
                    d_id: home_d,
                    threshold: rng.uniform_i64(10, 20),
                    ..Request::default()
                },
            ),
        }
    }
}

pub struct TpccClient {
    conn: PgConn,
    rows: Rows,
    /// Text of array parameters and last names.
    scratch: Vec<u8>,
    deck: Deck,
    home_w: i64,
    home_d: i64,
}

#[derive(Debug)]
pub enum TpccError {
    /// The server answered a statement with an error.
    Sql(SqlError),
    /// An answer the transaction cannot go on with (counted under the name).
    Unexpected(&'static str),
    /// The connection failed (lost, or never made).
    Pg(PgError),
}

impl fmt::Display for TpccError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TpccError::Sql(e) => e.fmt(f),
            TpccError::Unexpected(what) => f.write_str(what),
            TpccError::Pg(e) => e.fmt(f),
        }
    }
}

impl From<PgError> for TpccError {
    fn from(e: PgError) -> Self {
        TpccError::Pg(e)
    }
}

/// Leave an open or failed transaction block.
async fn rollback(conn: &mut PgConn) -> Result<(), PgError> {
    if conn.tx_status != b'I' {
        conn.put_query("ROLLBACK");
        conn.round_trip().await?;
    }
    Ok(())
}

/// Send the pipeline in `wbuf` (with its Sync), keep its rows; an SQL error
/// rolls back and is returned.
async fn exchange(conn: &mut PgConn, rows: &mut Rows) -> Result<(), TpccError> {
    conn.put_sync();
    rows.clear();
    if let Some(err) = conn.round_trip_rows(rows).await? {
        rollback(conn).await?;
        return Err(TpccError::Sql(err));
    }
    Ok(())
}

fn put(conn: &mut PgConn, statement: usize, params: &[Param<'_>]) {
    conn.put_bind(STATEMENT_NAMES[statement], params);
    conn.put_execute();
}

/// Append "{a,b,c}" of the first `n` values; returns its range in `out`.
fn int_array(out: &mut Vec<u8>, values: &[i32]) -> std::ops::Range<usize> {
    let start = out.len();
    out.push(b'{');
    for (j, v) in values.iter().enumerate() {
        if j > 0 {
            out.push(b',');
        }
        write_i64(out, *v as i64);
    }
    out.push(b'}');
    start..out.len()
}

/// The customer at position ceil(n/2) of those sorted by c_first (clause
/// 2.5.2.2), from a result whose first column is c_id.
fn middle_customer(rows: &Rows, result: usize) -> Option<i64> {
    let r = rows.result_rows(result);
    if r.is_empty() {
        return None;
    }
    let n = r.len();
    rows.i64(r.start + n.div_ceil(2) - 1, 0)
}

impl TpccProtocol {
    async fn new_order(
        &self,
        c: &mut TpccClient,
        tx: TxType,
        r: &Request,
    ) -> Result<(), TpccError> {
        let (conn, rows, s) = (&mut c.conn, &mut c.rows, &mut c.scratch);
        let n = r.ol_cnt;
        s.clear();
        let items = int_array(s, &r.items[..n]);
        let (w, d) = (Param::Int(r.w_id), Param::Int(r.d_id));
        if self.cfg.mode == Mode::Procedures {
            let supply = int_array(s, &r.supply_w[..n]);
            let qty = int_array(s, &r.quantities[..n]);
            let params = [
                w,
                d,
                Param::Int(r.c_id),
                Param::Int(n as i64),
                Param::Text(&s[items]),
                Param::Text(&s[supply]),
                Param::Text(&s[qty]),
            ];
            put(conn, pr::NEW_ORDER, &params);
            return match exchange(conn, rows).await {
                Err(TpccError::Sql(e))
                    if tx == NEW_ORDER_ROLLBACK
                        && e.sqlstate == RAISE_EXCEPTION
                        && e.message.contains("Item number is not valid") =>
                {
                    Ok(())
                }
                other => other,
            };
        }
        put(conn, st::BEGIN, &[]);
        put(conn, st::NO_W, &[w]);
        put(conn, st::NO_D, &[w, d]);
        put(conn, st::NO_C, &[w, d, Param::Int(r.c_id)]);
        put(conn, st::NO_I, &[Param::Text(&s[items])]);
        exchange(conn, rows).await?;
        // Amounts: quantity x price, in cents, in order-line order (an item
        // may appear twice, from two supply warehouses).
        let mut amounts = [-1i64; MAX_ITEMS];
        for row in rows.result_rows(4) {
            if let (Some(i), Some(price)) = (rows.i64(row, 0), rows.fixed(row, 1, 2)) {
                for ((amount, &item), &q) in
                    amounts.iter_mut().zip(&r.items).zip(&r.quantities).take(n)
                {
                    if item as i64 == i {
                        *amount = price * q as i64;
                    }
                }
            }
        }
        if amounts[..n].iter().any(|&a| a < 0) {
            // An unused item: the New-Order rolls back (clause 2.4.2.3).
            rollback(conn).await?;
            return if tx == NEW_ORDER_ROLLBACK {
                Ok(())
            } else {
                Err(TpccError::Unexpected("item-not-found"))
            };
        }
        let o_id = rows
            .result_rows(2)
            .next()
            .and_then(|row| rows.i64(row, 1))
            .ok_or(TpccError::Unexpected("district-not-found"));
        let o_id = match o_id {
            Ok(o) => o,
            Err(e) => {
                rollback(conn).await?;
                return Err(e);
            }
        };
        s.clear();
        let numbers: [i32; MAX_ITEMS] = std::array::from_fn(|j| j as i32 + 1);
        let numbers = int_array(s, &numbers[..n]);
        let items = int_array(s, &r.items[..n]);
        let supply = int_array(s, &r.supply_w[..n]);
        let qty = int_array(s, &r.quantities[..n]);
        let amount_start = s.len();
        s.push(b'{');
        for (j, a) in amounts[..n].iter().enumerate() {
            if j > 0 {
                s.push(b',');
            }
            write_fixed(s, *a, 2);
        }
        s.push(b'}');
        let all_local = r.supply_w[..n].iter().all(|&x| x as i64 == r.w_id);
        let o = Param::Int(o_id);
        put(
            conn,
            st::NO_O,
            &[
                o,
                d,
                w,
                Param::Int(r.c_id),
                Param::Int(n as i64),
                Param::Int(all_local as i64),
            ],
        );
        put(conn, st::NO_NO, &[o, d, w]);
        put(
            conn,
            st::NO_S + r.d_id as usize - 1,
            &[
                o,
                d,
                w,
                Param::Text(&s[numbers]),
                Param::Text(&s[items]),
                Param::Text(&s[supply]),
                Param::Text(&s[qty]),
                Param::Text(&s[amount_start..]),
            ],
        );
        put(conn, st::COMMIT, &[]);
        exchange(conn, rows).await
    }

    async fn payment(&self, c: &mut TpccClient, r: &Request) -> Result<(), TpccError> {
        let (conn, rows, s) = (&mut c.conn, &mut c.rows, &mut c.scratch);
        s.clear();
        if r.c_id == 0 {
            super::gen::write_last_name(s, r.c_last);
        }
        let (w, d) = (Param::Int(r.w_id), Param::Int(r.d_id));
        let (cw, cd) = (Param::Int(r.c_w_id), Param::Int(r.c_d_id));
        let amount = Param::Fixed(r.amount_cents, 2);
        if self.cfg.mode == Mode::Procedures {
            let params = [w, d, cw, cd, Param::Int(r.c_id), Param::Text(s), amount];
            put(conn, pr::PAYMENT, &params);
            return exchange(conn, rows).await;
        }
        put(conn, st::BEGIN, &[]);
        put(conn, st::P_W, &[w, amount]);
        put(conn, st::P_D, &[w, d, amount]);
        let c_id = if r.c_id == 0 {
            put(conn, st::P_CN, &[cw, cd, Param::Text(s)]);
            exchange(conn, rows).await?;
            match middle_customer(rows, 3) {
                Some(id) => id,
                None => {
                    rollback(conn).await?;
                    return Err(TpccError::Unexpected("customer-not-found"));
                }
            }
        } else {
            r.c_id
        };
        let id = Param::Int(c_id);
        put(conn, st::P_C, &[cw, cd, id, amount, d, w]);
        put(conn, st::P_H, &[id, cd, cw, d, w, amount]);
        put(conn, st::COMMIT, &[]);
        exchange(conn, rows).await
    }

    async fn order_status(&self, c: &mut TpccClient, r: &Request) -> Result<(), TpccError> {
        let (conn, rows, s) = (&mut c.conn, &mut c.rows, &mut c.scratch);
        s.clear();
        if r.c_id == 0 {
            super::gen::write_last_name(s, r.c_last);
        }
        let (w, d) = (Param::Int(r.w_id), Param::Int(r.d_id));
        if self.cfg.mode == Mode::Procedures {
            put(
                conn,
                pr::ORDER_STATUS,
                &[w, d, Param::Int(r.c_id), Param::Text(s)],
            );
            return exchange(conn, rows).await;
        }
        put(conn, st::BEGIN, &[]);
        let c_id = if r.c_id == 0 {
            put(conn, st::OS_CN, &[w, d, Param::Text(s)]);
            exchange(conn, rows).await?;
            match middle_customer(rows, 1) {
                Some(id) => id,
                None => {
                    rollback(conn).await?;
                    return Err(TpccError::Unexpected("customer-not-found"));
                }
            }
        } else {
            put(conn, st::OS_C, &[w, d, Param::Int(r.c_id)]);
            r.c_id
        };
        let id = Param::Int(c_id);
        put(conn, st::OS_O, &[w, d, id]);
        put(conn, st::OS_OL, &[w, d, id]);
        put(conn, st::COMMIT, &[]);
        exchange(conn, rows).await
    }

    async fn delivery(&self, c: &mut TpccClient, r: &Request) -> Result<(), TpccError> {
        let (conn, rows) = (&mut c.conn, &mut c.rows);
        let w = Param::Int(r.w_id);
        let carrier = Param::Int(r.carrier_id);
        if self.cfg.mode == Mode::Procedures {
            put(conn, pr::DELIVERY, &[w, carrier]);
            return exchange(conn, rows).await;
        }
        // 1: the oldest new order of each district, deleted.
        put(conn, st::BEGIN, &[]);
        for d in 1..=DISTRICTS_PER_WAREHOUSE {
            put(conn, st::D_NO, &[w, Param::Int(d)]);
        }
        exchange(conn, rows).await?;
        let mut orders = [0i64; DISTRICTS_PER_WAREHOUSE as usize];
        for (k, o) in orders.iter_mut().enumerate() {
            *o = rows
                .result_rows(k + 1)
                .next()
                .and_then(|row| rows.i64(row, 0))
                .unwrap_or(0);
        }
        // 2: each order's carrier and lines; its customer and amount.
        let mut any = false;
        for (k, &o) in orders.iter().enumerate() {
            if o > 0 {
                let (d, o) = (Param::Int(k as i64 + 1), Param::Int(o));
                put(conn, st::D_O, &[w, d, o, carrier]);
                put(conn, st::D_OL, &[w, d, o]);
                any = true;
            }
        }
        if !any {
            // No district had a new order: nothing to deliver.
            put(conn, st::COMMIT, &[]);
            return exchange(conn, rows).await;
        }
        exchange(conn, rows).await?;
        let mut due = [(0i64, 0i64); DISTRICTS_PER_WAREHOUSE as usize];
        let mut result = 0;
        for (k, &o) in orders.iter().enumerate() {
            if o > 0 {
                let c_id = rows
                    .result_rows(result)
                    .next()
                    .and_then(|row| rows.i64(row, 0))
                    .unwrap_or(0);
                let amount = rows
                    .result_rows(result + 1)
                    .next()
                    .and_then(|row| rows.fixed(row, 0, 2))
                    .unwrap_or(0);
                due[k] = (c_id, amount);
                result += 2;
            }
        }
        // 3: the customers' balances, and commit.
        for (k, &(c_id, amount)) in due.iter().enumerate() {
            if c_id > 0 {
                put(
                    conn,
                    st::D_C,
                    &[
                        w,
                        Param::Int(k as i64 + 1),
                        Param::Int(c_id),
                        Param::Fixed(amount, 2),
                    ],
                );
            }
        }
        put(conn, st::COMMIT, &[]);
        exchange(conn, rows).await
    }

    async fn stock_level(&self, c: &mut TpccClient, r: &Request) -> Result<(), TpccError> {
        let (conn, rows) = (&mut c.conn, &mut c.rows);
        let params = [
            Param::Int(r.w_id),
            Param::Int(r.d_id),
            Param::Int(r.threshold),
        ];
        let statement = match self.cfg.mode {
            Mode::Procedures => pr::STOCK_LEVEL,
            Mode::Statements => st::SL,
        };
        put(conn, statement, &params);
        exchange(conn, rows).await
    }
}

impl Protocol for TpccProtocol {
    type Client = TpccClient;
    type Request = Request;
    type Error = TpccError;
    const SUPPORTS_RING: bool = true;
    const HAS_PAUSES: bool = true;

    fn transaction_types(&self) -> &[&'static str] {
        &TYPES
    }

    async fn connect(&self, client: u32) -> Result<TpccClient, TpccError> {
        let mut conn = PgConn::connect(&self.info).await?;
        for (i, sql) in self.sql.iter().enumerate() {
            conn.put_parse(STATEMENT_NAMES[i], sql);
        }
        conn.put_sync();
        if let Some(err) = conn.round_trip().await? {
            let what = match self.cfg.mode {
                Mode::Statements => "is the TPC-C schema loaded?",
                Mode::Procedures => "are the tpcc_* functions installed?",
            };
            return Err(TpccError::Pg(PgError::Connect(format!(
                "preparing the TPC-C statements failed: {err} ({what})"
            ))));
        }
        let w = self.cfg.warehouses as i64;
        Ok(TpccClient {
            conn,
            rows: Rows::default(),
            scratch: Vec::with_capacity(512),
            deck: Deck::default(),
            home_w: client as i64 % w + 1,
            home_d: (client as i64 / w) % DISTRICTS_PER_WAREHOUSE + 1,
        })
    }

    fn socket(&self, client: &TpccClient) -> Option<RawFd> {
        Some(client.conn.raw_fd())
    }

    fn next_transaction(&self, client: &mut TpccClient, rng: &mut Prng) -> (TxType, Request) {
        let tx = self.next_type(&mut client.deck, rng);
        self.draw(tx, client.home_w, client.home_d, rng)
    }

    async fn execute(
        &self,
        client: &mut TpccClient,
        tx: TxType,
        request: &Request,
    ) -> Result<(), TpccError> {
        match tx {
            NEW_ORDER | NEW_ORDER_ROLLBACK => self.new_order(client, tx, request).await,
            PAYMENT => self.payment(client, request).await,
            ORDER_STATUS => self.order_status(client, request).await,
            DELIVERY => self.delivery(client, request).await,
            _ => self.stock_level(client, request).await,
        }
    }

    fn classify(&self, error: &TpccError) -> ErrorClass {
        match error {
            TpccError::Sql(e) => {
                let kind = e.sqlstate_str().to_string();
                if e.sqlstate == SERIALIZATION_FAILURE || e.sqlstate == DEADLOCK_DETECTED {
                    ErrorClass::Retryable { kind }
                } else {
                    ErrorClass::Counted { kind }
                }
            }
            TpccError::Unexpected(what) => ErrorClass::Counted {
                kind: what.to_string(),
            },
            TpccError::Pg(_) => ErrorClass::Fatal,
        }
    }

    fn use_ring(&self, client: &mut TpccClient, ring: &Rc<Ring>) -> Result<(), String> {
        client
            .conn
            .use_ring(ring.clone())
            .map_err(|e| e.to_string())
    }

    fn pause_before(&self, tx: TxType, _rng: &mut Prng) -> Option<Duration> {
        self.cfg
            .keying
            .then(|| Duration::from_secs_f64(KEYING_S[tx]))
    }

    fn pause_after(&self, tx: TxType, rng: &mut Prng) -> Option<Duration> {
        if !self.cfg.keying {
            return None;
        }
        let mean = THINK_MEAN_S[tx];
        Some(Duration::from_secs_f64(
            rng.exponential_gap(mean).min(10.0 * mean),
        ))
    }

    fn close(&self, mut client: TpccClient) {
        client.conn.terminate();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Constants = Constants {
        c_last: 223,
        c_id: 259,
        ol_i_id: 7911,
    };

    fn protocol(warehouses: u32, weights: Option<[f64; 5]>) -> TpccProtocol {
        TpccProtocol::new(
            "host=/nonexistent",
            TpccConfig {
                warehouses,
                mode: Mode::Statements,
                constants: K,
                keying: false,
                weights,
            },
        )
        .unwrap()
    }

    #[test]
    fn the_deck_deals_10_10_1_1_1_of_every_23() {
        let mut rng = Prng::seeded(1);
        let mut deck = Deck::default();
        for _ in 0..50 {
            let mut counts = [0; 6];
            for _ in 0..23 {
                counts[deck.deal(&mut rng)] += 1;
            }
            assert_eq!(counts, [10, 0, 10, 1, 1, 1]);
        }
    }

    #[test]
    fn one_new_order_in_a_hundred_rolls_back_with_the_unused_item_last() {
        let mut rng = Prng::seeded(2);
        let n = 100_000;
        let mut rollbacks = 0;
        let mut remote_lines = 0;
        let mut lines = 0;
        for _ in 0..n {
            let (r, rollback) = Request::new_order(&mut rng, 3, 10, &K);
            assert!((5..=15).contains(&r.ol_cnt));
            assert!((1..=10).contains(&r.d_id));
            assert!((1..=3000).contains(&r.c_id));
            for j in 0..r.ol_cnt {
                assert!((1..=10).contains(&r.quantities[j]));
                assert!((1..=10).contains(&r.supply_w[j]));
                if j > 0 {
                    assert!(
                        (r.supply_w[j - 1], r.items[j - 1]) < (r.supply_w[j], r.items[j]),
                        "sorted, distinct"
                    );
                }
                if r.items[j] as i64 == UNUSED_ITEM {
                    assert!(rollback);
                } else {
                    assert!((1..=ITEMS).contains(&(r.items[j] as i64)));
                }
                remote_lines += (r.supply_w[j] != 3) as u32;
            }
            lines += r.ol_cnt;
            rollbacks += rollback as u32;
        }
        // 1% of 100,000 = 1000 +- 31 (sd).
        assert!((850..=1150).contains(&rollbacks), "{rollbacks}");
        let share = remote_lines as f64 / lines as f64;
        assert!((0.008..0.012).contains(&share), "remote lines {share}");
        // One warehouse: every line is local.
        let (r, _) = Request::new_order(&mut rng, 1, 1, &K);
        assert!(r.supply_w[..r.ol_cnt].iter().all(|&w| w == 1));
    }

    #[test]
    fn payment_is_15_percent_remote_and_60_percent_by_last_name() {
        let mut rng = Prng::seeded(3);
        let n = 100_000;
        let (mut remote, mut by_name) = (0, 0);
        for _ in 0..n {
            let r = Request::payment(&mut rng, 2, 5, &K);
            assert!((100..=500_000).contains(&r.amount_cents));
            if r.c_w_id != 2 {
                remote += 1;
                assert!((1..=5).contains(&r.c_w_id));
            } else {
                assert_eq!(r.c_d_id, r.d_id);
            }
            if r.c_id == 0 {
                by_name += 1;
                assert!((0..=999).contains(&r.c_last));
            } else {
                assert!((1..=3000).contains(&r.c_id));
            }
        }
        let (remote, by_name) = (remote as f64 / n as f64, by_name as f64 / n as f64);
        assert!((0.14..0.16).contains(&remote), "remote {remote}");
        assert!((0.59..0.61).contains(&by_name), "by name {by_name}");
        let r = Request::payment(&mut rng, 1, 1, &K);
        assert_eq!((r.c_w_id, r.c_d_id), (1, r.d_id));
    }

    #[test]
    fn item_ids_use_a_8191() {
        // With A = 8191 and C = 0, (rand(0, 8191) | rand(1, 100000)) reaches
        // values whose low 13 bits are all set far more often than uniform.
        let mut rng = Prng::seeded(4);
        let n = 200_000;
        let mut low_all_set = 0;
        for _ in 0..n {
            let v = nurand(&mut rng, 8191, 1, ITEMS, 0);
            assert!((1..=ITEMS).contains(&v));
            if (v - 1) & 8191 == 8191 {
                low_all_set += 1;
            }
        }
        // Uniform: 1/8192 of draws (about 24); NURand: more than 10x that.
        assert!(low_all_set > 300, "{low_all_set}");
    }

    #[test]
    fn weights_choose_the_types_and_clients_have_home_districts() {
        let p = protocol(2, Some([0.0, 0.0, 0.0, 0.0, 1.0]));
        let mut rng = Prng::seeded(5);
        for _ in 0..100 {
            let tx = p.next_type(&mut Deck::default(), &mut rng);
            assert_eq!(tx, STOCK_LEVEL);
        }
        let (tx, r) = p.draw(STOCK_LEVEL, 2, 7, &mut rng);
        assert_eq!((tx, r.w_id, r.d_id), (STOCK_LEVEL, 2, 7));
        assert!((10..=20).contains(&r.threshold));
        let (tx, r) = p.draw(DELIVERY, 1, 1, &mut rng);
        assert_eq!(tx, DELIVERY);
        assert!((1..=10).contains(&r.carrier_id));
        assert!(TpccProtocol::new(
            "",
            TpccConfig {
                warehouses: 1,
                mode: Mode::Statements,
                constants: K,
                keying: false,
                weights: Some([-1.0, 0.0, 0.0, 0.0, 0.0]),
            }
        )
        .is_err());
        assert!("procedures".parse::<Mode>().is_ok());
        assert!("stored".parse::<Mode>().unwrap_err().contains("statements"));
    }

    #[test]
    fn keying_and_think_times_follow_clause_5_2_5() {
        let mut p = protocol(1, None);
        let mut rng = Prng::seeded(6);
        assert_eq!(p.pause_before(NEW_ORDER, &mut rng), None);
        p.cfg.keying = true;
        assert_eq!(
            p.pause_before(NEW_ORDER, &mut rng),
            Some(Duration::from_secs(18))
        );
        assert_eq!(
            p.pause_before(PAYMENT, &mut rng),
            Some(Duration::from_secs(3))
        );
        let n = 20_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let t = p.pause_after(DELIVERY, &mut rng).unwrap().as_secs_f64();
            assert!(t <= 50.0);
            sum += t;
        }
        let mean = sum / n as f64;
        assert!((4.8..5.2).contains(&mean), "mean think time {mean}");
    }

    #[test]
    fn the_statements_and_calls_are_complete() {
        let sql = statements_sql();
        assert!(sql[st::NO_S + 9].contains("s_dist_10"));
        assert!(sql[st::NO_S].contains("s_dist_01"));
        assert_eq!(procedures_sql().len(), 5);
    }
}
