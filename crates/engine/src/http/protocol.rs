//! HTTP/1.1 over keep-alive connections, as a harness protocol: one client
//! is one connection (re-opened after `requests_per_connection`, a timeout
//! or a server's close). A transaction is one request: a file of the
//! SPECweb99-like set (its type the file's class, its response checked
//! against the file's known size), or an entry of a request mix of any
//! server's URLs (its type the entry, any status below 400 good).
//!
//! The client is perflab's own (`conn`): a request is written whole, the
//! response read into one reused buffer, its head scanned (`response`) for
//! the status, Content-Length and Connection, and the body read and
//! discarded (counted). A body has a Content-Length, is chunked, or ends
//! with the connection (HTTP/1.0).
//!
//! With io_uring (`io = "auto"` where the kernel has it, or `"uring"`), a
//! connection leaves epoll after set-up and each request goes to the kernel
//! as a linked send and receive on the worker thread's ring, submitted with
//! every other ready client's in one io_uring_enter: the same batching that
//! the TPC-B driver uses (`crate::uring`). A reconnection is made through
//! tokio, then moved onto the ring again.

use super::conn::{Churn, ChurnCounts, Conn, HttpClient, Stream, BUF, MAX_HEAD};
use super::fileset::{file_size, Chooser, CLASS_NAMES};
use super::mix::RequestMix;
pub use super::response::HttpError;
use super::response::{check_response, find_head_end, has_no_body, parse_head, Chunked};
use crate::harness::{ErrorClass, Protocol, TxType};
use crate::random::Prng;
use crate::uring::Ring;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::Interest;
use tokio::time::Instant;

/// What the clients ask for.
#[derive(Debug, Clone)]
pub enum Requests {
    /// The SPECweb99-like file set under `prefix` ("/" or "/files/") on the
    /// server; `only` asks for this one file every time, (dir, class, file):
    /// the raw rate.
    FileSet {
        prefix: String,
        dirs: u32,
        only: Option<(u32, usize, usize)>,
    },
    /// Any server's URLs, by weight.
    Mix(RequestMix),
}

#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub addr: SocketAddr,
    /// The Host header.
    pub host: String,
    pub requests: Requests,
    /// Close and re-open the connection after this many requests (None: never).
    pub requests_per_connection: Option<u32>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Pause after each response (closed loop), outside the latency.
    pub think_time: Option<Duration>,
}

pub struct HttpProtocol {
    cfg: HttpConfig,
    chooser: Chooser,
    churn: Arc<Churn>,
}

/// One request's draws: a file of the set, or an entry of the mix.
#[derive(Debug, Clone, Copy)]
pub enum HttpRequest {
    File { dir: u32, class: u8, file: u8 },
    Mix(usize),
}

impl HttpProtocol {
    pub fn new(cfg: HttpConfig) -> HttpProtocol {
        let dirs = match &cfg.requests {
            Requests::FileSet { dirs, .. } => *dirs,
            Requests::Mix(_) => 1,
        };
        HttpProtocol {
            chooser: Chooser::new(dirs.max(1)),
            cfg,
            churn: Arc::default(),
        }
    }

    /// The run's connection churn, summed as its clients end.
    pub fn churn(&self) -> Arc<Churn> {
        self.churn.clone()
    }

    /// The request's bytes into `out`: the mix's entry as written, or "GET
    /// {prefix}dir00042/class2_7 HTTP/1.1\r\nHost: ...\r\n\r\n", built
    /// without the formatter (it showed in the driver's profile).
    pub(crate) fn write_request(&self, out: &mut Vec<u8>, r: &HttpRequest) {
        out.clear();
        let (prefix, dir, class, file) = match (r, &self.cfg.requests) {
            (HttpRequest::Mix(i), Requests::Mix(mix)) => {
                out.extend_from_slice(mix.request(*i));
                return;
            }
            (HttpRequest::File { dir, class, file }, Requests::FileSet { prefix, .. }) => {
                (prefix, *dir, *class, *file)
            }
            _ => unreachable!("a request is drawn from the config's own requests"),
        };
        out.extend_from_slice(b"GET ");
        out.extend_from_slice(prefix.as_bytes());
        if dir < 100_000 {
            let mut digits = [b'0'; 5];
            let mut d = dir;
            for slot in digits.iter_mut().rev() {
                *slot = b'0' + (d % 10) as u8;
                d /= 10;
            }
            out.extend_from_slice(b"dir");
            out.extend_from_slice(&digits);
        } else {
            let _ = write!(out, "dir{dir}");
        }
        out.extend_from_slice(b"/class");
        out.push(b'0' + class);
        out.push(b'_');
        out.push(b'0' + file);
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(self.cfg.host.as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
    }

    pub fn config(&self) -> &HttpConfig {
        &self.cfg
    }

    /// The next request: the one file asked for, the set's draw, or the mix's.
    pub fn draw(&self, rng: &mut Prng) -> (TxType, HttpRequest) {
        let (class, dir, file) = match &self.cfg.requests {
            Requests::Mix(mix) => {
                let i = mix.draw(rng);
                return (i, HttpRequest::Mix(i));
            }
            Requests::FileSet {
                only: Some((dir, class, file)),
                ..
            } => (*class, *dir, *file),
            Requests::FileSet { only: None, .. } => self.chooser.choose(rng),
        };
        (
            class,
            HttpRequest::File {
                dir,
                class: class as u8,
                file: file as u8,
            },
        )
    }

    /// The body size a good response has, where it is known.
    fn known_size(r: &HttpRequest) -> Option<u64> {
        match r {
            HttpRequest::File { class, file, .. } => {
                Some(file_size(*class as usize, *file as usize))
            }
            HttpRequest::Mix(_) => None,
        }
    }

    fn is_head(&self, r: &HttpRequest) -> bool {
        match (r, &self.cfg.requests) {
            (HttpRequest::Mix(i), Requests::Mix(mix)) => mix.is_head(*i),
            _ => false,
        }
    }

    /// A new connection and the time its connect took.
    async fn open(&self) -> Result<(Stream, Duration), HttpError> {
        let started = std::time::Instant::now();
        let connect = tokio::net::TcpStream::connect(self.cfg.addr);
        match tokio::time::timeout(self.cfg.connect_timeout, connect).await {
            Err(_) => Err(HttpError::ConnectTimeout),
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                Err(HttpError::Refused(e))
            }
            Ok(Err(e)) => Err(HttpError::Connect(e)),
            Ok(Ok(stream)) => {
                let took = started.elapsed();
                stream.set_nodelay(true).map_err(HttpError::Connect)?;
                // Off tokio's TcpStream (deregistered), onto an AsyncFd of our own.
                let stream = stream.into_std().map_err(HttpError::Connect)?;
                let stream = crate::sys::watch(stream, Interest::READABLE | Interest::WRITABLE)
                    .map_err(HttpError::Connect)?;
                Ok((stream, took))
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
        let (fresh, took) = self.open().await?;
        c.counts.opened += 1;
        c.counts.connect_ns += took.as_nanos() as u64;
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
    /// response ended the connection). `want`: the body's size where it is
    /// known; `head_request`: the response has no body (a HEAD).
    async fn round_trip(
        &self,
        c: &mut HttpClient,
        want: Option<u64>,
        head_request: bool,
    ) -> Result<bool, HttpError> {
        let reused = c.served_on_connection > 0;
        let mut filled = 0;
        // A server may close an idle kept-alive connection just as a request
        // goes out; that request is sent again once, on a new connection.
        let n = match c.exchange(true, 0, BUF).await {
            Ok(0) | Err(_) if reused => {
                // The server ended a kept-alive connection without saying
                // so (no Connection: close on the last response).
                c.counts.closed_silently += 1;
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
        c.counts.responses += 1;
        c.counts.closed_by_server += head.close as u64;
        c.counts.http10 += head.http10 as u64;
        let mut got = (filled - head.len) as u64;
        let length = if has_no_body(head_request, head.status) {
            0
        } else if head.chunked {
            // Framed by chunks: whole when the last chunk and trailers are read.
            let mut framing = Chunked::new();
            let mut ended = framing
                .feed(&c.buf[head.len..filled])?
                .map(|used| head.len + used == filled);
            while ended.is_none() {
                let n = c.exchange(false, 0, BUF).await.map_err(HttpError::Io)?;
                if n == 0 {
                    return Err(HttpError::Io(io::ErrorKind::UnexpectedEof.into()));
                }
                ended = framing.feed(&c.buf[..n])?.map(|used| used == n);
            }
            if ended == Some(false) {
                return Err(HttpError::BadResponse(
                    "more bytes than the chunked body (no pipelining was asked)".into(),
                ));
            }
            got = framing.data;
            got
        } else if let Some(length) = head.content_length {
            length
        } else if head.close {
            // No length: the body ends with the connection (HTTP/1.0).
            loop {
                let n = c.exchange(false, 0, BUF).await.map_err(HttpError::Io)?;
                if n == 0 {
                    break got;
                }
                got += n as u64;
            }
        } else {
            return Err(HttpError::BadResponse(
                "no Content-Length on a kept-alive connection".into(),
            ));
        };
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
        if let Err(e) = check_response(head.status, length, want) {
            if head.close {
                // a refusal the server ended the connection after (a 404 of HTTP/1.0)
                Self::hang_up(c);
            }
            return Err(e);
        }
        Ok(head.close)
    }
}

impl Protocol for HttpProtocol {
    type Client = HttpClient;
    type Request = HttpRequest;
    type Error = HttpError;
    const HAS_PAUSES: bool = true;
    const COUNTS_BODY_BYTES: bool = true;
    const SUPPORTS_RING: bool = true;

    fn transaction_types(&self) -> &[&'static str] {
        match &self.cfg.requests {
            Requests::FileSet { .. } => &CLASS_NAMES,
            Requests::Mix(mix) => mix.names(),
        }
    }

    async fn connect(&self, _client: u32) -> Result<HttpClient, HttpError> {
        let (stream, took) = self.open().await?;
        let counts = ChurnCounts {
            opened: 1,
            connect_ns: took.as_nanos() as u64,
            ..ChurnCounts::default()
        };
        Ok(HttpClient::new(stream, self.churn.clone(), counts))
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
        let (want, head_request) = (Self::known_size(r), self.is_head(r));
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
                self.round_trip(c, want, head_request).await
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
            HttpError::Io(e) if e.kind() == io::ErrorKind::ConnectionReset => "reset".to_string(),
            HttpError::Io(_) => "closed".to_string(),
        };
        ErrorClass::Counted { kind }
    }

    fn pause_after(&self, _tx: TxType, _rng: &mut Prng) -> Option<Duration> {
        self.cfg.think_time
    }

    fn body_bytes(&self, request: &HttpRequest) -> u64 {
        Self::known_size(request).unwrap_or(0)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
