//! TPC-C's five transactions on MySQL and MariaDB (InnoDB), as a protocol of
//! the load harness, on the engine's MySQL client (`crate::mysql`).
//!
//! The draws, the deck, the home warehouses and the keying and think times
//! are PostgreSQL's protocol's (`super::protocol`), and so is what each
//! transaction reads and writes (`PROCEDURES.md`). The SQL differs: where
//! PostgreSQL updates and reads a row in one `UPDATE ... RETURNING`, this
//! reads it with `SELECT ... FOR UPDATE` (the district's next order id, the
//! customer, the oldest new order) and updates it apart; the New-Order's
//! items are one `IN (?, ...)` of 15 places, their stock rows one
//! `(s_w_id, s_i_id) IN (...) FOR UPDATE` (a range of the primary key,
//! locked in key order), each stock row updated apart, and the order lines
//! one multi-row INSERT.
//!
//! Statements are prepared once per connection (binary protocol) and sent
//! several per round trip. MySQL does not stop a pipeline at an error, and a
//! deadlock rolls the whole transaction back, so: the session runs with
//! autocommit off (statements after a failed one stay in a transaction, which
//! is rolled back), every answer is read before COMMIT is sent, and COMMIT
//! travels with statements only after reads. A New-Order is three round
//! trips (reads and locks; writes; COMMIT), a Payment by id two, by name
//! three, an Order-Status by id one, a Delivery four, a Stock-Level one.

use super::protocol::{
    checked_weights, draw, home_of, keying_pause, next_type, think_pause, Deck, Request,
    TpccConfig, DELIVERY, MAX_ITEMS, NEW_ORDER_ROLLBACK, ORDER_STATUS, PAYMENT, TYPES,
};
use super::DISTRICTS_PER_WAREHOUSE;
use crate::harness::{EngineError, ErrorClass, Protocol, TxType};
use crate::mysql::{MyConn, MyConnInfo, MyError, Param, Rows, ServerError, Stmt};
use crate::random::Prng;
use crate::uring::Ring;
use std::fmt;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::Duration;

/// Statement indexes.
mod st {
    pub const NO_W: usize = 0;
    pub const NO_D: usize = 1;
    pub const NO_C: usize = 2;
    pub const NO_I: usize = 3;
    pub const NO_DU: usize = 4;
    pub const NO_O: usize = 5;
    pub const NO_NO: usize = 6;
    pub const NO_S: usize = 7;
    pub const P_WU: usize = 8;
    pub const P_W: usize = 9;
    pub const P_DU: usize = 10;
    pub const P_D: usize = 11;
    pub const C_BY_NAME: usize = 12;
    pub const P_C: usize = 13;
    pub const P_CU: usize = 14;
    pub const P_H: usize = 15;
    pub const OS_C: usize = 16;
    pub const OS_O: usize = 17;
    pub const OS_OL: usize = 18;
    pub const D_NO: usize = 19;
    pub const D_NOD: usize = 20;
    pub const D_OU: usize = 21;
    pub const D_O: usize = 22;
    pub const D_OLU: usize = 23;
    pub const D_OL: usize = 24;
    pub const D_C: usize = 25;
    pub const SL: usize = 26;
    /// NO_SS + d - 1: the stock rows of an order of district d, locked.
    pub const NO_SS: usize = 27;
    /// NO_OL + n - MIN_LINES: the insert of an order's n lines.
    pub const NO_OL: usize = 37;
    pub const COUNT: usize = 48;
}

/// The fewest lines an order has (clause 2.4.1.3: 5 to 15).
const MIN_LINES: usize = 5;
/// Parameters of one order line in the insert.
const LINE_PARAMS: usize = 9;

fn statements_sql() -> Vec<String> {
    let places = vec!["?"; MAX_ITEMS].join(", ");
    let mut sql: Vec<String> = vec![
        // New-Order
        "SELECT w_tax FROM warehouse WHERE w_id = ?".into(),
        "SELECT d_tax, d_next_o_id FROM district WHERE d_w_id = ? AND d_id = ? FOR UPDATE".into(),
        "SELECT c_discount, c_last, c_credit FROM customer \
         WHERE c_w_id = ? AND c_d_id = ? AND c_id = ?"
            .into(),
        format!("SELECT i_id, i_price, i_name, i_data FROM item WHERE i_id IN ({places})"),
        "UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = ? AND d_id = ?".into(),
        "INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, \
         o_all_local) VALUES (?, ?, ?, ?, NOW(), NULL, ?, ?)"
            .into(),
        "INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES (?, ?, ?)".into(),
        "UPDATE stock SET s_quantity = IF(s_quantity - ? >= 10, s_quantity - ?, \
         s_quantity - ? + 91), s_ytd = s_ytd + ?, s_order_cnt = s_order_cnt + 1, \
         s_remote_cnt = s_remote_cnt + ? WHERE s_i_id = ? AND s_w_id = ?"
            .into(),
        // Payment
        "UPDATE warehouse SET w_ytd = w_ytd + ? WHERE w_id = ?".into(),
        "SELECT w_name, w_street_1, w_street_2, w_city, w_state, w_zip FROM warehouse \
         WHERE w_id = ?"
            .into(),
        "UPDATE district SET d_ytd = d_ytd + ? WHERE d_w_id = ? AND d_id = ?".into(),
        "SELECT d_name, d_street_1, d_street_2, d_city, d_state, d_zip FROM district \
         WHERE d_w_id = ? AND d_id = ?"
            .into(),
        "SELECT c_id FROM customer WHERE c_w_id = ? AND c_d_id = ? AND c_last = ? \
         ORDER BY c_first"
            .into(),
        "SELECT c_first, c_middle, c_last, c_street_1, c_street_2, c_city, c_state, c_zip, \
         c_phone, c_since, c_credit, c_credit_lim, c_discount, c_balance, \
         IF(c_credit = 'BC', LEFT(c_data, 200), NULL) FROM customer \
         WHERE c_w_id = ? AND c_d_id = ? AND c_id = ? FOR UPDATE"
            .into(),
        "UPDATE customer SET c_balance = c_balance - ?, c_ytd_payment = c_ytd_payment + ?, \
         c_payment_cnt = c_payment_cnt + 1, c_data = IF(c_credit = 'BC', LEFT(CONCAT(c_id, ' ', \
         c_d_id, ' ', c_w_id, ' ', ?, ' ', ?, ' ', ?, ' | ', c_data), 500), c_data) \
         WHERE c_w_id = ? AND c_d_id = ? AND c_id = ?"
            .into(),
        "INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, \
         h_data) VALUES (?, ?, ?, ?, ?, NOW(), ?, CONCAT((SELECT w_name FROM warehouse \
         WHERE w_id = ?), '    ', (SELECT d_name FROM district WHERE d_w_id = ? AND d_id = ?)))"
            .into(),
        // Order-Status
        "SELECT c_balance, c_first, c_middle, c_last FROM customer \
         WHERE c_w_id = ? AND c_d_id = ? AND c_id = ?"
            .into(),
        "SELECT o_id, o_carrier_id, o_entry_d FROM orders \
         WHERE o_w_id = ? AND o_d_id = ? AND o_c_id = ? ORDER BY o_id DESC LIMIT 1"
            .into(),
        "SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d \
         FROM (SELECT max(o_id) AS o FROM orders WHERE o_w_id = ? AND o_d_id = ? AND o_c_id = ?) m \
         JOIN order_line ON ol_w_id = ? AND ol_d_id = ? AND ol_o_id = m.o"
            .into(),
        // Delivery
        "SELECT no_o_id FROM new_order WHERE no_w_id = ? AND no_d_id = ? \
         ORDER BY no_o_id LIMIT 1 FOR UPDATE"
            .into(),
        "DELETE FROM new_order WHERE no_w_id = ? AND no_d_id = ? AND no_o_id = ?".into(),
        "UPDATE orders SET o_carrier_id = ? WHERE o_w_id = ? AND o_d_id = ? AND o_id = ?".into(),
        "SELECT o_c_id FROM orders WHERE o_w_id = ? AND o_d_id = ? AND o_id = ?".into(),
        "UPDATE order_line SET ol_delivery_d = NOW() \
         WHERE ol_w_id = ? AND ol_d_id = ? AND ol_o_id = ?"
            .into(),
        "SELECT coalesce(sum(ol_amount), 0) FROM order_line \
         WHERE ol_w_id = ? AND ol_d_id = ? AND ol_o_id = ?"
            .into(),
        "UPDATE customer SET c_balance = c_balance + ?, c_delivery_cnt = c_delivery_cnt + 1 \
         WHERE c_w_id = ? AND c_d_id = ? AND c_id = ?"
            .into(),
        // Stock-Level: the district joined first, so its next order id bounds
        // the order lines' key range
        "SELECT count(DISTINCT s_i_id) FROM district \
         JOIN order_line ON ol_w_id = d_w_id AND ol_d_id = d_id \
         AND ol_o_id < d_next_o_id AND ol_o_id >= d_next_o_id - 20 \
         JOIN stock ON s_w_id = ol_w_id AND s_i_id = ol_i_id \
         WHERE d_w_id = ? AND d_id = ? AND s_quantity < ?"
            .into(),
    ];
    let pairs = vec!["(?, ?)"; MAX_ITEMS].join(", ");
    for d in 1..=DISTRICTS_PER_WAREHOUSE {
        sql.push(format!(
            "SELECT s_i_id, s_w_id, s_dist_{d:02} FROM stock WHERE (s_w_id, s_i_id) IN ({pairs}) \
             FOR UPDATE"
        ));
    }
    for n in MIN_LINES..=MAX_ITEMS {
        sql.push(format!(
            "INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, \
             ol_supply_w_id, ol_delivery_d, ol_quantity, ol_amount, ol_dist_info) VALUES {}",
            vec!["(?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)"; n].join(", ")
        ));
    }
    assert_eq!(sql.len(), st::COUNT);
    sql
}

/// The isolation levels a run may ask for, as MySQL names them.
fn isolation_sql(isolation: &str) -> Result<&'static str, EngineError> {
    match isolation {
        "read committed" => Ok("READ COMMITTED"),
        "repeatable read" => Ok("REPEATABLE READ"),
        "serializable" => Ok("SERIALIZABLE"),
        other => Err(EngineError::Config(format!(
            "isolation {other:?} is unknown; allowed: read committed, repeatable read, serializable"
        ))),
    }
}

pub struct TpccMysqlProtocol {
    info: MyConnInfo,
    cfg: TpccConfig,
    cumulative: Option<[f64; 5]>,
    sql: Vec<String>,
    /// Run once per connection: autocommit off, the isolation level.
    session: String,
}

impl TpccMysqlProtocol {
    /// `conninfo` as `MyConnInfo::parse` reads it; `isolation` one of "read
    /// committed", "repeatable read", "serializable". Procedures mode is
    /// PostgreSQL's (PL/pgSQL) and refused.
    pub fn new(
        conninfo: &str,
        cfg: TpccConfig,
        isolation: &str,
    ) -> Result<TpccMysqlProtocol, EngineError> {
        if cfg.mode != super::protocol::Mode::Statements {
            return Err(EngineError::Config(
                "mode \"procedures\" calls PL/pgSQL functions, which only PostgreSQL has; \
                 allowed on MySQL: \"statements\""
                    .into(),
            ));
        }
        let cumulative = checked_weights(&cfg)?;
        let info = MyConnInfo::parse(conninfo).map_err(|e| EngineError::Config(e.to_string()))?;
        let session = format!(
            "SET autocommit = 0; SET SESSION TRANSACTION ISOLATION LEVEL {}",
            isolation_sql(isolation)?
        );
        Ok(TpccMysqlProtocol {
            info,
            cfg,
            cumulative,
            sql: statements_sql(),
            session,
        })
    }
}

pub struct TpccMysqlClient {
    conn: MyConn,
    stmts: Vec<Stmt>,
    rows: Rows,
    /// The last name of a by-name transaction.
    scratch: Vec<u8>,
    deck: Deck,
    home_w: i64,
    home_d: i64,
}

#[derive(Debug)]
pub enum TpccMysqlError {
    /// The server answered a statement with an error (the transaction was rolled back).
    Server(ServerError),
    /// An answer the transaction cannot go on with (counted under the name).
    Unexpected(&'static str),
    /// The connection failed (lost, or never made).
    Conn(MyError),
}

impl fmt::Display for TpccMysqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TpccMysqlError::Server(e) => e.fmt(f),
            TpccMysqlError::Unexpected(what) => f.write_str(what),
            TpccMysqlError::Conn(e) => e.fmt(f),
        }
    }
}

impl From<MyError> for TpccMysqlError {
    fn from(e: MyError) -> Self {
        match e {
            MyError::Server(e) => TpccMysqlError::Server(e),
            other => TpccMysqlError::Conn(other),
        }
    }
}

/// Statements put on the connection, their answers not read yet.
struct Batch<'a> {
    conn: &'a mut MyConn,
    stmts: &'a [Stmt],
    sent: usize,
}

impl<'a> Batch<'a> {
    fn new(conn: &'a mut MyConn, stmts: &'a [Stmt]) -> Self {
        Batch {
            conn,
            stmts,
            sent: 0,
        }
    }

    fn put(&mut self, statement: usize, params: &[Param<'_>]) {
        self.conn.put_execute(&self.stmts[statement], params);
        self.sent += 1;
    }

    fn commit(&mut self) {
        self.conn.put_query("COMMIT");
        self.sent += 1;
    }

    /// Send what was put and read every answer, one result each into `rows`;
    /// on a server's error (the first), roll back and return it.
    async fn exchange(&mut self, rows: &mut Rows) -> Result<(), TpccMysqlError> {
        rows.clear();
        let mut first: Option<ServerError> = None;
        for _ in 0..std::mem::take(&mut self.sent) {
            match self.conn.read_result(Some(rows)).await {
                Ok(_) => {}
                Err(MyError::Server(e)) => {
                    first.get_or_insert(e);
                }
                Err(e) => return Err(TpccMysqlError::Conn(e)),
            }
        }
        match first {
            None => Ok(()),
            Some(e) => {
                self.rollback().await?;
                Err(TpccMysqlError::Server(e))
            }
        }
    }

    /// End the transaction without its changes (with autocommit off, also
    /// what ran after a statement that failed).
    async fn rollback(&mut self) -> Result<(), TpccMysqlError> {
        self.conn.query("ROLLBACK").await?;
        Ok(())
    }

    async fn fail(&mut self, what: &'static str) -> Result<(), TpccMysqlError> {
        self.rollback().await?;
        Err(TpccMysqlError::Unexpected(what))
    }

    /// The request's customer: its id, or the one at position ceil(n/2) of
    /// those of its last name sorted by c_first (clause 2.5.2.2), looked up
    /// with what was put before as answer `result`. None of that name: rolled
    /// back, "customer-not-found".
    async fn customer(
        &mut self,
        rows: &mut Rows,
        name: &mut Vec<u8>,
        r: &Request,
        result: usize,
    ) -> Result<i64, TpccMysqlError> {
        if r.c_id != 0 {
            return Ok(r.c_id);
        }
        name.clear();
        crate::tpcc::gen::write_last_name(name, r.c_last);
        let (cw, cd) = (Param::Int(r.c_w_id), Param::Int(r.c_d_id));
        self.put(st::C_BY_NAME, &[cw, cd, Param::Text(name)]);
        self.exchange(rows).await?;
        let found = rows.result_rows(result);
        if found.is_empty() {
            self.fail("customer-not-found").await?;
        }
        match rows.i64(found.start + found.len().div_ceil(2) - 1, 0) {
            Some(id) => Ok(id),
            None => self.fail("customer-not-found").await.map(|_| 0),
        }
    }

    async fn commit_now(&mut self) -> Result<(), TpccMysqlError> {
        self.conn.query("COMMIT").await?;
        Ok(())
    }
}

impl TpccMysqlProtocol {
    async fn new_order(
        &self,
        c: &mut TpccMysqlClient,
        tx: TxType,
        r: &Request,
    ) -> Result<(), TpccMysqlError> {
        let rows = &mut c.rows;
        let mut b = Batch::new(&mut c.conn, &c.stmts);
        let n = r.ol_cnt;
        let (w, d, cid) = (Param::Int(r.w_id), Param::Int(r.d_id), Param::Int(r.c_id));
        // Reads, and the district's row locked: its next order id is ours.
        b.put(st::NO_W, &[w]);
        b.put(st::NO_D, &[w, d]);
        b.put(st::NO_C, &[w, d, cid]);
        let items: [Param<'_>; MAX_ITEMS] =
            std::array::from_fn(|j| Param::Int(r.items[if j < n { j } else { 0 }] as i64));
        b.put(st::NO_I, &items);
        let stock: [Param<'_>; 2 * MAX_ITEMS] = std::array::from_fn(|k| {
            let j = if k / 2 < n { k / 2 } else { 0 };
            Param::Int(if k % 2 == 0 {
                r.supply_w[j]
            } else {
                r.items[j]
            } as i64)
        });
        b.put(st::NO_SS + r.d_id as usize - 1, &stock);
        b.exchange(rows).await?;
        let Some(o_id) = rows.result_rows(1).next().and_then(|row| rows.i64(row, 1)) else {
            return b.fail("district-not-found").await;
        };
        let amounts = r.line_amounts(
            rows.result_rows(3)
                .map(|row| (rows.i64(row, 0), rows.fixed(row, 1, 2))),
        );
        if amounts[..n].iter().any(|&a| a < 0) {
            // An unused item: the New-Order rolls back (clause 2.4.2.3).
            b.rollback().await?;
            return if tx == NEW_ORDER_ROLLBACK {
                Ok(())
            } else {
                Err(TpccMysqlError::Unexpected("item-not-found"))
            };
        }
        // Each line's stock row (its district's s_dist_xx), by position in the result.
        let mut stock_row = [usize::MAX; MAX_ITEMS];
        for row in rows.result_rows(4) {
            let (i, sw) = (rows.i64(row, 0), rows.i64(row, 1));
            for (j, slot) in stock_row.iter_mut().enumerate().take(n) {
                if i == Some(r.items[j] as i64) && sw == Some(r.supply_w[j] as i64) {
                    *slot = row;
                }
            }
        }
        if stock_row[..n].contains(&usize::MAX) {
            return b.fail("stock-not-found").await;
        }
        let all_local = r.supply_w[..n].iter().all(|&x| x as i64 == r.w_id);
        let o = Param::Int(o_id);
        b.put(st::NO_DU, &[w, d]);
        b.put(
            st::NO_O,
            &[
                o,
                d,
                w,
                cid,
                Param::Int(n as i64),
                Param::Int(all_local as i64),
            ],
        );
        b.put(st::NO_NO, &[o, d, w]);
        let mut lines = [Param::Null; LINE_PARAMS * MAX_ITEMS];
        for j in 0..n {
            let (i, sw, q) = (
                Param::Int(r.items[j] as i64),
                Param::Int(r.supply_w[j] as i64),
                Param::Int(r.quantities[j] as i64),
            );
            let remote = Param::Int((r.supply_w[j] as i64 != r.w_id) as i64);
            b.put(st::NO_S, &[q, q, q, q, remote, i, sw]);
            let dist = Param::Text(rows.get(stock_row[j], 2).unwrap_or_default());
            let number = Param::Int(j as i64 + 1);
            let amount = Param::Fixed(amounts[j], 2);
            lines[j * LINE_PARAMS..(j + 1) * LINE_PARAMS]
                .copy_from_slice(&[o, d, w, number, i, sw, q, amount, dist]);
        }
        b.put(st::NO_OL + n - MIN_LINES, &lines[..n * LINE_PARAMS]);
        b.exchange(rows).await?;
        b.commit_now().await
    }

    async fn payment(&self, c: &mut TpccMysqlClient, r: &Request) -> Result<(), TpccMysqlError> {
        let (rows, s) = (&mut c.rows, &mut c.scratch);
        let mut b = Batch::new(&mut c.conn, &c.stmts);
        let (w, d) = (Param::Int(r.w_id), Param::Int(r.d_id));
        let (cw, cd) = (Param::Int(r.c_w_id), Param::Int(r.c_d_id));
        let amount = Param::Fixed(r.amount_cents, 2);
        b.put(st::P_WU, &[amount, w]);
        b.put(st::P_W, &[w]);
        b.put(st::P_DU, &[amount, w, d]);
        b.put(st::P_D, &[w, d]);
        let c_id = b.customer(rows, s, r, 4).await?;
        let id = Param::Int(c_id);
        b.put(st::P_C, &[cw, cd, id]);
        b.put(st::P_CU, &[amount, amount, d, w, amount, cw, cd, id]);
        b.put(st::P_H, &[id, cd, cw, d, w, amount, w, w, d]);
        b.exchange(rows).await?;
        if rows.result_rows(rows.results() - 3).is_empty() {
            return b.fail("customer-not-found").await;
        }
        b.commit_now().await
    }

    async fn order_status(
        &self,
        c: &mut TpccMysqlClient,
        r: &Request,
    ) -> Result<(), TpccMysqlError> {
        let (rows, s) = (&mut c.rows, &mut c.scratch);
        let mut b = Batch::new(&mut c.conn, &c.stmts);
        let (w, d) = (Param::Int(r.w_id), Param::Int(r.d_id));
        let c_id = b.customer(rows, s, r, 0).await?;
        let id = Param::Int(c_id);
        // Reads only: COMMIT may travel with them.
        b.put(st::OS_C, &[w, d, id]);
        b.put(st::OS_O, &[w, d, id]);
        b.put(st::OS_OL, &[w, d, id, w, d]);
        b.commit();
        b.exchange(rows).await
    }

    async fn delivery(&self, c: &mut TpccMysqlClient, r: &Request) -> Result<(), TpccMysqlError> {
        let rows = &mut c.rows;
        let mut b = Batch::new(&mut c.conn, &c.stmts);
        let w = Param::Int(r.w_id);
        // Each district's oldest new order, locked.
        for d in 1..=DISTRICTS_PER_WAREHOUSE {
            b.put(st::D_NO, &[w, Param::Int(d)]);
        }
        b.exchange(rows).await?;
        let mut orders = [0i64; DISTRICTS_PER_WAREHOUSE as usize];
        for (k, o) in orders.iter_mut().enumerate() {
            *o = rows
                .result_rows(k)
                .next()
                .and_then(|row| rows.i64(row, 0))
                .unwrap_or(0);
        }
        if orders.iter().all(|&o| o == 0) {
            return b.commit_now().await;
        }
        let carrier = Param::Int(r.carrier_id);
        for (k, &o) in orders.iter().enumerate() {
            if o > 0 {
                let (d, o) = (Param::Int(k as i64 + 1), Param::Int(o));
                b.put(st::D_NOD, &[w, d, o]);
                b.put(st::D_OU, &[carrier, w, d, o]);
                b.put(st::D_O, &[w, d, o]);
                b.put(st::D_OLU, &[w, d, o]);
                b.put(st::D_OL, &[w, d, o]);
            }
        }
        b.exchange(rows).await?;
        let mut result = 0;
        let mut due = [(0i64, 0i64); DISTRICTS_PER_WAREHOUSE as usize];
        for (k, &o) in orders.iter().enumerate() {
            if o > 0 {
                let c_id = rows
                    .result_rows(result + 2)
                    .next()
                    .and_then(|row| rows.i64(row, 0));
                let amount = rows
                    .result_rows(result + 4)
                    .next()
                    .and_then(|row| rows.fixed(row, 0, 2));
                match (c_id, amount) {
                    (Some(c_id), Some(amount)) => due[k] = (c_id, amount),
                    _ => return b.fail("order-not-found").await,
                }
                result += 5;
            }
        }
        for (k, &(c_id, amount)) in due.iter().enumerate() {
            if c_id > 0 {
                let d = Param::Int(k as i64 + 1);
                b.put(st::D_C, &[Param::Fixed(amount, 2), w, d, Param::Int(c_id)]);
            }
        }
        b.exchange(rows).await?;
        b.commit_now().await
    }

    async fn stock_level(
        &self,
        c: &mut TpccMysqlClient,
        r: &Request,
    ) -> Result<(), TpccMysqlError> {
        let rows = &mut c.rows;
        let mut b = Batch::new(&mut c.conn, &c.stmts);
        let params = [
            Param::Int(r.w_id),
            Param::Int(r.d_id),
            Param::Int(r.threshold),
        ];
        b.put(st::SL, &params);
        b.commit();
        b.exchange(rows).await
    }
}

impl Protocol for TpccMysqlProtocol {
    type Client = TpccMysqlClient;
    type Request = Request;
    type Error = TpccMysqlError;
    const SUPPORTS_RING: bool = true;
    const HAS_PAUSES: bool = true;

    fn transaction_types(&self) -> &[&'static str] {
        &TYPES
    }

    async fn connect(&self, client: u32) -> Result<TpccMysqlClient, TpccMysqlError> {
        let mut conn = MyConn::connect(&self.info).await?;
        conn.query(&self.session).await?;
        let stmts = conn.prepare_all(&self.sql).await.map_err(|e| match e {
            MyError::Server(e) => TpccMysqlError::Conn(MyError::Connect(format!(
                "preparing the TPC-C statements failed: {e} (is the TPC-C schema loaded?)"
            ))),
            e => TpccMysqlError::Conn(e),
        })?;
        let (home_w, home_d) = home_of(client, self.cfg.warehouses);
        Ok(TpccMysqlClient {
            conn,
            stmts,
            rows: Rows::default(),
            scratch: Vec::with_capacity(32),
            deck: Deck::default(),
            home_w,
            home_d,
        })
    }

    fn socket(&self, client: &TpccMysqlClient) -> Option<RawFd> {
        Some(client.conn.raw_fd())
    }

    fn next_transaction(&self, client: &mut TpccMysqlClient, rng: &mut Prng) -> (TxType, Request) {
        let tx = next_type(&self.cumulative, &mut client.deck, rng);
        draw(&self.cfg, tx, client.home_w, client.home_d, rng)
    }

    async fn execute(
        &self,
        client: &mut TpccMysqlClient,
        tx: TxType,
        request: &Request,
    ) -> Result<(), TpccMysqlError> {
        match tx {
            PAYMENT => self.payment(client, request).await,
            ORDER_STATUS => self.order_status(client, request).await,
            DELIVERY => self.delivery(client, request).await,
            super::protocol::STOCK_LEVEL => self.stock_level(client, request).await,
            _ => self.new_order(client, tx, request).await,
        }
    }

    fn classify(&self, error: &TpccMysqlError) -> ErrorClass {
        match error {
            TpccMysqlError::Server(e) => e.error_class(),
            TpccMysqlError::Unexpected(what) => ErrorClass::Counted {
                kind: what.to_string(),
            },
            TpccMysqlError::Conn(_) => ErrorClass::Fatal,
        }
    }

    fn use_ring(&self, client: &mut TpccMysqlClient, ring: &Rc<Ring>) -> Result<(), String> {
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

    fn close(&self, mut client: TpccMysqlClient) {
        client.conn.terminate();
    }
}

#[cfg(test)]
mod tests {
    use super::super::protocol::{Constants, Mode};
    use super::*;

    fn cfg(mode: Mode) -> TpccConfig {
        TpccConfig {
            warehouses: 2,
            mode,
            constants: Constants {
                c_last: 1,
                c_id: 2,
                ol_i_id: 3,
            },
            keying: false,
            weights: None,
        }
    }

    #[test]
    fn the_statements_are_complete_and_the_settings_checked() {
        let sql = statements_sql();
        assert!(sql[st::NO_SS].contains("s_dist_01") && sql[st::NO_SS + 9].contains("s_dist_10"));
        assert_eq!(sql[st::NO_OL].matches('?').count(), MIN_LINES * LINE_PARAMS);
        assert_eq!(
            sql[st::COUNT - 1].matches('?').count(),
            MAX_ITEMS * LINE_PARAMS
        );
        assert_eq!(sql[st::NO_I].matches('?').count(), MAX_ITEMS);
        let p = TpccMysqlProtocol::new(
            "socket=/nonexistent user=u",
            cfg(Mode::Statements),
            "read committed",
        )
        .unwrap();
        assert!(p.session.ends_with("READ COMMITTED"));
        let bad = |r: Result<TpccMysqlProtocol, EngineError>| match r {
            Err(EngineError::Config(m)) => m,
            _ => panic!("not refused"),
        };
        assert!(bad(TpccMysqlProtocol::new(
            "user=u",
            cfg(Mode::Procedures),
            "read committed"
        ))
        .contains("PL/pgSQL"));
        assert!(bad(TpccMysqlProtocol::new(
            "user=u",
            cfg(Mode::Statements),
            "snapshot"
        ))
        .contains("allowed"));
    }
}
