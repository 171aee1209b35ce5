//! Order-Status (clause 2.6): its draws (2.6.1) and its run.

use super::sql::{pr, st};
use super::{
    customer_by_name, exchange, put, Constants, Mode, Request, TpccClient, TpccError, TpccProtocol,
};
use crate::pg::Param;
use crate::random::Prng;
use crate::tpcc::DISTRICTS_PER_WAREHOUSE;

impl Request {
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

impl TpccProtocol {
    pub(super) async fn order_status(
        &self,
        c: &mut TpccClient,
        r: &Request,
    ) -> Result<(), TpccError> {
        let (conn, rows, s) = (&mut c.conn, &mut c.rows, &mut c.scratch);
        s.clear();
        if r.c_id == 0 {
            crate::tpcc::gen::write_last_name(s, r.c_last);
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
            customer_by_name(conn, rows, st::OS_CN, &[w, d, Param::Text(s)], 1).await?
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
}
