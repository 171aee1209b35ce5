//! YCSB's operations on PostgreSQL: each statement prepared once per
//! connection and each operation's statement its own round trip (YCSB's
//! JDBC binding and go-ycsb's pg driver run them so); read-modify-write
//! is its read's round trip, then its update's.

use super::{prepare_failed, Draws, Op, Request, Slot, Sql, OPERATIONS};
use crate::harness::{EngineError, ErrorClass, Protocol, TxType};
use crate::pg::{ConnInfo, Param, PgConn, PgError, SqlError};
use crate::random::Prng;
use crate::uring::Ring;
use std::fmt;
use std::os::fd::RawFd;
use std::rc::Rc;

pub struct YcsbPgProtocol {
    info: ConnInfo,
    draws: Draws,
    /// Statement names of the updates, one per field.
    updates: Vec<String>,
}

impl YcsbPgProtocol {
    pub fn new(conninfo: &str, draws: Draws) -> Result<YcsbPgProtocol, EngineError> {
        let info = ConnInfo::parse(conninfo).map_err(|e| EngineError::Config(e.to_string()))?;
        let updates = (0..draws.config.field_count)
            .map(|i| format!("u{i}"))
            .collect();
        Ok(YcsbPgProtocol {
            info,
            draws,
            updates,
        })
    }

    pub fn draws(&self) -> &Draws {
        &self.draws
    }
}

pub struct YcsbPgClient {
    conn: PgConn,
    chooser: super::KeyChooser,
    key: Vec<u8>,
    values: Vec<u8>,
}

#[derive(Debug)]
pub enum YcsbPgError {
    Sql(SqlError),
    Pg(PgError),
}

impl fmt::Display for YcsbPgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            YcsbPgError::Sql(e) => e.fmt(f),
            YcsbPgError::Pg(e) => e.fmt(f),
        }
    }
}

impl From<PgError> for YcsbPgError {
    fn from(e: PgError) -> Self {
        YcsbPgError::Pg(e)
    }
}

/// One statement's round trip; an SQL error is the operation's.
async fn one(conn: &mut PgConn) -> Result<(), YcsbPgError> {
    conn.put_execute();
    conn.put_sync();
    match conn.round_trip().await? {
        Some(err) => Err(YcsbPgError::Sql(err)),
        None => Ok(()),
    }
}

impl Protocol for YcsbPgProtocol {
    type Client = YcsbPgClient;
    type Request = Request;
    type Error = YcsbPgError;
    const SUPPORTS_RING: bool = true;
    const TIMERS_IN_FLIGHT: bool = false;

    fn transaction_types(&self) -> &[&'static str] {
        &OPERATIONS
    }

    fn read_only(&self) -> bool {
        self.draws.config.workload.read_only()
    }

    async fn connect(&self, _client: u32) -> Result<YcsbPgClient, YcsbPgError> {
        let mut conn = PgConn::connect(&self.info).await?;
        let sql = Sql::new(&self.draws.config, true);
        for (slot, text) in sql.used(&self.draws.config.workload) {
            let name = match slot {
                Slot::Read => "r",
                Slot::Scan => "s",
                Slot::Insert => "i",
                Slot::Update(i) => self.updates[i].as_str(),
            };
            conn.put_parse(name, text);
        }
        conn.put_sync();
        if let Some(err) = conn.round_trip().await? {
            return Err(YcsbPgError::Pg(PgError::Connect(prepare_failed(
                &self.draws.config,
                err,
            ))));
        }
        let len = self.draws.config.field_length as usize;
        Ok(YcsbPgClient {
            conn,
            chooser: self.draws.chooser(),
            key: Vec::with_capacity(32),
            values: Vec::with_capacity(len * self.draws.config.field_count as usize),
        })
    }

    fn socket(&self, client: &YcsbPgClient) -> Option<RawFd> {
        Some(client.conn.raw_fd())
    }

    fn server_pid(&self, client: &YcsbPgClient) -> Option<u32> {
        client.conn.local_backend_pid()
    }

    // A YcsbPgClient is a PgConn (a socket and its buffers once it has left
    // its thread), owned buffers and its key chooser: nothing tied to a thread.
    const MIGRATES: bool = true;

    fn leave_thread(&self, client: &mut YcsbPgClient) {
        client.conn.leave_thread();
    }

    fn join_thread(
        &self,
        client: &mut YcsbPgClient,
        ring: Option<&Rc<Ring>>,
    ) -> Result<(), String> {
        client.conn.join_thread(ring).map_err(|e| e.to_string())
    }

    fn next_transaction(&self, client: &mut YcsbPgClient, rng: &mut Prng) -> (TxType, Request) {
        let r = self.draws.draw(&mut client.chooser, rng);
        (r.op as TxType, r)
    }

    async fn execute(
        &self,
        client: &mut YcsbPgClient,
        _tx: TxType,
        r: &Request,
    ) -> Result<(), YcsbPgError> {
        let YcsbPgClient {
            conn, key, values, ..
        } = client;
        self.draws.fill(r, key, values);
        let key = Param::Text(&key[..]);
        match r.op {
            Op::Read => {
                conn.put_bind("r", &[key]);
                one(conn).await
            }
            Op::Scan => {
                conn.put_bind("s", &[key, Param::Int(r.scan_length as i64)]);
                one(conn).await
            }
            Op::Update => {
                conn.put_bind(
                    &self.updates[r.field as usize],
                    &[Param::Text(&values[..]), key],
                );
                one(conn).await
            }
            Op::ReadModifyWrite => {
                conn.put_bind("r", &[key]);
                one(conn).await?;
                conn.put_bind(
                    &self.updates[r.field as usize],
                    &[Param::Text(&values[..]), key],
                );
                one(conn).await
            }
            Op::Insert => {
                let len = self.draws.config.field_length as usize;
                let mut params = Vec::with_capacity(1 + values.len() / len);
                params.push(key);
                params.extend(values.chunks(len).map(Param::Text));
                conn.put_bind("i", &params);
                let done = one(conn).await;
                self.draws.inserts.acknowledge(r.key);
                done
            }
        }
    }

    fn classify(&self, error: &YcsbPgError) -> ErrorClass {
        match error {
            YcsbPgError::Sql(e) => e.error_class(),
            YcsbPgError::Pg(_) => ErrorClass::Fatal,
        }
    }

    fn use_ring(&self, client: &mut YcsbPgClient, ring: &Rc<Ring>) -> Result<(), String> {
        client
            .conn
            .use_ring(ring.clone())
            .map_err(|e| e.to_string())
    }

    fn close(&self, mut client: YcsbPgClient) {
        client.conn.terminate();
    }
}
