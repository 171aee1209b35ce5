//! The cheapest closed-loop drivers we know how to write, on epoll and on
//! io_uring, to measure the floor under perflab's drivers and their peers:
//! the CPU per request that the kernel's side of a round trip costs on this
//! machine, with next to nothing in user space (issues 13 and 17;
//! benchmarks/http_vs_wrk.py --floor, benchmarks/tpcb_vs_pgbench.py --floor).
//!
//! ```text
//! driver_floor http   [--uring] HOST:PORT SECONDS CONNECTIONS THREADS PATH|@FILE [PATH ...]
//! driver_floor pgwire [--uring] HOST|SOCKETDIR PORT USER DBNAME SECONDS CLIENTS THREADS ACCOUNTS
//! ```
//!
//! - `http`: HTTP/1.1 keep-alive `GET`s of the paths in turn (each connection
//!   from its own offset); a response is complete when its head and its
//!   Content-Length of body have arrived.
//! - `pgwire`: pgbench's select-only transaction on the extended protocol,
//!   prepared once: `SELECT abalance FROM pgbench_accounts WHERE aid = $1`
//!   as Bind, Execute and Sync, aid uniform in 1..=ACCOUNTS; a transaction is
//!   complete at its ReadyForQuery. Trust authentication only.
//!
//! Each thread owns its share of the connections. On epoll a connection is
//! registered once, level-triggered, for reading only: per request one send,
//! one recv and a share of one epoll_wait. On io_uring (`--uring`) it works as
//! perflab's ring does (`crate::uring`): a send linked to a receive, the send
//! with CQE_SKIP_SUCCESS and the receive with POLL_FIRST, DEFER_TASKRUN, and
//! one io_uring_enter per round that submits every ready connection's next
//! request and waits for at least one reply. No clock is read per request,
//! no latency is recorded, nothing is checked beyond the status: what this
//! costs is the kernel and the loop, and nothing a measuring driver must add.
//!
//! `DRIVER_FLOOR_READ` sets the bytes per `recv` on epoll (256 KiB by default;
//! wrk reads 8 KiB).
//!
//! Prints one JSON line: requests, seconds, cpu_s (this process's user +
//! system time over the measured window, connecting excluded), user_s,
//! system_s, voluntary and involuntary context switches, errors.

#![deny(clippy::undocumented_unsafe_blocks)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

struct Usage {
    user: f64,
    system: f64,
    switches: i64,
}

fn usage() -> Usage {
    // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage for the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    Usage {
        user: t(u.ru_utime),
        system: t(u.ru_stime),
        switches: u.ru_nvcsw + u.ru_nivcsw,
    }
}

/// What a protocol adds to the loops: a connection's next request, and the
/// accounting of its response's bytes.
trait Proto: Send {
    /// Write connection `i`'s next request into `out` (cleared first).
    fn request(&mut self, i: usize, out: &mut Vec<u8>);
    /// Account the next bytes of `i`'s response; true when they complete it.
    fn take(&mut self, i: usize, data: &[u8], errors: &mut u64) -> bool;
}

// ------------------------------------------------------------------ http

struct Http {
    requests: std::sync::Arc<Vec<Vec<u8>>>,
    /// Per connection: the next request's index, the bytes of the current
    /// response seen, its whole length once the head is in (0 before), and
    /// the head's bytes while it is incomplete.
    next: Vec<usize>,
    seen: Vec<usize>,
    want: Vec<usize>,
    head: Vec<Vec<u8>>,
}

fn content_length(head: &[u8]) -> Option<usize> {
    let at = memchr::memmem::find(head, b"\r\nContent-Length: ")? + 18;
    let end = at + head[at..].iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&head[at..end]).ok()?.parse().ok()
}

impl Proto for Http {
    fn request(&mut self, i: usize, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.requests[self.next[i]]);
        self.next[i] = (self.next[i] + 1) % self.requests.len();
    }

    fn take(&mut self, i: usize, mut data: &[u8], errors: &mut u64) -> bool {
        if self.want[i] == 0 {
            let head = &mut self.head[i];
            head.extend_from_slice(data);
            let Some(end) = memchr::memmem::find(head, b"\r\n\r\n") else {
                return false;
            };
            let len = content_length(&head[..end]).expect("Content-Length");
            if !head.starts_with(b"HTTP/1.1 200") {
                *errors += 1;
            }
            self.want[i] = end + 4 + len;
            self.seen[i] = head.len();
            head.clear();
            data = &[];
        }
        self.seen[i] += data.len();
        if self.seen[i] >= self.want[i] {
            // Pipelining is never used, so a response ends its read.
            self.seen[i] = 0;
            self.want[i] = 0;
            return true;
        }
        false
    }
}

// ------------------------------------------------------------------ pgwire

struct PgWire {
    accounts: u64,
    rng: u64,
    /// Per connection: the bytes of an incomplete message carried over.
    carry: Vec<Vec<u8>>,
}

fn message(kind: u8, body: &[u8], out: &mut Vec<u8>) {
    out.push(kind);
    out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(body);
}

impl Proto for PgWire {
    fn request(&mut self, _i: usize, out: &mut Vec<u8>) {
        // xorshift64*: the floor needs uniform draws, not a particular stream.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let aid = (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % self.accounts + 1) as i32;
        out.clear();
        let mut bind = Vec::with_capacity(32);
        bind.extend_from_slice(b"\0s\0");
        bind.extend_from_slice(&1u16.to_be_bytes()); // one parameter format: binary
        bind.extend_from_slice(&1u16.to_be_bytes());
        bind.extend_from_slice(&1u16.to_be_bytes()); // one parameter
        bind.extend_from_slice(&4i32.to_be_bytes());
        bind.extend_from_slice(&aid.to_be_bytes());
        bind.extend_from_slice(&0u16.to_be_bytes()); // results in text
        message(b'B', &bind, out);
        message(b'E', b"\0\0\0\0\0", out);
        message(b'S', b"", out);
    }

    fn take(&mut self, i: usize, data: &[u8], errors: &mut u64) -> bool {
        let carry = &mut self.carry[i];
        let owned;
        let buf: &[u8] = if carry.is_empty() {
            data
        } else {
            carry.extend_from_slice(data);
            owned = std::mem::take(carry);
            &owned
        };
        let mut at = 0;
        while buf.len() - at >= 5 {
            let len = u32::from_be_bytes(buf[at + 1..at + 5].try_into().unwrap()) as usize;
            if buf.len() - at < 1 + len {
                break;
            }
            match buf[at] {
                b'E' => *errors += 1,
                b'Z' => {
                    assert_eq!(at + 1 + len, buf.len(), "bytes after ReadyForQuery");
                    return true;
                }
                _ => {}
            }
            at += 1 + len;
        }
        self.carry[i].extend_from_slice(&buf[at..]);
        false
    }
}

/// Read whole messages from a blocking connection until ReadyForQuery;
/// panic on an error or an authentication other than trust.
fn pg_until_ready(s: &mut impl Read) {
    loop {
        let mut head = [0u8; 5];
        s.read_exact(&mut head).expect("reading from the server");
        let len = u32::from_be_bytes(head[1..5].try_into().unwrap()) as usize - 4;
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).expect("reading from the server");
        match head[0] {
            b'R' => assert_eq!(&body[..4], &[0, 0, 0, 0], "only trust authentication"),
            b'E' => panic!("server error: {}", String::from_utf8_lossy(&body)),
            b'Z' => return,
            _ => {}
        }
    }
}

fn pg_connect(host: &str, port: u16, user: &str, db: &str) -> OwnedFd {
    fn setup(s: &mut (impl Read + Write), user: &str, db: &str) {
        let mut body = Vec::new();
        body.extend_from_slice(&196608u32.to_be_bytes());
        for (k, v) in [("user", user), ("database", db)] {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut out = (body.len() as u32 + 4).to_be_bytes().to_vec();
        out.extend_from_slice(&body);
        s.write_all(&out).unwrap();
        pg_until_ready(s);
        let mut parse = Vec::new();
        parse.extend_from_slice(b"s\0SELECT abalance FROM pgbench_accounts WHERE aid = $1\0");
        parse.extend_from_slice(&1u16.to_be_bytes());
        parse.extend_from_slice(&23u32.to_be_bytes()); // int4
        let mut out = Vec::new();
        message(b'P', &parse, &mut out);
        message(b'S', b"", &mut out);
        s.write_all(&out).unwrap();
        pg_until_ready(s);
    }
    if host.starts_with('/') {
        let mut s = UnixStream::connect(format!("{host}/.s.PGSQL.{port}")).expect("connect");
        setup(&mut s, user, db);
        s.set_nonblocking(true).unwrap();
        s.into()
    } else {
        let mut s = TcpStream::connect((host, port)).expect("connect");
        s.set_nodelay(true).unwrap();
        setup(&mut s, user, db);
        s.set_nonblocking(true).unwrap();
        s.into()
    }
}

// ------------------------------------------------------------------ the loops

struct Outcome {
    done: u64,
    errors: u64,
}

fn send_all(fd: RawFd, req: &[u8]) {
    // SAFETY: `req` is readable for `req.len()` bytes during the call; the
    // kernel only reads it.
    let n = unsafe { libc::send(fd, req.as_ptr().cast(), req.len(), libc::MSG_NOSIGNAL) };
    // A request is far smaller than the socket's send buffer.
    assert_eq!(n as usize, req.len(), "short send");
}

fn run_epoll(fds: &[OwnedFd], proto: &mut dyn Proto, stop: Instant) -> Outcome {
    // SAFETY: plain syscall with a constant flag; the result is checked.
    let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(epfd >= 0);
    for (i, fd) in fds.iter().enumerate() {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: i as u64,
        };
        // SAFETY: `epfd` and the connection's fd are open; `ev` is a valid
        // event the kernel copies during the call.
        let rc = unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) };
        assert_eq!(rc, 0);
    }
    // DRIVER_FLOOR_READ: bytes per recv (default 256 KiB; wrk reads 8 KiB).
    let read = std::env::var("DRIVER_FLOOR_READ")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256 * 1024);
    let mut buf = vec![0u8; read];
    let mut req = Vec::with_capacity(256);
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    let mut out = Outcome { done: 0, errors: 0 };
    for (i, fd) in fds.iter().enumerate() {
        proto.request(i, &mut req);
        send_all(fd.as_raw_fd(), &req);
    }
    'run: loop {
        // SAFETY: `epfd` is open and `events` is writable for its whole length.
        let n = unsafe { libc::epoll_wait(epfd, events.as_mut_ptr(), events.len() as i32, 100) };
        for e in &events[..n.max(0) as usize] {
            let i = e.u64 as usize;
            let fd = fds[i].as_raw_fd();
            loop {
                // SAFETY: `buf` is writable for `buf.len()` bytes during the call.
                let got = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
                if got <= 0 {
                    let e = std::io::Error::last_os_error();
                    if got == 0 || e.kind() != std::io::ErrorKind::WouldBlock {
                        out.errors += 1;
                        eprintln!("connection {i} ended: {e}");
                        break 'run;
                    }
                    break;
                }
                let got = got as usize;
                if proto.take(i, &buf[..got], &mut out.errors) {
                    out.done += 1;
                    proto.request(i, &mut req);
                    send_all(fd, &req);
                    break;
                }
                if got < buf.len() {
                    break;
                }
            }
        }
        if Instant::now() >= stop {
            break;
        }
    }
    // SAFETY: `epfd` was made above, is closed once, and is not used after.
    unsafe { libc::close(epfd) };
    out
}

fn run_uring(fds: &[OwnedFd], proto: &mut dyn Proto, stop: Instant) -> Outcome {
    use io_uring::{opcode, squeue, types, IoUring};
    const RECV: u64 = 1 << 63;
    // Buffers first, so that they are dropped after the ring.
    let size = 64 * 1024;
    let mut bufs = vec![0u8; size * fds.len()];
    let mut reqs: Vec<Vec<u8>> = vec![Vec::with_capacity(256); fds.len()];
    let entries = (2 * fds.len()).next_power_of_two().clamp(64, 4096) as u32;
    let mut ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(entries * 2)
        .build(entries)
        .expect("io_uring with DEFER_TASKRUN (Linux 6.1+)");
    let mut out = Outcome { done: 0, errors: 0 };
    let push = |ring: &mut IoUring, fd: RawFd, i: usize, buf: *mut u8, req: Option<&[u8]>| {
        let recv = opcode::Recv::new(types::Fd(fd), buf, size as u32)
            .ioprio(if req.is_some() { 1 } else { 0 }) // RECVSEND_POLL_FIRST after a send
            .build()
            .user_data(RECV | i as u64);
        // SAFETY: the buffers outlive the ring; a request's buffer is rewritten
        // only after its receive completed, so after its linked send.
        unsafe {
            match req {
                Some(req) => {
                    let send = opcode::Send::new(types::Fd(fd), req.as_ptr(), req.len() as u32)
                        .flags(libc::MSG_WAITALL | libc::MSG_NOSIGNAL)
                        .build()
                        .flags(squeue::Flags::IO_LINK | squeue::Flags::SKIP_SUCCESS)
                        .user_data(i as u64);
                    ring.submission()
                        .push_multiple(&[send, recv])
                        .expect("room")
                }
                None => ring.submission().push(&recv).expect("room"),
            }
        }
    };
    for (i, fd) in fds.iter().enumerate() {
        proto.request(i, &mut reqs[i]);
        let buf = bufs[i * size..].as_mut_ptr();
        push(&mut ring, fd.as_raw_fd(), i, buf, Some(&reqs[i]));
    }
    let mut ready: Vec<(u64, i32)> = Vec::with_capacity(fds.len());
    'run: loop {
        ring.submit_and_wait(1).expect("io_uring_enter");
        ready.clear();
        ready.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        for &(user, result) in &ready {
            let i = (user & !RECV) as usize;
            if user & RECV == 0 || result <= 0 {
                eprintln!("connection {i}: a request failed ({result})");
                out.errors += 1;
                break 'run;
            }
            let buf = bufs[i * size..].as_mut_ptr();
            // SAFETY: the kernel wrote `result` bytes into this connection's buffer.
            let data = unsafe { std::slice::from_raw_parts(buf, result as usize) };
            if proto.take(i, data, &mut out.errors) {
                out.done += 1;
                proto.request(i, &mut reqs[i]);
                push(&mut ring, fds[i].as_raw_fd(), i, buf, Some(&reqs[i]));
            } else {
                push(&mut ring, fds[i].as_raw_fd(), i, buf, None);
            }
        }
        if Instant::now() >= stop {
            break;
        }
    }
    // Cancel what is in flight before the buffers go.
    let _ = ring.submitter().submit();
    drop(ring);
    out
}

fn usage_exit() -> ! {
    eprintln!(
        "usage: driver_floor http [--uring] HOST:PORT SECONDS CONNECTIONS THREADS PATH|@FILE [PATH ...]\n       \
         driver_floor pgwire [--uring] HOST|SOCKETDIR PORT USER DBNAME SECONDS CLIENTS THREADS ACCOUNTS"
    );
    std::process::exit(2);
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        usage_exit();
    }
    let kind = args.remove(0);
    let uring = args.first().is_some_and(|a| a == "--uring");
    if uring {
        args.remove(0);
    }
    let num = |s: &str| -> u64 { s.parse().unwrap_or_else(|_| usage_exit()) };
    // (connections, seconds, threads, one protocol state per thread)
    let (fds, seconds, threads, mut protos): (Vec<OwnedFd>, f64, usize, Vec<Box<dyn Proto>>) =
        match kind.as_str() {
            "http" if args.len() >= 5 => {
                let addr: SocketAddr = args[0].parse().unwrap_or_else(|_| usage_exit());
                let (seconds, conns, threads) = (
                    num(&args[1]) as f64,
                    num(&args[2]) as usize,
                    num(&args[3]) as usize,
                );
                let paths: Vec<String> = match args[4].strip_prefix('@') {
                    Some(file) => std::fs::read_to_string(file)
                        .expect("paths file")
                        .split_whitespace()
                        .map(str::to_string)
                        .collect(),
                    None => args[4..].to_vec(),
                };
                let requests = std::sync::Arc::new(
                    paths
                        .iter()
                        .map(|p| format!("GET {p} HTTP/1.1\r\nHost: {addr}\r\n\r\n").into_bytes())
                        .collect::<Vec<_>>(),
                );
                let fds = (0..conns)
                    .map(|_| {
                        let s = TcpStream::connect(addr).expect("connect");
                        s.set_nodelay(true).unwrap();
                        s.set_nonblocking(true).unwrap();
                        OwnedFd::from(s)
                    })
                    .collect::<Vec<_>>();
                let per = conns.div_ceil(threads.max(1));
                let protos = (0..threads)
                    .map(|t| {
                        let n = per.min(conns.saturating_sub(t * per));
                        Box::new(Http {
                            requests: requests.clone(),
                            next: (0..n)
                                .map(|i| ((t * per + i) * 7919) % requests.len())
                                .collect(),
                            seen: vec![0; n],
                            want: vec![0; n],
                            head: vec![Vec::new(); n],
                        }) as Box<dyn Proto>
                    })
                    .collect();
                (fds, seconds, threads, protos)
            }
            "pgwire" if args.len() == 8 => {
                let port = num(&args[1]) as u16;
                let (seconds, clients, threads) = (
                    num(&args[4]) as f64,
                    num(&args[5]) as usize,
                    num(&args[6]) as usize,
                );
                let accounts = num(&args[7]);
                let fds = (0..clients)
                    .map(|_| pg_connect(&args[0], port, &args[2], &args[3]))
                    .collect::<Vec<_>>();
                let per = clients.div_ceil(threads.max(1));
                let protos = (0..threads)
                    .map(|t| {
                        Box::new(PgWire {
                            accounts,
                            rng: 0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1),
                            carry: vec![Vec::new(); per],
                        }) as Box<dyn Proto>
                    })
                    .collect();
                (fds, seconds, threads, protos)
            }
            _ => usage_exit(),
        };
    let per = fds.len().div_ceil(threads.max(1));
    let before = usage();
    let start = Instant::now();
    let stop = start + Duration::from_secs_f64(seconds);
    let outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = fds
            .chunks(per.max(1))
            .zip(protos.iter_mut())
            .map(|(share, proto)| {
                s.spawn(move || {
                    if uring {
                        run_uring(share, proto.as_mut(), stop)
                    } else {
                        run_epoll(share, proto.as_mut(), stop)
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let after = usage();
    let done: u64 = outcomes.iter().map(|o| o.done).sum();
    let errors: u64 = outcomes.iter().map(|o| o.errors).sum();
    let (user, system) = (after.user - before.user, after.system - before.system);
    println!(
        "{{\"requests\": {done}, \"seconds\": {elapsed:.6}, \"cpu_s\": {:.6}, \"user_s\": {user:.6}, \
         \"system_s\": {system:.6}, \"switches\": {}, \"errors\": {errors}}}",
        user + system,
        after.switches - before.switches
    );
    drop(fds);
}
