//! sysbench's OLTP workload (`oltp_*.lua`, sysbench 1.0.20) on PostgreSQL:
//! its tables `sbtest1..N` (`load`) and its scripts as a protocol of the load
//! harness (`protocol`).

pub mod load;
pub mod protocol;

pub use protocol::{KeyRand, OltpProtocol, RandType, Script};
