//! A minimal PostgreSQL frontend (protocol 3.0) for load driving and COPY.
//!
//! Why not tokio-postgres: its `Client` hands every request to a separate
//! `Connection` task over a channel and decodes results into typed rows; a
//! load driver needs neither. Here one client task owns its socket, writes
//! pre-encoded messages with text parameters (as libpq, so the server does the
//! same work as under pgbench), reads until ReadyForQuery, and only looks
//! inside ErrorResponse. Authentication (md5, SCRAM-SHA-256) comes from the
//! `postgres-protocol` crate, the same code tokio-postgres uses.
//!
//! Sockets are non-blocking and registered with tokio through `AsyncFd`, for
//! read readiness only (see `connect_inner`). After sending, a client first
//! tries to read, then waits for readiness, as libpq under pgbench does.
//! Clearing readiness after a draining read would save that read's EAGAIN;
//! measured with perf stat (select-only, 8 clients on 2 threads, a shared
//! 2-core machine) it did not lower context switches or CPU per transaction
//! beyond the noise, so the simpler path stays.
//!
//! With `use_ring` (the TPC-B driver under `io = "uring"`, after set-up), a
//! connection leaves epoll and its round trips go through the thread's
//! io_uring instead: `round_trip` leaves the request in `wbuf` and the first
//! read sends it, linked to the receive (see `crate::uring`).

use bytes::BytesMut;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::uring::{Ring, RingUser};

/// Connection parameters, parsed from a libpq key=value conninfo string.
#[derive(Clone, PartialEq)]
pub struct ConnInfo {
    /// A host name, an IP address, or a unix socket directory (starts with '/').
    pub host: String,
    pub port: u16,
    pub user: String,
    pub dbname: String,
    pub password: Option<String>,
    /// Server options sent at startup ("-c default_transaction_read_only=on").
    pub options: Option<String>,
    pub application_name: String,
    pub connect_timeout: Duration,
}

impl fmt::Debug for ConnInfo {
    // Never print the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

fn default_user() -> String {
    std::env::var("PGUSER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| "postgres".to_string())
}

/// Split "k=v k2='quoted \' value'" into pairs, as libpq's conninfo parser does.
fn conninfo_pairs(text: &str) -> Result<Vec<(String, String)>, PgError> {
    let bad = |why: &str| PgError::Config(format!("conninfo: {why}"));
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(bad(&format!("missing \"=\" after {key:?}")));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(bad(&format!("unterminated quoted value of {key:?}"))),
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                if c == '\\' {
                    chars.next();
                    value.extend(chars.next());
                } else {
                    value.push(c);
                    chars.next();
                }
            }
        }
        pairs.push((key, value));
    }
    Ok(pairs)
}

impl ConnInfo {
    pub fn parse(text: &str) -> Result<ConnInfo, PgError> {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Err(PgError::Config(
                "conninfo: the driver takes key=value form (host=... port=... dbname=...), not a URI"
                    .into(),
            ));
        }
        let mut info = ConnInfo {
            host: std::env::var("PGHOST").unwrap_or_else(|_| "/var/run/postgresql".into()),
            port: 5432,
            user: default_user(),
            dbname: String::new(),
            password: std::env::var("PGPASSWORD").ok(),
            options: None,
            application_name: "perflab".into(),
            connect_timeout: Duration::from_secs(30),
        };
        let mut hostaddr = None;
        for (key, value) in conninfo_pairs(text)? {
            match key.as_str() {
                "host" => info.host = value,
                "hostaddr" => hostaddr = Some(value),
                "port" => {
                    info.port = value.parse().map_err(|_| {
                        PgError::Config(format!("conninfo: port {value:?} is not a port number"))
                    })?
                }
                "user" => info.user = value,
                "dbname" => info.dbname = value,
                "password" => info.password = Some(value),
                "options" => info.options = Some(value),
                "application_name" => info.application_name = value,
                "connect_timeout" => {
                    let s: u64 = value.parse().map_err(|_| {
                        PgError::Config(format!(
                            "conninfo: connect_timeout {value:?} is not seconds"
                        ))
                    })?;
                    if s > 0 {
                        info.connect_timeout = Duration::from_secs(s);
                    }
                }
                "sslmode" => {
                    if !matches!(value.as_str(), "disable" | "allow" | "prefer") {
                        return Err(PgError::Config(format!(
                            "conninfo: sslmode={value} needs TLS, which perflab's driver does not \
                             speak; use sslmode=disable or prefer (local servers)"
                        )));
                    }
                }
                // Accepted and irrelevant to a load driver.
                "client_encoding"
                | "fallback_application_name"
                | "keepalives"
                | "keepalives_idle"
                | "target_session_attrs"
                | "gssencmode" => {}
                other => {
                    return Err(PgError::Config(format!(
                        "conninfo: {other:?} is not supported by perflab's driver"
                    )))
                }
            }
        }
        if let Some(addr) = hostaddr {
            info.host = addr;
        }
        if info.dbname.is_empty() {
            info.dbname = info.user.clone();
        }
        Ok(info)
    }

    /// Where this connects, with no password.
    pub fn display(&self) -> String {
        format!(
            "host={} port={} user={} dbname={}",
            self.host, self.port, self.user, self.dbname
        )
    }

    fn is_unix_socket(&self) -> bool {
        self.host.starts_with('/')
    }
}

/// An ErrorResponse from the server.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlError {
    pub sqlstate: [u8; 5],
    pub severity: String,
    pub message: String,
}

impl SqlError {
    pub fn sqlstate_str(&self) -> &str {
        std::str::from_utf8(&self.sqlstate).unwrap_or("?????")
    }

    fn parse(body: &[u8]) -> SqlError {
        let mut err = SqlError {
            sqlstate: *b"XX000",
            severity: String::new(),
            message: String::new(),
        };
        let mut rest = body;
        while let Some((&field, tail)) = rest.split_first() {
            if field == 0 {
                break;
            }
            let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
            let value = &tail[..end];
            match field {
                b'C' if value.len() == 5 => err.sqlstate.copy_from_slice(value),
                b'V' => err.severity = String::from_utf8_lossy(value).into_owned(),
                b'S' if err.severity.is_empty() => {
                    err.severity = String::from_utf8_lossy(value).into_owned()
                }
                b'M' => err.message = String::from_utf8_lossy(value).into_owned(),
                _ => {}
            }
            rest = tail.get(end + 1..).unwrap_or(&[]);
        }
        err
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.severity,
            self.sqlstate_str(),
            self.message
        )
    }
}

#[derive(Debug)]
pub enum PgError {
    /// Bad connection parameters.
    Config(String),
    /// Could not connect or authenticate.
    Connect(String),
    /// The connection ended (server gone, killed, or closed by us on abort).
    Lost(String),
    /// The server answered with an error where none may occur (DDL, COPY).
    Server(SqlError),
    Protocol(String),
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgError::Config(m) => f.write_str(m),
            PgError::Connect(m) => write!(f, "could not connect: {m}"),
            PgError::Lost(m) => write!(f, "connection lost: {m}"),
            PgError::Server(e) => write!(f, "server error: {e}"),
            PgError::Protocol(m) => write!(f, "protocol error: {m}"),
        }
    }
}

impl std::error::Error for PgError {}

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

const READ_BUFFER_BYTES: usize = 16 * 1024;
/// CopyData chunk size: large enough that framing costs nothing.
pub const COPY_CHUNK_BYTES: usize = 256 * 1024;

/// Longest single wait for room in a full send buffer, in ms.
const SEND_BUFFER_POLL_MS: i32 = 10;

/// Wait until `fd` can take more bytes, at most `timeout_ms` (poll(2)).
fn wait_writable(fd: RawFd, timeout_ms: i32) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd; the fd is open while the connection lives.
    unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
}

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
            // SAFETY: the socket is owned by the AsyncFd for its whole life and
            // its fd never changes (std TcpStream/UnixStream own their fd).
            io: Io::Epoll(
                unsafe { AsyncFd::register_with_interest(sock, Interest::READABLE) }
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
                    // A full send buffer: the server is behind on reading. Let
                    // the runtime run other work between short waits for room.
                    wait_writable(self.raw_fd(), SEND_BUFFER_POLL_MS);
                    tokio::task::yield_now().await;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.explain_lost(e.to_string())),
            }
        }
        self.wbuf.clear();
        Ok(())
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

    /// Run SQL with the simple protocol; a server error is an Err.
    pub async fn simple(&mut self, sql: &str) -> Result<(), PgError> {
        self.put_query(sql);
        match self.round_trip().await? {
            None => Ok(()),
            Some(err) => Err(PgError::Server(err)),
        }
    }

    /// COPY ... FROM STDIN, feeding CopyData from `next_chunk` until it
    /// returns false (it appends rows to the given buffer).
    pub async fn copy_in<F>(&mut self, sql: &str, mut next_chunk: F) -> Result<(), PgError>
    where
        F: FnMut(&mut Vec<u8>) -> bool,
    {
        self.put_query(sql);
        self.flush().await?;
        loop {
            let (tag, start, end) = self.next_message().await?;
            match tag {
                b'G' => break,
                b'E' => {
                    let err = SqlError::parse(&self.rbuf[start..end]);
                    self.read_until_ready().await?;
                    return Err(PgError::Server(err));
                }
                _ => {}
            }
        }
        let mut rows = Vec::with_capacity(COPY_CHUNK_BYTES + 4096);
        loop {
            rows.clear();
            let more = next_chunk(&mut rows);
            if !rows.is_empty() {
                self.wbuf.push(b'd');
                self.wbuf
                    .extend_from_slice(&((rows.len() + 4) as u32).to_be_bytes());
                self.wbuf.extend_from_slice(&rows);
                self.flush().await?;
            }
            if !more {
                break;
            }
        }
        self.wbuf.extend_from_slice(&[b'c', 0, 0, 0, 4]);
        match self.round_trip().await? {
            None => Ok(()),
            Some(err) => Err(PgError::Server(err)),
        }
    }

    // --- message encoders (append to wbuf) ---

    fn begin_message(&mut self, tag: u8) -> usize {
        self.wbuf.push(tag);
        let at = self.wbuf.len();
        self.wbuf.extend_from_slice(&[0, 0, 0, 0]);
        at
    }

    fn end_message(&mut self, at: usize) {
        let len = (self.wbuf.len() - at) as u32;
        self.wbuf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }

    fn put_cstr(&mut self, s: &[u8]) {
        self.wbuf.extend_from_slice(s);
        self.wbuf.push(0);
    }

    /// Query (simple protocol).
    pub fn put_query(&mut self, sql: &str) {
        self.put_query_bytes(sql.as_bytes());
    }

    /// Query whose text is already in `sql` bytes (built by the caller).
    pub fn put_query_bytes(&mut self, sql: &[u8]) {
        let at = self.begin_message(b'Q');
        self.put_cstr(sql);
        self.end_message(at);
    }

    /// Parse: statement `name` ("" = unnamed) with untyped parameters, as libpq
    /// sends when no types are given (the server infers them).
    pub fn put_parse(&mut self, name: &str, sql: &str) {
        let at = self.begin_message(b'P');
        self.put_cstr(name.as_bytes());
        self.put_cstr(sql.as_bytes());
        self.wbuf.extend_from_slice(&0i16.to_be_bytes());
        self.end_message(at);
    }

    /// Bind with every parameter in text format and text results (libpq's defaults).
    pub fn put_bind_i64(&mut self, statement: &str, params: &[i64]) {
        let at = self.begin_message(b'B');
        self.wbuf.push(0); // unnamed portal
        self.put_cstr(statement.as_bytes());
        self.wbuf.extend_from_slice(&0i16.to_be_bytes()); // all parameters text
        self.wbuf
            .extend_from_slice(&(params.len() as i16).to_be_bytes());
        for &value in params {
            let len_at = self.wbuf.len();
            self.wbuf.extend_from_slice(&[0, 0, 0, 0]);
            let n = write_i64(&mut self.wbuf, value);
            self.wbuf[len_at..len_at + 4].copy_from_slice(&(n as u32).to_be_bytes());
        }
        self.wbuf.extend_from_slice(&0i16.to_be_bytes()); // all results text
        self.end_message(at);
    }

    /// Execute the unnamed portal, all rows.
    pub fn put_execute(&mut self) {
        self.wbuf
            .extend_from_slice(&[b'E', 0, 0, 0, 9, 0, 0, 0, 0, 0]);
    }

    pub fn put_sync(&mut self) {
        self.wbuf.extend_from_slice(&[b'S', 0, 0, 0, 4]);
    }

    /// Say goodbye (Terminate) so the server logs a clean disconnect; best effort.
    pub fn terminate(&mut self) {
        let _ = self.sock().write(&[b'X', 0, 0, 0, 4]);
    }
}

/// Append the decimal text of `value`; returns the number of bytes written.
#[inline]
pub fn write_i64(out: &mut Vec<u8>, value: i64) -> usize {
    let mut digits = [0u8; 20];
    let mut n = value.unsigned_abs();
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut written = digits.len() - i;
    if value < 0 {
        out.push(b'-');
        written += 1;
    }
    out.extend_from_slice(&digits[i..]);
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conninfo_parses_libpq_key_value_with_quotes() {
        let info = ConnInfo::parse(
            "host=/tmp/pg port=5433 user=bench dbname='my db' password='it\\'s' options='-c a=b'",
        )
        .unwrap();
        assert_eq!(info.host, "/tmp/pg");
        assert_eq!(info.port, 5433);
        assert_eq!(info.user, "bench");
        assert_eq!(info.dbname, "my db");
        assert_eq!(info.password.as_deref(), Some("it's"));
        assert_eq!(info.options.as_deref(), Some("-c a=b"));
        assert!(!format!("{info:?}").contains("it's"));
    }

    #[test]
    fn conninfo_rejects_what_the_driver_cannot_do() {
        assert!(ConnInfo::parse("sslmode=require").is_err());
        assert!(ConnInfo::parse("postgresql://localhost/db").is_err());
        assert!(ConnInfo::parse("port=abc").is_err());
        assert!(ConnInfo::parse("host").is_err());
    }

    #[test]
    fn error_response_fields_are_read() {
        let body = b"SERROR\0VERROR\0C40001\0Mcould not serialize access\0\0";
        let err = SqlError::parse(body);
        assert_eq!(err.sqlstate_str(), "40001");
        assert_eq!(err.severity, "ERROR");
        assert_eq!(err.message, "could not serialize access");
    }

    #[test]
    fn integers_are_written_as_decimal_text() {
        for v in [0i64, 7, -5000, 5000, 100_000, i64::MIN, i64::MAX] {
            let mut out = Vec::new();
            let n = write_i64(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), v.to_string());
            assert_eq!(n, v.to_string().len());
        }
    }
}
