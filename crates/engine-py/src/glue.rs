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
//! - `poll`: a run already started (a declared workload's, `workloads.rs`).
//!
//! The harness settings and the driver bindings' macro are `harness.rs`.

use crate::errors::{engine_error, EngineError, Interrupted};
use crate::results::{DriverResult, Interval};
use perflab_engine::harness::registry::{self, Running};
use perflab_engine::harness::{HarnessConfig, Progress, Protocol};
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
