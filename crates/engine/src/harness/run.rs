//! A run in progress: the coordinator thread that starts the workers, cuts
//! the per-second series, enforces the end, and on abort shuts every client
//! socket down so that clients blocked on a stalled server return at once.

use super::config::{plan_pinning, HarnessConfig};
use super::schedule::Timing;
use super::shared::{Gate, Place, Shared};
use super::stats::{
    cut_interval, summarise, CoordinatorFigures, IntervalReport, RunSummary, PLACEMENT_SECONDS,
};
use super::worker::worker;
use super::{EngineError, Protocol};
use crate::sys;
use crate::uring;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// After the end of the run, how long in-flight transactions may take before
/// their connections are closed (a server stalled at the very end).
const END_GRACE: Duration = Duration::from_secs(10);

/// What `Run::next_progress` returns.
pub enum Progress {
    Interval(IntervalReport),
    Pending,
    Finished,
}

/// A run in progress. Poll `next_progress`, then `join`.
pub struct Run<P: Protocol> {
    shared: Arc<Shared<P>>,
    coordinator: Option<JoinHandle<Result<RunSummary, EngineError>>>,
    progress: Mutex<mpsc::Receiver<IntervalReport>>,
}

impl<P: Protocol> Run<P> {
    pub fn start(cfg: HarnessConfig, protocol: P) -> Result<Run<P>, EngineError> {
        Self::start_with(cfg, protocol, None)
    }

    /// Start a run whose clients connect, then wait for `go_at` (see
    /// `connected`): several drivers, one per machine, start at one instant.
    pub fn start_gated(cfg: HarnessConfig, protocol: P) -> Result<Run<P>, EngineError> {
        Self::start_with(cfg, protocol, Some(Gate::default()))
    }

    /// A gated run: every client is connected and the run waits for `go_at`.
    pub fn connected(&self) -> bool {
        self.shared.gate.as_ref().is_some_and(|g| g.all_connected())
    }

    /// A gated run: start the run (the warm-up, else the measured window) at
    /// this CLOCK_MONOTONIC instant in ns; the per-second series are cut at
    /// whole seconds from it.
    pub fn go_at(&self, monotonic_ns: u64) {
        if let Some(gate) = &self.shared.gate {
            gate.open(monotonic_ns);
        }
    }

    fn start_with(
        cfg: HarnessConfig,
        protocol: P,
        gate: Option<Gate>,
    ) -> Result<Run<P>, EngineError> {
        cfg.validate()?;
        if protocol.transaction_types().is_empty() {
            return Err(EngineError::Config(
                "the protocol names no transaction type".into(),
            ));
        }
        let threads = cfg.threads as usize;
        let io = if P::SUPPORTS_RING {
            uring::choose_io(cfg.io, uring::AUTO_PREFERS_URING, uring::probe)
        } else {
            // The probe names the reason, so that `auto` on such a protocol
            // says why it runs on epoll (not that io_uring is opt-in).
            uring::choose_io(cfg.io, uring::AUTO_PREFERS_URING, || {
                Err("this protocol's driver has no io_uring path".into())
            })
        }
        .map_err(EngineError::Config)?;
        let types = protocol.transaction_types().len();
        let operations = if P::TIMES_OPERATIONS {
            protocol.operation_types().len()
        } else {
            0
        };
        let (pin_cpus, pin_note) = match sys::allowed_cpus() {
            Ok(allowed) => plan_pinning(cfg.pin, threads, &allowed, protocol.read_only()),
            Err(e) => (
                Vec::new(),
                format!("driver threads not pinned (this process's CPUs could not be read: {e})"),
            ),
        };
        let follow = follow_decision::<P>(&cfg, &pin_cpus);
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads)
            .map(|_| {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                (tx, Some(rx))
            })
            .unzip();
        let shared = Arc::new(Shared {
            pin_cpus,
            pin_note,
            pin_failed: Mutex::new(Vec::new()),
            placement: Mutex::new(Vec::new()),
            follow,
            moves: (0..cfg.clients)
                .map(|_| AtomicUsize::new(usize::MAX))
                .collect(),
            inboxes: senders,
            inbox_ends: Mutex::new(receivers),
            clients_alive: AtomicUsize::new(0),
            moved: AtomicU64::new(0),
            protocol,
            stop: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            fds: Mutex::new(HashSet::new()),
            stats: (0..threads)
                .map(|_| Mutex::new(super::stats::ThreadStats::new(types, operations)))
                .collect(),
            cpu_clocks: Mutex::new(vec![None; threads]),
            connected: Barrier::new(threads + 1),
            go: Barrier::new(threads + 1),
            timing: OnceLock::new(),
            workers_done: AtomicUsize::new(0),
            clock_base: (Instant::now(), sys::monotonic_ns()),
            io,
            io_enters: AtomicU64::new(0),
            ring_enters: Mutex::new(vec![None; threads]),
            gate,
            cfg,
        });
        let (tx, rx) = mpsc::channel();
        let coordinator_shared = shared.clone();
        let coordinator = std::thread::Builder::new()
            .name("perflab-driver".into())
            .spawn(move || coordinate(coordinator_shared, tx))
            .map_err(|e| EngineError::Internal(format!("cannot start a thread: {e}")))?;
        Ok(Run {
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

    pub fn join(mut self) -> Result<RunSummary, EngineError> {
        let handle = self.coordinator.take().expect("joined once");
        match handle.join() {
            Ok(result) => result,
            Err(_) => Err(EngineError::Internal(
                "the driver's coordinator panicked".into(),
            )),
        }
    }

    /// Run to the end with no progress display (for tests and Rust callers).
    pub fn run(cfg: HarnessConfig, protocol: P) -> Result<RunSummary, EngineError> {
        let run = Run::start(cfg, protocol)?;
        while !matches!(
            run.next_progress(Duration::from_secs(3600)),
            Progress::Finished
        ) {}
        run.join()
    }
}

impl<P: Protocol> Drop for Run<P> {
    fn drop(&mut self) {
        if let Some(handle) = self.coordinator.take() {
            self.abort();
            let _ = handle.join();
        }
    }
}

/// Whether the run's clients follow their server processes: its threads
/// are pinned, one per CPU; it is a closed loop (under a rate a thread's
/// schedule is its own); the protocol's clients can move; and `follow` is on.
fn follow_decision<P: Protocol>(cfg: &HarnessConfig, pin_cpus: &[usize]) -> bool {
    cfg.follow && P::MIGRATES && !pin_cpus.is_empty() && cfg.rate_tps.is_none()
}

/// The run's `follow` event: whether its clients followed their server
/// processes, how many moves that took, or why they did not.
pub(super) fn follow_note(
    cfg: &HarnessConfig,
    migrates: bool,
    pinned: bool,
    known_pids: usize,
    moved: Option<u64>,
) -> String {
    let not = |why: &str| format!("clients did not follow their server processes ({why})");
    if let Some(moved) = moved {
        if known_pids > 0 {
            return format!(
                "clients followed their server processes: {moved} moves of a client to the \
                 driver thread on its server process's CPU ({known_pids} of {} clients' \
                 processes known)",
                cfg.clients
            );
        }
        return not("no client's server process is known: a server elsewhere, or not PostgreSQL");
    }
    if !cfg.follow {
        not("follow = false")
    } else if !migrates {
        not("this protocol's clients do not move between threads")
    } else if !pinned {
        not("the driver threads are not pinned")
    } else {
        not("a rate: each thread keeps its own schedule")
    }
}

/// A sample of where the clients' server processes run: how many could be
/// read in /proc, and how many of those last ran on another CPU than their
/// client's driver thread (`pin_cpus[thread]`). A process that has gone is
/// not counted. With `follow`, a client whose process was off its thread's
/// CPU in FOLLOW_AFTER samples in a row is asked to move to the thread
/// pinned to that CPU (`moves`), when there is one.
pub(super) fn placement_sample(
    placement: &mut [Place],
    pin_cpus: &[usize],
    follow: Option<&[AtomicUsize]>,
) -> (u32, u32) {
    let (mut sampled, mut off) = (0, 0);
    for place in placement.iter_mut() {
        let Some(seen) = sys::last_cpu(place.pid) else {
            continue;
        };
        sampled += 1;
        if seen == pin_cpus[place.thread] {
            place.off_streak = 0;
            continue;
        }
        off += 1;
        place.off_streak += 1;
        if let (Some(moves), Some(to)) = (follow, pin_cpus.iter().position(|&c| c == seen)) {
            if place.off_streak >= FOLLOW_AFTER {
                moves[place.client as usize].store(to, Ordering::Relaxed);
                place.thread = to;
                place.off_streak = 0;
            }
        }
    }
    (sampled, off)
}

/// Each thread's CPU for `placement_sample`: its planned one, or usize::MAX
/// (no CPU) for a thread that failed to pin, so that no client is moved to
/// a thread that may run anywhere. Its own clients are not sampled.
pub(super) fn placement_cpus(pin_cpus: &[usize], unpinned: &[usize]) -> Vec<usize> {
    pin_cpus
        .iter()
        .enumerate()
        .map(|(i, &cpu)| {
            if unpinned.contains(&i) {
                usize::MAX
            } else {
                cpu
            }
        })
        .collect()
}

/// Samples in a row (a second apart) that must find a client's server
/// process off its thread's CPU before the client follows it: one sample
/// may catch a process the balancer is about to move back.
pub(super) const FOLLOW_AFTER: u32 = 2;

fn coordinate<P: Protocol>(
    shared: Arc<Shared<P>>,
    progress: mpsc::Sender<IntervalReport>,
) -> Result<RunSummary, EngineError> {
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
            .name(format!("perflab-driver-{thread_index}"))
            .spawn(move || worker(s, thread_index, clients));
        match spawned {
            Ok(handle) => workers.push(handle),
            Err(e) => {
                // Workers already started wait at the barrier: release them.
                shared.abort.store(true, Ordering::SeqCst);
                return Err(EngineError::Internal(format!("cannot start a thread: {e}")));
            }
        }
    }
    shared.connected.wait();
    let connect_phase_s = connect_started.elapsed().as_secs_f64();
    let connect_error = shared
        .stats
        .iter()
        .find_map(|s| s.lock().unwrap().connect_error.clone());
    let mut start = Instant::now();
    let mut gate_events = Vec::new();
    if let (Some(gate), None) = (&shared.gate, &connect_error) {
        match gate.wait_go(&shared.abort) {
            Some(ns) => {
                start = shared.instant_at(ns);
                let now = Instant::now();
                if now > start + Duration::from_millis(1) {
                    gate_events.push((
                        now,
                        "late-start".to_string(),
                        format!(
                            "the start instant had passed by {:.3} ms when the go came",
                            (now - start).as_secs_f64() * 1000.0
                        ),
                    ));
                }
                while Instant::now() < start && !shared.abort.load(Ordering::SeqCst) {
                    std::thread::sleep(
                        start
                            .saturating_duration_since(Instant::now())
                            .min(Duration::from_millis(20)),
                    );
                }
            }
            None => shared.abort.store(true, Ordering::SeqCst),
        }
    }
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
            Some(e) => EngineError::Target(e),
            None => EngineError::Interrupted,
        });
    }
    let mut process_cpu_from = sys::process_cpu_s().unwrap_or(0.0);
    shared.go.wait();
    // Every worker has pinned itself, or failed to, before it connected.
    let pin_failed = std::mem::take(&mut *shared.pin_failed.lock().unwrap());
    let unpinned: Vec<usize> = pin_failed.iter().map(|(index, _)| *index).collect();
    let placement_cpus = placement_cpus(&shared.pin_cpus, &unpinned);

    // Thread CPU at the start of the measured window; with a warm-up, read
    // each worker's clock from here when the window opens.
    let mut thread_cpu_from: Option<Vec<Option<f64>>> = None;
    let mut last_tick = start;
    let mut stop_seen: Option<Instant> = None;
    let mut sockets_closed = false;
    let mut series = Vec::new();
    let mut events: Vec<(Instant, String, String)> = gate_events;
    let pin_note = match pin_failed.last() {
        Some((_, failed)) => format!("{}; but pinning failed: {failed}", shared.pin_note),
        None => shared.pin_note.clone(),
    };
    events.push((start, "pin".into(), pin_note));
    let types = shared.type_count();
    // io_uring_enter calls so far, per worker, at the last cut.
    let mut enters_seen = vec![0u64; threads];
    loop {
        let now = Instant::now();
        if thread_cpu_from.is_none() && cfg.warmup_s > 0.0 && now >= measure_from {
            let clocks = shared.cpu_clocks.lock().unwrap().clone();
            thread_cpu_from = Some(clocks.iter().map(|c| c.and_then(sys::clock_s)).collect());
            process_cpu_from = sys::process_cpu_s().unwrap_or(0.0);
        }
        if now >= last_tick + Duration::from_secs(1) {
            last_tick += Duration::from_secs(1);
            let mut io_enters = 0;
            for (seen, counter) in enters_seen
                .iter_mut()
                .zip(shared.ring_enters.lock().unwrap().iter())
            {
                if let Some(counter) = counter {
                    let now = counter.load(Ordering::Relaxed);
                    io_enters += now.saturating_sub(*seen);
                    *seen = now;
                }
            }
            let mut report = cut_interval(
                shared.stats.iter().map(|s| s.lock().unwrap()),
                types,
                shared.t_s(last_tick),
                last_tick <= measure_from,
                shared.gate.is_some(),
            );
            report.io_enters = io_enters;
            let follow = shared.follow.then_some(shared.moves.as_slice());
            (report.server_sampled, report.server_off_cpu) = placement_sample(
                &mut shared.placement.lock().unwrap(),
                &placement_cpus,
                follow,
            );
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
                events.push((
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
    let process_cpu_s = sys::process_cpu_s().unwrap_or(0.0) - process_cpu_from;
    events.push((
        start,
        "follow".into(),
        follow_note(
            &shared.cfg,
            P::MIGRATES,
            !shared.pin_cpus.is_empty(),
            shared.placement.lock().unwrap().len(),
            shared.follow.then(|| shared.moved.load(Ordering::SeqCst)),
        ),
    ));
    if shared.abort.load(Ordering::SeqCst) {
        return Err(EngineError::Interrupted);
    }
    Ok(summarise(
        &shared.stats,
        shared.protocol.transaction_types(),
        if P::TIMES_OPERATIONS {
            shared.protocol.operation_types()
        } else {
            &[]
        },
        cfg.clients,
        cfg.threads,
        |at| shared.t_s(at),
        CoordinatorFigures {
            timing,
            connect_phase_s,
            thread_cpu_from,
            process_cpu_s,
            series,
            events,
            io: shared.io.describe(),
            io_enters: shared.io_enters.load(Ordering::SeqCst),
            watch_io_mode: shared.io.is_uring() && cfg.rate_tps.is_none(),
            placement_seconds: PLACEMENT_SECONDS
                + if shared.follow {
                    FOLLOW_AFTER as usize
                } else {
                    0
                },
        },
    ))
}
