//! sysbench's OLTP workload (`oltp_*.lua`, sysbench 1.0.20) on PostgreSQL
//! and on MySQL/MariaDB: its tables `sbtest1..N` (`load`) and its scripts as
//! a protocol of the load harness (`protocol` for PostgreSQL, `mysql` for
//! MySQL, the same draws).

pub mod load;
pub mod mysql;
pub mod protocol;

pub use mysql::{LoadMethod, MysqlOltpProtocol};
pub use protocol::{KeyRand, OltpProtocol, RandType, Script};

/// Which server the workload drives (each with its own client and SQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    Postgres,
    Mysql,
}

impl std::str::FromStr for Server {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "postgres" => Ok(Server::Postgres),
            "mysql" => Ok(Server::Mysql),
            other => Err(format!(
                "server {other:?} is unknown; allowed: postgres, mysql"
            )),
        }
    }
}
