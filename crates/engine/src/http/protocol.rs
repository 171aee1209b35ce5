//! HTTP/1.1 GET over keep-alive connections, as a harness protocol: one
//! client is one connection (re-opened after `requests_per_connection`, a
//! timeout or a server's close); a transaction is one request of the file
//! set's mix, its type the file's class. Every response's status and body
//! length are checked against the file's known size.
//!
//! The client is perflab's own: a request is written whole, the response
//! read into one reused buffer, its status line and headers scanned for the
//! status, Content-Length and Connection, and the body read and discarded
//! (counted). No chunked bodies: a static file server sends a length.
//!
//! The socket is watched by tokio's reactor directly (`AsyncFd`), not
//! through `TcpStream`, for one reason: a read that returns less than it
//! asked for has drained the socket, so the client clears the read readiness
//! itself, and the next response is waited for at once instead of first
//! costing a read that fails with EAGAIN (one syscall a request). Clearing is
//! safe: tokio ignores a clear older than the last event it saw, and bytes
//! that arrive later raise a new edge.
//!
//! With io_uring (`io = "auto"` where the kernel has it, or `"uring"`), a
//! connection leaves epoll after set-up and each request goes to the kernel
//! as a linked send and receive on the worker thread's ring, submitted with
//! every other ready client's in one io_uring_enter: the same batching that
//! the TPC-B driver uses (`crate::uring`). A reconnection is made through
//! tokio, then moved onto the ring again.

use super::fileset::{file_size, Chooser, CLASS_NAMES};
use crate::harness::{ErrorClass, Protocol, TxType};
use crate::random::Prng;
use crate::uring::{Ring, RingUser};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::time::{Instant, Sleep};

type Stream = AsyncFd<std::net::TcpStream>;

/// Write all of `buf`, waiting for room when the socket is full.
async fn write_all(stream: &Stream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match stream.get_ref().write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut guard = stream.writable().await?;
                guard.clear_ready();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Read what is there, up to `buf`'s length, waiting for it if need be.
async fn read(stream: &Stream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        let mut guard = stream.readable().await?;
        match guard.try_io(|s| s.get_ref().read(buf)) {
            Ok(Ok(n)) => {
                if n > 0 && n < buf.len() {
                    // Drained: the next read waits for a new edge (see above).
                    guard.clear_ready();
                }
                return Ok(n);
            }
            Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => {}
        }
    }
}

/// Read buffer per client; bodies larger than this are read through it.
const BUF: usize = 64 * 1024;
/// Longest header block accepted.
const MAX_HEAD: usize = 16 * 1024;

#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub addr: SocketAddr,
    /// The Host header.
    pub host: String,
    /// Path prefix of the file set on the server ("/" or "/files/").
    pub prefix: String,
    pub dirs: u32,
    /// Close and re-open the connection after this many requests (None: never).
    pub requests_per_connection: Option<u32>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Pause after each response (closed loop), outside the latency.
    pub think_time: Option<Duration>,
    /// Ask for this one file every time, (dir, class, file): the raw rate.
    pub only: Option<(u32, usize, usize)>,
}

pub struct HttpProtocol {
    cfg: HttpConfig,
    chooser: Chooser,
}

/// One request's draws: the file.
#[derive(Debug, Clone, Copy)]
pub struct HttpRequest {
    pub dir: u32,
    pub class: u8,
    pub file: u8,
}

/// A connection: watched by tokio's epoll, or driven through the thread's ring.
enum Conn {
    Epoll(Stream),
    Ring(std::net::TcpStream, RingUser),
}

impl Conn {
    #[cfg(test)]
    fn raw_fd(&self) -> RawFd {
        match self {
            Conn::Epoll(s) => s.as_raw_fd(),
            Conn::Ring(s, _) => s.as_raw_fd(),
        }
    }

    fn into_inner(self) -> std::net::TcpStream {
        match self {
            Conn::Epoll(s) => s.into_inner(),
            // Dropping the RingUser detaches the connection from the ring.
            Conn::Ring(s, _) => s,
        }
    }
}

pub struct HttpClient {
    conn: Option<Conn>,
    /// The last connection, shut down, its fd number kept for the next
    /// (`sys::dup_onto`): the fd the harness shuts down on abort stays this
    /// client's through every reconnection.
    stale: Option<std::net::TcpStream>,
    fd: RawFd,
    served_on_connection: u32,
    /// BUF bytes; lent to the ring while a receive is in flight (empty if
    /// a timeout dropped it there, and then made again).
    buf: Vec<u8>,
    request: Vec<u8>,
    /// Set by `use_ring`: every connection of this client goes onto it.
    ring: Option<Rc<Ring>>,
    /// The request timeout's timer, kept from request to request (see
    /// `HttpProtocol::execute`); taken out while a request runs.
    timer: Option<Pin<Box<Sleep>>>,
}

impl HttpClient {
    /// Send the request when `send`, then read what is there, at most `max`
    /// bytes, into `buf[at..]` (waiting for it): Ok(0) is the server's close.
    async fn exchange(&mut self, send: bool, at: usize, max: usize) -> io::Result<usize> {
        if self.buf.len() != BUF {
            self.buf = vec![0u8; BUF];
        }
        let end = (at + max).min(BUF);
        match self.conn.as_ref().expect("connected") {
            Conn::Epoll(stream) => {
                if send {
                    write_all(stream, &self.request).await?;
                }
                read(stream, &mut self.buf[at..end]).await
            }
            Conn::Ring(sock, user) => {
                let (fd, ring) = (sock.as_raw_fd(), user.ring().clone());
                let mut send = send;
                loop {
                    let out = if send {
                        std::mem::take(&mut self.request)
                    } else {
                        Vec::new()
                    };
                    let sent_len = out.len();
                    let recv = std::mem::take(&mut self.buf);
                    let done = ring.round_trip_upto(fd, out, recv, at, end - at).await;
                    self.buf = done.recv_buf;
                    if send {
                        self.request = done.send_buf;
                    }
                    if let Some(res) = done.send_failed {
                        return Err(if res < 0 {
                            io::Error::from_raw_os_error(-res)
                        } else {
                            io::Error::new(
                                io::ErrorKind::WriteZero,
                                format!("short send ({res} of {sent_len} bytes)"),
                            )
                        });
                    }
                    send = false;
                    match done.recv_result {
                        n if n >= 0 => return Ok(n as usize),
                        e if e == -libc::EINTR || e == -libc::EAGAIN => continue,
                        e => return Err(io::Error::from_raw_os_error(-e)),
                    }
                }
            }
        }
    }
}

#[derive(Debug)]
pub enum HttpError {
    /// Nobody listens: the server is gone; the client cannot go on.
    Refused(io::Error),
    Connect(io::Error),
    ConnectTimeout,
    Timeout,
    Status(u16),
    /// Fewer body bytes than the file has (Content-Length or a close mid-body).
    ShortBody {
        got: u64,
        want: u64,
    },
    /// More body bytes than the file has.
    LongBody {
        got: u64,
        want: u64,
    },
    BadResponse(String),
    /// The connection failed while a response was due.
    Io(io::Error),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Refused(e) => write!(f, "http connect: {e}"),
            HttpError::Connect(e) => write!(f, "http connect: {e}"),
            HttpError::ConnectTimeout => f.write_str("http connect: timed out"),
            HttpError::Timeout => f.write_str("http request timed out"),
            HttpError::Status(s) => write!(f, "http status {s}"),
            HttpError::ShortBody { got, want } => {
                write!(f, "http short body: {got} of {want} bytes")
            }
            HttpError::LongBody { got, want } => {
                write!(f, "http body of {got} bytes, the file has {want}")
            }
            HttpError::BadResponse(m) => write!(f, "http bad response: {m}"),
            HttpError::Io(e) => write!(f, "http connection: {e}"),
        }
    }
}

impl HttpError {
    /// Whether the connection is unusable after this error.
    fn drops_connection(&self) -> bool {
        !matches!(self, HttpError::Status(_) | HttpError::LongBody { .. })
    }
}

/// A whole response is good when it is a 200 with the file's exact size.
pub(crate) fn check_response(status: u16, got: u64, want: u64) -> Result<(), HttpError> {
    if status != 200 {
        return Err(HttpError::Status(status));
    }
    if got < want {
        return Err(HttpError::ShortBody { got, want });
    }
    if got > want {
        return Err(HttpError::LongBody { got, want });
    }
    Ok(())
}

/// What the response head said.
struct Head {
    status: u16,
    content_length: Option<u64>,
    close: bool,
    /// Bytes of the head, through the blank line.
    len: usize,
}

/// The blank line's end: the length of the head, if `buf` holds all of it;
/// `from` is where the bytes not yet searched begin.
fn find_head_end(buf: &[u8], from: usize) -> Option<usize> {
    // One SIMD search for the 4 bytes (memchr's memmem), not a byte loop
    // per line: the head is scanned on every response.
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\r\n\r\n"));
    let start = from.saturating_sub(3);
    FINDER.find(&buf[start..]).map(|at| start + at + 4)
}

fn parse_head(head: &[u8]) -> Result<Head, HttpError> {
    let bad = |m: &str| HttpError::BadResponse(m.to_string());
    let body = &head[..head.len() - 4];
    let first_end = memchr::memchr(b'\n', body).unwrap_or(body.len());
    let status_line = &body[..first_end];
    if !status_line.starts_with(b"HTTP/1.") || status_line.len() < 12 {
        return Err(bad("no HTTP/1.x status line"));
    }
    let code = &status_line[9..12];
    if !code.iter().all(u8::is_ascii_digit) {
        return Err(bad("no status code"));
    }
    let status = code.iter().fold(0u16, |a, &d| a * 10 + (d - b'0') as u16);
    let mut content_length = None;
    let mut close = status_line.starts_with(b"HTTP/1.0");
    let mut at = first_end + 1;
    while at < body.len() {
        let end = memchr::memchr(b'\n', &body[at..]).map_or(body.len(), |n| at + n);
        let line = &body[at..end];
        at = end + 1;
        // Only names starting with c or t matter (Content-Length, Connection,
        // Transfer-Encoding): skip the rest before looking for the colon.
        if !matches!(line.first(), Some(b'c' | b'C' | b't' | b'T')) {
            continue;
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let name = &line[..colon];
        let value = line[colon + 1..].trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| bad("bad Content-Length"))?;
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Err(bad("chunked body (a static file has a length)"));
        } else if name.eq_ignore_ascii_case(b"connection") {
            close = value.eq_ignore_ascii_case(b"close");
        }
    }
    Ok(Head {
        status,
        content_length,
        close,
        len: head.len(),
    })
}

impl HttpProtocol {
    pub fn new(cfg: HttpConfig) -> HttpProtocol {
        let chooser = Chooser::new(cfg.dirs.max(1));
        HttpProtocol { cfg, chooser }
    }

    /// "GET {prefix}dir00042/class2_7 HTTP/1.1\r\nHost: ...\r\n\r\n", built
    /// without the formatter (it showed in the driver's profile).
    fn write_request(&self, out: &mut Vec<u8>, r: &HttpRequest) {
        out.clear();
        out.extend_from_slice(b"GET ");
        out.extend_from_slice(self.cfg.prefix.as_bytes());
        if r.dir < 100_000 {
            let mut digits = [b'0'; 5];
            let mut d = r.dir;
            for slot in digits.iter_mut().rev() {
                *slot = b'0' + (d % 10) as u8;
                d /= 10;
            }
            out.extend_from_slice(b"dir");
            out.extend_from_slice(&digits);
        } else {
            let _ = write!(out, "dir{}", r.dir);
        }
        out.extend_from_slice(b"/class");
        out.push(b'0' + r.class);
        out.push(b'_');
        out.push(b'0' + r.file);
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(self.cfg.host.as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
    }

    pub fn config(&self) -> &HttpConfig {
        &self.cfg
    }

    /// The next request's file: the one file asked for, or the mix's draw.
    pub fn draw(&self, rng: &mut Prng) -> (TxType, HttpRequest) {
        let (class, dir, file) = match self.cfg.only {
            Some((dir, class, file)) => (class, dir, file),
            None => self.chooser.choose(rng),
        };
        (
            class,
            HttpRequest {
                dir,
                class: class as u8,
                file: file as u8,
            },
        )
    }

    async fn open(&self) -> Result<Stream, HttpError> {
        let connect = tokio::net::TcpStream::connect(self.cfg.addr);
        match tokio::time::timeout(self.cfg.connect_timeout, connect).await {
            Err(_) => Err(HttpError::ConnectTimeout),
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                Err(HttpError::Refused(e))
            }
            Ok(Err(e)) => Err(HttpError::Connect(e)),
            Ok(Ok(stream)) => {
                stream.set_nodelay(true).map_err(HttpError::Connect)?;
                // Off tokio's TcpStream (deregistered), onto an AsyncFd of our own.
                let stream = stream.into_std().map_err(HttpError::Connect)?;
                crate::sys::watch(stream, Interest::READABLE | Interest::WRITABLE)
                    .map_err(HttpError::Connect)
            }
        }
    }

    /// End the client's connection (the server sees it closed); its fd
    /// number stays open, shut down, for the next connection.
    fn hang_up(c: &mut HttpClient) {
        if let Some(conn) = c.conn.take() {
            let stream = conn.into_inner();
            let _ = stream.shutdown(std::net::Shutdown::Both);
            c.stale = Some(stream);
        }
    }

    /// A new connection for the client, on its fd number.
    async fn reconnect(&self, c: &mut HttpClient) -> Result<(), HttpError> {
        let fresh = self.open().await?;
        c.served_on_connection = 0;
        let stream = match c.stale.take() {
            None => fresh.into_inner(),
            Some(stale) => {
                let fresh = fresh.into_inner();
                if let Err(e) = crate::sys::dup_onto(&fresh, &stale) {
                    c.stale = Some(stale);
                    return Err(HttpError::Connect(e));
                }
                stale
            }
        };
        c.conn = Some(match &c.ring {
            Some(ring) => Conn::Ring(stream, ring.attach()),
            None => Conn::Epoll(
                crate::sys::watch(stream, Interest::READABLE | Interest::WRITABLE)
                    .map_err(HttpError::Connect)?,
            ),
        });
        Ok(())
    }

    /// One request and its response on the client's connection: Ok(the
    /// response ended the connection).
    async fn round_trip(&self, c: &mut HttpClient, want: u64) -> Result<bool, HttpError> {
        let reused = c.served_on_connection > 0;
        let mut filled = 0;
        // A server may close an idle kept-alive connection just as a request
        // goes out; that request is sent again once, on a new connection.
        let n = match c.exchange(true, 0, BUF).await {
            Ok(0) | Err(_) if reused => {
                Self::hang_up(c);
                self.reconnect(c).await?;
                c.exchange(true, 0, BUF).await.map_err(HttpError::Io)?
            }
            Ok(n) => n,
            Err(e) => return Err(HttpError::Io(e)),
        };
        if n == 0 {
            return Err(HttpError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        filled += n;
        let head_end = loop {
            if let Some(end) = find_head_end(&c.buf[..filled], filled - n) {
                break end;
            }
            if filled >= MAX_HEAD {
                return Err(HttpError::BadResponse("header block over 16 KiB".into()));
            }
            let n = c
                .exchange(false, filled, BUF - filled)
                .await
                .map_err(HttpError::Io)?;
            if n == 0 {
                return Err(HttpError::Io(io::ErrorKind::UnexpectedEof.into()));
            }
            filled += n;
        };
        let head = parse_head(&c.buf[..head_end])?;
        let Some(length) = head.content_length else {
            return Err(HttpError::BadResponse("no Content-Length".into()));
        };
        let mut got = (filled - head.len) as u64;
        if got > length {
            return Err(HttpError::BadResponse(
                "more bytes than Content-Length (no pipelining was asked)".into(),
            ));
        }
        while got < length {
            let room = ((length - got) as usize).min(BUF);
            let n = c.exchange(false, 0, room).await.map_err(HttpError::Io)?;
            if n == 0 {
                return Err(HttpError::ShortBody { got, want: length });
            }
            got += n as u64;
        }
        check_response(head.status, length, want)?;
        Ok(head.close)
    }
}

impl Protocol for HttpProtocol {
    type Client = HttpClient;
    type Request = HttpRequest;
    type Error = HttpError;
    const HAS_PAUSES: bool = true;
    const COUNTS_BYTES: bool = true;
    const SUPPORTS_RING: bool = true;

    fn transaction_types(&self) -> &[&'static str] {
        &CLASS_NAMES
    }

    async fn connect(&self, _client: u32) -> Result<HttpClient, HttpError> {
        let stream = self.open().await?;
        Ok(HttpClient {
            fd: stream.as_raw_fd(),
            conn: Some(Conn::Epoll(stream)),
            stale: None,
            served_on_connection: 0,
            buf: vec![0u8; BUF],
            request: Vec::with_capacity(256),
            ring: None,
            timer: None,
        })
    }

    fn use_ring(&self, c: &mut HttpClient, ring: &Rc<Ring>) -> Result<(), String> {
        if c.ring.is_some() {
            return Err("the client already uses a ring".into());
        }
        c.ring = Some(ring.clone());
        if let Some(conn) = c.conn.take() {
            c.conn = Some(Conn::Ring(conn.into_inner(), ring.attach()));
        }
        Ok(())
    }

    fn socket(&self, client: &HttpClient) -> Option<RawFd> {
        Some(client.fd)
    }

    fn next_transaction(&self, _client: &mut HttpClient, rng: &mut Prng) -> (TxType, HttpRequest) {
        self.draw(rng)
    }

    async fn execute(
        &self,
        c: &mut HttpClient,
        _tx: TxType,
        r: &HttpRequest,
    ) -> Result<(), HttpError> {
        let want = file_size(r.class as usize, r.file as usize);
        self.write_request(&mut c.request, r);
        // The timeout without a timer per request: the client's one timer
        // stays armed at an earlier request's deadline, which is never later
        // than this one's (the timeout is the same and requests start in
        // order). When it fires before this request's deadline, it is moved
        // to it; a request that ends first costs no timer operation at all.
        // (tokio::time::timeout registered and removed a timer per request:
        // about a tenth of the driver's user time on 1 KiB files.)
        let deadline = Instant::now() + self.cfg.request_timeout;
        let mut timer = c
            .timer
            .take()
            .unwrap_or_else(|| Box::pin(tokio::time::sleep_until(deadline)));
        let result = {
            let work = async {
                if c.conn.is_none() {
                    self.reconnect(c).await?;
                }
                self.round_trip(c, want).await
            };
            tokio::pin!(work);
            loop {
                tokio::select! {
                    biased;
                    result = &mut work => break Ok(result),
                    () = &mut timer => {
                        if Instant::now() >= deadline {
                            break Err(());
                        }
                        timer.as_mut().reset(deadline);
                    }
                }
            }
        };
        c.timer = Some(timer);
        match result {
            Err(_) => {
                Self::hang_up(c);
                Err(HttpError::Timeout)
            }
            Ok(Err(e)) => {
                if e.drops_connection() {
                    Self::hang_up(c);
                } else {
                    c.served_on_connection += 1;
                }
                Err(e)
            }
            Ok(Ok(closed)) => {
                c.served_on_connection += 1;
                if closed
                    || self
                        .cfg
                        .requests_per_connection
                        .is_some_and(|n| c.served_on_connection >= n)
                {
                    Self::hang_up(c);
                }
                Ok(())
            }
        }
    }

    fn classify(&self, error: &HttpError) -> ErrorClass {
        let kind = match error {
            HttpError::Refused(_) => return ErrorClass::Fatal,
            HttpError::Connect(_) | HttpError::ConnectTimeout => "connect".to_string(),
            HttpError::Timeout => "timeout".to_string(),
            HttpError::Status(s) => format!("{}xx", s / 100),
            HttpError::ShortBody { .. } => "short-body".to_string(),
            HttpError::LongBody { .. } => "long-body".to_string(),
            HttpError::BadResponse(_) => "bad-response".to_string(),
            HttpError::Io(_) => "closed".to_string(),
        };
        ErrorClass::Counted { kind }
    }

    fn pause_after(&self, _tx: TxType, _rng: &mut Prng) -> Option<Duration> {
        self.cfg.think_time
    }

    fn bytes(&self, request: &HttpRequest) -> u64 {
        file_size(request.class as usize, request.file as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protocol(prefix: &str, dirs: u32) -> HttpProtocol {
        HttpProtocol::new(HttpConfig {
            addr: "127.0.0.1:9".parse().unwrap(),
            host: "127.0.0.1:9".into(),
            prefix: prefix.into(),
            dirs,
            requests_per_connection: None,
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(1),
            think_time: None,
            only: None,
        })
    }

    #[test]
    fn the_head_end_is_found_however_the_head_arrives() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        let len = head.len() - 5;
        for arrived in 0..=head.len() {
            // what arrived so far was searched; the rest comes next
            let found_early = find_head_end(&head[..arrived], 0);
            assert_eq!(found_early, (arrived >= len).then_some(len), "{arrived}");
            if arrived < len {
                assert_eq!(find_head_end(head, arrived), Some(len), "{arrived}");
            }
        }
        assert_eq!(find_head_end(b"HTTP/1.1 200 OK\r\n\r", 0), None);
        let bare = b"HTTP/1.1 204 No Content\r\n\r\n";
        let h = parse_head(&bare[..find_head_end(bare, 0).unwrap()]).unwrap();
        assert_eq!((h.status, h.content_length, h.close), (204, None, false));
    }

    #[test]
    fn a_response_head_gives_status_length_and_close() {
        let head =
            b"HTTP/1.1 200 OK\r\nServer: x\r\ncontent-length: 1024\r\nConnection: close\r\n\r\n";
        let end = find_head_end(head, 0).unwrap();
        assert_eq!(end, head.len());
        let h = parse_head(&head[..end]).unwrap();
        assert_eq!(
            (h.status, h.content_length, h.close),
            (200, Some(1024), true)
        );
        let h = parse_head(b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\n").unwrap();
        assert_eq!((h.status, h.content_length, h.close), (404, Some(5), false));
        assert!(parse_head(b"HTTP/1.0 200 OK\r\n\r\n").unwrap().close);
        assert!(matches!(
            parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(HttpError::BadResponse(_))
        ));
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        // The blank line split across reads is found from the new bytes on.
        let two = b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n";
        assert_eq!(find_head_end(two, two.len() - 2), Some(two.len()));
        assert_eq!(find_head_end(b"HTTP/1.1 200 OK\r\n", 0), None);
    }

    #[test]
    fn a_request_names_the_file_under_the_prefix() {
        let p = protocol("/files/", 200_000);
        let mut out = Vec::new();
        let r = |dir, class, file| HttpRequest { dir, class, file };
        p.write_request(&mut out, &r(42, 2, 7));
        assert_eq!(
            out,
            b"GET /files/dir00042/class2_7 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n"
        );
        p.write_request(&mut out, &r(123_456, 0, 0));
        assert!(out.starts_with(b"GET /files/dir123456/class0_0 HTTP/1.1\r\n"));
        assert_eq!(
            super::super::fileset::relative_path(42, 2, 7),
            "dir00042/class2_7"
        );
    }

    #[test]
    fn errors_are_counted_by_kind_and_a_refusal_loses_the_client() {
        let p = protocol("/", 1);
        let kind = |e: HttpError| match p.classify(&e) {
            ErrorClass::Counted { kind } => kind,
            other => panic!("{other:?}"),
        };
        assert_eq!(kind(HttpError::Status(404)), "4xx");
        assert_eq!(kind(HttpError::Status(503)), "5xx");
        assert_eq!(kind(HttpError::Timeout), "timeout");
        assert_eq!(kind(HttpError::ConnectTimeout), "connect");
        assert_eq!(kind(HttpError::ShortBody { got: 1, want: 2 }), "short-body");
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(p.classify(&HttpError::Refused(refused)), ErrorClass::Fatal);
    }

    /// A server answering every request with file class0_0's 102 bytes, on
    /// one thread per connection; it counts the connections it accepted.
    fn tiny_server() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicU32>) {
        tiny_server_answering(u32::MAX)
    }

    /// The same, answering only the first `answered` requests of each
    /// connection and then holding it open in silence.
    fn tiny_server_answering(
        answered: u32,
    ) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicU32>) {
        use std::io::{Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(50) {
                let Ok(mut stream) = stream else { return };
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let mut have = Vec::new();
                    let mut served = 0;
                    loop {
                        let Ok(n) = stream.read(&mut buf) else { return };
                        if n == 0 {
                            return;
                        }
                        have.extend_from_slice(&buf[..n]);
                        while let Some(end) = find_head_end(&have, 0) {
                            have.drain(..end);
                            if served == answered {
                                continue;
                            }
                            served += 1;
                            let mut reply =
                                b"HTTP/1.1 200 OK\r\nContent-Length: 102\r\n\r\n".to_vec();
                            reply.extend_from_slice(&[7u8; 102]);
                            if stream.write_all(&reply).is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    #[test]
    fn a_client_reconnects_every_n_requests_on_the_same_fd_number() {
        let (addr, accepted) = tiny_server();
        let mut cfg = protocol("/", 1).cfg;
        cfg.addr = addr;
        cfg.requests_per_connection = Some(2);
        cfg.only = Some((0, 0, 0));
        let p = HttpProtocol::new(cfg);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut c = p.connect(0).await.unwrap();
            let fd = p.socket(&c).unwrap();
            let r = HttpRequest {
                dir: 0,
                class: 0,
                file: 0,
            };
            for _ in 0..10 {
                p.execute(&mut c, 0, &r).await.unwrap();
                let now = c.conn.as_ref().map(|s| s.raw_fd());
                let kept = c.stale.as_ref().map(|s| s.as_raw_fd());
                assert_eq!(now.or(kept), Some(fd), "the client's fd number is kept");
            }
        });
        // 10 requests, 2 a connection: 5 connections.
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 5);
    }

    #[test]
    fn a_request_times_out_after_its_own_timeout_and_the_next_reconnects() {
        let (addr, accepted) = tiny_server_answering(3);
        let mut cfg = protocol("/", 1).cfg;
        cfg.addr = addr;
        cfg.request_timeout = Duration::from_millis(300);
        cfg.only = Some((0, 0, 0));
        let p = HttpProtocol::new(cfg);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let r = HttpRequest {
            dir: 0,
            class: 0,
            file: 0,
        };
        runtime.block_on(async {
            let mut c = p.connect(0).await.unwrap();
            for round in 0..2 {
                for _ in 0..3 {
                    p.execute(&mut c, 0, &r).await.unwrap();
                }
                // A request that starts well after the first of its
                // connection still gets its whole timeout.
                tokio::time::sleep(Duration::from_millis(200)).await;
                let started = std::time::Instant::now();
                let err = p.execute(&mut c, 0, &r).await.unwrap_err();
                let waited = started.elapsed();
                assert!(matches!(err, HttpError::Timeout), "round {round}: {err}");
                assert!(
                    waited >= Duration::from_millis(300) && waited < Duration::from_millis(1500),
                    "round {round}: timed out after {waited:?}"
                );
                assert!(c.conn.is_none(), "a timed-out connection is dropped");
            }
            // Each round's first request opened a connection (the first by connect).
            p.execute(&mut c, 0, &r).await.unwrap();
        });
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[test]
    fn on_the_ring_a_client_reads_whole_responses_and_reconnects_onto_the_ring() {
        if let Err(why) = crate::uring::probe() {
            eprintln!("skipped: no io_uring here ({why})");
            return;
        }
        let (addr, accepted) = tiny_server();
        let mut cfg = protocol("/", 1).cfg;
        cfg.addr = addr;
        cfg.requests_per_connection = Some(3);
        cfg.only = Some((0, 0, 0));
        let p = HttpProtocol::new(cfg);
        // As a harness worker runs: what the clients queue is submitted
        // when the runtime parks, and a reaper task collects completions.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_park(crate::uring::submit_thread_ring)
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        let enters = local.block_on(&runtime, async {
            let ring = Ring::new(1).unwrap();
            crate::uring::set_thread_ring(Some(ring.clone()));
            let reaper = tokio::task::spawn_local(ring.clone().reap_forever());
            let mut c = p.connect(0).await.unwrap();
            let fd = p.socket(&c).unwrap();
            p.use_ring(&mut c, &ring).unwrap();
            assert!(p.use_ring(&mut c, &ring).is_err(), "a client switches once");
            let r = HttpRequest {
                dir: 0,
                class: 0,
                file: 0,
            };
            for i in 0..9 {
                p.execute(&mut c, 0, &r).await.unwrap();
                match &c.conn {
                    Some(Conn::Ring(s, _)) => assert_eq!(s.as_raw_fd(), fd),
                    None => assert_eq!(i % 3, 2, "hung up only after every third request"),
                    Some(Conn::Epoll(_)) => panic!("request {i} went through epoll"),
                }
            }
            let enters = ring.enters();
            drop(c);
            reaper.abort();
            crate::uring::set_thread_ring(None);
            enters
        });
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert!(
            enters >= 9,
            "every request went through io_uring_enter ({enters})"
        );
    }
}
