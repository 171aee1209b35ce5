//! One server connection: the startup and authentication exchange, round
//! trips and COPY, on the socket layer shared with the MySQL client
//! (`crate::transport`: epoll or io_uring).

use bytes::BytesMut;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use std::os::fd::RawFd;
use std::rc::Rc;

use super::codec;
use super::{ConnInfo, PgError, SqlError};
use crate::rowtable::RowTable;
use crate::sys;
use crate::transport::{Lost, Sock, Transport};
use crate::uring::Ring;

/// CopyData chunk size: large enough that framing costs nothing.
pub const COPY_CHUNK_BYTES: usize = 256 * 1024;

/// One server connection, driven from a tokio runtime with IO.
pub struct PgConn {
    /// The socket and its buffers (shared with the MySQL client).
    t: Transport,
    /// Transaction status from the last ReadyForQuery: b'I', b'T' or b'E'.
    pub tx_status: u8,
    /// The last FATAL/PANIC message, to explain a connection that then ends.
    fatal: Option<String>,
    /// The backend's process id (BackendKeyData), kept only when the server
    /// is on this machine (a unix socket or a loopback address) and the id
    /// names a process called postgres in /proc (`local_backend_pid`).
    local_backend_pid: Option<u32>,
}

impl PgConn {
    /// Connect and authenticate; must run inside a tokio runtime with IO.
    pub async fn connect(info: &ConnInfo) -> Result<PgConn, PgError> {
        match tokio::time::timeout(info.connect_timeout, Self::connect_inner(info)).await {
            Ok(result) => result,
            Err(_) => Err(PgError::Connect(format!(
                "{}: no answer within {} s",
                info.display(),
                info.connect_timeout.as_secs()
            ))),
        }
    }

    async fn connect_inner(info: &ConnInfo) -> Result<PgConn, PgError> {
        let where_ = info.display();
        let sock = if info.is_unix_socket() {
            let path = format!("{}/.s.PGSQL.{}", info.host, info.port);
            Sock::connect(Some(&path), "", 0)
                .await
                .map_err(|e| PgError::Connect(format!("{where_} (socket {path}): {e}")))?
        } else {
            Sock::connect(None, &info.host, info.port)
                .await
                .map_err(|e| PgError::Connect(format!("{where_}: {e}")))?
        };
        let mut conn = PgConn {
            t: Transport::new(sock).map_err(|e| PgError::Connect(e.to_string()))?,
            tx_status: b'I',
            fatal: None,
            local_backend_pid: None,
        };
        conn.startup(info).await.map_err(|e| match e {
            PgError::Connect(_) | PgError::Config(_) => e,
            other => PgError::Connect(format!("{where_}: {other}")),
        })?;
        Ok(conn)
    }

    async fn startup(&mut self, info: &ConnInfo) -> Result<(), PgError> {
        let mut params: Vec<(&str, &str)> = vec![
            ("user", &info.user),
            ("database", &info.dbname),
            ("application_name", &info.application_name),
        ];
        if let Some(options) = &info.options {
            params.push(("options", options));
        }
        let mut buf = BytesMut::new();
        frontend::startup_message(params, &mut buf)
            .map_err(|e| PgError::Protocol(e.to_string()))?;
        self.t.wbuf.extend_from_slice(&buf);
        self.flush().await?;
        let mut scram: Option<ScramSha256> = None;
        let need_password = || {
            PgError::Connect(format!(
                "{}: the server asks for a password and none was given \
                 (password in the conninfo or PGPASSWORD)",
                info.display()
            ))
        };
        loop {
            let (tag, start, end) = self.next_message().await?;
            let body = self.t.rbuf[start..end].to_vec();
            let mut out = BytesMut::new();
            match tag {
                b'R' => {
                    let code = i32::from_be_bytes(body[0..4].try_into().unwrap());
                    match code {
                        0 => {}
                        3 => {
                            let pw = info.password.as_deref().ok_or_else(need_password)?;
                            frontend::password_message(pw.as_bytes(), &mut out)
                                .map_err(|e| PgError::Protocol(e.to_string()))?;
                        }
                        5 => {
                            let pw = info.password.as_deref().ok_or_else(need_password)?;
                            let salt: [u8; 4] = body[4..8].try_into().unwrap();
                            let hashed = postgres_protocol::authentication::md5_hash(
                                info.user.as_bytes(),
                                pw.as_bytes(),
                                salt,
                            );
                            frontend::password_message(hashed.as_bytes(), &mut out)
                                .map_err(|e| PgError::Protocol(e.to_string()))?;
                        }
                        10 => {
                            let pw = info.password.as_deref().ok_or_else(need_password)?;
                            let offers_scram =
                                body[4..].split(|&b| b == 0).any(|m| m == b"SCRAM-SHA-256");
                            if !offers_scram {
                                return Err(PgError::Connect(
                                    "the server offers no SASL mechanism this driver speaks \
                                     (SCRAM-SHA-256 without channel binding)"
                                        .into(),
                                ));
                            }
                            let s = ScramSha256::new(pw.as_bytes(), ChannelBinding::unsupported());
                            frontend::sasl_initial_response("SCRAM-SHA-256", s.message(), &mut out)
                                .map_err(|e| PgError::Protocol(e.to_string()))?;
                            scram = Some(s);
                        }
                        11 => {
                            let s = scram.as_mut().ok_or_else(|| {
                                PgError::Protocol("SASL continue without SASL start".into())
                            })?;
                            s.update(&body[4..])
                                .map_err(|e| PgError::Connect(format!("SCRAM: {e}")))?;
                            frontend::sasl_response(s.message(), &mut out)
                                .map_err(|e| PgError::Protocol(e.to_string()))?;
                        }
                        12 => {
                            let s = scram.as_mut().ok_or_else(|| {
                                PgError::Protocol("SASL final without SASL start".into())
                            })?;
                            s.finish(&body[4..])
                                .map_err(|e| PgError::Connect(format!("SCRAM: {e}")))?;
                        }
                        other => {
                            return Err(PgError::Connect(format!(
                                "authentication method {other} is not supported \
                                 (trust, password, md5 and scram-sha-256 are)"
                            )))
                        }
                    }
                }
                b'E' => {
                    let err = SqlError::parse(&body);
                    return Err(PgError::Connect(format!("{}: {}", info.display(), err)));
                }
                b'Z' => {
                    self.tx_status = body.first().copied().unwrap_or(b'I');
                    return Ok(());
                }
                b'K' if body.len() >= 4 && info.is_local() => {
                    // A server in another pid namespace (a container
                    // published on loopback) gives a pid that names some
                    // other process here, or none: keep it only when it
                    // names a PostgreSQL process.
                    let pid = u32::from_be_bytes(body[0..4].try_into().unwrap());
                    if sys::process_comm(pid).as_deref() == Some("postgres") {
                        self.local_backend_pid = Some(pid);
                    }
                }
                // ParameterStatus, BackendKeyData of a server elsewhere, NoticeResponse.
                _ => {}
            }
            if !out.is_empty() {
                self.t.wbuf.extend_from_slice(&out);
                self.flush().await?;
            }
        }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.t.raw_fd()
    }

    /// The backend process serving this connection, when the server runs on
    /// this machine (else None: a remote pid names nothing here).
    pub fn local_backend_pid(&self) -> Option<u32> {
        self.local_backend_pid
    }

    /// From now on, do round trips through `ring` (the socket leaves tokio's
    /// epoll, so its replies raise no epoll events).
    pub fn use_ring(&mut self, ring: Rc<Ring>) -> Result<(), PgError> {
        self.t.use_ring(ring).map_err(PgError::Protocol)
    }

    /// Leave this thread's epoll and ring between transactions
    /// (`Transport::leave_thread`), and take another's (`join_thread`).
    pub fn leave_thread(&mut self) {
        self.t.leave_thread();
    }

    pub fn join_thread(&mut self, ring: Option<&Rc<Ring>>) -> Result<(), PgError> {
        self.t.join_thread(ring).map_err(PgError::Protocol)
    }

    /// Write all of the messages put so far.
    pub async fn flush(&mut self) -> Result<(), PgError> {
        match self.t.flush().await {
            Ok(()) => Ok(()),
            Err(lost) => Err(self.explain_lost(lost)),
        }
    }

    fn explain_lost(&mut self, lost: Lost) -> PgError {
        match self.fatal.take() {
            Some(fatal) => PgError::Lost(fatal),
            None => PgError::Lost(lost.0),
        }
    }

    /// Read more bytes from the socket.
    async fn fill(&mut self) -> Result<(), PgError> {
        match self.t.fill().await {
            Ok(()) => Ok(()),
            Err(lost) => Err(self.explain_lost(lost)),
        }
    }

    /// The next backend message: (tag, body start, body end) in `rbuf`.
    async fn next_message(&mut self) -> Result<(u8, usize, usize), PgError> {
        loop {
            let t = &mut self.t;
            let avail = t.rend - t.rstart;
            if avail >= 5 {
                let s = t.rstart;
                let len = u32::from_be_bytes(t.rbuf[s + 1..s + 5].try_into().unwrap()) as usize;
                if len < 4 {
                    return Err(PgError::Protocol(format!("message length {len}")));
                }
                if avail > len {
                    t.rstart += 1 + len;
                    return Ok((t.rbuf[s], s + 5, s + 1 + len));
                }
                t.reserve_message(1 + len);
            }
            self.fill().await?;
        }
    }

    /// Send `wbuf`, then read up to and including ReadyForQuery. Returns the
    /// first ErrorResponse of the exchange, if any.
    pub async fn round_trip(&mut self) -> Result<Option<SqlError>, PgError> {
        if !self.t.on_ring() {
            self.flush().await?;
        }
        // With a ring, the first read sends wbuf in the same submission.
        self.read_until_ready().await
    }

    pub async fn read_until_ready(&mut self) -> Result<Option<SqlError>, PgError> {
        let mut first_error = None;
        loop {
            let (tag, start, end) = self.next_message().await?;
            match tag {
                b'Z' => {
                    self.tx_status = if end > start {
                        self.t.rbuf[start]
                    } else {
                        b'I'
                    };
                    return Ok(first_error);
                }
                b'E' => {
                    let err = SqlError::parse(&self.t.rbuf[start..end]);
                    if err.severity == "FATAL" || err.severity == "PANIC" {
                        self.fatal = Some(err.to_string());
                    }
                    if first_error.is_none() {
                        first_error = Some(err);
                    }
                }
                // RowDescription, DataRow, CommandComplete, ParseComplete,
                // BindComplete, notices, parameter status: nothing to keep.
                _ => {}
            }
        }
    }

    /// `round_trip`, keeping the rows: each DataRow's values (text) go to
    /// `rows`, and each CommandComplete closes one statement's result.
    pub async fn round_trip_rows(&mut self, rows: &mut Rows) -> Result<Option<SqlError>, PgError> {
        if !self.t.on_ring() {
            self.flush().await?;
        }
        let mut first_error = None;
        loop {
            let (tag, start, end) = self.next_message().await?;
            match tag {
                b'D' => rows.push_row(&self.t.rbuf[start..end]),
                b'C' | b'I' => rows.end_result(),
                b'Z' => {
                    self.tx_status = if end > start {
                        self.t.rbuf[start]
                    } else {
                        b'I'
                    };
                    return Ok(first_error);
                }
                b'E' => {
                    let err = SqlError::parse(&self.t.rbuf[start..end]);
                    if err.severity == "FATAL" || err.severity == "PANIC" {
                        self.fatal = Some(err.to_string());
                    }
                    if first_error.is_none() {
                        first_error = Some(err);
                    }
                }
                _ => {}
            }
        }
    }

    pub fn put_bind(&mut self, statement: &str, params: &[codec::Param<'_>]) {
        codec::bind(&mut self.t.wbuf, statement, params);
    }

    /// Run SQL with the simple protocol; a server error is an Err.
    pub async fn simple(&mut self, sql: &str) -> Result<(), PgError> {
        self.put_query(sql);
        match self.round_trip().await? {
            None => Ok(()),
            Some(err) => Err(PgError::Server(err)),
        }
    }

    /// COPY ... FROM STDIN, feeding CopyData from `next_chunk` until it
    /// returns false (it appends rows to the given buffer). Returns the rows
    /// the server took.
    pub async fn copy_in<F>(&mut self, sql: &str, mut next_chunk: F) -> Result<u64, PgError>
    where
        F: FnMut(&mut Vec<u8>) -> bool,
    {
        self.copy_start(sql).await?;
        let mut rows = Vec::with_capacity(COPY_CHUNK_BYTES + 4096);
        loop {
            rows.clear();
            let more = next_chunk(&mut rows);
            self.copy_send(&rows).await?;
            if !more {
                break;
            }
        }
        self.copy_finish().await
    }

    /// Start COPY ... FROM STDIN: send it and wait for CopyInResponse.
    pub async fn copy_start(&mut self, sql: &str) -> Result<(), PgError> {
        self.put_query(sql);
        self.flush().await?;
        loop {
            let (tag, start, end) = self.next_message().await?;
            match tag {
                b'G' => return Ok(()),
                b'E' => {
                    let err = SqlError::parse(&self.t.rbuf[start..end]);
                    self.read_until_ready().await?;
                    return Err(PgError::Server(err));
                }
                _ => {}
            }
        }
    }

    /// Send rows (complete lines of COPY text) as one CopyData message.
    pub async fn copy_send(&mut self, rows: &[u8]) -> Result<(), PgError> {
        if rows.is_empty() {
            return Ok(());
        }
        codec::copy_data(&mut self.t.wbuf, rows);
        self.flush().await
    }

    /// End the COPY (CopyDone) and read the server's verdict: the rows it
    /// took, from its CommandComplete ("COPY n").
    pub async fn copy_finish(&mut self) -> Result<u64, PgError> {
        codec::copy_done(&mut self.t.wbuf);
        self.flush().await?;
        let mut copied = None;
        let mut first_error = None;
        loop {
            let (tag, start, end) = self.next_message().await?;
            match tag {
                b'C' => copied = codec::rows_of_command_tag(&self.t.rbuf[start..end]),
                b'E' if first_error.is_none() => {
                    first_error = Some(SqlError::parse(&self.t.rbuf[start..end]))
                }
                b'Z' => {
                    self.tx_status = if end > start {
                        self.t.rbuf[start]
                    } else {
                        b'I'
                    };
                    break;
                }
                _ => {}
            }
        }
        match (first_error, copied) {
            (Some(err), _) => Err(PgError::Server(err)),
            (None, Some(n)) => Ok(n),
            (None, None) => Err(PgError::Protocol("COPY ended without a row count".into())),
        }
    }

    // --- messages to send next (appended to wbuf; see `codec`) ---

    /// Query (simple protocol).
    pub fn put_query(&mut self, sql: &str) {
        codec::query(&mut self.t.wbuf, sql);
    }

    /// Query whose text the caller built.
    pub fn put_query_bytes(&mut self, sql: &[u8]) {
        codec::query_bytes(&mut self.t.wbuf, sql);
    }

    pub fn put_parse(&mut self, name: &str, sql: &str) {
        codec::parse(&mut self.t.wbuf, name, sql);
    }

    pub fn put_bind_i64(&mut self, statement: &str, params: &[i64]) {
        codec::bind_i64(&mut self.t.wbuf, statement, params);
    }

    pub fn put_execute(&mut self) {
        codec::execute(&mut self.t.wbuf);
    }

    pub fn put_sync(&mut self) {
        codec::sync(&mut self.t.wbuf);
    }

    /// Say goodbye (Terminate) so the server logs a clean disconnect; best effort.
    pub fn terminate(&mut self) {
        self.t.write_now(&codec::TERMINATE);
    }
}

/// The rows of one exchange, in text, without an allocation per value:
/// values in one buffer, and per statement (CommandComplete) its rows.
#[derive(Debug, Default)]
pub struct Rows(RowTable<(u32, i32)>);

impl Rows {
    pub fn clear(&mut self) {
        self.0.clear();
    }

    fn push_row(&mut self, body: &[u8]) {
        self.0.begin_row();
        if body.len() < 2 {
            return;
        }
        let n = i16::from_be_bytes([body[0], body[1]]).max(0) as usize;
        let mut at = 2;
        for _ in 0..n {
            if at + 4 > body.len() {
                break;
            }
            let len = i32::from_be_bytes(body[at..at + 4].try_into().unwrap());
            at += 4;
            if len < 0 {
                self.0.push(None, |s, l| (s, l));
            } else {
                let len_u = (len as usize).min(body.len() - at);
                self.0.push(Some(&body[at..at + len_u]), |s, l| (s, l));
                at += len_u;
            }
        }
    }

    fn end_result(&mut self) {
        self.0.end_result();
    }

    /// Statements that completed.
    pub fn results(&self) -> usize {
        self.0.results()
    }

    /// Row numbers of statement `result`'s rows (empty if it did not complete).
    pub fn result_rows(&self, result: usize) -> std::ops::Range<usize> {
        self.0.result_rows(result)
    }

    /// Value `col` of row `row`; None for NULL or no such value.
    pub fn get(&self, row: usize, col: usize) -> Option<&[u8]> {
        self.0.value(row, col).map(|(_, bytes)| bytes)
    }

    pub fn i64(&self, row: usize, col: usize) -> Option<i64> {
        std::str::from_utf8(self.get(row, col)?).ok()?.parse().ok()
    }

    /// A numeric value in units of 10^-scale.
    pub fn fixed(&self, row: usize, col: usize, scale: u32) -> Option<i64> {
        codec::parse_fixed(self.get(row, col)?, scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_row(values: &[Option<&[u8]>]) -> Vec<u8> {
        let mut body = (values.len() as i16).to_be_bytes().to_vec();
        for v in values {
            match v {
                Some(v) => {
                    body.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    body.extend_from_slice(v);
                }
                None => body.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        body
    }

    #[test]
    fn rows_are_kept_per_statement() {
        let mut rows = Rows::default();
        rows.end_result(); // BEGIN
        rows.push_row(&data_row(&[Some(b"42"), None, Some(b"1.50")]));
        rows.push_row(&data_row(&[Some(b"7"), Some(b"x"), Some(b"-2")]));
        rows.end_result();
        rows.end_result(); // an UPDATE without RETURNING
        assert_eq!(rows.results(), 3);
        assert_eq!(rows.result_rows(0), 0..0);
        assert_eq!(rows.result_rows(1), 0..2);
        assert_eq!(rows.result_rows(2), 2..2);
        assert_eq!(rows.result_rows(5), 0..0);
        assert_eq!(rows.i64(0, 0), Some(42));
        assert_eq!(rows.get(0, 1), None);
        assert_eq!(rows.fixed(0, 2, 2), Some(150));
        assert_eq!(rows.get(1, 1), Some(&b"x"[..]));
        assert_eq!(rows.fixed(1, 2, 2), Some(-200));
        assert_eq!(rows.get(1, 3), None);
        rows.clear();
        assert_eq!(rows.results(), 0);
    }
}
