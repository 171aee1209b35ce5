//! What the coordinator (run.rs) and the worker threads (worker.rs) share:
//! the run's settings and protocol, its stop and abort flags, the clients'
//! sockets, the per-thread statistics, the gate a gated run waits at, and
//! the clients on their way from one thread to another. Both import it; it
//! imports neither.

use super::config::HarnessConfig;
use super::schedule::Timing;
use super::Protocol;
use crate::sys;
use crate::uring::IoMethod;
use std::collections::HashSet;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What the coordinator and the workers share.
pub(crate) struct Shared<P: Protocol> {
    pub cfg: HarnessConfig,
    pub protocol: P,
    pub stop: AtomicBool,
    pub abort: AtomicBool,
    /// Sockets of live clients, shut down on abort.
    pub fds: Mutex<HashSet<RawFd>>,
    pub stats: Vec<Mutex<super::stats::ThreadStats>>,
    pub cpu_clocks: Mutex<Vec<Option<libc::clockid_t>>>,
    pub connected: Barrier,
    pub go: Barrier,
    pub timing: OnceLock<Timing>,
    pub workers_done: AtomicUsize,
    /// Instant <-> CLOCK_MONOTONIC: the same clock, different origins.
    pub clock_base: (Instant, u64),
    pub io: IoMethod,
    /// io_uring_enter calls of all worker threads.
    pub io_enters: AtomicU64,
    /// Each worker's ring's count of io_uring_enter calls while it runs
    /// (None: no ring), read every second for the series.
    pub ring_enters: Mutex<Vec<Option<Arc<AtomicU64>>>>,
    /// A gated run (`Run::start_gated`): connected, it waits for `go_at`.
    pub gate: Option<Gate>,
    /// The CPU of each worker thread, by index (empty: not pinned), and
    /// the `pin` event's sentence (`plan_pinning`).
    pub pin_cpus: Vec<usize>,
    pub pin_note: String,
    /// Each worker that could not pin itself: its index (no client is moved
    /// to it: `placement_cpus`) and why (the `pin` event names the last).
    pub pin_failed: Mutex<Vec<(usize, String)>>,
    /// Each client whose protocol names its server process on this machine
    /// (`Protocol::server_pid`), with its driver thread's index, sampled
    /// every second (`placement_sample`).
    pub placement: Mutex<Vec<Place>>,
    /// Whether clients move to the thread on their server process's CPU
    /// (`follow_decision`); then `moves[client]` is the thread a client is
    /// to move to at its next transaction (usize::MAX: stay), and each
    /// thread takes the clients that come to it from `inboxes`.
    pub follow: bool,
    pub moves: Vec<AtomicUsize>,
    pub inboxes: Vec<tokio::sync::mpsc::UnboundedSender<Arrival<P>>>,
    pub inbox_ends: Mutex<Vec<Option<tokio::sync::mpsc::UnboundedReceiver<Arrival<P>>>>>,
    /// Clients still running, on any thread: a worker ends when none is.
    pub clients_alive: AtomicUsize,
    /// Clients moved so far.
    pub moved: AtomicU64,
}

/// A client and where its server process is (`Shared::placement`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Place {
    pub client: u32,
    pub pid: u32,
    /// The driver thread that serves the client (as the coordinator last
    /// asked), by index.
    pub thread: usize,
    /// Samples in a row that found the server process off that thread's CPU.
    pub off_streak: u32,
}

/// A client on its way to another thread, between two transactions: its
/// connection (which has left its old thread: `Protocol::leave_thread`)
/// and its own state.
pub(crate) struct Arrival<P: Protocol> {
    pub conn: P::Client,
    pub client: u32,
    pub rng: crate::random::Prng,
    pub measured_done: u64,
}

// SAFETY: only made for protocols with `Protocol::MIGRATES`, whose clients
// hold, once they have left their thread, nothing tied to it (no Rc, no
// registration with its runtime or ring): owned sockets and buffers, which
// may move to another thread. The other fields are Send.
unsafe impl<P: Protocol> Send for Arrival<P> {}

/// Where a gated run waits, all clients connected, for the instant to start
/// at: the shared barrier of drivers on several machines.
#[derive(Default)]
pub(crate) struct Gate {
    /// (all clients connected, the CLOCK_MONOTONIC ns to start at)
    state: Mutex<(bool, Option<u64>)>,
    cond: Condvar,
}

impl Gate {
    /// Every client is connected and the run waits at the gate.
    pub(super) fn all_connected(&self) -> bool {
        self.state.lock().unwrap().0
    }

    /// Start at this CLOCK_MONOTONIC instant in ns.
    pub(super) fn open(&self, monotonic_ns: u64) {
        self.state.lock().unwrap().1 = Some(monotonic_ns);
        self.cond.notify_all();
    }

    /// Connected: wait for the start instant; None when the run is aborted.
    pub(super) fn wait_go(&self, abort: &AtomicBool) -> Option<u64> {
        let mut state = self.state.lock().unwrap();
        state.0 = true;
        loop {
            if let Some(ns) = state.1 {
                return Some(ns);
            }
            if abort.load(Ordering::SeqCst) {
                return None;
            }
            state = self
                .cond
                .wait_timeout(state, Duration::from_millis(20))
                .unwrap()
                .0;
        }
    }
}

impl<P: Protocol> Shared<P> {
    /// CLOCK_MONOTONIC ns of an Instant (the same clock, another origin).
    pub fn monotonic_ns_at(&self, at: Instant) -> u64 {
        let (base_instant, base_ns) = self.clock_base;
        if at >= base_instant {
            base_ns + (at - base_instant).as_nanos() as u64
        } else {
            base_ns.saturating_sub((base_instant - at).as_nanos() as u64)
        }
    }

    /// The Instant of a CLOCK_MONOTONIC reading in ns.
    pub fn instant_at(&self, ns: u64) -> Instant {
        let (base_instant, base_ns) = self.clock_base;
        if ns >= base_ns {
            base_instant + Duration::from_nanos(ns - base_ns)
        } else {
            base_instant
                .checked_sub(Duration::from_nanos(base_ns - ns))
                .unwrap_or(base_instant)
        }
    }

    pub fn t_s(&self, at: Instant) -> f64 {
        (self.monotonic_ns_at(at) as i128 - self.cfg.t0_ns as i128) as f64 / 1e9
    }

    pub(super) fn close_all_sockets(&self) {
        // A client removes its fd under this lock before closing it, so every
        // fd here is a live socket.
        for &fd in self.fds.lock().unwrap().iter() {
            sys::shutdown_socket(fd);
        }
    }

    pub(super) fn type_count(&self) -> usize {
        self.protocol.transaction_types().len()
    }
}
