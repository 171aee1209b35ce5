//! pgbench's built-in scripts on PostgreSQL, as a protocol of the load harness.
//!
//! One transaction is the whole script, sent statement by statement as
//! pgbench sends it (simple, extended or prepared), each waiting for its
//! ReadyForQuery. The first error ends the try (pgbench does the same),
//! after a ROLLBACK when a transaction block is open. Serialization failures
//! and deadlocks are retryable (pgbench's `--max-tries`); other SQL errors
//! fail the transaction and the client goes on; a lost connection ends the
//! client.

use super::{compile_script, Draws, QueryMode, Script, Statement};
use crate::harness::{EngineError, ErrorClass, Protocol, TxType};
use crate::pg::{ConnInfo, PgConn, PgError, SqlError};
use crate::random::Prng;
use crate::uring::Ring;
use std::fmt;
use std::os::fd::RawFd;
use std::rc::Rc;

pub struct TpcbProtocol {
    info: ConnInfo,
    script: Script,
    scale: u32,
    mode: QueryMode,
    statements: Vec<Statement>,
    /// The one transaction type: the script.
    types: [&'static str; 1],
}

impl TpcbProtocol {
    pub fn new(
        conninfo: &str,
        script: Script,
        scale: u32,
        mode: QueryMode,
    ) -> Result<TpcbProtocol, EngineError> {
        if scale == 0 {
            return Err(EngineError::Config("scale must be at least 1".into()));
        }
        let info = ConnInfo::parse(conninfo).map_err(|e| EngineError::Config(e.to_string()))?;
        Ok(TpcbProtocol {
            info,
            script,
            scale,
            mode,
            statements: compile_script(script),
            types: [script.name()],
        })
    }
}

pub struct TpcbClient {
    conn: PgConn,
    /// The simple protocol's statement text, rebuilt per statement.
    scratch: Vec<u8>,
}

#[derive(Debug)]
pub enum TpcbError {
    /// The server answered a statement with an error.
    Sql(SqlError),
    /// The connection failed (lost, or never made).
    Pg(PgError),
}

impl fmt::Display for TpcbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TpcbError::Sql(e) => e.fmt(f),
            TpcbError::Pg(e) => e.fmt(f),
        }
    }
}

impl From<PgError> for TpcbError {
    fn from(e: PgError) -> Self {
        TpcbError::Pg(e)
    }
}

impl Protocol for TpcbProtocol {
    type Client = TpcbClient;
    type Request = Draws;
    type Error = TpcbError;
    const SUPPORTS_RING: bool = true;
    const TIMERS_IN_FLIGHT: bool = false;

    fn transaction_types(&self) -> &[&'static str] {
        &self.types
    }

    fn read_only(&self) -> bool {
        self.script == Script::SelectOnly
    }

    async fn connect(&self, _client: u32) -> Result<TpcbClient, TpcbError> {
        let mut conn = PgConn::connect(&self.info).await?;
        if self.mode == QueryMode::Prepared {
            for st in &self.statements {
                conn.put_parse(&st.prepared_name, &st.positional_sql);
            }
            conn.put_sync();
            if let Some(err) = conn.round_trip().await? {
                return Err(TpcbError::Pg(PgError::Connect(format!(
                    "preparing the {} statements failed: {err} (is the data loaded?)",
                    self.script.name()
                ))));
            }
        }
        Ok(TpcbClient {
            conn,
            scratch: Vec::with_capacity(256),
        })
    }

    fn socket(&self, client: &TpcbClient) -> Option<RawFd> {
        Some(client.conn.raw_fd())
    }

    fn server_pid(&self, client: &TpcbClient) -> Option<u32> {
        client.conn.local_backend_pid()
    }

    // A TpcbClient is a PgConn (a socket and its buffers once it has left its
    // thread) and owned buffers: nothing tied to a thread.
    const MIGRATES: bool = true;

    fn leave_thread(&self, client: &mut TpcbClient) {
        client.conn.leave_thread();
    }

    fn join_thread(&self, client: &mut TpcbClient, ring: Option<&Rc<Ring>>) -> Result<(), String> {
        client.conn.join_thread(ring).map_err(|e| e.to_string())
    }

    fn next_transaction(&self, _client: &mut TpcbClient, rng: &mut Prng) -> (TxType, Draws) {
        (0, Draws::draw(self.script, self.scale, rng))
    }

    async fn execute(
        &self,
        client: &mut TpcbClient,
        _tx: TxType,
        draws: &Draws,
    ) -> Result<(), TpcbError> {
        let conn = &mut client.conn;
        for st in &self.statements {
            if let Some(err) =
                execute_statement(conn, st, self.mode, draws, &mut client.scratch).await?
            {
                if conn.tx_status != b'I' {
                    // Leave the failed transaction block before anything else.
                    conn.put_query("ROLLBACK");
                    conn.round_trip().await?;
                }
                return Err(TpcbError::Sql(err));
            }
        }
        Ok(())
    }

    fn classify(&self, error: &TpcbError) -> ErrorClass {
        match error {
            TpcbError::Sql(e) => e.error_class(),
            TpcbError::Pg(_) => ErrorClass::Fatal,
        }
    }

    fn use_ring(&self, client: &mut TpcbClient, ring: &Rc<Ring>) -> Result<(), String> {
        client
            .conn
            .use_ring(ring.clone())
            .map_err(|e| e.to_string())
    }

    fn close(&self, mut client: TpcbClient) {
        client.conn.terminate();
    }
}

/// Send one statement of the script and wait for its ReadyForQuery.
async fn execute_statement(
    conn: &mut PgConn,
    st: &Statement,
    mode: QueryMode,
    draws: &Draws,
    scratch: &mut Vec<u8>,
) -> Result<Option<SqlError>, PgError> {
    let mut values = [0i64; 4];
    for (slot, var) in values.iter_mut().zip(&st.params) {
        *slot = draws.get(*var);
    }
    let values = &values[..st.params.len()];
    match mode {
        QueryMode::Simple => {
            scratch.clear();
            st.write_simple(draws, scratch);
            conn.put_query_bytes(scratch);
        }
        QueryMode::Extended => {
            conn.put_parse("", &st.positional_sql);
            conn.put_bind_i64("", values);
            conn.put_execute();
            conn.put_sync();
        }
        QueryMode::Prepared => {
            conn.put_bind_i64(&st.prepared_name, values);
            conn.put_execute();
            conn.put_sync();
        }
    }
    conn.round_trip().await
}
