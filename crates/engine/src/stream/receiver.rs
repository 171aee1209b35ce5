//! The receiving side of `stream`: counts bytes and datagrams as they
//! arrive, per second since the run's t0, in threads that may first enter a
//! network namespace.

use super::{enter_netns, Transport};
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::sys;

/// How long a blocked receive waits before it looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);
const BUFFER: usize = 256 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiverMode {
    /// One blocking thread per connection (TCP) or per flow's socket (UDP).
    Threads,
    /// One thread; every socket non-blocking in one epoll set.
    Epoll,
}

impl std::str::FromStr for ReceiverMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "threads" => Ok(ReceiverMode::Threads),
            "epoll" => Ok(ReceiverMode::Epoll),
            other => Err(format!("receiver {other:?}; allowed: threads, epoll")),
        }
    }
}

pub struct ReceiverConfig {
    pub transport: Transport,
    pub mode: ReceiverMode,
    pub address: IpAddr,
    pub flows: u32,
    /// A network namespace to receive in (/run/netns/NAME), or None.
    pub netns: Option<String>,
    /// The run's origin on CLOCK_MONOTONIC (ns) and how many seconds to bucket.
    pub t0_ns: u64,
    pub seconds: usize,
}

/// Per second since t0: bytes and datagrams (UDP) or reads (TCP) received.
struct Counts {
    t0_ns: u64,
    bytes: Vec<AtomicU64>,
    packets: Vec<AtomicU64>,
}

impl Counts {
    #[inline]
    fn add(&self, bytes: usize) {
        let now = sys::monotonic_ns();
        let s = (now.saturating_sub(self.t0_ns) / 1_000_000_000) as usize;
        let i = s.min(self.bytes.len() - 1);
        self.bytes[i].fetch_add(bytes as u64, Ordering::Relaxed);
        self.packets[i].fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Clone, Debug, Default)]
pub struct ReceiverTotals {
    /// Per second since t0 (the last bucket also holds anything later).
    pub bytes: Vec<u64>,
    pub packets: Vec<u64>,
    pub connections: u64,
    /// CPU time of the receiver's threads, seconds.
    pub cpu_s: f64,
}

pub struct Receiver {
    /// Where senders go: one address per flow (UDP) or the listener (TCP).
    pub targets: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    connections: Arc<AtomicU64>,
    cpu_ns: Arc<AtomicU64>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

enum Socket {
    Listener(TcpListener),
    Udp(UdpSocket),
}

impl Receiver {
    pub fn start(cfg: ReceiverConfig) -> io::Result<Receiver> {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts {
            t0_ns: cfg.t0_ns,
            bytes: (0..cfg.seconds.max(1)).map(|_| AtomicU64::new(0)).collect(),
            packets: (0..cfg.seconds.max(1)).map(|_| AtomicU64::new(0)).collect(),
        });
        let connections = Arc::new(AtomicU64::new(0));
        let cpu_ns = Arc::new(AtomicU64::new(0));
        let threads = Arc::new(Mutex::new(Vec::new()));
        // The sockets are made by a thread in the namespace; it hands their
        // addresses back and becomes the (first) receiving thread.
        let (tx, rx) = mpsc::channel::<io::Result<Vec<SocketAddr>>>();
        let ctx = Ctx {
            stop: stop.clone(),
            counts: counts.clone(),
            connections: connections.clone(),
            cpu_ns: cpu_ns.clone(),
            threads: threads.clone(),
            netns: cfg.netns.clone(),
        };
        let main = std::thread::Builder::new()
            .name("perflab-recv".into())
            .spawn(move || {
                let made = (|| {
                    if let Some(ns) = &ctx.netns {
                        enter_netns(ns)?;
                    }
                    make_sockets(&cfg)
                })();
                let sockets = match made {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let addrs = sockets
                    .iter()
                    .map(|s| match s {
                        Socket::Listener(l) => l.local_addr(),
                        Socket::Udp(u) => u.local_addr(),
                    })
                    .collect::<io::Result<Vec<_>>>();
                let failed = addrs.is_err();
                let _ = tx.send(addrs);
                if !failed {
                    receive(cfg.mode, sockets, cfg.flows, &ctx);
                }
                ctx.add_cpu();
            })?;
        threads.lock().unwrap().push(main);
        let targets = rx
            .recv()
            .map_err(|_| io::Error::other("the receiver thread ended before it listened"))??;
        Ok(Receiver {
            targets,
            stop,
            counts,
            connections,
            cpu_ns,
            threads,
        })
    }

    /// Stop receiving (after the senders stopped and the last packets drained) and count.
    pub fn stop(&self) -> ReceiverTotals {
        self.stop.store(true, Ordering::SeqCst);
        loop {
            let t = self.threads.lock().unwrap().pop();
            match t {
                Some(t) => {
                    let _ = t.join();
                }
                None => break,
            }
        }
        ReceiverTotals {
            bytes: self
                .counts
                .bytes
                .iter()
                .map(|a| a.load(Ordering::Relaxed))
                .collect(),
            packets: self
                .counts
                .packets
                .iter()
                .map(|a| a.load(Ordering::Relaxed))
                .collect(),
            connections: self.connections.load(Ordering::Relaxed),
            cpu_s: self.cpu_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
    }
}

#[derive(Clone)]
struct Ctx {
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    connections: Arc<AtomicU64>,
    cpu_ns: Arc<AtomicU64>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    netns: Option<String>,
}

impl Ctx {
    fn add_cpu(&self) {
        if let Some(s) = sys::thread_cpu_s() {
            self.cpu_ns.fetch_add((s * 1e9) as u64, Ordering::Relaxed);
        }
    }
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

fn make_sockets(cfg: &ReceiverConfig) -> io::Result<Vec<Socket>> {
    let any_port = SocketAddr::new(cfg.address, 0);
    match cfg.transport {
        Transport::Tcp => {
            let l = TcpListener::bind(any_port)?;
            Ok(vec![Socket::Listener(l)])
        }
        Transport::Udp => (0..cfg.flows.max(1))
            .map(|_| {
                let u = UdpSocket::bind(any_port)?;
                set_rcvbuf(u.as_raw_fd(), 8 << 20);
                Ok(Socket::Udp(u))
            })
            .collect(),
    }
}

/// A larger receive buffer for UDP (up to net.core.rmem_max: as root,
/// SO_RCVBUFFORCE goes past it), so a burst is not dropped at the socket.
fn set_rcvbuf(fd: RawFd, bytes: i32) {
    if sys::set_rcvbuf(fd, bytes, true).is_err() {
        let _ = sys::set_rcvbuf(fd, bytes, false);
    }
}

fn receive(mode: ReceiverMode, sockets: Vec<Socket>, flows: u32, ctx: &Ctx) {
    match mode {
        ReceiverMode::Threads => receive_threads(sockets, flows, ctx),
        ReceiverMode::Epoll => {
            if let Err(e) = receive_epoll(sockets, ctx) {
                eprintln!("perflab stream receiver: {e}");
            }
        }
    }
}

fn spawn(ctx: &Ctx, f: impl FnOnce(&Ctx) + Send + 'static) {
    let c = ctx.clone();
    // A thread spawned here starts in this (the receiver's) namespace.
    if let Ok(h) = std::thread::Builder::new()
        .name("perflab-recv".into())
        .spawn(move || {
            f(&c);
            c.add_cpu();
        })
    {
        ctx.threads.lock().unwrap().push(h);
    }
}

fn receive_threads(sockets: Vec<Socket>, flows: u32, ctx: &Ctx) {
    for socket in sockets {
        match socket {
            Socket::Udp(u) => spawn(ctx, move |c| {
                let _ = u.set_read_timeout(Some(POLL));
                let mut buf = vec![0u8; 65536];
                while !c.stopped() {
                    match u.recv(&mut buf) {
                        Ok(n) => c.counts.add(n),
                        Err(e) if timed_out(&e) => {}
                        Err(_) => return,
                    }
                }
            }),
            Socket::Listener(l) => {
                // Accept each flow's connection here, one reading thread each.
                let _ = l.set_nonblocking(true);
                let mut accepted = 0;
                while !ctx.stopped() && accepted < flows {
                    match l.accept() {
                        Ok((conn, _)) => {
                            accepted += 1;
                            ctx.connections.fetch_add(1, Ordering::Relaxed);
                            let _ = conn.set_nonblocking(false);
                            spawn(ctx, move |c| read_tcp(conn, c));
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(2))
                        }
                        Err(_) => return,
                    }
                }
            }
        }
    }
}

fn read_tcp(mut conn: TcpStream, c: &Ctx) {
    let _ = conn.set_read_timeout(Some(POLL));
    let mut buf = vec![0u8; BUFFER];
    while !c.stopped() {
        match conn.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => c.counts.add(n),
            Err(e) if timed_out(&e) => {}
            Err(_) => return,
        }
    }
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

fn receive_epoll(sockets: Vec<Socket>, ctx: &Ctx) -> io::Result<()> {
    let ep = sys::Epoll::new()?;
    let add = |fd: RawFd| ep.add_readable(fd, fd as u64);
    let mut listener: Option<TcpListener> = None;
    let mut udp: Vec<UdpSocket> = Vec::new();
    let mut tcp: std::collections::HashMap<RawFd, TcpStream> = std::collections::HashMap::new();
    for s in sockets {
        match s {
            Socket::Listener(l) => {
                l.set_nonblocking(true)?;
                add(l.as_raw_fd())?;
                listener = Some(l);
            }
            Socket::Udp(u) => {
                u.set_nonblocking(true)?;
                add(u.as_raw_fd())?;
                udp.push(u);
            }
        }
    }
    let listen_fd = listener.as_ref().map(|l| l.as_raw_fd());
    let mut buf = vec![0u8; BUFFER];
    let mut events = vec![sys::EpollEvent { events: 0, u64: 0 }; 64];
    while !ctx.stopped() {
        let n = match ep.wait(&mut events, POLL.as_millis() as i32) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for ev in &events[..n] {
            let fd = ev.u64 as RawFd;
            if Some(fd) == listen_fd {
                while let Some(Ok((conn, _))) = listener.as_ref().map(|l| l.accept()) {
                    conn.set_nonblocking(true)?;
                    add(conn.as_raw_fd())?;
                    ctx.connections.fetch_add(1, Ordering::Relaxed);
                    tcp.insert(conn.as_raw_fd(), conn);
                }
            } else if let Some(conn) = tcp.get_mut(&fd) {
                loop {
                    match conn.read(&mut buf) {
                        Ok(0) => {
                            tcp.remove(&fd);
                            break;
                        }
                        Ok(n) => ctx.counts.add(n),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            tcp.remove(&fd);
                            break;
                        }
                    }
                }
            } else if let Some(u) = udp.iter().find(|u| u.as_raw_fd() == fd) {
                while let Ok(n) = u.recv(&mut buf) {
                    ctx.counts.add(n);
                }
            }
        }
    }
    Ok(())
}
