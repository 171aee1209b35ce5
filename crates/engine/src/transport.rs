//! One client socket, as every database client of the engine drives it
//! (`pg::PgConn`, `mysql::MyConn`): TCP or a unix socket, non-blocking, on
//! tokio's epoll reactor for read readiness only or, after `use_ring`, on the
//! thread's io_uring; a read buffer the protocol frames messages in, and a
//! write buffer it appends messages to.
//!
//! Read interest only: with write interest too, every send raises an
//! edge-triggered EPOLLOUT once the server has read it, and that spurious
//! wake-up cost a context switch per statement (perf stat: 1.8 instead of 1.0
//! per statement at one client). Writes that find the send buffer full (large
//! COPY chunks, LOAD DATA) wait for write readiness apart (`wait_writable`).
//!
//! With a ring, `fill` sends what `wbuf` holds linked to the receive, so a
//! round trip is one submission shared with the thread's other clients.
//! Errors are the socket's words (a `Lost`); each protocol says them its way.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::sys::{self, OwnsFd};
use crate::uring::{Ring, RingUser};

/// The connection ended or the socket failed: what the OS said.
#[derive(Debug, Clone)]
pub struct Lost(pub String);

fn lost(e: io::Error) -> Lost {
    Lost(e.to_string())
}

const CLOSED: &str = "the server closed the connection";
const READ_BUFFER_BYTES: usize = 16 * 1024;

pub enum Sock {
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

    /// Connect to a unix socket at `path`, or to TCP `host`:`port` (with
    /// TCP_NODELAY); inside a tokio runtime with IO. Errors are the OS's.
    pub async fn connect(unix_path: Option<&str>, host: &str, port: u16) -> io::Result<Sock> {
        match unix_path {
            Some(path) => {
                let s = tokio::net::UnixStream::connect(path).await?;
                Ok(Sock::Unix(s.into_std()?))
            }
            None => {
                let s = tokio::net::TcpStream::connect((host, port)).await?;
                s.set_nodelay(true)?;
                Ok(Sock::Tcp(s.into_std()?))
            }
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

/// How a connection reaches its socket.
enum Io {
    /// Registered with tokio's epoll reactor (read readiness).
    Epoll(AsyncFd<Sock>),
    /// Deregistered from epoll; round trips go through the thread's ring.
    Ring(Sock, RingUser),
    /// In neither: between two threads (`leave_thread`, `join_thread`).
    Loose(Sock),
    /// Only while switching from one to the other.
    Switching,
}

/// A socket with its buffers, driven from a tokio runtime with IO enabled.
pub struct Transport {
    io: Io,
    /// Bytes read: the unread ones are `rbuf[rstart..rend]`.
    pub rbuf: Vec<u8>,
    pub rstart: usize,
    pub rend: usize,
    /// Bytes to send next; protocols append their messages here.
    pub wbuf: Vec<u8>,
}

impl Transport {
    /// Watch a connected socket (inside a tokio runtime with IO).
    pub fn new(sock: Sock) -> io::Result<Transport> {
        Ok(Transport {
            io: Io::Epoll(sys::watch(sock, Interest::READABLE)?),
            rbuf: vec![0; READ_BUFFER_BYTES],
            rstart: 0,
            rend: 0,
            wbuf: Vec::with_capacity(1024),
        })
    }

    fn sock(&self) -> &Sock {
        match &self.io {
            Io::Epoll(fd) => fd.get_ref(),
            Io::Ring(sock, _) | Io::Loose(sock) => sock,
            Io::Switching => unreachable!("a connection is never used while switching"),
        }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.sock().as_raw_fd()
    }

    pub fn on_ring(&self) -> bool {
        matches!(self.io, Io::Ring(..))
    }

    /// From now on, do round trips through `ring` (the socket leaves tokio's
    /// epoll, so its replies raise no epoll events).
    pub fn use_ring(&mut self, ring: Rc<Ring>) -> Result<(), String> {
        match std::mem::replace(&mut self.io, Io::Switching) {
            Io::Epoll(fd) => {
                self.io = Io::Ring(fd.into_inner(), ring.attach());
                Ok(())
            }
            other => {
                self.io = other;
                Err("the connection already uses a ring".into())
            }
        }
    }

    /// Leave this thread's epoll and ring, between two round trips, so that
    /// the connection holds nothing of the thread (it is then a socket and
    /// buffers) and another thread can take it (`join_thread`).
    pub fn leave_thread(&mut self) {
        self.io = match std::mem::replace(&mut self.io, Io::Switching) {
            Io::Epoll(fd) => Io::Loose(fd.into_inner()),
            Io::Ring(sock, _user) => Io::Loose(sock),
            other => other,
        };
    }

    /// Take a connection that left another thread: on this thread's ring
    /// (`ring`), else in this thread's epoll (inside its tokio runtime).
    pub fn join_thread(&mut self, ring: Option<&Rc<Ring>>) -> Result<(), String> {
        match (std::mem::replace(&mut self.io, Io::Switching), ring) {
            (Io::Loose(sock), Some(ring)) => self.io = Io::Ring(sock, ring.attach()),
            (Io::Loose(sock), None) => {
                self.io =
                    Io::Epoll(sys::watch(sock, Interest::READABLE).map_err(|e| e.to_string())?)
            }
            (other, _) => {
                self.io = other;
                return Err("the connection did not leave its thread".into());
            }
        }
        Ok(())
    }

    /// Write all of `wbuf` and clear it.
    pub async fn flush(&mut self) -> Result<(), Lost> {
        let mut written = 0;
        while written < self.wbuf.len() {
            match self.sock().write(&self.wbuf[written..]) {
                Ok(0) => return Err(Lost(CLOSED.into())),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // A full send buffer: the server is behind on reading.
                    self.wait_writable().await?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(lost(e)),
            }
        }
        self.wbuf.clear();
        Ok(())
    }

    /// Best effort, without waiting (a goodbye message).
    pub fn write_now(&self, bytes: &[u8]) {
        let _ = self.sock().write(bytes);
    }

    /// Wait, without blocking the thread's other clients, until the send
    /// buffer has room. For the rare full send buffer the socket is watched
    /// for write readiness too until there is room, then for read only
    /// again: two epoll_ctl calls per stall instead of a wake-up per send.
    async fn wait_writable(&mut self) -> Result<(), Lost> {
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

    /// Make room for `len` unread bytes from `rstart` (a message that long).
    pub fn reserve_message(&mut self, len: usize) {
        if len > self.rbuf.len() {
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
            self.rbuf.resize(len.next_power_of_two(), 0);
        }
    }

    /// Read more bytes from the socket into rbuf (on a ring, sending `wbuf`
    /// first).
    pub async fn fill(&mut self) -> Result<(), Lost> {
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
                Ok(Ok(0)) => return Err(Lost(CLOSED.into())),
                Ok(Ok(n)) => {
                    self.rend += n;
                    return Ok(());
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(lost(e)),
                Err(_would_block) => continue,
            }
        }
    }

    /// `fill` through the ring: one receive, preceded by sending `wbuf` when a
    /// round trip left it unsent (one linked pair, submitted with the other
    /// clients' at the end of the runtime's tick).
    async fn fill_ring(&mut self, ring: &Rc<Ring>) -> Result<(), Lost> {
        let fd = self.raw_fd();
        loop {
            let send = std::mem::take(&mut self.wbuf);
            let sent_len = send.len();
            let recv = std::mem::take(&mut self.rbuf);
            let done = ring.round_trip(fd, send, recv, self.rend).await;
            self.rbuf = done.recv_buf;
            self.wbuf = done.send_buf;
            if let Some(res) = done.send_failed {
                return Err(Lost(if res < 0 {
                    io::Error::from_raw_os_error(-res).to_string()
                } else {
                    format!("short send ({res} of {sent_len} bytes)")
                }));
            }
            self.wbuf.clear();
            match done.recv_result {
                0 => return Err(Lost(CLOSED.into())),
                n if n > 0 => {
                    self.rend += n as usize;
                    return Ok(());
                }
                e if e == -libc::EINTR || e == -libc::EAGAIN => continue,
                e => return Err(Lost(io::Error::from_raw_os_error(-e).to_string())),
            }
        }
    }
}
