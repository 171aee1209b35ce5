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
//! - `HarnessArgs`: the harness settings every driver binding takes.

use crate::errors::{config_error, engine_error, EngineError, Interrupted};
use crate::results::{DriverResult, Interval};
use perflab_engine::harness::{HarnessConfig, Progress, Protocol, Run};
use pyo3::prelude::*;
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
}

impl HarnessArgs<'_> {
    /// The harness's config; ConfigError names a bad schedule or io.
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
        })
    }
}

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
    let run = match on_connected {
        Some(_) => Run::start_gated(cfg, protocol),
        None => Run::start(cfg, protocol),
    }
    .map_err(engine_error)?;
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
            let _ = py.detach(|| run.join());
            return Err(err);
        }
        if matches!(step, Progress::Finished) {
            break;
        }
    }
    let summary = py.detach(|| run.join()).map_err(engine_error)?;
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
