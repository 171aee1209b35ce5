//! One server connection: its socket (epoll or io_uring), the startup and
//! authentication exchange, round trips and COPY.

use bytes::BytesMut;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::codec;
use super::{ConnInfo, PgError, SqlError};
use crate::sys::{self, OwnsFd};
use crate::uring::{Ring, RingUser};

enum Sock {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl Sock {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => (&*s).read(buf),
            Sock::Unix(s) => (&*s).read(buf),
        }
    }
    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => (&*s).write(buf),
            Sock::Unix(s) => (&*s).write(buf),
        }
    }
}

impl AsRawFd for Sock {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
        }
    }
}

// SAFETY: each variant is a std stream that owns its socket fd for its life.
unsafe impl OwnsFd for Sock {}

const READ_BUFFER_BYTES: usize = 16 * 1024;
/// CopyData chunk size: large enough that framing costs nothing.
pub const COPY_CHUNK_BYTES: usize = 256 * 1024;

/// How a connection reaches its socket.
enum Io {
    /// Registered with tokio's epoll reactor (read readiness).
    Epoll(AsyncFd<Sock>),
    /// Deregistered from epoll; round trips go through the thread's ring.
    Ring(Sock, RingUser),
    /// Only while switching from one to the other.
    Switching,
}

/// One server connection, driven from a tokio runtime with IO enabled.
pub struct PgConn {
    io: Io,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// Messages to send next; callers append with the `put_*` methods.
    pub wbuf: Vec<u8>,
    /// Transaction status from the last ReadyForQuery: b'I', b'T' or b'E'.
    pub tx_status: u8,
    /// The last FATAL/PANIC message, to explain a connection that then ends.
    fatal: Option<String>,
}

fn lost(e: io::Error) -> PgError {
    PgError::Lost(e.to_string())
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
            let s = tokio::net::UnixStream::connect(&path)
                .await
                .map_err(|e| PgError::Connect(format!("{where_} (socket {path}): {e}")))?;
            Sock::Unix(s.into_std().map_err(|e| PgError::Connect(e.to_string()))?)
        } else {
            let s = tokio::net::TcpStream::connect((info.host.as_str(), info.port))
                .await
                .map_err(|e| PgError::Connect(format!("{where_}: {e}")))?;
            s.set_nodelay(true)
                .map_err(|e| PgError::Connect(e.to_string()))?;
            Sock::Tcp(s.into_std().map_err(|e| PgError::Connect(e.to_string()))?)
        };
        let mut conn = PgConn {
            // Read interest only: with write interest too, every send raises an
            // edge-triggered EPOLLOUT once the server has read it, and that
            // spurious wake-up cost a context switch per statement (perf stat:
            // 1.8 instead of 1.0 per statement at one client). Writes that find
            // the send buffer full (large COPY chunks) wait with poll(2).
            io: Io::Epoll(
                sys::watch(sock, Interest::READABLE)
                    .map_err(|e| PgError::Connect(e.to_string()))?,
            ),
            rbuf: vec![0; READ_BUFFER_BYTES],
            rstart: 0,
            rend: 0,
            wbuf: Vec::with_capacity(1024),
            tx_status: b'I',
            fatal: None,
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
        self.wbuf.extend_from_slice(&buf);
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
            let body = self.rbuf[start..end].to_vec();
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
                // ParameterStatus, BackendKeyData, NoticeResponse.
                _ => {}
            }
            if !out.is_empty() {
                self.wbuf.extend_from_slice(&out);
                self.flush().await?;
            }
        }
    }

    fn sock(&self) -> &Sock {
        match &self.io {
            Io::Epoll(fd) => fd.get_ref(),
            Io::Ring(sock, _) => sock,
            Io::Switching => unreachable!("a connection is never used while switching"),
        }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.sock().as_raw_fd()
    }

    /// From now on, do round trips through `ring` (the socket leaves tokio's
    /// epoll, so its replies raise no epoll events).
    pub fn use_ring(&mut self, ring: Rc<Ring>) -> Result<(), PgError> {
        match std::mem::replace(&mut self.io, Io::Switching) {
            Io::Epoll(fd) => {
                self.io = Io::Ring(fd.into_inner(), ring.attach());
                Ok(())
            }
            other => {
                self.io = other;
                Err(PgError::Protocol(
                    "the connection already uses a ring".into(),
                ))
            }
        }
    }

    /// Write all of `wbuf` and clear it.
    pub async fn flush(&mut self) -> Result<(), PgError> {
        let mut written = 0;
        while written < self.wbuf.len() {
            match self.sock().write(&self.wbuf[written..]) {
                Ok(0) => return Err(PgError::Lost("the server closed the connection".into())),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // A full send buffer: the server is behind on reading.
                    self.wait_writable().await?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.explain_lost(e.to_string())),
            }
        }
        self.wbuf.clear();
        Ok(())
    }

    /// Wait, without blocking the thread's other clients, until the send
    /// buffer has room. The socket is watched for read readiness only (see
    /// `connect_inner`); for the rare full send buffer (large COPY chunks) it
    /// is watched for write readiness too until there is room, then for read
    /// only again: two epoll_ctl calls per stall instead of a wake-up per send.
    async fn wait_writable(&mut self) -> Result<(), PgError> {
        let watched = match std::mem::replace(&mut self.io, Io::Switching) {
            Io::Epoll(fd) => fd,
            other => {
                // On the ring the socket is not in epoll: let others run.
                self.io = other;
                tokio::task::yield_now().await;
                return Ok(());
            }
        };
        let both = sys::watch(
            watched.into_inner(),
            Interest::READABLE | Interest::WRITABLE,
        )
        .map_err(lost)?;
        let ready = both.writable().await.map(|mut guard| guard.clear_ready());
        self.io = Io::Epoll(sys::watch(both.into_inner(), Interest::READABLE).map_err(lost)?);
        ready.map_err(lost)
    }

    fn explain_lost(&mut self, io_message: String) -> PgError {
        match self.fatal.take() {
            Some(fatal) => PgError::Lost(fatal),
            None => PgError::Lost(io_message),
        }
    }

    /// Read more bytes from the socket into rbuf.
    async fn fill(&mut self) -> Result<(), PgError> {
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        } else if self.rend == self.rbuf.len() {
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
            if self.rend == self.rbuf.len() {
                let bigger = self.rbuf.len() * 2;
                self.rbuf.resize(bigger, 0);
            }
        }
        if let Io::Ring(_, user) = &self.io {
            let ring = user.ring().clone();
            return self.fill_ring(&ring).await;
        }
        let Io::Epoll(sock) = &self.io else {
            unreachable!("a connection is never used while switching")
        };
        loop {
            let mut guard = sock.readable().await.map_err(lost)?;
            let space = &mut self.rbuf[self.rend..];
            match guard.try_io(|s| s.get_ref().read(space)) {
                Ok(Ok(0)) => {
                    return Err(self.explain_lost("the server closed the connection".into()))
                }
                Ok(Ok(n)) => {
                    self.rend += n;
                    return Ok(());
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(self.explain_lost(e.to_string())),
                Err(_would_block) => continue,
            }
        }
    }

    /// `fill` through the ring: one receive, preceded by sending `wbuf` when a
    /// round trip left it unsent (one linked pair, submitted with the other
    /// clients' at the end of the runtime's tick).
    async fn fill_ring(&mut self, ring: &Rc<Ring>) -> Result<(), PgError> {
        let fd = self.raw_fd();
        loop {
            let send = std::mem::take(&mut self.wbuf);
            let sent_len = send.len();
            let recv = std::mem::take(&mut self.rbuf);
            let done = ring.round_trip(fd, send, recv, self.rend).await;
            self.rbuf = done.recv_buf;
            self.wbuf = done.send_buf;
            if let Some(res) = done.send_failed {
                let why = if res < 0 {
                    io::Error::from_raw_os_error(-res).to_string()
                } else {
                    format!("short send ({res} of {sent_len} bytes)")
                };
                return Err(self.explain_lost(why));
            }
            self.wbuf.clear();
            match done.recv_result {
                0 => return Err(self.explain_lost("the server closed the connection".into())),
                n if n > 0 => {
                    self.rend += n as usize;
                    return Ok(());
                }
                e if e == -libc::EINTR || e == -libc::EAGAIN => continue,
                e => return Err(self.explain_lost(io::Error::from_raw_os_error(-e).to_string())),
            }
        }
    }

    /// The next backend message: (tag, body start, body end) in `rbuf`.
    async fn next_message(&mut self) -> Result<(u8, usize, usize), PgError> {
        loop {
            let avail = self.rend - self.rstart;
            if avail >= 5 {
                let s = self.rstart;
                let len = u32::from_be_bytes(self.rbuf[s + 1..s + 5].try_into().unwrap()) as usize;
                if len < 4 {
                    return Err(PgError::Protocol(format!("message length {len}")));
                }
                if avail > len {
                    self.rstart += 1 + len;
                    return Ok((self.rbuf[s], s + 5, s + 1 + len));
                }
                if 1 + len > self.rbuf.len() {
                    self.rbuf.copy_within(self.rstart..self.rend, 0);
                    self.rend -= self.rstart;
                    self.rstart = 0;
                    self.rbuf.resize((1 + len).next_power_of_two(), 0);
                }
            }
            self.fill().await?;
        }
    }

    /// Send `wbuf`, then read up to and including ReadyForQuery. Returns the
    /// first ErrorResponse of the exchange, if any.
    pub async fn round_trip(&mut self) -> Result<Option<SqlError>, PgError> {
        if !matches!(self.io, Io::Ring(..)) {
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
                    self.tx_status = if end > start { self.rbuf[start] } else { b'I' };
                    return Ok(first_error);
                }
                b'E' => {
                    let err = SqlError::parse(&self.rbuf[start..end]);
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
        if !matches!(self.io, Io::Ring(..)) {
            self.flush().await?;
        }
        let mut first_error = None;
        loop {
            let (tag, start, end) = self.next_message().await?;
            match tag {
                b'D' => rows.push_row(&self.rbuf[start..end]),
                b'C' | b'I' => rows.end_result(),
                b'Z' => {
                    self.tx_status = if end > start { self.rbuf[start] } else { b'I' };
                    return Ok(first_error);
                }
                b'E' => {
                    let err = SqlError::parse(&self.rbuf[start..end]);
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
        codec::bind(&mut self.wbuf, statement, params);
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
                    let err = SqlError::parse(&self.rbuf[start..end]);
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
        codec::copy_data(&mut self.wbuf, rows);
        self.flush().await
    }

    /// End the COPY (CopyDone) and read the server's verdict: the rows it
    /// took, from its CommandComplete ("COPY n").
    pub async fn copy_finish(&mut self) -> Result<u64, PgError> {
        codec::copy_done(&mut self.wbuf);
        self.flush().await?;
        let mut copied = None;
        let mut first_error = None;
        loop {
            let (tag, start, end) = self.next_message().await?;
            match tag {
                b'C' => copied = codec::rows_of_command_tag(&self.rbuf[start..end]),
                b'E' if first_error.is_none() => {
                    first_error = Some(SqlError::parse(&self.rbuf[start..end]))
                }
                b'Z' => {
                    self.tx_status = if end > start { self.rbuf[start] } else { b'I' };
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
        codec::query(&mut self.wbuf, sql);
    }

    /// Query whose text the caller built.
    pub fn put_query_bytes(&mut self, sql: &[u8]) {
        codec::query_bytes(&mut self.wbuf, sql);
    }

    pub fn put_parse(&mut self, name: &str, sql: &str) {
        codec::parse(&mut self.wbuf, name, sql);
    }

    pub fn put_bind_i64(&mut self, statement: &str, params: &[i64]) {
        codec::bind_i64(&mut self.wbuf, statement, params);
    }

    pub fn put_execute(&mut self) {
        codec::execute(&mut self.wbuf);
    }

    pub fn put_sync(&mut self) {
        codec::sync(&mut self.wbuf);
    }

    /// Say goodbye (Terminate) so the server logs a clean disconnect; best effort.
    pub fn terminate(&mut self) {
        let _ = self.sock().write(&codec::TERMINATE);
    }
}

/// The rows of one exchange, in text, without an allocation per value:
/// values in one buffer, and per statement (CommandComplete) its rows.
#[derive(Debug, Default)]
pub struct Rows {
    data: Vec<u8>,
    /// (start in data, length or -1 for NULL) per value.
    cells: Vec<(u32, i32)>,
    /// First cell of each row.
    rows: Vec<u32>,
    /// End (in rows) of each statement's result.
    results: Vec<u32>,
}

impl Rows {
    pub fn clear(&mut self) {
        self.data.clear();
        self.cells.clear();
        self.rows.clear();
        self.results.clear();
    }

    fn push_row(&mut self, body: &[u8]) {
        self.rows.push(self.cells.len() as u32);
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
                self.cells.push((0, -1));
            } else {
                let len_u = (len as usize).min(body.len() - at);
                self.cells.push((self.data.len() as u32, len_u as i32));
                self.data.extend_from_slice(&body[at..at + len_u]);
                at += len_u;
            }
        }
    }

    fn end_result(&mut self) {
        self.results.push(self.rows.len() as u32);
    }

    /// Statements that completed.
    pub fn results(&self) -> usize {
        self.results.len()
    }

    /// Row numbers of statement `result`'s rows (empty if it did not complete).
    pub fn result_rows(&self, result: usize) -> std::ops::Range<usize> {
        let Some(&end) = self.results.get(result) else {
            return 0..0;
        };
        let start = if result == 0 {
            0
        } else {
            self.results[result - 1]
        };
        start as usize..end as usize
    }

    /// Value `col` of row `row`; None for NULL or no such value.
    pub fn get(&self, row: usize, col: usize) -> Option<&[u8]> {
        let first = *self.rows.get(row)? as usize;
        let end = self
            .rows
            .get(row + 1)
            .map_or(self.cells.len(), |&r| r as usize);
        if first + col >= end {
            return None;
        }
        let (start, len) = self.cells[first + col];
        (len >= 0).then(|| &self.data[start as usize..start as usize + len as usize])
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
