//! The cheapest closed-loop drivers we know how to write, on epoll and on
//! io_uring, to measure the floor under perflab's drivers and their peers:
//! the CPU per request that the kernel's side of a round trip costs on this
//! machine, with next to nothing in user space (issues 13 and 17;
//! benchmarks/http_vs_wrk.py --floor, benchmarks/tpcb_vs_pgbench.py --floor,
//! benchmarks/oltp_vs_sysbench.py --server mariadb --floor).
//!
//! ```text
//! driver_floor http   [--uring] HOST:PORT SECONDS CONNECTIONS THREADS PATH|@FILE [PATH ...]
//! driver_floor pgwire [--uring] HOST|SOCKETDIR PORT USER DBNAME SECONDS CLIENTS THREADS ACCOUNTS
//! driver_floor mysqlwire [--uring] CONNINFO SECONDS CONNECTIONS THREADS SCRIPT TABLES TABLE_SIZE [RAND_TYPE]
//! ```
//!
//! - `http`: HTTP/1.1 keep-alive `GET`s of the paths in turn (each connection
//!   from its own offset); a response is complete when its head and its
//!   Content-Length of body have arrived.
//! - `pgwire`: pgbench's select-only transaction on the extended protocol,
//!   prepared once: `SELECT abalance FROM pgbench_accounts WHERE aid = $1`
//!   as Bind, Execute and Sync, aid uniform in 1..=ACCOUNTS; a transaction is
//!   complete at its ReadyForQuery. Trust authentication only.
//! - `mysqlwire`: one of sysbench's oltp scripts (`point_select`,
//!   `read_only`, `read_write`, ...) on MySQL or MariaDB, with the round trips
//!   perflab's `oltp` makes (`perflab_engine::oltp::mysql`): every statement
//!   of the script prepared once per connection (COM_STMT_PREPARE, at connect,
//!   outside the measured window), then per event each statement one
//!   COM_STMT_EXECUTE with binary parameters and its own round trip (BEGIN and
//!   COMMIT too), the same SQL (`Kind::mysql_sql`), tables and ids drawn group
//!   by group as `oltp::protocol::Events::draw` does, by RAND_TYPE (sysbench's
//!   default `special`; the other strings, `c` and `pad`, are cheap digits).
//!   A reply is framed only: its OK, ERR, column count, column definitions and
//!   rows are counted by their first byte, never decoded. An event whose
//!   statement gets an ERR is not counted (the error is); inside BEGIN ..
//!   COMMIT a ROLLBACK follows (a COM_QUERY, as perflab's client sends it),
//!   then the next event. A transaction is complete at its last statement's
//!   reply. CONNINFO is the engine's (`socket=... user=... database=...`, or
//!   `host=... port=...`: `MyConnInfo`), with mysql_native_password or an
//!   empty password.
//!
//! Each thread owns its share of the connections. On epoll a connection is
//! registered once, level-triggered, for reading only: per request one send,
//! one recv and a share of one epoll_wait. On io_uring (`--uring`) it works as
//! perflab's ring does (`crate::uring`): a send linked to a receive, the send
//! with CQE_SKIP_SUCCESS and the receive with POLL_FIRST, DEFER_TASKRUN, and
//! one io_uring_enter per round that submits every ready connection's next
//! request and waits for at least one reply (a request is one round trip;
//! a `mysqlwire` transaction is one per statement). No clock is read per
//! request, no latency is recorded, nothing is checked beyond the status:
//! what this costs is the kernel and the loop, and nothing a measuring driver
//! must add.
//!
//! `DRIVER_FLOOR_READ` sets the bytes per `recv` on epoll (256 KiB by default;
//! wrk reads 8 KiB). `DRIVER_FLOOR_PIN=1` pins each thread to a CPU of its
//! own (the first THREADS of this process's CPUs), as perflab's `pin` does.
//!
//! Prints one JSON line: requests (transactions: with `mysqlwire`, events
//! answered without an error; round_trips counts every statement), seconds,
//! cpu_s (this process's user + system time over the measured window,
//! connecting and preparing excluded), user_s, system_s, voluntary and
//! involuntary context switches, errors.

#![deny(clippy::undocumented_unsafe_blocks)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use perflab_engine::mysql::{native_password, MyConnInfo};
use perflab_engine::oltp::protocol::{Kind, C_LEN, PAD_LEN, RANGE_SIZE};
use perflab_engine::oltp::{KeyRand, RandType, Script};
use perflab_engine::random::Prng;

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

/// How far the bytes of a response took it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// Not yet complete.
    Partial,
    /// Complete; the connection's transaction goes on with its next request
    /// (or its event ended without being counted).
    Statement,
    /// Complete, and it completed a transaction.
    Transaction,
}

/// What a protocol adds to the loops: a connection's next request, and the
/// accounting of its response's bytes.
trait Proto: Send {
    /// Write connection `i`'s next request into `out` (cleared first).
    fn request(&mut self, i: usize, out: &mut Vec<u8>);
    /// Account the next bytes of `i`'s response.
    fn take(&mut self, i: usize, data: &[u8], errors: &mut u64) -> Reply;
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

    fn take(&mut self, i: usize, mut data: &[u8], errors: &mut u64) -> Reply {
        if self.want[i] == 0 {
            let head = &mut self.head[i];
            head.extend_from_slice(data);
            let Some(end) = memchr::memmem::find(head, b"\r\n\r\n") else {
                return Reply::Partial;
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
            return Reply::Transaction;
        }
        Reply::Partial
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

    fn take(&mut self, i: usize, data: &[u8], errors: &mut u64) -> Reply {
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
                    return Reply::Transaction;
                }
                _ => {}
            }
            at += 1 + len;
        }
        self.carry[i].extend_from_slice(&buf[at..]);
        Reply::Partial
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

// ------------------------------------------------------------------ mysqlwire

const COM_QUERY: u8 = 0x03;
const COM_STMT_PREPARE: u8 = 0x16;
const COM_STMT_EXECUTE: u8 = 0x17;
const CLIENT_CONNECT_WITH_DB: u32 = 8;
const CLIENT_SECURE_CONNECTION: u32 = 0x8000;
const CLIENT_PLUGIN_AUTH: u32 = 0x8_0000;
const CLIENT_DEPRECATE_EOF: u32 = 0x100_0000;
/// perflab's client's capabilities (`mysql::codec::CLIENT_WANTS`).
const MY_WANTS: u32 = 1 // LONG_PASSWORD
    | 2 // FOUND_ROWS
    | 4 // LONG_FLAG
    | 0x80 // LOCAL_FILES
    | 0x200 // PROTOCOL_41
    | 0x2000 // TRANSACTIONS
    | CLIENT_SECURE_CONNECTION
    | 0x1_0000 // MULTI_STATEMENTS
    | 0x2_0000 // MULTI_RESULTS
    | 0x4_0000 // PS_MULTI_RESULTS
    | CLIENT_PLUGIN_AUTH
    | 0x20_0000 // PLUGIN_AUTH_LENENC_CLIENT_DATA
    | CLIENT_DEPRECATE_EOF;

/// Where a connection is in its reply.
#[derive(Clone, Copy)]
enum Frame {
    /// Before its first packet (OK, ERR or a column count).
    First,
    /// Column definitions (and their EOF without DEPRECATE_EOF) left.
    Columns(u32),
    /// Rows, until an 0xfe end or an ERR.
    Rows,
}

/// One connection's prepared statements and where it is in its event.
struct MyConnState {
    /// Statement ids, [table * PER_TABLE.len() + per-table index].
    ids: Vec<u32>,
    begin: u32,
    commit: u32,
    /// Extra packets after column definitions (1 without DEPRECATE_EOF).
    eof_extra: u32,
    /// The statement of the event in flight, its index in the plan.
    step: usize,
    /// The request in flight is the ROLLBACK after an error.
    rolling_back: bool,
    frame: Frame,
    /// The event's current group: its table (0-based) and kind; the delete's id.
    table: u32,
    group: Option<Kind>,
    delete_id: i64,
    /// The bytes of an incomplete packet carried over.
    carry: Vec<u8>,
}

struct MyWire {
    plan: std::sync::Arc<Vec<Kind>>,
    tables: u32,
    keys: KeyRand,
    rng: Prng,
    conns: Vec<MyConnState>,
    c: [u8; C_LEN],
    pad: [u8; PAD_LEN],
}

/// `n` bytes of 11-digit groups joined by dashes, as sysbench's `c` and
/// `pad`, drawn cheaply: the digits of one 64-bit draw per group.
fn cheap_digits(rng: &mut Prng, out: &mut [u8]) {
    for group in out.chunks_mut(12) {
        let mut v = rng.next_u64();
        for (i, b) in group.iter_mut().enumerate() {
            if i == 11 {
                *b = b'-';
            } else {
                *b = b'0' + (v % 10) as u8;
                v /= 10;
            }
        }
    }
}

enum MyParam<'a> {
    Int(i64),
    Text(&'a [u8]),
}

/// COM_STMT_EXECUTE of statement `id`, as `mysql::codec::stmt_execute` writes
/// it: integers as LONGLONG, strings as VAR_STRING, the types every time.
fn stmt_execute(out: &mut Vec<u8>, id: u32, params: &[MyParam<'_>]) {
    out.extend_from_slice(&[0, 0, 0, 0, COM_STMT_EXECUTE]);
    out.extend_from_slice(&id.to_le_bytes());
    out.push(0); // CURSOR_TYPE_NO_CURSOR
    out.extend_from_slice(&1u32.to_le_bytes()); // iterations
    if !params.is_empty() {
        out.resize(out.len() + params.len().div_ceil(8), 0); // no NULLs
        out.push(1); // new_params_bound_flag: types follow
        for p in params {
            out.extend_from_slice(match p {
                MyParam::Int(_) => &[0x08, 0],
                MyParam::Text(_) => &[0xfd, 0],
            });
        }
        for p in params {
            match *p {
                MyParam::Int(v) => out.extend_from_slice(&v.to_le_bytes()),
                MyParam::Text(t) => {
                    // sysbench's strings are under 251 bytes: a one-byte length
                    out.push(t.len() as u8);
                    out.extend_from_slice(t);
                }
            }
        }
    }
    let len = (out.len() - 4) as u32;
    out[..3].copy_from_slice(&len.to_le_bytes()[..3]);
}

impl MyWire {
    /// The reply in flight on `i` is complete (`err`: an ERR packet).
    fn answered(&mut self, i: usize, err: bool, errors: &mut u64) -> Reply {
        let c = &mut self.conns[i];
        c.frame = Frame::First;
        if c.rolling_back {
            c.rolling_back = false;
            c.step = 0;
            return Reply::Statement;
        }
        if err {
            *errors += 1;
            // Inside BEGIN .. COMMIT: roll back (a lock wait timeout leaves the
            // transaction open), then the next event.
            let open = self.plan[0] == Kind::Begin && c.step > 0 && c.step + 1 < self.plan.len();
            c.rolling_back = open;
            c.step = 0;
            return Reply::Statement;
        }
        c.step += 1;
        if c.step == self.plan.len() {
            c.step = 0;
            return Reply::Transaction;
        }
        Reply::Statement
    }
}

impl MyConnState {
    /// The id of `kind`'s statement on the current group's table.
    fn id(&self, kind: Kind) -> u32 {
        let k = kind.per_table_index().expect("a per-table statement");
        self.ids[self.table as usize * Kind::PER_TABLE.len() + k]
    }
}

impl Proto for MyWire {
    fn request(&mut self, i: usize, out: &mut Vec<u8>) {
        use MyParam::{Int, Text};
        out.clear();
        let c = &mut self.conns[i];
        if c.rolling_back {
            // as perflab's client does, in the text protocol
            out.extend_from_slice(&[9, 0, 0, 0, COM_QUERY]);
            out.extend_from_slice(b"ROLLBACK");
            return;
        }
        if c.step == 0 {
            c.group = None;
        }
        let kind = self.plan[c.step];
        // A new group (a run of one kind; delete and insert share one) draws
        // its table, as oltp::protocol::Events::draw does.
        let same = c.group == Some(kind) || (c.group == Some(Kind::Delete) && kind == Kind::Insert);
        if !same && !matches!(kind, Kind::Begin | Kind::Commit) {
            c.table = self.rng.uniform_i64(0, self.tables as i64 - 1) as u32;
            c.group = Some(kind);
        }
        let (rng, keys) = (&mut self.rng, self.keys);
        match kind {
            Kind::Begin => stmt_execute(out, c.begin, &[]),
            Kind::Commit => stmt_execute(out, c.commit, &[]),
            Kind::SimpleRange | Kind::SumRange | Kind::OrderRange | Kind::DistinctRange => {
                let a = keys.draw(rng);
                stmt_execute(out, c.id(kind), &[Int(a), Int(a + RANGE_SIZE - 1)]);
            }
            Kind::NonIndexUpdate => {
                cheap_digits(rng, &mut self.c);
                let a = keys.draw(rng);
                stmt_execute(out, c.id(kind), &[Text(&self.c), Int(a)]);
            }
            Kind::Delete => {
                c.delete_id = keys.draw(rng);
                stmt_execute(out, c.id(kind), &[Int(c.delete_id)]);
            }
            Kind::Insert | Kind::InsertAuto => {
                let k = keys.draw(rng);
                cheap_digits(rng, &mut self.c);
                cheap_digits(rng, &mut self.pad);
                let (c_, pad) = (Text(&self.c), Text(&self.pad));
                if kind == Kind::Insert {
                    stmt_execute(out, c.id(kind), &[Int(c.delete_id), Int(k), c_, pad]);
                } else {
                    stmt_execute(out, c.id(kind), &[Int(k), c_, pad]);
                }
            }
            _ => {
                let a = keys.draw(rng);
                stmt_execute(out, c.id(kind), &[Int(a)]);
            }
        }
    }

    fn take(&mut self, i: usize, data: &[u8], errors: &mut u64) -> Reply {
        let c = &mut self.conns[i];
        let owned;
        let buf: &[u8] = if c.carry.is_empty() {
            data
        } else {
            c.carry.extend_from_slice(data);
            owned = std::mem::take(&mut c.carry);
            &owned
        };
        let mut at = 0;
        let mut end = None;
        while buf.len() - at >= 4 {
            let len = u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], 0]) as usize;
            if buf.len() - at < 4 + len {
                break;
            }
            let (seq, first) = (buf[at + 3], buf.get(at + 4).copied().unwrap_or(0));
            at += 4 + len;
            match c.frame {
                Frame::First if seq != 1 => panic!("connection {i}: a reply out of step"),
                Frame::First => match first {
                    0x00 => end = Some(false),
                    0xff => end = Some(true),
                    // a column count under 251: one byte
                    n => c.frame = Frame::Columns(n as u32 + c.eof_extra),
                },
                Frame::Columns(k) => {
                    c.frame = if k == 1 {
                        Frame::Rows
                    } else {
                        Frame::Columns(k - 1)
                    }
                }
                Frame::Rows => match first {
                    // binary rows start with 0x00: 0xfe is the end (EOF, or OK)
                    0xfe => end = Some(false),
                    0xff => end = Some(true),
                    _ => {}
                },
            }
            if end.is_some() {
                // No pipelining: a reply ends what was read.
                assert_eq!(at, buf.len(), "bytes after a reply");
                break;
            }
        }
        match end {
            Some(err) => self.answered(i, err, errors),
            None => {
                c.carry.extend_from_slice(&buf[at..]);
                Reply::Partial
            }
        }
    }
}

/// Read one packet from a blocking connection: (sequence id, payload).
fn my_packet(s: &mut impl Read) -> (u8, Vec<u8>) {
    let mut head = [0u8; 4];
    s.read_exact(&mut head).expect("reading from the server");
    let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).expect("reading from the server");
    (head[3], body)
}

fn my_packet_out(seq: u8, payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes()[..3]);
    out.push(seq);
    out.extend_from_slice(payload);
}

/// Exit 2 with one line, as for bad arguments (connecting is set-up).
fn my_fail(what: &str) -> ! {
    eprintln!("driver_floor: {what}");
    std::process::exit(2);
}

fn my_check(payload: &[u8], what: &str) {
    if payload.first() == Some(&0xff) {
        let code = u16::from_le_bytes([payload[1], payload[2]]);
        let text = String::from_utf8_lossy(payload.get(9..).unwrap_or_default());
        my_fail(&format!("{what}: server error {code}: {text}"));
    }
}

/// Connect, authenticate (mysql_native_password or an empty password) and
/// prepare BEGIN, COMMIT and the script's statements on every table.
fn my_connect(info: &MyConnInfo, plan: &[Kind], tables: u32) -> (OwnedFd, MyConnState) {
    fn setup(
        s: &mut (impl Read + Write),
        info: &MyConnInfo,
        plan: &[Kind],
        tables: u32,
    ) -> MyConnState {
        let (_, hello) = my_packet(s);
        my_check(&hello, "connect");
        assert_eq!(hello[0], 10, "HandshakeV10");
        let mut at = 1 + hello[1..].iter().position(|&b| b == 0).unwrap() + 1 + 4;
        let mut scramble = hello[at..at + 8].to_vec();
        at += 9;
        let mut caps = u16::from_le_bytes([hello[at], hello[at + 1]]) as u32;
        at += 5; // capabilities (low), character set, status
        caps |= (u16::from_le_bytes([hello[at], hello[at + 1]]) as u32) << 16;
        let auth_len = hello[at + 2] as usize;
        at += 13; // capabilities (high), auth data length, reserved
        if caps & CLIENT_SECURE_CONNECTION != 0 {
            let n = auth_len.saturating_sub(8).max(13);
            let part = &hello[at..at + n];
            scramble.extend_from_slice(part.strip_suffix(&[0]).unwrap_or(part));
        }
        let mut wanted = MY_WANTS;
        if !info.database.is_empty() {
            wanted |= CLIENT_CONNECT_WITH_DB;
        }
        let caps = wanted & caps;
        assert!(
            caps & CLIENT_PLUGIN_AUTH != 0,
            "a server with plugin authentication"
        );
        let password = info.password.as_deref().unwrap_or("").as_bytes();
        let auth = native_password(password, &scramble);
        let mut body = Vec::new();
        body.extend_from_slice(&caps.to_le_bytes());
        body.extend_from_slice(&0xff_ffffu32.to_le_bytes());
        body.push(45); // utf8mb4_general_ci
        body.extend_from_slice(&[0; 23]);
        body.extend_from_slice(info.user.as_bytes());
        body.push(0);
        body.push(auth.len() as u8); // lenenc, under 251
        body.extend_from_slice(&auth);
        if caps & CLIENT_CONNECT_WITH_DB != 0 {
            body.extend_from_slice(info.database.as_bytes());
            body.push(0);
        }
        body.extend_from_slice(b"mysql_native_password\0");
        let mut out = Vec::new();
        my_packet_out(1, &body, &mut out);
        s.write_all(&out).unwrap();
        loop {
            let (seq, reply) = my_packet(s);
            my_check(&reply, "authentication");
            match reply[0] {
                0x00 => break,
                0xfe => {
                    // AuthSwitchRequest: mysql_native_password with fresh data only
                    let name_end = 1 + reply[1..].iter().position(|&b| b == 0).unwrap();
                    let plugin = String::from_utf8_lossy(&reply[1..name_end]);
                    if plugin != "mysql_native_password" {
                        my_fail(&format!(
                            "the server asks for {plugin}; driver_floor speaks \
                             mysql_native_password only"
                        ));
                    }
                    let data = &reply[name_end + 1..];
                    let data = data.strip_suffix(&[0]).unwrap_or(data);
                    out.clear();
                    my_packet_out(
                        seq.wrapping_add(1),
                        &native_password(password, data),
                        &mut out,
                    );
                    s.write_all(&out).unwrap();
                }
                other => panic!("authentication: an unexpected packet {other:#x}"),
            }
        }
        let eof_extra = u32::from(caps & CLIENT_DEPRECATE_EOF == 0);
        // every statement prepared in one round trip, read in order
        let mut sqls = vec!["BEGIN".to_string(), "COMMIT".into()];
        let mut slots = Vec::new();
        for table in 0..tables {
            for (k, kind) in Kind::PER_TABLE.iter().enumerate() {
                if plan.contains(kind) {
                    sqls.push(kind.mysql_sql(table + 1));
                    slots.push(table as usize * Kind::PER_TABLE.len() + k);
                }
            }
        }
        out.clear();
        for sql in &sqls {
            let mut cmd = vec![COM_STMT_PREPARE];
            cmd.extend_from_slice(sql.as_bytes());
            my_packet_out(0, &cmd, &mut out);
        }
        s.write_all(&out).unwrap();
        let mut ids = Vec::with_capacity(sqls.len());
        for sql in &sqls {
            let (_, ok) = my_packet(s);
            my_check(&ok, &format!("preparing {sql}"));
            ids.push(u32::from_le_bytes(ok[1..5].try_into().unwrap()));
            let columns = u16::from_le_bytes([ok[5], ok[6]]) as u32;
            let params = u16::from_le_bytes([ok[7], ok[8]]) as u32;
            for n in [params, columns] {
                let extra = if n > 0 { eof_extra } else { 0 };
                for _ in 0..n + extra {
                    my_packet(s);
                }
            }
        }
        let mut table_ids = vec![0; tables as usize * Kind::PER_TABLE.len()];
        for (slot, id) in slots.iter().zip(&ids[2..]) {
            table_ids[*slot] = *id;
        }
        MyConnState {
            ids: table_ids,
            begin: ids[0],
            commit: ids[1],
            eof_extra,
            step: 0,
            rolling_back: false,
            frame: Frame::First,
            table: 0,
            group: None,
            delete_id: 0,
            carry: Vec::new(),
        }
    }
    match &info.socket {
        Some(path) => {
            let mut s = UnixStream::connect(path)
                .unwrap_or_else(|e| my_fail(&format!("{}: {e}", info.display())));
            let state = setup(&mut s, info, plan, tables);
            s.set_nonblocking(true).unwrap();
            (s.into(), state)
        }
        None => {
            let mut s = TcpStream::connect((info.host.as_str(), info.port))
                .unwrap_or_else(|e| my_fail(&format!("{}: {e}", info.display())));
            s.set_nodelay(true).unwrap();
            let state = setup(&mut s, info, plan, tables);
            s.set_nonblocking(true).unwrap();
            (s.into(), state)
        }
    }
}

// ------------------------------------------------------------------ the loops

struct Outcome {
    done: u64,
    round_trips: u64,
    errors: u64,
}

impl Outcome {
    /// Account one complete response: true when the connection sends again.
    fn count(&mut self, reply: Reply) -> bool {
        match reply {
            Reply::Partial => return false,
            Reply::Statement => {}
            Reply::Transaction => self.done += 1,
        }
        self.round_trips += 1;
        true
    }
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
    let mut out = Outcome {
        done: 0,
        round_trips: 0,
        errors: 0,
    };
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
                let reply = proto.take(i, &buf[..got], &mut out.errors);
                if out.count(reply) {
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
    let mut out = Outcome {
        done: 0,
        round_trips: 0,
        errors: 0,
    };
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
            let reply = proto.take(i, data, &mut out.errors);
            if out.count(reply) {
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
         driver_floor pgwire [--uring] HOST|SOCKETDIR PORT USER DBNAME SECONDS CLIENTS THREADS ACCOUNTS\n       \
         driver_floor mysqlwire [--uring] CONNINFO SECONDS CONNECTIONS THREADS SCRIPT TABLES TABLE_SIZE [RAND_TYPE]"
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
            "mysqlwire" if (7..=8).contains(&args.len()) => {
                let info = MyConnInfo::parse(&args[0]).unwrap_or_else(|e| {
                    eprintln!("driver_floor: {e}");
                    std::process::exit(2)
                });
                let (seconds, conns, threads) = (
                    num(&args[1]) as f64,
                    num(&args[2]) as usize,
                    num(&args[3]) as usize,
                );
                let bad = |e: String| -> ! {
                    eprintln!("driver_floor: {e}");
                    std::process::exit(2)
                };
                let script: Script = args[4].parse().unwrap_or_else(|e| bad(e));
                let (tables, table_size) = (num(&args[5]) as u32, num(&args[6]) as i64);
                if tables == 0 || table_size == 0 {
                    bad("TABLES and TABLE_SIZE must be at least 1".into());
                }
                let rand_type: RandType = args
                    .get(7)
                    .map_or("special", String::as_str)
                    .parse()
                    .unwrap_or_else(|e| bad(e));
                let plan = std::sync::Arc::new(script.statements());
                let (fds, mut states): (Vec<OwnedFd>, Vec<MyConnState>) =
                    (0..conns).map(|_| my_connect(&info, &plan, tables)).unzip();
                let per = conns.div_ceil(threads.max(1));
                let protos = (0..threads)
                    .map(|t| {
                        let n = per.min(states.len());
                        Box::new(MyWire {
                            plan: plan.clone(),
                            tables,
                            keys: KeyRand {
                                rand_type,
                                n: table_size,
                            },
                            rng: Prng::seeded(0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1)),
                            conns: states.drain(..n).collect(),
                            c: [0; C_LEN],
                            pad: [0; PAD_LEN],
                        }) as Box<dyn Proto>
                    })
                    .collect();
                (fds, seconds, threads, protos)
            }
            _ => usage_exit(),
        };
    let per = fds.len().div_ceil(threads.max(1));
    // DRIVER_FLOOR_PIN=1: each thread on a CPU of its own, as perflab's
    // `pin` does (harness::config::plan_pinning), when there are enough.
    let allowed = perflab_engine::sys::allowed_cpus().unwrap_or_default();
    let pin = std::env::var("DRIVER_FLOOR_PIN").is_ok_and(|v| v == "1") && threads <= allowed.len();
    let before = usage();
    let start = Instant::now();
    let stop = start + Duration::from_secs_f64(seconds);
    let outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = fds
            .chunks(per.max(1))
            .zip(protos.iter_mut())
            .enumerate()
            .map(|(t, (share, proto))| {
                let cpu = allowed.get(t).copied().filter(|_| pin);
                s.spawn(move || {
                    if let Some(cpu) = cpu {
                        perflab_engine::sys::pin_this_thread(cpu).expect("pin a thread");
                    }
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
    let round_trips: u64 = outcomes.iter().map(|o| o.round_trips).sum();
    let errors: u64 = outcomes.iter().map(|o| o.errors).sum();
    let (user, system) = (after.user - before.user, after.system - before.system);
    println!(
        "{{\"requests\": {done}, \"round_trips\": {round_trips}, \"seconds\": {elapsed:.6}, \
         \"cpu_s\": {:.6}, \"user_s\": {user:.6}, \"system_s\": {system:.6}, \"switches\": {}, \
         \"errors\": {errors}}}",
        user + system,
        after.switches - before.switches
    );
    drop(fds);
}
