//! Delivery (clause 2.7), run in the foreground: the oldest new order of
//! each district, its carrier, lines and customer, in three round trips.

use super::sql::{pr, st};
use super::{exchange, put, Mode, Request, TpccClient, TpccError, TpccProtocol};
use crate::pg::Param;
use crate::tpcc::DISTRICTS_PER_WAREHOUSE;

impl TpccProtocol {
    pub(super) async fn delivery(&self, c: &mut TpccClient, r: &Request) -> Result<(), TpccError> {
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
}
