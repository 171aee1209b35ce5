//! The TPC-B driver: `clients` connections spread over `threads` worker
//! threads (pgbench -j), each thread a single-threaded tokio runtime that owns
//! its clients outright (no work stealing, no locks on the hot path but one
//! uncontended mutex per transaction for the statistics).
//!
//! Timing follows pgbench: connections are made first and their time is its
//! own metric; TPS counts from the common start. In closed loop a
//! transaction's latency runs from sending its first statement to the end of
//! its last. With `rate`, each thread follows a Poisson schedule and latency
//! runs from the *intended* start (pgbench -R, wrk2), so a stalled server
//! shows as latency instead of vanishing from the figures (no coordinated
//! omission); the wait between intended and actual start is the schedule lag.
//! With `latency_limit`, transactions slower than the limit are counted late
//! and, under a rate, schedule slots already later than the limit are
//! skipped and counted.
//!
//! A coordinator thread starts the run, cuts the per-second series, enforces
//! the end, and on abort shuts every client socket down so that clients blocked
//! on a stalled server return at once.

use super::random::Prng;
use super::{compile_script, Draws, Protocol, Script, Statement};
use crate::hist::{LatencyHistogram, LatencySummary};
use crate::pg::{ConnInfo, PgConn, PgError};
use crate::uring::{self, IoChoice, IoMethod, Ring};
use std::cell::Cell;
use std::collections::{BTreeMap, HashSet};
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// SQLSTATEs after which pgbench retries a transaction (up to max_tries).
const SERIALIZATION_FAILURE: [u8; 5] = *b"40001";
const DEADLOCK_DETECTED: [u8; 5] = *b"40P01";
/// After the end of the run, how long in-flight transactions may take before
/// their connections are closed (a server stalled at the very end).
const END_GRACE: Duration = Duration::from_secs(10);
/// The driver is "client-bound" above this share of the CPU it was given.
pub const CLIENT_BOUND_CPU_SHARE: f64 = 0.8;
/// Longest sleep of a waiting client, so that a stop is seen promptly.
const MAX_SLEEP: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct TpcbConfig {
    pub conninfo: String,
    pub script: Script,
    pub scale: u32,
    pub clients: u32,
    pub threads: u32,
    pub protocol: Protocol,
    /// Measured duration (after warmup); exclusive with transactions_per_client.
    pub duration_s: Option<f64>,
    /// Measured transactions per client (pgbench -t).
    pub transactions_per_client: Option<u64>,
    pub warmup_s: f64,
    /// Target total rate in transactions per second (open loop).
    pub rate_tps: Option<f64>,
    pub latency_limit_us: Option<u64>,
    /// Tries per transaction on serialization failure or deadlock (1 = no retry).
    pub max_tries: u32,
    pub seed: u64,
    /// The run's origin on CLOCK_MONOTONIC, in ns (Python's time.monotonic_ns()).
    pub t0_ns: u64,
    /// Socket I/O of the measured round trips: epoll, or batched io_uring.
    pub io: IoChoice,
}

impl TpcbConfig {
    pub fn validate(&self) -> Result<(), DriverError> {
        let bad = |m: String| Err(DriverError::Config(m));
        if self.scale == 0 {
            return bad("scale must be at least 1".into());
        }
        if self.clients == 0 {
            return bad("clients must be at least 1".into());
        }
        if self.threads == 0 || self.threads > self.clients {
            return bad(format!(
                "threads = {} is not allowed; allowed: 1..={} (at most one thread per client)",
                self.threads, self.clients
            ));
        }
        match (self.duration_s, self.transactions_per_client) {
            (Some(_), Some(_)) => {
                return bad("give duration or transactions, not both".into());
            }
            (None, None) => return bad("give a duration or a number of transactions".into()),
            (Some(d), None) if d.is_nan() || d <= 0.0 => {
                return bad(format!("duration {d} s must be > 0"))
            }
            (None, Some(0)) => return bad("transactions must be at least 1".into()),
            _ => {}
        }
        if self.warmup_s.is_nan() || self.warmup_s < 0.0 {
            return bad(format!("warmup {} s must be >= 0", self.warmup_s));
        }
        if let Some(rate) = self.rate_tps {
            if rate.is_nan() || rate <= 0.0 {
                return bad(format!("rate {rate} tx/s must be > 0"));
            }
        }
        if self.max_tries == 0 {
            return bad("max_tries must be at least 1".into());
        }
        Ok(())
    }
}

/// One second of the run, for the live display and the series.
#[derive(Debug, Clone, Default)]
pub struct IntervalReport {
    /// End of the interval, seconds since t0 on CLOCK_MONOTONIC.
    pub t_s: f64,
    pub interval_s: f64,
    /// True while the warm-up runs (not part of any figure).
    pub warmup: bool,
    pub transactions: u64,
    pub tps: f64,
    pub latency_mean_ms: f64,
    pub latency_p99_ms: f64,
    pub failed: u64,
    pub skipped: u64,
    pub lag_mean_ms: f64,
    pub clients_running: u32,
}

#[derive(Debug, Clone)]
pub struct EngineEvent {
    pub t_s: f64,
    pub kind: String,
    pub message: String,
}

/// Everything a run measured (the measured window only: warm-up excluded).
#[derive(Clone)]
pub struct TpcbSummary {
    /// Committed transactions.
    pub transactions: u64,
    /// Transactions that ended in an error (after any retries).
    pub failed: u64,
    pub skipped: u64,
    pub late: u64,
    pub retries: u64,
    pub retried: u64,
    pub errors_by_sqlstate: BTreeMap<String, u64>,
    /// Seconds from the end of warm-up to the last measured completion.
    pub measured_s: f64,
    pub tps: f64,
    pub latency: LatencyHistogram,
    pub lag: LatencyHistogram,
    pub failed_latency: LatencyHistogram,
    pub clients: u32,
    pub threads: u32,
    pub lost_connections: u32,
    /// Sum over clients of the time to connect (and prepare), and the wall
    /// time of the whole connection phase.
    pub connect_total_s: f64,
    pub connect_max_s: f64,
    pub connect_phase_s: f64,
    /// CPU time of the driver's worker threads during the measured window.
    pub driver_cpu_s: f64,
    /// CPU time of the whole process during the window (includes Python).
    pub process_cpu_s: f64,
    /// CPU the driver could use: measured_s x min(threads, cores).
    pub cpu_given_s: f64,
    pub client_bound: bool,
    pub series: Vec<IntervalReport>,
    pub events: Vec<EngineEvent>,
    /// Measured window start, seconds since t0.
    pub measure_start_t_s: f64,
    /// The socket I/O the run used, in words ("io_uring (batched submission)").
    pub io: String,
    /// io_uring_enter calls per committed transaction (0 under epoll).
    pub io_enters_per_tx: f64,
}

impl TpcbSummary {
    pub fn latency_summary(&self) -> LatencySummary {
        self.latency.summary()
    }
}

#[derive(Debug)]
pub enum DriverError {
    Config(String),
    /// No run happened: a client could not connect or prepare.
    Connect(String),
    Interrupted,
}

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DriverError::Config(m) => f.write_str(m),
            DriverError::Connect(m) => f.write_str(m),
            DriverError::Interrupted => f.write_str("run interrupted"),
        }
    }
}

impl std::error::Error for DriverError {}

#[derive(Default, Clone, Copy)]
struct Counters {
    ok: u64,
    failed: u64,
    skipped: u64,
    late: u64,
    retries: u64,
    retried: u64,
    latency_sum_us: u64,
    lag_sum_us: u64,
    lag_count: u64,
}

struct ThreadStats {
    total: Counters,
    latency: LatencyHistogram,
    lag: LatencyHistogram,
    failed_latency: LatencyHistogram,
    errors_by_sqlstate: BTreeMap<[u8; 5], u64>,
    last_completion: Option<Instant>,
    interval: Counters,
    interval_latency: LatencyHistogram,
    events: Vec<(Instant, String, String)>,
    lost_connections: u32,
    connect_total_s: f64,
    connect_max_s: f64,
    connect_error: Option<String>,
    clients_running: u32,
    cpu_at_go_s: f64,
    cpu_at_end_s: Option<f64>,
}

impl ThreadStats {
    fn new() -> Self {
        ThreadStats {
            total: Counters::default(),
            latency: LatencyHistogram::new(),
            lag: LatencyHistogram::new(),
            failed_latency: LatencyHistogram::new(),
            errors_by_sqlstate: BTreeMap::new(),
            last_completion: None,
            interval: Counters::default(),
            interval_latency: LatencyHistogram::new(),
            events: Vec::new(),
            lost_connections: 0,
            connect_total_s: 0.0,
            connect_max_s: 0.0,
            connect_error: None,
            clients_running: 0,
            cpu_at_go_s: 0.0,
            cpu_at_end_s: None,
        }
    }
}

#[derive(Clone, Copy)]
struct Timing {
    start: Instant,
    measure_from: Instant,
    end: Option<Instant>,
}

struct Shared {
    cfg: TpcbConfig,
    statements: Vec<Statement>,
    info: ConnInfo,
    stop: AtomicBool,
    abort: AtomicBool,
    fds: Mutex<HashSet<RawFd>>,
    stats: Vec<Mutex<ThreadStats>>,
    cpu_clocks: Mutex<Vec<Option<libc::clockid_t>>>,
    connected: Barrier,
    go: Barrier,
    timing: OnceLock<Timing>,
    workers_done: AtomicUsize,
    /// Instant <-> CLOCK_MONOTONIC: the same clock, different origins.
    clock_base: (Instant, u64),
    io: IoMethod,
    /// io_uring_enter calls of all worker threads.
    io_enters: AtomicUsize,
}

impl Shared {
    /// CLOCK_MONOTONIC ns of an Instant (the same clock, another origin).
    fn monotonic_ns_at(&self, at: Instant) -> u64 {
        let (base_instant, base_ns) = self.clock_base;
        if at >= base_instant {
            base_ns + (at - base_instant).as_nanos() as u64
        } else {
            base_ns.saturating_sub((base_instant - at).as_nanos() as u64)
        }
    }

    fn t_s(&self, at: Instant) -> f64 {
        (self.monotonic_ns_at(at) as i128 - self.cfg.t0_ns as i128) as f64 / 1e9
    }

    fn close_all_sockets(&self) {
        for &fd in self.fds.lock().unwrap().iter() {
            // SAFETY: fds holds only sockets still owned by live clients
            // (a client removes its fd under this lock before closing it).
            unsafe {
                libc::shutdown(fd, libc::SHUT_RDWR);
            }
        }
    }
}

fn clock_s(clock: libc::clockid_t) -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
}

/// CLOCK_MONOTONIC in ns: the clock of `t0_ns` and of Python's time.monotonic_ns().
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn thread_cpu_clock() -> Option<libc::clockid_t> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: pthread_self() is the calling thread; clock is a valid out-pointer.
    let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
    (rc == 0).then_some(clock)
}

/// What `TpcbRun::next_progress` returns.
pub enum Progress {
    Interval(IntervalReport),
    Pending,
    Finished,
}

/// A run in progress. Poll `next_progress`, then `join`.
pub struct TpcbRun {
    shared: Arc<Shared>,
    coordinator: Option<JoinHandle<Result<TpcbSummary, DriverError>>>,
    progress: Mutex<mpsc::Receiver<IntervalReport>>,
}

impl TpcbRun {
    pub fn start(cfg: TpcbConfig) -> Result<TpcbRun, DriverError> {
        cfg.validate()?;
        let info =
            ConnInfo::parse(&cfg.conninfo).map_err(|e| DriverError::Config(e.to_string()))?;
        let threads = cfg.threads as usize;
        let io = uring::choose_io(cfg.io, uring::AUTO_PREFERS_URING, uring::probe)
            .map_err(DriverError::Config)?;
        let shared = Arc::new(Shared {
            statements: compile_script(cfg.script),
            info,
            stop: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            fds: Mutex::new(HashSet::new()),
            stats: (0..threads)
                .map(|_| Mutex::new(ThreadStats::new()))
                .collect(),
            cpu_clocks: Mutex::new(vec![None; threads]),
            connected: Barrier::new(threads + 1),
            go: Barrier::new(threads + 1),
            timing: OnceLock::new(),
            workers_done: AtomicUsize::new(0),
            clock_base: (Instant::now(), monotonic_ns()),
            io,
            io_enters: AtomicUsize::new(0),
            cfg,
        });
        let (tx, rx) = mpsc::channel();
        let coordinator_shared = shared.clone();
        let coordinator = std::thread::Builder::new()
            .name("perflab-tpcb".into())
            .spawn(move || coordinate(coordinator_shared, tx))
            .map_err(|e| DriverError::Config(format!("cannot start a thread: {e}")))?;
        Ok(TpcbRun {
            shared,
            coordinator: Some(coordinator),
            progress: Mutex::new(rx),
        })
    }

    /// Wait up to `timeout` for the next per-second report.
    pub fn next_progress(&self, timeout: Duration) -> Progress {
        match self.progress.lock().unwrap().recv_timeout(timeout) {
            Ok(report) => Progress::Interval(report),
            Err(mpsc::RecvTimeoutError::Timeout) => Progress::Pending,
            Err(mpsc::RecvTimeoutError::Disconnected) => Progress::Finished,
        }
    }

    /// Stop now: no new transactions, every connection closed.
    pub fn abort(&self) {
        self.shared.abort.store(true, Ordering::SeqCst);
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.close_all_sockets();
    }

    pub fn join(mut self) -> Result<TpcbSummary, DriverError> {
        let handle = self.coordinator.take().expect("joined once");
        match handle.join() {
            Ok(result) => result,
            Err(_) => Err(DriverError::Config(
                "the driver's coordinator panicked".into(),
            )),
        }
    }

    /// Run to the end with no progress display (for tests and Rust callers).
    pub fn run(cfg: TpcbConfig) -> Result<TpcbSummary, DriverError> {
        let run = TpcbRun::start(cfg)?;
        while !matches!(
            run.next_progress(Duration::from_secs(3600)),
            Progress::Finished
        ) {}
        run.join()
    }
}

impl Drop for TpcbRun {
    fn drop(&mut self) {
        if let Some(handle) = self.coordinator.take() {
            self.abort();
            let _ = handle.join();
        }
    }
}

fn coordinate(
    shared: Arc<Shared>,
    progress: mpsc::Sender<IntervalReport>,
) -> Result<TpcbSummary, DriverError> {
    let cfg = &shared.cfg;
    let threads = cfg.threads as usize;
    let connect_started = Instant::now();
    let mut workers = Vec::with_capacity(threads);
    for thread_index in 0..threads {
        // Clients round-robin over threads, as pgbench distributes them.
        let clients: Vec<u32> = (0..cfg.clients)
            .filter(|c| *c as usize % threads == thread_index)
            .collect();
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("perflab-tpcb-{thread_index}"))
            .spawn(move || worker(s, thread_index, clients));
        match spawned {
            Ok(handle) => workers.push(handle),
            Err(e) => {
                // Workers already started wait at the barrier: release them.
                shared.abort.store(true, Ordering::SeqCst);
                return Err(DriverError::Config(format!("cannot start a thread: {e}")));
            }
        }
    }
    shared.connected.wait();
    let connect_phase_s = connect_started.elapsed().as_secs_f64();
    let connect_error = shared
        .stats
        .iter()
        .find_map(|s| s.lock().unwrap().connect_error.clone());
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(cfg.warmup_s);
    let timing = Timing {
        start,
        measure_from,
        end: cfg
            .duration_s
            .map(|d| measure_from + Duration::from_secs_f64(d)),
    };
    let _ = shared.timing.set(timing);
    if connect_error.is_some() || shared.abort.load(Ordering::SeqCst) {
        shared.abort.store(true, Ordering::SeqCst);
        shared.stop.store(true, Ordering::SeqCst);
        shared.go.wait();
        for w in workers {
            let _ = w.join();
        }
        return Err(match connect_error {
            Some(e) => DriverError::Connect(e),
            None => DriverError::Interrupted,
        });
    }
    let mut process_cpu_from = clock_s(libc::CLOCK_PROCESS_CPUTIME_ID).unwrap_or(0.0);
    shared.go.wait();

    // Thread CPU at the start of the measured window; with a warm-up, read
    // each worker's clock from here when the window opens.
    let mut thread_cpu_from: Option<Vec<Option<f64>>> = None;
    let mut last_tick = start;
    let mut stop_seen: Option<Instant> = None;
    let mut sockets_closed = false;
    let mut series = Vec::new();
    let mut coordinator_events: Vec<(Instant, String, String)> = Vec::new();
    loop {
        let now = Instant::now();
        if thread_cpu_from.is_none() && cfg.warmup_s > 0.0 && now >= measure_from {
            let clocks = shared.cpu_clocks.lock().unwrap().clone();
            thread_cpu_from = Some(clocks.iter().map(|c| c.and_then(clock_s)).collect());
            process_cpu_from = clock_s(libc::CLOCK_PROCESS_CPUTIME_ID).unwrap_or(0.0);
        }
        if now >= last_tick + Duration::from_secs(1) {
            last_tick += Duration::from_secs(1);
            let report = cut_interval(&shared, last_tick, measure_from);
            if !report.warmup {
                series.push(report.clone());
            }
            let _ = progress.send(report);
        }
        if let Some(end) = timing.end {
            if now >= end {
                shared.stop.store(true, Ordering::SeqCst);
            }
        }
        if shared.stop.load(Ordering::SeqCst) && stop_seen.is_none() {
            stop_seen = Some(now);
        }
        if shared.abort.load(Ordering::SeqCst) && !sockets_closed {
            shared.close_all_sockets();
            sockets_closed = true;
        }
        if let Some(seen) = stop_seen {
            if !sockets_closed && now >= seen + END_GRACE {
                coordinator_events.push((
                    now,
                    "abandoned".into(),
                    format!(
                        "transactions still in flight {} s after the end; their connections were closed",
                        END_GRACE.as_secs()
                    ),
                ));
                shared.close_all_sockets();
                sockets_closed = true;
            }
        }
        if shared.workers_done.load(Ordering::SeqCst) == threads {
            break;
        }
        let next_tick = last_tick + Duration::from_secs(1);
        let wait = next_tick
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(20));
        std::thread::sleep(wait);
    }
    for w in workers {
        let _ = w.join();
    }
    let process_cpu_s = clock_s(libc::CLOCK_PROCESS_CPUTIME_ID).unwrap_or(0.0) - process_cpu_from;
    if shared.abort.load(Ordering::SeqCst) {
        return Err(DriverError::Interrupted);
    }
    Ok(summarise(
        &shared,
        timing,
        connect_phase_s,
        thread_cpu_from,
        process_cpu_s,
        series,
        coordinator_events,
    ))
}

fn cut_interval(shared: &Shared, tick: Instant, measure_from: Instant) -> IntervalReport {
    let mut c = Counters::default();
    let mut latency = LatencyHistogram::new();
    let mut running = 0;
    for s in &shared.stats {
        let mut s = s.lock().unwrap();
        let i = std::mem::take(&mut s.interval);
        c.ok += i.ok;
        c.failed += i.failed;
        c.skipped += i.skipped;
        c.latency_sum_us += i.latency_sum_us;
        c.lag_sum_us += i.lag_sum_us;
        c.lag_count += i.lag_count;
        latency.merge(&s.interval_latency);
        s.interval_latency.reset();
        running += s.clients_running;
    }
    let ms = |sum_us: u64, n: u64| {
        if n == 0 {
            0.0
        } else {
            sum_us as f64 / n as f64 / 1000.0
        }
    };
    IntervalReport {
        t_s: shared.t_s(tick),
        interval_s: 1.0,
        warmup: tick <= measure_from,
        transactions: c.ok,
        tps: c.ok as f64,
        latency_mean_ms: ms(c.latency_sum_us, c.ok),
        latency_p99_ms: latency.value_at_quantile_us(0.99) as f64 / 1000.0,
        failed: c.failed,
        skipped: c.skipped,
        lag_mean_ms: ms(c.lag_sum_us, c.lag_count),
        clients_running: running,
    }
}

fn summarise(
    shared: &Shared,
    timing: Timing,
    connect_phase_s: f64,
    thread_cpu_from: Option<Vec<Option<f64>>>,
    process_cpu_s: f64,
    series: Vec<IntervalReport>,
    coordinator_events: Vec<(Instant, String, String)>,
) -> TpcbSummary {
    let cfg = &shared.cfg;
    let mut total = Counters::default();
    let mut latency = LatencyHistogram::new();
    let mut lag = LatencyHistogram::new();
    let mut failed_latency = LatencyHistogram::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut last_completion = timing.measure_from;
    let mut events = Vec::new();
    let mut lost = 0;
    let (mut connect_total_s, mut connect_max_s) = (0.0, 0.0f64);
    let mut driver_cpu_s = 0.0;
    for (index, s) in shared.stats.iter().enumerate() {
        let s = s.lock().unwrap();
        let t = s.total;
        total.ok += t.ok;
        total.failed += t.failed;
        total.skipped += t.skipped;
        total.late += t.late;
        total.retries += t.retries;
        total.retried += t.retried;
        latency.merge(&s.latency);
        lag.merge(&s.lag);
        failed_latency.merge(&s.failed_latency);
        for (state, n) in &s.errors_by_sqlstate {
            *errors
                .entry(String::from_utf8_lossy(state).into_owned())
                .or_default() += n;
        }
        if let Some(done) = s.last_completion {
            last_completion = last_completion.max(done);
        }
        lost += s.lost_connections;
        connect_total_s += s.connect_total_s;
        connect_max_s = connect_max_s.max(s.connect_max_s);
        let from = match &thread_cpu_from {
            Some(samples) => samples[index].unwrap_or(s.cpu_at_end_s.unwrap_or(0.0)),
            None => s.cpu_at_go_s,
        };
        driver_cpu_s += (s.cpu_at_end_s.unwrap_or(from) - from).max(0.0);
        events.extend(s.events.iter().cloned());
    }
    events.extend(coordinator_events);
    events.sort_by_key(|e| e.0);
    let measured_s = match timing.end {
        Some(end) => last_completion.max(end),
        None => last_completion,
    }
    .saturating_duration_since(timing.measure_from)
    .as_secs_f64();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as f64;
    let cpu_given_s = measured_s * (cfg.threads as f64).min(cores);
    TpcbSummary {
        transactions: total.ok,
        failed: total.failed,
        skipped: total.skipped,
        late: total.late,
        retries: total.retries,
        retried: total.retried,
        errors_by_sqlstate: errors,
        measured_s,
        tps: if measured_s > 0.0 {
            total.ok as f64 / measured_s
        } else {
            0.0
        },
        latency,
        lag,
        failed_latency,
        clients: cfg.clients,
        threads: cfg.threads,
        lost_connections: lost,
        connect_total_s,
        connect_max_s,
        connect_phase_s,
        driver_cpu_s,
        process_cpu_s,
        cpu_given_s,
        client_bound: cpu_given_s > 0.0 && driver_cpu_s > CLIENT_BOUND_CPU_SHARE * cpu_given_s,
        series,
        events: events
            .into_iter()
            .map(|(at, kind, message)| EngineEvent {
                t_s: shared.t_s(at),
                kind,
                message,
            })
            .collect(),
        measure_start_t_s: shared.t_s(timing.measure_from),
        io: shared.io.describe(),
        io_enters_per_tx: if total.ok > 0 {
            shared.io_enters.load(Ordering::SeqCst) as f64 / total.ok as f64
        } else {
            0.0
        },
    }
}

/// Per-thread state shared by the thread's clients (one runtime thread: no locks).
struct ThreadCtx {
    shared: Arc<Shared>,
    index: usize,
    timing: Timing,
    /// The thread's next scheduled start under a rate (pgbench's throttle_trigger).
    throttle_trigger: Cell<Instant>,
    /// Mean gap between scheduled starts of this thread, in seconds.
    throttle_gap_s: f64,
    schedule_rng: std::cell::RefCell<Prng>,
}

fn worker(shared: Arc<Shared>, index: usize, clients: Vec<u32>) {
    shared.cpu_clocks.lock().unwrap()[index] = thread_cpu_clock();
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    if shared.io.is_uring() {
        // The batching point: what this tick's clients queued goes to the
        // kernel in one io_uring_enter, as the runtime is about to sleep.
        builder.on_thread_park(uring::submit_thread_ring);
    }
    let runtime = builder.build();
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            shared.stats[index].lock().unwrap().connect_error =
                Some(format!("cannot start the driver runtime: {e}"));
            shared.connected.wait();
            shared.go.wait();
            shared.workers_done.fetch_add(1, Ordering::SeqCst);
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let mut connecting = Vec::new();
        for client in clients {
            let s = shared.clone();
            connecting.push(tokio::task::spawn_local(async move {
                let started = Instant::now();
                let result = connect_client(&s).await;
                (client, result, started.elapsed().as_secs_f64())
            }));
        }
        let mut conns = Vec::new();
        for handle in connecting {
            let (client, result, seconds) = handle.await.expect("connect task");
            let mut stats = shared.stats[index].lock().unwrap();
            stats.connect_total_s += seconds;
            stats.connect_max_s = stats.connect_max_s.max(seconds);
            match result {
                Ok(conn) => {
                    shared.fds.lock().unwrap().insert(conn.raw_fd());
                    conns.push((client, conn));
                }
                Err(e) => {
                    if stats.connect_error.is_none() {
                        stats.connect_error = Some(e.to_string());
                    }
                }
            }
        }
        shared.stats[index].lock().unwrap().clients_running = conns.len() as u32;
        // Blocking here is fine: this thread's clients are all idle.
        shared.connected.wait();
        shared.go.wait();
        shared.stats[index].lock().unwrap().cpu_at_go_s =
            clock_s(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0.0);
        if shared.abort.load(Ordering::SeqCst) {
            let mut fds = shared.fds.lock().unwrap();
            for (_, conn) in &conns {
                fds.remove(&conn.raw_fd());
            }
            return;
        }
        let timing = *shared.timing.get().expect("timing is set before go");
        let cfg = &shared.cfg;
        let ctx = Rc::new(ThreadCtx {
            shared: shared.clone(),
            index,
            timing,
            throttle_trigger: Cell::new(timing.start),
            throttle_gap_s: cfg
                .rate_tps
                .map(|rate| cfg.threads as f64 / rate)
                .unwrap_or(0.0),
            schedule_rng: std::cell::RefCell::new(Prng::seeded(
                cfg.seed ^ (0x5EED_0000 + index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            )),
        });
        let mut conns = conns;
        let mut reaper = None;
        let mut ring_used = None;
        if shared.io.is_uring() {
            match Ring::new(conns.len()) {
                Ok(ring) => {
                    for (_, conn) in conns.iter_mut() {
                        // Cannot fail: each connection switches once.
                        let _ = conn.use_ring(ring.clone());
                    }
                    uring::set_thread_ring(Some(ring.clone()));
                    reaper = Some(tokio::task::spawn_local(ring.clone().reap_forever()));
                    ring_used = Some(ring);
                }
                Err(why) => {
                    // The probe worked, this thread's ring did not: run on epoll.
                    shared.stats[index].lock().unwrap().events.push((
                        Instant::now(),
                        "io-fallback".into(),
                        format!("thread {index}: io_uring ring not set up ({why}); using epoll"),
                    ));
                }
            }
        }
        let mut running = Vec::new();
        for (client, conn) in conns {
            running.push(tokio::task::spawn_local(client_loop(
                ctx.clone(),
                conn,
                client,
            )));
        }
        for handle in running {
            let _ = handle.await;
        }
        if let Some(reaper) = reaper {
            reaper.abort();
        }
        uring::set_thread_ring(None);
        if let Some(ring) = ring_used {
            shared
                .io_enters
                .fetch_add(ring.enters() as usize, Ordering::SeqCst);
        }
    });
    shared.stats[index].lock().unwrap().cpu_at_end_s = clock_s(libc::CLOCK_THREAD_CPUTIME_ID);
    shared.workers_done.fetch_add(1, Ordering::SeqCst);
}

async fn connect_client(shared: &Shared) -> Result<PgConn, PgError> {
    let attempt = async {
        let mut conn = PgConn::connect(&shared.info).await?;
        if shared.cfg.protocol == Protocol::Prepared {
            for st in &shared.statements {
                conn.put_parse(&st.prepared_name, &st.positional_sql);
            }
            conn.put_sync();
            if let Some(err) = conn.round_trip().await? {
                return Err(PgError::Connect(format!(
                    "preparing the {} statements failed: {err} (is the data loaded?)",
                    shared.cfg.script.name()
                )));
            }
        }
        Ok(conn)
    };
    let watch_abort = async {
        while !shared.abort.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::select! {
        result = attempt => result,
        _ = watch_abort => Err(PgError::Connect("interrupted".into())),
    }
}

enum TxOutcome {
    Committed,
    Failed([u8; 5]),
    Lost(String),
}

/// Send one statement of the script and wait for its ReadyForQuery.
async fn execute_statement(
    conn: &mut PgConn,
    st: &Statement,
    protocol: Protocol,
    draws: &Draws,
    scratch: &mut Vec<u8>,
) -> Result<Option<crate::pg::SqlError>, PgError> {
    let mut values = [0i64; 4];
    for (slot, var) in values.iter_mut().zip(&st.params) {
        *slot = draws.get(*var);
    }
    let values = &values[..st.params.len()];
    match protocol {
        Protocol::Simple => {
            scratch.clear();
            st.write_simple(draws, scratch);
            conn.put_query_bytes(scratch);
        }
        Protocol::Extended => {
            conn.put_parse("", &st.positional_sql);
            conn.put_bind_i64("", values);
            conn.put_execute();
            conn.put_sync();
        }
        Protocol::Prepared => {
            conn.put_bind_i64(&st.prepared_name, values);
            conn.put_execute();
            conn.put_sync();
        }
    }
    conn.round_trip().await
}

/// One try of the whole script; stops at the first error as pgbench does.
async fn try_script(
    conn: &mut PgConn,
    shared: &Shared,
    draws: &Draws,
    scratch: &mut Vec<u8>,
) -> Result<Option<crate::pg::SqlError>, PgError> {
    for st in &shared.statements {
        if let Some(err) = execute_statement(conn, st, shared.cfg.protocol, draws, scratch).await? {
            if conn.tx_status != b'I' {
                // Leave the failed transaction block before anything else.
                conn.put_query("ROLLBACK");
                conn.round_trip().await?;
            }
            return Ok(Some(err));
        }
    }
    Ok(None)
}

/// A client's wake-up clock for scheduled starts: a timerfd on CLOCK_MONOTONIC.
///
/// tokio's timer wakes on whole milliseconds (epoll_wait's timeout), which put
/// 0.5-1 ms of schedule lag, and so of latency from the intended start, on
/// every open-loop transaction (measured: mean lag 1.17 ms at 500 tx/s on an
/// idle server). A timerfd armed at the absolute deadline wakes within the
/// kernel's timer slack (50 µs by default), as pgbench's ppoll timeout does.
struct ScheduleTimer {
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
}

impl ScheduleTimer {
    fn new() -> std::io::Result<ScheduleTimer> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain syscall; the result is checked before use.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new fd that nothing else owns.
        let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        // SAFETY: the OwnedFd lives inside the AsyncFd and its fd never changes.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE)
        }
        .map_err(|e| e.into_parts().1)?;
        Ok(ScheduleTimer { fd })
    }

    /// Wait until CLOCK_MONOTONIC reaches `deadline_ns`.
    async fn wait_until_ns(&self, deadline_ns: u64) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
            },
        };
        let fd = self.fd.get_ref().as_raw_fd();
        // SAFETY: valid timerfd and itimerspec; the old value is not wanted.
        let rc = unsafe {
            libc::timerfd_settime(fd, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        loop {
            let mut guard = self.fd.readable().await?;
            let mut expirations = [0u8; 8];
            let read = guard.try_io(|inner| {
                // SAFETY: reads 8 bytes into a local buffer from a valid fd.
                let n = unsafe {
                    libc::read(
                        inner.get_ref().as_raw_fd(),
                        expirations.as_mut_ptr().cast(),
                        8,
                    )
                };
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match read {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }
}

/// Sleep until `until`, waking at least every MAX_SLEEP to see a stop.
/// Returns false when the run stopped meanwhile.
async fn sleep_until(shared: &Shared, timer: Option<&ScheduleTimer>, until: Instant) -> bool {
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        let wake = until.min(now + MAX_SLEEP);
        let precise = match timer {
            Some(timer) => timer
                .wait_until_ns(shared.monotonic_ns_at(wake))
                .await
                .is_ok(),
            None => false,
        };
        if !precise {
            // No timerfd: tokio's millisecond timer.
            tokio::time::sleep_until(tokio::time::Instant::from_std(wake)).await;
        }
    }
}

/// The thread's next scheduled start under a rate (pgbench's throttle): one
/// exponential gap after the previous slot. With a latency limit, slots that
/// are already more than the limit behind `now` are skipped, as pgbench -L
/// does; returns the slot and how many measured slots were skipped.
fn next_scheduled_start(
    previous: Instant,
    gap_mean_s: f64,
    rng: &mut Prng,
    now: Instant,
    latency_limit: Option<Duration>,
    timing: Timing,
) -> (Instant, u64) {
    let mut slot = previous + Duration::from_secs_f64(rng.exponential_gap(gap_mean_s));
    let mut skipped = 0;
    if let Some(limit) = latency_limit {
        while slot + limit < now && timing.end.is_none_or(|end| slot < end) {
            if slot >= timing.measure_from {
                skipped += 1;
            }
            slot += Duration::from_secs_f64(rng.exponential_gap(gap_mean_s));
        }
    }
    (slot, skipped)
}

async fn client_loop(ctx: Rc<ThreadCtx>, mut conn: PgConn, client: u32) {
    let shared = ctx.shared.clone();
    let cfg = &shared.cfg;
    let timing = ctx.timing;
    let fd = conn.raw_fd();
    let mut rng = Prng::seeded(cfg.seed ^ (client as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut scratch = Vec::with_capacity(256);
    // Made on the first scheduled start; None inside when timerfd is unavailable.
    let mut schedule_timer: Option<Option<ScheduleTimer>> = None;
    let mut measured_done: u64 = 0;
    let limit = cfg.latency_limit_us.map(Duration::from_micros);
    let lost_message: Option<String> = 'run: loop {
        if shared.stop.load(Ordering::Relaxed) {
            break None;
        }
        // When this transaction is meant to start.
        let intended = if cfg.rate_tps.is_some() {
            let (trigger, skipped) = next_scheduled_start(
                ctx.throttle_trigger.get(),
                ctx.throttle_gap_s,
                &mut ctx.schedule_rng.borrow_mut(),
                Instant::now(),
                limit,
                timing,
            );
            ctx.throttle_trigger.set(trigger);
            if skipped > 0 {
                let mut stats = shared.stats[ctx.index].lock().unwrap();
                stats.total.skipped += skipped;
                stats.interval.skipped += skipped;
                measured_done += skipped;
            }
            if timing.end.is_some_and(|end| trigger >= end) {
                break None;
            }
            if let Some(n) = cfg.transactions_per_client {
                if measured_done >= n {
                    break None;
                }
            }
            if schedule_timer.is_none() {
                schedule_timer = Some(ScheduleTimer::new().ok());
            }
            let timer = schedule_timer.as_ref().and_then(|t| t.as_ref());
            if !sleep_until(&shared, timer, trigger).await {
                break None;
            }
            trigger
        } else {
            let now = Instant::now();
            if timing.end.is_some_and(|end| now >= end) {
                break None;
            }
            now
        };
        let draws = Draws::draw(cfg.script, cfg.scale, &mut rng);
        let started = Instant::now();
        let mut tries = 0;
        let outcome = loop {
            tries += 1;
            match try_script(&mut conn, &shared, &draws, &mut scratch).await {
                Ok(None) => break TxOutcome::Committed,
                Ok(Some(err)) => {
                    let retryable =
                        err.sqlstate == SERIALIZATION_FAILURE || err.sqlstate == DEADLOCK_DETECTED;
                    if retryable && tries < cfg.max_tries && !shared.stop.load(Ordering::Relaxed) {
                        continue;
                    }
                    break TxOutcome::Failed(err.sqlstate);
                }
                Err(e) => break TxOutcome::Lost(e.to_string()),
            }
        };
        let done = Instant::now();
        let measured = intended >= timing.measure_from;
        let latency_us = (done - intended).as_micros() as u64;
        let lag_us = (started - intended).as_micros() as u64;
        {
            let mut stats = shared.stats[ctx.index].lock().unwrap();
            let retries = (tries - 1) as u64;
            match outcome {
                TxOutcome::Committed => {
                    stats.interval.ok += 1;
                    stats.interval.latency_sum_us += latency_us;
                    stats.interval_latency.record_us(latency_us);
                    if measured {
                        stats.total.ok += 1;
                        stats.latency.record_us(latency_us);
                        if limit.is_some_and(|l| done - intended > l) {
                            stats.total.late += 1;
                        }
                    }
                }
                TxOutcome::Failed(state) => {
                    stats.interval.failed += 1;
                    if measured {
                        stats.total.failed += 1;
                        stats.failed_latency.record_us(latency_us);
                        *stats.errors_by_sqlstate.entry(state).or_default() += 1;
                    }
                }
                TxOutcome::Lost(ref message) => {
                    if !shared.abort.load(Ordering::Relaxed) {
                        stats.lost_connections += 1;
                        stats.events.push((
                            done,
                            "lost-connection".into(),
                            format!("client {client}: {message}"),
                        ));
                    }
                    stats.clients_running -= 1;
                    stats.last_completion =
                        Some(stats.last_completion.map_or(done, |l| l.max(done)));
                    break 'run Some(message.clone());
                }
            }
            if cfg.rate_tps.is_some() {
                stats.interval.lag_sum_us += lag_us;
                stats.interval.lag_count += 1;
                if measured {
                    stats.lag.record_us(lag_us);
                }
            }
            if measured {
                stats.total.retries += retries;
                if retries > 0 {
                    stats.total.retried += 1;
                }
                stats.last_completion = Some(done);
            }
        }
        if measured {
            measured_done += 1;
            if cfg
                .transactions_per_client
                .is_some_and(|n| measured_done >= n)
            {
                break None;
            }
        }
    };
    if lost_message.is_none() {
        shared.stats[ctx.index].lock().unwrap().clients_running -= 1;
    }
    shared.fds.lock().unwrap().remove(&fd);
    if lost_message.is_none() {
        conn.terminate();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing_from(start: Instant) -> Timing {
        Timing {
            start,
            measure_from: start,
            end: None,
        }
    }

    #[test]
    fn schedule_gaps_average_the_requested_rate() {
        let start = Instant::now();
        let mut rng = Prng::seeded(11);
        let mut slot = start;
        let n = 50_000;
        for _ in 0..n {
            // A client that is never late: `now` is the slot itself.
            let (next, skipped) =
                next_scheduled_start(slot, 0.001, &mut rng, slot, None, timing_from(start));
            assert_eq!(skipped, 0);
            assert!(next >= slot);
            slot = next;
        }
        let mean_gap_s = (slot - start).as_secs_f64() / n as f64;
        // 1000 tx/s: mean gap 1 ms; standard error 1 ms / sqrt(n) = 4.5 µs.
        assert!(
            (mean_gap_s - 0.001).abs() < 0.00003,
            "mean gap {mean_gap_s}"
        );
    }

    #[test]
    fn slots_later_than_the_latency_limit_are_skipped() {
        let start = Instant::now();
        let mut rng = Prng::seeded(5);
        // The client comes back 2 s late at 1000 tx/s with a 100 ms limit:
        // about 1900 slots are hopeless and skipped.
        let now = start + Duration::from_secs(2);
        let limit = Duration::from_millis(100);
        let (slot, skipped) =
            next_scheduled_start(start, 0.001, &mut rng, now, Some(limit), timing_from(start));
        assert!(slot + limit >= now, "the slot taken is within the limit");
        assert!((1700..2100).contains(&skipped), "skipped {skipped}");
        // Without a limit nothing is skipped: latency shows the stall instead.
        let (slot, skipped) =
            next_scheduled_start(start, 0.001, &mut rng, now, None, timing_from(start));
        assert_eq!(skipped, 0);
        assert!(slot < start + Duration::from_millis(50));
    }
}
