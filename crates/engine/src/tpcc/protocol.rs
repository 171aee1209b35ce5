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
//!
//! One file per transaction, as go-tpc has them (`protocol/new_order.rs`,
//! `payment.rs`, `order_status.rs`, `delivery.rs`, `stock_level.rs`): its
//! draws and its run. Their SQL is in `protocol/sql.rs`; this file holds what
//! they share: the types, the deck, the client, and the harness's `Protocol`.

mod delivery;
mod new_order;
mod order_status;
mod payment;
mod sql;
mod stock_level;

use super::gen::nurand;
use super::{DISTRICTS_PER_WAREHOUSE, ITEMS};
use crate::harness::{EngineError, ErrorClass, Protocol, TxType};
use crate::pg::{write_i64, ConnInfo, Param, PgConn, PgError, Rows, SqlError};
use crate::random::Prng;
use crate::uring::Ring;
use sql::{procedures_sql, statements_sql, STATEMENT_NAMES};
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

/// The configuration checked, and the weights' cumulative shares (None: the
/// deck): what both protocols draw with (this one, and MySQL's in
/// `super::mysql`).
pub(crate) fn checked_weights(cfg: &TpccConfig) -> Result<Option<[f64; 5]>, EngineError> {
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
    match cfg.weights {
        None => Ok(None),
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
            Ok(Some(c))
        }
    }
}

/// The next type: from the deck, or from the weights.
pub(crate) fn next_type(cumulative: &Option<[f64; 5]>, deck: &mut Deck, rng: &mut Prng) -> TxType {
    match cumulative {
        None => deck.deal(rng),
        Some(c) => {
            let u = rng.next_f64();
            let kind = c.iter().position(|&x| u < x).unwrap_or(4);
            [NEW_ORDER, PAYMENT, ORDER_STATUS, DELIVERY, STOCK_LEVEL][kind]
        }
    }
}

/// Draw one transaction of type `tx` for a client at `home_w`, `home_d`.
pub(crate) fn draw(
    cfg: &TpccConfig,
    tx: TxType,
    home_w: i64,
    home_d: i64,
    rng: &mut Prng,
) -> (TxType, Request) {
    let w = cfg.warehouses as i64;
    let k = &cfg.constants;
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

/// A client's home warehouse and district: clients spread over the
/// warehouses first, then over their districts.
pub(crate) fn home_of(client: u32, warehouses: u32) -> (i64, i64) {
    let w = warehouses as i64;
    (
        client as i64 % w + 1,
        (client as i64 / w) % DISTRICTS_PER_WAREHOUSE + 1,
    )
}

/// Keying time before a transaction of type `tx`, when keying is on.
pub(crate) fn keying_pause(keying: bool, tx: TxType) -> Option<Duration> {
    keying.then(|| Duration::from_secs_f64(KEYING_S[tx]))
}

/// Think time after a transaction of type `tx`, when keying is on
/// (exponential, at most ten times its mean).
pub(crate) fn think_pause(keying: bool, tx: TxType, rng: &mut Prng) -> Option<Duration> {
    if !keying {
        return None;
    }
    let mean = THINK_MEAN_S[tx];
    Some(Duration::from_secs_f64(
        rng.exponential_gap(mean).min(10.0 * mean),
    ))
}

impl TpccProtocol {
    pub fn new(conninfo: &str, cfg: TpccConfig) -> Result<TpccProtocol, EngineError> {
        let cumulative = checked_weights(&cfg)?;
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

    /// Draw one transaction for a client at `home_w`, `home_d`.
    pub fn draw(&self, tx: TxType, home_w: i64, home_d: i64, rng: &mut Prng) -> (TxType, Request) {
        draw(&self.cfg, tx, home_w, home_d, rng)
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

/// The customer chosen by last name (clause 2.5.2.2, 2.6.2.2): `statement`
/// (its first column c_id, sorted by c_first) is sent with the pipeline
/// before it, whose results it follows as result `result`; the customer at
/// position ceil(n/2). None found: the transaction rolls back.
async fn customer_by_name(
    conn: &mut PgConn,
    rows: &mut Rows,
    statement: usize,
    params: &[Param<'_>],
    result: usize,
) -> Result<i64, TpccError> {
    put(conn, statement, params);
    exchange(conn, rows).await?;
    match middle_customer(rows, result) {
        Some(id) => Ok(id),
        None => {
            rollback(conn).await?;
            Err(TpccError::Unexpected("customer-not-found"))
        }
    }
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
        let (home_w, home_d) = home_of(client, self.cfg.warehouses);
        Ok(TpccClient {
            conn,
            rows: Rows::default(),
            scratch: Vec::with_capacity(512),
            deck: Deck::default(),
            home_w,
            home_d,
        })
    }

    fn socket(&self, client: &TpccClient) -> Option<RawFd> {
        Some(client.conn.raw_fd())
    }

    fn server_pid(&self, client: &TpccClient) -> Option<u32> {
        client.conn.local_backend_pid()
    }

    fn next_transaction(&self, client: &mut TpccClient, rng: &mut Prng) -> (TxType, Request) {
        let tx = next_type(&self.cumulative, &mut client.deck, rng);
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
            TpccError::Sql(e) => e.error_class(),
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
        keying_pause(self.cfg.keying, tx)
    }

    fn pause_after(&self, tx: TxType, rng: &mut Prng) -> Option<Duration> {
        think_pause(self.cfg.keying, tx, rng)
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
            let tx = next_type(&p.cumulative, &mut Deck::default(), &mut rng);
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
}
