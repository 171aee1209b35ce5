//! One client's connection and its I/O: the socket watched by tokio's
//! reactor directly (`AsyncFd`), or driven through the worker thread's
//! io_uring; one reused read buffer; and the client's own count of the
//! connections it opened and the responses that ended one (`Churn`).
//!
//! Why `AsyncFd` and not `TcpStream`: a read that returns less than it
//! asked for has drained the socket, so the client clears the read readiness
//! itself, and the next response is waited for at once instead of first
//! costing a read that fails with EAGAIN (one syscall a request). Clearing is
//! safe: tokio ignores a clear older than the last event it saw, and bytes
//! that arrive later raise a new edge.

use crate::uring::{Ring, RingUser};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::unix::AsyncFd;
use tokio::time::Sleep;

pub(crate) type Stream = AsyncFd<std::net::TcpStream>;

/// Read buffer per client; bodies larger than this are read through it.
pub(crate) const BUF: usize = 64 * 1024;
/// Longest header block accepted.
pub(crate) const MAX_HEAD: usize = 16 * 1024;

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

/// Connection churn over a run, summed from every client: connections
/// opened and the time their connects took, responses read, how many of
/// them ended their connection (Connection: close or HTTP/1.0), and how many
/// kept-alive connections the server closed without saying so.
#[derive(Debug, Default)]
pub struct Churn {
    pub opened: AtomicU64,
    pub connect_ns: AtomicU64,
    pub responses: AtomicU64,
    pub closed_by_server: AtomicU64,
    pub closed_silently: AtomicU64,
    pub http10: AtomicU64,
}

/// A client's own counts, added to the run's `Churn` when it is dropped
/// (no shared counter is touched per request).
#[derive(Debug, Default)]
pub(crate) struct ChurnCounts {
    pub opened: u64,
    pub connect_ns: u64,
    pub responses: u64,
    pub closed_by_server: u64,
    pub closed_silently: u64,
    pub http10: u64,
}

impl ChurnCounts {
    fn add_to(&self, to: &Churn) {
        to.opened.fetch_add(self.opened, Ordering::Relaxed);
        to.connect_ns.fetch_add(self.connect_ns, Ordering::Relaxed);
        to.responses.fetch_add(self.responses, Ordering::Relaxed);
        to.closed_by_server
            .fetch_add(self.closed_by_server, Ordering::Relaxed);
        to.closed_silently
            .fetch_add(self.closed_silently, Ordering::Relaxed);
        to.http10.fetch_add(self.http10, Ordering::Relaxed);
    }
}

/// A connection: watched by tokio's epoll, or driven through the thread's ring.
pub(crate) enum Conn {
    Epoll(Stream),
    Ring(std::net::TcpStream, RingUser),
}

impl Conn {
    #[cfg(test)]
    pub fn raw_fd(&self) -> RawFd {
        match self {
            Conn::Epoll(s) => s.as_raw_fd(),
            Conn::Ring(s, _) => s.as_raw_fd(),
        }
    }

    pub fn into_inner(self) -> std::net::TcpStream {
        match self {
            Conn::Epoll(s) => s.into_inner(),
            // Dropping the RingUser detaches the connection from the ring.
            Conn::Ring(s, _) => s,
        }
    }
}

pub struct HttpClient {
    pub(crate) conn: Option<Conn>,
    /// The last connection, shut down, its fd number kept for the next
    /// (`sys::dup_onto`): the fd the harness shuts down on abort stays this
    /// client's through every reconnection.
    pub(crate) stale: Option<std::net::TcpStream>,
    pub(crate) fd: RawFd,
    pub(crate) served_on_connection: u32,
    /// BUF bytes; lent to the ring while a receive is in flight (empty if
    /// a timeout dropped it there, and then made again).
    pub(crate) buf: Vec<u8>,
    pub(crate) request: Vec<u8>,
    /// Set by `use_ring`: every connection of this client goes onto it.
    pub(crate) ring: Option<Rc<Ring>>,
    /// The request timeout's timer, kept from request to request (see
    /// `HttpProtocol::execute`); taken out while a request runs.
    pub(crate) timer: Option<Pin<Box<Sleep>>>,
    pub(crate) counts: ChurnCounts,
    pub(crate) churn: Arc<Churn>,
}

impl Drop for HttpClient {
    fn drop(&mut self) {
        self.counts.add_to(&self.churn);
    }
}

impl HttpClient {
    pub(crate) fn new(stream: Stream, churn: Arc<Churn>, counts: ChurnCounts) -> HttpClient {
        HttpClient {
            fd: stream.as_raw_fd(),
            conn: Some(Conn::Epoll(stream)),
            stale: None,
            served_on_connection: 0,
            buf: vec![0u8; BUF],
            request: Vec::with_capacity(256),
            ring: None,
            timer: None,
            counts,
            churn,
        }
    }

    /// Send the request when `send`, then read what is there, at most `max`
    /// bytes, into `buf[at..]` (waiting for it): Ok(0) is the server's close.
    pub(crate) async fn exchange(
        &mut self,
        send: bool,
        at: usize,
        max: usize,
    ) -> io::Result<usize> {
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
