//! One MySQL or MariaDB connection: the handshake, text queries, prepared
//! statements with binary parameters and rows, pipelining, LOAD DATA LOCAL.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::rc::Rc;

use super::codec::{self, Column, Outcome};
use super::{MyConnInfo, MyError, Rows};
use crate::pg::Param;
use crate::sys;
use crate::transport::{Lost, Sock, Transport};
use crate::uring::Ring;

/// A prepared statement of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stmt {
    pub id: u32,
    pub params: u16,
    pub columns: u16,
}

/// Round trips that `MyConn::find_server_thread` watches, and the lock
/// that keeps two connections of this process from looking at once.
const IDENTIFY_ROUND_TRIPS: u64 = 8;
static IDENTIFYING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// LOAD DATA LOCAL's packets: large enough that framing costs nothing.
pub const LOCAL_CHUNK_BYTES: usize = 256 * 1024;

/// One server connection, driven from a tokio runtime with IO.
pub struct MyConn {
    t: Transport,
    capabilities: u32,
    /// Status flags of the last OK or EOF (SERVER_STATUS_IN_TRANS, ...).
    pub status: u16,
    /// The server's version string and this session's id (CONNECTION_ID()).
    pub server_version: String,
    pub connection_id: u32,
    /// Per command sent and not yet answered: whether its rows are binary
    /// (COM_STMT_EXECUTE) or text (COM_QUERY).
    pending: VecDeque<bool>,
    /// The current result set's columns.
    cols: Vec<Column>,
    /// The next packet's expected sequence id.
    seq: u8,
}

fn lost(l: Lost) -> MyError {
    MyError::Lost(l.0)
}

const UNSUPPORTED_PLUGIN: &str = "perflab's MySQL client speaks mysql_native_password only";

fn plugin_fix(plugin: &str, user: &str) -> MyError {
    MyError::Connect(format!(
        "the server asks for authentication plugin {plugin}, and {UNSUPPORTED_PLUGIN}; \
         fix: give user {user} a mysql_native_password password (MariaDB: ALTER USER {user} \
         IDENTIFIED VIA mysql_native_password USING PASSWORD('...'); MySQL 8: ALTER USER {user} \
         IDENTIFIED WITH mysql_native_password BY '...')"
    ))
}

impl MyConn {
    /// Connect and authenticate; must run inside a tokio runtime with IO.
    pub async fn connect(info: &MyConnInfo) -> Result<MyConn, MyError> {
        match tokio::time::timeout(info.connect_timeout, Self::connect_inner(info)).await {
            Ok(result) => result,
            Err(_) => Err(MyError::Connect(format!(
                "{}: no answer within {} s",
                info.display(),
                info.connect_timeout.as_secs()
            ))),
        }
    }

    async fn connect_inner(info: &MyConnInfo) -> Result<MyConn, MyError> {
        let where_ = info.display();
        let sock = Sock::connect(info.socket.as_deref(), &info.host, info.port)
            .await
            .map_err(|e| MyError::Connect(format!("{where_}: {e}")))?;
        let mut conn = MyConn {
            t: Transport::new(sock).map_err(|e| MyError::Connect(e.to_string()))?,
            capabilities: 0,
            status: 0,
            server_version: String::new(),
            connection_id: 0,
            pending: VecDeque::new(),
            cols: Vec::new(),
            seq: 0,
        };
        conn.handshake(info).await.map_err(|e| match e {
            MyError::Connect(m) => MyError::Connect(format!("{where_}: {m}")),
            MyError::Server(err) => MyError::Connect(format!("{where_}: {err}")),
            other => MyError::Connect(format!("{where_}: {other}")),
        })?;
        if info.read_only {
            conn.query("SET SESSION TRANSACTION READ ONLY").await?;
        }
        Ok(conn)
    }

    async fn handshake(&mut self, info: &MyConnInfo) -> Result<(), MyError> {
        let (s, e) = self.next_packet().await?;
        let hello = codec::parse_handshake(&self.t.rbuf[s..e]).map_err(MyError::Connect)?;
        if hello.capabilities & codec::CLIENT_PROTOCOL_41 == 0 {
            return Err(MyError::Connect(
                "the server does not speak protocol 4.1 (MySQL 4.1 or later, any MariaDB)".into(),
            ));
        }
        let mut wanted = codec::CLIENT_WANTS;
        if !info.database.is_empty() {
            wanted |= codec::CLIENT_CONNECT_WITH_DB;
        }
        self.capabilities = wanted & hello.capabilities;
        self.server_version = hello.server_version;
        self.connection_id = hello.connection_id;
        let password = info.password.as_deref().unwrap_or("").as_bytes();
        let native = "mysql_native_password";
        let auth = codec::native_password(password, &hello.scramble);
        codec::handshake_response(
            &mut self.t.wbuf,
            self.capabilities,
            &info.user,
            &auth,
            &info.database,
            native,
        );
        self.t.flush().await.map_err(lost)?;
        loop {
            let (s, e) = self.next_packet().await?;
            let payload = &self.t.rbuf[s..e];
            match payload.first() {
                Some(0x00) => {
                    self.status = codec::parse_ok(payload).status;
                    return Ok(());
                }
                Some(0xff) => return Err(MyError::Server(codec::parse_err(payload))),
                Some(0xfe) => {
                    // AuthSwitchRequest: the user's plugin and fresh data.
                    let mut r = codec::Reader::new(&payload[1..]);
                    let plugin = String::from_utf8_lossy(r.cstr()).into_owned();
                    let data = r.rest();
                    let data = data.strip_suffix(&[0]).unwrap_or(data).to_vec();
                    if plugin != native {
                        return Err(plugin_fix(&plugin, &info.user));
                    }
                    let auth = codec::native_password(password, &data);
                    codec::packet(&mut self.t.wbuf, self.seq, &auth);
                    self.t.flush().await.map_err(lost)?;
                }
                Some(0x01) => {
                    // AuthMoreData: only caching_sha2_password and its kin send it.
                    return Err(plugin_fix(&hello.auth_plugin, &info.user));
                }
                _ => {
                    return Err(MyError::Protocol(
                        "an unexpected packet during authentication".into(),
                    ))
                }
            }
        }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.t.raw_fd()
    }

    /// From now on, do round trips through `ring` (the socket leaves tokio's
    /// epoll): a read sends what was put before it in the same submission.
    pub fn use_ring(&mut self, ring: Rc<Ring>) -> Result<(), MyError> {
        self.t.use_ring(ring).map_err(MyError::Protocol)
    }

    /// The server thread that serves this connection, on a server on this
    /// machine reached by its unix socket with one thread per connection
    /// (MariaDB's and MySQL's default), so that the harness can sample
    /// where it runs (`Protocol::server_pid`). The protocol names no OS
    /// thread (a connection id is not one), so it is found by watching:
    /// of the server's threads (the socket's peer process), the only one
    /// put on a CPU for at least half of IDENTIFY_ROUND_TRIPS round trips
    /// (each wakes the connection's thread once, unless its answer came
    /// before it slept). One connection looks at a time in this process;
    /// None when the server is elsewhere or pooled, or the look was not
    /// clear (another client's round trips at the same moment).
    pub async fn find_server_thread(&mut self) -> Option<u32> {
        let pid = sys::unix_peer_pid(self.raw_fd())?;
        let mut rows = Rows::default();
        self.query_rows("SELECT @@thread_handling", &mut rows)
            .await
            .ok()?;
        if rows.str(0, 0) != Some("one-thread-per-connection") {
            return None;
        }
        let _one_at_a_time = IDENTIFYING.lock().await;
        let before = sys::thread_run_counts(pid)?;
        for _ in 0..IDENTIFY_ROUND_TRIPS {
            self.query("DO 0").await.ok()?;
        }
        let after = sys::thread_run_counts(pid)?;
        sys::the_thread_that_ran(&before, &after, IDENTIFY_ROUND_TRIPS / 2)
    }

    /// Whether the session is inside a transaction (the last reply's status).
    pub fn in_transaction(&self) -> bool {
        self.status & codec::SERVER_STATUS_IN_TRANS != 0
    }

    /// The next packet's payload: (start, end) in the read buffer.
    async fn next_packet(&mut self) -> Result<(usize, usize), MyError> {
        loop {
            let t = &mut self.t;
            let avail = t.rend - t.rstart;
            if avail >= 4 {
                let s = t.rstart;
                let h = &t.rbuf[s..s + 4];
                let len = u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize;
                if len == codec::MAX_PAYLOAD {
                    return Err(MyError::Protocol(
                        "a packet of 16 MiB or more (this client reads smaller ones)".into(),
                    ));
                }
                if avail >= 4 + len {
                    self.seq = h[3].wrapping_add(1);
                    t.rstart += 4 + len;
                    return Ok((s + 4, s + 4 + len));
                }
                t.reserve_message(4 + len);
            }
            self.t.fill().await.map_err(lost)?;
        }
    }

    /// Send what was put, unless the ring sends it with the next read.
    async fn send(&mut self) -> Result<(), MyError> {
        if !self.t.on_ring() && !self.t.wbuf.is_empty() {
            self.t.flush().await.map_err(lost)?;
        }
        Ok(())
    }

    // --- commands to send next; each is answered by one `read_result`
    //     (`read_prepared` for a prepare), in order ---

    /// COM_QUERY: SQL in the text protocol (several statements separated by
    /// `;` are allowed: each gives a result).
    pub fn put_query(&mut self, sql: &str) {
        codec::command(&mut self.t.wbuf, codec::COM_QUERY, sql.as_bytes());
        self.pending.push_back(false);
    }

    /// COM_STMT_EXECUTE of a prepared statement with binary parameters.
    pub fn put_execute(&mut self, stmt: &Stmt, params: &[Param<'_>]) {
        debug_assert_eq!(stmt.params as usize, params.len());
        codec::stmt_execute(&mut self.t.wbuf, stmt.id, params);
        self.pending.push_back(true);
    }

    /// COM_STMT_PREPARE; answered by `read_prepared`.
    pub fn put_prepare(&mut self, sql: &str) {
        codec::command(&mut self.t.wbuf, codec::COM_STMT_PREPARE, sql.as_bytes());
    }

    /// Send what was put (if not yet sent) and read the answer to the first
    /// command not yet answered: its OK, its ERR (`MyError::Server`, after
    /// which the connection goes on), or its rows, which go to `rows` (one
    /// result there) when given. A COM_QUERY of several statements gives one
    /// result per call; `Outcome::more_results` says another follows.
    pub async fn read_result(&mut self, rows: Option<&mut Rows>) -> Result<Outcome, MyError> {
        self.send().await?;
        let binary = *self
            .pending
            .front()
            .ok_or_else(|| MyError::Protocol("read_result without a command sent".into()))?;
        let result = self.read_one(rows, binary).await;
        match &result {
            Ok(outcome) if outcome.more_results() => {}
            _ => {
                self.pending.pop_front();
            }
        }
        result
    }

    async fn read_one(
        &mut self,
        mut rows: Option<&mut Rows>,
        binary: bool,
    ) -> Result<Outcome, MyError> {
        let (s, e) = self.next_packet().await?;
        let payload = &self.t.rbuf[s..e];
        match payload.first() {
            Some(0x00) => {
                let outcome = codec::parse_ok(payload);
                self.status = outcome.status;
                if let Some(rows) = rows {
                    rows.end_result();
                }
                return Ok(outcome);
            }
            Some(0xff) => return Err(MyError::Server(codec::parse_err(payload))),
            Some(0xfb) => {
                return Err(MyError::Protocol(
                    "the server asks for a local file; use load_data_local".into(),
                ))
            }
            None => return Err(MyError::Protocol("an empty packet".into())),
            _ => {}
        }
        let n = codec::Reader::new(payload).lenenc().unwrap_or(0) as usize;
        self.read_columns(n).await?;
        loop {
            let (s, e) = self.next_packet().await?;
            let payload = &self.t.rbuf[s..e];
            if payload.first() == Some(&0xff) {
                return Err(MyError::Server(codec::parse_err(payload)));
            }
            if codec::is_end_of_rows(payload) {
                let outcome = if self.deprecate_eof() {
                    codec::parse_ok(payload)
                } else {
                    codec::parse_eof(payload)
                };
                self.status = outcome.status;
                if let Some(rows) = rows {
                    rows.end_result();
                }
                return Ok(outcome);
            }
            if let Some(rows) = rows.as_deref_mut() {
                let ok = if binary {
                    rows.push_binary_row(payload, &self.cols)
                } else {
                    rows.push_text_row(payload, &self.cols)
                };
                if !ok {
                    return Err(MyError::Protocol("a row is cut short".into()));
                }
            }
        }
    }

    fn deprecate_eof(&self) -> bool {
        self.capabilities & codec::CLIENT_DEPRECATE_EOF != 0
    }

    /// `n` column definitions into `cols`, and the EOF after them if any.
    async fn read_columns(&mut self, n: usize) -> Result<(), MyError> {
        self.cols.clear();
        for _ in 0..n {
            let (s, e) = self.next_packet().await?;
            let col = codec::parse_column(&self.t.rbuf[s..e]);
            self.cols.push(col);
        }
        if n > 0 && !self.deprecate_eof() {
            self.next_packet().await?;
        }
        Ok(())
    }

    /// Read the answer to a `put_prepare`.
    pub async fn read_prepared(&mut self) -> Result<Stmt, MyError> {
        self.send().await?;
        let (s, e) = self.next_packet().await?;
        let payload = &self.t.rbuf[s..e];
        if payload.first() == Some(&0xff) {
            return Err(MyError::Server(codec::parse_err(payload)));
        }
        let (id, columns, params) = codec::parse_prepare_ok(payload).map_err(MyError::Protocol)?;
        // the parameters' and the columns' definitions: nothing to keep
        self.read_columns(params as usize).await?;
        self.read_columns(columns as usize).await?;
        Ok(Stmt {
            id,
            params,
            columns,
        })
    }

    /// Prepare every statement in one round trip: all of them sent, every
    /// answer read (the pipeline goes on after a server's error), the
    /// statements in order, or the first error (the first of the server's,
    /// or the connection's, which ends the reading).
    pub async fn prepare_all<S: AsRef<str>>(&mut self, texts: &[S]) -> Result<Vec<Stmt>, MyError> {
        for text in texts {
            self.put_prepare(text.as_ref());
        }
        let mut first_error = None;
        let mut prepared = Vec::with_capacity(texts.len());
        for _ in texts {
            match self.read_prepared().await {
                Ok(stmt) => prepared.push(stmt),
                Err(e @ MyError::Server(_)) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(prepared),
        }
    }

    /// Prepare one statement (one round trip).
    pub async fn prepare(&mut self, sql: &str) -> Result<Stmt, MyError> {
        self.put_prepare(sql);
        self.read_prepared().await
    }

    /// Execute a prepared statement and read its answer (one round trip).
    pub async fn execute(
        &mut self,
        stmt: &Stmt,
        params: &[Param<'_>],
        rows: Option<&mut Rows>,
    ) -> Result<Outcome, MyError> {
        self.put_execute(stmt, params);
        self.read_result(rows).await
    }

    /// Run SQL in the text protocol, all its results read; the first error is
    /// an Err. Returns the last result's outcome.
    pub async fn query(&mut self, sql: &str) -> Result<Outcome, MyError> {
        self.put_query(sql);
        loop {
            let outcome = self.read_result(None).await?;
            if !outcome.more_results() {
                return Ok(outcome);
            }
        }
    }

    /// `query`, keeping every result's rows in `rows`.
    pub async fn query_rows(&mut self, sql: &str, rows: &mut Rows) -> Result<Outcome, MyError> {
        self.put_query(sql);
        loop {
            let outcome = self.read_result(Some(rows)).await?;
            if !outcome.more_results() {
                return Ok(outcome);
            }
        }
    }

    /// LOAD DATA LOCAL INFILE `sql`, the file's bytes from `next_chunk` (it
    /// appends to the buffer and says whether more follow; an Err stops the
    /// load where it is, and the connection must then be dropped, which ends
    /// the statement without committing it). Returns the rows the server took.
    pub async fn load_data_local<F>(&mut self, sql: &str, mut next_chunk: F) -> Result<u64, MyError>
    where
        F: FnMut(&mut Vec<u8>) -> Result<bool, MyError>,
    {
        if self.capabilities & codec::CLIENT_LOCAL_FILES == 0 {
            return Err(MyError::Config(
                "the server does not allow LOAD DATA LOCAL (set local_infile = ON)".into(),
            ));
        }
        codec::command(&mut self.t.wbuf, codec::COM_QUERY, sql.as_bytes());
        self.t.flush().await.map_err(lost)?;
        let (s, e) = self.next_packet().await?;
        let payload = &self.t.rbuf[s..e];
        match payload.first() {
            Some(0xfb) => {}
            Some(0xff) => return Err(MyError::Server(codec::parse_err(payload))),
            _ => {
                return Err(MyError::Protocol(
                    "LOAD DATA LOCAL: the server did not ask for the file".into(),
                ))
            }
        }
        let mut chunk = Vec::with_capacity(LOCAL_CHUNK_BYTES + 4096);
        loop {
            chunk.clear();
            let more = next_chunk(&mut chunk)?;
            for piece in chunk.chunks(codec::MAX_PAYLOAD - 1) {
                codec::packet(&mut self.t.wbuf, self.seq, piece);
                self.seq = self.seq.wrapping_add(1);
                self.t.flush().await.map_err(lost)?;
            }
            if !more {
                break;
            }
        }
        codec::packet(&mut self.t.wbuf, self.seq, &[]);
        self.t.flush().await.map_err(lost)?;
        let (s, e) = self.next_packet().await?;
        let payload = &self.t.rbuf[s..e];
        match payload.first() {
            Some(0x00) => Ok(codec::parse_ok(payload).affected_rows),
            Some(0xff) => Err(MyError::Server(codec::parse_err(payload))),
            _ => Err(MyError::Protocol("LOAD DATA LOCAL ended without OK".into())),
        }
    }

    /// Say goodbye (COM_QUIT) so the server logs a clean disconnect; best effort.
    pub fn terminate(&mut self) {
        let mut quit = Vec::with_capacity(5);
        codec::command(&mut quit, codec::COM_QUIT, &[]);
        self.t.write_now(&quit);
    }
}
