//! The one glue between Python and the engine's long calls, written once for
//! every binding.
//!
//! A run or a load executes on Rust threads with the GIL released. The
//! calling thread wakes every POLL_INTERVAL to take the GIL briefly, call
//! `py.check_signals()` and the caller's `cancel.is_set()`: when either says
//! stop, the work is told to stop (the harness aborts every client; a loader
//! sees its abort flag between chunks), is joined, and the error (the signal
//! handler's, or `Interrupted`) is returned to Python within about a second.
//!
//! - `drive`: any harness protocol, reporting each second to `progress`.
//! - `run_blocking`: any other job (a loader, a generator) on its own thread,
//!   relaying its steps to `on_step`.
//! - `harness_binding!`: declares a driver binding (a `#[pyfunction]`) with
//!   the harness keywords every driver takes, written here once, and hands
//!   its body a `HarnessCall` (the config and Python's callbacks).
//! - `HarnessArgs`: those harness settings, by name, and their config.
//!
//! A binding adopts `harness_binding!` by stating only its own parameters:
//! its signature without the harness keywords (its `*` included), its own
//! parameters, and the name its body calls the harness by:
//!
//! ```ignore
//! harness_binding! {
//!     /// Drive pgbench's scripts; returns the run's figures.
//!     #[pyo3(signature = (conninfo, *, script, scale, protocol))]
//!     fn tpcb_run<'py>(py: Python<'py>, conninfo: String, script: &str, scale: u32,
//!                      protocol: &str) with harness -> PyResult<DriverResult> {
//!         let protocol = TpcbProtocol::new(..).map_err(engine_error)?;
//!         harness.drive(py, protocol)
//!     }
//! }
//! ```
//!
//! A binding whose protocol never retries says `with harness(max_tries = 1)`
//! and takes no `max_tries` keyword (http_run). The keywords stay as Python
//! callers give them; `_engine.pyi` states them per function as before (its
//! keyword-only order is free). Every driver binding but stream_run is one
//! (tpcb, oltp, tpcc, http): stream_run takes keywords of its own (`flows`,
//! `rate_pps`, no schedule or io: a sender paces evenly) and calls `drive`.

use crate::errors::{config_error, engine_error, EngineError, Interrupted};
use crate::results::{DriverResult, Interval};
use perflab_engine::harness::registry::{self, Running};
use perflab_engine::harness::{HarnessConfig, Progress, Protocol};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Stop when a signal handler raised or the runner asked to (`cancel` is a
/// threading.Event-like object).
pub(crate) fn check_stop(py: Python<'_>, cancel: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    py.check_signals()?;
    match cancel {
        Some(event) if event.call_method0("is_set")?.extract::<bool>()? => {
            Err(Interrupted::new_err("run cancelled"))
        }
        _ => Ok(()),
    }
}

/// `key` taken out of `kwargs` (None when absent or None).
pub(crate) fn take<'py>(
    kwargs: &Bound<'py, PyDict>,
    key: &str,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let value = kwargs.get_item(key)?;
    if value.is_some() {
        kwargs.del_item(key)?;
    }
    Ok(value.filter(|v| !v.is_none()))
}

/// The harness settings every driver binding takes from Python, by name.
pub(crate) struct HarnessArgs<'a> {
    pub clients: u32,
    pub threads: u32,
    pub t0_ns: u64,
    pub duration_s: Option<f64>,
    pub transactions: Option<u64>,
    pub warmup_s: f64,
    pub rate_tps: Option<f64>,
    pub schedule: &'a str,
    pub latency_limit_ms: Option<f64>,
    pub max_tries: u32,
    pub seed: u64,
    pub io: &'a str,
    pub pin: &'a str,
    pub follow: bool,
}

impl HarnessArgs<'_> {
    /// The harness keywords taken out of a binding's `kwargs` (what is left
    /// is the workload's own), with `harness_binding!`'s defaults; their
    /// config. TypeError names a missing required one.
    pub(crate) fn take(kwargs: &Bound<'_, PyDict>) -> PyResult<HarnessConfig> {
        let required = |key: &str| {
            take(kwargs, key)?.ok_or_else(|| {
                pyo3::exceptions::PyTypeError::new_err(format!("missing keyword argument {key}"))
            })
        };
        let (clients, threads, t0_ns) = (
            required("clients")?,
            required("threads")?,
            required("t0_ns")?,
        );
        let schedule: Option<String> =
            take(kwargs, "schedule")?.map(|v| v.extract()).transpose()?;
        let io: Option<String> = take(kwargs, "io")?.map(|v| v.extract()).transpose()?;
        let pin: Option<String> = take(kwargs, "pin")?.map(|v| v.extract()).transpose()?;
        HarnessArgs {
            clients: clients.extract()?,
            threads: threads.extract()?,
            t0_ns: t0_ns.extract()?,
            duration_s: take(kwargs, "duration_s")?
                .map(|v| v.extract())
                .transpose()?,
            transactions: take(kwargs, "transactions")?
                .map(|v| v.extract())
                .transpose()?,
            warmup_s: take(kwargs, "warmup_s")?.map_or(Ok(0.0), |v| v.extract())?,
            rate_tps: take(kwargs, "rate_tps")?.map(|v| v.extract()).transpose()?,
            schedule: schedule.as_deref().unwrap_or("poisson"),
            latency_limit_ms: take(kwargs, "latency_limit_ms")?
                .map(|v| v.extract())
                .transpose()?,
            max_tries: take(kwargs, "max_tries")?.map_or(Ok(1), |v| v.extract())?,
            seed: take(kwargs, "seed")?.map_or(Ok(0), |v| v.extract())?,
            io: io.as_deref().unwrap_or("epoll"),
            pin: pin.as_deref().unwrap_or("off"),
            follow: take(kwargs, "follow")?.map_or(Ok(false), |v| v.extract())?,
        }
        .config()
    }

    /// The harness's config; ConfigError names a bad schedule, io or pin.
    pub(crate) fn config(&self) -> PyResult<HarnessConfig> {
        Ok(HarnessConfig {
            clients: self.clients,
            threads: self.threads,
            duration_s: self.duration_s,
            transactions_per_client: self.transactions,
            warmup_s: self.warmup_s,
            rate_tps: self.rate_tps,
            schedule: self.schedule.parse().map_err(config_error)?,
            latency_limit_us: self.latency_limit_ms.map(|ms| (ms * 1000.0).round() as u64),
            max_tries: self.max_tries,
            seed: self.seed,
            t0_ns: self.t0_ns,
            io: self.io.parse().map_err(config_error)?,
            pin: self.pin.parse().map_err(config_error)?,
            follow: self.follow,
        })
    }
}

/// What a driver binding hands its body (`harness_binding!`): the harness's
/// config, checked, and Python's callbacks.
pub(crate) struct HarnessCall<'py> {
    pub config: HarnessConfig,
    pub progress: Option<Bound<'py, PyAny>>,
    pub cancel: Option<Bound<'py, PyAny>>,
    pub on_connected: Option<Bound<'py, PyAny>>,
}

impl<'py> HarnessCall<'py> {
    /// Drive `protocol` through the harness (`drive`).
    pub(crate) fn drive<P: Protocol>(self, py: Python<'py>, protocol: P) -> PyResult<DriverResult> {
        drive(
            py,
            self.config,
            protocol,
            self.progress,
            self.cancel,
            self.on_connected,
        )
    }
}

/// A driver binding: a `#[pyfunction]` with the binding's own parameters and
/// then the harness keywords (`clients`, `threads`, `t0_ns`, `duration_s`,
/// `transactions`, `warmup_s`, `rate_tps`, `schedule`, `latency_limit_ms`,
/// `max_tries`, `seed`, `io`, `pin`, and the callbacks `progress`, `cancel`,
/// `on_connected`), which reach its body as one `HarnessCall` named after
/// `with`. A bad `schedule`, `io` or `pin` is a ConfigError before the body runs.
/// See the module's doc for how a binding adopts it.
macro_rules! harness_binding {
    (
        $(#[doc = $doc:expr])*
        #[pyo3(signature = ($($sig:tt)*))]
        fn $name:ident<$py:lifetime>($($param:ident: $ty:ty),* $(,)?)
        with $call:ident -> $ret:ty $body:block
    ) => {
        $crate::glue::harness_binding! {
            @emit [$(#[doc = $doc])*] [$($sig)*] $name $py [$($param: $ty),*] $call $ret, $body
            [max_tries = 1,] [max_tries: u32,] [max_tries]
        }
    };
    (
        $(#[doc = $doc:expr])*
        #[pyo3(signature = ($($sig:tt)*))]
        fn $name:ident<$py:lifetime>($($param:ident: $ty:ty),* $(,)?)
        with $call:ident(max_tries = $tries:literal) -> $ret:ty $body:block
    ) => {
        $crate::glue::harness_binding! {
            @emit [$(#[doc = $doc])*] [$($sig)*] $name $py [$($param: $ty),*] $call $ret, $body
            [] [] [$tries]
        }
    };
    (
        @emit [$($doc:tt)*] [$($sig:tt)*] $name:ident $py:lifetime [$($params:tt)*]
        $call:ident $ret:ty, $body:block
        [$($tries_sig:tt)*] [$($tries_param:tt)*] [$tries:expr]
    ) => {
        $($doc)*
        #[::pyo3::pyfunction]
        #[pyo3(signature = (
            $($sig)*, clients, threads, t0_ns, duration_s = None, transactions = None,
            warmup_s = 0.0, rate_tps = None, schedule = "poisson", latency_limit_ms = None,
            $($tries_sig)* seed = 0, io = "epoll", pin = "off", follow = false, progress = None, cancel = None,
            on_connected = None
        ))]
        #[allow(clippy::too_many_arguments)]
        fn $name<$py>(
            $($params)*,
            clients: u32,
            threads: u32,
            t0_ns: u64,
            duration_s: Option<f64>,
            transactions: Option<u64>,
            warmup_s: f64,
            rate_tps: Option<f64>,
            schedule: &str,
            latency_limit_ms: Option<f64>,
            $($tries_param)*
            seed: u64,
            io: &str,
            pin: &str,
            follow: bool,
            progress: Option<::pyo3::Bound<$py, ::pyo3::PyAny>>,
            cancel: Option<::pyo3::Bound<$py, ::pyo3::PyAny>>,
            on_connected: Option<::pyo3::Bound<$py, ::pyo3::PyAny>>,
        ) -> $ret {
            let config = $crate::glue::HarnessArgs {
                clients,
                threads,
                t0_ns,
                duration_s,
                transactions,
                warmup_s,
                rate_tps,
                schedule,
                latency_limit_ms,
                max_tries: $tries,
                seed,
                io,
                pin,
                follow,
            }
            .config()?;
            let $call = $crate::glue::HarnessCall {
                config,
                progress,
                cancel,
                on_connected,
            };
            $body
        }
    };
}
pub(crate) use harness_binding;

/// Drive any protocol through the harness with the GIL released, reporting
/// each second to `progress`. With `on_connected` the run is gated (one of
/// several drivers): once every client is connected, `on_connected()` is
/// called (it waits on the drivers' shared barrier) and returns the
/// CLOCK_MONOTONIC ns to start at.
pub(crate) fn drive<P: Protocol>(
    py: Python<'_>,
    cfg: HarnessConfig,
    protocol: P,
    progress: Option<Bound<'_, PyAny>>,
    cancel: Option<Bound<'_, PyAny>>,
    on_connected: Option<Bound<'_, PyAny>>,
) -> PyResult<DriverResult> {
    let run = registry::start(cfg, protocol, on_connected.is_some()).map_err(engine_error)?;
    poll(py, run, progress, cancel, on_connected)
}

/// Poll a started run to its end (`drive`): progress each second, the gate,
/// signals and `cancel`; the run's figures, or the error that stopped it.
pub(crate) fn poll(
    py: Python<'_>,
    run: Box<dyn Running>,
    progress: Option<Bound<'_, PyAny>>,
    cancel: Option<Bound<'_, PyAny>>,
    on_connected: Option<Bound<'_, PyAny>>,
) -> PyResult<DriverResult> {
    let mut gate = on_connected;
    loop {
        let step = py.detach(|| run.next_progress(POLL_INTERVAL));
        let stop = check_stop(py, cancel.as_ref())
            .and_then(|()| match gate.as_ref() {
                Some(callback) if run.connected() => {
                    let at: u64 = callback.call0()?.extract()?;
                    gate = None;
                    run.go_at(at);
                    Ok(())
                }
                _ => Ok(()),
            })
            .and_then(|()| match (&step, &progress) {
                (Progress::Interval(report), Some(callback)) => {
                    callback.call1((Interval::new(py, report)?,)).map(|_| ())
                }
                _ => Ok(()),
            });
        if let Err(err) = stop {
            run.abort();
            let _ = py.detach(move || run.join());
            return Err(err);
        }
        if matches!(step, Progress::Finished) {
            break;
        }
    }
    let summary = py.detach(move || run.join()).map_err(engine_error)?;
    DriverResult::new(py, &summary)
}

enum Message<R> {
    Step(String),
    Done(R),
}

/// Run `job` on a thread named `name` with the GIL released. The job gets an
/// abort flag, which is set when a signal or `cancel` says stop (it should
/// then return soon, between chunks), and a step callback whose names go to
/// `on_step(name)` on the calling thread. Returns what the job returned, or
/// the error that stopped it (after the job has returned).
pub(crate) fn run_blocking<R: Send>(
    py: Python<'_>,
    name: &str,
    cancel: Option<&Bound<'_, PyAny>>,
    on_step: Option<&Bound<'_, PyAny>>,
    job: impl FnOnce(&AtomicBool, &mut dyn FnMut(&str)) -> R + Send,
) -> PyResult<R> {
    let abort = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel();
    let rx = Mutex::new(rx);
    std::thread::scope(|scope| {
        let abort = &abort;
        let worker = std::thread::Builder::new()
            .name(name.to_string())
            .spawn_scoped(scope, move || {
                let step_tx = tx.clone();
                let result = job(abort, &mut |step: &str| {
                    let _ = step_tx.send(Message::Step(step.to_string()));
                });
                let _ = tx.send(Message::Done(result));
            })
            .map_err(|e| EngineError::new_err(format!("cannot start a thread: {e}")))?;
        loop {
            let message = py.detach(|| rx.lock().unwrap().recv_timeout(POLL_INTERVAL));
            let mut checked = check_stop(py, cancel);
            match message {
                Ok(Message::Step(step)) => {
                    if let (Ok(()), Some(callback)) = (&checked, on_step) {
                        checked = callback.call1((step,)).map(|_| ());
                    }
                }
                Ok(Message::Done(result)) => {
                    let _ = py.detach(|| worker.join());
                    return Ok(result);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let _ = py.detach(|| worker.join());
                    return Err(EngineError::new_err(format!("{name} panicked")));
                }
            }
            if let Err(err) = checked {
                abort.store(true, Ordering::SeqCst);
                let _ = py.detach(|| worker.join());
                return Err(err);
            }
        }
    })
}
