//! What a run is asked to do, independent of the protocol it drives.

use super::EngineError;
use crate::uring::IoChoice;
use std::str::FromStr;

/// How scheduled starts are spaced under a rate (open loop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// Exponential gaps: a Poisson arrival process (pgbench -R, wrk2 with
    /// jitter); what a crowd of independent users looks like.
    Poisson,
    /// Equal gaps (wrk2's constant throughput).
    Constant,
}

impl FromStr for Schedule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "poisson" => Ok(Schedule::Poisson),
            "constant" => Ok(Schedule::Constant),
            other => Err(format!(
                "schedule {other:?} is not allowed; allowed: poisson, constant"
            )),
        }
    }
}

impl Schedule {
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Poisson => "poisson",
            Schedule::Constant => "constant",
        }
    }
}

/// Whether each driver thread is pinned to a CPU of its own (the workload's
/// `pin` parameter; `plan_pinning` decides and says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinChoice {
    /// Pinned when the transactions are read-only and the run has one
    /// thread per CPU this process may use, two or more.
    Auto,
    /// Pinned whenever there are at least as many CPUs as threads.
    On,
    Off,
}

impl FromStr for PinChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(PinChoice::Auto),
            "on" => Ok(PinChoice::On),
            "off" => Ok(PinChoice::Off),
            other => Err(format!(
                "pin {other:?} is not allowed; allowed: auto, on, off"
            )),
        }
    }
}

/// Which CPU each driver thread runs on (none: the scheduler's choice), and
/// the sentence that says so and why, for the run's `pin` event.
///
/// Why pin: a closed loop of read-only round trips on a server with a process
/// per connection is fastest when each driver thread and the backends it
/// wakes share one CPU, with no cross-CPU wake-up; the other mode costs up to
/// twice the driver's CPU per transaction on a virtual machine, where every
/// such wake-up is an inter-processor interrupt and a VM exit. Left to the
/// scheduler, a driver thread follows its wake-ups and finds that mode by
/// chance; pinned, it keeps more of its backends with it (half the
/// cross-CPU wake-ups, no deep slow mode in 40 runs: issue 33,
/// benchmarks/README.md "Two speeds: cross-CPU wake-ups"). It does not hold
/// the mode: the scheduler still moves backends. Where
/// transactions write, backends wait on each other's locks and the WAL, and
/// a pinned driver cannot follow them to an idle CPU: measured 3-4% fewer
/// tpcb-like transactions, so `auto` leaves them to the scheduler, and so it
/// does HTTP (a web server's worker serves many connections, so a driver
/// thread's requests reach several of them: not measured pinned). With fewer
/// threads than CPUs, pinning would crowd the server onto the driver's CPUs.
pub fn plan_pinning(
    choice: PinChoice,
    threads: usize,
    allowed: &[usize],
    read_only: bool,
) -> (Vec<usize>, String) {
    let cpus = allowed.len();
    let pinned = |why: &str| {
        let place: Vec<String> = allowed[..threads]
            .iter()
            .enumerate()
            .map(|(t, cpu)| format!("thread {t} on CPU {cpu}"))
            .collect();
        (
            allowed[..threads].to_vec(),
            format!(
                "driver threads pinned, one per CPU: {} ({why})",
                place.join(", ")
            ),
        )
    };
    let not = |why: String| (Vec::new(), format!("driver threads not pinned ({why})"));
    match choice {
        PinChoice::Off => not("pin = \"off\"".into()),
        PinChoice::On if threads <= cpus => pinned("pin = \"on\""),
        PinChoice::On => not(format!(
            "pin = \"on\", but {threads} threads for the {cpus} CPUs this process may use"
        )),
        PinChoice::Auto if !read_only => not(
            "pin = \"auto\" pins only runs whose SQL transactions all only read, such as \
             pgbench's select-only and sysbench's point_select and read_only"
                .into(),
        ),
        PinChoice::Auto if threads < 2 => not("pin = \"auto\": one thread".into()),
        PinChoice::Auto if threads != cpus => not(format!(
            "pin = \"auto\": {threads} threads for the {cpus} CPUs this process may use; \
             pinned, they would crowd the server onto their CPUs"
        )),
        PinChoice::Auto => pinned("pin = \"auto\": read-only transactions, one thread per CPU"),
    }
}

#[derive(Debug, Clone)]
pub struct HarnessConfig {
    pub clients: u32,
    /// Worker threads (pgbench -j); clients are spread round-robin over them.
    pub threads: u32,
    /// Measured duration (after warm-up); exclusive with transactions_per_client.
    pub duration_s: Option<f64>,
    /// Measured transactions per client (pgbench -t).
    pub transactions_per_client: Option<u64>,
    pub warmup_s: f64,
    /// Target total rate in transactions per second (open loop).
    pub rate_tps: Option<f64>,
    pub schedule: Schedule,
    pub latency_limit_us: Option<u64>,
    /// Tries per transaction for a retryable error (1 = no retry).
    pub max_tries: u32,
    pub seed: u64,
    /// The run's origin on CLOCK_MONOTONIC, in ns (Python's time.monotonic_ns()).
    pub t0_ns: u64,
    /// Socket I/O of the measured round trips: epoll, or batched io_uring.
    pub io: IoChoice,
    /// Whether each worker thread is pinned to a CPU (`plan_pinning`).
    pub pin: PinChoice,
    /// Whether, in a pinned closed loop, a client whose server process
    /// (`Protocol::server_pid`) runs on another thread's CPU moves to that
    /// thread between transactions (`Protocol::MIGRATES`): then no round
    /// trip wakes a process across CPUs, whatever the scheduler does.
    pub follow: bool,
}

impl HarnessConfig {
    /// A closed-loop run of `clients` on as many threads (at most `cores`),
    /// for `duration_s`: the defaults a caller then adjusts.
    pub fn closed_loop(clients: u32, threads: u32, duration_s: f64) -> HarnessConfig {
        HarnessConfig {
            clients,
            threads,
            duration_s: Some(duration_s),
            transactions_per_client: None,
            warmup_s: 0.0,
            rate_tps: None,
            schedule: Schedule::Poisson,
            latency_limit_us: None,
            max_tries: 1,
            seed: 0,
            t0_ns: crate::sys::monotonic_ns(),
            io: IoChoice::Epoll,
            pin: PinChoice::Off,
            follow: false,
        }
    }

    pub fn validate(&self) -> Result<(), EngineError> {
        let bad = |m: String| Err(EngineError::Config(m));
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
            (Some(d), None) if !d.is_finite() || d <= 0.0 => {
                return bad(format!("duration {d} s must be > 0"))
            }
            (None, Some(0)) => return bad("transactions must be at least 1".into()),
            _ => {}
        }
        if !self.warmup_s.is_finite() || self.warmup_s < 0.0 {
            return bad(format!("warmup {} s must be >= 0", self.warmup_s));
        }
        if let Some(rate) = self.rate_tps {
            if !rate.is_finite() || rate <= 0.0 {
                return bad(format!("rate {rate} tx/s must be > 0"));
            }
        }
        if self.max_tries == 0 {
            return bad("max_tries must be at least 1".into());
        }
        Ok(())
    }
}
