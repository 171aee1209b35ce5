//! Payment (clause 2.5): its draws (2.5.1; 15% for a remote customer, 60%
//! by last name) and its run.

use super::sql::{pr, st};
use super::{
    customer_by_name, exchange, other_warehouse, put, Constants, Mode, Request, TpccClient,
    TpccError, TpccProtocol,
};
use crate::pg::Param;
use crate::random::Prng;
use crate::tpcc::DISTRICTS_PER_WAREHOUSE;

impl Request {
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
}

impl TpccProtocol {
    pub(super) async fn payment(&self, c: &mut TpccClient, r: &Request) -> Result<(), TpccError> {
        let (conn, rows, s) = (&mut c.conn, &mut c.rows, &mut c.scratch);
        s.clear();
        if r.c_id == 0 {
            crate::tpcc::gen::write_last_name(s, r.c_last);
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
            customer_by_name(conn, rows, st::P_CN, &[cw, cd, Param::Text(s)], 3).await?
        } else {
            r.c_id
        };
        let id = Param::Int(c_id);
        put(conn, st::P_C, &[cw, cd, id, amount, d, w]);
        put(conn, st::P_H, &[id, cd, cw, d, w, amount]);
        put(conn, st::COMMIT, &[]);
        exchange(conn, rows).await
    }
}
