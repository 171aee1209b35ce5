//! TPC-C (standard specification 5.11): the data rules (`gen`), the initial
//! database streamed with COPY (`load`), and the five transactions as a
//! protocol of the load harness, on PostgreSQL (`protocol`) and on MySQL and
//! MariaDB (`mysql`). The stored procedures' contract
//! with the Python side is in `PROCEDURES.md` beside this file.

pub mod gen;
pub mod load;
pub mod mysql;
pub mod protocol;

pub use mysql::TpccMysqlProtocol;
pub use protocol::TpccProtocol;

/// Clause 4.3.3.1's cardinalities.
pub const ITEMS: i64 = 100_000;
pub const DISTRICTS_PER_WAREHOUSE: i64 = 10;
pub const CUSTOMERS_PER_DISTRICT: i64 = 3_000;
pub const ORDERS_PER_DISTRICT: i64 = 3_000;
/// Orders from this o_id on are undelivered (new_order rows, null carrier).
pub const NEW_ORDERS_FROM: i64 = 2_101;
