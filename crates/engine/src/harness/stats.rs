//! What the harness counts: per worker thread while the run goes (one
//! uncontended lock per transaction), merged into a per-second report and,
//! at the end, into one summary of the measured window.

use super::schedule::Timing;
use crate::hist::LatencyHistogram;
use std::collections::BTreeMap;
use std::time::Instant;

/// The driver is "client-bound" above this share of the CPU it was given.
pub const CLIENT_BOUND_CPU_SHARE: f64 = 0.8;

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
    /// Committed transactions of each type in this interval.
    pub transactions_by_type: Vec<u64>,
    /// This second's latency histogram, encoded, in a gated run (several
    /// drivers: their seconds merge exactly); None otherwise.
    pub latency_encoded: Option<Vec<u8>>,
    /// Scheduled transactions (open loop) whose lag this second's mean is of.
    pub lag_count: u64,
    /// io_uring_enter calls of all worker threads in this second (0 on epoll).
    pub io_enters: u64,
    /// Clients whose server process (`Protocol::server_pid`, on this
    /// machine) was sampled at the end of this second against their driver
    /// thread's pinned CPU, and of those, how many were on another CPU
    /// (0 and 0 when nothing is sampled: threads not pinned, or no pids).
    pub server_sampled: u32,
    pub server_off_cpu: u32,
}

#[derive(Debug, Clone)]
pub struct EngineEvent {
    pub t_s: f64,
    pub kind: String,
    pub message: String,
}

/// One transaction type's share of the measured window.
#[derive(Clone)]
pub struct TxTypeSummary {
    pub name: &'static str,
    pub committed: u64,
    /// Bytes of the response bodies its committed transactions received
    /// (protocols with `COUNTS_BODY_BYTES`: HTTP; else 0).
    pub body_bytes: u64,
    pub failed: u64,
    pub latency: LatencyHistogram,
}

/// Everything a run measured (the measured window only: warm-up excluded).
#[derive(Clone)]
pub struct RunSummary {
    /// Committed transactions.
    pub transactions: u64,
    /// Bytes of the response bodies the committed transactions received
    /// (protocols with `COUNTS_BODY_BYTES`: HTTP; else 0).
    pub body_bytes: u64,
    /// Transactions that ended in an error (after any retries).
    pub failed: u64,
    pub skipped: u64,
    pub late: u64,
    pub retries: u64,
    pub retried: u64,
    /// Failed transactions by the protocol's error kind (SQLSTATE, HTTP status).
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Seconds from the end of warm-up to the last measured completion.
    pub measured_s: f64,
    pub tps: f64,
    pub latency: LatencyHistogram,
    pub lag: LatencyHistogram,
    pub failed_latency: LatencyHistogram,
    pub by_type: Vec<TxTypeSummary>,
    /// Per operation type (`Protocol::TIMES_OPERATIONS`; else empty): the
    /// operations of the committed transactions (`committed` counts them,
    /// `failed` and `body_bytes` are 0).
    pub operations: Vec<TxTypeSummary>,
    pub clients: u32,
    pub threads: u32,
    pub lost_clients: u32,
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
    /// Server processes sampled once a second over the measured window
    /// against their client's pinned driver thread (`IntervalReport`), and
    /// how many samples found one on another CPU.
    pub server_sampled: u64,
    pub server_off_cpu: u64,
}

#[derive(Default, Clone, Copy)]
pub(crate) struct Counters {
    pub ok: u64,
    pub failed: u64,
    pub skipped: u64,
    pub late: u64,
    pub retries: u64,
    pub retried: u64,
    pub latency_sum_us: u64,
    pub lag_sum_us: u64,
    pub lag_count: u64,
    pub body_bytes: u64,
}

impl Counters {
    fn add(&mut self, o: &Counters) {
        self.ok += o.ok;
        self.failed += o.failed;
        self.skipped += o.skipped;
        self.late += o.late;
        self.retries += o.retries;
        self.retried += o.retried;
        self.latency_sum_us += o.latency_sum_us;
        self.lag_sum_us += o.lag_sum_us;
        self.lag_count += o.lag_count;
        self.body_bytes += o.body_bytes;
    }
}

/// Per transaction type, kept only when a protocol has more than one type
/// (with one, the totals are that type's figures).
pub(crate) struct TypeStats {
    pub committed: u64,
    pub body_bytes: u64,
    pub failed: u64,
    pub latency: LatencyHistogram,
    pub interval_committed: u64,
}

/// One worker thread's figures; the coordinator reads them under the lock.
pub(crate) struct ThreadStats {
    pub total: Counters,
    pub latency: LatencyHistogram,
    pub lag: LatencyHistogram,
    pub failed_latency: LatencyHistogram,
    pub by_type: Vec<TypeStats>,
    /// One histogram per operation type (empty unless the protocol times them).
    pub operations: Vec<LatencyHistogram>,
    pub errors_by_kind: BTreeMap<String, u64>,
    pub last_completion: Option<Instant>,
    pub interval: Counters,
    pub interval_latency: LatencyHistogram,
    pub events: Vec<(Instant, String, String)>,
    pub lost_clients: u32,
    pub connect_total_s: f64,
    pub connect_max_s: f64,
    pub connect_error: Option<String>,
    pub clients_running: u32,
    pub cpu_at_go_s: f64,
    pub cpu_at_end_s: Option<f64>,
}

impl ThreadStats {
    pub fn new(types: usize, operations: usize) -> Self {
        let per_type = if types > 1 { types } else { 0 };
        ThreadStats {
            total: Counters::default(),
            latency: LatencyHistogram::new(),
            lag: LatencyHistogram::new(),
            failed_latency: LatencyHistogram::new(),
            by_type: (0..per_type)
                .map(|_| TypeStats {
                    committed: 0,
                    body_bytes: 0,
                    failed: 0,
                    latency: LatencyHistogram::new(),
                    interval_committed: 0,
                })
                .collect(),
            operations: (0..operations).map(|_| LatencyHistogram::new()).collect(),
            errors_by_kind: BTreeMap::new(),
            last_completion: None,
            interval: Counters::default(),
            interval_latency: LatencyHistogram::new(),
            events: Vec::new(),
            lost_clients: 0,
            connect_total_s: 0.0,
            connect_max_s: 0.0,
            connect_error: None,
            clients_running: 0,
            cpu_at_go_s: 0.0,
            cpu_at_end_s: None,
        }
    }

    pub fn event(&mut self, at: Instant, kind: &str, message: String) {
        self.events.push((at, kind.to_string(), message));
    }
}

/// How one transaction ended, as the worker records it.
pub(crate) enum Outcome<'a> {
    Committed,
    Failed(&'a str),
}

/// One finished transaction, with its times.
pub(crate) struct Finished<'a> {
    pub tx: usize,
    pub outcome: Outcome<'a>,
    pub intended: Instant,
    pub started: Instant,
    pub done: Instant,
    pub tries: u32,
    /// Bytes of the response body received (0 unless the protocol counts them).
    pub body_bytes: u64,
    /// Scheduled (open loop): the lag counts.
    pub scheduled: bool,
    pub latency_limit: Option<std::time::Duration>,
    pub measure_from: Instant,
}

impl ThreadStats {
    /// Count one transaction: in the interval always, in the totals when it
    /// was meant to start inside the measured window.
    pub fn record(&mut self, f: Finished<'_>) {
        let measured = f.intended >= f.measure_from;
        let latency_us = (f.done - f.intended).as_micros() as u64;
        match f.outcome {
            Outcome::Committed => {
                self.interval.ok += 1;
                self.interval.latency_sum_us += latency_us;
                self.interval_latency.record_us(latency_us);
                if let Some(t) = self.by_type.get_mut(f.tx) {
                    t.interval_committed += 1;
                }
                if measured {
                    self.total.ok += 1;
                    self.total.body_bytes += f.body_bytes;
                    self.latency.record_us(latency_us);
                    if let Some(t) = self.by_type.get_mut(f.tx) {
                        t.committed += 1;
                        t.body_bytes += f.body_bytes;
                        t.latency.record_us(latency_us);
                    }
                    if f.latency_limit.is_some_and(|l| f.done - f.intended > l) {
                        self.total.late += 1;
                    }
                }
            }
            Outcome::Failed(kind) => {
                self.interval.failed += 1;
                if measured {
                    self.total.failed += 1;
                    self.failed_latency.record_us(latency_us);
                    if let Some(t) = self.by_type.get_mut(f.tx) {
                        t.failed += 1;
                    }
                    match self.errors_by_kind.get_mut(kind) {
                        Some(n) => *n += 1,
                        None => {
                            self.errors_by_kind.insert(kind.to_string(), 1);
                        }
                    }
                }
            }
        }
        if f.scheduled {
            let lag_us = (f.started - f.intended).as_micros() as u64;
            self.interval.lag_sum_us += lag_us;
            self.interval.lag_count += 1;
            if measured {
                self.lag.record_us(lag_us);
            }
        }
        if measured {
            let retries = (f.tries - 1) as u64;
            self.total.retries += retries;
            if retries > 0 {
                self.total.retried += 1;
            }
            self.last_completion = Some(f.done);
        }
    }

    /// One operation of a committed, measured transaction.
    pub fn record_operation(&mut self, op: usize, latency_us: u64) {
        if let Some(h) = self.operations.get_mut(op) {
            h.record_us(latency_us);
        }
    }

    pub fn record_skipped(&mut self, n: u64) {
        self.total.skipped += n;
        self.interval.skipped += n;
    }
}

/// Take every thread's interval counters and merge them into one report.
pub(crate) fn cut_interval<'a>(
    threads: impl Iterator<Item = std::sync::MutexGuard<'a, ThreadStats>>,
    types: usize,
    t_s: f64,
    warmup: bool,
    keep_histogram: bool,
) -> IntervalReport {
    let mut c = Counters::default();
    let mut latency = LatencyHistogram::new();
    let mut running = 0;
    let mut by_type = vec![0u64; types];
    for mut s in threads {
        let i = std::mem::take(&mut s.interval);
        c.add(&i);
        latency.merge(&s.interval_latency);
        s.interval_latency.reset();
        running += s.clients_running;
        if s.by_type.is_empty() {
            if let Some(only) = by_type.first_mut() {
                *only += i.ok;
            }
        }
        for (n, t) in by_type.iter_mut().zip(s.by_type.iter_mut()) {
            *n += std::mem::take(&mut t.interval_committed);
        }
    }
    let ms = |sum_us: u64, n: u64| {
        if n == 0 {
            0.0
        } else {
            sum_us as f64 / n as f64 / 1000.0
        }
    };
    IntervalReport {
        t_s,
        interval_s: 1.0,
        warmup,
        transactions: c.ok,
        tps: c.ok as f64,
        latency_mean_ms: ms(c.latency_sum_us, c.ok),
        latency_p99_ms: latency.value_at_quantile_us(0.99) as f64 / 1000.0,
        failed: c.failed,
        skipped: c.skipped,
        lag_mean_ms: ms(c.lag_sum_us, c.lag_count),
        clients_running: running,
        transactions_by_type: by_type,
        latency_encoded: keep_histogram.then(|| latency.encode()),
        lag_count: c.lag_count,
        io_enters: 0,
        server_sampled: 0,
        server_off_cpu: 0,
    }
}

/// The ends (t_s) of the seconds of (t_s, value) whose value passes `test`.
fn seconds_where(seconds: &[(f64, f64)], test: impl Fn(f64) -> bool) -> Vec<f64> {
    seconds
        .iter()
        .filter(|&&(_, v)| test(v))
        .map(|&(t, _)| t)
        .collect()
}

/// A mode event's series: each second's value, the first 120 of them.
fn second_by_second(seconds: &[(f64, f64)]) -> String {
    const SHOWN: usize = 120;
    let mut listed: Vec<String> = seconds
        .iter()
        .take(SHOWN)
        .map(|&(_, v)| format!("{v:.2}"))
        .collect();
    if seconds.len() > SHOWN {
        listed.push(format!("... ({} s more)", seconds.len() - SHOWN));
    }
    listed.join(" ")
}

/// The event of a run whose clients' server processes ran on another CPU
/// than their pinned driver thread for part of its window.
pub const PLACEMENT: &str = "placement";

/// A second counts as off-CPU when at least this share of its sampled
/// server processes ran on another CPU than their driver thread. Measured
/// (benchmarks/README.md, "Placement: the two speeds' cause"): at 8 clients
/// on 2 threads, 0 of 8 backends off gave 95-106k select-only tps, 2 of 8
/// about 80k and 4 of 8 about 70k.
pub const PLACEMENT_OFF_SHARE: f64 = 0.25;

/// Off-CPU seconds before a run says so; a run whose clients follow their
/// server processes adds the samples a client waits before it moves
/// (`run::FOLLOW_AFTER`), since its first seconds are off by design.
pub const PLACEMENT_SECONDS: usize = 2;

/// Whether, in at least PLACEMENT_SECONDS measured seconds, at least
/// PLACEMENT_OFF_SHARE of the clients' server processes ran on another CPU
/// than their client's pinned driver thread: then each of their round trips
/// wakes a process across CPUs, which on this machine cost up to a third of
/// the throughput. The start of the first such second on the run's clock,
/// and the message with the share second by second.
pub fn placement_event(series: &[IntervalReport], min_seconds: usize) -> Option<(f64, String)> {
    let seconds: Vec<(f64, f64)> = series
        .iter()
        .filter(|s| !s.warmup && s.server_sampled > 0)
        .map(|s| (s.t_s, s.server_off_cpu as f64 / s.server_sampled as f64))
        .collect();
    let off = seconds_where(&seconds, |share| share >= PLACEMENT_OFF_SHARE);
    if off.len() < min_seconds {
        return None;
    }
    let first = off[0] - 1.0;
    Some((
        first,
        format!(
            "server processes off their driver thread's CPU: in {} of {} s at least {:.0}% of the \
             clients' server processes ran on another CPU than the pinned driver thread that sends \
             them work, so their round trips wake processes across CPUs; the scheduler placed them \
             so, and runs differ by it (PostgreSQL's select-only at 8 clients on 2 cores: \
             90-106k tps with none off, 64-74k with half off; benchmarks/README.md, \"Where the \
             backends ran\"). From {first:.0} s on the run's clock; share off, second by second: {}",
            off.len(),
            seconds.len(),
            PLACEMENT_OFF_SHARE * 100.0,
            second_by_second(&seconds)
        ),
    ))
}

/// The event of a run whose io_uring fell into its slow mode for part of
/// its window.
pub const IO_SLOW_MODE: &str = "io-slow-mode";

/// A second is in the slow mode when its io_uring enters per transaction
/// exceed this multiple of the run's fast level (its lowest second).
/// Measured (benchmarks/README.md, "The io_uring slow mode, traced"): the slow mode
/// makes 3-7 times the fast mode's enters per transaction; a steady run's
/// seconds stay within about 20% of each other.
pub const IO_SLOW_MODE_RATIO: f64 = 1.5;

/// Seconds in the slow mode before a run says so (one odd second is not a mode).
pub const IO_SLOW_MODE_SECONDS: usize = 2;

/// Seconds with fewer committed transactions say too little to judge.
const IO_MODE_MIN_TRANSACTIONS: u64 = 100;

/// Whether a closed-loop io_uring run spent part of its measured window in
/// the slow mode (the ring woken for about one reply per io_uring_enter
/// instead of several; benchmarks/README.md), from its per-second series:
/// the start of the first slow second on the run's clock, and the message,
/// which carries the series of enters per transaction. A run slow for its
/// whole window has no fast second to compare with and is not named here.
pub fn io_mode_event(series: &[IntervalReport]) -> Option<(f64, String)> {
    let seconds: Vec<(f64, f64)> = series
        .iter()
        .filter(|s| !s.warmup && s.transactions >= IO_MODE_MIN_TRANSACTIONS && s.io_enters > 0)
        .map(|s| (s.t_s, s.io_enters as f64 / s.transactions as f64))
        .collect();
    if seconds.len() <= IO_SLOW_MODE_SECONDS {
        return None;
    }
    let fast = seconds
        .iter()
        .map(|&(_, e)| e)
        .fold(f64::INFINITY, f64::min);
    let slow = seconds_where(&seconds, |e| e > IO_SLOW_MODE_RATIO * fast);
    if slow.len() < IO_SLOW_MODE_SECONDS {
        return None;
    }
    let first = slow[0] - 1.0;
    Some((
        first,
        format!(
            "io_uring slow mode: {} of {} s above {IO_SLOW_MODE_RATIO}x the run's fastest second's \
             {fast:.3} io_uring_enter calls per transaction (the driver's ring woken for about one \
             reply per call; its CPU per transaction rises and its throughput may fall), from \
             {first:.0} s on the run's clock; enters per transaction, second by second: {}",
            slow.len(),
            seconds.len(),
            second_by_second(&seconds)
        ),
    ))
}

/// What the coordinator measured itself, for the summary.
pub(crate) struct CoordinatorFigures {
    pub timing: Timing,
    pub connect_phase_s: f64,
    /// Each worker's CPU clock at the start of the measured window (with a
    /// warm-up); without one, the workers' own reading at the go signal.
    pub thread_cpu_from: Option<Vec<Option<f64>>>,
    pub process_cpu_s: f64,
    pub series: Vec<IntervalReport>,
    pub events: Vec<(Instant, String, String)>,
    pub io: String,
    pub io_enters: u64,
    /// A closed loop on io_uring: say so when its enters per transaction
    /// jumped for part of the window (`io_mode_event`).
    pub watch_io_mode: bool,
    /// Off-CPU seconds before the `placement` event (`placement_event`).
    pub placement_seconds: usize,
}

impl CoordinatorFigures {
    /// The measured seconds' server-process samples: (sampled, off CPU).
    fn placement_totals(&self) -> (u64, u64) {
        self.series
            .iter()
            .filter(|s| !s.warmup)
            .fold((0, 0), |(n, off), s| {
                (n + s.server_sampled as u64, off + s.server_off_cpu as u64)
            })
    }
}

/// Merge every thread's figures into the run's summary.
pub(crate) fn summarise(
    stats: &[std::sync::Mutex<ThreadStats>],
    type_names: &[&'static str],
    operation_names: &[&'static str],
    clients: u32,
    threads: u32,
    t_s: impl Fn(Instant) -> f64,
    figures: CoordinatorFigures,
) -> RunSummary {
    let timing = figures.timing;
    let (server_sampled, server_off_cpu) = figures.placement_totals();
    let mut total = Counters::default();
    let mut latency = LatencyHistogram::new();
    let mut lag = LatencyHistogram::new();
    let mut failed_latency = LatencyHistogram::new();
    let empty = |&name: &&'static str| TxTypeSummary {
        name,
        committed: 0,
        body_bytes: 0,
        failed: 0,
        latency: LatencyHistogram::new(),
    };
    let mut by_type: Vec<TxTypeSummary> = type_names.iter().map(empty).collect();
    let mut operations: Vec<TxTypeSummary> = operation_names.iter().map(empty).collect();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut last_completion = timing.measure_from;
    let mut events = figures.events;
    // A mode's event is placed at the start of its first second.
    let at = |from_t_s: f64| {
        let after = (from_t_s - t_s(timing.measure_from)).max(0.0);
        timing.measure_from + std::time::Duration::from_secs_f64(after)
    };
    if figures.watch_io_mode {
        if let Some((from_t_s, message)) = io_mode_event(&figures.series) {
            events.push((at(from_t_s), IO_SLOW_MODE.into(), message));
        }
    }
    if let Some((from_t_s, message)) = placement_event(&figures.series, figures.placement_seconds) {
        events.push((at(from_t_s), PLACEMENT.into(), message));
    }
    let mut lost = 0;
    let (mut connect_total_s, mut connect_max_s) = (0.0, 0.0f64);
    let mut driver_cpu_s = 0.0;
    for (index, s) in stats.iter().enumerate() {
        let s = s.lock().unwrap();
        total.add(&s.total);
        latency.merge(&s.latency);
        lag.merge(&s.lag);
        failed_latency.merge(&s.failed_latency);
        for (summary, t) in by_type.iter_mut().zip(&s.by_type) {
            summary.committed += t.committed;
            summary.body_bytes += t.body_bytes;
            summary.failed += t.failed;
            summary.latency.merge(&t.latency);
        }
        for (summary, h) in operations.iter_mut().zip(&s.operations) {
            summary.latency.merge(h);
        }
        for (kind, n) in &s.errors_by_kind {
            *errors.entry(kind.clone()).or_default() += n;
        }
        if let Some(done) = s.last_completion {
            last_completion = last_completion.max(done);
        }
        lost += s.lost_clients;
        connect_total_s += s.connect_total_s;
        connect_max_s = connect_max_s.max(s.connect_max_s);
        let from = match &figures.thread_cpu_from {
            Some(samples) => samples[index].unwrap_or(s.cpu_at_end_s.unwrap_or(0.0)),
            None => s.cpu_at_go_s,
        };
        driver_cpu_s += (s.cpu_at_end_s.unwrap_or(from) - from).max(0.0);
        events.extend(s.events.iter().cloned());
    }
    if let [only] = by_type.as_mut_slice() {
        // One type: the totals are its figures (not counted twice on the hot path).
        only.committed = total.ok;
        only.body_bytes = total.body_bytes;
        only.failed = total.failed;
        only.latency = latency.clone();
    }
    for op in &mut operations {
        op.committed = op.latency.summary().count;
    }
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
    let cpu_given_s = measured_s * (threads as f64).min(cores);
    RunSummary {
        transactions: total.ok,
        body_bytes: total.body_bytes,
        failed: total.failed,
        skipped: total.skipped,
        late: total.late,
        retries: total.retries,
        retried: total.retried,
        errors_by_kind: errors,
        measured_s,
        tps: if measured_s > 0.0 {
            total.ok as f64 / measured_s
        } else {
            0.0
        },
        latency,
        lag,
        failed_latency,
        by_type,
        operations,
        clients,
        threads,
        lost_clients: lost,
        connect_total_s,
        connect_max_s,
        connect_phase_s: figures.connect_phase_s,
        driver_cpu_s,
        process_cpu_s: figures.process_cpu_s,
        cpu_given_s,
        client_bound: cpu_given_s > 0.0 && driver_cpu_s > CLIENT_BOUND_CPU_SHARE * cpu_given_s,
        series: figures.series,
        events: events
            .into_iter()
            .map(|(at, kind, message)| EngineEvent {
                t_s: t_s(at),
                kind,
                message,
            })
            .collect(),
        measure_start_t_s: t_s(timing.measure_from),
        io: figures.io,
        io_enters_per_tx: if total.ok > 0 {
            figures.io_enters as f64 / total.ok as f64
        } else {
            0.0
        },
        server_sampled,
        server_off_cpu,
    }
}
