//! A minimal MySQL/MariaDB client (protocol 4.1) for load driving and loading.
//!
//! Why our own codec, not `mysql_async` nor `mysql_common` (benchmarks/README.md
//! says more): a load driver wants one client task owning its socket, the
//! request bytes written straight into the send buffer and the replies read
//! in place; `mysql_async` puts a connection pool, a `Conn` future per call and
//! typed rows between the driver and the socket, and both crates bring serde,
//! regex, big-number and time crates into the build for codecs we do not use.
//! The protocol a load driver needs is small: the handshake
//! (`mysql_native_password`, MariaDB's default for a password user), COM_QUERY,
//! COM_STMT_PREPARE and COM_STMT_EXECUTE with binary parameters and rows,
//! OK/ERR/EOF (CLIENT_DEPRECATE_EOF), multi-results and LOAD DATA LOCAL.
//!
//! The socket layer (epoll, or the thread's io_uring after `use_ring`) is the
//! PostgreSQL client's (`crate::transport`). Commands can be pipelined: put
//! several (`put_execute`, `put_query`), then read one answer per command
//! (`read_result`); the server runs them in order and a failing one does not
//! stop the next, so pipeline only statements that may run whatever the
//! others did (never BEGIN .. COMMIT around a statement that may fail).
//!
//! Errors: a server's ERR packet is `MyError::Server` (the connection goes
//! on); deadlock (1213) and lock wait timeout (1205) are retryable
//! (`ServerError::error_class`), and a lost connection is fatal.

mod codec;
mod conn;

pub use crate::pg::Param;
// native_password: for a client outside this module too (the driver floor's)
pub use codec::{native_password, ErrPacket as ServerError, Outcome};
pub use conn::{MyConn, Stmt, LOCAL_CHUNK_BYTES};

use crate::harness::ErrorClass;
use crate::rowtable::{RowTable, Span};
use std::fmt;
use std::time::Duration;

/// MySQL's error codes a load driver must know.
pub const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
pub const ER_LOCK_DEADLOCK: u16 = 1213;
/// "Record has changed since last read" (sysbench retries it too).
pub const ER_CHECKREAD: u16 = 1020;
pub const ER_DUP_ENTRY: u16 = 1062;

impl ServerError {
    /// How a transaction's error counts: a deadlock (1213) or a lock wait
    /// timeout (1205) is retried (sysbench's --mysql-ignore-errors default adds
    /// 1020), any other error is counted under its code.
    pub fn error_class(&self) -> ErrorClass {
        let kind = self.code.to_string();
        match self.code {
            ER_LOCK_DEADLOCK | ER_LOCK_WAIT_TIMEOUT | ER_CHECKREAD => {
                ErrorClass::Retryable { kind }
            }
            _ => ErrorClass::Counted { kind },
        }
    }
}

/// What can go wrong talking to MySQL.
#[derive(Debug, Clone)]
pub enum MyError {
    /// Bad connection parameters.
    Config(String),
    /// Connecting or authenticating failed.
    Connect(String),
    /// The connection is gone (the server closed it, the socket failed).
    Lost(String),
    /// The server said something this client does not understand.
    Protocol(String),
    /// The server's ERR packet; the connection goes on.
    Server(ServerError),
    /// Stopped on request (a cancelled load).
    Interrupted,
}

impl MyError {
    /// A server error by its class; anything else loses the client.
    pub fn error_class(&self) -> ErrorClass {
        match self {
            MyError::Server(e) => e.error_class(),
            _ => ErrorClass::Fatal,
        }
    }
}

impl fmt::Display for MyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MyError::Config(m) => write!(f, "{m}"),
            MyError::Connect(m) => write!(f, "cannot connect: {m}"),
            MyError::Lost(m) => write!(f, "connection lost: {m}"),
            MyError::Protocol(m) => write!(f, "protocol error: {m}"),
            MyError::Server(e) => e.fmt(f),
            MyError::Interrupted => write!(f, "interrupted"),
        }
    }
}

impl std::error::Error for MyError {}

impl From<MyError> for crate::error::EngineError {
    fn from(e: MyError) -> Self {
        match e {
            MyError::Config(m) => crate::error::EngineError::Config(m),
            MyError::Interrupted => crate::error::EngineError::Interrupted,
            other => crate::error::EngineError::Target(other.to_string()),
        }
    }
}

/// Connection parameters, from key=value text as the PostgreSQL client's
/// conninfo (values quoted with '...' where they hold spaces): `host`,
/// `port` (3306), `socket` (a unix socket's path; then host and port are
/// unused), `user`, `password`, `database` (or `dbname`), `connect_timeout` (s),
/// `read_only` (on: every session is `SET SESSION TRANSACTION READ ONLY`).
#[derive(Clone, PartialEq)]
pub struct MyConnInfo {
    pub host: String,
    pub port: u16,
    pub socket: Option<String>,
    pub user: String,
    pub password: Option<String>,
    pub database: String,
    pub connect_timeout: Duration,
    pub read_only: bool,
}

impl fmt::Debug for MyConnInfo {
    // Never print the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

impl MyConnInfo {
    pub fn parse(text: &str) -> Result<MyConnInfo, MyError> {
        let mut info = MyConnInfo {
            host: "127.0.0.1".into(),
            port: 3306,
            socket: None,
            user: std::env::var("USER").unwrap_or_else(|_| "root".into()),
            password: std::env::var("MYSQL_PWD").ok(),
            database: String::new(),
            connect_timeout: Duration::from_secs(30),
            read_only: false,
        };
        let pairs = crate::pg::conninfo_pairs(text)
            .map_err(|e| MyError::Config(e.to_string().replace("conninfo", "mysql conninfo")))?;
        for (key, value) in pairs {
            match key.as_str() {
                "host" => info.host = value,
                "port" => {
                    info.port = value.parse().map_err(|_| {
                        MyError::Config(format!(
                            "mysql conninfo: port {value:?} is not a port number"
                        ))
                    })?
                }
                "socket" => info.socket = (!value.is_empty()).then_some(value),
                "user" => info.user = value,
                "password" => info.password = Some(value),
                "database" | "dbname" => info.database = value,
                "connect_timeout" => {
                    let s: u64 = value.parse().map_err(|_| {
                        MyError::Config(format!(
                            "mysql conninfo: connect_timeout {value:?} is not seconds"
                        ))
                    })?;
                    info.connect_timeout = Duration::from_secs(s.max(1));
                }
                "read_only" => {
                    info.read_only = match value.as_str() {
                        "on" | "true" | "1" => true,
                        "off" | "false" | "0" => false,
                        _ => {
                            return Err(MyError::Config(format!(
                                "mysql conninfo: read_only {value:?}; allowed: on, off"
                            )))
                        }
                    }
                }
                other => {
                    return Err(MyError::Config(format!(
                        "mysql conninfo: unknown key {other:?}; allowed: host, port, socket, \
                         user, password, database, connect_timeout, read_only"
                    )))
                }
            }
        }
        Ok(info)
    }

    /// Where and who, without the password.
    pub fn display(&self) -> String {
        match &self.socket {
            Some(path) => format!("mysql://{}@unix({path})/{}", self.user, self.database),
            None => format!(
                "mysql://{}@{}:{}/{}",
                self.user, self.host, self.port, self.database
            ),
        }
    }
}

/// One cell of `Rows`: where its bytes are and how to read them.
#[derive(Debug, Clone, Copy)]
struct Cell {
    start: u32,
    /// -1 for NULL.
    len: i32,
    /// The column's type (codec::TYPE_*).
    kind: u8,
    /// Bytes are a binary-protocol number (little-endian), not text.
    binary: bool,
    unsigned: bool,
}

impl Span for Cell {
    fn span(&self) -> (u32, i32) {
        (self.start, self.len)
    }
}

/// The rows of one or more results, without an allocation per value: values
/// in one buffer, and per result (statement) its rows. Text-protocol values
/// are text; binary-protocol integers and floats are decoded by `i64`/`f64`;
/// decimals and strings are text in both.
#[derive(Debug, Default)]
pub struct Rows(RowTable<Cell>);

impl Rows {
    pub fn clear(&mut self) {
        self.0.clear();
    }

    fn push_cell(&mut self, value: Option<&[u8]>, col: &codec::Column, binary: bool) {
        self.0.push(value, |start, len| Cell {
            start,
            len,
            kind: col.kind,
            binary,
            unsigned: col.flags & codec::UNSIGNED_FLAG != 0,
        });
    }

    /// A text-protocol row; false when it is cut short.
    fn push_text_row(&mut self, payload: &[u8], cols: &[codec::Column]) -> bool {
        self.0.begin_row();
        let mut r = codec::Reader::new(payload);
        for col in cols {
            let value = r.lenenc_bytes();
            self.push_cell(value, col, false);
        }
        !r.short
    }

    /// A binary-protocol row (0x00, NULL bitmap, values); false when cut short.
    fn push_binary_row(&mut self, payload: &[u8], cols: &[codec::Column]) -> bool {
        self.0.begin_row();
        let mut r = codec::Reader::new(payload);
        r.u8();
        let bitmap = r.bytes((cols.len() + 9) / 8);
        for (i, col) in cols.iter().enumerate() {
            let bit = i + 2;
            let null = bitmap
                .get(bit / 8)
                .is_some_and(|b| b & (1 << (bit % 8)) != 0);
            if null {
                self.push_cell(None, col, true);
                continue;
            }
            let value = match codec::binary_layout(col.kind) {
                codec::Layout::Fixed(n) => r.bytes(n),
                codec::Layout::Short => {
                    let n = r.u8() as usize;
                    r.bytes(n)
                }
                codec::Layout::LenEnc => r.lenenc_bytes().unwrap_or(&[]),
            };
            self.push_cell(Some(value), col, true);
        }
        !r.short
    }

    fn end_result(&mut self) {
        self.0.end_result();
    }

    /// Results that completed.
    pub fn results(&self) -> usize {
        self.0.results()
    }

    /// Row numbers of result `result`'s rows (empty if it did not complete).
    pub fn result_rows(&self, result: usize) -> std::ops::Range<usize> {
        self.0.result_rows(result)
    }

    fn cell(&self, row: usize, col: usize) -> Option<&Cell> {
        self.0.value(row, col).map(|(cell, _)| cell)
    }

    /// Value `col` of row `row` as the server sent it (text, or a binary
    /// number's little-endian bytes); None for NULL or no such value.
    pub fn get(&self, row: usize, col: usize) -> Option<&[u8]> {
        self.0.value(row, col).map(|(_, bytes)| bytes)
    }

    pub fn str(&self, row: usize, col: usize) -> Option<&str> {
        std::str::from_utf8(self.get(row, col)?).ok()
    }

    pub fn i64(&self, row: usize, col: usize) -> Option<i64> {
        let c = *self.cell(row, col)?;
        let bytes = self.get(row, col)?;
        if c.binary && codec::is_integer(c.kind) {
            let mut v = [0u8; 8];
            v[..bytes.len()].copy_from_slice(bytes);
            let n = bytes.len() as u32 * 8;
            let raw = u64::from_le_bytes(v);
            return Some(if c.unsigned || n == 64 {
                raw as i64
            } else {
                // sign-extend from n bits
                ((raw << (64 - n)) as i64) >> (64 - n)
            });
        }
        if c.binary && matches!(c.kind, codec::TYPE_FLOAT | codec::TYPE_DOUBLE) {
            return self.f64(row, col).map(|f| f as i64);
        }
        std::str::from_utf8(bytes).ok()?.trim().parse().ok()
    }

    pub fn f64(&self, row: usize, col: usize) -> Option<f64> {
        let c = *self.cell(row, col)?;
        let bytes = self.get(row, col)?;
        if c.binary {
            match c.kind {
                codec::TYPE_DOUBLE => return Some(f64::from_le_bytes(bytes.try_into().ok()?)),
                codec::TYPE_FLOAT => return Some(f32::from_le_bytes(bytes.try_into().ok()?) as f64),
                k if codec::is_integer(k) => return self.i64(row, col).map(|v| v as f64),
                _ => {}
            }
        }
        std::str::from_utf8(bytes).ok()?.trim().parse().ok()
    }

    /// A decimal value in units of 10^-scale (DECIMAL columns are text in
    /// both protocols).
    pub fn fixed(&self, row: usize, col: usize, scale: u32) -> Option<i64> {
        let c = *self.cell(row, col)?;
        if c.binary && codec::is_integer(c.kind) {
            return self.i64(row, col)?.checked_mul(10i64.pow(scale));
        }
        crate::pg::parse_fixed(self.get(row, col)?, scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conninfo_parses_and_hides_the_password() {
        let info = MyConnInfo::parse(
            "socket=/run/x/mysqld.sock user=perflab password='a b' database=perflab_oltp",
        )
        .unwrap();
        assert_eq!(info.socket.as_deref(), Some("/run/x/mysqld.sock"));
        assert_eq!(info.password.as_deref(), Some("a b"));
        assert!(!format!("{info:?}").contains("a b"));
        let tcp =
            MyConnInfo::parse("host=127.0.0.1 port=3307 user=u dbname=d read_only=on").unwrap();
        assert_eq!(
            (tcp.port, tcp.database.as_str(), tcp.socket),
            (3307, "d", None)
        );
        assert!(tcp.read_only && !info.read_only);
        let bad = MyConnInfo::parse("hots=x").unwrap_err().to_string();
        assert!(bad.contains("allowed: host"), "{bad}");
        assert!(MyConnInfo::parse("port=x").is_err());
    }

    #[test]
    fn errors_are_classified_by_code() {
        let err = |code| {
            MyError::Server(ServerError {
                code,
                sqlstate: *b"40001",
                message: String::new(),
            })
        };
        assert!(
            matches!(err(1213).error_class(), ErrorClass::Retryable { kind } if kind == "1213")
        );
        assert!(matches!(
            err(1205).error_class(),
            ErrorClass::Retryable { .. }
        ));
        assert!(matches!(err(1062).error_class(), ErrorClass::Counted { kind } if kind == "1062"));
        assert_eq!(MyError::Lost("x".into()).error_class(), ErrorClass::Fatal);
    }

    #[test]
    fn binary_and_text_rows_decode() {
        let cols = [
            codec::Column {
                kind: codec::TYPE_LONG,
                flags: 0,
            },
            codec::Column {
                kind: 0xf6,
                flags: 0,
            }, // NEWDECIMAL
            codec::Column {
                kind: codec::TYPE_VAR_STRING,
                flags: 0,
            },
            codec::Column {
                kind: codec::TYPE_TINY,
                flags: codec::UNSIGNED_FLAG,
            },
        ];
        let mut rows = Rows::default();
        // binary: header, bitmap (4 columns + 2 bits -> 1 byte, column 2 NULL), values
        let mut p = vec![0x00, 0b0001_0000];
        p.extend_from_slice(&(-5i32).to_le_bytes());
        p.extend_from_slice(b"\x0512.34");
        p.push(200);
        assert!(rows.push_binary_row(&p, &cols));
        rows.end_result();
        // text: lenenc strings, 0xfb for NULL
        assert!(rows.push_text_row(b"\x0242\xfb\x01x\x01\x37", &cols));
        rows.end_result();
        assert_eq!(rows.results(), 2);
        assert_eq!(rows.i64(0, 0), Some(-5));
        assert_eq!(rows.fixed(0, 1, 2), Some(1234));
        assert_eq!(rows.get(0, 2), None);
        assert_eq!(rows.i64(0, 3), Some(200));
        assert_eq!(rows.result_rows(1), 1..2);
        assert_eq!(rows.i64(1, 0), Some(42));
        assert_eq!(rows.fixed(1, 0, 2), Some(4200));
        assert_eq!(rows.get(1, 1), None);
        assert_eq!(rows.str(1, 2), Some("x"));
        assert!(!rows.push_binary_row(&[0x00], &cols[..1]));
    }
}
