//! New-Order (clause 2.4): its draws (2.4.1) and its run, two round trips
//! in statements mode (the items read in one statement, the stock and order
//! lines written in one per district).

use super::sql::{pr, st};
use super::{
    exchange, int_array, other_warehouse, put, rollback, Constants, Mode, Request, TpccClient,
    TpccError, TpccProtocol, MAX_ITEMS, NEW_ORDER_ROLLBACK, RAISE_EXCEPTION, UNUSED_ITEM,
};
use crate::harness::TxType;
use crate::pg::{write_fixed, Param};
use crate::random::Prng;
use crate::tpcc::gen::nurand;
use crate::tpcc::{DISTRICTS_PER_WAREHOUSE, ITEMS};

impl Request {
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
}

impl Request {
    /// Each line's amount, quantity x price in cents, in order-line order,
    /// from the items read as (i_id, i_price in cents); -1 for a line whose
    /// item was not found (an item may appear twice, from two supply
    /// warehouses).
    pub(crate) fn line_amounts(
        &self,
        items: impl Iterator<Item = (Option<i64>, Option<i64>)>,
    ) -> [i64; MAX_ITEMS] {
        let mut amounts = [-1i64; MAX_ITEMS];
        for (i, price) in items {
            if let (Some(i), Some(price)) = (i, price) {
                for ((amount, &item), &q) in amounts
                    .iter_mut()
                    .zip(&self.items)
                    .zip(&self.quantities)
                    .take(self.ol_cnt)
                {
                    if item as i64 == i {
                        *amount = price * q as i64;
                    }
                }
            }
        }
        amounts
    }
}

impl TpccProtocol {
    pub(super) async fn new_order(
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
        let amounts = r.line_amounts(
            rows.result_rows(4)
                .map(|row| (rows.i64(row, 0), rows.fixed(row, 1, 2))),
        );
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
}
