//! The harness driving a protocol it has never heard of: a line-based echo
//! over a local TCP listener, made only here. Counts, latency, retries,
//! lost clients and open-loop lag must come out right.

use super::*;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// The echo server: one thread per connection, each line answered after
/// `delay`. "fail..." is answered "FAIL"; after `close_after` lines a
/// connection is closed (0: never). It stops by itself when the test's
/// clients have all gone (bounded in count: `connections`).
struct EchoServer {
    addr: SocketAddr,
    lines: Arc<AtomicU64>,
}

impl EchoServer {
    fn start(connections: usize, delay: Duration, close_after: u64) -> EchoServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let lines = Arc::new(AtomicU64::new(0));
        let counted = lines.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(connections) {
                let Ok(mut stream) = stream else { return };
                let counted = counted.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut line = String::new();
                    let mut answered = 0;
                    while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                        counted.fetch_add(1, Ordering::SeqCst);
                        if !delay.is_zero() {
                            std::thread::sleep(delay);
                        }
                        let reply = if line.starts_with("fail") {
                            "FAIL\n".to_string()
                        } else {
                            line.clone()
                        };
                        if stream.write_all(reply.as_bytes()).is_err() {
                            return;
                        }
                        answered += 1;
                        if close_after > 0 && answered >= close_after {
                            return;
                        }
                        line.clear();
                    }
                });
            }
        });
        EchoServer { addr, lines }
    }
}

/// Two transaction types, "ping" (3 in 4) and "fail" (1 in 4).
struct Echo {
    addr: SocketAddr,
    with_failures: bool,
}

/// The echo protocol with a pause before and after each transaction.
struct PausingEcho {
    echo: Echo,
    before: Duration,
    after: Duration,
}

impl Protocol for PausingEcho {
    type Client = EchoClient;
    type Request = u64;
    type Error = EchoError;
    const HAS_PAUSES: bool = true;

    fn transaction_types(&self) -> &[&'static str] {
        self.echo.transaction_types()
    }
    async fn connect(&self, client: u32) -> Result<EchoClient, EchoError> {
        self.echo.connect(client).await
    }
    fn socket(&self, client: &EchoClient) -> Option<RawFd> {
        self.echo.socket(client)
    }
    fn next_transaction(&self, client: &mut EchoClient, rng: &mut Prng) -> (TxType, u64) {
        self.echo.next_transaction(client, rng)
    }
    async fn execute(
        &self,
        client: &mut EchoClient,
        tx: TxType,
        request: &u64,
    ) -> Result<(), EchoError> {
        self.echo.execute(client, tx, request).await
    }
    fn classify(&self, error: &EchoError) -> ErrorClass {
        self.echo.classify(error)
    }
    fn pause_before(&self, _tx: TxType, _rng: &mut Prng) -> Option<Duration> {
        Some(self.before)
    }
    fn pause_after(&self, _tx: TxType, _rng: &mut Prng) -> Option<Duration> {
        Some(self.after)
    }
}

struct EchoClient {
    reader: tokio::io::BufReader<tokio::net::TcpStream>,
    line: String,
}

#[derive(Debug)]
enum EchoError {
    Refused,
    Io(std::io::Error),
}

impl fmt::Display for EchoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EchoError::Refused => f.write_str("FAIL"),
            EchoError::Io(e) => write!(f, "echo connection: {e}"),
        }
    }
}

impl Protocol for Echo {
    type Client = EchoClient;
    type Request = u64;
    type Error = EchoError;

    fn transaction_types(&self) -> &[&'static str] {
        &["ping", "fail"]
    }

    async fn connect(&self, _client: u32) -> Result<EchoClient, EchoError> {
        let stream = tokio::net::TcpStream::connect(self.addr)
            .await
            .map_err(EchoError::Io)?;
        stream.set_nodelay(true).map_err(EchoError::Io)?;
        Ok(EchoClient {
            reader: tokio::io::BufReader::new(stream),
            line: String::new(),
        })
    }

    fn socket(&self, client: &EchoClient) -> Option<RawFd> {
        Some(client.reader.get_ref().as_raw_fd())
    }

    fn next_transaction(&self, _client: &mut EchoClient, rng: &mut Prng) -> (TxType, u64) {
        let draw = rng.uniform_i64(0, 3) as u64;
        let tx = if self.with_failures && draw == 0 {
            1
        } else {
            0
        };
        (tx, draw)
    }

    async fn execute(
        &self,
        client: &mut EchoClient,
        tx: TxType,
        request: &u64,
    ) -> Result<(), EchoError> {
        let message = format!("{}-{request}\n", self.transaction_types()[tx]);
        let stream = client.reader.get_mut();
        stream
            .write_all(message.as_bytes())
            .await
            .map_err(EchoError::Io)?;
        client.line.clear();
        let n = client
            .reader
            .read_line(&mut client.line)
            .await
            .map_err(EchoError::Io)?;
        if n == 0 {
            return Err(EchoError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        if client.line == "FAIL\n" {
            return Err(EchoError::Refused);
        }
        assert_eq!(client.line, message, "the echo is the request");
        Ok(())
    }

    fn classify(&self, error: &EchoError) -> ErrorClass {
        match error {
            EchoError::Refused => ErrorClass::Retryable {
                kind: "FAIL".into(),
            },
            EchoError::Io(_) => ErrorClass::Fatal,
        }
    }
}

fn echo(addr: SocketAddr) -> Echo {
    Echo {
        addr,
        with_failures: false,
    }
}

fn config(clients: u32, threads: u32) -> HarnessConfig {
    let mut cfg = HarnessConfig::closed_loop(clients, threads, 1.0);
    cfg.seed = 7;
    cfg
}

#[test]
fn closed_loop_counts_every_transaction_once_with_its_latency() {
    let server = EchoServer::start(4, Duration::from_millis(2), 0);
    let mut cfg = config(4, 2);
    cfg.duration_s = None;
    cfg.transactions_per_client = Some(50);
    // auto on a protocol without a ring path: epoll, saying why.
    cfg.io = crate::uring::IoChoice::Auto;
    let protocol = echo(server.addr);
    let s = Run::run(cfg, protocol).unwrap();
    assert_eq!(s.transactions, 200);
    assert_eq!((s.failed, s.retries, s.lost_clients), (0, 0, 0));
    assert_eq!(server.lines.load(Ordering::SeqCst), 200);
    assert_eq!(s.latency.summary().count, 200);
    // Each round trip waits out the server's 2 ms.
    assert!(
        s.latency.summary().min_us >= 2000,
        "{}",
        s.latency.summary().min_us
    );
    assert!(s.lag.is_empty(), "closed loop has no schedule");
    assert_eq!(s.by_type[0].name, "ping");
    assert_eq!((s.by_type[0].committed, s.by_type[1].committed), (200, 0));
    assert_eq!(s.by_type[0].latency.summary().count, 200);
    assert!(s.tps > 0.0 && s.measured_s > 0.0);
    assert!(s.connect_phase_s > 0.0 && s.connect_max_s > 0.0);
    assert!(s.driver_cpu_s > 0.0);
    assert!(
        s.io.starts_with("epoll") && s.io.contains("no io_uring path"),
        "{}",
        s.io
    );
}

#[test]
fn retryable_errors_are_retried_up_to_max_tries_then_counted_by_kind() {
    let server = EchoServer::start(2, Duration::ZERO, 0);
    let mut cfg = config(2, 1);
    cfg.duration_s = None;
    cfg.transactions_per_client = Some(200);
    cfg.max_tries = 3;
    let protocol = Echo {
        addr: server.addr,
        with_failures: true,
    };
    let s = Run::run(cfg, protocol).unwrap();
    assert_eq!(s.transactions + s.failed, 400);
    // About 1 in 4 is a "fail" transaction (binomial: 100 +- 3 sd is 74..126).
    assert!((74..=126).contains(&s.failed), "failed {}", s.failed);
    assert_eq!(s.by_type[1].failed, s.failed);
    assert_eq!(s.by_type[0].committed, s.transactions);
    assert_eq!(
        s.retries,
        2 * s.failed,
        "each failing transaction tried 3 times"
    );
    assert_eq!(s.retried, s.failed);
    assert_eq!(s.errors_by_kind.get("FAIL"), Some(&s.failed));
    assert_eq!(s.failed_latency.summary().count, s.failed);
    assert_eq!(
        server.lines.load(Ordering::SeqCst),
        s.transactions + 3 * s.failed
    );
}

#[test]
fn a_client_whose_connection_ends_is_counted_lost_and_the_others_go_on() {
    // The server ends every connection after 10 answers.
    let server = EchoServer::start(3, Duration::ZERO, 10);
    let mut cfg = config(3, 1);
    cfg.duration_s = None;
    cfg.transactions_per_client = Some(1000);
    let s = Run::run(cfg, echo(server.addr)).unwrap();
    assert_eq!(s.lost_clients, 3);
    assert_eq!(s.transactions, 30);
    assert_eq!(
        s.events
            .iter()
            .filter(|e| e.kind == "lost-connection")
            .count(),
        3
    );
}

#[test]
fn open_loop_latency_runs_from_the_intended_start_and_lag_is_recorded() {
    // 100 tx/s asked of one client whose server takes 20 ms a reply (at most
    // 50 tx/s): the schedule falls behind, and the latency from the intended
    // start shows the queue instead of the 20 ms service time.
    let server = EchoServer::start(1, Duration::from_millis(20), 0);
    let mut cfg = config(1, 1);
    cfg.duration_s = Some(1.0);
    cfg.rate_tps = Some(100.0);
    cfg.schedule = Schedule::Constant;
    let s = Run::run(cfg, echo(server.addr)).unwrap();
    let latency = s.latency.summary();
    let lag = s.lag.summary();
    // At most 50 served in 1 s (a busy machine serves fewer, never more).
    assert!(
        (1..=55).contains(&s.transactions),
        "about 50 served in 1 s: {}",
        s.transactions
    );
    assert_eq!(lag.count, s.transactions);
    // The n-th transaction was meant to start at n x 10 ms and started at
    // about n x 20 ms: by the end the lag is about half a second.
    assert!(lag.max_us > 300_000, "lag max {} us", lag.max_us);
    assert!(latency.max_us > lag.max_us, "latency includes the lag");
    assert!(latency.min_us >= 20_000);
    assert!(latency.p50_us > 100_000, "p50 {} us", latency.p50_us);
}

#[test]
fn open_loop_on_an_idle_server_keeps_the_rate_and_records_each_lag() {
    // The mechanism, not the machine's timer: a rate holds an idle echo
    // server (which answers thousands a second closed-loop) to the
    // schedule's starts, and every scheduled transaction records its lag
    // from its intended start. How small that lag is depends on how busy
    // the machine is: benchmarks/open_loop_lag.py measures it.
    let server = EchoServer::start(2, Duration::ZERO, 0);
    let mut cfg = config(2, 1);
    cfg.duration_s = Some(1.0);
    cfg.rate_tps = Some(400.0);
    let s = Run::run(cfg, echo(server.addr)).unwrap();
    // Poisson arrivals at 400/s over 1 s: 400 +- 20 (sd). Above: no more
    // starts than the schedule made (10 sd); below, a loose factor of 2 (a
    // late client catches up on its missed starts, a busy machine may leave
    // the last ones past the end).
    assert!(
        (200..=600).contains(&s.transactions),
        "{} transactions",
        s.transactions
    );
    let (lag, latency) = (s.lag.summary(), s.latency.summary());
    assert_eq!(lag.count, s.transactions, "a lag per scheduled transaction");
    // Latency runs from the intended start: it holds the lag and the reply.
    assert!(latency.mean_us >= lag.mean_us, "{latency:?} vs {lag:?}");
    assert!(latency.max_us >= lag.max_us, "{latency:?} vs {lag:?}");
    assert!(s.series.iter().all(|i| i.lag_count == i.transactions));
}

#[test]
fn connection_failure_is_reported_before_any_transaction() {
    // Nothing listens on a port that was just free.
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let err = Run::run(
        config(2, 1),
        Echo {
            addr,
            with_failures: false,
        },
    )
    .err()
    .unwrap();
    assert!(
        matches!(&err, EngineError::Target(m) if m.contains("echo connection")),
        "{err:?}"
    );
}

#[test]
fn io_uring_is_refused_for_a_protocol_without_a_ring_path() {
    let mut cfg = config(1, 1);
    cfg.io = crate::uring::IoChoice::Uring;
    let err = Run::start(
        cfg,
        Echo {
            addr: "127.0.0.1:9".parse().unwrap(),
            with_failures: false,
        },
    )
    .err()
    .unwrap();
    assert!(
        matches!(&err, EngineError::Config(m) if m.contains("no io_uring path")),
        "{err:?}"
    );
}

#[test]
fn bad_settings_are_config_errors() {
    let mut cfg = config(2, 3);
    cfg.duration_s = Some(1.0);
    assert!(matches!(cfg.validate(), Err(EngineError::Config(m)) if m.contains("threads = 3")));
    let mut cfg = config(1, 1);
    cfg.rate_tps = Some(f64::NAN);
    assert!(cfg.validate().is_err());
    let mut cfg = config(1, 1);
    cfg.duration_s = Some(f64::INFINITY);
    assert!(cfg.validate().is_err());
}

#[test]
fn pauses_before_and_after_slow_the_client_but_stay_out_of_the_latency() {
    // 1 client, 2 ms per round trip, 40 ms before and 60 ms after each
    // transaction: about 10 transactions in 1 s, each measured at about 2 ms.
    let server = EchoServer::start(1, Duration::from_millis(2), 0);
    let protocol = PausingEcho {
        echo: echo(server.addr),
        before: Duration::from_millis(40),
        after: Duration::from_millis(60),
    };
    let s = Run::run(config(1, 1), protocol).unwrap();
    // The pauses hold the client back (closed loop on 2 ms it would make
    // hundreds); a busy machine may make fewer, never more.
    assert!(
        (1..=11).contains(&s.transactions),
        "{} transactions",
        s.transactions
    );
    let latency = s.latency.summary();
    assert!(latency.min_us >= 2_000, "min {} us", latency.min_us);
    // A latency that held the pauses would be 100 ms or more, every one.
    assert!(latency.min_us < 40_000, "min {} us", latency.min_us);
}

#[test]
fn gated_runs_wait_connected_then_start_at_the_given_instant() {
    // Two drivers (as on two machines) against one server, started at one
    // instant: their seconds are cut at the same edges, and each second's
    // encoded histogram holds that second's transactions.
    let server = EchoServer::start(4, Duration::from_millis(1), 0);
    let t0 = crate::sys::monotonic_ns();
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let mut cfg = config(2, 1);
            cfg.t0_ns = t0;
            cfg.duration_s = Some(2.0);
            Run::start_gated(cfg, echo(server.addr)).unwrap()
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !runs.iter().all(|r| r.connected()) {
        assert!(std::time::Instant::now() < deadline, "never connected");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        server.lines.load(Ordering::SeqCst),
        0,
        "nothing runs before go"
    );
    let go = crate::sys::monotonic_ns() + 50_000_000;
    for r in &runs {
        r.go_at(go);
    }
    let summaries: Vec<RunSummary> = runs
        .into_iter()
        .map(|r| {
            while !matches!(r.next_progress(Duration::from_secs(60)), Progress::Finished) {}
            r.join().unwrap()
        })
        .collect();
    let expected_start = (go - t0) as f64 / 1e9;
    for s in &summaries {
        assert!(
            (s.measure_start_t_s - expected_start).abs() < 1e-6,
            "{}",
            s.measure_start_t_s
        );
        assert_eq!(s.series.len(), 2);
        for (k, interval) in s.series.iter().enumerate() {
            assert!((interval.t_s - expected_start - (k + 1) as f64).abs() < 1e-6);
            let h = crate::hist::LatencyHistogram::decode(
                interval
                    .latency_encoded
                    .as_ref()
                    .expect("a gated run keeps each second's histogram"),
            )
            .unwrap();
            assert_eq!(h.count(), interval.transactions);
        }
        assert!(s.transactions > 0);
    }
}

#[test]
fn a_gated_run_aborted_while_waiting_ends_interrupted() {
    let server = EchoServer::start(1, Duration::ZERO, 0);
    let run = Run::start_gated(config(1, 1), echo(server.addr)).unwrap();
    while !run.connected() {
        std::thread::sleep(Duration::from_millis(5));
    }
    run.abort();
    assert!(matches!(run.join(), Err(EngineError::Interrupted)));
    assert_eq!(server.lines.load(Ordering::SeqCst), 0);
}

/// A synthetic per-second series: (transactions, io_uring_enter calls) per
/// second, measured from t = 1 s.
fn enters_series(seconds: &[(u64, u64)]) -> Vec<IntervalReport> {
    seconds
        .iter()
        .enumerate()
        .map(|(i, &(transactions, io_enters))| IntervalReport {
            t_s: i as f64 + 1.0,
            interval_s: 1.0,
            transactions,
            tps: transactions as f64,
            io_enters,
            ..IntervalReport::default()
        })
        .collect()
}

#[test]
fn a_run_slow_for_part_of_its_window_says_so_with_the_series() {
    use super::stats::io_mode_event;
    // Fast at 0.14 enters per transaction, then seconds 4-6 at 0.50-0.70
    // (the slow mode of benchmarks/README.md), then fast again.
    let series = enters_series(&[
        (85_000, 11_900),
        (86_000, 12_300),
        (84_000, 12_100),
        (62_000, 31_000),
        (60_000, 42_000),
        (64_000, 35_200),
        (85_000, 12_000),
    ]);
    let (at, message) = io_mode_event(&series).expect("the slow seconds are named");
    assert_eq!(at, 3.0, "from the start of the first slow second");
    assert!(
        message.starts_with("io_uring slow mode: 3 of 7 s"),
        "{message}"
    );
    assert!(
        message.contains("0.140 io_uring_enter calls per transaction"),
        "{message}"
    );
    assert!(
        message.ends_with("0.14 0.14 0.14 0.50 0.70 0.55 0.14"),
        "the series, second by second: {message}"
    );
}

#[test]
fn a_steady_run_one_odd_second_or_an_epoll_run_says_nothing() {
    use super::stats::io_mode_event;
    // Within 20% of each other: one mode (tpcb-like's 1.7-2.1 enters/tx).
    let steady = enters_series(&[
        (9_000, 17_000),
        (9_500, 19_000),
        (8_800, 18_500),
        (9_100, 16_400),
    ]);
    assert_eq!(io_mode_event(&steady), None);
    // One slow second is not a mode; a nearly idle second is not judged.
    let odd = enters_series(&[
        (85_000, 12_000),
        (60_000, 40_000),
        (84_000, 12_000),
        (50, 49),
    ]);
    assert_eq!(io_mode_event(&odd), None);
    // epoll: no enters at all.
    let epoll = enters_series(&[(80_000, 0), (40_000, 0), (80_000, 0), (40_000, 0)]);
    assert_eq!(io_mode_event(&epoll), None);
    // Too short to have a fast level and a mode beside it.
    assert_eq!(
        io_mode_event(&enters_series(&[(85_000, 12_000), (60_000, 40_000)])),
        None
    );
}

/// The echo protocol with its round trips on the thread's io_uring.
struct RingEcho(Echo);

struct RingEchoClient {
    echo: EchoClient,
    ring: Option<crate::uring::RingUser>,
}

impl Protocol for RingEcho {
    type Client = RingEchoClient;
    type Request = u64;
    type Error = EchoError;
    const SUPPORTS_RING: bool = true;

    fn transaction_types(&self) -> &[&'static str] {
        &["ping"]
    }
    async fn connect(&self, client: u32) -> Result<RingEchoClient, EchoError> {
        Ok(RingEchoClient {
            echo: self.0.connect(client).await?,
            ring: None,
        })
    }
    fn socket(&self, client: &RingEchoClient) -> Option<RawFd> {
        self.0.socket(&client.echo)
    }
    fn next_transaction(&self, _client: &mut RingEchoClient, rng: &mut Prng) -> (TxType, u64) {
        (0, rng.uniform_i64(0, 3) as u64)
    }
    async fn execute(
        &self,
        client: &mut RingEchoClient,
        tx: TxType,
        request: &u64,
    ) -> Result<(), EchoError> {
        let Some(user) = &client.ring else {
            return self.0.execute(&mut client.echo, tx, request).await;
        };
        let message = format!("ping-{request}\n");
        let fd = client.echo.reader.get_ref().as_raw_fd();
        let done = user
            .ring()
            .round_trip(fd, message.clone().into_bytes(), vec![0; 64], 0)
            .await;
        if done.send_failed.is_some() || done.recv_result <= 0 {
            return Err(EchoError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        assert_eq!(
            &done.recv_buf[..done.recv_result as usize],
            message.as_bytes()
        );
        Ok(())
    }
    fn classify(&self, error: &EchoError) -> ErrorClass {
        self.0.classify(error)
    }
    fn use_ring(&self, client: &mut RingEchoClient, ring: &Rc<Ring>) -> Result<(), String> {
        client.ring = Some(ring.attach());
        Ok(())
    }
}

#[test]
#[ignore = "needs io_uring: ./dev test runs it with --ignored where io_uring_setup is permitted"]
fn each_second_of_a_ring_run_counts_its_io_uring_enters() {
    crate::uring::probe().expect("io_uring");
    let server = EchoServer::start(4, Duration::ZERO, 0);
    let mut cfg = HarnessConfig::closed_loop(4, 2, 2.5);
    cfg.seed = 7;
    cfg.io = crate::uring::IoChoice::Uring;
    let summary = Run::run(cfg, RingEcho(echo(server.addr))).unwrap();
    assert!(summary.io.starts_with("io_uring"), "{}", summary.io);
    assert!(summary.transactions > 0);
    let seconds: Vec<_> = summary.series.iter().filter(|s| !s.warmup).collect();
    assert!(seconds.len() >= 2, "{} seconds", seconds.len());
    for s in &seconds {
        // Every round trip of a second went through some enter of that second.
        assert!(
            s.transactions == 0 || s.io_enters > 0,
            "{} transactions, no enter at {} s",
            s.transactions,
            s.t_s
        );
    }
    let in_series: u64 = seconds.iter().map(|s| s.io_enters).sum();
    let total = (summary.io_enters_per_tx * summary.transactions as f64).round() as u64;
    assert!(
        in_series > 0 && in_series <= total,
        "{in_series} enters in the series, {total} in the run"
    );
}

/// The echo protocol timing each try's round trip as an operation ("line"),
/// and a second, empty one ("none") that is never recorded.
struct TimingEcho {
    echo: Echo,
}

impl Protocol for TimingEcho {
    type Client = (EchoClient, Vec<u64>);
    type Request = u64;
    type Error = EchoError;
    const TIMES_OPERATIONS: bool = true;

    fn transaction_types(&self) -> &[&'static str] {
        self.echo.transaction_types()
    }
    fn operation_types(&self) -> &[&'static str] {
        &["line", "none"]
    }
    fn take_operations(&self, client: &mut Self::Client, mut record: impl FnMut(usize, u64)) {
        for us in client.1.drain(..) {
            record(0, us);
        }
    }
    async fn connect(&self, client: u32) -> Result<Self::Client, EchoError> {
        Ok((self.echo.connect(client).await?, Vec::with_capacity(1)))
    }
    fn socket(&self, client: &Self::Client) -> Option<RawFd> {
        self.echo.socket(&client.0)
    }
    fn next_transaction(&self, client: &mut Self::Client, rng: &mut Prng) -> (TxType, u64) {
        self.echo.next_transaction(&mut client.0, rng)
    }
    async fn execute(
        &self,
        client: &mut Self::Client,
        tx: TxType,
        request: &u64,
    ) -> Result<(), EchoError> {
        client.1.clear();
        let sent = std::time::Instant::now();
        let answer = self.echo.execute(&mut client.0, tx, request).await;
        client.1.push(sent.elapsed().as_micros() as u64);
        answer
    }
    fn classify(&self, error: &EchoError) -> ErrorClass {
        self.echo.classify(error)
    }
}

#[test]
fn operations_of_committed_transactions_are_kept_per_operation_type() {
    let server = EchoServer::start(2, Duration::from_millis(1), 0);
    let mut cfg = config(2, 2);
    cfg.duration_s = None;
    cfg.transactions_per_client = Some(100);
    cfg.max_tries = 2;
    let protocol = TimingEcho {
        echo: Echo {
            addr: server.addr,
            with_failures: true,
        },
    };
    let s = Run::run(cfg, protocol).unwrap();
    assert!(s.failed > 0 && s.transactions > 0);
    let names: Vec<_> = s.operations.iter().map(|o| o.name).collect();
    assert_eq!(names, ["line", "none"]);
    // one per committed transaction, from both threads: none of the failed tries
    assert_eq!(s.operations[0].committed, s.transactions);
    assert_eq!(s.operations[0].latency.summary().count, s.transactions);
    assert!(s.operations[0].latency.summary().min_us >= 1000);
    assert_eq!(s.operations[1].committed, 0);
}

#[test]
fn a_protocol_that_times_no_operations_has_none() {
    let server = EchoServer::start(1, Duration::ZERO, 0);
    let mut cfg = config(1, 1);
    cfg.duration_s = None;
    cfg.transactions_per_client = Some(5);
    let s = Run::run(cfg, echo(server.addr)).unwrap();
    assert_eq!(s.transactions, 5);
    assert!(s.operations.is_empty());
}

#[test]
fn auto_pins_read_only_runs_with_one_thread_per_cpu_and_says_why_not_otherwise() {
    use super::config::{plan_pinning, PinChoice};
    let two = [0, 1];
    let (cpus, note) = plan_pinning(PinChoice::Auto, 2, &two, true);
    assert_eq!(cpus, vec![0, 1]);
    assert!(
        note.contains("thread 0 on CPU 0, thread 1 on CPU 1"),
        "{note}"
    );
    // A cpuset's CPUs, not 0..n: the threads get those.
    let (cpus, _) = plan_pinning(PinChoice::Auto, 2, &[2, 5], true);
    assert_eq!(cpus, vec![2, 5]);
    for (threads, allowed, read_only, why) in [
        (2, &two[..], false, "only read"),
        (1, &[0][..], true, "one thread"),
        (2, &[0, 1, 2, 3][..], true, "2 threads for the 4 CPUs"),
    ] {
        let (cpus, note) = plan_pinning(PinChoice::Auto, threads, allowed, read_only);
        assert!(cpus.is_empty(), "{note}");
        assert!(
            note.starts_with("driver threads not pinned") && note.contains(why),
            "{note}"
        );
    }
    // on: whatever the transactions, while there is a CPU per thread.
    assert_eq!(
        plan_pinning(PinChoice::On, 2, &[0, 1, 2, 3], false).0,
        vec![0, 1]
    );
    let (cpus, note) = plan_pinning(PinChoice::On, 3, &two, false);
    assert!(
        cpus.is_empty() && note.contains("3 threads for the 2 CPUs"),
        "{note}"
    );
    assert!(plan_pinning(PinChoice::Off, 2, &two, true).0.is_empty());
    assert!("sometimes"
        .parse::<PinChoice>()
        .unwrap_err()
        .contains("allowed: auto, on, off"));
}

#[test]
fn a_pinned_run_says_where_its_threads_ran() {
    let server = EchoServer::start(2, Duration::ZERO, 0);
    let mut cfg = config(2, 1);
    cfg.pin = PinChoice::On;
    let first = crate::sys::allowed_cpus().unwrap()[0];
    let s = Run::run(cfg, echo(server.addr)).unwrap();
    let pin: Vec<_> = s.events.iter().filter(|e| e.kind == "pin").collect();
    assert_eq!(pin.len(), 1);
    assert_eq!(
        pin[0].message,
        format!("driver threads pinned, one per CPU: thread 0 on CPU {first} (pin = \"on\")")
    );
}

/// A synthetic series of server-process samples: (sampled, off CPU) per
/// second, measured from t = 1 s.
fn placement_series(seconds: &[(u32, u32)]) -> Vec<IntervalReport> {
    seconds
        .iter()
        .enumerate()
        .map(|(i, &(server_sampled, server_off_cpu))| IntervalReport {
            t_s: i as f64 + 1.0,
            interval_s: 1.0,
            server_sampled,
            server_off_cpu,
            ..IntervalReport::default()
        })
        .collect()
}

#[test]
fn a_run_whose_server_processes_sat_off_their_drivers_cpu_says_so_with_the_shares() {
    use super::stats::placement_event;
    // 8 backends: all at home, then 2 and 4 of them off for three seconds
    // (the placements of benchmarks/README.md), then home again.
    let series = placement_series(&[(8, 0), (8, 0), (8, 2), (8, 4), (8, 4), (8, 1), (8, 0)]);
    let (at, message) = placement_event(&series, 2).expect("the off seconds are named");
    assert_eq!(at, 2.0, "from the start of the first off second");
    assert!(
        message.starts_with("server processes off their driver thread's CPU: in 3 of 7 s"),
        "{message}"
    );
    assert!(
        message.ends_with("0.00 0.00 0.25 0.50 0.50 0.12 0.00"),
        "the shares, second by second: {message}"
    );
}

#[test]
fn one_off_second_a_share_below_the_bound_or_nothing_sampled_says_nothing() {
    use super::stats::placement_event;
    assert_eq!(
        placement_event(&placement_series(&[(8, 0), (8, 4), (8, 0), (8, 0)]), 2),
        None
    );
    assert_eq!(
        placement_event(&placement_series(&[(8, 1), (8, 1), (8, 1), (8, 1)]), 2),
        None,
        "1 of 8 is below a quarter"
    );
    assert_eq!(
        placement_event(&placement_series(&[(0, 0), (0, 0), (0, 0)]), 2),
        None
    );
    let mut warm = placement_series(&[(8, 8), (8, 8), (8, 0), (8, 0)]);
    warm[0].warmup = true;
    warm[1].warmup = true;
    assert_eq!(placement_event(&warm, 2), None, "the warm-up is not judged");
    // A run whose clients follow their processes: its first two seconds
    // off are the wait before the moves.
    let followed = placement_series(&[(8, 4), (8, 4), (8, 0), (8, 0)]);
    assert!(placement_event(&followed, 2).is_some());
    assert_eq!(placement_event(&followed, 4), None);
}

#[test]
fn the_placement_sample_reads_each_process_cpu_and_moves_a_client_after_two_samples_off() {
    use super::run::{placement_sample, FOLLOW_AFTER};
    use super::shared::Place;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let cpus = crate::sys::allowed_cpus().unwrap();
    let home = cpus[0];
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let spinner = std::thread::spawn(move || {
        crate::sys::pin_this_thread(home).unwrap();
        // SAFETY: gettid has no arguments and cannot fail.
        tid_tx.send(unsafe { libc::gettid() } as u32).unwrap();
        while stop_rx.try_recv().is_err() {
            std::hint::spin_loop();
        }
    });
    let pid = tid_rx.recv().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let place = |client, thread| Place {
        client,
        pid,
        thread,
        off_streak: 0,
    };
    // Thread 0 on the process's CPU: at home, not counted off.
    let mut one = [place(0, 0)];
    assert_eq!(placement_sample(&mut one, &[home], None), (1, 0));
    // A process that has gone is not counted.
    let mut gone = [Place {
        pid: u32::MAX,
        ..place(0, 0)
    }];
    assert_eq!(placement_sample(&mut gone, &[home], None), (0, 0));
    if let Some(&other) = cpus.iter().find(|&&c| c != home) {
        // Client 1 on thread 1, pinned to the other CPU: off in every
        // sample; with `follow`, asked to move to thread 0 (on the
        // process's CPU) at the second sample, then at home.
        let pins = [home, other];
        let moves: Vec<AtomicUsize> = (0..2).map(|_| AtomicUsize::new(usize::MAX)).collect();
        let mut places = [place(0, 0), place(1, 1)];
        assert_eq!(FOLLOW_AFTER, 2);
        assert_eq!(placement_sample(&mut places, &pins, Some(&moves)), (2, 1));
        assert_eq!(moves[1].load(Ordering::Relaxed), usize::MAX);
        assert_eq!(placement_sample(&mut places, &pins, Some(&moves)), (2, 1));
        assert_eq!(moves[1].load(Ordering::Relaxed), 0);
        assert_eq!(places[1].thread, 0);
        assert_eq!(placement_sample(&mut places, &pins, Some(&moves)), (2, 0));
        // Without `follow`, counted only.
        let mut places = [place(1, 1)];
        for _ in 0..3 {
            assert_eq!(placement_sample(&mut places, &pins, None), (1, 1));
        }
        assert_eq!(places[0].thread, 1);
        // Thread 0 failed to pin: no CPU of its own, so client 1 is never
        // moved to it, however long it is off.
        let unpinned = super::run::placement_cpus(&pins, &[0]);
        assert_eq!(unpinned, [usize::MAX, other]);
        let moves: Vec<AtomicUsize> = (0..2).map(|_| AtomicUsize::new(usize::MAX)).collect();
        let mut places = [place(1, 1)];
        for _ in 0..3 {
            assert_eq!(
                placement_sample(&mut places, &unpinned, Some(&moves)),
                (1, 1)
            );
        }
        assert_eq!(moves[1].load(Ordering::Relaxed), usize::MAX);
    }
    stop_tx.send(()).unwrap();
    spinner.join().unwrap();
}

#[test]
fn the_follow_event_names_the_moves_or_the_first_reason_there_were_none() {
    use super::run::follow_note;
    let mut cfg = HarnessConfig::closed_loop(8, 2, 1.0);
    cfg.follow = true;
    assert_eq!(
        follow_note(&cfg, true, true, 8, Some(3)),
        "clients followed their server processes: 3 moves of a client to the driver thread on \
         its server process's CPU (8 of 8 clients' processes known)"
    );
    assert!(follow_note(&cfg, true, true, 0, Some(0))
        .ends_with("(no client's server process is known: a server elsewhere, or not PostgreSQL)"));
    assert!(follow_note(&cfg, false, true, 0, None)
        .ends_with("(this protocol's clients do not move between threads)"));
    assert!(
        follow_note(&cfg, true, false, 0, None).ends_with("(the driver threads are not pinned)")
    );
    assert!(follow_note(&cfg, true, true, 0, None)
        .ends_with("(a rate: each thread keeps its own schedule)"));
    cfg.follow = false;
    assert!(follow_note(&cfg, true, true, 8, None).ends_with("(follow = false)"));
}
