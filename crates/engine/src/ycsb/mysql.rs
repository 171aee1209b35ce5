//! YCSB's operations on MySQL and MariaDB: each statement prepared once per
//! connection (binary protocol, as go-ycsb's mysql driver), each operation's
//! statement its own round trip; inserts are INSERT IGNORE (go-ycsb's), so
//! a run again on a table that kept an earlier run's rows goes on.

use super::{prepare_failed, Draws, KeyChooser, Op, Request, Slot, Sql, OPERATIONS};
use crate::error::EngineError;
use crate::harness::{ErrorClass, Protocol, TxType};
use crate::mysql::{MyConn, MyConnInfo, MyError, Param, Stmt};
use crate::random::Prng;
use crate::uring::Ring;
use std::os::fd::RawFd;
use std::rc::Rc;

pub struct YcsbMysqlProtocol {
    info: MyConnInfo,
    draws: Draws,
}

impl YcsbMysqlProtocol {
    pub fn new(conninfo: &str, draws: Draws) -> Result<YcsbMysqlProtocol, EngineError> {
        Ok(YcsbMysqlProtocol {
            info: MyConnInfo::parse(conninfo)?,
            draws,
        })
    }

    pub fn draws(&self) -> &Draws {
        &self.draws
    }
}

pub struct YcsbMysqlClient {
    conn: MyConn,
    read: Option<Stmt>,
    scan: Option<Stmt>,
    insert: Option<Stmt>,
    updates: Vec<Stmt>,
    chooser: KeyChooser,
    key: Vec<u8>,
    values: Vec<u8>,
    /// The server thread serving the connection, when it could be told
    /// (`MyConn::find_server_thread`, in a pinned run: `Protocol::locate`).
    server_thread: Option<u32>,
}

fn unprepared(what: &str) -> MyError {
    MyError::Protocol(format!("YCSB's {what} statement was not prepared"))
}

/// One statement's answer (every statement autocommits: none leaves a
/// transaction open).
async fn one(conn: &mut MyConn) -> Result<(), MyError> {
    conn.read_result(None).await.map(|_| ())
}

impl Protocol for YcsbMysqlProtocol {
    type Client = YcsbMysqlClient;
    type Request = Request;
    type Error = MyError;
    const SUPPORTS_RING: bool = true;
    const TIMERS_IN_FLIGHT: bool = false;

    fn transaction_types(&self) -> &[&'static str] {
        &OPERATIONS
    }

    fn read_only(&self) -> bool {
        self.draws.config.workload.read_only()
    }

    async fn connect(&self, _client: u32) -> Result<YcsbMysqlClient, MyError> {
        let mut conn = MyConn::connect(&self.info).await?;
        let sql = Sql::new(&self.draws.config, false);
        // every statement prepared in one round trip, in this order
        let used = sql.used(&self.draws.config.workload);
        let texts: Vec<&str> = used.iter().map(|(_, text)| *text).collect();
        let prepared = conn
            .prepare_all(&texts)
            .await
            .map_err(|err| MyError::Connect(prepare_failed(&self.draws.config, err)))?;
        let (mut read, mut scan, mut insert, mut updates) = (None, None, None, Vec::new());
        for ((slot, _), stmt) in used.iter().zip(prepared) {
            match slot {
                Slot::Read => read = Some(stmt),
                Slot::Scan => scan = Some(stmt),
                Slot::Insert => insert = Some(stmt),
                Slot::Update(_) => updates.push(stmt),
            }
        }
        let len = self.draws.config.field_length as usize;
        Ok(YcsbMysqlClient {
            conn,
            read,
            scan,
            insert,
            updates,
            chooser: self.draws.chooser(),
            key: Vec::with_capacity(32),
            values: Vec::with_capacity(len * self.draws.config.field_count as usize),
            server_thread: None,
        })
    }

    fn socket(&self, client: &YcsbMysqlClient) -> Option<RawFd> {
        Some(client.conn.raw_fd())
    }

    fn server_pid(&self, client: &YcsbMysqlClient) -> Option<u32> {
        client.server_thread
    }

    async fn locate(&self, client: &mut YcsbMysqlClient) {
        client.server_thread = client.conn.find_server_thread().await;
    }

    // No MIGRATES: as oltp's MySQL protocol (MariaDB's connection threads do
    // not stay on a CPU as PostgreSQL's backends do).

    fn next_transaction(&self, client: &mut YcsbMysqlClient, rng: &mut Prng) -> (TxType, Request) {
        let r = self.draws.draw(&mut client.chooser, rng);
        (r.op as TxType, r)
    }

    async fn execute(
        &self,
        client: &mut YcsbMysqlClient,
        _tx: TxType,
        r: &Request,
    ) -> Result<(), MyError> {
        let YcsbMysqlClient {
            conn,
            read,
            scan,
            insert,
            updates,
            key,
            values,
            ..
        } = client;
        self.draws.fill(r, key, values);
        let key = Param::Text(&key[..]);
        let update = |field: u32| {
            updates
                .get(field as usize)
                .ok_or_else(|| unprepared("update"))
        };
        match r.op {
            Op::Read => {
                conn.put_execute(read.as_ref().ok_or_else(|| unprepared("read"))?, &[key]);
                one(conn).await
            }
            Op::Scan => {
                let stmt = scan.as_ref().ok_or_else(|| unprepared("scan"))?;
                conn.put_execute(stmt, &[key, Param::Int(r.scan_length as i64)]);
                one(conn).await
            }
            Op::Update => {
                conn.put_execute(update(r.field)?, &[Param::Text(&values[..]), key]);
                one(conn).await
            }
            Op::ReadModifyWrite => {
                conn.put_execute(read.as_ref().ok_or_else(|| unprepared("read"))?, &[key]);
                one(conn).await?;
                conn.put_execute(update(r.field)?, &[Param::Text(&values[..]), key]);
                one(conn).await
            }
            Op::Insert => {
                let stmt = insert.as_ref().ok_or_else(|| unprepared("insert"))?;
                let len = self.draws.config.field_length as usize;
                let mut params = Vec::with_capacity(1 + values.len() / len);
                params.push(key);
                params.extend(values.chunks(len).map(Param::Text));
                conn.put_execute(stmt, &params);
                let done = one(conn).await;
                self.draws.inserts.acknowledge(r.key);
                done
            }
        }
    }

    fn classify(&self, error: &MyError) -> ErrorClass {
        error.error_class()
    }

    fn use_ring(&self, client: &mut YcsbMysqlClient, ring: &Rc<Ring>) -> Result<(), String> {
        client
            .conn
            .use_ring(ring.clone())
            .map_err(|e| e.to_string())
    }

    fn close(&self, mut client: YcsbMysqlClient) {
        client.conn.terminate();
    }
}
