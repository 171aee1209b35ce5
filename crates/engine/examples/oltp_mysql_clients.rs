//! sysbench's OLTP scripts on MariaDB/MySQL with perflab's own MySQL client
//! or with mysql_async 0.37, on the same load harness, to measure the two
//! clients (issue 32; benchmarks/mysql_clients.py). Built only with the
//! `mysql-async-client` feature; not part of the engine.
//!
//! ```text
//! oltp_mysql_clients own|own-uring|mysql_async SCRIPT CONNINFO TABLES TABLE_SIZE SECONDS CLIENTS THREADS
//! ```
//!
//! - `own`: the engine's `oltp::MysqlOltpProtocol` (perflab's client) on
//!   epoll; `own-uring`: the same on the thread's io_uring.
//! - `mysql_async`: the protocol below, the same draws (`oltp::protocol::
//!   Events`) and SQL (`Kind::mysql_sql`), one `mysql_async::Conn` per client
//!   (no pool), every statement prepared once per connection
//!   (`Queryable::prep`) and executed with binary parameters (`exec_drop`,
//!   rows read and dropped, as the own client's `read_result(None)` does).
//!
//! Both run on the harness (`harness::Run`): the same worker threads,
//! current-thread tokio runtimes, closed loop, timing and counting; only the
//! client differs. CONNINFO is the engine's (`socket=... user=... database=...`).
//!
//! Prints one JSON line: client, transactions, seconds, tps, failed,
//! lost_clients, cpu_s (this process's user + system over the measured
//! window, from the harness's getrusage), driver_cpu_s (its worker threads'),
//! whole_cpu_s (getrusage over the whole process, connecting included).

use mysql_async::prelude::Queryable;
use perflab_engine::harness::{ErrorClass, HarnessConfig, Protocol, Run, RunSummary, TxType};
use perflab_engine::mysql::MyConnInfo;
use perflab_engine::oltp::protocol::{Draws, Events, Kind};
use perflab_engine::oltp::{MysqlOltpProtocol, RandType, Script};
use perflab_engine::random::Prng;
use perflab_engine::uring::IoChoice;
use std::os::fd::RawFd;

/// sysbench's oltp scripts on mysql_async.
struct AsyncOltp {
    opts: mysql_async::Opts,
    events: Events,
    types: [&'static str; 1],
}

struct AsyncClient {
    conn: mysql_async::Conn,
    begin: mysql_async::Statement,
    commit: mysql_async::Statement,
    /// [table * Kind::PER_TABLE.len() + kind], as the own protocol keeps them.
    stmts: Vec<Option<mysql_async::Statement>>,
}

impl Protocol for AsyncOltp {
    type Client = AsyncClient;
    type Request = Draws;
    type Error = mysql_async::Error;

    fn transaction_types(&self) -> &[&'static str] {
        &self.types
    }

    async fn connect(&self, _client: u32) -> Result<AsyncClient, mysql_async::Error> {
        let mut conn = mysql_async::Conn::new(self.opts.clone()).await?;
        let begin = conn.prep("BEGIN").await?;
        let commit = conn.prep("COMMIT").await?;
        let mut stmts = vec![None; self.events.tables as usize * Kind::PER_TABLE.len()];
        for table in 0..self.events.tables {
            for kind in self.events.kinds() {
                let k = kind.per_table_index().unwrap_or(0);
                stmts[table as usize * Kind::PER_TABLE.len() + k] =
                    Some(conn.prep(kind.mysql_sql(table + 1)).await?);
            }
        }
        Ok(AsyncClient {
            conn,
            begin,
            commit,
            stmts,
        })
    }

    fn socket(&self, _client: &AsyncClient) -> Option<RawFd> {
        None // mysql_async does not expose its socket
    }

    fn next_transaction(&self, _client: &mut AsyncClient, rng: &mut Prng) -> (TxType, Draws) {
        (0, self.events.draw(rng))
    }

    async fn execute(
        &self,
        client: &mut AsyncClient,
        _tx: TxType,
        d: &Draws,
    ) -> Result<(), mysql_async::Error> {
        use mysql_async::Value::{Bytes, Int};
        for st in &d.steps {
            let stmt = match st.kind {
                Kind::Begin => &client.begin,
                Kind::Commit => &client.commit,
                kind => kind
                    .per_table_index()
                    .and_then(|k| {
                        client.stmts[st.table as usize * Kind::PER_TABLE.len() + k].as_ref()
                    })
                    .expect("every kind of the script is prepared"),
            };
            let (a, b) = (Int(st.a), Int(st.b));
            let params: Vec<mysql_async::Value> = match st.kind {
                Kind::Begin | Kind::Commit => vec![],
                Kind::SimpleRange | Kind::SumRange | Kind::OrderRange | Kind::DistinctRange => {
                    vec![a, b]
                }
                Kind::NonIndexUpdate => vec![Bytes(d.c_update.to_vec()), a],
                Kind::Insert => vec![a, b, Bytes(d.c_insert.to_vec()), Bytes(d.pad.to_vec())],
                Kind::InsertAuto => vec![b, Bytes(d.c_insert.to_vec()), Bytes(d.pad.to_vec())],
                _ => vec![a],
            };
            let params = if params.is_empty() {
                mysql_async::Params::Empty
            } else {
                mysql_async::Params::Positional(params)
            };
            if let Err(err) = client.conn.exec_drop(stmt, params).await {
                if matches!(err, mysql_async::Error::Server(_)) {
                    client.conn.query_drop("ROLLBACK").await?;
                }
                return Err(err);
            }
        }
        Ok(())
    }

    fn classify(&self, error: &mysql_async::Error) -> ErrorClass {
        match error {
            mysql_async::Error::Server(e) if matches!(e.code, 1213 | 1205 | 1020) => {
                ErrorClass::Retryable {
                    kind: e.code.to_string(),
                }
            }
            mysql_async::Error::Server(e) => ErrorClass::Counted {
                kind: e.code.to_string(),
            },
            _ => ErrorClass::Fatal,
        }
    }
}

fn rusage_cpu_s() -> f64 {
    // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage for the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn async_opts(info: &MyConnInfo) -> mysql_async::Opts {
    let mut b = mysql_async::OptsBuilder::default()
        .user(Some(info.user.clone()))
        .pass(info.password.clone())
        .db_name(Some(info.database.clone()))
        .prefer_socket(false)
        .stmt_cache_size(256);
    b = match &info.socket {
        Some(path) => b.socket(Some(path.clone())),
        None => b.ip_or_hostname(info.host.clone()).tcp_port(info.port),
    };
    b.into()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 8 {
        eprintln!(
            "usage: oltp_mysql_clients own|own-uring|mysql_async SCRIPT CONNINFO TABLES \
             TABLE_SIZE SECONDS CLIENTS THREADS"
        );
        std::process::exit(2);
    }
    let fail = |m: String| -> ! {
        eprintln!("oltp_mysql_clients: {m}");
        std::process::exit(2)
    };
    let num = |i: usize| -> u32 {
        args[i]
            .parse()
            .unwrap_or_else(|_| fail(format!("{:?} is not a number", args[i])))
    };
    let script: Script = args[1].parse().unwrap_or_else(|e| fail(e));
    let (tables, table_size, seconds, clients, threads) = (num(3), num(4), num(5), num(6), num(7));
    let mut cfg = HarnessConfig::closed_loop(clients, threads, seconds as f64);
    cfg.seed = 1;
    let started = rusage_cpu_s();
    let summary: Result<RunSummary, String> = match args[0].as_str() {
        "own" | "own-uring" => {
            if args[0] == "own-uring" {
                cfg.io = IoChoice::Uring;
            }
            MysqlOltpProtocol::new(&args[2], script, tables, table_size, RandType::Special)
                .and_then(|p| Run::run(cfg, p))
                .map_err(|e| e.to_string())
        }
        "mysql_async" => {
            let info = MyConnInfo::parse(&args[2]).unwrap_or_else(|e| fail(e.to_string()));
            Events::new(script, tables, table_size, RandType::Special)
                .map_err(|e| e.to_string())
                .and_then(|events| {
                    let protocol = AsyncOltp {
                        opts: async_opts(&info),
                        events,
                        types: [script.name()],
                    };
                    Run::run(cfg, protocol).map_err(|e| e.to_string())
                })
        }
        other => fail(format!(
            "client {other:?} is unknown; allowed: own, own-uring, mysql_async"
        )),
    };
    let s = summary.unwrap_or_else(|e| fail(e));
    let whole = rusage_cpu_s() - started;
    println!(
        "{{\"client\": \"{}\", \"transactions\": {}, \"seconds\": {:.3}, \"tps\": {:.1}, \
         \"failed\": {}, \"lost_clients\": {}, \"cpu_s\": {:.4}, \"driver_cpu_s\": {:.4}, \
         \"whole_cpu_s\": {:.4}, \"io\": \"{}\"}}",
        args[0],
        s.transactions,
        s.measured_s,
        s.tps,
        s.failed,
        s.lost_clients,
        s.process_cpu_s,
        s.driver_cpu_s,
        whole,
        s.io
    );
}
