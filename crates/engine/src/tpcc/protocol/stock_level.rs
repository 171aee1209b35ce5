//! Stock-Level (clause 2.8): one statement, the district's next order id
//! read inside it.

use super::sql::{pr, st};
use super::{exchange, put, Mode, Request, TpccClient, TpccError, TpccProtocol};
use crate::pg::Param;

impl TpccProtocol {
    pub(super) async fn stock_level(
        &self,
        c: &mut TpccClient,
        r: &Request,
    ) -> Result<(), TpccError> {
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
