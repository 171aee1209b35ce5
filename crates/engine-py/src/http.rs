//! Bindings of the web workload: the SPECweb99-like file set (layout and
//! cached generation) and the HTTP/1.1 driver (the harness with
//! `HttpProtocol`). Glue only; see `perflab_engine::http`.

use crate::errors::{config_error, engine_error, EngineError};
use crate::results::DriverResult;
use crate::tpcb::{check_cancel, drive_gated, harness_config, POLL_INTERVAL};
use perflab_engine::http::fileset::{self, Prepared};
use perflab_engine::http::{HttpConfig, HttpProtocol};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A file set found in the cache or generated into it.
#[pyclass(module = "perflab._engine", frozen, get_all)]
pub struct FileSetReport {
    pub root: String,
    pub dirs: u32,
    pub files: u64,
    pub size_bytes: u64,
    pub generated: bool,
    pub seconds: f64,
}

impl From<Prepared> for FileSetReport {
    fn from(p: Prepared) -> Self {
        FileSetReport {
            root: p.root.display().to_string(),
            dirs: p.dirs,
            files: p.files,
            size_bytes: p.bytes,
            generated: p.generated,
            seconds: p.seconds,
        }
    }
}

/// Directories of a file set: from a size in bytes, or by SPECweb99's rule
/// from a number of connections.
#[pyfunction]
#[pyo3(signature = (*, size_bytes=None, connections=None))]
fn fileset_dirs(size_bytes: Option<u64>, connections: Option<u32>) -> PyResult<u32> {
    match (size_bytes, connections) {
        (Some(b), None) => Ok(fileset::dirs_for_size(b)),
        (None, Some(c)) => Ok(fileset::dirs_for_connections(c)),
        _ => Err(config_error(
            "give the file set's size or its connections, one of them",
        )),
    }
}

/// Bytes of one directory of the file set (36 files).
#[pyfunction]
fn fileset_dir_bytes() -> u64 {
    fileset::dir_bytes()
}

/// Size in bytes of file `file` of class `class`.
#[pyfunction]
fn fileset_file_size(class_: usize, file: usize) -> PyResult<u64> {
    if class_ >= fileset::CLASSES || file >= fileset::FILES_PER_CLASS {
        return Err(config_error(format!(
            "class {class_} file {file} is not in the layout; allowed: class 0..3, file 0..8"
        )));
    }
    Ok(fileset::file_size(class_, file))
}

/// The first `count` request paths ("dir00003/class1_4") perflab's chooser
/// draws from `seed`: the mix a peer tool (wrk's Lua) can replay.
#[pyfunction]
fn fileset_request_paths(dirs: u32, seed: u64, count: usize) -> PyResult<Vec<String>> {
    if dirs == 0 {
        return Err(config_error("dirs must be at least 1"));
    }
    let chooser = fileset::Chooser::new(dirs);
    let mut rng = perflab_engine::random::Prng::seeded(seed);
    Ok((0..count)
        .map(|_| {
            let (class, dir, file) = chooser.choose(&mut rng);
            fileset::relative_path(dir, class, file)
        })
        .collect())
}

/// The file set of `dirs` directories from `seed` in `cache_dir`: reused
/// when complete and of the right sizes, else generated on `jobs` threads.
#[pyfunction]
#[pyo3(signature = (cache_dir, *, dirs, seed, jobs, cancel=None))]
fn fileset_prepare<'py>(
    py: Python<'py>,
    cache_dir: PathBuf,
    dirs: u32,
    seed: u64,
    jobs: u32,
    cancel: Option<Bound<'py, PyAny>>,
) -> PyResult<FileSetReport> {
    let abort = Arc::new(AtomicBool::new(false));
    let thread_abort = abort.clone();
    let worker = std::thread::Builder::new()
        .name("perflab-fileset".into())
        .spawn(move || fileset::prepare(&cache_dir, dirs, seed, jobs, &thread_abort))
        .map_err(|e| EngineError::new_err(format!("cannot start a thread: {e}")))?;
    loop {
        if worker.is_finished() {
            break;
        }
        py.detach(|| std::thread::sleep(POLL_INTERVAL / 4));
        if let Err(err) = py
            .check_signals()
            .and_then(|()| check_cancel(cancel.as_ref()))
        {
            abort.store(true, Ordering::SeqCst);
            let _ = py.detach(|| worker.join());
            return Err(err);
        }
    }
    let result = worker
        .join()
        .map_err(|_| EngineError::new_err("the file set generator panicked"))?;
    Ok(result.map_err(engine_error)?.into())
}

/// Drive HTTP/1.1 GETs of the file set through the harness; by_type is the
/// four classes, each with its body bytes.
#[pyfunction]
#[pyo3(signature = (
    address, *, host, dirs, clients, threads, t0_ns, prefix="/", duration_s=None,
    transactions=None, warmup_s=0.0, rate_tps=None, schedule="poisson", latency_limit_ms=None,
    seed=0, requests_per_connection=None, connect_timeout_s=5.0, request_timeout_s=30.0,
    think_time_s=None, only=None, client="own", io="epoll", progress=None, cancel=None,
    on_connected=None
))]
#[allow(clippy::too_many_arguments)]
fn http_run<'py>(
    py: Python<'py>,
    address: &str,
    host: String,
    dirs: u32,
    clients: u32,
    threads: u32,
    t0_ns: u64,
    prefix: &str,
    duration_s: Option<f64>,
    transactions: Option<u64>,
    warmup_s: f64,
    rate_tps: Option<f64>,
    schedule: &str,
    latency_limit_ms: Option<f64>,
    seed: u64,
    requests_per_connection: Option<u32>,
    connect_timeout_s: f64,
    request_timeout_s: f64,
    think_time_s: Option<f64>,
    only: Option<(u32, usize, usize)>,
    client: &str,
    io: &str,
    progress: Option<Bound<'py, PyAny>>,
    cancel: Option<Bound<'py, PyAny>>,
    on_connected: Option<Bound<'py, PyAny>>,
) -> PyResult<DriverResult> {
    let addr = address.parse().map_err(|_| {
        config_error(format!(
            "address {address:?} is not allowed; allowed: IP:port"
        ))
    })?;
    let seconds = |name: &str, s: f64| {
        if s.is_finite() && s > 0.0 {
            Ok(Duration::from_secs_f64(s))
        } else {
            Err(config_error(format!("{name} {s} s must be > 0")))
        }
    };
    if requests_per_connection == Some(0) {
        return Err(config_error("requests_per_connection must be at least 1"));
    }
    if let Some((dir, class, file)) = only {
        if dir >= dirs || class >= fileset::CLASSES || file >= fileset::FILES_PER_CLASS {
            return Err(config_error(format!(
                "only = ({dir}, {class}, {file}) is not in a set of {dirs} directories"
            )));
        }
    }
    let cfg = harness_config(
        clients,
        threads,
        t0_ns,
        duration_s,
        transactions,
        warmup_s,
        rate_tps,
        schedule,
        latency_limit_ms,
        1,
        seed,
        io,
    )?;
    let protocol = HttpProtocol::new(HttpConfig {
        addr,
        host,
        prefix: prefix.to_string(),
        dirs,
        requests_per_connection,
        connect_timeout: seconds("connect_timeout", connect_timeout_s)?,
        request_timeout: seconds("request_timeout", request_timeout_s)?,
        think_time: think_time_s.map(|s| seconds("think_time", s)).transpose()?,
        only,
    });
    match client {
        "own" => drive_gated(py, cfg, protocol, progress, cancel, on_connected),
        #[cfg(feature = "hyper-client")]
        "hyper" => {
            let protocol = perflab_engine::http::hyper_client::HyperProtocol::new(protocol);
            drive_gated(py, cfg, protocol, progress, cancel, on_connected)
        }
        #[cfg(not(feature = "hyper-client"))]
        "hyper" => Err(config_error(
            "client = \"hyper\": this engine was built without hyper; build perflab-engine-py \
             with --features hyper-client",
        )),
        other => Err(config_error(format!(
            "client {other:?} is not allowed; allowed: own, hyper"
        ))),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FileSetReport>()?;
    m.add_function(wrap_pyfunction!(fileset_dirs, m)?)?;
    m.add_function(wrap_pyfunction!(fileset_dir_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(fileset_file_size, m)?)?;
    m.add_function(wrap_pyfunction!(fileset_prepare, m)?)?;
    m.add_function(wrap_pyfunction!(fileset_request_paths, m)?)?;
    m.add_function(wrap_pyfunction!(http_run, m)?)?;
    Ok(())
}
